/* The profiler: sessions, per-thread recording of ops, ranges and pool chunks, and the merged
 * statistics. The report and the trace file are written by output.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "base/error.h"
#include "base/threadpool.h"
#include "device/device.h"
#include "dispatch/dispatch.h"
#include "exec/observer.h"
#include "profiler/internal.h"

atomic_uint eg__profiler_flags;
eg__profiler_state eg__profiler = {.mutex = PTHREAD_MUTEX_INITIALIZER};

/* Bumped by every start and reset: a record made with an older generation is dropped, so that
 * nothing begun before a reset lands in the new results. */
static atomic_uint_fast64_t generation;
/* Bytes of trace chunks allocated, all threads. */
static atomic_size_t trace_bytes;

/* This thread's buffer (created at its first record) and what names it. */
static _Thread_local eg__prof_thread *this_buffer;
static _Thread_local char thread_name[64];

typedef struct range_frame {
    bool recording;
    uint16_t name_id;
    uint64_t generation, start_ns;
    uint64_t cpu_start_ns; /* with EG_PROFILE_CPU_TIME */
} range_frame;
static _Thread_local range_frame range_stack[EG__PROFILER_MAX_DEPTH];
static _Thread_local int range_depth;
/* The last name this thread interned: repeated pushes of one name skip the global mutex. */
static _Thread_local const char *cached_name;
static _Thread_local int cached_name_id = -1;

static pthread_once_t key_once = PTHREAD_ONCE_INIT;
static pthread_key_t exit_key;
static bool exit_key_ok;

uint64_t eg__profiler_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint64_t thread_cpu_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Thread CPU time with EG_PROFILE_CPU_TIME, else 0 (durations then come from the wall clock). */
static uint64_t cpu_now_if(unsigned flags) {
    return flags & EG_PROFILE_CPU_TIME ? thread_cpu_ns() : 0;
}

/* ---- per-thread buffers -------------------------------------------------------------------- */

/* Runs when a thread that recorded exits: its results stay until the next reset frees them. */
static void thread_exited(void *arg) {
    eg__prof_thread *t = arg;
    pthread_mutex_lock(&t->mutex);
    t->alive = false;
    pthread_mutex_unlock(&t->mutex);
    this_buffer = NULL;
}

static void make_exit_key(void) {
    exit_key_ok = pthread_key_create(&exit_key, thread_exited) == 0;
}

static void default_thread_name(eg__prof_thread *t) {
    if (thread_name[0])
        snprintf(t->name, sizeof t->name, "%s", thread_name);
    else if (eg__threadpool_worker_number())
        snprintf(t->name, sizeof t->name, "eagle pool %d", eg__threadpool_worker_number());
    else if (t->os_tid == (int)getpid())
        snprintf(t->name, sizeof t->name, "main");
    else
        snprintf(t->name, sizeof t->name, "thread %d", t->os_tid);
}

/* This thread's buffer, created and linked on first use; NULL when out of memory (the record is
 * then lost, silently: profiling must not make the program fail). */
static eg__prof_thread *thread_buffer(void) {
    if (this_buffer) return this_buffer;
    pthread_once(&key_once, make_exit_key);
    eg__prof_thread *t = calloc(1, sizeof *t);
    if (!t) return NULL;
    if (pthread_mutex_init(&t->mutex, NULL) != 0) {
        free(t);
        return NULL;
    }
    t->os_tid = (int)syscall(SYS_gettid);
    t->alive = true;
    default_thread_name(t);
    if (exit_key_ok) pthread_setspecific(exit_key, t);
    pthread_mutex_lock(&eg__profiler.mutex);
    t->next = eg__profiler.threads;
    eg__profiler.threads = t;
    pthread_mutex_unlock(&eg__profiler.mutex);
    this_buffer = t;
    return t;
}

static void free_chunks(eg__prof_thread *t) {
    size_t freed = 0;
    for (eg__prof_chunk *c = t->first, *next; c; c = next) {
        next = c->next;
        free(c);
        freed += EG__PROFILER_CHUNK_BYTES;
    }
    if (freed) atomic_fetch_sub(&trace_bytes, freed);
    t->first = t->last = NULL;
}

