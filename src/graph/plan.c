/* Planning a traced graph once, for every replay:
 *   1. common subexpressions: an op with the same op, attrs and inputs as an earlier one shares
 *      its result (ROLE_ALIAS);
 *   2. fusion: elementwise ops read only by same-shaped elementwise ops run inside their
 *      consumer's loop without a buffer;
 *   3. order: a topological order chosen greedily to keep little memory live (among the ready
 *      ops, the one that adds the fewest bytes net of what it frees);
 *   4. optimizer updates run as soon as their gradient exists and no later op reads the old
 *      variable; a weight gradient made by a matmul and read by nothing else is consumed tile by
 *      tile (the tiles are the matmul kernel's own, so the bits are the same);
 *   5. in place: a fused loop may write over a buffer that only it still reads;
 *   6. the arena: offsets from lifetimes (planner.c);
 *   7. under a memory budget, elementwise results kept for late readers are recomputed right
 *      before those readers instead, while that shrinks the arena. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dispatch/dispatch.h"
#include "eagle/runtime.h"
#include "base/error.h"
#include "graph/internal.h"
#include "graph/planner.h"

int eg__graph_position(const trace *t, const eg_tensor *x) {
    /* Graphs are small (tens to hundreds of ops): a scan keeps this simple. */
    for (int i = 0; i < t->n_entries; i++)
        if (t->entries[i].tensor == x) return i;
    return -1;
}

/* The latest entry computing x before position `before`, or -1. */
static int producer_before(const trace *t, const eg_tensor *x, int before) {
    for (int i = before - 1; i >= 0; i--)
        if (t->entries[i].tensor == x) return i;
    return -1;
}

static bool same_shape(const eg_tensor *a, const eg_tensor *b) {
    return a->n_dims == b->n_dims &&
           memcmp(a->shape, b->shape, sizeof(int64_t) * (size_t)a->n_dims) == 0;
}

static size_t buffer_bytes(const eg_tensor *x) {
    size_t bytes = (size_t)x->n_elems * eg_dtype_size(x->dtype);
    return bytes ? (bytes + 63) & ~(size_t)63 : 64;
}

/* ---- 1. common subexpressions ---- */

static const eg_tensor *canonical(const trace *t, const eg_tensor *x) {
    int at = eg__graph_position(t, x);
    return at >= 0 && t->entries[at].role == ROLE_ALIAS ? t->entries[t->entries[at].alias_of].tensor
                                                        : x;
}

static bool same_computation(const trace *t, const eg_tensor *a, const eg_tensor *b) {
    const eg__lazy_node *x = a->lazy, *y = b->lazy;
    if (x->op != y->op || x->n_inputs != y->n_inputs || x->is_view != y->is_view ||
        x->placeholder >= 0 || y->placeholder >= 0 || a->dtype != b->dtype ||
        a->device != b->device || !same_shape(a, b) ||
        memcmp(a->strides, b->strides, sizeof(int64_t) * (size_t)a->n_dims) != 0 ||
        memcmp(&x->attrs, &y->attrs, sizeof x->attrs) != 0)
        return false;
    for (int j = 0; j < x->n_inputs; j++)
        if (canonical(t, x->inputs[j]) != canonical(t, y->inputs[j])) return false;
    if (x->is_view && a->offset - x->inputs[0]->offset != b->offset - y->inputs[0]->offset)
        return false;
    return true;
}

static int64_t merge_common_subexpressions(trace *t) {
    int64_t merged = 0;
    for (int i = 0; i < t->n_entries; i++) {
        entry *e = &t->entries[i];
        e->alias_of = -1;
        for (int j = 0; j < i && !getenv("EG_NO_CSE"); j++) {
            if (t->entries[j].role == ROLE_ALIAS) continue;
            if (same_computation(t, t->entries[j].tensor, e->tensor)) {
                e->role = ROLE_ALIAS;
                e->alias_of = j;
                merged++;
                break;
            }
        }
    }
    return merged;
}

/* ---- 2. roles ---- */

static bool is_target(const trace *t, const eg_tensor *x) {
    for (int i = 0; i < t->n_targets; i++)
        if (t->targets[i] == x) return true;
    return false;
}

/* Whether alias entry a's tensor is read by an op that runs (or is wanted as a target). */
static bool alias_is_read(const trace *t, int a) {
    const eg_tensor *x = t->entries[a].tensor;
    if (is_target(t, x)) return true;
    for (int i = a + 1; i < t->n_entries; i++) {
        const entry *e = &t->entries[i];
        if (e->role == ROLE_ALIAS) continue;
        for (int j = 0; j < e->tensor->lazy->n_inputs; j++)
            if (e->tensor->lazy->inputs[j] == x) return true;
    }
    return false;
}

/* Keeps every fused group within EG__FUSED_MAX_MEMBERS ops (what a compiled group takes, as
 * lazy mode does): an entry's group counts itself and its inlined inputs' groups (shared ones
 * once per path: an upper bound), and while a group would be larger its largest inlined input
 * becomes a buffer of its own, the root of a group of its own size. */
