/* Keras' functional API (eagle/nn.h: eg_input, eg_layer_apply, eg_functional_model_new):
 *   - a two-input, two-output model computes what its layers applied by hand compute;
 *   - a residual block's gradients match central differences in f64;
 *   - a shared layer is one set of weights, listed once, whose gradient sums both uses;
 *   - save_weights / load_weights round trip by the layers' unique names;
 *   - eg_model_fit trains a functional model (with batch normalization) in eager, lazy and graph
 *     mode to the same weights;
 *   - the summary has Keras' columns, None for the batch and "Connected to"; a Sequential model
 *     built for a batch of 1 says None too;
 *   - a disconnected graph, a layer of another model, wrong inputs get clear errors. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "eagle.h"
#include "test_util.h"

static char *summary_text(const eg_model *model) {
    char *text = NULL;
    size_t size = 0;
    FILE *out = open_memstream(&text, &size);
    assert_non_null(out);
    assert_int_equal(eg_model_summary(model, out), EG_OK);
    fclose(out);
    return text;
}

static void assert_same_values(const eg_tensor *a, const eg_tensor *b) {
    assert_non_null(a);
    assert_non_null(b);
    assert_int_equal(eg_tensor_n_elems(a), eg_tensor_n_elems(b));
    assert_memory_equal(eg_tensor_data(a), eg_tensor_data(b),
                        (size_t)eg_tensor_n_elems(a) * eg_dtype_size(eg_tensor_dtype(a)));
}

/* a (None, 4), b (None, 3) -> h = dense(a), g = dense_1(b), c = concat(h, g),
 * outputs: dense_2(c) (None, 2) and dense_3(h) (None, 1) */
static eg_model *two_in_two_out(eg_layer **layers) {
    eg_manual_seed(21);
    eg_symbol *a = eg_input(1, (int64_t[]){4}, EG_DTYPE_F32, "a");
    eg_symbol *b = eg_input(1, (int64_t[]){3}, EG_DTYPE_F32, "b");
    layers[0] = eg_dense_new(5, EG_ACTIVATION_RELU);
    layers[1] = eg_dense_new(5, EG_ACTIVATION_TANH);
    layers[2] = eg_concatenate_new(-1, NULL);
    layers[3] = eg_dense_new(2, EG_ACTIVATION_NONE);
    layers[4] = eg_dense_new(1, EG_ACTIVATION_SIGMOID);
    eg_symbol *h = eg_layer_apply(layers[0], a);
    eg_symbol *g = eg_layer_apply(layers[1], b);
    eg_symbol *c = eg_layer_apply_multi(layers[2], 2, (const eg_symbol *[]){h, g});
    int n_dims;
    const int64_t *shape = eg_symbol_shape(c, &n_dims);
    assert_int_equal(n_dims, 2);
    assert_int_equal(shape[0], -1);
    assert_int_equal(shape[1], 10);
    eg_symbol *y1 = eg_layer_apply(layers[3], c);
    eg_symbol *y2 = eg_layer_apply(layers[4], h);
    eg_model *model = eg_functional_model_new(2, (const eg_symbol *[]){a, b}, 2,
                                              (const eg_symbol *[]){y1, y2}, "two");
    assert_non_null(model);
    return model;
}

