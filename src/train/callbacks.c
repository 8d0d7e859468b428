/* Logs, the history, the fit state seen by callbacks, and the ready callbacks (early stopping,
 * CSV logger). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "eagle/autograd.h"
#include "train/internal.h"

/* ---- logs ---- */

bool eg_logs_get(const eg_logs *logs, const char *name, double *value) {
    for (int i = 0; logs && name && i < logs->n; i++)
        if (!strcmp(logs->names[i], name)) {
            if (value) *value = logs->values[i];
            return true;
        }
    return false;
}

bool eg__logs_add(eg_logs *logs, const char *name, double value) {
    if (logs->n == EG_LOGS_MAX) return false;
    logs->names[logs->n] = name;
    logs->values[logs->n++] = value;
    return true;
}

/* ---- history ---- */

typedef struct history_column {
    char *name;
    double *values; /* one per epoch */
} history_column;

struct eg_history {
    int n_epochs, capacity;
    history_column *columns;
    int n_columns;
};

eg_history *eg__history_new(void) {
    eg_history *h = calloc(1, sizeof *h);
    if (!h) eg__error(EG_ERR_OUT_OF_MEMORY, "fit: out of host memory for the history");
    return h;
}

static history_column *column_named(const eg_history *h, const char *name) {
    for (int i = 0; h && name && i < h->n_columns; i++)
        if (!strcmp(h->columns[i].name, name)) return &h->columns[i];
    return NULL;
}

static eg_status out_of_memory(void) {
    return eg__error(EG_ERR_OUT_OF_MEMORY, "fit: out of host memory for the history");
}

eg_status eg__history_append(eg_history *h, const eg_logs *logs) {
    if (h->n_epochs == h->capacity) {
        int capacity = h->capacity ? 2 * h->capacity : 16;
        for (int i = 0; i < h->n_columns; i++) {
            double *grown = realloc(h->columns[i].values, sizeof(double) * (size_t)capacity);
            if (!grown) return out_of_memory();
            h->columns[i].values = grown;
        }
        h->capacity = capacity;
    }
    for (int k = 0; k < logs->n; k++) {
        if (column_named(h, logs->names[k])) continue;
        history_column *grown = realloc(h->columns, sizeof *grown * (size_t)(h->n_columns + 1));
        if (!grown) return out_of_memory();
        h->columns = grown;
        history_column *c = &h->columns[h->n_columns];
        c->name = strdup(logs->names[k]);
        c->values = malloc(sizeof(double) * (size_t)h->capacity);
        if (!c->name || !c->values) {
            free(c->name);
            free(c->values);
            return out_of_memory();
        }
        for (int e = 0; e < h->n_epochs; e++) c->values[e] = NAN;
        h->n_columns++;
    }
    for (int i = 0; i < h->n_columns; i++) {
        double value = NAN;
        eg_logs_get(logs, h->columns[i].name, &value);
        h->columns[i].values[h->n_epochs] = value;
    }
    h->n_epochs++;
    return EG_OK;
}

int eg_history_n_epochs(const eg_history *history) {
    return history ? history->n_epochs : 0;
}

int eg_history_n_metrics(const eg_history *history) {
    return history ? history->n_columns : 0;
}

const char *eg_history_metric_name(const eg_history *history, int index) {
    if (!history || index < 0 || index >= history->n_columns) return NULL;
    return history->columns[index].name;
}

const double *eg_history_values(const eg_history *history, const char *name, int *n) {
    history_column *c = column_named(history, name);
    if (n) *n = c ? history->n_epochs : 0;
    return c ? c->values : NULL;
}

void eg_history_free(eg_history *history) {
    if (!history) return;
    for (int i = 0; i < history->n_columns; i++) {
        free(history->columns[i].name);
        free(history->columns[i].values);
    }
    free(history->columns);
    free(history);
}

/* ---- the state callbacks see ---- */

eg_model *eg_fit_state_model(const eg_fit_state *state) {
    return state ? state->config->model : NULL;
}

eg_optimizer *eg_fit_state_optimizer(const eg_fit_state *state) {
    return state ? state->config->optimizer : NULL;
}

