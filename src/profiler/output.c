/* The profiler's outputs: the per-op table (eg_profiler_report) and the Chrome trace-event JSON
 * file (eg_profiler_write_trace). */
#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/error.h"
#include "eagle/runtime.h"
#include "io/atomic_file.h"
#include "io/json.h"
#include "profiler/internal.h"

/* ---- the report ---------------------------------------------------------------------------- */

/* A name cut to fit a column: the table stays aligned whatever a range is called. */
static void print_name(FILE *out, const char *name, int width) {
    int length = (int)strlen(name);
    if (length <= width)
        fprintf(out, "%-*s", width, name);
    else
        fprintf(out, "%.*s~", width - 1, name);
}

eg_status eg_profiler_report(FILE *out, double step_seconds) {
    if (!out) return eg__error(EG_ERR_INVALID_ARGUMENT, "profiler_report: out is NULL");
    if (!(step_seconds >= 0))
        return eg__error(EG_ERR_INVALID_ARGUMENT,
                         "profiler_report: step_seconds must be >= 0, got %g", step_seconds);
    eg_profiler_summary s;
    int n = 0;
    eg_status status = eg_profiler_stats(&s, NULL, 0, &n);
    if (status != EG_OK) return status;
    int capacity = n + 64; /* ranges may appear meanwhile: the second call keeps what fits */
    eg_profiler_entry *entries = malloc((size_t)capacity * sizeof *entries);
    if (!entries) return eg__error(EG_ERR_OUT_OF_MEMORY, "profiler_report: out of memory");
    status = eg_profiler_stats(&s, entries, capacity, &n);
    if (status != EG_OK) {
        free(entries);
        return status;
    }
    if (n > capacity) n = capacity;

    double n_steps = 0;
    for (int i = 0; i < n; i++) {
        if (entries[i].is_range && !strcmp(entries[i].name, "step")) {
            n_steps = (double)entries[i].calls;
            if (step_seconds == 0) step_seconds = entries[i].total_seconds / n_steps;
        }
    }
    if (step_seconds > 0 && n_steps == 0) n_steps = s.wall_seconds / step_seconds;
    bool per_step = step_seconds > 0 && n_steps > 0;

    enum { NAME = 28 };
    fprintf(out,
            "profile: %" PRIu64 " op calls, %.3f ms in ops, %.3f ms wall (%.1f%% in ops), %d "
            "thread(s)\n",
            s.op_calls, s.op_seconds * 1e3, s.wall_seconds * 1e3,
            s.wall_seconds > 0 ? 100.0 * s.op_seconds / s.wall_seconds : 0.0, s.n_threads);
    if (s.flags & EG_PROFILE_CPU_TIME)
        fprintf(out,
                "times below: CPU time of the calling thread (pool workers' shares left out)\n");
    if (per_step) fprintf(out, "step: %.3f ms, %.4g step(s)\n", step_seconds * 1e3, n_steps);
    fprintf(out, "%-*s %-5s %10s %12s %12s %7s", NAME, "op", "dtype", "calls", "total ms",
            "mean us", "% ops");
    if (per_step) fprintf(out, " %10s %7s", "ms/step", "% step");
    fprintf(out, "\n");
    for (int i = 0; i < n && !entries[i].is_range; i++) {
        const eg_profiler_entry *e = &entries[i];
        print_name(out, e->name, NAME);
        fprintf(out, " %-5s", eg_dtype_name(e->dtype));
        fprintf(out, " %10" PRIu64 " %12.3f %12.3f %7.1f", e->calls, e->total_seconds * 1e3,
                e->total_seconds * 1e6 / (double)e->calls,
                s.op_seconds > 0 ? 100.0 * e->total_seconds / s.op_seconds : 0.0);
        if (per_step)
            fprintf(out, " %10.4f %7.1f", e->total_seconds / n_steps * 1e3,
                    100.0 * e->total_seconds / n_steps / step_seconds);
        fprintf(out, "\n");
    }
    fprintf(out, "%-*s %-5s %10" PRIu64 " %12.3f %12s %7.1f", NAME, "(all ops)", "", s.op_calls,
            s.op_seconds * 1e3, "", s.op_calls ? 100.0 : 0.0);
    if (per_step)
        fprintf(out, " %10.4f %7.1f", s.op_seconds / n_steps * 1e3,
                100.0 * s.op_seconds / n_steps / step_seconds);
    fprintf(out, "\n");
    if (per_step) {
        /* What a step spends outside ops: tapes, scopes, the caller's own code. */
        double outside = step_seconds - s.op_seconds / n_steps;
        fprintf(out, "%-*s %-5s %10s %12s %12s %7s %10.4f %7.1f\n", NAME, "(outside ops)", "", "",
                "", "", "", outside * 1e3, 100.0 * outside / step_seconds);
    }
    bool header = false;
    for (int i = 0; i < n; i++) {
        const eg_profiler_entry *e = &entries[i];
        if (!e->is_range) continue;
        if (!header) {
            fprintf(out, "\n%-*s %10s %12s %12s %12s %12s\n", NAME, "range", "calls", "total ms",
                    "mean us", "min us", "max us");
            header = true;
        }
        print_name(out, e->name, NAME);
        fprintf(out, " %10" PRIu64 " %12.3f %12.3f %12.3f %12.3f\n", e->calls,
                e->total_seconds * 1e3, e->total_seconds * 1e6 / (double)e->calls,
                e->min_seconds * 1e6, e->max_seconds * 1e6);
    }
    if (s.dropped_events)
        fprintf(out, "note: %" PRIu64 " trace events were dropped (trace buffers full)\n",
                s.dropped_events);
    free(entries);
    return ferror(out) ? eg__error(EG_ERR_IO, "profiler_report: writing the report failed") : EG_OK;
}

