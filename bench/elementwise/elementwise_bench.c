/* Elementwise ops and reductions against memory bandwidth: add, mul, exp, relu, sum (plus the
 * other vector-math ops and the broadcast / transposed layouts) on 1K ... 64M f32 elements, with
 * a STREAM copy and triad measured in the same run, so the ratios are side by side.
 *   bench_elementwise [--threads N] [--min-elems N] [--max-elems N] [--seconds S] [--wall]
 *                     [--ops add,exp,...] [--no-layouts] [--tsv FILE] [--dtype f32|bf16|f16]
 *   bench_elementwise --vector-math   (our vector math against SLEEF's, ns per element, and the
 *                                      fast-math variants against the exact functions)
 *   bench_elementwise [--threads N] --softmax   (f32 softmax rows, ns per element)
 *   bench_elementwise [--threads N] --dense     (dense + sigmoid / tanh, exact and fast math)
 * Bytes moved: 12 per element for binary ops (two reads, one write), 8 for unary ops, 4 for a full
 * sum (STREAM's convention: no write-allocate traffic counted), in f32; with --dtype bf16 or f16
 * the same ops on 16-bit tensors (6, 4 and 2 bytes per element), plus the casts from and to f32
 * (cast_in: f32 -> dtype, cast_out: dtype -> f32, 6 bytes per element); the op names in the TSV
 * then carry the dtype (add.bf16). exp_fast, tanh_fast, sigmoid_fast and gelu_fast are the ops
 * inside a fast-math region (eg_fast_math_begin; f32 only: other dtypes compute exactly). Each
 * figure is the median of 7 timings of a loop that runs at
 * least S / 7 seconds (default S = 0.35). */
#define _DEFAULT_SOURCE /* madvise */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "api/internal.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/vecmath.h"
#include "device/device.h"
#include "eagle.h"

/* SLEEF (Debian libsleef-dev), when the bench was linked with it: the per-element cost of our
 * vector math against SLEEF's on in-cache arrays. sleef.h declares its 256-bit functions only
 * when compiled with -mavx, so the few used are declared here. */
#ifdef EG_BENCH_SLEEF
#include <immintrin.h>
__m256 Sleef_cinz_expf8_u10avx(__m256);
__m256 Sleef_cinz_logf8_u10avx(__m256);
__m256 Sleef_cinz_tanhf8_u10avx(__m256);
__m256 Sleef_cinz_tanhf8_u35avx(__m256);
__m256 Sleef_cinz_erfcf8_u15avx(__m256);
__m256 Sleef_cinz_log1pf8_u10avx(__m256);
__m256 Sleef_expf8_u10avx2(__m256);
__m256 Sleef_logf8_u10avx2(__m256);
__m256 Sleef_tanhf8_u10avx2(__m256);
__m256 Sleef_tanhf8_u35avx2(__m256);
__m256 Sleef_erfcf8_u15avx2(__m256);
__m256 Sleef_log1pf8_u10avx2(__m256);
#endif

/* The machine is shared: time is process CPU time divided by the thread count (memory stalls
 * count as CPU time; waiting for a core does not). --wall switches to wall-clock time. */
static int threads = 1;
static bool wall_clock;
static double now(void) {
    struct timespec t;
    clock_gettime(wall_clock ? CLOCK_MONOTONIC : CLOCK_PROCESS_CPUTIME_ID, &t);
    return ((double)t.tv_sec + 1e-9 * (double)t.tv_nsec) / (wall_clock ? 1 : threads);
}

