#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "core/tensor_internal.h"
#include "device/device.h"

/* Ids are unique in the process; tapes and lazy plans use them only as hash keys, so each thread
 * takes them from the global counter in batches (one atomic add per ID_BATCH tensors). */
#define ID_BATCH 1024
static atomic_uint_fast64_t next_tensor_id = 1;
static _Thread_local uint64_t thread_next_id, thread_id_end;

static uint64_t tensor_id_new(void) {
    if (__builtin_expect(thread_next_id == thread_id_end, 0)) {
        thread_next_id = atomic_fetch_add_explicit(&next_tensor_id, ID_BATCH, memory_order_relaxed);
        thread_id_end = thread_next_id + ID_BATCH;
    }
    return thread_next_id++;
}

uint64_t eg__tensor_id_watermark(void) {
    /* With the batch used up the next tensor takes a new one from the global counter, at or
     * beyond where the counter stands now, and every earlier id of this thread lies below it. */
    if (thread_next_id == thread_id_end)
        return atomic_load_explicit(&next_tensor_id, memory_order_relaxed);
    return thread_next_id;
}

char *eg__tensor_made_at(const eg_tensor *t, char *buf, size_t size) {
    if (t->created_file)
        snprintf(buf, size, "%s:%d", eg__file_base_name(t->created_file), t->created_line);
    else
        snprintf(buf, size, "an unknown place");
    return buf;
}

int64_t eg__shape_n_elems(int n_dims, const int64_t *shape) {
    int64_t n = 1;
    for (int i = 0; i < n_dims; i++) {
        if (shape[i] < 0) return -1;
        if (shape[i] != 0 && n > INT64_MAX / shape[i]) return -1;
        n *= shape[i];
    }
    return n;
}

void eg__contiguous_strides(int n_dims, const int64_t *shape, int64_t *strides) {
    int64_t stride = 1;
    for (int i = n_dims - 1; i >= 0; i--) {
        strides[i] = stride;
        stride *= shape[i] > 0 ? shape[i] : 1;
    }
}

char *eg__shape_format(int n_dims, const int64_t *shape, char *buf, size_t size) {
    if (size == 0) return buf;
    size_t used = (size_t)snprintf(buf, size, "(");
    for (int i = 0; i < n_dims && used < size; i++)
        used +=
            (size_t)snprintf(buf + used, size - used, i ? ", %lld" : "%lld", (long long)shape[i]);
    if (used < size) snprintf(buf + used, size - used, n_dims == 1 ? ",)" : ")");
    return buf;
}

bool eg__normalize_axis(int *axis, int n_dims) {
    int a = *axis < 0 ? *axis + n_dims : *axis;
    if (a < 0 || a >= n_dims) return false;
    *axis = a;
    return true;
}

bool eg__check_arg_failed(const eg_tensor *t, const char *op, int index) {
    if (t && t->row_values && !t->debug_released) {
        eg__error(EG_ERR_INVALID_ARGUMENT,
                  "%s: argument %d is a row-sparse gradient (some rows of a table); "
                  "eg_row_sparse_to_dense makes it a dense tensor",
                  op, index);
    } else if (t) {
        char what[96];
        snprintf(what, sizeof what, "%s (argument %d)", op, index);
        eg__debug_released_error(t, what, false);
    } else {
        eg__error(EG_ERR_NULL_ARGUMENT, "%s: argument %d is NULL", op, index);
    }
    return false;
}

/* A fresh tensor and its storage share one host block: one allocation per op result. Views and
 * lazy tensors use the same blocks (their storage part unused), so all tensor headers come from
 * one size. */
typedef struct tensor_block {
    eg_tensor tensor;
    eg__storage storage;
} tensor_block;

/* Each thread keeps up to BLOCK_CACHE_MAX freed blocks for its next tensors: a pop instead of a
 * malloc, a push instead of a free. A block freed by another thread joins that thread's cache
 * (plain host memory: any thread may reuse it). The cache is emptied when its thread exits; the
 * main thread's, still reachable from its thread-local storage, goes with the process. Cached
 * blocks are poisoned under AddressSanitizer, so a use after free is still reported. */
#define BLOCK_CACHE_MAX 64
typedef struct block_cache {
    int count;
    bool armed; /* the thread-exit destructor is registered */
    tensor_block *items[BLOCK_CACHE_MAX];
} block_cache;
static _Thread_local block_cache thread_blocks;
static pthread_key_t block_cache_key;
static pthread_once_t block_cache_key_once = PTHREAD_ONCE_INIT;
static bool block_cache_key_ok;

static void block_cache_release(void *unused) {
    (void)unused;
    block_cache *cache = &thread_blocks;
    while (cache->count > 0) {
        tensor_block *block = cache->items[--cache->count];
        EG_UNPOISON(block, sizeof *block);
        free(block);
    }
    cache->armed = false;
}

