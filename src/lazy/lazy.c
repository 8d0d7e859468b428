/* Lazy mode: recording ops without running them, and realizing what is read.
 *
 * A realization collects the storage-less tensors the requested ones depend on, in an order
 * where inputs come first, and gives each a role:
 *  - kept: gets storage for good (the requested tensors, and intermediates somebody else holds);
 *  - temporary: gets storage while a later op needs it, then gives it back, so buffers are
 *    shared by liveness through the caching allocator (the node stays, to recompute on a read);
 *  - inlined: an elementwise op whose every consumer is an elementwise op of the same shape runs
 *    inside its consumer's fused loop and never gets a buffer;
 *  - view: shares its input's storage.
 * The roles depend only on the graph's structure, so they are cached by it: a training loop
 * plans its step once. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "base/idmap.h"
#include "dispatch/dispatch.h"
#include "eagle/runtime.h"
#include "base/error.h"
#include "lazy/internal.h"

_Thread_local int eg__lazy_depth;
static _Thread_local eg_lazy_stats thread_stats;

/* A write through eg_tensor_data's pointer is a write in place like an assign: readers that are
 * still pending get a snapshot. A traced graph instead reads the tensor live at every replay,
 * so while tracing nothing is redirected. */
static eg_status before_host_write(eg_tensor *t) {
    return eg__graph_tracing() ? EG_OK : eg__lazy_before_write(t);
}

void eg_lazy_begin(void) {
    /* before any op is recorded, hence before any tensor has a lazy reader */
    atomic_store_explicit(&eg__before_host_write, before_host_write, memory_order_release);
    eg__lazy_depth++;
}

eg_status eg_lazy_end(void) {
    if (eg__lazy_depth == 0) return eg__error(EG_ERR_STATE, "lazy_end: not in lazy mode");
    eg__lazy_depth--;
    return EG_OK;
}

bool eg_lazy_active(void) {
    return eg__lazy_depth > 0;
}
bool eg_tensor_is_realized(const eg_tensor *t) {
    return t && t->storage;
}
void eg_lazy_stats_get(eg_lazy_stats *out) {
    if (out) *out = thread_stats;
}

/* ---- nodes ---- */

/* Every pending node, so that a write barrier can find the readers of a tensor. Nodes may be
 * freed by any thread (the last release of their tensor), hence a mutex. */
static pthread_mutex_t pending_mutex = PTHREAD_MUTEX_INITIALIZER;
static eg__lazy_node *pending_head;

static void pending_add(eg__lazy_node *node) {
    pthread_mutex_lock(&pending_mutex);
    node->prev = NULL;
    node->next = pending_head;
    if (pending_head) pending_head->prev = node;
    pending_head = node;
    node->pending = true;
    pthread_mutex_unlock(&pending_mutex);
}

static void pending_remove(eg__lazy_node *node) {
    pthread_mutex_lock(&pending_mutex);
    if (node->pending) {
        if (node->prev)
            node->prev->next = node->next;
        else
            pending_head = node->next;
        if (node->next) node->next->prev = node->prev;
        node->pending = false;
    }
    pthread_mutex_unlock(&pending_mutex);
}

void eg__lazy_unpend(eg__lazy_node *node) {
    pending_remove(node);
}

static void free_attached_node(void *node) {
    eg__lazy_node_free(node);
}
static eg_status realize_one(const eg_tensor *t);
static const eg__attachment_ops node_ops = {free_attached_node, realize_one};

static eg__lazy_node *node_new(int n_inputs) {
    eg__lazy_node *node = calloc(1, sizeof *node + (size_t)n_inputs * sizeof(eg_tensor *));
    if (!node) {
        eg__error(EG_ERR_OUT_OF_MEMORY, "lazy: out of host memory for a node");
        return NULL;
    }
    node->ops = &node_ops;
    node->inputs = (eg_tensor **)(node + 1);
    node->n_inputs = n_inputs;
    node->placeholder = -1;
    return node;
}

