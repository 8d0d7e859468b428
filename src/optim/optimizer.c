/* Optimizers: SGD, Adam/AdamW and RMSprop with Keras' update formulas, each update one fused
 * in-place loop per variable over raw f32/f64 data (variable and slots together). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/idmap.h"
#include "base/cpu_features.h"
#include "base/threadpool.h"
#include "base/error.h"
#include "lazy/internal.h"
#include "core/tensor_internal.h"
#include "eagle/autograd.h"
#include "eagle/ops.h"
#include "optim/internal.h"

#if defined(__x86_64__) || defined(__SSE2__)
#include <xmmintrin.h> /* the MXCSR, for flush_subnormals_begin */
#endif

typedef enum { KIND_SGD, KIND_ADAM, KIND_RMSPROP } optimizer_kind;

#define MAX_SLOTS 3

/* The slots of one variable, at fixed positions per kind (NULL where unused). */
typedef struct slot_set {
    eg_tensor *slots[MAX_SLOTS];
} slot_set;

struct eg_optimizer {
    optimizer_kind kind;
    const char *name;
    eg_schedule learning_rate;
    double momentum;
    bool nesterov;
    double weight_decay;
    double beta_1, beta_2, epsilon;
    double rho;
    bool centered;
    int64_t iterations;
    const char *slot_names[MAX_SLOTS]; /* NULL: position unused */
    eg__idmap slots;                   /* variable id -> slot_set * */
};

/* ---- options ---- */

eg_sgd_options eg_sgd_options_default(void) {
    eg_sgd_options o = {.learning_rate = eg_schedule_constant(0.01)};
    return o;
}

eg_adam_options eg_adam_options_default(void) {
    eg_adam_options o = {.learning_rate = eg_schedule_constant(0.001),
                         .beta_1 = 0.9,
                         .beta_2 = 0.999,
                         .epsilon = 1e-7,
                         .weight_decay = 0.0};
    return o;
}

eg_adam_options eg_adamw_options_default(void) {
    eg_adam_options o = eg_adam_options_default();
    o.weight_decay = 0.004;
    return o;
}

eg_rmsprop_options eg_rmsprop_options_default(void) {
    eg_rmsprop_options o = {.learning_rate = eg_schedule_constant(0.001),
                            .rho = 0.9,
                            .momentum = 0.0,
                            .epsilon = 1e-7,
                            .centered = false,
                            .weight_decay = 0.0};
    return o;
}

/* ---- construction ---- */

static bool in_unit_interval(double x) {
    return x >= 0 && x < 1;
}
static bool non_negative(double x) {
    return x >= 0 && isfinite(x);
}
static bool positive(double x) {
    return x > 0 && isfinite(x);
}

static eg_optimizer *optimizer_new(optimizer_kind kind, const char *name,
                                   const eg_schedule *learning_rate, const char *problem) {
    const char *schedule_problem = eg__schedule_problem(learning_rate);
    if (schedule_problem || problem) {
        eg__error(EG_ERR_INVALID_ARGUMENT, "%s_new: %s%s", name,
                  schedule_problem ? "learning rate: " : "",
                  schedule_problem ? schedule_problem : problem);
        return NULL;
    }
    eg_optimizer *opt = calloc(1, sizeof *opt);
    if (!opt) {
        eg__error(EG_ERR_OUT_OF_MEMORY, "%s_new: out of host memory", name);
        return NULL;
    }
    opt->kind = kind;
    opt->name = name;
    opt->learning_rate = *learning_rate;
    return opt;
}

eg_optimizer *eg_sgd_new(const eg_sgd_options *options) {
    eg_sgd_options o = options ? *options : eg_sgd_options_default();
    const char *problem = !non_negative(o.momentum)       ? "momentum must be finite and >= 0"
                          : !non_negative(o.weight_decay) ? "weight_decay must be finite and >= 0"
                                                          : NULL;
    eg_optimizer *opt = optimizer_new(KIND_SGD, "sgd", &o.learning_rate, problem);
    if (!opt) return NULL;
    opt->momentum = o.momentum;
    opt->nesterov = o.nesterov;
    opt->weight_decay = o.weight_decay;
    if (o.momentum != 0) opt->slot_names[0] = "momentum";
    return opt;
}

