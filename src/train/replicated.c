/* fit and evaluate under a strategy (eagle/distribute.h): every process iterates the same
 * batches; each replica runs the step on its contiguous share of the global batch, its loss
 * weighted by its share so that the gradients summed over the replicas are the global batch
 * mean's (eg_replica_gradient), and the loss and accuracy times the examples are summed with
 * them, so the logs are the global batch's on every process. */
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "eagle/ops.h"
#include "nn/internal.h"
#include "optim/internal.h"
#include "train/internal.h"

eg_status eg__fit_check_strategy(const eg_strategy *strategy, bool can_build, const char *what) {
    int local = eg_strategy_num_local_replicas(strategy);
    if (local != 1 && !can_build)
        return eg__error(EG_ERR_UNSUPPORTED,
                         "%s: the %s strategy has %d replicas in this process, each needing a "
                         "model of its own: give fit options.build_replica (or use a "
                         "multi-worker strategy, or mirrored over one device)",
                         what, eg_strategy_name(strategy), local);
    return EG_OK;
}

/* The configuration replica `replica` runs with. */
static eg__fit_config *local_config(eg__fit_config *c, const eg_replica_context *replica) {
    return c->locals ? c->locals[replica->local_index] : c;
}

static eg_status broadcast_replica(const eg_replica_context *replica, void *user) {
    eg__fit_config *c = local_config(user, replica);
    int n;
    eg_tensor *const *vars = eg_model_variables(c->model, &n);
    return vars ? eg_replica_broadcast_variables(replica, n, vars) : eg_last_status();
}

/* Replica 0's optimizer state (step, slots, loss scaling, rate) into another local replica's,
 * whose model has the same variables in the same order. */
static eg_status copy_optimizer_state(const eg__fit_config *from, eg__fit_config *to) {
    int n, n_to;
    eg_tensor *const *vars = eg_model_trainable_variables(from->model, &n);
    eg_tensor *const *to_vars = eg_model_trainable_variables(to->model, &n_to);
    if (!vars || !to_vars) return eg_last_status();
    if (n != n_to)
        return eg__error(EG_ERR_INVALID_ARGUMENT,
                         "fit: build_replica made a model with %d trainable variables; replica "
                         "0's has %d",
                         n_to, n);
    const eg_optimizer *o = from->optimizer;
    eg_status status = eg_optimizer_set_iterations(to->optimizer, eg_optimizer_iterations(o));
    for (int i = 0; i < n && status == EG_OK; i++)
        for (int k = 0; k < eg_optimizer_slot_count(o) && status == EG_OK; k++) {
            const char *slot = eg_optimizer_slot_name(o, k);
            eg_tensor *value = eg_optimizer_get_slot(o, vars[i], slot);
            if (value) status = eg_optimizer_set_slot(to->optimizer, to_vars[i], slot, value);
        }
    if (status == EG_OK &&
        eg__optimizer_loss_scale(o)) /* an error if the replica's does not scale */
        status = eg_optimizer_set_loss_scale_state(to->optimizer, eg_optimizer_loss_scale(o),
                                                   eg_optimizer_loss_scale_good_steps(o),
                                                   eg_optimizer_skipped_steps(o));
    if (status == EG_OK &&
        eg_optimizer_learning_rate(to->optimizer) != eg_optimizer_learning_rate(o))
        status = eg_optimizer_set_learning_rate(
            to->optimizer, eg_schedule_constant(eg_optimizer_learning_rate(o)));
    return status;
}

