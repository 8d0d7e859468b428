/* The input pipeline's core: dataset references, the root iterator (handing elements to the
 * caller's scope, remembering a failure), the generic stage wrapper with its statistics, elements,
 * user-callback frames, errors that cross threads, and pipeline threads. See include/eagle/data.h
 * for the contracts and src/data/internal.h for the conventions. */

#ifndef EG_NO_CALLSITE
#define EG_NO_CALLSITE
#endif

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/threadpool.h"
#include "core/random.h"
#include "data/internal.h"
#include "eagle/autograd.h"
#include "eagle/memory.h"

/* ---- time ---- */

int64_t eg__now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int64_t eg__thread_cpu_ns(void) {
    struct timespec ts;
    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0) return 0;
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* ---- datasets ---- */

void *eg__dataset_alloc(size_t size, const eg__dataset_ops *ops, const char *name) {
    eg_dataset *ds = calloc(1, size);
    if (!ds) {
        eg__error(EG_ERR_OUT_OF_MEMORY, "dataset %s: out of host memory", name);
        return NULL;
    }
    atomic_init(&ds->refcount, 1);
    atomic_init(&ds->iterations, 0);
    ds->ops = ops;
    snprintf(ds->name, sizeof ds->name, "%s", name);
    return ds;
}

void eg__dataset_unref(eg_dataset *ds) {
    if (!ds) return;
    if (atomic_fetch_sub_explicit(&ds->refcount, 1, memory_order_acq_rel) != 1) return;
    ds->ops->destroy(ds);
    free(ds);
}

void eg__dataset_unref_all(int n, eg_dataset *const *datasets) {
    if (!datasets) return;
    for (int i = 0; i < n; i++) eg__dataset_unref(datasets[i]);
}

eg_dataset *eg_dataset_retain(eg_dataset *ds) {
    if (ds) atomic_fetch_add_explicit(&ds->refcount, 1, memory_order_relaxed);
    return ds;
}

void eg_dataset_free(eg_dataset *ds) {
    eg__dataset_unref(ds);
}

/* ---- stages ---- */

/* The stage record of node in this context, created on first use (repeat re-creates an input's
 * iterator each pass: its counts keep adding up in the same record). NULL when out of memory. */
static eg__stage *stage_for(eg__context *context, eg_dataset *node, int depth) {
    pthread_mutex_lock(&context->mutex);
    eg__stage *stage = context->stages;
    while (stage && stage->node != node) stage = stage->next;
    if (!stage && (stage = calloc(1, sizeof *stage))) {
        stage->node = node;
        stage->depth = depth;
        stage->autotuned = node->autotuned;
        snprintf(stage->name, sizeof stage->name, "%s", node->name);
        if (context->last_stage)
            context->last_stage->next = stage;
        else
            context->stages = stage;
        context->last_stage = stage;
    }
    pthread_mutex_unlock(&context->mutex);
    return stage;
}

eg_status eg__iter_create(eg_dataset *ds, const eg__iter_params *params, eg__iter **out) {
    *out = NULL;
    eg__stage *stage = NULL;
    if (params->stats && params->context && !ds->ops->pass_through) {
        stage = stage_for(params->context, ds, params->depth);
        if (!stage) return eg__error(EG_ERR_OUT_OF_MEMORY, "dataset: out of host memory");
    }
    uint64_t epoch = atomic_fetch_add(&ds->iterations, 1);
    eg__iter *it = NULL;
    eg_status status = ds->ops->iterator_new(ds, params, epoch, &it);
    if (status != EG_OK) return status;
    if (!ds->ops->pass_through) {
        it->stage = stage;
        it->dataset = eg_dataset_retain(ds);
    }
    *out = it;
    return EG_OK;
}

eg_status eg__iter_next(eg__iter *it, eg_element *out) {
    out->n_tensors = 0;
    eg__stage *stage = it->stage;
    if (!stage) return it->ops->next(it, out);
    int64_t start = eg__now_ns();
    eg_status status = it->ops->next(it, out);
    atomic_fetch_add_explicit(&stage->next_ns, eg__now_ns() - start, memory_order_relaxed);
    if (status == EG_OK) atomic_fetch_add_explicit(&stage->elements, 1, memory_order_relaxed);
    return status;
}

void eg__iter_free(eg__iter *it) {
    if (!it) return;
    eg_dataset *ds = it->dataset;
    it->ops->free(it);
    eg__dataset_unref(ds);
}

/* ---- elements ---- */

void eg__element_clear(eg_element *e) {
    for (int i = 0; i < e->n_tensors; i++) eg__unref(e->tensors[i]);
    e->n_tensors = 0;
}

