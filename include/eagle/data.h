/* Eagle — input pipelines: a tf.data-like Dataset with parallel map, shuffle, batch, prefetch and
 * AUTOTUNE.
 *
 * A dataset describes a sequence of ELEMENTS; an element is a small tuple of tensors, e.g.
 * (image, label). Datasets are built from a source (tensors sliced along their first axis, a
 * range, IDX / MNIST, CSV or .npy files, a generator callback, windows of token ids, sequences of
 * varying length) and transformations (map, filter, shuffle, batch, padded_batch,
 * bucket_by_sequence_length, unbatch, repeat, take, skip, cache, prefetch, zip, interleave).
 * Nothing runs until an ITERATOR walks the dataset; each iterator is one pass (an epoch):
 *
 *     eg_dataset *ds = eg_dataset_from_tensor_slices(2, (eg_tensor *[]){images, labels});
 *     ds = eg_dataset_shuffle(ds, 60000, 42, true);
 *     ds = eg_dataset_map(ds, my_augment, NULL, EG_AUTOTUNE, true);
 *     ds = eg_dataset_batch(ds, 32, false);
 *     ds = eg_dataset_prefetch(ds, EG_AUTOTUNE);
 *     for (int epoch = 0; epoch < 5; epoch++) {
 *         eg_dataset_iterator *it = eg_dataset_iterator_new(ds);
 *         for (;;) {
 *             eg_scope_begin();
 *             eg_element batch;
 *             bool end;
 *             eg_status status = eg_dataset_iterator_next(it, &batch, &end);
 *             if (status == EG_OK && !end) {
 *                 ... train on batch.tensors[0], batch.tensors[1] ...
 *             }
 *             eg_scope_end();                   // releases the batch too
 *             if (status != EG_OK || end) break;
 *         }
 *         eg_dataset_iterator_free(it);
 *     }
 *     eg_dataset_free(ds);
 *
 * OWNERSHIP
 *   - Every transformation TAKES OVER its input dataset(s) (the caller's reference), also when it
 *     fails, so calls chain without leaks: a NULL input gives NULL without a new error, and the
 *     first failure's message is the one eg_last_error() keeps. eg_dataset_free() drops the
 *     caller's reference; eg_dataset_retain() adds one (to use a dataset twice, e.g. in a zip).
 *   - Sources BORROW their tensor arguments (they keep their own references).
 *   - An iterator keeps its dataset alive: the dataset may be freed while iterators run.
 *   - Elements returned by eg_dataset_iterator_next() hold NEW references, owned by the caller's
 *     innermost scope when one is open (else released with eg_release / eg_element_release).
 *   - Callback contexts are borrowed: they must outlive the dataset and all of its iterators
 *     (the generator has a destroy callback for contexts it should own).
 *
 * CALLBACKS (map, filter, generator, interleave) run inside a scope the pipeline opens for each
 * call, in a no-grad region: create tensors freely and never release or eg_scope_keep() them; the
 * tensors written to the output element (new ones, or input tensors passed through) are taken
 * over by the pipeline and everything else is released when the call returns. Input elements are
 * borrowed. A callback reports failure by returning a status other than EG_OK (with an error
 * raised by eagle, or its own); the iteration then ends with that error, naming the stage and the
 * element ("map: element 7: matmul: inner dimensions differ ... at augment.c:31"). Callbacks of a
 * parallel map run on several threads at once and must be thread-safe; all callbacks may run on a
 * thread other than the one calling eg_dataset_iterator_next(), so they must not rely on
 * thread-local state such as an open tape.
 *
 * THREADS. Parallel maps run their calls on a pipeline thread pool that is separate from the
 * compute pool of the CPU kernels: that pool is fork-join, running ONE op at a time across all
 * cores, while pipeline work must run concurrently with the training step's ops. Ops called from
 * pipeline threads therefore run single-threaded on the calling thread (never taking the compute
 * pool away from the training step); the parallelism comes from running several calls at once. The
 * pool has one thread per core (more when a map asks for more fixed parallel calls) and exists only
 * while some iterator needs it. Prefetch and each parallel map also use one background thread that
 * feeds them. All waiting is on condition variables (no busy-waiting). Freeing an iterator early
 * stops its threads (waiting for calls already running) and releases every buffered element. A
 * callback may iterate a dataset of its own; when that one has parallel maps too, the pool grows
 * for them (up to EG_DATASET_MAX_PARALLELISM threads) rather than let calls wait on each other.
 *
 * DETERMINISM. For a given dataset, the k-th iterator created from it yields the same sequence
 * whatever the parallelism: parallel maps keep input order (unless deterministic is false),
 * shuffles draw from (seed, epoch), and callbacks get (epoch, index) in eg_dataset_call_info to
 * derive their randomness from (see eg_dataset_call_random), never from thread timing. The epoch of
 * a stage is the number of iterators created on that stage before (repeat() creates one per
 * repetition), so it advances with each pass; two iterators of one dataset alive at the same time
 * get different epochs.
 *
 * AUTOTUNE. EG_AUTOTUNE as a map's parallelism or a prefetch buffer size lets the pipeline choose
 * while it runs, from measured per-stage times: a map's parallel calls follow the ratio of its
 * per-call CPU time to the rate its consumer (or its input) can sustain, raised only while the
 * consumer waits and lowered only while it never waits, within a CPU budget shared by all
 * autotuned maps of an iterator (default: the number of cores); a change needs two agreeing
 * measurements in a row, and after two reversals of direction the stage stays where it is, so the
 * choice settles instead of oscillating. A prefetch buffer starts at 1 and doubles when the
 * consumer found it empty after it had been full (bursty demand), never shrinking, within a
 * memory budget (default 1 GiB per iterator, see eg_dataset_with_options) and 64 elements.
 * Under a host memory limit (eg_memory_set_limit, EG_MEMORY_LIMIT, set before the iterator is
 * made) AUTOTUNE stages run on the consumer's thread instead (a map's calls one by one, no
 * prefetch), so that memory use, and where a run that hits the limit fails, do not depend on
 * timing; stages given a fixed parallelism or buffer size keep their threads.
 * eg_dataset_stats() shows what was chosen. The per-call cost is CPU time, so a callback that
 * mostly waits (reading files, sleeping) looks cheap to AUTOTUNE: give such a map a fixed number
 * of parallel calls. */
