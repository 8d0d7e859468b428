/* eg_dataset_shard: the elements each shard keeps (against i % num_shards == index), the
 * data-parallel recipe (the same seed on every rank, shard after the source or after the shuffle,
 * two reshuffled epochs: together the shards hold every example exactly once per epoch), sharding
 * batches, the argument and NULL rules with their messages, errors of skipped elements, a parallel
 * map (AUTOTUNE) below and above the shard (the order stays deterministic; above it, only the
 * shard's elements are mapped), and num_shards 1 as the identity. It runs parallel maps: also
 * under ThreadSanitizer. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "eagle.h"

#include "data_test_util.h"
#include "test_util.h"

#define MAX_VALUES 4096

/* ---- which elements each shard keeps ---- */

static void test_shards_of_a_range(void **state) {
    (void)state;
    static const double expected[4][3] = {{0, 4, 8}, {1, 5, 9}, {2, 6}, {3, 7}};
    static const int64_t counts[4] = {3, 3, 2, 2};
    double values[MAX_VALUES];
    int64_t n;
    for (int64_t index = 0; index < 4; index++) {
        eg_dataset *ds = eg_dataset_shard(eg_dataset_range(0, 10, 1), 4, index);
        assert_non_null(ds);
        for (int pass = 0; pass < 2; pass++) { /* every pass is the same share */
            assert_int_equal(collect(ds, values, MAX_VALUES, &n), counts[index]);
            assert_values(values, n, expected[index], counts[index]);
        }
        eg_dataset_free(ds);
    }

    /* The end stays the end; a shard with nothing in it (more shards than elements) ends at once.
     */
    eg_dataset *ds = eg_dataset_shard(eg_dataset_range(0, 3, 1), 5, 4);
    eg_dataset_iterator *it = eg_dataset_iterator_new(ds);
    expect_end(it);
    expect_end(it);
    eg_dataset_iterator_free(it);
    eg_dataset_free(ds);

    /* Against the definition for many (count, num_shards, index). */
    for (int64_t count = 0; count <= 13; count++)
        for (int64_t shards = 1; shards <= 6; shards++)
            for (int64_t index = 0; index < shards; index++) {
                ds = eg_dataset_shard(eg_dataset_range(0, count, 1), shards, index);
                double want[16];
                int64_t n_want = 0;
                for (int64_t i = 0; i < count; i++)
                    if (i % shards == index) want[n_want++] = (double)i;
                assert_int_equal(collect(ds, values, MAX_VALUES, &n), n_want);
                assert_values(values, n, want, n_want);
                eg_dataset_free(ds);
            }
}

/* The stage shows in the statistics under its arguments. */
static void test_stage_name(void **state) {
    (void)state;
    eg_dataset *ds = eg_dataset_shard(eg_dataset_range(0, 10, 1), 4, 1);
    eg_dataset_iterator *it = eg_dataset_iterator_new(ds);
    eg_element e = next_element(it);
    assert_true(eg_item(e.tensors[0]) == 1.0);
    eg_dataset_stage_stats stats[4];
    assert_int_equal(eg_dataset_stats(it, stats, 4), 2);
    assert_string_equal(stats[0].name, "shard(4, 1)");
    assert_int_equal(stats[0].elements, 1);
    assert_int_equal(stats[1].elements, 2); /* element 0 pulled and dropped, then 1 */
    eg_dataset_iterator_free(it);
    eg_dataset_free(ds);
}

/* ---- the data-parallel recipe ---- */

enum { PLACE_AFTER_SHUFFLE, PLACE_AFTER_SOURCE };

/* What rank `rank` of `ranks` builds: the same seed everywhere, two epochs. */
static eg_dataset *rank_pipeline(int64_t n_examples, int64_t ranks, int64_t rank, int place) {
    eg_dataset *ds = eg_dataset_range(0, n_examples, 1);
    if (place == PLACE_AFTER_SOURCE) ds = eg_dataset_shard(ds, ranks, rank);
    ds = eg_dataset_shuffle(ds, n_examples, 2024, true);
    if (place == PLACE_AFTER_SHUFFLE) ds = eg_dataset_shard(ds, ranks, rank);
    return eg_dataset_repeat(ds, 2);
}

