/* The caching allocator (BFC / PyTorch caching-allocator family) and its system-allocator twin.
 *
 * Memory comes from the raw allocator in segments; a segment is carved into blocks that tile it
 * without gaps and are linked prev/next by address, so freeing a block merges it with free
 * neighbours in O(1). Free blocks sit in size-class bins: exact bins for the 15 smallest sizes
 * (64..960 bytes), then 4 sub-bins per power of two, so a bin spans at most 25% of its lower
 * bound and holds few blocks. A bitmap of non-empty bins finds the next bin with a fitting block
 * without visiting empty ones. Best fit: the request's own bin is scanned for the smallest block
 * that fits (stopping at an exact fit); failing that, every block of the next non-empty bin fits
 * and is smaller than anything above it, so the smallest block there is the best fit overall.
 *
 * Block records live outside the memory they describe (the memory may be a GPU's), are recycled
 * through a free list and are the handles given out, so a free needs no lookup.
 *
 * One mutex guards everything, the raw allocator calls included: they are rare (once per
 * segment), and holding the lock keeps the limit check and bytes_reserved exact.
 *
 * In front of it, when enabled (the CPU device's allocator), each thread keeps a few freed small
 * blocks per size class (the per-thread caches of tcmalloc / jemalloc's tcache): an eager loop
 * that frees a result and allocates one of the same size next takes no lock and does no best-fit
 * search. A cached block stays allocated as far as the bins know (it is not merged with its
 * neighbours) but no longer counts in bytes_in_use. Slots are atomic so that any thread can empty
 * every cache (trim, a tighter limit, a failing request, destroy) while their owners run: only an
 * owner puts a block into its empty slot (a plain store), and taking one out is an exchange, so a
 * block is never handed out twice. bytes_in_use and the peak are atomics (one lock-free add per
 * alloc and free, exact peak); request counters are per cache, written by the owner only and
 * summed by the statistics. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "base/error.h"
#include "mem/allocator.h"

#if defined(__SANITIZE_ADDRESS__)
#define EG_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define EG_ASAN 1
#endif
#endif
#ifdef EG_ASAN
#include <sanitizer/asan_interface.h>
#endif

#define ALIGNMENT ((size_t)64)
/* A remainder smaller than this stays attached to the block it was cut from: tiny free blocks
 * would cost a record and a bin visit each while rarely fitting anything (PyTorch's choice too).
 * The slack is not counted in bytes_in_use, so it shows up as cached memory. */
#define SPLIT_REMAINDER_MIN ((size_t)512)
/* Requests below 1 MiB share 2 MiB segments: one raw call (a cudaMalloc can cost a millisecond)
 * serves many small tensors, and 2 MiB is both the x86-64 huge-page size and CUDA's allocation
 * granule, so a smaller segment would save nothing underneath. Larger requests get a segment of
 * their size rounded up to 2 MiB: that wastes at most 2 MiB per segment, the tail serves small
 * requests, and nearby large sizes (a varying sequence length) can reuse each other's segments.
 * One fixed large segment size (PyTorch's 20 MiB buffers) would instead strand memory that trim
 * cannot give back while any block in it lives. */
#define SMALL_REQUEST_MAX ((size_t)1 << 20)
#define SEGMENT_GRANULE   ((size_t)2 << 20)

#define N_EXACT_BINS     16u  /* bin = size / 64 below 1024 bytes; bin 0 stays empty */
#define N_BINS           232u /* enough for any 64-bit size: 16 + (57 - 4) * 4 + 4 */
#define BIN_WORDS        ((N_BINS + 63u) / 64u)
#define BLOCKS_PER_CHUNK 128u

/* Per-thread caches: blocks whose rounded request is at most TC_MAX_BYTES, TC_SLOTS per 64-byte
 * class, so a thread holds at most 2 * (64 + 128 + ... + 4096) bytes = 260 KiB, usually far
 * less. A thread keeps caches for up to TC_PER_THREAD allocators at once. */
#define TC_MAX_BYTES  ((size_t)4096)
#define TC_CLASSES    ((unsigned)(TC_MAX_BYTES / ALIGNMENT))
#define TC_SLOTS      2u
#define TC_PER_THREAD 4u

typedef struct block {
    char *pointer;
    size_t size;               /* bytes the block spans, a multiple of 64 */
    size_t requested;          /* rounded request while allocated: what bytes_in_use counts */
    struct block *prev, *next; /* neighbours by address inside the segment */
    /* A free block's bin list; in the system kind, the list of live blocks; in the record pool,
     * the pool's free list. */
    struct block *list_prev, *list_next;
    unsigned bin;
    bool allocated;
    atomic_bool cached; /* in a thread cache: allocated for the bins, free for the user */
} block;

typedef struct segment {
    char *base;
    size_t size;
    /* The block at base: merges keep the lower-address record, so it never changes. */
    block *first;
    struct segment *prev, *next;
} segment;

