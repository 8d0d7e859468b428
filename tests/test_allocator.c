/* The caching allocator against a counting raw allocator: splitting, coalescing, statistics,
 * reserve/trim/limit, the system kind, a long random run checked against a reference model, and
 * concurrent use (for TSan). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "mem/allocator.h"

#define KIB ((size_t)1 << 10)
#define MIB ((size_t)1 << 20)
#define GIB ((size_t)1 << 30)

/* ---- a raw allocator that counts, checks sizes and can be told to fail ------------------- */

typedef struct raw_region {
    char *pointer;
    size_t bytes;
} raw_region;

typedef struct counting_raw {
    size_t n_allocs, n_frees, live_bytes;
    size_t n_bad_calls; /* misaligned sizes, unknown pointers, size mismatches on free */
    bool fail;          /* every alloc returns NULL while set */
    raw_region *regions;
    size_t n_regions, capacity;
} counting_raw;

/* The allocator calls these under its own mutex, so no locking is needed here. */
static void *counting_alloc(void *context, size_t bytes) {
    counting_raw *raw = context;
    /* Past 1 TiB a system "has none": sanitizers would rather abort than return NULL. */
    if (raw->fail || bytes > ((size_t)1 << 40)) return NULL;
    if (bytes == 0 || bytes % 64 != 0) raw->n_bad_calls++;
    if (raw->n_regions == raw->capacity) {
        size_t capacity = raw->capacity ? raw->capacity * 2 : 64;
        raw_region *regions = realloc(raw->regions, capacity * sizeof *regions);
        if (!regions) return NULL;
        raw->regions = regions;
        raw->capacity = capacity;
    }
    char *pointer = aligned_alloc(64, bytes);
    if (!pointer) return NULL;
    raw->regions[raw->n_regions++] = (raw_region){pointer, bytes};
    raw->n_allocs++;
    raw->live_bytes += bytes;
    return pointer;
}

static void counting_free(void *context, void *pointer, size_t bytes) {
    counting_raw *raw = context;
    for (size_t i = 0; i < raw->n_regions; i++) {
        if (raw->regions[i].pointer != pointer) continue;
        if (raw->regions[i].bytes != bytes) raw->n_bad_calls++;
        raw->live_bytes -= raw->regions[i].bytes;
        raw->regions[i] = raw->regions[--raw->n_regions];
        raw->n_frees++;
        free(pointer);
        return;
    }
    raw->n_bad_calls++;
}

/* True when [pointer, pointer + bytes) lies inside one region the raw allocator handed out. */
static bool raw_owns(const counting_raw *raw, const char *pointer, size_t bytes) {
    for (size_t i = 0; i < raw->n_regions; i++) {
        const raw_region *r = &raw->regions[i];
        if (pointer >= r->pointer && pointer + bytes <= r->pointer + r->bytes) return true;
    }
    return false;
}

typedef struct fixture {
    counting_raw raw;
    eg__allocator *allocator;
} fixture;

static fixture *fixture_new(eg__allocator_kind kind) {
    fixture *f = calloc(1, sizeof *f);
    assert_non_null(f);
    eg__raw_allocator raw = {.alloc = counting_alloc, .free = counting_free, .context = &f->raw};
    f->allocator = eg__allocator_create(raw, kind, "cpu");
    assert_non_null(f->allocator);
    return f;
}

/* Destroys the allocator and checks that every raw call was well formed and paired. */
static void fixture_free(fixture *f) {
    eg__allocator_destroy(f->allocator);
    assert_int_equal(f->raw.live_bytes, 0);
    assert_int_equal(f->raw.n_allocs, f->raw.n_frees);
    assert_int_equal(f->raw.n_bad_calls, 0);
    free(f->raw.regions);
    free(f);
}

static int setup(void **state) {
    eg_clear_error();
    *state = fixture_new(EG__ALLOCATOR_CACHING);
    return 0;
}

/* The same allocator with per-thread caches in front (as the CPU device has it). */
static int setup_cached(void **state) {
    eg_clear_error();
    fixture *f = fixture_new(EG__ALLOCATOR_CACHING);
    eg__allocator_enable_thread_caches(f->allocator, true);
    *state = f;
    return 0;
}

static int setup_system(void **state) {
    eg_clear_error();
    *state = fixture_new(EG__ALLOCATOR_SYSTEM);
    return 0;
}

static int teardown(void **state) {
    fixture_free(*state);
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
    assert_non_null(*handle);
    assert_int_equal((uintptr_t)pointer % 64, 0);
    return pointer;
}

/* ---- unit tests -------------------------------------------------------------------------- */

static void test_alignment_and_rounding(void **state) {
    fixture *f = *state;
    static const size_t sizes[] = {0,   1,    63,   64,       65,      100, 511,
                                   512, 1000, 4096, 65 * KIB, MIB - 1, MIB, 3 * MIB + 5};
    enum { N = sizeof sizes / sizeof sizes[0] };
    void *handles[N];
    size_t expected = 0;
    for (size_t i = 0; i < N; i++) {
        char *pointer = alloc_ok(f, sizes[i], &handles[i]);
        size_t rounded = sizes[i] ? (sizes[i] + 63) / 64 * 64 : 64;
        memset(pointer, 0xab, sizes[i] ? sizes[i] : 64); /* alloc(0) still owns 64 bytes */
        expected += rounded;
        assert_int_equal(stats_of(f).bytes_in_use, expected);
    }
    for (size_t i = 0; i < N; i++) eg__allocator_free(f->allocator, handles[i]);
    eg_memory_stats stats = stats_of(f);
    assert_int_equal(stats.bytes_in_use, 0);
    assert_int_equal(stats.peak_bytes_in_use, expected);
    assert_int_equal(stats.bytes_cached, stats.bytes_reserved);
    assert_int_equal(stats.n_allocs, N);
    assert_int_equal(stats.n_frees, N);
    assert_false(eg__error_pending());
}

