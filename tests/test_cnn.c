/* Convolutional networks: the layers (Conv2D, pooling, BatchNormalization, LayerNormalization,
 * Dropout) and their Keras semantics, convolution against a naive direct loop at sizes beyond the
 * op-case table, both forward algorithms, identical bits for 1 and 2 threads, and a short,
 * seeded convergence run of a small CNN on 2000 Fashion-MNIST images. */
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

void eg__conv_set_algorithm(int algorithm); /* 0 auto, 1 im2col + GEMM, 2 direct */

#define assert_close(got, want, tol) check_close_at((got), (want), (tol), __FILE__, __LINE__)
static void check_close_at(double got, double want, double tol, const char *file, int line) {
    if (!(fabs(got - want) <= tol))
        fail_msg("%s:%d: %.10g, expected %.10g (tolerance %g)", file, line, got, want, tol);
}

static double *read_all(const eg_tensor *t) {
    eg_tensor *d = eg_cast(t, EG_DTYPE_F64);
    assert_non_null(d);
    size_t n = (size_t)eg_tensor_n_elems(d);
    double *v = malloc(sizeof(double) * (n ? n : 1));
    assert_non_null(v);
    assert_int_equal(eg_tensor_copy_to_host(d, v, sizeof(double) * n), EG_OK);
    return v;
}

static eg_tensor *random_tensor(uint64_t seed, eg_dtype dtype, int n_dims, const int64_t *shape) {
    eg_generator *gen = eg_generator_new(seed);
    eg_tensor *t = eg_random_normal(gen, dtype, n_dims, shape, 0.5, 1.5);
    eg_generator_free(gen);
    assert_non_null(t);
    return t;
}

static bool same_bytes(const eg_tensor *a, const eg_tensor *b) {
    size_t size = (size_t)eg_tensor_n_elems(a) * eg_dtype_size(eg_tensor_dtype(a));
    char *x = malloc(size), *y = malloc(size);
    bool same = x && y && eg_tensor_n_elems(a) == eg_tensor_n_elems(b) &&
                eg_tensor_copy_to_host(a, x, size) == EG_OK &&
                eg_tensor_copy_to_host(b, y, size) == EG_OK && memcmp(x, y, size) == 0;
    free(x);
    free(y);
    return same;
}

/* ---- the layers ---- */

static void test_conv_layer_builds_like_keras(void **state) {
    (void)state;
    eg_model *model = eg_sequential_new(NULL);
    assert_int_equal(
        eg_sequential_add(model, eg_conv2d_new(8, 3, EG_PADDING_SAME, EG_ACTIVATION_RELU)), EG_OK);
    eg_conv2d_layer_options o = eg_conv2d_layer_options_default();
    o.strides[0] = o.strides[1] = 2;
    assert_int_equal(eg_sequential_add(model, eg_conv2d_new_ex(4, 3, 2, &o)), EG_OK);
    assert_int_equal(eg_sequential_add(model, eg_max_pool2d_new(2, 0, EG_PADDING_SAME)), EG_OK);
    assert_int_equal(eg_sequential_add(model, eg_global_avg_pool2d_new(EG_DATA_FORMAT_NHWC, NULL)),
                     EG_OK);
    int64_t input[4] = {-1, 9, 9, 2};
    assert_int_equal(eg_model_build(model, 4, input), EG_OK);
    const eg_layer *conv = eg_model_layer(model, 0), *conv1 = eg_model_layer(model, 1);
    assert_string_equal(eg_layer_name(conv1), "conv2d_1");
    assert_string_equal(eg_layer_type(conv), "Conv2D");
    int n;
    eg_tensor *const *vars = eg_layer_variables(conv, &n);
    assert_int_equal(n, 2);
    assert_string_equal(eg_variable_name(vars[0]), "conv2d/kernel");
    int64_t kernel_shape[4] = {3, 3, 2, 8};
    assert_memory_equal(eg_tensor_shape(vars[0]), kernel_shape, sizeof kernel_shape);
    assert_int_equal(eg_model_count_params(model), 3 * 3 * 2 * 8 + 8 + 3 * 2 * 8 * 4 + 4);
    /* (9,9,2) -same-> (9,9,8) -valid, stride 2, 3x2-> (4,4,4) -pool same-> (2,2,4) -> (4) */
    eg_scope_begin();
    int64_t xs[4] = {3, 9, 9, 2};
    eg_tensor *y = eg_model_call(model, random_tensor(1, EG_DTYPE_F32, 4, xs), true);
    assert_non_null(y);
    assert_int_equal(eg_tensor_n_dims(y), 2);
    assert_int_equal(eg_tensor_dim(y, 1), 4);
    char *text = NULL;
    size_t size = 0;
    FILE *out = open_memstream(&text, &size);
    assert_int_equal(eg_model_summary(model, out), EG_OK);
    fclose(out);
    assert_non_null(strstr(text, "conv2d_1 (Conv2D)"));
    assert_non_null(strstr(text, "(None, 4, 4, 4)"));
    assert_non_null(strstr(text, "global_average_pooling2d (GlobalAveragePooling2D)"));
    free(text);
    /* a wrong channel count is an error naming the layer */
    int64_t bad[4] = {1, 9, 9, 3};
    assert_null(eg_model_call(model, random_tensor(2, EG_DTYPE_F32, 4, bad), false));
    assert_non_null(strstr(eg_last_error(), "conv2d"));
    eg_clear_error();
    eg_scope_end();
    eg_model_free(model);
}