static void test_two_inputs_two_outputs(void **state) {
    (void)state;
    eg_layer *layers[5];
    eg_model *model = two_in_two_out(layers);
    assert_int_equal(eg_model_n_inputs(model), 2);
    assert_int_equal(eg_model_n_outputs(model), 2);
    assert_int_equal(eg_model_n_layers(model), 7); /* two InputLayers and five */
    assert_string_equal(eg_layer_type(eg_model_layer(model, 0)), "InputLayer");
    assert_string_equal(eg_layer_name(layers[1]), "dense_1");
    assert_string_equal(eg_layer_name(layers[4]), "dense_3");
    int n;
    eg_tensor *const *vars = eg_model_trainable_variables(model, &n);
    assert_int_equal(n, 8);
    assert_string_equal(eg_variable_name(vars[0]), "dense/kernel");

    eg_tensor *a = uniform_tensor(2, (int64_t[]){6, 4}, 1);
    eg_tensor *b = uniform_tensor(2, (int64_t[]){6, 3}, 2);
    eg_tensor *out[2];
    assert_int_equal(eg_model_call_multi(model, 2, (eg_tensor *[]){a, b}, false, 2, out), EG_OK);
    eg_tensor *h = eg_layer_call(layers[0], a, false);
    eg_tensor *g = eg_layer_call(layers[1], b, false);
    eg_tensor *c = eg_concat(2, (eg_tensor *[]){h, g}, 1);
    assert_same_values(out[0], eg_layer_call(layers[3], c, false));
    assert_same_values(out[1], eg_layer_call(layers[4], h, false));
    assert_int_equal(eg_tensor_dim(out[0], 1), 2);
    eg_release(out[0]);
    eg_release(out[1]);

    /* wrong counts, dtypes and shapes */
    assert_null(eg_model_call(model, a, false));
    expect_error_containing(EG_ERR_INVALID_ARGUMENT, "takes 2 input(s) and gives 2 output(s)",
                            NULL);
    assert_int_equal(eg_model_call_multi(model, 2, (eg_tensor *[]){b, a}, false, 2, out),
                     EG_ERR_SHAPE);
    assert_null(out[0]);
    expect_error_containing(EG_ERR_SHAPE, "input 0 ('a')", "(-1, 4)", "(6, 3)", NULL);
    eg_tensor *a64 = eg_cast(a, EG_DTYPE_F64);
    assert_int_equal(eg_model_call_multi(model, 2, (eg_tensor *[]){a64, b}, false, 2, out),
                     EG_ERR_DTYPE);
    eg_clear_error();
    assert_int_equal(eg_model_build(model, 2, (int64_t[]){-1, 4}), EG_ERR_SHAPE);
    eg_clear_error();

    /* the summary: Keras' four columns, None for the batch, what feeds each layer */
    char *text = summary_text(model);
    assert_non_null(strstr(text, "Model: \"two\"\n"));
    assert_non_null(strstr(text, " Layer (type)                   Output Shape         Param #     "
                                 "Connected to\n"));
    assert_non_null(strstr(text,
                           "\n a (InputLayer)                 [(None, 4)]          0           "
                           "[]\n"));
    assert_non_null(strstr(text,
                           "\n concatenate (Concatenate)      (None, 10)           0           "
                           "['dense[0][0]', 'dense_1[0][0]']\n"));
    assert_non_null(strstr(text,
                           "\n dense_3 (Dense)                (None, 1)            6           "
                           "['dense[0][0]']\n"));
    assert_null(strstr(text, "(6,"));
    free(text);
    eg_model_free(model);
}

/* x (None, 3) -> h = tanh(x W1 + b1) -> s = x + h -> y = s W2 + b2, in f64;
 * L = sum(y * y * w) */
