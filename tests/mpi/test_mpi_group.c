/* The MPI group (src/dist/mpi.c), run on every rank by mpirun (tests/mpi/CMakeLists.txt): sums
 * bit for bit in rank order at every size, jobs in flight in different orders on different
 * ranks, broadcast and all_gather, argument errors, no busy waiting, and no second MPI start.
 * Each rank makes its data from its rank, so every rank computes the expected sums itself.
 * `test_mpi_group PATTERN` runs only the cases matching the pattern (cmocka's test filter).
 * A failure on one rank makes the others time out (10 s) rather than hang. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include <cmocka.h>

#include "dist/internal.h"
#include "test_util.h"

static eg__mpi_group *group;
static void *member;
static int rank, size;
static int64_t next_tag = 1000;
static const eg__member_ops *ops = &eg__mpi_member_ops;

/* Mixed magnitudes: adding the same values in another order gives other bits (with 3+ ranks). */
static double value(int of_rank, int64_t i) {
    static const double magnitudes[] = {1e8, 1.0, -1e8, 3.0, 0.5, -7.25e7, 1e-3};
    double m = magnitudes[(uint64_t)(i * 3 + of_rank * 5) % 7];
    return m * (1.0 + (double)((i + of_rank) % 13) / 64.0);
}

static void fill(void *data, eg_dtype dtype, int of_rank, int64_t count) {
    for (int64_t i = 0; i < count; i++) {
        if (dtype == EG_DTYPE_F32)
            ((float *)data)[i] = (float)value(of_rank, i);
        else
            ((double *)data)[i] = value(of_rank, i);
    }
}

/* The sum of every rank's data, ((x_0 + x_1) + x_2) + …, in dtype. */
static void expected_sum(void *out, eg_dtype dtype, int64_t count) {
    for (int64_t i = 0; i < count; i++) {
        if (dtype == EG_DTYPE_F32) {
            float acc = (float)value(0, i);
            for (int q = 1; q < size; q++) acc += (float)value(q, i);
            ((float *)out)[i] = acc;
        } else {
            double acc = value(0, i);
            for (int q = 1; q < size; q++) acc += value(q, i);
            ((double *)out)[i] = acc;
        }
    }
}

static void assert_same_bits(const void *got, const void *want, eg_dtype dtype, int64_t count,
                             const char *what) {
    size_t elem = eg_dtype_size(dtype);
    if (count == 0 || memcmp(got, want, (size_t)count * elem) == 0) return;
    for (int64_t i = 0; i < count; i++)
        if (memcmp((const char *)got + i * elem, (const char *)want + i * elem, elem) != 0) {
            double g = dtype == EG_DTYPE_F32 ? ((const float *)got)[i] : ((const double *)got)[i];
            double w = dtype == EG_DTYPE_F32 ? ((const float *)want)[i] : ((const double *)want)[i];
            fail_msg("rank %d, %s, %lld %s: element %lld is %.17g, the rank-order sum %.17g", rank,
                     what, (long long)count, eg_dtype_name(dtype), (long long)i, g, w);
        }
}

/* Starts, waits and checks one reduction of count elements. */
static void check_sum(eg_dtype dtype, int64_t count) {
    size_t elem = eg_dtype_size(dtype);
    void *data = malloc((size_t)count * elem + 1), *want = malloc((size_t)count * elem + 1);
    assert_non_null(data);
    assert_non_null(want);
    fill(data, dtype, rank, count);
    expected_sum(want, dtype, count);
    int64_t tag = next_tag++;
    assert_int_equal(ops->reduce.start(member, tag, data, count, dtype), EG_OK);
    assert_int_equal(ops->reduce.wait(member, tag, data, NULL), EG_OK);
    assert_same_bits(data, want, dtype, count, "one reduction");
    free(data);
    free(want);
}

static int group_setup(void **state) {
    (void)state;
    if (eg__mpi_group_new(10.0, &group) != EG_OK) {
        print_error("eg__mpi_group_new: %s\n", eg_last_error());
        return -1;
    }
    member = eg__mpi_group_member(group);
    rank = eg__mpi_group_rank(group);
    size = eg__mpi_group_size(group);
    return 0;
}

static int group_teardown(void **state) {
    (void)state;
    bool broken = eg__mpi_group_broken(group);
    eg__mpi_group_free(group);
    group = NULL;
    return broken ? -1 : 0;
}

