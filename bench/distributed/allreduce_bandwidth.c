/* The multi-worker group's all-reduce (src/dist/mpi*.c: point-to-point messages, rank-order
 * sums) beside MPI_Allreduce(MPI_IN_PLACE, MPI_SUM) on the same f32 buffer, 4 KiB to 64 MiB:
 *
 *   mpirun -np 2 --oversubscribe --allow-run-as-root \
 *     build/release/bench/distributed/eagle_bench_allreduce [reps]
 *
 * (Open MPI's shared-memory transport copies once where the kernel allows cross-memory attach;
 * add --mca btl_vader_single_copy_mechanism none to measure the two-copy path of containers that
 * forbid it.)
 *
 * Per size, reps (default 20) timed runs of each, alternating, after 3 untimed ones; each run
 * starts after a barrier, and its time is the slowest rank's. Prints, on rank 0, one line per
 * size: bytes, the median times and bandwidths (bytes / time) and Eagle's bandwidth over MPI's;
 * last, the median and lowest ratio over the sizes of 1 MiB and more.
 *
 * Eagle starts MPI (MPI_THREAD_SERIALIZED) on its progress thread; this program calls MPI only
 * while no Eagle collective runs (the progress thread is then idle), and times with the
 * monotonic clock, not MPI_Wtime, so that it never calls MPI while one does. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dist/internal.h"
#include "eagle.h"

static double now_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int compare_doubles(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *values, int n) {
    qsort(values, (size_t)n, sizeof *values, compare_doubles);
    return n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

static void die(const char *what) {
    fprintf(stderr, "eagle_bench_allreduce: %s: %s\n", what, eg_last_error());
    exit(1);
}

int main(int argc, char **argv) {
    int reps = argc > 1 ? atoi(argv[1]) : 20;
    if (reps < 1) reps = 20;
    const int warmup = 3;
    eg__mpi_group *group = NULL;
    if (eg__mpi_group_new(60.0, &group) != EG_OK) die("eg__mpi_group_new");
    void *member = eg__mpi_group_member(group);
    int rank = eg__mpi_group_rank(group), size = eg__mpi_group_size(group), provided = 0;
    MPI_Query_thread(&provided);
    if (provided < MPI_THREAD_SERIALIZED) {
        fprintf(stderr, "eagle_bench_allreduce: MPI gave thread level %d, not SERIALIZED\n",
                provided);
        return 1;
    }
    const eg__member_ops *ops = &eg__mpi_member_ops;
    size_t sizes[32];
    int n_sizes = 0;
    for (size_t bytes = 4096; bytes <= ((size_t)64 << 20);
         bytes *= bytes < ((size_t)1 << 20) ? 4 : 2)
        sizes[n_sizes++] = bytes;
    double *eagle_times = malloc(sizeof(double) * (size_t)reps);
    double *mpi_times = malloc(sizeof(double) * (size_t)reps);
    double ratios[32];
    int n_ratios = 0;
    int64_t tag = 0;
    if (rank == 0) {
        printf("# %s; %d ranks, f32, median of %d runs (slowest rank)\n", eg__mpi_info(), size,
               reps);
        printf("%10s %12s %12s %10s %10s %8s\n", "bytes", "eagle_us", "mpi_us", "eagle_GB/s",
               "mpi_GB/s", "ratio");
    }
    for (int s = 0; s < n_sizes; s++) {
        size_t bytes = sizes[s];
        int64_t count = (int64_t)(bytes / sizeof(float));
        float *data = malloc(bytes);
        for (int64_t i = 0; i < count; i++) data[i] = 1e-3f * (float)(1 + (i + rank) % 7);
        for (int r = -warmup; r < reps; r++) {
            for (int which = 0; which < 2; which++) {
                MPI_Barrier(MPI_COMM_WORLD);
                double start = now_seconds();
                if (which == 0) {
                    if (ops->reduce.start(member, tag, data, count, EG_DTYPE_F32) != EG_OK ||
                        ops->reduce.wait(member, tag, data, NULL) != EG_OK)
                        die("all_reduce");
                    tag++;
                } else {
                    MPI_Allreduce(MPI_IN_PLACE, data, (int)count, MPI_FLOAT, MPI_SUM,
                                  MPI_COMM_WORLD);
                }
                double seconds = now_seconds() - start;
                if (r >= 0) (which == 0 ? eagle_times : mpi_times)[r] = seconds;
                /* keep the values small: every sum multiplies them by about the rank count */
                if (r % 8 == 0)
                    for (int64_t i = 0; i < count; i++)
                        data[i] = 1e-3f * (float)(1 + (i + rank) % 7);
            }
        }
        /* each run's time is its slowest rank's */
        MPI_Allreduce(MPI_IN_PLACE, eagle_times, reps, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        MPI_Allreduce(MPI_IN_PLACE, mpi_times, reps, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        double eagle = median(eagle_times, reps), mpi = median(mpi_times, reps);
        double ratio = mpi / eagle;
        if (bytes >= ((size_t)1 << 20)) ratios[n_ratios++] = ratio;
        if (rank == 0)
            printf("%10zu %12.1f %12.1f %10.3f %10.3f %8.3f\n", bytes, eagle * 1e6, mpi * 1e6,
                   (double)bytes / eagle * 1e-9, (double)bytes / mpi * 1e-9, ratio);
        free(data);
    }
    double lowest = ratios[0];
    for (int i = 1; i < n_ratios; i++)
        if (ratios[i] < lowest) lowest = ratios[i];
    if (rank == 0) {
        printf("summary: eagle/mpi bandwidth at >= 1 MiB: median %.3f, lowest %.3f (%d sizes)\n",
               median(ratios, n_ratios), lowest, n_ratios);
        fflush(stdout);
    }
    free(eagle_times);
    free(mpi_times);
    eg__mpi_group_free(group); /* finalizes MPI */
    return 0;
}