static void test_residual_block_gradients(void **state) {
    (void)state;
    enum { B = 2, D = 3, OUT = 2 };
    eg_manual_seed(8);
    eg_dense_options o = eg_dense_options_default();
    o.dtype = EG_DTYPE_F64;
    o.activation = EG_ACTIVATION_TANH;
    o.bias_initializer = eg_initializer_random_uniform(-0.5, 0.5);
    eg_symbol *x = eg_input(1, (int64_t[]){D}, EG_DTYPE_F64, NULL);
    eg_symbol *h = eg_layer_apply(eg_dense_new_ex(D, &o), x);
    eg_symbol *s = eg_layer_apply_multi(eg_add_layer_new(NULL), 2, (const eg_symbol *[]){x, h});
    o.activation = EG_ACTIVATION_NONE;
    eg_symbol *y = eg_layer_apply(eg_dense_new_ex(OUT, &o), s);
    eg_model *model = eg_functional_model_new(1, (const eg_symbol *[]){x}, 1,
                                              (const eg_symbol *[]){y}, "residual");
    assert_non_null(model);
    double x_data[B * D], w_data[B * OUT];
    for (int i = 0; i < B * D; i++) x_data[i] = sin(0.9 * i + 0.3);
    for (int i = 0; i < B * OUT; i++) w_data[i] = 1 + 0.5 * cos(1.7 * i);
    eg_tensor *input = eg_tensor_from_data(x_data, EG_DTYPE_F64, 2, (int64_t[]){B, D});
    eg_tensor *w = eg_tensor_from_data(w_data, EG_DTYPE_F64, 2, (int64_t[]){B, OUT});
    int n;
    eg_tensor *const *vars = eg_model_trainable_variables(model, &n);
    assert_int_equal(n, 4);
    /* the input's gradient too: the skip connection carries it around the dense layer */
    eg_tensor *sources[5] = {vars[0], vars[1], vars[2], vars[3], input};
    eg_tape *tape = eg_tape_begin(false);
    eg_tape_watch(tape, input);
    eg_tensor *out = eg_model_call(model, input, true);
    eg_tensor *loss = eg_sum(eg_mul(eg_square(out), w), 0, NULL, false);
    eg_tensor *grads[5];
    assert_int_equal(eg_tape_gradient(tape, loss, 5, sources, grads, EG_UNCONNECTED_ZERO), EG_OK);
    eg_tape_free(tape);
    const double step = 1e-6;
    int checked = 0;
    for (int v = 0; v < 5; v++) {
        int64_t k = eg_tensor_n_elems(sources[v]);
        double values[16];
        assert_true(k <= 16);
        assert_int_equal(eg_tensor_copy_to_host(sources[v], values, (size_t)k * 8), EG_OK);
        const double *analytic = eg_tensor_data(grads[v]);
        for (int64_t i = 0; i < k; i++) {
            double around[2];
            for (int side = 0; side < 2; side++) {
                double moved[16];
                memcpy(moved, values, (size_t)k * 8);
                moved[i] += side ? -step : step;
                eg_tensor *t = eg_tensor_from_data(
                    moved, EG_DTYPE_F64, eg_tensor_n_dims(sources[v]), eg_tensor_shape(sources[v]));
                eg_tensor *at = v < 4 ? input : t;
                if (v < 4) assert_int_equal(eg_assign(sources[v], t), EG_OK);
                eg_tensor *moved_out = eg_model_call(model, at, true);
                around[side] = eg_item(eg_sum(eg_mul(eg_square(moved_out), w), 0, NULL, false));
            }
            if (v < 4)
                assert_int_equal(
                    eg_assign(sources[v], eg_tensor_from_data(values, EG_DTYPE_F64,
                                                              eg_tensor_n_dims(sources[v]),
                                                              eg_tensor_shape(sources[v]))),
                    EG_OK);
            double numeric = (around[0] - around[1]) / (2 * step);
            if (fabs(analytic[i] - numeric) > 1e-6 * (1 + fabs(numeric)))
                fail_msg("source %d element %lld: tape %.10g, differences %.10g", v, (long long)i,
                         analytic[i], numeric);
            checked++;
        }
    }
    assert_int_equal(checked, D * D + D + D * OUT + OUT + B * D);
    eg_model_free(model);
}

