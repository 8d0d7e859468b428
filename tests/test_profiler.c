/* The profiler: off records nothing; counts equal the ops of a known sequence; times are
 * non-negative and within the wall time; ranges nest (stats and trace); the trace parses as JSON
 * with the fields Perfetto needs; several user threads and the pool's workers record at once
 * (runs under TSan, label "threads"); misuse is an error, never a crash. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "eagle.h"
#include "io/json.h"

/* ---- helpers ------------------------------------------------------------------------------- */

static double clock_seconds(clockid_t clock) {
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}
static double now_seconds(void) {
    return clock_seconds(CLOCK_MONOTONIC);
}
static double thread_cpu_seconds(void) {
    return clock_seconds(CLOCK_THREAD_CPUTIME_ID);
}

static int case_setup(void **state) {
    (void)state;
    if (eg_profiler_flags()) eg_profiler_stop();
    eg_profiler_reset();
    while (eg_scope_depth() > 0) eg_scope_end();
    while (eg_profiler_range_pop() == EG_OK) {
    }
    eg_clear_error();
    eg_scope_begin();
    return 0;
}

static int case_teardown(void **state) {
    (void)state;
    if (eg_profiler_flags()) eg_profiler_stop();
    while (eg_scope_depth() > 0) eg_scope_end();
    eg_clear_error();
    return 0;
}

/* All entries (ops, then ranges); *n receives the count. Caller frees. */
static eg_profiler_entry *all_entries(eg_profiler_summary *summary, int *n) {
    assert_int_equal(eg_profiler_stats(summary, NULL, 0, n), EG_OK);
    eg_profiler_entry *entries = calloc((size_t)*n + 1, sizeof *entries);
    assert_non_null(entries);
    int again = 0;
    assert_int_equal(eg_profiler_stats(summary, entries, *n + 1, &again), EG_OK);
    assert_int_equal(again, *n);
    return entries;
}

static const eg_profiler_entry *find_entry(const eg_profiler_entry *entries, int n,
                                           const char *name, bool is_range) {
    for (int i = 0; i < n; i++)
        if (entries[i].is_range == is_range && !strcmp(entries[i].name, name)) return &entries[i];
    return NULL;
}

static uint64_t calls_of(const eg_profiler_entry *entries, int n, const char *name) {
    const eg_profiler_entry *e = find_entry(entries, n, name, false);
    return e ? e->calls : 0;
}

static char *read_file(const char *path, size_t *length) {
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *text = malloc((size_t)size + 1);
    assert_non_null(text);
    assert_int_equal(fread(text, 1, (size_t)size, f), (size_t)size);
    fclose(f);
    text[size] = '\0';
    *length = (size_t)size;
    return text;
}

/* Parses the trace written to a temporary file and checks every event has the fields Perfetto's
 * JSON importer needs. The caller frees *root with eg__json_free. */
static void load_trace(eg__json *root) {
    char path[] = "/tmp/eagle_test_profiler_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    assert_int_equal(eg_profiler_write_trace(path), EG_OK);
    size_t length;
    char *text = read_file(path, &length);
    unlink(path);
    char error[256];
    bool ok = eg__json_parse(text, length, root, error, sizeof error, NULL);
    if (!ok) fail_msg("trace is not valid JSON: %s", error);
    free(text);
    assert_int_equal(root->type, EG__JSON_OBJECT);
    const eg__json *events = eg__json_get(root, "traceEvents");
    assert_non_null(events);
    assert_int_equal(events->type, EG__JSON_ARRAY);
    for (size_t i = 0; i < events->length; i++) {
        const eg__json *e = &events->items[i];
        assert_int_equal(e->type, EG__JSON_OBJECT);
        const eg__json *name = eg__json_get(e, "name"), *ph = eg__json_get(e, "ph");
        assert_true(name && name->type == EG__JSON_STRING);
        assert_true(ph && ph->type == EG__JSON_STRING && ph->length == 1);
        const char *fields[] = {"ts", "pid", "tid"};
        for (int f = 0; f < 3; f++) {
            const eg__json *v = eg__json_get(e, fields[f]);
            assert_true(v && v->type == EG__JSON_NUMBER);
            assert_true(strtod(v->string, NULL) >= 0);
        }
        const eg__json *args = eg__json_get(e, "args");
        switch (ph->string[0]) {
        case 'X': {
            const eg__json *dur = eg__json_get(e, "dur");
            assert_true(dur && dur->type == EG__JSON_NUMBER && strtod(dur->string, NULL) >= 0);
            break;
        }
        case 'C':
            assert_true(args && args->type == EG__JSON_OBJECT && args->length >= 1);
            assert_int_equal(args->items[0].type, EG__JSON_NUMBER);
            break;
        case 'M':
            assert_true(args && eg__json_get(args, "name") &&
                        eg__json_get(args, "name")->type == EG__JSON_STRING);
            break;
        default:
            fail_msg("unexpected phase %s", ph->string);
        }
    }
}

