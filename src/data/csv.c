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
#include <stdarg.h>
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

/* A growing array of values of one dtype. */
typedef struct column_buffer {
    uint8_t *data;
    size_t count, capacity, elem_size;
} column_buffer;

typedef struct parser {
    const char *name;
    eg_csv_options options;
    long long line;
    field *fields;
    size_t n_fields, fields_capacity;
    long long columns, columns_line; /* -1 until the header or the first good row sets them */
    char **column_names;
    column_buffer values, labels;
    /* A malformed row's message (after "<name>: "), kept unraised until it is known whether the
     * row is skipped. */
    char message[EG_ERROR_MESSAGE_SIZE];
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

/* Records a malformed row's message: "line L[, column C[ (name)]]: ..." (column 0: none).
 * Returns EG_ERR_FORMAT; nothing is raised yet. */
static eg_status __attribute__((format(printf, 3, 4)))
row_error(parser *p, int column, const char *fmt, ...) {
    int used = snprintf(p->message, sizeof p->message, "line %lld", p->line);
    if (column > 0) {
        used +=
            snprintf(p->message + used, sizeof p->message - (size_t)used, ", column %d", column);
        const char *name =
            p->column_names && column <= p->columns ? p->column_names[column - 1] : "";
        if (name[0]) {
            char shown[200];
            quote_for_message(name, strlen(name), shown, sizeof shown);
            used += snprintf(p->message + used, sizeof p->message - (size_t)used, " (%s)", shown);
        }
    }
    used += snprintf(p->message + used, sizeof p->message - (size_t)used, ": ");
    va_list args;
    va_start(args, fmt);
    vsnprintf(p->message + used, sizeof p->message - (size_t)used, fmt, args);
    va_end(args);
    return EG_ERR_FORMAT;
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

/* Splits line [begin, end) (no line break) into p->fields. EG_ERR_FORMAT: see row_error. */
static eg_status split_line(parser *p, const char *begin, const char *end) {
    p->n_fields = 0;
    const char *s = begin;
    char delimiter = p->options.delimiter;
    for (;;) {
        int column = (int)p->n_fields + 1;
        while (s < end && is_blank(*s, delimiter)) s++;
        const char *text, *text_end;
        if (s < end && *s == '"') {
            text = s + 1;
            text_end = memchr(text, '"', (size_t)(end - text));
            if (!text_end) return row_error(p, column, "unterminated quote");
            s = text_end + 1;
            while (s < end && is_blank(*s, delimiter)) s++;
            if (s < end && *s != delimiter)
                return row_error(p, column, "unexpected text after the closing quote");
        } else {
            text = s;
            while (s < end && *s != delimiter) s++;
            text_end = s;
            while (text_end > text && is_blank(text_end[-1], delimiter)) text_end--;
        }
        eg_status status = push_field(p, text, (size_t)(text_end - text));
        if (status != EG_OK) return status;
        if (s >= end) return EG_OK;
        s++; /* the delimiter: another field follows, maybe empty */
    }
}

/* Whether buf (no leading space) is a whole number as strtod reads them. */
static bool is_float_text(const char *buf) {
    char *end;
    (void)strtod(buf, &end);
    return end != buf && *end == '\0';
}

typedef enum value_problem { CANNOT_PARSE, TOO_LONG, OUT_OF_RANGE, NOT_AN_INTEGER } value_problem;

/* row_error for field f, the text shown only now (the common case of a good value never pays for
 * it). */
static eg_status value_error(parser *p, int column, const field *f, eg_dtype dtype,
                             value_problem problem) {
    char shown[200];
    quote_for_message(f->text, f->length, shown, sizeof shown);
    const char *type = eg_dtype_name(dtype);
    switch (problem) {
    case TOO_LONG:
        return row_error(p, column, "cannot parse \"%s\" as %s (%zu characters)", shown, type,
                         f->length);
    case OUT_OF_RANGE:
        return row_error(p, column, "%s is out of range for %s", shown, type);
    case NOT_AN_INTEGER:
        return row_error(p, column, "%s is not an integer (%s)", shown, type);
    default:
        return row_error(p, column, "cannot parse \"%s\" as %s", shown, type);
    }
}

/* Parses field f (column from 1) straight into dst, a value of dtype. EG_ERR_FORMAT: see
 * row_error. */
static eg_status parse_value(parser *p, int column, const field *f, eg_dtype dtype, void *dst) {
    if (f->length == 0) return row_error(p, column, "empty field");
    char buf[256];
    if (f->length >= sizeof buf) return value_error(p, column, f, dtype, TOO_LONG);
    memcpy(buf, f->text, f->length);
    buf[f->length] = '\0';
    if (isspace((unsigned char)buf[0])) return value_error(p, column, f, dtype, CANNOT_PARSE);
    char *end;
    errno = 0;
    switch (dtype) {
    case EG_DTYPE_F32: {
        float value = strtof(buf, &end);
        if (end == buf || *end != '\0') return value_error(p, column, f, dtype, CANNOT_PARSE);
        if (errno == ERANGE && isinf(value)) return value_error(p, column, f, dtype, OUT_OF_RANGE);
        memcpy(dst, &value, sizeof value);
        return EG_OK;
    }
    case EG_DTYPE_F64: {
        double value = strtod(buf, &end);
        if (end == buf || *end != '\0') return value_error(p, column, f, dtype, CANNOT_PARSE);
        if (errno == ERANGE && isinf(value)) return value_error(p, column, f, dtype, OUT_OF_RANGE);
        memcpy(dst, &value, sizeof value);
        return EG_OK;
    }
    default: {
        long long value = strtoll(buf, &end, 10);
        /* A number, but not an integer? Say so rather than "cannot parse". */
        if (end == buf || *end != '\0')
            return value_error(p, column, f, dtype,
                               is_float_text(buf) ? NOT_AN_INTEGER : CANNOT_PARSE);
        if (errno == ERANGE || (dtype == EG_DTYPE_I32 && (value < INT32_MIN || value > INT32_MAX)))
            return value_error(p, column, f, dtype, OUT_OF_RANGE);
        if (dtype == EG_DTYPE_I32) {
            int32_t v32 = (int32_t)value;
            memcpy(dst, &v32, sizeof v32);
        } else {
            int64_t v64 = value;
            memcpy(dst, &v64, sizeof v64);
        }
        return EG_OK;
    }
    }
}

/* Room for `more` values after the ones kept. */
static eg_status reserve(parser *p, column_buffer *b, size_t more) {
    if (b->count + more <= b->capacity) return EG_OK;
    size_t capacity = b->capacity ? b->capacity : 256;
    while (capacity < b->count + more) capacity *= 2;
    uint8_t *data = realloc(b->data, capacity * b->elem_size);
    if (!data) return eg__error(EG_ERR_OUT_OF_MEMORY, "%s: out of host memory", p->name);
    b->data = data;
    b->capacity = capacity;
    return EG_OK;
}

static eg_status check_label_column(const parser *p, long long columns) {
    if (p->options.label_column < columns) return EG_OK;
    return eg__error(EG_ERR_INVALID_ARGUMENT,
                     "%s: label_column is %d but the file has %lld columns", p->name,
                     p->options.label_column, columns);
}

/* The header's fields as names: one block, the pointers first. */
static eg_status keep_header(parser *p) {
    size_t bytes = p->n_fields * sizeof(char *);
    for (size_t i = 0; i < p->n_fields; i++) bytes += p->fields[i].length + 1;
    char **names = malloc(bytes);
    if (!names) return eg__error(EG_ERR_OUT_OF_MEMORY, "%s: out of host memory", p->name);
    char *text = (char *)(names + p->n_fields);
    for (size_t i = 0; i < p->n_fields; i++) {
        names[i] = text;
        memcpy(text, p->fields[i].text, p->fields[i].length);
        text[p->fields[i].length] = '\0';
        text += p->fields[i].length + 1;
    }
    p->column_names = names;
    p->columns = (long long)p->n_fields;
    p->columns_line = p->line;
    return check_label_column(p, p->columns);
}

/* Parses the data row in p->fields and keeps it. EG_ERR_FORMAT (a malformed row): see row_error;
 * any other error is raised. */
static eg_status parse_row(parser *p) {
    size_t n = p->n_fields;
    if (p->columns >= 0 && (long long)n != p->columns)
        return row_error(p, 0, "%zu field%s, expected %lld (as on line %lld)", n, n == 1 ? "" : "s",
                         p->columns, p->columns_line);
    int label = p->options.label_column;
    /* This row sets the columns: a label column beyond it is the caller's mistake. */
    if (p->columns < 0 && check_label_column(p, (long long)n) != EG_OK)
        return EG_ERR_INVALID_ARGUMENT;
    eg_status status = reserve(p, &p->values, n);
    if (status == EG_OK && label >= 0) status = reserve(p, &p->labels, 1);
    if (status != EG_OK) return status;
    uint8_t *features = p->values.data + p->values.count * p->values.elem_size;
    for (size_t i = 0; i < n; i++) {
        bool is_label = (int)i == label;
        void *dst =
            is_label ? p->labels.data + p->labels.count * p->labels.elem_size
                     : features + (label >= 0 && (int)i > label ? i - 1 : i) * p->values.elem_size;
        status = parse_value(p, (int)i + 1, &p->fields[i],
                             is_label ? p->options.label_dtype : p->options.dtype, dst);
        if (status != EG_OK) return status;
    }
    p->values.count += label >= 0 ? n - 1 : n;
    if (label >= 0) p->labels.count++;
    if (p->columns < 0) {
        p->columns = (long long)n;
        p->columns_line = p->line;
    }
    return EG_OK;
}

void eg__csv_table_free(eg__csv_table *table) {
    if (!table) return;
    free(table->values);
    free(table->labels);
    free(table->column_names);
    memset(table, 0, sizeof *table);
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
                .options = o,
                .columns = -1,
                .values = {.elem_size = eg_dtype_size(o.dtype)},
                .labels = {.elem_size = o.label_column >= 0 ? eg_dtype_size(o.label_dtype) : 1}};
    size_t pos = 0;
    if (n >= 3 && memcmp(text, "\xEF\xBB\xBF", 3) == 0) pos = 3;
    bool header_pending = o.header;
    int64_t rows = 0, skipped = 0, first_skipped_line = 0;
    while (pos < n) {
        p.line++;
        const char *begin = text + pos;
        const char *newline = memchr(begin, '\n', n - pos);
        size_t length = newline ? (size_t)(newline - begin) : n - pos;
        pos += length + (newline ? 1 : 0);
        if (length > 0 && begin[length - 1] == '\r') length--;
        const char *end = begin + length;
        bool is_header = header_pending;
        if (memchr(begin, '\0', length)) {
            status = row_error(&p, 0, "NUL byte");
        } else {
            const char *s = begin;
            while (s < end && (*s == ' ' || *s == '\t')) s++;
            if (s == end) continue; /* an empty line */
            header_pending = false;
            status = split_line(&p, begin, end);
            if (status == EG_OK) status = is_header ? keep_header(&p) : parse_row(&p);
        }
        if (status == EG_ERR_FORMAT && o.skip_malformed_rows && !is_header) {
            if (skipped++ == 0) first_skipped_line = p.line;
            status = EG_OK;
            continue;
        }
        if (status == EG_ERR_FORMAT) eg__error(EG_ERR_FORMAT, "%s: %s", name, p.message);
        if (status != EG_OK) break;
        if (!is_header) rows++;
    }
    if (status == EG_OK && p.columns < 0 && o.label_column >= 0) {
        if (skipped > 0)
            status = eg__error(EG_ERR_FORMAT,
                               "%s: all %lld data rows are malformed (the first on line %lld): no "
                               "column to take the label from",
                               name, (long long)skipped, (long long)first_skipped_line);
        else
            status = check_label_column(&p, 0);
    }
    free(p.fields);
    out->values = p.values.data;
    out->labels = p.labels.data;
    out->column_names = p.column_names;
    if (status != EG_OK) {
        eg__csv_table_free(out);
        return status;
    }
    out->rows = rows;
    out->columns = p.columns < 0 ? 0 : p.columns;
    out->dtype = o.dtype;
    out->label_dtype = o.label_dtype;
    out->skipped_rows = skipped;
    out->first_skipped_line = first_skipped_line;
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

/* A new tensor holding a copy of `data` (NULL when there is none). */
static eg_tensor *tensor_from_values(eg_dtype dtype, int n_dims, const int64_t *shape,
                                     const void *data) {
    eg_tensor *t = eg__tensor_alloc(dtype, n_dims, shape, eg_device_cpu());
    int64_t count = 1;
    for (int i = 0; i < n_dims; i++) count *= shape[i];
    if (t && count > 0) memcpy(eg__data(t), data, (size_t)count * eg_dtype_size(dtype));
    return t;
}

static void fill_info(eg__csv_table *table, eg_csv_info *info) {
    if (!info) return;
    *info = (eg_csv_info){.rows = table->rows,
                          .columns = table->columns,
                          .skipped_rows = table->skipped_rows,
                          .first_skipped_line = table->first_skipped_line,
                          .column_names = table->column_names};
    table->column_names = NULL; /* handed over */
}

eg_status eg__csv_read_tensors(const char *caller, const char *path, const eg_csv_options *options,
                               eg_tensor **features, eg_tensor **labels, eg_csv_info *info) {
    if (info) memset(info, 0, sizeof *info);
    *features = NULL;
    if (labels) *labels = NULL;
    if (!path) return eg__error(EG_ERR_NULL_ARGUMENT, "%s: path is NULL", caller);
    eg_csv_options o = options ? *options : eg_csv_options_default();
    if (!o.delimiter) o.delimiter = ',';
    eg_status status = eg__csv_check_options(&o, path);
    if (status != EG_OK) return status;
    EG_ASSERT(labels || o.label_column < 0, return EG_ERR_INTERNAL);
    char *bytes;
    size_t n;
    if ((status = read_file(path, &bytes, &n)) != EG_OK) return status;
    eg__csv_table table;
    status = eg__csv_parse(bytes, n, &o, path, &table);
    free(bytes);
    if (status != EG_OK) return status;
    bool has_labels = o.label_column >= 0;
    int64_t shape[2] = {table.rows, table.columns - (has_labels ? 1 : 0)};
    *features = tensor_from_values(o.dtype, 2, shape, table.values);
    if (*features && has_labels) {
        *labels = tensor_from_values(o.label_dtype, 1, &table.rows, table.labels);
        if (!*labels) {
            eg_release(*features);
            *features = NULL;
        }
    }
    if (*features) fill_info(&table, info);
    eg__csv_table_free(&table);
    return *features ? EG_OK : eg_last_status();
}

eg_tensor *eg_csv_read_with_info(const char *path, const eg_csv_options *options,
                                 eg_csv_info *info) {
    eg_csv_options o = options ? *options : eg_csv_options_default();
    o.label_column = -1; /* not this function's business */
    eg_tensor *t;
    eg__csv_read_tensors("csv_read", path, &o, &t, NULL, info);
    return t;
}

eg_tensor *eg_csv_read(const char *path, const eg_csv_options *options) {
    return eg_csv_read_with_info(path, options, NULL);
}

void eg_csv_info_free(eg_csv_info *info) {
    if (!info) return;
    free(info->column_names);
    memset(info, 0, sizeof *info);
}
