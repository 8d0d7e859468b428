#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mlp.h"
#include "saved_model.h"

bool mlp_parse_hidden_why(const char *text, mlp_config *config, char *why, size_t why_size) {
    char scratch[1];
    if (!why) {
        why = scratch;
        why_size = sizeof scratch;
    }
    config->n_hidden = 0;
    if (!*text) {
        snprintf(why, why_size, "the list is empty");
        return false;
    }
    const char *p = text;
    for (;;) {
        /* Digits only: strtol alone would take " 64", "+64" and "0x40". */
        const char *digits = p;
        while (*p >= '0' && *p <= '9') p++;
        int at = (int)(p - text) + 1;
        if (p == digits && !*p) {
            snprintf(why, why_size, "a size is missing after the last ','");
            return false;
        }
        if (p == digits && *p == ',') {
            snprintf(why, why_size, "a size is missing at position %d", at);
            return false;
        }
        if (*p && *p != ',') {
            snprintf(why, why_size, "'%c' at position %d is not a digit or ','", *p, at);
            return false;
        }
        if (config->n_hidden == MLP_MAX_HIDDEN) {
            int n = 1;
            for (const char *c = text; *c; c++) n += *c == ',';
            snprintf(why, why_size, "%d hidden layers, at most %d are supported", n,
                     MLP_MAX_HIDDEN);
            return false;
        }
        long units = p - digits > 8 ? 0 : strtol(digits, NULL, 10);
        if (units < 1 || units > MLP_MAX_UNITS) {
            snprintf(why, why_size, "size %.*s is not in [1, %d]", (int)(p - digits), digits,
                     MLP_MAX_UNITS);
            return false;
        }
        config->hidden[config->n_hidden++] = units;
        if (!*p) return true;
        p++; /* the ',' */
    }
}

bool mlp_parse_hidden(const char *text, mlp_config *config) {
    return mlp_parse_hidden_why(text, config, NULL, 0);
}

void mlp_format_hidden(const mlp_config *config, char *buf, size_t size) {
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i < config->n_hidden && used < size; i++)
        used += (size_t)snprintf(buf + used, size - used, i ? ",%lld" : "%lld",
                                 (long long)config->hidden[i]);
}

/* mlp_build's layers are named as Sequential names them: dense, dense_1, dense_2, ... */
static void dense_name(int i, const char *variable, char *buf, size_t size) {
    if (i == 0)
        snprintf(buf, size, "dense/%s", variable);
    else
        snprintf(buf, size, "dense_%d/%s", i, variable);
}

bool mlp_check_stored(const eg_safetensors *file, const mlp_config *config, char *why,
                      size_t why_size) {
    int64_t in = 784;
    for (int i = 0; i <= config->n_hidden; i++) {
        int64_t out = i < config->n_hidden ? config->hidden[i] : 10;
        for (int k = 0; k < 2; k++) {
            const char *variable = k ? "bias" : "kernel";
            int64_t want[2] = {k ? out : in, out};
            int want_dims = k ? 1 : 2;
            char name[64];
            dense_name(i, variable, name, sizeof name);
            int n_dims = 0;
            int64_t shape[EG_MAX_DIMS];
            eg_dtype dtype;
            if (!eg_safetensors_contains(file, name)) {
                snprintf(why, why_size, "it has no tensor '%s'", name);
                return false;
            }
            if (eg_safetensors_info(file, name, &dtype, &n_dims, shape) != EG_OK) {
                snprintf(why, why_size, "%s", eg_last_error());
                eg_clear_error();
                return false;
            }
            /* a kernel of an int8 checkpoint (`eagle quantize`): i8, its scales beside it */
            char scale[80];
            snprintf(scale, sizeof scale, "%s%s", name, SAVED_SCALE_SUFFIX);
            bool int8 = !k && dtype == EG_DTYPE_I8 && eg_safetensors_contains(file, scale);
            bool same = (dtype == EG_DTYPE_F32 || int8) && n_dims == want_dims;
            for (int d = 0; same && d < n_dims; d++) same = shape[d] == want[d];
            if (!same) {
                char stored[160], wanted[64];
                size_t used = 0;
                stored[0] = '\0';
                for (int d = 0; d < n_dims && used < sizeof stored; d++)
                    used += (size_t)snprintf(stored + used, sizeof stored - used,
                                             d ? ", %lld" : "%lld", (long long)shape[d]);
                if (k)
                    snprintf(wanted, sizeof wanted, "(%lld)", (long long)out);
                else
                    snprintf(wanted, sizeof wanted, "(%lld, %lld)", (long long)in, (long long)out);
                snprintf(why, why_size, "tensor '%s' is %s (%s), the model needs f32 %s", name,
                         eg_dtype_name(dtype), stored, wanted);
                return false;
            }
        }
        in = out;
    }
    return true;
}

