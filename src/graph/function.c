/* Graph mode: eg_function traces a C function once per input signature into a lazy graph, plans
 * it once — fused elementwise groups, and one arena in which every intermediate gets an offset
 * from its lifetime — and replays it on later calls with no allocation but the outputs' headers.
 *
 * Tracing runs the function in lazy mode on placeholders. Side effects (optimizer updates,
 * assign) are deferred: they run at every replay after the graph, in traced order. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cpu/kernels.h"
#include "core/error.h"
#include "graph/planner.h"
#include "lazy/internal.h"

typedef struct input_signature {
    eg_dtype dtype;
    int n_dims;
    int64_t shape[EG_MAX_DIMS];
    const eg_device *device;
} input_signature;

typedef enum { ROLE_VIEW, ROLE_INLINED, ROLE_BUFFER } role;

typedef struct entry {
    eg_tensor *tensor; /* a graph tensor: its lazy node is the recipe, kept for every replay */
    role role;
    int last_use;
    size_t offset, bytes; /* ROLE_BUFFER: place in the arena */
    int64_t view_delta;   /* ROLE_VIEW: offset - base offset, in elements */
    int n_members;        /* ROLE_BUFFER: fused group size (1: a plain kernel) */
    eg_tensor **members;
} entry;

typedef struct deferred {
    void (*run)(void *context);
    void (*free_context)(void *context);
    void *context;
} deferred;

typedef struct trace {
    input_signature *signature;
    eg_tensor **placeholders;
    eg_tensor **outputs;
    eg_tensor **targets; /* outputs to compute + tensors the deferred actions read */
    int n_targets;
    deferred *actions;
    int n_actions;
    entry *entries;
    int n_entries;
    size_t arena_bytes, unplanned_bytes, eager_bytes;
    int64_t n_kernels, n_fused;
    eg__storage *arena;
    const eg_device *device;
} trace;

struct eg_function {
    char *name;
    eg_traced_fn fn;
    int n_inputs, n_outputs;
    void *user_data;
    trace **traces;
    int n_traces;
    int retrace_limit;
    eg_function_stats stats;
};

static _Thread_local trace *tracing_now;

bool eg__graph_tracing(void) {
    return tracing_now != NULL;
}

