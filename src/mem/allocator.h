/* Internal: the per-device allocator (caching or system) behind the device vtable.
 *
 * A device supplies a raw allocator (for the CPU: aligned malloc/free; for CUDA: cudaMalloc).
 * The caching allocator obtains large segments from it and carves them into blocks: best fit over
 * size-class bins, splitting a larger free block when it fits, coalescing neighbours on free
 * (the BFC / PyTorch caching-allocator family). Every block is 64-byte aligned and its size is a
 * multiple of 64. All functions are thread-safe. */
#ifndef EAGLE_SRC_MEM_ALLOCATOR_H
#define EAGLE_SRC_MEM_ALLOCATOR_H

#include <stdbool.h>
#include <stddef.h>

#include "eagle/memory.h"

typedef struct eg__raw_allocator {
    /* 64-byte aligned memory of `bytes`, or NULL when the system has none. */
    void *(*alloc)(void *context, size_t bytes);
    void (*free)(void *context, void *pointer, size_t bytes);
    void *context;
    /* Optional (NULL: none): what the memory's owner says is free, for out-of-memory messages
     * ("the driver reports 1.20 GiB free of 139.80 GiB"), written into out (size bytes). */
    void (*describe_free)(void *context, char *out, size_t size);
} eg__raw_allocator;

typedef enum eg__allocator_kind {
    EG__ALLOCATOR_CACHING = 0,
    EG__ALLOCATOR_SYSTEM = 1 /* every alloc/free goes to the raw allocator; stats still kept */
} eg__allocator_kind;

typedef struct eg__allocator eg__allocator;

/* NULL only when out of host memory. device_name is used in error messages (not copied: it must
 * outlive the allocator). */
eg__allocator *eg__allocator_create(eg__raw_allocator raw, eg__allocator_kind kind,
                                    const char *device_name);
/* Puts a small per-thread cache in front of a caching allocator (no effect on the system
 * kind): each thread keeps a few freed blocks of up to 4 KiB per 64-byte size class and hands
 * them out again without the mutex or a best-fit search. Statistics stay exact (cached blocks
 * count as cached, not in use); trim, a limit that trims, a request that would fail and destroy
 * empty every thread's cache first, and a thread's cache is emptied when it exits. host_memory:
 * the blocks are host memory, which AddressSanitizer builds then poison while cached. Call it
 * right after creation, before the allocator is shared. */
void eg__allocator_enable_thread_caches(eg__allocator *allocator, bool host_memory);
/* Rounds every request up to a multiple of `bytes` (a power of two, at least 64, the default):
 * 512 for GPU memory, like PyTorch's CUDA allocator, so that nearby sizes share blocks and every
 * block starts on an address vector loads like. EG_ERR_INVALID_ARGUMENT otherwise. Call it right
 * after creation, before the allocator is shared. */
eg_status eg__allocator_set_rounding(eg__allocator *allocator, size_t bytes);
/* Gives every segment back to the raw allocator, blocks in use included. No other thread may
 * use the allocator meanwhile (threads may still hold its emptied caches: they are detached). */
void eg__allocator_destroy(eg__allocator *allocator);

/* Memory for `bytes` (0 is allowed and returns a valid minimal block). *handle receives what
 * eg__allocator_free needs. On failure returns NULL and raises EG_ERR_OUT_OF_MEMORY whose message
 * gives: requested, in use, cached, reserved, limit, largest free block. */
void *eg__allocator_alloc(eg__allocator *allocator, size_t bytes, void **handle);
/* Returns a block; NULL handle is ignored. */
void eg__allocator_free(eg__allocator *allocator, void *handle);

void eg__allocator_stats(eg__allocator *allocator, eg_memory_stats *out);
eg_status eg__allocator_reserve(eg__allocator *allocator, size_t bytes);
eg_status eg__allocator_trim(eg__allocator *allocator);
eg_status eg__allocator_set_limit(eg__allocator *allocator, size_t bytes);
void eg__allocator_reset_peak(eg__allocator *allocator);
eg__allocator_kind eg__allocator_get_kind(const eg__allocator *allocator);

#endif
