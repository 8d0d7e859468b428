/* The pipeline stages that run ahead of their consumer on other threads — map (sequential, or
 * with parallel calls on the pipeline pool) and prefetch (a background thread and a bounded
 * buffer) — and AUTOTUNE, which sizes both from what it measures while they run.
 *
 * Parallel map. A feeder thread pulls input elements one by one (so a slow or blocking input never
 * occupies a pool thread) into a list of slots in input order, at most `capacity` outstanding (see
 * map_capacity). Up to `parallelism` runner tasks on the pool take pending slots in order and run
 * the calls, each runner going on to the next pending slot until none is left, so that a busy map
 * costs no thread hand-over per element. The consumer takes the oldest result (or, when not
 * deterministic, any finished one). A failed call's error travels with its result, so elements
 * before it are still delivered first. Threads that wait for room (the feeder, a prefetch's
 * producer) are woken when half the buffer is free, not for every element taken.
 *
 * Prefetch. A producer thread fills a ring of `capacity` elements; the consumer takes from it.
 *
 * AUTOTUNE, measured per window (>= 20 ms and >= 4 elements, or >= 200 ms):
 *   f = mean CPU time of one map call (thread CPU time: not inflated when threads share cores;
 *       cheap calls are sampled, see eg__user_frame);
 *   d = mean time the consumer spends between two of its requests (its own work per element);
 *   i = mean time the feeder waits for one input element;
 *   target parallelism = ceil(1.15 * f / max(d, i)), within the iterator's CPU budget.
 * The parallelism moves towards the target only while it matters — up only when the consumer
 * waited (> 2% of the window), down only when it did not (< 0.5%) — and only after two windows in
 * a row agree; after two reversals of direction it stays (settled). A prefetch buffer starts at 1
 * and doubles each time the consumer finds it empty after the producer had filled it (bursts of
 * demand the buffer was too small to absorb); it never shrinks, and stays within 64 elements and
 * the iterator's memory budget (largest element seen times capacity).
 *
 * Under a host memory limit AUTOTUNE runs its stages on the consumer's thread — a map's calls one
 * by one, no prefetch — so that every allocation of the pipeline happens in the same order as the
 * consumer's own: fixed buffer sizes alone are not enough, since the caching allocator's segments
 * then still interleave pipeline and training tensors as the threads' timing has it, and whether a
 * request near the limit fits depends on that fragmentation. */

#ifndef EG_NO_CALLSITE
#define EG_NO_CALLSITE
#endif

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/internal.h"

#define PREFETCH_AUTOTUNE_MAX 64
#define WINDOW_MIN_NS         20000000LL
#define WINDOW_MAX_NS         200000000LL

/* ---- CPU budget of the autotuned maps of one iterator ---- */

/* Claims up to `wanted` more parallel calls from the budget; returns how many were granted. */
static int budget_claim(eg__context *context, int wanted) {
    int claimed = atomic_load(&context->cpu_claimed);
    for (;;) {
        int available = context->cpu_budget - claimed;
        int grant = wanted < available ? wanted : available;
        if (grant <= 0) return 0;
        if (atomic_compare_exchange_weak(&context->cpu_claimed, &claimed, claimed + grant))
            return grant;
    }
}

static void budget_release(eg__context *context, int n) {
    if (n > 0) atomic_fetch_sub(&context->cpu_claimed, n);
}

/* ---- map ---- */

typedef struct map_dataset {
    eg_dataset base;
    eg_dataset *input;
    eg_dataset_map_fn fn;
    void *context;
    int parallelism; /* 0: sequential; n; EG_AUTOTUNE */
    bool deterministic;
} map_dataset;

/* Sequential: calls in the consumer's thread. */
typedef struct sequential_map_iter {
    eg__iter base;
    eg__iter *input;
    uint64_t epoch;
    int64_t index;
} sequential_map_iter;

static eg_status sequential_map_next(eg__iter *base, eg_element *out) {
    sequential_map_iter *it = (sequential_map_iter *)base;
    const map_dataset *ds = (const map_dataset *)base->dataset;
    eg_element e = {0};
    eg_status status = eg__iter_next(it->input, &e);
    if (status != EG_OK) return status;
    eg_dataset_call_info info = {it->epoch, it->index};
    eg__user_frame frame;
    eg__user_begin(&frame);
    status = ds->fn(&e, out, &info, ds->context);
    status = eg__user_end(&frame, status, out, base->stage, "map", it->index);
    it->index++;
    eg__element_clear(&e);
    return status;
}

