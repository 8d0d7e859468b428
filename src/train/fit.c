/* Keras' training loop (eagle/fit.h): compile attaches a configuration to the model; fit runs the
 * epochs, batches, validation and callbacks; evaluate and predict run inference over batches.
 *
 * One step function serves the three execution modes: called directly (eager), between
 * eg_lazy_begin/end (lazy: its ops are recorded and realized when the host reads the loss), or
 * traced and replayed by eg_function (graph). Each batch runs in a scope, so its tensors are gone
 * when the next one starts; the host reads two numbers per batch (the loss and the accuracy),
 * which is also what the progress line needs. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/error.h"
#include "eagle/autograd.h"
#include "eagle/ops.h"
#include "nn/internal.h"
#include "train/internal.h"

static const char *const loss_names[EG_FIT_LOSS_COUNT] = {
    "sparse_categorical_crossentropy", "categorical_crossentropy", "binary_crossentropy",
    "mean_squared_error", "mean_absolute_error"};

static void config_free(void *attachment) {
    eg__fit_config *c = attachment;
    if (!c) return;
    for (int t = 0; t < 2; t++)
        for (int r = 0; r < 2; r++) eg_function_free(c->functions[t][r]);
    free(c);
}

eg_status eg_model_compile(eg_model *model, eg_optimizer *optimizer,
                           const eg_compile_options *options) {
    if (!model || !optimizer || !options)
        return eg__error(EG_ERR_NULL_ARGUMENT,
                         "model_compile: model, optimizer or options is NULL");
    if (!eg__model_is_built(model))
        return eg__error(EG_ERR_STATE,
                         "model_compile: model '%s' is not built (eg_model_build gives it its "
                         "variables)",
                         eg_model_name(model));
    if ((unsigned)options->loss >= EG_FIT_LOSS_COUNT ||
        (unsigned)options->mode >= EG_EXECUTION_COUNT)
        return eg__error(EG_ERR_INVALID_ARGUMENT, "model_compile: unknown loss %d or mode %d",
                         (int)options->loss, (int)options->mode);
    if (options->accuracy && options->loss >= EG_FIT_LOSS_MEAN_SQUARED_ERROR)
        return eg__error(EG_ERR_INVALID_ARGUMENT,
                         "model_compile: accuracy is a classification metric; the loss %s is a "
                         "regression's",
                         loss_names[options->loss]);
    eg__fit_config *c = calloc(1, sizeof *c);
    if (!c) return eg__error(EG_ERR_OUT_OF_MEMORY, "model_compile: out of host memory");
    c->model = model;
    c->optimizer = optimizer;
    c->options = *options;
    eg__model_attach(model, c, config_free);
    return EG_OK;
}

static eg__fit_config *compiled(eg_model *model, const char *what) {
    eg__fit_config *c = model ? eg__model_attachment(model) : NULL;
    if (!model)
        eg__error(EG_ERR_NULL_ARGUMENT, "%s: model is NULL", what);
    else if (!c)
        eg__error(EG_ERR_STATE, "%s: model '%s' is not compiled (eg_model_compile first)", what,
                  eg_model_name(model));
    return c;
}

/* ---- the steps ---- */

/* The compiled loss of a batch, its mean: a 0-d tensor. */
static eg_tensor *batch_loss(const eg__fit_config *c, const eg_tensor *y, const eg_tensor *pred) {
    bool logits = c->options.from_logits;
    switch (c->options.loss) {
    case EG_FIT_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY:
        return eg_loss_sparse_categorical_crossentropy(y, pred, logits, EG_REDUCTION_MEAN);
    case EG_FIT_LOSS_CATEGORICAL_CROSSENTROPY:
        return eg_loss_categorical_crossentropy(y, pred, logits, EG_REDUCTION_MEAN);
    case EG_FIT_LOSS_BINARY_CROSSENTROPY:
        return eg_loss_binary_crossentropy(y, pred, logits, EG_REDUCTION_MEAN);
    case EG_FIT_LOSS_MEAN_SQUARED_ERROR:
        return eg_loss_mean_squared_error(y, pred, EG_REDUCTION_MEAN);
    default:
        return eg_loss_mean_absolute_error(y, pred, EG_REDUCTION_MEAN);
    }
}

