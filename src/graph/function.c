/* Graph mode: eg_function traces a C function once per input signature into a lazy graph, plans
 * it once — fused elementwise groups, and one arena in which every intermediate gets an offset
 * from its lifetime — and replays it on later calls with no allocation but the outputs' headers.
 *
 * Tracing runs the function in lazy mode on placeholders. Side effects (optimizer updates,
 * assign) are deferred: they run at every replay after the graph, in traced order. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dispatch/dispatch.h"
#include "base/error.h"
#include "graph/internal.h"

typedef struct input_signature {
    eg_dtype dtype;
    int n_dims;
    int64_t shape[EG_MAX_DIMS];
    const eg_device *device;
} input_signature;

struct eg_function {
    char *name;
    eg_traced_fn fn;
    int n_inputs, n_outputs;
    void *user_data;
    trace **traces;
    int n_traces;
    int retrace_limit;
    size_t memory_budget;
    eg_function_stats stats;
};

static _Thread_local trace *tracing_now;

bool eg__graph_tracing(void) {
    return tracing_now != NULL;
}

void eg__graph_note(eg_tensor *t) {
    trace *tr = tracing_now;
    if (!tr || !tr->keep_notes) return;
    eg_tensor **notes = realloc(tr->notes, sizeof *notes * (size_t)(tr->n_notes + 1));
    if (!notes) return; /* only loses the early unpending of this node */
    tr->notes = notes;
    eg__ref(t);
    tr->notes[tr->n_notes++] = t;
}

/* Appends a draw to the trace's list (t referenced); false when memory is short. */
static bool note_draw(trace *tr, eg_tensor *t, eg_generator *generator, eg__random_fill fill) {
    int n = tr->n_random + 1;
    eg_tensor **ops = realloc(tr->random_ops, sizeof *ops * (size_t)n);
    if (ops) tr->random_ops = ops;
    eg_generator **generators =
        ops ? realloc(tr->random_generators, sizeof *generators * (size_t)n) : NULL;
    if (generators) tr->random_generators = generators;
    eg__random_fill *fills =
        generators ? realloc(tr->random_fills, sizeof *fills * (size_t)n) : NULL;
    if (!fills) return false;
    tr->random_fills = fills;
    eg__ref(t);
    tr->random_ops[tr->n_random] = t;
    tr->random_generators[tr->n_random] = generator;
    tr->random_fills[tr->n_random++] = fill;
    return true;
}

void eg__graph_note_random(eg_tensor *t, eg_generator *generator) {
    trace *tr = tracing_now;
    if (!tr || !t || !t->lazy) return;
    note_draw(tr, t, generator, (eg__random_fill){.distribution = -1});
}

/* The random observer while tracing: a random tensor the function made becomes a constant of
 * the graph, filled anew at every replay. */
static void note_random_tensor(eg_tensor *t, eg_generator *generator, eg__random_fill fill) {
    trace *tr = tracing_now;
    if (tr && !note_draw(tr, t, generator, fill))
        eg__error(EG_ERR_OUT_OF_MEMORY, "function: out of host memory");
}

/* Draws again what the trace drew, in traced order: new random constants, and new seeds for its
 * random ops. Ops that reuse a random op's seed (dropout's gradient applies the same mask: a
 * dropout op with the same attrs) follow it; they are found by the old seed, a 64-bit random
 * number. */
void eg__graph_redraw_random(trace *t) {
    for (int i = 0; i < t->n_random; i++) {
        if (t->random_fills[i].distribution >= 0) {
            /* an error (a failed copy to a GPU) stays set; the replay reports it */
            (void)eg__random_refill(t->random_ops[i], t->random_generators[i],
                                    t->random_fills[i]);
            continue;
        }
        eg__lazy_node *node = t->random_ops[i]->lazy;
        uint64_t seed = eg_generator_next_seed(t->random_generators[i]);
        if (!node) continue;
        uint64_t old = node->attrs.seed;
        for (int k = 0; k < t->n_entries; k++) {
            eg__lazy_node *other = t->entries[k].tensor->lazy;
            if (other && other->op == node->op && other->attrs.seed == old)
                other->attrs.seed = seed;
        }
        node->attrs.seed = seed;
    }
}