static void sequential_map_free(eg__iter *base) {
    eg__iter_free(((sequential_map_iter *)base)->input);
    free(base);
}

static const eg__iter_ops sequential_map_ops = {sequential_map_next, sequential_map_free};

/* Parallel: one slot per input element, in input order. */
enum { SLOT_PENDING, SLOT_RUNNING, SLOT_DONE };

typedef struct map_slot {
    struct map_slot *next;
    int64_t index;
    eg_element input, output;
    eg_status status;
    eg__saved_error *error;
    int state;
} map_slot;

/* A pool task that runs pending calls of one map, in input order, until none is left. */
typedef struct map_runner {
    eg__task task; /* first: the pool hands back this pointer */
    struct parallel_map_iter *owner;
    bool active;
} map_runner;

typedef struct autotune_window {
    int64_t start_ns;
    int64_t consumed, outside_ns, wait_ns;
    int64_t calls, cpu_ns;
    int64_t inputs, input_ns;
} autotune_window;

typedef struct parallel_map_iter {
    eg__iter base;
    eg__iter *input;
    eg__context *context;
    uint64_t epoch;
    const map_dataset *ds; /* set at the first next */

    pthread_mutex_t mutex;  /* guards everything below */
    pthread_cond_t results; /* a call finished, a runner left, or the feeder ended */
    pthread_cond_t room;    /* the feeder may pull another input element */
    map_slot *head, *tail;  /* outstanding, in input order */
    map_slot *next_pending; /* the first slot no runner has taken */
    int outstanding, pending, running, ready;
    int parallelism, capacity;
    int runners; /* runner tasks submitted and not yet finished */
    map_runner runner_tasks[EG_DATASET_MAX_PARALLELISM];
    int64_t largest_output; /* bytes of the largest result so far */
    bool started, feeder_running, feeder_waiting, consumer_waiting, pool_acquired, cancelled;
    bool input_done;
    eg_status input_status;
    eg__saved_error *input_error;
    int64_t next_index;
    pthread_t feeder;

    /* AUTOTUNE */
    bool autotune;
    int claimed; /* calls claimed from the budget */
    autotune_window window;
    int64_t last_return_ns;
    int want, agree, last_direction, reversals;
    bool settled;
} parallel_map_iter;

/* Results a map may hold: at least 2 per parallel call (so calls keep running while the consumer
 * is busy), and up to MAP_BUFFER_MAX while they take at most 1/16 of the memory budget (so that
 * cheap calls run in bursts instead of threads handing over every single element). */
#define MAP_BUFFER_MAX 32
static int map_capacity(const parallel_map_iter *m) {
    int capacity = MAP_BUFFER_MAX;
    if (m->largest_output > 0 && m->context) {
        int64_t fits = m->context->ram_budget / 16 / m->largest_output;
        if (fits < capacity) capacity = (int)fits;
    }
    return capacity > 2 * m->parallelism ? capacity : 2 * m->parallelism;
}

/* Mutex held for all of these. */
static void publish_settings(parallel_map_iter *m) {
    if (!m->base.stage) return;
    atomic_store(&m->base.stage->parallelism, m->parallelism);
    atomic_store(&m->base.stage->buffer_size, m->capacity);
}

static void update_capacity(parallel_map_iter *m) {
    int capacity = map_capacity(m);
    if (capacity == m->capacity) return;
    m->capacity = capacity;
    publish_settings(m);
    pthread_cond_signal(&m->room);
}

static void map_runner_run(eg__task *task);

/* Claims runners while pending calls outnumber the runners not busy with a call; returns how
 * many it put in `list`, which the caller must submit to the pool (after unlocking, best: a
 * runner starts by taking the mutex). Mutex held. */
static int start_runners(parallel_map_iter *m, map_runner **list) {
    int n = 0;
    while (m->runners < m->parallelism && m->pending > m->runners - m->running) {
        map_runner *r = NULL;
        for (int i = 0; i < EG_DATASET_MAX_PARALLELISM && !r; i++)
            if (!m->runner_tasks[i].active) r = &m->runner_tasks[i];
        if (!r) break;
        r->active = true;
        r->owner = m;
        r->task.run = map_runner_run;
        m->runners++;
        list[n++] = r;
    }
    return n;
}

