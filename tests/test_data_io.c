/* The input pipeline's file sources and image augmentations: CSV (good files with every feature,
 * and every malformed case with its exact message), .npy and IDX files (and MNIST when the Debian
 * package's data is installed), and the ready-made flip / crop / normalize map callbacks against
 * plain-C references of their documented randomness. Files are written into a fresh temporary
 * directory at run time. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "eagle.h"

/* Not every helper of the shared files is used here. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#include "checkpoint_test_util.h"
#pragma GCC diagnostic pop
#include "data_test_util.h"

/* ---- CSV ---- */

static void write_text(char *path, size_t size, const char *name, const char *text) {
    join(path, size, name);
    write_bytes(path, text, strlen(text));
}

static void test_csv_good(void **state) {
    (void)state;
    char path[PATH_MAX];
    write_text(path, sizeof path, "good.csv",
               "\xEF\xBB\xBF"
               "a, b ,\"c\"\r\n"
               "1, 2.5,\"3\"\r\n"
               "\n"
               "   \n"
               "-4,5e-1 , nan\n"
               "  6 ,\t7\t,inf");
    eg_csv_options o = eg_csv_options_default();
    o.header = true;
    eg_tensor *t = eg_csv_read(path, &o);
    assert_non_null(t);
    assert_int_equal(eg_tensor_shape(t)[0], 3);
    assert_int_equal(eg_tensor_shape(t)[1], 3);
    const float *v = eg_tensor_data(t);
    assert_true(v[0] == 1 && v[1] == 2.5f && v[2] == 3 && v[3] == -4 && v[4] == 0.5f);
    assert_true(isnan(v[5]) && v[6] == 6 && v[7] == 7 && isinf(v[8]));

    /* Label column: (features, label) elements. */
    write_text(path, sizeof path, "labels.csv", "1;2;0\n3;4;1\n5;6;2\n");
    o = eg_csv_options_default();
    o.delimiter = ';';
    o.label_column = 2;
    o.dtype = EG_DTYPE_F64;
    o.label_dtype = EG_DTYPE_I32;
    eg_dataset *ds = eg_dataset_from_csv(path, &o);
    assert_non_null(ds);
    eg_dataset_iterator *it = eg_dataset_iterator_new(ds);
    for (int i = 0; i < 3; i++) {
        eg_element e = next_element(it);
        assert_int_equal(e.n_tensors, 2);
        assert_int_equal(eg_tensor_dtype(e.tensors[0]), EG_DTYPE_F64);
        assert_int_equal(eg_tensor_shape(e.tensors[0])[0], 2);
        const double *f = eg_tensor_data(e.tensors[0]);
        assert_true(f[0] == 2 * i + 1 && f[1] == 2 * i + 2);
        assert_int_equal(eg_tensor_dtype(e.tensors[1]), EG_DTYPE_I32);
        assert_int_equal(*(int32_t *)eg_tensor_data(e.tensors[1]), i);
    }
    expect_end(it);
    eg_dataset_iterator_free(it);
    eg_dataset_free(ds);

    /* Label column first; integers; tab separated; the label column out of range. */
    write_text(path, sizeof path, "tabs.csv", "7\t-2147483648\t2147483647\n");
    o = eg_csv_options_default();
    o.delimiter = '\t';
    o.dtype = EG_DTYPE_I64;
    o.label_column = 0;
    ds = eg_dataset_from_csv(path, &o);
    it = eg_dataset_iterator_new(ds);
    eg_element e = next_element(it);
    const int64_t *features = eg_tensor_data(e.tensors[0]);
    assert_true(features[0] == INT32_MIN && features[1] == INT32_MAX);
    assert_int_equal(*(int64_t *)eg_tensor_data(e.tensors[1]), 7);
    eg_dataset_iterator_free(it);
    eg_dataset_free(ds);
    o.label_column = 3;
    assert_null(eg_dataset_from_csv(path, &o));
    char expected[PATH_MAX + 128];
    snprintf(expected, sizeof expected, "%s: label_column is 3 but the file has 3 columns", path);
    assert_error(EG_ERR_INVALID_ARGUMENT, expected);

    /* No data rows: (0, columns); an empty file: (0, 0). */
    write_text(path, sizeof path, "header_only.csv", "x,y\n");
    o = eg_csv_options_default();
    o.header = true;
    t = eg_csv_read(path, &o);
    assert_int_equal(eg_tensor_shape(t)[0], 0);
    assert_int_equal(eg_tensor_shape(t)[1], 2);
    write_text(path, sizeof path, "empty.csv", "");
    t = eg_csv_read(path, NULL);
    assert_int_equal(eg_tensor_shape(t)[0], 0);
    assert_int_equal(eg_tensor_shape(t)[1], 0);
}

