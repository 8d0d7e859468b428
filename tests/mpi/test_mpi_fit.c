/* eg_model_fit under the multi-worker strategy, on every rank of an mpirun job: each process
 * trains on its share of every global batch, and after two epochs every rank holds the weights of
 * one process fitting the whole batches alone (≤ 1e-5: the replicas add the batch's gradient in
 * another order), with the same history (the global batches' losses) on every rank. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <math.h>

#include "eagle.h"
#include "test_util.h"

enum { N = 192, FEATURES = 4, CLASSES = 3, BATCH = 32, HIDDEN = 8 };
enum { MAX_WEIGHTS = FEATURES * HIDDEN + HIDDEN + HIDDEN * CLASSES + CLASSES };

static float xs[N * FEATURES];
static int64_t ys[N];
static eg_strategy *strategy;

static void make_data(void) {
    uint64_t state = 77;
    for (int i = 0; i < N; i++) {
        ys[i] = i % CLASSES;
        for (int f = 0; f < FEATURES; f++) {
            state = state * 6364136223846793005ull + 1442695040888963407ull;
            double u = (double)(state >> 40) / (double)(1 << 24) - 0.5;
            xs[i * FEATURES + f] = (float)((f == ys[i] ? 1.5 : 0.0) + u);
        }
    }
}

typedef struct run {
    float weights[MAX_WEIGHTS];
    double losses[2];
} run;

/* Rank 1 alone asks to stop in batch_begin of batch 2 of epoch 0 (a Ctrl-C that reached one
 * process); every rank must stop after that same batch. */
typedef struct stop_probe {
    bool active;
    eg_fit_progress at_end; /* the progress at the last batch_end */
} stop_probe;

static stop_probe probe;

static eg_status ask_stop(eg_fit_state *s, int64_t batch, void *user) {
    (void)user;
    if (probe.active && batch == 2 && eg_strategy_worker(strategy) == 1) eg_fit_state_stop(s);
    return EG_OK;
}

static eg_status note_progress(eg_fit_state *s, int64_t batch, const eg_logs *logs, void *user) {
    (void)batch;
    (void)logs;
    (void)user;
    eg_fit_state_progress(s, &probe.at_end);
    return EG_OK;
}

static eg_status fit_once(eg_strategy *s, eg_execution_mode mode, run *out) {
    eg_manual_seed(5 + (uint64_t)eg_strategy_worker(strategy)); /* ranks start apart: fit syncs */
    if (!s) eg_manual_seed(5);
    eg_model *model = eg_sequential_new("mlp");
    eg_sequential_add(model, eg_dense_new(HIDDEN, EG_ACTIVATION_RELU));
    eg_sequential_add(model, eg_dense_new(CLASSES, EG_ACTIVATION_NONE));
    eg_model_build(model, 2, (int64_t[]){-1, FEATURES});
    eg_adam_options a = eg_adam_options_default();
    a.learning_rate = eg_schedule_constant(0.01);
    eg_optimizer *opt = eg_adam_new(&a);
    eg_compile_options c = {.loss = EG_FIT_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY,
                            .from_logits = true,
                            .accuracy = true,
                            .mode = mode};
    eg_status status = eg_model_compile(model, opt, &c);
    eg_tensor *x = eg_tensor_from_data(xs, EG_DTYPE_F32, 2, (int64_t[]){N, FEATURES});
    eg_tensor *y = eg_tensor_from_data(ys, EG_DTYPE_I64, 1, (int64_t[]){N});
    eg_dataset *ds =
        eg_dataset_batch(eg_dataset_from_tensor_slices(2, (eg_tensor *[]){x, y}), BATCH, false);
    eg_fit_options o = eg_fit_options_default();
    o.epochs = 2;
    o.verbose = 0;
    o.strategy = s;
    eg_callback cb = {.name = "stop probe", .batch_begin = ask_stop, .batch_end = note_progress};
    eg_callback *cbs[1] = {&cb};
    o.n_callbacks = 1;
    o.callbacks = cbs;
    eg_history *h = status == EG_OK ? eg_model_fit(model, ds, &o) : NULL;
    if (!h && status == EG_OK) status = eg_last_status();
    if (h) {
        memcpy(out->losses, eg_history_values(h, "loss", NULL), sizeof out->losses);
        int n;
        eg_tensor *const *vars = eg_model_variables(model, &n);
        int64_t used = 0;
        for (int i = 0; i < n && status == EG_OK; i++) {
            int64_t k = eg_tensor_n_elems(vars[i]);
            status = eg_tensor_copy_to_host(vars[i], out->weights + used, (size_t)k * 4);
            used += k;
        }
    }
    eg_history_free(h);
    eg_dataset_free(ds);
    eg_release(x);
    eg_release(y);
    eg_optimizer_free(opt);
    eg_model_free(model);
    return status;
}

static void check_mode(eg_execution_mode mode) {
    static run alone, together;
    assert_int_equal(fit_once(NULL, mode, &alone), EG_OK);
    eg_status status = fit_once(strategy, mode, &together);
    if (status != EG_OK) print_error("fit: %s\n", eg_last_error());
    assert_int_equal(status, EG_OK);
    double worst = 0;
    for (int i = 0; i < MAX_WEIGHTS; i++)
        worst = fmax(worst, fabs((double)together.weights[i] - alone.weights[i]) /
                                (1 + fabs((double)alone.weights[i])));
    for (int e = 0; e < 2; e++)
        worst = fmax(worst, fabs(together.losses[e] - alone.losses[e]) / alone.losses[e]);
    print_message("mode %d: largest relative difference from one process: %.2e\n", (int)mode,
                  worst);
    assert_true(worst <= 1e-5);
}

static void test_two_ranks_fit_like_one_process(void **state) {
    (void)state;
    check_mode(EG_EXECUTION_EAGER);
    check_mode(EG_EXECUTION_GRAPH);
}

static void test_a_stop_asked_on_one_rank_stops_all_after_the_same_batch(void **state) {
    (void)state;
    static run stopped;
    probe = (stop_probe){.active = true};
    assert_int_equal(fit_once(strategy, EG_EXECUTION_EAGER, &stopped), EG_OK);
    probe.active = false;
    print_message("rank %d stopped in epoch %d after batch %lld\n", eg_strategy_worker(strategy),
                  probe.at_end.epoch, (long long)probe.at_end.step);
    assert_int_equal(probe.at_end.epoch, 0);
    assert_int_equal(probe.at_end.step, 3);
}

int main(void) {
    make_data();
    eg_strategy_options options = {.timeout_seconds = 20};
    strategy = eg_strategy_multi_worker_new(NULL, &options);
    if (!strategy) {
        fprintf(stderr, "test_mpi_fit: %s\n", eg_last_error());
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_two_ranks_fit_like_one_process),
        cmocka_unit_test(test_a_stop_asked_on_one_rank_stops_all_after_the_same_batch)};
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    eg_strategy_free(strategy);
    return failed;
}