static eg_optimizer *adam_new(const eg_adam_options *options, const char *name,
                              eg_adam_options defaults) {
    eg_adam_options o = options ? *options : defaults;
    const char *problem = !in_unit_interval(o.beta_1)     ? "beta_1 must be in [0, 1)"
                          : !in_unit_interval(o.beta_2)   ? "beta_2 must be in [0, 1)"
                          : !positive(o.epsilon)          ? "epsilon must be finite and > 0"
                          : !non_negative(o.weight_decay) ? "weight_decay must be finite and >= 0"
                                                          : NULL;
    eg_optimizer *opt = optimizer_new(KIND_ADAM, name, &o.learning_rate, problem);
    if (!opt) return NULL;
    opt->beta_1 = o.beta_1;
    opt->beta_2 = o.beta_2;
    opt->epsilon = o.epsilon;
    opt->weight_decay = o.weight_decay;
    opt->slot_names[0] = "momentum";
    opt->slot_names[1] = "velocity";
    return opt;
}

eg_optimizer *eg_adam_new(const eg_adam_options *options) {
    return adam_new(options, "adam", eg_adam_options_default());
}

eg_optimizer *eg_adamw_new(const eg_adam_options *options) {
    return adam_new(options, "adamw", eg_adamw_options_default());
}

eg_optimizer *eg_rmsprop_new(const eg_rmsprop_options *options) {
    eg_rmsprop_options o = options ? *options : eg_rmsprop_options_default();
    const char *problem = !in_unit_interval(o.rho)        ? "rho must be in [0, 1)"
                          : !non_negative(o.momentum)     ? "momentum must be finite and >= 0"
                          : !positive(o.epsilon)          ? "epsilon must be finite and > 0"
                          : !non_negative(o.weight_decay) ? "weight_decay must be finite and >= 0"
                                                          : NULL;
    eg_optimizer *opt = optimizer_new(KIND_RMSPROP, "rmsprop", &o.learning_rate, problem);
    if (!opt) return NULL;
    opt->rho = o.rho;
    opt->momentum = o.momentum;
    opt->epsilon = o.epsilon;
    opt->centered = o.centered;
    opt->weight_decay = o.weight_decay;
    opt->slot_names[0] = "velocity";
    if (o.momentum > 0) opt->slot_names[1] = "momentum";
    if (o.centered) opt->slot_names[2] = "average_gradient";
    return opt;
}

/* ---- the fused update loops ---- */

/* The scalars of one step, computed once in double. */
typedef struct hyper {
    double lr;
    double weight_decay; /* 0: none */
    double momentum;
    bool nesterov;
    double beta_1, beta_2, epsilon, alpha; /* alpha: Adam's bias-corrected step size */
    double rho;
} hyper;

/* The hyperparameters of opt's update number `iteration` at learning rate lr (Adam's alpha
 * bias-corrected for that step). One definition for eg_optimizer_apply_gradients and graph
 * mode's tiled updates, which must give the same bits. */
static hyper hyper_at(const eg_optimizer *opt, double lr, int64_t iteration);

/* The hyperparameters of an update at learning rate lr with Adam's alpha already known (graph
 * mode's pieces of one update: no pow() per piece). */
static hyper hyper_with_alpha(const eg_optimizer *opt, double lr, double alpha) {
    hyper h = hyper_at(opt, lr, -1);
    h.alpha = alpha;
    return h;
}

static hyper hyper_at(const eg_optimizer *opt, double lr, int64_t iteration) {
    hyper h = {.lr = lr,
               .weight_decay = opt->weight_decay,
               .momentum = opt->momentum,
               .nesterov = opt->nesterov,
               .beta_1 = opt->beta_1,
               .beta_2 = opt->beta_2,
               .epsilon = opt->epsilon,
               .rho = opt->rho};
    if (opt->kind == KIND_ADAM && iteration >= 0) {
        double t = (double)(iteration + 1);
        h.alpha = lr * sqrt(1.0 - pow(opt->beta_2, t)) / (1.0 - pow(opt->beta_1, t));
    }
    return h;
}

/* Each loop: v (n,) the variable, g (n,) the gradient, s0..s2 the slots in kind order; all
 * contiguous, same dtype T; computed in T like Keras. */
