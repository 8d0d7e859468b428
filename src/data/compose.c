/* Pipeline stages that combine or remember: cache, zip, interleave (and interleave_datasets),
 * and the options stage. They run in the consumer's thread. */

#ifndef EG_NO_CALLSITE
#define EG_NO_CALLSITE
#endif

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/internal.h"

/* ---- cache ---- */

typedef struct cache_dataset {
    eg__unary_dataset base;
    pthread_mutex_t mutex; /* guards complete, items, n_items */
    bool complete;
    eg_element *items;
    int64_t n_items;
} cache_dataset;

typedef struct cache_iter {
    eg__iter base;
    eg__iter *input; /* NULL when replaying */
    eg_element *items;
    int64_t n_items, capacity, position;
} cache_iter;

static void element_copy_ref(const eg_element *from, eg_element *to) {
    *to = *from;
    for (int i = 0; i < to->n_tensors; i++) eg__ref(to->tensors[i]);
}

static eg_status cache_next(eg__iter *base, eg_element *out) {
    cache_iter *it = (cache_iter *)base;
    cache_dataset *ds = (cache_dataset *)base->dataset;
    if (!it->input) {
        if (it->position >= ds->n_items) return EG__END;
        element_copy_ref(&ds->items[it->position++], out);
        return EG_OK;
    }
    eg_status status = eg__iter_next(it->input, out);
    if (status == EG_OK) {
        if (it->n_items == it->capacity) {
            int64_t capacity = it->capacity ? 2 * it->capacity : 256;
            eg_element *items = realloc(it->items, (size_t)capacity * sizeof *items);
            if (!items) {
                eg__element_clear(out);
                return eg__error(EG_ERR_OUT_OF_MEMORY, "cache: out of host memory");
            }
            it->items = items;
            it->capacity = capacity;
        }
        element_copy_ref(out, &it->items[it->n_items++]);
    } else if (status == EG__END) {
        pthread_mutex_lock(&ds->mutex);
        if (!ds->complete) {
            ds->complete = true;
            ds->items = it->items;
            ds->n_items = it->n_items;
            it->items = NULL;
            it->n_items = 0;
        }
        pthread_mutex_unlock(&ds->mutex);
    }
    return status;
}

static void cache_iter_free(eg__iter *base) {
    cache_iter *it = (cache_iter *)base;
    for (int64_t i = 0; i < it->n_items; i++) eg__element_clear(&it->items[i]);
    free(it->items);
    eg__iter_free(it->input);
    free(it);
}

static const eg__iter_ops cache_iter_ops = {cache_next, cache_iter_free};

static eg_status cache_iterator_new(eg_dataset *base, const eg__iter_params *params, uint64_t epoch,
                                    eg__iter **out) {
    (void)epoch;
    cache_dataset *ds = (cache_dataset *)base;
    cache_iter *it = calloc(1, sizeof *it);
    if (!it) return eg__error(EG_ERR_OUT_OF_MEMORY, "cache: out of host memory");
    it->base.ops = &cache_iter_ops;
    pthread_mutex_lock(&ds->mutex);
    bool replay = ds->complete;
    pthread_mutex_unlock(&ds->mutex);
    if (!replay) {
        eg__iter_params child = eg__iter_params_child(params);
        eg_status status = eg__iter_create(ds->base.input, &child, &it->input);
        if (status != EG_OK) {
            free(it);
            return status;
        }
    }
    *out = &it->base;
    return EG_OK;
}

static void cache_destroy(eg_dataset *base) {
    cache_dataset *ds = (cache_dataset *)base;
    for (int64_t i = 0; i < ds->n_items; i++) eg__element_clear(&ds->items[i]);
    free(ds->items);
    pthread_mutex_destroy(&ds->mutex);
    eg__unary_destroy(base);
}

static const eg__dataset_ops cache_ops = {cache_iterator_new, cache_destroy, false};

eg_dataset *eg_dataset_cache(eg_dataset *input) {
    cache_dataset *ds = eg__unary_new(input, sizeof *ds, &cache_ops, "cache");
    if (!ds) return NULL;
    pthread_mutex_init(&ds->mutex, NULL);
    return &ds->base.base;
}

/* ---- zip ---- */

typedef struct zip_dataset {
    eg_dataset base;
    int n;
    eg_dataset **inputs;
} zip_dataset;

typedef struct zip_iter {
    eg__iter base;
    int n;
    eg__iter **inputs;
} zip_iter;

