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
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include "base/error.h"
#include "eagle.h"

static char temp_dir[1024], cache_dir[1100], data_dir[1100];

static int group_setup(void **state) {
    (void)state;
    const char *base = getenv("TMPDIR");
    snprintf(temp_dir, sizeof temp_dir, "%s/eagle_idx_cache_XXXXXX", base ? base : "/tmp");
    return mkdtemp(temp_dir) ? 0 : -1;
}

static int group_teardown(void **state) {
    (void)state;
    char command[PATH_MAX + 16];
    snprintf(command, sizeof command, "rm -rf '%s'", temp_dir);
    return system(command) == 0 ? 0 : -1;
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
    char file[PATH_MAX + 16];
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
    char path[PATH_MAX + 16];
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

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_entry_written_then_used, case_setup),
        cmocka_unit_test_setup(test_corrupt_or_truncated_entry, case_setup),
        cmocka_unit_test_setup(test_stale_entry, case_setup),
        cmocka_unit_test_setup(test_entry_of_another_source, case_setup),
        cmocka_unit_test_setup(test_cache_off_or_unwritable, case_setup),
        cmocka_unit_test_setup(test_idx_read_wide_type, case_setup),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