#define DEFINE_UPDATES(T, SUFFIX, SQRT)                                                            \
    static void sgd_##SUFFIX(T *restrict v, const T *restrict g, T *restrict m, int64_t n,         \
                             const hyper *h) {                                                     \
        const T lr = (T)h->lr, wd = (T)h->weight_decay, mom = (T)h->momentum;                      \
        for (int64_t i = 0; i < n; i++) {                                                          \
            T x = v[i];                                                                            \
            if (wd != 0) x = x - x * wd * lr;                                                      \
            if (m) {                                                                               \
                T mi = -g[i] * lr + m[i] * mom;                                                    \
                m[i] = mi;                                                                         \
                x = h->nesterov ? x + (-g[i] * lr + mi * mom) : x + mi;                            \
            } else {                                                                               \
                x = x - g[i] * lr;                                                                 \
            }                                                                                      \
            v[i] = x;                                                                              \
        }                                                                                          \
    }                                                                                              \
    static void rmsprop_##SUFFIX(T *restrict v, const T *restrict g, T *restrict u, T *restrict m, \
                                 T *restrict a, int64_t n, const hyper *h) {                       \
        const T lr = (T)h->lr, wd = (T)h->weight_decay, mom = (T)h->momentum;                      \
        const T rho = (T)h->rho, one_minus_rho = (T)(1.0 - h->rho), eps = (T)h->epsilon;           \
        for (int64_t i = 0; i < n; i++) {                                                          \
            T x = v[i];                                                                            \
            if (wd != 0) x = x - x * wd * lr;                                                      \
            T gi = g[i];                                                                           \
            T ui = rho * u[i] + one_minus_rho * (gi * gi);                                         \
            u[i] = ui;                                                                             \
            T denominator = ui + eps;                                                              \
            if (a) {                                                                               \
                T ai = rho * a[i] + one_minus_rho * gi;                                            \
                a[i] = ai;                                                                         \
                denominator = ui - ai * ai + eps;                                                  \
            }                                                                                      \
            T increment = (lr * gi) / SQRT(denominator);                                           \
            if (m) {                                                                               \
                T mi = mom * m[i] + increment;                                                     \
                m[i] = mi;                                                                         \
                x = x - mi;                                                                        \
            } else {                                                                               \
                x = x - increment;                                                                 \
            }                                                                                      \
            v[i] = x;                                                                              \
        }                                                                                          \
    }

DEFINE_UPDATES(float, f32, sqrtf)
DEFINE_UPDATES(double, f64, sqrt)
#undef DEFINE_UPDATES

/* Adam's loop on its own: it is compiled twice for f32 (see adam_f32). */
#define DEFINE_ADAM(T, NAME, SQRT, ATTR)                                                           \
    ATTR static void NAME(T *restrict v, const T *restrict g, T *restrict m, T *restrict u,        \
                          int64_t n, const hyper *h) {                                             \
        const T lr = (T)h->lr, wd = (T)h->weight_decay, alpha = (T)h->alpha;                       \
        const T one_minus_b1 = (T)(1.0 - h->beta_1), one_minus_b2 = (T)(1.0 - h->beta_2);          \
        const T eps = (T)h->epsilon;                                                               \
        for (int64_t i = 0; i < n; i++) {                                                          \
            T x = v[i];                                                                            \
            if (wd != 0) x = x - x * wd * lr;                                                      \
            T gi = g[i];                                                                           \
            T mi = m[i] + (gi - m[i]) * one_minus_b1;                                              \
            T ui = u[i] + (gi * gi - u[i]) * one_minus_b2;                                         \
            m[i] = mi;                                                                             \
            u[i] = ui;                                                                             \
            v[i] = x - (mi * alpha) / (SQRT(ui) + eps);                                            \
        }                                                                                          \
    }

DEFINE_ADAM(float, adam_f32_sse2, sqrtf, )
DEFINE_ADAM(double, adam_f64, sqrt, )
#if defined(__x86_64__)
/* The same loop in 8-wide vectors: sqrt, divide, multiply and add are exact in every width, so
 * the bits are those of the SSE2 loop (no "fma" target: a contracted multiply-add would round
 * differently). Adam was 18% of the seed model's step in its 4-wide form. */
DEFINE_ADAM(float, adam_f32_avx2, sqrtf, __attribute__((target("avx2"))))
#endif
#undef DEFINE_ADAM