static const eg__json *trace_events(const eg__json *root) {
    return eg__json_get(root, "traceEvents");
}

static const char *string_field(const eg__json *e, const char *key) {
    const eg__json *v = eg__json_get(e, key);
    return v && v->type == EG__JSON_STRING ? v->string : NULL;
}

static double number_field(const eg__json *e, const char *key) {
    const eg__json *v = eg__json_get(e, key);
    return v && v->type == EG__JSON_NUMBER ? strtod(v->string, NULL) : NAN;
}

/* The first event with this name and phase, or NULL. */
static const eg__json *find_event(const eg__json *root, const char *name, char phase) {
    const eg__json *events = trace_events(root);
    for (size_t i = 0; i < events->length; i++) {
        const eg__json *e = &events->items[i];
        if (!strcmp(string_field(e, "name"), name) && string_field(e, "ph")[0] == phase) return e;
    }
    return NULL;
}

/* ---- cases --------------------------------------------------------------------------------- */

static void test_off_records_nothing(void **state) {
    (void)state;
    assert_int_equal(eg_profiler_flags(), 0u);
    eg_tensor *a = eg_ones(EG_DTYPE_F32, 1, (int64_t[]){8});
    assert_int_equal(eg_profiler_range_push("off"), EG_OK);
    for (int i = 0; i < 10; i++) assert_non_null(eg_relu(eg_add(a, a)));
    assert_int_equal(eg_profiler_range_pop(), EG_OK);
    eg_profiler_summary summary;
    int n = -1;
    assert_int_equal(eg_profiler_stats(&summary, NULL, 0, &n), EG_OK);
    assert_int_equal(n, 0);
    assert_int_equal(summary.op_calls, 0);
    assert_int_equal(summary.flags, 0u);
    assert_false(summary.running);
    assert_int_equal(summary.n_threads, 0);
    /* no session, no trace */
    assert_int_equal(eg_profiler_write_trace("/tmp/eagle_never_written.json"), EG_ERR_STATE);
    eg_clear_error();
    assert_int_equal(access("/tmp/eagle_never_written.json", F_OK), -1);
    /* after a session, stopping stops the counting */
    assert_int_equal(eg_profiler_start(EG_PROFILE_OPS), EG_OK);
    assert_non_null(eg_add(a, a));
    assert_int_equal(eg_profiler_stop(), EG_OK);
    for (int i = 0; i < 10; i++) assert_non_null(eg_add(a, a));
    eg_profiler_entry *entries = all_entries(&summary, &n);
    assert_int_equal(calls_of(entries, n, "add"), 1);
    assert_int_equal(summary.flags, (unsigned)EG_PROFILE_OPS);
    free(entries);
}

