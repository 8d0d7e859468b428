/* The input pipeline's text stages: language-model windows over token ids (contents, stride,
 * edges, random offsets per epoch), sequences of varying length, padded batches with padding
 * values and padded shapes per component, and bucketing by length (which bucket, when a batch
 * leaves, its padding, determinism), each with its argument errors. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "eagle.h"

#include "data_test_util.h"

#define assert_error(status, prefix)                                                               \
    do {                                                                                           \
        assert_int_equal(eg_last_status(), (status));                                              \
        const char *message_ = eg_last_error();                                                    \
        if (strncmp(message_, (prefix), strlen(prefix)) != 0)                                      \
            fail_msg("error message\n  \"%s\"\ndoes not start with\n  \"%s\"", message_,           \
                     (prefix));                                                                    \
        eg_clear_error();                                                                          \
    } while (0)

/* Element i of t as an integer (t is 1-d or 2-d, any integer dtype). */
static int64_t at1(const eg_tensor *t, int64_t i) {
    return (int64_t)eg_tensor_get(t, (int64_t[]){i});
}
static int64_t at2(const eg_tensor *t, int64_t i, int64_t j) {
    return (int64_t)eg_tensor_get(t, (int64_t[]){i, j});
}

/* Iterates to the end of the pass, expecting the pass to fail with `status` after `good`
 * elements. */
static void expect_failure_after(eg_dataset *ds, int64_t good, eg_status status) {
    eg_dataset_iterator *it = eg_dataset_iterator_new(ds);
    assert_non_null(it);
    for (int64_t i = 0; i < good; i++) {
        eg_element e = next_element(it);
        eg_element_release(&e);
    }
    eg_element e;
    bool end;
    assert_int_equal(eg_dataset_iterator_next(it, &e, &end), status);
    assert_false(end);
    eg_dataset_iterator_free(it);
}

/* ---- token windows ---- */

/* The starts of a pass's windows; checks that every window is (ids[s..s+T), ids[s+1..s+T+1)) of
 * ids = 100 + position. */
static int64_t window_starts(eg_dataset_iterator *it, int64_t length, int64_t *starts,
                             int64_t capacity) {
    int64_t n = 0;
    for (;;) {
        eg_element e;
        bool end;
        if (eg_dataset_iterator_next(it, &e, &end) != EG_OK) fail_msg("%s", eg_last_error());
        if (end) break;
        assert_int_equal(e.n_tensors, 2);
        for (int c = 0; c < 2; c++) {
            assert_int_equal(eg_tensor_n_dims(e.tensors[c]), 1);
            assert_int_equal(eg_tensor_shape(e.tensors[c])[0], length);
        }
        int64_t start = at1(e.tensors[0], 0) - 100;
        for (int64_t i = 0; i < length; i++) {
            assert_int_equal(at1(e.tensors[0], i), 100 + start + i);
            assert_int_equal(at1(e.tensors[1], i), 100 + start + i + 1);
        }
        assert_true(n < capacity);
        starts[n++] = start;
        eg_element_release(&e);
    }
    return n;
}