/* Called with the global mutex held: a new generation, every buffer emptied, those of exited
 * threads freed. */
static void clear_results_locked(void) {
    atomic_fetch_add(&generation, 1);
    for (eg__prof_thread **link = &eg__profiler.threads; *link;) {
        eg__prof_thread *t = *link;
        pthread_mutex_lock(&t->mutex);
        free_chunks(t);
        if (!t->alive) {
            pthread_mutex_unlock(&t->mutex);
            *link = t->next;
            pthread_mutex_destroy(&t->mutex);
            free(t->ranges);
            free(t);
            continue;
        }
        memset(t->ops, 0, sizeof t->ops);
        if (t->ranges) memset(t->ranges, 0, (size_t)t->n_ranges * sizeof *t->ranges);
        t->recorded = false;
        t->n_events = t->n_dropped = 0;
        pthread_mutex_unlock(&t->mutex);
        link = &t->next;
    }
}

static void stat_add(eg__prof_stat *s, uint64_t ns) {
    if (s->calls == 0 || ns < s->min_ns) s->min_ns = ns;
    if (ns > s->max_ns) s->max_ns = ns;
    s->calls++;
    s->total_ns += ns;
}

/* Room for one event of `bytes` in t's trace chunks (t locked), or NULL (counted as dropped)
 * when the budget is spent or memory is short. */
static void *reserve_event(eg__prof_thread *t, size_t bytes) {
    const size_t capacity = EG__PROFILER_CHUNK_BYTES - sizeof(eg__prof_chunk);
    if (!t->last || t->last->used + bytes > capacity) {
        size_t total = atomic_fetch_add(&trace_bytes, EG__PROFILER_CHUNK_BYTES);
        eg__prof_chunk *c = NULL;
        if (total + EG__PROFILER_CHUNK_BYTES <= EG__PROFILER_TRACE_BUDGET)
            c = malloc(EG__PROFILER_CHUNK_BYTES);
        if (!c) {
            atomic_fetch_sub(&trace_bytes, EG__PROFILER_CHUNK_BYTES);
            t->n_dropped++;
            return NULL;
        }
        c->next = NULL;
        c->used = 0;
        if (t->last)
            t->last->next = c;
        else
            t->first = c;
        t->last = c;
    }
    void *p = t->last->data + t->last->used;
    t->last->used += bytes;
    t->n_events++;
    return p;
}

static size_t shape_record_bytes(const eg_tensor *x) {
    return sizeof(eg__prof_shape) + (size_t)x->n_dims * sizeof(int64_t);
}

static unsigned char *put_shape(unsigned char *p, const eg_tensor *x) {
    eg__prof_shape header = {.dtype = (uint8_t)x->dtype, .n_dims = (uint8_t)x->n_dims};
    memcpy(p, &header, sizeof header);
    p += sizeof header;
    memcpy(p, x->shape, (size_t)x->n_dims * sizeof(int64_t));
    return p + (size_t)x->n_dims * sizeof(int64_t);
}

static uint64_t bytes_in_use(const eg_device *device) {
    eg__allocator *allocator = device->get_allocator(device);
    if (!allocator) return EG__PROFILER_NO_SAMPLE;
    eg_memory_stats stats;
    eg__allocator_stats(allocator, &stats);
    return stats.bytes_in_use;
}

/* The dtype an op ran in, for the table: a low-precision product's compute dtype (it may read f32
 * operands), else its first input's (a matmul of bf16 operands ran in bf16), a cast's result (so
 * casts to bf16 and back to f32 are told apart). */
static eg_dtype ran_in(eg__op op, int n_inputs, const eg_tensor *const *inputs,
                       const eg__attrs *attrs, const eg_tensor *output) {
    if (attrs && attrs->low_precision && (unsigned)attrs->compute_dtype < EG_DTYPE_COUNT)
        return attrs->compute_dtype;
    const eg_tensor *t = op == EG__OP_CAST || n_inputs == 0 ? output : inputs[0];
    if (!t) t = inputs[0];
    return (unsigned)t->dtype < EG_DTYPE_COUNT ? t->dtype : EG_DTYPE_F32;
}

