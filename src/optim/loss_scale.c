/* Loss scaling for f16 training (TensorFlow's LossScaleOptimizer): the state, scaling the loss,
 * and the step that checks, unscales, updates or skips, and moves the scale. The step is an
 * executor effect so that a traced function runs it at every replay with that replay's
 * gradients; it reads the gradients' sum on the host, so it sees all of them before any update. */
#include <math.h>
#include <stdlib.h>

#include "base/error.h"
#include "core/tensor_internal.h"
#include "eagle/autograd.h"
#include "eagle/lazy.h"
#include "eagle/ops.h"
#include "exec/executor.h"
#include "lazy/internal.h"
#include "optim/internal.h"

/* Scales beyond this would overflow f32 gradients of any size: TF caps its dynamic scale too. */
#define MAX_SCALE 0x1p64

struct eg__loss_scale {
    eg_loss_scale_options options;
    double scale;
    int64_t good_steps, skipped_steps;
    eg_tensor *scale_variable; /* f32 scalar on the host: what scale_loss multiplies by */
};

eg_loss_scale_options eg_loss_scale_options_default(void) {
    return (eg_loss_scale_options){
        .dynamic = true, .initial_scale = 32768.0, .growth_interval = 2000};
}

static bool power_of_two_in_range(double scale) {
    if (!(scale >= 1.0 && scale <= MAX_SCALE)) return false;
    int exponent;
    return frexp(scale, &exponent) == 0.5;
}

void eg__loss_scale_free(eg__loss_scale *ls) {
    if (!ls) return;
    eg__unref(ls->scale_variable);
    free(ls);
}

/* The scale variable holds ls->scale (a host write, outside any lazy or traced recording). */
static eg_status store_scale(eg__loss_scale *ls) {
    eg_tensor *value = eg_scalar(EG_DTYPE_F32, ls->scale);
    eg_status status = value ? eg_assign(ls->scale_variable, value) : eg_last_status();
    eg__unref(value);
    return status;
}

eg_status eg_optimizer_enable_loss_scaling(eg_optimizer *opt,
                                           const eg_loss_scale_options *options) {
    if (!opt) return eg__error(EG_ERR_NULL_ARGUMENT, "enable_loss_scaling: optimizer is NULL");
    if (eg__optimizer_loss_scale(opt))
        return eg__error(EG_ERR_STATE, "enable_loss_scaling: %s already scales its loss",
                         eg_optimizer_name(opt));
    if (eg__optimizer_clips(opt))
        return eg__error(EG_ERR_UNSUPPORTED,
                         "enable_loss_scaling: %s clips its gradients, which loss scaling does "
                         "not support yet (the clipping would see the scaled gradients)",
                         eg_optimizer_name(opt));
    eg_loss_scale_options o = options ? *options : eg_loss_scale_options_default();
    if (!power_of_two_in_range(o.initial_scale))
        return eg__error(EG_ERR_INVALID_ARGUMENT,
                         "enable_loss_scaling: initial_scale must be a power of 2 in [1, 2^64] "
                         "(unscaling is then exact), got %g",
                         o.initial_scale);
    if (o.growth_interval < 1)
        return eg__error(EG_ERR_INVALID_ARGUMENT,
                         "enable_loss_scaling: growth_interval must be >= 1, got %lld",
                         (long long)o.growth_interval);
    eg__loss_scale *ls = calloc(1, sizeof *ls);
    if (!ls) return eg__error(EG_ERR_OUT_OF_MEMORY, "enable_loss_scaling: out of host memory");
    ls->options = o;
    ls->scale = o.initial_scale;
    eg__scope_suspend();
    eg_tensor *initial = eg_scalar(EG_DTYPE_F32, ls->scale);
    ls->scale_variable = initial ? eg_variable(initial, "loss_scale") : NULL;
    eg__unref(initial);
    eg__scope_resume();
    if (!ls->scale_variable) {
        eg__loss_scale_free(ls);
        return eg_last_status();
    }
    eg_variable_set_trainable(ls->scale_variable, false);
    eg__optimizer_attach_loss_scale(opt, ls);
    return EG_OK;
}

