/* Checkpoints of `eagle train` (see train_state.h). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train_state.h"

enum { MAX_VARIABLES = MODEL_MAX_VARIABLES, MAX_SLOTS = 3, NAME_SIZE = 256 };

static void slot_tensor_name(char *buf, const eg_tensor *variable, const char *slot) {
    snprintf(buf, NAME_SIZE, "optimizer/%s/%s", eg_variable_name(variable), slot);
}

eg_status train_state_save(const char *path, eg_model *model, const eg_optimizer *optimizer,
                           const train_meta *meta) {
    int n_all, n_vars;
    eg_tensor *const *all = eg_model_variables(model, &n_all);
    eg_tensor *const *vars = eg_model_trainable_variables(model, &n_vars);
    if (!all || !vars) return eg_last_status();
    if (n_all > MAX_VARIABLES) {
        fprintf(stderr, "eagle train: %d variables is more than a checkpoint holds\n", n_all);
        return EG_ERR_INVALID_ARGUMENT;
    }
    enum { MAX_TENSORS = MAX_VARIABLES * (1 + MAX_SLOTS) };
    static char slot_names[MAX_TENSORS][NAME_SIZE];
    const char *names[MAX_TENSORS];
    eg_tensor *tensors[MAX_TENSORS];
    int n = 0;
    for (int i = 0; i < n_all; i++) {
        names[n] = eg_variable_name(all[i]);
        tensors[n++] = all[i];
    }
    int n_slots = eg_optimizer_slot_count(optimizer);
    for (int i = 0; i < n_vars; i++)
        for (int k = 0; k < n_slots && k < MAX_SLOTS; k++) {
            const char *slot = eg_optimizer_slot_name(optimizer, k);
            eg_tensor *value = eg_optimizer_get_slot(optimizer, vars[i], slot);
            if (!value) continue; /* not updated yet: restored as zeros */
            slot_tensor_name(slot_names[n], vars[i], slot);
            names[n] = slot_names[n];
            tensors[n++] = value;
        }

    char hidden[128], learning_rate[32], decay_steps[32], batch_size[32], seed[32], examples[32],
        epoch[32], epochs[32], iterations[32], step[32], loss[40], weight[40], hits[40],
        samples[32], loss_scale[40], good_steps[32], skipped_steps[32];
    bool mlp = !strcmp(meta->model_kind, "mlp");
    if (mlp)
        mlp_format_hidden(&meta->model, hidden, sizeof hidden);
    else
        hidden[0] = '\0';
    /* %.17g: every double reads back as itself, so a resumed run starts from the same bits. */
    snprintf(learning_rate, sizeof learning_rate, "%.17g", meta->learning_rate);
    snprintf(decay_steps, sizeof decay_steps, "%lld", (long long)meta->decay_steps);
    snprintf(batch_size, sizeof batch_size, "%ld", meta->batch_size);
    snprintf(seed, sizeof seed, "%llu", meta->seed);
    snprintf(examples, sizeof examples, "%lld", (long long)meta->train_examples);
    snprintf(epoch, sizeof epoch, "%ld", meta->epoch);
    snprintf(epochs, sizeof epochs, "%ld", meta->epochs);
    snprintf(iterations, sizeof iterations, "%lld", (long long)eg_optimizer_iterations(optimizer));
    snprintf(step, sizeof step, "%lld", (long long)meta->step);
    snprintf(loss, sizeof loss, "%.17g", meta->loss.total);
    snprintf(weight, sizeof weight, "%.17g", meta->loss.count);
    snprintf(hits, sizeof hits, "%.17g", meta->hits);
    snprintf(samples, sizeof samples, "%lld", (long long)meta->samples);
    snprintf(loss_scale, sizeof loss_scale, "%.17g", eg_optimizer_loss_scale(optimizer));
    snprintf(good_steps, sizeof good_steps, "%lld",
             (long long)eg_optimizer_loss_scale_good_steps(optimizer));
    snprintf(skipped_steps, sizeof skipped_steps, "%lld",
             (long long)eg_optimizer_skipped_steps(optimizer));
    enum { MAX_KEYS = 24 };
    const char *keys[MAX_KEYS], *values[MAX_KEYS];
    int n_keys = 0;
#define PUT(key, value) (keys[n_keys] = (key), values[n_keys++] = (value))
    PUT("eagle.model", meta->model_kind);
    PUT("eagle.optimizer", eg_optimizer_name(optimizer));
    PUT("eagle.optimizer.iterations", iterations);
    PUT("eagle.learning_rate", learning_rate);
    PUT("eagle.decay_steps", decay_steps);
    PUT("eagle.batch_size", batch_size);
    PUT("eagle.seed", seed);
    PUT("eagle.train_examples", examples);
    PUT("eagle.epoch", epoch);
    PUT("eagle.epochs", epochs);
    PUT("eagle.augment", meta->augment ? "1" : "0");
    PUT("eagle.precision", meta->precision[0] ? meta->precision : "float32");
    if (meta->has_loss_scale) {
        PUT("eagle.loss_scale", loss_scale);
        PUT("eagle.loss_scale.good_steps", good_steps);
        PUT("eagle.loss_scale.skipped_steps", skipped_steps);
    }
    if (meta->train_data[0]) PUT("eagle.train_data", meta->train_data);
    if (mlp) PUT("eagle.hidden", hidden);
    if (meta->step > 0) {
        PUT("eagle.step", step);
        PUT("eagle.step.loss", loss);
        PUT("eagle.step.weight", weight);
        PUT("eagle.step.hits", hits);
        PUT("eagle.step.samples", samples);
    }
