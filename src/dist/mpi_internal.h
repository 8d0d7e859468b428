/* Internal: what the files of the MPI group (see mpi.c) share — the job, the group's and the
 * engine's state, and the functions that cross files:
 *   mpi.c         the group's functions and its member ops (what replica threads call);
 *   mpi_engine.c  the progress thread, the one thread that calls MPI, and its queue;
 *   mpi_jobs.c    what a job is: its memory, its messages, its failures.
 * Included only where MPI is built (EG_HAVE_MPI).
 *
 * Ownership: a job belongs to the thread that made it until it is queued (eg__mpi_enqueue), then
 * to the progress thread until that sets `done` (under the engine lock), then to its waiter, who
 * frees it (eg__mpi_job_free). Fields marked "engine lock" are read and written under
 * eg__mpi_engine.lock; those marked "the progress thread's" only by that thread while it owns
 * the job. */
#ifndef EAGLE_SRC_DIST_MPI_INTERNAL_H
#define EAGLE_SRC_DIST_MPI_INTERNAL_H

#include <mpi.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "base/error.h"
#include "dist/internal.h"

/* A job's header, swapped with every peer first: kind, dtype, count, root, tag. */
#define HEADER_WORDS 5
/* Scratch buffers a group keeps for its reductions' incoming chunks. */
#define SCRATCH_POOL 4
/* MPI tags: the job's tag times N_PHASES plus the phase, modulo what MPI_TAG_UB allows. */
enum { PHASE_HEADER, PHASE_SCATTER, PHASE_GATHER, PHASE_EXCHANGE_HEADER, PHASE_EXCHANGE };
#define N_PHASES 8

typedef enum job_kind {
    JOB_REDUCE = 1,
    JOB_BROADCAST,
    JOB_ALL_GATHER,
    JOB_JOIN,
    JOB_LEAVE
} job_kind;
/* What a request slot carries; receives are the even roles. */
typedef enum role {
    ROLE_HEADER_SEND = 1,
    ROLE_HEADER_RECV,
    ROLE_SCATTER_SEND,
    ROLE_SCATTER_RECV,
    ROLE_GATHER_SEND,
    ROLE_GATHER_RECV,
    ROLE_DATA_SEND,
    ROLE_DATA_RECV,
    ROLE_JOIN = 9
} role;

typedef struct slot {
    int role, peer, piece;
} slot;

typedef struct job {
    struct job *next;      /* the group's jobs not yet waited for (engine lock) */
    struct job *next_work; /* the engine's queue, then its active list */
    eg__mpi_group *group;
    job_kind kind;
    int64_t tag;
    char name[64]; /* "all_reduce (tag 12)" */
    void *data;    /* the reduction's buffer, broadcast's data, all_gather's recv */
    int64_t count; /* elements (reductions) or bytes */
    eg_dtype dtype;
    size_t elem;
    int root;
    double deadline;
    bool done;             /* engine lock: the waiter may take it */
    uint64_t completed_ns; /* when done was set (eg__collective_now_ns) */
    eg_status status;
    char message[EG_ERROR_MESSAGE_SIZE];
    /* the progress thread's */
    bool finished;
    int64_t header[HEADER_WORDS];
    int64_t *peer_headers;
    int n_slots, n_expected, n_done;
    MPI_Request *requests;
    slot *slots;
    int *indices;
    MPI_Status *statuses;
    bool *header_in;
    int64_t *bytes_in, *bytes_due;
    int bad_peer; /* a data message of the wrong size from it awaits its header */
    char bad_detail[160];
    int64_t piece;                      /* elements per piece */
    int64_t *chunk;                     /* P + 1 chunk bounds (reductions) */
    int *piece_base;                    /* P + 1: chunk j's pieces are piece_base[j] … */
    int own_pieces, n_pieces;           /* own chunk's; per peer for exchanges */
    int *arrived;                       /* peers whose piece k of the own chunk arrived */
    uint8_t *sent;                      /* scatter piece sent (indexed like piece_base) */
    int *next_gather;                   /* per peer: the next gather receive to post */
    int *scatter_next, *scatter_flight; /* per peer: the next piece to send, those in flight */
    int *gather_next, *gather_flight;
    int summed;           /* the own pieces 0 … summed - 1 are summed */
    const void **sources; /* P */
    int base_a, base_b, base_c, base_d;
    void *scratch;
    size_t scratch_bytes;
    bool scratch_unsafe; /* a receive into it could not be cancelled: never reuse it */
    /* control jobs (join, leave) use one inline request */
    MPI_Request one_request;
    slot one_slot;
    int one_index;
    MPI_Status one_status;
} job;