void eg__tensor_release_thread_cache(void) {
    block_cache_release(NULL);
}

static void block_cache_create_key(void) {
    block_cache_key_ok = pthread_key_create(&block_cache_key, block_cache_release) == 0;
}

static inline tensor_block *block_new(void) {
    block_cache *cache = &thread_blocks;
    if (__builtin_expect(cache->count > 0, 1)) {
        tensor_block *block = cache->items[--cache->count];
        EG_UNPOISON(block, sizeof *block);
        return block;
    }
    return malloc(sizeof(tensor_block));
}

static __attribute__((noinline)) void block_free_slow(void *memory) {
    block_cache *cache = &thread_blocks;
    if (!cache->armed && cache->count < BLOCK_CACHE_MAX) {
        pthread_once(&block_cache_key_once, block_cache_create_key);
        cache->armed = block_cache_key_ok && pthread_setspecific(block_cache_key, (void *)1) == 0;
        if (cache->armed) {
            EG_POISON(memory, sizeof(tensor_block));
            cache->items[cache->count++] = memory;
            return;
        }
    }
    free(memory);
}

static inline void block_free(void *memory) {
    block_cache *cache = &thread_blocks;
    if (__builtin_expect(cache->armed && cache->count < BLOCK_CACHE_MAX, 1)) {
        EG_POISON(memory, sizeof(tensor_block));
        cache->items[cache->count++] = memory;
        return;
    }
    block_free_slow(memory);
}

/* Debug mode's quarantine: the blocks of the last QUARANTINE_MAX tensors it retired, never
 * reused while here, so that a released tensor's header keeps saying so (a pointer to it cannot
 * meet a new tensor). The oldest goes back to malloc when a new one arrives: the bound keeps a
 * long run's memory in check (QUARANTINE_MAX blocks of 320 bytes: 20 MiB). */
#define QUARANTINE_MAX 65536
static pthread_mutex_t quarantine_mutex = PTHREAD_MUTEX_INITIALIZER;
static tensor_block **quarantine_ring; /* reachable, so leak checkers do not report the blocks */
static size_t quarantine_next, quarantine_count;

static void quarantine(tensor_block *block) {
    tensor_block *evicted = NULL;
    pthread_mutex_lock(&quarantine_mutex);
    if (!quarantine_ring) quarantine_ring = calloc(QUARANTINE_MAX, sizeof *quarantine_ring);
    if (quarantine_ring) {
        if (quarantine_count == QUARANTINE_MAX)
            evicted = quarantine_ring[quarantine_next];
        else
            quarantine_count++;
        quarantine_ring[quarantine_next] = block;
        quarantine_next = (quarantine_next + 1) % QUARANTINE_MAX;
    } else {
        evicted = block; /* no memory for the ring: the block cannot be kept aside */
    }
    pthread_mutex_unlock(&quarantine_mutex);
    if (evicted) {
        EG_UNPOISON(evicted, sizeof *evicted);
        free(evicted);
    }
}

/* A storage block whose tensor debug mode retired goes to the quarantine, not back to use. */
static inline void container_free(tensor_block *block) {
    if (__builtin_expect(block->tensor.debug_released, 0)) {
        EG_POISON(&block->storage, sizeof block->storage);
        quarantine(block);
    } else {
        block_free(block);
    }
}

/* The allocator of the device this thread used last: a device's allocator never changes once
 * it exists, and asking the device costs a call and a pthread_once on every tensor. */
static _Thread_local const eg_device *last_device;
static _Thread_local eg__allocator *last_allocator;

static inline eg__allocator *allocator_of(const eg_device *device) {
    if (__builtin_expect(device == last_device, 1)) return last_allocator;
    eg__allocator *allocator = device->get_allocator(device);
    if (allocator) {
        last_device = device;
        last_allocator = allocator;
    }
    return allocator;
}

/* Zeroes a header with plain vector stores, 64 bytes at a time: GCC turns a larger constant
 * memset (or `*t = (eg_tensor){0}`) into rep stos, which costs more than the whole rest of a
 * small op's tensor set-up. */
static inline void zero_header(eg_tensor *t) {
    char *p = (char *)t;
    size_t at = 0;
    for (; at + 64 <= sizeof *t; at += 64) memset(p + at, 0, 64);
    if (at < sizeof *t) memset(p + at, 0, sizeof *t - at);
}

static void tensor_init(eg_tensor *t) {
    zero_header(t);
    atomic_init(&t->refcount, 1);
    t->id = tensor_id_new();
    eg__callsite_get(&t->created_file, &t->created_line);
}

static eg_tensor *tensor_struct_new(void) {
    eg_tensor *t = (eg_tensor *)block_new();
    if (!t) {
        eg__error(EG_ERR_OUT_OF_MEMORY, "out of host memory for a tensor header");
        return NULL;
    }
    tensor_init(t);
    return t;
}