const eg_history *eg_fit_state_history(const eg_fit_state *state) {
    return state ? state->history : NULL;
}

void eg_fit_state_stop(eg_fit_state *state) {
    if (state) state->stop = true;
}

void eg_fit_state_progress(const eg_fit_state *state, eg_fit_progress *progress) {
    if (progress) *progress = state ? state->progress : (eg_fit_progress){0};
}

bool eg_fit_state_is_chief(const eg_fit_state *state) {
    return !state || !state->config->strategy || eg_strategy_is_chief(state->config->strategy);
}

void eg_callback_free(eg_callback *callback) {
    if (!callback) return;
    if (callback->destroy) callback->destroy(callback->user);
    free(callback);
}

eg_callback *eg__callback_new(const char *name, void *user, void (*destroy)(void *)) {
    eg_callback *c = calloc(1, sizeof *c);
    if (!c) {
        destroy(user);
        eg__error(EG_ERR_OUT_OF_MEMORY, "%s: out of host memory", name);
        return NULL;
    }
    c->name = name;
    c->user = user;
    c->destroy = destroy;
    return c;
}

const char *eg__log_names(const eg_logs *logs, char *buf, size_t size) {
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i < logs->n && used < size; i++)
        used += (size_t)snprintf(buf + used, size - used, "%s%s", i ? ", " : "", logs->names[i]);
    return logs->n ? buf : "nothing";
}

/* ---- monitored values ---- */

bool eg__monitor_init(eg__monitor *m, const char *name, eg_monitor_mode mode, double min_delta,
                      const char *what) {
    if (!(min_delta >= 0) || (unsigned)mode > EG_MONITOR_MAX) {
        eg__error(EG_ERR_INVALID_ARGUMENT, "%s: min_delta %g must be >= 0 and mode %d known", what,
                  min_delta, (int)mode);
        return false;
    }
    m->name = strdup(name ? name : "val_loss");
    if (!m->name) {
        eg__error(EG_ERR_OUT_OF_MEMORY, "%s: out of host memory", what);
        return false;
    }
    m->maximize = mode == EG_MONITOR_MAX || (mode == EG_MONITOR_AUTO && strstr(m->name, "acc"));
    m->min_delta = min_delta;
    eg__monitor_reset(m);
    return true;
}

void eg__monitor_reset(eg__monitor *m) {
    m->best = m->maximize ? -INFINITY : INFINITY;
}

eg_status eg__monitor_read(const eg__monitor *m, const eg_logs *logs, double *value,
                           const char *what) {
    if (eg_logs_get(logs, m->name, value)) return EG_OK;
    char names[512];
    return eg__error(EG_ERR_INVALID_ARGUMENT, "%s: the logs have no '%s' to monitor (they hold %s)",
                     what, m->name, eg__log_names(logs, names, sizeof names));
}

bool eg__monitor_improved(eg__monitor *m, double value) {
    bool better = m->maximize ? value - m->min_delta > m->best : value + m->min_delta < m->best;
    if (better) m->best = value;
    return better;
}

/* ---- early stopping ---- */

typedef struct early_stopping {
    eg__monitor watched;
    int patience;
    bool restore;
    int wait, best_epoch, stopped_epoch;
    /* the variables at the best epoch (restore_best_weights) */
    int n_saved;
    void **saved;
    size_t *saved_bytes;
} early_stopping;

static void forget_saved(early_stopping *e) {
    for (int i = 0; i < e->n_saved; i++) free(e->saved[i]);
    free(e->saved);
    free(e->saved_bytes);
    e->saved = NULL;
    e->saved_bytes = NULL;
    e->n_saved = 0;
}

static void early_stopping_destroy(void *user) {
    early_stopping *e = user;
    forget_saved(e);
    free(e->watched.name);
    free(e);
}

static eg_status early_stopping_begin(eg_fit_state *state, void *user) {
    (void)state;
    early_stopping *e = user;
    eg__monitor_reset(&e->watched);
    e->wait = 0;
    e->best_epoch = e->stopped_epoch = -1;
    forget_saved(e);
    return EG_OK;
}

