/* safetensors: round trips of every dtype (0-d, empty and non-contiguous tensors included), the
 * writer's exact layout, every check of the reader with its message, reading from memory, and the
 * atomicity of saving (a failed save leaves the previous checkpoint intact and no temporary file).
 * Files are written into a fresh temporary directory at run time. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "eagle/checkpoint.h"
#include "eagle/ops.h"
#include "eagle/runtime.h"
#include "eagle/tensor.h"
#include "io/checkpoint_internal.h"

#include "checkpoint_test_util.h"

/* ---- helpers ---- */

/* Writes "<8-byte length of header><header><n_data bytes of 0x5a>" to name in the temp dir and
 * stores its path in path. */
static void write_raw(char *path, size_t path_size, const char *name, const char *header,
                      size_t n_data) {
    join(path, path_size, name);
    size_t n_header = strlen(header);
    size_t n = 8 + n_header + n_data;
    uint8_t *bytes = malloc(n + 1);
    assert_non_null(bytes);
    for (int i = 0; i < 8; i++) bytes[i] = (uint8_t)((uint64_t)n_header >> (8 * i));
    memcpy(bytes + 8, header, n_header);
    memset(bytes + 8 + n_header, 0x5a, n_data);
    write_bytes(path, bytes, n);
    free(bytes);
}

/* Opening `header` (+ n_data bytes) must fail with EG_ERR_FORMAT and a message that starts with
 * "<path>: <expected>"; the in-memory parser must give the same message. */
static void expect_bad(const char *header, size_t n_data, const char *expected) {
    char path[PATH_MAX];
    write_raw(path, sizeof path, "bad.safetensors", header, n_data);
    eg_clear_error();
    assert_null(eg_safetensors_open(path));
    char prefix[PATH_MAX + 1024];
    snprintf(prefix, sizeof prefix, "%s: %s", path, expected);
    assert_error(EG_ERR_FORMAT, prefix);

    size_t n = 0;
    uint8_t *bytes = read_whole(path, &n);
    eg_safetensors *st = (eg_safetensors *)1;
    assert_int_equal(eg__safetensors_open_memory(bytes, n, "mem", &st), EG_ERR_FORMAT);
    assert_null(st);
    snprintf(prefix, sizeof prefix, "mem: %s", expected);
    assert_error(EG_ERR_FORMAT, prefix);
    free(bytes);
}

/* One tensor of every dtype plus the awkward shapes; caller releases. */
enum { N_SAMPLES = 12 };
static const char *const sample_names[N_SAMPLES] = {"f32",    "f64",   "f16",        "bf16",
                                                    "i32",    "i64",   "u8",         "bool",
                                                    "scalar", "empty", "transposed", "strided"};

static void make_samples(eg_tensor **t) {
    const float f32[6] = {1.5f, -2.25f, 3e-8f, 1e30f, -0.0f, 7.0f};
    const double f64[4] = {1.0 / 3.0, -1e300, 2.5, 0.0};
    const float halves[3] = {0.5f, -65504.0f, 1.0f / 1024};
    uint16_t f16[3], bf16[3];
    eg_f32_to_f16(halves, f16, 3);
    eg_f32_to_bf16(halves, bf16, 3);
    const int32_t i32[5] = {INT32_MIN, -1, 0, 1, INT32_MAX};
    const int64_t i64[3] = {INT64_MIN, 42, INT64_MAX};
    const uint8_t u8[4] = {0, 1, 128, 255};
    const uint8_t booleans[3] = {1, 0, 1};
    t[0] = eg_tensor_from_data(f32, EG_DTYPE_F32, 2, (int64_t[]){2, 3});
    t[1] = eg_tensor_from_data(f64, EG_DTYPE_F64, 1, (int64_t[]){4});
    t[2] = eg_tensor_from_data(f16, EG_DTYPE_F16, 1, (int64_t[]){3});
    t[3] = eg_tensor_from_data(bf16, EG_DTYPE_BF16, 3, (int64_t[]){1, 3, 1});
    t[4] = eg_tensor_from_data(i32, EG_DTYPE_I32, 1, (int64_t[]){5});
    t[5] = eg_tensor_from_data(i64, EG_DTYPE_I64, 1, (int64_t[]){3});
    t[6] = eg_tensor_from_data(u8, EG_DTYPE_U8, 2, (int64_t[]){2, 2});
    t[7] = eg_tensor_from_data(booleans, EG_DTYPE_BOOL, 1, (int64_t[]){3});
    t[8] = eg_scalar(EG_DTYPE_F32, 3.25);
    t[9] = eg_zeros(EG_DTYPE_F32, 2, (int64_t[]){0, 3});
    eg_tensor *base = eg_arange(0, 12, 1, EG_DTYPE_I32);
    eg_tensor *matrix = eg_reshape(base, 2, (int64_t[]){3, 4});
    t[10] = eg_transpose(matrix, 0, 1);
    eg_tensor *wide = eg_arange(0, 20, 1, EG_DTYPE_F64);
    eg_tensor *wide2 = eg_reshape(wide, 2, (int64_t[]){4, 5});
    t[11] = eg_slice(wide2, 1, 0, 5, 2);
    for (int i = 0; i < N_SAMPLES; i++) assert_non_null(t[i]);
    assert_false(eg_tensor_is_contiguous(t[10]));
    assert_false(eg_tensor_is_contiguous(t[11]));
    eg_release(base);
    eg_release(matrix);
    eg_release(wide);
    eg_release(wide2);
}

