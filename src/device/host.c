/* The host devices cpu:0 … cpu:N-1: host memory through one caching allocator each, copies by
 * memcpy, streams and events that are nothing (every CPU call runs to completion). */
#define _DEFAULT_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "base/error.h"
#include "base/settings.h"
#include "device/device.h"

/* Host memory in blocks of at least HUGE_PAGE is advised onto transparent huge pages (the
 * caching allocator's segments are multiples of it). Where the kernel's THP mode is "madvise"
 * (Debian's default) nothing else gets them, and with 4 KiB pages a stream over a large tensor
 * misses the TLB every 4 KiB and its hardware prefetch restarts at every page (bench/RESULTS.md,
 * huge pages). EG_HUGEPAGES=0 turns the advice off. */
#define HUGE_PAGE ((size_t)2 << 20)

static bool huge_pages;
static pthread_once_t huge_pages_once = PTHREAD_ONCE_INIT;

static void read_huge_pages_setting(void) {
    const char *env = getenv("EG_HUGEPAGES");
    huge_pages = !(env && strcmp(env, "0") == 0);
}

bool eg__host_huge_pages(void) {
    pthread_once(&huge_pages_once, read_huge_pages_setting);
    return huge_pages;
}

static void *host_alloc(void *context, size_t bytes) {
    (void)context;
    if (bytes >= HUGE_PAGE && eg__host_huge_pages()) {
        size_t rounded = (bytes + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1);
        void *p = aligned_alloc(HUGE_PAGE, rounded);
        /* advice only: without THP the memory is still good */
        if (p) (void)madvise(p, rounded, MADV_HUGEPAGE);
        return p;
    }
    size_t rounded = (bytes + 63) & ~(size_t)63;
    return aligned_alloc(64, rounded ? rounded : 64);
}

static void host_free(void *context, void *pointer, size_t bytes) {
    (void)context;
    (void)bytes;
    free(pointer);
}

/* ---- one allocator per host device, created at first use ---- */

static _Atomic(eg__allocator *) host_allocators[EG__MAX_DEVICES_PER_KIND];
static pthread_mutex_t host_allocators_mutex = PTHREAD_MUTEX_INITIALIZER;

static eg__allocator *create_host_allocator(const eg_device *device) {
    const char *kind_env = getenv("EG_ALLOCATOR");
    eg__allocator_kind kind =
        kind_env && strcmp(kind_env, "system") == 0 ? EG__ALLOCATOR_SYSTEM : EG__ALLOCATOR_CACHING;
    /* The limit applies to each host device: a logical device is a memory space of its own. A
     * value that is not a size is refused, not ignored: the program would run without the limit
     * it asked for. */
    const char *limit_text = getenv("EG_MEMORY_LIMIT");
    uint64_t limit = 0;
    if (limit_text && *limit_text && (!eg__parse_bytes(limit_text, &limit) || limit > SIZE_MAX)) {
        eg__error(EG_ERR_INVALID_ARGUMENT,
                  "EG_MEMORY_LIMIT='%s' is not a size (bytes, or a number with K, M or G: "
                  "1048576, 512M, 1.5G; 0 for none): %s allocates nothing until it is fixed or "
                  "unset",
                  limit_text, device->name);
        return NULL;
    }
    eg__raw_allocator raw = {.alloc = host_alloc, .free = host_free};
    eg__allocator *allocator = eg__allocator_create(raw, kind, device->name);
    if (!allocator) return NULL;
    eg__allocator_enable_thread_caches(allocator, true);
    if (limit) eg__allocator_set_limit(allocator, (size_t)limit);
    return allocator;
}

static eg__allocator *host_get_allocator(const eg_device *device) {
    _Atomic(eg__allocator *) *slot = &host_allocators[device->index];
    eg__allocator *allocator = atomic_load_explicit(slot, memory_order_acquire);
    if (__builtin_expect(allocator != NULL, 1)) return allocator;
    pthread_mutex_lock(&host_allocators_mutex);
    allocator = atomic_load_explicit(slot, memory_order_relaxed);
    if (!allocator) { /* NULL when out of host memory: tried again next time */
        allocator = create_host_allocator(device);
        atomic_store_explicit(slot, allocator, memory_order_release);
    }
    pthread_mutex_unlock(&host_allocators_mutex);
    if (!allocator) eg__error(EG_ERR_OUT_OF_MEMORY, "no allocator for %s", device->name);
    return allocator;
}

