/* CSV files of numbers: a small strict parser (fuzzed by fuzz/fuzz_csv.c) and eg_csv_read. The
 * accepted format and every error message are described in include/eagle/data.h.
 *
 * Input is never trusted: the parser reads only inside [text, text + n), the number of values it
 * stores is bounded by n (every field takes at least one byte), and every malformed line gives
 * EG_ERR_FORMAT naming the line and the column. */

#ifndef EG_NO_CALLSITE
#define EG_NO_CALLSITE
#endif

#include <ctype.h>
#include <errno.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "data/csv.h"

eg_csv_options eg_csv_options_default(void) {
    return (eg_csv_options){.delimiter = ',',
                            .header = false,
                            .dtype = EG_DTYPE_F32,
                            .label_column = -1,
                            .label_dtype = EG_DTYPE_I64};
}

static bool csv_dtype_ok(eg_dtype dtype) {
    return dtype == EG_DTYPE_F32 || dtype == EG_DTYPE_F64 || dtype == EG_DTYPE_I32 ||
           dtype == EG_DTYPE_I64;
}

eg_status eg__csv_check_options(const eg_csv_options *o, const char *name) {
    char d = o->delimiter;
    if (d && (d == '"' || d == '\n' || d == '\r' || d == ' ' || d == '.' || d == '+' || d == '-' ||
              (d >= '0' && d <= '9') || (d >= 'a' && d <= 'z') || (d >= 'A' && d <= 'Z')))
        return eg__error(EG_ERR_INVALID_ARGUMENT,
                         "%s: delimiter '%c' is not allowed (it could be part of a number, a quote "
                         "or a line break)",
                         name, d);
    if (!csv_dtype_ok(o->dtype))
        return eg__error(EG_ERR_INVALID_ARGUMENT,
                         "%s: dtype %s is not supported (f32, f64, i32, i64)", name,
                         eg_dtype_name(o->dtype));
    if (o->label_column >= 0 && !csv_dtype_ok(o->label_dtype))
        return eg__error(EG_ERR_INVALID_ARGUMENT,
                         "%s: label_dtype %s is not supported (f32, f64, i32, i64)", name,
                         eg_dtype_name(o->label_dtype));
    if (o->label_column < -1)
        return eg__error(EG_ERR_INVALID_ARGUMENT, "%s: label_column is %d (-1 or a column)", name,
                         o->label_column);
    return EG_OK;
}

/* ---- parsing ---- */

typedef struct field {
    const char *text;
    size_t length;
} field;

typedef struct parser {
    const char *name;
    char delimiter;
    eg_dtype dtype;
    size_t elem_size;
    long long line;
    field *fields;
    size_t n_fields, fields_capacity;
    uint8_t *values;
    size_t n_values, values_capacity;
} parser;

/* `text` as it may appear in a message: at most 40 bytes, non-printable bytes as \xNN. */
static void quote_for_message(const char *text, size_t length, char *out, size_t out_size) {
    size_t used = 0;
    for (size_t i = 0; i < length && used + 8 < out_size; i++) {
        unsigned char c = (unsigned char)text[i];
        if (i == 40) {
            used += (size_t)snprintf(out + used, out_size - used, "...");
            break;
        }
        if (c >= 0x20 && c < 0x7f && c != '"')
            out[used++] = (char)c;
        else
            used += (size_t)snprintf(out + used, out_size - used, "\\x%02x", c);
    }
    out[used] = '\0';
}

static bool is_blank(char c, char delimiter) {
    return c == ' ' || (c == '\t' && delimiter != '\t');
}

static eg_status push_field(parser *p, const char *text, size_t length) {
    if (p->n_fields == p->fields_capacity) {
        size_t capacity = p->fields_capacity ? 2 * p->fields_capacity : 16;
        field *fields = realloc(p->fields, capacity * sizeof *fields);
        if (!fields) return eg__error(EG_ERR_OUT_OF_MEMORY, "%s: out of host memory", p->name);
        p->fields = fields;
        p->fields_capacity = capacity;
    }
    p->fields[p->n_fields++] = (field){text, length};
    return EG_OK;
}

/* Splits line [begin, end) (no line break) into p->fields. */
static eg_status split_line(parser *p, const char *begin, const char *end) {
    p->n_fields = 0;
    const char *s = begin;
    for (;;) {
        int column = (int)p->n_fields + 1;
        while (s < end && is_blank(*s, p->delimiter)) s++;
        const char *text, *text_end;
        if (s < end && *s == '"') {
            text = s + 1;
            text_end = memchr(text, '"', (size_t)(end - text));
            if (!text_end)
                return eg__error(EG_ERR_FORMAT, "%s: line %lld, column %d: unterminated quote",
                                 p->name, p->line, column);
            s = text_end + 1;
            while (s < end && is_blank(*s, p->delimiter)) s++;
            if (s < end && *s != p->delimiter)
                return eg__error(EG_ERR_FORMAT,
                                 "%s: line %lld, column %d: unexpected text after the closing "
                                 "quote",
                                 p->name, p->line, column);
        } else {
            text = s;
            while (s < end && *s != p->delimiter) s++;
            text_end = s;
            while (text_end > text && is_blank(text_end[-1], p->delimiter)) text_end--;
        }
        eg_status status = push_field(p, text, (size_t)(text_end - text));
        if (status != EG_OK) return status;
        if (s >= end) return EG_OK;
        s++; /* the delimiter: another field follows, maybe empty */
    }
}

