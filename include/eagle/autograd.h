/* Eagle — gradient tapes and variables (TensorFlow's GradientTape, in C).
 *
 * While a tape is recording, every op whose inputs include a watched tensor (or the output of an
 * op already recorded) is recorded with what its backward rule needs. Variables are watched
 * automatically. Several tapes may record at once (nested tapes give higher-order gradients:
 * the gradient computation of the inner tape is itself recorded by the outer one). Tapes are
 * per thread. */
#ifndef EAGLE_AUTOGRAD_H
#define EAGLE_AUTOGRAD_H

#include "eagle/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct eg_tape eg_tape;

/* What eg_tape_gradient returns for a source the target does not depend on. */
typedef enum eg_unconnected {
    EG_UNCONNECTED_NULL = 0, /* NULL, like TF's UnconnectedGradients.NONE (the default) */
    EG_UNCONNECTED_ZERO = 1  /* zeros shaped like the source */
} eg_unconnected;

/* Starts a tape recording on this thread. A persistent tape allows several eg_tape_gradient
 * calls; a non-persistent one allows one, and stops recording when it has computed it (as
 * TensorFlow's does: its records are gone, nothing later could use what it recorded). Free with
 * eg_tape_free. NULL only on out of memory. */
eg_tape *eg_tape_begin(bool persistent);
/* Stops recording (recorded ops are kept for eg_tape_gradient). Idempotent. */
eg_status eg_tape_end(eg_tape *tape);
/* Makes the tape track t (ops on t get recorded). t is retained until the tape is freed. t must
 * be a float tensor: watching an integer or bool one is EG_ERR_DTYPE (it has no gradient). */
eg_status eg_tape_watch(eg_tape *tape, const eg_tensor *t);
/* d(sum of target)/d(source_i) for n_sources sources, written as new references into grads.
 * target must be a float tensor (EG_ERR_DTYPE otherwise) recorded by (or watched on) this tape:
 * a target this thread computed before the tape began, and that the tape does not watch, is
 * EG_ERR_INVALID_ARGUMENT naming where it was made (one computed while the tape recorded, from
 * tensors the tape does not track, just has no gradient: see eg_unconnected). May be called
 * while the tape still records (the backward ops are then not recorded on this tape, but are on
 * any outer tape, which is how higher-order gradients are taken). EG_ERR_STATE for a second call
 * on a non-persistent tape. A refused call does not use a non-persistent tape up. */
eg_status eg_tape_gradient(eg_tape *tape, const eg_tensor *target, int n_sources,
                           eg_tensor *const *sources, eg_tensor **grads,
                           eg_unconnected unconnected);
/* eg_tape_gradient into an array the library sizes, for sources that are a model's variables
 * (eg_model_trainable_variables' eg_tensor *const *, no cast needed): n_sources new references
 * (NULL entries for unconnected sources with EG_UNCONNECTED_NULL), owned by the current scope
 * like eg_tape_gradient's; free the array, and release the gradients, with eg_gradients_free.
 * NULL with eg_tape_gradient's error. */
eg_tensor **eg_tape_gradients(eg_tape *tape, const eg_tensor *target, int n_sources,
                              eg_tensor *const *sources, eg_unconnected unconnected);
/* Releases n gradients and frees their array (from eg_tape_gradients). NULL is ignored. */
void eg_gradients_free(eg_tensor **grads, int n);
/* Like eg_tape_gradient with an explicit upstream gradient for target (same shape as target);
 * output_gradient == NULL means ones. */
eg_status eg_tape_gradient_ex(eg_tape *tape, const eg_tensor *target,
                              const eg_tensor *output_gradient, int n_sources,
                              eg_tensor *const *sources, eg_tensor **grads,
                              eg_unconnected unconnected);
/* Told of one source's gradient as soon as no op left in the backward pass can add to it (index
 * into the sources; gradient borrowed, NULL for a source the target does not depend on when
 * unconnected is EG_UNCONNECTED_NULL). A failure stops the gradient with that status. Called on
 * the thread computing the gradient, while tapes are paused: tensors it makes are its own to
 * release (no scope holds them). */
typedef eg_status (*eg_gradient_ready_fn)(int source, const eg_tensor *gradient, void *user);
/* eg_tape_gradient that calls ready(i, gradient, user) once for each source, in the order their
 * gradients become final during the backward pass (sources no recorded op reads come last):
 * what lets a data-parallel step start summing a bucket of gradients while the rest are still
 * being computed. ready NULL is eg_tape_gradient. */
