/* The CUDA devices: found once through the CUDA runtime, each with its stream, its caching
 * allocator over cudaMalloc and the memory half of the device interface (copies, memset,
 * events, sync). A machine without a GPU or driver has no cuda devices, and unavailable() says
 * why in words. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/copy_launch.h"
#include "backend/cuda/cuda_internal.h"
#include "backend/cuda/fusion.h"
#include "backend/cuda/libraries.h"
#include "backend/cuda/products_launch.h"
#include "base/error.h"
#include "base/settings.h"

static struct eg_device devices[EG__MAX_DEVICES_PER_KIND];
static eg__cuda_device states[EG__MAX_DEVICES_PER_KIND];
static int device_count;
static char unavailable_reason[1100];
static char backend_description[512];
static pthread_once_t discovery_once = PTHREAD_ONCE_INIT;

/* Host-to-device copies up to this size go through a pinned staging buffer: the call returns
 * once the bytes are in pinned memory, the DMA runs while the host goes on. Larger ones are
 * copied from pageable memory directly (cudaMemcpyAsync then waits for the source itself). */
#define STAGING_BYTES ((size_t)4 << 20)

/* ---- errors ---- */

eg_status eg__cuda_error(cudaError_t error, const eg_device *device, const char *what) {
    (void)cudaGetLastError(); /* clears a non-sticky error so the next call starts clean */
    return eg__error(EG_ERR_DEVICE, "%s on %s: %s (%s)", what, device ? device->name : "cuda",
                     cudaGetErrorName(error), cudaGetErrorString(error));
}

static atomic_int sync_setting = -1, tf32_setting = -1;

bool eg__cuda_sync_every_op(void) {
    return eg__setting_on_once(&sync_setting, "EG_CUDA_SYNC");
}

bool eg__cuda_tf32_allowed(void) {
    return eg__setting_on_once(&tf32_setting, "EG_CUDA_TF32");
}


/* ---- entering a device ---- */

static _Thread_local int current_ordinal = -1;

eg_status eg__cuda_enter(eg__cuda_device *d) {
    /* While a graph is captured or refreshed, other threads' work on the device would be
     * recorded into it (or write its scalars): they must wait for the capture to end. */
    if (__builtin_expect(d->capturing || d->refreshing, 0) &&
        !pthread_equal(d->capture_owner, pthread_self()))
        return eg__error(EG_ERR_STATE,
                         "%s is capturing a graph on another thread; its ops wait until the "
                         "capture ends",
                         d->device->name);
    if (current_ordinal != d->ordinal) {
        cudaError_t e = cudaSetDevice(d->ordinal);
        if (e != cudaSuccess) return eg__cuda_error(e, d->device, "cudaSetDevice");
        current_ordinal = d->ordinal;
    }
    if (__builtin_expect(atomic_load_explicit(&d->stream_ready, memory_order_acquire), 1))
        return EG_OK;
    pthread_mutex_lock(&d->mutex);
    eg_status status = EG_OK;
    if (!atomic_load_explicit(&d->stream_ready, memory_order_relaxed)) {
        cudaError_t e = cudaStreamCreateWithFlags(&d->stream, cudaStreamNonBlocking);
        if (e == cudaSuccess) {
            atomic_store_explicit(&d->stream_ready, true, memory_order_release);
        } else {
            status = eg__cuda_error(e, d->device, "cudaStreamCreate");
        }
    }
    pthread_mutex_unlock(&d->mutex);
    return status;
}

/* The GPU a call runs on: the output's, or for a copy to the host its input's (dispatch.h). */
static const eg_device *call_gpu(const eg__kernel_call *call) {
    const eg_device *device = call->output->device;
    return call->op == EG__OP_TO_DEVICE && device->host ? call->inputs[0]->device : device;
}

eg__cuda_device *eg__cuda_call_device(const eg__kernel_call *call) {
    eg__cuda_device *d = eg__cuda_of(call_gpu(call));
    return eg__cuda_enter(d) == EG_OK ? d : NULL;
}

