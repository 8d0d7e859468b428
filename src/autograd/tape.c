/* Gradient tapes: recording ops and running their backward rules in reverse. */
#include <stdlib.h>
#include <string.h>

#include "base/idmap.h"
#include "autograd/internal.h"
#include "base/error.h"
#include "exec/observer.h"
#include "api/internal.h"

typedef struct record {
    eg__op op;
    int n_inputs;
    const eg_tensor **inputs; /* retained; points at inline_inputs for small arity */
    const eg_tensor *inline_inputs[3];
    eg_tensor *output; /* retained */
    eg__attrs attrs;
    eg__custom_node *custom; /* retained; an eg_custom_gradient node's record, NULL for an op's */
} record;

struct eg_tape {
    bool persistent;
    bool recording;
    bool paused; /* while computing its own gradient */
    bool used;
    /* Tensors this thread makes while the tape exists have ids from here on: a target below it
     * was computed before the tape began. */
    uint64_t first_id;
    record *records;
    size_t n_records, capacity;
    eg__idmap tracked; /* ids of watched tensors and recorded outputs */
    eg_tensor **watched;
    size_t n_watched, watched_capacity;
    eg_tape *outer; /* next recording tape out */
};

_Thread_local eg_tape *eg__recording_tapes;
_Thread_local int eg__no_grad_depth;

/* The tape as an op observer: on for this thread while a tape records outside no-grad regions;
 * it records each op that succeeded, is differentiable and reads a tensor some tape tracks. */
static void op_end(eg__op op, int n_inputs, const eg_tensor *const *inputs, const eg__attrs *attrs,
                   eg_tensor *output, eg__op_span *span) {
    (void)span;
    if (output && !(eg__op_defs[op].flags & EG__OPF_NO_GRAD))
        eg__tape_record(op, n_inputs, inputs, attrs, output);
}

/* Inside the profiler: a recorded op's time includes its recording. */
static const eg__op_observer tape_observer = {"tape", 100, NULL, op_end};
static atomic_int observer_slot = -1;

/* After every change to this thread's tapes or no-grad depth. */
static void observe_if_active(void) {
    int slot = atomic_load_explicit(&observer_slot, memory_order_acquire);
    if (slot >= 0) eg__observe_here(slot, eg__tapes_active());
}

void eg_no_grad_begin(void) {
    eg__no_grad_depth++;
    observe_if_active();
}
void eg_no_grad_end(void) {
    if (eg__no_grad_depth > 0) eg__no_grad_depth--;
    observe_if_active();
}

eg_tape *eg_tape_begin(bool persistent) {
    if (atomic_load_explicit(&observer_slot, memory_order_acquire) < 0) {
        int slot = eg__observer_add(&tape_observer); /* the same slot for every thread */
        if (slot < 0) return NULL;
        atomic_store_explicit(&observer_slot, slot, memory_order_release);
    }
    eg_tape *tape = calloc(1, sizeof *tape);
    if (!tape) {
        eg__error(EG_ERR_OUT_OF_MEMORY, "tape_begin: out of host memory");
        return NULL;
    }
    tape->persistent = persistent;
    tape->recording = true;
    tape->first_id = eg__tensor_id_watermark();
    tape->outer = eg__recording_tapes;
    eg__recording_tapes = tape;
    observe_if_active();
    return tape;
}

eg_status eg_tape_end(eg_tape *tape) {
    if (!tape) return eg__error(EG_ERR_NULL_ARGUMENT, "tape_end: tape is NULL");
    if (!tape->recording) return EG_OK;
    /* Unlink wherever it sits: tapes may be ended out of order. */
    for (eg_tape **link = &eg__recording_tapes; *link; link = &(*link)->outer) {
        if (*link == tape) {
            *link = tape->outer;
            break;
        }
    }
    tape->recording = false;
    tape->outer = NULL;
    observe_if_active();
    return EG_OK;
}

size_t eg_tape_n_records(const eg_tape *tape) {
    return tape ? tape->n_records : 0;
}

