/* MultiHeadAttention, PositionEmbedding and the Transformer blocks: MultiHeadAttention against a
 * materialized computation from its own weights, the masks' and causality's effects (outputs
 * that must not change when hidden inputs do), shapes and weights, a model that learns, the
 * three execution modes, and errors. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "test_util.h"

enum { B = 2, T = 5, E = 8, HEADS = 2 };

static eg_tensor *sequence(int64_t t, int64_t e, uint64_t seed) {
    int64_t shape[3] = {B, t, e};
    eg_tensor *x = uniform_tensor(3, shape, seed);
    assert_non_null(x);
    return x;
}

/* x (B, T, E) by a (E, heads, depth) kernel + (heads, depth) bias -> (B, heads, T, depth), with
 * plain ops. */
static eg_tensor *heads_of(const eg_tensor *x, const eg_tensor *kernel, const eg_tensor *bias) {
    const int64_t *ks = eg_tensor_shape(kernel);
    int64_t n = ks[1] * ks[2], t = eg_tensor_shape(x)[1];
    eg_tensor *y = eg_add(eg_matmul(x, eg_reshape(kernel, 2, (const int64_t[]){ks[0], n})),
                          eg_reshape(bias, 1, &n));
    return eg_permute(eg_reshape(y, 4, (const int64_t[]){B, t, ks[1], ks[2]}),
                      (const int[]){0, 2, 1, 3});
}

static void test_mha_matches_the_formula(void **state) {
    (void)state;
    eg_manual_seed(1);
    eg_mha_options o = eg_mha_options_default(HEADS, 3);
    o.value_dim = 4;
    o.output_dim = 6;
    o.bias_initializer = eg_initializer_random_uniform(-0.3, 0.3);
    eg_layer *mha = eg_multi_head_attention_new(&o);
    eg_tensor *query = sequence(T, E, 2), *value = sequence(7, 5, 3);
    bool keys[B * 7] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 1, 0, 0, 0};
    eg_tensor *mask = eg_tensor_from_data(keys, EG_DTYPE_BOOL, 2, (const int64_t[]){B, 7});
    eg_tensor *in[3] = {query, value, mask};
    eg_tensor *y = eg_layer_call_multi(mha, 3, in, false);
    assert_non_null(y);
    assert_int_equal(eg_tensor_shape(y)[2], 6);
    int n = 0;
    eg_tensor *const *w = eg_layer_variables(mha, &n);
    assert_int_equal(n, 8);
    assert_string_equal(eg_variable_name(w[0]), "multi_head_attention/query_kernel");
    assert_int_equal(eg_tensor_shape(w[6])[1], 4); /* (heads, value_dim, E_out) */
    eg_tensor *q = heads_of(query, w[0], w[1]), *k = heads_of(value, w[2], w[3]);
    eg_tensor *v = heads_of(value, w[4], w[5]);
    eg_tensor *s = eg_mul_scalar(eg_matmul_ex(q, k, false, true), 1 / sqrt(3.0));
    eg_tensor *shown = eg_reshape(mask, 4, (const int64_t[]){B, 1, 1, 7});
    eg_tensor *p = eg_softmax(eg_where(shown, s, eg_full(EG_DTYPE_F32, 0, NULL, -1e30)), -1);
    eg_tensor *a = eg_permute(eg_matmul(p, v), (const int[]){0, 2, 1, 3}); /* (B, T, heads, 4) */
    eg_tensor *flat = eg_reshape(eg_contiguous(a), 3, (const int64_t[]){B, T, HEADS * 4});
    eg_tensor *ref = eg_add(eg_matmul(flat, eg_reshape(w[6], 2, (const int64_t[]){8, 6})), w[7]);
    assert_all_close(y, ref, 1e-5);
    eg_layer_free(mha);
}