typedef struct thread_cache {
    /* NULL once the allocator is destroyed: the record waits for its thread to exit. */
    _Atomic(struct eg__allocator *) allocator;
    _Atomic(block *) slots[TC_CLASSES][TC_SLOTS];
    /* Written by the owning thread alone, read by the statistics. Every request a cache serves
     * is a cache hit, so n_allocs counts those too. */
    atomic_uint_fast64_t n_allocs, n_frees;
    struct thread_cache *prev, *next; /* the allocator's list, under its mutex */
} thread_cache;

typedef struct block_chunk {
    struct block_chunk *next;
    block blocks[BLOCKS_PER_CHUNK];
} block_chunk;

struct eg__allocator {
    pthread_mutex_t mutex;
    eg__raw_allocator raw;
    eg__allocator_kind kind;
    const char *device_name;
    size_t rounding; /* every request is rounded up to a multiple of this (>= ALIGNMENT) */

    block *bins[N_BINS];
    uint64_t bin_mask[BIN_WORDS]; /* bit set = bin non-empty */
    segment *segments;
    block *live; /* system kind only: blocks to give back on destroy */

    block *spare_blocks;
    block_chunk *chunks;

    bool thread_caches_on, poison_cached; /* set before the allocator is shared */
    thread_cache *caches;                 /* every thread's cache of this allocator */

    atomic_size_t in_use, peak; /* also changed by the caches, without the mutex */
    size_t reserved, limit;
    /* Requests through the mutex, plus those of caches whose thread has exited. */
    uint64_t n_allocs, n_frees, n_cache_hits, n_system_allocs, n_system_frees;
};

/* Why a request failed, filled under the lock and reported after it is released. */
typedef struct oom_report {
    size_t requested, in_use, reserved, limit, largest_free;
    const char *reason;
} oom_report;

static const char REASON_LIMIT[] = "the memory limit would be exceeded";
static const char REASON_SYSTEM[] = "the system allocator has no more memory";
static const char REASON_HOST[] = "host memory for allocator bookkeeping ran out";
static const char REASON_SIZE[] = "the size is not representable";

/* ---- block records --------------------------------------------------------------------- */

static block *block_new(eg__allocator *a) {
    if (!a->spare_blocks) {
        block_chunk *chunk = malloc(sizeof *chunk);
        if (!chunk) return NULL;
        chunk->next = a->chunks;
        a->chunks = chunk;
        for (unsigned i = 0; i < BLOCKS_PER_CHUNK; i++) {
            chunk->blocks[i].allocated = false;
            chunk->blocks[i].list_next = a->spare_blocks;
            a->spare_blocks = &chunk->blocks[i];
        }
    }
    block *b = a->spare_blocks;
    a->spare_blocks = b->list_next;
    b->prev = b->next = b->list_prev = b->list_next = NULL;
    b->requested = 0;
    b->allocated = false;
    atomic_store_explicit(&b->cached, false, memory_order_relaxed);
    return b;
}

static void block_recycle(eg__allocator *a, block *b) {
    /* A stale handle to a recycled record then reads as free, so a double free is caught. */
    b->allocated = false;
    b->list_next = a->spare_blocks;
    a->spare_blocks = b;
}

/* ---- bins -------------------------------------------------------------------------------- */

static unsigned bin_index(size_t size) {
    size_t units = size / ALIGNMENT; /* >= 1 */
    if (units < N_EXACT_BINS) return (unsigned)units;
    unsigned log2 = 63u - (unsigned)__builtin_clzll((unsigned long long)units);
    return N_EXACT_BINS + (log2 - 4u) * 4u + (unsigned)((units >> (log2 - 2u)) & 3u);
}

static void bin_insert(eg__allocator *a, block *b) {
    unsigned bin = bin_index(b->size);
    b->bin = bin;
    b->list_prev = NULL;
    b->list_next = a->bins[bin];
    if (b->list_next) b->list_next->list_prev = b;
    a->bins[bin] = b;
    a->bin_mask[bin / 64u] |= (uint64_t)1 << (bin % 64u);
}

static void bin_remove(eg__allocator *a, block *b) {
    if (b->list_prev)
        b->list_prev->list_next = b->list_next;
    else
        a->bins[b->bin] = b->list_next;
    if (b->list_next) b->list_next->list_prev = b->list_prev;
    if (!a->bins[b->bin]) a->bin_mask[b->bin / 64u] &= ~((uint64_t)1 << (b->bin % 64u));
}

/* The first non-empty bin at or above `from`, or N_BINS. */
static unsigned next_nonempty_bin(const eg__allocator *a, unsigned from) {
    if (from >= N_BINS) return N_BINS;
    unsigned word = from / 64u;
    uint64_t bits = a->bin_mask[word] & (~(uint64_t)0 << (from % 64u));
    for (;;) {
        if (bits) return word * 64u + (unsigned)__builtin_ctzll(bits);
        if (++word == BIN_WORDS) return N_BINS;
        bits = a->bin_mask[word];
    }
}