static bool is_tracked(eg_tape *tape, const eg_tensor *t) {
    if (eg__idmap_contains(&tape->tracked, t->id)) return true;
    return eg_is_variable(t) && eg_variable_trainable(t);
}

eg_status eg_tape_watch(eg_tape *tape, const eg_tensor *t) {
    if (!tape) return eg__error(EG_ERR_NULL_ARGUMENT, "tape_watch: tape is NULL");
    if (!eg__check_arg(t, "tape_watch", 1)) return eg_last_status();
    if (!eg_dtype_is_float(t->dtype)) {
        char made_at[160];
        return eg__error(EG_ERR_DTYPE,
                         "tape_watch: a %s tensor (made at %s) has no gradient; watch float "
                         "tensors only",
                         eg_dtype_name(t->dtype), eg__tensor_made_at(t, made_at, sizeof made_at));
    }
    if (eg__idmap_contains(&tape->tracked, t->id)) return EG_OK;
    if (tape->n_watched == tape->watched_capacity) {
        size_t capacity = tape->watched_capacity ? tape->watched_capacity * 2 : 16;
        eg_tensor **watched = realloc(tape->watched, capacity * sizeof *watched);
        if (!watched) return eg__error(EG_ERR_OUT_OF_MEMORY, "tape_watch: out of host memory");
        tape->watched = watched;
        tape->watched_capacity = capacity;
    }
    if (!eg__idmap_put(&tape->tracked, t->id, (void *)t))
        return eg__error(EG_ERR_OUT_OF_MEMORY, "tape_watch: out of host memory");
    eg__ref(t);
    tape->watched[tape->n_watched++] = (eg_tensor *)t;
    return EG_OK;
}

static void record_one(eg_tape *tape, eg__op op, int n_inputs, const eg_tensor *const *inputs,
                       const eg__attrs *attrs, eg_tensor *output) {
    if (tape->n_records == tape->capacity) {
        size_t capacity = tape->capacity ? tape->capacity * 2 : 64;
        record *records = realloc(tape->records, capacity * sizeof *records);
        if (!records) {
            eg__error(EG_ERR_OUT_OF_MEMORY, "tape: out of host memory while recording");
            return;
        }
        /* records with few inputs point into themselves (inline_inputs): re-aim them */
        for (size_t i = 0; i < tape->n_records; i++)
            if (records[i].n_inputs <= 3) records[i].inputs = records[i].inline_inputs;
        tape->records = records;
        tape->capacity = capacity;
    }
    record *r = &tape->records[tape->n_records];
    r->inputs = r->inline_inputs;
    if (n_inputs > 3) {
        r->inputs = malloc((size_t)n_inputs * sizeof *r->inputs);
        if (!r->inputs) {
            eg__error(EG_ERR_OUT_OF_MEMORY, "tape: out of host memory while recording");
            return;
        }
    }
    if (!eg__idmap_put(&tape->tracked, output->id, output)) {
        if (n_inputs > 3) free(r->inputs);
        eg__error(EG_ERR_OUT_OF_MEMORY, "tape: out of host memory while recording");
        return;
    }
    r->op = op;
    r->n_inputs = n_inputs;
    for (int i = 0; i < n_inputs; i++) {
        r->inputs[i] = inputs[i];
        eg__ref(inputs[i]);
    }
    r->output = output;
    eg__ref(output);
    r->custom = NULL;
    if (attrs)
        r->attrs = *attrs;
    else
        memset(&r->attrs, 0, sizeof r->attrs);
    tape->n_records++;
}

void eg__tape_record(eg__op op, int n_inputs, const eg_tensor *const *inputs,
                     const eg__attrs *attrs, eg_tensor *output) {
    for (eg_tape *tape = eg__recording_tapes; tape; tape = tape->outer) {
        if (tape->paused) continue;
        for (int i = 0; i < n_inputs; i++) {
            if (is_tracked(tape, inputs[i])) {
                record_one(tape, op, n_inputs, inputs, attrs, output);
                break;
            }
        }
    }
}