/* Reading `text` (with options o, NULL: defaults) fails with status and "<path>: <message>". */
static void expect_csv_error_n(const char *text, size_t n, const eg_csv_options *o,
                               eg_status status, const char *message) {
    char path[PATH_MAX];
    join(path, sizeof path, "bad.csv");
    write_bytes(path, text, n);
    assert_null(eg_csv_read(path, o));
    char expected[PATH_MAX + 512];
    snprintf(expected, sizeof expected, "%s: %s", path, message);
    assert_error(status, expected);
}

static void expect_csv_error(const char *text, const eg_csv_options *o, eg_status status,
                             const char *message) {
    expect_csv_error_n(text, strlen(text), o, status, message);
}

static void test_csv_errors(void **state) {
    (void)state;
    expect_csv_error("1,2,3\n4,5\n", NULL, EG_ERR_FORMAT,
                     "line 2: 2 fields, expected 3 (as on line 1)");
    expect_csv_error("1,2\n\n3,abc\n", NULL, EG_ERR_FORMAT,
                     "line 3, column 2: cannot parse \"abc\" as f32");
    expect_csv_error("1,,3\n", NULL, EG_ERR_FORMAT, "line 1, column 2: empty field");
    expect_csv_error("1,2,\n", NULL, EG_ERR_FORMAT, "line 1, column 3: empty field");
    expect_csv_error("1,1e999\n", NULL, EG_ERR_FORMAT,
                     "line 1, column 2: 1e999 is out of range for f32");
    expect_csv_error("1,1e39\n", NULL, EG_ERR_FORMAT,
                     "line 1, column 2: 1e39 is out of range for f32");
    expect_csv_error("1,\"2\n", NULL, EG_ERR_FORMAT, "line 1, column 2: unterminated quote");
    expect_csv_error("1,\"2\"x\n", NULL, EG_ERR_FORMAT,
                     "line 1, column 2: unexpected text after the closing quote");
    expect_csv_error("1,2 3\n", NULL, EG_ERR_FORMAT,
                     "line 1, column 2: cannot parse \"2 3\" as f32");
    expect_csv_error_n("1\n2\x00\n", 5, NULL, EG_ERR_FORMAT, "line 2: NUL byte");
    expect_csv_error("1\n\x01\xff\n", NULL, EG_ERR_FORMAT,
                     "line 2, column 1: cannot parse \"\\x01\\xff\" as f32");
    eg_csv_options o = eg_csv_options_default();
    o.dtype = EG_DTYPE_I32;
    expect_csv_error("1,2.5\n", &o, EG_ERR_FORMAT, "line 1, column 2: 2.5 is not an integer (i32)");
    expect_csv_error("1,2147483648\n", &o, EG_ERR_FORMAT,
                     "line 1, column 2: 2147483648 is out of range for i32");
    o.dtype = EG_DTYPE_I64;
    expect_csv_error("9223372036854775808\n", &o, EG_ERR_FORMAT,
                     "line 1, column 1: 9223372036854775808 is out of range for i64");
    o.header = true;
    expect_csv_error("a,b\n1,2,3\n", &o, EG_ERR_FORMAT,
                     "line 2: 3 fields, expected 2 (as on line 1)");
    o = eg_csv_options_default();
    o.delimiter = '.';
    expect_csv_error("1\n", &o, EG_ERR_INVALID_ARGUMENT,
                     "delimiter '.' is not allowed (it could be part of a number, a quote or a "
                     "line break)");
    o = eg_csv_options_default();
    o.dtype = EG_DTYPE_U8;
    expect_csv_error("1\n", &o, EG_ERR_INVALID_ARGUMENT,
                     "dtype u8 is not supported (f32, f64, i32, i64)");

    assert_null(eg_csv_read("/nonexistent/x.csv", NULL));
    assert_error(EG_ERR_IO, "/nonexistent/x.csv: cannot open: No such file or directory");
    assert_null(eg_csv_read(temp_dir, NULL));
    assert_error_contains(EG_ERR_IO, "is a directory, not a CSV file");
    assert_null(eg_csv_read(NULL, NULL));
    assert_error(EG_ERR_NULL_ARGUMENT, "csv_read: path is NULL");
}

