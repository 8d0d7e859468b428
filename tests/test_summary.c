/* TensorBoard event files: CRC-32C against published vectors (hardware and table paths), the
 * masked CRC, the exact bytes of known events (derived by hand from the protobuf and TFRecord
 * specifications), TensorFlow's histogram buckets, whole files written by the writer and parsed
 * back here with an independent TFRecord + protobuf reader, argument and I/O errors, and several
 * threads sharing one writer. Files are written into a fresh temporary directory. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "eagle/ops.h"
#include "eagle/summary.h"
#include "eagle/tensor.h"
#include "io/crc32c.h"
#include "io/summary_internal.h"

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function" /* helpers for other tests too */
#include "checkpoint_test_util.h"
#pragma GCC diagnostic pop

/* ---- an independent reader: TFRecord framing, then the Event protobuf ---- */

#define MAX_BUCKETS 1600

typedef struct parsed_event {
    double wall_time;
    int64_t step;
    char file_version[64];
    int n_values; /* Summary.value entries */
    char tag[256];
    bool has_simple_value;
    float simple_value;
    bool has_histogram;
    double histogram[6]; /* fields 1..5: min, max, num, sum, sum_squares */
    size_t n_limits, n_counts;
    double limits[MAX_BUCKETS], counts[MAX_BUCKETS];
} parsed_event;

static uint64_t load_le(const uint8_t *p, int n) {
    uint64_t value = 0;
    for (int i = 0; i < n; i++) value |= (uint64_t)p[i] << (8 * i);
    return value;
}

static double load_double(const uint8_t *p) {
    uint64_t bits = load_le(p, 8);
    double value;
    memcpy(&value, &bits, 8);
    return value;
}

static uint64_t get_varint(const uint8_t **p, const uint8_t *end) {
    uint64_t value = 0;
    for (int shift = 0; shift < 70; shift += 7) {
        assert_true(*p < end);
        uint8_t byte = *(*p)++;
        value |= (uint64_t)(byte & 0x7f) << shift;
        if (!(byte & 0x80)) return value;
    }
    fail_msg("varint longer than 10 bytes");
    return 0;
}

/* level 0: Event, 1: Summary, 2: Summary.Value, 3: HistogramProto. */
static void parse_message(const uint8_t *p, const uint8_t *end, int level, parsed_event *e) {
    while (p < end) {
        uint64_t key = get_varint(&p, end);
        unsigned field = (unsigned)(key >> 3), wire = (unsigned)(key & 7);
        const uint8_t *payload = p;
        uint64_t varint = 0, length = 0;
        switch (wire) {
        case 0:
            varint = get_varint(&p, end);
            break;
        case 1:
            length = 8;
            break;
        case 2:
            length = get_varint(&p, end), payload = p;
            break;
        case 5:
            length = 4;
            break;
        default:
            fail_msg("unexpected wire type %u (field %u, level %d)", wire, field, level);
        }
        assert_true(length <= (uint64_t)(end - p));
        p += length;
        if (level == 0 && field == 1 && wire == 1)
            e->wall_time = load_double(payload);
        else if (level == 0 && field == 2 && wire == 0)
            e->step = (int64_t)varint;
        else if (level == 0 && field == 3 && wire == 2) {
            assert_true(length < sizeof e->file_version);
            memcpy(e->file_version, payload, length);
        } else if (level == 0 && field == 5 && wire == 2)
            parse_message(payload, payload + length, 1, e);
        else if (level == 1 && field == 1 && wire == 2) {
            e->n_values++;
            parse_message(payload, payload + length, 2, e);
        } else if (level == 2 && field == 1 && wire == 2) {
            assert_true(length < sizeof e->tag);
            memcpy(e->tag, payload, length);
        } else if (level == 2 && field == 2 && wire == 5) {
            uint32_t bits = (uint32_t)load_le(payload, 4);
            memcpy(&e->simple_value, &bits, 4);
            e->has_simple_value = true;
        } else if (level == 2 && field == 5 && wire == 2) {
            e->has_histogram = true;
            parse_message(payload, payload + length, 3, e);
        } else if (level == 3 && field >= 1 && field <= 5 && wire == 1)
            e->histogram[field] = load_double(payload);
        else if (level == 3 && (field == 6 || field == 7) && wire == 2) {
            assert_int_equal(length % 8, 0);
            assert_true(length / 8 <= MAX_BUCKETS);
            double *out = field == 6 ? e->limits : e->counts;
            for (size_t i = 0; i < length / 8; i++) out[i] = load_double(payload + 8 * i);
            *(field == 6 ? &e->n_limits : &e->n_counts) = length / 8;
        } else
            fail_msg("unexpected field %u (wire type %u) at level %d", field, wire, level);
    }
    assert_true(p == end);
}