/* A fault raised by work on the stream: named with the op enqueued last. */
static eg_status report_fault(eg__cuda_device *d, cudaError_t e) {
    const char *op = atomic_load_explicit(&d->last_op, memory_order_relaxed);
    (void)cudaGetLastError();
    if (eg__cuda_sync_every_op() || !op)
        return eg__error(EG_ERR_DEVICE, "%s: %s (%s)", d->device->name, cudaGetErrorName(e),
                         cudaGetErrorString(e));
    return eg__error(EG_ERR_DEVICE,
                     "%s: %s (%s), raised by work enqueued up to op '%s' (run with "
                     "EG_CUDA_SYNC=1 to stop at the op that caused it)",
                     d->device->name, cudaGetErrorName(e), cudaGetErrorString(e), op);
}

eg_status eg__cuda_launched(const eg__kernel_call *call) {
    const eg_device *device = call_gpu(call);
    eg__cuda_device *d = eg__cuda_of(device);
    const char *name = eg__op_defs[call->op].name;
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess)
        return eg__op_error(call->op, EG_ERR_DEVICE, "launch on %s: %s (%s)", device->name,
                            cudaGetErrorName(e), cudaGetErrorString(e));
    atomic_store_explicit(&d->last_op, name, memory_order_relaxed);
    if (eg__cuda_sync_every_op()) {
        e = cudaStreamSynchronize(d->stream);
        if (e != cudaSuccess)
            return eg__op_error(call->op, EG_ERR_DEVICE, "on %s: %s (%s)", device->name,
                                cudaGetErrorName(e), cudaGetErrorString(e));
    }
    return EG_OK;
}

/* ---- memory ---- */

static void *raw_alloc(void *context, size_t bytes) {
    eg__cuda_device *d = context;
    if (eg__cuda_enter(d) != EG_OK) {
        eg_clear_error();
        return NULL;
    }
    void *pointer = NULL;
    if (cudaMalloc(&pointer, bytes) != cudaSuccess) {
        (void)cudaGetLastError();
        return NULL;
    }
    return pointer;
}

static void raw_free(void *context, void *pointer, size_t bytes) {
    (void)bytes;
    eg__cuda_device *d = context;
    if (eg__cuda_enter(d) != EG_OK) {
        eg_clear_error();
        return;
    }
    /* queued kernels may still read the segment: cudaFree only "may" wait for them */
    if (atomic_load_explicit(&d->stream_ready, memory_order_acquire))
        (void)cudaStreamSynchronize(d->stream);
    (void)cudaFree(pointer);
}

static void describe_free(void *context, char *out, size_t size) {
    eg__cuda_device *d = context;
    size_t free_bytes = 0, total = 0;
    if (eg__cuda_enter(d) != EG_OK || cudaMemGetInfo(&free_bytes, &total) != cudaSuccess) {
        eg_clear_error();
        (void)cudaGetLastError();
        out[0] = '\0';
        return;
    }
    snprintf(out, size, "the driver reports %.2f GiB free of %.2f GiB",
             (double)free_bytes / (1 << 30), (double)total / (1 << 30));
}

/* EG_CUDA_MEMORY_FRACTION=0.9: reserve that share of the GPU's memory at first use, like
 * TensorFlow's per_process_gpu_memory_fraction; unset (the default) grows on demand, like
 * allow_growth. A malformed value is ignored with a note on stderr from eagle's tools. */
static double memory_fraction(void) {
    const char *env = getenv("EG_CUDA_MEMORY_FRACTION");
    if (!env || !*env) return 0.0;
    char *end;
    double f = strtod(env, &end);
    return *end || !(f > 0.0 && f <= 1.0) ? 0.0 : f;
}

