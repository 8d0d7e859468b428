/* Eagle — checkpoints in the safetensors format, and NumPy .npy arrays.
 *
 * Both formats are written ATOMICALLY: the bytes go to "<target>.tmp.<pid>.<n>" in the target's
 * directory, which is flushed, fsync'ed and renamed over the target, and then the directory is
 * fsync'ed. A crash or a failure at any point (a full disk, a missing directory, a tensor that
 * cannot be read) leaves the previous file intact and removes the temporary file; temporary files
 * that killed writers left behind (their process is gone) are removed by the next save of the same
 * target. When `path` is a symbolic link the file it points to is written (the link stays; a
 * link loop is an error); an existing file keeps its permission bits, a new one gets 0666 minus
 * the umask. A target that is not a regular file (a FIFO, a device) is refused.
 *
 * Files read are never trusted: every malformed input gives EG_ERR_FORMAT with a message that
 * names the file and the problem, never a crash, and no allocation is sized by a header before the
 * file is known to hold that much data.
 *
 * Ownership follows tensor.h: returned tensors are NEW references (owned by the innermost open
 * scope, if any; otherwise released by the caller with eg_release()); tensor arguments are
 * borrowed. Host byte order does not matter: files are little-endian and converted as needed. */
#ifndef EAGLE_CHECKPOINT_H
#define EAGLE_CHECKPOINT_H

#include <stdint.h>