#ifndef EAGLE_DATA_H
#define EAGLE_DATA_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "eagle/status.h"
#include "eagle/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* As a map's num_parallel_calls or a prefetch's buffer_size: tuned while running. */
#define EG_AUTOTUNE (-1)
/* The most tensors in one element. */
#define EG_ELEMENT_MAX_TENSORS 8
/* The most parallel calls a map may be given explicitly. */
#define EG_DATASET_MAX_PARALLELISM 64

/* One element: tensors[0 .. n_tensors). */
typedef struct eg_element {
    int n_tensors;
    eg_tensor *tensors[EG_ELEMENT_MAX_TENSORS];
} eg_element;

/* eg_release() on each tensor, then n_tensors = 0. NULL is ignored. */
void eg_element_release(eg_element *element);

typedef struct eg_dataset eg_dataset;
typedef struct eg_dataset_iterator eg_dataset_iterator;

/* What a callback is told about the element it works on. */
typedef struct eg_dataset_call_info {
    uint64_t epoch; /* the stage's epoch (see DETERMINISM above) */
    int64_t index;  /* position of the element in the stage's input during this epoch, from 0 */
} eg_dataset_call_info;

/* Four random 32-bit words that depend only on (seed, info->epoch, info->index) (Philox-4x32-10,
 * as eagle's random tensors): the way for callbacks to randomize deterministically. */
void eg_dataset_call_random(uint64_t seed, const eg_dataset_call_info *info, uint32_t words[4]);

/* ---- callbacks (see CALLBACKS above) ---- */

/* Fills *output (1 <= n_tensors <= EG_ELEMENT_MAX_TENSORS, none NULL) from *input. */
typedef eg_status (*eg_dataset_map_fn)(const eg_element *input, eg_element *output,
                                       const eg_dataset_call_info *info, void *context);
/* Sets *keep: true keeps the element. */
typedef eg_status (*eg_dataset_predicate_fn)(const eg_element *element, bool *keep,
                                             const eg_dataset_call_info *info, void *context);
/* Returns a NEW dataset for the element (taken over by the interleave), or NULL with an error. */
typedef eg_dataset *(*eg_dataset_interleave_fn)(const eg_element *element,
                                                const eg_dataset_call_info *info, void *context);

/* A generator: a source whose elements come from callbacks. For each iterator, start (optional)
 * makes per-pass state, then next is called with index 0, 1, 2, ... and sets *end (and fills
 * nothing) when the pass is over; finish (optional) frees the state when the iterator goes,
 * whether or not the pass reached its end. Calls for one iterator never overlap (but may come
 * from different threads); calls for different iterators may. destroy (optional) frees context
 * when the dataset goes. */
typedef struct eg_dataset_generator {
    eg_status (*start)(void *context, uint64_t epoch, void **state);
    eg_status (*next)(void *context, void *state, int64_t index, eg_element *output, bool *end);
    void (*finish)(void *context, void *state);
    void (*destroy)(void *context);
    void *context;
} eg_dataset_generator;

/* ---- sources (return a new dataset the caller frees; NULL with an error) ---- */

/* Element i is (tensors[0][i], ..., tensors[n-1][i]): views of row i of each tensor (no copy).
 * 1 <= n <= EG_ELEMENT_MAX_TENSORS; every tensor has at least one dimension and all share the
 * size of the first one. Errors: EG_ERR_NULL_ARGUMENT (tensors or one of them NULL),
 * EG_ERR_INVALID_ARGUMENT (n out of range), EG_ERR_SHAPE (a 0-d tensor, differing first
 * dimensions: "dataset_from_tensor_slices: tensor 1 has 100 rows, tensor 0 has 60000"). */
eg_dataset *eg_dataset_from_tensor_slices(int n, eg_tensor *const *tensors);