/* eg__shape_n_elems and eg__contiguous_strides in one pass. */
static int64_t contiguous_layout(int n_dims, const int64_t *shape, int64_t *strides) {
    int64_t n = 1;
    uint64_t stride = 1; /* unsigned: a size-0 tensor may have absurd other sizes */
    for (int i = n_dims - 1; i >= 0; i--) {
        int64_t size = shape[i];
        strides[i] = (int64_t)stride;
        if (size < 0 || (size != 0 && n > INT64_MAX / size)) return -1;
        n *= size;
        stride *= size > 0 ? (uint64_t)size : 1u;
    }
    return n;
}

/* The one place a storage's fields are set (every constructor below comes here). */
static void storage_init(eg__storage *storage, void *data, size_t n_bytes, const eg_device *device,
                         void *allocation, void *container, void (*release)(void *context),
                         void *context) {
    atomic_init(&storage->refcount, 1);
    storage->data = data;
    storage->n_bytes = n_bytes;
    storage->device = device;
    storage->allocation = allocation;
    storage->container = container;
    storage->release = release;
    storage->release_context = context;
}

/* A storage of n_bytes from device's allocator; false with the allocator's error. */
static bool storage_init_allocated(eg__storage *storage, const eg_device *device, size_t n_bytes,
                                   void *container) {
    eg__allocator *allocator = allocator_of(device);
    void *allocation = NULL;
    void *data = allocator ? eg__allocator_alloc(allocator, n_bytes, &allocation) : NULL;
    if (!data) return false;
    storage_init(storage, data, n_bytes, device, allocation, container, NULL, NULL);
    return true;
}

eg_tensor *eg__tensor_alloc(eg_dtype dtype, int n_dims, const int64_t *shape,
                            const eg_device *device) {
    if ((unsigned)dtype >= EG_DTYPE_COUNT) {
        eg__error(EG_ERR_DTYPE, "invalid dtype %d", (int)dtype);
        return NULL;
    }
    if (n_dims < 0 || n_dims > EG_MAX_DIMS || (n_dims > 0 && !shape)) {
        eg__error(EG_ERR_SHAPE, "invalid number of dimensions %d (0..%d, shape not NULL)", n_dims,
                  EG_MAX_DIMS);
        return NULL;
    }
    int64_t strides[EG_MAX_DIMS];
    int64_t n_elems = contiguous_layout(n_dims, shape, strides);
    if (n_elems < 0 || n_elems > (int64_t)(SIZE_MAX / 16)) {
        char buf[160];
        eg__error(EG_ERR_SHAPE, "invalid shape %s", eg__shape_format(n_dims, shape, buf, 160));
        return NULL;
    }
    if (!device) device = eg__device_current();
    size_t n_bytes = (size_t)n_elems * eg__dtype_size(dtype);
    tensor_block *block = block_new();
    if (!block) {
        eg__error(EG_ERR_OUT_OF_MEMORY, "out of host memory for a tensor header");
        return NULL;
    }
    eg__storage *storage = &block->storage;
    if (!storage_init_allocated(storage, device, n_bytes, block)) {
        block_free(block);
        return NULL;
    }
    eg_tensor *t = &block->tensor;
    tensor_init(t);
    t->dtype = dtype;
    t->n_dims = n_dims;
    for (int d = 0; d < n_dims; d++) { /* a loop: memcpy calls cost more for a few dims */
        t->shape[d] = shape[d];
        t->strides[d] = strides[d];
    }
    t->n_elems = n_elems;
    t->storage = storage;
    t->device = device;
    eg__debug_track(t);
    eg__scope_register(t);
    return t;
}

eg_tensor *eg__tensor_lazy(const eg__meta *meta, const eg_device *device) {
    eg_tensor *t = tensor_struct_new();
    if (!t) return NULL;
    t->dtype = meta->dtype;
    t->n_dims = meta->n_dims;
    if (meta->n_dims) memcpy(t->shape, meta->shape, (size_t)meta->n_dims * sizeof *meta->shape);
    if (meta->is_view) {
        if (meta->n_dims)
            memcpy(t->strides, meta->strides, (size_t)meta->n_dims * sizeof *meta->strides);
        t->offset = meta->offset;
    } else {
        eg__contiguous_strides(meta->n_dims, meta->shape, t->strides);
    }
    t->n_elems = eg__shape_n_elems(meta->n_dims, meta->shape);
    t->device = device ? device : eg__device_current();
    eg__debug_track(t);
    eg__scope_register(t);
    return t;
}