/* start/end: wall clock (the trace); duration: what the stats count. */
/* What approximation an op computes (eagle/approx.h): the int8 ops, the sampled products'
 * draws and dense ops whose gradient samples, ops built in a fast-math region. */
static uint8_t approx_of(eg__op op, const eg__attrs *attrs) {
    switch (op) {
    case EG__OP_QUANTIZE_INT8:
    case EG__OP_DENSE_INT8:
    case EG__OP_CONV2D_INT8:
        return EG__APPROX_INT8;
    case EG__OP_SAMPLE_INDICES:
        return EG__APPROX_SAMPLED;
    default:
        break;
    }
    if (!attrs) return EG__APPROX_NONE;
    if (op == EG__OP_DENSE && attrs->scalars[1] > 0) return EG__APPROX_SAMPLED;
    return attrs->fast_math ? EG__APPROX_FAST_MATH : EG__APPROX_NONE;
}

static void record_op(unsigned flags, uint64_t gen, eg__op op, int n_inputs,
                      const eg_tensor *const *inputs, const eg__attrs *attrs,
                      const eg_tensor *output, const char *note, uint64_t start, uint64_t end,
                      uint64_t duration) {
    eg__prof_thread *t = thread_buffer();
    if (!t) return;
    bool trace = flags & EG_PROFILE_TRACE;
    uint64_t sample = EG__PROFILER_NO_SAMPLE;
    if (trace && end - t->last_sample_ns >= EG__PROFILER_SAMPLE_NS) {
        sample = bytes_in_use(inputs[0]->device);
        t->last_sample_ns = end;
    }
    pthread_mutex_lock(&t->mutex);
    if (gen == atomic_load_explicit(&generation, memory_order_relaxed)) {
        stat_add(&t->ops[op][ran_in(op, n_inputs, inputs, attrs, output)], duration);
        t->recorded = true;
        if (trace) {
            int n_kept =
                n_inputs < EG__PROFILER_EVENT_INPUTS ? n_inputs : EG__PROFILER_EVENT_INPUTS;
            size_t bytes = sizeof(eg__prof_event);
            for (int i = 0; i < n_kept; i++) bytes += shape_record_bytes(inputs[i]);
            if (output) bytes += shape_record_bytes(output);
            unsigned char *p = reserve_event(t, bytes);
            if (p) {
                eg__prof_event event = {.start_ns = start,
                                        .end_ns = end,
                                        .a = sample,
                                        .b = (uint64_t)(uintptr_t)note,
                                        .kind = EG__EV_OP,
                                        .id = (uint16_t)op,
                                        .n_shapes = (uint8_t)(n_kept + (output != NULL)),
                                        .n_inputs = (uint8_t)(n_inputs < 255 ? n_inputs : 255),
                                        .flags = output ? EG__EVF_OUTPUT : EG__EVF_FAILED,
                                        .approx = approx_of(op, attrs)};
                memcpy(p, &event, sizeof event);
                p += sizeof event;
                for (int i = 0; i < n_kept; i++) p = put_shape(p, inputs[i]);
                if (output) put_shape(p, output);
            }
        }
    }
    pthread_mutex_unlock(&t->mutex);
}

/* The profiler as an op observer: it times each op from before it runs to after every
 * observer inside it (the tape's recording included) has seen it. span: the session generation,
 * the CPU and wall clocks at the start. */
static void op_begin(eg__op op, int n_inputs, const eg_tensor *const *inputs, eg__op_span *span) {
    (void)op;
    (void)n_inputs;
    (void)inputs;
    unsigned flags = atomic_load_explicit(&eg__profiler_flags, memory_order_relaxed);
    span->values[0] = atomic_load_explicit(&generation, memory_order_relaxed);
    span->values[1] = cpu_now_if(flags);
    span->values[2] = eg__profiler_now_ns();
}

