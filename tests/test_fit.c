/* The training loop (eagle/fit.h):
 *   - fit's steps are a hand-written loop's (forward, loss, gradient, Adam): the same weights,
 *     bit for bit, and eager, lazy and graph fits agree;
 *   - it learns (three separable blobs), and its history holds every epoch's logs;
 *   - callbacks see every hook in order; a failing one stops fit with its error;
 *   - early stopping stops and restores the best epoch's weights; the CSV logger writes the
 *     history's numbers; model checkpoints, reduce-on-plateau, a per-epoch schedule and
 *     TensorBoard do what they are asked;
 *   - under a strategy of one replica fit takes the same steps; several local replicas need
 *     build_replica and then train as one replica on the whole batch, to rounding
 *     (tests/mpi/test_mpi_fit.c trains over two processes);
 *   - a fit stopped mid-epoch continues from its training state and progress exactly;
 *   - evaluate and predict equal the model applied directly; bad input gets clear errors. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "eagle.h"
#include "test_util.h"

enum { N = 240, FEATURES = 4, CLASSES = 3, BATCH = 32, HIDDEN = 16 };

static float xs[N * FEATURES];
static int64_t ys[N];

/* Three blobs around different centres: separable, so a fit reaches high accuracy. */
static void make_data(void) {
    uint64_t state = 2024;
    for (int i = 0; i < N; i++) {
        int label = i % CLASSES;
        ys[i] = label;
        for (int f = 0; f < FEATURES; f++) {
            state = state * 6364136223846793005ull + 1442695040888963407ull;
            double u = (double)(state >> 40) / (double)(1 << 24) - 0.5;
            xs[i * FEATURES + f] = (float)((f == label ? 2.0 : 0.0) + 0.6 * u);
        }
    }
}

static eg_model *make_model(void) {
    eg_manual_seed(11);
    eg_model *model = eg_sequential_new("blobs");
    assert_non_null(model);
    assert_int_equal(eg_sequential_add(model, eg_dense_new(HIDDEN, EG_ACTIVATION_RELU)), EG_OK);
    assert_int_equal(eg_sequential_add(model, eg_dense_new(CLASSES, EG_ACTIVATION_NONE)), EG_OK);
    assert_int_equal(eg_model_build(model, 2, (int64_t[]){-1, FEATURES}), EG_OK);
    return model;
}

/* (x, y) batches of the first `rows` examples, in order (no shuffle: runs compare exactly). */
static eg_dataset *batches_of(int64_t first, int64_t rows) {
    eg_tensor *x =
        eg_tensor_from_data(xs + first * FEATURES, EG_DTYPE_F32, 2, (int64_t[]){rows, FEATURES});
    eg_tensor *y = eg_tensor_from_data(ys + first, EG_DTYPE_I64, 1, (int64_t[]){rows});
    eg_dataset *ds = eg_dataset_from_tensor_slices(2, (eg_tensor *[]){x, y});
    eg_release(x);
    eg_release(y);
    return eg_dataset_batch(ds, BATCH, false);
}

static eg_optimizer *adam(void) {
    eg_adam_options o = eg_adam_options_default();
    o.learning_rate = eg_schedule_constant(0.01);
    return eg_adam_new(&o);
}

static const eg_compile_options classify = {
    .loss = EG_FIT_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY, .from_logits = true, .accuracy = true};

/* Every variable's values, concatenated, into out (capacity floats); returns the count. */
static int64_t weights_of(eg_model *model, float *out, int64_t capacity) {
    int n;
    eg_tensor *const *vars = eg_model_variables(model, &n);
    int64_t used = 0;
    for (int i = 0; i < n; i++) {
        int64_t k = eg_tensor_n_elems(vars[i]);
        assert_true(used + k <= capacity);
        assert_int_equal(eg_tensor_copy_to_host(vars[i], out + used, (size_t)k * 4), EG_OK);
        used += k;
    }
    return used;
}

enum { MAX_WEIGHTS = FEATURES * HIDDEN + HIDDEN + HIDDEN * CLASSES + CLASSES };

static eg_fit_options quiet(int epochs) {
    eg_fit_options o = eg_fit_options_default();
    o.epochs = epochs;
    o.verbose = 0;
    return o;
}

/* Fits `epochs` epochs of the first 192 examples in `mode`; weights into out. */
static void fit_in_mode(eg_execution_mode mode, int epochs, float *out) {
    eg_model *model = make_model();
    eg_optimizer *opt = adam();
    eg_compile_options c = classify;
    c.mode = mode;
    assert_int_equal(eg_model_compile(model, opt, &c), EG_OK);
    eg_dataset *train = batches_of(0, 192);
    eg_fit_options o = quiet(epochs);
    eg_history *h = eg_model_fit(model, train, &o);
    assert_non_null(h);
    assert_int_equal(eg_history_n_epochs(h), epochs);
    eg_function_stats fs;
    if (mode == EG_EXECUTION_GRAPH) { /* one batch shape: one trace */
        assert_int_equal(eg_model_train_step_stats(model, &fs), EG_OK);
        assert_int_equal(fs.n_traces, 1);
        assert_true(fs.n_nodes > 0);
    } else {
        assert_int_equal(eg_model_train_step_stats(model, &fs), EG_ERR_STATE);
        eg_clear_error();
    }
    weights_of(model, out, MAX_WEIGHTS);
    eg_history_free(h);
    eg_dataset_free(train);
    eg_optimizer_free(opt);
    eg_model_free(model);
}