int64_t eg__element_bytes(const eg_element *e) {
    int64_t bytes = 0;
    for (int i = 0; i < e->n_tensors; i++)
        bytes += e->tensors[i]->n_elems * (int64_t)eg_dtype_size(e->tensors[i]->dtype);
    return bytes;
}

void eg_element_release(eg_element *element) {
    if (!element) return;
    for (int i = 0; i < element->n_tensors && i < EG_ELEMENT_MAX_TENSORS; i++)
        eg_release(element->tensors[i]);
    element->n_tensors = 0;
}

void eg_dataset_call_random(uint64_t seed, const eg_dataset_call_info *info, uint32_t words[4]) {
    if (!words) return;
    eg__philox4x32(seed, info ? info->epoch : 0, info ? (uint64_t)info->index : 0, words);
}

/* ---- errors across threads ---- */

eg__saved_error *eg__error_take(eg_status status) {
    eg__saved_error *saved = malloc(sizeof *saved);
    if (saved) {
        eg__error_save(saved);
        if (saved->status == EG_OK) {
            saved->status = status;
            snprintf(saved->message, sizeof saved->message, "dataset: %s",
                     eg_status_string(status));
        }
    }
    eg_clear_error();
    return saved;
}

eg_status eg__error_raise_saved(const eg__saved_error *saved, eg_status status) {
    if (saved) return eg__error_raise_copy(saved);
    eg__error(status, "dataset: %s (the details were lost: out of host memory)",
              eg_status_string(status));
    return status;
}

/* ---- user callbacks ---- */

static _Thread_local unsigned timing_tick;
static _Thread_local int64_t last_timed_ns;

void eg__user_begin(eg__user_frame *frame) {
    eg__scope_resume();
    frame->scope_depth = eg_scope_depth();
    eg_scope_begin();
    eg_no_grad_begin();
    bool timed = last_timed_ns > 50000 || (timing_tick++ & 7) == 0;
    frame->cpu_ns = -1;
    frame->cpu_start = timed ? eg__thread_cpu_ns() : -1;
    eg__callback_begin(&frame->errors);
}

/* Replaces the error the callback raised (or, when it raised none, a generic one for `status`)
 * by the same status with "<what>: element <index>: " in front. */
static eg_status prefix_error(eg_status status, bool raised, const char *what, int64_t index) {
    eg__saved_error saved = {0};
    if (raised) {
        status = eg_last_status();
        snprintf(saved.message, sizeof saved.message, "%s: element %lld: %s", what,
                 (long long)index, eg_last_error());
    } else {
        snprintf(saved.message, sizeof saved.message,
                 "%s: element %lld: the callback returned '%s' without raising an error", what,
                 (long long)index, eg_status_string(status));
    }
    saved.status = status;
    if (raised) eg_clear_error();
    eg__error_raise_copy(&saved);
    return status;
}

eg_status eg__user_end(eg__user_frame *frame, eg_status status, eg_element *out, eg__stage *stage,
                       const char *what, int64_t index) {
    if (frame->cpu_start >= 0) {
        frame->cpu_ns = eg__thread_cpu_ns() - frame->cpu_start;
        last_timed_ns = frame->cpu_ns;
        if (stage) {
            atomic_fetch_add_explicit(&stage->cpu_ns, frame->cpu_ns, memory_order_relaxed);
            atomic_fetch_add_explicit(&stage->calls, 1, memory_order_relaxed);
        }
    }
    eg__callback_end(&frame->errors);
    eg_no_grad_end();
    bool raised = eg__error_since(frame->errors.mark), failed = status != EG_OK || raised;
    if (!failed && out) {
        if (out->n_tensors < 1 || out->n_tensors > EG_ELEMENT_MAX_TENSORS) {
            status = eg__error(EG_ERR_INVALID_ARGUMENT,
                               "the callback returned an element of %d tensors (1 to %d allowed)",
                               out->n_tensors, EG_ELEMENT_MAX_TENSORS);
            failed = true;
        } else {
            for (int i = 0; i < out->n_tensors && !failed; i++)
                if (!out->tensors[i]) {
                    status = eg__error(EG_ERR_INVALID_ARGUMENT,
                                       "the callback returned EG_OK but tensor %d of its element "
                                       "is NULL",
                                       i);
                    failed = true;
                }
        }
        /* A tensor still waiting to be computed (lazy mode) is computed here, on this thread. */
        for (int i = 0; i < out->n_tensors && !failed; i++)
            if (!out->tensors[i]->storage && !eg_tensor_data(out->tensors[i])) {
                status = eg_last_status();
                failed = true;
            }
        if (!failed)
            for (int i = 0; i < out->n_tensors; i++) eg__ref(out->tensors[i]);
    }
    while (eg_scope_depth() > frame->scope_depth) eg_scope_end();
    eg__scope_suspend();
    if (!failed) return EG_OK;
    if (out) out->n_tensors = 0;
    return prefix_error(status == EG_OK ? EG_ERR_INTERNAL : status,
                        eg__error_since(frame->errors.mark), what, index);
}

