/* The MPI group: the multi-worker strategy's processes, one member each (a rank of
 * MPI_COMM_WORLD), summing over MPI.
 *
 * This file: the group's functions and its member ops, what replica threads call; without MPI,
 * stubs that say what to install. Replica threads never enter MPI: they post a job and sleep on
 * a condition variable while the process's one progress thread (mpi_engine.c) runs it; what a
 * job sends, receives and adds, and how it fails, is in mpi_jobs.c; mpi_internal.h is what the
 * three share. A failed job breaks its group: later calls fail at once, and the group's free
 * skips MPI_Finalize, which would wait for the silent rank. */
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "dist/internal.h"

#define NO_MPI_TEXT                                                                                \
    "not built (no MPI found: install libopenmpi-dev, e.g. scripts/install-deps.sh, and rebuild)"

#if !defined(EG_HAVE_MPI)

static eg_status not_built(void) {
    return eg__error(EG_ERR_UNSUPPORTED, "multi-worker: " NO_MPI_TEXT);
}

/* No group is ever made: the accessors below (shared with the MPI build) see NULL. */
struct eg__mpi_group {
    int rank, size;
};

eg_status eg__mpi_group_new(double timeout_seconds, eg__mpi_group **out) {
    (void)timeout_seconds;
    if (out) *out = NULL;
    return not_built();
}
bool eg__mpi_group_broken(const eg__mpi_group *group) {
    (void)group;
    return false;
}
void eg__mpi_group_free(eg__mpi_group *group) {
    (void)group;
}
const char *eg__mpi_info(void) {
    return NO_MPI_TEXT;
}

static eg_status stub_start(void *member, int64_t tag, void *data, int64_t count, eg_dtype dtype) {
    (void)member, (void)tag, (void)data, (void)count, (void)dtype;
    return not_built();
}
static eg_status stub_wait(void *member, int64_t tag, void *data, uint64_t *completed_ns) {
    (void)member, (void)tag, (void)data, (void)completed_ns;
    return not_built();
}
static eg_status stub_broadcast(void *member, void *data, size_t bytes, int root) {
    (void)member, (void)data, (void)bytes, (void)root;
    return not_built();
}
static eg_status stub_all_gather(void *member, const void *send, size_t bytes, void *recv) {
    (void)member, (void)send, (void)bytes, (void)recv;
    return not_built();
}
const eg__member_ops eg__mpi_member_ops = {
    {stub_start, stub_wait}, stub_broadcast, stub_all_gather};

#else /* EG_HAVE_MPI */

#include "dist/mpi_internal.h"

static job *find_job(eg__mpi_group *g, int64_t tag) {
    for (job *j = g->jobs; j; j = j->next)
        if (j->kind == JOB_REDUCE && j->tag == tag) return j;
    return NULL;
}

static eg_status reduce_start(void *member, int64_t tag, void *data, int64_t count,
                              eg_dtype dtype) {
    eg__mpi_group *g = member;
    if (!g) return eg__error(EG_ERR_NULL_ARGUMENT, "all_reduce: NULL multi-worker member");
    if (dtype != EG_DTYPE_F32 && dtype != EG_DTYPE_F64)
        return eg__error(EG_ERR_DTYPE, "all_reduce (tag %lld): ranks sum f32 or f64, not %s",
                         (long long)tag, eg_dtype_name(dtype));
    if (count < 0 || (count > 0 && !data))
        return eg__error(EG_ERR_INVALID_ARGUMENT, "all_reduce (tag %lld): %lld elements at %p",
                         (long long)tag, (long long)count, data);
    job *j = eg__mpi_job_new(g, JOB_REDUCE, tag, count, dtype, 0);
    if (!j)
        return eg__error(EG_ERR_OUT_OF_MEMORY,
                         "all_reduce (tag %lld): out of host memory for %lld elements' messages",
                         (long long)tag, (long long)count);
    j->data = data;
    pthread_mutex_lock(&eg__mpi_engine.lock);
    if (find_job(g, tag)) {
        eg__mpi_job_free(g, j);
        pthread_mutex_unlock(&eg__mpi_engine.lock);
        return eg__error(EG_ERR_STATE, "all_reduce (tag %lld): started twice", (long long)tag);
    }
    if (j->scratch_bytes && g->size > 1 &&
        !(j->scratch = eg__mpi_scratch_take(g, j->scratch_bytes))) {
        eg__mpi_job_free(g, j);
        pthread_mutex_unlock(&eg__mpi_engine.lock);
        return eg__error(EG_ERR_OUT_OF_MEMORY,
                         "all_reduce (tag %lld): out of host memory for %zu bytes of scratch",
                         (long long)tag, j->scratch_bytes);
    }
    eg_status status = eg__mpi_submit(g, j);
    if (status == EG_OK) pthread_mutex_unlock(&eg__mpi_engine.lock);
    return status;
}