/* Binary accuracy: the prediction thresholded (0.5 on probabilities, 0 on logits) equals the 0/1
 * target; per element, f32. */
static eg_tensor *binary_hits(const eg__fit_config *c, const eg_tensor *y, const eg_tensor *pred) {
    eg_tensor *threshold = eg_scalar(eg_tensor_dtype(pred), c->options.from_logits ? 0.0 : 0.5);
    eg_tensor *above = threshold ? eg_greater(pred, threshold) : NULL;
    eg_tensor *predicted = above ? eg_cast(above, EG_DTYPE_F32) : NULL;
    eg_tensor *target = predicted ? eg_cast(y, EG_DTYPE_F32) : NULL;
    eg_tensor *shaped =
        target && eg_tensor_n_dims(target) + 1 == eg_tensor_n_dims(predicted)
            ? eg_reshape(target, eg_tensor_n_dims(predicted), eg_tensor_shape(predicted))
            : NULL;
    eg_tensor *same = target ? eg_equal(predicted, shaped ? shaped : target) : NULL;
    eg_tensor *hits = same ? eg_cast(same, EG_DTYPE_F32) : NULL;
    eg_release(same);
    eg_release(shaped);
    eg_release(target);
    eg_release(predicted);
    eg_release(above);
    eg_release(threshold);
    return hits;
}

/* The batch's mean accuracy (0-d f32), or a 0 when the model is compiled without it. */
static eg_tensor *batch_accuracy(const eg__fit_config *c, const eg_tensor *y,
                                 const eg_tensor *pred) {
    if (!c->options.accuracy) return eg_scalar(EG_DTYPE_F32, 0.0);
    eg_no_grad_begin();
    eg_tensor *hits = NULL;
    if (c->options.loss == EG_FIT_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY)
        hits = eg_metric_sparse_categorical_accuracy(y, pred);
    else if (c->options.loss == EG_FIT_LOSS_CATEGORICAL_CROSSENTROPY)
        hits = eg_metric_categorical_accuracy(y, pred);
    else
        hits = binary_hits(c, y, pred);
    eg_tensor *mean = hits ? eg_mean(hits, 0, NULL, false) : NULL;
    eg_release(hits);
    eg_no_grad_end();
    return mean;
}

/* This replica's part of the global batch's mean loss: loss x its share (in[2], f64 0-d), whose
 * gradients summed over the replicas are the global mean's. */
static eg_tensor *replica_part(const eg_tensor *loss, const eg_tensor *share) {
    eg_tensor *cast = eg_cast(share, eg_tensor_dtype(loss));
    eg_tensor *part = cast ? eg_mul(loss, cast) : NULL;
    eg_release(cast);
    return part;
}

/* eg__fit_call's training step: forward, loss, gradient (of the optimizer's scaled loss; summed
 * over the replicas as a replica), update. A replica starts the sums of its loss and accuracy
 * before the backward pass, so they travel with the gradients. */
static eg_status train_step(eg_tensor *const *in, eg_tensor **out, void *user) {
    eg__fit_config *c = user;
    int n;
    eg_tensor *const *vars = eg_model_trainable_variables(c->model, &n);
    if (!vars) return eg_last_status();
    eg_tensor **grads = calloc((size_t)(n ? n : 1), sizeof *grads);
    if (!grads) return eg__error(EG_ERR_OUT_OF_MEMORY, "fit: out of host memory");
    eg_tape *tape = eg_tape_begin(false);
    eg_tensor *pred = tape ? eg_model_call(c->model, in[0], true) : NULL;
    eg_tensor *loss = pred ? batch_loss(c, in[1], pred) : NULL;
    eg_tensor *accuracy = loss ? batch_accuracy(c, in[1], pred) : NULL;
    int64_t tag = 0;
    eg_tensor *totals =
        accuracy && c->replica
            ? eg__fit_totals_start(loss, accuracy, eg_tensor_dim(in[0], 0), in[3], &tag)
            : NULL;
    eg_tensor *part = totals ? replica_part(loss, in[2]) : NULL;
    eg_tensor *scaled = NULL;
    if (accuracy && (!c->replica || part))
        scaled = eg_optimizer_scale_loss(c->optimizer, part ? part : loss);
    eg_status status = !scaled ? eg_last_status()
                       : c->replica
                           ? eg_replica_gradient(c->replica, tape, scaled, n, vars, grads)
                           : eg_tape_gradient(tape, scaled, n, vars, grads, EG_UNCONNECTED_ZERO);
    eg_tape_free(tape);
    if (status == EG_OK) status = eg_optimizer_apply_gradients(c->optimizer, n, grads, vars);
    for (int i = 0; i < n; i++) eg_release(grads[i]);
    free(grads);
    eg_release(scaled);
    eg_release(part);
    eg_release(pred);
    if (c->replica) {
        status = eg__fit_totals_finish(status, totals, tag, out);
        eg_release(loss);
        eg_release(accuracy);
        return status;
    }
    out[0] = loss;
    out[1] = accuracy;
    return status;
}

