/* TF1-style graphs and sessions (eagle/session.h) on top of graph mode: a graph records ops on
 * placeholders exactly as a traced function does (lazy recording, deferred side effects); a
 * session plans each set of fetches once into a trace and replays it through an eg_function. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device/device.h"
#include "base/error.h"
#include "eagle/session.h"
#include "graph/internal.h"

struct eg_graph {
    trace *recorded; /* placeholders, deferred actions and every recorded op */
    char **names;    /* per placeholder */
    bool building, ran;
    int references; /* the user's (until eg_graph_free) + one per session */
};

typedef struct plan {
    eg_tensor **fetches;
    int n_fetches;
    eg_function *function;
} plan;

struct eg_session {
    eg_graph *graph;
    plan *plans;
    int n_plans;
    int last; /* the plan of the last run, -1 before */
};

eg_graph *eg_graph_new(void) {
    eg_graph *g = calloc(1, sizeof *g);
    if (!g) {
        eg__error(EG_ERR_OUT_OF_MEMORY, "graph_new: out of host memory");
        return NULL;
    }
    g->recorded = eg__graph_trace_new();
    if (!g->recorded) {
        free(g);
        return NULL;
    }
    g->recorded->keep_notes = true;
    g->references = 1;
    return g;
}

static void graph_unref(eg_graph *g) {
    if (--g->references > 0) return;
    for (int i = 0; i < g->recorded->n_inputs; i++) free(g->names[i]);
    free(g->names);
    eg__graph_trace_free(g->recorded, g->recorded->n_inputs, 0);
    free(g);
}

void eg_graph_free(eg_graph *g) {
    if (!g) return;
    if (g->building) eg_graph_end(g);
    graph_unref(g);
}

eg_status eg_graph_begin(eg_graph *g) {
    if (!g) return eg__error(EG_ERR_NULL_ARGUMENT, "graph_begin: NULL graph");
    if (g->ran)
        return eg__error(EG_ERR_STATE, "graph_begin: the graph has already been run; build a new "
                                       "graph to add ops");
    if (g->building) return eg__error(EG_ERR_STATE, "graph_begin: the graph is already open");
    eg_status status = eg__graph_record_begin(g->recorded, "graph_begin");
    if (status == EG_OK) g->building = true;
    return status;
}

eg_status eg_graph_end(eg_graph *g) {
    if (!g) return eg__error(EG_ERR_NULL_ARGUMENT, "graph_end: NULL graph");
    if (!g->building) return eg__error(EG_ERR_STATE, "graph_end: the graph is not being built");
    eg__graph_record_end();
    g->building = false;
    return EG_OK;
}

eg_tensor *eg_placeholder(eg_graph *g, eg_dtype dtype, int n_dims, const int64_t *shape,
                          const char *name) {
    const char *label = name ? name : "placeholder";
    if (!g || (n_dims > 0 && !shape)) {
        eg__error(EG_ERR_NULL_ARGUMENT, "placeholder: NULL %s", g ? "shape" : "graph");
        return NULL;
    }
    if (!g->building) {
        eg__error(EG_ERR_STATE,
                  "placeholder '%s': call it between eg_graph_begin and "
                  "eg_graph_end",
                  label);
        return NULL;
    }
    if (n_dims < 0 || n_dims > EG_MAX_DIMS || dtype < 0 || dtype >= EG_DTYPE_COUNT) {
        eg__error(EG_ERR_INVALID_ARGUMENT, "placeholder '%s': bad dtype or number of dims (%d)",
                  label, n_dims);
        return NULL;
    }
    for (int d = 0; d < n_dims; d++)
        if (shape[d] < 0) {
            eg__error(EG_ERR_INVALID_ARGUMENT,
                      "placeholder '%s': dimension %d is %lld; every dimension must be known "
                      "(graphs are planned for fixed shapes: build one per batch size, or use "
                      "eg_function, which retraces when a shape changes)",
                      label, d, (long long)shape[d]);
            return NULL;
        }
    trace *t = g->recorded;
    eg_tensor **placeholders =
        realloc(t->placeholders, sizeof *placeholders * (size_t)(t->n_inputs + 1));
    if (placeholders) t->placeholders = placeholders;
    char **names = realloc(g->names, sizeof *names * (size_t)(t->n_inputs + 1));
    if (names) g->names = names;
    char *copy = strdup(label);
    if (!placeholders || !names || !copy) {
        free(copy);
        eg__error(EG_ERR_OUT_OF_MEMORY, "placeholder: out of host memory");
        return NULL;
    }
    eg_tensor like = {0}; /* only its dtype, shape and device are read */
    like.dtype = dtype;
    like.n_dims = n_dims;
    for (int d = 0; d < n_dims; d++) like.shape[d] = shape[d];
    like.device = eg__device_current();
    eg__scope_suspend(); /* the graph owns it */
    eg_tensor *x = eg__lazy_placeholder(&like, t->n_inputs);
    eg__scope_resume();
    if (!x) {
        free(copy);
        return NULL;
    }
    g->names[t->n_inputs] = copy;
    t->placeholders[t->n_inputs++] = x;
    return x;
}

