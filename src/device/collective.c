#include <pthread.h>
#include <stdbool.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdlib.h>
#include <time.h>

#include "base/error.h"
#include "device/collective.h"

/* Enough for 64 logical devices' replicas and a few groups besides; handles are slots + 1. */
#define MAX_MEMBERS 256

/* How often a tag was started: a traced graph starts the tags it traced at every replay, and
 * the members must tell one replay's reduction from the next (a fast member may start the next
 * before a slow one has left the last), so each start gets the tag and its use count. */
typedef struct tag_use {
    int64_t tag, uses;
    uint64_t started_ns; /* of the last start */
    int64_t bytes;
} tag_use;

typedef struct slot {
    const eg__collective_ops *ops;
    void *member;
    atomic_llong next_tag;
    tag_use *uses;
    int n_uses, capacity;
    eg__collective_stats stats;
} slot;

static slot slots[MAX_MEMBERS];
static pthread_mutex_t slots_lock = PTHREAD_MUTEX_INITIALIZER;
static _Thread_local int64_t current_member;

int64_t eg__collective_register(const eg__collective_ops *ops, void *member) {
    pthread_mutex_lock(&slots_lock);
    for (int i = 0; i < MAX_MEMBERS; i++) {
        if (slots[i].ops) continue;
        slots[i].ops = ops;
        slots[i].member = member;
        atomic_store(&slots[i].next_tag, 0);
        slots[i].stats = (eg__collective_stats){0};
        pthread_mutex_unlock(&slots_lock);
        return i + 1;
    }
    pthread_mutex_unlock(&slots_lock);
    eg__error(EG_ERR_OUT_OF_MEMORY, "collective: more than %d replicas registered at once",
              MAX_MEMBERS);
    return 0;
}

void eg__collective_unregister(int64_t handle) {
    if (handle < 1 || handle > MAX_MEMBERS) return;
    pthread_mutex_lock(&slots_lock);
    slot *sl = &slots[handle - 1];
    sl->ops = NULL;
    sl->member = NULL;
    free(sl->uses);
    sl->uses = NULL;
    sl->n_uses = sl->capacity = 0;
    pthread_mutex_unlock(&slots_lock);
}

int64_t eg__collective_current(void) {
    return current_member;
}

void eg__collective_set_current(int64_t handle) {
    current_member = handle;
}

int64_t eg__collective_next_tag(int64_t handle) {
    if (handle < 1 || handle > MAX_MEMBERS) return 0;
    return atomic_fetch_add(&slots[handle - 1].next_tag, 1);
}

uint64_t eg__collective_now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* The slot's table and member, read under the lock (a group freed meanwhile reads as unknown),
 * and the name of this use of `tag`: a start counts a new use (at started_ns, of `bytes`), a
 * wait names the last. */
static eg_status lookup(int64_t handle, int64_t tag, bool start, int64_t bytes,
                        const eg__collective_ops **ops, void **member, int64_t *unique) {
    *ops = NULL;
    eg_status status = EG_OK;
    if (handle >= 1 && handle <= MAX_MEMBERS) {
        pthread_mutex_lock(&slots_lock);
        slot *sl = &slots[handle - 1];
        *ops = sl->ops;
        *member = sl->member;
        int k = 0;
        while (k < sl->n_uses && sl->uses[k].tag != tag) k++;
        if (*ops && k == sl->n_uses) {
            if (sl->n_uses == sl->capacity) {
                int capacity = sl->capacity ? 2 * sl->capacity : 16;
                tag_use *grown = realloc(sl->uses, sizeof *grown * (size_t)capacity);
                if (!grown) {
                    status = eg__error(EG_ERR_OUT_OF_MEMORY, "all_reduce: out of host memory");
                } else {
                    sl->uses = grown;
                    sl->capacity = capacity;
                }
            }
            if (status == EG_OK) sl->uses[sl->n_uses++] = (tag_use){.tag = tag};
        }
        if (*ops && status == EG_OK) {
            if (start) {
                sl->uses[k].uses++;
                sl->uses[k].started_ns = eg__collective_now_ns();
                sl->uses[k].bytes = bytes;
            }
            /* tags stay below 2^32 (a counter per replica); uses fill the high bits */
            *unique = (sl->uses[k].uses << 32) | (tag & 0xFFFFFFFFll);
        }
        pthread_mutex_unlock(&slots_lock);
    }
    if (status != EG_OK) return status;
    if (!*ops)
        return eg__error(EG_ERR_STATE,
                         "all_reduce: replica handle %lld names no group (was its strategy freed?)",
                         (long long)handle);
    return EG_OK;
}