static eg_status cap_groups(trace *t) {
    int n = t->n_entries;
    int *size = malloc(sizeof *size * ((size_t)n + 1));
    if (!size) return eg__error(EG_ERR_OUT_OF_MEMORY, "function: out of host memory");
    for (int i = 0; i < n; i++) {
        size[i] = 1;
        if (t->entries[i].role == ROLE_ALIAS) continue;
        const eg__lazy_node *node = t->entries[i].tensor->lazy;
        for (;;) {
            int total = 1, largest = -1;
            for (int j = 0; j < node->n_inputs; j++) {
                int at = eg__graph_position(t, node->inputs[j]);
                if (at < 0 || t->entries[at].role != ROLE_INLINED) continue;
                total += size[at];
                if (largest < 0 || size[at] > size[largest]) largest = at;
            }
            size[i] = total;
            if (total <= EG__FUSED_MAX_MEMBERS || largest < 0) break;
            t->entries[largest].role = ROLE_BUFFER;
        }
    }
    free(size);
    return EG_OK;
}

static eg_status assign_roles(trace *t) {
    int n = t->n_entries;
    int *consumers = calloc((size_t)n + 1, sizeof *consumers);
    bool *fusable_consumers = malloc(((size_t)n + 1) * sizeof *fusable_consumers);
    if (!consumers || !fusable_consumers) {
        free(consumers);
        free(fusable_consumers);
        return eg__error(EG_ERR_OUT_OF_MEMORY, "function: out of host memory");
    }
    for (int i = 0; i < n; i++) fusable_consumers[i] = true;
    for (int i = 0; i < n; i++) {
        entry *e = &t->entries[i];
        if (e->role == ROLE_ALIAS) { /* its readers, if any, read the original's memory */
            if (alias_is_read(t, i)) {
                consumers[e->alias_of]++;
                fusable_consumers[e->alias_of] = false;
            }
            continue;
        }
        const eg__lazy_node *node = e->tensor->lazy;
        for (int j = 0; j < node->n_inputs; j++) {
            int at = eg__graph_position(t, node->inputs[j]);
            if (at < 0) continue;
            consumers[at]++;
            if (!eg__lazy_fusable(e->tensor) || !same_shape(e->tensor, t->entries[at].tensor))
                fusable_consumers[at] = false;
        }
    }
    for (int i = 0; i < n; i++) {
        entry *e = &t->entries[i];
        e->recompute_of = -1;
        e->fused_part = -1;
        e->in_place_of = -1;
        if (e->role == ROLE_ALIAS) continue;
        if (e->tensor->lazy->is_view)
            e->role = ROLE_VIEW;
        else if (!is_target(t, e->tensor) && eg__lazy_fusable(e->tensor) && consumers[i] > 0 &&
                 fusable_consumers[i])
            e->role = ROLE_INLINED;
        else
            e->role = ROLE_BUFFER;
    }
    free(consumers);
    free(fusable_consumers);
    return cap_groups(t);
}

/* ---- 3. order ---- */

int eg__graph_resolve(const trace *t, const eg_tensor **x, int at) {
    for (;;) {
        int p = producer_before(t, *x, at);
        if (p < 0) return -1;
        const entry *e = &t->entries[p];
        switch (e->role) {
        case ROLE_BUFFER:
            return p;
        case ROLE_INLINED:
            return -2;
        case ROLE_VIEW:
            *x = e->tensor->lazy->inputs[0];
            at = p;
            break;
        case ROLE_ALIAS:
            *x = t->entries[e->alias_of].tensor;
            at = p;
            break;
        }
    }
}

static int resolve(const trace *t, const eg_tensor *x, int at) {
    return eg__graph_resolve(t, &x, at);
}

/* Whether e's op reads v, directly or through a view entry of v. */
static bool reads_directly(const trace *t, const entry *e, const eg_tensor *v) {
    if (e->role == ROLE_VIEW || e->role == ROLE_ALIAS) return false;
    const eg__lazy_node *node = e->tensor->lazy;
    for (int j = 0; j < node->n_inputs; j++) {
        const eg_tensor *x = node->inputs[j];
        if (x == v) return true;
        int at = eg__graph_position(t, x);
        if (at >= 0 && t->entries[at].role == ROLE_VIEW && x->lazy->inputs[0] == v) return true;
    }
    return false;
}

static bool may_hoist(const trace *t, int a, const eg_tensor *variable);

/* Greedy list scheduling: views, aliases and inlined ops first (they cost nothing), then the
 * ready op whose buffer minus the buffers it is the last reader of is smallest (the earliest
 * traced on ties). */
