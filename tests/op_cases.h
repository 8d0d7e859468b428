/* The op case table shared by test_ops (forward results against plain-C references) and
 * test_gradcheck (analytic gradients against central differences).
 *
 * A case runs one op through its public API (internal-only ops through eg__execute) on small
 * inputs described by spec strings:
 *
 *     "<dtype> <shape>[:<view>] <values>"
 *
 *   dtype  : F (the test's float dtype: f32 in test_ops, also f64, bf16 and f16; f64 in
 *            test_gradcheck), or f32, f64, bf16, f16, i32, i64, u8, b (bool) for a fixed dtype;
 *   shape  : comma-separated sizes of the tensor that is created ("-" for a 0-d tensor);
 *   view   : T = transpose the last two axes, S = slice axis 0 as 1::2, B = broadcast to a new
 *            leading axis of size 2 (zero stride); the op sees the view, gradients are taken
 *            with respect to the created tensor;
 *   values : n uniform in [-2, 2]; p in [0.5, 2]; a |x| in [0.2, 2] with random sign (away
 *            from kinks at 0); d distinct values 0.25 apart (no ties); w uniform in [-40, 40];
 *            z small integers in [-4, 4]; q integers in [1, 5] with random sign (non-zero);
 *            i<k> integers in [0, k); b random booleans.
 *
 * Each case has a plain-C reference (or, for dropout, a property check). The references
 * compute in doubles from the input values as stored in the tensors.
 *
 * Files: the table and the calls into Eagle in op_cases.c, the references in op_reference.c,
 * spec parsing, input creation and reading results back in op_harness.c. */
#ifndef EAGLE_TESTS_OP_CASES_H
#define EAGLE_TESTS_OP_CASES_H

#include <stdbool.h>
#include <stddef.h>

#include "ops/internal.h"

#define OC_MAX_INPUTS  10
#define OC_MAX_OUTPUTS 4
#define OC_MAX_ELEMS   1024

/* A reference tensor: row-major doubles. dtype is what the op should return. */
typedef struct oc_ref {
    eg_dtype dtype;
    int n_dims;
    int64_t shape[EG_MAX_DIMS];
    int64_t n_elems;
    double data[OC_MAX_ELEMS];
} oc_ref;

typedef struct oc_case oc_case;

/* Runs the op on the (viewed) inputs; writes new tensors into out, returns how many (-1: the
 * op failed). */
typedef int (*oc_apply_fn)(const oc_case *c, eg_tensor *const *in, eg_tensor **out);
/* Computes the expected outputs in plain C; returns how many. */
typedef int (*oc_reference_fn)(const oc_case *c, const oc_ref *in, oc_ref *out);
/* For results that are random (dropout): checks Eagle's outputs against properties; writes the
 * reason to why on failure. */
typedef bool (*oc_check_fn)(const oc_case *c, const oc_ref *in, int n_out, const oc_ref *out,
                            char *why, size_t why_size);

enum {
    OC_FORWARD_ONLY = 1u << 0, /* not a gradient check case (e.g. values far out) */
    /* The case calls other ops besides c->op (batch_normalization computes moments first), so
     * whether c->op takes a dtype does not decide whether the case runs in it: it may also fail
     * with EG_ERR_DTYPE from one of the others (bf16 and f16 through an f32-only op). */
    OC_COMPOSITE = 1u << 1,
    /* The case's call converts some of its float inputs before the op (batch_norm_training takes
     * bf16 / f16 x with f32 statistics, converting its offset and scale): its op's answer for
     * one dtype throughout (eg_device_supports_op) does not decide whether it runs. */
    OC_MIXED_DTYPES = 1u << 2,
};

struct oc_case {
    eg__op op; /* the registry op this case covers */
    const char *name;
    const char *inputs[OC_MAX_INPUTS]; /* specs, NULL after the last */
    oc_apply_fn apply;
    oc_reference_fn reference; /* or check */
    oc_check_fn check;
    int64_t p[10]; /* integer parameters, read by apply/reference */
    double d[2];   /* real parameters */
    unsigned flags;
    double tol; /* forward tolerance for f32 results (0: the default) */
    double h;   /* gradcheck step (0: the default) */
};

extern const oc_case oc_cases[];
extern const int oc_n_cases;

/* The inputs of one case, built from its specs. */
typedef struct oc_inputs {
    int n;
    eg_tensor *base[OC_MAX_INPUTS]; /* created from data (contiguous); owned by the scope */
    char view[OC_MAX_INPUTS];       /* 0, 'T', 'S' or 'B' */
    bool is_float[OC_MAX_INPUTS];   /* spec dtype was F */
    oc_ref *ref;                    /* OC_MAX_INPUTS logical values, after the views */
} oc_inputs;

/* Parses the case's specs and creates its inputs (F = float_dtype) with values drawn from
 * seed. false (with a message on stderr) on a bad spec or an Eagle error. Call inside a scope;
 * free with oc_inputs_free. */
bool oc_inputs_make(const oc_case *c, eg_dtype float_dtype, uint64_t seed, oc_inputs *inputs);
void oc_inputs_free(oc_inputs *inputs);
/* The views the op sees (new tensors, or the bases themselves retained into the scope). */
bool oc_inputs_views(const oc_inputs *inputs, eg_tensor **views);
/* Number of spec strings. */
int oc_case_n_inputs(const oc_case *c);
/* Whether any input is F (a gradient source). */
bool oc_case_has_float_input(const oc_case *c);

/* Reads any tensor into a reference (values as doubles, row-major). false if too large. */
bool oc_read(const eg_tensor *t, oc_ref *out);

/* ---- plain-C helpers for references ---- */
void oc_ref_init(oc_ref *r, eg_dtype dtype, int n_dims, const int64_t *shape);
void oc_unravel(int n_dims, const int64_t *shape, int64_t flat, int64_t *index);
int64_t oc_ravel(int n_dims, const int64_t *shape, const int64_t *index);
/* Element of t at the position out_index of a broadcast result with out_n_dims dims. */
double oc_broadcast_get(const oc_ref *t, int out_n_dims, const int64_t *out_index);
/* numpy broadcasting of n shapes; false when they do not broadcast. */
bool oc_broadcast_shape(int n, const oc_ref *const *in, int *n_dims, int64_t *shape);

/* A small deterministic generator (not Eagle's). */
typedef struct oc_rng {
    uint64_t state;
} oc_rng;
uint64_t oc_rng_next(oc_rng *rng);
double oc_rng_uniform(oc_rng *rng, double low, double high);

#endif