static void adam_f32(float *restrict v, const float *restrict g, float *restrict m,
                     float *restrict u, int64_t n, const hyper *h) {
#if defined(__x86_64__)
    if (eg__cpu_active_level() >= EG__CPU_AVX2) {
        adam_f32_avx2(v, g, m, u, n, h);
        return;
    }
#endif
    adam_f32_sse2(v, g, m, u, n, h);
}

/* Updates run with subnormals flushed to zero (x86's FTZ and DAZ, as TensorFlow's CPU kernels
 * run), the caller's mode restored after. A parameter whose gradient stays 0 (a pixel that is 0
 * in every image, a dead unit) has its moments decay by beta each step into the subnormal range,
 * where every operation on them takes a microcode assist: after 2,000 Fashion-MNIST steps 2,352
 * of the seed model's 50,176 first-layer momenta were subnormal, in 27 % of the 8-wide vectors,
 * and the assists were 20-25 us of its 47 us update. Flushed, those moments become 0; over 1,500
 * steps the weights stayed bitwise the same. */
#if defined(__x86_64__) || defined(__SSE2__)
#define FLUSH_SUBNORMALS_BITS 0x8040u /* FTZ (bit 15) | DAZ (bit 6) */
typedef unsigned int float_mode;
static float_mode flush_subnormals_begin(void) {
    float_mode saved = _mm_getcsr();
    _mm_setcsr(saved | FLUSH_SUBNORMALS_BITS);
    return saved;
}
static void flush_subnormals_end(float_mode saved) {
    _mm_setcsr(saved);
}
#else
typedef int float_mode;
static float_mode flush_subnormals_begin(void) {
    return 0;
}
static void flush_subnormals_end(float_mode saved) {
    (void)saved;
}
#endif

/* Elements [start, start + n) of one variable's update: v and the slots are the variable's
 * whole arrays (NULL where a slot is unused), g the n gradient elements of the range; every
 * pointer already checked. */
static void update_range(const eg_optimizer *opt, eg_dtype dtype, void *v_base,
                         void *const slot_base[MAX_SLOTS], int64_t start, int64_t n, const void *g,
                         const hyper *h) {
    size_t size = eg_dtype_size(dtype);
    void *v = (char *)v_base + (size_t)start * size;
    void *slot[MAX_SLOTS] = {0};
    for (int k = 0; k < MAX_SLOTS; k++)
        if (slot_base[k]) slot[k] = (char *)slot_base[k] + (size_t)start * size;
    bool f32 = dtype == EG_DTYPE_F32;
    float_mode saved = flush_subnormals_begin();
    switch (opt->kind) {
    case KIND_SGD:
        if (f32)
            sgd_f32(v, g, slot[0], n, h);
        else
            sgd_f64(v, g, slot[0], n, h);
        break;
    case KIND_ADAM:
        if (f32)
            adam_f32(v, g, slot[0], slot[1], n, h);
        else
            adam_f64(v, g, slot[0], slot[1], n, h);
        break;
    case KIND_RMSPROP:
        if (f32)
            rmsprop_f32(v, g, slot[0], slot[1], slot[2], n, h);
        else
            rmsprop_f64(v, g, slot[0], slot[1], slot[2], n, h);
        break;
    }
    flush_subnormals_end(saved);
}

/* One update of several variables as one piece of parallel work over all their elements
 * together: the updates are elementwise, so any split gives the same bits, and small variables
 * (biases) ride along with big ones instead of each waking the pool. */
typedef struct update_piece {
    eg_dtype dtype;
    void *variable;
    const void *grad;
    void *slots[MAX_SLOTS];
    int64_t first; /* the index of the variable's first element in the concatenation */
    int64_t count;
} update_piece;

typedef struct update_job {
    const eg_optimizer *optimizer;
    const hyper *h;
    const update_piece *pieces;
    int n_pieces;
} update_job;

static void run_update_job(void *context, int64_t begin, int64_t end) {
    const update_job *job = context;
    for (int i = 0; i < job->n_pieces && begin < end; i++) {
        const update_piece *piece = &job->pieces[i];
        int64_t piece_end = piece->first + piece->count;
        if (piece_end <= begin) continue;
        int64_t stop = end < piece_end ? end : piece_end;
        int64_t start = begin - piece->first;
        const char *grad = (const char *)piece->grad + (size_t)start * eg_dtype_size(piece->dtype);
        update_range(job->optimizer, piece->dtype, piece->variable, piece->slots, start,
                     stop - begin, grad, job->h);
        begin = stop;
    }
}

