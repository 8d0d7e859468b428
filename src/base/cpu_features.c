/* CPU feature detection and the dispatch level (see cpu_features.h). */
#include "base/cpu_features.h"

#include <cpuid.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if defined(__linux__)
#include <errno.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

/* 0: not detected yet; else 1 + a bit set of FEATURE_*. Detection is idempotent, so racing
 * first calls just store the same value. */
enum {
    FEATURE_AVX2_FMA = 1,
    FEATURE_F16C = 2,
    FEATURE_AVX512 = 4,
    FEATURE_AVX512_BF16 = 8,
    FEATURE_AVX512_FP16 = 16,
    FEATURE_AMX_BF16 = 32,
};
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
    /* From CPUID leaf 7 itself (compilers' __builtin_cpu_supports differ in which of these
     * names they know): AVX512_BF16 is subleaf 1's EAX bit 5, AVX512_FP16 and AMX subleaf 0's
     * EDX bits 23, 22 (AMX-BF16) and 24 (AMX-TILE). */
    unsigned l7[4] = {0}, l7s1[4] = {0};
    if (bits & FEATURE_AVX512) {
        if (__get_cpuid_count(7, 0, &l7[0], &l7[1], &l7[2], &l7[3])) {
            if (l7[3] & (1u << 23)) bits |= FEATURE_AVX512_FP16;
            /* the OS must also save the tile state: XCR0 bits 17 (TILECFG) and 18 (TILEDATA) */
            unsigned xcr0_lo, xcr0_hi;
            __asm__ volatile("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
            (void)xcr0_hi;
            bool tiles = (l7[3] & (1u << 22)) && (l7[3] & (1u << 24));
            if (tiles && (xcr0_lo & (3u << 17)) == (3u << 17)) bits |= FEATURE_AMX_BF16;
        }
        if (l7[0] >= 1 && __get_cpuid_count(7, 1, &l7s1[0], &l7s1[1], &l7s1[2], &l7s1[3]) &&
            (l7s1[0] & (1u << 5)))
            bits |= FEATURE_AVX512_BF16;
    }
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

bool eg__cpu_has_avx512_bf16(void) {
    return features() & FEATURE_AVX512_BF16;
}
bool eg__cpu_has_avx512_fp16(void) {
    return features() & FEATURE_AVX512_FP16;
}
bool eg__cpu_has_amx_bf16(void) {
    return features() & FEATURE_AMX_BF16;
}

/* Linux hands a process the AMX tile data state (8 KiB more per thread's signal frame and
 * context switch) only on request: arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA). Until
 * then the first tile instruction faults (SIGILL). Asked once per process. */
#define EG_ARCH_REQ_XCOMP_PERM 0x1023
#define EG_XFEATURE_XTILEDATA  18
static pthread_once_t amx_once = PTHREAD_ONCE_INIT;
static bool amx_granted;
static char amx_reason[160];

static void request_amx(void) {
    if (!eg__cpu_has_amx_bf16()) {
        snprintf(amx_reason, sizeof amx_reason, "the CPU (or the OS's XCR0) has no AMX-BF16 tiles");
        return;
    }
#if defined(__linux__) && defined(SYS_arch_prctl)
    if (syscall(SYS_arch_prctl, EG_ARCH_REQ_XCOMP_PERM, EG_XFEATURE_XTILEDATA) == 0) {
        amx_granted = true;
        snprintf(amx_reason, sizeof amx_reason, "granted by the kernel");
    } else {
        snprintf(amx_reason, sizeof amx_reason,
                 "the kernel refused the tile state (arch_prctl ARCH_REQ_XCOMP_PERM: %s)",
                 strerror(errno));
    }
#else
    snprintf(amx_reason, sizeof amx_reason, "no way to ask this OS for the tile state");
#endif
}

bool eg__cpu_amx_usable(const char **reason) {
    pthread_once(&amx_once, request_amx);
    if (reason) *reason = amx_reason;
    return amx_granted;
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
