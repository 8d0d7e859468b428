/* Eagle — tensors: creation, shape queries, host data access, ownership and scopes.
 *
 * Ownership (see DESIGN.md): every function that returns an eg_tensor * returns a NEW reference;
 * arguments are borrowed. Inside eg_scope_begin()/eg_scope_end() every tensor created is owned by
 * the scope and released when it ends, unless handed out with eg_scope_keep(). Outside any scope
 * the caller releases with eg_release(). Calling eg_release() on a scope-owned tensor is allowed:
 * the scope then forgets it. A tensor is not safe to release from two threads at once unless each
 * holds its own reference. */
#ifndef EAGLE_TENSOR_H
#define EAGLE_TENSOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "eagle/device.h"
#include "eagle/dtype.h"
#include "eagle/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define EG_MAX_DIMS 8

typedef struct eg_tensor eg_tensor;

/* ---- creation (all on the CPU device; shape may be NULL when n_dims == 0) ---- */

/* A tensor holding a copy of n_elems(shape) contiguous elements of `dtype` read from `data`. */
eg_tensor *eg_tensor_from_data(const void *data, eg_dtype dtype, int n_dims, const int64_t *shape);
/* Uninitialised contents. */
eg_tensor *eg_empty(eg_dtype dtype, int n_dims, const int64_t *shape);
eg_tensor *eg_zeros(eg_dtype dtype, int n_dims, const int64_t *shape);
eg_tensor *eg_ones(eg_dtype dtype, int n_dims, const int64_t *shape);
eg_tensor *eg_full(eg_dtype dtype, int n_dims, const int64_t *shape, double value);
/* A 0-d tensor. */
eg_tensor *eg_scalar(eg_dtype dtype, double value);
/* [start, stop) by step, like numpy.arange; step must not be 0. */
eg_tensor *eg_arange(double start, double stop, double step, eg_dtype dtype);
/* num evenly spaced values from start to stop inclusive; num >= 0. */
eg_tensor *eg_linspace(double start, double stop, int64_t num, eg_dtype dtype);
/* n x n identity. */
eg_tensor *eg_eye(int64_t n, eg_dtype dtype);
/* Same shape and dtype as `like`, filled with value. */
eg_tensor *eg_full_like(const eg_tensor *like, double value);

/* ---- random numbers: Philox-4x32-10, counter based, so results depend only on the seed and
 * the order of calls on one generator, never on the number of threads ---- */
typedef struct eg_generator eg_generator;
/* Caller owns; free with eg_generator_free. NULL only when out of host memory. */
eg_generator *eg_generator_new(uint64_t seed);
void eg_generator_free(eg_generator *generator);
/* Reseeds the process-wide default generator (used when a generator argument is NULL). */
void eg_manual_seed(uint64_t seed);
/* A fresh 64-bit seed drawn from the generator (NULL = default); thread-safe. */
uint64_t eg_generator_next_seed(eg_generator *generator);
/* A generator's whole state (NULL = this thread's default): its seed and how many blocks it has
 * drawn. Setting a state read earlier makes the draws that followed it come again (checkpoints
 * that resume a run exactly). */
void eg_generator_get_state(const eg_generator *generator, uint64_t *seed, uint64_t *position);
void eg_generator_set_state(eg_generator *generator, uint64_t seed, uint64_t position);
/* Floats only (f32, f64, f16, bf16). uniform in [low, high); normal by Box-Muller. */
eg_tensor *eg_random_uniform(eg_generator *generator, eg_dtype dtype, int n_dims,
                             const int64_t *shape, double low, double high);
eg_tensor *eg_random_normal(eg_generator *generator, eg_dtype dtype, int n_dims,
                            const int64_t *shape, double mean, double stddev);

