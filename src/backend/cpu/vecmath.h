/* Internal: f32 vector math for the elementwise kernels (eager and lazy fused loops share it).
 *
 * Our own polynomials, written once with GCC vector extensions (vecmath_kernels.h) and compiled
 * three times: for baseline SSE2 without FMA; for AVX2 with fused multiply-adds (every Horner step,
 * and exp's Cody-Waite reduction, where the FMA makes x - n LN2_HI exact with LN2_HI the float
 * nearest ln 2); and for AVX-512 with the AVX2 level's operations in 16 lanes. Chosen at run time
 * by eg__cpu_active_level(). The baseline's bits differ from the FMA levels' (on up to a few
 * inputs per thousand; each meets the bounds below): since 2026-11-30 the AVX2 path has FMA,
 * which made exp 1.6x faster per element in cache (bench/elementwise/README.md). The AVX-512
 * level gives the AVX2 level's bits exactly: per lane it performs the same IEEE operations (the
 * same FMAs, divisions, min/max, conversions and integer steps, in the same order); only the
 * selections (blends from mask registers instead of blendv) and the all-lanes test of exp's fast
 * path are spelled differently, and those move bits without rounding. Checked on all 2^32 inputs
 * of every function when it was written, and on the sweeps of tests/test_vecmath.c every run.
 * The AVX-512 drivers also prefetch the input a few KiB ahead (vecmath_kernels.h), which changes
 * no result. (The GEMM differs per path as well.) What stays: every lane is computed
 * independently and the compiler contracts nothing on its own, so a result's bits depend only on
 * its input and the CPU level (and AVX2 and AVX-512 agree): not on the thread count, the array's
 * alignment, the element's position (the tail past the last whole vector runs through the same
 * vector code on a zero-padded copy, a masked load at AVX-512) or the execution mode.
 *
 * Maximum error against the exact function (measured with a double-precision reference; asserted
 * per path by tests/test_vecmath.c, which sweeps every 1009th f32 bit pattern plus a dense sweep
 * of [-20, 20]; EG_VECMATH_STRIDE=101 sweeps every 101st, EG_VECMATH_SWEEP=all all 2^32 inputs).
 * Measured baseline / AVX2 (= AVX-512), the larger of the stride-101 and dense sweeps:
 *   exp       1 ulp     (0.97 / 0.99)
 *   log       1 ulp     (0.78 / 0.78; x < 0 and NaN give NaN, 0 gives -inf)
 *   tanh      2 ulp     (1.29 / 1.29)
 *   sigmoid   2.5 ulp   (2.27 / 2.27) 1 / (1 + exp(-x)), as exp(x) / (1 + exp(x)) for x < 0 so
 *                       that the negative tail keeps its relative precision down to subnormals
 *   gelu      8 ulp     (7.72 near x = -1.86 / 6.02) 0.5 x (1 + erf(x / sqrt 2)), through
 *                       erfc(|x| / sqrt 2) = exp(-x^2/2) R(t) for |x| >= 1/sqrt 2, x^2/2 kept
 *                       exact, so the negative tail keeps its relative precision (1 + erf in f32
 *                       loses it all below x = -4); gelu(-inf) = -0
 *   softplus  2 ulp     (1.57 / 1.57) max(x, 0) + log1p(exp(-|x|))
 * The fast-math variants (EG__VECMATH_*_FAST, chosen inside eg_fast_math_begin regions; f32
 * only), against the same references (gelu_fast against the erf gelu), the same sweeps; ulp
 * where |exact| >= a floor, the absolute error below it; maximum relative error in brackets:
 *   exp_fast      47 ulp    (42.9 / 46.2; 3.1e-6) degree 4, one-constant reduction; floor 2^-125:
 *                           results below ~2^-126 flush to 0 (x < -87.33), x > 88.7228 gives inf
 *   tanh_fast     14 ulp    (13.5 / 13.7; 1.1e-6) x P(x^2) / Q(x^2), degrees 4 / 3; no floor
 *   sigmoid_fast  44 ulp    (42.8 / 42.8; 3.1e-6) 1 / (1 + exp_fast(-x)); floor 2^-125, below it
 *                           absolute 2.9e-39
 *   gelu_fast     78 / 70 ulp (76.6 / 68.2; 6.7e-6) erf through a rational of degrees 5 / 4, not
 *                           the tanh form; floor 2^-4 (|gelu| below 1/16: x in (-0.14, 0.12) and
 *                           the negative tail beyond -1.9, where 1 + erf cancels): there
 *                           absolute 2.0e-6; gelu_fast(-0) = +0
 * Speed, exact against fast: bench/RESULTS.md ("Issue 24: fast-math").
 * (The asserted bounds in tests/test_vecmath.c are the source of truth; the figures above are
 * what it measured.) Why not SLEEF (libsleef, Debian): when both paths had to give the same bits,
 * only its no-FMA ("cinz") variants qualified, 3-10x slower per element than these; its FMA
 * variants are slower than these too, or as fast with a looser bound (ns per element in cache:
 * expf u10 0.72-0.91 against 0.61, logf u10 1.37-1.51 against 1.19, tanhf u35 (3.5 ulp)
 * 1.08-1.34 against 1.13, erfcf alone 7.1 against gelu's 1.94; bench/elementwise/README.md). */
#ifndef EAGLE_SRC_BACKEND_CPU_VECMATH_H
#define EAGLE_SRC_BACKEND_CPU_VECMATH_H

#include <stdbool.h>
#include <stdint.h>

#include "base/cpu_features.h"
#include "eagle/dtype.h"

typedef enum eg__vecmath_fn {
    EG__VECMATH_EXP,
    EG__VECMATH_LOG,
    EG__VECMATH_TANH,
    EG__VECMATH_SIGMOID,
    EG__VECMATH_GELU,
    EG__VECMATH_SOFTPLUS,
    /* the fast-math variants (eg_fast_math_begin): f32 only */
    EG__VECMATH_EXP_FAST,
    EG__VECMATH_TANH_FAST,
    EG__VECMATH_SIGMOID_FAST,
    EG__VECMATH_GELU_FAST,
    EG__VECMATH_COUNT
} eg__vecmath_fn;

/* out[i] = fn(in[i]) for i in [0, n), at the current eg__cpu_active_level(). out may equal in (not
 * overlap otherwise). Any alignment. */
void eg__vecmath_f32(eg__vecmath_fn fn, int64_t n, float *out, const float *in);

/* The same with strides in bytes (0 for a broadcast input): gathers into a small buffer. */
void eg__vecmath_f32_strided(eg__vecmath_fn fn, int64_t n, char *out, int64_t out_stride,
                             const char *in, int64_t in_stride);

/* The same on contiguous bf16 or f16 (dtype), widened and rounded in registers: the f32
 * function's result on the widened input, rounded once to nearest even, the same bits as
 * widening, eg__vecmath_f32 and rounding would give. out may equal in. false (nothing done) where
 * the level has no such driver (f16 at the baseline, or without F16C), and for the fast
 * variants. */
bool eg__vecmath_lowp(eg__vecmath_fn fn, eg_dtype dtype, int64_t n, uint16_t *out,
                      const uint16_t *in);

/* At a given level (clamped to what the CPU has): for tests and benchmarks. */
void eg__vecmath_f32_at(eg__cpu_level level, eg__vecmath_fn fn, int64_t n, float *out,
                        const float *in);

const char *eg__vecmath_name(eg__vecmath_fn fn);

#endif
