/* Layers, the Sequential model, initializers, losses and metrics: shapes, parameter counts,
 * variable names and collection, initializer statistics and reproducibility, the summary text,
 * loss values against hand-computed numbers, the fused sparse cross-entropy against the unfused
 * log_softmax + gather composition (values and gradients), metric values, and the issue's
 * training loop (Dense(relu) -> Dense, SCCE from logits, Adam, GradientTape over batches of 32)
 * on a small synthetic problem. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "eagle.h"

static int setup(void **state) {
    (void)state;
    eg_clear_error();
    eg_scope_begin();
    return 0;
}

static int teardown(void **state) {
    (void)state;
    assert_int_equal(eg_scope_end(), EG_OK);
    assert_int_equal(eg_scope_depth(), 0);
    eg_clear_error();
    return 0;
}

static void assert_shape(const eg_tensor *t, int n_dims, const int64_t *shape) {
    assert_non_null(t);
    assert_int_equal(eg_tensor_n_dims(t), n_dims);
    for (int d = 0; d < n_dims; d++) assert_int_equal(eg_tensor_shape(t)[d], shape[d]);
}

static double at(const eg_tensor *t, int64_t i) {
    int64_t index[EG_MAX_DIMS] = {0};
    int n = eg_tensor_n_dims(t);
    for (int d = n - 1; d >= 0; d--) {
        index[d] = i % eg_tensor_shape(t)[d];
        i /= eg_tensor_shape(t)[d];
    }
    return eg_tensor_get(t, index);
}

static void expect_close(const eg_tensor *t, const double *expected, int64_t n, double tol) {
    assert_non_null(t);
    assert_int_equal(eg_tensor_n_elems(t), n);
    for (int64_t i = 0; i < n; i++) {
        double got = at(t, i);
        if (!(fabs(got - expected[i]) <= tol))
            fail_msg("element %lld: got %.12g, expected %.12g", (long long)i, got, expected[i]);
    }
}

static eg_tensor *f64_tensor(const double *data, int n_dims, const int64_t *shape) {
    eg_tensor *t = eg_tensor_from_data(data, EG_DTYPE_F64, n_dims, shape);
    assert_non_null(t);
    return t;
}

/* ---- initializers ---- */

typedef struct stats {
    double mean, variance, max_abs;
} stats;

static stats tensor_stats(const eg_tensor *t) {
    int64_t n = eg_tensor_n_elems(t);
    double *v = malloc((size_t)n * sizeof *v);
    eg_tensor *wide = eg_cast(t, EG_DTYPE_F64);
    assert_int_equal(eg_tensor_copy_to_host(wide, v, (size_t)n * sizeof *v), EG_OK);
    stats s = {0, 0, 0};
    for (int64_t i = 0; i < n; i++) s.mean += v[i];
    s.mean /= (double)n;
    for (int64_t i = 0; i < n; i++) {
        s.variance += (v[i] - s.mean) * (v[i] - s.mean);
        s.max_abs = fmax(s.max_abs, fabs(v[i]));
    }
    s.variance /= (double)n;
    free(v);
    return s;
}

static void test_initializer_statistics(void **state) {
    (void)state;
    eg_generator *gen = eg_generator_new(1234);
    int64_t shape[2] = {784, 64}; /* fan_in 784, fan_out 64: 50176 samples */
    struct {
        eg_initializer_kind kind;
        double variance, bound; /* expected variance; every |x| <= bound */
    } cases[] = {
        {EG_INITIALIZER_GLOROT_UNIFORM, 2.0 / 848, sqrt(6.0 / 848)},
        {EG_INITIALIZER_HE_UNIFORM, 2.0 / 784, sqrt(6.0 / 784)},
        /* truncated normals: variance as stated, cut at 2 stddev of the underlying normal */
        {EG_INITIALIZER_GLOROT_NORMAL, 2.0 / 848, 2 * sqrt(2.0 / 848) / 0.87962566103423978},
        {EG_INITIALIZER_HE_NORMAL, 2.0 / 784, 2 * sqrt(2.0 / 784) / 0.87962566103423978},
        {EG_INITIALIZER_RANDOM_NORMAL, 0.05 * 0.05, 1.0},
        {EG_INITIALIZER_RANDOM_UNIFORM, 0.1 * 0.1 / 12, 0.05},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        eg_initializer init = eg_initializer_of(cases[k].kind);
        eg_tensor *t = eg_initializer_generate(&init, gen, EG_DTYPE_F32, 2, shape);
        assert_shape(t, 2, shape);
        assert_int_equal(eg_tensor_dtype(t), EG_DTYPE_F32);
        stats s = tensor_stats(t);
        double sd = sqrt(cases[k].variance);
        if (fabs(s.mean) > 5 * sd / sqrt(50176.0) ||
            fabs(s.variance / cases[k].variance - 1) > 0.03 ||
            s.max_abs > cases[k].bound * (1 + 1e-6))
            fail_msg("%s: mean %g variance %g (expected %g) max |x| %g (bound %g)",
                     eg_initializer_name(cases[k].kind), s.mean, s.variance, cases[k].variance,
                     s.max_abs, cases[k].bound);
        /* uniform ones reach close to their bound, truncated ones too */
        if (cases[k].kind != EG_INITIALIZER_RANDOM_NORMAL)
            assert_true(s.max_abs > 0.95 * cases[k].bound);
    }
    /* constants */
    eg_initializer zeros = eg_initializer_of(EG_INITIALIZER_ZEROS);
    eg_initializer ones = eg_initializer_of(EG_INITIALIZER_ONES);
    eg_initializer constant = eg_initializer_constant(0.25);
    int64_t three = 3;
    const double z[3] = {0, 0, 0}, o[3] = {1, 1, 1}, c[3] = {0.25, 0.25, 0.25};
    expect_close(eg_initializer_generate(&zeros, NULL, EG_DTYPE_F64, 1, &three), z, 3, 0);
    expect_close(eg_initializer_generate(&ones, NULL, EG_DTYPE_F64, 1, &three), o, 3, 0);
    expect_close(eg_initializer_generate(&constant, NULL, EG_DTYPE_F64, 1, &three), c, 3, 0);
    eg_initializer normal = eg_initializer_random_normal(3.0, 0.5);
    stats s = tensor_stats(eg_initializer_generate(&normal, gen, EG_DTYPE_F64, 2, shape));
    assert_float_equal(s.mean, 3.0, 0.01);
    assert_float_equal(sqrt(s.variance), 0.5, 0.01);
    assert_string_equal(eg_initializer_name(EG_INITIALIZER_HE_NORMAL), "he_normal");
    assert_string_equal(eg_initializer_name((eg_initializer_kind)99), "invalid");
    eg_generator_free(gen);
}