void eg__tape_record_custom(eg__custom_node *node, int n_inputs, const eg_tensor *const *inputs,
                            int n_outputs, eg_tensor *const *outputs) {
    if (!eg__tapes_active()) return;
    for (eg_tape *tape = eg__recording_tapes; tape; tape = tape->outer) {
        bool tracks = false;
        for (int i = 0; i < n_inputs && !tape->paused && !tracks; i++)
            tracks = is_tracked(tape, inputs[i]);
        for (int k = 0; tracks && k < n_outputs; k++) {
            size_t before = tape->n_records;
            record_one(tape, EG__OP_COUNT, n_inputs, inputs, NULL, outputs[k]);
            if (tape->n_records == before) return; /* out of memory, raised */
            tape->records[before].custom = node;
            eg__custom_node_retain(node);
        }
    }
}

bool eg__tapes_would_record(int n_inputs, const eg_tensor *const *inputs) {
    if (!eg__tapes_active()) return false;
    for (eg_tape *tape = eg__recording_tapes; tape; tape = tape->outer) {
        if (tape->paused) continue;
        for (int i = 0; i < n_inputs; i++)
            if (inputs[i] && is_tracked(tape, inputs[i])) return true;
    }
    return false;
}

static void release_records(eg_tape *tape) {
    for (size_t i = 0; i < tape->n_records; i++) {
        record *r = &tape->records[i];
        for (int j = 0; j < r->n_inputs; j++) eg__unref(r->inputs[j]);
        if (r->inputs != r->inline_inputs) free(r->inputs);
        eg__unref(r->output);
        eg__custom_node_release(r->custom);
    }
    free(tape->records);
    tape->records = NULL;
    tape->n_records = tape->capacity = 0;
}

/* Adds g (a reference we own) to the gradient accumulated for id. */
static eg_status accumulate(eg__idmap *grads, uint64_t id, eg_tensor *g) {
    eg_tensor *existing = eg__idmap_get(grads, id);
    if (existing) {
        eg_tensor *sum = existing->row_values || g->row_values ? eg__row_sparse_sum(existing, g)
                                                               : eg_add(existing, g);
        eg__unref(existing);
        eg__unref(g);
        if (!sum) return eg_last_status();
        g = sum;
    }
    if (!eg__idmap_put(grads, id, g)) {
        eg__unref(g);
        return eg__error(EG_ERR_OUT_OF_MEMORY, "tape_gradient: out of host memory");
    }
    return EG_OK;
}

/* Who hears of each source's gradient as soon as it is final (eg_tape_gradient_notify). */
typedef struct ready_listener {
    eg_gradient_ready_fn fn;
    void *user;
    /* per source: the index of the earliest record reading it (its gradient is final once that
     * record's rule ran), or -1 when no record reads it (told at the end) */
    int64_t *last_contribution;
} ready_listener;

static eg_status call_listener(const ready_listener *listener, int source, eg_tensor *gradient) {
    eg__callback_frame frame;
    eg__callback_begin(&frame);
    eg_status status = listener->fn(source, gradient, listener->user);
    eg__callback_end(&frame);
    return status;
}

/* Tells the listener of every source whose last contribution is record `index`. */
static eg_status tell_ready(const ready_listener *listener, const eg__idmap *grads, size_t index,
                            int n_sources, eg_tensor *const *sources) {
    for (int s = 0; s < n_sources; s++) {
        if (listener->last_contribution[s] != (int64_t)index) continue;
        eg_tensor *g = eg__idmap_get(grads, sources[s]->id);
        eg_status status = call_listener(listener, s, g);
        if (status != EG_OK) return status;
    }
    return EG_OK;
}

