/* Eagle — Keras' training loop: compile, fit, evaluate, predict, with callbacks and a history.
 *
 *     eg_model_compile(model, optimizer, &(eg_compile_options){
 *         .loss = EG_FIT_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY, .from_logits = true,
 *         .accuracy = true});
 *     eg_callback *stop = eg_callback_early_stopping_new(&(eg_early_stopping_options){
 *         .monitor = "val_loss", .patience = 2, .restore_best_weights = true});
 *     eg_fit_options o = eg_fit_options_default();
 *     o.epochs = 10;
 *     o.validation_data = test_batches;
 *     o.n_callbacks = 1;
 *     o.callbacks = &stop;
 *     eg_history *history = eg_model_fit(model, train_batches, &o);
 *     ... eg_history_values(history, "val_accuracy", &n) ...
 *     eg_history_free(history);
 *     eg_callback_free(stop);
 *
 * Datasets give batches: elements (x, y) for fit and evaluate (x alone, or (x, y), for predict),
 * as eg_dataset_batch makes them. Each epoch iterates the dataset anew (a new epoch of it, so its
 * shuffles reshuffle). The step runs in the compile options' execution mode: eager (op by op),
 * lazy (recorded, fused, realized when the loss is read) or graph (traced once per batch shape by
 * eg_function and replayed); the three give the same values.
 *
 * OWNERSHIP: the model keeps a borrowed pointer to the optimizer from compile (it must outlive
 * the model's fits, or be replaced by compiling again); datasets and callbacks passed to fit are
 * borrowed; eg_model_fit returns a history the caller frees; callbacks made by the
 * eg_callback_*_new constructors are freed with eg_callback_free (a callback the caller filled in
 * itself stays the caller's). */
#ifndef EAGLE_FIT_H
#define EAGLE_FIT_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "eagle/data.h"
#include "eagle/distribute.h"
#include "eagle/lazy.h"
#include "eagle/nn.h"
#include "eagle/optim.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The losses fit minimizes (eagle/nn.h's eg_loss_*, reduced to the batch mean). */
typedef enum eg_fit_loss {
    EG_FIT_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY = 0, /* y: class indices (B,), x -> (B, C) */
    EG_FIT_LOSS_CATEGORICAL_CROSSENTROPY,            /* y: distributions (B, C) */
    EG_FIT_LOSS_BINARY_CROSSENTROPY,                 /* y: 0/1 targets shaped like the output */
    EG_FIT_LOSS_MEAN_SQUARED_ERROR,
    EG_FIT_LOSS_MEAN_ABSOLUTE_ERROR,
    EG_FIT_LOSS_COUNT
} eg_fit_loss;

typedef enum eg_execution_mode {
    EG_EXECUTION_EAGER = 0,
    EG_EXECUTION_LAZY,
    EG_EXECUTION_GRAPH,
    EG_EXECUTION_COUNT
} eg_execution_mode;

typedef struct eg_compile_options {
    eg_fit_loss loss;
    bool from_logits; /* the model outputs logits (the cross-entropies); ignored by MSE/MAE */
    /* Keras' "accuracy" metric, the one that matches the loss: sparse categorical, categorical,
     * or binary (threshold 0.5 on probabilities, 0 on logits). Only for the cross-entropies. */
    bool accuracy;
    eg_execution_mode mode; /* default (0) eager */
} eg_compile_options;

/* Sets what fit and evaluate compute (Keras' compile). The model must be built (its variables
 * exist); optimizer is borrowed. Compiling again replaces the configuration and forgets traced
 * steps. EG_ERR_NULL_ARGUMENT (model, optimizer or options NULL), EG_ERR_STATE (not built),
 * EG_ERR_INVALID_ARGUMENT (unknown loss or mode, accuracy with a regression loss). */
eg_status eg_model_compile(eg_model *model, eg_optimizer *optimizer,
                           const eg_compile_options *options);

/* ---- logs and history ---- */

#define EG_LOGS_MAX 16

/* Named numbers of a batch or an epoch: "loss", "accuracy", "val_loss", "val_accuracy",
 * "learning_rate" and, with loss scaling, "loss_scale" and "skipped_steps". Names are static
 * storage or the logs' own. */