/* eg__fit_call's inference step: the loss and accuracy (summed over the replicas as one). */
static eg_status test_step(eg_tensor *const *in, eg_tensor **out, void *user) {
    eg__fit_config *c = user;
    eg_no_grad_begin();
    eg_tensor *pred = eg_model_call(c->model, in[0], false);
    eg_tensor *loss = pred ? batch_loss(c, in[1], pred) : NULL;
    eg_tensor *accuracy = loss ? batch_accuracy(c, in[1], pred) : NULL;
    eg_release(pred);
    eg_status status = accuracy ? EG_OK : eg_last_status();
    if (c->replica) {
        int64_t tag = 0;
        eg_tensor *totals =
            status == EG_OK
                ? eg__fit_totals_start(loss, accuracy, eg_tensor_dim(in[0], 0), in[3], &tag)
                : NULL;
        if (status == EG_OK && !totals) status = eg_last_status();
        status = eg__fit_totals_finish(status, totals, tag, out);
        eg_release(loss);
        eg_release(accuracy);
    } else {
        out[0] = loss;
        out[1] = accuracy;
    }
    eg_no_grad_end();
    return status;
}

eg_status eg__fit_call(eg__fit_config *c, bool training, eg_tensor *const *in, eg_tensor **out) {
    bool replicated = c->replica != NULL;
    if (c->options.mode == EG_EXECUTION_GRAPH) {
        eg_function **f = &c->functions[training][replicated];
        if (!*f && !(*f = eg_function_new(training ? "fit_train_step" : "fit_test_step",
                                          training ? train_step : test_step, 2 + 2 * replicated,
                                          2 + replicated, c)))
            return eg_last_status();
        return eg_function_call(*f, in, out);
    }
    if (c->options.mode == EG_EXECUTION_LAZY) {
        eg_lazy_begin();
        eg_status status = training ? train_step(in, out, c) : test_step(in, out, c);
        eg_status ended = eg_lazy_end();
        return status == EG_OK ? ended : status;
    }
    return training ? train_step(in, out, c) : test_step(in, out, c);
}

eg_status eg_model_train_step_stats(const eg_model *model, eg_function_stats *stats) {
    eg__fit_config *c = compiled((eg_model *)model, "model_train_step_stats");
    if (!c) return eg_last_status();
    if (!stats) return eg__error(EG_ERR_NULL_ARGUMENT, "model_train_step_stats: stats is NULL");
    eg_function *f = c->functions[1][1] ? c->functions[1][1] : c->functions[1][0];
    if (!f)
        return eg__error(EG_ERR_STATE,
                         "model_train_step_stats: model '%s' has no traced training step (compile "
                         "in graph mode, then fit)",
                         eg_model_name(model));
    return eg_function_stats_get(f, stats);
}

/* One step, alone or on the strategy's replicas; *loss and *accuracy get the host values. */
static eg_status run_step(eg__fit_config *c, bool training, eg_tensor *const *in, double *loss,
                          double *accuracy) {
    if (c->strategy) return eg__fit_replicated_step(c, training, in, loss, accuracy);
    eg_tensor *out[2] = {NULL, NULL};
    eg_status status = eg__fit_call(c, training, in, out);
    if (status == EG_OK) {
        *loss = eg_item(out[0]);
        *accuracy = eg_item(out[1]);
        status = eg_last_status();
    }
    eg_release(out[0]);
    eg_release(out[1]);
    return status;
}