static void release_all(eg_tensor **t, int n) {
    for (int i = 0; i < n; i++) eg_release(t[i]);
}

/* ---- round trips ---- */

static void test_round_trip_every_dtype(void **state) {
    (void)state;
    eg_tensor *t[N_SAMPLES];
    make_samples(t);
    char path[PATH_MAX];
    join(path, sizeof path, "all.safetensors");
    const char *keys[] = {"epoch", "note"};
    const char *values[] = {"3", "quote \" backslash \\ newline \n unicode \xc3\xa9"};
    assert_int_equal(eg_safetensors_save(path, N_SAMPLES, sample_names, t, 2, keys, values), EG_OK);
    assert_int_equal(count_temp_files(temp_dir), 0);

    eg_safetensors *st = eg_safetensors_open(path);
    assert_non_null(st);
    assert_int_equal(eg_safetensors_count(st), N_SAMPLES);
    for (int i = 0; i < N_SAMPLES; i++) {
        assert_true(eg_safetensors_contains(st, sample_names[i]));
        eg_dtype dtype;
        int n_dims;
        int64_t shape[EG_MAX_DIMS];
        assert_int_equal(eg_safetensors_info(st, sample_names[i], &dtype, &n_dims, shape), EG_OK);
        assert_int_equal(dtype, eg_tensor_dtype(t[i]));
        assert_int_equal(n_dims, eg_tensor_n_dims(t[i]));
        eg_tensor *back = eg_safetensors_get(st, sample_names[i]);
        assert_same_tensor(t[i], back);
        eg_release(back);
    }
    assert_false(eg_safetensors_contains(st, "nope"));
    assert_string_equal(eg_safetensors_metadata(st, "epoch"), "3");
    assert_string_equal(eg_safetensors_metadata(st, "note"), values[1]);
    assert_string_equal(eg_safetensors_metadata(st, "format"), "eagle");
    assert_string_equal(eg_safetensors_metadata(st, "eagle_version"), eg_version());
    assert_null(eg_safetensors_metadata(st, "missing"));
    assert_int_equal(eg_last_status(), EG_OK);
    assert_int_equal(eg_safetensors_metadata_count(st), 4);
    assert_string_equal(eg_safetensors_metadata_key(st, 0), "eagle_version");
    assert_string_equal(eg_safetensors_metadata_key(st, 3), "note");

    /* Layout order: 8-byte elements first, then 4, 2, 1; by name within a size. */
    const char *order[N_SAMPLES] = {"f64",    "i64",        "strided", "empty", "f32",  "i32",
                                    "scalar", "transposed", "bf16",    "f16",   "bool", "u8"};
    for (int i = 0; i < N_SAMPLES; i++) assert_string_equal(eg_safetensors_name(st, i), order[i]);
    assert_null(eg_safetensors_name(st, N_SAMPLES));
    assert_error(EG_ERR_INVALID_ARGUMENT, path);
    eg_safetensors_close(st);
    release_all(t, N_SAMPLES);
}

static void test_exact_layout(void **state) {
    (void)state;
    char path[PATH_MAX];
    join(path, sizeof path, "layout.safetensors");
    eg_tensor *t = eg_tensor_from_data((float[]){1.0f, 2.0f}, EG_DTYPE_F32, 1, (int64_t[]){2});
    const char *name = "w";
    assert_int_equal(eg_safetensors_save(path, 1, &name, &t, 0, NULL, NULL), EG_OK);
    size_t n = 0;
    uint8_t *bytes = read_whole(path, &n);
    char expected[256];
    snprintf(expected, sizeof expected,
             "{\"__metadata__\":{\"eagle_version\":\"%s\",\"format\":\"eagle\"},"
             "\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
             eg_version());
    size_t header = 0;
    for (int i = 7; i >= 0; i--) header = header << 8 | bytes[i];
    assert_int_equal(header % 8, 0);
    assert_int_equal(n, 8 + header + 8);
    assert_memory_equal(bytes + 8, expected, strlen(expected));
    for (size_t i = strlen(expected); i < header; i++) assert_int_equal(bytes[8 + i], ' ');
    float values[2];
    memcpy(values, bytes + 8 + header, 8);
    assert_true(values[0] == 1.0f && values[1] == 2.0f);
    free(bytes);
    eg_release(t);
}

