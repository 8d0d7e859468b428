/* Losses: Keras' formulas, written with recorded ops so gradients reach y_pred. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "nn/internal.h"

/* Keras' backend epsilon, used to clip probabilities. */
#define EPSILON 1e-7

static bool check_reduction(const char *name, eg_reduction reduction) {
    if ((unsigned)reduction < EG_REDUCTION_COUNT) return true;
    eg__error(EG_ERR_INVALID_ARGUMENT, "%s: invalid reduction %d", name, (int)reduction);
    return false;
}

static bool check_pred(const char *name, const eg_tensor *y_pred, int min_dims) {
    if (y_pred->dtype != EG_DTYPE_F32 && y_pred->dtype != EG_DTYPE_F64) {
        eg__error(EG_ERR_DTYPE, "%s: y_pred must be f32 or f64, got %s", name,
                  eg_dtype_name(y_pred->dtype));
        return false;
    }
    if (y_pred->n_dims < min_dims) {
        eg__error(EG_ERR_SHAPE, "%s: y_pred needs at least %d dim(s), got %d", name, min_dims,
                  y_pred->n_dims);
        return false;
    }
    return true;
}

/* Losses run in f32 whatever the policy (softmax, logs and the batch mean need its range and
 * accuracy): a bf16 or f16 y_pred is widened first, through a recorded cast, so its gradient
 * reaches the low-precision logits. */
static bool low_precision(const eg_tensor *t) {
    return t->dtype == EG_DTYPE_BF16 || t->dtype == EG_DTYPE_F16;
}
/* Returns CALL, which names the widened predictions `wide`, when y_pred is bf16 or f16. */
#define WIDEN_PREDICTIONS(y_pred, CALL)                                                            \
    do {                                                                                           \
        if (y_pred && low_precision(y_pred)) {                                                     \
            eg_tensor *wide = eg_cast(y_pred, EG_DTYPE_F32);                                       \
            eg_tensor *out_ = wide ? (CALL) : NULL;                                                \
            eg_release(wide);                                                                      \
            return out_;                                                                           \
        }                                                                                          \
    } while (0)

static bool same_shape(const eg_tensor *a, const eg_tensor *b) {
    return a->n_dims == b->n_dims &&
           (a->n_dims == 0 || !memcmp(a->shape, b->shape, (size_t)a->n_dims * sizeof(int64_t)));
}

static void shape_error(const char *name, const char *what, const eg_tensor *a,
                        const eg_tensor *b) {
    char sa[160], sb[160];
    eg__error(EG_ERR_SHAPE, "%s: %s: y_true %s and y_pred %s", name, what,
              eg__shape_format(a->n_dims, a->shape, sa, sizeof sa),
              eg__shape_format(b->n_dims, b->shape, sb, sizeof sb));
}

/* Applies the reduction to the per-sample losses (consumed: released unless returned). */
static eg_tensor *reduce(eg_tensor *per_sample, eg_reduction reduction) {
    if (!per_sample || reduction == EG_REDUCTION_NONE) return per_sample;
    eg_tensor *out = reduction == EG_REDUCTION_SUM ? eg_sum(per_sample, 0, NULL, false)
                                                   : eg_mean(per_sample, 0, NULL, false);
    eg_release(per_sample);
    return out;
}

/* mean over the last axis (nothing for a 0-d tensor); consumes x. */
static eg_tensor *mean_last(eg_tensor *x) {
    if (!x || x->n_dims == 0) return x;
    int axis = -1;
    eg_tensor *out = eg_mean(x, 1, &axis, false);
    eg_release(x);
    return out;
}

/* y_true cast to y_pred's dtype when they differ (a temp), else y_true itself. */
static const eg_tensor *as_pred_dtype(eg__temps *temps, const eg_tensor *y_true,
                                      const eg_tensor *y_pred) {
    if (y_true->dtype == y_pred->dtype) return y_true;
    return eg__temp(temps, eg_cast(y_true, y_pred->dtype));
}

/* Keras' squeeze_or_expand_to_same_rank for (y_true, y_pred): when the ranks differ by one and
 * the longer one ends in 1, a rank-1 partner is expanded, else that last axis is squeezed. */
static void match_ranks(eg__temps *temps, const eg_tensor **a, const eg_tensor **b) {
    for (int pass = 0; pass < 2; pass++) {
        const eg_tensor **x1 = pass ? b : a, **x2 = pass ? a : b;
        if ((*x1)->n_dims != (*x2)->n_dims + 1 || (*x1)->shape[(*x1)->n_dims - 1] != 1) continue;
        if ((*x2)->n_dims == 1)
            *x2 = eg__temp(temps, eg_unsqueeze(*x2, -1));
        else
            *x1 = eg__temp(temps, eg_squeeze(*x1, -1));
        return;
    }
}