eg_tensor *eg__lazy_record(eg__op op, int n_inputs, const eg_tensor *const *inputs,
                           const eg__attrs *attrs, const eg__meta *meta, const eg_device *device) {
    eg__lazy_node *node = node_new(n_inputs);
    if (!node) return NULL;
    eg_tensor *t = eg__tensor_lazy(meta, device);
    if (!t) {
        free(node);
        return NULL;
    }
    node->op = op;
    node->is_view = meta->is_view;
    if (attrs) node->attrs = *attrs;
    for (int i = 0; i < n_inputs; i++) {
        node->inputs[i] = (eg_tensor *)inputs[i];
        eg__ref(inputs[i]);
        atomic_fetch_add(&node->inputs[i]->lazy_consumers, 1);
    }
    t->lazy = node;
    pending_add(node);
    if (eg__graph_tracing()) eg__graph_note(t); /* a session graph keeps what it records */
    return t;
}

eg_tensor *eg__lazy_placeholder(const eg_tensor *like, int index) {
    eg__lazy_node *node = node_new(0);
    if (!node) return NULL;
    eg__meta meta = {.dtype = like->dtype, .n_dims = like->n_dims};
    memcpy(meta.shape, like->shape, sizeof meta.shape);
    eg_tensor *t = eg__tensor_lazy(&meta, like->device);
    if (!t) {
        free(node);
        return NULL;
    }
    node->placeholder = index;
    t->lazy = node;
    return t;
}

void eg__lazy_node_free(eg__lazy_node *node) {
    pending_remove(node);
    for (int i = 0; i < node->n_inputs; i++) {
        atomic_fetch_sub(&node->inputs[i]->lazy_consumers, 1);
        eg__unref(node->inputs[i]);
    }
    free(node);
}

eg_status eg__lazy_before_write(eg_tensor *t) {
    if (atomic_load(&t->lazy_consumers) == 0) return EG_OK;
    bool has_pending_reader = false;
    pthread_mutex_lock(&pending_mutex);
    for (eg__lazy_node *node = pending_head; node && !has_pending_reader; node = node->next)
        for (int i = 0; i < node->n_inputs; i++) has_pending_reader |= node->inputs[i] == t;
    pthread_mutex_unlock(&pending_mutex);
    if (!has_pending_reader) return EG_OK; /* e.g. only a traced graph reads it */
    eg__scope_suspend();
    int saved_depth = eg__lazy_depth;
    eg__lazy_depth = 0; /* the snapshot is computed now */
    eg_tensor *snapshot = eg__tensor_alloc(t->dtype, t->n_dims, t->shape, t->device);
    eg__lazy_depth = saved_depth;
    eg__scope_resume();
    if (!snapshot) return eg_last_status();
    const eg_tensor *source[1] = {t};
    eg__kernel_call copy = {EG__OP_COPY, 1, source, snapshot, NULL};
    eg_status status = snapshot->n_elems ? eg__launch(&copy) : EG_OK;
    if (status == EG_OK) {
        pthread_mutex_lock(&pending_mutex);
        for (eg__lazy_node *node = pending_head; node; node = node->next)
            for (int i = 0; i < node->n_inputs; i++) {
                if (node->inputs[i] != t) continue;
                node->inputs[i] = snapshot;
                eg__ref(snapshot);
                atomic_fetch_add(&snapshot->lazy_consumers, 1);
                atomic_fetch_sub(&t->lazy_consumers, 1);
                eg__unref(t); /* t is the caller's: this never frees it */
            }
        pthread_mutex_unlock(&pending_mutex);
    }
    eg__unref(snapshot);
    return status;
}

bool eg__lazy_is_internal(const eg_tensor *t, int own_references) {
    long held = atomic_load(&t->refcount) - atomic_load(&t->lazy_consumers) - (t->scope ? 1 : 0) -
                own_references;
    return held <= 0;
}

/* ---- planning ---- */

typedef enum role { ROLE_KEPT, ROLE_TEMPORARY, ROLE_INLINED, ROLE_VIEW } role;

typedef struct plan_entry {
    eg_tensor *tensor;
    role role;
    bool target;
    bool keep;     /* keeps its storage after the realization (targets, tensors held elsewhere) */
    int last_use;  /* position after which a temporary's storage is given back */
    int next_free; /* the next entry given back at the same position, -1 at the end */
} plan_entry;

typedef struct plan {
    plan_entry *entries;
    int n, capacity;
    eg__idmap index; /* tensor id -> position + 1 */
} plan;

static int position_of(const plan *p, const eg_tensor *t) {
    void *value = eg__idmap_get(&p->index, t->id);
    return value ? (int)(intptr_t)value - 1 : -1;
}

