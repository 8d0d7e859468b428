/* Internal: the training loop's pieces (eagle/fit.h) shared by fit.c (compile, the steps, fit,
 * evaluate, predict, the progress line) and callbacks.c (logs, history, the ready callbacks).
 *
 * train/ sits above nn, optim, data and dist (scripts/check_layers.py): it composes a model, an
 * optimizer and datasets, which are peers that never call each other. */
#ifndef EAGLE_SRC_TRAIN_INTERNAL_H
#define EAGLE_SRC_TRAIN_INTERNAL_H

#include "eagle/fit.h"
#include "eagle/lazy.h"

/* What eg_model_compile attached to a model. */
typedef struct eg__fit_config {
    eg_model *model;
    eg_optimizer *optimizer; /* borrowed */
    eg_compile_options options;
    eg_function *train_function, *test_function; /* graph mode, made on first use */
} eg__fit_config;

struct eg_fit_state {
    eg__fit_config *config;
    eg_history *history;
    bool stop;
};

/* Appends an epoch's logs to the history (new names get NaN for earlier epochs). */
eg_status eg__history_append(eg_history *history, const eg_logs *logs);
eg_history *eg__history_new(void);

/* Adds name = value to logs (name must outlive the logs); false when full. */
bool eg__logs_add(eg_logs *logs, const char *name, double value);

#endif
