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

/* A parsed table. Buffers are malloc'd (NULL when empty) and freed by eg__csv_table_free. */
typedef struct eg__csv_table {
    void *values;    /* rows * (columns - (labels ? 1 : 0)) values of dtype, row-major: every
                        column but the label column */
    void *labels;    /* rows values of label_dtype when a label column was asked for, else NULL */
    int64_t rows;    /* data rows kept */
    int64_t columns; /* fields per line, the label column included */
    eg_dtype dtype, label_dtype;
    int64_t skipped_rows, first_skipped_line; /* as in eg_csv_info */
    char **column_names; /* the header's, in one malloc'd block (pointers, then the names) */
} eg__csv_table;

void eg__csv_table_free(eg__csv_table *table);

/* Checks delimiter, dtype, label_dtype (when label_column >= 0) and label_column >= -1;
 * EG_ERR_INVALID_ARGUMENT naming `name` otherwise. */
eg_status eg__csv_check_options(const eg_csv_options *options, const char *name);

/* Parses n bytes of CSV text (any bytes; NUL bytes are an error) with options (NULL: defaults),
 * each column in its own dtype (the label column, when label_column >= 0, into table->labels).
 * On failure raises an error whose message starts with name_for_errors (may be NULL), returns it
 * (EG_ERR_FORMAT, EG_ERR_INVALID_ARGUMENT for bad options or a label_column outside the file,
 * EG_ERR_OUT_OF_MEMORY) and leaves *out zeroed. Never reads outside [text, text + n); text may be
 * NULL only when n is 0. */
eg_status eg__csv_parse(const char *text, size_t n, const eg_csv_options *options,
                        const char *name_for_errors, eg__csv_table *out);

/* Reads and parses the file at path (errors named by path; `caller` names the one for a NULL
 * path): *features (rows, columns) of options->dtype, or (rows, columns - 1) and *labels (rows,)
 * of label_dtype when options->label_column >= 0 (labels may be NULL only when it is -1). New
 * tensors, in the caller's scope; *info (may be NULL) filled on success, zeroed on failure. */
eg_status eg__csv_read_tensors(const char *caller, const char *path, const eg_csv_options *options,
                               eg_tensor **features, eg_tensor **labels, eg_csv_info *info);

#endif