static void op_end(eg__op op, int n_inputs, const eg_tensor *const *inputs, const eg__attrs *attrs,
                   eg_tensor *output, eg__op_span *span) {
    unsigned flags = atomic_load_explicit(&eg__profiler_flags, memory_order_relaxed);
    uint64_t end = eg__profiler_now_ns(), cpu_end = cpu_now_if(flags);
    if (!flags) return;
    /* A NULL argument passed along a chain ran nothing: not an op call. */
    for (int i = 0; i < n_inputs; i++)
        if (!inputs[i]) return;
    uint64_t start = span->values[2];
    /* what the backend chose for it (a GPU's cuDNN algorithm, cuBLASLt's), for the trace */
    const char *note = NULL;
    if ((flags & EG_PROFILE_TRACE) && output && output->device) {
        const eg__backend *backend = eg__backend_of(output->device);
        eg__kernel_call call = {op, n_inputs, inputs, output, attrs};
        if (backend && backend->kernel_note) note = backend->kernel_note(&call);
    }
    record_op(flags, span->values[0], op, n_inputs, inputs, attrs, output, note, start, end,
              flags & EG_PROFILE_CPU_TIME ? cpu_end - span->values[1] : end - start);
}

/* Outermost: what it times encloses every other observer. */
static const eg__op_observer profiler_observer = {"profiler", 0, op_begin, op_end};
static int observer_slot = -1;

void eg__profiler_run_chunk(void (*fn)(void *, int64_t, int64_t), void *context, int64_t begin,
                            int64_t end) {
    uint64_t gen = atomic_load_explicit(&generation, memory_order_relaxed);
    uint64_t start = eg__profiler_now_ns();
    fn(context, begin, end);
    uint64_t stop = eg__profiler_now_ns();
    eg__prof_thread *t = thread_buffer();
    if (!t) return;
    pthread_mutex_lock(&t->mutex);
    if (gen == atomic_load_explicit(&generation, memory_order_relaxed)) {
        t->recorded = true;
        eg__prof_event *p = reserve_event(t, sizeof *p);
        if (p)
            *p = (eg__prof_event){.start_ns = start,
                                  .end_ns = stop,
                                  .a = (uint64_t)begin,
                                  .b = (uint64_t)end,
                                  .kind = EG__EV_CHUNK};
    }
    pthread_mutex_unlock(&t->mutex);
}

eg_status eg_profiler_set_thread_name(const char *name) {
    if (!name) return eg__error(EG_ERR_NULL_ARGUMENT, "profiler_set_thread_name: name is NULL");
    snprintf(thread_name, sizeof thread_name, "%s", name);
    if (this_buffer) {
        pthread_mutex_lock(&this_buffer->mutex);
        snprintf(this_buffer->name, sizeof this_buffer->name, "%s", name);
        pthread_mutex_unlock(&this_buffer->mutex);
    }
    return EG_OK;
}

/* ---- sessions ------------------------------------------------------------------------------ */

/* The running session's flags; the profiler observes every thread's ops while they are set, and
 * is the thread pool's chunk runner while tracing. */
static void set_flags(unsigned flags) {
    eg__threadpool_set_chunk_runner(flags & EG_PROFILE_TRACE ? eg__profiler_run_chunk : NULL);
    atomic_store_explicit(&eg__profiler_flags, flags, memory_order_release);
    if (observer_slot >= 0) eg__observe_everywhere(observer_slot, flags != 0);
}