static void set_parallelism(parallel_map_iter *m, int parallelism) {
    m->parallelism = parallelism;
    m->capacity = map_capacity(m);
    publish_settings(m);
    map_runner *list[EG_DATASET_MAX_PARALLELISM];
    int n = start_runners(m, list);
    for (int i = 0; i < n; i++) eg__pool_submit(&list[i]->task); /* rare: under the mutex */
    pthread_cond_signal(&m->room);
}

static void map_runner_run(eg__task *task) {
    map_runner *r = (map_runner *)task;
    parallel_map_iter *m = r->owner;
    const map_dataset *ds = m->ds;
    bool notify = false; /* the consumer waits for a result this runner finished */
    pthread_mutex_lock(&m->mutex);
    for (;;) {
        map_slot *slot = m->next_pending;
        if (!slot || m->cancelled || m->runners > m->parallelism) break;
        m->next_pending = slot->next;
        slot->state = SLOT_RUNNING;
        m->pending--;
        m->running++;
        pthread_mutex_unlock(&m->mutex);
        /* Outside the mutex, so that the consumer does not wake only to wait for it; m lives:
         * it is freed only once no runner is left. */
        if (notify) pthread_cond_broadcast(&m->results);
        notify = false;

        eg_dataset_call_info info = {m->epoch, slot->index};
        eg__user_frame frame;
        eg__user_begin(&frame);
        eg_status status = ds->fn(&slot->input, &slot->output, &info, ds->context);
        status = eg__user_end(&frame, status, &slot->output, m->base.stage, "map", slot->index);
        eg__element_clear(&slot->input);
        eg__saved_error *error = status != EG_OK ? eg__error_take(status) : NULL;
        int64_t bytes = status == EG_OK ? eg__element_bytes(&slot->output) : 0;

        pthread_mutex_lock(&m->mutex);
        slot->status = status;
        slot->error = error;
        slot->state = SLOT_DONE;
        m->running--;
        m->ready++;
        if (frame.cpu_ns >= 0) {
            m->window.calls++;
            m->window.cpu_ns += frame.cpu_ns;
        }
        if (bytes > m->largest_output) {
            m->largest_output = bytes;
            update_capacity(m);
        }
        notify = m->consumer_waiting;
    }
    r->active = false;
    m->runners--;
    pthread_cond_broadcast(&m->results);
    pthread_mutex_unlock(&m->mutex); /* m may be freed from here on */
}

static void *map_feeder(void *arg) {
    parallel_map_iter *m = arg;
    pthread_mutex_lock(&m->mutex);
    for (;;) {
        while (!m->cancelled && m->outstanding >= m->capacity) {
            m->feeder_waiting = true;
            pthread_cond_wait(&m->room, &m->mutex);
        }
        m->feeder_waiting = false;
        if (m->cancelled) break;
        pthread_mutex_unlock(&m->mutex);
        eg_element e = {0};
        int64_t start = eg__now_ns();
        eg_status status = eg__iter_next(m->input, &e);
        int64_t elapsed = eg__now_ns() - start;
        map_slot *slot = NULL;
        if (status == EG_OK && !(slot = calloc(1, sizeof *slot))) {
            eg__element_clear(&e);
            status = eg__error(EG_ERR_OUT_OF_MEMORY, "map: out of host memory");
        }
        eg__saved_error *error = status < 0 ? eg__error_take(status) : NULL;
        pthread_mutex_lock(&m->mutex);
        m->window.inputs++;
        m->window.input_ns += elapsed;
        if (status != EG_OK) {
            m->input_done = true;
            m->input_status = status;
            m->input_error = error;
            pthread_cond_broadcast(&m->results);
            break;
        }
        if (m->cancelled) {
            eg__element_clear(&e);
            free(slot);
            break;
        }
        slot->index = m->next_index++;
        slot->input = e;
        slot->state = SLOT_PENDING;
        if (m->tail)
            m->tail->next = slot;
        else
            m->head = slot;
        m->tail = slot;
        if (!m->next_pending) m->next_pending = slot;
        m->outstanding++;
        m->pending++;
        map_runner *list[EG_DATASET_MAX_PARALLELISM];
        int n = start_runners(m, list);
        if (n > 0) {
            pthread_mutex_unlock(&m->mutex);
            for (int i = 0; i < n; i++) eg__pool_submit(&list[i]->task);
            pthread_mutex_lock(&m->mutex);
        }
    }
    pthread_mutex_unlock(&m->mutex);
    return NULL;
}