static eg_status schedule(trace *t, bool tiles_first) {
    int n = t->n_entries;
    if (n < 2 || getenv("EG_NO_SCHEDULE")) return EG_OK;
    bool *done = calloc((size_t)n, sizeof *done);
    int *readers_left = calloc((size_t)n, sizeof *readers_left);
    int n_inputs_max = 0;
    for (int i = 0; i < n; i++)
        if (t->entries[i].tensor->lazy->n_inputs > n_inputs_max)
            n_inputs_max = t->entries[i].tensor->lazy->n_inputs;
    int stride = n_inputs_max + 1;
    int *deps = malloc(sizeof *deps * (size_t)n * (size_t)stride);
    entry *ordered = malloc(sizeof *ordered * (size_t)n);
    if (!done || !readers_left || !deps || !ordered) {
        free(done);
        free(readers_left);
        free(deps);
        free(ordered);
        return eg__error(EG_ERR_OUT_OF_MEMORY, "function: out of host memory");
    }
    /* deps[i * stride + k]: entries i waits for; readers_left: buffer readers not yet run */
    for (int i = 0; i < n; i++) {
        const entry *e = &t->entries[i];
        int k = 0;
        if (e->role == ROLE_ALIAS) {
            deps[i * stride + k++] = e->alias_of;
        } else {
            const eg__lazy_node *node = e->tensor->lazy;
            for (int j = 0; j < node->n_inputs; j++) {
                int at = eg__graph_position(t, node->inputs[j]);
                deps[i * stride + k++] = at;
                int b = resolve(t, node->inputs[j], i);
                if (b >= 0 && e->role != ROLE_VIEW) readers_left[b]++;
            }
        }
        for (; k < stride; k++) deps[i * stride + k] = -1;
    }
    /* A matmul making a weight gradient that an early update can consume tile by tile waits
     * for every other reader of the weight (the update must come after them) and then costs
     * nothing: its gradient never exists whole. */
    const eg_tensor **tiled_variable =
        tiles_first ? calloc((size_t)n, sizeof *tiled_variable) : NULL;
    for (int p = 0; p < t->n_parts && tiled_variable; p++) {
        const update_action *u = t->actions[t->parts[p].action].update;
        const eg_tensor *g = u->grads[t->parts[p].index], *v = u->variables[t->parts[p].index];
        int at = eg__graph_position(t, g);
        if (at >= 0 && t->entries[at].role == ROLE_BUFFER && g->lazy->op == EG__OP_MATMUL &&
            g->dtype == v->dtype && may_hoist(t, t->parts[p].action, v))
            tiled_variable[at] = v;
    }
    bool relaxed = false;
    for (int step = 0; step < n; step++) {
        int best = -1;
        long long best_cost = 0;
        for (int i = 0; i < n; i++) {
            if (done[i]) continue;
            bool ready = true;
            for (int k = 0; k < stride && ready; k++) {
                int d = deps[i * stride + k];
                if (d >= 0 && !done[d]) ready = false;
            }
            if (ready && tiled_variable && tiled_variable[i] && !relaxed)
                for (int r = 0; r < n && ready; r++)
                    if (r != i && !done[r] && reads_directly(t, &t->entries[r], tiled_variable[i]))
                        ready = false;
            if (!ready) continue;
            const entry *e = &t->entries[i];
            long long cost = 0;
            if (e->role == ROLE_BUFFER) {
                cost = tiled_variable && tiled_variable[i] && !relaxed
                           ? (long long)eg__backend_of(e->tensor->device)
                                 ->product_tile_bytes(e->tensor)
                           : (long long)buffer_bytes(e->tensor);
                const eg__lazy_node *node = e->tensor->lazy;
                for (int j = 0; j < node->n_inputs; j++) {
                    int b = resolve(t, node->inputs[j], i);
                    if (b >= 0 && readers_left[b] == 1 && !is_target(t, t->entries[b].tensor))
                        cost -= (long long)buffer_bytes(t->entries[b].tensor);
                }
            } else {
                cost = -(1ll << 60);
            }
            if (best < 0 || cost < best_cost) {
                best = i;
                best_cost = cost;
            }
        }
        if (best < 0 && !relaxed) { /* a weight's reader needs its gradient: plain order */
            relaxed = true;
            step--;
            continue;
        }
        if (best < 0) break; /* cannot happen for a topological input */
        done[best] = true;
        ordered[step] = t->entries[best];
        const entry *e = &t->entries[best];
        if (e->role != ROLE_ALIAS && e->role != ROLE_VIEW) {
            const eg__lazy_node *node = e->tensor->lazy;
            for (int j = 0; j < node->n_inputs; j++) {
                int b = resolve(t, node->inputs[j], best);
                if (b >= 0) readers_left[b]--;
            }
        }
    }
    /* alias_of indices move with the entries */
    int *new_index = readers_left;
    for (int s = 0; s < n; s++) new_index[eg__graph_position(t, ordered[s].tensor)] = s;
    for (int s = 0; s < n; s++)
        if (ordered[s].role == ROLE_ALIAS) ordered[s].alias_of = new_index[ordered[s].alias_of];
    memcpy(t->entries, ordered, sizeof *ordered * (size_t)n);
    free(done);
    free(readers_left);
    free(deps);
    free(ordered);
    free(tiled_variable);
    return EG_OK;
}