typedef struct eg_logs {
    int n;
    const char *names[EG_LOGS_MAX];
    double values[EG_LOGS_MAX];
} eg_logs;

/* The value named `name` into *value: true when present. */
bool eg_logs_get(const eg_logs *logs, const char *name, double *value);

/* Keras' History: every epoch's logs. */
typedef struct eg_history eg_history;

int eg_history_n_epochs(const eg_history *history);
/* The names recorded, in first-seen order (index < eg_history_n_metrics); NULL past the end. */
int eg_history_n_metrics(const eg_history *history);
const char *eg_history_metric_name(const eg_history *history, int index);
/* The per-epoch values of `name` (*n gets the epoch count), owned by the history; NULL when the
 * history has no such metric. An epoch that did not log it holds NaN. */
const double *eg_history_values(const eg_history *history, const char *name, int *n);
void eg_history_free(eg_history *history);

/* ---- callbacks ---- */

/* The run a callback is called from (valid during the call). */
typedef struct eg_fit_state eg_fit_state;

eg_model *eg_fit_state_model(const eg_fit_state *state);
eg_optimizer *eg_fit_state_optimizer(const eg_fit_state *state);
/* The epochs logged so far (the current one once its epoch_end has run). */
const eg_history *eg_fit_state_history(const eg_fit_state *state);
/* Asks fit to stop after the current batch (Keras' model.stop_training = True). Under a strategy
 * over several processes a request travels with the next step's all-reduce and every process
 * stops after that step: asked in batch_begin, after this batch; asked in batch_end, after the
 * next one (the next epoch's first after an epoch's last batch); so one process may ask alone
 * (a Ctrl-C) and all still stop after the same step. */
void eg_fit_state_stop(eg_fit_state *state);

/* Where fit is within an epoch: its number, the batches trained in it so far and the sums behind
 * its running loss and accuracy (what a loop interrupted mid-epoch saves to continue with the
 * same logs: eg_fit_options.initial_step and initial_progress). */
typedef struct eg_fit_progress {
    int epoch;
    int64_t step;
    eg_metric_mean loss, accuracy; /* weighted by the batches' sizes */
} eg_fit_progress;

/* The progress as of the last batch_end (or epoch_begin) into *progress. */
void eg_fit_state_progress(const eg_fit_state *state, eg_fit_progress *progress);
/* True unless fit runs under a strategy on a process other than the chief (rank 0): where
 * checkpoints and logs are written. */
bool eg_fit_state_is_chief(const eg_fit_state *state);

/* A callback: every function may be NULL. A non-OK status stops fit with that error (the
 * callback raises its own message, or fit names the callback and the hook). epoch and batch count
 * from 0; batch restarts each epoch. fit calls the callbacks in the order given. */
typedef struct eg_callback {
    const char *name; /* for error messages; may be NULL */
    void *user;
    eg_status (*train_begin)(eg_fit_state *state, void *user);
    eg_status (*train_end)(eg_fit_state *state, const eg_logs *logs, void *user);
    eg_status (*epoch_begin)(eg_fit_state *state, int epoch, void *user);
    eg_status (*epoch_end)(eg_fit_state *state, int epoch, const eg_logs *logs, void *user);
    eg_status (*batch_begin)(eg_fit_state *state, int64_t batch, void *user);
    eg_status (*batch_end)(eg_fit_state *state, int64_t batch, const eg_logs *logs, void *user);
    void (*destroy)(void *user); /* called by eg_callback_free */
} eg_callback;

/* Frees a callback made by an eg_callback_*_new constructor (destroy, then the struct). NULL is
 * ignored. */
void eg_callback_free(eg_callback *callback);

typedef enum eg_monitor_mode {
    EG_MONITOR_AUTO = 0, /* max for names containing "acc", else min (Keras) */
    EG_MONITOR_MIN,
    EG_MONITOR_MAX
} eg_monitor_mode;

typedef struct eg_early_stopping_options {
    const char *monitor; /* NULL: "val_loss"; copied */
    double min_delta;    /* an improvement must exceed this (>= 0) */
    int patience;        /* epochs without improvement before stopping (>= 0) */
    eg_monitor_mode mode;
    /* When it stops, the variables get their values of the best epoch back. */
    bool restore_best_weights;
} eg_early_stopping_options;