static eg_status backpropagate(eg_tape *tape, const eg_tensor *target,
                               const eg_tensor *output_gradient, int n_sources,
                               eg_tensor *const *sources, eg_tensor **grads_out,
                               eg_unconnected unconnected, ready_listener *listener) {
    eg__idmap reachable = {0}, grads = {0};
    eg_status status = EG_OK;
    if (listener) {
        for (int s = 0; s < n_sources; s++) listener->last_contribution[s] = -1;
        for (size_t i = tape->n_records; i-- > 0;) {
            record *r = &tape->records[i];
            for (int j = 0; j < r->n_inputs; j++)
                for (int s = 0; s < n_sources; s++)
                    if (r->inputs[j]->id == sources[s]->id)
                        listener->last_contribution[s] = (int64_t)i;
        }
    }
    /* Forward sweep: which tensors depend on a source. Only their gradients are computed. */
    for (int i = 0; i < n_sources; i++)
        if (!eg__idmap_put(&reachable, sources[i]->id, (void *)sources[i])) goto out_of_memory;
    for (size_t i = 0; i < tape->n_records; i++) {
        record *r = &tape->records[i];
        for (int j = 0; j < r->n_inputs; j++) {
            if (eg__idmap_contains(&reachable, r->inputs[j]->id)) {
                if (!eg__idmap_put(&reachable, r->output->id, r->output)) goto out_of_memory;
                break;
            }
        }
    }
    if (eg__idmap_contains(&reachable, target->id)) {
        eg_tensor *seed;
        if (output_gradient) {
            seed = (eg_tensor *)output_gradient;
            eg__ref(seed);
        } else {
            seed = eg_full_like(target, 1.0);
            if (!seed) {
                status = eg_last_status();
                goto done;
            }
        }
        if ((status = accumulate(&grads, target->id, seed)) != EG_OK) goto done;
        for (size_t i = tape->n_records; i-- > 0;) {
            record *r = &tape->records[i];
            eg_tensor *g = eg__idmap_get(&grads, r->output->id);
            if (!g && !r->custom) continue; /* a node's last record runs for all its outputs */
            bool needs[EG_MAX_DIMS * 4] = {0};
            eg_tensor *inline_grads[8] = {0};
            eg_tensor **input_grads = inline_grads;
            bool *needs_grad = needs;
            bool any = false;
            if (r->n_inputs > 8) {
                input_grads = calloc((size_t)r->n_inputs, sizeof *input_grads);
                needs_grad = calloc((size_t)r->n_inputs, sizeof *needs_grad);
                if (!input_grads || !needs_grad) {
                    free(r->n_inputs > 8 ? input_grads : NULL);
                    free(r->n_inputs > 8 ? needs_grad : NULL);
                    goto out_of_memory;
                }
            }
            for (int j = 0; j < r->n_inputs; j++) {
                needs_grad[j] = eg_dtype_is_float(r->inputs[j]->dtype) &&
                                eg__idmap_contains(&reachable, r->inputs[j]->id);
                any |= needs_grad[j];
            }
            if (any) {
                eg__backward_call call = {r->op, r->n_inputs, r->inputs,  r->output,
                                          g,     &r->attrs,   needs_grad, input_grads};
                status = r->custom ? eg__custom_backward(r->custom, &call, &grads)
                                   : eg__backward_rules[r->op](&call);
                for (int j = 0; j < r->n_inputs; j++) {
                    if (!input_grads[j]) continue;
                    if (status == EG_OK)
                        status = accumulate(&grads, r->inputs[j]->id, input_grads[j]);
                    else
                        eg__unref(input_grads[j]);
                }
                if (status == EG_OK && eg__error_pending()) status = eg_last_status();
            }
            if (input_grads != inline_grads) {
                free(input_grads);
                free(needs_grad);
            }
            if (status == EG_OK && listener)
                status = tell_ready(listener, &grads, i, n_sources, sources);
            if (status != EG_OK) goto done;
            /* This output's gradient is complete and used; drop it unless a source wants it. */
            bool is_source = false;
            for (int s = 0; s < n_sources; s++) is_source |= sources[s]->id == r->output->id;
            if (!is_source && g) {
                void **slot = eg__idmap_find(&grads, r->output->id);
                eg__unref(*slot);
                *slot = NULL;
                /* keep the key: a NULL value reads as "no gradient" */
            }
        }
    }
    for (int i = 0; i < n_sources; i++) {
        eg_tensor *g = eg__idmap_get(&grads, sources[i]->id);
        if (g) {
            eg__ref(g);
        } else if (unconnected == EG_UNCONNECTED_ZERO) {
            g = eg_full_like(sources[i], 0.0);
            if (!g) {
                status = eg_last_status();
                goto done;
            }
        }
        grads_out[i] = g;
    }
    for (int s = 0; listener && s < n_sources && status == EG_OK; s++)
        if (listener->last_contribution[s] < 0) status = call_listener(listener, s, grads_out[s]);
    goto done;
out_of_memory:
    status = eg__error(EG_ERR_OUT_OF_MEMORY, "tape_gradient: out of host memory");
done:
    if (status != EG_OK)
        for (int i = 0; i < n_sources; i++) {
            eg__unref(grads_out[i]);
            grads_out[i] = NULL;
        }
    for (size_t i = 0; i < grads.capacity; i++)
        if (grads.keys[i] && grads.values[i]) eg__unref(grads.values[i]);
    eg__idmap_clear(&grads);
    eg__idmap_clear(&reachable);
    return status;
}