static void test_shared_layer_sums_its_gradient(void **state) {
    (void)state;
    enum { B = 4, D = 3, UNITS = 2 };
    eg_manual_seed(2);
    eg_symbol *a = eg_input(1, (int64_t[]){D}, EG_DTYPE_F32, NULL);
    eg_symbol *b = eg_input(1, (int64_t[]){D}, EG_DTYPE_F32, NULL);
    eg_layer *shared = eg_dense_new(UNITS, EG_ACTIVATION_NONE);
    eg_symbol *ya = eg_layer_apply(shared, a);
    eg_symbol *yb = eg_layer_apply(shared, b);
    eg_symbol *sum = eg_layer_apply_multi(eg_add_layer_new(NULL), 2, (const eg_symbol *[]){ya, yb});
    /* a shared layer takes the shape of its first application */
    eg_symbol *other = eg_input(1, (int64_t[]){D + 1}, EG_DTYPE_F32, "other");
    assert_null(eg_layer_apply(shared, other));
    expect_error_containing(EG_ERR_SHAPE, "shared layer 'dense'", NULL);
    eg_model *model = eg_functional_model_new(2, (const eg_symbol *[]){a, b}, 1,
                                              (const eg_symbol *[]){sum}, "siamese");
    assert_non_null(model);
    assert_int_equal(eg_model_n_layers(model), 4); /* input_layer, input_layer_1, dense, add */
    assert_string_equal(eg_layer_name(eg_model_layer(model, 1)), "input_layer_1");
    int n;
    eg_tensor *const *vars = eg_model_trainable_variables(model, &n);
    assert_int_equal(n, 2); /* once */
    assert_int_equal(eg_model_count_params(model), D * UNITS + UNITS);
    char *text = summary_text(model);
    assert_non_null(strstr(text, "['input_layer[0][0]', 'input_layer_1[0][0]']"));
    assert_non_null(strstr(text, "['dense[0][0]', 'dense[1][0]']"));
    assert_non_null(strstr(text, "Total params: 8\n"));
    free(text);

    /* L = sum(a W + bias + b W + bias): dL/dW[i][j] = sum over the batch of a[., i] + b[., i];
     * dL/dbias[j] = 2 B */
    eg_tensor *xa = uniform_tensor(2, (int64_t[]){B, D}, 5);
    eg_tensor *xb = uniform_tensor(2, (int64_t[]){B, D}, 6);
    eg_tape *tape = eg_tape_begin(false);
    eg_tensor *out[1];
    assert_int_equal(eg_model_call_multi(model, 2, (eg_tensor *[]){xa, xb}, true, 1, out), EG_OK);
    eg_tensor *loss = eg_sum(out[0], 0, NULL, false);
    eg_tensor *grads[2];
    assert_int_equal(eg_tape_gradient(tape, loss, 2, vars, grads, EG_UNCONNECTED_ZERO), EG_OK);
    eg_tape_free(tape);
    const float *pa = eg_tensor_data(xa), *pb = eg_tensor_data(xb);
    const float *dw = eg_tensor_data(grads[0]), *dbias = eg_tensor_data(grads[1]);
    for (int i = 0; i < D; i++) {
        double expected = 0;
        for (int r = 0; r < B; r++) expected += pa[r * D + i] + pb[r * D + i];
        for (int j = 0; j < UNITS; j++) assert_float_equal(dw[i * UNITS + j], expected, 1e-5);
    }
    for (int j = 0; j < UNITS; j++) assert_float_equal(dbias[j], 2.0 * B, 0);
    eg_model_free(model);
    eg_layer_free(eg_symbol_layer(other));
}

static void test_save_and_load_weights(void **state) {
    (void)state;
    char path[] = "/tmp/eagle_functional_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    eg_layer *layers[5];
    eg_model *saved = two_in_two_out(layers);
    assert_int_equal(eg_model_save_weights(saved, path), EG_OK);
    eg_manual_seed(99); /* other initial weights */
    eg_layer *other_layers[5];
    eg_model *loaded = two_in_two_out(other_layers);
    eg_tensor *a = uniform_tensor(2, (int64_t[]){3, 4}, 3);
    eg_tensor *b = uniform_tensor(2, (int64_t[]){3, 3}, 4);
    eg_tensor *in[2] = {a, b};
    eg_tensor *want[2], *got[2];
    assert_int_equal(eg_model_call_multi(saved, 2, in, false, 2, want), EG_OK);
    assert_int_equal(eg_model_load_weights(loaded, path), EG_OK);
    assert_int_equal(eg_model_call_multi(loaded, 2, in, false, 2, got), EG_OK);
    assert_same_values(want[0], got[0]);
    assert_same_values(want[1], got[1]);
    /* the names are the layers' unique names: a model named otherwise does not take the file */
    eg_symbol *x = eg_input(1, (int64_t[]){4}, EG_DTYPE_F32, NULL);
    eg_dense_options o = eg_dense_options_default();
    o.name = "renamed";
    eg_symbol *y = eg_layer_apply(eg_dense_new_ex(5, &o), x);
    eg_model *mismatch =
        eg_functional_model_new(1, (const eg_symbol *[]){x}, 1, (const eg_symbol *[]){y}, NULL);
    assert_string_equal(eg_model_name(mismatch), "model");
    assert_int_equal(eg_model_load_weights(mismatch, path), EG_ERR_INVALID_ARGUMENT);
    expect_error_containing(EG_ERR_INVALID_ARGUMENT, "renamed/kernel", NULL);
    eg_model_free(mismatch);
    eg_model_free(saved);
    eg_model_free(loaded);
    unlink(path);
}