/* A block's output at the positions that stay visible must not change when hidden ones do. */
static void check_hidden_inputs_do_not_matter(eg_layer *layer, bool causal, bool masked) {
    eg_tensor *x = sequence(T, E, 4);
    bool keys[B * T] = {1, 1, 1, 0, 0, 1, 1, 1, 1, 1};
    eg_tensor *mask = eg_tensor_from_data(keys, EG_DTYPE_BOOL, 2, (const int64_t[]){B, T});
    eg_tensor *in[2] = {x, mask};
    eg_tensor *y = eg_layer_call_multi(layer, masked ? 2 : 1, in, false);
    assert_non_null(y);
    /* change the last two positions of the first row (masked there; in the future of the
     * first three positions) */
    float *data = eg_tensor_data(x);
    for (int t = 3; t < T; t++)
        for (int e = 0; e < E; e++) data[t * E + e] += 1.5f;
    eg_tensor *y2 = eg_layer_call_multi(layer, masked ? 2 : 1, in, false);
    assert_non_null(y2);
    eg_tensor *before = eg_slice(eg_slice(y, 0, 0, 1, 1), 1, 0, 3, 1);
    eg_tensor *after = eg_slice(eg_slice(y2, 0, 0, 1, 1), 1, 0, 3, 1);
    assert_all_close(after, before, 1e-6);
    /* and the changed positions' own outputs do change, as does the unmasked case */
    eg_tensor *changed = eg_sub(eg_slice(y2, 1, 3, T, 1), eg_slice(y, 1, 3, T, 1));
    assert_true(eg_item(eg_sum(eg_abs(changed), 0, NULL, false)) > 1e-3);
    (void)causal;
}

static void test_encoder_masks_and_causality(void **state) {
    (void)state;
    eg_manual_seed(5);
    eg_transformer_options o = eg_transformer_options_default(HEADS, 16);
    eg_layer *padded = eg_transformer_encoder_new(&o);
    check_hidden_inputs_do_not_matter(padded, false, true);
    o.causal = true;
    o.normalize_first = true;
    eg_layer *causal = eg_transformer_encoder_new(&o);
    check_hidden_inputs_do_not_matter(causal, true, false);
    int n = 0;
    eg_layer_variables(causal, &n);
    assert_int_equal(n, 16);
    eg_layer_free(padded);
    eg_layer_free(causal);
}

static void test_decoder_is_causal_and_reads_the_encoder(void **state) {
    (void)state;
    eg_manual_seed(6);
    eg_transformer_options o = eg_transformer_options_default(HEADS, 16);
    eg_layer *decoder = eg_transformer_decoder_new(&o);
    eg_tensor *x = sequence(T, E, 7), *encoded = sequence(6, E, 8);
    eg_tensor *in[2] = {x, encoded};
    eg_tensor *y = eg_layer_call_multi(decoder, 2, in, false);
    assert_non_null(y);
    int n = 0;
    eg_layer_variables(decoder, &n);
    assert_int_equal(n, 26);
    float *data = eg_tensor_data(x);
    for (int e = 0; e < E; e++) data[(T - 1) * E + e] += 2.0f; /* the last step of row 0 */
    eg_tensor *y2 = eg_layer_call_multi(decoder, 2, in, false);
    assert_all_close(eg_slice(y2, 1, 0, T - 1, 1), eg_slice(y, 1, 0, T - 1, 1), 1e-6);
    float *enc = eg_tensor_data(encoded);
    enc[0] += 3.0f; /* the encoder's first step of row 0: every decoder step reads it */
    eg_tensor *y3 = eg_layer_call_multi(decoder, 2, in, false);
    eg_tensor *moved = eg_sub(eg_slice(y3, 0, 0, 1, 1), eg_slice(y2, 0, 0, 1, 1));
    assert_true(eg_item(eg_sum(eg_abs(moved), 0, NULL, false)) > 1e-3);
    eg_layer_free(decoder);
}

/* Under mixed_bfloat16 the blocks compute in bf16 but their attention and layer normalization
 * in f32: the outputs are bf16 and near the f32 ones, and every variable gets a finite gradient. */