eg_status eg__graph_defer(eg_status (*run)(void *context), void (*free_context)(void *context),
                          void *context, int n_tensors, const eg_tensor *const *tensors) {
    trace *t = tracing_now;
    if (!t) return eg__error(EG_ERR_INTERNAL, "graph_defer: not tracing");
    deferred *actions = realloc(t->actions, sizeof *actions * (size_t)(t->n_actions + 1));
    eg_tensor **targets = realloc(t->targets, sizeof *targets * (size_t)(t->n_targets + n_tensors));
    if (actions) t->actions = actions;
    if (targets) t->targets = targets;
    if (!actions || !targets) {
        if (free_context) free_context(context);
        return eg__error(EG_ERR_OUT_OF_MEMORY, "function: out of host memory");
    }
    t->actions[t->n_actions++] = (deferred){run, free_context, context, NULL};
    for (int i = 0; i < n_tensors; i++) {
        if (!tensors[i]) continue;
        eg__ref(tensors[i]);
        t->targets[t->n_targets++] = (eg_tensor *)tensors[i];
    }
    return EG_OK;
}

eg_status eg__graph_defer_update(const eg__updater *updater, void *optimizer, int n,
                                 eg_tensor *const *grads, eg_tensor *const *variables) {
    update_action *u = calloc(1, sizeof *u);
    if (u) {
        u->grads = calloc((size_t)n + 1, sizeof *u->grads);
        u->variables = calloc((size_t)n + 1, sizeof *u->variables);
    }
    if (!u || !u->grads || !u->variables) {
        if (u) {
            free(u->grads);
            free(u->variables);
        }
        free(u);
        return eg__error(EG_ERR_OUT_OF_MEMORY, "%s: out of host memory", updater->name(optimizer));
    }
    u->updater = updater;
    u->optimizer = optimizer;
    u->n = n;
    for (int i = 0; i < n; i++) {
        u->grads[i] = grads[i];
        u->variables[i] = variables[i];
        if (grads[i]) eg__ref(grads[i]);
        eg__ref(variables[i]);
    }
    eg_status status = eg__graph_defer(NULL, NULL, NULL, n, eg__const_tensors(grads));
    if (status != EG_OK) {
        for (int i = 0; i < n; i++) {
            eg__unref(u->grads[i]);
            eg__unref(u->variables[i]);
        }
        free(u->grads);
        free(u->variables);
        free(u);
        return status;
    }
    tracing_now->actions[tracing_now->n_actions - 1].update = u;
    return EG_OK;
}

/* ---- function objects ---- */

eg_function *eg_function_new(const char *name, eg_traced_fn fn, int n_inputs, int n_outputs,
                             void *user_data) {
    if (!fn || n_inputs < 0 || n_outputs < 1) {
        eg__error(EG_ERR_INVALID_ARGUMENT, "function_new: needs a function, n_inputs >= 0 and "
                                           "n_outputs >= 1");
        return NULL;
    }
    eg_function *f = calloc(1, sizeof *f);
    char *copy = strdup(name ? name : "function");
    if (!f || !copy) {
        free(f);
        free(copy);
        eg__error(EG_ERR_OUT_OF_MEMORY, "function_new: out of host memory");
        return NULL;
    }
    f->name = copy;
    f->fn = fn;
    f->n_inputs = n_inputs;
    f->n_outputs = n_outputs;
    f->user_data = user_data;
    f->retrace_limit = 5;
    return f;
}

static void trace_free(trace *t, int n_inputs, int n_outputs) {
    if (!t) return;
    for (int i = 0; i < t->n_actions && !t->borrowed_actions; i++) {
        if (t->actions[i].free_context) t->actions[i].free_context(t->actions[i].context);
        update_action *u = t->actions[i].update;
        if (!u) continue;
        for (int k = 0; k < u->n; k++) {
            eg__unref(u->grads[k]);
            eg__unref(u->variables[k]);
        }
        free(u->grads);
        free(u->variables);
        free(u);
    }
    eg__graph_capture_free(t);
    eg__graph_parallel_free(t->parallel);
    free(t->parts);
    free(t->part_order);
    for (int i = 0; i < t->n_notes; i++) eg__unref(t->notes[i]);
    free(t->notes);
    for (int i = 0; i < t->n_random; i++) eg__unref(t->random_ops[i]);
    free(t->random_ops);
    free(t->random_generators);
    free(t->random_fills);
    if (t->borrowed_actions) t->actions = NULL;
    for (int i = 0; i < t->n_entries; i++) {
        free(t->entries[i].members);
        eg__unref(t->entries[i].tensor);
    }
    for (int i = 0; i < t->n_targets; i++) eg__unref(t->targets[i]);
    for (int i = 0; i < n_outputs && t->outputs; i++) eg__unref(t->outputs[i]);
    for (int i = 0; i < n_inputs && t->placeholders; i++) eg__unref(t->placeholders[i]);
    if (t->arena) eg__storage_unref(t->arena);
    free(t->actions);
    free(t->entries);
    free(t->targets);
    free(t->outputs);
    free(t->placeholders);
    free(t->signature);
    free(t);
}