static void test_fit_is_the_hand_written_loop(void **state) {
    (void)state;
    static float by_fit[MAX_WEIGHTS], by_hand[MAX_WEIGHTS];
    fit_in_mode(EG_EXECUTION_EAGER, 2, by_fit);

    eg_model *model = make_model();
    eg_optimizer *opt = adam();
    int n;
    eg_tensor *const *vars = eg_model_trainable_variables(model, &n);
    for (int epoch = 0; epoch < 2; epoch++)
        for (int64_t first = 0; first < 192; first += BATCH) {
            eg_scope_begin();
            eg_tensor *x = eg_tensor_from_data(xs + first * FEATURES, EG_DTYPE_F32, 2,
                                               (int64_t[]){BATCH, FEATURES});
            eg_tensor *y = eg_tensor_from_data(ys + first, EG_DTYPE_I64, 1, (int64_t[]){BATCH});
            eg_tape *tape = eg_tape_begin(false);
            eg_tensor *loss = eg_loss_sparse_categorical_crossentropy(
                y, eg_model_call(model, x, true), true, EG_REDUCTION_MEAN);
            eg_tensor *grads[4];
            assert_int_equal(eg_tape_gradient(tape, loss, n, vars, grads, EG_UNCONNECTED_ZERO),
                             EG_OK);
            eg_tape_free(tape);
            assert_int_equal(eg_optimizer_apply_gradients(opt, n, grads, vars), EG_OK);
            eg_scope_end();
        }
    int64_t k = weights_of(model, by_hand, MAX_WEIGHTS);
    assert_int_equal(k, MAX_WEIGHTS);
    assert_memory_equal(by_fit, by_hand, sizeof by_fit);
    eg_optimizer_free(opt);
    eg_model_free(model);
}

static void test_eager_lazy_and_graph_fits_agree(void **state) {
    (void)state;
    static float eager[MAX_WEIGHTS], lazy[MAX_WEIGHTS], graph[MAX_WEIGHTS];
    fit_in_mode(EG_EXECUTION_EAGER, 2, eager);
    fit_in_mode(EG_EXECUTION_LAZY, 2, lazy);
    fit_in_mode(EG_EXECUTION_GRAPH, 2, graph);
    double worst = 0;
    for (int i = 0; i < MAX_WEIGHTS; i++) {
        double scale = 1 + fabs(eager[i]);
        worst = fmax(worst, fabs(lazy[i] - eager[i]) / scale);
        worst = fmax(worst, fabs(graph[i] - eager[i]) / scale);
    }
    print_message("largest difference from eager: %.2e\n", worst);
    assert_true(worst <= 1e-6);
}

/* build_replica of the local replicas but the first: the same model and optimizer. */
static eg_status build_blobs_replica(int local_index, eg_model **model, eg_optimizer **optimizer,
                                     void *user) {
    (void)local_index;
    (*(int *)user)++;
    *model = make_model();
    *optimizer = adam();
    return EG_OK;
}

/* Fits 2 epochs under `strategy` (NULL: none); weights into out. built: NULL, or counts the
 * replicas build_replica made. */
static eg_status fit_under_building(eg_strategy *strategy, int *built, float *out) {
    eg_model *model = make_model();
    eg_optimizer *opt = adam();
    assert_int_equal(eg_model_compile(model, opt, &classify), EG_OK);
    eg_dataset *train = batches_of(0, 192), *test = batches_of(192, 48);
    eg_fit_options o = quiet(2);
    o.strategy = strategy;
    o.validation_data = test;
    if (built) {
        o.build_replica = build_blobs_replica;
        o.build_replica_user = built;
    }
    eg_history *h = eg_model_fit(model, train, &o);
    eg_status status = h ? EG_OK : eg_last_status();
    if (h) weights_of(model, out, MAX_WEIGHTS);
    eg_history_free(h);
    eg_dataset_free(train);
    eg_dataset_free(test);
    eg_optimizer_free(opt);
    eg_model_free(model);
    return status;
}

static eg_status fit_under(eg_strategy *strategy, float *out) {
    return fit_under_building(strategy, NULL, out);
}

static void test_fit_under_a_strategy_of_one_replica(void **state) {
    (void)state;
    static float alone[MAX_WEIGHTS], by_default[MAX_WEIGHTS], mirrored[MAX_WEIGHTS];
    assert_int_equal(fit_under(NULL, alone), EG_OK);
    eg_strategy *s = eg_strategy_default_new();
    assert_int_equal(fit_under(s, by_default), EG_OK);
    eg_strategy_free(s);
    const eg_device *one[1] = {eg_device_at(0)};
    s = eg_strategy_mirrored_new(1, one, NULL);
    assert_int_equal(fit_under(s, mirrored), EG_OK);
    eg_strategy_free(s);
    /* a replica alone sums nothing: the same steps, the same bits */
    assert_memory_equal(alone, by_default, sizeof alone);
    assert_memory_equal(alone, mirrored, sizeof alone);
    /* several local replicas need a model each: refused without build_replica */
    s = eg_strategy_mirrored_new(2, NULL, NULL);
    assert_non_null(s);
    assert_int_equal(fit_under(s, mirrored), EG_ERR_UNSUPPORTED);
    assert_non_null(strstr(eg_last_error(), "has 2 replicas in this process"));
    eg_clear_error();
    eg_strategy_free(s);
}