/* ---- fit: a residual MLP with batch normalization, in each mode ---- */

enum { N = 192, FEATURES = 4, CLASSES = 3, BATCH = 32, WIDTH = 8 };
static float xs[N * FEATURES];
static int64_t ys[N];

static void make_data(void) {
    uint64_t state = 31;
    for (int i = 0; i < N; i++) {
        ys[i] = i % CLASSES;
        for (int f = 0; f < FEATURES; f++) {
            state = state * 6364136223846793005ull + 1442695040888963407ull;
            double u = (double)(state >> 40) / (double)(1 << 24) - 0.5;
            xs[i * FEATURES + f] = (float)((f == ys[i] ? 2.0 : 0.0) + 0.6 * u);
        }
    }
}

static eg_model *residual_mlp(void) {
    eg_manual_seed(13);
    eg_symbol *x = eg_input(1, (int64_t[]){FEATURES}, EG_DTYPE_F32, NULL);
    eg_symbol *h = eg_layer_apply(eg_dense_new(WIDTH, EG_ACTIVATION_RELU), x);
    eg_symbol *r = eg_layer_apply(eg_dense_new(WIDTH, EG_ACTIVATION_NONE), h);
    r = eg_layer_apply(eg_batch_norm_new(NULL), r);
    eg_symbol *s = eg_layer_apply_multi(eg_add_layer_new(NULL), 2, (const eg_symbol *[]){h, r});
    s = eg_layer_apply(eg_activation_new(EG_ACTIVATION_RELU, NULL), s);
    eg_symbol *y = eg_layer_apply(eg_dense_new(CLASSES, EG_ACTIVATION_NONE), s);
    eg_model *model =
        eg_functional_model_new(1, (const eg_symbol *[]){x}, 1, (const eg_symbol *[]){y}, NULL);
    assert_non_null(model);
    return model;
}

enum { MAX_WEIGHTS = 512 };

static int64_t fit_in_mode(eg_execution_mode mode, float *weights, double *accuracy) {
    eg_model *model = residual_mlp();
    eg_adam_options ao = eg_adam_options_default();
    ao.learning_rate = eg_schedule_constant(0.01);
    eg_optimizer *opt = eg_adam_new(&ao);
    eg_compile_options c = {.loss = EG_FIT_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY,
                            .from_logits = true,
                            .accuracy = true,
                            .mode = mode};
    assert_int_equal(eg_model_compile(model, opt, &c), EG_OK);
    eg_tensor *x = eg_tensor_from_data(xs, EG_DTYPE_F32, 2, (int64_t[]){N, FEATURES});
    eg_tensor *y = eg_tensor_from_data(ys, EG_DTYPE_I64, 1, (int64_t[]){N});
    eg_dataset *ds =
        eg_dataset_batch(eg_dataset_from_tensor_slices(2, (eg_tensor *[]){x, y}), BATCH, false);
    eg_release(x);
    eg_release(y);
    eg_fit_options o = eg_fit_options_default();
    o.epochs = 3;
    o.verbose = 0;
    eg_history *h = eg_model_fit(model, ds, &o);
    assert_non_null(h);
    int epochs;
    const double *acc = eg_history_values(h, "accuracy", &epochs);
    assert_int_equal(epochs, 3);
    *accuracy = acc[epochs - 1];
    int n;
    eg_tensor *const *vars = eg_model_variables(model, &n); /* moving statistics too */
    int64_t used = 0;
    for (int i = 0; i < n; i++) {
        int64_t k = eg_tensor_n_elems(vars[i]);
        assert_true(used + k <= MAX_WEIGHTS);
        assert_int_equal(eg_tensor_copy_to_host(vars[i], weights + used, (size_t)k * 4), EG_OK);
        used += k;
    }
    eg_history_free(h);
    eg_dataset_free(ds);
    eg_optimizer_free(opt);
    eg_model_free(model);
    return used;
}

