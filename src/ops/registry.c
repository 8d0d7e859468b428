/* The op registry, expanded from ops.def. */
#include <stdarg.h>
#include <stdio.h>

#include "base/error.h"
#include "ops/internal.h"

eg_status eg__op_error(eg__op op, eg_status status, const char *fmt, ...) {
    char message[768];
    va_list args;
    va_start(args, fmt);
    vsnprintf(message, sizeof message, fmt, args);
    va_end(args);
    return eg__error(status, "%s: %s", eg__op_defs[op].name, message);
}

const eg__op_def eg__op_defs[EG__OP_COUNT] = {
#define EG_OP(ENUM, name, n_inputs, infer, backward, flags)                                        \
    [EG__OP_##ENUM] = {#name, n_inputs, eg__infer_##infer, flags},
#include "ops/ops.def"
#undef EG_OP
};
