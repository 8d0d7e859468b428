/* Internal: what the files of src/graph share — a trace (one input signature's graph and its
 * plan), built by function.c (tracing, replay), planned by plan.c, used by session.c. */
#ifndef EAGLE_SRC_GRAPH_INTERNAL_H
#define EAGLE_SRC_GRAPH_INTERNAL_H

#include "core/random.h"
#include "lazy/internal.h"
#include "exec/effect.h"

typedef enum {
    ROLE_VIEW,    /* bound to its base's memory, no kernel */
    ROLE_INLINED, /* computed inside its consumer's fused loop, no buffer */
    ROLE_BUFFER,  /* a kernel (or fused loop) writing an arena buffer */
    ROLE_ALIAS,   /* the same op on the same inputs as an earlier entry: shares its memory (CSE) */
} role;

typedef struct entry {
    eg_tensor *tensor; /* a graph tensor: its lazy node is the recipe, kept for every replay */
    role role;
    int alias_of;     /* ROLE_ALIAS: index of the entry holding the value */
    int recompute_of; /* >= 0: runs that entry's op again into a new buffer (memory budget) */
    int first_use, last_use;
    size_t offset, bytes; /* ROLE_BUFFER: place in the arena */
    int64_t view_delta;   /* ROLE_VIEW: offset - base offset, in elements */
    int n_members;        /* ROLE_BUFFER: fused group size (1: a plain kernel) */
    eg_tensor **members;
    int first_part, n_parts; /* update parts run right after this entry (trace->parts) */
    int fused_part;          /* >= 0: a matmul whose tiles go straight to this update part */
    size_t scratch_offset;   /* fused_part: n_scratch tiles there */
    int n_scratch;
    int in_place_of; /* >= 0: writes over that input's buffer, whose last reader it is */
} entry;

/* An optimizer step recorded while tracing (eg_optimizer_apply_gradients). */
typedef struct update_action {
    const eg__updater *updater;
    void *optimizer;
    int n;
    eg_tensor **grads, **variables;
    int64_t iteration; /* this replay's */
} update_action;

/* One variable's share of an update_action. */
typedef struct update_part {
    int action, index;
    int position; /* runs right after entry `position`; -1: before every entry */
    bool hoisted; /* else it runs after the graph, in traced order with the other actions */
    bool fused;   /* consumes its gradient tile by tile inside the gradient's matmul */
    eg__update_step step;
} update_part;

typedef struct deferred {
    eg_status (*run)(void *context);
    void (*free_context)(void *context);
    void *context;
    update_action *update; /* set for optimizer steps (run is NULL) */
} deferred;

typedef struct eg__parallel_plan eg__parallel_plan;

typedef struct trace {
    struct input_signature *signature;
    int n_inputs, n_outputs;
    eg_tensor **placeholders;
    eg_tensor **outputs;
    eg_tensor **targets; /* outputs to compute + tensors the deferred actions read */
    int n_targets;
    deferred *actions;
    int n_actions;
    entry *entries;
    int n_entries;
    update_part *parts;
    int n_parts;
    int *part_order; /* hoisted untiled parts by position; the first n_early_parts run first */
    int n_early_parts;
    size_t memory_budget;         /* 0: none */
    double live_area;             /* sum of bytes x positions alive, for comparing plans */
    eg_function_stats plan_stats; /* the plan's share of the stats */
    eg__storage *arena;
    const eg_device *device;
    bool borrowed_actions; /* a session's plan: the graph owns the actions */
    /* 1 or 0: traced inside a fast-math region or not (eagle/ops.h), part of the signature; -1:
     * either (a session's plan keeps what its graph recorded) */
    int fast_math;
    eg_tensor **notes;     /* a session graph: every op recorded while building it */
    int n_notes;
    bool keep_notes;
    /* what drew from a generator while tracing, in traced order: ops whose seed was drawn
     * (dropout layers; fill.distribution < 0) and tensors eg_random_uniform/normal filled
     * (constants of the graph). Every replay draws them again, in that order, as the eager calls
     * would. */
    eg_tensor **random_ops;
    eg_generator **random_generators;
    eg__random_fill *random_fills;
    int n_random;
    eg__parallel_plan *parallel; /* parallel replay's tasks (parallel.c), made at first use */
    /* A captured graph of the replay (capture.c; devices whose backend captures): what it was
     * recorded with (the arena and a buffer per input, which the graph reads), and why the
     * trace is not captured, if it is not. */
    void *captured;
    eg__storage *captured_arena;
    eg__storage **captured_inputs;
    bool capture_refused;
    bool redrawn; /* this call's random draws are made (by the capture path) */
} trace;

