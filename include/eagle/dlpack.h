/* Eagle — zero-copy tensor exchange with other libraries through DLPack
 * (https://dmlc.github.io/dlpack/latest/): NumPy, PyTorch, JAX, CuPy, TVM ... all speak it.
 *
 * DLPack is an ABI, not a library: a handful of C structs that every participant lays out the
 * same way. The declarations below are written from the ABI's specification, version 1.0
 * (DLPACK_MAJOR_VERSION 1, DLPACK_MINOR_VERSION 0): the unversioned DLManagedTensor of versions
 * 0.x (still part of 1.0) and the DLManagedTensorVersioned that 1.0 added. They use the upstream
 * header's include guard (DLPACK_DLPACK_H_), so a program may include dlpack.h itself before or
 * after this file: whichever comes first defines the types, and both define them identically.
 *
 * Ownership, as the DLPack protocol has it: a DLManagedTensor* is owned by whoever holds it, and
 * the owner, when done, calls managed->deleter(managed) (when deleter is not NULL) exactly once.
 *   - eg_to_dlpack hands out a new managed tensor; the consumer owns it. It keeps eagle's memory
 *     alive (a reference to the tensor's storage, not to the eg_tensor handle) until its deleter
 *     runs, even after every eagle tensor on that memory has been released.
 *   - eg_from_dlpack takes ownership of a managed tensor ON SUCCESS ONLY: the returned eagle
 *     tensor (and every view of it) uses the producer's memory in place, and the producer's
 *     deleter runs once, when the last eagle reference to that memory goes. On failure nothing
 *     has been taken: the caller still owns the managed tensor and must delete it.
 * Both directions share memory: a write on one side is seen by the other. The deleter may run on
 * any thread that drops the last reference. */
#ifndef EAGLE_DLPACK_H
#define EAGLE_DLPACK_H

#include <stdint.h>

#include "eagle/status.h"
#include "eagle/tensor.h"

#if defined(DLPACK_DLPACK_H_) && !defined(DLPACK_MAJOR_VERSION)
#error "eagle/dlpack.h needs DLPack 1.0 or later; an older dlpack.h was included first"
#endif

#ifndef DLPACK_DLPACK_H_
#define DLPACK_DLPACK_H_

#define DLPACK_MAJOR_VERSION 1
#define DLPACK_MINOR_VERSION 0

#ifdef __cplusplus
extern "C" {
#endif

/* Where the memory lives. Eagle produces and accepts kDLCPU only. */
typedef enum {
    kDLCPU = 1,
    kDLCUDA = 2,
    kDLCUDAHost = 3,
    kDLOpenCL = 4,
    kDLVulkan = 7,
    kDLMetal = 8,
    kDLVPI = 9,
    kDLROCM = 10,
    kDLROCMHost = 11,
    kDLExtDev = 12,
    kDLCUDAManaged = 13,
    kDLOneAPI = 14,
    kDLWebGPU = 15,
    kDLHexagon = 16,
    kDLMAIA = 17,
} DLDeviceType;

typedef struct {
    DLDeviceType device_type;
    int32_t device_id; /* 0 for the CPU */
} DLDevice;

/* Element type families, the DLDataType.code values. */
typedef enum {
    kDLInt = 0U,
    kDLUInt = 1U,
    kDLFloat = 2U,
    kDLOpaqueHandle = 3U,
    kDLBfloat = 4U,
    kDLComplex = 5U,
    kDLBool = 6U,
} DLDataTypeCode;

/* An element type: family, width in bits, and vector lanes (1 for scalars). */
typedef struct {
    uint8_t code;
    uint8_t bits;
    uint16_t lanes;
} DLDataType;

/* A strided view of memory: element (i0, i1, ...) is at
 * (char *)data + byte_offset + (i0 * strides[0] + i1 * strides[1] + ...) * (bits / 8).
 * strides are in elements; strides NULL means compact row-major. shape has ndim entries. */
typedef struct {
    void *data;
    DLDevice device;
    int32_t ndim;
    DLDataType dtype;
    int64_t *shape;
    int64_t *strides;
    uint64_t byte_offset;
} DLTensor;

/* A DLTensor with the means to free it: the owner calls deleter(self) once when done. */
typedef struct DLManagedTensor {
    DLTensor dl_tensor;
    void *manager_ctx; /* the producer's; untouched by consumers */
    void (*deleter)(struct DLManagedTensor *self);
} DLManagedTensor;

typedef struct {
    uint32_t major;
    uint32_t minor;
} DLPackVersion;

/* DLManagedTensorVersioned.flags bits. */
#define DLPACK_FLAG_BITMASK_READ_ONLY (UINT64_C(1) << 0) /* the consumer must not write */
#define DLPACK_FLAG_BITMASK_IS_COPIED (UINT64_C(1) << 1) /* the producer copied the data */

/* The 1.0 form: carries the ABI version it was made with, and flags. */
typedef struct DLManagedTensorVersioned {
    DLPackVersion version;
    void *manager_ctx;
    void (*deleter)(struct DLManagedTensorVersioned *self);
    uint64_t flags;
    DLTensor dl_tensor;
} DLManagedTensorVersioned;

#ifdef __cplusplus
}
#endif
#endif /* DLPACK_DLPACK_H_ */

