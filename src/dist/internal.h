/* Internal: what the files of src/dist share — groups (the replicas a strategy sums over, seen
 * from this process) behind one interface, the strategy's pieces, the gradient reducer.
 *
 * A group has one member per replica of this process: the mirrored strategy's local group
 * (local.c) one per local device, each a thread; a multi-worker group (mpi.c) one per process.
 * Every member function is called by that replica's thread only, blocks at most the group's
 * timeout, and names the replica (or rank) that failed or stayed silent in its error. Sums run in
 * replica order, replica 0 first, whatever the group, bucket or timing (device/collective.h). */
#ifndef EAGLE_SRC_DIST_INTERNAL_H
#define EAGLE_SRC_DIST_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "device/collective.h"
#include "eagle/distribute.h"

typedef struct eg__member_ops {
    /* Reductions by tag (start returns at once; wait blocks until the sum is in place). */
    eg__collective_ops reduce;
    /* root's `bytes` bytes at data into every member's data. */
    eg_status (*broadcast)(void *member, void *data, size_t bytes, int root);
    /* Every member's `bytes` bytes at send, in member order, into recv (n_members * bytes). */
    eg_status (*all_gather)(void *member, const void *send, size_t bytes, void *recv);
} eg__member_ops;

/* out[offset .. offset + count) = the sum of the n_sources buffers there, added in source order
 * (source 0 first) element by element; f32, or f64 for EG_DTYPE_F64 (sum.c). out may be one of
 * the sources. */
void eg__sum_in_replica_order(eg_dtype dtype, void *out, const void *const *sources,
                              int n_sources, int64_t offset, int64_t count);

/* ---- the local group (local.c): n replicas of this process, one thread each ---- */
typedef struct eg__local_group eg__local_group;
eg_status eg__local_group_new(int n, double timeout_seconds, eg__local_group **out);
/* Member i's pointer, to pass to eg__local_member_ops's functions. */
void *eg__local_group_member(eg__local_group *group, int i);
extern const eg__member_ops eg__local_member_ops;
/* Replica i failed (its step returned `status`): every member waiting now or later gets an error
 * naming it instead of waiting for it. */
void eg__local_group_abort(eg__local_group *group, int i, const char *why);
/* Clears an abort (before the next eg_strategy_run). */
void eg__local_group_reset(eg__local_group *group);
void eg__local_group_free(eg__local_group *group);

/* ---- the MPI group (mpi.c): one member per process, ranks of MPI_COMM_WORLD ----
 * Built only where CMake found MPI (EG_HAVE_MPI); elsewhere eg__mpi_group_new is
 * EG_ERR_UNSUPPORTED with what to install. MPI is initialized (MPI_THREAD_SERIALIZED or better)
 * by the first group and finalized when the last is freed; every MPI call runs on the group's
 * own progress thread, so replica threads never enter MPI. */
typedef struct eg__mpi_group eg__mpi_group;
eg_status eg__mpi_group_new(double timeout_seconds, eg__mpi_group **out);
int eg__mpi_group_rank(const eg__mpi_group *group);
int eg__mpi_group_size(const eg__mpi_group *group);
/* The group's single member (this process). */
void *eg__mpi_group_member(eg__mpi_group *group);
extern const eg__member_ops eg__mpi_member_ops;
/* Whether an error (a timeout, a failed transfer) left the group unusable: eg__mpi_group_free
 * then skips MPI_Finalize, which would wait for the silent rank, and the process should exit
 * with an error, which makes mpirun stop the others. */
bool eg__mpi_group_broken(const eg__mpi_group *group);
void eg__mpi_group_free(eg__mpi_group *group);
/* "Open MPI v4.1.4 ..." or why MPI is absent (static storage). */
const char *eg__mpi_info(void);

#endif
