/* The allocator's per-thread caches and the per-thread tensor-header cache: reuse without the
 * mutex, exact statistics (peak included), double frees still caught, every cache emptied by
 * trim, by a limit, by a request that would otherwise fail, at thread exit and on destroy, and
 * cached memory poisoned under AddressSanitizer. tests/test_allocator.c also runs its
 * differential, trim and concurrency tests with the caches on. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "core/tensor_internal.h"
#include "eagle.h"
#include "mem/allocator.h"

#define KIB ((size_t)1 << 10)
#define MIB ((size_t)1 << 20)

/* Whether memory is poisoned; in builds without AddressSanitizer both checks pass. */
#ifdef EG__ASAN
#define POISONED(pointer)     (__asan_address_is_poisoned(pointer) != 0)
#define NOT_POISONED(pointer) (__asan_address_is_poisoned(pointer) == 0)
#else
#define POISONED(pointer)     ((void)(pointer), true)
#define NOT_POISONED(pointer) ((void)(pointer), true)
#endif

/* ---- a raw allocator that counts (called under the allocator's mutex) -------------------- */

typedef struct counting_raw {
    size_t n_allocs, n_frees, live_bytes;
} counting_raw;

static void *counting_alloc(void *context, size_t bytes) {
    counting_raw *raw = context;
    void *pointer = aligned_alloc(64, bytes);
    if (!pointer) return NULL;
    raw->n_allocs++;
    raw->live_bytes += bytes;
    return pointer;
}

static void counting_free(void *context, void *pointer, size_t bytes) {
    counting_raw *raw = context;
    raw->n_frees++;
    raw->live_bytes -= bytes;
    free(pointer);
}

typedef struct fixture {
    counting_raw raw;
    eg__allocator *allocator;
} fixture;

static int setup(void **state) {
    eg_clear_error();
    fixture *f = calloc(1, sizeof *f);
    assert_non_null(f);
    f->allocator = eg__allocator_create((eg__raw_allocator){.alloc = counting_alloc, .free = counting_free, .context = &f->raw},
                                        EG__ALLOCATOR_CACHING, "cpu");
    assert_non_null(f->allocator);
    eg__allocator_enable_thread_caches(f->allocator, true);
    *state = f;
    return 0;
}

static int teardown(void **state) {
    fixture *f = *state;
    eg__allocator_destroy(f->allocator);
    assert_int_equal(f->raw.live_bytes, 0);
    assert_int_equal(f->raw.n_allocs, f->raw.n_frees);
    free(f);
    eg_clear_error();
    return 0;
}

static eg_memory_stats stats_of(fixture *f) {
    eg_memory_stats stats;
    eg__allocator_stats(f->allocator, &stats);
    return stats;
}

static char *alloc_ok(fixture *f, size_t bytes, void **handle) {
    char *pointer = eg__allocator_alloc(f->allocator, bytes, handle);
    assert_non_null(pointer);
    assert_int_equal((uintptr_t)pointer % 64, 0);
    return pointer;
}

/* ---- single thread ----------------------------------------------------------------------- */

static void test_reuse_and_stats(void **state) {
    fixture *f = *state;
    void *h;
    char *first = alloc_ok(f, 100, &h);
    memset(first, 1, 100);
    eg__allocator_free(f->allocator, h);
    assert_true(POISONED(first)); /* cached: a use after free is still reported */
    eg_memory_stats stats = stats_of(f);
    assert_int_equal(stats.bytes_in_use, 0);
    assert_int_equal(stats.bytes_cached, stats.bytes_reserved);
    assert_int_equal(stats.n_frees, 1);
    for (int i = 0; i < 1000; i++) {
        assert_ptr_equal(alloc_ok(f, 65 + (size_t)(i % 63), &h), first); /* the 128-byte class */
        assert_true(NOT_POISONED(first));
        memset(first, 2, 128);
        eg__allocator_free(f->allocator, h);
    }
    stats = stats_of(f);
    assert_int_equal(stats.n_allocs, 1001);
    assert_int_equal(stats.n_frees, 1001);
    assert_int_equal(stats.n_cache_hits, 1000);
    assert_int_equal(stats.n_system_allocs, 1);
    assert_int_equal(stats.bytes_in_use, 0);
    assert_int_equal(stats.peak_bytes_in_use, 128);
    assert_false(eg__error_pending());
}

