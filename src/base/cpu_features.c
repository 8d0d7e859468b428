/* CPU feature detection and the dispatch level (see cpu_features.h). */
#include "base/cpu_features.h"

#include <cpuid.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* 0: not detected yet; else 1 + a bit set of FEATURE_*. Detection is idempotent, so racing
 * first calls just store the same value. */
enum { FEATURE_AVX2_FMA = 1, FEATURE_F16C = 2, FEATURE_AVX512 = 4 };
static atomic_int detected;
/* 0: not chosen yet; else 1 + the eg__cpu_level in use. */
static atomic_int active_level;

static int features(void) {
    int known = atomic_load_explicit(&detected, memory_order_relaxed);
    if (known) return known - 1;
    /* libgcc's checks include the OS support for the YMM state (XGETBV), not just CPUID. */
    __builtin_cpu_init();
    int bits = 0;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) bits |= FEATURE_AVX2_FMA;
    /* F16C from CPUID leaf 1 itself: clang 14's __builtin_cpu_supports does not know "f16c"
     * (the fuzz preset builds with clang); the "avx" check covers the OS's YMM support. */
    unsigned leaf1[4];
    if (__builtin_cpu_supports("avx") &&
        __get_cpuid(1, &leaf1[0], &leaf1[1], &leaf1[2], &leaf1[3]) && (leaf1[2] & bit_F16C))
        bits |= FEATURE_F16C;
    /* libgcc (and compiler-rt) check XGETBV for the opmask and ZMM state too */
    if ((bits & FEATURE_AVX2_FMA) && __builtin_cpu_supports("avx512f") &&
        __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
        __builtin_cpu_supports("avx512vl"))
        bits |= FEATURE_AVX512;
    atomic_store_explicit(&detected, bits + 1, memory_order_relaxed);
    return bits;
}

bool eg__cpu_has_avx2_fma(void) {
    return features() & FEATURE_AVX2_FMA;
}
bool eg__cpu_has_f16c(void) {
    return features() & FEATURE_F16C;
}
bool eg__cpu_has_avx512(void) {
    return features() & FEATURE_AVX512;
}

eg__cpu_level eg__cpu_best_level(void) {
    return eg__cpu_has_avx512()     ? EG__CPU_AVX512
           : eg__cpu_has_avx2_fma() ? EG__CPU_AVX2
                                    : EG__CPU_BASELINE;
}

static eg__cpu_level level_from_environment(void) {
    const char *value = getenv("EG_CPU");
    eg__cpu_level wanted = EG__CPU_BASELINE;
    if (!value || !*value || strcmp(value, "avx512") == 0)
        wanted = EG__CPU_AVX512;
    else if (strcmp(value, "avx2") == 0)
        wanted = EG__CPU_AVX2;
    eg__cpu_level best = eg__cpu_best_level();
    return wanted < best ? wanted : best;
}

eg__cpu_level eg__cpu_active_level(void) {
    int level = atomic_load_explicit(&active_level, memory_order_relaxed);
    if (level) return (eg__cpu_level)(level - 1);
    eg__cpu_level chosen = level_from_environment();
    atomic_store_explicit(&active_level, (int)chosen + 1, memory_order_relaxed);
    return chosen;
}

eg__cpu_level eg__cpu_set_level(eg__cpu_level level) {
    eg__cpu_level previous = eg__cpu_active_level();
    if (level > eg__cpu_best_level()) level = eg__cpu_best_level();
    atomic_store_explicit(&active_level, (int)level + 1, memory_order_relaxed);
    return previous;
}

bool eg__cpu_avx512_active(void) {
    return eg__cpu_active_level() == EG__CPU_AVX512;
}

const char *eg__cpu_level_name(eg__cpu_level level) {
    return level == EG__CPU_AVX512 ? "avx512" : level == EG__CPU_AVX2 ? "avx2" : "baseline";
}