#undef PUT
    return eg_safetensors_save(path, n, names, tensors, n_keys, keys, values);
}

/* The metadata value for key parsed as an integer in [min, max]; false (after printing) when
 * missing or malformed. */
static bool read_integer(const eg_safetensors *file, const char *path, const char *key,
                         long long min, long long max, long long *out) {
    const char *text = eg_safetensors_metadata(file, key);
    if (!text) {
        fprintf(stderr,
                "eagle train: %s cannot be resumed: it has no %s metadata (was it written by "
                "'eagle train --save'?)\n",
                path, key);
        return false;
    }
    char *end;
    errno = 0;
    long long value = strtoll(text, &end, 10);
    if (errno || end == text || *end || value < min || value > max) {
        fprintf(stderr, "eagle train: %s: metadata %s = '%s' is not an integer in [%lld, %lld]\n",
                path, key, text, min, max);
        return false;
    }
    *out = value;
    return true;
}

/* The metadata value for key as a finite number; false (after printing) when missing or not. */
static bool read_number(const eg_safetensors *file, const char *path, const char *key,
                        double *out) {
    const char *text = eg_safetensors_metadata(file, key);
    char *end = NULL;
    double value = text ? strtod(text, &end) : 0;
    if (!text || end == text || *end || !isfinite(value)) {
        fprintf(stderr, "eagle train: %s: metadata %s = '%s' is not a number\n", path, key,
                text ? text : "(missing)");
        return false;
    }
    *out = value;
    return true;
}

