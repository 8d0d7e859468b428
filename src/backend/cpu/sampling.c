/* CPU sample_indices: s draws from the distribution w / sum(w) by systematic sampling: one
 * uniform u (the 53-bit uniform of Philox block 0, words 0 and 1, under the op's seed, stream 3;
 * dropout's is 2) and the draw t at the point (u + t) / s of the running sum, found by binary
 * search. Each index l is drawn s p_l times in expectation, within one of it, so weights
 * 1 / (s p_l) keep a product unbiased with far less variance than independent draws give (an
 * index of large weight is drawn almost surely, a fixed number of times). The draws are a pure
 * function of (seed, w): the same in every mode and at every thread count. */
#include <math.h>
#include <stdlib.h>

#include "backend/cpu/kernels.h"
#include "base/error.h"
#include "core/random.h"

enum { SAMPLE_STREAM = 3 };

eg_status eg__cpu_sample_indices(const eg__kernel_call *call);
eg_status eg__cpu_sample_indices(const eg__kernel_call *call) {
    const eg_tensor *w = call->inputs[0];
    int64_t n = w->shape[0], stride = w->strides[0], draws = call->output->n_elems;
    double *cumulative = malloc(sizeof(double) * (size_t)n);
    if (!cumulative) return eg__error(EG_ERR_OUT_OF_MEMORY, "sample_indices: out of host memory");
    const char *base = eg__data(w);
    double total = 0;
    for (int64_t l = 0; l < n; l++) {
        double v = w->dtype == EG_DTYPE_F64 ? ((const double *)base)[l * stride]
                                            : ((const float *)base)[l * stride];
        if (!(v >= 0) || isinf(v)) {
            free(cumulative);
            return eg__op_error(call->op, EG_ERR_INVALID_ARGUMENT,
                                "weight %lld is %g; weights must be finite and >= 0", (long long)l,
                                v);
        }
        total += v;
        cumulative[l] = total;
    }
    int64_t *out = eg__data(call->output);
    uint32_t words[4];
    eg__philox4x32(call->attrs->seed, SAMPLE_STREAM, 0, words);
    double start = eg__uniform_f64(words[0], words[1]);
    for (int64_t t = 0; t < draws; t++) {
        double u = (start + (double)t) / (double)draws; /* in [0, 1) */
        if (total <= 0) { /* no weight anywhere: uniform */
            int64_t l = (int64_t)(u * (double)n);
            out[t] = l < n ? l : n - 1;
            continue;
        }
        /* the first l with cumulative[l] > u * total: a zero weight is never drawn */
        double target = u * total;
        int64_t lo = 0, hi = n - 1;
        while (lo < hi) {
            int64_t mid = lo + (hi - lo) / 2;
            if (cumulative[mid] > target)
                hi = mid;
            else
                lo = mid + 1;
        }
        /* u * total may round up to total: then the last positive weight */
        while (lo > 0 && cumulative[lo] == cumulative[lo - 1]) lo--;
        out[t] = lo;
    }
    free(cumulative);
    return EG_OK;
}
