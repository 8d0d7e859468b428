/* One GEMM library on square sizes and the exact shapes of the two MLPs' training steps (f32,
 * row-major, C = op(A)·op(B)), 1 and 2 threads. Built once per library by run.sh (the libraries
 * export clashing BLAS symbols, so each gets its own binary), selected by -DLIB_<NAME>:
 *   LIB_EAGLE     eg_matmul_ex (whatever kernel Eagle picked; EG_MATMUL=openblas forces the
 *                 old OpenBLAS-per-tile path), op overhead included
 *   LIB_OPENBLAS  cblas_sgemm, OpenBLAS's own threading
 *   LIB_BLIS      bli_sgemm (BLIS, OpenMP build)
 *   LIB_XSMM      libxsmm_sgemm (JIT kernels for small shapes, BLAS fallback above them)
 *   LIB_DNNL      dnnl_sgemm (oneDNN, OpenMP build)
 * Prints one line per shape x thread count: median wall-clock GFLOP/s over the repetitions, the
 * same as % of the FMA peak of that many cores, and GFLOP/s per CPU-second of the process (the
 * machine is shared: this is what one core delivered while it ran; spinning threads count). The
 * peak is measured at start with the widest FMA the CPU has (fma_peak_now), unless --peak. */
#define _POSIX_C_SOURCE 200809L
#define _DEFAULT_SOURCE /* syscall(), for the AMX tile permission */
#include <dirent.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#if !defined(LIB_EAGLE) && !defined(LIB_OPENBLAS) && !defined(LIB_BLIS) && !defined(LIB_XSMM) &&   \
    !defined(LIB_DNNL)
#define LIB_EAGLE 1 /* the build's bench_gemm */
#endif

#if defined(LIB_EAGLE)
#include <eagle.h>
/* --dtype bf16|f16: Eagle's products of 16-bit operands (f32 accumulation, C in that dtype) */
static eg_dtype eagle_dtype = EG_DTYPE_F32;
#define LIB_NAME                                                                                   \
    (eagle_dtype == EG_DTYPE_BF16  ? "eagle-bf16"                                                  \
     : eagle_dtype == EG_DTYPE_F16 ? "eagle-f16"                                                   \
     : getenv("EG_MATMUL")         ? "eagle-openblas-tiles"                                        \
                                   : "eagle")
#elif defined(LIB_OPENBLAS)
#include <cblas.h>
#define LIB_NAME "openblas"
#elif defined(LIB_BLIS)
#include <blis.h>
#define LIB_NAME "blis"
#elif defined(LIB_XSMM)
#include <libxsmm.h>
#define LIB_NAME "libxsmm"
#elif defined(LIB_DNNL)
#include <dnnl.h>
#include <omp.h>
#define LIB_NAME "onednn"
#endif

/* GFLOP/s, f32 FMA, one core of this machine: measured at start (fma_peak_now) unless --peak */
static double peak_per_core;
static double sample_ms = 20;        /* work per timing sample at peak */

typedef struct shape {
    const char *name;
    int m, n, k;
    int ta, tb; /* op(A) = A^T / op(B) = B^T */
} shape;

