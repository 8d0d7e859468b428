/* The local group: the mirrored strategy's replicas, one thread each, all in host memory.
 *
 * A reduction (or a host exchange) is a rendezvous named by its tag: each member leaves its
 * buffer's address and goes on; once all have, every member waiting sums its own slice of the
 * elements over all the buffers, member 0 first, and writes the sum into every buffer, so the
 * work is shared and each element is added in the same order whoever computes it. A member
 * leaves only when every slice is written, since its buffer is also written by the others. */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/error.h"
#include "dist/internal.h"

#define MAX_LOCAL 64

/* One rendezvous in progress. */
typedef struct meeting {
    struct meeting *next;
    int64_t tag;
    int64_t count; /* elements (reductions) or bytes (exchanges) */
    eg_dtype dtype;
    void *data[MAX_LOCAL];
    bool joined[MAX_LOCAL];
    int arrived, finished, left;
} meeting;

typedef struct member {
    eg__local_group *group;
    int index;
    int64_t host_ops; /* exchanges made: names them (negative tags) */
} member;

struct eg__local_group {
    int n;
    double timeout_seconds;
    pthread_mutex_t lock;
    pthread_cond_t changed;
    meeting *meetings;
    member members[MAX_LOCAL];
    int failed; /* -1, or the first replica that failed */
    char failed_why[512];
};

eg_status eg__local_group_new(int n, double timeout_seconds, eg__local_group **out) {
    *out = NULL;
    if (n < 1 || n > MAX_LOCAL)
        return eg__error(EG_ERR_INVALID_ARGUMENT, "mirrored: %d replicas, 1 to %d are supported", n,
                         MAX_LOCAL);
    eg__local_group *g = calloc(1, sizeof *g);
    if (!g) return eg__error(EG_ERR_OUT_OF_MEMORY, "mirrored: out of host memory");
    g->n = n;
    g->timeout_seconds = timeout_seconds;
    g->failed = -1;
    pthread_mutex_init(&g->lock, NULL);
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&g->changed, &attr);
    pthread_condattr_destroy(&attr);
    for (int i = 0; i < n; i++) g->members[i] = (member){g, i, 0};
    *out = g;
    return EG_OK;
}

void *eg__local_group_member(eg__local_group *group, int i) {
    return &group->members[i];
}

void eg__local_group_abort(eg__local_group *group, int i, const char *why) {
    pthread_mutex_lock(&group->lock);
    if (group->failed < 0) {
        group->failed = i;
        snprintf(group->failed_why, sizeof group->failed_why, "%s", why ? why : "");
    }
    pthread_cond_broadcast(&group->changed);
    pthread_mutex_unlock(&group->lock);
}

/* Forgets every meeting (members that left one half-way after an abort never come back). */
static void drop_meetings(eg__local_group *group) {
    while (group->meetings) {
        meeting *m = group->meetings;
        group->meetings = m->next;
        free(m);
    }
}

void eg__local_group_reset(eg__local_group *group) {
    pthread_mutex_lock(&group->lock);
    group->failed = -1;
    group->failed_why[0] = '\0';
    drop_meetings(group);
    for (int i = 0; i < group->n; i++) group->members[i].host_ops = 0;
    pthread_mutex_unlock(&group->lock);
}

void eg__local_group_free(eg__local_group *group) {
    if (!group) return;
    drop_meetings(group);
    pthread_cond_destroy(&group->changed);
    pthread_mutex_destroy(&group->lock);
    free(group);
}

static meeting *find_meeting(eg__local_group *g, int64_t tag) {
    for (meeting *m = g->meetings; m; m = m->next)
        if (m->tag == tag) return m;
    return NULL;
}

static const char *what_of(int64_t tag) {
    return tag < 0 ? "replica exchange" : "all_reduce";
}

