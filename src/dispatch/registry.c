/* The device registry: every device by name, in order, with the visible-devices setting; the
 * backend of each kind; the launch path's error reports. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "dispatch/dispatch.h"

const eg__backend *const eg__backends[2] = {
    [EG_DEVICE_CPU] = &eg__cpu_backend,
#ifdef EG_HAVE_CUDA
    [EG_DEVICE_CUDA] = &eg__cuda_backend,
#else
    [EG_DEVICE_CUDA] = NULL, /* no CUDA backend in this build */
#endif
};

/* Why a kind has no usable device: NULL when it has (or may have) devices. */
static const char *kind_unavailable(eg_device_type type) {
    const eg__backend *backend = eg__backends[type];
    if (type == EG_DEVICE_CUDA && !backend) return "this build has no CUDA backend";
    return backend && backend->unavailable ? backend->unavailable() : NULL;
}

const char *eg_device_kind_info(eg_device_type kind) {
    if ((unsigned)kind > EG_DEVICE_CUDA) return "not a device kind";
    const eg__backend *backend = eg__backends[kind];
    if (!backend) return "not built";
    if (!backend->describe) return "built";
    static char lines[2][1024];
    const char *why = kind_unavailable(kind);
    snprintf(lines[kind], sizeof lines[kind], "%s%s%s", backend->describe(),
             why ? "; no device usable: " : "", why ? why : "");
    return lines[kind];
}

const char *eg_device_description(const eg_device *device) {
    if (!device) return "(null)";
    const eg__backend *backend = eg__backend_of(device);
    if (backend->describe_device) return backend->describe_device(device);
    return device->host ? "host memory" : "";
}

/* ---- every device, in order: the host's, then each other kind's ---- */

/* The devices of a kind that is not the host's (0 without a backend). */
static int kind_device_count(eg_device_type type) {
    const eg__backend *backend = eg__backends[type];
    return backend && backend->device_count ? backend->device_count() : 0;
}

static int all_device_count(void) {
    return eg__host_device_count() + kind_device_count(EG_DEVICE_CUDA);
}

static const eg_device *all_device_at(int index) {
    int n_host = eg__host_device_count();
    if (index < n_host) return eg__host_device(index);
    index -= n_host;
    return index < kind_device_count(EG_DEVICE_CUDA)
               ? eg__backends[EG_DEVICE_CUDA]->device_at(index)
               : NULL;
}

/* ---- visible devices: a hidden flag per device, in registry order ---- */

static _Atomic(unsigned char) hidden[EG__MAX_DEVICES_PER_KIND * 2];
static pthread_once_t settings_once = PTHREAD_ONCE_INIT;
static char visible_setting_error[256];

static int registry_slot(const eg_device *device) {
    return (int)device->type * EG__MAX_DEVICES_PER_KIND + device->index;
}

static bool is_hidden(const eg_device *device) {
    return atomic_load_explicit(&hidden[registry_slot(device)], memory_order_relaxed) != 0;
}

static const eg_device *find_by_name(const char *name, bool *malformed, int *type);

static bool includes_host(int n, const eg_device *const *devices) {
    for (int i = 0; i < n; i++)
        if (devices[i] == eg__host()) return true;
    return false;
}

/* Hides every device but devices[0..n); n == 0 shows them all. */
static void show_only(int n, const eg_device *const *devices) {
    for (int i = 0; i < all_device_count(); i++) {
        const eg_device *device = all_device_at(i);
        bool keep = n == 0;
        for (int j = 0; j < n; j++) keep |= devices[j] == device;
        atomic_store_explicit(&hidden[registry_slot(device)], !keep, memory_order_relaxed);
    }
}

/* EG_VISIBLE_DEVICES="cpu:0,cpu:2": applied once, at the registry's first use; an unusable
 * value is ignored as a whole and reported by eg_device_get's errors. */