static void check_epochs_covered(int place) {
    enum { N = 103, RANKS = 4 }; /* 103 = 4 * 25 + 3: shares of 26, 26, 26 and 25 */
    static double values[RANKS][2 * N];
    int64_t counts[RANKS];
    for (int64_t rank = 0; rank < RANKS; rank++) {
        eg_dataset *ds = rank_pipeline(N, RANKS, rank, place);
        int64_t n;
        counts[rank] = collect(ds, values[rank], 2 * N, &n);
        assert_int_equal(n, counts[rank]);
        assert_int_equal(counts[rank], 2 * (N / RANKS + (rank < N % RANKS)));
        eg_dataset_free(ds);
    }
    int first_epoch[N];
    for (int epoch = 0; epoch < 2; epoch++) {
        int seen[N] = {0};
        for (int64_t rank = 0; rank < RANKS; rank++) {
            int64_t share = counts[rank] / 2;
            for (int64_t j = 0; j < share; j++) {
                double v = values[rank][epoch * share + j];
                assert_true(v >= 0 && v < N && v == (double)(int)v);
                int example = (int)v;
                if (seen[example]++)
                    fail_msg("epoch %d: example %d seen twice (again by rank %lld)", epoch, example,
                             (long long)rank);
                if (epoch == 0) first_epoch[example] = (int)rank;
            }
        }
        for (int example = 0; example < N; example++)
            if (seen[example] != 1) fail_msg("epoch %d: example %d not seen", epoch, example);
    }
    /* Shuffled, and reshuffled: rank 0's order is neither sorted nor that of the first epoch. */
    int64_t share = counts[0] / 2;
    bool sorted = true, same = true;
    for (int64_t j = 0; j < share; j++) {
        if (j > 0 && values[0][j] < values[0][j - 1]) sorted = false;
        if (values[0][j] != values[0][share + j]) same = false;
    }
    assert_false(sorted);
    assert_false(same);
    /* Sharded after the shuffle, examples move between ranks from epoch to epoch; after the
     * source, each rank keeps its examples. */
    int moved = 0;
    for (int64_t rank = 0; rank < RANKS; rank++)
        for (int64_t j = 0; j < counts[rank] / 2; j++)
            if (first_epoch[(int)values[rank][counts[rank] / 2 + j]] != (int)rank) moved++;
    if (place == PLACE_AFTER_SHUFFLE)
        assert_true(moved > 0);
    else
        assert_int_equal(moved, 0);
}

static void test_union_of_shards_after_shuffle(void **state) {
    (void)state;
    check_epochs_covered(PLACE_AFTER_SHUFFLE);
}

static void test_union_of_shards_after_source(void **state) {
    (void)state;
    check_epochs_covered(PLACE_AFTER_SOURCE);
}

/* Interleaving the shards in turn gives back the unsharded shuffled pass, element for element. */
static void test_shards_interleave_to_the_whole(void **state) {
    (void)state;
    enum { N = 50, RANKS = 3 };
    double whole[2 * N], shards[RANKS][2 * N];
    int64_t n, counts[RANKS];
    eg_dataset *ds =
        eg_dataset_repeat(eg_dataset_shuffle(eg_dataset_range(0, N, 1), 16, 7, true), 2);
    assert_int_equal(collect(ds, whole, 2 * N, &n), 2 * N);
    eg_dataset_free(ds);
    for (int64_t rank = 0; rank < RANKS; rank++) {
        ds = eg_dataset_repeat(
            eg_dataset_shard(eg_dataset_shuffle(eg_dataset_range(0, N, 1), 16, 7, true), RANKS,
                             rank),
            2);
        counts[rank] = collect(ds, shards[rank], 2 * N, &n);
        eg_dataset_free(ds);
    }
    for (int epoch = 0; epoch < 2; epoch++)
        for (int64_t i = 0; i < N; i++) {
            int64_t rank = i % RANKS, share = counts[rank] / 2;
            double got = shards[rank][epoch * share + i / RANKS];
            if (got != whole[epoch * N + i])
                fail_msg("epoch %d, element %lld: rank %lld has %g, the whole pass %g", epoch,
                         (long long)i, (long long)rank, got, whole[epoch * N + i]);
        }
}

/* ---- sharding batches ---- */

static void test_shard_after_batch(void **state) {
    (void)state;
    double values[MAX_VALUES];
    int64_t n;
    /* Batches [0 1 2] [3 4 5] [6 7 8] [9]: shard 1 of 2 keeps the second and the fourth. */
    eg_dataset *ds = eg_dataset_shard(eg_dataset_batch(eg_dataset_range(0, 10, 1), 3, false), 2, 1);
    eg_dataset_iterator *it = eg_dataset_iterator_new(ds);
    eg_element e = next_element(it);
    assert_int_equal(eg_tensor_n_dims(e.tensors[0]), 1);
    assert_int_equal(eg_tensor_shape(e.tensors[0])[0], 3);
    e = next_element(it);
    assert_int_equal(eg_tensor_shape(e.tensors[0])[0], 1);
    expect_end(it);
    eg_dataset_iterator_free(it);
    assert_int_equal(collect(ds, values, MAX_VALUES, &n), 2);
    assert_values(values, n, (double[]){3, 4, 5, 9}, 4);
    eg_dataset_free(ds);

    /* Shard 0 of 2 with drop_remainder: the first and the third. */
    ds = eg_dataset_shard(eg_dataset_batch(eg_dataset_range(0, 10, 1), 3, true), 2, 0);
    assert_int_equal(collect(ds, values, MAX_VALUES, &n), 2);
    assert_values(values, n, (double[]){0, 1, 2, 6, 7, 8}, 6);
    eg_dataset_free(ds);
}