/* Every record of the file at path, CRCs checked; *n events in a calloc'd array. */
static parsed_event *parse_file(const char *path, size_t *n) {
    size_t size = 0;
    uint8_t *bytes = read_whole(path, &size);
    size_t capacity = 16, count = 0, offset = 0;
    parsed_event *events = calloc(capacity, sizeof *events);
    assert_non_null(events);
    while (offset < size) {
        assert_true(size - offset >= 12);
        const uint8_t *header = bytes + offset;
        uint64_t length = load_le(header, 8);
        assert_int_equal(load_le(header + 8, 4), eg__crc32c_mask(eg__crc32c(header, 8)));
        assert_true(length + 16 <= size - offset);
        const uint8_t *data = header + 12;
        assert_int_equal(load_le(data + length, 4), eg__crc32c_mask(eg__crc32c(data, length)));
        if (count == capacity) {
            events = realloc(events, 2 * capacity * sizeof *events);
            assert_non_null(events);
            memset(events + capacity, 0, capacity * sizeof *events);
            capacity *= 2;
        }
        parse_message(data, data + length, 0, &events[count++]);
        offset += 16 + length;
    }
    free(bytes);
    *n = count;
    return events;
}

/* ---- CRC-32C ---- */

typedef uint32_t (*crc_function)(uint32_t, const void *, size_t);

static void check_vectors(crc_function crc) {
    uint8_t zeros[32] = {0}, ones[32], ascending[32], descending[32];
    for (int i = 0; i < 32; i++) {
        ones[i] = 0xff;
        ascending[i] = (uint8_t)i;
        descending[i] = (uint8_t)(31 - i);
    }
    assert_int_equal(crc(0, "123456789", 9), 0xE3069283u);
    assert_int_equal(crc(0, NULL, 0), 0);
    /* RFC 3720 (iSCSI), appendix B.4 */
    assert_int_equal(crc(0, zeros, 32), 0x8A9136AAu);
    assert_int_equal(crc(0, ones, 32), 0x62A8AB43u);
    assert_int_equal(crc(0, ascending, 32), 0x46DD794Eu);
    assert_int_equal(crc(0, descending, 32), 0x113FDB5Cu);
    /* extending = computing over the concatenation */
    assert_int_equal(crc(crc(0, "1234", 4), "56789", 5), 0xE3069283u);
    assert_int_equal(crc(crc(0, ascending, 13), ascending + 13, 19), 0x46DD794Eu);
}

static void test_crc32c_vectors(void **state) {
    (void)state;
    check_vectors(eg__crc32c_extend);
    check_vectors(eg__crc32c_extend_portable);
    assert_int_equal(eg__crc32c("123456789", 9), 0xE3069283u);
    print_message("crc32c: %s\n", eg__crc32c_uses_hardware() ? "sse4.2 instruction" : "tables");
}

static void test_crc32c_paths_agree(void **state) {
    (void)state;
    enum { N = 1100 };
    uint8_t buffer[N];
    uint64_t x = 0x9E3779B97F4A7C15u;
    for (int i = 0; i < N; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        buffer[i] = (uint8_t)x;
    }
    for (size_t offset = 0; offset < 9; offset++)
        for (size_t n = 0; n + offset <= N; n += n < 40 ? 1 : 37)
            assert_int_equal(eg__crc32c_extend(0x12345678u, buffer + offset, n),
                             eg__crc32c_extend_portable(0x12345678u, buffer + offset, n));
}

static void test_crc32c_mask(void **state) {
    (void)state;
    /* ((0xE3069283 >> 15) | (0xE3069283 << 17)) = 0x0001C60D | 0x25060000 = 0x2507C60D;
     * + 0xa282ead8 = 0xC78AB0E5 */
    assert_int_equal(eg__crc32c_mask(0xE3069283u), 0xC78AB0E5u);
    assert_int_equal(eg__crc32c_unmask(0xC78AB0E5u), 0xE3069283u);
    assert_int_equal(eg__crc32c_mask(0), 0xa282ead8u);
    const uint32_t samples[] = {0, 1, 0x80000000u, 0xffffffffu, 0xdeadbeefu, 0xE3069283u};
    for (size_t i = 0; i < sizeof samples / sizeof samples[0]; i++) {
        assert_int_equal(eg__crc32c_unmask(eg__crc32c_mask(samples[i])), samples[i]);
        assert_int_not_equal(eg__crc32c_mask(samples[i]), samples[i]);
    }
}

