/* The CPU thread pool: results are bitwise identical for 1, 2 and 4 threads (elementwise ops,
 * reductions, softmax, matmul), ops called from several user threads at once (each with its own
 * scopes, tapes and errors) are correct, and bad thread counts are refused. Runs under TSan in
 * CI (label "threads"). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "eagle.h"
#include "test_util.h"

/* ---- helpers ---------------------------------------------------------------------------- */

static int original_threads;

static int group_setup(void **state) {
    (void)state;
    original_threads = eg_get_num_threads();
    return 0;
}

static int group_teardown(void **state) {
    (void)state;
    return eg_set_num_threads(original_threads) == EG_OK ? 0 : -1;
}

/* The bytes of a tensor in row-major order (malloc'd). */
typedef struct snapshot {
    void *bytes;
    size_t size;
} snapshot;

static snapshot take(const eg_tensor *t) {
    assert_non_null(t);
    snapshot s;
    s.size = (size_t)eg_tensor_n_elems(t) * eg_dtype_size(eg_tensor_dtype(t));
    s.bytes = malloc(s.size ? s.size : 1);
    assert_non_null(s.bytes);
    assert_int_equal(eg_tensor_copy_to_host(t, s.bytes, s.size), EG_OK);
    return s;
}

static void assert_same(const snapshot *a, const snapshot *b, const char *what, int threads) {
    assert_int_equal(a->size, b->size);
    if (memcmp(a->bytes, b->bytes, a->size) != 0) {
        print_error("%s differs between 1 and %d threads\n", what, threads);
        fail();
    }
}

enum { N_RESULTS = 24 };

typedef struct result_set {
    snapshot items[N_RESULTS];
    const char *names[N_RESULTS];
    int n;
} result_set;

static void keep(result_set *set, const char *name, const eg_tensor *t) {
    assert_true(set->n < N_RESULTS);
    set->names[set->n] = name;
    set->items[set->n++] = take(t);
}

static void free_set(result_set *set) {
    for (int i = 0; i < set->n; i++) free(set->items[i].bytes);
    set->n = 0;
}

/* Runs `compute` with 1, 2 and 4 threads and checks every result is bitwise the same. */
static void check_thread_invariance(void (*compute)(result_set *)) {
    result_set reference = {0};
    assert_int_equal(eg_set_num_threads(1), EG_OK);
    eg_scope_begin();
    compute(&reference);
    assert_int_equal(eg_scope_end(), EG_OK);
    assert_true(reference.n > 0);
    const int counts[] = {2, 4, 3};
    for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
        assert_int_equal(eg_set_num_threads(counts[c]), EG_OK);
        assert_int_equal(eg_get_num_threads(), counts[c]);
        result_set other = {0};
        eg_scope_begin();
        compute(&other);
        assert_int_equal(eg_scope_end(), EG_OK);
        assert_int_equal(other.n, reference.n);
        for (int i = 0; i < reference.n; i++)
            assert_same(&reference.items[i], &other.items[i], reference.names[i], counts[c]);
        free_set(&other);
    }
    free_set(&reference);
}

static eg_tensor *random_tensor(uint64_t seed, eg_dtype dtype, int n_dims, const int64_t *shape) {
    eg_generator *g = eg_generator_new(seed);
    assert_non_null(g);
    eg_tensor *t = eg_random_normal(g, dtype, n_dims, shape, 0, 1);
    eg_generator_free(g);
    assert_non_null(t);
    return t;
}

/* ---- thread-count invariance ------------------------------------------------------------ */

