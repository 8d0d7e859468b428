/* bench_amx: the library's low-precision GEMM paths (backend/cpu/gemm_lowp.c), each forced in
 * turn, beside Eagle's f32 GEMM and the AMX bf16 peak measured in the same run, one thread:
 *   bench_amx [--dtype bf16|f16] [--paths amx,avx512-bf16,convert,portable,f32] [--seconds S]
 *             [--mlp] [N ...]
 * Square N x N x N products (default 256 512 1024 2048), or with --mlp the 784-512-512-10 MLP's
 * products at batch 128 (forward x·W, backward G·W^T and X^T·G). C is the operands' dtype (f32
 * with --c-f32), packing included. Prints the median GFLOP/s by thread CPU time over samples of ~20
 * ms, and that as % of the AMX bf16 peak (tdpbf16ps on four accumulator tiles, no loads) and of the
 * f32 FMA peak. Figures: bench/RESULTS.md (issue 20). */
#define _GNU_SOURCE
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/cpu/gemm.h"
#include "backend/cpu/gemm_lowp.h"
#include "base/cpu_features.h"
#include "eagle.h"

static double thread_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

#if defined(__x86_64__)
#include <immintrin.h>

typedef struct tile_config {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tile_config;

__attribute__((target("amx-tile,amx-bf16"))) static void amx_chains(long n) {
    static uint16_t a[16 * 32] __attribute__((aligned(64))),
        b[16 * 32] __attribute__((aligned(64)));
    tile_config config;
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

static double amx_peak(void) {
    if (!eg__cpu_amx_usable(NULL)) return 0;
    double best = 0;
    for (int round = 0; round < 5; round++) {
        long n = 1000000;
        double t0 = thread_seconds();
        amx_chains(n);
        double gflops = n * 4.0 * 16 * 16 * 32 * 2 / (thread_seconds() - t0) * 1e-9;
        if (gflops > best) best = gflops;
    }
    return best;
}

__attribute__((target("avx512f"))) static float fma_chains(long n) {
    __m512 acc[16], x = _mm512_set1_ps(1.0000001f), y = _mm512_set1_ps(0.999999f);
    for (int i = 0; i < 16; i++) acc[i] = _mm512_set1_ps((float)i);
    for (long k = 0; k < n; k++) {
#pragma GCC unroll 16
        for (int i = 0; i < 16; i++) acc[i] = _mm512_fmadd_ps(acc[i], x, y);
    }
    __m512 sum = acc[0];
    for (int i = 1; i < 16; i++) sum = _mm512_add_ps(sum, acc[i]);
    return _mm512_reduce_add_ps(sum);
}

static double fma_peak(void) {
    if (!eg__cpu_has_avx512()) return 0;
    double best = 0;
    for (int round = 0; round < 5; round++) {
        long n = 10000000;
        double t0 = thread_seconds();
        volatile float sink = fma_chains(n);
        (void)sink;
        double gflops = n * 16.0 * 16 * 2 / (thread_seconds() - t0) * 1e-9;
        if (gflops > best) best = gflops;
    }
    return best;
}
#else
static double amx_peak(void) {
    return 0;
}
static double fma_peak(void) {
    return 0;
}
#endif

typedef struct shape {
    const char *name;
    int64_t m, n, k;
    bool ta, tb; /* op(A) = A^T, op(B) = B^T: the operand stored transposed */
} shape;

static int compare(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double amx_gflops, fma_gflops, min_seconds = 0.3;
static bool c_f32; /* --c-f32: C in f32 instead of the operands' dtype */

/* path -1: Eagle's f32 GEMM on the same values. */
static void run(const shape *s, eg_dtype dtype, int path) {
    size_t na = (size_t)(s->m * s->k), nb = (size_t)(s->k * s->n), nc = (size_t)(s->m * s->n);
    float *af = malloc(na * 4), *bf = malloc(nb * 4), *cf = malloc(nc * 4);
    uint16_t *a = malloc(na * 2), *b = malloc(nb * 2), *c = malloc(nc * 2);
    if (!af || !bf || !cf || !a || !b || !c) exit(1);
    for (size_t i = 0; i < na; i++) af[i] = (float)((i * 7 + 3) % 17) / 17.0f - 0.5f;
    for (size_t i = 0; i < nb; i++) bf[i] = (float)((i * 5 + 1) % 13) / 13.0f - 0.5f;
    if (dtype == EG_DTYPE_BF16) {
        eg_f32_to_bf16(af, a, na);
        eg_f32_to_bf16(bf, b, nb);
    } else {
        eg_f32_to_f16(af, a, na);
        eg_f32_to_f16(bf, b, nb);
    }
    int64_t a_row = s->ta ? 1 : s->k, a_col = s->ta ? s->m : 1;
    int64_t b_row = s->tb ? 1 : s->n, b_col = s->tb ? s->k : 1;
    eg__gemm_lowp g = {.dtype = dtype,
                       .m = s->m,
                       .n = s->n,
                       .k = s->k,
                       .a = a,
                       .a_row = a_row,
                       .a_col = a_col,
                       .b = b,
                       .b_row = b_row,
                       .b_col = b_col,
                       .c_dtype = c_f32 ? EG_DTYPE_F32 : dtype,
                       .c = c_f32 ? (void *)cf : (void *)c,
                       .ldc = s->n,
                       .activation = EG__OP_COUNT,
                       .path = path < 0 ? EG__GEMM_LOWP_AUTO : (eg__lowp_path)path};
    eg__gemm_f32 g32 = {.m = s->m,
                        .n = s->n,
                        .k = s->k,
                        .a = af,
                        .a_row = a_row,
                        .a_col = a_col,
                        .b = bf,
                        .b_row = b_row,
                        .b_col = b_col,
                        .c = cf,
                        .ldc = s->n,
                        .activation = EG__OP_COUNT};
    const char *name = path < 0 ? "f32" : eg__gemm_lowp_path_name((eg__lowp_path)path);
    if (path < 0 ? !eg__gemm_f32_available() : !eg__gemm_lowp_usable(g.path, dtype)) {
        printf("%-12s %-10s %-14s skipped (not on this CPU / EG_CPU)\n", name, s->name, "");
        goto done;
    }
    double flops = 2.0 * (double)s->m * (double)s->n * (double)s->k;
    int reps = (int)(20e-3 * 500e9 / flops) + 1;
    double samples[64], start = thread_seconds();
    int count = 0;
    for (int round = -1; round < 64; round++) {
        double t0 = thread_seconds();
        for (int r = 0; r < reps; r++) {
            bool ok = path < 0 ? eg__gemm_f32_range(&g32, 0, s->m, 0, s->n)
                               : eg__gemm_lowp_range(&g, 0, s->m, 0, s->n);
            if (!ok) {
                printf("failed: %s\n", eg_last_error());
                exit(1);
            }
        }
        if (round >= 0) samples[count++] = (thread_seconds() - t0) / reps;
        if (count >= 5 && thread_seconds() - start > min_seconds) break;
    }
    qsort(samples, (size_t)count, sizeof *samples, compare);
    double gflops = flops / samples[count / 2] * 1e-9, best = flops / samples[0] * 1e-9;
    printf("%-12s %-10s %5lld %5lld %5lld %s%s %8.1f GFLOP/s  %5.1f%% of AMX peak  %5.1f%% of f32 "
           "peak  (best %.1f)\n",
           name, s->name, (long long)s->m, (long long)s->n, (long long)s->k, s->ta ? "T" : "N",
           s->tb ? "T" : "N", gflops, amx_gflops > 0 ? 100 * gflops / amx_gflops : 0,
           fma_gflops > 0 ? 100 * gflops / fma_gflops : 0, best);
    fflush(stdout);
done:
    free(af), free(bf), free(cf), free(a), free(b), free(c);
}

int main(int argc, char **argv) {
    eg_dtype dtype = EG_DTYPE_BF16;
    const char *paths = "amx,avx512-bf16,convert,f32";
    bool mlp = false;
    int64_t sizes[16][3];
    int n_sizes = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--dtype") && i + 1 < argc) {
            dtype = !strcmp(argv[++i], "f16") ? EG_DTYPE_F16 : EG_DTYPE_BF16;
        } else if (!strcmp(argv[i], "--paths") && i + 1 < argc) {
            paths = argv[++i];
        } else if (!strcmp(argv[i], "--seconds") && i + 1 < argc) {
            min_seconds = atof(argv[++i]);
        } else if (!strcmp(argv[i], "--c-f32")) {
            c_f32 = true;
        } else if (!strcmp(argv[i], "--mlp")) {
            mlp = true;
        } else if (atoll(argv[i]) > 0 && n_sizes < 16) { /* N or MxNxK */
            long long m = 0, n = 0, k = 0;
            if (sscanf(argv[i], "%lldx%lldx%lld", &m, &n, &k) != 3) m = n = k = atoll(argv[i]);
            sizes[n_sizes][0] = m, sizes[n_sizes][1] = n, sizes[n_sizes++][2] = k;
        } else {
            fprintf(stderr,
                    "usage: %s [--dtype bf16|f16] [--paths amx,avx512-bf16,convert,portable,f32] "
                    "[--seconds S] [--mlp] [--c-f32] [N | MxNxK ...]\n",
                    argv[0]);
            return 2;
        }
    }
    eg_set_num_threads(1); /* also stops OpenBLAS's spinning server threads (matmul.c) */
    amx_gflops = amx_peak();
    fma_gflops = fma_peak();
    printf("# one core: AMX bf16 peak %.1f GFLOP/s, f32 FMA (zmm) peak %.1f GFLOP/s; EG_CPU level "
           "%s; %s products: %s\n",
           amx_gflops, fma_gflops, eg__cpu_level_name(eg__cpu_active_level()), eg_dtype_name(dtype),
           eg__gemm_lowp_path(dtype));
    shape shapes[16];
    int n_shapes = 0;
    if (mlp) {
        shape m[] = {{"fwd1", 128, 512, 784, false, false}, {"fwd2", 128, 512, 512, false, false},
                     {"dx2", 128, 512, 512, false, true},   {"dw1", 784, 512, 128, true, false},
                     {"dw2", 512, 512, 128, true, false},   {"fwd3", 128, 10, 512, false, false},
                     {"dx3", 128, 512, 10, false, true},    {"dw3", 512, 10, 128, true, false}};
        for (size_t i = 0; i < sizeof m / sizeof *m; i++) shapes[n_shapes++] = m[i];
    } else {
        static const int64_t defaults[] = {256, 512, 1024, 2048};
        if (!n_sizes)
            for (int i = 0; i < 4; i++, n_sizes++)
                sizes[i][0] = sizes[i][1] = sizes[i][2] = defaults[i];
        for (int i = 0; i < n_sizes; i++)
            shapes[n_shapes++] = (shape){
                sizes[i][0] == sizes[i][1] && sizes[i][1] == sizes[i][2] ? "square" : "shape",
                sizes[i][0],
                sizes[i][1],
                sizes[i][2],
                false,
                false};
    }
    for (int s = 0; s < n_shapes; s++) {
        char list[256];
        snprintf(list, sizeof list, "%s", paths);
        for (char *save = NULL, *p = strtok_r(list, ",", &save); p;
             p = strtok_r(NULL, ",", &save)) {
            int path = -2;
            if (!strcmp(p, "f32")) path = -1;
            for (int q = 1; q < EG__GEMM_LOWP_PATH_COUNT; q++)
                if (!strcmp(p, eg__gemm_lowp_path_name((eg__lowp_path)q))) path = q;
            if (path == -2) {
                fprintf(stderr, "bench_amx: unknown path '%s'\n", p);
                return 2;
            }
            run(&shapes[s], dtype, path);
        }
    }
    return 0;
}