static void test_windows(void **state) {
    (void)state;
    eg_tensor *ids = eg_arange(100, 110, 1, EG_DTYPE_I32);
    int64_t starts[64];
    /* Overlapping: T = 3, stride 2 over 10 ids -> starts 0, 2, 4, 6 (8 would need id 11). */
    eg_dataset *ds = eg_dataset_from_token_windows(ids, 3, 2, false, 0);
    eg_dataset_iterator *it = eg_dataset_iterator_new(ds);
    eg_element e = next_element(it);
    assert_int_equal(eg_tensor_dtype(e.tensors[0]), EG_DTYPE_I32);
    assert_int_equal(eg_tensor_dtype(e.tensors[1]), EG_DTYPE_I32);
    assert_memory_equal(eg_tensor_data(e.tensors[0]), ((int32_t[]){100, 101, 102}), 12);
    assert_memory_equal(eg_tensor_data(e.tensors[1]), ((int32_t[]){101, 102, 103}), 12);
    eg_element_release(&e);
    eg_dataset_iterator_free(it);
    it = eg_dataset_iterator_new(ds);
    assert_int_equal(window_starts(it, 3, starts, 64), 4);
    for (int i = 0; i < 4; i++) assert_int_equal(starts[i], 2 * i);
    eg_dataset_iterator_free(it);
    eg_dataset_free(ds);

    /* Non-overlapping (stride = T) and gapped (stride > T). */
    ds = eg_dataset_from_token_windows(ids, 3, 3, false, 0);
    it = eg_dataset_iterator_new(ds);
    assert_int_equal(window_starts(it, 3, starts, 64), 3); /* 0, 3, 6 */
    assert_int_equal(starts[2], 6);
    eg_dataset_iterator_free(it);
    eg_dataset_free(ds);
    ds = eg_dataset_from_token_windows(ids, 2, 5, false, 0);
    it = eg_dataset_iterator_new(ds);
    assert_int_equal(window_starts(it, 2, starts, 64), 2); /* 0, 5 */
    assert_int_equal(starts[1], 5);
    eg_dataset_iterator_free(it);
    eg_dataset_free(ds);

    /* Exactly length + 1 ids: one window; length 1: every id with its successor. */
    ds = eg_dataset_from_token_windows(ids, 9, 1, false, 0);
    it = eg_dataset_iterator_new(ds);
    assert_int_equal(window_starts(it, 9, starts, 64), 1);
    eg_dataset_iterator_free(it);
    eg_dataset_free(ds);
    ds = eg_dataset_from_token_windows(ids, 1, 1, false, 0);
    it = eg_dataset_iterator_new(ds);
    assert_int_equal(window_starts(it, 1, starts, 64), 9);
    eg_dataset_iterator_free(it);
    eg_dataset_free(ds);

    /* The source keeps its own reference: the caller may drop ids at once. */
    eg_tensor *ids64 = eg_arange(100, 120, 1, EG_DTYPE_I64);
    ds = eg_dataset_from_token_windows(ids64, 4, 4, false, 0);
    eg_release(ids64);
    ds = eg_dataset_batch(ds, 2, true);
    it = eg_dataset_iterator_new(ds);
    e = next_element(it);
    assert_int_equal(eg_tensor_dtype(e.tensors[0]), EG_DTYPE_I64);
    assert_int_equal(eg_tensor_shape(e.tensors[0])[0], 2);
    assert_int_equal(eg_tensor_shape(e.tensors[0])[1], 4);
    assert_int_equal(at2(e.tensors[0], 1, 0), 104);
    assert_int_equal(at2(e.tensors[1], 1, 3), 108);
    eg_element_release(&e);
    e = next_element(it); /* windows 8 and 12 (16 would need id 120) */
    assert_int_equal(at2(e.tensors[1], 1, 3), 116);
    eg_element_release(&e);
    expect_end(it);
    eg_dataset_iterator_free(it);
    eg_dataset_free(ds);

    /* A strided view of ids works as its values say. */
    eg_tensor *every_other = eg_slice(ids, 0, 0, 10, 2); /* 100, 102, ..., 108 */
    ds = eg_dataset_from_token_windows(every_other, 2, 1, false, 0);
    it = eg_dataset_iterator_new(ds);
    e = next_element(it);
    e = next_element(it);
    assert_int_equal(at1(e.tensors[0], 0), 102);
    assert_int_equal(at1(e.tensors[1], 1), 106);
    eg_dataset_iterator_free(it);
    eg_dataset_free(ds);
}

static void test_windows_errors(void **state) {
    (void)state;
    eg_tensor *ids = eg_arange(0, 5, 1, EG_DTYPE_I32);
    assert_null(eg_dataset_from_token_windows(ids, 5, 1, false, 0));
    assert_error(EG_ERR_SHAPE, "dataset_from_token_windows: window length 5 needs 6 ids (the "
                               "inputs and one more for the last target); the tensor has 5");
    eg_tensor *empty = eg_zeros(EG_DTYPE_I32, 1, (int64_t[]){0});
    assert_null(eg_dataset_from_token_windows(empty, 1, 1, false, 0));
    assert_error(EG_ERR_SHAPE, "dataset_from_token_windows: window length 1 needs 2 ids");
    assert_null(eg_dataset_from_token_windows(NULL, 1, 1, false, 0));
    assert_error(EG_ERR_NULL_ARGUMENT, "dataset_from_token_windows: ids is NULL");
    assert_null(eg_dataset_from_token_windows(eg_zeros(EG_DTYPE_I32, 2, (int64_t[]){3, 4}), 2, 1,
                                              false, 0));
    assert_error(EG_ERR_SHAPE, "dataset_from_token_windows: ids has shape (3, 4); it must be 1-d");
    assert_null(
        eg_dataset_from_token_windows(eg_zeros(EG_DTYPE_F32, 1, (int64_t[]){9}), 2, 1, false, 0));
    assert_error(EG_ERR_DTYPE, "dataset_from_token_windows: ids are f32; token ids are i32, i64 or "
                               "u8");
    assert_null(eg_dataset_from_token_windows(ids, 0, 1, false, 0));
    assert_error(EG_ERR_INVALID_ARGUMENT,
                 "dataset_from_token_windows: length 0 and stride 1; both must be at least 1");
    assert_null(eg_dataset_from_token_windows(ids, 2, 0, false, 0));
    assert_error(EG_ERR_INVALID_ARGUMENT,
                 "dataset_from_token_windows: length 2 and stride 0; both must be at least 1");
}

