#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "core/error.h"
#include "core/tensor_internal.h"

static atomic_uint_fast64_t next_tensor_id = 1;

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

bool eg__is_contiguous(const eg_tensor *t) {
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

bool eg__check_arg(const eg_tensor *t, const char *op, int index) {
    if (t) return true;
    if (!eg__error_pending()) eg__error(EG_ERR_NULL_ARGUMENT, "%s: argument %d is NULL", op, index);
    return false;
}

/* A fresh tensor and its storage share one malloc block: one host allocation per op result.
 * (calloc is avoided on purpose: glibc serves it outside the per-thread cache.) */
typedef struct tensor_block {
    eg_tensor tensor;
    eg__storage storage;
} tensor_block;

static void tensor_init(eg_tensor *t) {
    *t = (eg_tensor){0};
    atomic_init(&t->refcount, 1);
    t->id = atomic_fetch_add_explicit(&next_tensor_id, 1, memory_order_relaxed);
    eg__callsite_get(&t->created_file, &t->created_line);
}

static eg_tensor *tensor_struct_new(void) {
    eg_tensor *t = malloc(sizeof *t);
    if (!t) {
        eg__error(EG_ERR_OUT_OF_MEMORY, "out of host memory for a tensor header");
        return NULL;
    }
    tensor_init(t);
    return t;
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
    int64_t n_elems = eg__shape_n_elems(n_dims, shape);
    if (n_elems < 0 || n_elems > (int64_t)(SIZE_MAX / 16)) {
        char buf[160];
        eg__error(EG_ERR_SHAPE, "invalid shape %s", eg__shape_format(n_dims, shape, buf, 160));
        return NULL;
    }
    if (!device) device = eg__cpu_device();
    size_t n_bytes = (size_t)n_elems * eg_dtype_size(dtype);
    tensor_block *block = malloc(sizeof *block);
    if (!block) {
        eg__error(EG_ERR_OUT_OF_MEMORY, "out of host memory for a tensor header");
        return NULL;
    }
    eg__storage *storage = &block->storage;
    storage->data =
        eg__allocator_alloc(device->get_allocator(device), n_bytes, &storage->allocation);
    if (!storage->data) {
        free(block);
        return NULL;
    }
    atomic_init(&storage->refcount, 1);
    storage->n_bytes = n_bytes;
    storage->device = device;
    storage->container = block;
    storage->release = NULL;
    storage->release_context = NULL;
    eg_tensor *t = &block->tensor;
    tensor_init(t);
    t->dtype = dtype;
    t->n_dims = n_dims;
    if (n_dims) memcpy(t->shape, shape, (size_t)n_dims * sizeof *shape);
    eg__contiguous_strides(n_dims, shape, t->strides);
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
    t->device = device ? device : eg__cpu_device();
    eg__debug_track(t);
    eg__scope_register(t);
    return t;
}

eg_status eg__tensor_attach_storage(eg_tensor *t) {
    size_t n_bytes = (size_t)t->n_elems * eg_dtype_size(t->dtype);
    eg__storage *storage = malloc(sizeof *storage);
    if (!storage) return eg__error(EG_ERR_OUT_OF_MEMORY, "out of host memory for a storage");
    storage->data =
        eg__allocator_alloc(t->device->get_allocator(t->device), n_bytes, &storage->allocation);
    if (!storage->data) {
        free(storage);
        return eg_last_status();
    }
    atomic_init(&storage->refcount, 1);
    storage->n_bytes = n_bytes;
    storage->device = t->device;
    storage->container = NULL;
    storage->release = NULL;
    storage->release_context = NULL;
    t->storage = storage;
    return EG_OK;
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
    tensor_block *block = malloc(sizeof *block);
    if (!block) {
        eg__error(EG_ERR_OUT_OF_MEMORY, "out of host memory for a tensor header");
        return NULL;
    }
    eg__storage *storage = &block->storage;
    atomic_init(&storage->refcount, 1);
    storage->data = data;
    storage->n_bytes = n_bytes;
    storage->device = device ? device : eg__cpu_device();
    storage->allocation = NULL;
    storage->container = block;
    storage->release = release;
    storage->release_context = context;
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

void eg__variable_info_free(struct eg__variable_info *info);
void eg__lazy_node_free(struct eg__lazy_node *node);

void eg__storage_ref(eg__storage *storage) {
    atomic_fetch_add_explicit(&storage->refcount, 1, memory_order_relaxed);
}

void eg__storage_unref(eg__storage *storage) {
    if (atomic_fetch_sub_explicit(&storage->refcount, 1, memory_order_acq_rel) != 1) return;
    if (storage->allocation)
        eg__allocator_free(storage->device->get_allocator(storage->device), storage->allocation);
    if (storage->release) storage->release(storage->release_context);
    free(storage->container ? storage->container : storage);
}

void eg__ref(const eg_tensor *t) {
    if (t) atomic_fetch_add_explicit(&((eg_tensor *)t)->refcount, 1, memory_order_relaxed);
}

void eg__unref(const eg_tensor *ct) {
    eg_tensor *t = (eg_tensor *)ct;
    if (!t) return;
    if (atomic_fetch_sub_explicit(&t->refcount, 1, memory_order_acq_rel) != 1) return;
    if (t->scope) eg__scope_forget(t);
    eg__debug_untrack(t);
    if (t->variable) eg__variable_info_free(t->variable);
    if (t->lazy) eg__lazy_node_free(t->lazy);
    /* A tensor allocated with its storage lives in the storage's block: the block goes when
     * the last view of the storage does. */
    bool in_storage_block = t->storage && t->storage->container == (void *)t;
    if (t->storage) eg__storage_unref(t->storage);
    if (!in_storage_block) free(t);
}

eg_tensor *eg_retain(eg_tensor *t) {
    eg__ref(t);
    return t;
}

void eg_release(eg_tensor *t) {
    if (!t) return;
    if (t->scope) eg__scope_forget(t);
    eg__unref(t);
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

static void fill_from_double(eg_tensor *t, double value) {
    void *data = eg__data(t);
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

eg_tensor *eg_full(eg_dtype dtype, int n_dims, const int64_t *shape, double value) {
    eg_tensor *t = eg__tensor_alloc(dtype, n_dims, shape, NULL);
    if (t) fill_from_double(t, value);
    return t;
}

eg_tensor *eg_zeros(eg_dtype dtype, int n_dims, const int64_t *shape) {
    eg_tensor *t = eg__tensor_alloc(dtype, n_dims, shape, NULL);
    if (t) memset(eg__data(t), 0, t->storage->n_bytes);
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
    return eg_full(like->dtype, like->n_dims, like->shape, value);
}

eg_tensor *eg_tensor_from_data(const void *data, eg_dtype dtype, int n_dims, const int64_t *shape) {
    if (!data) {
        eg__error(EG_ERR_NULL_ARGUMENT, "tensor_from_data: data is NULL");
        return NULL;
    }
    eg_tensor *t = eg__tensor_alloc(dtype, n_dims, shape, NULL);
    if (t && t->storage->n_bytes) memcpy(eg__data(t), data, t->storage->n_bytes);
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
    void *p = eg__data(t);
    for (int64_t i = 0; i < n; i++) eg__store_from_double(p, dtype, i, start + (double)i * step);
    return t;
}

eg_tensor *eg_linspace(double start, double stop, int64_t num, eg_dtype dtype) {
    if (num < 0) {
        eg__error(EG_ERR_INVALID_ARGUMENT, "linspace: num must be >= 0, got %lld", (long long)num);
        return NULL;
    }
    eg_tensor *t = eg__tensor_alloc(dtype, 1, &num, NULL);
    if (!t) return NULL;
    void *p = eg__data(t);
    double step = num > 1 ? (stop - start) / (double)(num - 1) : 0.0;
    for (int64_t i = 0; i < num; i++)
        eg__store_from_double(p, dtype, i,
                              i == num - 1 && num > 1 ? stop : start + (double)i * step);
    return t;
}

eg_tensor *eg_eye(int64_t n, eg_dtype dtype) {
    if (n < 0) {
        eg__error(EG_ERR_INVALID_ARGUMENT, "eye: n must be >= 0, got %lld", (long long)n);
        return NULL;
    }
    int64_t shape[2] = {n, n};
    eg_tensor *t = eg_zeros(dtype, 2, shape);
    if (!t) return NULL;
    void *p = eg__data(t);
    for (int64_t i = 0; i < n; i++) eg__store_from_double(p, dtype, i * n + i, 1.0);
    return t;
}

/* ---- host access ---- */

void *eg_tensor_data(const eg_tensor *t) {
    if (!eg__check_arg(t, "tensor_data", 0) || eg__realize(t) != EG_OK) return NULL;
    if (t->device->type != EG_DEVICE_CPU) {
        eg__error(EG_ERR_DEVICE, "tensor_data: tensor is on %s; copy it to the CPU first",
                  t->device->name);
        return NULL;
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
    if (t->device->type != EG_DEVICE_CPU) return t->device->copy(t->device, dst, eg__data(t), need);
    const char *src = eg__data(t);
    if (eg__is_contiguous(t)) {
        memcpy(dst, src, need);
        return EG_OK;
    }
    char *out = dst;
    EG_FOR_EACH_OFFSET(t, offset, {
        memcpy(out, src + offset * (int64_t)size, size);
        out += size;
    });
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
    return eg__load_as_double(eg__data(t), t->dtype, 0);
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
    return eg__load_as_double(eg__data(t), t->dtype, offset);
}