/* Mirrored over two logical CPU devices with build_replica: each replica trains on half of every
 * batch and the summed gradients give the whole batch's steps (to rounding: the halves' sums are
 * added in another order than one pass over the batch). */
static void test_fit_mirrored_over_two_devices(void **state) {
    (void)state;
    static float alone[MAX_WEIGHTS], mirrored[MAX_WEIGHTS];
    assert_int_equal(fit_under(NULL, alone), EG_OK);
    eg_strategy *s = eg_strategy_mirrored_new(2, NULL, NULL);
    assert_non_null(s);
    int built = 0;
    assert_int_equal(fit_under_building(s, &built, mirrored), EG_OK);
    assert_int_equal(built, 1); /* replica 0 is the caller's model */
    eg_strategy_free(s);
    double worst = 0;
    for (int i = 0; i < MAX_WEIGHTS; i++)
        worst = fmax(worst, fabs(mirrored[i] - alone[i]) / fmax(1.0, fabs(alone[i])));
    print_message("mirrored over 2 devices vs alone: largest relative difference %.2e\n", worst);
    assert_true(worst <= 1e-5);
    assert_true(worst > 0 || memcmp(alone, mirrored, sizeof alone) == 0);
}

/* A fit stopped in the middle of an epoch and continued from its training state (weights,
 * optimizer, progress) logs and trains exactly what the uninterrupted one did. */
typedef struct stopper {
    int64_t after; /* stop after this batch of epoch 1 */
    eg_fit_progress progress;
} stopper;

static eg_status stop_mid_epoch(eg_fit_state *s, int64_t batch, const eg_logs *logs, void *user) {
    (void)logs;
    stopper *st = user;
    eg_fit_state_progress(s, &st->progress);
    if (st->progress.epoch == 1 && batch == st->after) eg_fit_state_stop(s);
    return EG_OK;
}

static void test_fit_resumes_in_the_middle_of_an_epoch(void **state) {
    (void)state;
    static float straight[MAX_WEIGHTS], resumed[MAX_WEIGHTS];
    char path[] = "/tmp/eagle-fit-resume-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    eg_model *model = make_model();
    eg_optimizer *opt = adam();
    assert_int_equal(eg_model_compile(model, opt, &classify), EG_OK);
    eg_dataset *train = batches_of(0, 192);
    eg_fit_options o = quiet(3);
    eg_history *h = eg_model_fit(model, train, &o);
    assert_non_null(h);
    int n;
    double last_loss = eg_history_values(h, "loss", &n)[2];
    weights_of(model, straight, MAX_WEIGHTS);
    eg_history_free(h);
    eg_optimizer_free(opt);
    eg_model_free(model);

    /* the first run stops after batch 2 of epoch 1 and saves where it is */
    model = make_model();
    opt = adam();
    assert_int_equal(eg_model_compile(model, opt, &classify), EG_OK);
    stopper st = {.after = 2};
    eg_callback cb = {.name = "stopper", .user = &st, .batch_end = stop_mid_epoch};
    eg_callback *cbs[1] = {&cb};
    o.n_callbacks = 1;
    o.callbacks = cbs;
    h = eg_model_fit(model, train, &o);
    assert_non_null(h);
    /* as Keras, a stopped epoch still ends: its logs are of the batches it trained */
    assert_int_equal(eg_history_n_epochs(h), 2);
    eg_history_free(h);
    assert_int_equal(st.progress.epoch, 1);
    assert_int_equal(st.progress.step, 3);
    eg_training_position at = {st.progress.epoch, st.progress.step};
    assert_int_equal(eg_training_save(path, model, opt, &at, 0, NULL, NULL), EG_OK);
    eg_optimizer_free(opt);
    eg_model_free(model);

    /* the second continues: epoch 1 from its fourth batch */
    model = make_model();
    opt = adam();
    assert_int_equal(eg_model_compile(model, opt, &classify), EG_OK);
    assert_int_equal(eg_training_load(path, model, opt, &at), EG_OK);
    eg_dataset *rest = eg_dataset_skip(batches_of(0, 192), at.step); /* takes over its input */
    assert_non_null(rest);
    eg_fit_options r = quiet(2);
    r.initial_epoch = 1;
    r.initial_step = at.step;
    r.initial_progress = st.progress;
    /* the epochs after the first start from the whole dataset: a callback cannot swap it, so the
     * resumed epoch runs alone and the last one after it */
    r.epochs = 1;
    h = eg_model_fit(model, rest, &r);
    assert_non_null(h);
    eg_history_free(h);
    r = quiet(1);
    r.initial_epoch = 2;
    h = eg_model_fit(model, train, &r);
    assert_non_null(h);
    assert_true(eg_history_values(h, "loss", &n)[0] == last_loss);
    weights_of(model, resumed, MAX_WEIGHTS);
    assert_memory_equal(straight, resumed, sizeof straight);
    eg_history_free(h);
    eg_dataset_free(rest);
    eg_dataset_free(train);
    eg_optimizer_free(opt);
    eg_model_free(model);
    unlink(path);
}