/* Called by the consumer with the mutex held, after taking a result. */
static void map_autotune(parallel_map_iter *m, int64_t now) {
    autotune_window *w = &m->window;
    int64_t elapsed = now - w->start_ns;
    if (!(elapsed >= WINDOW_MIN_NS && w->consumed >= 4) && !(elapsed >= WINDOW_MAX_NS)) return;
    if (w->calls > 0 && w->consumed > 0 && !m->settled) {
        double f = (double)w->cpu_ns / (double)w->calls;
        double d = (double)w->outside_ns / (double)w->consumed;
        double i = w->inputs ? (double)w->input_ns / (double)w->inputs : 0.0;
        double demand = fmax(fmax(d, i), 1000.0);
        double ratio = 1.15 * f / demand;
        int target =
            ratio >= EG_DATASET_MAX_PARALLELISM ? EG_DATASET_MAX_PARALLELISM : (int)ceil(ratio);
        if (target < 1) target = 1;
        double waited = (double)w->wait_ns / (double)elapsed;
        int direction = 0;
        if (target > m->parallelism && waited > 0.02)
            direction = 1;
        else if (target < m->parallelism && waited < 0.005)
            direction = -1;
        if (direction == 0) {
            m->want = m->agree = 0;
        } else if (direction != m->want) {
            m->want = direction;
            m->agree = 1;
        } else if (++m->agree >= 2) {
            int changed = 0;
            if (direction > 0) {
                int granted = budget_claim(m->context, target - m->parallelism);
                m->claimed += granted;
                changed = granted;
            } else {
                int lower = target > m->parallelism - 1 ? target : m->parallelism - 1;
                changed = lower - m->parallelism;
                budget_release(m->context, -changed);
                m->claimed += changed;
            }
            if (changed) {
                set_parallelism(m, m->parallelism + changed);
                if (m->last_direction && direction != m->last_direction && ++m->reversals >= 2)
                    m->settled = true;
                m->last_direction = direction;
            }
            m->want = m->agree = 0;
        }
    }
    memset(w, 0, sizeof *w);
    w->start_ns = now;
}

/* Starts the feeder (and the pool) at the first next. Mutex held. */
static eg_status map_start(parallel_map_iter *m) {
    m->started = true;
    m->ds = (const map_dataset *)m->base.dataset;
    int wanted = m->autotune ? m->context->cpu_budget : m->parallelism;
    eg_status status = eg__pool_acquire(wanted);
    if (status != EG_OK) return status;
    m->pool_acquired = true;
    m->window.start_ns = eg__now_ns();
    publish_settings(m);
    status = eg__thread_start(&m->feeder, map_feeder, m, "map");
    if (status == EG_OK) m->feeder_running = true;
    return status;
}

static eg_status parallel_map_next(eg__iter *base, eg_element *out) {
    parallel_map_iter *m = (parallel_map_iter *)base;
    int64_t now = eg__now_ns();
    pthread_mutex_lock(&m->mutex);
    if (!m->started) {
        eg_status status = map_start(m);
        if (status != EG_OK) {
            pthread_mutex_unlock(&m->mutex);
            return status;
        }
    }
    if (m->last_return_ns) m->window.outside_ns += now - m->last_return_ns;
    if (base->stage) {
        atomic_fetch_add(&base->stage->fill_sum_ppm, (long long)m->ready * 1000000 / m->capacity);
        atomic_fetch_add(&base->stage->fill_samples, 1);
    }
    map_slot *slot = NULL, *previous = NULL;
    int64_t waited = 0;
    for (;;) {
        if (m->ds->deterministic) {
            if (m->head && m->head->state == SLOT_DONE) slot = m->head;
        } else {
            for (map_slot *before = NULL, *s = m->head; s; before = s, s = s->next)
                if (s->state == SLOT_DONE) {
                    slot = s;
                    previous = before;
                    break;
                }
        }
        if (slot || (!m->head && m->input_done)) break;
        int64_t wait_start = eg__now_ns();
        m->consumer_waiting = true;
        pthread_cond_wait(&m->results, &m->mutex);
        m->consumer_waiting = false;
        waited += eg__now_ns() - wait_start;
    }
    bool wake_feeder = false;
    if (slot) {
        if (slot == m->head)
            m->head = slot->next;
        else
            previous->next = slot->next;
        if (slot == m->tail) m->tail = previous;
        m->outstanding--;
        m->ready--;
        /* Wake a feeder waiting for room only once half the results are gone: it then refills in
         * a burst instead of waking for every element. */
        wake_feeder = m->feeder_waiting && m->outstanding <= m->capacity / 2;
    }
    m->window.consumed++;
    m->window.wait_ns += waited;
    if (base->stage && waited) atomic_fetch_add(&base->stage->wait_ns, waited);
    if (m->autotune) map_autotune(m, eg__now_ns());
    eg_status status;
    if (slot) {
        status = slot->status;
        if (status == EG_OK)
            *out = slot->output;
        else
            eg__error_raise_saved(slot->error, status);
    } else {
        status = m->input_status;
        if (status != EG__END) eg__error_raise_saved(m->input_error, status);
    }
    m->last_return_ns = eg__now_ns();
    pthread_mutex_unlock(&m->mutex);
    if (wake_feeder) pthread_cond_signal(&m->room);
    if (slot) {
        free(slot->error);
        free(slot);
    }
    return status;
}

