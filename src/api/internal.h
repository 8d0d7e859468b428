/* Internal: helpers the public op builders share with the backward rules above them. */
#ifndef EAGLE_SRC_API_INTERNAL_H
#define EAGLE_SRC_API_INTERNAL_H

#include "exec/executor.h"

/* attrs->window (and nothing else: the rest zeroed) for a 2-d convolution of an x_shape image
 * (4-d, in options' data format) with a filter_shape filter, or a pooling of an x_shape image:
 * defaults filled in, SAME padding resolved. false with an error naming `name` for bad options. */
bool eg__conv2d_attrs(eg__attrs *attrs, const eg_conv2d_options *options, const int64_t *x_shape,
                      const int64_t *filter_shape, const char *name);
bool eg__pool2d_attrs(eg__attrs *attrs, const eg_pool2d_options *options, const int64_t *x_shape,
                      const char *name);

/* A collective op's attributes: the replica's member handle and the next tag of its group (*tag
 * gets it when not NULL). */
eg__attrs eg__collective_attrs(int64_t member, int64_t *tag);

/* The reduction of g (broadcast result) back to n_dims/shape: sums over broadcast axes. */
eg_tensor *eg__sum_to_shape(const eg_tensor *g, int n_dims, const int64_t *shape);

/* Row-sparse tensors (row_sparse.c). a + b where one or both are row-sparse (same dense shape
 * and dtype): row-sparse when both are (their rows listed together), else dense. */
eg_tensor *eg__row_sparse_sum(const eg_tensor *a, const eg_tensor *b);
/* t (row-sparse, f32/f64, on the CPU) with each row once, in ascending order, its values summed
 * in lookup order (so a row has the bits of the dense gradient's): a new row-sparse tensor,
 * NULL with an error (a row index out of range, another device). */
eg_tensor *eg__row_sparse_coalesce(const eg_tensor *t);

#endif
