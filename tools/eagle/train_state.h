/* Checkpoints of `eagle train`: everything needed to continue a run exactly where it stopped.
 *
 * One safetensors file (written atomically) holds
 *   - every variable of the model under its name ("dense/kernel", ..., batch normalization's
 *     moving statistics too), as `eagle eval` reads them;
 *   - the optimizer's slots as "optimizer/<variable>/<slot>" ("optimizer/dense/kernel/momentum");
 *   - metadata: eagle.model "mlp" or "cnn", eagle.hidden "64" (MLP only), eagle.optimizer "adam",
 *     eagle.optimizer.iterations (updates applied), eagle.learning_rate (the initial rate),
 *     eagle.decay_steps (of the cosine decay; 0 or absent: constant), eagle.batch_size,
 *     eagle.seed, eagle.epoch (epochs completed), eagle.epochs (the run's --epochs),
 *     eagle.train_examples, eagle.train_data (a fingerprint of the training examples: --data and
 *     --limit) and eagle.augment ("1" or "0");
 *   - for a run interrupted within an epoch (Ctrl-C), eagle.step: the steps of epoch
 *     eagle.epoch + 1 already trained, and the running sums of that epoch's log (eagle.step.loss,
 *     eagle.step.weight, eagle.step.hits, eagle.step.samples) so that its lines come out as the
 *     uninterrupted run's; absent at the end of an epoch.
 * The shuffling depends only on the seed and the epoch number, the augmentations only on the seed,
 * the epoch and the batch number, and the random draws of a step (dropout) only on the seed and
 * the step number, so restoring all of this reproduces the uninterrupted run bit for bit, from
 * the end of an epoch or from the middle of one. Every setting that changes the numbers is here;
 * --mode and --threads do not (every mode and thread count gives the same bits), --test-limit
 * only changes the evaluation. */
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
    long epoch;          /* epochs completed */
    long epochs;         /* epochs the run was started for (0: unknown, an older checkpoint) */
    int64_t iterations;  /* optimizer updates applied */
    char train_data[24]; /* mlp_data_fingerprint of the training split ("": not recorded) */
    bool augment;
    bool augment_known;  /* false: an older checkpoint that did not record it */
    char precision[16];  /* eg_policy_name of the run; "" in an older checkpoint (float32) */
    /* The loss scaling state (mixed_float16 runs; has_loss_scale false otherwise) */
    bool has_loss_scale;
    double loss_scale;
    int64_t loss_scale_good_steps, loss_scale_skipped_steps;
    /* Within epoch `epoch + 1` (all 0 at the end of an epoch): steps trained, and the sums behind
     * its log so far (eg_metric_mean of the loss, correct predictions, examples). */
    int64_t step;
    eg_metric_mean loss;
    double hits;
    int64_t samples;
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