/* ---- exact bytes ---- */

static void assert_bytes(const uint8_t *actual, size_t n_actual, const uint8_t *expected,
                         size_t n_expected) {
    assert_int_equal(n_actual, n_expected);
    for (size_t i = 0; i < n_expected; i++)
        if (actual[i] != expected[i])
            fail_msg("byte %zu: 0x%02x, expected 0x%02x", i, actual[i], expected[i]);
}

static void test_scalar_event_bytes(void **state) {
    (void)state;
    eg__summary_event event = {.kind = EG__SUMMARY_SCALAR,
                               .wall_time = 1.5,
                               .step = 7,
                               .tag = "loss",
                               .simple_value = 0.25f};
    static const uint8_t expected[] = {
        /* TFRecord: length 26 (uint64 LE), masked CRC-32C of those 8 bytes */
        0x1a, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x12, 0x9b, 0xd8, 0x2d,
        /* Event.wall_time (field 1, fixed64): 1.5 = 0x3FF8000000000000 */
        0x09, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xf8, 0x3f,
        /* Event.step (field 2, varint): 7 */
        0x10, 0x07,
        /* Event.summary (field 5, 13 bytes) { Summary.value (field 1, 11 bytes) { */
        0x2a, 0x0d, 0x0a, 0x0b,
        /* Value.tag (field 1, 4 bytes) "loss" */
        0x0a, 0x04, 'l', 'o', 's', 's',
        /* Value.simple_value (field 2, fixed32): 0.25f = 0x3E800000 } } */
        0x15, 0x00, 0x00, 0x80, 0x3e,
        /* masked CRC-32C of the 26 data bytes */
        0xc9, 0xd0, 0x7b, 0x8d};
    size_t n = 0;
    uint8_t *record = eg__summary_record(&event, &n);
    assert_non_null(record);
    assert_bytes(record, n, expected, sizeof expected);
    free(record);
}

static void test_file_version_event_bytes(void **state) {
    (void)state;
    eg__summary_event event = {
        .kind = EG__SUMMARY_FILE_VERSION, .wall_time = 1.5, .file_version = "brain.Event:2"};
    static const uint8_t expected[] = {
        0x18, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xa3, 0x7f, 0x4b, 0x22, /* length 24 */
        0x09, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xf8, 0x3f, /* wall_time 1.5; step 0 left out */
        0x1a, 0x0d, 'b',  'r',  'a',  'i',  'n',  '.',  'E',  'v',  'e',  'n',
        't',  ':',  '2', /* field 3 */
        0x2a, 0x28, 0x64, 0x6c};
    size_t n = 0;
    uint8_t *record = eg__summary_record(&event, &n);
    assert_non_null(record);
    assert_bytes(record, n, expected, sizeof expected);
    free(record);
}

static void test_step_encoding(void **state) {
    (void)state;
    /* int64 varints: 300 = 0xAC 0x02; -1 = ten bytes (two's complement, as protobuf's int64). */
    const struct {
        int64_t step;
        uint8_t bytes[11];
        size_t n;
    } cases[] = {{300, {0x10, 0xac, 0x02}, 3},
                 {-1, {0x10, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}, 11},
                 {INT64_MAX, {0x10, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f}, 10}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        eg__summary_event event = {.kind = EG__SUMMARY_SCALAR,
                                   .wall_time = 1.5,
                                   .step = cases[i].step,
                                   .tag = "t",
                                   .simple_value = 1.0f};
        size_t n = 0;
        uint8_t *record = eg__summary_record(&event, &n);
        assert_non_null(record);
        /* header (12), wall_time (9), then the step field */
        assert_bytes(record + 21, cases[i].n, cases[i].bytes, cases[i].n);
        assert_int_equal(load_le(record, 8), n - 16);
        parsed_event *e = calloc(1, sizeof *e);
        assert_non_null(e);
        parse_message(record + 12, record + n - 4, 0, e);
        assert_int_equal(e->step, cases[i].step);
        assert_string_equal(e->tag, "t");
        free(e);
        free(record);
    }
}

