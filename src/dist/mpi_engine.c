/* The multi-worker groups' MPI engine (see mpi.c).
 *
 * One progress thread per process makes every MPI call Eagle makes: it starts MPI (unless the
 * program did), serves every group (each on its own duplicate of MPI_COMM_WORLD) and runs the
 * jobs that replica threads post — reductions, broadcasts, gathers — as non-blocking point-to-
 * point messages (mpi_jobs.c), polling all jobs in flight, so that ranks may start them in
 * different orders. Replica threads never enter MPI: they post a job and sleep on a condition
 * variable. */
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>

#if defined(EG_HAVE_MPI)

#include "dist/mpi_internal.h"
#if defined(__linux__)
#include <sched.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

/* After a poll completes nothing, the progress thread polls on for this long — a transfer under
 * way completes a piece every few tens of microseconds, MPI moves data only while polled, and
 * sleeping at once loses most of the bandwidth of megabyte buffers (allreduce_bandwidth.c) —
 * then sleeps between polls, first briefly, then longer (doubling) while nothing comes, so that
 * a rank waiting for a late peer leaves the cores to the compute threads: each wake costs a few
 * microseconds of CPU. */
#define SPIN_SECONDS              1000e-6
#define BACKOFF_FIRST_NANOSECONDS 20000L
#define BACKOFF_LAST_NANOSECONDS  320000L

eg__mpi_engine_state eg__mpi_engine = {.lock = PTHREAD_MUTEX_INITIALIZER,
                                       .work = PTHREAD_COND_INITIALIZER,
                                       .done = PTHREAD_COND_INITIALIZER};

/* ---- the progress thread ---- */

static bool start_mpi(void) {
    int initialized = 0, finalized = 0, provided = 0, rc;
    char text[MPI_MAX_ERROR_STRING];
    MPI_Finalized(&finalized);
    if (finalized) {
        eg__mpi_engine.init_status = EG_ERR_STATE;
        snprintf(eg__mpi_engine.init_why, sizeof eg__mpi_engine.init_why,
                 "multi-worker: MPI was finalized in this process, and MPI cannot start twice");
        return false;
    }
    MPI_Initialized(&initialized);
    if (initialized) {
        MPI_Query_thread(&provided);
        if (provided < MPI_THREAD_SERIALIZED) {
            eg__mpi_engine.init_status = EG_ERR_STATE;
            snprintf(eg__mpi_engine.init_why, sizeof eg__mpi_engine.init_why,
                     "multi-worker: the program initialized MPI with thread level %d; Eagle calls "
                     "MPI from its own thread and needs MPI_THREAD_SERIALIZED (the program then "
                     "makes no MPI call while a collective runs) or MPI_THREAD_MULTIPLE",
                     provided);
            return false;
        }
        eg__mpi_engine.owns_mpi = false;
    } else {
        rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided);
        if (rc != MPI_SUCCESS) {
            eg__mpi_engine.init_status = EG_ERR_IO;
            snprintf(eg__mpi_engine.init_why, sizeof eg__mpi_engine.init_why,
                     "multi-worker: MPI_Init_thread failed: %s", eg__mpi_error_text(rc, text));
            return false;
        }
        eg__mpi_engine.owns_mpi = true;
        /* Only this thread calls MPI, so FUNNELED (the thread that initialized) is enough. */
        if (provided < MPI_THREAD_FUNNELED) {
            MPI_Finalize();
            eg__mpi_engine.finalized = true;
            eg__mpi_engine.init_status = EG_ERR_UNSUPPORTED;
            snprintf(eg__mpi_engine.init_why, sizeof eg__mpi_engine.init_why,
                     "multi-worker: this MPI offers no thread support (MPI_THREAD_SINGLE), and "
                     "Eagle calls MPI from its own thread");
            return false;
        }
    }
    int *upper = NULL, flag = 0;
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &upper, &flag);
    eg__mpi_engine.tag_slots = ((flag && upper ? (int64_t)*upper : 32767) + 1) / N_PHASES;
    return true;
}

/* Fails the group's unfinished active jobs (a failure broke it, or it is being freed). */
static void fail_group_jobs(job *active, eg__mpi_group *g, const char *why) {
    for (job *a = active; a; a = a->next_work)
        if (a->group == g && !a->finished && a->kind != JOB_LEAVE)
            eg__mpi_fail(a, EG_ERR_STATE, "%s: not completed: %s", a->name, why);
}

static void begin_leave(job *leave, job *active) {
    eg__mpi_group *g = leave->group;
    bool had_jobs = false;
    for (job *a = active; a; a = a->next_work)
        if (a->group == g && !a->finished && a != leave) had_jobs = true;
    fail_group_jobs(active, g, "the group was freed");
    if (had_jobs) {
        /* their messages may still come: the group is unusable, as after a timeout */
        eg__mpi_fail(leave, EG_ERR_STATE,
                     "multi-worker: the group was freed with collectives in flight");
        return;
    }
    if (!g->broken && g->comm != MPI_COMM_NULL) MPI_Comm_free(&g->comm);
    leave->finished = true;
}