static eg_status plan_push(plan *p, eg_tensor *t) {
    if (p->n == p->capacity) {
        int capacity = p->capacity ? 2 * p->capacity : 64;
        plan_entry *entries = realloc(p->entries, sizeof *entries * (size_t)capacity);
        if (!entries) return eg__error(EG_ERR_OUT_OF_MEMORY, "lazy: out of host memory");
        p->entries = entries;
        p->capacity = capacity;
    }
    if (!eg__idmap_put(&p->index, t->id, (void *)(intptr_t)(p->n + 1)))
        return eg__error(EG_ERR_OUT_OF_MEMORY, "lazy: out of host memory");
    eg__ref(t); /* the realization's own reference: nothing vanishes under it */
    p->entries[p->n++] = (plan_entry){.tensor = t, .last_use = -1};
    return EG_OK;
}

/* Depth-first from the targets; inputs are placed before the tensors that read them. An
 * explicit stack keeps deep graphs off the C stack. */
static eg_status collect_ex(plan *p, int n_targets, const eg_tensor *const *targets,
                            bool placeholders_are_leaves);
static eg_status collect(plan *p, int n_targets, const eg_tensor *const *targets) {
    return collect_ex(p, n_targets, targets, false);
}

static bool is_leaf(const eg_tensor *t, bool placeholders_are_leaves) {
    return t->storage || (placeholders_are_leaves && t->lazy && t->lazy->placeholder >= 0);
}

eg_status eg__lazy_topo_order(int n_targets, const eg_tensor *const *targets, eg_tensor ***order,
                              int *n) {
    plan p = {0};
    eg_status status = collect_ex(&p, n_targets, targets, true);
    *order = NULL;
    *n = 0;
    if (status == EG_OK && p.n > 0) {
        *order = malloc(sizeof **order * (size_t)p.n);
        if (!*order) status = eg__error(EG_ERR_OUT_OF_MEMORY, "graph: out of host memory");
    }
    for (int i = 0; i < p.n; i++) {
        if (status == EG_OK)
            (*order)[i] = p.entries[i].tensor; /* keeps the collect reference */
        else
            eg__unref(p.entries[i].tensor);
    }
    if (status == EG_OK) *n = p.n;
    free(p.entries);
    eg__idmap_clear(&p.index);
    return status;
}

static eg_status collect_ex(plan *p, int n_targets, const eg_tensor *const *targets,
                            bool placeholders_are_leaves) {
    typedef struct frame {
        eg_tensor *tensor;
        int next_input;
    } frame;
    enum { LOCAL = 64 };
    frame local[LOCAL]; /* deeper graphs move to the heap */
    int capacity = LOCAL, depth = 0;
    frame *stack = local;
    eg__idmap visiting = {0};
    eg_status status = EG_OK;
    for (int i = 0; i < n_targets && status == EG_OK; i++) {
        eg_tensor *target = (eg_tensor *)targets[i];
        if (is_leaf(target, placeholders_are_leaves) || position_of(p, target) >= 0) continue;
        stack[depth++] = (frame){target, 0};
        while (depth > 0 && status == EG_OK) {
            frame *top = &stack[depth - 1];
            eg__lazy_node *node = top->tensor->lazy;
            if (!node || node->placeholder >= 0) {
                status = eg__error(EG_ERR_STATE,
                                   "lazy: a tensor has neither storage nor a way "
                                   "to compute it (a graph placeholder used outside its call?)");
                break;
            }
            if (top->next_input < node->n_inputs) {
                eg_tensor *input = node->inputs[top->next_input++];
                if (is_leaf(input, placeholders_are_leaves) || position_of(p, input) >= 0) continue;
                if (eg__idmap_contains(&visiting, input->id)) continue;
                if (depth == capacity) {
                    capacity *= 2;
                    frame *grown = stack == local
                                       ? malloc(sizeof *stack * (size_t)capacity)
                                       : realloc(stack, sizeof *stack * (size_t)capacity);
                    if (grown && stack == local) memcpy(grown, local, sizeof local);
                    if (!grown) {
                        status = eg__error(EG_ERR_OUT_OF_MEMORY, "lazy: out of host memory");
                        break;
                    }
                    stack = grown;
                }
                eg__idmap_put(&visiting, input->id, input);
                stack[depth++] = (frame){input, 0};
                continue;
            }
            status = plan_push(p, top->tensor);
            depth--;
        }
    }
    if (stack != local) free(stack);
    eg__idmap_clear(&visiting);
    return status;
}