static void test_windows_random_offset(void **state) {
    (void)state;
    eg_tensor *ids = eg_arange(100, 200, 1, EG_DTYPE_I32);
    eg_dataset *a = eg_dataset_from_token_windows(ids, 10, 10, true, 7);
    eg_dataset *b = eg_dataset_from_token_windows(ids, 10, 10, true, 7);
    eg_dataset *other = eg_dataset_from_token_windows(ids, 10, 10, true, 8);
    int64_t starts[64], again[64];
    bool seen[10] = {false};
    int distinct = 0, differs = 0;
    for (int epoch = 0; epoch < 24; epoch++) {
        eg_dataset_iterator *it = eg_dataset_iterator_new(a);
        /* Every offset in [0, 10) leaves 9 windows of 11 ids in 100. */
        assert_int_equal(window_starts(it, 10, starts, 64), 9);
        eg_dataset_iterator_free(it);
        int64_t offset = starts[0];
        assert_true(offset >= 0 && offset < 10);
        for (int k = 0; k < 9; k++) assert_int_equal(starts[k], offset + 10 * k);
        distinct += !seen[offset];
        seen[offset] = true;
        /* The same seed and epoch give the same offset in another dataset. */
        it = eg_dataset_iterator_new(b);
        assert_int_equal(window_starts(it, 10, again, 64), 9);
        eg_dataset_iterator_free(it);
        assert_int_equal(again[0], offset);
        it = eg_dataset_iterator_new(other);
        window_starts(it, 10, again, 64);
        eg_dataset_iterator_free(it);
        differs += again[0] != offset;
    }
    assert_true(distinct >= 4);
    assert_true(differs >= 4);
    eg_dataset_free(a);
    eg_dataset_free(b);
    eg_dataset_free(other);

    /* The offset stays below n - length, so that every pass keeps a window. */
    eg_tensor *short_ids = eg_arange(100, 112, 1, EG_DTYPE_I32);
    eg_dataset *ds = eg_dataset_from_token_windows(short_ids, 10, 50, true, 3);
    bool offsets[2] = {false, false};
    for (int epoch = 0; epoch < 32; epoch++) {
        eg_dataset_iterator *it = eg_dataset_iterator_new(ds);
        assert_int_equal(window_starts(it, 10, starts, 64), 1);
        eg_dataset_iterator_free(it);
        assert_true(starts[0] == 0 || starts[0] == 1);
        offsets[starts[0]] = true;
    }
    assert_true(offsets[0] && offsets[1]);
    eg_dataset_free(ds);

    /* Under repeat, each repetition is its own epoch. */
    ds = eg_dataset_repeat(eg_dataset_from_token_windows(ids, 10, 10, true, 7), 3);
    eg_dataset_iterator *it = eg_dataset_iterator_new(ds);
    assert_int_equal(window_starts(it, 10, starts, 64), 27);
    eg_dataset_iterator_free(it);
    eg_dataset_free(ds);
}

/* Bytes read from a file as ids, cut into windows. */
static void test_windows_over_file_bytes(void **state) {
    (void)state;
    char path[] = "/tmp/eagle_text_data_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    const char text[] = "abcdefgh\n";
    assert_int_equal(write(fd, text, 9), 9);
    close(fd);
    eg_tensor *bytes = eg_text_file_read_bytes(path, EG_DTYPE_U8);
    unlink(path);
    assert_non_null(bytes);
    eg_dataset *ds =
        eg_dataset_batch(eg_dataset_from_token_windows(bytes, 4, 4, false, 0), 2, false);
    eg_dataset_iterator *it = eg_dataset_iterator_new(ds);
    eg_element e = next_element(it);
    assert_int_equal(eg_tensor_dtype(e.tensors[0]), EG_DTYPE_U8);
    assert_memory_equal(eg_tensor_data(e.tensors[0]), "abcdefgh", 8);
    assert_memory_equal(eg_tensor_data(e.tensors[1]), "bcdefgh\n", 8);
    eg_tensor *as_i32 = eg_cast(e.tensors[1], EG_DTYPE_I32);
    assert_int_equal(at2(as_i32, 1, 3), '\n');
    expect_end(it);
    eg_dataset_iterator_free(it);
    eg_dataset_free(ds);
}

/* ---- sequences ---- */

/* (spelling, phonemes)-like pairs: lengths (2, 3), (0, 1), (4, 2). */
static const int32_t first0[] = {1, 2}, first2[] = {7, 8, 9, 10};
static const int64_t second0[] = {11, 12, 13}, second1[] = {14}, second2[] = {15, 16};
static const void *const first_data[] = {first0, NULL, first2};
static const void *const second_data[] = {second0, second1, second2};
static const int64_t first_lengths[] = {2, 0, 4}, second_lengths[] = {3, 1, 2};