/* One batch's step; its loss and accuracy join the running means, weighted by its size. */
static eg_status count_step(eg__fit_config *c, bool training, const eg_element *e,
                            eg_metric_mean *losses, eg_metric_mean *hits) {
    double loss = 0, accuracy = 0, n = (double)eg_tensor_dim(e->tensors[0], 0);
    eg_status status = run_step(c, training, e->tensors, &loss, &accuracy);
    if (status == EG_OK) {
        eg_metric_mean_add(losses, loss, n);
        eg_metric_mean_add(hits, accuracy, n);
    }
    return status;
}

/* The next (x, y) batch: *end at the end of the data; an element of another arity is an error. */
static eg_status next_batch(eg_dataset_iterator *it, eg_element *e, bool *end, const char *what) {
    eg_status status = eg_dataset_iterator_next(it, e, end);
    if (status != EG_OK || *end) return status;
    if (e->n_tensors != 2)
        return eg__error(EG_ERR_INVALID_ARGUMENT,
                         "%s: the dataset's elements have %d components; fit and evaluate take "
                         "(x, y) batches",
                         what, e->n_tensors);
    return EG_OK;
}

/* Loss and accuracy over every batch (means weighted by batch size). */
static eg_status evaluate_batches(eg__fit_config *c, eg_dataset *data, int64_t steps, double *loss,
                                  double *accuracy, const char *what) {
    eg_dataset_iterator *it = eg_dataset_iterator_new(data);
    if (!it) return eg_last_status();
    eg_metric_mean losses = {0}, hits = {0};
    eg_status status = EG_OK;
    for (int64_t step = 0; status == EG_OK && (steps <= 0 || step < steps); step++) {
        eg_scope_begin();
        eg_element e = {0};
        bool end = false;
        status = next_batch(it, &e, &end, what);
        if (status == EG_OK && !end) status = count_step(c, false, &e, &losses, &hits);
        eg_scope_end();
        if (status != EG_OK || end) break;
    }
    eg_dataset_iterator_free(it);
    *loss = eg_metric_mean_result(&losses);
    *accuracy = eg_metric_mean_result(&hits);
    return status;
}

/* ---- the progress line ---- */

typedef struct progress {
    FILE *out;
    int verbose;
    bool tty;
    double start, last_draw;
} progress;

static double seconds_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void print_logs(FILE *out, const eg_logs *logs) {
    for (int i = 0; i < logs->n; i++) {
        const char *name = logs->names[i];
        if (!strcmp(name, "skipped_steps"))
            fprintf(out, " - %s: %.0f", name, logs->values[i]);
        else if (!strcmp(name, "learning_rate") || !strcmp(name, "loss_scale"))
            fprintf(out, " - %s: %.4g", name, logs->values[i]);
        else
            fprintf(out, " - %s: %.4f", name, logs->values[i]);
    }
}

static void progress_begin(progress *p, int epoch, int last_epoch) {
    p->start = seconds_now();
    p->last_draw = 0;
    if (p->verbose) fprintf(p->out, "Epoch %d/%d\n", epoch + 1, last_epoch);
}

/* On a terminal with verbose 1: redrawn at most ten times a second. */
static void progress_batch(progress *p, int64_t batch, const eg_logs *logs) {
    if (p->verbose != 1 || !p->tty) return;
    double now = seconds_now();
    if (now - p->last_draw < 0.1) return;
    p->last_draw = now;
    fprintf(p->out, "\r%6lld batches %.0fs", (long long)(batch + 1), now - p->start);
    print_logs(p->out, logs);
    fprintf(p->out, "   ");
    fflush(p->out);
}

static void progress_epoch(progress *p, int64_t batches, const eg_logs *logs) {
    if (!p->verbose) return;
    double elapsed = seconds_now() - p->start;
    if (p->tty && p->verbose == 1) fprintf(p->out, "\r");
    double per_step = batches ? elapsed / (double)batches : 0.0;
    fprintf(p->out, "%6lld batches %.2fs %.0f%s/step", (long long)batches, elapsed,
            per_step < 1e-3 ? per_step * 1e6 : per_step * 1e3, per_step < 1e-3 ? "us" : "ms");
    print_logs(p->out, logs);
    fprintf(p->out, "\n");
    fflush(p->out);
}

/* ---- fit ---- */

eg_fit_options eg_fit_options_default(void) {
    return (eg_fit_options){.epochs = 1, .verbose = 1};
}