static void parallel_map_free(eg__iter *base) {
    parallel_map_iter *m = (parallel_map_iter *)base;
    pthread_mutex_lock(&m->mutex);
    m->cancelled = true;
    pthread_cond_broadcast(&m->room);
    pthread_mutex_unlock(&m->mutex);
    if (m->feeder_running) pthread_join(m->feeder, NULL);
    pthread_mutex_lock(&m->mutex);
    while (m->runners > 0) pthread_cond_wait(&m->results, &m->mutex);
    pthread_mutex_unlock(&m->mutex);
    for (map_slot *slot = m->head, *next; slot; slot = next) {
        next = slot->next;
        eg__element_clear(&slot->input);
        eg__element_clear(&slot->output);
        free(slot->error);
        free(slot);
    }
    free(m->input_error);
    if (m->pool_acquired) eg__pool_release();
    budget_release(m->context, m->claimed);
    eg__iter_free(m->input);
    pthread_mutex_destroy(&m->mutex);
    pthread_cond_destroy(&m->results);
    pthread_cond_destroy(&m->room);
    free(m);
}

static const eg__iter_ops parallel_map_ops = {parallel_map_next, parallel_map_free};

static eg_status map_iterator_new(eg_dataset *base, const eg__iter_params *params, uint64_t epoch,
                                  eg__iter **out) {
    const map_dataset *ds = (const map_dataset *)base;
    eg__iter_params child = eg__iter_params_child(params);
    eg__iter *input;
    eg_status status = eg__iter_create(ds->input, &child, &input);
    if (status != EG_OK) return status;
    /* under a memory limit AUTOTUNE runs the calls on the consumer's thread (see the top) */
    bool limited = params->context && params->context->memory_limited;
    if (ds->parallelism == 0 || (ds->parallelism == EG_AUTOTUNE && limited)) {
        sequential_map_iter *it = calloc(1, sizeof *it);
        if (!it) {
            eg__iter_free(input);
            return eg__error(EG_ERR_OUT_OF_MEMORY, "map: out of host memory");
        }
        it->base.ops = &sequential_map_ops;
        it->input = input;
        it->epoch = epoch;
        *out = &it->base;
        return EG_OK;
    }
    parallel_map_iter *m = calloc(1, sizeof *m);
    if (!m) {
        eg__iter_free(input);
        return eg__error(EG_ERR_OUT_OF_MEMORY, "map: out of host memory");
    }
    pthread_mutex_init(&m->mutex, NULL);
    pthread_cond_init(&m->results, NULL);
    pthread_cond_init(&m->room, NULL);
    m->base.ops = &parallel_map_ops;
    m->input = input;
    m->context = params->context;
    m->epoch = epoch;
    m->autotune = ds->parallelism == EG_AUTOTUNE && m->context;
    if (m->autotune) {
        m->claimed = budget_claim(m->context, 1);
        m->parallelism = 1; /* at least one call even when the budget is spent */
    } else {
        m->parallelism = ds->parallelism == EG_AUTOTUNE ? 1 : ds->parallelism;
    }
    m->capacity = map_capacity(m);
    *out = &m->base;
    return EG_OK;
}

static void map_destroy(eg_dataset *base) {
    eg__dataset_unref(((map_dataset *)base)->input);
}

static const eg__dataset_ops map_ops = {map_iterator_new, map_destroy, false};

