/* eagle train --approx (approx_train.h). */
#include "approx_train.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "cnn.h"

enum { MAX_LAYERS = 32, SHADOW_BATCH_MAX = 1024 };

bool approx_train_parse(const char *text, double *fraction) {
    if (strncmp(text, "sample:", 7) != 0 || !text[7]) return false;
    char *end = NULL;
    *fraction = strtod(text + 7, &end);
    return *end == '\0' && *fraction > 0 && *fraction <= 1;
}

void approx_train_describe(eg_model *model) {
    int n = 0;
    double fraction = 0;
    for (int i = 0; i < eg_model_n_layers(model); i++) {
        double f = eg_layer_gradient_sampling(eg_model_layer(model, i));
        if (f > 0) fraction = f, n++;
    }
    if (n)
        printf("approx: sample:%g on %d Dense layer%s (kernel gradients from %g of each batch's "
               "rows; a shadow check at each epoch's end)\n",
               fraction, n, n == 1 ? "" : "s", fraction);
}

/* The layers whose gradients sample, and their kernels. */
static int sampled_layers(eg_model *model, eg_layer **layers, eg_tensor **kernels) {
    int n = 0;
    for (int i = 0; i < eg_model_n_layers(model) && n < MAX_LAYERS; i++) {
        eg_layer *layer = eg_model_layer(model, i);
        int n_vars = 0;
        eg_tensor *const *vars = eg_layer_variables(layer, &n_vars);
        if (eg_layer_gradient_sampling(layer) <= 0 || n_vars < 1) continue;
        layers[n] = layer;
        kernels[n++] = vars[0];
    }
    return n;
}

/* The kernels' gradients of the mean loss on (x, labels), dropout drawn from `seed`; *seconds
 * the fastest of three computations (the same draws each time). */
static eg_status gradients(eg_model *model, const eg_tensor *x, const eg_tensor *labels,
                           uint64_t seed, int n, eg_tensor *const *kernels, eg_tensor **grads,
                           double *seconds) {
    eg_status status = EG_OK;
    *seconds = INFINITY;
    for (int run = 0; run < 3 && status == EG_OK; run++) {
        for (int i = 0; i < n; i++) {
            eg_release(grads[i]);
            grads[i] = NULL;
        }
        eg_manual_seed(seed);
        double start = cli_seconds();
        eg_tape *tape = eg_tape_begin(false);
        eg_tensor *pred = tape ? eg_model_call(model, x, true) : NULL;
        eg_tensor *loss =
            pred ? eg_loss_sparse_categorical_crossentropy(labels, pred, true, EG_REDUCTION_MEAN)
                 : NULL;
        status = loss ? eg_tape_gradient(tape, loss, n, kernels, grads, EG_UNCONNECTED_ZERO)
                      : eg_last_status();
        eg_tape_free(tape);
        if (status == EG_OK) status = eg_realize(n, grads);
        double took = cli_seconds() - start;
        *seconds = took < *seconds ? took : *seconds;
        eg_release(loss);
        eg_release(pred);
    }
    return status;
}

eg_status approx_train_shadow(eg_model *model, const mlp_data *train, bool cnn, int64_t batch_size,
                              uint64_t seed) {
    double fraction = 0;
    eg_layer *layers[MAX_LAYERS];
    eg_tensor *kernels[MAX_LAYERS], *exact[MAX_LAYERS] = {0}, *sampled[MAX_LAYERS] = {0};
    int n = sampled_layers(model, layers, kernels);
    if (n == 0) return EG_OK;
    fraction = eg_layer_gradient_sampling(layers[0]); /* the run's one fraction */
    int64_t count = batch_size < train->n ? batch_size : train->n;
    if (count > SHADOW_BATCH_MAX) count = SHADOW_BATCH_MAX;
    int64_t indices[SHADOW_BATCH_MAX];
    for (int64_t i = 0; i < count; i++) indices[i] = i;
    eg_scope_begin();
    /* the moving statistics a training call updates: kept, and put back after */
    int n_vars = 0;
    eg_tensor *const *vars = eg_model_variables(model, &n_vars);
    eg_tensor **kept = calloc((size_t)(n_vars ? n_vars : 1), sizeof *kept);
    eg_status status = vars && kept ? EG_OK : EG_ERR_OUT_OF_MEMORY;
    for (int i = 0; status == EG_OK && i < n_vars; i++)
        if (!eg_variable_trainable(vars[i]) && !(kept[i] = eg_copy(vars[i])))
            status = eg_last_status();
    eg_tensor *x = NULL, *labels = NULL;
    if (status == EG_OK) status = (cnn ? cnn_batch : mlp_batch)(train, indices, count, &x, &labels);
    double exact_seconds = 0, sampled_seconds = 0;
    /* exact first (the layers' sampling off), then sampled, with the same dropout masks */
    for (int i = 0; status == EG_OK && i < n; i++)
        status = eg_layer_set_gradient_sampling(layers[i], 0, false);
    if (status == EG_OK)
        status = gradients(model, x, labels, seed, n, kernels, exact, &exact_seconds);
    for (int i = 0; status == EG_OK && i < n; i++)
        status = eg_layer_set_gradient_sampling(layers[i], fraction, false);
    if (status == EG_OK)
        status = gradients(model, x, labels, seed, n, kernels, sampled, &sampled_seconds);
    for (int i = 0; i < n_vars && kept; i++)
        if (kept[i] && eg_assign(vars[i], kept[i]) != EG_OK && status == EG_OK)
            status = eg_last_status();
    if (status == EG_OK) {
        printf("  approx shadow (batch of %lld): gradients %.2f ms exact, %.2f ms sampled "
               "(%.2fx)\n",
               (long long)count, 1e3 * exact_seconds, 1e3 * sampled_seconds,
               exact_seconds / (sampled_seconds > 0 ? sampled_seconds : 1e-9));
        for (int i = 0; i < n; i++) {
            double relative, largest;
            cli_compare(sampled[i], exact[i], &relative, &largest);
            printf("    %-16s kernel gradient: relative error %.4f, largest %.3g\n",
                   eg_layer_name(layers[i]), relative, largest);
        }
    }
    free(kept);
    eg_scope_end();
    return status;
}