static int compare_doubles(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

enum { SAMPLES = 7 };
static double seconds_per_sample = 0.05;

/* Median seconds per call of body(context). */
static double measure(void (*body)(void *), void *context) {
    body(context); /* warm-up: caches, the allocator's pool, page faults */
    int iterations = 1;
    for (;;) {
        double start = now();
        for (int i = 0; i < iterations; i++) body(context);
        double elapsed = now() - start;
        if (elapsed >= seconds_per_sample || iterations >= (1 << 24)) break;
        iterations *= elapsed > 0 ? (int)(seconds_per_sample / elapsed) / 2 + 2 : 16;
    }
    double samples[SAMPLES];
    for (int s = 0; s < SAMPLES; s++) {
        double start = now();
        for (int i = 0; i < iterations; i++) body(context);
        samples[s] = (now() - start) / iterations;
    }
    qsort(samples, SAMPLES, sizeof samples[0], compare_doubles);
    return samples[SAMPLES / 2];
}

/* ---- STREAM copy and triad (double, as STREAM), split over pthreads like the pool does ---- */

typedef struct stream_job {
    double *a, *b, *c;
    long begin, end;
    int triad;
} stream_job;

static void *stream_worker(void *arg) {
    const stream_job *j = arg;
    if (j->triad)
        for (long i = j->begin; i < j->end; i++) j->a[i] = j->b[i] + 3.0 * j->c[i];
    else
        for (long i = j->begin; i < j->end; i++) j->c[i] = j->a[i];
    return NULL;
}

typedef struct stream_context {
    double *a, *b, *c;
    long n;
    int threads, triad;
} stream_context;

static void stream_body(void *arg) {
    const stream_context *s = arg;
    pthread_t ids[64];
    stream_job jobs[64];
    for (int t = 0; t < s->threads; t++) {
        jobs[t] = (stream_job){
            s->a, s->b, s->c, s->n * t / s->threads, s->n * (t + 1) / s->threads, s->triad};
        if (t > 0) pthread_create(&ids[t], NULL, stream_worker, &jobs[t]);
    }
    stream_worker(&jobs[0]);
    for (int t = 1; t < s->threads; t++) pthread_join(ids[t], NULL);
}

/* A STREAM array on the same kind of pages as Eagle's tensors (huge pages unless EG_HUGEPAGES=0,
 * src/device/host.c), so that the ratios compare like with like. */
static double *stream_array(long n) {
    size_t huge = (size_t)2 << 20, bytes = (sizeof(double) * (size_t)n + huge - 1) & ~(huge - 1);
    double *p = aligned_alloc(huge, bytes);
    if (p && eg__host_huge_pages()) (void)madvise(p, bytes, MADV_HUGEPAGE);
    return p;
}

/* ---- Eagle ops ---- */

typedef enum {
    OP_ADD,
    OP_MUL,
    OP_EXP,
    OP_RELU,
    OP_SUM,
    OP_TANH,
    OP_SIGMOID,
    OP_GELU,
    OP_LOG,
    OP_SOFTPLUS,
    OP_RELU_BACKWARD,
    OP_CAST_IN,
    OP_CAST_OUT,
    OP_EXP_FAST, /* the ops again inside a fast-math region (eg_fast_math_begin) */
    OP_TANH_FAST,
    OP_SIGMOID_FAST,
    OP_GELU_FAST,
    OP_COUNT
} op_kind;
static const char *const op_names[] = {
    "add",      "mul",      "exp",       "relu",         "sum",           "tanh",
    "sigmoid",  "gelu",     "log",       "softplus",     "relu_backward", "cast_in",
    "cast_out", "exp_fast", "tanh_fast", "sigmoid_fast", "gelu_fast"};
/* Elements of the op's dtype read and written per element (the casts: f32 counted apart). */
static const int op_elements[] = {3, 3, 2, 2, 1, 2, 2, 2, 2, 2, 3, 1, 1, 2, 2, 2, 2};

/* The dtype of the ops (--dtype) and its element size. */
static eg_dtype dtype = EG_DTYPE_F32;

/* Bytes op moves per element in dtype. */
static double op_bytes(op_kind op) {
    double bytes = op_elements[op] * (double)eg_dtype_size(dtype);
    return op == OP_CAST_IN || op == OP_CAST_OUT ? bytes + 4 : bytes;
}

typedef struct op_context {
    op_kind op;
    const eg_tensor *x, *y, *x32;
    int n_axes;
    int axes[2];
} op_context;

static void op_body(void *arg) {
    const op_context *c = arg;
    eg_scope_begin();
    eg_tensor *r = NULL;
    switch (c->op) {
    case OP_ADD:
        r = eg_add(c->x, c->y);
        break;
    case OP_MUL:
        r = eg_mul(c->x, c->y);
        break;
    case OP_EXP:
        r = eg_exp(c->x);
        break;
    case OP_RELU:
        r = eg_relu(c->x);
        break;
    case OP_SUM:
        r = eg_sum(c->x, c->n_axes, c->axes, false);
        break;
    case OP_TANH:
        r = eg_tanh(c->x);
        break;
    case OP_SIGMOID:
        r = eg_sigmoid(c->x);
        break;
    case OP_GELU:
        r = eg_gelu(c->x);
        break;
    case OP_LOG: /* of |x|: the inputs are uniform in [-4, 4] */
        r = eg_log(c->y);
        break;
    case OP_SOFTPLUS:
        r = eg_softplus(c->x);
        break;
    case OP_RELU_BACKWARD: {
        static const eg__attrs no_attrs;
        const eg_tensor *in[2] = {c->x, c->y};
        r = eg__execute(EG__OP_RELU_BACKWARD, 2, in, &no_attrs);
        break;
    }
    case OP_CAST_IN: /* x32: the f32 values the dtype's were cast from */
        r = eg_cast(c->x32, dtype);
        break;
    case OP_CAST_OUT:
        r = eg_cast(c->x, EG_DTYPE_F32);
        break;
    case OP_EXP_FAST:
    case OP_TANH_FAST:
    case OP_SIGMOID_FAST:
    case OP_GELU_FAST:
        eg_fast_math_begin();
        r = c->op == OP_EXP_FAST       ? eg_exp(c->x)
            : c->op == OP_TANH_FAST    ? eg_tanh(c->x)
            : c->op == OP_SIGMOID_FAST ? eg_sigmoid(c->x)
                                       : eg_gelu(c->x);
        eg_fast_math_end();
        break;
    case OP_COUNT:
        break;
    }
    if (!r) {
        fprintf(stderr, "bench_elementwise: %s failed: %s\n", op_names[c->op], eg_last_error());
        exit(1);
    }
    eg_scope_end();
}

static FILE *tsv;

static void report(const char *op, const char *layout, long n, int n_threads, double seconds,
                   double bytes, double triad) {
    double rate = bytes / seconds / 1e9;
    char name[64];
    snprintf(name, sizeof name, "%s%s%s", op, dtype == EG_DTYPE_F32 ? "" : ".",
             dtype == EG_DTYPE_F32 ? "" : eg_dtype_name(dtype));
    printf("%-18s %-12s %10ld %9.1f us %8.2f GB/s %6.0f%% %7.3f Gelem/s\n", name, layout, n,
           seconds * 1e6, rate, 100 * rate / triad, (double)n / seconds / 1e9);
    if (tsv)
        fprintf(tsv, "eagle\t%s\t%s\t%ld\t%d\t%.9g\t%.4f\n", name, layout, n, n_threads, seconds,
                rate);
}

/* ---- vector math: ns per element, ours (baseline and AVX2) and SLEEF's ---- */

enum { VM_N = 4096 };
static float vm_in[VM_N], vm_out[VM_N];

typedef struct vm_context {
    eg__cpu_level level;
    eg__vecmath_fn fn;
} vm_context;

static void vm_body(void *arg) {
    const vm_context *c = arg;
    eg__vecmath_f32_at(c->level, c->fn, VM_N, vm_out, vm_in);
}

#ifdef EG_BENCH_SLEEF
#pragma GCC diagnostic ignored "-Wpsabi"
typedef __m256 (*sleef_fn)(__m256);
__attribute__((target("avx2,fma"))) static void sleef_body(void *arg) {
    sleef_fn f = *(sleef_fn *)arg;
    for (int i = 0; i < VM_N; i += 8) _mm256_storeu_ps(vm_out + i, f(_mm256_loadu_ps(vm_in + i)));
}
#endif

static void vector_math_costs(void) {
    for (int i = 0; i < VM_N; i++) vm_in[i] = ((float)i / VM_N - 0.5f) * 20.0f;
    printf("vector math, ns per element (4096 in-cache f32 in [-10, 10], one thread):\n");
    double ns[EG__VECMATH_COUNT][EG__CPU_LEVEL_COUNT] = {{0}};
    for (int fn = 0; fn < EG__VECMATH_COUNT; fn++) {
        printf("  %-12s", eg__vecmath_name(fn));
        for (int level = 0; level < EG__CPU_LEVEL_COUNT; level++) {
            vm_context c = {(eg__cpu_level)level, fn};
            if (level > (int)eg__cpu_best_level()) {
                printf("  eagle %s  (not on this CPU)", eg__cpu_level_name(c.level));
                continue;
            }
            ns[fn][level] = measure(vm_body, &c) / VM_N * 1e9;
            printf("  eagle %s %6.3f", eg__cpu_level_name(c.level), ns[fn][level]);
        }
        printf("\n");
    }
    /* the fast-math variants (eg_fast_math_begin) beside the exact functions */
    static const eg__vecmath_fn pairs[][2] = {{EG__VECMATH_EXP, EG__VECMATH_EXP_FAST},
                                              {EG__VECMATH_TANH, EG__VECMATH_TANH_FAST},
                                              {EG__VECMATH_SIGMOID, EG__VECMATH_SIGMOID_FAST},
                                              {EG__VECMATH_GELU, EG__VECMATH_GELU_FAST}};
    printf("fast math, ns per element exact / fast (speed-up):\n");
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
        printf("  %-8s", eg__vecmath_name(pairs[i][0]));
        for (int level = 0; level <= (int)eg__cpu_best_level(); level++) {
            double exact = ns[pairs[i][0]][level], fast = ns[pairs[i][1]][level];
            printf("  %s %6.3f / %6.3f (%.2fx)", eg__cpu_level_name((eg__cpu_level)level), exact,
                   fast, exact / fast);
        }
        printf("\n");
    }
#ifdef EG_BENCH_SLEEF
    struct {
        const char *name;
        sleef_fn f;
    } sleef[] = {
        {"expf8_u10 cinz avx (same bits on SSE2/AVX)", Sleef_cinz_expf8_u10avx},
        {"logf8_u10 cinz avx", Sleef_cinz_logf8_u10avx},
        {"tanhf8_u10 cinz avx", Sleef_cinz_tanhf8_u10avx},
        {"tanhf8_u35 cinz avx", Sleef_cinz_tanhf8_u35avx},
        {"erfcf8_u15 cinz avx (gelu needs it)", Sleef_cinz_erfcf8_u15avx},
        {"log1pf8_u10 cinz avx (softplus needs it)", Sleef_cinz_log1pf8_u10avx},
        {"expf8_u10 avx2 (FMA)", Sleef_expf8_u10avx2},
        {"logf8_u10 avx2 (FMA)", Sleef_logf8_u10avx2},
        {"tanhf8_u10 avx2 (FMA)", Sleef_tanhf8_u10avx2},
        {"tanhf8_u35 avx2 (FMA)", Sleef_tanhf8_u35avx2},
        {"erfcf8_u15 avx2 (FMA)", Sleef_erfcf8_u15avx2},
        {"log1pf8_u10 avx2 (FMA)", Sleef_log1pf8_u10avx2},
    };
    for (size_t i = 0; i < sizeof sleef / sizeof sleef[0]; i++)
        if (eg__cpu_has_avx2_fma())
            printf("  SLEEF %-42s %6.3f\n", sleef[i].name,
                   measure(sleef_body, &sleef[i].f) / VM_N * 1e9);
#else
    printf("  (SLEEF not linked: install libsleef-dev and rebuild to compare)\n");
#endif
}

