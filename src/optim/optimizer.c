/* Optimizers: SGD, Adam/AdamW and RMSprop with Keras' update formulas, each update one fused
 * in-place loop per variable over raw f32/f64 data (variable and slots together). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "api/internal.h"
#include "base/idmap.h"
#include "eagle/autograd.h"
#include "eagle/ops.h"
#include "exec/executor.h"
#include "lazy/internal.h"
#include "optim/internal.h"

typedef eg__update_rule optimizer_kind;

#define MAX_SLOTS EG__UPDATE_MAX_SLOTS

/* The slots of one variable, at fixed positions per kind (NULL where unused). */
typedef struct slot_set {
    eg_tensor *slots[MAX_SLOTS];
} slot_set;

struct eg_optimizer {
    optimizer_kind kind;
    const char *name;
    eg_schedule learning_rate;
    double momentum;
    bool nesterov;
    double weight_decay;
    double beta_1, beta_2, epsilon;
    double rho;
    bool centered;
    int64_t iterations;
    const char *slot_names[MAX_SLOTS]; /* NULL: position unused */
    eg__idmap slots;                   /* variable id -> slot_set * */
    eg__loss_scale *loss_scale;        /* owned; NULL without loss scaling */
    eg_gradient_clipping clipping;
};

bool eg__optimizer_clips(const eg_optimizer *opt) {
    const eg_gradient_clipping *c = &opt->clipping;
    return c->clipnorm > 0 || c->clipvalue > 0 || c->global_clipnorm > 0;
}

eg__loss_scale *eg__optimizer_loss_scale(const eg_optimizer *opt) {
    return opt ? opt->loss_scale : NULL;
}

void eg__optimizer_attach_loss_scale(eg_optimizer *opt, eg__loss_scale *ls) {
    opt->loss_scale = ls;
}

/* ---- options ---- */

eg_sgd_options eg_sgd_options_default(void) {
    eg_sgd_options o = {.learning_rate = eg_schedule_constant(0.01)};
    return o;
}

eg_adam_options eg_adam_options_default(void) {
    eg_adam_options o = {.learning_rate = eg_schedule_constant(0.001),
                         .beta_1 = 0.9,
                         .beta_2 = 0.999,
                         .epsilon = 1e-7,
                         .weight_decay = 0.0};
    return o;
}

eg_adam_options eg_adamw_options_default(void) {
    eg_adam_options o = eg_adam_options_default();
    o.weight_decay = 0.004;
    return o;
}

eg_rmsprop_options eg_rmsprop_options_default(void) {
    eg_rmsprop_options o = {.learning_rate = eg_schedule_constant(0.001),
                            .rho = 0.9,
                            .momentum = 0.0,
                            .epsilon = 1e-7,
                            .centered = false,
                            .weight_decay = 0.0};
    return o;
}

/* ---- construction ---- */

static bool in_unit_interval(double x) {
    return x >= 0 && x < 1;
}
static bool non_negative(double x) {
    return x >= 0 && isfinite(x);
}
static bool positive(double x) {
    return x > 0 && isfinite(x);
}

/* What is wrong with a clipping configuration, or NULL. */
static const char *clipping_problem(const eg_gradient_clipping *c) {
    if (!non_negative(c->clipnorm) || !non_negative(c->clipvalue) ||
        !non_negative(c->global_clipnorm))
        return "clipnorm, clipvalue and global_clipnorm must be finite and >= 0";
    if ((c->clipnorm > 0) + (c->clipvalue > 0) + (c->global_clipnorm > 0) > 1)
        return "at most one of clipnorm, clipvalue and global_clipnorm may be set (as in Keras)";
    return NULL;
}

