/* Trains tools/eagle's CNN (cnn_build) on Fashion-MNIST with Adam and reports test accuracy after
 * each epoch, printing the same lines as bench/train_mlp/fashion.py's driver (and `eagle train`),
 * so bench/train_cnn/run.sh reads Eagle and PyTorch alike:
 *   bench_train_cnn [--epochs N] [--batch-size N] [--learning-rate X] [--threads N] [--seed N]
 *                   [--limit N] [--steps N] [--profile 1] [--constant-lr 1] [--test 0] [--data DIR]
 * --steps N stops each epoch after N steps (a throughput probe); --test 0 skips the test-set
 * evaluation after each epoch (so that a profiler sees the training steps only); --profile 1
 * prints Eagle's per-op profile of the training steps at the end; the learning rate follows cnn_optimizer_new's
 * cosine decay over the whole run unless --constant-lr 1; the shuffle is `eagle train`'s
 * (cli_shuffle_order). */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cnn.h"
#include "pipeline.h"

static double clock_seconds(clockid_t id) {
    struct timespec t;
    clock_gettime(id, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}
static double seconds(void) {
    return clock_seconds(CLOCK_MONOTONIC);
}

static eg_status train_step(eg_model *model, eg_optimizer *optimizer, const mlp_data *data,
                            const int64_t *indices, int64_t n, double *loss_out, double *hits_out) {
    eg_scope_begin();
    eg_tensor *x, *y;
    eg_status status = cnn_batch(data, indices, n, &x, &y);
    if (status == EG_OK) {
        int n_vars;
        eg_tensor *const *vars = eg_model_trainable_variables(model, &n_vars);
        eg_tensor *grads[64];
        eg_tape *tape = eg_tape_begin(false);
        eg_tensor *logits = eg_model_call(model, x, true);
        eg_tensor *loss =
            eg_loss_sparse_categorical_crossentropy(y, logits, true, EG_REDUCTION_MEAN);
        status = eg_tape_gradient(tape, loss, n_vars, vars, grads, EG_UNCONNECTED_ZERO);
        eg_tape_free(tape);
        if (status == EG_OK) status = eg_optimizer_apply_gradients(optimizer, n_vars, grads, vars);
        eg_metric_mean hits = {0};
        if (status == EG_OK)
            status = eg_metric_mean_update(&hits, eg_metric_sparse_categorical_accuracy(y, logits));
        *loss_out = eg_item(loss);
        *hits_out = hits.total;
    }
    eg_scope_end();
    return status == EG_OK ? eg_last_status() : status;
}

int main(int argc, char **argv) {
    long epochs = CNN_DEFAULT_EPOCHS, batch = CNN_DEFAULT_BATCH_SIZE, threads = 0, limit = 0;
    long max_steps = 0, profile = 0, constant_lr = 0, test_each_epoch = 1;
    unsigned long long seed = 42;
    double lr = CNN_DEFAULT_LEARNING_RATE;
    const char *data_dir = NULL;
    for (int i = 1; i < argc; i += 2) { /* every option takes a value */
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) {
            fprintf(stderr, "usage: see the comment at the top of bench/train_cnn/train_cnn.c\n");
            return 2;
        }
        if (!strcmp(a, "--epochs"))
            epochs = atol(v);
        else if (!strcmp(a, "--batch-size"))
            batch = atol(v);
        else if (!strcmp(a, "--learning-rate"))
            lr = atof(v);
        else if (!strcmp(a, "--threads"))
            threads = atol(v);
        else if (!strcmp(a, "--seed"))
            seed = strtoull(v, NULL, 10);
        else if (!strcmp(a, "--limit"))
            limit = atol(v);
        else if (!strcmp(a, "--steps"))
            max_steps = atol(v);
        else if (!strcmp(a, "--constant-lr"))
            constant_lr = atol(v);
        else if (!strcmp(a, "--test"))
            test_each_epoch = atol(v);
        else if (!strcmp(a, "--profile"))
            profile = atol(v);
        else if (!strcmp(a, "--data"))
            data_dir = v;
        else {
            fprintf(stderr, "bench_train_cnn: unknown option '%s'\n", a);
            return 2;
        }
    }
    if (threads > 0) eg_set_num_threads((int)threads);
    eg_manual_seed(seed);
    mlp_data train = {0}, test = {0};
    if (!mlp_data_load(data_dir, true, limit, &train) || !mlp_data_load(data_dir, false, 0, &test))
        return 1;
    eg_model *model = cnn_build(false);
    int64_t steps_per_epoch = (train.n + batch - 1) / batch;
    if (max_steps > 0 && max_steps < steps_per_epoch) steps_per_epoch = max_steps;
    eg_optimizer *optimizer =
        model ? cnn_optimizer_new(lr, constant_lr ? 0 : epochs * steps_per_epoch) : NULL;
    int64_t *order = malloc((size_t)train.n * sizeof *order);
    int rc = 1;
    if (!model || !optimizer || !order) goto done;
    printf("eagle %s: %lld training examples, %d thread(s), cnn, batch %ld\n", eg_version(),
           (long long)train.n, eg_get_num_threads(), batch);
    eg_model_summary(model, stdout);
    double train_seconds = 0, cpu_seconds = 0;
    int64_t trained = 0;
    for (int epoch = 1; epoch <= epochs; epoch++) {
        cli_shuffle_order(order, train.n, seed, epoch);
        printf("Epoch %d/%ld\n", epoch, epochs);
        fflush(stdout);
        if (profile) eg_profiler_start(EG_PROFILE_OPS);
        double loss_sum = 0, hits = 0, start = seconds();
        double cpu_start = clock_seconds(CLOCK_PROCESS_CPUTIME_ID);
        int64_t seen = 0, steps = 0;
        for (int64_t s = 0; s < train.n && (!max_steps || steps < max_steps); s += batch, steps++) {
            int64_t n = train.n - s < batch ? train.n - s : batch;
            double loss, batch_hits;
            if (train_step(model, optimizer, &train, order + s, n, &loss, &batch_hits) != EG_OK)
                goto done;
            loss_sum += loss * (double)n;
            hits += batch_hits;
            seen += n;
        }
        double took = seconds() - start;
        cpu_seconds += clock_seconds(CLOCK_PROCESS_CPUTIME_ID) - cpu_start;
        if (profile) {
            eg_profiler_stop();
            eg_profiler_report(stdout, 0);
        }
        train_seconds += took;
        trained += seen;
        printf("  %lld samples in %.2f s (%.0f samples/s)  loss %.4f  accuracy %.4f\n",
               (long long)seen, took, (double)seen / took, loss_sum / (double)seen,
               hits / (double)seen);
        double accuracy, test_loss;
        if (!test_each_epoch) continue;
        if (cnn_evaluate(model, &test, &accuracy, &test_loss) != EG_OK) goto done;
        printf("  test accuracy %.4f  test loss %.4f\n", accuracy, test_loss);
        fflush(stdout);
    }
    printf("trained %ld epoch(s) in %.2f s: %.0f samples/s; cpu %.2f s: %.0f samples per "
           "cpu-second\n",
           epochs, train_seconds, (double)trained / train_seconds, cpu_seconds,
           (double)trained / cpu_seconds);
    rc = 0;
done:
    if (rc) fprintf(stderr, "bench_train_cnn: %s\n", eg_last_error());
    free(order);
    eg_optimizer_free(optimizer);
    eg_model_free(model);
    mlp_data_free(&train);
    mlp_data_free(&test);
    eg_shutdown();
    return rc;
}