static void compute_elementwise(result_set *set) {
    int64_t shape[2] = {300, 503}; /* 150k elements: several chunks of the parallel grain */
    eg_tensor *a = random_tensor(1, EG_DTYPE_F32, 2, shape);
    eg_tensor *b = random_tensor(2, EG_DTYPE_F32, 2, shape);
    eg_tensor *row = random_tensor(3, EG_DTYPE_F32, 1, (int64_t[]){503});
    keep(set, "add", eg_add(a, b));
    keep(set, "mul broadcast", eg_mul(a, row));
    keep(set, "exp", eg_exp(a));
    keep(set, "tanh", eg_tanh(b));
    keep(set, "gelu", eg_gelu(a));
    keep(set, "div", eg_div(a, eg_add_scalar(eg_abs(b), 1.0)));
    keep(set, "where", eg_where(eg_greater(a, b), a, b));
    /* strided inputs: a transpose and a stepped slice */
    eg_tensor *at = eg_transpose(a, 0, 1);
    keep(set, "transpose add", eg_add(at, eg_transpose(b, 0, 1)));
    keep(set, "contiguous transpose", eg_contiguous(at));
    keep(set, "slice mul", eg_mul(eg_slice(a, 1, 0, 502, 2), eg_slice(b, 1, 1, 503, 2)));
    keep(set, "cast f64", eg_cast(a, EG_DTYPE_F64));
    keep(set, "cast f16", eg_cast(b, EG_DTYPE_F16));
    eg_tensor *ints = eg_cast(eg_mul_scalar(a, 100.0), EG_DTYPE_I64);
    keep(set, "i64 sub", eg_sub(ints, eg_cast(eg_mul_scalar(b, 100.0), EG_DTYPE_I64)));
    keep(set, "f64 sigmoid", eg_sigmoid(random_tensor(4, EG_DTYPE_F64, 2, shape)));
}

static void compute_reductions(result_set *set) {
    int64_t shape[3] = {32, 150, 40};
    eg_tensor *x = random_tensor(5, EG_DTYPE_F32, 3, shape);
    keep(set, "sum all", eg_sum(x, 0, NULL, false));
    keep(set, "sum axis 0", eg_sum(x, 1, (int[]){0}, false));
    keep(set, "sum axis 1", eg_sum(x, 1, (int[]){1}, true));
    keep(set, "mean axis 2", eg_mean(x, 1, (int[]){2}, false));
    keep(set, "sum axes 0,2", eg_sum(x, 2, (int[]){0, 2}, false));
    keep(set, "max axis 1", eg_max(x, 1, (int[]){1}, false));
    keep(set, "min all", eg_min(x, 0, NULL, false));
    keep(set, "logsumexp axis 2", eg_logsumexp(x, 1, (int[]){-1}, false));
    keep(set, "var axis 0", eg_var(x, 1, (int[]){0}, false));
    keep(set, "argmax axis 1", eg_argmax(x, 1, false));
    keep(set, "softmax axis 2", eg_softmax(x, 2));
    keep(set, "log_softmax axis 1", eg_log_softmax(x, 1));
    keep(set, "sum of transpose", eg_sum(eg_transpose(x, 0, 2), 1, (int[]){1}, false));
    eg_tensor *x64 = eg_cast(x, EG_DTYPE_F64);
    keep(set, "f64 sum axis 1", eg_sum(x64, 1, (int[]){1}, false));
    eg_tensor *i32 = eg_cast(eg_mul_scalar(x, 1000.0), EG_DTYPE_I32);
    keep(set, "i32 sum axis 2", eg_sum(i32, 1, (int[]){2}, false));
}

static void compute_matmul(result_set *set) {
    eg_tensor *a = random_tensor(6, EG_DTYPE_F32, 2, (int64_t[]){256, 384});
    eg_tensor *b = random_tensor(7, EG_DTYPE_F32, 2, (int64_t[]){384, 320});
    keep(set, "matmul f32", eg_matmul(a, b));
    keep(set, "matmul transposed", eg_matmul_ex(b, a, true, true));
    eg_tensor *a64 = random_tensor(8, EG_DTYPE_F64, 2, (int64_t[]){200, 300});
    eg_tensor *b64 = random_tensor(9, EG_DTYPE_F64, 2, (int64_t[]){300, 150});
    keep(set, "matmul f64", eg_matmul(a64, b64));
    eg_tensor *batch = random_tensor(10, EG_DTYPE_F32, 3, (int64_t[]){8, 64, 96});
    keep(set, "batched matmul", eg_matmul(batch, eg_slice(b, 0, 0, 96, 1)));
    /* an MLP step's gradients: matmuls, reductions and elementwise ops together */
    eg_tensor *w = eg_variable(random_tensor(11, EG_DTYPE_F32, 2, (int64_t[]){384, 128}), "w");
    eg_tape *tape = eg_tape_begin(false);
    eg_tensor *loss = eg_mean(eg_square(eg_relu(eg_matmul(a, w))), 0, NULL, false);
    eg_tensor *source = w;
    eg_tensor *grad = NULL;
    assert_int_equal(eg_tape_gradient(tape, loss, 1, &source, &grad, EG_UNCONNECTED_NULL), EG_OK);
    keep(set, "mlp loss", loss);
    keep(set, "mlp gradient", grad);
    eg_tape_free(tape);
    eg_release(w);
}