/* 0-d i64 elements start, start + step, ... up to stop (excluded). step != 0
 * (EG_ERR_INVALID_ARGUMENT). */
eg_dataset *eg_dataset_range(int64_t start, int64_t stop, int64_t step);

/* Copies *generator. EG_ERR_NULL_ARGUMENT when generator or its next is NULL. If this fails,
 * destroy is called (when given) as the dataset would have. */
eg_dataset *eg_dataset_from_generator(const eg_dataset_generator *generator);

/* Reads n IDX files now (eg_idx_read: plain or gzip) and slices them like
 * eg_dataset_from_tensor_slices: e.g. images and labels give (image, label) elements. Errors: those
 * of eg_idx_read, EG_ERR_SHAPE when the files' first dimensions differ. */
eg_dataset *eg_dataset_from_idx(int n, const char *const *paths);

/* The MNIST / Fashion-MNIST split read by eg_mnist_load (directory NULL: the Debian package's)
 * as (image u8 (28, 28), label u8 ()) elements. Errors: those of eg_mnist_load. */
eg_dataset *eg_dataset_from_mnist(const char *directory, bool train);

/* Reads n .npy files now (eg_npy_read) and slices them like eg_dataset_from_tensor_slices.
 * Errors: those of eg_npy_read, EG_ERR_SHAPE for a 0-d array or differing first dimensions. */
eg_dataset *eg_dataset_from_npy(int n, const char *const *paths);

/* ---- text: token windows and sequences ---- */

/* Language-model windows over a 1-d tensor of token ids (what a tokenizer made of a text, or
 * eg_text_file_read_bytes' bytes): element k is (input (length,), target (length,)), the ids
 * ids[s .. s + length) and ids[s + 1 .. s + length + 1) for s = offset + k * stride — each
 * target id is the id that follows its input id. Windows overlap when stride < length and skip
 * ids when stride > length; a window is made only when all length + 1 of its ids exist (the
 * rest at the end is left out). Elements are views of `ids` (no copy; on its device) in its
 * dtype (I32, I64 or U8; eg_cast converts a batch). The offset is 0, or with random_offset drawn
 * for each pass from (seed, epoch) in [0, min(stride, n - length)), so that over the epochs
 * windows start everywhere and every pass has at least one window. Errors: EG_ERR_NULL_ARGUMENT
 * (ids), EG_ERR_SHAPE (ids not 1-d, or shorter than length + 1: "window length 8 needs 9 ids
 * (the inputs and one more for the last target); the tensor has 5"), EG_ERR_DTYPE,
 * EG_ERR_INVALID_ARGUMENT (length or stride below 1). */
eg_dataset *eg_dataset_from_token_windows(const eg_tensor *ids, int64_t length, int64_t stride,
                                          bool random_offset, uint64_t seed);

/* Sequences of varying length, one per element: data[i] holds lengths[i] values of dtype (U8,
 * I32 or I64; data[i] may be NULL when lengths[i] is 0). Borrowed: the source copies them. */
typedef struct eg_sequences {
    eg_dtype dtype;
    int64_t count;
    const void *const *data;
    const int64_t *lengths;
} eg_sequences;

/* Element i is (sequence i of components[0], ..., of components[n - 1]), each a 1-d CPU tensor
 * (lengths[i],) of its component's dtype: e.g. (spelling, phonemes) pairs for padded_batch or
 * bucket_by_sequence_length. The values are copied now (the caller may free its arrays);
 * elements are views of that copy. 1 <= n <= EG_ELEMENT_MAX_TENSORS. Errors: EG_ERR_NULL_ARGUMENT
 * (components, its data or lengths, or data[i] with lengths[i] > 0), EG_ERR_INVALID_ARGUMENT (n,
 * a negative count or length), EG_ERR_SHAPE (components with different counts), EG_ERR_DTYPE,
 * EG_ERR_OUT_OF_MEMORY. */
eg_dataset *eg_dataset_from_sequences(int n, const eg_sequences *components);

/* ---- CSV files of numbers ----
 * Lines end with "\n" or "\r\n" (the last one may lack it); empty lines (or lines of spaces) are
 * skipped; a UTF-8 byte order mark at the start is ignored. Fields are separated by `delimiter`
 * and may be surrounded by spaces (and tabs, unless the delimiter is a tab) and by double quotes
 * ("1.5"). Every column is parsed straight into the dtype it is stored in: the label column
 * (label_column) into label_dtype, every other column into dtype; no value goes through another
 * type on the way. f32 is read as strtof and f64 as strtod read them in the C locale (so "nan",
 * "inf" and hex floats are accepted); i32 and i64 as base-10 integers, exactly: an optional sign
 * and digits only ("2.5", "1e3", "0x10" are not integers), out of range an error. Every data row
 * must have as many fields as the header, or (without one) as the first data row read without
 * error. Errors name the file, the line and the column (field number, from 1, followed by its
 * name when the file has a header):
 *   "data.csv: line 7, column 3: cannot parse \"abc\" as f32"
 *   "data.csv: line 7, column 3 (age): cannot parse \"abc\" as f32"   (with a header)
 *   "data.csv: line 7: 3 fields, expected 4 (as on line 1)"
 *   "data.csv: line 7, column 2: empty field"
 *   "data.csv: line 7, column 2: 1e999 is out of range for f32"
 *   "data.csv: line 7, column 2: unterminated quote"
 *   "data.csv: line 7, column 2: unexpected text after the closing quote"
 *   "data.csv: line 7, column 2: 2.5 is not an integer (i32)" ("... out of range for i32")
 *   "data.csv: line 7: NUL byte"
 * With skip_malformed_rows, a data row that would fail with one of these errors is left out and
 * counted instead (eg_csv_info: skipped_rows, first_skipped_line), as tf.data's ignore_errors
 * does; a malformed header line, bad options, a label_column outside the file and a file that
 * cannot be read still fail. */
