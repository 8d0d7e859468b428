/* Row-sparse tensors (tensor.h): made dense, added up, and coalesced (each row once).
 *
 * A table's row-sparse gradient lists a row once per lookup of it. The optimizers coalesce it
 * before applying it: each row's values summed in the order of its lookups, which is the order
 * in which the dense gradient (scatter_add) adds them, so a coalesced row has the dense
 * gradient's bits. */
#include <stdlib.h>
#include <string.h>

#include "api/internal.h"
#include "base/error.h"

eg_tensor *eg_row_sparse_to_dense(const eg_tensor *t) {
    if (!eg__check_arg_sparse_ok(t, "row_sparse_to_dense", 0)) return NULL;
    if (!t->row_values) {
        eg__error(EG_ERR_INVALID_ARGUMENT, "row_sparse_to_dense: the tensor is not row-sparse");
        return NULL;
    }
    eg__attrs attrs = {.axis = 0, .n_dims = t->n_dims};
    memcpy(attrs.shape, t->shape, (size_t)t->n_dims * sizeof *t->shape);
    const eg_tensor *in[2] = {t->row_values, t->row_indices};
    return eg__execute(EG__OP_SCATTER_ADD, 2, in, &attrs);
}

eg_tensor *eg__row_sparse_sum(const eg_tensor *a, const eg_tensor *b) {
    if (a->row_values && b->row_values) {
        const eg_tensor *indices[2] = {a->row_indices, b->row_indices};
        const eg_tensor *values[2] = {a->row_values, b->row_values};
        eg_tensor *joined_indices = eg_concat(2, eg__tensor_handles(indices), 0);
        eg_tensor *joined_values =
            joined_indices ? eg_concat(2, eg__tensor_handles(values), 0) : NULL;
        eg_tensor *sum =
            joined_values ? eg__row_sparse_new(joined_indices, joined_values, a->n_dims, a->shape)
                          : NULL;
        eg_release(joined_indices);
        eg_release(joined_values);
        return sum;
    }
    const eg_tensor *sparse = a->row_values ? a : b, *dense = a->row_values ? b : a;
    eg_tensor *expanded = eg_row_sparse_to_dense(sparse);
    eg_tensor *sum = expanded ? eg_add(dense, expanded) : NULL;
    eg_release(expanded);
    return sum;
}

typedef struct row_ref {
    int64_t row, position; /* the table row, and where it came in the lookups */
} row_ref;

static int by_row_then_position(const void *a, const void *b) {
    const row_ref *x = a, *y = b;
    if (x->row != y->row) return x->row < y->row ? -1 : 1;
    return x->position < y->position ? -1 : x->position > y->position;
}

/* out's row u = the sum of the values of the lookups of unique row u, in lookup order. */
#define SUM_ROWS(T)                                                                                \
    do {                                                                                           \
        T *to = NULL;                                                                              \
        for (int64_t k = 0, u = 0; k < n; k++) {                                                   \
            const T *from = (const T *)values + refs[k].position * width;                          \
            if (k == 0 || refs[k].row != refs[k - 1].row) {                                        \
                to = (T *)out + u++ * width;                                                       \
                for (int64_t j = 0; j < width; j++) to[j] = (T)0 + from[j];                        \
            } else {                                                                               \
                for (int64_t j = 0; j < width; j++) to[j] += from[j];                              \
            }                                                                                      \
        }                                                                                          \
    } while (0)

eg_tensor *eg__row_sparse_coalesce(const eg_tensor *t) {
    if (eg__realize(t->row_indices) != EG_OK || eg__realize(t->row_values) != EG_OK) return NULL;
    if (t->dtype != EG_DTYPE_F32 && t->dtype != EG_DTYPE_F64) {
        eg__error(EG_ERR_DTYPE, "row-sparse gradient: f32 or f64 values only, got %s",
                  eg_dtype_name(t->dtype));
        return NULL;
    }
    if (!eg__device_is_host(t->device)) {
        eg__error(EG_ERR_UNSUPPORTED, "row-sparse gradients are applied on the CPU only, not on %s",
                  eg_device_name(t->device));
        return NULL;
    }
    eg_tensor *indices = eg_contiguous(t->row_indices);
    eg_tensor *values_c = indices ? eg_contiguous(t->row_values) : NULL;
    int64_t n = t->row_indices->n_elems, width = t->n_elems / (t->shape[0] ? t->shape[0] : 1);
    row_ref *refs = values_c ? malloc(sizeof *refs * (size_t)(n ? n : 1)) : NULL;
    eg_tensor *result = NULL;
    if (values_c && !refs) eg__error(EG_ERR_OUT_OF_MEMORY, "row-sparse gradient: out of memory");
    if (refs) {
        const int64_t *rows = eg__data(indices);
        bool in_range = true;
        for (int64_t k = 0; k < n; k++) {
            refs[k] = (row_ref){rows[k], k};
            in_range &= rows[k] >= 0 && rows[k] < t->shape[0];
        }
        qsort(refs, (size_t)n, sizeof *refs, by_row_then_position);
        int64_t unique = 0;
        for (int64_t k = 0; k < n; k++) unique += k == 0 || refs[k].row != refs[k - 1].row;
        int64_t value_shape[EG_MAX_DIMS];
        memcpy(value_shape, t->shape, sizeof value_shape);
        value_shape[0] = unique;
        eg_tensor *out_indices =
            in_range ? eg__full_on(t->device, EG_DTYPE_I64, 1, &unique, 0.0) : NULL;
        eg_tensor *out_values =
            out_indices ? eg__full_on(t->device, t->dtype, t->n_dims, value_shape, 0.0) : NULL;
        if (!in_range)
            eg__error(EG_ERR_INVALID_ARGUMENT,
                      "row-sparse gradient: a row index is outside [0, %lld)",
                      (long long)t->shape[0]);
        if (out_values) {
            int64_t *unique_rows = eg__data(out_indices);
            for (int64_t k = 0, u = 0; k < n; k++)
                if (k == 0 || refs[k].row != refs[k - 1].row) unique_rows[u++] = refs[k].row;
            const void *values = eg__data(values_c);
            void *out = eg__data(out_values);
            if (t->dtype == EG_DTYPE_F64)
                SUM_ROWS(double);
            else
                SUM_ROWS(float);
            result = eg__row_sparse_new(out_indices, out_values, t->n_dims, t->shape);
        }
        eg_release(out_indices);
        eg_release(out_values);
    }
    free(refs);
    eg_release(indices);
    eg_release(values_c);
    return result;
}