/* Keras' EarlyStopping: stops when the monitored value has not improved for `patience` epochs.
 * A monitor the logs lack is an error at the first epoch's end naming it and what the logs hold.
 * NULL with an error for invalid options. */
eg_callback *eg_callback_early_stopping_new(const eg_early_stopping_options *options);
/* The epoch it stopped after (from 0), or -1 when it did not stop. */
int eg_callback_early_stopping_stopped_epoch(const eg_callback *callback);

/* Keras' CSVLogger (on the chief process only): one row per epoch, "epoch" then the logs' names
 * (the first epoch's, in order) to `path` (copied), comma-separated, flushed each epoch; append
 * keeps the file's rows (writing the header only to an empty file). Opening fails at train begin
 * with EG_ERR_IO naming the path. NULL with an error for a NULL path. */
eg_callback *eg_callback_csv_logger_new(const char *path, bool append);

typedef struct eg_model_checkpoint_options {
    /* Where to save; "{epoch}" is replaced by the epoch's number from 1 (Keras' ModelCheckpoint
     * "{epoch:02d}", unformatted). Copied. */
    const char *path;
    const char *monitor; /* NULL: "val_loss"; used by save_best_only */
    eg_monitor_mode mode;
    bool save_best_only;    /* save only when the monitored value improves on its best */
    bool save_weights_only; /* eg_model_save_weights; else eg_training_save (the whole run) */
} eg_model_checkpoint_options;

/* Keras' ModelCheckpoint: saves after every epoch (or every improving one), on the chief
 * process. A save that fails stops fit with its error. NULL with an error for a NULL path. */
eg_callback *eg_callback_model_checkpoint_new(const eg_model_checkpoint_options *options);
/* How many times it saved in the last fit. */
int eg_callback_model_checkpoint_saved(const eg_callback *callback);

typedef struct eg_reduce_lr_on_plateau_options {
    const char *monitor; /* NULL: "val_loss" */
    eg_monitor_mode mode;
    double factor;    /* the rate is multiplied by this, in (0, 1); default 0.1 */
    int patience;     /* epochs without improvement first; default 10 */
    double min_delta; /* an improvement beats the best by more; default 1e-4 */
    int cooldown;     /* epochs after a reduction before counting again; default 0 */
    double min_lr;    /* never below; default 0 */
} eg_reduce_lr_on_plateau_options;

eg_reduce_lr_on_plateau_options eg_reduce_lr_on_plateau_options_default(void);
/* Keras' ReduceLROnPlateau: after `patience` epochs without improvement of the monitored value
 * the optimizer's learning rate becomes max(rate * factor, min_lr) (a constant schedule from
 * then on). NULL with an error for invalid options. */
eg_callback *eg_callback_reduce_lr_on_plateau_new(const eg_reduce_lr_on_plateau_options *options);

/* The learning rate for `epoch` (from 0) given the current one. */
typedef double (*eg_epoch_schedule_fn)(int epoch, double learning_rate, void *user);
/* Keras' LearningRateScheduler: at each epoch's begin the optimizer's rate becomes
 * schedule(epoch, rate, user) (a constant schedule); a negative or non-finite rate is an error
 * naming the epoch. user is borrowed. */
eg_callback *eg_callback_learning_rate_scheduler_new(eg_epoch_schedule_fn schedule, void *user);

/* Keras' TensorBoard (epoch scalars): every epoch's logs as scalars "epoch_<name>" at step epoch
 * in an event file under logdir (eagle/summary.h), on the chief process. The writer opens at
 * the first fit's begin (an unwritable logdir stops it with EG_ERR_IO naming it). */
eg_callback *eg_callback_tensorboard_new(const char *logdir);

/* ---- a whole run, saved and restored ---- */

/* Where a training loop is: epochs completed, and the steps of the next one already trained
 * (0 at an epoch's end). */
typedef struct eg_training_position {
    int64_t epoch, step;
} eg_training_position;