static void test_initializer_reproducible(void **state) {
    (void)state;
    int64_t shape[2] = {17, 5};
    for (int kind = 0; kind < EG_INITIALIZER_COUNT; kind++) {
        eg_initializer init = eg_initializer_of((eg_initializer_kind)kind);
        eg_generator *a = eg_generator_new(42), *b = eg_generator_new(42),
                     *c = eg_generator_new(43);
        eg_tensor *ta = eg_initializer_generate(&init, a, EG_DTYPE_F32, 2, shape);
        eg_tensor *tb = eg_initializer_generate(&init, b, EG_DTYPE_F32, 2, shape);
        eg_tensor *tc = eg_initializer_generate(&init, c, EG_DTYPE_F32, 2, shape);
        float va[85], vb[85], vc[85];
        eg_tensor_copy_to_host(ta, va, sizeof va);
        eg_tensor_copy_to_host(tb, vb, sizeof vb);
        eg_tensor_copy_to_host(tc, vc, sizeof vc);
        assert_memory_equal(va, vb, sizeof va);
        bool random = kind != EG_INITIALIZER_ZEROS && kind != EG_INITIALIZER_ONES &&
                      kind != EG_INITIALIZER_CONSTANT;
        assert_true(random == (memcmp(va, vc, sizeof va) != 0));
        eg_generator_free(a);
        eg_generator_free(b);
        eg_generator_free(c);
    }
    /* NULL = the default generator, reseeded by eg_manual_seed */
    eg_initializer init = eg_initializer_of(EG_INITIALIZER_HE_NORMAL);
    eg_manual_seed(9);
    eg_tensor *a = eg_initializer_generate(&init, NULL, EG_DTYPE_F32, 2, shape);
    eg_manual_seed(9);
    eg_tensor *b = eg_initializer_generate(&init, NULL, EG_DTYPE_F32, 2, shape);
    float va[85], vb[85];
    eg_tensor_copy_to_host(a, va, sizeof va);
    eg_tensor_copy_to_host(b, vb, sizeof vb);
    assert_memory_equal(va, vb, sizeof va);
}

static void test_initializer_errors(void **state) {
    (void)state;
    int64_t shape[1] = {4};
    eg_initializer init = eg_initializer_of(EG_INITIALIZER_GLOROT_UNIFORM);
    assert_null(eg_initializer_generate(&init, NULL, EG_DTYPE_I32, 1, shape));
    assert_int_equal(eg_last_status(), EG_ERR_DTYPE);
    eg_clear_error();
    init.kind = (eg_initializer_kind)77;
    assert_null(eg_initializer_generate(&init, NULL, EG_DTYPE_F32, 1, shape));
    assert_int_equal(eg_last_status(), EG_ERR_INVALID_ARGUMENT);
    eg_clear_error();
    init = eg_initializer_random_uniform(1.0, 1.0);
    assert_null(eg_initializer_generate(&init, NULL, EG_DTYPE_F32, 1, shape));
    assert_non_null(strstr(eg_last_error(), "random_uniform"));
    assert_non_null(strstr(eg_last_error(), "test_nn.c:"));
    eg_clear_error();
    assert_null(eg_initializer_generate(NULL, NULL, EG_DTYPE_F32, 1, shape));
    assert_int_equal(eg_last_status(), EG_ERR_NULL_ARGUMENT);
    eg_clear_error();
}

/* ---- layers ---- */

static void test_dense_shapes_and_params(void **state) {
    (void)state;
    eg_layer *dense = eg_dense_new(64, EG_ACTIVATION_RELU);
    assert_non_null(dense);
    assert_false(eg_layer_built(dense));
    assert_int_equal(eg_layer_count_params(dense), 0);
    int n = -1;
    assert_null(eg_layer_variables(dense, &n));
    assert_int_equal(n, 0);
    int64_t xs[2] = {32, 784};
    eg_tensor *x = eg_random_uniform(NULL, EG_DTYPE_F32, 2, xs, 0, 1);
    eg_tensor *y = eg_layer_call(dense, x, false);
    int64_t ys[2] = {32, 64};
    assert_shape(y, 2, ys);
    assert_true(eg_layer_built(dense));
    assert_int_equal(eg_layer_count_params(dense), 784 * 64 + 64);
    eg_tensor *const *vars = eg_layer_variables(dense, &n);
    assert_int_equal(n, 2);
    int64_t ks[2] = {784, 64}, bs[1] = {64};
    assert_shape(vars[0], 2, ks);
    assert_shape(vars[1], 1, bs);
    assert_string_equal(eg_variable_name(vars[0]), "dense/kernel");
    assert_string_equal(eg_variable_name(vars[1]), "dense/bias");
    assert_string_equal(eg_layer_type(dense), "Dense");
    /* relu output is non-negative; the bias starts at zero */
    for (int64_t i = 0; i < 64; i++) assert_true(at(y, i) >= 0 && at(vars[1], i) == 0);
    /* a 3-d input maps the last axis */
    int64_t x3s[3] = {2, 5, 784}, y3s[3] = {2, 5, 64};
    assert_shape(eg_layer_call(dense, eg_zeros(EG_DTYPE_F32, 3, x3s), false), 3, y3s);
    /* a wrong last dim is refused with a message naming the layer */
    int64_t bad[2] = {32, 100};
    assert_null(eg_layer_call(dense, eg_zeros(EG_DTYPE_F32, 2, bad), false));
    assert_int_equal(eg_last_status(), EG_ERR_SHAPE);
    assert_non_null(strstr(eg_last_error(), "'dense'"));
    eg_clear_error();
    /* dtype mismatch */
    assert_null(eg_layer_call(dense, eg_zeros(EG_DTYPE_F64, 2, xs), false));
    assert_int_equal(eg_last_status(), EG_ERR_DTYPE);
    eg_clear_error();
    eg_layer_free(dense);

    /* built eagerly from input_dim, no bias, named */
    eg_dense_options o = eg_dense_options_default();
    o.input_dim = 3;
    o.use_bias = false;
    o.name = "head";
    o.kernel_initializer = eg_initializer_of(EG_INITIALIZER_ONES);
    eg_layer *head = eg_dense_new_ex(2, &o);
    assert_true(eg_layer_built(head));
    assert_int_equal(eg_layer_count_params(head), 6);
    vars = eg_layer_variables(head, &n);
    assert_int_equal(n, 1);
    assert_string_equal(eg_variable_name(vars[0]), "head/kernel");
    const double xv[3] = {1, 2, 3};
    int64_t s13[2] = {1, 3};
    eg_tensor *x64 = eg_cast(f64_tensor(xv, 2, s13), EG_DTYPE_F32);
    const double sums[2] = {6, 6};
    expect_close(eg_layer_call(head, x64, true), sums, 2, 1e-6);
    eg_layer_free(head);

    assert_null(eg_dense_new(0, EG_ACTIVATION_NONE));
    assert_int_equal(eg_last_status(), EG_ERR_INVALID_ARGUMENT);
    eg_clear_error();
    assert_null(eg_dense_new(4, (eg_activation)42));
    eg_clear_error();
}

