/* Internal: f32 vector math for the elementwise kernels (eager and lazy fused loops share it).
 *
 * Our own polynomials, written once with GCC vector extensions and compiled twice: for baseline
 * SSE2 and for AVX2 (chosen at run time by eg__cpu_active_level()). Neither variant contracts a*b+c
 * into an FMA, and every lane is computed independently, so the bits of a result depend only on its
 * input: not on the CPU path, the thread count, the array's alignment or the element's position
 * (the tail past the last 8 runs through the same vector code on a padded copy).
 *
 * Maximum error against the exact function (measured with a double-precision reference; asserted
 * by tests/test_vecmath.c, which sweeps every 2^k-th f32 bit pattern plus dense regions; set
 * EG_VECMATH_SWEEP=all to sweep all 2^32 inputs):
 *   exp       1 ulp     (measured 0.96)
 *   log       1 ulp     (0.83; x < 0 and NaN give NaN, 0 gives -inf)
 *   tanh      2 ulp     (1.31)
 *   sigmoid   2.5 ulp   (2.33) 1 / (1 + exp(-x)), as exp(x) / (1 + exp(x)) for x < 0 so that
 *                       the negative tail keeps its relative precision down to subnormals
 *   gelu      8 ulp     (6.96, near x = -1.8) 0.5 x (1 + erf(x / sqrt 2)), through
 *                       erfc(|x| / sqrt 2) = exp(-x^2/2) R(t) for |x| >= 1/sqrt 2, x^2/2 kept
 *                       exact, so the negative tail keeps its relative precision (1 + erf in f32
 *                       loses it all below x = -4); gelu(-inf) = -0
 *   softplus  2 ulp     (1.58) max(x, 0) + log1p(exp(-|x|))
 * (The asserted bounds in tests/test_vecmath.c are the source of truth; the figures above are
 * what it measured.) Why not SLEEF (libsleef, Debian): its no-FMA ("cinz") variants, which are
 * the ones that give the same bits on SSE2 and AVX, measured 3-10x slower per element than these
 * (bench/elementwise/README.md). */
#ifndef EAGLE_SRC_BACKEND_CPU_VECMATH_H
#define EAGLE_SRC_BACKEND_CPU_VECMATH_H

#include <stdint.h>

#include "backend/cpu/cpu_features.h"

typedef enum eg__vecmath_fn {
    EG__VECMATH_EXP,
    EG__VECMATH_LOG,
    EG__VECMATH_TANH,
    EG__VECMATH_SIGMOID,
    EG__VECMATH_GELU,
    EG__VECMATH_SOFTPLUS,
    EG__VECMATH_COUNT
} eg__vecmath_fn;

/* out[i] = fn(in[i]) for i in [0, n), at the current eg__cpu_active_level(). out may equal in (not
 * overlap otherwise). Any alignment. */
void eg__vecmath_f32(eg__vecmath_fn fn, int64_t n, float *out, const float *in);

/* The same with strides in bytes (0 for a broadcast input): gathers into a small buffer. */
void eg__vecmath_f32_strided(eg__vecmath_fn fn, int64_t n, char *out, int64_t out_stride,
                             const char *in, int64_t in_stride);

/* At a given level (clamped to what the CPU has): for tests and benchmarks. */
void eg__vecmath_f32_at(eg__cpu_level level, eg__vecmath_fn fn, int64_t n, float *out,
                        const float *in);

const char *eg__vecmath_name(eg__vecmath_fn fn);

#endif
