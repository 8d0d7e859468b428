/* The multi-worker strategy through the public API, on every rank of an mpirun job
 * (tests/mpi/CMakeLists.txt):
 *   - input sharding: every rank builds the same shuffled pipeline and shards it by rank; in each
 *     epoch the ranks' shares are disjoint and together hold every example exactly once, and the
 *     examples move between ranks from one epoch to the next (the shuffle is of the whole set);
 *   - the all-reduce statistics count a rank's reductions and their bytes, with no more time
 *     waited for than in flight.
 * A failure on one rank makes the others time out rather than hang. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "eagle.h"
#include "test_util.h"

enum { EXAMPLES = 1003, EPOCHS = 2 };

static eg_strategy *strategy;

typedef struct share_job {
    /* per epoch: how often this rank saw each example, and the sum over the ranks */
    double seen[EPOCHS][EXAMPLES], everyone[EPOCHS][EXAMPLES];
    int64_t count[EPOCHS];
} share_job;

static eg_status read_shares(const eg_replica_context *c, void *user) {
    share_job *job = user;
    int ranks = c->num_replicas;
    eg_dataset *ds = eg_dataset_range(0, EXAMPLES, 1);
    ds = eg_dataset_shuffle(ds, EXAMPLES, 7, true);
    ds = eg_dataset_shard(ds, ranks, c->replica_id);
    ds = eg_dataset_repeat(ds, EPOCHS);
    eg_dataset_iterator *it = eg_dataset_iterator_new(ds);
    eg_dataset_free(ds);
    if (!it) return eg_last_status();
    /* rank r's share has EXAMPLES / ranks elements, one more for the first EXAMPLES % ranks */
    int64_t share = EXAMPLES / ranks + (c->replica_id < EXAMPLES % ranks ? 1 : 0);
    eg_status status = EG_OK;
    for (int64_t k = 0; status == EG_OK; k++) {
        eg_element e = {0};
        bool end = false;
        status = eg_dataset_iterator_next(it, &e, &end);
        if (status != EG_OK || end) break;
        int64_t example = (int64_t)eg_item(e.tensors[0]);
        int epoch = (int)(k / share);
        if (epoch < EPOCHS && example >= 0 && example < EXAMPLES) {
            job->seen[epoch][example] += 1;
            job->count[epoch]++;
        }
        eg_element_release(&e);
    }
    eg_dataset_iterator_free(it);
    for (int epoch = 0; epoch < EPOCHS && status == EG_OK; epoch++) {
        memcpy(job->everyone[epoch], job->seen[epoch], sizeof job->seen[epoch]);
        status = eg_replica_sum(c, EXAMPLES, job->everyone[epoch]);
    }
    return status;
}

static void test_shards_cover_every_example_once(void **state) {
    (void)state;
    static share_job job;
    memset(&job, 0, sizeof job);
    assert_int_equal(eg_strategy_run(strategy, read_shares, &job), EG_OK);
    int ranks = eg_strategy_num_replicas(strategy), rank = eg_strategy_worker(strategy);
    int64_t share = EXAMPLES / ranks + (rank < EXAMPLES % ranks ? 1 : 0);
    int64_t moved = 0;
    for (int epoch = 0; epoch < EPOCHS; epoch++) {
        assert_int_equal(job.count[epoch], share);
        for (int i = 0; i < EXAMPLES; i++) {
            assert_true(job.seen[epoch][i] == 0 || job.seen[epoch][i] == 1);
            assert_true(job.everyone[epoch][i] == 1); /* once, on exactly one rank */
            if (epoch > 0) moved += job.seen[epoch][i] != job.seen[epoch - 1][i];
        }
    }
    if (ranks > 1) assert_true(moved > 0);
}

typedef struct stats_job {
    eg_strategy_stats stats;
} stats_job;

static eg_status reduce_twice(const eg_replica_context *c, void *user) {
    stats_job *job = user;
    int64_t n = 1000;
    eg_tensor *x = eg_full(EG_DTYPE_F32, 1, &n, 1.0 + c->replica_id);
    eg_tensor *once = eg_all_reduce(x);
    int64_t tag = 0;
    eg_tensor *started = once ? eg_all_reduce_start(1, &once, &tag) : NULL;
    eg_tensor *twice = started ? eg_all_reduce_done(started, tag) : NULL;
    static float got[2][1000]; /* per local replica: one here */
    float *sums = got[c->local_index];
    eg_status status =
        twice ? eg_tensor_copy_to_host(twice, sums, sizeof got[0]) : eg_last_status();
    /* sum over r of (1 + r), then that sum times the ranks */
    float ranks = (float)c->num_replicas, expected = ranks * (ranks + 1) / 2 * ranks;
    for (int i = 0; status == EG_OK && i < 1000; i++)
        if (sums[i] != expected) {
            fprintf(stderr, "reduce_twice: element %d is %g, not %g\n", i, sums[i], expected);
            status = EG_ERR_INTERNAL;
        }
    if (status == EG_OK) status = eg_strategy_stats_get(c->strategy, &job->stats, true);
    eg_release(twice);
    eg_release(started);
    eg_release(once);
    eg_release(x);
    return status;
}

static void test_statistics_count_the_reductions(void **state) {
    (void)state;
    eg_strategy_stats cleared;
    assert_int_equal(eg_strategy_stats_get(strategy, &cleared, true), EG_OK);
    stats_job job;
    memset(&job, 0, sizeof job);
    eg_status status = eg_strategy_run(strategy, reduce_twice, &job);
    if (status != EG_OK) print_error("reduce_twice: %s\n", eg_last_error());
    assert_int_equal(status, EG_OK);
    assert_int_equal(job.stats.all_reduces, 2);
    assert_int_equal(job.stats.bytes, 2 * 1000 * 4);
    assert_true(job.stats.in_flight_seconds > 0);
    assert_true(job.stats.exposed_seconds >= 0);
    assert_true(job.stats.exposed_seconds <= job.stats.in_flight_seconds + 1e-6);
    eg_strategy_stats after;
    assert_int_equal(eg_strategy_stats_get(strategy, &after, false), EG_OK);
    assert_int_equal(after.all_reduces, 0); /* the replica's get reset them */
}

int main(void) {
    eg_strategy_options options = {.timeout_seconds = 20};
    strategy = eg_strategy_multi_worker_new(NULL, &options);
    if (!strategy) {
        fprintf(stderr, "test_mpi_strategy: %s\n", eg_last_error());
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shards_cover_every_example_once),
        cmocka_unit_test(test_statistics_count_the_reductions),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    eg_strategy_free(strategy);
    return failed;
}
