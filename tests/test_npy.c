/* NumPy .npy: round trips of every supported dtype (0-d, empty and non-contiguous tensors
 * included), numpy's exact header layout, Fortran order, big-endian data, format versions 2.0 and
 * 3.0, every kind of malformed header with its message, and the atomicity of writing. Files are
 * written into a fresh temporary directory at run time. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "eagle/checkpoint.h"
#include "eagle/ops.h"
#include "eagle/tensor.h"
#include "io/checkpoint_internal.h"

#include "checkpoint_test_util.h"

/* ---- helpers ---- */

/* Writes a .npy file of format version major.0 whose header dict is `dict` (padded with spaces
 * and a newline to a multiple of 64 bytes), followed by n_data bytes of data. */
static void write_npy(char *path, size_t path_size, const char *name, int major, const char *dict,
                      const void *data, size_t n_data) {
    join(path, path_size, name);
    size_t prefix = major == 1 ? 10 : 12;
    size_t n_dict = strlen(dict);
    size_t header = n_dict + 1;
    while ((prefix + header) % 64) header++;
    size_t n = prefix + header + n_data;
    uint8_t *bytes = malloc(n + 1);
    assert_non_null(bytes);
    memcpy(bytes, "\x93NUMPY", 6);
    bytes[6] = (uint8_t)major;
    bytes[7] = 0;
    for (size_t i = 0; i < prefix - 8; i++) bytes[8 + i] = (uint8_t)(header >> (8 * i));
    memcpy(bytes + prefix, dict, n_dict);
    memset(bytes + prefix + n_dict, ' ', header - n_dict - 1);
    bytes[prefix + header - 1] = '\n';
    if (n_data) memcpy(bytes + prefix + header, data, n_data);
    write_bytes(path, bytes, n);
    free(bytes);
}

/* Reading a file with header dict `dict` (+ n_data zero bytes) must fail with `status` and a
 * message starting with "<path>: <expected>". */
static void expect_bad(const char *dict, size_t n_data, eg_status status, const char *expected) {
    char path[PATH_MAX];
    uint8_t *zeros = calloc(n_data + 1, 1);
    assert_non_null(zeros);
    write_npy(path, sizeof path, "bad.npy", 1, dict, zeros, n_data);
    free(zeros);
    eg_clear_error();
    assert_null(eg_npy_read(path));
    char prefix[PATH_MAX + 1024];
    snprintf(prefix, sizeof prefix, "%s: %s", path, expected);
    assert_error(status, prefix);
}

static void expect_bad_bytes(const void *bytes, size_t n, eg_status status, const char *part) {
    char path[PATH_MAX];
    join(path, sizeof path, "raw.npy");
    write_bytes(path, bytes, n);
    eg_clear_error();
    assert_null(eg_npy_read(path));
    assert_error_contains(status, part);
}

static eg_tensor *read_ok(const char *path) {
    eg_tensor *t = eg_npy_read(path);
    if (!t) fail_msg("eg_npy_read(%s): %s", path, eg_last_error());
    return t;
}

/* ---- round trips ---- */

