/* The input pipeline's threads: parallel map keeps input order and content (against the
 * sequential map) for every parallelism and AUTOTUNE, whatever order the calls finish in; the
 * same seed gives the same sequence with 1 and 4 parallel calls (shuffle + random augmentation +
 * batch + prefetch); stopping early, at any point, neither leaks nor hangs; an error in a callback
 * or in the input ends the iteration with that error after the elements before it; iterators of
 * one dataset run from several threads at once; nested parallel stages cannot deadlock the pool;
 * AUTOTUNE stays within its budget and settles. Runs under ThreadSanitizer in CI (label
 * "threads") and under AddressSanitizer (leaks). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "eagle.h"
#include "test_util.h"

static int case_teardown(void **state) {
    (void)state;
    if (eg_last_status() != EG_OK) {
        print_error("unexpected pending error: %s\n", eg_last_error());
        return -1;
    }
    return eg_scope_end() == EG_OK && eg_scope_depth() == 0 ? 0 : -1;
}

/* The bytes of every tensor of every element of a pass, concatenated (malloc'd). */
typedef struct pass_bytes {
    uint8_t *bytes;
    size_t size, capacity;
    int64_t elements;
} pass_bytes;

static void append(pass_bytes *p, const void *bytes, size_t n) {
    if (p->size + n > p->capacity) {
        p->capacity = (p->size + n) * 2 + 64;
        p->bytes = realloc(p->bytes, p->capacity);
        assert_non_null(p->bytes);
    }
    memcpy(p->bytes + p->size, bytes, n);
    p->size += n;
}

static pass_bytes run_pass(eg_dataset_iterator *it) {
    pass_bytes p = {0};
    for (;;) {
        eg_scope_begin();
        eg_element e;
        bool end;
        if (eg_dataset_iterator_next(it, &e, &end) != EG_OK) fail_msg("next: %s", eg_last_error());
        if (end) {
            eg_scope_end();
            break;
        }
        for (int i = 0; i < e.n_tensors; i++) {
            size_t n = (size_t)eg_tensor_n_elems(e.tensors[i]) *
                       eg_dtype_size(eg_tensor_dtype(e.tensors[i]));
            uint8_t *buffer = malloc(n + 1);
            assert_int_equal(eg_tensor_copy_to_host(e.tensors[i], buffer, n), EG_OK);
            append(&p, buffer, n);
            free(buffer);
        }
        p.elements++;
        eg_scope_end();
    }
    return p;
}

static pass_bytes pass_of(eg_dataset *ds) {
    eg_dataset_iterator *it = eg_dataset_iterator_new(ds);
    assert_non_null(it);
    pass_bytes p = run_pass(it);
    eg_dataset_iterator_free(it);
    return p;
}

static void assert_same_pass(const pass_bytes *a, const pass_bytes *b, const char *what) {
    assert_int_equal(a->elements, b->elements);
    assert_int_equal(a->size, b->size);
    if (a->size && memcmp(a->bytes, b->bytes, a->size) != 0) fail_msg("%s: passes differ", what);
}

/* A few microseconds of pseudo-random sleep, so that parallel calls finish out of order. */
static void jitter(int64_t index) {
    uint64_t z = (uint64_t)index * 0x9E3779B97F4A7C15ull;
    z ^= z >> 29;
    struct timespec ts = {0, (long)(z % 300) * 1000};
    nanosleep(&ts, NULL);
}

/* (i) -> (f32 (4,) of i * 4 + k + index / 1000, i): content depends on the element and index. */
static eg_status expand(const eg_element *in, eg_element *out, const eg_dataset_call_info *info,
                        void *context) {
    (void)context;
    jitter(info->index);
    double i = eg_item(in->tensors[0]);
    eg_tensor *v = eg_arange(i * 4, i * 4 + 4, 1, EG_DTYPE_F32);
    out->n_tensors = 2;
    out->tensors[0] = eg_add_scalar(v, (double)info->index / 1000.0);
    out->tensors[1] = in->tensors[0];
    return out->tensors[0] ? EG_OK : eg_last_status();
}