static eg_dataset *pairs(void) {
    eg_sequences components[2] = {{EG_DTYPE_I32, 3, first_data, first_lengths},
                                  {EG_DTYPE_I64, 3, second_data, second_lengths}};
    return eg_dataset_from_sequences(2, components);
}

static void test_sequences(void **state) {
    (void)state;
    /* Copied: the caller's arrays may go after the call. */
    int32_t *copy = malloc(sizeof first2);
    memcpy(copy, first2, sizeof first2);
    const void *data[3] = {first0, NULL, copy};
    eg_sequences components[2] = {{EG_DTYPE_I32, 3, data, first_lengths},
                                  {EG_DTYPE_I64, 3, second_data, second_lengths}};
    eg_dataset *ds = eg_dataset_from_sequences(2, components);
    memset(copy, 0, sizeof first2);
    free(copy);
    assert_non_null(ds);
    for (int pass = 0; pass < 2; pass++) {
        eg_dataset_iterator *it = eg_dataset_iterator_new(ds);
        for (int i = 0; i < 3; i++) {
            eg_element e = next_element(it);
            assert_int_equal(e.n_tensors, 2);
            assert_int_equal(eg_tensor_dtype(e.tensors[0]), EG_DTYPE_I32);
            assert_int_equal(eg_tensor_dtype(e.tensors[1]), EG_DTYPE_I64);
            assert_int_equal(eg_tensor_n_dims(e.tensors[0]), 1);
            assert_int_equal(eg_tensor_shape(e.tensors[0])[0], first_lengths[i]);
            assert_int_equal(eg_tensor_shape(e.tensors[1])[0], second_lengths[i]);
            if (first_lengths[i] > 0)
                assert_memory_equal(eg_tensor_data(e.tensors[0]), first_data[i],
                                    (size_t)first_lengths[i] * 4);
            assert_memory_equal(eg_tensor_data(e.tensors[1]), second_data[i],
                                (size_t)second_lengths[i] * 8);
            eg_element_release(&e);
        }
        expect_end(it);
        eg_dataset_iterator_free(it);
    }
    eg_dataset_free(ds);

    /* Bytes: spellings as they are. */
    const char *words[] = {"cat", "a"};
    eg_sequences spellings = {EG_DTYPE_U8, 2, (const void *const *)words, (int64_t[]){3, 1}};
    ds = eg_dataset_padded_batch(eg_dataset_from_sequences(1, &spellings), 2, false, '_');
    eg_dataset_iterator *it = eg_dataset_iterator_new(ds);
    eg_element e = next_element(it);
    assert_memory_equal(eg_tensor_data(e.tensors[0]), "cata__", 6);
    eg_dataset_iterator_free(it);
    eg_dataset_free(ds);

    /* No sequences at all. */
    eg_sequences none = {EG_DTYPE_I32, 0, NULL, NULL};
    ds = eg_dataset_from_sequences(1, &none);
    double values[4];
    assert_int_equal(collect(ds, values, 4, NULL), 0);
    eg_dataset_free(ds);
}

static void test_sequences_errors(void **state) {
    (void)state;
    eg_sequences good = {EG_DTYPE_I32, 3, first_data, first_lengths};
    eg_sequences two[2] = {good, {EG_DTYPE_I64, 2, second_data, second_lengths}};
    assert_null(eg_dataset_from_sequences(2, two));
    assert_error(EG_ERR_SHAPE,
                 "dataset_from_sequences: component 1 has 2 sequences, component 0 3");
    assert_null(eg_dataset_from_sequences(0, &good));
    assert_error(EG_ERR_INVALID_ARGUMENT, "dataset_from_sequences: n is 0; 1 to 8 components");
    assert_null(eg_dataset_from_sequences(9, &good));
    assert_error(EG_ERR_INVALID_ARGUMENT, "dataset_from_sequences: n is 9");
    assert_null(eg_dataset_from_sequences(1, NULL));
    assert_error(EG_ERR_NULL_ARGUMENT, "dataset_from_sequences: components is NULL");
    eg_sequences bad = {EG_DTYPE_F32, 3, first_data, first_lengths};
    assert_null(eg_dataset_from_sequences(1, &bad));
    assert_error(EG_ERR_DTYPE, "dataset_from_sequences: component 0 is f32; sequences are u8, i32 "
                               "or i64");
    bad = (eg_sequences){EG_DTYPE_I32, 3, NULL, first_lengths};
    assert_null(eg_dataset_from_sequences(1, &bad));
    assert_error(EG_ERR_NULL_ARGUMENT, "dataset_from_sequences: component 0: data is NULL");
    const void *holes[] = {first0, NULL, NULL};
    bad = (eg_sequences){EG_DTYPE_I32, 3, holes, first_lengths};
    assert_null(eg_dataset_from_sequences(1, &bad));
    assert_error(EG_ERR_NULL_ARGUMENT,
                 "dataset_from_sequences: component 0: sequence 2 has length 4 and NULL data");
    bad = (eg_sequences){EG_DTYPE_I32, 3, first_data, (int64_t[]){2, -1, 4}};
    assert_null(eg_dataset_from_sequences(1, &bad));
    assert_error(EG_ERR_INVALID_ARGUMENT,
                 "dataset_from_sequences: component 0: sequence 1 has length -1");
    bad = (eg_sequences){EG_DTYPE_I32, -1, first_data, first_lengths};
    assert_null(eg_dataset_from_sequences(1, &bad));
    assert_error(EG_ERR_INVALID_ARGUMENT, "dataset_from_sequences: component 0 has count -1");
}

