/* Convolution kernels on the CNN's layer shapes (tools/eagle/cnn.c, batch 64, NHWC, f32):
 * the forward convolution, the input gradient and the filter gradient, each with every algorithm
 * (im2col + OpenBLAS sgemm; the small direct AVX2 kernel; col2im for the input gradient; Eagle's
 * AVX2 and AVX-512 implicit GEMMs, conv_avx2.c and conv_avx512.c) and with the automatic choice.
 * Prints GFLOP/s (2 * multiply-adds per second) by wall time, by process CPU time (all threads'
 * together, so it is the rate per busy core; steadier on a shared machine) and by the fastest
 * single call's CPU time ("best", the least disturbed by other jobs on a loaded machine).
 *   bench_conv [--threads N] [--repeats N] [--batch N] [--only TEXT] [--interleave 1]
 * --only runs the rows whose "layer variant" name contains TEXT (e.g. "conv2 forward").
 * --interleave 1 runs the chosen variants of a layer in turns, one call each per round, and
 * prints each one's median and fastest call by CPU time: on a shared machine whose speed drifts
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
 * implicit GEMM (the AVX2 one where it does not apply) */
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
} variant;
static const variant variants[] = {
    {FORWARD, 1, "forward im2col+sgemm"},        {FORWARD, 2, "forward direct"},
    {FORWARD, 4, "forward avx2 igemm"},          {FORWARD, 5, "forward avx512 igemm"},
    {FORWARD, 0, "forward (auto)"},              {BACKWARD_INPUT, 1, "input im2col+sgemm"},
    {BACKWARD_INPUT, 3, "input col2im"},         {BACKWARD_INPUT, 4, "input avx2 igemm"},
    {BACKWARD_INPUT, 5, "input avx512 igemm"},   {BACKWARD_INPUT, 0, "input (auto)"},
    {BACKWARD_FILTER, 1, "filter im2col+sgemm"}, {BACKWARD_FILTER, 2, "filter direct"},
    {BACKWARD_FILTER, 4, "filter avx2 igemm"},   {BACKWARD_FILTER, 5, "filter avx512 igemm"},
    {BACKWARD_FILTER, 0, "filter (auto)"},
};