static void test_user_format_overrides_default(void **state) {
    (void)state;
    char path[PATH_MAX];
    join(path, sizeof path, "pt.safetensors");
    const char *keys[] = {"format"}, *values[] = {"pt"};
    assert_int_equal(eg_safetensors_save(path, 0, NULL, NULL, 1, keys, values), EG_OK);
    eg_safetensors *st = eg_safetensors_open(path);
    assert_non_null(st);
    assert_int_equal(eg_safetensors_count(st), 0);
    assert_string_equal(eg_safetensors_metadata(st, "format"), "pt");
    assert_string_equal(eg_safetensors_metadata(st, "eagle_version"), eg_version());
    eg_safetensors_close(st);
}

static void test_odd_names_round_trip(void **state) {
    (void)state;
    char path[PATH_MAX];
    join(path, sizeof path, "names.safetensors");
    const char *names[] = {"", "a\"b\\c", "tab\there", "\xe2\x82\xac/layer.0", "\x01"};
    eg_tensor *t[5];
    for (int i = 0; i < 5; i++) t[i] = eg_full(EG_DTYPE_I32, 1, (int64_t[]){i + 1}, i);
    assert_int_equal(eg_safetensors_save(path, 5, names, t, 0, NULL, NULL), EG_OK);
    eg_safetensors *st = eg_safetensors_open(path);
    assert_non_null(st);
    for (int i = 0; i < 5; i++) {
        eg_tensor *back = eg_safetensors_get(st, names[i]);
        assert_same_tensor(t[i], back);
        eg_release(back);
    }
    eg_safetensors_close(st);
    release_all(t, 5);
}

static void test_save_argument_errors(void **state) {
    (void)state;
    char path[PATH_MAX];
    join(path, sizeof path, "args.safetensors");
    eg_tensor *t = eg_zeros(EG_DTYPE_F32, 1, (int64_t[]){2});
    eg_tensor *two[] = {t, t};
    const char *dup[] = {"x", "x"}, *reserved[] = {"__metadata__"}, *bad_utf8[] = {"\xff"};
    const char *ok[] = {"x", "y"};

    assert_int_equal(eg_safetensors_save(NULL, 0, NULL, NULL, 0, NULL, NULL), EG_ERR_NULL_ARGUMENT);
    eg_clear_error();
    assert_int_equal(eg_safetensors_save(path, 2, dup, two, 0, NULL, NULL),
                     EG_ERR_INVALID_ARGUMENT);
    assert_error_contains(EG_ERR_INVALID_ARGUMENT, "duplicate tensor name 'x'");
    assert_int_equal(eg_safetensors_save(path, 1, reserved, two, 0, NULL, NULL),
                     EG_ERR_INVALID_ARGUMENT);
    assert_error_contains(EG_ERR_INVALID_ARGUMENT, "__metadata__");
    assert_int_equal(eg_safetensors_save(path, 1, bad_utf8, two, 0, NULL, NULL),
                     EG_ERR_INVALID_ARGUMENT);
    assert_error_contains(EG_ERR_INVALID_ARGUMENT, "not valid UTF-8");
    eg_tensor *with_null[] = {t, NULL};
    assert_int_equal(eg_safetensors_save(path, 2, ok, with_null, 0, NULL, NULL),
                     EG_ERR_NULL_ARGUMENT);
    assert_error_contains(EG_ERR_NULL_ARGUMENT, "tensor 'y' is NULL");
    const char *keys[] = {"k", "k"}, *values[] = {"1", "2"};
    assert_int_equal(eg_safetensors_save(path, 0, NULL, NULL, 2, keys, values),
                     EG_ERR_INVALID_ARGUMENT);
    assert_error_contains(EG_ERR_INVALID_ARGUMENT, "duplicate metadata key 'k'");
    assert_int_equal(eg_safetensors_save(path, -1, NULL, NULL, 0, NULL, NULL),
                     EG_ERR_INVALID_ARGUMENT);
    eg_clear_error();
    assert_false(file_exists(path));
    assert_int_equal(count_temp_files(temp_dir), 0);
    eg_release(t);
}

