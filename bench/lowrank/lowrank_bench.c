/* Low-rank factorization of the wide MLP (784-512-512-10) on Fashion-MNIST: train it, replace
 * its Dense layers by rank-r LowRankDense layers (truncated SVD, eg_model_lowrank), evaluate, then
 * fine-tune the factors and evaluate again, beside the full model trained as many more epochs.
 * Prints parameters, test accuracy and the time of one pass over the test split for each stage
 * (issue 24's goal: 4x fewer parameters within 1 point of the full model's accuracy after
 * fine-tuning). bench_lowrank [--rank R] [--epochs E] [--finetune F] [--limit N] [--threads T]
 * [--data DIR] Defaults: rank 64, 5 epochs, 2 fine-tuning epochs, all 60,000 training images. */
#define _POSIX_C_SOURCE 200809L
#include <eagle.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fashion_mnist_data.h"

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int failed(const char *what) {
    fprintf(stderr, "bench_lowrank: %s: %s\n", what, eg_last_error());
    return 1;
}

/* Compiles the model with a fresh Adam at learning_rate (returned: the caller frees it after the
 * model). */
static eg_optimizer *compile(eg_model *model, double learning_rate) {
    eg_adam_options adam = eg_adam_options_default();
    adam.learning_rate = eg_schedule_constant(learning_rate);
    eg_optimizer *optimizer = eg_adam_new(&adam);
    eg_compile_options options = {.loss = EG_FIT_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY,
                                  .from_logits = true,
                                  .accuracy = true,
                                  .mode = EG_EXECUTION_GRAPH};
    if (optimizer && eg_model_compile(model, optimizer, &options) == EG_OK) return optimizer;
    eg_optimizer_free(optimizer);
    return NULL;
}

/* Fits the compiled model for epochs; *seconds gets the time. */
static bool train(eg_model *model, eg_dataset *data, int epochs, double *seconds) {
    eg_fit_options options = eg_fit_options_default();
    options.epochs = epochs;
    options.verbose = 0;
    double start = now();
    eg_history *history = eg_model_fit(model, data, &options);
    *seconds = now() - start;
    eg_history_free(history);
    return history != NULL;
}

/* Test accuracy, and the fastest of three passes over the test split. */
static bool evaluate(eg_model *model, eg_dataset *test, double *accuracy, double *seconds) {
    *seconds = 1e30;
    for (int run = 0; run < 3; run++) {
        eg_logs results;
        double start = now();
        if (eg_model_evaluate(model, test, NULL, &results) != EG_OK) return false;
        double took = now() - start;
        if (took < *seconds) *seconds = took;
        eg_logs_get(&results, "accuracy", accuracy);
    }
    return true;
}

