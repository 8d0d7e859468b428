/* int8 products: packing, activation quantization, the portable and AVX2 inner kernels and the
 * float epilogue (gemm_int8.h says what is computed and why every path gives the same bits). */
#include "backend/cpu/gemm_int8.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define EG_INT8_X86 1
#endif

#include "backend/cpu/kernels.h"
#include "backend/cpu/vecmath.h"
#include "base/cpu_features.h"
#include "base/error.h"

enum { ROWS = 4 }; /* rows of A per inner kernel call */

static atomic_bool force_portable;

void eg__int8_gemm_force_portable(bool portable) {
    atomic_store(&force_portable, portable);
}

/* ---- packing ---- */

eg_status eg__int8_weights_pack(const int8_t *w, int64_t k, int64_t n, int64_t row_stride,
                                eg__int8_weights *out) {
    memset(out, 0, sizeof *out);
    out->k = k;
    out->n = n;
    out->groups = (k + EG_INT8_GROUP - 1) / EG_INT8_GROUP;
    out->panels = (n + EG_INT8_PANEL - 1) / EG_INT8_PANEL;
    size_t bytes = (size_t)(out->panels * out->groups * EG_INT8_PANEL * EG_INT8_GROUP);
    out->packed = aligned_alloc(64, bytes ? (bytes + 63) / 64 * 64 : 64);
    out->column_sums = calloc((size_t)(out->panels * EG_INT8_PANEL) + 1, sizeof(int32_t));
    if (!out->packed || !out->column_sums) {
        eg__int8_weights_free(out);
        return eg__error(EG_ERR_OUT_OF_MEMORY,
                         "int8 product: out of memory packing a (%lld, %lld) weight", (long long)k,
                         (long long)n);
    }
    memset(out->packed, 0, bytes);
    bool seven_bit = true;
    for (int64_t p = 0; p < out->panels; p++) {
        int8_t *panel = out->packed + p * out->groups * EG_INT8_PANEL * EG_INT8_GROUP;
        for (int64_t kk = 0; kk < k; kk++) {
            const int8_t *row = w + kk * row_stride;
            int8_t *group = panel + (kk / EG_INT8_GROUP) * EG_INT8_PANEL * EG_INT8_GROUP;
            for (int64_t j = 0; j < EG_INT8_PANEL && p * EG_INT8_PANEL + j < n; j++) {
                int8_t value = row[p * EG_INT8_PANEL + j];
                group[j * EG_INT8_GROUP + kk % EG_INT8_GROUP] = value;
                out->column_sums[p * EG_INT8_PANEL + j] += value;
                if (value > 63 || value < -63) seven_bit = false;
            }
        }
    }
    out->seven_bit = seven_bit;
    return EG_OK;
}

void eg__int8_weights_free(eg__int8_weights *w) {
    free(w->packed);
    free(w->column_sums);
    w->packed = NULL;
    w->column_sums = NULL;
}

/* ---- activations ---- */

eg__int8_activation eg__int8_activation_of_range(float lo, float hi) {
    if (!(lo < 0)) lo = 0; /* also NaN */
    if (!(hi > 0)) hi = 0;
    if (!isfinite(lo) || !isfinite(hi) || hi - lo <= 0) {
        if (!isfinite(lo)) lo = -3.4e38f;
        if (!isfinite(hi)) hi = 3.4e38f;
        if (hi - lo <= 0) return (eg__int8_activation){1.0f, 0};
    }
    float scale = (float)(((double)hi - (double)lo) / 255.0);
    if (!(scale > 0) || !isfinite(scale)) scale = 1.0f;
    long zero = lrint(-(double)lo / scale);
    if (zero < 0) zero = 0;
    if (zero > 255) zero = 255;
    return (eg__int8_activation){scale, (int32_t)zero};
}

void eg__int8_min_max(const float *x, int64_t n, float *lo, float *hi) {
    float a = 0, b = 0;
    if (n > 0) {
        a = INFINITY;
        b = -INFINITY;
        for (int64_t i = 0; i < n; i++) {
            a = x[i] < a ? x[i] : a; /* NaN compares false: skipped */
            b = x[i] > b ? x[i] : b;
        }
        if (a > b) a = b = 0; /* all NaN */
    }
    *lo = a;
    *hi = b;
}

#ifdef EG_INT8_X86
/* Elements [0, n - n % 32) of eg__int8_quantize, 32 at a time: the portable loop's steps in the
 * same IEEE operations (a multiply and an add, not an FMA; max with 0 first, so NaN becomes 0 as
 * there), so the same bytes. */
