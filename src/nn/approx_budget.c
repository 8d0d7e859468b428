/* Choosing an approximation per layer within an error budget (eg_model_choose_approx,
 * eagle/approx.h): every candidate is measured on the calibration batch, error and time, and the
 * fastest within the budget that beats the exact call wins. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "eagle/approx.h"
#include "eagle/lazy.h"
#include "nn/internal.h"

enum { TIMED_CALLS = 3 };

static double seconds_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* ||a - b||_F / ||b||_F of two f32 tensors of one shape (read on the host). */
static eg_status relative_error(const eg_tensor *a, const eg_tensor *b, double *error) {
    int64_t n = eg_tensor_n_elems(b);
    const float *x = eg_tensor_data(a), *y = eg_tensor_data(b);
    if (!x || !y) return eg_last_status();
    double diff = 0, norm = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = (double)x[i] - y[i];
        diff += d * d;
        norm += (double)y[i] * y[i];
    }
    *error = norm > 0 ? sqrt(diff / norm) : sqrt(diff);
    return EG_OK;
}

/* The layer's inference call on h, the fastest of TIMED_CALLS (milliseconds); *y the last. */
static eg_status timed_call(eg_layer *layer, const eg_tensor *h, eg_tensor **y, double *ms) {
    *y = NULL;
    *ms = INFINITY;
    for (int run = 0; run < TIMED_CALLS; run++) {
        eg_release(*y);
        double start = seconds_now();
        *y = eg_layer_call(layer, h, false);
        if (!*y || eg_realize(1, y) != EG_OK) return eg_last_status();
        double took = 1e3 * (seconds_now() - start);
        *ms = took < *ms ? took : *ms;
    }
    return EG_OK;
}

/* Whether a measured candidate (error, ms) beats the best so far within the budget. */
static bool better(double budget, double error, double ms, double best_ms) {
    return error <= budget && ms < best_ms;
}

/* Measures the candidates of layer i on h against its exact output y and applies the winner. */
static eg_status choose_for(eg_model *model, int i, const eg_tensor *h, const eg_tensor *y,
                            double budget, eg_approx_choice *choice) {
    eg_layer *layer = model->layers[i];
    const eg_tensor *kernel = layer->variables[0];
    int64_t outputs = kernel->shape[kernel->n_dims - 1];
    int64_t inner = kernel->n_elems / (outputs ? outputs : 1);
    bool int8_fits = kernel->dtype == EG_DTYPE_F32 && inner >= 32 &&
                     (layer->kind == EG__LAYER_DENSE ||
                      (layer->conv.groups == 1 && layer->conv.data_format == EG_DATA_FORMAT_NHWC));
    double best_ms = choice->exact_ms, error = 0, ms = 0;
    eg_tensor *approx = NULL;
    eg_status status = EG_OK;
    bool int8_best = false;
    eg_layer *thin_best = NULL;
    if (int8_fits && budget > 0) {
        status = eg_layer_quantize_int8(layer, 7);
        if (status == EG_OK) status = timed_call(layer, h, &approx, &ms);
        if (status == EG_OK) status = relative_error(approx, y, &error);
        eg_release(approx);
        eg_layer_quantize_int8(layer, 0);
        choice->candidates++;
        if (status == EG_OK && better(budget, error, ms, best_ms)) {
            int8_best = true;
            best_ms = ms;
            choice->error = error;
            snprintf(choice->policy, sizeof choice->policy, "int8");
        }
    }
    int64_t k = layer->kind == EG__LAYER_DENSE ? kernel->shape[0] : 0,
            small = k < outputs ? k : outputs;
    for (int div = 8; status == EG_OK && k && budget > 0 && div >= 2; div /= 2) {
        int64_t rank = small / div;
        if (rank < 1 || rank * (k + outputs) >= k * outputs) continue;
        eg_layer *thin = eg_dense_lowrank_new(layer, rank, 0, NULL);
        if (!thin) {
            status = eg_last_status();
            break;
        }
        status = timed_call(thin, h, &approx, &ms);
        if (status == EG_OK) status = relative_error(approx, y, &error);
        eg_release(approx);
        choice->candidates++;
        if (status == EG_OK && better(budget, error, ms, best_ms)) {
            eg_layer_free(thin_best);
            thin_best = thin;
            int8_best = false;
            best_ms = ms;
            choice->error = error;
            snprintf(choice->policy, sizeof choice->policy, "lowrank:%lld", (long long)rank);
        } else {
            eg_layer_free(thin);
        }
    }
    if (status != EG_OK) {
        eg_layer_free(thin_best);
        return status;
    }
    choice->chosen_ms = best_ms;
    if (int8_best) return eg_layer_quantize_int8(layer, 7);
    if (thin_best) return eg__model_replace_layer(model, i, thin_best);
    return EG_OK;
}

eg_status eg_model_choose_approx(eg_model *model, const eg_tensor *x, double budget,
                                 eg_approx_choice *choices, int max_choices, int *n_choices) {
    static const char *what = "model_choose_approx";
    if (n_choices) *n_choices = 0;
    if (!model || !x)
        return eg__error(EG_ERR_NULL_ARGUMENT, "%s: %s is NULL", what, !model ? "model" : "x");
    if (model->functional)
        return eg__error(EG_ERR_UNSUPPORTED,
                         "%s: '%s' is a functional model; only a Sequential "
                         "model's layers are chosen for",
                         what, model->name);
    if (!(budget >= 0))
        return eg__error(EG_ERR_INVALID_ARGUMENT, "%s: budget %g is negative", what, budget);
    if (max_choices > 0 && !choices)
        return eg__error(EG_ERR_NULL_ARGUMENT, "%s: choices is NULL", what);
    eg_status status = EG_OK;
    int count = 0;
    eg_no_grad_begin();
    eg_scope_begin();
    const eg_tensor *h = x;
    for (int i = 0; status == EG_OK && i < model->n_layers; i++) {
        eg_layer *layer = model->layers[i];
        bool candidate = (layer->kind == EG__LAYER_DENSE || layer->kind == EG__LAYER_CONV2D) &&
                         layer->built && !layer->int8_kernel;
        eg_approx_choice choice = {.policy = "exact"};
        snprintf(choice.layer, sizeof choice.layer, "%s", eg_layer_name(layer));
        eg_tensor *y = NULL;
        if (!candidate) {
            y = eg_layer_call(layer, h, false);
            status = y ? EG_OK : eg_last_status();
        } else {
            status = timed_call(layer, h, &y, &choice.exact_ms);
            choice.chosen_ms = choice.exact_ms;
            if (status == EG_OK) status = choose_for(model, i, h, y, budget, &choice);
            if (status == EG_OK && count < max_choices) choices[count] = choice;
            count++;
        }
        h = y; /* the exact output: each layer's error is its own */
    }
    eg_scope_end();
    eg_no_grad_end();
    if (n_choices) *n_choices = count;
    return status;
}
