/* Your own layer (Keras' Layer subclass with build and call, in C with Eagle): "Linear", a dense
 * layer written from ops, y = relu?(x @ kernel + bias), in a Sequential model with built-in
 * layers. The layer class is a table of callbacks: build creates the weights with
 * eg_layer_add_weight once the input's shape is known, compute_output_shape tells the model (and
 * the summary) what comes out, call computes the output from the inputs and the weights. The
 * weights are the model's variables like any other: the summary counts them, fit trains them
 * (the gradient tape records call's ops), a checkpoint saves them.
 * Build: see examples/CMakeLists.txt. Run: ./custom_layer [data directory] [examples]
 * (data directory "" or none: the Debian package dataset-fashion-mnist's; examples: how many
 * training images, default all 60,000). */
#include <eagle.h>
#include <stdio.h>
#include <stdlib.h>

#include "fashion_mnist_data.h"

/* What one Linear layer is: its state, owned by the layer (freed by free_state). */
typedef struct linear {
    int64_t units;
    bool relu;
} linear;

static eg_status linear_build(eg_layer *layer, void *state, int n_inputs,
                              const eg_layer_shape *input_shapes) {
    (void)n_inputs;
    const linear *l = state;
    int64_t in = input_shapes[0].dims[input_shapes[0].n_dims - 1];
    eg_initializer glorot = eg_initializer_of(EG_INITIALIZER_GLOROT_UNIFORM);
    if (!eg_layer_add_weight(layer, "kernel", 2, (int64_t[]){in, l->units}, EG_DTYPE_F32, &glorot,
                             true) ||
        !eg_layer_add_weight(layer, "bias", 1, &l->units, EG_DTYPE_F32, NULL, true)) /* zeros */
        return eg_last_status();
    return EG_OK;
}

static eg_status linear_output_shape(eg_layer *layer, void *state, int n_inputs,
                                     const eg_layer_shape *input_shapes, eg_layer_shape *output) {
    (void)layer, (void)n_inputs;
    *output = input_shapes[0];
    output->dims[output->n_dims - 1] = ((const linear *)state)->units;
    return EG_OK;
}

/* variables[] are the weights in eg_layer_add_weight's order: kernel, bias. */
static eg_tensor *linear_call(eg_layer *layer, void *state, int n_inputs, eg_tensor *const *inputs,
                              eg_tensor *const *variables, bool training) {
    (void)layer, (void)n_inputs, (void)training; /* no training-only behaviour */
    eg_tensor *product = eg_matmul(inputs[0], variables[0]);
    eg_tensor *y = product ? eg_add(product, variables[1]) : NULL; /* bias broadcasts */
    eg_release(product); /* the tape keeps what the gradient needs */
    if (y && ((const linear *)state)->relu) {
        eg_tensor *activated = eg_relu(y);
        eg_release(y);
        y = activated;
    }
    return y;
}

static const eg_layer_class linear_class = {
    .type = "Linear",
    .build = linear_build,
    .compute_output_shape = linear_output_shape,
    .call = linear_call,
    .free_state = free,
};

/* A new Linear layer of `units` outputs (NULL with an error). */
static eg_layer *linear_new(int64_t units, bool relu) {
    linear *l = malloc(sizeof *l);
    if (!l) return NULL;
    *l = (linear){units, relu};
    return eg_layer_new_custom(&linear_class, l, NULL); /* named "linear", "linear_1", ... */
}

int main(int argc, char **argv) {
    const char *dir = argc > 1 && argv[1][0] ? argv[1] : NULL;
    int64_t limit = argc > 2 ? atoll(argv[2]) : 0;
    eg_dataset *train = fashion_mnist_batches(dir, true, limit, 32, false);
    eg_dataset *test = fashion_mnist_batches(dir, false, limit > 0 ? limit / 4 : 0, 32, false);
    if (!train || !test) {
        fprintf(stderr, "%s\n", eg_last_error());
        return 1;
    }
    eg_manual_seed(42);
    eg_model *model = eg_sequential_new("custom");
    eg_sequential_add(model, eg_flatten_new(NULL));
    eg_sequential_add(model, linear_new(64, true));
    eg_sequential_add(model, eg_dense_new(10, EG_ACTIVATION_NONE)); /* a built-in one after it */
    if (eg_model_build(model, 3, (int64_t[]){-1, 28, 28}) != EG_OK ||
        eg_model_summary(model, stdout) != EG_OK) {
        fprintf(stderr, "%s\n", eg_last_error());
        return 1;
    }

    eg_optimizer *adam = eg_adam_new(NULL);
    eg_compile_options compile = {.loss = EG_FIT_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY,
                                  .from_logits = true,
                                  .accuracy = true,
                                  .mode = EG_EXECUTION_GRAPH}; /* custom layers trace too */
    eg_fit_options options = eg_fit_options_default();
    options.epochs = 2;
    options.verbose = 2;
    eg_history *history = eg_model_compile(model, adam, &compile) == EG_OK
                              ? eg_model_fit(model, train, &options)
                              : NULL;
    eg_logs results;
    if (!history || eg_model_evaluate(model, test, NULL, &results) != EG_OK) {
        fprintf(stderr, "%s\n", eg_last_error());
        return 1;
    }
    double accuracy = 0;
    eg_logs_get(&results, "accuracy", &accuracy);
    printf("test accuracy %.4f\n", accuracy);

    eg_history_free(history);
    eg_optimizer_free(adam);
    eg_model_free(model);
    eg_dataset_free(train);
    eg_dataset_free(test);
    return 0;
}