/* Runs `hook` of every callback with the arguments given (then its user pointer); the first
 * failure stops the loop, named when the callback raised no error of its own. */
#define RUN_CALLBACKS(options, hook, ...)                                                          \
    do {                                                                                           \
        for (int k_ = 0; status == EG_OK && k_ < (options)->n_callbacks; k_++) {                   \
            eg_callback *cb_ = (options)->callbacks[k_];                                           \
            eg__callback_frame frame_;                                                             \
            eg__callback_begin(&frame_);                                                           \
            if (cb_ && cb_->hook) status = cb_->hook(__VA_ARGS__, cb_->user);                      \
            eg__callback_end(&frame_);                                                             \
            if (status != EG_OK && !eg__error_since(frame_.mark))                                  \
                status = eg__error(status, "fit: callback %d (%s) failed in " #hook, k_,           \
                                   cb_->name ? cb_->name : "unnamed");                             \
        }                                                                                          \
    } while (0)

static eg_status check_fit_options(const eg_fit_options *o) {
    if (o->epochs < 1 || o->initial_epoch < 0 || o->verbose < 0 || o->verbose > 2 ||
        o->n_callbacks < 0 || (o->n_callbacks > 0 && !o->callbacks) || o->steps_per_epoch < 0)
        return eg__error(EG_ERR_INVALID_ARGUMENT,
                         "fit: invalid options (epochs %d >= 1, initial_epoch %d >= 0, verbose %d "
                         "in 0..2, %d callbacks, steps_per_epoch %lld >= 0)",
                         o->epochs, o->initial_epoch, o->verbose, o->n_callbacks,
                         (long long)o->steps_per_epoch);
    return EG_OK;
}

/* Whether the epoch ends after this batch because some callback asked: at once alone; under a
 * strategy over processes when the step's sums carried a request (eg_fit_state_stop). */
static bool stop_now(eg_fit_state *state) {
    eg__fit_config *c = state->config;
    if (!c->strategy || eg_strategy_num_workers(c->strategy) < 2) return state->stop;
    c->stop_asked = c->stop_asked || state->stop;
    state->stop = c->stop_agreed;
    return state->stop;
}

/* One epoch's batches from `first` (0, or where a resumed epoch continues): runs the steps and
 * the batch callbacks; *logs gets the running means. */
static eg_status train_epoch(eg_fit_state *state, eg_dataset *train, const eg_fit_options *o,
                             int64_t first, progress *p, eg_logs *logs, int64_t *batches) {
    eg__fit_config *c = state->config;
    eg_dataset_iterator *it = eg_dataset_iterator_new(train);
    if (!it) return eg_last_status();
    eg_fit_progress *at = &state->progress;
    eg_status status = EG_OK;
    int64_t batch = first;
    for (;
         status == EG_OK && !stop_now(state) && (!o->steps_per_epoch || batch < o->steps_per_epoch);
         batch++) {
        eg_scope_begin();
        eg_element e = {0};
        bool end = false;
        status = next_batch(it, &e, &end, "fit");
        if (status == EG_OK && !end) RUN_CALLBACKS(o, batch_begin, state, batch);
        if (status == EG_OK && !end && c->locals) status = eg__fit_replicas_follow(c);
        if (status == EG_OK && !end) {
            c->stop_asked = c->stop_asked || state->stop;
            status = count_step(c, true, &e, &at->loss, &at->accuracy);
        }
        eg_scope_end();
        if (status != EG_OK || end) break;
        at->step = batch + 1;
        *logs = (eg_logs){0};
        eg__logs_add(logs, "loss", eg_metric_mean_result(&at->loss));
        if (c->options.accuracy)
            eg__logs_add(logs, "accuracy", eg_metric_mean_result(&at->accuracy));
        RUN_CALLBACKS(o, batch_end, state, batch, logs);
        progress_batch(p, batch, logs);
    }
    eg_dataset_iterator_free(it);
    *batches = batch;
    if (status == EG_OK && batch == 0 && !state->stop)
        status = eg__error(EG_ERR_INVALID_ARGUMENT, "fit: the training dataset gave no batch");
    return status;
}