eg_tensor *eg__row_sparse_new(const eg_tensor *indices, const eg_tensor *values, int n_dims,
                              const int64_t *shape) {
    if (!indices || !values) return NULL;
    eg_tensor *t = tensor_struct_new();
    if (!t) return NULL;
    t->dtype = values->dtype;
    t->n_dims = n_dims;
    memcpy(t->shape, shape, (size_t)n_dims * sizeof *shape);
    t->n_elems = eg__shape_n_elems(n_dims, shape);
    eg__contiguous_strides(n_dims, shape, t->strides);
    t->device = values->device;
    eg__ref(indices);
    eg__ref(values);
    t->row_indices = (eg_tensor *)indices;
    t->row_values = (eg_tensor *)values;
    eg__debug_track(t);
    eg__scope_register(t);
    return t;
}

bool eg_tensor_is_row_sparse(const eg_tensor *t) {
    return t && t->row_values;
}

eg_tensor *eg_row_sparse_indices(const eg_tensor *t) {
    return t ? t->row_indices : NULL;
}

eg_tensor *eg_row_sparse_values(const eg_tensor *t) {
    return t ? t->row_values : NULL;
}

eg__storage *eg__storage_new(const eg_device *device, size_t n_bytes) {
    eg__storage *storage = malloc(sizeof *storage);
    if (!storage) {
        eg__error(EG_ERR_OUT_OF_MEMORY, "out of host memory for a storage");
        return NULL;
    }
    if (!storage_init_allocated(storage, device, n_bytes, NULL)) {
        free(storage);
        return NULL;
    }
    return storage;
}

eg_status eg__tensor_attach_storage(eg_tensor *t) {
    t->storage = eg__storage_new(t->device, (size_t)t->n_elems * eg_dtype_size(t->dtype));
    return t->storage ? EG_OK : eg_last_status();
}

void eg__tensor_detach_storage(eg_tensor *t) {
    if (!t->storage) return;
    eg__storage *storage = t->storage;
    t->storage = NULL;
    eg__storage_unref(storage);
}

eg_tensor *eg__tensor_view(const eg_tensor *base, int n_dims, const int64_t *shape,
                           const int64_t *strides, int64_t offset) {
    eg_tensor *t = tensor_struct_new();
    if (!t) return NULL;
    t->dtype = base->dtype;
    t->n_dims = n_dims;
    if (n_dims) {
        memcpy(t->shape, shape, (size_t)n_dims * sizeof *shape);
        memcpy(t->strides, strides, (size_t)n_dims * sizeof *strides);
    }
    t->offset = offset;
    t->n_elems = eg__shape_n_elems(n_dims, shape);
    t->storage = base->storage;
    atomic_fetch_add_explicit(&base->storage->refcount, 1, memory_order_relaxed);
    t->device = base->device;
    eg__debug_track(t);
    eg__scope_register(t);
    return t;
}

eg_tensor *eg__tensor_from_external(void *data, size_t n_bytes, const eg_device *device,
                                    eg_dtype dtype, int n_dims, const int64_t *shape,
                                    const int64_t *strides, int64_t offset,
                                    void (*release)(void *context), void *context) {
    if ((unsigned)dtype >= EG_DTYPE_COUNT) {
        eg__error(EG_ERR_DTYPE, "invalid dtype %d", (int)dtype);
        return NULL;
    }
    if (n_dims < 0 || n_dims > EG_MAX_DIMS || (n_dims > 0 && (!shape || !strides))) {
        eg__error(EG_ERR_SHAPE, "invalid number of dimensions %d (0..%d, shape not NULL)", n_dims,
                  EG_MAX_DIMS);
        return NULL;
    }
    tensor_block *block = block_new();
    if (!block) {
        eg__error(EG_ERR_OUT_OF_MEMORY, "out of host memory for a tensor header");
        return NULL;
    }
    eg__storage *storage = &block->storage;
    storage_init(storage, data, n_bytes, device ? device : eg__host(), NULL, block, release,
                 context);
    eg_tensor *t = &block->tensor;
    tensor_init(t);
    t->dtype = dtype;
    t->n_dims = n_dims;
    if (n_dims) {
        memcpy(t->shape, shape, (size_t)n_dims * sizeof *shape);
        memcpy(t->strides, strides, (size_t)n_dims * sizeof *strides);
    }
    t->offset = offset;
    t->n_elems = eg__shape_n_elems(n_dims, shape);
    t->storage = storage;
    t->device = storage->device;
    eg__debug_track(t);
    eg__scope_register(t);
    return t;
}

eg_status eg__realize_deferred(const eg_tensor *t) {
    /* a retired tensor has no storage: every read of a value comes here */
    if (__builtin_expect(t->debug_released, 0)) return eg__debug_released_error(t, NULL, false);
    if (t->row_values)
        return eg__error(EG_ERR_INVALID_ARGUMENT,
                         "a row-sparse gradient has no dense values to read; "
                         "eg_row_sparse_to_dense makes it a dense tensor");
    EG_ASSERT(t->lazy, return EG_ERR_INTERNAL);
    return eg__attachment_ops_of(t->lazy)->realize(t);
}