/* ---- padded batches ---- */

static void test_padded_batch_options(void **state) {
    (void)state;
    /* Per-component padding values, to the longest in the batch. */
    eg_padded_batch_options options = {0};
    options.padding_values[0] = -1;
    options.padding_values[1] = 99;
    eg_dataset *ds = eg_dataset_padded_batch_with_options(pairs(), 2, &options);
    eg_dataset_iterator *it = eg_dataset_iterator_new(ds);
    eg_element e = next_element(it);
    assert_int_equal(eg_tensor_shape(e.tensors[0])[1], 2);
    assert_memory_equal(eg_tensor_data(e.tensors[0]), ((int32_t[]){1, 2, -1, -1}), 16);
    assert_int_equal(eg_tensor_shape(e.tensors[1])[1], 3);
    assert_memory_equal(eg_tensor_data(e.tensors[1]), ((int64_t[]){11, 12, 13, 14, 99, 99}), 48);
    eg_element_release(&e);
    e = next_element(it); /* the last, smaller batch */
    assert_int_equal(eg_tensor_shape(e.tensors[0])[0], 1);
    assert_memory_equal(eg_tensor_data(e.tensors[0]), first2, 16);
    eg_element_release(&e);
    expect_end(it);
    eg_dataset_iterator_free(it);
    eg_dataset_free(ds);

    /* Fixed padded shapes: component 0 to 5, component 1 to its longest (-1); drop_remainder. */
    options = (eg_padded_batch_options){.drop_remainder = true};
    options.padded_shapes[0] = (eg_padded_shape){1, {5}};
    options.padded_shapes[1] = (eg_padded_shape){1, {-1}};
    ds = eg_dataset_padded_batch_with_options(pairs(), 2, &options);
    it = eg_dataset_iterator_new(ds);
    e = next_element(it);
    assert_int_equal(eg_tensor_shape(e.tensors[0])[1], 5);
    assert_memory_equal(eg_tensor_data(e.tensors[0]), ((int32_t[]){1, 2, 0, 0, 0, 0, 0, 0, 0, 0}),
                        40);
    assert_int_equal(eg_tensor_shape(e.tensors[1])[1], 3);
    eg_element_release(&e);
    expect_end(it);
    eg_dataset_iterator_free(it);
    eg_dataset_free(ds);

    /* Defaults (options NULL): padding 0 to the longest. */
    ds = eg_dataset_padded_batch_with_options(pairs(), 3, NULL);
    it = eg_dataset_iterator_new(ds);
    e = next_element(it);
    assert_int_equal(eg_tensor_shape(e.tensors[0])[1], 4);
    assert_memory_equal(eg_tensor_data(e.tensors[0]),
                        ((int32_t[]){1, 2, 0, 0, 0, 0, 0, 0, 7, 8, 9, 10}), 48);
    eg_element_release(&e);
    eg_dataset_iterator_free(it);
    eg_dataset_free(ds);

    /* An element larger than its fixed size, or of another rank, fails the pass. */
    options = (eg_padded_batch_options){0};
    options.padded_shapes[0] = (eg_padded_shape){1, {3}};
    ds = eg_dataset_padded_batch_with_options(pairs(), 1, &options);
    expect_failure_after(ds, 2, EG_ERR_SHAPE);
    assert_error(EG_ERR_SHAPE, "padded_batch: element 2, component 0: size 4 of axis 0 is larger "
                               "than the padded shape's 3");
    eg_dataset_free(ds);
    options.padded_shapes[0] = (eg_padded_shape){2, {3, 3}};
    ds = eg_dataset_padded_batch_with_options(pairs(), 2, &options);
    expect_failure_after(ds, 0, EG_ERR_SHAPE);
    assert_error(EG_ERR_SHAPE, "padded_batch: element 0, component 0: shape (2,) has 1 "
                               "dimensions; its padded shape has 2");
    eg_dataset_free(ds);

    /* Bad options are refused at once (and the input released). */
    options.padded_shapes[0] = (eg_padded_shape){9, {0}};
    assert_null(eg_dataset_padded_batch_with_options(pairs(), 2, &options));
    assert_error(EG_ERR_INVALID_ARGUMENT, "dataset_padded_batch_with_options: padded shape of "
                                          "component 0 has 9 dimensions (0 to 8)");
    options.padded_shapes[0] = (eg_padded_shape){1, {-2}};
    assert_null(eg_dataset_padded_batch_with_options(pairs(), 2, &options));
    assert_error(EG_ERR_INVALID_ARGUMENT, "dataset_padded_batch_with_options: padded shape of "
                                          "component 0: size -2 of axis 0");
    assert_null(eg_dataset_padded_batch_with_options(pairs(), 0, NULL));
    assert_error(EG_ERR_INVALID_ARGUMENT, "dataset_padded_batch: batch_size is 0");
    assert_null(eg_dataset_padded_batch_with_options(NULL, 2, NULL));
    assert_int_equal(eg_last_status(), EG_OK);
}

