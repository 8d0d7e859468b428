/* NumPy .npy reader and writer. See include/eagle/checkpoint.h for the contracts.
 *
 * The header is a Python dict literal; it is parsed with a small strict grammar that accepts what
 * numpy writes (and what ast.literal_eval would accept for the same three keys), refusing anything
 * else with a message that says what was expected:
 *     dict  := '{' [item (',' item)* [',']] '}'
 *     item  := string ':' value            string := '...' | "..." (no escapes)
 *     value := string | True | False | tuple
 *     tuple := '(' ')' | '(' int ',' ')' | '(' int (',' int)+ [','] ')'
 * with spaces, tabs and newlines allowed between tokens. */

#ifndef EG_NO_CALLSITE
#define EG_NO_CALLSITE
#endif

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.h"
#include "eagle/checkpoint.h"
#include "io/atomic_file.h"
#include "io/checkpoint_internal.h"

#define HOST_IS_LITTLE_ENDIAN (__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__)

static const uint8_t npy_magic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};

#define SUPPORTED_DTYPES "'<f4' '<f8' '<f2' '<i4' '<i8' '|u1' '|b1' '|i1' (also big-endian '>')"

typedef struct npy_dtype {
    const char *code; /* without the byte-order character */
    eg_dtype dtype;
    size_t size;
} npy_dtype;

static const npy_dtype npy_dtypes[] = {
    {"f4", EG_DTYPE_F32, 4},  {"f8", EG_DTYPE_F64, 8}, {"f2", EG_DTYPE_F16, 2},
    {"i4", EG_DTYPE_I32, 4},  {"i8", EG_DTYPE_I64, 8}, {"u1", EG_DTYPE_U8, 1},
    {"b1", EG_DTYPE_BOOL, 1}, {"i1", EG_DTYPE_I8, 1},
};

/* ---- header ---- */

typedef struct header_parser {
    const char *text;
    size_t length, pos;
    const char *file;
} header_parser;

__attribute__((format(printf, 3, 4))) static eg_status
header_error(header_parser *p, eg_status status, const char *fmt, ...) {
    char message[384];
    va_list args;
    va_start(args, fmt);
    vsnprintf(message, sizeof message, fmt, args);
    va_end(args);
    return eg__error(status, "%s: bad .npy header: %s (at byte %zu of the header dict)", p->file,
                     message, p->pos);
}

static void skip_space(header_parser *p) {
    while (p->pos < p->length && p->text[p->pos] && strchr(" \t\r\n", p->text[p->pos])) p->pos++;
}

/* The character at the current position, or 0 at the end. */
static char peek(header_parser *p) {
    skip_space(p);
    return p->pos < p->length ? p->text[p->pos] : '\0';
}

static bool is_digit(char c) {
    return c >= '0' && c <= '9';
}

/* A quoted string without escapes; its content (up to 31 bytes) into out. */
static eg_status parse_string(header_parser *p, char *out, size_t out_size) {
    char quote = peek(p);
    if (quote != '\'' && quote != '"')
        return header_error(p, EG_ERR_FORMAT, "expected a quoted string");
    size_t start = ++p->pos;
    while (p->pos < p->length && p->text[p->pos] != quote) {
        unsigned char c = (unsigned char)p->text[p->pos];
        if (c == '\n') break; /* a quoted string ends on its line */
        if (c == '\\' || c < 0x20 || c >= 0x7f)
            return header_error(p, EG_ERR_FORMAT,
                                "unsupported character 0x%02x in a string (escapes and non-ASCII "
                                "text are not accepted)",
                                c);
        p->pos++;
    }
    if (p->pos >= p->length || p->text[p->pos] != quote)
        return header_error(p, EG_ERR_FORMAT, "unterminated string");
    size_t n = p->pos - start;
    p->pos++;
    if (n >= out_size) {
        p->pos = start;
        return header_error(p, EG_ERR_FORMAT, "string too long (%zu bytes)", n);
    }
    memcpy(out, p->text + start, n);
    out[n] = '\0';
    return EG_OK;
}

