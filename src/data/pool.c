/* The pipeline thread pool: a FIFO of tasks (the calls of parallel maps) run by a few threads.
 *
 * Why a second pool: the compute pool (src/base/threadpool.c) is fork-join — one op at a
 * time split across all cores, its caller waiting for the pieces. Pipeline work is the opposite
 * shape: many independent calls that must keep running WHILE the training step's ops use the
 * compute pool. Tasks here never wait on other tasks (feeding a map from its input happens on the
 * map's own thread, not here), so a small pool cannot deadlock however stages are nested.
 *
 * The pool exists only while some iterator uses it: the first eg__pool_acquire starts the threads
 * and the last eg__pool_release joins them, so nothing is left running at exit. A callback that
 * runs a parallel map of its own (a pipeline inside a pipeline) would make a task wait for tasks:
 * the pool then grows by that map's threads, up to EG_DATASET_MAX_PARALLELISM threads in all. */

#ifndef EG_NO_CALLSITE
#define EG_NO_CALLSITE
#endif

#include <stdlib.h>
#include <unistd.h>

#include "data/internal.h"

typedef struct pool {
    pthread_mutex_t mutex; /* guards the queue and stopping */
    pthread_cond_t work;
    eg__task *head, *tail;
    bool stopping;
    pthread_t threads[EG_DATASET_MAX_PARALLELISM];
    int n_threads; /* guarded by lifecycle */
    int users;     /* guarded by lifecycle */
} pool;

static pool the_pool = {.mutex = PTHREAD_MUTEX_INITIALIZER, .work = PTHREAD_COND_INITIALIZER};
/* Serialises acquire and release (starting and joining threads). */
static pthread_mutex_t lifecycle = PTHREAD_MUTEX_INITIALIZER;

int eg__cpu_cores(void) {
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    if (cores < 1) return 1;
    return cores < EG_DATASET_MAX_PARALLELISM ? (int)cores : EG_DATASET_MAX_PARALLELISM;
}

/* Set on the pool's threads: a callback that itself runs a parallel map (a nested pipeline) makes
 * its tasks wait for other tasks, so the pool grows for it instead of waiting on itself. */
static _Thread_local bool on_pool_thread;

static void *pool_main(void *arg) {
    pool *p = arg;
    on_pool_thread = true;
    pthread_mutex_lock(&p->mutex);
    for (;;) {
        while (!p->head && !p->stopping) pthread_cond_wait(&p->work, &p->mutex);
        if (!p->head) break; /* stopping, and nothing left */
        eg__task *task = p->head;
        p->head = task->next;
        if (!p->head) p->tail = NULL;
        pthread_mutex_unlock(&p->mutex);
        task->run(task);
        pthread_mutex_lock(&p->mutex);
    }
    pthread_mutex_unlock(&p->mutex);
    return NULL;
}

static void stop_threads(pool *p) {
    pthread_mutex_lock(&p->mutex);
    p->stopping = true;
    pthread_cond_broadcast(&p->work);
    pthread_mutex_unlock(&p->mutex);
    for (int i = 0; i < p->n_threads; i++) pthread_join(p->threads[i], NULL);
    p->n_threads = 0;
    pthread_mutex_lock(&p->mutex);
    p->stopping = false;
    pthread_mutex_unlock(&p->mutex);
}

eg_status eg__pool_acquire(int threads) {
    pool *p = &the_pool;
    int wanted = eg__cpu_cores();
    if (threads > wanted) wanted = threads;
    pthread_mutex_lock(&lifecycle);
    if (on_pool_thread) wanted = p->n_threads + (threads > 0 ? threads : 1);
    if (wanted > EG_DATASET_MAX_PARALLELISM) wanted = EG_DATASET_MAX_PARALLELISM;
    eg_status status = EG_OK;
    while (p->n_threads < wanted) {
        status = eg__thread_start(&p->threads[p->n_threads], pool_main, p, "dataset thread pool");
        if (status != EG_OK) break;
        p->n_threads++;
    }
    /* Fewer threads than wanted still run every task (just with less parallelism). */
    if (status != EG_OK && p->n_threads > 0) {
        eg_clear_error();
        status = EG_OK;
    }
    if (status == EG_OK) p->users++;
    pthread_mutex_unlock(&lifecycle);
    return status;
}

void eg__pool_release(void) {
    pool *p = &the_pool;
    pthread_mutex_lock(&lifecycle);
    if (p->users > 0 && --p->users == 0) stop_threads(p);
    pthread_mutex_unlock(&lifecycle);
}

void eg__pool_submit(eg__task *task) {
    pool *p = &the_pool;
    task->next = NULL;
    pthread_mutex_lock(&p->mutex);
    if (p->tail)
        p->tail->next = task;
    else
        p->head = task;
    p->tail = task;
    pthread_mutex_unlock(&p->mutex);
    pthread_cond_signal(&p->work); /* after unlocking: the woken thread needs the mutex */
}