/* ---- arguments and errors ---- */

static void test_bad_arguments(void **state) {
    (void)state;
    assert_null(eg_dataset_shard(eg_dataset_range(0, 10, 1), 0, 0));
    expect_error_containing(EG_ERR_INVALID_ARGUMENT, "dataset_shard: num_shards is 0 (index 0)",
                            "1 or more", NULL);
    assert_null(eg_dataset_shard(eg_dataset_range(0, 10, 1), -3, 1));
    expect_error_containing(EG_ERR_INVALID_ARGUMENT, "num_shards is -3 (index 1)", NULL);
    assert_null(eg_dataset_shard(eg_dataset_range(0, 10, 1), 4, 4));
    expect_error_containing(EG_ERR_INVALID_ARGUMENT,
                            "dataset_shard: index is 4; it must be in [0, 4) for num_shards 4",
                            NULL);
    assert_null(eg_dataset_shard(eg_dataset_range(0, 10, 1), 4, -1));
    expect_error_containing(EG_ERR_INVALID_ARGUMENT, "index is -1; it must be in [0, 4)", NULL);
    /* The caller's file:line, as for every fallible public function. */
    assert_null(eg_dataset_shard(eg_dataset_range(0, 10, 1), 2, 7));
    expect_error_containing(EG_ERR_INVALID_ARGUMENT, "test_data_shard.c:", NULL);

    /* NULL passes on without an error of its own, whatever the arguments... */
    assert_null(eg_dataset_shard(NULL, 4, 0));
    assert_int_equal(eg_last_status(), EG_OK);
    assert_null(eg_dataset_shard(NULL, 0, 9));
    assert_int_equal(eg_last_status(), EG_OK);
    /* ...so that a chain keeps its first failure's message. */
    assert_null(eg_dataset_shard(eg_dataset_range(0, 10, 0), 0, 0));
    expect_error_containing(EG_ERR_INVALID_ARGUMENT, "dataset_range: step is 0", NULL);
    /* The transformations above a failed shard pass its NULL on too. */
    assert_null(eg_dataset_batch(eg_dataset_shard(eg_dataset_range(0, 10, 1), 2, 2), 4, false));
    expect_error_containing(EG_ERR_INVALID_ARGUMENT, "dataset_shard: index is 2", NULL);
}

/* Fails on element 5 of its input. */
static eg_status fail_at_five(const eg_element *in, eg_element *out,
                              const eg_dataset_call_info *info, void *context) {
    (void)context;
    if (info->index == 5) {
        eg_tensor *a = eg_zeros(EG_DTYPE_F32, 1, (int64_t[]){2});
        eg_tensor *b = eg_zeros(EG_DTYPE_F32, 1, (int64_t[]){3});
        return eg_add(a, b) ? EG_OK : eg_last_status();
    }
    out->n_tensors = 1;
    out->tensors[0] = in->tensors[0];
    return EG_OK;
}

/* An error in an element the shard skips still ends the pass: the shard pulled it. */
static void test_error_in_a_skipped_element(void **state) {
    (void)state;
    eg_dataset *ds = eg_dataset_shard(
        eg_dataset_map(eg_dataset_range(0, 10, 1), fail_at_five, NULL, 0, true), 2, 0);
    eg_dataset_iterator *it = eg_dataset_iterator_new(ds);
    for (int k = 0; k < 3; k++) { /* 0, 2, 4 */
        eg_element e = next_element(it);
        assert_true(eg_item(e.tensors[0]) == 2.0 * k);
    }
    eg_element e;
    bool end = false;
    assert_int_equal(eg_dataset_iterator_next(it, &e, &end), EG_ERR_SHAPE);
    expect_error_containing(EG_ERR_SHAPE, "map: element 5:", NULL);
    /* Later calls fail the same way. */
    assert_int_equal(eg_dataset_iterator_next(it, &e, &end), EG_ERR_SHAPE);
    expect_error_containing(EG_ERR_SHAPE, "map: element 5:", NULL);
    eg_dataset_iterator_free(it);
    eg_dataset_free(ds);
}

/* ---- with a parallel map ---- */

static atomic_int map_calls;

