/* The models `eagle train` and `eagle eval` share: an MLP on Fashion-MNIST images, with the
 * data kept u8 and converted per batch. */
#ifndef EAGLE_TOOLS_MLP_H
#define EAGLE_TOOLS_MLP_H

#include <eagle.h>

#define MLP_MAX_HIDDEN 8
/* The most units of one hidden layer. */
#define MLP_MAX_UNITS (1 << 20)
/* The most trainable variables a model of `eagle train` has (the MLP 2 * (MLP_MAX_HIDDEN + 1),
 * the CNN 17); every variable, trainable or not, the CNN 27. */
#define MODEL_MAX_VARIABLES 64

typedef struct mlp_config {
    int n_hidden;
    int64_t hidden[MLP_MAX_HIDDEN];
} mlp_config;

/* Parses "64" or "512,512" (digits and single commas only, 1 to MLP_MAX_HIDDEN sizes in
 * [1, MLP_MAX_UNITS]) into config; false on a malformed list. */
bool mlp_parse_hidden(const char *text, mlp_config *config);
/* The same; when false, why (if not NULL) gets what is wrong, e.g. "an empty size at position 4".
 */
bool mlp_parse_hidden_why(const char *text, mlp_config *config, char *why, size_t why_size);
/* "64" or "512,512" into buf. */
void mlp_format_hidden(const mlp_config *config, char *buf, size_t size);

/* Flatten-free MLP: (B, 784) -> Dense(h, relu)... -> Dense(10) logits. Built for 784 inputs. */
eg_model *mlp_build(const mlp_config *config);

/* True when file holds every variable of mlp_build(config) as f32 of the model's shape, read from
 * the header only: a checkpoint's metadata must not make us build (and allocate) a model its
 * tensors do not fit. Otherwise false, why getting the first difference. */
bool mlp_check_stored(const eg_safetensors *file, const mlp_config *config, char *why,
                      size_t why_size);

/* A split of the data set: images u8 (N, 28, 28), labels u8 (N,). */
typedef struct mlp_data {
    eg_tensor *images, *labels;
    int64_t n;
} mlp_data;

/* Loads a split from directory (NULL = the Debian package's place); limit > 0 keeps the first
 * `limit` examples. Prints the library's error and returns false on failure. */
bool mlp_data_load(const char *directory, bool train, int64_t limit, mlp_data *data);
/* The same without printing: the error stays in eg_last_error() for the caller to report. */
bool mlp_data_try_load(const char *directory, bool train, int64_t limit, mlp_data *data);
/* 16 hex digits that tell the split's examples apart from other data (a hash of its images and
 * labels, not cryptographic); false with the library's error. */
bool mlp_data_fingerprint(const mlp_data *data, char *buf, size_t size);
void mlp_data_free(mlp_data *data);

/* The examples at indices[0..n) as x f32 scaled to [0, 1] in the shape x_shape (n_dims dims,
 * x_shape[0] = n) and labels u8 (n,), cut on the host and then put on the current device
 * (--device); both owned by the current scope. */
eg_status mlp_image_batch(const mlp_data *data, const int64_t *indices, int64_t n, int n_dims,
                          const int64_t *x_shape, eg_tensor **x, eg_tensor **labels);

/* mlp_image_batch with x (n, 784). */
eg_status mlp_batch(const mlp_data *data, const int64_t *indices, int64_t n, eg_tensor **x,
                    eg_tensor **labels);

/* What a training step updates. */
typedef struct mlp_step_state {
    eg_model *model;
    eg_optimizer *optimizer;
    bool loss_scaling; /* the gradient is taken of eg_optimizer_scale_loss's scaled loss */
} mlp_step_state;

/* One training step on in[0] = x (B, 784) f32 (for the CNN (B, 28, 28, 1)) and in[1] = labels
 * (B,) of a model with at most MODEL_MAX_VARIABLES trainable variables: forward, loss, tape
 * gradient, optimizer update; out[0] = the mean loss, out[1] = the number of correct
 * predictions (both 0-d). user is an mlp_step_state. The same function runs in every mode:
 * called directly (eager), between eg_lazy_begin/end (lazy) or traced by eg_function (graph).
 * Its phases are marked as profiler ranges. `eagle bench` and `eagle profile` time it; `eagle
 * train` trains with eg_model_fit. */
eg_status mlp_step(eg_tensor *const *in, eg_tensor **out, void *user);

/* Accuracy and mean loss of the model on the whole split, in batches, without tapes. */
eg_status mlp_evaluate(eg_model *model, const mlp_data *data, double *accuracy, double *loss);

#endif
