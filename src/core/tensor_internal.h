/* Internal: the tensor and storage structs and the helpers every layer uses to make tensors.
 *
 * Reference counting has two faces. The public eg_release() also ends scope ownership (the
 * scope's creation reference is the one being released); library code that takes and drops its
 * own references (tapes, optimizers, views) uses eg__ref/eg__unref, which never touch scopes. */
#ifndef EAGLE_SRC_CORE_TENSOR_INTERNAL_H
#define EAGLE_SRC_CORE_TENSOR_INTERNAL_H

#include <stdatomic.h>

#include "base/error.h"
#include "eagle/tensor.h"

/* Library code reads dtype sizes on every op: the inline form of eg_dtype_size (same contract:
 * 0 for an invalid dtype), also under its public name so every layer gets it without a call. */
extern const size_t eg__dtype_sizes[EG_DTYPE_COUNT];
static inline size_t eg__dtype_size(eg_dtype dtype) {
    return (unsigned)dtype < EG_DTYPE_COUNT ? eg__dtype_sizes[dtype] : 0;
}
#ifndef EG_DTYPE_SIZE_DEFINITION
#define eg_dtype_size(dtype) eg__dtype_size(dtype)
#endif

/* AddressSanitizer hooks for memory the library recycles itself (per-thread caches): poisoned
 * while cached, so a use after free is still reported. No-ops in other builds. */
#if defined(__SANITIZE_ADDRESS__)
#define EG__ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define EG__ASAN 1
#endif
#endif
#ifdef EG__ASAN
#include <sanitizer/asan_interface.h>
#define EG_POISON(pointer, bytes)   ASAN_POISON_MEMORY_REGION(pointer, bytes)
#define EG_UNPOISON(pointer, bytes) ASAN_UNPOISON_MEMORY_REGION(pointer, bytes)
#else
#define EG_POISON(pointer, bytes)   ((void)(pointer), (void)(bytes))
#define EG_UNPOISON(pointer, bytes) ((void)(pointer), (void)(bytes))
#endif

typedef struct eg__storage {
    atomic_long refcount;
    void *data;
    size_t n_bytes;
    const eg_device *device;
    void *allocation; /* the allocator's handle; NULL for memory owned elsewhere */
    void *container;  /* the block holding this struct when it was allocated together with its
                         first tensor (freed when the last reference goes); NULL: alone */
    /* Memory owned elsewhere (allocation NULL), e.g. a DLPack tensor: release(release_context)
     * runs once, when the last reference goes. NULL for the allocator's memory. */
    void (*release)(void *release_context);
    void *release_context;
} eg__storage;

struct eg__scope;
struct eg__variable_info;
struct eg__lazy_node;

/* What layers above core hang off a tensor (a lazy node: src/lazy; a variable's info:
 * src/autograd) begins with a pointer to these, so that core, which frees tensors and realizes
 * them when their data is read, calls into those layers without naming them. */
typedef struct eg__attachment_ops {
    void (*free)(void *attachment);
    /* lazy nodes only (NULL otherwise): computes the storage-less tensor t */
    eg_status (*realize)(const eg_tensor *t);
} eg__attachment_ops;

/* The ops an attachment begins with. */
static inline const eg__attachment_ops *eg__attachment_ops_of(const void *attachment) {
    return *(const eg__attachment_ops *const *)attachment;
}

struct eg_tensor {
    atomic_long refcount;
    eg_dtype dtype;
    int n_dims;
    int64_t shape[EG_MAX_DIMS];
    int64_t strides[EG_MAX_DIMS]; /* in elements */
    int64_t offset;               /* in elements, from storage->data */
    int64_t n_elems;
    eg__storage *storage;
    const eg_device *device;
    uint64_t id; /* unique in the process; tapes key on it */
    struct eg__scope *scope;
    size_t scope_slot;
    struct eg__variable_info *variable; /* NULL unless a variable */
    const char *created_file;
    int created_line;
    bool debug_tracked;  /* made while debug tracking was on: listed while alive, retired after */
    bool debug_released; /* debug mode: released, kept aside and poisoned (eg__tensor_retire) */
    union {
        struct { /* while tracked: the list of live tensors */
            struct eg_tensor *debug_prev, *debug_next;
        };
        struct { /* once released: where (the public call then running) and how */
            const char *released_file;
            int released_line;
            unsigned char released_cause; /* an eg__release_cause */
        };
    };
    /* Lazy and graph modes: how to compute this tensor while it has no storage (NULL once it
     * is realized, and always in eager mode). */
    struct eg__lazy_node *lazy;
    /* Pending lazy nodes that read this tensor: their references are not the user's, so they
     * do not keep a computed intermediate alive (see src/lazy/lazy.c). */
    atomic_int lazy_consumers;
    /* A row-sparse tensor (an Embedding table's gradient): no storage and no lazy node; the
     * dense tensor of shape/dtype is zero but for rows row_indices (i64, (n,)) of row_values
     * ((n, shape[1:])), rows that repeat adding up. Both owned; NULL for every other tensor. */
    eg_tensor *row_indices, *row_values;
};

