/* TensorBoard event files: TFRecord framing around hand-encoded tensorflow.Event protobufs. See
 * include/eagle/summary.h for the contracts and src/io/summary_internal.h for the pieces.
 *
 * The protobuf messages written (field number, wire type), from tensorflow/core/util/event.proto
 * and tensorflow/core/framework/summary.proto:
 *   Event          { double wall_time = 1; int64 step = 2; string file_version = 3;
 *                    Summary summary = 5; }
 *   Summary        { repeated Value value = 1; }
 *   Summary.Value  { string tag = 1; float simple_value = 2; HistogramProto histo = 5; }
 *   HistogramProto { double min = 1, max = 2, num = 3, sum = 4, sum_squares = 5;
 *                    repeated double bucket_limit = 6 [packed]; repeated double bucket = 7
 *                    [packed]; }
 * Each message's size is computed first, so a record is encoded in one pass into one buffer. */

#ifndef EG_NO_CALLSITE
#define EG_NO_CALLSITE
#endif

#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/error.h"
#include "eagle/summary.h"
#include "io/crc32c.h"
#include "io/json.h"
#include "io/summary_internal.h"

#define FILE_VERSION "brain.Event:2"

/* ---- protobuf encoding ---- */

enum { WIRE_VARINT = 0, WIRE_FIXED64 = 1, WIRE_LENGTH = 2, WIRE_FIXED32 = 5 };

static size_t varint_size(uint64_t value) {
    size_t n = 1;
    while (value >= 0x80) value >>= 7, n++;
    return n;
}

/* Size of a length-delimited field (one-byte key: field numbers below 16) holding n bytes. */
static size_t length_field_size(size_t n) {
    return 1 + varint_size(n) + n;
}

typedef struct cursor {
    uint8_t *p;
} cursor;

static void put_byte(cursor *c, uint8_t byte) {
    *c->p++ = byte;
}

static void put_varint(cursor *c, uint64_t value) {
    while (value >= 0x80) {
        put_byte(c, (uint8_t)(value | 0x80));
        value >>= 7;
    }
    put_byte(c, (uint8_t)value);
}

static void put_key(cursor *c, unsigned field, unsigned wire) {
    put_varint(c, (uint64_t)field << 3 | wire);
}

static void put_le(cursor *c, uint64_t value, int n_bytes) {
    for (int i = 0; i < n_bytes; i++) put_byte(c, (uint8_t)(value >> (8 * i)));
}

static void put_double_bits(cursor *c, double value) {
    uint64_t bits;
    memcpy(&bits, &value, sizeof bits);
    put_le(c, bits, 8);
}

static void put_double(cursor *c, unsigned field, double value) {
    put_key(c, field, WIRE_FIXED64);
    put_double_bits(c, value);
}

static void put_float(cursor *c, unsigned field, float value) {
    uint32_t bits;
    memcpy(&bits, &value, sizeof bits);
    put_key(c, field, WIRE_FIXED32);
    put_le(c, bits, 4);
}

static void put_length(cursor *c, unsigned field, size_t n) {
    put_key(c, field, WIRE_LENGTH);
    put_varint(c, n);
}

static void put_bytes(cursor *c, unsigned field, const void *bytes, size_t n) {
    put_length(c, field, n);
    if (n) memcpy(c->p, bytes, n);
    c->p += n;
}

static void put_packed_doubles(cursor *c, unsigned field, const double *values, size_t n) {
    put_length(c, field, 8 * n);
    for (size_t i = 0; i < n; i++) put_double_bits(c, values[i]);
}

/* ---- Event messages ---- */

static size_t histogram_size(const eg__summary_histogram *h) {
    return 5 * 9 + 2 * length_field_size(8 * h->n_buckets);
}

static size_t value_size(const eg__summary_event *e) {
    size_t n = length_field_size(strlen(e->tag));
    if (e->kind == EG__SUMMARY_SCALAR) return n + 5;
    return n + length_field_size(histogram_size(e->histogram));
}

