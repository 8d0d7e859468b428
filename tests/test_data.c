/* The input pipeline in one thread: every source and transformation against a plain-C reference
 * (order and content), ownership (elements in the caller's scope, nothing left alive), the NULL
 * and argument rules, callback errors with their messages, and the statistics. Files (CSV, .npy,
 * IDX) and the image augmentations are in test_data_io.c; parallel maps, prefetch, determinism
 * under parallelism, early stops and AUTOTUNE in test_data_threads.c. */
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

#include "data_test_util.h"

/* The pending error's status is `status` and its message starts with `prefix`. */
#define assert_error(status, prefix)                                                               \
    do {                                                                                           \
        assert_int_equal(eg_last_status(), (status));                                              \
        const char *message_ = eg_last_error();                                                    \
        if (strncmp(message_, (prefix), strlen(prefix)) != 0)                                      \
            fail_msg("error message\n  \"%s\"\ndoes not start with\n  \"%s\"", message_,           \
                     (prefix));                                                                    \
        eg_clear_error();                                                                          \
    } while (0)

/* ---- sources ---- */

static void test_range(void **state) {
    (void)state;
    double values[32], expected[32];
    int64_t n;
    eg_dataset *ds = eg_dataset_range(3, 10, 2);
    assert_int_equal(collect(ds, values, 32, &n), 4);
    for (int i = 0; i < 4; i++) expected[i] = 3 + 2 * i;
    assert_values(values, n, expected, 4);
    eg_dataset_free(ds);

    ds = eg_dataset_range(5, 0, -2);
    assert_int_equal(collect(ds, values, 32, &n), 3);
    assert_values(values, n, (double[]){5, 3, 1}, 3);
    eg_dataset_free(ds);

    ds = eg_dataset_range(4, 4, 1);
    assert_int_equal(collect(ds, values, 32, &n), 0);
    eg_dataset_free(ds);

    /* Elements are 0-d i64. */
    ds = eg_dataset_range(INT64_MAX - 1, INT64_MAX, 1);
    eg_dataset_iterator *it = eg_dataset_iterator_new(ds);
    eg_element e = next_element(it);
    assert_int_equal(eg_tensor_dtype(e.tensors[0]), EG_DTYPE_I64);
    assert_int_equal(eg_tensor_n_dims(e.tensors[0]), 0);
    assert_int_equal(*(int64_t *)eg_tensor_data(e.tensors[0]), INT64_MAX - 1);
    expect_end(it);
    eg_dataset_iterator_free(it);
    eg_dataset_free(ds);

    assert_null(eg_dataset_range(0, 10, 0));
    assert_error(EG_ERR_INVALID_ARGUMENT, "dataset_range: step is 0");
}

static void test_from_tensor_slices(void **state) {
    (void)state;
    int64_t shape[2] = {5, 3};
    eg_tensor *x = arange_f32(15, 2, shape);
    eg_tensor *y = eg_arange(100, 105, 1, EG_DTYPE_I64);
    eg_dataset *ds = eg_dataset_from_tensor_slices(2, (eg_tensor *[]){x, y});
    assert_non_null(ds);
    eg_dataset_iterator *it = eg_dataset_iterator_new(ds);
    for (int64_t row = 0; row < 5; row++) {
        eg_element e = next_element(it);
        assert_int_equal(e.n_tensors, 2);
        assert_int_equal(eg_tensor_n_dims(e.tensors[0]), 1);
        assert_int_equal(eg_tensor_shape(e.tensors[0])[0], 3);
        assert_true(eg_tensor_shares_storage(e.tensors[0], x)); /* a view, no copy */
        for (int64_t c = 0; c < 3; c++)
            assert_true(eg_tensor_get(e.tensors[0], &c) == (double)(row * 3 + c));
        assert_int_equal(eg_tensor_n_dims(e.tensors[1]), 0);
        assert_true(eg_item(e.tensors[1]) == (double)(100 + row));
    }
    expect_end(it);
    expect_end(it); /* stays at the end */
    eg_dataset_iterator_free(it);
    eg_dataset_free(ds);

    /* A transposed (non-contiguous) source slices correctly too. */
    eg_tensor *xt = eg_transpose(x, 0, 1); /* (3, 5) */
    ds = eg_dataset_from_tensor_slices(1, (eg_tensor *[]){xt});
    double values[32];
    int64_t n;
    assert_int_equal(collect(ds, values, 32, &n), 3);
    for (int i = 0; i < 15; i++) assert_true(values[i] == (double)((i % 5) * 3 + i / 5));
    eg_dataset_free(ds);

    /* Errors. */
    eg_tensor *z = eg_zeros(EG_DTYPE_F32, 1, (int64_t[]){4});
    assert_null(eg_dataset_from_tensor_slices(2, (eg_tensor *[]){x, z}));
    assert_error(EG_ERR_SHAPE, "dataset_from_tensor_slices: tensor 1 has 4 rows (shape (4,)), "
                               "tensor 0 has 5");
    eg_tensor *scalar = eg_scalar(EG_DTYPE_F32, 1);
    assert_null(eg_dataset_from_tensor_slices(1, (eg_tensor *[]){scalar}));
    assert_error(EG_ERR_SHAPE, "dataset_from_tensor_slices: tensor 0 is 0-d; slicing needs a "
                               "first axis");
    assert_null(eg_dataset_from_tensor_slices(0, (eg_tensor *[]){x}));
    assert_error(EG_ERR_INVALID_ARGUMENT, "dataset_from_tensor_slices: n is 0; 1 to 8 tensors "
                                          "allowed");
    assert_null(eg_dataset_from_tensor_slices(2, (eg_tensor *[]){x, NULL}));
    assert_error(EG_ERR_NULL_ARGUMENT, "dataset_from_tensor_slices: tensor 1 is NULL");
}

