/* The input pipeline of `eagle train` (see pipeline.h):
 *
 *     generator of index batches (train.c's order) and their place in the run (epoch, batch)
 *         -> map(make the batch, AUTOTUNE) -> prefetch(AUTOTUNE)
 *
 * where making the batch is mlp_batch, or with augmentation: gather the u8 images, the library's
 * random flip and random crop on the whole batch (eg_image_random_flip / _crop, batched), then
 * the same conversion to f32 / 255 as mlp_batch. One call per batch: per-image stages would cost a
 * thread hand-over per image. */
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
    int64_t first_step; /* batches of first_epoch already trained (a resumed run) */
    bool images;        /* x as (B, 28, 28, 1) rather than (B, 784) */
    eg_image_flip_options flip;
    eg_image_crop_options crop;
} pipeline_source;

/* One pass: its run-wide epoch number, the batches it leaves out, the order of the examples. */
typedef struct pass_state {
    int epoch;
    int64_t skip;
    int64_t order[];
} pass_state;

static eg_status source_start(void *context, uint64_t epoch, void **state) {
    const pipeline_source *s = context;
    size_t n = (size_t)(s->train->n > 0 ? s->train->n : 1);
    pass_state *pass = malloc(sizeof *pass + n * sizeof pass->order[0]);
    if (!pass) return EG_ERR_OUT_OF_MEMORY;
    pass->epoch = s->first_epoch + (int)epoch;
    pass->skip = epoch == 0 ? s->first_step : 0;
    cli_shuffle_order(pass->order, s->train->n, s->seed, pass->epoch);
    *state = pass;
    return EG_OK;
}

/* Batch `index` (after the skipped ones) of the pass's order: (indices i64 (n,), where i64 (2,))
 * with where = {epoch, batch}. The map stage's own epoch and index restart at 0 in a resumed run,
 * so the augmentations draw from `where`, the batch's place in the whole run. */
static eg_status source_next(void *context, void *state, int64_t index, eg_element *out,
                             bool *end) {
    const pipeline_source *s = context;
    const pass_state *pass = state;
    int64_t batch = index + pass->skip;
    int64_t start = batch * s->batch_size;
    if (start >= s->train->n) {
        *end = true;
        return EG_OK;
    }
    int64_t n = s->train->n - start < s->batch_size ? s->train->n - start : s->batch_size;
    int64_t where[2] = {pass->epoch, batch}, two = 2;
    out->n_tensors = 2;
    out->tensors[0] = eg_tensor_from_data(pass->order + start, EG_DTYPE_I64, 1, &n);
    out->tensors[1] = eg_tensor_from_data(where, EG_DTYPE_I64, 1, &two);
    return out->tensors[0] && out->tensors[1] ? EG_OK : eg_last_status();
}

static void source_finish(void *context, void *state) {
    (void)context;
    free(state);
}

static void source_destroy(void *context) {
    free(context);
}

/* x as the model takes it: (n, 784) or (n, 28, 28, 1); a view of the same elements. */
static eg_tensor *model_input(const pipeline_source *s, eg_tensor *x, int64_t n) {
    int64_t flat[2] = {n, 784}, image[4] = {n, 28, 28, 1};
    return s->images ? eg_reshape(x, 4, image) : eg_reshape(x, 2, flat);
}

/* (indices) -> (x, y): exactly mlp_batch (cnn_batch with images). */
static eg_status make_batch(const eg_element *in, eg_element *out, const eg_dataset_call_info *info,
                            void *context) {
    (void)info;
    const pipeline_source *s = context;
    const eg_tensor *indices = in->tensors[0];
    int64_t n = eg_tensor_dim(indices, 0);
    eg_tensor *x;
    out->n_tensors = 2;
    eg_status status = mlp_batch(s->train, eg_tensor_data(indices), n, &x, &out->tensors[1]);
    if (status != EG_OK) return status;
    out->tensors[0] = model_input(s, x, n);
    return out->tensors[0] ? EG_OK : eg_last_status();
}

/* (indices, where) -> (x, y) like mlp_batch, the images flipped and shifted at random before
 * the conversion (the same ops as mlp_batch's: cast to f32, times 1 / 255, reshape). The draws
 * are keyed on the batch's place in the run, epoch counted from 0 as a fresh run's map stage
 * counts it (so a fresh run's batches are what they always were). */
static eg_status make_augmented_batch(const eg_element *in, eg_element *out,
                                      const eg_dataset_call_info *info, void *context) {
    (void)info;
    pipeline_source *s = context;
    const eg_tensor *indices = in->tensors[0];
    const int64_t *where = eg_tensor_data(in->tensors[1]);
    if (!where) return eg_last_status();
    eg_dataset_call_info at = {.epoch = (uint64_t)(where[0] - 1), .index = where[1]};
    eg_element images = {
        2, {eg_gather(s->train->images, indices, 0), eg_gather(s->train->labels, indices, 0)}};
    if (!images.tensors[0] || !images.tensors[1]) return eg_last_status();
    eg_element flipped, cropped;
    eg_status status = eg_image_random_flip(&images, &flipped, &at, &s->flip);
    if (status == EG_OK) status = eg_image_random_crop(&flipped, &cropped, &at, &s->crop);
    if (status != EG_OK) return status;
    out->n_tensors = 2;
    out->tensors[0] =
        model_input(s, eg_mul_scalar(eg_cast(cropped.tensors[0], EG_DTYPE_F32), 1.0 / 255.0),
                    eg_tensor_dim(indices, 0));
    out->tensors[1] = cropped.tensors[1];
    return out->tensors[0] ? EG_OK : eg_last_status();
}

eg_dataset *cli_training_pipeline(const mlp_data *train, int64_t batch_size, uint64_t seed,
                                  bool augment, bool images, int first_epoch) {
    return cli_training_pipeline_from(train, batch_size, seed, augment, images, first_epoch, 0);
}

eg_dataset *cli_training_pipeline_from(const mlp_data *train, int64_t batch_size, uint64_t seed,
                                       bool augment, bool images, int first_epoch,
                                       int64_t first_step) {
    pipeline_source *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    *s = (pipeline_source){.train = train,
                           .batch_size = batch_size,
                           .seed = seed,
                           .first_epoch = first_epoch,
                           .first_step = first_step,
                           .images = images,
                           .flip = {.seed = seed ^ 0xF11Bu, .probability = 0.5, .batched = true},
                           .crop = {.seed = seed ^ 0xC809u, .padding = 2, .batched = true}};
    eg_dataset_generator generator = {source_start, source_next, source_finish, source_destroy, s};
    eg_dataset *ds = eg_dataset_from_generator(&generator); /* owns s from here on */
    ds = eg_dataset_map(ds, augment ? make_augmented_batch : make_batch, s, EG_AUTOTUNE, true);
    return eg_dataset_prefetch(ds, EG_AUTOTUNE);
}