typedef struct eg_csv_options {
    char delimiter;           /* ',' when 0; not a quote, line break, space, letter, digit, '.',
                                 '+', '-' (EG_ERR_INVALID_ARGUMENT) */
    bool header;              /* the first non-empty line names the columns and is skipped */
    eg_dtype dtype;           /* of the values: F32 (the default, 0), F64, I32 or I64 */
    int label_column;         /* -1: no label; else this column (from 0) becomes a separate label */
    eg_dtype label_dtype;     /* dtype of the label column (F32, F64, I32, I64) */
    bool skip_malformed_rows; /* leave out (and count) malformed data rows instead of failing */
} eg_csv_options;

/* {',', false, EG_DTYPE_F32, -1, EG_DTYPE_I64, false}. */
eg_csv_options eg_csv_options_default(void);

/* What a read found besides the values: filled by the *_with_info readers on success (zeroed on
 * failure). */
typedef struct eg_csv_info {
    int64_t rows;               /* data rows kept */
    int64_t columns;            /* fields per line, the label column included (0: an empty file) */
    int64_t skipped_rows;       /* malformed data rows left out (skip_malformed_rows), else 0 */
    int64_t first_skipped_line; /* line (from 1) of the first of them; 0 when none was */
    /* With a header: `columns` NUL-terminated names, as the header spells them (without the
     * quotes and surrounding blanks), the label column's among them at label_column. NULL
     * without a header or in an empty file. OWNED by the info: eg_csv_info_free() frees them. */
    char **column_names;
} eg_csv_info;

/* Frees info->column_names and zeroes *info. NULL is ignored. */
void eg_csv_info_free(eg_csv_info *info);

/* Reads the whole file into a new (rows, columns) tensor of options->dtype (options NULL: the
 * defaults; label_column and label_dtype are ignored here: every column is read as dtype). A file
 * without data rows gives (0, columns). Errors: EG_ERR_NULL_ARGUMENT (path), EG_ERR_IO (cannot
 * open or read), EG_ERR_INVALID_ARGUMENT (bad options), EG_ERR_FORMAT (see above),
 * EG_ERR_OUT_OF_MEMORY. */
eg_tensor *eg_csv_read(const char *path, const eg_csv_options *options);

/* eg_csv_read, also filling *info (when not NULL; the caller frees it with eg_csv_info_free). */
eg_tensor *eg_csv_read_with_info(const char *path, const eg_csv_options *options,
                                 eg_csv_info *info);

/* Reads the file now. Without a label column, element i is row i as a (columns,) tensor; with
 * one, it is (features (columns - 1,) of dtype, label () of label_dtype). Errors: those of
 * eg_csv_read, EG_ERR_INVALID_ARGUMENT when label_column is not a column of the file. */
eg_dataset *eg_dataset_from_csv(const char *path, const eg_csv_options *options);

/* eg_dataset_from_csv, also filling *info (when not NULL; the caller frees it with
 * eg_csv_info_free). */
eg_dataset *eg_dataset_from_csv_with_info(const char *path, const eg_csv_options *options,
                                          eg_csv_info *info);

/* ---- transformations (each takes over `input`; see OWNERSHIP) ---- */

/* fn applied to every element. num_parallel_calls: 0 runs the calls one by one in the thread that
 * pulls from this stage; n >= 1 (at most EG_DATASET_MAX_PARALLELISM) runs up to n calls at once
 * on the pipeline pool, ahead of the consumer (results waiting: at least 2n, up to 32 while they
 * fit in 1/16 of the memory budget); EG_AUTOTUNE chooses n. deterministic false lets a finished
 * element overtake a slower earlier one. Errors:
 * EG_ERR_NULL_ARGUMENT (fn), EG_ERR_INVALID_ARGUMENT (num_parallel_calls out of range). */
eg_dataset *eg_dataset_map(eg_dataset *input, eg_dataset_map_fn fn, void *context,
                           int num_parallel_calls, bool deterministic);

/* Only the elements for which fn sets keep. */
eg_dataset *eg_dataset_filter(eg_dataset *input, eg_dataset_predicate_fn fn, void *context);

