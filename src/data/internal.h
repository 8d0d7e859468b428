/* Internal: the input pipeline's datasets (immutable descriptions), their iterators (one pass
 * each, a tree mirroring the dataset graph), per-stage statistics, the pipeline thread pool, and
 * the helpers every stage uses to call user callbacks and move elements between threads.
 *
 * Conventions inside src/data:
 *   - An eg_element held by the pipeline owns one reference per tensor, and its tensors belong to
 *     no scope (so any thread may drop them). All pipeline code runs with scope registration
 *     suspended (eg__scope_suspend): the root's next, and every pipeline thread from its start.
 *     User callbacks run between eg__user_begin / eg__user_end, which resume registration and open
 *     a scope for the call.
 *   - A stage's next returns EG_OK with an element, EG__END at the end of the pass (nothing
 *     raised), or a negative status with the error raised on the calling thread. A stage that
 *     failed is not called again (the root remembers the failure).
 *   - Errors raised on a background thread travel to the consumer as eg__saved_error copies and
 *     are raised again there (eg__error_raise_saved). */
#ifndef EAGLE_SRC_DATA_INTERNAL_H
#define EAGLE_SRC_DATA_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/error.h"
#include "core/tensor_internal.h"
#include "eagle/data.h"

/* Not an eg_status value (those are <= 0): the end of a pass. */
#define EG__END 1

/* ---- time ---- */

int64_t eg__now_ns(void);        /* CLOCK_MONOTONIC */
int64_t eg__thread_cpu_ns(void); /* CPU time of the calling thread */

/* ---- statistics: one record per dataset node per root iterator ---- */

typedef struct eg__stage {
    const eg_dataset *node;
    char name[64];
    int depth;
    bool autotuned;
    atomic_llong elements;
    atomic_llong next_ns; /* inclusive time in next */
    atomic_llong wait_ns; /* blocked on a background producer */
    atomic_llong fill_sum_ppm, fill_samples;
    atomic_llong cpu_ns, calls; /* callback CPU time */
    atomic_int parallelism, buffer_size;
    struct eg__stage *next;
} eg__stage;

/* Shared by every stage of one root iterator. */
typedef struct eg__context {
    pthread_mutex_t mutex; /* guards the stage list */
    eg__stage *stages, *last_stage;
    atomic_llong start_ns; /* first next; 0 before */
    int cpu_budget;
    int64_t ram_budget;
    /* The host has a memory limit (eg_memory_set_limit, EG_MEMORY_LIMIT) as the iterator is
     * made: AUTOTUNE stages then run on the consumer's thread (parallel.c), so that memory use
     * does not depend on timing (a run that hits the limit fails at the same place every
     * time). */
    bool memory_limited;
    atomic_int cpu_claimed;
    atomic_llong ram_claimed;
} eg__context;

/* ---- datasets ---- */

typedef struct eg__iter eg__iter;

/* How a stage's iterator is being created: the context, whether to record statistics (not for
 * datasets made on the fly by interleave) and the depth below the root. */
typedef struct eg__iter_params {
    eg__context *context;
    bool stats;
    int depth;
} eg__iter_params;

typedef struct eg__dataset_ops {
    /* Creates the stage's iterator for pass `epoch` (children through eg__iter_create with
     * params->depth + 1). EG_OK, or an error raised. */
    eg_status (*iterator_new)(eg_dataset *ds, const eg__iter_params *params, uint64_t epoch,
                              eg__iter **out);
    /* Frees the node's own data and drops its references to inputs (not ds itself). */
    void (*destroy)(eg_dataset *ds);
    /* The iterator returned is the input's own (with_options): no stage of its own. */
    bool pass_through;
} eg__dataset_ops;

struct eg_dataset {
    atomic_long refcount;
    const eg__dataset_ops *ops;
    atomic_ullong iterations; /* iterators created so far: the next one's epoch */
    char name[64];            /* the stage's name in statistics */
    bool autotuned;           /* shown in statistics */
};

/* calloc's a node of `size` bytes (>= sizeof(eg_dataset)) with refcount 1; NULL + error. */
void *eg__dataset_alloc(size_t size, const eg__dataset_ops *ops, const char *name);
/* Drops a reference; the last one destroys the node (and, through it, its inputs). NULL ok. */
void eg__dataset_unref(eg_dataset *ds);

/* ---- iterators ---- */

typedef struct eg__iter_ops {
    eg_status (*next)(eg__iter *it, eg_element *out);
    /* Stops threads, releases buffered elements, frees children and the iterator itself. */
    void (*free)(eg__iter *it);
} eg__iter_ops;

struct eg__iter {
    const eg__iter_ops *ops;
    eg__stage *stage;    /* NULL without statistics */
    eg_dataset *dataset; /* a reference, dropped after ops->free */
};

