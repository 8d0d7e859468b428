/* Pipeline stages that stack elements into batches: batch, padded_batch (to the longest in the
 * batch or to fixed padded shapes, a padding value per component) and bucket_by_sequence_length
 * (padded batches of elements of similar length). They run in the consumer's thread. */

#ifndef EG_NO_CALLSITE
#define EG_NO_CALLSITE
#endif

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/internal.h"

/* How a batch's components are padded. */
typedef struct padding_spec {
    bool padded; /* false: a plain batch, whose elements must agree in shape */
    double values[EG_ELEMENT_MAX_TENSORS];
    eg_padded_shape shapes[EG_ELEMENT_MAX_TENSORS];
} padding_spec;

/* The elements being stacked: items[i] is input element indices[i] (first_index + i when indices
 * is NULL), for messages. */
typedef struct batch_items {
    eg_element *items;
    const int64_t *indices;
    int64_t first_index, n;
} batch_items;

static int64_t item_index(const batch_items *b, int64_t i) {
    return b->indices ? b->indices[i] : b->first_index + i;
}

/* Copies t (any layout) into the (padded) box starting at dst whose row-major shape is `box`. */
static eg_status copy_padded(const eg_tensor *t, char *dst, const int64_t *box) {
    size_t size = eg_dtype_size(t->dtype);
    size_t bytes = (size_t)t->n_elems * size;
    if (t->n_elems == 0) return EG_OK;
    char *src = malloc(bytes);
    if (!src) return eg__error(EG_ERR_OUT_OF_MEMORY, "padded_batch: out of host memory");
    eg_status status = eg_tensor_copy_to_host(t, src, bytes);
    if (status != EG_OK) {
        free(src);
        return status;
    }
    int n_dims = t->n_dims;
    if (n_dims == 0) {
        memcpy(dst, src, size);
        free(src);
        return EG_OK;
    }
    int64_t row = t->shape[n_dims - 1];
    int64_t n_rows = t->n_elems / row;
    int64_t index[EG_MAX_DIMS] = {0};
    for (int64_t r = 0; r < n_rows; r++) {
        int64_t offset = 0;
        for (int d = 0; d < n_dims - 1; d++) offset = offset * box[d] + index[d];
        offset *= box[n_dims - 1];
        memcpy(dst + (size_t)offset * size, src + (size_t)(r * row) * size, (size_t)row * size);
        for (int d = n_dims - 2; d >= 0; d--) {
            if (++index[d] < t->shape[d]) break;
            index[d] = 0;
        }
    }
    free(src);
    return EG_OK;
}

/* Fills n_elems elements at dst with value. */
static void fill_value(char *dst, eg_dtype dtype, int64_t n_elems, double value) {
    if (n_elems <= 0) return;
    size_t size = eg_dtype_size(dtype);
    eg__store_from_double(dst, dtype, 0, value);
    size_t done = size, total = (size_t)n_elems * size;
    while (done < total) {
        size_t chunk = done < total - done ? done : total - done;
        memcpy(dst + done, dst, chunk);
        done += chunk;
    }
}

/* The padded box of component c: checks every item against the first and the padded shape.
 * min_first (may be NULL) is the least size of axis 0 when that axis pads to the longest. */