static void test_counts_of_a_known_sequence(void **state) {
    (void)state;
    eg_tensor *a = eg_ones(EG_DTYPE_F32, 2, (int64_t[]){16, 16});
    eg_tensor *b = eg_full(EG_DTYPE_F32, 2, (int64_t[]){16, 16}, 0.5);
    eg_tensor *odd = eg_ones(EG_DTYPE_F32, 1, (int64_t[]){3});
    double wall_start = now_seconds();
    assert_int_equal(eg_profiler_start(EG_PROFILE_OPS), EG_OK);
    assert_int_equal(eg_profiler_flags(), (unsigned)EG_PROFILE_OPS);
    for (int i = 0; i < 10; i++) assert_non_null(eg_add(a, b));
    for (int i = 0; i < 3; i++) assert_non_null(eg_matmul(a, b));
    for (int i = 0; i < 5; i++) assert_non_null(eg_relu(a));
    for (int i = 0; i < 2; i++) assert_non_null(eg_sum(a, 0, NULL, false));
    /* a call that fails on its arguments counts; one handed a NULL (which runs nothing) not */
    assert_null(eg_add(a, odd));
    eg_clear_error();
    assert_null(eg_add(NULL, a));
    assert_int_equal(eg_profiler_stop(), EG_OK);
    double wall = now_seconds() - wall_start;

    eg_profiler_summary summary;
    int n;
    eg_profiler_entry *entries = all_entries(&summary, &n);
    assert_int_equal(n, 4);
    assert_int_equal(calls_of(entries, n, "add"), 11);
    assert_int_equal(calls_of(entries, n, "matmul"), 3);
    assert_int_equal(calls_of(entries, n, "relu"), 5);
    assert_int_equal(calls_of(entries, n, "sum"), 2);
    assert_int_equal(summary.op_calls, 21);
    assert_int_equal(summary.n_threads, 1);
    assert_false(summary.running);
    assert_true(summary.wall_seconds > 0 && summary.wall_seconds <= wall);
    assert_true(summary.op_seconds >= 0 && summary.op_seconds <= summary.wall_seconds);
    double sum = 0;
    for (int i = 0; i < n; i++) {
        const eg_profiler_entry *e = &entries[i];
        assert_false(e->is_range);
        assert_true(e->min_seconds >= 0 && e->min_seconds <= e->max_seconds);
        assert_true(e->max_seconds <= e->total_seconds + 1e-12);
        assert_true(e->total_seconds <= e->max_seconds * (double)e->calls + 1e-12);
        if (i) assert_true(entries[i - 1].total_seconds >= e->total_seconds); /* sorted */
        sum += e->total_seconds;
    }
    assert_true(fabs(sum - summary.op_seconds) < 1e-9);
    /* a smaller capacity gets the first entries and the full count */
    eg_profiler_entry first;
    int total = 0;
    assert_int_equal(eg_profiler_stats(NULL, &first, 1, &total), EG_OK);
    assert_int_equal(total, 4);
    assert_string_equal(first.name, entries[0].name);
    free(entries);
    /* start discards the previous results */
    assert_int_equal(eg_profiler_start(EG_PROFILE_OPS), EG_OK);
    assert_non_null(eg_neg(a));
    assert_int_equal(eg_profiler_stop(), EG_OK);
    entries = all_entries(&summary, &n);
    assert_int_equal(n, 1);
    assert_int_equal(calls_of(entries, n, "neg"), 1);
    free(entries);
}

static void test_ranges_nest(void **state) {
    (void)state;
    eg_tensor *a = eg_ones(EG_DTYPE_F32, 2, (int64_t[]){4, 4});
    assert_int_equal(eg_profiler_start(EG_PROFILE_TRACE), EG_OK);
    assert_int_equal(eg_profiler_flags(), (unsigned)(EG_PROFILE_OPS | EG_PROFILE_TRACE));
    for (int step = 0; step < 3; step++) {
        assert_int_equal(eg_profiler_range_push("outer"), EG_OK);
        assert_int_equal(eg_profiler_range_push("inner"), EG_OK);
        assert_non_null(eg_add(a, a));
        assert_int_equal(eg_profiler_range_pop(), EG_OK);
        assert_non_null(eg_mul(a, a));
        assert_int_equal(eg_profiler_range_pop(), EG_OK);
    }
    /* an odd name survives the trace's escaping */
    const char odd[] = "say \"hi\"\n\\ \xff end";
    assert_int_equal(eg_profiler_range_push(odd), EG_OK);
    assert_int_equal(eg_profiler_range_pop(), EG_OK);
    assert_int_equal(eg_profiler_stop(), EG_OK);

    eg_profiler_summary summary;
    int n;
    eg_profiler_entry *entries = all_entries(&summary, &n);
    const eg_profiler_entry *outer = find_entry(entries, n, "outer", true);
    const eg_profiler_entry *inner = find_entry(entries, n, "inner", true);
    assert_non_null(outer);
    assert_non_null(inner);
    assert_non_null(find_entry(entries, n, odd, true));
    assert_int_equal(outer->calls, 3);
    assert_int_equal(inner->calls, 3);
    assert_true(inner->total_seconds <= outer->total_seconds);
    assert_true(calls_of(entries, n, "add") == 3 && calls_of(entries, n, "mul") == 3);
    /* ops come first, ranges after them */
    assert_false(entries[0].is_range);
    assert_true(entries[n - 1].is_range);
    free(entries);

    eg__json root;
    load_trace(&root);
    const eg__json *o = find_event(&root, "outer", 'X'), *i = find_event(&root, "inner", 'X');
    const eg__json *add = find_event(&root, "add", 'X');
    assert_true(o && i && add);
    double o_start = number_field(o, "ts"), o_end = o_start + number_field(o, "dur");
    double i_start = number_field(i, "ts"), i_end = i_start + number_field(i, "dur");
    double a_start = number_field(add, "ts"), a_end = a_start + number_field(add, "dur");
    /* the first of each: add inside inner inside outer (times have 1 ns resolution) */
    assert_true(o_start <= i_start + 1e-3 && i_end <= o_end + 2e-3);
    assert_true(i_start <= a_start + 1e-3 && a_end <= i_end + 2e-3);
    /* the byte that is not UTF-8 became '?' */
    assert_non_null(find_event(&root, "say \"hi\"\n\\ ? end", 'X'));
    eg__json_free(&root);
}

