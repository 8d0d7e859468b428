/* Data parallelism in one process: the mirrored strategy over logical CPU devices.
 *   - eg_all_reduce sums in replica order, bit for bit, and differentiates to the all-reduce;
 *   - N replicas on a global batch give one replica's weights on it (≤ 1e-6 relative: the
 *     replicas' products add the batch in another order) after several steps;
 *   - the bucket size and the execution mode (eager, lazy, traced) change no bit;
 *   - replicas with different models fail at the first step naming the variable and replicas;
 *   - a failing replica and a silent one stop the others with errors that name them;
 *   - broadcast, average, host sums and barriers; the all-reduce statistics.
 * Runs under TSan in CI (label "threads"). Multi-process runs are tests/mpi/. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "eagle.h"
#include "test_util.h"

enum { BATCH = 24, IN = 8, HIDDEN = 16, OUT = 4, MAX_REPLICAS = 4 };

static float inputs[BATCH * IN];
static int64_t labels[BATCH];

static void make_data(void) {
    uint64_t state = 12345;
    for (int i = 0; i < BATCH * IN; i++) {
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        inputs[i] = (float)((double)(state >> 40) / (double)(1 << 24) * 2.0 - 1.0);
    }
    for (int i = 0; i < BATCH; i++) labels[i] = (i * 7 + 3) % OUT;
}

typedef enum { MODE_EAGER, MODE_LAZY, MODE_GRAPH } mode;

/* One replica's model: two dense layers and their optimizer. */
typedef struct replica_model {
    eg_tensor *vars[4];
    eg_optimizer *optimizer;
    eg_function *function;
    const eg_replica_context *context; /* of the call being traced */
    int64_t local_examples;
} replica_model;

typedef struct run {
    eg_strategy *strategy;
    replica_model models[MAX_REPLICAS];
    mode mode;
    int steps;
    uint64_t seed_of_replica[MAX_REPLICAS]; /* the initial values' seeds */
    int shape_of_replica_1;                 /* hidden units of replica 1 (mismatch test) */
    bool fail_replica_1;                    /* replica 1's step fails before summing */
    bool silent_replica_1;                  /* replica 1 skips the sums */
    float weights[4][HIDDEN * IN * 2];      /* replica 0's variables at the end */
} run;

static eg_tensor *initial(int n_dims, const int64_t *shape, uint64_t seed) {
    eg_generator *g = eg_generator_new(seed);
    eg_tensor *t = eg_random_uniform(g, EG_DTYPE_F32, n_dims, shape, -0.5, 0.5);
    eg_generator_free(g);
    return t;
}

static eg_status build_model(const eg_replica_context *c, void *user) {
    run *r = user;
    replica_model *m = &r->models[c->local_index];
    int64_t hidden = c->replica_id == 1 && r->shape_of_replica_1 ? r->shape_of_replica_1 : HIDDEN;
    uint64_t seed = r->seed_of_replica[c->local_index];
    const int64_t shapes[4][2] = {{IN, hidden}, {hidden, 0}, {hidden, OUT}, {OUT, 0}};
    const char *names[4] = {"dense/kernel", "dense/bias", "dense_1/kernel", "dense_1/bias"};
    eg_scope_begin();
    for (int v = 0; v < 4; v++)
        m->vars[v] =
            eg_variable(initial(shapes[v][1] ? 2 : 1, shapes[v], seed + (uint64_t)v), names[v]);
    eg_scope_end();
    eg_sgd_options options = {.learning_rate = eg_schedule_constant(0.1)};
    m->optimizer = eg_sgd_new(&options);
    return eg_last_status();
}