/* ---- queries (a NULL tensor gives 0 / NULL) ---- */
int eg_tensor_n_dims(const eg_tensor *t);
/* Pointer to n_dims sizes, valid while t lives. */
const int64_t *eg_tensor_shape(const eg_tensor *t);
/* Size of one axis; negative axes count from the end. -1 with an error when out of range. */
int64_t eg_tensor_dim(const eg_tensor *t, int axis);
/* Strides in elements (not bytes), valid while t lives. */
const int64_t *eg_tensor_strides(const eg_tensor *t);
int64_t eg_tensor_n_elems(const eg_tensor *t);
eg_dtype eg_tensor_dtype(const eg_tensor *t);
const eg_device *eg_tensor_device(const eg_tensor *t);
bool eg_tensor_is_contiguous(const eg_tensor *t);
/* True when a and b share storage (one is a view of the other, or both of a third). */
bool eg_tensor_shares_storage(const eg_tensor *a, const eg_tensor *b);
/* Writes "(2, 3)" into buf (always NUL-terminated); returns buf. */
char *eg_tensor_shape_string(const eg_tensor *t, char *buf, size_t buf_size);

/* ---- row-sparse tensors ----
 * What a table gets as its gradient when only some of its rows were read: an Embedding built
 * with sparse_gradient (eg_embedding_options), like tf.IndexedSlices. Its shape and dtype are
 * the dense tensor's; the dense value is zero but for rows indices[k] (i64, (n,)), which hold
 * values[k] ((n, shape[1:])), repeated rows adding up. The optimizers apply it as it is (only
 * the rows it names change, their slots too); ops refuse it with an error that says to call
 * eg_row_sparse_to_dense (ops.h). */
bool eg_tensor_is_row_sparse(const eg_tensor *t);
/* Its parts, borrowed (valid while t lives); NULL, and no error, when t is not row-sparse. */
eg_tensor *eg_row_sparse_indices(const eg_tensor *t);
eg_tensor *eg_row_sparse_values(const eg_tensor *t);

/* ---- host data ---- */
/* Pointer to the first element in host memory (follow eg_tensor_strides for views). Realizes a
 * lazy tensor. NULL with an error if t is NULL or not on the CPU. Valid while t lives. The
 * memory may be written. Lazy mode keeps eager semantics for such writes: ops recorded on t
 * before this call and still pending are given a snapshot of t first (one copy, only when there
 * are such ops), so they compute with the value t had when they were called, while ops recorded
 * later see what was written. A pointer kept from before recording such ops must be fetched again
 * before writing through it (the snapshot is taken here, not at the write). */
void *eg_tensor_data(const eg_tensor *t);
/* Copies t's elements in row-major order into dst (n_elems * dtype size bytes needed). */
eg_status eg_tensor_copy_to_host(const eg_tensor *t, void *dst, size_t dst_bytes);
/* The only element of a 1-element tensor as double; NaN with an error otherwise. */
double eg_item(const eg_tensor *t);
/* Element at a multi-index as double (index has n_dims entries); NaN with an error if out of
 * range. For tests and debugging, not for loops. */
double eg_tensor_get(const eg_tensor *t, const int64_t *index);
/* numpy-like text: "tensor([[1., 2.],\n        [3., 4.]], dtype=f32)" (floats with a ".", ints
 * without); tensors over 1000 elements show 3 items at each end of every axis with "...". */
eg_status eg_tensor_print(const eg_tensor *t, FILE *out);
/* Same text in a malloc'd string the caller frees; NULL on error. */
char *eg_tensor_to_string(const eg_tensor *t);

/* ---- ownership ---- */
/* Adds a reference; returns t (NULL passes through). Under debug tracking (below), retaining a
 * released tensor is an EG_ERR_STATE error and adds nothing. */
eg_tensor *eg_retain(eg_tensor *t);
/* Drops a reference; frees the tensor (and its storage, when it was the last view) at zero.
 * NULL is ignored. A tensor released twice is undefined behaviour, except under debug tracking
 * (below), where it is an EG_ERR_STATE error naming where t was made and first released. */
void eg_release(eg_tensor *t);
/* Opens a scope on this thread; scopes nest. */
void eg_scope_begin(void);
/* Releases every tensor created on this thread since the matching eg_scope_begin() that was not
 * kept. EG_ERR_STATE when no scope is open. */
eg_status eg_scope_end(void);
/* Hands t out of the innermost scope: it moves to the enclosing scope, or to the caller when
 * there is none. Returns t. A tensor not owned by the innermost scope is returned unchanged. */
