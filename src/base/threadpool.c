#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <unistd.h>

#include "base/threadpool.h"
#include "base/error.h"
#include "eagle/runtime.h"

#define MAX_THREADS 256

/* How long a worker polls for the next job, and the caller for its job's last chunk, before
 * sleeping on the condition variable: 4096 pause instructions, 0.12 ms on this project's Zen 3.
 * A training step posts its products one after another with serial work between them; a worker
 * that slept in between was woken by a futex call and a scheduler round trip (tens of
 * microseconds on a virtual machine), which the caller then waited out at the end of each job.
 * Polling took the 784-512-512-10 step at 2 threads from 4.10 to 3.90 ms and the seed model's
 * from 126 to 118 us (bench_modes_step, medians of alternating runs). Bounded, so an idle
 * process does not keep a core busy. */
#define SPIN_PAUSES 4096

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define cpu_relax() _mm_pause()
#else
#define cpu_relax() ((void)0)
#endif

typedef struct job {
    eg__parallel_fn fn;
    void *context;
    int64_t n, chunk;
    int n_chunks;
} job;

typedef struct pool {
    pthread_mutex_t mutex; /* guards the fields below and the job */
    pthread_cond_t work_ready, work_done;
    pthread_t threads[MAX_THREADS];
    int n_workers;               /* running worker threads (configured threads - 1) */
    uint64_t generation;         /* bumped for each job */
    atomic_uint_fast64_t posted; /* generation, readable without the mutex (for polling) */
    int workers_active;          /* workers holding a snapshot of the current job */
    bool stopping;
    job current;
    atomic_int next_chunk;
    atomic_int chunks_left;
} pool;

static pool the_pool = {.mutex = PTHREAD_MUTEX_INITIALIZER,
                        .work_ready = PTHREAD_COND_INITIALIZER,
                        .work_done = PTHREAD_COND_INITIALIZER};
/* Serialises callers: one job at a time; others run inline instead of queueing. */
static pthread_mutex_t pool_user = PTHREAD_MUTEX_INITIALIZER;
static atomic_int configured_threads; /* 0 = not yet read from the environment */
static _Thread_local bool inside_pool_task;
static _Thread_local int worker_number; /* 0: not a pool worker */
static atomic_int workers_started;
static _Atomic(eg__chunk_runner) chunk_runner;

void eg__threadpool_set_chunk_runner(eg__chunk_runner runner) {
    atomic_store_explicit(&chunk_runner, runner, memory_order_relaxed);
}

int eg__threadpool_worker_number(void) {
    return worker_number;
}

static int default_threads(void) {
    const char *env = getenv("EG_NUM_THREADS");
    if (env) {
        int n = atoi(env);
        if (n >= 1) return n < MAX_THREADS ? n : MAX_THREADS;
    }
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    return cores >= 1 ? (cores < MAX_THREADS ? (int)cores : MAX_THREADS) : 1;
}

void eg__parallel_for_inline_on_this_thread(void) {
    inside_pool_task = true;
}

int eg__num_threads(void) {
    int n = atomic_load(&configured_threads);
    if (n == 0) {
        int expected = 0;
        atomic_compare_exchange_strong(&configured_threads, &expected, default_threads());
        n = atomic_load(&configured_threads);
    }
    return n;
}

/* A job is posted only when no worker still holds the previous one's snapshot, so the shared
 * chunk counter always belongs to the job a worker is running. */
static void run_chunks(pool *p, const job *j) {
    for (;;) {
        int chunk = atomic_fetch_add(&p->next_chunk, 1);
        if (chunk >= j->n_chunks) return;
        int64_t begin = chunk * j->chunk;
        int64_t end = begin + j->chunk < j->n ? begin + j->chunk : j->n;
        eg__chunk_runner runner = atomic_load_explicit(&chunk_runner, memory_order_relaxed);
        if (__builtin_expect(runner != NULL, 0))
            runner(j->fn, j->context, begin, end);
        else
            j->fn(j->context, begin, end);
        if (atomic_fetch_sub(&p->chunks_left, 1) == 1) {
            pthread_mutex_lock(&p->mutex);
            pthread_cond_broadcast(&p->work_done);
            pthread_mutex_unlock(&p->mutex);
        }
    }
}

