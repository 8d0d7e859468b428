/* The ready callbacks that change or save the run: model checkpoint, reduce-on-plateau, a
 * learning-rate schedule per epoch, TensorBoard (callbacks.c has early stopping and the CSV
 * logger). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "eagle/summary.h"
#include "train/internal.h"

/* ---- model checkpoint ---- */

typedef struct checkpoint {
    char *path;
    eg__monitor watched;
    bool best_only, weights_only;
    int saved;
} checkpoint;

static void checkpoint_destroy(void *user) {
    checkpoint *c = user;
    free(c->watched.name);
    free(c->path);
    free(c);
}

static eg_status checkpoint_begin(eg_fit_state *state, void *user) {
    (void)state;
    checkpoint *c = user;
    eg__monitor_reset(&c->watched);
    c->saved = 0;
    return EG_OK;
}

/* path with "{epoch}" replaced by number (as Keras' "{epoch:02d}", without the format). */
static eg_status format_path(const char *pattern, int number, char *out, size_t size) {
    const char *mark = strstr(pattern, "{epoch}");
    int n = mark ? snprintf(out, size, "%.*s%d%s", (int)(mark - pattern), pattern, number,
                            mark + strlen("{epoch}"))
                 : snprintf(out, size, "%s", pattern);
    if (n < 0 || (size_t)n >= size)
        return eg__error(EG_ERR_INVALID_ARGUMENT, "model_checkpoint: path '%s' is too long",
                         pattern);
    return EG_OK;
}

static eg_status checkpoint_epoch_end(eg_fit_state *state, int epoch, const eg_logs *logs,
                                      void *user) {
    checkpoint *c = user;
    if (c->best_only) {
        double value;
        eg_status status = eg__monitor_read(&c->watched, logs, &value, "model_checkpoint");
        if (status != EG_OK) return status;
        if (!eg__monitor_improved(&c->watched, value)) return EG_OK;
    }
    if (!eg_fit_state_is_chief(state)) return EG_OK;
    char path[4096];
    eg_status status = format_path(c->path, epoch + 1, path, sizeof path);
    if (status != EG_OK) return status;
    eg_model *model = eg_fit_state_model(state);
    eg_training_position at = {.epoch = epoch + 1};
    status = c->weights_only
                 ? eg_model_save_weights(model, path)
                 : eg_training_save(path, model, eg_fit_state_optimizer(state), &at, 0, NULL, NULL);
    if (status == EG_OK) c->saved++;
    return status;
}

eg_callback *eg_callback_model_checkpoint_new(const eg_model_checkpoint_options *options) {
    if (!options || !options->path) {
        eg__error(EG_ERR_NULL_ARGUMENT, "model_checkpoint: options or path is NULL");
        return NULL;
    }
    checkpoint *c = calloc(1, sizeof *c);
    if (!c || !(c->path = strdup(options->path))) {
        free(c);
        eg__error(EG_ERR_OUT_OF_MEMORY, "model_checkpoint: out of host memory");
        return NULL;
    }
    if (!eg__monitor_init(&c->watched, options->monitor, options->mode, 0, "model_checkpoint")) {
        checkpoint_destroy(c);
        return NULL;
    }
    c->best_only = options->save_best_only;
    c->weights_only = options->save_weights_only;
    eg_callback *cb = eg__callback_new("model_checkpoint", c, checkpoint_destroy);
    if (cb) {
        cb->train_begin = checkpoint_begin;
        cb->epoch_end = checkpoint_epoch_end;
    }
    return cb;
}

int eg_callback_model_checkpoint_saved(const eg_callback *callback) {
    if (!callback || callback->destroy != checkpoint_destroy) return 0;
    return ((const checkpoint *)callback->user)->saved;
}

/* ---- reduce on plateau ---- */

typedef struct plateau {
    eg__monitor watched;
    eg_reduce_lr_on_plateau_options o;
    int wait, cooldown_left;
} plateau;

static void plateau_destroy(void *user) {
    plateau *p = user;
    free(p->watched.name);
    free(p);
}

static eg_status plateau_begin(eg_fit_state *state, void *user) {
    (void)state;
    plateau *p = user;
    eg__monitor_reset(&p->watched);
    p->wait = p->cooldown_left = 0;
    return EG_OK;
}

static eg_status plateau_epoch_end(eg_fit_state *state, int epoch, const eg_logs *logs,
                                   void *user) {
    (void)epoch;
    plateau *p = user;
    double value;
    eg_status status = eg__monitor_read(&p->watched, logs, &value, "reduce_lr_on_plateau");
    if (status != EG_OK) return status;
    if (p->cooldown_left > 0) {
        p->cooldown_left--;
        p->wait = 0;
    }
    if (eg__monitor_improved(&p->watched, value)) {
        p->wait = 0;
        return EG_OK;
    }
    if (p->cooldown_left > 0 || ++p->wait < p->o.patience) return EG_OK;
    eg_optimizer *opt = eg_fit_state_optimizer(state);
    double rate = eg_optimizer_learning_rate(opt);
    if (rate <= p->o.min_lr) return EG_OK;
    double lower = fmax(rate * p->o.factor, p->o.min_lr);
    p->wait = 0;
    p->cooldown_left = p->o.cooldown;
    return eg_optimizer_set_learning_rate(opt, eg_schedule_constant(lower));
}

