/* Internal: the CUDA backend's shared state — its devices, their streams and memory, and the
 * helpers every CUDA kernel wrapper uses.
 *
 * How an op runs: the wrapper (a C function of the kernel table, given an eg__kernel_call)
 * makes the op's GPU current on the calling thread (eg__cuda_enter), enqueues its kernels or
 * library calls on the device's stream and returns at once (eg__cuda_launched). Nothing waits for
 * the GPU until a value is read: copies to the host synchronize the stream, and a fault raised by
 * a kernel is reported there, naming the op enqueued last. EG_CUDA_SYNC=1 synchronizes after
 * every op instead, so the error names the exact call site.
 *
 * Memory: one caching allocator per GPU (mem/allocator.c over cudaMalloc, requests rounded to
 * 512 bytes, small requests in 2 MiB segments, large ones split and coalesced). Every block
 * belongs to the device's stream: every op of the device is enqueued on that one stream, so a
 * block freed by the host and handed out again is only touched by work queued after the work
 * that used it, and needs no event. (A second stream would need a record-stream event per block,
 * as in PyTorch; nothing enqueues on one yet.)
 *
 * Device code lives in .cu files behind plain C declarations (the *_launch.h headers), so that it
 * never includes Eagle's C11 headers. */
#ifndef EAGLE_SRC_BACKEND_CUDA_CUDA_INTERNAL_H
#define EAGLE_SRC_BACKEND_CUDA_CUDA_INTERNAL_H

#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdatomic.h>

#include "backend/backend.h"

/* Compute capability the device code is built for (sm_90 + compute_90 PTX): older GPUs cannot
 * run it and are not offered. */
#define EG__CUDA_MIN_MAJOR 9

struct eg__cuda_capture_list;
struct eg__cuda_graph;

typedef struct eg__cuda_device {
    struct eg_device *device; /* cuda:N */
    int ordinal;              /* the CUDA runtime's device number */
    char gpu_name[256];
    size_t total_memory;
    int major, minor, sm_count;
    char description[400];

    pthread_mutex_t mutex;    /* guards the lazily made members below */
    cudaStream_t stream;      /* every op of the device is enqueued here (non-blocking) */
    atomic_bool stream_ready; /* set (release) once the stream exists */
    _Atomic(eg__allocator *) allocator;
    /* Pinned host buffers for host-to-device copies: the host writes one while the GPU reads
     * the other (an event says when a buffer is free again). */
    void *staging[2];
    cudaEvent_t staging_free[2];
    int staging_next;
    /* The op enqueued last (its name), what an asynchronous fault is reported with. */
    _Atomic(const char *) last_op;
    /* While a graph is being captured on the stream (graphs.c): the temporaries freed during
     * the capture, kept for the graph (its kernels use them at every launch). */
    atomic_bool capturing;   /* read by every thread's ops (eg__cuda_enter) */
    pthread_t capture_owner; /* the thread that captures or refreshes */
    struct eg__cuda_capture_list *captured_scratch;
    /* While a captured graph's per-call scalars are written (graphs.c: refresh). */
    struct eg__cuda_graph *_Atomic refreshing;
    /* Library handles (cuBLASLt, cuDNN) and their workspace, made at first use. */
    void *blas_lt, *dnn;
    void *workspace;
    size_t workspace_bytes;
} eg__cuda_device;

/* The CUDA state of a cuda:N device. */
static inline eg__cuda_device *eg__cuda_of(const eg_device *device) {
    return (eg__cuda_device *)device->context;
}

/* Makes d's GPU current on the calling thread and its stream exist; EG_ERR_DEVICE on failure. */
eg_status eg__cuda_enter(eg__cuda_device *d);
/* The stream every op of d is enqueued on (made by eg__cuda_enter). */
static inline cudaStream_t eg__cuda_stream(const eg__cuda_device *d) {
    return d->stream;
}

/* EG_ERR_DEVICE for a failed CUDA runtime call: "what on cuda:N: cudaErrorX (text)". Clears the
 * runtime's sticky last error where it can. */
eg_status eg__cuda_error(cudaError_t error, const eg_device *device, const char *what);