/* Under loss scaling the history tells the scale and the skipped steps (none here). */
static void test_loss_scaling_is_in_the_history(void **state) {
    (void)state;
    static float plain[MAX_WEIGHTS], scaled[MAX_WEIGHTS];
    fit_in_mode(EG_EXECUTION_EAGER, 2, plain);
    eg_model *model = make_model();
    eg_optimizer *opt = adam();
    eg_loss_scale_options ls = eg_loss_scale_options_default();
    assert_int_equal(eg_optimizer_enable_loss_scaling(opt, &ls), EG_OK);
    assert_int_equal(eg_model_compile(model, opt, &classify), EG_OK);
    eg_dataset *train = batches_of(0, 192);
    eg_fit_options o = quiet(2);
    eg_history *h = eg_model_fit(model, train, &o);
    assert_non_null(h);
    int n = 0;
    const double *scale = eg_history_values(h, "loss_scale", &n);
    const double *skipped = eg_history_values(h, "skipped_steps", NULL);
    assert_int_equal(n, 2);
    assert_non_null(scale);
    assert_non_null(skipped);
    assert_true(scale[1] == 32768 && skipped[1] == 0);
    /* a power-of-2 scale and its unscaling change no bit of these f32 gradients */
    weights_of(model, scaled, MAX_WEIGHTS);
    assert_memory_equal(plain, scaled, sizeof plain);
    eg_history_free(h);
    eg_dataset_free(train);
    eg_optimizer_free(opt);
    eg_model_free(model);
}

static void test_fit_learns_and_keeps_a_history(void **state) {
    (void)state;
    eg_model *model = make_model();
    eg_optimizer *opt = adam();
    assert_int_equal(eg_model_compile(model, opt, &classify), EG_OK);
    eg_dataset *train = batches_of(0, 192), *test = batches_of(192, 48);
    char path[] = "/tmp/eagle_fit_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    FILE *out = fopen(path, "w+"); /* not a terminal: one line per epoch */
    assert_non_null(out);
    eg_fit_options o = quiet(8);
    o.verbose = 1;
    o.out = out;
    o.validation_data = test;
    eg_history *h = eg_model_fit(model, train, &o);
    assert_non_null(h);
    int n = 0;
    const double *loss = eg_history_values(h, "loss", &n);
    const double *val_accuracy = eg_history_values(h, "val_accuracy", NULL);
    assert_int_equal(n, 8);
    assert_non_null(loss);
    assert_non_null(val_accuracy);
    assert_non_null(eg_history_values(h, "val_loss", NULL));
    assert_non_null(eg_history_values(h, "accuracy", NULL));
    const double *rate = eg_history_values(h, "learning_rate", NULL);
    assert_non_null(rate);
    assert_true(fabs(rate[7] - 0.01) < 1e-9);
    assert_null(eg_history_values(h, "loss_scale", NULL)); /* no loss scaling */
    assert_true(loss[7] < 0.5 * loss[0]);
    assert_true(val_accuracy[7] >= 0.95);
    assert_string_equal(eg_history_metric_name(h, 0), "loss");
    /* the printed lines */
    rewind(out);
    char line[512];
    int epochs = 0, lines = 0;
    while (fgets(line, sizeof line, out)) {
        epochs += !strncmp(line, "Epoch ", 6);
        lines += strstr(line, " - val_accuracy: ") != NULL;
    }
    fclose(out);
    unlink(path);
    assert_int_equal(epochs, 8);
    assert_int_equal(lines, 8);
    /* evaluate gives the last epoch's validation numbers */
    eg_logs results;
    assert_int_equal(eg_model_evaluate(model, test, NULL, &results), EG_OK);
    double value;
    assert_true(eg_logs_get(&results, "loss", &value));
    assert_true(value == eg_history_values(h, "val_loss", NULL)[7]);
    assert_true(eg_logs_get(&results, "accuracy", &value));
    assert_true(value == val_accuracy[7]);
    eg_history_free(h);
    eg_dataset_free(train);
    eg_dataset_free(test);
    eg_optimizer_free(opt);
    eg_model_free(model);
}

/* ---- callbacks ---- */

typedef struct counts {
    int train_begin, train_end, epoch_begin, epoch_end, batch_begin, batch_end;
    int64_t last_batch;
    int fail_at_epoch; /* -1: never */
    char order[64];
} counts;

static void mark(counts *c, char what) {
    size_t n = strlen(c->order);
    if (n + 1 < sizeof c->order) c->order[n] = what, c->order[n + 1] = '\0';
}