/* The dataset keeps its tensors alive: the caller's scope may end first. */
static void test_sources_keep_tensors(void **state) {
    (void)state;
    eg_scope_begin();
    eg_tensor *x = eg_arange(0, 6, 1, EG_DTYPE_I32);
    eg_dataset *ds = eg_dataset_from_tensor_slices(1, (eg_tensor *[]){x});
    eg_scope_end();
    double values[8];
    int64_t n;
    assert_int_equal(collect(ds, values, 8, &n), 6);
    assert_values(values, n, (double[]){0, 1, 2, 3, 4, 5}, 6);
    eg_dataset_free(ds);
}

/* ---- generator ---- */

typedef struct counting_generator {
    int starts, nexts, finishes, destroys;
    int64_t length;
    int64_t fail_at; /* -1: never */
    uint64_t last_epoch;
} counting_generator;

static eg_status counting_start(void *context, uint64_t epoch, void **state) {
    counting_generator *g = context;
    g->starts++;
    g->last_epoch = epoch;
    *state = (void *)(intptr_t)(epoch * 1000);
    return EG_OK;
}

static eg_status counting_next(void *context, void *state, int64_t index, eg_element *out,
                               bool *end) {
    counting_generator *g = context;
    g->nexts++;
    if (index == g->fail_at) {
        eg_tensor *a = eg_zeros(EG_DTYPE_F32, 1, (int64_t[]){2});
        eg_tensor *b = eg_zeros(EG_DTYPE_F32, 1, (int64_t[]){3});
        (void)eg_add(a, b); /* raises the error */
        return eg_last_status();
    }
    if (index >= g->length) {
        *end = true;
        return EG_OK;
    }
    out->n_tensors = 1;
    out->tensors[0] = eg_scalar(EG_DTYPE_I64, (double)((intptr_t)state + index));
    return EG_OK;
}

static void counting_finish(void *context, void *state) {
    (void)state;
    ((counting_generator *)context)->finishes++;
}

static void counting_destroy(void *context) {
    ((counting_generator *)context)->destroys++;
}

static eg_dataset *counting_dataset(counting_generator *g) {
    eg_dataset_generator generator = {counting_start, counting_next, counting_finish,
                                      counting_destroy, g};
    return eg_dataset_from_generator(&generator);
}

static void test_generator(void **state) {
    (void)state;
    counting_generator g = {.length = 4, .fail_at = -1};
    eg_dataset *ds = counting_dataset(&g);
    double values[16];
    int64_t n;
    assert_int_equal(collect(ds, values, 16, &n), 4);
    assert_values(values, n, (double[]){0, 1, 2, 3}, 4);
    /* The second pass is epoch 1. */
    assert_int_equal(collect(ds, values, 16, &n), 4);
    assert_values(values, n, (double[]){1000, 1001, 1002, 1003}, 4);
    assert_int_equal(g.starts, 2);
    assert_int_equal(g.finishes, 2);
    assert_int_equal(g.nexts, 10);
    /* An iterator freed before its first next never starts the generator. */
    eg_dataset_iterator_free(eg_dataset_iterator_new(ds));
    assert_int_equal(g.starts, 2);
    assert_int_equal(g.destroys, 0);
    eg_dataset_free(ds);
    assert_int_equal(g.destroys, 1);

    /* An error in next ends the pass with the generator's message. */
    counting_generator failing = {.length = 10, .fail_at = 2};
    ds = counting_dataset(&failing);
    eg_dataset_iterator *it = eg_dataset_iterator_new(ds);
    eg_element e = next_element(it);
    e = next_element(it);
    bool end;
    assert_int_equal(eg_dataset_iterator_next(it, &e, &end), EG_ERR_SHAPE);
    assert_false(end);
    assert_int_equal(e.n_tensors, 0);
    assert_error(EG_ERR_SHAPE, "generator: element 2: add: shapes (2,) and (3,) do not "
                               "broadcast");
    /* The failure sticks. */
    assert_int_equal(eg_dataset_iterator_next(it, &e, &end), EG_ERR_SHAPE);
    assert_error(EG_ERR_SHAPE, "generator: element 2: add:");
    eg_dataset_iterator_free(it);
    eg_dataset_free(ds);

    assert_null(eg_dataset_from_generator(NULL));
    assert_error(EG_ERR_NULL_ARGUMENT, "dataset_from_generator: generator is NULL");
    counting_generator unused = {0};
    eg_dataset_generator bad = {.destroy = counting_destroy, .context = &unused};
    assert_null(eg_dataset_from_generator(&bad));
    assert_error(EG_ERR_NULL_ARGUMENT, "dataset_from_generator: generator->next is NULL");
    assert_int_equal(unused.destroys, 1);
}

/* ---- map and filter ---- */

typedef struct map_log {
    int64_t calls;
    int64_t last_index;
    uint64_t last_epoch;
} map_log;