static eg__allocator *cuda_get_allocator(const eg_device *device) {
    eg__cuda_device *d = eg__cuda_of(device);
    eg__allocator *a = atomic_load_explicit(&d->allocator, memory_order_acquire);
    if (a) return a;
    pthread_mutex_lock(&d->mutex);
    a = atomic_load_explicit(&d->allocator, memory_order_relaxed);
    if (!a) {
        eg__raw_allocator raw = {
            .alloc = raw_alloc, .free = raw_free, .context = d, .describe_free = describe_free};
        a = eg__allocator_create(raw, EG__ALLOCATOR_CACHING, device->name);
        if (a) {
            (void)eg__allocator_set_rounding(a, 512);
            double fraction = memory_fraction();
            if (fraction > 0.0 &&
                eg__allocator_reserve(a, (size_t)(fraction * (double)d->total_memory)) != EG_OK)
                eg_clear_error(); /* growth still works; the reservation is a hint */
            atomic_store_explicit(&d->allocator, a, memory_order_release);
        }
    }
    pthread_mutex_unlock(&d->mutex);
    if (!a) eg__error(EG_ERR_OUT_OF_MEMORY, "no allocator for %s", device->name);
    return a;
}

void *eg__cuda_scratch_alloc(eg__cuda_device *d, size_t bytes, eg__cuda_scratch *scratch) {
    scratch->allocator = cuda_get_allocator(d->device);
    scratch->pointer = NULL;
    scratch->handle = NULL;
    if (!scratch->allocator) return NULL;
    scratch->pointer = eg__allocator_alloc(scratch->allocator, bytes, &scratch->handle);
    return scratch->pointer;
}

/* The device whose allocator a scratch block came from. */
static eg__cuda_device *scratch_device(const eg__cuda_scratch *scratch) {
    for (int i = 0; i < device_count; i++)
        if (atomic_load_explicit(&states[i].allocator, memory_order_relaxed) == scratch->allocator)
            return &states[i];
    return NULL;
}

void eg__cuda_scratch_free(eg__cuda_scratch *scratch) {
    if (scratch->handle) {
        eg__cuda_device *d = scratch_device(scratch);
        /* a graph being captured will use the block at every launch: it keeps it */
        if (!(d && d->capturing && eg__cuda_capture_keep(d, scratch)))
            eg__allocator_free(scratch->allocator, scratch->handle);
    }
    scratch->handle = scratch->pointer = NULL;
}

const void *eg__cuda_contiguous(eg__cuda_device *d, const eg_tensor *x, eg__cuda_scratch *scratch) {
    scratch->pointer = scratch->handle = NULL;
    if (eg__is_contiguous(x)) return eg__data(x);
    size_t size = eg__dtype_size(x->dtype);
    void *out = eg__cuda_scratch_alloc(d, (size_t)x->n_elems * size, scratch);
    if (!out) return NULL;
    eg__cuda_strided_copy(out, (const char *)x->storage->data + x->offset * (int64_t)size, size,
                          x->n_dims, x->shape, x->strides, x->n_elems, eg__cuda_stream(d));
    return out;
}

/* Copies between host memory and a GPU, or between GPUs. Device-to-host copies wait for the
 * stream: the caller reads the bytes next. */