/* Fused groups: each buffer whose op is elementwise gathers its inlined producers (in order). */
static eg_status build_groups(trace *t) {
    int n = t->n_entries;
    for (int i = 0; i < n; i++) {
        entry *e = &t->entries[i];
        if (e->role != ROLE_BUFFER || !eg__lazy_fusable(e->tensor)) continue;
        bool *seen = calloc((size_t)n, sizeof *seen);
        int *stack = malloc((size_t)n * sizeof *stack);
        if (!seen || !stack) {
            free(seen);
            free(stack);
            return eg__error(EG_ERR_OUT_OF_MEMORY, "function: out of host memory");
        }
        int depth = 0, count = 1;
        stack[depth++] = i;
        while (depth > 0) {
            const eg__lazy_node *node = t->entries[stack[--depth]].tensor->lazy;
            for (int j = 0; j < node->n_inputs; j++) {
                int at = eg__graph_position(t, node->inputs[j]);
                if (at < 0 || t->entries[at].role != ROLE_INLINED || seen[at]) continue;
                seen[at] = true;
                count++;
                stack[depth++] = at;
            }
        }
        free(e->members);
        e->members = malloc(sizeof *e->members * (size_t)count);
        if (e->members) {
            e->n_members = 0;
            for (int k = 0; k < i; k++)
                if (seen[k]) e->members[e->n_members++] = t->entries[k].tensor;
            e->members[e->n_members++] = e->tensor;
        }
        free(seen);
        free(stack);
        if (!e->members) /* its inlined producers would never run */
            return eg__error(EG_ERR_OUT_OF_MEMORY, "function: out of host memory");
    }
    return EG_OK;
}

/* ---- 4-6. updates, lifetimes, in place, the arena ---- */

/* The nodes whose inputs entry i reads when it runs (its group, or its own node). */
static int group_size(const entry *e) {
    return e->n_members > 0 ? e->n_members : 1;
}
static const eg__lazy_node *group_node(const entry *e, int k) {
    return e->n_members > 0 ? e->members[k]->lazy : e->tensor->lazy;
}
static bool executes(const entry *e) {
    return e->role == ROLE_BUFFER;
}

/* Latest position at which the graph reads leaf tensor v (directly or through views); -1. */
static int last_read_of_leaf(const trace *t, const eg_tensor *v) {
    int last = -1;
    for (int i = 0; i < t->n_entries; i++) {
        const entry *e = &t->entries[i];
        if (!executes(e)) continue;
        for (int k = 0; k < group_size(e); k++) {
            const eg__lazy_node *node = group_node(e, k);
            for (int j = 0; j < node->n_inputs; j++) {
                const eg_tensor *x = node->inputs[j];
                int p;
                while ((p = producer_before(t, x, i)) >= 0 &&
                       (t->entries[p].role == ROLE_VIEW || t->entries[p].role == ROLE_ALIAS))
                    x = t->entries[p].role == ROLE_VIEW ? t->entries[p].tensor->lazy->inputs[0]
                                                        : t->entries[t->entries[p].alias_of].tensor;
                if (p < 0 && x == v && i > last) last = i;
            }
        }
    }
    return last;
}

static void pin(trace *t, const eg_tensor *x) {
    int b = resolve(t, x, t->n_entries);
    if (b >= 0) t->entries[b].last_use = t->n_entries;
}

static int find_root(int *parent, int i) {
    while (parent[i] != i) i = parent[i] = parent[parent[i]];
    return i;
}

/* Whether action a's updates may run inside the graph: every earlier action is an optimizer
 * step on other variables (anything else might read or write them in traced order). */
static bool may_hoist(const trace *t, int a, const eg_tensor *variable) {
    for (int b = 0; b < a; b++) {
        const update_action *u = t->actions[b].update;
        if (!u) return false;
        for (int k = 0; k < u->n; k++)
            if (u->variables[k] == variable) return false;
    }
    return !getenv("EG_NO_EARLY_UPDATES");
}