/* A block taken from the cache can raise the peak: it is tracked exactly. */
static void test_peak_is_exact(void **state) {
    fixture *f = *state;
    void *a, *b, *c;
    alloc_ok(f, KIB, &a);
    eg__allocator_free(f->allocator, a); /* cached */
    alloc_ok(f, 2 * KIB, &b);            /* from the bins */
    alloc_ok(f, KIB, &c);                /* from the cache */
    eg_memory_stats stats = stats_of(f);
    assert_int_equal(stats.bytes_in_use, 3 * KIB);
    assert_int_equal(stats.peak_bytes_in_use, 3 * KIB);
    eg__allocator_free(f->allocator, c);
    eg__allocator_reset_peak(f->allocator);
    assert_int_equal(stats_of(f).peak_bytes_in_use, 2 * KIB);
    eg__allocator_free(f->allocator, b);
    stats = stats_of(f);
    assert_int_equal(stats.bytes_in_use, 0);
    assert_int_equal(stats.peak_bytes_in_use, 2 * KIB);
}

static void test_double_free_of_cached_block(void **state) {
    fixture *f = *state;
    void *h;
    alloc_ok(f, 256, &h);
    eg__allocator_free(f->allocator, h);
    eg_memory_stats before = stats_of(f);
    eg__allocator_free(f->allocator, h);
    assert_int_equal(eg_last_status(), EG_ERR_INTERNAL);
    assert_non_null(strstr(eg_last_error(), "freed twice"));
    eg_clear_error();
    eg_memory_stats after = stats_of(f);
    assert_int_equal(after.n_frees, before.n_frees);
    assert_int_equal(after.bytes_in_use, 0);
    /* the block is handed out once, not twice */
    void *x, *y;
    char *px = alloc_ok(f, 256, &x), *py = alloc_ok(f, 256, &y);
    assert_ptr_not_equal(px, py);
    eg__allocator_free(f->allocator, x);
    eg__allocator_free(f->allocator, y);
}

/* Large blocks and blocks beyond a class's two slots go back to the bins (and merge). */
static void test_only_small_blocks_are_cached(void **state) {
    fixture *f = *state;
    void *big, *small[8];
    alloc_ok(f, 64 * KIB, &big); /* the segment: [big][small 0..7][rest] */
    for (int i = 0; i < 8; i++) alloc_ok(f, 512, &small[i]);
    eg__allocator_free(f->allocator, big);
    assert_int_equal(stats_of(f).largest_free_block, 2 * MIB - 64 * KIB - 8 * 512);
    for (int i = 0; i < 8; i++) eg__allocator_free(f->allocator, small[i]);
    eg_memory_stats stats = stats_of(f);
    /* small 0 and 1 are cached; 2..7 merged with the rest of the segment */
    assert_int_equal(stats.largest_free_block, 2 * MIB - 64 * KIB - 2 * 512);
    assert_int_equal(stats.bytes_in_use, 0);
    assert_int_equal(stats.bytes_cached, 2 * MIB);
}

static void test_trim_and_limit_empty_the_cache(void **state) {
    fixture *f = *state;
    void *h;
    alloc_ok(f, 64, &h);
    eg__allocator_free(f->allocator, h);
    assert_int_equal(stats_of(f).bytes_reserved, 2 * MIB);
    assert_int_equal(eg__allocator_trim(f->allocator), EG_OK);
    assert_int_equal(stats_of(f).bytes_reserved, 0);
    assert_int_equal(f->raw.live_bytes, 0);

    /* A limit that only fits once the cached block's segment is released. */
    alloc_ok(f, 64, &h);
    eg__allocator_free(f->allocator, h);
    assert_int_equal(eg__allocator_set_limit(f->allocator, 4 * MIB), EG_OK);
    void *large;
    alloc_ok(f, 3 * MIB, &large); /* needs the first segment trimmed */
    assert_int_equal(stats_of(f).bytes_reserved, 4 * MIB);
    eg__allocator_free(f->allocator, large);
    assert_int_equal(eg__allocator_set_limit(f->allocator, 0), EG_OK);
    /* a lower limit trims what it can, the caches included */
    alloc_ok(f, 64, &h);
    eg__allocator_free(f->allocator, h);
    assert_int_equal(eg__allocator_set_limit(f->allocator, MIB), EG_OK);
    assert_int_equal(stats_of(f).bytes_reserved, 0);
    assert_int_equal(eg__allocator_set_limit(f->allocator, 0), EG_OK);
}

/* ---- other threads ----------------------------------------------------------------------- */

typedef struct worker {
    fixture *f;
    pthread_barrier_t *cached, *go_on;
    size_t n_errors;
} worker;

/* Allocates and frees small blocks (which stay in its cache), waits while the main thread
 * acts, then does it again and exits. */