static void test_parallel_map_order(void **state) {
    (void)state;
    eg_dataset *reference = eg_dataset_map(eg_dataset_range(0, 300, 1), expand, NULL, 0, true);
    pass_bytes expected = pass_of(reference);
    assert_int_equal(expected.elements, 300);
    eg_dataset_free(reference);
    int parallelism[] = {1, 2, 4, 7, EG_AUTOTUNE};
    for (size_t k = 0; k < sizeof parallelism / sizeof parallelism[0]; k++) {
        eg_dataset *ds =
            eg_dataset_map(eg_dataset_range(0, 300, 1), expand, NULL, parallelism[k], true);
        for (int pass = 0; pass < 2; pass++) {
            pass_bytes got = pass_of(ds);
            char what[64];
            snprintf(what, sizeof what, "parallelism %d, pass %d", parallelism[k], pass);
            assert_same_pass(&expected, &got, what);
            free(got.bytes);
        }
        eg_dataset_free(ds);
    }
    /* Prefetch buffers of every size keep the order too (the ring grows as it fills). */
    int buffers[] = {1, 5, 100, EG_AUTOTUNE};
    for (size_t k = 0; k < sizeof buffers / sizeof buffers[0]; k++) {
        eg_dataset *ds = eg_dataset_prefetch(
            eg_dataset_map(eg_dataset_range(0, 300, 1), expand, NULL, 0, true), buffers[k]);
        pass_bytes got = pass_of(ds);
        assert_same_pass(&expected, &got, "prefetch");
        free(got.bytes);
        eg_dataset_free(ds);
    }
    /* Unordered: the same elements, each once (a call's index still names its input). */
    eg_dataset *ds = eg_dataset_map(eg_dataset_range(0, 300, 1), expand, NULL, 4, false);
    eg_dataset_iterator *it = eg_dataset_iterator_new(ds);
    int seen[300] = {0};
    for (;;) {
        eg_scope_begin();
        eg_element e;
        bool end;
        assert_int_equal(eg_dataset_iterator_next(it, &e, &end), EG_OK);
        if (end) {
            eg_scope_end();
            break;
        }
        int64_t i = (int64_t)eg_item(e.tensors[1]);
        assert_true(i >= 0 && i < 300);
        seen[i]++;
        float first = *(const float *)eg_tensor_data(e.tensors[0]);
        assert_float_equal(first, i * 4 + i / 1000.0, 1e-4);
        eg_scope_end();
    }
    for (int i = 0; i < 300; i++) assert_int_equal(seen[i], 1);
    eg_dataset_iterator_free(it);
    eg_dataset_free(ds);
    free(expected.bytes);
}

/* ---- determinism of a whole training pipeline under parallelism ---- */

static eg_dataset *augmented_pipeline(eg_tensor *images, eg_tensor *labels, int parallelism,
                                      eg_image_flip_options *flip, eg_image_crop_options *crop) {
    eg_dataset *ds = eg_dataset_from_tensor_slices(2, (eg_tensor *[]){images, labels});
    ds = eg_dataset_shuffle(ds, 64, 1234, true);
    ds = eg_dataset_map(ds, eg_image_random_flip, flip, parallelism, true);
    ds = eg_dataset_map(ds, eg_image_random_crop, crop, parallelism, true);
    ds = eg_dataset_batch(ds, 16, false);
    return eg_dataset_prefetch(ds, parallelism == 1 ? 1 : EG_AUTOTUNE);
}

