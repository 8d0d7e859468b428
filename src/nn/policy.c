/* Precision policies: names, compute dtypes and the process-wide default (Keras' global policy).
 * Where a layer's call applies its policy is layers.c (eg_layer_call). */
#include <stdatomic.h>
#include <string.h>

#include "nn/internal.h"

static const char *const policy_names[EG_POLICY_COUNT] = {
    [EG_POLICY_FLOAT32] = "float32",
    [EG_POLICY_MIXED_BFLOAT16] = "mixed_bfloat16",
    [EG_POLICY_MIXED_FLOAT16] = "mixed_float16",
};

/* Read when a layer is made, set by the user: atomic so that threads building models while
 * another sets the policy see one value or the other, never a torn one. */
static _Atomic int global_policy = EG_POLICY_FLOAT32;

const char *eg_policy_name(eg_policy policy) {
    return (unsigned)policy < EG_POLICY_COUNT ? policy_names[policy] : "invalid";
}

eg_status eg_policy_from_name(const char *name, eg_policy *policy) {
    if (!name || !policy)
        return eg__error(EG_ERR_NULL_ARGUMENT, "policy_from_name: %s is NULL",
                         name ? "policy" : "name");
    for (int p = 0; p < EG_POLICY_COUNT; p++)
        if (strcmp(name, policy_names[p]) == 0) {
            *policy = (eg_policy)p;
            return EG_OK;
        }
    return eg__error(EG_ERR_INVALID_ARGUMENT,
                     "unknown precision policy '%s' (float32, mixed_bfloat16 or mixed_float16)",
                     name);
}

eg_dtype eg_policy_compute_dtype(eg_policy policy) {
    switch (policy) {
    case EG_POLICY_FLOAT32:
        return EG_DTYPE_F32;
    case EG_POLICY_MIXED_BFLOAT16:
        return EG_DTYPE_BF16;
    case EG_POLICY_MIXED_FLOAT16:
        return EG_DTYPE_F16;
    default:
        return EG_DTYPE_COUNT;
    }
}

eg_status eg__policy_check(eg_policy policy, const char *what) {
    if ((unsigned)policy < EG_POLICY_COUNT) return EG_OK;
    return eg__error(EG_ERR_INVALID_ARGUMENT, "%s: invalid policy %d", what, (int)policy);
}

eg_status eg_set_global_policy(eg_policy policy) {
    eg_status status = eg__policy_check(policy, "set_global_policy");
    if (status != EG_OK) return status;
    atomic_store(&global_policy, (int)policy);
    return EG_OK;
}

eg_policy eg_global_policy(void) {
    return (eg_policy)atomic_load(&global_policy);
}

eg_status eg_layer_set_policy(eg_layer *layer, eg_policy policy) {
    if (!layer) return eg__error(EG_ERR_NULL_ARGUMENT, "layer_set_policy: layer is NULL");
    eg_status status = eg__policy_check(policy, "layer_set_policy");
    if (status != EG_OK) return status;
    layer->policy = policy;
    layer->policy_fixed = true;
    return EG_OK;
}

eg_policy eg_layer_policy(const eg_layer *layer) {
    return layer ? layer->policy : EG_POLICY_FLOAT32;
}

eg_dtype eg__layer_compute_dtype(const eg_layer *layer) {
    return layer->policy == EG_POLICY_FLOAT32 ? layer->dtype
                                              : eg_policy_compute_dtype(layer->policy);
}