static void test_round_trip_every_dtype(void **state) {
    (void)state;
    const float f32[6] = {1.5f, -2.25f, 3e-8f, 1e30f, -0.0f, 7.0f};
    const double f64[4] = {1.0 / 3.0, -1e300, 2.5, 0.0};
    const float halves[3] = {0.5f, -65504.0f, 1.0f / 1024};
    uint16_t f16[3];
    eg_f32_to_f16(halves, f16, 3);
    const int32_t i32[5] = {INT32_MIN, -1, 0, 1, INT32_MAX};
    const int64_t i64[3] = {INT64_MIN, 42, INT64_MAX};
    const uint8_t u8[4] = {0, 1, 128, 255};
    const uint8_t booleans[3] = {1, 0, 1};
    eg_tensor *base = eg_arange(0, 12, 1, EG_DTYPE_I64);
    eg_tensor *matrix = eg_reshape(base, 2, (int64_t[]){3, 4});
    eg_tensor *t[] = {
        eg_tensor_from_data(f32, EG_DTYPE_F32, 2, (int64_t[]){2, 3}),
        eg_tensor_from_data(f64, EG_DTYPE_F64, 1, (int64_t[]){4}),
        eg_tensor_from_data(f16, EG_DTYPE_F16, 1, (int64_t[]){3}),
        eg_tensor_from_data(i32, EG_DTYPE_I32, 1, (int64_t[]){5}),
        eg_tensor_from_data(i64, EG_DTYPE_I64, 3, (int64_t[]){3, 1, 1}),
        eg_tensor_from_data(u8, EG_DTYPE_U8, 2, (int64_t[]){2, 2}),
        eg_tensor_from_data(booleans, EG_DTYPE_BOOL, 1, (int64_t[]){3}),
        eg_scalar(EG_DTYPE_F64, -4.5),
        eg_zeros(EG_DTYPE_I32, 2, (int64_t[]){3, 0}),
        eg_transpose(matrix, 0, 1),
        eg_slice(matrix, 1, 1, 4, 2),
        eg_ones(EG_DTYPE_U8, 8, (int64_t[]){1, 2, 1, 2, 1, 2, 1, 2}),
    };
    const size_t n = sizeof t / sizeof t[0];
    assert_false(eg_tensor_is_contiguous(t[9]));
    assert_false(eg_tensor_is_contiguous(t[10]));
    for (size_t i = 0; i < n; i++) {
        assert_non_null(t[i]);
        char path[PATH_MAX], name[32];
        snprintf(name, sizeof name, "t%zu.npy", i);
        join(path, sizeof path, name);
        assert_int_equal(eg_npy_write(path, t[i]), EG_OK);
        size_t n_bytes = 0;
        uint8_t *bytes = read_whole(path, &n_bytes);
        assert_int_equal(bytes[8] + 256 * bytes[9] + 10, 128); /* small headers: 128 bytes */
        assert_int_equal(bytes[127], '\n');
        free(bytes);
        eg_tensor *back = read_ok(path);
        assert_same_tensor(t[i], back);
        eg_release(back);
        eg_release(t[i]);
    }
    assert_int_equal(count_temp_files(temp_dir), 0);
    eg_release(base);
    eg_release(matrix);
}