static void test_elementwise_invariant(void **state) {
    (void)state;
    check_thread_invariance(compute_elementwise);
}

static void test_reductions_invariant(void **state) {
    (void)state;
    check_thread_invariance(compute_reductions);
}

static void test_matmul_invariant(void **state) {
    (void)state;
    check_thread_invariance(compute_matmul);
}

/* Parallel results are also right, not just repeatable: compare with plain loops. */
static void test_parallel_results_correct(void **state) {
    (void)state;
    assert_int_equal(eg_set_num_threads(4), EG_OK);
    int64_t n = 1 << 20;
    eg_tensor *x = eg_arange(0, (double)n, 1, EG_DTYPE_F64);
    eg_tensor *y = eg_mul(x, x);
    const double *yd = eg_tensor_data(y);
    for (int64_t i = 0; i < n; i += 4099) assert_true(yd[i] == (double)i * (double)i);
    assert_true(yd[n - 1] == (double)(n - 1) * (double)(n - 1));
    assert_true(eg_item(eg_sum(x, 0, NULL, false)) == (double)n * (double)(n - 1) / 2);
    eg_tensor *m = eg_reshape(x, 2, (int64_t[]){1024, 1024});
    eg_tensor *columns = eg_sum(m, 1, (int[]){0}, false); /* column j: sum_i (1024 i + j) */
    for (int64_t j = 0; j < 1024; j += 101)
        assert_true(eg_tensor_get(columns, &j) == 1024.0 * 1024 * 1023 / 2 + 1024.0 * j);
    eg_tensor *f = eg_cast(m, EG_DTYPE_F32);
    eg_tensor *fcol = eg_sum(f, 1, (int[]){0}, false);
    int64_t j = 5;
    double exact = 1024.0 * 1024 * 1023 / 2 + 1024.0 * 5;
    assert_true(fabs(eg_tensor_get(fcol, &j) - exact) < 1e-5 * exact);
}

/* ---- ops from several user threads at once ---------------------------------------------- */

enum { N_USER_THREADS = 4, N_ITERATIONS = 6 };

typedef struct worker {
    int index;
    bool ok;
    char message[256];
} worker;

#define WORKER_CHECK(w, cond)                                                                      \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            snprintf((w)->message, sizeof(w)->message, "line %d: %s (%s)", __LINE__, #cond,        \
                     eg_last_error());                                                             \
            (w)->ok = false;                                                                       \
            return;                                                                                \
        }                                                                                          \
    } while (0)

