/* bench_modes_step MODE STEPS [HIDDEN] [BATCH] [THREADS]: runs the training step of
 * tools/eagle/mlp.c (`eagle bench modes`' step) STEPS times on one fixed synthetic batch in one
 * mode (eager, lazy or graph), on THREADS threads (default 1), and prints the summed loss. Made to
 * be counted by callgrind, where the data set's loading would drown the steps: valgrind
 * --tool=callgrind bench_modes_step lazy 200 The summed loss is the same in every mode (the modes
 * compute the same bits).
 *
 * MODE "all" runs the three modes round-robin, one step each in turn, and prints each mode's
 * median step time (CPU time of this thread) and the ratios to eager: on a shared, loaded
 * machine the three then meet the same conditions, which sequential runs do not. With more than
 * one thread the calling thread's CPU time misses the workers' share: the wall-clock medians
 * (also printed) are the measure then. */
#define _POSIX_C_SOURCE 199309L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mlp.h"

static double thread_cpu_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double wall_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int compare_doubles(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

enum { EAGER, LAZY, GRAPH, N_MODES };
static const char *const mode_names[N_MODES] = {"eager", "lazy", "graph"};

typedef struct runner {
    int mode;
    mlp_step_state state;
    eg_function *function;
    double total_loss;
    double *seconds, *wall;
} runner;

static bool runner_init(runner *r, int mode, const mlp_config *config, long steps) {
    eg_manual_seed(42); /* the same initial weights in every mode */
    r->mode = mode;
    r->state = (mlp_step_state){mlp_build(config), eg_adam_new(NULL), false};
    r->function = mode == GRAPH ? eg_function_new("train_step", mlp_step, 2, 2, &r->state) : NULL;
    r->total_loss = 0;
    r->seconds = malloc(sizeof *r->seconds * (size_t)steps);
    r->wall = malloc(sizeof *r->wall * (size_t)steps);
    return r->state.model && r->state.optimizer && r->seconds && r->wall &&
           (mode != GRAPH || r->function);
}

static bool runner_step(runner *r, long step, eg_tensor *x, eg_tensor *y) {
    eg_scope_begin();
    eg_tensor *in[2] = {x, y};
    eg_tensor *out[2] = {NULL, NULL};
    double t0 = thread_cpu_seconds(), w0 = wall_seconds();
    eg_status status;
    if (r->mode == GRAPH) {
        status = eg_function_call(r->function, in, out);
    } else {
        if (r->mode == LAZY) eg_lazy_begin();
        status = mlp_step(in, out, &r->state);
        if (r->mode == LAZY) eg_lazy_end();
    }
    double loss = status == EG_OK ? eg_item(out[0]) : 0; /* part of every step */
    r->seconds[step] = thread_cpu_seconds() - t0;
    r->wall[step] = wall_seconds() - w0;
    r->total_loss += loss;
    eg_scope_end();
    if (status != EG_OK)
        fprintf(stderr, "%s step %ld: %s\n", mode_names[r->mode], step, eg_last_error());
    return status == EG_OK;
}

static void runner_free(runner *r) {
    eg_function_free(r->function);
    eg_optimizer_free(r->state.optimizer);
    eg_model_free(r->state.model);
    free(r->seconds);
    free(r->wall);
}

/* The q-quantile (0.5: the median); sorts values. */
static double quantile(double *values, long n, double q) {
    qsort(values, (size_t)n, sizeof *values, compare_doubles);
    return values[(long)(q * (double)n)];
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(
            stderr,
            "usage: %s eager|lazy|graph|all STEPS [HIDDEN e.g. 64 or 512,512] [BATCH] [THREADS]\n",
            argv[0]);
        return 2;
    }
    long steps = atol(argv[2]);
    mlp_config config = {1, {64}};
    if (argc > 3 && !mlp_parse_hidden(argv[3], &config)) return 2;
    int64_t batch = argc > 4 ? atol(argv[4]) : 32;
    int threads = argc > 5 ? atoi(argv[5]) : 1;
    int first = -1, last = -1;
    for (int m = 0; m < N_MODES; m++)
        if (!strcmp(argv[1], mode_names[m])) first = last = m;
    if (!strcmp(argv[1], "all")) first = 0, last = N_MODES - 1;
    if (first < 0 || steps < 1 || batch < 1 || eg_set_num_threads(threads) != EG_OK) return 2;
    eg_manual_seed(7);
    int64_t x_shape[2] = {batch, 784};
    eg_tensor *x = eg_random_uniform(NULL, EG_DTYPE_F32, 2, x_shape, 0.0, 1.0);
    int64_t *labels = malloc(sizeof *labels * (size_t)batch);
    for (int64_t i = 0; labels && i < batch; i++) labels[i] = (i * 7) % 10;
    eg_tensor *y = labels ? eg_tensor_from_data(labels, EG_DTYPE_I64, 1, &batch) : NULL;
    runner runners[N_MODES];
    bool ok = x && y;
    for (int m = first; m <= last; m++) ok = runner_init(&runners[m], m, &config, steps) && ok;
    if (!ok) {
        fprintf(stderr, "set-up failed: %s\n", eg_last_error());
        return 1;
    }
    for (long step = 0; step < steps && ok; step++)
        for (int m = first; m <= last && ok; m++) ok = runner_step(&runners[m], step, x, y);
    if (!ok) return 1;
    double medians[N_MODES], walls[N_MODES], fast_walls[N_MODES];
    for (int m = first; m <= last; m++) {
        medians[m] = quantile(runners[m].seconds, steps, 0.5) * 1e6;
        walls[m] = quantile(runners[m].wall, steps, 0.5) * 1e6;
        fast_walls[m] = quantile(runners[m].wall, steps, 0.1) * 1e6;
        printf("%s: %ld steps, summed loss %.6f", mode_names[m], steps, runners[m].total_loss);
        if (first != last)
            printf(", median step %.1f us cpu, %.1f us wall (10%% of steps under %.1f us)",
                   medians[m], walls[m], fast_walls[m]);
        printf("\n");
    }
    if (first != last) {
        printf("lazy/eager %.3fx, graph/eager %.3fx (medians of per-step thread CPU time, %d "
               "thread%s)\n",
               medians[LAZY] / medians[EAGER], medians[GRAPH] / medians[EAGER], threads,
               threads > 1 ? "s: the workers' share is not counted" : "");
        printf("lazy/eager %.3fx, graph/eager %.3fx (medians of per-step wall time; 10th "
               "percentiles %.3fx, %.3fx)\n",
               walls[LAZY] / walls[EAGER], walls[GRAPH] / walls[EAGER],
               fast_walls[LAZY] / fast_walls[EAGER], fast_walls[GRAPH] / fast_walls[EAGER]);
    }
    for (int m = first; m <= last; m++) runner_free(&runners[m]);
    eg_release(x);
    eg_release(y);
    free(labels);
    return 0;
}