/* The GPU allocator's rounding (512 bytes, like PyTorch's CUDA allocator): every request is
 * rounded up to 512, blocks of nearby sizes are then the same block, and 2 MiB segments still
 * carry small requests. */
static void test_rounding_512(void **state) {
    fixture *f = *state;
    assert_int_equal(eg__allocator_set_rounding(f->allocator, 512), EG_OK);
    static const size_t sizes[] = {0, 1, 511, 512, 513, 4000, MIB - 1};
    enum { N = sizeof sizes / sizeof sizes[0] };
    void *handles[N];
    size_t expected = 0;
    char *base = NULL; /* the segment's start (the raw memory is only 64-byte aligned here) */
    for (size_t i = 0; i < N; i++) {
        char *pointer = alloc_ok(f, sizes[i], &handles[i]);
        if (!base) base = pointer;
        assert_int_equal((size_t)(pointer - base) % 512, 0);
        expected += sizes[i] ? (sizes[i] + 511) / 512 * 512 : 512;
        assert_int_equal(stats_of(f).bytes_in_use, expected);
    }
    assert_int_equal(stats_of(f).bytes_reserved, 2 * MIB); /* all small: one segment */
    for (size_t i = 0; i < N; i++) eg__allocator_free(f->allocator, handles[i]);
    /* 600 and 1000 bytes both take a 1024-byte block: the second reuses the first's. */
    void *h;
    char *first = alloc_ok(f, 600, &h);
    eg__allocator_free(f->allocator, h);
    assert_ptr_equal(alloc_ok(f, 1000, &h), first);
    eg__allocator_free(f->allocator, h);
    assert_int_equal(eg__allocator_set_rounding(f->allocator, 100), EG_ERR_INVALID_ARGUMENT);
    assert_int_equal(eg__allocator_set_rounding(f->allocator, 32), EG_ERR_INVALID_ARGUMENT);
    eg_clear_error();
}

/* What the memory's owner says is free (a GPU driver's cudaMemGetInfo) ends the
 * out-of-memory message. */
static void describe_free_memory(void *context, char *out, size_t size) {
    (void)context;
    snprintf(out, size, "the driver reports 1.50 GiB free of 80.0 GiB");
}

static void test_oom_names_owner_free_memory(void **state) {
    (void)state;
    counting_raw raw = {0};
    eg__raw_allocator source = {.alloc = counting_alloc, .free = counting_free, .context = &raw,
                                .describe_free = describe_free_memory};
    eg__allocator *a = eg__allocator_create(source, EG__ALLOCATOR_CACHING, "cuda:0");
    assert_non_null(a);
    assert_int_equal(eg__allocator_set_limit(a, 4 * MIB), EG_OK);
    void *handle;
    assert_null(eg__allocator_alloc(a, 8 * MIB, &handle));
    assert_int_equal(eg_last_status(), EG_ERR_OUT_OF_MEMORY);
    const char *message = eg_last_error();
    assert_non_null(strstr(message, "out of memory on cuda:0: requested 8.00 MiB"));
    assert_non_null(
        strstr(message, "(the memory limit would be exceeded; the driver reports 1.50 GiB free "
                        "of 80.0 GiB)"));
    eg_clear_error();
    eg__allocator_destroy(a);
    assert_int_equal(raw.n_allocs, raw.n_frees);
    free(raw.regions);
}

static void test_split(void **state) {
    fixture *f = *state;
    void *h1, *h2;
    char *p1 = alloc_ok(f, 1000, &h1);
    eg_memory_stats stats = stats_of(f);
    assert_int_equal(stats.n_system_allocs, 1);
    assert_int_equal(stats.bytes_reserved, 2 * MIB); /* small requests share a 2 MiB segment */
    assert_int_equal(stats.bytes_in_use, 1024);
    assert_int_equal(stats.largest_free_block, 2 * MIB - 1024);
    assert_int_equal(stats.n_cache_hits, 0);

    char *p2 = alloc_ok(f, 4096, &h2);
    assert_ptr_equal(p2, p1 + 1024); /* cut from the remainder right after the first block */
    stats = stats_of(f);
    assert_int_equal(stats.n_system_allocs, 1);
    assert_int_equal(stats.n_cache_hits, 1);
    assert_int_equal(stats.largest_free_block, 2 * MIB - 1024 - 4096);

    /* A remainder under 512 bytes stays with the block: no free sliver appears. */
    eg__allocator_free(f->allocator, h2);
    void *h3, *h4;
    alloc_ok(f, 2 * MIB - 1024 - 448, &h3);
    stats = stats_of(f);
    assert_int_equal(stats.largest_free_block, 0);
    assert_int_equal(stats.bytes_cached, 448); /* the slack is cached, not in use */
    alloc_ok(f, 64, &h4);
    assert_int_equal(stats_of(f).n_system_allocs, 2);
    eg__allocator_free(f->allocator, h1);
    eg__allocator_free(f->allocator, h3);
    eg__allocator_free(f->allocator, h4);
}

static void test_large_request_segment(void **state) {
    fixture *f = *state;
    void *h1, *h2;
    alloc_ok(f, 3 * MIB, &h1);
    eg_memory_stats stats = stats_of(f);
    assert_int_equal(stats.bytes_reserved, 4 * MIB); /* rounded up to a 2 MiB multiple */
    assert_int_equal(stats.largest_free_block, MIB);
    alloc_ok(f, MIB, &h2); /* the tail serves it */
    stats = stats_of(f);
    assert_int_equal(stats.n_system_allocs, 1);
    assert_int_equal(stats.n_cache_hits, 1);
    assert_int_equal(stats.bytes_cached, 0);
    eg__allocator_free(f->allocator, h1);
    eg__allocator_free(f->allocator, h2);
    assert_int_equal(stats_of(f).largest_free_block, 4 * MIB);
}

