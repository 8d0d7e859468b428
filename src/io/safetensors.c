/* safetensors reader and writer. See include/eagle/checkpoint.h for the contracts.
 *
 * Reader: the header is read and validated completely at open; tensor data is read at get time
 * with pread (thread-safe, one copy, straight into the new tensor). Writer: header built in
 * memory, data streamed to an atomic temporary file. */

#ifndef EG_NO_CALLSITE
#define EG_NO_CALLSITE
#endif

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.h"
#include "core/tensor_internal.h"
#include "eagle/checkpoint.h"
#include "eagle/runtime.h"
#include "io/atomic_file.h"
#include "io/checkpoint_internal.h"
#include "io/json.h"

#define HOST_IS_LITTLE_ENDIAN (__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__)

/* ---- dtypes ---- */

typedef struct st_dtype {
    const char *name;
    unsigned bits;
    eg_dtype dtype; /* EG_DTYPE_COUNT: no eagle equivalent */
} st_dtype;

static const st_dtype st_dtypes[] = {
    {"F32", 32, EG_DTYPE_F32},      {"F64", 64, EG_DTYPE_F64},      {"F16", 16, EG_DTYPE_F16},
    {"BF16", 16, EG_DTYPE_BF16},    {"I32", 32, EG_DTYPE_I32},      {"I64", 64, EG_DTYPE_I64},
    {"U8", 8, EG_DTYPE_U8},         {"BOOL", 8, EG_DTYPE_BOOL},     {"I8", 8, EG_DTYPE_I8},
    {"I16", 16, EG_DTYPE_COUNT},    {"U16", 16, EG_DTYPE_COUNT},    {"U32", 32, EG_DTYPE_COUNT},
    {"U64", 64, EG_DTYPE_COUNT},    {"C64", 64, EG_DTYPE_COUNT},    {"F8_E5M2", 8, EG_DTYPE_COUNT},
    {"F8_E4M3", 8, EG_DTYPE_COUNT}, {"F8_E8M0", 8, EG_DTYPE_COUNT}, {"F6_E2M3", 6, EG_DTYPE_COUNT},
    {"F6_E3M2", 6, EG_DTYPE_COUNT}, {"F4", 4, EG_DTYPE_COUNT},
};
#define N_ST_DTYPES (sizeof st_dtypes / sizeof st_dtypes[0])

static const st_dtype *dtype_by_name(const char *name, size_t length) {
    for (size_t i = 0; i < N_ST_DTYPES; i++)
        if (strlen(st_dtypes[i].name) == length && memcmp(st_dtypes[i].name, name, length) == 0)
            return &st_dtypes[i];
    return NULL;
}

static const st_dtype *dtype_of(eg_dtype dtype) {
    if ((unsigned)dtype >= EG_DTYPE_COUNT) return NULL;
    for (size_t i = 0; i < N_ST_DTYPES; i++)
        if (st_dtypes[i].dtype == dtype) return &st_dtypes[i];
    return NULL;
}

/* ---- the handle ---- */

typedef struct st_entry {
    char *name;
    const st_dtype *dtype;
    size_t n_dims;
    uint64_t *shape; /* n_dims entries */
    uint64_t begin, end;
} st_entry;

struct eg_safetensors {
    char *path;
    int fd;                /* -1 for a handle on memory */
    const uint8_t *memory; /* memory handles: the data buffer */
    uint64_t data_start;   /* file handles: file offset of the data buffer */
    uint64_t data_bytes;
    size_t n_entries;
    st_entry *entries;    /* sorted by name */
    st_entry **by_offset; /* sorted by data_offsets */
    size_t n_metadata;
    char **metadata_keys; /* sorted */
    char **metadata_values;
};

void eg_safetensors_close(eg_safetensors *st) {
    if (!st) return;
    for (size_t i = 0; i < st->n_entries; i++) {
        free(st->entries[i].name);
        free(st->entries[i].shape);
    }
    for (size_t i = 0; i < st->n_metadata; i++) {
        free(st->metadata_keys[i]);
        free(st->metadata_values[i]);
    }
    free(st->entries);
    free(st->by_offset);
    free(st->metadata_keys);
    free(st->metadata_values);
    if (st->fd >= 0) close(st->fd);
    free(st->path);
    free(st);
}

/* ---- message helpers ---- */

/* A name for a message: at most ~100 bytes, control characters shown as '?'. */
static const char *printable(const char *s, size_t length, char *buf, size_t size) {
    size_t used = 0, limit = size > 4 ? size - 4 : 0;
    for (size_t i = 0; i < length && used < limit; i++) {
        unsigned char c = (unsigned char)s[i];
        buf[used++] = c < 0x20 || c == 0x7f ? '?' : (char)c;
    }
    if (used < length && size >= 4) memcpy(buf + used, "...", 3), used += 3;
    if (size) buf[used < size ? used : size - 1] = '\0';
    return buf;
}