bool train_state_read_meta(const eg_safetensors *file, const char *path, train_meta *meta) {
    memset(meta, 0, sizeof *meta);
    if (eg_safetensors_metadata(file, "eagle.int8")) {
        fprintf(stderr,
                "eagle train: %s cannot be resumed: it is an int8 checkpoint of 'eagle quantize' "
                "(for evaluation); resume from the checkpoint it was made of\n",
                path);
        return false;
    }
    const char *kind = eg_safetensors_metadata(file, "eagle.model");
    const char *hidden = eg_safetensors_metadata(file, "eagle.hidden");
    const char *optimizer = eg_safetensors_metadata(file, "eagle.optimizer");
    const char *learning_rate = eg_safetensors_metadata(file, "eagle.learning_rate");
    bool mlp = kind && !strcmp(kind, "mlp"), cnn = kind && !strcmp(kind, "cnn");
    if (!(cnn || (mlp && hidden && mlp_parse_hidden(hidden, &meta->model))) || !optimizer ||
        !learning_rate) {
        fprintf(stderr,
                "eagle train: %s cannot be resumed: no eagle.model / eagle.hidden / "
                "eagle.optimizer / eagle.learning_rate metadata (was it written by 'eagle train "
                "--save'?)\n",
                path);
        return false;
    }
    snprintf(meta->model_kind, sizeof meta->model_kind, "%s", kind);
    char why[256];
    if (mlp && !mlp_check_stored(file, &meta->model, why, sizeof why)) {
        fprintf(
            stderr,
            "eagle train: %s cannot be resumed: its tensors do not match eagle.hidden = %s: %s\n",
            path, hidden, why);
        return false;
    }
    if (strcmp(optimizer, "adam") && strcmp(optimizer, "adamw") && strcmp(optimizer, "sgd") &&
        strcmp(optimizer, "rmsprop")) {
        fprintf(stderr, "eagle train: %s: unknown optimizer '%s'\n", path, optimizer);
        return false;
    }
    snprintf(meta->optimizer, sizeof meta->optimizer, "%s", optimizer);
    char *end;
    meta->learning_rate = strtod(learning_rate, &end);
    if (end == learning_rate || *end || !(meta->learning_rate > 0)) {
        fprintf(stderr, "eagle train: %s: bad eagle.learning_rate '%s'\n", path, learning_rate);
        return false;
    }
    long long batch_size, seed, examples, epoch, iterations, decay_steps = 0;
    if (eg_safetensors_metadata(file, "eagle.decay_steps") && /* absent: an older constant run */
        !read_integer(file, path, "eagle.decay_steps", 0, 1LL << 50, &decay_steps))
        return false;
    meta->decay_steps = decay_steps;
    long long epochs = 0;
    if (eg_safetensors_metadata(file, "eagle.epochs") &&
        !read_integer(file, path, "eagle.epochs", 1, 100000, &epochs))
        return false;
    meta->epochs = (long)epochs;
    if (!read_integer(file, path, "eagle.batch_size", 1, 1 << 20, &batch_size) ||
        !read_integer(file, path, "eagle.seed", 0, 0x7fffffffLL, &seed) ||
        !read_integer(file, path, "eagle.train_examples", 1, 1LL << 40, &examples) ||
        !read_integer(file, path, "eagle.epoch", 0, 100000, &epoch) ||
        !read_integer(file, path, "eagle.optimizer.iterations", 0, 1LL << 62, &iterations))
        return false;
    meta->batch_size = (long)batch_size;
    meta->seed = (unsigned long long)seed;
    meta->train_examples = examples;
    meta->epoch = (long)epoch;
    meta->iterations = iterations;
    const char *augment = eg_safetensors_metadata(file, "eagle.augment");
    if (augment) {
        if (strcmp(augment, "0") && strcmp(augment, "1")) {
            fprintf(stderr, "eagle train: %s: metadata eagle.augment = '%s' is not 0 or 1\n", path,
                    augment);
            return false;
        }
        meta->augment = augment[0] == '1';
        meta->augment_known = true;
    }
    const char *precision = eg_safetensors_metadata(file, "eagle.precision");
    eg_policy policy = EG_POLICY_FLOAT32;
    if (precision && eg_policy_from_name(precision, &policy) != EG_OK) {
        fprintf(stderr, "eagle train: %s: metadata eagle.precision: %s\n", path, eg_last_error());
        eg_clear_error();
        return false;
    }
    snprintf(meta->precision, sizeof meta->precision, "%s", eg_policy_name(policy));
    if (eg_safetensors_metadata(file, "eagle.loss_scale")) {
        long long good, skipped;
        if (!read_number(file, path, "eagle.loss_scale", &meta->loss_scale) ||
            !read_integer(file, path, "eagle.loss_scale.good_steps", 0, 1LL << 62, &good) ||
            !read_integer(file, path, "eagle.loss_scale.skipped_steps", 0, 1LL << 62, &skipped))
            return false;
        meta->has_loss_scale = true;
        meta->loss_scale_good_steps = good;
        meta->loss_scale_skipped_steps = skipped;
    }
    const char *data = eg_safetensors_metadata(file, "eagle.train_data");
    if (data) {
        if (strlen(data) != 16 || strspn(data, "0123456789abcdef") != 16) {
            fprintf(stderr,
                    "eagle train: %s: metadata eagle.train_data = '%s' is not 16 hex digits\n",
                    path, data);
            return false;
        }
        snprintf(meta->train_data, sizeof meta->train_data, "%s", data);
    }
    if (eg_safetensors_metadata(file, "eagle.step")) {
        long long step, samples;
        double sums[3];
        const char *sum_keys[3] = {"eagle.step.loss", "eagle.step.weight", "eagle.step.hits"};
        if (!read_integer(file, path, "eagle.step", 1, 1LL << 40, &step) ||
            !read_integer(file, path, "eagle.step.samples", 1, examples, &samples))
            return false;
        for (int i = 0; i < 3; i++)
            if (!read_number(file, path, sum_keys[i], &sums[i])) return false;
        meta->step = step;
        meta->samples = samples;
        meta->loss = (eg_metric_mean){.total = sums[0], .count = sums[1]};
        meta->hits = sums[2];
    }
    return true;
}

eg_status train_state_restore(const eg_safetensors *file, eg_model *model, eg_optimizer *optimizer,
                              const train_meta *meta) {
    int n_all, n_vars;
    eg_tensor *const *all = eg_model_variables(model, &n_all);
    eg_tensor *const *vars = eg_model_trainable_variables(model, &n_vars);
    if (!all || !vars) return eg_last_status();
    eg_status status = EG_OK;
    int n_slots = eg_optimizer_slot_count(optimizer);
    eg_scope_begin();
    for (int i = 0; i < n_all && status == EG_OK; i++) {
        eg_tensor *value = eg_safetensors_get(file, eg_variable_name(all[i]));
        status = value ? eg_assign(all[i], value) : eg_last_status();
    }
    for (int i = 0; i < n_vars && status == EG_OK; i++) {
        for (int k = 0; k < n_slots && status == EG_OK; k++) {
            const char *slot = eg_optimizer_slot_name(optimizer, k);
            char name[NAME_SIZE];
            slot_tensor_name(name, vars[i], slot);
            if (!eg_safetensors_contains(file, name)) {
                if (meta->iterations == 0) continue; /* never updated: zeros, as fresh */
                fprintf(stderr, "eagle train: the checkpoint has no optimizer slot '%s'\n", name);
                status = EG_ERR_FORMAT;
                break;
            }
            eg_tensor *value = eg_safetensors_get(file, name);
            status =
                value ? eg_optimizer_set_slot(optimizer, vars[i], slot, value) : eg_last_status();
        }
    }
    eg_scope_end();
    if (status == EG_OK) status = eg_optimizer_set_iterations(optimizer, meta->iterations);
    if (status == EG_OK && meta->has_loss_scale)
        status = eg_optimizer_set_loss_scale_state(optimizer, meta->loss_scale,
                                                   meta->loss_scale_good_steps,
                                                   meta->loss_scale_skipped_steps);
    return status;
}