/* Smaller wins; among equals the lower address, which keeps the high end of segments free and
 * so more of them wholly free for trim. */
static bool better_fit(const block *candidate, const block *best) {
    return !best || candidate->size < best->size ||
           (candidate->size == best->size && candidate->pointer < best->pointer);
}

static block *find_best_fit(const eg__allocator *a, size_t size) {
    unsigned bin = bin_index(size);
    block *best = NULL;
    for (block *c = a->bins[bin]; c; c = c->list_next) {
        if (c->size == size) return c;
        if (c->size > size && better_fit(c, best)) best = c;
    }
    if (best) return best;
    bin = next_nonempty_bin(a, bin + 1u);
    if (bin == N_BINS) return NULL;
    for (block *c = a->bins[bin]; c; c = c->list_next)
        if (better_fit(c, best)) best = c;
    return best;
}

static size_t largest_free_block(const eg__allocator *a) {
    for (unsigned word = BIN_WORDS; word-- > 0;) {
        uint64_t bits = a->bin_mask[word];
        if (!bits) continue;
        unsigned bin = word * 64u + 63u - (unsigned)__builtin_clzll(bits);
        size_t largest = 0;
        for (const block *c = a->bins[bin]; c; c = c->list_next)
            if (c->size > largest) largest = c->size;
        return largest;
    }
    return 0;
}

/* ---- segments ---------------------------------------------------------------------------- */

static bool trim_locked(eg__allocator *a);

static bool over_limit(const eg__allocator *a, size_t bytes) {
    return a->limit && (a->reserved > a->limit || bytes > a->limit - a->reserved);
}

/* Gives every wholly free segment back; true when at least one went. */
static bool release_free_segments(eg__allocator *a) {
    bool released = false;
    segment *next;
    for (segment *s = a->segments; s; s = next) {
        next = s->next;
        block *first = s->first;
        if (first->allocated || first->next) continue;
        bin_remove(a, first);
        block_recycle(a, first);
        if (s->prev)
            s->prev->next = s->next;
        else
            a->segments = s->next;
        if (s->next) s->next->prev = s->prev;
        a->raw.free(a->raw.context, s->base, s->size);
        a->reserved -= s->size;
        a->n_system_frees++;
        free(s);
        released = true;
    }
    return released;
}

static size_t preferred_segment_size(size_t needed) {
    if (needed < SMALL_REQUEST_MAX) return SEGMENT_GRANULE;
    if (needed > SIZE_MAX - (SEGMENT_GRANULE - 1)) return needed;
    return (needed + SEGMENT_GRANULE - 1) & ~(SEGMENT_GRANULE - 1);
}

/* A new segment of at least `needed` bytes (a multiple of 64) whose single free block is not in
 * any bin yet, or NULL with *reason set. The preferred size is tried first; when that is refused
 * (limit or system) the exact size is tried too, so rounding never turns a request that fits into
 * a failure. Wholly free segments are trimmed once before giving up: they cannot serve this
 * request anyway, or a free block would have been found. */
static segment *segment_new(eg__allocator *a, size_t needed, const char **reason) {
    size_t sizes[2] = {preferred_segment_size(needed), needed};
    unsigned n_sizes = sizes[0] == needed ? 1u : 2u;
    bool trimmed = false;
    for (unsigned i = 0; i < n_sizes; i++) {
        size_t size = sizes[i];
        if (over_limit(a, size) && !trimmed) {
            trim_locked(a);
            trimmed = true;
        }
        if (over_limit(a, size)) {
            *reason = REASON_LIMIT;
            continue;
        }
        void *memory = a->raw.alloc(a->raw.context, size);
        if (!memory && !trimmed) {
            trimmed = true;
            if (trim_locked(a)) memory = a->raw.alloc(a->raw.context, size);
        }
        if (!memory) {
            *reason = REASON_SYSTEM;
            continue;
        }
        segment *s = malloc(sizeof *s);
        block *first = s ? block_new(a) : NULL;
        if (!first) {
            free(s);
            a->raw.free(a->raw.context, memory, size);
            *reason = REASON_HOST;
            return NULL;
        }
        s->base = memory;
        s->size = size;
        s->first = first;
        s->prev = NULL;
        s->next = a->segments;
        if (s->next) s->next->prev = s;
        a->segments = s;
        first->pointer = memory;
        first->size = size;
        a->reserved += size;
        a->n_system_allocs++;
        return s;
    }
    return NULL;
}

/* ---- alloc / free ------------------------------------------------------------------------ */

