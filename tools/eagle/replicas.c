#include <stdio.h>
#include <string.h>

#include "replicas.h"

typedef struct build_job {
    replicas *r;
    bool loss_scaling, broadcast;
} build_job;

static eg_status broadcast_replica(const eg_replica_context *c, void *user) {
    replicas *r = user;
    int n;
    eg_tensor *const *vars = eg_model_variables(r->state[c->local_index].model, &n);
    return vars ? eg_replica_broadcast_variables(c, n, vars) : eg_last_status();
}

bool replicas_init(replicas *r, eg_strategy *strategy, const char *mode, bool loss_scaling,
                   replicas_build_fn build, void *user, bool broadcast) {
    memset(r, 0, sizeof *r);
    r->strategy = strategy;
    r->mode = mode;
    if (!strategy) return false;
    r->n_local = eg_strategy_num_local_replicas(strategy);
    if (r->n_local > REPLICAS_MAX) {
        fprintf(stderr, "eagle train: %d local replicas, at most %d are supported\n", r->n_local,
                REPLICAS_MAX);
        return false;
    }
    /* In replica order on this thread: replica 0 draws its initial values from the default
     * generator exactly as a run alone does; the others then take replica 0's. */
    int several = eg_strategy_num_replicas(strategy) > 1;
    for (int i = 0; i < r->n_local; i++) {
        mlp_step_state *s = &r->state[i];
        eg_device_scope_begin(eg_strategy_device(strategy, i));
        eg_status status = build(&s->model, &s->optimizer, user);
        s->loss_scaling = loss_scaling;
        if (status == EG_OK && !strcmp(mode, "graph") &&
            !(r->graph[i] = eg_function_new("train_step", mlp_step, 2 + several, 2 + several, s)))
            status = eg_last_status();
        eg_device_scope_end();
        if (status != EG_OK) return false;
    }
    if (broadcast && eg_strategy_num_replicas(strategy) > 1)
        return eg_strategy_run(strategy, broadcast_replica, r) == EG_OK;
    return true;
}

/* This replica's part of the batch tensor t (all of it when training alone), on its device. */
static eg_tensor *share_of(const eg_replica_context *c, const eg_tensor *t, int64_t start,
                           int64_t count) {
    eg_tensor *part = c->num_replicas > 1 ? eg_slice(t, 0, start, start + count, 1) : NULL;
    const eg_tensor *source = part ? part : t;
    if (eg_tensor_device(source) == c->device) return part ? part : (eg_tensor *)source;
    return eg_tensor_to(source, c->device);
}

static eg_status step_replica(const eg_replica_context *c, void *user) {
    replicas *r = user;
    mlp_step_state *s = &r->state[c->local_index];
    int64_t start, count;
    eg_strategy_split_batch(c->strategy, r->global_n, c->replica_id, &start, &count);
    if (count == 0) {
        fprintf(stderr,
                "eagle train: a batch of %lld examples leaves replica %d none (use a "
                "batch size of at least the replica count)\n",
                (long long)r->global_n, c->replica_id);
        return EG_ERR_INVALID_ARGUMENT;
    }
    eg_scope_begin();
    bool several = c->num_replicas > 1;
    int64_t one = 1;
    const eg_tensor *in[3] = {
        share_of(c, r->batch[0], start, count), share_of(c, r->batch[1], start, count),
        several ? eg_tensor_from_data(&r->stop, EG_DTYPE_F64, 1, &one) : NULL};
    eg_tensor *out[3] = {NULL, NULL, NULL};
    s->replica = several ? c : NULL;
    s->share = (double)count / (double)r->global_n;
    eg_status status = in[0] && in[1] && (in[2] || !several) ? EG_OK : eg_last_status();
    if (status == EG_OK) {
        if (!strcmp(r->mode, "graph")) {
            status = eg_function_call(r->graph[c->local_index], in, out);
        } else if (!strcmp(r->mode, "lazy")) {
            eg_lazy_begin();
            status = mlp_step(in, out, s);
            eg_lazy_end();
        } else {
            status = mlp_step(in, out, s);
        }
    }
    double values[3] = {0, 0, r->stop};
    if (status == EG_OK) {
        r->single_loss = eg_item(out[0]);
        values[0] = r->single_loss * (double)count;
        values[1] = eg_item(out[1]);
        status = eg_last_status();
    }
    /* the sums over the replicas came with the step's all-reduces */
    if (status == EG_OK && several) status = eg_tensor_copy_to_host(out[2], values, sizeof values);
    if (status == EG_OK && c->local_index == 0) memcpy(r->totals, values, sizeof values);
    eg_scope_end();
    return status;
}

eg_status replicas_step(replicas *r, const eg_tensor *x, const eg_tensor *labels, bool stop_here,
                        double *loss_mean, double *hits, bool *stop) {
    r->batch[0] = x;
    r->batch[1] = labels;
    r->global_n = eg_tensor_dim(x, 0);
    r->stop = stop_here ? 1 : 0;
    eg_status status = eg_strategy_run(r->strategy, step_replica, r);
    /* alone: the step's own mean, exactly as a run without replicas reports it */
    *loss_mean = eg_strategy_num_replicas(r->strategy) > 1 ? r->totals[0] / (double)r->global_n
                                                           : r->single_loss;
    *hits = r->totals[1];
    *stop = r->totals[2] > 0;
    return status;
}

static eg_status average_replica(const eg_replica_context *c, void *user) {
    replicas *r = user;
    eg_model *model = r->state[c->local_index].model;
    int n;
    eg_tensor *const *vars = eg_model_variables(model, &n);
    if (!vars) return eg_last_status();
    eg_tensor *statistics[64];
    int k = 0;
    for (int i = 0; i < n && k < 64; i++)
        if (!eg_variable_trainable(vars[i])) statistics[k++] = vars[i];
    return k ? eg_replica_average_variables(c, k, statistics) : EG_OK;
}

eg_status replicas_average_statistics(replicas *r) {
    if (eg_strategy_num_replicas(r->strategy) < 2) return EG_OK;
    return eg_strategy_run(r->strategy, average_replica, r);
}

void replicas_free(replicas *r) {
    for (int i = 0; i < REPLICAS_MAX; i++) {
        eg_function_free(r->graph[i]);
        eg_optimizer_free(r->state[i].optimizer);
        eg_model_free(r->state[i].model);
    }
    eg_strategy_free(r->strategy);
    memset(r, 0, sizeof *r);
}

void replicas_print_stats(replicas *r, FILE *out) {
    eg_strategy_stats stats;
    if (eg_strategy_num_replicas(r->strategy) < 2 ||
        eg_strategy_stats_get(r->strategy, &stats, false) != EG_OK || stats.all_reduces == 0)
        return;
    double hidden =
        stats.in_flight_seconds > 0 ? 1.0 - stats.exposed_seconds / stats.in_flight_seconds : 0.0;
    fprintf(out,
            "all-reduce (this process): %lld reductions, %.1f MiB; in flight %.3f s, waited for "
            "%.3f s: %.0f%% hidden behind computation\n",
            (long long)stats.all_reduces, (double)stats.bytes / (1 << 20), stats.in_flight_seconds,
            stats.exposed_seconds, 100.0 * (hidden > 0 ? hidden : 0.0));
}
