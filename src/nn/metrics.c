/* Metrics: per-sample accuracies (never recorded on tapes) and a running mean. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "nn/internal.h"

static bool same_shape(const eg_tensor *a, const eg_tensor *b) {
    return a->n_dims == b->n_dims &&
           (a->n_dims == 0 || !memcmp(a->shape, b->shape, (size_t)a->n_dims * sizeof(int64_t)));
}

static bool is_integer(eg_dtype dtype) {
    return dtype == EG_DTYPE_I32 || dtype == EG_DTYPE_I64 || dtype == EG_DTYPE_U8;
}

/* 1.0f where a == b, shaped like them; NULL with an error. Integers are compared as integers,
 * the narrower cast to i64 where the two differ (exact, as their f64 casts are for the class
 * indices that labels hold: two ops fewer in every training step's accuracy); anything else is
 * compared as f64. */
static eg_tensor *hits(const char *name, eg__temps *temps, const eg_tensor *a, const eg_tensor *b) {
    if (!a || !b) return NULL;
    if (!same_shape(a, b)) {
        char sa[160], sb[160];
        eg__error(EG_ERR_SHAPE, "%s: labels %s do not match predictions %s", name,
                  eg__shape_format(a->n_dims, a->shape, sa, sizeof sa),
                  eg__shape_format(b->n_dims, b->shape, sb, sizeof sb));
        return NULL;
    }
    eg_tensor *equal;
    if (is_integer(a->dtype) && is_integer(b->dtype)) {
        eg_dtype common = a->dtype == b->dtype ? a->dtype : EG_DTYPE_I64;
        const eg_tensor *a_common = a->dtype == common ? a : eg__temp(temps, eg_cast(a, common));
        const eg_tensor *b_common = b->dtype == common ? b : eg__temp(temps, eg_cast(b, common));
        equal = eg__temp(temps, eg_equal(a_common, b_common));
    } else {
        eg_tensor *a64 = eg__temp(temps, eg_cast(a, EG_DTYPE_F64));
        eg_tensor *b64 = eg__temp(temps, eg_cast(b, EG_DTYPE_F64));
        equal = eg__temp(temps, eg_equal(a64, b64));
    }
    return equal ? eg_cast(equal, EG_DTYPE_F32) : NULL;
}

/* labels with a trailing size-1 axis dropped when they have as many dims as predictions. */
static const eg_tensor *squeeze_labels(eg__temps *temps, const eg_tensor *labels,
                                       const eg_tensor *predictions) {
    if (labels->n_dims == predictions->n_dims && labels->n_dims > 0 &&
        labels->shape[labels->n_dims - 1] == 1)
        return eg__temp(temps, eg_squeeze(labels, -1));
    return labels;
}

static bool check_classes(const char *name, const eg_tensor *predictions) {
    if (predictions->n_dims >= 1 && predictions->shape[predictions->n_dims - 1] >= 1) return true;
    eg__error(EG_ERR_SHAPE, "%s: predictions need a non-empty last (class) axis", name);
    return false;
}

eg_tensor *eg_metric_accuracy(const eg_tensor *labels, const eg_tensor *predictions) {
    static const char *name = "metric_accuracy";
    if (!eg__check_arg(labels, name, 0) || !eg__check_arg(predictions, name, 1)) return NULL;
    eg__temps temps = {0};
    eg_no_grad_begin();
    const eg_tensor *predicted = predictions;
    if (predictions->n_dims == labels->n_dims + 1)
        predicted = check_classes(name, predictions)
                        ? eg__temp(&temps, eg_argmax(predictions, -1, false))
                        : NULL;
    eg_tensor *out = hits(name, &temps, labels, predicted);
    eg_no_grad_end();
    eg__temps_release(&temps);
    return out;
}