/* (x) -> (x * 10 + index, x): also checks that info counts from 0 in input order. */
static eg_status times_ten(const eg_element *in, eg_element *out, const eg_dataset_call_info *info,
                           void *context) {
    map_log *log = context;
    if (log) {
        if (info->index != log->calls) return EG_ERR_INTERNAL;
        log->calls++;
        log->last_epoch = info->epoch;
    }
    eg_tensor *scaled = eg_add_scalar(eg_mul_scalar(in->tensors[0], 10), (double)info->index);
    out->n_tensors = 2;
    out->tensors[0] = scaled;
    out->tensors[1] = in->tensors[0]; /* passed through */
    return scaled ? EG_OK : eg_last_status();
}

static void test_map_sequential(void **state) {
    (void)state;
    map_log log = {0};
    eg_dataset *ds = eg_dataset_map(eg_dataset_range(0, 5, 1), times_ten, &log, 0, true);
    double values[16];
    int64_t n;
    assert_int_equal(collect(ds, values, 16, &n), 5);
    assert_values(values, n, (double[]){0, 11, 22, 33, 44}, 5);
    assert_int_equal(log.calls, 5);
    log.calls = 0;
    assert_int_equal(collect(ds, values, 16, &n), 5);
    assert_int_equal(log.last_epoch, 1);
    eg_dataset_free(ds);
}

static eg_status keep_multiples_of_three(const eg_element *e, bool *keep,
                                         const eg_dataset_call_info *info, void *context) {
    (void)info, (void)context;
    *keep = (int64_t)eg_item(e->tensors[0]) % 3 == 0;
    return EG_OK;
}

static void test_filter(void **state) {
    (void)state;
    eg_dataset *ds = eg_dataset_filter(eg_dataset_range(0, 10, 1), keep_multiples_of_three, NULL);
    double values[16];
    int64_t n;
    assert_int_equal(collect(ds, values, 16, &n), 4);
    assert_values(values, n, (double[]){0, 3, 6, 9}, 4);
    eg_dataset_free(ds);
    assert_null(eg_dataset_filter(eg_dataset_range(0, 1, 1), NULL, NULL));
    assert_error(EG_ERR_NULL_ARGUMENT, "dataset_filter: fn is NULL");
}

/* Callbacks that fail in the ways a user's can. */
static eg_status fail_at_three(const eg_element *in, eg_element *out,
                               const eg_dataset_call_info *info, void *context) {
    (void)context;
    if (info->index == 3) {
        eg_tensor *a = eg_zeros(EG_DTYPE_F32, 2, (int64_t[]){2, 3});
        (void)eg_matmul(a, a);
        return eg_last_status();
    }
    out->n_tensors = 1;
    out->tensors[0] = in->tensors[0];
    return EG_OK;
}

static eg_status status_without_error(const eg_element *in, eg_element *out,
                                      const eg_dataset_call_info *info, void *context) {
    (void)in, (void)out, (void)info, (void)context;
    return EG_ERR_IO;
}

static eg_status ok_but_empty(const eg_element *in, eg_element *out,
                              const eg_dataset_call_info *info, void *context) {
    (void)in, (void)info, (void)context;
    out->n_tensors = 0;
    return EG_OK;
}

static eg_status ok_but_null(const eg_element *in, eg_element *out,
                             const eg_dataset_call_info *info, void *context) {
    (void)in, (void)info, (void)context;
    out->n_tensors = 1;
    out->tensors[0] = NULL;
    return EG_OK;
}

/* Iterates until the failure; returns the number of elements before it. */
static int64_t run_until_error(eg_dataset *ds, eg_status expected) {
    eg_dataset_iterator *it = eg_dataset_iterator_new(ds);
    int64_t n = 0;
    for (;;) {
        eg_scope_begin();
        eg_element e;
        bool end;
        eg_status status = eg_dataset_iterator_next(it, &e, &end);
        eg_scope_end();
        assert_false(end);
        if (status != EG_OK) {
            assert_int_equal(status, expected);
            break;
        }
        n++;
    }
    eg_dataset_iterator_free(it);
    return n;
}

static void test_map_errors(void **state) {
    (void)state;
    eg_dataset *ds = eg_dataset_map(eg_dataset_range(0, 10, 1), fail_at_three, NULL, 0, true);
    assert_int_equal(run_until_error(ds, EG_ERR_SHAPE), 3);
    assert_error(EG_ERR_SHAPE, "map: element 3: matmul: inner dimensions differ: (2, 3) x (2, 3) "
                               "at test_data.c:");
    eg_dataset_free(ds);

    ds = eg_dataset_map(eg_dataset_range(0, 10, 1), status_without_error, NULL, 0, true);
    assert_int_equal(run_until_error(ds, EG_ERR_IO), 0);
    assert_error(EG_ERR_IO, "map: element 0: the callback returned 'input/output error' without "
                            "raising an error");
    eg_dataset_free(ds);

    ds = eg_dataset_map(eg_dataset_range(0, 10, 1), ok_but_empty, NULL, 0, true);
    assert_int_equal(run_until_error(ds, EG_ERR_INVALID_ARGUMENT), 0);
    assert_error(EG_ERR_INVALID_ARGUMENT, "map: element 0: the callback returned an element of 0 "
                                          "tensors (1 to 8 allowed)");
    eg_dataset_free(ds);

    ds = eg_dataset_map(eg_dataset_range(0, 10, 1), ok_but_null, NULL, 0, true);
    assert_int_equal(run_until_error(ds, EG_ERR_INVALID_ARGUMENT), 0);
    assert_error(EG_ERR_INVALID_ARGUMENT, "map: element 0: the callback returned EG_OK but tensor "
                                          "0 of its element is NULL");
    eg_dataset_free(ds);

    /* Argument errors, and the NULL rule: a NULL input gives NULL without a new error. */
    assert_null(eg_dataset_map(eg_dataset_range(0, 1, 1), NULL, NULL, 0, true));
    assert_error(EG_ERR_NULL_ARGUMENT, "dataset_map: fn is NULL");
    assert_null(eg_dataset_map(eg_dataset_range(0, 1, 1), times_ten, NULL, 65, true));
    assert_error(EG_ERR_INVALID_ARGUMENT, "dataset_map: num_parallel_calls is 65; 0 (sequential), "
                                          "1 to 64, or EG_AUTOTUNE");
    assert_null(eg_dataset_batch(eg_dataset_map(NULL, times_ten, NULL, 0, true), 4, false));
    assert_int_equal(eg_last_status(), EG_OK);
    /* A chain fails once, at its first bad call. */
    assert_null(eg_dataset_prefetch(eg_dataset_batch(eg_dataset_range(0, 1, 0), 4, false), 2));
    assert_error(EG_ERR_INVALID_ARGUMENT, "dataset_range: step is 0");
    assert_null(eg_dataset_iterator_new(NULL));
    assert_error(EG_ERR_NULL_ARGUMENT, "dataset_iterator_new: dataset is NULL");
    bool end;
    eg_element e;
    assert_int_equal(eg_dataset_iterator_next(NULL, &e, &end), EG_ERR_NULL_ARGUMENT);
    assert_error(EG_ERR_NULL_ARGUMENT, "dataset_iterator_next: iterator is NULL");
}

