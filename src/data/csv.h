/* Internal: the CSV parser, split from file reading so that it can be fuzzed and tested on bytes in
 * memory (fuzz/fuzz_csv.c). */
#ifndef EAGLE_SRC_DATA_CSV_H
#define EAGLE_SRC_DATA_CSV_H

#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "core/tensor_internal.h"
#include "eagle/data.h"

/* Files larger than this are refused (the whole file is read into memory). */
#define EG__CSV_MAX_BYTES ((size_t)1 << 31)

/* A parsed table: rows * columns values of dtype, row-major, in a malloc'd buffer (NULL when
 * empty) that the caller frees. */
typedef struct eg__csv_table {
    void *values;
    int64_t rows, columns;
    eg_dtype dtype;
} eg__csv_table;

/* Checks delimiter, dtype, label_dtype (when label_column >= 0) and label_column >= -1;
 * EG_ERR_INVALID_ARGUMENT naming `name` otherwise. */
eg_status eg__csv_check_options(const eg_csv_options *options, const char *name);

/* Parses n bytes of CSV text (any bytes; NUL bytes are an error) with options (NULL: defaults;
 * label_column is ignored). On failure raises an error whose message starts with
 * name_for_errors (may be NULL), returns it and leaves *out zeroed. Never reads outside
 * [text, text + n); text may be NULL only when n is 0. */
eg_status eg__csv_parse(const char *text, size_t n, const eg_csv_options *options,
                        const char *name_for_errors, eg__csv_table *out);

#endif
