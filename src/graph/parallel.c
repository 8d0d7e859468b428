/* Parallel replay: with two or more threads, a replayed graph runs as ONE job on the thread
 * pool. Its kernels and optimizer updates become tasks ordered by what they read and write (the
 * arena's byte ranges, the variables), so independent branches of the step (the loss, the
 * accuracy, the backward pass) run side by side; the large products are split into parts (the
 * forward GEMM by panels of rows or columns as matmul.c cuts it, a weight gradient consumed by the
 * optimizer by tiles) that any thread may take. The threads claim ready work instead of being
 * handed a share, so a thread that a loaded machine starts late costs nothing but its absence, and
 * no kernel wakes the pool again.
 *
 * The bits do not depend on the thread count or on who runs what: a task starts only after
 * every earlier task (in the sequential replay's order) whose memory it reads, writes or
 * overwrites, so each task sees exactly the values it sees in the sequential replay; each kernel
 * computes the same bits wherever it runs, and a product's parts and tiles are the same
 * sub-problems as in the sequential replay. */
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dispatch/dispatch.h"
#include "eagle/runtime.h"
#include "base/threadpool.h"
#include "base/error.h"
#include "graph/internal.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define CPU_RELAX() _mm_pause()
#else
#define CPU_RELAX() ((void)0)
#endif

typedef enum {
    TASK_KERNEL, /* an entry's kernel or fused loop, whole */
    TASK_PARTS,  /* an entry's product, split into n_sub parts */
    TASK_TILES,  /* a weight gradient's product whose n_sub tiles go to the optimizer */
    TASK_UPDATE, /* a hoisted optimizer update (t->parts[part]) */
} task_kind;

typedef struct task {
    task_kind kind;
    int entry, part;
    int n_sub;
    int n_deps;
    int first_successor, n_successors; /* in plan->successors */
} task;

typedef struct region {
    const void *key; /* &arena_key for the arena, else a storage */
    size_t begin, end;
} region;

typedef struct region_list {
    region *items;
    int n, capacity;
} region_list;

struct eg__parallel_plan {
    int threads;
    bool usable;
    bool stale; /* a variable's storage moved since the plan was made */
    task *tasks;
    int n_tasks;
    int *successors;
    const eg__storage **variable_storage; /* per update part, when the plan was made */
    /* per replay */
    atomic_int *deps_left, *next_sub, *subs_left;
    atomic_int tasks_left;
    atomic_int failed;
    atomic_int first_open; /* tasks before it have all been claimed */
    eg__saved_error error;
    trace *trace;
    /* EG_GRAPH_PROFILE: each task's time per piece at its last PROFILE_STEPS replays */
    double *piece_seconds; /* this replay's sums, per task */
    float *samples;        /* [task * PROFILE_STEPS + replay % PROFILE_STEPS] */
    int64_t n_profiled;
};

enum { PROFILE_STEPS = 1024 };

static const char arena_key = 0;

static bool push(region_list *l, const void *key, size_t begin, size_t end) {
    if (l->n == l->capacity) {
        int capacity = l->capacity ? 2 * l->capacity : 8;
        region *items = realloc(l->items, sizeof *items * (size_t)capacity);
        if (!items) return false;
        l->items = items;
        l->capacity = capacity;
    }
    l->items[l->n++] = (region){key, begin, end};
    return true;
}

static bool overlap(const region_list *a, const region_list *b) {
    for (int i = 0; i < a->n; i++)
        for (int j = 0; j < b->n; j++)
            if (a->items[i].key == b->items[j].key && a->items[i].begin < b->items[j].end &&
                b->items[j].begin < a->items[i].end)
                return true;
    return false;
}

/* The memory x occupies when read at position `at`: an arena buffer, a leaf's storage, or none
 * (an input, which nothing in the graph writes; a value inlined into the reader's loop). */
static bool add_read(const trace *t, region_list *reads, const eg_tensor *x, int at) {
    int p = eg__graph_resolve(t, &x, at);
    if (p == -2) return true; /* computed inside the reader's fused loop */
    if (p == -1) {
        if (x->lazy && x->lazy->placeholder >= 0) return true;
        return !x->storage || push(reads, x->storage, 0, SIZE_MAX);
    }
    const entry *e = &t->entries[p];
    if (e->fused_part >= 0) return true; /* never exists whole; nothing reads it */
    return push(reads, &arena_key, e->offset, e->offset + e->bytes);
}

