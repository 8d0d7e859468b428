/* Internal: lazy nodes and realization, shared by lazy mode and graph mode. */
#ifndef EAGLE_SRC_LAZY_INTERNAL_H
#define EAGLE_SRC_LAZY_INTERNAL_H

#include "eagle/lazy.h"
#include "ops/internal.h"

/* How to compute a storage-less tensor. Inputs are references; each is counted in the input's
 * lazy_consumers while the node exists. */
typedef struct eg__lazy_node {
    const eg__attachment_ops *ops; /* first: how core frees and realizes the node's tensor */
    eg__op op;
    int n_inputs;
    eg_tensor **inputs;
    eg__attrs attrs;
    bool is_view;    /* realized as a view of input 0 (geometry already in the tensor) */
    int placeholder; /* >= 0: the graph input of that index (no op); -1 otherwise */
    struct eg__lazy_node *prev, *next; /* every pending node, for write barriers */
    bool pending;                      /* in that list */
} eg__lazy_node;

extern _Thread_local int eg__lazy_depth;
static inline bool eg__lazy_recording(void) {
    return eg__lazy_depth > 0;
}

/* Records an op whose result is computed later. meta comes from the op's inference. */
eg_tensor *eg__lazy_record(eg__op op, int n_inputs, const eg_tensor *const *inputs,
                           const eg__attrs *attrs, const eg__meta *meta, const eg_device *device);
/* A storage-less tensor standing for graph input `index`, shaped like `like`. */
eg_tensor *eg__lazy_placeholder(const eg_tensor *like, int index);
void eg__lazy_node_free(eg__lazy_node *node);

/* Call before writing into t's memory in place (optimizer updates, assign): pending lazy ops
 * that read t are redirected to a snapshot of its current value, so a lazy value read later is
 * the one its op saw when it was called (as in eager mode). */
eg_status eg__lazy_before_write(eg_tensor *t);
/* Takes a node out of the pending list: a traced graph's recipe must keep reading the live
 * variables at every replay. */
void eg__lazy_unpend(eg__lazy_node *node);

/* Whether a realization may give t memory only while it is needed: nothing but pending lazy
 * nodes, t's own scope and the caller's own_references hold it. */
bool eg__lazy_is_internal(const eg_tensor *t, int own_references);

/* Runs a fused elementwise group: root's storage is attached; members (root last) are the
 * storage-less elementwise nodes computed per block without buffers. */
eg_status eg__lazy_run_fused(eg_tensor *root, int n_members, eg_tensor *const *members);

/* The storage-less tensors the targets depend on, inputs first; placeholders and realized
 * tensors are leaves (not listed). *order is malloc'd and holds one reference per tensor. */
eg_status eg__lazy_topo_order(int n_targets, const eg_tensor *const *targets, eg_tensor ***order,
                              int *n);
/* Whether t's op can run inside a fused elementwise loop. */
bool eg__lazy_fusable(const eg_tensor *t);

/* Computes the storage-less tensors among tensors[0..n) together (shared work once). */
eg_status eg__lazy_realize(int n, const eg_tensor *const *tensors);

/* ---- graph tracing (src/graph) ---- */
bool eg__graph_tracing(void);
/* Called for every op recorded while tracing (a session's graph keeps them all). */
void eg__graph_note(eg_tensor *t);
/* While tracing: t's op took its seed attribute from generator (NULL: the default one), so each
 * replay draws a fresh seed from it (in the order of these calls) instead of reusing the traced
 * one. Without memory it only loses that (the traced seed stays). */
void eg__graph_note_random(eg_tensor *t, eg_generator *generator);
/* Defers run(context) to every replay of the function being traced, after its graph has
 * computed `tensors` (which become outputs of the graph). free_context(context) runs when the
 * trace is freed. */
eg_status eg__graph_defer(eg_status (*run)(void *context), void (*free_context)(void *context),
                          void *context, int n_tensors, const eg_tensor *const *tensors);

#endif
