/* Pipeline transformations of one input that run in the consumer's thread: filter, shuffle,
 * unbatch, repeat, take, skip, with the helpers all one-input stages share. (batch, padded_batch
 * and bucket_by_sequence_length are in batch.c; cache, zip, interleave and options in compose.c;
 * map and prefetch, which may run threads, in parallel.c.) */

#ifndef EG_NO_CALLSITE
#define EG_NO_CALLSITE
#endif

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/internal.h"

/* A node of `size` bytes over input (taken over); NULL when input is NULL (no new error) or out
 * of memory (input released). */
void *eg__unary_new(eg_dataset *input, size_t size, const eg__dataset_ops *ops, const char *name) {
    if (!input) return NULL;
    eg__unary_dataset *ds = eg__dataset_alloc(size, ops, name);
    if (!ds) {
        eg__dataset_unref(input);
        return NULL;
    }
    ds->input = input;
    return ds;
}

void eg__unary_destroy(eg_dataset *ds) {
    eg__dataset_unref(((eg__unary_dataset *)ds)->input);
}

/* Raises an argument error for a transformation, releases its input and returns NULL. */
eg_dataset *eg__invalid_argument(eg_dataset *input, const char *fmt, ...) {
    char message[512];
    va_list args;
    va_start(args, fmt);
    vsnprintf(message, sizeof message, fmt, args);
    va_end(args);
    eg__error(EG_ERR_INVALID_ARGUMENT, "%s", message);
    eg__dataset_unref(input);
    return NULL;
}

/* calloc's an iterator of `size` bytes and creates the input's iterator. */
eg_status eg__unary_iter_new(eg_dataset *ds, const eg__iter_params *params, uint64_t epoch,
                             size_t size, const eg__iter_ops *ops, eg__iter **out) {
    eg__unary_iter *it = calloc(1, size);
    if (!it) return eg__error(EG_ERR_OUT_OF_MEMORY, "%s: out of host memory", ds->name);
    it->base.ops = ops;
    it->epoch = epoch;
    eg__iter_params child = eg__iter_params_child(params);
    eg_status status = eg__iter_create(((eg__unary_dataset *)ds)->input, &child, &it->input);
    if (status != EG_OK) {
        free(it);
        return status;
    }
    *out = &it->base;
    return EG_OK;
}

void eg__unary_iter_free(eg__iter *it) {
    eg__iter_free(((eg__unary_iter *)it)->input);
    free(it);
}

/* ---- filter ---- */

typedef struct filter_dataset {
    eg__unary_dataset base;
    eg_dataset_predicate_fn fn;
    void *context;
} filter_dataset;

typedef struct filter_iter {
    eg__unary_iter base;
    int64_t index;
} filter_iter;

static eg_status filter_next(eg__iter *base, eg_element *out) {
    filter_iter *it = (filter_iter *)base;
    const filter_dataset *ds = (const filter_dataset *)base->dataset;
    for (;;) {
        eg_element e = {0};
        eg_status status = eg__iter_next(it->base.input, &e);
        if (status != EG_OK) return status;
        eg_dataset_call_info info = {it->base.epoch, it->index};
        bool keep = false;
        eg__user_frame frame;
        eg__user_begin(&frame);
        status = ds->fn(&e, &keep, &info, ds->context);
        status = eg__user_end(&frame, status, NULL, base->stage, "filter", it->index);
        it->index++;
        if (status != EG_OK || !keep) eg__element_clear(&e);
        if (status != EG_OK) return status;
        if (keep) {
            *out = e;
            return EG_OK;
        }
    }
}

static const eg__iter_ops filter_iter_ops = {filter_next, eg__unary_iter_free};

static eg_status filter_iterator_new(eg_dataset *ds, const eg__iter_params *params, uint64_t epoch,
                                     eg__iter **out) {
    return eg__unary_iter_new(ds, params, epoch, sizeof(filter_iter), &filter_iter_ops, out);
}

static const eg__dataset_ops filter_ops = {filter_iterator_new, eg__unary_destroy, false};