/* Randomly shuffles through a buffer of buffer_size (>= 1) elements, as tf.data does: the buffer is
 * filled, then each output is drawn uniformly from it and replaced by the next input element. A
 * buffer at least as large as the input gives a uniform permutation. The draws depend only on
 * seed and, when reshuffle_each_iteration, on the epoch (each pass its own order; otherwise every
 * pass has the order of the first). */
eg_dataset *eg_dataset_shuffle(eg_dataset *input, int64_t buffer_size, uint64_t seed,
                               bool reshuffle_each_iteration);

/* Stacks batch_size (>= 1) consecutive elements into one: component j becomes a new contiguous
 * tensor (batch_size, shape of j). The last, smaller batch is dropped when drop_remainder. All
 * elements of a batch must agree in component count, dtypes and shapes; otherwise the iteration
 * fails with EG_ERR_SHAPE / EG_ERR_DTYPE naming the element ("batch: element 3, component 0: shape
 * (28, 27) differs from (28, 28) of the batch's first element; use eg_dataset_padded_batch for
 * items of varying shape"). */
eg_dataset *eg_dataset_batch(eg_dataset *input, int64_t batch_size, bool drop_remainder);

/* Like batch, for items of varying shape: each component is padded at the end of every axis to
 * the largest size in the batch, with padding_value (converted to the dtype). Components must
 * agree in dtype and number of dimensions. eg_dataset_padded_batch_with_options with
 * padding_value for every component. */
eg_dataset *eg_dataset_padded_batch(eg_dataset *input, int64_t batch_size, bool drop_remainder,
                                    double padding_value);

/* The shape a component is padded to, as tf.data's padded_shapes: n_dims 0 pads every axis to
 * the largest size in the batch (whatever the component's rank); otherwise the component must
 * have n_dims dimensions and axis d is padded to dims[d] when dims[d] >= 0 (an element larger
 * than that fails) or to the batch's largest when dims[d] is -1. */
typedef struct eg_padded_shape {
    int n_dims;
    int64_t dims[EG_MAX_DIMS];
} eg_padded_shape;

/* A zeroed struct is tf.data's default: padding 0, every axis to the longest in the batch. */
typedef struct eg_padded_batch_options {
    bool drop_remainder;
    double padding_values[EG_ELEMENT_MAX_TENSORS]; /* per component, converted to its dtype */
    eg_padded_shape padded_shapes[EG_ELEMENT_MAX_TENSORS]; /* per component */
} eg_padded_batch_options;

/* padded_batch with a padding value and a padded shape per component (options NULL: the zeroed
 * defaults). Errors: EG_ERR_INVALID_ARGUMENT (batch_size; a padded shape with n_dims outside
 * 0..EG_MAX_DIMS or a size below -1). Iteration fails with EG_ERR_SHAPE for an element larger
 * than its fixed padded size ("padded_batch: element 3, component 1: size 12 of axis 0 is larger
 * than the padded shape's 10") or of another rank than its padded shape, and with
 * EG_ERR_DTYPE / EG_ERR_SHAPE for elements that disagree in dtype or rank. */
eg_dataset *eg_dataset_padded_batch_with_options(eg_dataset *input, int64_t batch_size,
                                                 const eg_padded_batch_options *options);

/* tf.data's bucket_by_sequence_length: elements are sorted into buckets by their length and
 * padded-batched per bucket, so that a batch holds sequences of similar length and little
 * padding. An element's length is the size of the first axis of component length_component
 * (which must have one), or with length_component -1 the largest first-axis size of all its
 * components (0-d ones count 0). Bucket i holds the lengths in [boundaries[i - 1],
 * boundaries[i]) (bucket 0 from 0, bucket n_boundaries to infinity) and is emitted as a batch as
 * soon as it holds batch_sizes[i] elements; when the input ends, the buckets still holding
 * elements are emitted from the shortest lengths' bucket up (or dropped with
 * padding.drop_remainder). The order therefore depends only on the input's order: shuffle before
 * (a shuffle's seed makes the whole pass repeat) and, to mix lengths between steps, shuffle the
 * batches after. Batches are padded as padded_batch_with_options pads them; with
 * pad_to_bucket_boundary, the first axis of the length component (of every component with
 * length_component -1) is padded to at least boundaries[i] - 1, so that a bucket's batches share
 * one shape (the last bucket, which has no upper boundary, pads to its longest). */
typedef struct eg_bucket_options {
    int length_component;       /* -1: the longest first axis of all components */
    int n_boundaries;           /* 0 .. 1024: n_boundaries + 1 buckets */
    const int64_t *boundaries;  /* increasing, >= 1 (borrowed: copied) */
    const int64_t *batch_sizes; /* n_boundaries + 1 entries, each 1 to 2^30 (borrowed: copied) */
    bool pad_to_bucket_boundary;
    eg_padded_batch_options padding;
} eg_bucket_options;

/* Errors: EG_ERR_NULL_ARGUMENT (options, boundaries or batch_sizes), EG_ERR_INVALID_ARGUMENT
 * (a bad count, boundary, batch size, length_component or padded shape). Iteration fails as
 * padded_batch does, and with EG_ERR_SHAPE when the length component is 0-d or missing. */