/* One training-like iteration with values that identify the thread, checked exactly. */
static void worker_body(worker *w) {
    double k = (double)(w->index + 1);
    int64_t n = 50000; /* above the grain: every thread tries the pool */
    eg_tensor *initial = eg_full(EG_DTYPE_F64, 1, &n, k); /* no scope here: ours to release */
    eg_tensor *v = eg_variable(initial, "v");
    eg_release(initial);
    WORKER_CHECK(w, v != NULL);
    for (int it = 0; it < N_ITERATIONS; it++) {
        eg_scope_begin();
        WORKER_CHECK(w, eg_scope_depth() == 1);
        eg_tape *tape = eg_tape_begin(false);
        /* loss = sum(v^2 + 3 v) -> gradient 2 v + 3 */
        eg_tensor *loss = eg_sum(eg_add(eg_square(v), eg_mul_scalar(v, 3.0)), 0, NULL, false);
        WORKER_CHECK(w, loss != NULL);
        double value = k + (double)it; /* v's value this iteration */
        WORKER_CHECK(w, eg_item(loss) == (double)n * (value * value + 3 * value));
        eg_tensor *source = v;
        eg_tensor *grad = NULL;
        WORKER_CHECK(w,
                     eg_tape_gradient(tape, loss, 1, &source, &grad, EG_UNCONNECTED_NULL) == EG_OK);
        const double *g = eg_tensor_data(grad);
        WORKER_CHECK(w, g[0] == 2 * value + 3 && g[n - 1] == 2 * value + 3);
        eg_tape_free(tape);
        /* a matmul (BLAS) and a reduction over it */
        eg_tensor *a = eg_full(EG_DTYPE_F32, 2, (int64_t[]){64, 32}, k);
        eg_tensor *b = eg_ones(EG_DTYPE_F32, 2, (int64_t[]){32, 16});
        eg_tensor *c = eg_matmul(a, b);
        WORKER_CHECK(w, c != NULL);
        WORKER_CHECK(w, eg_item(eg_mean(c, 0, NULL, false)) == 32 * k);
        /* errors are per thread: this one is ours alone */
        WORKER_CHECK(w, eg_matmul(b, b) == NULL);
        WORKER_CHECK(w, eg_last_status() == EG_ERR_SHAPE);
        eg_clear_error();
        WORKER_CHECK(w, eg_assign_add(v, eg_scalar(EG_DTYPE_F64, 1.0)) == EG_OK);
        WORKER_CHECK(w, eg_scope_end() == EG_OK);
    }
    WORKER_CHECK(w, eg_scope_depth() == 0);
    eg_release(v);
    w->ok = true;
}

static void *worker_main(void *arg) {
    worker *w = arg;
    worker_body(w);
    while (eg_scope_depth() > 0) eg_scope_end(); /* after a failed check */
    return NULL;
}

static void test_concurrent_user_threads(void **state) {
    (void)state;
    for (int threads = 1; threads <= 4; threads *= 2) {
        assert_int_equal(eg_set_num_threads(threads), EG_OK);
        pthread_t ids[N_USER_THREADS];
        worker workers[N_USER_THREADS];
        for (int i = 0; i < N_USER_THREADS; i++) {
            workers[i] = (worker){.index = i, .ok = false};
            assert_int_equal(pthread_create(&ids[i], NULL, worker_main, &workers[i]), 0);
        }
        /* the main thread works at the same time */
        eg_tensor *x = eg_arange(0, 300000, 1, EG_DTYPE_F32);
        for (int it = 0; it < 5; it++) {
            eg_tensor *y = eg_mul(x, x);
            float *yd = eg_tensor_data(y);
            assert_true(yd[1000] == 1e6f);
            eg_release(y);
        }
        for (int i = 0; i < N_USER_THREADS; i++) {
            assert_int_equal(pthread_join(ids[i], NULL), 0);
            if (!workers[i].ok) print_error("worker %d: %s\n", i, workers[i].message);
            assert_true(workers[i].ok);
        }
        /* no worker's error leaked into this thread */
        assert_int_equal(eg_last_status(), EG_OK);
    }
}

/* ---- two models trained side by side ----------------------------------------------------- */

/* One training run of a small MLP (its own generator, synthetic data from the seed, Adam, 12
 * steps) into weights (the first layer's kernel, 12 x 16 floats). */
typedef struct training_run {
    uint64_t seed;
    float weights[12 * 16];
    bool ok;
} training_run;

