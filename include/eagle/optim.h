/* Eagle — optimizers (SGD, Adam, AdamW, RMSprop) and learning-rate schedules, with Keras'
 * defaults and Keras' exact update formulas.
 *
 * An optimizer owns its slots: per-variable state tensors (moments, velocities) created as zeros
 * the first time a variable is updated, keyed by the variable (its identity, not its name), and
 * freed by eg_optimizer_free. Variables and gradients are borrowed. Each update is one fused
 * in-place loop per variable over its raw f32/f64 data, updating the variable and its slots
 * together: no temporaries, nothing recorded on tapes. Only CPU tensors for now. The loops run
 * with subnormal numbers flushed to zero (as TensorFlow's CPU kernels do), and restore the
 * caller's floating-point mode after: a moment that decays below FLT_MIN becomes 0 rather than
 * slowing every later step with microcode assists (20-25 us of the seed model's 47 us update).
 *
 * The learning rate is a schedule evaluated at the optimizer's step counter (its number of
 * applied updates, starting at 0) before each update, as Keras does; use eg_schedule_constant
 * for a fixed rate. */
#ifndef EAGLE_OPTIM_H
#define EAGLE_OPTIM_H

#include <stdbool.h>
#include <stdint.h>

#include "eagle/status.h"
#include "eagle/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- learning-rate schedules: plain values, copy them freely ---- */

typedef enum eg_schedule_kind {
    EG_SCHEDULE_CONSTANT = 0,
    EG_SCHEDULE_EXPONENTIAL_DECAY,
    EG_SCHEDULE_COSINE_DECAY,
    EG_SCHEDULE_COUNT
} eg_schedule_kind;

typedef struct eg_schedule {
    eg_schedule_kind kind;
    double initial_learning_rate; /* CONSTANT: the rate itself */
    int64_t decay_steps;          /* EXPONENTIAL_DECAY, COSINE_DECAY: > 0 */
    double decay_rate;            /* EXPONENTIAL_DECAY */
    bool staircase;               /* EXPONENTIAL_DECAY: decay in whole periods */
    double alpha;                 /* COSINE_DECAY: the floor, as a fraction of the initial rate */
} eg_schedule;

/* lr(step) = learning_rate. */
eg_schedule eg_schedule_constant(double learning_rate);
/* Keras ExponentialDecay: lr(step) = initial * decay_rate ^ (step / decay_steps), the exponent
 * floored when staircase. */
eg_schedule eg_schedule_exponential_decay(double initial_learning_rate, int64_t decay_steps,
                                          double decay_rate, bool staircase);
/* Keras CosineDecay (no warmup): with s = min(step, decay_steps),
 * lr(step) = initial * ((1 - alpha) * 0.5 * (1 + cos(pi * s / decay_steps)) + alpha). */
eg_schedule eg_schedule_cosine_decay(double initial_learning_rate, int64_t decay_steps,
                                     double alpha);
/* The rate at `step` (>= 0). NaN with an error (EG_ERR_INVALID_ARGUMENT) for a NULL or invalid
 * schedule (unknown kind, decay_steps < 1, a negative or non-finite parameter) or step < 0. */
double eg_schedule_value(const eg_schedule *schedule, int64_t step);

/* ---- optimizers ---- */

typedef struct eg_optimizer eg_optimizer;

/* Keras' gradient clipping, part of every optimizer's options (all 0, the default: none; at most
 * one may be set, as in Keras). Before each update:
 *   clipnorm: each gradient scaled down to an L2 norm of at most clipnorm (tf.clip_by_norm);
 *   global_clipnorm: all gradients scaled down together, so that their joint L2 norm is at most
 *     global_clipnorm (tf.clip_by_global_norm);
 *   clipvalue: each element clamped to [-clipvalue, clipvalue].
 * The clipping runs as ops, so lazy and traced steps clip as eager ones do. Not combined with
 * loss scaling yet (eg_optimizer_enable_loss_scaling refuses a clipping optimizer). */
typedef struct eg_gradient_clipping {
    double clipnorm, clipvalue, global_clipnorm; /* each >= 0 */
} eg_gradient_clipping;

/* Keras SGD. With momentum m (slot "momentum", only when momentum != 0):
 *   m = momentum * m - lr * g;  v += nesterov ? momentum * m - lr * g : m
 * and without: v -= lr * g. */