/* Cuts `b` (free, in no bin) down to `size`, the rest becoming a free block after it. Without a
 * record for the rest the block is handed out whole: the request still succeeds. */
static void split(eg__allocator *a, block *b, size_t size) {
    size_t rest = b->size - size;
    if (rest < SPLIT_REMAINDER_MIN) return;
    block *r = block_new(a);
    if (!r) return;
    r->pointer = b->pointer + size;
    r->size = rest;
    r->prev = b;
    r->next = b->next;
    if (b->next) b->next->prev = r;
    b->next = r;
    b->size = size;
    bin_insert(a, r);
}

static block *caching_alloc(eg__allocator *a, size_t size, const char **reason) {
    block *b = find_best_fit(a, size);
    if (b) {
        bin_remove(a, b);
        a->n_cache_hits++;
    } else {
        segment *s = segment_new(a, size, reason);
        if (!s) return NULL;
        b = s->first;
    }
    split(a, b, size);
    return b;
}

static void caching_free(eg__allocator *a, block *b) {
    block *next = b->next;
    if (next && !next->allocated) {
        bin_remove(a, next);
        b->size += next->size;
        b->next = next->next;
        if (b->next) b->next->prev = b;
        block_recycle(a, next);
    }
    block *prev = b->prev;
    if (prev && !prev->allocated) {
        bin_remove(a, prev);
        prev->size += b->size;
        prev->next = b->next;
        if (prev->next) prev->next->prev = prev;
        block_recycle(a, b);
        b = prev;
    }
    bin_insert(a, b);
}

static block *system_alloc(eg__allocator *a, size_t size, const char **reason) {
    if (over_limit(a, size)) {
        *reason = REASON_LIMIT;
        return NULL;
    }
    block *b = block_new(a);
    if (!b) {
        *reason = REASON_HOST;
        return NULL;
    }
    void *memory = a->raw.alloc(a->raw.context, size);
    if (!memory) {
        block_recycle(a, b);
        *reason = REASON_SYSTEM;
        return NULL;
    }
    b->pointer = memory;
    b->size = size;
    b->list_next = a->live;
    if (a->live) a->live->list_prev = b;
    a->live = b;
    a->reserved += size;
    a->n_system_allocs++;
    return b;
}

static void system_free(eg__allocator *a, block *b) {
    if (b->list_prev)
        b->list_prev->list_next = b->list_next;
    else
        a->live = b->list_next;
    if (b->list_next) b->list_next->list_prev = b->list_prev;
    a->raw.free(a->raw.context, b->pointer, b->size);
    a->reserved -= b->size;
    a->n_system_frees++;
    block_recycle(a, b);
}

/* ---- errors ------------------------------------------------------------------------------ */

/* Three significant digits in binary units: "512 B", "4.00 MiB", "12.0 MiB", "256 GiB". */
static void format_bytes(size_t bytes, char *out, size_t out_size) {
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    if (bytes < 1024) {
        snprintf(out, out_size, "%zu B", bytes);
        return;
    }
    double value = (double)bytes;
    unsigned unit = 0;
    while (value >= 1024.0 && unit + 1 < sizeof units / sizeof units[0]) {
        value /= 1024.0;
        unit++;
    }
    int decimals = value < 9.995 ? 2 : value < 99.95 ? 1 : 0;
    snprintf(out, out_size, "%.*f %s", decimals, value, units[unit]);
}

static void fill_report(const eg__allocator *a, size_t requested, const char *reason,
                        oom_report *report) {
    report->requested = requested;
    report->in_use = atomic_load_explicit(&a->in_use, memory_order_relaxed);
    report->reserved = a->reserved;
    report->limit = a->limit;
    report->largest_free = largest_free_block(a);
    report->reason = reason;
}

static eg_status raise_oom(const eg__allocator *a, const oom_report *report) {
    char requested[32], in_use[32], cached[32], reserved[32], limit[32], largest[32];
    format_bytes(report->requested, requested, sizeof requested);
    format_bytes(report->in_use, in_use, sizeof in_use);
    format_bytes(report->reserved - report->in_use, cached, sizeof cached);
    format_bytes(report->reserved, reserved, sizeof reserved);
    if (report->limit)
        format_bytes(report->limit, limit, sizeof limit);
    else
        snprintf(limit, sizeof limit, "none");
    format_bytes(report->largest_free, largest, sizeof largest);
    char owner[128] = "";
    if (a->raw.describe_free) {
        owner[0] = ';';
        owner[1] = ' ';
        a->raw.describe_free(a->raw.context, owner + 2, sizeof owner - 2);
        if (!owner[2]) owner[0] = '\0';
    }
    return eg__error(EG_ERR_OUT_OF_MEMORY,
                     "out of memory on %s: requested %s; in use %s, cached %s, reserved %s, "
                     "limit %s, largest free block %s (%s%s)",
                     a->device_name, requested, in_use, cached, reserved, limit, largest,
                     report->reason, owner);
}