eg_session *eg_session_new(eg_graph *g) {
    if (!g) {
        eg__error(EG_ERR_NULL_ARGUMENT, "session_new: NULL graph");
        return NULL;
    }
    eg_session *s = calloc(1, sizeof *s);
    if (!s) {
        eg__error(EG_ERR_OUT_OF_MEMORY, "session_new: out of host memory");
        return NULL;
    }
    s->graph = g;
    s->last = -1;
    g->references++;
    return s;
}

void eg_session_free(eg_session *s) {
    if (!s) return;
    for (int i = 0; i < s->n_plans; i++) {
        eg_function_free(s->plans[i].function);
        free(s->plans[i].fetches);
    }
    free(s->plans);
    graph_unref(s->graph);
    free(s);
}

/* A plan for these fetches: a trace of the graph with them as outputs. */
static eg_status plan_fetches(eg_session *s, int n_fetches, eg_tensor *const *fetches, plan *out) {
    const trace *g = s->graph->recorded;
    trace *t = eg__graph_trace_new();
    if (!t) return eg_last_status();
    t->n_inputs = g->n_inputs;
    t->n_outputs = n_fetches;
    t->placeholders = calloc((size_t)g->n_inputs + 1, sizeof *t->placeholders);
    t->outputs = calloc((size_t)n_fetches, sizeof *t->outputs);
    t->targets = calloc((size_t)g->n_targets + 1, sizeof *t->targets);
    out->fetches = malloc(sizeof *out->fetches * (size_t)n_fetches);
    if (!t->placeholders || !t->outputs || !t->targets || !out->fetches) {
        free(out->fetches);
        eg__graph_trace_free(t, 0, 0);
        return eg__error(EG_ERR_OUT_OF_MEMORY, "session_run: out of host memory");
    }
    for (int i = 0; i < g->n_inputs; i++) {
        eg__ref(g->placeholders[i]);
        t->placeholders[i] = g->placeholders[i];
    }
    for (int i = 0; i < n_fetches; i++) {
        eg__ref(fetches[i]);
        t->outputs[i] = fetches[i];
        out->fetches[i] = fetches[i];
    }
    for (int i = 0; i < g->n_targets; i++) {
        eg__ref(g->targets[i]);
        t->targets[t->n_targets++] = g->targets[i];
    }
    t->actions = g->actions;
    t->n_actions = g->n_actions;
    t->borrowed_actions = true;
    if (g->n_random > 0) { /* every run draws new seeds for the graph's random ops */
        t->random_ops = malloc(sizeof *t->random_ops * (size_t)g->n_random);
        t->random_generators = malloc(sizeof *t->random_generators * (size_t)g->n_random);
        if (!t->random_ops || !t->random_generators) {
            free(out->fetches);
            eg__graph_trace_free(t, t->n_inputs, t->n_outputs);
            return eg__error(EG_ERR_OUT_OF_MEMORY, "session_run: out of host memory");
        }
        for (int i = 0; i < g->n_random; i++) {
            eg__ref(g->random_ops[i]);
            t->random_ops[i] = g->random_ops[i];
            t->random_generators[i] = g->random_generators[i];
        }
        t->n_random = g->n_random;
    }
    eg_status status = eg__graph_sign(t);
    if (status == EG_OK) status = eg__graph_finish_trace(t, "session_run");
    if (status != EG_OK) {
        free(out->fetches);
        eg__graph_trace_free(t, t->n_inputs, t->n_outputs);
        return status;
    }
    out->n_fetches = n_fetches;
    out->function = eg__function_from_trace("session_run", t);
    if (!out->function) {
        free(out->fetches);
        eg__graph_trace_free(t, t->n_inputs, t->n_outputs);
        return eg_last_status();
    }
    return EG_OK;
}

