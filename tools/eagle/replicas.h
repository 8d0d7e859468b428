/* `eagle train`'s replicas: one model and optimizer per local replica of a strategy (the
 * default one, mirrored over logical CPU devices for --replicas N, multi-worker over MPI for
 * --distributed), and the training step run on all of them.
 *
 * Every replica takes its contiguous share of each global batch (eg_strategy_split_batch), so
 * N replicas see exactly the examples, in the order, of one replica on the same batches; their
 * gradients are summed in replica order (eg_replica_gradient) and every replica applies the sum.
 * A single replica runs the step exactly as before the strategies existed. */
#ifndef EAGLE_TOOLS_REPLICAS_H
#define EAGLE_TOOLS_REPLICAS_H

#include <stdio.h>

#include "mlp.h"

#define REPLICAS_MAX 16

/* Builds one replica's model and optimizer on the current device (the replica's): what train.c
 * does for a run without replicas. */
typedef eg_status (*replicas_build_fn)(eg_model **model, eg_optimizer **optimizer, void *user);

typedef struct replicas {
    eg_strategy *strategy;
    int n_local;
    const char *mode; /* eager, lazy or graph */
    mlp_step_state state[REPLICAS_MAX];
    eg_function *graph[REPLICAS_MAX]; /* graph mode, one per replica */
    /* the step being run */
    const eg_tensor *batch[2];
    int64_t global_n;
    double stop;        /* 1 when this process wants the run to stop after this step */
    double totals[3];   /* over every replica: sum of loss x examples, hits, stop requests */
    double single_loss; /* replica 0's mean loss */
} replicas;

/* Takes strategy (freed by replicas_free), builds every local replica's model and optimizer with
 * build and, unless resuming (the checkpoint gives every replica the same values), sets them all
 * to replica 0's values. false with the library's error. */
bool replicas_init(replicas *r, eg_strategy *strategy, const char *mode, bool loss_scaling,
                   replicas_build_fn build, void *user, bool broadcast);

/* One step on a global batch (host tensors x, labels): each replica its share. *loss_mean gets
 * the mean over the global batch of the examples' losses, *hits the correct predictions, and
 * *stop whether any process asked to stop (stop_here: this one does), so that every process
 * stops at the same step. */
eg_status replicas_step(replicas *r, const eg_tensor *x, const eg_tensor *labels, bool stop_here,
                        double *loss_mean, double *hits, bool *stop);

/* Sets every replica's non-trainable variables (batch normalization's moving statistics) to
 * their mean over the replicas, before evaluating or saving replica 0's model. */
eg_status replicas_average_statistics(replicas *r);

/* Prints what this process's all-reduces cost over the run (eg_strategy_stats_get): their count
 * and bytes, the time they were in flight and how much of it the replicas waited for; nothing for
 * a single replica. */
void replicas_print_stats(replicas *r, FILE *out);

void replicas_free(replicas *r);

#endif
