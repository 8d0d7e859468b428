/* The decompressed-IDX cache (src/io/idx_cache.c): a gzip IDX file read once leaves an entry
 * that later reads map in place; a stale, corrupt, truncated or foreign entry is never used (the
 * source is read again and the entry rewritten), and a cache that cannot be written changes
 * nothing but speed. Every test uses its own cache directory under a temporary directory. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include "base/error.h"
#include "checkpoint_test_util.h"
#include "eagle.h"

static char cache_dir[PATH_MAX + 32], data_dir[PATH_MAX + 32];

static int group_setup(void **state) {
    (void)state;
    return make_temp_dir("eagle_idx_cache");
}

static int group_teardown(void **state) {
    (void)state;
    return remove_temp_dir();
}

/* A fresh data directory and cache directory per test. */
static int case_setup(void **state) {
    static int n;
    n++;
    snprintf(data_dir, sizeof data_dir, "%s/data%d", temp_dir, n);
    snprintf(cache_dir, sizeof cache_dir, "%s/cache%d/eagle", temp_dir, n);
    assert_int_equal(mkdir(data_dir, 0700), 0);
    setenv("EG_IDX_CACHE", cache_dir, 1);
    eg_clear_error();
    (void)state;
    return 0;
}

/* Writes an IDX u8 file of n_images side x side images (pixel value (i * 7 + r + c + seed) %
 * 256) as gzip, and its labels (plain gzip too); returns the images path. */
static void write_gz(const char *path, const uint8_t *bytes, size_t n) {
    gzFile gz = gzopen(path, "wb");
    assert_non_null(gz);
    assert_int_equal(gzwrite(gz, bytes, (unsigned)n), (int)n);
    assert_int_equal(gzclose(gz), Z_OK);
}

static uint8_t *make_images(uint32_t n_images, int seed, size_t *n_bytes) {
    size_t pixels = (size_t)n_images * 28 * 28;
    uint8_t *bytes = malloc(16 + pixels);
    assert_non_null(bytes);
    const uint8_t header[16] = {0,
                                0,
                                8,
                                3,
                                (uint8_t)(n_images >> 24),
                                (uint8_t)(n_images >> 16),
                                (uint8_t)(n_images >> 8),
                                (uint8_t)n_images,
                                0,
                                0,
                                0,
                                28,
                                0,
                                0,
                                0,
                                28};
    memcpy(bytes, header, 16);
    for (size_t i = 0; i < pixels; i++) bytes[16 + i] = (uint8_t)(i * 7 + (size_t)seed);
    *n_bytes = 16 + pixels;
    return bytes;
}