/* Leaves member's buffer at the meeting `tag` (made by whoever comes first); the lock is held. */
static eg_status arrive(member *me, int64_t tag, void *data, int64_t count, eg_dtype dtype) {
    eg__local_group *g = me->group;
    if (g->failed >= 0)
        return eg__error(EG_ERR_STATE, "%s: replica %d failed: %s", what_of(tag), g->failed,
                         g->failed_why);
    meeting *m = find_meeting(g, tag);
    if (!m) {
        m = calloc(1, sizeof *m);
        if (!m) return eg__error(EG_ERR_OUT_OF_MEMORY, "%s: out of host memory", what_of(tag));
        m->tag = tag;
        m->count = count;
        m->dtype = dtype;
        m->next = g->meetings;
        g->meetings = m;
    }
    if (m->joined[me->index])
        return eg__error(EG_ERR_STATE, "%s (tag %lld): replica %d started it twice", what_of(tag),
                         (long long)tag, me->index);
    if (m->count != count || m->dtype != dtype) {
        int other = 0;
        while (other < g->n && !m->joined[other]) other++;
        return eg__error(EG_ERR_SHAPE,
                         "%s (tag %lld): replica %d gives %lld %s, replica %d gave %lld %s (the "
                         "replicas' steps differ)",
                         what_of(tag), (long long)tag, me->index, (long long)count,
                         eg_dtype_name(dtype), other, (long long)m->count, eg_dtype_name(m->dtype));
    }
    m->data[me->index] = data;
    m->joined[me->index] = true;
    m->arrived++;
    pthread_cond_broadcast(&g->changed);
    return EG_OK;
}

static struct timespec deadline_after(double seconds) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    double whole = (double)(int64_t)seconds;
    t.tv_sec += (time_t)whole;
    t.tv_nsec += (long)((seconds - whole) * 1e9);
    if (t.tv_nsec >= 1000000000L) {
        t.tv_sec++;
        t.tv_nsec -= 1000000000L;
    }
    return t;
}

/* Waits (lock held) until *counter reaches the group's size; an error names who is missing. */
static eg_status await_all(member *me, meeting *m, const int *counter,
                           const struct timespec *until) {
    eg__local_group *g = me->group;
    while (*counter < g->n) {
        if (g->failed >= 0)
            return eg__error(EG_ERR_STATE, "%s: replica %d failed: %s", what_of(m->tag), g->failed,
                             g->failed_why);
        int rc = pthread_cond_timedwait(&g->changed, &g->lock, until);
        if (rc == ETIMEDOUT && *counter < g->n) {
            char missing[256] = "";
            size_t used = 0;
            for (int i = 0; i < g->n && used < sizeof missing; i++)
                if (!m->joined[i])
                    used += (size_t)snprintf(missing + used, sizeof missing - used, "%s%d",
                                             used ? ", " : "", i);
            return eg__error(EG_ERR_STATE,
                             "%s (tag %lld): replica %s did not %s within %g s (the strategy's "
                             "timeout): it failed, hangs, or runs a different step",
                             what_of(m->tag), (long long)m->tag, used ? missing : "?",
                             used ? "join" : "finish", g->timeout_seconds);
        }
    }
    return EG_OK;
}

/* Counts member out of the meeting; the last one out frees it (lock held). */
static void leave(eg__local_group *g, meeting *m) {
    if (++m->left < g->n) return;
    for (meeting **p = &g->meetings; *p; p = &(*p)->next)
        if (*p == m) {
            *p = m->next;
            break;
        }
    free(m);
}

/* Elements [begin, end) summed over every member's buffer, into every buffer. */
static void sum_slice(meeting *m, int n, int64_t begin, int64_t end) {
    void *own = m->data[0];
    eg__sum_in_replica_order(m->dtype, own, (const void *const *)m->data, n, begin, end - begin);
    size_t size = eg_dtype_size(m->dtype);
    for (int j = 1; j < n; j++)
        memcpy((char *)m->data[j] + (size_t)begin * size, (char *)own + (size_t)begin * size,
               (size_t)(end - begin) * size);
}

/* What a member does at a meeting everyone reached (outside the lock). */
typedef void (*meeting_work)(meeting *m, int n, int me, void *context);

/* Does this member's work at the meeting, then waits until every member did before leaving
 * (each one's buffer is written by the others'); the lock is held on entry and on return. */