static eg_status cuda_copy(const eg_device *dst_device, void *dst, const eg_device *src_device,
                           const void *src, size_t bytes, eg__stream *stream) {
    (void)stream; /* every copy is ordered on the device's own stream */
    if (!bytes) return EG_OK;
    const eg_device *gpu = !dst_device->host ? dst_device : src_device;
    eg__cuda_device *d = eg__cuda_of(gpu);
    eg_status status = eg__cuda_enter(d);
    if (status != EG_OK) return status;
    if (d->capturing && (dst_device->host || src_device->host))
        return eg__error(EG_ERR_UNSUPPORTED,
                         "copy between the host and %s while a graph is captured (a captured "
                         "graph would replay the old host bytes)",
                         gpu->name);
    cudaError_t e;
    if (!dst_device->host && !src_device->host) {
        /* between GPUs: the source's pending work (what made the bytes) finishes first, as the
         * peer copy is ordered on the destination's stream only */
        eg__cuda_device *source = eg__cuda_of(src_device);
        e = cudaSuccess;
        if (dst_device != src_device && (status = eg__cuda_enter(source)) == EG_OK)
            e = cudaStreamSynchronize(source->stream);
        if (status != EG_OK) return status;
        if (e == cudaSuccess && (status = eg__cuda_enter(d)) != EG_OK) return status;
        if (e == cudaSuccess)
            e = dst_device == src_device
                    ? cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, d->stream)
                    : cudaMemcpyPeerAsync(dst, eg__cuda_of(dst_device)->ordinal, src,
                                          source->ordinal, bytes, d->stream);
        if (e == cudaSuccess && dst_device != src_device) e = cudaStreamSynchronize(d->stream);
    } else if (dst_device->host) {
        e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, d->stream);
        if (e == cudaSuccess) e = cudaStreamSynchronize(d->stream);
        if (e != cudaSuccess) return report_fault(d, e);
        return EG_OK;
    } else if (bytes <= STAGING_BYTES) {
        pthread_mutex_lock(&d->mutex);
        int slot = d->staging_next;
        e = cudaSuccess;
        if (!d->staging[slot]) {
            e = cudaHostAlloc(&d->staging[slot], STAGING_BYTES, cudaHostAllocDefault);
            if (e == cudaSuccess)
                e = cudaEventCreateWithFlags(&d->staging_free[slot], cudaEventDisableTiming);
            if (e != cudaSuccess && d->staging[slot]) { /* both or neither, for the next copy */
                (void)cudaFreeHost(d->staging[slot]);
                d->staging[slot] = NULL;
            }
        } else {
            e = cudaEventSynchronize(d->staging_free[slot]);
        }
        if (e == cudaSuccess) {
            memcpy(d->staging[slot], src, bytes);
            e = cudaMemcpyAsync(dst, d->staging[slot], bytes, cudaMemcpyHostToDevice, d->stream);
            if (e == cudaSuccess) e = cudaEventRecord(d->staging_free[slot], d->stream);
            d->staging_next = 1 - slot;
        }
        pthread_mutex_unlock(&d->mutex);
    } else {
        e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, d->stream);
    }
    return e == cudaSuccess ? EG_OK : eg__cuda_error(e, gpu, "copy");
}

static eg_status cuda_memset(const eg_device *device, void *dst, int value, size_t bytes,
                             eg__stream *stream) {
    (void)stream;
    eg__cuda_device *d = eg__cuda_of(device);
    eg_status status = eg__cuda_enter(d);
    if (status != EG_OK) return status;
    cudaError_t e = cudaMemsetAsync(dst, value, bytes, d->stream);
    return e == cudaSuccess ? EG_OK : eg__cuda_error(e, device, "memset");
}

static eg_status cuda_stream_create(const eg_device *device, eg__stream **out) {
    eg__cuda_device *d = eg__cuda_of(device);
    eg_status status = eg__cuda_enter(d);
    if (status != EG_OK) return status;
    cudaStream_t s;
    cudaError_t e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    if (e != cudaSuccess) return eg__cuda_error(e, device, "cudaStreamCreate");
    *out = (eg__stream *)s;
    return EG_OK;
}

static void cuda_stream_destroy(const eg_device *device, eg__stream *stream) {
    if (stream && eg__cuda_enter(eg__cuda_of(device)) == EG_OK)
        (void)cudaStreamDestroy((cudaStream_t)stream);
}

static cudaStream_t stream_or_default(const eg_device *device, eg__stream *stream) {
    return stream ? (cudaStream_t)stream : eg__cuda_of(device)->stream;
}