eg_status eg__fit_replicas_begin(eg__fit_config *c, const eg_fit_options *options) {
    eg_strategy *strategy = options->strategy;
    int n = eg_strategy_num_local_replicas(strategy);
    eg_status status = EG_OK;
    if (n > 1) {
        c->locals = calloc((size_t)n, sizeof *c->locals);
        if (!c->locals) return eg__error(EG_ERR_OUT_OF_MEMORY, "fit: out of host memory");
        c->n_locals = n;
        c->locals[0] = c;
    }
    for (int i = 1; i < n && status == EG_OK; i++) {
        eg_model *model = NULL;
        eg_optimizer *optimizer = NULL;
        status = eg_device_scope_begin(eg_strategy_device(strategy, i));
        if (status != EG_OK) break;
        status = options->build_replica(i, &model, &optimizer, options->build_replica_user);
        if (status == EG_OK && (!model || !optimizer))
            status = eg__error(EG_ERR_INVALID_ARGUMENT,
                               "fit: build_replica gave replica %d no model or no optimizer", i);
        if (status == EG_OK) status = eg_model_compile(model, optimizer, &c->options);
        eg__fit_config *built = model ? eg__model_attachment(model) : NULL;
        if (status == EG_OK && built) {
            c->locals[i] = built;
            status = copy_optimizer_state(c, built);
        } else {
            eg_model_free(model);
            eg_optimizer_free(optimizer);
        }
        eg_device_scope_end();
    }
    if (status == EG_OK) status = eg_strategy_run(strategy, broadcast_replica, c);
    return status;
}

eg_status eg__fit_replicas_follow(eg__fit_config *c) {
    double rate = eg_optimizer_learning_rate(c->optimizer);
    eg_status status = EG_OK;
    for (int i = 1; i < c->n_locals && status == EG_OK; i++)
        if (eg_optimizer_learning_rate(c->locals[i]->optimizer) != rate)
            status =
                eg_optimizer_set_learning_rate(c->locals[i]->optimizer, eg_schedule_constant(rate));
    return status;
}

static eg_status average_replica(const eg_replica_context *replica, void *user) {
    eg__fit_config *c = local_config(user, replica);
    int n;
    eg_tensor *const *vars = eg_model_variables(c->model, &n);
    if (!vars) return eg_last_status();
    eg_tensor **statistics = calloc((size_t)(n ? n : 1), sizeof *statistics);
    if (!statistics) return eg__error(EG_ERR_OUT_OF_MEMORY, "fit: out of host memory");
    int k = 0;
    for (int i = 0; i < n; i++)
        if (!eg_variable_trainable(vars[i])) statistics[k++] = vars[i];
    eg_status status = k ? eg_replica_average_variables(replica, k, statistics) : EG_OK;
    free(statistics);
    return status;
}

eg_status eg__fit_replicas_average_statistics(eg__fit_config *c) {
    if (!c->strategy || eg_strategy_num_replicas(c->strategy) < 2) return EG_OK;
    return eg_strategy_run(c->strategy, average_replica, c);
}

void eg__fit_replicas_end(eg__fit_config *c) {
    for (int i = 1; i < c->n_locals; i++) {
        if (!c->locals[i]) continue;
        eg_optimizer *optimizer = c->locals[i]->optimizer;
        eg_model_free(c->locals[i]->model); /* its configuration with it */
        eg_optimizer_free(optimizer);
    }
    free(c->locals);
    c->locals = NULL;
    c->n_locals = 0;
}

eg_tensor *eg__fit_totals_start(const eg_tensor *loss, const eg_tensor *accuracy, int64_t examples,
                                const eg_tensor *stop, int64_t *tag) {
    int64_t one = 1;
    eg_tensor *parts[3] = {NULL, NULL, NULL};
    const eg_tensor *values[3] = {loss, accuracy, stop};
    for (int i = 0; i < 3; i++) {
        eg_tensor *wide = eg_cast(values[i], EG_DTYPE_F64);
        eg_tensor *times = wide && i < 2 ? eg_mul_scalar(wide, (double)examples) : NULL;
        parts[i] = wide ? eg_reshape(times ? times : wide, 1, &one) : NULL;
        eg_release(times);
        eg_release(wide);
    }
    eg_tensor *totals = parts[0] && parts[1] && parts[2] ? eg_concat(3, parts, 0) : NULL;
    eg_tensor *started = totals ? eg_all_reduce_start(1, &totals, tag) : NULL;
    eg_release(totals);
    for (int i = 0; i < 3; i++) eg_release(parts[i]);
    return started;
}