/* ---- malformed files: one test per check ---- */

#define GOOD_ENTRY "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}"

static void test_valid_variants(void **state) {
    (void)state;
    char path[PATH_MAX];
    /* Offsets out of header order, trailing spaces, no metadata, a zero-size tensor sharing an
     * offset, a known dtype eagle cannot hold. */
    write_raw(path, sizeof path, "ok.safetensors",
              "{\"b\":{\"dtype\":\"I16\",\"shape\":[3],\"data_offsets\":[8,14]},"
              "\"z\":{\"dtype\":\"F64\",\"shape\":[0,5],\"data_offsets\":[8,8]}," GOOD_ENTRY "}   ",
              14);
    eg_safetensors *st = eg_safetensors_open(path);
    assert_non_null(st);
    assert_int_equal(eg_safetensors_count(st), 3);
    assert_string_equal(eg_safetensors_name(st, 0), "a");
    assert_string_equal(eg_safetensors_name(st, 1), "z");
    assert_string_equal(eg_safetensors_name(st, 2), "b");
    assert_int_equal(eg_safetensors_metadata_count(st), 0);
    assert_null(eg_safetensors_metadata(st, "format")); /* no key, no error */
    assert_int_equal(eg_last_status(), EG_OK);
    eg_tensor *a = eg_safetensors_get(st, "a");
    assert_non_null(a);
    eg_release(a);
    eg_tensor *z = eg_safetensors_get(st, "z");
    assert_non_null(z);
    assert_int_equal(eg_tensor_n_elems(z), 0);
    eg_release(z);
    assert_null(eg_safetensors_get(st, "b"));
    assert_error(EG_ERR_UNSUPPORTED, "");
    assert_int_equal(eg_safetensors_info(st, "b", NULL, NULL, NULL), EG_ERR_UNSUPPORTED);
    eg_clear_error();
    assert_null(eg_safetensors_get(st, "missing"));
    char prefix[PATH_MAX + 64];
    snprintf(prefix, sizeof prefix, "%s: no tensor named 'missing'", path);
    assert_error(EG_ERR_INVALID_ARGUMENT, prefix);
    eg_safetensors_close(st);
}

static void test_file_too_short(void **state) {
    (void)state;
    char path[PATH_MAX];
    join(path, sizeof path, "short.safetensors");
    write_bytes(path, "\x05\0\0", 3);
    assert_null(eg_safetensors_open(path));
    assert_error_contains(EG_ERR_FORMAT, "file has 3 bytes; a safetensors file starts with an "
                                         "8-byte header length");
}

static void test_header_too_large(void **state) {
    (void)state;
    char path[PATH_MAX];
    join(path, sizeof path, "huge.safetensors");
    uint8_t bytes[16] = {0x01, 0xe1, 0xf5, 0x05, 0, 0, 0, 0, '{', '}'}; /* 100000001 */
    write_bytes(path, bytes, sizeof bytes);
    assert_null(eg_safetensors_open(path));
    assert_error_contains(EG_ERR_FORMAT,
                          "header length 100000001 exceeds the limit of 100000000 bytes");
    uint8_t all_ones[8];
    memset(all_ones, 0xff, 8);
    write_bytes(path, all_ones, 8);
    assert_null(eg_safetensors_open(path));
    assert_error_contains(EG_ERR_FORMAT, "exceeds the limit");
}

static void test_header_past_end(void **state) {
    (void)state;
    char path[PATH_MAX];
    join(path, sizeof path, "past.safetensors");
    uint8_t bytes[12] = {100, 0, 0, 0, 0, 0, 0, 0, '{', '}', ' ', ' '};
    write_bytes(path, bytes, sizeof bytes);
    assert_null(eg_safetensors_open(path));
    assert_error_contains(EG_ERR_FORMAT,
                          "header length 100 runs past the end of the file (12 bytes)");
}

static void test_header_not_utf8(void **state) {
    (void)state;
    expect_bad("{\"a\xff\":{}}", 0, "header is not valid UTF-8 (byte 0xff at offset 3)");
    expect_bad("{\"\xed\xa0\x80\":{}}", 0, "header is not valid UTF-8"); /* a surrogate */
    expect_bad("{\"\xc0\xaf\":{}}", 0, "header is not valid UTF-8");     /* overlong '/' */
}

static void test_header_not_an_object(void **state) {
    (void)state;
    expect_bad("[1, 2]", 0, "header does not start with '{'");
    expect_bad(" {}", 0, "header does not start with '{'");
    expect_bad("", 0, "header does not start with '{'");
}

