/* Pipeline sources: tensor slices (and the file readers built on them: IDX, MNIST, .npy, CSV), a
 * range of integers, and generator callbacks. */

#ifndef EG_NO_CALLSITE
#define EG_NO_CALLSITE
#endif

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/csv.h"
#include "data/internal.h"
#include "eagle/checkpoint.h"
#include "eagle/io.h"

/* ---- tensor slices ---- */

typedef struct slices_dataset {
    eg_dataset base;
    int n;
    eg_tensor *tensors[EG_ELEMENT_MAX_TENSORS]; /* references, no scope */
    int64_t rows;
} slices_dataset;

typedef struct slices_iter {
    eg__iter base;
    slices_dataset *ds;
    int64_t row;
} slices_iter;

/* Row `row` of t: a view without the first axis. NULL + error when out of memory. */
static eg_tensor *row_view(const eg_tensor *t, int64_t row) {
    return eg__tensor_view(t, t->n_dims - 1, t->shape + 1, t->strides + 1,
                           t->offset + row * t->strides[0]);
}

static eg_status slices_next(eg__iter *base, eg_element *out) {
    slices_iter *it = (slices_iter *)base;
    if (it->row >= it->ds->rows) return EG__END;
    for (int i = 0; i < it->ds->n; i++) {
        out->tensors[i] = row_view(it->ds->tensors[i], it->row);
        if (!out->tensors[i]) {
            out->n_tensors = i;
            eg__element_clear(out);
            return eg_last_status();
        }
    }
    out->n_tensors = it->ds->n;
    it->row++;
    return EG_OK;
}

static void plain_iter_free(eg__iter *it) {
    free(it);
}

static const eg__iter_ops slices_iter_ops = {slices_next, plain_iter_free};

static eg_status slices_iterator_new(eg_dataset *ds, const eg__iter_params *params, uint64_t epoch,
                                     eg__iter **out) {
    (void)params, (void)epoch;
    slices_iter *it = calloc(1, sizeof *it);
    if (!it) return eg__error(EG_ERR_OUT_OF_MEMORY, "%s: out of host memory", ds->name);
    it->base.ops = &slices_iter_ops;
    it->ds = (slices_dataset *)ds;
    *out = &it->base;
    return EG_OK;
}

static void slices_destroy(eg_dataset *base) {
    slices_dataset *ds = (slices_dataset *)base;
    for (int i = 0; i < ds->n; i++) eg__unref(ds->tensors[i]);
}

static const eg__dataset_ops slices_ops = {slices_iterator_new, slices_destroy, false};

/* Checks the tensors and builds the node; `name` starts error messages. Takes over the n
 * references (unscoped or scoped alike: they are only ever unref'd). */
static eg_dataset *slices_new(int n, eg_tensor **tensors, const char *name, const char *what) {
    for (int i = 0; i < n; i++) {
        char shape[160];
        if (tensors[i]->n_dims == 0) {
            eg__error(EG_ERR_SHAPE, "%s: %s %d is 0-d; slicing needs a first axis", name, what, i);
            goto fail;
        }
        if (tensors[i]->shape[0] != tensors[0]->shape[0]) {
            eg__error(EG_ERR_SHAPE, "%s: %s %d has %lld rows (shape %s), %s 0 has %lld", name, what,
                      i, (long long)tensors[i]->shape[0],
                      eg__shape_format(tensors[i]->n_dims, tensors[i]->shape, shape, sizeof shape),
                      what, (long long)tensors[0]->shape[0]);
            goto fail;
        }
        if (!tensors[i]->storage && !eg_tensor_data(tensors[i])) goto fail;
    }
    slices_dataset *ds = eg__dataset_alloc(sizeof *ds, &slices_ops, name);
    if (!ds) goto fail;
    ds->n = n;
    memcpy(ds->tensors, tensors, (size_t)n * sizeof *tensors);
    ds->rows = tensors[0]->shape[0];
    return &ds->base;
fail:
    for (int i = 0; i < n; i++) eg__unref(tensors[i]);
    return NULL;
}

eg_dataset *eg__dataset_slices_take(int n, eg_tensor **tensors, const char *name) {
    return slices_new(n, tensors, name, "tensor");
}

eg_dataset *eg_dataset_from_tensor_slices(int n, eg_tensor *const *tensors_in) {
    const eg_tensor *const *tensors = eg__const_tensors(tensors_in);
    const char *name = "dataset_from_tensor_slices";
    if (n < 1 || n > EG_ELEMENT_MAX_TENSORS) {
        eg__error(EG_ERR_INVALID_ARGUMENT, "%s: n is %d; 1 to %d tensors allowed", name, n,
                  EG_ELEMENT_MAX_TENSORS);
        return NULL;
    }
    if (!tensors) {
        eg__error(EG_ERR_NULL_ARGUMENT, "%s: tensors is NULL", name);
        return NULL;
    }
    eg_tensor *held[EG_ELEMENT_MAX_TENSORS];
    for (int i = 0; i < n; i++) {
        if (!tensors[i]) {
            eg__error(EG_ERR_NULL_ARGUMENT, "%s: tensor %d is NULL", name, i);
            return NULL;
        }
        held[i] = (eg_tensor *)tensors[i];
    }
    for (int i = 0; i < n; i++) eg__ref(held[i]);
    eg_dataset *ds = slices_new(n, held, name, "tensor");
    if (ds)
        snprintf(ds->name, sizeof ds->name, "from_tensor_slices(%lld)",
                 (long long)((slices_dataset *)ds)->rows);
    return ds;
}