#ifdef __cplusplus
extern "C" {
#endif

/* Exports t without copying: *out receives a new DLManagedTensor (owned by the caller, freed by
 * calling its deleter) describing t's elements in place — the pointer of t's element 0 as data,
 * byte_offset 0, t's shape and strides (always given, in elements; the arrays live as long as
 * the managed tensor), device kDLCPU id 0. Views (slices, transposes) export as they are.
 * dtype mapping: F32/F64/F16 -> kDLFloat 32/64/16, BF16 -> kDLBfloat 16, I32/I64 -> kDLInt
 * 32/64, U8 -> kDLUInt 8, BOOL -> kDLBool 8; lanes 1.
 * Errors (*out set to NULL, nothing allocated): t or out NULL (EG_ERR_NULL_ARGUMENT), t not on
 * the CPU (EG_ERR_UNSUPPORTED), out of host memory. */
eg_status eg_to_dlpack(const eg_tensor *t, DLManagedTensor **out);

/* The same as a DLManagedTensorVersioned, version {1, 0}, flags 0 (writable, not a copy). */
eg_status eg_to_dlpack_versioned(const eg_tensor *t, DLManagedTensorVersioned **out);

/* Imports a DLPack tensor without copying: returns a NEW eagle tensor (owned by the innermost
 * open scope, if any) whose elements ARE the DLPack memory, with its shape, strides (NULL:
 * row-major) and byte_offset honoured. On success eagle owns `managed`: its deleter runs exactly
 * once, when the last eagle reference to that memory goes (the tensor, its views, a re-export).
 * Accepted: device kDLCPU; lanes 1 and (code, bits) the mapping of eg_to_dlpack (kDLUInt 8 is U8,
 * kDLBool 8 is BOOL); 0 <= ndim <= EG_MAX_DIMS; strides >= 0; data (plus byte_offset) aligned to
 * the element size.
 * NULL with an error, `managed` untouched and still the caller's, when: managed is NULL
 * (EG_ERR_NULL_ARGUMENT); the device, dtype, lanes, ndim, a negative stride or misaligned data is
 * not supported (EG_ERR_UNSUPPORTED, naming what is); shape is NULL with ndim > 0, a size is
 * negative, the element count or extent overflows, or data is NULL for a non-empty tensor
 * (EG_ERR_INVALID_ARGUMENT); out of host memory. */
eg_tensor *eg_from_dlpack(DLManagedTensor *managed);

/* The same for the 1.0 form. Also refused (EG_ERR_UNSUPPORTED): a major version other than 1,
 * and the READ_ONLY flag (eagle tensors are writable; copy the data first). */
eg_tensor *eg_from_dlpack_versioned(DLManagedTensorVersioned *managed);

#if !defined(EG_NO_CALLSITE)
#define eg_to_dlpack(...)             EG_CALLSITE_(eg_to_dlpack(__VA_ARGS__))
#define eg_to_dlpack_versioned(...)   EG_CALLSITE_(eg_to_dlpack_versioned(__VA_ARGS__))
#define eg_from_dlpack(...)           EG_CALLSITE_(eg_from_dlpack(__VA_ARGS__))
#define eg_from_dlpack_versioned(...) EG_CALLSITE_(eg_from_dlpack_versioned(__VA_ARGS__))
#endif

#ifdef __cplusplus
}
#endif
#endif
