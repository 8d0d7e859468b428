/* libFuzzer target for the CSV parser of the input pipeline. The first byte picks the options
 * (delimiter, header, dtype, label column); the rest is the file. Every input goes through the
 * parser in memory twice, strictly and with skip_malformed_rows, and through
 * eg_dataset_from_csv_with_info (skipping) on an in-memory file. Accepted tables are printed back,
 * each column in its own dtype, and must parse to the same values; the two modes must agree (a
 * strict success is a skipping one with nothing skipped, and kept + skipped rows are the file's
 * data lines). Seeds: tests/fuzz_corpus/csv/ (each starts with its options byte: bits 0-1
 * delimiter , ; tab |, bit 2 header, bits 3-4 dtype f32 f64 i32 i64, bit 5 label column (bits
 * 6-7: which, and its dtype)).
 *
 *   fuzz_csv -max_total_time=60 tests/fuzz_corpus/csv */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "data/csv.h"
#include "eagle/data.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_CHECK(cond)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz_csv: invariant failed: %s\n", #cond);                            \
            __builtin_trap();                                                                      \
        }                                                                                          \
    } while (0)

static const char delimiters[4] = {',', ';', '\t', '|'};
static const eg_dtype dtypes[4] = {EG_DTYPE_F32, EG_DTYPE_F64, EG_DTYPE_I32, EG_DTYPE_I64};

/* One cell of a table: exact for every dtype (i64 does not fit a double). */
typedef struct cell {
    bool integer;
    int64_t i;
    double d;
} cell;

static cell load(eg_dtype dtype, const void *values, int64_t i) {
    switch (dtype) {
    case EG_DTYPE_F32:
        return (cell){.d = ((const float *)values)[i]};
    case EG_DTYPE_F64:
        return (cell){.d = ((const double *)values)[i]};
    case EG_DTYPE_I32:
        return (cell){.integer = true, .i = ((const int32_t *)values)[i]};
    default:
        return (cell){.integer = true, .i = ((const int64_t *)values)[i]};
    }
}

/* Row r, column c of the file (the label column from t->labels). */
static cell cell_at(const eg__csv_table *t, const eg_csv_options *o, int64_t r, int64_t c) {
    int64_t label = o->label_column;
    if (c == label) return load(t->label_dtype, t->labels, r);
    int64_t features = t->columns - (label >= 0 ? 1 : 0);
    return load(t->dtype, t->values, r * features + (label >= 0 && c > label ? c - 1 : c));
}

static bool same(cell a, cell b) {
    if (a.integer != b.integer) return false;
    return a.integer ? a.i == b.i : (isnan(a.d) && isnan(b.d)) || a.d == b.d;
}

static void check_same_tables(const eg__csv_table *a, const eg__csv_table *b,
                              const eg_csv_options *o) {
    FUZZ_CHECK(a->rows == b->rows && (a->rows == 0 || a->columns == b->columns));
    for (int64_t r = 0; r < a->rows; r++)
        for (int64_t c = 0; c < a->columns; c++)
            FUZZ_CHECK(same(cell_at(a, o, r, c), cell_at(b, o, r, c)));
}

/* Prints the table with the same delimiter (exact: %.17g, %lld) and parses it again. */
static void round_trip(const eg__csv_table *t, const eg_csv_options *o) {
    size_t capacity = (size_t)(t->rows * t->columns) * 32 + 16, used = 0;
    char *text = malloc(capacity);
    FUZZ_CHECK(text != NULL);
    for (int64_t r = 0; r < t->rows; r++)
        for (int64_t c = 0; c < t->columns; c++) {
            char sep = c + 1 < t->columns ? o->delimiter : '\n';
            cell v = cell_at(t, o, r, c);
            if (v.integer)
                used +=
                    (size_t)snprintf(text + used, capacity - used, "%lld%c", (long long)v.i, sep);
            else
                used += (size_t)snprintf(text + used, capacity - used, "%.17g%c", v.d, sep);
        }
    eg_csv_options plain = *o;
    plain.header = false;
    plain.skip_malformed_rows = false;
    eg__csv_table again;
    eg_status status = eg__csv_parse(text, used, &plain, "round trip", &again);
    FUZZ_CHECK(status == EG_OK || (t->rows == 0 && status == EG_ERR_INVALID_ARGUMENT));
    if (status == EG_OK)
        check_same_tables(t, &again, o);
    else
        eg_clear_error();
    eg__csv_table_free(&again);
    free(text);
}

/* The lines that are neither empty (spaces and tabs only) nor the header. */
static int64_t data_lines(const char *text, size_t n, bool header) {
    size_t pos = n >= 3 && memcmp(text, "\xEF\xBB\xBF", 3) == 0 ? 3 : 0;
    int64_t count = 0;
    while (pos < n) {
        const char *begin = text + pos;
        const char *newline = memchr(begin, '\n', n - pos);
        size_t length = newline ? (size_t)(newline - begin) : n - pos;
        pos += length + (newline ? 1 : 0);
        if (length > 0 && begin[length - 1] == '\r') length--;
        bool blank = true;
        for (size_t i = 0; i < length && blank; i++) blank = begin[i] == ' ' || begin[i] == '\t';
        count += !blank;
    }
    return header && count > 0 ? count - 1 : count;
}