eg_dataset *eg_dataset_bucket_by_sequence_length(eg_dataset *input,
                                                 const eg_bucket_options *options);

/* The inverse of batch: each element's components (>= 1 dimension, equal first sizes) are split
 * along their first axis into that many elements (views, no copy). */
eg_dataset *eg_dataset_unbatch(eg_dataset *input);

/* The input count times (count >= 0; -1: forever). Each repetition is a new pass of the input,
 * with its own epoch (so shuffles below reshuffle). An input that is empty ends the repetition. */
eg_dataset *eg_dataset_repeat(eg_dataset *input, int64_t count);

/* At most the first count elements (count >= 0; -1: all). */
eg_dataset *eg_dataset_take(eg_dataset *input, int64_t count);

/* All but the first count elements (count >= 0; -1: all of them, leaving none). */
eg_dataset *eg_dataset_skip(eg_dataset *input, int64_t count);

/* Elements index, index + num_shards, index + 2 * num_shards, ... of the input (as tf.data's
 * Dataset.shard): the share of one of num_shards consumers. num_shards >= 1 and
 * 0 <= index < num_shards, else EG_ERR_INVALID_ARGUMENT naming both ("dataset_shard: index is
 * 4; it must be in [0, 4) for num_shards 4"); num_shards 1 returns the input unchanged.
 *
 * For data parallelism, every rank builds the same pipeline (the same source, the same shuffle
 * seed) and shards it with (world size, rank) right after the source or right after the
 * shuffle, before any map and batch: each epoch the ranks then see disjoint shares that together
 * hold every example exactly once. The stage skips by pulling and dropping its input's elements,
 * so whatever runs below it runs on every rank for every rank's elements, and what runs above it
 * only for the rank's own: shard before an expensive map (decoding, augmentation) so that a rank
 * skips the other ranks' work. Right after the source is the cheapest place (each rank shuffles
 * only its share, in a buffer 1/num_shards the size), but a rank then sees the same examples in
 * every epoch, in a new order; right after the shuffle each rank shuffles the whole dataset (all
 * of it pulled, a full-size buffer), and the examples move between ranks from epoch to epoch as
 * in single-process training. Sharding after batch shards whole batches (each rank every
 * num_shards-th batch). What lies below the shard must give the same order on every rank (a map
 * with deterministic false there breaks the split). Shares differ by one element when num_shards
 * does not divide the count: ranks that step in lockstep must agree on their number of steps
 * (e.g. a take of count / num_shards elements of each share before batching). */
eg_dataset *eg_dataset_shard(eg_dataset *input, int64_t num_shards, int64_t index);

/* Keeps the elements of the first pass that reaches the end in memory; later passes (iterators
 * created after that) replay them without running the input. A pass stopped early is not kept.
 * Randomness below the cache is therefore frozen at the first complete pass, as in tf.data. */
eg_dataset *eg_dataset_cache(eg_dataset *input);

/* Produces elements ahead of the consumer on a background thread into a buffer of buffer_size
 * elements (>= 1, or EG_AUTOTUNE; 0 returns the input unchanged). */
eg_dataset *eg_dataset_prefetch(eg_dataset *input, int buffer_size);

/* Elements made of the elements of n (>= 1) datasets side by side: (a0, a1, b0) from (a0, a1)
 * and (b0). Ends with the shortest input. Takes over all inputs (also when it fails). More than
 * EG_ELEMENT_MAX_TENSORS tensors in all fails the iteration with EG_ERR_INVALID_ARGUMENT. */
eg_dataset *eg_dataset_zip(int n, eg_dataset *const *inputs);

/* tf.data's interleave: fn turns each input element into a dataset; cycle_length (>= 1) of them
 * are open at once and block_length (>= 1) consecutive elements are taken from each in turn; one
 * that ends is replaced by the dataset of the next input element. Sequential (put a prefetch inside
 * the datasets fn returns to read them ahead). */
eg_dataset *eg_dataset_interleave(eg_dataset *input, eg_dataset_interleave_fn fn, void *context,
                                  int cycle_length, int block_length);

/* Round robin over n (>= 1) datasets, block_length elements from each in turn, the ones that end
 * dropping out: eg_dataset_interleave of the n with cycle_length n. Takes over all inputs. */
eg_dataset *eg_dataset_interleave_datasets(int n, eg_dataset *const *inputs, int block_length);

/* Budgets for AUTOTUNE in iterators of the returned dataset (a pass-through stage). */
typedef struct eg_dataset_options {
    int cpu_budget;     /* parallel calls shared by all autotuned maps; 0: the number of cores */
    int64_t ram_budget; /* bytes of all autotuned buffers; 0: 1 GiB */
} eg_dataset_options;
eg_dataset *eg_dataset_with_options(eg_dataset *input, const eg_dataset_options *options);

/* ---- datasets and iterators ---- */

/* Adds a reference; returns ds. */
eg_dataset *eg_dataset_retain(eg_dataset *ds);
/* Drops the caller's reference. NULL is ignored. */
void eg_dataset_free(eg_dataset *ds);