static void test_ranks_and_info(void **state) {
    (void)state;
    const char *world = getenv("OMPI_COMM_WORLD_SIZE");
    assert_non_null(world);
    assert_int_equal(size, atoi(world));
    assert_int_equal(rank, atoi(getenv("OMPI_COMM_WORLD_RANK")));
    assert_true(size >= 2);
    const char *info = eg__mpi_info();
    assert_non_null(strstr(info, "MPI"));
    assert_null(strchr(info, '\n'));
    assert_null(strstr(info, "not built"));
}

/* Counts of 0, 1 and 3 leave some ranks' chunks empty; 1000003 divides by neither 2 nor 4;
 * 1 << 20 spans many pieces. */
static const int64_t counts[] = {0, 1, 3, 1000, 1000003, 1 << 20};

static void test_sum_f32(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof counts / sizeof *counts; i++) check_sum(EG_DTYPE_F32, counts[i]);
}

static void test_sum_f64(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof counts / sizeof *counts; i++) check_sum(EG_DTYPE_F64, counts[i]);
}

/* With 3+ ranks the data is such that other orders (last rank first; pairs) give other bits
 * for many elements, so the bitwise match proves the order. */
static void test_sum_in_rank_order(void **state) {
    (void)state;
    if (size < 3) skip();
    const int64_t count = 100000;
    int64_t differ_reverse = 0, differ_pairs = 0;
    for (int64_t i = 0; i < count; i++) {
        float in_order = (float)value(0, i), reverse = (float)value(size - 1, i);
        for (int q = 1; q < size; q++) in_order += (float)value(q, i);
        for (int q = size - 2; q >= 0; q--) reverse += (float)value(q, i);
        float pairs = 0;
        for (int q = 0; q < size; q += 2)
            pairs +=
                q + 1 < size ? (float)value(q, i) + (float)value(q + 1, i) : (float)value(q, i);
        differ_reverse += memcmp(&in_order, &reverse, sizeof in_order) != 0;
        differ_pairs += memcmp(&in_order, &pairs, sizeof in_order) != 0;
    }
    assert_true(differ_reverse > count / 100);
    assert_true(differ_pairs > count / 100);
    check_sum(EG_DTYPE_F32, count);
    check_sum(EG_DTYPE_F64, count);
    check_sum(EG_DTYPE_F32, (1 << 20) + 5);
}

/* Even ranks start (and wait for) a then b, odd ranks b then a, odd ranks a little later. */
static void test_two_in_flight_in_opposite_orders(void **state) {
    (void)state;
    const int64_t count_a = 1 << 20, count_b = 1001;
    float *a = malloc(count_a * sizeof *a), *want_a = malloc(count_a * sizeof *a);
    double *b = malloc(count_b * sizeof *b), *want_b = malloc(count_b * sizeof *b);
    assert_true(a && want_a && b && want_b);
    fill(a, EG_DTYPE_F32, rank, count_a);
    fill(b, EG_DTYPE_F64, rank, count_b);
    expected_sum(want_a, EG_DTYPE_F32, count_a);
    expected_sum(want_b, EG_DTYPE_F64, count_b);
    int64_t tag_a = next_tag++, tag_b = next_tag++;
    if (rank % 2 == 0) {
        assert_int_equal(ops->reduce.start(member, tag_a, a, count_a, EG_DTYPE_F32), EG_OK);
        assert_int_equal(ops->reduce.start(member, tag_b, b, count_b, EG_DTYPE_F64), EG_OK);
        assert_int_equal(ops->reduce.wait(member, tag_a, a, NULL), EG_OK);
        assert_int_equal(ops->reduce.wait(member, tag_b, b, NULL), EG_OK);
    } else {
        nanosleep(&(struct timespec){0, 20000000}, NULL);
        assert_int_equal(ops->reduce.start(member, tag_b, b, count_b, EG_DTYPE_F64), EG_OK);
        nanosleep(&(struct timespec){0, 20000000}, NULL);
        assert_int_equal(ops->reduce.start(member, tag_a, a, count_a, EG_DTYPE_F32), EG_OK);
        assert_int_equal(ops->reduce.wait(member, tag_b, b, NULL), EG_OK);
        assert_int_equal(ops->reduce.wait(member, tag_a, a, NULL), EG_OK);
    }
    assert_same_bits(a, want_a, EG_DTYPE_F32, count_a, "job a");
    assert_same_bits(b, want_b, EG_DTYPE_F64, count_b, "job b");
    free(a);
    free(want_a);
    free(b);
    free(want_b);
}