static size_t event_size(const eg__summary_event *e) {
    size_t n = 9; /* wall_time */
    if (e->step != 0) n += 1 + varint_size((uint64_t)e->step);
    if (e->kind == EG__SUMMARY_FILE_VERSION)
        n += length_field_size(strlen(e->file_version));
    else
        n += length_field_size(length_field_size(value_size(e))); /* Summary { Value } */
    return n;
}

static void put_histogram(cursor *c, const eg__summary_histogram *h) {
    put_length(c, 5, histogram_size(h));
    put_double(c, 1, h->min);
    put_double(c, 2, h->max);
    put_double(c, 3, h->num);
    put_double(c, 4, h->sum);
    put_double(c, 5, h->sum_squares);
    put_packed_doubles(c, 6, h->bucket_limit, h->n_buckets);
    put_packed_doubles(c, 7, h->bucket, h->n_buckets);
}

static void put_event(cursor *c, const eg__summary_event *e) {
    put_double(c, 1, e->wall_time);
    if (e->step != 0) {
        put_key(c, 2, WIRE_VARINT);
        put_varint(c, (uint64_t)e->step); /* int64: negative steps take 10 bytes */
    }
    if (e->kind == EG__SUMMARY_FILE_VERSION) {
        put_bytes(c, 3, e->file_version, strlen(e->file_version));
        return;
    }
    size_t value = value_size(e);
    put_length(c, 5, length_field_size(value)); /* Event.summary */
    put_length(c, 1, value);                    /* Summary.value */
    put_bytes(c, 1, e->tag, strlen(e->tag));    /* Value.tag */
    if (e->kind == EG__SUMMARY_SCALAR)
        put_float(c, 2, e->simple_value);
    else
        put_histogram(c, e->histogram);
}

uint8_t *eg__summary_record(const eg__summary_event *event, size_t *n_bytes) {
    size_t data = event_size(event);
    size_t total = EG__TFRECORD_HEADER + data + EG__TFRECORD_FOOTER;
    uint8_t *bytes = malloc(total);
    if (!bytes) {
        eg__error(EG_ERR_OUT_OF_MEMORY, "summary: out of host memory (%zu bytes requested)", total);
        return NULL;
    }
    cursor c = {bytes};
    put_le(&c, data, 8);
    put_le(&c, eg__crc32c_mask(eg__crc32c(bytes, 8)), 4);
    put_event(&c, event);
    EG_ASSERT(c.p == bytes + EG__TFRECORD_HEADER + data, {
        free(bytes);
        return NULL;
    });
    put_le(&c, eg__crc32c_mask(eg__crc32c(bytes + EG__TFRECORD_HEADER, data)), 4);
    *n_bytes = total;
    return bytes;
}

/* ---- histograms (tensorflow/core/lib/histogram/histogram.cc) ---- */

#define MAX_LIMITS 1600
static double default_limits[MAX_LIMITS];
static size_t n_default_limits;
static pthread_once_t limits_once = PTHREAD_ONCE_INIT;

static void make_default_limits(void) {
    double positive[MAX_LIMITS / 2];
    size_t n = 0;
    for (double v = 1.0e-12; v < 1.0e20; v *= 1.1) positive[n++] = v;
    positive[n++] = DBL_MAX;
    size_t k = 0;
    for (size_t i = n; i-- > 0;) default_limits[k++] = -positive[i];
    default_limits[k++] = 0.0;
    for (size_t i = 0; i < n; i++) default_limits[k++] = positive[i];
    n_default_limits = k;
}

const double *eg__summary_default_limits(size_t *n) {
    pthread_once(&limits_once, make_default_limits);
    *n = n_default_limits;
    return default_limits;
}

/* Index of the first limit above value (std::upper_bound), at most n - 1. */
static size_t bucket_of(const double *limits, size_t n, double value) {
    size_t low = 0, high = n;
    while (low < high) {
        size_t mid = low + (high - low) / 2;
        if (value < limits[mid])
            high = mid;
        else
            low = mid + 1;
    }
    return low < n ? low : n - 1;
}