static const update_action *action_of(const trace *t, const update_part *part) {
    return t->actions[part->action].update;
}

static bool entry_regions(const trace *t, int i, region_list *reads, region_list *writes) {
    const entry *e = &t->entries[i];
    bool ok = true;
    int n_nodes = e->n_members > 0 ? e->n_members : 1;
    for (int k = 0; k < n_nodes && ok; k++) {
        const eg__lazy_node *node = e->n_members > 0 ? e->members[k]->lazy : e->tensor->lazy;
        for (int j = 0; j < node->n_inputs && ok; j++) ok = add_read(t, reads, node->inputs[j], i);
    }
    if (e->fused_part >= 0) {
        const update_part *part = &t->parts[e->fused_part];
        const eg_tensor *v = action_of(t, part)->variables[part->index];
        ok = ok && push(writes, &arena_key, e->scratch_offset, e->scratch_offset + e->bytes) &&
             push(writes, v->storage, 0, SIZE_MAX);
    } else {
        ok = ok && push(writes, &arena_key, e->offset, e->offset + e->bytes);
    }
    return ok;
}

static bool part_regions(const trace *t, const update_part *part, region_list *reads,
                         region_list *writes) {
    const update_action *u = action_of(t, part);
    return add_read(t, reads, u->grads[part->index], part->position + 1) &&
           push(writes, u->variables[part->index]->storage, 0, SIZE_MAX);
}

static void print_profile(const eg__parallel_plan *plan);

void eg__graph_parallel_free(eg__parallel_plan *plan) {
    if (!plan) return;
    if (plan->samples && plan->n_profiled > 0) print_profile(plan);
    free(plan->piece_seconds);
    free(plan->samples);
    free(plan->tasks);
    free(plan->successors);
    free(plan->variable_storage);
    free(plan->deps_left);
    free(plan->next_sub);
    free(plan->subs_left);
    free(plan);
}

/* Whether the graph can replay in parallel at all (else the sequential replay runs): what can be
 * told before binding, then with the entries bound. */
static bool static_allows(const trace *t) {
    /* parallel replay splits products through the backend's part and tile hooks */
    const eg__backend *backend = eg__backend_of(t->device);
    /* check numerics scans each result after its kernel: the sequential replay's one path */
    if (!backend->product_part_count || !backend->product_tile || getenv("EG_GRAPH_SEQUENTIAL") ||
        eg_check_numerics())
        return false;
    for (int i = 0; i < t->n_entries; i++)
        if (t->entries[i].recompute_of >= 0) return false;
    return true;
}

static bool graph_allows(const trace *t) {
    for (int p = 0; p < t->n_parts; p++) {
        const update_part *part = &t->parts[p];
        if (!part->hoisted || part->fused || part->position < 0) continue;
        if (!eg__graph_part_is_direct(t, part)) return false;
    }
    return true;
}

/* Whether an entry's kernel would run on one thread anyway: the pool splits elementwise work
 * from EG_PARALLEL_GRAIN_ELEMENTWISE elements on (reductions, by their input). */
static bool small_kernel(const entry *e) {
    int64_t largest = e->tensor->n_elems;
    int n_nodes = e->n_members > 0 ? e->n_members : 1;
    for (int k = 0; k < n_nodes; k++) {
        const eg__lazy_node *node = e->n_members > 0 ? e->members[k]->lazy : e->tensor->lazy;
        for (int j = 0; j < node->n_inputs; j++)
            if (node->inputs[j]->n_elems > largest) largest = node->inputs[j]->n_elems;
    }
    return largest <= EG_PARALLEL_GRAIN_ELEMENTWISE;
}

static void dump(const eg__parallel_plan *plan) {
    static const char *const kinds[] = {"kernel", "parts", "tiles", "update"};
    fprintf(stderr, "parallel replay on %d threads%s:\n", plan->threads,
            plan->usable ? "" : " not used (a large kernel it cannot split)");
    for (int i = 0; i < plan->n_tasks; i++) {
        const task *k = &plan->tasks[i];
        fprintf(stderr, "%3d %-7s x%-3d entry %3d %-28s waits for %d, then:", i, kinds[k->kind],
                k->n_sub, k->entry,
                eg__op_defs[plan->trace->entries[k->entry].tensor->lazy->op].name, k->n_deps);
        for (int s = 0; s < k->n_successors; s++)
            fprintf(stderr, " %d", plan->successors[k->first_successor + s]);
        fprintf(stderr, "\n");
    }
}