static void test_histogram_event_bytes(void **state) {
    (void)state;
    double limits[2] = {1.0, DBL_MAX}, counts[2] = {2.0, 1.0};
    eg__summary_histogram histogram = {.min = -1.0,
                                       .max = 2.0,
                                       .num = 3.0,
                                       .sum = 0.5,
                                       .sum_squares = 4.0,
                                       .n_buckets = 2,
                                       .bucket_limit = limits,
                                       .bucket = counts};
    eg__summary_event event = {.kind = EG__SUMMARY_HISTOGRAM,
                               .wall_time = 1.5,
                               .step = 1,
                               .tag = "w",
                               .histogram = &histogram};
    size_t n = 0;
    uint8_t *record = eg__summary_record(&event, &n);
    assert_non_null(record);
    /* HistogramProto: 5 doubles of 9 bytes + 2 packed fields of 2 + 16 bytes = 81 bytes;
     * Value: tag 3 + histo 2 + 81 = 86; Summary: 2 + 86 = 88; Event: 9 + 2 + 2 + 88 = 101. */
    assert_int_equal(n, 12 + 101 + 4);
    static const uint8_t expected_start[] = {0x10, 0x01, 0x2a, 88,   0x0a, 86,   0x0a,
                                             0x01, 'w',  0x2a, 81,   0x09, 0x00, 0x00,
                                             0x00, 0x00, 0x00, 0x00, 0xf0, 0xbf /* min -1.0 */};
    assert_bytes(record + 21, sizeof expected_start, expected_start, sizeof expected_start);
    const uint8_t *h = record + 21 + 11; /* the HistogramProto's first key */
    for (int field = 1; field <= 5; field++) assert_int_equal(h[9 * (field - 1)], field << 3 | 1);
    assert_int_equal(h[45], 0x32); /* bucket_limit: field 6, length-delimited, 16 bytes */
    assert_int_equal(h[46], 16);
    assert_true(load_double(h + 47) == 1.0 && load_double(h + 55) == DBL_MAX);
    assert_int_equal(h[63], 0x3a); /* bucket: field 7 */
    assert_int_equal(h[64], 16);
    assert_true(load_double(h + 65) == 2.0 && load_double(h + 73) == 1.0);
    free(record);
}

/* ---- histograms ---- */

static void test_default_limits(void **state) {
    (void)state;
    size_t n = 0;
    const double *limits = eg__summary_default_limits(&n);
    assert_int_equal(n, 1551);
    assert_true(limits[0] == -DBL_MAX && limits[n - 1] == DBL_MAX);
    assert_true(limits[775] == 0.0 && limits[776] == 1e-12 && limits[774] == -1e-12);
    assert_true(limits[n - 2] >= 1e20 / 1.1 && limits[n - 2] < 1e20);
    for (size_t i = 1; i < n; i++) assert_true(limits[i - 1] < limits[i]);
    for (size_t i = 0; i < n; i++) assert_true(limits[i] == -limits[n - 1 - i]);
}

/* The histogram of values built the slow way: bucket i holds limits[i-1] <= v < limits[i]. */
static void check_histogram(const double *values, size_t n_values) {
    size_t n = 0;
    const double *limits = eg__summary_default_limits(&n);
    double *counts = calloc(n, sizeof(double));
    assert_non_null(counts);
    double sum = 0, sum_squares = 0, min = INFINITY, max = -INFINITY;
    for (size_t k = 0; k < n_values; k++) {
        double v = values[k];
        size_t i = 0;
        while (i < n - 1 && !(v < limits[i])) i++;
        counts[i]++;
        sum += v, sum_squares += v * v;
        min = fmin(min, v), max = fmax(max, v);
    }
    eg__summary_histogram h;
    assert_int_equal(eg__summary_histogram_build(values, n_values, &h), EG_OK);
    assert_true(h.min == min && h.max == max && h.num == (double)n_values);
    assert_true(h.sum == sum && h.sum_squares == sum_squares);
    /* Expected entries: one per non-empty bucket, its right edge extended up to the next
     * non-empty bucket (the last one to DBL_MAX). */
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (counts[i] == 0) continue;
        size_t next = i + 1;
        while (next < n && counts[next] == 0) next++;
        assert_true(k < h.n_buckets);
        assert_true(h.bucket[k] == counts[i]);
        assert_true(h.bucket_limit[k] == limits[next - 1]);
        k++;
    }
    assert_int_equal(k, h.n_buckets);
    eg__summary_histogram_free(&h);
    free(counts);
}