static eg_status layout(trace *t) {
    int n = t->n_entries;
    eg_function_stats *s = &t->plan_stats;
    for (int i = 0; i < n; i++) {
        entry *e = &t->entries[i];
        e->first_use = i;
        e->last_use = -1;
        e->n_parts = 0;
        e->first_part = 0;
        e->fused_part = -1;
        e->in_place_of = -1;
    }
    /* lifetimes from the readers */
    for (int i = 0; i < n; i++) {
        const entry *e = &t->entries[i];
        if (!executes(e)) continue;
        for (int k = 0; k < group_size(e); k++) {
            const eg__lazy_node *node = group_node(e, k);
            for (int j = 0; j < node->n_inputs; j++) {
                int b = resolve(t, node->inputs[j], i);
                if (b >= 0 && t->entries[b].last_use < i) t->entries[b].last_use = i;
            }
        }
    }
    for (int i = 0; i < t->n_outputs; i++) pin(t, t->outputs[i]);
    /* every target that is not an update's gradient is pinned */
    for (int i = 0; i < t->n_targets; i++) {
        /* listed more often than steps use it as a gradient: something else reads it too */
        int as_gradient = 0, listed = 0;
        for (int p = 0; p < t->n_parts; p++) {
            const update_action *u = t->actions[t->parts[p].action].update;
            as_gradient += u->grads[t->parts[p].index] == t->targets[i];
        }
        for (int j = 0; j < t->n_targets; j++) listed += t->targets[j] == t->targets[i];
        if (listed > as_gradient) pin(t, t->targets[i]);
    }
    /* optimizer updates */
    s->n_early_updates = s->n_tiled_updates = 0;
    for (int p = 0; p < t->n_parts; p++) {
        update_part *part = &t->parts[p];
        const update_action *u = t->actions[part->action].update;
        const eg_tensor *g = u->grads[part->index], *v = u->variables[part->index];
        part->hoisted = may_hoist(t, part->action, v);
        part->fused = false;
        int b = resolve(t, g, n);
        if (!part->hoisted) {
            part->position = n;
            if (b >= 0) t->entries[b].last_use = n;
            continue;
        }
        int ready = producer_before(t, g, n);
        bool shared = false; /* the same gradient for two variables: keep it whole */
        for (int q = 0; q < t->n_parts; q++)
            shared |=
                q != p && t->actions[t->parts[q].action].update->grads[t->parts[q].index] == g;
        int last_read = last_read_of_leaf(t, v);
        part->position = ready > last_read ? ready : last_read;
        s->n_early_updates++;
        entry *ge = ready >= 0 ? &t->entries[ready] : NULL;
        if (ge && b == ready && ge->role == ROLE_BUFFER && ge->tensor->lazy->op == EG__OP_MATMUL &&
            !ge->tensor->lazy->attrs.low_precision && ge->last_use < 0 && ge->recompute_of < 0 && g->dtype == v->dtype &&
            eg__backend_of(g->device)->product_tiles && last_read < ready && !shared &&
            !getenv("EG_NO_TILED_UPDATES")) {
            part->fused = true;
            ge->fused_part = p;
            s->n_tiled_updates++;
        } else if (b >= 0 && t->entries[b].last_use < part->position) {
            t->entries[b].last_use = part->position;
        }
    }
    /* parts attached to their entries, in part order (entries list them contiguously) */
    for (int p = 0; p < t->n_parts; p++) {
        update_part *part = &t->parts[p];
        if (!part->hoisted || part->fused || part->position < 0 || part->position >= n) continue;
        t->entries[part->position].n_parts++;
    }
    /* in place: a fused loop's output over a leaf buffer read only by its non-root members */
    int *parent = malloc(sizeof *parent * ((size_t)n + 1));
    if (!parent) return eg__error(EG_ERR_OUT_OF_MEMORY, "function: out of host memory");
    for (int i = 0; i < n; i++) parent[i] = i;
    s->n_in_place = 0;
    for (int i = 0; i < n && !getenv("EG_NO_IN_PLACE"); i++) {
        entry *e = &t->entries[i];
        if (e->role != ROLE_BUFFER || e->n_members < 2 || e->last_use < 0) continue;
        for (int k = 0; k < e->n_members - 1 && e->in_place_of < 0; k++) {
            const eg__lazy_node *node = e->members[k]->lazy;
            for (int j = 0; j < node->n_inputs && e->in_place_of < 0; j++) {
                const eg_tensor *x = node->inputs[j];
                int b = producer_before(t, x, i);
                if (b < 0 || t->entries[b].role != ROLE_BUFFER || t->entries[b].last_use != i ||
                    t->entries[b].fused_part >= 0 || x->n_elems != e->tensor->n_elems ||
                    eg_dtype_size(x->dtype) != eg_dtype_size(e->tensor->dtype))
                    continue;
                bool root_reads = false; /* the kernels' pointers are restrict */
                const eg__lazy_node *root = e->tensor->lazy;
                for (int r = 0; r < root->n_inputs; r++) root_reads |= root->inputs[r] == x;
                if (root_reads) continue;
                e->in_place_of = b;
                parent[find_root(parent, i)] = find_root(parent, b);
                s->n_in_place++;
            }
        }
    }
    /* the arena: one request per buffer (in-place chains share one) */
    eg__buffer_request *requests = calloc((size_t)n + 1, sizeof *requests);
    int *request_of = malloc(sizeof *request_of * ((size_t)n + 1));
    if (!requests || !request_of) {
        free(parent);
        free(requests);
        free(request_of);
        return eg__error(EG_ERR_OUT_OF_MEMORY, "function: out of host memory");
    }
    int n_requests = 0;
    s->unplanned_bytes = s->scratch_bytes = 0;
    for (int i = 0; i < n; i++) request_of[i] = -1;
    for (int i = 0; i < n; i++) {
        entry *e = &t->entries[i];
        if (e->role != ROLE_BUFFER) continue;
        if (e->fused_part >= 0) {
            const eg__backend *backend = eg__backend_of(e->tensor->device);
            int64_t tiles = backend->product_tile_count(e->tensor);
            int threads = eg_get_num_threads();
            e->n_scratch = (int)(tiles < threads ? tiles : threads);
            if (e->n_scratch < 1) e->n_scratch = 1;
            e->bytes = (backend->product_tile_bytes(e->tensor) + 63) & ~(size_t)63;
            e->bytes = e->bytes ? e->bytes * (size_t)e->n_scratch : 64;
            s->scratch_bytes += e->bytes;
        } else {
            e->bytes = buffer_bytes(e->tensor);
        }
        if (e->last_use < i) e->last_use = i;
        s->unplanned_bytes += e->bytes;
        int root = find_root(parent, i);
        if (request_of[root] < 0) {
            request_of[root] = n_requests;
            requests[n_requests++] = (eg__buffer_request){e->bytes, i, e->last_use, 0};
        } else {
            eg__buffer_request *r = &requests[request_of[root]];
            if (e->bytes > r->bytes) r->bytes = e->bytes;
            if (i < r->first_use) r->first_use = i;
            if (e->last_use > r->last_use) r->last_use = e->last_use;
        }
        request_of[i] = request_of[root];
    }
    s->arena_bytes = eg__plan_buffers(requests, n_requests);
    t->live_area = 0;
    for (int r = 0; r < n_requests; r++)
        t->live_area +=
            (double)requests[r].bytes * (double)(requests[r].last_use - requests[r].first_use + 1);
    if (getenv("EG_GRAPH_DUMP")) {
        size_t bound = 0;
        int at = 0;
        for (int pos = 0; pos <= n; pos++) {
            size_t live = 0;
            for (int r = 0; r < n_requests; r++)
                if (requests[r].first_use <= pos && pos <= requests[r].last_use)
                    live += requests[r].bytes;
            if (live > bound) {
                bound = live;
                at = pos;
            }
        }
        fprintf(stderr, "layout: arena %zu, most live at once %zu (at %d)\n", s->arena_bytes, bound,
                at);
    }
    for (int i = 0; i < n; i++) {
        entry *e = &t->entries[i];
        if (e->role != ROLE_BUFFER) continue;
        size_t offset = requests[request_of[find_root(parent, i)]].offset;
        if (e->fused_part >= 0)
            e->scratch_offset = offset;
        else
            e->offset = offset;
    }
    free(parent);
    free(requests);
    free(request_of);
    return EG_OK;
}