/* Shape and dtype of an op's result, as inferred before anything is allocated. When is_view is
 * set the result shares input 0's storage with the given strides and offset. */
typedef struct eg__meta {
    eg_dtype dtype;
    int n_dims;
    int64_t shape[EG_MAX_DIMS];
    const eg_device *device; /* where the result lives; NULL: the inputs' device */
    bool is_view;
    int64_t strides[EG_MAX_DIMS];
    int64_t offset;
} eg__meta;

/* A new contiguous tensor with uninitialised memory from the device's allocator, registered
 * with the current scope; NULL device: the current device (eg_device_current). NULL + error
 * (out of memory, bad shape). */
eg_tensor *eg__tensor_alloc(eg_dtype dtype, int n_dims, const int64_t *shape,
                            const eg_device *device);
/* A new tensor on `device` (NULL: the current device) with every element `value`, registered
 * with the scope: what library code uses for constants that meet another tensor in an op (they
 * must live on its device). */
eg_tensor *eg__full_on(const eg_device *device, eg_dtype dtype, int n_dims, const int64_t *shape,
                       double value);
/* A new tensor sharing base's storage with the given geometry, registered with the scope. */
eg_tensor *eg__tensor_view(const eg_tensor *base, int n_dims, const int64_t *shape,
                           const int64_t *strides, int64_t offset);
/* A new tensor over memory that eagle does not own (zero-copy import, e.g. DLPack): its storage
 * has data = `data` (n_bytes long, on `device`), allocation NULL, and calls release(context),
 * exactly once, when its last reference goes (release may be NULL). The geometry (shape, strides
 * in elements, offset in elements from data) is taken as given: the caller has checked that
 * every element lies inside [data, data + n_bytes). Registered with the scope. On failure (NULL +
 * error: bad dtype or dims, out of memory) release is NOT called: the caller still owns data. */
eg_tensor *eg__tensor_from_external(void *data, size_t n_bytes, const eg_device *device,
                                    eg_dtype dtype, int n_dims, const int64_t *shape,
                                    const int64_t *strides, int64_t offset,
                                    void (*release)(void *context), void *context);
/* A tensor with meta's geometry and no storage yet (lazy and graph modes), registered with the
 * scope. */
eg_tensor *eg__tensor_lazy(const eg__meta *meta, const eg_device *device);
/* A storage of n_bytes from device's allocator with one reference, not inside a tensor's block
 * (a graph's arena); freed by its last eg__storage_unref. NULL + error. */
eg__storage *eg__storage_new(const eg_device *device, size_t n_bytes);
/* Gives a storage-less, contiguous-laid-out tensor fresh storage from its device's allocator. */
eg_status eg__tensor_attach_storage(eg_tensor *t);
/* Drops t's storage reference and leaves it storage-less again. */
void eg__tensor_detach_storage(eg_tensor *t);
void eg__ref(const eg_tensor *t);
void eg__unref(const eg_tensor *t);
/* What dropped a tensor's last reference, for debug mode's messages. */
typedef enum eg__release_cause {
    EG__RELEASED_BY_LIBRARY, /* a reference the library held, inside some public call */
    EG__RELEASED_BY_USER,    /* eg_release */
    EG__RELEASED_BY_SCOPE,   /* eg_scope_end */
} eg__release_cause;
/* eg__unref telling debug mode who released t. */
void eg__unref_because(const eg_tensor *t, eg__release_cause cause);
/* References to a storage alone (an exported view such as a DLPack tensor keeps the memory alive
 * without a tensor); the last unref frees it like the last tensor would. */
