/* Checkpoints of `eagle train`: everything needed to continue a run exactly where it stopped.
 *
 * One safetensors file (written atomically) holds
 *   - every variable of the model under its name ("dense/kernel", ..., batch normalization's
 *     moving statistics too), as `eagle eval` reads them;
 *   - the optimizer's slots as "optimizer/<variable>/<slot>" ("optimizer/dense/kernel/momentum");
 *   - metadata: eagle.model "mlp" or "cnn", eagle.hidden "64" (MLP only), eagle.optimizer "adam",
 *     eagle.optimizer.iterations (updates applied), eagle.learning_rate (the initial rate),
 *     eagle.decay_steps (of the cosine decay; 0 or absent: constant), eagle.batch_size,
 *     eagle.seed, eagle.epoch (epochs completed), eagle.epochs (the run's --epochs) and
 *     eagle.train_examples.
 * The shuffling depends only on the seed and the epoch number, and the random draws of a step
 * (dropout) only on the seed and the step number, so restoring all of this reproduces the
 * uninterrupted run bit for bit. */
#ifndef EAGLE_TOOLS_TRAIN_STATE_H
#define EAGLE_TOOLS_TRAIN_STATE_H

#include "mlp.h"

/* The configuration and progress of a run, as stored in a checkpoint's metadata. */
typedef struct train_meta {
    char model_kind[8];   /* "mlp" or "cnn" */
    mlp_config model;     /* the MLP's hidden layers */
    char optimizer[16];   /* "adam", "adamw", "sgd", "rmsprop" */
    double learning_rate; /* the initial rate */
    int64_t decay_steps;  /* cosine decay to 0 over this many updates; 0: constant */
    long batch_size;
    unsigned long long seed;
    int64_t train_examples;
    long epoch;         /* epochs completed */
    long epochs;        /* epochs the run was started for (0: unknown, an older checkpoint) */
    int64_t iterations; /* optimizer updates applied */
} train_meta;

/* Writes the checkpoint (meta's iterations is taken from the optimizer). */
eg_status train_state_save(const char *path, eg_model *model, const eg_optimizer *optimizer,
                           const train_meta *meta);

/* Reads a checkpoint's metadata into *meta. Prints the problem (naming path) and returns false
 * when the file is not a checkpoint `eagle train --resume` can continue. */
bool train_state_read_meta(const eg_safetensors *file, const char *path, train_meta *meta);

/* Restores every variable of model and the slots and step counter of optimizer (built from the
 * same meta) from file. */
eg_status train_state_restore(const eg_safetensors *file, eg_model *model, eg_optimizer *optimizer,
                              const train_meta *meta);

#endif