eg_dataset *eg_dataset_map(eg_dataset *input, eg_dataset_map_fn fn, void *context,
                           int num_parallel_calls, bool deterministic) {
    if (!input) return NULL;
    if (!fn) {
        eg__error(EG_ERR_NULL_ARGUMENT, "dataset_map: fn is NULL");
        eg__dataset_unref(input);
        return NULL;
    }
    if (num_parallel_calls != EG_AUTOTUNE &&
        (num_parallel_calls < 0 || num_parallel_calls > EG_DATASET_MAX_PARALLELISM)) {
        eg__error(EG_ERR_INVALID_ARGUMENT,
                  "dataset_map: num_parallel_calls is %d; 0 (sequential), 1 to %d, or "
                  "EG_AUTOTUNE",
                  num_parallel_calls, EG_DATASET_MAX_PARALLELISM);
        eg__dataset_unref(input);
        return NULL;
    }
    char name[64];
    if (num_parallel_calls == 0)
        snprintf(name, sizeof name, "map");
    else if (num_parallel_calls == EG_AUTOTUNE)
        snprintf(name, sizeof name, "map(parallel=AUTOTUNE%s)", deterministic ? "" : ", unordered");
    else
        snprintf(name, sizeof name, "map(parallel=%d%s)", num_parallel_calls,
                 deterministic ? "" : ", unordered");
    map_dataset *ds = eg__dataset_alloc(sizeof *ds, &map_ops, name);
    if (!ds) {
        eg__dataset_unref(input);
        return NULL;
    }
    ds->base.autotuned = num_parallel_calls == EG_AUTOTUNE;
    ds->input = input;
    ds->fn = fn;
    ds->context = context;
    ds->parallelism = num_parallel_calls;
    ds->deterministic = deterministic;
    return &ds->base;
}

/* ---- prefetch ---- */

typedef struct prefetch_dataset {
    eg_dataset base;
    eg_dataset *input;
    int buffer_size; /* >= 1 or EG_AUTOTUNE */
} prefetch_dataset;

typedef struct prefetch_iter {
    eg__iter base;
    eg__iter *input;
    eg__context *context;

    pthread_mutex_t mutex; /* guards everything below */
    pthread_cond_t items, space;
    eg_element *ring;
    int ring_size; /* allocated: grows up to limit as the buffer fills */
    int limit;     /* buffer_size, or the AUTOTUNE maximum */
    int capacity;  /* in use (<= limit) */
    int head, count;
    bool started, thread_running, cancelled, done, consumer_waiting;
    eg_status end_status;
    eg__saved_error *error;
    pthread_t thread;

    bool autotune, was_full;
    int64_t largest_element, ram_claimed;
} prefetch_iter;

static void set_capacity(prefetch_iter *p, int capacity) {
    p->capacity = capacity;
    if (p->base.stage) atomic_store(&p->base.stage->buffer_size, capacity);
    pthread_cond_signal(&p->space);
}

/* Doubles the ring (up to limit), keeping the order. Mutex held. */
static eg_status ring_grow(prefetch_iter *p) {
    int size = 2 * p->ring_size < p->limit ? 2 * p->ring_size : p->limit;
    eg_element *ring = malloc((size_t)size * sizeof *ring);
    if (!ring) return eg__error(EG_ERR_OUT_OF_MEMORY, "prefetch: out of host memory");
    for (int i = 0; i < p->count; i++) ring[i] = p->ring[(p->head + i) % p->ring_size];
    free(p->ring);
    p->ring = ring;
    p->ring_size = size;
    p->head = 0;
    return EG_OK;
}

