/* Checkpoint and resume a custom training loop, bit for bit (tf.train.Checkpoint in C):
 *   1. an uninterrupted run trains 2N steps and records every loss;
 *   2. a second run trains N steps and saves everything with eg_training_save: the weights, the
 *      optimizer's slots and step counter, the random generator's state (the dropout masks to
 *      come) and the loop's position, in one safetensors file;
 *   3. a fresh model and optimizer (as after a restart: new random weights, new slots) load it
 *      with eg_training_load and train the remaining N steps.
 * The resumed losses must equal the uninterrupted ones exactly; the program says so, or exits
 * non-zero.
 * Build: see examples/CMakeLists.txt. Run: ./checkpoint_resume [data directory] [N]
 * (data directory "" or none: the Debian package dataset-fashion-mnist's; N default 20). */
#include <eagle.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { BATCH = 32, MAX_STEPS = 1000 };

typedef struct run {
    eg_model *model;
    eg_optimizer *optimizer;
} run;

/* A model and an optimizer, the same every time: eg_training_load needs the same layers and
 * optimizer kind and options. */
static run run_new(uint64_t seed) {
    eg_manual_seed(seed);
    run r = {eg_sequential_new("mlp"), eg_adam_new(NULL)};
    eg_sequential_add(r.model, eg_dense_new(64, EG_ACTIVATION_RELU));
    eg_sequential_add(r.model, eg_dropout_new(0.2, NULL)); /* draws from the default generator */
    eg_sequential_add(r.model, eg_dense_new(10, EG_ACTIVATION_NONE));
    eg_model_build(r.model, 2, (int64_t[]){-1, 784});
    return r;
}

static void run_free(run *r) {
    eg_optimizer_free(r->optimizer);
    eg_model_free(r->model);
}

/* Steps [first, last) of the loop, each on batch `step` of x, y; their losses into losses[]. */
static eg_status train(run *r, const eg_tensor *x, const eg_tensor *y, int64_t first, int64_t last,
                       double *losses) {
    for (int64_t step = first; step < last && eg_last_status() == EG_OK; step++) {
        eg_scope_begin();
        eg_tensor *xb = eg_slice(x, 0, step * BATCH, (step + 1) * BATCH, 1);
        eg_tensor *yb = eg_slice(y, 0, step * BATCH, (step + 1) * BATCH, 1);
        eg_tape *tape = eg_tape_begin(false);
        eg_tensor *logits = eg_model_call(r->model, xb, true);
        eg_tensor *loss =
            eg_loss_sparse_categorical_crossentropy(yb, logits, true, EG_REDUCTION_MEAN);
        int n;
        eg_tensor *const *vars = eg_model_trainable_variables(r->model, &n);
        eg_tensor *grads[4];
        eg_tape_gradient(tape, loss, n, vars, grads, EG_UNCONNECTED_ZERO);
        eg_tape_free(tape);
        eg_optimizer_apply_gradients(r->optimizer, n, grads, vars);
        losses[step] = eg_item(loss);
        eg_scope_end();
    }
    return eg_last_status();
}

int main(int argc, char **argv) {
    const char *dir = argc > 1 && argv[1][0] ? argv[1] : NULL;
    int64_t half = argc > 2 ? atoll(argv[2]) : 20;
    if (half < 1 || 2 * half > MAX_STEPS) {
        fprintf(stderr, "N must be in [1, %d]\n", MAX_STEPS / 2);
        return 1;
    }
    eg_scope_begin(); /* owns the data */
    eg_tensor *images, *labels;
    if (eg_mnist_load(dir, true, &images, &labels) != EG_OK) {
        fprintf(stderr, "%s\n", eg_last_error());
        return 1;
    }
    int64_t n = 2 * half * BATCH;
    eg_tensor *flat = eg_reshape(eg_slice(images, 0, 0, n, 1), 2, (int64_t[]){n, 784});
    eg_tensor *x = eg_mul_scalar(eg_cast(flat, EG_DTYPE_F32), 1.0 / 255);
    eg_tensor *y = eg_slice(labels, 0, 0, n, 1);

    static double uninterrupted[MAX_STEPS], resumed[MAX_STEPS];
    run a = run_new(42);
    train(&a, x, y, 0, 2 * half, uninterrupted);
    run_free(&a);

    const char *path = "checkpoint_resume.safetensors";
    run b = run_new(42);
    train(&b, x, y, 0, half, resumed);
    eg_training_position position = {.epoch = 0, .step = half};
    eg_training_save(path, b.model, b.optimizer, &position, 1, (const char *[]){"note"},
                     (const char *[]){"an example checkpoint"});
    run_free(&b); /* the first process ends here */

    run c = run_new(1234); /* another seed: other weights, until the checkpoint replaces them */
    eg_training_position loaded = {0};
    if (eg_last_status() == EG_OK && eg_training_load(path, c.model, c.optimizer, &loaded) == EG_OK)
        printf("restored from %s at epoch %lld, step %lld\n", path, (long long)loaded.epoch,
               (long long)loaded.step);
    train(&c, x, y, loaded.step, 2 * half, resumed);
    run_free(&c);
    eg_scope_end();
    remove(path);
    if (eg_last_status() != EG_OK) {
        fprintf(stderr, "error: %s\n", eg_last_error());
        return 1;
    }

    for (int64_t step = 0; step<2 * half; step += half / 4> 0 ? half / 4 : 1)
        printf("step %3lld  uninterrupted %.8f  %s %.8f\n", (long long)step, uninterrupted[step],
               step < half ? "first run" : "resumed  ", resumed[step]);
    if (memcmp(uninterrupted, resumed, sizeof(double) * (size_t)(2 * half)) != 0) {
        fprintf(stderr, "the resumed run differs from the uninterrupted one\n");
        return 1;
    }
    printf("resumed losses equal the uninterrupted run's bit for bit (%lld steps)\n",
           (long long)(2 * half));
    return 0;
}
