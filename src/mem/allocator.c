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
 * segment), and holding the lock keeps the limit check and bytes_reserved exact. */
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/error.h"
#include "mem/allocator.h"

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
} block;

typedef struct segment {
    char *base;
    size_t size;
    /* The block at base: merges keep the lower-address record, so it never changes. */
    block *first;
    struct segment *prev, *next;
} segment;

typedef struct block_chunk {
    struct block_chunk *next;
    block blocks[BLOCKS_PER_CHUNK];
} block_chunk;

struct eg__allocator {
    pthread_mutex_t mutex;
    eg__raw_allocator raw;
    eg__allocator_kind kind;
    const char *device_name;

    block *bins[N_BINS];
    uint64_t bin_mask[BIN_WORDS]; /* bit set = bin non-empty */
    segment *segments;
    block *live; /* system kind only: blocks to give back on destroy */

    block *spare_blocks;
    block_chunk *chunks;

    size_t in_use, peak, reserved, limit;
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
            release_free_segments(a);
            trimmed = true;
        }
        if (over_limit(a, size)) {
            *reason = REASON_LIMIT;
            continue;
        }
        void *memory = a->raw.alloc(a->raw.context, size);
        if (!memory && !trimmed) {
            trimmed = true;
            if (release_free_segments(a)) memory = a->raw.alloc(a->raw.context, size);
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
    report->in_use = a->in_use;
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
    return eg__error(EG_ERR_OUT_OF_MEMORY,
                     "out of memory on %s: requested %s; in use %s, cached %s, reserved %s, "
                     "limit %s, largest free block %s (%s)",
                     a->device_name, requested, in_use, cached, reserved, limit, largest,
                     report->reason);
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
    return a;
}

void eg__allocator_destroy(eg__allocator *allocator) {
    if (!allocator) return;
    eg__allocator *a = allocator;
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
    *handle = NULL;
    oom_report report;
    block *b = NULL;
    pthread_mutex_lock(&a->mutex);
    if (bytes > SIZE_MAX - (ALIGNMENT - 1)) {
        fill_report(a, bytes, REASON_SIZE, &report);
    } else {
        size_t size = bytes ? (bytes + ALIGNMENT - 1) & ~(ALIGNMENT - 1) : ALIGNMENT;
        const char *reason = REASON_SYSTEM;
        b = a->kind == EG__ALLOCATOR_SYSTEM ? system_alloc(a, size, &reason)
                                            : caching_alloc(a, size, &reason);
        if (b) {
            b->allocated = true;
            b->requested = size;
            a->in_use += size;
            if (a->in_use > a->peak) a->peak = a->in_use;
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
    pthread_mutex_lock(&a->mutex);
    bool valid = b->allocated;
    if (valid) {
        b->allocated = false;
        a->in_use -= b->requested;
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
    out->bytes_in_use = a->in_use;
    out->peak_bytes_in_use = a->peak;
    out->bytes_reserved = a->reserved;
    out->bytes_cached = a->reserved - a->in_use;
    out->largest_free_block = largest_free_block(a);
    out->limit = a->limit;
    out->n_allocs = a->n_allocs;
    out->n_frees = a->n_frees;
    out->n_cache_hits = a->n_cache_hits;
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
    release_free_segments(allocator);
    pthread_mutex_unlock(&allocator->mutex);
    return EG_OK;
}

/* A limit below what is reserved now trims the cache; memory in use stays, and later requests
 * fail until enough of it is freed. */
eg_status eg__allocator_set_limit(eg__allocator *allocator, size_t bytes) {
    if (!allocator) return eg__error(EG_ERR_NULL_ARGUMENT, "allocator_set_limit: NULL allocator");
    pthread_mutex_lock(&allocator->mutex);
    allocator->limit = bytes;
    if (bytes && allocator->reserved > bytes) release_free_segments(allocator);
    pthread_mutex_unlock(&allocator->mutex);
    return EG_OK;
}

void eg__allocator_reset_peak(eg__allocator *allocator) {
    if (!allocator) return;
    pthread_mutex_lock(&allocator->mutex);
    allocator->peak = allocator->in_use;
    pthread_mutex_unlock(&allocator->mutex);
}

eg__allocator_kind eg__allocator_get_kind(const eg__allocator *allocator) {
    return allocator ? allocator->kind : EG__ALLOCATOR_CACHING;
}