/* ---- .npy and IDX ---- */

static void test_npy_idx(void **state) {
    (void)state;
    char a_path[PATH_MAX], b_path[PATH_MAX];
    join(a_path, sizeof a_path, "a.npy");
    join(b_path, sizeof b_path, "b.npy");
    int64_t shape[2] = {4, 2};
    eg_tensor *a = arange_f32(8, 2, shape);
    eg_tensor *b = eg_arange(0, 4, 1, EG_DTYPE_I64);
    assert_int_equal(eg_npy_write(a_path, a), EG_OK);
    assert_int_equal(eg_npy_write(b_path, b), EG_OK);
    eg_dataset *ds = eg_dataset_from_npy(2, (const char *[]){a_path, b_path});
    assert_non_null(ds);
    eg_dataset_iterator *it = eg_dataset_iterator_new(ds);
    for (int i = 0; i < 4; i++) {
        eg_element e = next_element(it);
        const float *row = eg_tensor_data(e.tensors[0]);
        assert_true(row[0] == 2 * i && row[1] == 2 * i + 1);
        assert_true(eg_item(e.tensors[1]) == i);
    }
    expect_end(it);
    eg_dataset_iterator_free(it);
    eg_dataset_free(ds);

    /* Rows must agree; a malformed file's error passes through. */
    eg_tensor *c = eg_arange(0, 3, 1, EG_DTYPE_I64);
    char c_path[PATH_MAX];
    join(c_path, sizeof c_path, "c.npy");
    assert_int_equal(eg_npy_write(c_path, c), EG_OK);
    assert_null(eg_dataset_from_npy(2, (const char *[]){a_path, c_path}));
    assert_error(EG_ERR_SHAPE, "dataset_from_npy: file 1 has 3 rows (shape (3,)), file 0 has 4");
    char bad_path[PATH_MAX];
    write_text(bad_path, sizeof bad_path, "bad.npy", "not numpy");
    assert_null(eg_dataset_from_npy(1, (const char *[]){bad_path}));
    assert_int_equal(eg_last_status(), EG_ERR_FORMAT);
    assert_error_contains(EG_ERR_FORMAT, "bad.npy");
    eg_tensor *scalar = eg_scalar(EG_DTYPE_F32, 1);
    assert_int_equal(eg_npy_write(c_path, scalar), EG_OK);
    assert_null(eg_dataset_from_npy(1, (const char *[]){c_path}));
    assert_error(EG_ERR_SHAPE, "dataset_from_npy: file 0 is 0-d; slicing needs a first axis");

    /* IDX: images u8 (3, 2, 2) and labels u8 (3,), written by hand. */
    char images_path[PATH_MAX], labels_path[PATH_MAX];
    join(images_path, sizeof images_path, "images.idx");
    join(labels_path, sizeof labels_path, "labels.idx");
    uint8_t images[4 + 12 + 12] = {0, 0, 8, 3, 0, 0, 0, 3, 0, 0, 0, 2, 0, 0, 0, 2};
    for (int i = 0; i < 12; i++) images[16 + i] = (uint8_t)(i * 10);
    uint8_t labels[8 + 3] = {0, 0, 8, 1, 0, 0, 0, 3, 7, 8, 9};
    write_bytes(images_path, images, sizeof images);
    write_bytes(labels_path, labels, sizeof labels);
    ds = eg_dataset_batch(eg_dataset_from_idx(2, (const char *[]){images_path, labels_path}), 2,
                          false);
    it = eg_dataset_iterator_new(ds);
    eg_element e = next_element(it);
    assert_int_equal(eg_tensor_shape(e.tensors[0])[0], 2);
    assert_memory_equal(eg_tensor_data(e.tensors[0]), images + 16, 8);
    assert_memory_equal(eg_tensor_data(e.tensors[1]), labels + 8, 2);
    eg_dataset_iterator_free(it);
    eg_dataset_free(ds);
    assert_null(eg_dataset_from_idx(1, (const char *[]){"/nonexistent.idx"}));
    assert_error(EG_ERR_IO, "/nonexistent.idx: cannot open");
}