static eg_status parse_descr(header_parser *p, eg__npy_header *h) {
    if (peek(p) == '[')
        return header_error(p, EG_ERR_UNSUPPORTED,
                            "structured dtypes (a list as 'descr') are not supported; supported: "
                            "%s",
                            SUPPORTED_DTYPES);
    size_t at = p->pos;
    char descr[32];
    eg_status status = parse_string(p, descr, sizeof descr);
    if (status != EG_OK) return status;
    char order = descr[0];
    const char *code = descr;
    if (order == '<' || order == '>' || order == '|' || order == '=')
        code++;
    else
        order = '=';
    const npy_dtype *found = NULL;
    for (size_t i = 0; i < sizeof npy_dtypes / sizeof npy_dtypes[0]; i++)
        if (strcmp(code, npy_dtypes[i].code) == 0) found = &npy_dtypes[i];
    if (!found) {
        p->pos = at;
        return header_error(p, EG_ERR_UNSUPPORTED, "dtype '%s' is not supported; supported: %s",
                            descr, SUPPORTED_DTYPES);
    }
    if (order == '|' && found->size > 1) {
        p->pos = at;
        return header_error(
            p, EG_ERR_FORMAT,
            "dtype '%s': byte order '|' (not applicable) is only valid for one-byte "
            "types; expected '<' or '>'",
            descr);
    }
    h->dtype = found->dtype;
    h->elem_size = found->size;
    bool little = order == '<' || (order == '=' && HOST_IS_LITTLE_ENDIAN);
    h->byte_swap = found->size > 1 && order != '|' && little != HOST_IS_LITTLE_ENDIAN;
    return EG_OK;
}

static eg_status parse_bool(header_parser *p, bool *out) {
    peek(p);
    const char *rest = p->text + p->pos;
    size_t left = p->length - p->pos;
    if (left >= 4 && memcmp(rest, "True", 4) == 0) {
        *out = true;
        p->pos += 4;
    } else if (left >= 5 && memcmp(rest, "False", 5) == 0) {
        *out = false;
        p->pos += 5;
    } else {
        return header_error(p, EG_ERR_FORMAT, "'fortran_order' must be True or False");
    }
    char next = p->pos < p->length ? p->text[p->pos] : ' ';
    if (is_digit(next) || next == '_' || ((next | 0x20) >= 'a' && (next | 0x20) <= 'z'))
        return header_error(p, EG_ERR_FORMAT, "'fortran_order' must be True or False");
    return EG_OK;
}

/* A decimal int as Python writes it (no sign, no leading zeros); at most INT64_MAX. */
static eg_status parse_int(header_parser *p, int64_t *out) {
    char c = peek(p);
    if (c == '-') return header_error(p, EG_ERR_FORMAT, "negative dimension in 'shape'");
    if (!is_digit(c))
        return header_error(p, EG_ERR_FORMAT, "'shape' must hold non-negative integers");
    size_t start = p->pos;
    uint64_t v = 0;
    while (p->pos < p->length && is_digit(p->text[p->pos])) {
        uint64_t digit = (uint64_t)(p->text[p->pos] - '0');
        if (v > ((uint64_t)INT64_MAX - digit) / 10) {
            p->pos = start;
            return header_error(p, EG_ERR_FORMAT, "dimension in 'shape' is too large");
        }
        v = v * 10 + digit;
        p->pos++;
    }
    if (p->pos - start > 1 && p->text[start] == '0') {
        p->pos = start;
        return header_error(p, EG_ERR_FORMAT, "dimension with a leading zero in 'shape'");
    }
    if (p->pos < p->length && p->text[p->pos] && strchr(".eEjxXoObB_L", p->text[p->pos]))
        return header_error(p, EG_ERR_FORMAT, "'shape' must hold plain decimal integers");
    *out = (int64_t)v;
    return EG_OK;
}