/* Elements of an update below which it stays on one thread. Not the wake-up cost alone (Adam
 * takes ~1 ns an element): a variable updated half on each core is then read by the next step's
 * product on one core, from the other core's cache. At 16384 the seed model (50,890 parameters)
 * split its update and its eager step at 2 threads took ~40 us more than at 1 (`eagle bench
 * modes`); the 784-512-512-10 model (669,706) still splits. */
enum { UPDATE_PARALLEL_GRAIN = 1 << 18 };

/* ---- slots ---- */

static slot_set *find_slots(const eg_optimizer *opt, const eg_tensor *variable) {
    return eg__idmap_get(&opt->slots, variable->id);
}

/* The variable's slots, created as zeros on first use; NULL with an error. Called with the
 * scope suspended. */
static slot_set *get_slots(eg_optimizer *opt, const eg_tensor *variable) {
    slot_set *set = find_slots(opt, variable);
    if (set) return set;
    set = calloc(1, sizeof *set);
    if (!set) goto out_of_memory;
    for (int k = 0; k < MAX_SLOTS; k++) {
        if (!opt->slot_names[k]) continue;
        set->slots[k] =
            eg__full_on(variable->device, variable->dtype, variable->n_dims, variable->shape, 0.0);
        if (!set->slots[k]) goto fail;
    }
    if (!eg__idmap_put(&opt->slots, variable->id, set)) goto out_of_memory;
    return set;
out_of_memory:
    eg__error(EG_ERR_OUT_OF_MEMORY, "optimizer: out of host memory for slots");
fail:
    if (set)
        for (int k = 0; k < MAX_SLOTS; k++) eg__unref(set->slots[k]);
    free(set);
    return NULL;
}

eg_tensor *eg_optimizer_get_slot(const eg_optimizer *opt, const eg_tensor *variable,
                                 const char *slot_name) {
    if (!opt || !variable || !slot_name) return NULL;
    slot_set *set = find_slots(opt, variable);
    if (!set) return NULL;
    for (int k = 0; k < MAX_SLOTS; k++)
        if (opt->slot_names[k] && strcmp(opt->slot_names[k], slot_name) == 0) return set->slots[k];
    return NULL;
}

/* ---- apply_gradients ---- */

static eg_status check_pair(const eg_optimizer *opt, int i, const eg_tensor *grad,
                            const eg_tensor *variable) {
    const char *name = opt->name;
    if (!variable) return eg__error(EG_ERR_NULL_ARGUMENT, "%s: variables[%d] is NULL", name, i);
    if (!eg_is_variable(variable))
        return eg__error(EG_ERR_INVALID_ARGUMENT, "%s: variables[%d] is not a variable", name, i);
    if (variable->dtype != EG_DTYPE_F32 && variable->dtype != EG_DTYPE_F64)
        return eg__error(EG_ERR_DTYPE, "%s: variable '%s' is %s; only f32 and f64 are updated",
                         name, eg_variable_name(variable), eg_dtype_name(variable->dtype));
    if (eg_device_kind(variable->device) != EG_DEVICE_CPU || !eg__is_contiguous(variable))
        return eg__error(EG_ERR_UNSUPPORTED, "%s: variable '%s' must be a contiguous CPU tensor",
                         name, eg_variable_name(variable));
    if (!grad) return EG_OK;
    if (!eg_dtype_is_float(grad->dtype))
        return eg__error(EG_ERR_DTYPE, "%s: gradient of '%s' is %s; it must be a float tensor",
                         name, eg_variable_name(variable), eg_dtype_name(grad->dtype));
    if (eg_device_kind(grad->device) != EG_DEVICE_CPU)
        return eg__error(EG_ERR_UNSUPPORTED, "%s: gradient of '%s' is not on the CPU", name,
                         eg_variable_name(variable));
    if (grad->device != variable->device)
        return eg__error(EG_ERR_DEVICE, "%s: gradient of '%s' is on %s, the variable on %s", name,
                         eg_variable_name(variable), eg_device_name(grad->device),
                         eg_device_name(variable->device));
    if (grad->n_dims != variable->n_dims ||
        (grad->n_dims &&
         memcmp(grad->shape, variable->shape, (size_t)grad->n_dims * sizeof(int64_t)))) {
        char a[160], b[160];
        return eg__error(EG_ERR_SHAPE, "%s: gradient %s does not match variable '%s' %s", name,
                         eg__shape_format(grad->n_dims, grad->shape, a, sizeof a),
                         eg_variable_name(variable),
                         eg__shape_format(variable->n_dims, variable->shape, b, sizeof b));
    }
    return EG_OK;
}

