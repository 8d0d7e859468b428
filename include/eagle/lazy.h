/* Eagle — lazy and graph execution of the same op calls.
 *
 * Lazy mode: between eg_lazy_begin() and eg_lazy_end() ops return tensors that have a shape, a
 * dtype and a device but no storage. Shape and dtype errors are still raised at the call, with
 * its file:line. A value is computed when it is read (eg_tensor_data, eg_item, copy to host,
 * printing, an eager op using it) or by eg_realize(). Realizing schedules the pending work:
 * what the requested tensors do not need is never computed, chains of elementwise ops run as one
 * fused loop, and intermediates nobody else holds get memory only while they are needed.
 * A tensor whose value was fused away or freed is recomputed if it is read later.
 * Values are eager's even when inputs change after an op was recorded: an assign, an optimizer
 * update or a write through eg_tensor_data's pointer (fetched after the op was recorded) gives
 * the pending ops that read the tensor a snapshot of its old value first.
 *
 * Graph mode (eg_function): a C function traced once per input signature into a graph whose
 * inputs are placeholders; planned once and replayed on later calls without per-op allocation.
 * The plan merges common subexpressions, fuses elementwise chains, orders the ops to keep little
 * memory live, runs each optimizer update as soon as its gradient is ready (a weight gradient
 * made by a matmul is consumed tile by tile and never exists whole), writes fused results over
 * inputs they last read, and gives every intermediate an offset in one arena from its lifetime.
 * eagle/session.h offers the same machinery TF1-style (placeholders, graph, session). */
#ifndef EAGLE_LAZY_H
#define EAGLE_LAZY_H

#include "eagle/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- lazy mode (per thread; nests) ---- */
void eg_lazy_begin(void);
/* Leaves lazy mode; tensors made inside stay lazy until read. EG_ERR_STATE when not in it. */
eg_status eg_lazy_end(void);
bool eg_lazy_active(void);
/* Computes the n tensors together, sharing their common work (realizing them one by one would
 * recompute what they share). Realized tensors are skipped. */
eg_status eg_realize(int n, eg_tensor *const *tensors);
/* True when t has storage (always in eager mode). */
bool eg_tensor_is_realized(const eg_tensor *t);

typedef struct eg_lazy_stats {
    uint64_t n_realizations;  /* eg_realize calls and implicit reads that computed something */
    uint64_t n_schedule_hits; /* realizations that reused a cached schedule */
    uint64_t n_nodes;         /* lazy ops computed */
    uint64_t n_fused_nodes;   /* of which ran inside a fused loop, without a buffer */
    uint64_t n_kernels;       /* kernel launches (a fused loop counts once) */
    uint64_t n_temporaries;   /* intermediates given memory only while needed */
} eg_lazy_stats;
/* This thread's counters since start. */
void eg_lazy_stats_get(eg_lazy_stats *out);

/* ---- graph mode ---- */
typedef struct eg_function eg_function;

/* The traced function: reads n_inputs tensors, writes n_outputs new tensors into outputs.
 * Random draws (eg_random_uniform/normal, dropout) are made again at every call, from the same
 * generators in the same order as the eager calls would make them.
 * It may use every op, tapes, variables and optimizers: their updates run at each call, each
 * variable's as soon as its gradient is computed and no op of the graph still reads the
 * variable (or after the graph, in traced order, when an assign or another step on the same
 * variable was traced before it). Ops of the graph therefore read variables as they were when
 * the call began, even if traced after the update. It must not read values (eg_item,
 * eg_tensor_data ...) while traced: return them as outputs instead. */
typedef eg_status (*eg_traced_fn)(eg_tensor *const *inputs, eg_tensor **outputs, void *user_data);

/* A function object; nothing is traced until the first call. name is copied (for messages).
 * Free with eg_function_free. */
eg_function *eg_function_new(const char *name, eg_traced_fn fn, int n_inputs, int n_outputs,
                             void *user_data);
void eg_function_free(eg_function *function);
/* Runs the function: traces it when the inputs' signature (dtypes, shapes, devices) is new, else
 * replays the graph traced for it. outputs receive new references (scope rules as for ops);
 * their memory belongs to the function's arena until they are released: keep at most one call's
 * outputs alive, or copy them (holding them while calling again makes that call allocate a new
 * arena). */