static void test_activation_and_flatten_layers(void **state) {
    (void)state;
    const double xv[4] = {-1, 0, 1, 2};
    int64_t s22[2] = {2, 2};
    eg_tensor *x = f64_tensor(xv, 2, s22);
    struct {
        eg_activation activation;
        const char *name;
        double expected[4];
    } cases[] = {
        {EG_ACTIVATION_NONE, "linear", {-1, 0, 1, 2}},
        {EG_ACTIVATION_RELU, "relu", {0, 0, 1, 2}},
        {EG_ACTIVATION_SIGMOID,
         "sigmoid",
         {0.2689414213699951, 0.5, 0.7310585786300049, 0.8807970779778823}},
        {EG_ACTIVATION_TANH,
         "tanh",
         {-0.7615941559557649, 0, 0.7615941559557649, 0.9640275800758169}},
        {EG_ACTIVATION_GELU,
         "gelu",
         {-0.15865525393145707, 0, 0.8413447460685429, 1.9544997361036416}},
        {EG_ACTIVATION_SOFTMAX,
         "softmax",
         {0.2689414213699951, 0.7310585786300049, 0.2689414213699951, 0.7310585786300049}},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        assert_string_equal(eg_activation_name(cases[k].activation), cases[k].name);
        eg_layer *layer = eg_activation_new(cases[k].activation, NULL);
        eg_tensor *y = eg_layer_call(layer, x, false);
        assert_shape(y, 2, s22);
        expect_close(y, cases[k].expected, 4, 1e-12);
        assert_int_equal(eg_layer_count_params(layer), 0);
        assert_string_equal(eg_layer_name(layer), "activation");
        eg_layer_free(layer);
    }
    eg_layer *flatten = eg_flatten_new("flat");
    int64_t s234[3] = {2, 3, 4}, s2_12[2] = {2, 12}, s5[1] = {5}, s51[2] = {5, 1};
    assert_shape(eg_layer_call(flatten, eg_zeros(EG_DTYPE_F32, 3, s234), false), 2, s2_12);
    assert_shape(eg_layer_call(flatten, eg_zeros(EG_DTYPE_F32, 1, s5), false), 2, s51);
    assert_string_equal(eg_layer_name(flatten), "flat");
    assert_string_equal(eg_layer_type(flatten), "Flatten");
    eg_layer_free(flatten);
}

static char *summary_text(const eg_model *model) {
    char *text = NULL;
    size_t size = 0;
    FILE *out = open_memstream(&text, &size);
    assert_non_null(out);
    assert_int_equal(eg_model_summary(model, out), EG_OK);
    fclose(out);
    return text;
}

static const char *const expected_summary =
    "Model: \"sequential\"\n"
    "_________________________________________________________________\n"
    " Layer (type)                Output Shape              Param #\n"
    "=================================================================\n"
    " flatten (Flatten)           (None, 784)               0\n"
    "_________________________________________________________________\n"
    " dense (Dense)               (None, 64)                50,240\n"
    "_________________________________________________________________\n"
    " dense_1 (Dense)             (None, 10)                650\n"
    "=================================================================\n"
    "Total params: 50,890\n"
    "Trainable params: 50,890\n"
    "Non-trainable params: 0\n"
    "_________________________________________________________________\n";

static void test_sequential_summary(void **state) {
    (void)state;
    eg_model *model = eg_sequential_new(NULL);
    assert_int_equal(eg_sequential_add(model, eg_flatten_new(NULL)), EG_OK);
    assert_int_equal(eg_sequential_add(model, eg_dense_new(64, EG_ACTIVATION_RELU)), EG_OK);
    assert_int_equal(eg_sequential_add(model, eg_dense_new(10, EG_ACTIVATION_NONE)), EG_OK);
    /* before building: unknown shapes, no parameters */
    char *text = summary_text(model);
    assert_non_null(strstr(text, " dense_1 (Dense)             ?                         0\n"));
    assert_non_null(strstr(text, "Total params: 0\n"));
    free(text);
    int64_t input[3] = {-1, 28, 28};
    assert_int_equal(eg_model_build(model, 3, input), EG_OK);
    text = summary_text(model);
    if (strcmp(text, expected_summary) != 0) fail_msg("summary:\n%s", text);
    free(text);
    assert_int_equal(eg_model_count_params(model), 50890);
    /* a frozen layer moves to non-trainable */
    eg_layer_set_trainable(eg_model_layer(model, 2), false);
    text = summary_text(model);
    assert_non_null(strstr(text, "Trainable params: 50,240\nNon-trainable params: 650\n"));
    free(text);
    eg_model_free(model);
}

/* The model's forward equals the layers' math done by hand, variables come in order with Keras
 * names, and only trainable ones are collected. */
