/* Plain-C references of the op cases (op_reference.c, op_reference_nn.c). */
#ifndef EAGLE_TESTS_OP_REFERENCE_H
#define EAGLE_TESTS_OP_REFERENCE_H

#include "op_cases.h"

/* What storing v into a tensor of dtype keeps (round to nearest even, truncation for ints). */
double oc_convert(eg_dtype dtype, double v);

int oc_ref_unary(const oc_case *c, const oc_ref *in, oc_ref *out);
int oc_ref_binary(const oc_case *c, const oc_ref *in, oc_ref *out);
int oc_ref_where(const oc_case *c, const oc_ref *in, oc_ref *out);
int oc_ref_cast(const oc_case *c, const oc_ref *in, oc_ref *out);
int oc_ref_reduce(const oc_case *c, const oc_ref *in, oc_ref *out);
int oc_ref_arg_reduce(const oc_case *c, const oc_ref *in, oc_ref *out);
int oc_ref_softmax(const oc_case *c, const oc_ref *in, oc_ref *out);
int oc_ref_matmul(const oc_case *c, const oc_ref *in, oc_ref *out);
int oc_ref_dense(const oc_case *c, const oc_ref *in, oc_ref *out);
int oc_ref_reshape(const oc_case *c, const oc_ref *in, oc_ref *out);
int oc_ref_squeeze(const oc_case *c, const oc_ref *in, oc_ref *out);
int oc_ref_unsqueeze(const oc_case *c, const oc_ref *in, oc_ref *out);
int oc_ref_permute(const oc_case *c, const oc_ref *in, oc_ref *out);
int oc_ref_transpose(const oc_case *c, const oc_ref *in, oc_ref *out);
int oc_ref_slice(const oc_case *c, const oc_ref *in, oc_ref *out);
int oc_ref_split(const oc_case *c, const oc_ref *in, oc_ref *out);
int oc_ref_broadcast_to(const oc_case *c, const oc_ref *in, oc_ref *out);
int oc_ref_identity(const oc_case *c, const oc_ref *in, oc_ref *out);
int oc_ref_packed(const oc_case *c, const oc_ref *in, oc_ref *out);
int oc_ref_concat(const oc_case *c, const oc_ref *in, oc_ref *out);
int oc_ref_stack(const oc_case *c, const oc_ref *in, oc_ref *out);
int oc_ref_gather(const oc_case *c, const oc_ref *in, oc_ref *out);
int oc_ref_scatter_add(const oc_case *c, const oc_ref *in, oc_ref *out);
int oc_ref_unslice(const oc_case *c, const oc_ref *in, oc_ref *out);
int oc_ref_one_hot(const oc_case *c, const oc_ref *in, oc_ref *out);
int oc_ref_pad(const oc_case *c, const oc_ref *in, oc_ref *out);
int oc_ref_sparse_xent(const oc_case *c, const oc_ref *in, oc_ref *out);
int oc_ref_conv2d(const oc_case *c, const oc_ref *in, oc_ref *out);
int oc_ref_conv2d_transpose(const oc_case *c, const oc_ref *in, oc_ref *out);
int oc_ref_conv2d_backward_filter(const oc_case *c, const oc_ref *in, oc_ref *out);
int oc_ref_pool2d(const oc_case *c, const oc_ref *in, oc_ref *out);
int oc_ref_global_avg_pool2d(const oc_case *c, const oc_ref *in, oc_ref *out);
int oc_ref_upsample2d(const oc_case *c, const oc_ref *in, oc_ref *out);
int oc_ref_zero_padding2d(const oc_case *c, const oc_ref *in, oc_ref *out);
int oc_ref_moments(const oc_case *c, const oc_ref *in, oc_ref *out);
int oc_ref_relu_backward(const oc_case *c, const oc_ref *in, oc_ref *out);
int oc_ref_mul_add(const oc_case *c, const oc_ref *in, oc_ref *out);
int oc_ref_batch_norm(const oc_case *c, const oc_ref *in, oc_ref *out);
int oc_ref_batch_norm_training(const oc_case *c, const oc_ref *in, oc_ref *out);
int oc_ref_batch_norm_relu(const oc_case *c, const oc_ref *in, oc_ref *out);
int oc_ref_batch_norm_backward_sums(const oc_case *c, const oc_ref *in, oc_ref *out);
int oc_ref_batch_norm_backward_input(const oc_case *c, const oc_ref *in, oc_ref *out);
int oc_ref_layer_norm(const oc_case *c, const oc_ref *in, oc_ref *out);
/* shared by the files of the table (op_cases.c) */
int oc_one(eg_tensor *t, eg_tensor **out);
void oc_int_axes(const oc_case *c, int first, int n, int *axes);
/* convolution, pooling and normalization calls (op_cases_nn.c) */
int apply_conv2d(const oc_case *c, eg_tensor *const *in, eg_tensor **out);
int apply_conv2d_transpose(const oc_case *c, eg_tensor *const *in, eg_tensor **out);
int apply_conv2d_backward_filter(const oc_case *c, eg_tensor *const *in, eg_tensor **out);
int apply_pool2d(const oc_case *c, eg_tensor *const *in, eg_tensor **out);
int apply_avg_pool2d_backward(const oc_case *c, eg_tensor *const *in, eg_tensor **out);
int apply_moments(const oc_case *c, eg_tensor *const *in, eg_tensor **out);
int apply_relu_backward(const oc_case *c, eg_tensor *const *in, eg_tensor **out);
int apply_dense(const oc_case *c, eg_tensor *const *in, eg_tensor **out);
int apply_mul_add(const oc_case *c, eg_tensor *const *in, eg_tensor **out);
int apply_batch_norm(const oc_case *c, eg_tensor *const *in, eg_tensor **out);
int apply_batch_norm_training(const oc_case *c, eg_tensor *const *in, eg_tensor **out);
int apply_batch_norm_relu(const oc_case *c, eg_tensor *const *in, eg_tensor **out);
int apply_batch_norm_backward(const oc_case *c, eg_tensor *const *in, eg_tensor **out);
int apply_layer_norm(const oc_case *c, eg_tensor *const *in, eg_tensor **out);
int apply_upsample2d(const oc_case *c, eg_tensor *const *in, eg_tensor **out);
int apply_zero_padding2d(const oc_case *c, eg_tensor *const *in, eg_tensor **out);
int apply_global_avg_pool2d(const oc_case *c, eg_tensor *const *in, eg_tensor **out);
/* the recurrent cells (op_cases_recurrent.c): calls and references */
int oc_apply_lstm_cell(const oc_case *c, eg_tensor *const *in, eg_tensor **out);
int oc_apply_gru_cell(const oc_case *c, eg_tensor *const *in, eg_tensor **out);
int oc_apply_cell_backward(const oc_case *c, eg_tensor *const *in, eg_tensor **out);
int oc_ref_lstm_cell(const oc_case *c, const oc_ref *in, oc_ref *out);
int oc_ref_lstm_cell_backward(const oc_case *c, const oc_ref *in, oc_ref *out);
int oc_ref_gru_cell(const oc_case *c, const oc_ref *in, oc_ref *out);
int oc_ref_gru_cell_backward(const oc_case *c, const oc_ref *in, oc_ref *out);
/* the fused attention (op_cases_attention.c): calls and references */
int oc_apply_attention(const oc_case *c, eg_tensor *const *in, eg_tensor **out);
int oc_apply_attention_backward(const oc_case *c, eg_tensor *const *in, eg_tensor **out);
int oc_ref_attention(const oc_case *c, const oc_ref *in, oc_ref *out);
int oc_ref_attention_backward(const oc_case *c, const oc_ref *in, oc_ref *out);
/* the int8 products (op_cases_quantized.c): calls and references */
int oc_apply_quantize_int8(const oc_case *c, eg_tensor *const *in, eg_tensor **out);
int oc_apply_dense_int8(const oc_case *c, eg_tensor *const *in, eg_tensor **out);
int oc_apply_conv2d_int8(const oc_case *c, eg_tensor *const *in, eg_tensor **out);
int oc_ref_quantize_int8(const oc_case *c, const oc_ref *in, oc_ref *out);
int oc_ref_dense_int8(const oc_case *c, const oc_ref *in, oc_ref *out);
int oc_ref_conv2d_int8(const oc_case *c, const oc_ref *in, oc_ref *out);
int oc_apply_sample_indices(const oc_case *c, eg_tensor *const *in, eg_tensor **out);
bool oc_check_sample_indices(const oc_case *c, const oc_ref *in, int n_out, const oc_ref *out,
                             char *why, size_t why_size);
bool oc_check_dropout(const oc_case *c, const oc_ref *in, int n_out, const oc_ref *out, char *why,
                      size_t why_size);

#endif