static eg_status padded_box(const char *what, const padding_spec *spec, const batch_items *b, int c,
                            int64_t min_first, int64_t *box) {
    const eg_tensor *first = b->items[0].tensors[c];
    const eg_padded_shape *padded = &spec->shapes[c];
    for (int d = 0; d < first->n_dims; d++) box[d] = 0;
    for (int64_t i = 0; i < b->n; i++) {
        const eg_tensor *t = b->items[i].tensors[c];
        char shape[160], first_shape[160];
        eg__shape_format(t->n_dims, t->shape, shape, sizeof shape);
        eg__shape_format(first->n_dims, first->shape, first_shape, sizeof first_shape);
        if (t->n_dims != first->n_dims)
            return eg__error(EG_ERR_SHAPE,
                             "%s: element %lld, component %d: shape %s has %d dimensions, %s of "
                             "the batch's first element %d",
                             what, (long long)item_index(b, i), c, shape, t->n_dims, first_shape,
                             first->n_dims);
        if (padded->n_dims > 0 && t->n_dims != padded->n_dims)
            return eg__error(EG_ERR_SHAPE,
                             "%s: element %lld, component %d: shape %s has %d dimensions; its "
                             "padded shape has %d",
                             what, (long long)item_index(b, i), c, shape, t->n_dims,
                             padded->n_dims);
        for (int d = 0; d < t->n_dims; d++) {
            int64_t fixed = padded->n_dims > 0 ? padded->dims[d] : -1;
            if (fixed >= 0 && t->shape[d] > fixed)
                return eg__error(EG_ERR_SHAPE,
                                 "%s: element %lld, component %d: size %lld of axis %d is larger "
                                 "than the padded shape's %lld",
                                 what, (long long)item_index(b, i), c, (long long)t->shape[d], d,
                                 (long long)fixed);
            if (t->shape[d] > box[d]) box[d] = t->shape[d];
        }
    }
    for (int d = 0; d < first->n_dims; d++) {
        int64_t fixed = padded->n_dims > 0 ? padded->dims[d] : -1;
        if (fixed >= 0)
            box[d] = fixed;
        else if (d == 0 && min_first > box[0])
            box[0] = min_first;
    }
    return EG_OK;
}

/* Stacks the items into *out; min_first[c] (min_first may be NULL) as in padded_box. */
static eg_status stack(const char *what, const padding_spec *spec, const batch_items *b,
                       const int64_t *min_first, eg_element *out) {
    int n_components = b->items[0].n_tensors;
    for (int64_t i = 1; i < b->n; i++)
        if (b->items[i].n_tensors != n_components)
            return eg__error(EG_ERR_INVALID_ARGUMENT,
                             "%s: element %lld has %d components, the batch's first element %d",
                             what, (long long)item_index(b, i), b->items[i].n_tensors,
                             n_components);
    out->n_tensors = 0;
    for (int c = 0; c < n_components; c++) {
        const eg_tensor *first = b->items[0].tensors[c];
        int64_t box[EG_MAX_DIMS];
        for (int d = 0; d < first->n_dims; d++) box[d] = first->shape[d];
        for (int64_t i = 1; i < b->n; i++) {
            const eg_tensor *t = b->items[i].tensors[c];
            if (t->dtype != first->dtype)
                return eg__error(EG_ERR_DTYPE,
                                 "%s: element %lld, component %d: dtype %s differs from %s of the "
                                 "batch's first element",
                                 what, (long long)item_index(b, i), c, eg_dtype_name(t->dtype),
                                 eg_dtype_name(first->dtype));
            if (!spec->padded &&
                (t->n_dims != first->n_dims ||
                 memcmp(t->shape, first->shape, (size_t)t->n_dims * sizeof *t->shape))) {
                char shape[160], first_shape[160];
                eg__shape_format(t->n_dims, t->shape, shape, sizeof shape);
                eg__shape_format(first->n_dims, first->shape, first_shape, sizeof first_shape);
                return eg__error(EG_ERR_SHAPE,
                                 "%s: element %lld, component %d: shape %s differs from %s of the "
                                 "batch's first element; use eg_dataset_padded_batch for items of "
                                 "varying shape",
                                 what, (long long)item_index(b, i), c, shape, first_shape);
            }
        }
        if (spec->padded) {
            eg_status status = padded_box(what, spec, b, c, min_first ? min_first[c] : -1, box);
            if (status != EG_OK) {
                eg__element_clear(out);
                return status;
            }
        }
        if (first->n_dims + 1 > EG_MAX_DIMS) {
            eg__element_clear(out);
            return eg__error(EG_ERR_SHAPE,
                             "%s: component %d has %d dimensions; batching adds one "
                             "and at most %d are allowed",
                             what, c, first->n_dims, EG_MAX_DIMS);
        }
        int64_t shape[EG_MAX_DIMS];
        shape[0] = b->n;
        memcpy(shape + 1, box, (size_t)first->n_dims * sizeof *box);
        eg_tensor *batch =
            eg__tensor_alloc(first->dtype, first->n_dims + 1, shape, eg_device_cpu());
        if (!batch) {
            eg__element_clear(out);
            return eg_last_status();
        }
        out->tensors[out->n_tensors++] = batch;
        size_t size = eg_dtype_size(first->dtype);
        int64_t box_elems = eg__shape_n_elems(first->n_dims, box);
        char *dst = eg__data(batch);
        if (spec->padded) fill_value(dst, first->dtype, b->n * box_elems, spec->values[c]);
        for (int64_t i = 0; i < b->n; i++) {
            const eg_tensor *t = b->items[i].tensors[c];
            char *slot = dst + (size_t)(i * box_elems) * size;
            eg_status status = spec->padded
                                   ? copy_padded(t, slot, box)
                                   : eg_tensor_copy_to_host(t, slot, (size_t)box_elems * size);
            if (status != EG_OK) {
                eg__element_clear(out);
                return status;
            }
        }
    }
    return EG_OK;
}