/* Parses field f (column from 1) into dst, a value of p->dtype. */
static eg_status parse_value(const parser *p, int column, const field *f, void *dst) {
    if (f->length == 0)
        return eg__error(EG_ERR_FORMAT, "%s: line %lld, column %d: empty field", p->name, p->line,
                         column);
    char buf[256];
    char shown[200];
    const char *type = eg_dtype_name(p->dtype);
    if (f->length >= sizeof buf) {
        quote_for_message(f->text, f->length, shown, sizeof shown);
        return eg__error(EG_ERR_FORMAT,
                         "%s: line %lld, column %d: cannot parse \"%s\" as %s (%zu characters)",
                         p->name, p->line, column, shown, type, f->length);
    }
    memcpy(buf, f->text, f->length);
    buf[f->length] = '\0';
    quote_for_message(f->text, f->length, shown, sizeof shown);
    char *end;
    if (p->dtype == EG_DTYPE_F32 || p->dtype == EG_DTYPE_F64) {
        errno = 0;
        double value = strtod(buf, &end);
        if (end == buf || *end != '\0' || isspace((unsigned char)buf[0]))
            return eg__error(EG_ERR_FORMAT, "%s: line %lld, column %d: cannot parse \"%s\" as %s",
                             p->name, p->line, column, shown, type);
        bool overflow = errno == ERANGE && isinf(value);
        if (p->dtype == EG_DTYPE_F32) {
            float single = (float)value;
            overflow = overflow || (isinf(single) && !isinf(value));
            if (!overflow) memcpy(dst, &single, sizeof single);
        } else if (!overflow) {
            memcpy(dst, &value, sizeof value);
        }
        if (overflow)
            return eg__error(EG_ERR_FORMAT, "%s: line %lld, column %d: %s is out of range for %s",
                             p->name, p->line, column, shown, type);
        return EG_OK;
    }
    errno = 0;
    long long value = strtoll(buf, &end, 10);
    if (end == buf || *end != '\0' || isspace((unsigned char)buf[0])) {
        /* A number, but not an integer? Say so rather than "cannot parse". */
        char *float_end;
        (void)strtod(buf, &float_end);
        if (float_end != buf && *float_end == '\0' && !isspace((unsigned char)buf[0]))
            return eg__error(EG_ERR_FORMAT, "%s: line %lld, column %d: %s is not an integer (%s)",
                             p->name, p->line, column, shown, type);
        return eg__error(EG_ERR_FORMAT, "%s: line %lld, column %d: cannot parse \"%s\" as %s",
                         p->name, p->line, column, shown, type);
    }
    if (errno == ERANGE || (p->dtype == EG_DTYPE_I32 && (value < INT32_MIN || value > INT32_MAX)))
        return eg__error(EG_ERR_FORMAT, "%s: line %lld, column %d: %s is out of range for %s",
                         p->name, p->line, column, shown, type);
    if (p->dtype == EG_DTYPE_I32) {
        int32_t v32 = (int32_t)value;
        memcpy(dst, &v32, sizeof v32);
    } else {
        int64_t v64 = value;
        memcpy(dst, &v64, sizeof v64);
    }
    return EG_OK;
}

static eg_status reserve_values(parser *p, size_t more) {
    if (p->n_values + more <= p->values_capacity) return EG_OK;
    size_t capacity = p->values_capacity ? p->values_capacity : 256;
    while (capacity < p->n_values + more) capacity *= 2;
    uint8_t *values = realloc(p->values, capacity * p->elem_size);
    if (!values) return eg__error(EG_ERR_OUT_OF_MEMORY, "%s: out of host memory", p->name);
    p->values = values;
    p->values_capacity = capacity;
    return EG_OK;
}