/* Training: batch statistics, then moving = 0.99 moving + 0.01 batch; inference: the moving
 * statistics, nothing updated; a non-trainable layer runs in inference mode. */
static void test_batch_norm_train_and_inference(void **state) {
    (void)state;
    eg_model *model = eg_sequential_new(NULL);
    eg_batch_norm_options o = eg_batch_norm_options_default();
    o.gamma_initializer = eg_initializer_constant(2.0);
    o.beta_initializer = eg_initializer_constant(0.5);
    o.dtype = EG_DTYPE_F64;
    assert_int_equal(eg_sequential_add(model, eg_batch_norm_new(&o)), EG_OK);
    eg_scope_begin();
    int64_t xs[4] = {4, 3, 2, 3};
    eg_tensor *x = random_tensor(3, EG_DTYPE_F64, 4, xs);
    assert_int_equal(eg_model_build(model, 4, (int64_t[]){-1, 3, 2, 3}), EG_OK);
    int n_trainable, n_all;
    eg_tensor *const *trainable = eg_model_trainable_variables(model, &n_trainable);
    assert_int_equal(n_trainable, 2);
    assert_string_equal(eg_variable_name(trainable[0]), "batch_normalization/gamma");
    eg_tensor *const *all = eg_model_variables(model, &n_all);
    assert_int_equal(n_all, 4);
    assert_string_equal(eg_variable_name(all[2]), "batch_normalization/moving_mean");
    assert_string_equal(eg_variable_name(all[3]), "batch_normalization/moving_variance");
    assert_false(eg_variable_trainable(all[2]));
    eg_tensor *moving_mean = all[2], *moving_var = all[3];

    /* the batch statistics per channel, in plain C */
    double *xv = read_all(x), mean[3] = {0}, var[3] = {0};
    int64_t n = eg_tensor_n_elems(x), per = n / 3;
    for (int64_t i = 0; i < n; i++) mean[i % 3] += xv[i] / (double)per;
    for (int64_t i = 0; i < n; i++) var[i % 3] += pow(xv[i] - mean[i % 3], 2) / (double)per;

    eg_tensor *y = eg_model_call(model, x, true);
    assert_non_null(y);
    double *yv = read_all(y);
    for (int64_t i = 0; i < n; i++)
        assert_close(yv[i], (xv[i] - mean[i % 3]) / sqrt(var[i % 3] + 1e-3) * 2.0 + 0.5, 1e-12);
    free(yv);
    double *mm = read_all(moving_mean), *mv = read_all(moving_var);
    for (int c = 0; c < 3; c++) {
        assert_close(mm[c], 0.01 * mean[c], 1e-14);
        assert_close(mv[c], 0.99 + 0.01 * var[c], 1e-14);
    }
    /* inference uses (and keeps) the moving statistics */
    y = eg_model_call(model, x, false);
    yv = read_all(y);
    for (int64_t i = 0; i < n; i++)
        assert_close(yv[i], (xv[i] - mm[i % 3]) / sqrt(mv[i % 3] + 1e-3) * 2.0 + 0.5, 1e-12);
    free(yv);
    double *mm2 = read_all(moving_mean);
    assert_memory_equal(mm, mm2, 3 * sizeof(double));
    free(mm2);
    /* a second training call moves them again: 0.99 m + 0.01 batch */
    assert_non_null(eg_model_call(model, x, true));
    mm2 = read_all(moving_mean);
    for (int c = 0; c < 3; c++) assert_close(mm2[c], 0.99 * mm[c] + 0.01 * mean[c], 1e-14);
    free(mm2);
    /* frozen: inference behaviour even with training = true, and no update */
    eg_layer_set_trainable(eg_model_layer(model, 0), false);
    assert_false(eg_variable_trainable(all[0]));
    assert_false(eg_variable_trainable(all[2]));
    double *before = read_all(moving_mean);
    y = eg_model_call(model, x, true);
    double *after = read_all(moving_mean);
    assert_memory_equal(before, after, 3 * sizeof(double));
    double *frozen_var = read_all(moving_var);
    yv = read_all(y);
    for (int64_t i = 0; i < n; i++)
        assert_close(yv[i], (xv[i] - after[i % 3]) / sqrt(frozen_var[i % 3] + 1e-3) * 2.0 + 0.5,
                     1e-12);
    free(frozen_var);
    free(before);
    free(after);
    free(yv);
    eg_layer_set_trainable(eg_model_layer(model, 0), true);
    assert_true(eg_variable_trainable(all[0]));
    assert_false(eg_variable_trainable(all[3])); /* moving statistics stay frozen */
    char *text = NULL;
    size_t size = 0;
    FILE *out = open_memstream(&text, &size);
    assert_int_equal(eg_model_summary(model, out), EG_OK);
    fclose(out);
    assert_non_null(strstr(text, "Trainable params: 6"));
    assert_non_null(strstr(text, "Non-trainable params: 6"));
    free(text);
    free(xv);
    free(mm);
    free(mv);
    eg_scope_end();
    eg_model_free(model);
}