static void test_determinism(void **state) {
    (void)state;
    eg_generator *g = eg_generator_new(5);
    int64_t shape[3] = {200, 8, 8};
    eg_tensor *images = eg_cast(
        eg_mul_scalar(eg_random_uniform(g, EG_DTYPE_F32, 3, shape, 0, 1), 255), EG_DTYPE_U8);
    eg_tensor *labels = eg_arange(0, 200, 1, EG_DTYPE_I32);
    eg_generator_free(g);
    eg_image_flip_options flip = {.seed = 11, .probability = 0.5};
    eg_image_crop_options crop = {.seed = 12, .padding = 2};
    eg_dataset *one = augmented_pipeline(images, labels, 1, &flip, &crop);
    eg_dataset *four = augmented_pipeline(images, labels, 4, &flip, &crop);
    eg_dataset *tuned = augmented_pipeline(images, labels, EG_AUTOTUNE, &flip, &crop);
    pass_bytes first_one = {0};
    for (int epoch = 0; epoch < 3; epoch++) {
        pass_bytes a = pass_of(one), b = pass_of(four), c = pass_of(tuned);
        assert_int_equal(a.elements, 13);
        assert_same_pass(&a, &b, "1 vs 4 parallel calls");
        assert_same_pass(&a, &c, "1 vs AUTOTUNE parallel calls");
        if (epoch == 0)
            first_one = a;
        else {
            assert_true(a.size == first_one.size &&
                        memcmp(a.bytes, first_one.bytes, a.size) != 0); /* reshuffled */
            free(a.bytes);
        }
        free(b.bytes);
        free(c.bytes);
    }
    free(first_one.bytes);
    eg_dataset_free(one);
    eg_dataset_free(four);
    eg_dataset_free(tuned);
}

/* ---- early stop ---- */

static eg_status slow_identity(const eg_element *in, eg_element *out,
                               const eg_dataset_call_info *info, void *context) {
    (void)context;
    jitter(info->index + 7);
    *out = *in;
    return EG_OK;
}

static void test_early_stop(void **state) {
    (void)state;
    eg_debug_track_tensors(true);
    size_t before = eg_debug_live_tensors(NULL);
    for (int round = 0; round < 40; round++) {
        eg_dataset *ds = eg_dataset_repeat(eg_dataset_range(0, 50, 1), -1);
        ds = eg_dataset_map(ds, slow_identity, NULL, 1 + round % 4, round % 3 != 0);
        ds = eg_dataset_prefetch(ds, round % 2 ? EG_AUTOTUNE : 3);
        ds = eg_dataset_map(ds, slow_identity, NULL, round % 5 == 0 ? EG_AUTOTUNE : 2, true);
        ds = eg_dataset_batch(ds, 4, false);
        ds = eg_dataset_prefetch(ds, 2);
        eg_dataset_iterator *it = eg_dataset_iterator_new(ds);
        int steps = round % 4; /* 0: freed before any next */
        for (int i = 0; i < steps; i++) {
            eg_element e;
            bool end;
            assert_int_equal(eg_dataset_iterator_next(it, &e, &end), EG_OK);
            assert_false(end);
        }
        if (round % 2) eg_dataset_free(ds); /* the iterator keeps the dataset alive */
        eg_dataset_iterator_free(it);
        if (!(round % 2)) eg_dataset_free(ds);
    }
    eg_scope_end();
    eg_scope_begin();
    size_t after = eg_debug_live_tensors(NULL);
    if (after != before) {
        eg_debug_live_tensors(stderr);
        fail_msg("%zu tensors alive before, %zu after", before, after);
    }
    eg_debug_track_tensors(false);
}

/* ---- errors from other threads ---- */

static eg_status fail_at_13(const eg_element *in, eg_element *out, const eg_dataset_call_info *info,
                            void *context) {
    (void)context;
    jitter(info->index);
    if (info->index == 13) {
        eg_tensor *a = eg_zeros(EG_DTYPE_F32, 2, (int64_t[]){2, 3});
        return eg_matmul(a, a) ? EG_OK : eg_last_status();
    }
    *out = *in;
    return EG_OK;
}

typedef struct failing_source {
    int64_t fail_at;
} failing_source;

static eg_status failing_next(void *context, void *state, int64_t index, eg_element *out,
                              bool *end) {
    (void)state, (void)end;
    failing_source *s = context;
    if (index == s->fail_at) {
        return eg_tensor_dim(eg_scalar(EG_DTYPE_F32, 1), 3) < 0 ? eg_last_status() : EG_OK;
    }
    out->n_tensors = 1;
    out->tensors[0] = eg_scalar(EG_DTYPE_I64, (double)index);
    return EG_OK;
}