static void test_histogram_buckets(void **state) {
    (void)state;
    const double a[] = {0.0};
    check_histogram(a, 1);
    const double b[] = {-1.0, 1.0, 1.0, 5.0, 1e-13, -3e7, 2.5, 2.5000001, 1e19, -0.0};
    check_histogram(b, sizeof b / sizeof b[0]);
    const double c[] = {DBL_MAX, -DBL_MAX, 1e300};
    check_histogram(c, 3);
    double d[500];
    for (int i = 0; i < 500; i++) d[i] = sin(i * 0.37) * exp((i % 40) - 20.0);
    check_histogram(d, 500);

    /* a single value: one bucket, closed at DBL_MAX (as TensorFlow) */
    const double one[] = {1.0};
    eg__summary_histogram h;
    assert_int_equal(eg__summary_histogram_build(one, 1, &h), EG_OK);
    assert_int_equal(h.n_buckets, 1);
    assert_true(h.bucket_limit[0] == DBL_MAX && h.bucket[0] == 1.0);
    eg__summary_histogram_free(&h);
}

/* ---- the writer, end to end ---- */

/* The path of the only file in dir whose name contains "tfevents". */
static void find_event_file(const char *dir, char *path, size_t size) {
    DIR *d = opendir(dir);
    assert_non_null(d);
    int found = 0;
    for (struct dirent *e; (e = readdir(d));)
        if (strstr(e->d_name, "tfevents")) {
            snprintf(path, size, "%s/%s", dir, e->d_name);
            found++;
        }
    closedir(d);
    assert_int_equal(found, 1);
}

static double realtime_seconds(void) {
    struct timespec now;
    assert_int_equal(clock_gettime(CLOCK_REALTIME, &now), 0);
    return (double)now.tv_sec + now.tv_nsec / 1e9;
}

static void test_write_and_read_back(void **state) {
    (void)state;
    char logdir[PATH_MAX];
    join(logdir, sizeof logdir, "runs/nested/run1"); /* created with its parents */
    /* time() reads the kernel's coarse clock, which can run a tick ahead of the CLOCK_REALTIME the
     * writer stamps with; a second of slack either side still catches a wrong unit or epoch. */
    double before = realtime_seconds() - 1;
    eg_summary_writer *w = eg_summary_writer_new(logdir);
    assert_non_null(w);
    const char *path = eg_summary_writer_path(w);
    assert_non_null(path);
    char found[PATH_MAX + 256];
    find_event_file(logdir, found, sizeof found);
    assert_string_equal(found, path);

    /* name: events.out.tfevents.<10 digits>.<host>.<pid>.eagle */
    const char *name = strrchr(path, '/') + 1;
    assert_memory_equal(name, "events.out.tfevents.", 20);
    for (int i = 20; i < 30; i++) assert_true(name[i] >= '0' && name[i] <= '9');
    assert_int_equal(name[30], '.');
    char pid_suffix[64];
    snprintf(pid_suffix, sizeof pid_suffix, ".%ld.eagle", (long)getpid());
    assert_string_equal(name + strlen(name) - strlen(pid_suffix), pid_suffix);

    /* the file_version event is on disk at once */
    size_t n = 0;
    parsed_event *events = parse_file(path, &n);
    assert_int_equal(n, 1);
    assert_string_equal(events[0].file_version, "brain.Event:2");
    free(events);

    for (int step = 0; step < 5; step++)
        assert_int_equal(eg_summary_scalar(w, "train/loss", step, 2.0 / (step + 1)), EG_OK);
    assert_int_equal(eg_summary_scalar(w, "train/accuracy", 4, 0.875), EG_OK);
    assert_int_equal(eg_summary_scalar(w, "big", 5, 1e300), EG_OK);
    float weights[6] = {-1.5f, 0.0f, 0.25f, 0.25f, 3.0f, 1e-3f};
    eg_tensor *t = eg_tensor_from_data(weights, EG_DTYPE_F32, 2, (int64_t[]){2, 3});
    eg_tensor *transposed = eg_transpose(t, 0, 1); /* a view: same values, other order */
    assert_int_equal(eg_summary_histogram(w, "dense/kernel", 4, transposed), EG_OK);
    int32_t ints[4] = {-7, 0, 9, 9};
    eg_tensor *i32 = eg_tensor_from_data(ints, EG_DTYPE_I32, 1, (int64_t[]){4});
    assert_int_equal(eg_summary_histogram(w, "ints", 4, i32), EG_OK);
    uint16_t halves[3];
    eg_f32_to_f16((const float[]){0.5f, -2.0f, 4.0f}, halves, 3);
    eg_tensor *f16 = eg_tensor_from_data(halves, EG_DTYPE_F16, 1, (int64_t[]){3});
    assert_int_equal(eg_summary_histogram(w, "halves", 4, f16), EG_OK);
    assert_int_equal(eg_summary_flush(w), EG_OK);
    eg_summary_writer_free(w);
    assert_int_equal(eg_last_status(), EG_OK);
    double after = realtime_seconds() + 1;

    events = parse_file(found, &n);
    assert_int_equal(n, 1 + 5 + 2 + 3);
    for (size_t i = 0; i < n; i++)
        assert_true(events[i].wall_time >= before && events[i].wall_time <= after);
    for (int step = 0; step < 5; step++) {
        const parsed_event *e = &events[1 + step];
        assert_int_equal(e->n_values, 1);
        assert_string_equal(e->tag, "train/loss");
        assert_int_equal(e->step, step);
        assert_true(e->has_simple_value && !e->has_histogram);
        assert_true(e->simple_value == (float)(2.0 / (step + 1)));
    }
    assert_string_equal(events[6].tag, "train/accuracy");
    assert_true(events[6].simple_value == 0.875f);
    assert_true(isinf(events[7].simple_value) && events[7].simple_value > 0);

    const parsed_event *h = &events[8];
    assert_string_equal(h->tag, "dense/kernel");
    assert_int_equal(h->step, 4);
    assert_true(h->has_histogram && !h->has_simple_value);
    assert_true(h->histogram[1] == -1.5 && h->histogram[2] == 3.0 && h->histogram[3] == 6.0);
    assert_true(fabs(h->histogram[4] - (2.0 + (double)1e-3f)) < 1e-12);
    assert_true(fabs(h->histogram[5] - (2.25 + 0.125 + 9.0 + (double)1e-3f * 1e-3f)) < 1e-12);
    assert_int_equal(h->n_limits, h->n_counts);
    double total = 0;
    for (size_t i = 0; i < h->n_counts; i++) total += h->counts[i];
    assert_true(total == 6.0);
    for (size_t i = 1; i < h->n_limits; i++) assert_true(h->limits[i - 1] < h->limits[i]);
    assert_true(events[9].histogram[1] == -7 && events[9].histogram[2] == 9);
    assert_true(events[9].histogram[4] == 11 && events[9].histogram[5] == 49 + 81 + 81);
    assert_true(events[10].histogram[1] == -2 && events[10].histogram[4] == 2.5);
    free(events);
    eg_release(transposed);
    eg_release(t);
    eg_release(i32);
    eg_release(f16);
}

