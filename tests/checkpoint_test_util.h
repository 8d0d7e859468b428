/* Helpers shared by the tests that write files (checkpoints, .npy, atomic writes, the IDX cache):
 * a fresh temporary directory per program, whole-file reads and writes, a check that no
 * atomic-write temporary file was left behind, a pid that no process has, and a way to make writes
 * fail midway (RLIMIT_FSIZE: the kernel refuses to grow any file past the limit with EFBIG, as a
 * full disk would with ENOSPC). Include after <cmocka.h>. Header-only and static inline: a test
 * that uses part of it gets no unused-function warnings. */
#ifndef EAGLE_TESTS_CHECKPOINT_TEST_UTIL_H
#define EAGLE_TESTS_CHECKPOINT_TEST_UTIL_H

#include <dirent.h>
#include <ftw.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "eagle/status.h"
#include "eagle/tensor.h"

static char temp_dir[PATH_MAX];

static inline void join(char *out, size_t size, const char *name) {
    int n = snprintf(out, size, "%s/%s", temp_dir, name);
    assert_true(n > 0 && (size_t)n < size);
}

static inline void write_bytes(const char *path, const void *bytes, size_t n) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    if (n) assert_int_equal(fwrite(bytes, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
}

/* The whole file, NUL-terminated one past the end (so text files can be used as strings). */
static inline uint8_t *read_whole(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    assert_int_equal(fseek(f, 0, SEEK_END), 0);
    long size = ftell(f);
    assert_true(size >= 0);
    rewind(f);
    uint8_t *bytes = malloc((size_t)size + 1);
    assert_non_null(bytes);
    if (size) assert_int_equal(fread(bytes, 1, (size_t)size, f), (size_t)size);
    bytes[size] = 0;
    fclose(f);
    *n = (size_t)size;
    return bytes;
}

static inline bool file_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

/* Number of entries in dir whose name contains ".tmp." (atomic-write leftovers). */
static inline int count_temp_files(const char *dir) {
    DIR *d = opendir(dir);
    assert_non_null(d);
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        if (strstr(e->d_name, ".tmp.")) n++;
    closedir(d);
    return n;
}

static inline int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

static inline int make_temp_dir(const char *prefix) {
    const char *base = getenv("TMPDIR");
    snprintf(temp_dir, sizeof temp_dir, "%s/%s-XXXXXX", base && *base ? base : "/tmp", prefix);
    return mkdtemp(temp_dir) ? 0 : -1;
}

static inline int remove_temp_dir(void) {
    return nftw(temp_dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* A pid that no process has: a child's, once it has exited and been waited for. */
static inline pid_t dead_pid(void) {
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) _exit(0);
    assert_int_equal(waitpid(pid, NULL, 0), pid);
    return pid;
}

static inline int clear_error_setup(void **state) {
    (void)state;
    eg_clear_error();
    return 0;
}

/* The pending error's status is `status` and its message starts with `prefix` (the rest is the
 * " at file:line" suffix). */
#define assert_error(status, prefix)                                                               \
    do {                                                                                           \
        assert_int_equal(eg_last_status(), (status));                                              \
        const char *message_ = eg_last_error();                                                    \
        if (strncmp(message_, (prefix), strlen(prefix)) != 0)                                      \
            fail_msg("error message\n  \"%s\"\ndoes not start with\n  \"%s\"", message_,           \
                     (prefix));                                                                    \
        eg_clear_error();                                                                          \
    } while (0)

/* The pending error's status is `status` and its message contains `part`. */
#define assert_error_contains(status, part)                                                        \
    do {                                                                                           \
        assert_int_equal(eg_last_status(), (status));                                              \
        const char *message_ = eg_last_error();                                                    \
        if (!strstr(message_, (part)))                                                             \
            fail_msg("error message\n  \"%s\"\ndoes not contain\n  \"%s\"", message_, (part));     \
        eg_clear_error();                                                                          \
    } while (0)

/* Limits the size of any file this process writes to `bytes` (SIGXFSZ ignored, so the write
 * fails with EFBIG instead of killing the process); restore with the returned old limit. */
static inline struct rlimit limit_file_size(rlim_t bytes) {
    struct rlimit old, limited;
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
    limited = old;
    limited.rlim_cur = bytes;
    signal(SIGXFSZ, SIG_IGN);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &limited), 0);
    return old;
}

static inline void restore_file_size(struct rlimit old) {
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
    signal(SIGXFSZ, SIG_DFL);
}

/* Element-wise byte equality of two tensors' row-major contents, and equal dtype and shape. */
static inline void assert_same_tensor(const eg_tensor *expected, const eg_tensor *actual) {
    assert_non_null(actual);
    assert_int_equal(eg_tensor_dtype(actual), eg_tensor_dtype(expected));
    assert_int_equal(eg_tensor_n_dims(actual), eg_tensor_n_dims(expected));
    for (int i = 0; i < eg_tensor_n_dims(expected); i++)
        assert_int_equal(eg_tensor_shape(actual)[i], eg_tensor_shape(expected)[i]);
    assert_true(eg_tensor_is_contiguous(actual));
    size_t n = (size_t)eg_tensor_n_elems(expected) * eg_dtype_size(eg_tensor_dtype(expected));
    uint8_t *a = malloc(n + 1), *b = malloc(n + 1);
    assert_non_null(a);
    assert_non_null(b);
    assert_int_equal(eg_tensor_copy_to_host(expected, a, n), EG_OK);
    assert_int_equal(eg_tensor_copy_to_host(actual, b, n), EG_OK);
    assert_memory_equal(a, b, n);
    free(a);
    free(b);
}

#endif