eg_tensor *eg_optimizer_scale_loss(eg_optimizer *opt, const eg_tensor *loss) {
    if (!opt) {
        eg__error(EG_ERR_NULL_ARGUMENT, "scale_loss: optimizer is NULL");
        return NULL;
    }
    if (!eg__check_arg(loss, "scale_loss", 1)) return NULL;
    if (!eg_dtype_is_float(loss->dtype)) {
        eg__error(EG_ERR_DTYPE, "scale_loss: the loss must be a float tensor, got %s",
                  eg_dtype_name(loss->dtype));
        return NULL;
    }
    eg__loss_scale *ls = eg__optimizer_loss_scale(opt);
    if (!ls) return eg_reshape(loss, loss->n_dims, loss->shape);
    eg_tensor *moved = NULL, *cast = NULL;
    const eg_tensor *factor = ls->scale_variable;
    if (loss->device != factor->device) factor = moved = eg_tensor_to(factor, loss->device);
    if (factor && factor->dtype != loss->dtype) factor = cast = eg_cast(factor, loss->dtype);
    eg_tensor *scaled = factor ? eg_mul(loss, factor) : NULL;
    eg_release(cast);
    eg_release(moved);
    return scaled;
}

double eg_optimizer_loss_scale(const eg_optimizer *opt) {
    const eg__loss_scale *ls = eg__optimizer_loss_scale(opt);
    return ls ? ls->scale : 1.0;
}

int64_t eg_optimizer_skipped_steps(const eg_optimizer *opt) {
    const eg__loss_scale *ls = eg__optimizer_loss_scale(opt);
    return ls ? ls->skipped_steps : 0;
}

int64_t eg_optimizer_loss_scale_good_steps(const eg_optimizer *opt) {
    const eg__loss_scale *ls = eg__optimizer_loss_scale(opt);
    return ls ? ls->good_steps : 0;
}

eg_status eg_optimizer_set_loss_scale_state(eg_optimizer *opt, double scale, int64_t good_steps,
                                            int64_t skipped_steps) {
    if (!opt) return eg__error(EG_ERR_NULL_ARGUMENT, "set_loss_scale_state: optimizer is NULL");
    eg__loss_scale *ls = eg__optimizer_loss_scale(opt);
    if (!ls)
        return eg__error(EG_ERR_STATE, "set_loss_scale_state: %s does not scale its loss",
                         eg_optimizer_name(opt));
    if (!power_of_two_in_range(scale) || good_steps < 0 || skipped_steps < 0)
        return eg__error(EG_ERR_INVALID_ARGUMENT,
                         "set_loss_scale_state: needs a power-of-2 scale in [1, 2^64] and "
                         "counts >= 0, got %g, %lld, %lld",
                         scale, (long long)good_steps, (long long)skipped_steps);
    double old = ls->scale;
    ls->scale = scale;
    eg_status status = store_scale(ls);
    if (status != EG_OK) {
        ls->scale = old;
        return status;
    }
    ls->good_steps = good_steps;
    ls->skipped_steps = skipped_steps;
    return EG_OK;
}

/* ---- the step ---- */

typedef struct step_context {
    eg_optimizer *optimizer;
    int n;
    eg_tensor **grads, **variables; /* references held; grads[i] may be NULL */
} step_context;

static void free_step(void *context) {
    step_context *c = context;
    for (int i = 0; i < c->n; i++) {
        eg__unref(c->grads[i]);
        eg__unref(c->variables[i]);
    }
    free(c->grads);
    free(c->variables);
    free(c);
}

/* The sum of every gradient into *sum: each gradient summed on its device in f32 (f64 for f64
 * gradients), the partial sums added in f64, read once: an inf or NaN anywhere makes it
 * non-finite. A finite gradient's f32 sum overflows only past 3.4e38 (f16 ones are at most 65504
 * each). */
static eg_status gradient_sum(const step_context *c, double *sum) {
    eg_tensor *total = NULL;
    for (int i = 0; i < c->n; i++) {
        const eg_tensor *g = c->grads[i];
        if (!g) continue;
        eg_dtype wide = g->dtype == EG_DTYPE_F64 ? EG_DTYPE_F64 : EG_DTYPE_F32;
        eg_tensor *cast = g->dtype != wide ? eg_cast(g, wide) : NULL;
        eg_tensor *part = eg_sum(cast ? cast : g, 0, NULL, false);
        eg_release(cast);
        eg_tensor *part64 =
            part && part->dtype != EG_DTYPE_F64 ? eg_cast(part, EG_DTYPE_F64) : NULL;
        if (part64) {
            eg_release(part);
            part = part64;
        }
        eg_tensor *next = !part || !total ? part : eg_add(total, part);
        if (next != part) eg_release(part);
        eg_release(total);
        total = next;
        if (!total) return eg_last_status();
    }
    *sum = total ? eg_item(total) : 0.0;
    eg_release(total);
    return EG_OK;
}