bool eg__lazy_fusable(const eg_tensor *t) {
    /* check numerics names the op that made a NaN: each op runs on its own while it is on */
    return t->lazy && !t->lazy->is_view && t->lazy->placeholder < 0 && !eg_check_numerics() &&
           eg__backend_of(t->device)->fusable && eg__backend_of(t->device)->fusable(t->lazy->op) &&
           t->lazy->n_inputs <= 3;
}

static bool same_shape(const eg_tensor *a, const eg_tensor *b) {
    return a->n_dims == b->n_dims &&
           memcmp(a->shape, b->shape, sizeof(int64_t) * (size_t)a->n_dims) == 0;
}

/* Whether a node reads a variable directly (something written in place later). */
static bool reads_variable(const eg__lazy_node *node) {
    for (int j = 0; j < node->n_inputs; j++)
        if (node->inputs[j]->variable) return true;
    return false;
}

/* Keeps every fused group within EG__FUSED_MAX_MEMBERS ops (what run_node gathers and a
 * compiled group takes): an entry's group counts itself and its inlined inputs' groups (shared
 * ones counted once per path: an upper bound), and while a group would be larger its largest
 * inlined input becomes a temporary of its own, the root of a group of its own size. */
static void cap_groups(plan *p) {
    int local[256];
    int *size = p->n <= 256 ? local : malloc(sizeof *size * (size_t)p->n);
    if (!size) { /* no fusion at all is always within the bound */
        for (int i = 0; i < p->n; i++)
            if (p->entries[i].role == ROLE_INLINED) p->entries[i].role = ROLE_TEMPORARY;
        return;
    }
    for (int i = 0; i < p->n; i++) {
        size[i] = 1;
        const eg__lazy_node *node = p->entries[i].tensor->lazy;
        for (;;) {
            int total = 1, largest = -1;
            for (int j = 0; j < node->n_inputs; j++) {
                int at = position_of(p, node->inputs[j]);
                if (at < 0 || p->entries[at].role != ROLE_INLINED) continue;
                total += size[at];
                if (largest < 0 || size[at] > size[largest]) largest = at;
            }
            size[i] = total;
            if (total <= EG__FUSED_MAX_MEMBERS || largest < 0) break;
            plan_entry *demoted = &p->entries[largest]; /* as assign_roles places a buffer */
            demoted->keep = reads_variable(demoted->tensor->lazy);
            demoted->role = demoted->keep ? ROLE_KEPT : ROLE_TEMPORARY;
        }
    }
    if (size != local) free(size);
}

/* Roles, from the consumers down to the producers. */
static void assign_roles(plan *p, int n_targets, const eg_tensor *const *targets) {
    for (int i = 0; i < n_targets; i++) {
        int at = position_of(p, targets[i]);
        if (at >= 0) p->entries[at].target = true;
    }
    /* consumers of each entry, as counts and a flag "all fusable with the same shape" */
    int *n_consumers = calloc((size_t)p->n, sizeof *n_consumers);
    bool *fusable_consumers = malloc((size_t)p->n * sizeof *fusable_consumers);
    if (!n_consumers || !fusable_consumers) { /* plan without fusion */
        for (int i = 0; i < p->n; i++) {
            p->entries[i].keep = true;
            p->entries[i].role = p->entries[i].tensor->lazy->is_view ? ROLE_VIEW : ROLE_KEPT;
        }
        free(n_consumers);
        free(fusable_consumers);
        return;
    }
    for (int i = 0; i < p->n; i++) fusable_consumers[i] = true;
    for (int i = 0; i < p->n; i++) {
        const eg__lazy_node *node = p->entries[i].tensor->lazy;
        for (int j = 0; j < node->n_inputs; j++) {
            int at = position_of(p, node->inputs[j]);
            if (at < 0) continue;
            n_consumers[at]++;
            if (!eg__lazy_fusable(p->entries[i].tensor) ||
                !same_shape(p->entries[i].tensor, p->entries[at].tensor))
                fusable_consumers[at] = false;
        }
    }
    for (int i = 0; i < p->n; i++) {
        plan_entry *e = &p->entries[i];
        /* Kept: requested, held by someone, or read by pending ops outside this realization
         * (freeing it now would mean computing it again for them). */
        e->keep = e->target || !eg__lazy_is_internal(e->tensor, 1) ||
                  atomic_load(&e->tensor->lazy_consumers) > n_consumers[i];
        if (!e->keep && eg__lazy_fusable(e->tensor) && n_consumers[i] > 0 && fusable_consumers[i] &&
            !e->tensor->lazy->is_view) {
            e->role = ROLE_INLINED;
            continue;
        }
        /* A buffer that reads a variable is kept too: left pending, its node would make the
         * next write to the variable (an optimizer step) copy the variable for it; kept, it
         * costs only its own (usually smaller) memory until its tensor dies, as in eager mode.
         * A view of a variable kept shares its storage, as an eager view does. */
        e->keep = e->keep || reads_variable(e->tensor->lazy);
        if (e->tensor->lazy->is_view)
            e->role = ROLE_VIEW;
        else
            e->role = e->keep ? ROLE_KEPT : ROLE_TEMPORARY;
    }
    free(n_consumers);
    free(fusable_consumers);
    cap_groups(p);
}