/* ---- memory operations: the host sees every host device's memory ---- */

static eg_status host_copy(const eg_device *dst_device, void *dst, const eg_device *src_device,
                           const void *src, size_t bytes, eg__stream *stream) {
    (void)stream;
    /* every host device's memory is host memory, opaque ones' too (EG_CPU_DEVICES_OPAQUE) */
    if (dst_device->type != EG_DEVICE_CPU || src_device->type != EG_DEVICE_CPU)
        return eg__error(EG_ERR_UNSUPPORTED, "copy: the host cannot copy from %s to %s",
                         src_device->name, dst_device->name);
    if (bytes) memcpy(dst, src, bytes);
    return EG_OK;
}

static eg_status host_memset(const eg_device *device, void *dst, int value, size_t bytes,
                             eg__stream *stream) {
    (void)device;
    (void)stream;
    if (bytes) memset(dst, value, bytes);
    return EG_OK;
}

static eg_status host_stream_create(const eg_device *device, eg__stream **out) {
    (void)device;
    *out = NULL;
    return EG_OK;
}
static void host_stream_destroy(const eg_device *device, eg__stream *stream) {
    (void)device;
    (void)stream;
}
static eg_status host_event_record(const eg_device *device, eg__stream *stream, eg__event **out) {
    (void)device;
    (void)stream;
    *out = NULL;
    return EG_OK;
}
static eg_status host_event_wait(const eg_device *device, eg__stream *stream, eg__event *event) {
    (void)device;
    (void)stream;
    (void)event;
    return EG_OK;
}
static void host_event_destroy(const eg_device *device, eg__event *event) {
    (void)device;
    (void)event;
}
static eg_status host_sync(const eg_device *device) {
    (void)device;
    return EG_OK;
}

/* ---- the host devices ---- */

struct eg_device eg__host_devices[EG__MAX_DEVICES_PER_KIND];
atomic_bool eg__host_devices_ready;
static int host_device_count;
static int requested_count; /* eg_device_configure_cpus before first use; 0 = none */
static char count_setting_error[160];
static pthread_mutex_t host_init_mutex = PTHREAD_MUTEX_INITIALIZER;

/* EG_CPU_DEVICES: a count from 1 to EG__MAX_DEVICES_PER_KIND; anything else is ignored (one
 * device) and reported by eg_device_get. */
static int count_from_environment(void) {
    const char *env = getenv("EG_CPU_DEVICES");
    if (!env || !*env) return 1;
    char *end;
    long n = strtol(env, &end, 10);
    if (*end || n < 1 || n > EG__MAX_DEVICES_PER_KIND) {
        snprintf(count_setting_error, sizeof count_setting_error,
                 "EG_CPU_DEVICES='%s' is not a count from 1 to %d and was ignored", env,
                 EG__MAX_DEVICES_PER_KIND);
        return 1;
    }
    return (int)n;
}

/* EG_CPU_DEVICES_OPAQUE=1, a testing aid: the logical CPU devices but cpu:0 are treated as
 * devices whose memory the host may not touch (like a GPU's): creation, reads, printing,
 * checkpoints and optimizer slots then take the paths a GPU needs (staging copies, read-backs),
 * which the CPU's kernels still compute on, so those paths are tested on any machine. */
static bool opaque_from_environment(void) {
    return eg__setting_on("EG_CPU_DEVICES_OPAQUE");
}

void eg__host_devices_init(void) {
    pthread_mutex_lock(&host_init_mutex);
    if (!atomic_load_explicit(&eg__host_devices_ready, memory_order_relaxed)) {
        int n = requested_count ? requested_count : count_from_environment();
        bool opaque = opaque_from_environment();
        for (int i = 0; i < n; i++) {
            struct eg_device *d = &eg__host_devices[i];
            if (n == 1)
                snprintf(d->name, sizeof d->name, "cpu");
            else
                snprintf(d->name, sizeof d->name, "cpu:%d", i);
            d->type = EG_DEVICE_CPU;
            d->index = i;
            d->host = i == 0 || !opaque;
            d->get_allocator = host_get_allocator;
            d->copy = host_copy;
            d->memset = host_memset;
            d->stream_create = host_stream_create;
            d->stream_destroy = host_stream_destroy;
            d->event_record = host_event_record;
            d->event_wait = host_event_wait;
            d->event_destroy = host_event_destroy;
            d->sync = host_sync;
        }
        host_device_count = n;
        atomic_store_explicit(&eg__host_devices_ready, true, memory_order_release);
    }
    pthread_mutex_unlock(&host_init_mutex);
}