eg_status eg_profiler_start(unsigned flags) {
    if (flags == 0 ||
        (flags & ~(unsigned)(EG_PROFILE_OPS | EG_PROFILE_TRACE | EG_PROFILE_CPU_TIME)))
        return eg__error(EG_ERR_INVALID_ARGUMENT,
                         "profiler_start: flags 0x%x are not a combination of EG_PROFILE_OPS, "
                         "EG_PROFILE_TRACE and EG_PROFILE_CPU_TIME",
                         flags);
    flags |= EG_PROFILE_OPS; /* each other flag implies it */
    pthread_mutex_lock(&eg__profiler.mutex);
    if (eg__profiler.running) {
        pthread_mutex_unlock(&eg__profiler.mutex);
        return eg__error(EG_ERR_STATE, "profiler_start: the profiler is already running");
    }
    if (observer_slot < 0 && (observer_slot = eg__observer_add(&profiler_observer)) < 0) {
        pthread_mutex_unlock(&eg__profiler.mutex);
        return eg_last_status();
    }
    clear_results_locked();
    eg__profiler.session_flags = flags;
    eg__profiler.running = true;
    eg__profiler.paused = false;
    eg__profiler.start_ns = eg__profiler_now_ns();
    eg__profiler.stop_ns = eg__profiler.paused_ns = 0;
    set_flags(flags);
    pthread_mutex_unlock(&eg__profiler.mutex);
    return EG_OK;
}

eg_status eg_profiler_stop(void) {
    pthread_mutex_lock(&eg__profiler.mutex);
    if (!eg__profiler.running) {
        pthread_mutex_unlock(&eg__profiler.mutex);
        return eg__error(EG_ERR_STATE, "profiler_stop: the profiler is not running");
    }
    set_flags(0);
    eg__profiler.running = false;
    eg__profiler.stop_ns = eg__profiler.paused ? eg__profiler.paused_at_ns : eg__profiler_now_ns();
    eg__profiler.paused = false;
    pthread_mutex_unlock(&eg__profiler.mutex);
    return EG_OK;
}

eg_status eg_profiler_pause(void) {
    pthread_mutex_lock(&eg__profiler.mutex);
    if (!eg__profiler.running || eg__profiler.paused) {
        pthread_mutex_unlock(&eg__profiler.mutex);
        return eg__error(EG_ERR_STATE, "profiler_pause: the profiler is %s",
                         eg__profiler.running ? "already paused" : "not running");
    }
    set_flags(0);
    eg__profiler.paused = true;
    eg__profiler.paused_at_ns = eg__profiler_now_ns();
    pthread_mutex_unlock(&eg__profiler.mutex);
    return EG_OK;
}

eg_status eg_profiler_resume(void) {
    pthread_mutex_lock(&eg__profiler.mutex);
    if (!eg__profiler.paused) {
        pthread_mutex_unlock(&eg__profiler.mutex);
        return eg__error(EG_ERR_STATE, "profiler_resume: the profiler is not paused");
    }
    eg__profiler.paused = false;
    eg__profiler.paused_ns += eg__profiler_now_ns() - eg__profiler.paused_at_ns;
    set_flags(eg__profiler.session_flags);
    pthread_mutex_unlock(&eg__profiler.mutex);
    return EG_OK;
}

void eg_profiler_reset(void) {
    pthread_mutex_lock(&eg__profiler.mutex);
    clear_results_locked();
    if (eg__profiler.running) {
        eg__profiler.start_ns = eg__profiler.paused_at_ns = eg__profiler_now_ns();
        eg__profiler.paused_ns = 0;
    } else {
        eg__profiler.session_flags = 0;
    }
    pthread_mutex_unlock(&eg__profiler.mutex);
}

unsigned eg_profiler_flags(void) {
    return atomic_load_explicit(&eg__profiler_flags, memory_order_relaxed);
}

/* ---- ranges -------------------------------------------------------------------------------- */

/* The id of name (copied on first sight), or -1 when the table is full or memory is short. */
static int intern_name(const char *name) {
    if (cached_name_id >= 0 && !strcmp(cached_name, name)) return cached_name_id;
    int id = -1;
    pthread_mutex_lock(&eg__profiler.mutex);
    for (int i = 0; i < eg__profiler.n_names; i++) {
        if (!strcmp(eg__profiler.names[i], name)) {
            id = i;
            break;
        }
    }
    if (id < 0 && eg__profiler.n_names < EG__PROFILER_MAX_NAMES) {
        if (eg__profiler.n_names == eg__profiler.names_capacity) {
            int capacity = eg__profiler.names_capacity ? 2 * eg__profiler.names_capacity : 16;
            char **names = realloc(eg__profiler.names, (size_t)capacity * sizeof *names);
            if (names) {
                eg__profiler.names = names;
                eg__profiler.names_capacity = capacity;
            }
        }
        char *copy = eg__profiler.n_names < eg__profiler.names_capacity ? strdup(name) : NULL;
        if (copy) {
            id = eg__profiler.n_names++;
            eg__profiler.names[id] = copy;
        }
    }
    if (id >= 0) {
        cached_name = eg__profiler.names[id];
        cached_name_id = id;
    }
    pthread_mutex_unlock(&eg__profiler.mutex);
    return id;
}

