/* Eagle — the profiler: per-op counts and times, user-defined ranges and a Chrome trace.
 *
 * It is always compiled in. While it is off, an op pays one predictable branch on a relaxed
 * atomic flag. While it is on, each op is timed with clock_gettime(CLOCK_MONOTONIC) and recorded
 * in a buffer of the calling thread (ops may run on several user threads at once); the buffers are
 * merged under a mutex when the results are read.
 *
 *     eg_profiler_start(EG_PROFILE_OPS | EG_PROFILE_TRACE);
 *     for (int step = 0; step < n; step++) {
 *         eg_profiler_range_push("step");
 *         ...
 *         eg_profiler_range_pop();
 *     }
 *     eg_profiler_stop();
 *     eg_profiler_report(stdout, 0);
 *     eg_profiler_write_trace("trace.json");   // open in https://ui.perfetto.dev
 *
 * All functions are thread-safe. Results are kept after eg_profiler_stop until the next
 * eg_profiler_start or eg_profiler_reset. */
#ifndef EAGLE_PROFILER_H
#define EAGLE_PROFILER_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "eagle/dtype.h"
#include "eagle/status.h"

#ifdef __cplusplus
extern "C" {
#endif

enum {
    /* Per-op and per-range counts and times (eg_profiler_report, eg_profiler_stats). */
    EG_PROFILE_OPS = 1u << 0,
    /* Also one span per op, range and thread-pool chunk, and allocator samples, for
     * eg_profiler_write_trace. Implies EG_PROFILE_OPS. Costs memory: about 100 bytes per op;
     * events beyond 256 MiB of buffers are dropped and counted (dropped_events). */
    EG_PROFILE_TRACE = 1u << 1,
    /* Op and range times (stats and report, not the trace's spans) are the calling thread's CPU
     * time instead of wall-clock time: steady on a shared machine, where other processes take
     * the core away; but a thread pool's share of an op is left out (profile with one thread
     * for whole-op figures) and time spent waiting is not counted. Implies EG_PROFILE_OPS. Costs
     * two more clock reads per op (a system call each, ~0.2 us). */
    EG_PROFILE_CPU_TIME = 1u << 2,
};

/* Discards earlier results and starts recording. flags: EG_PROFILE_OPS, EG_PROFILE_TRACE and/or
 * EG_PROFILE_CPU_TIME. EG_ERR_INVALID_ARGUMENT for 0 or unknown bits, EG_ERR_STATE when already
 * running. */
eg_status eg_profiler_start(unsigned flags);
/* Stops recording; the results stay readable. EG_ERR_STATE when not running. */
eg_status eg_profiler_stop(void);
/* Suspends recording without ending the session (e.g. around an evaluation inside a profiled
 * training run): ops and ranges that close while paused are not recorded, and the pause does not
 * count in wall_seconds. EG_ERR_STATE when not running or already paused. resume: EG_ERR_STATE
 * when not paused. eg_profiler_stop also ends a pause. */
eg_status eg_profiler_pause(void);
eg_status eg_profiler_resume(void);
/* Discards the results (running or not: while running, recording goes on from now). Ranges open
 * at the time are not recorded when they close. */
void eg_profiler_reset(void);
/* The flags of the running profiler, 0 when it is off or paused. */
unsigned eg_profiler_flags(void);

/* User-defined ranges ("step", "data", "optimizer"): a span from push to the matching pop on the
 * same thread, shown in the trace and counted in the stats like an op. They nest (up to 64 deep
 * per thread). Push and pop may be called whether or not the profiler runs (they then cost a
 * thread-local access); a range is recorded when the profiler ran, within one session, at both
 * ends. name is copied. push: EG_ERR_NULL_ARGUMENT for a NULL name, EG_ERR_STATE when 64 ranges
 * are already open on this thread; pop: EG_ERR_STATE when none is open. */
eg_status eg_profiler_range_push(const char *name);
eg_status eg_profiler_range_pop(void);

/* Names this thread in the trace (copied, up to 63 bytes). By default the process's main thread
 * is "main", the CPU thread pool's workers "eagle pool N" and other threads "thread TID". */
eg_status eg_profiler_set_thread_name(const char *name);

/* One op in one dtype (all calls of it on all threads) or one range name. */
typedef struct eg_profiler_entry {
    const char *name; /* "matmul", or the range's name; static storage */
    bool is_range;
    eg_dtype dtype; /* what the op ran in: a low-precision product's compute dtype, else its
                       first input's dtype (a cast's: its result's); EG_DTYPE_COUNT for a range */
    uint64_t calls;
    double total_seconds;
    double min_seconds;
    double max_seconds;
} eg_profiler_entry;

typedef struct eg_profiler_summary {
    unsigned flags; /* flags of the session (also after it stopped); 0 before any */
    bool running;   /* started and not stopped (also while paused) */
    bool paused;
    double wall_seconds;     /* start -> stop (or -> now while running), less the pauses */
    double op_seconds;       /* sum of every op call's time (CPU time with EG_PROFILE_CPU_TIME) */
    uint64_t op_calls;       /* op calls recorded */
    int n_threads;           /* threads that recorded something */
    uint64_t trace_events;   /* events kept for the trace */
    uint64_t dropped_events; /* events not kept because the trace buffers were full */
} eg_profiler_summary;

/* Reads the results. summary may be NULL. entries (may be NULL when capacity is 0) receives at
 * most `capacity` entries: the ops that ran, by total time descending, then the ranges, by total
 * time descending. *n_entries (may be NULL) receives how many there are in all. */
eg_status eg_profiler_stats(eg_profiler_summary *summary, eg_profiler_entry *entries, int capacity,
                            int *n_entries);

/* Prints the per-op table sorted by total time: op, dtype (what it ran in), calls, total ms, mean us, % of the time spent
 * in ops; then the ranges. step_seconds > 0 is the mean wall time of one step and adds the
 * columns "ms/step" and "% step" (the op's time per step over step_seconds); the number of
 * steps is the number of "step" ranges recorded, or, without any, wall_seconds / step_seconds.
 * step_seconds == 0 takes both from the "step" ranges when there are some and leaves the columns
 * out otherwise. EG_ERR_INVALID_ARGUMENT for a NULL stream or a negative step_seconds; EG_ERR_IO
 * when writing fails. */
eg_status eg_profiler_report(FILE *out, double step_seconds);

/* Writes the Chrome trace-event JSON (https://ui.perfetto.dev, chrome://tracing) of a session
 * started with EG_PROFILE_TRACE: one "X" span per op (args: inputs as dtype and shape, output),
 * per range and per thread-pool chunk; "C" counter events ("memory") of the allocator's
 * bytes_in_use, sampled after an op when 5 us have passed since the thread's last sample (so
 * after every op longer than that) and written when the value changed; "M" thread_name events.
 * Timestamps are microseconds since eg_profiler_start, by the wall clock (also with
 * EG_PROFILE_CPU_TIME). The file is replaced atomically.
 * EG_ERR_STATE when no trace was recorded, EG_ERR_IO when the file cannot be written. */
eg_status eg_profiler_write_trace(const char *path);

#if !defined(EG_NO_CALLSITE)
#define eg_profiler_start(...)           EG_CALLSITE_(eg_profiler_start(__VA_ARGS__))
#define eg_profiler_stop(...)            EG_CALLSITE_(eg_profiler_stop(__VA_ARGS__))
#define eg_profiler_pause(...)           EG_CALLSITE_(eg_profiler_pause(__VA_ARGS__))
#define eg_profiler_resume(...)          EG_CALLSITE_(eg_profiler_resume(__VA_ARGS__))
#define eg_profiler_range_push(...)      EG_CALLSITE_(eg_profiler_range_push(__VA_ARGS__))
#define eg_profiler_range_pop(...)       EG_CALLSITE_(eg_profiler_range_pop(__VA_ARGS__))
#define eg_profiler_set_thread_name(...) EG_CALLSITE_(eg_profiler_set_thread_name(__VA_ARGS__))
#define eg_profiler_stats(...)           EG_CALLSITE_(eg_profiler_stats(__VA_ARGS__))
#define eg_profiler_report(...)          EG_CALLSITE_(eg_profiler_report(__VA_ARGS__))
#define eg_profiler_write_trace(...)     EG_CALLSITE_(eg_profiler_write_trace(__VA_ARGS__))
#endif

#ifdef __cplusplus
}
#endif
#endif