static eg_optimizer *optimizer_new(optimizer_kind kind, const char *name,
                                   const eg_schedule *learning_rate, const char *problem,
                                   const eg_gradient_clipping *clipping) {
    if (!problem) problem = clipping_problem(clipping);
    const char *schedule_problem = eg__schedule_problem(learning_rate);
    if (schedule_problem || problem) {
        eg__error(EG_ERR_INVALID_ARGUMENT, "%s_new: %s%s", name,
                  schedule_problem ? "learning rate: " : "",
                  schedule_problem ? schedule_problem : problem);
        return NULL;
    }
    eg_optimizer *opt = calloc(1, sizeof *opt);
    if (!opt) {
        eg__error(EG_ERR_OUT_OF_MEMORY, "%s_new: out of host memory", name);
        return NULL;
    }
    opt->kind = kind;
    opt->clipping = *clipping;
    opt->name = name;
    opt->learning_rate = *learning_rate;
    return opt;
}

eg_optimizer *eg_sgd_new(const eg_sgd_options *options) {
    eg_sgd_options o = options ? *options : eg_sgd_options_default();
    const char *problem = !non_negative(o.momentum)       ? "momentum must be finite and >= 0"
                          : !non_negative(o.weight_decay) ? "weight_decay must be finite and >= 0"
                                                          : NULL;
    eg_optimizer *opt = optimizer_new(EG__UPDATE_SGD, "sgd", &o.learning_rate, problem, &o.clipping);
    if (!opt) return NULL;
    opt->momentum = o.momentum;
    opt->nesterov = o.nesterov;
    opt->weight_decay = o.weight_decay;
    if (o.momentum != 0) opt->slot_names[0] = "momentum";
    return opt;
}

static eg_optimizer *adam_new(const eg_adam_options *options, const char *name,
                              eg_adam_options defaults) {
    eg_adam_options o = options ? *options : defaults;
    const char *problem = !in_unit_interval(o.beta_1)     ? "beta_1 must be in [0, 1)"
                          : !in_unit_interval(o.beta_2)   ? "beta_2 must be in [0, 1)"
                          : !positive(o.epsilon)          ? "epsilon must be finite and > 0"
                          : !non_negative(o.weight_decay) ? "weight_decay must be finite and >= 0"
                                                          : NULL;
    eg_optimizer *opt = optimizer_new(EG__UPDATE_ADAM, name, &o.learning_rate, problem, &o.clipping);
    if (!opt) return NULL;
    opt->beta_1 = o.beta_1;
    opt->beta_2 = o.beta_2;
    opt->epsilon = o.epsilon;
    opt->weight_decay = o.weight_decay;
    opt->slot_names[0] = "momentum";
    opt->slot_names[1] = "velocity";
    return opt;
}

eg_optimizer *eg_adam_new(const eg_adam_options *options) {
    return adam_new(options, "adam", eg_adam_options_default());
}

eg_optimizer *eg_adamw_new(const eg_adam_options *options) {
    return adam_new(options, "adamw", eg_adamw_options_default());
}

eg_optimizer *eg_rmsprop_new(const eg_rmsprop_options *options) {
    eg_rmsprop_options o = options ? *options : eg_rmsprop_options_default();
    const char *problem = !in_unit_interval(o.rho)        ? "rho must be in [0, 1)"
                          : !non_negative(o.momentum)     ? "momentum must be finite and >= 0"
                          : !positive(o.epsilon)          ? "epsilon must be finite and > 0"
                          : !non_negative(o.weight_decay) ? "weight_decay must be finite and >= 0"
                                                          : NULL;
    eg_optimizer *opt = optimizer_new(EG__UPDATE_RMSPROP, "rmsprop", &o.learning_rate, problem, &o.clipping);
    if (!opt) return NULL;
    opt->rho = o.rho;
    opt->momentum = o.momentum;
    opt->epsilon = o.epsilon;
    opt->centered = o.centered;
    opt->weight_decay = o.weight_decay;
    opt->slot_names[0] = "velocity";
    if (o.momentum > 0) opt->slot_names[1] = "momentum";
    if (o.centered) opt->slot_names[2] = "average_gradient";
    return opt;
}