eg_status eg_tape_gradient_notify(eg_tape *tape, const eg_tensor *target, int n_sources,
                                  eg_tensor *const *sources, eg_tensor **grads,
                                  eg_unconnected unconnected, eg_gradient_ready_fn ready,
                                  void *user);
/* Number of ops recorded so far. */
size_t eg_tape_n_records(const eg_tape *tape);
/* Stops recording if needed and releases everything the tape holds. NULL is ignored. */
void eg_tape_free(eg_tape *tape);

/* No-grad regions: while the depth is > 0 no tape on this thread records. They nest. */
void eg_no_grad_begin(void);
void eg_no_grad_end(void);

/* ---- custom gradients: a function with its own backward rule (tf.custom_gradient) ----
 * eg_custom_gradient runs `forward` with no tape recording its ops, then records one node for the
 * whole function on every recording tape that tracks one of its inputs. A gradient reaching the
 * node's outputs calls `backward` with those outputs' gradients instead of differentiating the
 * forward's ops: what gives a numerically stable gradient (log(1 + exp(x)) through sigmoid), a
 * clipped one, or a cheaper one. backward builds its result from ordinary ops, which the tapes
 * outside the one computing the gradient record as they record any op: gradients of gradients
 * (nested tapes) differentiate backward's ops, and a backward whose ops read the outputs meets
 * the node again there. The callbacks work alike in the three modes: eager ops run at once; in
 * lazy mode (eg_lazy_begin) their ops stay pending like any others; in a traced function
 * (eg_function) both run while it is traced (again at each retrace) and replays run their ops
 * without calling them, so they must not read values there (as no traced code may).
 * A tensor the forward reads gets a gradient from the node only if it is one of the inputs:
 * pass variables the forward uses as inputs (TF's `variables`). */

/* Writes n_outputs new tensors into outputs (every entry, each a new reference as an op's result
 * is: the current scope owns what its ops make) from the borrowed inputs. Runs in a no-grad
 * region. A failing status stops eg_custom_gradient with that status and the error the forward
 * left (an op's failure), or a message naming the callback when it left none. */
typedef eg_status (*eg_custom_forward_fn)(int n_inputs, eg_tensor *const *inputs, int n_outputs,
                                          eg_tensor **outputs, void *ctx);
/* Writes into input_grads[i] the gradient for inputs[i], a new reference with that input's shape,
 * dtype and device, or leaves it NULL for none (entries start NULL). inputs and outputs are those
 * of the forward; output_grads[k] is the gradient reaching outputs[k] (zeros shaped like it when
 * none does); all borrowed. Called inside eg_tape_gradient while scopes are suspended: every
 * tensor it makes is a plain reference, so it releases its temporaries with eg_release. Errors
 * as for the forward, raised by eg_tape_gradient; a gradient of the wrong shape, dtype or device
 * is an error naming the input's index. */
typedef eg_status (*eg_custom_backward_fn)(int n_inputs, eg_tensor *const *inputs, int n_outputs,
                                           eg_tensor *const *outputs,
                                           eg_tensor *const *output_grads, eg_tensor **input_grads,
                                           void *ctx);
typedef struct eg_custom_gradient_def {
    const char *name; /* in error messages (copied, up to 63 bytes); NULL: "custom_gradient" */
    eg_custom_forward_fn forward;
    eg_custom_backward_fn backward;
    /* Optional. Called with ctx exactly once for every eg_custom_gradient call given this def,
     * whatever its outcome, when nothing needs ctx any more: as the call returns when no tape
     * recorded the node (or the call failed), else when the last tape holding the node lets it
     * go (a non-persistent tape after its gradient, any tape at eg_tape_free). */
    void (*free_ctx)(void *ctx);
} eg_custom_gradient_def;