static void test_header_matches_numpy(void **state) {
    (void)state;
    char path[PATH_MAX];
    join(path, sizeof path, "numpy.npy");
    static const struct {
        eg_dtype dtype;
        int n_dims;
        int64_t shape[2];
        const char *dict;
    } cases[] = {
        {EG_DTYPE_F32, 2, {2, 3}, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }"},
        {EG_DTYPE_I64, 1, {5, 0}, "{'descr': '<i8', 'fortran_order': False, 'shape': (5,), }"},
        {EG_DTYPE_BOOL, 0, {0, 0}, "{'descr': '|b1', 'fortran_order': False, 'shape': (), }"},
        {EG_DTYPE_U8, 1, {0, 0}, "{'descr': '|u1', 'fortran_order': False, 'shape': (0,), }"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        eg_tensor *t = eg_zeros(cases[i].dtype, cases[i].n_dims, cases[i].shape);
        assert_int_equal(eg_npy_write(path, t), EG_OK);
        size_t n = 0;
        uint8_t *bytes = read_whole(path, &n);
        assert_memory_equal(bytes, "\x93NUMPY\x01\x00\x76\x00", 10);
        assert_memory_equal(bytes + 10, cases[i].dict, strlen(cases[i].dict));
        for (size_t k = 10 + strlen(cases[i].dict); k < 127; k++) assert_int_equal(bytes[k], ' ');
        assert_int_equal(bytes[127], '\n');
        assert_int_equal(n, 128 + (size_t)eg_tensor_n_elems(t) * eg_dtype_size(cases[i].dtype));
        free(bytes);
        eg_release(t);
    }
}

static void test_write_errors(void **state) {
    (void)state;
    char path[PATH_MAX];
    join(path, sizeof path, "bf16.npy");
    eg_tensor *t = eg_zeros(EG_DTYPE_BF16, 1, (int64_t[]){2});
    assert_int_equal(eg_npy_write(path, t), EG_ERR_UNSUPPORTED);
    assert_error_contains(EG_ERR_UNSUPPORTED, "no bfloat16 type; convert the tensor to f32");
    assert_false(file_exists(path));
    assert_int_equal(eg_npy_write(path, NULL), EG_ERR_NULL_ARGUMENT);
    eg_clear_error();
    assert_int_equal(eg_npy_write(NULL, t), EG_ERR_NULL_ARGUMENT);
    eg_clear_error();
    assert_null(eg_npy_read(NULL));
    assert_error(EG_ERR_NULL_ARGUMENT, "");
    eg_release(t);
}

/* ---- reading what numpy can write ---- */

static void test_fortran_order(void **state) {
    (void)state;
    char path[PATH_MAX];
    /* numpy.asfortranarray([[0, 1, 2], [3, 4, 5]], dtype='<i4') stores 0 3 1 4 2 5. */
    const int32_t column_major[6] = {0, 3, 1, 4, 2, 5};
    write_npy(path, sizeof path, "fortran.npy", 1,
              "{'descr': '<i4', 'fortran_order': True, 'shape': (2, 3), }", column_major, 24);
    eg_tensor *t = read_ok(path);
    assert_int_equal(eg_tensor_shape(t)[0], 2);
    assert_int_equal(eg_tensor_shape(t)[1], 3);
    const int32_t *data = eg_tensor_data(t);
    for (int i = 0; i < 6; i++) assert_int_equal(data[i], i);
    eg_release(t);

    /* 3-d, (2, 3, 4): element [i][j][k] = 100 i + 10 j + k lies at i + 2 j + 6 k. */
    double values[24];
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 3; j++)
            for (int k = 0; k < 4; k++) values[i + 2 * j + 6 * k] = 100 * i + 10 * j + k;
    write_npy(path, sizeof path, "fortran3.npy", 1,
              "{'descr': '<f8', 'fortran_order': True, 'shape': (2, 3, 4), }", values,
              sizeof values);
    t = read_ok(path);
    const double *d = eg_tensor_data(t);
    for (int i = 0; i < 24; i++) assert_true(d[i] == 100 * (i / 12) + 10 * (i / 4 % 3) + i % 4);
    eg_release(t);

    /* Empty and 1-d Fortran arrays are the same as C ones. */
    write_npy(path, sizeof path, "fortran0.npy", 1,
              "{'descr': '<f4', 'fortran_order': True, 'shape': (0, 3), }", NULL, 0);
    t = read_ok(path);
    assert_int_equal(eg_tensor_n_elems(t), 0);
    eg_release(t);
}

static void test_big_endian(void **state) {
    (void)state;
    char path[PATH_MAX];
    const uint8_t be_f4[8] = {0x3f, 0x80, 0, 0, 0xc0, 0x20, 0, 0}; /* 1.0, -2.5 */
    write_npy(path, sizeof path, "be.npy", 1,
              "{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }", be_f4, 8);
    eg_tensor *t = read_ok(path);
    const float *f = eg_tensor_data(t);
    assert_true(f[0] == 1.0f && f[1] == -2.5f);
    eg_release(t);

    const uint8_t be_i8[16] = {0,    0,    0,    0,    0,    0,    0x01, 0x02,
                               0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xfe};
    write_npy(path, sizeof path, "be8.npy", 1,
              "{'descr': '>i8', 'fortran_order': True, 'shape': (1, 2), }", be_i8, 16);
    t = read_ok(path);
    const int64_t *i = eg_tensor_data(t);
    assert_true(i[0] == 258 && i[1] == -2);
    eg_release(t);

    const uint8_t bytes[2] = {7, 9};
    write_npy(path, sizeof path, "u1.npy", 1,
              "{\"descr\": \">u1\", \"fortran_order\": False, \"shape\": (2,)}", bytes, 2);
    t = read_ok(path);
    assert_memory_equal(eg_tensor_data(t), bytes, 2);
    eg_release(t);
}