static eg_status on_train_begin(eg_fit_state *s, void *user) {
    assert_non_null(eg_fit_state_model(s));
    ((counts *)user)->train_begin++;
    mark(user, 'T');
    return EG_OK;
}
static eg_status on_train_end(eg_fit_state *s, const eg_logs *logs, void *user) {
    (void)s, (void)logs;
    ((counts *)user)->train_end++;
    mark(user, 't');
    return EG_OK;
}
static eg_status on_epoch_begin(eg_fit_state *s, int epoch, void *user) {
    (void)s, (void)epoch;
    ((counts *)user)->epoch_begin++;
    mark(user, 'E');
    return EG_OK;
}
static eg_status on_epoch_end(eg_fit_state *s, int epoch, const eg_logs *logs, void *user) {
    counts *c = user;
    assert_true(eg_logs_get(logs, "loss", NULL));
    assert_int_equal(eg_history_n_epochs(eg_fit_state_history(s)), epoch + 1);
    c->epoch_end++;
    mark(user, 'e');
    return epoch == c->fail_at_epoch ? EG_ERR_INVALID_ARGUMENT : EG_OK;
}
static eg_status on_batch_begin(eg_fit_state *s, int64_t batch, void *user) {
    (void)s, (void)batch;
    ((counts *)user)->batch_begin++;
    return EG_OK;
}
static eg_status on_batch_end(eg_fit_state *s, int64_t batch, const eg_logs *logs, void *user) {
    (void)s;
    assert_true(eg_logs_get(logs, "accuracy", NULL));
    ((counts *)user)->batch_end++;
    ((counts *)user)->last_batch = batch;
    return EG_OK;
}

static void test_callbacks_see_every_hook(void **state) {
    (void)state;
    eg_model *model = make_model();
    eg_optimizer *opt = adam();
    assert_int_equal(eg_model_compile(model, opt, &classify), EG_OK);
    eg_dataset *train = batches_of(0, 192); /* 6 batches */
    counts c = {.fail_at_epoch = -1};
    eg_callback cb = {"counter",
                      &c,
                      on_train_begin,
                      on_train_end,
                      on_epoch_begin,
                      on_epoch_end,
                      on_batch_begin,
                      on_batch_end,
                      NULL};
    eg_callback *list[1] = {&cb};
    eg_fit_options o = quiet(3);
    o.n_callbacks = 1;
    o.callbacks = list;
    eg_history *h = eg_model_fit(model, train, &o);
    assert_non_null(h);
    eg_history_free(h);
    assert_int_equal(c.train_begin, 1);
    assert_int_equal(c.train_end, 1);
    assert_int_equal(c.epoch_begin, 3);
    assert_int_equal(c.epoch_end, 3);
    assert_int_equal(c.batch_begin, 18);
    assert_int_equal(c.batch_end, 18);
    assert_int_equal(c.last_batch, 5);
    assert_string_equal(c.order, "TEeEeEet");
    /* steps_per_epoch cuts the epochs short */
    c = (counts){.fail_at_epoch = -1};
    o.steps_per_epoch = 2;
    h = eg_model_fit(model, train, &o);
    assert_non_null(h);
    eg_history_free(h);
    assert_int_equal(c.batch_end, 6);
    /* a failing callback stops fit with an error naming it */
    c = (counts){.fail_at_epoch = 1};
    o.steps_per_epoch = 0;
    assert_null(eg_model_fit(model, train, &o));
    assert_int_equal(eg_last_status(), EG_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(eg_last_error(), "callback 0 (counter) failed in epoch_end"));
    eg_clear_error();
    assert_int_equal(c.epoch_end, 2);
    eg_dataset_free(train);
    eg_optimizer_free(opt);
    eg_model_free(model);
}

/* Records the weights after epoch 0 (the best one, for the early-stopping test). */
typedef struct snapshot {
    int epoch;
    float weights[MAX_WEIGHTS];
} snapshot;

static eg_status take_snapshot(eg_fit_state *s, int epoch, const eg_logs *logs, void *user) {
    (void)logs;
    snapshot *snap = user;
    if (epoch == snap->epoch) weights_of(eg_fit_state_model(s), snap->weights, MAX_WEIGHTS);
    return EG_OK;
}

static void test_early_stopping_restores_the_best_epoch(void **state) {
    (void)state;
    eg_model *model = make_model();
    eg_optimizer *opt = adam();
    assert_int_equal(eg_model_compile(model, opt, &classify), EG_OK);
    eg_dataset *train = batches_of(0, 192);
    /* an improvement must beat 1e9: only the first epoch improves (on infinity) */
    eg_callback *stop = eg_callback_early_stopping_new(&(eg_early_stopping_options){
        .monitor = "loss", .min_delta = 1e9, .patience = 2, .restore_best_weights = true});
    assert_non_null(stop);
    static snapshot snap = {.epoch = 0};
    eg_callback recorder = {.name = "snapshot", .user = &snap, .epoch_end = take_snapshot};
    eg_callback *list[2] = {&recorder, stop};
    eg_fit_options o = quiet(10);
    o.n_callbacks = 2;
    o.callbacks = list;
    eg_history *h = eg_model_fit(model, train, &o);
    assert_non_null(h);
    assert_int_equal(eg_history_n_epochs(h), 3); /* epoch 0 best, 1 waits, 2 stops (Keras) */
    assert_int_equal(eg_callback_early_stopping_stopped_epoch(stop), 2);
    static float now[MAX_WEIGHTS];
    weights_of(model, now, MAX_WEIGHTS);
    assert_memory_equal(now, snap.weights, sizeof now);
    eg_history_free(h);
    /* a monitor the logs lack is named, with what they hold */
    eg_callback *missing =
        eg_callback_early_stopping_new(&(eg_early_stopping_options){.monitor = "val_loss"});
    eg_callback *only[1] = {missing};
    o.callbacks = only;
    o.n_callbacks = 1;
    assert_null(eg_model_fit(model, train, &o));
    assert_non_null(strstr(eg_last_error(), "no 'val_loss' to monitor (they hold loss, accuracy, "
                                            "learning_rate)"));
    eg_clear_error();
    eg_callback_free(missing);
    eg_callback_free(stop);
    eg_dataset_free(train);
    eg_optimizer_free(opt);
    eg_model_free(model);
}