/* The step on this replica's share of the batch (in[0] x, in[1] labels). */
static eg_status step_body(replica_model *m, eg_tensor *const *in, eg_tensor **out) {
    const eg_replica_context *c = m->context;
    eg_tape *tape = eg_tape_begin(false);
    eg_tensor *h = eg_dense(in[0], m->vars[0], m->vars[1], EG_ACTIVATION_RELU);
    eg_tensor *logits = eg_dense(h, m->vars[2], m->vars[3], EG_ACTIVATION_NONE);
    eg_tensor *loss =
        eg_loss_sparse_categorical_crossentropy(in[1], logits, true, EG_REDUCTION_MEAN);
    /* the global batch's mean: this replica's mean weighted by its share */
    eg_tensor *share = eg_mul_scalar(loss, (double)m->local_examples / BATCH);
    eg_tensor *grads[4];
    eg_status status =
        share ? eg_replica_gradient(c, tape, share, 4, m->vars, grads) : eg_last_status();
    eg_tape_free(tape);
    if (status == EG_OK) status = eg_optimizer_apply_gradients(m->optimizer, 4, grads, m->vars);
    out[0] = share;
    return status;
}

static eg_status traced_step(eg_tensor *const *in, eg_tensor **out, void *user) {
    return step_body(user, in, out);
}

static eg_status train(const eg_replica_context *c, void *user) {
    run *r = user;
    replica_model *m = &r->models[c->local_index];
    m->context = c;
    if (c->replica_id == 1 && r->fail_replica_1)
        return eg_mul(NULL, NULL) ? EG_OK : EG_ERR_INVALID_ARGUMENT;
    int64_t start, count;
    eg_strategy_split_batch(c->strategy, BATCH, c->replica_id, &start, &count);
    m->local_examples = count;
    eg_status status = EG_OK;
    for (int s = 0; s < r->steps && status == EG_OK; s++) {
        if (c->replica_id == 1 && r->silent_replica_1) break;
        eg_scope_begin();
        int64_t x_shape[2] = {count, IN};
        eg_tensor *in[2] = {eg_tensor_from_data(inputs + start * IN, EG_DTYPE_F32, 2, x_shape),
                            eg_tensor_from_data(labels + start, EG_DTYPE_I64, 1, &count)};
        eg_tensor *out[1] = {NULL};
        if (r->mode == MODE_GRAPH) {
            if (!m->function) m->function = eg_function_new("step", traced_step, 2, 1, m);
            status = eg_function_call(m->function, in, out);
        } else if (r->mode == MODE_LAZY) {
            eg_lazy_begin();
            status = step_body(m, in, out);
            eg_status ended = eg_lazy_end();
            if (status == EG_OK) status = ended;
        } else {
            status = step_body(m, in, out);
        }
        eg_scope_end();
    }
    if (status == EG_OK && c->replica_id == 0)
        for (int v = 0; v < 4; v++)
            status = eg_tensor_copy_to_host(m->vars[v], r->weights[v],
                                            sizeof(float) * (size_t)eg_tensor_n_elems(m->vars[v]));
    return status;
}

static void free_models(run *r) {
    for (int i = 0; i < MAX_REPLICAS; i++) {
        for (int v = 0; v < 4; v++) eg_release(r->models[i].vars[v]);
        eg_optimizer_free(r->models[i].optimizer);
        eg_function_free(r->models[i].function);
        memset(&r->models[i], 0, sizeof r->models[i]);
    }
}

/* Trains `steps` steps with `replicas` mirrored replicas (0: the default strategy). */
static eg_status train_with(run *r, int replicas, const eg_strategy_options *options) {
    if (replicas == 0) {
        r->strategy = eg_strategy_default_new();
    } else {
        const eg_device *devices[MAX_REPLICAS];
        for (int i = 0; i < replicas; i++) devices[i] = eg_device_at(i);
        r->strategy = eg_strategy_mirrored_new(replicas, devices, options);
    }
    assert_non_null(r->strategy);
    for (int i = 0; i < MAX_REPLICAS; i++)
        if (!r->seed_of_replica[i]) r->seed_of_replica[i] = 7;
    eg_status status = eg_strategy_run(r->strategy, build_model, r);
    if (status == EG_OK) status = eg_strategy_run(r->strategy, train, r);
    free_models(r);
    eg_strategy_free(r->strategy);
    r->strategy = NULL;
    return status;
}