eg_status eg_function_call(eg_function *function, eg_tensor *const *inputs, eg_tensor **outputs);
/* More traces than this (default 5) set a retracing warning in the stats. */
void eg_function_set_retrace_limit(eg_function *function, int limit);
/* A budget in bytes for the arena of traces made from now on (0: none, the default). When the
 * plan exceeds it, the planner recomputes cheap intermediates — elementwise results kept from
 * the forward pass for the backward pass — right before their late readers instead of keeping
 * them, as long as that shrinks the arena; results are bitwise the same. The stats say what it
 * chose and whether the budget was met (a plan that cannot fit still runs). EG_ERR_NULL_ARGUMENT
 * for a NULL function. */
eg_status eg_function_set_memory_budget(eg_function *function, size_t bytes);

typedef struct eg_function_stats {
    int n_traces;
    /* Why the last trace happened: "first call", or what differs input by input from the traced
     * signature nearest to the call (fewest differing dtypes, shapes and devices), e.g.
     * "input 0: shape (32, 784) -> (16, 784)" or "input 1: dtype i32 -> i64 (nearest of 2
     * traced signatures)". */
    char last_trace_reason[160];
    /* Non-empty once n_traces passes the limit, like TensorFlow's retracing warning. */
    char retrace_warning[256];
    int64_t n_nodes;       /* ops in the traced graph */
    int64_t n_kernels;     /* launches per replay after fusion */
    int64_t n_fused_nodes; /* ops run inside fused loops, without a buffer */
    /* The arena is all the memory a call uses beyond its inputs, variables and optimizer slots:
     * the activations kept for the backward pass, temporaries, gradients until their update
     * has consumed them, and the outputs. It is the graph's activation memory. */
    size_t arena_bytes;     /* the planned arena: every intermediate and output */
    size_t unplanned_bytes; /* the same buffers without sharing: their plain sum */
    size_t eager_bytes;     /* every op result, as eager mode in one scope would hold them */
    uint64_t n_replays;
    uint64_t n_arena_allocations; /* arenas allocated (1 in a steady state) */
    /* What the optimizations did. */
    int64_t n_cse_merged;    /* ops merged into an identical earlier op (same op, attrs, inputs) */
    int64_t n_in_place;      /* elementwise results written over an input they last read */
    int64_t n_early_updates; /* optimizer updates run as soon as their gradient is ready and no
                                later op reads the variable, so the gradient's memory is reused */
    int64_t n_tiled_updates; /* of which consume the gradient tile by tile as its matmul makes
                                it: the whole gradient never exists */
    size_t scratch_bytes;    /* of arena_bytes: the tiles of those matmuls */
    /* The memory budget (eg_function_set_memory_budget) and what the planner chose for it. */
    size_t memory_budget;          /* 0: none */
    bool budget_met;               /* arena_bytes <= memory_budget (true without a budget) */
    int64_t n_recomputed;          /* intermediates computed again instead of kept */
    size_t recompute_saved_bytes;  /* arena bytes saved by recomputing them */
    int64_t recompute_extra_flops; /* elementwise operations added per call */
    char recomputed[256];          /* which: "relu (128, 512) for matmul, ..." */
    /* CUDA graphs (a function on a GPU): from its second call on, a call is one launch of the
     * replay captured once. The graph reads its own buffer per input: an input that is not
     * already that buffer is copied into it (one device copy). A capture again (like a retrace)
     * happens when the graph's memory moved; capture_note says why, or why the function is not
     * captured at all (it draws random numbers, updates variables, ...); "" when all is well. */
    uint64_t n_captures;
    uint64_t n_graph_launches;
    uint64_t n_input_copies;
    char capture_note[192];
} eg_function_stats;
eg_status eg_function_stats_get(const eg_function *function, eg_function_stats *out);

#if !defined(EG_NO_CALLSITE)
#define eg_lazy_end(...)                   EG_CALLSITE_(eg_lazy_end(__VA_ARGS__))
#define eg_function_new(...)               EG_CALLSITE_(eg_function_new(__VA_ARGS__))
#define eg_function_set_memory_budget(...) EG_CALLSITE_(eg_function_set_memory_budget(__VA_ARGS__))
#define eg_function_stats_get(...)         EG_CALLSITE_(eg_function_stats_get(__VA_ARGS__))

#define eg_realize(...)       EG_CALLSITE_(eg_realize(__VA_ARGS__))
#define eg_function_call(...) EG_CALLSITE_(eg_function_call(__VA_ARGS__))
#endif

#ifdef __cplusplus
}
#endif
#endif
