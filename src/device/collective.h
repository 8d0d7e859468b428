/* Internal: collective groups — how a kernel reaches the replicas it sums with.
 *
 * A data-parallel step sums tensors over replicas (threads of this process on logical devices,
 * or processes over MPI). The summing itself belongs to src/dist, far above the kernels that
 * need it, so dist registers each replica's end of a group here as a member (a table of
 * functions and its own pointer) and gets a small integer handle; the collective ops carry the
 * handle in their attributes and their kernels call through it. Handle 0 names no group: a
 * replica alone, whose sum is the tensor itself.
 *
 * A reduction is started and later waited for, so that communication runs while the step goes on
 * computing. Each is named by a tag that every member gives in the same order: the members match
 * reductions by tag, not by the order their starts happen to arrive in (a parallel graph replay
 * may start two buckets in either order). The tags a member receives never repeat: a traced
 * graph starts the tags it traced at every replay, so eg__collective_start passes the member the
 * tag joined with how often it was started. Every element is summed in member order, member 0
 * first, whatever the group, the bucket or the timing: the bits of a sum never depend on them. */
#ifndef EAGLE_SRC_DEVICE_COLLECTIVE_H
#define EAGLE_SRC_DEVICE_COLLECTIVE_H

#include <stdbool.h>
#include <stdint.h>

#include "eagle/dtype.h"
#include "eagle/status.h"

typedef struct eg__collective_ops {
    /* Starts summing count elements of dtype (f32 or f64) at data, host memory that stays valid
     * and untouched until the matching wait, over the group, in place; returns at once. */
    eg_status (*start)(void *member, int64_t tag, void *data, int64_t count, eg_dtype dtype);
    /* Waits until the reduction `tag` started on data is complete in data. Its error (a member
     * that failed, or sent nothing before the group's timeout) names the member. On success
     * *completed_ns (unless NULL) gets when the sum was complete (eg__collective_now_ns' clock),
     * which is before the call where it ran in the background, or 0 where the members sum only
     * once they wait (nothing of it ran behind the computation). */
    eg_status (*wait)(void *member, int64_t tag, void *data, uint64_t *completed_ns);
} eg__collective_ops;

/* Monotonic nanoseconds, the clock of completed_ns and of the statistics. */
uint64_t eg__collective_now_ns(void);

/* What a member's reductions cost, counted by eg__collective_start / _wait: how long each was in
 * flight (from its start to its sum being complete) and how much of that its replica's thread
 * spent blocked in the wait; the rest ran while the step computed (hidden). */
typedef struct eg__collective_stats {
    int64_t reductions; /* waited for successfully */
    int64_t bytes;
    uint64_t in_flight_ns, exposed_ns;
} eg__collective_stats;

/* Adds handle's counts to *stats (unknown handles add nothing); reset: zeroes them after. */
void eg__collective_stats_add(int64_t handle, eg__collective_stats *stats, bool reset);

/* A handle (>= 1) for member, or 0 with an error when the table is full. The pointers stay the
 * registrant's; ops must outlive the handle. */
int64_t eg__collective_register(const eg__collective_ops *ops, void *member);
/* Forgets a handle (0 and unknown handles are ignored). */
void eg__collective_unregister(int64_t handle);

/* The member of this thread's replica, or 0 outside a replica (set by strategies while they run
 * a replica's step on the thread). */
int64_t eg__collective_current(void);
void eg__collective_set_current(int64_t handle);

/* The next tag of `handle`: every member draws the same sequence when they make the same calls
 * in the same order. */
int64_t eg__collective_next_tag(int64_t handle);

/* Start and wait through a handle. Handle 0 succeeds at once (a group of one); an unknown handle
 * is EG_ERR_STATE (its group was freed). */
eg_status eg__collective_start(int64_t handle, int64_t tag, void *data, int64_t count,
                               eg_dtype dtype);
eg_status eg__collective_wait(int64_t handle, int64_t tag, void *data);

#endif