__attribute__((target("avx2"))) static int64_t
quantize_avx2(const float *x, int64_t n, float inverse, float zero, uint8_t *out) {
    const __m256 scale = _mm256_set1_ps(inverse), shift = _mm256_set1_ps(zero);
    const __m256 low = _mm256_setzero_ps(), high = _mm256_set1_ps(255.0f);
    const __m256 magic = _mm256_set1_ps(12582912.0f);
    /* packs interleave 128-bit lanes: this puts the 32 bytes back in element order */
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m256i q[4];
        for (int k = 0; k < 4; k++) {
            __m256 v = _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(x + i + 8 * k), scale), shift);
            v = _mm256_min_ps(_mm256_max_ps(v, low), high); /* max(NaN, 0) is 0 */
            v = _mm256_sub_ps(_mm256_add_ps(v, magic), magic);
            q[k] = _mm256_cvttps_epi32(v);
        }
        __m256i words = _mm256_packus_epi32(q[0], q[1]), words2 = _mm256_packus_epi32(q[2], q[3]);
        __m256i bytes = _mm256_packus_epi16(words, words2);
        _mm256_storeu_si256((__m256i *)(out + i), _mm256_permutevar8x32_epi32(bytes, order));
    }
    return i;
}
#endif

void eg__int8_quantize(const float *x, int64_t n, int64_t n_padded, eg__int8_activation q,
                       uint8_t *out) {
    /* Multiplying by the reciprocal (not dividing), clamping first and rounding by adding and
     * subtracting 1.5 * 2^23 (round to nearest even, exact below 2^22) keep the loop free of
     * calls: libm's nearbyintf was half of the quantization's time. The same steps on every
     * path, so the same bytes. */
    const float inverse = 1.0f / q.scale, zero = (float)q.zero, magic = 12582912.0f;
    int64_t i = 0;
#ifdef EG_INT8_X86
    if (!atomic_load(&force_portable) && eg__cpu_active_level() >= EG__CPU_AVX2)
        i = quantize_avx2(x, n, inverse, zero, out);
#endif
    for (; i < n; i++) {
        float v = x[i] * inverse + zero;
        v = v > 255.0f ? 255.0f : v;
        v = v >= 0.0f ? v : 0.0f; /* NaN becomes 0 */
        out[i] = (uint8_t)((v + magic) - magic);
    }
    memset(out + n, (int)q.zero, (size_t)(n_padded - n));
}

/* ---- inner kernels: sums[r][j] = A[r] · W[:, panel column j] for up to ROWS rows ---- */

static void sums_portable(int64_t groups, const uint8_t *const *rows, int n_rows,
                          const int8_t *panel, int32_t sums[ROWS][EG_INT8_PANEL]) {
    memset(sums, 0, sizeof(int32_t) * ROWS * EG_INT8_PANEL);
    for (int64_t g = 0; g < groups; g++) {
        const int8_t *b = panel + g * EG_INT8_PANEL * EG_INT8_GROUP;
        for (int r = 0; r < n_rows; r++) {
            const uint8_t *a = rows[r] + g * EG_INT8_GROUP;
            for (int j = 0; j < EG_INT8_PANEL; j++) {
                const int8_t *bj = b + j * EG_INT8_GROUP;
                sums[r][j] += a[0] * bj[0] + a[1] * bj[1] + a[2] * bj[2] + a[3] * bj[3];
            }
        }
    }
}

#ifdef EG_INT8_X86
/* One group: 4 bytes of each row broadcast, multiplied with 2 x 8 columns of 4 bytes by
 * vpmaddubsw (pairs into int16: exact for |W| <= 63) and vpmaddwd with ones (into int32). */
