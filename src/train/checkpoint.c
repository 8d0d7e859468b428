/* A whole run in one safetensors file (eagle/fit.h's eg_training_save / eg_training_load): the
 * model's variables by name, the optimizer's slots as "optimizer/<variable>/<slot>", and in the
 * metadata the optimizer's kind and step counter, its loss-scaling state, the default generator's
 * state and the loop's position, so that a loop restored from it draws, updates and logs what the
 * uninterrupted one did. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "eagle/autograd.h"
#include "eagle/checkpoint.h"
#include "nn/internal.h"
#include "train/internal.h"

enum { NAME_SIZE = 320, MAX_KEYS = 16 };

static void slot_name(char *buf, const eg_tensor *variable, const char *slot) {
    snprintf(buf, NAME_SIZE, "optimizer/%s/%s", eg_variable_name(variable), slot);
}

/* The keys eg_training_save writes; a user's key must be none of these. */
static const char *const own_keys[] = {"eagle.optimizer",
                                       "eagle.iterations",
                                       "eagle.loss_scale",
                                       "eagle.loss_scale.good",
                                       "eagle.loss_scale.skipped",
                                       "eagle.generator.seed",
                                       "eagle.generator.position",
                                       "eagle.epoch",
                                       "eagle.step"};
enum { N_OWN = sizeof own_keys / sizeof own_keys[0] };

eg_status eg_training_save(const char *path, eg_model *model, const eg_optimizer *optimizer,
                           const eg_training_position *position, int n_metadata,
                           const char *const *keys, const char *const *values) {
    if (!path || !model || !optimizer || !position || n_metadata < 0 ||
        (n_metadata > 0 && (!keys || !values)))
        return eg__error(EG_ERR_NULL_ARGUMENT, "training_save: NULL argument");
    if (n_metadata > MAX_KEYS)
        return eg__error(EG_ERR_INVALID_ARGUMENT, "training_save: %d metadata pairs (at most %d)",
                         n_metadata, MAX_KEYS);
    for (int i = 0; i < n_metadata; i++)
        if (keys[i] && !strncmp(keys[i], "eagle.", 6))
            return eg__error(EG_ERR_INVALID_ARGUMENT,
                             "training_save: metadata key '%s' is reserved (keys starting "
                             "\"eagle.\" are the checkpoint's own)",
                             keys[i]);
    int n_all, n_vars, n_slots = eg_optimizer_slot_count(optimizer);
    eg_tensor *const *all = eg_model_variables(model, &n_all);
    eg_tensor *const *vars = eg_model_trainable_variables(model, &n_vars);
    if (!all || !vars) return eg_last_status();
    size_t capacity = (size_t)(n_all + n_vars * n_slots);
    const char **names = calloc(capacity ? capacity : 1, sizeof *names);
    const eg_tensor **tensors = calloc(capacity ? capacity : 1, sizeof *tensors);
    char *slot_names = calloc(capacity ? capacity : 1, NAME_SIZE);
    eg_status status = names && tensors && slot_names
                           ? EG_OK
                           : eg__error(EG_ERR_OUT_OF_MEMORY, "training_save: out of host memory");
    int n = 0;
    for (int i = 0; status == EG_OK && i < n_all; i++) {
        names[n] = eg_variable_name(all[i]);
        tensors[n++] = all[i];
    }
    for (int i = 0; status == EG_OK && i < n_vars; i++)
        for (int k = 0; k < n_slots; k++) {
            const char *slot = eg_optimizer_slot_name(optimizer, k);
            const eg_tensor *value = eg_optimizer_get_slot(optimizer, vars[i], slot);
            if (!value) continue; /* never updated: restored as zeros */
            char *name = slot_names + (size_t)n * NAME_SIZE;
            slot_name(name, vars[i], slot);
            names[n] = name;
            tensors[n++] = value;
        }
    uint64_t seed, drawn;
    eg_generator_get_state(NULL, &seed, &drawn);
    char text[N_OWN][32];
    snprintf(text[1], 32, "%lld", (long long)eg_optimizer_iterations(optimizer));
    snprintf(text[2], 32, "%.17g", eg_optimizer_loss_scale(optimizer));
    snprintf(text[3], 32, "%lld", (long long)eg_optimizer_loss_scale_good_steps(optimizer));
    snprintf(text[4], 32, "%lld", (long long)eg_optimizer_skipped_steps(optimizer));
    snprintf(text[5], 32, "%" PRIu64, seed);
    snprintf(text[6], 32, "%" PRIu64, drawn);
    snprintf(text[7], 32, "%lld", (long long)position->epoch);
    snprintf(text[8], 32, "%lld", (long long)position->step);
    const char *all_keys[N_OWN + MAX_KEYS], *all_values[N_OWN + MAX_KEYS];
    for (int i = 0; i < N_OWN; i++) {
        all_keys[i] = own_keys[i];
        all_values[i] = i == 0 ? eg_optimizer_name(optimizer) : text[i];
    }
    for (int i = 0; i < n_metadata; i++) {
        all_keys[N_OWN + i] = keys[i];
        all_values[N_OWN + i] = values[i];
    }
    if (status == EG_OK)
        status = eg_safetensors_save(path, n, names, eg__tensor_handles(tensors),
                                     N_OWN + n_metadata, all_keys, all_values);
    free(slot_names);
    free(tensors);
    free(names);
    return status;
}

