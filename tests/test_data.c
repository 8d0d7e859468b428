/* The input pipeline in one thread: every source and transformation against a plain-C reference
 * (order and content), ownership (elements in the caller's scope, nothing left alive), the NULL
 * and argument rules, callback errors with their messages, the CSV and .npy / IDX sources on good
 * and malformed files with exact messages, the image augmentations, and the statistics.
 * Parallel maps, prefetch, determinism under parallelism, early stops and AUTOTUNE are in
 * test_data_threads.c. */
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

/* Not every helper of the shared file is used here. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#include "checkpoint_test_util.h"
#pragma GCC diagnostic pop

/* ---- helpers ---- */

static int case_setup(void **state) {
    (void)state;
    while (eg_scope_depth() > 0) eg_scope_end();
    eg_clear_error();
    eg_scope_begin();
    return 0;
}

static int case_teardown(void **state) {
    (void)state;
    if (eg_last_status() != EG_OK) {
        print_error("unexpected pending error: %s\n", eg_last_error());
        return -1;
    }
    return eg_scope_end() == EG_OK && eg_scope_depth() == 0 ? 0 : -1;
}

/* Iterates a whole pass: component 0 of each element, flattened to doubles, one after another,
 * into values (up to capacity); returns the element count. Fails the test on an error. */
static int64_t collect(eg_dataset *ds, double *values, int64_t capacity, int64_t *n_values) {
    eg_dataset_iterator *it = eg_dataset_iterator_new(ds);
    assert_non_null(it);
    int64_t n = 0, used = 0;
    for (;;) {
        eg_scope_begin();
        eg_element e;
        bool end;
        eg_status status = eg_dataset_iterator_next(it, &e, &end);
        if (status != EG_OK) fail_msg("iteration failed: %s", eg_last_error());
        if (end) {
            assert_int_equal(e.n_tensors, 0);
            eg_scope_end();
            break;
        }
        assert_true(e.n_tensors >= 1);
        const eg_tensor *t = e.tensors[0];
        for (int64_t i = 0; i < eg_tensor_n_elems(t); i++) {
            assert_true(used < capacity);
            int64_t index[EG_MAX_DIMS] = {0}, rest = i;
            for (int d = eg_tensor_n_dims(t) - 1; d >= 0; d--) {
                index[d] = rest % eg_tensor_shape(t)[d];
                rest /= eg_tensor_shape(t)[d];
            }
            values[used++] = eg_tensor_get(t, index);
        }
        n++;
        eg_scope_end();
    }
    eg_dataset_iterator_free(it);
    if (n_values) *n_values = used;
    return n;
}

static void assert_values(const double *actual, int64_t n_actual, const double *expected,
                          int64_t n_expected) {
    assert_int_equal(n_actual, n_expected);
    for (int64_t i = 0; i < n_expected; i++)
        if (actual[i] != expected[i])
            fail_msg("value %lld: %g, expected %g", (long long)i, actual[i], expected[i]);
}

/* The next element, expecting one. */
static eg_element next_element(eg_dataset_iterator *it) {
    eg_element e;
    bool end;
    if (eg_dataset_iterator_next(it, &e, &end) != EG_OK) fail_msg("next: %s", eg_last_error());
    assert_false(end);
    return e;
}

static void expect_end(eg_dataset_iterator *it) {
    eg_element e;
    bool end;
    assert_int_equal(eg_dataset_iterator_next(it, &e, &end), EG_OK);
    assert_true(end);
    assert_int_equal(e.n_tensors, 0);
}

static eg_tensor *arange_f32(int64_t n, int n_dims, const int64_t *shape) {
    eg_tensor *t = eg_arange(0, (double)n, 1, EG_DTYPE_F32);
    return eg_reshape(t, n_dims, shape);
}

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
    eg_dataset *ds = eg_dataset_from_tensor_slices(2, (const eg_tensor *[]){x, y});
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
    ds = eg_dataset_from_tensor_slices(1, (const eg_tensor *[]){xt});
    double values[32];
    int64_t n;
    assert_int_equal(collect(ds, values, 32, &n), 3);
    for (int i = 0; i < 15; i++) assert_true(values[i] == (double)((i % 5) * 3 + i / 5));
    eg_dataset_free(ds);

    /* Errors. */
    eg_tensor *z = eg_zeros(EG_DTYPE_F32, 1, (int64_t[]){4});
    assert_null(eg_dataset_from_tensor_slices(2, (const eg_tensor *[]){x, z}));
    assert_error(EG_ERR_SHAPE, "dataset_from_tensor_slices: tensor 1 has 4 rows (shape (4,)), "
                               "tensor 0 has 5");
    eg_tensor *scalar = eg_scalar(EG_DTYPE_F32, 1);
    assert_null(eg_dataset_from_tensor_slices(1, (const eg_tensor *[]){scalar}));
    assert_error(EG_ERR_SHAPE, "dataset_from_tensor_slices: tensor 0 is 0-d; slicing needs a "
                               "first axis");
    assert_null(eg_dataset_from_tensor_slices(0, (const eg_tensor *[]){x}));
    assert_error(EG_ERR_INVALID_ARGUMENT, "dataset_from_tensor_slices: n is 0; 1 to 8 tensors "
                                          "allowed");
    assert_null(eg_dataset_from_tensor_slices(2, (const eg_tensor *[]){x, NULL}));
    assert_error(EG_ERR_NULL_ARGUMENT, "dataset_from_tensor_slices: tensor 1 is NULL");
}

