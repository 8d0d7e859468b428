#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#include "graph/planner.h"

static int by_size_descending(const void *a, const void *b) {
    const eg__buffer_request *x = *(eg__buffer_request *const *)a;
    const eg__buffer_request *y = *(eg__buffer_request *const *)b;
    if (x->bytes != y->bytes) return x->bytes < y->bytes ? 1 : -1;
    return (x->first_use > y->first_use) - (x->first_use < y->first_use);
}

static int by_offset(const void *a, const void *b) {
    const eg__buffer_request *x = *(eg__buffer_request *const *)a;
    const eg__buffer_request *y = *(eg__buffer_request *const *)b;
    return (x->offset > y->offset) - (x->offset < y->offset);
}

/* Places the requests in `order`: each at the lowest offset that fits (first fit) or in the
 * smallest gap that fits (best fit) among the placed buffers alive at the same time. */
static size_t place(eg__buffer_request **order, int n, bool best_fit,
                    eg__buffer_request **overlapping) {
    size_t arena = 0;
    for (int i = 0; i < n; i++) {
        eg__buffer_request *r = order[i];
        int n_live = 0;
        for (int j = 0; j < i; j++)
            if (order[j]->first_use <= r->last_use && r->first_use <= order[j]->last_use)
                overlapping[n_live++] = order[j];
        qsort(overlapping, (size_t)n_live, sizeof *overlapping, by_offset);
        size_t candidate = 0, best = SIZE_MAX, best_gap = SIZE_MAX;
        for (int j = 0; j < n_live; j++) {
            if (overlapping[j]->offset >= candidate + r->bytes) {
                size_t gap = overlapping[j]->offset - candidate;
                if (!best_fit) break;
                if (gap < best_gap) {
                    best_gap = gap;
                    best = candidate;
                }
            }
            size_t end = overlapping[j]->offset + overlapping[j]->bytes;
            if (end > candidate) candidate = end;
        }
        r->offset = best_fit && best != SIZE_MAX ? best : candidate;
        if (r->offset + r->bytes > arena) arena = r->offset + r->bytes;
    }
    return arena;
}

size_t eg__plan_buffers(eg__buffer_request *requests, int n) {
    if (n <= 0) return 0;
    eg__buffer_request **order = malloc(sizeof *order * (size_t)n);
    eg__buffer_request **overlapping = malloc(sizeof *overlapping * (size_t)n);
    size_t *offsets = malloc(sizeof *offsets * (size_t)n);
    size_t arena = 0;
    if (getenv("EG_NO_SHARE") || !order || !overlapping ||
        !offsets) { /* no sharing: every buffer gets its own place */
        for (int i = 0; i < n; i++) {
            requests[i].offset = arena;
            arena += requests[i].bytes;
        }
        free(order);
        free(overlapping);
        free(offsets);
        return arena;
    }
    for (int i = 0; i < n; i++) order[i] = &requests[i];
    qsort(order, (size_t)n, sizeof *order, by_size_descending);
    /* both rules, the smaller arena wins (first fit on ties) */
    arena = place(order, n, false, overlapping);
    for (int i = 0; i < n; i++) offsets[i] = requests[i].offset;
    size_t best_fit = place(order, n, true, overlapping);
    if (best_fit >= arena)
        for (int i = 0; i < n; i++) requests[i].offset = offsets[i];
    else
        arena = best_fit;
    free(order);
    free(overlapping);
    free(offsets);
    return arena;
}