/* The metadata integer `key` (EG_ERR_FORMAT naming it when absent or malformed). */
static eg_status read_number(const eg_safetensors *st, const char *path, const char *key,
                             long long *out) {
    const char *text = eg_safetensors_metadata(st, key);
    char *end = NULL;
    if (text) *out = strtoll(text, &end, 10);
    if (!text || !*text || *end)
        return eg__error(EG_ERR_FORMAT,
                         "training_load: '%s' has no valid '%s' (not a training "
                         "checkpoint of eg_training_save?)",
                         path, key);
    return EG_OK;
}

eg_status eg_training_load(const char *path, eg_model *model, eg_optimizer *optimizer,
                           eg_training_position *position) {
    if (!path || !model || !optimizer || !position)
        return eg__error(EG_ERR_NULL_ARGUMENT, "training_load: NULL argument");
    int n_all, n_vars, n_slots = eg_optimizer_slot_count(optimizer);
    eg_tensor *const *all = eg_model_variables(model, &n_all);
    eg_tensor *const *vars = eg_model_trainable_variables(model, &n_vars);
    if (!all || !vars) return eg_last_status();
    eg_safetensors *st = eg_safetensors_open(path);
    if (!st) return eg_last_status();
    long long iterations = 0, good = 0, skipped = 0, epoch = 0, step = 0;
    eg_status status = EG_OK;
    const char *kind = eg_safetensors_metadata(st, "eagle.optimizer");
    if (!kind || strcmp(kind, eg_optimizer_name(optimizer)))
        status =
            eg__error(EG_ERR_INVALID_ARGUMENT,
                      "training_load: '%s' holds the state of a%s %s optimizer, not of %s", path,
                      kind ? "n" : "", kind ? kind : "unknown", eg_optimizer_name(optimizer));
    if (status == EG_OK) status = read_number(st, path, "eagle.iterations", &iterations);
    if (status == EG_OK) status = read_number(st, path, "eagle.loss_scale.good", &good);
    if (status == EG_OK) status = read_number(st, path, "eagle.loss_scale.skipped", &skipped);
    if (status == EG_OK) status = read_number(st, path, "eagle.epoch", &epoch);
    if (status == EG_OK) status = read_number(st, path, "eagle.step", &step);
    const char *seed_text = eg_safetensors_metadata(st, "eagle.generator.seed");
    const char *drawn_text = eg_safetensors_metadata(st, "eagle.generator.position");
    const char *scale_text = eg_safetensors_metadata(st, "eagle.loss_scale");
    if (status == EG_OK && (!seed_text || !drawn_text || !scale_text))
        status = eg__error(EG_ERR_FORMAT,
                           "training_load: '%s' lacks the generator or loss "
                           "scale state",
                           path);
    for (int i = 0; i < n_all && status == EG_OK; i++)
        status = eg__check_stored_variable(st, all[i], path, "training_load");
    for (int i = 0; i < n_vars && status == EG_OK; i++) /* slots: the variable's shape */
        for (int k = 0; k < n_slots && status == EG_OK; k++) {
            char name[NAME_SIZE];
            slot_name(name, vars[i], eg_optimizer_slot_name(optimizer, k));
            eg_dtype dtype;
            int n_dims;
            int64_t shape[EG_MAX_DIMS];
            if (!eg_safetensors_contains(st, name)) continue;
            status = eg_safetensors_info(st, name, &dtype, &n_dims, shape);
            bool same = status == EG_OK && n_dims == eg_tensor_n_dims(vars[i]);
            for (int d = 0; same && d < n_dims; d++) same = shape[d] == eg_tensor_shape(vars[i])[d];
            if (status == EG_OK && !same)
                status = eg__error(EG_ERR_SHAPE,
                                   "training_load: '%s' in '%s' is not shaped like its variable",
                                   name, path);
        }
    /* all checked: write */
    for (int i = 0; i < n_all && status == EG_OK; i++) {
        eg_tensor *value = eg_safetensors_get(st, eg_variable_name(all[i]));
        status = value ? eg_assign(all[i], value) : eg_last_status();
        eg_release(value);
    }
    for (int i = 0; i < n_vars && status == EG_OK; i++)
        for (int k = 0; k < n_slots && status == EG_OK; k++) {
            char name[NAME_SIZE];
            const char *slot = eg_optimizer_slot_name(optimizer, k);
            slot_name(name, vars[i], slot);
            if (!eg_safetensors_contains(st, name)) continue; /* never updated then */
            eg_tensor *value = eg_safetensors_get(st, name);
            status =
                value ? eg_optimizer_set_slot(optimizer, vars[i], slot, value) : eg_last_status();
            eg_release(value);
        }
    if (status == EG_OK) status = eg_optimizer_set_iterations(optimizer, iterations);
    double scale = scale_text ? strtod(scale_text, NULL) : 1;
    if (status == EG_OK && (scale != 1 || skipped || good))
        status = eg_optimizer_set_loss_scale_state(optimizer, scale, good, skipped);
    if (status == EG_OK) {
        eg_generator_set_state(NULL, strtoull(seed_text, NULL, 10), strtoull(drawn_text, NULL, 10));
        *position = (eg_training_position){.epoch = epoch, .step = step};
    }
    eg_safetensors_close(st);
    return status;
}