static void test_versions_2_and_3(void **state) {
    (void)state;
    char path[PATH_MAX];
    const float values[2] = {3.0f, 4.0f};
    for (int major = 2; major <= 3; major++) {
        write_npy(path, sizeof path, "v2.npy", major,
                  "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", values, 8);
        eg_tensor *t = read_ok(path);
        assert_memory_equal(eg_tensor_data(t), values, 8);
        eg_release(t);
    }
}

static void test_lenient_but_valid_headers(void **state) {
    (void)state;
    char path[PATH_MAX];
    const uint8_t booleans[3] = {0, 2, 255};
    /* Any key order, no trailing comma, spaces and newlines, bool bytes other than 0/1. */
    write_npy(path, sizeof path, "b.npy", 1,
              "{ 'shape' : ( 3 , ) ,\n 'fortran_order':False,'descr':'|b1'}", booleans, 3);
    eg_tensor *t = read_ok(path);
    const uint8_t *b = eg_tensor_data(t);
    assert_true(b[0] == 0 && b[1] == 1 && b[2] == 1);
    eg_release(t);
}

/* ---- malformed files ---- */

static void test_bad_prefix(void **state) {
    (void)state;
    expect_bad_bytes("\x93NUMPX\x01\x00\x00\x00", 10, EG_ERR_FORMAT,
                     "not a .npy file: it does not start with \\x93NUMPY");
    expect_bad_bytes("\x93NUM", 4, EG_ERR_FORMAT, "too short for a .npy header");
    expect_bad_bytes("", 0, EG_ERR_FORMAT, "too short for a .npy header");
    expect_bad_bytes("\x93NUMPY\x04\x00\x10\x00", 10, EG_ERR_FORMAT,
                     "unsupported .npy format version 4.0 (supported: 1.0, 2.0, 3.0)");
    expect_bad_bytes("\x93NUMPY\x01\x01\x10\x00", 10, EG_ERR_FORMAT,
                     "unsupported .npy format version 1.1");
    expect_bad_bytes("\x93NUMPY\x02\x00\x10\x00", 10, EG_ERR_FORMAT, "too short for a .npy header");
    expect_bad_bytes("\x93NUMPY\x01\x00\x76\x00{'descr'", 17, EG_ERR_FORMAT,
                     "truncated header: it announces 128 bytes, the file has 17");
    expect_bad_bytes("\x93NUMPY\x02\x00\xff\xff\xff\x00", 12, EG_ERR_FORMAT,
                     ".npy header length 16777215 exceeds the limit of 1048576 bytes");
}

static void test_header_not_a_dict(void **state) {
    (void)state;
    expect_bad("['descr', '<f4']", 0, EG_ERR_FORMAT,
               "bad .npy header: expected a dict starting with '{' (at byte 0");
    expect_bad("{'descr': '<f4', 'fortran_order': False, 'shape': (2,)} extra", 8, EG_ERR_FORMAT,
               "bad .npy header: unexpected text after the dict");
    expect_bad("{'descr': '<f4' 'fortran_order': False, 'shape': (2,)}", 8, EG_ERR_FORMAT,
               "bad .npy header: expected ',' or '}' in the dict");
    expect_bad("{'descr' '<f4'}", 0, EG_ERR_FORMAT, "bad .npy header: expected ':' after a key");
    expect_bad("{'descr: '<f4'}", 0, EG_ERR_FORMAT, "bad .npy header: unexpected key 'descr: '");
    expect_bad("{'descr': '<f4", 0, EG_ERR_FORMAT, "bad .npy header: unterminated string");
    expect_bad("{descr: '<f4'}", 0, EG_ERR_FORMAT, "bad .npy header: expected a quoted string");
    expect_bad("{'de\\x63r': '<f4'}", 0, EG_ERR_FORMAT,
               "bad .npy header: unsupported character 0x5c in a string");
}

