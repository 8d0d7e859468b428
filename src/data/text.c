/* Pipeline sources for text: language-model windows over a tensor of token ids, and sequences
 * of varying length (such as spelling / phoneme pairs) copied from arrays of arrays. */

#ifndef EG_NO_CALLSITE
#define EG_NO_CALLSITE
#endif

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/random.h"
#include "data/internal.h"

static bool is_id_dtype(eg_dtype dtype) {
    return dtype == EG_DTYPE_U8 || dtype == EG_DTYPE_I32 || dtype == EG_DTYPE_I64;
}

static void plain_iter_free(eg__iter *it) {
    free(it);
}

/* ---- token windows ---- */

typedef struct windows_dataset {
    eg_dataset base;
    eg_tensor *ids; /* a reference, no scope */
    int64_t n, length, stride;
    bool random_offset;
    uint64_t seed;
} windows_dataset;

typedef struct windows_iter {
    eg__iter base;
    const windows_dataset *ds;
    int64_t start; /* of the next window */
} windows_iter;

/* A view of ids[from .. from + length). */
static eg_tensor *window_view(const windows_dataset *ds, int64_t from) {
    const eg_tensor *ids = ds->ids;
    return eg__tensor_view(ids, 1, &ds->length, ids->strides, ids->offset + from * ids->strides[0]);
}

static eg_status windows_next(eg__iter *base, eg_element *out) {
    windows_iter *it = (windows_iter *)base;
    const windows_dataset *ds = it->ds;
    /* The target of the window's last input is ids[start + length]. */
    if (it->start > ds->n - ds->length - 1) return EG__END;
    out->tensors[0] = window_view(ds, it->start);
    out->tensors[1] = out->tensors[0] ? window_view(ds, it->start + 1) : NULL;
    if (!out->tensors[1]) {
        if (out->tensors[0]) eg__unref(out->tensors[0]);
        return eg_last_status();
    }
    out->n_tensors = 2;
    it->start += ds->stride;
    return EG_OK;
}

static const eg__iter_ops windows_iter_ops = {windows_next, plain_iter_free};

static eg_status windows_iterator_new(eg_dataset *base, const eg__iter_params *params,
                                      uint64_t epoch, eg__iter **out) {
    (void)params;
    const windows_dataset *ds = (const windows_dataset *)base;
    windows_iter *it = calloc(1, sizeof *it);
    if (!it) return eg__error(EG_ERR_OUT_OF_MEMORY, "%s: out of host memory", base->name);
    it->base.ops = &windows_iter_ops;
    it->ds = ds;
    if (ds->random_offset) {
        /* Below n - length, so that the pass keeps its first window (n >= length + 1). */
        uint64_t range =
            (uint64_t)(ds->stride < ds->n - ds->length ? ds->stride : ds->n - ds->length);
        uint32_t words[4];
        eg__philox4x32(ds->seed, epoch, 0, words);
        uint64_t draw = (uint64_t)words[0] << 32 | words[1];
        it->start = (int64_t)(((unsigned __int128)draw * range) >> 64);
    }
    *out = &it->base;
    return EG_OK;
}

static void windows_destroy(eg_dataset *base) {
    eg__unref(((windows_dataset *)base)->ids);
}

static const eg__dataset_ops windows_ops = {windows_iterator_new, windows_destroy, false};