typedef struct scratch_buffer {
    void *data;
    size_t bytes;
} scratch_buffer;

struct eg__mpi_group {
    int rank, size;
    double timeout_seconds;
    MPI_Comm comm;
    job *jobs;         /* engine lock */
    int64_t exchanges; /* broadcasts and gathers made: their tags (engine lock) */
    bool broken;       /* written by the progress thread under the engine lock */
    char broken_why[EG_ERROR_MESSAGE_SIZE];
    scratch_buffer pool[SCRATCH_POOL];
    job join, leave;
};

/* The process's MPI engine: one progress thread for every group (defined in mpi_engine.c). */
typedef struct eg__mpi_engine_state {
    pthread_mutex_t lock;
    pthread_cond_t work; /* the progress thread waits here for jobs */
    pthread_cond_t done; /* waiters: a job finished, or the engine changed */
    pthread_t thread;
    bool running, stopping, stop;
    int init_state; /* 0 starting, 1 ready, -1 failed */
    eg_status init_status;
    char init_why[EG_ERROR_MESSAGE_SIZE];
    int groups;
    bool owns_mpi, any_broken, finalized, unusable;
    char unusable_why[EG_ERROR_MESSAGE_SIZE];
    int64_t tag_slots;
    job *queue, *queue_tail;
    long progress_tid; /* the progress thread's kernel id (Linux; 0 elsewhere or before) */
    int waiters;       /* replica threads in eg__mpi_finish */
} eg__mpi_engine_state;
extern eg__mpi_engine_state eg__mpi_engine;

/* Waits (lock held) until *done, which the progress thread sets; meanwhile the progress thread
 * runs at normal priority instead of idle, so that it is not starved on a busy machine. */
void eg__mpi_wait(const bool *done);

static inline double eg__mpi_now_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* ---- the progress thread (mpi_engine.c); "lock held": eg__mpi_engine.lock ---- */

/* Starts the progress thread (lock held); false when the thread cannot be made. The thread then
 * starts MPI and sets init_state. */
bool eg__mpi_engine_start(void);
/* Drops a group's hold on the engine (lock held), stopping it after the last one. */
void eg__mpi_engine_release(void);
/* Queues j for the progress thread (lock held). */
void eg__mpi_enqueue(job *j);
/* Adds j to the group and hands it on, unless the group is broken (lock held; on failure j is
 * freed and the lock released, on success the lock stays held). */
eg_status eg__mpi_submit(eg__mpi_group *g, job *j);
/* Takes j to the progress thread and waits for it (lock held; released on return); frees j, and
 * its error goes to this thread. *completed_ns (unless NULL) gets when the progress thread
 * finished it. */
eg_status eg__mpi_finish(job *j, uint64_t *completed_ns);

/* ---- jobs (mpi_jobs.c) ---- */

/* A job of `count` elements of dtype (reductions) or bytes, or NULL when out of memory or too
 * large for MPI's int counts. Its scratch (scratch_bytes) is not yet taken. Free with
 * eg__mpi_job_free. */
job *eg__mpi_job_new(eg__mpi_group *g, job_kind kind, int64_t tag, int64_t count, eg_dtype dtype,
                     int root);
/* Fills in a join or leave job, which lives inside the group (never freed). */
void eg__mpi_control_job(job *j, eg__mpi_group *g, job_kind kind);
/* A buffer of at least `bytes` from the group's pool, else malloc'd; NULL when out of memory
 * (engine lock held: the pool is shared by the group's threads). */
void *eg__mpi_scratch_take(eg__mpi_group *g, size_t bytes);
/* Frees a job from eg__mpi_job_new, its scratch going back to the pool unless a receive into it
 * could not be cancelled (engine lock held). */
void eg__mpi_job_free(eg__mpi_group *g, job *j);
/* The progress thread, on a job it owns: posts what the job can post at its start. */
void eg__mpi_begin_job(job *j);
/* Polls the job's messages; returns how many completed. */
int eg__mpi_poll_job(job *j);
/* The deadline passed: fails j naming the ranks that sent nothing, or too little. */
void eg__mpi_time_out(job *j);
/* Cancels or abandons a failed job's messages (see mpi_jobs.c). */
void eg__mpi_cancel_requests(job *j);
/* Finishes j with status and a printf-style message, unless it finished already. */
void eg__mpi_fail(job *j, eg_status status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* MPI's text for error code rc, written to text (MPI_MAX_ERROR_STRING bytes), which it returns. */
const char *eg__mpi_error_text(int rc, char *text);
/* "all_reduce", "broadcast", "all_gather", or "?" (static storage). */
const char *eg__mpi_kind_name(int64_t kind);

#endif