static void test_blocks_under_mixed_bfloat16(void **state) {
    (void)state;
    eg_manual_seed(9);
    eg_transformer_options o = eg_transformer_options_default(HEADS, 16);
    o.causal = true;
    eg_layer *encoder = eg_transformer_encoder_new(&o), *decoder = eg_transformer_decoder_new(&o);
    eg_tensor *x = sequence(T, E, 10), *encoded = sequence(6, E, 11);
    eg_tensor *in[2] = {x, encoded};
    eg_tensor *wide[2] = {eg_layer_call(encoder, x, false),
                          eg_layer_call_multi(decoder, 2, in, false)};
    assert_int_equal(eg_layer_set_policy(encoder, EG_POLICY_MIXED_BFLOAT16), EG_OK);
    assert_int_equal(eg_layer_set_policy(decoder, EG_POLICY_MIXED_BFLOAT16), EG_OK);
    eg_tape *tape = eg_tape_begin(false);
    eg_tensor *low[2] = {eg_layer_call(encoder, x, true),
                         eg_layer_call_multi(decoder, 2, in, true)};
    for (int i = 0; i < 2; i++) {
        assert_non_null(low[i]);
        assert_int_equal(eg_tensor_dtype(low[i]), EG_DTYPE_BF16);
        assert_all_close(eg_cast(low[i], EG_DTYPE_F32), wide[i], 0.05);
    }
    eg_tensor *loss = eg_add(eg_sum(eg_cast(low[0], EG_DTYPE_F32), 0, NULL, false),
                             eg_sum(eg_square(eg_cast(low[1], EG_DTYPE_F32)), 0, NULL, false));
    int n = 0;
    eg_tensor *const *vars = eg_layer_variables(decoder, &n);
    eg_tensor *grads[32] = {NULL};
    assert_int_equal(eg_tape_gradient(tape, loss, n, vars, grads, EG_UNCONNECTED_ZERO), EG_OK);
    eg_tape_free(tape);
    for (int i = 0; i < n; i++) {
        assert_int_equal(eg_tensor_dtype(grads[i]), EG_DTYPE_F32);
        assert_true(isfinite(eg_item(eg_sum(eg_abs(grads[i]), 0, NULL, false))));
    }
    eg_layer_free(encoder);
    eg_layer_free(decoder);
}

/* Embedding(mask_zero) -> PositionEmbedding -> TransformerEncoder -> Dense in a Sequential
 * learns a causal next-token task (token t+1 = token t + 1 mod 7), and the padded row's visible
 * outputs are those of the unpadded row. */
static void test_a_sequential_transformer_learns(void **state) {
    (void)state;
    eg_manual_seed(9);
    eg_model *model = eg_sequential_new("tiny_lm");
    eg_embedding_options eo = eg_embedding_options_default();
    eo.mask_zero = true;
    eg_transformer_options to = eg_transformer_options_default(HEADS, 32);
    to.causal = true;
    assert_int_equal(eg_sequential_add(model, eg_embedding_new(8, E * 2, &eo)), EG_OK);
    assert_int_equal(eg_sequential_add(model, eg_position_embedding_new(16, NULL)), EG_OK);
    assert_int_equal(eg_sequential_add(model, eg_transformer_encoder_new(&to)), EG_OK);
    assert_int_equal(eg_sequential_add(model, eg_dense_new(8, EG_ACTIVATION_NONE)), EG_OK);
    eg_optimizer *adam = eg_adam_new(NULL);
    int32_t ids[4 * 6], next[4 * 6];
    for (int r = 0; r < 4; r++)
        for (int t = 0; t < 6; t++) {
            ids[r * 6 + t] = 1 + (r + t) % 7;
            next[r * 6 + t] = 1 + (r + t + 1) % 7;
        }
    int64_t shape[2] = {4, 6}, flat = 24;
    eg_tensor *x = eg_tensor_from_data(ids, EG_DTYPE_I32, 2, shape);
    eg_tensor *y = eg_tensor_from_data(next, EG_DTYPE_I32, 1, &flat);
    double first = 0, last = 0;
    for (int step = 0; step < 150; step++) {
        eg_scope_begin();
        eg_tape *tape = eg_tape_begin(false);
        eg_tensor *logits = eg_model_call(model, x, true);
        eg_tensor *loss = eg_loss_sparse_categorical_crossentropy(
            y, eg_reshape(logits, 2, (const int64_t[]){24, 8}), true, EG_REDUCTION_MEAN);
        int n = 0;
        eg_tensor *const *vars = eg_model_trainable_variables(model, &n);
        eg_tensor *grads[32] = {NULL};
        assert_int_equal(eg_tape_gradient(tape, loss, n, vars, grads, EG_UNCONNECTED_ZERO), EG_OK);
        eg_tape_free(tape);
        assert_int_equal(eg_optimizer_apply_gradients(adam, n, grads, vars), EG_OK);
        if (step == 0) first = eg_item(loss);
        last = eg_item(loss);
        eg_scope_end();
    }
    fprintf(stderr, "tiny causal transformer: loss %.4f -> %.4f in 150 steps\n", first, last);
    assert_true(last < 0.1 * first);
    /* padding: a row with two pad ids at the end gives the unpadded row's outputs */
    int32_t padded[6] = {3, 4, 5, 6, 0, 0};
    eg_tensor *p = eg_tensor_from_data(padded, EG_DTYPE_I32, 2, (const int64_t[]){1, 6});
    eg_tensor *u = eg_tensor_from_data(padded, EG_DTYPE_I32, 2, (const int64_t[]){1, 4});
    eg_tensor *yp = eg_model_call(model, p, false), *yu = eg_model_call(model, u, false);
    assert_all_close(eg_slice(yp, 1, 0, 4, 1), yu, 1e-5);
    eg_optimizer_free(adam);
    eg_model_free(model);
}