/* A pending error from before does not make next fail, and stays the one kept. */
static void test_pending_error_is_kept(void **state) {
    (void)state;
    eg_dataset *ds = eg_dataset_map(eg_dataset_range(0, 3, 1), times_ten, NULL, 0, true);
    eg_dataset_iterator *it = eg_dataset_iterator_new(ds);
    (void)eg_reshape(eg_zeros(EG_DTYPE_F32, 1, (int64_t[]){4}), 1, (int64_t[]){5});
    assert_int_equal(eg_last_status(), EG_ERR_SHAPE);
    eg_element e;
    bool end;
    assert_int_equal(eg_dataset_iterator_next(it, &e, &end), EG_OK);
    assert_false(end);
    assert_error(EG_ERR_SHAPE, "reshape:");
    eg_dataset_iterator_free(it);
    eg_dataset_free(ds);
}

/* ---- shuffle ---- */

/* The shuffle's documented algorithm, for n elements 0 .. n-1. */
static uint64_t reference_splitmix(uint64_t *state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static void reference_shuffle(int64_t n, int64_t buffer_size, uint64_t seed, uint64_t epoch,
                              double *out) {
    uint64_t mix = seed ^ 0x5DEECE66Dull;
    uint64_t state = reference_splitmix(&mix) + epoch * 0xD1B54A32D192ED03ull;
    int64_t *buffer = malloc((size_t)buffer_size * sizeof *buffer);
    int64_t count = 0, next = 0, produced = 0;
    for (;;) {
        while (next < n && count < buffer_size) buffer[count++] = next++;
        if (count == 0) break;
        int64_t j =
            (int64_t)(((unsigned __int128)reference_splitmix(&state) * (uint64_t)count) >> 64);
        out[produced++] = (double)buffer[j];
        buffer[j] = buffer[--count];
    }
    free(buffer);
}

static void test_shuffle(void **state) {
    (void)state;
    enum { N = 100 };
    double values[N], expected[N], first[N];
    int64_t n;
    int64_t sizes[] = {1, 7, 100, 1000};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        eg_dataset *ds = eg_dataset_shuffle(eg_dataset_range(0, N, 1), sizes[s], 42, true);
        for (uint64_t epoch = 0; epoch < 3; epoch++) {
            assert_int_equal(collect(ds, values, N, &n), N);
            reference_shuffle(N, sizes[s], 42, epoch, expected);
            assert_values(values, n, expected, N);
            if (epoch == 0)
                memcpy(first, values, sizeof first);
            else if (sizes[s] > 1)
                assert_memory_not_equal(first, values, sizeof first);
        }
        eg_dataset_free(ds);
    }
    /* Every element once; buffer 1 keeps the order. */
    eg_dataset *ds = eg_dataset_shuffle(eg_dataset_range(0, N, 1), N, 7, true);
    collect(ds, values, N, &n);
    int seen[N] = {0};
    for (int i = 0; i < N; i++) seen[(int)values[i]]++;
    for (int i = 0; i < N; i++) assert_int_equal(seen[i], 1);
    eg_dataset_free(ds);
    /* Without reshuffling every pass has the first pass's order; another seed, another order. */
    ds = eg_dataset_shuffle(eg_dataset_range(0, N, 1), N, 7, false);
    collect(ds, first, N, &n);
    collect(ds, values, N, &n);
    assert_memory_equal(first, values, sizeof first);
    eg_dataset_free(ds);
    ds = eg_dataset_shuffle(eg_dataset_range(0, N, 1), N, 8, false);
    collect(ds, values, N, &n);
    assert_memory_not_equal(first, values, sizeof first);
    eg_dataset_free(ds);
    /* A fresh dataset with the same seed repeats the sequence of epochs. */
    ds = eg_dataset_shuffle(eg_dataset_range(0, N, 1), 7, 42, true);
    collect(ds, values, N, &n);
    reference_shuffle(N, 7, 42, 0, expected);
    assert_values(values, n, expected, N);
    eg_dataset_free(ds);

    assert_null(eg_dataset_shuffle(eg_dataset_range(0, 1, 1), 0, 1, true));
    assert_error(EG_ERR_INVALID_ARGUMENT, "dataset_shuffle: buffer_size is 0; it must be at least "
                                          "1");
}