/* ---- softmax rows: ns per element of f32 softmax, log_softmax and the fused cross-entropy ---- */

typedef struct softmax_context {
    int kind; /* 0 softmax, 1 log_softmax, 2 sparse softmax cross-entropy */
    const eg_tensor *x, *labels;
} softmax_context;

static void softmax_body(void *arg) {
    const softmax_context *c = arg;
    eg_scope_begin();
    eg_tensor *r = c->kind == 0   ? eg_softmax(c->x, -1)
                   : c->kind == 1 ? eg_log_softmax(c->x, -1)
                                  : eg_sparse_softmax_cross_entropy(c->x, c->labels);
    if (!r) {
        fprintf(stderr, "bench_elementwise: softmax failed: %s\n", eg_last_error());
        exit(1);
    }
    eg_scope_end();
}

static void softmax_costs(void) {
    static const char *const kinds[] = {"softmax", "log_softmax", "sparse_xent"};
    const int64_t shapes[][2] = {{8192, 10}, {256, 1000}};
    printf("f32 softmax rows, ns per element (logits normal(0, 3), this thread count):\n");
    eg_generator *gen = eg_generator_new(1);
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        eg_scope_begin();
        eg_tensor *x = eg_random_normal(gen, EG_DTYPE_F32, 2, shapes[s], 0, 3);
        eg_tensor *labels =
            eg_cast(eg_mul_scalar(eg_random_uniform(gen, EG_DTYPE_F32, 1, shapes[s], 0, 0.999),
                                  (double)shapes[s][1]),
                    EG_DTYPE_I32);
        for (int kind = 0; kind < 3; kind++) {
            softmax_context c = {kind, x, labels};
            printf("  %-12s (%lld, %lld) %7.3f\n", kinds[kind], (long long)shapes[s][0],
                   (long long)shapes[s][1],
                   measure(softmax_body, &c) / (double)(shapes[s][0] * shapes[s][1]) * 1e9);
        }
        eg_scope_end();
    }
    eg_generator_free(gen);
}