eg_status eg_optimizer_apply_gradients(eg_optimizer *opt, int n, eg_tensor *const *grads,
                                       eg_tensor *const *variables) {
    if (!opt) return eg__error(EG_ERR_NULL_ARGUMENT, "apply_gradients: optimizer is NULL");
    if (n < 0)
        return eg__error(EG_ERR_INVALID_ARGUMENT, "%s: n must be >= 0, got %d", opt->name, n);
    if (n > 0 && (!grads || !variables))
        return eg__error(EG_ERR_NULL_ARGUMENT, "%s: %s array is NULL", opt->name,
                         grads ? "variables" : "grads");
    /* Check everything before writing anything. */
    eg__idmap seen = {0};
    eg_status status = EG_OK;
    for (int i = 0; i < n && status == EG_OK; i++) {
        status = check_pair(opt, i, grads[i], variables[i]);
        if (status != EG_OK) break;
        if (eg__idmap_contains(&seen, variables[i]->id))
            status = eg__error(EG_ERR_INVALID_ARGUMENT, "%s: variable '%s' appears twice",
                               opt->name, eg_variable_name(variables[i]));
        else if (!eg__idmap_put(&seen, variables[i]->id, variables[i]))
            status = eg__error(EG_ERR_OUT_OF_MEMORY, "%s: out of host memory", opt->name);
    }
    eg__idmap_clear(&seen);
    if (status != EG_OK) return status;
    if (eg__graph_tracing()) return eg__graph_defer_update(opt, n, grads, variables);
    /* Lazy gradients are computed together: one by one they would recompute shared work. */
    const eg_tensor **pending = malloc(sizeof *pending * ((size_t)n + 1));
    if (!pending) return eg__error(EG_ERR_OUT_OF_MEMORY, "%s: out of host memory", opt->name);
    int n_pending = 0;
    for (int i = 0; i < n; i++)
        if (grads[i] && !grads[i]->storage) pending[n_pending++] = grads[i];
    status = n_pending ? eg_realize(n_pending, pending) : EG_OK;
    free(pending);
    /* Pending lazy ops that read a variable keep the value they were called with. */
    for (int i = 0; i < n && status == EG_OK; i++)
        if (grads[i]) status = eg__lazy_before_write(variables[i]);
    if (status != EG_OK) return status;
    double lr = eg_schedule_value(&opt->learning_rate, opt->iterations);
    if (isnan(lr)) return eg_last_status();

    /* Prepare: contiguous gradients of the variable's dtype, and the slots. */
    typedef struct prepared {
        eg_tensor *owned; /* a converted gradient we release, or NULL */
        const void *grad;
        slot_set *slots;
    } prepared;
    prepared *items = n ? calloc((size_t)n, sizeof *items) : NULL;
    if (n && !items) return eg__error(EG_ERR_OUT_OF_MEMORY, "%s: out of host memory", opt->name);
    eg_no_grad_begin();
    eg__scope_suspend();
    for (int i = 0; i < n && status == EG_OK; i++) {
        const eg_tensor *g = grads[i], *v = variables[i];
        if (!g) continue;
        if (g->dtype != v->dtype)
            g = items[i].owned = eg_cast(g, v->dtype);              /* contiguous */
        else if (!eg__is_contiguous(g) || g->storage == v->storage) /* views; aliasing */
            g = items[i].owned = eg_copy(g);
        if (!g || !(items[i].slots = get_slots(opt, v))) {
            status = eg_last_status();
            break;
        }
        items[i].grad = g->n_elems ? eg_tensor_data(g) : NULL;
        if (g->n_elems && !items[i].grad) status = eg_last_status();
    }
    update_piece *pieces = n && status == EG_OK ? calloc((size_t)n, sizeof *pieces) : NULL;
    if (n && status == EG_OK && !pieces)
        status = eg__error(EG_ERR_OUT_OF_MEMORY, "%s: out of host memory", opt->name);
    if (status == EG_OK) {
        hyper h = hyper_at(opt, lr, opt->iterations);
        update_job job = {.optimizer = opt, .h = &h, .pieces = pieces};
        int64_t total = 0;
        for (int i = 0; i < n; i++) {
            eg_tensor *v = variables[i];
            if (!grads[i] || v->n_elems == 0) continue;
            update_piece *piece = &pieces[job.n_pieces++];
            *piece = (update_piece){.dtype = v->dtype,
                                    .variable = eg__data(v),
                                    .grad = items[i].grad,
                                    .first = total,
                                    .count = v->n_elems};
            for (int k = 0; k < MAX_SLOTS; k++)
                if (items[i].slots->slots[k]) piece->slots[k] = eg__data(items[i].slots->slots[k]);
            total += v->n_elems;
        }
        eg__parallel_for(total, UPDATE_PARALLEL_GRAIN, run_update_job, &job);
        opt->iterations++;
    }
    free(pieces);
    for (int i = 0; i < n; i++) eg__unref(items[i].owned);
    free(items);
    eg__scope_resume();
    eg_no_grad_end();
    return status;
}

