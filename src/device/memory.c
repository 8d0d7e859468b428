/* The public memory API: maps a device to its allocator. */
#include <stdio.h>

#include "base/error.h"
#include "device/device.h"

/* NULL device: cpu:0. get_allocator raises the error when there is none (out of host memory, or
 * EG_MEMORY_LIMIT not a size): the callers return its status. */
static eg__allocator *allocator_of(const eg_device *device) {
    if (!device) device = eg__host();
    return device->get_allocator(device);
}

eg_status eg_memory_stats_get(const eg_device *device, eg_memory_stats *out) {
    if (!out) return eg__error(EG_ERR_NULL_ARGUMENT, "memory_stats_get: out is NULL");
    eg__allocator *allocator = allocator_of(device);
    if (!allocator) return eg_last_status();
    eg__allocator_stats(allocator, out);
    return EG_OK;
}

eg_status eg_memory_reserve(const eg_device *device, size_t bytes) {
    eg__allocator *allocator = allocator_of(device);
    return allocator ? eg__allocator_reserve(allocator, bytes) : eg_last_status();
}

eg_status eg_memory_trim(const eg_device *device) {
    eg__allocator *allocator = allocator_of(device);
    return allocator ? eg__allocator_trim(allocator) : eg_last_status();
}

eg_status eg_memory_set_limit(const eg_device *device, size_t bytes) {
    eg__allocator *allocator = allocator_of(device);
    return allocator ? eg__allocator_set_limit(allocator, bytes) : eg_last_status();
}

void eg_memory_reset_peak(const eg_device *device) {
    eg__allocator *allocator = allocator_of(device);
    if (allocator) eg__allocator_reset_peak(allocator);
}

const char *eg_memory_allocator_name(const eg_device *device) {
    eg__allocator *allocator = allocator_of(device);
    if (!allocator) return "none";
    return eg__allocator_get_kind(allocator) == EG__ALLOCATOR_SYSTEM ? "system" : "caching";
}

static double mib(size_t bytes) {
    return (double)bytes / (1024.0 * 1024.0);
}

eg_status eg_memory_format_stats(const eg_device *device, char *buf, size_t buf_size) {
    if (!buf || buf_size == 0)
        return eg__error(EG_ERR_INVALID_ARGUMENT, "memory_format_stats: empty buffer");
    eg_memory_stats s;
    eg_status status = eg_memory_stats_get(device, &s);
    if (status != EG_OK) return status;
    double hit_rate = s.n_allocs ? 100.0 * (double)s.n_cache_hits / (double)s.n_allocs : 0.0;
    snprintf(buf, buf_size,
             "memory (%s allocator): peak %.2f MiB in use, %.2f MiB in use now, %.2f MiB "
             "reserved, %.2f MiB cached (largest free block %.2f MiB, fragmentation %.1f%%)\n"
             "  %llu allocations, %llu system allocations, cache hit rate %.2f%%",
             eg_memory_allocator_name(device), mib(s.peak_bytes_in_use), mib(s.bytes_in_use),
             mib(s.bytes_reserved), mib(s.bytes_cached), mib(s.largest_free_block),
             100.0 * s.fragmentation, (unsigned long long)s.n_allocs,
             (unsigned long long)s.n_system_allocs, hit_rate);
    return EG_OK;
}
