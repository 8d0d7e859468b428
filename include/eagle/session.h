/* Eagle — TensorFlow 1 style graphs: placeholders, a graph built once, sessions that run it.
 *
 *   eg_graph *g = eg_graph_new();
 *   eg_graph_begin(g);                                   // ops now only record
 *   int64_t shape[2] = {32, 784};
 *   eg_tensor *x = eg_placeholder(g, EG_DTYPE_F32, 2, shape, "x");
 *   eg_tensor *y = eg_relu(eg_matmul(x, w));             // w: a variable
 *   eg_graph_end(g);
 *   eg_session *s = eg_session_new(g);
 *   eg_tensor *out;
 *   eg_session_run(s, 1, &x, &batch, 1, &y, &out);       // planned once, then replayed
 *
 * It is graph mode (eg_function) with the graph written out instead of traced from a function:
 * each set of fetches is planned once — common subexpressions, fusion, one arena, optimizer
 * updates consuming their gradients early — and every later run with those fetches replays the
 * plan with no allocator calls. Shape and dtype errors in the ops are raised when the op is
 * called while building, with the caller's file:line, as in eager mode. */
#ifndef EAGLE_SESSION_H
#define EAGLE_SESSION_H

#include "eagle/lazy.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct eg_graph eg_graph;
typedef struct eg_session eg_session;

/* An empty graph. Free it with eg_graph_free once its sessions are freed. */
eg_graph *eg_graph_new(void);
void eg_graph_free(eg_graph *graph);

/* Between eg_graph_begin and eg_graph_end (same thread) ops record into the graph instead of
 * running: they return storage-less tensors, new references as usual (released by the current
 * scope), and the graph keeps its own reference to each, so they stay valid as fetches while
 * the graph lives even after the scope that built them ends. Reading a value there is an
 * error. Optimizer
 * steps (eg_optimizer_apply_gradients) and assigns recorded there run at every eg_session_run
 * of the graph, whatever is fetched — build a second graph for inference. A graph can be
 * extended by another begin/end pair before its first run. EG_ERR_STATE when a graph is already
 * being built or a function traced on this thread (begin) or when not building (end). */
eg_status eg_graph_begin(eg_graph *graph);
eg_status eg_graph_end(eg_graph *graph);

/* A placeholder: a value fed at each run, of this dtype and shape. Call it between
 * eg_graph_begin and eg_graph_end. Every dimension must be known (>= 0): a graph is planned
 * for fixed shapes (-1 is refused with EG_ERR_INVALID_ARGUMENT; build one graph per batch size,
 * or use eg_function, which retraces when a shape changes). name (may be NULL) is copied and
 * used in messages. The tensor is owned by the graph: do not release it. NULL on error. */
eg_tensor *eg_placeholder(eg_graph *graph, eg_dtype dtype, int n_dims, const int64_t *shape,
                          const char *name);

/* A session runs a built graph. Free sessions before their graph. */
eg_session *eg_session_new(eg_graph *graph);
void eg_session_free(eg_session *session);

/* Runs the graph: feeds[i] gives the value of placeholders[i] (every placeholder of the graph
 * must be fed, each once; values must have the placeholder's dtype and shape exactly:
 * EG_ERR_DTYPE / EG_ERR_SHAPE name the placeholder and both shapes); results[i] receives a new
 * reference to the value of fetches[i] (tensors built in the graph, or placeholders). Results
 * live in the plan's arena until released: keep at most one run's results, or copy them (as
 * for eg_function_call). The first run with a set of fetches plans it; later runs with the same
 * fetches (same pointers, same order) replay with no allocator calls. */
eg_status eg_session_run(eg_session *session, int n_feeds, eg_tensor *const *placeholders,
                         eg_tensor *const *feeds, int n_fetches, eg_tensor *const *fetches,
                         eg_tensor **results);

/* The stats of the plan used by the last run (as eg_function_stats_get; n_traces counts the
 * session's plans). EG_ERR_STATE before the first run. */
eg_status eg_session_stats_get(const eg_session *session, eg_function_stats *out);

#if !defined(EG_NO_CALLSITE)
#define eg_graph_new(...)         EG_CALLSITE_(eg_graph_new(__VA_ARGS__))
#define eg_graph_begin(...)       EG_CALLSITE_(eg_graph_begin(__VA_ARGS__))
#define eg_graph_end(...)         EG_CALLSITE_(eg_graph_end(__VA_ARGS__))
#define eg_session_new(...)       EG_CALLSITE_(eg_session_new(__VA_ARGS__))
#define eg_session_stats_get(...) EG_CALLSITE_(eg_session_stats_get(__VA_ARGS__))

#define eg_placeholder(...) EG_CALLSITE_(eg_placeholder(__VA_ARGS__))
#define eg_session_run(...) EG_CALLSITE_(eg_session_run(__VA_ARGS__))
#endif

#ifdef __cplusplus
}
#endif
#endif
