/* One training step, three ways to run it (TensorFlow's eager execution and tf.function):
 *   - eager: every op runs when it is called;
 *   - lazy: between eg_lazy_begin() and eg_lazy_end() ops only record what to do; reading the
 *     loss (eg_item) runs the recorded step, fusing elementwise chains;
 *   - graph: eg_function traces the step once per input signature into a graph, plans its
 *     memory once and replays it at every call.
 * The same C function `train_step` (a gradient tape and an Adam update on an MLP) runs in each
 * mode from the same initial weights; the three runs must end with the same loss, bit for bit.
 * Each mode's time and memory are printed. Finally the traced function is called with a batch of
 * another shape: it traces again, and says why (TensorFlow's retracing warning).
 * Build: see examples/CMakeLists.txt. Run: ./modes [data directory] [examples]
 * (data directory "" or none: the Debian package dataset-fashion-mnist's; examples: how many
 * training images, default 10,000). Prints "modes agree" when the losses match. */
#include <eagle.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { BATCH = 64 };

typedef struct run {
    eg_model *model;
    eg_optimizer *optimizer;
} run;

static run run_new(void) {
    eg_manual_seed(7); /* every mode starts from the same weights */
    run r = {eg_sequential_new("mlp"), eg_adam_new(NULL)};
    eg_sequential_add(r.model, eg_dense_new(128, EG_ACTIVATION_RELU));
    eg_sequential_add(r.model, eg_dense_new(10, EG_ACTIVATION_NONE));
    eg_model_build(r.model, 2, (int64_t[]){-1, 784});
    return r;
}

static void run_free(run *r) {
    eg_optimizer_free(r->optimizer);
    eg_model_free(r->model);
}

/* The step: forward, loss, gradients, update. Returns the loss (NULL with an error). */
static eg_tensor *train_step(run *r, const eg_tensor *x, const eg_tensor *y) {
    eg_tape *tape = eg_tape_begin(false);
    eg_tensor *logits = eg_model_call(r->model, x, true);
    eg_tensor *loss = eg_loss_sparse_categorical_crossentropy(y, logits, true, EG_REDUCTION_MEAN);
    int n;
    eg_tensor *const *vars = eg_model_trainable_variables(r->model, &n);
    eg_tensor *grads[4];
    eg_tape_gradient(tape, loss, n, vars, grads, EG_UNCONNECTED_ZERO);
    eg_tape_free(tape);
    eg_optimizer_apply_gradients(r->optimizer, n, grads, vars);
    return eg_last_status() == EG_OK ? loss : NULL;
}

/* train_step as eg_function traces it: inputs (x, y), output the loss. */
static eg_status traced_step(eg_tensor *const *in, eg_tensor **out, void *user) {
    out[0] = train_step(user, in[0], in[1]);
    return out[0] ? EG_OK : eg_last_status();
}

static const char *mode_names[] = {"eager", "lazy", "graph"};

static double now(void) { /* wall-clock seconds (C11) */
    struct timespec t;
    timespec_get(&t, TIME_UTC);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* One pass over x, y in batches in `mode`; the last batch's loss into *last_loss. */
static eg_status train(int mode, const eg_tensor *x, const eg_tensor *y, double *last_loss) {
    run r = run_new();
    eg_function *step = eg_function_new("train_step", traced_step, 2, 1, &r);
    eg_memory_stats before, after;
    eg_memory_stats_get(NULL, &before);
    eg_memory_reset_peak(NULL);
    double start = now();
    int64_t n = eg_tensor_dim(x, 0) / BATCH * BATCH; /* whole batches: one signature */
    for (int64_t i = 0; i < n && eg_last_status() == EG_OK; i += BATCH) {
        eg_scope_begin();
        eg_tensor *xb = eg_slice(x, 0, i, i + BATCH, 1), *yb = eg_slice(y, 0, i, i + BATCH, 1);
        eg_tensor *loss = NULL;
        if (mode == 0) loss = train_step(&r, xb, yb);
        if (mode == 1) {
            eg_lazy_begin();
            loss = train_step(&r, xb, yb);
            eg_lazy_end();
        }
        if (mode == 2) eg_function_call(step, (eg_tensor *[]){xb, yb}, &loss);
        if (loss) *last_loss = eg_item(loss); /* lazy: this runs the step */
        eg_scope_end();
    }
    double seconds = now() - start;
    eg_memory_stats_get(NULL, &after);
    printf("%-5s  %6.3f s  %4.1f ms/step  peak %6.2f MiB above the start  last loss %.6f\n",
           mode_names[mode], seconds, 1e3 * seconds / (double)(n / BATCH),
           (double)(after.peak_bytes_in_use - before.bytes_in_use) / (1 << 20), *last_loss);

    eg_function_stats stats;
    if (mode == 2 && eg_last_status() == EG_OK && eg_function_stats_get(step, &stats) == EG_OK) {
        printf("       graph: %lld ops in %lld kernels, arena %.2f MiB (%.2f MiB unplanned)\n",
               (long long)stats.n_nodes, (long long)stats.n_kernels,
               (double)stats.arena_bytes / (1 << 20), (double)stats.unplanned_bytes / (1 << 20));
        /* A batch of another shape is a new signature: the step is traced again. The limit
         * makes that second trace warn, as a training loop that retraces at every step would. */
        eg_function_set_retrace_limit(step, 1);
        eg_scope_begin();
        eg_tensor *xb = eg_slice(x, 0, 0, BATCH / 2, 1), *yb = eg_slice(y, 0, 0, BATCH / 2, 1);
        eg_tensor *loss = NULL;
        eg_function_call(step, (eg_tensor *[]){xb, yb}, &loss);
        eg_scope_end();
        eg_function_stats_get(step, &stats);
        printf("       %d traces; the last because %s\n       warning: %s\n", stats.n_traces,
               stats.last_trace_reason, stats.retrace_warning);
    }
    eg_function_free(step);
    run_free(&r);
    return eg_last_status();
}

int main(int argc, char **argv) {
    const char *dir = argc > 1 && argv[1][0] ? argv[1] : NULL;
    int64_t limit = argc > 2 ? atoll(argv[2]) : 10000;
    eg_scope_begin();           /* owns the data below */
    eg_tensor *images, *labels; /* u8 (60000, 28, 28) and u8 (60000,) */
    if (eg_mnist_load(dir, true, &images, &labels) != EG_OK) {
        fprintf(stderr, "%s\n", eg_last_error());
        return 1;
    }
    int64_t n = limit > 0 && limit < eg_tensor_dim(images, 0) ? limit : eg_tensor_dim(images, 0);
    eg_tensor *flat = eg_reshape(eg_slice(images, 0, 0, n, 1), 2, (int64_t[]){n, 784});
    eg_tensor *x = eg_mul_scalar(eg_cast(flat, EG_DTYPE_F32), 1.0 / 255);
    eg_tensor *y = eg_slice(labels, 0, 0, n, 1);
    double losses[3] = {0};
    for (int mode = 0; mode < 3 && eg_last_status() == EG_OK; mode++)
        train(mode, x, y, &losses[mode]);
    int status = 0;
    if (eg_last_status() != EG_OK) {
        fprintf(stderr, "error: %s\n", eg_last_error());
        status = 1;
    } else if (memcmp(&losses[0], &losses[1], sizeof(double)) ||
               memcmp(&losses[0], &losses[2], sizeof(double))) {
        fprintf(stderr, "the modes differ: %.17g %.17g %.17g\n", losses[0], losses[1], losses[2]);
        status = 1;
    } else {
        printf("modes agree: the same last loss, bit for bit\n");
    }
    eg_scope_end();
    return status;
}