static void test_coalesce(void **state) {
    fixture *f = *state;
    void *ha, *hb, *hc;
    char *a = alloc_ok(f, 64 * KIB, &ha);
    char *b = alloc_ok(f, 64 * KIB, &hb);
    alloc_ok(f, 2 * MIB - 128 * KIB, &hc); /* fills the segment: no other free block */
    assert_ptr_equal(b, a + 64 * KIB);
    assert_int_equal(stats_of(f).largest_free_block, 0);

    eg__allocator_free(f->allocator, ha);
    assert_int_equal(stats_of(f).largest_free_block, 64 * KIB);
    eg__allocator_free(f->allocator, hb);
    eg_memory_stats stats = stats_of(f);
    assert_int_equal(stats.largest_free_block, 128 * KIB); /* the two neighbours merged */
    assert_true(stats.fragmentation == 0.0);

    void *hd;
    char *d = alloc_ok(f, 128 * KIB, &hd);
    assert_ptr_equal(d, a);
    assert_int_equal(stats_of(f).n_system_allocs, 1);

    /* Merging on both sides at once: free the outer blocks, then the middle one. */
    eg__allocator_free(f->allocator, hd);
    alloc_ok(f, 64 * KIB, &ha);
    alloc_ok(f, 64 * KIB, &hb);
    eg__allocator_free(f->allocator, ha);
    eg__allocator_free(f->allocator, hc);
    assert_int_equal(stats_of(f).largest_free_block, 2 * MIB - 128 * KIB);
    eg__allocator_free(f->allocator, hb);
    stats = stats_of(f);
    assert_int_equal(stats.largest_free_block, 2 * MIB);
    assert_int_equal(stats.bytes_cached, 2 * MIB);
    assert_true(stats.fragmentation == 0.0);
}

static void test_best_fit(void **state) {
    fixture *f = *state;
    /* Holes of 256, 128 and 192 KiB separated by live 64 KiB blocks. */
    static const size_t holes[] = {256 * KIB, 128 * KIB, 192 * KIB};
    void *hole_handles[3], *guards[4];
    char *hole_pointers[3];
    alloc_ok(f, 64 * KIB, &guards[0]);
    for (int i = 0; i < 3; i++) {
        hole_pointers[i] = alloc_ok(f, holes[i], &hole_handles[i]);
        alloc_ok(f, 64 * KIB, &guards[i + 1]);
    }
    for (int i = 0; i < 3; i++) eg__allocator_free(f->allocator, hole_handles[i]);

    void *h1, *h2, *h3;
    assert_ptr_equal(alloc_ok(f, 100 * KIB, &h1), hole_pointers[1]);
    assert_ptr_equal(alloc_ok(f, 150 * KIB, &h2), hole_pointers[2]);
    assert_ptr_equal(alloc_ok(f, 192 * KIB, &h3), hole_pointers[0]);
    assert_int_equal(stats_of(f).n_system_allocs, 1);
    eg__allocator_free(f->allocator, h1);
    eg__allocator_free(f->allocator, h2);
    eg__allocator_free(f->allocator, h3);
    for (int i = 0; i < 4; i++) eg__allocator_free(f->allocator, guards[i]);
    assert_int_equal(stats_of(f).largest_free_block, 2 * MIB);
}

/* Best fit among several free blocks of one size class, both in the request's own class and in
 * the next non-empty one; the worst candidate is freed last so it heads its list. */
static void test_best_fit_within_class(void **state) {
    fixture *f = *state;
    static const size_t holes[] = {170 * KIB, 190 * KIB, 200 * KIB, 220 * KIB};
    void *hole_handles[4], *guards[5];
    char *hole_pointers[4];
    alloc_ok(f, 64, &guards[0]);
    for (int i = 0; i < 4; i++) {
        hole_pointers[i] = alloc_ok(f, holes[i], &hole_handles[i]);
        alloc_ok(f, 64, &guards[i + 1]);
    }
    for (int i = 0; i < 4; i++) eg__allocator_free(f->allocator, hole_handles[i]);

    void *h1, *h2, *h3;
    /* 165 KiB shares its class (160..192 KiB) with the 170 and 190 KiB holes. */
    assert_ptr_equal(alloc_ok(f, 165 * KIB, &h1), hole_pointers[0]);
    assert_ptr_equal(alloc_ok(f, 190 * KIB, &h2), hole_pointers[1]); /* exact fit */
    /* 150 KiB's class and the next are now empty; the one after holds 200 and 220 KiB. */
    assert_ptr_equal(alloc_ok(f, 150 * KIB, &h3), hole_pointers[2]);
    eg__allocator_free(f->allocator, h1);
    eg__allocator_free(f->allocator, h2);
    eg__allocator_free(f->allocator, h3);
    for (int i = 0; i < 5; i++) eg__allocator_free(f->allocator, guards[i]);
    assert_int_equal(stats_of(f).largest_free_block, 2 * MIB);
}

