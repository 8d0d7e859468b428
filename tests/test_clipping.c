/* Keras' gradient clipping in the optimizers (eg_gradient_clipping): SGD with learning rate 1 on
 * zero variables makes each variable minus its clipped gradient, so the clipping is read off
 * directly; clipnorm per gradient, global_clipnorm jointly, clipvalue per element; gradients
 * within the limit keep their bits; a traced step clips as an eager one; bad settings and the
 * loss-scaling combination are refused with clear errors. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <string.h>

#include "eagle.h"
#include "test_util.h"

static const float first[2] = {3, 4};        /* norm 5 */
static const float second[2] = {0.3f, 0.4f}; /* norm 0.5 */

/* One SGD(lr 1) step with `clipping` on two zero variables; their values into out (4 floats). */
static void step_with(eg_gradient_clipping clipping, float *out) {
    eg_sgd_options o = eg_sgd_options_default();
    o.learning_rate = eg_schedule_constant(1.0);
    o.clipping = clipping;
    eg_optimizer *sgd = eg_sgd_new(&o);
    assert_non_null(sgd);
    int64_t two = 2;
    eg_tensor *vars[2] = {eg_variable(eg_zeros(EG_DTYPE_F32, 1, &two), "a"),
                          eg_variable(eg_zeros(EG_DTYPE_F32, 1, &two), "b")};
    eg_tensor *grads[2] = {eg_tensor_from_data(first, EG_DTYPE_F32, 1, &two),
                           eg_tensor_from_data(second, EG_DTYPE_F32, 1, &two)};
    assert_int_equal(eg_optimizer_apply_gradients(sgd, 2, grads, vars), EG_OK);
    assert_int_equal(eg_tensor_copy_to_host(vars[0], out, 8), EG_OK);
    assert_int_equal(eg_tensor_copy_to_host(vars[1], out + 2, 8), EG_OK);
    for (int i = 0; i < 2; i++) {
        eg_release(grads[i]);
        eg_release(vars[i]);
    }
    eg_optimizer_free(sgd);
}

static void assert_close(const float *got, const float *want, int n) {
    for (int i = 0; i < n; i++) assert_true(fabsf(got[i] - want[i]) <= 1e-6f);
}

static void test_clipnorm_scales_each_gradient(void **state) {
    (void)state;
    float v[4];
    step_with((eg_gradient_clipping){.clipnorm = 1}, v);
    const float want[4] = {-0.6f, -0.8f, -0.3f, -0.4f}; /* the second is within: unchanged */
    assert_close(v, want, 4);
    const float within[2] = {-0.3f, -0.4f};
    assert_memory_equal(v + 2, within, sizeof within); /* bit for bit */
}

static void test_global_clipnorm_scales_them_together(void **state) {
    (void)state;
    float v[4];
    step_with((eg_gradient_clipping){.global_clipnorm = 1}, v);
    /* joint norm sqrt(25 + 0.25) */
    double scale = 1.0 / sqrt(25.25);
    const float want[4] = {(float)(-3 * scale), (float)(-4 * scale), (float)(-0.3 * scale),
                           (float)(-0.4 * scale)};
    assert_close(v, want, 4);
}

static void test_clipvalue_clamps_each_element(void **state) {
    (void)state;
    float v[4];
    step_with((eg_gradient_clipping){.clipvalue = 0.35}, v);
    const float want[4] = {-0.35f, -0.35f, -0.3f, -0.35f};
    assert_close(v, want, 4);
}

static void test_no_clipping_is_the_plain_step(void **state) {
    (void)state;
    float v[4];
    step_with((eg_gradient_clipping){0}, v);
    const float plain[4] = {-3, -4, -0.3f, -0.4f};
    assert_memory_equal(v, plain, sizeof plain);
}

/* A traced step: the clipping ops are part of the graph. */
typedef struct traced {
    eg_optimizer *sgd;
    eg_tensor *var;
} traced;

static eg_status clipped_step(eg_tensor *const *in, eg_tensor **out, void *user) {
    traced *t = user;
    eg_tensor *grad = eg_mul_scalar(in[0], 1.0);
    eg_status status = eg_optimizer_apply_gradients(t->sgd, 1, &grad, &t->var);
    out[0] = grad;
    return status;
}

static void test_a_traced_step_clips_too(void **state) {
    (void)state;
    eg_sgd_options o = eg_sgd_options_default();
    o.learning_rate = eg_schedule_constant(1.0);
    o.clipping.clipnorm = 1;
    int64_t two = 2;
    traced t = {eg_sgd_new(&o), eg_variable(eg_zeros(EG_DTYPE_F32, 1, &two), "v")};
    eg_function *f = eg_function_new("clipped", clipped_step, 1, 1, &t);
    eg_tensor *g = eg_tensor_from_data(first, EG_DTYPE_F32, 1, &two);
    for (int call = 0; call < 2; call++) { /* trace, then replay */
        eg_tensor *out[1] = {NULL};
        assert_int_equal(eg_function_call(f, &g, out), EG_OK);
        eg_release(out[0]);
    }
    float v[2];
    assert_int_equal(eg_tensor_copy_to_host(t.var, v, 8), EG_OK);
    assert_close(v, (float[]){-1.2f, -1.6f}, 2);
    eg_release(g);
    eg_function_free(f);
    eg_release(t.var);
    eg_optimizer_free(t.sgd);
}

static void test_bad_settings_are_refused(void **state) {
    (void)state;
    eg_adam_options a = eg_adam_options_default();
    a.clipping = (eg_gradient_clipping){.clipnorm = 1, .clipvalue = 1};
    assert_null(eg_adam_new(&a));
    assert_non_null(strstr(eg_last_error(), "at most one of clipnorm, clipvalue"));
    eg_clear_error();
    a.clipping = (eg_gradient_clipping){.global_clipnorm = -1};
    assert_null(eg_adam_new(&a));
    eg_clear_error();
    a.clipping = (eg_gradient_clipping){.clipnorm = 1};
    eg_optimizer *adam = eg_adam_new(&a);
    assert_non_null(adam);
    assert_int_equal(eg_optimizer_enable_loss_scaling(adam, NULL), EG_ERR_UNSUPPORTED);
    assert_non_null(strstr(eg_last_error(), "clips its gradients"));
    eg_clear_error();
    eg_optimizer_free(adam);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_clipnorm_scales_each_gradient, fresh_scope_setup,
                                        strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_global_clipnorm_scales_them_together,
                                        fresh_scope_setup, strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_clipvalue_clamps_each_element, fresh_scope_setup,
                                        strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_no_clipping_is_the_plain_step, fresh_scope_setup,
                                        strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_a_traced_step_clips_too, fresh_scope_setup,
                                        strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_bad_settings_are_refused, fresh_scope_setup,
                                        strict_scope_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