/* Iterates until the failure: the elements before it come in order. */
static void expect_failure_after(eg_dataset *ds, int64_t n_good, eg_status status,
                                 const char *message_start) {
    eg_dataset_iterator *it = eg_dataset_iterator_new(ds);
    for (int64_t i = 0; i < n_good; i++) {
        eg_scope_begin();
        eg_element e;
        bool end;
        if (eg_dataset_iterator_next(it, &e, &end) != EG_OK) fail_msg("%s", eg_last_error());
        assert_false(end);
        assert_true(eg_item(e.tensors[0]) == (double)i);
        eg_scope_end();
    }
    for (int repeat = 0; repeat < 2; repeat++) { /* the failure sticks */
        eg_element e;
        bool end;
        assert_int_equal(eg_dataset_iterator_next(it, &e, &end), status);
        assert_false(end);
        assert_int_equal(e.n_tensors, 0);
        const char *message = eg_last_error();
        if (strncmp(message, message_start, strlen(message_start)) != 0)
            fail_msg("error \"%s\" does not start with \"%s\"", message, message_start);
        eg_clear_error();
    }
    eg_dataset_iterator_free(it);
}

static void test_errors_across_threads(void **state) {
    (void)state;
    int parallelism[] = {1, 4, EG_AUTOTUNE};
    for (size_t k = 0; k < 3; k++) {
        eg_dataset *ds =
            eg_dataset_map(eg_dataset_range(0, 100, 1), fail_at_13, NULL, parallelism[k], true);
        expect_failure_after(ds, 13, EG_ERR_SHAPE,
                             "map: element 13: matmul: inner dimensions differ: (2, 3) x (2, 3) "
                             "at test_data_threads.c:");
        eg_dataset_free(ds);
        /* Behind a prefetch and a second map. */
        ds = eg_dataset_map(eg_dataset_range(0, 100, 1), fail_at_13, NULL, parallelism[k], true);
        ds = eg_dataset_map(eg_dataset_prefetch(ds, 4), slow_identity, NULL, 2, true);
        expect_failure_after(ds, 13, EG_ERR_SHAPE, "map: element 13: matmul:");
        eg_dataset_free(ds);
    }
    /* In the input of a parallel map and of a prefetch. */
    failing_source source = {.fail_at = 9};
    eg_dataset_generator generator = {.next = failing_next, .context = &source};
    eg_dataset *ds =
        eg_dataset_map(eg_dataset_from_generator(&generator), slow_identity, NULL, 3, true);
    ds = eg_dataset_prefetch(ds, EG_AUTOTUNE);
    expect_failure_after(ds, 9, EG_ERR_AXIS,
                         "generator: element 9: tensor_dim: axis 3 out of range");
    eg_dataset_free(ds);
    /* Unordered: the failure still comes, and nothing hangs. */
    ds = eg_dataset_map(eg_dataset_range(0, 100, 1), fail_at_13, NULL, 4, false);
    eg_dataset_iterator *it = eg_dataset_iterator_new(ds);
    eg_status status;
    int64_t good = 0;
    for (;;) {
        eg_scope_begin();
        eg_element e;
        bool end;
        status = eg_dataset_iterator_next(it, &e, &end);
        eg_scope_end();
        assert_false(end);
        if (status != EG_OK) break;
        good++;
    }
    assert_int_equal(status, EG_ERR_SHAPE);
    assert_true(good <= 99);
    eg_clear_error();
    eg_dataset_iterator_free(it);
    eg_dataset_free(ds);
}

/* ---- several iterators at once ---- */

typedef struct concurrent_run {
    eg_dataset *ds;
    pass_bytes result;
} concurrent_run;