/* ---- the trace ----------------------------------------------------------------------------- */

typedef struct writer {
    eg__atomic_file file;
    size_t length;
    bool first_event;
    int pid;
    uint64_t origin_ns;
    char buffer[1 << 16];
} writer;

static void flush(writer *w) {
    if (w->length) eg__atomic_write(&w->file, w->buffer, w->length);
    w->length = 0;
}

static void put_char(writer *w, char c) {
    if (w->length == sizeof w->buffer) flush(w);
    w->buffer[w->length++] = c;
}

/* printf into the buffer. Every format used here gives well under its 64 KiB. */
__attribute__((format(printf, 2, 3))) static void put(writer *w, const char *format, ...) {
    for (int attempt = 0; attempt < 2; attempt++) {
        size_t room = sizeof w->buffer - w->length;
        va_list args;
        va_start(args, format);
        int n = vsnprintf(w->buffer + w->length, room, format, args);
        va_end(args);
        if (n < 0) return;
        if ((size_t)n < room) {
            w->length += (size_t)n;
            return;
        }
        flush(w);
    }
}

/* A JSON string; bytes that are not well-formed UTF-8 become '?'. */
static void put_string(writer *w, const char *s) {
    size_t length = strlen(s);
    size_t valid = eg__utf8_check((const uint8_t *)s, length);
    put_char(w, '"');
    for (size_t i = 0; i < length; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') {
            put_char(w, '\\');
            put_char(w, (char)c);
        } else if (c < 0x20) {
            put(w, "\\u%04x", c);
        } else if (c >= 0x80 && valid < length) {
            put_char(w, '?');
        } else {
            put_char(w, (char)c);
        }
    }
    put_char(w, '"');
}

/* Microseconds since the session started, with nanosecond digits. */
static void put_time(writer *w, const char *key, uint64_t ns) {
    put(w, ",\"%s\":%" PRIu64 ".%03u", key, ns / 1000, (unsigned)(ns % 1000));
}

/* Opens an event: {"name":NAME,"cat":CAT,"ph":PH,"ts":..., "pid":..,"tid":.. */
static void begin_event(writer *w, const char *name, bool escape, const char *category,
                        const char *phase, uint64_t start_ns, const uint64_t *end_ns, int tid) {
    put(w, w->first_event ? "\n" : ",\n");
    w->first_event = false;
    put(w, "{\"name\":");
    if (escape)
        put_string(w, name);
    else
        put(w, "\"%s\"", name);
    if (category) put(w, ",\"cat\":\"%s\"", category);
    put(w, ",\"ph\":\"%s\"", phase);
    uint64_t start = start_ns > w->origin_ns ? start_ns - w->origin_ns : 0;
    put_time(w, "ts", start);
    if (end_ns) put_time(w, "dur", *end_ns > start_ns ? *end_ns - start_ns : 0);
    put(w, ",\"pid\":%d,\"tid\":%d", w->pid, tid);
}

/* "f32[32,784]"; returns the next record. */
static const unsigned char *put_shape(writer *w, const unsigned char *p) {
    eg__prof_shape header;
    memcpy(&header, p, sizeof header);
    p += sizeof header;
    put(w, "\"%s[", eg_dtype_name((eg_dtype)header.dtype));
    for (int d = 0; d < header.n_dims; d++) {
        int64_t size;
        memcpy(&size, p + (size_t)d * sizeof size, sizeof size);
        put(w, d ? ",%" PRId64 : "%" PRId64, size);
    }
    put(w, "]\"");
    return p + (size_t)header.n_dims * sizeof(int64_t);
}