typedef struct eg_sgd_options {
    eg_schedule learning_rate; /* default constant 0.01 */
    double momentum;           /* >= 0; default 0 */
    bool nesterov;             /* default false */
    double weight_decay;       /* >= 0, decoupled: v -= v * weight_decay * lr first; default 0 */
    eg_gradient_clipping clipping; /* default none */
} eg_sgd_options;

/* Keras Adam (and AdamW, which is Adam with decoupled weight decay). With t = step + 1 and slots
 * m ("momentum") and u ("velocity"):
 *   v -= v * weight_decay * lr                     (when weight_decay > 0)
 *   m += (g - m) * (1 - beta_1);  u += (g^2 - u) * (1 - beta_2)
 *   v -= m * alpha / (sqrt(u) + epsilon),  alpha = lr * sqrt(1 - beta_2^t) / (1 - beta_1^t) */
typedef struct eg_adam_options {
    eg_schedule learning_rate; /* default constant 0.001 */
    double beta_1;             /* in [0, 1); default 0.9 */
    double beta_2;             /* in [0, 1); default 0.999 */
    double epsilon;            /* > 0; default 1e-7 */
    double weight_decay;       /* >= 0; default 0 for Adam, 0.004 for AdamW */
    eg_gradient_clipping clipping; /* default none */
} eg_adam_options;

/* Keras RMSprop. Slots u ("velocity"), m ("momentum", when momentum > 0), a
 * ("average_gradient", when centered):
 *   u = rho * u + (1 - rho) * g^2;  a = rho * a + (1 - rho) * g
 *   step = lr * g / sqrt((centered ? u - a^2 : u) + epsilon)
 *   momentum > 0: m = momentum * m + step, v -= m;  else v -= step */
typedef struct eg_rmsprop_options {
    eg_schedule learning_rate; /* default constant 0.001 */
    double rho;                /* in [0, 1); default 0.9 */
    double momentum;           /* >= 0; default 0 */
    double epsilon;            /* > 0; default 1e-7 */
    bool centered;             /* default false */
    double weight_decay;       /* >= 0, decoupled as for SGD; default 0 */
    eg_gradient_clipping clipping; /* default none */
} eg_rmsprop_options;

/* Keras' defaults for each optimizer. */
eg_sgd_options eg_sgd_options_default(void);
eg_adam_options eg_adam_options_default(void);
eg_adam_options eg_adamw_options_default(void);
eg_rmsprop_options eg_rmsprop_options_default(void);

/* New optimizers; options NULL = the defaults above (eg_adam_new(NULL) is Keras' Adam()). The
 * options are copied. Caller owns the result: eg_optimizer_free. NULL with an error
 * (EG_ERR_INVALID_ARGUMENT) for an out-of-range option or an invalid schedule, or when out of
 * host memory. eg_adamw_new is eg_adam_new named "adamw" with AdamW's defaults. */
eg_optimizer *eg_sgd_new(const eg_sgd_options *options);
eg_optimizer *eg_adam_new(const eg_adam_options *options);
eg_optimizer *eg_adamw_new(const eg_adam_options *options);
eg_optimizer *eg_rmsprop_new(const eg_rmsprop_options *options);

/* One update of every variables[i] by grads[i] (TF's apply_gradients), then the step counter is
 * incremented. variables[i] must be distinct CPU variables (eg_variable) of dtype f32 or f64;
 * grads[i] must have the same shape, any float dtype (cast when it differs), and may be a
 * non-contiguous view (copied first). A NULL grads[i] skips that variable (as TF skips None
 * gradients). Everything is checked before anything is written, so on error no variable, slot or
 * counter has changed. Errors: NULL optimizer/arrays or variable (EG_ERR_NULL_ARGUMENT), n < 0,
 * a non-variable or repeated variable (EG_ERR_INVALID_ARGUMENT), dtype (EG_ERR_DTYPE), shape
 * (EG_ERR_SHAPE), device (EG_ERR_UNSUPPORTED), out of memory. */
eg_status eg_optimizer_apply_gradients(eg_optimizer *optimizer, int n, eg_tensor *const *grads,
                                       eg_tensor *const *variables);