/* ---- threads ---- */

typedef struct thread_start {
    void *(*main)(void *);
    void *arg;
} thread_start;

static void *thread_trampoline(void *p) {
    thread_start start = *(thread_start *)p;
    free(p);
    eg__scope_suspend();
    eg__parallel_for_inline_on_this_thread();
    return start.main(start.arg);
}

eg_status eg__thread_start(pthread_t *thread, void *(*main)(void *), void *arg, const char *what) {
    thread_start *start = malloc(sizeof *start);
    if (!start) return eg__error(EG_ERR_OUT_OF_MEMORY, "%s: out of host memory", what);
    start->main = main;
    start->arg = arg;
    int rc = pthread_create(thread, NULL, thread_trampoline, start);
    if (rc != 0) {
        free(start);
        return eg__error(EG_ERR_OUT_OF_MEMORY, "%s: cannot start a thread: %s", what, strerror(rc));
    }
    return EG_OK;
}

/* ---- the root iterator ---- */

struct eg_dataset_iterator {
    eg__context context;
    eg__iter *root;
    bool ended;
    eg_status failed;         /* EG_OK until the pass fails */
    eg__saved_error *failure; /* its error, raised again by later calls */
};

static void context_free(eg__context *context) {
    for (eg__stage *stage = context->stages, *next; stage; stage = next) {
        next = stage->next;
        free(stage);
    }
    pthread_mutex_destroy(&context->mutex);
}

eg_dataset_iterator *eg_dataset_iterator_new(eg_dataset *ds) {
    if (!ds) {
        eg__error(EG_ERR_NULL_ARGUMENT, "dataset_iterator_new: dataset is NULL");
        return NULL;
    }
    eg_dataset_iterator *it = calloc(1, sizeof *it);
    if (!it || pthread_mutex_init(&it->context.mutex, NULL) != 0) {
        free(it);
        eg__error(EG_ERR_OUT_OF_MEMORY, "dataset_iterator_new: out of host memory");
        return NULL;
    }
    it->context.cpu_budget = eg__cpu_cores();
    it->context.ram_budget = (int64_t)1 << 30;
    eg_memory_stats host;
    it->context.memory_limited =
        eg_memory_stats_get(eg_device_cpu(), &host) == EG_OK && host.limit != 0;
    eg__iter_params params = {.context = &it->context, .stats = true, .depth = 0};
    eg__scope_suspend();
    eg_status status = eg__iter_create(ds, &params, &it->root);
    eg__scope_resume();
    if (status != EG_OK) {
        context_free(&it->context);
        free(it);
        return NULL;
    }
    return it;
}

/* Hands t (a pipeline reference, no scope) to the caller: registered with the caller's scope when
 * the pipeline holds the only reference, else as a new view of it (the same tensor object may be
 * buffered elsewhere, e.g. by a cache, and an object belongs to one scope at most). */
static eg_tensor *hand_out(eg_tensor *t) {
    if (atomic_load(&t->refcount) == 1 && !t->scope && !t->variable) {
        eg__scope_register(t);
        return t;
    }
    eg_tensor *view = eg__tensor_view(t, t->n_dims, t->shape, t->strides, t->offset);
    eg__unref(t);
    return view;
}

eg_status eg_dataset_iterator_next(eg_dataset_iterator *it, eg_element *element, bool *end) {
    if (element) element->n_tensors = 0;
    if (end) *end = false;
    if (!it || !element || !end)
        return eg__error(EG_ERR_NULL_ARGUMENT, "dataset_iterator_next: %s is NULL",
                         !it        ? "iterator"
                         : !element ? "element"
                                    : "end");
    if (it->failed != EG_OK) return eg__error_raise_saved(it->failure, it->failed);
    if (it->ended) {
        *end = true;
        return EG_OK;
    }
    long long expected = 0;
    atomic_compare_exchange_strong(&it->context.start_ns, &expected, eg__now_ns());
    eg__saved_error earlier;
    eg__error_set_aside(&earlier);
    eg_element e = {0};
    eg__scope_suspend();
    eg_status status = eg__iter_next(it->root, &e);
    eg__scope_resume();
    if (status == EG_OK) {
        for (int i = 0; i < e.n_tensors; i++) {
            element->tensors[i] = hand_out(e.tensors[i]);
            if (!element->tensors[i]) status = eg_last_status();
        }
        element->n_tensors = e.n_tensors;
        if (status != EG_OK) eg_element_release(element);
    } else if (status == EG__END) {
        it->ended = true;
        *end = true;
        status = EG_OK;
    }
    if (status != EG_OK) {
        it->failed = status;
        free(it->failure);
        it->failure = eg__error_pending() ? eg__error_take(status) : NULL;
        eg__error_raise_saved(it->failure, status);
    }
    eg__error_restore(&earlier);
    return status;
}

