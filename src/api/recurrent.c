/* The recurrent cells' builders (ops.def: lstm_cell, gru_cell): one time step's gates as one op.
 * An LSTM's step makes h' and c' together, stacked on a leading axis of size 2, so each is a
 * contiguous view of the one result. */
#include <string.h>

#include "api/internal.h"
#include "base/error.h"

eg_status eg_lstm_cell(const eg_tensor *z, const eg_tensor *c, eg_tensor **h_out,
                       eg_tensor **c_out) {
    if (h_out) *h_out = NULL;
    if (c_out) *c_out = NULL;
    if (!h_out || !c_out)
        return eg__error(EG_ERR_NULL_ARGUMENT, "lstm_cell: h_out or c_out is NULL");
    if (!eg__check_arg(z, "lstm_cell", 0) || !eg__check_arg(c, "lstm_cell", 1))
        return eg_last_status();
    eg__attrs attrs;
    memset(&attrs, 0, sizeof attrs);
    const eg_tensor *in[2] = {z, c};
    eg_tensor *both = eg__execute(EG__OP_LSTM_CELL, 2, in, &attrs);
    if (!both) return eg_last_status();
    eg_tensor *parts[2];
    eg_status status = eg_split(both, 0, 2, NULL, parts);
    eg_release(both);
    if (status != EG_OK) return status;
    const int64_t *shape = c->shape;
    *h_out = eg_reshape(parts[0], 2, shape);
    *c_out = *h_out ? eg_reshape(parts[1], 2, shape) : NULL;
    eg_release(parts[0]);
    eg_release(parts[1]);
    if (!*c_out) {
        eg_release(*h_out);
        *h_out = NULL;
        return eg_last_status();
    }
    return EG_OK;
}

eg_tensor *eg_gru_cell(const eg_tensor *x_proj, const eg_tensor *h_proj, const eg_tensor *h) {
    if (!eg__check_arg(x_proj, "gru_cell", 0) || !eg__check_arg(h_proj, "gru_cell", 1) ||
        !eg__check_arg(h, "gru_cell", 2))
        return NULL;
    eg__attrs attrs;
    memset(&attrs, 0, sizeof attrs);
    const eg_tensor *in[3] = {x_proj, h_proj, h};
    return eg__execute(EG__OP_GRU_CELL, 3, in, &attrs);
}