/* Writes, atomically, to one safetensors file at path everything a loop needs to continue
 * exactly where it is: every variable of the model by name (as eg_model_save_weights), the
 * optimizer's slots ("optimizer/<variable>/<slot>"), its kind, step counter and loss-scaling
 * state, this thread's default generator's state (dropout and other draws come again) and
 * position, plus n_metadata pairs of the caller's (keys must not start with "eagle."; at most
 * 16). Errors as eg_safetensors_save; EG_ERR_INVALID_ARGUMENT for a reserved key. */
eg_status eg_training_save(const char *path, eg_model *model, const eg_optimizer *optimizer,
                           const eg_training_position *position, int n_metadata,
                           const char *const *keys, const char *const *values);
/* Restores a file of eg_training_save into a model built as the saved one and an optimizer made
 * with the same constructor and options: variables, slots, step counter, loss-scaling state,
 * the default generator's state; *position gets where the run was. A loop that continues from
 * there computes what the uninterrupted one did, bit for bit. Everything is checked first (the
 * optimizer's kind, every variable's and slot's presence, dtype and shape, the metadata), and an
 * error names what differs before anything changes. The caller's metadata is read with
 * eg_safetensors_open / eg_safetensors_metadata. */
eg_status eg_training_load(const char *path, eg_model *model, eg_optimizer *optimizer,
                           eg_training_position *position);

/* The traced training step's statistics (graph mode: traces, nodes, kernels, arena, the last
 * retrace warning; eagle/lazy.h) into *stats; under a strategy replica 0's. EG_ERR_STATE when
 * the model is not compiled in graph mode or has not trained yet. */
eg_status eg_model_train_step_stats(const eg_model *model, eg_function_stats *stats);

/* ---- fit, evaluate, predict ---- */

typedef struct eg_fit_options {
    int epochs;        /* default 1; >= 1 */
    int initial_epoch; /* the first epoch's number (resuming); default 0 */
    /* Batches evaluated after each epoch into val_loss / val_accuracy (borrowed); NULL: none. */
    eg_dataset *validation_data;
    /* 0 silent; 1 a progress bar per epoch (on a terminal; elsewhere one line per epoch); 2 one
     * line per epoch. Default 1. */
    int verbose;
    FILE *out; /* where verbose writes; NULL: stdout */
    int n_callbacks;
    eg_callback *const *callbacks; /* borrowed */
    int64_t steps_per_epoch;       /* 0 (default): until the dataset ends */
    /* Data parallelism (eagle/distribute.h; borrowed; NULL: none): every process iterates the
     * same batches and trains on its share of each (eg_strategy_split_batch), the gradients
     * summed over the replicas; the logs are the global batches'. fit first sets every
     * replica's variables to replica 0's. Several replicas in this process need
     * build_replica. verbose prints on the chief only; callbacks run on every process
     * (eg_fit_state_is_chief), on replica 0's model and optimizer. */
    eg_strategy *strategy;
    /* A strategy with several replicas in this process (mirrored over local devices) needs a
     * model and an optimizer per replica: fit calls build_replica(local_index, &model,
     * &optimizer, build_replica_user) for each local replica but the first (whose are the
     * compiled model and its optimizer) with the replica's device as the current one; they must
     * be built as the first ones are (same layers, names, optimizer constructor and options) and
     * belong to fit, which frees them when it returns. Each starts from replica 0's variables,
     * optimizer slots, step and loss-scaling state, applies the same summed gradients and follows
     * rate changes that callbacks make on replica 0's optimizer; the non-trainable variables
     * (batch normalization's moving statistics) are averaged over the replicas at each epoch's
     * end, so replica 0's model holds the training's result. NULL with several local replicas:
     * EG_ERR_UNSUPPORTED. */
    eg_status (*build_replica)(int local_index, eg_model **model, eg_optimizer **optimizer,
                               void *user);
    void *build_replica_user;
    /* Resuming within an epoch: the first epoch (initial_epoch) had its first initial_step
     * batches trained, their sums in initial_progress (from eg_fit_state_progress); `train`'s
     * first iteration must give the batch after them (the caller positions it). 0: the epoch
     * starts from its first batch. steps_per_epoch counts the epoch's batches from its first. */
    int64_t initial_step;
    eg_fit_progress initial_progress;
} eg_fit_options;

eg_fit_options eg_fit_options_default(void);