static void *iterate_in_thread(void *arg) {
    concurrent_run *run = arg;
    eg_dataset_iterator *it = eg_dataset_iterator_new(run->ds);
    for (;;) {
        eg_scope_begin();
        eg_element e;
        bool end;
        eg_status status = eg_dataset_iterator_next(it, &e, &end);
        if (status != EG_OK || end) {
            eg_scope_end();
            break;
        }
        run->result.elements++;
        eg_scope_end();
    }
    eg_dataset_iterator_free(it);
    return NULL;
}

static void test_concurrent_iterators(void **state) {
    (void)state;
    eg_dataset *ds = eg_dataset_map(eg_dataset_range(0, 200, 1), expand, NULL, 3, true);
    ds = eg_dataset_prefetch(eg_dataset_batch(ds, 8, false), EG_AUTOTUNE);
    enum { THREADS = 3 };
    concurrent_run runs[THREADS];
    pthread_t threads[THREADS];
    for (int i = 0; i < THREADS; i++) {
        runs[i] = (concurrent_run){.ds = ds};
        assert_int_equal(pthread_create(&threads[i], NULL, iterate_in_thread, &runs[i]), 0);
    }
    for (int i = 0; i < THREADS; i++) {
        pthread_join(threads[i], NULL);
        assert_int_equal(runs[i].result.elements, 25);
    }
    eg_dataset_free(ds);
}

/* ---- nesting cannot exhaust the pool ---- */

static eg_status map_of_pipeline(const eg_element *in, eg_element *out,
                                 const eg_dataset_call_info *info, void *context) {
    (void)info, (void)context;
    /* A callback that itself runs a pipeline with a parallel map: its calls need pool threads
     * while this call holds one. */
    int64_t n = (int64_t)eg_item(in->tensors[0]) % 5 + 1;
    eg_dataset *inner = eg_dataset_range(0, n, 1);
    inner = eg_dataset_batch(eg_dataset_map(inner, slow_identity, NULL, 2, true), 8, false);
    eg_dataset_iterator *it = eg_dataset_iterator_new(inner);
    eg_element e;
    bool end;
    eg_status status = eg_dataset_iterator_next(it, &e, &end);
    eg_dataset_iterator_free(it);
    eg_dataset_free(inner);
    if (status != EG_OK) return status;
    out->n_tensors = 2;
    out->tensors[0] = in->tensors[0];
    out->tensors[1] = e.tensors[0];
    return EG_OK;
}

static void test_nested_parallel_stages(void **state) {
    (void)state;
    eg_dataset *ds = eg_dataset_range(0, 300, 1);
    for (int level = 0; level < 6; level++)
        ds = eg_dataset_map(ds, level % 2 ? slow_identity : map_of_pipeline, NULL, 2 + level % 3,
                            level != 3);
    ds = eg_dataset_map(eg_dataset_prefetch(ds, 2), slow_identity, NULL, EG_AUTOTUNE, true);
    pass_bytes p = pass_of(ds);
    assert_int_equal(p.elements, 300);
    free(p.bytes);
    eg_dataset_free(ds);
}

/* ---- AUTOTUNE ---- */

/* About `us` microseconds of CPU work. */
static void burn_cpu(int64_t us) {
    struct timespec start, now;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &start);
    volatile uint64_t x = 0;
    do {
        for (int i = 0; i < 200; i++) x = x * 6364136223846793005ull + 1;
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
    } while ((now.tv_sec - start.tv_sec) * 1000000 + (now.tv_nsec - start.tv_nsec) / 1000 < us);
}

static eg_status expensive(const eg_element *in, eg_element *out, const eg_dataset_call_info *info,
                           void *context) {
    (void)info, (void)context;
    burn_cpu(200);
    *out = *in;
    return EG_OK;
}