void eg__summary_histogram_free(eg__summary_histogram *histogram) {
    if (!histogram) return;
    free(histogram->bucket_limit);
    free(histogram->bucket);
    histogram->bucket_limit = histogram->bucket = NULL;
    histogram->n_buckets = 0;
}

eg_status eg__summary_histogram_build(const double *values, size_t n, eg__summary_histogram *out) {
    memset(out, 0, sizeof *out);
    size_t n_limits;
    const double *limits = eg__summary_default_limits(&n_limits);
    double counts[MAX_LIMITS] = {0};
    double min = DBL_MAX, max = -DBL_MAX, sum = 0, sum_squares = 0;
    for (size_t i = 0; i < n; i++) {
        double v = values[i];
        counts[bucket_of(limits, n_limits, v)] += 1;
        if (v < min) min = v;
        if (v > max) max = v;
        sum += v;
        sum_squares += v * v;
    }
    /* Each non-empty bucket absorbs the run of empty buckets after it; empty runs at the start
     * are dropped. Two passes: count, then fill. */
    size_t n_out = 0;
    for (int pass = 0; pass < 2; pass++) {
        size_t k = 0;
        for (size_t i = 0; i < n_limits;) {
            double end = limits[i], count = counts[i];
            size_t j = i + 1;
            for (; j < n_limits && counts[j] == 0; j++) end = limits[j];
            if (count > 0) {
                if (pass == 1) {
                    out->bucket_limit[k] = end;
                    out->bucket[k] = count;
                }
                k++;
            }
            i = j;
        }
        if (pass == 0) {
            n_out = k ? k : 1;
            out->bucket_limit = malloc(n_out * sizeof(double));
            out->bucket = malloc(n_out * sizeof(double));
            if (!out->bucket_limit || !out->bucket) {
                eg__summary_histogram_free(out);
                return eg__error(EG_ERR_OUT_OF_MEMORY, "summary: out of host memory");
            }
            /* TensorFlow always stores at least one bucket. */
            out->bucket_limit[0] = DBL_MAX;
            out->bucket[0] = 0;
        }
    }
    out->n_buckets = n_out;
    out->min = min;
    out->max = max;
    out->num = (double)n;
    out->sum = sum;
    out->sum_squares = sum_squares;
    return EG_OK;
}

/* ---- the writer ---- */

struct eg_summary_writer {
    pthread_mutex_t lock;
    FILE *stream;
    char *path;
    eg_status status; /* EG_OK until a write fails; then every call fails */
};

/* Seconds since the epoch with microsecond resolution, as TensorFlow's EnvTime::NowMicros() / 1e6.
 */
static double wall_time(void) {
    struct timespec now;
    if (clock_gettime(CLOCK_REALTIME, &now) != 0) return (double)time(NULL);
    return (double)((int64_t)now.tv_sec * 1000000 + now.tv_nsec / 1000) / 1e6;
}

/* mkdir -p logdir; EG_ERR_IO naming the component that fails. */
static eg_status make_directories(const char *logdir) {
    size_t n = strlen(logdir);
    char *path = malloc(n + 1);
    if (!path) return eg__error(EG_ERR_OUT_OF_MEMORY, "summary: out of host memory");
    memcpy(path, logdir, n + 1);
    eg_status status = EG_OK;
    for (size_t i = 1; i <= n && status == EG_OK; i++) {
        if (path[i] != '/' && path[i] != '\0') continue;
        if (path[i - 1] == '/') continue; /* "a//b", trailing '/' */
        char saved = path[i];
        path[i] = '\0';
        struct stat st;
        if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode)) {
            if (mkdir(path, 0777) != 0 &&
                !(errno == EEXIST && stat(path, &st) == 0 && S_ISDIR(st.st_mode))) {
                int error = errno == EEXIST ? ENOTDIR : errno;
                if (saved == '\0')
                    status = eg__error(EG_ERR_IO, "summary: cannot create the log directory %s: %s",
                                       logdir, strerror(error));
                else
                    status =
                        eg__error(EG_ERR_IO, "summary: cannot create the log directory %s: %s: %s",
                                  logdir, path, strerror(error));
            }
        }
        path[i] = saved;
    }
    free(path);
    return status;
}