static void visible_from_environment(void) {
    const char *env = getenv("EG_VISIBLE_DEVICES");
    if (!env || !*env) return;
    const eg_device *chosen[EG__MAX_DEVICES_PER_KIND * 2];
    int n = 0;
    char copy[512];
    snprintf(copy, sizeof copy, "%s", env);
    for (char *save = NULL, *name = strtok_r(copy, ", ", &save); name;
         name = strtok_r(NULL, ", ", &save)) {
        bool malformed;
        int type;
        const eg_device *device = find_by_name(name, &malformed, &type);
        if (!device || n == (int)(sizeof chosen / sizeof *chosen)) {
            snprintf(visible_setting_error, sizeof visible_setting_error,
                     "EG_VISIBLE_DEVICES='%s' names '%s', which is no device here, and was ignored",
                     env, name);
            return;
        }
        chosen[n++] = device;
    }
    if (!includes_host(n, chosen)) {
        snprintf(visible_setting_error, sizeof visible_setting_error,
                 "EG_VISIBLE_DEVICES='%s' leaves out %s, the host, and was ignored", env,
                 eg__host()->name);
        return;
    }
    show_only(n, chosen);
}

/* Why the environment's device settings were ignored, both in one line ("" when neither was):
 * fixed once the registry has read them. */
static char setting_problems[512];

static void read_settings(void) {
    visible_from_environment(); /* looks devices up: the host's count setting is read first */
    const char *count_error = eg__host_device_setting_error();
    snprintf(setting_problems, sizeof setting_problems, "%s%s%s", count_error ? count_error : "",
             count_error && visible_setting_error[0] ? "; " : "", visible_setting_error);
}

static void registry_init(void) {
    pthread_once(&settings_once, read_settings);
}

eg_status eg_device_set_visible(int n, const eg_device *const *devices) {
    registry_init();
    if (n < 0 || (n > 0 && !devices))
        return eg__error(EG_ERR_INVALID_ARGUMENT, "device_set_visible: %d devices from %s", n,
                         devices ? "a list" : "NULL");
    for (int i = 0; i < n; i++)
        if (!devices[i])
            return eg__error(EG_ERR_NULL_ARGUMENT, "device_set_visible: device %d is NULL", i);
    if (n > 0 && !includes_host(n, devices))
        return eg__error(EG_ERR_INVALID_ARGUMENT,
                         "device_set_visible: the host device %s must stay visible",
                         eg__host()->name);
    show_only(n, devices);
    return EG_OK;
}

int eg_device_count(void) {
    registry_init();
    int n = 0;
    for (int i = 0; i < all_device_count(); i++) n += !is_hidden(all_device_at(i));
    return n;
}

const eg_device *eg_device_at(int index) {
    registry_init();
    for (int i = 0, seen = 0; i < all_device_count(); i++) {
        const eg_device *device = all_device_at(i);
        if (is_hidden(device)) continue;
        if (seen++ == index) return device;
    }
    return NULL;
}

/* ---- lookup by name ---- */

/* "cpu", "cpu:N", "cuda", "cuda:N" -> the device (hidden or not), NULL when there is none;
 * *malformed when the name is not of the form KIND or KIND:N; *type the kind it names, or -1
 * for a kind Eagle does not know ("tpu:7"). */
static const eg_device *find_by_name(const char *name, bool *malformed, int *type) {
    *malformed = false;
    size_t kind_length = strcspn(name, ":");
    const char *rest = name + kind_length;
    if (kind_length == 3 && strncmp(name, "cpu", 3) == 0)
        *type = EG_DEVICE_CPU;
    else if (kind_length == 4 && strncmp(name, "cuda", 4) == 0)
        *type = EG_DEVICE_CUDA;
    else
        *type = -1;
    if (kind_length == 0) {
        *malformed = true;
        return NULL;
    }
    long index = 0;
    if (*rest == ':') {
        char *end;
        index = strtol(rest + 1, &end, 10);
        if (end == rest + 1 || *end || index < 0) {
            *malformed = true;
            return NULL;
        }
    }
    if (*type == EG_DEVICE_CPU)
        return index < eg__host_device_count() ? eg__host_device((int)index) : NULL;
    if (*type == EG_DEVICE_CUDA && index < kind_device_count(EG_DEVICE_CUDA))
        return eg__backends[EG_DEVICE_CUDA]->device_at((int)index);
    return NULL;
}