static eg_status tape_gradient(eg_tape *tape, const eg_tensor *target,
                               const eg_tensor *output_gradient, int n_sources,
                               eg_tensor *const *sources, eg_tensor **grads,
                               eg_unconnected unconnected, ready_listener *listener) {
    if (!tape) return eg__error(EG_ERR_NULL_ARGUMENT, "tape_gradient: tape is NULL");
    if (!grads || (n_sources > 0 && !sources) || n_sources < 0)
        return eg__error(EG_ERR_NULL_ARGUMENT, "tape_gradient: sources/grads arrays are NULL");
    for (int i = 0; i < n_sources; i++) grads[i] = NULL;
    if (!eg__check_arg(target, "tape_gradient", 1)) return eg_last_status();
    for (int i = 0; i < n_sources; i++)
        if (!eg__check_arg(sources[i], "tape_gradient (source)", i)) return eg_last_status();
    if (!eg_dtype_is_float(target->dtype))
        return eg__error(EG_ERR_DTYPE, "tape_gradient: target must be a float tensor, got %s",
                         eg_dtype_name(target->dtype));
    if (output_gradient &&
        (output_gradient->n_elems != target->n_elems || output_gradient->dtype != target->dtype))
        return eg__error(EG_ERR_SHAPE, "tape_gradient: output gradient does not match target");
    if (tape->used && !tape->persistent)
        return eg__error(EG_ERR_STATE, "tape_gradient: a non-persistent tape can compute one "
                                       "gradient only; use eg_tape_begin(true) for several");
    if (target->id < tape->first_id && !is_tracked(tape, target)) {
        char made_at[160];
        return eg__error(EG_ERR_INVALID_ARGUMENT,
                         "tape_gradient: the target (made at %s) was computed before the tape "
                         "began and is not watched by it; compute it while the tape records",
                         eg__tensor_made_at(target, made_at, sizeof made_at));
    }
    tape->used = true;
    tape->paused = true;
    eg__scope_suspend();
    /* Backward rules report failure through the error state: an error pending from earlier
     * (unrelated, not yet cleared) must not read as theirs. */
    eg__saved_error earlier;
    eg__error_set_aside(&earlier);
    eg_status status = backpropagate(tape, target, output_gradient, n_sources, sources, grads,
                                     unconnected, listener);
    /* A scope slot owns one reference of one tensor object, so every gradient handed out must be
     * an object of its own: backward rules pass gradients through unchanged (add, copy), which
     * can make two sources share one object, or hand back output_gradient (possibly owned by a
     * scope already). A shared one is replaced by an identity reshape: a new object on the same
     * storage that outer tapes still connect (higher-order gradients). */
    for (int i = 0; i < n_sources && status == EG_OK; i++) {
        eg_tensor *g = grads[i];
        if (!g || (atomic_load(&g->refcount) == 1 && !g->scope)) continue;
        grads[i] = eg_reshape(g, g->n_dims, g->shape);
        eg__unref(g);
        if (!grads[i]) {
            status = eg_last_status();
            for (int j = 0; j < n_sources; j++) {
                eg__unref(grads[j]);
                grads[j] = NULL;
            }
        }
    }
    eg__error_restore(&earlier);
    eg__scope_resume();
    tape->paused = false;
    for (int i = 0; i < n_sources; i++)
        if (grads[i]) eg__scope_register(grads[i]);
    /* A non-persistent tape is done with its one gradient: it stops recording, as TensorFlow's
     * does, instead of recording ops nothing can differentiate any more. */
    if (!tape->persistent) {
        release_records(tape);
        eg_tape_end(tape);
    }
    return status;
}