/* (i) -> (f32 (3,) of i * 3 + k, i), counting the calls. */
static eg_status expand(const eg_element *in, eg_element *out, const eg_dataset_call_info *info,
                        void *context) {
    (void)info;
    (void)context;
    atomic_fetch_add(&map_calls, 1);
    double i = eg_item(in->tensors[0]);
    out->n_tensors = 2;
    out->tensors[0] = eg_arange(i * 3, i * 3 + 3, 1, EG_DTYPE_F32);
    out->tensors[1] = in->tensors[0];
    return out->tensors[0] ? EG_OK : eg_last_status();
}

static void expect_expanded(eg_dataset *ds, const int64_t *inputs, int64_t n_inputs) {
    double values[MAX_VALUES];
    int64_t n;
    assert_int_equal(collect(ds, values, MAX_VALUES, &n), n_inputs);
    assert_int_equal(n, 3 * n_inputs);
    for (int64_t j = 0; j < n_inputs; j++)
        for (int k = 0; k < 3; k++)
            if (values[3 * j + k] != (double)(inputs[j] * 3 + k))
                fail_msg("element %lld, value %d: %g, expected %g", (long long)j, k,
                         values[3 * j + k], (double)(inputs[j] * 3 + k));
}

static void test_with_parallel_map(void **state) {
    (void)state;
    enum { N = 400, SHARDS = 3, INDEX = 1 };
    int64_t inputs[N];
    int64_t n_inputs = 0;
    for (int64_t i = INDEX; i < N; i += SHARDS) inputs[n_inputs++] = i;

    /* Below the shard: every element is mapped, and the shard still picks by input position. */
    eg_dataset *ds = eg_dataset_shard(
        eg_dataset_map(eg_dataset_range(0, N, 1), expand, NULL, EG_AUTOTUNE, true), SHARDS, INDEX);
    for (int pass = 0; pass < 3; pass++) {
        atomic_store(&map_calls, 0);
        expect_expanded(ds, inputs, n_inputs);
        assert_true(atomic_load(&map_calls) >= N - SHARDS); /* the other shards' work too */
    }
    eg_dataset_free(ds);

    /* Above the shard: only the shard's elements are mapped. */
    ds = eg_dataset_prefetch(
        eg_dataset_map(eg_dataset_shard(eg_dataset_range(0, N, 1), SHARDS, INDEX), expand, NULL,
                       EG_AUTOTUNE, true),
        EG_AUTOTUNE);
    for (int pass = 0; pass < 3; pass++) {
        atomic_store(&map_calls, 0);
        expect_expanded(ds, inputs, n_inputs);
        assert_int_equal(atomic_load(&map_calls), n_inputs);
    }
    eg_dataset_free(ds);
}

/* ---- one shard ---- */

static void test_one_shard_is_the_identity(void **state) {
    (void)state;
    double whole[MAX_VALUES], one[MAX_VALUES];
    int64_t n_whole, n_one;
    eg_dataset *input = eg_dataset_range(0, 10, 1);
    eg_dataset *ds = eg_dataset_shard(input, 1, 0);
    assert_ptr_equal(ds, input); /* no stage at all */
    assert_int_equal(collect(ds, one, MAX_VALUES, &n_one), 10);
    for (int i = 0; i < 10; i++) whole[i] = i;
    assert_values(one, n_one, whole, 10);
    eg_dataset_free(ds);

    /* The same pass as without it, shuffled and repeated. */
    eg_dataset *plain = eg_dataset_repeat(
        eg_dataset_batch(eg_dataset_shuffle(eg_dataset_range(0, 37, 1), 37, 3, true), 5, false), 2);
    eg_dataset *sharded = eg_dataset_repeat(
        eg_dataset_batch(
            eg_dataset_shard(eg_dataset_shuffle(eg_dataset_range(0, 37, 1), 37, 3, true), 1, 0), 5,
            false),
        2);
    assert_int_equal(collect(plain, whole, MAX_VALUES, &n_whole),
                     collect(sharded, one, MAX_VALUES, &n_one));
    assert_values(one, n_one, whole, n_whole);
    assert_int_equal(n_whole, 74);
    eg_dataset_free(plain);
    eg_dataset_free(sharded);
}

int main(void) {
    const struct CMUnitTest tests[] = {
#define CASE(name) cmocka_unit_test_setup_teardown(name, case_setup, case_teardown)
        CASE(test_shards_of_a_range),
        CASE(test_stage_name),
        CASE(test_union_of_shards_after_shuffle),
        CASE(test_union_of_shards_after_source),
        CASE(test_shards_interleave_to_the_whole),
        CASE(test_shard_after_batch),
        CASE(test_bad_arguments),
        CASE(test_error_in_a_skipped_element),
        CASE(test_with_parallel_map),
        CASE(test_one_shard_is_the_identity),
#undef CASE
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
