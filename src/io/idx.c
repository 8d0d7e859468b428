/* IDX reader (the MNIST family's file format) and the MNIST / Fashion-MNIST loader.
 *
 * Format: 2 zero bytes, a type code, the number of dimensions D, D big-endian u32 sizes, then the
 * elements, big-endian, row-major. Everything read from disk is treated as hostile: sizes are
 * checked for overflow, and the data must be exactly as long as the header says. */

/* The public headers' call-site macros must not expand here: they would define the functions
 * under the wrong name and make library-internal calls overwrite the user's call site. */
#ifndef EG_NO_CALLSITE
#define EG_NO_CALLSITE
#endif

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "base/error.h"
#include "core/tensor_internal.h"
#include "eagle/io.h"
#include "io/internal.h"

/* ---- pure parsing ---- */

typedef struct idx_type_info {
    eg__idx_type type;
    const char *name;
    size_t size;
    eg_dtype dtype;
} idx_type_info;

static const idx_type_info idx_types[] = {
    {EG__IDX_U8, "u8", 1, EG_DTYPE_U8},    {EG__IDX_I8, "i8", 1, EG_DTYPE_I32},
    {EG__IDX_I16, "i16", 2, EG_DTYPE_I32}, {EG__IDX_I32, "i32", 4, EG_DTYPE_I32},
    {EG__IDX_F32, "f32", 4, EG_DTYPE_F32}, {EG__IDX_F64, "f64", 8, EG_DTYPE_F64},
};

static const idx_type_info *find_type(unsigned code) {
    for (size_t i = 0; i < sizeof idx_types / sizeof idx_types[0]; i++)
        if ((unsigned)idx_types[i].type == code) return &idx_types[i];
    return NULL;
}

static uint32_t read_be32(const uint8_t *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

static uint64_t read_be64(const uint8_t *p) {
    return (uint64_t)read_be32(p) << 32 | read_be32(p + 4);
}

/* "60000x28x28"; 8 dimensions of at most 10 digits fit in 96 bytes. */
static void format_dims(const int64_t *shape, int n_dims, char *buf, size_t buf_size) {
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i < n_dims && used < buf_size; i++) {
        int n = snprintf(buf + used, buf_size - used, i ? "x%lld" : "%lld", (long long)shape[i]);
        if (n < 0) break;
        used += (size_t)n;
    }
}

/* The element count as the header states it, so that truncation messages can say what was
 * expected ("60000x28x28 = 47040000 bytes" for u8, "2x3 i32 (4 bytes each) = 24 bytes"). */
static void format_expected(const int64_t *shape, int n_dims, const idx_type_info *info,
                            size_t data_bytes, char *buf, size_t buf_size) {
    char dims[128];
    format_dims(shape, n_dims, dims, sizeof dims);
    if (info->type == EG__IDX_U8)
        snprintf(buf, buf_size, "%s = %zu bytes of data", dims, data_bytes);
    else
        snprintf(buf, buf_size, "%s %s (%zu byte%s each) = %zu bytes of data", dims, info->name,
                 info->size, info->size == 1 ? "" : "s", data_bytes);
}

/* A header that passed check_header. */
typedef struct idx_header {
    const idx_type_info *info;
    int n_dims;
    int64_t shape[EG_MAX_DIMS];
    uint64_t n_elems;
    size_t header_bytes;
    size_t data_bytes;
} idx_header;

/* The content's length when it is not known yet (a gzip stream read so far). */
#define CONTENT_UNKNOWN SIZE_MAX

/* Raises EG_ERR_FORMAT unless quiet: the well-formedness check of cache entries must not touch
 * the caller's error state. */
#define FORMAT_ERROR(quiet, ...) ((quiet) ? EG_ERR_FORMAT : eg__error(EG_ERR_FORMAT, __VA_ARGS__))

/* Validates the header at the start of bytes[0, have). content_bytes is the content's whole
 * length when known, else CONTENT_UNKNOWN; a header that does not fit in `have` is only ever
 * checked by a reader that has reached the end, so `have` is then the content's length. */