/* Raises and returns the error of a write to w's file that failed with errno_value (0: short
 * write), and makes the writer refuse further records. */
static eg_status write_failed(eg_summary_writer *w, const char *step, int errno_value) {
    w->status = eg__error(EG_ERR_IO, "summary: %s: %s failed: %s", w->path, step,
                          errno_value ? strerror(errno_value) : "short write");
    return w->status;
}

static eg_status refuse(const eg_summary_writer *w) {
    return eg__error(EG_ERR_IO,
                     "summary: %s: an earlier write failed, so the file may end in a partial "
                     "record; nothing more is written (open a new writer)",
                     w->path);
}

/* Encodes event and appends it; the caller holds w->lock. */
static eg_status append(eg_summary_writer *w, const eg__summary_event *event) {
    if (w->status != EG_OK) return refuse(w);
    size_t n = 0;
    uint8_t *record = eg__summary_record(event, &n);
    if (!record) return eg_last_status();
    errno = 0;
    eg_status status = EG_OK;
    if (fwrite(record, 1, n, w->stream) != n) status = write_failed(w, "write", errno);
    free(record);
    return status;
}

static eg_status flush_locked(eg_summary_writer *w) {
    if (w->status != EG_OK) return refuse(w);
    errno = 0;
    if (fflush(w->stream) != 0) return write_failed(w, "write", errno);
    if (fsync(fileno(w->stream)) != 0 && errno != EINVAL && errno != ENOTSUP)
        return write_failed(w, "fsync", errno);
    return EG_OK;
}

