/* Internal: which instruction sets this CPU offers, and which level the kernels use.
 *
 * The library is compiled for baseline x86-64 (SSE2). Kernels that have faster variants
 * (compiled with __attribute__((target(...)))) ask eg__cpu_active_level() at run time, so the
 * same binary runs on a machine without AVX2 and on one without AVX-512. The levels are ordered:
 * a kernel with no AVX-512 variant runs its AVX2 one at EG__CPU_AVX512 (`level >= EG__CPU_AVX2`).
 *
 * The environment variable EG_CPU, read once, lowers the level for the whole process:
 *   EG_CPU=baseline (or sse2)  the baseline path everywhere, even on an AVX2 machine;
 *   EG_CPU=avx2                at most AVX2: no AVX-512 kernel even where the CPU has it;
 *   EG_CPU=avx512, unset or empty  the best the CPU has.
 * A level the CPU lacks falls back to the best it has. Any other value selects the baseline (a
 * typo must not silently pick an untested path). Tests run every path the CPU has, through
 * EG_CPU or eg__cpu_set_level. */
#ifndef EAGLE_SRC_BASE_CPU_FEATURES_H
#define EAGLE_SRC_BASE_CPU_FEATURES_H

#include <stdbool.h>

typedef enum eg__cpu_level {
    EG__CPU_BASELINE = 0, /* SSE2 */
    EG__CPU_AVX2 = 1,     /* AVX2 + FMA (with the OS saving the YMM registers) */
    EG__CPU_AVX512 = 2,   /* AVX-512 F, BW, DQ, VL (with the OS saving ZMM and mask state) */
    EG__CPU_LEVEL_COUNT = 3,
} eg__cpu_level;

/* What the hardware offers, independent of EG_CPU. Detected once; thread-safe. */
bool eg__cpu_has_avx2_fma(void);
bool eg__cpu_has_f16c(void);
/* AVX-512 F, BW, DQ and VL with the OS saving the ZMM and mask registers. */
bool eg__cpu_has_avx512(void);

/* AVX512_BF16 (vdpbf16ps), AVX512_FP16, and AMX with bf16 tiles (AMX-TILE + AMX-BF16, with the
 * OS saving the tile state): what the hardware offers, only where AVX-512 itself is usable. */
bool eg__cpu_has_avx512_bf16(void);
bool eg__cpu_has_avx512_fp16(void);
bool eg__cpu_has_amx_bf16(void);

/* Whether this process may execute AMX tile instructions: the CPU has AMX-BF16 and the kernel
 * granted the tile state (Linux: arch_prctl(ARCH_REQ_XCOMP_PERM), asked on the first call,
 * once per process; thread-safe). *reason (when reason is not NULL) is set to a sentence saying
 * why or why not, in static storage: "granted by the kernel", or the CPU lacks AMX, or the
 * kernel refused (with its errno text). Without permission the first tile instruction raises
 * SIGILL, so every AMX kernel must be behind this check. */
bool eg__cpu_amx_usable(const char **reason);

/* eg__cpu_active_level() == EG__CPU_AVX512. */
bool eg__cpu_avx512_active(void);

/* The best level this CPU has, whatever EG_CPU says. */
eg__cpu_level eg__cpu_best_level(void);

/* The level kernels dispatch on: the best the CPU has, lowered by EG_CPU or eg__cpu_set_level.
 * Cheap (one relaxed atomic load after the first call); thread-safe. */
eg__cpu_level eg__cpu_active_level(void);

/* Forces the level (clamped to what the CPU has) and returns the previous one: for tests that
 * compare the paths. Not meant to race with running kernels. */
eg__cpu_level eg__cpu_set_level(eg__cpu_level level);

/* "baseline", "avx2" or "avx512". */
const char *eg__cpu_level_name(eg__cpu_level level);

#endif
