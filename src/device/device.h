/* Internal: the device interface, first half — where a device's memory lives and how bytes move.
 *
 * A device's interface comes in two halves because the layers need them at different heights:
 * core makes tensors, so it needs a device's memory (allocator, copy, memset, streams); the
 * executors run kernels, so they need its compute (kernel table, supports(), fusion and replay
 * hooks), which sits above the backends that implement it (backend/backend.h, reached through
 * the dispatch layer). This half sits just above mem/ and below core/.
 *
 * The host is split into logical CPU devices cpu:0 … cpu:N-1 (EG_CPU_DEVICES=N, or
 * eg_device_configure_cpus before first use), each with its own caching allocator and
 * statistics: separate memory spaces in every check, the same host memory underneath. Other
 * devices (cuda:N) are created by their backend, which fills this struct. */
#ifndef EAGLE_SRC_DEVICE_DEVICE_H
#define EAGLE_SRC_DEVICE_DEVICE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

#include "eagle/device.h"
#include "mem/allocator.h"

/* A queue of work on a device; NULL is the device's default stream. The CPU runs every call to
 * completion, so on the CPU streams and events are NULL and their functions succeed at once. */
typedef struct eg__stream eg__stream;
typedef struct eg__event eg__event;

/* The most devices of one kind (cpu:N, cuda:N) a process can have. */
#define EG__MAX_DEVICES_PER_KIND 64

struct eg_device {
    char name[16]; /* "cpu", "cpu:1", "cuda:0" */
    eg_device_type type;
    int index;     /* N of cpu:N / cuda:N */
    bool host;     /* its memory is host memory, addressable by the CPU */
    void *context; /* the backend's own state for this device */
    /* The device's allocator, created at first use; NULL with an error when out of memory. */
    eg__allocator *(*get_allocator)(const eg_device *device);
    /* Copies bytes from src on src_device to dst on dst_device; one of the two is this device's
     * kind (the backend that can see both memories). Asynchronous on `stream` where the device
     * has streams (then the memory must stay valid until the stream is synchronized). */
    eg_status (*copy)(const eg_device *dst_device, void *dst, const eg_device *src_device,
                      const void *src, size_t bytes, eg__stream *stream);
    /* Sets bytes of device memory to value (a byte). */
    eg_status (*memset)(const eg_device *device, void *dst, int value, size_t bytes,
                        eg__stream *stream);
    /* Streams and events: *out receives a new stream / a recorded event (NULL on the CPU). */
    eg_status (*stream_create)(const eg_device *device, eg__stream **out);
    void (*stream_destroy)(const eg_device *device, eg__stream *stream);
    eg_status (*event_record)(const eg_device *device, eg__stream *stream, eg__event **out);
    /* Makes `stream` wait for `event` (recorded on any stream of this device). */
    eg_status (*event_wait)(const eg_device *device, eg__stream *stream, eg__event *event);
    void (*event_destroy)(const eg_device *device, eg__event *event);
    /* Waits until all queued work on the device is done; reports a kernel fault raised since. */
    eg_status (*sync)(const eg_device *device);
};

/* The host devices. eg__host_device(i) is cpu:i (NULL past the count); the count is fixed at
 * first use by EG_CPU_DEVICES or eg_device_configure_cpus. cpu:0 is named "cpu" when the host is
 * not split, like the single CPU device it then is. */
int eg__host_device_count(void);
const eg_device *eg__host_device(int index);
extern struct eg_device eg__host_devices[EG__MAX_DEVICES_PER_KIND];
extern atomic_bool eg__host_devices_ready;
void eg__host_devices_init(void);
/* cpu:0: where host-side work (input pipelines, file readers) puts its tensors. Never NULL.
 * Inline (every tensor creation asks); the first call sets the host devices up. */
static inline const eg_device *eg__host(void) {
    if (__builtin_expect(!atomic_load_explicit(&eg__host_devices_ready, memory_order_acquire), 0))
        eg__host_devices_init();
    return &eg__host_devices[0];
}

/* The device new tensors are created on: the innermost device scope of this thread, else cpu:0.
 * Inline because every creation asks. */
extern _Thread_local const eg_device *eg__device_scope_top;
static inline const eg_device *eg__device_current(void) {
    return eg__device_scope_top ? eg__device_scope_top : eg__host();
}

/* Whether host-memory tensors on `device` may be read and written by the CPU directly. */
static inline bool eg__device_is_host(const eg_device *device) {
    return device->host;
}

/* Copies bytes between any two devices through the device that can see both memories (the
 * non-host one, else the source). Synchronous on the default stream. */
eg_status eg__device_copy(const eg_device *dst_device, void *dst, const eg_device *src_device,
                          const void *src, size_t bytes);

/* Whether host memory gets transparent huge pages (EG_HUGEPAGES, read once). */
bool eg__host_huge_pages(void);
/* Why EG_CPU_DEVICES was ignored, or NULL when it was not. */
const char *eg__host_device_setting_error(void);

/* Joins what the host devices started (their allocators' caches are trimmed). */
void eg__host_devices_shutdown(void);

#endif
