/* Eagle — memory: the per-device caching allocator's statistics and controls.
 *
 * Each device has one caching allocator (best fit over size-class bins, blocks split and
 * coalesced, 64-byte aligned). EG_ALLOCATOR=system in the environment (read once, at first use)
 * replaces it with plain aligned malloc/free so the two can be compared; the statistics are kept
 * either way. EG_MEMORY_LIMIT=<bytes>[K|M|G] (1048576, 512M, 1.5G; 0 or empty for none) sets a
 * limit on each host device when it is first used. A value that is not such a size (abc, -1,
 * 512MB, 1e9) is an error, never ignored: the host device then allocates nothing, and every call
 * that needs its memory fails with EG_ERR_INVALID_ARGUMENT naming the value, until it is fixed
 * or unset (the environment is read again at the next use). Host memory the CPU
 * allocator takes from the system in blocks of 2 MiB or more is advised onto transparent huge
 * pages (madvise MADV_HUGEPAGE; fewer TLB misses on large tensors); EG_HUGEPAGES=0 turns that off.
 *
 * In front of the CPU's caching allocator each thread keeps a few freed blocks of up to 4 KiB
 * (two per 64-byte size class) for its next requests of the same size: small ops then take no
 * lock. Such blocks count as cached (not in use); trim, a limit that trims, a request that would
 * otherwise fail and the thread's exit give them back to the shared cache. */
#ifndef EAGLE_MEMORY_H
#define EAGLE_MEMORY_H

#include <stddef.h>
#include <stdint.h>

#include "eagle/device.h"
#include "eagle/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct eg_memory_stats {
    size_t bytes_in_use;       /* handed out to tensors now (rounded sizes) */
    size_t peak_bytes_in_use;  /* maximum of bytes_in_use since start or eg_memory_reset_peak */
    size_t bytes_reserved;     /* obtained from the system and not given back */
    size_t bytes_cached;       /* reserved but free: reserved - in_use */
    size_t largest_free_block; /* biggest single free block in the cache */
    size_t limit;              /* 0 = none */
    uint64_t n_allocs;         /* requests served */
    uint64_t n_frees;
    uint64_t n_cache_hits;     /* requests served without asking the system */
    uint64_t n_system_allocs;  /* calls to the system allocator */
    uint64_t n_system_frees;
    double fragmentation;      /* 1 - largest_free_block / bytes_cached (0 when nothing cached) */
} eg_memory_stats;

/* Fills *out for device (NULL = CPU). */
eg_status eg_memory_stats_get(const eg_device *device, eg_memory_stats *out);
/* Preallocates one block of at least `bytes` into the cache so later allocations need no system
 * call. Counts against the limit. */
eg_status eg_memory_reserve(const eg_device *device, size_t bytes);
/* Gives every wholly free cached segment back to the system (every thread's small-block cache
 * is emptied first). */
eg_status eg_memory_trim(const eg_device *device);
/* Caps bytes_reserved; 0 removes the cap. When a request would pass it, cached free segments are
 * trimmed first; if that is not enough the request fails with EG_ERR_OUT_OF_MEMORY and a message
 * giving requested, in use, cached, limit and largest free block. The program can go on.
 * A limit below what is reserved now trims the cache first (as eg_memory_trim); if the memory
 * still reserved (segments holding live tensors) is above the limit, the call fails with
 * EG_ERR_INVALID_ARGUMENT naming the limit, what is reserved and in use, and the previous limit
 * stays: a limit that succeeded always holds. */
eg_status eg_memory_set_limit(const eg_device *device, size_t bytes);
/* Sets peak_bytes_in_use to the current bytes_in_use. */
void eg_memory_reset_peak(const eg_device *device);
/* "caching" or "system". */
const char *eg_memory_allocator_name(const eg_device *device);
/* Writes a human-readable multi-line report of the stats. */
eg_status eg_memory_format_stats(const eg_device *device, char *buf, size_t buf_size);

#if !defined(EG_NO_CALLSITE)
#define eg_memory_allocator_name(...) EG_CALLSITE_(eg_memory_allocator_name(__VA_ARGS__))
#define eg_memory_reset_peak(...)     EG_CALLSITE_(eg_memory_reset_peak(__VA_ARGS__))

#define eg_memory_stats_get(...) EG_CALLSITE_(eg_memory_stats_get(__VA_ARGS__))
#define eg_memory_reserve(...) EG_CALLSITE_(eg_memory_reserve(__VA_ARGS__))
#define eg_memory_trim(...) EG_CALLSITE_(eg_memory_trim(__VA_ARGS__))
#define eg_memory_set_limit(...) EG_CALLSITE_(eg_memory_set_limit(__VA_ARGS__))
#define eg_memory_format_stats(...) EG_CALLSITE_(eg_memory_format_stats(__VA_ARGS__))
#endif

#ifdef __cplusplus
}
#endif
#endif
