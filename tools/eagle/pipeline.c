/* The input pipeline of `eagle train` (see pipeline.h).
 *
 * Without augmentation:  generator of index batches (train.c's order)
 *                        -> map(mlp_batch, AUTOTUNE)  -> prefetch(AUTOTUNE)
 * With augmentation:     generator of (image u8 (28, 28), label u8 ()) in that order
 *                        -> map(random flip) -> map(random crop, padding 2)  (AUTOTUNE each)
 *                        -> batch -> map(to f32 / 255, (B, 784)) -> prefetch(AUTOTUNE) */
#include <stdlib.h>
#include <string.h>

#include "pipeline.h"

void cli_shuffle_order(int64_t *order, int64_t n, unsigned long long seed, int epoch) {
    uint64_t state = seed * 0x9E3779B97F4A7C15ull + (uint64_t)epoch;
    for (int64_t i = 0; i < n; i++) order[i] = i;
    for (int64_t i = n - 1; i > 0; i--) {
        state += 0x9E3779B97F4A7C15ull;
        uint64_t z = state;
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        z ^= z >> 31;
        int64_t j = (int64_t)(z % (uint64_t)(i + 1));
        int64_t t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
}

/* Everything the pipeline's callbacks read; freed with the generator's dataset. */
typedef struct pipeline_source {
    const mlp_data *train;
    int64_t batch_size;
    uint64_t seed;
    int first_epoch;
    bool augment;
    eg_image_flip_options flip;
    eg_image_crop_options crop;
} pipeline_source;

static eg_status source_start(void *context, uint64_t epoch, void **state) {
    const pipeline_source *s = context;
    int64_t *order = malloc((size_t)(s->train->n > 0 ? s->train->n : 1) * sizeof *order);
    if (!order) return EG_ERR_OUT_OF_MEMORY;
    cli_shuffle_order(order, s->train->n, s->seed, s->first_epoch + (int)epoch);
    *state = order;
    return EG_OK;
}

/* An index batch (i64 (n,)), or with augmentation one example as views of the data. */
static eg_status source_next(void *context, void *state, int64_t index, eg_element *out,
                             bool *end) {
    const pipeline_source *s = context;
    const int64_t *order = state;
    if (!s->augment) {
        int64_t start = index * s->batch_size;
        if (start >= s->train->n) {
            *end = true;
            return EG_OK;
        }
        int64_t n = s->train->n - start < s->batch_size ? s->train->n - start : s->batch_size;
        out->n_tensors = 1;
        out->tensors[0] = eg_tensor_from_data(order + start, EG_DTYPE_I64, 1, &n);
        return out->tensors[0] ? EG_OK : eg_last_status();
    }
    if (index >= s->train->n) {
        *end = true;
        return EG_OK;
    }
    int64_t j = order[index];
    int64_t image_shape[2] = {28, 28};
    out->n_tensors = 2;
    out->tensors[0] = eg_reshape(eg_slice(s->train->images, 0, j, j + 1, 1), 2, image_shape);
    out->tensors[1] = eg_reshape(eg_slice(s->train->labels, 0, j, j + 1, 1), 0, NULL);
    return out->tensors[0] && out->tensors[1] ? EG_OK : eg_last_status();
}

static void source_finish(void *context, void *state) {
    (void)context;
    free(state);
}

static void source_destroy(void *context) {
    free(context);
}

/* (indices) -> (x, y): exactly mlp_batch. */
static eg_status make_batch(const eg_element *in, eg_element *out, const eg_dataset_call_info *info,
                            void *context) {
    (void)info;
    const pipeline_source *s = context;
    const eg_tensor *indices = in->tensors[0];
    out->n_tensors = 2;
    return mlp_batch(s->train, eg_tensor_data(indices), eg_tensor_dim(indices, 0), &out->tensors[0],
                     &out->tensors[1]);
}

/* (images u8 (B, 28, 28), labels) -> (x f32 (B, 784) / 255, labels), with mlp_batch's ops. */
static eg_status to_float(const eg_element *in, eg_element *out, const eg_dataset_call_info *info,
                          void *context) {
    (void)info, (void)context;
    int64_t flat[2] = {eg_tensor_dim(in->tensors[0], 0), 784};
    out->n_tensors = 2;
    out->tensors[0] =
        eg_reshape(eg_mul_scalar(eg_cast(in->tensors[0], EG_DTYPE_F32), 1.0 / 255.0), 2, flat);
    out->tensors[1] = in->tensors[1];
    return out->tensors[0] ? EG_OK : eg_last_status();
}

eg_dataset *cli_training_pipeline(const mlp_data *train, int64_t batch_size, uint64_t seed,
                                  bool augment, int first_epoch) {
    pipeline_source *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    *s = (pipeline_source){.train = train,
                           .batch_size = batch_size,
                           .seed = seed,
                           .first_epoch = first_epoch,
                           .augment = augment,
                           .flip = {.seed = seed ^ 0xF11Bu, .component = 0, .probability = 0.5},
                           .crop = {.seed = seed ^ 0xC809u, .component = 0, .padding = 2}};
    eg_dataset_generator generator = {source_start, source_next, source_finish, source_destroy, s};
    eg_dataset *ds = eg_dataset_from_generator(&generator); /* owns s from here on */
    if (!augment) {
        ds = eg_dataset_map(ds, make_batch, s, EG_AUTOTUNE, true);
    } else {
        ds = eg_dataset_map(ds, eg_image_random_flip, &s->flip, EG_AUTOTUNE, true);
        ds = eg_dataset_map(ds, eg_image_random_crop, &s->crop, EG_AUTOTUNE, true);
        ds = eg_dataset_batch(ds, batch_size, false);
        ds = eg_dataset_map(ds, to_float, NULL, EG_AUTOTUNE, true);
    }
    return eg_dataset_prefetch(ds, EG_AUTOTUNE);
}