static void test_header_not_json(void **state) {
    (void)state;
    expect_bad("{" GOOD_ENTRY ",}", 8, "header is not valid JSON: expected a string key");
    expect_bad("{\"a\" 1}", 0,
               "header is not valid JSON: expected ':' after an object key at "
               "byte 5 of the header");
    expect_bad("{} x", 0, "header is not valid JSON: unexpected text after the JSON value");
    expect_bad("{\"a\":\"\\ud800\"}", 0, "header is not valid JSON: lone high surrogate");
    expect_bad("{\"a\":01}", 0, "header is not valid JSON: invalid number: leading zero");
    expect_bad("{\"a\":\"x", 0, "header is not valid JSON: unterminated string");
    char deep[300] = "{\"a\":";
    for (int i = 0; i < 100; i++) strcat(deep, "[");
    expect_bad(deep, 0, "header is not valid JSON: nesting deeper than 64 levels");
}

static void test_duplicate_names(void **state) {
    (void)state;
    expect_bad("{" GOOD_ENTRY "," GOOD_ENTRY "}", 8, "tensor 'a': duplicate tensor name");
    expect_bad("{\"__metadata__\":{},\"__metadata__\":{}}", 0, "duplicate key '__metadata__'");
    expect_bad("{\"__metadata__\":{\"k\":\"1\",\"k\":\"2\"}}", 0, "duplicate __metadata__ key 'k'");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"dtype\":\"F32\",\"shape\":[2],"
               "\"data_offsets\":[0,8]}}",
               8, "tensor 'a': duplicate field 'dtype'");
}

static void test_unknown_dtype(void **state) {
    (void)state;
    expect_bad("{\"a\":{\"dtype\":\"F33\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8,
               "tensor 'a': unknown dtype 'F33'");
    expect_bad("{\"a\":{\"dtype\":\"f32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8,
               "tensor 'a': unknown dtype 'f32'");
    expect_bad("{\"a\":{\"dtype\":7,\"shape\":[2],\"data_offsets\":[0,8]}}", 8,
               "tensor 'a': dtype must be a string, not number");
}

static void test_bad_shape_entries(void **state) {
    (void)state;
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[2,-1],\"data_offsets\":[0,8]}}", 8,
               "tensor 'a': shape entry 1 is -1; shape entries must be non-negative integers");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[2.0],\"data_offsets\":[0,8]}}", 8,
               "tensor 'a': shape entry 0 is 2.0");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[\"2\"],\"data_offsets\":[0,8]}}", 8,
               "tensor 'a': shape entry 0 is a string");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[18446744073709551616],"
               "\"data_offsets\":[0,8]}}",
               8,
               "tensor 'a': shape entry 0 is 18446744073709551616; shape entries must be "
               "non-negative integers below 2^64");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":2,\"data_offsets\":[0,8]}}", 8,
               "tensor 'a': shape must be an array of integers, not number");
}

static void test_shape_overflow(void **state) {
    (void)state;
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],"
               "\"data_offsets\":[0,8]}}",
               8,
               "tensor 'a': shape (4294967296, 4294967296) has too many elements (the count "
               "overflows)");
    /* Zero elements, but eagle's strides would still overflow. */
    expect_bad("{\"a\":{\"dtype\":\"U8\",\"shape\":[0,4294967296,4294967296],"
               "\"data_offsets\":[0,0]}}",
               0, "tensor 'a': shape (0, 4294967296, 4294967296) has too many elements");
    /* Fine: the element count is small even though one dimension is large. */
    char path[PATH_MAX];
    write_raw(path, sizeof path, "zero.safetensors",
              "{\"a\":{\"dtype\":\"U8\",\"shape\":[4294967296,0],\"data_offsets\":[0,0]}}", 0);
    eg_safetensors *st = eg_safetensors_open(path);
    assert_non_null(st);
    eg_safetensors_close(st);
}

static void test_offsets_begin_after_end(void **state) {
    (void)state;
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[8,4]}}", 8,
               "tensor 'a': data_offsets [8, 4]: begin is after end");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0]}}", 8,
               "tensor 'a': data_offsets must be an array of two non-negative integers");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[-8,0]}}", 8,
               "tensor 'a': data_offsets must be an array of two non-negative integers");
}