static eg_status check_header(const uint8_t *bytes, size_t have, size_t content_bytes,
                              const char *name, bool quiet, idx_header *h) {
    if (have < 4)
        return FORMAT_ERROR(
            quiet, "%s: not an IDX file: %zu byte%s, the IDX header alone needs at least 4", name,
            have, have == 1 ? "" : "s");
    if (bytes[0] == 0x1f && bytes[1] == 0x8b)
        return FORMAT_ERROR(quiet,
                            "%s: not an IDX file: still starts with the gzip magic 1f 8b after "
                            "decompression (compressed twice?)",
                            name);
    if (bytes[0] != 0 || bytes[1] != 0)
        return FORMAT_ERROR(quiet,
                            "%s: not an IDX file: bad magic %02x %02x %02x %02x, an IDX file "
                            "starts with 00 00 <type code> <number of dimensions>",
                            name, bytes[0], bytes[1], bytes[2], bytes[3]);
    const idx_type_info *info = find_type(bytes[2]);
    if (!info)
        return FORMAT_ERROR(quiet,
                            "%s: unknown IDX type code 0x%02x; known: 0x08 u8, 0x09 i8, 0x0b "
                            "i16, 0x0c i32, 0x0d f32, 0x0e f64",
                            name, bytes[2]);
    int n_dims = bytes[3];
    if (n_dims < 1 || n_dims > EG_MAX_DIMS)
        return FORMAT_ERROR(quiet, "%s: IDX header has %d dimensions; supported: 1 to %d", name,
                            n_dims, EG_MAX_DIMS);
    size_t header_bytes = 4 + 4 * (size_t)n_dims;
    if (have < header_bytes)
        return FORMAT_ERROR(quiet,
                            "%s: truncated header: %d dimensions need a %zu-byte header, file "
                            "has %zu bytes",
                            name, n_dims, header_bytes, have);

    *h = (idx_header){.info = info, .n_dims = n_dims, .header_bytes = header_bytes};
    bool any_zero = false;
    for (int i = 0; i < n_dims; i++) {
        h->shape[i] = read_be32(bytes + 4 + 4 * (size_t)i);
        if (h->shape[i] == 0) any_zero = true;
    }
    /* With a zero dimension the product is 0 however large the others are, so overflow is only
     * checked when every factor is nonzero. The limit keeps n_elems representable both as size_t
     * and as the int64_t element counts tensors use, and leaves room for the header. */
    const uint64_t limit =
        (SIZE_MAX < INT64_MAX ? (uint64_t)SIZE_MAX : (uint64_t)INT64_MAX) - header_bytes;
    uint64_t n_elems = any_zero ? 0 : 1;
    bool overflow = false;
    for (int i = 0; i < n_dims && !any_zero; i++) {
        uint64_t dim = (uint64_t)h->shape[i];
        if (n_elems > limit / dim) {
            overflow = true;
            break;
        }
        n_elems *= dim;
    }
    if (!overflow && n_elems > limit / info->size) overflow = true;
    if (overflow) {
        char dims[128], size[64] = "";
        format_dims(h->shape, n_dims, dims, sizeof dims);
        if (content_bytes != CONTENT_UNKNOWN)
            snprintf(size, sizeof size, " (file has %zu bytes)", content_bytes);
        return FORMAT_ERROR(quiet, "%s: IDX header says %s elements of %s, which overflows%s", name,
                            dims, info->name, size);
    }
    h->n_elems = n_elems;
    h->data_bytes = (size_t)n_elems * info->size;
    return EG_OK;
}

/* The data must be exactly as long as the header says: content_bytes is the whole length. */
static eg_status check_length(const idx_header *h, size_t content_bytes, const char *name,
                              bool quiet) {
    size_t available = content_bytes - h->header_bytes;
    if (available == h->data_bytes) return EG_OK;
    if (quiet) return EG_ERR_FORMAT;
    char expected[256];
    format_expected(h->shape, h->n_dims, h->info, h->data_bytes, expected, sizeof expected);
    if (available < h->data_bytes)
        return eg__error(EG_ERR_FORMAT,
                         "%s: truncated: header says %s, file has %zu after the %zu-byte header",
                         name, expected, available, h->header_bytes);
    return eg__error(EG_ERR_FORMAT,
                     "%s: %zu unexpected trailing bytes: header says %s, file has %zu after the "
                     "%zu-byte header",
                     name, available - h->data_bytes, expected, available, h->header_bytes);
}