static void test_stats_values(void **state) {
    fixture *f = *state;
    void *h1, *h2, *h3;
    alloc_ok(f, 100, &h1);      /* 128 */
    alloc_ok(f, 10 * KIB, &h2); /* 10240 */
    alloc_ok(f, 2 * MIB, &h3);  /* own segment of 2 MiB */
    eg_memory_stats stats = stats_of(f);
    assert_int_equal(stats.bytes_in_use, 128 + 10 * KIB + 2 * MIB);
    assert_int_equal(stats.peak_bytes_in_use, stats.bytes_in_use);
    assert_int_equal(stats.bytes_reserved, 4 * MIB);
    assert_int_equal(stats.bytes_cached, 2 * MIB - 128 - 10 * KIB);
    assert_int_equal(stats.largest_free_block, 2 * MIB - 128 - 10 * KIB);
    assert_int_equal(stats.limit, 0);
    assert_int_equal(stats.n_allocs, 3);
    assert_int_equal(stats.n_frees, 0);
    assert_int_equal(stats.n_cache_hits, 1);
    assert_int_equal(stats.n_system_allocs, 2);
    assert_int_equal(stats.n_system_frees, 0);
    assert_true(stats.fragmentation == 0.0);

    eg__allocator_free(f->allocator, h3);
    eg__allocator_free(f->allocator, h1); /* leaves a 128-byte hole before h2 */
    stats = stats_of(f);
    assert_int_equal(stats.bytes_in_use, 10 * KIB);
    assert_int_equal(stats.peak_bytes_in_use, 128 + 10 * KIB + 2 * MIB);
    assert_int_equal(stats.bytes_cached, 4 * MIB - 10 * KIB);
    assert_int_equal(stats.largest_free_block, 2 * MIB);
    double expected = 1.0 - (double)(2 * MIB) / (double)(4 * MIB - 10 * KIB);
    assert_true(stats.fragmentation > expected - 1e-12 && stats.fragmentation < expected + 1e-12);
    assert_int_equal(stats.n_frees, 2);

    eg__allocator_reset_peak(f->allocator);
    assert_int_equal(stats_of(f).peak_bytes_in_use, 10 * KIB);
    eg__allocator_free(f->allocator, h2);
    assert_int_equal(stats_of(f).peak_bytes_in_use, 10 * KIB);
    assert_int_equal(eg__allocator_get_kind(f->allocator), EG__ALLOCATOR_CACHING);
}

static void test_steady_state_reuses_blocks(void **state) {
    fixture *f = *state;
    static const size_t sizes[] = {300 * KIB, 4 * KIB, 64, 1200 * KIB, 33 * KIB};
    void *handles[5];
    char *first[5];
    for (int i = 0; i < 5; i++) first[i] = alloc_ok(f, sizes[i], &handles[i]);
    for (int i = 0; i < 5; i++) eg__allocator_free(f->allocator, handles[i]);
    uint64_t system_allocs = stats_of(f).n_system_allocs;
    for (int step = 0; step < 100; step++) {
        for (int i = 0; i < 5; i++) assert_ptr_equal(alloc_ok(f, sizes[i], &handles[i]), first[i]);
        for (int i = 4; i >= 0; i--) eg__allocator_free(f->allocator, handles[i]);
    }
    eg_memory_stats stats = stats_of(f);
    assert_int_equal(stats.n_system_allocs, system_allocs);
    assert_int_equal(stats.n_cache_hits, stats.n_allocs - system_allocs);
}

static void test_reserve_then_cache_hits(void **state) {
    fixture *f = *state;
    assert_int_equal(eg__allocator_reserve(f->allocator, 8 * MIB), EG_OK);
    eg_memory_stats stats = stats_of(f);
    assert_int_equal(stats.n_system_allocs, 1);
    assert_int_equal(stats.bytes_reserved, 8 * MIB);
    assert_int_equal(stats.bytes_cached, 8 * MIB);
    assert_int_equal(stats.largest_free_block, 8 * MIB);
    assert_int_equal(stats.n_allocs, 0);

    void *handles[100];
    for (int i = 0; i < 100; i++) alloc_ok(f, 64 * KIB + (size_t)i, &handles[i]);
    stats = stats_of(f);
    assert_int_equal(stats.n_system_allocs, 1);
    assert_int_equal(stats.n_cache_hits, 100);
    for (int i = 0; i < 100; i++) eg__allocator_free(f->allocator, handles[i]);
    assert_int_equal(stats_of(f).largest_free_block, 8 * MIB);

    assert_int_equal(eg__allocator_reserve(f->allocator, 0), EG_OK);
    assert_int_equal(eg__allocator_reserve(f->allocator, 100), EG_OK); /* at least 100 bytes */
    assert_int_equal(stats_of(f).bytes_reserved, 10 * MIB);
    assert_int_equal(f->raw.live_bytes, 10 * MIB);
}

static void test_trim(void **state) {
    fixture *f = *state;
    void *small, *large, *other;
    alloc_ok(f, 1000, &small);      /* segment A (2 MiB) */
    alloc_ok(f, 5 * MIB, &large);   /* segment B (6 MiB) */
    alloc_ok(f, 600 * KIB, &other); /* B's 1 MiB tail is the best fit */
    assert_int_equal(eg__allocator_reserve(f->allocator, 3 * MIB), EG_OK); /* segment C (4 MiB) */
    assert_int_equal(stats_of(f).bytes_reserved, 12 * MIB);

    assert_int_equal(eg__allocator_trim(f->allocator), EG_OK); /* only C is wholly free */
    eg_memory_stats stats = stats_of(f);
    assert_int_equal(stats.bytes_reserved, 8 * MIB);
    assert_int_equal(stats.n_system_frees, 1);
    assert_int_equal(f->raw.live_bytes, 8 * MIB);

    eg__allocator_free(f->allocator, large);
    eg__allocator_trim(f->allocator); /* B still holds `other` */
    assert_int_equal(stats_of(f).bytes_reserved, 8 * MIB);
    eg__allocator_free(f->allocator, other);
    eg__allocator_trim(f->allocator);
    stats = stats_of(f);
    assert_int_equal(stats.bytes_reserved, 2 * MIB);
    assert_int_equal(stats.bytes_in_use, 1024);
    assert_int_equal(stats.n_system_frees, 2);
    eg__allocator_free(f->allocator, small);
    eg__allocator_trim(f->allocator);
    stats = stats_of(f);
    assert_int_equal(stats.bytes_reserved, 0);
    assert_int_equal(stats.bytes_cached, 0);
    assert_int_equal(stats.largest_free_block, 0);
    assert_int_equal(f->raw.live_bytes, 0);
    assert_int_equal(stats.n_system_allocs, stats.n_system_frees);

    void *again;
    alloc_ok(f, 1000, &again); /* works from an empty cache */
    eg__allocator_free(f->allocator, again);
}