/* Trains the compiled model (Keras' fit): per epoch, every batch of `train` through one step —
 * the forward pass, the loss, its gradient, the optimizer's update (loss-scaled when the
 * optimizer has loss scaling) — then the validation data, then the callbacks' epoch_end.
 * Returns the history (caller frees), NULL with an error: EG_ERR_STATE when not compiled, an
 * element that is not (x, y), a failing step or callback (the history so far is lost; the
 * variables keep the updates made). options NULL: the defaults. */
eg_history *eg_model_fit(eg_model *model, eg_dataset *train, const eg_fit_options *options);

/* Keras' fit(x, y, batch_size, validation_split, shuffle) on tensors: the last
 * validation_split (in [0, 1)) of the rows are held out, unshuffled, as the validation data
 * (options->validation_data must then be NULL); the others are batched, reshuffled each epoch
 * when shuffle (from seed). x and y must agree in their first dimension. */
eg_history *eg_model_fit_arrays(eg_model *model, const eg_tensor *x, const eg_tensor *y,
                                int64_t batch_size, double validation_split, bool shuffle,
                                uint64_t seed, const eg_fit_options *options);

typedef struct eg_evaluate_options {
    int verbose;           /* 0 (default) silent, 1 or 2 one line */
    FILE *out;             /* NULL: stdout */
    int64_t steps;         /* 0: the whole dataset */
    eg_strategy *strategy; /* as eg_fit_options.strategy: each process evaluates its shares */
} eg_evaluate_options;

/* The compiled loss and metrics over every batch of `data` (Keras' evaluate; batch means
 * weighted by batch size) into *results ("loss", "accuracy"). options NULL: silent. */
eg_status eg_model_evaluate(eg_model *model, eg_dataset *data, const eg_evaluate_options *options,
                            eg_logs *results);

/* The model's outputs (inference: training false) for x, batch_size rows at a time (>= 1),
 * concatenated: a new tensor (B, ...). NULL with an error. The model need not be compiled. */
eg_tensor *eg_model_predict(eg_model *model, const eg_tensor *x, int64_t batch_size);
/* The same over a dataset's batches (component 0 of each element). */
eg_tensor *eg_model_predict_dataset(eg_model *model, eg_dataset *data);

#if !defined(EG_NO_CALLSITE)
#define eg_model_compile(...)          EG_CALLSITE_(eg_model_compile(__VA_ARGS__))
#define eg_model_fit(...)              EG_CALLSITE_(eg_model_fit(__VA_ARGS__))
#define eg_model_train_step_stats(...) EG_CALLSITE_(eg_model_train_step_stats(__VA_ARGS__))
#define eg_model_fit_arrays(...)       EG_CALLSITE_(eg_model_fit_arrays(__VA_ARGS__))
#define eg_model_evaluate(...)         EG_CALLSITE_(eg_model_evaluate(__VA_ARGS__))
#define eg_model_predict(...)          EG_CALLSITE_(eg_model_predict(__VA_ARGS__))
#define eg_model_predict_dataset(...)  EG_CALLSITE_(eg_model_predict_dataset(__VA_ARGS__))
#define eg_callback_early_stopping_new(...)                                                        \
    EG_CALLSITE_(eg_callback_early_stopping_new(__VA_ARGS__))
#define eg_callback_csv_logger_new(...) EG_CALLSITE_(eg_callback_csv_logger_new(__VA_ARGS__))
#define eg_training_save(...)           EG_CALLSITE_(eg_training_save(__VA_ARGS__))
#define eg_callback_model_checkpoint_new(...)                                                      \
    EG_CALLSITE_(eg_callback_model_checkpoint_new(__VA_ARGS__))
#define eg_callback_reduce_lr_on_plateau_new(...)                                                  \
    EG_CALLSITE_(eg_callback_reduce_lr_on_plateau_new(__VA_ARGS__))
#define eg_callback_learning_rate_scheduler_new(...)                                               \
    EG_CALLSITE_(eg_callback_learning_rate_scheduler_new(__VA_ARGS__))
#define eg_callback_tensorboard_new(...) EG_CALLSITE_(eg_callback_tensorboard_new(__VA_ARGS__))
#define eg_training_load(...)            EG_CALLSITE_(eg_training_load(__VA_ARGS__))
#endif

#ifdef __cplusplus
}
#endif

#endif