static void test_wrong_keys(void **state) {
    (void)state;
    expect_bad("{'descr': '<f4', 'fortran_order': False}", 0, EG_ERR_FORMAT,
               "bad .npy header: missing key 'shape'");
    expect_bad("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'x': 1}", 8, EG_ERR_FORMAT,
               "bad .npy header: unexpected key 'x' (the dict has exactly the keys 'descr', "
               "'fortran_order' and 'shape')");
    expect_bad("{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (2,)}", 8,
               EG_ERR_FORMAT, "bad .npy header: duplicate key 'descr'");
}

static void test_unsupported_dtypes(void **state) {
    (void)state;
    expect_bad("{'descr': '<i2', 'fortran_order': False, 'shape': (2,)}", 4, EG_ERR_UNSUPPORTED,
               "bad .npy header: dtype '<i2' is not supported; supported: '<f4' '<f8' '<f2' "
               "'<i4' '<i8' '|u1' '|b1'");
    expect_bad("{'descr': '<c16', 'fortran_order': False, 'shape': (2,)}", 32, EG_ERR_UNSUPPORTED,
               "bad .npy header: dtype '<c16' is not supported");
    expect_bad("{'descr': [('x', '<f4')], 'fortran_order': False, 'shape': (2,)}", 8,
               EG_ERR_UNSUPPORTED,
               "bad .npy header: structured dtypes (a list as 'descr') are not supported");
    expect_bad("{'descr': '|f4', 'fortran_order': False, 'shape': (2,)}", 8, EG_ERR_FORMAT,
               "bad .npy header: dtype '|f4': byte order '|' (not applicable) is only valid for "
               "one-byte types");
}

static void test_bad_fortran_order(void **state) {
    (void)state;
    expect_bad("{'descr': '<f4', 'fortran_order': 0, 'shape': (2,)}", 8, EG_ERR_FORMAT,
               "bad .npy header: 'fortran_order' must be True or False");
    expect_bad("{'descr': '<f4', 'fortran_order': Truth, 'shape': (2,)}", 8, EG_ERR_FORMAT,
               "bad .npy header: 'fortran_order' must be True or False");
    expect_bad("{'descr': '<f4', 'fortran_order': 'False', 'shape': (2,)}", 8, EG_ERR_FORMAT,
               "bad .npy header: 'fortran_order' must be True or False");
}

static void test_bad_shapes(void **state) {
    (void)state;
    expect_bad("{'descr': '<f4', 'fortran_order': False, 'shape': [2, 3]}", 24, EG_ERR_FORMAT,
               "bad .npy header: 'shape' must be a tuple of integers such as (2, 3), (3,) or (), "
               "not a list");
    expect_bad("{'descr': '<f4', 'fortran_order': False, 'shape': (3)}", 12, EG_ERR_FORMAT,
               "bad .npy header: 'shape' (3) is an int in parentheses, not a tuple: write (3,)");
    expect_bad("{'descr': '<f4', 'fortran_order': False, 'shape': 3}", 12, EG_ERR_FORMAT,
               "bad .npy header: 'shape' must be a tuple of integers such as (2, 3), (3,) or (), "
               "not an int");
    expect_bad("{'descr': '<f4', 'fortran_order': False, 'shape': (2, -1)}", 0, EG_ERR_FORMAT,
               "bad .npy header: negative dimension in 'shape'");
    expect_bad("{'descr': '<f4', 'fortran_order': False, 'shape': (2.0,)}", 8, EG_ERR_FORMAT,
               "bad .npy header: 'shape' must hold plain decimal integers");
    expect_bad("{'descr': '<f4', 'fortran_order': False, 'shape': (2L,)}", 8, EG_ERR_FORMAT,
               "bad .npy header: 'shape' must hold plain decimal integers");
    expect_bad("{'descr': '<f4', 'fortran_order': False, 'shape': (02,)}", 8, EG_ERR_FORMAT,
               "bad .npy header: dimension with a leading zero in 'shape'");
    expect_bad("{'descr': '<f4', 'fortran_order': False, 'shape': (2 3)}", 24, EG_ERR_FORMAT,
               "bad .npy header: expected ',' or ')' in 'shape'");
    expect_bad("{'descr': '<f4', 'fortran_order': False, 'shape': (,)}", 0, EG_ERR_FORMAT,
               "bad .npy header: 'shape' must hold non-negative integers");
    expect_bad("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,)}", 0,
               EG_ERR_FORMAT, "bad .npy header: dimension in 'shape' is too large");
    expect_bad("{'descr': '<f4', 'fortran_order': False, 'shape': (1,1,1,1,1,1,1,1,1)}", 4,
               EG_ERR_UNSUPPORTED,
               "bad .npy header: more than 8 dimensions in 'shape' (eagle supports up to 8)");
    expect_bad("{'descr': '<f8', 'fortran_order': False, 'shape': (4294967296, 4294967296)}", 0,
               EG_ERR_FORMAT,
               "bad .npy header: 'shape' has too many elements (the count "
               "overflows)");
    expect_bad("{'descr': '<f8', 'fortran_order': False, 'shape': (0, 4294967296, 4294967296)}", 0,
               EG_ERR_FORMAT, "bad .npy header: 'shape' has too many elements");
}

