/* The convolutional network for `eagle train --model cnn` (and bench/train_cnn): two conv blocks
 * with batch normalization, max pooling and dropout, then a dense head, on Fashion-MNIST images
 * fed as NHWC (B, 28, 28, 1) f32 in [0, 1]. The data split type and loading are mlp.h's. */
#ifndef EAGLE_TOOLS_CNN_H
#define EAGLE_TOOLS_CNN_H

#include <eagle.h>

#include "mlp.h"

/* Recommended training settings: batches of 64, cnn_optimizer_new(1e-3, epochs * steps per
 * epoch), 15 epochs; bench/RESULTS.md has the measured runs. */
#define CNN_DEFAULT_EPOCHS        15
#define CNN_DEFAULT_BATCH_SIZE    64
#define CNN_DEFAULT_LEARNING_RATE 1e-3

/* Conv(32, 3)-BN-ReLU-Conv(32, 3)-BN-ReLU-MaxPool(2)-Dropout(0.25) -> (14, 14, 32),
 * Conv(64, 3)-BN-ReLU-Conv(64, 3)-BN-ReLU-MaxPool(2)-Dropout(0.25) -> (7, 7, 64), Flatten,
 * Dense(256)-BN-ReLU-Dropout(0.5), Dense(10) logits; every convolution 'same' (19.1M
 * multiply-adds per image forward). Convolutions and the hidden dense layer have
 * no bias (batch normalization's beta takes its place). Built for (B, 28, 28, 1); initialised from
 * the default generator (eg_manual_seed first for repeatable runs). NULL with the library's error
 * on failure. synchronized_batch_norm: the batch normalizations use the statistics of every
 * replica's batch while training (eg_batch_norm_options.synchronized). */
eg_model *cnn_build(bool synchronized_batch_norm);

/* Adam (Keras' defaults: beta 0.9 / 0.999, epsilon 1e-7) whose learning rate falls from
 * learning_rate to 0 along a cosine over total_steps updates (Keras CosineDecay, alpha 0);
 * total_steps < 1 keeps it constant. NULL with the library's error. */
eg_optimizer *cnn_optimizer_new(double learning_rate, int64_t total_steps);

/* mlp_image_batch with x (n, 28, 28, 1). */
eg_status cnn_batch(const mlp_data *data, const int64_t *indices, int64_t n, eg_tensor **x,
                    eg_tensor **labels);

/* Accuracy and mean loss on the whole split, in batches of 500, inference mode, no tapes. */
eg_status cnn_evaluate(eg_model *model, const mlp_data *data, double *accuracy, double *loss);

#endif
