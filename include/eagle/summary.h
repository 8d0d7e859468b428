/* Eagle — TensorBoard summaries: event files that TensorBoard (and tf.compat.v1.train.
 * summary_iterator, tf.data.TFRecordDataset, ...) read, written without TensorFlow.
 *
 * Usage (one writer per run directory; point TensorBoard at the parent: tensorboard --logdir=runs):
 *     eg_summary_writer *w = eg_summary_writer_new("runs/adam-64");
 *     for (...) eg_summary_scalar(w, "train/loss", step, loss);      // each step
 *     eg_summary_histogram(w, "dense/kernel", epoch, kernel);         // each epoch
 *     eg_summary_flush(w);                                            // each epoch
 *     eg_summary_writer_free(w);
 *
 * File format, as TensorFlow's EventsWriter writes it:
 *   - name "<logdir>/events.out.tfevents.<unix time, 10 digits>.<hostname>.<pid>.eagle" (when a
 *     file of that name already exists: "...<pid>.<n>.eagle", n = 1, 2, ...); TensorBoard picks
 *     up every file whose name contains "tfevents".
 *   - a sequence of TFRecords: uint64 length (little-endian), uint32 masked CRC-32C of those 8
 *     bytes, the data, uint32 masked CRC-32C of the data; each record's data is one serialized
 *     tensorflow.Event protobuf.
 *   - the first event carries file_version "brain.Event:2" and the wall time; every later one
 *     carries the wall time (seconds since the epoch, microsecond resolution), the step and a
 *     Summary with one Value: simple_value (a float) for scalars, a HistogramProto for
 *     histograms.
 *
 * Records are buffered in memory and reach the file when the buffer fills, at eg_summary_flush()
 * and at eg_summary_writer_free(). A writer may be used from several threads at once (records
 * are never interleaved). Writing is append-only: after a failed write (a full disk) the file may
 * end in a partial record, so the writer refuses further records and every later call returns
 * EG_ERR_IO. */
#ifndef EAGLE_SUMMARY_H
#define EAGLE_SUMMARY_H

#include <stdint.h>

#include "eagle/status.h"
#include "eagle/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* An open event file. Opaque; free with eg_summary_writer_free(). */
typedef struct eg_summary_writer eg_summary_writer;

/* Creates logdir when it does not exist (with missing parents, like mkdir -p, mode 0777 minus
 * the umask), creates a new event file in it (named as at the top of this file; an existing file
 * is never overwritten or appended to) and writes and flushes the file_version event, so the
 * file is a valid (empty) event file at once.
 * Returns a writer the caller owns, or NULL with an error:
 *   EG_ERR_NULL_ARGUMENT (logdir NULL), EG_ERR_INVALID_ARGUMENT (logdir empty), EG_ERR_IO (a
 *   component of logdir cannot be created or is not a directory, the file cannot be created or
 *   written; the message names the path and the system's reason), EG_ERR_OUT_OF_MEMORY. */
eg_summary_writer *eg_summary_writer_new(const char *logdir);

/* The path of the event file ("<logdir>/events.out.tfevents...."), valid until the writer is
 * freed. NULL with an error (EG_ERR_NULL_ARGUMENT) when w is NULL. */
const char *eg_summary_writer_path(const eg_summary_writer *w);

/* Appends a scalar event: tag, step, value (stored as a float, as TensorBoard's simple_value is;
 * doubles beyond the float range become +-infinity; NaN and infinities are written as they are).
 * tag must be non-empty, well-formed UTF-8 (protobuf requires it; TensorBoard groups tags by the
 * part before the first '/', e.g. "train/loss"); any int64 step is accepted.
 * Returns EG_OK, or EG_ERR_NULL_ARGUMENT (w or tag NULL), EG_ERR_INVALID_ARGUMENT (tag empty or
 * not UTF-8), EG_ERR_IO (a write failed now or earlier), EG_ERR_OUT_OF_MEMORY. */
eg_status eg_summary_scalar(eg_summary_writer *w, const char *tag, int64_t step, double value);

/* Appends a histogram of values' elements (any dtype, shape, layout and device; values is
 * borrowed) as TensorFlow's HistogramProto: min, max, num (element count), sum, sum_squares
 * (of the values converted to double), and the counts in TensorFlow's default buckets — the
 * same ones tf.compat.v1.summary.histogram uses: bucket edges 0, +-1e-12 * 1.1^k for k = 0, 1, ...
 * up to 1e20, and +-DBL_MAX (1551 edges). Bucket i counts the values v with
 * edge[i-1] <= v < edge[i]; bucket_limit holds the right edges. As TensorFlow does, runs of empty
 * buckets are merged into the non-empty bucket before them and empty buckets are left out, so
 * only the occupied ranges are stored.
 * Like TensorFlow, refuses (writes nothing) when values is empty or holds NaN or an infinity:
 * EG_ERR_INVALID_ARGUMENT naming the tag and how many values are not finite. Other errors as
 * eg_summary_scalar (EG_ERR_NULL_ARGUMENT also for values NULL), or the error of reading values
 * from its device. */
eg_status eg_summary_histogram(eg_summary_writer *w, const char *tag, int64_t step,
                               const eg_tensor *values);

/* Writes the buffered records to the file and fsyncs it, so that TensorBoard sees everything
 * written so far (call it once per epoch, or every few seconds). Returns EG_OK,
 * EG_ERR_NULL_ARGUMENT, or EG_ERR_IO naming the file and the reason (also when an earlier write
 * failed). */
eg_status eg_summary_flush(eg_summary_writer *w);

/* Flushes (as eg_summary_flush), closes the file and frees the writer. A failure to flush or
 * close cannot be returned: it is raised as the thread's error (EG_ERR_IO; see eg_last_error()),
 * so call eg_summary_flush() first when it matters. NULL is ignored. */
void eg_summary_writer_free(eg_summary_writer *w);

#if !defined(EG_NO_CALLSITE)
#define eg_summary_writer_new(...)  EG_CALLSITE_(eg_summary_writer_new(__VA_ARGS__))
#define eg_summary_writer_path(...) EG_CALLSITE_(eg_summary_writer_path(__VA_ARGS__))
#define eg_summary_scalar(...)      EG_CALLSITE_(eg_summary_scalar(__VA_ARGS__))
#define eg_summary_histogram(...)   EG_CALLSITE_(eg_summary_histogram(__VA_ARGS__))
#define eg_summary_flush(...)       EG_CALLSITE_(eg_summary_flush(__VA_ARGS__))
#define eg_summary_writer_free(...) EG_CALLSITE_(eg_summary_writer_free(__VA_ARGS__))
#endif

#ifdef __cplusplus
}
#endif
#endif