static void test_offsets_size_mismatch(void **state) {
    (void)state;
    expect_bad("{\"dense/kernel\":{\"dtype\":\"F32\",\"shape\":[784,64],"
               "\"data_offsets\":[0,100]}}",
               100,
               "tensor 'dense/kernel': data_offsets [0, 100] hold 100 bytes but F32 (784, 64) "
               "needs 200704");
    expect_bad("{\"s\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[0,4]}}", 4,
               "tensor 's': data_offsets [0, 4] hold 4 bytes but I64 () needs 8");
    expect_bad("{\"f\":{\"dtype\":\"F4\",\"shape\":[3],\"data_offsets\":[0,2]}}", 2,
               "tensor 'f': F4 (3,) fills 12 bits, not a whole number of bytes");
}

static void test_offsets_gap(void **state) {
    (void)state;
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12,
               "tensor 'a': data_offsets [4, 12] leave bytes [0, 4) of the data buffer unused");
    expect_bad("{" GOOD_ENTRY ",\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[12,16]}}",
               16, "tensor 'b': data_offsets [12, 16] leave bytes [8, 12) of the data buffer");
}

static void test_offsets_overlap(void **state) {
    (void)state;
    expect_bad("{" GOOD_ENTRY ",\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
               12, "tensor 'b': data_offsets [4, 12] overlap tensor 'a', which ends at 8");
    expect_bad("{" GOOD_ENTRY ",\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8,
               "tensor 'b': data_offsets [0, 8] overlap tensor 'a', which ends at 8");
}

static void test_buffer_size_mismatch(void **state) {
    (void)state;
    expect_bad("{" GOOD_ENTRY "}", 4,
               "truncated: the tensors need 8 bytes of data but the file holds 4 after the header");
    expect_bad("{" GOOD_ENTRY "}", 9,
               "the file holds 9 bytes of data after the header but the tensors cover only 8 "
               "(trailing bytes)");
    expect_bad("{}", 1,
               "the file holds 1 bytes of data after the header but the tensors cover "
               "only 0");
}

static void test_bad_metadata(void **state) {
    (void)state;
    expect_bad("{\"__metadata__\":{\"epoch\":3}}", 0,
               "__metadata__ must map strings to strings, but key 'epoch' has a number value");
    expect_bad("{\"__metadata__\":[]}", 0,
               "__metadata__ must be an object of string values, not an array");
    expect_bad("{\"__metadata__\":{\"k\":null}}", 0, "__metadata__ must map strings to strings");
    expect_bad("{\"__metadata__\":{\"k\":\"a\\u0000b\"}}", 0,
               "__metadata__ key 'k': NUL characters are not supported");
}

static void test_bad_entries(void **state) {
    (void)state;
    expect_bad("{\"a\":[1]}", 0,
               "tensor 'a': entry must be an object with dtype, shape and "
               "data_offsets, not array");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[2]}}", 8,
               "tensor 'a': missing field 'data_offsets'");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8],\"x\":1}}", 8,
               "tensor 'a': unknown field 'x'");
    expect_bad("{\"a\\u0000b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8,
               "tensor name 'a?b' contains a NUL character");
}

/* ---- misc reader behaviour ---- */

static void test_open_errors(void **state) {
    (void)state;
    char path[PATH_MAX];
    join(path, sizeof path, "does-not-exist.safetensors");
    assert_null(eg_safetensors_open(path));
    assert_error_contains(EG_ERR_IO, "cannot open");
    assert_null(eg_safetensors_open(temp_dir));
    assert_error_contains(EG_ERR_IO, "is a directory");
    assert_null(eg_safetensors_open(NULL));
    assert_error(EG_ERR_NULL_ARGUMENT, "");
    assert_null(eg_safetensors_get(NULL, "x"));
    assert_error(EG_ERR_NULL_ARGUMENT, "");
    assert_int_equal(eg_safetensors_count(NULL), 0);
    assert_error(EG_ERR_NULL_ARGUMENT, "");
    eg_safetensors_close(NULL);
}

static void test_bool_bytes_normalised(void **state) {
    (void)state;
    char path[PATH_MAX];
    write_raw(path, sizeof path, "bool.safetensors",
              "{\"b\":{\"dtype\":\"BOOL\",\"shape\":[2],\"data_offsets\":[0,2]}}", 2);
    eg_safetensors *st = eg_safetensors_open(path);
    assert_non_null(st);
    eg_tensor *b = eg_safetensors_get(st, "b");
    assert_non_null(b);
    const uint8_t *data = eg_tensor_data(b);
    assert_int_equal(data[0], 1); /* the file holds 0x5a */
    assert_int_equal(data[1], 1);
    eg_release(b);
    eg_safetensors_close(st);
}