static eg_status zip_next(eg__iter *base, eg_element *out) {
    zip_iter *it = (zip_iter *)base;
    for (int i = 0; i < it->n; i++) {
        eg_element e = {0};
        eg_status status = eg__iter_next(it->inputs[i], &e);
        if (status == EG_OK && out->n_tensors + e.n_tensors > EG_ELEMENT_MAX_TENSORS) {
            status = eg__error(EG_ERR_INVALID_ARGUMENT,
                               "zip: the inputs' elements have more than %d tensors in all",
                               EG_ELEMENT_MAX_TENSORS);
            eg__element_clear(&e);
        }
        if (status != EG_OK) {
            eg__element_clear(out);
            return status;
        }
        memcpy(out->tensors + out->n_tensors, e.tensors, (size_t)e.n_tensors * sizeof *e.tensors);
        out->n_tensors += e.n_tensors;
    }
    return EG_OK;
}

static void zip_iter_free(eg__iter *base) {
    zip_iter *it = (zip_iter *)base;
    for (int i = 0; i < it->n; i++) eg__iter_free(it->inputs[i]);
    free(it->inputs);
    free(it);
}

static const eg__iter_ops zip_iter_ops = {zip_next, zip_iter_free};

static eg_status zip_iterator_new(eg_dataset *base, const eg__iter_params *params, uint64_t epoch,
                                  eg__iter **out) {
    (void)epoch;
    const zip_dataset *ds = (const zip_dataset *)base;
    zip_iter *it = calloc(1, sizeof *it);
    eg__iter **inputs = calloc((size_t)ds->n, sizeof *inputs);
    if (!it || !inputs) {
        free(it);
        free(inputs);
        return eg__error(EG_ERR_OUT_OF_MEMORY, "zip: out of host memory");
    }
    it->base.ops = &zip_iter_ops;
    it->inputs = inputs;
    eg__iter_params child = eg__iter_params_child(params);
    for (; it->n < ds->n; it->n++) {
        eg_status status = eg__iter_create(ds->inputs[it->n], &child, &it->inputs[it->n]);
        if (status != EG_OK) {
            zip_iter_free(&it->base);
            return status;
        }
    }
    *out = &it->base;
    return EG_OK;
}

static void zip_destroy(eg_dataset *base) {
    zip_dataset *ds = (zip_dataset *)base;
    eg__dataset_unref_all(ds->n, ds->inputs);
    free(ds->inputs);
}

static const eg__dataset_ops zip_ops = {zip_iterator_new, zip_destroy, false};

/* Checks an array of datasets taken over by `what`; releases them all on failure. */
static bool check_inputs(int n, eg_dataset *const *inputs, const char *what) {
    if (n < 1 || n > 1024 || !inputs) {
        if (n < 1 || n > 1024)
            eg__error(EG_ERR_INVALID_ARGUMENT, "%s: n is %d; 1 to 1024 datasets allowed", what, n);
        else
            eg__error(EG_ERR_NULL_ARGUMENT, "%s: inputs is NULL", what);
        if (inputs && n > 0 && n <= 1024) eg__dataset_unref_all(n, inputs);
        return false;
    }
    for (int i = 0; i < n; i++)
        if (!inputs[i]) {
            eg__error(EG_ERR_NULL_ARGUMENT, "%s: input %d is NULL", what, i);
            eg__dataset_unref_all(n, inputs);
            return false;
        }
    return true;
}

eg_dataset *eg_dataset_zip(int n, eg_dataset *const *inputs) {
    if (!check_inputs(n, inputs, "dataset_zip")) return NULL;
    char name[64];
    snprintf(name, sizeof name, "zip(%d)", n);
    zip_dataset *ds = eg__dataset_alloc(sizeof *ds, &zip_ops, name);
    eg_dataset **held = ds ? malloc((size_t)n * sizeof *held) : NULL;
    if (!held) {
        if (ds) eg__error(EG_ERR_OUT_OF_MEMORY, "dataset_zip: out of host memory");
        free(ds);
        eg__dataset_unref_all(n, inputs);
        return NULL;
    }
    memcpy(held, inputs, (size_t)n * sizeof *held);
    ds->n = n;
    ds->inputs = held;
    return &ds->base;
}

/* ---- interleave ---- */