/* t->part_order: the hoisted, untiled parts by position (those before every entry first), so
 * that each entry's parts are contiguous from its first_part. */
static eg_status index_parts(trace *t) {
    free(t->part_order);
    t->part_order = malloc(sizeof *t->part_order * ((size_t)t->n_parts + 1));
    if (!t->part_order) return eg__error(EG_ERR_OUT_OF_MEMORY, "function: out of host memory");
    int next = 0;
    for (int pos = -1; pos < t->n_entries; pos++) {
        if (pos >= 0) t->entries[pos].first_part = next;
        for (int p = 0; p < t->n_parts; p++) {
            const update_part *part = &t->parts[p];
            if (part->hoisted && !part->fused && part->position == pos) t->part_order[next++] = p;
        }
        if (pos < 0) t->n_early_parts = next;
    }
    return EG_OK;
}

/* ---- 7. recomputation under a memory budget ---- */

typedef struct candidate {
    int entry;  /* the kept intermediate */
    int before; /* its first reader after the longest gap: the copy runs right before it */
} candidate;

/* Where splitting x's lifetime saves most: the longest stretch between two of its readers. */
static bool find_split(const trace *t, int x, candidate *out) {
    const entry *e = &t->entries[x];
    if (e->role != ROLE_BUFFER || e->recompute_of >= 0 || e->fused_part >= 0 ||
        !eg__lazy_fusable(e->tensor) || e->last_use >= t->n_entries)
        return false;
    /* readers must read it directly (a view bound before the copy would keep the old memory),
     * and its inputs must not be variables (an early update may have changed them) */
    for (int k = 0; k < group_size(e); k++) {
        const eg__lazy_node *node = group_node(e, k);
        for (int j = 0; j < node->n_inputs; j++)
            if (node->inputs[j]->variable) return false;
    }
    int previous = x, best_gap = 1, best = -1;
    for (int i = x + 1; i < t->n_entries; i++) {
        const entry *r = &t->entries[i];
        if (r->role == ROLE_VIEW || r->role == ROLE_ALIAS) {
            if (r->role == ROLE_VIEW && r->tensor->lazy->inputs[0] == e->tensor) return false;
            if (r->role == ROLE_ALIAS && r->alias_of == x) return false;
            continue;
        }
        if (r->recompute_of == x) break; /* later readers read the copy */
        if (!executes(r)) continue;
        bool reads = false;
        for (int k = 0; k < group_size(r); k++) {
            const eg__lazy_node *node = group_node(r, k);
            for (int j = 0; j < node->n_inputs; j++) reads |= node->inputs[j] == e->tensor;
        }
        if (!reads) continue;
        if (i - previous > best_gap) {
            best_gap = i - previous;
            best = i;
        }
        previous = i;
    }
    if (best < 0) return false;
    *out = (candidate){x, best};
    return true;
}