/* ---- per-thread caches ------------------------------------------------------------------ */

static size_t rounded_size(const eg__allocator *a, size_t bytes) {
    size_t r = a->rounding;
    return bytes ? (bytes + r - 1) & ~(r - 1) : r;
}

static void add_in_use(eg__allocator *a, size_t size) {
    size_t now = atomic_fetch_add_explicit(&a->in_use, size, memory_order_relaxed) + size;
    size_t peak = atomic_load_explicit(&a->peak, memory_order_relaxed);
    while (now > peak && !atomic_compare_exchange_weak_explicit(
                             &a->peak, &peak, now, memory_order_relaxed, memory_order_relaxed)) {
    }
}

static void counter_add(atomic_uint_fast64_t *counter) {
    /* Only the owner writes: a load and a store, no locked instruction. */
    atomic_store_explicit(counter, atomic_load_explicit(counter, memory_order_relaxed) + 1,
                          memory_order_relaxed);
}

/* A cached block is poisoned (host memory under AddressSanitizer), so a use after free of a
 * small tensor is still reported even though the memory never leaves the allocator. */
static void poison(const eg__allocator *a, const block *b, bool on) {
#ifdef EG_ASAN
    if (!a->poison_cached) return;
    if (on)
        ASAN_POISON_MEMORY_REGION(b->pointer, b->size);
    else
        ASAN_UNPOISON_MEMORY_REGION(b->pointer, b->size);
#else
    (void)a;
    (void)b;
    (void)on;
#endif
}

/* Empties c's slots into the bins (mutex held). The owner may run concurrently: it only ever
 * fills an empty slot, and its own takes are exchanges too. */
static void cache_flush_locked(eg__allocator *a, thread_cache *c) {
    for (unsigned k = 0; k < TC_CLASSES; k++) {
        for (unsigned s = 0; s < TC_SLOTS; s++) {
            if (!atomic_load_explicit(&c->slots[k][s], memory_order_relaxed)) continue;
            block *b = atomic_exchange_explicit(&c->slots[k][s], NULL, memory_order_acquire);
            if (!b) continue;
            poison(a, b, false);
            atomic_store_explicit(&b->cached, false, memory_order_relaxed);
            b->allocated = false;
            b->requested = 0;
            caching_free(a, b);
        }
    }
}

static void flush_all_locked(eg__allocator *a) {
    for (thread_cache *c = a->caches; c; c = c->next) cache_flush_locked(a, c);
}

/* Cached blocks go back to the bins first, so their segments can be released too. */
static bool trim_locked(eg__allocator *a) {
    flush_all_locked(a);
    return release_free_segments(a);
}

/* Folds c's counters into a's and takes c off a's list (mutex held); c is left empty. */
static void cache_detach_locked(eg__allocator *a, thread_cache *c) {
    cache_flush_locked(a, c);
    a->n_allocs += atomic_load_explicit(&c->n_allocs, memory_order_relaxed);
    a->n_frees += atomic_load_explicit(&c->n_frees, memory_order_relaxed);
    a->n_cache_hits += atomic_load_explicit(&c->n_allocs, memory_order_relaxed);
    atomic_store_explicit(&c->n_allocs, 0, memory_order_relaxed);
    atomic_store_explicit(&c->n_frees, 0, memory_order_relaxed);
    if (c->prev)
        c->prev->next = c->next;
    else
        a->caches = c->next;
    if (c->next) c->next->prev = c->prev;
    c->prev = c->next = NULL;
    atomic_store_explicit(&c->allocator, NULL, memory_order_release);
}

static void cache_attach_locked(eg__allocator *a, thread_cache *c) {
    c->prev = NULL;
    c->next = a->caches;
    if (c->next) c->next->prev = c;
    a->caches = c;
    atomic_store_explicit(&c->allocator, a, memory_order_release);
}

/* This thread's caches, most recently used first. The key's destructor empties them when the
 * thread exits (thread-local storage is still valid while key destructors run). */
static _Thread_local thread_cache *thread_caches[TC_PER_THREAD];
static pthread_key_t thread_exit_key;
static pthread_once_t thread_exit_key_once = PTHREAD_ONCE_INIT;
static bool thread_exit_key_ok;

static void release_thread_caches(void *unused) {
    (void)unused;
    for (unsigned i = 0; i < TC_PER_THREAD; i++) {
        thread_cache *c = thread_caches[i];
        if (!c) continue;
        thread_caches[i] = NULL;
        eg__allocator *a = atomic_load_explicit(&c->allocator, memory_order_acquire);
        if (a) {
            pthread_mutex_lock(&a->mutex);
            cache_detach_locked(a, c);
            pthread_mutex_unlock(&a->mutex);
        }
        free(c);
    }
}