static double now(clockid_t clock) {
    struct timespec t;
    clock_gettime(clock, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>

/* One core's f32 FMA peak right now, in GFLOP/s by CPU time, with the widest FMA the CPU has:
 * 16 independent chains of 16-wide (AVX-512) or 8-wide (AVX2) FMAs, best of 5 rounds. The
 * clock under load (and under AVX-512's own frequency licence) is what it is, so % of peak is
 * quoted against this figure, never an assumed one. */
#define FMA_CHAINS 16
__attribute__((target("avx512f"))) static float fma_chains_zmm(long n) {
    __m512 acc[FMA_CHAINS], x = _mm512_set1_ps(1.0000001f), y = _mm512_set1_ps(0.999999f);
    for (int i = 0; i < FMA_CHAINS; i++) acc[i] = _mm512_set1_ps((float)i);
    for (long k = 0; k < n; k++) {
#pragma GCC unroll 16
        for (int i = 0; i < FMA_CHAINS; i++) acc[i] = _mm512_fmadd_ps(acc[i], x, y);
    }
    __m512 sum = acc[0];
    for (int i = 1; i < FMA_CHAINS; i++) sum = _mm512_add_ps(sum, acc[i]);
    return _mm512_reduce_add_ps(sum);
}
__attribute__((target("avx2,fma"))) static float fma_chains_ymm(long n) {
    __m256 acc[FMA_CHAINS], x = _mm256_set1_ps(1.0000001f), y = _mm256_set1_ps(0.999999f);
    for (int i = 0; i < FMA_CHAINS; i++) acc[i] = _mm256_set1_ps((float)i);
    for (long k = 0; k < n; k++) {
#pragma GCC unroll 16
        for (int i = 0; i < FMA_CHAINS; i++) acc[i] = _mm256_fmadd_ps(acc[i], x, y);
    }
    __m256 sum = acc[0];
    for (int i = 1; i < FMA_CHAINS; i++) sum = _mm256_add_ps(sum, acc[i]);
    float lanes[8];
    _mm256_storeu_ps(lanes, sum);
    return lanes[0];
}

/* "zmm", "ymm" or NULL (no FMA: no peak to quote). */
static const char *widest_fma(void) {
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) return "zmm";
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "ymm";
    return NULL;
}

static double fma_peak_now(void) {
    const char *width = widest_fma();
    if (!width) return 0;
    int lanes = width[0] == 'z' ? 16 : 8;
    double best = 0;
    for (int round = 0; round < 5; round++) {
        long n = 20000000 / (lanes / 8);
        double t0 = now(CLOCK_THREAD_CPUTIME_ID);
        volatile float sink = lanes == 16 ? fma_chains_zmm(n) : fma_chains_ymm(n);
        (void)sink;
        double seconds = now(CLOCK_THREAD_CPUTIME_ID) - t0;
        double gflops = n * (double)FMA_CHAINS * lanes * 2 / seconds * 1e-9;
        if (gflops > best) best = gflops;
    }
    return best;
}

/* One core's AMX bf16 peak right now, in GFLOP/s by CPU time (0 where the CPU has no AMX-BF16 or
 * the kernel refuses the tile state): four independent 16 x 16 f32 accumulator tiles, each
 * tdpbf16ps 16 x 16 x 32 multiply-adds, best of 5 rounds. The figure bf16 GEMMs are quoted
 * against (issue 20). */
typedef struct amx_tile_config {
    unsigned char palette, start_row, reserved[14];
    unsigned short colsb[16];
    unsigned char rows[16];
} amx_tile_config;

__attribute__((target("amx-tile,amx-bf16"))) static void amx_chains(long n) {
    static unsigned short a[16 * 32] __attribute__((aligned(64))),
        b[16 * 32] __attribute__((aligned(64)));
    amx_tile_config config;
    memset(&config, 0, sizeof config);
    config.palette = 1;
    for (int t = 0; t < 8; t++) config.rows[t] = 16, config.colsb[t] = 64;
    _tile_loadconfig(&config);
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    _tile_loadd(4, a, 64);
    _tile_loadd(5, a, 64);
    _tile_loadd(6, b, 64);
    _tile_loadd(7, b, 64);
    for (long k = 0; k < n; k++) {
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
    }
    float c[16 * 16];
    _tile_stored(0, c, 64);
    _tile_release();
    volatile float sink = c[0];
    (void)sink;
}

static double amx_peak_now(void) {
    __builtin_cpu_init();
    unsigned eax, ebx, ecx, edx;
    if (!__builtin_cpu_supports("avx512f") || !__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) ||
        !(edx & (1u << 22)) || !(edx & (1u << 24)))
        return 0;
    /* Linux: ask for the tile data state (ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) */
    if (syscall(SYS_arch_prctl, 0x1023, 18) != 0) return 0;
    double best = 0;
    for (int round = 0; round < 5; round++) {
        long n = 2000000;
        double t0 = now(CLOCK_THREAD_CPUTIME_ID);
        amx_chains(n);
        double seconds = now(CLOCK_THREAD_CPUTIME_ID) - t0;
        double gflops = n * 4.0 * 16 * 16 * 32 * 2 / seconds * 1e-9;
        if (gflops > best) best = gflops;
    }
    return best;
}