eg_reduce_lr_on_plateau_options eg_reduce_lr_on_plateau_options_default(void) {
    return (eg_reduce_lr_on_plateau_options){
        .factor = 0.1, .patience = 10, .min_delta = 1e-4, .min_lr = 0, .cooldown = 0};
}

eg_callback *eg_callback_reduce_lr_on_plateau_new(const eg_reduce_lr_on_plateau_options *options) {
    eg_reduce_lr_on_plateau_options o =
        options ? *options : eg_reduce_lr_on_plateau_options_default();
    if (!(o.factor > 0 && o.factor < 1) || o.patience < 0 || o.cooldown < 0 || !(o.min_lr >= 0)) {
        eg__error(EG_ERR_INVALID_ARGUMENT,
                  "reduce_lr_on_plateau: factor %g must be in (0, 1), patience %d and cooldown %d "
                  ">= 0, min_lr %g >= 0",
                  o.factor, o.patience, o.cooldown, o.min_lr);
        return NULL;
    }
    plateau *p = calloc(1, sizeof *p);
    if (!p) {
        eg__error(EG_ERR_OUT_OF_MEMORY, "reduce_lr_on_plateau: out of host memory");
        return NULL;
    }
    if (!eg__monitor_init(&p->watched, o.monitor, o.mode, o.min_delta, "reduce_lr_on_plateau")) {
        free(p);
        return NULL;
    }
    p->o = o;
    p->o.monitor = NULL; /* the copy in watched is the one kept */
    eg_callback *cb = eg__callback_new("reduce_lr_on_plateau", p, plateau_destroy);
    if (cb) {
        cb->train_begin = plateau_begin;
        cb->epoch_end = plateau_epoch_end;
    }
    return cb;
}

/* ---- a learning rate per epoch ---- */

typedef struct scheduler {
    eg_epoch_schedule_fn schedule;
    void *user;
} scheduler;

static eg_status scheduler_epoch_begin(eg_fit_state *state, int epoch, void *user) {
    scheduler *s = user;
    eg_optimizer *opt = eg_fit_state_optimizer(state);
    eg__callback_frame frame;
    eg__callback_begin(&frame);
    double rate = s->schedule(epoch, eg_optimizer_learning_rate(opt), s->user);
    eg__callback_end(&frame);
    if (!(rate >= 0) || !isfinite(rate))
        return eg__error(EG_ERR_INVALID_ARGUMENT,
                         "learning_rate_scheduler: the schedule gave %g for epoch %d", rate, epoch);
    return eg_optimizer_set_learning_rate(opt, eg_schedule_constant(rate));
}

eg_callback *eg_callback_learning_rate_scheduler_new(eg_epoch_schedule_fn schedule, void *user) {
    if (!schedule) {
        eg__error(EG_ERR_NULL_ARGUMENT, "learning_rate_scheduler: schedule is NULL");
        return NULL;
    }
    scheduler *s = malloc(sizeof *s);
    if (!s) {
        eg__error(EG_ERR_OUT_OF_MEMORY, "learning_rate_scheduler: out of host memory");
        return NULL;
    }
    *s = (scheduler){schedule, user};
    eg_callback *cb = eg__callback_new("learning_rate_scheduler", s, free);
    if (cb) cb->epoch_begin = scheduler_epoch_begin;
    return cb;
}

/* ---- TensorBoard ---- */

typedef struct board {
    char *logdir;
    eg_summary_writer *writer;
} board;

static void board_destroy(void *user) {
    board *b = user;
    eg_summary_writer_free(b->writer);
    free(b->logdir);
    free(b);
}

static eg_status board_begin(eg_fit_state *state, void *user) {
    board *b = user;
    if (!eg_fit_state_is_chief(state) || b->writer) return EG_OK;
    b->writer = eg_summary_writer_new(b->logdir);
    return b->writer ? EG_OK : eg_last_status();
}

static eg_status board_epoch_end(eg_fit_state *state, int epoch, const eg_logs *logs, void *user) {
    (void)state;
    board *b = user;
    eg_status status = EG_OK;
    for (int i = 0; b->writer && i < logs->n && status == EG_OK; i++) {
        char tag[128];
        snprintf(tag, sizeof tag, "epoch_%s", logs->names[i]);
        status = eg_summary_scalar(b->writer, tag, epoch, logs->values[i]);
    }
    return status == EG_OK && b->writer ? eg_summary_flush(b->writer) : status;
}

eg_callback *eg_callback_tensorboard_new(const char *logdir) {
    if (!logdir) {
        eg__error(EG_ERR_NULL_ARGUMENT, "tensorboard: logdir is NULL");
        return NULL;
    }
    board *b = calloc(1, sizeof *b);
    if (!b || !(b->logdir = strdup(logdir))) {
        free(b);
        eg__error(EG_ERR_OUT_OF_MEMORY, "tensorboard: out of host memory");
        return NULL;
    }
    eg_callback *cb = eg__callback_new("tensorboard", b, board_destroy);
    if (cb) {
        cb->train_begin = board_begin;
        cb->epoch_end = board_epoch_end;
    }
    return cb;
}
