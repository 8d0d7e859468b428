/* The CPU kernel table: which kernel runs each op. View ops need none (they make views) unless
 * a reshape must copy. */
#include "backend/cpu/kernels.h"

#define KERNEL(name) eg_status eg__cpu_##name(const eg__kernel_call *call);
KERNEL(unary)
KERNEL(binary)
KERNEL(compare)
KERNEL(where)
KERNEL(cast)
KERNEL(copy)
KERNEL(dropout)
KERNEL(reduce)
KERNEL(arg_reduce)
KERNEL(softmax)
KERNEL(sparse_softmax_cross_entropy)
KERNEL(matmul)
KERNEL(dense)
KERNEL(quantize_int8)
KERNEL(sample_indices)
KERNEL(dense_int8)
KERNEL(conv2d_int8)
KERNEL(concat)
KERNEL(gather)
KERNEL(scatter_add)
KERNEL(unslice)
KERNEL(one_hot)
KERNEL(pad)
KERNEL(mul_add_any)
KERNEL(relu_backward_any)
KERNEL(moments)
KERNEL(batch_norm)
KERNEL(batch_norm_backward_sums)
KERNEL(batch_norm_backward_input)
KERNEL(lstm_cell)
KERNEL(lstm_cell_backward)
KERNEL(gru_cell)
KERNEL(gru_cell_backward)
KERNEL(attention)
KERNEL(attention_backward)
KERNEL(conv2d)
KERNEL(conv2d_backward_input)
KERNEL(conv2d_backward_filter)
KERNEL(max_pool2d)
KERNEL(max_pool2d_backward)
KERNEL(max_pool2d_argmax)
KERNEL(avg_pool2d)
KERNEL(avg_pool2d_backward)
KERNEL(all_reduce)
KERNEL(all_reduce_start)
KERNEL(all_reduce_done)
#undef KERNEL