static eg_status reduce_wait(void *member, int64_t tag, void *data, uint64_t *completed_ns) {
    eg__mpi_group *g = member;
    if (!g) return eg__error(EG_ERR_NULL_ARGUMENT, "all_reduce: NULL multi-worker member");
    pthread_mutex_lock(&eg__mpi_engine.lock);
    job *j = find_job(g, tag);
    if (!j || j->data != data) {
        pthread_mutex_unlock(&eg__mpi_engine.lock);
        return eg__error(EG_ERR_STATE, "all_reduce (tag %lld): waited for but %s", (long long)tag,
                         j ? "started on another buffer" : "never started");
    }
    return eg__mpi_finish(j, completed_ns);
}

/* A blocking exchange: broadcast or all_gather. */
static eg_status exchange(eg__mpi_group *g, job_kind kind, void *data, size_t bytes, int root) {
    pthread_mutex_lock(&eg__mpi_engine.lock);
    int64_t tag = g->exchanges++;
    pthread_mutex_unlock(&eg__mpi_engine.lock);
    job *j = eg__mpi_job_new(g, kind, tag, (int64_t)bytes, EG_DTYPE_F32, root);
    if (!j)
        return eg__error(EG_ERR_OUT_OF_MEMORY, "%s: out of host memory for %zu bytes' messages",
                         eg__mpi_kind_name(kind), bytes);
    j->data = data;
    pthread_mutex_lock(&eg__mpi_engine.lock);
    eg_status status = eg__mpi_submit(g, j);
    return status == EG_OK ? eg__mpi_finish(j, NULL) : status;
}

static eg_status mpi_broadcast(void *member, void *data, size_t bytes, int root) {
    eg__mpi_group *g = member;
    if (!g) return eg__error(EG_ERR_NULL_ARGUMENT, "broadcast: NULL multi-worker member");
    if (root < 0 || root >= g->size)
        return eg__error(EG_ERR_INVALID_ARGUMENT, "broadcast: no rank %d (%d ranks)", root,
                         g->size);
    if (bytes > 0 && !data)
        return eg__error(EG_ERR_NULL_ARGUMENT, "broadcast: NULL data for %zu bytes", bytes);
    return exchange(g, JOB_BROADCAST, data, bytes, root);
}

static eg_status mpi_all_gather(void *member, const void *send, size_t bytes, void *recv) {
    eg__mpi_group *g = member;
    if (!g) return eg__error(EG_ERR_NULL_ARGUMENT, "all_gather: NULL multi-worker member");
    if (bytes > 0 && (!send || !recv))
        return eg__error(EG_ERR_NULL_ARGUMENT, "all_gather: NULL buffer for %zu bytes", bytes);
    char *own = (char *)recv + (size_t)g->rank * bytes;
    if (bytes > 0 && own != send) memmove(own, send, bytes);
    return exchange(g, JOB_ALL_GATHER, recv, bytes, 0);
}

const eg__member_ops eg__mpi_member_ops = {
    {reduce_start, reduce_wait}, mpi_broadcast, mpi_all_gather};

/* ---- groups ---- */