static const eg__updater updater; /* the executors' view of an optimizer (at the end) */
static eg_status apply_now(eg_optimizer *opt, int n, eg_tensor *const *grads,
                           eg_tensor *const *variables);

/* ---- the update's scalars (the loops are the device's: backend/cpu/update.c) ---- */

/* The scalars of opt's update number `iteration` at learning rate lr (Adam's alpha
 * bias-corrected for that step). One definition for eg_optimizer_apply_gradients and graph
 * mode's tiled updates, which must give the same bits. */
static eg__update_params params_at(const eg_optimizer *opt, double lr, int64_t iteration) {
    eg__update_params h = {.rule = opt->kind,
                           .lr = lr,
                           .weight_decay = opt->weight_decay,
                           .momentum = opt->momentum,
                           .nesterov = opt->nesterov,
                           .beta_1 = opt->beta_1,
                           .beta_2 = opt->beta_2,
                           .epsilon = opt->epsilon,
                           .rho = opt->rho};
    if (opt->kind == EG__UPDATE_ADAM) {
        double t = (double)(iteration + 1);
        h.alpha = lr * sqrt(1.0 - pow(opt->beta_2, t)) / (1.0 - pow(opt->beta_1, t));
    }
    return h;
}

/* ---- slots ---- */

static slot_set *find_slots(const eg_optimizer *opt, const eg_tensor *variable) {
    return eg__idmap_get(&opt->slots, variable->id);
}

/* The variable's slots, created as zeros on first use; NULL with an error. Called with the
 * scope suspended. */
static slot_set *get_slots(eg_optimizer *opt, const eg_tensor *variable) {
    slot_set *set = find_slots(opt, variable);
    if (set) return set;
    set = calloc(1, sizeof *set);
    if (!set) goto out_of_memory;
    for (int k = 0; k < MAX_SLOTS; k++) {
        if (!opt->slot_names[k]) continue;
        set->slots[k] =
            eg__full_on(variable->device, variable->dtype, variable->n_dims, variable->shape, 0.0);
        if (!set->slots[k]) goto fail;
    }
    if (!eg__idmap_put(&opt->slots, variable->id, set)) goto out_of_memory;
    return set;
out_of_memory:
    eg__error(EG_ERR_OUT_OF_MEMORY, "optimizer: out of host memory for slots");
fail:
    if (set)
        for (int k = 0; k < MAX_SLOTS; k++) eg__unref(set->slots[k]);
    free(set);
    return NULL;
}

eg_tensor *eg_optimizer_get_slot(const eg_optimizer *opt, const eg_tensor *variable,
                                 const char *slot_name) {
    if (!opt || !variable || !slot_name) return NULL;
    slot_set *set = find_slots(opt, variable);
    if (!set) return NULL;
    for (int k = 0; k < MAX_SLOTS; k++)
        if (opt->slot_names[k] && strcmp(opt->slot_names[k], slot_name) == 0) return set->slots[k];
    return NULL;
}

/* ---- apply_gradients ---- */

