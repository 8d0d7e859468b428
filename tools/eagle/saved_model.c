/* Models rebuilt from checkpoints, exact or int8 (saved_model.h). */
#include "saved_model.h"

#include <stdio.h>
#include <string.h>

#include "cnn.h"

eg_layer *saved_model_layer_of_kernel(eg_model *model, const eg_tensor *variable) {
    for (int i = 0; i < eg_model_n_layers(model); i++) {
        eg_layer *layer = eg_model_layer(model, i);
        int n = 0;
        eg_tensor *const *vars = eg_layer_variables(layer, &n);
        if (vars && n > 0 && vars[0] == variable) return layer;
    }
    return NULL;
}

/* Loads the stored int8 kernel `name` (q) into its layer's snapshot and `variable` = q * scale. */
static eg_status load_int8(saved_model *saved, eg_tensor *variable, const char *name,
                           eg_tensor *q) {
    char scale_name[256];
    snprintf(scale_name, sizeof scale_name, "%s%s", name, SAVED_SCALE_SUFFIX);
    eg_layer *layer = saved_model_layer_of_kernel(saved->model, variable);
    if (!layer) return EG_ERR_FORMAT; /* the caller names it */
    eg_scope_begin();
    eg_tensor *scale = eg_safetensors_get(saved->file, scale_name);
    eg_status status = scale ? eg_layer_set_int8(layer, q, scale) : eg_last_status();
    if (status == EG_OK) {
        eg_tensor *kernel = eg_mul(eg_cast(q, EG_DTYPE_F32), scale);
        status = kernel ? eg_assign(variable, kernel) : eg_last_status();
    }
    eg_scope_end();
    if (status == EG_OK) saved->n_int8++;
    return status;
}

bool saved_model_open(const char *command, const char *path, saved_model *out) {
    memset(out, 0, sizeof *out);
    out->file = eg_safetensors_open(path);
    if (!out->file) {
        fprintf(stderr, "eagle %s: %s\n", command, eg_last_error());
        return false;
    }
    const char *kind = eg_safetensors_metadata(out->file, "eagle.model");
    const char *hidden = eg_safetensors_metadata(out->file, "eagle.hidden");
    out->cnn = kind && !strcmp(kind, "cnn");
    if (!out->cnn &&
        (!kind || strcmp(kind, "mlp") || !hidden || !mlp_parse_hidden(hidden, &out->config))) {
        fprintf(stderr,
                "eagle %s: %s was not written by 'eagle train --save' (no eagle.model / "
                "eagle.hidden metadata)\n",
                command, path);
        saved_model_close(out);
        return false;
    }
    char why[256];
    if (!out->cnn && !mlp_check_stored(out->file, &out->config, why, sizeof why)) {
        fprintf(stderr, "eagle %s: %s: its tensors do not match eagle.hidden = %s: %s\n", command,
                path, hidden, why);
        saved_model_close(out);
        return false;
    }
    out->model = out->cnn ? cnn_build(false) : mlp_build(&out->config);
    int n_vars = 0; /* all of them: batch normalization's moving statistics too */
    eg_tensor *const *vars = out->model ? eg_model_variables(out->model, &n_vars) : NULL;
    eg_status status = vars ? EG_OK : eg_last_status();
    const char *name = NULL;
    for (int i = 0; status == EG_OK && i < n_vars; i++) {
        name = eg_variable_name(vars[i]);
        eg_tensor *value = eg_safetensors_get(out->file, name);
        if (!value)
            status = eg_last_status();
        else if (eg_tensor_dtype(value) == EG_DTYPE_I8)
            status = load_int8(out, vars[i], name, value);
        else
            status = eg_assign(vars[i], value);
        eg_release(value);
    }
    if (status != EG_OK) {
        if (eg_last_status() != EG_OK)
            fprintf(stderr, "eagle %s: %s: %s\n", command, path, eg_last_error());
        else
            fprintf(stderr, "eagle %s: %s: tensor '%s' is i8 but no Dense or Conv2D kernel\n",
                    command, path, name);
        saved_model_close(out);
        return false;
    }
    return true;
}

void saved_model_close(saved_model *saved) {
    eg_model_free(saved->model);
    eg_safetensors_close(saved->file);
    memset(saved, 0, sizeof *saved);
}