/* The position at which each computed entry is last read. Inlined entries are read when their
 * consumers' fused loops run, i.e. at the consumers' own last-read positions. */
static void compute_last_uses(plan *p) {
    for (int i = p->n - 1; i >= 0; i--) {
        plan_entry *e = &p->entries[i];
        int runs_at = e->role == ROLE_INLINED ? e->last_use : i;
        const eg__lazy_node *node = e->tensor->lazy;
        for (int j = 0; j < node->n_inputs; j++) {
            int at = position_of(p, node->inputs[j]);
            if (at >= 0 && runs_at > p->entries[at].last_use) p->entries[at].last_use = runs_at;
        }
    }
}

/* ---- execution ---- */

/* The inlined producers of root, inputs first, root last. */
static int gather_group(plan *p, int root_at, eg_tensor **members, int capacity) {
    int n = 0;
    int stack[256], depth = 0;
    bool local_seen[256];
    bool *seen =
        p->n <= 256 ? memset(local_seen, 0, sizeof local_seen) : calloc((size_t)p->n, sizeof *seen);
    if (!seen) return -1;
    /* Collect the inlined entries reachable from root through inlined entries, then sort them
     * by plan position, which is a valid evaluation order. */
    stack[depth++] = root_at;
    while (depth > 0) {
        int at = stack[--depth];
        const eg__lazy_node *node = p->entries[at].tensor->lazy;
        for (int j = 0; j < node->n_inputs; j++) {
            int input = position_of(p, node->inputs[j]);
            if (input < 0 || p->entries[input].role != ROLE_INLINED || seen[input]) continue;
            seen[input] = true;
            if (depth < 256) stack[depth++] = input;
        }
    }
    for (int i = 0; i < root_at && n < capacity - 1; i++)
        if (seen[i]) members[n++] = p->entries[i].tensor;
    members[n++] = p->entries[root_at].tensor;
    if (seen != local_seen) free(seen);
    return n;
}

static eg_status run_node(plan *p, int at) {
    plan_entry *e = &p->entries[at];
    eg_tensor *t = e->tensor;
    const eg__lazy_node *node = t->lazy;
    if (e->role == ROLE_VIEW) {
        eg_tensor *base = node->inputs[0];
        if (!base->storage)
            return eg__error(EG_ERR_INTERNAL, "lazy: view of a tensor not computed");
        t->storage = base->storage;
        eg__storage_ref(t->storage);
        return EG_OK;
    }
    eg_status status = eg__tensor_attach_storage(t);
    if (status != EG_OK) return status;
    thread_stats.n_nodes++;
    thread_stats.n_kernels++;
    if (e->role == ROLE_TEMPORARY) thread_stats.n_temporaries++;
    if (t->n_elems == 0) return EG_OK;
    if (eg__lazy_fusable(t)) {
        eg_tensor *members[EG__FUSED_MAX_MEMBERS];
        int n = gather_group(p, at, members, EG__FUSED_MAX_MEMBERS);
        if (n < 0) return eg__error(EG_ERR_OUT_OF_MEMORY, "lazy: out of host memory");
        if (n > 1) {
            thread_stats.n_nodes += (uint64_t)(n - 1);
            thread_stats.n_fused_nodes += (uint64_t)(n - 1);
            return eg__lazy_run_fused(t, n, members);
        }
    }
    eg__kernel_call call = {node->op, node->n_inputs, eg__const_tensors(node->inputs), t,
                            &node->attrs};
    return eg__launch(&call);
}