/* Labels as i32/i64/u8 of shape y_pred.shape[:-1] (a (..., 1) trailing axis dropped, other
 * dtypes cast to i64); NULL with an error. */
static const eg_tensor *prepare_labels(eg__temps *temps, const char *name, const eg_tensor *labels,
                                       const eg_tensor *y_pred) {
    if (labels->n_dims == y_pred->n_dims && labels->n_dims > 0 &&
        labels->shape[labels->n_dims - 1] == 1)
        labels = eg__temp(temps, eg_squeeze(labels, -1));
    if (!labels) return NULL;
    if (labels->n_dims != y_pred->n_dims - 1 ||
        (labels->n_dims &&
         memcmp(labels->shape, y_pred->shape, (size_t)labels->n_dims * sizeof(int64_t)))) {
        shape_error(name, "labels must have y_pred's shape without its last axis", labels, y_pred);
        return NULL;
    }
    if (labels->dtype == EG_DTYPE_BOOL) {
        eg__error(EG_ERR_DTYPE, "%s: labels must be integer class indices, got bool", name);
        return NULL;
    }
    if (labels->dtype != EG_DTYPE_I32 && labels->dtype != EG_DTYPE_I64 &&
        labels->dtype != EG_DTYPE_U8)
        labels = eg__temp(temps, eg_cast(labels, EG_DTYPE_I64));
    return labels;
}

/* The smallest and largest label; false with an error. */
static bool label_range(eg__temps *temps, const eg_tensor *labels, int64_t *low, int64_t *high) {
    eg_tensor *wide = eg__temp(temps, eg_cast(labels, EG_DTYPE_I64)); /* contiguous */
    if (!wide) return false;
    /* On a GPU the labels are read back (a synchronization): a bad label is an error at the
     * call, not a silent NaN inside a kernel. */
    size_t bytes = (size_t)wide->n_elems * sizeof(int64_t);
    int64_t *values = malloc(bytes ? bytes : 1);
    if (!values) {
        eg__error(EG_ERR_OUT_OF_MEMORY, "out of host memory reading labels");
        return false;
    }
    bool ok = eg_tensor_copy_to_host(wide, values, bytes) == EG_OK;
    for (int64_t i = 0; ok && i < wide->n_elems; i++) {
        if (i == 0 || values[i] < *low) *low = values[i];
        if (i == 0 || values[i] > *high) *high = values[i];
    }
    free(values);
    return ok;
}

/* y_pred / sum(y_pred, -1) clipped to [eps, 1 - eps]: Keras' treatment of probabilities. */
static eg_tensor *normalized_probabilities(eg__temps *temps, const eg_tensor *y_pred) {
    int axis = -1;
    eg_tensor *total = eg__temp(temps, eg_sum(y_pred, 1, &axis, true));
    eg_tensor *p = eg__temp(temps, eg_div(y_pred, total));
    return p ? eg__temp(temps, eg_clip(p, EPSILON, 1.0 - EPSILON)) : NULL;
}

eg_tensor *eg_loss_sparse_categorical_crossentropy(const eg_tensor *labels, const eg_tensor *y_pred,
                                                   bool from_logits, eg_reduction reduction) {
    static const char *name = "sparse_categorical_crossentropy";
    WIDEN_PREDICTIONS(y_pred, eg_loss_sparse_categorical_crossentropy(labels, wide, from_logits,
                                                                      reduction));
    if (!eg__check_arg(labels, name, 0) || !eg__check_arg(y_pred, name, 1) ||
        !check_reduction(name, reduction) || !check_pred(name, y_pred, 1))
        return NULL;
    eg__temps temps = {0};
    eg_tensor *per_sample = NULL;
    const eg_tensor *idx = prepare_labels(&temps, name, labels, y_pred);
    if (!idx) goto done;
    int64_t classes = y_pred->shape[y_pred->n_dims - 1];
    int64_t rows = classes ? y_pred->n_elems / classes : idx->n_elems;
    int64_t shape2[2] = {rows, classes};
    if (from_logits) {
        /* logits (N, C), labels (N,) -> (N,): the fused, stable op. Reshaped only where they
         * have other ranks: a training step's loss then records one op, not four. */
        bool flat_already = idx->n_dims == 1;
        const eg_tensor *logits =
            flat_already ? y_pred : eg__temp(&temps, eg_reshape(y_pred, 2, shape2));
        const eg_tensor *flat = flat_already ? idx : eg__temp(&temps, eg_reshape(idx, 1, &rows));
        eg_tensor *loss = eg_sparse_softmax_cross_entropy(logits, flat);
        if (flat_already)
            per_sample = loss;
        else if (eg__temp(&temps, loss))
            per_sample = eg_reshape(loss, idx->n_dims, idx->shape);
    } else {
        /* -sum(one_hot(label) * log(p), -1): one_hot gives a zero row for a bad label, so the
         * range is checked here. */
        int64_t low = 0, high = 0;
        if (!label_range(&temps, idx, &low, &high)) goto done;
        if (idx->n_elems > 0 && (low < 0 || high >= classes)) {
            eg__error(EG_ERR_INVALID_ARGUMENT,
                      "%s: labels must be in [0, %lld), got values from %lld to %lld", name,
                      (long long)classes, (long long)low, (long long)high);
            goto done;
        }
        eg_tensor *p = normalized_probabilities(&temps, y_pred);
        eg_tensor *log_p = eg__temp(&temps, eg_log(p));
        eg_tensor *hot = eg__temp(&temps, eg_one_hot(idx, classes, y_pred->dtype));
        eg_tensor *picked = eg__temp(&temps, eg_mul(hot, log_p));
        int axis = -1;
        eg_tensor *sum = eg__temp(&temps, eg_sum(picked, 1, &axis, false));
        if (sum) per_sample = eg_neg(sum);
    }
done:
    eg__temps_release(&temps);
    return reduce(per_sample, reduction);
}