static eg_status insert_recompute(trace *t, candidate c) {
    entry *grown = realloc(t->entries, sizeof *grown * ((size_t)t->n_entries + 1));
    if (!grown) return eg__error(EG_ERR_OUT_OF_MEMORY, "function: out of host memory");
    t->entries = grown;
    entry copy = t->entries[c.entry];
    copy.recompute_of = c.entry;
    copy.members = NULL;
    if (copy.n_members > 0) {
        copy.members = malloc(sizeof *copy.members * (size_t)copy.n_members);
        if (!copy.members) return eg__error(EG_ERR_OUT_OF_MEMORY, "function: out of host memory");
        memcpy(copy.members, t->entries[c.entry].members,
               sizeof *copy.members * (size_t)copy.n_members);
    }
    eg__ref(copy.tensor);
    memmove(&t->entries[c.before + 1], &t->entries[c.before],
            sizeof *t->entries * (size_t)(t->n_entries - c.before));
    t->entries[c.before] = copy;
    t->n_entries++;
    for (int i = 0; i < t->n_entries; i++) {
        entry *e = &t->entries[i];
        if (e->alias_of >= c.before) e->alias_of++;
        if (e->recompute_of >= c.before) e->recompute_of++;
    }
    return EG_OK;
}

static void remove_entry(trace *t, int at) {
    free(t->entries[at].members);
    eg__unref(t->entries[at].tensor);
    memmove(&t->entries[at], &t->entries[at + 1],
            sizeof *t->entries * (size_t)(t->n_entries - at - 1));
    t->n_entries--;
    for (int i = 0; i < t->n_entries; i++) {
        entry *e = &t->entries[i];
        if (e->alias_of > at) e->alias_of--;
        if (e->recompute_of > at) e->recompute_of--;
    }
}

static eg_status fit_budget(trace *t) {
    eg_function_stats *s = &t->plan_stats;
    size_t budget = t->memory_budget, start = s->arena_bytes;
    s->recomputed[0] = '\0';
    s->n_recomputed = s->recompute_extra_flops = 0;
    eg_status status = EG_OK;
    while (s->arena_bytes > budget && status == EG_OK) {
        /* the smallest arena; on ties, the least memory live over time (one recomputation
         * alone often just moves the peak: the next one then lowers it) */
        size_t best_arena = s->arena_bytes;
        double best_area = t->live_area;
        candidate best = {-1, -1};
        for (int x = 0; x < t->n_entries && status == EG_OK; x++) {
            candidate c;
            if (!find_split(t, x, &c)) continue;
            if ((status = insert_recompute(t, c)) != EG_OK) break;
            status = layout(t);
            if (getenv("EG_GRAPH_DUMP"))
                fprintf(stderr, "recompute %d before %d: arena %zu\n", c.entry, c.before,
                        t->plan_stats.arena_bytes);
            size_t arena = t->plan_stats.arena_bytes;
            if (status == EG_OK &&
                (arena < best_arena || (arena == best_arena && t->live_area < best_area))) {
                best_arena = arena;
                best_area = t->live_area;
                best = c;
            }
            remove_entry(t, c.before);
        }
        if (status != EG_OK) break;
        if (best.entry < 0) {
            status = layout(t);
            break;
        }
        if ((status = insert_recompute(t, best)) != EG_OK || (status = layout(t)) != EG_OK) break;
        const entry *r = &t->entries[best.before];
        s->n_recomputed++;
        for (int k = 0; k < group_size(r); k++) s->recompute_extra_flops += r->tensor->n_elems;
        char shape[96];
        size_t used = strlen(s->recomputed);
        snprintf(s->recomputed + used, sizeof s->recomputed - used, "%s%s %s for %s",
                 used ? ", " : "", eg__op_defs[r->tensor->lazy->op].name,
                 eg__shape_format(r->tensor->n_dims, r->tensor->shape, shape, sizeof shape),
                 eg__op_defs[t->entries[best.before + 1].tensor->lazy->op].name);
    }
    s->recompute_saved_bytes = start > s->arena_bytes ? start - s->arena_bytes : 0;
    return status;
}

/* ---- the whole plan ---- */