static eg_status check_pair(const eg_optimizer *opt, int i, const eg_tensor *grad,
                            const eg_tensor *variable) {
    const char *name = opt->name;
    if (!variable) return eg__error(EG_ERR_NULL_ARGUMENT, "%s: variables[%d] is NULL", name, i);
    if (!eg_is_variable(variable))
        return eg__error(EG_ERR_INVALID_ARGUMENT, "%s: variables[%d] is not a variable", name, i);
    if (variable->dtype != EG_DTYPE_F32 && variable->dtype != EG_DTYPE_F64)
        return eg__error(EG_ERR_DTYPE, "%s: variable '%s' is %s; only f32 and f64 are updated",
                         name, eg_variable_name(variable), eg_dtype_name(variable->dtype));
    if (!eg__is_contiguous(variable))
        return eg__error(EG_ERR_UNSUPPORTED, "%s: variable '%s' must be a contiguous tensor",
                         name, eg_variable_name(variable));
    if (!grad) return EG_OK;
    if (!eg_dtype_is_float(grad->dtype))
        return eg__error(EG_ERR_DTYPE, "%s: gradient of '%s' is %s; it must be a float tensor",
                         name, eg_variable_name(variable), eg_dtype_name(grad->dtype));
    if (grad->device != variable->device)
        return eg__error(EG_ERR_DEVICE, "%s: gradient of '%s' is on %s, the variable on %s", name,
                         eg_variable_name(variable), eg_device_name(grad->device),
                         eg_device_name(variable->device));
    if (grad->n_dims != variable->n_dims ||
        (grad->n_dims &&
         memcmp(grad->shape, variable->shape, (size_t)grad->n_dims * sizeof(int64_t)))) {
        char a[160], b[160];
        return eg__error(EG_ERR_SHAPE, "%s: gradient %s does not match variable '%s' %s", name,
                         eg__shape_format(grad->n_dims, grad->shape, a, sizeof a),
                         eg_variable_name(variable),
                         eg__shape_format(variable->n_dims, variable->shape, b, sizeof b));
    }
    return EG_OK;
}

eg_status eg_optimizer_apply_gradients(eg_optimizer *opt, int n, eg_tensor *const *grads,
                                       eg_tensor *const *variables) {
    if (!opt) return eg__error(EG_ERR_NULL_ARGUMENT, "apply_gradients: optimizer is NULL");
    if (n < 0)
        return eg__error(EG_ERR_INVALID_ARGUMENT, "%s: n must be >= 0, got %d", opt->name, n);
    if (n > 0 && (!grads || !variables))
        return eg__error(EG_ERR_NULL_ARGUMENT, "%s: %s array is NULL", opt->name,
                         grads ? "variables" : "grads");
    /* Check everything before writing anything. A model's few variables are compared pairwise
     * (no map to allocate and free on every step), many through a map. */
    enum { FEW_VARIABLES = 32 };
    eg__idmap seen = {0};
    eg_status status = EG_OK;
    for (int i = 0; i < n && status == EG_OK; i++) {
        status = check_pair(opt, i, grads[i], variables[i]);
        if (status != EG_OK) break;
        bool twice = false;
        if (n <= FEW_VARIABLES)
            for (int j = 0; j < i && !twice; j++) twice = variables[j]->id == variables[i]->id;
        else
            twice = eg__idmap_contains(&seen, variables[i]->id);
        if (twice)
            status = eg__error(EG_ERR_INVALID_ARGUMENT, "%s: variable '%s' appears twice",
                               opt->name, eg_variable_name(variables[i]));
        else if (n > FEW_VARIABLES && !eg__idmap_put(&seen, variables[i]->id, variables[i]))
            status = eg__error(EG_ERR_OUT_OF_MEMORY, "%s: out of host memory", opt->name);
    }
    eg__idmap_clear(&seen);
    if (status != EG_OK) return status;
    int n_sparse = 0;
    for (int i = 0; i < n; i++) n_sparse += eg_tensor_is_row_sparse(grads[i]);
    if (n_sparse && opt->loss_scale)
        return eg__error(EG_ERR_UNSUPPORTED,
                         "%s: loss scaling does not take row-sparse gradients yet (an Embedding "
                         "with sparse_gradient)",
                         opt->name);
    if (opt->loss_scale) return eg__loss_scale_apply(opt, n, grads, variables);
    /* Row-sparse gradients with each row once: what clipping's norms and the row updates need */
    eg_tensor **coalesced = NULL;
    if (n_sparse) {
        coalesced = calloc((size_t)n, sizeof *coalesced);
        if (!coalesced) return eg__error(EG_ERR_OUT_OF_MEMORY, "%s: out of host memory", opt->name);
        for (int i = 0; i < n && status == EG_OK; i++) {
            coalesced[i] =
                eg_tensor_is_row_sparse(grads[i]) ? eg__row_sparse_coalesce(grads[i]) : grads[i];
            if (!coalesced[i] && grads[i]) status = eg_last_status();
        }
        grads = coalesced;
    }
    eg_tensor **clipped = NULL;
    if (status == EG_OK && eg__optimizer_clips(opt)) {
        clipped = eg__clip_gradients(&opt->clipping, opt->name, n, grads);
        if (clipped)
            grads = clipped;
        else
            status = eg_last_status();
    }
    /* now (eager, lazy), or at every replay of the function being traced */
    if (status == EG_OK)
        status = eg__executor_current()->update(&updater, opt, n, grads, variables);
    for (int i = 0; clipped && i < n; i++) eg_release(clipped[i]);
    free(clipped);
    for (int i = 0; coalesced && i < n; i++)
        if (eg_tensor_is_row_sparse(coalesced[i])) eg_release(coalesced[i]);
    free(coalesced);
    return status;
}

