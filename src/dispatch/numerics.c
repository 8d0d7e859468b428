/* Check numerics: every op's float result scanned for NaN and infinity while it is on, so that the
 * first op to make one fails at once instead of the loss turning NaN many ops later. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/settings.h"
#include "dispatch/dispatch.h"
#include "eagle/runtime.h"

atomic_int eg__check_numerics_state = -1;

static int state_from_environment(void) {
    return eg__setting_on("EG_CHECK_NUMERICS");
}

void eg_set_check_numerics(bool on) {
    atomic_store_explicit(&eg__check_numerics_state, on ? 1 : 0, memory_order_relaxed);
}

bool eg_check_numerics(void) {
    int state = atomic_load_explicit(&eg__check_numerics_state, memory_order_relaxed);
    if (state < 0) {
        int expected = -1;
        atomic_compare_exchange_strong(&eg__check_numerics_state, &expected,
                                       state_from_environment());
        state = atomic_load_explicit(&eg__check_numerics_state, memory_order_relaxed);
    }
    return state == 1;
}

/* "(2, 3) f32" */
static void describe(const eg_tensor *t, char *buf, size_t size) {
    char shape[160];
    snprintf(buf, size, "%s %s", eg__shape_format(t->n_dims, t->shape, shape, sizeof shape),
             eg_dtype_name(t->dtype));
}

eg_status eg__check_numerics_slow(const eg__kernel_call *call) {
    if (!eg_check_numerics()) return EG_OK;
    const eg_tensor *out = call->output;
    if (!eg_dtype_is_float(out->dtype) || out->n_elems == 0) return EG_OK;
    const eg__backend *backend = eg__backend_of(out->device);
    if (!backend->first_nonfinite) return EG_OK; /* a backend that cannot scan: unchecked */
    uint64_t mark = eg__error_mark();
    int64_t at = backend->first_nonfinite(out);
    if (at < 0) /* a GPU's scan synchronizes: it may report an earlier kernel's fault instead */
        return eg__error_since(mark) ? eg_last_status() : EG_OK;
    char inputs[512] = "", one[200], result[200];
    size_t used = 0;
    for (int i = 0; i < call->n_inputs && used < sizeof inputs; i++) {
        describe(call->inputs[i], one, sizeof one);
        used += (size_t)snprintf(inputs + used, sizeof inputs - used, "%s%s", i ? ", " : "", one);
    }
    describe(out, result, sizeof result);
    const char *what = "a NaN or an infinity";
    if (eg__device_is_host(out->device) && eg__is_contiguous(out)) {
        double value = eg__load_as_double(eg__data(out), out->dtype, at);
        what = value != value ? "NaN" : value > 0 ? "+inf" : "-inf";
    }
    return eg__op_error(call->op, EG_ERR_NUMERICS,
                        "check numerics: the result %s holds %s at element %lld (inputs %s)",
                        result, what, (long long)at, call->n_inputs ? inputs : "none");
}