static void test_open_memory(void **state) {
    (void)state;
    eg_tensor *t[N_SAMPLES];
    make_samples(t);
    char path[PATH_MAX];
    join(path, sizeof path, "mem.safetensors");
    assert_int_equal(eg_safetensors_save(path, N_SAMPLES, sample_names, t, 0, NULL, NULL), EG_OK);
    size_t n = 0;
    uint8_t *bytes = read_whole(path, &n);
    eg_safetensors *st = NULL;
    assert_int_equal(eg__safetensors_open_memory(bytes, n, "mem", &st), EG_OK);
    for (int i = 0; i < N_SAMPLES; i++) {
        eg_tensor *back = eg_safetensors_get(st, sample_names[i]);
        assert_same_tensor(t[i], back);
        eg_release(back);
    }
    eg_safetensors_close(st);
    /* Every truncation of a valid file is refused, never read past. */
    for (size_t cut = 0; cut < n; cut++) {
        uint8_t *copy = malloc(cut + 1);
        assert_non_null(copy);
        memcpy(copy, bytes, cut);
        st = (eg_safetensors *)1;
        assert_int_equal(eg__safetensors_open_memory(copy, cut, "cut", &st), EG_ERR_FORMAT);
        assert_null(st);
        eg_clear_error();
        free(copy);
    }
    free(bytes);
    release_all(t, N_SAMPLES);
}

/* ---- atomicity ---- */

/* A checkpoint at path holding "v" = value. */
static void save_value(const char *path, float value) {
    eg_tensor *t = eg_full(EG_DTYPE_F32, 1, (int64_t[]){4}, value);
    const char *name = "v";
    assert_int_equal(eg_safetensors_save(path, 1, &name, &t, 0, NULL, NULL), EG_OK);
    eg_release(t);
}

static float load_value(const char *path) {
    eg_safetensors *st = eg_safetensors_open(path);
    assert_non_null(st);
    eg_tensor *t = eg_safetensors_get(st, "v");
    assert_non_null(t);
    float v = ((const float *)eg_tensor_data(t))[3];
    eg_release(t);
    eg_safetensors_close(st);
    return v;
}

static void test_save_into_missing_directory(void **state) {
    (void)state;
    char path[PATH_MAX];
    join(path, sizeof path, "no/such/dir/model.safetensors");
    eg_tensor *t = eg_zeros(EG_DTYPE_F32, 1, (int64_t[]){2});
    const char *name = "x";
    assert_int_equal(eg_safetensors_save(path, 1, &name, &t, 0, NULL, NULL), EG_ERR_IO);
    assert_error_contains(EG_ERR_IO, "cannot create the temporary file");
    assert_false(file_exists(path));
    eg_release(t);
}

static void test_failed_write_keeps_old_checkpoint(void **state) {
    (void)state;
    char path[PATH_MAX];
    join(path, sizeof path, "keep.safetensors");
    save_value(path, 1.0f);
    size_t n_before = 0;
    uint8_t *before = read_whole(path, &n_before);

    /* A big tensor and a 64 KiB file size limit: the write fails midway, as on a full disk. */
    eg_tensor *big = eg_full(EG_DTYPE_F32, 1, (int64_t[]){1 << 20}, 2.0);
    const char *name = "v";
    struct rlimit old = limit_file_size(64 << 10);
    eg_status status = eg_safetensors_save(path, 1, &name, &big, 0, NULL, NULL);
    restore_file_size(old);
    assert_int_equal(status, EG_ERR_IO);
    assert_error_contains(EG_ERR_IO, "keep.safetensors: write failed: File too large");

    size_t n_after = 0;
    uint8_t *after = read_whole(path, &n_after);
    assert_int_equal(n_after, n_before);
    assert_memory_equal(after, before, n_before);
    assert_true(load_value(path) == 1.0f);
    assert_int_equal(count_temp_files(temp_dir), 0);
    free(before);
    free(after);
    eg_release(big);
}

static void test_failed_rename_keeps_old_checkpoint(void **state) {
    (void)state;
    /* The destination is a non-empty directory: everything is written, then rename() fails. */
    char dir[PATH_MAX], inside[PATH_MAX + 16];
    join(dir, sizeof dir, "is-a-dir");
    assert_int_equal(mkdir(dir, 0755), 0);
    snprintf(inside, sizeof inside, "%s/file", dir);
    write_bytes(inside, "x", 1);
    eg_tensor *t = eg_zeros(EG_DTYPE_F32, 1, (int64_t[]){2});
    const char *name = "x";
    assert_int_equal(eg_safetensors_save(dir, 1, &name, &t, 0, NULL, NULL), EG_ERR_IO);
    assert_error_contains(EG_ERR_IO, "rename failed");
    assert_true(file_exists(inside));
    assert_int_equal(count_temp_files(temp_dir), 0);
    eg_release(t);
}