/* The epoch's logs: the training means, the validation, the learning rate, the loss scale. */
static eg_status epoch_logs(eg_fit_state *state, const eg_fit_options *o, eg_logs *logs) {
    eg__fit_config *c = state->config;
    eg_status status = EG_OK;
    if (o->validation_data) {
        double loss, accuracy;
        status = evaluate_batches(c, o->validation_data, 0, &loss, &accuracy, "fit (validation)");
        eg__logs_add(logs, "val_loss", loss);
        if (c->options.accuracy) eg__logs_add(logs, "val_accuracy", accuracy);
    }
    eg__logs_add(logs, "learning_rate", eg_optimizer_learning_rate(c->optimizer));
    double scale = eg_optimizer_loss_scale(c->optimizer);
    int64_t skipped = eg_optimizer_skipped_steps(c->optimizer);
    if (scale != 1 || skipped) {
        eg__logs_add(logs, "loss_scale", scale);
        eg__logs_add(logs, "skipped_steps", (double)skipped);
    }
    return status;
}

static eg_status check_resume(const eg_fit_options *o) {
    const eg_fit_progress *p = &o->initial_progress;
    if (o->initial_step < 0 || (o->steps_per_epoch && o->initial_step >= o->steps_per_epoch) ||
        (o->initial_step > 0 && (p->epoch != o->initial_epoch || p->step != o->initial_step)))
        return eg__error(EG_ERR_INVALID_ARGUMENT,
                         "fit: initial_step %lld (>= 0, below steps_per_epoch %lld) and "
                         "initial_progress (epoch %d, step %lld) must agree with initial_epoch %d",
                         (long long)o->initial_step, (long long)o->steps_per_epoch, p->epoch,
                         (long long)p->step, o->initial_epoch);
    return EG_OK;
}

eg_history *eg_model_fit(eg_model *model, eg_dataset *train, const eg_fit_options *options) {
    eg_fit_options o = options ? *options : eg_fit_options_default();
    eg__fit_config *c = compiled(model, "fit");
    if (!c) return NULL;
    if (!train) {
        eg__error(EG_ERR_NULL_ARGUMENT, "fit: the training dataset is NULL");
        return NULL;
    }
    if (check_fit_options(&o) != EG_OK || check_resume(&o) != EG_OK) return NULL;
    if (o.strategy && (eg__fit_check_strategy(o.strategy, o.build_replica != NULL, "fit") != EG_OK))
        return NULL;
    eg_fit_state state = {.config = c, .history = eg__history_new()};
    if (!state.history) return NULL;
    c->strategy = o.strategy;
    c->stop_asked = c->stop_agreed = false;
    progress p = {.out = o.out ? o.out : stdout, .verbose = o.verbose};
    if (!eg_fit_state_is_chief(&state)) p.verbose = 0;
    p.tty = isatty(fileno(p.out));
    eg_status status = o.strategy ? eg__fit_replicas_begin(c, &o) : EG_OK;
    RUN_CALLBACKS(&o, train_begin, &state);
    eg_logs logs = {0};
    int last_epoch = o.initial_epoch + o.epochs;
    for (int epoch = o.initial_epoch; status == EG_OK && !state.stop && epoch < last_epoch;
         epoch++) {
        bool resumed = epoch == o.initial_epoch && o.initial_step > 0;
        state.progress = resumed ? o.initial_progress : (eg_fit_progress){.epoch = epoch};
        RUN_CALLBACKS(&o, epoch_begin, &state, epoch);
        if (status != EG_OK) break;
        progress_begin(&p, epoch, last_epoch);
        int64_t batches = 0;
        logs = (eg_logs){0};
        status = train_epoch(&state, train, &o, resumed ? o.initial_step : 0, &p, &logs, &batches);
        if (status == EG_OK) status = eg__fit_replicas_average_statistics(c);
        if (status == EG_OK) status = epoch_logs(&state, &o, &logs);
        if (status == EG_OK) status = eg__history_append(state.history, &logs);
        if (status == EG_OK) progress_epoch(&p, batches, &logs);
        RUN_CALLBACKS(&o, epoch_end, &state, epoch, &logs);
    }
    RUN_CALLBACKS(&o, train_end, &state, &logs);
    eg__fit_replicas_end(c);
    c->strategy = NULL;
    if (status != EG_OK) {
        eg_history_free(state.history);
        return NULL;
    }
    return state.history;
}