/* Eight jobs in flight, started in a rank-dependent rotation and waited for in reverse. */
static void test_many_in_flight(void **state) {
    (void)state;
    enum { N = 8 };
    float *data[N], *want[N];
    int64_t count[N], tag[N];
    for (int i = 0; i < N; i++) {
        count[i] = (int64_t)(i % 3 == 0 ? 300000 : 17 * i + 1);
        tag[i] = next_tag++;
        data[i] = malloc((size_t)count[i] * sizeof(float));
        want[i] = malloc((size_t)count[i] * sizeof(float));
        assert_true(data[i] && want[i]);
        fill(data[i], EG_DTYPE_F32, rank, count[i]);
        for (int64_t e = 0; e < count[i]; e++) data[i][e] += (float)i;
        for (int64_t e = 0; e < count[i]; e++) { /* every rank added i to its value */
            float acc = (float)value(0, e) + (float)i;
            for (int q = 1; q < size; q++) acc += (float)value(q, e) + (float)i;
            want[i][e] = acc;
        }
    }
    for (int k = 0; k < N; k++) {
        int i = (k + 3 * rank) % N;
        assert_int_equal(ops->reduce.start(member, tag[i], data[i], count[i], EG_DTYPE_F32), EG_OK);
    }
    for (int i = N - 1; i >= 0; i--) {
        assert_int_equal(ops->reduce.wait(member, tag[i], data[i], NULL), EG_OK);
        assert_same_bits(data[i], want[i], EG_DTYPE_F32, count[i], "one of eight in flight");
        free(data[i]);
        free(want[i]);
    }
}

static void test_broadcast(void **state) {
    (void)state;
    const size_t sizes[] = {0, 13, 3 << 20};
    for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
        for (int root = 0; root < size; root += size - 1) {
            size_t bytes = sizes[s];
            unsigned char *data = malloc(bytes + 1);
            assert_non_null(data);
            for (size_t i = 0; i < bytes; i++) data[i] = (unsigned char)(i * 31 + rank * 7);
            assert_int_equal(ops->broadcast(member, data, bytes, root), EG_OK);
            for (size_t i = 0; i < bytes; i++)
                if (data[i] != (unsigned char)(i * 31 + root * 7))
                    fail_msg("rank %d: byte %zu of %zu from root %d is %u", rank, i, bytes, root,
                             data[i]);
            free(data);
        }
    }
}

static void test_all_gather(void **state) {
    (void)state;
    const size_t sizes[] = {8, 1000, (1 << 20) + 3};
    for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
        size_t bytes = sizes[s];
        unsigned char *send = malloc(bytes), *recv = malloc(bytes * (size_t)size);
        assert_true(send && recv);
        for (size_t i = 0; i < bytes; i++) send[i] = (unsigned char)(i * 13 + rank * 101);
        memset(recv, 0xEE, bytes * (size_t)size);
        assert_int_equal(ops->all_gather(member, send, bytes, recv), EG_OK);
        for (int q = 0; q < size; q++)
            for (size_t i = 0; i < bytes; i++)
                if (recv[(size_t)q * bytes + i] != (unsigned char)(i * 13 + q * 101))
                    fail_msg("rank %d: byte %zu of rank %d's %zu is %u", rank, i, q, bytes,
                             recv[(size_t)q * bytes + i]);
        /* in place: the own part already in recv */
        memset(recv, 0, bytes * (size_t)size);
        memcpy(recv + (size_t)rank * bytes, send, bytes);
        assert_int_equal(ops->all_gather(member, recv + (size_t)rank * bytes, bytes, recv), EG_OK);
        for (int q = 0; q < size; q++)
            assert_int_equal(recv[(size_t)q * bytes + bytes - 1],
                             (unsigned char)((bytes - 1) * 13 + q * 101));
        free(send);
        free(recv);
    }
}

/* Errors found before any message: every rank makes the same calls, so none waits. */
static void test_bad_arguments(void **state) {
    (void)state;
    float x[4] = {1, 2, 3, 4};
    assert_int_equal(ops->reduce.start(member, next_tag, x, 4, EG_DTYPE_I32), EG_ERR_DTYPE);
    expect_error_containing(EG_ERR_DTYPE, "all_reduce", "i32", NULL);
    assert_int_equal(ops->reduce.start(member, next_tag, NULL, 4, EG_DTYPE_F32),
                     EG_ERR_INVALID_ARGUMENT);
    eg_clear_error();
    assert_int_equal(ops->reduce.wait(member, 99999999, x, NULL), EG_ERR_STATE);
    expect_error_containing(EG_ERR_STATE, "tag 99999999", "never started", NULL);
    assert_int_equal(ops->broadcast(member, x, sizeof x, size), EG_ERR_INVALID_ARGUMENT);
    expect_error_containing(EG_ERR_INVALID_ARGUMENT, "broadcast", "no rank", NULL);
    /* a tag started twice; the first still completes */
    int64_t tag = next_tag++;
    assert_int_equal(ops->reduce.start(member, tag, x, 4, EG_DTYPE_F32), EG_OK);
    float y[4] = {0};
    assert_int_equal(ops->reduce.start(member, tag, y, 4, EG_DTYPE_F32), EG_ERR_STATE);
    expect_error_containing(EG_ERR_STATE, "started twice", NULL);
    assert_int_equal(ops->reduce.wait(member, tag, y, NULL), EG_ERR_STATE);
    expect_error_containing(EG_ERR_STATE, "another buffer", NULL);
    assert_int_equal(ops->reduce.wait(member, tag, x, NULL), EG_OK);
    assert_true(x[3] == 4.0f * (float)size);
    assert_false(eg__mpi_group_broken(group));
    eg__mpi_group *none = NULL;
    assert_int_equal(eg__mpi_group_new(0, &none), EG_ERR_INVALID_ARGUMENT);
    assert_null(none);
    eg_clear_error();
}