static void *prefetch_producer(void *arg) {
    prefetch_iter *p = arg;
    bool notify = false; /* the consumer waits for the element just added */
    pthread_mutex_lock(&p->mutex);
    for (;;) {
        if (notify && p->count >= p->capacity) { /* about to sleep: wake it now */
            pthread_cond_signal(&p->items);
            notify = false;
        }
        while (!p->cancelled && p->count >= p->capacity) {
            p->was_full = true;
            pthread_cond_wait(&p->space, &p->mutex);
        }
        if (p->cancelled) break;
        pthread_mutex_unlock(&p->mutex);
        /* Outside the mutex, so that the consumer does not wake only to wait for it. */
        if (notify) pthread_cond_signal(&p->items);
        notify = false;
        eg_element e = {0};
        eg_status status = eg__iter_next(p->input, &e);
        eg__saved_error *error = status < 0 ? eg__error_take(status) : NULL;
        int64_t bytes = status == EG_OK ? eg__element_bytes(&e) : 0;
        pthread_mutex_lock(&p->mutex);
        if (status != EG_OK) {
            p->done = true;
            p->end_status = status;
            p->error = error;
            pthread_cond_broadcast(&p->items);
            break;
        }
        if (p->cancelled) {
            eg__element_clear(&e);
            break;
        }
        if (bytes > p->largest_element) p->largest_element = bytes;
        if (p->count == p->ring_size && ring_grow(p) != EG_OK) {
            eg__element_clear(&e);
            p->done = true;
            p->end_status = EG_ERR_OUT_OF_MEMORY;
            p->error = eg__error_take(EG_ERR_OUT_OF_MEMORY);
            pthread_cond_broadcast(&p->items);
            break;
        }
        p->ring[(p->head + p->count) % p->ring_size] = e;
        p->count++;
        notify = p->consumer_waiting;
    }
    pthread_mutex_unlock(&p->mutex);
    return NULL;
}

/* The consumer found the buffer empty: grow it if the producer had filled it (see the top). */
static void prefetch_autotune(prefetch_iter *p) {
    if (!p->was_full || p->capacity >= p->limit) return;
    p->was_full = false;
    int capacity = 2 * p->capacity > p->limit ? p->limit : 2 * p->capacity;
    int64_t more = p->largest_element * (capacity - p->capacity);
    int64_t claimed = atomic_fetch_add(&p->context->ram_claimed, more);
    if (claimed + more > p->context->ram_budget) {
        atomic_fetch_sub(&p->context->ram_claimed, more);
        return;
    }
    p->ram_claimed += more;
    set_capacity(p, capacity);
}

static eg_status prefetch_next(eg__iter *base, eg_element *out) {
    prefetch_iter *p = (prefetch_iter *)base;
    pthread_mutex_lock(&p->mutex);
    if (!p->started) {
        p->started = true;
        set_capacity(p, p->capacity);
        eg_status status = eg__thread_start(&p->thread, prefetch_producer, p, "prefetch");
        if (status != EG_OK) {
            pthread_mutex_unlock(&p->mutex);
            return status;
        }
        p->thread_running = true;
    }
    if (base->stage) {
        atomic_fetch_add(&base->stage->fill_sum_ppm, (long long)p->count * 1000000 / p->capacity);
        atomic_fetch_add(&base->stage->fill_samples, 1);
    }
    if (p->count == 0 && !p->done) {
        if (p->autotune) prefetch_autotune(p);
        int64_t wait_start = eg__now_ns();
        p->consumer_waiting = true;
        while (p->count == 0 && !p->done) pthread_cond_wait(&p->items, &p->mutex);
        p->consumer_waiting = false;
        if (base->stage) atomic_fetch_add(&base->stage->wait_ns, eg__now_ns() - wait_start);
    }
    bool wake_producer = false;
    eg_status status;
    if (p->count > 0) {
        *out = p->ring[p->head];
        p->head = (p->head + 1) % p->ring_size;
        p->count--;
        wake_producer = p->count <= p->capacity / 2;
        status = EG_OK;
    } else {
        status = p->end_status;
        if (status != EG__END) eg__error_raise_saved(p->error, status);
    }
    pthread_mutex_unlock(&p->mutex);
    if (wake_producer) pthread_cond_signal(&p->space);
    return status;
}

static void prefetch_free(eg__iter *base) {
    prefetch_iter *p = (prefetch_iter *)base;
    pthread_mutex_lock(&p->mutex);
    p->cancelled = true;
    pthread_cond_broadcast(&p->space);
    pthread_mutex_unlock(&p->mutex);
    if (p->thread_running) pthread_join(p->thread, NULL);
    for (int i = 0; i < p->count; i++) eg__element_clear(&p->ring[(p->head + i) % p->ring_size]);
    free(p->ring);
    free(p->error);
    if (p->context) atomic_fetch_sub(&p->context->ram_claimed, p->ram_claimed);
    eg__iter_free(p->input);
    pthread_mutex_destroy(&p->mutex);
    pthread_cond_destroy(&p->items);
    pthread_cond_destroy(&p->space);
    free(p);
}

static const eg__iter_ops prefetch_iter_ops = {prefetch_next, prefetch_free};