void eg_function_free(eg_function *f) {
    if (!f) return;
    for (int i = 0; i < f->n_traces; i++) trace_free(f->traces[i], f->n_inputs, f->n_outputs);
    free(f->traces);
    free(f->name);
    free(f);
}

void eg_function_set_retrace_limit(eg_function *f, int limit) {
    if (f) f->retrace_limit = limit;
}

eg_status eg_function_set_memory_budget(eg_function *f, size_t bytes) {
    if (!f) return eg__error(EG_ERR_NULL_ARGUMENT, "function_set_memory_budget: NULL function");
    f->memory_budget = bytes;
    return EG_OK;
}

eg_status eg_function_stats_get(const eg_function *f, eg_function_stats *out) {
    if (!f || !out) return eg__error(EG_ERR_NULL_ARGUMENT, "function_stats_get: NULL argument");
    *out = f->stats;
    return EG_OK;
}

/* ---- tracing ---- */

/* Whether t was traced in the other fast-math state than this thread's now. */
static bool fast_math_differs(const trace *t) {
    return t->fast_math >= 0 && t->fast_math != (int)eg_fast_math_enabled();
}

/* How many of (dtype, shape, device) differ between input x and its traced signature s; into
 * out (when not NULL) the differences, e.g. "dtype i32 -> i64, shape (4,) -> (5,)". */
static int signature_differences(const input_signature *s, const eg_tensor *x, char *out,
                                 size_t size) {
    int n = 0;
    size_t used = 0;
    char a[96], b[96];
    const char *separator = "";
    if (s->dtype != x->dtype) {
        if (out)
            used += (size_t)snprintf(out + used, size - used, "dtype %s -> %s",
                                     eg_dtype_name(s->dtype), eg_dtype_name(x->dtype));
        n++;
        separator = ", ";
    }
    if (s->n_dims != x->n_dims || memcmp(s->shape, x->shape, sizeof(int64_t) * (size_t)s->n_dims)) {
        if (out && used < size)
            used += (size_t)snprintf(out + used, size - used, "%sshape %s -> %s", separator,
                                     eg__shape_format(s->n_dims, s->shape, a, sizeof a),
                                     eg__shape_format(x->n_dims, x->shape, b, sizeof b));
        n++;
        separator = ", ";
    }
    if (s->device != x->device) {
        if (out && used < size)
            snprintf(out + used, size - used, "%sdevice %s -> %s", separator, s->device->name,
                     x->device->name);
        n++;
    }
    return n;
}

/* Why a call needs a new trace: what differs, input by input, between it and the nearest traced
 * signature (fewest differences; the newest among equals), not merely the last one traced. */
static void describe_signature_change(const eg_function *f, const eg_tensor *const *inputs,
                                      char *out, size_t size) {
    if (f->n_traces == 0) {
        snprintf(out, size, "first call");
        return;
    }
    const trace *nearest = NULL;
    int fewest = 0;
    for (int t = f->n_traces; t-- > 0;) {
        int n = fast_math_differs(f->traces[t]);
        for (int i = 0; i < f->n_inputs; i++)
            n += signature_differences(&f->traces[t]->signature[i], inputs[i], NULL, 0);
        if (!nearest || n < fewest) {
            nearest = f->traces[t];
            fewest = n;
        }
    }
    size_t used = 0;
    out[0] = '\0';
    if (fast_math_differs(nearest))
        used += (size_t)snprintf(out, size, "fast-math region %s",
                                 eg_fast_math_enabled() ? "entered" : "left");
    for (int i = 0; i < f->n_inputs && used < size; i++) {
        char what[256];
        if (!signature_differences(&nearest->signature[i], inputs[i], what, sizeof what)) continue;
        used +=
            (size_t)snprintf(out + used, size - used, "%sinput %d: %s", used ? "; " : "", i, what);
    }
    if (used == 0)
        snprintf(out, size, "unknown change");
    else if (f->n_traces > 1 && used < size)
        snprintf(out + used, size - used, " (nearest of %d traced signatures)", f->n_traces);
}