static void train_small_model(training_run *run) {
    run->ok = false;
    eg_generator *generator = eg_generator_new(run->seed);
    eg_model *model = eg_sequential_new("side_by_side");
    eg_dense_options hidden = eg_dense_options_default();
    hidden.activation = EG_ACTIVATION_RELU;
    hidden.generator = generator;
    eg_dense_options logits = eg_dense_options_default();
    logits.generator = generator;
    if (!generator || !model || eg_sequential_add(model, eg_dense_new_ex(16, &hidden)) != EG_OK ||
        eg_sequential_add(model, eg_dense_new_ex(3, &logits)) != EG_OK)
        return;
    eg_adam_options adam_options = eg_adam_options_default();
    eg_optimizer *adam = eg_adam_new(&adam_options);
    int64_t x_shape[2] = {8, 12}, y_shape[1] = {8};
    bool ok = adam != NULL;
    for (int step = 0; step < 12 && ok; step++) {
        eg_scope_begin();
        eg_tensor *x = eg_random_normal(generator, EG_DTYPE_F32, 2, x_shape, 0.0, 1.0);
        /* labels 0, 1, 2: uniform in [0, 2.99) truncated */
        eg_tensor *y = eg_cast(eg_random_uniform(generator, EG_DTYPE_F32, 1, y_shape, 0.0, 2.99),
                               EG_DTYPE_I64);
        eg_tape *tape = eg_tape_begin(false);
        eg_tensor *loss = eg_loss_sparse_categorical_crossentropy(y, eg_model_call(model, x, true),
                                                                  true, EG_REDUCTION_MEAN);
        int n = 0;
        eg_tensor *const *variables = eg_model_trainable_variables(model, &n);
        eg_tensor *grads[4] = {0};
        ok = loss && n == 4 &&
             eg_tape_gradient(tape, loss, n, variables, grads, EG_UNCONNECTED_ZERO) == EG_OK &&
             eg_optimizer_apply_gradients(adam, n, grads, variables) == EG_OK;
        eg_tape_free(tape);
        eg_scope_end();
    }
    int n = 0;
    eg_tensor *const *variables = eg_model_trainable_variables(model, &n);
    run->ok = ok && n == 4 &&
              eg_tensor_copy_to_host(variables[0], run->weights, sizeof run->weights) == EG_OK;
    eg_optimizer_free(adam);
    eg_model_free(model);
    eg_generator_free(generator);
}

static void *training_main(void *arg) {
    train_small_model(arg);
    return NULL;
}

/* Two user threads each training their own model at once give, bit for bit, the weights of the
 * same two runs made one after the other on one thread (under ThreadSanitizer too). */
static void test_two_models_trained_side_by_side(void **state) {
    (void)state;
    training_run sequential[2] = {{.seed = 11}, {.seed = 12}};
    for (int i = 0; i < 2; i++) {
        train_small_model(&sequential[i]);
        assert_true(sequential[i].ok);
    }
    training_run side_by_side[2] = {{.seed = 11}, {.seed = 12}};
    pthread_t ids[2];
    for (int i = 0; i < 2; i++)
        assert_int_equal(pthread_create(&ids[i], NULL, training_main, &side_by_side[i]), 0);
    for (int i = 0; i < 2; i++) assert_int_equal(pthread_join(ids[i], NULL), 0);
    for (int i = 0; i < 2; i++) {
        assert_true(side_by_side[i].ok);
        assert_memory_equal(side_by_side[i].weights, sequential[i].weights,
                            sizeof sequential[i].weights);
    }
    /* the two runs differ from each other: the comparison above can fail */
    assert_memory_not_equal(sequential[0].weights, sequential[1].weights,
                            sizeof sequential[0].weights);
}

/* ---- settings --------------------------------------------------------------------------- */

/* The first half-precision conversions of the process happen on several threads at once (the
 * conversions detect the CPU's F16C support lazily). */
typedef struct convert_job {
    float values[64];
    uint16_t halves[64];
    float back[64];
} convert_job;

static void *convert_main(void *arg) {
    convert_job *job = arg;
    eg_f32_to_f16(job->values, job->halves, 64);
    eg_f16_to_f32(job->halves, job->back, 64);
    return NULL;
}

static void test_first_conversions_concurrent(void **state) {
    (void)state;
    pthread_t ids[N_USER_THREADS];
    static convert_job jobs[N_USER_THREADS];
    for (int t = 0; t < N_USER_THREADS; t++) {
        for (int i = 0; i < 64; i++) jobs[t].values[i] = (float)(t * 64 + i) * 0.5f;
        assert_int_equal(pthread_create(&ids[t], NULL, convert_main, &jobs[t]), 0);
    }
    for (int t = 0; t < N_USER_THREADS; t++) {
        assert_int_equal(pthread_join(ids[t], NULL), 0);
        for (int i = 0; i < 64; i++) assert_true(jobs[t].back[i] == jobs[t].values[i]);
    }
}