/* Tasks in the sequential replay's order, their parts, and who waits for whom. Called with the
 * entries bound (the update parts' gradients must be). */
static eg__parallel_plan *make_plan(trace *t, int threads) {
    eg__parallel_plan *plan = calloc(1, sizeof *plan);
    if (!plan) return NULL;
    plan->threads = threads;
    plan->trace = t;
    plan->usable = graph_allows(t);
    if (!plan->usable) return plan;
    int capacity = t->n_entries + t->n_parts + 1;
    plan->tasks = calloc((size_t)capacity, sizeof *plan->tasks);
    plan->variable_storage = calloc((size_t)t->n_parts + 1, sizeof *plan->variable_storage);
    region_list *reads = calloc((size_t)capacity, sizeof *reads);
    region_list *writes = calloc((size_t)capacity, sizeof *writes);
    bool ok = plan->tasks && plan->variable_storage && reads && writes;
    int n = 0;
    for (int p = 0; ok && p < t->n_parts; p++) {
        const update_part *part = &t->parts[p];
        plan->variable_storage[p] = action_of(t, part)->variables[part->index]->storage;
    }
    for (int i = 0; ok && i < t->n_entries; i++) {
        entry *e = &t->entries[i];
        if (e->role == ROLE_BUFFER && e->tensor->n_elems > 0) {
            task *k = &plan->tasks[n];
            *k = (task){.kind = TASK_KERNEL, .entry = i, .part = -1, .n_sub = 1};
            const eg__lazy_node *node = e->tensor->lazy;
            if (e->fused_part >= 0) {
                k->kind = TASK_TILES;
                k->n_sub = (int)eg__backend_of(e->tensor->device)->product_tile_count(e->tensor);
            } else if (e->n_members <= 1 &&
                       (node->op == EG__OP_MATMUL || node->op == EG__OP_DENSE)) {
                eg__kernel_call call = {node->op, node->n_inputs, eg__const_tensors(node->inputs),
                                        e->tensor, &node->attrs};
                int64_t parts =
                    eg__backend_of(e->tensor->device)->product_part_count(&call, threads);
                if (parts > 1) {
                    k->kind = TASK_PARTS;
                    k->n_sub = (int)parts;
                }
            }
            /* a large kernel the plan cannot split would run on one thread here, where the
             * sequential replay lets it use them all (convolutions): replay sequentially */
            if (k->kind == TASK_KERNEL && !small_kernel(e)) plan->usable = false;
            ok = entry_regions(t, i, &reads[n], &writes[n]);
            n++;
        }
        for (int q = 0; ok && q < e->n_parts; q++) {
            int p = t->part_order[e->first_part + q];
            plan->tasks[n] = (task){.kind = TASK_UPDATE, .entry = i, .part = p, .n_sub = 1};
            ok = part_regions(t, &t->parts[p], &reads[n], &writes[n]);
            n++;
        }
    }
    plan->n_tasks = n;
    /* task j before task i waits if i reads what j writes, or writes what j reads or writes */
    int n_edges = 0, edge_capacity = 0;
    for (int i = 0; ok && i < n; i++)
        for (int j = 0; j < i; j++) {
            if (!overlap(&writes[j], &reads[i]) && !overlap(&writes[j], &writes[i]) &&
                !overlap(&reads[j], &writes[i]))
                continue;
            if (n_edges == edge_capacity) {
                edge_capacity = edge_capacity ? 2 * edge_capacity : 64;
                int *grown = realloc(plan->successors, sizeof *grown * 2 * (size_t)edge_capacity);
                if (!grown) {
                    ok = false;
                    break;
                }
                plan->successors = grown;
            }
            plan->successors[2 * n_edges] = j; /* (from, to) pairs for now */
            plan->successors[2 * n_edges + 1] = i;
            n_edges++;
            plan->tasks[i].n_deps++;
        }
    /* successors grouped by their predecessor */
    int *grouped = ok ? malloc(sizeof *grouped * ((size_t)n_edges + 1)) : NULL;
    if (grouped) {
        int next = 0;
        for (int j = 0; j < n; j++) {
            plan->tasks[j].first_successor = next;
            for (int k = 0; k < n_edges; k++)
                if (plan->successors[2 * k] == j) grouped[next++] = plan->successors[2 * k + 1];
            plan->tasks[j].n_successors = next - plan->tasks[j].first_successor;
        }
    }
    free(plan->successors);
    plan->successors = grouped;
    plan->deps_left = malloc(sizeof *plan->deps_left * ((size_t)n + 1));
    plan->next_sub = malloc(sizeof *plan->next_sub * ((size_t)n + 1));
    plan->subs_left = malloc(sizeof *plan->subs_left * ((size_t)n + 1));
    ok = ok && grouped && plan->deps_left && plan->next_sub && plan->subs_left;
    for (int i = 0; reads && writes && i < capacity; i++) {
        free(reads[i].items);
        free(writes[i].items);
    }
    free(reads);
    free(writes);
    if (!ok) {
        eg__graph_parallel_free(plan);
        return NULL;
    }
    if (getenv("EG_GRAPH_DUMP")) dump(plan);
    if (getenv("EG_GRAPH_PROFILE")) {
        plan->piece_seconds = calloc((size_t)n + 1, sizeof *plan->piece_seconds);
        plan->samples = calloc((size_t)n * PROFILE_STEPS + 1, sizeof *plan->samples);
    }
    return plan;
}