eg_status eg__optimizer_apply_now(eg_optimizer *opt, int n, eg_tensor *const *grads,
                                  eg_tensor *const *variables) {
    return apply_now(opt, n, grads, variables);
}

/* One piece per row of a coalesced row-sparse gradient g of variable v: the row's elements of v
 * and of its slots, updated by the same loop as a dense gradient's elements. */
static void add_row_pieces(const eg_tensor *g, eg_tensor *v, const slot_set *slots,
                           eg__update_piece *pieces, int *n_pieces, int64_t *total) {
    int64_t width = v->n_elems / v->shape[0], bytes = width * (int64_t)eg_dtype_size(v->dtype);
    const int64_t *rows = eg__data(g->row_indices);
    const char *values = eg__data(g->row_values);
    for (int64_t k = 0; k < g->row_indices->n_elems; k++) {
        eg__update_piece *piece = &pieces[(*n_pieces)++];
        *piece = (eg__update_piece){.dtype = v->dtype,
                                    .variable = (char *)eg__data(v) + rows[k] * bytes,
                                    .grad = values + k * bytes,
                                    .first = *total,
                                    .count = width};
        for (int s = 0; s < MAX_SLOTS; s++)
            if (slots->slots[s])
                piece->slots[s] = (char *)eg__data(slots->slots[s]) + rows[k] * bytes;
        *total += width;
    }
}

