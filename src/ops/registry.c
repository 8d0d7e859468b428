/* The op registry, expanded from ops.def. */
#include "ops/internal.h"

const eg__op_def eg__op_defs[EG__OP_COUNT] = {
#define EG_OP(ENUM, name, n_inputs, infer, backward, flags)                                        \
    [EG__OP_##ENUM] = {#name, n_inputs, eg__infer_##infer, eg__backward_##backward, flags},
#include "ops/ops.def"
#undef EG_OP
};