/* The progress thread's policy: normal while replicas wait for it, idle otherwise (lock held).
 * Idle alone starves it on a machine whose cores other processes keep busy: a waiting replica
 * frees its core, but every runnable normal thread goes first, and a transfer that needs a few
 * milliseconds of copying took longer than the strategy's timeout (rank 1 "sent 4 of 8 MiB
 * within 10 s" under a sanitizer while other jobs ran). */
static void set_progress_priority(bool normal) {
#if defined(__linux__)
    if (eg__mpi_engine.progress_tid)
        sched_setscheduler((pid_t)eg__mpi_engine.progress_tid, normal ? SCHED_OTHER : SCHED_IDLE,
                           &(struct sched_param){0});
#else
    (void)normal;
#endif
}

static void *progress_main(void *unused) {
    (void)unused;
    bool ok = start_mpi();
#if defined(__linux__)
    prctl(PR_SET_TIMERSLACK, 1000UL); /* the backoff's short sleeps stay short */
    /* Idle priority: the thread runs on cores nothing else wants. At normal priority each start
     * woke it onto the core of the compute thread that posted the job, which then waited for it
     * (the wake preempts), and its polls took turns with the backward pass on a machine with
     * no core to spare; idle, it moves data while the step waits for it and on free cores
     * (bench/distributed/run.sh). Where the kernel refuses, it keeps the normal priority. While
     * a replica waits for it, it runs at normal priority (eg__mpi_wait); MPI starts at normal
     * priority, while the group's creator waits. */
    pthread_mutex_lock(&eg__mpi_engine.lock);
    eg__mpi_engine.progress_tid = (long)syscall(SYS_gettid);
    set_progress_priority(eg__mpi_engine.waiters > 0);
    pthread_mutex_unlock(&eg__mpi_engine.lock);
#endif
    pthread_mutex_lock(&eg__mpi_engine.lock);
    eg__mpi_engine.init_state = ok ? 1 : -1;
    pthread_cond_broadcast(&eg__mpi_engine.done);
    if (!ok) {
        pthread_mutex_unlock(&eg__mpi_engine.lock);
        return NULL;
    }
    job *active = NULL;
    double last_progress = eg__mpi_now_seconds();
    long backoff = BACKOFF_FIRST_NANOSECONDS;
    for (;;) { /* the lock is held here */
        job *fresh = eg__mpi_engine.queue;
        eg__mpi_engine.queue = eg__mpi_engine.queue_tail = NULL;
        if (!fresh && !active) {
            if (eg__mpi_engine.stop) break;
            pthread_cond_wait(&eg__mpi_engine.work, &eg__mpi_engine.lock);
            last_progress = eg__mpi_now_seconds();
            backoff = BACKOFF_FIRST_NANOSECONDS;
            continue;
        }
        pthread_mutex_unlock(&eg__mpi_engine.lock);
        int progress = 0;
        while (fresh) {
            job *j = fresh;
            fresh = fresh->next_work;
            j->next_work = active;
            active = j;
            progress++;
            if (j->kind == JOB_LEAVE)
                begin_leave(j, active);
            else if (j->group->broken)
                eg__mpi_fail(j, EG_ERR_STATE, "%s: the group failed earlier: %s", j->name,
                             j->group->broken_why);
            else
                eg__mpi_begin_job(j);
        }
        double now = eg__mpi_now_seconds();
        for (job *j = active; j; j = j->next_work) {
            if (!j->finished && j->kind != JOB_LEAVE) progress += eg__mpi_poll_job(j);
            if (!j->finished && now > j->deadline) eg__mpi_time_out(j);
        }
        for (job *j = active; j; j = j->next_work)
            if (j->finished && j->status != EG_OK && j->kind != JOB_LEAVE)
                fail_group_jobs(active, j->group, j->message);
        for (job *j = active; j; j = j->next_work)
            if (j->finished && j->status != EG_OK) eg__mpi_cancel_requests(j);
        pthread_mutex_lock(&eg__mpi_engine.lock);
        bool retired = false;
        for (job **link = &active; *link;) {
            job *j = *link;
            if (!j->finished) {
                link = &j->next_work;
                continue;
            }
            *link = j->next_work;
            if (j->status != EG_OK && !j->group->broken) {
                j->group->broken = true;
                snprintf(j->group->broken_why, sizeof j->group->broken_why, "%s", j->message);
            }
            if (j->kind == JOB_JOIN && j->status != EG_OK) {
                eg__mpi_engine.unusable = true;
                snprintf(eg__mpi_engine.unusable_why, sizeof eg__mpi_engine.unusable_why, "%s",
                         j->message);
            }
            j->done = true; /* from here on the waiter owns it */
            j->completed_ns = eg__collective_now_ns();
            retired = true;
        }
        if (retired) pthread_cond_broadcast(&eg__mpi_engine.done);
        if (progress) {
            last_progress = now;
            backoff = BACKOFF_FIRST_NANOSECONDS;
        } else if (now - last_progress > SPIN_SECONDS && !eg__mpi_engine.queue) {
            pthread_mutex_unlock(&eg__mpi_engine.lock);
            nanosleep(&(struct timespec){0, backoff}, NULL);
            if (backoff < BACKOFF_LAST_NANOSECONDS) backoff *= 2;
            pthread_mutex_lock(&eg__mpi_engine.lock);
        }
    }
    /* stopping: the last group is gone */
    if (eg__mpi_engine.owns_mpi && !eg__mpi_engine.any_broken && !eg__mpi_engine.unusable) {
        pthread_mutex_unlock(&eg__mpi_engine.lock);
        MPI_Finalize();
        pthread_mutex_lock(&eg__mpi_engine.lock);
        eg__mpi_engine.finalized = true;
    } else if (eg__mpi_engine.any_broken && !eg__mpi_engine.unusable) {
        eg__mpi_engine.unusable = true;
        snprintf(eg__mpi_engine.unusable_why, sizeof eg__mpi_engine.unusable_why,
                 "multi-worker: an earlier multi-worker group failed, so MPI was left as it was "
                 "and cannot be used again in this process");
    }
    pthread_mutex_unlock(&eg__mpi_engine.lock);
    return NULL;
}

