/* The one summation every group uses: what makes mirrored and multi-worker replicas agree bit
 * for bit is that both add the same values in the same order, so there is one definition. */
#include <string.h>

#include "dist/internal.h"

/* In blocks, so that each source is read as a stream (vectorized) while every element still
 * gets ((s0 + s1) + s2) + ...; out may be one of the sources (a block is read before it is
 * written). */
#define SUM_BLOCK 1024
#define DEFINE_SUM(name, type)                                                                     \
    static void name(type *out, const void *const *sources, int n_sources, int64_t offset,         \
                     int64_t count) {                                                              \
        type acc[SUM_BLOCK];                                                                       \
        for (int64_t b = 0; b < count; b += SUM_BLOCK) {                                           \
            int64_t m = count - b < SUM_BLOCK ? count - b : SUM_BLOCK;                             \
            const type *first = (const type *)sources[0] + offset + b;                             \
            for (int64_t e = 0; e < m; e++) acc[e] = first[e];                                     \
            for (int q = 1; q < n_sources; q++) {                                                  \
                const type *s = (const type *)sources[q] + offset + b;                             \
                for (int64_t e = 0; e < m; e++) acc[e] += s[e];                                    \
            }                                                                                      \
            memcpy(out + offset + b, acc, (size_t)m * sizeof(type));                               \
        }                                                                                          \
    }
DEFINE_SUM(sum_f32, float)
DEFINE_SUM(sum_f64, double)

void eg__sum_in_replica_order(eg_dtype dtype, void *out, const void *const *sources, int n_sources,
                              int64_t offset, int64_t count) {
    if (dtype == EG_DTYPE_F64)
        sum_f64(out, sources, n_sources, offset, count);
    else
        sum_f32(out, sources, n_sources, offset, count);
}