typedef struct interleave_dataset {
    eg__unary_dataset base;
    eg_dataset_interleave_fn fn;
    void *context;
    int cycle_length, block_length;
    int n_owned; /* interleave_datasets: the sources, indexed by the range input */
    eg_dataset **owned;
} interleave_dataset;

typedef struct interleave_iter {
    eg__unary_iter base;
    eg__iter_params params; /* for the datasets fn makes: no statistics */
    eg__iter **cycle;
    int current, in_block;
    bool input_done;
    int64_t index;
} interleave_iter;

/* Opens the dataset of the next input element in the current slot (or notes the input's end). */
static eg_status interleave_open(interleave_iter *it, const interleave_dataset *ds) {
    eg_element e = {0};
    eg_status status = eg__iter_next(it->base.input, &e);
    if (status == EG__END) {
        it->input_done = true;
        return EG_OK;
    }
    if (status != EG_OK) return status;
    eg_dataset_call_info info = {it->base.epoch, it->index};
    eg__user_frame frame;
    eg__user_begin(&frame);
    eg_dataset *made = ds->fn(&e, &info, ds->context);
    status = eg__user_end(&frame, made ? EG_OK : EG_ERR_INVALID_ARGUMENT, NULL, it->base.base.stage,
                          "interleave", it->index);
    it->index++;
    eg__element_clear(&e);
    if (status != EG_OK) {
        eg__dataset_unref(made);
        return status;
    }
    status = eg__iter_create(made, &it->params, &it->cycle[it->current]);
    eg__dataset_unref(made);
    it->in_block = 0;
    return status;
}

static eg_status interleave_next(eg__iter *base, eg_element *out) {
    interleave_iter *it = (interleave_iter *)base;
    const interleave_dataset *ds = (const interleave_dataset *)base->dataset;
    for (;;) {
        if (!it->cycle[it->current] && !it->input_done) {
            eg_status status = interleave_open(it, ds);
            if (status != EG_OK) return status;
        }
        eg__iter *source = it->cycle[it->current];
        if (!source) {
            bool any = false;
            for (int i = 0; i < ds->cycle_length; i++) any = any || it->cycle[i];
            if (!any) return EG__END; /* the input is done too */
            it->current = (it->current + 1) % ds->cycle_length;
            it->in_block = 0;
            continue;
        }
        eg_status status = eg__iter_next(source, out);
        if (status == EG_OK) {
            if (++it->in_block >= ds->block_length) {
                it->current = (it->current + 1) % ds->cycle_length;
                it->in_block = 0;
            }
            return EG_OK;
        }
        if (status != EG__END) return status;
        eg__iter_free(source); /* replaced by the next input element's dataset */
        it->cycle[it->current] = NULL;
        it->in_block = 0;
    }
}

static void interleave_iter_free(eg__iter *base) {
    interleave_iter *it = (interleave_iter *)base;
    const interleave_dataset *ds = (const interleave_dataset *)base->dataset;
    if (it->cycle)
        for (int i = 0; i < ds->cycle_length; i++) eg__iter_free(it->cycle[i]);
    free(it->cycle);
    eg__unary_iter_free(base);
}

static const eg__iter_ops interleave_iter_ops = {interleave_next, interleave_iter_free};

static eg_status interleave_iterator_new(eg_dataset *base, const eg__iter_params *params,
                                         uint64_t epoch, eg__iter **out) {
    const interleave_dataset *ds = (const interleave_dataset *)base;
    eg__iter **cycle = calloc((size_t)ds->cycle_length, sizeof *cycle);
    if (!cycle) return eg__error(EG_ERR_OUT_OF_MEMORY, "interleave: out of host memory");
    eg_status status =
        eg__unary_iter_new(base, params, epoch, sizeof(interleave_iter), &interleave_iter_ops, out);
    if (status != EG_OK) {
        free(cycle);
        return status;
    }
    interleave_iter *it = (interleave_iter *)*out;
    it->cycle = cycle;
    it->params = eg__iter_params_child(params);
    it->params.stats = false;
    return EG_OK;
}

static void interleave_destroy(eg_dataset *base) {
    interleave_dataset *ds = (interleave_dataset *)base;
    eg__dataset_unref_all(ds->n_owned, ds->owned);
    free(ds->owned);
    eg__unary_destroy(base);
}

static const eg__dataset_ops interleave_ops = {interleave_iterator_new, interleave_destroy, false};

