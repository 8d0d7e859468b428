/* Process-wide runtime: version, build, shutdown of every backend and device. */
#include <pthread.h>
#include <stdio.h>

#include "base/cpu_features.h"
#include "base/threadpool.h"
#include "core/tensor_internal.h"
#include "dispatch/dispatch.h"
#include "eagle/runtime.h"

#ifndef EG_BUILD_INFO
#define EG_BUILD_INFO "unknown build"
#endif

const char *eg_version(void) {
    return "0.1.0";
}
const char *eg_build_info(void) {
    return EG_BUILD_INFO;
}

const char *eg_cpu_kernels_info(void) {
    static const char *const lines[EG__CPU_LEVEL_COUNT][EG__CPU_LEVEL_COUNT] = {
        {"baseline (SSE2; the CPU has nothing wider)", "", ""},
        {"baseline (SSE2; forced by EG_CPU, the CPU has avx2)",
         "avx2 (AVX2 + FMA; the best this CPU has)", ""},
        {"baseline (SSE2; forced by EG_CPU, the CPU has avx512)",
         "avx2 (AVX2 + FMA; forced by EG_CPU, the CPU has avx512)",
         "avx512 (AVX-512 F/BW/DQ/VL; the best this CPU has)"},
    };
    return lines[eg__cpu_best_level()][eg__cpu_active_level()];
}

static char low_precision_line[256];

static void describe_low_precision(void) {
    const char *amx_reason;
    bool amx = eg__cpu_amx_usable(&amx_reason);
    snprintf(low_precision_line, sizeof low_precision_line,
             "AVX-512 BF16 %s, AVX-512 FP16 %s, F16C %s; AMX-BF16 tiles %s (%s)",
             eg__cpu_has_avx512_bf16() ? "yes" : "no", eg__cpu_has_avx512_fp16() ? "yes" : "no",
             eg__cpu_has_f16c() ? "yes" : "no", amx ? "usable" : "not usable", amx_reason);
}

const char *eg_cpu_low_precision_info(void) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, describe_low_precision);
    return low_precision_line;
}

eg_status eg_set_num_threads(int n) {
    eg_status status = eg__threadpool_set_threads(n);
    for (size_t i = 0; status == EG_OK && i < sizeof eg__backends / sizeof *eg__backends; i++)
        if (eg__backends[i] && eg__backends[i]->set_threads) eg__backends[i]->set_threads(n);
    return status;
}

void eg_shutdown(void) {
    for (size_t i = 0; i < sizeof eg__backends / sizeof *eg__backends; i++)
        if (eg__backends[i] && eg__backends[i]->shutdown) eg__backends[i]->shutdown();
    eg__host_devices_shutdown();
    eg__tensor_release_thread_cache();
}
