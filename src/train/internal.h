/* Internal: the training loop's pieces (eagle/fit.h) shared by fit.c (compile, the steps, fit,
 * evaluate, predict, the progress line) and callbacks.c (logs, history, the ready callbacks).
 *
 * train/ sits above nn, optim, data and dist (scripts/check_layers.py): it composes a model, an
 * optimizer and datasets, which are peers that never call each other. */
#ifndef EAGLE_SRC_TRAIN_INTERNAL_H
#define EAGLE_SRC_TRAIN_INTERNAL_H

#include "eagle/distribute.h"
#include "eagle/fit.h"
#include "eagle/lazy.h"

/* What eg_model_compile attached to a model. */
typedef struct eg__fit_config eg__fit_config;
struct eg__fit_config {
    eg_model *model;
    eg_optimizer *optimizer; /* borrowed */
    eg_compile_options options;
    /* graph mode, made on first use: [training][replicated] */
    eg_function *functions[2][2];
    /* while a fit or evaluate runs under a strategy (borrowed), and the replica whose step runs */
    eg_strategy *strategy;
    const eg_replica_context *replica;
    /* during a fit under a strategy with several replicas here: each one's configuration ([0]
     * this one; the others built for the fit and freed with it) */
    eg__fit_config **locals;
    int n_locals;
    /* under a strategy: this process asks to stop (the step carries it to the others), and
     * whether the last step's sums say some process asked */
    bool stop_asked, stop_agreed;
};

struct eg_fit_state {
    eg__fit_config *config;
    eg_history *history;
    bool stop;
    eg_fit_progress progress;
};

/* The step in the compiled mode (fit.c). Alone: in x, y; out the batch's mean loss and accuracy
 * (0-d). As a replica (config->replica set): in x, y (the replica's share), its share of the
 * global batch and its stop request (1 or 0; f64 0-d each); out the loss and accuracy times the
 * examples and the stop requests, summed over the replicas (f64 0-d). */
eg_status eg__fit_call(eg__fit_config *c, bool training, eg_tensor *const *in, eg_tensor **out);

/* ---- under a strategy (replicated.c) ---- */
/* EG_ERR_UNSUPPORTED unless the strategy has one replica in this process or can_build. */
eg_status eg__fit_check_strategy(const eg_strategy *strategy, bool can_build, const char *what);
/* Builds and compiles the local replicas but the first with options->build_replica (c->locals);
 * then every replica's variables become replica 0's, and the local ones its optimizer's state. */
eg_status eg__fit_replicas_begin(eg__fit_config *c, const eg_fit_options *options);
/* Before a step: the local replicas' optimizers take replica 0's learning rate when a callback
 * changed it. */
eg_status eg__fit_replicas_follow(eg__fit_config *c);
/* The replicas' non-trainable variables become their mean over the replicas. */
eg_status eg__fit_replicas_average_statistics(eg__fit_config *c);
/* Frees what eg__fit_replicas_begin built. */
void eg__fit_replicas_end(eg__fit_config *c);
/* One global batch (x, y) on every replica, each its share: *loss and *accuracy get the global
 * batch's means. */
eg_status eg__fit_replicated_step(eg__fit_config *c, bool training, eg_tensor *const *in,
                                  double *loss, double *accuracy);
/* [loss x examples, accuracy x examples, stop] of this replica's share, f64 (3,), its sum over
 * the replicas started (a new reference; *tag names it for eg_all_reduce_done). stop: the
 * replica's stop request, an f64 0-d tensor (an input of a traced step). */
eg_tensor *eg__fit_totals_start(const eg_tensor *loss, const eg_tensor *accuracy, int64_t examples,
                                const eg_tensor *stop, int64_t *tag);
/* Waits for the totals reduction (when status is EG_OK) and puts its three sums into out[0..2]
 * as 0-d tensors (new references); releases totals. Returns status or the wait's error. */
eg_status eg__fit_totals_finish(eg_status status, eg_tensor *totals, int64_t tag, eg_tensor **out);

/* Appends an epoch's logs to the history (new names get NaN for earlier epochs). */
eg_status eg__history_append(eg_history *history, const eg_logs *logs);
eg_history *eg__history_new(void);

/* A heap callback with name, user and destroy (destroy(user) when out of memory); NULL then. */
eg_callback *eg__callback_new(const char *name, void *user, void (*destroy)(void *));
/* "loss, accuracy, val_loss" (the logs' names) into buf; "nothing" for none. */
const char *eg__log_names(const eg_logs *logs, char *buf, size_t size);

/* A monitored log value and its best so far (early stopping, model checkpoint, reduce on
 * plateau). */
typedef struct eg__monitor {
    char *name; /* owned */
    bool maximize;
    double min_delta, best;
} eg__monitor;

/* name (NULL: "val_loss", copied); mode AUTO maximizes names containing "acc" (Keras). false
 * with an error from `what` for a negative min_delta, an unknown mode or no memory. */
bool eg__monitor_init(eg__monitor *m, const char *name, eg_monitor_mode mode, double min_delta,
                      const char *what);
/* Forgets the best (a new fit). */
void eg__monitor_reset(eg__monitor *m);
/* The monitored value of logs; an error from `what` naming what the logs hold when absent. */
eg_status eg__monitor_read(const eg__monitor *m, const eg_logs *logs, double *value,
                           const char *what);
/* Whether value beats the best by more than min_delta (it is then the best). */
bool eg__monitor_improved(eg__monitor *m, double value);

/* Adds name = value to logs (name must outlive the logs); false when full. */
bool eg__logs_add(eg_logs *logs, const char *name, double value);

#endif