static int compare(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void set_threads(int threads) {
#if defined(LIB_EAGLE)
    eg_set_num_threads(threads);
#elif defined(LIB_OPENBLAS)
    openblas_set_num_threads(threads);
#elif defined(LIB_BLIS)
    bli_thread_set_num_threads(threads);
#elif defined(LIB_DNNL)
    omp_set_num_threads(threads);
#else
    (void)threads;
#endif
}

#if defined(LIB_EAGLE)
static eg_tensor *ta_, *tb_;
#endif

/* Row-major A is m x k (k x m when ta), B is k x n (n x k when tb). */
static void setup(const shape *s, const float *a, const float *b) {
#if defined(LIB_EAGLE)
    int64_t sa[2] = {s->ta ? s->k : s->m, s->ta ? s->m : s->k};
    int64_t sb[2] = {s->tb ? s->n : s->k, s->tb ? s->k : s->n};
    ta_ = eg_tensor_from_data(a, EG_DTYPE_F32, 2, sa);
    tb_ = eg_tensor_from_data(b, EG_DTYPE_F32, 2, sb);
    if (eagle_dtype != EG_DTYPE_F32 && ta_ && tb_) {
        eg_tensor *a16 = eg_cast(ta_, eagle_dtype), *b16 = eg_cast(tb_, eagle_dtype);
        eg_release(ta_);
        eg_release(tb_);
        ta_ = a16, tb_ = b16;
    }
    if (!ta_ || !tb_) {
        fprintf(stderr, "gemm_bench: %s\n", eg_last_error());
        exit(1);
    }
#else
    (void)s, (void)a, (void)b;
#endif
}

static void teardown(void) {
#if defined(LIB_EAGLE)
    eg_release(ta_);
    eg_release(tb_);
#endif
}

static void gemm(const shape *s, const float *a, const float *b, float *c) {
#if defined(LIB_EAGLE)
    (void)a, (void)b, (void)c;
    eg_tensor *r = eg_matmul_ex(ta_, tb_, s->ta, s->tb);
    if (!r) {
        fprintf(stderr, "gemm_bench: %s\n", eg_last_error());
        exit(1);
    }
    eg_release(r);
#else
    int lda = s->ta ? s->m : s->k, ldb = s->tb ? s->k : s->n;
#endif
#if defined(LIB_OPENBLAS)
    cblas_sgemm(CblasRowMajor, s->ta ? CblasTrans : CblasNoTrans, s->tb ? CblasTrans : CblasNoTrans,
                s->m, s->n, s->k, 1.0f, a, lda, b, ldb, 0.0f, c, s->n);
#elif defined(LIB_BLIS)
    float one = 1.0f, zero = 0.0f;
    bli_sgemm(s->ta ? BLIS_TRANSPOSE : BLIS_NO_TRANSPOSE,
              s->tb ? BLIS_TRANSPOSE : BLIS_NO_TRANSPOSE, s->m, s->n, s->k, &one, (float *)a, lda,
              1, (float *)b, ldb, 1, &zero, c, s->n, 1);
#elif defined(LIB_XSMM)
    /* column-major: C^T = op(B)^T · op(A)^T */
    float one = 1.0f, zero = 0.0f;
    char tb = s->tb ? 'T' : 'N', ta = s->ta ? 'T' : 'N';
    libxsmm_blasint m = s->n, n = s->m, k = s->k, la = ldb, lb = lda, lc = s->n;
    libxsmm_sgemm(&tb, &ta, &m, &n, &k, &one, b, &la, a, &lb, &zero, c, &lc);
#elif defined(LIB_DNNL)
    dnnl_sgemm(s->ta ? 'T' : 'N', s->tb ? 'T' : 'N', s->m, s->n, s->k, 1.0f, a, lda, b, ldb, 0.0f,
               c, s->n);
#endif
}

/* The same small exact values in every run and for every library. */
static void fill_inputs(float *a, size_t na, float *b, size_t nb) {
    for (size_t i = 0; i < na; i++) a[i] = (float)((i * 7 + 3) % 17) / 17.0f - 0.5f;
    for (size_t i = 0; i < nb; i++) b[i] = (float)((i * 5 + 1) % 13) / 13.0f - 0.5f;
}

static void run(const shape *s, int threads, double min_seconds) {
    size_t na = (size_t)s->m * s->k, nb = (size_t)s->k * s->n, nc = (size_t)s->m * s->n;
    float *a = malloc(na * sizeof *a), *b = malloc(nb * sizeof *b), *c = malloc(nc * sizeof *c);
    fill_inputs(a, na, b, nb);
    setup(s, a, b);
    set_threads(threads);
    double flops = 2.0 * s->m * s->n * s->k;
    /* repetitions per sample: about sample_ms of work each */
    int reps = (int)(sample_ms * 1e-3 * peak_per_core * 1e9 / flops) + 1;
    for (int i = 0; i < reps; i++) gemm(s, a, b, c); /* warm up */
    double samples[64];
    int n_samples = 0;
    double cpu0 = now(CLOCK_PROCESS_CPUTIME_ID), wall0 = now(CLOCK_MONOTONIC);
    while (n_samples < 64 && (n_samples < 5 || now(CLOCK_MONOTONIC) - wall0 < min_seconds)) {
        double t0 = now(CLOCK_MONOTONIC);
        for (int i = 0; i < reps; i++) gemm(s, a, b, c);
        samples[n_samples++] = now(CLOCK_MONOTONIC) - t0;
    }
    double cpu = now(CLOCK_PROCESS_CPUTIME_ID) - cpu0;
    qsort(samples, (size_t)n_samples, sizeof *samples, compare);
    double wall = samples[n_samples / 2];
    double gflops = flops * reps / wall * 1e-9;
    double cpu_gflops = flops * reps * n_samples / cpu * 1e-9;
    printf("%-9s %-22s %5d %5d %5d  %s%s  %d  %8.1f  %5.1f%%  %8.1f  %5.1f%%\n", LIB_NAME, s->name,
           s->m, s->n, s->k, s->ta ? "T" : "N", s->tb ? "T" : "N", threads, gflops,
           100.0 * gflops / (peak_per_core * threads), cpu_gflops,
           100.0 * cpu_gflops / peak_per_core);
    fflush(stdout);
    teardown();
    free(a);
    free(b);
    free(c);
}

#if defined(LIB_EAGLE)
#include <cblas.h>
void openblas_set_num_threads(int n);

static double versus_peak;

/* Eagle's matmul and OpenBLAS's sgemm (which the library links anyway) on one shape in the same
 * process, alternating, one thread: the ratio of their best CPU times per call is the steadiest
 * comparison a shared machine allows. */
static void run_versus(const shape *s, double min_seconds) {
    size_t na = (size_t)s->m * s->k, nb = (size_t)s->k * s->n, nc = (size_t)s->m * s->n;
    float *a = malloc(na * sizeof *a), *b = malloc(nb * sizeof *b), *c = malloc(nc * sizeof *c);
    fill_inputs(a, na, b, nb);
    setup(s, a, b);
    eg_set_num_threads(1);
    openblas_set_num_threads(1);
    int lda = s->ta ? s->m : s->k, ldb = s->tb ? s->k : s->n;
    double flops = 2.0 * s->m * s->n * s->k, best[2] = {1e30, 1e30};
    int reps = (int)(5e-3 * peak_per_core * 1e9 / flops) + 1;
    for (int round = 0; round < 20; round++) {
        int blas = round % 2;
        double wall0 = now(CLOCK_MONOTONIC);
        while (now(CLOCK_MONOTONIC) - wall0 < min_seconds / 10) {
            double cpu0 = now(CLOCK_PROCESS_CPUTIME_ID);
            for (int i = 0; i < reps; i++) {
                if (blas)
                    cblas_sgemm(CblasRowMajor, s->ta ? CblasTrans : CblasNoTrans,
                                s->tb ? CblasTrans : CblasNoTrans, s->m, s->n, s->k, 1.0f, a, lda,
                                b, ldb, 0.0f, c, s->n);
                else
                    gemm(s, a, b, c);
            }
            double t = (now(CLOCK_PROCESS_CPUTIME_ID) - cpu0) / reps;
            if (t < best[blas]) best[blas] = t;
        }
    }
    printf("%-22s %5d %5d %5d  %s%s  eagle %6.1f (%3.0f%%)  openblas %6.1f (%3.0f%%) GFLOP/s (best "
           "CPU time; %% of the measured peak)  eagle/openblas %.2f\n",
           s->name, s->m, s->n, s->k, s->ta ? "T" : "N", s->tb ? "T" : "N", flops / best[0] * 1e-9,
           100 * flops / best[0] * 1e-9 / versus_peak, flops / best[1] * 1e-9,
           100 * flops / best[1] * 1e-9 / versus_peak, best[1] / best[0]);
    fflush(stdout);
    teardown();
    free(a);
    free(b);
    free(c);
}

/* CPU seconds each thread of this process has used (utime + stime of
 * /proc/self/task/<tid>/stat, in clock ticks), by thread id: tids[i], seconds[i], up to max
 * threads; returns how many. */
static int thread_cpu(long *tids, double *seconds, int max) {
    DIR *dir = opendir("/proc/self/task");
    int n = 0;
    struct dirent *entry;
    while (dir && n < max && (entry = readdir(dir))) {
        if (entry->d_name[0] == '.') continue;
        char path[300], text[1024];
        snprintf(path, sizeof path, "/proc/self/task/%s/stat", entry->d_name);
        FILE *f = fopen(path, "r");
        if (!f) continue;
        size_t len = fread(text, 1, sizeof text - 1, f);
        fclose(f);
        text[len] = 0;
        char *p = strrchr(text, ')');
        unsigned long utime = 0, stime = 0;
        /* after ")": state, then fields 4..13, then utime (14) and stime (15) */
        if (p && sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &utime,
                        &stime) == 2) {
            tids[n] = atol(entry->d_name);
            seconds[n++] = (double)(utime + stime) / (double)sysconf(_SC_CLK_TCK);
        }
    }
    if (dir) closedir(dir);
    return n;
}

