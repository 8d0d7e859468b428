/* The input pipeline of `eagle train`: training batches built ahead of the training step on the
 * library's pipeline threads (eg_dataset, include/eagle/data.h).
 *
 * Wiring into train.c (per epoch, one iterator; the batch's tensors belong to the step's scope):
 *
 *     eg_dataset *batches = cli_training_pipeline(&train, o.batch_size, o.seed, false,
 *                                                 false, (int)epochs_done + 1);
 *     for (int epoch = (int)epochs_done + 1; epoch <= o.epochs; epoch++) {
 *         eg_dataset_iterator *it = eg_dataset_iterator_new(batches);
 *         for (int64_t step = 0; step < steps; step++) {
 *             eg_scope_begin();
 *             eg_element batch;
 *             bool end;
 *             if (eg_dataset_iterator_next(it, &batch, &end) != EG_OK || end) ... fail
 *             ... train_step on x = batch.tensors[0], y = batch.tensors[1] (n = dim 0 of y) ...
 *             eg_scope_end();
 *         }
 *         eg_dataset_iterator_free(it);
 *         ... evaluate ...
 *     }
 *     eg_dataset_free(batches);
 *
 * The k-th iterator is epoch first_epoch + k, so create exactly one per epoch, in order (a resumed
 * run passes its first epoch, and with cli_training_pipeline_from the batches of that epoch it
 * already trained). */
#ifndef EAGLE_TOOLS_PIPELINE_H
#define EAGLE_TOOLS_PIPELINE_H

#include <stdbool.h>
#include <stdint.h>

#include "mlp.h"

/* A dataset of training batches (x f32 (B, 784) = pixels / 255, or (B, 28, 28, 1) when images,
 * y u8 (B,)), the last one smaller
 * when batch_size does not divide train->n. Its k-th iterator (k = 0, 1, ...) yields epoch
 * first_epoch + k: the examples in the order cli_shuffle_order(order, n, seed, epoch) gives, which
 * is train.c's shuffle(). Without augment each batch is bitwise identical to mlp_batch() of those
 * indices, whatever the parallelism. With augment each image is first mirrored with probability
 * 1/2 and shifted by up to 2 pixels (random crop of the image padded with 2 pixels of zeros), its
 * randomness a function of (seed, epoch, batch, position in the batch) only — the run's epoch and
 * batch numbers, so a resumed run draws what the uninterrupted one drew. Batches are made on
 * the pipeline's threads (a map with AUTOTUNE parallel calls, one call per batch, and a prefetch
 * with an AUTOTUNE buffer). `train` is
 * borrowed: it must outlive the dataset and its iterators. NULL with the library's error. */
eg_dataset *cli_training_pipeline(const mlp_data *train, int64_t batch_size, uint64_t seed,
                                  bool augment, bool images, int first_epoch);
/* The same, its first iterator starting at batch first_step of first_epoch (0 .. the epoch's
 * batch count): the rest of an epoch interrupted after first_step steps, each batch (augmentation
 * included) the one the uninterrupted run had there. */
eg_dataset *cli_training_pipeline_from(const mlp_data *train, int64_t batch_size, uint64_t seed,
                                       bool augment, bool images, int first_epoch,
                                       int64_t first_step);

/* Fisher-Yates with splitmix64: the order depends only on the seed and the epoch (the function
 * train.c calls shuffle()). */
void cli_shuffle_order(int64_t *order, int64_t n, unsigned long long seed, int epoch);

#endif