eg_dataset *eg_dataset_interleave(eg_dataset *input, eg_dataset_interleave_fn fn, void *context,
                                  int cycle_length, int block_length) {
    if (input && !fn) {
        eg__error(EG_ERR_NULL_ARGUMENT, "dataset_interleave: fn is NULL");
        eg__dataset_unref(input);
        return NULL;
    }
    if (input && (cycle_length < 1 || cycle_length > 4096 || block_length < 1))
        return eg__invalid_argument(
            input,
            "dataset_interleave: cycle_length %d and block_length %d; cycle_length must "
            "be 1 to 4096 and block_length at least 1",
            cycle_length, block_length);
    char name[64];
    snprintf(name, sizeof name, "interleave(%d, %d)", cycle_length, block_length);
    interleave_dataset *ds = eg__unary_new(input, sizeof *ds, &interleave_ops, name);
    if (!ds) return NULL;
    ds->fn = fn;
    ds->context = context;
    ds->cycle_length = cycle_length;
    ds->block_length = block_length;
    return &ds->base.base;
}

/* interleave_datasets' fn: the source whose number the range input gives. */
static eg_dataset *pick_source(const eg_element *element, const eg_dataset_call_info *info,
                               void *context) {
    (void)info;
    interleave_dataset *ds = context;
    int64_t i = *(const int64_t *)eg__data(element->tensors[0]);
    return eg_dataset_retain(ds->owned[i]);
}

eg_dataset *eg_dataset_interleave_datasets(int n, eg_dataset *const *inputs, int block_length) {
    if (!check_inputs(n, inputs, "dataset_interleave_datasets")) return NULL;
    if (block_length < 1) {
        eg__error(EG_ERR_INVALID_ARGUMENT,
                  "dataset_interleave_datasets: block_length is %d; it must be at least 1",
                  block_length);
        eg__dataset_unref_all(n, inputs);
        return NULL;
    }
    eg_dataset **owned = malloc((size_t)n * sizeof *owned);
    if (!owned) {
        eg__error(EG_ERR_OUT_OF_MEMORY, "dataset_interleave_datasets: out of host memory");
        eg__dataset_unref_all(n, inputs);
        return NULL;
    }
    memcpy(owned, inputs, (size_t)n * sizeof *owned);
    eg_dataset *range = eg_dataset_range(0, n, 1);
    eg_dataset *ds =
        range ? eg_dataset_interleave(range, pick_source, NULL, n, block_length) : NULL;
    if (!ds) {
        eg__dataset_unref_all(n, owned);
        free(owned);
        return NULL;
    }
    interleave_dataset *node = (interleave_dataset *)ds;
    node->context = node;
    node->owned = owned;
    node->n_owned = n;
    snprintf(ds->name, sizeof ds->name, "interleave_datasets(%d, %d)", n, block_length);
    return ds;
}

/* ---- options ---- */

typedef struct options_dataset {
    eg__unary_dataset base;
    eg_dataset_options options;
} options_dataset;

static eg_status options_iterator_new(eg_dataset *base, const eg__iter_params *params,
                                      uint64_t epoch, eg__iter **out) {
    (void)epoch;
    const options_dataset *ds = (const options_dataset *)base;
    if (params->context) {
        if (ds->options.cpu_budget > 0) params->context->cpu_budget = ds->options.cpu_budget;
        if (ds->options.ram_budget > 0) params->context->ram_budget = ds->options.ram_budget;
    }
    return eg__iter_create(ds->base.input, params, out);
}

static const eg__dataset_ops options_ops = {options_iterator_new, eg__unary_destroy, true};

eg_dataset *eg_dataset_with_options(eg_dataset *input, const eg_dataset_options *options) {
    if (input && !options) {
        eg__error(EG_ERR_NULL_ARGUMENT, "dataset_with_options: options is NULL");
        eg__dataset_unref(input);
        return NULL;
    }
    if (input && (options->cpu_budget < 0 || options->cpu_budget > EG_DATASET_MAX_PARALLELISM ||
                  options->ram_budget < 0))
        return eg__invalid_argument(
            input,
            "dataset_with_options: cpu_budget %d (0 to %d) or ram_budget %lld "
            "(>= 0) out of range",
            options->cpu_budget, EG_DATASET_MAX_PARALLELISM, (long long)options->ram_budget);
    options_dataset *ds = eg__unary_new(input, sizeof *ds, &options_ops, "options");
    if (!ds) return NULL;
    ds->options = *options;
    return &ds->base.base;
}