/* Checks the padded shapes of options (the part both padded stages share). */
static bool padded_shapes_valid(const eg_padded_batch_options *options, const char *what,
                                char *message, size_t size) {
    for (int c = 0; c < EG_ELEMENT_MAX_TENSORS; c++) {
        const eg_padded_shape *shape = &options->padded_shapes[c];
        if (shape->n_dims < 0 || shape->n_dims > EG_MAX_DIMS) {
            snprintf(message, size, "%s: padded shape of component %d has %d dimensions (0 to %d)",
                     what, c, shape->n_dims, EG_MAX_DIMS);
            return false;
        }
        for (int d = 0; d < shape->n_dims; d++)
            if (shape->dims[d] < -1) {
                snprintf(message, size,
                         "%s: padded shape of component %d: size %lld of axis %d (-1 for the "
                         "longest, or >= 0)",
                         what, c, (long long)shape->dims[d], d);
                return false;
            }
    }
    return true;
}

static padding_spec spec_from_options(const eg_padded_batch_options *options) {
    padding_spec spec = {.padded = true};
    memcpy(spec.values, options->padding_values, sizeof spec.values);
    memcpy(spec.shapes, options->padded_shapes, sizeof spec.shapes);
    return spec;
}

/* ---- batch and padded_batch ---- */

typedef struct batch_dataset {
    eg__unary_dataset base;
    int64_t batch_size;
    bool drop_remainder;
    padding_spec spec;
} batch_dataset;

typedef struct batch_iter {
    eg__unary_iter base;
    eg_element *items;
    int64_t consumed; /* input elements taken so far (for messages) */
    bool done;
} batch_iter;

static eg_status batch_next(eg__iter *base, eg_element *out) {
    batch_iter *it = (batch_iter *)base;
    const batch_dataset *ds = (const batch_dataset *)base->dataset;
    if (it->done) return EG__END;
    int64_t n = 0;
    eg_status status = EG_OK;
    int64_t first_index = it->consumed;
    while (n < ds->batch_size) {
        status = eg__iter_next(it->base.input, &it->items[n]);
        if (status != EG_OK) break;
        n++;
        it->consumed++;
    }
    if (status == EG__END) it->done = true;
    if (status == EG_OK || (status == EG__END && n > 0 && !ds->drop_remainder)) {
        batch_items b = {it->items, NULL, first_index, n};
        status = stack(ds->spec.padded ? "padded_batch" : "batch", &ds->spec, &b, NULL, out);
    }
    for (int64_t i = 0; i < n; i++) eg__element_clear(&it->items[i]);
    return status;
}

static void batch_iter_free(eg__iter *base) {
    free(((batch_iter *)base)->items);
    eg__unary_iter_free(base);
}

static const eg__iter_ops batch_iter_ops = {batch_next, batch_iter_free};

