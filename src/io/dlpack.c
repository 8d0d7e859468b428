/* DLPack export and import, both zero-copy: an exported managed tensor holds a reference to the
 * tensor's storage; an imported one becomes an external storage that calls the producer's
 * deleter when its last reference goes. */
#include <stdlib.h>
#include <string.h>

#include "device/device.h"
#include "base/error.h"
#include "core/tensor_internal.h"
#include "eagle/dlpack.h"

/* ---- dtypes ---- */

static const struct {
    eg_dtype dtype;
    uint8_t code, bits;
} dtype_table[] = {
    {EG_DTYPE_F32, kDLFloat, 32},   {EG_DTYPE_F64, kDLFloat, 64}, {EG_DTYPE_F16, kDLFloat, 16},
    {EG_DTYPE_BF16, kDLBfloat, 16}, {EG_DTYPE_I32, kDLInt, 32},   {EG_DTYPE_I64, kDLInt, 64},
    {EG_DTYPE_U8, kDLUInt, 8},      {EG_DTYPE_BOOL, kDLBool, 8},
    {EG_DTYPE_I8, kDLInt, 8},
};
enum { N_DTYPES = sizeof dtype_table / sizeof dtype_table[0] };

static bool dtype_to_dlpack(eg_dtype dtype, DLDataType *out) {
    for (int i = 0; i < N_DTYPES; i++)
        if (dtype_table[i].dtype == dtype) {
            *out =
                (DLDataType){.code = dtype_table[i].code, .bits = dtype_table[i].bits, .lanes = 1};
            return true;
        }
    return false;
}

static bool dtype_from_dlpack(DLDataType type, eg_dtype *out) {
    if (type.lanes != 1) return false;
    for (int i = 0; i < N_DTYPES; i++)
        if (dtype_table[i].code == type.code && dtype_table[i].bits == type.bits) {
            *out = dtype_table[i].dtype;
            return true;
        }
    return false;
}

/* ---- export ---- */

/* One block per export: the managed tensor (either form), the arrays its DLTensor points at and
 * the storage reference it holds. manager_ctx points at the block. */
typedef struct export_block {
    union {
        DLManagedTensor legacy;
        DLManagedTensorVersioned versioned;
    } managed;
    eg__storage *storage;
    int64_t shape[EG_MAX_DIMS];
    int64_t strides[EG_MAX_DIMS];
} export_block;

static void export_block_free(export_block *block) {
    eg__storage_unref(block->storage);
    free(block);
}

static void delete_legacy(DLManagedTensor *self) {
    if (self) export_block_free(self->manager_ctx);
}

static void delete_versioned(DLManagedTensorVersioned *self) {
    if (self) export_block_free(self->manager_ctx);
}