eg_status eg_profiler_range_push(const char *name) {
    if (!name) return eg__error(EG_ERR_NULL_ARGUMENT, "profiler_range_push: name is NULL");
    if (range_depth == EG__PROFILER_MAX_DEPTH)
        return eg__error(EG_ERR_STATE, "profiler_range_push: %d ranges are already open",
                         EG__PROFILER_MAX_DEPTH);
    range_frame *frame = &range_stack[range_depth++];
    frame->recording = false;
    if (!EG__PROFILER_ON()) return EG_OK;
    int id = intern_name(name);
    if (id < 0) return EG_OK;
    frame->name_id = (uint16_t)id;
    frame->generation = atomic_load_explicit(&generation, memory_order_relaxed);
    frame->recording = true;
    frame->cpu_start_ns =
        cpu_now_if(atomic_load_explicit(&eg__profiler_flags, memory_order_relaxed));
    frame->start_ns = eg__profiler_now_ns();
    return EG_OK;
}

/* Grows t->ranges (t locked) to hold id; false when memory is short. */
static bool ensure_range_slot(eg__prof_thread *t, int id) {
    if (id < t->n_ranges) return true;
    int n = id + 16;
    eg__prof_stat *ranges = realloc(t->ranges, (size_t)n * sizeof *ranges);
    if (!ranges) return false;
    memset(ranges + t->n_ranges, 0, (size_t)(n - t->n_ranges) * sizeof *ranges);
    t->ranges = ranges;
    t->n_ranges = n;
    return true;
}

eg_status eg_profiler_range_pop(void) {
    if (range_depth == 0)
        return eg__error(EG_ERR_STATE, "profiler_range_pop: no range is open on this thread");
    range_frame frame = range_stack[--range_depth];
    unsigned flags = atomic_load_explicit(&eg__profiler_flags, memory_order_relaxed);
    if (!frame.recording || !flags) return EG_OK;
    uint64_t end = eg__profiler_now_ns();
    uint64_t duration = flags & EG_PROFILE_CPU_TIME && frame.cpu_start_ns
                            ? thread_cpu_ns() - frame.cpu_start_ns
                            : end - frame.start_ns;
    eg__prof_thread *t = thread_buffer();
    if (!t) return EG_OK;
    pthread_mutex_lock(&t->mutex);
    if (frame.generation == atomic_load_explicit(&generation, memory_order_relaxed) &&
        ensure_range_slot(t, frame.name_id)) {
        stat_add(&t->ranges[frame.name_id], duration);
        t->recorded = true;
        if (flags & EG_PROFILE_TRACE) {
            eg__prof_event *p = reserve_event(t, sizeof *p);
            if (p)
                *p = (eg__prof_event){.start_ns = frame.start_ns,
                                      .end_ns = end,
                                      .kind = EG__EV_RANGE,
                                      .id = frame.name_id};
        }
    }
    pthread_mutex_unlock(&t->mutex);
    return EG_OK;
}

/* ---- statistics ---------------------------------------------------------------------------- */

static int compare_entries(const void *pa, const void *pb) {
    const eg_profiler_entry *a = pa, *b = pb;
    if (a->is_range != b->is_range) return a->is_range ? 1 : -1;
    if (a->total_seconds != b->total_seconds) return a->total_seconds < b->total_seconds ? 1 : -1;
    return strcmp(a->name, b->name);
}

static void stat_merge(eg__prof_stat *into, const eg__prof_stat *s) {
    if (!s->calls) return;
    if (into->calls == 0 || s->min_ns < into->min_ns) into->min_ns = s->min_ns;
    if (s->max_ns > into->max_ns) into->max_ns = s->max_ns;
    into->calls += s->calls;
    into->total_ns += s->total_ns;
}