const eg__kernel_fn eg__cpu_kernels[EG__OP_COUNT] = {
    [EG__OP_NEG] = eg__cpu_unary,
    [EG__OP_ABS] = eg__cpu_unary,
    [EG__OP_EXP] = eg__cpu_unary,
    [EG__OP_LOG] = eg__cpu_unary,
    [EG__OP_SQRT] = eg__cpu_unary,
    [EG__OP_RSQRT] = eg__cpu_unary,
    [EG__OP_SIN] = eg__cpu_unary,
    [EG__OP_COS] = eg__cpu_unary,
    [EG__OP_TANH] = eg__cpu_unary,
    [EG__OP_SIGMOID] = eg__cpu_unary,
    [EG__OP_RELU] = eg__cpu_unary,
    [EG__OP_GELU] = eg__cpu_unary,
    [EG__OP_SOFTPLUS] = eg__cpu_unary,
    [EG__OP_SIGN] = eg__cpu_unary,
    [EG__OP_SQUARE] = eg__cpu_unary,
    [EG__OP_RECIPROCAL] = eg__cpu_unary,
    [EG__OP_ERF] = eg__cpu_unary,
    [EG__OP_CLIP] = eg__cpu_unary,
    [EG__OP_ADD] = eg__cpu_binary,
    [EG__OP_SUB] = eg__cpu_binary,
    [EG__OP_MUL] = eg__cpu_binary,
    [EG__OP_DIV] = eg__cpu_binary,
    [EG__OP_POW] = eg__cpu_binary,
    [EG__OP_MAXIMUM] = eg__cpu_binary,
    [EG__OP_MINIMUM] = eg__cpu_binary,
    [EG__OP_EQUAL] = eg__cpu_compare,
    [EG__OP_NOT_EQUAL] = eg__cpu_compare,
    [EG__OP_LESS] = eg__cpu_compare,
    [EG__OP_LESS_EQUAL] = eg__cpu_compare,
    [EG__OP_GREATER] = eg__cpu_compare,
    [EG__OP_GREATER_EQUAL] = eg__cpu_compare,
    [EG__OP_WHERE] = eg__cpu_where,
    [EG__OP_CAST] = eg__cpu_cast,
    [EG__OP_SUM] = eg__cpu_reduce,
    [EG__OP_MEAN] = eg__cpu_reduce,
    [EG__OP_MAX] = eg__cpu_reduce,
    [EG__OP_MIN] = eg__cpu_reduce,
    [EG__OP_LOGSUMEXP] = eg__cpu_reduce,
    [EG__OP_VAR] = eg__cpu_reduce,
    [EG__OP_ARGMAX] = eg__cpu_arg_reduce,
    [EG__OP_ARGMIN] = eg__cpu_arg_reduce,
    [EG__OP_SOFTMAX] = eg__cpu_softmax,
    [EG__OP_LOG_SOFTMAX] = eg__cpu_softmax,
    [EG__OP_MATMUL] = eg__cpu_matmul,
    [EG__OP_DENSE] = eg__cpu_dense,
    [EG__OP_RESHAPE] = eg__cpu_copy,
    [EG__OP_PERMUTE] = eg__cpu_copy,
    [EG__OP_SLICE] = eg__cpu_copy,
    [EG__OP_BROADCAST_TO] = eg__cpu_copy,
    [EG__OP_COPY] = eg__cpu_copy,
    [EG__OP_ALL_REDUCE] = eg__cpu_all_reduce,
    [EG__OP_ALL_REDUCE_START] = eg__cpu_all_reduce_start,
    [EG__OP_ALL_REDUCE_DONE] = eg__cpu_all_reduce_done,
    [EG__OP_TO_DEVICE] = eg__cpu_copy, /* between host devices: all host memory */
    [EG__OP_CONCAT] = eg__cpu_concat,
    [EG__OP_GATHER] = eg__cpu_gather,
    [EG__OP_SCATTER_ADD] = eg__cpu_scatter_add,
    [EG__OP_UNSLICE] = eg__cpu_unslice,
    [EG__OP_ONE_HOT] = eg__cpu_one_hot,
    [EG__OP_PAD] = eg__cpu_pad,
    [EG__OP_SPARSE_SOFTMAX_CROSS_ENTROPY] = eg__cpu_sparse_softmax_cross_entropy,
    [EG__OP_DROPOUT] = eg__cpu_dropout,
    [EG__OP_MUL_ADD] = eg__cpu_mul_add_any, /* f32, f64: norm.c; bf16, f16: elementwise.c */
    [EG__OP_RELU_BACKWARD] = eg__cpu_relu_backward_any,
    [EG__OP_MOMENTS] = eg__cpu_moments,
    [EG__OP_BATCH_NORM] = eg__cpu_batch_norm,
    [EG__OP_BATCH_NORM_BACKWARD_SUMS] = eg__cpu_batch_norm_backward_sums,
    [EG__OP_BATCH_NORM_BACKWARD_INPUT] = eg__cpu_batch_norm_backward_input,
    [EG__OP_LSTM_CELL] = eg__cpu_lstm_cell,
    [EG__OP_LSTM_CELL_BACKWARD] = eg__cpu_lstm_cell_backward,
    [EG__OP_GRU_CELL] = eg__cpu_gru_cell,
    [EG__OP_GRU_CELL_BACKWARD] = eg__cpu_gru_cell_backward,
    [EG__OP_ATTENTION] = eg__cpu_attention,
    [EG__OP_ATTENTION_BACKWARD] = eg__cpu_attention_backward,
    [EG__OP_CONV2D] = eg__cpu_conv2d,
    [EG__OP_CONV2D_BACKWARD_INPUT] = eg__cpu_conv2d_backward_input,
    [EG__OP_CONV2D_BACKWARD_FILTER] = eg__cpu_conv2d_backward_filter,
    [EG__OP_MAX_POOL2D] = eg__cpu_max_pool2d,
    [EG__OP_MAX_POOL2D_BACKWARD] = eg__cpu_max_pool2d_backward,
    [EG__OP_MAX_POOL2D_ARGMAX] = eg__cpu_max_pool2d_argmax,
    [EG__OP_AVG_POOL2D] = eg__cpu_avg_pool2d,
    [EG__OP_AVG_POOL2D_BACKWARD] = eg__cpu_avg_pool2d_backward,
    [EG__OP_QUANTIZE_INT8] = eg__cpu_quantize_int8,
    [EG__OP_SAMPLE_INDICES] = eg__cpu_sample_indices,
    [EG__OP_DENSE_INT8] = eg__cpu_dense_int8,
    [EG__OP_CONV2D_INT8] = eg__cpu_conv2d_int8,
};