eg_tensor *eg_loss_categorical_crossentropy(const eg_tensor *y_true, const eg_tensor *y_pred,
                                            bool from_logits, eg_reduction reduction) {
    static const char *name = "categorical_crossentropy";
    WIDEN_PREDICTIONS(y_pred, eg_loss_categorical_crossentropy(y_true, wide, from_logits, reduction));
    if (!eg__check_arg(y_true, name, 0) || !eg__check_arg(y_pred, name, 1) ||
        !check_reduction(name, reduction) || !check_pred(name, y_pred, 1))
        return NULL;
    if (!same_shape(y_true, y_pred)) {
        shape_error(name, "shapes differ", y_true, y_pred);
        return NULL;
    }
    eg__temps temps = {0};
    eg_tensor *per_sample = NULL;
    const eg_tensor *target = as_pred_dtype(&temps, y_true, y_pred);
    int axis = -1;
    eg_tensor *log_p = from_logits
                           ? eg__temp(&temps, eg_log_softmax(y_pred, -1))
                           : eg__temp(&temps, eg_log(normalized_probabilities(&temps, y_pred)));
    eg_tensor *product = target && log_p ? eg__temp(&temps, eg_mul(target, log_p)) : NULL;
    eg_tensor *sum = eg__temp(&temps, eg_sum(product, 1, &axis, false));
    if (sum) per_sample = eg_neg(sum);
    eg__temps_release(&temps);
    return reduce(per_sample, reduction);
}

eg_tensor *eg_loss_binary_crossentropy(const eg_tensor *y_true, const eg_tensor *y_pred,
                                       bool from_logits, eg_reduction reduction) {
    static const char *name = "binary_crossentropy";
    WIDEN_PREDICTIONS(y_pred, eg_loss_binary_crossentropy(y_true, wide, from_logits, reduction));
    if (!eg__check_arg(y_true, name, 0) || !eg__check_arg(y_pred, name, 1) ||
        !check_reduction(name, reduction) || !check_pred(name, y_pred, 0))
        return NULL;
    eg__temps temps = {0};
    eg_tensor *per_sample = NULL;
    const eg_tensor *z = as_pred_dtype(&temps, y_true, y_pred), *x = y_pred;
    if (!z) goto done;
    match_ranks(&temps, &z, &x);
    if (!z || !x) goto done;
    if (!same_shape(z, x)) {
        shape_error(name, "shapes differ", y_true, y_pred);
        goto done;
    }
    eg_tensor *loss;
    if (from_logits) {
        /* TF's sigmoid_cross_entropy_with_logits: relu(x) - x z + log(1 + exp(-|x|)), with the
         * relu and |x| written as where(x >= 0, ...) so the gradient at 0 is exact. */
        eg_tensor *zero = eg__temp(&temps, eg__full_on(x->device, x->dtype, 0, NULL, 0.0));
        eg_tensor *positive = eg__temp(&temps, eg_greater_equal(x, zero));
        eg_tensor *relu_x = eg__temp(&temps, eg_where(positive, x, zero));
        eg_tensor *neg_x = eg__temp(&temps, eg_neg(x));
        eg_tensor *neg_abs = eg__temp(&temps, eg_where(positive, neg_x, x));
        eg_tensor *xz = eg__temp(&temps, eg_mul(x, z));
        eg_tensor *diff = eg__temp(&temps, eg_sub(relu_x, xz));
        eg_tensor *soft = eg__temp(&temps, eg_softplus(neg_abs));
        loss = eg_add(diff, soft);
    } else {
        /* -(z log p + (1 - z) log(1 - p)), p clipped to [eps, 1 - eps] */
        eg_tensor *p = eg__temp(&temps, eg_clip(x, EPSILON, 1.0 - EPSILON));
        eg_tensor *log_p = eg__temp(&temps, eg_log(p));
        eg_tensor *one_minus_p = eg__temp(&temps, eg_add_scalar(eg__temp(&temps, eg_neg(p)), 1.0));
        eg_tensor *log_q = eg__temp(&temps, eg_log(one_minus_p));
        eg_tensor *one_minus_z = eg__temp(&temps, eg_add_scalar(eg__temp(&temps, eg_neg(z)), 1.0));
        eg_tensor *a = eg__temp(&temps, eg_mul(z, log_p));
        eg_tensor *b = eg__temp(&temps, eg_mul(one_minus_z, log_q));
        eg_tensor *sum = eg__temp(&temps, eg_add(a, b));
        loss = eg_neg(sum);
    }
    per_sample = mean_last(loss);
done:
    eg__temps_release(&temps);
    return reduce(per_sample, reduction);
}