/* The gradient of a training-mode BatchNormalization flows through the batch statistics: with
 * gamma = 1, beta = 0 the outputs of each channel sum to zero, so d sum(y) / dx = 0. */
static void test_batch_norm_gradient_through_statistics(void **state) {
    (void)state;
    eg_batch_norm_options o = eg_batch_norm_options_default();
    o.dtype = EG_DTYPE_F64;
    eg_layer *bn = eg_batch_norm_new(&o);
    eg_scope_begin();
    int64_t xs[2] = {6, 4};
    eg_tensor *x = random_tensor(4, EG_DTYPE_F64, 2, xs);
    eg_tape *tape = eg_tape_begin(false);
    eg_tape_watch(tape, x);
    eg_tensor *loss = eg_sum(eg_layer_call(bn, x, true), 0, NULL, false);
    eg_tensor *g = NULL;
    assert_int_equal(eg_tape_gradient(tape, loss, 1, &x, &g, EG_UNCONNECTED_ZERO), EG_OK);
    eg_tape_free(tape);
    double *gv = read_all(g);
    for (int i = 0; i < 24; i++) assert_close(gv[i], 0, 1e-9);
    free(gv);
    eg_scope_end();
    eg_layer_free(bn);
}

/* Gradients of sum(w * batch_norm_training(x)) wrt x, scale, offset. With `record` an outer tape
 * watches x, so the backward is itself recorded and runs as the composite of differentiable ops;
 * otherwise the fused kernels (batch_norm_backward_sums and _input) run. */
static void batch_norm_grads(eg_tensor *x, const eg_tensor *w, eg_tensor *scale, eg_tensor *offset,
                             bool record, eg_tensor **out) {
    eg_tape *outer = record ? eg_tape_begin(false) : NULL;
    if (outer) eg_tape_watch(outer, x);
    eg_tape *tape = eg_tape_begin(false);
    eg_tape_watch(tape, x);
    int axes[3] = {0, 1, 2};
    int64_t kept[4] = {1, 1, 1, eg_tensor_dim(x, 3)};
    eg_tensor *y = eg_batch_norm_training(x, 3, axes, eg_reshape(offset, 4, kept),
                                          eg_reshape(scale, 4, kept), 1e-3, NULL, NULL);
    eg_tensor *loss = eg_sum(eg_mul(y, w), 0, NULL, false);
    eg_tensor *sources[3] = {x, scale, offset};
    assert_int_equal(eg_tape_gradient(tape, loss, 3, sources, out, EG_UNCONNECTED_ZERO), EG_OK);
    eg_tape_free(tape);
    if (outer) eg_tape_free(outer);
}

/* The fused batch-norm gradient equals the composite (the unfused ops) and does not depend on
 * the thread count. */
static void test_batch_norm_fused_gradient_matches_composite(void **state) {
    (void)state;
    int saved = eg_get_num_threads();
    for (int d = 0; d < 2; d++) {
        eg_dtype dtype = d ? EG_DTYPE_F64 : EG_DTYPE_F32;
        eg_scope_begin();
        int64_t xs[4] = {16, 24, 20, 16}, cs = 16;
        eg_tensor *x = random_tensor(31, dtype, 4, xs);
        eg_tensor *w = random_tensor(32, dtype, 4, xs);
        eg_tensor *scale = eg_variable(random_tensor(33, dtype, 1, &cs), "scale");
        eg_tensor *offset = eg_variable(random_tensor(34, dtype, 1, &cs), "offset");
        eg_tensor *fused[3], *fused2[3], *composite[3];
        assert_int_equal(eg_set_num_threads(1), EG_OK);
        batch_norm_grads(x, w, scale, offset, false, fused);
        assert_int_equal(eg_set_num_threads(2), EG_OK);
        batch_norm_grads(x, w, scale, offset, false, fused2);
        batch_norm_grads(x, w, scale, offset, true, composite);
        double tol = d ? 1e-10 : 2e-4;
        for (int i = 0; i < 3; i++) {
            if (!same_bytes(fused[i], fused2[i]))
                fail_msg("%s gradient %d differs between 1 and 2 threads", eg_dtype_name(dtype), i);
            double *a = read_all(fused[i]), *b = read_all(composite[i]);
            double scale_of = 0;
            int64_t n = eg_tensor_n_elems(fused[i]);
            for (int64_t k = 0; k < n; k++) scale_of = fmax(scale_of, fabs(b[k]));
            for (int64_t k = 0; k < n; k++)
                if (!(fabs(a[k] - b[k]) <= tol * (scale_of + 1e-30)))
                    fail_msg("%s gradient %d element %lld: fused %.9g, composite %.9g",
                             eg_dtype_name(dtype), i, (long long)k, a[k], b[k]);
            free(a);
            free(b);
        }
        eg_release(scale);
        eg_release(offset);
        eg_scope_end();
    }
    eg_set_num_threads(saved);
}