static eg_status batch_iterator_new(eg_dataset *base, const eg__iter_params *params, uint64_t epoch,
                                    eg__iter **out) {
    const batch_dataset *ds = (const batch_dataset *)base;
    eg_element *items = calloc((size_t)ds->batch_size, sizeof *items);
    if (!items) return eg__error(EG_ERR_OUT_OF_MEMORY, "%s: out of host memory", base->name);
    eg_status status =
        eg__unary_iter_new(base, params, epoch, sizeof(batch_iter), &batch_iter_ops, out);
    if (status != EG_OK) {
        free(items);
        return status;
    }
    ((batch_iter *)*out)->items = items;
    return EG_OK;
}

static const eg__dataset_ops batch_ops = {batch_iterator_new, eg__unary_destroy, false};

#define MAX_BATCH_SIZE ((int64_t)1 << 30)

static eg_dataset *batch_new(eg_dataset *input, int64_t batch_size, bool drop_remainder,
                             const padding_spec *spec) {
    const char *what = spec->padded ? "dataset_padded_batch" : "dataset_batch";
    if (input && (batch_size < 1 || batch_size > MAX_BATCH_SIZE))
        return eg__invalid_argument(input, "%s: batch_size is %lld; it must be 1 to 2^30", what,
                                    (long long)batch_size);
    char name[64];
    snprintf(name, sizeof name, "%s(%lld%s)", spec->padded ? "padded_batch" : "batch",
             (long long)batch_size, drop_remainder ? ", drop_remainder" : "");
    batch_dataset *ds = eg__unary_new(input, sizeof *ds, &batch_ops, name);
    if (!ds) return NULL;
    ds->batch_size = batch_size;
    ds->drop_remainder = drop_remainder;
    ds->spec = *spec;
    return &ds->base.base;
}

eg_dataset *eg_dataset_batch(eg_dataset *input, int64_t batch_size, bool drop_remainder) {
    padding_spec spec = {.padded = false};
    return batch_new(input, batch_size, drop_remainder, &spec);
}

eg_dataset *eg_dataset_padded_batch(eg_dataset *input, int64_t batch_size, bool drop_remainder,
                                    double padding_value) {
    padding_spec spec = {.padded = true};
    for (int c = 0; c < EG_ELEMENT_MAX_TENSORS; c++) spec.values[c] = padding_value;
    return batch_new(input, batch_size, drop_remainder, &spec);
}

eg_dataset *eg_dataset_padded_batch_with_options(eg_dataset *input, int64_t batch_size,
                                                 const eg_padded_batch_options *options) {
    eg_padded_batch_options defaults = {0};
    if (!options) options = &defaults;
    char message[256];
    if (input &&
        !padded_shapes_valid(options, "dataset_padded_batch_with_options", message, sizeof message))
        return eg__invalid_argument(input, "%s", message);
    padding_spec spec = spec_from_options(options);
    return batch_new(input, batch_size, options->drop_remainder, &spec);
}

/* ---- bucket_by_sequence_length ---- */

#define MAX_BOUNDARIES 1024

typedef struct bucket_dataset {
    eg__unary_dataset base;
    int length_component;
    int n_buckets; /* n_boundaries + 1 */
    int64_t boundaries[MAX_BOUNDARIES];
    int64_t batch_sizes[MAX_BOUNDARIES + 1];
    bool pad_to_boundary, drop_remainder;
    padding_spec spec;
} bucket_dataset;

typedef struct bucket_buffer {
    eg_element *items;
    int64_t *indices; /* input element numbers, for messages */
    int64_t count, capacity;
} bucket_buffer;

typedef struct bucket_iter {
    eg__unary_iter base;
    bucket_buffer *buckets;
    int64_t consumed;
    bool input_done;
    int flushed; /* buckets emitted or dropped after the input's end */
} bucket_iter;

/* The element's length (see eg_bucket_options), or -1 with an error raised. */
static int64_t element_length(const bucket_dataset *ds, const eg_element *e, int64_t index) {
    const char *what = "bucket_by_sequence_length";
    int c = ds->length_component;
    if (c >= 0) {
        if (c >= e->n_tensors) {
            eg__error(EG_ERR_SHAPE, "%s: element %lld has %d components; length_component is %d",
                      what, (long long)index, e->n_tensors, c);
            return -1;
        }
        if (e->tensors[c]->n_dims == 0) {
            eg__error(EG_ERR_SHAPE,
                      "%s: element %lld, component %d is 0-d: it has no first axis to measure",
                      what, (long long)index, c);
            return -1;
        }
        return e->tensors[c]->shape[0];
    }
    int64_t length = 0;
    for (int k = 0; k < e->n_tensors; k++)
        if (e->tensors[k]->n_dims > 0 && e->tensors[k]->shape[0] > length)
            length = e->tensors[k]->shape[0];
    return length;
}