eg_status eg__graph_defer(void (*run)(void *context), void (*free_context)(void *context),
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
    t->actions[t->n_actions++] = (deferred){run, free_context, context};
    for (int i = 0; i < n_tensors; i++) {
        if (!tensors[i]) continue;
        eg__ref(tensors[i]);
        t->targets[t->n_targets++] = (eg_tensor *)tensors[i];
    }
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
    for (int i = 0; i < t->n_actions; i++)
        if (t->actions[i].free_context) t->actions[i].free_context(t->actions[i].context);
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

eg_status eg_function_stats_get(const eg_function *f, eg_function_stats *out) {
    if (!f || !out) return eg__error(EG_ERR_NULL_ARGUMENT, "function_stats_get: NULL argument");
    *out = f->stats;
    return EG_OK;
}

/* ---- planning ---- */

static int position_in(const trace *t, const eg_tensor *x) {
    /* Graphs are small (tens to hundreds of ops): a scan keeps this simple. */
    for (int i = 0; i < t->n_entries; i++)
        if (t->entries[i].tensor == x) return i;
    return -1;
}

static bool is_target(const trace *t, const eg_tensor *x) {
    for (int i = 0; i < t->n_targets; i++)
        if (t->targets[i] == x) return true;
    return false;
}

static bool same_shape(const eg_tensor *a, const eg_tensor *b) {
    return a->n_dims == b->n_dims &&
           memcmp(a->shape, b->shape, sizeof(int64_t) * (size_t)a->n_dims) == 0;
}

static eg_status plan_trace(trace *t) {
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
        const eg__lazy_node *node = t->entries[i].tensor->lazy;
        for (int j = 0; j < node->n_inputs; j++) {
            int at = position_in(t, node->inputs[j]);
            if (at < 0) continue;
            consumers[at]++;
            if (!eg__lazy_fusable(t->entries[i].tensor) ||
                !same_shape(t->entries[i].tensor, t->entries[at].tensor))
                fusable_consumers[at] = false;
        }
    }
    for (int i = 0; i < n; i++) {
        entry *e = &t->entries[i];
        bool target = is_target(t, e->tensor);
        e->last_use = target ? n : -1;
        if (e->tensor->lazy->is_view)
            e->role = ROLE_VIEW;
        else if (!target && eg__lazy_fusable(e->tensor) && consumers[i] > 0 && fusable_consumers[i])
            e->role = ROLE_INLINED;
        else
            e->role = ROLE_BUFFER;
        size_t bytes = (size_t)e->tensor->n_elems * eg_dtype_size(e->tensor->dtype);
        if (e->role != ROLE_VIEW) t->eager_bytes += bytes;
        if (e->role == ROLE_INLINED) t->n_fused++;
        if (e->role == ROLE_BUFFER) {
            t->n_kernels++;
            e->bytes = bytes ? (bytes + 63) & ~(size_t)63 : 64;
            t->unplanned_bytes += e->bytes;
        }
    }
    /* Lifetimes: a buffer lives until its last reader runs; inlined ops and views read their
     * inputs for as long as they are themselves alive. */
    for (int i = n - 1; i >= 0; i--) {
        entry *e = &t->entries[i];
        int alive_until = e->role == ROLE_BUFFER ? i : (e->last_use > i ? e->last_use : i);
        if (e->role == ROLE_BUFFER && e->last_use < i) e->last_use = i;
        const eg__lazy_node *node = e->tensor->lazy;
        for (int j = 0; j < node->n_inputs; j++) {
            int at = position_in(t, node->inputs[j]);
            if (at >= 0 && alive_until > t->entries[at].last_use)
                t->entries[at].last_use = alive_until;
        }
    }
    /* Fused groups: each buffer whose op is elementwise gathers its inlined producers. */
    for (int i = 0; i < n; i++) {
        entry *e = &t->entries[i];
        if (e->role != ROLE_BUFFER || !eg__lazy_fusable(e->tensor)) continue;
        bool *seen = calloc((size_t)n, sizeof *seen);
        int *stack = malloc((size_t)n * sizeof *stack);
        if (!seen || !stack) {
            free(seen);
            free(stack);
            free(consumers);
            free(fusable_consumers);
            return eg__error(EG_ERR_OUT_OF_MEMORY, "function: out of host memory");
        }
        int depth = 0, count = 1;
        stack[depth++] = i;
        while (depth > 0) {
            const eg__lazy_node *node = t->entries[stack[--depth]].tensor->lazy;
            for (int j = 0; j < node->n_inputs; j++) {
                int at = position_in(t, node->inputs[j]);
                if (at < 0 || t->entries[at].role != ROLE_INLINED || seen[at]) continue;
                seen[at] = true;
                count++;
                stack[depth++] = at;
            }
        }
        e->members = malloc(sizeof *e->members * (size_t)count);
        if (e->members) {
            e->n_members = 0;
            for (int k = 0; k < i; k++)
                if (seen[k]) e->members[e->n_members++] = t->entries[k].tensor;
            e->members[e->n_members++] = e->tensor;
        }
        free(seen);
        free(stack);
        if (!e->members) { /* its inlined producers would never run */
            free(consumers);
            free(fusable_consumers);
            return eg__error(EG_ERR_OUT_OF_MEMORY, "function: out of host memory");
        }
    }
    /* Views: their offset relative to their base, which moves into the arena at replay. */
    for (int i = 0; i < n; i++) {
        entry *e = &t->entries[i];
        if (e->role == ROLE_VIEW)
            e->view_delta = e->tensor->offset - e->tensor->lazy->inputs[0]->offset;
    }
    /* The arena. */
    eg__buffer_request *requests = malloc(sizeof *requests * ((size_t)n + 1));
    eg_status status = EG_OK;
    if (!requests) {
        status = eg__error(EG_ERR_OUT_OF_MEMORY, "function: out of host memory");
    } else {
        int n_requests = 0;
        for (int i = 0; i < n; i++)
            if (t->entries[i].role == ROLE_BUFFER)
                requests[n_requests++] =
                    (eg__buffer_request){t->entries[i].bytes, i, t->entries[i].last_use, 0};
        t->arena_bytes = eg__plan_buffers(requests, n_requests);
        for (int r = 0, i = 0; i < n; i++)
            if (t->entries[i].role == ROLE_BUFFER) t->entries[i].offset = requests[r++].offset;
        free(requests);
    }
    free(consumers);
    free(fusable_consumers);
    return status;
}

/* ---- tracing ---- */

static void describe_signature_change(const eg_function *f, const trace *old,
                                      const eg_tensor *const *inputs, char *out, size_t size) {
    if (!old) {
        snprintf(out, size, "first call");
        return;
    }
    for (int i = 0; i < f->n_inputs; i++) {
        const input_signature *s = &old->signature[i];
        const eg_tensor *x = inputs[i];
        char a[96], b[96];
        if (s->dtype != x->dtype) {
            snprintf(out, size, "input %d: dtype %s -> %s", i, eg_dtype_name(s->dtype),
                     eg_dtype_name(x->dtype));
            return;
        }
        if (s->n_dims != x->n_dims ||
            memcmp(s->shape, x->shape, sizeof(int64_t) * (size_t)s->n_dims)) {
            snprintf(out, size, "input %d: shape %s -> %s", i,
                     eg__shape_format(s->n_dims, s->shape, a, sizeof a),
                     eg__shape_format(x->n_dims, x->shape, b, sizeof b));
            return;
        }
        if (s->device != x->device) {
            snprintf(out, size, "input %d: device %s -> %s", i, s->device->name, x->device->name);
            return;
        }
    }
    snprintf(out, size, "unknown change");
}