/* rows [start, stop) of x and y as (x, y) batches, shuffled first when shuffle. */
static eg_dataset *rows_dataset(const eg_tensor *x, const eg_tensor *y, int64_t start, int64_t stop,
                                int64_t batch_size, bool shuffle, uint64_t seed) {
    eg_tensor *xs = eg_slice(x, 0, start, stop, 1), *ys = eg_slice(y, 0, start, stop, 1);
    eg_dataset *ds = xs && ys ? eg_dataset_from_tensor_slices(2, (eg_tensor *[]){xs, ys}) : NULL;
    eg_release(xs);
    eg_release(ys);
    if (shuffle) ds = eg_dataset_shuffle(ds, stop - start, seed, true);
    return eg_dataset_batch(ds, batch_size, false);
}

eg_history *eg_model_fit_arrays(eg_model *model, const eg_tensor *x, const eg_tensor *y,
                                int64_t batch_size, double validation_split, bool shuffle,
                                uint64_t seed, const eg_fit_options *options) {
    if (!model || !x || !y) {
        eg__error(EG_ERR_NULL_ARGUMENT, "fit_arrays: model, x or y is NULL");
        return NULL;
    }
    eg_fit_options o = options ? *options : eg_fit_options_default();
    int64_t n = eg_tensor_n_dims(x) ? eg_tensor_dim(x, 0) : 0;
    if (batch_size < 1 || !(validation_split >= 0 && validation_split < 1) ||
        eg_tensor_n_dims(y) < 1 || eg_tensor_dim(y, 0) != n || n == 0 ||
        (validation_split > 0 && o.validation_data)) {
        eg__error(EG_ERR_INVALID_ARGUMENT,
                  "fit_arrays: batch_size %lld >= 1, validation_split %g in [0, 1) (and not with "
                  "validation_data), x and y with the same number of rows (%lld, %lld)",
                  (long long)batch_size, validation_split, (long long)n,
                  eg_tensor_n_dims(y) ? (long long)eg_tensor_dim(y, 0) : 0LL);
        return NULL;
    }
    /* Keras holds out the last rows, before any shuffling */
    int64_t held = (int64_t)((double)n * validation_split);
    if (held == n) held = n - 1;
    eg_dataset *train = rows_dataset(x, y, 0, n - held, batch_size, shuffle, seed);
    eg_dataset *validation =
        held > 0 ? rows_dataset(x, y, n - held, n, batch_size, false, 0) : NULL;
    eg_history *history = NULL;
    if (train && (held == 0 || validation)) {
        if (validation) o.validation_data = validation;
        history = eg_model_fit(model, train, &o);
    }
    eg_dataset_free(validation);
    eg_dataset_free(train);
    return history;
}

/* ---- evaluate, predict ---- */

eg_status eg_model_evaluate(eg_model *model, eg_dataset *data, const eg_evaluate_options *options,
                            eg_logs *results) {
    eg_evaluate_options o = options ? *options : (eg_evaluate_options){0};
    eg__fit_config *c = compiled(model, "evaluate");
    if (!c) return eg_last_status();
    if (!data || !results)
        return eg__error(EG_ERR_NULL_ARGUMENT, "evaluate: the dataset or results is NULL");
    if (o.verbose < 0 || o.verbose > 2 || o.steps < 0)
        return eg__error(EG_ERR_INVALID_ARGUMENT, "evaluate: verbose %d in 0..2, steps %lld >= 0",
                         o.verbose, (long long)o.steps);
    if (o.strategy && eg__fit_check_strategy(o.strategy, false, "evaluate") != EG_OK)
        return eg_last_status();
    double loss, accuracy;
    double start = seconds_now();
    c->strategy = o.strategy;
    eg_status status = evaluate_batches(c, data, o.steps, &loss, &accuracy, "evaluate");
    c->strategy = NULL;
    if (status != EG_OK) return status;
    if (o.strategy && !eg_strategy_is_chief(o.strategy)) o.verbose = 0;
    *results = (eg_logs){0};
    eg__logs_add(results, "loss", loss);
    if (c->options.accuracy) eg__logs_add(results, "accuracy", accuracy);
    if (o.verbose) {
        FILE *out = o.out ? o.out : stdout;
        fprintf(out, "evaluate %.1fs", seconds_now() - start);
        print_logs(out, results);
        fprintf(out, "\n");
        fflush(out);
    }
    return EG_OK;
}