/* The 784-512-512-10 MLP's products of one training step (batch 128): three dense forwards
 * (fused bias + relu, relu, none) and the five backward products, repeated; 1 then 2 threads.
 * Prints CPU time per step of each thread: with 2 threads the busiest thread's time bounds the
 * step on an idle machine, so 1-thread total / 2-thread busiest is the speedup 2 cores give,
 * without needing the (shared) machine to be idle. */
static void run_mlp_step(double min_seconds) {
    static const int64_t shapes[3][2] = {{784, 512}, {512, 512}, {512, 10}};
    int64_t xs[2] = {128, 784};
    eg_tensor *x = eg_random_uniform(NULL, EG_DTYPE_F32, 2, xs, -1, 1), *w[3], *b[3], *h[4];
    for (int l = 0; l < 3; l++) {
        w[l] = eg_random_uniform(NULL, EG_DTYPE_F32, 2, shapes[l], -0.05, 0.05);
        b[l] = eg_random_uniform(NULL, EG_DTYPE_F32, 1, &shapes[l][1], -0.05, 0.05);
    }
    for (int threads = 1; threads <= 2; threads++) {
        eg_set_num_threads(threads);
        long before_tids[8], after_tids[8];
        double before[8] = {0}, after[8] = {0};
        int steps = 0;
        int n_before = thread_cpu(before_tids, before, 8);
        double wall0 = now(CLOCK_MONOTONIC);
        while (now(CLOCK_MONOTONIC) - wall0 < min_seconds || steps < 20) {
            eg_scope_begin();
            h[0] = x;
            for (int l = 0; l < 3; l++)
                h[l + 1] =
                    eg_dense(h[l], w[l], b[l], l < 2 ? EG_ACTIVATION_RELU : EG_ACTIVATION_NONE);
            eg_tensor *g = h[3]; /* stands in for the loss gradient */
            for (int l = 2; l >= 0; l--) {
                eg_matmul_ex(h[l], g, true, false);                /* dW = h^T . g */
                if (l > 0) g = eg_matmul_ex(g, w[l], false, true); /* dh = g . W^T */
            }
            eg_scope_end();
            steps++;
        }
        int n = thread_cpu(after_tids, after, 8);
        double total = 0, busiest = 0;
        for (int i = 0; i < n; i++) {
            double used = after[i];
            for (int j = 0; j < n_before; j++)
                if (before_tids[j] == after_tids[i]) used -= before[j];
            total += used;
            if (used > busiest) busiest = used;
        }
        printf("784-512-512-10 products, %d thread(s): %d steps, CPU per step %.2f ms total, "
               "%.2f ms busiest thread\n",
               threads, steps, 1e3 * total / steps, 1e3 * busiest / steps);
    }
}