/* main() sets EG_NUM_THREADS=3 before the first library call: that is the default then. */
static void test_environment_default(void **state) {
    (void)state;
    assert_int_equal(original_threads, 3);
    int64_t n = 1 << 18;
    eg_tensor *x = eg_arange(0, (double)n, 1, EG_DTYPE_F64);
    assert_true(eg_item(eg_sum(x, 0, NULL, false)) == (double)n * (double)(n - 1) / 2);
    assert_int_equal(eg_get_num_threads(), 3);
}

static void test_bad_thread_counts(void **state) {
    (void)state;
    assert_int_equal(eg_set_num_threads(2), EG_OK);
    assert_int_equal(eg_set_num_threads(0), EG_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(eg_last_error(), "set_num_threads"));
    eg_clear_error();
    assert_int_equal(eg_set_num_threads(-3), EG_ERR_INVALID_ARGUMENT);
    eg_clear_error();
    assert_int_equal(eg_set_num_threads(100000), EG_ERR_INVALID_ARGUMENT);
    eg_clear_error();
    assert_int_equal(eg_get_num_threads(), 2); /* unchanged */
    /* the pool still works, also after being shut down (it restarts on demand) */
    eg_tensor *x = eg_ones(EG_DTYPE_F32, 1, (int64_t[]){1 << 20});
    assert_true(eg_item(eg_sum(eg_add(x, x), 0, NULL, false)) == 2.0 * (1 << 20));
    eg_shutdown();
    assert_int_equal(eg_set_num_threads(3), EG_OK);
    assert_true(eg_item(eg_sum(eg_add(x, x), 0, NULL, false)) == 2.0 * (1 << 20));
}

#if defined(__linux__)
#include <dirent.h>
static int threads_of_this_process(void) {
    DIR *dir = opendir("/proc/self/task");
    assert_non_null(dir);
    int n = 0;
    for (struct dirent *entry; (entry = readdir(dir));) n += entry->d_name[0] != '.';
    closedir(dir);
    return n;
}
#endif

/* With one thread and the pool stopped, no other thread runs: Eagle does its own threading, so
 * the server threads OpenBLAS's pthread build starts at load (spinning ~50-85 ms, then sleeping)
 * are stopped once BLAS is set to one thread (matmul.c). */
static void test_no_blas_threads_left(void **state) {
    (void)state;
#if defined(__linux__)
    eg_shutdown();
    assert_int_equal(eg_set_num_threads(1), EG_OK);
    eg_tensor *a = eg_ones(EG_DTYPE_F64, 2, (int64_t[]){64, 64}); /* f64: OpenBLAS's dgemm */
    assert_true(eg_item(eg_sum(eg_matmul(a, a), 0, NULL, false)) == 64.0 * 64.0 * 64.0);
#if defined(__SANITIZE_THREAD__)
    int sanitizer_threads = 1; /* TSan's background thread */
#else
    int sanitizer_threads = 0;
#endif
    assert_int_equal(threads_of_this_process(), 1 + sanitizer_threads);
#else
    skip();
#endif
}

int main(int argc, char **argv) {
    if (argc > 1) cmocka_set_test_filter(argv[1]); /* e.g. "test_matmul*" */
    setenv("EG_NUM_THREADS", "3", 1); /* read once, at the first use of the thread count */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_first_conversions_concurrent),
        cmocka_unit_test_setup_teardown(test_environment_default, fresh_scope_setup,
                                        strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_elementwise_invariant, fresh_scope_setup,
                                        strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_reductions_invariant, fresh_scope_setup,
                                        strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_matmul_invariant, fresh_scope_setup,
                                        strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_parallel_results_correct, fresh_scope_setup,
                                        strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_concurrent_user_threads, fresh_scope_setup,
                                        strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_two_models_trained_side_by_side, fresh_scope_setup,
                                        strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_bad_thread_counts, fresh_scope_setup,
                                        strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_no_blas_threads_left, fresh_scope_setup,
                                        strict_scope_teardown),
    };
    int failed = cmocka_run_group_tests(tests, group_setup, group_teardown);
    eg_shutdown();
    return failed;
}
