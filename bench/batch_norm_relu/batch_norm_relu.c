/* The CNN training step's batch normalization + ReLU work (tools/eagle/cnn.c: four Conv-BN-ReLU
 * blocks and Dense(256)-BN-ReLU, batch 64), unfused (eg_batch_norm_training, then eg_relu; the
 * tape runs relu_backward and batch norm's two fused backward passes) against fused
 * (eg_batch_norm_training_activation: relu inside batch norm's passes), in turns in one process:
 * forward and the tape's backward (gradients for x, scale, offset from a given output gradient)
 * at the five layers' shapes. Prints the median and fastest process CPU time per step of each
 * and their ratio (CPU time: steady on a shared machine; the two runs in turns are comparable).
 *   bench_batch_norm_relu [THREADS [REPS]]     (defaults 1 and 15) */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "eagle.h"

#define LAYERS 5

static double cpu_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 1, reps = argc > 2 ? atoi(argv[2]) : 15;
    if (threads < 1 || reps < 1 || eg_set_num_threads(threads) != EG_OK) {
        fprintf(stderr, "usage: bench_batch_norm_relu [THREADS [REPS]] (both >= 1)\n");
        return 2;
    }
    /* conv1, conv2: (64, 28, 28, 32); conv3, conv4: (64, 14, 14, 64); dense: (64, 256) */
    static const int64_t shapes[LAYERS][4] = {
        {64, 28, 28, 32}, {64, 28, 28, 32}, {64, 14, 14, 64}, {64, 14, 14, 64}, {64, 256, 0, 0}};
    eg_generator *gen = eg_generator_new(7);
    eg_tensor *x[LAYERS], *g[LAYERS], *scale[LAYERS], *offset[LAYERS];
    int n_dims[LAYERS];
    for (int l = 0; l < LAYERS; l++) {
        n_dims[l] = shapes[l][2] ? 4 : 2;
        int64_t c = shapes[l][n_dims[l] - 1];
        x[l] = eg_random_normal(gen, EG_DTYPE_F32, n_dims[l], shapes[l], 0, 1);
        g[l] = eg_random_normal(gen, EG_DTYPE_F32, n_dims[l], shapes[l], 0, 1);
        eg_tensor *s = eg_random_normal(gen, EG_DTYPE_F32, 1, &c, 1, 0.1);
        eg_tensor *o = eg_random_normal(gen, EG_DTYPE_F32, 1, &c, 0, 0.1);
        scale[l] = eg_variable(s, "scale"); /* copies */
        offset[l] = eg_variable(o, "offset");
        eg_release(s);
        eg_release(o);
    }
    eg_generator_free(gen);
    double *times[2] = {malloc(sizeof(double) * (size_t)reps),
                        malloc(sizeof(double) * (size_t)reps)};
    if (!times[0] || !times[1]) return 1;
    for (int r = -2; r < reps; r++) /* two warm-up rounds */
        for (int fused = 0; fused < 2; fused++) {
            double start = cpu_seconds();
            eg_scope_begin();
            for (int l = 0; l < LAYERS; l++) {
                int axes[3] = {0, 1, 2}, n_axes = n_dims[l] - 1;
                eg_tape *tape = eg_tape_begin(false);
                eg_tape_watch(tape, x[l]);
                eg_tensor *y =
                    fused
                        ? eg_batch_norm_training_activation(x[l], n_axes, axes, offset[l], scale[l],
                                                            1e-3, EG_ACTIVATION_RELU, NULL, NULL)
                        : eg_relu(eg_batch_norm_training(x[l], n_axes, axes, offset[l], scale[l],
                                                         1e-3, NULL, NULL));
                eg_tensor *sources[3] = {x[l], scale[l], offset[l]};
                eg_tensor *grads[3];
                if (eg_tape_gradient_ex(tape, y, g[l], 3, sources, grads, EG_UNCONNECTED_ZERO) !=
                    EG_OK) {
                    fprintf(stderr, "bench_batch_norm_relu: %s\n", eg_last_error());
                    return 1;
                }
                eg_tape_free(tape);
            }
            eg_scope_end();
            if (r >= 0) times[fused][r] = cpu_seconds() - start;
        }
    for (int f = 0; f < 2; f++) qsort(times[f], (size_t)reps, sizeof(double), by_value);
    printf("%d thread(s), %d turns, process CPU ms per step's five batch norm + relu (forward and "
           "backward):\n",
           threads, reps);
    printf("  unfused  median %7.2f  fastest %7.2f\n", 1e3 * times[0][reps / 2], 1e3 * times[0][0]);
    printf("  fused    median %7.2f  fastest %7.2f\n", 1e3 * times[1][reps / 2], 1e3 * times[1][0]);
    printf("  fused / unfused (medians) %.3f\n", times[1][reps / 2] / times[0][reps / 2]);
    for (int l = 0; l < LAYERS; l++) {
        eg_release(scale[l]);
        eg_release(offset[l]);
        eg_release(x[l]);
        eg_release(g[l]);
    }
    free(times[0]);
    free(times[1]);
    eg_shutdown();
    return 0;
}
