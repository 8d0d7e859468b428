/* Internal: which instruction sets this CPU offers, and which level the kernels use.
 *
 * The library is compiled for baseline x86-64 (SSE2). Kernels that have a faster AVX2 variant
 * (compiled with __attribute__((target("avx2,fma")))) ask eg__cpu_active_level() at run time, so
 * the same binary runs on a machine without AVX2.
 *
 * The environment variable EG_CPU, read once, lowers the level for the whole process:
 *   EG_CPU=baseline (or sse2)  the baseline path everywhere, even on an AVX2 machine;
 *   EG_CPU=avx2                AVX2 where the CPU has it, and no AVX-512 kernel;
 *   EG_CPU=avx512, unset or empty  the best the CPU has (AVX2, and the AVX-512 kernels where
 *                              it has AVX-512F: so far the GEMM's micro-kernel).
 * Any other value selects the baseline (a typo must not silently pick an untested path). Tests
 * run both paths, through EG_CPU or eg__cpu_set_level. */
#ifndef EAGLE_SRC_BASE_CPU_FEATURES_H
#define EAGLE_SRC_BASE_CPU_FEATURES_H

#include <stdbool.h>

typedef enum eg__cpu_level {
    EG__CPU_BASELINE = 0, /* SSE2 */
    EG__CPU_AVX2 = 1,     /* AVX2 + FMA (with the OS saving the YMM registers) */
} eg__cpu_level;

/* What the hardware offers, independent of EG_CPU. Detected once; thread-safe. */
bool eg__cpu_has_avx2_fma(void);
bool eg__cpu_has_f16c(void);
/* AVX-512 F with the OS saving the ZMM and mask registers. */
bool eg__cpu_has_avx512(void);

/* Whether the kernels that have an AVX-512 variant use it: the CPU has it, the level is AVX2,
 * and EG_CPU does not ask for avx2 or lower. The AVX-512 kernels give the AVX2 ones' bits (they
 * are the same fused multiply-adds per element, in the same order, in wider registers). */
bool eg__cpu_avx512_active(void);

/* The level kernels dispatch on: the best the CPU has, lowered by EG_CPU or eg__cpu_set_level.
 * Cheap (one relaxed atomic load after the first call); thread-safe. */
eg__cpu_level eg__cpu_active_level(void);

/* Forces the level (clamped to what the CPU has) and returns the previous one: for tests that
 * compare the paths. Not meant to race with running kernels. */
eg__cpu_level eg__cpu_set_level(eg__cpu_level level);

/* "baseline" or "avx2". */
const char *eg__cpu_level_name(eg__cpu_level level);

#endif
