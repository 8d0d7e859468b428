/* Eagle — reading data sets from disk: IDX files (the MNIST family's format) and the MNIST /
 * Fashion-MNIST loader.
 *
 * Ownership follows tensor.h: returned tensors are NEW references (owned by the innermost open
 * scope, if any; otherwise released by the caller with eg_release()). Input is never trusted: a
 * bad file gives an error that names the file and what is wrong, never a crash. */
#ifndef EAGLE_IO_H
#define EAGLE_IO_H

#include <stdbool.h>

#include "eagle/status.h"
#include "eagle/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Where the Debian package dataset-fashion-mnist installs the data; used when eg_mnist_load()
 * gets a NULL directory. */
#define EG_FASHION_MNIST_DIR "/usr/share/datasets/fashion-mnist"

/* Reads one IDX file (plain, or gzip-compressed: detected by its magic bytes, not its name) into
 * a new CPU tensor with the file's shape. Element types map as u8 -> EG_DTYPE_U8,
 * i8 / i16 / i32 -> EG_DTYPE_I32 (widened), f32 -> EG_DTYPE_F32, f64 -> EG_DTYPE_F64; the file's
 * big-endian values are converted to host order.
 * Returns NULL with an error when:
 *   - path is NULL (EG_ERR_NULL_ARGUMENT);
 *   - the file cannot be opened or read (EG_ERR_IO, with the system's reason);
 *   - the gzip stream is corrupt, fails its CRC, is truncated, or decompresses to more than its
 *     IDX header announces (EG_ERR_FORMAT): the header is read first and decompression stops as
 *     soon as the stream passes that size, so a small "bomb" costs no more memory than the data
 *     it claims to hold (2 GiB at most);
 *   - the content is not a well-formed IDX file: bad magic, unknown type code, 0 or more than
 *     EG_MAX_DIMS dimensions, fewer or more data bytes than the header announces (EG_ERR_FORMAT,
 *     e.g. "train-images-idx3-ubyte.gz: truncated: header says 60000x28x28 = 47040000 bytes of
 *     data, file has 1200 after the 16-byte header");
 *   - memory runs out (EG_ERR_OUT_OF_MEMORY).
 * A dimension of size 0 is allowed and gives an empty tensor. */
eg_tensor *eg_idx_read(const char *path);

/* Decompressed-IDX cache (eg_idx_read and eg_mnist_load): the first read of a gzip IDX file
 * leaves its decompressed bytes in $XDG_CACHE_HOME/eagle (default ~/.cache/eagle); later reads
 * use them instead of gunzipping, and u8 data is then mapped in place, copy on write (such a
 * tensor's memory is not counted by the allocator's statistics). An entry is used only when the
 * source's size, mtime and gzip CRC-32 match it and its bytes have that CRC; otherwise the
 * source is read and the entry rewritten. A cache that cannot be read or written only costs
 * speed. EG_IDX_CACHE=0 turns it off, EG_IDX_CACHE=DIR moves it to DIR. Only a file that passed
 * every check is cached; the cache stays under EG_IDX_CACHE_LIMIT (default 1 GiB; "512M" etc.) by
 * dropping the least recently used entries, and temporary files of killed writers are removed. */

/* Loads the MNIST or Fashion-MNIST training split (train == true: train-images-idx3-ubyte and
 * train-labels-idx1-ubyte) or test split (t10k-...) from `directory`; each file may be stored
 * plain or with a ".gz" suffix (the plain one is preferred when both exist). directory NULL (or "")
 * means EG_FASHION_MNIST_DIR.
 * On success *images is a new EG_DTYPE_U8 tensor of shape (N, 28, 28) holding pixel values
 * 0..255 (kept u8 to save memory; convert per batch) and *labels a new EG_DTYPE_U8 tensor of
 * shape (N,) holding class indices 0..9, and EG_OK is returned.
 * On failure both are set to NULL and the status is returned, with an error that names the file:
 *   - images or labels NULL (EG_ERR_NULL_ARGUMENT);
 *   - directory or file missing (EG_ERR_IO; the message says how to get the data: "install the
 *     Debian package dataset-fashion-mnist (apt-get install dataset-fashion-mnist) or pass the
 *     data directory");
 *   - any eg_idx_read() failure;
 *   - images not u8 (N, 28, 28) with N >= 1, labels not u8 (N,), label count different from the
 *     image count, or a label above 9 (EG_ERR_FORMAT). */
eg_status eg_mnist_load(const char *directory, bool train, eg_tensor **images, eg_tensor **labels);

#if !defined(EG_NO_CALLSITE)
#define eg_idx_read(...)   EG_CALLSITE_(eg_idx_read(__VA_ARGS__))
#define eg_mnist_load(...) EG_CALLSITE_(eg_mnist_load(__VA_ARGS__))
#endif

#ifdef __cplusplus
}
#endif
#endif
