/* Eagle — process-wide runtime settings: version, threads, shutdown. */
#ifndef EAGLE_RUNTIME_H
#define EAGLE_RUNTIME_H

#include <stdbool.h>
#include <stddef.h>

#include "eagle/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define EG_VERSION_MAJOR 0
#define EG_VERSION_MINOR 1
#define EG_VERSION_PATCH 0
/* "0.1.0"; static storage. */
const char *eg_version(void);
/* One line of build options (compiler, BLAS, sanitizers, CUDA). Static storage. */
const char *eg_build_info(void);

/* The BLAS library behind matmul and its configuration, e.g. "OpenBLAS 0.3.21 DYNAMIC_ARCH
 * NO_AFFINITY Haswell MAX_THREADS=64", followed by "; f32 matmul: Eagle's AVX2/FMA GEMM" where
 * this CPU runs Eagle's own f32 kernel (f64 and narrow products stay on OpenBLAS). Static
 * storage. */
const char *eg_blas_info(void);

/* Which of the CPU kernels' paths runs, and why: "avx512 (...; the best this CPU has)", or a
 * lower one that EG_CPU=baseline|avx2|avx512 forced. Chosen once per process. Static storage. */
const char *eg_cpu_kernels_info(void);

/* What this CPU offers for low precision (bf16/f16), one line: AVX-512 BF16 and FP16, F16C,
 * and whether AMX-BF16 tiles are usable, with the reason ("granted by the kernel", or why not:
 * no AMX, or the kernel refused the tile state). The first call asks the kernel for the AMX
 * tile state where the CPU has AMX (once per process). Static storage; thread-safe. */
const char *eg_cpu_low_precision_info(void);

/* Threads used by CPU kernels. The default is EG_NUM_THREADS from the environment, else the
 * number of cores. n >= 1; the pool is resized at the next parallel op. BLAS runs
 * single-threaded on tiles that this pool shares out, so the two never oversubscribe; results
 * are bitwise the same for every n. After each parallel op the pool's workers poll for the next
 * one for about 0.1 ms (4096 pause instructions) before they sleep, so a step's ops follow one
 * another without a wake-up each; an idle program's cores go quiet after that. */
eg_status eg_set_num_threads(int n);
int eg_get_num_threads(void);

/* Check numerics (like tf.debugging.enable_check_numerics): while on, the first op whose float
 * result holds a NaN or an infinity fails with EG_ERR_NUMERICS, naming the op, the element, its
 * inputs and the call site — in eager mode at the call, in lazy mode when the value is computed,
 * in a traced function at the replay (which then runs its ops one by one). Off by default;
 * EG_CHECK_NUMERICS=1 in the environment turns it on from the start. Each op's result is read
 * once more while it is on. */
void eg_set_check_numerics(bool on);
bool eg_check_numerics(void);

/* Joins the worker threads and gives all cached memory back: the pools' cached blocks, and the
 * calling thread's product packing buffers and spare tensor headers (other threads' go when they
 * exit). What stays is the host allocator's bookkeeping (a few KiB), so live tensors stay valid
 * (their memory is freed when they are released). Optional; useful before leak checkers run. The
 * library works on after it, making what it needs again. */
void eg_shutdown(void);

#if !defined(EG_NO_CALLSITE)
#define eg_set_num_threads(...) EG_CALLSITE_(eg_set_num_threads(__VA_ARGS__))
#endif

#ifdef __cplusplus
}
#endif
#endif