/* relu(batch norm over every axis but the last) of x, fused (one op) or not (batch_norm_training,
 * then eg_relu): out[0..2] y, mean, variance; out[3..5] the gradients of sum(w * y) wrt x, scale,
 * offset. With `record` an outer tape records that backward (the composite rules run), and
 * out[6..8] are the second-order gradients of sum(w * dx) wrt x, scale, offset. */
static int batch_norm_relu_run(eg_tensor *x, const eg_tensor *w, eg_tensor *scale,
                               eg_tensor *offset, bool fused, bool record, eg_tensor **out) {
    int n_dims = eg_tensor_n_dims(x), axes[4], n_axes = n_dims - 1;
    int64_t kept[4];
    for (int d = 0; d < n_dims; d++) {
        if (d < n_axes) axes[d] = d;
        kept[d] = d < n_axes ? 1 : eg_tensor_dim(x, d);
    }
    eg_tensor *sources[3] = {x, scale, offset};
    eg_tape *outer = record ? eg_tape_begin(false) : NULL;
    if (outer) eg_tape_watch(outer, x);
    eg_tape *tape = eg_tape_begin(false);
    eg_tape_watch(tape, x);
    eg_tensor *o = eg_reshape(offset, n_dims, kept), *s = eg_reshape(scale, n_dims, kept);
    if (fused)
        out[0] = eg_batch_norm_training_activation(x, n_axes, axes, o, s, 1e-3, EG_ACTIVATION_RELU,
                                                   &out[1], &out[2]);
    else
        out[0] = eg_relu(eg_batch_norm_training(x, n_axes, axes, o, s, 1e-3, &out[1], &out[2]));
    assert_non_null(out[0]);
    eg_tensor *loss = eg_sum(eg_mul(out[0], w), 0, NULL, false);
    assert_int_equal(eg_tape_gradient(tape, loss, 3, sources, out + 3, EG_UNCONNECTED_ZERO), EG_OK);
    eg_tape_free(tape);
    if (!outer) return 6;
    eg_tensor *loss2 = eg_sum(eg_mul(out[3], w), 0, NULL, false);
    assert_int_equal(eg_tape_gradient(outer, loss2, 3, sources, out + 6, EG_UNCONNECTED_ZERO),
                     EG_OK);
    eg_tape_free(outer);
    return 9;
}

/* Batch norm fused with relu gives bitwise the unfused composition's values and gradients (the
 * fused kernels with no outer tape; the composite rules, and second order, with one), in f32 and
 * f64, for NHWC images and (N, C) (a Dense layer's, over more than one 256-row chunk), with 1
 * and 2 threads. */
static void test_batch_norm_relu_matches_unfused(void **state) {
    (void)state;
    static const char *const names[9] = {"y",       "mean", "variance", "dx",      "dscale",
                                         "doffset", "d2x",  "d2scale",  "d2offset"};
    int saved = eg_get_num_threads();
    for (int d = 0; d < 2; d++)
        for (int layout = 0; layout < 2; layout++) {
            eg_dtype dtype = d ? EG_DTYPE_F64 : EG_DTYPE_F32;
            eg_scope_begin();
            int64_t images[4] = {8, 12, 10, 16}, dense[2] = {300, 16}, cs = 16;
            int n_dims = layout ? 2 : 4;
            const int64_t *xs = layout ? dense : images;
            eg_tensor *x = random_tensor(41, dtype, n_dims, xs);
            eg_tensor *w = random_tensor(42, dtype, n_dims, xs);
            eg_tensor *scale = eg_variable(random_tensor(43, dtype, 1, &cs), "scale");
            eg_tensor *offset = eg_variable(random_tensor(44, dtype, 1, &cs), "offset");
            for (int record = 0; record < 2; record++) {
                eg_tensor *want[9], *got[9];
                assert_int_equal(eg_set_num_threads(1), EG_OK);
                int n = batch_norm_relu_run(x, w, scale, offset, false, record, want);
                for (int threads = 1; threads <= 2; threads++) {
                    assert_int_equal(eg_set_num_threads(threads), EG_OK);
                    assert_int_equal(batch_norm_relu_run(x, w, scale, offset, true, record, got),
                                     n);
                    for (int i = 0; i < n; i++)
                        if (!same_bytes(got[i], want[i]))
                            fail_msg("%s %s %s, %d thread(s): fused %s differs from unfused",
                                     eg_dtype_name(dtype), layout ? "(N, C)" : "NHWC",
                                     record ? "recorded" : "fused kernels", threads, names[i]);
                }
            }
            eg_release(scale);
            eg_release(offset);
            eg_scope_end();
        }
    eg_set_num_threads(saved);
}