static void test_sequential_forward_and_variables(void **state) {
    (void)state;
    eg_generator *gen = eg_generator_new(5);
    eg_dense_options o = eg_dense_options_default();
    o.generator = gen;
    o.activation = EG_ACTIVATION_TANH;
    o.bias_initializer = eg_initializer_random_normal(0, 1); /* non-zero bias is exercised */
    eg_model *model = eg_sequential_new("mlp");
    assert_string_equal(eg_model_name(model), "mlp");
    assert_int_equal(eg_sequential_add(model, eg_dense_new_ex(4, &o)), EG_OK);
    o.activation = EG_ACTIVATION_NONE;
    assert_int_equal(eg_sequential_add(model, eg_dense_new_ex(3, &o)), EG_OK);
    int n = -1;
    eg_tensor *const *vars = eg_model_trainable_variables(model, &n);
    assert_non_null(vars);
    assert_int_equal(n, 0); /* not built yet */

    int64_t xs[2] = {6, 5};
    eg_tensor *x = eg_random_normal(gen, EG_DTYPE_F32, 2, xs, 0, 1);
    eg_tensor *y = eg_model_call(model, x, false);
    int64_t ys[2] = {6, 3};
    assert_shape(y, 2, ys);
    vars = eg_model_trainable_variables(model, &n);
    assert_int_equal(n, 4);
    const char *names[4] = {"dense/kernel", "dense/bias", "dense_1/kernel", "dense_1/bias"};
    for (int i = 0; i < 4; i++) assert_string_equal(eg_variable_name(vars[i]), names[i]);
    eg_tensor *h = eg_tanh(eg_add(eg_matmul(x, vars[0]), vars[1]));
    eg_tensor *expected = eg_add(eg_matmul(h, vars[2]), vars[3]);
    eg_tensor *diff = eg_max(eg_abs(eg_sub(y, expected)), 0, NULL, false);
    assert_true(eg_item(diff) < 1e-6);

    eg_layer_set_trainable(eg_model_layer(model, 0), false);
    vars = eg_model_trainable_variables(model, &n);
    assert_int_equal(n, 2);
    assert_string_equal(eg_variable_name(vars[0]), "dense_1/kernel");
    assert_null(eg_model_layer(model, 2));
    assert_int_equal(eg_model_n_layers(model), 2);

    /* the intermediates of a call are not left in the scope: only the output is */
    eg_scope_begin();
    eg_tensor *kept = eg_scope_keep(eg_model_call(model, x, true));
    assert_int_equal(eg_scope_end(), EG_OK);
    assert_shape(kept, 2, ys);
    eg_model_free(model);
    eg_generator_free(gen);
}

static void test_sequential_add_rules(void **state) {
    (void)state;
    eg_model *model = eg_sequential_new(NULL);
    eg_dense_options o = eg_dense_options_default();
    o.name = "same";
    assert_int_equal(eg_sequential_add(model, eg_dense_new_ex(2, &o)), EG_OK);
    /* a taken name: refused, and the layer is freed (no leak under ASan) */
    assert_int_equal(eg_sequential_add(model, eg_dense_new_ex(2, &o)), EG_ERR_STATE);
    assert_non_null(strstr(eg_last_error(), "'same'"));
    eg_clear_error();
    /* a layer of another model stays with it */
    eg_model *other = eg_sequential_new("other");
    eg_layer *layer = eg_dense_new(3, EG_ACTIVATION_NONE);
    assert_int_equal(eg_sequential_add(other, layer), EG_OK);
    assert_int_equal(eg_sequential_add(model, layer), EG_ERR_INVALID_ARGUMENT);
    eg_clear_error();
    eg_layer_free(layer); /* refused: the model owns it */
    assert_int_equal(eg_last_status(), EG_ERR_STATE);
    eg_clear_error();
    /* a NULL layer from a failed constructor passes its error on */
    assert_int_equal(eg_sequential_add(model, eg_dense_new(-5, EG_ACTIVATION_NONE)),
                     EG_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(eg_last_error(), "units"));
    eg_clear_error();
    /* names made unique per model; a layer added to a built model is built at once */
    int64_t input[2] = {-1, 7};
    assert_int_equal(eg_model_build(model, 2, input), EG_OK);
    assert_int_equal(eg_sequential_add(model, eg_dense_new(4, EG_ACTIVATION_NONE)), EG_OK);
    assert_int_equal(eg_sequential_add(model, eg_flatten_new(NULL)), EG_OK);
    assert_string_equal(eg_layer_name(eg_model_layer(model, 1)), "dense");
    assert_string_equal(eg_layer_name(eg_model_layer(model, 2)), "flatten");
    assert_true(eg_layer_built(eg_model_layer(model, 1)));
    assert_int_equal(eg_layer_count_params(eg_model_layer(model, 1)), 2 * 4 + 4);
    /* a call with a wrong input dim fails cleanly */
    int64_t bad[2] = {3, 8};
    assert_null(eg_model_call(model, eg_zeros(EG_DTYPE_F32, 2, bad), false));
    assert_int_equal(eg_last_status(), EG_ERR_SHAPE);
    eg_clear_error();
    eg_model_free(other);
    eg_model_free(model);
    eg_model_free(NULL);

    /* layers built before they are added (input_dim) get variables named after their final
     * names, with their values kept */
    model = eg_sequential_new(NULL);
    eg_dense_options eager = eg_dense_options_default();
    eager.input_dim = 3;
    eg_layer *first = eg_dense_new_ex(2, &eager), *second = eg_dense_new_ex(2, &eager);
    int n = 0;
    double before = eg_tensor_get(eg_layer_variables(second, &n)[0], (int64_t[]){1, 1});
    assert_string_equal(eg_variable_name(eg_layer_variables(second, &n)[0]), "dense/kernel");
    assert_int_equal(eg_sequential_add(model, first), EG_OK);
    assert_int_equal(eg_sequential_add(model, second), EG_OK);
    eg_tensor *const *vars = eg_model_trainable_variables(model, &n);
    assert_int_equal(n, 4);
    assert_string_equal(eg_variable_name(vars[0]), "dense/kernel");
    assert_string_equal(eg_variable_name(vars[2]), "dense_1/kernel");
    assert_string_equal(eg_variable_name(vars[3]), "dense_1/bias");
    assert_float_equal(eg_tensor_get(vars[2], (int64_t[]){1, 1}), before, 0);
    eg_model_free(model);
}

/* ---- losses ---- */