/* Parses and checks what any outcome must satisfy; *t is the table on success. */
static eg_status parse(const char *text, size_t n, const eg_csv_options *o, eg__csv_table *t) {
    eg_clear_error();
    eg_status status = eg__csv_parse(text, n, o, "fuzz.csv", t);
    if (status != EG_OK) {
        FUZZ_CHECK(status == EG_ERR_FORMAT || status == EG_ERR_OUT_OF_MEMORY ||
                   (status == EG_ERR_INVALID_ARGUMENT && o->label_column >= 0));
        FUZZ_CHECK(eg_last_status() == status);
        FUZZ_CHECK(strncmp(eg_last_error(), "fuzz.csv: ", 10) == 0);
        FUZZ_CHECK(t->values == NULL && t->labels == NULL && t->column_names == NULL &&
                   t->rows == 0);
        eg_clear_error();
        return status;
    }
    FUZZ_CHECK(eg_last_status() == EG_OK);
    FUZZ_CHECK(t->rows >= 0 && t->columns >= 0 && t->skipped_rows >= 0);
    FUZZ_CHECK(t->rows == 0 || t->columns >= 1);
    FUZZ_CHECK((size_t)(t->rows * t->columns) <= n); /* every value takes a byte at least */
    FUZZ_CHECK(o->label_column < t->columns || (t->columns == 0 && o->label_column < 0));
    FUZZ_CHECK(t->labels == NULL || o->label_column >= 0);
    FUZZ_CHECK(t->labels != NULL || o->label_column < 0 || t->rows == 0);
    FUZZ_CHECK((t->skipped_rows == 0) == (t->first_skipped_line == 0));
    FUZZ_CHECK(o->skip_malformed_rows || t->skipped_rows == 0);
    FUZZ_CHECK(t->column_names == NULL || o->header);
    FUZZ_CHECK(!o->header || t->columns == 0 || t->column_names != NULL);
    size_t name_bytes = 0;
    for (int64_t c = 0; t->column_names && c < t->columns; c++)
        name_bytes += strlen(t->column_names[c]);
    FUZZ_CHECK(name_bytes <= n);
    if (o->skip_malformed_rows)
        FUZZ_CHECK(t->rows + t->skipped_rows == data_lines(text, n, o->header));
    round_trip(t, o);
    return EG_OK;
}

/* Through the file reader, skipping malformed rows: as many rows as the parser kept. */
static void read_as_dataset(const char *text, size_t n, const eg_csv_options *o, eg_status parsed,
                            const eg__csv_table *table) {
    int fd = memfd_create("fuzz_csv", MFD_CLOEXEC);
    if (fd < 0) return;
    size_t written = 0;
    while (written < n) {
        ssize_t w = write(fd, text + written, n - written);
        if (w <= 0) break;
        written += (size_t)w;
    }
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    eg_clear_error();
    eg_csv_info info;
    eg_dataset *ds = eg_dataset_from_csv_with_info(path, o, &info);
    if (ds) {
        FUZZ_CHECK(parsed == EG_OK && info.rows == table->rows &&
                   info.skipped_rows == table->skipped_rows && info.columns == table->columns);
        ds = eg_dataset_batch(ds, 3, false);
        eg_dataset_iterator *it = eg_dataset_iterator_new(ds);
        FUZZ_CHECK(it != NULL);
        int64_t rows = 0;
        for (;;) {
            eg_element e;
            bool end;
            FUZZ_CHECK(eg_dataset_iterator_next(it, &e, &end) == EG_OK);
            if (end) break;
            FUZZ_CHECK(e.n_tensors == (o->label_column >= 0 ? 2 : 1));
            rows += eg_tensor_shape(e.tensors[0])[0];
            eg_element_release(&e);
        }
        FUZZ_CHECK(rows == info.rows);
        eg_dataset_iterator_free(it);
        eg_dataset_free(ds);
        eg_csv_info_free(&info);
    } else {
        eg_status status = eg_last_status();
        FUZZ_CHECK(status == parsed || status == EG_ERR_OUT_OF_MEMORY);
        FUZZ_CHECK(info.rows == 0 && info.column_names == NULL);
    }
    close(fd);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0) return 0;
    uint8_t selector = data[0];
    eg_csv_options o = eg_csv_options_default();
    o.delimiter = delimiters[selector & 3];
    o.header = (selector >> 2) & 1;
    o.dtype = dtypes[(selector >> 3) & 3];
    o.label_column = (selector >> 5) & 1 ? (int)(selector >> 6) : -1;
    o.label_dtype = dtypes[(selector >> 6) & 3];
    const char *text = (const char *)data + 1;
    size_t n = size - 1;
    eg__csv_table strict, skipping;
    eg_status strict_status = parse(text, n, &o, &strict);
    o.skip_malformed_rows = true;
    eg_status skipping_status = parse(text, n, &o, &skipping);
    if (strict_status == EG_OK) {
        FUZZ_CHECK(skipping_status == EG_OK && skipping.skipped_rows == 0);
        check_same_tables(&strict, &skipping, &o);
    } else if (skipping_status == EG_OK) {
        FUZZ_CHECK(strict_status == EG_ERR_FORMAT && skipping.skipped_rows > 0);
    }
    read_as_dataset(text, n, &o, skipping_status, &skipping);
    eg__csv_table_free(&strict);
    eg__csv_table_free(&skipping);
    eg_clear_error();
    return 0;
}