static void test_read_only_directory(void **state) {
    (void)state;
    char dir[PATH_MAX], path[PATH_MAX + 32];
    join(dir, sizeof dir, "read-only");
    assert_int_equal(mkdir(dir, 0755), 0);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    save_value(path, 5.0f);
    assert_int_equal(chmod(dir, 0555), 0);
    eg_tensor *t = eg_zeros(EG_DTYPE_F32, 1, (int64_t[]){4});
    const char *name = "v";
    eg_status status = eg_safetensors_save(path, 1, &name, &t, 0, NULL, NULL);
    assert_int_equal(chmod(dir, 0755), 0);
    if (geteuid() != 0) { /* root writes anywhere: then only the old file is checked */
        assert_int_equal(status, EG_ERR_IO);
        assert_error_contains(EG_ERR_IO, "cannot create the temporary file");
        assert_true(load_value(path) == 5.0f);
    } else {
        assert_int_equal(status, EG_OK);
    }
    assert_int_equal(count_temp_files(dir), 0);
    eg_release(t);
}

static void test_open_handle_survives_replacement(void **state) {
    (void)state;
    char path[PATH_MAX];
    join(path, sizeof path, "replace.safetensors");
    save_value(path, 1.0f);
    eg_safetensors *st = eg_safetensors_open(path);
    assert_non_null(st);
    save_value(path, 2.0f);
    eg_tensor *old = eg_safetensors_get(st, "v");
    assert_non_null(old);
    assert_true(((const float *)eg_tensor_data(old))[0] == 1.0f);
    eg_release(old);
    eg_safetensors_close(st);
    assert_true(load_value(path) == 2.0f);
}

static int group_setup(void **state) {
    (void)state;
    return make_temp_dir("eagle-test-safetensors");
}

static int group_teardown(void **state) {
    (void)state;
    return remove_temp_dir();
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_round_trip_every_dtype, clear_error_setup),
        cmocka_unit_test_setup(test_exact_layout, clear_error_setup),
        cmocka_unit_test_setup(test_user_format_overrides_default, clear_error_setup),
        cmocka_unit_test_setup(test_odd_names_round_trip, clear_error_setup),
        cmocka_unit_test_setup(test_save_argument_errors, clear_error_setup),
        cmocka_unit_test_setup(test_valid_variants, clear_error_setup),
        cmocka_unit_test_setup(test_file_too_short, clear_error_setup),
        cmocka_unit_test_setup(test_header_too_large, clear_error_setup),
        cmocka_unit_test_setup(test_header_past_end, clear_error_setup),
        cmocka_unit_test_setup(test_header_not_utf8, clear_error_setup),
        cmocka_unit_test_setup(test_header_not_an_object, clear_error_setup),
        cmocka_unit_test_setup(test_header_not_json, clear_error_setup),
        cmocka_unit_test_setup(test_duplicate_names, clear_error_setup),
        cmocka_unit_test_setup(test_unknown_dtype, clear_error_setup),
        cmocka_unit_test_setup(test_bad_shape_entries, clear_error_setup),
        cmocka_unit_test_setup(test_shape_overflow, clear_error_setup),
        cmocka_unit_test_setup(test_offsets_begin_after_end, clear_error_setup),
        cmocka_unit_test_setup(test_offsets_size_mismatch, clear_error_setup),
        cmocka_unit_test_setup(test_offsets_gap, clear_error_setup),
        cmocka_unit_test_setup(test_offsets_overlap, clear_error_setup),
        cmocka_unit_test_setup(test_buffer_size_mismatch, clear_error_setup),
        cmocka_unit_test_setup(test_bad_metadata, clear_error_setup),
        cmocka_unit_test_setup(test_bad_entries, clear_error_setup),
        cmocka_unit_test_setup(test_open_errors, clear_error_setup),
        cmocka_unit_test_setup(test_bool_bytes_normalised, clear_error_setup),
        cmocka_unit_test_setup(test_open_memory, clear_error_setup),
        cmocka_unit_test_setup(test_save_into_missing_directory, clear_error_setup),
        cmocka_unit_test_setup(test_failed_write_keeps_old_checkpoint, clear_error_setup),
        cmocka_unit_test_setup(test_failed_rename_keeps_old_checkpoint, clear_error_setup),
        cmocka_unit_test_setup(test_read_only_directory, clear_error_setup),
        cmocka_unit_test_setup(test_open_handle_survives_replacement, clear_error_setup),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