/* Ragged elements whose dtypes disagree cannot share a batch. */
static void test_padded_batch_dtype_mismatch(void **state) {
    (void)state;
    eg_sequences as_i32 = {EG_DTYPE_I32, 3, first_data, first_lengths};
    eg_sequences as_i64 = {EG_DTYPE_I64, 3, second_data, second_lengths};
    eg_dataset *parts[2] = {eg_dataset_from_sequences(1, &as_i32),
                            eg_dataset_from_sequences(1, &as_i64)};
    eg_dataset *ds =
        eg_dataset_padded_batch(eg_dataset_interleave_datasets(2, parts, 1), 2, false, 0);
    expect_failure_after(ds, 0, EG_ERR_DTYPE);
    assert_error(EG_ERR_DTYPE, "padded_batch: element 1, component 0: dtype i64 differs from i32 "
                               "of the batch's first element");
    eg_dataset_free(ds);
}

/* ---- bucket_by_sequence_length ---- */

/* Element i: (sequence of length lengths[i] holding i, a second of length 1). */
static const int64_t bucket_lengths[] = {1, 5, 2, 7, 3, 6, 1, 8};
#define N_BUCKETED 8

static eg_dataset *bucketed_input(void) {
    static int32_t values[N_BUCKETED][8];
    static const void *data[N_BUCKETED], *data1[N_BUCKETED];
    static const int64_t ones[N_BUCKETED] = {1, 1, 1, 1, 1, 1, 1, 1};
    for (int i = 0; i < N_BUCKETED; i++) {
        for (int j = 0; j < 8; j++) values[i][j] = i;
        data[i] = values[i];
        data1[i] = values[i];
    }
    eg_sequences components[2] = {{EG_DTYPE_I32, N_BUCKETED, data, bucket_lengths},
                                  {EG_DTYPE_I32, N_BUCKETED, data1, ones}};
    return eg_dataset_from_sequences(2, components);
}

/* Checks one batch: the elements it holds (by their number) and its padded width. */
static void expect_bucket_batch(eg_dataset_iterator *it, int n, const int *elements,
                                int64_t width) {
    eg_element e = next_element(it);
    const eg_tensor *t = e.tensors[0];
    assert_int_equal(eg_tensor_shape(t)[0], n);
    assert_int_equal(eg_tensor_shape(t)[1], width);
    for (int i = 0; i < n; i++)
        for (int64_t j = 0; j < width; j++)
            assert_int_equal(at2(t, i, j), j < bucket_lengths[elements[i]] ? elements[i] : -1);
    eg_element_release(&e);
}

