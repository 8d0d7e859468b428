/* fit and evaluate under a strategy (eagle/distribute.h): every process iterates the same
 * batches; each replica runs the step on its contiguous share of the global batch, its loss
 * weighted by its share so that the gradients summed over the replicas are the global batch
 * mean's (eg_replica_gradient), and the loss and accuracy times the examples are summed with
 * them, so the logs are the global batch's on every process. */
#include <string.h>

#include "base/error.h"
#include "eagle/ops.h"
#include "train/internal.h"

eg_status eg__fit_check_strategy(const eg_strategy *strategy, const char *what) {
    int local = eg_strategy_num_local_replicas(strategy);
    if (local != 1)
        return eg__error(EG_ERR_UNSUPPORTED,
                         "%s: the %s strategy has %d replicas in this process; fit trains one "
                         "model per process (a multi-worker strategy, or mirrored over one "
                         "device). Train several local replicas with eg_strategy_run and "
                         "eg_replica_gradient, a model each",
                         what, eg_strategy_name(strategy), local);
    return EG_OK;
}

static eg_status broadcast_replica(const eg_replica_context *replica, void *user) {
    eg__fit_config *c = user;
    int n;
    eg_tensor *const *vars = eg_model_variables(c->model, &n);
    return vars ? eg_replica_broadcast_variables(replica, n, vars) : eg_last_status();
}

eg_status eg__fit_broadcast(eg__fit_config *c) {
    return eg_strategy_run(c->strategy, broadcast_replica, c);
}

eg_tensor *eg__fit_totals_start(const eg_tensor *loss, const eg_tensor *accuracy, int64_t examples,
                                int64_t *tag) {
    int64_t one = 1;
    eg_tensor *parts[2] = {NULL, NULL};
    const eg_tensor *values[2] = {loss, accuracy};
    for (int i = 0; i < 2; i++) {
        eg_tensor *wide = eg_cast(values[i], EG_DTYPE_F64);
        eg_tensor *times = wide ? eg_mul_scalar(wide, (double)examples) : NULL;
        parts[i] = times ? eg_reshape(times, 1, &one) : NULL;
        eg_release(times);
        eg_release(wide);
    }
    eg_tensor *totals =
        parts[0] && parts[1] ? eg_concat(2, (const eg_tensor *const *)parts, 0) : NULL;
    eg_tensor *started =
        totals ? eg_all_reduce_start(1, (const eg_tensor *const *)&totals, tag) : NULL;
    eg_release(totals);
    eg_release(parts[0]);
    eg_release(parts[1]);
    return started;
}

eg_status eg__fit_totals_finish(eg_status status, eg_tensor *totals, int64_t tag, eg_tensor **out) {
    eg_tensor *sums = status == EG_OK && totals ? eg_all_reduce_done(totals, tag) : NULL;
    eg_release(totals);
    if (status != EG_OK) return status;
    eg_tensor *pieces[2] = {sums ? eg_slice(sums, 0, 0, 1, 1) : NULL,
                            sums ? eg_slice(sums, 0, 1, 2, 1) : NULL};
    for (int i = 0; i < 2; i++) out[i] = pieces[i] ? eg_reshape(pieces[i], 0, NULL) : NULL;
    eg_release(pieces[0]);
    eg_release(pieces[1]);
    eg_release(sums);
    if (out[0] && out[1]) return EG_OK;
    eg_release(out[0]);
    eg_release(out[1]);
    out[0] = out[1] = NULL;
    return eg_last_status();
}

typedef struct replica_job {
    eg__fit_config *config;
    bool training;
    const eg_tensor *const *batch; /* the global batch (x, y) */
    double sums[2];                /* loss and accuracy times the examples, all replicas' */
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
    eg__fit_config *c = job->config;
    int64_t global = eg_tensor_dim(job->batch[0], 0), start = 0, count = 0;
    eg_strategy_split_batch(replica->strategy, global, replica->replica_id, &start, &count);
    if (count == 0)
        return eg__error(EG_ERR_INVALID_ARGUMENT,
                         "fit: a batch of %lld examples leaves replica %d of %d none (batches "
                         "need at least one example per replica)",
                         (long long)global, replica->replica_id, replica->num_replicas);
    const eg_tensor *in[3] = {share_of(replica, job->batch[0], start, count),
                              share_of(replica, job->batch[1], start, count),
                              eg_scalar(EG_DTYPE_F64, (double)count / (double)global)};
    eg_status status = in[0] && in[1] && in[2] ? EG_OK : eg_last_status();
    eg_tensor *out[2] = {NULL, NULL};
    c->replica = replica;
    if (status == EG_OK) status = eg__fit_call(c, job->training, in, out);
    c->replica = NULL;
    if (status == EG_OK) {
        job->sums[0] = eg_item(out[0]);
        job->sums[1] = eg_item(out[1]);
        status = eg_last_status();
    }
    return status; /* the replica's scope releases what it made */
}

eg_status eg__fit_replicated_step(eg__fit_config *c, bool training, const eg_tensor *const *in,
                                  double *loss, double *accuracy) {
    replica_job job = {.config = c, .training = training, .batch = in};
    eg_status status = eg_strategy_run(c->strategy, replica_step, &job);
    double global = (double)eg_tensor_dim(in[0], 0);
    *loss = job.sums[0] / global;
    *accuracy = job.sums[1] / global;
    return status;
}