eg_status eg__csv_parse(const char *text, size_t n, const eg_csv_options *options,
                        const char *name_for_errors, eg__csv_table *out) {
    const char *name = name_for_errors ? name_for_errors : "CSV data";
    memset(out, 0, sizeof *out);
    eg_csv_options o = options ? *options : eg_csv_options_default();
    if (!o.delimiter) o.delimiter = ',';
    eg_status status = eg__csv_check_options(&o, name);
    if (status != EG_OK) return status;
    if (!text && n > 0) return eg__error(EG_ERR_NULL_ARGUMENT, "%s: text is NULL", name);

    parser p = {.name = name,
                .delimiter = o.delimiter,
                .dtype = o.dtype,
                .elem_size = eg_dtype_size(o.dtype)};
    size_t pos = 0;
    if (n >= 3 && memcmp(text, "\xEF\xBB\xBF", 3) == 0) pos = 3;
    bool header_pending = o.header;
    long long columns = -1, columns_line = 0, rows = 0;
    while (pos < n && status == EG_OK) {
        p.line++;
        const char *begin = text + pos;
        const char *newline = memchr(begin, '\n', n - pos);
        size_t length = newline ? (size_t)(newline - begin) : n - pos;
        pos += length + (newline ? 1 : 0);
        if (length > 0 && begin[length - 1] == '\r') length--;
        const char *end = begin + length;
        if (memchr(begin, '\0', length)) {
            status = eg__error(EG_ERR_FORMAT, "%s: line %lld: NUL byte", name, p.line);
            break;
        }
        const char *s = begin;
        while (s < end && (*s == ' ' || *s == '\t')) s++;
        if (s == end) continue; /* an empty line */
        if ((status = split_line(&p, begin, end)) != EG_OK) break;
        if (columns < 0) {
            columns = (long long)p.n_fields;
            columns_line = p.line;
        } else if ((long long)p.n_fields != columns) {
            status = eg__error(
                EG_ERR_FORMAT, "%s: line %lld: %zu field%s, expected %lld (as on line %lld)", name,
                p.line, p.n_fields, p.n_fields == 1 ? "" : "s", columns, columns_line);
            break;
        }
        if (header_pending) {
            header_pending = false;
            continue;
        }
        if ((status = reserve_values(&p, p.n_fields)) != EG_OK) break;
        for (size_t i = 0; i < p.n_fields && status == EG_OK; i++)
            status = parse_value(&p, (int)i + 1, &p.fields[i],
                                 p.values + (p.n_values + i) * p.elem_size);
        if (status != EG_OK) break;
        p.n_values += p.n_fields;
        rows++;
    }
    free(p.fields);
    if (status != EG_OK) {
        free(p.values);
        return status;
    }
    out->values = p.values;
    out->rows = rows;
    out->columns = columns < 0 ? 0 : columns;
    out->dtype = o.dtype;
    return EG_OK;
}

/* ---- files ---- */

/* The whole file in a malloc'd buffer. */
static eg_status read_file(const char *path, char **bytes, size_t *n) {
    *bytes = NULL;
    *n = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return eg__error(EG_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fileno(f), &st) == 0 && S_ISDIR(st.st_mode)) {
        fclose(f);
        return eg__error(EG_ERR_IO, "%s: is a directory, not a CSV file", path);
    }
    size_t capacity = 1 << 16, used = 0;
    char *buffer = malloc(capacity);
    for (;;) {
        if (!buffer) {
            fclose(f);
            return eg__error(EG_ERR_OUT_OF_MEMORY, "%s: out of host memory reading the file", path);
        }
        used += fread(buffer + used, 1, capacity - used, f);
        if (used < capacity) break;
        if (capacity >= EG__CSV_MAX_BYTES) {
            free(buffer);
            fclose(f);
            return eg__error(EG_ERR_FORMAT,
                             "%s: larger than %zu bytes, the most a CSV file may hold", path,
                             (size_t)EG__CSV_MAX_BYTES);
        }
        capacity *= 2;
        char *bigger = realloc(buffer, capacity);
        if (!bigger) free(buffer);
        buffer = bigger;
    }
    bool failed = ferror(f);
    int saved = errno;
    fclose(f);
    if (failed) {
        free(buffer);
        return eg__error(EG_ERR_IO, "%s: cannot read: %s", path, strerror(saved));
    }
    *bytes = buffer;
    *n = used;
    return EG_OK;
}

eg_tensor *eg_csv_read(const char *path, const eg_csv_options *options) {
    if (!path) {
        eg__error(EG_ERR_NULL_ARGUMENT, "csv_read: path is NULL");
        return NULL;
    }
    eg_csv_options o = options ? *options : eg_csv_options_default();
    o.label_column = -1; /* not this function's business */
    if (!o.delimiter) o.delimiter = ',';
    if (eg__csv_check_options(&o, path) != EG_OK) return NULL;
    char *bytes;
    size_t n;
    if (read_file(path, &bytes, &n) != EG_OK) return NULL;
    eg__csv_table table;
    eg_status status = eg__csv_parse(bytes, n, &o, path, &table);
    free(bytes);
    if (status != EG_OK) return NULL;
    int64_t shape[2] = {table.rows, table.columns};
    eg_tensor *t = eg__tensor_alloc(o.dtype, 2, shape, eg_device_cpu());
    if (t && table.rows * table.columns > 0)
        memcpy(eg__data(t), table.values,
               (size_t)(table.rows * table.columns) * eg_dtype_size(o.dtype));
    free(table.values);
    return t;
}