static bool signature_matches(const eg_function *f, const trace *t,
                              const eg_tensor *const *inputs) {
    if (fast_math_differs(t)) return false;
    for (int i = 0; i < f->n_inputs; i++) {
        const input_signature *s = &t->signature[i];
        const eg_tensor *x = inputs[i];
        if (s->dtype != x->dtype || s->n_dims != x->n_dims || s->device != x->device ||
            memcmp(s->shape, x->shape, sizeof(int64_t) * (size_t)s->n_dims))
            return false;
    }
    return true;
}

/* Graph outputs still to compute join the deferred actions' tensors as targets; the entries are
 * their storage-less ancestors in topological order; then the plan. */
eg_status eg__graph_finish_trace(trace *t, const char *name) {
    eg_status status = EG_OK;
    for (int i = 0; i < t->n_outputs && status == EG_OK; i++) {
        eg_tensor *o = t->outputs[i];
        if (o->storage || (o->lazy && o->lazy->placeholder >= 0)) continue;
        eg_tensor **targets = realloc(t->targets, sizeof *targets * (size_t)(t->n_targets + 1));
        if (!targets) return eg__error(EG_ERR_OUT_OF_MEMORY, "%s: out of host memory", name);
        t->targets = targets;
        eg__ref(o);
        t->targets[t->n_targets++] = o;
    }
    eg_tensor **order;
    int n;
    status = eg__lazy_topo_order(t->n_targets, eg__const_tensors(t->targets), &order, &n);
    if (status != EG_OK) return status;
    t->entries = calloc((size_t)n + 1, sizeof *t->entries);
    if (!t->entries) {
        for (int i = 0; i < n; i++) eg__unref(order[i]);
        free(order);
        return eg__error(EG_ERR_OUT_OF_MEMORY, "%s: out of host memory", name);
    }
    for (int i = 0; i < n; i++) {
        t->entries[i].tensor = order[i];
        eg__lazy_unpend(order[i]->lazy);
    }
    t->n_entries = n;
    free(order);
    return eg__graph_plan(t);
}

void eg__graph_copy_plan_stats(eg_function_stats *s, const eg_function_stats *plan) {
    s->n_nodes = plan->n_nodes;
    s->n_kernels = plan->n_kernels;
    s->n_fused_nodes = plan->n_fused_nodes;
    s->arena_bytes = plan->arena_bytes;
    s->unplanned_bytes = plan->unplanned_bytes;
    s->eager_bytes = plan->eager_bytes;
    s->n_cse_merged = plan->n_cse_merged;
    s->n_in_place = plan->n_in_place;
    s->n_early_updates = plan->n_early_updates;
    s->n_tiled_updates = plan->n_tiled_updates;
    s->scratch_bytes = plan->scratch_bytes;
    s->memory_budget = plan->memory_budget;
    s->budget_met = plan->budget_met;
    s->n_recomputed = plan->n_recomputed;
    s->recompute_saved_bytes = plan->recompute_saved_bytes;
    s->recompute_extra_flops = plan->recompute_extra_flops;
    memcpy(s->recomputed, plan->recomputed, sizeof s->recomputed);
}