static void test_range_misuse(void **state) {
    (void)state;
    assert_int_equal(eg_profiler_range_pop(), EG_ERR_STATE);
    eg_clear_error();
    assert_int_equal(eg_profiler_range_push(NULL), EG_ERR_NULL_ARGUMENT);
    eg_clear_error();
    int pushed = 0;
    while (eg_profiler_range_push("deep") == EG_OK) pushed++;
    assert_int_equal(eg_last_status(), EG_ERR_STATE);
    eg_clear_error();
    assert_int_equal(pushed, 64);
    while (pushed-- > 0) assert_int_equal(eg_profiler_range_pop(), EG_OK);
    /* a range open across start is not recorded; one open across reset neither */
    assert_int_equal(eg_profiler_range_push("before start"), EG_OK);
    assert_int_equal(eg_profiler_start(EG_PROFILE_OPS), EG_OK);
    assert_int_equal(eg_profiler_range_pop(), EG_OK);
    assert_int_equal(eg_profiler_range_push("across reset"), EG_OK);
    eg_profiler_reset();
    assert_int_equal(eg_profiler_range_pop(), EG_OK);
    assert_int_equal(eg_profiler_range_push("kept"), EG_OK);
    assert_int_equal(eg_profiler_range_pop(), EG_OK);
    assert_int_equal(eg_profiler_stop(), EG_OK);
    eg_profiler_summary summary;
    int n;
    eg_profiler_entry *entries = all_entries(&summary, &n);
    assert_int_equal(n, 1);
    assert_string_equal(entries[0].name, "kept");
    free(entries);
}

static void test_session_misuse(void **state) {
    (void)state;
    assert_int_equal(eg_profiler_start(0), EG_ERR_INVALID_ARGUMENT);
    eg_clear_error();
    assert_int_equal(eg_profiler_start(1u << 5), EG_ERR_INVALID_ARGUMENT);
    eg_clear_error();
    assert_int_equal(eg_profiler_stop(), EG_ERR_STATE);
    eg_clear_error();
    assert_int_equal(eg_profiler_start(EG_PROFILE_OPS), EG_OK);
    assert_int_equal(eg_profiler_start(EG_PROFILE_OPS), EG_ERR_STATE);
    assert_non_null(strstr(eg_last_error(), "profiler_start: the profiler is already running"));
    assert_non_null(strstr(eg_last_error(), "test_profiler.c:")); /* the caller's line */
    eg_clear_error();
    eg_tensor *a = eg_ones(EG_DTYPE_F32, 1, (int64_t[]){4});
    assert_non_null(eg_add(a, a));
    /* reset while running: earlier calls are gone, later ones counted */
    eg_profiler_reset();
    assert_non_null(eg_add(a, a));
    assert_non_null(eg_add(a, a));
    /* an ops-only session has no trace */
    assert_int_equal(eg_profiler_write_trace("/tmp/eagle_never_written.json"), EG_ERR_STATE);
    eg_clear_error();
    assert_int_equal(eg_profiler_stop(), EG_OK);
    eg_profiler_summary summary;
    int n;
    eg_profiler_entry *entries = all_entries(&summary, &n);
    assert_int_equal(calls_of(entries, n, "add"), 2);
    free(entries);
    assert_int_equal(eg_profiler_stats(NULL, NULL, 3, NULL), EG_ERR_INVALID_ARGUMENT);
    eg_clear_error();
    assert_int_equal(eg_profiler_report(NULL, 0), EG_ERR_INVALID_ARGUMENT);
    eg_clear_error();
    assert_int_equal(eg_profiler_report(stdout, -1), EG_ERR_INVALID_ARGUMENT);
    eg_clear_error();
    assert_int_equal(eg_profiler_write_trace(NULL), EG_ERR_NULL_ARGUMENT);
    eg_clear_error();
    assert_int_equal(eg_profiler_set_thread_name(NULL), EG_ERR_NULL_ARGUMENT);
    eg_clear_error();
    /* a trace to a directory that does not exist */
    assert_int_equal(eg_profiler_start(EG_PROFILE_TRACE), EG_OK);
    assert_non_null(eg_add(a, a));
    assert_int_equal(eg_profiler_stop(), EG_OK);
    assert_int_equal(eg_profiler_write_trace("/nonexistent/dir/trace.json"), EG_ERR_IO);
    eg_clear_error();
    /* reset after stop: no results, no trace */
    eg_profiler_reset();
    assert_int_equal(eg_profiler_stats(&summary, NULL, 0, &n), EG_OK);
    assert_int_equal(n, 0);
    assert_int_equal(summary.flags, 0u);
    assert_int_equal(eg_profiler_write_trace("/tmp/eagle_never_written.json"), EG_ERR_STATE);
    eg_clear_error();
}

