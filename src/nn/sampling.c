/* Sampling the next token from logits (text generation): temperature, top-k, greedy. On the host:
 * one row of logits per sequence is small, and the draw must be the generator's, in row order,
 * so that a seed gives the same text on every device and thread count. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "nn/internal.h"

/* The k-th largest of v[0..n) (k >= 1), by partial selection on a copy. */
static double kth_largest(const double *v, int64_t n, int64_t k, double *scratch) {
    memcpy(scratch, v, sizeof *scratch * (size_t)n);
    int64_t lo = 0, hi = n - 1, want = k - 1;
    while (lo < hi) { /* quickselect, descending */
        double pivot = scratch[(lo + hi) / 2];
        int64_t i = lo, j = hi;
        while (i <= j) {
            while (scratch[i] > pivot) i++;
            while (scratch[j] < pivot) j--;
            if (i <= j) {
                double t = scratch[i];
                scratch[i++] = scratch[j];
                scratch[j--] = t;
            }
        }
        if (want <= j)
            hi = j;
        else if (want >= i)
            lo = i;
        else
            break;
    }
    return scratch[want];
}

eg_tensor *eg_sample_logits(const eg_tensor *logits, double temperature, int64_t top_k,
                            eg_generator *generator) {
    if (!eg__check_arg(logits, "sample_logits", 1)) return NULL;
    if (logits->n_dims != 2 || logits->shape[1] < 1 || !eg_dtype_is_float(logits->dtype)) {
        char buf[96];
        eg__error(EG_ERR_SHAPE,
                  "sample_logits: logits must be float (batch, vocabulary), got %s %s",
                  eg_dtype_name(logits->dtype),
                  eg__shape_format(logits->n_dims, logits->shape, buf, sizeof buf));
        return NULL;
    }
    if (!(temperature >= 0) || !isfinite(temperature) || top_k < 0) {
        eg__error(EG_ERR_INVALID_ARGUMENT,
                  "sample_logits: temperature must be finite and >= 0, top_k >= 0 (got %g, %lld)",
                  temperature, (long long)top_k);
        return NULL;
    }
    int64_t rows = logits->shape[0], n = logits->shape[1];
    eg_tensor *wide = eg_cast(logits, EG_DTYPE_F64);
    eg_tensor *draws = temperature > 0 ? eg_random_uniform(generator, EG_DTYPE_F64, 1, &rows, 0, 1)
                                       : eg_zeros(EG_DTYPE_F64, 1, &rows);
    double *v = malloc(sizeof *v * (size_t)(rows * n + n + rows));
    int64_t *ids = malloc(sizeof *ids * (size_t)(rows ? rows : 1));
    eg_tensor *out = NULL;
    if (wide && draws && v && ids &&
        eg_tensor_copy_to_host(wide, v, sizeof *v * (size_t)(rows * n)) == EG_OK &&
        eg_tensor_copy_to_host(draws, v + rows * n + n, sizeof *v * (size_t)rows) == EG_OK) {
        double *scratch = v + rows * n, *u = scratch + n;
        for (int64_t r = 0; r < rows; r++) {
            const double *row = v + r * n;
            int64_t best = 0;
            for (int64_t j = 1; j < n; j++) best = row[j] > row[best] ? j : best;
            ids[r] = best;
            if (temperature == 0) continue; /* greedy */
            double floor = top_k > 0 && top_k < n ? kth_largest(row, n, top_k, scratch) : -INFINITY;
            double total = 0;
            for (int64_t j = 0; j < n; j++)
                total += row[j] >= floor ? exp((row[j] - row[best]) / temperature) : 0;
            double target = u[r] * total, running = 0;
            for (int64_t j = 0; j < n; j++) {
                if (row[j] < floor) continue;
                running += exp((row[j] - row[best]) / temperature);
                ids[r] = j;
                if (running > target) break;
            }
        }
        out = eg_tensor_from_data(ids, EG_DTYPE_I64, 1, &rows);
    } else if (!eg__error_pending()) {
        eg__error(EG_ERR_OUT_OF_MEMORY, "sample_logits: out of host memory");
    }
    free(v);
    free(ids);
    eg_release(wide);
    eg_release(draws);
    return out;
}