void eg__storage_ref(eg__storage *storage);
void eg__storage_unref(eg__storage *storage);

/* Computes a lazy tensor (lazy/graph modes) through its node's ops; EG_OK at once for a
 * realized one (or NULL). */
eg_status eg__realize_deferred(const eg_tensor *t);
static inline eg_status eg__realize(const eg_tensor *t) {
    return !t || t->storage ? EG_OK : eg__realize_deferred(t);
}

/* Set by lazy mode (which core cannot name) when it starts: called before eg_tensor_data hands
 * out a writable pointer to a tensor that pending lazy ops read, so that they keep the value
 * they were called with, as in eager mode. NULL until lazy mode is first used. */
typedef eg_status (*eg__host_write_hook)(eg_tensor *t);
extern _Atomic(eg__host_write_hook) eg__before_host_write;

/* Pointer to element 0 of t (storage data + offset), typed. */

static inline void *eg__data(const eg_tensor *t) {
    if (!t->storage && eg__realize(t) != EG_OK) return NULL;
    return (char *)t->storage->data + (size_t)t->offset * eg__dtype_size(t->dtype);
}

/* Product of shape (1 for 0 dims); -1 when a size is negative or the product overflows. */
int64_t eg__shape_n_elems(int n_dims, const int64_t *shape);
void eg__contiguous_strides(int n_dims, const int64_t *shape, int64_t *strides);
/* Inline: kernels ask it of every operand of every op. */
static inline bool eg__is_contiguous(const eg_tensor *t) {
    /* An empty tensor holds no element to be out of place (eg__contiguous_strides gives size-0
     * axes the strides of size-1 ones, which the loop below would otherwise reject). */
    if (t->n_elems == 0) return true;
    int64_t stride = 1;
    for (int i = t->n_dims - 1; i >= 0; i--) {
        if (t->shape[i] != 1 && t->strides[i] != stride) return false;
        stride *= t->shape[i];
    }
    return true;
}
/* "(2, 3)" into buf. */
char *eg__shape_format(int n_dims, const int64_t *shape, char *buf, size_t size);
/* Normalises axis into [0, n_dims); false (no error raised) when out of range. */
bool eg__normalize_axis(int *axis, int n_dims);

/* Scopes: register a freshly created tensor with the innermost scope of this thread. */
void eg__scope_register(eg_tensor *t);
void eg__scope_forget(eg_tensor *t);
/* While suspended (nestable), new tensors are not registered with any scope: library code that
 * manages its intermediates with eg__ref/eg__unref alone (the tape's gradient computation,
 * optimizers) brackets its work with these, then registers what it hands out. */
void eg__scope_suspend(void);
void eg__scope_resume(void);

/* Frees the tensor headers the calling thread keeps for reuse (eg_shutdown; other threads' go
 * when they exit). */
void eg__tensor_release_thread_cache(void);

/* Debug tracking of live tensors. eg__debug_track is a no-op unless EG_DEBUG_TENSORS,
 * eg_debug_track_tensors or a Debug build turned tracking on; the inline check spares every
 * tensor the call. A tracked tensor is retired when released (eg__tensor_retire), which is what
 * lets the checks below name a use after release. */
extern atomic_bool eg__debug_maybe_on; /* false once tracking is known to be off */
void eg__debug_track_slow(eg_tensor *t);
static inline void eg__debug_track(eg_tensor *t) {
    if (atomic_load_explicit(&eg__debug_maybe_on, memory_order_relaxed)) eg__debug_track_slow(t);
}
/* Takes a tracked tensor out of the live list, once, when it is released (debug_tracked stays
 * set: its header is debug mode's to retire). */
void eg__debug_untrack(eg_tensor *t);
/* Raises EG_ERR_STATE "<what>: tensor used after release: made at a.c:12, released by
 * eg_release at a.c:20" for a retired t (debug_released set), or "... tensor released twice ..."
 * when `again`; what may be NULL. Returns the status. */
eg_status eg__debug_released_error(const eg_tensor *t, const char *what, bool again);

/* An id that no tensor this thread has made so far reached and every tensor it makes later
 * will: whether this thread made a tensor before or after a moment (ids from different threads
 * are not ordered). */