eg_status eg_tape_gradient_ex(eg_tape *tape, const eg_tensor *target,
                              const eg_tensor *output_gradient, int n_sources,
                              eg_tensor *const *sources, eg_tensor **grads,
                              eg_unconnected unconnected) {
    return tape_gradient(tape, target, output_gradient, n_sources, sources, grads, unconnected,
                         NULL);
}

eg_status eg_tape_gradient(eg_tape *tape, const eg_tensor *target, int n_sources,
                           eg_tensor *const *sources, eg_tensor **grads,
                           eg_unconnected unconnected) {
    return tape_gradient(tape, target, NULL, n_sources, sources, grads, unconnected, NULL);
}

eg_tensor **eg_tape_gradients(eg_tape *tape, const eg_tensor *target, int n_sources,
                              eg_tensor *const *sources, eg_unconnected unconnected) {
    if (n_sources < 0 || (n_sources > 0 && !sources)) {
        eg__error(EG_ERR_NULL_ARGUMENT, "tape_gradients: %d sources at %p", n_sources,
                  (const void *)sources);
        return NULL;
    }
    eg_tensor **grads = calloc((size_t)(n_sources ? n_sources : 1), sizeof *grads);
    if (!grads) {
        eg__error(EG_ERR_OUT_OF_MEMORY, "tape_gradients: out of host memory");
        return NULL;
    }
    if (tape_gradient(tape, target, NULL, n_sources, sources, grads, unconnected, NULL) != EG_OK) {
        eg_gradients_free(grads, n_sources);
        return NULL;
    }
    return grads;
}

void eg_gradients_free(eg_tensor **grads, int n) {
    if (!grads) return;
    for (int i = 0; i < n; i++) eg_release(grads[i]);
    free(grads);
}

eg_status eg_tape_gradient_notify(eg_tape *tape, const eg_tensor *target, int n_sources,
                                  eg_tensor *const *sources, eg_tensor **grads,
                                  eg_unconnected unconnected, eg_gradient_ready_fn ready,
                                  void *user) {
    if (!ready)
        return tape_gradient(tape, target, NULL, n_sources, sources, grads, unconnected, NULL);
    if (n_sources < 0 || (n_sources > 0 && (!sources || !grads)))
        return eg__error(EG_ERR_NULL_ARGUMENT, "tape_gradient: sources/grads arrays are NULL");
    ready_listener listener = {ready, user, calloc((size_t)n_sources + 1, sizeof(int64_t))};
    if (!listener.last_contribution)
        return eg__error(EG_ERR_OUT_OF_MEMORY, "tape_gradient: out of host memory");
    eg_status status =
        tape_gradient(tape, target, NULL, n_sources, sources, grads, unconnected, &listener);
    free(listener.last_contribution);
    return status;
}

void eg_tape_free(eg_tape *tape) {
    if (!tape) return;
    eg_tape_end(tape);
    release_records(tape);
    for (size_t i = 0; i < tape->n_watched; i++) eg__unref(tape->watched[i]);
    free(tape->watched);
    eg__idmap_clear(&tape->tracked);
    free(tape);
}