/* Plans a trace whose entries (topological order) and actions are set: common subexpressions,
 * fusion, order, update placement, in-place reuse, recomputation under the budget, the arena.
 * Fills t->plan_stats. */
eg_status eg__graph_plan(trace *t);

/* For a trace whose placeholders, outputs, targets and actions are set: its entries and plan. */
eg_status eg__graph_finish_trace(trace *t, const char *name);
void eg__graph_copy_plan_stats(eg_function_stats *stats, const eg_function_stats *plan);

/* Session support (session.c). A trace to record a graph into; recording on/off. */
trace *eg__graph_trace_new(void);
void eg__graph_trace_free(trace *t, int n_inputs, int n_outputs);
eg_status eg__graph_record_begin(trace *t, const char *name);
void eg__graph_record_end(void);
/* A function object that replays `t` (a finished trace for n_inputs placeholders and
 * n_outputs outputs; the function owns it). */
eg_function *eg__function_from_trace(const char *name, trace *t);
/* The input signature of t from its placeholders. */
eg_status eg__graph_sign(trace *t);

/* A call as one launch of a captured graph (capture.c), for a trace on a device whose backend
 * captures graphs. *handled false: the call is the caller's to run (the trace cannot be captured,
 * and f's stats say why), nothing was done. */
eg_status eg__graph_capture_call(eg_function *f, trace *t, const eg_tensor *const *inputs,
                                 eg_tensor **outputs, bool *handled);
void eg__graph_capture_free(trace *t);

/* Replay pieces capture.c uses (function.c): a new arena when none is free, one entry bound and
 * computed, and a caller-owned view of a graph output. */
eg_status eg__graph_ensure_arena(eg_function *f, trace *t);
eg_status eg__graph_run_steps(trace *t, int n_inputs, bool parallel_ok, bool run_entries);
/* Ends a call: every entry and placeholder lets go of the memory it was bound to. */
void eg__graph_unbind(trace *t);
/* Draws again what the trace drew (random constants refilled, dropout seeds), as each call does. */
void eg__graph_redraw_random(trace *t);
eg_status eg__graph_run_entry(trace *t, entry *e);
eg_tensor *eg__graph_output_for(const eg_tensor *graph_output);
eg_function_stats *eg__graph_stats(eg_function *f);
int eg__graph_n_inputs(const eg_function *f);
int eg__graph_n_outputs(const eg_function *f);

/* Replay pieces (function.c) that parallel.c runs as tasks. Binding sets an entry's storage (a
 * view's or alias's from its base, a buffer's in the arena); running computes a bound buffer
 * entry (prepared: its tiled update's part is prepared already). */
eg_status eg__graph_bind_entry(trace *t, entry *e);
eg_status eg__graph_run_kernel(trace *t, entry *e, bool prepared);
eg_status eg__graph_prepare_part(trace *t, update_part *part);
/* Whether a prepared part updates straight from its gradient's memory (else the optimizer's own
 * path runs it), and that update. */
bool eg__graph_part_is_direct(const trace *t, const update_part *part);
void eg__graph_run_direct_part(trace *t, const update_part *part);
/* The tile consumer of a weight gradient's matmul (context: the update_part). */
void eg__graph_tile_to_update(void *context, int64_t offset, int rows, int cols, int64_t row_length,
                              const void *tile);

/* Parallel replay (parallel.c): with two or more threads, binds every entry and runs the entries
 * and their hoisted updates as one pool job, setting *ran; leaves *ran false (the caller replays
 * sequentially) where the graph does not allow it. placeholders: the bound inputs. */
eg_status eg__graph_run_parallel(trace *t, const eg_tensor *const *placeholders, int n_inputs,
                                 bool *ran);
void eg__graph_parallel_free(eg__parallel_plan *plan);

/* Index of the first entry computing x, or -1. */
int eg__graph_position(const trace *t, const eg_tensor *x);

/* The buffer entry whose memory *x reads at position `at`, followed through views and aliases;
 * -1 for a leaf (input, variable, constant: *x is then that leaf), -2 for a value with no memory
 * (inlined into its reader's loop). */
int eg__graph_resolve(const trace *t, const eg_tensor **x, int at);

#endif