static void test_bucket_by_length(void **state) {
    (void)state;
    /* Buckets [0, 4), [4, 7), [7, inf), two elements each: e0 b0, e1 b1, e2 b0 (b0 leaves), e3
     * b2, e4 b0, e5 b1 (b1 leaves), e6 b0 (b0), e7 b2 (b2). */
    eg_bucket_options options = {.length_component = 0,
                                 .n_boundaries = 2,
                                 .boundaries = (int64_t[]){4, 7},
                                 .batch_sizes = (int64_t[]){2, 2, 2}};
    options.padding.padding_values[0] = -1;
    eg_dataset *ds = eg_dataset_bucket_by_sequence_length(bucketed_input(), &options);
    eg_dataset_iterator *it = eg_dataset_iterator_new(ds);
    expect_bucket_batch(it, 2, (int[]){0, 2}, 2);
    expect_bucket_batch(it, 2, (int[]){1, 5}, 6);
    expect_bucket_batch(it, 2, (int[]){4, 6}, 3);
    expect_bucket_batch(it, 2, (int[]){3, 7}, 8);
    expect_end(it);
    eg_dataset_stage_stats stats[4];
    assert_int_equal(eg_dataset_stats(it, stats, 4), 2);
    assert_string_equal(stats[0].name, "bucket_by_sequence_length(3 buckets)");
    assert_int_equal(stats[0].elements, 4);
    eg_dataset_iterator_free(it);
    eg_dataset_free(ds);

    /* Padded to the bucket's boundary - 1 (the last bucket to its longest); batch sizes per
     * bucket; what is left at the end comes out from the shortest bucket up. */
    options.pad_to_bucket_boundary = true;
    options.batch_sizes = (int64_t[]){3, 1, 5};
    ds = eg_dataset_bucket_by_sequence_length(bucketed_input(), &options);
    it = eg_dataset_iterator_new(ds);
    expect_bucket_batch(it, 1, (int[]){1}, 6);
    expect_bucket_batch(it, 3, (int[]){0, 2, 4}, 3);
    expect_bucket_batch(it, 1, (int[]){5}, 6);
    expect_bucket_batch(it, 1, (int[]){6}, 3);    /* the rest of bucket 0 */
    expect_bucket_batch(it, 2, (int[]){3, 7}, 8); /* and of bucket 2 */
    expect_end(it);
    eg_dataset_iterator_free(it);
    eg_dataset_free(ds);

    /* drop_remainder drops what is left; no boundaries: one bucket, a padded_batch. */
    options.padding.drop_remainder = true;
    ds = eg_dataset_bucket_by_sequence_length(bucketed_input(), &options);
    it = eg_dataset_iterator_new(ds);
    expect_bucket_batch(it, 1, (int[]){1}, 6);
    expect_bucket_batch(it, 3, (int[]){0, 2, 4}, 3);
    expect_bucket_batch(it, 1, (int[]){5}, 6);
    expect_end(it);
    eg_dataset_iterator_free(it);
    eg_dataset_free(ds);
    eg_bucket_options one = {.n_boundaries = 0, .batch_sizes = (int64_t[]){3}};
    one.padding.padding_values[0] = -1;
    ds = eg_dataset_bucket_by_sequence_length(bucketed_input(), &one);
    it = eg_dataset_iterator_new(ds);
    expect_bucket_batch(it, 3, (int[]){0, 1, 2}, 5);
    expect_bucket_batch(it, 3, (int[]){3, 4, 5}, 7);
    expect_bucket_batch(it, 2, (int[]){6, 7}, 8);
    expect_end(it);
    eg_dataset_iterator_free(it);
    eg_dataset_free(ds);

    /* The length of component 1 (all 1): everything in bucket 0. */
    options = (eg_bucket_options){.length_component = 1,
                                  .n_boundaries = 1,
                                  .boundaries = (int64_t[]){2},
                                  .batch_sizes = (int64_t[]){4, 1}};
    options.padding.padding_values[0] = -1;
    ds = eg_dataset_bucket_by_sequence_length(bucketed_input(), &options);
    it = eg_dataset_iterator_new(ds);
    expect_bucket_batch(it, 4, (int[]){0, 1, 2, 3}, 7);
    expect_bucket_batch(it, 4, (int[]){4, 5, 6, 7}, 8);
    expect_end(it);
    eg_dataset_iterator_free(it);
    eg_dataset_free(ds);
}

static void test_bucket_deterministic(void **state) {
    (void)state;
    /* Shuffled input: the same seed gives the same batches, in a new dataset too. */
    eg_bucket_options options = {.length_component = -1,
                                 .n_boundaries = 2,
                                 .boundaries = (int64_t[]){3, 6},
                                 .batch_sizes = (int64_t[]){2, 2, 2}};
    double first[64], second[64], third[64];
    int64_t n_first, n_second, n_third;
    eg_dataset *ds = eg_dataset_bucket_by_sequence_length(
        eg_dataset_shuffle(bucketed_input(), 8, 5, false), &options);
    int64_t batches = collect(ds, first, 64, &n_first);
    assert_int_equal(collect(ds, second, 64, &n_second), batches);
    assert_values(second, n_second, first, n_first);
    eg_dataset_free(ds);
    ds = eg_dataset_bucket_by_sequence_length(eg_dataset_shuffle(bucketed_input(), 8, 5, false),
                                              &options);
    assert_int_equal(collect(ds, third, 64, &n_third), batches);
    assert_values(third, n_third, first, n_first);
    eg_dataset_free(ds);
}