/* Starts the progress thread (lock held), with the process's asynchronous signals blocked in it
 * so that they keep going to the program's own threads. */
bool eg__mpi_engine_start(void) {
    sigset_t block, old;
    sigemptyset(&block);
    int signals[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGALRM, SIGCHLD};
    for (size_t i = 0; i < sizeof signals / sizeof *signals; i++) sigaddset(&block, signals[i]);
    pthread_sigmask(SIG_BLOCK, &block, &old);
    eg__mpi_engine.init_state = 0;
    int rc = pthread_create(&eg__mpi_engine.thread, NULL, progress_main, NULL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) return false;
    eg__mpi_engine.running = true;
    return true;
}

/* Stops the progress thread once the last group is gone (lock held on entry and exit). */
static void stop_engine(void) {
    eg__mpi_engine.stop = eg__mpi_engine.stopping = true;
    pthread_cond_signal(&eg__mpi_engine.work);
    pthread_mutex_unlock(&eg__mpi_engine.lock);
    pthread_join(eg__mpi_engine.thread, NULL);
    pthread_mutex_lock(&eg__mpi_engine.lock);
    eg__mpi_engine.running = eg__mpi_engine.stop = eg__mpi_engine.stopping = false;
    pthread_cond_broadcast(&eg__mpi_engine.done);
}

/* Drops a group's hold on the engine (lock held), stopping it after the last one. */
void eg__mpi_engine_release(void) {
    if (--eg__mpi_engine.groups == 0) stop_engine();
}

/* ---- what replica threads call ---- */

void eg__mpi_wait(const bool *done) {
    if (*done) return;
    if (eg__mpi_engine.waiters++ == 0) set_progress_priority(true);
    while (!*done) pthread_cond_wait(&eg__mpi_engine.done, &eg__mpi_engine.lock);
    if (--eg__mpi_engine.waiters == 0) set_progress_priority(false);
}

/* Queues j for the progress thread (lock held). */
void eg__mpi_enqueue(job *j) {
    j->next_work = NULL;
    if (eg__mpi_engine.queue_tail)
        eg__mpi_engine.queue_tail->next_work = j;
    else
        eg__mpi_engine.queue = j;
    eg__mpi_engine.queue_tail = j;
    pthread_cond_signal(&eg__mpi_engine.work);
}

/* Takes j to the progress thread and waits for it (lock held); its error goes to this thread. */
eg_status eg__mpi_finish(job *j, uint64_t *completed_ns) {
    eg__mpi_wait(&j->done);
    if (completed_ns) *completed_ns = j->completed_ns;
    eg__mpi_group *g = j->group;
    for (job **link = &g->jobs; *link; link = &(*link)->next)
        if (*link == j) {
            *link = j->next;
            break;
        }
    eg_status status = j->status;
    char message[EG_ERROR_MESSAGE_SIZE];
    snprintf(message, sizeof message, "%s", j->message);
    eg__mpi_job_free(g, j);
    pthread_mutex_unlock(&eg__mpi_engine.lock);
    return status == EG_OK ? EG_OK : eg__error(status, "%s", message);
}

/* Adds j to the group and hands it on, unless the group is broken (lock held; on failure j is
 * freed and the lock released). */
eg_status eg__mpi_submit(eg__mpi_group *g, job *j) {
    if (g->broken) {
        eg_status status =
            eg__error(EG_ERR_STATE, "%s: the group failed earlier: %s", j->name, g->broken_why);
        eg__mpi_job_free(g, j);
        pthread_mutex_unlock(&eg__mpi_engine.lock);
        return status;
    }
    j->deadline = eg__mpi_now_seconds() + g->timeout_seconds;
    j->next = g->jobs;
    g->jobs = j;
    if (g->size == 1 || j->n_expected == 0) {
        j->done = true; /* a group of one sums nothing */
        j->completed_ns = eg__collective_now_ns();
    } else {
        eg__mpi_enqueue(j);
    }
    return EG_OK;
}

#endif /* EG_HAVE_MPI */