/* A BatchNormalization layer with activation relu equals the layer followed by an Activation
 * layer, training (fused) and inference; other activations run after it; the op refuses them. */
static void test_batch_norm_layer_activation(void **state) {
    (void)state;
    for (int k = 0; k < 2; k++) {
        eg_activation activation = k ? EG_ACTIVATION_TANH : EG_ACTIVATION_RELU;
        eg_batch_norm_options o = eg_batch_norm_options_default();
        eg_layer *plain = eg_batch_norm_new(&o);
        o.activation = activation;
        eg_layer *with = eg_batch_norm_new(&o);
        assert_non_null(plain);
        assert_non_null(with);
        eg_scope_begin();
        int64_t xs[4] = {4, 5, 5, 8};
        eg_tensor *x = random_tensor(51, EG_DTYPE_F32, 4, xs);
        for (int training = 1; training >= 0; training--) {
            eg_tensor *want = eg_activation_apply(activation, eg_layer_call(plain, x, training));
            eg_tensor *got = eg_layer_call(with, x, training);
            assert_non_null(got);
            assert_true(same_bytes(got, want));
        }
        eg_scope_end();
        eg_layer_free(plain);
        eg_layer_free(with);
    }
    eg_scope_begin();
    int64_t xs[2] = {4, 3};
    eg_tensor *x = random_tensor(52, EG_DTYPE_F32, 2, xs);
    int axis = 0;
    assert_null(eg_batch_norm_training_activation(x, 1, &axis, NULL, NULL, 1e-3,
                                                  EG_ACTIVATION_SIGMOID, NULL, NULL));
    assert_non_null(strstr(eg_last_error(), "not one of linear, relu"));
    eg_clear_error();
    eg_batch_norm_options o = eg_batch_norm_options_default();
    o.activation = EG_ACTIVATION_COUNT;
    assert_null(eg_batch_norm_new(&o));
    eg_clear_error();
    eg_scope_end();
}

static void test_layer_norm_and_dropout_layers(void **state) {
    (void)state;
    eg_layer_norm_options o = eg_layer_norm_options_default();
    o.dtype = EG_DTYPE_F64;
    eg_layer *ln = eg_layer_norm_new(&o), *drop = eg_dropout_new(0.5, NULL);
    assert_non_null(ln);
    assert_non_null(drop);
    eg_scope_begin();
    int64_t xs[2] = {5, 40};
    eg_tensor *x = random_tensor(5, EG_DTYPE_F64, 2, xs);
    double *yv = read_all(eg_layer_call(ln, x, true));
    for (int r = 0; r < 5; r++) {
        double mean = 0, var = 0;
        for (int i = 0; i < 40; i++) mean += yv[r * 40 + i] / 40;
        for (int i = 0; i < 40; i++) var += pow(yv[r * 40 + i] - mean, 2) / 40;
        assert_close(mean, 0, 1e-12);
        assert_close(var, 1, 2e-3); /* epsilon 1e-3 */
    }
    free(yv);
    int n;
    eg_layer_variables(ln, &n);
    assert_int_equal(n, 2);
    assert_string_equal(eg_layer_type(ln), "LayerNormalization");
    /* dropout: identity at inference, zeros and 2x while training, repeatable with a seed */
    double *xv = read_all(x), *inference = read_all(eg_layer_call(drop, x, false));
    assert_memory_equal(xv, inference, 200 * sizeof(double));
    eg_manual_seed(9);
    double *a = read_all(eg_layer_call(drop, x, true));
    double *b = read_all(eg_layer_call(drop, x, true));
    eg_manual_seed(9);
    double *a2 = read_all(eg_layer_call(drop, x, true));
    assert_memory_equal(a, a2, 200 * sizeof(double));
    assert_memory_not_equal(a, b, 200 * sizeof(double));
    int zeros = 0;
    for (int i = 0; i < 200; i++) {
        if (a[i] == 0)
            zeros++;
        else
            assert_close(a[i], 2 * xv[i], 1e-12);
    }
    assert_in_range(zeros, 60, 140);
    free(xv);
    free(inference);
    free(a);
    free(b);
    free(a2);
    assert_null(eg_dropout_new(1.0, NULL));
    eg_clear_error();
    eg_scope_end();
    eg_layer_free(ln);
    eg_layer_free(drop);
}