static eg_status execute(plan *p) {
    int local[256];
    int *frees_at = p->n <= 256 ? local : malloc(sizeof *frees_at * (size_t)p->n);
    if (!frees_at) return eg__error(EG_ERR_OUT_OF_MEMORY, "lazy: out of host memory");
    for (int i = 0; i < p->n; i++) frees_at[i] = -1;
    for (int j = 0; j < p->n; j++) {
        plan_entry *e = &p->entries[j];
        e->next_free = -1;
        if (e->keep || e->role == ROLE_INLINED || e->last_use < 0) continue;
        e->next_free = frees_at[e->last_use];
        frees_at[e->last_use] = j;
    }
    eg_status status = EG_OK;
    for (int i = 0; i < p->n && status == EG_OK; i++) {
        if (p->entries[i].role == ROLE_INLINED) continue;
        status = run_node(p, i);
        /* give back the temporaries whose last reader just ran */
        for (int j = frees_at[i]; j >= 0; j = p->entries[j].next_free)
            eg__tensor_detach_storage(p->entries[j].tensor);
    }
    if (frees_at != local) free(frees_at);
    return status;
}

static void finish(plan *p, eg_status status) {
    for (int i = 0; i < p->n; i++) {
        plan_entry *e = &p->entries[i];
        if (status == EG_OK && e->keep && e->tensor->storage) {
            /* computed for good: the recipe and its inputs can go */
            eg__lazy_node *node = e->tensor->lazy;
            e->tensor->lazy = NULL;
            eg__lazy_node_free(node);
        } else {
            eg__tensor_detach_storage(e->tensor);
        }
    }
    for (int i = 0; i < p->n; i++) eg__unref(p->entries[i].tensor);
    free(p->entries);
    eg__idmap_clear(&p->index);
}

/* ---- the schedule cache ----
 * A realization's roles and lifetimes follow from its structure alone: per entry the op, its
 * shape, dtype, whether it must be kept, and where its inputs come from (attributes change
 * neither roles nor lifetimes: they are read from the nodes when the kernels run). That
 * structure is the key; a training loop that builds the same step every time plans it once. */

enum { CACHE_SLOTS = 8 };

typedef struct cached_schedule {
    int64_t *key;
    size_t key_length;
    int n;
    role *roles;
    bool *keeps;
    int *last_uses;
    uint64_t last_used; /* for eviction */
} cached_schedule;

static _Thread_local cached_schedule schedule_cache[CACHE_SLOTS];
static _Thread_local uint64_t cache_clock;

/* The structural key of a collected plan (roles not yet assigned: keep is computed here), in
 * buffer when it fits in `capacity` values, else malloc'd. */
static int64_t *schedule_key(plan *p, int64_t *buffer, size_t capacity, size_t *length) {
    size_t total = 1;
    for (int i = 0; i < p->n; i++)
        total += 10 + (size_t)p->entries[i].tensor->n_dims +
                 (size_t)p->entries[i].tensor->lazy->n_inputs;
    int64_t *key = total <= capacity ? buffer : malloc(sizeof *key * total);
    if (!key) return NULL;
    size_t k = 0;
    for (int i = 0; i < p->n; i++) {
        const plan_entry *e = &p->entries[i];
        const eg_tensor *t = e->tensor;
        const eg__lazy_node *node = t->lazy;
        key[k++] = node->op;
        key[k++] = t->dtype;
        key[k++] = t->n_dims;
        for (int d = 0; d < t->n_dims; d++) key[k++] = t->shape[d];
        key[k++] = node->is_view;
        key[k++] = e->target || !eg__lazy_is_internal(t, 1);
        key[k++] = atomic_load(&t->lazy_consumers);
        key[k++] = node->n_inputs;
        for (int j = 0; j < node->n_inputs; j++) { /* leaves: -1, variables -3 */
            int at = position_of(p, node->inputs[j]);
            key[k++] = at >= 0 ? at : node->inputs[j]->variable ? -3 : -1;
        }
        key[k++] = -2; /* separator: entries differ in length */
    }
    *length = k;
    return key;
}

static cached_schedule *cache_find(const int64_t *key, size_t length, int n) {
    for (int i = 0; i < CACHE_SLOTS; i++) {
        cached_schedule *c = &schedule_cache[i];
        if (c->key && c->n == n && c->key_length == length &&
            memcmp(c->key, key, length * sizeof *key) == 0)
            return c;
    }
    return NULL;
}