/* The bucket of a length: the number of boundaries at or below it. */
static int bucket_of(const bucket_dataset *ds, int64_t length) {
    int low = 0, high = ds->n_buckets - 1; /* the answer is in [low, high] */
    while (low < high) {
        int middle = (low + high) / 2;
        if (ds->boundaries[middle] <= length)
            low = middle + 1;
        else
            high = middle;
    }
    return low;
}

/* Stacks and empties bucket k. */
static eg_status emit(const bucket_dataset *ds, bucket_buffer *bucket, int k, eg_element *out) {
    int64_t min_first[EG_ELEMENT_MAX_TENSORS];
    for (int c = 0; c < EG_ELEMENT_MAX_TENSORS; c++) {
        bool measured = ds->length_component < 0 || ds->length_component == c;
        min_first[c] =
            ds->pad_to_boundary && measured && k < ds->n_buckets - 1 ? ds->boundaries[k] - 1 : -1;
    }
    batch_items b = {bucket->items, bucket->indices, 0, bucket->count};
    eg_status status = stack("bucket_by_sequence_length", &ds->spec, &b, min_first, out);
    for (int64_t i = 0; i < bucket->count; i++) eg__element_clear(&bucket->items[i]);
    bucket->count = 0;
    return status;
}

static eg_status bucket_next(eg__iter *base, eg_element *out) {
    bucket_iter *it = (bucket_iter *)base;
    const bucket_dataset *ds = (const bucket_dataset *)base->dataset;
    while (!it->input_done) {
        eg_element e = {0};
        eg_status status = eg__iter_next(it->base.input, &e);
        if (status == EG__END) {
            it->input_done = true;
            break;
        }
        if (status != EG_OK) return status;
        int64_t index = it->consumed++;
        int64_t length = element_length(ds, &e, index);
        if (length < 0) {
            eg__element_clear(&e);
            return eg_last_status();
        }
        int k = bucket_of(ds, length);
        bucket_buffer *bucket = &it->buckets[k];
        if (bucket->count == bucket->capacity) {
            int64_t capacity = bucket->capacity ? 2 * bucket->capacity : 16;
            if (capacity > ds->batch_sizes[k]) capacity = ds->batch_sizes[k];
            eg_element *items = realloc(bucket->items, (size_t)capacity * sizeof *items);
            if (items) bucket->items = items;
            int64_t *indices =
                items ? realloc(bucket->indices, (size_t)capacity * sizeof *indices) : NULL;
            if (!indices) {
                eg__element_clear(&e);
                return eg__error(EG_ERR_OUT_OF_MEMORY,
                                 "bucket_by_sequence_length: out of host memory");
            }
            bucket->indices = indices;
            bucket->capacity = capacity;
        }
        bucket->items[bucket->count] = e;
        bucket->indices[bucket->count++] = index;
        if (bucket->count == ds->batch_sizes[k]) return emit(ds, bucket, k, out);
    }
    while (it->flushed < ds->n_buckets) {
        int k = it->flushed++;
        bucket_buffer *bucket = &it->buckets[k];
        if (bucket->count == 0) continue;
        if (!ds->drop_remainder) return emit(ds, bucket, k, out);
        for (int64_t i = 0; i < bucket->count; i++) eg__element_clear(&bucket->items[i]);
        bucket->count = 0;
    }
    return EG__END;
}

static void bucket_iter_free(eg__iter *base) {
    bucket_iter *it = (bucket_iter *)base;
    const bucket_dataset *ds = (const bucket_dataset *)base->dataset;
    if (it->buckets)
        for (int k = 0; k < ds->n_buckets; k++) {
            for (int64_t i = 0; i < it->buckets[k].count; i++)
                eg__element_clear(&it->buckets[k].items[i]);
            free(it->buckets[k].items);
            free(it->buckets[k].indices);
        }
    free(it->buckets);
    eg__unary_iter_free(base);
}