/* eg_model_variables holds what a checkpoint needs: with the moving statistics saved and restored
 * a fresh model gives the same inference outputs. */
static eg_model *small_bn_model(void) {
    eg_model *model = eg_sequential_new(NULL);
    assert_int_equal(
        eg_sequential_add(model, eg_conv2d_new(4, 3, EG_PADDING_SAME, EG_ACTIVATION_NONE)), EG_OK);
    assert_int_equal(eg_sequential_add(model, eg_batch_norm_new(NULL)), EG_OK);
    assert_int_equal(eg_model_build(model, 4, (int64_t[]){-1, 5, 5, 2}), EG_OK);
    return model;
}

static void test_save_and_restore_moving_statistics(void **state) {
    (void)state;
    char path[] = "/tmp/eagle_test_cnn_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    eg_manual_seed(1);
    eg_model *model = small_bn_model();
    eg_scope_begin();
    eg_tensor *x = random_tensor(31, EG_DTYPE_F32, 4, (int64_t[]){3, 5, 5, 2});
    for (int i = 0; i < 3; i++) assert_non_null(eg_model_call(model, x, true));
    eg_tensor *want = eg_model_call(model, x, false);
    int n;
    eg_tensor *const *vars = eg_model_variables(model, &n);
    assert_int_equal(n, 6); /* kernel, bias, gamma, beta, moving mean, moving variance */
    const char *names[8];
    for (int i = 0; i < n; i++) names[i] = eg_variable_name(vars[i]);
    assert_int_equal(eg_safetensors_save(path, n, names, vars, 0, NULL, NULL), EG_OK);
    eg_manual_seed(2);
    eg_model *fresh = small_bn_model();
    eg_tensor *const *fresh_vars = eg_model_variables(fresh, &n);
    eg_safetensors *file = eg_safetensors_open(path);
    assert_non_null(file);
    for (int i = 0; i < n; i++) {
        eg_tensor *value = eg_safetensors_get(file, eg_variable_name(fresh_vars[i]));
        assert_non_null(value);
        assert_int_equal(eg_assign(fresh_vars[i], value), EG_OK);
    }
    eg_safetensors_close(file);
    assert_true(same_bytes(eg_model_call(fresh, x, false), want));
    eg_scope_end();
    eg_model_free(model);
    eg_model_free(fresh);
    unlink(path);
}

/* ---- convolution at larger sizes: a naive loop, both algorithms, thread counts ---- */

static void naive_conv(const double *x, const double *w, double *y, int64_t b, int64_t h,
                       int64_t wd, int64_t c, int64_t k, int64_t o, int64_t stride, int64_t pad_h,
                       int64_t pad_w, int64_t oh, int64_t ow) {
    for (int64_t n = 0; n < b; n++)
        for (int64_t i = 0; i < oh; i++)
            for (int64_t j = 0; j < ow; j++)
                for (int64_t f = 0; f < o; f++) {
                    double s = 0;
                    for (int64_t p = 0; p < k; p++)
                        for (int64_t q = 0; q < k; q++)
                            for (int64_t ch = 0; ch < c; ch++) {
                                int64_t ih = i * stride - pad_h + p, iw = j * stride - pad_w + q;
                                if (ih < 0 || ih >= h || iw < 0 || iw >= wd) continue;
                                s += x[((n * h + ih) * wd + iw) * c + ch] *
                                     w[((p * k + q) * c + ch) * o + f];
                            }
                    y[((n * oh + i) * ow + j) * o + f] = s;
                }
}

static void check_conv_against_naive(int64_t c, int64_t o, int algorithm) {
    eg_scope_begin();
    const int64_t b = 3, h = 11, wd = 10, k = 3;
    int64_t xs[4] = {b, h, wd, c}, ws[4] = {k, k, c, o};
    eg_tensor *x = random_tensor(11, EG_DTYPE_F32, 4, xs);
    eg_tensor *w = random_tensor(12, EG_DTYPE_F32, 4, ws);
    eg_conv2d_options opt = {.strides = {2, 2}, .padding = EG_PADDING_SAME};
    eg__conv_set_algorithm(algorithm);
    eg_tensor *y = eg_conv2d(x, w, &opt);
    eg__conv_set_algorithm(0);
    assert_non_null(y);
    int64_t oh = 6, ow = 5; /* ceil(11 / 2), ceil(10 / 2); SAME pads (1, 1) and (0, 1) */
    assert_int_equal(eg_tensor_dim(y, 1), oh);
    assert_int_equal(eg_tensor_dim(y, 2), ow);
    double *xv = read_all(x), *wv = read_all(w), *yv = read_all(y);
    double *want = malloc(sizeof(double) * (size_t)(b * oh * ow * o));
    naive_conv(xv, wv, want, b, h, wd, c, k, o, 2, 1, 0, oh, ow);
    /* f32 sums of up to 360 terms, in an order that differs between algorithms: the rounding
     * error scales with the sum of the terms' magnitudes (the same loops on |x| and |w|) */
    double *want_abs = malloc(sizeof(double) * (size_t)(b * oh * ow * o));
    for (int64_t i = 0; i < b * h * wd * c; i++) xv[i] = fabs(xv[i]);
    for (int64_t i = 0; i < k * k * c * o; i++) wv[i] = fabs(wv[i]);
    naive_conv(xv, wv, want_abs, b, h, wd, c, k, o, 2, 1, 0, oh, ow);
    for (int64_t i = 0; i < b * oh * ow * o; i++)
        assert_close(yv[i], want[i], 1e-4 + 2e-6 * want_abs[i]);
    free(want_abs);
    free(xv);
    free(wv);
    free(yv);
    free(want);
    eg_scope_end();
}