static void test_fit_in_every_mode(void **state) {
    (void)state;
    static float eager[MAX_WEIGHTS], lazy[MAX_WEIGHTS], graph[MAX_WEIGHTS];
    double acc_eager, acc_lazy, acc_graph;
    int64_t n = fit_in_mode(EG_EXECUTION_EAGER, eager, &acc_eager);
    assert_int_equal(fit_in_mode(EG_EXECUTION_LAZY, lazy, &acc_lazy), n);
    assert_int_equal(fit_in_mode(EG_EXECUTION_GRAPH, graph, &acc_graph), n);
    double worst = 0;
    for (int64_t i = 0; i < n; i++) {
        double scale = 1 + fabs(eager[i]);
        worst = fmax(worst, fabs(lazy[i] - eager[i]) / scale);
        worst = fmax(worst, fabs(graph[i] - eager[i]) / scale);
    }
    print_message("accuracy %.3f; largest difference from eager: %.2e\n", acc_eager, worst);
    assert_true(worst <= 1e-5);
    assert_true(acc_eager > 0.9); /* separable blobs: it learns */
    assert_float_equal(acc_lazy, acc_eager, 1e-9);
    assert_float_equal(acc_graph, acc_eager, 1e-9);
}

static void test_sequential_summary_says_none_for_the_batch(void **state) {
    (void)state;
    eg_model *model = eg_sequential_new(NULL);
    assert_int_equal(eg_sequential_add(model, eg_dense_new(64, EG_ACTIVATION_RELU)), EG_OK);
    /* built for a batch of one, as tools/eagle's mlp was: the model still serves any batch */
    assert_int_equal(eg_model_build(model, 2, (int64_t[]){1, 784}), EG_OK);
    char *text = summary_text(model);
    assert_non_null(
        strstr(text, " dense (Dense)               (None, 64)                50,240\n"));
    free(text);
    eg_tensor *x = uniform_tensor(2, (int64_t[]){3, 784}, 1);
    eg_tensor *y = eg_model_call(model, x, false);
    assert_int_equal(eg_tensor_dim(y, 0), 3);
    eg_model_free(model);
}