static eg_status run_sub(eg__parallel_plan *plan, const task *k, int sub, int lane) {
    trace *t = plan->trace;
    entry *e = &t->entries[k->entry];
    const eg__lazy_node *node = e->tensor->lazy;
    eg__kernel_call call = {node->op, node->n_inputs, eg__const_tensors(node->inputs), e->tensor,
                            &node->attrs};
    eg_status status = EG_OK;
    switch (k->kind) {
    case TASK_KERNEL:
        return eg__graph_run_kernel(t, e, true);
    case TASK_PARTS:
        status = eg__backend_of(e->tensor->device)->product_part(&call, sub, k->n_sub);
        break;
    case TASK_TILES: {
        char *scratch = (char *)t->arena->data + e->scratch_offset +
                        (size_t)lane * (e->bytes / (size_t)e->n_scratch);
        status = eg__backend_of(e->tensor->device)
                     ->product_tile(&call, sub, scratch, eg__graph_tile_to_update,
                                    &t->parts[e->fused_part]);
        break;
    }
    case TASK_UPDATE:
        eg__graph_run_direct_part(t, &t->parts[k->part]);
        return EG_OK;
    }
    if (status != EG_OK)
        eg__op_error(node->op, status, "kernel failed on %s", e->tensor->device->name);
    return status;
}

static void finish_sub(eg__parallel_plan *plan, int i) {
    if (atomic_fetch_sub(&plan->subs_left[i], 1) != 1) return;
    const task *k = &plan->tasks[i];
    for (int s = 0; s < k->n_successors; s++)
        atomic_fetch_sub(&plan->deps_left[plan->successors[k->first_successor + s]], 1);
    atomic_fetch_sub(&plan->tasks_left, 1);
}

/* Claims a ready piece of work: true with (*task_out, *sub_out) set. Tiles need a scratch tile
 * per lane: only the lanes that have one take them. */
static bool claim(eg__parallel_plan *plan, int lane, int *task_out, int *sub_out) {
    const trace *t = plan->trace;
    int first = atomic_load(&plan->first_open);
    bool all_claimed_so_far = true;
    for (int i = first; i < plan->n_tasks; i++) {
        const task *k = &plan->tasks[i];
        if (atomic_load(&plan->next_sub[i]) >= k->n_sub) {
            if (all_claimed_so_far) { /* move the scan's start past claimed tasks */
                int expected = first;
                if (atomic_compare_exchange_weak(&plan->first_open, &expected, i + 1))
                    first = i + 1;
            }
            continue;
        }
        all_claimed_so_far = false;
        if (atomic_load(&plan->deps_left[i]) > 0) continue;
        if (k->kind == TASK_TILES && lane >= t->entries[k->entry].n_scratch) continue;
        int sub = atomic_fetch_add(&plan->next_sub[i], 1);
        if (sub >= k->n_sub) continue;
        *task_out = i;
        *sub_out = sub;
        return true;
    }
    return false;
}