static bool signature_matches(const eg_function *f, const trace *t,
                              const eg_tensor *const *inputs) {
    for (int i = 0; i < f->n_inputs; i++) {
        const input_signature *s = &t->signature[i];
        const eg_tensor *x = inputs[i];
        if (s->dtype != x->dtype || s->n_dims != x->n_dims || s->device != x->device ||
            memcmp(s->shape, x->shape, sizeof(int64_t) * (size_t)s->n_dims))
            return false;
    }
    return true;
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
    t->device = f->n_inputs ? inputs[0]->device : eg__cpu_device();
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
        eg_lazy_begin();
        status = f->fn((const eg_tensor *const *)t->placeholders, returned, f->user_data);
        eg_lazy_end();
        tracing_now = NULL;
        if (status == EG_OK && eg__error_pending())
            status = eg_last_status();
        else if (status != EG_OK && !eg__error_pending())
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
    /* Graph outputs still to compute join the deferred actions' tensors as targets. */
    for (int i = 0; i < f->n_outputs && status == EG_OK; i++) {
        eg_tensor *o = t->outputs[i];
        if (o->storage || (o->lazy && o->lazy->placeholder >= 0)) continue;
        eg_tensor **targets = realloc(t->targets, sizeof *targets * (size_t)(t->n_targets + 1));
        if (!targets) {
            status = eg__error(EG_ERR_OUT_OF_MEMORY, "%s: out of host memory", f->name);
            break;
        }
        t->targets = targets;
        eg__ref(o);
        t->targets[t->n_targets++] = o;
    }
    if (status == EG_OK) {
        eg_tensor **order;
        int n;
        status =
            eg__lazy_topo_order(t->n_targets, (const eg_tensor *const *)t->targets, &order, &n);
        if (status == EG_OK) {
            t->entries = calloc((size_t)n + 1, sizeof *t->entries);
            if (!t->entries) {
                for (int i = 0; i < n; i++) eg__unref(order[i]);
                status = eg__error(EG_ERR_OUT_OF_MEMORY, "%s: out of host memory", f->name);
            } else {
                for (int i = 0; i < n; i++) {
                    t->entries[i].tensor = order[i];
                    eg__lazy_unpend(order[i]->lazy);
                }
                t->n_entries = n;
                status = plan_trace(t);
            }
            free(order);
        }
    }
    if (status != EG_OK) {
        trace_free(t, f->n_inputs, f->n_outputs);
        return status;
    }
    *out = t;
    return EG_OK;
}

/* ---- replay ---- */

static eg_status ensure_arena(eg_function *f, trace *t) {
    if (t->arena && atomic_load(&t->arena->refcount) == 1) return EG_OK;
    /* First call, or outputs of an earlier call still hold the old arena: a new one. */
    if (t->arena) eg__storage_unref(t->arena);
    t->arena = NULL;
    eg__storage *arena = malloc(sizeof *arena);
    if (!arena) return eg__error(EG_ERR_OUT_OF_MEMORY, "%s: out of host memory", f->name);
    arena->data = eg__allocator_alloc(t->device->get_allocator(t->device), t->arena_bytes,
                                      &arena->allocation);
    if (!arena->data) {
        free(arena);
        return eg_last_status();
    }
    atomic_init(&arena->refcount, 1);
    arena->n_bytes = t->arena_bytes;
    arena->device = t->device;
    arena->container = NULL;
    arena->release = NULL;
    arena->release_context = NULL;
    t->arena = arena;
    f->stats.n_arena_allocations++;
    return EG_OK;
}

static void bind(eg_tensor *x, eg__storage *storage, int64_t offset) {
    eg__storage_ref(storage);
    x->storage = storage;
    x->offset = offset;
}

static eg_status run_entry(trace *t, entry *e) {
    eg_tensor *x = e->tensor;
    const eg__lazy_node *node = x->lazy;
    if (e->role == ROLE_INLINED) return EG_OK; /* computed inside its consumer's fused loop */
    if (e->role == ROLE_VIEW) {
        const eg_tensor *base = node->inputs[0];
        if (!base->storage) return eg__error(EG_ERR_INTERNAL, "function: view of nothing");
        bind(x, base->storage, base->offset + e->view_delta);
        return EG_OK;
    }
    bind(x, t->arena, (int64_t)(e->offset / eg_dtype_size(x->dtype)));
    if (x->n_elems == 0) return EG_OK;
    if (e->n_members > 1) return eg__lazy_run_fused(x, e->n_members, e->members);
    eg__kernel_fn kernel = x->device->kernels[node->op];
    if (!kernel)
        return eg__op_error(node->op, EG_ERR_UNSUPPORTED, "no kernel on %s", x->device->name);
    eg__kernel_call call = {node->op, node->n_inputs, (const eg_tensor *const *)node->inputs, x,
                            &node->attrs};
    eg_status status = kernel(&call);
    if (status != EG_OK) eg__op_error(node->op, status, "kernel failed on %s", x->device->name);
    return status;
}

