/* bench_approx: the int8 products against the exact f32 ops on the shapes of the CNN's layers
 * (tools/eagle/cnn.c, an evaluation batch of 500), side by side in one run: median time of each,
 * the ratio, and the relative Frobenius error of the int8 result.
 *
 *   bench_approx [--threads N] [--repeat R] [--batch B]
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "eagle.h"

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int compare_doubles(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, compare_doubles);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static double relative_error(const eg_tensor *a, const eg_tensor *b) {
    int64_t n = eg_tensor_n_elems(b);
    const float *x = eg_tensor_data(a), *y = eg_tensor_data(b);
    double diff = 0, norm = 0;
    for (int64_t i = 0; i < n; i++) {
        diff += ((double)x[i] - y[i]) * ((double)x[i] - y[i]);
        norm += (double)y[i] * y[i];
    }
    return sqrt(diff / (norm > 0 ? norm : 1));
}

typedef struct layer {
    const char *name;
    bool conv;
    int64_t h, w, c_in, c_out; /* dense: h = in, c_out = out */
} layer;

int main(int argc, char **argv) {
    int threads = 1, repeat = 7;
    int64_t batch = 500;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--threads")) threads = atoi(argv[i + 1]);
        if (!strcmp(argv[i], "--repeat")) repeat = atoi(argv[i + 1]);
        if (!strcmp(argv[i], "--batch")) batch = atoll(argv[i + 1]);
    }
    if (threads < 1 || repeat < 1 || repeat > 100 || batch < 1) {
        fprintf(stderr, "usage: bench_approx [--threads N] [--repeat R] [--batch B]\n");
        return 2;
    }
    eg_set_num_threads(threads);
    const layer layers[] = {
        {"conv 28x28 1->32", true, 28, 28, 1, 32},   {"conv 28x28 32->32", true, 28, 28, 32, 32},
        {"conv 14x14 32->64", true, 14, 14, 32, 64}, {"conv 14x14 64->64", true, 14, 14, 64, 64},
        {"dense 3136->256", false, 3136, 0, 0, 256}, {"dense 256->10", false, 256, 0, 0, 10},
    };
    printf("int8 against f32, batch %lld, %d thread(s), median of %d\n", (long long)batch, threads,
           repeat);
    printf("%-20s %10s %10s %8s %10s\n", "layer", "f32 ms", "int8 ms", "speedup", "rel error");
    double total_f32 = 0, total_int8 = 0;
    eg_generator *g = eg_generator_new(1);
    for (size_t l = 0; l < sizeof layers / sizeof layers[0]; l++) {
        const layer *L = &layers[l];
        eg_scope_begin();
        eg_tensor *x, *w;
        if (L->conv) {
            x = eg_random_uniform(g, EG_DTYPE_F32, 4, (const int64_t[]){batch, L->h, L->w, L->c_in},
                                  0, 2);
            w = eg_random_normal(g, EG_DTYPE_F32, 4, (const int64_t[]){3, 3, L->c_in, L->c_out}, 0,
                                 0.1);
        } else {
            x = eg_random_uniform(g, EG_DTYPE_F32, 2, (const int64_t[]){batch, L->h}, 0, 2);
            w = eg_random_normal(g, EG_DTYPE_F32, 2, (const int64_t[]){L->h, L->c_out}, 0, 0.05);
        }
        eg_tensor *bias = eg_zeros(EG_DTYPE_F32, 1, (const int64_t[]){L->c_out});
        eg_tensor *scale = NULL;
        eg_tensor *q = eg_quantize_int8(w, 7, &scale);
        eg_conv2d_options o = {0};
        o.padding = EG_PADDING_SAME;
        double t_f32[100], t_int8[100];
        eg_tensor *exact = NULL, *approx = NULL;
        for (int r = 0; r < repeat; r++) {
            eg_release(exact);
            eg_release(approx);
            double t0 = now();
            exact = L->conv ? eg_conv2d(x, w, &o) : eg_dense(x, w, bias, EG_ACTIVATION_NONE);
            double t1 = now();
            approx = L->conv ? eg_conv2d_int8(x, q, scale, NULL, &o)
                             : eg_dense_int8(x, q, scale, bias, NULL, EG_ACTIVATION_NONE);
            double t2 = now();
            if (!exact || !approx) {
                fprintf(stderr, "bench_approx: %s\n", eg_last_error());
                return 1;
            }
            t_f32[r] = t1 - t0;
            t_int8[r] = t2 - t1;
        }
        double a = median(t_f32, repeat), b = median(t_int8, repeat);
        total_f32 += a;
        total_int8 += b;
        printf("%-20s %10.2f %10.2f %7.2fx %10.4f\n", L->name, 1e3 * a, 1e3 * b, a / b,
               relative_error(approx, exact));
        eg_scope_end();
    }
    printf("%-20s %10.2f %10.2f %7.2fx\n", "all products", 1e3 * total_f32, 1e3 * total_int8,
           total_f32 / total_int8);
    eg_generator_free(g);
    eg_shutdown();
    return 0;
}