/* ---- batch, padded_batch, unbatch ---- */

static void test_batch(void **state) {
    (void)state;
    int64_t shape[3] = {7, 2, 3};
    eg_tensor *x = arange_f32(42, 3, shape);
    eg_tensor *y = eg_arange(0, 7, 1, EG_DTYPE_U8);
    eg_dataset *ds =
        eg_dataset_batch(eg_dataset_from_tensor_slices(2, (eg_tensor *[]){x, y}), 3, false);
    eg_dataset_iterator *it = eg_dataset_iterator_new(ds);
    int64_t sizes[3] = {3, 3, 1};
    for (int b = 0; b < 3; b++) {
        eg_element e = next_element(it);
        assert_int_equal(e.n_tensors, 2);
        assert_int_equal(eg_tensor_n_dims(e.tensors[0]), 3);
        assert_int_equal(eg_tensor_shape(e.tensors[0])[0], sizes[b]);
        assert_int_equal(eg_tensor_shape(e.tensors[0])[1], 2);
        assert_int_equal(eg_tensor_shape(e.tensors[0])[2], 3);
        assert_true(eg_tensor_is_contiguous(e.tensors[0]));
        const float *data = eg_tensor_data(e.tensors[0]);
        for (int64_t i = 0; i < sizes[b] * 6; i++) assert_true(data[i] == (float)(b * 18 + i));
        assert_int_equal(eg_tensor_dtype(e.tensors[1]), EG_DTYPE_U8);
        assert_int_equal(eg_tensor_n_dims(e.tensors[1]), 1);
        const uint8_t *labels = eg_tensor_data(e.tensors[1]);
        for (int64_t i = 0; i < sizes[b]; i++) assert_int_equal(labels[i], b * 3 + i);
    }
    expect_end(it);
    eg_dataset_iterator_free(it);
    eg_dataset_free(ds);

    /* drop_remainder; a batch larger than the data. */
    double values[64];
    int64_t n;
    ds = eg_dataset_batch(eg_dataset_range(0, 7, 1), 3, true);
    assert_int_equal(collect(ds, values, 64, &n), 2);
    assert_values(values, n, (double[]){0, 1, 2, 3, 4, 5}, 6);
    eg_dataset_free(ds);
    ds = eg_dataset_batch(eg_dataset_range(0, 7, 1), 10, true);
    assert_int_equal(collect(ds, values, 64, &n), 0);
    eg_dataset_free(ds);
    ds = eg_dataset_batch(eg_dataset_range(0, 7, 1), 10, false);
    assert_int_equal(collect(ds, values, 64, &n), 1);
    assert_int_equal(n, 7);
    eg_dataset_free(ds);

    assert_null(eg_dataset_batch(eg_dataset_range(0, 1, 1), 0, false));
    assert_error(EG_ERR_INVALID_ARGUMENT, "dataset_batch: batch_size is 0; it must be 1 to 2^30");
}

/* Element i: a (i % 3 + 1,) f32 vector i, i+1, ...; and a u8 scalar. */
static eg_status ragged(const eg_element *in, eg_element *out, const eg_dataset_call_info *info,
                        void *context) {
    (void)context, (void)info;
    int64_t i = (int64_t)eg_item(in->tensors[0]);
    out->n_tensors = 2;
    out->tensors[0] = eg_arange((double)i, (double)(i + i % 3 + 1), 1, EG_DTYPE_F32);
    out->tensors[1] = eg_cast(in->tensors[0], EG_DTYPE_U8);
    return EG_OK;
}

static void test_padded_batch(void **state) {
    (void)state;
    eg_dataset *ds = eg_dataset_padded_batch(
        eg_dataset_map(eg_dataset_range(0, 5, 1), ragged, NULL, 0, true), 2, false, -1);
    eg_dataset_iterator *it = eg_dataset_iterator_new(ds);
    /* Batch 0: [0], [1, 2] -> [[0, -1], [1, 2]]; batch 1: [2, 3, 4], [3] -> 3 wide; batch 2: [4,
     * 5]. */
    float expected0[] = {0, -1, 1, 2};
    float expected1[] = {2, 3, 4, 3, -1, -1};
    float expected2[] = {4, 5};
    const float *expected[] = {expected0, expected1, expected2};
    int64_t widths[] = {2, 3, 2}, rows[] = {2, 2, 1};
    for (int b = 0; b < 3; b++) {
        eg_element e = next_element(it);
        assert_int_equal(eg_tensor_shape(e.tensors[0])[0], rows[b]);
        assert_int_equal(eg_tensor_shape(e.tensors[0])[1], widths[b]);
        assert_memory_equal(eg_tensor_data(e.tensors[0]), expected[b],
                            (size_t)(rows[b] * widths[b]) * sizeof(float));
        assert_int_equal(eg_tensor_n_dims(e.tensors[1]), 1);
    }
    expect_end(it);
    eg_dataset_iterator_free(it);
    eg_dataset_free(ds);

    /* 2-d items pad on both axes. */
    eg_tensor *a = eg_ones(EG_DTYPE_I32, 2, (int64_t[]){1, 2});
    eg_tensor *b = eg_full(EG_DTYPE_I32, 2, (int64_t[]){2, 1}, 7);
    eg_dataset *parts[2] = {eg_dataset_from_tensor_slices(1, (eg_tensor *[]){eg_unsqueeze(a, 0)}),
                            eg_dataset_from_tensor_slices(1, (eg_tensor *[]){eg_unsqueeze(b, 0)})};
    ds = eg_dataset_padded_batch(eg_dataset_interleave_datasets(2, parts, 1), 2, false, 0);
    it = eg_dataset_iterator_new(ds);
    eg_element e = next_element(it);
    int32_t expected2d[] = {1, 1, 0, 0, 7, 0, 7, 0};
    assert_int_equal(eg_tensor_shape(e.tensors[0])[1], 2);
    assert_int_equal(eg_tensor_shape(e.tensors[0])[2], 2);
    assert_memory_equal(eg_tensor_data(e.tensors[0]), expected2d, sizeof expected2d);
    eg_dataset_iterator_free(it);
    eg_dataset_free(ds);

    /* Plain batch refuses varying shapes, naming the element. */
    ds = eg_dataset_batch(eg_dataset_map(eg_dataset_range(0, 5, 1), ragged, NULL, 0, true), 2,
                          false);
    assert_int_equal(run_until_error(ds, EG_ERR_SHAPE), 0);
    assert_error(EG_ERR_SHAPE, "batch: element 1, component 0: shape (2,) differs from (1,) of the "
                               "batch's first element; use eg_dataset_padded_batch for items of "
                               "varying shape");
    eg_dataset_free(ds);
}