static void create_thread_exit_key(void) {
    thread_exit_key_ok = pthread_key_create(&thread_exit_key, release_thread_caches) == 0;
}

/* This thread's cache of a, made on first use; NULL when none can be had (then the mutex path
 * serves the request, which is always correct). */
static thread_cache *cache_slow(eg__allocator *a) {
    unsigned found = TC_PER_THREAD, victim = TC_PER_THREAD - 1;
    for (unsigned i = 0; i < TC_PER_THREAD; i++) {
        thread_cache *c = thread_caches[i];
        if (c && atomic_load_explicit(&c->allocator, memory_order_relaxed) == a) {
            found = i;
            break;
        }
        if (!c || !atomic_load_explicit(&c->allocator, memory_order_relaxed)) victim = i;
    }
    thread_cache *c;
    if (found < TC_PER_THREAD) {
        c = thread_caches[found];
        victim = found;
    } else {
        pthread_once(&thread_exit_key_once, create_thread_exit_key);
        /* Without a destructor the cache's blocks would stay stranded at thread exit. */
        if (!thread_exit_key_ok || pthread_setspecific(thread_exit_key, (void *)1) != 0)
            return NULL;
        c = thread_caches[victim];
        if (c) { /* evict the least recently used cache: its blocks go back to its allocator */
            eg__allocator *old = atomic_load_explicit(&c->allocator, memory_order_acquire);
            if (old) {
                pthread_mutex_lock(&old->mutex);
                cache_detach_locked(old, c);
                pthread_mutex_unlock(&old->mutex);
            }
        } else {
            c = calloc(1, sizeof *c);
            if (!c) return NULL;
        }
        pthread_mutex_lock(&a->mutex);
        cache_attach_locked(a, c);
        pthread_mutex_unlock(&a->mutex);
    }
    for (unsigned i = victim; i > 0; i--) thread_caches[i] = thread_caches[i - 1];
    thread_caches[0] = c;
    return c;
}

static inline thread_cache *cache_of(eg__allocator *a) {
    thread_cache *c = thread_caches[0];
    if (c && atomic_load_explicit(&c->allocator, memory_order_relaxed) == a) return c;
    return cache_slow(a);
}

/* A block of exactly `size` (rounded, <= TC_MAX_BYTES) from this thread's cache, or NULL. */
static block *cache_take(eg__allocator *a, size_t size) {
    thread_cache *c = cache_of(a);
    if (!c) return NULL;
    _Atomic(block *) *slots = c->slots[size / ALIGNMENT - 1];
    for (unsigned s = 0; s < TC_SLOTS; s++) {
        if (!atomic_load_explicit(&slots[s], memory_order_relaxed)) continue;
        block *b = atomic_exchange_explicit(&slots[s], NULL, memory_order_acquire);
        if (!b) continue; /* emptied by a flush meanwhile */
        atomic_store_explicit(&b->cached, false, memory_order_relaxed);
        poison(a, b, false);
        add_in_use(a, size);
        counter_add(&c->n_allocs);
        return b;
    }
    return NULL;
}

/* Keeps b (live, small) in this thread's cache; false when its slots are full. */
static bool cache_put(eg__allocator *a, block *b) {
    thread_cache *c = cache_of(a);
    if (!c) return false;
    _Atomic(block *) *slots = c->slots[b->requested / ALIGNMENT - 1];
    for (unsigned s = 0; s < TC_SLOTS; s++) {
        if (atomic_load_explicit(&slots[s], memory_order_relaxed)) continue;
        atomic_store_explicit(&b->cached, true, memory_order_relaxed);
        atomic_fetch_sub_explicit(&a->in_use, b->requested, memory_order_relaxed);
        counter_add(&c->n_frees);
        poison(a, b, true);
        /* Only this thread fills an empty slot, so a store is enough; release publishes the
         * block's fields to whichever thread flushes it. */
        atomic_store_explicit(&slots[s], b, memory_order_release);
        return true;
    }
    return false;
}

/* ---- public (internal) API --------------------------------------------------------------- */

eg__allocator *eg__allocator_create(eg__raw_allocator raw, eg__allocator_kind kind,
                                    const char *device_name) {
    if (!raw.alloc || !raw.free) {
        eg__error(EG_ERR_INVALID_ARGUMENT, "allocator_create: the raw allocator lacks %s",
                  raw.alloc ? "free" : "alloc");
        return NULL;
    }
    eg__allocator *a = calloc(1, sizeof *a);
    if (!a || pthread_mutex_init(&a->mutex, NULL) != 0) {
        free(a);
        eg__error(EG_ERR_OUT_OF_MEMORY, "allocator_create: out of host memory");
        return NULL;
    }
    a->raw = raw;
    a->kind = kind == EG__ALLOCATOR_SYSTEM ? EG__ALLOCATOR_SYSTEM : EG__ALLOCATOR_CACHING;
    a->device_name = device_name ? device_name : "unnamed device";
    a->rounding = ALIGNMENT;
    atomic_init(&a->in_use, 0);
    atomic_init(&a->peak, 0);
    return a;
}

