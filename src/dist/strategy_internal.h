/* Internal: the strategy object, shared by strategy.c (making it, running replicas) and
 * replica.c (what a replica's step calls). */
#ifndef EAGLE_SRC_DIST_STRATEGY_INTERNAL_H
#define EAGLE_SRC_DIST_STRATEGY_INTERNAL_H

#include <pthread.h>

#include "dist/internal.h"

#define EG__MAX_LOCAL_REPLICAS 64

typedef enum {
    EG__STRATEGY_DEFAULT,
    EG__STRATEGY_MIRRORED,
    EG__STRATEGY_MULTI_WORKER
} eg__strategy_kind;

/* One local replica's gradient reducer (replica.c): what its first call checked. */
typedef struct eg__reducer eg__reducer;
void eg__reducer_free(eg__reducer *reducer);

typedef struct worker_start {
    struct eg_strategy *strategy;
    int index;
} worker_start;

struct eg_strategy {
    eg__strategy_kind kind;
    eg_strategy_options options; /* resolved: no zeros */
    int n_local, n_replicas, worker, n_workers;
    const eg_device *devices[EG__MAX_LOCAL_REPLICAS];
    /* The group (NULL ops: a replica alone, whose sums are the tensors themselves). */
    const eg__member_ops *ops;
    void *members[EG__MAX_LOCAL_REPLICAS];
    int64_t handles[EG__MAX_LOCAL_REPLICAS]; /* device/collective.h's, per local replica */
    eg__local_group *local;
    eg__mpi_group *mpi;
    eg__reducer *reducers[EG__MAX_LOCAL_REPLICAS];
    /* each replica's stand-in for the default generator, and the default seed it came from */
    eg_generator *generators[EG__MAX_LOCAL_REPLICAS];
    uint64_t generator_seeds[EG__MAX_LOCAL_REPLICAS];
    /* Mirrored: one worker thread per replica, and the step they run. */
    bool workers_ready, stopping;
    pthread_t threads[EG__MAX_LOCAL_REPLICAS];
    worker_start starts[EG__MAX_LOCAL_REPLICAS];
    int n_threads;
    pthread_mutex_t job_lock;
    pthread_cond_t job_posted, job_finished;
    int64_t job_number;
    int jobs_done;
    eg_replica_fn job_fn;
    void *job_user;
    int failed_local; /* the first local replica that failed in this run, or -1 */
    eg_status status[EG__MAX_LOCAL_REPLICAS];
    char messages[EG__MAX_LOCAL_REPLICAS][1024];
};

eg_status eg__strategy_start_workers(struct eg_strategy *s);
void eg__strategy_stop_workers(struct eg_strategy *s);

#endif
