/* IDX reader and MNIST loader: good files (plain and gzip, every element type), every kind of bad
 * file the reader must refuse with a message that names the file and the problem, and the real
 * Fashion-MNIST test split when it is installed. Files are written into a fresh temporary
 * directory at run time. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "eagle/io.h"
#include "eagle/tensor.h"
#include "io/internal.h"

static char temp_dir[PATH_MAX];
static char cache_dir[PATH_MAX + 16];

/* ---- helpers ---- */

static void join(char *out, size_t size, const char *name) {
    int n = snprintf(out, size, "%s/%s", temp_dir, name);
    assert_true(n > 0 && (size_t)n < size);
}

static void write_plain(const char *path, const void *bytes, size_t n) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    if (n) assert_int_equal(fwrite(bytes, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
}

static void write_gz(const char *path, const void *bytes, size_t n) {
    gzFile gz = gzopen(path, "wb");
    assert_non_null(gz);
    if (n) assert_int_equal(gzwrite(gz, bytes, (unsigned)n), (int)n);
    assert_int_equal(gzclose(gz), Z_OK);
}

static uint8_t *read_whole(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    assert_int_equal(fseek(f, 0, SEEK_END), 0);
    long size = ftell(f);
    assert_true(size >= 0);
    rewind(f);
    uint8_t *bytes = malloc((size_t)size + 1);
    assert_non_null(bytes);
    assert_int_equal(fread(bytes, 1, (size_t)size, f), (size_t)size);
    fclose(f);
    *n = (size_t)size;
    return bytes;
}

/* An IDX image: header for `type` and dims, then data_bytes bytes of `data` (which need not match
 * what the header announces: that is how broken files are made). Caller frees. */
static uint8_t *make_idx(uint8_t type, int n_dims, const uint32_t *dims, const void *data,
                         size_t data_bytes, size_t *n) {
    *n = 4 + 4 * (size_t)n_dims + data_bytes;
    uint8_t *bytes = malloc(*n + 1);
    assert_non_null(bytes);
    bytes[0] = 0;
    bytes[1] = 0;
    bytes[2] = type;
    bytes[3] = (uint8_t)n_dims;
    for (int i = 0; i < n_dims; i++) {
        uint8_t *p = bytes + 4 + 4 * i;
        p[0] = (uint8_t)(dims[i] >> 24);
        p[1] = (uint8_t)(dims[i] >> 16);
        p[2] = (uint8_t)(dims[i] >> 8);
        p[3] = (uint8_t)dims[i];
    }
    if (data_bytes) memcpy(bytes + 4 + 4 * (size_t)n_dims, data, data_bytes);
    return bytes;
}

/* Writes an IDX file named `name` into the temp dir (gzipped when gz) and returns its path. */
static void write_idx(char *path, size_t path_size, const char *name, bool gz, uint8_t type,
                      int n_dims, const uint32_t *dims, const void *data, size_t data_bytes) {
    join(path, path_size, name);
    size_t n;
    uint8_t *bytes = make_idx(type, n_dims, dims, data, data_bytes, &n);
    if (gz)
        write_gz(path, bytes, n);
    else
        write_plain(path, bytes, n);
    free(bytes);
}

/* Checks the pending error's status and that its message contains every string of the
 * NULL-terminated list, then clears it. */
static void check_error(int expected, ...) {
    const char *message = eg_last_error();
    if ((int)eg_last_status() != expected) {
        print_error("expected status %s, got %s: \"%s\"\n", eg_status_string((eg_status)expected),
                    eg_status_string(eg_last_status()), message);
        fail();
    }
    va_list args;
    va_start(args, expected);
    for (const char *part = va_arg(args, const char *); part; part = va_arg(args, const char *)) {
        if (!strstr(message, part)) {
            print_error("message \"%s\" lacks \"%s\"\n", message, part);
            va_end(args);
            fail();
        }
    }
    va_end(args);
    eg_clear_error();
}

/* eg_idx_read must fail on `path` with `expected` and the listed message parts. */
#define EXPECT_READ_FAILS(path, expected, ...)                                                     \
    do {                                                                                           \
        eg_clear_error();                                                                          \
        eg_tensor *t_ = eg_idx_read(path);                                                         \
        assert_null(t_);                                                                           \
        check_error(expected, __VA_ARGS__, NULL);                                                  \
    } while (0)

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static int group_setup(void **state) {
    (void)state;
    const char *base = getenv("TMPDIR");
    snprintf(temp_dir, sizeof temp_dir, "%s/eagle_test_idx_XXXXXX", base && *base ? base : "/tmp");
    if (!mkdtemp(temp_dir)) return -1;
    /* gzip files read here must not leave entries in the user's cache */
    snprintf(cache_dir, sizeof cache_dir, "%s/cache", temp_dir);
    return setenv("EG_IDX_CACHE", cache_dir, 1);
}

static int group_teardown(void **state) {
    (void)state;
    return nftw(temp_dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static int case_setup(void **state) {
    (void)state;
    eg_clear_error();
    return 0;
}

/* ---- good files ---- */

static void check_u8_2x3(eg_tensor *t) {
    assert_non_null(t);
    assert_int_equal(eg_tensor_dtype(t), EG_DTYPE_U8);
    assert_int_equal(eg_tensor_n_dims(t), 2);
    assert_int_equal(eg_tensor_shape(t)[0], 2);
    assert_int_equal(eg_tensor_shape(t)[1], 3);
    const uint8_t *data = eg_tensor_data(t);
    assert_non_null(data);
    for (int i = 0; i < 6; i++) assert_int_equal(data[i], 250 + i);
}

static void test_read_u8_plain_and_gz(void **state) {
    (void)state;
    const uint8_t data[6] = {250, 251, 252, 253, 254, 255};
    const uint32_t dims[2] = {2, 3};
    char plain[PATH_MAX], gz[PATH_MAX];
    write_idx(plain, sizeof plain, "u8.idx", false, 0x08, 2, dims, data, sizeof data);
    write_idx(gz, sizeof gz, "u8.idx.gz", true, 0x08, 2, dims, data, sizeof data);
    eg_tensor *t = eg_idx_read(plain);
    check_u8_2x3(t);
    eg_release(t);
    t = eg_idx_read(gz);
    check_u8_2x3(t);
    eg_release(t);
    /* gzip is recognised by its magic, not by the file name */
    char misnamed[PATH_MAX];
    write_idx(misnamed, sizeof misnamed, "u8-compressed.idx", true, 0x08, 2, dims, data,
              sizeof data);
    t = eg_idx_read(misnamed);
    check_u8_2x3(t);
    eg_release(t);
    assert_int_equal(eg_last_status(), EG_OK);
}

static void test_read_wide_types(void **state) {
    (void)state;
    char path[PATH_MAX];
    const uint32_t dims[1] = {3};

    const uint8_t i8[3] = {0x80, 0xff, 0x7f};
    write_idx(path, sizeof path, "i8.idx", false, 0x09, 1, dims, i8, sizeof i8);
    eg_tensor *t = eg_idx_read(path);
    assert_non_null(t);
    assert_int_equal(eg_tensor_dtype(t), EG_DTYPE_I32);
    const int32_t *ints = eg_tensor_data(t);
    assert_int_equal(ints[0], -128);
    assert_int_equal(ints[1], -1);
    assert_int_equal(ints[2], 127);
    eg_release(t);

    const uint8_t i16[6] = {0x80, 0x00, 0xff, 0xfe, 0x01, 0x02};
    write_idx(path, sizeof path, "i16.idx.gz", true, 0x0B, 1, dims, i16, sizeof i16);
    t = eg_idx_read(path);
    assert_non_null(t);
    assert_int_equal(eg_tensor_dtype(t), EG_DTYPE_I32);
    ints = eg_tensor_data(t);
    assert_int_equal(ints[0], -32768);
    assert_int_equal(ints[1], -2);
    assert_int_equal(ints[2], 0x0102);
    eg_release(t);

    const uint8_t i32[12] = {0x80, 0, 0, 0, 0xff, 0xff, 0xff, 0xfd, 0x01, 0x02, 0x03, 0x04};
    write_idx(path, sizeof path, "i32.idx", false, 0x0C, 1, dims, i32, sizeof i32);
    t = eg_idx_read(path);
    assert_non_null(t);
    assert_int_equal(eg_tensor_dtype(t), EG_DTYPE_I32);
    ints = eg_tensor_data(t);
    assert_int_equal(ints[0], INT32_MIN);
    assert_int_equal(ints[1], -3);
    assert_int_equal(ints[2], 0x01020304);
    eg_release(t);

    /* 1.0f, -2.5f, 0x1p-149f (smallest subnormal) */
    const uint8_t f32[12] = {0x3f, 0x80, 0, 0, 0xc0, 0x20, 0, 0, 0, 0, 0, 1};
    write_idx(path, sizeof path, "f32.idx", false, 0x0D, 1, dims, f32, sizeof f32);
    t = eg_idx_read(path);
    assert_non_null(t);
    assert_int_equal(eg_tensor_dtype(t), EG_DTYPE_F32);
    const float *floats = eg_tensor_data(t);
    assert_true(floats[0] == 1.0f);
    assert_true(floats[1] == -2.5f);
    assert_true(floats[2] == 0x1p-149f);
    eg_release(t);

    /* 1.0, -0.1 (bit pattern bfb999999999999a), 2^1000 */
    const uint8_t f64[24] = {0x3f, 0xf0, 0,    0,    0,    0,    0, 0, 0xbf, 0xb9, 0x99, 0x99,
                             0x99, 0x99, 0x99, 0x9a, 0x7e, 0x70, 0, 0, 0,    0,    0,    0};
    write_idx(path, sizeof path, "f64.idx.gz", true, 0x0E, 1, dims, f64, sizeof f64);
    t = eg_idx_read(path);
    assert_non_null(t);
    assert_int_equal(eg_tensor_dtype(t), EG_DTYPE_F64);
    const double *doubles = eg_tensor_data(t);
    assert_true(doubles[0] == 1.0);
    assert_true(doubles[1] == -0.1);
    assert_true(doubles[2] == 0x1p1000);
    eg_release(t);

    const uint32_t dims8[8] = {1, 2, 1, 1, 1, 1, 1, 3};
    const uint8_t six[6] = {1, 2, 3, 4, 5, 6};
    write_idx(path, sizeof path, "eight_dims.idx", false, 0x08, 8, dims8, six, sizeof six);
    t = eg_idx_read(path);
    assert_non_null(t);
    assert_int_equal(eg_tensor_n_dims(t), 8);
    assert_int_equal(eg_tensor_shape(t)[7], 3);
    eg_release(t);
}

/* Parsing alone: a zero-sized dimension is legal and makes the product 0 however large the other
 * dimensions are (no overflow report). */
static void test_parse_zero_dimension(void **state) {
    (void)state;
    const uint32_t dims[4] = {0xffffffffu, 0xffffffffu, 0, 0xffffffffu};
    size_t n;
    uint8_t *bytes = make_idx(0x0E, 4, dims, NULL, 0, &n);
    eg__idx_view view;
    assert_int_equal(eg__idx_parse(bytes, n, "zero.idx", &view), EG_OK);
    assert_int_equal(view.n_elems, 0);
    assert_int_equal(view.n_dims, 4);
    assert_int_equal(view.shape[0], 0xffffffffu);
    assert_int_equal(view.data_bytes, 0);
    assert_int_equal(eg__idx_host_bytes(&view), 0);
    free(bytes);
}

/* ---- malformed IDX content ---- */

static void test_truncated_data(void **state) {
    (void)state;
    const uint8_t data[4] = {1, 2, 3, 4};
    const uint32_t dims[2] = {2, 3};
    char path[PATH_MAX];
    write_idx(path, sizeof path, "short.idx.gz", true, 0x08, 2, dims, data, sizeof data);
    EXPECT_READ_FAILS(path, EG_ERR_FORMAT, path, "truncated", "2x3 = 6 bytes of data", "file has 4",
                      "12-byte header");

    /* the example, in memory: the header of the real training images, 1200 bytes */
    const uint32_t mnist[3] = {60000, 28, 28};
    uint8_t pixels[1200] = {0};
    size_t n;
    uint8_t *bytes = make_idx(0x08, 3, mnist, pixels, sizeof pixels, &n);
    eg__idx_view view;
    assert_int_equal(eg__idx_parse(bytes, n, "train-images-idx3-ubyte.gz", &view), EG_ERR_FORMAT);
    check_error(EG_ERR_FORMAT,
                "train-images-idx3-ubyte.gz: truncated: header says 60000x28x28 = 47040000 bytes "
                "of data, file has 1200",
                NULL);
    free(bytes);

    /* wider types say how wide */
    const uint8_t four[8] = {0};
    write_idx(path, sizeof path, "short_i32.idx", false, 0x0C, 1, (const uint32_t[]){3}, four,
              sizeof four);
    EXPECT_READ_FAILS(path, EG_ERR_FORMAT, "truncated", "3 i32 (4 bytes each) = 12 bytes",
                      "file has 8");
}

static void test_truncated_header(void **state) {
    (void)state;
    char path[PATH_MAX];
    join(path, sizeof path, "header.idx");
    const uint8_t header[9] = {0, 0, 0x08, 3, 0, 0, 0, 2, 0};
    write_plain(path, header, sizeof header);
    EXPECT_READ_FAILS(path, EG_ERR_FORMAT, path, "truncated header", "3 dimensions",
                      "16-byte header", "has 9 bytes");

    write_plain(path, header, 3);
    EXPECT_READ_FAILS(path, EG_ERR_FORMAT, path, "not an IDX file", "3 bytes");

    write_plain(path, header, 0);
    EXPECT_READ_FAILS(path, EG_ERR_FORMAT, path, "0 bytes");
}

static void test_bad_magic(void **state) {
    (void)state;
    char path[PATH_MAX];
    join(path, sizeof path, "page.html");
    const char html[] = "<!DOCTYPE html><html>404 not found</html>";
    write_plain(path, html, sizeof html - 1);
    EXPECT_READ_FAILS(path, EG_ERR_FORMAT, path, "not an IDX file", "bad magic 3c 21 44 4f");

    /* a file gzipped twice decompresses once, to gzip data */
    char twice[PATH_MAX], once[PATH_MAX];
    const uint8_t data[2] = {1, 2};
    write_idx(once, sizeof once, "once.idx.gz", true, 0x08, 1, (const uint32_t[]){2}, data, 2);
    size_t n;
    uint8_t *gz = read_whole(once, &n);
    join(twice, sizeof twice, "twice.idx.gz");
    write_gz(twice, gz, n);
    free(gz);
    EXPECT_READ_FAILS(twice, EG_ERR_FORMAT, twice, "gzip magic", "compressed twice");
}

static void test_bad_type_code(void **state) {
    (void)state;
    char path[PATH_MAX];
    const uint8_t data[2] = {1, 2};
    write_idx(path, sizeof path, "type.idx", false, 0x0A, 1, (const uint32_t[]){2}, data, 2);
    EXPECT_READ_FAILS(path, EG_ERR_FORMAT, path, "unknown IDX type code 0x0a", "0x08 u8");
}

static void test_bad_dimension_count(void **state) {
    (void)state;
    char path[PATH_MAX];
    const uint32_t ones[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
    const uint8_t one = 7;
    write_idx(path, sizeof path, "nine.idx", false, 0x08, 9, ones, &one, 1);
    EXPECT_READ_FAILS(path, EG_ERR_FORMAT, path, "9 dimensions", "1 to 8");

    write_idx(path, sizeof path, "zero.idx.gz", true, 0x08, 0, NULL, &one, 1);
    EXPECT_READ_FAILS(path, EG_ERR_FORMAT, path, "0 dimensions");
}

static void test_overflowing_dimensions(void **state) {
    (void)state;
    char path[PATH_MAX];
    const uint32_t huge[8] = {0xffffffffu, 0xffffffffu, 0xffffffffu, 2, 2, 2, 2, 2};
    write_idx(path, sizeof path, "huge.idx", false, 0x0E, 8, huge, NULL, 0);
    EXPECT_READ_FAILS(path, EG_ERR_FORMAT, path, "overflows",
                      "4294967295x4294967295x4294967295x2x2x2x2x2");

    /* elements fit, bytes do not: 2^61 f64 elements */
    const uint32_t big[3] = {1u << 31, 1u << 30, 1};
    write_idx(path, sizeof path, "big.idx", false, 0x0E, 3, big, NULL, 0);
    EXPECT_READ_FAILS(path, EG_ERR_FORMAT, "overflows");

    /* no overflow, just far more than the file holds */
    const uint32_t large[2] = {1u << 31, 1u << 31};
    write_idx(path, sizeof path, "large.idx", false, 0x08, 2, large, NULL, 0);
    EXPECT_READ_FAILS(path, EG_ERR_FORMAT, "truncated", "2147483648x2147483648", "file has 0");
}

static void test_trailing_bytes(void **state) {
    (void)state;
    char path[PATH_MAX];
    const uint8_t data[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
    write_idx(path, sizeof path, "trailing.idx", false, 0x08, 2, (const uint32_t[]){2, 3}, data,
              sizeof data);
    EXPECT_READ_FAILS(path, EG_ERR_FORMAT, path, "4 unexpected trailing bytes", "2x3 = 6 bytes",
                      "file has 10");
}

/* ---- broken gzip ---- */

/* A gzip'd IDX file big enough that its middle is deflate data, not header or trailer. */
static uint8_t *make_gz_idx(const char *name, char *path, size_t path_size, size_t *n) {
    enum { SIZE = 40000 };
    uint8_t *data = malloc(SIZE);
    assert_non_null(data);
    uint32_t x = 12345;
    for (size_t i = 0; i < SIZE; i++) {
        x = x * 1103515245u + 12345u;
        data[i] = (uint8_t)((x >> 16) % 40); /* compressible, not trivially */
    }
    write_idx(path, path_size, name, true, 0x08, 2, (const uint32_t[]){200, 200}, data, SIZE);
    free(data);
    return read_whole(path, n);
}

static void test_corrupt_gzip(void **state) {
    (void)state;
    char path[PATH_MAX];
    size_t n;
    uint8_t *gz = make_gz_idx("corrupt.idx.gz", path, sizeof path, &n);
    assert_true(n > 200);
    for (size_t i = n / 2; i < n / 2 + 8; i++) gz[i] ^= 0x5a;
    write_plain(path, gz, n);
    free(gz);
    EXPECT_READ_FAILS(path, EG_ERR_FORMAT, path, "corrupt gzip data");
}

static void test_gzip_crc_mismatch(void **state) {
    (void)state;
    char path[PATH_MAX];
    size_t n;
    uint8_t *gz = make_gz_idx("crc.idx.gz", path, sizeof path, &n);
    gz[n - 8] ^= 0x01; /* the trailer is CRC32 then ISIZE, 4 bytes each */
    write_plain(path, gz, n);
    free(gz);
    EXPECT_READ_FAILS(path, EG_ERR_FORMAT, path, "corrupt gzip data", "CRC mismatch");
}

static void test_truncated_gzip(void **state) {
    (void)state;
    char path[PATH_MAX];
    size_t n;
    uint8_t *gz = make_gz_idx("cut.idx.gz", path, sizeof path, &n);
    write_plain(path, gz, n / 2);
    EXPECT_READ_FAILS(path, EG_ERR_FORMAT, path, "truncated gzip stream");
    /* cut inside the 10-byte gzip header */
    write_plain(path, gz, 5);
    EXPECT_READ_FAILS(path, EG_ERR_FORMAT, path, "truncated gzip stream");
    /* only the trailer missing */
    write_plain(path, gz, n - 8);
    EXPECT_READ_FAILS(path, EG_ERR_FORMAT, path, "truncated gzip stream");
    free(gz);
}

/* A gzip member holding data[0, n) (zlib reads concatenated members as one stream, so bombs are
 * built from one member repeated: cheap to make, however much they inflate to). Caller frees. */
static uint8_t *gzip_member(const void *data, size_t n, size_t *out_n) {
    z_stream z = {0};
    assert_int_equal(deflateInit2(&z, 9, Z_DEFLATED, 15 + 16, 9, Z_DEFAULT_STRATEGY), Z_OK);
    size_t capacity = deflateBound(&z, (uLong)n);
    uint8_t *out = malloc(capacity);
    assert_non_null(out);
    z.next_in = (Bytef *)data;
    z.avail_in = (uInt)n;
    z.next_out = out;
    z.avail_out = (uInt)capacity;
    assert_int_equal(deflate(&z, Z_FINISH), Z_STREAM_END);
    *out_n = z.total_out;
    deflateEnd(&z);
    return out;
}

/* A hostile .gz: a member with an IDX u8 header for dims and `data_bytes` zero bytes of data,
 * then `mebibytes` members of 1 MiB of zeros each (~1 KiB apiece), then, when corrupt_tail, a
 * member whose deflate data is invalid: a reader that went on to the end would fail on it. */
static void write_bomb(const char *path, int n_dims, const uint32_t *dims, size_t data_bytes,
                       size_t mebibytes, bool corrupt_tail) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    uint8_t *zeros = calloc(data_bytes > (1 << 20) ? data_bytes : 1 << 20, 1);
    assert_non_null(zeros);
    size_t n;
    uint8_t *head = make_idx(0x08, n_dims, dims, zeros, data_bytes, &n);
    size_t member_n;
    uint8_t *member = gzip_member(head, n, &member_n);
    assert_int_equal(fwrite(member, 1, member_n, f), member_n);
    free(member);
    free(head);
    member = gzip_member(zeros, 1 << 20, &member_n);
    for (size_t i = 0; i < mebibytes; i++)
        assert_int_equal(fwrite(member, 1, member_n, f), member_n);
    free(member);
    free(zeros);
    if (corrupt_tail) {
        /* a gzip header, then a final deflate block of the reserved type 3 */
        const uint8_t bad[] = {0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3, 0x07, 0xff, 0xff, 0xff};
        assert_int_equal(fwrite(bad, 1, sizeof bad, f), sizeof bad);
    }
    assert_int_equal(fclose(f), 0);
}

/* A line of /proc/self/status in KiB ("VmRSS:", "VmHWM:"), -1 when unavailable. */
static long status_kib(const char *field) {
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return -1;
    char line[256];
    long value = -1;
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, field, strlen(field))) value = atol(line + strlen(field));
    fclose(f);
    return value;
}

/* Resets the peak resident size (VmHWM) to the current one; false where Linux does not let us. */
static bool reset_peak_rss(void) {
    FILE *f = fopen("/proc/self/clear_refs", "w");
    if (!f) return false;
    bool ok = fputs("5", f) >= 0;
    return fclose(f) == 0 && ok && status_kib("VmHWM:") > 0;
}

static bool is_empty_or_absent_dir(const char *path) {
    char command[PATH_MAX + 64];
    snprintf(command, sizeof command, "test -z \"$(ls -A '%s' 2>/dev/null)\"", path);
    return system(command) == 0;
}

/* The bomb: ~1 MB of gzip whose IDX header announces 60000x28x28 (47 MB) but which
 * inflates to 1 GiB. It used to be refused only after inflating all of it (1.05 GB resident,
 * 4.5 s) and was then stored as a 1 GiB cache entry. Now the reader stops one chunk past the
 * announced size: the corrupt member at the very end is never reached, the peak memory is the
 * announced 47 MB plus little, and no cache entry is written. */
static void test_gzip_bomb_stops_at_announced_size(void **state) {
    (void)state;
    char path[PATH_MAX], cache[PATH_MAX];
    join(path, sizeof path, "bomb-images-idx3-ubyte.gz");
    join(cache, sizeof cache, "bomb-cache");
    write_bomb(path, 3, (const uint32_t[]){60000, 28, 28}, 0, 1024, true);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_true(st.st_size < (2 << 20));
    setenv("EG_IDX_CACHE", cache, 1);

    bool measured = reset_peak_rss();
    long before = status_kib("VmRSS:");
    eg_tensor *t = eg_idx_read(path);
    long peak = status_kib("VmHWM:");
    setenv("EG_IDX_CACHE", cache_dir, 1);
    assert_null(t);
    check_error(EG_ERR_FORMAT, path, "decompresses to more than its IDX header announces",
                "60000x28x28 = 47040000 bytes of data after the 16-byte header",
                "stopped reading there", "gzip bomb", NULL);
    if (measured) {
        print_message("bomb: peak %ld KiB over the %ld KiB before\n", peak - before, before);
        assert_true(peak - before < 47040016 / 1024 + 32 * 1024);
    }
    assert_true(is_empty_or_absent_dir(cache));
}

/* A header announcing one image, then 1 GiB: the reader holds and inflates one chunk past it. */
static void test_gzip_bomb_small_header(void **state) {
    (void)state;
    char path[PATH_MAX];
    join(path, sizeof path, "bomb-small.gz");
    write_bomb(path, 3, (const uint32_t[]){1, 28, 28}, 784, 1024, true);
    bool measured = reset_peak_rss();
    long before = status_kib("VmRSS:");
    uint8_t *bytes = (uint8_t *)1;
    size_t n = 1;
    assert_int_equal(eg__idx_load_file(path, EG__IDX_MAX_BYTES, &bytes, &n), EG_ERR_FORMAT);
    long peak = status_kib("VmHWM:");
    assert_null(bytes);
    assert_int_equal(n, 0);
    check_error(EG_ERR_FORMAT, path, "decompresses to more than its IDX header announces",
                "1x28x28 = 784 bytes", NULL);
    if (measured) {
        print_message("small bomb: peak %ld KiB over the %ld KiB before\n", peak - before, before);
        assert_true(peak - before < 16 * 1024);
    }
}

/* The limit applies to what the header announces, before any data is inflated. */
static void test_size_limit(void **state) {
    (void)state;
    char path[PATH_MAX];
    join(path, sizeof path, "limit.gz");
    write_bomb(path, 3, (const uint32_t[]){60000, 28, 28}, 0, 1024, true);
    uint8_t *bytes = (uint8_t *)1;
    size_t n = 1;
    assert_int_equal(eg__idx_load_file(path, 1 << 20, &bytes, &n), EG_ERR_FORMAT);
    assert_null(bytes);
    assert_int_equal(n, 0);
    check_error(EG_ERR_FORMAT, path, "IDX header says 60000x28x28 = 47040000 bytes",
                "more than the 1048576-byte limit", "gzip bomb", NULL);

    /* exactly at the limit is fine, one byte under is not */
    enum { SIZE = 1 << 20 };
    uint8_t *ones = malloc(SIZE);
    assert_non_null(ones);
    memset(ones, 1, SIZE);
    write_idx(path, sizeof path, "at-limit.gz", true, 0x08, 1, (const uint32_t[]){SIZE - 8}, ones,
              SIZE - 8);
    assert_int_equal(eg__idx_load_file(path, SIZE, &bytes, &n), EG_OK);
    assert_int_equal(n, SIZE);
    eg__idx_view view;
    assert_int_equal(eg__idx_parse(bytes, n, path, &view), EG_OK);
    free(bytes);
    assert_int_equal(eg__idx_load_file(path, SIZE - 1, &bytes, &n), EG_ERR_FORMAT);
    check_error(EG_ERR_FORMAT, path, "more than the 1048575-byte limit", NULL);

    /* plain files obey the same limit */
    char plain[PATH_MAX];
    write_idx(plain, sizeof plain, "big.raw", false, 0x08, 1, (const uint32_t[]){4088}, ones, 4088);
    assert_int_equal(eg__idx_load_file(plain, 4095, &bytes, &n), EG_ERR_FORMAT);
    check_error(EG_ERR_FORMAT, plain, "4088 bytes of data", "more than the 4095-byte limit", NULL);
    free(ones);

    /* a tiny file announcing 1 GiB is truncated, and costs what it holds */
    write_idx(path, sizeof path, "claims-much.gz", true, 0x08, 2, (const uint32_t[]){32768, 32768},
              "abc", 3);
    assert_int_equal(eg__idx_load_file(path, EG__IDX_MAX_BYTES, &bytes, &n), EG_ERR_FORMAT);
    check_error(EG_ERR_FORMAT, path, "truncated", "32768x32768 = 1073741824 bytes", "file has 3",
                NULL);
}

/* Content that is not IDX is refused at its header, before its data is inflated. */
static void test_bad_header_stops_early(void **state) {
    (void)state;
    char path[PATH_MAX];
    join(path, sizeof path, "zeros.gz");
    write_bomb(path, 0, NULL, 0, 64, true); /* "00 00 08 00": 0 dimensions */
    uint8_t *bytes = NULL;
    size_t n = 0;
    assert_int_equal(eg__idx_load_file(path, EG__IDX_MAX_BYTES, &bytes, &n), EG_ERR_FORMAT);
    check_error(EG_ERR_FORMAT, path, "0 dimensions", NULL);
}

/* ---- files that are not there ---- */

static void test_missing_file(void **state) {
    (void)state;
    char path[PATH_MAX];
    join(path, sizeof path, "no-such-file.idx");
    EXPECT_READ_FAILS(path, EG_ERR_IO, path, "cannot open", "No such file or directory");
    EXPECT_READ_FAILS(temp_dir, EG_ERR_IO, temp_dir, "is a directory");
    EXPECT_READ_FAILS(NULL, EG_ERR_NULL_ARGUMENT, "path is NULL");
}

/* The public macro appends the caller's file:line. */
static void test_error_names_call_site(void **state) {
    (void)state;
    char path[PATH_MAX];
    join(path, sizeof path, "absent.idx");
    assert_null(eg_idx_read(path));
    check_error(EG_ERR_IO, " at test_idx.c:", NULL);
}

/* ---- MNIST loader on synthetic data ---- */

/* Writes an MNIST-like split into temp_dir/<sub>: n_images 28x28 images whose pixel (r, c) of
 * image i is (i + r + c) % 256, and labels i % 10, unless overridden. */
static void make_mnist_dir(const char *sub, char *dir, size_t dir_size, const char *split,
                           uint32_t n_images, uint32_t side, uint32_t n_labels, int bad_label_at,
                           bool gz_images, bool gz_labels) {
    join(dir, dir_size, sub);
    assert_int_equal(mkdir(dir, 0700), 0);
    size_t pixels = (size_t)n_images * side * side;
    uint8_t *images = malloc(pixels + 1);
    assert_non_null(images);
    for (size_t i = 0; i < n_images; i++)
        for (size_t r = 0; r < side; r++)
            for (size_t c = 0; c < side; c++)
                images[(i * side + r) * side + c] = (uint8_t)((i + r + c) % 256);
    uint8_t *labels = malloc(n_labels + 1);
    assert_non_null(labels);
    for (uint32_t i = 0; i < n_labels; i++) labels[i] = (uint8_t)(i % 10);
    if (bad_label_at >= 0) labels[bad_label_at] = 10;

    char name[PATH_MAX], path[PATH_MAX];
    snprintf(name, sizeof name, "%s/%s-images-idx3-ubyte%s", sub, split, gz_images ? ".gz" : "");
    write_idx(path, sizeof path, name, gz_images, 0x08, 3, (const uint32_t[]){n_images, side, side},
              images, pixels);
    snprintf(name, sizeof name, "%s/%s-labels-idx1-ubyte%s", sub, split, gz_labels ? ".gz" : "");
    write_idx(path, sizeof path, name, gz_labels, 0x08, 1, (const uint32_t[]){n_labels}, labels,
              n_labels);
    free(images);
    free(labels);
}

static void test_mnist_synthetic(void **state) {
    (void)state;
    char dir[PATH_MAX];
    make_mnist_dir("mnist_ok", dir, sizeof dir, "train", 5, 28, 5, -1, true, false);
    eg_tensor *images = (eg_tensor *)1, *labels = (eg_tensor *)1;
    assert_int_equal(eg_mnist_load(dir, true, &images, &labels), EG_OK);
    assert_non_null(images);
    assert_non_null(labels);
    assert_int_equal(eg_tensor_dtype(images), EG_DTYPE_U8);
    assert_int_equal(eg_tensor_n_dims(images), 3);
    assert_int_equal(eg_tensor_shape(images)[0], 5);
    assert_int_equal(eg_tensor_shape(images)[1], 28);
    assert_int_equal(eg_tensor_shape(images)[2], 28);
    assert_int_equal(eg_tensor_dtype(labels), EG_DTYPE_U8);
    assert_int_equal(eg_tensor_n_dims(labels), 1);
    assert_int_equal(eg_tensor_shape(labels)[0], 5);
    const uint8_t *pixels = eg_tensor_data(images);
    assert_int_equal(pixels[(4 * 28 + 27) * 28 + 27], (4 + 27 + 27) % 256);
    const uint8_t *classes = eg_tensor_data(labels);
    for (int i = 0; i < 5; i++) assert_int_equal(classes[i], i);
    eg_release(images);
    eg_release(labels);

    /* only the training split is there */
    images = labels = (eg_tensor *)1;
    assert_int_equal(eg_mnist_load(dir, false, &images, &labels), EG_ERR_IO);
    assert_null(images);
    assert_null(labels);
    check_error(EG_ERR_IO, "t10k-images-idx3-ubyte[.gz] not found",
                "apt-get install dataset-fashion-mnist", "pass the data directory", NULL);

    assert_int_equal(eg_mnist_load(dir, true, NULL, &labels), EG_ERR_NULL_ARGUMENT);
    eg_clear_error();
}

static void test_mnist_count_mismatch(void **state) {
    (void)state;
    char dir[PATH_MAX];
    make_mnist_dir("mnist_count", dir, sizeof dir, "t10k", 4, 28, 3, -1, false, true);
    eg_tensor *images = NULL, *labels = NULL;
    assert_int_equal(eg_mnist_load(dir, false, &images, &labels), EG_ERR_FORMAT);
    assert_null(images);
    assert_null(labels);
    check_error(EG_ERR_FORMAT, "t10k-labels-idx1-ubyte.gz: mislabelled data: 3 labels",
                "t10k-images-idx3-ubyte has 4 images", NULL);
}

static void test_mnist_label_out_of_range(void **state) {
    (void)state;
    char dir[PATH_MAX];
    make_mnist_dir("mnist_range", dir, sizeof dir, "train", 12, 28, 12, 11, true, true);
    eg_tensor *images = NULL, *labels = NULL;
    assert_int_equal(eg_mnist_load(dir, true, &images, &labels), EG_ERR_FORMAT);
    assert_null(images);
    assert_null(labels);
    check_error(EG_ERR_FORMAT, "train-labels-idx1-ubyte.gz: mislabelled data",
                "label 10 at index 11 is outside 0..9", NULL);
}

static void test_mnist_wrong_image_shape(void **state) {
    (void)state;
    char dir[PATH_MAX];
    make_mnist_dir("mnist_shape", dir, sizeof dir, "train", 2, 27, 2, -1, false, false);
    eg_tensor *images = NULL, *labels = NULL;
    assert_int_equal(eg_mnist_load(dir, true, &images, &labels), EG_ERR_FORMAT);
    check_error(EG_ERR_FORMAT, "train-images-idx3-ubyte: not an MNIST image file",
                "holds 2x27x27 u8", "expected u8 Nx28x28", NULL);
}

static void test_mnist_bad_file_is_reported(void **state) {
    (void)state;
    char dir[PATH_MAX];
    make_mnist_dir("mnist_cut", dir, sizeof dir, "train", 3, 28, 3, -1, true, false);
    char path[PATH_MAX];
    int length = snprintf(path, sizeof path, "%s/train-images-idx3-ubyte.gz", dir);
    assert_true(length > 0 && (size_t)length < sizeof path);
    size_t n;
    uint8_t *gz = read_whole(path, &n);
    write_plain(path, gz, n - 20);
    free(gz);
    eg_tensor *images = NULL, *labels = NULL;
    assert_int_equal(eg_mnist_load(dir, true, &images, &labels), EG_ERR_FORMAT);
    check_error(EG_ERR_FORMAT, path, "truncated gzip stream", NULL);
}

static void test_mnist_missing_directory(void **state) {
    (void)state;
    char dir[PATH_MAX];
    join(dir, sizeof dir, "no-such-dir");
    eg_tensor *images = NULL, *labels = NULL;
    assert_int_equal(eg_mnist_load(dir, true, &images, &labels), EG_ERR_IO);
    check_error(EG_ERR_IO, dir, "not found",
                "install the Debian package dataset-fashion-mnist (apt-get install "
                "dataset-fashion-mnist) or pass the data directory",
                NULL);
}

/* A name that exists but cannot be read is reported as what it is, naming the path; "not
 * found" only when nothing is there. */
static void test_unreadable_names_say_why(void **state) {
    (void)state;
    char dir[PATH_MAX], images[PATH_MAX + 64], gz[PATH_MAX + 64];
    eg_tensor *images_t = NULL, *labels_t = NULL;

    /* a symlink loop where the images should be */
    make_mnist_dir("mnist_loop", dir, sizeof dir, "train", 2, 28, 2, -1, false, false);
    snprintf(images, sizeof images, "%s/train-images-idx3-ubyte", dir);
    assert_int_equal(unlink(images), 0);
    assert_int_equal(symlink("train-images-idx3-ubyte", images), 0);
    assert_int_equal(eg_mnist_load(dir, true, &images_t, &labels_t), EG_ERR_IO);
    assert_null(images_t);
    check_error(EG_ERR_IO, images, "symlink loop", NULL);
    EXPECT_READ_FAILS(images, EG_ERR_IO, images, "cannot open", "symlink loop");

    /* a directory */
    make_mnist_dir("mnist_isdir", dir, sizeof dir, "train", 2, 28, 2, -1, false, false);
    snprintf(images, sizeof images, "%s/train-images-idx3-ubyte", dir);
    assert_int_equal(unlink(images), 0);
    assert_int_equal(mkdir(images, 0700), 0);
    assert_int_equal(eg_mnist_load(dir, true, &images_t, &labels_t), EG_ERR_IO);
    check_error(EG_ERR_IO, images, "is a directory", NULL);
    /* ... unless the .gz beside it can be used */
    snprintf(gz, sizeof gz, "%s/train-images-idx3-ubyte.gz", dir);
    write_idx(gz, sizeof gz, "mnist_isdir/train-images-idx3-ubyte.gz", true, 0x08, 3,
              (const uint32_t[]){2, 28, 28}, (uint8_t[2 * 28 * 28]){0}, 2 * 28 * 28);
    assert_int_equal(eg_mnist_load(dir, true, &images_t, &labels_t), EG_OK);
    eg_release(images_t);
    eg_release(labels_t);

    /* a dangling symlink */
    make_mnist_dir("mnist_dangling", dir, sizeof dir, "train", 2, 28, 2, -1, false, false);
    snprintf(images, sizeof images, "%s/train-labels-idx1-ubyte", dir);
    assert_int_equal(unlink(images), 0);
    assert_int_equal(symlink("/nonexistent/eagle/labels", images), 0);
    assert_int_equal(eg_mnist_load(dir, true, &images_t, &labels_t), EG_ERR_IO);
    check_error(EG_ERR_IO, images, "dangling symlink", NULL);

    /* the data directory itself a symlink loop */
    join(dir, sizeof dir, "dir_loop");
    assert_int_equal(symlink("dir_loop", dir), 0);
    assert_int_equal(eg_mnist_load(dir, true, &images_t, &labels_t), EG_ERR_IO);
    check_error(EG_ERR_IO, dir, "cannot use the data directory", "symlink loop", NULL);

    /* no permission to look into the directory (root may look anyway) */
    if (geteuid() != 0) {
        make_mnist_dir("mnist_noperm", dir, sizeof dir, "train", 2, 28, 2, -1, false, false);
        assert_int_equal(chmod(dir, 0600), 0); /* readable, not searchable */
        assert_int_equal(eg_mnist_load(dir, true, &images_t, &labels_t), EG_ERR_IO);
        check_error(EG_ERR_IO, "train-images-idx3-ubyte", "Permission denied", NULL);
        assert_int_equal(chmod(dir, 0700), 0);
    }
}

/* ---- the real data set ---- */

static void test_real_fashion_mnist_test_split(void **state) {
    (void)state;
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/t10k-labels-idx1-ubyte.gz", EG_FASHION_MNIST_DIR);
    struct stat st;
    if (stat(path, &st) != 0) {
        snprintf(path, sizeof path, "%s/t10k-labels-idx1-ubyte", EG_FASHION_MNIST_DIR);
        if (stat(path, &st) != 0) skip();
    }
    eg_tensor *images = NULL, *labels = NULL;
    eg_status status = eg_mnist_load(NULL, false, &images, &labels);
    if (status != EG_OK) print_error("%s\n", eg_last_error());
    assert_int_equal(status, EG_OK);
    assert_int_equal(eg_tensor_dtype(images), EG_DTYPE_U8);
    assert_int_equal(eg_tensor_n_dims(images), 3);
    assert_int_equal(eg_tensor_shape(images)[0], 10000);
    assert_int_equal(eg_tensor_shape(images)[1], 28);
    assert_int_equal(eg_tensor_shape(images)[2], 28);
    assert_int_equal(eg_tensor_dtype(labels), EG_DTYPE_U8);
    assert_int_equal(eg_tensor_n_dims(labels), 1);
    assert_int_equal(eg_tensor_shape(labels)[0], 10000);

    size_t counts[10] = {0};
    const uint8_t *classes = eg_tensor_data(labels);
    for (int i = 0; i < 10000; i++) {
        assert_true(classes[i] < 10);
        counts[classes[i]]++;
    }
    for (int c = 0; c < 10; c++) assert_true(counts[c] > 0);
    /* images are real pictures, not zeros */
    const uint8_t *pixels = eg_tensor_data(images);
    uint8_t max = 0;
    for (size_t i = 0; i < (size_t)10000 * 28 * 28; i++)
        if (pixels[i] > max) max = pixels[i];
    assert_int_equal(max, 255);
    eg_release(images);
    eg_release(labels);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_read_u8_plain_and_gz, case_setup),
        cmocka_unit_test_setup(test_read_wide_types, case_setup),
        cmocka_unit_test_setup(test_parse_zero_dimension, case_setup),
        cmocka_unit_test_setup(test_truncated_data, case_setup),
        cmocka_unit_test_setup(test_truncated_header, case_setup),
        cmocka_unit_test_setup(test_bad_magic, case_setup),
        cmocka_unit_test_setup(test_bad_type_code, case_setup),
        cmocka_unit_test_setup(test_bad_dimension_count, case_setup),
        cmocka_unit_test_setup(test_overflowing_dimensions, case_setup),
        cmocka_unit_test_setup(test_trailing_bytes, case_setup),
        cmocka_unit_test_setup(test_corrupt_gzip, case_setup),
        cmocka_unit_test_setup(test_gzip_crc_mismatch, case_setup),
        cmocka_unit_test_setup(test_truncated_gzip, case_setup),
        cmocka_unit_test_setup(test_gzip_bomb_stops_at_announced_size, case_setup),
        cmocka_unit_test_setup(test_gzip_bomb_small_header, case_setup),
        cmocka_unit_test_setup(test_size_limit, case_setup),
        cmocka_unit_test_setup(test_bad_header_stops_early, case_setup),
        cmocka_unit_test_setup(test_missing_file, case_setup),
        cmocka_unit_test_setup(test_error_names_call_site, case_setup),
        cmocka_unit_test_setup(test_unreadable_names_say_why, case_setup),
        cmocka_unit_test_setup(test_mnist_synthetic, case_setup),
        cmocka_unit_test_setup(test_mnist_count_mismatch, case_setup),
        cmocka_unit_test_setup(test_mnist_label_out_of_range, case_setup),
        cmocka_unit_test_setup(test_mnist_wrong_image_shape, case_setup),
        cmocka_unit_test_setup(test_mnist_bad_file_is_reported, case_setup),
        cmocka_unit_test_setup(test_mnist_missing_directory, case_setup),
        cmocka_unit_test_setup(test_real_fashion_mnist_test_split, case_setup),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
