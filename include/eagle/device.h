/* Eagle — devices. A device names a place where tensor memory lives and kernels run.
 *
 * Names: "cpu" (the host; "cpu:0" too), "cpu:N" for the logical CPU devices the host is split
 * into, "cuda:N" for GPUs where the CUDA backend is built and a GPU is usable.
 *
 * Logical CPU devices (like TensorFlow's set_logical_device_configuration): EG_CPU_DEVICES=N in
 * the environment, or eg_device_configure_cpus(N) before the first tensor, splits the host into
 * cpu:0 … cpu:N-1, each with its own allocator, statistics and limit. They are separate memory
 * spaces: an op whose inputs live on two devices is an error naming both and the call site; only
 * eg_tensor_to moves a tensor. With one device (the default) cpu:0 is named "cpu".
 *
 * Placement: ops put their results on their inputs' device; tensors made from nothing (eg_zeros,
 * eg_tensor_from_data, random draws, initializers, variables) go to the current device — the
 * innermost eg_device_scope of the calling thread, else cpu:0. Input pipelines and file readers
 * make host tensors (cpu:0). */
#ifndef EAGLE_DEVICE_H
#define EAGLE_DEVICE_H

#include <stdbool.h>

#include "eagle/dtype.h"
#include "eagle/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum eg_device_type { EG_DEVICE_CPU = 0, EG_DEVICE_CUDA = 1 } eg_device_type;

/* Opaque; devices are owned by the library and live for the whole process. */
typedef struct eg_device eg_device;

/* cpu:0, the host device; never NULL. */
const eg_device *eg_device_cpu(void);

/* A visible device by name ("cpu", "cpu:1", "cuda:0"). NULL with an error when the name is
 * malformed (EG_ERR_INVALID_ARGUMENT), names no device or a hidden one (EG_ERR_DEVICE), or names
 * a kind this build lacks or cannot use (EG_ERR_UNSUPPORTED, with the reason: not built in, no
 * driver); every error lists the devices that exist. */
const eg_device *eg_device_get(const char *name);

/* The visible devices, in order: cpu:0 … cpu:N-1, then cuda:0 …. eg_device_at returns NULL past
 * the count. */
int eg_device_count(void);
const eg_device *eg_device_at(int index);

/* Splits the host into n logical CPU devices (1 ≤ n ≤ 64). Only before the first tensor (or any
 * device lookup): afterwards EG_ERR_STATE unless n is the count already in use. Overrides
 * EG_CPU_DEVICES. */
eg_status eg_device_configure_cpus(int n);

/* Like tf.config.set_visible_devices: only these n devices may be named (eg_device_get) or
 * listed afterwards; cpu:0 must be among them (EG_ERR_INVALID_ARGUMENT otherwise). Tensors
 * already on a hidden device keep working. n == 0 and devices == NULL make every device visible
 * again. EG_VISIBLE_DEVICES="cpu:0,cpu:2" in the environment does the same at first use. */
eg_status eg_device_set_visible(int n, const eg_device *const *devices);

/* Device scopes (like `with tf.device(...)`), per thread and nestable: between begin and the
 * matching end, tensors made from nothing are created on `device`. EG_ERR_NULL_ARGUMENT for a
 * NULL device, EG_ERR_STATE for an end without a begin or more than 64 nested scopes. */
eg_status eg_device_scope_begin(const eg_device *device);
eg_status eg_device_scope_end(void);
/* The device new tensors go to on this thread now (never NULL). */
const eg_device *eg_device_current(void);

/* Why a device setting of the environment was ignored (EG_CPU_DEVICES not a count,
 * EG_VISIBLE_DEVICES naming no device or leaving out cpu:0), or NULL when none was. Static
 * storage; the settings are read once, at first use. */
const char *eg_device_setting_problem(void);

/* What this build has of a device kind, in one line (static storage, never NULL): "not built";
 * for CUDA in a CUDA build, the runtime, device code and libraries found, and, when no GPU is
 * usable, why ("no NVIDIA driver is loaded ...", "the driver sees no GPU ..."). */
const char *eg_device_kind_info(eg_device_type kind);
/* One line on the device (static storage, never NULL): for a GPU its model, memory, compute
 * capability and SM count; "host memory" for a CPU device; "(null)" for NULL. */
const char *eg_device_description(const eg_device *device);

/* Printable name ("cpu", "cpu:1", "cuda:0"); static storage. "(null)" for NULL. */
const char *eg_device_name(const eg_device *device);
eg_device_type eg_device_kind(const eg_device *device);
/* N of cpu:N / cuda:N; -1 for NULL. */
int eg_device_index(const eg_device *device);

/* Waits for the device's queued work; reports an asynchronous kernel fault (EG_OK on the CPU). */
eg_status eg_device_sync(const eg_device *device);

/* ---- the op table on devices (what `eagle info --ops` prints) ---- */

/* How many ops Eagle's op table has; ops are numbered 0 … eg_op_count() - 1, in the order of
 * src/ops/ops.def (a number is stable within one build only). */
int eg_op_count(void);
/* The op's name ("matmul", "conv2d_backward_input"), static storage; NULL when op is out of
 * range. */
const char *eg_op_name(int op);
/* Whether `device` runs op with its value inputs in `dtype`: the op's schema accepts that
 * dtype (for an op that also takes bool conditions or indices, those in their own dtypes) and
 * the device's backend has a kernel for the op on contiguous inputs of those dtypes. A call that
 * this says no to fails with EG_ERR_DTYPE or EG_ERR_UNSUPPORTED. false for a NULL device or an
 * op or dtype out of range; never raises an error (a pending one is left as it was). */
bool eg_device_supports_op(const eg_device *device, int op, eg_dtype dtype);

#if !defined(EG_NO_CALLSITE)
#define eg_device_get(...)            EG_CALLSITE_(eg_device_get(__VA_ARGS__))
#define eg_device_configure_cpus(...) EG_CALLSITE_(eg_device_configure_cpus(__VA_ARGS__))
#define eg_device_set_visible(...)    EG_CALLSITE_(eg_device_set_visible(__VA_ARGS__))
#define eg_device_scope_begin(...)    EG_CALLSITE_(eg_device_scope_begin(__VA_ARGS__))
#define eg_device_scope_end(...)      EG_CALLSITE_(eg_device_scope_end(__VA_ARGS__))
#define eg_device_sync(...)           EG_CALLSITE_(eg_device_sync(__VA_ARGS__))
#endif

#ifdef __cplusplus
}
#endif
#endif