static eg_status build_trace(eg_function *f, const eg_tensor *const *inputs, trace **out) {
    *out = NULL;
    if (tracing_now)
        return eg__error(EG_ERR_STATE,
                         "%s: functions cannot be traced inside "
                         "another traced function",
                         f->name);
    trace *t = calloc(1, sizeof *t);
    if (!t) return eg__error(EG_ERR_OUT_OF_MEMORY, "%s: out of host memory", f->name);
    t->signature = calloc((size_t)f->n_inputs + 1, sizeof *t->signature);
    t->placeholders = calloc((size_t)f->n_inputs + 1, sizeof *t->placeholders);
    t->outputs = calloc((size_t)f->n_outputs, sizeof *t->outputs);
    eg_tensor **returned = calloc((size_t)f->n_outputs, sizeof *returned);
    if (!t->signature || !t->placeholders || !t->outputs || !returned) {
        free(returned);
        trace_free(t, 0, 0);
        return eg__error(EG_ERR_OUT_OF_MEMORY, "%s: out of host memory", f->name);
    }
    t->device = f->n_inputs ? inputs[0]->device : eg__device_current();
    t->fast_math = eg_fast_math_enabled();
    eg_status status = EG_OK;
    eg__scope_suspend();
    for (int i = 0; i < f->n_inputs && status == EG_OK; i++) {
        input_signature *s = &t->signature[i];
        s->dtype = inputs[i]->dtype;
        s->n_dims = inputs[i]->n_dims;
        memcpy(s->shape, inputs[i]->shape, sizeof s->shape);
        s->device = inputs[i]->device;
        t->placeholders[i] = eg__lazy_placeholder(inputs[i], i);
        if (!t->placeholders[i]) status = eg_last_status();
    }
    eg__scope_resume();
    if (status == EG_OK) {
        tracing_now = t;
        eg__random_set_observer(note_random_tensor);
        eg_lazy_begin();
        eg__callback_frame frame;
        eg__callback_begin(&frame);
        status = f->fn(t->placeholders, returned, f->user_data);
        eg__callback_end(&frame);
        eg_lazy_end();
        eg__random_set_observer(NULL);
        tracing_now = NULL;
        bool raised = eg__error_since(frame.mark);
        if (status == EG_OK && raised)
            status = eg_last_status();
        else if (status != EG_OK && !raised)
            eg__error(status, "%s: the traced function failed (%s)", f->name,
                      eg_status_string(status));
    }
    for (int i = 0; i < f->n_outputs && status == EG_OK; i++)
        if (!returned[i])
            status = eg__error(EG_ERR_NULL_ARGUMENT, "%s: output %d was not set", f->name, i);
    for (int i = 0; i < f->n_outputs; i++) {
        if (status == EG_OK) {
            t->outputs[i] = returned[i];
            eg__ref(returned[i]);
        }
        eg_release(returned[i]); /* the function's reference: the trace holds its own */
    }
    free(returned);
    t->n_inputs = f->n_inputs;
    t->n_outputs = f->n_outputs;
    t->memory_budget = f->memory_budget;
    if (status == EG_OK) status = eg__graph_finish_trace(t, f->name);
    if (status != EG_OK) {
        trace_free(t, f->n_inputs, f->n_outputs);
        return status;
    }
    *out = t;
    return EG_OK;
}

/* ---- replay ---- */

eg_status eg__graph_ensure_arena(eg_function *f, trace *t) {
    /* the trace's own reference, and a captured graph's (capture.c), are not a caller's */
    long owners = 1 + (t->captured_arena && t->captured_arena == t->arena);
    if (t->arena && atomic_load(&t->arena->refcount) == owners) return EG_OK;
    /* First call, or outputs of an earlier call still hold the old arena: a new one. */
    if (t->arena) eg__storage_unref(t->arena);
    t->arena = NULL;
    eg__storage *arena = eg__storage_new(t->device, t->plan_stats.arena_bytes);
    if (!arena) return eg_last_status();
    t->arena = arena;
    f->stats.n_arena_allocations++;
    return EG_OK;
}

static void bind(eg_tensor *x, eg__storage *storage, int64_t offset) {
    eg__storage_ref(storage);
    x->storage = storage;
    x->offset = offset;
}

/* ---- optimizer updates inside the replay ---- */

void eg__graph_tile_to_update(void *context, int64_t offset, int rows, int cols, int64_t row_length,
                              const void *tile) {
    const update_part *part = context;
    if (cols == row_length) { /* whole rows: one contiguous range */
        eg__update_step_range(&part->step, offset, (int64_t)rows * cols, tile);
        return;
    }
    size_t size = eg_dtype_size(part->step.variable->dtype);
    for (int r = 0; r < rows; r++)
        eg__update_step_range(&part->step, offset + r * row_length, cols,
                              (const char *)tile + (size_t)r * (size_t)cols * size);
}

eg_status eg__graph_prepare_part(trace *t, update_part *part) {
    update_action *u = t->actions[part->action].update;
    return u->updater->prepare(u->optimizer, u->variables[part->index], u->iteration, &part->step);
}

bool eg__graph_part_is_direct(const trace *t, const update_part *part) {
    const update_action *u = t->actions[part->action].update;
    const eg_tensor *g = u->grads[part->index], *v = u->variables[part->index];
    return g->storage && g->dtype == v->dtype && eg__is_contiguous(g) && g->storage != v->storage;
}

void eg__graph_run_direct_part(trace *t, const update_part *part) {
    const update_action *u = t->actions[part->action].update;
    const eg_tensor *v = u->variables[part->index];
    if (v->n_elems)
        eg__update_step_range(&part->step, 0, v->n_elems, eg__data(u->grads[part->index]));
}