/* A thread's cache is freed when the thread ends (a strategy's replica threads come and go). */
static pthread_key_t cache_exit_key;
static pthread_once_t cache_exit_once = PTHREAD_ONCE_INIT;
static bool cache_exit_ok;

static void cache_free_thread(void *unused) {
    (void)unused;
    for (int i = 0; i < CACHE_SLOTS; i++) {
        cached_schedule *c = &schedule_cache[i];
        free(c->key);
        free(c->roles);
        free(c->keeps);
        free(c->last_uses);
        memset(c, 0, sizeof *c);
    }
}

static void cache_exit_init(void) {
    cache_exit_ok = pthread_key_create(&cache_exit_key, cache_free_thread) == 0;
}

/* Stores p's roles under a copy of key. */
static void cache_store(plan *p, const int64_t *key, size_t length) {
    pthread_once(&cache_exit_once, cache_exit_init);
    if (cache_exit_ok && !pthread_getspecific(cache_exit_key))
        pthread_setspecific(cache_exit_key, schedule_cache);
    cached_schedule *slot = &schedule_cache[0];
    for (int i = 1; i < CACHE_SLOTS; i++)
        if (schedule_cache[i].last_used < slot->last_used) slot = &schedule_cache[i];
    role *roles = malloc(sizeof *roles * (size_t)p->n);
    bool *keeps = malloc(sizeof *keeps * (size_t)p->n);
    int *last_uses = malloc(sizeof *last_uses * (size_t)p->n);
    int64_t *stored_key = malloc(sizeof *key * length);
    if (!roles || !keeps || !last_uses || !stored_key) {
        free(roles);
        free(keeps);
        free(last_uses);
        free(stored_key);
        return;
    }
    memcpy(stored_key, key, sizeof *key * length);
    free(slot->key);
    free(slot->roles);
    free(slot->keeps);
    free(slot->last_uses);
    for (int i = 0; i < p->n; i++) {
        roles[i] = p->entries[i].role;
        keeps[i] = p->entries[i].keep;
        last_uses[i] = p->entries[i].last_use;
    }
    *slot = (cached_schedule){stored_key, length, p->n, roles, keeps, last_uses, ++cache_clock};
}

eg_status eg__lazy_realize(int n, const eg_tensor *const *tensors) {
    if (eg__graph_tracing())
        return eg__error(EG_ERR_STATE, "a value was read while a function was being traced; "
                                       "return it as an output of the function instead");
    plan p = {0};
    eg_status status = collect(&p, n, tensors);
    if (status == EG_OK && p.n > 0) {
        thread_stats.n_realizations++;
        for (int i = 0; i < n; i++) {
            int at = position_of(&p, tensors[i]);
            if (at >= 0) p.entries[at].target = true;
        }
        size_t length = 0;
        int64_t local_key[1024]; /* a training step's key fits: no allocation per step */
        int64_t *key = schedule_key(&p, local_key, 1024, &length);
        cached_schedule *hit = key ? cache_find(key, length, p.n) : NULL;
        if (hit) {
            thread_stats.n_schedule_hits++;
            hit->last_used = ++cache_clock;
            for (int i = 0; i < p.n; i++) {
                p.entries[i].role = hit->roles[i];
                p.entries[i].keep = hit->keeps[i];
                p.entries[i].last_use = hit->last_uses[i];
            }
        } else {
            assign_roles(&p, n, tensors);
            compute_last_uses(&p);
            if (key) cache_store(&p, key, length);
        }
        if (key != local_key) free(key);
        status = execute(&p);
    }
    finish(&p, status);
    return status;
}

static eg_status realize_one(const eg_tensor *t) {
    return eg__lazy_realize(1, &t);
}

eg_status eg_realize(int n, eg_tensor *const *tensors_in) {
    const eg_tensor *const *tensors = eg__const_tensors(tensors_in);
    if (n < 0 || (n > 0 && !tensors))
        return eg__error(EG_ERR_INVALID_ARGUMENT, "realize: bad tensor list");
    for (int i = 0; i < n; i++)
        if (!eg__check_arg(tensors[i], "realize", i)) return eg_last_status();
    return eg__lazy_realize(n, tensors);
}