static void test_csv_logger_writes_the_history(void **state) {
    (void)state;
    eg_model *model = make_model();
    eg_optimizer *opt = adam();
    assert_int_equal(eg_model_compile(model, opt, &classify), EG_OK);
    eg_dataset *train = batches_of(0, 192), *test = batches_of(192, 48);
    char path[] = "/tmp/eagle_csv_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    eg_callback *csv = eg_callback_csv_logger_new(path, false);
    eg_callback *list[1] = {csv};
    eg_fit_options o = quiet(3);
    o.validation_data = test;
    o.n_callbacks = 1;
    o.callbacks = list;
    eg_history *h = eg_model_fit(model, train, &o);
    assert_non_null(h);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    char line[512];
    assert_non_null(fgets(line, sizeof line, f));
    assert_string_equal(line, "epoch,loss,accuracy,val_loss,val_accuracy,learning_rate\n");
    for (int epoch = 0; epoch < 3; epoch++) {
        assert_non_null(fgets(line, sizeof line, f));
        int e;
        double v[5];
        assert_int_equal(
            sscanf(line, "%d,%lf,%lf,%lf,%lf,%lf", &e, &v[0], &v[1], &v[2], &v[3], &v[4]), 6);
        assert_int_equal(e, epoch);
        const char *names[5] = {"loss", "accuracy", "val_loss", "val_accuracy", "learning_rate"};
        for (int k = 0; k < 5; k++)
            assert_true(v[k] == eg_history_values(h, names[k], NULL)[epoch]);
    }
    assert_null(fgets(line, sizeof line, f));
    fclose(f);
    unlink(path);
    eg_history_free(h);
    eg_callback_free(csv);
    /* an unwritable path fails at train begin, named */
    eg_callback *bad = eg_callback_csv_logger_new("/nonexistent-dir/log.csv", false);
    list[0] = bad;
    assert_null(eg_model_fit(model, train, &o));
    assert_int_equal(eg_last_status(), EG_ERR_IO);
    assert_non_null(strstr(eg_last_error(), "/nonexistent-dir/log.csv"));
    eg_clear_error();
    eg_callback_free(bad);
    eg_dataset_free(train);
    eg_dataset_free(test);
    eg_optimizer_free(opt);
    eg_model_free(model);
}

/* Fits `epochs` quiet epochs with one callback; returns the history. */
static eg_history *fit_with(eg_model *model, eg_dataset *train, int epochs, eg_callback *cb) {
    eg_callback *list[1] = {cb};
    eg_fit_options o = quiet(epochs);
    o.n_callbacks = 1;
    o.callbacks = list;
    return eg_model_fit(model, train, &o);
}

static void test_model_checkpoint_saves_what_it_is_asked(void **state) {
    (void)state;
    eg_model *model = make_model();
    eg_optimizer *opt = adam();
    assert_int_equal(eg_model_compile(model, opt, &classify), EG_OK);
    eg_dataset *train = batches_of(0, 192);
    char dir[] = "/tmp/eagle_ckpt_XXXXXX";
    assert_non_null(mkdtemp(dir));
    char pattern[128], path[160];
    snprintf(pattern, sizeof pattern, "%s/weights_{epoch}.safetensors", dir);
    /* every epoch, weights only: files 1..3; the last one holds the model's weights */
    eg_callback *every = eg_callback_model_checkpoint_new(
        &(eg_model_checkpoint_options){.path = pattern, .save_weights_only = true});
    eg_history *h = fit_with(model, train, 3, every);
    assert_non_null(h);
    eg_history_free(h);
    assert_int_equal(eg_callback_model_checkpoint_saved(every), 3);
    static float trained[MAX_WEIGHTS], loaded[MAX_WEIGHTS];
    weights_of(model, trained, MAX_WEIGHTS);
    eg_model *other = make_model();
    snprintf(path, sizeof path, "%s/weights_3.safetensors", dir);
    assert_int_equal(eg_model_load_weights(other, path), EG_OK);
    weights_of(other, loaded, MAX_WEIGHTS);
    assert_memory_equal(trained, loaded, sizeof trained);
    for (int e = 1; e <= 3; e++) {
        snprintf(path, sizeof path, "%s/weights_%d.safetensors", dir, e);
        assert_int_equal(access(path, F_OK), 0);
        unlink(path);
    }
    eg_callback_free(every);
    /* best only, of a value that never improves after the first epoch: one save (the whole run) */
    snprintf(pattern, sizeof pattern, "%s/best.safetensors", dir);
    eg_callback *best =
        eg_callback_model_checkpoint_new(&(eg_model_checkpoint_options){.path = pattern,
                                                                        .monitor = "learning_rate",
                                                                        .mode = EG_MONITOR_MIN,
                                                                        .save_best_only = true});
    h = fit_with(model, train, 3, best);
    assert_non_null(h);
    eg_history_free(h);
    assert_int_equal(eg_callback_model_checkpoint_saved(best), 1);
    eg_optimizer *fresh = adam();
    eg_training_position at;
    assert_int_equal(eg_training_load(pattern, other, fresh, &at), EG_OK);
    assert_int_equal(at.epoch, 1);
    unlink(pattern);
    rmdir(dir);
    eg_callback_free(best);
    eg_optimizer_free(fresh);
    eg_model_free(other);
    eg_dataset_free(train);
    eg_optimizer_free(opt);
    eg_model_free(model);
}