eg_status eg__mpi_group_new(double timeout_seconds, eg__mpi_group **out) {
    if (!out) return eg__error(EG_ERR_NULL_ARGUMENT, "multi-worker: NULL group pointer");
    *out = NULL;
    if (!(timeout_seconds > 0))
        return eg__error(EG_ERR_INVALID_ARGUMENT,
                         "multi-worker: a timeout of %g s (it must be positive)", timeout_seconds);
    eg__mpi_group *g = calloc(1, sizeof *g);
    if (!g) return eg__error(EG_ERR_OUT_OF_MEMORY, "multi-worker: out of host memory");
    g->timeout_seconds = timeout_seconds;
    g->comm = MPI_COMM_NULL;
    pthread_mutex_lock(&eg__mpi_engine.lock);
    while (eg__mpi_engine.stopping) pthread_cond_wait(&eg__mpi_engine.done, &eg__mpi_engine.lock);
    eg_status status = EG_OK;
    if (eg__mpi_engine.finalized)
        status = eg__error(EG_ERR_STATE,
                           "multi-worker: MPI was finalized when the last multi-worker group was "
                           "freed, and MPI cannot start twice in one process");
    else if (eg__mpi_engine.unusable)
        status = eg__error(EG_ERR_STATE, "%s", eg__mpi_engine.unusable_why);
    else if (!eg__mpi_engine.running && !eg__mpi_engine_start())
        status = eg__error(EG_ERR_STATE, "multi-worker: cannot start MPI's progress thread");
    if (status != EG_OK) {
        pthread_mutex_unlock(&eg__mpi_engine.lock);
        free(g);
        return status;
    }
    while (eg__mpi_engine.init_state == 0)
        pthread_cond_wait(&eg__mpi_engine.done, &eg__mpi_engine.lock);
    if (eg__mpi_engine.init_state < 0) {
        status = eg__error(eg__mpi_engine.init_status, "%s", eg__mpi_engine.init_why);
        if (eg__mpi_engine.running) { /* the first to see it joins the thread, which has returned */
            eg__mpi_engine.running = false;
            pthread_mutex_unlock(&eg__mpi_engine.lock);
            pthread_join(eg__mpi_engine.thread, NULL);
        } else {
            pthread_mutex_unlock(&eg__mpi_engine.lock);
        }
        free(g);
        return status;
    }
    eg__mpi_engine.groups++;
    eg__mpi_control_job(&g->join, g, JOB_JOIN);
    g->join.deadline = eg__mpi_now_seconds() + timeout_seconds;
    eg__mpi_enqueue(&g->join);
    eg__mpi_wait(&g->join.done);
    if (g->join.status != EG_OK) {
        status = eg__error(g->join.status, "%s", g->join.message);
        eg__mpi_engine_release();
        pthread_mutex_unlock(&eg__mpi_engine.lock);
        free(g);
        return status;
    }
    pthread_mutex_unlock(&eg__mpi_engine.lock);
    *out = g;
    return EG_OK;
}

bool eg__mpi_group_broken(const eg__mpi_group *group) {
    if (!group) return false;
    pthread_mutex_lock(&eg__mpi_engine.lock);
    bool broken = group->broken;
    pthread_mutex_unlock(&eg__mpi_engine.lock);
    return broken;
}

void eg__mpi_group_free(eg__mpi_group *g) {
    if (!g) return;
    pthread_mutex_lock(&eg__mpi_engine.lock);
    eg__mpi_control_job(&g->leave, g, JOB_LEAVE);
    eg__mpi_enqueue(&g->leave);
    eg__mpi_wait(&g->leave.done);
    while (g->jobs) { /* never waited for; the leave failed those in flight */
        job *j = g->jobs;
        g->jobs = j->next;
        eg__mpi_job_free(g, j);
    }
    for (int i = 0; i < SCRATCH_POOL; i++) free(g->pool[i].data);
    if (g->broken) eg__mpi_engine.any_broken = true;
    eg__mpi_engine_release();
    pthread_mutex_unlock(&eg__mpi_engine.lock);
    free(g);
}

static char library_version[MPI_MAX_LIBRARY_VERSION_STRING + 1];

/* MPI_Get_library_version may be called from any thread, before MPI_Init and after
 * MPI_Finalize: the one MPI call not made on the progress thread. */
static void read_library_version(void) {
    int length = 0;
    if (MPI_Get_library_version(library_version, &length) != MPI_SUCCESS) {
        snprintf(library_version, sizeof library_version, "MPI (version unknown)");
        return;
    }
    library_version[strcspn(library_version, "\r\n")] = '\0';
    for (size_t n = strlen(library_version); n > 0 && library_version[n - 1] == ' '; n--)
        library_version[n - 1] = '\0';
}

const char *eg__mpi_info(void) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, read_library_version);
    return library_version;
}

#endif /* EG_HAVE_MPI */

int eg__mpi_group_rank(const eg__mpi_group *group) {
    return group ? group->rank : 0;
}

int eg__mpi_group_size(const eg__mpi_group *group) {
    return group ? group->size : 1;
}

void *eg__mpi_group_member(eg__mpi_group *group) {
    return group;
}
