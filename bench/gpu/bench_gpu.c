/* bench_gpu: Eagle's half of bench/gpu/run.sh, on cuda:0 (torch_gpu.py is PyTorch's half: the
 * same workloads, the same timing; README.md beside this file says what each measures). Each
 * measurement prints one line
 *   RESULT workload=W impl=I median_ms=M key=value ...
 * or, when it could not be made, "RESULT workload=W impl=I status=error error=TEXT" or
 * "status=n/a note=TEXT" (TEXT runs to the end of the line), which run.sh joins with PyTorch's.
 *
 *   bench_gpu [--only gemm,launch,mlp,cnn] [--sizes 1024,2048,4096,8192] [--steps N]
 *             [--device NAME]
 *
 * --device (default cuda:0) may name the host ("cpu") to try the harness on a machine without a
 * GPU.
 *
 * Times are wall-clock from the first call to the end of a device sync: GPU ops are queued, so
 * only the sync says the work is done. The GEMMs are strict f32 unless EG_CUDA_TF32=1 is in the
 * environment (the library reads it once, so it must be set before the process starts); their
 * rows are then named tf32 and the bf16 ones are left to the f32 run. Exits 77 when no GPU is
 * usable, 1 when a workload failed (the others still run), 2 on a usage error. */
#define _POSIX_C_SOURCE 200809L
#include <eagle.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { W_GEMM = 1, W_LAUNCH = 2, W_MLP = 4, W_CNN = 8 };

/* A GEMM run is calls back to back until at least this much work, so that the sync ending it
 * (some microseconds) stays under 1 % of the run even where one product takes 40 us. */
#define GEMM_MIN_RUN_SECONDS 0.005
#define GEMM_RUNS            10
/* A training workload stops sampling after this long (keeping at least MIN_STEPS steps): a mode
 * that is much slower than expected must not take the whole device time of the session. */
#define STEP_BUDGET_SECONDS 15.0
#define MIN_STEPS           10
#define WARMUP_STEPS        20
/* The most trainable variables of the two models (the CNN has 17). */
#define MAX_VARIABLES 64

static const eg_device *device;
static int failures;