/* The statistics' bytes per element (core's eg_dtype_size sits above this layer; groups sum f32
 * and f64 only, the rest is for completeness). */
static int64_t element_bytes(eg_dtype dtype) {
    switch (dtype) {
    case EG_DTYPE_F64:
    case EG_DTYPE_I64:
        return 8;
    case EG_DTYPE_F16:
    case EG_DTYPE_BF16:
        return 2;
    case EG_DTYPE_U8:
    case EG_DTYPE_BOOL:
    case EG_DTYPE_I8:
        return 1;
    default:
        return 4;
    }
}

eg_status eg__collective_start(int64_t handle, int64_t tag, void *data, int64_t count,
                               eg_dtype dtype) {
    if (handle == 0) return EG_OK;
    const eg__collective_ops *ops;
    void *member;
    int64_t unique;
    int64_t bytes = count * element_bytes(dtype);
    eg_status status = lookup(handle, tag, true, bytes, &ops, &member, &unique);
    return status == EG_OK ? ops->start(member, unique, data, count, dtype) : status;
}

/* Counts a finished reduction of `tag` in handle's statistics. */
static void count_reduction(int64_t handle, int64_t tag, uint64_t wait_began_ns,
                            uint64_t completed_ns) {
    uint64_t returned_ns = eg__collective_now_ns();
    pthread_mutex_lock(&slots_lock);
    slot *sl = &slots[handle - 1];
    for (int k = 0; sl->ops && k < sl->n_uses; k++) {
        if (sl->uses[k].tag != tag) continue;
        /* completed 0: the members summed in their waits, so it was in flight only there; one
         * completed while its replica waited is in flight until the wait returns (the wake-up
         * is part of what the replica waited for) */
        uint64_t started = completed_ns ? sl->uses[k].started_ns : wait_began_ns;
        uint64_t done = completed_ns && completed_ns < wait_began_ns ? completed_ns : returned_ns;
        done = done > started ? done : started;
        sl->stats.reductions++;
        sl->stats.bytes += sl->uses[k].bytes;
        sl->stats.in_flight_ns += done - started;
        sl->stats.exposed_ns += returned_ns - wait_began_ns;
        break;
    }
    pthread_mutex_unlock(&slots_lock);
}

void eg__collective_stats_add(int64_t handle, eg__collective_stats *stats, bool reset) {
    if (handle < 1 || handle > MAX_MEMBERS) return;
    pthread_mutex_lock(&slots_lock);
    eg__collective_stats *own = &slots[handle - 1].stats;
    stats->reductions += own->reductions;
    stats->bytes += own->bytes;
    stats->in_flight_ns += own->in_flight_ns;
    stats->exposed_ns += own->exposed_ns;
    if (reset) *own = (eg__collective_stats){0};
    pthread_mutex_unlock(&slots_lock);
}

eg_status eg__collective_wait(int64_t handle, int64_t tag, void *data) {
    if (handle == 0) return EG_OK;
    const eg__collective_ops *ops;
    void *member;
    int64_t unique;
    eg_status status = lookup(handle, tag, false, 0, &ops, &member, &unique);
    if (status != EG_OK) return status;
    uint64_t began = eg__collective_now_ns(), completed = 0;
    status = ops->wait(member, unique, data, &completed);
    if (status == EG_OK) count_reduction(handle, tag, began, completed);
    return status;
}