/* A new iterator at the start of a pass over ds (the next epoch of ds). Cheap: background threads
 * start at the first eg_dataset_iterator_next. NULL with an error (EG_ERR_NULL_ARGUMENT,
 * EG_ERR_OUT_OF_MEMORY). Use an iterator from one thread at a time. */
eg_dataset_iterator *eg_dataset_iterator_new(eg_dataset *ds);

/* The next element of the pass:
 *   - EG_OK, *end false: *element holds new references (see OWNERSHIP);
 *   - EG_OK, *end true: the pass is over; element->n_tensors is 0 (and stays so on later calls);
 *   - an error status, with the error raised: the pass failed (a callback's error, a bad batch,
 *     out of memory, ...); later calls return the same status and raise the same error again.
 * A pending error from before the call does not make it fail and, being first, is the one
 * eg_last_error() keeps. EG_ERR_NULL_ARGUMENT when an argument is NULL. */
eg_status eg_dataset_iterator_next(eg_dataset_iterator *it, eg_element *element, bool *end);

/* Stops the iterator's threads (waiting for callback calls already running), releases everything
 * it buffered, and frees it. NULL is ignored. Never blocks on a consumer that is gone. */
void eg_dataset_iterator_free(eg_dataset_iterator *it);

/* ---- statistics ---- */

typedef struct eg_dataset_stage_stats {
    char name[64];           /* "map(parallel=AUTOTUNE)", "prefetch(AUTOTUNE)", "batch(32)" */
    int depth;               /* 0: the stage the iterator reads, 1: its input, ... */
    int64_t elements;        /* produced so far */
    double throughput;       /* elements per second of wall time since the first next */
    double seconds_in_next;  /* time its consumer spent in this stage's next, with its inputs */
    double wait_seconds;     /* of that, time blocked waiting for a background producer */
    int parallelism;         /* parallel calls now (map with n >= 1 or AUTOTUNE), else 0 */
    int buffer_size;         /* capacity of its buffer now (prefetch, parallel map), else 0 */
    double buffer_fill;      /* mean fraction of the buffer that was full when asked, 0..1 */
    double call_cpu_seconds; /* map, filter, generator: mean CPU time of one callback call */
    bool autotuned;          /* parallelism or buffer_size is chosen by AUTOTUNE */
} eg_dataset_stage_stats;

/* Fills stats[0 .. min(count, capacity)) with the stages of the iterator, from the one it reads
 * to the sources (stages of datasets made by an interleave's fn are not listed) and returns
 * count, or -1 with an error (EG_ERR_NULL_ARGUMENT when it is NULL, or stats NULL with
 * capacity > 0). Safe while another thread uses the iterator. */
int eg_dataset_stats(const eg_dataset_iterator *it, eg_dataset_stage_stats *stats, int capacity);

/* Prints the stages as a table to out. */
eg_status eg_dataset_stats_print(const eg_dataset_iterator *it, FILE *out);

/* ---- ready-made image augmentations: map callbacks (use with eg_dataset_map, the options
 * struct as context) for images (H, W) or (H, W, C) of u8 or f32 at component `component` of the
 * element; the other components pass through. Random choices come from eg_dataset_call_random
 * with the options' seed, so they repeat for the same (seed, epoch, index) whatever the
 * parallelism. With `batched`, the component is a batch (N, H, W) or (N, H, W, C) and image i
 * draws as if its index were (index << 32) + i: one call per batch costs far less than one per
 * image. Errors: EG_ERR_INVALID_ARGUMENT (no such component, bad options), EG_ERR_SHAPE (not an
 * image, or batch of them), EG_ERR_DTYPE (not u8 or f32). ---- */

typedef struct eg_image_flip_options {
    uint64_t seed;
    int component;      /* the image's index in the element */
    double probability; /* of mirroring left-right, in [0, 1]; 0.5 for the usual random flip */
    bool batched;
} eg_image_flip_options;
/* Mirrors the image along its width axis with the given probability (else passes it through;
 * a batch passes through when no image of it is mirrored). */
eg_status eg_image_random_flip(const eg_element *input, eg_element *output,
                               const eg_dataset_call_info *info, void *options);

typedef struct eg_image_crop_options {
    uint64_t seed;
    int component;
    int64_t padding; /* >= 0: pixels of `fill` added on each side of H and W */
    double fill;     /* value of the padding (converted to the dtype) */
    bool batched;
} eg_image_crop_options;
/* Pads the image by `padding` on every side, then crops an (H, W) window at a uniformly random
 * offset (0 .. 2 * padding in each axis): a random shift with fill, as in CIFAR training. */
eg_status eg_image_random_crop(const eg_element *input, eg_element *output,
                               const eg_dataset_call_info *info, void *options);

typedef struct eg_image_normalize_options {
    int component;
    double scale;       /* applied first: x * scale (e.g. 1 / 255.); 0 means 1 */
    int n_values;       /* entries of mean and std: 1 (all channels) or C */
    const double *mean; /* borrowed */
    const double *std;  /* borrowed; every entry > 0 */
    bool batched;
} eg_image_normalize_options;
/* (x * scale - mean[c]) / std[c] as a new f32 image of the same shape. */
eg_status eg_image_normalize(const eg_element *input, eg_element *output,
                             const eg_dataset_call_info *info, void *options);