static double one_over_epoch(int epoch, double rate, void *user) {
    (void)rate;
    return *(const double *)user / (epoch + 1);
}

static void test_learning_rate_callbacks(void **state) {
    (void)state;
    eg_model *model = make_model();
    eg_optimizer *opt = adam();
    assert_int_equal(eg_model_compile(model, opt, &classify), EG_OK);
    eg_dataset *train = batches_of(0, 96);
    /* the rate never rises again, so a monitor of it in MAX mode sees a plateau each epoch */
    eg_reduce_lr_on_plateau_options p = eg_reduce_lr_on_plateau_options_default();
    p.monitor = "learning_rate";
    p.mode = EG_MONITOR_MAX;
    p.factor = 0.5;
    p.patience = 1;
    p.min_delta = 0;
    eg_callback *plateau = eg_callback_reduce_lr_on_plateau_new(&p);
    assert_non_null(plateau);
    eg_history *h = fit_with(model, train, 4, plateau);
    assert_non_null(h);
    const double *rate = eg_history_values(h, "learning_rate", NULL);
    const double expected[4] = {0.01, 0.01, 0.005, 0.0025};
    for (int e = 0; e < 4; e++) assert_true(fabs(rate[e] - expected[e]) < 1e-12);
    eg_history_free(h);
    eg_callback_free(plateau);
    double base = 0.1;
    eg_callback *scheduled = eg_callback_learning_rate_scheduler_new(one_over_epoch, &base);
    h = fit_with(model, train, 3, scheduled);
    assert_non_null(h);
    rate = eg_history_values(h, "learning_rate", NULL);
    for (int e = 0; e < 3; e++) assert_true(fabs(rate[e] - 0.1 / (e + 1)) < 1e-12);
    eg_history_free(h);
    eg_callback_free(scheduled);
    p.factor = 1.5;
    assert_null(eg_callback_reduce_lr_on_plateau_new(&p));
    eg_clear_error();
    eg_dataset_free(train);
    eg_optimizer_free(opt);
    eg_model_free(model);
}

static void test_tensorboard_writes_the_epochs(void **state) {
    (void)state;
    eg_model *model = make_model();
    eg_optimizer *opt = adam();
    assert_int_equal(eg_model_compile(model, opt, &classify), EG_OK);
    eg_dataset *train = batches_of(0, 96);
    char dir[] = "/tmp/eagle_board_XXXXXX";
    assert_non_null(mkdtemp(dir));
    eg_callback *board = eg_callback_tensorboard_new(dir);
    eg_history *h = fit_with(model, train, 2, board);
    assert_non_null(h);
    eg_history_free(h);
    eg_callback_free(board); /* closes the event file */
    char command[256];
    snprintf(command, sizeof command, "grep -c epoch_accuracy %s/events.out.tfevents.* >/dev/null",
             dir);
    assert_int_equal(system(command), 0);
    snprintf(command, sizeof command, "rm -r %s", dir);
    assert_int_equal(system(command), 0);
    eg_dataset_free(train);
    eg_optimizer_free(opt);
    eg_model_free(model);
}

static void test_fit_arrays_holds_out_the_last_rows(void **state) {
    (void)state;
    eg_model *model = make_model();
    eg_optimizer *opt = adam();
    assert_int_equal(eg_model_compile(model, opt, &classify), EG_OK);
    eg_tensor *x = eg_tensor_from_data(xs, EG_DTYPE_F32, 2, (int64_t[]){N, FEATURES});
    eg_tensor *y = eg_tensor_from_data(ys, EG_DTYPE_I64, 1, (int64_t[]){N});
    eg_fit_options o = quiet(1);
    eg_history *h = eg_model_fit_arrays(model, x, y, BATCH, 0.2, true, 5, &o);
    assert_non_null(h);
    /* the validation is the last 48 rows: evaluate gives the same numbers */
    eg_dataset *last = batches_of(192, 48);
    eg_logs results;
    assert_int_equal(eg_model_evaluate(model, last, NULL, &results), EG_OK);
    double loss;
    assert_true(eg_logs_get(&results, "loss", &loss));
    assert_true(loss == eg_history_values(h, "val_loss", NULL)[0]);
    eg_history_free(h);
    assert_null(eg_model_fit_arrays(model, x, y, BATCH, 1.0, true, 5, &o));
    eg_clear_error();
    eg_dataset_free(last);
    eg_release(y);
    eg_release(x);
    eg_optimizer_free(opt);
    eg_model_free(model);
}