static double now_seconds(clockid_t clock) {
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int compare_doubles(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The q-quantile of values[0..n) (0.5: the median); sorts values. */
static double quantile(double *values, int n, double q) {
    qsort(values, (size_t)n, sizeof *values, compare_doubles);
    return values[(int)(q * (n - 1) + 0.5)];
}

/* Prints the pending error as this measurement's result and clears it, so that the next
 * workloads still run (an asynchronous GPU fault may make them fail too; each says so). */
static void report_error(const char *workload, const char *impl) {
    const char *why = eg_last_status() != EG_OK ? eg_last_error() : "failed without an error";
    printf("RESULT workload=%s impl=%s status=error error=", workload, impl);
    for (const char *p = why; *p; p++) putchar(*p == '\n' || *p == '\r' ? ' ' : *p);
    putchar('\n');
    eg_clear_error();
    failures++;
}

static int op_index(const char *name) {
    for (int op = 0; op < eg_op_count(); op++)
        if (!strcmp(eg_op_name(op), name)) return op;
    return -1;
}

/* ---- GEMM ---- */

/* Seconds per product over `calls` products back to back and one sync; false on an error. */
static bool matmul_run(const eg_tensor *a, const eg_tensor *b, int calls, double *seconds) {
    double start = now_seconds(CLOCK_MONOTONIC);
    for (int i = 0; i < calls; i++) {
        eg_tensor *c = eg_matmul(a, b);
        if (!c) return false;
        eg_release(c);
    }
    if (eg_device_sync(device) != EG_OK) return false;
    *seconds = (now_seconds(CLOCK_MONOTONIC) - start) / calls;
    return true;
}

/* A copy on the host of t as f32; NULL on an error. */
static float *host_f32(const eg_tensor *t) {
    const eg_tensor *f32 = eg_tensor_dtype(t) == EG_DTYPE_F32 ? t : eg_cast(t, EG_DTYPE_F32);
    size_t n = f32 ? (size_t)eg_tensor_n_elems(f32) : 0;
    float *data = f32 ? malloc(n * sizeof *data) : NULL;
    if (data && eg_tensor_copy_to_host(f32, data, n * sizeof *data) != EG_OK) {
        free(data);
        data = NULL;
    }
    return data;
}

/* The largest error of c[0, 0..7] against a dot product in double on the host, relative to
 * sum_k |a[0, k] b[k, j]|: rounding errors scale with that sum, which makes the figure about
 * 1e-7..1e-6 for a strict f32 product, 1e-4 for TF32 and 1e-3 for a bf16 result. It checks that
 * the product timed is right and shows which precision actually ran. All of b is copied (a
 * contiguous copy, the one every device has) rather than its first columns. -1 on an error. */
static double gemm_error(const eg_tensor *a, const eg_tensor *b, const eg_tensor *c) {
    enum { COLS = 8 };
    int64_t n = eg_tensor_dim(a, 1);
    eg_scope_begin();
    float *row = host_f32(eg_slice(a, 0, 0, 1, 1));
    float *whole_b = host_f32(b);
    float *got = host_f32(eg_slice(c, 0, 0, 1, 1));
    eg_scope_end();
    double worst = row && whole_b && got ? 0 : -1;
    for (int j = 0; j < COLS && j < n && worst >= 0; j++) {
        double sum = 0, scale = 0;
        for (int64_t k = 0; k < n; k++) {
            double term = (double)row[k] * (double)whole_b[k * n + j];
            sum += term;
            scale += fabs(term);
        }
        double error = fabs((double)got[j] - sum) / (scale > 0 ? scale : 1);
        if (!(error <= worst)) worst = error; /* a NaN result counts as the worst */
    }
    free(row);
    free(whole_b);
    free(got);
    return worst;
}

/* One product of a32 and b32 (n x n, f32, on the device) in dtype. */
static void bench_gemm(const char *precision, eg_dtype dtype, eg_tensor *a32, eg_tensor *b32) {
    int64_t n = eg_tensor_dim(a32, 0);
    char workload[64];
    snprintf(workload, sizeof workload, "gemm_%s_%lld", precision, (long long)n);
    if (dtype != EG_DTYPE_F32 && !eg_device_supports_op(device, op_index("matmul"), dtype)) {
        printf("RESULT workload=%s impl=eagle status=n/a note=%s not implemented (%s has no %s "
               "matmul kernel)\n",
               workload, precision, eg_device_name(device), eg_dtype_name(dtype));
        return;
    }
    eg_tensor *a = dtype == EG_DTYPE_F32 ? eg_retain(a32) : eg_cast(a32, dtype);
    eg_tensor *b = dtype == EG_DTYPE_F32 ? eg_retain(b32) : eg_cast(b32, dtype);
    eg_tensor *c = NULL;
    double samples[GEMM_RUNS], first = 0;
    int calls = 1;
    /* The first products choose cuBLASLt's algorithm and load its kernels. */
    bool ok = a && b && matmul_run(a, b, 2, &first) && matmul_run(a, b, 1, &first);
    if (ok) {
        double want = ceil(GEMM_MIN_RUN_SECONDS / (first > 0 ? first : 1e-6));
        calls = want < 1 ? 1 : want > 1000 ? 1000 : (int)want;
    }
    for (int r = 0; r < GEMM_RUNS && ok; r++) ok = matmul_run(a, b, calls, &samples[r]);
    double error = ok && (c = eg_matmul(a, b)) ? gemm_error(a, b, c) : -1;
    if (ok && error < 0) ok = false;
    if (ok) {
        double median = quantile(samples, GEMM_RUNS, 0.5);
        printf("RESULT workload=%s impl=eagle median_ms=%.4f tflops=%.2f runs=%d calls_per_run=%d "
               "rel_err=%.1e\n",
               workload, median * 1e3, 2.0 * (double)n * (double)n * (double)n / median * 1e-12,
               GEMM_RUNS, calls, error);
    } else {
        report_error(workload, "eagle");
    }
    eg_release(c);
    eg_release(a);
    eg_release(b);
}

/* The products of size n: f32 (or TF32, with EG_CUDA_TF32 set), then bf16 from the same
 * operands, which the host takes a second or two to draw at n = 8192. */
static void bench_gemm_size(int64_t n, bool tf32) {
    int64_t shape[2] = {n, n};
    eg_manual_seed(1);
    eg_device_scope_begin(device);
    /* Random operands: a GPU's clock, and so a GEMM's speed, depends on how many bits toggle. */
    eg_tensor *a32 = eg_random_uniform(NULL, EG_DTYPE_F32, 2, shape, -1, 1);
    eg_tensor *b32 = eg_random_uniform(NULL, EG_DTYPE_F32, 2, shape, -1, 1);
    eg_device_scope_end();
    if (a32 && b32) {
        bench_gemm(tf32 ? "tf32" : "f32", EG_DTYPE_F32, a32, b32);
        /* TF32 changes f32 products only: the f32 run measures bf16. */
        if (!tf32) bench_gemm("bf16", EG_DTYPE_BF16, a32, b32);
    } else {
        char workload[64];
        snprintf(workload, sizeof workload, "gemm_%s_%lld", tf32 ? "tf32" : "f32", (long long)n);
        report_error(workload, "eagle");
    }
    eg_release(a32);
    eg_release(b32);
}

/* ---- launch overhead ---- */

/* A 1-element add measures what an op costs beyond its (negligible) work: dispatch on the host
 * and the kernel launch. 10000 back to back and one sync, as a training step's small ops run. */
static void bench_launch(void) {
    enum { OPS = 10000, RUNS = 11 };
    const char *workload = "launch_add1";
    int64_t one = 1;
    eg_device_scope_begin(device);
    eg_tensor *a = eg_ones(EG_DTYPE_F32, 1, &one), *b = eg_ones(EG_DTYPE_F32, 1, &one);
    eg_device_scope_end();
    double wall[RUNS], cpu[RUNS];
    bool ok = a && b;
    for (int i = 0; i < OPS / 10 && ok; i++) {
        eg_tensor *c = eg_add(a, b);
        ok = c != NULL;
        eg_release(c);
    }
    ok = ok && eg_device_sync(device) == EG_OK;
    for (int r = 0; r < RUNS && ok; r++) {
        double start = now_seconds(CLOCK_MONOTONIC);
        double cpu_start = now_seconds(CLOCK_THREAD_CPUTIME_ID);
        for (int i = 0; i < OPS && ok; i++) {
            eg_tensor *c = eg_add(a, b);
            ok = c != NULL;
            eg_release(c);
        }
        ok = ok && eg_device_sync(device) == EG_OK;
        wall[r] = (now_seconds(CLOCK_MONOTONIC) - start) / OPS;
        cpu[r] = (now_seconds(CLOCK_THREAD_CPUTIME_ID) - cpu_start) / OPS;
    }
    eg_tensor *sum = ok ? eg_add(a, b) : NULL;
    double value = sum ? eg_item(sum) : 0;
    if (!sum || eg_last_status() != EG_OK) {
        report_error(workload, "eagle_eager");
    } else if (value != 2.0) {
        printf("RESULT workload=%s impl=eagle_eager status=error error=1 + 1 gave %g on %s\n",
               workload, value, eg_device_name(device));
        failures++;
    } else {
        double median = quantile(wall, RUNS, 0.5);
        printf("RESULT workload=%s impl=eagle_eager median_ms=%.6f us_per_op=%.3f "
               "cpu_us_per_op=%.3f runs=%d ops_per_run=%d\n",
               workload, median * 1e3, median * 1e6, quantile(cpu, RUNS, 0.5) * 1e6, RUNS, OPS);
    }
    eg_release(sum);
    eg_release(a);
    eg_release(b);
}

/* ---- training steps ---- */

/* The models, as tools/eagle builds them (tools/ is no library, so the calls are repeated here):
 * mlp.c's mlp_build for the seed model 784 -> Dense(64, relu) -> Dense(10), and cnn.c's
 * cnn_build. */
static eg_model *seed_model_build(void) {
    eg_model *model = eg_sequential_new("mlp");
    if (!model) return NULL;
    eg_status s = eg_sequential_add(model, eg_dense_new(64, EG_ACTIVATION_RELU));
    if (s == EG_OK) s = eg_sequential_add(model, eg_dense_new(10, EG_ACTIVATION_NONE));
    int64_t input_shape[2] = {1, 784};
    if (s == EG_OK) s = eg_model_build(model, 2, input_shape);
    if (s != EG_OK) {
        eg_model_free(model);
        return NULL;
    }
    return model;
}

/* BatchNormalization and ReLU as one layer, which the step runs as one op. */
static eg_layer *batch_norm_relu_new(void) {
    eg_batch_norm_options o = eg_batch_norm_options_default();
    o.activation = EG_ACTIVATION_RELU;
    return eg_batch_norm_new(&o);
}

/* Conv2D without bias, then BatchNormalization and ReLU. */
static eg_status conv_block(eg_model *model, int64_t filters) {
    eg_conv2d_layer_options o = eg_conv2d_layer_options_default();
    o.padding = EG_PADDING_SAME;
    o.use_bias = false;
    eg_status status = eg_sequential_add(model, eg_conv2d_new_ex(filters, 3, 3, &o));
    if (status == EG_OK) status = eg_sequential_add(model, batch_norm_relu_new());
    return status;
}

static eg_model *cnn_build(void) {
    eg_model *model = eg_sequential_new("cnn");
    if (!model) return NULL;
    eg_dense_options hidden = eg_dense_options_default();
    hidden.use_bias = false;
    eg_status s = conv_block(model, 32);
    if (s == EG_OK) s = conv_block(model, 32);
    if (s == EG_OK) s = eg_sequential_add(model, eg_max_pool2d_new(2, 0, EG_PADDING_VALID));
    if (s == EG_OK) s = eg_sequential_add(model, eg_dropout_new(0.25, NULL));
    if (s == EG_OK) s = conv_block(model, 64);
    if (s == EG_OK) s = conv_block(model, 64);
    if (s == EG_OK) s = eg_sequential_add(model, eg_max_pool2d_new(2, 0, EG_PADDING_VALID));
    if (s == EG_OK) s = eg_sequential_add(model, eg_dropout_new(0.25, NULL));
    if (s == EG_OK) s = eg_sequential_add(model, eg_flatten_new(NULL));
    if (s == EG_OK) s = eg_sequential_add(model, eg_dense_new_ex(256, &hidden));
    if (s == EG_OK) s = eg_sequential_add(model, batch_norm_relu_new());
    if (s == EG_OK) s = eg_sequential_add(model, eg_dropout_new(0.5, NULL));
    if (s == EG_OK) s = eg_sequential_add(model, eg_dense_new(10, EG_ACTIVATION_NONE));
    int64_t input_shape[4] = {-1, 28, 28, 1};
    if (s == EG_OK) s = eg_model_build(model, 4, input_shape);
    if (s != EG_OK) {
        eg_model_free(model);
        return NULL;
    }
    return model;
}

typedef struct step_state {
    eg_model *model;
    eg_optimizer *optimizer;
} step_state;

/* tools/eagle/mlp.c's mlp_step, the step `eagle train` runs in every mode: forward, sparse
 * softmax cross-entropy from logits, tape gradient, Adam; out[0] the mean loss, out[1] the
 * number of correct predictions. */
static eg_status train_step(eg_tensor *const *in, eg_tensor **out, void *user) {
    step_state *s = user;
    int n_vars;
    eg_tensor *const *vars = eg_model_trainable_variables(s->model, &n_vars);
    eg_tensor *grads[MAX_VARIABLES];
    if (!vars) return eg_last_status();
    if (n_vars > MAX_VARIABLES) return EG_ERR_INVALID_ARGUMENT;
    eg_tape *tape = eg_tape_begin(false);
    eg_tensor *logits = eg_model_call(s->model, in[0], true);
    eg_tensor *loss =
        eg_loss_sparse_categorical_crossentropy(in[1], logits, true, EG_REDUCTION_MEAN);
    eg_status status = eg_tape_gradient(tape, loss, n_vars, vars, grads, EG_UNCONNECTED_ZERO);
    eg_tape_free(tape);
    if (status == EG_OK) status = eg_optimizer_apply_gradients(s->optimizer, n_vars, grads, vars);
    out[0] = loss;
    out[1] = eg_sum(eg_metric_sparse_categorical_accuracy(in[1], logits), 0, NULL, false);
    return status == EG_OK ? eg_last_status() : status;
}

enum { EAGER, LAZY, GRAPH, N_MODES };
static const char *const mode_names[N_MODES] = {"eager", "lazy", "graph"};

typedef struct runner {
    int mode;
    bool live; /* set up and no step failed */
    step_state state;
    eg_function *function;
    double *seconds;
    double first_loss, last_loss;
} runner;

/* One step and the sync that ends it; *loss (when not NULL) gets the step's loss, read after
 * the time is taken. In lazy mode the step's results are computed by the eg_realize. */
static bool run_step(runner *r, eg_tensor *x, eg_tensor *y, double *seconds, double *loss) {
    eg_scope_begin();
    eg_tensor *in[2] = {x, y};
    eg_tensor *out[2] = {NULL, NULL};
    double start = now_seconds(CLOCK_MONOTONIC);
    eg_status status;
    if (r->mode == GRAPH) {
        status = eg_function_call(r->function, in, out);
    } else {
        if (r->mode == LAZY) eg_lazy_begin();
        status = train_step(in, out, &r->state);
        if (r->mode == LAZY) eg_lazy_end();
    }
    if (status == EG_OK) status = eg_realize(2, out);
    if (status == EG_OK) status = eg_device_sync(device);
    *seconds = now_seconds(CLOCK_MONOTONIC) - start;
    if (status == EG_OK && loss) {
        *loss = eg_item(out[0]);
        status = eg_last_status();
    }
    eg_scope_end();
    return status == EG_OK;
}

/* Trains build()'s model on the fixed batch (x, y) in each mode of `modes` (bits 1 << EAGER
 * ...), one step of each in turn so that every mode meets the same state of the GPU and host,
 * and prints each mode's median step time. */
static void bench_steps(const char *workload, eg_model *(*build)(void), eg_tensor *x, eg_tensor *y,
                        unsigned modes, int steps) {
    runner runners[N_MODES];
    char impl[N_MODES][32];
    memset(runners, 0, sizeof runners);
    for (int m = 0; m < N_MODES; m++) {
        runner *r = &runners[m];
        snprintf(impl[m], sizeof impl[m], "eagle_%s", mode_names[m]);
        if (!(modes >> m & 1u)) continue;
        r->mode = m;
        eg_manual_seed(42); /* the same initial weights in every mode */
        eg_device_scope_begin(device);
        r->state = (step_state){build(), eg_adam_new(NULL)};
        eg_device_scope_end();
        r->function = m == GRAPH && r->state.model
                          ? eg_function_new(workload, train_step, 2, 2, &r->state)
                          : NULL;
        r->seconds = malloc(sizeof *r->seconds * (size_t)steps);
        r->live = r->state.model && r->state.optimizer && r->seconds && (m != GRAPH || r->function);
        if (!r->live) report_error(workload, impl[m]);
    }
    /* The warm-up traces the graph, finds the convolutions' algorithms, compiles the fused
     * kernels and fills the allocator's caches. */
    for (int step = 0; step < WARMUP_STEPS; step++)
        for (int m = 0; m < N_MODES; m++) {
            double ignored;
            if (runners[m].live && !run_step(&runners[m], x, y, &ignored, NULL)) {
                runners[m].live = false;
                report_error(workload, impl[m]);
            }
        }
    int done = 0;
    double start = now_seconds(CLOCK_MONOTONIC);
    for (; done < steps; done++) {
        if (done >= MIN_STEPS && now_seconds(CLOCK_MONOTONIC) - start > STEP_BUDGET_SECONDS) break;
        for (int m = 0; m < N_MODES; m++) {
            runner *r = &runners[m];
            double *loss = done == steps - 1 ? &r->last_loss : done == 0 ? &r->first_loss : NULL;
            if (r->live && !run_step(r, x, y, &r->seconds[done], loss)) {
                r->live = false;
                report_error(workload, impl[m]);
            }
        }
    }
    for (int m = 0; m < N_MODES; m++) {
        runner *r = &runners[m];
        if (r->live && done < steps) {
            /* Stopped by the budget: the loss of one more step, untimed. */
            double ignored;
            if (!run_step(r, x, y, &ignored, &r->last_loss)) {
                r->live = false;
                report_error(workload, impl[m]);
            }
        }
        if (steps == 1) r->first_loss = r->last_loss;
        if (r->live) {
            /* What a replay launches tells whether the graph runs as a few fused kernels. */
            char graph[96] = "";
            eg_function_stats stats;
            if (r->function && eg_function_stats_get(r->function, &stats) == EG_OK)
                snprintf(graph, sizeof graph, " traces=%d ops=%lld kernels_per_replay=%lld",
                         stats.n_traces, (long long)stats.n_nodes, (long long)stats.n_kernels);
            double median = quantile(r->seconds, done, 0.5);
            printf("RESULT workload=%s impl=%s median_ms=%.4f p10_ms=%.4f p90_ms=%.4f steps=%d "
                   "loss_first=%.4f loss_last=%.4f%s\n",
                   workload, impl[m], median * 1e3, quantile(r->seconds, done, 0.1) * 1e3,
                   quantile(r->seconds, done, 0.9) * 1e3, done, r->first_loss, r->last_loss, graph);
        }
        eg_function_free(r->function);
        eg_optimizer_free(r->state.optimizer);
        eg_model_free(r->state.model);
        free(r->seconds);
    }
}

/* Random inputs of the right shape, made once and kept on the GPU: the steps time the
 * training, not a data pipeline. */
static void bench_training(const char *workload, eg_model *(*build)(void), int n_dims,
                           const int64_t *x_shape, unsigned modes, int steps) {
    enum { MAX_BATCH = 64 };
    int64_t batch = x_shape[0];
    uint8_t labels[MAX_BATCH];
    for (int64_t i = 0; i < batch; i++) labels[i] = (uint8_t)(i * 7 % 10);
    eg_manual_seed(7);
    eg_device_scope_begin(device);
    eg_tensor *x = eg_random_uniform(NULL, EG_DTYPE_F32, n_dims, x_shape, 0.0, 1.0);
    eg_tensor *y = eg_tensor_from_data(labels, EG_DTYPE_U8, 1, &batch);
    eg_device_scope_end();
    if (x && y) {
        bench_steps(workload, build, x, y, modes, steps);
    } else {
        for (int m = 0; m < N_MODES; m++) {
            char impl[32];
            snprintf(impl, sizeof impl, "eagle_%s", mode_names[m]);
            if (modes >> m & 1u) report_error(workload, impl);
        }
    }
    eg_release(x);
    eg_release(y);
}

/* ---- main ---- */

static int usage(const char *program) {
    fprintf(stderr,
            "usage: %s [--only gemm,launch,mlp,cnn] [--sizes 1024,2048,4096,8192] [--steps N] "
            "[--device NAME]\n",
            program);
    return 2;
}

static bool parse_workloads(const char *text, unsigned *workloads) {
    static const char *const names[4] = {"gemm", "launch", "mlp", "cnn"};
    *workloads = 0;
    const char *p = text;
    while (*p) {
        size_t length = strcspn(p, ",");
        int found = -1;
        for (int i = 0; i < 4; i++)
            if (strlen(names[i]) == length && !strncmp(p, names[i], length)) found = i;
        if (found < 0) return false;
        *workloads |= 1u << found;
        p += length + (p[length] == ',');
    }
    return *workloads != 0;
}

static int parse_sizes(const char *text, int64_t *sizes, int max) {
    int n = 0;
    const char *p = text;
    while (*p && n < max) {
        char *end;
        long value = strtol(p, &end, 10);
        if (end == p || value < 1 || value > 65536 || (*end && *end != ',')) return 0;
        sizes[n++] = value;
        p = *end ? end + 1 : end;
    }
    return *p ? 0 : n;
}

int main(int argc, char **argv) {
    /* Line-buffered even into a pipe or file, so that a run stopped by a time limit keeps the
     * results it had. */
    setvbuf(stdout, NULL, _IOLBF, 0);
    unsigned workloads = W_GEMM | W_LAUNCH | W_MLP | W_CNN;
    int64_t sizes[8] = {1024, 2048, 4096, 8192};
    int n_sizes = 4, steps = 200;
    const char *device_name = "cuda:0";
    for (int i = 1; i < argc; i++) {
        bool has_value = i + 1 < argc;
        if (!strcmp(argv[i], "--only") && has_value) {
            if (!parse_workloads(argv[++i], &workloads)) return usage(argv[0]);
        } else if (!strcmp(argv[i], "--sizes") && has_value) {
            if (!(n_sizes = parse_sizes(argv[++i], sizes, 8))) return usage(argv[0]);
        } else if (!strcmp(argv[i], "--device") && has_value) {
            device_name = argv[++i];
        } else if (!strcmp(argv[i], "--steps") && has_value) {
            steps = atoi(argv[++i]);
            if (steps < 1) return usage(argv[0]);
        } else {
            return usage(argv[0]);
        }
    }
    device = eg_device_get(device_name);
    if (!device) {
        fprintf(stderr, "bench_gpu: skipped, no usable device '%s': %s\nbench_gpu: CUDA: %s\n",
                device_name, eg_last_error(), eg_device_kind_info(EG_DEVICE_CUDA));
        return 77;
    }
    const char *tf32_setting = getenv("EG_CUDA_TF32");
    bool tf32 = tf32_setting && *tf32_setting && strcmp(tf32_setting, "0") != 0;
    printf("# eagle %s on %s: %s\n", eg_version(), eg_device_name(device),
           eg_device_description(device));
    printf("# eagle build: %s\n", eg_build_info());
    printf("# eagle CUDA: %s\n", eg_device_kind_info(EG_DEVICE_CUDA));
    printf("# eagle f32 products: %s\n",
           tf32 ? "TF32 allowed (EG_CUDA_TF32 set)" : "strict f32 (EG_CUDA_TF32 not set)");
    if (workloads & W_GEMM)
        for (int i = 0; i < n_sizes; i++) bench_gemm_size(sizes[i], tf32);
    if (workloads & W_LAUNCH) bench_launch();
    if (workloads & W_MLP) {
        int64_t shape[2] = {32, 784};
        bench_training("mlp_step", seed_model_build, 2, shape,
                       1u << EAGER | 1u << LAZY | 1u << GRAPH, steps);
    }
    if (workloads & W_CNN) {
        int64_t shape[4] = {64, 28, 28, 1};
        bench_training("cnn_step", cnn_build, 4, shape, 1u << EAGER | 1u << GRAPH, steps);
    }
    return failures ? 1 : 0;
}