eg_status eg_session_run(eg_session *s, int n_feeds, eg_tensor *const *placeholders,
                         eg_tensor *const *feeds_in, int n_fetches, eg_tensor *const *fetches,
                         eg_tensor **results) {
    const eg_tensor *const *feeds = eg__const_tensors(feeds_in);
    if (!s || (n_feeds > 0 && (!placeholders || !feeds)) || !fetches || !results)
        return eg__error(EG_ERR_NULL_ARGUMENT, "session_run: NULL argument");
    eg_graph *g = s->graph;
    const trace *r = g->recorded;
    if (g->building)
        return eg__error(EG_ERR_STATE, "session_run: call eg_graph_end before running the graph");
    if (n_fetches < 1) return eg__error(EG_ERR_INVALID_ARGUMENT, "session_run: nothing to fetch");
    for (int i = 0; i < n_fetches; i++)
        if (!fetches[i])
            return eg__error(EG_ERR_NULL_ARGUMENT,
                             "session_run: fetches[%d] is NULL (did building "
                             "the graph fail?)",
                             i);
    /* feeds in placeholder order, checked */
    const eg_tensor *inputs[64] = {0};
    if (r->n_inputs > 64) return eg__error(EG_ERR_UNSUPPORTED, "session_run: at most 64 inputs");
    for (int i = 0; i < n_feeds; i++) {
        int k = 0;
        while (k < r->n_inputs && r->placeholders[k] != placeholders[i]) k++;
        if (k == r->n_inputs)
            return eg__error(EG_ERR_INVALID_ARGUMENT,
                             "session_run: feed %d is not a placeholder of this graph", i);
        if (inputs[k])
            return eg__error(EG_ERR_INVALID_ARGUMENT, "session_run: placeholder '%s' is fed twice",
                             g->names[k]);
        const eg_tensor *x = feeds[i], *p = r->placeholders[k];
        if (!eg__check_arg(x, "session_run", i)) return eg_last_status();
        char a[160], b[160];
        if (x->dtype != p->dtype)
            return eg__error(
                EG_ERR_DTYPE, "session_run: placeholder '%s' is %s %s, fed %s %s", g->names[k],
                eg_dtype_name(p->dtype), eg__shape_format(p->n_dims, p->shape, a, sizeof a),
                eg_dtype_name(x->dtype), eg__shape_format(x->n_dims, x->shape, b, sizeof b));
        if (x->n_dims != p->n_dims ||
            memcmp(x->shape, p->shape, sizeof(int64_t) * (size_t)x->n_dims) != 0)
            return eg__error(EG_ERR_SHAPE, "session_run: placeholder '%s' is %s, fed %s",
                             g->names[k], eg__shape_format(p->n_dims, p->shape, a, sizeof a),
                             eg__shape_format(x->n_dims, x->shape, b, sizeof b));
        if (x->device != p->device)
            return eg__error(EG_ERR_DEVICE, "session_run: placeholder '%s' is on %s, fed on %s",
                             g->names[k], p->device->name, x->device->name);
        inputs[k] = x;
    }
    for (int k = 0; k < r->n_inputs; k++)
        if (!inputs[k])
            return eg__error(EG_ERR_INVALID_ARGUMENT, "session_run: placeholder '%s' was not fed",
                             g->names[k]);
    int at = -1;
    for (int i = 0; i < s->n_plans && at < 0; i++)
        if (s->plans[i].n_fetches == n_fetches &&
            memcmp(s->plans[i].fetches, fetches, sizeof *fetches * (size_t)n_fetches) == 0)
            at = i;
    if (at < 0) {
        plan *plans = realloc(s->plans, sizeof *plans * (size_t)(s->n_plans + 1));
        if (!plans) return eg__error(EG_ERR_OUT_OF_MEMORY, "session_run: out of host memory");
        s->plans = plans;
        eg_status status = plan_fetches(s, n_fetches, fetches, &s->plans[s->n_plans]);
        if (status != EG_OK) return status;
        at = s->n_plans++;
    }
    g->ran = true;
    s->last = at;
    return eg_function_call(s->plans[at].function, eg__tensor_handles(inputs), results);
}

eg_status eg_session_stats_get(const eg_session *s, eg_function_stats *out) {
    if (!s || !out) return eg__error(EG_ERR_NULL_ARGUMENT, "session_stats_get: NULL argument");
    if (s->last < 0) return eg__error(EG_ERR_STATE, "session_stats_get: the session has not run");
    eg_status status = eg_function_stats_get(s->plans[s->last].function, out);
    out->n_traces = s->n_plans;
    return status;
}