/* Host copies of every model variable, for restoring the best epoch's. */
static eg_status save_variables(early_stopping *e, eg_model *model) {
    int n;
    eg_tensor *const *vars = eg_model_variables(model, &n);
    if (!vars) return eg_last_status();
    forget_saved(e);
    e->saved = calloc((size_t)(n ? n : 1), sizeof *e->saved);
    e->saved_bytes = calloc((size_t)(n ? n : 1), sizeof *e->saved_bytes);
    if (!e->saved || !e->saved_bytes)
        return eg__error(EG_ERR_OUT_OF_MEMORY, "early_stopping: out of host memory");
    e->n_saved = n;
    for (int i = 0; i < n; i++) {
        size_t bytes = (size_t)eg_tensor_n_elems(vars[i]) * eg_dtype_size(eg_tensor_dtype(vars[i]));
        e->saved[i] = malloc(bytes ? bytes : 1);
        e->saved_bytes[i] = bytes;
        if (!e->saved[i])
            return eg__error(EG_ERR_OUT_OF_MEMORY, "early_stopping: out of host memory");
        eg_status status = eg_tensor_copy_to_host(vars[i], e->saved[i], bytes);
        if (status != EG_OK) return status;
    }
    return EG_OK;
}

static eg_status restore_variables(const early_stopping *e, eg_model *model) {
    int n;
    eg_tensor *const *vars = eg_model_variables(model, &n);
    if (!vars) return eg_last_status();
    if (n != e->n_saved)
        return eg__error(EG_ERR_STATE, "early_stopping: the model has %d variables, %d were saved",
                         n, e->n_saved);
    eg_status status = EG_OK;
    for (int i = 0; i < n && status == EG_OK; i++) {
        eg_tensor *value = eg_tensor_from_data(e->saved[i], eg_tensor_dtype(vars[i]),
                                               eg_tensor_n_dims(vars[i]), eg_tensor_shape(vars[i]));
        status = value ? eg_assign(vars[i], value) : eg_last_status();
        eg_release(value);
    }
    return status;
}

static eg_status early_stopping_epoch_end(eg_fit_state *state, int epoch, const eg_logs *logs,
                                          void *user) {
    early_stopping *e = user;
    double value;
    eg_status status = eg__monitor_read(&e->watched, logs, &value, "early_stopping");
    if (status != EG_OK) return status;
    if (eg__monitor_improved(&e->watched, value)) {
        e->best_epoch = epoch;
        e->wait = 0;
        return e->restore ? save_variables(e, eg_fit_state_model(state)) : EG_OK;
    }
    /* Keras: after `patience` epochs without improvement (patience 0: the first such epoch) */
    if (++e->wait < e->patience) return EG_OK;
    e->stopped_epoch = epoch;
    eg_fit_state_stop(state);
    return e->restore && e->n_saved ? restore_variables(e, eg_fit_state_model(state)) : EG_OK;
}

eg_callback *eg_callback_early_stopping_new(const eg_early_stopping_options *options) {
    eg_early_stopping_options o = options ? *options : (eg_early_stopping_options){0};
    if (!(o.min_delta >= 0) || o.patience < 0 || (unsigned)o.mode > EG_MONITOR_MAX) {
        eg__error(EG_ERR_INVALID_ARGUMENT,
                  "early_stopping: min_delta %g must be >= 0, patience %d >= 0, mode %d known",
                  o.min_delta, o.patience, (int)o.mode);
        return NULL;
    }
    early_stopping *e = calloc(1, sizeof *e);
    if (!e) {
        eg__error(EG_ERR_OUT_OF_MEMORY, "early_stopping: out of host memory");
        return NULL;
    }
    if (!eg__monitor_init(&e->watched, o.monitor, o.mode, o.min_delta, "early_stopping")) {
        free(e);
        return NULL;
    }
    e->patience = o.patience;
    e->restore = o.restore_best_weights;
    e->stopped_epoch = -1;
    eg_callback *c = eg__callback_new("early_stopping", e, early_stopping_destroy);
    if (c) {
        c->train_begin = early_stopping_begin;
        c->epoch_end = early_stopping_epoch_end;
    }
    return c;
}

