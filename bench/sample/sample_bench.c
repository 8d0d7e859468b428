/* Column-row sampling in training (eg_model_set_gradient_sampling): the wide MLP 784-512-512-10
 * on Fashion-MNIST trained exactly, with the two hidden layers' kernel gradients sampled (a
 * fraction of the batch's rows; the 10-unit classifier stays exact), and with their input
 * gradients sampled too (a fraction of the units), from the same initial weights. Prints each run's
 * training time per step (the median epoch's) and its test accuracy, and the ratios to the exact
 * run (issue 24's goal for sample:0.5: >= 1.3x faster steps, <= 0.5 points of accuracy lost).
 *   bench_sample [--fraction F] [--epochs E] [--batch B] [--limit N] [--threads T] [--data DIR]
 * Defaults: fraction 0.5, 3 epochs, batch 128, all 60,000 training images. */
#define _POSIX_C_SOURCE 200809L
#include <eagle.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fashion_mnist_data.h"

enum { MAX_EPOCHS = 64 };

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int compare_doubles(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

typedef struct run {
    const char *name;
    double fraction;
    bool inputs_too;
    double step_ms, accuracy;
} run;

/* Trains a fresh model (seed 42) epoch by epoch; the median epoch's time per step. */
static bool train(run *r, eg_dataset *data, eg_dataset *test, int epochs, int64_t steps) {
    eg_manual_seed(42);
    eg_model *model = eg_sequential_new("wide_mlp");
    eg_sequential_add(model, eg_flatten_new(NULL));
    eg_sequential_add(model, eg_dense_new(512, EG_ACTIVATION_RELU));
    eg_sequential_add(model, eg_dense_new(512, EG_ACTIVATION_RELU));
    eg_sequential_add(model, eg_dense_new(10, EG_ACTIVATION_NONE));
    eg_adam_options adam = eg_adam_options_default();
    eg_optimizer *optimizer = eg_adam_new(&adam);
    eg_compile_options compile = {.loss = EG_FIT_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY,
                                  .from_logits = true,
                                  .accuracy = true,
                                  .mode = EG_EXECUTION_GRAPH};
    bool ok =
        eg_model_build(model, 3, (int64_t[]){-1, 28, 28}) == EG_OK &&
        eg_model_set_gradient_sampling(model, r->fraction, r->inputs_too, 64, NULL) == EG_OK &&
        eg_model_compile(model, optimizer, &compile) == EG_OK;
    double seconds[MAX_EPOCHS];
    for (int e = 0; ok && e < epochs; e++) {
        eg_fit_options options = eg_fit_options_default();
        options.epochs = 1;
        options.verbose = 0;
        double start = now();
        eg_history *history = eg_model_fit(model, data, &options);
        seconds[e] = now() - start;
        ok = history != NULL;
        eg_history_free(history);
    }
    eg_logs results;
    ok = ok && eg_model_evaluate(model, test, NULL, &results) == EG_OK;
    if (ok) {
        eg_logs_get(&results, "accuracy", &r->accuracy);
        qsort(seconds, (size_t)epochs, sizeof *seconds, compare_doubles);
        r->step_ms = 1e3 * seconds[epochs / 2] / (double)steps;
    }
    eg_model_free(model);
    eg_optimizer_free(optimizer);
    return ok;
}

int main(int argc, char **argv) {
    double fraction = 0.5;
    long epochs = 3, batch = 128, limit = 0, threads = 0;
    const char *dir = NULL;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--fraction"))
            fraction = atof(argv[i + 1]);
        else if (!strcmp(argv[i], "--epochs"))
            epochs = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "--batch"))
            batch = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "--limit"))
            limit = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "--threads"))
            threads = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "--data"))
            dir = argv[i + 1];
        else {
            fprintf(stderr, "bench_sample: unknown option '%s'\n", argv[i]);
            return 2;
        }
    }
    if (!(fraction > 0 && fraction <= 1) || epochs < 1 || epochs > MAX_EPOCHS || batch < 1) {
        fprintf(stderr, "bench_sample: --fraction in (0, 1], --epochs 1..%d, --batch >= 1\n",
                MAX_EPOCHS);
        return 2;
    }
    if (threads > 0) eg_set_num_threads((int)threads);
    eg_dataset *data = fashion_mnist_batches(dir, true, limit, batch, false);
    eg_dataset *test = fashion_mnist_batches(dir, false, 0, 500, false);
    if (!data || !test) {
        fprintf(stderr, "bench_sample: %s\n", eg_last_error());
        return 1;
    }
    int64_t examples = limit > 0 && limit < 60000 ? limit : 60000;
    int64_t steps = (examples + batch - 1) / batch;
    run runs[3] = {{"exact", 0, false, 0, 0},
                   {"sampled kernel gradients", fraction, false, 0, 0},
                   {"sampled kernel + input grads", fraction, true, 0, 0}};
    for (int i = 0; i < 3; i++)
        if (!train(&runs[i], data, test, (int)epochs, steps)) {
            fprintf(stderr, "bench_sample: %s: %s\n", runs[i].name, eg_last_error());
            return 1;
        }
    printf("wide MLP 784-512-512-10, batch %ld, %ld epochs, fraction %g, %d thread(s)\n", batch,
           epochs, fraction, eg_get_num_threads());
    printf("%-30s %10s %9s %9s %9s\n", "training", "ms/step", "speed-up", "accuracy", "points");
    for (int i = 0; i < 3; i++)
        printf("%-30s %10.3f %8.2fx %9.4f %+9.2f\n", runs[i].name, runs[i].step_ms,
               runs[0].step_ms / runs[i].step_ms, runs[i].accuracy,
               100 * (runs[i].accuracy - runs[0].accuracy));
    eg_dataset_free(data);
    eg_dataset_free(test);
    return 0;
}