static eg_status mixed_dtypes(const eg_element *in, eg_element *out,
                              const eg_dataset_call_info *info, void *context) {
    (void)context;
    out->n_tensors = 1;
    out->tensors[0] = eg_cast(in->tensors[0], info->index == 2 ? EG_DTYPE_F32 : EG_DTYPE_I64);
    return EG_OK;
}

static void test_unbatch(void **state) {
    (void)state;
    double values[64], expected[64];
    int64_t n;
    eg_dataset *ds = eg_dataset_unbatch(eg_dataset_batch(eg_dataset_range(0, 10, 1), 4, false));
    assert_int_equal(collect(ds, values, 64, &n), 10);
    for (int i = 0; i < 10; i++) expected[i] = i;
    assert_values(values, n, expected, 10);
    eg_dataset_free(ds);

    /* Unbatching a 2-component batched source gives its rows as views. */
    int64_t shape[2] = {2, 3};
    eg_tensor *x = arange_f32(6, 2, shape);
    ds = eg_dataset_unbatch(eg_dataset_from_tensor_slices(1, (eg_tensor *[]){eg_unsqueeze(x, 0)}));
    assert_int_equal(collect(ds, values, 64, &n), 2);
    assert_int_equal(n, 6);
    eg_dataset_free(ds);

    ds = eg_dataset_unbatch(eg_dataset_range(0, 3, 1));
    assert_int_equal(run_until_error(ds, EG_ERR_SHAPE), 0);
    assert_error(EG_ERR_SHAPE, "unbatch: element 0, component 0: shape () has no first axis to "
                               "split");
    eg_dataset_free(ds);

    ds = eg_dataset_batch(eg_dataset_map(eg_dataset_range(0, 4, 1), mixed_dtypes, NULL, 0, true), 4,
                          false);
    assert_int_equal(run_until_error(ds, EG_ERR_DTYPE), 0);
    assert_error(EG_ERR_DTYPE, "batch: element 2, component 0: dtype f32 differs from i64 of the "
                               "batch's first element");
    eg_dataset_free(ds);
}

/* ---- repeat, take, skip, cache ---- */

static void test_repeat_take_skip(void **state) {
    (void)state;
    double values[64];
    int64_t n;
    eg_dataset *ds = eg_dataset_repeat(eg_dataset_range(0, 3, 1), 3);
    assert_int_equal(collect(ds, values, 64, &n), 9);
    assert_values(values, n, (double[]){0, 1, 2, 0, 1, 2, 0, 1, 2}, 9);
    eg_dataset_free(ds);

    ds = eg_dataset_take(eg_dataset_repeat(eg_dataset_range(0, 3, 1), -1), 7);
    assert_int_equal(collect(ds, values, 64, &n), 7);
    assert_values(values, n, (double[]){0, 1, 2, 0, 1, 2, 0}, 7);
    eg_dataset_free(ds);

    /* An empty input ends a forever-repeat instead of spinning. */
    ds = eg_dataset_repeat(eg_dataset_range(0, 0, 1), -1);
    assert_int_equal(collect(ds, values, 64, &n), 0);
    eg_dataset_free(ds);
    ds = eg_dataset_repeat(eg_dataset_range(0, 3, 1), 0);
    assert_int_equal(collect(ds, values, 64, &n), 0);
    eg_dataset_free(ds);

    /* Each repetition is a new epoch of what is below: a shuffle reshuffles. */
    ds = eg_dataset_repeat(eg_dataset_shuffle(eg_dataset_range(0, 10, 1), 10, 3, true), 2);
    assert_int_equal(collect(ds, values, 64, &n), 20);
    double expected[20];
    reference_shuffle(10, 10, 3, 0, expected);
    reference_shuffle(10, 10, 3, 1, expected + 10);
    assert_values(values, n, expected, 20);
    eg_dataset_free(ds);

    ds = eg_dataset_skip(eg_dataset_range(0, 10, 1), 7);
    assert_int_equal(collect(ds, values, 64, &n), 3);
    assert_values(values, n, (double[]){7, 8, 9}, 3);
    eg_dataset_free(ds);
    ds = eg_dataset_skip(eg_dataset_range(0, 10, 1), -1);
    assert_int_equal(collect(ds, values, 64, &n), 0);
    eg_dataset_free(ds);
    ds = eg_dataset_take(eg_dataset_skip(eg_dataset_range(0, 10, 1), 2), 3);
    assert_int_equal(collect(ds, values, 64, &n), 3);
    assert_values(values, n, (double[]){2, 3, 4}, 3);
    eg_dataset_free(ds);
    ds = eg_dataset_take(eg_dataset_range(0, 10, 1), -1);
    assert_int_equal(collect(ds, values, 64, &n), 10);
    eg_dataset_free(ds);

    assert_null(eg_dataset_take(eg_dataset_range(0, 1, 1), -2));
    assert_error(EG_ERR_INVALID_ARGUMENT, "dataset_take: count is -2; it must be -1 or more");
}