eg_status eg__allocator_set_rounding(eg__allocator *allocator, size_t bytes) {
    if (!allocator || bytes < ALIGNMENT || (bytes & (bytes - 1)) || bytes > SEGMENT_GRANULE)
        return eg__error(EG_ERR_INVALID_ARGUMENT,
                         "allocator_set_rounding: %zu is not a power of two from 64 to 2 MiB",
                         bytes);
    allocator->rounding = bytes;
    return EG_OK;
}

void eg__allocator_enable_thread_caches(eg__allocator *allocator, bool host_memory) {
    if (!allocator || allocator->kind != EG__ALLOCATOR_CACHING) return;
    allocator->poison_cached = host_memory;
    allocator->thread_caches_on = true;
}

void eg__allocator_destroy(eg__allocator *allocator) {
    if (!allocator) return;
    eg__allocator *a = allocator;
    /* Threads that still hold a cache of a keep the (now empty, detached) record until they
     * exit or reuse it. */
    pthread_mutex_lock(&a->mutex);
    while (a->caches) cache_detach_locked(a, a->caches);
    pthread_mutex_unlock(&a->mutex);
    segment *next_segment;
    for (segment *s = a->segments; s; s = next_segment) {
        next_segment = s->next;
        a->raw.free(a->raw.context, s->base, s->size);
        free(s);
    }
    block *next_block;
    for (block *b = a->live; b; b = next_block) {
        next_block = b->list_next;
        a->raw.free(a->raw.context, b->pointer, b->size);
    }
    block_chunk *next_chunk;
    for (block_chunk *c = a->chunks; c; c = next_chunk) {
        next_chunk = c->next;
        free(c);
    }
    pthread_mutex_destroy(&a->mutex);
    free(a);
}

void *eg__allocator_alloc(eg__allocator *allocator, size_t bytes, void **handle) {
    if (!allocator || !handle) {
        eg__error(EG_ERR_NULL_ARGUMENT, "allocator_alloc: NULL %s",
                  handle ? "allocator" : "handle");
        return NULL;
    }
    eg__allocator *a = allocator;
    if (a->thread_caches_on && bytes <= TC_MAX_BYTES) {
        block *b = cache_take(a, rounded_size(a, bytes));
        if (b) {
            *handle = b;
            return b->pointer;
        }
    }
    *handle = NULL;
    oom_report report;
    block *b = NULL;
    pthread_mutex_lock(&a->mutex);
    if (bytes > SIZE_MAX - (a->rounding - 1)) {
        fill_report(a, bytes, REASON_SIZE, &report);
    } else {
        size_t size = rounded_size(a, bytes);
        const char *reason = REASON_SYSTEM;
        b = a->kind == EG__ALLOCATOR_SYSTEM ? system_alloc(a, size, &reason)
                                            : caching_alloc(a, size, &reason);
        if (b) {
            b->allocated = true;
            b->requested = size;
            add_in_use(a, size);
            a->n_allocs++;
        } else {
            fill_report(a, bytes, reason, &report);
        }
    }
    pthread_mutex_unlock(&a->mutex);
    if (!b) {
        raise_oom(a, &report);
        return NULL;
    }
    *handle = b;
    return b->pointer;
}

void eg__allocator_free(eg__allocator *allocator, void *handle) {
    if (!allocator || !handle) return;
    eg__allocator *a = allocator;
    block *b = handle;
    /* A live handle's fields are the caller's alone, so reading them needs no lock; anything
     * odd (a double free) takes the mutex path, which reports it. */
    if (a->thread_caches_on && b->allocated && b->requested <= TC_MAX_BYTES &&
        !atomic_load_explicit(&b->cached, memory_order_relaxed) && cache_put(a, b))
        return;
    pthread_mutex_lock(&a->mutex);
    bool valid = b->allocated && !atomic_load_explicit(&b->cached, memory_order_relaxed);
    if (valid) {
        b->allocated = false;
        atomic_fetch_sub_explicit(&a->in_use, b->requested, memory_order_relaxed);
        b->requested = 0;
        a->n_frees++;
        if (a->kind == EG__ALLOCATOR_SYSTEM)
            system_free(a, b);
        else
            caching_free(a, b);
    }
    pthread_mutex_unlock(&a->mutex);
    /* A bug in the caller (a reference count gone wrong), not bad user input, hence INTERNAL. */
    if (!valid) eg__error(EG_ERR_INTERNAL, "allocator_free: block freed twice or never allocated");
}