/* Files read now; their tensors belong to no scope. */
static eg_dataset *files_dataset(int n, const char *const *paths, const char *name,
                                 eg_tensor *(*read)(const char *path)) {
    if (n < 1 || n > EG_ELEMENT_MAX_TENSORS) {
        eg__error(EG_ERR_INVALID_ARGUMENT, "%s: n is %d; 1 to %d files allowed", name, n,
                  EG_ELEMENT_MAX_TENSORS);
        return NULL;
    }
    if (!paths) {
        eg__error(EG_ERR_NULL_ARGUMENT, "%s: paths is NULL", name);
        return NULL;
    }
    eg_tensor *tensors[EG_ELEMENT_MAX_TENSORS];
    eg__scope_suspend();
    int read_count = 0;
    for (; read_count < n; read_count++) {
        if (!paths[read_count]) {
            eg__error(EG_ERR_NULL_ARGUMENT, "%s: path %d is NULL", name, read_count);
            break;
        }
        if (!(tensors[read_count] = read(paths[read_count]))) break;
    }
    eg__scope_resume();
    if (read_count < n) {
        for (int i = 0; i < read_count; i++) eg__unref(tensors[i]);
        return NULL;
    }
    eg_dataset *ds = slices_new(n, tensors, name, "file");
    if (ds)
        snprintf(ds->name, sizeof ds->name, "%s(%lld)", name + strlen("dataset_from_"),
                 (long long)((slices_dataset *)ds)->rows);
    return ds;
}

static eg_tensor *read_idx(const char *path) {
    return eg_idx_read(path);
}
static eg_tensor *read_npy(const char *path) {
    return eg_npy_read(path);
}

eg_dataset *eg_dataset_from_idx(int n, const char *const *paths) {
    return files_dataset(n, paths, "dataset_from_idx", read_idx);
}

eg_dataset *eg_dataset_from_npy(int n, const char *const *paths) {
    return files_dataset(n, paths, "dataset_from_npy", read_npy);
}

eg_dataset *eg_dataset_from_mnist(const char *directory, bool train) {
    eg_tensor *tensors[2];
    eg__scope_suspend();
    eg_status status = eg_mnist_load(directory, train, &tensors[0], &tensors[1]);
    eg__scope_resume();
    if (status != EG_OK) return NULL;
    eg_dataset *ds = slices_new(2, tensors, "dataset_from_mnist", "tensor");
    if (ds)
        snprintf(ds->name, sizeof ds->name, "mnist(%s, %lld)", train ? "train" : "test",
                 (long long)((slices_dataset *)ds)->rows);
    return ds;
}

eg_dataset *eg_dataset_from_csv_with_info(const char *path, const eg_csv_options *options,
                                          eg_csv_info *info) {
    eg_tensor *tensors[2] = {NULL, NULL};
    eg__scope_suspend();
    eg_status status =
        eg__csv_read_tensors("dataset_from_csv", path, options, &tensors[0], &tensors[1], info);
    eg__scope_resume();
    if (status != EG_OK) return NULL;
    int64_t rows = tensors[0]->shape[0];
    eg_dataset *ds = slices_new(tensors[1] ? 2 : 1, tensors, "dataset_from_csv", "tensor");
    if (ds)
        snprintf(ds->name, sizeof ds->name, "csv(%lld)", (long long)rows);
    else
        eg_csv_info_free(info);
    return ds;
}

eg_dataset *eg_dataset_from_csv(const char *path, const eg_csv_options *options) {
    return eg_dataset_from_csv_with_info(path, options, NULL);
}

/* ---- range ---- */

typedef struct range_dataset {
    eg_dataset base;
    int64_t start, stop, step;
} range_dataset;

typedef struct range_iter {
    eg__iter base;
    range_dataset *ds;
    int64_t next;
    bool done;
} range_iter;

static eg_status range_next(eg__iter *base, eg_element *out) {
    range_iter *it = (range_iter *)base;
    const range_dataset *ds = it->ds;
    if (it->done || (ds->step > 0 ? it->next >= ds->stop : it->next <= ds->stop)) return EG__END;
    eg_tensor *t = eg__tensor_alloc(EG_DTYPE_I64, 0, NULL, eg_device_cpu());
    if (!t) return eg_last_status();
    *(int64_t *)eg__data(t) = it->next;
    out->tensors[0] = t;
    out->n_tensors = 1;
    if (__builtin_add_overflow(it->next, ds->step, &it->next)) it->done = true;
    return EG_OK;
}