__attribute__((target("avx2"))) static void sums_avx2(int64_t groups, const uint8_t *const *rows,
                                                      int n_rows, const int8_t *panel,
                                                      int32_t sums[ROWS][EG_INT8_PANEL]) {
    const uint8_t *r0 = rows[0], *r1 = rows[n_rows > 1 ? 1 : 0], *r2 = rows[n_rows > 2 ? 2 : 0],
                  *r3 = rows[n_rows > 3 ? 3 : 0];
    const __m256i ones = _mm256_set1_epi16(1);
    __m256i c00 = _mm256_setzero_si256(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00,
            c30 = c00, c31 = c00;
#define EG_INT8_ROW(a, lo, hi)                                                                     \
    do {                                                                                           \
        int32_t word;                                                                              \
        memcpy(&word, (a) + 4 * g, 4);                                                             \
        __m256i av = _mm256_set1_epi32(word);                                                      \
        lo = _mm256_add_epi32(lo, _mm256_madd_epi16(_mm256_maddubs_epi16(av, b0), ones));          \
        hi = _mm256_add_epi32(hi, _mm256_madd_epi16(_mm256_maddubs_epi16(av, b1), ones));          \
    } while (0)
    for (int64_t g = 0; g < groups; g++) {
        const int8_t *b = panel + g * EG_INT8_PANEL * EG_INT8_GROUP;
        __m256i b0 = _mm256_load_si256((const __m256i *)b);
        __m256i b1 = _mm256_load_si256((const __m256i *)(b + 32));
        EG_INT8_ROW(r0, c00, c01);
        EG_INT8_ROW(r1, c10, c11);
        EG_INT8_ROW(r2, c20, c21);
        EG_INT8_ROW(r3, c30, c31);
    }
#undef EG_INT8_ROW
    _mm256_storeu_si256((__m256i *)sums[0], c00);
    _mm256_storeu_si256((__m256i *)(sums[0] + 8), c01);
    _mm256_storeu_si256((__m256i *)sums[1], c10);
    _mm256_storeu_si256((__m256i *)(sums[1] + 8), c11);
    _mm256_storeu_si256((__m256i *)sums[2], c20);
    _mm256_storeu_si256((__m256i *)(sums[2] + 8), c21);
    _mm256_storeu_si256((__m256i *)sums[3], c30);
    _mm256_storeu_si256((__m256i *)(sums[3] + 8), c31);
}
#endif

typedef void (*sums_fn)(int64_t, const uint8_t *const *, int, const int8_t *,
                        int32_t[ROWS][EG_INT8_PANEL]);

static sums_fn choose_sums(const eg__int8_weights *w) {
#ifdef EG_INT8_X86
    if (w->seven_bit && !atomic_load(&force_portable) && eg__cpu_active_level() >= EG__CPU_AVX2)
        return sums_avx2;
#else
    (void)w;
#endif
    return sums_portable;
}

/* ---- the product ---- */

static void apply_activation(int activation, float *row, int64_t n) {
    if (activation == 1)
        for (int64_t j = 0; j < n; j++) row[j] = EG__RELU(row[j], 0.0f);
    else if (activation == 2)
        eg__vecmath_f32(EG__VECMATH_SIGMOID, n, row, row);
    else if (activation == 3)
        eg__vecmath_f32(EG__VECMATH_TANH, n, row, row);
}

void eg__int8_gemm(int64_t m, const uint8_t *a, int64_t lda, const eg__int8_weights *w,
                   const eg__int8_epilogue *e, float *c, int64_t ldc) {
    sums_fn sums_of = choose_sums(w);
    int32_t sums[ROWS][EG_INT8_PANEL];
    const int64_t panel_bytes = w->groups * EG_INT8_PANEL * EG_INT8_GROUP;
    /* Panels in blocks of about 128 KiB, so that a block stays in L2 while every row passes it
     * (a wide dense layer's whole weight would stream from memory once per four rows). */
    int64_t block = (128 << 10) / (panel_bytes > 0 ? panel_bytes : 1);
    if (block < 1) block = 1;
    for (int64_t p0 = 0; p0 < w->panels; p0 += block) {
        int64_t p1 = p0 + block < w->panels ? p0 + block : w->panels;
        for (int64_t i = 0; i < m; i += ROWS) {
            int n_rows = m - i < ROWS ? (int)(m - i) : ROWS;
            const uint8_t *rows[ROWS];
            for (int r = 0; r < n_rows; r++) rows[r] = a + (i + r) * lda;
            for (int64_t p = p0; p < p1; p++) {
                sums_of(w->groups, rows, n_rows, w->packed + p * panel_bytes, sums);
                int64_t j0 = p * EG_INT8_PANEL;
                int64_t width = w->n - j0 < EG_INT8_PANEL ? w->n - j0 : EG_INT8_PANEL;
                for (int r = 0; r < n_rows; r++) {
                    float *out = c + (i + r) * ldc + j0;
                    for (int64_t j = 0; j < width; j++) {
                        int32_t exact = sums[r][j] - e->a.zero * w->column_sums[j0 + j];
                        float v = (float)exact * (e->a.scale * e->w_scale[j0 + j]);
                        out[j] = e->bias ? v + e->bias[j0 + j] : v;
                    }
                }
            }
        }
    }
    if (e->activation)
        for (int64_t i = 0; i < m; i++) apply_activation(e->activation, c + i * ldc, w->n);
}