static eg_status run_step(void *context) {
    step_context *c = context;
    eg__loss_scale *ls = eg__optimizer_loss_scale(c->optimizer);
    /* ops here run now, also when the step is called in lazy mode */
    int lazy_depth = eg__lazy_depth;
    eg__lazy_depth = 0;
    eg_no_grad_begin();
    eg__scope_suspend();
    eg_status status = eg_realize(c->n, c->grads);
    double sum = NAN;
    if (status == EG_OK) status = gradient_sum(c, &sum);
    bool finite = status == EG_OK && isfinite(sum);
    if (finite) {
        enum { ON_STACK = 16 };
        eg_tensor *on_stack[ON_STACK] = {0};
        eg_tensor **unscaled = c->n <= ON_STACK ? on_stack : calloc((size_t)c->n, sizeof *unscaled);
        if (!unscaled) status = eg__error(EG_ERR_OUT_OF_MEMORY, "loss scaling: out of host memory");
        for (int i = 0; i < c->n && status == EG_OK; i++) {
            if (!c->grads[i]) continue;
            /* exact: the scale is a power of 2 */
            unscaled[i] = eg_mul_scalar(c->grads[i], 1.0 / ls->scale);
            if (!unscaled[i]) status = eg_last_status();
        }
        if (status == EG_OK)
            status = eg__optimizer_apply_now(c->optimizer, c->n, unscaled, c->variables);
        for (int i = 0; unscaled && i < c->n; i++) eg__unref(unscaled[i]);
        if (unscaled != on_stack) free(unscaled);
    }
    if (status == EG_OK) {
        double old = ls->scale;
        if (finite) {
            ls->good_steps++;
            if (ls->options.dynamic && ls->good_steps >= ls->options.growth_interval) {
                if (ls->scale * 2 <= MAX_SCALE) ls->scale *= 2;
                ls->good_steps = 0;
            }
        } else {
            ls->skipped_steps++;
            ls->good_steps = 0;
            if (ls->options.dynamic && ls->scale > 1.0) ls->scale /= 2;
        }
        if (ls->scale != old) status = store_scale(ls);
    }
    eg__scope_resume();
    eg_no_grad_end();
    eg__lazy_depth = lazy_depth;
    return status;
}

eg_status eg__loss_scale_apply(eg_optimizer *opt, int n, eg_tensor *const *grads,
                               eg_tensor *const *variables) {
    step_context *c = calloc(1, sizeof *c);
    if (c) {
        c->grads = calloc((size_t)n + 1, sizeof *c->grads);
        c->variables = calloc((size_t)n + 1, sizeof *c->variables);
    }
    if (!c || !c->grads || !c->variables) {
        if (c) {
            free(c->grads);
            free(c->variables);
        }
        free(c);
        return eg__error(EG_ERR_OUT_OF_MEMORY, "%s: out of host memory", eg_optimizer_name(opt));
    }
    c->optimizer = opt;
    c->n = n;
    int n_reads = 0;
    for (int i = 0; i < n; i++) {
        c->grads[i] = grads[i];
        c->variables[i] = variables[i];
        if (grads[i]) eg__ref(grads[i]);
        eg__ref(variables[i]);
    }
    /* the effect reads the gradients: a traced function computes them first */
    const eg_tensor **reads = malloc(sizeof *reads * ((size_t)n + 1));
    if (!reads) {
        free_step(c);
        return eg__error(EG_ERR_OUT_OF_MEMORY, "%s: out of host memory", eg_optimizer_name(opt));
    }
    for (int i = 0; i < n; i++)
        if (grads[i]) reads[n_reads++] = grads[i];
    eg__effect effect = {run_step, free_step, c, n_reads, reads};
    eg_status status = eg__executor_current()->apply(&effect);
    free(reads);
    return status;
}