static const eg__iter_ops range_iter_ops = {range_next, plain_iter_free};

static eg_status range_iterator_new(eg_dataset *ds, const eg__iter_params *params, uint64_t epoch,
                                    eg__iter **out) {
    (void)params, (void)epoch;
    range_iter *it = calloc(1, sizeof *it);
    if (!it) return eg__error(EG_ERR_OUT_OF_MEMORY, "range: out of host memory");
    it->base.ops = &range_iter_ops;
    it->ds = (range_dataset *)ds;
    it->next = it->ds->start;
    *out = &it->base;
    return EG_OK;
}

static void nothing_to_destroy(eg_dataset *ds) {
    (void)ds;
}

static const eg__dataset_ops range_ops = {range_iterator_new, nothing_to_destroy, false};

eg_dataset *eg_dataset_range(int64_t start, int64_t stop, int64_t step) {
    if (step == 0) {
        eg__error(EG_ERR_INVALID_ARGUMENT, "dataset_range: step is 0");
        return NULL;
    }
    char name[64];
    snprintf(name, sizeof name, "range(%lld, %lld, %lld)", (long long)start, (long long)stop,
             (long long)step);
    range_dataset *ds = eg__dataset_alloc(sizeof *ds, &range_ops, name);
    if (!ds) return NULL;
    ds->start = start;
    ds->stop = stop;
    ds->step = step;
    return &ds->base;
}

/* ---- generator ---- */

typedef struct generator_dataset {
    eg_dataset base;
    eg_dataset_generator generator;
} generator_dataset;

typedef struct generator_iter {
    eg__iter base;
    generator_dataset *ds;
    uint64_t epoch;
    int64_t index;
    void *state;
    bool started, done;
} generator_iter;

static eg_status generator_next(eg__iter *base, eg_element *out) {
    generator_iter *it = (generator_iter *)base;
    const eg_dataset_generator *g = &it->ds->generator;
    if (it->done) return EG__END;
    eg__user_frame frame;
    if (!it->started) {
        it->started = true;
        if (g->start) {
            eg__user_begin(&frame);
            eg_status status = g->start(g->context, it->epoch, &it->state);
            status = eg__user_end(&frame, status, NULL, NULL, "generator start", 0);
            if (status != EG_OK) {
                it->state = NULL;
                it->done = true;
                return status;
            }
        }
    }
    bool end = false;
    eg__user_begin(&frame);
    eg_status status = g->next(g->context, it->state, it->index, out, &end);
    if (end && status == EG_OK) out->n_tensors = 0;
    status = eg__user_end(&frame, status, end ? NULL : out, it->base.stage, "generator", it->index);
    if (status != EG_OK) return status;
    if (end) {
        it->done = true;
        return EG__END;
    }
    it->index++;
    return EG_OK;
}

static void generator_iter_free(eg__iter *base) {
    generator_iter *it = (generator_iter *)base;
    const eg_dataset_generator *g = &it->ds->generator;
    if (it->started && g->finish) {
        eg__user_frame frame;
        eg__user_begin(&frame);
        g->finish(g->context, it->state);
        /* Nowhere to report a failure: the iterator is going (errors are set aside around it). */
        if (eg__user_end(&frame, EG_OK, NULL, NULL, "generator finish", 0) != EG_OK)
            eg_clear_error();
    }
    free(it);
}

static const eg__iter_ops generator_iter_ops = {generator_next, generator_iter_free};

static eg_status generator_iterator_new(eg_dataset *ds, const eg__iter_params *params,
                                        uint64_t epoch, eg__iter **out) {
    (void)params;
    generator_iter *it = calloc(1, sizeof *it);
    if (!it) return eg__error(EG_ERR_OUT_OF_MEMORY, "generator: out of host memory");
    it->base.ops = &generator_iter_ops;
    it->ds = (generator_dataset *)ds;
    it->epoch = epoch;
    *out = &it->base;
    return EG_OK;
}

static void generator_destroy(eg_dataset *base) {
    generator_dataset *ds = (generator_dataset *)base;
    if (ds->generator.destroy) ds->generator.destroy(ds->generator.context);
}

static const eg__dataset_ops generator_ops = {generator_iterator_new, generator_destroy, false};

eg_dataset *eg_dataset_from_generator(const eg_dataset_generator *generator) {
    if (!generator || !generator->next) {
        eg__error(EG_ERR_NULL_ARGUMENT, "dataset_from_generator: %s is NULL",
                  generator ? "generator->next" : "generator");
        if (generator && generator->destroy) generator->destroy(generator->context);
        return NULL;
    }
    generator_dataset *ds = eg__dataset_alloc(sizeof *ds, &generator_ops, "generator");
    if (!ds) {
        if (generator->destroy) generator->destroy(generator->context);
        return NULL;
    }
    ds->generator = *generator;
    return &ds->base;
}