static eg_profiler_entry make_entry(const char *name, bool is_range, eg_dtype dtype,
                                    const eg__prof_stat *s) {
    return (eg_profiler_entry){.name = name,
                               .is_range = is_range,
                               .dtype = dtype,
                               .calls = s->calls,
                               .total_seconds = (double)s->total_ns * 1e-9,
                               .min_seconds = (double)s->min_ns * 1e-9,
                               .max_seconds = (double)s->max_ns * 1e-9};
}

eg_status eg_profiler_stats(eg_profiler_summary *summary, eg_profiler_entry *entries, int capacity,
                            int *n_entries) {
    if (capacity < 0 || (capacity > 0 && !entries))
        return eg__error(EG_ERR_INVALID_ARGUMENT,
                         "profiler_stats: capacity %d with %s entries array", capacity,
                         entries ? "an" : "a NULL");
    eg__prof_stat(*ops)[EG_DTYPE_COUNT] = calloc(EG__OP_COUNT, sizeof *ops);
    eg_profiler_summary s = {0};
    pthread_mutex_lock(&eg__profiler.mutex);
    int n_names = eg__profiler.n_names;
    eg__prof_stat *ranges = calloc(n_names > 0 ? (size_t)n_names : 1, sizeof *ranges);
    eg_profiler_entry *all =
        malloc((EG__OP_COUNT * EG_DTYPE_COUNT + (size_t)n_names) * sizeof *all);
    if (!ops || !ranges || !all) {
        pthread_mutex_unlock(&eg__profiler.mutex);
        free(ops);
        free(ranges);
        free(all);
        return eg__error(EG_ERR_OUT_OF_MEMORY, "profiler_stats: out of memory");
    }
    s.flags = eg__profiler.session_flags;
    s.running = eg__profiler.running;
    s.paused = eg__profiler.paused;
    if (s.flags) {
        uint64_t end = !s.running ? eg__profiler.stop_ns
                       : s.paused ? eg__profiler.paused_at_ns
                                  : eg__profiler_now_ns();
        s.wall_seconds = (double)(end - eg__profiler.start_ns - eg__profiler.paused_ns) * 1e-9;
    }
    for (eg__prof_thread *t = eg__profiler.threads; t; t = t->next) {
        pthread_mutex_lock(&t->mutex);
        s.n_threads += t->recorded;
        s.trace_events += t->n_events;
        s.dropped_events += t->n_dropped;
        for (int op = 0; op < EG__OP_COUNT; op++)
            for (int d = 0; d < EG_DTYPE_COUNT; d++) stat_merge(&ops[op][d], &t->ops[op][d]);
        for (int i = 0; i < t->n_ranges && i < n_names; i++) stat_merge(&ranges[i], &t->ranges[i]);
        pthread_mutex_unlock(&t->mutex);
    }
    int n = 0;
    for (int op = 0; op < EG__OP_COUNT; op++)
        for (int d = 0; d < EG_DTYPE_COUNT; d++) {
            const eg__prof_stat *stat = &ops[op][d];
            if (!stat->calls) continue;
            all[n++] = make_entry(eg__op_defs[op].name, false, (eg_dtype)d, stat);
            s.op_calls += stat->calls;
            s.op_seconds += (double)stat->total_ns * 1e-9;
        }
    for (int i = 0; i < n_names; i++)
        if (ranges[i].calls)
            all[n++] = make_entry(eg__profiler.names[i], true, EG_DTYPE_COUNT, &ranges[i]);
    pthread_mutex_unlock(&eg__profiler.mutex);
    qsort(all, (size_t)n, sizeof *all, compare_entries);
    if (capacity > 0) memcpy(entries, all, (size_t)(n < capacity ? n : capacity) * sizeof *all);
    if (summary) *summary = s;
    if (n_entries) *n_entries = n;
    free(ops);
    free(ranges);
    free(all);
    return EG_OK;
}