/* The Dense layer's forward pass fused (eg_dense: bias and relu in the GEMM's epilogue) and
 * unfused (matmul, add, relu: two more passes over the output), CPU time per call. */
static void run_dense(int m, int k, int n, int threads, double min_seconds) {
    eg_set_num_threads(threads);
    int64_t xs[2] = {m, k}, ws[2] = {k, n}, bs[1] = {n};
    eg_tensor *x = eg_random_uniform(NULL, EG_DTYPE_F32, 2, xs, -1, 1);
    eg_tensor *w = eg_random_uniform(NULL, EG_DTYPE_F32, 2, ws, -0.1, 0.1);
    eg_tensor *b = eg_random_uniform(NULL, EG_DTYPE_F32, 1, bs, -0.1, 0.1);
    double per_call[2] = {0, 0};
    for (int round = 0; round < 6; round++) { /* alternate to share the machine's noise */
        int fused = round % 2;
        double cpu0 = now(CLOCK_PROCESS_CPUTIME_ID), wall0 = now(CLOCK_MONOTONIC);
        int calls = 0;
        while (now(CLOCK_MONOTONIC) - wall0 < min_seconds || calls < 10) {
            eg_scope_begin();
            eg_tensor *y =
                fused ? eg_dense(x, w, b, EG_ACTIVATION_RELU) : eg_relu(eg_add(eg_matmul(x, w), b));
            if (!y) {
                fprintf(stderr, "gemm_bench: %s\n", eg_last_error());
                exit(1);
            }
            eg_scope_end();
            calls++;
        }
        double t = (now(CLOCK_PROCESS_CPUTIME_ID) - cpu0) / calls;
        if (round < 2 || t < per_call[fused]) per_call[fused] = t;
    }
    printf("dense relu %dx%dx%d, %d thread(s): unfused %.1f us, fused %.1f us CPU per call "
           "(best of 3): fused/unfused %.3f\n",
           m, k, n, threads, 1e6 * per_call[0], 1e6 * per_call[1], per_call[1] / per_call[0]);
    eg_release(x);
    eg_release(w);
    eg_release(b);
}
#endif

