/* A model's weights to and from a safetensors file, by variable name (Keras' save_weights /
 * load_weights): loading checks every name, dtype and shape before it changes a variable. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "eagle/autograd.h"
#include "eagle/checkpoint.h"
#include "nn/internal.h"

eg_status eg_model_save_weights(eg_model *model, const char *path) {
    if (!model || !path)
        return eg__error(EG_ERR_NULL_ARGUMENT, "model_save_weights: model or path is NULL");
    int n;
    eg_tensor *const *vars = eg_model_variables(model, &n);
    if (!vars) return eg_last_status();
    const char **names = malloc(sizeof *names * (size_t)(n ? n : 1));
    if (!names) return eg__error(EG_ERR_OUT_OF_MEMORY, "model_save_weights: out of host memory");
    for (int i = 0; i < n; i++) names[i] = eg_variable_name(vars[i]);
    eg_status status = eg_safetensors_save(path, n, names, vars, 0, NULL, NULL);
    free(names);
    return status;
}

eg_status eg__check_stored_variable(const eg_safetensors *st, const eg_tensor *v, const char *path,
                                    const char *what) {
    const char *name = eg_variable_name(v);
    if (!eg_safetensors_contains(st, name))
        return eg__error(EG_ERR_INVALID_ARGUMENT,
                         "%s: '%s' has no tensor '%s' (the model's variable)", what, path, name);
    eg_dtype dtype;
    int n_dims;
    int64_t shape[EG_MAX_DIMS];
    eg_status status = eg_safetensors_info(st, name, &dtype, &n_dims, shape);
    if (status != EG_OK) return status;
    bool same = dtype == eg_tensor_dtype(v) && n_dims == eg_tensor_n_dims(v);
    for (int d = 0; same && d < n_dims; d++) same = shape[d] == eg_tensor_shape(v)[d];
    if (!same) {
        char stored[128], wanted[128];
        eg_tensor_shape_string(v, wanted, sizeof wanted);
        size_t used = (size_t)snprintf(stored, sizeof stored, "(");
        for (int d = 0; d < n_dims && used < sizeof stored; d++)
            used += (size_t)snprintf(stored + used, sizeof stored - used, "%s%lld", d ? ", " : "",
                                     (long long)shape[d]);
        if (used < sizeof stored) snprintf(stored + used, sizeof stored - used, ")");
        return eg__error(EG_ERR_SHAPE, "%s: '%s' in '%s' is %s %s; the model's variable is %s %s",
                         what, name, path, eg_dtype_name(dtype), stored,
                         eg_dtype_name(eg_tensor_dtype(v)), wanted);
    }
    return EG_OK;
}

eg_status eg_model_load_weights(eg_model *model, const char *path) {
    if (!model || !path)
        return eg__error(EG_ERR_NULL_ARGUMENT, "model_load_weights: model or path is NULL");
    int n;
    eg_tensor *const *vars = eg_model_variables(model, &n);
    if (!vars) return eg_last_status();
    eg_safetensors *st = eg_safetensors_open(path);
    if (!st) return eg_last_status();
    eg_status status = EG_OK;
    for (int i = 0; i < n && status == EG_OK; i++)
        status = eg__check_stored_variable(st, vars[i], path, "model_load_weights");
    /* every stored tensor must be a variable of the model */
    int stored = eg_safetensors_count(st);
    for (int k = 0; k < stored && status == EG_OK; k++) {
        const char *name = eg_safetensors_name(st, k);
        bool known = false;
        for (int i = 0; i < n && !known; i++) known = !strcmp(eg_variable_name(vars[i]), name);
        if (!known)
            status = eg__error(EG_ERR_INVALID_ARGUMENT,
                               "model_load_weights: '%s' holds '%s', which model '%s' has no "
                               "variable for",
                               path, name, eg_model_name(model));
    }
    /* all checked: read and assign */
    for (int i = 0; i < n && status == EG_OK; i++) {
        eg_tensor *value = eg_safetensors_get(st, eg_variable_name(vars[i]));
        status = value ? eg_assign(vars[i], value) : eg_last_status();
        eg_release(value);
    }
    eg_safetensors_close(st);
    return status;
}