/* The step now, the pairs checked: the updater's apply. */
static eg_status apply_now(eg_optimizer *opt, int n, eg_tensor *const *grads,
                           eg_tensor *const *variables) {
    eg_status status = EG_OK;
    /* Lazy gradients are computed together: one by one they would recompute shared work. */
    int n_pending = 0; /* (row-sparse gradients come coalesced, computed) */
    for (int i = 0; i < n; i++)
        n_pending += grads[i] && !grads[i]->storage && !grads[i]->row_values;
    if (n_pending) {
        eg_tensor **pending = malloc(sizeof *pending * (size_t)n_pending);
        if (!pending) return eg__error(EG_ERR_OUT_OF_MEMORY, "%s: out of host memory", opt->name);
        n_pending = 0;
        for (int i = 0; i < n; i++)
            if (grads[i] && !grads[i]->storage && !grads[i]->row_values)
                pending[n_pending++] = grads[i];
        status = eg_realize(n_pending, pending);
        free(pending);
    }
    /* Pending lazy ops that read a variable keep the value they were called with. */
    for (int i = 0; i < n && status == EG_OK; i++)
        if (grads[i]) status = eg__lazy_before_write(variables[i]);
    if (status != EG_OK) return status;
    double lr = eg_schedule_value(&opt->learning_rate, opt->iterations);
    if (isnan(lr)) return eg_last_status();

    /* Prepare: contiguous gradients of the variable's dtype, and the slots. */
    typedef struct prepared {
        eg_tensor *owned; /* a converted gradient we release, or NULL */
        const void *grad;
        slot_set *slots;
    } prepared;
    /* a model's few variables on the stack: no allocation in the step */
    enum { ON_STACK = 16 };
    prepared items_on_stack[ON_STACK] = {{0}};
    eg__update_piece pieces_on_stack[ON_STACK];
    prepared *items = n <= ON_STACK ? items_on_stack : calloc((size_t)n, sizeof *items);
    int64_t n_rows = 0; /* pieces beyond one per variable: a row-sparse gradient's rows */
    if (!items) return eg__error(EG_ERR_OUT_OF_MEMORY, "%s: out of host memory", opt->name);
    eg_no_grad_begin();
    eg__scope_suspend();
    for (int i = 0; i < n && status == EG_OK; i++) {
        const eg_tensor *g = grads[i], *v = variables[i];
        if (!g) continue;
        if (g->row_values) { /* coalesced: f32/f64 values of the table's dtype, on its device */
            if (g->dtype != v->dtype || !v->n_dims) {
                status = eg__error(EG_ERR_DTYPE, "%s: row-sparse gradient of '%s' is %s, not %s",
                                   opt->name, eg_variable_name(v), eg_dtype_name(g->dtype),
                                   eg_dtype_name(v->dtype));
                break;
            }
            if (!(items[i].slots = get_slots(opt, v))) {
                status = eg_last_status();
                break;
            }
            items[i].grad = NULL;
            n_rows += g->row_indices->n_elems - 1;
            continue;
        }
        if (g->dtype != v->dtype)
            g = items[i].owned = eg_cast(g, v->dtype);              /* contiguous */
        else if (!eg__is_contiguous(g) || g->storage == v->storage) /* views; aliasing */
            g = items[i].owned = eg_copy(g);
        if (!g || !(items[i].slots = get_slots(opt, v))) {
            status = eg_last_status();
            break;
        }
        items[i].grad = g->n_elems ? eg__data(g) : NULL; /* the device's memory */
    }
    eg__update_piece *pieces = NULL;
    if (status == EG_OK) {
        pieces =
            n + n_rows <= ON_STACK ? pieces_on_stack : calloc((size_t)(n + n_rows), sizeof *pieces);
        if (!pieces) status = eg__error(EG_ERR_OUT_OF_MEMORY, "%s: out of host memory", opt->name);
    }
    if (status == EG_OK) {
        eg__update_params params = params_at(opt, lr, opt->iterations);
        /* one multi-tensor update per device the variables live on, in the order they first
         * appear */
        for (int first = 0; first < n; first++) {
            const eg_device *device = variables[first]->device;
            bool seen_before = false;
            for (int i = 0; i < first && !seen_before; i++)
                seen_before = grads[i] && variables[i]->device == device;
            if (!grads[first] || seen_before) continue;
            int n_pieces = 0;
            int64_t total = 0;
            for (int i = first; i < n; i++) {
                eg_tensor *v = variables[i];
                if (!grads[i] || v->n_elems == 0 || v->device != device) continue;
                if (grads[i]->row_values) {
                    add_row_pieces(grads[i], v, items[i].slots, pieces, &n_pieces, &total);
                    continue;
                }
                eg__update_piece *piece = &pieces[n_pieces++];
                *piece = (eg__update_piece){.dtype = v->dtype,
                                            .variable = eg__data(v),
                                            .grad = items[i].grad,
                                            .first = total,
                                            .count = v->n_elems};
                for (int k = 0; k < MAX_SLOTS; k++)
                    if (items[i].slots->slots[k])
                        piece->slots[k] = eg__data(items[i].slots->slots[k]);
                total += v->n_elems;
            }
            if (n_pieces) {
                /* a GPU's update only enqueues: it raises an error when the launch fails */
                uint64_t mark = eg__error_mark();
                eg__backend_of(device)->update_many(&params, pieces, n_pieces, total);
                if (eg__error_since(mark)) {
                    status = eg_last_status();
                    break;
                }
            }
        }
        if (status == EG_OK) opt->iterations++;
    }
    if (pieces != pieces_on_stack) free(pieces);
    for (int i = 0; i < n; i++) eg__unref(items[i].owned);
    if (items != items_on_stack) free(items);
    eg__scope_resume();
    eg_no_grad_end();
    return status;
}

