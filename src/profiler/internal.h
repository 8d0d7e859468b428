/* Internal: the profiler's recording buffers; it sees ops as an observer (src/exec/observer.h)
 * and the thread pool's chunks as its chunk runner, both only while it runs.
 *
 * Cost when off: nothing but the executor's one check for any observer. When on, its observer
 * times each op and records it in the calling thread's buffer. Each buffer has its own mutex,
 * taken by its thread once per record (uncontended) and by readers (stats, report, trace) while
 * they merge; the global mutex guards the list of buffers, the range names and the session's
 * times. Lock order: global, then a buffer; the allocator's mutex is never held together with
 * either. */
#ifndef EAGLE_SRC_PROFILER_INTERNAL_H
#define EAGLE_SRC_PROFILER_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "eagle/profiler.h"
#include "ops/internal.h"

/* ---- state shared by profiler.c and output.c ------------------------------------------------- */

/* EG_PROFILE_* of the running profiler, 0 while off. */
extern atomic_uint eg__profiler_flags;

/* True while the profiler records. */
#define EG__PROFILER_ON()                                                                          \
    __builtin_expect(atomic_load_explicit(&eg__profiler_flags, memory_order_relaxed) != 0, 0)

/* The thread pool's chunk runner while tracing: runs fn(context, begin, end) and records it as
 * a span. */
void eg__profiler_run_chunk(void (*fn)(void *, int64_t, int64_t), void *context, int64_t begin,
                            int64_t end);

/* ---- buffers (shared by profiler.c and output.c) ------------------------------------------- */

#define EG__PROFILER_MAX_DEPTH    64   /* open ranges per thread */
#define EG__PROFILER_MAX_NAMES    4096 /* distinct range names per process */
#define EG__PROFILER_EVENT_INPUTS 4    /* input shapes kept per op event */
#define EG__PROFILER_CHUNK_BYTES  (256u << 10)
#define EG__PROFILER_TRACE_BUDGET ((size_t)256 << 20)
/* A thread samples the allocator after an op when this long has passed since its last sample:
 * every op that takes longer, and a sample at least every few microseconds of small ops. */
#define EG__PROFILER_SAMPLE_NS 5000u

typedef struct eg__prof_stat {
    uint64_t calls, total_ns, min_ns, max_ns;
} eg__prof_stat;

enum { EG__EV_OP = 0, EG__EV_RANGE = 1, EG__EV_CHUNK = 2 };
enum { EG__EVF_OUTPUT = 1u << 0, EG__EVF_FAILED = 1u << 1 };
#define EG__PROFILER_NO_SAMPLE UINT64_MAX

/* One trace event; an op's is followed by n_shapes eg__prof_shape records (its first inputs,
 * then its output when EG__EVF_OUTPUT), each followed by n_dims int64 sizes. */
typedef struct eg__prof_event {
    uint64_t start_ns, end_ns; /* CLOCK_MONOTONIC */
    uint64_t a, b;     /* op: bytes_in_use after it (or NO_SAMPLE) and the backend's note on what
                          ran (a const char *, static; 0: none); chunk: begin, end */
    uint16_t kind, id; /* EG__EV_*; the op or the range name */
    uint8_t n_shapes, n_inputs, flags;
    uint8_t approx; /* op: an EG__APPROX_* (what approximation it computes) */
} eg__prof_event;

/* The approximations an op event names in the trace ("approx" in its args). */
enum { EG__APPROX_NONE, EG__APPROX_INT8, EG__APPROX_SAMPLED, EG__APPROX_FAST_MATH };

typedef struct eg__prof_shape {
    uint8_t dtype, n_dims, unused[6];
} eg__prof_shape;

typedef struct eg__prof_chunk {
    struct eg__prof_chunk *next;
    size_t used;
    _Alignas(8) unsigned char data[];
} eg__prof_chunk;

typedef struct eg__prof_thread {
    struct eg__prof_thread *next;
    pthread_mutex_t mutex; /* guards everything below */
    int os_tid;
    bool alive;    /* false once the thread has exited: the buffer is freed at the next reset */
    bool recorded; /* something was recorded this session */
    char name[64];
    eg__prof_stat ops[EG__OP_COUNT][EG_DTYPE_COUNT]; /* by op and the dtype it ran in */
    eg__prof_stat *ranges;                           /* indexed by name id; n_ranges entries */
    int n_ranges;
    eg__prof_chunk *first, *last;
    uint64_t n_events, n_dropped;
    uint64_t last_sample_ns; /* read and written by the owning thread only */
} eg__prof_thread;

typedef struct eg__profiler_state {
    pthread_mutex_t mutex; /* guards the fields below */
    eg__prof_thread *threads;
    char **names; /* interned range names, never freed */
    int n_names, names_capacity;
    unsigned session_flags; /* of the current or last session; 0 when there are no results */
    bool running, paused;
    uint64_t start_ns, stop_ns;
    uint64_t paused_at_ns, paused_ns; /* the current pause's start; the pauses' total */
} eg__profiler_state;

extern eg__profiler_state eg__profiler;

uint64_t eg__profiler_now_ns(void);

#endif
