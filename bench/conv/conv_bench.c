/* Convolution kernels on the CNN's layer shapes (tools/eagle/cnn.c, batch 64, NHWC, f32 or, with
 * --dtype, bf16 / f16: the AMX kernels (conv_amx.c) and the f32 ones on widened copies):
 * the forward convolution, the input gradient and the filter gradient, each with every algorithm
 * (im2col + OpenBLAS sgemm; the small direct AVX2 kernel; col2im for the input gradient; Eagle's
 * AVX2 and AVX-512 implicit GEMMs, conv_avx2.c and conv_avx512.c) and with the automatic choice.
 * Prints GFLOP/s (2 * multiply-adds per second) by wall time, by process CPU time (all threads'
 * together, so it is the rate per busy core; steadier on a shared machine) and by the fastest
 * single call's CPU time ("best", the least disturbed by other jobs on a loaded machine).
 *   bench_conv [--threads N] [--repeats N] [--batch N] [--only TEXT] [--interleave 1]
 *              [--dtype f32|bf16|f16]
 * --only runs the rows whose "layer variant" name contains TEXT (e.g. "conv2 forward").
 * --interleave 1 runs the chosen variants of a layer in turns, one call each per round, and
 * prints each one's median wall and CPU time and fastest call by CPU time: on a shared machine
 * whose speed drifts
 * by tens of percent from one minute to the next, the way to compare two variants (a change
 * against the code before it, two algorithms). */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "eagle.h"
#include "api/internal.h"

/* 0 auto, 1 im2col + GEMM, 2 direct, 3 col2im input gradient, 4 AVX2 implicit GEMM, 5 AVX-512
 * implicit GEMM (the AVX2 one where it does not apply); for bf16 / f16, 6 AMX where it applies,
 * 7 the f32 kernels reading the format where they can, 8 on widened copies */
void eg__conv_set_algorithm(int algorithm);