eg_model *mlp_build(const mlp_config *config) {
    eg_model *model = eg_sequential_new("mlp");
    if (!model) return NULL;
    for (int i = 0; i < config->n_hidden; i++)
        if (eg_sequential_add(model, eg_dense_new(config->hidden[i], EG_ACTIVATION_RELU)) != EG_OK)
            goto fail;
    if (eg_sequential_add(model, eg_dense_new(10, EG_ACTIVATION_NONE)) != EG_OK) goto fail;
    int64_t input_shape[2] = {-1, 784};
    if (eg_model_build(model, 2, input_shape) != EG_OK) goto fail;
    return model;
fail:
    eg_model_free(model);
    return NULL;
}

bool mlp_data_try_load(const char *directory, bool train, int64_t limit, mlp_data *data) {
    memset(data, 0, sizeof *data);
    if (eg_mnist_load(directory, train, &data->images, &data->labels) != EG_OK) return false;
    data->n = eg_tensor_dim(data->images, 0);
    if (limit > 0 && limit < data->n) {
        eg_tensor *images = eg_slice(data->images, 0, 0, limit, 1);
        eg_tensor *labels = eg_slice(data->labels, 0, 0, limit, 1);
        eg_release(data->images);
        eg_release(data->labels);
        data->images = images;
        data->labels = labels;
        data->n = limit;
        if (!images || !labels) {
            mlp_data_free(data);
            return false;
        }
    }
    return true;
}

bool mlp_data_load(const char *directory, bool train, int64_t limit, mlp_data *data) {
    if (mlp_data_try_load(directory, train, limit, data)) return true;
    fprintf(stderr, "eagle: %s\n", eg_last_error());
    return false;
}

/* FNV-1a's prime over 8-byte words with a final avalanche: not cryptographic, only to tell two
 * data sets apart. */
static uint64_t hash_bytes(uint64_t h, const uint8_t *bytes, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t word;
        memcpy(&word, bytes + i, 8);
        h = (h ^ word) * 0x100000001B3ull;
        h ^= h >> 29;
    }
    for (; i < n; i++) h = (h ^ bytes[i]) * 0x100000001B3ull;
    return h;
}

static bool hash_tensor(const eg_tensor *t, uint64_t *h) {
    size_t bytes = (size_t)eg_tensor_n_elems(t) * eg_dtype_size(eg_tensor_dtype(t));
    if (eg_tensor_is_contiguous(t)) {
        const uint8_t *data = eg_tensor_data(t);
        if (!data) return false;
        *h = hash_bytes(*h, data, bytes);
        return true;
    }
    uint8_t *copy = malloc(bytes ? bytes : 1);
    bool ok = copy && eg_tensor_copy_to_host(t, copy, bytes) == EG_OK;
    if (ok) *h = hash_bytes(*h, copy, bytes);
    free(copy);
    return ok;
}

bool mlp_data_fingerprint(const mlp_data *data, char *buf, size_t size) {
    uint64_t h = 0xCBF29CE484222325ull ^ (uint64_t)data->n;
    if (!hash_tensor(data->images, &h) || !hash_tensor(data->labels, &h)) return false;
    h ^= h >> 32;
    h *= 0xD6E8FEB86659FD93ull;
    h ^= h >> 32;
    snprintf(buf, size, "%016llx", (unsigned long long)h);
    return true;
}

void mlp_data_free(mlp_data *data) {
    eg_release(data->images);
    eg_release(data->labels);
    memset(data, 0, sizeof *data);
}