eg_status eg__idx_parse(const uint8_t *bytes, size_t n_bytes, const char *name_for_errors,
                        eg__idx_view *out) {
    const char *name = name_for_errors ? name_for_errors : "IDX data";
    if (!out) return eg__error(EG_ERR_NULL_ARGUMENT, "%s: idx_parse: out is NULL", name);
    memset(out, 0, sizeof *out);
    if (!bytes && n_bytes > 0)
        return eg__error(EG_ERR_NULL_ARGUMENT, "%s: idx_parse: bytes is NULL", name);
    idx_header h;
    eg_status status = check_header(bytes, n_bytes, n_bytes, name, false, &h);
    if (status == EG_OK) status = check_length(&h, n_bytes, name, false);
    if (status != EG_OK) return status;
    out->type = h.info->type;
    out->n_dims = h.n_dims;
    memcpy(out->shape, h.shape, sizeof h.shape);
    out->n_elems = (size_t)h.n_elems;
    out->elem_size = h.info->size;
    out->header_bytes = h.header_bytes;
    out->data = bytes + h.header_bytes;
    out->data_bytes = h.data_bytes;
    return EG_OK;
}

bool eg__idx_well_formed(const uint8_t *bytes, size_t n_bytes) {
    idx_header h;
    return (bytes || n_bytes == 0) &&
           check_header(bytes, n_bytes, n_bytes, "", true, &h) == EG_OK &&
           check_length(&h, n_bytes, "", true) == EG_OK;
}

eg_dtype eg__idx_dtype(eg__idx_type type) {
    const idx_type_info *info = find_type((unsigned)type);
    return info ? info->dtype : EG_DTYPE_COUNT;
}

size_t eg__idx_host_bytes(const eg__idx_view *view) {
    return view->n_elems * eg_dtype_size(eg__idx_dtype(view->type));
}

/* Values are assembled from bytes rather than byte-swapped in place, so the result is right on
 * any host byte order and the unaligned file data is never dereferenced as a wider type. Signed
 * values are sign-extended arithmetically because converting an out-of-range unsigned value to a
 * signed type is implementation-defined. */
void eg__idx_convert(const eg__idx_view *view, void *dst) {
    const uint8_t *src = view->data;
    uint8_t *out = dst;
    size_t n = view->n_elems;
    switch (view->type) {
    case EG__IDX_U8:
        if (n) memcpy(out, src, n);
        break;
    case EG__IDX_I8:
        for (size_t i = 0; i < n; i++) {
            int32_t v = (int32_t)src[i] - (src[i] & 0x80 ? 256 : 0);
            memcpy(out + 4 * i, &v, 4);
        }
        break;
    case EG__IDX_I16:
        for (size_t i = 0; i < n; i++) {
            int32_t u = (int32_t)src[2 * i] << 8 | src[2 * i + 1];
            int32_t v = u - (u & 0x8000 ? 65536 : 0);
            memcpy(out + 4 * i, &v, 4);
        }
        break;
    case EG__IDX_I32:
    case EG__IDX_F32:
        for (size_t i = 0; i < n; i++) {
            uint32_t v = read_be32(src + 4 * i);
            memcpy(out + 4 * i, &v, 4);
        }
        break;
    case EG__IDX_F64:
        for (size_t i = 0; i < n; i++) {
            uint64_t v = read_be64(src + 8 * i);
            memcpy(out + 8 * i, &v, 8);
        }
        break;
    }
}

/* ---- reading files ---- */

/* Deflate cannot expand data by more than about 1032:1, so a gzip trailer claiming more than that
 * is a lie and must not drive the first allocation. */
#define DEFLATE_MAX_RATIO 1032u

/* The first buffer's size when neither the header nor the file says better. */
#define FIRST_BUFFER_BYTES ((size_t)64 << 10)

/* A size the content probably has, to make the first buffer big enough: the file size for plain
 * files, the gzip trailer's ISIZE (uncompressed size mod 2^32) for gzip files. 0 when unknown. */