static double clock_of(clockid_t id) {
    struct timespec t;
    clock_gettime(id, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

typedef struct layer {
    const char *name;
    int64_t h, w, c, k, o;
    eg_padding padding;
} layer;

typedef enum { FORWARD, BACKWARD_INPUT, BACKWARD_FILTER } pass;
/* Each pass with each algorithm eg__conv_set_algorithm forces (0: the automatic choice). */
typedef struct variant {
    pass what;
    int algorithm;
    const char *name;
    bool f32; /* with --dtype bf16 / f16: the same op on f32 copies, for the ratio */
} variant;
static const variant variants[] = {
    {FORWARD, 1, "forward im2col+sgemm", false},
    {FORWARD, 2, "forward direct", false},
    {FORWARD, 4, "forward avx2 igemm", false},
    {FORWARD, 5, "forward avx512 igemm", false},
    {FORWARD, 0, "forward (auto)", false},
    {BACKWARD_INPUT, 1, "input im2col+sgemm", false},
    {BACKWARD_INPUT, 3, "input col2im", false},
    {BACKWARD_INPUT, 4, "input avx2 igemm", false},
    {BACKWARD_INPUT, 5, "input avx512 igemm", false},
    {BACKWARD_INPUT, 0, "input (auto)", false},
    {BACKWARD_FILTER, 1, "filter im2col+sgemm", false},
    {BACKWARD_FILTER, 2, "filter direct", false},
    {BACKWARD_FILTER, 4, "filter avx2 igemm", false},
    {BACKWARD_FILTER, 5, "filter avx512 igemm", false},
    {BACKWARD_FILTER, 0, "filter (auto)", false},
};
/* bf16 and f16: AMX; the f32 kernels' own choice (AVX-512 or AVX2 by the level) reading the
 * format, and on widened copies; the automatic choice; and the f32 op itself (interleaved with
 * the others: the ratio). */
static const variant lowp_variants[] = {
    {FORWARD, 6, "forward amx", false},
    {FORWARD, 7, "forward f32 kernels", false},
    {FORWARD, 8, "forward widened", false},
    {FORWARD, 0, "forward (auto)", false},
    {FORWARD, 0, "forward f32", true},
    {BACKWARD_INPUT, 6, "input amx", false},
    {BACKWARD_INPUT, 7, "input f32 kernels", false},
    {BACKWARD_INPUT, 8, "input widened", false},
    {BACKWARD_INPUT, 0, "input (auto)", false},
    {BACKWARD_INPUT, 0, "input f32", true},
    {BACKWARD_FILTER, 6, "filter amx", false},
    {BACKWARD_FILTER, 7, "filter f32 kernels", false},
    {BACKWARD_FILTER, 8, "filter widened", false},
    {BACKWARD_FILTER, 0, "filter (auto)", false},
    {BACKWARD_FILTER, 0, "filter f32", true},
};
static const variant *variant_list = variants;
static size_t n_variants = sizeof variants / sizeof variants[0];
static eg_dtype dtype = EG_DTYPE_F32;

/* A normal draw in the benchmark's dtype. */
static eg_tensor *random_tensor(eg_generator *gen, const int64_t *shape, double stddev) {
    eg_tensor *t = eg_random_normal(gen, EG_DTYPE_F32, 4, shape, 0, stddev);
    return dtype == EG_DTYPE_F32 ? t : eg_cast(t, dtype);
}

/* Runs one variant `repeats` times (after one warm-up) and prints its rates. */
static void run(const layer *l, int64_t batch, const variant *v, int repeats) {
    eg_scope_begin();
    eg_generator *gen = eg_generator_new(7);
    int64_t xs[4] = {batch, l->h, l->w, l->c}, ws[4] = {l->k, l->k, l->c, l->o};
    eg_tensor *x = random_tensor(gen, xs, 1);
    eg_tensor *w = random_tensor(gen, ws, 0.1);
    eg_conv2d_options o = {.padding = l->padding};
    eg_tensor *y = eg_conv2d(x, w, &o);
    eg_tensor *dy = random_tensor(gen, eg_tensor_shape(y), 1);
    eg_generator_free(gen);
    eg__attrs attrs;
    eg__conv2d_attrs(&attrs, &o, xs, ws, "bench");
    attrs.n_dims = 4;
    memcpy(attrs.shape, ws, sizeof ws);
    eg__conv_set_algorithm(v->algorithm);
    double wall = 0, cpu = 0, cpu_best = 1e300;
    for (int r = -1; r < repeats; r++) {
        eg_scope_begin();
        double w0 = clock_of(CLOCK_MONOTONIC), c0 = clock_of(CLOCK_PROCESS_CPUTIME_ID);
        eg_tensor *out = NULL;
        if (v->what == FORWARD) {
            out = eg_conv2d(x, w, &o);
        } else if (v->what == BACKWARD_INPUT) {
            out = eg_conv2d_transpose(dy, w, xs, &o);
        } else {
            const eg_tensor *in[2] = {x, dy};
            out = eg__execute(EG__OP_CONV2D_BACKWARD_FILTER, 2, in, &attrs);
        }
        if (!out) {
            fprintf(stderr, "bench_conv: %s\n", eg_last_error());
            exit(1);
        }
        if (r >= 0) {
            wall += clock_of(CLOCK_MONOTONIC) - w0;
            double c = clock_of(CLOCK_PROCESS_CPUTIME_ID) - c0;
            cpu += c;
            if (c < cpu_best) cpu_best = c;
        }
        eg_scope_end();
    }
    double flops = 2.0 * (double)eg_tensor_n_elems(y) * (double)(l->k * l->k * l->c) * repeats;
    printf("%-8s %-22s %8.2f ms %8.1f GFLOP/s wall %8.1f GFLOP/s cpu/thread %8.1f best\n", l->name,
           v->name, 1e3 * wall / repeats, flops / wall * 1e-9, flops / cpu * 1e-9,
           flops / repeats / cpu_best * 1e-9);
    eg__conv_set_algorithm(0);
    eg_scope_end();
}

/* One layer's operands, shared by every variant of it (x32 ...: f32 copies). */
typedef struct operands {
    eg_tensor *x, *w, *dy, *x32, *w32, *dy32;
    eg_conv2d_options o;
    eg__attrs attrs;
    int64_t xs[4];
    double flops; /* of one call */
} operands;

static void make_operands(const layer *l, int64_t batch, operands *p) {
    eg_generator *gen = eg_generator_new(7);
    int64_t xs[4] = {batch, l->h, l->w, l->c}, ws[4] = {l->k, l->k, l->c, l->o};
    memcpy(p->xs, xs, sizeof xs);
    p->x = random_tensor(gen, xs, 1);
    p->w = random_tensor(gen, ws, 0.1);
    p->o = (eg_conv2d_options){.padding = l->padding};
    eg_tensor *y = eg_conv2d(p->x, p->w, &p->o);
    p->dy = random_tensor(gen, eg_tensor_shape(y), 1);
    p->x32 = eg_cast(p->x, EG_DTYPE_F32);
    p->w32 = eg_cast(p->w, EG_DTYPE_F32);
    p->dy32 = eg_cast(p->dy, EG_DTYPE_F32);
    eg_generator_free(gen);
    eg__conv2d_attrs(&p->attrs, &p->o, xs, ws, "bench");
    p->attrs.n_dims = 4;
    memcpy(p->attrs.shape, ws, sizeof ws);
    p->flops = 2.0 * (double)eg_tensor_n_elems(y) * (double)(l->k * l->k * l->c);
}

/* CPU seconds of one call of variant v (and its wall seconds in *wall). */
static double time_call(const operands *p, const variant *v, double *wall) {
    eg__conv_set_algorithm(v->algorithm);
    eg_scope_begin();
    const eg_tensor *x = v->f32 ? p->x32 : p->x, *w = v->f32 ? p->w32 : p->w;
    const eg_tensor *dy = v->f32 ? p->dy32 : p->dy;
    double w0 = clock_of(CLOCK_MONOTONIC), c0 = clock_of(CLOCK_PROCESS_CPUTIME_ID);
    eg_tensor *out = NULL;
    if (v->what == FORWARD) {
        out = eg_conv2d(x, w, &p->o);
    } else if (v->what == BACKWARD_INPUT) {
        out = eg_conv2d_transpose(dy, w, p->xs, &p->o);
    } else {
        const eg_tensor *in[2] = {x, dy};
        out = eg__execute(EG__OP_CONV2D_BACKWARD_FILTER, 2, in, &p->attrs);
    }
    if (!out) {
        fprintf(stderr, "bench_conv: %s\n", eg_last_error());
        exit(1);
    }
    double c = clock_of(CLOCK_PROCESS_CPUTIME_ID) - c0;
    *wall = clock_of(CLOCK_MONOTONIC) - w0;
    eg_scope_end();
    eg__conv_set_algorithm(0);
    return c;
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The chosen variants of layer l in turns, `repeats` rounds after a warm-up round. */
static void run_interleaved(const layer *l, int64_t batch, const char *only, int repeats) {
    enum { MAX_VARIANTS = sizeof lowp_variants / sizeof lowp_variants[0] };
    const variant *chosen[MAX_VARIANTS];
    int n = 0;
    for (size_t v = 0; v < n_variants; v++) {
        char name[64];
        snprintf(name, sizeof name, "%s %s", l->name, variant_list[v].name);
        if (!only || strstr(name, only)) chosen[n++] = &variant_list[v];
    }
    if (n == 0 || repeats < 1) return;
    eg_scope_begin();
    operands p;
    make_operands(l, batch, &p);
    double *cpu = malloc(sizeof(double) * (size_t)(n * repeats));
    double *wall = malloc(sizeof(double) * (size_t)(n * repeats));
    if (!cpu || !wall) exit(1);
    for (int r = -1; r < repeats; r++)
        for (int v = 0; v < n; v++) {
            double w;
            double c = time_call(&p, chosen[v], &w);
            if (r >= 0) {
                cpu[v * repeats + r] = c;
                wall[v * repeats + r] = w;
            }
        }
    for (int v = 0; v < n; v++) {
        double *c = cpu + v * repeats, *w = wall + v * repeats;
        qsort(c, (size_t)repeats, sizeof *c, by_value);
        qsort(w, (size_t)repeats, sizeof *w, by_value);
        printf("%-8s %-22s %8.3f wall-ms median %8.3f cpu-ms median %8.1f GFLOP/s cpu/thread "
               "median %8.1f best\n",
               l->name, chosen[v]->name, 1e3 * w[repeats / 2], 1e3 * c[repeats / 2],
               p.flops / c[repeats / 2] * 1e-9, p.flops / c[0] * 1e-9);
    }
    free(cpu);
    free(wall);
    eg_scope_end();
}

int main(int argc, char **argv) {
    int threads = 1, repeats = 10, interleave = 0;
    int64_t batch = 64;
    const char *only = NULL;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--threads"))
            threads = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--repeats"))
            repeats = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--batch"))
            batch = atoll(argv[i + 1]);
        else if (!strcmp(argv[i], "--only"))
            only = argv[i + 1];
        else if (!strcmp(argv[i], "--interleave"))
            interleave = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--dtype")) {
            dtype = !strcmp(argv[i + 1], "bf16")  ? EG_DTYPE_BF16
                    : !strcmp(argv[i + 1], "f16") ? EG_DTYPE_F16
                                                  : EG_DTYPE_F32;
        }
    }
    if (dtype != EG_DTYPE_F32) {
        variant_list = lowp_variants;
        n_variants = sizeof lowp_variants / sizeof lowp_variants[0];
    }
    eg_set_num_threads(threads);
    static const layer layers[] = {
        /* tools/eagle/cnn.c's convolutions, all 'same' */
        {"conv1", 28, 28, 1, 3, 32, EG_PADDING_SAME},
        {"conv2", 28, 28, 32, 3, 32, EG_PADDING_SAME},
        {"conv3", 14, 14, 32, 3, 64, EG_PADDING_SAME},
        {"conv4", 14, 14, 64, 3, 64, EG_PADDING_SAME},
    };
    printf("eagle conv2d, batch %lld, NHWC %s, %d thread(s), %d repeats%s, %s\n", (long long)batch,
           eg_dtype_name(dtype), threads, repeats, interleave ? " interleaved" : "",
           eg_blas_info());
    if (interleave) {
        for (size_t l = 0; l < sizeof layers / sizeof layers[0]; l++)
            run_interleaved(&layers[l], batch, only, repeats);
        eg_shutdown();
        return 0;
    }
    for (size_t l = 0; l < sizeof layers / sizeof layers[0]; l++)
        for (size_t v = 0; v < n_variants; v++) {
            char name[64];
            snprintf(name, sizeof name, "%s %s", layers[l].name, variant_list[v].name);
            if (!only || strstr(name, only)) run(&layers[l], batch, &variant_list[v], repeats);
        }
    eg_shutdown();
    return 0;
}