int eg__host_device_count(void) {
    (void)eg__host();
    return host_device_count;
}

const eg_device *eg__host_device(int index) {
    (void)eg__host();
    return index >= 0 && index < host_device_count ? &eg__host_devices[index] : NULL;
}

const char *eg__host_device_setting_error(void) {
    (void)eg__host();
    return count_setting_error[0] ? count_setting_error : NULL;
}

eg_status eg_device_configure_cpus(int n) {
    if (n < 1 || n > EG__MAX_DEVICES_PER_KIND)
        return eg__error(EG_ERR_INVALID_ARGUMENT,
                         "device_configure_cpus: %d CPU devices; a count from 1 to %d is needed", n,
                         EG__MAX_DEVICES_PER_KIND);
    pthread_mutex_lock(&host_init_mutex);
    bool ready = atomic_load_explicit(&eg__host_devices_ready, memory_order_relaxed);
    if (!ready) requested_count = n;
    pthread_mutex_unlock(&host_init_mutex);
    if (ready && host_device_count != n)
        return eg__error(EG_ERR_STATE,
                         "device_configure_cpus: the host is already in use as %d CPU device%s; "
                         "configure it before the first tensor (or set EG_CPU_DEVICES)",
                         host_device_count, host_device_count == 1 ? "" : "s");
    return EG_OK;
}

void eg__host_devices_shutdown(void) {
    if (!atomic_load_explicit(&eg__host_devices_ready, memory_order_acquire)) return;
    for (int i = 0; i < host_device_count; i++) {
        eg__allocator *allocator = atomic_load_explicit(&host_allocators[i], memory_order_acquire);
        if (allocator) eg__allocator_trim(allocator);
    }
}

/* ---- copies between any two devices ---- */

eg_status eg__device_copy(const eg_device *dst_device, void *dst, const eg_device *src_device,
                          const void *src, size_t bytes) {
    const eg_device *through = !dst_device->host ? dst_device : src_device;
    return through->copy(dst_device, dst, src_device, src, bytes, NULL);
}

/* ---- device scopes ---- */

#define MAX_DEVICE_SCOPE_DEPTH 64

_Thread_local const eg_device *eg__device_scope_top;
static _Thread_local const eg_device *scope_stack[MAX_DEVICE_SCOPE_DEPTH];
static _Thread_local int scope_depth;

eg_status eg_device_scope_begin(const eg_device *device) {
    if (!device) return eg__error(EG_ERR_NULL_ARGUMENT, "device_scope_begin: device is NULL");
    if (scope_depth == MAX_DEVICE_SCOPE_DEPTH)
        return eg__error(EG_ERR_STATE, "device_scope_begin: more than %d nested device scopes",
                         MAX_DEVICE_SCOPE_DEPTH);
    scope_stack[scope_depth++] = device;
    eg__device_scope_top = device;
    return EG_OK;
}

eg_status eg_device_scope_end(void) {
    if (scope_depth == 0)
        return eg__error(EG_ERR_STATE, "device_scope_end: no device scope is open on this thread");
    scope_depth--;
    eg__device_scope_top = scope_depth ? scope_stack[scope_depth - 1] : NULL;
    return EG_OK;
}

const eg_device *eg_device_current(void) {
    return eg__device_current();
}

/* ---- the public accessors ---- */

const eg_device *eg_device_cpu(void) {
    return eg__host();
}

const char *eg_device_name(const eg_device *device) {
    return device ? device->name : "(null)";
}

eg_device_type eg_device_kind(const eg_device *device) {
    return device ? device->type : EG_DEVICE_CPU;
}

int eg_device_index(const eg_device *device) {
    return device ? device->index : -1;
}

eg_status eg_device_sync(const eg_device *device) {
    if (!device) return eg__error(EG_ERR_NULL_ARGUMENT, "device_sync: device is NULL");
    return device->sync(device);
}