static double cpu_seconds(void) {
    struct rusage usage;
    getrusage(RUSAGE_SELF, &usage);
    return (double)usage.ru_utime.tv_sec + (double)usage.ru_stime.tv_sec +
           ((double)usage.ru_utime.tv_usec + (double)usage.ru_stime.tv_usec) * 1e-6;
}

static double wall_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* An idle group and a rank waiting for a late peer leave the cores alone: this process's CPU
 * time (all its threads) stays a small part of the wall time. A spinning waiter takes all of it;
 * the limits (a quarter) leave room for a loaded machine, where a blocked thread's wake-ups cost
 * more (0.052 to 0.068 s per 0.5 s measured while other builds ran, against a limit of a tenth
 * that failed then). */
static void test_waiting_does_not_spin(void **state) {
    (void)state;
    double cpu = cpu_seconds();
    nanosleep(&(struct timespec){0, 300000000}, NULL);
    double idle_cpu = cpu_seconds() - cpu;
    if (idle_cpu > 0.075) fail_msg("rank %d: %.3f s of CPU in 0.3 s idle", rank, idle_cpu);

    float x[16] = {0};
    int64_t tag = next_tag++;
    if (rank != 0) nanosleep(&(struct timespec){0, 500000000}, NULL);
    double wall = wall_seconds();
    cpu = cpu_seconds();
    assert_int_equal(ops->reduce.start(member, tag, x, 16, EG_DTYPE_F32), EG_OK);
    assert_int_equal(ops->reduce.wait(member, tag, x, NULL), EG_OK);
    double waited = wall_seconds() - wall, waiting_cpu = cpu_seconds() - cpu;
    if (rank == 0) {
        print_message("rank 0: %.3f s of CPU while waiting %.3f s\n", waiting_cpu, waited);
        assert_true(waited > 0.3);
        if (waiting_cpu > 0.25 * waited)
            fail_msg("rank 0: %.3f s of CPU while waiting %.3f s for the others", waiting_cpu,
                     waited);
    }
}

/* After the last group's free MPI is finalized; it cannot start again. */
static void test_no_second_start(void **state) {
    (void)state;
    eg__mpi_group *again = NULL;
    assert_int_equal(eg__mpi_group_new(1.0, &again), EG_ERR_STATE);
    assert_null(again);
    expect_error_containing(EG_ERR_STATE, "finalized", NULL);
}

int main(int argc, char **argv) {
    if (argc > 1) cmocka_set_test_filter(argv[1]);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ranks_and_info),
        cmocka_unit_test(test_sum_f32),
        cmocka_unit_test(test_sum_f64),
        cmocka_unit_test(test_sum_in_rank_order),
        cmocka_unit_test(test_two_in_flight_in_opposite_orders),
        cmocka_unit_test(test_many_in_flight),
        cmocka_unit_test(test_broadcast),
        cmocka_unit_test(test_all_gather),
        cmocka_unit_test(test_bad_arguments),
        cmocka_unit_test(test_waiting_does_not_spin),
    };
    const struct CMUnitTest after[] = {cmocka_unit_test(test_no_second_start)};
    const char *rank_text = getenv("OMPI_COMM_WORLD_RANK");
    char name[64];
    snprintf(name, sizeof name, "mpi group, rank %s", rank_text ? rank_text : "?");
    int failures = cmocka_run_group_tests_name(name, tests, group_setup, group_teardown);
    if (argc > 1) cmocka_set_test_filter(NULL);
    failures += cmocka_run_group_tests_name("after the last group", after, NULL, NULL);
    return failures;
}
