/* Column-row sampling in training (eg_model_set_gradient_sampling): the wide MLP 784-512-512-10
 * on Fashion-MNIST trained exactly, with the two hidden layers' kernel gradients sampled (a
 * fraction of the batch's rows; the 10-unit classifier stays exact), and with their input
 * gradients sampled too (a fraction of the units), from the same initial weights, the runs
 * taking turns epoch by epoch. Prints each run's training time per step (the median epoch's) and
 * its test accuracy, and the ratios to the exact run (issue 24's goal for sample:0.5: >= 1.3x
 * faster steps, <= 0.5 points of accuracy lost). bench_sample [--fraction F] [--epochs E] [--batch
 * B] [--limit N] [--threads T] [--data DIR] Defaults: fraction 0.5, 3 epochs, batch 128, all 60,000
 * training images. */
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
    eg_model *model;
    eg_optimizer *optimizer;
    eg_dataset *data; /* its own, so that every run sees the same order of batches */
    double seconds[MAX_EPOCHS];
    double step_ms, accuracy;
} run;

/* A fresh model (seed 42: the same weights for every run), compiled. */
static bool setup(run *r) {
    eg_manual_seed(42);
    r->model = eg_sequential_new("wide_mlp");
    eg_sequential_add(r->model, eg_flatten_new(NULL));
    eg_sequential_add(r->model, eg_dense_new(512, EG_ACTIVATION_RELU));
    eg_sequential_add(r->model, eg_dense_new(512, EG_ACTIVATION_RELU));
    eg_sequential_add(r->model, eg_dense_new(10, EG_ACTIVATION_NONE));
    eg_adam_options adam = eg_adam_options_default();
    r->optimizer = eg_adam_new(&adam);
    eg_compile_options compile = {.loss = EG_FIT_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY,
                                  .from_logits = true,
                                  .accuracy = true,
                                  .mode = EG_EXECUTION_GRAPH};
    return eg_model_build(r->model, 3, (int64_t[]){-1, 28, 28}) == EG_OK &&
           eg_model_set_gradient_sampling(r->model, r->fraction, r->inputs_too, 64, NULL) ==
               EG_OK &&
           eg_model_compile(r->model, r->optimizer, &compile) == EG_OK;
}

static bool train_epoch(run *r, int epoch) {
    eg_fit_options options = eg_fit_options_default();
    options.epochs = 1;
    options.verbose = 0;
    double start = now();
    eg_history *history = eg_model_fit(r->model, r->data, &options);
    r->seconds[epoch] = now() - start;
    eg_history_free(history);
    return history != NULL;
}

/* The test accuracy and the median epoch's time per step. */
static bool finish(run *r, eg_dataset *test, int epochs, int64_t steps) {
    eg_logs results;
    if (eg_model_evaluate(r->model, test, NULL, &results) != EG_OK) return false;
    eg_logs_get(&results, "accuracy", &r->accuracy);
    qsort(r->seconds, (size_t)epochs, sizeof *r->seconds, compare_doubles);
    r->step_ms = 1e3 * r->seconds[epochs / 2] / (double)steps;
    return true;
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
    eg_dataset *test = fashion_mnist_batches(dir, false, 0, 500, false);
    int64_t examples = limit > 0 && limit < 60000 ? limit : 60000;
    int64_t steps = (examples + batch - 1) / batch;
    run runs[3] = {
        {.name = "exact"},
        {.name = "sampled kernel gradients", .fraction = fraction},
        {.name = "sampled kernel + input grads", .fraction = fraction, .inputs_too = true}};
    for (int i = 0; i < 3; i++) {
        runs[i].data = fashion_mnist_batches(dir, true, limit, batch, false);
        if (!test || !runs[i].data || !setup(&runs[i])) {
            fprintf(stderr, "bench_sample: %s: %s\n", runs[i].name, eg_last_error());
            return 1;
        }
    }
    /* the runs take turns, epoch by epoch: a slower spell of the machine meets all three */
    for (int e = 0; e < epochs; e++)
        for (int i = 0; i < 3; i++)
            if (!train_epoch(&runs[i], e)) {
                fprintf(stderr, "bench_sample: %s: %s\n", runs[i].name, eg_last_error());
                return 1;
            }
    for (int i = 0; i < 3; i++)
        if (!finish(&runs[i], test, (int)epochs, steps)) {
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
    for (int i = 0; i < 3; i++) {
        eg_model_free(runs[i].model);
        eg_optimizer_free(runs[i].optimizer);
        eg_dataset_free(runs[i].data);
    }
    eg_dataset_free(test);
    return 0;
}
