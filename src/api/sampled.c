/* Sampled products of eagle/approx.h (Drineas, Kannan and Mahoney's column-row sampling): A B
 * estimated from s of its L inner terms A[:, l] B[l, :], drawn with probability p_l proportional
 * to ||A[:, l]|| ||B[l, :]|| and each weighted 1 / (s p_l), so the estimate is unbiased and its
 * variance the smallest such a sample allows. Composed of recorded ops around sample_indices, so
 * it runs in every mode and on every device that has the ops; the product itself is Eagle's
 * matmul of the gathered (s-wide) operands. */
#include <math.h>
#include <string.h>

#include "api/internal.h"
#include "base/error.h"
#include "eagle/approx.h"

eg_tensor *eg_sample_indices(const eg_tensor *weights, int64_t count, eg_generator *generator) {
    if (!eg__check_arg(weights, "sample_indices", 0)) return NULL;
    eg__attrs attrs;
    memset(&attrs, 0, sizeof attrs);
    attrs.ints[0] = count;
    attrs.seed = eg_generator_next_seed(generator);
    const eg_tensor *in[1] = {weights};
    eg_tensor *indices = eg__execute(EG__OP_SAMPLE_INDICES, 1, in, &attrs);
    if (indices) eg__executor_current()->random_drawn(indices, generator);
    return indices;
}

/* sqrt(sum(t^2)) over `axis` of a 2-d t: (the other axis's length,). */
static eg_tensor *norms(eg__temps *temps, const eg_tensor *t, int axis) {
    eg_tensor *square = eg__temp(temps, eg_square(t));
    eg_tensor *sum = square ? eg__temp(temps, eg_sum(square, 1, &axis, false)) : NULL;
    return sum ? eg__temp(temps, eg_sqrt(sum)) : NULL;
}

eg_tensor *eg_matmul_sampled(const eg_tensor *a, const eg_tensor *b, bool transpose_a,
                             bool transpose_b, double fraction, eg_generator *generator) {
    static const char *what = "matmul_sampled";
    if (!eg__check_arg(a, what, 0) || !eg__check_arg(b, what, 1)) return NULL;
    if (a->n_dims != 2 || b->n_dims != 2) {
        eg__error(EG_ERR_SHAPE, "%s: takes 2-d a and b, got %d-d and %d-d", what, a->n_dims,
                  b->n_dims);
        return NULL;
    }
    if (!(fraction > 0 && fraction <= 1)) {
        eg__error(EG_ERR_INVALID_ARGUMENT, "%s: fraction %g is not in (0, 1]", what, fraction);
        return NULL;
    }
    int64_t inner = transpose_a ? a->shape[0] : a->shape[1];
    int64_t inner_b = transpose_b ? b->shape[1] : b->shape[0];
    if (inner != inner_b) {
        eg__error(EG_ERR_SHAPE, "%s: inner sizes %lld and %lld differ", what, (long long)inner,
                  (long long)inner_b);
        return NULL;
    }
    if (inner == 0) return eg_matmul_ex(a, b, transpose_a, transpose_b);
    int64_t count = (int64_t)ceil(fraction * (double)inner);
    if (count < 1) count = 1;
    eg__temps temps = {0};
    /* A = op(a)'s columns and B = op(b)'s rows are a's and b's rows or columns */
    int a_axis = transpose_a ? 1 : 0, b_axis = transpose_b ? 0 : 1;
    eg_tensor *na = norms(&temps, a, a_axis), *nb = na ? norms(&temps, b, b_axis) : NULL;
    eg_tensor *p = nb ? eg__temp(&temps, eg_mul(na, nb)) : NULL;
    eg_tensor *drawn = p ? eg__temp(&temps, eg_sample_indices(p, count, generator)) : NULL;
    /* weights total / (s p_l) for the drawn l; 0 where p_l = 0, drawn only when every p is 0
     * (then A B = 0: the estimate is exact) */
    eg_tensor *total = drawn ? eg__temp(&temps, eg_sum(p, 0, NULL, false)) : NULL;
    eg_tensor *p_drawn = total ? eg__temp(&temps, eg_gather(p, drawn, 0)) : NULL;
    eg_tensor *zero = p_drawn ? eg__temp(&temps, eg_full_like(p_drawn, 0)) : NULL;
    eg_tensor *one = zero ? eg__temp(&temps, eg_full_like(p_drawn, 1)) : NULL;
    eg_tensor *positive = one ? eg__temp(&temps, eg_greater(p_drawn, zero)) : NULL;
    eg_tensor *safe = positive ? eg__temp(&temps, eg_where(positive, p_drawn, one)) : NULL;
    eg_tensor *scaled = safe ? eg__temp(&temps, eg_mul_scalar(safe, (double)count)) : NULL;
    eg_tensor *ratio = scaled ? eg__temp(&temps, eg_div(total, scaled)) : NULL;
    eg_tensor *weight = ratio ? eg__temp(&temps, eg_where(positive, ratio, zero)) : NULL;
    /* the drawn terms, the weight applied to a's side */
    eg_tensor *a_drawn = weight ? eg__temp(&temps, eg_gather(a, drawn, transpose_a ? 0 : 1)) : NULL;
    eg_tensor *b_drawn =
        a_drawn ? eg__temp(&temps, eg_gather(b, drawn, transpose_b ? 1 : 0)) : NULL;
    int64_t column[2] = {count, 1};
    eg_tensor *w =
        b_drawn && transpose_a ? eg__temp(&temps, eg_reshape(weight, 2, column)) : weight;
    eg_tensor *a_weighted = w && b_drawn ? eg__temp(&temps, eg_mul(a_drawn, w)) : NULL;
    eg_tensor *product =
        a_weighted ? eg_matmul_ex(a_weighted, b_drawn, transpose_a, transpose_b) : NULL;
    eg__temps_release(&temps);
    return product;
}

eg_tensor *eg_dense_sampled(const eg_tensor *x, const eg_tensor *kernel, const eg_tensor *bias,
                            eg_activation activation, double fraction, bool sample_input_gradient) {
    if (!eg__check_arg(x, "dense", 0) || !eg__check_arg(kernel, "dense", 1) ||
        !eg__check_arg(bias, "dense", 2))
        return NULL;
    if (!(fraction > 0 && fraction <= 1)) {
        eg__error(EG_ERR_INVALID_ARGUMENT, "dense_sampled: fraction %g is not in (0, 1]", fraction);
        return NULL;
    }
    eg__attrs attrs;
    memset(&attrs, 0, sizeof attrs);
    attrs.ints[0] = (int64_t)activation;
    /* read by the backward rule only (autograd/backward.c): the forward is eg_dense's */
    attrs.scalars[1] = fraction;
    attrs.ints[1] = sample_input_gradient ? 2 : 1;
    attrs.fast_math = eg_fast_math_enabled();
    const eg_tensor *in[3] = {x, kernel, bias};
    return eg__execute(EG__OP_DENSE, 3, in, &attrs);
}