static void test_limit_out_of_memory(void **state) {
    fixture *f = *state;
    assert_int_equal(eg__allocator_set_limit(f->allocator, 64 * MIB), EG_OK);
    assert_int_equal(eg__allocator_reserve(f->allocator, 16 * MIB), EG_OK);
    void *h12;
    alloc_ok(f, 12 * MIB, &h12);

    void *handle = (void *)1;
    assert_null(eg__allocator_alloc(f->allocator, GIB, &handle));
    assert_null(handle);
    assert_int_equal(eg_last_status(), EG_ERR_OUT_OF_MEMORY);
    const char *message = eg_last_error();
    assert_non_null(strstr(message, "out of memory on cpu"));
    assert_non_null(strstr(message, "requested 1.00 GiB"));
    assert_non_null(strstr(message, "in use 12.0 MiB"));
    assert_non_null(strstr(message, "cached 4.00 MiB"));
    assert_non_null(strstr(message, "reserved 16.0 MiB"));
    assert_non_null(strstr(message, "limit 64.0 MiB"));
    assert_non_null(strstr(message, "largest free block 4.00 MiB"));
    assert_non_null(strstr(message, "limit would be exceeded"));
    eg_memory_stats stats = stats_of(f);
    assert_int_equal(stats.bytes_reserved, 16 * MIB);
    assert_int_equal(stats.bytes_in_use, 12 * MIB);
    assert_int_equal(stats.n_allocs, 1);
    assert_int_equal(stats.limit, 64 * MIB);
    eg_clear_error();

    /* Under the limit everything still works. */
    void *h40, *h3, *h10;
    alloc_ok(f, 40 * MIB, &h40);                                    /* reserved 56 MiB */
    alloc_ok(f, 3 * MIB, &h3);                                      /* from the free 4 MiB */
    assert_null(eg__allocator_alloc(f->allocator, 10 * MIB, &h10)); /* 66 MiB > 64 MiB */
    assert_int_equal(eg_last_status(), EG_ERR_OUT_OF_MEMORY);
    eg_clear_error();
    eg__allocator_free(f->allocator, h40);
    alloc_ok(f, 10 * MIB, &h10); /* from the cached 40 MiB block */
    assert_int_equal(stats_of(f).bytes_reserved, 56 * MIB);
    eg__allocator_free(f->allocator, h10);

    /* A free segment that cannot serve a request is trimmed to make room for one that can. */
    void *h45;
    alloc_ok(f, 45 * MIB, &h45); /* 16 + 40 + 46 > 64: the 40 MiB segment goes first */
    stats = stats_of(f);
    assert_int_equal(stats.bytes_reserved, 62 * MIB);
    assert_int_equal(stats.n_system_frees, 1);
    assert_false(eg__error_pending());

    /* Rounding never makes a fitting request fail: once the two free 1 MiB tails are taken, a
     * 2 MiB segment would pass a 63 MiB limit but the exact 64 KiB does not. */
    void *h1a, *h1b, *h64k;
    alloc_ok(f, MIB, &h1a);
    alloc_ok(f, MIB, &h1b);
    assert_int_equal(stats_of(f).largest_free_block, 0);
    eg__allocator_set_limit(f->allocator, 63 * MIB);
    alloc_ok(f, 64 * KIB, &h64k);
    assert_int_equal(stats_of(f).bytes_reserved, 62 * MIB + 64 * KIB);

    /* Lowering the limit below what is reserved trims what it can; nothing in use is lost. What
     * is still reserved is above the new limit: refused, the previous limit stays. */
    eg__allocator_free(f->allocator, h45);
    eg__allocator_free(f->allocator, h1a);
    eg__allocator_free(f->allocator, h1b);
    eg__allocator_free(f->allocator, h64k);
    assert_int_equal(eg__allocator_set_limit(f->allocator, 8 * MIB), EG_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(eg_last_error(), "below the 16.0 MiB still reserved"));
    eg_clear_error();
    stats = stats_of(f);
    assert_int_equal(stats.bytes_reserved, 16 * MIB);
    assert_int_equal(stats.bytes_in_use, 15 * MIB);
    assert_int_equal(stats.limit, 63 * MIB);
    /* at what is reserved it is taken, and holds: a request past it fails */
    assert_int_equal(eg__allocator_set_limit(f->allocator, 16 * MIB), EG_OK);
    void *refused;
    assert_null(eg__allocator_alloc(f->allocator, 2 * MIB, &refused));
    assert_int_equal(eg_last_status(), EG_ERR_OUT_OF_MEMORY);
    eg_clear_error();
    eg__allocator_set_limit(f->allocator, 0);
    void *big;
    alloc_ok(f, 100 * MIB, &big);
    eg__allocator_free(f->allocator, big);
    eg__allocator_free(f->allocator, h12);
    eg__allocator_free(f->allocator, h3);
    assert_false(eg__error_pending());
}

static void test_reserve_over_limit(void **state) {
    fixture *f = *state;
    eg__allocator_set_limit(f->allocator, 4 * MIB);
    assert_int_equal(eg__allocator_reserve(f->allocator, 5 * MIB), EG_ERR_OUT_OF_MEMORY);
    assert_non_null(strstr(eg_last_error(), "requested 5.00 MiB"));
    assert_non_null(strstr(eg_last_error(), "limit 4.00 MiB"));
    eg_clear_error();
    assert_int_equal(stats_of(f).bytes_reserved, 0);
    assert_int_equal(eg__allocator_reserve(f->allocator, 3 * MIB), EG_OK);
    assert_int_equal(stats_of(f).bytes_reserved, 4 * MIB);
}

