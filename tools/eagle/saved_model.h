/* A model rebuilt from a checkpoint of `eagle train --save` (the MLP or the CNN), or from the
 * int8 checkpoint `eagle quantize` made of one. Used by eval and quantize. */
#ifndef EAGLE_TOOLS_SAVED_MODEL_H
#define EAGLE_TOOLS_SAVED_MODEL_H

#include <stdbool.h>

#include "eagle.h"
#include "mlp.h"

/* An int8 checkpoint stores a quantized kernel NAME as i8 under NAME and its per-output-channel
 * scales, f32 (O), under NAME SAVED_SCALE_SUFFIX: the kernel is q * scale. */
#define SAVED_SCALE_SUFFIX ".scale"

typedef struct saved_model {
    eg_safetensors *file; /* open until saved_model_close */
    eg_model *model;
    bool cnn;
    mlp_config config; /* the MLP's hidden sizes */
    int n_int8;        /* layers whose int8 snapshot came from the file */
} saved_model;

/* Opens path, rebuilds its model and loads every variable (batch normalization's statistics
 * too). A quantized kernel becomes the layer's int8 snapshot (eg_layer_set_int8) and its f32
 * variable q * scale, so that exact calls run the weights int8 calls approximate. false after
 * printing "eagle COMMAND: ..." to stderr; out is then closed. */
bool saved_model_open(const char *command, const char *path, saved_model *out);
void saved_model_close(saved_model *saved);
/* The layer whose first variable (a Dense or Conv2D kernel) is `variable`, or NULL. */
eg_layer *saved_model_layer_of_kernel(eg_model *model, const eg_tensor *variable);

#endif