#if defined(LIB_EAGLE)
/* One product of the shape, nothing else: for cachegrind's simulated cache misses and perf, whose
 * counts per multiply-add then compare across sizes (bench/RESULTS.md, GEMM). */
static void run_once(const shape *s) {
    size_t na = (size_t)s->m * s->k, nb = (size_t)s->k * s->n;
    float *a = malloc(na * sizeof *a), *b = malloc(nb * sizeof *b);
    if (!a || !b) {
        fprintf(stderr, "gemm_bench: out of memory\n");
        exit(1);
    }
    fill_inputs(a, na, b, nb);
    set_threads(1);
    setup(s, a, b);
    double t0 = now(CLOCK_PROCESS_CPUTIME_ID);
    gemm(s, a, b, NULL);
    double seconds = now(CLOCK_PROCESS_CPUTIME_ID) - t0;
    printf("%d x %d x %d, one product, 1 thread: %.3f ms CPU\n", s->m, s->n, s->k, seconds * 1e3);
    teardown();
    free(a);
    free(b);
}
#endif

int main(int argc, char **argv) {
    double min_seconds = 0.3;
    const char *threads_list = "1,2";
    int square_only = 0, mlp_only = 0, text_only = 0, versus = 0, mode = 0;
    shape once = {"once", 0, 0, 0, 0, 0};
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--seconds") && i + 1 < argc)
            min_seconds = atof(argv[++i]);
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc)
            threads_list = argv[++i];
        else if (!strcmp(argv[i], "--sample-ms") && i + 1 < argc)
            sample_ms = atof(argv[++i]);
        else if (!strcmp(argv[i], "--peak") && i + 1 < argc)
            peak_per_core = atof(argv[++i]);
        else if (!strcmp(argv[i], "--peak-only"))
            mode = 4;
        else if (!strcmp(argv[i], "--square"))
            square_only = 1;
        else if (!strcmp(argv[i], "--mlp"))
            mlp_only = 1;
        else if (!strcmp(argv[i], "--text"))
            text_only = 1;
