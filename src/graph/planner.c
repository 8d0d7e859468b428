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

size_t eg__plan_buffers(eg__buffer_request *requests, int n) {
    if (n <= 0) return 0;
    eg__buffer_request **order = malloc(sizeof *order * (size_t)n);
    eg__buffer_request **placed = malloc(sizeof *placed * (size_t)n);
    size_t arena = 0;
    if (getenv("EG_NO_SHARE") || !order ||
        !placed) { /* no sharing: every buffer gets its own place */
        for (int i = 0; i < n; i++) {
            requests[i].offset = arena;
            arena += requests[i].bytes;
        }
        free(order);
        free(placed);
        return arena;
    }
    for (int i = 0; i < n; i++) order[i] = &requests[i];
    qsort(order, (size_t)n, sizeof *order, by_size_descending);
    int n_placed = 0;
    for (int i = 0; i < n; i++) {
        eg__buffer_request *r = order[i];
        /* the placed buffers alive at the same time, by offset: take the first gap that fits */
        int n_live = 0;
        size_t candidate = 0;
        eg__buffer_request **overlapping = malloc(sizeof *overlapping * (size_t)(n_placed + 1));
        if (overlapping) {
            for (int j = 0; j < n_placed; j++)
                if (placed[j]->first_use <= r->last_use && r->first_use <= placed[j]->last_use)
                    overlapping[n_live++] = placed[j];
            qsort(overlapping, (size_t)n_live, sizeof *overlapping, by_offset);
            for (int j = 0; j < n_live; j++) {
                if (overlapping[j]->offset >= candidate + r->bytes) break;
                size_t end = overlapping[j]->offset + overlapping[j]->bytes;
                if (end > candidate) candidate = end;
            }
            free(overlapping);
        } else {
            candidate = arena;
        }
        r->offset = candidate;
        if (candidate + r->bytes > arena) arena = candidate + r->bytes;
        placed[n_placed++] = r;
    }
    free(order);
    free(placed);
    return arena;
}