eg_dataset *eg_dataset_filter(eg_dataset *input, eg_dataset_predicate_fn fn, void *context) {
    if (input && !fn) {
        eg__error(EG_ERR_NULL_ARGUMENT, "dataset_filter: fn is NULL");
        eg__dataset_unref(input);
        return NULL;
    }
    filter_dataset *ds = eg__unary_new(input, sizeof *ds, &filter_ops, "filter");
    if (!ds) return NULL;
    ds->fn = fn;
    ds->context = context;
    return &ds->base.base;
}

/* ---- shuffle ---- */

typedef struct shuffle_dataset {
    eg__unary_dataset base;
    int64_t buffer_size;
    uint64_t seed;
    bool reshuffle;
} shuffle_dataset;

typedef struct shuffle_iter {
    eg__unary_iter base;
    eg_element *buffer;
    int64_t count, capacity;
    bool input_done;
    uint64_t state;
} shuffle_iter;

/* splitmix64: the stream depends only on the starting state. */
static uint64_t splitmix64(uint64_t *state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static eg_status shuffle_next(eg__iter *base, eg_element *out) {
    shuffle_iter *it = (shuffle_iter *)base;
    const shuffle_dataset *ds = (const shuffle_dataset *)base->dataset;
    while (!it->input_done && it->count < ds->buffer_size) {
        if (it->count == it->capacity) {
            int64_t capacity = it->capacity ? 2 * it->capacity : 64;
            if (capacity > ds->buffer_size) capacity = ds->buffer_size;
            eg_element *buffer = realloc(it->buffer, (size_t)capacity * sizeof *buffer);
            if (!buffer) return eg__error(EG_ERR_OUT_OF_MEMORY, "shuffle: out of host memory");
            it->buffer = buffer;
            it->capacity = capacity;
        }
        eg_element e = {0};
        eg_status status = eg__iter_next(it->base.input, &e);
        if (status == EG__END) {
            it->input_done = true;
            break;
        }
        if (status != EG_OK) return status;
        it->buffer[it->count++] = e;
    }
    if (it->count == 0) return EG__END;
    /* Lemire's multiply-shift: uniform in [0, count) without a division. */
    int64_t j = (int64_t)(((unsigned __int128)splitmix64(&it->state) * (uint64_t)it->count) >> 64);
    *out = it->buffer[j];
    it->buffer[j] = it->buffer[--it->count];
    return EG_OK;
}

static void shuffle_iter_free(eg__iter *base) {
    shuffle_iter *it = (shuffle_iter *)base;
    for (int64_t i = 0; i < it->count; i++) eg__element_clear(&it->buffer[i]);
    free(it->buffer);
    eg__unary_iter_free(base);
}

static const eg__iter_ops shuffle_iter_ops = {shuffle_next, shuffle_iter_free};

static eg_status shuffle_iterator_new(eg_dataset *base, const eg__iter_params *params,
                                      uint64_t epoch, eg__iter **out) {
    eg_status status =
        eg__unary_iter_new(base, params, epoch, sizeof(shuffle_iter), &shuffle_iter_ops, out);
    if (status != EG_OK) return status;
    const shuffle_dataset *ds = (const shuffle_dataset *)base;
    shuffle_iter *it = (shuffle_iter *)*out;
    uint64_t mix = ds->seed ^ 0x5DEECE66Dull;
    uint64_t pass = ds->reshuffle ? epoch : 0;
    it->state = splitmix64(&mix) + pass * 0xD1B54A32D192ED03ull;
    return EG_OK;
}

static const eg__dataset_ops shuffle_ops = {shuffle_iterator_new, eg__unary_destroy, false};

eg_dataset *eg_dataset_shuffle(eg_dataset *input, int64_t buffer_size, uint64_t seed,
                               bool reshuffle_each_iteration) {
    if (input && buffer_size < 1)
        return eg__invalid_argument(input,
                                    "dataset_shuffle: buffer_size is %lld; it must be at least 1",
                                    (long long)buffer_size);
    char name[64];
    snprintf(name, sizeof name, "shuffle(%lld)", (long long)buffer_size);
    shuffle_dataset *ds = eg__unary_new(input, sizeof *ds, &shuffle_ops, name);
    if (!ds) return NULL;
    ds->buffer_size = buffer_size;
    ds->seed = seed;
    ds->reshuffle = reshuffle_each_iteration;
    return &ds->base.base;
}

/* ---- unbatch ---- */

typedef struct unbatch_iter {
    eg__unary_iter base;
    eg_element current;
    int64_t rows, row, index;
} unbatch_iter;

static eg_status unbatch_next(eg__iter *base, eg_element *out) {
    unbatch_iter *it = (unbatch_iter *)base;
    while (it->row >= it->rows) {
        eg__element_clear(&it->current);
        it->row = it->rows = 0;
        eg_status status = eg__iter_next(it->base.input, &it->current);
        if (status != EG_OK) return status;
        for (int c = 0; c < it->current.n_tensors; c++) {
            const eg_tensor *t = it->current.tensors[c];
            const eg_tensor *first = it->current.tensors[0];
            if (t->n_dims == 0 || first->n_dims == 0 || t->shape[0] != first->shape[0]) {
                char shape[160];
                eg__shape_format(t->n_dims, t->shape, shape, sizeof shape);
                const char *problem = t->n_dims == 0 ? "has no first axis to split"
                                                     : "differs in its first size from component 0";
                eg__element_clear(&it->current);
                return eg__error(EG_ERR_SHAPE, "unbatch: element %lld, component %d: shape %s %s",
                                 (long long)it->index, c, shape, problem);
            }
        }
        it->rows = it->current.tensors[0]->shape[0];
        it->index++;
    }
    for (int c = 0; c < it->current.n_tensors; c++) {
        const eg_tensor *t = it->current.tensors[c];
        out->tensors[c] = eg__tensor_view(t, t->n_dims - 1, t->shape + 1, t->strides + 1,
                                          t->offset + it->row * t->strides[0]);
        out->n_tensors = c + 1;
        if (!out->tensors[c]) {
            out->n_tensors = c;
            eg__element_clear(out);
            return eg_last_status();
        }
    }
    it->row++;
    return EG_OK;
}

static void unbatch_iter_free(eg__iter *base) {
    eg__element_clear(&((unbatch_iter *)base)->current);
    eg__unary_iter_free(base);
}

static const eg__iter_ops unbatch_iter_ops = {unbatch_next, unbatch_iter_free};

static eg_status unbatch_iterator_new(eg_dataset *ds, const eg__iter_params *params, uint64_t epoch,
                                      eg__iter **out) {
    return eg__unary_iter_new(ds, params, epoch, sizeof(unbatch_iter), &unbatch_iter_ops, out);
}

static const eg__dataset_ops unbatch_ops = {unbatch_iterator_new, eg__unary_destroy, false};

eg_dataset *eg_dataset_unbatch(eg_dataset *input) {
    eg__unary_dataset *ds = eg__unary_new(input, sizeof *ds, &unbatch_ops, "unbatch");
    return ds ? &ds->base : NULL;
}

/* ---- repeat, take, skip ---- */

typedef struct count_dataset {
    eg__unary_dataset base;
    int64_t count;
} count_dataset;

typedef struct repeat_iter {
    eg__iter base;
    eg__iter *input; /* NULL between passes */
    eg__iter_params params;
    int64_t passes;
    bool produced; /* the current pass gave an element */
} repeat_iter;

static eg_status repeat_next(eg__iter *base, eg_element *out) {
    repeat_iter *it = (repeat_iter *)base;
    const count_dataset *ds = (const count_dataset *)base->dataset;
    for (;;) {
        if (!it->input) {
            if (ds->count >= 0 && it->passes >= ds->count) return EG__END;
            eg_status status = eg__iter_create(ds->base.input, &it->params, &it->input);
            if (status != EG_OK) return status;
            it->produced = false;
        }
        eg_status status = eg__iter_next(it->input, out);
        if (status != EG__END) {
            if (status == EG_OK) it->produced = true;
            return status;
        }
        eg__iter_free(it->input);
        it->input = NULL;
        it->passes++;
        if (!it->produced) return EG__END; /* an empty input would repeat forever */
    }
}

static void repeat_iter_free(eg__iter *base) {
    eg__iter_free(((repeat_iter *)base)->input);
    free(base);
}

static const eg__iter_ops repeat_iter_ops = {repeat_next, repeat_iter_free};

static eg_status repeat_iterator_new(eg_dataset *base, const eg__iter_params *params,
                                     uint64_t epoch, eg__iter **out) {
    (void)epoch;
    repeat_iter *it = calloc(1, sizeof *it);
    if (!it) return eg__error(EG_ERR_OUT_OF_MEMORY, "repeat: out of host memory");
    it->base.ops = &repeat_iter_ops;
    it->params = eg__iter_params_child(params);
    const count_dataset *ds = (const count_dataset *)base;
    if (ds->count != 0) { /* the first pass now, so that statistics list the stages in order */
        eg_status status = eg__iter_create(ds->base.input, &it->params, &it->input);
        if (status != EG_OK) {
            free(it);
            return status;
        }
    }
    *out = &it->base;
    return EG_OK;
}

static const eg__dataset_ops repeat_ops = {repeat_iterator_new, eg__unary_destroy, false};

static eg_dataset *count_new(eg_dataset *input, int64_t count, const eg__dataset_ops *ops,
                             const char *what) {
    if (input && count < -1)
        return eg__invalid_argument(input, "dataset_%s: count is %lld; it must be -1 or more", what,
                                    (long long)count);
    char name[64];
    if (count < 0)
        snprintf(name, sizeof name, "%s(%s)", what, strcmp(what, "repeat") ? "all" : "forever");
    else
        snprintf(name, sizeof name, "%s(%lld)", what, (long long)count);
    count_dataset *ds = eg__unary_new(input, sizeof *ds, ops, name);
    if (!ds) return NULL;
    ds->count = count;
    return &ds->base.base;
}

eg_dataset *eg_dataset_repeat(eg_dataset *input, int64_t count) {
    return count_new(input, count, &repeat_ops, "repeat");
}

typedef struct take_iter {
    eg__unary_iter base;
    int64_t seen;
} take_iter;

static eg_status take_next(eg__iter *base, eg_element *out) {
    take_iter *it = (take_iter *)base;
    const count_dataset *ds = (const count_dataset *)base->dataset;
    if (ds->count >= 0 && it->seen >= ds->count) return EG__END;
    eg_status status = eg__iter_next(it->base.input, out);
    if (status == EG_OK) it->seen++;
    return status;
}

static const eg__iter_ops take_iter_ops = {take_next, eg__unary_iter_free};

static eg_status take_iterator_new(eg_dataset *ds, const eg__iter_params *params, uint64_t epoch,
                                   eg__iter **out) {
    return eg__unary_iter_new(ds, params, epoch, sizeof(take_iter), &take_iter_ops, out);
}

static const eg__dataset_ops take_ops = {take_iterator_new, eg__unary_destroy, false};

eg_dataset *eg_dataset_take(eg_dataset *input, int64_t count) {
    return count_new(input, count, &take_ops, "take");
}

static eg_status skip_next(eg__iter *base, eg_element *out) {
    take_iter *it = (take_iter *)base;
    const count_dataset *ds = (const count_dataset *)base->dataset;
    while (ds->count < 0 || it->seen < ds->count) {
        eg_status status = eg__iter_next(it->base.input, out);
        if (status != EG_OK) return status;
        eg__element_clear(out);
        it->seen++;
    }
    return eg__iter_next(it->base.input, out);
}

static const eg__iter_ops skip_iter_ops = {skip_next, eg__unary_iter_free};

static eg_status skip_iterator_new(eg_dataset *ds, const eg__iter_params *params, uint64_t epoch,
                                   eg__iter **out) {
    return eg__unary_iter_new(ds, params, epoch, sizeof(take_iter), &skip_iter_ops, out);
}

static const eg__dataset_ops skip_ops = {skip_iterator_new, eg__unary_destroy, false};

eg_dataset *eg_dataset_skip(eg_dataset *input, int64_t count) {
    return count_new(input, count, &skip_ops, "skip");
}
