/* Internal: static memory planning — offsets in one arena from buffer lifetimes. */
#ifndef EAGLE_SRC_GRAPH_PLANNER_H
#define EAGLE_SRC_GRAPH_PLANNER_H

#include <stddef.h>

typedef struct eg__buffer_request {
    size_t bytes;  /* a multiple of 64 */
    int first_use; /* lifetime [first_use, last_use], in schedule positions */
    int last_use;
    size_t offset; /* set by the planner, a multiple of 64 */
} eg__buffer_request;

/* Places every buffer so that no two whose lifetimes intersect overlap, greedily by size
 * (largest first), each at the lowest offset that fits (the TFLite arena planner's rule) and,
 * in a second pass, in the smallest gap that fits (best fit, as ggml-alloc); the smaller arena
 * is kept. Returns the arena size: at most the sum of the sizes. EG_NO_SHARE=1 in the
 * environment turns sharing off (for comparisons). */
size_t eg__plan_buffers(eg__buffer_request *requests, int n);

#endif