#if defined(LIB_EAGLE)
        else if (!strcmp(argv[i], "--versus"))
            versus = 1;
        else if (!strcmp(argv[i], "--dtype") && i + 1 < argc)
            eagle_dtype = !strcmp(argv[++i], "bf16") ? EG_DTYPE_BF16
                          : !strcmp(argv[i], "f16")  ? EG_DTYPE_F16
                                                     : EG_DTYPE_F32;
        else if (!strcmp(argv[i], "--mlp-step"))
            mode = 1;
        else if (!strcmp(argv[i], "--dense"))
            mode = 2;
        else if (!strcmp(argv[i], "--once") && i + 1 < argc &&
                 sscanf(argv[++i], "%d,%d,%d", &once.m, &once.n, &once.k) == 3 && once.m > 0 &&
                 once.n > 0 && once.k > 0)
            mode = 3;
#endif
        else {
            fprintf(stderr,
                    "usage: %s [--seconds S] [--threads 1,2] [--peak GFLOPS] [--sample-ms MS] "
                    "[--square|--mlp|--text|--peak-only]"
                    " [--versus|--mlp-step|--dense|--once M,N,K|--dtype bf16|f16 (Eagle's "
                    "binary)]\n",
                    argv[0]);
            return 2;
        }
    }
    bool peak_given = peak_per_core > 0;
    if (peak_per_core <= 0 && mode != 3) peak_per_core = fma_peak_now();
    if (peak_per_core <= 0) peak_per_core = 1; /* no FMA: %peak is then meaningless */
    if (mode != 3)
        printf("# one core's f32 FMA peak: %.1f GFLOP/s (%s; --peak overrides)\n", peak_per_core,
               widest_fma() ? widest_fma() : "no FMA");
    if (mode == 4) {
        double amx = amx_peak_now();
        if (amx > 0)
            printf("# one core's AMX bf16 peak: %.1f GFLOP/s (tdpbf16ps, 4 accumulator tiles)\n",
                   amx);
        else
            printf("# AMX bf16: not available (no AMX-BF16, or the kernel refused the tiles)\n");
        return 0;
    }
#if defined(LIB_EAGLE)
    if (eagle_dtype == EG_DTYPE_BF16 && !peak_given) { /* % of what the bf16 hardware does */
        double amx = amx_peak_now();
        if (amx > 0) {
            printf("# one core's AMX bf16 peak: %.1f GFLOP/s: the %%peak columns below are of it\n",
                   amx);
            peak_per_core = amx;
        }
    }
    if (eagle_dtype != EG_DTYPE_F32) printf("# %s products: %s\n", LIB_NAME, eg_blas_info());