/* Checks t, allocates the block and fills *dl; NULL with an error. */
static export_block *export_begin(const eg_tensor *t, const void *out, const char *op,
                                  DLTensor *dl) {
    if (!out) {
        eg__error(EG_ERR_NULL_ARGUMENT, "%s: out is NULL", op);
        return NULL;
    }
    if (!t) {
        eg__error(EG_ERR_NULL_ARGUMENT, "%s: tensor is NULL", op);
        return NULL;
    }
    if (!t->storage && eg__realize(t) != EG_OK) return NULL; /* lazy: compute it first */
    if (!t->storage || eg_device_kind(t->device) != EG_DEVICE_CPU) {
        eg__error(EG_ERR_UNSUPPORTED, "%s: tensor is on %s; only CPU tensors are exported", op,
                  eg_device_name(t->device));
        return NULL;
    }
    DLDataType dtype;
    if (!dtype_to_dlpack(t->dtype, &dtype)) {
        eg__error(EG_ERR_UNSUPPORTED, "%s: dtype %s has no DLPack equivalent", op,
                  eg_dtype_name(t->dtype));
        return NULL;
    }
    export_block *block = malloc(sizeof *block);
    if (!block) {
        eg__error(EG_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
        return NULL;
    }
    memset(block, 0, sizeof *block);
    block->storage = t->storage;
    eg__storage_ref(t->storage);
    if (t->n_dims) {
        memcpy(block->shape, t->shape, (size_t)t->n_dims * sizeof *t->shape);
        memcpy(block->strides, t->strides, (size_t)t->n_dims * sizeof *t->strides);
    }
    *dl = (DLTensor){.data = eg__data(t),
                     .device = {.device_type = kDLCPU, .device_id = 0},
                     .ndim = t->n_dims,
                     .dtype = dtype,
                     .shape = block->shape,
                     .strides = block->strides,
                     .byte_offset = 0};
    return block;
}

eg_status eg_to_dlpack(const eg_tensor *t, DLManagedTensor **out) {
    if (out) *out = NULL;
    DLTensor dl;
    export_block *block = export_begin(t, out, "to_dlpack", &dl);
    if (!block) return eg_last_status();
    block->managed.legacy =
        (DLManagedTensor){.dl_tensor = dl, .manager_ctx = block, .deleter = delete_legacy};
    *out = &block->managed.legacy;
    return EG_OK;
}

eg_status eg_to_dlpack_versioned(const eg_tensor *t, DLManagedTensorVersioned **out) {
    if (out) *out = NULL;
    DLTensor dl;
    export_block *block = export_begin(t, out, "to_dlpack_versioned", &dl);
    if (!block) return eg_last_status();
    block->managed.versioned = (DLManagedTensorVersioned){
        .version = {.major = DLPACK_MAJOR_VERSION, .minor = DLPACK_MINOR_VERSION},
        .manager_ctx = block,
        .deleter = delete_versioned,
        .flags = 0,
        .dl_tensor = dl};
    *out = &block->managed.versioned;
    return EG_OK;
}

/* ---- import ---- */

static void release_legacy(void *context) {
    DLManagedTensor *managed = context;
    if (managed->deleter) managed->deleter(managed);
}

static void release_versioned(void *context) {
    DLManagedTensorVersioned *managed = context;
    if (managed->deleter) managed->deleter(managed);
}

/* Checks dl and wraps its memory in a tensor whose storage calls release(context) at the end. */
static eg_tensor *import(const DLTensor *dl, const char *op, void (*release)(void *),
                         void *context) {
    if (dl->device.device_type != kDLCPU) {
        eg__error(EG_ERR_UNSUPPORTED, "%s: device type %d is not supported (only kDLCPU = %d)", op,
                  (int)dl->device.device_type, (int)kDLCPU);
        return NULL;
    }
    eg_dtype dtype;
    if (!dtype_from_dlpack(dl->dtype, &dtype)) {
        eg__error(EG_ERR_UNSUPPORTED,
                  "%s: DLPack dtype (code %u, bits %u, lanes %u) is not supported (float 16/32/64, "
                  "bfloat 16, int 32/64, uint 8, bool 8, lanes 1)",
                  op, (unsigned)dl->dtype.code, (unsigned)dl->dtype.bits,
                  (unsigned)dl->dtype.lanes);
        return NULL;
    }
    int n_dims = dl->ndim;
    if (n_dims < 0 || n_dims > EG_MAX_DIMS) {
        eg__error(EG_ERR_UNSUPPORTED, "%s: ndim %d is not supported (0..%d)", op, n_dims,
                  EG_MAX_DIMS);
        return NULL;
    }
    if (n_dims > 0 && !dl->shape) {
        eg__error(EG_ERR_INVALID_ARGUMENT, "%s: shape is NULL for ndim %d", op, n_dims);
        return NULL;
    }
    int64_t shape[EG_MAX_DIMS], strides[EG_MAX_DIMS];
    if (n_dims) memcpy(shape, dl->shape, (size_t)n_dims * sizeof *shape);
    int64_t n_elems = eg__shape_n_elems(n_dims, shape);
    size_t size = eg_dtype_size(dtype);
    if (n_elems < 0 || n_elems > (int64_t)(SIZE_MAX / 16)) {
        char buf[160];
        eg__error(EG_ERR_INVALID_ARGUMENT, "%s: invalid shape %s", op,
                  eg__shape_format(n_dims, shape, buf, sizeof buf));
        return NULL;
    }
    if (dl->strides) {
        memcpy(strides, dl->strides, (size_t)n_dims * sizeof *strides);
        for (int i = 0; i < n_dims; i++)
            if (strides[i] < 0) {
                eg__error(EG_ERR_UNSUPPORTED,
                          "%s: negative stride %lld on axis %d is not supported; make the "
                          "array contiguous first",
                          op, (long long)strides[i], i);
                return NULL;
            }
    } else {
        eg__contiguous_strides(n_dims, shape, strides);
    }
    /* The extent: one past the furthest element, in elements. */
    int64_t extent = 0;
    if (n_elems > 0) {
        extent = 1;
        for (int i = 0; i < n_dims; i++) {
            int64_t reach = shape[i] - 1;
            if (strides[i] && reach > (INT64_MAX - extent) / strides[i]) {
                eg__error(EG_ERR_INVALID_ARGUMENT, "%s: strides reach beyond the address space",
                          op);
                return NULL;
            }
            extent += reach * strides[i];
        }
        if ((uint64_t)extent > SIZE_MAX / size) {
            eg__error(EG_ERR_INVALID_ARGUMENT, "%s: strides reach beyond the address space", op);
            return NULL;
        }
    }
    char *data = dl->data;
    if (!data && n_elems > 0) {
        eg__error(EG_ERR_INVALID_ARGUMENT, "%s: data is NULL for a tensor of %lld elements", op,
                  (long long)n_elems);
        return NULL;
    }
    if (data) data += dl->byte_offset;
    if ((uintptr_t)data % size) {
        eg__error(EG_ERR_UNSUPPORTED,
                  "%s: data + byte_offset (%p) is not aligned to the %zu-byte element size", op,
                  (void *)data, size);
        return NULL;
    }
    return eg__tensor_from_external(data, (size_t)extent * size, eg__host(), dtype, n_dims, shape,
                                    strides, 0, release, context);
}

eg_tensor *eg_from_dlpack(DLManagedTensor *managed) {
    if (!managed) {
        eg__error(EG_ERR_NULL_ARGUMENT, "from_dlpack: managed tensor is NULL");
        return NULL;
    }
    return import(&managed->dl_tensor, "from_dlpack", release_legacy, managed);
}

eg_tensor *eg_from_dlpack_versioned(DLManagedTensorVersioned *managed) {
    const char *op = "from_dlpack_versioned";
    if (!managed) {
        eg__error(EG_ERR_NULL_ARGUMENT, "%s: managed tensor is NULL", op);
        return NULL;
    }
    if (managed->version.major != DLPACK_MAJOR_VERSION) {
        eg__error(EG_ERR_UNSUPPORTED, "%s: DLPack version %u.%u is not supported (%d.x)", op,
                  (unsigned)managed->version.major, (unsigned)managed->version.minor,
                  DLPACK_MAJOR_VERSION);
        return NULL;
    }
    if (managed->flags & DLPACK_FLAG_BITMASK_READ_ONLY) {
        eg__error(EG_ERR_UNSUPPORTED,
                  "%s: the tensor is read-only and eagle tensors are writable; copy it first", op);
        return NULL;
    }
    return import(&managed->dl_tensor, op, release_versioned, managed);
}