int eg_callback_early_stopping_stopped_epoch(const eg_callback *callback) {
    if (!callback || callback->destroy != early_stopping_destroy) return -1;
    return ((const early_stopping *)callback->user)->stopped_epoch;
}

/* ---- CSV logger ---- */

typedef struct csv_logger {
    char *path;
    bool append;
    FILE *file;
    int n_columns;
    char **columns; /* the first epoch's names */
} csv_logger;

static void csv_close(csv_logger *c) {
    if (c->file) fclose(c->file);
    c->file = NULL;
    for (int i = 0; i < c->n_columns; i++) free(c->columns[i]);
    free(c->columns);
    c->columns = NULL;
    c->n_columns = 0;
}

static void csv_destroy(void *user) {
    csv_logger *c = user;
    csv_close(c);
    free(c->path);
    free(c);
}

static eg_status csv_begin(eg_fit_state *state, void *user) {
    csv_logger *c = user;
    csv_close(c);
    if (!eg_fit_state_is_chief(state)) return EG_OK;
    c->file = fopen(c->path, c->append ? "a" : "w");
    if (!c->file) return eg__error(EG_ERR_IO, "csv_logger: cannot open '%s' for writing", c->path);
    return EG_OK;
}

static eg_status csv_epoch_end(eg_fit_state *state, int epoch, const eg_logs *logs, void *user) {
    csv_logger *c = user;
    if (!eg_fit_state_is_chief(state)) return EG_OK;
    if (!c->file) return eg__error(EG_ERR_STATE, "csv_logger: '%s' is not open", c->path);
    if (!c->columns) {
        c->columns = calloc((size_t)(logs->n ? logs->n : 1), sizeof *c->columns);
        if (!c->columns) return eg__error(EG_ERR_OUT_OF_MEMORY, "csv_logger: out of host memory");
        for (int i = 0; i < logs->n; i++)
            if (!(c->columns[c->n_columns++] = strdup(logs->names[i])))
                return eg__error(EG_ERR_OUT_OF_MEMORY, "csv_logger: out of host memory");
        if (ftell(c->file) == 0) { /* a header for a new (or emptied) file only */
            fprintf(c->file, "epoch");
            for (int i = 0; i < c->n_columns; i++) fprintf(c->file, ",%s", c->columns[i]);
            fprintf(c->file, "\n");
        }
    }
    fprintf(c->file, "%d", epoch);
    for (int i = 0; i < c->n_columns; i++) {
        double value;
        if (eg_logs_get(logs, c->columns[i], &value))
            fprintf(c->file, ",%.17g", value);
        else
            fprintf(c->file, ",");
    }
    fprintf(c->file, "\n");
    if (fflush(c->file) != 0 || ferror(c->file))
        return eg__error(EG_ERR_IO, "csv_logger: writing '%s' failed", c->path);
    return EG_OK;
}

static eg_status csv_end(eg_fit_state *state, const eg_logs *logs, void *user) {
    (void)state, (void)logs;
    csv_logger *c = user;
    bool failed = c->file && fclose(c->file) != 0;
    c->file = NULL;
    return failed ? eg__error(EG_ERR_IO, "csv_logger: closing '%s' failed", c->path) : EG_OK;
}

eg_callback *eg_callback_csv_logger_new(const char *path, bool append) {
    if (!path) {
        eg__error(EG_ERR_NULL_ARGUMENT, "csv_logger: path is NULL");
        return NULL;
    }
    csv_logger *c = calloc(1, sizeof *c);
    char *copy = strdup(path);
    if (!c || !copy) {
        free(c);
        free(copy);
        eg__error(EG_ERR_OUT_OF_MEMORY, "csv_logger: out of host memory");
        return NULL;
    }
    c->path = copy;
    c->append = append;
    eg_callback *cb = eg__callback_new("csv_logger", c, csv_destroy);
    if (cb) {
        cb->train_begin = csv_begin;
        cb->epoch_end = csv_epoch_end;
        cb->train_end = csv_end;
    }
    return cb;
}