typedef enum { REGRESSION_MSE, REGRESSION_MAE, REGRESSION_HUBER } regression_kind;

static eg_tensor *regression_loss(const char *name, regression_kind kind, const eg_tensor *y_true,
                                  const eg_tensor *y_pred, double delta, eg_reduction reduction) {
    WIDEN_PREDICTIONS(y_pred, regression_loss(name, kind, y_true, wide, delta, reduction));
    if (!eg__check_arg(y_true, name, 0) || !eg__check_arg(y_pred, name, 1) ||
        !check_reduction(name, reduction) || !check_pred(name, y_pred, 0))
        return NULL;
    if (kind == REGRESSION_HUBER && !(delta > 0 && isfinite(delta))) {
        eg__error(EG_ERR_INVALID_ARGUMENT, "%s: delta must be > 0, got %g", name, delta);
        return NULL;
    }
    eg__temps temps = {0};
    eg_tensor *per_sample = NULL;
    const eg_tensor *target = as_pred_dtype(&temps, y_true, y_pred), *pred = y_pred;
    if (!target) goto done;
    match_ranks(&temps, &target, &pred);
    if (!target || !pred) goto done;
    if (!same_shape(target, pred)) {
        shape_error(name, "shapes differ", y_true, y_pred);
        goto done;
    }
    eg_tensor *error = eg__temp(&temps, eg_sub(pred, target));
    eg_tensor *loss = NULL;
    if (kind == REGRESSION_MSE) {
        loss = eg_square(error);
    } else if (kind == REGRESSION_MAE) {
        loss = eg_abs(error);
    } else {
        /* where(|e| <= delta, 0.5 e^2, delta |e| - 0.5 delta^2) */
        eg_tensor *abs_error = eg__temp(&temps, eg_abs(error));
        eg_tensor *limit = eg__temp(&temps, eg__full_on(pred->device, pred->dtype, 0, NULL, delta));
        eg_tensor *small = eg__temp(&temps, eg_less_equal(abs_error, limit));
        eg_tensor *quadratic =
            eg__temp(&temps, eg_mul_scalar(eg__temp(&temps, eg_square(error)), 0.5));
        eg_tensor *linear =
            eg__temp(&temps, eg_add_scalar(eg__temp(&temps, eg_mul_scalar(abs_error, delta)),
                                           -0.5 * delta * delta));
        loss = eg_where(small, quadratic, linear);
    }
    per_sample = mean_last(loss);
done:
    eg__temps_release(&temps);
    return reduce(per_sample, reduction);
}

eg_tensor *eg_loss_mean_squared_error(const eg_tensor *y_true, const eg_tensor *y_pred,
                                      eg_reduction reduction) {
    return regression_loss("mean_squared_error", REGRESSION_MSE, y_true, y_pred, 0, reduction);
}

eg_tensor *eg_loss_mean_absolute_error(const eg_tensor *y_true, const eg_tensor *y_pred,
                                       eg_reduction reduction) {
    return regression_loss("mean_absolute_error", REGRESSION_MAE, y_true, y_pred, 0, reduction);
}

eg_tensor *eg_loss_huber(const eg_tensor *y_true, const eg_tensor *y_pred, double delta,
                         eg_reduction reduction) {
    return regression_loss("huber", REGRESSION_HUBER, y_true, y_pred, delta, reduction);
}