static const int64_t sizes[4] = {IN * HIDDEN, HIDDEN, HIDDEN *OUT, OUT};

static double relative_difference(const run *a, const run *b) {
    double worst = 0;
    for (int v = 0; v < 4; v++) {
        double diff = 0, norm = 0;
        for (int64_t k = 0; k < sizes[v]; k++) {
            diff = fmax(diff, fabs((double)a->weights[v][k] - b->weights[v][k]));
            norm = fmax(norm, fabs((double)b->weights[v][k]));
        }
        worst = fmax(worst, diff / norm);
    }
    return worst;
}

static bool same_bits(const run *a, const run *b) {
    for (int v = 0; v < 4; v++)
        if (memcmp(a->weights[v], b->weights[v], sizeof(float) * (size_t)sizes[v])) return false;
    return true;
}

/* ---- cases ---- */

typedef struct sum_job {
    float got[MAX_REPLICAS][5];
} sum_job;

/* Values whose float sum depends on the order of the additions. */
static const float parts[MAX_REPLICAS][5] = {{1e8f, 1.0f, 0.1f, -3.0f, 16777216.0f},
                                             {1.0f, 1e8f, 0.2f, 5.0f, 1.0f},
                                             {-1e8f, -1e8f, 0.3f, 7.0f, 1.0f},
                                             {1.0f, 1.0f, 1e-8f, -9.0f, 1.0f}};

static eg_status sum_in_replica(const eg_replica_context *c, void *user) {
    sum_job *job = user;
    int64_t n = 5;
    eg_tensor *x = eg_tensor_from_data(parts[c->replica_id], EG_DTYPE_F32, 1, &n);
    eg_tensor *y = eg_all_reduce(x);
    eg_status status = y ? eg_tensor_copy_to_host(y, job->got[c->replica_id], sizeof job->got[0])
                         : eg_last_status();
    eg_release(x);
    eg_release(y);
    return status;
}

static void test_all_reduce_sums_in_replica_order(void **state) {
    (void)state;
    for (int replicas = 2; replicas <= 4; replicas++) {
        eg_strategy *s = eg_strategy_mirrored_new(replicas, NULL, NULL);
        if (replicas == 4) {
            eg_strategy_free(s); /* every visible cpu device: the 4 configured */
            s = eg_strategy_mirrored_new(0, NULL, NULL);
            assert_int_equal(eg_strategy_num_replicas(s), 4);
        }
        assert_non_null(s);
        sum_job job;
        memset(&job, 0, sizeof job);
        assert_int_equal(eg_strategy_run(s, sum_in_replica, &job), EG_OK);
        for (int k = 0; k < 5; k++) {
            float expected = parts[0][k];
            for (int r = 1; r < replicas; r++) expected += parts[r][k];
            for (int r = 0; r < replicas; r++) assert_memory_equal(&job.got[r][k], &expected, 4);
        }
        /* one reduction of 5 floats per replica; the local group sums in the waits, so all of
         * each one's time in flight was waited for */
        eg_strategy_stats stats;
        assert_int_equal(eg_strategy_stats_get(s, &stats, true), EG_OK);
        assert_int_equal(stats.all_reduces, replicas);
        assert_int_equal(stats.bytes, replicas * 5 * 4);
        assert_true(stats.in_flight_seconds > 0);
        assert_true(stats.exposed_seconds == stats.in_flight_seconds);
        assert_int_equal(eg_strategy_stats_get(s, &stats, false), EG_OK);
        assert_true(stats.all_reduces == 0 && stats.bytes == 0 && stats.in_flight_seconds == 0);
        eg_strategy_free(s);
    }
    eg_strategy *alone = eg_strategy_default_new();
    eg_strategy_stats stats = {.all_reduces = -1};
    assert_int_equal(eg_strategy_stats_get(alone, &stats, false), EG_OK);
    assert_true(stats.all_reduces == 0 && stats.exposed_seconds == 0);
    assert_int_equal(eg_strategy_stats_get(alone, NULL, false), EG_ERR_NULL_ARGUMENT);
    eg_clear_error();
    eg_strategy_free(alone);
}