void eg__storage_ref(eg__storage *storage) {
    atomic_fetch_add_explicit(&storage->refcount, 1, memory_order_relaxed);
}

/* True when the caller's reference was the last one. Holding the only reference, nobody else
 * can change the count (taking a reference needs one), so the common case of a result released
 * by its one owner needs no locked instruction; acquire orders other threads' earlier releases
 * before the free, as the decrement's acq_rel does. */
static inline bool drop_reference(atomic_long *refcount) {
    if (atomic_load_explicit(refcount, memory_order_acquire) == 1) return true;
    return atomic_fetch_sub_explicit(refcount, 1, memory_order_acq_rel) == 1;
}

void eg__storage_unref(eg__storage *storage) {
    if (!drop_reference(&storage->refcount)) return;
    if (storage->allocation) eg__allocator_free(allocator_of(storage->device), storage->allocation);
    if (storage->release) storage->release(storage->release_context);
    if (storage->container)
        container_free(storage->container);
    else
        free(storage); /* a storage made alone (eg__tensor_attach_storage, graph arenas) */
}

void eg__ref(const eg_tensor *t) {
    if (t) atomic_fetch_add_explicit(&((eg_tensor *)t)->refcount, 1, memory_order_relaxed);
}

/* A second release of a tensor debug mode retired (its count is 0: the decrement found no
 * reference to drop). Without debug mode the header may already be another tensor's: nothing
 * can be said. */
static __attribute__((noinline)) void released_again(eg_tensor *t) {
    if (!t->debug_released) return;
    atomic_store_explicit(&t->refcount, 0, memory_order_relaxed);
    eg__debug_released_error(t, "release", true);
}

/* Debug mode's end of a tensor: its header is kept aside and poisoned instead of reused, so
 * that a later use or release of it is an error naming where it was made and released. */
static __attribute__((noinline)) void tensor_retire(eg_tensor *t, bool in_storage_block,
                                                    eg__release_cause cause) {
    if (t->debug_released) { /* referenced after its release (eg__ref), then released: kept */
        atomic_store_explicit(&t->refcount, 0, memory_order_relaxed);
        eg__debug_released_error(t, NULL, false);
        return;
    }
    eg__debug_untrack(t);
    eg__callsite_get(&t->released_file, &t->released_line);
    t->released_cause = (unsigned char)cause;
    t->debug_released = true;
    atomic_store_explicit(&t->refcount, 0, memory_order_relaxed);
    eg__storage *storage = t->storage;
    /* no storage and no lazy node: every op and every read takes its slow path and meets the
     * mark (eg__realize_deferred, eg__check_arg, eg__execute) */
    t->storage = NULL;
    t->lazy = NULL;
    t->variable = NULL;
    /* A block that holds the storage too goes to the quarantine when the storage's last view
     * does (container_free); that may be now. */
    if (storage) eg__storage_unref(storage);
    if (!in_storage_block) quarantine((tensor_block *)t);
}

static inline __attribute__((always_inline)) void unref(eg_tensor *t, eg__release_cause cause) {
    if (!t) return;
    /* drop_reference, with the check for a count already at 0 on its slow path only */
    if (atomic_load_explicit(&t->refcount, memory_order_acquire) != 1) {
        long before = atomic_fetch_sub_explicit(&t->refcount, 1, memory_order_acq_rel);
        if (__builtin_expect(before <= 0, 0)) released_again(t);
        if (before != 1) return;
    }
    if (t->scope) eg__scope_forget(t);
    if (t->variable) eg__attachment_ops_of(t->variable)->free(t->variable);
    if (t->lazy) eg__attachment_ops_of(t->lazy)->free(t->lazy);
    if (t->row_values) {
        eg__unref(t->row_indices);
        eg__unref(t->row_values);
        t->row_indices = t->row_values = NULL;
    }
    /* A tensor allocated with its storage lives in the storage's block: the block goes when
     * the last view of the storage does. */
    bool in_storage_block = t->storage && t->storage->container == (void *)t;
    if (__builtin_expect(t->debug_tracked, 0)) {
        tensor_retire(t, in_storage_block, cause);
        return;
    }
    if (t->storage) eg__storage_unref(t->storage);
    if (!in_storage_block) block_free(t);
}

void eg__unref(const eg_tensor *t) {
    unref((eg_tensor *)t, EG__RELEASED_BY_LIBRARY);
}

void eg__unref_because(const eg_tensor *t, eg__release_cause cause) {
    unref((eg_tensor *)t, cause);
}

eg_tensor *eg_retain(eg_tensor *t) {
    if (t && __builtin_expect(t->debug_released, 0)) {
        eg__debug_released_error(t, "retain", false);
        return t; /* no reference: the header stays kept aside */
    }
    eg__ref(t);
    return t;
}

void eg_release(eg_tensor *t) {
    if (!t) return;
    if (t->scope) eg__scope_forget(t);
    unref(t, EG__RELEASED_BY_USER);
}

