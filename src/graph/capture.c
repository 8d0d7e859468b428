/* A traced function's calls as one launch of a captured graph (CUDA graphs), on devices whose
 * backend captures (backend.h: capture_begin …).
 *
 * The first call after the trace runs op by op while the backend records it; later calls launch
 * the recording. A graph bakes in every address and every kernel parameter it was recorded with,
 * so a trace is captured only when its calls differ in nothing but input values and what the
 * backend can refresh:
 *   - no deferred host actions (an assign), and updates only that read their gradient in place;
 *   - an update's scalars (the step size, Adam's bias corrections) and a dropout's seed change
 *     each call, so the recorded kernels read them from the graph's memory, and before each
 *     launch the updates and dropouts run on the host alone (refresh) to write this call's
 *     there; random constants are refilled in place before the launch, as in a replay;
 * and it is captured again when its memory moved: a new arena (the previous call's outputs still
 * held the old one). Inputs are copied into buffers of the graph's own unless they already are
 * those buffers; the graph never reads the caller's tensors. */
#include <stdio.h>
#include <stdlib.h>

#include "base/error.h"
#include "dispatch/dispatch.h"
#include "eagle/runtime.h"
#include "graph/internal.h"

/* Why t cannot be captured on a backend with these hooks, or NULL. */
static const char *refusal(const trace *t, const eg__backend *backend) {
    if (t->n_random && !backend->graph_refresh_begin)
        return "it draws random numbers (dropout, random constants), and the device cannot "
               "refresh a dropout's seed";
    for (int i = 0; i < t->n_random; i++) /* seeds are refreshed for dropouts only */
        if (t->random_fills[i].distribution < 0 && t->random_ops[i]->lazy &&
            t->random_ops[i]->lazy->op != EG__OP_DROPOUT)
            return "it draws a seed for an op whose kernel cannot take it from graph memory";
    for (int a = 0; a < t->n_actions; a++)
        if (t->actions[a].run) return "it runs deferred host actions (an assign)";
    for (int i = 0; i < t->n_entries; i++) { /* one device's stream is captured */
        const eg_tensor *x = t->entries[i].tensor;
        if (x->device != t->device) return "it computes on more than one device";
        for (int j = 0; x->lazy && j < x->lazy->n_inputs; j++)
            if (x->lazy->inputs[j]->device != t->device)
                return "it reads tensors of more than one device";
    }
    if (t->n_parts && !backend->graph_refresh_begin)
        return "it updates variables, and the device cannot refresh an update's scalars";
    for (int p = 0; p < t->n_parts; p++)
        if (!eg__graph_part_is_direct(t, &t->parts[p]))
            return "an update casts or copies its gradient (a gradient of another dtype or a "
                   "view), through temporaries a graph cannot keep";
    return NULL;
}

/* Puts the optimizers' step counts back where this call found them (a refresh that failed
 * after eg__graph_run_steps advanced them): the first update of each optimizer holds its
 * count, so the updates are visited last to first. */
static void restore_iterations(trace *t) {
    for (int a = t->n_actions - 1; a >= 0; a--) {
        update_action *u = t->actions[a].update;
        if (u) (void)u->updater->set_iterations(u->optimizer, u->iteration);
    }
}

static void note(eg_function *f, const char *fmt, const char *why) {
    eg_function_stats *s = eg__graph_stats(f);
    snprintf(s->capture_note, sizeof s->capture_note, fmt, why);
}

void eg__graph_capture_free(trace *t) {
    if (t->captured) eg__backend_of(t->device)->graph_free(t->device, t->captured);
    t->captured = NULL;
    if (t->captured_arena) eg__storage_unref(t->captured_arena);
    t->captured_arena = NULL;
    for (int i = 0; t->captured_inputs && i < t->n_inputs; i++)
        if (t->captured_inputs[i]) eg__storage_unref(t->captured_inputs[i]);
    free(t->captured_inputs);
    t->captured_inputs = NULL;
}

/* Input i's values into the graph's buffer for it (x dense, its bytes those of placeholder i). */
static eg_status bind_input(eg_function *f, trace *t, int i, const eg_tensor *x) {
    eg__storage *buffer = t->captured_inputs[i];
    if (x->storage == buffer && x->offset == 0) return EG_OK;
    size_t bytes = (size_t)x->n_elems * eg__dtype_size(x->dtype);
    eg__graph_stats(f)->n_input_copies++;
    return x->device->copy(t->device, buffer->data, x->device, eg__data(x), bytes, NULL);
}

/* The placeholders read the graph's input buffers (detached again at the end of the call). */
static void bind_placeholders(trace *t) {
    for (int i = 0; i < t->n_inputs; i++) {
        eg__storage_ref(t->captured_inputs[i]);
        t->placeholders[i]->storage = t->captured_inputs[i];
        t->placeholders[i]->offset = 0;
    }
}

