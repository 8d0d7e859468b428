/* Synchronized batch normalization (eg_batch_norm_options.synchronized) under the mirrored
 * strategy: N replicas, each with its share of a global batch (uneven shares included), give
 * the outputs, input gradients, summed variable gradients and moving statistics of one
 * BatchNormalization layer on the whole batch (≤ 1e-5: the replicas add the batch's sums in
 * another order); the default per-replica statistics do not. Runs under TSan (label "threads"). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "eagle.h"
#include "test_util.h"

enum { ROWS = 23, FEATURES = 5, MAX_REPLICAS = 3 };

static float inputs[ROWS * FEATURES];
static float loss_weights[ROWS * FEATURES];

static void make_data(void) {
    uint64_t state = 987654321;
    for (int i = 0; i < ROWS * FEATURES; i++) {
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        double u = (double)(state >> 40) / (double)(1 << 24);
        /* a mean far from 0 per feature, so that per-replica and global statistics differ */
        inputs[i] = (float)(3.0 * (i % FEATURES) + 4.0 * u - 2.0);
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        loss_weights[i] = (float)((double)(state >> 40) / (double)(1 << 24) - 0.5);
    }
}

/* What one run produces over the global batch (rows in global order). */
typedef struct result {
    float y[ROWS * FEATURES];
    float dx[ROWS * FEATURES];
    float dgamma[FEATURES], dbeta[FEATURES];
    float moving_mean[FEATURES], moving_variance[FEATURES];
} result;

typedef struct job {
    bool synchronized;
    result out;
} job;

/* loss = sum(y * w) over this replica's rows: the replicas' losses add up to the whole batch's.
 */
static eg_status replica_step(const eg_replica_context *c, void *user) {
    job *j = user;
    int64_t start = 0, count = ROWS;
    if (c->strategy) eg_strategy_split_batch(c->strategy, ROWS, c->replica_id, &start, &count);
    eg_batch_norm_options o = eg_batch_norm_options_default();
    o.synchronized = j->synchronized;
    o.momentum = 0.5;
    eg_layer *layer = eg_batch_norm_new(&o);
    if (!layer) return eg_last_status();
    int64_t shape[2] = {count, FEATURES};
    eg_tensor *x = eg_tensor_from_data(inputs + start * FEATURES, EG_DTYPE_F32, 2, shape);
    eg_tensor *w = eg_tensor_from_data(loss_weights + start * FEATURES, EG_DTYPE_F32, 2, shape);
    eg_tape *tape = eg_tape_begin(false);
    eg_tape_watch(tape, x);
    eg_tensor *y = eg_layer_call(layer, x, true);
    eg_tensor *loss = eg_sum(eg_mul(y, w), 0, NULL, false);
    int n_vars = 0;
    eg_tensor *const *vars = eg_layer_variables(layer, &n_vars);
    eg_status status = y && loss && n_vars == 4 ? EG_OK : eg_last_status();
    eg_tensor *grads[3] = {NULL, NULL, NULL};
    eg_tensor *sources[3] = {x, n_vars == 4 ? vars[0] : NULL, n_vars == 4 ? vars[1] : NULL};
    if (status == EG_OK)
        status = eg_tape_gradient(tape, loss, 3, sources, grads, EG_UNCONNECTED_NULL);
    eg_tape_free(tape);
    size_t rows_bytes = sizeof(float) * (size_t)(count * FEATURES),
           feature_bytes = sizeof(float) * FEATURES;
    result *r = &j->out;
    if (status == EG_OK) status = eg_tensor_copy_to_host(y, r->y + start * FEATURES, rows_bytes);
    if (status == EG_OK)
        status = eg_tensor_copy_to_host(grads[0], r->dx + start * FEATURES, rows_bytes);
    /* gamma's and beta's gradients: this replica's part, summed over the replicas */
    eg_tensor *dgamma = status == EG_OK ? eg_all_reduce(grads[1]) : NULL;
    eg_tensor *dbeta = status == EG_OK ? eg_all_reduce(grads[2]) : NULL;
    if (status == EG_OK && (!dgamma || !dbeta)) status = eg_last_status();
    if (status == EG_OK && c->replica_id == 0) {
        status = eg_tensor_copy_to_host(dgamma, r->dgamma, feature_bytes);
        if (status == EG_OK) status = eg_tensor_copy_to_host(dbeta, r->dbeta, feature_bytes);
        if (status == EG_OK)
            status = eg_tensor_copy_to_host(vars[2], r->moving_mean, feature_bytes);
        if (status == EG_OK)
            status = eg_tensor_copy_to_host(vars[3], r->moving_variance, feature_bytes);
    }
    for (int i = 0; i < 3; i++) eg_release(grads[i]);
    eg_layer_free(layer);
    return status;
}