uint64_t eg__tensor_id_watermark(void);
/* "train.c:41" (or "an unknown place" when no public call was recorded): where t was made, i.e.
 * the public call that made it, into buf; returns buf. */
char *eg__tensor_made_at(const eg_tensor *t, char *buf, size_t size);

/* The NULL-argument rule of the public API: true when t is usable; otherwise raises
 * EG_ERR_NULL_ARGUMENT unless an error is already pending, or, for a tensor that debug mode
 * retired, names the use after release. */
bool eg__check_arg_failed(const eg_tensor *t, const char *op, int index);
static inline bool eg__check_arg(const eg_tensor *t, const char *op, int index) {
    if (__builtin_expect(t && !t->debug_released && !t->row_values, 1)) return true;
    return eg__check_arg_failed(t, op, index);
}
/* eg__check_arg that lets a row-sparse tensor through (what reads its parts). */
static inline bool eg__check_arg_sparse_ok(const eg_tensor *t, const char *op, int index) {
    if (__builtin_expect(t && !t->debug_released, 1)) return true;
    return eg__check_arg_failed(t, op, index);
}

/* A row-sparse tensor of dense shape (n_dims >= 1, shape) from indices (i64, (n,)) and values
 * ((n, shape[1:]), the dtype and device of the result), both taken by new references: a new
 * reference registered with the current scope, NULL with an error. */
eg_tensor *eg__row_sparse_new(const eg_tensor *indices, const eg_tensor *values, int n_dims,
                              const int64_t *shape);

/* Copies a contiguous buffer of dtype values into double / from double (for printing, item,
 * generic casts). */
/* Host memory to fill a dense tensor t whose memory may be a GPU's: t's own data when t lives in
 * host memory, else a host buffer that eg__staging_finish copies to t (and frees). Creation
 * functions and random fills write through it, so that they work on every device. */
typedef struct eg__staging {
    void *host;
    bool staged; /* host is a buffer of ours, not t's memory */
} eg__staging;
/* NULL + error when out of host memory. */
void *eg__staging_begin(eg_tensor *t, eg__staging *staging);
/* Copies a staged buffer to t's device and frees it; EG_OK at once for host tensors. */
eg_status eg__staging_finish(eg_tensor *t, eg__staging *staging);
/* Copies element `offset` (in elements from t's element 0) of t, on any device, into out (room
 * for one element). */
eg_status eg__read_element(const eg_tensor *t, int64_t offset, void *out);

double eg__load_as_double(const void *data, eg_dtype dtype, int64_t index);
void eg__store_from_double(void *data, eg_dtype dtype, int64_t index, double value);

/* The public API takes and hands out arrays of tensors as eg_tensor *const *, the type of what
 * ops return, because C converts T ** to const T *const * only with a cast. Inside, kernels and
 * records read inputs as const eg_tensor *const *; these two cross that line in one place. A
 * handle's const promises nothing about the tensor's memory, so dropping it is safe. */
static inline const eg_tensor *const *eg__const_tensors(eg_tensor *const *tensors) {
    return (const eg_tensor *const *)tensors;
}
static inline eg_tensor *const *eg__tensor_handles(const eg_tensor *const *tensors) {
    return (eg_tensor *const *)tensors;
}

/* Temporaries of one computation: released together by eg__temps_release. */
#define EG__TEMPS_MAX 64
typedef struct eg__temps {
    eg_tensor *items[EG__TEMPS_MAX];
    int n;
} eg__temps;

/* Remembers t (may be NULL) for release; returns t. */
static inline eg_tensor *eg__temp(eg__temps *temps, eg_tensor *t) {
    if (!t) return NULL;
    if (temps->n == EG__TEMPS_MAX) {
        eg__error(EG_ERR_INTERNAL, "internal: too many temporaries (%d)", EG__TEMPS_MAX);
        eg_release(t);
        return NULL;
    }
    temps->items[temps->n++] = t;
    return t;
}

/* Releases every temporary (eg_release: scope-owned ones leave their scope). */
static inline void eg__temps_release(eg__temps *temps) {
    for (int i = temps->n; i-- > 0;) eg_release(temps->items[i]);
    temps->n = 0;
}

#endif