/* Records one call: inputs into fresh buffers, the entries run under capture. */
static eg_status capture(eg_function *f, trace *t, const eg_tensor *const *inputs) {
    const eg__backend *backend = eg__backend_of(t->device);
    eg__graph_capture_free(t);
    t->captured_inputs = calloc((size_t)t->n_inputs, sizeof *t->captured_inputs);
    if (!t->captured_inputs)
        return eg__error(EG_ERR_OUT_OF_MEMORY, "%s: out of host memory", "graph capture");
    eg_status status = EG_OK;
    for (int i = 0; i < t->n_inputs && status == EG_OK; i++) {
        const eg_tensor *p = t->placeholders[i];
        t->captured_inputs[i] =
            eg__storage_new(t->device, (size_t)p->n_elems * eg__dtype_size(p->dtype));
        status = t->captured_inputs[i] ? bind_input(f, t, i, inputs[i]) : eg_last_status();
    }
    if (status != EG_OK) return status;
    eg__storage_ref(t->arena);
    t->captured_arena = t->arena;
    bind_placeholders(t);
    status = backend->capture_begin(t->device);
    if (status != EG_OK) return status;
    /* the whole call, updates included (their scalars go to the graph's memory) */
    status = eg__graph_run_steps(t, t->n_inputs, false, true);
    void *graph = NULL;
    eg_status ended = backend->capture_end(t->device, &graph);
    if (status == EG_OK) status = ended;
    if (status != EG_OK) restore_iterations(t); /* run_steps advanced them; nothing ran */
    if (status == EG_OK) {
        t->captured = graph;
        eg__graph_stats(f)->n_captures++;
    }
    return status;
}

/* The op-by-op replay takes over from here (for good): nothing of this call stays bound. */
static void fall_back(eg_function *f, trace *t, const char *why) {
    note(f, "not captured as a graph: %s", why);
    eg_clear_error();
    eg__graph_capture_free(t);
    eg__graph_unbind(t);
    t->capture_refused = true;
}

/* Whether a caller still holds an earlier call's output that shares one of the graph's input
 * buffers (an output that is an input, or a view of one): new values copied there would change
 * it under the caller. */
static bool inputs_held(const trace *t) {
    for (int i = 0; t->captured_inputs && i < t->n_inputs; i++)
        if (t->captured_inputs[i] && atomic_load(&t->captured_inputs[i]->refcount) > 1) return true;
    return false;
}

eg_status eg__graph_capture_call(eg_function *f, trace *t, const eg_tensor *const *inputs,
                                 eg_tensor **outputs, bool *handled) {
    *handled = false;
    const eg__backend *backend = eg__backend_of(t->device);
    if (!backend->capture_begin || t->capture_refused) return EG_OK;
    const char *why = refusal(t, backend);
    if (why) {
        t->capture_refused = true;
        note(f, "not captured as a graph: %s", why);
        return EG_OK;
    }
    /* the op-by-op replay realizes, packs or refuses these inputs, and checks numerics (which
     * reads every result back on the host) */
    if (eg_check_numerics()) return EG_OK;
    for (int i = 0; i < t->n_inputs; i++)
        if (!inputs[i]->storage || !eg__is_contiguous(inputs[i]) || inputs[i]->device != t->device)
            return EG_OK;
    /* as every call: new constants in place, new dropout seeds (once: a fallback to the
     * op-by-op replay below does not draw again) */
    uint64_t mark = eg__error_mark();
    eg__graph_redraw_random(t);
    t->redrawn = true;
    *handled = true;
    eg_status status = eg__error_since(mark) ? eg_last_status() : eg__graph_ensure_arena(f, t);
    if (status != EG_OK) {
        t->redrawn = false;
        return status;
    }
    if (t->captured && (t->arena != t->captured_arena || inputs_held(t))) {
        note(f, "%s",
             "captured again: the previous call's outputs still held the graph's "
             "memory (release them before the next call)");
        eg__graph_capture_free(t);
    }
    if (!t->captured) {
        status = capture(f, t, inputs);
        if (status != EG_OK) { /* what the device could not record runs op by op from now on */
            fall_back(f, t, eg_last_error());
            *handled = false;
            return EG_OK;
        }
    } else {
        for (int i = 0; i < t->n_inputs && status == EG_OK; i++)
            status = bind_input(f, t, i, inputs[i]);
        bind_placeholders(t);
        /* the entries' storage, as at the capture (outputs are views of it) */
        for (int i = 0; i < t->n_entries && status == EG_OK; i++)
            status = eg__graph_bind_entry(t, &t->entries[i]);
        if (status == EG_OK && (t->n_parts || t->n_random)) {
            /* this call's update scalars and dropout seeds, nothing launched */
            status = backend->graph_refresh_begin(t->device, t->captured);
            if (status == EG_OK) {
                status = eg__graph_run_steps(t, t->n_inputs, false, false);
                eg_status ended = backend->graph_refresh_end(t->device, t->captured);
                if (status == EG_OK) status = ended;
                if (status != EG_OK) { /* the graph no longer matches the calls: op by op */
                    restore_iterations(t);
                    fall_back(f, t, eg_last_error());
                    *handled = false;
                    return EG_OK;
                }
            }
        }
    }
    if (status == EG_OK) {
        status = backend->graph_launch(t->device, t->captured);
        if (status != EG_OK) restore_iterations(t); /* the step did not happen */
    }
    if (status == EG_OK) eg__graph_stats(f)->n_graph_launches++;
    for (int i = 0; i < eg__graph_n_outputs(f); i++) {
        outputs[i] = NULL;
        if (status == EG_OK && !(outputs[i] = eg__graph_output_for(t->outputs[i])))
            status = eg_last_status();
    }
    if (status != EG_OK)
        for (int i = 0; i < eg__graph_n_outputs(f); i++) {
            eg_release(outputs[i]);
            outputs[i] = NULL;
        }
    eg__graph_unbind(t);
    eg__graph_stats(f)->n_replays++;
    t->redrawn = false;
    return status;
}