typedef struct step_context {
    eg_layer *layer;
} step_context;

static eg_status decoder_step(eg_tensor *const *in, eg_tensor **out, void *data) {
    step_context *ctx = data;
    eg_tape *tape = eg_tape_begin(false);
    eg_tape_watch(tape, in[0]);
    eg_tensor *y = eg_layer_call_multi(ctx->layer, 2, in, true);
    eg_tensor *loss = eg_sum(eg_square(y), 0, NULL, false);
    eg_tensor *dx = NULL;
    eg_status status = eg_tape_gradient(tape, loss, 1, in, &dx, EG_UNCONNECTED_ZERO);
    eg_tape_free(tape);
    out[0] = loss;
    out[1] = status == EG_OK ? eg_sum(eg_square(dx), 0, NULL, false) : NULL;
    return eg_last_status();
}

static void test_three_modes_agree(void **state) {
    (void)state;
    eg_manual_seed(4);
    eg_transformer_options o = eg_transformer_options_default(HEADS, 16);
    step_context ctx = {eg_transformer_decoder_new(&o)};
    eg_tensor *in[2] = {sequence(T, E, 11), sequence(3, E, 12)};
    double results[3][2];
    for (int mode = 0; mode < 3; mode++) {
        eg_tensor *out[2] = {NULL, NULL};
        if (mode == 0) {
            assert_int_equal(decoder_step(in, out, &ctx), EG_OK);
        } else if (mode == 1) {
            eg_lazy_begin();
            assert_int_equal(decoder_step(in, out, &ctx), EG_OK);
            assert_int_equal(eg_lazy_end(), EG_OK);
            assert_int_equal(eg_realize(2, out), EG_OK);
        } else {
            eg_function *f = eg_function_new("decoder_step", decoder_step, 2, 2, &ctx);
            assert_int_equal(eg_function_call(f, in, out), EG_OK);
            eg_release(out[0]);
            eg_release(out[1]);
            assert_int_equal(eg_function_call(f, in, out), EG_OK); /* a replay */
            eg_function_free(f);
        }
        for (int k = 0; k < 2; k++) {
            results[mode][k] = eg_item(out[k]);
            eg_release(out[k]);
        }
    }
    for (int mode = 1; mode < 3; mode++)
        for (int k = 0; k < 2; k++)
            if (!(fabs(results[mode][k] - results[0][k]) <= 1e-5 * fabs(results[0][k])))
                fail_msg("mode %d result %d: %.9g, eager %.9g", mode, k, results[mode][k],
                         results[0][k]);
    eg_layer_free(ctx.layer);
}