/* ---- queries ---- */

int64_t eg_optimizer_iterations(const eg_optimizer *opt) {
    return opt ? opt->iterations : 0;
}

double eg_optimizer_learning_rate(const eg_optimizer *opt) {
    return opt ? eg_schedule_value(&opt->learning_rate, opt->iterations) : NAN;
}

eg_status eg_optimizer_set_learning_rate(eg_optimizer *opt, eg_schedule learning_rate) {
    if (!opt) return eg__error(EG_ERR_NULL_ARGUMENT, "optimizer_set_learning_rate: NULL optimizer");
    const char *problem = eg__schedule_problem(&learning_rate);
    if (problem)
        return eg__error(EG_ERR_INVALID_ARGUMENT, "optimizer_set_learning_rate: %s", problem);
    opt->learning_rate = learning_rate;
    return EG_OK;
}

/* ---- state ---- */

int eg_optimizer_slot_count(const eg_optimizer *opt) {
    int count = 0;
    for (int k = 0; opt && k < MAX_SLOTS; k++) count += opt->slot_names[k] != NULL;
    return count;
}

const char *eg_optimizer_slot_name(const eg_optimizer *opt, int i) {
    if (!opt) {
        eg__error(EG_ERR_NULL_ARGUMENT, "optimizer_slot_name: NULL optimizer");
        return NULL;
    }
    for (int k = 0, seen = 0; k < MAX_SLOTS; k++)
        if (opt->slot_names[k] && seen++ == i) return opt->slot_names[k];
    eg__error(EG_ERR_INVALID_ARGUMENT, "%s: slot index %d out of range (%d slots)", opt->name, i,
              eg_optimizer_slot_count(opt));
    return NULL;
}

eg_status eg_optimizer_set_slot(eg_optimizer *opt, const eg_tensor *variable, const char *slot_name,
                                const eg_tensor *value) {
    if (!opt || !variable || !slot_name || !value)
        return eg__error(EG_ERR_NULL_ARGUMENT, "optimizer_set_slot: %s is NULL",
                         !opt         ? "optimizer"
                         : !variable  ? "variable"
                         : !slot_name ? "slot_name"
                                      : "value");
    eg_status status = check_pair(opt, 0, NULL, variable);
    if (status != EG_OK) return status;
    const char *name = eg_variable_name(variable);
    if (!eg_dtype_is_float(value->dtype))
        return eg__error(EG_ERR_DTYPE, "%s: slot value for '%s' is %s; it must be a float tensor",
                         opt->name, name, eg_dtype_name(value->dtype));
    if (value->n_dims != variable->n_dims ||
        (value->n_dims &&
         memcmp(value->shape, variable->shape, (size_t)value->n_dims * sizeof(int64_t)))) {
        char a[160], b[160];
        return eg__error(EG_ERR_SHAPE, "%s: slot value %s does not match variable '%s' %s",
                         opt->name, eg__shape_format(value->n_dims, value->shape, a, sizeof a),
                         name, eg__shape_format(variable->n_dims, variable->shape, b, sizeof b));
    }
    int slot = -1;
    char known[64] = "";
    for (int k = 0; k < MAX_SLOTS; k++) {
        if (!opt->slot_names[k]) continue;
        if (!strcmp(opt->slot_names[k], slot_name)) slot = k;
        size_t used = strlen(known);
        snprintf(known + used, sizeof known - used, "%s%s", used ? ", " : "", opt->slot_names[k]);
    }
    if (slot < 0)
        return eg__error(EG_ERR_INVALID_ARGUMENT, "%s: no slot named '%s' (slots: %s)", opt->name,
                         slot_name, known[0] ? known : "none");
    eg_no_grad_begin();
    eg__scope_suspend();
    /* A contiguous copy of the variable's dtype (cast, or copied when it is a view or is the
     * slot itself), then one memcpy. */
    eg_tensor *owned = NULL;
    const eg_tensor *source = value;
    slot_set *set = find_slots(opt, variable);
    if (value->device != variable->device) /* a checkpoint read on the host, a GPU's variable */
        source = owned = eg_tensor_to(value, variable->device);
    if (source && source->dtype != variable->dtype) {
        eg_tensor *cast = eg_cast(source, variable->dtype);
        eg__unref(owned);
        source = owned = cast;
    } else if (source && (!eg__is_contiguous(source) || (set && set->slots[slot] &&
                                                         source->storage == set->slots[slot]->storage))) {
        eg_tensor *copy = eg_copy(source);
        eg__unref(owned);
        source = owned = copy;
    }
    if (source) set = get_slots(opt, variable);
    status = source && set ? EG_OK : eg_last_status();
    if (status == EG_OK && variable->n_elems)
        status = eg__device_copy(variable->device, eg__data(set->slots[slot]), source->device,
                                 eg__data(source),
                                 (size_t)variable->n_elems * eg_dtype_size(variable->dtype));
    eg__unref(owned);
    eg__scope_resume();
    eg_no_grad_end();
    return status;
}