static const eg__iter_ops bucket_iter_ops = {bucket_next, bucket_iter_free};

static eg_status bucket_iterator_new(eg_dataset *base, const eg__iter_params *params,
                                     uint64_t epoch, eg__iter **out) {
    const bucket_dataset *ds = (const bucket_dataset *)base;
    bucket_buffer *buckets = calloc((size_t)ds->n_buckets, sizeof *buckets);
    if (!buckets) return eg__error(EG_ERR_OUT_OF_MEMORY, "%s: out of host memory", base->name);
    eg_status status =
        eg__unary_iter_new(base, params, epoch, sizeof(bucket_iter), &bucket_iter_ops, out);
    if (status != EG_OK) {
        free(buckets);
        return status;
    }
    ((bucket_iter *)*out)->buckets = buckets;
    return EG_OK;
}

static const eg__dataset_ops bucket_ops = {bucket_iterator_new, eg__unary_destroy, false};

eg_dataset *eg_dataset_bucket_by_sequence_length(eg_dataset *input,
                                                 const eg_bucket_options *options) {
    const char *what = "dataset_bucket_by_sequence_length";
    if (!input) return NULL;
    if (!options || (options->n_boundaries > 0 && !options->boundaries) || !options->batch_sizes) {
        eg__error(EG_ERR_NULL_ARGUMENT, "%s: %s is NULL", what,
                  !options                ? "options"
                  : !options->batch_sizes ? "options->batch_sizes"
                                          : "options->boundaries");
        eg__dataset_unref(input);
        return NULL;
    }
    int n_boundaries = options->n_boundaries;
    if (n_boundaries < 0 || n_boundaries > MAX_BOUNDARIES)
        return eg__invalid_argument(input, "%s: n_boundaries is %d; it must be 0 to %d", what,
                                    n_boundaries, MAX_BOUNDARIES);
    for (int i = 0; i < n_boundaries; i++)
        if (options->boundaries[i] < 1 ||
            (i > 0 && options->boundaries[i] <= options->boundaries[i - 1]))
            return eg__invalid_argument(
                input, "%s: boundaries[%d] is %lld; boundaries must be at least 1 and increasing",
                what, i, (long long)options->boundaries[i]);
    for (int i = 0; i <= n_boundaries; i++)
        if (options->batch_sizes[i] < 1 || options->batch_sizes[i] > MAX_BATCH_SIZE)
            return eg__invalid_argument(input, "%s: batch_sizes[%d] is %lld; it must be 1 to 2^30",
                                        what, i, (long long)options->batch_sizes[i]);
    if (options->length_component < -1 || options->length_component >= EG_ELEMENT_MAX_TENSORS)
        return eg__invalid_argument(input, "%s: length_component is %d; it must be -1 to %d", what,
                                    options->length_component, EG_ELEMENT_MAX_TENSORS - 1);
    char message[256];
    if (!padded_shapes_valid(&options->padding, what, message, sizeof message))
        return eg__invalid_argument(input, "%s", message);
    char name[64];
    snprintf(name, sizeof name, "bucket_by_sequence_length(%d buckets)", n_boundaries + 1);
    bucket_dataset *ds = eg__unary_new(input, sizeof *ds, &bucket_ops, name);
    if (!ds) return NULL;
    ds->length_component = options->length_component;
    ds->n_buckets = n_boundaries + 1;
    if (n_boundaries > 0)
        memcpy(ds->boundaries, options->boundaries, (size_t)n_boundaries * sizeof *ds->boundaries);
    memcpy(ds->batch_sizes, options->batch_sizes,
           ((size_t)n_boundaries + 1) * sizeof *ds->batch_sizes);
    ds->pad_to_boundary = options->pad_to_bucket_boundary;
    ds->drop_remainder = options->padding.drop_remainder;
    ds->spec = spec_from_options(&options->padding);
    return &ds->base.base;
}