static size_t size_hint(int fd, off_t file_size, bool is_gzip) {
    if (file_size <= 0) return 0;
    if (!is_gzip) return (size_t)file_size;
    uint8_t trailer[4];
    if (file_size < 18 || pread(fd, trailer, 4, file_size - 4) != 4) return 0;
    uint64_t isize = (uint64_t)trailer[0] | (uint64_t)trailer[1] << 8 | (uint64_t)trailer[2] << 16 |
                     (uint64_t)trailer[3] << 24;
    uint64_t plausible = (uint64_t)file_size * DEFLATE_MAX_RATIO;
    return (size_t)(isize < plausible ? isize : plausible);
}

/* zlib prefixes its messages with the file's name, which for gzdopen is a useless "<fd:3>". */
static const char *zlib_message(gzFile gz, int *code) {
    const char *message = gzerror(gz, code);
    if (!message) return "unknown zlib error";
    if (strncmp(message, "<fd:", 4) == 0) {
        const char *rest = strstr(message, ": ");
        if (rest) return rest + 2;
    }
    return message;
}

/* Turns zlib's state after the last gzread into a status. */
static eg_status gzip_status(gzFile gz, const char *path, bool is_gzip, size_t total) {
    int code = Z_OK;
    const char *message = zlib_message(gz, &code);
    switch (code) {
    case Z_OK:
    case Z_STREAM_END:
        return EG_OK;
    case Z_ERRNO:
        return eg__error(EG_ERR_IO, "%s: read error: %s", path, message);
    case Z_MEM_ERROR:
        return eg__error(EG_ERR_OUT_OF_MEMORY, "%s: out of memory while decompressing", path);
    case Z_BUF_ERROR:
        if (is_gzip)
            return eg__error(EG_ERR_FORMAT,
                             "%s: truncated gzip stream: the file ends inside the compressed data "
                             "(%zu bytes decompressed before the end)",
                             path, total);
        return eg__error(EG_ERR_IO, "%s: read error: %s", path, message);
    default:
        return eg__error(EG_ERR_FORMAT, "%s: corrupt gzip data: %s%s", path, message,
                         strstr(message, "data check") ? " (CRC mismatch)" : "");
    }
}

/* One open IDX file being read. */
typedef struct idx_stream {
    gzFile gz;
    const char *path;
    bool is_gzip;
    size_t total; /* content bytes read so far */
} idx_stream;

/* Reads up to n content bytes into dst; *got < n only at the end of the content, which must then
 * be a clean one (a truncated or corrupt gzip stream, a read error are errors). */
static eg_status read_up_to(idx_stream *s, uint8_t *dst, size_t n, size_t *got) {
    *got = 0;
    while (*got < n) {
        size_t want = n - *got;
        if (want > (size_t)1 << 30) want = (size_t)1 << 30; /* gzread counts in int */
        int r = gzread(s->gz, dst + *got, (unsigned)want);
        if (r <= 0) {
            eg_status status = gzip_status(s->gz, s->path, s->is_gzip, s->total);
            if (status == EG_OK && r < 0) status = eg__error(EG_ERR_IO, "%s: read error", s->path);
            return status;
        }
        *got += (size_t)r;
        s->total += (size_t)r;
    }
    return EG_OK;
}

/* The content past the header, into a buffer grown towards (never beyond) the h->header_bytes +
 * h->data_bytes the header announces, then a check that the content ends there. Nothing past
 * that size is ever decompressed but the one chunk that shows it is there: a small file whose
 * header announces little cannot make the reader inflate (or hold) more. */
