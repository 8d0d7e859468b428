/* Internal: the persistent CPU thread pool. */
#ifndef EAGLE_SRC_BASE_THREADPOOL_H
#define EAGLE_SRC_BASE_THREADPOOL_H

#include <stdint.h>

#include "eagle/status.h"

/* Processes [begin, end) of the work. */
typedef void (*eg__parallel_fn)(void *context, int64_t begin, int64_t end);

/* Runs fn over [0, n) split into contiguous chunks of at least `grain` items, one per thread,
 * and returns when all are done. Runs inline (one call over [0, n)) when n <= grain, when one
 * thread is configured, when called from inside a pool task, or when another thread is using the
 * pool — so small ops never pay for waking threads. Chunk boundaries depend only on n, grain and
 * the thread count. */
void eg__parallel_for(int64_t n, int64_t grain, eg__parallel_fn fn, void *context);

/* Elements of elementwise work below which an op stays on one thread: waking a sleeping thread
 * costs a few microseconds, about what one core needs for this many simple elements. */
#define EG_PARALLEL_GRAIN_ELEMENTWISE 32768

int eg__num_threads(void);
/* The thread count from now on (eg_set_num_threads, which also tells the backends). */
eg_status eg__threadpool_set_threads(int n);
/* From now on eg__parallel_for runs inline on the calling thread: for threads that work alongside
 * the pool's user (the input pipeline's), so that their ops never take the pool away from the
 * training step's ops. */
void eg__parallel_for_inline_on_this_thread(void);
void eg__threadpool_shutdown(void);

/* A chunk runner wraps every chunk the pool runs while it is set (the profiler's tracing: it
 * times the chunk as a span); NULL runs chunks directly. Relaxed: a chunk that starts just as
 * it changes may run either way. */
typedef void (*eg__chunk_runner)(eg__parallel_fn fn, void *context, int64_t begin, int64_t end);
void eg__threadpool_set_chunk_runner(eg__chunk_runner runner);
/* 1, 2, … on the pool's workers (in the order they started), 0 on every other thread. */
int eg__threadpool_worker_number(void);

#endif