#if !defined(EG_NO_CALLSITE)
#define eg_image_random_flip(...) EG_CALLSITE_(eg_image_random_flip(__VA_ARGS__))
#define eg_image_random_crop(...) EG_CALLSITE_(eg_image_random_crop(__VA_ARGS__))
#define eg_image_normalize(...)   EG_CALLSITE_(eg_image_normalize(__VA_ARGS__))

#define eg_dataset_from_tensor_slices(...) EG_CALLSITE_(eg_dataset_from_tensor_slices(__VA_ARGS__))
#define eg_dataset_range(...)              EG_CALLSITE_(eg_dataset_range(__VA_ARGS__))
#define eg_dataset_from_generator(...)     EG_CALLSITE_(eg_dataset_from_generator(__VA_ARGS__))
#define eg_dataset_from_idx(...)           EG_CALLSITE_(eg_dataset_from_idx(__VA_ARGS__))
#define eg_dataset_from_mnist(...)         EG_CALLSITE_(eg_dataset_from_mnist(__VA_ARGS__))
#define eg_dataset_from_npy(...)           EG_CALLSITE_(eg_dataset_from_npy(__VA_ARGS__))
#define eg_csv_read(...)                   EG_CALLSITE_(eg_csv_read(__VA_ARGS__))
#define eg_csv_read_with_info(...)         EG_CALLSITE_(eg_csv_read_with_info(__VA_ARGS__))
#define eg_dataset_from_csv(...)           EG_CALLSITE_(eg_dataset_from_csv(__VA_ARGS__))
#define eg_dataset_from_csv_with_info(...) EG_CALLSITE_(eg_dataset_from_csv_with_info(__VA_ARGS__))
#define eg_dataset_map(...)                EG_CALLSITE_(eg_dataset_map(__VA_ARGS__))
#define eg_dataset_filter(...)             EG_CALLSITE_(eg_dataset_filter(__VA_ARGS__))
#define eg_dataset_shuffle(...)            EG_CALLSITE_(eg_dataset_shuffle(__VA_ARGS__))
#define eg_dataset_batch(...)              EG_CALLSITE_(eg_dataset_batch(__VA_ARGS__))
#define eg_dataset_padded_batch(...)       EG_CALLSITE_(eg_dataset_padded_batch(__VA_ARGS__))
#define eg_dataset_padded_batch_with_options(...)                                                  \
    EG_CALLSITE_(eg_dataset_padded_batch_with_options(__VA_ARGS__))
#define eg_dataset_bucket_by_sequence_length(...)                                                  \
    EG_CALLSITE_(eg_dataset_bucket_by_sequence_length(__VA_ARGS__))
#define eg_dataset_from_token_windows(...) EG_CALLSITE_(eg_dataset_from_token_windows(__VA_ARGS__))
#define eg_dataset_from_sequences(...)     EG_CALLSITE_(eg_dataset_from_sequences(__VA_ARGS__))
#define eg_dataset_unbatch(...)            EG_CALLSITE_(eg_dataset_unbatch(__VA_ARGS__))
#define eg_dataset_repeat(...)             EG_CALLSITE_(eg_dataset_repeat(__VA_ARGS__))
#define eg_dataset_take(...)               EG_CALLSITE_(eg_dataset_take(__VA_ARGS__))
#define eg_dataset_skip(...)               EG_CALLSITE_(eg_dataset_skip(__VA_ARGS__))
#define eg_dataset_shard(...)              EG_CALLSITE_(eg_dataset_shard(__VA_ARGS__))
#define eg_dataset_cache(...)              EG_CALLSITE_(eg_dataset_cache(__VA_ARGS__))
#define eg_dataset_prefetch(...)           EG_CALLSITE_(eg_dataset_prefetch(__VA_ARGS__))
#define eg_dataset_zip(...)                EG_CALLSITE_(eg_dataset_zip(__VA_ARGS__))
#define eg_dataset_interleave(...)         EG_CALLSITE_(eg_dataset_interleave(__VA_ARGS__))
#define eg_dataset_interleave_datasets(...)                                                        \
    EG_CALLSITE_(eg_dataset_interleave_datasets(__VA_ARGS__))
#define eg_dataset_with_options(...)  EG_CALLSITE_(eg_dataset_with_options(__VA_ARGS__))
#define eg_dataset_iterator_new(...)  EG_CALLSITE_(eg_dataset_iterator_new(__VA_ARGS__))
#define eg_dataset_iterator_next(...) EG_CALLSITE_(eg_dataset_iterator_next(__VA_ARGS__))
#define eg_dataset_stats(...)         EG_CALLSITE_(eg_dataset_stats(__VA_ARGS__))
#define eg_dataset_stats_print(...)   EG_CALLSITE_(eg_dataset_stats_print(__VA_ARGS__))
#endif

#ifdef __cplusplus
}
#endif
#endif