static eg_status parse_shape(header_parser *p, eg__npy_header *h) {
    char c = peek(p);
    if (c != '(')
        return header_error(p, EG_ERR_FORMAT,
                            "'shape' must be a tuple of integers such as (2, 3), (3,) or ()%s",
                            c == '['      ? ", not a list"
                            : is_digit(c) ? ", not an int"
                                          : "");
    p->pos++;
    int n = 0;
    bool comma_after_last = false;
    while (peek(p) != ')') {
        if (n == EG_MAX_DIMS)
            return header_error(p, EG_ERR_UNSUPPORTED,
                                "more than %d dimensions in 'shape' (eagle supports up to %d)",
                                EG_MAX_DIMS, EG_MAX_DIMS);
        eg_status status = parse_int(p, &h->shape[n]);
        if (status != EG_OK) return status;
        n++;
        c = peek(p);
        comma_after_last = c == ',';
        if (c == ',')
            p->pos++;
        else if (c != ')')
            return header_error(p, EG_ERR_FORMAT, "expected ',' or ')' in 'shape'");
    }
    p->pos++;
    if (n == 1 && !comma_after_last)
        return header_error(p, EG_ERR_FORMAT,
                            "'shape' (%lld) is an int in parentheses, not a tuple: write (%lld,)",
                            (long long)h->shape[0], (long long)h->shape[0]);
    h->n_dims = n;
    return EG_OK;
}