eg_status mlp_image_batch(const mlp_data *data, const int64_t *indices, int64_t n, int n_dims,
                          const int64_t *x_shape, eg_tensor **x, eg_tensor **labels) {
    /* Batches are cut on the host, where the data set lives, then moved to the device the
     * caller trains on (its current device: --device). */
    const eg_device *target = eg_device_current();
    eg_device_scope_begin(eg_tensor_device(data->images));
    eg_tensor *index = eg_tensor_from_data(indices, EG_DTYPE_I64, 1, &n);
    eg_tensor *pixels = eg_gather(data->images, index, 0);
    *x = eg_reshape(eg_mul_scalar(eg_cast(pixels, EG_DTYPE_F32), 1.0 / 255.0), n_dims, x_shape);
    *labels = eg_gather(data->labels, index, 0);
    eg_device_scope_end();
    if (*x && *labels && target != eg_tensor_device(*x)) {
        *x = eg_tensor_to(*x, target);
        *labels = eg_tensor_to(*labels, target);
    }
    return *x && *labels ? EG_OK : eg_last_status();
}

eg_status mlp_batch(const mlp_data *data, const int64_t *indices, int64_t n, eg_tensor **x,
                    eg_tensor **labels) {
    int64_t flat[2] = {n, 784};
    return mlp_image_batch(data, indices, n, 2, flat, x, labels);
}

eg_status mlp_evaluate(eg_model *model, const mlp_data *data, double *accuracy, double *loss) {
    enum { BATCH = 1000 };
    int64_t *indices = malloc(BATCH * sizeof *indices);
    if (!indices) return EG_ERR_OUT_OF_MEMORY;
    eg_metric_mean hits = {0}, losses = {0};
    eg_status status = EG_OK;
    eg_no_grad_begin();
    for (int64_t start = 0; start < data->n && status == EG_OK; start += BATCH) {
        int64_t n = data->n - start < BATCH ? data->n - start : BATCH;
        for (int64_t i = 0; i < n; i++) indices[i] = start + i;
        eg_scope_begin();
        eg_tensor *x, *y;
        status = mlp_batch(data, indices, n, &x, &y);
        eg_tensor *logits = status == EG_OK ? eg_model_call(model, x, false) : NULL;
        eg_tensor *batch_loss =
            eg_loss_sparse_categorical_crossentropy(y, logits, true, EG_REDUCTION_NONE);
        eg_tensor *batch_hits = eg_metric_sparse_categorical_accuracy(y, logits);
        if (batch_loss && batch_hits) {
            eg_metric_mean_update(&losses, batch_loss);
            eg_metric_mean_update(&hits, batch_hits);
        }
        status = eg_last_status();
        eg_scope_end();
    }
    eg_no_grad_end();
    free(indices);
    *accuracy = eg_metric_mean_result(&hits);
    *loss = eg_metric_mean_result(&losses);
    return status;
}

eg_status mlp_step(eg_tensor *const *in, eg_tensor **out, void *user) {
    mlp_step_state *s = user;
    int n_vars;
    eg_tensor *const *vars = eg_model_trainable_variables(s->model, &n_vars);
    eg_tensor *grads[MODEL_MAX_VARIABLES];
    if (!vars) return eg_last_status();
    if (n_vars > MODEL_MAX_VARIABLES) {
        fprintf(stderr, "eagle: a model of %d trainable variables is more than a step takes\n",
                n_vars);
        return EG_ERR_INVALID_ARGUMENT;
    }
    eg_profiler_range_push("forward");
    eg_tape *tape = eg_tape_begin(false);
    eg_tensor *logits = eg_model_call(s->model, in[0], true);
    eg_tensor *loss =
        eg_loss_sparse_categorical_crossentropy(in[1], logits, true, EG_REDUCTION_MEAN);
    out[0] = loss;
    out[1] = eg_sum(eg_metric_sparse_categorical_accuracy(in[1], logits), 0, NULL, false);
    eg_tensor *target = loss;
    eg_tensor *scaled = s->loss_scaling ? eg_optimizer_scale_loss(s->optimizer, target) : NULL;
    if (scaled) target = scaled;
    eg_profiler_range_pop();
    eg_profiler_range_push("backward");
    eg_status status = eg_tape_gradient(tape, target, n_vars, vars, grads, EG_UNCONNECTED_ZERO);
    eg_tape_free(tape);
    eg_release(scaled);
    eg_profiler_range_pop();
    eg_profiler_range_push("optimizer");
    if (status == EG_OK) status = eg_optimizer_apply_gradients(s->optimizer, n_vars, grads, vars);
    eg_profiler_range_pop();
    return status == EG_OK ? eg_last_status() : status;
}