static eg_status cuda_event_record(const eg_device *device, eg__stream *stream, eg__event **out) {
    eg_status status = eg__cuda_enter(eg__cuda_of(device));
    if (status != EG_OK) return status;
    cudaEvent_t event;
    cudaError_t e = cudaEventCreateWithFlags(&event, cudaEventDisableTiming);
    if (e == cudaSuccess) e = cudaEventRecord(event, stream_or_default(device, stream));
    if (e != cudaSuccess) return eg__cuda_error(e, device, "cudaEventRecord");
    *out = (eg__event *)event;
    return EG_OK;
}

static eg_status cuda_event_wait(const eg_device *device, eg__stream *stream, eg__event *event) {
    eg_status status = eg__cuda_enter(eg__cuda_of(device));
    if (status != EG_OK) return status;
    cudaError_t e = cudaStreamWaitEvent(stream_or_default(device, stream), (cudaEvent_t)event, 0);
    return e == cudaSuccess ? EG_OK : eg__cuda_error(e, device, "cudaStreamWaitEvent");
}

static void cuda_event_destroy(const eg_device *device, eg__event *event) {
    (void)device;
    if (event) (void)cudaEventDestroy((cudaEvent_t)event);
}

static eg_status cuda_sync(const eg_device *device) {
    eg__cuda_device *d = eg__cuda_of(device);
    eg_status status = eg__cuda_enter(d);
    if (status != EG_OK) return status;
    cudaError_t e = cudaStreamSynchronize(d->stream);
    return e == cudaSuccess ? EG_OK : report_fault(d, e);
}

/* ---- discovery ---- */

static void describe_unusable(cudaError_t e) {
    int runtime = 0, driver = 0;
    (void)cudaRuntimeGetVersion(&runtime);
    (void)cudaDriverGetVersion(&driver);
    if (e == cudaErrorInsufficientDriver && driver == 0)
        snprintf(unavailable_reason, sizeof unavailable_reason,
                 "no NVIDIA driver is loaded (the CUDA runtime %d.%d needs one: %s)",
                 runtime / 1000, runtime % 1000 / 10, cudaGetErrorName(e));
    else if (e == cudaErrorInsufficientDriver)
        snprintf(unavailable_reason, sizeof unavailable_reason,
                 "the NVIDIA driver supports CUDA %d.%d, older than this build's runtime %d.%d "
                 "(%s)",
                 driver / 1000, driver % 1000 / 10, runtime / 1000, runtime % 1000 / 10,
                 cudaGetErrorName(e));
    else if (e == cudaErrorNoDevice)
        snprintf(unavailable_reason, sizeof unavailable_reason,
                 "the driver sees no GPU (%s; CUDA_VISIBLE_DEVICES may hide them)",
                 cudaGetErrorName(e));
    else
        snprintf(unavailable_reason, sizeof unavailable_reason, "the CUDA runtime failed: %s (%s)",
                 cudaGetErrorName(e), cudaGetErrorString(e));
}

static void discover(void) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        describe_unusable(e);
        (void)cudaGetLastError();
        n = 0;
    }
    char too_old[1024] = "";
    for (int ordinal = 0; ordinal < n && device_count < EG__MAX_DEVICES_PER_KIND; ordinal++) {
        struct cudaDeviceProp p;
        if (cudaGetDeviceProperties(&p, ordinal) != cudaSuccess) {
            (void)cudaGetLastError();
            continue;
        }
        if (p.major < EG__CUDA_MIN_MAJOR) {
            size_t used = strlen(too_old);
            snprintf(too_old + used, sizeof too_old - used,
                     "%sGPU %d (%s) has compute capability "
                     "%d.%d, below this build's sm_90",
                     used ? "; " : "", ordinal, p.name, p.major, p.minor);
            continue;
        }
        int i = device_count++;
        struct eg_device *device = &devices[i];
        eg__cuda_device *d = &states[i];
        d->device = device;
        d->ordinal = ordinal;
        snprintf(d->gpu_name, sizeof d->gpu_name, "%s", p.name);
        d->total_memory = p.totalGlobalMem;
        d->major = p.major;
        d->minor = p.minor;
        d->sm_count = p.multiProcessorCount;
        snprintf(d->description, sizeof d->description,
                 "%s, %.1f GiB, compute capability %d.%d, %d SMs", p.name,
                 (double)p.totalGlobalMem / (1 << 30), p.major, p.minor, p.multiProcessorCount);
        pthread_mutex_init(&d->mutex, NULL);
        snprintf(device->name, sizeof device->name, "cuda:%d", i);
        device->type = EG_DEVICE_CUDA;
        device->index = i;
        device->host = false;
        device->context = d;
        device->get_allocator = cuda_get_allocator;
        device->copy = cuda_copy;
        device->memset = cuda_memset;
        device->stream_create = cuda_stream_create;
        device->stream_destroy = cuda_stream_destroy;
        device->event_record = cuda_event_record;
        device->event_wait = cuda_event_wait;
        device->event_destroy = cuda_event_destroy;
        device->sync = cuda_sync;
    }
    if (!device_count && !unavailable_reason[0])
        snprintf(unavailable_reason, sizeof unavailable_reason, "%s",
                 too_old[0] ? too_old : "no usable GPU was found");
}