static uint32_t read_le(const uint8_t *p, int n) {
    uint32_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

eg_status eg__npy_header_size(const uint8_t *bytes, size_t n_bytes, const char *name_for_errors,
                              size_t *header_bytes) {
    const char *name = name_for_errors ? name_for_errors : ".npy data";
    if (!header_bytes) return eg__error(EG_ERR_NULL_ARGUMENT, "%s: header_bytes is NULL", name);
    *header_bytes = 0;
    if (!bytes && n_bytes) return eg__error(EG_ERR_NULL_ARGUMENT, "%s: bytes is NULL", name);
    size_t magic = n_bytes < 6 ? n_bytes : 6;
    if (memcmp(bytes ? bytes : npy_magic, npy_magic, magic) != 0)
        return eg__error(EG_ERR_FORMAT, "%s: not a .npy file: it does not start with \\x93NUMPY",
                         name);
    if (n_bytes < 8)
        return eg__error(EG_ERR_FORMAT, "%s: truncated: %zu bytes, too short for a .npy header",
                         name, n_bytes);
    int major = bytes[6], minor = bytes[7];
    if (major < 1 || major > 3 || minor != 0)
        return eg__error(EG_ERR_FORMAT,
                         "%s: unsupported .npy format version %d.%d (supported: 1.0, 2.0, 3.0)",
                         name, major, minor);
    size_t length_size = major == 1 ? 2 : 4;
    if (n_bytes < 8 + length_size)
        return eg__error(EG_ERR_FORMAT, "%s: truncated: %zu bytes, too short for a .npy header",
                         name, n_bytes);
    size_t length = read_le(bytes + 8, (int)length_size);
    if (length > EG__NPY_MAX_HEADER)
        return eg__error(EG_ERR_FORMAT, "%s: .npy header length %zu exceeds the limit of %zu bytes",
                         name, length, EG__NPY_MAX_HEADER);
    *header_bytes = 8 + length_size + length;
    return EG_OK;
}

eg_status eg__npy_parse_header(const uint8_t *bytes, size_t n_bytes, const char *name_for_errors,
                               eg__npy_header *out) {
    const char *name = name_for_errors ? name_for_errors : ".npy data";
    if (!out) return eg__error(EG_ERR_NULL_ARGUMENT, "%s: out is NULL", name);
    memset(out, 0, sizeof *out);
    size_t header_bytes = 0;
    eg_status status = eg__npy_header_size(bytes, n_bytes, name, &header_bytes);
    if (status != EG_OK) return status;
    if (n_bytes < header_bytes)
        return eg__error(EG_ERR_FORMAT,
                         "%s: truncated header: it announces %zu bytes, the file has %zu", name,
                         header_bytes, n_bytes);
    eg__npy_header h = {.major = bytes[6], .minor = bytes[7], .header_bytes = header_bytes};
    size_t start = h.major == 1 ? 10 : 12;
    header_parser p = {(const char *)bytes + start, header_bytes - start, 0, name};

    if (peek(&p) != '{')
        return header_error(&p, EG_ERR_FORMAT, "expected a dict starting with '{'");
    p.pos++;
    bool seen[3] = {false, false, false};
    static const char *const keys[3] = {"descr", "fortran_order", "shape"};
    while (peek(&p) != '}') {
        size_t at = p.pos;
        char key[32];
        status = parse_string(&p, key, sizeof key);
        if (status != EG_OK) return status;
        int which = -1;
        for (int i = 0; i < 3; i++)
            if (strcmp(key, keys[i]) == 0) which = i;
        if (which < 0 || seen[which]) {
            p.pos = at;
            return header_error(&p, EG_ERR_FORMAT,
                                "%s key '%s' (the dict has exactly the keys 'descr', "
                                "'fortran_order' and 'shape')",
                                which < 0 ? "unexpected" : "duplicate", key);
        }
        seen[which] = true;
        if (peek(&p) != ':') return header_error(&p, EG_ERR_FORMAT, "expected ':' after a key");
        p.pos++;
        if (which == 0)
            status = parse_descr(&p, &h);
        else if (which == 1)
            status = parse_bool(&p, &h.fortran_order);
        else
            status = parse_shape(&p, &h);
        if (status != EG_OK) return status;
        char c = peek(&p);
        if (c == ',')
            p.pos++;
        else if (c != '}')
            return header_error(&p, EG_ERR_FORMAT, "expected ',' or '}' in the dict");
    }
    p.pos++;
    if (peek(&p) != '\0') return header_error(&p, EG_ERR_FORMAT, "unexpected text after the dict");
    for (int i = 0; i < 3; i++)
        if (!seen[i]) return header_error(&p, EG_ERR_FORMAT, "missing key '%s'", keys[i]);

    /* A zero dimension makes the count 0, but the other dimensions' product must still fit
     * (eagle computes strides from it). */
    const uint64_t limit = (uint64_t)INT64_MAX < SIZE_MAX ? (uint64_t)INT64_MAX : SIZE_MAX;
    uint64_t product = 1;
    bool zero = false;
    for (int i = 0; i < h.n_dims; i++) {
        uint64_t dim = (uint64_t)h.shape[i];
        if (dim == 0) {
            zero = true;
        } else if (product > limit / dim || product * dim > limit / h.elem_size) {
            return eg__error(EG_ERR_FORMAT,
                             "%s: bad .npy header: 'shape' has too many elements (the count "
                             "overflows)",
                             name);
        } else {
            product *= dim;
        }
    }
    h.n_elems = zero ? 0 : (size_t)product;
    h.data_bytes = h.n_elems * h.elem_size;
    *out = h;
    return EG_OK;
}

bool eg__npy_needs_conversion(const eg__npy_header *h) {
    return h->byte_swap || (h->fortran_order && h->n_dims > 1) || h->dtype == EG_DTYPE_BOOL;
}

void eg__npy_convert(const eg__npy_header *h, const uint8_t *src, void *dst) {
    uint8_t *out = dst;
    size_t size = h->elem_size;
    if (h->n_elems == 0) return;
    if (!h->fortran_order || h->n_dims <= 1) {
        memcpy(out, src, h->data_bytes);
    } else {
        /* Walk the destination in row-major order; the source offset follows column-major
         * strides (axis 0 fastest). */
        size_t strides[EG_MAX_DIMS], index[EG_MAX_DIMS] = {0}, offset = 0;
        strides[0] = 1;
        for (int d = 1; d < h->n_dims; d++) strides[d] = strides[d - 1] * (size_t)h->shape[d - 1];
        for (size_t i = 0; i < h->n_elems; i++) {
            memcpy(out + i * size, src + offset * size, size);
            for (int d = h->n_dims - 1; d >= 0; d--) {
                if (++index[d] < (size_t)h->shape[d]) {
                    offset += strides[d];
                    break;
                }
                offset -= strides[d] * (index[d] - 1);
                index[d] = 0;
            }
        }
    }
    if (h->dtype == EG_DTYPE_BOOL)
        for (size_t i = 0; i < h->n_elems; i++) out[i] = out[i] != 0;
    if (h->byte_swap)
        for (size_t i = 0; i < h->data_bytes; i += size)
            for (size_t a = 0, b = size - 1; a < b; a++, b--) {
                uint8_t t = out[i + a];
                out[i + a] = out[i + b];
                out[i + b] = t;
            }
}

/* ---- reading files ---- */

static eg_status read_exactly(int fd, const char *path, void *dst, size_t n, uint64_t offset) {
    uint8_t *p = dst;
    while (n > 0) {
        size_t want = n < ((size_t)1 << 30) ? n : ((size_t)1 << 30);
        ssize_t got = pread(fd, p, want, (off_t)offset);
        if (got < 0) {
            if (errno == EINTR) continue;
            return eg__error(EG_ERR_IO, "%s: read error: %s", path, strerror(errno));
        }
        if (got == 0) return eg__error(EG_ERR_IO, "%s: unexpected end of file", path);
        p += got;
        n -= (size_t)got;
        offset += (uint64_t)got;
    }
    return EG_OK;
}

static eg_status read_npy(const char *path, int fd, eg_tensor **out) {
    struct stat info = {0};
    if (fstat(fd, &info) != 0)
        return eg__error(EG_ERR_IO, "%s: cannot stat: %s", path, strerror(errno));
    if (!S_ISREG(info.st_mode))
        return eg__error(EG_ERR_IO, "%s: %s", path,
                         S_ISDIR(info.st_mode) ? "is a directory, not a .npy file"
                                               : "not a regular file");
    uint64_t file_size = (uint64_t)info.st_size;
    uint8_t prefix[12];
    size_t n_prefix = file_size < sizeof prefix ? (size_t)file_size : sizeof prefix;
    size_t header_bytes = 0;
    eg_status status = read_exactly(fd, path, prefix, n_prefix, 0);
    if (status == EG_OK) status = eg__npy_header_size(prefix, n_prefix, path, &header_bytes);
    if (status != EG_OK) return status;
    size_t n_header = file_size < header_bytes ? (size_t)file_size : header_bytes;
    uint8_t *header = malloc(n_header);
    if (!header) return eg__error(EG_ERR_OUT_OF_MEMORY, "%s: out of host memory", path);
    eg__npy_header h;
    status = read_exactly(fd, path, header, n_header, 0);
    if (status == EG_OK) status = eg__npy_parse_header(header, n_header, path, &h);
    free(header);
    if (status != EG_OK) return status;

    uint64_t available = file_size - h.header_bytes;
    if (available != h.data_bytes) {
        char shape[160] = "(";
        size_t used = 1;
        for (int i = 0; i < h.n_dims; i++)
            used += (size_t)snprintf(shape + used, sizeof shape - used, i ? ", %lld" : "%lld",
                                     (long long)h.shape[i]);
        snprintf(shape + used, sizeof shape - used, h.n_dims == 1 ? ",)" : ")");
        return eg__error(EG_ERR_FORMAT,
                         "%s: %s: shape %s of %s needs %zu bytes of data after the %zu-byte "
                         "header, the file has %llu",
                         path, available < h.data_bytes ? "truncated data" : "trailing bytes",
                         shape, eg_dtype_name(h.dtype), h.data_bytes, h.header_bytes,
                         (unsigned long long)available);
    }
    eg_device_scope_begin(eg_device_cpu()); /* file readers make host tensors (device.h) */
    eg_tensor *t = eg_empty(h.dtype, h.n_dims, h.shape);
    eg_device_scope_end();
    if (!t) return eg_last_status();
    if (h.data_bytes > 0) {
        void *dst = eg_tensor_data(t);
        if (!dst)
            status = eg_last_status();
        else if (!eg__npy_needs_conversion(&h))
            status = read_exactly(fd, path, dst, h.data_bytes, h.header_bytes);
        else {
            uint8_t *raw = malloc(h.data_bytes);
            if (!raw)
                status =
                    eg__error(EG_ERR_OUT_OF_MEMORY, "%s: out of host memory: %zu bytes requested",
                              path, h.data_bytes);
            else
                status = read_exactly(fd, path, raw, h.data_bytes, h.header_bytes);
            if (status == EG_OK) eg__npy_convert(&h, raw, dst);
            free(raw);
        }
    }
    if (status != EG_OK) {
        eg_release(t);
        return status;
    }
    *out = t;
    return EG_OK;
}

eg_tensor *eg_npy_read(const char *path) {
    if (!path) {
        eg__error(EG_ERR_NULL_ARGUMENT, "npy_read: path is NULL");
        return NULL;
    }
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        eg__error(EG_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    eg_tensor *t = NULL;
    read_npy(path, fd, &t);
    close(fd);
    return t;
}

/* ---- writing ---- */

eg_status eg_npy_write(const char *path, const eg_tensor *t) {
    if (!path) return eg__error(EG_ERR_NULL_ARGUMENT, "npy_write: path is NULL");
    if (!t) return eg__error(EG_ERR_NULL_ARGUMENT, "%s: npy_write: tensor is NULL", path);
    const char *descr = NULL;
    switch (eg_tensor_dtype(t)) {
    case EG_DTYPE_F32:
        descr = "<f4";
        break;
    case EG_DTYPE_F64:
        descr = "<f8";
        break;
    case EG_DTYPE_F16:
        descr = "<f2";
        break;
    case EG_DTYPE_I32:
        descr = "<i4";
        break;
    case EG_DTYPE_I64:
        descr = "<i8";
        break;
    case EG_DTYPE_U8:
        descr = "|u1";
        break;
    case EG_DTYPE_BOOL:
        descr = "|b1";
        break;
    case EG_DTYPE_I8:
        descr = "|i1";
        break;
    case EG_DTYPE_BF16:
        return eg__error(EG_ERR_UNSUPPORTED,
                         "%s: npy_write: .npy has no bfloat16 type; convert the tensor to f32 "
                         "first",
                         path);
    default:
        return eg__error(EG_ERR_INVALID_ARGUMENT, "%s: npy_write: invalid dtype", path);
    }
    /* Exactly numpy's own header: keys sorted, repr() of the values, ", " after each item, spaces
     * up to a multiple of 64 bytes (a whole 64 when already aligned) and a newline. */
    char header[512];
    int n_dims = eg_tensor_n_dims(t);
    const int64_t *shape = eg_tensor_shape(t);
    size_t used = (size_t)snprintf(header, sizeof header,
                                   "{'descr': '%s', 'fortran_order': False, 'shape': (", descr);
    for (int i = 0; i < n_dims; i++)
        used += (size_t)snprintf(header + used, sizeof header - used, i ? ", %lld" : "%lld",
                                 (long long)shape[i]);
    used +=
        (size_t)snprintf(header + used, sizeof header - used, "%s}", n_dims == 1 ? ",), " : "), ");
    size_t padding = 64 - (10 + used + 1) % 64;
    memset(header + used, ' ', padding);
    used += padding;
    header[used++] = '\n';

    uint8_t prefix[10] = {
        0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (uint8_t)(used & 0xff), (uint8_t)(used >> 8)};
    eg__atomic_file file;
    eg_status status = eg__atomic_open(&file, path);
    if (status != EG_OK) return status;
    eg__atomic_write(&file, prefix, sizeof prefix);
    eg__atomic_write(&file, header, used);
    eg__atomic_write_tensor(&file, t);
    return eg__atomic_commit(&file);
}