int main(int argc, char **argv) {
    long rank = 64, epochs = 5, finetune = 2, limit = 0, threads = 0;
    const char *dir = NULL;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--rank"))
            rank = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "--epochs"))
            epochs = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "--finetune"))
            finetune = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "--limit"))
            limit = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "--threads"))
            threads = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "--data"))
            dir = argv[i + 1];
        else {
            fprintf(stderr, "bench_lowrank: unknown option '%s'\n", argv[i]);
            return 2;
        }
    }
    if (rank < 1 || epochs < 1 || finetune < 0) {
        fprintf(stderr, "bench_lowrank: --rank and --epochs must be >= 1, --finetune >= 0\n");
        return 2;
    }
    if (threads > 0) eg_set_num_threads((int)threads);
    eg_dataset *train_data = fashion_mnist_batches(dir, true, limit, 64, false);
    eg_dataset *test = fashion_mnist_batches(dir, false, 0, 500, false);
    if (!train_data || !test) return failed("data");
    eg_manual_seed(42);
    eg_model *model = eg_sequential_new("wide_mlp");
    eg_sequential_add(model, eg_flatten_new(NULL));
    eg_sequential_add(model, eg_dense_new(512, EG_ACTIVATION_RELU));
    eg_sequential_add(model, eg_dense_new(512, EG_ACTIVATION_RELU));
    eg_sequential_add(model, eg_dense_new(10, EG_ACTIVATION_NONE));
    if (eg_model_build(model, 3, (int64_t[]){-1, 28, 28}) != EG_OK) return failed("build");

    double train_seconds, finetune_seconds = 0, full_accuracy, full_seconds;
    eg_optimizer *first = compile(model, 1e-3);
    if (!first || !train(model, train_data, (int)epochs, &train_seconds)) return failed("training");
    if (!evaluate(model, test, &full_accuracy, &full_seconds)) return failed("evaluation");
    int64_t full_params = eg_model_count_params(model);
    /* the baseline the fine-tuned factors are held to: the full model trained as many more
     * epochs at the same step; then back to the weights the factorization starts from */
    char saved[] = "/tmp/bench_lowrank_XXXXXX";
    int fd = mkstemp(saved);
    if (fd < 0) return failed("a temporary file");
    close(fd);
    if (eg_model_save_weights(model, saved) != EG_OK) return failed("saving");
    double longer_accuracy = full_accuracy, longer_seconds = full_seconds, ignored;
    eg_optimizer *baseline = compile(model, 3e-4);
    if (!baseline) return failed("compile");
    if (finetune > 0 && (!train(model, train_data, (int)finetune, &ignored) ||
                         !evaluate(model, test, &longer_accuracy, &longer_seconds)))
        return failed("the baseline's fine-tuning");
    eg_status loaded = eg_model_load_weights(model, saved);
    remove(saved);
    if (loaded != EG_OK) return failed("loading");

    int replaced = 0;
    if (eg_model_lowrank(model, rank, 0, &replaced) != EG_OK) return failed("factorization");
    int64_t params = eg_model_count_params(model);
    /* the factorization dropped the compiled configuration (its variables are gone); a smaller
     * step for fine-tuning: the factors start near the trained weights */
    eg_optimizer *second = compile(model, 3e-4);
    if (!second) return failed("compile");
    double factored_accuracy, factored_seconds;
    if (!evaluate(model, test, &factored_accuracy, &factored_seconds)) return failed("evaluation");
    double tuned_accuracy = factored_accuracy, tuned_seconds = factored_seconds;
    if (finetune > 0) {
        if (!train(model, train_data, (int)finetune, &finetune_seconds))
            return failed("fine-tuning");
        if (!evaluate(model, test, &tuned_accuracy, &tuned_seconds)) return failed("evaluation");
    }
    printf("wide MLP 784-512-512-10, %ld epochs (%.1f s), rank %ld in %d layers, %ld "
           "fine-tuning epochs (%.1f s), %d thread(s)\n",
           epochs, train_seconds, rank, replaced, finetune, finetune_seconds, eg_get_num_threads());
    printf("%-28s %10s %9s %12s\n", "model", "params", "accuracy", "test pass ms");
    printf("%-28s %10lld %9.4f %12.1f\n", "full", (long long)full_params, full_accuracy,
           1e3 * full_seconds);
    printf("%-28s %10lld %9.4f %12.1f\n", "full, trained as long", (long long)full_params,
           longer_accuracy, 1e3 * longer_seconds);
    printf("%-28s %10lld %9.4f %12.1f\n", "low-rank (SVD)", (long long)params, factored_accuracy,
           1e3 * factored_seconds);
    printf("%-28s %10lld %9.4f %12.1f\n", "low-rank, fine-tuned", (long long)params, tuned_accuracy,
           1e3 * tuned_seconds);
    printf("RESULT params_ratio=%.2f accuracy_drop_points=%.2f inference_speedup=%.2f\n",
           (double)full_params / (double)params, 100 * (longer_accuracy - tuned_accuracy),
           longer_seconds / tuned_seconds);
    eg_model_free(model);
    eg_optimizer_free(first);
    eg_optimizer_free(second);
    eg_optimizer_free(baseline);
    eg_dataset_free(train_data);
    eg_dataset_free(test);
    return 0;
}