static void test_sparse_categorical_crossentropy_values(void **state) {
    (void)state;
    const double logits_v[6] = {1, 2, 3, 1, 0, -1};
    int64_t s23[2] = {2, 3}, s2[1] = {2}, s21[2] = {2, 1};
    eg_tensor *logits = f64_tensor(logits_v, 2, s23);
    const int32_t labels_v[2] = {2, 1};
    eg_tensor *labels = eg_tensor_from_data(labels_v, EG_DTYPE_I32, 1, s2);
    /* log(e + e^2 + e^3) - 3 and log(e + 1 + 1/e) - 0 */
    const double a = log(exp(1) + exp(2) + exp(3)) - 3, b = log(exp(1) + 1 + exp(-1));
    const double per[2] = {a, b}, mean[1] = {(a + b) / 2}, sum[1] = {a + b};
    eg_tensor *none =
        eg_loss_sparse_categorical_crossentropy(labels, logits, true, EG_REDUCTION_NONE);
    assert_shape(none, 1, s2);
    expect_close(none, per, 2, 1e-12);
    eg_tensor *m = eg_loss_sparse_categorical_crossentropy(labels, logits, true, EG_REDUCTION_MEAN);
    assert_int_equal(eg_tensor_n_dims(m), 0);
    expect_close(m, mean, 1, 1e-12);
    expect_close(eg_loss_sparse_categorical_crossentropy(labels, logits, true, EG_REDUCTION_SUM),
                 sum, 1, 1e-12);
    /* u8 labels, (B, 1) labels, and float labels give the same */
    const uint8_t u8[2] = {2, 1};
    expect_close(eg_loss_sparse_categorical_crossentropy(
                     eg_tensor_from_data(u8, EG_DTYPE_U8, 2, s21), logits, true, EG_REDUCTION_NONE),
                 per, 2, 1e-12);
    const double fl[2] = {2, 1};
    expect_close(eg_loss_sparse_categorical_crossentropy(f64_tensor(fl, 1, s2), logits, true,
                                                         EG_REDUCTION_NONE),
                 per, 2, 1e-12);
    /* probabilities: -log(p[label]) after normalising rows */
    const double probs_v[6] = {0.1, 0.2, 0.7, 1.0, 2.0, 1.0}; /* row 2 sums to 4 */
    eg_tensor *probs = f64_tensor(probs_v, 2, s23);
    const double per_p[2] = {-log(0.7), -log(0.5)};
    expect_close(eg_loss_sparse_categorical_crossentropy(labels, probs, false, EG_REDUCTION_NONE),
                 per_p, 2, 1e-12);
    /* higher rank: logits (2, 1, 3), labels (2, 1) */
    int64_t s213[3] = {2, 1, 3};
    eg_tensor *l3 = eg_reshape(logits, 3, s213);
    eg_tensor *r3 = eg_loss_sparse_categorical_crossentropy(eg_reshape(labels, 2, s21), l3, true,
                                                            EG_REDUCTION_NONE);
    assert_shape(r3, 2, s21);
    expect_close(r3, per, 2, 1e-12);
    /* errors: out-of-range label (both paths), shape, reduction, dtype */
    const int32_t bad_v[2] = {3, 0};
    eg_tensor *bad = eg_tensor_from_data(bad_v, EG_DTYPE_I32, 1, s2);
    assert_null(eg_loss_sparse_categorical_crossentropy(bad, logits, true, EG_REDUCTION_MEAN));
    assert_non_null(strstr(eg_last_error(), "out of range"));
    eg_clear_error();
    assert_null(eg_loss_sparse_categorical_crossentropy(bad, probs, false, EG_REDUCTION_MEAN));
    assert_int_equal(eg_last_status(), EG_ERR_INVALID_ARGUMENT);
    eg_clear_error();
    int64_t s3[1] = {3};
    assert_null(eg_loss_sparse_categorical_crossentropy(eg_zeros(EG_DTYPE_I32, 1, s3), logits, true,
                                                        EG_REDUCTION_MEAN));
    assert_int_equal(eg_last_status(), EG_ERR_SHAPE);
    eg_clear_error();
    assert_null(eg_loss_sparse_categorical_crossentropy(labels, logits, true, (eg_reduction)9));
    assert_int_equal(eg_last_status(), EG_ERR_INVALID_ARGUMENT);
    eg_clear_error();
    assert_null(eg_loss_sparse_categorical_crossentropy(labels, eg_zeros(EG_DTYPE_I32, 2, s23),
                                                        true, EG_REDUCTION_MEAN));
    assert_int_equal(eg_last_status(), EG_ERR_DTYPE);
    assert_non_null(strstr(eg_last_error(), "test_nn.c:"));
    eg_clear_error();
}

/* The fused op against log_softmax + gather, forward and gradient, mean reduction. */
static void test_sparse_crossentropy_fused_matches_unfused(void **state) {
    (void)state;
    eg_generator *gen = eg_generator_new(11);
    const int64_t batch = 8, classes = 5;
    int64_t shape[2] = {batch, classes};
    eg_tensor *logits = eg_random_normal(gen, EG_DTYPE_F64, 2, shape, 0, 3);
    int64_t labels_v[8] = {0, 4, 2, 2, 1, 3, 0, 4};
    eg_tensor *labels = eg_tensor_from_data(labels_v, EG_DTYPE_I64, 1, &batch);

    eg_tape *tape = eg_tape_begin(true);
    eg_tape_watch(tape, logits);
    eg_tensor *fused =
        eg_loss_sparse_categorical_crossentropy(labels, logits, true, EG_REDUCTION_MEAN);
    /* unfused: -mean(log_softmax(logits).flat[b * C + label_b]) */
    eg_tensor *log_p = eg_log_softmax(logits, -1);
    int64_t flat_n = batch * classes;
    eg_tensor *flat = eg_reshape(log_p, 1, &flat_n);
    eg_tensor *offsets = eg_cast(
        eg_mul_scalar(eg_arange(0, (double)batch, 1, EG_DTYPE_F64), (double)classes), EG_DTYPE_I64);
    eg_tensor *index = eg_add(offsets, labels);
    eg_tensor *unfused = eg_neg(eg_mean(eg_gather(flat, index, 0), 0, NULL, false));
    eg_tape_end(tape);
    assert_non_null(fused);
    assert_non_null(unfused);
    assert_float_equal(eg_item(fused), eg_item(unfused), 1e-12);

    eg_tensor *sources[1] = {logits};
    eg_tensor *g_fused = NULL, *g_unfused = NULL;
    assert_int_equal(eg_tape_gradient(tape, fused, 1, sources, &g_fused, EG_UNCONNECTED_NULL),
                     EG_OK);
    assert_int_equal(eg_tape_gradient(tape, unfused, 1, sources, &g_unfused, EG_UNCONNECTED_NULL),
                     EG_OK);
    assert_shape(g_fused, 2, shape);
    for (int64_t i = 0; i < flat_n; i++)
        assert_float_equal(at(g_fused, i), at(g_unfused, i), 1e-12);
    /* and the gradient is (softmax - one_hot) / B */
    eg_tensor *expected =
        eg_div(eg_sub(eg_softmax(logits, -1), eg_one_hot(labels, classes, EG_DTYPE_F64)),
               eg_scalar(EG_DTYPE_F64, (double)batch));
    for (int64_t i = 0; i < flat_n; i++) assert_float_equal(at(g_fused, i), at(expected, i), 1e-12);
    eg_tape_free(tape);
    eg_generator_free(gen);
}