static void test_bad_graphs_get_clear_errors(void **state) {
    (void)state;
    eg_symbol *a = eg_input(1, (int64_t[]){3}, EG_DTYPE_F32, "a");
    eg_symbol *b = eg_input(1, (int64_t[]){3}, EG_DTYPE_F32, "b");
    eg_symbol *sum = eg_layer_apply_multi(eg_add_layer_new(NULL), 2, (const eg_symbol *[]){a, b});
    /* the output needs b, which is not among the inputs: nothing is taken */
    assert_null(
        eg_functional_model_new(1, (const eg_symbol *[]){a}, 1, (const eg_symbol *[]){sum}, NULL));
    expect_error_containing(EG_ERR_INVALID_ARGUMENT, "graph disconnected", "'b'", NULL);
    /* an input must come from eg_input, once */
    assert_null(eg_functional_model_new(1, (const eg_symbol *[]){sum}, 1,
                                        (const eg_symbol *[]){sum}, NULL));
    expect_error_containing(EG_ERR_INVALID_ARGUMENT, "not from eg_input", NULL);
    assert_null(eg_functional_model_new(2, (const eg_symbol *[]){a, a}, 1,
                                        (const eg_symbol *[]){sum}, NULL));
    expect_error_containing(EG_ERR_INVALID_ARGUMENT, "given twice", NULL);
    /* a failed application of a fresh layer frees it; NULL inputs pass through */
    assert_null(eg_layer_apply(eg_flatten_new(NULL), NULL));
    assert_int_equal(eg_last_status(), EG_OK);
    eg_symbol *scalar = eg_input(0, NULL, EG_DTYPE_F32, "s");
    assert_null(eg_layer_apply(eg_dense_new(2, EG_ACTIVATION_NONE), scalar));
    expect_error(EG_ERR_SHAPE);
    eg_layer_free(eg_symbol_layer(scalar));
    /* merging layers check their inputs' shapes */
    eg_symbol *wide = eg_input(1, (int64_t[]){4}, EG_DTYPE_F32, "wide");
    assert_null(eg_layer_apply_multi(eg_add_layer_new(NULL), 2, (const eg_symbol *[]){a, wide}));
    expect_error_containing(EG_ERR_SHAPE, "Add: 'add' needs inputs of one shape",
                            "(-1, 3), (-1, 4)", NULL);
    eg_symbol *joined =
        eg_layer_apply_multi(eg_concatenate_new(-1, NULL), 2, (const eg_symbol *[]){a, wide});
    int n_dims;
    assert_int_equal(eg_symbol_shape(joined, &n_dims)[1], 7);
    eg_layer_free(eg_symbol_layer(joined));
    eg_symbol *tall = eg_input(2, (int64_t[]){2, 3}, EG_DTYPE_F32, "tall");
    assert_null(
        eg_layer_apply_multi(eg_concatenate_new(-1, NULL), 2, (const eg_symbol *[]){a, tall}));
    expect_error_containing(EG_ERR_SHAPE, "of one rank", NULL);
    assert_null(eg_layer_apply_multi(eg_concatenate_new(0, NULL), 2, (const eg_symbol *[]){a, a}));
    expect_error_containing(EG_ERR_INVALID_ARGUMENT, "is the batch", NULL);
    eg_layer_free(eg_symbol_layer(wide));
    eg_layer_free(eg_symbol_layer(tall));
    /* two layers of one name */
    eg_dense_options o = eg_dense_options_default();
    o.name = "twin";
    eg_symbol *t1 = eg_layer_apply(eg_dense_new_ex(2, &o), sum);
    eg_symbol *t2 = eg_layer_apply(eg_dense_new_ex(2, &o), sum);
    assert_null(eg_functional_model_new(2, (const eg_symbol *[]){a, b}, 2,
                                        (const eg_symbol *[]){t1, t2}, NULL));
    expect_error_containing(EG_ERR_STATE, "'twin'", NULL);
    eg_model *model =
        eg_functional_model_new(2, (const eg_symbol *[]){a, b}, 1, (const eg_symbol *[]){t1}, NULL);
    assert_non_null(model);
    /* its layers are its own now */
    assert_null(eg_layer_apply(eg_symbol_layer(t1), sum));
    expect_error_containing(EG_ERR_INVALID_ARGUMENT, "already belongs to model 'model'", NULL);
    eg_layer_free(eg_symbol_layer(t1));
    expect_error(EG_ERR_STATE);
    assert_int_equal(eg_sequential_add(model, eg_flatten_new(NULL)), EG_ERR_INVALID_ARGUMENT);
    expect_error_containing(EG_ERR_INVALID_ARGUMENT, "is functional", NULL);
    /* a layer applied to symbols stays out of Sequential models */
    eg_model *seq = eg_sequential_new(NULL);
    assert_int_equal(eg_sequential_add(seq, eg_symbol_layer(t2)), EG_ERR_INVALID_ARGUMENT);
    expect_error_containing(EG_ERR_INVALID_ARGUMENT, "applied to symbols", NULL);
    eg_model_free(seq);
    eg_model_free(model);
}

int main(void) {
    make_data();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_two_inputs_two_outputs, fresh_scope_setup,
                                        strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_residual_block_gradients, fresh_scope_setup,
                                        strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_shared_layer_sums_its_gradient, fresh_scope_setup,
                                        strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_save_and_load_weights, fresh_scope_setup,
                                        strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_fit_in_every_mode, fresh_scope_setup,
                                        strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_sequential_summary_says_none_for_the_batch,
                                        fresh_scope_setup, strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_bad_graphs_get_clear_errors, fresh_scope_setup,
                                        strict_scope_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