static void test_conv_against_naive_loops(void **state) {
    (void)state;
    check_conv_against_naive(5, 7, 1);  /* im2col + GEMM */
    check_conv_against_naive(3, 16, 2); /* direct (f32, C_out a multiple of 8) */
    check_conv_against_naive(3, 16, 1);
    check_conv_against_naive(40, 24, 0); /* a large K */
}

/* Every output of a conv layer's forward and backward, and of the pools, with 1 and 2 threads. */
static void run_cnn_ops(eg_tensor *x, eg_tensor *w, eg_tensor **out) {
    eg_conv2d_options o = {.padding = EG_PADDING_SAME};
    eg_tape *tape = eg_tape_begin(false);
    eg_tape_watch(tape, x);
    eg_tape_watch(tape, w);
    eg_tensor *y = eg_conv2d(x, w, &o);
    eg_tensor *mean, *var;
    assert_int_equal(eg_moments(y, 3, (int[]){0, 1, 2}, false, &mean, &var), EG_OK);
    eg_tensor *z = eg_relu(eg_batch_normalization(y, mean, var, NULL, NULL, 1e-3));
    eg_tensor *p = eg_max_pool2d(z, &(eg_pool2d_options){.pool_size = {3, 3}, .strides = {2, 2}});
    eg_tensor *q = eg_avg_pool2d(z, NULL);
    eg_tensor *loss = eg_add(eg_sum(eg_square(p), 0, NULL, false), eg_sum(q, 0, NULL, false));
    eg_tensor *grads[2];
    eg_tensor *sources[2] = {x, w};
    assert_int_equal(eg_tape_gradient(tape, loss, 2, sources, grads, EG_UNCONNECTED_ZERO), EG_OK);
    eg_tape_free(tape);
    out[0] = y;
    out[1] = var;
    out[2] = p;
    out[3] = q;
    out[4] = grads[0];
    out[5] = grads[1];
}

static void test_threads_give_identical_bits(void **state) {
    (void)state;
    int saved = eg_get_num_threads();
    eg_scope_begin();
    int64_t xs[4] = {9, 20, 19, 6}, ws[4] = {3, 3, 6, 16};
    eg_tensor *x = random_tensor(21, EG_DTYPE_F32, 4, xs);
    eg_tensor *w = random_tensor(22, EG_DTYPE_F32, 4, ws);
    eg_tensor *one[6], *two[6];
    for (int algorithm = 1; algorithm <= 2; algorithm++) {
        eg__conv_set_algorithm(algorithm);
        assert_int_equal(eg_set_num_threads(1), EG_OK);
        run_cnn_ops(x, w, one);
        assert_int_equal(eg_set_num_threads(2), EG_OK);
        run_cnn_ops(x, w, two);
        for (int i = 0; i < 6; i++)
            if (!same_bytes(one[i], two[i]))
                fail_msg("output %d (algorithm %d) differs between 1 and 2 threads", i, algorithm);
    }
    eg__conv_set_algorithm(0);
    eg_scope_end();
    eg_set_num_threads(saved);
}

/* ---- a short convergence run ---- */