static void test_pause_resume(void **state) {
    (void)state;
    eg_tensor *a = eg_ones(EG_DTYPE_F32, 1, (int64_t[]){4});
    assert_int_equal(eg_profiler_pause(), EG_ERR_STATE); /* not running */
    eg_clear_error();
    double wall_start = now_seconds();
    assert_int_equal(eg_profiler_start(EG_PROFILE_TRACE), EG_OK);
    assert_non_null(eg_add(a, a));
    assert_int_equal(eg_profiler_range_push("across pause"), EG_OK);
    assert_int_equal(eg_profiler_pause(), EG_OK);
    assert_int_equal(eg_profiler_pause(), EG_ERR_STATE);
    eg_clear_error();
    assert_int_equal(eg_profiler_flags(), 0u);
    eg_profiler_summary summary;
    assert_int_equal(eg_profiler_stats(&summary, NULL, 0, NULL), EG_OK);
    assert_true(summary.running && summary.paused);
    for (int i = 0; i < 5; i++) assert_non_null(eg_add(a, a)); /* not counted */
    assert_int_equal(eg_profiler_range_pop(), EG_OK);          /* not recorded */
    usleep(50000);
    assert_int_equal(eg_profiler_resume(), EG_OK);
    assert_int_equal(eg_profiler_resume(), EG_ERR_STATE);
    eg_clear_error();
    assert_int_equal(eg_profiler_flags(), (unsigned)(EG_PROFILE_OPS | EG_PROFILE_TRACE));
    assert_non_null(eg_add(a, a));
    /* stop while paused ends the session at the pause */
    assert_int_equal(eg_profiler_pause(), EG_OK);
    usleep(20000);
    assert_int_equal(eg_profiler_stop(), EG_OK);
    double wall = now_seconds() - wall_start;
    int n;
    eg_profiler_entry *entries = all_entries(&summary, &n);
    assert_int_equal(n, 1);
    assert_int_equal(calls_of(entries, n, "add"), 2);
    assert_false(summary.running || summary.paused);
    assert_true(summary.wall_seconds >= 0 && summary.wall_seconds < wall - 0.06);
    free(entries);
    eg__json root;
    load_trace(&root);
    assert_null(find_event(&root, "across pause", 'X'));
    eg__json_free(&root);
    assert_int_equal(eg_profiler_resume(), EG_ERR_STATE);
    eg_clear_error();
}

static void test_report(void **state) {
    (void)state;
    eg_tensor *a = eg_ones(EG_DTYPE_F32, 2, (int64_t[]){32, 32});
    assert_int_equal(eg_profiler_start(EG_PROFILE_OPS), EG_OK);
    for (int step = 0; step < 4; step++) {
        assert_int_equal(eg_profiler_range_push("step"), EG_OK);
        assert_non_null(eg_matmul(a, a));
        assert_non_null(eg_exp(a));
        assert_int_equal(eg_profiler_range_pop(), EG_OK);
    }
    assert_int_equal(eg_profiler_stop(), EG_OK);
    char *text = NULL;
    size_t size = 0;
    FILE *out = open_memstream(&text, &size);
    assert_non_null(out);
    assert_int_equal(eg_profiler_report(out, 0), EG_OK);
    fclose(out);
    assert_non_null(strstr(text, "profile: 8 op calls"));
    assert_non_null(strstr(text, "ms/step"));
    assert_non_null(strstr(text, "% step"));
    assert_non_null(strstr(text, "4 step(s)"));
    assert_non_null(strstr(text, "\nmatmul "));
    assert_non_null(strstr(text, "\nexp "));
    assert_non_null(strstr(text, "(outside ops)"));
    assert_non_null(strstr(text, "\nstep "));
    free(text);
    /* an explicit step time without "step" ranges: columns present; with 0, absent */
    assert_int_equal(eg_profiler_start(EG_PROFILE_OPS), EG_OK);
    assert_non_null(eg_exp(a));
    assert_int_equal(eg_profiler_stop(), EG_OK);
    out = open_memstream(&text, &size);
    assert_int_equal(eg_profiler_report(out, 0.001), EG_OK);
    fclose(out);
    assert_non_null(strstr(text, "% step"));
    free(text);
    out = open_memstream(&text, &size);
    assert_int_equal(eg_profiler_report(out, 0), EG_OK);
    fclose(out);
    assert_null(strstr(text, "% step"));
    assert_non_null(strstr(text, "\nexp "));
    free(text);
}

/* The approximate ops say so in the trace: int8 products, sampled draws and dense ops whose
 * gradient samples, ops built in a fast-math region; exact ops carry no "approx". */
