/* Eagle — devices. A device names a place where tensor memory lives and kernels run. */
#ifndef EAGLE_DEVICE_H
#define EAGLE_DEVICE_H

#include <stdbool.h>

#include "eagle/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum eg_device_type { EG_DEVICE_CPU = 0, EG_DEVICE_CUDA = 1 } eg_device_type;

/* Opaque; devices are owned by the library and live for the whole process. */
typedef struct eg_device eg_device;

/* The CPU device; never NULL. */
const eg_device *eg_device_cpu(void);

/* A device by name ("cpu", "cuda:0"); NULL with an error when unknown or not built in. */
const eg_device *eg_device_get(const char *name);

/* Printable name ("cpu"); static storage. */
const char *eg_device_name(const eg_device *device);
eg_device_type eg_device_kind(const eg_device *device);

#if !defined(EG_NO_CALLSITE)
#define eg_device_get(...) EG_CALLSITE_(eg_device_get(__VA_ARGS__))
#endif

#ifdef __cplusplus
}
#endif
#endif