static void dump(const trace *t) {
    for (int i = 0; i < t->n_entries; i++) {
        const entry *e = &t->entries[i];
        char shape[96];
        static const char *const roles[] = {"view", "inlined", "buffer", "alias"};
        fprintf(stderr, "%3d %-20s %-14s %-7s life %3d-%-3d off %8zu bytes %8zu%s%s in:", i,
                eg__op_defs[e->tensor->lazy->op].name,
                eg__shape_format(e->tensor->n_dims, e->tensor->shape, shape, sizeof shape),
                roles[e->role], e->first_use, e->last_use,
                e->fused_part >= 0 ? e->scratch_offset : e->offset, e->bytes,
                e->fused_part >= 0 ? " tiled-update" : "",
                e->recompute_of >= 0 ? " recompute" : "");
        const eg__lazy_node *node = e->tensor->lazy;
        for (int j = 0; j < node->n_inputs; j++) {
            int at = producer_before(t, node->inputs[j], i);
            if (at >= 0)
                fprintf(stderr, " %d", at);
            else
                fprintf(stderr, " %s", node->inputs[j]->variable ? "var" : "leaf");
        }
        fprintf(stderr, " (+%d updates)\n", e->n_parts);
    }
    fprintf(stderr, "arena %zu bytes\n", t->plan_stats.arena_bytes);
}

/* The entries in traced order, then scheduled, grouped and laid out. */
static eg_status order_and_layout(trace *t, const entry *traced, int n_traced, bool tiles_first) {
    for (int i = 0; i < t->n_entries; i++) {
        free(t->entries[i].members);
        t->entries[i].members = NULL;
        if (t->entries[i].recompute_of >= 0) eg__unref(t->entries[i].tensor);
    }
    t->n_entries = n_traced;
    memcpy(t->entries, traced, sizeof *traced * (size_t)t->n_entries);
    eg_status status = schedule(t, tiles_first);
    if (status == EG_OK) status = build_groups(t);
    if (status == EG_OK) status = layout(t);
    if (status == EG_OK && t->memory_budget && t->plan_stats.arena_bytes > t->memory_budget)
        status = fit_budget(t);
    return status;
}

eg_status eg__graph_plan(trace *t) {
    eg_function_stats *s = &t->plan_stats;
    memset(s, 0, sizeof *s);
    /* One arena on one device holds every buffer: a trace whose ops ran on two devices (through
     * eg_tensor_to) would put one device's tensors in the other's memory. */
    for (int i = 0; i < t->n_entries; i++)
        if (t->entries[i].tensor->device != t->device)
            return eg__error(EG_ERR_UNSUPPORTED,
                             "function: a traced function computes on one device, and this one "
                             "has tensors on %s and %s; copy the inputs to one device before the "
                             "call, or run these steps eagerly or lazily",
                             eg_device_name(t->device),
                             eg_device_name(t->entries[i].tensor->device));
    /* one update part per (step, variable with a gradient) */
    for (int a = 0; a < t->n_actions; a++) {
        const update_action *u = t->actions[a].update;
        for (int k = 0; u && k < u->n; k++) {
            if (!u->grads[k]) continue;
            update_part *parts = realloc(t->parts, sizeof *parts * ((size_t)t->n_parts + 1));
            if (!parts) return eg__error(EG_ERR_OUT_OF_MEMORY, "function: out of host memory");
            t->parts = parts;
            t->parts[t->n_parts++] = (update_part){.action = a, .index = k};
        }
    }
    s->n_cse_merged = merge_common_subexpressions(t);
    eg_status status = assign_roles(t);
    /* two orders — plain greedy, and weight gradients' matmuls placed for tiled updates — and
     * the smaller arena wins */
    entry *traced = malloc(sizeof *traced * ((size_t)t->n_entries + 1));
    if (!traced && status == EG_OK)
        status = eg__error(EG_ERR_OUT_OF_MEMORY, "function: out of host memory");
    if (status == EG_OK) memcpy(traced, t->entries, sizeof *traced * (size_t)t->n_entries);
    int n_traced = t->n_entries;
    size_t plain = 0;
    if (status == EG_OK) status = order_and_layout(t, traced, n_traced, false);
    plain = s->arena_bytes;
    if (status == EG_OK) status = order_and_layout(t, traced, n_traced, true);
    if (status == EG_OK && s->arena_bytes >= plain)
        status = order_and_layout(t, traced, n_traced, false);
    free(traced);
    if (status == EG_OK) status = index_parts(t);
    if (status != EG_OK) return status;
    s->memory_budget = t->memory_budget;
    s->budget_met = !t->memory_budget || s->arena_bytes <= t->memory_budget;
    s->n_nodes = 0;
    for (int i = 0; i < t->n_entries; i++) {
        const entry *e = &t->entries[i];
        if (e->recompute_of >= 0) continue;
        s->n_nodes++;
        if (e->role != ROLE_VIEW)
            s->eager_bytes += (size_t)e->tensor->n_elems * eg_dtype_size(e->tensor->dtype);
        if (e->role == ROLE_INLINED) s->n_fused_nodes++;
    }
    for (int i = 0; i < t->n_entries; i++)
        if (t->entries[i].role == ROLE_BUFFER) s->n_kernels++;
    /* views: their offset relative to their base, which moves into the arena at replay */
    for (int i = 0; i < t->n_entries; i++) {
        entry *e = &t->entries[i];
        if (e->role == ROLE_VIEW)
            e->view_delta = e->tensor->offset - e->tensor->lazy->inputs[0]->offset;
    }
    if (getenv("EG_GRAPH_DUMP")) dump(t);
    return EG_OK;
}