void eg__allocator_stats(eg__allocator *allocator, eg_memory_stats *out) {
    if (!allocator || !out) return;
    eg__allocator *a = allocator;
    pthread_mutex_lock(&a->mutex);
    size_t in_use = atomic_load_explicit(&a->in_use, memory_order_relaxed);
    out->bytes_in_use = in_use;
    out->peak_bytes_in_use = atomic_load_explicit(&a->peak, memory_order_relaxed);
    out->bytes_reserved = a->reserved;
    out->bytes_cached = a->reserved - in_use;
    out->largest_free_block = largest_free_block(a);
    out->limit = a->limit;
    out->n_allocs = a->n_allocs;
    out->n_frees = a->n_frees;
    out->n_cache_hits = a->n_cache_hits;
    for (const thread_cache *c = a->caches; c; c = c->next) {
        out->n_allocs += atomic_load_explicit(&c->n_allocs, memory_order_relaxed);
        out->n_frees += atomic_load_explicit(&c->n_frees, memory_order_relaxed);
        out->n_cache_hits += atomic_load_explicit(&c->n_allocs, memory_order_relaxed);
    }
    out->n_system_allocs = a->n_system_allocs;
    out->n_system_frees = a->n_system_frees;
    pthread_mutex_unlock(&a->mutex);
    out->fragmentation =
        out->bytes_cached ? 1.0 - (double)out->largest_free_block / (double)out->bytes_cached : 0.0;
}

/* The system kind has no cache to fill, so reserve does nothing there. */
eg_status eg__allocator_reserve(eg__allocator *allocator, size_t bytes) {
    if (!allocator) return eg__error(EG_ERR_NULL_ARGUMENT, "allocator_reserve: NULL allocator");
    eg__allocator *a = allocator;
    if (bytes == 0 || a->kind == EG__ALLOCATOR_SYSTEM) return EG_OK;
    oom_report report;
    segment *s = NULL;
    pthread_mutex_lock(&a->mutex);
    if (bytes > SIZE_MAX - (ALIGNMENT - 1)) {
        fill_report(a, bytes, REASON_SIZE, &report);
    } else {
        const char *reason = REASON_SYSTEM;
        s = segment_new(a, (bytes + ALIGNMENT - 1) & ~(ALIGNMENT - 1), &reason);
        if (s)
            bin_insert(a, s->first);
        else
            fill_report(a, bytes, reason, &report);
    }
    pthread_mutex_unlock(&a->mutex);
    return s ? EG_OK : raise_oom(a, &report);
}

eg_status eg__allocator_trim(eg__allocator *allocator) {
    if (!allocator) return eg__error(EG_ERR_NULL_ARGUMENT, "allocator_trim: NULL allocator");
    pthread_mutex_lock(&allocator->mutex);
    trim_locked(allocator);
    pthread_mutex_unlock(&allocator->mutex);
    return EG_OK;
}

/* A limit below what is reserved now trims the cache first; when the memory still reserved (the
 * segments holding tensors) is above it, the limit is refused and the previous one stays, so that
 * a limit once set always holds. */
eg_status eg__allocator_set_limit(eg__allocator *allocator, size_t bytes) {
    if (!allocator) return eg__error(EG_ERR_NULL_ARGUMENT, "allocator_set_limit: NULL allocator");
    pthread_mutex_lock(&allocator->mutex);
    if (bytes && allocator->reserved > bytes) trim_locked(allocator);
    size_t reserved = allocator->reserved, previous = allocator->limit;
    size_t in_use = atomic_load_explicit(&allocator->in_use, memory_order_relaxed);
    bool fits = !bytes || reserved <= bytes;
    if (fits) allocator->limit = bytes;
    pthread_mutex_unlock(&allocator->mutex);
    if (fits) return EG_OK;
    char wanted[32], held[32], used[32], kept[32];
    format_bytes(bytes, wanted, sizeof wanted);
    format_bytes(reserved, held, sizeof held);
    format_bytes(in_use, used, sizeof used);
    if (previous)
        format_bytes(previous, kept, sizeof kept);
    else
        snprintf(kept, sizeof kept, "none");
    return eg__error(EG_ERR_INVALID_ARGUMENT,
                     "memory_set_limit: %s: a limit of %s is below the %s still reserved after "
                     "trimming the cache (%s in use by tensors); free tensors first, or set a "
                     "limit of at least %s (the limit stays %s)",
                     allocator->device_name, wanted, held, used, held, kept);
}

void eg__allocator_reset_peak(eg__allocator *allocator) {
    if (!allocator) return;
    pthread_mutex_lock(&allocator->mutex);
    atomic_store_explicit(&allocator->peak,
                          atomic_load_explicit(&allocator->in_use, memory_order_relaxed),
                          memory_order_relaxed);
    pthread_mutex_unlock(&allocator->mutex);
}

eg__allocator_kind eg__allocator_get_kind(const eg__allocator *allocator) {
    return allocator ? allocator->kind : EG__ALLOCATOR_CACHING;
}