static void *worker_main(void *argument) {
    worker *w = argument;
    for (int round = 0; round < 2; round++) {
        void *handles[16];
        for (int i = 0; i < 16; i++) {
            char *p = eg__allocator_alloc(w->f->allocator, 64 * (size_t)(i + 1), &handles[i]);
            if (!p) {
                w->n_errors++;
                handles[i] = NULL;
                continue;
            }
            memset(p, i, 64 * (size_t)(i + 1));
        }
        for (int i = 0; i < 16; i++) eg__allocator_free(w->f->allocator, handles[i]);
        if (round == 0) {
            pthread_barrier_wait(w->cached);
            pthread_barrier_wait(w->go_on);
        }
    }
    return NULL;
}

/* Trim from another thread empties a live thread's cache; its exit empties it again. */
static void test_trim_empties_other_threads(void **state) {
    fixture *f = *state;
    pthread_barrier_t cached, go_on;
    pthread_barrier_init(&cached, NULL, 2);
    pthread_barrier_init(&go_on, NULL, 2);
    worker w = {f, &cached, &go_on, 0};
    pthread_t thread;
    assert_int_equal(pthread_create(&thread, NULL, worker_main, &w), 0);
    pthread_barrier_wait(&cached);
    eg_memory_stats stats = stats_of(f);
    assert_int_equal(stats.n_allocs, 16);
    assert_int_equal(stats.n_frees, 16);
    assert_int_equal(stats.bytes_in_use, 0);
    assert_int_equal(eg__allocator_trim(f->allocator), EG_OK);
    assert_int_equal(stats_of(f).bytes_reserved, 0);
    pthread_barrier_wait(&go_on);
    assert_int_equal(pthread_join(thread, NULL), 0);
    assert_int_equal(w.n_errors, 0);
    stats = stats_of(f);
    assert_int_equal(stats.n_allocs, 32); /* the exited thread's counts are kept */
    assert_int_equal(stats.n_frees, 32);
    assert_int_equal(stats.bytes_in_use, 0);
    /* its cache went back at exit: the whole segment is free again */
    assert_int_equal(stats.largest_free_block, stats.bytes_reserved);
    assert_int_equal(eg__allocator_trim(f->allocator), EG_OK);
    assert_int_equal(stats_of(f).bytes_reserved, 0);
    pthread_barrier_destroy(&cached);
    pthread_barrier_destroy(&go_on);
}

/* Destroying an allocator while another thread still holds a cache of it; that thread then
 * uses a new allocator and exits cleanly. */
static void *second_worker(void *argument) {
    worker *w = argument;
    void *h;
    if (!eg__allocator_alloc(w->f->allocator, 128, &h)) w->n_errors++;
    eg__allocator_free(w->f->allocator, h);
    pthread_barrier_wait(w->cached);
    pthread_barrier_wait(w->go_on); /* the main thread replaced the allocator meanwhile */
    for (int i = 0; i < 100; i++) {
        if (!eg__allocator_alloc(w->f->allocator, 128, &h)) w->n_errors++;
        eg__allocator_free(w->f->allocator, h);
    }
    return NULL;
}

static void test_destroy_with_live_thread_caches(void **state) {
    fixture *f = *state;
    pthread_barrier_t cached, go_on;
    pthread_barrier_init(&cached, NULL, 2);
    pthread_barrier_init(&go_on, NULL, 2);
    worker w = {f, &cached, &go_on, 0};
    pthread_t thread;
    assert_int_equal(pthread_create(&thread, NULL, second_worker, &w), 0);
    pthread_barrier_wait(&cached);
    eg__allocator_destroy(f->allocator);
    assert_int_equal(f->raw.live_bytes, 0);
    f->allocator = eg__allocator_create((eg__raw_allocator){.alloc = counting_alloc, .free = counting_free, .context = &f->raw},
                                        EG__ALLOCATOR_CACHING, "cpu");
    eg__allocator_enable_thread_caches(f->allocator, true);
    pthread_barrier_wait(&go_on);
    assert_int_equal(pthread_join(thread, NULL), 0);
    assert_int_equal(w.n_errors, 0);
    eg_memory_stats stats = stats_of(f);
    assert_int_equal(stats.n_allocs, 100);
    assert_int_equal(stats.n_cache_hits, 99);
    assert_int_equal(stats.bytes_in_use, 0);
    pthread_barrier_destroy(&cached);
    pthread_barrier_destroy(&go_on);
}

