/* Internal: what the files of src/nn share — the layer and model structs and a list of
 * temporaries released together. */
#ifndef EAGLE_SRC_NN_INTERNAL_H
#define EAGLE_SRC_NN_INTERNAL_H

#include "core/error.h"
#include "core/tensor_internal.h"
#include "eagle/autograd.h"
#include "eagle/nn.h"
#include "eagle/ops.h"

typedef enum eg__layer_kind {
    EG__LAYER_DENSE,
    EG__LAYER_FLATTEN,
    EG__LAYER_ACTIVATION,
} eg__layer_kind;

#define EG__LAYER_MAX_VARIABLES 2

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
    int n_variables;
    eg_activation activation; /* DENSE, ACTIVATION */
    /* DENSE */
    int64_t units;
    int64_t input_dim; /* 0 until built */
    eg_dense_options dense;
};

/* The type's default name prefix ("dense"). */
const char *eg__layer_prefix(const eg_layer *layer);
/* Sets the layer's name (copied); false when out of host memory (error raised). */
bool eg__layer_set_name(eg_layer *layer, const char *name);

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

#endif