static void test_cache(void **state) {
    (void)state;
    counting_generator g = {.length = 5, .fail_at = -1};
    eg_dataset *ds = eg_dataset_cache(counting_dataset(&g));
    double values[16];
    int64_t n;
    /* A pass stopped early is not kept. */
    eg_dataset_iterator *it = eg_dataset_iterator_new(ds);
    (void)next_element(it);
    eg_dataset_iterator_free(it);
    assert_int_equal(g.starts, 1);
    /* The first complete pass runs the generator (epoch 1); later ones replay it. */
    assert_int_equal(collect(ds, values, 16, &n), 5);
    assert_values(values, n, (double[]){1000, 1001, 1002, 1003, 1004}, 5);
    assert_int_equal(g.starts, 2);
    for (int pass = 0; pass < 2; pass++) {
        assert_int_equal(collect(ds, values, 16, &n), 5);
        assert_values(values, n, (double[]){1000, 1001, 1002, 1003, 1004}, 5);
    }
    assert_int_equal(g.starts, 2);
    /* Replayed tensors are handed out as separate objects: releasing one costs the cache nothing.
     */
    it = eg_dataset_iterator_new(ds);
    eg_element a = next_element(it);
    eg_release(a.tensors[0]);
    eg_dataset_iterator_free(it);
    assert_int_equal(collect(ds, values, 16, &n), 5);
    eg_dataset_free(ds);
}

/* ---- zip and interleave ---- */

static eg_dataset *ten_times_range(const eg_element *e, const eg_dataset_call_info *info,
                                   void *context) {
    (void)info, (void)context;
    int64_t i = (int64_t)eg_item(e->tensors[0]);
    return eg_dataset_range(10 * i, 10 * i + 4, 1);
}

static eg_dataset *no_dataset(const eg_element *e, const eg_dataset_call_info *info,
                              void *context) {
    (void)e, (void)info, (void)context;
    return NULL;
}

static void test_zip_interleave(void **state) {
    (void)state;
    double values[64];
    int64_t n;
    eg_dataset *inputs[2] = {
        eg_dataset_range(0, 5, 1),
        eg_dataset_map(eg_dataset_range(100, 103, 1), times_ten, NULL, 0, true)};
    eg_dataset *ds = eg_dataset_zip(2, inputs);
    eg_dataset_iterator *it = eg_dataset_iterator_new(ds);
    for (int i = 0; i < 3; i++) {
        eg_element e = next_element(it);
        assert_int_equal(e.n_tensors, 3);
        assert_true(eg_item(e.tensors[0]) == i);
        assert_true(eg_item(e.tensors[1]) == (100 + i) * 10 + i);
        assert_true(eg_item(e.tensors[2]) == 100 + i);
    }
    expect_end(it);
    eg_dataset_iterator_free(it);
    eg_dataset_free(ds);

    /* tf.data's interleave order. */
    ds = eg_dataset_interleave(eg_dataset_range(0, 3, 1), ten_times_range, NULL, 2, 1);
    assert_int_equal(collect(ds, values, 64, &n), 12);
    assert_values(values, n, (double[]){0, 10, 1, 11, 2, 12, 3, 13, 20, 21, 22, 23}, 12);
    eg_dataset_free(ds);
    ds = eg_dataset_interleave(eg_dataset_range(0, 3, 1), ten_times_range, NULL, 3, 2);
    assert_int_equal(collect(ds, values, 64, &n), 12);
    assert_values(values, n, (double[]){0, 1, 10, 11, 20, 21, 2, 3, 12, 13, 22, 23}, 12);
    eg_dataset_free(ds);

    /* Round robin over sources of different lengths. */
    eg_dataset *sources[3] = {eg_dataset_range(0, 2, 1), eg_dataset_range(10, 15, 1),
                              eg_dataset_range(20, 23, 1)};
    ds = eg_dataset_interleave_datasets(3, sources, 1);
    assert_int_equal(collect(ds, values, 64, &n), 10);
    assert_values(values, n, (double[]){0, 10, 20, 1, 11, 21, 12, 22, 13, 14}, 10);
    eg_dataset_free(ds);

    ds = eg_dataset_interleave(eg_dataset_range(0, 3, 1), no_dataset, NULL, 2, 1);
    assert_int_equal(run_until_error(ds, EG_ERR_INVALID_ARGUMENT), 0);
    assert_error(EG_ERR_INVALID_ARGUMENT, "interleave: element 0: the callback returned 'invalid "
                                          "argument' without raising an error");
    eg_dataset_free(ds);

    /* zip takes over its inputs even when it fails. */
    eg_dataset *bad[2] = {eg_dataset_range(0, 1, 1), NULL};
    assert_null(eg_dataset_zip(2, bad));
    assert_error(EG_ERR_NULL_ARGUMENT, "dataset_zip: input 1 is NULL");
    /* Too many tensors in all. */
    eg_dataset *wide[9];
    for (int i = 0; i < 9; i++) wide[i] = eg_dataset_range(0, 2, 1);
    ds = eg_dataset_zip(9, wide);
    assert_int_equal(run_until_error(ds, EG_ERR_INVALID_ARGUMENT), 0);
    assert_error(EG_ERR_INVALID_ARGUMENT, "zip: the inputs' elements have more than 8 tensors in "
                                          "all");
    eg_dataset_free(ds);
    /* A dataset used twice. */
    eg_dataset *r = eg_dataset_range(0, 3, 1);
    eg_dataset *twice[2] = {r, eg_dataset_retain(r)};
    ds = eg_dataset_zip(2, twice);
    assert_int_equal(collect(ds, values, 64, &n), 3);
    eg_dataset_free(ds);
}