static void test_categorical_crossentropy(void **state) {
    (void)state;
    int64_t s23[2] = {2, 3}, s2[1] = {2};
    const double y_v[6] = {0, 0, 1, 0.5, 0.5, 0}; /* one-hot and a smoothed row */
    const double logits_v[6] = {1, 2, 3, 1, 0, -1};
    eg_tensor *y = f64_tensor(y_v, 2, s23), *logits = f64_tensor(logits_v, 2, s23);
    double lse0 = log(exp(1) + exp(2) + exp(3)), lse1 = log(exp(1) + 1 + exp(-1));
    const double per[2] = {lse0 - 3, 0.5 * (lse1 - 1) + 0.5 * lse1};
    eg_tensor *none = eg_loss_categorical_crossentropy(y, logits, true, EG_REDUCTION_NONE);
    assert_shape(none, 1, s2);
    expect_close(none, per, 2, 1e-12);
    const double probs_v[6] = {1, 1, 2, 0.25, 0.5, 0.25}; /* row 1 normalises to .25 .25 .5 */
    const double per_p[2] = {-log(0.5), -0.5 * log(0.25) - 0.5 * log(0.5)};
    expect_close(
        eg_loss_categorical_crossentropy(y, f64_tensor(probs_v, 2, s23), false, EG_REDUCTION_NONE),
        per_p, 2, 1e-12);
    /* clipping keeps a zero probability finite: -log(1e-7) */
    const double zero_p[6] = {1, 0, 0, 1, 0, 0};
    eg_tensor *clipped =
        eg_loss_categorical_crossentropy(y, f64_tensor(zero_p, 2, s23), false, EG_REDUCTION_NONE);
    assert_float_equal(at(clipped, 0), -log(1e-7), 1e-9);
    /* the sparse loss on argmax labels equals the dense one on one-hot labels */
    const int32_t idx[2] = {2, 0};
    eg_tensor *labels = eg_tensor_from_data(idx, EG_DTYPE_I32, 1, s2);
    eg_tensor *hot = eg_one_hot(labels, 3, EG_DTYPE_F64);
    assert_float_equal(
        eg_item(eg_loss_categorical_crossentropy(hot, logits, true, EG_REDUCTION_MEAN)),
        eg_item(eg_loss_sparse_categorical_crossentropy(labels, logits, true, EG_REDUCTION_MEAN)),
        1e-12);
    int64_t s22[2] = {2, 2};
    assert_null(eg_loss_categorical_crossentropy(eg_zeros(EG_DTYPE_F64, 2, s22), logits, true,
                                                 EG_REDUCTION_MEAN));
    assert_int_equal(eg_last_status(), EG_ERR_SHAPE);
    eg_clear_error();
}

static double softplus(double x) {
    return x > 0 ? x + log1p(exp(-x)) : log1p(exp(x));
}
static double sigmoid(double x) {
    return 1 / (1 + exp(-x));
}

static void test_binary_crossentropy(void **state) {
    (void)state;
    int64_t s16[2] = {1, 6};
    const double x_v[6] = {-2, 0, 3, 100, -100, 0.5};
    const double z_v[6] = {0, 1, 1, 1, 1, 0.3};
    eg_tensor *x = f64_tensor(x_v, 2, s16), *z = f64_tensor(z_v, 2, s16);
    double expected = 0, terms[6];
    for (int i = 0; i < 6; i++) {
        terms[i] = fmax(x_v[i], 0) - x_v[i] * z_v[i] + log1p(exp(-fabs(x_v[i])));
        expected += terms[i] / 6;
    }
    assert_float_equal(terms[0], softplus(-2), 1e-15);
    /* x = 100, z = 1: the tiny loss survives (softplus(x) - x would round to 0) */
    int64_t s11[2] = {1, 1};
    const double big[1] = {100}, one[1] = {1};
    eg_tensor *tiny = eg_loss_binary_crossentropy(f64_tensor(one, 2, s11), f64_tensor(big, 2, s11),
                                                  true, EG_REDUCTION_MEAN);
    assert_float_equal(eg_item(tiny), 3.720075976020836e-44, 1e-56);
    eg_tape *tape = eg_tape_begin(false);
    eg_tape_watch(tape, x);
    eg_tensor *loss = eg_loss_binary_crossentropy(z, x, true, EG_REDUCTION_MEAN);
    eg_tape_end(tape);
    assert_non_null(loss);
    assert_float_equal(eg_item(loss), expected, 1e-12);
    /* the gradient (sigmoid(x) - z) / n everywhere, x = 0 included */
    eg_tensor *sources[1] = {x};
    eg_tensor *g = NULL;
    assert_int_equal(eg_tape_gradient(tape, loss, 1, sources, &g, EG_UNCONNECTED_NULL), EG_OK);
    for (int i = 0; i < 6; i++) assert_float_equal(at(g, i), (sigmoid(x_v[i]) - z_v[i]) / 6, 1e-12);
    eg_tape_free(tape);
    /* per sample: mean over the last axis */
    int64_t s32[2] = {3, 2}, s3[1] = {3};
    eg_tensor *per = eg_loss_binary_crossentropy(eg_reshape(z, 2, s32), eg_reshape(x, 2, s32), true,
                                                 EG_REDUCTION_NONE);
    assert_shape(per, 1, s3);
    const double pairs[3] = {(terms[0] + terms[1]) / 2, (terms[2] + terms[3]) / 2,
                             (terms[4] + terms[5]) / 2};
    expect_close(per, pairs, 3, 1e-12);
    /* probabilities, clipped */
    int64_t s12[2] = {1, 2};
    const double p_v[2] = {0.9, 0.2}, t_v[2] = {1, 0};
    const double bce[1] = {-(log(0.9) + log(0.8)) / 2};
    expect_close(eg_loss_binary_crossentropy(f64_tensor(t_v, 2, s12), f64_tensor(p_v, 2, s12),
                                             false, EG_REDUCTION_MEAN),
                 bce, 1, 1e-12);
    /* float32 labels as integers: cast to y_pred's dtype */
    const int32_t t_i[2] = {1, 0};
    expect_close(eg_loss_binary_crossentropy(eg_tensor_from_data(t_i, EG_DTYPE_I32, 2, s12),
                                             f64_tensor(p_v, 2, s12), false, EG_REDUCTION_SUM),
                 bce, 1, 1e-12);
}

