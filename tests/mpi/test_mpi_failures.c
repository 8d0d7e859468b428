/* The MPI group's failures, on 2 ranks: `test_mpi_failures timeout` (rank 1 skips a reduction:
 * rank 0 fails within about twice the 1 s timeout naming rank 1, and every later call fails at
 * once) and `test_mpi_failures mismatch` (the ranks give one tag different counts: both fail
 * naming both sizes and ranks; here the program initializes MPI itself, before the group).
 *
 * A broken group skips MPI_Finalize, so the ranks exit without it and mpirun reports the job as
 * failed whatever happens: each rank prints "PASS <mode> rank <r>: …" once its own checks hold,
 * and tests/mpi/run_failure.sh passes only when both did (and no sanitizer spoke). Each rank
 * waits a second before exiting, so that mpirun does not stop the other before it reports. */
#include <mpi.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dist/internal.h"
#include "eagle.h"

static int rank = -1;
static bool failed;

static void check(bool condition, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void check(bool condition, const char *fmt, ...) {
    if (condition) return;
    va_list args;
    va_start(args, fmt);
    printf("FAIL rank %d: ", rank);
    vprintf(fmt, args);
    printf("\n");
    va_end(args);
    failed = true;
}

static double wall_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static const eg__member_ops *ops = &eg__mpi_member_ops;

/* One reduction of n ones; returns its status, *seconds how long start + wait took. */
static eg_status reduce(void *member, int64_t tag, int64_t n, double *seconds) {
    float *x = malloc((size_t)(n + 1) * sizeof *x);
    for (int64_t i = 0; i < n; i++) x[i] = 1;
    double start = wall_seconds();
    eg_status status = ops->reduce.start(member, tag, x, n, EG_DTYPE_F32);
    if (status == EG_OK) status = ops->reduce.wait(member, tag, x, NULL);
    if (seconds) *seconds = wall_seconds() - start;
    free(x);
    return status;
}

static bool contains(const char *text, const char *part) {
    return strstr(text, part) != NULL;
}

static void timeout_case(void) {
    eg__mpi_group *group = NULL;
    if (eg__mpi_group_new(1.0, &group) != EG_OK) {
        check(false, "eg__mpi_group_new: %s", eg_last_error());
        return;
    }
    rank = eg__mpi_group_rank(group);
    void *member = eg__mpi_group_member(group);
    check(eg__mpi_group_size(group) == 2, "2 ranks expected, not %d", eg__mpi_group_size(group));
    check(reduce(member, 0, 1000, NULL) == EG_OK, "the first reduction: %s", eg_last_error());
    double seconds = 0;
    char message[1024] = "";
    if (rank == 0) {
        /* tag 1, which rank 1 skips */
        eg_status status = reduce(member, 1, 1000, &seconds);
        snprintf(message, sizeof message, "%s", eg_last_error());
        eg_clear_error();
        check(status == EG_ERR_STATE, "tag 1 gave status %d: %s", status, message);
        check(contains(message, "rank 1 sent nothing within 1 s"), "the error: %s", message);
        check(contains(message, "all_reduce (tag 1)"), "the error: %s", message);
        check(seconds >= 0.95 && seconds <= 2.0, "the timeout took %.3f s", seconds);
        check(eg__mpi_group_broken(group), "the group is not broken");
        /* every later call fails at once, with the first error */
        double later = 0;
        status = reduce(member, 2, 1000, &later);
        check(status == EG_ERR_STATE && later < 0.1, "tag 2 gave %d after %.3f s", status, later);
        check(contains(eg_last_error(), "rank 1 sent nothing"), "tag 2's error: %s",
              eg_last_error());
        eg_clear_error();
        char bytes[8] = {0};
        double start = wall_seconds();
        status = ops->broadcast(member, bytes, sizeof bytes, 0);
        check(status == EG_ERR_STATE && wall_seconds() - start < 0.1, "broadcast gave %d: %s",
              status, eg_last_error());
        check(contains(eg_last_error(), "rank 1"), "broadcast's error: %s", eg_last_error());
        eg_clear_error();
    } else {
        /* skips tag 1; rank 0 never sends tag 2, since its group broke */
        eg_status status = reduce(member, 2, 1000, &seconds);
        snprintf(message, sizeof message, "%s", eg_last_error());
        eg_clear_error();
        check(status == EG_ERR_STATE, "tag 2 gave status %d: %s", status, message);
        check(contains(message, "rank 0 sent nothing within 1 s"), "the error: %s", message);
        check(seconds >= 0.95 && seconds <= 2.0, "the timeout took %.3f s", seconds);
        check(eg__mpi_group_broken(group), "the group is not broken");
    }
    double start = wall_seconds();
    eg__mpi_group_free(group); /* skips MPI_Finalize */
    check(wall_seconds() - start < 0.5, "the broken group's free took %.3f s",
          wall_seconds() - start);
    eg__mpi_group *again = NULL;
    check(eg__mpi_group_new(1.0, &again) == EG_ERR_STATE && !again,
          "a new group after a broken one: %s", eg_last_error());
    eg_clear_error();
    if (!failed) printf("PASS timeout rank %d: %.3f s: %s\n", rank, seconds, message);
}

static void mismatch_case(void) {
    int provided = 0;
    MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    check(provided >= MPI_THREAD_SERIALIZED, "MPI gave thread level %d", provided);
    eg__mpi_group *group = NULL;
    if (eg__mpi_group_new(5.0, &group) != EG_OK) {
        check(false, "eg__mpi_group_new on the program's MPI: %s", eg_last_error());
        return;
    }
    void *member = eg__mpi_group_member(group);
    check(eg__mpi_group_rank(group) == rank, "the group's rank %d", eg__mpi_group_rank(group));
    check(reduce(member, 0, 1 << 20, NULL) == EG_OK, "the first reduction: %s", eg_last_error());
    /* 1000 and 999 elements: the chunks of 500 and 499/500 elements differ on one side only */
    double seconds = 0;
    eg_status status = reduce(member, 1, rank == 0 ? 1000 : 999, &seconds);
    char message[1024];
    snprintf(message, sizeof message, "%s", eg_last_error());
    eg_clear_error();
    check(status == EG_ERR_SHAPE, "tag 1 gave %d: %s", status, message);
    check(contains(message, "rank 0 sums 1000 f32 elements, rank 1 999 f32 elements"),
          "the error: %s", message);
    check(seconds < 1.0, "the mismatch took %.3f s to find", seconds);
    check(eg__mpi_group_broken(group), "the group is not broken");
    eg__mpi_group_free(group);
    if (!failed) printf("PASS mismatch rank %d: %s\n", rank, message);
}

int main(int argc, char **argv) {
    if (argc != 2 || (strcmp(argv[1], "timeout") != 0 && strcmp(argv[1], "mismatch") != 0)) {
        fprintf(stderr, "usage: test_mpi_failures timeout|mismatch (under mpirun -np 2)\n");
        return 2;
    }
    if (strcmp(argv[1], "timeout") == 0)
        timeout_case();
    else
        mismatch_case();
    fflush(stdout);
    nanosleep(&(struct timespec){1, 0}, NULL);
    return failed ? 1 : 0;
}