eg_status eg_optimizer_set_iterations(eg_optimizer *opt, int64_t iterations) {
    if (!opt) return eg__error(EG_ERR_NULL_ARGUMENT, "optimizer_set_iterations: NULL optimizer");
    if (iterations < 0)
        return eg__error(EG_ERR_INVALID_ARGUMENT, "%s: iterations must be >= 0, got %lld",
                         opt->name, (long long)iterations);
    opt->iterations = iterations;
    return EG_OK;
}

const char *eg_optimizer_name(const eg_optimizer *opt) {
    return opt ? opt->name : "";
}

void eg_optimizer_free(eg_optimizer *opt) {
    if (!opt) return;
    for (size_t i = 0; i < opt->slots.capacity; i++) {
        slot_set *set = opt->slots.keys[i] ? opt->slots.values[i] : NULL;
        if (!set) continue;
        for (int k = 0; k < MAX_SLOTS; k++) eg__unref(set->slots[k]);
        free(set);
    }
    eg__idmap_clear(&opt->slots);
    eg__loss_scale_free(opt->loss_scale);
    free(opt);
}

/* ---- graph mode: what a replayed step asks of the optimizer (exec/effect.h) ---- */

static const char *updater_name(const void *opt) {
    return eg_optimizer_name(opt);
}

static int64_t updater_iterations(const void *opt) {
    return eg_optimizer_iterations(opt);
}

static eg_status updater_set_iterations(void *opt, int64_t iterations) {
    return eg_optimizer_set_iterations(opt, iterations);
}

static eg_status updater_prepare(void *optimizer, eg_tensor *variable, int64_t iteration,
                                 eg__update_step *step) {
    eg_optimizer *opt = optimizer;
    double lr = eg_schedule_value(&opt->learning_rate, iteration);
    if (isnan(lr)) return eg_last_status();
    eg__scope_suspend();
    slot_set *set = get_slots(opt, variable);
    eg__scope_resume();
    if (!set) return eg_last_status();
    *step = (eg__update_step){.variable = variable, .params = params_at(opt, lr, iteration)};
    for (int k = 0; k < MAX_SLOTS; k++)
        if (set->slots[k]) step->slots[k] = eg__data(set->slots[k]);
    return EG_OK;
}

static eg_status updater_apply(void *opt, int n, eg_tensor *const *grads,
                               eg_tensor *const *variables) {
    return apply_now(opt, n, grads, variables);
}

static const eg__updater updater = {updater_name, updater_iterations, updater_set_iterations,
                                    updater_prepare, updater_apply};