/* Ends every kernel wrapper: checks the launches it made (cudaGetLastError), remembers call's op
 * as the last one enqueued, and with EG_CUDA_SYNC=1 waits for it, so a fault is reported by the
 * op that caused it. */
eg_status eg__cuda_launched(const eg__kernel_call *call);

/* The device whose stream runs call (the output's, or the GPU side of a copy between devices),
 * entered. NULL + error when it cannot be entered. */
eg__cuda_device *eg__cuda_call_device(const eg__kernel_call *call);

/* Device memory for a kernel's own temporaries (a contiguous copy of a strided input, a
 * reduction's partial results): from the device's caching allocator, given back with
 * eg__cuda_scratch_free once the kernels using it are enqueued (safe: every user is on the
 * device's one stream, see above). NULL + error when out of memory. */
typedef struct eg__cuda_scratch {
    void *pointer;
    void *handle;
    eg__allocator *allocator;
} eg__cuda_scratch;
void *eg__cuda_scratch_alloc(eg__cuda_device *d, size_t bytes, eg__cuda_scratch *scratch);
void eg__cuda_scratch_free(eg__cuda_scratch *scratch);

/* Whether EG_CUDA_SYNC=1 asks for a wait after every op. */
bool eg__cuda_sync_every_op(void);
/* Whether EG_CUDA_TF32=1 lets f32 products and convolutions use TF32 tensor cores (off by
 * default: f32 results then match the CPU's to f32 rounding). */
bool eg__cuda_tf32_allowed(void);

/* Graph capture (graphs.c): while d is capturing, a freed temporary goes to the graph being
 * recorded instead of back to the allocator (false when it could not: out of host memory, then
 * the capture fails). */
bool eg__cuda_capture_keep(eg__cuda_device *d, const eg__cuda_scratch *scratch);
eg_status eg__cuda_capture_begin(const eg_device *device);
eg_status eg__cuda_capture_end(const eg_device *device, void **graph);
eg_status eg__cuda_graph_launch(const eg_device *device, void *graph);
void eg__cuda_graph_free(const eg_device *device, void *graph);
eg_status eg__cuda_graph_refresh_begin(const eg_device *device, void *graph);
eg_status eg__cuda_graph_refresh_end(const eg_device *device, void *graph);
/* A kernel's per-call scalars (bytes of them, packed) in a graph being captured: device memory
 * the graph fills from a pinned host copy at every launch, which the kernel reads; NULL with an
 * error when out of memory (the capture then fails). */
const void *eg__cuda_capture_scalars(eg__cuda_device *d, const void *packed, size_t bytes);
/* During a refresh: this call's scalars for the next such kernel of the capture, in order. */
void eg__cuda_refresh_scalars(eg__cuda_device *d, const void *packed, size_t bytes);

/* x's elements in row-major order, contiguous in device memory: x's own data when x is
 * contiguous (scratch untouched, pointer NULL), else a copy enqueued into scratch. */
const void *eg__cuda_contiguous(eg__cuda_device *d, const eg_tensor *x, eg__cuda_scratch *scratch);

/* Enqueues dst (dense device memory for x->n_elems elements) = x's elements in row-major order
 * on d's stream (copies.c). */
eg_status eg__cuda_copy_dense(eg__cuda_device *d, void *dst, const eg_tensor *x);

/* The CUDA backend's devices (runtime.c). */
int eg__cuda_device_count(void);
const eg_device *eg__cuda_device_at(int index);
const char *eg__cuda_unavailable(void);
const char *eg__cuda_describe(void);
const char *eg__cuda_describe_device(const eg_device *device);
void eg__cuda_shutdown(void);

/* ---- the libraries opened at first use (libraries.c) ---- */

/* Opens cuBLASLt / cuDNN / NVRTC once (dlopen, thread-safe); NULL when found, else why not
 * (static storage). */
const char *eg__cuda_open_blas_lt(void);
const char *eg__cuda_open_dnn(void);
const char *eg__cuda_open_nvrtc(void);
/* Versions found ("cuBLASLt 13.1.0, cuDNN 9.19.0, NVRTC 13.0" or what is missing), for info. */
void eg__cuda_library_versions(char *out, size_t size);

#endif
