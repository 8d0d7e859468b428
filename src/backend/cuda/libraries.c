/* cuBLASLt, cuDNN and NVRTC, opened at first use (libraries.h says why and how they are called).
 * A library is looked up by its soname through the loader's path, then in the CUDA toolkit's
 * library directory this build was made with. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "backend/cuda/cuda_internal.h"
#include "backend/cuda/libraries.h"

#define EG_CUDA_FUNCTION(name) __typeof__(name) *eg__cuda_pointer_##name;
#include "backend/cuda/blas_lt_functions.def"
#include "backend/cuda/dnn_functions.def"
#include "backend/cuda/nvrtc_functions.def"
#undef EG_CUDA_FUNCTION

typedef struct library {
    const char *soname;
    pthread_once_t once;
    void *handle;
    char problem[320]; /* "" when open */
} library;

static library blas_lt = {.soname = "libcublasLt.so.13", .once = PTHREAD_ONCE_INIT};
static library dnn = {.soname = "libcudnn.so.9", .once = PTHREAD_ONCE_INIT};
static library nvrtc = {.soname = "libnvrtc.so.13", .once = PTHREAD_ONCE_INIT};

static void *open_library(library *l) {
    void *handle = dlopen(l->soname, RTLD_NOW | RTLD_LOCAL);
    if (handle) return handle;
    char first_error[160];
    snprintf(first_error, sizeof first_error, "%s", dlerror());
    char path[512];
    snprintf(path, sizeof path, "%s/%s", EG_CUDA_LIBRARY_DIR, l->soname);
    handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!handle)
        snprintf(l->problem, sizeof l->problem, "%s was not found (%s)", l->soname, first_error);
    return handle;
}

/* Resolves one symbol; on failure records the problem and returns false. */
static bool resolve(library *l, const char *name, void **pointer) {
    *pointer = dlsym(l->handle, name);
    if (*pointer) return true;
    snprintf(l->problem, sizeof l->problem, "%s lacks %s (too old a version?)", l->soname, name);
    return false;
}

#define EG_CUDA_FUNCTION(name)                                                                     \
    if (ok) ok = resolve(l, #name, (void **)&eg__cuda_pointer_##name);

static void open_blas_lt(void) {
    library *l = &blas_lt;
    if (!(l->handle = open_library(l))) return;
    bool ok = true;
#include "backend/cuda/blas_lt_functions.def"
    (void)ok;
}

static void open_dnn(void) {
    library *l = &dnn;
    if (!(l->handle = open_library(l))) return;
    bool ok = true;
#include "backend/cuda/dnn_functions.def"
    (void)ok;
}

static void open_nvrtc(void) {
    library *l = &nvrtc;
    if (!(l->handle = open_library(l))) return;
    bool ok = true;
#include "backend/cuda/nvrtc_functions.def"
    (void)ok;
}
#undef EG_CUDA_FUNCTION

static const char *problem_of(const library *l) {
    return l->problem[0] ? l->problem : NULL;
}

const char *eg__cuda_open_blas_lt(void) {
    pthread_once(&blas_lt.once, open_blas_lt);
    return problem_of(&blas_lt);
}

const char *eg__cuda_open_dnn(void) {
    pthread_once(&dnn.once, open_dnn);
    return problem_of(&dnn);
}

const char *eg__cuda_open_nvrtc(void) {
    pthread_once(&nvrtc.once, open_nvrtc);
    return problem_of(&nvrtc);
}

void eg__cuda_library_versions(char *out, size_t size) {
    char lt[96], dn[96], rtc[96];
    const char *problem = eg__cuda_open_blas_lt();
    if (problem) {
        snprintf(lt, sizeof lt, "cuBLASLt: %s", problem);
    } else {
        size_t v = eg__cuda_fn(cublasLtGetVersion)();
        snprintf(lt, sizeof lt, "cuBLASLt %zu.%zu.%zu", v / 10000, v / 100 % 100, v % 100);
    }
    problem = eg__cuda_open_dnn();
    if (problem) {
        snprintf(dn, sizeof dn, "cuDNN: %s", problem);
    } else {
        size_t v = eg__cuda_fn(cudnnGetVersion)();
        snprintf(dn, sizeof dn, "cuDNN %zu.%zu.%zu", v / 10000, v / 100 % 100, v % 100);
    }
    problem = eg__cuda_open_nvrtc();
    int major = 0, minor = 0;
    if (problem)
        snprintf(rtc, sizeof rtc, "NVRTC: %s", problem);
    else if (eg__cuda_fn(nvrtcVersion)(&major, &minor) == NVRTC_SUCCESS)
        snprintf(rtc, sizeof rtc, "NVRTC %d.%d", major, minor);
    else
        snprintf(rtc, sizeof rtc, "NVRTC (version unknown)");
    snprintf(out, size, "%s, %s, %s", lt, dn, rtc);
}