static double seconds_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int compare_floats(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* How long the tasks take on `lanes` free threads that claim work as run_lane does (the first
 * ready piece in order; tiles only on lanes with a scratch tile), given each piece's time. */
static double schedule_length(const eg__parallel_plan *plan, const double *piece, int n_lanes) {
    int n = plan->n_tasks;
    int *deps = malloc(sizeof *deps * ((size_t)n + 1));
    int *next = calloc((size_t)n + 1, sizeof *next);
    int *left = malloc(sizeof *left * ((size_t)n + 1));
    double *lane_free = calloc((size_t)n_lanes, sizeof *lane_free);
    int *lane_task = malloc(sizeof *lane_task * (size_t)n_lanes);
    if (!deps || !next || !left || !lane_free || !lane_task) {
        free(deps);
        free(next);
        free(left);
        free(lane_free);
        free(lane_task);
        return -1;
    }
    for (int i = 0; i < n; i++) {
        deps[i] = plan->tasks[i].n_deps;
        left[i] = plan->tasks[i].n_sub;
    }
    for (int l = 0; l < n_lanes; l++) lane_task[l] = -1;
    int done = 0;
    double now = 0;
    while (done < n) {
        /* idle lanes take ready pieces */
        for (int l = 0; l < n_lanes; l++) {
            if (lane_task[l] >= 0) continue;
            for (int i = 0; i < n; i++) {
                const task *k = &plan->tasks[i];
                if (deps[i] > 0 || next[i] >= k->n_sub) continue;
                if (k->kind == TASK_TILES && l >= plan->trace->entries[k->entry].n_scratch)
                    continue;
                next[i]++;
                lane_task[l] = i;
                lane_free[l] = now + piece[i];
                break;
            }
        }
        /* the next piece to finish */
        int first = -1;
        for (int l = 0; l < n_lanes; l++)
            if (lane_task[l] >= 0 && (first < 0 || lane_free[l] < lane_free[first])) first = l;
        if (first < 0) break; /* cannot happen: some task is always ready or running */
        now = lane_free[first];
        int i = lane_task[first];
        lane_task[first] = -1;
        if (--left[i] == 0) {
            done++;
            const task *k = &plan->tasks[i];
            for (int s = 0; s < k->n_successors; s++)
                deps[plan->successors[k->first_successor + s]]--;
        }
    }
    free(deps);
    free(next);
    free(left);
    free(lane_free);
    free(lane_task);
    return now;
}

/* EG_GRAPH_PROFILE: each task's median time per piece, and what the schedule would take on 1..N
 * free threads (this machine may not have them free: the replays ran on one thread). */
static void print_profile(const eg__parallel_plan *plan) {
    static const char *const kinds[] = {"kernel", "parts", "tiles", "update"};
    int n = plan->n_tasks;
    int64_t steps = plan->n_profiled < PROFILE_STEPS ? plan->n_profiled : PROFILE_STEPS;
    double *piece = calloc((size_t)n + 1, sizeof *piece);
    if (!piece) return;
    double total = 0;
    fprintf(stderr, "graph profile: median time of each task's pieces over %lld replays\n",
            (long long)steps);
    for (int i = 0; i < n; i++) {
        float *samples = plan->samples + (int64_t)i * PROFILE_STEPS;
        qsort(samples, (size_t)steps, sizeof *samples, compare_floats);
        piece[i] = samples[steps / 2];
        const task *k = &plan->tasks[i];
        total += piece[i] * k->n_sub;
        fprintf(stderr, "%3d %-7s x%-3d %-28s %8.2f us\n", i, kinds[k->kind], k->n_sub,
                eg__op_defs[plan->trace->entries[k->entry].tensor->lazy->op].name, piece[i] * 1e6);
    }
    fprintf(stderr, "graph profile: tasks in sequence %.1f us", total * 1e6);
    for (int lanes_ = 2; lanes_ <= plan->threads; lanes_++) {
        double length = schedule_length(plan, piece, lanes_);
        fprintf(stderr, "; on %d free threads %.1f us (%.3fx)", lanes_, length * 1e6,
                length / total);
    }
    fprintf(stderr, "\n");
    free(piece);
}

/* Idle turns a lane spins (a scan of the tasks and a pause: 25-100 ns on the AMD EPYC we measured
 * on) before it yields the core: about a step's serial stretches (the loss and the first
 * gradients, some microseconds), short of stealing much from a thread it shares a core with. */
#define SPIN_TURNS 512

static void run_lane(eg__parallel_plan *plan, int lane) {
    int idle = 0;
    while (atomic_load(&plan->tasks_left) > 0 && !atomic_load(&plan->failed)) {
        int i, sub;
        if (!claim(plan, lane, &i, &sub)) {
            /* the work left is running elsewhere or waits for it: spin briefly, then give the
             * core away (on a loaded machine the thread we wait for may need it) */
            if (++idle < SPIN_TURNS)
                CPU_RELAX();
            else
                sched_yield();
            continue;
        }
        idle = 0;
        double start = plan->samples ? seconds_now() : 0;
        eg_status status = run_sub(plan, &plan->tasks[i], sub, lane);
        if (plan->samples) plan->piece_seconds[i] += seconds_now() - start;
        if (status != EG_OK) {
            int expected = 0;
            if (atomic_compare_exchange_strong(&plan->failed, &expected, (int)status))
                eg__error_set_aside(&plan->error); /* the message, for the calling thread */
            return;
        }
        finish_sub(plan, i);
    }
}

static void lanes(void *context, int64_t begin, int64_t end) {
    (void)end; /* run inline over all lanes: lane `begin` alone does the whole graph */
    run_lane(context, (int)begin);
}

eg_status eg__graph_run_parallel(trace *t, const eg_tensor *const *inputs, int n_inputs,
                                 bool *ran) {
    *ran = false;
    int threads = eg__num_threads();
    if (threads < 2) return EG_OK;
    eg__parallel_plan *plan = t->parallel;
    /* a graph whose input is an updated variable, or whose variables moved, is replayed as
     * traced (the plan's ordering would not see the first; the second needs a new plan) */
    for (int p = 0; p < t->n_parts; p++) {
        const update_part *part = &t->parts[p];
        const eg__storage *v = action_of(t, part)->variables[part->index]->storage;
        if (plan && plan->usable && v != plan->variable_storage[p]) plan->stale = true;
        for (int i = 0; i < n_inputs; i++)
            if (inputs[i]->storage == v) return EG_OK;
    }
    if (plan && (plan->threads != threads || plan->stale)) {
        eg__graph_parallel_free(plan);
        t->parallel = plan = NULL;
    }
    if (plan && !plan->usable) return EG_OK;
    if (!plan && !static_allows(t)) { /* remembered, so that no replay asks again */
        t->parallel = plan = calloc(1, sizeof *plan);
        if (!plan) return eg__error(EG_ERR_OUT_OF_MEMORY, "function: out of host memory");
        plan->threads = threads;
        return EG_OK;
    }
    /* bind every entry first (a new plan reads the bound gradients) */
    for (int i = 0; i < t->n_entries; i++) {
        eg_status status = eg__graph_bind_entry(t, &t->entries[i]);
        if (status != EG_OK) return status;
    }
    if (!plan) {
        t->parallel = plan = make_plan(t, threads);
        if (!plan) return eg__error(EG_ERR_OUT_OF_MEMORY, "function: out of host memory");
        if (!plan->usable) { /* the sequential replay binds them again */
            for (int i = 0; i < t->n_entries; i++) eg__tensor_detach_storage(t->entries[i].tensor);
            return EG_OK;
        }
    }
    /* the updates' hyperparameters and slots, on this thread (slots may be created) */
    for (int p = 0; p < t->n_parts; p++) {
        update_part *part = &t->parts[p];
        if (!part->hoisted || part->position < 0) continue;
        eg_status status = eg__graph_prepare_part(t, part);
        if (status != EG_OK) return status;
    }
    for (int i = 0; i < plan->n_tasks; i++) {
        atomic_store(&plan->deps_left[i], plan->tasks[i].n_deps);
        atomic_store(&plan->next_sub[i], 0);
        atomic_store(&plan->subs_left[i], plan->tasks[i].n_sub);
    }
    atomic_store(&plan->tasks_left, plan->n_tasks);
    atomic_store(&plan->failed, 0);
    atomic_store(&plan->first_open, 0);
    if (plan->samples) { /* profiling: one thread runs every task, alone */
        lanes(plan, 0, threads);
        for (int i = 0; i < plan->n_tasks; i++) {
            plan->samples[(int64_t)i * PROFILE_STEPS + plan->n_profiled % PROFILE_STEPS] =
                (float)(plan->piece_seconds[i] / plan->tasks[i].n_sub);
            plan->piece_seconds[i] = 0;
        }
        plan->n_profiled++;
    } else {
        eg__parallel_for(threads, 1, lanes, plan);
    }
    *ran = true;
    int failed = atomic_load(&plan->failed);
    if (failed) {
        eg__error_restore(&plan->error);
        return (eg_status)failed;
    }
    return EG_OK;
}
