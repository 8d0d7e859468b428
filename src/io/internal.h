/* Internal IDX reader pieces, split so that the parser and the byte-order conversion can be fuzzed
 * and tested without allocating tensors or touching the file system. */
#ifndef EAGLE_SRC_IO_INTERNAL_H
#define EAGLE_SRC_IO_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "eagle/status.h"
#include "eagle/tensor.h"

/* Files (plain or decompressed) larger than this are refused: a 2 GiB IDX file is far beyond any
 * data set this reader is meant for, and a tiny gzip bomb must not exhaust memory. */
#define EG__IDX_MAX_BYTES ((size_t)2 << 30)

/* The type codes of the IDX format (third byte of the magic). */
typedef enum eg__idx_type {
    EG__IDX_U8 = 0x08,
    EG__IDX_I8 = 0x09,
    EG__IDX_I16 = 0x0B,
    EG__IDX_I32 = 0x0C,
    EG__IDX_F32 = 0x0D,
    EG__IDX_F64 = 0x0E
} eg__idx_type;

/* A validated IDX file. `data` points INTO the parsed buffer (big-endian, unaligned) and is only
 * valid while that buffer lives. */
typedef struct eg__idx_view {
    eg__idx_type type;
    int n_dims;                 /* 1..EG_MAX_DIMS */
    int64_t shape[EG_MAX_DIMS]; /* entries past n_dims are 0 */
    size_t n_elems;             /* product of shape; 0 when some dimension is 0 */
    size_t elem_size;           /* bytes per element in the file */
    size_t header_bytes;        /* 4 + 4 * n_dims */
    const uint8_t *data;        /* bytes + header_bytes */
    size_t data_bytes;          /* n_elems * elem_size == n_bytes - header_bytes */
} eg__idx_view;

/* Validates an IDX image held in memory: magic, type code, number of dimensions, that the
 * dimensions' product does not overflow, and that exactly the announced data follows the header
 * (no truncation, no trailing bytes). On failure raises EG_ERR_FORMAT with a message starting with
 * name_for_errors (may be NULL) and returns it; *out is then zeroed. Never reads outside
 * [bytes, bytes + n_bytes); bytes may be NULL only when n_bytes is 0. */
eg_status eg__idx_parse(const uint8_t *bytes, size_t n_bytes, const char *name_for_errors,
                        eg__idx_view *out);

/* The in-memory dtype for an IDX type: u8 -> U8, i8/i16/i32 -> I32, f32 -> F32, f64 -> F64. */
eg_dtype eg__idx_dtype(eg__idx_type type);

/* Bytes needed to hold view's elements in host form (n_elems * size of eg__idx_dtype). */
size_t eg__idx_host_bytes(const eg__idx_view *view);

/* Writes view's elements into dst (eg__idx_host_bytes(view) bytes, any alignment) as host-order
 * values of eg__idx_dtype(view->type), widening i8/i16 to i32. */
void eg__idx_convert(const eg__idx_view *view, void *dst);

/* Reads an IDX file into a new malloc'd buffer (*bytes, freed by the caller; not NUL-terminated),
 * gunzipping it when it starts with the gzip magic, and validates it as it goes: the header is
 * read and checked first (as by eg__idx_parse), and the reader stops as soon as the content is
 * shown not to be what the header announces. It never decompresses more than the announced
 * size plus one chunk of zlib's buffer (~256 KiB), and never allocates more than the announced
 * size (a buffer grown as the data arrives, so a header announcing more than the file holds
 * costs only what it holds). On success the buffer is exactly header + data, which
 * eg__idx_parse accepts.
 * Errors (the message names path; on failure *bytes is NULL and *n_bytes 0):
 *   EG_ERR_IO: cannot be opened (the system's reason, "symlink loop" for ELOOP), is a directory,
 *     a read error;
 *   EG_ERR_FORMAT: a bad header, a header announcing more than max_bytes (header included),
 *     content shorter or longer than announced ("decompresses to more than its IDX header
 *     announces ... stopped reading there"), a corrupt, truncated or CRC-failing gzip stream;
 *   EG_ERR_OUT_OF_MEMORY. */
eg_status eg__idx_load_file(const char *path, size_t max_bytes, uint8_t **bytes, size_t *n_bytes);

/* True when eg__idx_parse would accept bytes[0, n_bytes); raises nothing (for checking cache
 * entries without disturbing the caller's error state). */
bool eg__idx_well_formed(const uint8_t *bytes, size_t n_bytes);

/* A new CPU tensor holding view's elements converted to host form (see eg__idx_convert). On
 * failure *out is NULL and the error names name_for_errors. */
eg_status eg__idx_to_tensor(const eg__idx_view *view, const char *name_for_errors, eg_tensor **out);

/* The decompressed-IDX cache (src/io/idx_cache.c). A mapping of a cache entry; release it with
 * eg__idx_mapping_release (also usable as a tensor's release callback). */
typedef struct eg__idx_mapping eg__idx_mapping;
void eg__idx_mapping_release(void *mapping);
/* When source (a gzip IDX file) has a valid cache entry: *bytes and *n_bytes are its IDX bytes
 * (what eg__idx_load_file would give, the elements 64-byte aligned) inside a private writable
 * mapping owned by *mapping, and true; the entry's mtime is set to now (it is what the size
 * limit's least-recently-used order goes by). False (nothing raised) for no or an invalid entry;
 * an entry whose bytes are not a well-formed IDX file is removed. */
bool eg__idx_cache_open(const char *source, const uint8_t **bytes, size_t *n_bytes,
                        eg__idx_mapping **mapping);
/* Best effort, nothing raised: makes bytes (source's decompressed content, checked against its
 * gzip CRC; call it only for content that passed validation) source's cache entry, atomically.
 * First removes the temporary files that writers of this cache killed mid-write left behind
 * (those whose process is gone), and afterwards the least recently used entries beyond the
 * cache's size limit (EG__IDX_CACHE_DEFAULT_LIMIT, or EG_IDX_CACHE_LIMIT=<bytes>[K|M|G]); content
 * larger than the limit is not stored. */
void eg__idx_cache_store(const char *source, const uint8_t *bytes, size_t n_bytes);

/* The cache's default size limit: a few copies of the largest data set this reader is meant for
 * (Fashion-MNIST's four files decompress to 55 MB). */
#define EG__IDX_CACHE_DEFAULT_LIMIT ((uint64_t)1 << 30)

#endif