static void test_trace_marks_approximations(void **state) {
    (void)state;
    eg_tensor *x = eg_ones(EG_DTYPE_F32, 2, (int64_t[]){4, 8});
    eg_tensor *w = eg_ones(EG_DTYPE_F32, 2, (int64_t[]){8, 3});
    eg_tensor *b = eg_zeros(EG_DTYPE_F32, 1, (int64_t[]){3});
    eg_tensor *scale = NULL;
    eg_tensor *q = eg_quantize_int8(w, 7, &scale);
    assert_non_null(q);
    assert_int_equal(eg_profiler_start(EG_PROFILE_TRACE), EG_OK);
    assert_non_null(eg_dense_int8(x, q, scale, b, NULL, EG_ACTIVATION_NONE));
    assert_non_null(eg_dense_sampled(x, w, b, EG_ACTIVATION_NONE, 0.5, false));
    assert_non_null(eg_matmul_sampled(x, w, false, false, 0.5, NULL));
    eg_fast_math_begin();
    assert_non_null(eg_exp(x));
    eg_fast_math_end();
    assert_non_null(eg_log(x));
    eg__json root;
    load_trace(&root);
    assert_int_equal(eg_profiler_stop(), EG_OK);
    const eg__json *events = eg__json_get(&root, "traceEvents");
    struct {
        const char *op, *approx;
        bool seen;
    } want[] = {{"dense_int8", "int8", false},
                {"dense", "sampled", false},
                {"sample_indices", "sampled", false},
                {"exp", "fast-math", false},
                {"log", NULL, false}};
    for (size_t i = 0; i < events->length; i++) {
        const eg__json *e = &events->items[i], *name = eg__json_get(e, "name");
        const eg__json *args = eg__json_get(e, "args");
        const eg__json *approx = args ? eg__json_get(args, "approx") : NULL;
        for (size_t k = 0; name && k < sizeof want / sizeof *want; k++) {
            if (strcmp(name->string, want[k].op) != 0) continue;
            want[k].seen = true;
            if (want[k].approx)
                assert_true(approx && !strcmp(approx->string, want[k].approx));
            else
                assert_null(approx);
        }
    }
    for (size_t k = 0; k < sizeof want / sizeof *want; k++)
        if (!want[k].seen) fail_msg("no '%s' event in the trace", want[k].op);
    eg__json_free(&root);
}

static void test_trace_contents(void **state) {
    (void)state;
    int original_threads = eg_get_num_threads();
    assert_int_equal(eg_set_num_threads(3), EG_OK);
    /* big enough to be shared out to the pool's workers */
    eg_tensor *big = eg_ones(EG_DTYPE_F32, 2, (int64_t[]){512, 1024});
    eg_tensor *w = eg_ones(EG_DTYPE_F32, 2, (int64_t[]){1024, 64});
    assert_non_null(eg_add(big, big)); /* starts the workers before the session */
    assert_int_equal(eg_profiler_start(EG_PROFILE_TRACE), EG_OK);
    assert_int_equal(eg_profiler_set_thread_name("the main thread"), EG_OK);
    assert_non_null(eg_add(big, big));
    assert_non_null(eg_matmul(big, w));
    eg_tensor *parts[6];
    for (int i = 0; i < 6; i++) parts[i] = eg_ones(EG_DTYPE_F32, 1, (int64_t[]){2});
    assert_non_null(eg_concat(6, parts, 0));
    assert_int_equal(eg_profiler_stop(), EG_OK);
    eg__json root;
    load_trace(&root);
    const eg__json *add = find_event(&root, "add", 'X');
    assert_non_null(add);
    assert_string_equal(string_field(add, "cat"), "op");
    const eg__json *args = eg__json_get(add, "args");
    const eg__json *inputs = eg__json_get(args, "inputs");
    assert_true(inputs && inputs->type == EG__JSON_ARRAY && inputs->length == 2);
    assert_string_equal(inputs->items[0].string, "f32[512,1024]");
    assert_string_equal(string_field(args, "output"), "f32[512,1024]");
    const eg__json *mm = find_event(&root, "matmul", 'X');
    assert_string_equal(string_field(eg__json_get(mm, "args"), "output"), "f32[512,64]");
    /* 6 inputs: 4 shapes kept and the count */
    const eg__json *concat = find_event(&root, "concat", 'X');
    assert_int_equal(eg__json_get(eg__json_get(concat, "args"), "inputs")->length, 4);
    assert_true(number_field(eg__json_get(concat, "args"), "n_inputs") == 6);
    /* a memory counter and the names of the threads */
    const eg__json *memory = find_event(&root, "memory", 'C');
    assert_non_null(memory);
    assert_true(number_field(eg__json_get(memory, "args"), "bytes_in_use") > 0);
    /* Every thread that ran a chunk is named (the pool's workers "eagle pool N"). Which threads
     * run chunks is up to the scheduler: on a loaded machine the main thread may claim them all. */
    bool main_named = false, chunk = false;
    double named[64], chunk_tids[64];
    int n_named = 0, n_chunk_tids = 0;
    const eg__json *events = trace_events(&root);
    for (size_t i = 0; i < events->length; i++) {
        const eg__json *e = &events->items[i];
        if (!strcmp(string_field(e, "name"), "thread_name")) {
            const char *name = string_field(eg__json_get(e, "args"), "name");
            if (!strcmp(name, "the main thread")) main_named = true;
            assert_true(!strcmp(name, "the main thread") || !strncmp(name, "eagle pool ", 11));
            if (n_named < 64) named[n_named++] = number_field(e, "tid");
        }
        if (!strcmp(string_field(e, "name"), "chunk")) {
            chunk = true;
            if (n_chunk_tids < 64) chunk_tids[n_chunk_tids++] = number_field(e, "tid");
        }
    }
    assert_true(main_named);
    assert_true(chunk);
    for (int i = 0; i < n_chunk_tids; i++) {
        bool found = false;
        for (int k = 0; k < n_named; k++) found = found || named[k] == chunk_tids[i];
        assert_true(found);
    }
    const eg__json *other = eg__json_get(&root, "otherData");
    assert_true(number_field(other, "dropped_events") == 0);
    eg__json_free(&root);
    eg_profiler_set_thread_name("main");
    assert_int_equal(eg_set_num_threads(original_threads), EG_OK);
}