static void test_bucket_errors(void **state) {
    (void)state;
    eg_bucket_options options = {.length_component = 0,
                                 .n_boundaries = 2,
                                 .boundaries = (int64_t[]){4, 4},
                                 .batch_sizes = (int64_t[]){2, 2, 2}};
    const char *what = "dataset_bucket_by_sequence_length: ";
    char expected[256];
    assert_null(eg_dataset_bucket_by_sequence_length(bucketed_input(), &options));
    snprintf(expected, sizeof expected,
             "%sboundaries[1] is 4; boundaries must be at least 1 and "
             "increasing",
             what);
    assert_error(EG_ERR_INVALID_ARGUMENT, expected);
    options.boundaries = (int64_t[]){0, 4};
    assert_null(eg_dataset_bucket_by_sequence_length(bucketed_input(), &options));
    snprintf(expected, sizeof expected, "%sboundaries[0] is 0", what);
    assert_error(EG_ERR_INVALID_ARGUMENT, expected);
    options.boundaries = (int64_t[]){2, 4};
    options.batch_sizes = (int64_t[]){2, 0, 2};
    assert_null(eg_dataset_bucket_by_sequence_length(bucketed_input(), &options));
    snprintf(expected, sizeof expected, "%sbatch_sizes[1] is 0; it must be 1 to 2^30", what);
    assert_error(EG_ERR_INVALID_ARGUMENT, expected);
    options.batch_sizes = (int64_t[]){2, 2, 2};
    options.n_boundaries = -1;
    assert_null(eg_dataset_bucket_by_sequence_length(bucketed_input(), &options));
    snprintf(expected, sizeof expected, "%sn_boundaries is -1; it must be 0 to 1024", what);
    assert_error(EG_ERR_INVALID_ARGUMENT, expected);
    options.n_boundaries = 2;
    options.length_component = 8;
    assert_null(eg_dataset_bucket_by_sequence_length(bucketed_input(), &options));
    snprintf(expected, sizeof expected, "%slength_component is 8; it must be -1 to 7", what);
    assert_error(EG_ERR_INVALID_ARGUMENT, expected);
    options.length_component = 0;
    options.padding.padded_shapes[1].n_dims = -1;
    assert_null(eg_dataset_bucket_by_sequence_length(bucketed_input(), &options));
    snprintf(expected, sizeof expected, "%spadded shape of component 1 has -1 dimensions", what);
    assert_error(EG_ERR_INVALID_ARGUMENT, expected);
    options.padding.padded_shapes[1].n_dims = 0;
    assert_null(eg_dataset_bucket_by_sequence_length(bucketed_input(), NULL));
    snprintf(expected, sizeof expected, "%soptions is NULL", what);
    assert_error(EG_ERR_NULL_ARGUMENT, expected);
    options.batch_sizes = NULL;
    assert_null(eg_dataset_bucket_by_sequence_length(bucketed_input(), &options));
    snprintf(expected, sizeof expected, "%soptions->batch_sizes is NULL", what);
    assert_error(EG_ERR_NULL_ARGUMENT, expected);
    options.batch_sizes = (int64_t[]){2, 2, 2};
    assert_null(eg_dataset_bucket_by_sequence_length(NULL, &options));
    assert_int_equal(eg_last_status(), EG_OK);

    /* Lengths that cannot be measured fail the pass. */
    options.length_component = 2;
    eg_dataset *ds = eg_dataset_bucket_by_sequence_length(bucketed_input(), &options);
    expect_failure_after(ds, 0, EG_ERR_SHAPE);
    assert_error(EG_ERR_SHAPE, "bucket_by_sequence_length: element 0 has 2 components; "
                               "length_component is 2");
    eg_dataset_free(ds);
    options.length_component = 0;
    ds = eg_dataset_bucket_by_sequence_length(eg_dataset_range(0, 3, 1), &options);
    expect_failure_after(ds, 0, EG_ERR_SHAPE);
    assert_error(EG_ERR_SHAPE, "bucket_by_sequence_length: element 0, component 0 is 0-d: it has "
                               "no first axis to measure");
    eg_dataset_free(ds);
    /* ... and so do elements that disagree in dtype within a bucket. */
    eg_sequences as_i32 = {EG_DTYPE_I32, 3, first_data, first_lengths};
    eg_sequences as_i64 = {EG_DTYPE_I64, 3, second_data, second_lengths};
    eg_dataset *parts[2] = {eg_dataset_from_sequences(1, &as_i32),
                            eg_dataset_from_sequences(1, &as_i64)};
    options.n_boundaries = 0;
    ds =
        eg_dataset_bucket_by_sequence_length(eg_dataset_interleave_datasets(2, parts, 1), &options);
    expect_failure_after(ds, 0, EG_ERR_DTYPE);
    assert_error(EG_ERR_DTYPE, "bucket_by_sequence_length: element 1, component 0: dtype i64 "
                               "differs from i32");
    eg_dataset_free(ds);
}

int main(void) {
    const struct CMUnitTest tests[] = {
#define CASE(name) cmocka_unit_test_setup_teardown(name, case_setup, case_teardown)
        CASE(test_windows),
        CASE(test_windows_errors),
        CASE(test_windows_random_offset),
        CASE(test_windows_over_file_bytes),
        CASE(test_sequences),
        CASE(test_sequences_errors),
        CASE(test_padded_batch_options),
        CASE(test_padded_batch_dtype_mismatch),
        CASE(test_bucket_by_length),
        CASE(test_bucket_deterministic),
        CASE(test_bucket_errors),
#undef CASE
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