#endif
    (void)peak_given;
    static const shape mlp[] = {
        /* 784-64-10, batch 32 */
        {"s.fwd1 x.W1", 32, 64, 784, 0, 0},
        {"s.fwd2 h.W2", 32, 10, 64, 0, 0},
        {"s.dW2 hT.dY", 64, 10, 32, 1, 0},
        {"s.dh dY.W2T", 32, 64, 10, 0, 1},
        {"s.dW1 xT.dH", 784, 64, 32, 1, 0},
        /* 784-512-512-10, batch 128 */
        {"L.fwd1 x.W1", 128, 512, 784, 0, 0},
        {"L.fwd2 h1.W2", 128, 512, 512, 0, 0},
        {"L.fwd3 h2.W3", 128, 10, 512, 0, 0},
        {"L.dW3 h2T.dY", 512, 10, 128, 1, 0},
        {"L.dh2 dY.W3T", 128, 512, 10, 0, 1},
        {"L.dW2 h1T.dH2", 512, 512, 128, 1, 0},
        {"L.dh1 dH2.W2T", 128, 512, 512, 0, 1},
        {"L.dW1 xT.dH1", 784, 512, 128, 1, 0},
    };
    /* bench/text's models, batch 32 x 128: the Transformer's (d 256, feed-forward 1024) and the
     * LSTM's (512 units) products of a training step */
    static const shape text[] = {
        {"T.qkv x.Wqkv", 4096, 768, 256, 0, 0}, {"T.ff1 x.W1", 4096, 1024, 256, 0, 0},
        {"T.ff2 h.W2", 4096, 256, 1024, 0, 0},  {"T.dW1 xT.dH", 256, 1024, 4096, 1, 0},
        {"T.dx dH.W1T", 4096, 256, 1024, 0, 1}, {"L.step h.U", 32, 2048, 512, 0, 0},
        {"L.dh dZ.UT", 32, 512, 2048, 0, 0},    {"L.dU HT.dZ", 512, 2048, 4096, 1, 0},
    };
#if defined(LIB_EAGLE)
    if (mode == 1) {
        run_mlp_step(min_seconds);
        return 0;
    }
    if (mode == 2) { /* the two MLPs' hidden layers, batch 32 and 128 */
        run_dense(32, 784, 64, 1, min_seconds);
        run_dense(128, 784, 512, 1, min_seconds);
        run_dense(128, 512, 512, 1, min_seconds);
        return 0;
    }
    if (mode == 3) {
        run_once(&once);
        return 0;
    }
    if (versus) {
        versus_peak = peak_per_core;
        printf("one core's %s FMA peak now: %.1f GFLOP/s (CPU time)\n", widest_fma(),
               versus_peak);
        for (int n = 64; n <= 2048 && !mlp_only && !text_only; n *= 2) {
            char name[32];
            snprintf(name, sizeof name, "square %d", n);
            shape s = {name, n, n, n, 0, 0};
            run_versus(&s, min_seconds);
        }
        for (size_t i = 0; i < sizeof mlp / sizeof *mlp && !square_only && !text_only; i++)
            run_versus(&mlp[i], min_seconds);
        for (size_t i = 0; i < sizeof text / sizeof *text && text_only; i++)
            run_versus(&text[i], min_seconds);
        printf("one core's %s FMA peak at the end: %.1f GFLOP/s\n", widest_fma(), fma_peak_now());
        return 0;
    }
#endif
    (void)mode, (void)versus, (void)once;
    printf("%-9s %-22s %5s %5s %5s  %s  %s  %8s  %6s  %8s  %6s\n", "library", "shape", "M", "N",
           "K", "op", "t", "GFLOP/s", "%peak", "GF/cpu-s", "%peak");
    for (const char *t = threads_list; *t;) {
        int threads = atoi(t);
        if (!mlp_only)
            for (int n = 64; n <= 2048; n *= 2) {
                char name[32];
                snprintf(name, sizeof name, "square %d", n);
                shape s = {name, n, n, n, 0, 0};
                run(&s, threads, min_seconds);
            }
        if (!square_only)
            for (size_t i = 0; i < sizeof mlp / sizeof *mlp; i++)
                run(&mlp[i], threads, min_seconds);
        const char *comma = strchr(t, ',');
        if (!comma) break;
        t = comma + 1;
    }
    return 0;
}