/* "cpu:0, cpu:1" — the visible devices, for error messages. */
static void list_devices(char *buf, size_t size) {
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0, n = eg_device_count(); i < n && used < size; i++)
        used +=
            (size_t)snprintf(buf + used, size - used, "%s%s", i ? ", " : "", eg_device_at(i)->name);
}

/* The reasons a setting was ignored, appended to lookup errors (they explain a missing device). */
static void settings_notes(char *buf, size_t size) {
    snprintf(buf, size, "%s%s", setting_problems[0] ? "; " : "", setting_problems);
}

const char *eg_device_setting_problem(void) {
    registry_init();
    return setting_problems[0] ? setting_problems : NULL;
}

const eg_device *eg_device_get(const char *name) {
    if (!name) {
        eg__error(EG_ERR_NULL_ARGUMENT, "device_get: name is NULL");
        return NULL;
    }
    registry_init();
    bool malformed;
    int type;
    const eg_device *device = find_by_name(name, &malformed, &type);
    if (device && !is_hidden(device)) return device;
    char devices[512], notes[sizeof setting_problems + 2];
    list_devices(devices, sizeof devices);
    settings_notes(notes, sizeof notes);
    if (malformed)
        eg__error(EG_ERR_INVALID_ARGUMENT,
                  "device_get: '%s' is not a device name (cpu, cpu:N, cuda:N); the devices are "
                  "%s%s",
                  name, devices, notes);
    else if (device)
        eg__error(EG_ERR_DEVICE,
                  "device_get: %s is hidden by the visible-devices setting; the visible devices "
                  "are %s%s",
                  device->name, devices, notes);
    else if (type < 0)
        eg__error(EG_ERR_UNSUPPORTED,
                  "device_get: no device '%s': Eagle knows the kinds cpu and cuda; the devices "
                  "are %s%s",
                  name, devices, notes);
    else if (kind_unavailable((eg_device_type)type))
        eg__error(EG_ERR_UNSUPPORTED, "device_get: no device '%s': %s; the devices are %s%s", name,
                  kind_unavailable((eg_device_type)type), devices, notes);
    else
        eg__error(EG_ERR_DEVICE, "device_get: no device '%s'; the devices are %s%s", name, devices,
                  notes);
    return NULL;
}

/* ---- the launch path's errors and queries ---- */

eg_status eg__launch_missing(const eg__kernel_call *call, const eg_device *device) {
    return eg__op_error(call->op, EG_ERR_UNSUPPORTED, "no kernel on %s", device->name);
}

eg_status eg__launch_failed(const eg__kernel_call *call, const eg_device *device,
                            eg_status status) {
    return eg__op_error(call->op, status, "kernel failed on %s", device->name);
}

eg_status eg__launch_replay(const eg__kernel_call *call) {
    const eg_device *device = eg__launch_device(call);
    const eg__backend *backend = eg__backend_of(device);
    eg__kernel_fn kernel = backend->replay_kernels ? backend->replay_kernels[call->op] : NULL;
    if (!kernel) return eg__launch(call);
    eg_status status = kernel(call);
    return status == EG_OK ? eg__check_output(call) : eg__launch_failed(call, device, status);
}

eg_tensor *eg__contiguous_on_device(const eg_tensor *x) {
    if (eg__is_contiguous(x)) {
        eg__ref(x);
        return (eg_tensor *)x;
    }
    eg__scope_suspend();
    eg_tensor *copy = eg__tensor_alloc(x->dtype, x->n_dims, x->shape, x->device);
    eg__scope_resume();
    if (!copy) return NULL;
    const eg_tensor *source[1] = {x};
    eg__kernel_call call = {EG__OP_COPY, 1, source, copy, NULL};
    if (copy->n_elems && eg__launch(&call) != EG_OK) {
        eg__unref(copy);
        return NULL;
    }
    return copy;
}

bool eg__device_supports(const eg_device *device, const eg__op_signature *sig) {
    const eg__backend *backend = eg__backend_of(device);
    return backend && backend->supports(sig);
}