/* Number of eg_optimizer_apply_gradients calls that succeeded (Keras' iterations); 0 for NULL. */
int64_t eg_optimizer_iterations(const eg_optimizer *optimizer);
/* The learning rate the next update will use: the schedule at the current step. NaN for NULL. */
double eg_optimizer_learning_rate(const eg_optimizer *optimizer);
/* Replaces the schedule (takes effect at the next update); EG_ERR_INVALID_ARGUMENT when invalid. */
eg_status eg_optimizer_set_learning_rate(eg_optimizer *optimizer, eg_schedule learning_rate);
/* "sgd", "adam", "adamw" or "rmsprop"; "" for NULL. Static storage. */
const char *eg_optimizer_name(const eg_optimizer *optimizer);
/* The slot `slot_name` ("momentum", "velocity", "average_gradient") of `variable`, borrowed and
 * owned by the optimizer (valid until eg_optimizer_free); NULL without an error when the
 * optimizer has no such slot for it (not updated yet, or not used by these options). */
eg_tensor *eg_optimizer_get_slot(const eg_optimizer *optimizer, const eg_tensor *variable,
                                 const char *slot_name);

/* ---- state, for checkpoints and resuming ----
 * An optimizer's whole state is its step counter (eg_optimizer_iterations) and, per variable,
 * the slots named by eg_optimizer_slot_name (read with eg_optimizer_get_slot). Restoring both
 * into an optimizer made with the same constructor and options makes every later update
 * bit-identical to the run the state was saved from (`eagle train --resume` relies on it). */

/* Number of slots kept per variable: 0 (SGD without momentum) to 3 (centered RMSprop with
 * momentum); 0 for NULL. */
int eg_optimizer_slot_count(const eg_optimizer *optimizer);
/* Name of slot i, 0 <= i < eg_optimizer_slot_count ("momentum", "velocity", ...; static
 * storage); NULL with an error for a NULL optimizer or i out of range (EG_ERR_INVALID_ARGUMENT). */
const char *eg_optimizer_slot_name(const eg_optimizer *optimizer, int i);
/* Copies value into the slot `slot_name` of `variable`, creating the variable's slots (zeros)
 * first when it has none yet; the other slots keep their values. variable must be one the
 * optimizer can update (a contiguous CPU f32/f64 variable); value must have its shape, be on the
 * CPU and have a float dtype (cast to the variable's when it differs); it may be a view. value is
 * borrowed (copied). Errors, with nothing changed: NULL argument (EG_ERR_NULL_ARGUMENT); no such
 * slot for this optimizer, or not a variable (EG_ERR_INVALID_ARGUMENT, naming the slots there
 * are); dtype (EG_ERR_DTYPE); shape (EG_ERR_SHAPE); device (EG_ERR_UNSUPPORTED); out of memory. */
eg_status eg_optimizer_set_slot(eg_optimizer *optimizer, const eg_tensor *variable,
                                const char *slot_name, const eg_tensor *value);
/* Sets the step counter, as if `iterations` updates had been applied: the schedule's step and
 * Adam's bias correction follow it. EG_ERR_NULL_ARGUMENT, EG_ERR_INVALID_ARGUMENT when < 0. */
eg_status eg_optimizer_set_iterations(eg_optimizer *optimizer, int64_t iterations);

/* ---- loss scaling (TensorFlow's LossScaleOptimizer), for mixed_float16 ----
 * f16 gradients below 2^-24 flush to zero. Scaling the loss by S before the gradient scales every
 * gradient by S into f16's range; the optimizer then divides them by S (exact: S is a power of 2)
 * before its update. A step whose gradients hold an inf or NaN (S too large) is skipped: no
 * variable, slot or step counter changes. Dynamic scaling starts at initial_scale, halves on every
 * skipped step (never below 1) and doubles after growth_interval finite steps in a row. A fixed
 * scale never changes; it skips non-finite steps too (unlike TF's fixed scale, which applies
 * them: an inf in a master weight ends a run). Works in eager, lazy and graph mode: the finite
 * check, the unscale and the update run as one effect once every gradient is computed (in a
 * traced function at every replay, so the updates are not fused into the gradients' products
 * there). The check reads the sum of all gradients on the host: one sync per step. */