static void test_predict_is_the_model_applied(void **state) {
    (void)state;
    eg_model *model = make_model();
    eg_tensor *x = eg_tensor_from_data(xs, EG_DTYPE_F32, 2, (int64_t[]){N, FEATURES});
    eg_tensor *direct = eg_model_call(model, x, false);
    eg_tensor *batched = eg_model_predict(model, x, 50); /* 4 full batches and one of 40 */
    assert_non_null(batched);
    assert_int_equal(eg_tensor_dim(batched, 0), N);
    assert_int_equal(eg_tensor_dim(batched, 1), CLASSES);
    static float a[N * CLASSES], b[N * CLASSES], c[N * CLASSES];
    assert_int_equal(eg_tensor_copy_to_host(direct, a, sizeof a), EG_OK);
    assert_int_equal(eg_tensor_copy_to_host(batched, b, sizeof b), EG_OK);
    eg_dataset *ds = batches_of(0, N);
    eg_tensor *from_dataset = eg_model_predict_dataset(model, ds);
    assert_non_null(from_dataset);
    assert_int_equal(eg_tensor_copy_to_host(from_dataset, c, sizeof c), EG_OK);
    for (int i = 0; i < N * CLASSES; i++) {
        assert_true(fabsf(a[i] - b[i]) <= 1e-5f * (1 + fabsf(a[i])));
        assert_true(fabsf(a[i] - c[i]) <= 1e-5f * (1 + fabsf(a[i])));
    }
    assert_null(eg_model_predict(model, x, 0));
    eg_clear_error();
    eg_release(from_dataset);
    eg_dataset_free(ds);
    eg_release(batched);
    eg_release(direct);
    eg_release(x);
    eg_model_free(model);
}

static void test_bad_input_gets_clear_errors(void **state) {
    (void)state;
    eg_model *model = make_model();
    eg_optimizer *opt = adam();
    eg_dataset *train = batches_of(0, 64);
    assert_null(eg_model_fit(model, train, NULL));
    assert_int_equal(eg_last_status(), EG_ERR_STATE);
    assert_non_null(strstr(eg_last_error(), "not compiled"));
    eg_clear_error();
    eg_compile_options regression_with_accuracy = {.loss = EG_FIT_LOSS_MEAN_SQUARED_ERROR,
                                                   .accuracy = true};
    assert_int_equal(eg_model_compile(model, opt, &regression_with_accuracy),
                     EG_ERR_INVALID_ARGUMENT);
    eg_clear_error();
    eg_model *unbuilt = eg_sequential_new("unbuilt");
    assert_int_equal(eg_model_compile(unbuilt, opt, &classify), EG_ERR_STATE);
    eg_clear_error();
    eg_model_free(unbuilt);
    assert_int_equal(eg_model_compile(model, opt, &classify), EG_OK);
    eg_fit_options o = quiet(0);
    assert_null(eg_model_fit(model, train, &o));
    assert_int_equal(eg_last_status(), EG_ERR_INVALID_ARGUMENT);
    eg_clear_error();
    /* elements of one component are not (x, y) */
    eg_tensor *x = eg_tensor_from_data(xs, EG_DTYPE_F32, 2, (int64_t[]){64, FEATURES});
    eg_dataset *only_x =
        eg_dataset_batch(eg_dataset_from_tensor_slices(1, (eg_tensor *[]){x}), BATCH, false);
    o = quiet(1);
    assert_null(eg_model_fit(model, only_x, &o));
    assert_non_null(strstr(eg_last_error(), "elements have 1 components"));
    eg_clear_error();
    eg_logs results;
    assert_int_equal(eg_model_evaluate(model, only_x, NULL, &results), EG_ERR_INVALID_ARGUMENT);
    eg_clear_error();
    eg_dataset_free(only_x);
    eg_release(x);
    eg_dataset_free(train);
    eg_optimizer_free(opt);
    eg_model_free(model);
}

int main(void) {
    if (eg_device_configure_cpus(2) != EG_OK) return 1;
    make_data();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_fit_is_the_hand_written_loop, fresh_scope_setup,
                                        strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_eager_lazy_and_graph_fits_agree, fresh_scope_setup,
                                        strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_fit_under_a_strategy_of_one_replica, fresh_scope_setup,
                                        strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_fit_mirrored_over_two_devices, fresh_scope_setup,
                                        strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_fit_resumes_in_the_middle_of_an_epoch,
                                        fresh_scope_setup, strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_loss_scaling_is_in_the_history, fresh_scope_setup,
                                        strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_fit_learns_and_keeps_a_history, fresh_scope_setup,
                                        strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_callbacks_see_every_hook, fresh_scope_setup,
                                        strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_early_stopping_restores_the_best_epoch,
                                        fresh_scope_setup, strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_csv_logger_writes_the_history, fresh_scope_setup,
                                        strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_model_checkpoint_saves_what_it_is_asked,
                                        fresh_scope_setup, strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_learning_rate_callbacks, fresh_scope_setup,
                                        strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_tensorboard_writes_the_epochs, fresh_scope_setup,
                                        strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_fit_arrays_holds_out_the_last_rows, fresh_scope_setup,
                                        strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_predict_is_the_model_applied, fresh_scope_setup,
                                        strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_bad_input_gets_clear_errors, fresh_scope_setup,
                                        strict_scope_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