/* ---- queries ---- */

int64_t eg_optimizer_iterations(const eg_optimizer *opt) {
    return opt ? opt->iterations : 0;
}

double eg_optimizer_learning_rate(const eg_optimizer *opt) {
    return opt ? eg_schedule_value(&opt->learning_rate, opt->iterations) : NAN;
}

eg_status eg_optimizer_set_learning_rate(eg_optimizer *opt, eg_schedule learning_rate) {
    if (!opt) return eg__error(EG_ERR_NULL_ARGUMENT, "optimizer_set_learning_rate: NULL optimizer");
    const char *problem = eg__schedule_problem(&learning_rate);
    if (problem)
        return eg__error(EG_ERR_INVALID_ARGUMENT, "optimizer_set_learning_rate: %s", problem);
    opt->learning_rate = learning_rate;
    return EG_OK;
}

/* ---- state ---- */

int eg_optimizer_slot_count(const eg_optimizer *opt) {
    int count = 0;
    for (int k = 0; opt && k < MAX_SLOTS; k++) count += opt->slot_names[k] != NULL;
    return count;
}

const char *eg_optimizer_slot_name(const eg_optimizer *opt, int i) {
    if (!opt) {
        eg__error(EG_ERR_NULL_ARGUMENT, "optimizer_slot_name: NULL optimizer");
        return NULL;
    }
    for (int k = 0, seen = 0; k < MAX_SLOTS; k++)
        if (opt->slot_names[k] && seen++ == i) return opt->slot_names[k];
    eg__error(EG_ERR_INVALID_ARGUMENT, "%s: slot index %d out of range (%d slots)", opt->name, i,
              eg_optimizer_slot_count(opt));
    return NULL;
}