/* ---- several user threads ------------------------------------------------------------------ */

enum { N_USER_THREADS = 4, OPS_PER_THREAD = 200 };

static void *user_thread(void *arg) {
    int index = (int)(intptr_t)arg;
    char name[32];
    snprintf(name, sizeof name, "user %d", index);
    eg_profiler_set_thread_name(name);
    eg_scope_begin();
    eg_tensor *a = eg_ones(EG_DTYPE_F32, 1, (int64_t[]){64});
    bool ok = a != NULL;
    eg_profiler_range_push("work");
    for (int i = 0; i < OPS_PER_THREAD; i++) {
        eg_scope_begin();
        ok = ok && eg_mul(eg_add(a, a), a) != NULL;
        eg_scope_end();
    }
    eg_profiler_range_pop();
    eg_scope_end();
    return ok ? arg : NULL;
}

static void test_user_threads(void **state) {
    (void)state;
    assert_int_equal(eg_profiler_start(EG_PROFILE_TRACE), EG_OK);
    pthread_t threads[N_USER_THREADS];
    for (int i = 0; i < N_USER_THREADS; i++)
        assert_int_equal(pthread_create(&threads[i], NULL, user_thread, (void *)(intptr_t)(i + 1)),
                         0);
    /* reading while they record is allowed */
    eg_profiler_summary summary;
    assert_int_equal(eg_profiler_stats(&summary, NULL, 0, NULL), EG_OK);
    assert_true(summary.running);
    for (int i = 0; i < N_USER_THREADS; i++) {
        void *result;
        assert_int_equal(pthread_join(threads[i], &result), 0);
        assert_true(result == (void *)(intptr_t)(i + 1));
    }
    assert_int_equal(eg_profiler_stop(), EG_OK);
    int n;
    eg_profiler_entry *entries = all_entries(&summary, &n);
    assert_int_equal(calls_of(entries, n, "add"), N_USER_THREADS * OPS_PER_THREAD);
    assert_int_equal(calls_of(entries, n, "mul"), N_USER_THREADS * OPS_PER_THREAD);
    const eg_profiler_entry *work = find_entry(entries, n, "work", true);
    assert_true(work && work->calls == N_USER_THREADS);
    assert_true(summary.n_threads >= N_USER_THREADS);
    free(entries);
    /* the exited threads' results are in the trace, named */
    eg__json root;
    load_trace(&root);
    int named = 0;
    const eg__json *events = trace_events(&root);
    for (size_t i = 0; i < events->length; i++) {
        const eg__json *e = &events->items[i];
        if (!strcmp(string_field(e, "name"), "thread_name") &&
            !strncmp(string_field(eg__json_get(e, "args"), "name"), "user ", 5))
            named++;
    }
    assert_int_equal(named, N_USER_THREADS);
    eg__json_free(&root);
    /* the next start frees the exited threads' buffers */
    assert_int_equal(eg_profiler_start(EG_PROFILE_OPS), EG_OK);
    assert_int_equal(eg_profiler_stop(), EG_OK);
    assert_int_equal(eg_profiler_stats(&summary, NULL, 0, NULL), EG_OK);
    assert_int_equal(summary.n_threads, 0);
}