/* ---- dense with a sigmoid or tanh epilogue, exact and in a fast-math region ---- */

typedef struct dense_context {
    const eg_tensor *x, *w, *b;
    eg_activation activation;
    bool fast;
} dense_context;

static void dense_body(void *arg) {
    const dense_context *c = arg;
    eg_scope_begin();
    if (c->fast) eg_fast_math_begin();
    eg_tensor *y = eg_dense(c->x, c->w, c->b, c->activation);
    if (c->fast) eg_fast_math_end();
    if (!y) {
        fprintf(stderr, "bench_elementwise: dense failed: %s\n", eg_last_error());
        exit(1);
    }
    eg_scope_end();
}

/* ns per output element of f32 dense (M, K) x (K, N) + bias, exact against fast activation. */
static void dense_costs(void) {
    static const int64_t shapes[][3] = {{32, 64, 256}, {256, 512, 512}, {1024, 256, 1024}};
    static const eg_activation acts[] = {EG_ACTIVATION_SIGMOID, EG_ACTIVATION_TANH};
    eg_generator *gen = eg_generator_new(3);
    printf("dense, ns per output element exact / fast (speed-up), %d thread(s):\n", threads);
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        eg_scope_begin();
        int64_t xs[2] = {shapes[s][0], shapes[s][1]}, ws[2] = {shapes[s][1], shapes[s][2]};
        int64_t bs[1] = {shapes[s][2]};
        eg_tensor *x = eg_random_uniform(gen, EG_DTYPE_F32, 2, xs, -1, 1);
        eg_tensor *w = eg_random_uniform(gen, EG_DTYPE_F32, 2, ws, -0.2, 0.2);
        eg_tensor *b = eg_random_uniform(gen, EG_DTYPE_F32, 1, bs, -1, 1);
        double outputs = (double)(shapes[s][0] * shapes[s][2]);
        for (int a = 0; a < 2; a++) {
            dense_context exact = {x, w, b, acts[a], false}, fast = {x, w, b, acts[a], true};
            double e = measure(dense_body, &exact) / outputs * 1e9;
            double f = measure(dense_body, &fast) / outputs * 1e9;
            printf("  (%lld, %lld) x (%lld, %lld) %-8s %8.3f / %8.3f (%.2fx)\n",
                   (long long)shapes[s][0], (long long)shapes[s][1], (long long)shapes[s][1],
                   (long long)shapes[s][2], eg_activation_name(acts[a]), e, f, e / f);
        }
        eg_scope_end();
    }
    eg_generator_free(gen);
}