static void test_data_size_mismatch(void **state) {
    (void)state;
    expect_bad("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 20, EG_ERR_FORMAT,
               "truncated data: shape (2, 3) of f32 needs 24 bytes of data after the 128-byte "
               "header, the file has 20");
    expect_bad("{'descr': '<i8', 'fortran_order': False, 'shape': (), }", 9, EG_ERR_FORMAT,
               "trailing bytes: shape () of i64 needs 8 bytes of data after the 128-byte header, "
               "the file has 9");
    expect_bad("{'descr': '<i8', 'fortran_order': False, 'shape': (1000000000000,), }", 8,
               EG_ERR_FORMAT, "truncated data: shape (1000000000000,) of i64 needs");
}

static void test_read_errors(void **state) {
    (void)state;
    char path[PATH_MAX];
    join(path, sizeof path, "missing.npy");
    assert_null(eg_npy_read(path));
    assert_error_contains(EG_ERR_IO, "cannot open");
    assert_null(eg_npy_read(temp_dir));
    assert_error_contains(EG_ERR_IO, "is a directory");
}

/* The in-memory parser never reads past what it is given: every prefix of a valid file. */
static void test_parse_header_truncations(void **state) {
    (void)state;
    char path[PATH_MAX];
    join(path, sizeof path, "whole.npy");
    eg_tensor *t = eg_ones(EG_DTYPE_F32, 2, (int64_t[]){2, 2});
    assert_int_equal(eg_npy_write(path, t), EG_OK);
    size_t n = 0;
    uint8_t *bytes = read_whole(path, &n);
    for (size_t cut = 0; cut < 128; cut++) {
        uint8_t *copy = malloc(cut + 1);
        assert_non_null(copy);
        memcpy(copy, bytes, cut);
        eg__npy_header h;
        assert_int_equal(eg__npy_parse_header(copy, cut, "cut", &h), EG_ERR_FORMAT);
        eg_clear_error();
        free(copy);
    }
    eg__npy_header h;
    assert_int_equal(eg__npy_parse_header(bytes, n, "whole", &h), EG_OK);
    assert_int_equal(h.header_bytes, 128);
    assert_int_equal(h.data_bytes, 16);
    assert_false(eg__npy_needs_conversion(&h));
    free(bytes);
    eg_release(t);
}

/* ---- atomicity ---- */

static void test_write_into_missing_directory(void **state) {
    (void)state;
    char path[PATH_MAX];
    join(path, sizeof path, "no/such/dir/a.npy");
    eg_tensor *t = eg_zeros(EG_DTYPE_F32, 1, (int64_t[]){2});
    assert_int_equal(eg_npy_write(path, t), EG_ERR_IO);
    assert_error_contains(EG_ERR_IO, "cannot create the temporary file");
    assert_false(file_exists(path));
    eg_release(t);
}