eg_status eg__fit_totals_finish(eg_status status, eg_tensor *totals, int64_t tag, eg_tensor **out) {
    eg_tensor *sums = status == EG_OK && totals ? eg_all_reduce_done(totals, tag) : NULL;
    eg_release(totals);
    if (status != EG_OK) return status;
    bool all = true;
    for (int i = 0; i < 3; i++) {
        eg_tensor *piece = sums ? eg_slice(sums, 0, i, i + 1, 1) : NULL;
        out[i] = piece ? eg_reshape(piece, 0, NULL) : NULL;
        eg_release(piece);
        all = all && out[i];
    }
    eg_release(sums);
    if (all) return EG_OK;
    for (int i = 0; i < 3; i++) {
        eg_release(out[i]);
        out[i] = NULL;
    }
    return eg_last_status();
}

typedef struct replica_job {
    eg__fit_config *config;
    bool training;
    eg_tensor *const *batch;       /* the global batch (x, y) */
    double stop;                   /* this process's stop request (1 or 0) */
    double sums[3]; /* loss and accuracy times the examples, stop requests: all replicas' */
} replica_job;

/* rows [start, start + count) of t, on the replica's device. */
static eg_tensor *share_of(const eg_replica_context *replica, const eg_tensor *t, int64_t start,
                           int64_t count) {
    eg_tensor *part = eg_slice(t, 0, start, start + count, 1);
    if (!part || eg_tensor_device(part) == replica->device) return part;
    eg_tensor *moved = eg_tensor_to(part, replica->device);
    eg_release(part);
    return moved;
}

static eg_status replica_step(const eg_replica_context *replica, void *user) {
    replica_job *job = user;
    eg__fit_config *c = local_config(job->config, replica);
    int64_t global = eg_tensor_dim(job->batch[0], 0), start = 0, count = 0;
    eg_strategy_split_batch(replica->strategy, global, replica->replica_id, &start, &count);
    if (count == 0)
        return eg__error(EG_ERR_INVALID_ARGUMENT,
                         "fit: a batch of %lld examples leaves replica %d of %d none (batches "
                         "need at least one example per replica)",
                         (long long)global, replica->replica_id, replica->num_replicas);
    eg_tensor *in[4] = {share_of(replica, job->batch[0], start, count),
                        share_of(replica, job->batch[1], start, count),
                        eg_scalar(EG_DTYPE_F64, (double)count / (double)global),
                        eg_scalar(EG_DTYPE_F64, job->stop)};
    eg_status status = in[0] && in[1] && in[2] && in[3] ? EG_OK : eg_last_status();
    eg_tensor *out[3] = {NULL, NULL, NULL};
    c->replica = replica;
    if (status == EG_OK) status = eg__fit_call(c, job->training, in, out);
    c->replica = NULL;
    double sums[3];
    for (int i = 0; i < 3 && status == EG_OK; i++) {
        sums[i] = eg_item(out[i]);
        status = eg_last_status();
    }
    /* every replica holds the same sums; replica 0 hands them on */
    if (status == EG_OK && replica->local_index == 0) memcpy(job->sums, sums, sizeof sums);
    return status; /* the replica's scope releases what it made */
}

eg_status eg__fit_replicated_step(eg__fit_config *c, bool training, eg_tensor *const *in,
                                  double *loss, double *accuracy) {
    replica_job job = {.config = c, .training = training, .batch = in, .stop = c->stop_asked};
    eg_status status = eg_strategy_run(c->strategy, replica_step, &job);
    double global = (double)eg_tensor_dim(in[0], 0);
    *loss = job.sums[0] / global;
    *accuracy = job.sums[1] / global;
    if (status == EG_OK && training) c->stop_agreed = job.sums[2] > 0;
    return status;
}