/* One event of t's buffer; returns the next. *last_sample: t's last bytes_in_use written. */
static const unsigned char *put_event(writer *w, const eg__prof_thread *t, const unsigned char *p,
                                      uint64_t *last_sample) {
    eg__prof_event e;
    memcpy(&e, p, sizeof e);
    p += sizeof e;
    switch (e.kind) {
    case EG__EV_OP: {
        begin_event(w, eg__op_defs[e.id].name, false, "op", "X", e.start_ns, &e.end_ns, t->os_tid);
        put(w, ",\"args\":{\"inputs\":[");
        int n_kept = e.n_shapes - ((e.flags & EG__EVF_OUTPUT) != 0);
        for (int i = 0; i < n_kept; i++) {
            if (i) put_char(w, ',');
            p = put_shape(w, p);
        }
        put_char(w, ']');
        if (e.n_inputs > n_kept) put(w, ",\"n_inputs\":%d", e.n_inputs);
        put(w, ",\"output\":");
        if (e.flags & EG__EVF_OUTPUT)
            p = put_shape(w, p);
        else
            put(w, "null,\"error\":true");
        static const char *const approx_names[] = {NULL, "int8", "sampled", "fast-math"};
        if (e.approx && e.approx < sizeof approx_names / sizeof *approx_names)
            put(w, ",\"approx\":\"%s\"", approx_names[e.approx]);
        if (e.b) { /* what the backend chose, e.g. the convolution algorithm */
            put(w, ",\"kernel\":");
            put_string(w, (const char *)(uintptr_t)e.b);
        }
        put(w, "}}");
        if (e.a != EG__PROFILER_NO_SAMPLE && e.a != *last_sample) {
            begin_event(w, "memory", false, NULL, "C", e.end_ns, NULL, t->os_tid);
            put(w, ",\"args\":{\"bytes_in_use\":%" PRIu64 "}}", e.a);
            *last_sample = e.a;
        }
        break;
    }
    case EG__EV_RANGE:
        begin_event(w, eg__profiler.names[e.id], true, "range", "X", e.start_ns, &e.end_ns,
                    t->os_tid);
        put(w, "}");
        break;
    default:
        begin_event(w, "chunk", false, "pool", "X", e.start_ns, &e.end_ns, t->os_tid);
        put(w, ",\"args\":{\"begin\":%" PRIu64 ",\"end\":%" PRIu64 "}}", e.a, e.b);
        break;
    }
    return p;
}

/* Called with the global mutex held. */
static void write_events_locked(writer *w, uint64_t *dropped) {
    begin_event(w, "process_name", false, NULL, "M", w->origin_ns, NULL, w->pid);
    put(w, ",\"args\":{\"name\":\"eagle\"}}");
    for (eg__prof_thread *t = eg__profiler.threads; t; t = t->next) {
        pthread_mutex_lock(&t->mutex);
        if (t->recorded) {
            begin_event(w, "thread_name", false, NULL, "M", w->origin_ns, NULL, t->os_tid);
            put(w, ",\"args\":{\"name\":");
            put_string(w, t->name);
            put(w, "}}");
            uint64_t last_sample = EG__PROFILER_NO_SAMPLE;
            for (const eg__prof_chunk *c = t->first; c; c = c->next) {
                const unsigned char *p = c->data, *end = c->data + c->used;
                while (p < end) p = put_event(w, t, p, &last_sample);
            }
            *dropped += t->n_dropped;
        }
        pthread_mutex_unlock(&t->mutex);
    }
}

eg_status eg_profiler_write_trace(const char *path) {
    if (!path) return eg__error(EG_ERR_NULL_ARGUMENT, "profiler_write_trace: path is NULL");
    writer *w = malloc(sizeof *w);
    if (!w) return eg__error(EG_ERR_OUT_OF_MEMORY, "profiler_write_trace: out of memory");
    pthread_mutex_lock(&eg__profiler.mutex);
    if (!(eg__profiler.session_flags & EG_PROFILE_TRACE)) {
        pthread_mutex_unlock(&eg__profiler.mutex);
        free(w);
        return eg__error(EG_ERR_STATE, "profiler_write_trace: no trace was recorded (start the "
                                       "profiler with EG_PROFILE_TRACE)");
    }
    eg_status status = eg__atomic_open(&w->file, path);
    if (status == EG_OK) {
        w->length = 0;
        w->first_event = true;
        w->pid = (int)getpid();
        w->origin_ns = eg__profiler.start_ns;
        uint64_t dropped = 0;
        put(w, "{\"traceEvents\":[");
        write_events_locked(w, &dropped);
        put(w,
            "\n],\"displayTimeUnit\":\"ns\",\"otherData\":{\"producer\":\"eagle %s\","
            "\"dropped_events\":%" PRIu64 "}}\n",
            eg_version(), dropped);
    }
    pthread_mutex_unlock(&eg__profiler.mutex);
    if (status == EG_OK) {
        flush(w);
        status = eg__atomic_commit(&w->file);
    }
    free(w);
    return status;
}