typedef struct eg_loss_scale_options {
    bool dynamic;            /* default true */
    double initial_scale;    /* default 32768 (2^15, TF's); a power of 2 in [1, 2^64] */
    int64_t growth_interval; /* default 2000: finite steps in a row before the scale doubles */
} eg_loss_scale_options;

eg_loss_scale_options eg_loss_scale_options_default(void);
/* Turns loss scaling on for `optimizer` (options NULL = the defaults); the scale starts at
 * initial_scale. EG_ERR_NULL_ARGUMENT, EG_ERR_INVALID_ARGUMENT for a scale that is not a power of
 * 2 in range or growth_interval < 1, EG_ERR_STATE when it is already on. */
eg_status eg_optimizer_enable_loss_scaling(eg_optimizer *optimizer,
                                           const eg_loss_scale_options *options);
/* loss * the current scale (a new reference, recorded: take the gradient of this), on loss's
 * device and in its dtype (any shape: scaled elementwise). Without loss scaling: a new reference
 * to loss's values. The scale is a variable read when the op runs, so a traced step sees the
 * scale of each replay. NULL with an error for a NULL argument or a non-float loss. */
eg_tensor *eg_optimizer_scale_loss(eg_optimizer *optimizer, const eg_tensor *loss);
/* The current loss scale; 1 without loss scaling (and for NULL). */
double eg_optimizer_loss_scale(const eg_optimizer *optimizer);
/* Steps skipped for non-finite gradients since loss scaling was turned on; 0 without it. */
int64_t eg_optimizer_skipped_steps(const eg_optimizer *optimizer);
/* Finite steps in a row since the scale last changed (what growth_interval counts). */
int64_t eg_optimizer_loss_scale_good_steps(const eg_optimizer *optimizer);
/* Restores the loss scaling state (for resuming from a checkpoint): the scale, the finite steps
 * in a row and the skipped steps. EG_ERR_STATE without loss scaling, EG_ERR_INVALID_ARGUMENT for
 * out-of-range values. */
eg_status eg_optimizer_set_loss_scale_state(eg_optimizer *optimizer, double scale,
                                            int64_t good_steps, int64_t skipped_steps);

/* Frees the optimizer and releases its slots. NULL is ignored. */
void eg_optimizer_free(eg_optimizer *optimizer);

#if !defined(EG_NO_CALLSITE)
#define eg_optimizer_learning_rate(...) EG_CALLSITE_(eg_optimizer_learning_rate(__VA_ARGS__))

#define eg_schedule_value(...)            EG_CALLSITE_(eg_schedule_value(__VA_ARGS__))
#define eg_sgd_new(...)                   EG_CALLSITE_(eg_sgd_new(__VA_ARGS__))
#define eg_adam_new(...)                  EG_CALLSITE_(eg_adam_new(__VA_ARGS__))
#define eg_adamw_new(...)                 EG_CALLSITE_(eg_adamw_new(__VA_ARGS__))
#define eg_rmsprop_new(...)               EG_CALLSITE_(eg_rmsprop_new(__VA_ARGS__))
#define eg_optimizer_apply_gradients(...) EG_CALLSITE_(eg_optimizer_apply_gradients(__VA_ARGS__))
#define eg_optimizer_set_learning_rate(...)                                                        \
    EG_CALLSITE_(eg_optimizer_set_learning_rate(__VA_ARGS__))
#define eg_optimizer_slot_name(...)      EG_CALLSITE_(eg_optimizer_slot_name(__VA_ARGS__))
#define eg_optimizer_set_slot(...)       EG_CALLSITE_(eg_optimizer_set_slot(__VA_ARGS__))
#define eg_optimizer_set_iterations(...) EG_CALLSITE_(eg_optimizer_set_iterations(__VA_ARGS__))
#define eg_optimizer_enable_loss_scaling(...)                                                      \
    EG_CALLSITE_(eg_optimizer_enable_loss_scaling(__VA_ARGS__))
#define eg_optimizer_scale_loss(...) EG_CALLSITE_(eg_optimizer_scale_loss(__VA_ARGS__))
#define eg_optimizer_set_loss_scale_state(...)                                                     \
    EG_CALLSITE_(eg_optimizer_set_loss_scale_state(__VA_ARGS__))
#endif

#ifdef __cplusplus
}
#endif
#endif
