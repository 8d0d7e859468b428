/* Eagle — data-parallel training (TensorFlow's tf.distribute strategies, in C).
 *
 * A strategy runs one replica of the training step per device and keeps the replicas' variables
 * equal: each replica computes the gradient of its share of the global batch, the gradients are
 * summed over the replicas in buckets while the backward pass goes on, and every replica applies
 * the same sum with its own optimizer.
 *
 *   - default:      one replica on the current device; everything below works and sums nothing,
 *                   so the same training code runs with every strategy;
 *   - mirrored:     one replica per local device (logical CPU devices cpu:0 … cpu:N-1, GPUs),
 *                   each on its own thread of this process;
 *   - multi-worker: one replica per process, the processes started by `mpirun -np N` and
 *                   talking through MPI (built where CMake found MPI).
 *
 * Sums run in replica order (replica 0 first, then 1, …), element by element, whatever the
 * strategy, the bucket size or the timing: the same replicas give the same bits in every run,
 * mirrored or multi-worker. N replicas on a global batch B give the weights one replica gets on
 * the same batch up to the summation order inside each replica's own products (about 1e-7
 * relative per step; tests/test_distribute.c checks ≤ 1e-6), not bit for bit.
 *
 * A step, written once for every strategy:
 *
 *     eg_status step(const eg_replica_context *replica, void *user) {
 *         my_state *s = &((my_state *)user)[replica->local_index];
 *         eg_tape *tape = eg_tape_begin(false);
 *         eg_tensor *loss = ...;                  // this replica's examples
 *         // the global mean: local mean × local examples / global examples
 *         loss = eg_mul_scalar(loss, (double)local_examples / global_examples);
 *         eg_tensor *grads[N_VARIABLES];
 *         eg_status status = eg_replica_gradient(replica, tape, loss, n, vars, grads);
 *         eg_tape_free(tape);
 *         return status ? status : eg_optimizer_apply_gradients(s->optimizer, n, grads, vars);
 *     }
 *     eg_strategy_run(strategy, step, states);
 *
 * Each replica has its own model and optimizer, built on its device (eg_strategy_run with a
 * function that builds them, then eg_replica_broadcast_variables so that every replica starts
 * from replica 0's values). The step may be eager, lazy, or an eg_function traced per replica:
 * the collectives are ops (eg_all_reduce, eagle/ops.h), so a traced step replays its bucket
 * sums in the traced order from its first call.
 *
 * Failure: a replica whose step fails makes every other replica's next collective fail with an
 * error naming it; a replica (or MPI rank) that stays silent longer than the timeout is named in
 * the error of those waiting for it — nothing waits forever. */
#ifndef EAGLE_DISTRIBUTE_H
#define EAGLE_DISTRIBUTE_H

#include <stdbool.h>
#include <stdint.h>

#include "eagle/autograd.h"
#include "eagle/device.h"
#include "eagle/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct eg_strategy eg_strategy;

typedef struct eg_strategy_options {
    /* How long a collective waits for the other replicas before failing with an error naming
     * the silent one; 0: EG_DIST_TIMEOUT (seconds) from the environment, else 300. */
    double timeout_seconds;
    /* Gradient buckets (PyTorch DDP's sizes): a bucket's sum starts once this many bytes of
     * gradients are ready; 0: 25 MiB, and 1 MiB for the first bucket (which the backward pass
     * fills first, so communication starts early); EG_DIST_BUCKET_BYTES in the environment sets
     * both where these are 0. Any size gives the same bits. */
    int64_t bucket_bytes;
    int64_t first_bucket_bytes;
} eg_strategy_options;

/* One replica on the current device. NULL only when out of memory. */
eg_strategy *eg_strategy_default_new(void);
/* One replica per device: devices[0 … n_devices-1]; devices NULL: the first n_devices visible
 * devices of the current device's kind (all of them for n_devices == 0), i.e. cpu:0 … cpu:N-1
 * after eg_device_configure_cpus(N). options may be NULL. NULL with an error for a repeated
 * device or more replicas than devices. */
eg_strategy *eg_strategy_mirrored_new(int n_devices, const eg_device *const *devices,
                                      const eg_strategy_options *options);
/* One replica in this process, on device (NULL: the current device), joined with the other
 * processes of the MPI job (mpirun -np N): replica i is rank i. NULL with an error when this
 * build has no MPI (EG_ERR_UNSUPPORTED, saying what to install) or MPI fails to start. */
eg_strategy *eg_strategy_multi_worker_new(const eg_device *device,
                                          const eg_strategy_options *options);
/* Ends the strategy (finalizing MPI for the last multi-worker one). NULL is ignored. */
void eg_strategy_free(eg_strategy *strategy);

/* "default", "mirrored" or "multi_worker"; "(null)" for NULL. */
const char *eg_strategy_name(const eg_strategy *strategy);
/* Replicas in all (the global count), and those of this process. */
int eg_strategy_num_replicas(const eg_strategy *strategy);
int eg_strategy_num_local_replicas(const eg_strategy *strategy);
/* This process's rank and the number of processes (0 and 1 unless multi-worker). */
int eg_strategy_worker(const eg_strategy *strategy);
int eg_strategy_num_workers(const eg_strategy *strategy);
/* True on the one process that writes checkpoints and logs (rank 0). */
bool eg_strategy_is_chief(const eg_strategy *strategy);
/* The device of local replica i (NULL past the count). */
const eg_device *eg_strategy_device(const eg_strategy *strategy, int local_index);
/* The global index of local replica i. */
int eg_strategy_replica_id(const eg_strategy *strategy, int local_index);
/* Replica replica_id's share of a global batch of global_batch examples: [*start, *start +
 * *count); the first global_batch % replicas replicas get one more. */