eg_dataset *eg_dataset_from_token_windows(const eg_tensor *ids, int64_t length, int64_t stride,
                                          bool random_offset, uint64_t seed) {
    const char *what = "dataset_from_token_windows";
    if (!ids) {
        eg__error(EG_ERR_NULL_ARGUMENT, "%s: ids is NULL", what);
        return NULL;
    }
    char shape[160];
    eg__shape_format(ids->n_dims, ids->shape, shape, sizeof shape);
    if (ids->n_dims != 1) {
        eg__error(EG_ERR_SHAPE, "%s: ids has shape %s; it must be 1-d (one id after another)", what,
                  shape);
        return NULL;
    }
    if (!is_id_dtype(ids->dtype)) {
        eg__error(EG_ERR_DTYPE, "%s: ids are %s; token ids are i32, i64 or u8", what,
                  eg_dtype_name(ids->dtype));
        return NULL;
    }
    if (length < 1 || stride < 1) {
        eg__error(EG_ERR_INVALID_ARGUMENT,
                  "%s: length %lld and stride %lld; both must be at least 1", what,
                  (long long)length, (long long)stride);
        return NULL;
    }
    int64_t n = ids->shape[0];
    if (n <= length) {
        eg__error(EG_ERR_SHAPE,
                  "%s: window length %lld needs %lld ids (the inputs and one more for the last "
                  "target); the tensor has %lld",
                  what, (long long)length, (long long)length + 1, (long long)n);
        return NULL;
    }
    if (eg__realize(ids) != EG_OK) return NULL;
    char name[64];
    snprintf(name, sizeof name, "token_windows(%lld, %lld)", (long long)length, (long long)stride);
    windows_dataset *ds = eg__dataset_alloc(sizeof *ds, &windows_ops, name);
    if (!ds) return NULL;
    eg__ref(ids);
    ds->ids = (eg_tensor *)ids;
    ds->n = n;
    ds->length = length;
    ds->stride = stride;
    ds->random_offset = random_offset;
    ds->seed = seed;
    return &ds->base;
}

/* ---- sequences ---- */

typedef struct sequences_dataset {
    eg_dataset base;
    int n;
    int64_t count;
    eg_tensor *values[EG_ELEMENT_MAX_TENSORS]; /* every sequence of a component, one after
                                                  another: references, no scope */
    int64_t *starts[EG_ELEMENT_MAX_TENSORS];   /* count + 1 each */
} sequences_dataset;

typedef struct sequences_iter {
    eg__iter base;
    const sequences_dataset *ds;
    int64_t next;
} sequences_iter;

static eg_status sequences_next(eg__iter *base, eg_element *out) {
    sequences_iter *it = (sequences_iter *)base;
    const sequences_dataset *ds = it->ds;
    if (it->next >= ds->count) return EG__END;
    for (int c = 0; c < ds->n; c++) {
        int64_t from = ds->starts[c][it->next], length = ds->starts[c][it->next + 1] - from;
        int64_t stride = 1;
        out->tensors[c] = eg__tensor_view(ds->values[c], 1, &length, &stride, from);
        if (!out->tensors[c]) {
            out->n_tensors = c;
            eg__element_clear(out);
            return eg_last_status();
        }
    }
    out->n_tensors = ds->n;
    it->next++;
    return EG_OK;
}

static const eg__iter_ops sequences_iter_ops = {sequences_next, plain_iter_free};

static eg_status sequences_iterator_new(eg_dataset *base, const eg__iter_params *params,
                                        uint64_t epoch, eg__iter **out) {
    (void)params, (void)epoch;
    sequences_iter *it = calloc(1, sizeof *it);
    if (!it) return eg__error(EG_ERR_OUT_OF_MEMORY, "%s: out of host memory", base->name);
    it->base.ops = &sequences_iter_ops;
    it->ds = (const sequences_dataset *)base;
    *out = &it->base;
    return EG_OK;
}

static void sequences_destroy(eg_dataset *base) {
    sequences_dataset *ds = (sequences_dataset *)base;
    for (int c = 0; c < EG_ELEMENT_MAX_TENSORS; c++) {
        if (ds->values[c]) eg__unref(ds->values[c]);
        free(ds->starts[c]);
    }
}

static const eg__dataset_ops sequences_ops = {sequences_iterator_new, sequences_destroy, false};