/* A decoder keeps its input's shape, so that decoders stack in a functional graph (its output
 * shape once came from reading its state as MultiHeadAttention's options: garbage features). */
static void test_decoders_stack_in_a_functional_model(void **state) {
    (void)state;
    eg_manual_seed(9);
    eg_transformer_options o = eg_transformer_options_default(HEADS, 16);
    eg_symbol *x = eg_input(2, (const int64_t[]){-1, E}, EG_DTYPE_F32, "x");
    eg_symbol *memory = eg_input(2, (const int64_t[]){-1, E}, EG_DTYPE_F32, "memory");
    eg_symbol *h = x;
    for (int i = 0; i < 2; i++)
        h = eg_layer_apply_multi(eg_transformer_decoder_new(&o), 2,
                                 (const eg_symbol *[]){h, memory});
    assert_non_null(h);
    int n_dims = 0;
    const int64_t *shape = eg_symbol_shape(h, &n_dims);
    assert_int_equal(n_dims, 3);
    assert_int_equal(shape[2], E);
    eg_model *model = eg_functional_model_new(2, (const eg_symbol *[]){x, memory}, 1,
                                              (const eg_symbol *[]){h}, NULL);
    assert_non_null(model);
    eg_tensor *out = NULL;
    assert_int_equal(
        eg_model_call_multi(model, 2, (eg_tensor *const[]){sequence(T, E, 10), sequence(6, E, 11)},
                            false, 1, &out),
        EG_OK);
    assert_int_equal(eg_tensor_shape(out)[1], T);
    assert_int_equal(eg_tensor_shape(out)[2], E);
    eg_model_free(model);
}

static void test_bad_input_gets_clear_errors(void **state) {
    (void)state;
    eg_mha_options mo = eg_mha_options_default(0, 4);
    assert_null(eg_multi_head_attention_new(&mo));
    expect_error_containing(EG_ERR_INVALID_ARGUMENT, "num_heads", NULL);
    assert_null(eg_multi_head_attention_new(NULL));
    expect_error(EG_ERR_NULL_ARGUMENT);
    eg_transformer_options o = eg_transformer_options_default(3, 16);
    eg_layer *encoder = eg_transformer_encoder_new(&o);
    assert_null(eg_layer_call(encoder, sequence(T, E, 1), false));
    expect_error_containing(EG_ERR_SHAPE, "do not split into 3 heads", NULL);
    o = eg_transformer_options_default(HEADS, 16);
    o.dropout = 1.0;
    assert_null(eg_transformer_decoder_new(&o));
    expect_error_containing(EG_ERR_INVALID_ARGUMENT, "dropout", NULL);
    eg_layer *position = eg_position_embedding_new(3, NULL);
    assert_null(eg_layer_call(position, sequence(T, E, 2), false));
    expect_error_containing(EG_ERR_SHAPE, "holds 3 positions", NULL);
    eg_mha_options ok = eg_mha_options_default(HEADS, 4);
    eg_layer *mha = eg_multi_head_attention_new(&ok);
    int64_t flat[2] = {B, E};
    assert_null(eg_layer_call(mha, uniform_tensor(2, flat, 3), false));
    expect_error(EG_ERR_SHAPE);
    eg_layer_free(mha);
    eg_layer_free(position);
    eg_layer_free(encoder);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_mha_matches_the_formula, fresh_scope_setup,
                                        strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_encoder_masks_and_causality, fresh_scope_setup,
                                        strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_decoder_is_causal_and_reads_the_encoder,
                                        fresh_scope_setup, strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_a_sequential_transformer_learns, fresh_scope_setup,
                                        strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_blocks_under_mixed_bfloat16, fresh_scope_setup,
                                        strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_three_modes_agree, fresh_scope_setup,
                                        strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_decoders_stack_in_a_functional_model,
                                        fresh_scope_setup, strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_bad_input_gets_clear_errors, fresh_scope_setup,
                                        strict_scope_teardown),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    eg_shutdown();
    return failed;
}
