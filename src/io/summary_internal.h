/* Internal pieces of the TensorBoard event writer (src/io/summary.c), split out so that tests can
 * check the exact bytes of an event and the histogram buckets without a clock or a file. */
#ifndef EAGLE_SRC_IO_SUMMARY_INTERNAL_H
#define EAGLE_SRC_IO_SUMMARY_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "eagle/status.h"

/* Bytes TFRecord adds around each record's data: 8 (length) + 4 (its CRC) before, 4 after. */
#define EG__TFRECORD_HEADER 12
#define EG__TFRECORD_FOOTER 4

/* A tensorflow.HistogramProto. */
typedef struct eg__summary_histogram {
    double min, max, num, sum, sum_squares;
    size_t n_buckets;     /* entries in bucket_limit and bucket (>= 1) */
    double *bucket_limit; /* right edges, ascending */
    double *bucket;       /* counts */
} eg__summary_histogram;

/* What one event holds. kind FILE_VERSION: wall_time, step and file_version; SCALAR: wall_time,
 * step, tag, simple_value; HISTOGRAM: wall_time, step, tag, histogram. */
typedef enum eg__summary_kind {
    EG__SUMMARY_FILE_VERSION,
    EG__SUMMARY_SCALAR,
    EG__SUMMARY_HISTOGRAM
} eg__summary_kind;

typedef struct eg__summary_event {
    eg__summary_kind kind;
    double wall_time;
    int64_t step;
    const char *file_version;
    const char *tag;
    float simple_value;
    const eg__summary_histogram *histogram;
} eg__summary_event;

/* One complete TFRecord (header, serialized tensorflow.Event, footer) in a new malloc'd buffer
 * the caller frees; its size in *n_bytes. Fields equal to proto3 defaults (step 0) are left out,
 * as protobuf serializers do; simple_value and the histogram's five numbers are always written.
 * NULL with EG_ERR_OUT_OF_MEMORY. */
uint8_t *eg__summary_record(const eg__summary_event *event, size_t *n_bytes);

/* TensorFlow's default histogram bucket edges (see eg_summary_histogram in summary.h): a static
 * ascending array of *n entries, ending with DBL_MAX. Thread-safe. */
const double *eg__summary_default_limits(size_t *n);

/* Fills out from n >= 1 finite values as TensorFlow's Histogram::EncodeToProto does (default
 * buckets, empty runs merged, at least one bucket). out->bucket_limit / bucket are malloc'd:
 * release with eg__summary_histogram_free. EG_ERR_OUT_OF_MEMORY (out zeroed) otherwise EG_OK. */
eg_status eg__summary_histogram_build(const double *values, size_t n, eg__summary_histogram *out);
void eg__summary_histogram_free(eg__summary_histogram *histogram);

#endif
