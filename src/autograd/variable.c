/* Variables: tensors that own trainable state, outlive scopes and are watched by every tape. */
#include <stdlib.h>
#include <string.h>

#include "autograd/internal.h"
#include "base/error.h"
#include "dispatch/dispatch.h"
#include "exec/executor.h"
#include "lazy/internal.h"

typedef struct eg__variable_info {
    const eg__attachment_ops *ops; /* first: how core frees it with its tensor */
    char *name;
    bool trainable;
    bool sparse_gradient; /* eg_variable_set_sparse_gradient */
} eg__variable_info;

/* dst (contiguous, dst's shape) = src, by the device's copy kernel. */
static eg_status copy_into(eg_tensor *dst, const eg_tensor *src) {
    if (dst->n_elems == 0) return EG_OK;
    const eg_tensor *source[1] = {src};
    eg__kernel_call call = {EG__OP_COPY, 1, source, dst, NULL};
    return eg__launch(&call);
}

static void variable_info_free(void *attachment) {
    eg__variable_info *info = attachment;
    free(info->name);
    free(info);
}
static const eg__attachment_ops variable_info_ops = {variable_info_free, NULL};

eg_tensor *eg_variable(const eg_tensor *initial_value, const char *name) {
    if (!eg__check_arg(initial_value, "variable", 0)) return NULL;
    if (!eg_dtype_is_float(initial_value->dtype)) {
        eg__error(EG_ERR_DTYPE, "variable: initial value must be a float tensor, got %s",
                  eg_dtype_name(initial_value->dtype));
        return NULL;
    }
    eg__variable_info *info = calloc(1, sizeof *info);
    char *copy = strdup(name ? name : "");
    if (!info || !copy) {
        free(info);
        free(copy);
        eg__error(EG_ERR_OUT_OF_MEMORY, "variable: out of host memory");
        return NULL;
    }
    info->ops = &variable_info_ops;
    info->name = copy;
    info->trainable = true;
    eg__scope_suspend();
    eg_tensor *v = eg__tensor_alloc(initial_value->dtype, initial_value->n_dims,
                                    initial_value->shape, initial_value->device);
    eg__scope_resume();
    if (!v || copy_into(v, initial_value) != EG_OK) {
        eg__unref(v);
        variable_info_free(info);
        return NULL;
    }
    v->variable = info;
    return v;
}

bool eg_is_variable(const eg_tensor *t) {
    return t && t->variable;
}
const char *eg_variable_name(const eg_tensor *v) {
    return v && v->variable ? v->variable->name : "";
}
bool eg_variable_trainable(const eg_tensor *v) {
    return v && v->variable && v->variable->trainable;
}
void eg_variable_set_trainable(eg_tensor *v, bool trainable) {
    if (v && v->variable) v->variable->trainable = trainable;
}

eg_status eg_variable_set_sparse_gradient(eg_tensor *v, bool sparse) {
    if (!eg__check_arg(v, "variable_set_sparse_gradient", 0)) return eg_last_status();
    if (!v->variable)
        return eg__error(EG_ERR_INVALID_ARGUMENT, "variable_set_sparse_gradient: not a variable");
    if (sparse && (v->n_dims < 2 || (v->dtype != EG_DTYPE_F32 && v->dtype != EG_DTYPE_F64)))
        return eg__error(EG_ERR_INVALID_ARGUMENT,
                         "variable_set_sparse_gradient: '%s' must be an f32 or f64 table of 2 or "
                         "more dims, got %s of %d dims",
                         v->variable->name, eg_dtype_name(v->dtype), v->n_dims);
    v->variable->sparse_gradient = sparse;
    return EG_OK;
}

bool eg_variable_sparse_gradient(const eg_tensor *v) {
    return v && v->variable && v->variable->sparse_gradient;
}

typedef enum { ASSIGN_SET, ASSIGN_ADD, ASSIGN_SUB } assign_kind;

/* numpy broadcasting of value to exactly the variable's shape. */
static bool broadcasts_to(const eg_tensor *value, const eg_tensor *variable) {
    if (value->n_dims > variable->n_dims) return false;
    for (int d = 1; d <= value->n_dims; d++) {
        int64_t from = value->shape[value->n_dims - d], to = variable->shape[variable->n_dims - d];
        if (from != to && from != 1) return false;
    }
    return true;
}

/* An assign waiting for its executor. */
typedef struct deferred_assign {
    eg_tensor *variable, *value;
    assign_kind kind;
} deferred_assign;

static eg_status assign_now(eg_tensor *variable, const eg_tensor *value, assign_kind kind);