static void test_autotune(void **state) {
    (void)state;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    eg_dataset *ds =
        eg_dataset_map(eg_dataset_range(0, 3000, 1), expensive, NULL, EG_AUTOTUNE, true);
    ds = eg_dataset_prefetch(ds, EG_AUTOTUNE);
    eg_dataset_iterator *it = eg_dataset_iterator_new(ds);
    int changes = 0, last = 0, chosen = 0;
    for (int64_t i = 0;; i++) {
        eg_scope_begin();
        eg_element e;
        bool end;
        assert_int_equal(eg_dataset_iterator_next(it, &e, &end), EG_OK);
        eg_scope_end();
        if (end) break;
        eg_dataset_stage_stats stats[2];
        assert_int_equal(eg_dataset_stats(it, stats, 2), 3);
        int parallelism = stats[1].parallelism;
        assert_true(parallelism >= 1 && parallelism <= cores);
        assert_true(stats[0].buffer_size >= 1 && stats[0].buffer_size <= 64);
        if (last && parallelism != last) changes++;
        last = parallelism;
        chosen = parallelism;
    }
    /* A fast consumer of an expensive map: as many calls as cores, reached and kept. */
    assert_true(changes <= 3);
    if (cores >= 2) assert_true(chosen >= 2);
    eg_dataset_stage_stats stats[3];
    assert_int_equal(eg_dataset_stats(it, stats, 3), 3);
    assert_true(stats[1].autotuned && stats[0].autotuned);
    assert_true(stats[1].call_cpu_seconds > 150e-6);
    eg_dataset_iterator_free(it);
    eg_dataset_free(ds);

    /* A CPU budget of 1 holds the map at one call. */
    eg_dataset_options options = {.cpu_budget = 1};
    ds = eg_dataset_with_options(
        eg_dataset_map(eg_dataset_range(0, 400, 1), expensive, NULL, EG_AUTOTUNE, true), &options);
    it = eg_dataset_iterator_new(ds);
    pass_bytes p = run_pass(it);
    free(p.bytes);
    assert_int_equal(eg_dataset_stats(it, stats, 3), 2);
    assert_int_equal(stats[0].parallelism, 1);
    eg_dataset_iterator_free(it);
    eg_dataset_free(ds);
}

/* Under a host memory limit AUTOTUNE stages run on the consumer's thread: no parallel calls and no
 * prefetch buffer however fast or slow the consumer is, so the memory the pipeline holds (and
 * where its segments lie) does not depend on timing. */
static void test_autotune_under_a_memory_limit(void **state) {
    (void)state;
    assert_int_equal(eg_memory_set_limit(NULL, (size_t)1 << 30), EG_OK);
    eg_dataset_options options = {.cpu_budget = 2};
    for (int slow = 0; slow < 2; slow++) {
        eg_dataset *ds =
            eg_dataset_map(eg_dataset_range(0, 200, 1), expensive, NULL, EG_AUTOTUNE, true);
        ds = eg_dataset_prefetch(eg_dataset_with_options(ds, &options), EG_AUTOTUNE);
        eg_dataset_iterator *it = eg_dataset_iterator_new(ds);
        for (;;) {
            eg_scope_begin();
            eg_element e;
            bool end;
            assert_int_equal(eg_dataset_iterator_next(it, &e, &end), EG_OK);
            eg_scope_end();
            if (end) break;
            if (slow) burn_cpu(300); /* a consumer slower than the map: prefetch would grow */
            eg_dataset_stage_stats stats[3];
            int n = eg_dataset_stats(it, stats, 3);
            assert_true(n >= 2);
            for (int k = 0; k < n && k < 3; k++) {
                assert_int_equal(stats[k].buffer_size, 0);
                assert_int_equal(stats[k].parallelism, 0);
            }
        }
        eg_dataset_iterator_free(it);
        eg_dataset_free(ds);
    }
    assert_int_equal(eg_memory_set_limit(NULL, 0), EG_OK);
}

int main(void) {
    const struct CMUnitTest tests[] = {
#define CASE(name) cmocka_unit_test_setup_teardown(name, fresh_scope_setup, case_teardown)
        CASE(test_parallel_map_order),
        CASE(test_determinism),
        CASE(test_early_stop),
        CASE(test_errors_across_threads),
        CASE(test_concurrent_iterators),
        CASE(test_nested_parallel_stages),
        CASE(test_autotune),
        CASE(test_autotune_under_a_memory_limit),
#undef CASE
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