/* replicas 0: the layer alone on the whole batch (no strategy). */
static void run(int replicas, bool synchronized, result *out) {
    static job j;
    memset(&j, 0, sizeof j);
    j.synchronized = synchronized;
    if (replicas == 0) {
        eg_replica_context alone = {0};
        assert_int_equal(replica_step(&alone, &j), EG_OK);
    } else {
        eg_strategy *s = eg_strategy_mirrored_new(replicas, NULL, NULL);
        assert_non_null(s);
        assert_int_equal(eg_strategy_run(s, replica_step, &j), EG_OK);
        eg_strategy_free(s);
    }
    *out = j.out;
}

static double worst_difference(const float *a, const float *b, int n) {
    double worst = 0;
    for (int i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]) / (1.0 + fabs((double)b[i]));
        if (!(d <= worst)) worst = d; /* NaN counts as the worst */
    }
    return worst;
}

static double result_difference(const result *a, const result *b) {
    double d = worst_difference(a->y, b->y, ROWS * FEATURES);
    d = fmax(d, worst_difference(a->dx, b->dx, ROWS * FEATURES));
    d = fmax(d, worst_difference(a->dgamma, b->dgamma, FEATURES));
    d = fmax(d, worst_difference(a->dbeta, b->dbeta, FEATURES));
    d = fmax(d, worst_difference(a->moving_mean, b->moving_mean, FEATURES));
    return fmax(d, worst_difference(a->moving_variance, b->moving_variance, FEATURES));
}

static void test_synchronized_replicas_match_the_whole_batch(void **state) {
    (void)state;
    static result whole, alone_synchronized, two, three;
    run(0, false, &whole);
    run(0, true, &alone_synchronized);
    run(2, true, &two);   /* 12 + 11 rows */
    run(3, true, &three); /* 8 + 8 + 7 rows */
    /* outside a strategy the synchronized layer is plain batch normalization */
    double d_alone = result_difference(&alone_synchronized, &whole);
    double d_two = result_difference(&two, &whole), d_three = result_difference(&three, &whole);
    print_message("largest relative difference from the whole batch: alone %.2e, 2 replicas "
                  "%.2e, 3 replicas %.2e\n",
                  d_alone, d_two, d_three);
    assert_true(d_alone <= 1e-5);
    assert_true(d_two <= 1e-5);
    assert_true(d_three <= 1e-5);
    /* the gradients reach x through the other replicas' rows too: not a zero check */
    double largest = 0;
    for (int i = 0; i < ROWS * FEATURES; i++) largest = fmax(largest, fabs(whole.dx[i]));
    assert_true(largest > 1e-2);
}

static void test_per_replica_statistics_differ(void **state) {
    (void)state;
    static result whole, two;
    run(0, false, &whole);
    run(2, false, &two);
    /* each half of the batch normalized with its own moments: a different function */
    assert_true(worst_difference(two.y, whole.y, ROWS * FEATURES) > 1e-3);
    assert_true(worst_difference(two.dx, whole.dx, ROWS * FEATURES) > 1e-3);
}

int main(void) {
    if (eg_device_configure_cpus(MAX_REPLICAS) != EG_OK) return 1;
    make_data();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_synchronized_replicas_match_the_whole_batch,
                                        fresh_scope_setup, strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_per_replica_statistics_differ, fresh_scope_setup,
                                        strict_scope_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