static void *worker_main(void *arg) {
    pool *p = arg;
    inside_pool_task = true;
    worker_number = atomic_fetch_add(&workers_started, 1) + 1;
    uint64_t seen = 0;
    pthread_mutex_lock(&p->mutex);
    for (;;) {
        pthread_mutex_unlock(&p->mutex);
        for (int i = 0; i < SPIN_PAUSES && atomic_load(&p->posted) == seen; i++) cpu_relax();
        pthread_mutex_lock(&p->mutex);
        while (!p->stopping && p->generation == seen) pthread_cond_wait(&p->work_ready, &p->mutex);
        if (p->stopping) break;
        seen = p->generation;
        job snapshot = p->current;
        p->workers_active++;
        pthread_mutex_unlock(&p->mutex);
        run_chunks(p, &snapshot);
        pthread_mutex_lock(&p->mutex);
        if (--p->workers_active == 0) pthread_cond_broadcast(&p->work_done);
    }
    pthread_mutex_unlock(&p->mutex);
    return NULL;
}

static void stop_workers(pool *p) {
    pthread_mutex_lock(&p->mutex);
    p->stopping = true;
    pthread_cond_broadcast(&p->work_ready);
    pthread_mutex_unlock(&p->mutex);
    for (int i = 0; i < p->n_workers; i++) pthread_join(p->threads[i], NULL);
    p->n_workers = 0;
    p->stopping = false;
}

/* Called with pool_user held. */
static void ensure_workers(pool *p, int wanted) {
    if (p->n_workers == wanted) return;
    stop_workers(p);
    for (int i = 0; i < wanted; i++) {
        if (pthread_create(&p->threads[i], NULL, worker_main, p) != 0) break;
        p->n_workers++;
    }
}

void eg__parallel_for(int64_t n, int64_t grain, eg__parallel_fn fn, void *context) {
    if (n <= 0) return;
    if (grain < 1) grain = 1;
    int threads = eg__num_threads();
    if (threads <= 1 || n <= grain || inside_pool_task || pthread_mutex_trylock(&pool_user)) {
        fn(context, 0, n);
        return;
    }
    pool *p = &the_pool;
    ensure_workers(p, threads - 1);
    int64_t n_chunks = (n + grain - 1) / grain;
    if (n_chunks > threads) n_chunks = threads;
    job j = {.fn = fn, .context = context, .n = n, .chunk = (n + n_chunks - 1) / n_chunks};
    j.n_chunks = (int)((n + j.chunk - 1) / j.chunk);
    pthread_mutex_lock(&p->mutex);
    while (p->workers_active > 0) pthread_cond_wait(&p->work_done, &p->mutex);
    p->current = j;
    atomic_store(&p->next_chunk, 0);
    atomic_store(&p->chunks_left, j.n_chunks);
    p->generation++;
    atomic_store(&p->posted, p->generation);
    pthread_cond_broadcast(&p->work_ready);
    pthread_mutex_unlock(&p->mutex);
    inside_pool_task = true;
    run_chunks(p, &j);
    inside_pool_task = false;
    for (int i = 0; i < SPIN_PAUSES && atomic_load(&p->chunks_left) > 0; i++) cpu_relax();
    pthread_mutex_lock(&p->mutex);
    while (atomic_load(&p->chunks_left) > 0) pthread_cond_wait(&p->work_done, &p->mutex);
    pthread_mutex_unlock(&p->mutex);
    pthread_mutex_unlock(&pool_user);
}

void eg__threadpool_shutdown(void) {
    pthread_mutex_lock(&pool_user);
    stop_workers(&the_pool);
    pthread_mutex_unlock(&pool_user);
}

eg_status eg__threadpool_set_threads(int n) {
    if (n < 1 || n > MAX_THREADS)
        return eg__error(EG_ERR_INVALID_ARGUMENT, "set_num_threads: %d is not in 1..%d", n,
                         MAX_THREADS);
    atomic_store(&configured_threads, n);
    return EG_OK;
}

int eg_get_num_threads(void) {
    return eg__num_threads();
}