static void test_system_failure(void **state) {
    fixture *f = *state;
    void *kept, *handle;
    alloc_ok(f, 1000, &kept);
    assert_int_equal(eg__allocator_reserve(f->allocator, 4 * MIB), EG_OK);
    f->raw.fail = true;
    assert_null(eg__allocator_alloc(f->allocator, 8 * MIB, &handle));
    assert_int_equal(eg_last_status(), EG_ERR_OUT_OF_MEMORY);
    assert_non_null(strstr(eg_last_error(), "requested 8.00 MiB"));
    assert_non_null(strstr(eg_last_error(), "limit none"));
    assert_non_null(strstr(eg_last_error(), "system allocator"));
    eg_clear_error();
    /* The free reserved segment was given back to make room before failing. */
    eg_memory_stats stats = stats_of(f);
    assert_int_equal(stats.bytes_reserved, 2 * MIB);
    assert_int_equal(stats.bytes_in_use, 1024);
    /* Cached memory still serves requests while the system has none. */
    void *cached;
    alloc_ok(f, 4096, &cached);
    f->raw.fail = false;
    alloc_ok(f, 8 * MIB, &handle);
    eg__allocator_free(f->allocator, handle);
    eg__allocator_free(f->allocator, cached);
    eg__allocator_free(f->allocator, kept);
    /* Sizes past what can be rounded fail cleanly too. */
    assert_null(eg__allocator_alloc(f->allocator, SIZE_MAX, &handle));
    assert_int_equal(eg_last_status(), EG_ERR_OUT_OF_MEMORY);
    eg_clear_error();
    assert_null(eg__allocator_alloc(f->allocator, SIZE_MAX / 2, &handle));
    assert_int_equal(eg_last_status(), EG_ERR_OUT_OF_MEMORY);
    eg_clear_error();
    assert_int_equal(stats_of(f).bytes_in_use, 0);
}

static void test_double_free_reported(void **state) {
    fixture *f = *state;
    void *a, *b;
    alloc_ok(f, 1000, &a);
    alloc_ok(f, 1000, &b);
    eg__allocator_free(f->allocator, a);
    eg__allocator_free(f->allocator, NULL); /* ignored */
    assert_false(eg__error_pending());
    eg__allocator_free(f->allocator, a);
    assert_int_equal(eg_last_status(), EG_ERR_INTERNAL);
    eg_clear_error();
    eg_memory_stats stats = stats_of(f);
    assert_int_equal(stats.n_frees, 1);
    assert_int_equal(stats.bytes_in_use, 1024);
    eg__allocator_free(f->allocator, b);
}

static void test_destroy_with_live_blocks(void **state) {
    fixture *f = *state;
    void *handle;
    for (int i = 0; i < 10; i++) alloc_ok(f, (size_t)i * 300 * KIB, &handle);
    assert_true(f->raw.live_bytes > 0); /* teardown checks everything goes back */
}

static void test_system_kind(void **state) {
    fixture *f = *state;
    assert_int_equal(eg__allocator_get_kind(f->allocator), EG__ALLOCATOR_SYSTEM);
    void *handles[3];
    alloc_ok(f, 0, &handles[0]);
    alloc_ok(f, 1000, &handles[1]);
    alloc_ok(f, 3 * MIB, &handles[2]);
    eg_memory_stats stats = stats_of(f);
    assert_int_equal(stats.n_allocs, 3);
    assert_int_equal(stats.n_system_allocs, 3);
    assert_int_equal(stats.n_cache_hits, 0);
    assert_int_equal(stats.bytes_in_use, 64 + 1024 + 3 * MIB);
    assert_int_equal(stats.bytes_reserved, stats.bytes_in_use);
    assert_int_equal(stats.bytes_cached, 0);
    assert_int_equal(stats.largest_free_block, 0);
    assert_true(stats.fragmentation == 0.0);
    assert_int_equal(f->raw.live_bytes, stats.bytes_reserved);

    eg__allocator_free(f->allocator, handles[1]);
    stats = stats_of(f);
    assert_int_equal(stats.n_system_frees, 1);
    assert_int_equal(stats.bytes_reserved, 64 + 3 * MIB);
    assert_int_equal(stats.peak_bytes_in_use, 64 + 1024 + 3 * MIB);

    assert_int_equal(eg__allocator_reserve(f->allocator, MIB), EG_OK); /* no cache: no-op */
    assert_int_equal(eg__allocator_trim(f->allocator), EG_OK);
    assert_int_equal(stats_of(f).bytes_reserved, 64 + 3 * MIB);

    eg__allocator_set_limit(f->allocator, 4 * MIB);
    assert_null(eg__allocator_alloc(f->allocator, MIB, &handles[1]));
    assert_int_equal(eg_last_status(), EG_ERR_OUT_OF_MEMORY);
    assert_non_null(strstr(eg_last_error(), "limit 4.00 MiB"));
    eg_clear_error();
    alloc_ok(f, MIB - 64, &handles[1]);
    eg__allocator_free(f->allocator, handles[0]); /* handles[1..2] go back at destroy */
}

/* ---- differential test against a reference model ----------------------------------------- */

typedef struct live_block {
    void *handle;
    unsigned char *pointer;
    size_t bytes, rounded;
    uint32_t tag;
} live_block;

static uint64_t next_random(uint64_t *seed) {
    /* xorshift64*: reproducible everywhere, unlike rand(). */
    *seed ^= *seed >> 12;
    *seed ^= *seed << 25;
    *seed ^= *seed >> 27;
    return *seed * 2685821657736338717ull;
}

static size_t random_size(uint64_t *seed) {
    uint64_t r = next_random(seed);
    unsigned kind = (unsigned)(r % 100);
    r = next_random(seed);
    if (kind < 60) return (size_t)(r % 4096);
    if (kind < 90) return (size_t)(r % (256 * KIB));
    if (kind < 98) return (size_t)(r % (1536 * KIB));
    return (size_t)(r % (6 * MIB));
}