/* One variable's update from its computed gradient. */
static eg_status run_part(trace *t, update_part *part) {
    update_action *u = t->actions[part->action].update;
    eg_tensor *g = u->grads[part->index], *v = u->variables[part->index];
    if (eg__graph_part_is_direct(t, part)) {
        eg_status status = eg__graph_prepare_part(t, part);
        if (status == EG_OK) eg__graph_run_direct_part(t, part);
        return status;
    }
    /* casts, copies of views...: the optimizer's own path, at this step's iteration */
    eg_status status = u->updater->set_iterations(u->optimizer, u->iteration);
    if (status == EG_OK) status = u->updater->apply(u->optimizer, 1, &g, &v);
    return status;
}

eg_status eg__graph_bind_entry(trace *t, entry *e) {
    eg_tensor *x = e->tensor;
    const eg__lazy_node *node = x->lazy;
    switch (e->role) {
    case ROLE_INLINED:
        return EG_OK; /* computed inside its consumer's fused loop */
    case ROLE_VIEW: {
        const eg_tensor *base = node->inputs[0];
        if (!base->storage) return eg__error(EG_ERR_INTERNAL, "function: view of nothing");
        bind(x, base->storage, base->offset + e->view_delta);
        return EG_OK;
    }
    case ROLE_ALIAS: {
        const eg_tensor *same = t->entries[e->alias_of].tensor;
        if (!same->storage) return EG_OK; /* fused away: nothing reads the alias either */
        bind(x, same->storage, same->offset);
        return EG_OK;
    }
    case ROLE_BUFFER:
        break;
    }
    if (e->recompute_of >= 0) eg__tensor_detach_storage(x); /* its new copy */
    if (e->fused_part < 0) bind(x, t->arena, (int64_t)(e->offset / eg_dtype_size(x->dtype)));
    return EG_OK;
}

eg_status eg__graph_run_kernel(trace *t, entry *e, bool prepared) {
    eg_tensor *x = e->tensor;
    const eg__lazy_node *node = x->lazy;
    if (e->role != ROLE_BUFFER) return EG_OK;
    eg__kernel_call call = {node->op, node->n_inputs, eg__const_tensors(node->inputs), x,
                            &node->attrs};
    if (e->fused_part >= 0) {
        update_part *part = &t->parts[e->fused_part];
        eg_status status = prepared ? EG_OK : eg__graph_prepare_part(t, part);
        if (status != EG_OK || x->n_elems == 0) return status;
        status = eg__backend_of(x->device)->product_tiles(
            &call, (char *)t->arena->data + e->scratch_offset, e->n_scratch,
            eg__graph_tile_to_update, part);
        if (status != EG_OK) eg__launch_failed(&call, x->device, status);
        return status;
    }
    if (x->n_elems == 0) return EG_OK;
    if (e->n_members > 1) return eg__lazy_run_fused(x, e->n_members, e->members);
    return eg__launch_replay(&call);
}

eg_status eg__graph_run_entry(trace *t, entry *e) {
    eg_status status = eg__graph_bind_entry(t, e);
    return status == EG_OK ? eg__graph_run_kernel(t, e, false) : status;
}

/* A new tensor the caller owns, sharing the graph's (or an input's) memory. */
eg_tensor *eg__graph_output_for(const eg_tensor *graph_output) {
    return eg__tensor_view(graph_output, graph_output->n_dims, graph_output->shape,
                           graph_output->strides, graph_output->offset);
}

/* just_traced: the call that traced t, whose random ops drew their seeds while tracing. */
/* The body of a call, inputs bound: every update's iteration, the early updates, the entries
 * with the updates placed after them (in parallel when parallel_ok and the plan allows), the
 * deferred actions, the optimizers' counts. run_entries false: the updates and the dropouts
 * only (what a captured graph's refresh asks: their scalars and seeds for this call, no
 * kernel). */