static void test_small_cnn_learns_fashion_mnist(void **state) {
    (void)state;
    eg_tensor *images = NULL, *labels = NULL, *test_images = NULL, *test_labels = NULL;
    if (eg_mnist_load(NULL, true, &images, &labels) != EG_OK ||
        eg_mnist_load(NULL, false, &test_images, &test_labels) != EG_OK) {
        eg_release(images);
        eg_release(labels);
        eg_clear_error();
        skip(); /* the Debian package dataset-fashion-mnist is not installed */
    }
    eg_manual_seed(1234);
    eg_model *model = eg_sequential_new("small_cnn");
    eg_conv2d_layer_options o = eg_conv2d_layer_options_default();
    o.padding = EG_PADDING_SAME;
    o.use_bias = false;
    assert_int_equal(eg_sequential_add(model, eg_conv2d_new_ex(8, 3, 3, &o)), EG_OK);
    assert_int_equal(eg_sequential_add(model, eg_batch_norm_new(NULL)), EG_OK);
    assert_int_equal(eg_sequential_add(model, eg_activation_new(EG_ACTIVATION_RELU, NULL)), EG_OK);
    assert_int_equal(eg_sequential_add(model, eg_max_pool2d_new(2, 0, EG_PADDING_VALID)), EG_OK);
    assert_int_equal(
        eg_sequential_add(model, eg_conv2d_new(16, 3, EG_PADDING_VALID, EG_ACTIVATION_RELU)),
        EG_OK);
    assert_int_equal(eg_sequential_add(model, eg_max_pool2d_new(2, 0, EG_PADDING_VALID)), EG_OK);
    assert_int_equal(eg_sequential_add(model, eg_dropout_new(0.25, NULL)), EG_OK);
    assert_int_equal(eg_sequential_add(model, eg_flatten_new(NULL)), EG_OK);
    assert_int_equal(eg_sequential_add(model, eg_dense_new(10, EG_ACTIVATION_NONE)), EG_OK);
    assert_int_equal(eg_model_build(model, 4, (int64_t[]){-1, 28, 28, 1}), EG_OK);
    eg_optimizer *adam = eg_adam_new(NULL);
    enum { N_TRAIN = 2000, N_TEST = 1000, BATCH = 32, STEPS = 250 };
    uint64_t rng = 99;
    for (int step = 0; step < STEPS; step++) {
        eg_scope_begin();
        int64_t idx[BATCH];
        for (int i = 0; i < BATCH; i++) {
            rng = rng * 6364136223846793005ull + 1442695040888963407ull;
            idx[i] = (int64_t)((rng >> 33) % N_TRAIN);
        }
        eg_tensor *index = eg_tensor_from_data(idx, EG_DTYPE_I64, 1, (int64_t[]){BATCH});
        eg_tensor *x =
            eg_reshape(eg_mul_scalar(eg_cast(eg_gather(images, index, 0), EG_DTYPE_F32), 1.0 / 255),
                       4, (int64_t[]){BATCH, 28, 28, 1});
        eg_tensor *y = eg_gather(labels, index, 0);
        int n_vars;
        eg_tensor *const *vars = eg_model_trainable_variables(model, &n_vars);
        eg_tensor *grads[16];
        eg_tape *tape = eg_tape_begin(false);
        eg_tensor *loss = eg_loss_sparse_categorical_crossentropy(y, eg_model_call(model, x, true),
                                                                  true, EG_REDUCTION_MEAN);
        assert_int_equal(eg_tape_gradient(tape, loss, n_vars, vars, grads, EG_UNCONNECTED_ZERO),
                         EG_OK);
        eg_tape_free(tape);
        assert_int_equal(eg_optimizer_apply_gradients(adam, n_vars, grads, vars), EG_OK);
        eg_scope_end();
    }
    eg_scope_begin();
    eg_tensor *x = eg_reshape(
        eg_mul_scalar(eg_cast(eg_slice(test_images, 0, 0, N_TEST, 1), EG_DTYPE_F32), 1.0 / 255), 4,
        (int64_t[]){N_TEST, 28, 28, 1});
    eg_tensor *logits = eg_model_call(model, x, false);
    double accuracy = eg_item(eg_mean(
        eg_metric_sparse_categorical_accuracy(eg_slice(test_labels, 0, 0, N_TEST, 1), logits), 0,
        NULL, false));
    fprintf(stderr, "small CNN, %d steps of %d on %d images: test accuracy %.4f\n", STEPS, BATCH,
            N_TRAIN, accuracy);
    assert_true(accuracy > 0.72);
    eg_scope_end();
    eg_optimizer_free(adam);
    eg_model_free(model);
    eg_release(images);
    eg_release(labels);
    eg_release(test_images);
    eg_release(test_labels);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_conv_layer_builds_like_keras),
        cmocka_unit_test(test_batch_norm_train_and_inference),
        cmocka_unit_test(test_batch_norm_gradient_through_statistics),
        cmocka_unit_test(test_batch_norm_fused_gradient_matches_composite),
        cmocka_unit_test(test_batch_norm_relu_matches_unfused),
        cmocka_unit_test(test_batch_norm_layer_activation),
        cmocka_unit_test(test_layer_norm_and_dropout_layers),
        cmocka_unit_test(test_save_and_restore_moving_statistics),
        cmocka_unit_test(test_conv_against_naive_loops),
        cmocka_unit_test(test_threads_give_identical_bits),
        cmocka_unit_test(test_small_cnn_learns_fashion_mnist),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    eg_shutdown();
    return failed;
}
