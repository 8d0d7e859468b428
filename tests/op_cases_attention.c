/* The fused attention's op cases (rows in op_cases.c's table): the calls into Eagle and plain-C
 * references that materialize the scores, computed in doubles. p[0]: causal; p[1]: the last
 * input is the key mask; d[0]: the scale (0: 1 / sqrt(D)). */
#include <math.h>

#include "api/internal.h"
#include "op_reference.h"

typedef struct dims {
    int64_t b, n, tq, tk, d, dv;
} dims;

static dims dims_of(const oc_ref *in) {
    dims s = {in[0].shape[0], in[0].shape[1], in[0].shape[2],
              in[1].shape[2], in[0].shape[3], in[2].shape[3]};
    return s;
}

static double scale_of(const oc_case *c, const dims *s) {
    return c->d[0] > 0 ? c->d[0] : 1.0 / sqrt((double)s->d);
}

static bool visible(const oc_case *c, const oc_ref *mask, const dims *s, int64_t b, int64_t i,
                    int64_t j) {
    return (!c->p[0] || j <= i) && (!c->p[1] || mask->data[b * s->tk + j] != 0);
}

/* The scaled score of query i and key j of head (b, n). */
static double score(const oc_ref *in, const dims *s, double scale, int64_t bh, int64_t i,
                    int64_t j) {
    double sum = 0;
    for (int64_t e = 0; e < s->d; e++)
        sum += in[0].data[(bh * s->tq + i) * s->d + e] * in[1].data[(bh * s->tk + j) * s->d + e];
    return scale * sum;
}

int oc_apply_attention(const oc_case *c, eg_tensor *const *in, eg_tensor **out) {
    out[0] = eg_scaled_dot_product_attention(in[0], in[1], in[2], c->p[1] ? in[3] : NULL,
                                             c->p[0] != 0, c->d[0]);
    return out[0] ? 1 : -1;
}

int oc_apply_attention_backward(const oc_case *c, eg_tensor *const *in, eg_tensor **out) {
    eg__attrs attrs = {.scalars = {c->d[0]}, .ints = {c->p[0]}};
    out[0] =
        eg__execute(EG__OP_ATTENTION_BACKWARD, oc_case_n_inputs(c), eg__const_tensors(in), &attrs);
    return out[0] ? 1 : -1;
}

int oc_ref_attention(const oc_case *c, const oc_ref *in, oc_ref *out) {
    dims s = dims_of(in);
    double scale = scale_of(c, &s);
    const oc_ref *mask = c->p[1] ? &in[3] : NULL;
    oc_ref_init(&out[0], in[0].dtype, 4, (const int64_t[]){s.b, s.n, s.tq, s.dv});
    for (int64_t bh = 0; bh < s.b * s.n; bh++)
        for (int64_t i = 0; i < s.tq; i++) {
            double m = -INFINITY, sum = 0, w[OC_MAX_ELEMS];
            for (int64_t j = 0; j < s.tk; j++)
                if (visible(c, mask, &s, bh / s.n, i, j)) {
                    double v = score(in, &s, scale, bh, i, j);
                    m = v > m ? v : m;
                }
            for (int64_t j = 0; j < s.tk; j++) {
                w[j] = visible(c, mask, &s, bh / s.n, i, j)
                           ? exp(score(in, &s, scale, bh, i, j) - m)
                           : 0;
                sum += w[j];
            }
            for (int64_t e = 0; e < s.dv; e++) {
                double o = 0;
                for (int64_t j = 0; j < s.tk; j++)
                    o += w[j] * in[2].data[(bh * s.tk + j) * s.dv + e];
                out[0].data[(bh * s.tq + i) * s.dv + e] = sum > 0 ? o / sum : 0;
            }
        }
    return 1;
}

/* The fused backward of ops.def on its inputs as given (whatever the forward result holds):
 * p = exp(s - L) where visible, delta = rowsum(G o), ds = p (G v^T - delta). */
int oc_ref_attention_backward(const oc_case *c, const oc_ref *in, oc_ref *out) {
    dims s = dims_of(in);
    double scale = c->d[0];
    const oc_ref *fwd = &in[3], *g = &in[4], *mask = c->p[1] ? &in[5] : NULL;
    int64_t rows = s.b * s.n * s.tq, nq = rows * s.d, nk = s.b * s.n * s.tk * s.d;
    oc_ref_init(&out[0], in[0].dtype, 1, (const int64_t[]){nq + nk + s.b * s.n * s.tk * s.dv});
    double *dq = out[0].data, *dk = dq + nq, *dv = dk + nk;
    for (int64_t bh = 0; bh < s.b * s.n; bh++)
        for (int64_t i = 0; i < s.tq; i++) {
            int64_t row = bh * s.tq + i;
            double lse = fwd->data[rows * s.dv + row], delta = 0;
            for (int64_t e = 0; e < s.dv; e++)
                delta += g->data[row * s.dv + e] * fwd->data[row * s.dv + e];
            for (int64_t j = 0; j < s.tk; j++) {
                if (!visible(c, mask, &s, bh / s.n, i, j)) continue;
                int64_t key = bh * s.tk + j;
                double p = exp(score(in, &s, scale, bh, i, j) - lse), dp = 0;
                for (int64_t e = 0; e < s.dv; e++) {
                    dv[key * s.dv + e] += p * g->data[row * s.dv + e];
                    dp += g->data[row * s.dv + e] * in[2].data[key * s.dv + e];
                }
                double ds = p * (dp - delta) * scale;
                for (int64_t e = 0; e < s.d; e++) {
                    dq[row * s.d + e] += ds * in[1].data[key * s.d + e];
                    dk[key * s.d + e] += ds * in[0].data[row * s.d + e];
                }
            }
        }
    return 1;
}