eg_status eg__graph_run_steps(trace *t, int n_inputs, bool parallel_ok, bool run_entries) {
    eg_status status = EG_OK;
    /* each step's iteration: the optimizer's count, plus one per earlier step on it */
    for (int a = 0; a < t->n_actions; a++) {
        update_action *u = t->actions[a].update;
        if (!u) continue;
        u->iteration = u->updater->iterations(u->optimizer);
        for (int b = 0; b < a; b++)
            if (t->actions[b].update && t->actions[b].update->optimizer == u->optimizer)
                u->iteration++;
    }
    for (int p = 0; p < t->n_early_parts && status == EG_OK; p++)
        status = run_part(t, &t->parts[t->part_order[p]]);
    bool parallel = false;
    if (status == EG_OK && parallel_ok && run_entries)
        status = eg__graph_run_parallel(t, eg__const_tensors(t->placeholders), n_inputs, &parallel);
    for (int i = 0; i < t->n_entries && status == EG_OK && !parallel; i++) {
        entry *e = &t->entries[i];
        /* a refresh also runs the dropouts: their seeds are this call's too */
        if (run_entries)
            status = eg__graph_run_entry(t, e);
        else if (e->role == ROLE_BUFFER && e->tensor->lazy->op == EG__OP_DROPOUT)
            status = eg__graph_run_kernel(t, e, false); /* bound already by the caller */
        for (int p = 0; p < e->n_parts && status == EG_OK; p++)
            status = run_part(t, &t->parts[t->part_order[e->first_part + p]]);
    }
    /* what could not run earlier, in traced order */
    for (int a = 0; a < t->n_actions && status == EG_OK; a++) {
        if (t->actions[a].run) {
            status = t->actions[a].run(t->actions[a].context);
            continue;
        }
        for (int p = 0; p < t->n_parts && status == EG_OK; p++)
            if (t->parts[p].action == a && !t->parts[p].hoisted) status = run_part(t, &t->parts[p]);
    }
    for (int a = 0; a < t->n_actions && status == EG_OK; a++)
        if (t->actions[a].update)
            status = t->actions[a].update->updater->set_iterations(
                t->actions[a].update->optimizer, t->actions[a].update->iteration + 1);
    return status;
}

void eg__graph_unbind(trace *t) {
    for (int i = 0; i < t->n_entries; i++) eg__tensor_detach_storage(t->entries[i].tensor);
    for (int i = 0; i < t->n_inputs; i++) eg__tensor_detach_storage(t->placeholders[i]);
}

eg_function_stats *eg__graph_stats(eg_function *f) {
    return &f->stats;
}
int eg__graph_n_inputs(const eg_function *f) {
    return f->n_inputs;
}
int eg__graph_n_outputs(const eg_function *f) {
    return f->n_outputs;
}

static eg_status replay(eg_function *f, trace *t, const eg_tensor *const *inputs,
                        eg_tensor **outputs, bool just_traced) {
    if (!just_traced) { /* the tracing call ran op by op; later ones may launch one graph */
        bool handled = false;
        eg_status status = eg__graph_capture_call(f, t, inputs, outputs, &handled);
        if (handled) return status;
    }
    if (!just_traced && !t->redrawn) eg__graph_redraw_random(t);
    t->redrawn = false;
    eg_status status = eg__graph_ensure_arena(f, t);
    eg_tensor *copies[64] = {0};
    for (int i = 0; i < f->n_inputs && status == EG_OK; i++) {
        const eg_tensor *x = inputs[i];
        if (!x->storage && (status = eg__realize(x)) != EG_OK) break;
        if (!eg__is_contiguous(x)) { /* the graph was traced for row-major inputs */
            eg_tensor *copy = eg__contiguous_on_device(x);
            if (!copy) {
                status = eg_last_status();
                break;
            }
            if (i < 64) copies[i] = copy;
            x = copy;
        }
        bind(t->placeholders[i], x->storage, x->offset);
    }
    if (status == EG_OK) status = eg__graph_run_steps(t, f->n_inputs, !just_traced, true);
    for (int i = 0; i < f->n_outputs; i++) {
        outputs[i] = NULL;
        if (status == EG_OK) {
            outputs[i] = eg__graph_output_for(t->outputs[i]);
            if (!outputs[i]) status = eg_last_status();
        }
    }
    if (status != EG_OK)
        for (int i = 0; i < f->n_outputs; i++) {
            eg_release(outputs[i]);
            outputs[i] = NULL;
        }
    eg__graph_unbind(t);
    for (int i = 0; i < f->n_inputs && i < 64; i++) eg__unref(copies[i]);
    f->stats.n_replays++;
    return status;
}

