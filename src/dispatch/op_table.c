/* The op table on devices, for introspection (eagle info --ops): op names, and whether a device
 * runs an op for a dtype. The answer has two parts asked of their owners: the op's schema
 * (ops/schema_dtypes.c runs the op's infer function) and the device's backend (its supports()),
 * so the table can neither drift from the checks a call meets nor from a backend's kernels. */
#include "dispatch/dispatch.h"

int eg_op_count(void) {
    return EG__OP_COUNT;
}

const char *eg_op_name(int op) {
    return op >= 0 && op < EG__OP_COUNT ? eg__op_defs[op].name : NULL;
}

bool eg_device_supports_op(const eg_device *device, int op, eg_dtype dtype) {
    if (!device || op < 0 || op >= EG__OP_COUNT || (unsigned)dtype >= EG_DTYPE_COUNT) return false;
    if (!eg__op_accepts_dtype((eg__op)op, dtype)) return false;
    eg_dtype dtypes[EG__OP_PROBE_MAX_INPUTS];
    int n = eg__op_probe_dtypes((eg__op)op, dtype, dtypes);
    /* contiguous: the question is whether the backend computes the op for these dtypes at all,
     * not for one layout (strided inputs can always be made contiguous first). */
    eg__op_signature signature = {(eg__op)op, n, dtypes, true};
    return n > 0 && eg__device_supports(device, &signature);
}