static void make_split(uint32_t n_images, int seed) {
    size_t n;
    uint8_t *images = make_images(n_images, seed, &n);
    char path[PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/train-images-idx3-ubyte.gz", data_dir);
    write_gz(path, images, n);
    free(images);
    uint8_t labels[8 + 256];
    const uint8_t header[8] = {0, 0, 8, 1, 0, 0, 0, (uint8_t)n_images};
    memcpy(labels, header, 8);
    for (uint32_t i = 0; i < n_images; i++) labels[8 + i] = (uint8_t)((i + (uint32_t)seed) % 10);
    snprintf(path, sizeof path, "%s/train-labels-idx1-ubyte.gz", data_dir);
    write_gz(path, labels, 8 + n_images);
}

/* Loads the split and checks every pixel and label against what make_split(n, seed) wrote. */
static void load_and_check(uint32_t n_images, int seed) {
    eg_tensor *images = NULL, *labels = NULL;
    assert_int_equal(eg_mnist_load(data_dir, true, &images, &labels), EG_OK);
    assert_int_equal(eg_tensor_shape(images)[0], n_images);
    const uint8_t *pixels = eg_tensor_data(images);
    assert_int_equal((uintptr_t)pixels % 64, 0);
    for (size_t i = 0; i < (size_t)n_images * 28 * 28; i++)
        if (pixels[i] != (uint8_t)(i * 7 + (size_t)seed)) fail_msg("pixel %zu differs", i);
    const uint8_t *classes = eg_tensor_data(labels);
    for (uint32_t i = 0; i < n_images; i++) assert_int_equal(classes[i], (i + (uint32_t)seed) % 10);
    eg_release(images);
    eg_release(labels);
    assert_false(eg__error_pending());
}

/* The path of the cache entry whose name starts with prefix (there is one per source). */
static bool entry_of(const char *prefix, char *path, size_t size) {
    DIR *dir = opendir(cache_dir);
    if (!dir) return false;
    bool found = false;
    for (struct dirent *e; !found && (e = readdir(dir));) {
        if (strncmp(e->d_name, prefix, strlen(prefix)) != 0) continue;
        snprintf(path, size, "%s/%s", cache_dir, e->d_name);
        found = true;
    }
    closedir(dir);
    return found;
}

static long file_size(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 ? (long)st.st_size : -1;
}

static void overwrite_byte(const char *path, long offset, uint8_t value) {
    FILE *f = fopen(path, "r+b");
    assert_non_null(f);
    assert_int_equal(fseek(f, offset, SEEK_SET), 0);
    assert_int_equal(fputc(value, f), value);
    assert_int_equal(fclose(f), 0);
}

static void test_entry_written_then_used(void **state) {
    (void)state;
    make_split(20, 1);
    load_and_check(20, 1); /* from the .gz; leaves the entries */
    char entry[PATH_MAX + 300];
    assert_true(entry_of("train-images-idx3-ubyte-", entry, sizeof entry));
    assert_true(file_size(entry) > 20 * 28 * 28);
    assert_true(entry_of("train-labels-idx1-ubyte-", entry, sizeof entry));
    load_and_check(20, 1); /* from the entries, in place */
    /* A tensor over an entry may be written: the entry itself never changes. */
    eg_tensor *images, *labels;
    assert_int_equal(eg_mnist_load(data_dir, true, &images, &labels), EG_OK);
    memset(eg_tensor_data(images), 0xee, 100);
    eg_release(images);
    eg_release(labels);
    load_and_check(20, 1);
}

/* A corrupt byte in an entry's data, a cut entry, a changed header: the source is read again
 * and the entry rewritten. */
static void test_corrupt_or_truncated_entry(void **state) {
    (void)state;
    make_split(30, 2);
    load_and_check(30, 2);
    char entry[PATH_MAX + 300];
    assert_true(entry_of("train-images-idx3-ubyte-", entry, sizeof entry));
    long size = file_size(entry);
    overwrite_byte(entry, size - 5, 0x55 ^ (uint8_t)((30 * 784 - 5) * 7 + 2));
    load_and_check(30, 2);
    overwrite_byte(entry, 10, 0x7f); /* the header's offset field */
    load_and_check(30, 2);
    assert_int_equal(truncate(entry, size - 1000), 0);
    load_and_check(30, 2);
    assert_int_equal(file_size(entry), size); /* rewritten whole */
    assert_int_equal(truncate(entry, 3), 0);
    load_and_check(30, 2);
    assert_int_equal(file_size(entry), size);
}

/* The source replaced (new content, even of the same size): never the old entry's data. */
static void test_stale_entry(void **state) {
    (void)state;
    make_split(25, 3);
    load_and_check(25, 3);
    make_split(25, 4); /* same sizes, new content; the mtime changes too, or the CRC catches it */
    load_and_check(25, 4);
    load_and_check(25, 4);
    make_split(40, 5);
    load_and_check(40, 5);
    /* an mtime that goes back in time still differs from the recorded one */
    char path[PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/train-images-idx3-ubyte.gz", data_dir);
    struct timespec times[2] = {{0, UTIME_OMIT}, {1000000, 0}};
    assert_int_equal(utimensat(AT_FDCWD, path, times, 0), 0);
    load_and_check(40, 5);
}

/* An entry copied from another source (right header layout, wrong source): not used. */
static void test_entry_of_another_source(void **state) {
    (void)state;
    make_split(10, 6);
    load_and_check(10, 6);
    char images_entry[PATH_MAX + 300], labels_entry[PATH_MAX + 300];
    assert_true(entry_of("train-images-idx3-ubyte-", images_entry, sizeof images_entry));
    assert_true(entry_of("train-labels-idx1-ubyte-", labels_entry, sizeof labels_entry));
    char command[3 * PATH_MAX];
    snprintf(command, sizeof command, "cp '%s' '%s'", labels_entry, images_entry);
    assert_int_equal(system(command), 0);
    load_and_check(10, 6);
}

static void test_cache_off_or_unwritable(void **state) {
    (void)state;
    make_split(12, 7);
    setenv("EG_IDX_CACHE", "0", 1);
    load_and_check(12, 7);
    load_and_check(12, 7);
    /* a cache "directory" that is a file: nothing can be written, nothing fails */
    char file[PATH_MAX + 64];
    snprintf(file, sizeof file, "%s/not_a_dir", temp_dir);
    FILE *f = fopen(file, "w");
    assert_non_null(f);
    fclose(f);
    setenv("EG_IDX_CACHE", file, 1);
    load_and_check(12, 7);
    load_and_check(12, 7);
    assert_false(eg__error_pending());
}

/* eg_idx_read goes through the cache too, for any element type. */
static void test_idx_read_wide_type(void **state) {
    (void)state;
    const uint8_t bytes[4 + 4 + 12] = {0, 0, 0x0C, 1,    0,    0,    0,    3, 0, 0,
                                       0, 1, 0xff, 0xff, 0xff, 0xfe, 0x7f, 0, 0, 0};
    char path[PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/wide.gz", data_dir);
    write_gz(path, bytes, sizeof bytes);
    for (int round = 0; round < 2; round++) {
        eg_tensor *t = eg_idx_read(path);
        assert_non_null(t);
        assert_int_equal(eg_tensor_dtype(t), EG_DTYPE_I32);
        const int32_t *v = eg_tensor_data(t);
        assert_int_equal(v[0], 1);
        assert_int_equal(v[1], -2);
        assert_int_equal(v[2], 0x7f000000);
        eg_release(t);
    }
    char entry[PATH_MAX + 300];
    assert_true(entry_of("wide-", entry, sizeof entry));
}

/* Whether the cache directory holds any file at all (entries, temporary files). */
static int count_files(void) {
    DIR *dir = opendir(cache_dir);
    if (!dir) return 0;
    int n = 0;
    for (struct dirent *e; (e = readdir(dir));) n += e->d_name[0] != '.';
    closedir(dir);
    return n;
}

static bool exists(const char *path) {
    struct stat st;
    return lstat(path, &st) == 0;
}

/* Content that fails validation never becomes an entry: a valid IDX file with a label out of
 * range (refused by the MNIST loader), an IDX file with trailing bytes. */
static void test_no_entry_for_refused_content(void **state) {
    (void)state;
    make_split(10, 8);
    char path[PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/train-labels-idx1-ubyte.gz", data_dir);
    uint8_t labels[8 + 10] = {0, 0, 8, 1, 0, 0, 0, 10};
    labels[8 + 9] = 10; /* not a class */
    write_gz(path, labels, sizeof labels);
    eg_tensor *images = NULL, *classes = NULL;
    assert_int_equal(eg_mnist_load(data_dir, true, &images, &classes), EG_ERR_FORMAT);
    eg_clear_error();
    assert_int_equal(count_files(), 0);

    snprintf(path, sizeof path, "%s/trailing.gz", data_dir);
    const uint8_t trailing[8 + 3] = {0, 0, 8, 1, 0, 0, 0, 2, 1, 2, 3};
    write_gz(path, trailing, sizeof trailing);
    assert_null(eg_idx_read(path));
    eg_clear_error();
    assert_int_equal(count_files(), 0);
}

/* An entry that older versions wrote for refused content (its bytes match the source's CRC, but
 * are not a well-formed IDX file) is removed, and the source's own error reported. */
static void test_malformed_entry_removed(void **state) {
    (void)state;
    make_split(5, 9);
    load_and_check(5, 9); /* a valid entry, to learn its name and layout */
    char entry[PATH_MAX + 300];
    assert_true(entry_of("train-labels-idx1-ubyte-", entry, sizeof entry));
    /* the source becomes 5 labels and 3 trailing bytes; the entry gets the same bytes, with a
     * header saying what the source now is (as an older version would have written it) */
    char source[PATH_MAX + 64];
    snprintf(source, sizeof source, "%s/train-labels-idx1-ubyte.gz", data_dir);
    const uint8_t content[8 + 8] = {0, 0, 8, 1, 0, 0, 0, 5, 0, 1, 2, 3, 4, 7, 7, 7};
    write_gz(source, content, sizeof content);
    struct stat st;
    assert_int_equal(stat(source, &st), 0);
    uint64_t header_bytes;
    FILE *f = fopen(entry, "r+b");
    assert_non_null(f);
    assert_int_equal(fseek(f, 8, SEEK_SET), 0);
    assert_int_equal(fread(&header_bytes, 8, 1, f), 1);
    uint64_t fields[4] = {sizeof content, (uint64_t)st.st_size, (uint64_t)st.st_mtim.tv_sec,
                          (uint64_t)st.st_mtim.tv_nsec};
    uint32_t crc = (uint32_t)crc32(0, content, sizeof content);
    assert_int_equal(fseek(f, 16, SEEK_SET), 0);
    assert_int_equal(fwrite(fields, 8, 4, f), 4);
    assert_int_equal(fwrite(&crc, 4, 1, f), 1);
    assert_int_equal(fseek(f, (long)header_bytes, SEEK_SET), 0);
    assert_int_equal(fwrite(content, 1, sizeof content, f), sizeof content);
    assert_int_equal(fclose(f), 0);
    assert_int_equal(truncate(entry, (off_t)(header_bytes + sizeof content)), 0);

    eg_tensor *images = NULL, *labels = NULL;
    assert_int_equal(eg_mnist_load(data_dir, true, &images, &labels), EG_ERR_FORMAT);
    assert_non_null(strstr(eg_last_error(), "decompresses to more than its IDX header"));
    eg_clear_error();
    assert_false(exists(entry));
}

static void touch(const char *path) {
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    assert_int_equal(fputs("partial", f) >= 0, 1);
    assert_int_equal(fclose(f), 0);
}

/* A writer killed mid-store leaves "<entry>.<pid>.<n>.tmp": the next store removes those of dead
 * processes, of any entry, and nothing else. */
static void test_stale_temporary_files_removed(void **state) {
    (void)state;
    make_split(6, 10);
    load_and_check(6, 10);
    char entry[PATH_MAX + 300];
    assert_true(entry_of("train-images-idx3-ubyte-", entry, sizeof entry));
    const char *name = strrchr(entry, '/') + 1;
    /* a child that dies while writing an entry, as `kill -9` would leave it */
    pid_t child = fork();
    assert_true(child >= 0);
    if (child == 0) {
        char temp[PATH_MAX + 400];
        snprintf(temp, sizeof temp, "%s.%ld.0.tmp", entry, (long)getpid());
        FILE *f = fopen(temp, "w");
        _exit(f && fputs("half an entry", f) >= 0 && fclose(f) == 0 ? 0 : 1);
    }
    int child_status;
    assert_int_equal(waitpid(child, &child_status, 0), child);
    assert_int_equal(child_status, 0);
    long dead = (long)dead_pid();
    char killed[PATH_MAX + 400], other[PATH_MAX + 400], live[PATH_MAX + 400],
        foreign[PATH_MAX + 400], inexact[PATH_MAX + 400];
    snprintf(killed, sizeof killed, "%s.%ld.0.tmp", entry, (long)child);
    snprintf(other, sizeof other, "%s/gone-0123456789abcdef.idx.%ld.7.tmp", cache_dir, dead);
    snprintf(live, sizeof live, "%s.%ld.3.tmp", entry, (long)getpid());
    snprintf(foreign, sizeof foreign, "%s/notes.%ld.0.tmp", cache_dir, dead);
    snprintf(inexact, sizeof inexact, "%s/%s.%ld.tmp", cache_dir, name, dead);
    assert_true(exists(killed));
    touch(other);
    touch(live);
    touch(foreign);
    touch(inexact);

    make_split(6, 11); /* new content: the next load stores entries again */
    load_and_check(6, 11);
    assert_false(exists(killed));
    assert_false(exists(other));
    assert_true(exists(live)); /* its writer (this process) is alive */
    assert_true(exists(foreign));
    assert_true(exists(inexact));
    unlink(live);
}

/* The cache's size stays under EG_IDX_CACHE_LIMIT: the least recently used entries go first
 * (using an entry makes it recent), and content larger than the limit is not stored. */
static void test_size_limit_evicts_least_recently_used(void **state) {
    (void)state;
    uint8_t bytes[8 + 10000] = {0, 0, 8, 1, 0, 0, 0x27, 0x10};
    char a[PATH_MAX + 64], b[PATH_MAX + 64], c[PATH_MAX + 64];
    snprintf(a, sizeof a, "%s/a.gz", data_dir);
    snprintf(b, sizeof b, "%s/b.gz", data_dir);
    snprintf(c, sizeof c, "%s/c.gz", data_dir);
    const char *sources[3] = {a, b, c};
    for (int i = 0; i < 3; i++) {
        memset(bytes + 8, i + 1, 10000);
        write_gz(sources[i], bytes, sizeof bytes);
    }
    setenv("EG_IDX_CACHE_LIMIT", "25000", 1); /* two entries of ~10 KB fit, three do not */
    eg_tensor *t;
    for (int i = 0; i < 2; i++) {
        assert_non_null(t = eg_idx_read(sources[i]));
        eg_release(t);
    }
    char entry_a[PATH_MAX + 300], entry_b[PATH_MAX + 300], entry_c[PATH_MAX + 300];
    assert_true(entry_of("a-", entry_a, sizeof entry_a));
    assert_true(entry_of("b-", entry_b, sizeof entry_b));
    /* a is older, but then used again: b is the least recently used */
    struct timespec old_a[2] = {{0, UTIME_OMIT}, {1000, 0}},
                    old_b[2] = {{0, UTIME_OMIT}, {2000, 0}};
    assert_int_equal(utimensat(AT_FDCWD, entry_a, old_a, 0), 0);
    assert_int_equal(utimensat(AT_FDCWD, entry_b, old_b, 0), 0);
    assert_non_null(t = eg_idx_read(a));
    assert_int_equal(((const uint8_t *)eg_tensor_data(t))[9999], 1);
    eg_release(t);
    assert_non_null(t = eg_idx_read(c));
    eg_release(t);
    assert_true(entry_of("c-", entry_c, sizeof entry_c));
    assert_true(exists(entry_a));
    assert_false(exists(entry_b));
    assert_int_equal(count_files(), 2);

    /* larger than the limit: read, not stored; nothing else evicted for it */
    setenv("EG_IDX_CACHE_LIMIT", "9K", 1);
    assert_non_null(t = eg_idx_read(b));
    eg_release(t);
    assert_false(entry_of("b-", entry_b, sizeof entry_b));
    assert_int_equal(count_files(), 2);
    unsetenv("EG_IDX_CACHE_LIMIT");
    assert_false(eg__error_pending());
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_entry_written_then_used, case_setup),
        cmocka_unit_test_setup(test_corrupt_or_truncated_entry, case_setup),
        cmocka_unit_test_setup(test_stale_entry, case_setup),
        cmocka_unit_test_setup(test_entry_of_another_source, case_setup),
        cmocka_unit_test_setup(test_cache_off_or_unwritable, case_setup),
        cmocka_unit_test_setup(test_idx_read_wide_type, case_setup),
        cmocka_unit_test_setup(test_no_entry_for_refused_content, case_setup),
        cmocka_unit_test_setup(test_malformed_entry_removed, case_setup),
        cmocka_unit_test_setup(test_stale_temporary_files_removed, case_setup),
        cmocka_unit_test_setup(test_size_limit_evicts_least_recently_used, case_setup),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
