/* The examples' input pipeline for Fashion-MNIST (the Debian package dataset-fashion-mnist, or
 * the IDX files in another directory): the first `limit` examples of a split (0: all) as
 * (image f32 in [0, 1], label u8) pairs, the training split shuffled each epoch, in batches of
 * batch_size. Images are (28, 28), or (28, 28, 1) with `channel` (NHWC, for convolutions). NULL
 * with an error (eg_last_error). Shared by the Fashion-MNIST examples; a static inline function,
 * so each example still builds from its one C file (and this header). */
#ifndef EAGLE_EXAMPLES_FASHION_MNIST_DATA_H
#define EAGLE_EXAMPLES_FASHION_MNIST_DATA_H

#include <eagle.h>

static inline eg_dataset *fashion_mnist_batches(const char *dir, bool train, int64_t limit,
                                                int64_t batch_size, bool channel) {
    eg_tensor *images, *labels; /* u8 (N, 28, 28) and u8 (N,) */
    if (eg_mnist_load(dir, train, &images, &labels) != EG_OK) return NULL;
    int64_t n = eg_tensor_dim(images, 0);
    if (limit > 0 && limit < n) n = limit;
    eg_scope_begin(); /* the intermediates below are released at its end */
    eg_tensor *x = eg_mul_scalar(eg_cast(eg_slice(images, 0, 0, n, 1), EG_DTYPE_F32), 1.0 / 255);
    if (channel) x = eg_reshape(x, 4, (int64_t[]){n, 28, 28, 1});
    eg_tensor *y = eg_slice(labels, 0, 0, n, 1);
    eg_dataset *ds = x && y ? eg_dataset_from_tensor_slices(2, (eg_tensor *[]){x, y}) : NULL;
    eg_scope_end(); /* the dataset keeps its own references */
    eg_release(images);
    eg_release(labels);
    if (train) ds = eg_dataset_shuffle(ds, n, 42, true);
    return eg_dataset_batch(ds, batch_size, false);
}

#endif