/* A prefetch that prefetches nothing (AUTOTUNE under a memory limit): its input's elements, on
 * the consumer's thread. */
typedef struct forwarding_iter {
    eg__iter base;
    eg__iter *input;
} forwarding_iter;

static eg_status forwarding_next(eg__iter *base, eg_element *out) {
    return eg__iter_next(((forwarding_iter *)base)->input, out);
}

static void forwarding_free(eg__iter *base) {
    eg__iter_free(((forwarding_iter *)base)->input);
    free(base);
}

static const eg__iter_ops forwarding_iter_ops = {forwarding_next, forwarding_free};

static eg_status forwarding_iterator_new(eg_dataset *input, const eg__iter_params *params,
                                         eg__iter **out) {
    forwarding_iter *f = calloc(1, sizeof *f);
    if (!f) return eg__error(EG_ERR_OUT_OF_MEMORY, "prefetch: out of host memory");
    eg__iter_params child = eg__iter_params_child(params);
    eg_status status = eg__iter_create(input, &child, &f->input);
    if (status != EG_OK) {
        free(f);
        return status;
    }
    f->base.ops = &forwarding_iter_ops;
    *out = &f->base;
    return EG_OK;
}

static eg_status prefetch_iterator_new(eg_dataset *base, const eg__iter_params *params,
                                       uint64_t epoch, eg__iter **out) {
    (void)epoch;
    const prefetch_dataset *ds = (const prefetch_dataset *)base;
    if (ds->buffer_size == EG_AUTOTUNE && params->context && params->context->memory_limited)
        return forwarding_iterator_new(ds->input, params, out); /* prefetches nothing */
    prefetch_iter *p = calloc(1, sizeof *p);
    bool autotune = ds->buffer_size == EG_AUTOTUNE && params->context;
    int limit = ds->buffer_size == EG_AUTOTUNE ? PREFETCH_AUTOTUNE_MAX : ds->buffer_size;
    int ring_size = limit < 4 ? limit : 4;
    eg_element *ring = p ? calloc((size_t)ring_size, sizeof *ring) : NULL;
    if (!ring) {
        free(p);
        return eg__error(EG_ERR_OUT_OF_MEMORY, "prefetch: out of host memory");
    }
    eg__iter_params child = eg__iter_params_child(params);
    eg_status status = eg__iter_create(ds->input, &child, &p->input);
    if (status != EG_OK) {
        free(ring);
        free(p);
        return status;
    }
    pthread_mutex_init(&p->mutex, NULL);
    pthread_cond_init(&p->items, NULL);
    pthread_cond_init(&p->space, NULL);
    p->base.ops = &prefetch_iter_ops;
    p->context = params->context;
    p->ring = ring;
    p->ring_size = ring_size;
    p->limit = limit;
    p->autotune = autotune;
    p->capacity = autotune || ds->buffer_size == EG_AUTOTUNE ? 1 : ds->buffer_size;
    *out = &p->base;
    return EG_OK;
}

static void prefetch_destroy(eg_dataset *base) {
    eg__dataset_unref(((prefetch_dataset *)base)->input);
}

static const eg__dataset_ops prefetch_ops = {prefetch_iterator_new, prefetch_destroy, false};

eg_dataset *eg_dataset_prefetch(eg_dataset *input, int buffer_size) {
    if (!input) return NULL;
    if (buffer_size == 0) return input;
    if (buffer_size != EG_AUTOTUNE && (buffer_size < 0 || buffer_size > 1 << 20)) {
        eg__error(EG_ERR_INVALID_ARGUMENT,
                  "dataset_prefetch: buffer_size is %d; 0 (none), 1 to 2^20, or EG_AUTOTUNE",
                  buffer_size);
        eg__dataset_unref(input);
        return NULL;
    }
    char name[64];
    if (buffer_size == EG_AUTOTUNE)
        snprintf(name, sizeof name, "prefetch(AUTOTUNE)");
    else
        snprintf(name, sizeof name, "prefetch(%d)", buffer_size);
    prefetch_dataset *ds = eg__dataset_alloc(sizeof *ds, &prefetch_ops, name);
    if (!ds) {
        eg__dataset_unref(input);
        return NULL;
    }
    ds->base.autotuned = buffer_size == EG_AUTOTUNE;
    ds->input = input;
    ds->buffer_size = buffer_size;
    return &ds->base;
}
