/* Check numerics on the CPU: the first element of a float tensor that is NaN or infinite. */
#include <stdint.h>
#include <string.h>

#include "backend/cpu/kernels.h"

/* x - x is 0 for every finite x and NaN for NaN and the infinities: one subtraction and one
 * comparison an element, which the compiler vectorizes. */
#define FIRST_NONFINITE(T, data, n)                                                                \
    do {                                                                                           \
        const T *v = (const T *)(data);                                                            \
        for (int64_t i = 0; i < (n); i++)                                                          \
            if (!(v[i] - v[i] == (T)0)) return i;                                                  \
    } while (0)

/* f16 and bf16: the exponent field all ones. */
static int64_t first_nonfinite_16(const uint16_t *v, int64_t n, uint16_t exponent) {
    for (int64_t i = 0; i < n; i++)
        if ((v[i] & exponent) == exponent) return i;
    return -1;
}

int64_t eg__cpu_first_nonfinite(const eg_tensor *t) {
    if (!eg__is_contiguous(t)) { /* results are contiguous; views only through the slow walk */
        eg_tensor *copy = eg__contiguous_temp(t);
        if (!copy) return -1;
        int64_t at = eg__cpu_first_nonfinite(copy);
        eg__unref(copy);
        return at;
    }
    const void *data = eg__data(t);
    switch (t->dtype) {
    case EG_DTYPE_F32:
        FIRST_NONFINITE(float, data, t->n_elems);
        return -1;
    case EG_DTYPE_F64:
        FIRST_NONFINITE(double, data, t->n_elems);
        return -1;
    case EG_DTYPE_F16:
        return first_nonfinite_16(data, t->n_elems, 0x7c00u);
    case EG_DTYPE_BF16:
        return first_nonfinite_16(data, t->n_elems, 0x7f80u);
    default:
        return -1;
    }
}
