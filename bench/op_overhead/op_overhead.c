#define _POSIX_C_SOURCE 200809L
/* Eager dispatch cost of small ops and of a small MLP training step, as Eagle users pay it:
 * each iteration calls the op and releases its result. Prints one line per measurement:
 *   name median_wall_ns median_cpu_ns system_allocs_during_timed_loops
 * per iteration, medians over 9 repetitions. `bench_op_overhead THREADS seed` adds the seed
 * model's ops one by one, at its shapes. The CPU time is this thread's
 * (CLOCK_THREAD_CPUTIME_ID): on a machine shared with other jobs it leaves out the time the thread
 * waited for a core. */
#include <eagle.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double clock_ns(clockid_t clock) {
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static int compare_doubles(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static uint64_t system_allocs(void) {
    eg_memory_stats stats;
    eg_memory_stats_get(NULL, &stats);
    return stats.n_system_allocs;
}

typedef void (*body_fn)(void *context);

/* Median ns per call of body over `repeats` timed loops of `iterations` calls. */
static void measure(const char *name, body_fn body, void *context, int iterations) {
    enum { REPEATS = 9 };
    double samples[REPEATS], cpu_samples[REPEATS];
    for (int i = 0; i < iterations / 10 + 1; i++) body(context); /* warm up the caches */
    uint64_t allocs_before = system_allocs();
    for (int r = 0; r < REPEATS; r++) {
        double start = clock_ns(CLOCK_MONOTONIC), cpu_start = clock_ns(CLOCK_THREAD_CPUTIME_ID);
        for (int i = 0; i < iterations; i++) body(context);
        samples[r] = (clock_ns(CLOCK_MONOTONIC) - start) / iterations;
        cpu_samples[r] = (clock_ns(CLOCK_THREAD_CPUTIME_ID) - cpu_start) / iterations;
    }
    uint64_t allocs = system_allocs() - allocs_before;
    qsort(samples, REPEATS, sizeof *samples, compare_doubles);
    qsort(cpu_samples, REPEATS, sizeof *cpu_samples, compare_doubles);
    printf("%-28s %10.1f ns %10.1f cpu-ns  %llu system allocations in %d calls\n", name,
           samples[REPEATS / 2], cpu_samples[REPEATS / 2], (unsigned long long)allocs,
           REPEATS * iterations);
    if (eg_last_status() != EG_OK) {
        fprintf(stderr, "error: %s\n", eg_last_error());
        exit(1);
    }
}

typedef struct binary_case {
    eg_tensor *a, *b;
} binary_case;

static void add_body(void *context) {
    binary_case *c = context;
    eg_release(eg_add(c->a, c->b));
}

static void matmul_body(void *context) {
    binary_case *c = context;
    eg_release(eg_matmul(c->a, c->b));
}

typedef struct mlp_case {
    eg_tensor *x, *labels, *w1, *b1, *w2, *b2;
} mlp_case;

/* Forward, loss, tape gradient and a plain SGD update with eg_assign_sub. */
static void mlp_body(void *context) {
    mlp_case *c = context;
    eg_scope_begin();
    eg_tape *tape = eg_tape_begin(false);
    eg_tensor *hidden = eg_relu(eg_add(eg_matmul(c->x, c->w1), c->b1));
    eg_tensor *logits = eg_add(eg_matmul(hidden, c->w2), c->b2);
    eg_tensor *loss = eg_mean(eg_sparse_softmax_cross_entropy(logits, c->labels), 0, NULL, false);
    eg_tensor *sources[4] = {c->w1, c->b1, c->w2, c->b2};
    eg_tensor *grads[4];
    eg_tape_gradient(tape, loss, 4, sources, grads, EG_UNCONNECTED_ZERO);
    eg_tape_free(tape);
    eg_tensor *vars[4] = {c->w1, c->b1, c->w2, c->b2};
    for (int i = 0; i < 4; i++) eg_assign_sub(vars[i], eg_mul_scalar(grads[i], 0.01));
    eg_scope_end();
}

/* The seed model's pieces one by one, at its shapes (batch 32, 784-64-10): what each op of its
 * step costs alone, for a budget of the step (bench_modes_step times the whole). */
typedef struct seed_case {
    eg_tensor *x, *labels, *w1, *b1, *hidden, *w2, *logits, *dlogits, *dhidden;
} seed_case;

static void seed_dense1(void *context) {
    seed_case *c = context;
    eg_release(eg_relu(eg_add(eg_matmul(c->x, c->w1), c->b1)));
}
static void seed_dense1_dw(void *context) { /* x^T dhidden */
    seed_case *c = context;
    eg_release(eg_matmul_ex(c->x, c->dhidden, true, false));
}
static void seed_dense2(void *context) {
    seed_case *c = context;
    eg_release(eg_matmul(c->hidden, c->w2));
}
static void seed_xent(void *context) {
    seed_case *c = context;
    eg_release(eg_sparse_softmax_cross_entropy(c->logits, c->labels));
}
static void seed_loss(void *context) { /* what mlp_step calls: the Keras loss, mean-reduced */
    seed_case *c = context;
    eg_release(
        eg_loss_sparse_categorical_crossentropy(c->labels, c->logits, true, EG_REDUCTION_MEAN));
}
static void seed_softmax(void *context) {
    seed_case *c = context;
    eg_release(eg_softmax(c->logits, 1));
}
static void seed_accuracy(void *context) { /* mlp_step's hits */
    seed_case *c = context;
    eg_scope_begin();
    eg_sum(eg_metric_sparse_categorical_accuracy(c->labels, c->logits), 0, NULL, false);
    eg_scope_end();
}
static void seed_bias_grad(void *context) {
    seed_case *c = context;
    eg_release(eg_sum(c->dhidden, 1, (int[]){0}, false));
}
static void seed_relu_grad(void *context) {
    seed_case *c = context;
    eg_scope_begin();
    eg_tape *tape = eg_tape_begin(false);
    eg_tensor *y = eg_relu(c->hidden);
    eg_tensor *grad;
    eg_tensor *sources[1] = {c->hidden};
    eg_tape_gradient_ex(tape, y, c->dhidden, 1, sources, &grad, EG_UNCONNECTED_ZERO);
    eg_tape_free(tape);
    eg_scope_end();
}

static void measure_seed_pieces(void) {
    eg_manual_seed(2);
    int64_t xs[2] = {32, 784}, w1s[2] = {784, 64}, b1s = 64, hs[2] = {32, 64}, w2s[2] = {64, 10},
            ls[2] = {32, 10}, batch = 32;
    seed_case c;
    c.x = eg_random_uniform(NULL, EG_DTYPE_F32, 2, xs, 0, 1);
    c.labels = eg_cast(eg_random_uniform(NULL, EG_DTYPE_F32, 1, &batch, 0, 10), EG_DTYPE_I64);
    c.w1 = eg_random_normal(NULL, EG_DTYPE_F32, 2, w1s, 0, 0.05);
    c.b1 = eg_zeros(EG_DTYPE_F32, 1, &b1s);
    c.hidden = eg_random_normal(NULL, EG_DTYPE_F32, 2, hs, 0, 1);
    c.w2 = eg_random_normal(NULL, EG_DTYPE_F32, 2, w2s, 0, 0.05);
    c.logits = eg_random_normal(NULL, EG_DTYPE_F32, 2, ls, 0, 3);
    c.dlogits = eg_random_normal(NULL, EG_DTYPE_F32, 2, ls, 0, 0.1);
    c.dhidden = eg_random_normal(NULL, EG_DTYPE_F32, 2, hs, 0, 0.1);
    measure("seed: dense 1 fwd", seed_dense1, &c, 5000);
    measure("seed: dense 1 dW (x^T dy)", seed_dense1_dw, &c, 5000);
    measure("seed: matmul 32x64x10", seed_dense2, &c, 50000);
    measure("seed: sparse xent (32,10)", seed_xent, &c, 50000);
    measure("seed: keras loss, mean", seed_loss, &c, 50000);
    measure("seed: softmax (32,10)", seed_softmax, &c, 50000);
    measure("seed: accuracy, summed", seed_accuracy, &c, 50000);
    measure("seed: bias grad (32,64)", seed_bias_grad, &c, 50000);
    measure("seed: relu fwd+bwd (32,64)", seed_relu_grad, &c, 50000);
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 1;
    eg_set_num_threads(threads);
    printf("eagle %s, %d thread(s), %s allocator\n", eg_version(), threads,
           eg_memory_allocator_name(NULL));
    int64_t one = 1, n64 = 64, s8[2] = {8, 8};
    binary_case add1 = {eg_ones(EG_DTYPE_F32, 1, &one), eg_ones(EG_DTYPE_F32, 1, &one)};
    binary_case add64 = {eg_ones(EG_DTYPE_F32, 1, &n64), eg_ones(EG_DTYPE_F32, 1, &n64)};
    binary_case mm8 = {eg_ones(EG_DTYPE_F32, 2, s8), eg_ones(EG_DTYPE_F32, 2, s8)};
    measure("add 1 element", add_body, &add1, 200000);
    measure("add 64 elements", add_body, &add64, 200000);
    measure("matmul 8x8", matmul_body, &mm8, 100000);

    eg_manual_seed(1);
    int64_t xs[2] = {32, 784}, w1s[2] = {784, 64}, b1s = 64, w2s[2] = {64, 10}, b2s = 10,
            batch = 32;
    mlp_case mlp;
    mlp.x = eg_random_uniform(NULL, EG_DTYPE_F32, 2, xs, 0, 1);
    mlp.labels = eg_cast(eg_mul_scalar(eg_random_uniform(NULL, EG_DTYPE_F32, 1, &batch, 0, 10), 1),
                         EG_DTYPE_I32);
    mlp.w1 = eg_variable(eg_random_normal(NULL, EG_DTYPE_F32, 2, w1s, 0, 0.05), "w1");
    mlp.b1 = eg_variable(eg_zeros(EG_DTYPE_F32, 1, &b1s), "b1");
    mlp.w2 = eg_variable(eg_random_normal(NULL, EG_DTYPE_F32, 2, w2s, 0, 0.05), "w2");
    mlp.b2 = eg_variable(eg_zeros(EG_DTYPE_F32, 1, &b2s), "b2");
    measure("mlp 784-64-10 b32 step", mlp_body, &mlp, 2000);
    if (argc > 2 && !strcmp(argv[2], "seed")) measure_seed_pieces();
    return 0;
}