static eg_status run_deferred_assign(void *context) {
    deferred_assign *d = context;
    return assign_now(d->variable, d->value, d->kind);
}

static void free_deferred_assign(void *context) {
    deferred_assign *d = context;
    eg__unref(d->variable);
    eg__unref(d->value);
    free(d);
}

/* An assign is an effect the executor schedules: now (eager, lazy), or at every replay of a
 * traced function, after its graph. */
static eg_status apply_assign(eg_tensor *variable, const eg_tensor *value, assign_kind kind) {
    deferred_assign *d = malloc(sizeof *d);
    if (!d) return eg__error(EG_ERR_OUT_OF_MEMORY, "assign: out of host memory");
    *d = (deferred_assign){variable, (eg_tensor *)value, kind};
    eg__ref(variable);
    eg__ref(value);
    eg__effect effect = {run_deferred_assign, free_deferred_assign, d, 1, &value};
    return eg__executor_current()->apply(&effect);
}

static eg_status assign(eg_tensor *variable, const eg_tensor *value, assign_kind kind) {
    static const char *const names[] = {"assign", "assign_add", "assign_sub"};
    if (!eg__check_arg(variable, names[kind], 0) || !eg__check_arg(value, names[kind], 1))
        return eg_last_status();
    if (!variable->variable)
        return eg__error(EG_ERR_INVALID_ARGUMENT, "%s: the target is not a variable", names[kind]);
    if (value->dtype != variable->dtype)
        return eg__error(EG_ERR_DTYPE, "%s: value is %s, variable is %s", names[kind],
                         eg_dtype_name(value->dtype), eg_dtype_name(variable->dtype));
    if (!broadcasts_to(value, variable)) { /* checked here so the message names this function */
        char a[160], b[160];
        return eg__error(EG_ERR_SHAPE, "%s: value of shape %s does not fit variable %s",
                         names[kind], eg__shape_format(value->n_dims, value->shape, a, 160),
                         eg__shape_format(variable->n_dims, variable->shape, b, 160));
    }
    return apply_assign(variable, value, kind);
}

static eg_status assign_now(eg_tensor *variable, const eg_tensor *value, assign_kind kind) {
    static const char *const names[] = {"assign", "assign_add", "assign_sub"};
    eg_no_grad_begin();
    eg__scope_suspend();
    /* The update runs now, also in lazy mode; pending lazy readers of the variable keep the
     * value they saw. */
    int lazy_depth = eg__lazy_depth;
    eg__lazy_depth = 0;
    eg_tensor *result = NULL, *moved = NULL;
    /* A value from another device is copied to the variable's first (as TensorFlow does). */
    if (value->device != variable->device) value = moved = eg_tensor_to(value, variable->device);
    if (!value) {
        /* the copy's error is pending */
    } else if (kind == ASSIGN_SET) {
        result = eg_broadcast_to(value, variable->n_dims, variable->shape);
        if (result && eg_tensor_shares_storage(result, variable)) {
            /* value views the variable itself (v = v^T): copying in place would read elements
             * already overwritten, so go through a copy */
            eg_tensor *copy = eg_copy(result);
            eg__unref(result);
            result = copy;
        }
    } else {
        result = kind == ASSIGN_ADD ? eg_add(variable, value) : eg_sub(variable, value);
    }
    eg_status status = eg_last_status();
    if (result) {
        if (result->n_dims != variable->n_dims ||
            memcmp(result->shape, variable->shape, sizeof(int64_t) * (size_t)result->n_dims)) {
            char a[160], b[160];
            status = eg__error(EG_ERR_SHAPE, "%s: value of shape %s does not fit variable %s",
                               names[kind], eg__shape_format(value->n_dims, value->shape, a, 160),
                               eg__shape_format(variable->n_dims, variable->shape, b, 160));
        } else {
            status = eg__lazy_before_write(variable);
            if (status == EG_OK) status = copy_into(variable, result);
        }
    }
    eg__unref(result);
    eg__unref(moved);
    eg__lazy_depth = lazy_depth;
    eg__scope_resume();
    eg_no_grad_end();
    return status;
}

eg_status eg_assign(eg_tensor *variable, const eg_tensor *value) {
    return assign(variable, value, ASSIGN_SET);
}
eg_status eg_assign_add(eg_tensor *variable, const eg_tensor *value) {
    return assign(variable, value, ASSIGN_ADD);
}
eg_status eg_assign_sub(eg_tensor *variable, const eg_tensor *value) {
    return assign(variable, value, ASSIGN_SUB);
}