eg_tensor *eg_metric_sparse_categorical_accuracy(const eg_tensor *labels,
                                                 const eg_tensor *predictions) {
    static const char *name = "metric_sparse_categorical_accuracy";
    if (!eg__check_arg(labels, name, 0) || !eg__check_arg(predictions, name, 1) ||
        !check_classes(name, predictions))
        return NULL;
    eg__temps temps = {0};
    eg_no_grad_begin();
    const eg_tensor *target = squeeze_labels(&temps, labels, predictions);
    eg_tensor *predicted = eg__temp(&temps, eg_argmax(predictions, -1, false));
    eg_tensor *out = hits(name, &temps, target, predicted);
    eg_no_grad_end();
    eg__temps_release(&temps);
    return out;
}

eg_tensor *eg_metric_categorical_accuracy(const eg_tensor *y_true, const eg_tensor *predictions) {
    static const char *name = "metric_categorical_accuracy";
    if (!eg__check_arg(y_true, name, 0) || !eg__check_arg(predictions, name, 1) ||
        !check_classes(name, predictions))
        return NULL;
    if (!same_shape(y_true, predictions)) {
        char sa[160], sb[160];
        eg__error(EG_ERR_SHAPE, "%s: y_true %s does not match predictions %s", name,
                  eg__shape_format(y_true->n_dims, y_true->shape, sa, sizeof sa),
                  eg__shape_format(predictions->n_dims, predictions->shape, sb, sizeof sb));
        return NULL;
    }
    eg__temps temps = {0};
    eg_no_grad_begin();
    eg_tensor *expected = eg__temp(&temps, eg_argmax(y_true, -1, false));
    eg_tensor *predicted = eg__temp(&temps, eg_argmax(predictions, -1, false));
    eg_tensor *out = hits(name, &temps, expected, predicted);
    eg_no_grad_end();
    eg__temps_release(&temps);
    return out;
}

/* ---- running mean ---- */

void eg_metric_mean_reset(eg_metric_mean *metric) {
    if (metric) metric->total = metric->count = 0;
}

eg_status eg_metric_mean_add(eg_metric_mean *metric, double value, double weight) {
    if (!metric) return eg__error(EG_ERR_NULL_ARGUMENT, "metric_mean_add: metric is NULL");
    if (!(weight >= 0) || !isfinite(weight))
        return eg__error(EG_ERR_INVALID_ARGUMENT,
                         "metric_mean_add: weight must be finite and "
                         ">= 0, got %g",
                         weight);
    metric->total += value * weight;
    metric->count += weight;
    return EG_OK;
}

eg_status eg_metric_mean_update(eg_metric_mean *metric, const eg_tensor *values) {
    if (!metric) return eg__error(EG_ERR_NULL_ARGUMENT, "metric_mean_update: metric is NULL");
    if (!eg__check_arg(values, "metric_mean_update", 1)) return eg_last_status();
    eg_no_grad_begin();
    eg__scope_suspend();
    eg_tensor *wide = eg_cast(values, EG_DTYPE_F64); /* contiguous */
    int64_t n = wide ? wide->n_elems : 0;
    /* read back to the host (from a GPU: a synchronization, as reading any value is) */
    double *data = wide && n > 0 ? malloc((size_t)n * sizeof *data) : NULL;
    bool ok = wide && (n == 0 || (data && eg_tensor_copy_to_host(wide, data,
                                                                 (size_t)n * sizeof *data) == EG_OK));
    if (wide && n > 0 && !data) eg__error(EG_ERR_OUT_OF_MEMORY, "metric_mean_update: out of host memory");
    double total = 0;
    for (int64_t i = 0; ok && i < n; i++) total += data[i];
    free(data);
    eg__unref(wide);
    eg__scope_resume();
    eg_no_grad_end();
    if (!ok) return eg_last_status();
    metric->total += total;
    metric->count += (double)n;
    return EG_OK;
}

double eg_metric_mean_result(const eg_metric_mean *metric) {
    if (!metric || metric->count == 0) return 0.0;
    return metric->total / metric->count;
}