static void test_regression_losses(void **state) {
    (void)state;
    int64_t s22[2] = {2, 2}, s2[1] = {2}, s21[2] = {2, 1};
    const double t_v[4] = {1, 2, 3, 4}, p_v[4] = {1.5, 2, 2, 6};
    eg_tensor *t = f64_tensor(t_v, 2, s22), *p = f64_tensor(p_v, 2, s22);
    /* errors e = 0.5, 0, -1, 2 */
    const double mse[2] = {0.125, 2.5}, mae[2] = {0.25, 1.5};
    const double huber[2] = {(0.125 + 0) / 2, (0.5 + 1.5) / 2};  /* delta 1 */
    const double huber2[2] = {(0.125 + 0) / 2, (0.5 + 2.0) / 2}; /* delta 2: all quadratic */
    eg_tensor *r = eg_loss_mean_squared_error(t, p, EG_REDUCTION_NONE);
    assert_shape(r, 1, s2);
    expect_close(r, mse, 2, 1e-12);
    expect_close(eg_loss_mean_absolute_error(t, p, EG_REDUCTION_NONE), mae, 2, 1e-12);
    expect_close(eg_loss_huber(t, p, 1.0, EG_REDUCTION_NONE), huber, 2, 1e-12);
    expect_close(eg_loss_huber(t, p, 2.0, EG_REDUCTION_NONE), huber2, 2, 1e-12);
    const double mean[1] = {1.3125}, sum[1] = {2.625};
    expect_close(eg_loss_mean_squared_error(t, p, EG_REDUCTION_MEAN), mean, 1, 1e-12);
    expect_close(eg_loss_mean_squared_error(t, p, EG_REDUCTION_SUM), sum, 1, 1e-12);
    /* Keras' rank fix-up: y_true (2,) with y_pred (2, 1) is not broadcast to (2, 2) */
    const double col_p[2] = {1.5, 5}, col_t[2] = {1, 3};
    eg_tensor *pred = f64_tensor(col_p, 2, s21);
    const double per[2] = {0.25, 4};
    eg_tensor *fixed =
        eg_loss_mean_squared_error(f64_tensor(col_t, 1, s2), pred, EG_REDUCTION_NONE);
    assert_shape(fixed, 1, s2);
    expect_close(fixed, per, 2, 1e-12);
    /* integer targets are cast */
    const int32_t ti[2] = {1, 3};
    expect_close(eg_loss_mean_squared_error(eg_tensor_from_data(ti, EG_DTYPE_I32, 2, s21), pred,
                                            EG_REDUCTION_NONE),
                 per, 2, 1e-12);
    /* gradient of the mean MSE: 2 e / n */
    eg_tape *tape = eg_tape_begin(false);
    eg_tape_watch(tape, p);
    eg_tensor *loss = eg_loss_mean_squared_error(t, p, EG_REDUCTION_MEAN);
    eg_tape_end(tape);
    eg_tensor *sources[1] = {p};
    eg_tensor *g = NULL;
    assert_int_equal(eg_tape_gradient(tape, loss, 1, sources, &g, EG_UNCONNECTED_NULL), EG_OK);
    const double grad[4] = {0.25, 0, -0.5, 1};
    expect_close(g, grad, 4, 1e-12);
    eg_tape_free(tape);
    /* errors */
    int64_t s3[1] = {3};
    assert_null(eg_loss_mean_absolute_error(eg_zeros(EG_DTYPE_F64, 1, s3), p, EG_REDUCTION_MEAN));
    assert_int_equal(eg_last_status(), EG_ERR_SHAPE);
    eg_clear_error();
    assert_null(eg_loss_huber(t, p, 0.0, EG_REDUCTION_MEAN));
    assert_int_equal(eg_last_status(), EG_ERR_INVALID_ARGUMENT);
    eg_clear_error();
    assert_null(eg_loss_mean_squared_error(NULL, p, EG_REDUCTION_MEAN));
    assert_int_equal(eg_last_status(), EG_ERR_NULL_ARGUMENT);
    eg_clear_error();
}

/* ---- metrics ---- */

static void test_metrics(void **state) {
    (void)state;
    int64_t s43[2] = {4, 3}, s4[1] = {4}, s41[2] = {4, 1};
    const double logits_v[12] = {0.1, 2, 0.3, 5, 1, 1, 0, 0, 9, 1, 1, 0.5};
    eg_tensor *logits = f64_tensor(logits_v, 2, s43); /* argmax: 1, 0, 2, 0 (tie -> first) */
    const uint8_t labels_v[4] = {1, 0, 1, 1};
    eg_tensor *labels = eg_tensor_from_data(labels_v, EG_DTYPE_U8, 1, s4);
    const double hits[4] = {1, 1, 0, 0};
    eg_tensor *sparse = eg_metric_sparse_categorical_accuracy(labels, logits);
    assert_int_equal(eg_tensor_dtype(sparse), EG_DTYPE_F32);
    expect_close(sparse, hits, 4, 0);
    expect_close(eg_metric_sparse_categorical_accuracy(eg_reshape(labels, 2, s41), logits), hits, 4,
                 0);
    expect_close(eg_metric_accuracy(labels, logits), hits, 4, 0); /* argmax path */
    const int64_t predicted_v[4] = {1, 2, 1, 0};
    const double same[4] = {1, 0, 1, 0};
    expect_close(eg_metric_accuracy(labels, eg_tensor_from_data(predicted_v, EG_DTYPE_I64, 1, s4)),
                 same, 4, 0);
    eg_tensor *hot = eg_one_hot(labels, 3, EG_DTYPE_F32);
    expect_close(eg_metric_categorical_accuracy(hot, logits), hits, 4, 0);
    int64_t s5[1] = {5};
    assert_null(eg_metric_sparse_categorical_accuracy(eg_zeros(EG_DTYPE_I32, 1, s5), logits));
    assert_int_equal(eg_last_status(), EG_ERR_SHAPE);
    eg_clear_error();

    eg_metric_mean mean = {0};
    assert_float_equal(eg_metric_mean_result(&mean), 0, 0);
    assert_int_equal(eg_metric_mean_update(&mean, sparse), EG_OK);
    assert_float_equal(eg_metric_mean_result(&mean), 0.5, 1e-15);
    const double ones[2] = {1, 1};
    int64_t s2[1] = {2};
    assert_int_equal(eg_metric_mean_update(&mean, f64_tensor(ones, 1, s2)), EG_OK);
    assert_float_equal(eg_metric_mean_result(&mean), 4.0 / 6.0, 1e-15);
    assert_int_equal(eg_metric_mean_add(&mean, 0.0, 2.0), EG_OK);
    assert_float_equal(eg_metric_mean_result(&mean), 4.0 / 8.0, 1e-15);
    assert_int_equal(eg_metric_mean_add(&mean, 1.0, -1.0), EG_ERR_INVALID_ARGUMENT);
    eg_clear_error();
    eg_metric_mean_reset(&mean);
    assert_float_equal(mean.count, 0, 0);
    assert_int_equal(eg_metric_mean_update(&mean, eg_scalar(EG_DTYPE_F32, 2.5)), EG_OK);
    assert_float_equal(eg_metric_mean_result(&mean), 2.5, 0);
    assert_int_equal(eg_metric_mean_update(NULL, sparse), EG_ERR_NULL_ARGUMENT);
    eg_clear_error();
}

