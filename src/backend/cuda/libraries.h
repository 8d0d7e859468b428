/* Internal: the CUDA libraries Eagle opens at first use, as typed function pointers.
 *
 * cuBLASLt, cuDNN and NVRTC are opened with dlopen, not linked (cmake/EagleCuda.cmake says why).
 * Each function a kernel uses is listed once in the library's .def file as
 * EG_CUDA_FUNCTION(name) and is then called as eg__cuda_fn(name)(...): a pointer with the exact
 * type of the header's declaration (__typeof__), so a call is checked like a direct one. Call
 * eg__cuda_open_* first (cuda_internal.h): a pointer is NULL until its library is open. */
#ifndef EAGLE_SRC_BACKEND_CUDA_LIBRARIES_H
#define EAGLE_SRC_BACKEND_CUDA_LIBRARIES_H

#include <cublasLt.h>
#include <cudnn.h>
#include <nvrtc.h>

#define eg__cuda_fn(name) eg__cuda_pointer_##name

#define EG_CUDA_FUNCTION(name) extern __typeof__(name) *eg__cuda_pointer_##name;
#include "backend/cuda/blas_lt_functions.def"
#include "backend/cuda/dnn_functions.def"
#include "backend/cuda/nvrtc_functions.def"
#undef EG_CUDA_FUNCTION

#endif