static void test_all_reduce_alone_is_the_tensor(void **state) {
    (void)state;
    int64_t n = 3;
    const float values[3] = {1, 2, 3};
    eg_tensor *x = eg_variable(eg_tensor_from_data(values, EG_DTYPE_F32, 1, &n), "x");
    eg_tape *tape = eg_tape_begin(false);
    eg_tensor *y = eg_sum(eg_mul(eg_all_reduce(x), x), 0, NULL, false);
    eg_tensor *g = NULL;
    assert_int_equal(eg_tape_gradient(tape, y, 1, &x, &g, EG_UNCONNECTED_NULL), EG_OK);
    eg_tape_free(tape);
    float got[3];
    assert_int_equal(eg_tensor_copy_to_host(g, got, sizeof got), EG_OK);
    for (int i = 0; i < 3; i++) assert_float_equal(got[i], 2 * values[i], 0);
    eg_release(x);
}

/* d/dx of sum over replicas r of <w_r, all_reduce(x)>: every replica gets sum_r w_r. */
static eg_status gradient_in_replica(const eg_replica_context *c, void *user) {
    sum_job *job = user;
    int64_t n = 5;
    eg_tensor *x = eg_variable(eg_tensor_from_data(parts[0], EG_DTYPE_F32, 1, &n), "x");
    eg_tensor *w = eg_tensor_from_data(parts[c->replica_id], EG_DTYPE_F32, 1, &n);
    eg_tape *tape = eg_tape_begin(false);
    eg_tensor *y = eg_sum(eg_mul(eg_all_reduce(x), w), 0, NULL, false);
    eg_tensor *g = NULL;
    eg_status status = eg_tape_gradient(tape, y, 1, &x, &g, EG_UNCONNECTED_NULL);
    eg_tape_free(tape);
    if (status == EG_OK)
        status = eg_tensor_copy_to_host(g, job->got[c->replica_id], sizeof job->got[0]);
    eg_release(g);
    eg_release(w);
    eg_release(y);
    eg_release(x);
    return status;
}

static void test_all_reduce_gradient_sums_the_replicas(void **state) {
    (void)state;
    eg_strategy *s = eg_strategy_mirrored_new(3, NULL, NULL);
    assert_non_null(s);
    sum_job job;
    memset(&job, 0, sizeof job);
    assert_int_equal(eg_strategy_run(s, gradient_in_replica, &job), EG_OK);
    for (int k = 0; k < 5; k++) {
        float expected = (parts[0][k] + parts[1][k]) + parts[2][k];
        for (int r = 0; r < 3; r++) assert_memory_equal(&job.got[r][k], &expected, 4);
    }
    eg_strategy_free(s);
}

static void test_replicas_match_one_replica_on_the_global_batch(void **state) {
    (void)state;
    static run one, two, three;
    memset(&one, 0, sizeof one);
    memset(&two, 0, sizeof two);
    memset(&three, 0, sizeof three);
    one.steps = two.steps = three.steps = 5;
    assert_int_equal(train_with(&one, 0, NULL), EG_OK);
    assert_int_equal(train_with(&two, 2, NULL), EG_OK);
    assert_int_equal(train_with(&three, 3, NULL), EG_OK);
    double d2 = relative_difference(&two, &one), d3 = relative_difference(&three, &one);
    print_message("replicas vs one: 2 -> %.3g, 3 -> %.3g relative\n", d2, d3);
    assert_true(d2 <= 1e-6);
    assert_true(d3 <= 1e-6);
    /* and the weights did move */
    static run untrained;
    memset(&untrained, 0, sizeof untrained);
    assert_int_equal(train_with(&untrained, 0, NULL), EG_OK);
    assert_true(relative_difference(&untrained, &one) > 1e-3);
}

