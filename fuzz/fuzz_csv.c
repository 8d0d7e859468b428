/* libFuzzer target for the CSV parser of the input pipeline. The first byte picks the options
 * (delimiter, header, dtype); the rest is the file. Every input goes through the parser in memory
 * and through eg_dataset_from_csv on an in-memory file; accepted tables are printed back and must
 * parse to the same values. Seeds: tests/fuzz_corpus/csv/ (each starts with its options byte:
 * bits 0-1 delimiter , ; tab |, bit 2 header, bits 3-4 dtype f32 f64 i32 i64, bit 5 label column
 * (bits 6-7: which, and its dtype)).
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

static double value_at(const eg__csv_table *t, int64_t i) {
    switch (t->dtype) {
    case EG_DTYPE_F32:
        return ((const float *)t->values)[i];
    case EG_DTYPE_F64:
        return ((const double *)t->values)[i];
    case EG_DTYPE_I32:
        return ((const int32_t *)t->values)[i];
    default:
        return (double)((const int64_t *)t->values)[i];
    }
}

/* Prints the table with the same delimiter (exact: %.17g, %lld) and parses it again. */
static void round_trip(const eg__csv_table *t, const eg_csv_options *o) {
    size_t capacity = (size_t)(t->rows * t->columns) * 32 + 16, used = 0;
    char *text = malloc(capacity);
    FUZZ_CHECK(text != NULL);
    for (int64_t r = 0; r < t->rows; r++)
        for (int64_t c = 0; c < t->columns; c++) {
            int64_t i = r * t->columns + c;
            char sep = c + 1 < t->columns ? o->delimiter : '\n';
            if (t->dtype == EG_DTYPE_I64)
                used += (size_t)snprintf(text + used, capacity - used, "%lld%c",
                                         (long long)((const int64_t *)t->values)[i], sep);
            else
                used +=
                    (size_t)snprintf(text + used, capacity - used, "%.17g%c", value_at(t, i), sep);
        }
    eg_csv_options plain = *o;
    plain.header = false;
    eg__csv_table again;
    eg_status status = eg__csv_parse(text, used, &plain, "round trip", &again);
    FUZZ_CHECK(status == EG_OK);
    FUZZ_CHECK(again.rows == t->rows && (t->rows == 0 || again.columns == t->columns));
    for (int64_t i = 0; i < t->rows * t->columns; i++) {
        double a = value_at(t, i), b = value_at(&again, i);
        FUZZ_CHECK((isnan(a) && isnan(b)) || a == b);
    }
    free(again.values);
    free(text);
}

static void parse(const char *text, size_t n, const eg_csv_options *o) {
    eg_clear_error();
    eg__csv_table t;
    eg_status status = eg__csv_parse(text, n, o, "fuzz.csv", &t);
    if (status != EG_OK) {
        FUZZ_CHECK(status == EG_ERR_FORMAT || status == EG_ERR_OUT_OF_MEMORY);
        FUZZ_CHECK(eg_last_status() == status);
        FUZZ_CHECK(strncmp(eg_last_error(), "fuzz.csv: ", 10) == 0);
        FUZZ_CHECK(t.values == NULL && t.rows == 0);
        return;
    }
    FUZZ_CHECK(eg_last_status() == EG_OK);
    FUZZ_CHECK(t.rows >= 0 && t.columns >= 0);
    FUZZ_CHECK(t.rows == 0 || t.columns >= 1);
    FUZZ_CHECK((size_t)(t.rows * t.columns) <= n); /* every value takes a byte at least */
    round_trip(&t, o);
    free(t.values);
}

static void read_as_dataset(const char *text, size_t n, const eg_csv_options *o) {
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
    eg_dataset *ds = eg_dataset_from_csv(path, o);
    if (ds) {
        ds = eg_dataset_batch(ds, 3, false);
        eg_dataset_iterator *it = eg_dataset_iterator_new(ds);
        FUZZ_CHECK(it != NULL);
        for (;;) {
            eg_element e;
            bool end;
            FUZZ_CHECK(eg_dataset_iterator_next(it, &e, &end) == EG_OK);
            if (end) break;
            FUZZ_CHECK(e.n_tensors == (o->label_column >= 0 ? 2 : 1));
            eg_element_release(&e);
        }
        eg_dataset_iterator_free(it);
        eg_dataset_free(ds);
    } else {
        eg_status status = eg_last_status();
        FUZZ_CHECK(status == EG_ERR_FORMAT || status == EG_ERR_INVALID_ARGUMENT ||
                   status == EG_ERR_OUT_OF_MEMORY);
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
    parse(text, n, &o);
    read_as_dataset(text, n, &o);
    eg_clear_error();
    return 0;
}