/* ---- queries ---- */

int eg_tensor_n_dims(const eg_tensor *t) {
    return t ? t->n_dims : 0;
}
const int64_t *eg_tensor_shape(const eg_tensor *t) {
    return t ? t->shape : NULL;
}
const int64_t *eg_tensor_strides(const eg_tensor *t) {
    return t ? t->strides : NULL;
}
int64_t eg_tensor_n_elems(const eg_tensor *t) {
    return t ? t->n_elems : 0;
}
eg_dtype eg_tensor_dtype(const eg_tensor *t) {
    return t ? t->dtype : EG_DTYPE_F32;
}
const eg_device *eg_tensor_device(const eg_tensor *t) {
    return t ? t->device : NULL;
}
bool eg_tensor_is_contiguous(const eg_tensor *t) {
    return t && eg__is_contiguous(t);
}

bool eg_tensor_shares_storage(const eg_tensor *a, const eg_tensor *b) {
    return a && b && a->storage && a->storage == b->storage;
}

int64_t eg_tensor_dim(const eg_tensor *t, int axis) {
    if (!eg__check_arg(t, "tensor_dim", 0)) return -1;
    if (!eg__normalize_axis(&axis, t->n_dims)) {
        eg__error(EG_ERR_AXIS, "tensor_dim: axis %d out of range for %d dims", axis, t->n_dims);
        return -1;
    }
    return t->shape[axis];
}

char *eg_tensor_shape_string(const eg_tensor *t, char *buf, size_t buf_size) {
    if (!t) {
        if (buf_size) snprintf(buf, buf_size, "(null)");
        return buf;
    }
    return eg__shape_format(t->n_dims, t->shape, buf, buf_size);
}

/* ---- creation ---- */

void *eg__staging_begin(eg_tensor *t, eg__staging *staging) {
    staging->staged = !eg__device_is_host(t->device);
    if (!staging->staged) return staging->host = eg__data(t);
    staging->host = malloc(t->storage->n_bytes ? t->storage->n_bytes : 1);
    if (!staging->host)
        eg__error(EG_ERR_OUT_OF_MEMORY, "out of host memory staging a tensor for %s",
                  t->device->name);
    return staging->host;
}

eg_status eg__staging_finish(eg_tensor *t, eg__staging *staging) {
    if (!staging->staged) return EG_OK;
    eg_status status = eg__device_copy(t->device, eg__data(t), eg__host(), staging->host,
                                       (size_t)t->n_elems * eg_dtype_size(t->dtype));
    free(staging->host);
    staging->host = NULL;
    return status;
}

eg_status eg__read_element(const eg_tensor *t, int64_t offset, void *out) {
    size_t size = eg_dtype_size(t->dtype);
    const char *element = (const char *)eg__data(t) + offset * (int64_t)size;
    if (eg__device_is_host(t->device)) {
        memcpy(out, element, size);
        return EG_OK;
    }
    return eg__device_copy(eg__host(), out, t->device, element, size);
}

/* A freshly made tensor whose staged fill failed: released, NULL returned (the error is set). */
static eg_tensor *finish_creation(eg_tensor *t, eg__staging *staging) {
    if (eg__staging_finish(t, staging) == EG_OK) return t;
    eg_release(t);
    return NULL;
}

static void fill_from_double(eg_tensor *t, void *data, double value) {
    if (t->dtype == EG_DTYPE_F32) {
        float v = (float)value, *p = data;
        for (int64_t i = 0; i < t->n_elems; i++) p[i] = v;
        return;
    }
    if (t->n_elems == 0) return;
    eg__store_from_double(data, t->dtype, 0, value);
    size_t size = eg_dtype_size(t->dtype);
    for (int64_t i = 1; i < t->n_elems; i++) memcpy((char *)data + (size_t)i * size, data, size);
}

eg_tensor *eg_empty(eg_dtype dtype, int n_dims, const int64_t *shape) {
    return eg__tensor_alloc(dtype, n_dims, shape, NULL);
}

eg_tensor *eg__full_on(const eg_device *device, eg_dtype dtype, int n_dims, const int64_t *shape,
                       double value) {
    eg_tensor *t = eg__tensor_alloc(dtype, n_dims, shape, device);
    if (!t) return NULL;
    eg__staging staging;
    void *data = eg__staging_begin(t, &staging);
    if (!data) return finish_creation(t, &staging);
    fill_from_double(t, data, value);
    return finish_creation(t, &staging);
}

eg_tensor *eg_full(eg_dtype dtype, int n_dims, const int64_t *shape, double value) {
    return eg__full_on(NULL, dtype, n_dims, shape, value);
}