/* Creates ds's iterator for its next epoch; records its stage when params->stats. */
eg_status eg__iter_create(eg_dataset *ds, const eg__iter_params *params, eg__iter **out);
/* Calls it's next, counting elements and time in its stage. */
eg_status eg__iter_next(eg__iter *it, eg_element *out);
void eg__iter_free(eg__iter *it);

/* Params for an input of the stage created with `params`. */
static inline eg__iter_params eg__iter_params_child(const eg__iter_params *params) {
    eg__iter_params child = *params;
    child.depth++;
    return child;
}

/* ---- elements ---- */

/* Drops every reference; n_tensors = 0. */
void eg__element_clear(eg_element *e);
/* Bytes of data the element's tensors hold. */
int64_t eg__element_bytes(const eg_element *e);

/* ---- user callbacks ---- */

typedef struct eg__user_frame {
    int scope_depth;
    int64_t cpu_start;
    /* The call's CPU time, or -1 when it was not timed: reading a thread's CPU clock is a system
     * call (about 1 us), so calls cheaper than 50 us are timed one in 8. */
    int64_t cpu_ns;
    eg__callback_frame errors; /* the call site and call of the library call around it */
} eg__user_frame;

/* Before a callback: scope registration on, a scope and a no-grad region opened. */
void eg__user_begin(eg__user_frame *frame);
/* After it: when `out` is given and status is EG_OK with no error raised by it, checks the element
 * (1..EG_ELEMENT_MAX_TENSORS tensors, none NULL) and takes a reference on each tensor; closes the
 * scope (releasing everything else the call made) and the no-grad region, suspends registration
 * again, and when the call was timed, sets frame->cpu_ns and adds it to `stage` (may be NULL;
 * its `calls` counts timed calls, so cpu_ns / calls is the mean). Returns EG_OK, or the failure
 * raised as "<what>: element <index>: <the callback's message>" (out cleared). */
eg_status eg__user_end(eg__user_frame *frame, eg_status status, eg_element *out, eg__stage *stage,
                       const char *what, int64_t index);

/* ---- errors across threads ---- */

/* The calling thread's pending error (or, when none is pending, `status` with a generic
 * message), moved into a malloc'd copy; the thread's error is cleared. NULL when out of memory. */
eg__saved_error *eg__error_take(eg_status status);
/* Raises a saved error on the calling thread (unless one is pending) and returns its status;
 * saved NULL raises `status` generically. Does not free saved. */
eg_status eg__error_raise_saved(const eg__saved_error *saved, eg_status status);

/* ---- threads ---- */

/* Starts a pipeline thread (scope registration suspended, ops inline). EG_OK or an error. */
eg_status eg__thread_start(pthread_t *thread, void *(*main)(void *), void *arg, const char *what);

/* The pipeline pool: runs tasks (user callbacks; never blocking on other tasks) FIFO. */
typedef struct eg__task {
    void (*run)(struct eg__task *task);
    struct eg__task *next;
} eg__task;
/* Registers a user of the pool, starting threads so that it has at least max(cores, threads)
 * (at most EG_DATASET_MAX_PARALLELISM). EG_OK or an error. */
eg_status eg__pool_acquire(int threads);
/* The last user's release stops the threads (no task may be queued then). */
void eg__pool_release(void);
void eg__pool_submit(eg__task *task);
int eg__cpu_cores(void);

/* ---- stages over one input (transform.c) ---- */

/* Every transformation over one input starts with this node layout... */
typedef struct eg__unary_dataset {
    eg_dataset base;
    eg_dataset *input;
} eg__unary_dataset;

/* ...and its iterator with this one. */
typedef struct eg__unary_iter {
    eg__iter base;
    eg__iter *input;
    uint64_t epoch;
} eg__unary_iter;

/* A node of `size` bytes over input (taken over); NULL when input is NULL (no new error) or out
 * of memory (input released). */
void *eg__unary_new(eg_dataset *input, size_t size, const eg__dataset_ops *ops, const char *name);
/* Drops the node's input (its ops->destroy, or called by one). */
void eg__unary_destroy(eg_dataset *ds);
/* calloc's an iterator of `size` bytes for pass `epoch` and creates the input's iterator. */
eg_status eg__unary_iter_new(eg_dataset *ds, const eg__iter_params *params, uint64_t epoch,
                             size_t size, const eg__iter_ops *ops, eg__iter **out);
/* Frees the input's iterator and the iterator. */
void eg__unary_iter_free(eg__iter *it);
/* Raises EG_ERR_INVALID_ARGUMENT for a transformation's argument, releases its input, returns
 * NULL. */
eg_dataset *eg__invalid_argument(eg_dataset *input, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* ---- stages defined in other files ---- */

/* A from_tensor_slices node over n tensors whose references it takes over (also on failure). */
eg_dataset *eg__dataset_slices_take(int n, eg_tensor **tensors, const char *name);

/* Releases the caller's references to n datasets (for failures of functions that take them over).
 */
void eg__dataset_unref_all(int n, eg_dataset *const *datasets);

#endif