static unsigned char pattern_byte(uint32_t tag, size_t offset) {
    return (unsigned char)((tag * 2654435761u) >> 24 ^ (uint32_t)(offset * 31u));
}

/* The first and last 128 bytes and every 4 KiB between: enough to catch overlaps and stray
 * writes without touching every byte of multi-MiB blocks. */
static size_t pattern_next(size_t offset, size_t bytes) {
    if (offset < 128 || offset + 128 >= bytes) return offset + 1;
    size_t next = offset + 4096;
    return next + 128 < bytes ? next : bytes - 128;
}

static void pattern_write(const live_block *b) {
    for (size_t offset = 0; offset < b->bytes; offset = pattern_next(offset, b->bytes))
        b->pointer[offset] = pattern_byte(b->tag, offset);
}

static bool pattern_intact(const live_block *b) {
    for (size_t offset = 0; offset < b->bytes; offset = pattern_next(offset, b->bytes))
        if (b->pointer[offset] != pattern_byte(b->tag, offset)) return false;
    return true;
}

/* Runs n_ops random operations; with a limit, failures are allowed but must leave the allocator
 * consistent. */
static void run_differential(fixture *f, uint64_t seed, size_t n_ops, size_t limit) {
    enum { MAX_LIVE = 256 };
    live_block live[MAX_LIVE];
    size_t n_live = 0, reference_in_use = 0;
    uint64_t reference_allocs = 0, reference_frees = 0, n_failures = 0;
    bool caching = eg__allocator_get_kind(f->allocator) == EG__ALLOCATOR_CACHING;
    eg__allocator_set_limit(f->allocator, limit);

    for (size_t op = 0; op < n_ops; op++) {
        uint64_t r = next_random(&seed) % 1000;
        if (r == 0) {
            eg__allocator_trim(f->allocator);
        } else if (r == 1) {
            if (eg__allocator_reserve(f->allocator, random_size(&seed)) != EG_OK) {
                assert_true(limit != 0);
                assert_int_equal(eg_last_status(), EG_ERR_OUT_OF_MEMORY);
                eg_clear_error();
            }
        } else if (n_live < MAX_LIVE && (n_live == 0 || r < 550)) {
            live_block b = {.bytes = random_size(&seed), .tag = (uint32_t)op};
            b.rounded = b.bytes ? (b.bytes + 63) / 64 * 64 : 64;
            b.pointer = eg__allocator_alloc(f->allocator, b.bytes, &b.handle);
            if (!b.pointer) {
                assert_true(limit != 0);
                assert_int_equal(eg_last_status(), EG_ERR_OUT_OF_MEMORY);
                assert_non_null(strstr(eg_last_error(), "requested"));
                eg_clear_error();
                n_failures++;
                continue;
            }
            assert_int_equal((uintptr_t)b.pointer % 64, 0);
            assert_true(raw_owns(&f->raw, (char *)b.pointer, b.rounded));
            for (size_t i = 0; i < n_live; i++) {
                const live_block *o = &live[i];
                assert_true(b.pointer + b.rounded <= o->pointer ||
                            o->pointer + o->rounded <= b.pointer);
            }
            pattern_write(&b);
            live[n_live++] = b;
            reference_in_use += b.rounded;
            reference_allocs++;
        } else {
            size_t i = (size_t)(next_random(&seed) % n_live);
            assert_true(pattern_intact(&live[i]));
            eg__allocator_free(f->allocator, live[i].handle);
            reference_in_use -= live[i].rounded;
            reference_frees++;
            live[i] = live[--n_live];
        }
        if (op % 997 == 0 || op + 1 == n_ops) {
            eg_memory_stats stats = stats_of(f);
            assert_int_equal(stats.bytes_in_use, reference_in_use);
            assert_int_equal(stats.bytes_reserved, f->raw.live_bytes);
            assert_int_equal(stats.bytes_cached, stats.bytes_reserved - stats.bytes_in_use);
            assert_true(stats.largest_free_block <= stats.bytes_cached);
            assert_true(stats.peak_bytes_in_use >= stats.bytes_in_use);
            assert_int_equal(stats.n_allocs, reference_allocs);
            assert_int_equal(stats.n_frees, reference_frees);
            assert_int_equal(stats.n_system_allocs, f->raw.n_allocs);
            assert_int_equal(stats.n_system_frees, f->raw.n_frees);
            if (caching)
                assert_true(stats.n_cache_hits + stats.n_system_allocs >= stats.n_allocs);
            else
                assert_int_equal(stats.n_cache_hits, 0);
            if (limit) assert_true(stats.bytes_reserved <= limit);
            assert_true(stats.fragmentation >= 0.0 && stats.fragmentation <= 1.0);
            for (size_t i = 0; i < n_live; i++) assert_true(pattern_intact(&live[i]));
        }
    }
    if (limit) assert_true(n_failures > 0); /* the limit was exercised */
    while (n_live > 0) {
        assert_true(pattern_intact(&live[n_live - 1]));
        eg__allocator_free(f->allocator, live[--n_live].handle);
    }
    eg_memory_stats stats = stats_of(f);
    assert_int_equal(stats.bytes_in_use, 0);
    assert_int_equal(stats.bytes_cached, stats.bytes_reserved);
    if (caching && stats.bytes_reserved > 0) assert_true(stats.largest_free_block > 0);
    eg__allocator_trim(f->allocator);
    stats = stats_of(f);
    assert_int_equal(stats.bytes_reserved, 0);
    assert_int_equal(stats.largest_free_block, 0);
    assert_int_equal(f->raw.live_bytes, 0);
    assert_false(eg__error_pending());
}

/* Sanitizers slow these loops 10-50x; a tenth of the operations still reaches every path. */
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
#define WORK_SCALE 10
#else
#define WORK_SCALE 1
#endif

static void test_differential(void **state) {
    run_differential(*state, 0x9e3779b97f4a7c15ull, 200000 / WORK_SCALE, 0);
}