static void test_two_writers_one_directory(void **state) {
    (void)state;
    char logdir[PATH_MAX];
    join(logdir, sizeof logdir, "two/");
    eg_summary_writer *a = eg_summary_writer_new(logdir);
    eg_summary_writer *b = eg_summary_writer_new(logdir);
    assert_non_null(a);
    assert_non_null(b);
    assert_string_not_equal(eg_summary_writer_path(a), eg_summary_writer_path(b));
    assert_null(strstr(eg_summary_writer_path(a), "//"));
    const char *suffix = ".eagle";
    for (int i = 0; i < 2; i++) {
        const char *p = eg_summary_writer_path(i ? b : a);
        assert_string_equal(p + strlen(p) - strlen(suffix), suffix);
    }
    eg_summary_writer_free(a);
    eg_summary_writer_free(b);
    assert_int_equal(count_temp_files(logdir), 0);
}

static void test_argument_errors(void **state) {
    (void)state;
    assert_null(eg_summary_writer_new(NULL));
    assert_error(EG_ERR_NULL_ARGUMENT, "summary_writer_new: logdir is NULL");
    assert_null(eg_summary_writer_new(""));
    assert_error(EG_ERR_INVALID_ARGUMENT, "summary_writer_new: logdir is empty");
    assert_null(eg_summary_writer_path(NULL));
    assert_error(EG_ERR_NULL_ARGUMENT, "summary_writer_path: writer is NULL");

    char logdir[PATH_MAX];
    join(logdir, sizeof logdir, "errors");
    eg_summary_writer *w = eg_summary_writer_new(logdir);
    assert_non_null(w);
    assert_int_equal(eg_summary_scalar(NULL, "x", 0, 1.0), EG_ERR_NULL_ARGUMENT);
    assert_error(EG_ERR_NULL_ARGUMENT, "summary_scalar: writer is NULL");
    assert_int_equal(eg_summary_scalar(w, NULL, 0, 1.0), EG_ERR_NULL_ARGUMENT);
    assert_error(EG_ERR_NULL_ARGUMENT, "summary_scalar: tag is NULL");
    assert_int_equal(eg_summary_scalar(w, "", 0, 1.0), EG_ERR_INVALID_ARGUMENT);
    assert_error(EG_ERR_INVALID_ARGUMENT, "summary_scalar: tag is empty");
    assert_int_equal(eg_summary_scalar(w, "bad\xff", 0, 1.0), EG_ERR_INVALID_ARGUMENT);
    assert_error(EG_ERR_INVALID_ARGUMENT, "summary_scalar: tag is not valid UTF-8 (byte 3 of 4)");
    assert_int_equal(eg_summary_histogram(w, NULL, 0, NULL), EG_ERR_NULL_ARGUMENT);
    assert_error(EG_ERR_NULL_ARGUMENT, "summary_histogram: tag is NULL");
    assert_int_equal(eg_summary_histogram(w, "h", 0, NULL), EG_ERR_NULL_ARGUMENT);
    assert_error(EG_ERR_NULL_ARGUMENT, "summary_histogram: values is NULL");
    eg_tensor *empty = eg_zeros(EG_DTYPE_F32, 2, (int64_t[]){0, 3});
    assert_int_equal(eg_summary_histogram(w, "h", 0, empty), EG_ERR_INVALID_ARGUMENT);
    assert_error(EG_ERR_INVALID_ARGUMENT, "summary_histogram 'h': the tensor is empty");
    double bad[4] = {1.0, NAN, INFINITY, 2.0};
    eg_tensor *nan = eg_tensor_from_data(bad, EG_DTYPE_F64, 1, (int64_t[]){4});
    assert_int_equal(eg_summary_histogram(w, "h", 0, nan), EG_ERR_INVALID_ARGUMENT);
    assert_error(EG_ERR_INVALID_ARGUMENT,
                 "summary_histogram 'h': 2 of 4 values are NaN or infinite (nothing written)");
    assert_int_equal(eg_summary_flush(NULL), EG_ERR_NULL_ARGUMENT);
    assert_error(EG_ERR_NULL_ARGUMENT, "summary_flush: writer is NULL");
    eg_summary_writer_free(NULL);
    assert_int_equal(eg_last_status(), EG_OK);

    /* the failed calls wrote nothing: the file holds only the file_version event */
    char path[PATH_MAX + 256];
    snprintf(path, sizeof path, "%s", eg_summary_writer_path(w));
    eg_summary_writer_free(w);
    size_t n = 0;
    parsed_event *events = parse_file(path, &n);
    assert_int_equal(n, 1);
    free(events);
    eg_release(empty);
    eg_release(nan);
}