/* Runs def->forward(n_inputs, inputs, n_outputs, outputs, ctx) and records the custom node (see
 * above). ctx is the caller's and is passed to both callbacks: it must stay valid until free_ctx
 * is called with it, or, without free_ctx, until every tape that recorded the node has been
 * freed (or, non-persistent, has computed its gradient). def is read during the call only.
 * outputs receive new references (scope rules as for ops); an output the forward returns that is
 * also held elsewhere (an input passed through, a tensor made before) is handed out as a new view
 * of it, so that the node is its only producer. On failure every outputs[k] is NULL.
 * EG_ERR_NULL_ARGUMENT for a NULL def, callback, array or input; EG_ERR_INVALID_ARGUMENT for
 * n_inputs < 0 or n_outputs < 1; a forward that returns EG_OK with an output left NULL is
 * EG_ERR_STATE naming its index. */
eg_status eg_custom_gradient(const eg_custom_gradient_def *def, void *ctx, int n_inputs,
                             eg_tensor *const *inputs, int n_outputs, eg_tensor **outputs);

/* ---- variables: trainable state that outlives scopes; watched by every tape ----
 * A variable is an eg_tensor: use it in ops like any other. It is never owned by a scope: the
 * creator releases it with eg_release. */
/* A variable holding a copy of initial_value (a float tensor). name may be NULL; it is copied. */
eg_tensor *eg_variable(const eg_tensor *initial_value, const char *name);
bool eg_is_variable(const eg_tensor *t);
/* The name given at creation ("" when none); valid while the variable lives. */
const char *eg_variable_name(const eg_tensor *variable);
bool eg_variable_trainable(const eg_tensor *variable);
void eg_variable_set_trainable(eg_tensor *variable, bool trainable);
/* Whether the variable's gradient through eg_gather on axis 0 (a lookup of some of its rows, as an
 * Embedding does) is row-sparse (tensor.h): the gradient a tape returns for it then holds the
 * rows read and their gradients, never the whole table, and the optimizers update those rows
 * alone (TF's IndexedSlices with LazyAdam's rule: a row's slots change only at steps that read
 * it). Off by default. Where a row-sparse gradient cannot be made it is dense as before: when a
 * tape records the gradient computation itself (higher-order gradients need the dense ops), or
 * when the variable is used otherwise too (the sum is then dense). Differentiating the lookup
 * inside a traced function (eg_function) is EG_ERR_UNSUPPORTED while this is on. A 2-d or
 * higher f32/f64 variable only: EG_ERR_INVALID_ARGUMENT otherwise. */
eg_status eg_variable_set_sparse_gradient(eg_tensor *variable, bool sparse);
bool eg_variable_sparse_gradient(const eg_tensor *variable);
/* In-place updates; value must have the variable's shape (or broadcast to it) and dtype. A value
 * on another device is copied to the variable's first. The update is not recorded on tapes. */
eg_status eg_assign(eg_tensor *variable, const eg_tensor *value);
eg_status eg_assign_add(eg_tensor *variable, const eg_tensor *value);
eg_status eg_assign_sub(eg_tensor *variable, const eg_tensor *value);

#if !defined(EG_NO_CALLSITE)
#define eg_tape_begin(...) EG_CALLSITE_(eg_tape_begin(__VA_ARGS__))
#define eg_tape_end(...) EG_CALLSITE_(eg_tape_end(__VA_ARGS__))
#define eg_tape_watch(...) EG_CALLSITE_(eg_tape_watch(__VA_ARGS__))
#define eg_variable_set_sparse_gradient(...)                                                       \
    EG_CALLSITE_(eg_variable_set_sparse_gradient(__VA_ARGS__))
#define eg_tape_gradient(...) EG_CALLSITE_(eg_tape_gradient(__VA_ARGS__))
#define eg_tape_gradient_ex(...) EG_CALLSITE_(eg_tape_gradient_ex(__VA_ARGS__))
#define eg_tape_gradients(...) EG_CALLSITE_(eg_tape_gradients(__VA_ARGS__))
#define eg_tape_gradient_notify(...) EG_CALLSITE_(eg_tape_gradient_notify(__VA_ARGS__))
#define eg_custom_gradient(...)      EG_CALLSITE_(eg_custom_gradient(__VA_ARGS__))
#define eg_variable(...) EG_CALLSITE_(eg_variable(__VA_ARGS__))
#define eg_assign(...) EG_CALLSITE_(eg_assign(__VA_ARGS__))
#define eg_assign_add(...) EG_CALLSITE_(eg_assign_add(__VA_ARGS__))
#define eg_assign_sub(...) EG_CALLSITE_(eg_assign_sub(__VA_ARGS__))
#endif

#ifdef __cplusplus
}
#endif
#endif