static void test_mnist(void **state) {
    (void)state;
    FILE *f = fopen(EG_FASHION_MNIST_DIR "/t10k-labels-idx1-ubyte.gz", "rb");
    if (!f) skip();
    fclose(f);
    eg_dataset *ds = eg_dataset_take(eg_dataset_from_mnist(NULL, false), 3);
    eg_dataset_iterator *it = eg_dataset_iterator_new(ds);
    eg_element e = next_element(it);
    assert_int_equal(eg_tensor_n_dims(e.tensors[0]), 2);
    assert_int_equal(eg_tensor_shape(e.tensors[0])[0], 28);
    assert_int_equal(eg_tensor_dtype(e.tensors[1]), EG_DTYPE_U8);
    assert_int_equal(eg_tensor_n_dims(e.tensors[1]), 0);
    eg_dataset_iterator_free(it);
    eg_dataset_free(ds);
    assert_null(eg_dataset_from_mnist("/nonexistent", true));
    assert_error_contains(EG_ERR_IO, "dataset-fashion-mnist");
}

/* ---- image augmentations ---- */

static eg_element image_element(eg_dtype dtype, int n_dims, const int64_t *shape) {
    int64_t n = 1;
    for (int i = 0; i < n_dims; i++) n *= shape[i];
    eg_element e = {2, {eg_cast(arange_f32(n, n_dims, shape), dtype), eg_scalar(EG_DTYPE_U8, 4)}};
    return e;
}