static void test_unwritable_logdir(void **state) {
    (void)state;
    /* a regular file where a directory should be: fails for root too */
    char file[PATH_MAX], logdir[PATH_MAX + 16];
    join(file, sizeof file, "not-a-directory");
    write_bytes(file, "x", 1);
    snprintf(logdir, sizeof logdir, "%s/run", file);
    assert_null(eg_summary_writer_new(logdir));
    char expected[2 * PATH_MAX + 128];
    snprintf(expected, sizeof expected,
             "summary: cannot create the log directory %s: %s: Not a directory", logdir, file);
    assert_error(EG_ERR_IO, expected);
    assert_null(eg_summary_writer_new(file));
    snprintf(expected, sizeof expected,
             "summary: cannot create the log directory %s: Not a directory", file);
    assert_error(EG_ERR_IO, expected);

    /* a directory without write permission (root writes anywhere: then only no crash) */
    char read_only[PATH_MAX];
    join(read_only, sizeof read_only, "read-only");
    assert_int_equal(mkdir(read_only, 0555), 0);
    eg_summary_writer *w = eg_summary_writer_new(read_only);
    if (geteuid() != 0) {
        assert_null(w);
        assert_error_contains(EG_ERR_IO, "cannot create the event file");
    }
    eg_summary_writer_free(w);
    assert_int_equal(chmod(read_only, 0755), 0);
    assert_true(file_exists(read_only));
}

