/* bench_amx [N [M K]]: a first bf16 GEMM on AMX tiles, C (M x N f32) = A (M x K bf16) . B (K x N
 * bf16), both row-major, to learn what the format costs before issue 20's kernels: 2 x 2
 * accumulator tiles (32 x 32 of C) kept over all of k, A packed into 1 KiB tiles (16 rows x 32
 * bf16), B into AMX's pair layout (k pairs interleaved per column), packing in every call into
 * kept buffers. Prints GFLOP/s (best of 7 rounds by thread CPU time, packing included) and the
 * worst error against an f64 reference of the bf16 inputs, in units of k 2^-24 sum |a b|.
 * Figures: bench/RESULTS.md, "Issue 20, groundwork". x86-64 Linux with AMX-BF16 only. */
#define _GNU_SOURCE
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/cpu_features.h"
#include "eagle.h"

#if defined(__x86_64__) && defined(__linux__)
#include <immintrin.h>

typedef struct tile_config {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tile_config;

enum { STEP = 32 }; /* bf16 per tile row: one k step of tdpbf16ps */

/* B (k x n) into 16-column panels, each kpad / 2 pair-rows of (col 0..15) x (k even, k odd). */
__attribute__((target("avx512f,avx512bw,avx512vl"))) static void
pack_b(const uint16_t *b, int64_t ldb, int64_t k, int64_t n, int64_t kpad, uint16_t *out) {
    const __m512i interleave =
        _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, 6,
                         21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    for (int64_t p = 0; p < (n + 15) / 16; p++) {
        uint16_t *o = out + p * kpad * 16;
        int64_t col0 = p * 16, cols = n - col0 < 16 ? n - col0 : 16;
        __mmask16 valid = (__mmask16)((1u << cols) - 1);
        for (int64_t kk = 0; kk < kpad; kk += 2) {
            __m256i r0 = kk < k ? _mm256_maskz_loadu_epi16(valid, b + kk * ldb + col0)
                                : _mm256_setzero_si256();
            __m256i r1 = kk + 1 < k ? _mm256_maskz_loadu_epi16(valid, b + (kk + 1) * ldb + col0)
                                    : _mm256_setzero_si256();
            __m512i both = _mm512_inserti64x4(_mm512_castsi256_si512(r0), r1, 1);
            _mm512_storeu_si512(o + kk / 2 * 32, _mm512_permutexvar_epi16(interleave, both));
        }
    }
}

/* A (m x k) into tiles: 16-row block r, k step s at out + (r * steps + s) * 512. */
static void pack_a(const uint16_t *a, int64_t lda, int64_t m, int64_t k, int64_t mpad, int64_t kpad,
                   uint16_t *out) {
    int64_t steps = kpad / STEP;
    for (int64_t i = 0; i < mpad; i++)
        for (int64_t s = 0; s < steps; s++) {
            uint16_t *o = out + (i / 16 * steps + s) * 512 + i % 16 * STEP;
            int64_t left = i < m ? k - s * STEP : 0;
            int64_t valid = left < 0 ? 0 : left > STEP ? STEP : left;
            if (valid) memcpy(o, a + i * lda + s * STEP, (size_t)valid * 2);
            memset(o + valid, 0, (size_t)(STEP - valid) * 2);
        }
}

static uint16_t *packed_a, *packed_b;
static size_t packed_a_bytes, packed_b_bytes;

static bool reserve(uint16_t **buffer, size_t *bytes, size_t need) {
    if (need <= *bytes) return true;
    free(*buffer);
    *buffer = aligned_alloc(64, (need + 63) / 64 * 64);
    *bytes = *buffer ? need : 0;
    return *buffer != NULL;
}

__attribute__((target("amx-tile,amx-bf16,avx512f,avx512bw,avx512vl"))) static bool
gemm_bf16(int64_t m, int64_t n, int64_t k, const uint16_t *a, const uint16_t *b, float *c) {
    int64_t kpad = (k + STEP - 1) / STEP * STEP, mpad = (m + 31) / 32 * 32;
    int64_t npad = (n + 31) / 32 * 32;
    if (!reserve(&packed_a, &packed_a_bytes, (size_t)(mpad * kpad * 2)) ||
        !reserve(&packed_b, &packed_b_bytes, (size_t)(npad * kpad * 2)))
        return false;
    pack_a(a, k, m, k, mpad, kpad, packed_a);
    pack_b(b, n, k, n, kpad, packed_b);
    tile_config config;
    memset(&config, 0, sizeof config);
    config.palette = 1;
    for (int t = 0; t < 8; t++) config.rows[t] = 16, config.colsb[t] = 64;
    _tile_loadconfig(&config);
    float edge[32 * 32];
    for (int64_t j = 0; j < npad; j += 32) {
        const uint16_t *b0 = packed_b + j / 16 * kpad * 16, *b1 = b0 + kpad * 16;
        for (int64_t i = 0; i < mpad; i += 32) {
            const uint16_t *a0 = packed_a + i / 16 * kpad * 16, *a1 = a0 + kpad * 16;
            bool inside = i + 32 <= m && j + 32 <= n;
            float *out = inside ? c + i * n + j : edge;
            int64_t ld = inside ? n : 32;
            _tile_zero(0);
            _tile_zero(1);
            _tile_zero(2);
            _tile_zero(3);
            for (int64_t kk = 0; kk < kpad; kk += STEP) {
                _tile_loadd(4, a0 + kk * 16, 64);
                _tile_loadd(5, a1 + kk * 16, 64);
                _tile_loadd(6, b0 + kk * 16, 64);
                _tile_loadd(7, b1 + kk * 16, 64);
                _tile_dpbf16ps(0, 4, 6);
                _tile_dpbf16ps(1, 4, 7);
                _tile_dpbf16ps(2, 5, 6);
                _tile_dpbf16ps(3, 5, 7);
            }
            _tile_stored(0, out, ld * 4);
            _tile_stored(1, out + 16, ld * 4);
            _tile_stored(2, out + 16 * ld, ld * 4);
            _tile_stored(3, out + 16 * ld + 16, ld * 4);
            if (!inside)
                for (int64_t r = 0; r < 32 && i + r < m; r++)
                    for (int64_t q = 0; q < 32 && j + q < n; q++)
                        c[(i + r) * n + j + q] = edge[r * 32 + q];
        }
    }
    _tile_release();
    return true;
}

static double thread_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int main(int argc, char **argv) {
    const char *why;
    if (!eg__cpu_amx_usable(&why)) { /* asks Linux for the tile state, as the library will */
        printf("bench_amx: no usable AMX-BF16 tiles here (%s)\n", why);
        return 0;
    }
    int64_t n = argc > 1 ? atoll(argv[1]) : 1024, m = argc > 2 ? atoll(argv[2]) : n;
    int64_t k = argc > 3 ? atoll(argv[3]) : n;
    if (n < 1 || m < 1 || k < 1) return 2;
    uint16_t *a = malloc((size_t)(m * k) * 2), *b = malloc((size_t)(k * n) * 2);
    float *c = malloc((size_t)(m * n) * 4);
    if (!a || !b || !c) return 1;
    srand(1);
    float *af = malloc((size_t)(m * k) * 4), *bf = malloc((size_t)(k * n) * 4);
    if (!af || !bf) return 1;
    for (int64_t i = 0; i < m * k; i++) af[i] = (float)rand() / (float)RAND_MAX - 0.5f;
    for (int64_t i = 0; i < k * n; i++) bf[i] = (float)rand() / (float)RAND_MAX - 0.5f;
    eg_f32_to_bf16(af, a, (size_t)(m * k));
    eg_f32_to_bf16(bf, b, (size_t)(k * n));
    eg_bf16_to_f32(a, af, (size_t)(m * k)); /* the reference takes the inputs as rounded */
    eg_bf16_to_f32(b, bf, (size_t)(k * n));
    if (!gemm_bf16(m, n, k, a, b, c)) return 1;
    double worst = 0;
    for (int64_t i = 0; i<m; i += m> 64 ? 7 : 1)
        for (int64_t j = 0; j<n; j += n> 64 ? 5 : 1) {
            double sum = 0, magnitude = 0;
            for (int64_t p = 0; p < k; p++) {
                double term = (double)af[i * k + p] * bf[p * n + j];
                sum += term;
                magnitude += fabs(term);
            }
            double error = fabs(c[i * n + j] - sum) / (magnitude * 0x1p-24 * (double)k);
            if (error > worst) worst = error;
        }
    double best = 1e30, flops = 2.0 * (double)m * (double)n * (double)k;
    int reps = (int)(2e9 / flops) + 1;
    for (int round = 0; round < 7; round++) {
        double t0 = thread_seconds();
        for (int r = 0; r < reps; r++) gemm_bf16(m, n, k, a, b, c);
        double t = (thread_seconds() - t0) / reps;
        if (t < best) best = t;
    }
    printf("%lld x %lld x %lld: %.1f GFLOP/s (packing included), worst error %.3f of k 2^-24 "
           "sum|ab|\n",
           (long long)m, (long long)n, (long long)k, flops / best * 1e-9, worst);
    free(a);
    free(b);
    free(c);
    free(af);
    free(bf);
    return 0;
}
#else
int main(void) {
    puts("bench_amx: x86-64 Linux only");
    return 0;
}
#endif