static void test_augment(void **state) {
    (void)state;
    eg_dataset_call_info info = {3, 17};
    int64_t shape[3] = {3, 4, 2};
    eg_element in = image_element(EG_DTYPE_U8, 3, shape);
    const uint8_t *pixels = eg_tensor_data(in.tensors[0]);
    eg_element out;

    /* Flip with probability 1 mirrors the width axis; 0 passes the element through. */
    eg_image_flip_options flip = {.seed = 5, .component = 0, .probability = 1};
    assert_int_equal(eg_image_random_flip(&in, &out, &info, &flip), EG_OK);
    const uint8_t *flipped = eg_tensor_data(out.tensors[0]);
    for (int y = 0; y < 3; y++)
        for (int x = 0; x < 4; x++)
            for (int c = 0; c < 2; c++)
                assert_int_equal(flipped[(y * 4 + x) * 2 + c], pixels[(y * 4 + 3 - x) * 2 + c]);
    assert_ptr_equal(out.tensors[1], in.tensors[1]);
    flip.probability = 0;
    assert_int_equal(eg_image_random_flip(&in, &out, &info, &flip), EG_OK);
    assert_ptr_equal(out.tensors[0], in.tensors[0]);
    /* With 0.5, the choice follows eg_dataset_call_random. */
    flip.probability = 0.5;
    int flips = 0;
    for (int64_t i = 0; i < 200; i++) {
        eg_dataset_call_info at = {0, i};
        assert_int_equal(eg_image_random_flip(&in, &out, &at, &flip), EG_OK);
        uint32_t words[4];
        eg_dataset_call_random(5, &at, words);
        bool expected = ((double)(((uint64_t)words[0] << 21) ^ (words[1] >> 11)) * 0x1.0p-53) < 0.5;
        assert_int_equal(out.tensors[0] != in.tensors[0], expected);
        flips += expected;
    }
    assert_true(flips > 70 && flips < 130);

    /* Crop: padding 0 is the identity; otherwise a shift with fill, matching a reference. */
    eg_image_crop_options crop = {.seed = 9, .component = 0, .padding = 0, .fill = 0};
    assert_int_equal(eg_image_random_crop(&in, &out, &info, &crop), EG_OK);
    assert_memory_equal(eg_tensor_data(out.tensors[0]), pixels, 24);
    for (int64_t p = 1; p <= 5; p++) {
        crop.padding = p;
        crop.fill = 200;
        for (int64_t i = 0; i < 20; i++) {
            eg_dataset_call_info at = {1, i};
            assert_int_equal(eg_image_random_crop(&in, &out, &at, &crop), EG_OK);
            uint32_t words[4];
            eg_dataset_call_random(9, &at, words);
            int64_t dy = (int64_t)(words[2] % (uint64_t)(2 * p + 1)) - p;
            int64_t dx = (int64_t)(words[3] % (uint64_t)(2 * p + 1)) - p;
            const uint8_t *cropped = eg_tensor_data(out.tensors[0]);
            for (int64_t y = 0; y < 3; y++)
                for (int64_t x = 0; x < 4; x++)
                    for (int c = 0; c < 2; c++) {
                        int64_t sy = y + dy, sx = x + dx;
                        uint8_t expected = sy >= 0 && sy < 3 && sx >= 0 && sx < 4
                                               ? pixels[(sy * 4 + sx) * 2 + c]
                                               : 200;
                        assert_int_equal(cropped[(y * 4 + x) * 2 + c], expected);
                    }
        }
    }

    /* Normalize: per channel, from u8 and from f32 (H, W). */
    double mean[2] = {1, 2}, std[2] = {2, 4};
    eg_image_normalize_options norm = {
        .component = 0, .scale = 0.5, .n_values = 2, .mean = mean, .std = std};
    assert_int_equal(eg_image_normalize(&in, &out, &info, &norm), EG_OK);
    assert_int_equal(eg_tensor_dtype(out.tensors[0]), EG_DTYPE_F32);
    const float *normalized = eg_tensor_data(out.tensors[0]);
    for (int i = 0; i < 24; i++)
        assert_float_equal(normalized[i], (pixels[i] * 0.5 - mean[i % 2]) / std[i % 2], 1e-5);
    eg_element gray = image_element(EG_DTYPE_F32, 2, shape);
    norm.n_values = 1;
    norm.scale = 0;
    assert_int_equal(eg_image_normalize(&gray, &out, &info, &norm), EG_OK);
    normalized = eg_tensor_data(out.tensors[0]);
    for (int i = 0; i < 12; i++) assert_float_equal(normalized[i], (i - 1.0) / 2.0, 1e-6);
    /* Random flips of a non-contiguous (transposed) f32 image. */
    eg_element view = {1, {eg_transpose(gray.tensors[0], 0, 1)}}; /* (4, 3) */
    flip.probability = 1;
    assert_int_equal(eg_image_random_flip(&view, &out, &info, &flip), EG_OK);
    const float *vf = eg_tensor_data(out.tensors[0]);
    for (int y = 0; y < 4; y++)
        for (int x = 0; x < 3; x++) assert_true(vf[y * 3 + x] == (float)((2 - x) * 4 + y));

    /* Batched: image i of the call at index k draws as the element at (k << 32) + i would. */
    int64_t batch_shape[4] = {5, 3, 4, 2};
    eg_element batch = image_element(EG_DTYPE_U8, 4, batch_shape);
    eg_image_flip_options batch_flip = {.seed = 5, .probability = 0.5, .batched = true};
    eg_image_crop_options batch_crop = {.seed = 9, .padding = 2, .fill = 3, .batched = true};
    eg_image_flip_options one_flip = batch_flip;
    eg_image_crop_options one_crop = batch_crop;
    one_flip.batched = one_crop.batched = false;
    eg_element flipped_batch, cropped_batch;
    assert_int_equal(eg_image_random_flip(&batch, &flipped_batch, &info, &batch_flip), EG_OK);
    assert_int_equal(eg_image_random_crop(&flipped_batch, &cropped_batch, &info, &batch_crop),
                     EG_OK);
    for (int64_t i = 0; i < 5; i++) {
        eg_dataset_call_info at = {info.epoch, (17LL << 32) + i};
        eg_element one = {1, {eg_slice(batch.tensors[0], 0, i, i + 1, 1)}};
        one.tensors[0] = eg_reshape(one.tensors[0], 3, shape);
        eg_element f, c;
        assert_int_equal(eg_image_random_flip(&one, &f, &at, &one_flip), EG_OK);
        assert_int_equal(eg_image_random_crop(&f, &c, &at, &one_crop), EG_OK);
        assert_memory_equal((const uint8_t *)eg_tensor_data(cropped_batch.tensors[0]) + i * 24,
                            eg_tensor_data(c.tensors[0]), 24);
    }
    eg_image_normalize_options batch_norm = {
        .scale = 2, .n_values = 1, .mean = mean, .std = std, .batched = true};
    std[0] = 2;
    assert_int_equal(eg_image_normalize(&batch, &out, &info, &batch_norm), EG_OK);
    assert_int_equal(eg_tensor_n_dims(out.tensors[0]), 4);
    const float *batch_normalized = eg_tensor_data(out.tensors[0]);
    const uint8_t *batch_pixels = eg_tensor_data(batch.tensors[0]);
    for (int i = 0; i < 120; i++)
        assert_float_equal(batch_normalized[i], (batch_pixels[i] * 2.0 - 1) / 2, 1e-4);
    assert_int_equal(eg_image_random_flip(&gray, &out, &info, &batch_flip), EG_ERR_SHAPE);
    assert_error(EG_ERR_SHAPE, "image_random_flip: image batch of shape (3, 4); expected (N, H, "
                               "W) or (N, H, W, C)");

    /* Errors. */
    flip.component = 2;
    assert_int_equal(eg_image_random_flip(&in, &out, &info, &flip), EG_ERR_INVALID_ARGUMENT);
    assert_error(EG_ERR_INVALID_ARGUMENT, "image_random_flip: component 2, but the element has 2 "
                                          "tensors");
    flip.component = 1;
    assert_int_equal(eg_image_random_flip(&in, &out, &info, &flip), EG_ERR_SHAPE);
    assert_error(EG_ERR_SHAPE, "image_random_flip: image of shape (); expected (H, W) or (H, W, "
                               "C)");
    eg_element ints = image_element(EG_DTYPE_I32, 2, shape);
    crop.component = 0;
    assert_int_equal(eg_image_random_crop(&ints, &out, &info, &crop), EG_ERR_DTYPE);
    assert_error(EG_ERR_DTYPE, "image_random_crop: image of dtype i32; expected u8 or f32");
    norm.n_values = 3;
    assert_int_equal(eg_image_normalize(&in, &out, &info, &norm), EG_ERR_INVALID_ARGUMENT);
    assert_error(EG_ERR_INVALID_ARGUMENT, "image_normalize: n_values is 3; 1 or the image's 2 "
                                          "channels expected");
    std[0] = 0;
    norm.n_values = 1;
    assert_int_equal(eg_image_normalize(&in, &out, &info, &norm), EG_ERR_INVALID_ARGUMENT);
    assert_error(EG_ERR_INVALID_ARGUMENT, "image_normalize: mean 1 and std 0 of value 0");
}