static eg_status read_body(idx_stream *s, const uint8_t *head, const idx_header *h, size_t hint,
                           uint8_t **bytes, size_t *n_bytes) {
    size_t total = h->header_bytes + h->data_bytes;
    /* The header's size is a claim: memory follows the data actually there (hint, then doubling),
     * so a tiny file announcing 2 GiB costs what it holds. */
    size_t capacity = hint > FIRST_BUFFER_BYTES ? hint : FIRST_BUFFER_BYTES;
    if (capacity > total) capacity = total;
    uint8_t *buffer = malloc(capacity);
    if (!buffer)
        return eg__error(EG_ERR_OUT_OF_MEMORY, "%s: out of host memory: %zu bytes requested",
                         s->path, capacity);
    memcpy(buffer, head, h->header_bytes);
    size_t have = h->header_bytes;
    eg_status status = EG_OK;
    while (status == EG_OK && have < total) {
        if (have == capacity) {
            size_t next = capacity <= total / 2 ? capacity * 2 : total;
            uint8_t *grown = realloc(buffer, next);
            if (!grown) {
                status = eg__error(EG_ERR_OUT_OF_MEMORY,
                                   "%s: out of host memory: %zu bytes requested", s->path, next);
                break;
            }
            buffer = grown;
            capacity = next;
        }
        size_t got;
        status = read_up_to(s, buffer + have, capacity - have, &got);
        have += got;
        if (status == EG_OK && have < capacity) status = check_length(h, have, s->path, false);
    }
    if (status == EG_OK) {
        /* One byte more: this also makes zlib read the gzip trailer and check its CRC. */
        uint8_t extra;
        size_t got;
        status = read_up_to(s, &extra, 1, &got);
        if (status == EG_OK && got) {
            char expected[256];
            format_expected(h->shape, h->n_dims, h->info, h->data_bytes, expected, sizeof expected);
            status =
                eg__error(EG_ERR_FORMAT,
                          "%s: %s more than its IDX header announces (%s after the %zu-byte "
                          "header); stopped reading there%s",
                          s->path, s->is_gzip ? "decompresses to" : "holds", expected,
                          h->header_bytes, s->is_gzip ? " (trailing data, or a gzip bomb)" : "");
        }
    }
    if (status != EG_OK) {
        free(buffer);
        return status;
    }
    *bytes = buffer;
    *n_bytes = total;
    return EG_OK;
}

/* Reads the header, validates it, then the body. content_bytes: the content's length when the
 * file system knows it (a plain regular file), else CONTENT_UNKNOWN. */
static eg_status read_idx(idx_stream *s, size_t content_bytes, size_t hint, size_t max_bytes,
                          uint8_t **bytes, size_t *n_bytes) {
    uint8_t head[4 + 4 * EG_MAX_DIMS];
    size_t have;
    eg_status status = read_up_to(s, head, 4, &have);
    size_t want = have == 4 && head[3] >= 1 && head[3] <= EG_MAX_DIMS ? 4 + 4 * (size_t)head[3] : 4;
    if (status == EG_OK && have == 4 && want > 4) {
        size_t got;
        status = read_up_to(s, head + 4, want - 4, &got);
        have += got;
    }
    if (status != EG_OK) return status;
    if (have < want) content_bytes = have; /* the content ended inside the header */
    idx_header h;
    status = check_header(head, have, content_bytes, s->path, false, &h);
    if (status != EG_OK) return status;
    /* A plain file's size says at once whether the data is all there. */
    if (content_bytes != CONTENT_UNKNOWN) {
        status = check_length(&h, content_bytes, s->path, false);
        if (status != EG_OK) return status;
    }
    if (h.data_bytes > max_bytes || h.header_bytes + h.data_bytes > max_bytes) {
        char expected[256];
        format_expected(h.shape, h.n_dims, h.info, h.data_bytes, expected, sizeof expected);
        return eg__error(
            EG_ERR_FORMAT, "%s: IDX header says %s, more than the %zu-byte limit of this reader%s",
            s->path, expected, max_bytes, s->is_gzip ? " (a gzip bomb, or not an IDX file)" : "");
    }
    return read_body(s, head, &h, hint, bytes, n_bytes);
}

/* strerror, but saying what a user can act on where its wording does not. */
static const char *open_reason(int err) {
    if (err == ELOOP) return "symlink loop (too many levels of symbolic links)";
    return strerror(err);
}