eg_tensor *eg_zeros(eg_dtype dtype, int n_dims, const int64_t *shape) {
    eg_tensor *t = eg__tensor_alloc(dtype, n_dims, shape, NULL);
    if (!t) return NULL;
    if (eg__device_is_host(t->device)) {
        memset(eg__data(t), 0, t->storage->n_bytes);
    } else if (t->device->memset(t->device, eg__data(t), 0, t->storage->n_bytes, NULL) != EG_OK) {
        eg_release(t);
        return NULL;
    }
    return t;
}

eg_tensor *eg_ones(eg_dtype dtype, int n_dims, const int64_t *shape) {
    return eg_full(dtype, n_dims, shape, 1.0);
}

eg_tensor *eg_scalar(eg_dtype dtype, double value) {
    return eg_full(dtype, 0, NULL, value);
}

eg_tensor *eg_full_like(const eg_tensor *like, double value) {
    if (!eg__check_arg(like, "full_like", 0)) return NULL;
    return eg__full_on(like->device, like->dtype, like->n_dims, like->shape, value);
}

eg_tensor *eg_tensor_from_data(const void *data, eg_dtype dtype, int n_dims, const int64_t *shape) {
    if (!data) {
        eg__error(EG_ERR_NULL_ARGUMENT, "tensor_from_data: data is NULL");
        return NULL;
    }
    eg_tensor *t = eg__tensor_alloc(dtype, n_dims, shape, NULL);
    if (!t || !t->storage->n_bytes) return t;
    if (eg__device_is_host(t->device)) {
        memcpy(eg__data(t), data, t->storage->n_bytes);
    } else if (eg__device_copy(t->device, eg__data(t), eg__host(), data, t->storage->n_bytes) !=
               EG_OK) {
        eg_release(t);
        return NULL;
    }
    return t;
}

eg_tensor *eg_arange(double start, double stop, double step, eg_dtype dtype) {
    if (step == 0 || !isfinite(start) || !isfinite(stop) || !isfinite(step)) {
        eg__error(EG_ERR_INVALID_ARGUMENT,
                  "arange: step must be non-zero and bounds finite "
                  "(start %g, stop %g, step %g)",
                  start, stop, step);
        return NULL;
    }
    double count = ceil((stop - start) / step);
    if (count > 1e12) {
        eg__error(EG_ERR_INVALID_ARGUMENT, "arange: %g elements is too many", count);
        return NULL;
    }
    int64_t n = count > 0 ? (int64_t)count : 0;
    eg_tensor *t = eg__tensor_alloc(dtype, 1, &n, NULL);
    if (!t) return NULL;
    eg__staging staging;
    void *p = eg__staging_begin(t, &staging);
    if (!p) return finish_creation(t, &staging);
    for (int64_t i = 0; i < n; i++) eg__store_from_double(p, dtype, i, start + (double)i * step);
    return finish_creation(t, &staging);
}

eg_tensor *eg_linspace(double start, double stop, int64_t num, eg_dtype dtype) {
    if (num < 0) {
        eg__error(EG_ERR_INVALID_ARGUMENT, "linspace: num must be >= 0, got %lld", (long long)num);
        return NULL;
    }
    eg_tensor *t = eg__tensor_alloc(dtype, 1, &num, NULL);
    if (!t) return NULL;
    eg__staging staging;
    void *p = eg__staging_begin(t, &staging);
    if (!p) return finish_creation(t, &staging);
    double step = num > 1 ? (stop - start) / (double)(num - 1) : 0.0;
    for (int64_t i = 0; i < num; i++)
        eg__store_from_double(p, dtype, i,
                              i == num - 1 && num > 1 ? stop : start + (double)i * step);
    return finish_creation(t, &staging);
}

eg_tensor *eg_eye(int64_t n, eg_dtype dtype) {
    if (n < 0) {
        eg__error(EG_ERR_INVALID_ARGUMENT, "eye: n must be >= 0, got %lld", (long long)n);
        return NULL;
    }
    int64_t shape[2] = {n, n};
    eg_tensor *t = eg__tensor_alloc(dtype, 2, shape, NULL);
    if (!t) return NULL;
    eg__staging staging;
    void *p = eg__staging_begin(t, &staging);
    if (!p) return finish_creation(t, &staging);
    memset(p, 0, t->storage->n_bytes);
    for (int64_t i = 0; i < n; i++) eg__store_from_double(p, dtype, i * n + i, 1.0);
    return finish_creation(t, &staging);
}

/* ---- host access ---- */

_Atomic(eg__host_write_hook) eg__before_host_write;

void *eg_tensor_data(const eg_tensor *t) {
    if (!eg__check_arg(t, "tensor_data", 0) || eg__realize(t) != EG_OK) return NULL;
    if (!eg__device_is_host(t->device)) {
        eg__error(EG_ERR_DEVICE, "tensor_data: tensor is on %s; copy it to the CPU first",
                  t->device->name);
        return NULL;
    }
    /* The pointer may be written: lazy ops already recorded on t must not see that. */
    if (atomic_load_explicit(&t->lazy_consumers, memory_order_relaxed) > 0) {
        eg__host_write_hook hook =
            atomic_load_explicit(&eg__before_host_write, memory_order_acquire);
        if (hook && hook((eg_tensor *)t) != EG_OK) return NULL;
    }
    return eg__data(t);
}

