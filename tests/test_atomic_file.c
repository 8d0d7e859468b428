/* Atomic file replacement (src/io/atomic_file.c), beyond what the checkpoint and .npy tests
 * cover: a symlinked destination is written through (the link stays, its target gets the new
 * content, the temporary file sits beside the target), an existing file keeps its mode, a new one
 * gets 0666 minus the umask, and the temporary files that killed writers leave behind are removed
 * by the next write of the same target, never those of live processes or of other targets. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "checkpoint_test_util.h"
#include "eagle.h"
#include "io/atomic_file.h"

static char dir[PATH_MAX + 32]; /* a fresh directory per test */

static int group_setup(void **state) {
    (void)state;
    return make_temp_dir("eagle_test_atomic");
}

static int group_teardown(void **state) {
    (void)state;
    return remove_temp_dir();
}

static int case_setup(void **state) {
    (void)state;
    static int n;
    snprintf(dir, sizeof dir, "%s/case%d", temp_dir, ++n);
    eg_clear_error();
    return mkdir(dir, 0700);
}

/* name inside this case's directory */
static void case_path(char *out, size_t size, const char *name) {
    int n = snprintf(out, size, "%s/%s", dir, name);
    assert_true(n > 0 && (size_t)n < size);
}

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    assert_true(fputs(text, f) >= 0);
    assert_int_equal(fclose(f), 0);
}