eg_tensor *eg_scope_keep(eg_tensor *t);
/* Number of open scopes on this thread. */
int eg_scope_depth(void);

/* ---- debugging ---- */
/* Turns tracking of live tensors with their creation site on or off (also EG_DEBUG_TENSORS=1 in
 * the environment, which additionally prints the list at exit; on by default in a library built
 * with CMAKE_BUILD_TYPE=Debug unless EG_DEBUG_TENSORS=0). Only tensors created while on are
 * tracked. A tracked tensor, once released (eg_release, or the end of its scope), is kept aside
 * and marked instead of its header being reused: an op, a read (eg_tensor_data, eg_item ...) or
 * another public call given it, or a second eg_release, fails with EG_ERR_STATE and a message
 * such as "add (input 1): tensor used after release: made at train.c:12, released by
 * eg_scope_end at train.c:20". The last 65536 released tensors are kept aside (about 20 MiB); an
 * older one's header may be reused, and is then no longer recognised. Costs a lock per tensor
 * made and released while on; nothing measurable while off. */
void eg_debug_track_tensors(bool on);
/* Prints every tracked live tensor with its shape, dtype and creation file:line to out (when not
 * NULL); returns how many there are. */
size_t eg_debug_live_tensors(FILE *out);

#if !defined(EG_NO_CALLSITE)
#define eg_scope_begin(...) EG_CALLSITE_(eg_scope_begin(__VA_ARGS__))
#define eg_scope_keep(...)  EG_CALLSITE_(eg_scope_keep(__VA_ARGS__))

#define eg_tensor_from_data(...)    EG_CALLSITE_(eg_tensor_from_data(__VA_ARGS__))
#define eg_empty(...)               EG_CALLSITE_(eg_empty(__VA_ARGS__))
#define eg_zeros(...)               EG_CALLSITE_(eg_zeros(__VA_ARGS__))
#define eg_ones(...)                EG_CALLSITE_(eg_ones(__VA_ARGS__))
#define eg_full(...)                EG_CALLSITE_(eg_full(__VA_ARGS__))
#define eg_scalar(...)              EG_CALLSITE_(eg_scalar(__VA_ARGS__))
#define eg_arange(...)              EG_CALLSITE_(eg_arange(__VA_ARGS__))
#define eg_linspace(...)            EG_CALLSITE_(eg_linspace(__VA_ARGS__))
#define eg_eye(...)                 EG_CALLSITE_(eg_eye(__VA_ARGS__))
#define eg_full_like(...)           EG_CALLSITE_(eg_full_like(__VA_ARGS__))
#define eg_random_uniform(...)      EG_CALLSITE_(eg_random_uniform(__VA_ARGS__))
#define eg_random_normal(...)       EG_CALLSITE_(eg_random_normal(__VA_ARGS__))
#define eg_tensor_data(...)         EG_CALLSITE_(eg_tensor_data(__VA_ARGS__))
#define eg_item(...)                EG_CALLSITE_(eg_item(__VA_ARGS__))
#define eg_generator_new(...)       EG_CALLSITE_(eg_generator_new(__VA_ARGS__))
#define eg_tensor_dim(...)          EG_CALLSITE_(eg_tensor_dim(__VA_ARGS__))
#define eg_tensor_copy_to_host(...) EG_CALLSITE_(eg_tensor_copy_to_host(__VA_ARGS__))
#define eg_tensor_get(...)          EG_CALLSITE_(eg_tensor_get(__VA_ARGS__))
#define eg_tensor_print(...)        EG_CALLSITE_(eg_tensor_print(__VA_ARGS__))
#define eg_tensor_to_string(...)    EG_CALLSITE_(eg_tensor_to_string(__VA_ARGS__))
#define eg_scope_end(...)           EG_CALLSITE_(eg_scope_end(__VA_ARGS__))
#define eg_release(...)             EG_CALLSITE_(eg_release(__VA_ARGS__))
#define eg_retain(...)              EG_CALLSITE_(eg_retain(__VA_ARGS__))
#endif

#ifdef __cplusplus
}
#endif
#endif