/* Whether op is in the comma-separated list (NULL: every op). */
static bool selected(const char *list, const char *op) {
    if (!list) return true;
    size_t length = strlen(op);
    for (const char *p = list; p; p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL)
        if (!strncmp(p, op, length) && (p[length] == ',' || p[length] == '\0')) return true;
    return false;
}

int main(int argc, char **argv) {
    long min_elems = 1024, max_elems = 64L << 20;
    const char *ops = NULL;
    bool layouts = true;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--threads") && i + 1 < argc)
            threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--max-elems") && i + 1 < argc)
            max_elems = atol(argv[++i]);
        else if (!strcmp(argv[i], "--min-elems") && i + 1 < argc)
            min_elems = atol(argv[++i]);
        else if (!strcmp(argv[i], "--ops") && i + 1 < argc)
            ops = argv[++i];
        else if (!strcmp(argv[i], "--no-layouts"))
            layouts = false;
        else if (!strcmp(argv[i], "--seconds") && i + 1 < argc)
            seconds_per_sample = atof(argv[++i]) / SAMPLES;
        else if (!strcmp(argv[i], "--vector-math")) {
            vector_math_costs();
            return 0;
        } else if (!strcmp(argv[i], "--dense")) {
            if (eg_set_num_threads(threads) != EG_OK) return 1;
            dense_costs();
            return 0;
        } else if (!strcmp(argv[i], "--softmax")) {
            if (eg_set_num_threads(threads) != EG_OK) return 1;
            softmax_costs();
            return 0;
        } else if (!strcmp(argv[i], "--wall"))
            wall_clock = true;
        else if (!strcmp(argv[i], "--tsv") && i + 1 < argc)
            tsv = fopen(argv[++i], "a");
        else if (!strcmp(argv[i], "--dtype") && i + 1 < argc) {
            const char *name = argv[++i];
            dtype = !strcmp(name, "bf16")  ? EG_DTYPE_BF16
                    : !strcmp(name, "f16") ? EG_DTYPE_F16
                                           : EG_DTYPE_F32;
            if (dtype == EG_DTYPE_F32 && strcmp(name, "f32")) {
                fprintf(stderr, "bench_elementwise: --dtype takes f32, bf16 or f16\n");
                return 2;
            }
        } else {
            fprintf(stderr,
                    "usage: bench_elementwise [--threads N] [--min-elems N] [--max-elems N] "
                    "[--seconds S] [--wall] [--ops add,exp,...] [--no-layouts] "
                    "[--tsv FILE] [--dtype f32|bf16|f16] | --vector-math | [--threads N] "
                    "--softmax | [--threads N] --dense\n");
            return 2;
        }
    }
    if (eg_set_num_threads(threads) != EG_OK) {
        fprintf(stderr, "bench_elementwise: %s\n", eg_last_error());
        return 1;
    }

    /* STREAM on arrays of 16M doubles (128 MiB each, far beyond the caches) */
    long stream_n = 16L << 20;
    stream_context s = {stream_array(stream_n),
                        stream_array(stream_n),
                        stream_array(stream_n),
                        stream_n,
                        threads,
                        0};
    if (!s.a || !s.b || !s.c) return 1;
    for (long i = 0; i < stream_n; i++) s.a[i] = 1, s.b[i] = 2, s.c[i] = 0;
    double copy = 16.0 * (double)stream_n / measure(stream_body, &s) / 1e9;
    s.triad = 1;
    double triad = 24.0 * (double)stream_n / measure(stream_body, &s) / 1e9;
    free(s.a), free(s.b), free(s.c);
    printf("threads %d: STREAM copy %.2f GB/s, triad %.2f GB/s (%% below is of triad; %s pages, as "
           "Eagle's tensors)\n",
           threads, copy, triad, eg__host_huge_pages() ? "huge" : "4 KiB");
    if (tsv) {
        fprintf(tsv, "stream\tcopy\t-\t%ld\t%d\t0\t%.4f\n", stream_n, threads, copy);
        fprintf(tsv, "stream\ttriad\t-\t%ld\t%d\t0\t%.4f\n", stream_n, threads, triad);
    }

    eg_generator *gen = eg_generator_new(1);
    for (long n = 1024; n <= max_elems; n *= 4) {
        if (n < min_elems) continue;
        eg_scope_begin();
        int64_t shape[1] = {n};
        eg_tensor *x32 = eg_random_uniform(gen, EG_DTYPE_F32, 1, shape, -4, 4);
        eg_tensor *x = eg_cast(x32, dtype);
        eg_tensor *y = eg_cast(eg_random_uniform(gen, EG_DTYPE_F32, 1, shape, -4, 4), dtype);
        for (int op = 0; op < OP_COUNT; op++) {
            if (!selected(ops, op_names[op])) continue;
            if ((op == OP_CAST_IN || op == OP_CAST_OUT) && dtype == EG_DTYPE_F32) continue;
            op_context c = {(op_kind)op, x, op == OP_LOG ? eg_abs(y) : y, x32, 1, {0, 0}};
            report(op_names[op], "contiguous", n, threads, measure(op_body, &c),
                   op_bytes((op_kind)op) * (double)n, triad);
        }
        eg_scope_end();
    }

    if (!layouts) {
        eg_generator_free(gen);
        if (tsv) fclose(tsv);
        return 0;
    }
    /* layouts on a square matrix of the largest size up to 16M elements */
    long side = 1;
    while (side * side * 4 <= (max_elems < (16L << 20) ? max_elems : (16L << 20))) side *= 2;
    long n = side * side;
    eg_scope_begin();
    int64_t square[2] = {side, side}, row[1] = {side}, column[2] = {side, 1};
    eg_tensor *x = eg_cast(eg_random_uniform(gen, EG_DTYPE_F32, 2, square, -4, 4), dtype);
    eg_tensor *y = eg_cast(eg_random_uniform(gen, EG_DTYPE_F32, 2, square, -4, 4), dtype);
    eg_tensor *r = eg_cast(eg_random_uniform(gen, EG_DTYPE_F32, 1, row, -4, 4), dtype);
    eg_tensor *col = eg_cast(eg_random_uniform(gen, EG_DTYPE_F32, 2, column, -4, 4), dtype);
    eg_tensor *xt = eg_transpose(x, 0, 1);
    op_context cases[] = {
        {OP_ADD, x, r, NULL, 0, {0, 0}},   /* row broadcast: (M, N) + (N) */
        {OP_ADD, x, col, NULL, 0, {0, 0}}, /* column broadcast: (M, N) + (M, 1) */
        {OP_ADD, xt, y, NULL, 0, {0, 0}},  /* a transposed view + contiguous */
        {OP_EXP, xt, NULL, NULL, 0, {0, 0}},
        {OP_SUM, x, NULL, NULL, 1, {0, 0}}, /* over rows: column sums */
        {OP_SUM, x, NULL, NULL, 1, {1, 0}}, /* over columns: row sums */
        {OP_SUM, x, NULL, NULL, 2, {0, 1}},
        {OP_SUM, xt, NULL, NULL, 1, {0, 0}},
    };
    const char *names[] = {"row-bcast", "col-bcast", "transposed", "transposed",
                           "axis0",     "axis1",     "all-2d",     "T-axis0"};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        double bytes = op_bytes(cases[i].op) * (double)n;
        report(op_names[cases[i].op], names[i], n, threads, measure(op_body, &cases[i]), bytes,
               triad);
    }
    eg_scope_end();
    eg_generator_free(gen);
    if (tsv) fclose(tsv);
    return 0;
}