/* The file's whole content, as a string in buf. */
static const char *read_text(const char *path, char *buf, size_t size) {
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    size_t n = fread(buf, 1, size - 1, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

static eg_status save_text(const char *path, const char *text) {
    eg__atomic_file file;
    eg_status status = eg__atomic_open(&file, path);
    if (status != EG_OK) return status;
    eg__atomic_write(&file, text, strlen(text));
    return eg__atomic_commit(&file);
}

static bool is_symlink(const char *path) {
    struct stat st;
    return lstat(path, &st) == 0 && S_ISLNK(st.st_mode);
}

static bool exists(const char *path) {
    struct stat st;
    return lstat(path, &st) == 0;
}

static unsigned mode_of(const char *path) {
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    return (unsigned)(st.st_mode & 07777);
}

/* `--save link` where link -> real: real gets the new weights, the link stays a link. */
static void test_symlink_written_through(void **state) {
    (void)state;
    char real[PATH_MAX], link[PATH_MAX], buf[64];
    case_path(real, sizeof real, "real.safetensors");
    case_path(link, sizeof link, "link.safetensors");
    write_text(real, "old");
    assert_int_equal(symlink("real.safetensors", link), 0); /* relative to the link's directory */
    assert_int_equal(save_text(link, "new"), EG_OK);
    assert_true(is_symlink(link));
    assert_string_equal(read_text(real, buf, sizeof buf), "new");
    assert_int_equal(count_temp_files(dir), 0);

    /* a chain of links, the last one into another directory: the temporary file is made beside
     * the target (a rename only works within one file system) */
    char other[PATH_MAX], target[PATH_MAX + 16], hop[PATH_MAX];
    case_path(other, sizeof other, "elsewhere");
    assert_int_equal(mkdir(other, 0700), 0);
    snprintf(target, sizeof target, "%s/weights", other);
    write_text(target, "old");
    case_path(hop, sizeof hop, "hop");
    assert_int_equal(symlink(target, hop), 0);
    char chain[PATH_MAX];
    case_path(chain, sizeof chain, "chain");
    assert_int_equal(symlink("hop", chain), 0);
    eg__atomic_file file;
    assert_int_equal(eg__atomic_open(&file, chain), EG_OK);
    assert_string_equal(file.target, target);
    assert_int_equal(strncmp(file.temp_path, target, strlen(target)), 0);
    assert_int_equal(count_temp_files(other), 1);
    eg__atomic_write(&file, "newer", 5);
    assert_int_equal(eg__atomic_commit(&file), EG_OK);
    assert_true(is_symlink(chain) && is_symlink(hop));
    assert_string_equal(read_text(target, buf, sizeof buf), "newer");
    assert_int_equal(count_temp_files(other), 0);
    assert_int_equal(count_temp_files(dir), 0);

    /* a dangling link: its target is created */
    char dangling[PATH_MAX], missing[PATH_MAX];
    case_path(dangling, sizeof dangling, "dangling");
    case_path(missing, sizeof missing, "created-through-link");
    assert_int_equal(symlink("created-through-link", dangling), 0);
    assert_int_equal(save_text(dangling, "fresh"), EG_OK);
    assert_true(is_symlink(dangling));
    assert_string_equal(read_text(missing, buf, sizeof buf), "fresh");
}

static void test_symlink_loop_is_an_error(void **state) {
    (void)state;
    char a[PATH_MAX], b[PATH_MAX];
    case_path(a, sizeof a, "a");
    case_path(b, sizeof b, "b");
    assert_int_equal(symlink("b", a), 0);
    assert_int_equal(symlink("a", b), 0);
    assert_int_equal(save_text(a, "x"), EG_ERR_IO);
    assert_error_contains(EG_ERR_IO, "symlink loop");
    assert_true(is_symlink(a) && is_symlink(b));
    assert_int_equal(count_temp_files(dir), 0);
}

/* A 0600 checkpoint stays 0600 (it came back 0644), whatever the umask; a new file gets 0666
 * minus the umask. */
static void test_mode_kept(void **state) {
    (void)state;
    char path[PATH_MAX], fresh[PATH_MAX];
    case_path(path, sizeof path, "private.safetensors");
    mode_t old_umask = umask(022);
    write_text(path, "old");
    assert_int_equal(chmod(path, 0600), 0);
    assert_int_equal(save_text(path, "new"), EG_OK);
    assert_int_equal(mode_of(path), 0600);
    /* more permissive than the umask allows for new files: kept too */
    assert_int_equal(chmod(path, 0664), 0);
    assert_int_equal(save_text(path, "newer"), EG_OK);
    assert_int_equal(mode_of(path), 0664);
    /* through a symlink: the target's mode */
    char link[PATH_MAX];
    case_path(link, sizeof link, "link");
    assert_int_equal(symlink("private.safetensors", link), 0);
    assert_int_equal(chmod(path, 0640), 0);
    assert_int_equal(save_text(link, "newest"), EG_OK);
    assert_int_equal(mode_of(path), 0640);

    umask(027);
    case_path(fresh, sizeof fresh, "fresh.safetensors");
    assert_int_equal(save_text(fresh, "x"), EG_OK);
    assert_int_equal(mode_of(fresh), 0640);
    umask(old_umask);
}

/* The public save goes through the same path. */
static void test_safetensors_save_through_symlink(void **state) {
    (void)state;
    char real[PATH_MAX], link[PATH_MAX];
    case_path(real, sizeof real, "model.safetensors");
    case_path(link, sizeof link, "latest.safetensors");
    write_text(real, "not yet a checkpoint");
    assert_int_equal(chmod(real, 0600), 0);
    assert_int_equal(symlink("model.safetensors", link), 0);
    eg_tensor *t = eg_ones(EG_DTYPE_F32, 1, (int64_t[]){3});
    const char *name = "w";
    assert_int_equal(eg_safetensors_save(link, 1, &name, &t, 0, NULL, NULL), EG_OK);
    eg_release(t);
    assert_true(is_symlink(link));
    assert_int_equal(mode_of(real), 0600);
    eg_safetensors *file = eg_safetensors_open(real);
    assert_non_null(file);
    assert_int_equal(eg_safetensors_count(file), 1);
    eg_safetensors_close(file);
}

/* A FIFO (or device) is never replaced by a regular file. */
static void test_special_file_refused(void **state) {
    (void)state;
    char fifo[PATH_MAX];
    case_path(fifo, sizeof fifo, "fifo");
    assert_int_equal(mkfifo(fifo, 0600), 0);
    assert_int_equal(save_text(fifo, "x"), EG_ERR_IO);
    assert_error_contains(EG_ERR_IO, "not a regular file");
    struct stat st;
    assert_int_equal(lstat(fifo, &st), 0);
    assert_true(S_ISFIFO(st.st_mode));
    assert_int_equal(count_temp_files(dir), 0);
}

static void test_stale_name_rule(void **state) {
    (void)state;
    char name[128];
    long dead = (long)dead_pid();
    snprintf(name, sizeof name, "f.tmp.%ld.12", dead);
    assert_true(eg__temp_name_is_stale(name, "f.tmp.", ""));
    assert_false(eg__temp_name_is_stale(name, "g.tmp.", ""));
    snprintf(name, sizeof name, "f.tmp.%ld.12.x", dead);
    assert_false(eg__temp_name_is_stale(name, "f.tmp.", ""));
    snprintf(name, sizeof name, "f.tmp.%ld.", dead);
    assert_false(eg__temp_name_is_stale(name, "f.tmp.", ""));
    snprintf(name, sizeof name, "f.tmp.%ld", dead);
    assert_false(eg__temp_name_is_stale(name, "f.tmp.", ""));
    snprintf(name, sizeof name, "f.tmp.+%ld.1", dead);
    assert_false(eg__temp_name_is_stale(name, "f.tmp.", ""));
    snprintf(name, sizeof name, "f.tmp.%ld.1", (long)getpid()); /* alive */
    assert_false(eg__temp_name_is_stale(name, "f.tmp.", ""));
    assert_false(eg__temp_name_is_stale("f.tmp.1.1", "f.tmp.", "")); /* init: alive */
    assert_false(eg__temp_name_is_stale("f.tmp.0.1", "f.tmp.", ""));
    assert_false(eg__temp_name_is_stale("f.tmp.99999999999999999999.1", "f.tmp.", ""));
    snprintf(name, sizeof name, "e.idx.%ld.3.tmp", dead);
    assert_true(eg__temp_name_is_stale(name, "e.idx.", ".tmp"));
    assert_false(eg__temp_name_is_stale(name, "e.idx.", ""));
}

/* The path of the file in dir whose name starts with prefix. */
static bool find_file(const char *prefix, char *path, size_t size) {
    DIR *handle = opendir(dir);
    assert_non_null(handle);
    bool found = false;
    for (struct dirent *e; !found && (e = readdir(handle));)
        if (!strncmp(e->d_name, prefix, strlen(prefix))) {
            snprintf(path, size, "%s/%s", dir, e->d_name);
            found = true;
        }
    closedir(handle);
    return found;
}

/* A writer killed between open and commit leaves "<target>.tmp.<pid>.<n>": the next write of the
 * same target removes it. A live process's temporary file (this one's, a sleeping child's), other
 * targets' and names that only look alike stay. */
static void test_stale_temporary_files_removed(void **state) {
    (void)state;
    char target[PATH_MAX];
    case_path(target, sizeof target, "checkpoint.safetensors");
    assert_int_equal(save_text(target, "v1"), EG_OK);

    /* killed mid-write: the child opens and writes, then dies without committing */
    pid_t killed = fork();
    assert_true(killed >= 0);
    if (killed == 0) {
        eg__atomic_file file;
        if (eg__atomic_open(&file, target) != EG_OK) _exit(1);
        eg__atomic_write(&file, "half", 4);
        fflush(file.stream);
        _exit(0);
    }
    int status;
    assert_int_equal(waitpid(killed, &status, 0), killed);
    assert_int_equal(status, 0);
    char prefix[64], left[PATH_MAX + 300];
    snprintf(prefix, sizeof prefix, "checkpoint.safetensors.tmp.%ld.", (long)killed);
    assert_true(find_file(prefix, left, sizeof left));

    /* a child that is still running, and has a temporary file */
    int pipe_fds[2];
    assert_int_equal(pipe(pipe_fds), 0);
    pid_t sleeper = fork();
    assert_true(sleeper >= 0);
    if (sleeper == 0) {
        close(pipe_fds[1]);
        char c;
        _exit(read(pipe_fds[0], &c, 1) < 0);
    }
    close(pipe_fds[0]);
    long dead = (long)dead_pid();
    char live_child[PATH_MAX + 64], live_self[PATH_MAX + 64], other[PATH_MAX + 128],
        alike[PATH_MAX + 64], link[PATH_MAX + 64];
    snprintf(live_child, sizeof live_child, "%s.tmp.%ld.0", target, (long)sleeper);
    snprintf(live_self, sizeof live_self, "%s.tmp.%ld.99", target, (long)getpid());
    snprintf(other, sizeof other, "%s/other.safetensors.tmp.%ld.0", dir, dead);
    snprintf(alike, sizeof alike, "%s.tmp.%ld.0.bak", target, dead);
    snprintf(link, sizeof link, "%s.tmp.%ld.1", target, dead);
    write_text(live_child, "live");
    write_text(live_self, "live");
    write_text(other, "other target");
    write_text(alike, "not ours");
    assert_int_equal(symlink("checkpoint.safetensors", link), 0); /* not a regular file */

    assert_int_equal(save_text(target, "v2"), EG_OK);
    assert_false(exists(left));
    assert_true(exists(live_child));
    assert_true(exists(live_self));
    assert_true(exists(other));
    assert_true(exists(alike));
    assert_true(exists(link));
    char buf[16];
    assert_string_equal(read_text(target, buf, sizeof buf), "v2");

    close(pipe_fds[1]); /* the sleeper exits */
    assert_int_equal(waitpid(sleeper, &status, 0), sleeper);
    /* now dead too: the next write removes its file */
    assert_int_equal(save_text(target, "v3"), EG_OK);
    assert_false(exists(live_child));
    assert_true(exists(live_self));
    unlink(live_self);

    /* through a symlink, the target's directory is the one cleaned */
    char sub[PATH_MAX], real[PATH_MAX + 16], via[PATH_MAX], stale[PATH_MAX + 128];
    case_path(sub, sizeof sub, "sub");
    assert_int_equal(mkdir(sub, 0700), 0);
    snprintf(real, sizeof real, "%s/real", sub);
    case_path(via, sizeof via, "via");
    assert_int_equal(symlink("sub/real", via), 0);
    snprintf(stale, sizeof stale, "%s.tmp.%ld.4", real, dead);
    write_text(stale, "stale");
    assert_int_equal(save_text(via, "x"), EG_OK);
    assert_false(exists(stale));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_symlink_written_through, case_setup),
        cmocka_unit_test_setup(test_symlink_loop_is_an_error, case_setup),
        cmocka_unit_test_setup(test_mode_kept, case_setup),
        cmocka_unit_test_setup(test_safetensors_save_through_symlink, case_setup),
        cmocka_unit_test_setup(test_special_file_refused, case_setup),
        cmocka_unit_test_setup(test_stale_name_rule, case_setup),
        cmocka_unit_test_setup(test_stale_temporary_files_removed, case_setup),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