void eg_dataset_iterator_free(eg_dataset_iterator *it) {
    if (!it) return;
    eg__saved_error earlier;
    eg__error_set_aside(&earlier);
    eg__scope_suspend();
    eg__iter_free(it->root);
    eg__scope_resume();
    eg_clear_error();
    eg__error_restore(&earlier);
    context_free(&it->context);
    free(it->failure);
    free(it);
}

/* ---- statistics ---- */

int eg_dataset_stats(const eg_dataset_iterator *it, eg_dataset_stage_stats *stats, int capacity) {
    if (!it || (!stats && capacity > 0)) {
        eg__error(EG_ERR_NULL_ARGUMENT, "dataset_stats: %s is NULL", !it ? "iterator" : "stats");
        return -1;
    }
    eg__context *context = (eg__context *)&it->context;
    int64_t start = atomic_load(&context->start_ns);
    double elapsed = start ? (double)(eg__now_ns() - start) * 1e-9 : 0.0;
    int count = 0;
    pthread_mutex_lock(&context->mutex);
    for (const eg__stage *stage = context->stages; stage; stage = stage->next, count++) {
        if (count >= capacity) continue;
        eg_dataset_stage_stats *s = &stats[count];
        memset(s, 0, sizeof *s);
        snprintf(s->name, sizeof s->name, "%s", stage->name);
        s->depth = stage->depth;
        s->elements = atomic_load(&stage->elements);
        s->throughput = elapsed > 0 ? (double)s->elements / elapsed : 0.0;
        s->seconds_in_next = (double)atomic_load(&stage->next_ns) * 1e-9;
        s->wait_seconds = (double)atomic_load(&stage->wait_ns) * 1e-9;
        s->parallelism = atomic_load(&stage->parallelism);
        s->buffer_size = atomic_load(&stage->buffer_size);
        long long samples = atomic_load(&stage->fill_samples);
        s->buffer_fill =
            samples ? (double)atomic_load(&stage->fill_sum_ppm) * 1e-6 / (double)samples : 0.0;
        long long calls = atomic_load(&stage->calls);
        s->call_cpu_seconds =
            calls ? (double)atomic_load(&stage->cpu_ns) * 1e-9 / (double)calls : 0.0;
        s->autotuned = stage->autotuned;
    }
    pthread_mutex_unlock(&context->mutex);
    return count;
}

eg_status eg_dataset_stats_print(const eg_dataset_iterator *it, FILE *out) {
    if (!out) return eg__error(EG_ERR_NULL_ARGUMENT, "dataset_stats_print: out is NULL");
    eg_dataset_stage_stats stats[64];
    int n = eg_dataset_stats(it, stats, 64);
    if (n < 0) return eg_last_status();
    fprintf(out, "%-34s %10s %11s %8s %8s %7s %6s %11s\n", "stage", "elements", "elements/s",
            "in next", "waited", "calls", "buffer", "cpu/call");
    for (int i = 0; i < n && i < 64; i++) {
        const eg_dataset_stage_stats *s = &stats[i];
        char name[128], calls[16] = "", buffer[32] = "", cpu[16] = "";
        snprintf(name, sizeof name, "%*s%.100s", 2 * s->depth > 24 ? 24 : 2 * s->depth, "",
                 s->name);
        if (s->parallelism)
            snprintf(calls, sizeof calls, "%d%s", s->parallelism, s->autotuned ? "*" : "");
        if (s->buffer_size)
            snprintf(buffer, sizeof buffer, "%d@%.0f%%", s->buffer_size, 100 * s->buffer_fill);
        if (s->call_cpu_seconds > 0)
            snprintf(cpu, sizeof cpu, "%.1f us", s->call_cpu_seconds * 1e6);
        fprintf(out, "%-34s %10lld %11.0f %7.3fs %7.3fs %7s %6s %11s\n", name,
                (long long)s->elements, s->throughput, s->seconds_in_next, s->wait_seconds, calls,
                buffer, cpu);
    }
    if (n > 64) fprintf(out, "(%d more stages)\n", n - 64);
    fprintf(out, "(* chosen by AUTOTUNE; buffer: capacity@mean fill when asked)\n");
    return EG_OK;
}