static void test_differential_with_limit(void **state) {
    run_differential(*state, 12345, 50000 / WORK_SCALE, 48 * MIB);
}

static void test_differential_system(void **state) {
    run_differential(*state, 777, 5000, 0);
}

/* ---- concurrency ------------------------------------------------------------------------- */

typedef struct thread_work {
    eg__allocator *allocator;
    uint64_t seed;
    size_t n_ops;
    size_t n_errors; /* cmocka's asserts are not for other threads: count, check in main */
    uint64_t n_allocs;
} thread_work;

static void *thread_main(void *argument) {
    thread_work *work = argument;
    enum { MAX_LIVE = 64 };
    live_block live[MAX_LIVE];
    size_t n_live = 0;
    for (size_t op = 0; op < work->n_ops; op++) {
        if (n_live < MAX_LIVE && (n_live == 0 || next_random(&work->seed) % 2 == 0)) {
            live_block b = {.bytes = random_size(&work->seed) / 4, .tag = (uint32_t)op};
            b.pointer = eg__allocator_alloc(work->allocator, b.bytes, &b.handle);
            if (!b.pointer || (uintptr_t)b.pointer % 64 != 0) {
                work->n_errors++;
                continue;
            }
            pattern_write(&b);
            live[n_live++] = b;
            work->n_allocs++;
        } else {
            size_t i = (size_t)(next_random(&work->seed) % n_live);
            if (!pattern_intact(&live[i])) work->n_errors++;
            eg__allocator_free(work->allocator, live[i].handle);
            live[i] = live[--n_live];
        }
        if (op % 5000 == 0) {
            eg_memory_stats stats;
            eg__allocator_stats(work->allocator, &stats);
            if (stats.bytes_cached != stats.bytes_reserved - stats.bytes_in_use) work->n_errors++;
        }
        if (op % 20000 == 0) eg__allocator_trim(work->allocator);
    }
    while (n_live > 0) {
        if (!pattern_intact(&live[n_live - 1])) work->n_errors++;
        eg__allocator_free(work->allocator, live[--n_live].handle);
    }
    return NULL;
}

static void run_threads(fixture *f, size_t n_ops) {
    enum { N_THREADS = 4 };
    pthread_t threads[N_THREADS];
    thread_work work[N_THREADS];
    for (int i = 0; i < N_THREADS; i++) {
        work[i] = (thread_work){f->allocator, 1000u + (uint64_t)i * 7919u, n_ops, 0, 0};
        assert_int_equal(pthread_create(&threads[i], NULL, thread_main, &work[i]), 0);
    }
    uint64_t n_allocs = 0;
    for (int i = 0; i < N_THREADS; i++) {
        assert_int_equal(pthread_join(threads[i], NULL), 0);
        assert_int_equal(work[i].n_errors, 0);
        n_allocs += work[i].n_allocs;
    }
    eg_memory_stats stats = stats_of(f);
    assert_int_equal(stats.n_allocs, n_allocs);
    assert_int_equal(stats.n_frees, n_allocs);
    assert_int_equal(stats.bytes_in_use, 0);
    assert_int_equal(stats.bytes_reserved, f->raw.live_bytes);
    eg__allocator_trim(f->allocator);
    assert_int_equal(stats_of(f).bytes_reserved, 0);
}

static void test_threads(void **state) {
    run_threads(*state, 40000 / WORK_SCALE);
}

/* Every system-kind alloc is a real aligned_alloc, slow under sanitizers: fewer operations. */
static void test_threads_system(void **state) {
    run_threads(*state, 10000 / WORK_SCALE);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_alignment_and_rounding, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rounding_512, setup, teardown),
        cmocka_unit_test(test_oom_names_owner_free_memory),
        cmocka_unit_test_setup_teardown(test_split, setup, teardown),
        cmocka_unit_test_setup_teardown(test_large_request_segment, setup, teardown),
        cmocka_unit_test_setup_teardown(test_coalesce, setup, teardown),
        cmocka_unit_test_setup_teardown(test_best_fit, setup, teardown),
        cmocka_unit_test_setup_teardown(test_best_fit_within_class, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stats_values, setup, teardown),
        cmocka_unit_test_setup_teardown(test_steady_state_reuses_blocks, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reserve_then_cache_hits, setup, teardown),
        cmocka_unit_test_setup_teardown(test_trim, setup, teardown),
        cmocka_unit_test_setup_teardown(test_limit_out_of_memory, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reserve_over_limit, setup, teardown),
        cmocka_unit_test_setup_teardown(test_system_failure, setup, teardown),
        cmocka_unit_test_setup_teardown(test_double_free_reported, setup, teardown),
        cmocka_unit_test_setup_teardown(test_destroy_with_live_blocks, setup, teardown),
        cmocka_unit_test_setup_teardown(test_system_kind, setup_system, teardown),
        cmocka_unit_test_setup_teardown(test_differential, setup, teardown),
        cmocka_unit_test_setup_teardown(test_differential_with_limit, setup, teardown),
        cmocka_unit_test_setup_teardown(test_differential_system, setup_system, teardown),
        cmocka_unit_test_setup_teardown(test_threads, setup, teardown),
        cmocka_unit_test_setup_teardown(test_threads_system, setup_system, teardown),
        /* The differential, trim and concurrency tests again with per-thread caches in front;
         * tests/test_allocator_cache.c tests the caches themselves. */
        cmocka_unit_test_setup_teardown(test_differential, setup_cached, teardown),
        cmocka_unit_test_setup_teardown(test_differential_with_limit, setup_cached, teardown),
        cmocka_unit_test_setup_teardown(test_trim, setup_cached, teardown),
        cmocka_unit_test_setup_teardown(test_stats_values, setup_cached, teardown),
        cmocka_unit_test_setup_teardown(test_threads, setup_cached, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