static void test_bucket_size_and_mode_change_no_bit(void **state) {
    (void)state;
    static run reference, other;
    memset(&reference, 0, sizeof reference);
    reference.steps = 4;
    /* one bucket for everything */
    eg_strategy_options big = {.bucket_bytes = 1 << 30, .first_bucket_bytes = 1 << 30};
    assert_int_equal(train_with(&reference, 2, &big), EG_OK);
    const eg_strategy_options tiny = {.bucket_bytes = 4, .first_bucket_bytes = 4};
    const eg_strategy_options mixed = {.bucket_bytes = 300, .first_bucket_bytes = 20};
    const eg_strategy_options *choices[3] = {NULL, &tiny, &mixed};
    for (int m = MODE_EAGER; m <= MODE_GRAPH; m++)
        for (int o = 0; o < 3; o++) {
            memset(&other, 0, sizeof other);
            other.steps = 4;
            other.mode = (mode)m;
            assert_int_equal(train_with(&other, 2, choices[o]), EG_OK);
            if (!same_bits(&reference, &other))
                fail_msg("mode %d, bucket choice %d: weights differ (%.3g relative)", m, o,
                         relative_difference(&other, &reference));
        }
}

static eg_status broadcast_then_read(const eg_replica_context *c, void *user) {
    run *r = user;
    replica_model *m = &r->models[c->local_index];
    eg_status status = eg_replica_broadcast_variables(c, 4, m->vars);
    if (status == EG_OK && c->replica_id == 1)
        for (int v = 0; v < 4; v++)
            status =
                eg_tensor_copy_to_host(m->vars[v], r->weights[v], sizeof(float) * (size_t)sizes[v]);
    return status;
}

static void test_broadcast_gives_replica_0s_values(void **state) {
    (void)state;
    static run r, zero;
    memset(&r, 0, sizeof r);
    memset(&zero, 0, sizeof zero);
    r.seed_of_replica[0] = 7;
    r.seed_of_replica[1] = 99;
    r.strategy = eg_strategy_mirrored_new(2, NULL, NULL);
    assert_int_equal(eg_strategy_run(r.strategy, build_model, &r), EG_OK);
    assert_int_equal(eg_strategy_run(r.strategy, broadcast_then_read, &r), EG_OK);
    free_models(&r);
    eg_strategy_free(r.strategy);
    /* replica 0's untrained values, from a run of no steps */
    assert_int_equal(train_with(&zero, 0, NULL), EG_OK);
    assert_true(same_bits(&r, &zero));
}

static void test_different_models_fail_naming_the_variable(void **state) {
    (void)state;
    static run r;
    memset(&r, 0, sizeof r);
    r.steps = 1;
    r.shape_of_replica_1 = HIDDEN + 1;
    assert_int_equal(train_with(&r, 2, NULL), EG_ERR_SHAPE);
    expect_error_containing(EG_ERR_SHAPE, "replica_gradient", "variable 0", "replica 0 has",
                            "'dense/kernel' f32 (8, 16)", "replica 1 has", "(8, 17)", NULL);
}

static void test_failing_replica_is_named(void **state) {
    (void)state;
    static run r;
    memset(&r, 0, sizeof r);
    r.steps = 2;
    r.fail_replica_1 = true;
    assert_int_not_equal(train_with(&r, 2, NULL), EG_OK);
    expect_error_containing(EG_ERR_INVALID_ARGUMENT, "replica 1: ", "mul", NULL);
}

static void test_silent_replica_times_out_with_its_name(void **state) {
    (void)state;
    static run r;
    memset(&r, 0, sizeof r);
    r.steps = 2;
    r.silent_replica_1 = true;
    eg_strategy_options quick = {.timeout_seconds = 0.3};
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    assert_int_equal(train_with(&r, 2, &quick), EG_ERR_STATE);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double seconds = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    assert_true(seconds < 5.0);
    expect_error_containing(EG_ERR_STATE, "replica 0: ", "replica 1 did not join within 0.3 s",
                            NULL);
}

typedef struct host_job {
    double sums[MAX_REPLICAS][2];
    float averaged[MAX_REPLICAS];
} host_job;