/* Creates "<logdir>/events.out.tfevents.<time>.<host>.<pid>[.<n>].eagle" with O_EXCL. */
static eg_status create_file(eg_summary_writer *w, const char *logdir) {
    char host[256];
    if (gethostname(host, sizeof host) != 0 || !host[0]) snprintf(host, sizeof host, "localhost");
    host[sizeof host - 1] = '\0';
    for (char *p = host; *p; p++)
        if (*p == '/') *p = '_';
    size_t n = strlen(logdir);
    while (n > 1 && logdir[n - 1] == '/') n--;
    size_t size = n + strlen(host) + 128;
    w->path = malloc(size);
    if (!w->path) return eg__error(EG_ERR_OUT_OF_MEMORY, "summary: out of host memory");
    long long now = (long long)time(NULL);
    long pid = (long)getpid();
    for (int attempt = 0;; attempt++) {
        char counter[24] = "";
        if (attempt) snprintf(counter, sizeof counter, ".%d", attempt);
        snprintf(w->path, size, "%.*s%sevents.out.tfevents.%010lld.%s.%ld%s.eagle", (int)n, logdir,
                 logdir[n - 1] == '/' ? "" : "/", now, host, pid, counter);
        int fd = open(w->path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (fd < 0 && errno == EEXIST && attempt < 1000) continue;
        if (fd < 0)
            return eg__error(EG_ERR_IO, "summary: cannot create the event file %s: %s", w->path,
                             strerror(errno));
        w->stream = fdopen(fd, "wb");
        if (!w->stream) {
            int error = errno;
            close(fd);
            unlink(w->path);
            return eg__error(error == ENOMEM ? EG_ERR_OUT_OF_MEMORY : EG_ERR_IO,
                             "summary: %s: cannot open a stream: %s", w->path, strerror(error));
        }
        return EG_OK;
    }
}

eg_summary_writer *eg_summary_writer_new(const char *logdir) {
    if (!logdir) {
        eg__error(EG_ERR_NULL_ARGUMENT, "summary_writer_new: logdir is NULL");
        return NULL;
    }
    if (!*logdir) {
        eg__error(EG_ERR_INVALID_ARGUMENT, "summary_writer_new: logdir is empty");
        return NULL;
    }
    if (make_directories(logdir) != EG_OK) return NULL;
    eg_summary_writer *w = calloc(1, sizeof *w);
    if (!w) {
        eg__error(EG_ERR_OUT_OF_MEMORY, "summary: out of host memory");
        return NULL;
    }
    if (pthread_mutex_init(&w->lock, NULL) != 0) {
        free(w);
        eg__error(EG_ERR_OUT_OF_MEMORY, "summary: cannot create a mutex");
        return NULL;
    }
    eg__summary_event event = {
        .kind = EG__SUMMARY_FILE_VERSION, .wall_time = wall_time(), .file_version = FILE_VERSION};
    if (create_file(w, logdir) != EG_OK || append(w, &event) != EG_OK || flush_locked(w) != EG_OK) {
        if (w->stream) {
            fclose(w->stream);
            unlink(w->path);
        }
        pthread_mutex_destroy(&w->lock);
        free(w->path);
        free(w);
        return NULL;
    }
    return w;
}

const char *eg_summary_writer_path(const eg_summary_writer *w) {
    if (!w) {
        eg__error(EG_ERR_NULL_ARGUMENT, "summary_writer_path: writer is NULL");
        return NULL;
    }
    return w->path;
}

/* The checks shared by every record: w and tag present, tag non-empty UTF-8. */
static eg_status check_record(const char *function, const eg_summary_writer *w, const char *tag) {
    if (!w) return eg__error(EG_ERR_NULL_ARGUMENT, "%s: writer is NULL", function);
    if (!tag) return eg__error(EG_ERR_NULL_ARGUMENT, "%s: tag is NULL", function);
    if (!*tag) return eg__error(EG_ERR_INVALID_ARGUMENT, "%s: tag is empty", function);
    size_t n = strlen(tag), bad = eg__utf8_check((const uint8_t *)tag, n);
    if (bad != n)
        return eg__error(EG_ERR_INVALID_ARGUMENT,
                         "%s: tag is not valid UTF-8 (byte %zu of %zu); protobuf strings must be",
                         function, bad, n);
    return EG_OK;
}

/* value as the nearest float; beyond the float range (after rounding) +-infinity. */
static float to_float(double value) {
    if (isfinite(value) && fabs(value) >= 0x1.ffffffp127) return value > 0 ? INFINITY : -INFINITY;
    return (float)value;
}

eg_status eg_summary_scalar(eg_summary_writer *w, const char *tag, int64_t step, double value) {
    eg_status status = check_record("summary_scalar", w, tag);
    if (status != EG_OK) return status;
    eg__summary_event event = {.kind = EG__SUMMARY_SCALAR,
                               .wall_time = wall_time(),
                               .step = step,
                               .tag = tag,
                               .simple_value = to_float(value)};
    pthread_mutex_lock(&w->lock);
    status = append(w, &event);
    pthread_mutex_unlock(&w->lock);
    return status;
}

/* t's elements as doubles in a new malloc'd array of *n; NULL with an error. */
static double *tensor_values(const eg_tensor *t, const char *tag, size_t *n) {
    int64_t count = eg_tensor_n_elems(t);
    eg_dtype dtype = eg_tensor_dtype(t);
    size_t size = eg_dtype_size(dtype);
    if (count <= 0) {
        eg__error(EG_ERR_INVALID_ARGUMENT, "summary_histogram '%s': the tensor is empty", tag);
        return NULL;
    }
    if ((uint64_t)count > SIZE_MAX / 8) {
        eg__error(EG_ERR_OUT_OF_MEMORY, "summary_histogram '%s': %lld elements are too many", tag,
                  (long long)count);
        return NULL;
    }
    *n = (size_t)count;
    double *values = malloc(*n * sizeof(double));
    void *raw = dtype == EG_DTYPE_F64 ? values : malloc(*n * size);
    if (!values || !raw) {
        free(values);
        if (raw != values) free(raw);
        eg__error(EG_ERR_OUT_OF_MEMORY, "summary_histogram '%s': out of host memory", tag);
        return NULL;
    }
    if (eg_tensor_copy_to_host(t, raw, *n * size) != EG_OK) {
        free(values);
        if (raw != values) free(raw);
        return NULL;
    }
    for (size_t i = 0; i < *n; i += 256) { /* half floats go through a float buffer */
        size_t m = *n - i < 256 ? *n - i : 256;
        float floats[256];
        if (dtype == EG_DTYPE_F16) eg_f16_to_f32((const uint16_t *)raw + i, floats, m);
        if (dtype == EG_DTYPE_BF16) eg_bf16_to_f32((const uint16_t *)raw + i, floats, m);
        for (size_t j = 0; j < m; j++) {
            size_t k = i + j;
            switch (dtype) {
            case EG_DTYPE_F32:
                values[k] = ((const float *)raw)[k];
                break;
            case EG_DTYPE_F16:
            case EG_DTYPE_BF16:
                values[k] = floats[j];
                break;
            case EG_DTYPE_I32:
                values[k] = ((const int32_t *)raw)[k];
                break;
            case EG_DTYPE_I64:
                values[k] = (double)((const int64_t *)raw)[k];
                break;
            case EG_DTYPE_U8:
                values[k] = ((const uint8_t *)raw)[k];
                break;
            case EG_DTYPE_BOOL:
                values[k] = ((const uint8_t *)raw)[k] != 0;
                break;
            case EG_DTYPE_I8:
                values[k] = ((const int8_t *)raw)[k];
                break;
            default:
                break; /* F64: already in place */
            }
        }
    }
    if (raw != values) free(raw);
    return values;
}

eg_status eg_summary_histogram(eg_summary_writer *w, const char *tag, int64_t step,
                               const eg_tensor *values) {
    eg_status status = check_record("summary_histogram", w, tag);
    if (status != EG_OK) return status;
    if (!values) return eg__error(EG_ERR_NULL_ARGUMENT, "summary_histogram: values is NULL");
    size_t n = 0;
    double *data = tensor_values(values, tag, &n);
    if (!data) return eg_last_status() != EG_OK ? eg_last_status() : EG_ERR_INTERNAL;
    size_t n_bad = 0;
    for (size_t i = 0; i < n; i++) n_bad += !isfinite(data[i]);
    if (n_bad) {
        free(data);
        return eg__error(EG_ERR_INVALID_ARGUMENT,
                         "summary_histogram '%s': %zu of %zu values are NaN or infinite (nothing "
                         "written)",
                         tag, n_bad, n);
    }
    eg__summary_histogram histogram;
    status = eg__summary_histogram_build(data, n, &histogram);
    free(data);
    if (status != EG_OK) return status;
    eg__summary_event event = {.kind = EG__SUMMARY_HISTOGRAM,
                               .wall_time = wall_time(),
                               .step = step,
                               .tag = tag,
                               .histogram = &histogram};
    pthread_mutex_lock(&w->lock);
    status = append(w, &event);
    pthread_mutex_unlock(&w->lock);
    eg__summary_histogram_free(&histogram);
    return status;
}

eg_status eg_summary_flush(eg_summary_writer *w) {
    if (!w) return eg__error(EG_ERR_NULL_ARGUMENT, "summary_flush: writer is NULL");
    pthread_mutex_lock(&w->lock);
    eg_status status = flush_locked(w);
    pthread_mutex_unlock(&w->lock);
    return status;
}

void eg_summary_writer_free(eg_summary_writer *w) {
    if (!w) return;
    pthread_mutex_lock(&w->lock);
    if (w->status == EG_OK) flush_locked(w);
    if (fclose(w->stream) != 0 && w->status == EG_OK) write_failed(w, "close", errno);
    pthread_mutex_unlock(&w->lock);
    pthread_mutex_destroy(&w->lock);
    free(w->path);
    free(w);
}