/* Runs one variant `repeats` times (after one warm-up) and prints its rates. */
static void run(const layer *l, int64_t batch, const variant *v, int repeats) {
    eg_scope_begin();
    eg_generator *gen = eg_generator_new(7);
    int64_t xs[4] = {batch, l->h, l->w, l->c}, ws[4] = {l->k, l->k, l->c, l->o};
    eg_tensor *x = eg_random_normal(gen, EG_DTYPE_F32, 4, xs, 0, 1);
    eg_tensor *w = eg_random_normal(gen, EG_DTYPE_F32, 4, ws, 0, 0.1);
    eg_conv2d_options o = {.padding = l->padding};
    eg_tensor *y = eg_conv2d(x, w, &o);
    eg_tensor *dy = eg_random_normal(gen, EG_DTYPE_F32, 4, eg_tensor_shape(y), 0, 1);
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

/* One layer's operands, shared by every variant of it. */
typedef struct operands {
    eg_tensor *x, *w, *dy;
    eg_conv2d_options o;
    eg__attrs attrs;
    int64_t xs[4];
    double flops; /* of one call */
} operands;

static void make_operands(const layer *l, int64_t batch, operands *p) {
    eg_generator *gen = eg_generator_new(7);
    int64_t xs[4] = {batch, l->h, l->w, l->c}, ws[4] = {l->k, l->k, l->c, l->o};
    memcpy(p->xs, xs, sizeof xs);
    p->x = eg_random_normal(gen, EG_DTYPE_F32, 4, xs, 0, 1);
    p->w = eg_random_normal(gen, EG_DTYPE_F32, 4, ws, 0, 0.1);
    p->o = (eg_conv2d_options){.padding = l->padding};
    eg_tensor *y = eg_conv2d(p->x, p->w, &p->o);
    p->dy = eg_random_normal(gen, EG_DTYPE_F32, 4, eg_tensor_shape(y), 0, 1);
    eg_generator_free(gen);
    eg__conv2d_attrs(&p->attrs, &p->o, xs, ws, "bench");
    p->attrs.n_dims = 4;
    memcpy(p->attrs.shape, ws, sizeof ws);
    p->flops = 2.0 * (double)eg_tensor_n_elems(y) * (double)(l->k * l->k * l->c);
}

/* CPU seconds of one call of variant v. */
static double time_call(const operands *p, const variant *v) {
    eg__conv_set_algorithm(v->algorithm);
    eg_scope_begin();
    double c0 = clock_of(CLOCK_PROCESS_CPUTIME_ID);
    eg_tensor *out = NULL;
    if (v->what == FORWARD) {
        out = eg_conv2d(p->x, p->w, &p->o);
    } else if (v->what == BACKWARD_INPUT) {
        out = eg_conv2d_transpose(p->dy, p->w, p->xs, &p->o);
    } else {
        const eg_tensor *in[2] = {p->x, p->dy};
        out = eg__execute(EG__OP_CONV2D_BACKWARD_FILTER, 2, in, &p->attrs);
    }
    if (!out) {
        fprintf(stderr, "bench_conv: %s\n", eg_last_error());
        exit(1);
    }
    double c = clock_of(CLOCK_PROCESS_CPUTIME_ID) - c0;
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
    enum { MAX_VARIANTS = sizeof variants / sizeof variants[0] };
    const variant *chosen[MAX_VARIANTS];
    int n = 0;
    for (int v = 0; v < MAX_VARIANTS; v++) {
        char name[64];
        snprintf(name, sizeof name, "%s %s", l->name, variants[v].name);
        if (!only || strstr(name, only)) chosen[n++] = &variants[v];
    }
    if (n == 0 || repeats < 1) return;
    eg_scope_begin();
    operands p;
    make_operands(l, batch, &p);
    double *cpu = malloc(sizeof(double) * (size_t)(n * repeats));
    if (!cpu) exit(1);
    for (int r = -1; r < repeats; r++)
        for (int v = 0; v < n; v++) {
            double c = time_call(&p, chosen[v]);
            if (r >= 0) cpu[v * repeats + r] = c;
        }
    for (int v = 0; v < n; v++) {
        double *c = cpu + v * repeats;
        qsort(c, (size_t)repeats, sizeof *c, by_value);
        printf("%-8s %-22s %8.2f cpu-ms median %8.1f GFLOP/s cpu/thread median %8.1f best\n",
               l->name, chosen[v]->name, 1e3 * c[repeats / 2], p.flops / c[repeats / 2] * 1e-9,
               p.flops / c[0] * 1e-9);
    }
    free(cpu);
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
    }
    eg_set_num_threads(threads);
    static const layer layers[] = {
        /* tools/eagle/cnn.c's convolutions, all 'same' */
        {"conv1", 28, 28, 1, 3, 32, EG_PADDING_SAME},
        {"conv2", 28, 28, 32, 3, 32, EG_PADDING_SAME},
        {"conv3", 14, 14, 32, 3, 64, EG_PADDING_SAME},
        {"conv4", 14, 14, 64, 3, 64, EG_PADDING_SAME},
    };
    printf("eagle conv2d, batch %lld, NHWC f32, %d thread(s), %d repeats%s, %s\n", (long long)batch,
           threads, repeats, interleave ? " interleaved" : "", eg_blas_info());
    if (interleave) {
        for (size_t l = 0; l < sizeof layers / sizeof layers[0]; l++)
            run_interleaved(&layers[l], batch, only, repeats);
        eg_shutdown();
        return 0;
    }
    for (size_t l = 0; l < sizeof layers / sizeof layers[0]; l++)
        for (size_t v = 0; v < sizeof variants / sizeof variants[0]; v++) {
            char name[64];
            snprintf(name, sizeof name, "%s %s", layers[l].name, variants[v].name);
            if (!only || strstr(name, only)) run(&layers[l], batch, &variants[v], repeats);
        }
    eg_shutdown();
    return 0;
}