/* The augmentations as pipeline stages. */
static void test_augment_pipeline(void **state) {
    (void)state;
    int64_t shape[3] = {6, 3, 3};
    eg_tensor *images = eg_cast(arange_f32(54, 3, shape), EG_DTYPE_U8);
    eg_image_flip_options flip = {.seed = 1, .probability = 0.5};
    eg_image_crop_options crop = {.seed = 2, .padding = 1};
    double mean = 0, std = 1;
    eg_image_normalize_options norm = {
        .scale = 1 / 255.0, .n_values = 1, .mean = &mean, .std = &std};
    eg_dataset *ds = eg_dataset_from_tensor_slices(1, (eg_tensor *[]){images});
    ds = eg_dataset_map(ds, eg_image_random_flip, &flip, 0, true);
    ds = eg_dataset_map(ds, eg_image_random_crop, &crop, 0, true);
    ds = eg_dataset_map(ds, eg_image_normalize, &norm, 0, true);
    ds = eg_dataset_batch(ds, 4, false);
    double values[64];
    int64_t n;
    assert_int_equal(collect(ds, values, 64, &n), 2);
    assert_int_equal(n, 54);
    for (int i = 0; i < 54; i++) assert_true(values[i] >= 0 && values[i] <= 53 / 255.0 + 1e-6);
    eg_dataset_free(ds);
}

static int group_setup(void **state) {
    (void)state;
    return make_temp_dir("eagle-test-data");
}

static int group_teardown(void **state) {
    (void)state;
    return remove_temp_dir();
}

int main(void) {
    const struct CMUnitTest tests[] = {
#define CASE(name) cmocka_unit_test_setup_teardown(name, case_setup, case_teardown)
        CASE(test_csv_good), CASE(test_csv_errors), CASE(test_npy_idx),
        CASE(test_mnist),    CASE(test_augment),    CASE(test_augment_pipeline),
#undef CASE
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