eg_status eg_function_call(eg_function *f, eg_tensor *const *inputs_in, eg_tensor **outputs) {
    const eg_tensor *const *inputs = eg__const_tensors(inputs_in);
    if (!f || !outputs || (f->n_inputs > 0 && !inputs))
        return eg__error(EG_ERR_NULL_ARGUMENT, "function_call: NULL argument");
    for (int i = 0; i < f->n_inputs; i++)
        if (!eg__check_arg(inputs[i], f->name, i)) return eg_last_status();
    if (f->n_inputs > 64) return eg__error(EG_ERR_UNSUPPORTED, "%s: at most 64 inputs", f->name);
    trace *t = NULL;
    bool just_traced = false;
    for (int i = 0; i < f->n_traces && !t; i++)
        if (signature_matches(f, f->traces[i], inputs)) t = f->traces[i];
    if (!t) {
        char reason[160];
        describe_signature_change(f, inputs, reason, sizeof reason);
        trace **traces = realloc(f->traces, sizeof *traces * (size_t)(f->n_traces + 1));
        if (!traces) return eg__error(EG_ERR_OUT_OF_MEMORY, "%s: out of host memory", f->name);
        f->traces = traces;
        eg_status status = build_trace(f, inputs, &t);
        if (status != EG_OK) return status;
        f->traces[f->n_traces++] = t;
        just_traced = true;
        eg_function_stats *s = &f->stats;
        s->n_traces = f->n_traces;
        snprintf(s->last_trace_reason, sizeof s->last_trace_reason, "%s", reason);
        if (f->n_traces > f->retrace_limit)
            snprintf(s->retrace_warning, sizeof s->retrace_warning,
                     "%.40s traced %d times (last: %.100s); keep input shapes and dtypes fixed, "
                     "e.g. drop the last batch",
                     f->name, f->n_traces, reason);
        eg__graph_copy_plan_stats(s, &t->plan_stats);
    }
    return replay(f, t, inputs, outputs, just_traced);
}

/* ---- what session.c builds on ---- */

trace *eg__graph_trace_new(void) {
    trace *t = calloc(1, sizeof *t);
    if (!t) eg__error(EG_ERR_OUT_OF_MEMORY, "graph: out of host memory");
    return t;
}

void eg__graph_trace_free(trace *t, int n_inputs, int n_outputs) {
    trace_free(t, n_inputs, n_outputs);
}

eg_status eg__graph_record_begin(trace *t, const char *name) {
    if (tracing_now)
        return eg__error(EG_ERR_STATE, "%s: already recording a graph or tracing a function", name);
    tracing_now = t;
    eg__random_set_observer(note_random_tensor);
    eg_lazy_begin();
    return EG_OK;
}

void eg__graph_record_end(void) {
    trace *t = tracing_now;
    eg_lazy_end();
    eg__random_set_observer(NULL);
    tracing_now = NULL;
    /* what the graph recorded reads the live variables at every run */
    for (int i = 0; t && i < t->n_notes; i++)
        if (t->notes[i]->lazy) eg__lazy_unpend(t->notes[i]->lazy);
}

eg_status eg__graph_sign(trace *t) {
    t->signature = calloc((size_t)t->n_inputs + 1, sizeof *t->signature);
    if (!t->signature) return eg__error(EG_ERR_OUT_OF_MEMORY, "graph: out of host memory");
    for (int i = 0; i < t->n_inputs; i++) {
        input_signature *s = &t->signature[i];
        const eg_tensor *x = t->placeholders[i];
        s->dtype = x->dtype;
        s->n_dims = x->n_dims;
        memcpy(s->shape, x->shape, sizeof s->shape);
        s->device = x->device;
    }
    t->device = t->n_inputs ? t->placeholders[0]->device : eg__device_current();
    t->fast_math = -1;
    return EG_OK;
}

static eg_status no_function(eg_tensor *const *inputs, eg_tensor **outputs, void *user) {
    (void)inputs;
    (void)outputs;
    (void)user;
    return eg__error(EG_ERR_INTERNAL, "session: a plan was asked to trace");
}

eg_function *eg__function_from_trace(const char *name, trace *t) {
    eg_function *f = eg_function_new(name, no_function, t->n_inputs, t->n_outputs, NULL);
    trace **traces = f ? malloc(sizeof *traces) : NULL;
    if (!traces) {
        eg_function_free(f);
        if (f) eg__error(EG_ERR_OUT_OF_MEMORY, "%s: out of host memory", name);
        return NULL;
    }
    traces[0] = t;
    f->traces = traces;
    f->n_traces = 1;
    f->stats.n_traces = 1;
    snprintf(f->stats.last_trace_reason, sizeof f->stats.last_trace_reason, "first run");
    eg__graph_copy_plan_stats(&f->stats, &t->plan_stats);
    return f;
}