/* The dataset keeps its tensors alive: the caller's scope may end first. */
static void test_sources_keep_tensors(void **state) {
    (void)state;
    eg_scope_begin();
    eg_tensor *x = eg_arange(0, 6, 1, EG_DTYPE_I32);
    eg_dataset *ds = eg_dataset_from_tensor_slices(1, (const eg_tensor *[]){x});
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

static void counting_destroy(void *context) { ((counting_generator *)context)->destroys++; }

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
        int64_t j = (int64_t)(((unsigned __int128)reference_splitmix(&state) * (uint64_t)count) >> 64);
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
            if (epoch == 0) memcpy(first, values, sizeof first);
            else if (sizes[s] > 1) assert_memory_not_equal(first, values, sizeof first);
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
    eg_dataset *ds = eg_dataset_batch(eg_dataset_from_tensor_slices(2, (const eg_tensor *[]){x, y}),
                                      3, false);
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
    /* Batch 0: [0], [1, 2] -> [[0, -1], [1, 2]]; batch 1: [2, 3, 4], [3] -> 3 wide; batch 2: [4, 5]. */
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
    eg_dataset *parts[2] = {eg_dataset_from_tensor_slices(1, (const eg_tensor *[]){eg_unsqueeze(a, 0)}),
                            eg_dataset_from_tensor_slices(1, (const eg_tensor *[]){eg_unsqueeze(b, 0)})};
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
    ds = eg_dataset_unbatch(eg_dataset_from_tensor_slices(1, (const eg_tensor *[]){eg_unsqueeze(x, 0)}));
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
    /* Replayed tensors are handed out as separate objects: releasing one costs the cache nothing. */
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
    eg_dataset *inputs[2] = {eg_dataset_range(0, 5, 1),
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
    eg_dataset *ds = eg_dataset_from_tensor_slices(2, (const eg_tensor *[]){x, y});
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
    snprintf(expected, sizeof expected,
             "dataset_from_csv: %s: label_column is 3 but the file has 3 columns", path);
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
    expect_csv_error("1,2,3\n4,5\n", NULL, EG_ERR_FORMAT, "line 2: 2 fields, expected 3 (as on line 1)");
    expect_csv_error("1,2\n\n3,abc\n", NULL, EG_ERR_FORMAT,
                     "line 3, column 2: cannot parse \"abc\" as f32");
    expect_csv_error("1,,3\n", NULL, EG_ERR_FORMAT, "line 1, column 2: empty field");
    expect_csv_error("1,2,\n", NULL, EG_ERR_FORMAT, "line 1, column 3: empty field");
    expect_csv_error("1,1e999\n", NULL, EG_ERR_FORMAT, "line 1, column 2: 1e999 is out of range for f32");
    expect_csv_error("1,1e39\n", NULL, EG_ERR_FORMAT, "line 1, column 2: 1e39 is out of range for f32");
    expect_csv_error("1,\"2\n", NULL, EG_ERR_FORMAT, "line 1, column 2: unterminated quote");
    expect_csv_error("1,\"2\"x\n", NULL, EG_ERR_FORMAT,
                     "line 1, column 2: unexpected text after the closing quote");
    expect_csv_error("1,2 3\n", NULL, EG_ERR_FORMAT, "line 1, column 2: cannot parse \"2 3\" as f32");
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
    expect_csv_error("a,b\n1,2,3\n", &o, EG_ERR_FORMAT, "line 2: 3 fields, expected 2 (as on line 1)");
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
    eg_image_normalize_options norm = {.component = 0, .scale = 0.5, .n_values = 2, .mean = mean,
                                       .std = std};
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
    eg_image_normalize_options norm = {.scale = 1 / 255.0, .n_values = 1, .mean = &mean, .std = &std};
    eg_dataset *ds = eg_dataset_from_tensor_slices(1, (const eg_tensor *[]){images});
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
        CASE(test_csv_good),
        CASE(test_csv_errors),
        CASE(test_npy_idx),
        CASE(test_mnist),
        CASE(test_augment),
        CASE(test_augment_pipeline),
        CASE(test_stats),
#undef CASE
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