/* ---- the loop, small: Dense(32, relu) -> Dense(3), SCCE from logits, Adam, a tape per
 * batch of 32 ---- */

static void test_training_loop(void **state) {
    (void)state;
    eg_debug_track_tensors(true);
    size_t live_before = eg_debug_live_tensors(NULL);
    eg_generator *gen = eg_generator_new(2024);
    /* three Gaussian blobs in 4-d, 192 examples */
    const int64_t n = 192, d = 4;
    int64_t xs[2] = {n, d};
    eg_tensor *noise = eg_random_normal(gen, EG_DTYPE_F32, 2, xs, 0, 0.5);
    float *x_host = malloc((size_t)(n * d) * sizeof *x_host);
    uint8_t *y_host = malloc((size_t)n);
    eg_tensor_copy_to_host(noise, x_host, (size_t)(n * d) * sizeof *x_host);
    for (int64_t i = 0; i < n; i++) {
        y_host[i] = (uint8_t)(i % 3);
        x_host[i * d + y_host[i]] += 2.0f; /* class c is shifted along axis c */
    }
    eg_tensor *x_all = eg_tensor_from_data(x_host, EG_DTYPE_F32, 2, xs);
    eg_tensor *y_all = eg_tensor_from_data(y_host, EG_DTYPE_U8, 1, &n);
    free(x_host);
    free(y_host);

    eg_dense_options o = eg_dense_options_default();
    o.generator = gen;
    o.activation = EG_ACTIVATION_RELU;
    eg_model *model = eg_sequential_new(NULL);
    assert_int_equal(eg_sequential_add(model, eg_dense_new_ex(32, &o)), EG_OK);
    o.activation = EG_ACTIVATION_NONE;
    assert_int_equal(eg_sequential_add(model, eg_dense_new_ex(3, &o)), EG_OK);
    eg_optimizer *opt = eg_adam_new(NULL);
    eg_metric_mean epoch_loss = {0}, epoch_accuracy = {0};
    double first_loss = 0;
    for (int epoch = 0; epoch < 15; epoch++) {
        eg_metric_mean_reset(&epoch_loss);
        eg_metric_mean_reset(&epoch_accuracy);
        for (int64_t start = 0; start < n; start += 32) {
            eg_scope_begin();
            eg_tensor *x = eg_slice(x_all, 0, start, start + 32, 1);
            eg_tensor *y = eg_slice(y_all, 0, start, start + 32, 1);
            eg_tape *tape = eg_tape_begin(false);
            eg_tensor *logits = eg_model_call(model, x, true);
            eg_tensor *loss =
                eg_loss_sparse_categorical_crossentropy(y, logits, true, EG_REDUCTION_MEAN);
            eg_tape_end(tape);
            assert_non_null(loss);
            int n_vars = 0;
            eg_tensor *const *vars = eg_model_trainable_variables(model, &n_vars);
            assert_int_equal(n_vars, 4);
            eg_tensor *grads[4];
            assert_int_equal(eg_tape_gradient(tape, loss, n_vars, vars, grads, EG_UNCONNECTED_NULL),
                             EG_OK);
            assert_int_equal(eg_optimizer_apply_gradients(opt, n_vars, grads, vars), EG_OK);
            eg_tape_free(tape);
            assert_int_equal(eg_metric_mean_update(&epoch_loss, loss), EG_OK);
            assert_int_equal(eg_metric_mean_update(
                                 &epoch_accuracy, eg_metric_sparse_categorical_accuracy(y, logits)),
                             EG_OK);
            assert_int_equal(eg_scope_end(), EG_OK);
        }
        if (epoch == 0) first_loss = eg_metric_mean_result(&epoch_loss);
    }
    double last_loss = eg_metric_mean_result(&epoch_loss);
    double accuracy = eg_metric_mean_result(&epoch_accuracy);
    if (!(last_loss < 0.5 * first_loss && accuracy > 0.9))
        fail_msg("loss %g -> %g, accuracy %g", first_loss, last_loss, accuracy);
    assert_int_equal(eg_optimizer_iterations(opt), 15 * 6);
    eg_optimizer_free(opt);
    eg_model_free(model);
    eg_generator_free(gen);
    eg_release(x_all);
    eg_release(y_all);
    eg_release(noise);
    /* nothing left behind by layers, losses, metrics, optimizer slots or the model */
    size_t live_after = eg_debug_live_tensors(NULL);
    if (live_after != live_before) {
        eg_debug_live_tensors(stderr);
        fail_msg("%zu live tensors before, %zu after", live_before, live_after);
    }
    eg_debug_track_tensors(false);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_initializer_statistics, setup, teardown),
        cmocka_unit_test_setup_teardown(test_initializer_reproducible, setup, teardown),
        cmocka_unit_test_setup_teardown(test_initializer_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_dense_shapes_and_params, setup, teardown),
        cmocka_unit_test_setup_teardown(test_activation_and_flatten_layers, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sequential_summary, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sequential_forward_and_variables, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sequential_add_rules, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sparse_categorical_crossentropy_values, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_sparse_crossentropy_fused_matches_unfused, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_categorical_crossentropy, setup, teardown),
        cmocka_unit_test_setup_teardown(test_binary_crossentropy, setup, teardown),
        cmocka_unit_test_setup_teardown(test_regression_losses, setup, teardown),
        cmocka_unit_test_setup_teardown(test_metrics, setup, teardown),
        /* outside the per-test scope: it counts live tensors itself */
        cmocka_unit_test(test_training_loop),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