eg_status eg__idx_load_file(const char *path, size_t max_bytes, uint8_t **bytes, size_t *n_bytes) {
    if (!bytes || !n_bytes)
        return eg__error(EG_ERR_NULL_ARGUMENT, "idx_load_file: output pointer is NULL");
    *bytes = NULL;
    *n_bytes = 0;
    if (!path) return eg__error(EG_ERR_NULL_ARGUMENT, "idx_read: path is NULL");

    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return eg__error(EG_ERR_IO, "%s: cannot open: %s", path, open_reason(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int saved = errno;
        close(fd);
        return eg__error(EG_ERR_IO, "%s: cannot stat: %s", path, strerror(saved));
    }
    if (S_ISDIR(st.st_mode)) {
        close(fd);
        return eg__error(EG_ERR_IO, "%s: is a directory, not an IDX file", path);
    }
    uint8_t magic[2];
    bool is_gzip = pread(fd, magic, 2, 0) == 2 && magic[0] == 0x1f && magic[1] == 0x8b;
    bool regular = S_ISREG(st.st_mode);
    size_t hint = regular ? size_hint(fd, st.st_size, is_gzip) : 0;

    /* gzread reads non-gzip files through unchanged, so one reader serves both cases. */
    gzFile gz = gzdopen(fd, "rb");
    if (!gz) {
        close(fd);
        return eg__error(EG_ERR_OUT_OF_MEMORY, "%s: out of host memory opening the file", path);
    }
    gzbuffer(gz, 1 << 17); /* the 8 KiB default costs a syscall per 8 KiB of input */
    idx_stream s = {.gz = gz, .path = path, .is_gzip = is_gzip};
    size_t content = regular && !is_gzip && st.st_size >= 0 && (uintmax_t)st.st_size < SIZE_MAX
                         ? (size_t)st.st_size
                         : CONTENT_UNKNOWN;
    eg_status status = read_idx(&s, content, hint, max_bytes, bytes, n_bytes);
    gzclose(gz); /* closes fd; its result repeats what gzread already reported */
    return status;
}

eg_status eg__idx_to_tensor(const eg__idx_view *view, const char *name_for_errors,
                            eg_tensor **out) {
    const char *name = name_for_errors ? name_for_errors : "IDX data";
    if (!out) return eg__error(EG_ERR_NULL_ARGUMENT, "%s: idx_to_tensor: out is NULL", name);
    *out = NULL;
    if (!view) return eg__error(EG_ERR_NULL_ARGUMENT, "%s: idx_to_tensor: view is NULL", name);
    /* file readers make host tensors (device.h), whatever the current device */
    eg_tensor *t =
        eg__tensor_alloc(eg__idx_dtype(view->type), view->n_dims, view->shape, eg_device_cpu());
    if (!t)
        return eg__error(EG_ERR_OUT_OF_MEMORY, "%s: cannot allocate a tensor of %zu bytes", name,
                         eg__idx_host_bytes(view));
    if (view->n_elems > 0) {
        void *dst = eg_tensor_data(t);
        if (!dst) {
            eg_release(t);
            return eg__error(EG_ERR_INTERNAL, "%s: new tensor has no host data", name);
        }
        eg__idx_convert(view, dst);
    }
    *out = t;
    return EG_OK;
}

/* One IDX file's bytes: from the decompressed cache when it has a valid entry (*mapping set),
 * else read (and decompressed) from path (*mapping NULL, *bytes malloc'd). */
typedef struct loaded_file {
    uint8_t *bytes;
    size_t n_bytes;
    eg__idx_mapping *mapping;
} loaded_file;

static bool is_gzip_name(const char *path) {
    size_t n = strlen(path);
    return n > 3 && !strcmp(path + n - 3, ".gz");
}

static eg_status load_bytes(const char *path, loaded_file *file) {
    *file = (loaded_file){0};
    const uint8_t *cached;
    if (path && is_gzip_name(path) &&
        eg__idx_cache_open(path, &cached, &file->n_bytes, &file->mapping)) {
        file->bytes = (uint8_t *)cached;
        return EG_OK;
    }
    return eg__idx_load_file(path, EG__IDX_MAX_BYTES, &file->bytes, &file->n_bytes);
}

/* Makes a gzip file's content, read from the source, its cache entry. Only called once the
 * content passed every check its reader makes: an entry never holds what was refused. */
static void remember(const char *path, const loaded_file *file) {
    if (!file->mapping && file->bytes && is_gzip_name(path))
        eg__idx_cache_store(path, file->bytes, file->n_bytes);
}

static void loaded_file_free(loaded_file *file) {
    if (file->mapping)
        eg__idx_mapping_release(file->mapping);
    else
        free(file->bytes);
    *file = (loaded_file){0};
}

/* The tensor for a parsed view of file: u8 data from a cache entry is used in place (the tensor
 * then owns the mapping), anything else is converted into a new tensor. */
static eg_status file_to_tensor(loaded_file *file, const eg__idx_view *view, const char *path,
                                eg_tensor **out) {
    if (!file->mapping || view->type != EG__IDX_U8 || view->n_elems == 0)
        return eg__idx_to_tensor(view, path, out);
    int64_t strides[EG_MAX_DIMS];
    eg__contiguous_strides(view->n_dims, view->shape, strides);
    *out = eg__tensor_from_external((void *)view->data, view->data_bytes, NULL, EG_DTYPE_U8,
                                    view->n_dims, view->shape, strides, 0, eg__idx_mapping_release,
                                    file->mapping);
    if (!*out) return eg_last_status();
    *file = (loaded_file){0}; /* the tensor owns the mapping now */
    return EG_OK;
}

/* Reads, parses and converts in one go; the file buffer never outlives the call. */
static eg_status read_tensor(const char *path, eg_tensor **out) {
    *out = NULL;
    loaded_file file;
    eg_status status = load_bytes(path, &file);
    if (status != EG_OK) return status;
    eg__idx_view view;
    status = eg__idx_parse(file.bytes, file.n_bytes, path, &view);
    if (status == EG_OK) {
        remember(path, &file);
        status = file_to_tensor(&file, &view, path, out);
    }
    loaded_file_free(&file);
    return status;
}

eg_tensor *eg_idx_read(const char *path) {
    eg_tensor *t = NULL;
    read_tensor(path, &t);
    return t;
}

/* ---- MNIST / Fashion-MNIST ---- */

#define MNIST_SIDE   28
#define MNIST_LABELS 10

#define MNIST_INSTALL_HINT                                                                         \
    "install the Debian package dataset-fashion-mnist (apt-get install dataset-fashion-mnist) "    \
    "or pass the data directory"

/* Picks "<dir>/<stem>" or "<dir>/<stem>.gz", whichever is there (the uncompressed one first: it
 * loads faster). "Not found" only when neither name exists: a name that exists but cannot be
 * read (a directory, a symlink loop, a dangling symlink, no permission) is reported as what it
 * is, unless the other name can be used. */
static eg_status find_mnist_file(const char *directory, const char *stem, char *path,
                                 size_t path_size) {
    static const char *const suffixes[] = {"", ".gz"};
    char unusable[4096 + 128] = ""; /* the first existing name that cannot be used, and why */
    for (size_t i = 0; i < 2; i++) {
        int n = snprintf(path, path_size, "%s/%s%s", directory, stem, suffixes[i]);
        if (n < 0 || (size_t)n >= path_size)
            return eg__error(EG_ERR_INVALID_ARGUMENT, "mnist_load: directory name too long: %s",
                             directory);
        struct stat st;
        const char *reason;
        if (stat(path, &st) == 0) {
            if (!S_ISDIR(st.st_mode)) return EG_OK;
            reason = "is a directory, not an IDX file";
        } else if (errno == ENOENT) {
            struct stat link;
            if (lstat(path, &link) != 0 || !S_ISLNK(link.st_mode)) continue;
            reason = "is a dangling symlink (what it points to does not exist)";
        } else {
            reason = open_reason(errno);
        }
        if (!*unusable) snprintf(unusable, sizeof unusable, "%s: %s", path, reason);
    }
    if (*unusable) return eg__error(EG_ERR_IO, "%s", unusable);
    return eg__error(EG_ERR_IO, "%s/%s[.gz] not found; " MNIST_INSTALL_HINT, directory, stem);
}

static eg_status check_images(const eg__idx_view *view, const char *path) {
    char dims[128];
    format_dims(view->shape, view->n_dims, dims, sizeof dims);
    if (view->type != EG__IDX_U8 || view->n_dims != 3 || view->shape[1] != MNIST_SIDE ||
        view->shape[2] != MNIST_SIDE)
        return eg__error(EG_ERR_FORMAT,
                         "%s: not an MNIST image file: holds %s %s, expected u8 Nx%dx%d", path,
                         dims, find_type(view->type)->name, MNIST_SIDE, MNIST_SIDE);
    if (view->shape[0] == 0) return eg__error(EG_ERR_FORMAT, "%s: holds no images", path);
    return EG_OK;
}

static eg_status check_labels(const eg__idx_view *view, const char *path, int64_t n_images,
                              const char *images_path) {
    if (view->type != EG__IDX_U8 || view->n_dims != 1) {
        char dims[128];
        format_dims(view->shape, view->n_dims, dims, sizeof dims);
        return eg__error(EG_ERR_FORMAT,
                         "%s: not an MNIST label file: holds %s %s, expected u8 of length N", path,
                         dims, find_type(view->type)->name);
    }
    if (view->shape[0] != n_images)
        return eg__error(EG_ERR_FORMAT, "%s: mislabelled data: %lld labels but %s has %lld images",
                         path, (long long)view->shape[0], images_path, (long long)n_images);
    for (size_t i = 0; i < view->n_elems; i++)
        if (view->data[i] >= MNIST_LABELS)
            return eg__error(EG_ERR_FORMAT,
                             "%s: mislabelled data: label %u at index %zu is outside 0..%d", path,
                             view->data[i], i, MNIST_LABELS - 1);
    return EG_OK;
}

eg_status eg_mnist_load(const char *directory, bool train, eg_tensor **images, eg_tensor **labels) {
    if (images) *images = NULL;
    if (labels) *labels = NULL;
    if (!images || !labels)
        return eg__error(EG_ERR_NULL_ARGUMENT, "mnist_load: %s is NULL",
                         images ? "labels" : "images");
    /* "" too: it is what an unset configuration variable usually turns into. */
    if (!directory || !*directory) directory = EG_FASHION_MNIST_DIR;

    struct stat st;
    if (stat(directory, &st) != 0) {
        int saved = errno;
        if (saved == ENOENT)
            return eg__error(EG_ERR_IO, "%s: data directory not found (%s); " MNIST_INSTALL_HINT,
                             directory, strerror(saved));
        return eg__error(EG_ERR_IO, "%s: cannot use the data directory: %s", directory,
                         open_reason(saved));
    }
    if (!S_ISDIR(st.st_mode))
        return eg__error(EG_ERR_IO, "%s: not a directory; " MNIST_INSTALL_HINT, directory);

    const char *split = train ? "train" : "t10k";
    char images_stem[64], labels_stem[64];
    snprintf(images_stem, sizeof images_stem, "%s-images-idx3-ubyte", split);
    snprintf(labels_stem, sizeof labels_stem, "%s-labels-idx1-ubyte", split);
    char images_path[4096], labels_path[4096];
    eg_status status = find_mnist_file(directory, images_stem, images_path, sizeof images_path);
    if (status == EG_OK)
        status = find_mnist_file(directory, labels_stem, labels_path, sizeof labels_path);
    if (status != EG_OK) return status;

    /* Both files are validated before any tensor exists, so a failure has nothing to undo. */
    loaded_file image_file = {0}, label_file = {0};
    eg__idx_view image_view, label_view;
    status = load_bytes(images_path, &image_file);
    if (status == EG_OK)
        status = eg__idx_parse(image_file.bytes, image_file.n_bytes, images_path, &image_view);
    if (status == EG_OK) status = check_images(&image_view, images_path);
    if (status == EG_OK) status = load_bytes(labels_path, &label_file);
    if (status == EG_OK)
        status = eg__idx_parse(label_file.bytes, label_file.n_bytes, labels_path, &label_view);
    if (status == EG_OK)
        status = check_labels(&label_view, labels_path, image_view.shape[0], images_path);
    if (status == EG_OK) {
        remember(images_path, &image_file);
        remember(labels_path, &label_file);
        status = file_to_tensor(&image_file, &image_view, images_path, images);
    }
    if (status == EG_OK) {
        status = file_to_tensor(&label_file, &label_view, labels_path, labels);
        if (status != EG_OK) {
            eg_release(*images);
            *images = NULL;
        }
    }
    loaded_file_free(&image_file);
    loaded_file_free(&label_file);
    return status;
}