eg_status eg_optimizer_set_slot(eg_optimizer *opt, const eg_tensor *variable, const char *slot_name,
                                const eg_tensor *value) {
    if (!opt || !variable || !slot_name || !value)
        return eg__error(EG_ERR_NULL_ARGUMENT, "optimizer_set_slot: %s is NULL",
                         !opt         ? "optimizer"
                         : !variable  ? "variable"
                         : !slot_name ? "slot_name"
                                      : "value");
    eg_status status = check_pair(opt, 0, NULL, variable);
    if (status != EG_OK) return status;
    const char *name = eg_variable_name(variable);
    if (!eg_dtype_is_float(value->dtype))
        return eg__error(EG_ERR_DTYPE, "%s: slot value for '%s' is %s; it must be a float tensor",
                         opt->name, name, eg_dtype_name(value->dtype));
    if (eg_device_kind(value->device) != EG_DEVICE_CPU)
        return eg__error(EG_ERR_UNSUPPORTED, "%s: slot value for '%s' is not on the CPU", opt->name,
                         name);
    if (value->n_dims != variable->n_dims ||
        (value->n_dims &&
         memcmp(value->shape, variable->shape, (size_t)value->n_dims * sizeof(int64_t)))) {
        char a[160], b[160];
        return eg__error(EG_ERR_SHAPE, "%s: slot value %s does not match variable '%s' %s",
                         opt->name, eg__shape_format(value->n_dims, value->shape, a, sizeof a),
                         name, eg__shape_format(variable->n_dims, variable->shape, b, sizeof b));
    }
    int slot = -1;
    char known[64] = "";
    for (int k = 0; k < MAX_SLOTS; k++) {
        if (!opt->slot_names[k]) continue;
        if (!strcmp(opt->slot_names[k], slot_name)) slot = k;
        size_t used = strlen(known);
        snprintf(known + used, sizeof known - used, "%s%s", used ? ", " : "", opt->slot_names[k]);
    }
    if (slot < 0)
        return eg__error(EG_ERR_INVALID_ARGUMENT, "%s: no slot named '%s' (slots: %s)", opt->name,
                         slot_name, known[0] ? known : "none");
    eg_no_grad_begin();
    eg__scope_suspend();
    /* A contiguous copy of the variable's dtype (cast, or copied when it is a view or is the
     * slot itself), then one memcpy. */
    eg_tensor *owned = NULL;
    const eg_tensor *source = value;
    slot_set *set = find_slots(opt, variable);
    if (value->dtype != variable->dtype)
        source = owned = eg_cast(value, variable->dtype);
    else if (!eg__is_contiguous(value) ||
             (set && set->slots[slot] && value->storage == set->slots[slot]->storage))
        source = owned = eg_copy(value);
    if (source) set = get_slots(opt, variable);
    if (source && set && variable->n_elems)
        memcpy(eg__data(set->slots[slot]), eg__data(source),
               (size_t)variable->n_elems * eg_dtype_size(variable->dtype));
    status = source && set ? EG_OK : eg_last_status();
    eg__unref(owned);
    eg__scope_resume();
    eg_no_grad_end();
    return status;
}

eg_status eg_optimizer_set_iterations(eg_optimizer *opt, int64_t iterations) {
    if (!opt) return eg__error(EG_ERR_NULL_ARGUMENT, "optimizer_set_iterations: NULL optimizer");
    if (iterations < 0)
        return eg__error(EG_ERR_INVALID_ARGUMENT, "%s: iterations must be >= 0, got %lld",
                         opt->name, (long long)iterations);
    opt->iterations = iterations;
    return EG_OK;
}

const char *eg_optimizer_name(const eg_optimizer *opt) {
    return opt ? opt->name : "";
}

void eg_optimizer_free(eg_optimizer *opt) {
    if (!opt) return;
    for (size_t i = 0; i < opt->slots.capacity; i++) {
        slot_set *set = opt->slots.keys[i] ? opt->slots.values[i] : NULL;
        if (!set) continue;
        for (int k = 0; k < MAX_SLOTS; k++) eg__unref(set->slots[k]);
        free(set);
    }
    eg__idmap_clear(&opt->slots);
    free(opt);
}

/* ---- graph mode: one step's update applied piecewise (optim/internal.h) ---- */

eg_status eg__optimizer_step_prepare(eg__update_step *step, eg_optimizer *opt, eg_tensor *variable,
                                     int64_t iteration) {
    double lr = eg_schedule_value(&opt->learning_rate, iteration);
    if (isnan(lr)) return eg_last_status();
    eg__scope_suspend();
    slot_set *set = get_slots(opt, variable);
    eg__scope_resume();
    if (!set) return eg_last_status();
    *step = (eg__update_step){opt, variable, iteration, lr, 0, {NULL, NULL, NULL}};
    for (int k = 0; k < MAX_SLOTS && k < 3; k++)
        if (set->slots[k]) step->slots[k] = eg__data(set->slots[k]);
    step->alpha = hyper_at(opt, lr, iteration).alpha;
    return EG_OK;
}

void eg__optimizer_step_range(const eg__update_step *step, int64_t start, int64_t count,
                              const void *grad) {
    const eg_optimizer *opt = step->optimizer;
    hyper h = hyper_with_alpha(opt, step->learning_rate, step->alpha);
    const eg_tensor *v = step->variable;
    void *slots[MAX_SLOTS] = {0};
    for (int k = 0; k < MAX_SLOTS; k++) slots[k] = step->slots[k];
    update_range(opt, v->dtype, eg__data(v), slots, start, count, grad, &h);
}
