/* The CPU device: host memory through the caching allocator, kernels from eg__cpu_kernels. */
#define _DEFAULT_SOURCE
#include <pthread.h>
#include <stdbool.h>
#include <sys/mman.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/threadpool.h"
#include "core/error.h"

/* Host memory in blocks of at least HUGE_PAGE is advised onto transparent huge pages (the
 * caching allocator's segments are multiples of it). Where the kernel's THP mode is "madvise"
 * (Debian's default) nothing else gets them, and with 4 KiB pages a stream over a large tensor
 * misses the TLB every 4 KiB and its hardware prefetch restarts at every page: a contiguous
 * 16M-element add ran at 10.6 GB/s, with huge pages at 15.3 (bench/RESULTS.md). EG_HUGEPAGES=0
 * turns the advice off. */
#define HUGE_PAGE ((size_t)2 << 20)

static bool huge_pages;
static pthread_once_t huge_pages_once = PTHREAD_ONCE_INIT;

static void read_huge_pages_setting(void) {
    const char *env = getenv("EG_HUGEPAGES");
    huge_pages = !(env && strcmp(env, "0") == 0);
}

bool eg__cpu_huge_pages(void) {
    pthread_once(&huge_pages_once, read_huge_pages_setting);
    return huge_pages;
}

static void *host_alloc(void *context, size_t bytes) {
    (void)context;
    if (bytes >= HUGE_PAGE && eg__cpu_huge_pages()) {
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

static eg__allocator *cpu_allocator;
static pthread_once_t cpu_allocator_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t cpu_allocator_mutex = PTHREAD_MUTEX_INITIALIZER;

/* "512M", "2G", "1048576" -> bytes; 0 when unparsable. */
static size_t parse_bytes(const char *text) {
    char *end;
    double value = strtod(text, &end);
    if (end == text || value <= 0) return 0;
    switch (*end) {
    case 'k':
    case 'K':
        value *= 1024.0;
        break;
    case 'm':
    case 'M':
        value *= 1024.0 * 1024.0;
        break;
    case 'g':
    case 'G':
        value *= 1024.0 * 1024.0 * 1024.0;
        break;
    default:
        break;
    }
    return (size_t)value;
}

static void create_cpu_allocator(void) {
    const char *kind_env = getenv("EG_ALLOCATOR");
    eg__allocator_kind kind =
        kind_env && strcmp(kind_env, "system") == 0 ? EG__ALLOCATOR_SYSTEM : EG__ALLOCATOR_CACHING;
    eg__raw_allocator raw = {host_alloc, host_free, NULL};
    cpu_allocator = eg__allocator_create(raw, kind, "cpu");
    eg__allocator_enable_thread_caches(cpu_allocator, true);
    const char *limit = getenv("EG_MEMORY_LIMIT");
    if (cpu_allocator && limit) eg__allocator_set_limit(cpu_allocator, parse_bytes(limit));
}

static eg__allocator *cpu_get_allocator(const eg_device *device) {
    (void)device;
    pthread_once(&cpu_allocator_once, create_cpu_allocator);
    if (!cpu_allocator) { /* creation ran out of host memory once; try again later */
        pthread_mutex_lock(&cpu_allocator_mutex);
        if (!cpu_allocator) create_cpu_allocator();
        pthread_mutex_unlock(&cpu_allocator_mutex);
    }
    return cpu_allocator;
}

static eg_status cpu_copy(const eg_device *device, void *dst, const void *src, size_t bytes) {
    (void)device;
    if (bytes) memcpy(dst, src, bytes);
    return EG_OK;
}

static void cpu_sync(const eg_device *device) {
    (void)device;
}

static const eg_device the_cpu_device = {
    .name = "cpu",
    .type = EG_DEVICE_CPU,
    .index = 0,
    .get_allocator = cpu_get_allocator,
    .copy = cpu_copy,
    .sync = cpu_sync,
    .kernels = eg__cpu_kernels,
};

const eg_device *eg__cpu_device(void) {
    return &the_cpu_device;
}
const eg_device *eg_device_cpu(void) {
    return &the_cpu_device;
}

const eg_device *eg_device_get(const char *name) {
    if (!name) {
        eg__error(EG_ERR_NULL_ARGUMENT, "device_get: name is NULL");
        return NULL;
    }
    if (strcmp(name, "cpu") == 0 || strcmp(name, "cpu:0") == 0) return &the_cpu_device;
    eg__error(EG_ERR_UNSUPPORTED, "device_get: no device named '%s' in this build", name);
    return NULL;
}

const char *eg_device_name(const eg_device *device) {
    return device ? device->name : "(null)";
}
eg_device_type eg_device_kind(const eg_device *device) {
    return device ? device->type : EG_DEVICE_CPU;
}

void eg__cpu_shutdown(void) {
    eg__threadpool_shutdown();
    if (cpu_allocator) eg__allocator_trim(cpu_allocator);
}