/* Opens the libraries to name their versions: only when asked (eagle info), never at discovery,
 * which every process with a CUDA build does. */
static pthread_once_t description_once = PTHREAD_ONCE_INIT;
static void describe_backend(void) {
    int runtime = 0;
    (void)cudaRuntimeGetVersion(&runtime);
    char libraries[400];
    eg__cuda_library_versions(libraries, sizeof libraries);
    snprintf(backend_description, sizeof backend_description,
             "built (CUDA runtime %d.%d, device code sm_%s + PTX; %s)", runtime / 1000,
             runtime % 1000 / 10, EG_CUDA_ARCHITECTURES, libraries);
}

static void discover_once(void) {
    pthread_once(&discovery_once, discover);
}

int eg__cuda_device_count(void) {
    discover_once();
    return device_count;
}

const eg_device *eg__cuda_device_at(int index) {
    discover_once();
    return index >= 0 && index < device_count ? &devices[index] : NULL;
}

const char *eg__cuda_unavailable(void) {
    discover_once();
    return device_count ? NULL : unavailable_reason;
}

const char *eg__cuda_describe(void) {
    discover_once();
    pthread_once(&description_once, describe_backend);
    return backend_description;
}

const char *eg__cuda_describe_device(const eg_device *device) {
    return device && device->type == EG_DEVICE_CUDA ? eg__cuda_of(device)->description : "";
}

void eg__cuda_shutdown(void) {
    if (!device_count) return;
    eg__cuda_fusion_reset(); /* the compiled fused kernels */
    for (int i = 0; i < device_count; i++) {
        eg__cuda_device *d = &states[i];
        if (eg__cuda_enter(d) != EG_OK) {
            eg_clear_error();
            continue;
        }
        (void)cudaStreamSynchronize(d->stream);
        pthread_mutex_lock(&d->mutex);
        if (d->blas_lt) (void)eg__cuda_fn(cublasLtDestroy)((cublasLtHandle_t)d->blas_lt);
        if (d->dnn) (void)eg__cuda_fn(cudnnDestroy)((cudnnHandle_t)d->dnn);
        if (d->workspace) (void)cudaFree(d->workspace);
        d->blas_lt = d->dnn = d->workspace = NULL;
        d->workspace_bytes = 0;
        eg__cuda_products_reset(i); /* made again at the next product */
        for (int k = 0; k < 2; k++) {
            if (d->staging[k]) (void)cudaFreeHost(d->staging[k]);
            if (d->staging_free[k]) (void)cudaEventDestroy(d->staging_free[k]);
            d->staging[k] = NULL;
            d->staging_free[k] = NULL;
        }
        pthread_mutex_unlock(&d->mutex);
        eg__allocator *a = atomic_load_explicit(&d->allocator, memory_order_acquire);
        if (a) eg__allocator_trim(a);
    }
}