/* "(784, 64)", "(3,)", "()"; long shapes end in "...". */
static const char *shape_text(const uint64_t *shape, size_t n_dims, char *buf, size_t size) {
    size_t used = (size_t)snprintf(buf, size, "(");
    for (size_t i = 0; i < n_dims && used < size; i++) {
        if (i == 16) {
            used += (size_t)snprintf(buf + used, size - used, ", ...");
            break;
        }
        used += (size_t)snprintf(buf + used, size - used, i ? ", %llu" : "%llu",
                                 (unsigned long long)shape[i]);
    }
    if (used < size) snprintf(buf + used, size - used, n_dims == 1 ? ",)" : ")");
    return buf;
}

/* ---- parsing ---- */

typedef struct parse_context {
    const char *file; /* name for messages */
    eg_safetensors *st;
} parse_context;

__attribute__((format(printf, 3, 4))) static eg_status
format_error(parse_context *c, const char *tensor, const char *fmt, ...) {
    char message[512];
    va_list args;
    va_start(args, fmt);
    vsnprintf(message, sizeof message, fmt, args);
    va_end(args);
    if (tensor) {
        char name[128];
        return eg__error(EG_ERR_FORMAT, "%s: tensor '%s': %s", c->file,
                         printable(tensor, strlen(tensor), name, sizeof name), message);
    }
    return eg__error(EG_ERR_FORMAT, "%s: %s", c->file, message);
}

static eg_status out_of_memory(const char *file) {
    return eg__error(EG_ERR_OUT_OF_MEMORY, "%s: out of host memory", file);
}

