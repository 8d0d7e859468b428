/* Internal entry points of the safetensors and .npy readers that work on bytes in memory, so that
 * the parsers can be fuzzed and tested without touching the file system. */
#ifndef EAGLE_SRC_IO_CHECKPOINT_INTERNAL_H
#define EAGLE_SRC_IO_CHECKPOINT_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "eagle/checkpoint.h"

/* ---- safetensors ---- */

/* Validates a whole safetensors file image held in memory (the same checks as
 * eg_safetensors_open, messages starting with name_for_errors, which may be NULL) and returns a
 * handle in *out that BORROWS bytes: they must outlive it. eg_safetensors_get() copies out of
 * bytes; eg_safetensors_close() frees the handle, not bytes. On failure *out is NULL and the
 * status is returned (and raised). Never reads outside [bytes, bytes + n_bytes). */
eg_status eg__safetensors_open_memory(const uint8_t *bytes, size_t n_bytes,
                                      const char *name_for_errors, eg_safetensors **out);

/* ---- .npy ---- */

/* Header sizes above this are refused (numpy itself refuses more than 10000 bytes by default;
 * eagle's dtypes and at most 8 dimensions need about 120). */
#define EG__NPY_MAX_HEADER ((size_t)1 << 20)

/* A validated .npy header. */
typedef struct eg__npy_header {
    int major, minor;           /* format version: 1.0, 2.0 or 3.0 */
    eg_dtype dtype;             /* in-memory dtype */
    size_t elem_size;           /* bytes per element (file and memory alike) */
    bool byte_swap;             /* the file's byte order differs from the host's */
    bool fortran_order;         /* data is column-major */
    int n_dims;                 /* 0..EG_MAX_DIMS */
    int64_t shape[EG_MAX_DIMS]; /* entries past n_dims are 0 */
    size_t n_elems;             /* product of shape (1 for 0 dims) */
    size_t header_bytes;        /* magic + version + length field + dict: where the data starts */
    size_t data_bytes;          /* n_elems * elem_size */
} eg__npy_header;

/* Given the first n_bytes of a file (n_bytes may be less than the whole header), checks the magic
 * and the version and stores the total header size (where the data starts) in *header_bytes.
 * EG_ERR_FORMAT when the prefix is bad or too short to tell (10 bytes for version 1.0, 12 for
 * later), or the header is larger than EG__NPY_MAX_HEADER. */
eg_status eg__npy_header_size(const uint8_t *bytes, size_t n_bytes, const char *name_for_errors,
                              size_t *header_bytes);

/* Parses and validates the header at the start of bytes (which must hold at least the whole
 * header; any data after it is ignored here). EG_ERR_FORMAT or EG_ERR_UNSUPPORTED with a message
 * starting with name_for_errors (may be NULL); *out is then zeroed. Does not check how much data
 * follows: callers compare data_bytes with what they have. */
eg_status eg__npy_parse_header(const uint8_t *bytes, size_t n_bytes, const char *name_for_errors,
                               eg__npy_header *out);

/* True when the data needs eg__npy_convert (byte swap, Fortran order or bool normalisation);
 * otherwise the file bytes ARE the row-major host elements. */
bool eg__npy_needs_conversion(const eg__npy_header *header);

/* Converts header->data_bytes bytes of file data at src into row-major host elements at dst
 * (same size; the two must not overlap). */
void eg__npy_convert(const eg__npy_header *header, const uint8_t *src, void *dst);

#endif
