/* Internal: what the files of src/nn share — the layer and model structs and a list of
 * temporaries released together. */
#ifndef EAGLE_SRC_NN_INTERNAL_H
#define EAGLE_SRC_NN_INTERNAL_H

#include "base/error.h"
#include "core/tensor_internal.h"
#include "eagle/autograd.h"
#include "eagle/checkpoint.h"
#include "eagle/nn.h"
#include "eagle/ops.h"

typedef enum eg__layer_kind {
    EG__LAYER_DENSE,
    EG__LAYER_FLATTEN,
    EG__LAYER_ACTIVATION,
    EG__LAYER_CONV2D,
    EG__LAYER_MAX_POOL2D,
    EG__LAYER_AVG_POOL2D,
    EG__LAYER_GLOBAL_AVG_POOL2D,
    EG__LAYER_BATCH_NORM,
    EG__LAYER_LAYER_NORM,
    EG__LAYER_DROPOUT,
    EG__LAYER_KIND_COUNT
} eg__layer_kind;

#define EG__LAYER_MAX_VARIABLES 4

struct eg_layer {
    eg__layer_kind kind;
    char *name;             /* NULL until named (by the user, a model, or the first build) */
    bool name_fixed;        /* named by the user or by the owning model */
    struct eg_model *owner; /* the model that owns the layer, or NULL */
    bool trainable;
    bool built;
    int output_n_dims; /* known once built; -1 entries are unknown sizes */
    int64_t output_shape[EG_MAX_DIMS];
    eg_tensor *variables[EG__LAYER_MAX_VARIABLES]; /* owned */
    bool frozen[EG__LAYER_MAX_VARIABLES];          /* never trainable (moving statistics) */
    int n_variables;
    eg_dtype dtype;           /* of the variables */
    eg_policy policy;         /* what a call computes in (policy.c) */
    bool policy_fixed;        /* set by eg_layer_set_policy: a model's policy leaves it alone */
    eg_generator *generator;  /* for their initializers (NULL: the default generator) */
    eg_activation activation; /* DENSE, ACTIVATION */
    /* DENSE */
    int64_t units;
    int64_t input_dim; /* 0 until built */
    eg_dense_options dense;
    /* CONV2D (filters in units) */
    int kernel[2];
    eg_conv2d_layer_options conv;
    /* MAX_POOL2D, AVG_POOL2D, GLOBAL_AVG_POOL2D (pool.data_format) */
    eg_pool2d_options pool;
    /* BATCH_NORM, LAYER_NORM (axis normalized when built) */
    eg_batch_norm_options norm;
    int norm_axis;
    /* DROPOUT */
    double rate;
};

/* The dtype the layer computes in: its policy's, or its variables' under FLOAT32. */
eg_dtype eg__layer_compute_dtype(const eg_layer *layer);
/* EG_OK for a valid policy, else EG_ERR_INVALID_ARGUMENT naming `what`. */
eg_status eg__policy_check(eg_policy policy, const char *what);

/* The type's default name prefix ("dense"). */
const char *eg__layer_prefix(const eg_layer *layer);
/* Sets the layer's name (copied); false when out of host memory (error raised). */
bool eg__layer_set_name(eg_layer *layer, const char *name);

/* A new layer of `kind` named `name` (NULL: named later), trainable; NULL when out of memory. */
eg_layer *eg__layer_new(eg__layer_kind kind, const char *name, const char *what);
/* A new variable `<layer>/<what>` of the layer's dtype filled by `init` (with the layer's
 * generator), trainable unless frozen or the layer is not; NULL with an error. */
eg_tensor *eg__layer_make_variable(eg_layer *layer, const char *what, const eg_initializer *init,
                                   int n_dims, const int64_t *shape);
/* Build and call for the kinds of conv_layers.c (CONV2D and after). */
eg_status eg__conv_layer_build(eg_layer *layer, int n_dims, const int64_t *input_shape);
/* variables: the layer's, cast to what the call computes in (eg_layer_call). */
eg_tensor *eg__conv_layer_call(eg_layer *layer, const eg_tensor *x,
                               const eg_tensor *const *variables, bool training);

/* Undoes a build: releases the layer's variables and marks it unbuilt (a model build that failed
 * after it). */
void eg__layer_unbuild(eg_layer *layer);

/* Replaces the variables of a built layer by copies named after its current name. */
eg_status eg__layer_rename_variables(eg_layer *layer);
/* Frees the layer and releases its variables, whoever owns it. */
void eg__layer_destroy(eg_layer *layer);

/* Temporaries of one computation: released together by eg__temps_release. */
#define EG__TEMPS_MAX 24
typedef struct eg__temps {
    eg_tensor *items[EG__TEMPS_MAX];
    int n;
} eg__temps;

/* Remembers t (may be NULL) for release; returns t. */
static inline eg_tensor *eg__temp(eg__temps *temps, eg_tensor *t) {
    if (!t) return NULL;
    if (temps->n == EG__TEMPS_MAX) {
        eg__error(EG_ERR_INTERNAL, "internal: too many temporaries (%d)", EG__TEMPS_MAX);
        eg_release(t);
        return NULL;
    }
    temps->items[temps->n++] = t;
    return t;
}

/* Releases every temporary (eg_release: scope-owned ones leave their scope). */
static inline void eg__temps_release(eg__temps *temps) {
    for (int i = temps->n; i-- > 0;) eg_release(temps->items[i]);
    temps->n = 0;
}

/* ---- what layers above attach to a model (model.c) ---- */
/* The attachment (NULL: none). */
void *eg__model_attachment(const eg_model *model);
/* Replaces the attachment, freeing the previous one with its function; eg_model_free frees the
 * last. attachment_free may be NULL (nothing to free). */
void eg__model_attach(eg_model *model, void *attachment, void (*attachment_free)(void *));
bool eg__model_is_built(const eg_model *model);

/* The safetensors file's tensor named like variable v has v's dtype and shape; else an error
 * from `what` naming the tensor, the file and both shapes (model_weights.c). */
eg_status eg__check_stored_variable(const eg_safetensors *st, const eg_tensor *v,
                                    const char *path, const char *what);

#endif