static int compare_strings(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int compare_entry_names(const void *a, const void *b) {
    return strcmp(((const st_entry *)a)->name, ((const st_entry *)b)->name);
}

static int compare_offsets(const void *a, const void *b) {
    const st_entry *x = *(st_entry *const *)a, *y = *(st_entry *const *)b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return strcmp(x->name, y->name);
}

static eg_status parse_metadata(parse_context *c, const eg__json *value) {
    eg_safetensors *st = c->st;
    if (value->type != EG__JSON_OBJECT)
        return format_error(c, NULL, "__metadata__ must be an object of string values, not %s %s",
                            value->type == EG__JSON_ARRAY ? "an" : "a",
                            eg__json_type_name(value->type));
    size_t n = value->length;
    st->metadata_keys = calloc(n ? n : 1, sizeof(char *));
    st->metadata_values = calloc(n ? n : 1, sizeof(char *));
    if (!st->metadata_keys || !st->metadata_values) return out_of_memory(c->file);
    for (size_t i = 0; i < n; i++) {
        const eg__json *v = &value->items[i];
        char key[128];
        printable(value->keys[i], value->key_lengths[i], key, sizeof key);
        if (v->type != EG__JSON_STRING)
            return format_error(c, NULL,
                                "__metadata__ must map strings to strings, but key '%s' has %s "
                                "%s value",
                                key, v->type >= EG__JSON_ARRAY ? "an" : "a",
                                eg__json_type_name(v->type));
        if (strlen(value->keys[i]) != value->key_lengths[i] || strlen(v->string) != v->length)
            return format_error(c, NULL, "__metadata__ key '%s': NUL characters are not supported",
                                key);
        st->metadata_keys[i] = strdup(value->keys[i]);
        st->metadata_values[i] = strdup(v->string);
        st->n_metadata = i + 1;
        if (!st->metadata_keys[i] || !st->metadata_values[i]) return out_of_memory(c->file);
    }
    /* Sort keys and values together: sort (key, value) pointer pairs by key. */
    char **pairs = malloc(2 * (n ? n : 1) * sizeof(char *));
    if (!pairs) return out_of_memory(c->file);
    for (size_t i = 0; i < n; i++) {
        pairs[2 * i] = st->metadata_keys[i];
        pairs[2 * i + 1] = st->metadata_values[i];
    }
    qsort(pairs, n, 2 * sizeof(char *), compare_strings);
    for (size_t i = 0; i < n; i++) {
        st->metadata_keys[i] = pairs[2 * i];
        st->metadata_values[i] = pairs[2 * i + 1];
    }
    free(pairs);
    for (size_t i = 1; i < n; i++)
        if (strcmp(st->metadata_keys[i - 1], st->metadata_keys[i]) == 0) {
            char key[128];
            const char *k = st->metadata_keys[i];
            return format_error(c, NULL, "duplicate __metadata__ key '%s'",
                                printable(k, strlen(k), key, sizeof key));
        }
    return EG_OK;
}

static eg_status parse_shape(parse_context *c, st_entry *e, const eg__json *shape) {
    if (shape->type != EG__JSON_ARRAY)
        return format_error(c, e->name, "shape must be an array of integers, not %s",
                            eg__json_type_name(shape->type));
    e->n_dims = shape->length;
    if (e->n_dims) {
        e->shape = calloc(e->n_dims, sizeof *e->shape);
        if (!e->shape) return out_of_memory(c->file);
    }
    for (size_t i = 0; i < e->n_dims; i++) {
        const eg__json *dim = &shape->items[i];
        if (!eg__json_as_u64(dim, &e->shape[i])) {
            char text[64] = "a ";
            if (dim->type == EG__JSON_NUMBER)
                printable(dim->string, dim->length, text, sizeof text);
            else
                strcat(text, eg__json_type_name(dim->type));
            bool big = dim->type == EG__JSON_NUMBER && !strpbrk(dim->string, "-.eE");
            return format_error(c, e->name,
                                "shape entry %zu is %s; shape entries must be non-negative "
                                "integers%s",
                                i, text, big ? " below 2^64" : "");
        }
    }
    return EG_OK;
}

/* Element count and byte size of e, checked for overflow. Zero-sized dimensions make the count 0,
 * but the other dimensions' product must still fit (eagle computes strides from it). */
static eg_status entry_size(parse_context *c, const st_entry *e, uint64_t *n_bytes) {
    const uint64_t limit = (uint64_t)INT64_MAX < SIZE_MAX ? (uint64_t)INT64_MAX : SIZE_MAX;
    uint64_t product = 1;
    bool zero = false, overflow = false;
    for (size_t i = 0; i < e->n_dims; i++) {
        if (e->shape[i] == 0) {
            zero = true;
            continue;
        }
        if (product > limit / e->shape[i]) {
            overflow = true;
            break;
        }
        product *= e->shape[i];
    }
    if (!overflow && product > limit / e->dtype->bits) overflow = true;
    if (overflow) {
        char shape[256];
        return format_error(c, e->name, "shape %s has too many elements (the count overflows)",
                            shape_text(e->shape, e->n_dims, shape, sizeof shape));
    }
    uint64_t bits = zero ? 0 : product * e->dtype->bits;
    if (bits % 8) {
        char shape[256];
        return format_error(c, e->name, "%s %s fills %llu bits, not a whole number of bytes",
                            e->dtype->name, shape_text(e->shape, e->n_dims, shape, sizeof shape),
                            (unsigned long long)bits);
    }
    *n_bytes = bits / 8;
    return EG_OK;
}

static eg_status parse_entry(parse_context *c, st_entry *e, const char *key, size_t key_length,
                             const eg__json *info) {
    e->name = malloc(key_length + 1);
    if (!e->name) return out_of_memory(c->file);
    memcpy(e->name, key, key_length + 1);
    if (strlen(key) != key_length) {
        char name[128];
        return format_error(c, NULL, "tensor name '%s' contains a NUL character (not supported)",
                            printable(key, key_length, name, sizeof name));
    }
    if (info->type != EG__JSON_OBJECT)
        return format_error(c, e->name,
                            "entry must be an object with dtype, shape and data_offsets, not %s",
                            eg__json_type_name(info->type));
    for (size_t i = 0; i < info->length; i++) {
        const char *field = info->keys[i];
        if (strcmp(field, "dtype") && strcmp(field, "shape") && strcmp(field, "data_offsets")) {
            char text[64];
            return format_error(c, e->name,
                                "unknown field '%s' (expected dtype, shape and data_offsets)",
                                printable(field, info->key_lengths[i], text, sizeof text));
        }
        for (size_t j = 0; j < i; j++)
            if (strcmp(field, info->keys[j]) == 0)
                return format_error(c, e->name, "duplicate field '%s'", field);
    }
    static const char *const required[] = {"dtype", "shape", "data_offsets"};
    for (size_t i = 0; i < 3; i++)
        if (!eg__json_get(info, required[i]))
            return format_error(c, e->name, "missing field '%s'", required[i]);

    const eg__json *dtype = eg__json_get(info, "dtype");
    if (dtype->type != EG__JSON_STRING)
        return format_error(c, e->name, "dtype must be a string, not %s",
                            eg__json_type_name(dtype->type));
    e->dtype = dtype_by_name(dtype->string, dtype->length);
    if (!e->dtype) {
        char text[64];
        return format_error(
            c, e->name,
            "unknown dtype '%s' (known: F32 F64 F16 BF16 I32 I64 U8 BOOL I8 I16 U16 "
            "U32 U64 C64 F8_E5M2 F8_E4M3 F8_E8M0 F6_E2M3 F6_E3M2 F4)",
            printable(dtype->string, dtype->length, text, sizeof text));
    }
    eg_status status = parse_shape(c, e, eg__json_get(info, "shape"));
    if (status != EG_OK) return status;
    uint64_t n_bytes = 0;
    status = entry_size(c, e, &n_bytes);
    if (status != EG_OK) return status;

    const eg__json *offsets = eg__json_get(info, "data_offsets");
    if (offsets->type != EG__JSON_ARRAY || offsets->length != 2 ||
        !eg__json_as_u64(&offsets->items[0], &e->begin) ||
        !eg__json_as_u64(&offsets->items[1], &e->end))
        return format_error(c, e->name,
                            "data_offsets must be an array of two non-negative integers "
                            "[begin, end]");
    if (e->begin > e->end)
        return format_error(c, e->name, "data_offsets [%llu, %llu]: begin is after end",
                            (unsigned long long)e->begin, (unsigned long long)e->end);
    if (e->end - e->begin != n_bytes) {
        char shape[256];
        return format_error(
            c, e->name, "data_offsets [%llu, %llu] hold %llu bytes but %s %s needs %llu",
            (unsigned long long)e->begin, (unsigned long long)e->end,
            (unsigned long long)(e->end - e->begin), e->dtype->name,
            shape_text(e->shape, e->n_dims, shape, sizeof shape), (unsigned long long)n_bytes);
    }
    return EG_OK;
}

/* Validates the JSON header; buffer_bytes is what follows it in the file. Fills c->st. */
static eg_status parse_header(parse_context *c, const uint8_t *header, size_t header_length,
                              uint64_t buffer_bytes) {
    eg_safetensors *st = c->st;
    size_t bad = eg__utf8_check(header, header_length);
    if (bad < header_length)
        return format_error(c, NULL, "header is not valid UTF-8 (byte 0x%02x at offset %zu)",
                            header[bad], bad);
    if (header_length == 0 || header[0] != '{')
        return format_error(c, NULL, "header does not start with '{': it must be a JSON object");
    eg__json root;
    char message[256];
    bool oom = false;
    if (!eg__json_parse((const char *)header, header_length, &root, message, sizeof message, &oom))
        return oom ? out_of_memory(c->file)
                   : format_error(c, NULL, "header is not valid JSON: %s of the header", message);

    eg_status status = EG_OK;
    size_t n = root.length;
    st->entries = calloc(n ? n : 1, sizeof *st->entries);
    st->by_offset = calloc(n ? n : 1, sizeof *st->by_offset);
    if (!st->entries || !st->by_offset) status = out_of_memory(c->file);
    bool have_metadata = false;
    for (size_t i = 0; i < n && status == EG_OK; i++) {
        if (strcmp(root.keys[i], "__metadata__") == 0 && root.key_lengths[i] == 12) {
            if (have_metadata)
                status = format_error(c, NULL, "duplicate key '__metadata__'");
            else
                status = parse_metadata(c, &root.items[i]);
            have_metadata = true;
            continue;
        }
        st_entry *e = &st->entries[st->n_entries++];
        status = parse_entry(c, e, root.keys[i], root.key_lengths[i], &root.items[i]);
    }
    eg__json_free(&root);
    if (status != EG_OK) return status;

    qsort(st->entries, st->n_entries, sizeof *st->entries, compare_entry_names);
    for (size_t i = 1; i < st->n_entries; i++)
        if (strcmp(st->entries[i - 1].name, st->entries[i].name) == 0)
            return format_error(c, st->entries[i].name, "duplicate tensor name");

    /* The tensors, in the order of their data, must tile the buffer: no gap, no overlap. */
    for (size_t i = 0; i < st->n_entries; i++) st->by_offset[i] = &st->entries[i];
    qsort(st->by_offset, st->n_entries, sizeof *st->by_offset, compare_offsets);
    uint64_t covered = 0;
    const st_entry *previous = NULL;
    for (size_t i = 0; i < st->n_entries; i++) {
        const st_entry *e = st->by_offset[i];
        if (e->begin > covered)
            return format_error(c, e->name,
                                "data_offsets [%llu, %llu] leave bytes [%llu, %llu) of the data "
                                "buffer unused: tensors must cover it contiguously",
                                (unsigned long long)e->begin, (unsigned long long)e->end,
                                (unsigned long long)covered, (unsigned long long)e->begin);
        if (e->begin < covered) {
            char other[128];
            return format_error(
                c, e->name, "data_offsets [%llu, %llu] overlap tensor '%s', which ends at %llu",
                (unsigned long long)e->begin, (unsigned long long)e->end,
                printable(previous->name, strlen(previous->name), other, sizeof other),
                (unsigned long long)covered);
        }
        covered = e->end;
        previous = e;
    }
    if (covered > buffer_bytes)
        return format_error(c, NULL,
                            "truncated: the tensors need %llu bytes of data but the file holds "
                            "%llu after the header",
                            (unsigned long long)covered, (unsigned long long)buffer_bytes);
    if (covered < buffer_bytes)
        return format_error(c, NULL,
                            "the file holds %llu bytes of data after the header but the tensors "
                            "cover only %llu (trailing bytes)",
                            (unsigned long long)buffer_bytes, (unsigned long long)covered);
    st->data_bytes = buffer_bytes;
    return EG_OK;
}

static uint64_t read_le64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

/* The 8-byte prefix: header length, checked against the limit and the file size. */
static eg_status check_prefix(parse_context *c, const uint8_t *prefix, uint64_t file_size,
                              uint64_t *header_length) {
    if (file_size < 8)
        return format_error(c, NULL,
                            "file has %llu bytes; a safetensors file starts with an 8-byte "
                            "header length",
                            (unsigned long long)file_size);
    uint64_t n = read_le64(prefix);
    if (n > EG_SAFETENSORS_MAX_HEADER)
        return format_error(c, NULL, "header length %llu exceeds the limit of %d bytes",
                            (unsigned long long)n, EG_SAFETENSORS_MAX_HEADER);
    if (n > file_size - 8)
        return format_error(c, NULL,
                            "header length %llu runs past the end of the file (%llu bytes)",
                            (unsigned long long)n, (unsigned long long)file_size);
    *header_length = n;
    return EG_OK;
}

static eg_safetensors *new_handle(const char *name) {
    eg_safetensors *st = calloc(1, sizeof *st);
    if (!st) return NULL;
    st->fd = -1;
    st->path = strdup(name);
    if (!st->path) {
        free(st);
        return NULL;
    }
    return st;
}

eg_status eg__safetensors_open_memory(const uint8_t *bytes, size_t n_bytes,
                                      const char *name_for_errors, eg_safetensors **out) {
    const char *name = name_for_errors ? name_for_errors : "safetensors data";
    if (!out) return eg__error(EG_ERR_NULL_ARGUMENT, "%s: out is NULL", name);
    *out = NULL;
    if (!bytes && n_bytes) return eg__error(EG_ERR_NULL_ARGUMENT, "%s: bytes is NULL", name);
    eg_safetensors *st = new_handle(name);
    if (!st) return out_of_memory(name);
    parse_context c = {name, st};
    uint64_t header_length = 0;
    eg_status status = check_prefix(&c, bytes, n_bytes, &header_length);
    if (status == EG_OK)
        status = parse_header(&c, bytes + 8, (size_t)header_length, n_bytes - 8 - header_length);
    if (status != EG_OK) {
        eg_safetensors_close(st);
        return status;
    }
    st->memory = bytes + 8 + header_length;
    *out = st;
    return EG_OK;
}

/* Reads exactly n bytes at offset; false with an error otherwise. */
static eg_status read_exactly(int fd, const char *path, void *dst, size_t n, uint64_t offset) {
    uint8_t *p = dst;
    while (n > 0) {
        size_t want = n < ((size_t)1 << 30) ? n : ((size_t)1 << 30);
        ssize_t got = pread(fd, p, want, (off_t)offset);
        if (got < 0) {
            if (errno == EINTR) continue;
            return eg__error(EG_ERR_IO, "%s: read error: %s", path, strerror(errno));
        }
        if (got == 0)
            return eg__error(EG_ERR_IO, "%s: unexpected end of file (the file has shrunk?)", path);
        p += got;
        n -= (size_t)got;
        offset += (uint64_t)got;
    }
    return EG_OK;
}

eg_safetensors *eg_safetensors_open(const char *path) {
    if (!path) {
        eg__error(EG_ERR_NULL_ARGUMENT, "safetensors_open: path is NULL");
        return NULL;
    }
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        eg__error(EG_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    struct stat info = {0};
    if (fstat(fd, &info) != 0 || !S_ISREG(info.st_mode)) {
        int saved = errno;
        bool is_dir = S_ISDIR(info.st_mode);
        close(fd);
        eg__error(EG_ERR_IO, "%s: %s", path,
                  is_dir ? "is a directory, not a safetensors file"
                         : (saved ? strerror(saved) : "not a regular file"));
        return NULL;
    }
    eg_safetensors *st = new_handle(path);
    if (!st) {
        close(fd);
        out_of_memory(path);
        return NULL;
    }
    st->fd = fd;
    parse_context c = {path, st};
    uint64_t file_size = (uint64_t)info.st_size, header_length = 0;
    uint8_t prefix[8] = {0};
    eg_status status = read_exactly(fd, path, prefix, file_size < 8 ? (size_t)file_size : 8, 0);
    if (status == EG_OK) status = check_prefix(&c, prefix, file_size, &header_length);
    uint8_t *header = NULL;
    if (status == EG_OK) {
        header = malloc(header_length ? (size_t)header_length : 1);
        if (!header) status = out_of_memory(path);
    }
    if (status == EG_OK) status = read_exactly(fd, path, header, (size_t)header_length, 8);
    if (status == EG_OK)
        status = parse_header(&c, header, (size_t)header_length, file_size - 8 - header_length);
    free(header);
    if (status != EG_OK) {
        eg_safetensors_close(st);
        return NULL;
    }
    st->data_start = 8 + header_length;
    return st;
}

/* ---- queries ---- */

static bool check_handle(const eg_safetensors *st, const char *what) {
    if (st) return true;
    eg__error(EG_ERR_NULL_ARGUMENT, "%s: handle is NULL", what);
    return false;
}

static const st_entry *find(const eg_safetensors *st, const char *name) {
    st_entry key = {.name = (char *)name};
    return bsearch(&key, st->entries, st->n_entries, sizeof *st->entries, compare_entry_names);
}

int eg_safetensors_count(const eg_safetensors *st) {
    return check_handle(st, "safetensors_count") ? (int)st->n_entries : 0;
}

const char *eg_safetensors_name(const eg_safetensors *st, int i) {
    if (!check_handle(st, "safetensors_name")) return NULL;
    if (i < 0 || (size_t)i >= st->n_entries) {
        eg__error(EG_ERR_INVALID_ARGUMENT, "%s: tensor index %d out of range [0, %zu)", st->path, i,
                  st->n_entries);
        return NULL;
    }
    return st->by_offset[i]->name;
}

bool eg_safetensors_contains(const eg_safetensors *st, const char *name) {
    if (!check_handle(st, "safetensors_contains")) return false;
    if (!name) {
        eg__error(EG_ERR_NULL_ARGUMENT, "safetensors_contains: name is NULL");
        return false;
    }
    return find(st, name) != NULL;
}

/* The entry for name, checked for being readable into eagle; NULL with an error. */
static const st_entry *find_readable(const eg_safetensors *st, const char *name, const char *what) {
    if (!check_handle(st, what)) return NULL;
    if (!name) {
        eg__error(EG_ERR_NULL_ARGUMENT, "%s: name is NULL", what);
        return NULL;
    }
    char text[128];
    const st_entry *e = find(st, name);
    if (!e) {
        eg__error(EG_ERR_INVALID_ARGUMENT, "%s: no tensor named '%s'", st->path,
                  printable(name, strlen(name), text, sizeof text));
        return NULL;
    }
    if (e->dtype->dtype == EG_DTYPE_COUNT) {
        eg__error(EG_ERR_UNSUPPORTED,
                  "%s: tensor '%s' has dtype %s, which eagle has no equivalent for (supported: "
                  "F32 F64 F16 BF16 I32 I64 U8 BOOL I8)",
                  st->path, printable(name, strlen(name), text, sizeof text), e->dtype->name);
        return NULL;
    }
    if (e->n_dims > EG_MAX_DIMS) {
        eg__error(EG_ERR_UNSUPPORTED, "%s: tensor '%s' has %zu dimensions; eagle supports %d",
                  st->path, printable(name, strlen(name), text, sizeof text), e->n_dims,
                  EG_MAX_DIMS);
        return NULL;
    }
    return e;
}

eg_status eg_safetensors_info(const eg_safetensors *st, const char *name, eg_dtype *dtype,
                              int *n_dims, int64_t *shape) {
    const st_entry *e = find_readable(st, name, "safetensors_info");
    if (!e) return eg_last_status();
    if (dtype) *dtype = e->dtype->dtype;
    if (n_dims) *n_dims = (int)e->n_dims;
    for (size_t i = 0; shape && i < e->n_dims; i++) shape[i] = (int64_t)e->shape[i];
    return EG_OK;
}

/* Converts little-endian file elements to host order in place; BOOL bytes become 0 or 1. */
static void fix_elements(void *data, eg_dtype dtype, size_t n_bytes) {
    uint8_t *p = data;
    if (dtype == EG_DTYPE_BOOL) {
        for (size_t i = 0; i < n_bytes; i++) p[i] = p[i] != 0;
        return;
    }
    size_t size = eg_dtype_size(dtype);
    if (HOST_IS_LITTLE_ENDIAN || size == 1) return;
    for (size_t i = 0; i + size <= n_bytes; i += size)
        for (size_t a = 0, b = size - 1; a < b; a++, b--) {
            uint8_t t = p[i + a];
            p[i + a] = p[i + b];
            p[i + b] = t;
        }
}

eg_tensor *eg_safetensors_get(const eg_safetensors *st, const char *name) {
    const st_entry *e = find_readable(st, name, "safetensors_get");
    if (!e) return NULL;
    int64_t shape[EG_MAX_DIMS] = {0};
    for (size_t i = 0; i < e->n_dims; i++) shape[i] = (int64_t)e->shape[i];
    eg_device_scope_begin(eg_device_cpu()); /* file readers make host tensors (device.h) */
    eg_tensor *t = eg_empty(e->dtype->dtype, (int)e->n_dims, shape);
    eg_device_scope_end();
    if (!t) return NULL;
    size_t n_bytes = (size_t)(e->end - e->begin);
    if (n_bytes == 0) return t;
    void *dst = eg_tensor_data(t);
    eg_status status = dst ? EG_OK : eg_last_status();
    if (status == EG_OK) {
        if (st->fd < 0)
            memcpy(dst, st->memory + e->begin, n_bytes);
        else
            status = read_exactly(st->fd, st->path, dst, n_bytes, st->data_start + e->begin);
    }
    if (status != EG_OK) {
        eg_release(t);
        return NULL;
    }
    fix_elements(dst, e->dtype->dtype, n_bytes);
    return t;
}

const char *eg_safetensors_metadata(const eg_safetensors *st, const char *key) {
    if (!check_handle(st, "safetensors_metadata")) return NULL;
    if (!key) {
        eg__error(EG_ERR_NULL_ARGUMENT, "safetensors_metadata: key is NULL");
        return NULL;
    }
    char **found = st->n_metadata ? bsearch(&key, st->metadata_keys, st->n_metadata, sizeof(char *),
                                            compare_strings)
                                  : NULL; /* no "__metadata__": metadata_keys is NULL */
    return found ? st->metadata_values[found - st->metadata_keys] : NULL;
}

int eg_safetensors_metadata_count(const eg_safetensors *st) {
    return check_handle(st, "safetensors_metadata_count") ? (int)st->n_metadata : 0;
}

const char *eg_safetensors_metadata_key(const eg_safetensors *st, int i) {
    if (!check_handle(st, "safetensors_metadata_key")) return NULL;
    if (i < 0 || (size_t)i >= st->n_metadata) {
        eg__error(EG_ERR_INVALID_ARGUMENT, "%s: metadata index %d out of range [0, %zu)", st->path,
                  i, st->n_metadata);
        return NULL;
    }
    return st->metadata_keys[i];
}

/* ---- writing ---- */

typedef struct text {
    char *data;
    size_t used, capacity;
    bool failed;
} text;

static void text_append(text *t, const char *s, size_t n) {
    if (t->failed) return;
    if (t->capacity - t->used <= n) {
        size_t capacity = t->capacity ? t->capacity : 256;
        while (capacity - t->used <= n) capacity *= 2;
        char *grown = realloc(t->data, capacity);
        if (!grown) {
            t->failed = true;
            return;
        }
        t->data = grown;
        t->capacity = capacity;
    }
    memcpy(t->data + t->used, s, n);
    t->used += n;
    t->data[t->used] = '\0';
}

static void text_printf(text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void text_printf(text *t, const char *fmt, ...) {
    char buf[64];
    va_list args;
    va_start(args, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, args);
    va_end(args);
    if (n >= 0 && (size_t)n < sizeof buf)
        text_append(t, buf, (size_t)n);
    else
        t->failed = true;
}

static void text_json_string(text *t, const char *s) {
    text_append(t, "\"", 1);
    for (const char *p = s; *p; p++) {
        unsigned char c = (unsigned char)*p;
        if (c == '"' || c == '\\') {
            char escaped[2] = {'\\', (char)c};
            text_append(t, escaped, 2);
        } else if (c < 0x20) {
            text_printf(t, "\\u%04x", c);
        } else {
            text_append(t, p, 1);
        }
    }
    text_append(t, "\"", 1);
}

typedef struct save_entry {
    const char *name;
    const eg_tensor *tensor;
    const st_dtype *dtype;
    size_t n_bytes;
} save_entry;

typedef struct metadata_pair {
    const char *key, *value;
} metadata_pair;

static int compare_save_names(const void *a, const void *b) {
    return strcmp(((const save_entry *)a)->name, ((const save_entry *)b)->name);
}

/* Larger elements first (so each tensor stays aligned, as in the reference writer), then name. */
static int compare_save_layout(const void *a, const void *b) {
    const save_entry *x = a, *y = b;
    if (x->dtype->bits != y->dtype->bits) return x->dtype->bits > y->dtype->bits ? -1 : 1;
    return strcmp(x->name, y->name);
}

static int compare_metadata(const void *a, const void *b) {
    return strcmp(((const metadata_pair *)a)->key, ((const metadata_pair *)b)->key);
}

static bool valid_utf8(const char *s) {
    size_t n = strlen(s);
    return eg__utf8_check((const uint8_t *)s, n) == n;
}

static eg_status check_save_arguments(const char *path, int n, const char *const *names,
                                      const eg_tensor *const *tensors, int n_metadata,
                                      const char *const *keys, const char *const *values) {
    if (!path) return eg__error(EG_ERR_NULL_ARGUMENT, "safetensors_save: path is NULL");
    if (n < 0 || n_metadata < 0)
        return eg__error(EG_ERR_INVALID_ARGUMENT,
                         "%s: safetensors_save: negative count (n = %d, n_metadata = %d)", path, n,
                         n_metadata);
    if (n > 0 && (!names || !tensors))
        return eg__error(EG_ERR_NULL_ARGUMENT, "%s: safetensors_save: %s is NULL", path,
                         names ? "tensors" : "names");
    if (n_metadata > 0 && (!keys || !values))
        return eg__error(EG_ERR_NULL_ARGUMENT, "%s: safetensors_save: %s is NULL", path,
                         keys ? "metadata_values" : "metadata_keys");
    for (int i = 0; i < n; i++) {
        if (!names[i])
            return eg__error(EG_ERR_NULL_ARGUMENT, "%s: safetensors_save: names[%d] is NULL", path,
                             i);
        if (!tensors[i])
            return eg__error(EG_ERR_NULL_ARGUMENT, "%s: safetensors_save: tensor '%s' is NULL",
                             path, names[i]);
        if (!valid_utf8(names[i]) || strcmp(names[i], "__metadata__") == 0)
            return eg__error(
                EG_ERR_INVALID_ARGUMENT, "%s: safetensors_save: names[%d] is %s", path, i,
                valid_utf8(names[i]) ? "the reserved name __metadata__" : "not valid UTF-8");
        if (!dtype_of(eg_tensor_dtype(tensors[i])))
            return eg__error(EG_ERR_INVALID_ARGUMENT,
                             "%s: safetensors_save: tensor '%s' has an invalid dtype", path,
                             names[i]);
    }
    for (int i = 0; i < n_metadata; i++) {
        if (!keys[i] || !values[i])
            return eg__error(EG_ERR_NULL_ARGUMENT, "%s: safetensors_save: metadata_%s[%d] is NULL",
                             path, keys[i] ? "values" : "keys", i);
        if (!valid_utf8(keys[i]) || !valid_utf8(values[i]))
            return eg__error(EG_ERR_INVALID_ARGUMENT,
                             "%s: safetensors_save: metadata entry %d is not valid UTF-8", path, i);
    }
    return EG_OK;
}

eg_status eg_safetensors_save(const char *path, int n, const char *const *names,
                              eg_tensor *const *tensors_in, int n_metadata,
                              const char *const *metadata_keys,
                              const char *const *metadata_values) {
    const eg_tensor *const *tensors = eg__const_tensors(tensors_in);
    eg_status status =
        check_save_arguments(path, n, names, tensors, n_metadata, metadata_keys, metadata_values);
    if (status != EG_OK) return status;
    save_entry *entries = calloc((size_t)n + 1, sizeof *entries);
    metadata_pair *metadata = calloc((size_t)n_metadata + 2, sizeof *metadata);
    text header = {0};
    if (!entries || !metadata) {
        status = out_of_memory(path);
        goto done;
    }
    for (int i = 0; i < n; i++) {
        entries[i].name = names[i];
        entries[i].tensor = tensors[i];
        entries[i].dtype = dtype_of(eg_tensor_dtype(tensors[i]));
        entries[i].n_bytes =
            (size_t)eg_tensor_n_elems(tensors[i]) * eg_dtype_size(eg_tensor_dtype(tensors[i]));
    }
    qsort(entries, (size_t)n, sizeof *entries, compare_save_names);
    for (int i = 1; i < n; i++)
        if (strcmp(entries[i - 1].name, entries[i].name) == 0) {
            status = eg__error(EG_ERR_INVALID_ARGUMENT,
                               "%s: safetensors_save: duplicate tensor name '%s'", path,
                               entries[i].name);
            goto done;
        }
    qsort(entries, (size_t)n, sizeof *entries, compare_save_layout);

    size_t n_pairs = 0;
    bool has_format = false, has_version = false;
    for (int i = 0; i < n_metadata; i++) {
        metadata[n_pairs++] = (metadata_pair){metadata_keys[i], metadata_values[i]};
        if (strcmp(metadata_keys[i], "format") == 0) has_format = true;
        if (strcmp(metadata_keys[i], "eagle_version") == 0) has_version = true;
    }
    if (!has_format) metadata[n_pairs++] = (metadata_pair){"format", "eagle"};
    if (!has_version) metadata[n_pairs++] = (metadata_pair){"eagle_version", eg_version()};
    qsort(metadata, n_pairs, sizeof *metadata, compare_metadata);
    for (size_t i = 1; i < n_pairs; i++)
        if (strcmp(metadata[i - 1].key, metadata[i].key) == 0) {
            status = eg__error(EG_ERR_INVALID_ARGUMENT,
                               "%s: safetensors_save: duplicate metadata key '%s'", path,
                               metadata[i].key);
            goto done;
        }

    text_append(&header, "{\"__metadata__\":{", 17);
    for (size_t i = 0; i < n_pairs; i++) {
        if (i) text_append(&header, ",", 1);
        text_json_string(&header, metadata[i].key);
        text_append(&header, ":", 1);
        text_json_string(&header, metadata[i].value);
    }
    text_append(&header, "}", 1);
    uint64_t offset = 0;
    for (int i = 0; i < n; i++) {
        const eg_tensor *t = entries[i].tensor;
        text_append(&header, ",", 1);
        text_json_string(&header, entries[i].name);
        text_printf(&header, ":{\"dtype\":\"%s\",\"shape\":[", entries[i].dtype->name);
        const int64_t *shape = eg_tensor_shape(t);
        for (int d = 0; d < eg_tensor_n_dims(t); d++)
            text_printf(&header, d ? ",%lld" : "%lld", (long long)shape[d]);
        text_printf(&header, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)offset,
                    (unsigned long long)(offset + entries[i].n_bytes));
        offset += entries[i].n_bytes;
    }
    text_append(&header, "}", 1);
    while (!header.failed && header.used % 8) text_append(&header, " ", 1);
    if (header.failed) {
        status = out_of_memory(path);
        goto done;
    }
    if (header.used > EG_SAFETENSORS_MAX_HEADER) {
        status = eg__error(EG_ERR_INVALID_ARGUMENT,
                           "%s: safetensors_save: the header would be %zu bytes, above the "
                           "format's limit of %d",
                           path, header.used, EG_SAFETENSORS_MAX_HEADER);
        goto done;
    }

    eg__atomic_file file;
    status = eg__atomic_open(&file, path);
    if (status != EG_OK) goto done;
    uint8_t prefix[8];
    for (int i = 0; i < 8; i++) prefix[i] = (uint8_t)((uint64_t)header.used >> (8 * i));
    eg__atomic_write(&file, prefix, 8);
    eg__atomic_write(&file, header.data, header.used);
    for (int i = 0; i < n && file.status == EG_OK; i++)
        eg__atomic_write_tensor(&file, entries[i].tensor);
    status = eg__atomic_commit(&file);

done:
    free(entries);
    free(metadata);
    free(header.data);
    return status;
}