/* A thread may keep caches of several allocators; past four the oldest is given back. */
static void test_many_allocators_per_thread(void **state) {
    (void)state;
    enum { N = 7 };
    counting_raw raws[N] = {{0}};
    eg__allocator *allocators[N];
    for (int i = 0; i < N; i++) {
        allocators[i] =
            eg__allocator_create((eg__raw_allocator){.alloc = counting_alloc, .free = counting_free, .context = &raws[i]},
                                 EG__ALLOCATOR_CACHING, "cpu");
        eg__allocator_enable_thread_caches(allocators[i], true);
    }
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < N; i++) {
            void *h;
            assert_non_null(eg__allocator_alloc(allocators[i], 64 * (size_t)(i + 1), &h));
            eg__allocator_free(allocators[i], h);
        }
    }
    for (int i = 0; i < N; i++) {
        eg_memory_stats stats;
        eg__allocator_stats(allocators[i], &stats);
        assert_int_equal(stats.n_allocs, 3);
        assert_int_equal(stats.n_frees, 3);
        assert_int_equal(stats.bytes_in_use, 0);
        eg__allocator_trim(allocators[i]);
        eg__allocator_stats(allocators[i], &stats);
        assert_int_equal(stats.bytes_reserved, 0);
        eg__allocator_destroy(allocators[i]);
        assert_int_equal(raws[i].live_bytes, 0);
    }
}

/* ---- tensors: the CPU allocator's cache and the header cache ----------------------------- */

static void test_tensors_reuse_memory(void **state) {
    (void)state;
    int64_t n = 16;
    eg_tensor *a = eg_ones(EG_DTYPE_F32, 1, &n), *b = eg_ones(EG_DTYPE_F32, 1, &n);
    eg_tensor *sum = eg_add(a, b);
    assert_non_null(sum);
    const float *data = eg_tensor_data(sum);
    eg_tensor *header = sum;
    eg_release(sum);
    assert_true(POISONED(data));   /* the data block sits in the allocator's thread cache */
    assert_true(POISONED(header)); /* the header block in the tensor-header cache */
    eg_memory_stats before;
    eg_memory_stats_get(NULL, &before);
    for (int i = 0; i < 100; i++) {
        sum = eg_add(a, b);
        assert_ptr_equal(eg_tensor_data(sum), data);
        assert_true(eg_tensor_get(sum, (int64_t[]){3}) == 2.0);
        eg_release(sum);
    }
    eg_memory_stats after;
    eg_memory_stats_get(NULL, &after);
    assert_int_equal(after.n_system_allocs, before.n_system_allocs);
    assert_int_equal(after.n_allocs - before.n_allocs, 100);
    assert_int_equal(after.n_cache_hits - before.n_cache_hits, 100);
    assert_int_equal(after.bytes_in_use, before.bytes_in_use);
    eg_release(a);
    eg_release(b);
    assert_false(eg__error_pending());
}

static atomic_int tensor_worker_errors;

static void *tensor_worker(void *argument) {
    eg_tensor *shared = argument;
    for (int i = 0; i < 200; i++) {
        eg_scope_begin();
        eg_tensor *y = eg_mul(shared, shared);
        if (!y || eg_tensor_get(y, (int64_t[]){7}) != 4.0)
            atomic_fetch_add(&tensor_worker_errors, 1);
        eg_scope_end();
    }
    return NULL;
}

/* Tensors made and freed on several threads; headers freed on another thread than the one
 * that made them; every cache emptied at exit (the sanitizer builds see any leak). */
static void test_tensors_across_threads(void **state) {
    (void)state;
    int64_t n = 8;
    eg_tensor *two = eg_full(EG_DTYPE_F32, 1, &n, 2.0);
    pthread_t threads[3];
    for (int i = 0; i < 3; i++)
        assert_int_equal(pthread_create(&threads[i], NULL, tensor_worker, two), 0);
    eg_tensor *made_here = eg_add(two, two);
    for (int i = 0; i < 3; i++) assert_int_equal(pthread_join(threads[i], NULL), 0);
    assert_int_equal(atomic_load(&tensor_worker_errors), 0);
    assert_false(eg__error_pending());
    eg_release(made_here);
    eg_release(two);
    eg_memory_stats stats;
    assert_int_equal(eg_memory_trim(NULL), EG_OK);
    eg_memory_stats_get(NULL, &stats);
    assert_int_equal(stats.bytes_in_use, 0);
    assert_int_equal(stats.bytes_reserved, 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_reuse_and_stats, setup, teardown),
        cmocka_unit_test_setup_teardown(test_peak_is_exact, setup, teardown),
        cmocka_unit_test_setup_teardown(test_double_free_of_cached_block, setup, teardown),
        cmocka_unit_test_setup_teardown(test_only_small_blocks_are_cached, setup, teardown),
        cmocka_unit_test_setup_teardown(test_trim_and_limit_empty_the_cache, setup, teardown),
        cmocka_unit_test_setup_teardown(test_trim_empties_other_threads, setup, teardown),
        cmocka_unit_test_setup_teardown(test_destroy_with_live_thread_caches, setup, teardown),
        cmocka_unit_test(test_many_allocators_per_thread),
        cmocka_unit_test(test_tensors_reuse_memory),
        cmocka_unit_test(test_tensors_across_threads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
