/* Initializers: Keras' formulas for filling new variables, drawn from an eg_generator. */
#include <math.h>
#include <stdlib.h>

#include "nn/internal.h"

static const char *const initializer_names[EG_INITIALIZER_COUNT] = {
    [EG_INITIALIZER_GLOROT_UNIFORM] = "glorot_uniform",
    [EG_INITIALIZER_GLOROT_NORMAL] = "glorot_normal",
    [EG_INITIALIZER_HE_NORMAL] = "he_normal",
    [EG_INITIALIZER_HE_UNIFORM] = "he_uniform",
    [EG_INITIALIZER_ZEROS] = "zeros",
    [EG_INITIALIZER_ONES] = "ones",
    [EG_INITIALIZER_CONSTANT] = "constant",
    [EG_INITIALIZER_RANDOM_NORMAL] = "random_normal",
    [EG_INITIALIZER_RANDOM_UNIFORM] = "random_uniform",
    [EG_INITIALIZER_ORTHOGONAL] = "orthogonal",
};

const char *eg_initializer_name(eg_initializer_kind kind) {
    return (unsigned)kind < EG_INITIALIZER_COUNT ? initializer_names[kind] : "invalid";
}

eg_initializer eg_initializer_of(eg_initializer_kind kind) {
    eg_initializer init = {.kind = kind, .stddev = 0.05, .minval = -0.05, .maxval = 0.05};
    return init;
}

eg_initializer eg_initializer_constant(double value) {
    eg_initializer init = eg_initializer_of(EG_INITIALIZER_CONSTANT);
    init.value = value;
    return init;
}

eg_initializer eg_initializer_random_normal(double mean, double stddev) {
    eg_initializer init = eg_initializer_of(EG_INITIALIZER_RANDOM_NORMAL);
    init.mean = mean;
    init.stddev = stddev;
    return init;
}

eg_initializer eg_initializer_random_uniform(double minval, double maxval) {
    eg_initializer init = eg_initializer_of(EG_INITIALIZER_RANDOM_UNIFORM);
    init.minval = minval;
    init.maxval = maxval;
    return init;
}

/* Keras' compute_fans. */
static void compute_fans(int n_dims, const int64_t *shape, double *fan_in, double *fan_out) {
    if (n_dims == 0) {
        *fan_in = *fan_out = 1;
    } else if (n_dims == 1) {
        *fan_in = *fan_out = (double)shape[0];
    } else if (n_dims == 2) {
        *fan_in = (double)shape[0];
        *fan_out = (double)shape[1];
    } else {
        double receptive = 1;
        for (int d = 0; d < n_dims - 2; d++) receptive *= (double)shape[d];
        *fan_in = (double)shape[n_dims - 2] * receptive;
        *fan_out = (double)shape[n_dims - 1] * receptive;
    }
}

/* Normal with the given stddev, values beyond 2 stddev drawn again (in order, from the same
 * generator, so the result depends only on the seed). */
static eg_tensor *truncated_normal(eg_generator *generator, eg_dtype dtype, int n_dims,
                                   const int64_t *shape, double stddev) {
    eg_tensor *out = eg__tensor_alloc(dtype, n_dims, shape, NULL);
    if (!out) return NULL;
    eg__staging staging; /* drawn on the host, then copied where `out` lives */
    void *data = eg__staging_begin(out, &staging);
    if (!data) {
        eg_release(out);
        return NULL;
    }
    int64_t n = out->n_elems, filled = 0;
    eg__scope_suspend();
    eg_device_scope_begin(eg_device_cpu());
    while (filled < n) {
        int64_t want = n - filled;
        eg_tensor *z = eg_random_normal(generator, EG_DTYPE_F64, 1, &want, 0.0, 1.0);
        if (!z) break;
        const double *values = eg__data(z);
        for (int64_t i = 0; i < want; i++)
            if (fabs(values[i]) <= 2.0)
                eg__store_from_double(data, dtype, filled++, values[i] * stddev);
        eg__unref(z);
    }
    eg_device_scope_end();
    eg__scope_resume();
    eg_status copied = eg__staging_finish(out, &staging);
    if (filled < n || copied != EG_OK) {
        eg_release(out);
        return NULL;
    }
    return out;
}

/* An orthogonal matrix as Keras' Orthogonal makes it: the shape flattened to (rows, cols), cols
 * its last dim; a standard normal (n, k) draw, n = max, k = min of the two, orthonormalized
 * column by column (modified Gram-Schmidt in double: the Q of its QR decomposition with R's
 * diagonal positive, which is Keras' sign fix), transposed when rows < cols. */