static eg_status work_then_leave(member *me, meeting *m, const struct timespec *until,
                                 meeting_work work, void *context) {
    eg__local_group *g = me->group;
    pthread_mutex_unlock(&g->lock);
    work(m, g->n, me->index, context);
    pthread_mutex_lock(&g->lock);
    m->finished++;
    pthread_cond_broadcast(&g->changed);
    eg_status status = await_all(me, m, &m->finished, until);
    if (status == EG_OK) leave(g, m);
    return status;
}

/* A reduction's work: this member's slice of the elements (by member index). */
static void sum_own_slice(meeting *m, int n, int me, void *context) {
    (void)context;
    sum_slice(m, n, m->count * me / n, m->count * (me + 1) / n);
}

static eg_status local_start(void *member_ptr, int64_t tag, void *data, int64_t count,
                             eg_dtype dtype) {
    member *me = member_ptr;
    if (dtype != EG_DTYPE_F32 && dtype != EG_DTYPE_F64)
        return eg__error(EG_ERR_DTYPE, "all_reduce: replicas sum f32 or f64, not %s",
                         eg_dtype_name(dtype));
    pthread_mutex_lock(&me->group->lock);
    eg_status status = arrive(me, tag, data, count, dtype);
    pthread_mutex_unlock(&me->group->lock);
    return status;
}

static eg_status local_wait(void *member_ptr, int64_t tag, void *data, uint64_t *completed_ns) {
    (void)data;
    member *me = member_ptr;
    eg__local_group *g = me->group;
    struct timespec until = deadline_after(g->timeout_seconds);
    pthread_mutex_lock(&g->lock);
    meeting *m = find_meeting(g, tag);
    eg_status status =
        m ? await_all(me, m, &m->arrived, &until)
          : eg__error(EG_ERR_STATE, "all_reduce (tag %lld) was never started", (long long)tag);
    if (status == EG_OK) status = work_then_leave(me, m, &until, sum_own_slice, NULL);
    pthread_mutex_unlock(&g->lock);
    if (completed_ns) *completed_ns = 0; /* the members sum while they wait */
    return status;
}

/* An exchange of host bytes: every member's buffer is at the meeting, then `copy` moves what
 * this member needs, then all leave together. */
static eg_status exchange(member *me, void *data, size_t bytes, meeting_work copy, void *context) {
    eg__local_group *g = me->group;
    struct timespec until = deadline_after(g->timeout_seconds);
    pthread_mutex_lock(&g->lock);
    int64_t tag = -1 - me->host_ops++;
    eg_status status = arrive(me, tag, data, (int64_t)bytes, EG_DTYPE_U8);
    meeting *m = status == EG_OK ? find_meeting(g, tag) : NULL;
    if (m) status = await_all(me, m, &m->arrived, &until);
    if (m && status == EG_OK) status = work_then_leave(me, m, &until, copy, context);
    pthread_mutex_unlock(&g->lock);
    return status;
}

typedef struct broadcast_context {
    int root;
} broadcast_context;

static void broadcast_copy(meeting *m, int n, int me, void *context) {
    (void)n;
    int root = ((broadcast_context *)context)->root;
    if (me != root && m->count) memcpy(m->data[me], m->data[root], (size_t)m->count);
}

static eg_status local_broadcast(void *member_ptr, void *data, size_t bytes, int root) {
    member *me = member_ptr;
    if (root < 0 || root >= me->group->n)
        return eg__error(EG_ERR_INVALID_ARGUMENT, "broadcast: no replica %d", root);
    broadcast_context context = {root};
    return exchange(me, data, bytes, broadcast_copy, &context);
}

typedef struct gather_context {
    void *recv;
} gather_context;

static void gather_copy(meeting *m, int n, int me, void *context) {
    (void)me;
    char *recv = ((gather_context *)context)->recv;
    for (int j = 0; j < n && m->count; j++)
        memcpy(recv + (size_t)j * (size_t)m->count, m->data[j], (size_t)m->count);
}

static eg_status local_all_gather(void *member_ptr, const void *send, size_t bytes, void *recv) {
    gather_context context = {recv};
    return exchange(member_ptr, (void *)send, bytes, gather_copy, &context);
}

const eg__member_ops eg__local_member_ops = {
    .reduce = {local_start, local_wait},
    .broadcast = local_broadcast,
    .all_gather = local_all_gather,
};