static void test_failed_write_keeps_old_file(void **state) {
    (void)state;
    char path[PATH_MAX];
    join(path, sizeof path, "keep.npy");
    eg_tensor *small = eg_full(EG_DTYPE_F64, 1, (int64_t[]){3}, 1.0);
    assert_int_equal(eg_npy_write(path, small), EG_OK);
    size_t n_before = 0;
    uint8_t *before = read_whole(path, &n_before);

    eg_tensor *big = eg_full(EG_DTYPE_F64, 2, (int64_t[]){512, 512}, 2.0);
    struct rlimit old = limit_file_size(100 << 10);
    eg_status status = eg_npy_write(path, big);
    restore_file_size(old);
    assert_int_equal(status, EG_ERR_IO);
    assert_error_contains(EG_ERR_IO, "keep.npy: write failed: File too large");

    size_t n_after = 0;
    uint8_t *after = read_whole(path, &n_after);
    assert_int_equal(n_after, n_before);
    assert_memory_equal(after, before, n_before);
    assert_int_equal(count_temp_files(temp_dir), 0);
    eg_tensor *back = read_ok(path);
    assert_same_tensor(small, back);
    eg_release(back);
    free(before);
    free(after);
    eg_release(small);
    eg_release(big);
}

static void test_failed_rename_keeps_directory(void **state) {
    (void)state;
    char dir[PATH_MAX], inside[PATH_MAX + 16];
    join(dir, sizeof dir, "npy-dir");
    assert_int_equal(mkdir(dir, 0755), 0);
    snprintf(inside, sizeof inside, "%s/file", dir);
    write_bytes(inside, "x", 1);
    eg_tensor *t = eg_zeros(EG_DTYPE_F32, 1, (int64_t[]){2});
    assert_int_equal(eg_npy_write(dir, t), EG_ERR_IO);
    assert_error_contains(EG_ERR_IO, "rename failed");
    assert_true(file_exists(inside));
    assert_int_equal(count_temp_files(temp_dir), 0);
    eg_release(t);
}

static int group_setup(void **state) {
    (void)state;
    return make_temp_dir("eagle-test-npy");
}

static int group_teardown(void **state) {
    (void)state;
    return remove_temp_dir();
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_round_trip_every_dtype, clear_error_setup),
        cmocka_unit_test_setup(test_header_matches_numpy, clear_error_setup),
        cmocka_unit_test_setup(test_write_errors, clear_error_setup),
        cmocka_unit_test_setup(test_fortran_order, clear_error_setup),
        cmocka_unit_test_setup(test_big_endian, clear_error_setup),
        cmocka_unit_test_setup(test_versions_2_and_3, clear_error_setup),
        cmocka_unit_test_setup(test_lenient_but_valid_headers, clear_error_setup),
        cmocka_unit_test_setup(test_bad_prefix, clear_error_setup),
        cmocka_unit_test_setup(test_header_not_a_dict, clear_error_setup),
        cmocka_unit_test_setup(test_wrong_keys, clear_error_setup),
        cmocka_unit_test_setup(test_unsupported_dtypes, clear_error_setup),
        cmocka_unit_test_setup(test_bad_fortran_order, clear_error_setup),
        cmocka_unit_test_setup(test_bad_shapes, clear_error_setup),
        cmocka_unit_test_setup(test_data_size_mismatch, clear_error_setup),
        cmocka_unit_test_setup(test_read_errors, clear_error_setup),
        cmocka_unit_test_setup(test_parse_header_truncations, clear_error_setup),
        cmocka_unit_test_setup(test_write_into_missing_directory, clear_error_setup),
        cmocka_unit_test_setup(test_failed_write_keeps_old_file, clear_error_setup),
        cmocka_unit_test_setup(test_failed_rename_keeps_directory, clear_error_setup),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