static eg_status host_values(const eg_replica_context *c, void *user) {
    host_job *job = user;
    double values[2] = {c->replica_id + 0.5, 10.0 * c->replica_id};
    eg_status status = eg_replica_sum(c, 2, values);
    memcpy(job->sums[c->replica_id], values, sizeof values);
    if (status == EG_OK) status = eg_replica_barrier(c);
    int64_t one = 1;
    float mine = (float)c->replica_id;
    eg_tensor *v = eg_variable(eg_tensor_from_data(&mine, EG_DTYPE_F32, 1, &one), "moving_mean");
    if (status == EG_OK) status = eg_replica_average_variables(c, 1, &v);
    if (status == EG_OK)
        status = eg_tensor_copy_to_host(v, &job->averaged[c->replica_id], sizeof(float));
    eg_release(v);
    return status;
}

static void test_host_sums_barrier_and_average(void **state) {
    (void)state;
    eg_strategy *s = eg_strategy_mirrored_new(3, NULL, NULL);
    host_job job;
    memset(&job, 0, sizeof job);
    assert_int_equal(eg_strategy_run(s, host_values, &job), EG_OK);
    for (int r = 0; r < 3; r++) {
        assert_float_equal(job.sums[r][0], 0.5 + 1.5 + 2.5, 0);
        assert_float_equal(job.sums[r][1], 30.0, 0);
        assert_float_equal(job.averaged[r], 1.0f, 1e-7);
    }
    eg_strategy_free(s);
}

static void test_strategy_queries_and_bad_arguments(void **state) {
    (void)state;
    eg_strategy *d = eg_strategy_default_new();
    assert_string_equal(eg_strategy_name(d), "default");
    assert_int_equal(eg_strategy_num_replicas(d), 1);
    assert_true(eg_strategy_is_chief(d));
    eg_strategy_free(d);
    const eg_device *twice[2] = {eg_device_at(1), eg_device_at(1)};
    assert_null(eg_strategy_mirrored_new(2, twice, NULL));
    expect_error_containing(EG_ERR_INVALID_ARGUMENT, "cpu:1 is given twice", NULL);
    eg_strategy *m = eg_strategy_mirrored_new(3, NULL, NULL);
    assert_string_equal(eg_strategy_name(m), "mirrored");
    assert_int_equal(eg_strategy_num_local_replicas(m), 3);
    assert_ptr_equal(eg_strategy_device(m, 2), eg_device_at(2));
    int64_t start, count;
    eg_strategy_split_batch(m, 10, 0, &start, &count);
    assert_true(start == 0 && count == 4);
    eg_strategy_split_batch(m, 10, 2, &start, &count);
    assert_true(start == 7 && count == 3);
    eg_strategy_free(m);
    assert_int_equal(eg_strategy_run(NULL, host_values, NULL), EG_ERR_NULL_ARGUMENT);
    eg_clear_error();
    assert_non_null(strstr(eg_distribute_info(), "mirrored"));
}

int main(void) {
    if (eg_device_configure_cpus(4) != EG_OK) return 1;
    make_data();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_all_reduce_sums_in_replica_order, fresh_scope_setup,
                                        strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_all_reduce_alone_is_the_tensor, fresh_scope_setup,
                                        strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_all_reduce_gradient_sums_the_replicas,
                                        fresh_scope_setup, strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_replicas_match_one_replica_on_the_global_batch,
                                        fresh_scope_setup, strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_bucket_size_and_mode_change_no_bit, fresh_scope_setup,
                                        strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_broadcast_gives_replica_0s_values, fresh_scope_setup,
                                        strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_different_models_fail_naming_the_variable,
                                        fresh_scope_setup, strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_failing_replica_is_named, fresh_scope_setup,
                                        strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_silent_replica_times_out_with_its_name,
                                        fresh_scope_setup, strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_host_sums_barrier_and_average, fresh_scope_setup,
                                        strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_strategy_queries_and_bad_arguments, fresh_scope_setup,
                                        strict_scope_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