/* Checks component c and sums its lengths into *total; raises the error otherwise. */
static eg_status check_component(const eg_sequences *s, int c, int64_t count, int64_t *total) {
    const char *what = "dataset_from_sequences";
    if (!is_id_dtype(s->dtype))
        return eg__error(EG_ERR_DTYPE, "%s: component %d is %s; sequences are u8, i32 or i64", what,
                         c, eg_dtype_name(s->dtype));
    if (s->count < 0)
        return eg__error(EG_ERR_INVALID_ARGUMENT, "%s: component %d has count %lld", what, c,
                         (long long)s->count);
    if (s->count != count)
        return eg__error(EG_ERR_SHAPE, "%s: component %d has %lld sequences, component 0 %lld",
                         what, c, (long long)s->count, (long long)count);
    if (s->count > 0 && (!s->data || !s->lengths))
        return eg__error(EG_ERR_NULL_ARGUMENT, "%s: component %d: %s is NULL", what, c,
                         !s->data ? "data" : "lengths");
    *total = 0;
    for (int64_t i = 0; i < s->count; i++) {
        if (s->lengths[i] < 0)
            return eg__error(EG_ERR_INVALID_ARGUMENT,
                             "%s: component %d: sequence %lld has length "
                             "%lld",
                             what, c, (long long)i, (long long)s->lengths[i]);
        if (s->lengths[i] > 0 && !s->data[i])
            return eg__error(EG_ERR_NULL_ARGUMENT,
                             "%s: component %d: sequence %lld has length %lld and NULL data", what,
                             c, (long long)i, (long long)s->lengths[i]);
        if (__builtin_add_overflow(*total, s->lengths[i], total) || *total > ((int64_t)1 << 40))
            return eg__error(EG_ERR_INVALID_ARGUMENT,
                             "%s: component %d: more than 2^40 values in all", what, c);
    }
    return EG_OK;
}

eg_dataset *eg_dataset_from_sequences(int n, const eg_sequences *components) {
    const char *what = "dataset_from_sequences";
    if (n < 1 || n > EG_ELEMENT_MAX_TENSORS) {
        eg__error(EG_ERR_INVALID_ARGUMENT, "%s: n is %d; 1 to %d components allowed", what, n,
                  EG_ELEMENT_MAX_TENSORS);
        return NULL;
    }
    if (!components) {
        eg__error(EG_ERR_NULL_ARGUMENT, "%s: components is NULL", what);
        return NULL;
    }
    int64_t totals[EG_ELEMENT_MAX_TENSORS];
    for (int c = 0; c < n; c++)
        if (check_component(&components[c], c, components[0].count, &totals[c]) != EG_OK)
            return NULL;
    int64_t count = components[0].count;
    char name[64];
    snprintf(name, sizeof name, "sequences(%lld)", (long long)count);
    sequences_dataset *ds = eg__dataset_alloc(sizeof *ds, &sequences_ops, name);
    if (!ds) return NULL;
    ds->n = n;
    ds->count = count;
    eg__scope_suspend();
    bool failed = false;
    for (int c = 0; c < n && !failed; c++) {
        const eg_sequences *s = &components[c];
        ds->starts[c] = malloc(((size_t)count + 1) * sizeof *ds->starts[c]);
        ds->values[c] =
            ds->starts[c] ? eg__tensor_alloc(s->dtype, 1, &totals[c], eg_device_cpu()) : NULL;
        if (!ds->values[c]) {
            if (!ds->starts[c]) eg__error(EG_ERR_OUT_OF_MEMORY, "%s: out of host memory", what);
            failed = true;
            break;
        }
        char *to = eg__data(ds->values[c]);
        size_t size = eg_dtype_size(s->dtype);
        int64_t at = 0;
        for (int64_t i = 0; i < count; i++) {
            ds->starts[c][i] = at;
            if (s->lengths[i] > 0)
                memcpy(to + (size_t)at * size, s->data[i], (size_t)s->lengths[i] * size);
            at += s->lengths[i];
        }
        ds->starts[c][count] = at;
    }
    eg__scope_resume();
    if (failed) {
        eg__dataset_unref(&ds->base);
        return NULL;
    }
    return &ds->base;
}