static eg_tensor *orthogonal(eg_generator *generator, eg_dtype dtype, int n_dims,
                             const int64_t *shape) {
    if (n_dims < 2) {
        eg__error(EG_ERR_SHAPE, "initializer_generate: orthogonal needs at least 2 dims, got %d",
                  n_dims);
        return NULL;
    }
    int64_t cols = shape[n_dims - 1], rows = eg__shape_n_elems(n_dims, shape) / (cols ? cols : 1);
    if (rows == 0 || cols == 0) return eg_zeros(dtype, n_dims, shape);
    int64_t n = rows > cols ? rows : cols, k = rows > cols ? cols : rows;
    eg_tensor *out = eg__tensor_alloc(dtype, n_dims, shape, NULL);
    if (!out) return NULL;
    eg__staging staging;
    void *data = eg__staging_begin(out, &staging);
    if (!data) {
        eg_release(out);
        return NULL;
    }
    eg__scope_suspend();
    eg_device_scope_begin(eg_device_cpu());
    int64_t draw_shape[2] = {n, k};
    eg_tensor *draw = eg_random_normal(generator, EG_DTYPE_F64, 2, draw_shape, 0.0, 1.0);
    double *q = draw ? malloc(sizeof *q * (size_t)(n * k)) : NULL;
    bool ok = q != NULL;
    if (ok) {
        /* column-major: each of the k vectors contiguous, so every dot product and update
         * streams through memory */
        const double *a = eg__data(draw); /* row-major (n, k) */
        for (int64_t i = 0; i < n; i++)
            for (int64_t j = 0; j < k; j++) q[j * n + i] = a[i * k + j];
        for (int64_t j = 0; j < k && ok; j++) {
            double *col = q + j * n;
            for (int64_t p = 0; p < j; p++) {
                const double *prev = q + p * n;
                double dot = 0;
                for (int64_t i = 0; i < n; i++) dot += prev[i] * col[i];
                for (int64_t i = 0; i < n; i++) col[i] -= dot * prev[i];
            }
            double norm = 0;
            for (int64_t i = 0; i < n; i++) norm += col[i] * col[i];
            norm = sqrt(norm);
            ok = norm > 0; /* a draw of measure zero */
            for (int64_t i = 0; ok && i < n; i++) col[i] /= norm;
        }
        for (int64_t r = 0; ok && r < rows; r++)
            for (int64_t c = 0; c < cols; c++)
                eg__store_from_double(data, dtype, r * cols + c,
                                      rows >= cols ? q[c * n + r] : q[r * n + c]);
    }
    free(q);
    eg__unref(draw);
    eg_device_scope_end();
    eg__scope_resume();
    eg_status copied = eg__staging_finish(out, &staging);
    if (!ok || copied != EG_OK) {
        if (!ok && !eg__error_pending())
            eg__error(EG_ERR_OUT_OF_MEMORY, "initializer_generate: orthogonal: out of host memory");
        eg_release(out);
        return NULL;
    }
    return out;
}

/* sqrt(var) / .879...: the stddev of the underlying normal whose 2-sigma truncation has
 * variance var (Keras' VarianceScaling constant). */
#define TRUNCATED_STDDEV_FACTOR 0.87962566103423978

eg_tensor *eg_initializer_generate(const eg_initializer *init, eg_generator *generator,
                                   eg_dtype dtype, int n_dims, const int64_t *shape) {
    if (!init) {
        eg__error(EG_ERR_NULL_ARGUMENT, "initializer_generate: initializer is NULL");
        return NULL;
    }
    if (!eg_dtype_is_float(dtype)) {
        eg__error(EG_ERR_DTYPE, "initializer_generate: dtype must be a float type, got %s",
                  eg_dtype_name(dtype));
        return NULL;
    }
    if (n_dims < 0 || n_dims > EG_MAX_DIMS || (n_dims > 0 && !shape) ||
        eg__shape_n_elems(n_dims, shape) < 0) {
        eg__error(EG_ERR_SHAPE, "initializer_generate: invalid shape (%d dims)", n_dims);
        return NULL;
    }
    double fan_in, fan_out;
    compute_fans(n_dims, shape, &fan_in, &fan_out);
    /* Keras' VarianceScaling: glorot is scale 1, mode fan_avg; he is scale 2, mode fan_in. */
    bool is_he = init->kind == EG_INITIALIZER_HE_NORMAL || init->kind == EG_INITIALIZER_HE_UNIFORM;
    double variance = is_he ? 2.0 / fmax(1.0, fan_in) : 1.0 / fmax(1.0, (fan_in + fan_out) / 2.0);
    switch (init->kind) {
    case EG_INITIALIZER_GLOROT_UNIFORM:
    case EG_INITIALIZER_HE_UNIFORM: {
        double limit = sqrt(3.0 * variance);
        return eg_random_uniform(generator, dtype, n_dims, shape, -limit, limit);
    }
    case EG_INITIALIZER_GLOROT_NORMAL:
    case EG_INITIALIZER_HE_NORMAL:
        return truncated_normal(generator, dtype, n_dims, shape,
                                sqrt(variance) / TRUNCATED_STDDEV_FACTOR);
    case EG_INITIALIZER_ZEROS:
        return eg_zeros(dtype, n_dims, shape);
    case EG_INITIALIZER_ONES:
        return eg_ones(dtype, n_dims, shape);
    case EG_INITIALIZER_CONSTANT:
        if (!isfinite(init->value)) break;
        return eg_full(dtype, n_dims, shape, init->value);
    case EG_INITIALIZER_RANDOM_NORMAL:
        if (!isfinite(init->mean) || !(init->stddev >= 0) || !isfinite(init->stddev)) break;
        return eg_random_normal(generator, dtype, n_dims, shape, init->mean, init->stddev);
    case EG_INITIALIZER_RANDOM_UNIFORM:
        if (!isfinite(init->minval) || !isfinite(init->maxval) || !(init->minval < init->maxval))
            break;
        return eg_random_uniform(generator, dtype, n_dims, shape, init->minval, init->maxval);
    case EG_INITIALIZER_ORTHOGONAL:
        return orthogonal(generator, dtype, n_dims, shape);
    default:
        eg__error(EG_ERR_INVALID_ARGUMENT, "initializer_generate: invalid initializer kind %d",
                  (int)init->kind);
        return NULL;
    }
    eg__error(EG_ERR_INVALID_ARGUMENT,
              "initializer_generate: invalid parameters for %s (value %g, mean %g, stddev %g, "
              "minval %g, maxval %g)",
              eg_initializer_name(init->kind), init->value, init->mean, init->stddev, init->minval,
              init->maxval);
    return NULL;
}