/* A new tensor the caller owns, sharing the graph's (or an input's) memory. */
static eg_tensor *output_for(const eg_tensor *graph_output) {
    return eg__tensor_view(graph_output, graph_output->n_dims, graph_output->shape,
                           graph_output->strides, graph_output->offset);
}

static eg_status replay(eg_function *f, trace *t, const eg_tensor *const *inputs,
                        eg_tensor **outputs) {
    eg_status status = ensure_arena(f, t);
    eg_tensor *copies[64] = {0};
    for (int i = 0; i < f->n_inputs && status == EG_OK; i++) {
        const eg_tensor *x = inputs[i];
        if (!x->storage && (status = eg__realize(x)) != EG_OK) break;
        if (!eg__is_contiguous(x)) { /* the graph was traced for row-major inputs */
            eg_tensor *copy = eg__contiguous_temp(x);
            if (!copy) {
                status = eg_last_status();
                break;
            }
            if (i < 64) copies[i] = copy;
            x = copy;
        }
        bind(t->placeholders[i], x->storage, x->offset);
    }
    for (int i = 0; i < t->n_entries && status == EG_OK; i++) status = run_entry(t, &t->entries[i]);
    for (int i = 0; i < t->n_actions && status == EG_OK; i++) {
        t->actions[i].run(t->actions[i].context);
        if (eg__error_pending()) status = eg_last_status();
    }
    for (int i = 0; i < f->n_outputs; i++) {
        outputs[i] = NULL;
        if (status == EG_OK) {
            outputs[i] = output_for(t->outputs[i]);
            if (!outputs[i]) status = eg_last_status();
        }
    }
    if (status != EG_OK)
        for (int i = 0; i < f->n_outputs; i++) {
            eg_release(outputs[i]);
            outputs[i] = NULL;
        }
    for (int i = 0; i < t->n_entries; i++) eg__tensor_detach_storage(t->entries[i].tensor);
    for (int i = 0; i < f->n_inputs; i++) eg__tensor_detach_storage(t->placeholders[i]);
    for (int i = 0; i < f->n_inputs && i < 64; i++) eg__unref(copies[i]);
    f->stats.n_replays++;
    return status;
}

eg_status eg_function_call(eg_function *f, const eg_tensor *const *inputs, eg_tensor **outputs) {
    if (!f || !outputs || (f->n_inputs > 0 && !inputs))
        return eg__error(EG_ERR_NULL_ARGUMENT, "function_call: NULL argument");
    for (int i = 0; i < f->n_inputs; i++)
        if (!eg__check_arg(inputs[i], f->name, i)) return eg_last_status();
    if (f->n_inputs > 64) return eg__error(EG_ERR_UNSUPPORTED, "%s: at most 64 inputs", f->name);
    trace *t = NULL;
    for (int i = 0; i < f->n_traces && !t; i++)
        if (signature_matches(f, f->traces[i], inputs)) t = f->traces[i];
    if (!t) {
        char reason[160];
        describe_signature_change(f, f->n_traces ? f->traces[f->n_traces - 1] : NULL, inputs,
                                  reason, sizeof reason);
        trace **traces = realloc(f->traces, sizeof *traces * (size_t)(f->n_traces + 1));
        if (!traces) return eg__error(EG_ERR_OUT_OF_MEMORY, "%s: out of host memory", f->name);
        f->traces = traces;
        eg_status status = build_trace(f, inputs, &t);
        if (status != EG_OK) return status;
        f->traces[f->n_traces++] = t;
        eg_function_stats *s = &f->stats;
        s->n_traces = f->n_traces;
        snprintf(s->last_trace_reason, sizeof s->last_trace_reason, "%s", reason);
        if (f->n_traces > f->retrace_limit)
            snprintf(s->retrace_warning, sizeof s->retrace_warning,
                     "%.40s traced %d times (last: %.100s); keep input shapes and dtypes fixed, "
                     "e.g. drop the last batch",
                     f->name, f->n_traces, reason);
        s->n_nodes = t->n_entries;
        s->n_kernels = t->n_kernels;
        s->n_fused_nodes = t->n_fused;
        s->arena_bytes = t->arena_bytes;
        s->unplanned_bytes = t->unplanned_bytes;
        s->eager_bytes = t->eager_bytes;
    }
    return replay(f, t, inputs, outputs);
}