#include "eagle/status.h"
#include "eagle/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- safetensors (https://github.com/huggingface/safetensors) ----
 *
 * Layout: an 8-byte little-endian header length N, N bytes of UTF-8 JSON
 *   {"__metadata__": {"key": "value", ...},
 *    "name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}, ...}
 * then the data buffer; each tensor's bytes are buffer[begin, end), little-endian, row-major. */

/* The largest JSON header accepted, as in the reference implementation. */
#define EG_SAFETENSORS_MAX_HEADER 100000000

/* Writes n tensors and n_metadata string pairs to a safetensors file at path, atomically (see
 * the top of this file).
 *   - names[i] names tensors[i]; names must be unique, valid UTF-8, without NUL bytes (they are C
 *     strings) and not "__metadata__". The empty name is allowed.
 *   - Every eagle dtype is stored: F32 F64 F16 BF16 I32 I64 I8 U8 BOOL. Tensors may be views (non-
 *     contiguous, e.g. transposed) and may live on any device: their elements are written in
 *     row-major order of their shape. 0-d tensors have shape [], empty ones 0 data bytes.
 *   - Data order: by element size, largest first, then by name (byte order). Like the reference
 *     writer's order (by dtype, then name) this keeps every tensor aligned to its element size
 *     (any order is valid for readers as long as the offsets tile the buffer). The JSON header is
 *     padded with spaces to a multiple of 8 bytes, so the buffer starts 8-aligned.
 *     eg_safetensors_name() lists tensors in this order when the file is read back.
 *   - metadata_keys[i] / metadata_values[i] go into "__metadata__" (unique keys, valid UTF-8,
 *     no NUL). "format": "eagle" and "eagle_version": eg_version() are added unless the caller
 *     gives those keys (e.g. "format": "pt", which Hugging Face transformers expects).
 * names / tensors may be NULL when n == 0, metadata_keys / metadata_values when n_metadata == 0.
 * Returns EG_OK, or (nothing changed on disk):
 *   EG_ERR_NULL_ARGUMENT (path, an array, a name, a key, a value or a tensor NULL),
 *   EG_ERR_INVALID_ARGUMENT (n or n_metadata negative, a duplicate / reserved / non-UTF-8 name or
 *     key, an empty path), EG_ERR_IO (cannot create the temporary file, write failed, e.g. a full
 *     disk, rename failed; the message names the step and the system's reason),
 *   EG_ERR_OUT_OF_MEMORY, or the error of reading a tensor's data from its device. */
eg_status eg_safetensors_save(const char *path, int n, const char *const *names,
                              eg_tensor *const *tensors, int n_metadata,
                              const char *const *metadata_keys, const char *const *metadata_values);

/* An open, validated safetensors file. Opaque; free with eg_safetensors_close(). */
typedef struct eg_safetensors eg_safetensors;

/* Opens path and validates its whole structure (the data bytes themselves are read later, by
 * eg_safetensors_get). Returns a handle the caller owns, or NULL with an error:
 *   EG_ERR_NULL_ARGUMENT (path NULL), EG_ERR_IO (cannot open / read / stat, is a directory),
 *   EG_ERR_OUT_OF_MEMORY, EG_ERR_FORMAT for every check the reference reader makes, each with its
 *   own message naming the file (and the tensor):
 *     - file shorter than 8 bytes; header length above EG_SAFETENSORS_MAX_HEADER; header running
 *       past the end of the file;
 *     - header not valid UTF-8, not starting with '{', not valid JSON (position given);
 *     - "__metadata__" not an object of string values; a tensor entry not an object, missing or
 *       unknown fields; duplicate tensor names (or metadata keys);
 *     - unknown dtype; shape entries not non-negative integers; element count overflowing;
 *     - data_offsets not two non-negative integers, begin > end, end - begin different from the
 *       element count times the dtype size ("model.safetensors: tensor 'dense/kernel':
 *       data_offsets [0, 100] hold 100 bytes but F32 (784, 64) needs 200704");
 *     - tensors not covering the data buffer contiguously from offset 0 (a gap or an overlap);
 *     - the data buffer's size different from what follows the header in the file.
 *   Names and metadata strings containing NUL bytes are refused too (EG_ERR_FORMAT): the API hands
 *   them out as C strings. All dtypes of the format are accepted here (I16, U16, F8_E4M3, ...);
 *   only reading one that eagle has no dtype for fails (see eg_safetensors_get).
 * The file stays open until eg_safetensors_close(): replacing it with a new checkpoint (an atomic
 * rename) does not disturb the handle, which keeps reading the old file. */
eg_safetensors *eg_safetensors_open(const char *path);

/* Closes the file and frees everything; tensors already read stay valid. NULL is ignored. */
void eg_safetensors_close(eg_safetensors *st);

/* Number of tensors (0 for NULL, with an error). */
int eg_safetensors_count(const eg_safetensors *st);

/* Name of tensor i, 0 <= i < count, in the order of their data in the file; valid until close.
 * NULL with an error when st is NULL (EG_ERR_NULL_ARGUMENT) or i is out of range
 * (EG_ERR_INVALID_ARGUMENT). */
const char *eg_safetensors_name(const eg_safetensors *st, int i);

/* True when the file holds a tensor called name (false, no error, when not; false with an error
 * when st or name is NULL). */
bool eg_safetensors_contains(const eg_safetensors *st, const char *name);

/* The stored dtype and shape of tensor name without reading its data: fills *dtype, *n_dims and
 * shape[0 .. n_dims) (shape must have room for EG_MAX_DIMS entries); any output may be NULL.
 * EG_ERR_INVALID_ARGUMENT when there is no such tensor, EG_ERR_UNSUPPORTED when its dtype has no
 * eagle equivalent or it has more than EG_MAX_DIMS dimensions, EG_ERR_NULL_ARGUMENT. */
eg_status eg_safetensors_info(const eg_safetensors *st, const char *name, eg_dtype *dtype,
                              int *n_dims, int64_t *shape);

/* Reads tensor name into a NEW contiguous CPU tensor of its dtype and shape (a copy: it does not
 * depend on st afterwards). BOOL bytes other than 0 are read as 1. NULL with an error when:
 * st or name is NULL (EG_ERR_NULL_ARGUMENT); no tensor has that name (EG_ERR_INVALID_ARGUMENT,
 * "model.safetensors: no tensor named 'x'"); its dtype has no eagle equivalent (I16, U16, U32,
 * U64, F8_*, F4, F6_*, C64) or it has more than EG_MAX_DIMS dimensions (EG_ERR_UNSUPPORTED);
 * reading fails or the file has shrunk since it was opened (EG_ERR_IO); memory runs out.
 * Safe to call from several threads on one handle. */
eg_tensor *eg_safetensors_get(const eg_safetensors *st, const char *name);

/* The "__metadata__" value for key, or NULL when the file has no such key (no error then; an
 * error only when st or key is NULL). Valid until close. */
const char *eg_safetensors_metadata(const eg_safetensors *st, const char *key);

/* Number of metadata entries, and the key of entry i (sorted by key, byte order; NULL with an
 * error when out of range). */
int eg_safetensors_metadata_count(const eg_safetensors *st);
const char *eg_safetensors_metadata_key(const eg_safetensors *st, int i);

/* ---- NumPy .npy (https://numpy.org/doc/stable/reference/generated/numpy.lib.format.html) ----
 *
 * Layout: "\x93NUMPY", version (1.0: 2-byte header length; 2.0 and 3.0: 4-byte), a Python dict
 * literal {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), } padded with spaces and a
 * newline, then the elements. */

/* Reads a .npy file (format version 1.0, 2.0 or 3.0) into a NEW contiguous CPU tensor.
 * descr -> dtype: '<f4' F32, '<f8' F64, '<f2' F16, '<i4' I32, '<i8' I64, '|u1' U8, '|b1' BOOL
 * (bool bytes other than 0 read as 1). Big-endian ('>f4', ...) and native ('=f4') byte orders are
 * converted; for one-byte types '|', '<', '>' and '=' are all accepted. fortran_order True is
 * supported: the column-major data is transposed into eagle's row-major layout, so the tensor has
 * the file's shape and the same element at each index as numpy.load gives. shape () gives a 0-d
 * tensor; a 0 in the shape an empty one.
 * NULL with an error when: path is NULL (EG_ERR_NULL_ARGUMENT); the file cannot be opened or read
 * (EG_ERR_IO); the dtype is not one of those above, e.g. '<i2' or a structured dtype, or the shape
 * has more than EG_MAX_DIMS dimensions (EG_ERR_UNSUPPORTED, naming what is supported); the file is
 * not well-formed (EG_ERR_FORMAT, naming the file and the problem: bad magic, unknown version,
 * truncated header, a header that is not exactly a dict of the three keys 'descr' (a string),
 * 'fortran_order' (True or False) and 'shape' (a tuple of non-negative ints), an element count
 * that overflows, data shorter or longer than the header announces); memory runs out. */
eg_tensor *eg_npy_read(const char *path);

/* Writes t to path as .npy format version 1.0, little-endian, C order, with exactly the bytes
 * numpy.save writes for the same array (header padded to a multiple of 64 bytes); atomically
 * (see the top of this file). Views are written in row-major order of their shape; tensors on
 * other devices are copied to the host first. Errors: EG_ERR_NULL_ARGUMENT (path or t NULL),
 * EG_ERR_UNSUPPORTED for BF16 (numpy has no bfloat16; convert to F32 first), EG_ERR_IO (as
 * eg_safetensors_save), EG_ERR_OUT_OF_MEMORY. */
eg_status eg_npy_write(const char *path, const eg_tensor *t);

#if !defined(EG_NO_CALLSITE)
#define eg_safetensors_contains(...) EG_CALLSITE_(eg_safetensors_contains(__VA_ARGS__))
#define eg_safetensors_metadata(...) EG_CALLSITE_(eg_safetensors_metadata(__VA_ARGS__))
#define eg_safetensors_count(...)          EG_CALLSITE_(eg_safetensors_count(__VA_ARGS__))
#define eg_safetensors_metadata_count(...) EG_CALLSITE_(eg_safetensors_metadata_count(__VA_ARGS__))

#define eg_safetensors_save(...)         EG_CALLSITE_(eg_safetensors_save(__VA_ARGS__))
#define eg_safetensors_open(...)         EG_CALLSITE_(eg_safetensors_open(__VA_ARGS__))
#define eg_safetensors_info(...)         EG_CALLSITE_(eg_safetensors_info(__VA_ARGS__))
#define eg_safetensors_get(...)          EG_CALLSITE_(eg_safetensors_get(__VA_ARGS__))
#define eg_safetensors_name(...)         EG_CALLSITE_(eg_safetensors_name(__VA_ARGS__))
#define eg_safetensors_metadata_key(...) EG_CALLSITE_(eg_safetensors_metadata_key(__VA_ARGS__))
#define eg_npy_read(...)                 EG_CALLSITE_(eg_npy_read(__VA_ARGS__))
#define eg_npy_write(...)                EG_CALLSITE_(eg_npy_write(__VA_ARGS__))
#endif

#ifdef __cplusplus
}
#endif
#endif