void eg_strategy_split_batch(const eg_strategy *strategy, int64_t global_batch, int replica_id,
                             int64_t *start, int64_t *count);

/* What this process's replicas' all-reduces (the gradient buckets, eg_all_reduce) cost since
 * the strategy was made or the last reset, summed over its local replicas. A reduction is in
 * flight from its start to the moment its sum is complete; the replica's thread is blocked for
 * the exposed part of that (waiting in all_reduce_done), and the rest ran behind the step's
 * computation: hidden = 1 - exposed / in_flight. The mirrored strategy's replicas sum when they
 * wait, so their reductions are all exposed; the multi-worker one's run on its progress thread
 * while the backward pass goes on. */
typedef struct eg_strategy_stats {
    int64_t all_reduces;      /* completed */
    int64_t bytes;            /* their sizes, added */
    double in_flight_seconds; /* added over the reductions (overlapping ones count each) */
    double exposed_seconds;   /* of that, blocked in the waits */
} eg_strategy_stats;

/* Fills *stats (zeros for the default strategy); reset: starts the counts afresh.
 * EG_ERR_NULL_ARGUMENT for a NULL strategy or stats. */
eg_status eg_strategy_stats_get(eg_strategy *strategy, eg_strategy_stats *stats, bool reset);

/* What a replica's step is told. */
typedef struct eg_replica_context {
    eg_strategy *strategy;
    int local_index;         /* 0 … num_local_replicas - 1 */
    int replica_id;          /* 0 … num_replicas - 1 */
    int num_replicas;        /* global */
    const eg_device *device; /* the current device while the step runs */
} eg_replica_context;

typedef eg_status (*eg_replica_fn)(const eg_replica_context *replica, void *user);

/* Runs fn once per local replica — each on its own thread (the calling thread for a single
 * one) with the replica's device as the current device, its own scopes, tapes and errors, inside
 * a scope of its own (tensors it makes are released when it returns, unless handed out with
 * eg_scope_keep, which makes them the caller's) — and
 * returns when all are done: EG_OK, or the first failing replica's status with its message
 * (prefixed by "replica i: ") as this thread's error. */
eg_status eg_strategy_run(eg_strategy *strategy, eg_replica_fn fn, void *user);

/* ---- inside a replica's step ---- */

/* eg_tape_gradient whose gradients are summed over the replicas: each source's gradient joins a
 * bucket as soon as the backward pass has finished it, and a bucket's sum starts when it is full,
 * while the rest is still computed. grads get new references (owned by the current scope), the
 * same on every replica. On the first call (and whenever the sources change) the replicas
 * compare their sources: names, dtypes, shapes and order must agree, else every replica fails
 * with an error naming the first variable that differs and the replicas that disagree. Sources
 * the target does not depend on get zeros. f32 and f64 sources. */
eg_status eg_replica_gradient(const eg_replica_context *replica, eg_tape *tape,
                              const eg_tensor *target, int n_sources, eg_tensor *const *sources,
                              eg_tensor **grads);
/* Sets every replica's variables to replica 0's values (after building the models), after the
 * same comparison as eg_replica_gradient's. */
eg_status eg_replica_broadcast_variables(const eg_replica_context *replica, int n,
                                         eg_tensor *const *variables);
/* Sets each variable to its mean over the replicas (summed in replica order): batch
 * normalization's moving statistics, which each replica updates from its own examples, before
 * evaluating or saving. */
eg_status eg_replica_average_variables(const eg_replica_context *replica, int n,
                                       eg_tensor *const *variables);
/* Sums n doubles over the replicas, in place (in replica order): metrics for logs. */
eg_status eg_replica_sum(const eg_replica_context *replica, int n, double *values);
/* Returns once every replica got here (or fails with the silent one named after the timeout). */
eg_status eg_replica_barrier(const eg_replica_context *replica);

/* What this build offers (static storage): "mirrored; multi-worker over Open MPI v4.1.4" or
 * "mirrored; multi-worker: not built (no MPI found; install libopenmpi-dev and rebuild)". */
const char *eg_distribute_info(void);

#if !defined(EG_NO_CALLSITE)
#define eg_strategy_default_new(...)      EG_CALLSITE_(eg_strategy_default_new(__VA_ARGS__))
#define eg_strategy_mirrored_new(...)     EG_CALLSITE_(eg_strategy_mirrored_new(__VA_ARGS__))
#define eg_strategy_multi_worker_new(...) EG_CALLSITE_(eg_strategy_multi_worker_new(__VA_ARGS__))
#define eg_strategy_run(...)              EG_CALLSITE_(eg_strategy_run(__VA_ARGS__))
#define eg_strategy_stats_get(...)        EG_CALLSITE_(eg_strategy_stats_get(__VA_ARGS__))
#define eg_replica_gradient(...)          EG_CALLSITE_(eg_replica_gradient(__VA_ARGS__))
#define eg_replica_broadcast_variables(...)                                                        \
    EG_CALLSITE_(eg_replica_broadcast_variables(__VA_ARGS__))
#define eg_replica_average_variables(...) EG_CALLSITE_(eg_replica_average_variables(__VA_ARGS__))
#define eg_replica_sum(...)               EG_CALLSITE_(eg_replica_sum(__VA_ARGS__))
#define eg_replica_barrier(...)           EG_CALLSITE_(eg_replica_barrier(__VA_ARGS__))
#endif

#ifdef __cplusplus
}
#endif
#endif