static void test_failed_write_is_sticky(void **state) {
    (void)state;
    char logdir[PATH_MAX];
    join(logdir, sizeof logdir, "full");
    eg_summary_writer *w = eg_summary_writer_new(logdir);
    assert_non_null(w);
    struct rlimit old = limit_file_size(4096); /* as a full disk would */
    eg_status status = EG_OK;
    for (int i = 0; i < 2000 && status == EG_OK; i++) status = eg_summary_scalar(w, "x", i, i);
    if (status == EG_OK) status = eg_summary_flush(w);
    restore_file_size(old);
    assert_int_equal(status, EG_ERR_IO);
    assert_error_contains(EG_ERR_IO, "failed: File too large");
    assert_int_equal(eg_summary_scalar(w, "x", 0, 0.0), EG_ERR_IO);
    assert_error_contains(EG_ERR_IO, "an earlier write failed");
    assert_int_equal(eg_summary_flush(w), EG_ERR_IO);
    assert_error_contains(EG_ERR_IO, "an earlier write failed");
    eg_summary_writer_free(w);
    assert_int_equal(eg_last_status(), EG_OK); /* already reported */
}

/* ---- threads ---- */

enum { N_THREADS = 4, N_PER_THREAD = 300 };

typedef struct thread_arg {
    eg_summary_writer *w;
    int id;
    eg_status status;
} thread_arg;

static void *write_scalars(void *p) {
    thread_arg *arg = p;
    char tag[32];
    snprintf(tag, sizeof tag, "thread/%d", arg->id);
    for (int i = 0; i < N_PER_THREAD && arg->status == EG_OK; i++) {
        arg->status = eg_summary_scalar(arg->w, tag, i, arg->id * 1000 + i);
        if (i % 100 == 99 && arg->status == EG_OK) arg->status = eg_summary_flush(arg->w);
    }
    return NULL;
}

static void test_threads_share_a_writer(void **state) {
    (void)state;
    char logdir[PATH_MAX];
    join(logdir, sizeof logdir, "threads");
    eg_summary_writer *w = eg_summary_writer_new(logdir);
    assert_non_null(w);
    pthread_t threads[N_THREADS];
    thread_arg args[N_THREADS];
    for (int i = 0; i < N_THREADS; i++) {
        args[i] = (thread_arg){w, i, EG_OK};
        assert_int_equal(pthread_create(&threads[i], NULL, write_scalars, &args[i]), 0);
    }
    for (int i = 0; i < N_THREADS; i++) {
        pthread_join(threads[i], NULL);
        assert_int_equal(args[i].status, EG_OK);
    }
    char path[PATH_MAX + 256];
    snprintf(path, sizeof path, "%s", eg_summary_writer_path(w));
    eg_summary_writer_free(w);
    size_t n = 0;
    parsed_event *events = parse_file(path, &n);
    assert_int_equal(n, 1 + N_THREADS * N_PER_THREAD);
    int next[N_THREADS] = {0}; /* each thread's steps arrive in order */
    for (size_t i = 1; i < n; i++) {
        int id = events[i].tag[7] - '0';
        assert_true(id >= 0 && id < N_THREADS);
        assert_int_equal(events[i].step, next[id]);
        assert_true(events[i].simple_value == (float)(id * 1000 + next[id]));
        next[id]++;
    }
    free(events);
}

static int group_setup(void **state) {
    (void)state;
    return make_temp_dir("eagle-test-summary");
}

static int group_teardown(void **state) {
    (void)state;
    return remove_temp_dir();
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_crc32c_vectors, clear_error_setup),
        cmocka_unit_test_setup(test_crc32c_paths_agree, clear_error_setup),
        cmocka_unit_test_setup(test_crc32c_mask, clear_error_setup),
        cmocka_unit_test_setup(test_scalar_event_bytes, clear_error_setup),
        cmocka_unit_test_setup(test_file_version_event_bytes, clear_error_setup),
        cmocka_unit_test_setup(test_step_encoding, clear_error_setup),
        cmocka_unit_test_setup(test_histogram_event_bytes, clear_error_setup),
        cmocka_unit_test_setup(test_default_limits, clear_error_setup),
        cmocka_unit_test_setup(test_histogram_buckets, clear_error_setup),
        cmocka_unit_test_setup(test_write_and_read_back, clear_error_setup),
        cmocka_unit_test_setup(test_two_writers_one_directory, clear_error_setup),
        cmocka_unit_test_setup(test_argument_errors, clear_error_setup),
        cmocka_unit_test_setup(test_unwritable_logdir, clear_error_setup),
        cmocka_unit_test_setup(test_failed_write_is_sticky, clear_error_setup),
        cmocka_unit_test_setup(test_threads_share_a_writer, clear_error_setup),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