/* ---- ownership ---- */

static void test_ownership(void **state) {
    (void)state;
    eg_debug_track_tensors(true);
    size_t before = eg_debug_live_tensors(NULL);
    int64_t shape[2] = {8, 4};
    eg_tensor *x = arange_f32(32, 2, shape);
    eg_tensor *y = eg_arange(0, 8, 1, EG_DTYPE_I64);
    eg_dataset *ds = eg_dataset_from_tensor_slices(2, (eg_tensor *[]){x, y});
    eg_release(x); /* the dataset holds its own references */
    eg_release(y);
    ds = eg_dataset_map(ds, times_ten, NULL, 0, true);
    ds = eg_dataset_cache(eg_dataset_batch(eg_dataset_shuffle(ds, 4, 1, true), 3, false));
    for (int pass = 0; pass < 2; pass++) {
        eg_dataset_iterator *it = eg_dataset_iterator_new(ds);
        /* Elements go to the innermost scope... */
        eg_scope_begin();
        eg_element e = next_element(it);
        eg_scope_end();
        /* ...or to the caller when none is open. */
        int depth = eg_scope_depth();
        while (eg_scope_depth() > 0) eg_scope_end();
        e = next_element(it);
        eg_element_release(&e);
        assert_int_equal(e.n_tensors, 0);
        for (int i = 0; i < depth; i++) eg_scope_begin();
        eg_dataset_iterator_free(it);
    }
    eg_dataset_free(ds);
    size_t after = eg_debug_live_tensors(NULL);
    if (after != before) {
        eg_debug_live_tensors(stderr);
        fail_msg("%zu tensors alive before, %zu after", before, after);
    }
    eg_debug_track_tensors(false);
}

/* ---- statistics ---- */

static void test_stats(void **state) {
    (void)state;
    eg_dataset *ds = eg_dataset_batch(
        eg_dataset_map(eg_dataset_repeat(eg_dataset_range(0, 10, 1), 2), times_ten, NULL, 0, true),
        4, false);
    eg_dataset_options options = {.cpu_budget = 1, .ram_budget = 1 << 20};
    ds = eg_dataset_with_options(ds, &options);
    eg_dataset_iterator *it = eg_dataset_iterator_new(ds);
    for (int i = 0; i < 5; i++) (void)next_element(it);
    expect_end(it);
    eg_dataset_stage_stats stats[8];
    int n = eg_dataset_stats(it, stats, 8);
    assert_int_equal(n, 4);
    assert_string_equal(stats[0].name, "batch(4)");
    assert_int_equal(stats[0].depth, 0);
    assert_int_equal(stats[0].elements, 5);
    assert_string_equal(stats[1].name, "map");
    assert_int_equal(stats[1].elements, 20);
    assert_true(stats[1].call_cpu_seconds > 0);
    assert_string_equal(stats[2].name, "repeat(2)");
    assert_string_equal(stats[3].name, "range(0, 10, 1)");
    assert_int_equal(stats[3].depth, 3);
    assert_int_equal(stats[3].elements, 20); /* both passes add up in one record */
    assert_true(stats[0].throughput > 0);
    assert_int_equal(eg_dataset_stats(it, NULL, 0), 4);
    FILE *devnull = fopen("/dev/null", "w");
    assert_int_equal(eg_dataset_stats_print(it, devnull), EG_OK);
    fclose(devnull);
    eg_dataset_iterator_free(it);
    eg_dataset_free(ds);
    assert_int_equal(eg_dataset_stats(NULL, stats, 8), -1);
    assert_error(EG_ERR_NULL_ARGUMENT, "dataset_stats: iterator is NULL");
}

int main(void) {
    const struct CMUnitTest tests[] = {
#define CASE(name) cmocka_unit_test_setup_teardown(name, case_setup, case_teardown)
        CASE(test_range),
        CASE(test_from_tensor_slices),
        CASE(test_sources_keep_tensors),
        CASE(test_generator),
        CASE(test_map_sequential),
        CASE(test_filter),
        CASE(test_map_errors),
        CASE(test_pending_error_is_kept),
        CASE(test_shuffle),
        CASE(test_batch),
        CASE(test_padded_batch),
        CASE(test_unbatch),
        CASE(test_repeat_take_skip),
        CASE(test_cache),
        CASE(test_zip_interleave),
        CASE(test_ownership),
        CASE(test_stats),
#undef CASE
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