/* Visits every element of t in row-major order, giving its offset (in elements) from element 0. */
#define EG_FOR_EACH_OFFSET(t, offset_var, body)                                                    \
    do {                                                                                           \
        int64_t index_[EG_MAX_DIMS] = {0};                                                         \
        int64_t offset_var = 0;                                                                    \
        for (int64_t n_ = 0; n_ < (t)->n_elems; n_++) {                                            \
            body;                                                                                  \
            for (int d_ = (t)->n_dims - 1; d_ >= 0; d_--) {                                        \
                if (++index_[d_] < (t)->shape[d_]) {                                               \
                    offset_var += (t)->strides[d_];                                                \
                    break;                                                                         \
                }                                                                                  \
                offset_var -= (t)->strides[d_] * (index_[d_] - 1);                                 \
                index_[d_] = 0;                                                                    \
            }                                                                                      \
        }                                                                                          \
    } while (0)

eg_status eg_tensor_copy_to_host(const eg_tensor *t, void *dst, size_t dst_bytes) {
    if (!eg__check_arg(t, "tensor_copy_to_host", 0) || eg__realize(t) != EG_OK)
        return eg_last_status();
    size_t size = eg_dtype_size(t->dtype);
    size_t need = (size_t)t->n_elems * size;
    if (!dst || dst_bytes < need)
        return eg__error(EG_ERR_INVALID_ARGUMENT,
                         "tensor_copy_to_host: destination has %zu bytes, %zu needed", dst_bytes,
                         need);
    if (t->n_elems == 0) return EG_OK;
    const char *src = eg__data(t);
    char *span = NULL;
    if (!eg__device_is_host(t->device)) {
        if (eg__is_contiguous(t)) return eg__device_copy(eg__host(), dst, t->device, src, need);
        /* A strided view on a GPU: the span of memory it covers comes over whole, and the host
         * picks the elements out of it (no kernel is needed for a read). */
        int64_t low = 0, high = 0; /* element offsets from element 0 */
        for (int d = 0; d < t->n_dims; d++) {
            int64_t reach = (t->shape[d] - 1) * t->strides[d];
            if (reach < 0) low += reach;
            else high += reach;
        }
        size_t span_bytes = (size_t)(high - low + 1) * size;
        span = malloc(span_bytes);
        if (!span)
            return eg__error(EG_ERR_OUT_OF_MEMORY, "tensor_copy_to_host: out of host memory");
        eg_status status = eg__device_copy(eg__host(), span, t->device,
                                           src + low * (int64_t)size, span_bytes);
        if (status != EG_OK) {
            free(span);
            return status;
        }
        src = span - low * (int64_t)size;
    }
    if (eg__is_contiguous(t)) {
        memcpy(dst, src, need);
        return EG_OK;
    }
    char *out = dst;
    EG_FOR_EACH_OFFSET(t, offset, {
        memcpy(out, src + offset * (int64_t)size, size);
        out += size;
    });
    free(span);
    return EG_OK;
}

double eg_item(const eg_tensor *t) {
    if (!eg__check_arg(t, "item", 0) || eg__realize(t) != EG_OK) return NAN;
    if (t->n_elems != 1) {
        char buf[160];
        eg__error(EG_ERR_SHAPE, "item: tensor of shape %s has %lld elements, not 1",
                  eg__shape_format(t->n_dims, t->shape, buf, sizeof buf), (long long)t->n_elems);
        return NAN;
    }
    double element[1]; /* room for any dtype's element */
    if (eg__read_element(t, 0, element) != EG_OK) return NAN;
    return eg__load_as_double(element, t->dtype, 0);
}

double eg_tensor_get(const eg_tensor *t, const int64_t *index) {
    if (!eg__check_arg(t, "tensor_get", 0) || eg__realize(t) != EG_OK) return NAN;
    if (t->n_dims > 0 && !index) {
        eg__error(EG_ERR_NULL_ARGUMENT, "tensor_get: index is NULL");
        return NAN;
    }
    int64_t offset = 0;
    for (int i = 0; i < t->n_dims; i++) {
        if (index[i] < 0 || index[i] >= t->shape[i]) {
            eg__error(EG_ERR_INVALID_ARGUMENT,
                      "tensor_get: index %lld out of range for axis %d "
                      "of size %lld",
                      (long long)index[i], i, (long long)t->shape[i]);
            return NAN;
        }
        offset += index[i] * t->strides[i];
    }
    double element[1];
    if (eg__read_element(t, offset, element) != EG_OK) return NAN;
    return eg__load_as_double(element, t->dtype, 0);
}