/* Appends pieces[0..n) along axis 0 into one tensor. */
static eg_tensor *join(int n, eg_tensor **pieces) {
    if (n == 1)
        return eg_reshape(pieces[0], eg_tensor_n_dims(pieces[0]), eg_tensor_shape(pieces[0]));
    return eg_concat(n, pieces, 0);
}

/* Collects the model's outputs for a sequence of inputs (next gives each, NULL at the end). */
typedef const eg_tensor *(*next_input_fn)(void *context, eg_status *status);

static eg_tensor *predict_each(eg_model *model, next_input_fn next, void *context,
                               const char *what) {
    int n = 0, capacity = 0;
    eg_tensor **pieces = NULL;
    eg_status status = EG_OK;
    eg_no_grad_begin();
    for (;;) {
        const eg_tensor *x = next(context, &status);
        if (!x || status != EG_OK) break;
        eg_tensor *y = eg_model_call(model, x, false);
        if (!y) status = eg_last_status();
        if (status == EG_OK && n == capacity) {
            capacity = capacity ? 2 * capacity : 16;
            eg_tensor **grown = realloc(pieces, sizeof *grown * (size_t)capacity);
            if (!grown)
                status = eg__error(EG_ERR_OUT_OF_MEMORY, "%s: out of host memory", what);
            else
                pieces = grown;
        }
        if (status != EG_OK) {
            eg_release(y);
            break;
        }
        pieces[n++] = y;
    }
    eg_no_grad_end();
    eg_tensor *all = NULL;
    if (status == EG_OK && n == 0)
        eg__error(EG_ERR_INVALID_ARGUMENT, "%s: no input rows", what);
    else if (status == EG_OK)
        all = join(n, pieces);
    for (int i = 0; i < n; i++) eg_release(pieces[i]);
    free(pieces);
    return all;
}

typedef struct rows {
    const eg_tensor *x;
    int64_t batch, next;
    eg_tensor *current;
} rows;

static const eg_tensor *next_rows(void *context, eg_status *status) {
    rows *r = context;
    eg_release(r->current);
    r->current = NULL;
    int64_t total = eg_tensor_dim(r->x, 0);
    if (r->next >= total) return NULL;
    int64_t stop = r->next + r->batch < total ? r->next + r->batch : total;
    r->current = eg_slice(r->x, 0, r->next, stop, 1);
    r->next = stop;
    if (!r->current) *status = eg_last_status();
    return r->current;
}

eg_tensor *eg_model_predict(eg_model *model, const eg_tensor *x, int64_t batch_size) {
    if (!model || !x) {
        eg__error(EG_ERR_NULL_ARGUMENT, "predict: model or x is NULL");
        return NULL;
    }
    if (batch_size < 1 || eg_tensor_n_dims(x) < 1) {
        eg__error(EG_ERR_INVALID_ARGUMENT,
                  "predict: batch_size %lld must be >= 1 and x must have a batch axis",
                  (long long)batch_size);
        return NULL;
    }
    rows r = {x, batch_size, 0, NULL};
    eg_tensor *y = predict_each(model, next_rows, &r, "predict");
    eg_release(r.current);
    return y;
}

typedef struct batches {
    eg_dataset_iterator *it;
    eg_element element;
} batches;

static const eg_tensor *next_element(void *context, eg_status *status) {
    batches *b = context;
    eg_element_release(&b->element);
    bool end = false;
    *status = eg_dataset_iterator_next(b->it, &b->element, &end);
    if (*status != EG_OK || end) return NULL;
    if (b->element.n_tensors < 1) {
        *status = eg__error(EG_ERR_INVALID_ARGUMENT, "predict_dataset: an element without tensors");
        return NULL;
    }
    return b->element.tensors[0];
}

eg_tensor *eg_model_predict_dataset(eg_model *model, eg_dataset *data) {
    if (!model || !data) {
        eg__error(EG_ERR_NULL_ARGUMENT, "predict_dataset: model or dataset is NULL");
        return NULL;
    }
    batches b = {eg_dataset_iterator_new(data), {0}};
    if (!b.it) return NULL;
    eg_tensor *y = predict_each(model, next_element, &b, "predict_dataset");
    eg_element_release(&b.element);
    eg_dataset_iterator_free(b.it);
    return y;
}