/* Starting and stopping while other threads run ops: never a crash or a race. */
static void *busy_thread(void *arg) {
    atomic_int *stop = arg;
    eg_scope_begin();
    eg_tensor *a = eg_ones(EG_DTYPE_F32, 1, (int64_t[]){16});
    while (!atomic_load(stop)) {
        eg_scope_begin();
        eg_profiler_range_push("busy");
        eg_add(a, a);
        eg_profiler_range_pop();
        eg_scope_end();
    }
    eg_scope_end();
    return NULL;
}

static void test_start_stop_while_busy(void **state) {
    (void)state;
    atomic_int stop = 0;
    pthread_t threads[2];
    for (int i = 0; i < 2; i++)
        assert_int_equal(pthread_create(&threads[i], NULL, busy_thread, &stop), 0);
    for (int round = 0; round < 20; round++) {
        assert_int_equal(eg_profiler_start(round % 2 ? EG_PROFILE_TRACE : EG_PROFILE_OPS), EG_OK);
        usleep(200);
        if (round % 3 == 0) eg_profiler_reset();
        assert_int_equal(eg_profiler_stop(), EG_OK);
        assert_int_equal(eg_profiler_stats(NULL, NULL, 0, NULL), EG_OK);
    }
    atomic_store(&stop, 1);
    for (int i = 0; i < 2; i++) assert_int_equal(pthread_join(threads[i], NULL), 0);
}

/* EG_PROFILE_CPU_TIME: a range that sleeps costs no CPU time, one that computes does; the trace
 * keeps wall-clock spans; the report says which clock its times are. */
static void test_cpu_time(void **state) {
    (void)state;
    eg_tensor *a = eg_ones(EG_DTYPE_F32, 1, (int64_t[]){4});
    assert_int_equal(eg_profiler_start(EG_PROFILE_CPU_TIME | EG_PROFILE_TRACE), EG_OK);
    assert_int_equal(eg_profiler_flags(),
                     (unsigned)(EG_PROFILE_OPS | EG_PROFILE_TRACE | EG_PROFILE_CPU_TIME));
    assert_int_equal(eg_profiler_range_push("sleeping"), EG_OK);
    assert_non_null(eg_add(a, a));
    usleep(30000);
    assert_int_equal(eg_profiler_range_pop(), EG_OK);
    assert_int_equal(eg_profiler_range_push("busy"), EG_OK);
    volatile double sink = 0;
    for (double start = thread_cpu_seconds(); thread_cpu_seconds() - start < 0.02;) sink += 1;
    (void)sink;
    assert_int_equal(eg_profiler_range_pop(), EG_OK);
    assert_int_equal(eg_profiler_stop(), EG_OK);
    eg_profiler_summary summary;
    int n;
    eg_profiler_entry *entries = all_entries(&summary, &n);
    const eg_profiler_entry *sleeping = find_entry(entries, n, "sleeping", true);
    const eg_profiler_entry *busy = find_entry(entries, n, "busy", true);
    assert_non_null(sleeping);
    assert_non_null(busy);
    assert_true(sleeping->total_seconds < 0.01); /* the 30 ms asleep are not counted */
    assert_true(busy->total_seconds >= 0.019);   /* the 20 ms of computing are */
    assert_true(summary.wall_seconds >= 0.049);  /* the session itself is wall time */
    assert_int_equal(calls_of(entries, n, "add"), 1);
    free(entries);
    eg__json root;
    load_trace(&root);
    const eg__json *span = find_event(&root, "sleeping", 'X');
    assert_non_null(span);
    assert_true(number_field(span, "dur") >= 30000); /* microseconds, wall clock */
    eg__json_free(&root);
    char *text = NULL;
    size_t size = 0;
    FILE *out = open_memstream(&text, &size);
    assert_non_null(out);
    assert_int_equal(eg_profiler_report(out, 0), EG_OK);
    fclose(out);
    assert_non_null(strstr(text, "CPU time of the calling thread"));
    free(text);
}

int main(int argc, char **argv) {
    if (argc > 1) cmocka_set_test_filter(argv[1]);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_off_records_nothing, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_trace_marks_approximations, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_counts_of_a_known_sequence, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_ranges_nest, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_range_misuse, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_session_misuse, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_pause_resume, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_report, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_trace_contents, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_user_threads, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_start_stop_while_busy, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_cpu_time, case_setup, case_teardown),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    eg_profiler_reset();
    eg_shutdown();
    return failed;
}
