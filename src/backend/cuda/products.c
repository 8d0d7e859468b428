/* matmul and dense on a GPU, through cuBLASLt.
 *
 * Row-major Eagle, column-major cuBLASLt: a row-major (m, n) C is the column-major (n, m) C^T,
 * so C = op(A) op(B) is computed as C^T = op(B)^T op(A)^T: cuBLASLt's A is Eagle's b and its B
 * is Eagle's a, each read in place where its last two axes have a unit stride on one side (a
 * transposed view becomes a transpose flag, as on the CPU), and otherwise copied dense first.
 * Batch dims become cuBLASLt's strided batch when each operand's batch elements are evenly
 * spaced (stride 0 for an operand broadcast over all of them); a product whose b is shared by
 * every batch element and whose a stacks its rows evenly is one (batch x m, k) product. Other
 * broadcasts are copied out over the output's batch shape. If cuBLASLt has no algorithm for a
 * broadcast (stride 0) batch, the broadcast operand is copied out and the search repeated.
 *
 * Numbers: f32 runs on CUBLAS_COMPUTE_32F (full f32 products, like the CPU's), or on TF32 tensor
 * cores with EG_CUDA_TF32=1 (read once); f64 on CUBLAS_COMPUTE_64F. cuBLASLt sums k in its own
 * order (tiles, maybe split-k), so results match the CPU's up to f32/f64 rounding, not bitwise;
 * for one shape, layout and GPU the algorithm is chosen once and kept (see the cache below), and
 * cuBLASLt's algorithms are deterministic for a given algorithm and GPU (its split-k reductions
 * run in order), so a product gives the same bits every time it runs in a process.
 *
 * dense = activation(x kernel + bias): the bias goes into cuBLASLt's BIAS epilogue (one rounding
 * of the f32/f64 product, then the addition: the CPU's order), or, where cuBLASLt has no such
 * algorithm (f64 may not), into the epilogue kernel (products.cu). The activation always runs in
 * that kernel, with the elementwise ops' formulas: cuBLASLt's RELU epilogue is max(x, 0), which
 * the documentation does not promise keeps a NaN, and Eagle's relu does.
 *
 * The algorithm: cublasLtMatmulAlgoGetHeuristic's first answer, asked once per (device, dtype,
 * compute type, layouts, transposes, batch, epilogue, pointer alignments) and kept in a table
 * (mutex-guarded; answers "none" are kept too), which eg__cuda_product_note reads for the
 * profiler. The pointer alignments are part of the key because cuBLASLt picks kernels that need
 * the alignment of the pointers it was shown; a view at an odd offset gets its own entry. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/copy_launch.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/libraries.h"
#include "backend/cuda/products_launch.h"
#include "base/error.h"

/* The workspace cuBLASLt may use (split-k partial sums and the like), one per GPU. */
#define WORKSPACE_BYTES ((size_t)32 << 20)
/* Pointer alignments are told to cuBLASLt up to this (bytes): the most its kernels ask for. */
#define MAX_ALIGNMENT 16
/* Algorithm table: open addressing; past CACHE_LIMIT entries new shapes are searched at every
 * call instead of kept (and have no note). */
#define CACHE_SLOTS 1024
#define CACHE_LIMIT 768

/* ---- how cuBLASLt reads an operand ---- */

typedef enum source {
    IN_PLACE,      /* the tensor's own memory */
    DENSE_COPY,    /* a dense copy of the tensor (its last two axes have no unit stride) */
    BROADCAST_COPY /* a dense copy over the output's whole batch shape */
} source;

typedef struct operand {
    const eg_tensor *t;
    source source;
    int64_t rows, cols;   /* t's last two axes */
    bool col_major;       /* those axes stored column-major (a transposed view) */
    int64_t ld;           /* cuBLASLt's leading dimension */
    int64_t batch_stride; /* elements between the output's consecutive batch elements */
} operand;

/* Whether the last two axes of t, with these strides, are a matrix cuBLASLt reads as it is: unit
 * stride along one axis, the other at least as long (the CPU's blas_view). */
static bool matrix_view(const eg_tensor *t, const int64_t *strides, bool *col_major, int64_t *ld) {
    int64_t rows = t->shape[t->n_dims - 2], cols = t->shape[t->n_dims - 1];
    int64_t row_stride = strides[t->n_dims - 2], col_stride = strides[t->n_dims - 1];
    if ((col_stride == 1 || cols == 1) && row_stride >= (cols > 1 ? cols : 1)) {
        *col_major = false;
        *ld = rows == 1 ? (cols > 1 ? cols : 1) : row_stride;
        return true;
    }
    if ((row_stride == 1 || rows == 1) && col_stride >= (rows > 1 ? rows : 1)) {
        *col_major = true;
        *ld = cols == 1 ? (rows > 1 ? rows : 1) : col_stride;
        return true;
    }
    return false;
}

/* Whether batch element i of the output reads t's matrix at i * stride (t with these strides,
 * broadcast over the output's batch dims): one non-negative stride for all of them. */
static bool even_batches(const eg_tensor *t, const int64_t *strides, const eg_tensor *out,
                         int64_t *stride) {
    int out_batch = out->n_dims - 2, t_batch = t->n_dims - 2;
    int64_t step = 0, inner = 1; /* inner: batch elements per index of dim d */
    bool found = false;
    for (int d = out_batch - 1; d >= 0; d--) {
        int td = d - (out_batch - t_batch);
        int64_t s = td >= 0 && t->shape[td] != 1 ? strides[td] : 0;
        if (out->shape[d] > 1) {
            if (!found) {
                step = s; /* the dims inside are all 1: inner is 1 */
                found = true;
            } else if (s != step * inner) {
                return false;
            }
        }
        inner *= out->shape[d];
    }
    *stride = step;
    return step >= 0;
}

static void dense_strides(const eg_tensor *t, int64_t *strides) {
    int64_t s = 1;
    for (int d = t->n_dims - 1; d >= 0; d--) {
        strides[d] = s;
        s *= t->shape[d];
    }
}

/* How to read t; zero_stride: whether a batch stride of 0 (t broadcast over every batch element)
 * may be handed to cuBLASLt. */
static void plan_operand(operand *o, const eg_tensor *t, const eg_tensor *out, int64_t batches,
                         bool zero_stride) {
    o->t = t;
    o->rows = t->shape[t->n_dims - 2];
    o->cols = t->shape[t->n_dims - 1];
    int64_t stride;
    if (matrix_view(t, t->strides, &o->col_major, &o->ld) &&
        even_batches(t, t->strides, out, &stride) && (zero_stride || stride || batches <= 1)) {
        o->source = IN_PLACE;
        o->batch_stride = stride;
        return;
    }
    int64_t dense[EG_MAX_DIMS];
    dense_strides(t, dense);
    o->col_major = false;
    o->ld = o->cols;
    if (even_batches(t, dense, out, &stride) && (zero_stride || stride || batches <= 1)) {
        o->source = DENSE_COPY;
        o->batch_stride = stride;
        return;
    }
    o->source = BROADCAST_COPY;
    o->batch_stride = o->rows * o->cols;
}

/* ---- the plan of one call ---- */

typedef struct plan {
    eg_dtype dtype;
    int64_t m, n, k;
    int64_t batches;    /* the output's batch elements */
    int64_t lt_batches; /* cuBLASLt's batch count: 1 when the batch is folded into the rows */
    bool folded;
    bool transpose_a, transpose_b; /* the call's */
    bool lt_trans_a, lt_trans_b;   /* cuBLASLt's: of its A (Eagle's b) and B (Eagle's a) */
    operand a, b;
    bool zero_stride; /* a cuBLASLt batch stride is 0 */
} plan;

/* The plan of a matmul or dense call whose output is not empty and k > 0. */
static void make_plan(const eg__kernel_call *call, bool zero_stride, plan *p) {
    const eg_tensor *a = call->inputs[0], *b = call->inputs[1], *out = call->output;
    bool dense = call->op == EG__OP_DENSE; /* dense has no transposes (infer.c) */
    memset(p, 0, sizeof *p);
    p->dtype = out->dtype;
    p->transpose_a = !dense && call->attrs->transpose_a;
    p->transpose_b = !dense && call->attrs->transpose_b;
    p->m = out->shape[out->n_dims - 2];
    p->n = out->shape[out->n_dims - 1];
    p->k = a->shape[a->n_dims - (p->transpose_a ? 2 : 1)];
    p->batches = 1;
    for (int d = 0; d < out->n_dims - 2; d++) p->batches *= out->shape[d];
    plan_operand(&p->a, a, out, p->batches, true);
    plan_operand(&p->b, b, out, p->batches, true);
    p->lt_trans_b = p->a.col_major != p->transpose_a;
    p->lt_trans_a = p->b.col_major != p->transpose_b;
    p->lt_batches = p->batches;
    /* b shared by every batch element, and row i of batch element j of op(a) at (j m + i) lda:
     * one product of batches x m rows */
    if (p->batches > 1 && p->b.batch_stride == 0 && !p->lt_trans_b &&
        p->a.batch_stride == p->m * p->a.ld && p->m * p->batches <= INT32_MAX) {
        p->folded = true;
        p->lt_batches = 1;
        return;
    }
    if (!zero_stride && p->batches > 1) {
        if (p->a.batch_stride == 0) plan_operand(&p->a, a, out, p->batches, false);
        if (p->b.batch_stride == 0) plan_operand(&p->b, b, out, p->batches, false);
        p->lt_trans_b = p->a.col_major != p->transpose_a;
        p->lt_trans_a = p->b.col_major != p->transpose_b;
    }
    p->zero_stride = p->batches > 1 && (p->a.batch_stride == 0 || p->b.batch_stride == 0);
}

/* ---- the algorithm table ---- */

/* Everything cuBLASLt's choice depends on (all int64_t: no padding, compared as bytes). */
typedef struct product_key {
    int64_t ordinal, dtype, tf32, bias_epilogue, activation;
    int64_t trans_a, trans_b;               /* cuBLASLt's */
    int64_t a_rows, a_cols, a_ld, a_stride; /* cuBLASLt's A: Eagle's b */
    int64_t b_rows, b_cols, b_ld, b_stride; /* cuBLASLt's B: Eagle's a */
    int64_t c_rows, c_cols, c_stride;       /* C and D, leading dimension c_rows */
    int64_t batches;                        /* cuBLASLt's */
    int64_t align_a, align_b, align_c, align_bias;
} product_key;

typedef struct cache_entry {
    bool used;
    product_key key;
    bool found;
    cublasStatus_t status; /* the heuristic's, when found is false */
    cublasLtMatmulAlgo_t algo;
    size_t workspace_bytes;
    char note[256];
} cache_entry;

static cache_entry cache[CACHE_SLOTS];
static int cache_count;
static pthread_mutex_t cache_mutex = PTHREAD_MUTEX_INITIALIZER;

static uint64_t key_hash(const product_key *key) {
    const unsigned char *bytes = (const unsigned char *)key;
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (size_t i = 0; i < sizeof *key; i++) h = (h ^ bytes[i]) * 1099511628211ull;
    return h;
}

/* The slot holding key, or the empty slot where it would go; NULL when the table is full.
 * cache_mutex held. */
static cache_entry *cache_slot(const product_key *key) {
    for (uint64_t i = key_hash(key) % CACHE_SLOTS, probes = 0; probes < CACHE_SLOTS;
         i = (i + 1) % CACHE_SLOTS, probes++) {
        cache_entry *e = &cache[i];
        if (!e->used || memcmp(&e->key, key, sizeof *key) == 0) return e;
    }
    return NULL;
}

/* The entry of key, NULL when none is kept (entries never change once made: the pointer and
 * its note stay valid). */
static const cache_entry *cache_find(const product_key *key) {
    pthread_mutex_lock(&cache_mutex);
    const cache_entry *e = cache_slot(key);
    if (e && !e->used) e = NULL;
    pthread_mutex_unlock(&cache_mutex);
    return e;
}

/* Keeps *entry (while there is room; another thread may have kept the same key meanwhile). */
static void cache_keep(const cache_entry *entry) {
    pthread_mutex_lock(&cache_mutex);
    if (cache_count < CACHE_LIMIT) {
        cache_entry *e = cache_slot(&entry->key);
        if (e && !e->used) {
            *e = *entry;
            e->used = true;
            cache_count++;
        }
    }
    pthread_mutex_unlock(&cache_mutex);
}

/* The largest power of two dividing the address, up to MAX_ALIGNMENT. */
static int64_t alignment_of(const void *pointer) {
    uintptr_t address = (uintptr_t)pointer;
    uintptr_t lowest = address & (~address + 1);
    return address == 0 || lowest >= MAX_ALIGNMENT ? MAX_ALIGNMENT : (int64_t)lowest;
}

/* The alignment a batch stride of this many elements keeps (MAX_ALIGNMENT for 0). */
static int64_t stride_alignment(int64_t elements, size_t size) {
    return alignment_of((const void *)(uintptr_t)((uint64_t)elements * size));
}

static int64_t lower(int64_t x, int64_t y) {
    return x < y ? x : y;
}

/* The operand's data as cuBLASLt will read it: its own (in place) or a copy's (from the
 * allocator: 512-byte aligned). */
static int64_t operand_alignment(const operand *o) {
    return o->source == IN_PLACE ? alignment_of(eg__data(o->t)) : MAX_ALIGNMENT;
}

/* The bias as the epilogue reads it: dense, its own memory or a copy. */
static int64_t bias_alignment(const eg_tensor *bias) {
    return eg__is_contiguous(bias) ? alignment_of(eg__data(bias)) : MAX_ALIGNMENT;
}

static product_key make_key(const eg__cuda_device *d, const plan *p, const eg_tensor *out,
                            bool bias_epilogue, int64_t align_bias, int activation) {
    product_key key;
    memset(&key, 0, sizeof key);
    key.ordinal = d->ordinal;
    key.dtype = p->dtype;
    key.tf32 = p->dtype == EG_DTYPE_F32 && eg__cuda_tf32_allowed();
    key.bias_epilogue = bias_epilogue;
    key.activation = activation;
    key.trans_a = p->lt_trans_a;
    key.trans_b = p->lt_trans_b;
    /* the column-major matrix an operand's memory holds: (cols, rows) of a row-major one */
    key.a_rows = p->b.col_major ? p->b.rows : p->b.cols;
    key.a_cols = p->b.col_major ? p->b.cols : p->b.rows;
    key.a_ld = p->b.ld;
    key.b_rows = p->a.col_major ? p->a.rows : p->a.cols;
    key.b_cols = p->a.col_major ? p->a.cols : p->a.rows;
    key.b_ld = p->a.ld;
    key.c_rows = p->n;
    key.c_cols = p->m;
    if (p->folded) {
        key.b_cols *= p->batches; /* not transposed: its columns are op(a)'s rows */
        key.c_cols *= p->batches;
    }
    key.batches = p->lt_batches;
    if (key.batches > 1) {
        key.a_stride = p->b.batch_stride;
        key.b_stride = p->a.batch_stride;
        key.c_stride = p->m * p->n;
    }
    /* every batch element's matrix is as aligned as the first only if the stride keeps it so */
    size_t size = eg__dtype_size(p->dtype);
    key.align_a = lower(operand_alignment(&p->b), stride_alignment(key.a_stride, size));
    key.align_b = lower(operand_alignment(&p->a), stride_alignment(key.b_stride, size));
    key.align_c = lower(alignment_of(eg__data(out)), stride_alignment(key.c_stride, size));
    key.align_bias = bias_epilogue ? align_bias : 0;
    return key;
}

/* ---- cuBLASLt descriptors ---- */

typedef struct descriptors {
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t a, b, c;
} descriptors;

static void destroy_descriptors(descriptors *x) {
    if (x->op) eg__cuda_fn(cublasLtMatmulDescDestroy)(x->op);
    if (x->a) eg__cuda_fn(cublasLtMatrixLayoutDestroy)(x->a);
    if (x->b) eg__cuda_fn(cublasLtMatrixLayoutDestroy)(x->b);
    if (x->c) eg__cuda_fn(cublasLtMatrixLayoutDestroy)(x->c);
    memset(x, 0, sizeof *x);
}

static cublasStatus_t make_layout(cublasLtMatrixLayout_t *layout, cudaDataType type, int64_t rows,
                                  int64_t cols, int64_t ld, int64_t batches, int64_t stride) {
    cublasStatus_t s =
        eg__cuda_fn(cublasLtMatrixLayoutCreate)(layout, type, (uint64_t)rows, (uint64_t)cols, ld);
    if (s != CUBLAS_STATUS_SUCCESS || batches <= 1) return s;
    int32_t count = (int32_t)batches;
    s = eg__cuda_fn(cublasLtMatrixLayoutSetAttribute)(*layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT,
                                                      &count, sizeof count);
    if (s != CUBLAS_STATUS_SUCCESS) return s;
    return eg__cuda_fn(cublasLtMatrixLayoutSetAttribute)(
        *layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride);
}

/* The descriptors of key (bias: the epilogue's, when key has one). */
static cublasStatus_t make_descriptors(const product_key *key, const void *bias, descriptors *x) {
    memset(x, 0, sizeof *x);
    bool f64 = key->dtype == EG_DTYPE_F64;
    cudaDataType type = f64 ? CUDA_R_64F : CUDA_R_32F;
    cublasComputeType_t compute = f64         ? CUBLAS_COMPUTE_64F
                                  : key->tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32
                                              : CUBLAS_COMPUTE_32F;
    cublasStatus_t s = eg__cuda_fn(cublasLtMatmulDescCreate)(&x->op, compute, type);
    int32_t trans_a = key->trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    int32_t trans_b = key->trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    uint32_t epilogue = key->bias_epilogue ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
    if (s == CUBLAS_STATUS_SUCCESS)
        s = eg__cuda_fn(cublasLtMatmulDescSetAttribute)(x->op, CUBLASLT_MATMUL_DESC_TRANSA,
                                                        &trans_a, sizeof trans_a);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = eg__cuda_fn(cublasLtMatmulDescSetAttribute)(x->op, CUBLASLT_MATMUL_DESC_TRANSB,
                                                        &trans_b, sizeof trans_b);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = eg__cuda_fn(cublasLtMatmulDescSetAttribute)(x->op, CUBLASLT_MATMUL_DESC_EPILOGUE,
                                                        &epilogue, sizeof epilogue);
    if (s == CUBLAS_STATUS_SUCCESS && key->bias_epilogue)
        s = eg__cuda_fn(cublasLtMatmulDescSetAttribute)(x->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                        &bias, sizeof bias);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = make_layout(&x->a, type, key->a_rows, key->a_cols, key->a_ld, key->batches,
                        key->a_stride);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = make_layout(&x->b, type, key->b_rows, key->b_cols, key->b_ld, key->batches,
                        key->b_stride);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = make_layout(&x->c, type, key->c_rows, key->c_cols, key->c_rows, key->batches,
                        key->c_stride);
    if (s != CUBLAS_STATUS_SUCCESS) destroy_descriptors(x);
    return s;
}

/* ---- notes for the profiler ---- */

/* cublasLtMatmulTile_t's first names (the classic tiles); later ones are shown by number. */
static const char *const tile_names[] = {
    "undefined", "8x8",    "8x16",   "16x8",   "8x32",    "16x16",   "32x8",    "8x64",
    "16x32",     "32x16",  "64x8",   "32x32",  "32x64",   "64x32",   "32x128",  "64x64",
    "128x32",    "64x128", "128x64", "64x256", "128x128", "256x64",  "64x512",  "128x256",
    "256x128",   "512x64", "64x96",  "96x64",  "96x128",  "128x160", "160x128", "192x128",
    "128x192",   "128x96", "32x256", "256x32"};

static void describe_entry(cache_entry *e) {
    int32_t id = -1, split_k = 1;
    uint32_t tile = 0, stages = 0;
    size_t written;
    const cublasLtMatmulAlgo_t *algo = &e->algo;
    (void)eg__cuda_fn(cublasLtMatmulAlgoConfigGetAttribute)(algo, CUBLASLT_ALGO_CONFIG_ID, &id,
                                                            sizeof id, &written);
    (void)eg__cuda_fn(cublasLtMatmulAlgoConfigGetAttribute)(algo, CUBLASLT_ALGO_CONFIG_TILE_ID,
                                                            &tile, sizeof tile, &written);
    (void)eg__cuda_fn(cublasLtMatmulAlgoConfigGetAttribute)(algo, CUBLASLT_ALGO_CONFIG_STAGES_ID,
                                                            &stages, sizeof stages, &written);
    (void)eg__cuda_fn(cublasLtMatmulAlgoConfigGetAttribute)(algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM,
                                                            &split_k, sizeof split_k, &written);
    char tile_text[32];
    if (tile < sizeof tile_names / sizeof *tile_names)
        snprintf(tile_text, sizeof tile_text, "%s", tile_names[tile]);
    else
        snprintf(tile_text, sizeof tile_text, "id %u", tile);
    static const char *const activations[] = {"", "relu", "sigmoid", "tanh"};
    const product_key *k = &e->key;
    char after[64] = "";
    if (k->activation > 0 && k->activation < 4)
        snprintf(after, sizeof after, ", then the %s kernel", activations[k->activation]);
    char batch[48] = "";
    if (k->batches > 1) snprintf(batch, sizeof batch, ", %lld batches", (long long)k->batches);
    snprintf(e->note, sizeof e->note,
             "cublasLt algo %d, tile %s, stages id %u, split-k %d, epilogue %s%s, %s%s", id,
             tile_text, stages, split_k, k->bias_epilogue ? "bias" : "default", after,
             k->dtype == EG_DTYPE_F64 ? "f64"
             : k->tf32                ? "tf32"
                                      : "f32",
             batch);
}

/* ---- the library handle and workspace ---- */

static bool workspace_tried[EG__MAX_DEVICES_PER_KIND];

void eg__cuda_products_reset(int index) {
    if (index >= 0 && index < EG__MAX_DEVICES_PER_KIND) workspace_tried[index] = false;
}

static eg_status blas_error(const eg__kernel_call *call, const eg__cuda_device *d, cublasStatus_t s,
                            const char *what) {
    return eg__op_error(call->op, EG_ERR_DEVICE, "%s on %s: %s", what, d->device->name,
                        eg__cuda_fn(cublasLtGetStatusName)(s));
}

/* d's cuBLASLt handle and workspace, made at first use. */
static eg_status library(const eg__kernel_call *call, eg__cuda_device *d, cublasLtHandle_t *handle,
                         void **workspace, size_t *workspace_bytes) {
    const char *problem = eg__cuda_open_blas_lt();
    if (problem)
        return eg__op_error(call->op, EG_ERR_UNSUPPORTED, "on %s: cuBLASLt is unavailable: %s",
                            d->device->name, problem);
    eg_status status = EG_OK;
    pthread_mutex_lock(&d->mutex);
    if (!d->blas_lt) {
        cublasLtHandle_t h = NULL;
        cublasStatus_t s = eg__cuda_fn(cublasLtCreate)(&h);
        if (s == CUBLAS_STATUS_SUCCESS)
            d->blas_lt = h;
        else
            status = blas_error(call, d, s, "cublasLtCreate");
    }
    if (status == EG_OK && !d->workspace && !workspace_tried[d->device->index]) {
        workspace_tried[d->device->index] = true;
        void *w = NULL;
        if (cudaMalloc(&w, WORKSPACE_BYTES) == cudaSuccess) {
            d->workspace = w;
            d->workspace_bytes = WORKSPACE_BYTES;
        } else {
            (void)cudaGetLastError(); /* then without one: fewer algorithms, still correct */
        }
    }
    *handle = d->blas_lt;
    *workspace = d->workspace;
    *workspace_bytes = d->workspace ? d->workspace_bytes : 0;
    pthread_mutex_unlock(&d->mutex);
    return status;
}

/* The algorithm for key (x its descriptors): from the table, or asked of cuBLASLt and kept. */
static eg_status choose(const eg__kernel_call *call, const eg__cuda_device *d,
                        cublasLtHandle_t handle, const product_key *key, const descriptors *x,
                        size_t workspace_bytes, cache_entry *chosen) {
    const cache_entry *kept = cache_find(key);
    if (kept) {
        *chosen = *kept;
        return EG_OK;
    }
    memset(chosen, 0, sizeof *chosen);
    chosen->key = *key;
    cublasLtMatmulPreference_t preference = NULL;
    cublasStatus_t s = eg__cuda_fn(cublasLtMatmulPreferenceCreate)(&preference);
    uint64_t max_workspace = workspace_bytes;
    uint32_t alignments[4] = {(uint32_t)key->align_a, (uint32_t)key->align_b,
                              (uint32_t)key->align_c, (uint32_t)key->align_c};
    const cublasLtMatmulPreferenceAttributes_t alignment_attributes[4] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    if (s == CUBLAS_STATUS_SUCCESS)
        s = eg__cuda_fn(cublasLtMatmulPreferenceSetAttribute)(
            preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &max_workspace,
            sizeof max_workspace);
    for (int i = 0; i < 4 && s == CUBLAS_STATUS_SUCCESS; i++)
        s = eg__cuda_fn(cublasLtMatmulPreferenceSetAttribute)(preference, alignment_attributes[i],
                                                              &alignments[i], sizeof alignments[i]);
    cublasLtMatmulHeuristicResult_t result;
    memset(&result, 0, sizeof result);
    int returned = 0;
    if (s == CUBLAS_STATUS_SUCCESS)
        s = eg__cuda_fn(cublasLtMatmulAlgoGetHeuristic)(handle, x->op, x->a, x->b, x->c, x->c,
                                                        preference, 1, &result, &returned);
    if (preference) eg__cuda_fn(cublasLtMatmulPreferenceDestroy)(preference);
    if (s == CUBLAS_STATUS_SUCCESS && returned > 0 && result.state == CUBLAS_STATUS_SUCCESS) {
        chosen->found = true;
        chosen->algo = result.algo;
        chosen->workspace_bytes = result.workspaceSize;
        describe_entry(chosen);
    } else if (s == CUBLAS_STATUS_SUCCESS || s == CUBLAS_STATUS_NOT_SUPPORTED ||
               s == CUBLAS_STATUS_INVALID_VALUE) {
        /* no algorithm for this configuration: kept as such, the caller tries another */
        chosen->status = s == CUBLAS_STATUS_SUCCESS && returned > 0 ? result.state
                         : s == CUBLAS_STATUS_SUCCESS               ? CUBLAS_STATUS_NOT_SUPPORTED
                                                                    : s;
    } else {
        return blas_error(call, d, s, "cublasLtMatmulAlgoGetHeuristic");
    }
    cache_keep(chosen);
    return EG_OK;
}

/* ---- running a product ---- */

/* t broadcast over out's batch shape, dense: (batches..., rows, cols). */
static const void *broadcast_copy(eg__cuda_device *d, const eg_tensor *t, const eg_tensor *out,
                                  int64_t batches, eg__cuda_scratch *scratch) {
    int out_batch = out->n_dims - 2, t_batch = t->n_dims - 2;
    int64_t shape[EG_MAX_DIMS], strides[EG_MAX_DIMS];
    for (int dim = 0; dim < out_batch; dim++) {
        int td = dim - (out_batch - t_batch);
        shape[dim] = out->shape[dim];
        strides[dim] = td >= 0 && t->shape[td] != 1 ? t->strides[td] : 0;
    }
    for (int i = 0; i < 2; i++) {
        shape[out_batch + i] = t->shape[t_batch + i];
        strides[out_batch + i] = t->strides[t_batch + i];
    }
    int64_t n = batches * shape[out_batch] * shape[out_batch + 1];
    size_t size = eg__dtype_size(t->dtype);
    void *dst = eg__cuda_scratch_alloc(d, (size_t)n * size, scratch);
    if (!dst) return NULL;
    eg__cuda_strided_copy(dst, eg__data(t), size, out->n_dims, shape, strides, n,
                          eg__cuda_stream(d));
    return dst;
}

static const void *operand_data(eg__cuda_device *d, const operand *o, const eg_tensor *out,
                                int64_t batches, eg__cuda_scratch *scratch) {
    scratch->pointer = scratch->handle = NULL;
    switch (o->source) {
    case IN_PLACE:
        return eg__data(o->t);
    case DENSE_COPY:
        return eg__cuda_contiguous(d, o->t, scratch);
    default:
        return broadcast_copy(d, o->t, out, batches, scratch);
    }
}

static int call_activation(const eg__kernel_call *call) {
    return call->op == EG__OP_DENSE ? (int)call->attrs->ints[0] : EG__CUDA_ACTIVATION_NONE;
}

/* C = 0 (+ bias, activation): k = 0, where cuBLASLt has nothing to multiply. */
static eg_status empty_sum(const eg__kernel_call *call, eg__cuda_device *d, int activation) {
    eg_tensor *out = call->output;
    size_t bytes = (size_t)out->n_elems * eg__dtype_size(out->dtype);
    cudaError_t e = cudaMemsetAsync(eg__data(out), 0, bytes, eg__cuda_stream(d));
    if (e != cudaSuccess) return eg__cuda_error(e, d->device, "matmul memset");
    const eg_tensor *bias = call->op == EG__OP_DENSE ? call->inputs[2] : NULL;
    int64_t cols = out->shape[out->n_dims - 1];
    eg__cuda_product_epilogue(out->dtype == EG_DTYPE_F64, eg__data(out), out->n_elems / cols, cols,
                              bias ? eg__data(bias) : NULL, bias ? bias->strides[0] : 0, activation,
                              eg__cuda_stream(d));
    return eg__cuda_launched(call);
}

/* x: (..., M, K) or its transpose, w: (..., K, N) or its transpose -> (..., M, N); dense: x (M,
 * K), kernel (K, N), bias (N,) -> activation(x kernel + bias) (M, N). */
static eg_status cuda_product(const eg__kernel_call *call) {
    eg__cuda_device *d = eg__cuda_call_device(call);
    if (!d) return eg_last_status();
    eg_tensor *out = call->output;
    if (!eg__is_contiguous(out))
        return eg__op_error(call->op, EG_ERR_INTERNAL, "on %s: the result must be dense",
                            d->device->name);
    int activation = call_activation(call);
    if (activation < EG__CUDA_ACTIVATION_NONE || activation > EG__CUDA_ACTIVATION_TANH)
        return eg__op_error(call->op, EG_ERR_INVALID_ARGUMENT,
                            "activation %d is not one of none, relu, sigmoid, tanh", activation);
    if (out->n_elems == 0) return eg__cuda_launched(call);
    const eg_tensor *a = call->inputs[0];
    bool dense = call->op == EG__OP_DENSE;
    int64_t k = a->shape[a->n_dims - (!dense && call->attrs->transpose_a ? 2 : 1)];
    if (k == 0) return empty_sum(call, d, activation);

    cublasLtHandle_t handle = NULL;
    void *workspace = NULL;
    size_t workspace_bytes = 0;
    eg_status status = library(call, d, &handle, &workspace, &workspace_bytes);
    if (status != EG_OK) return status;

    /* the bias dense first, so the search sees the pointer the epilogue will read */
    const eg_tensor *bias_tensor = dense ? call->inputs[2] : NULL;
    eg__cuda_scratch bias_scratch = {0}, a_scratch = {0}, b_scratch = {0};
    const void *bias = NULL;
    if (bias_tensor && !(bias = eg__cuda_contiguous(d, bias_tensor, &bias_scratch)))
        return eg_last_status();

    plan p;
    product_key key;
    descriptors x = {0};
    cache_entry chosen = {0};
    bool bias_epilogue = false;
    bool retry = false; /* the first plan hands cuBLASLt a batch stride of 0 */
    for (int attempt = 0; attempt < 2 && !chosen.found && status == EG_OK; attempt++) {
        if (attempt == 1 && !retry) break; /* it would be the same plan again */
        make_plan(call, attempt == 0, &p);
        if (attempt == 0) retry = p.zero_stride;
        if (p.n > INT32_MAX || p.k > INT32_MAX || p.m * (p.folded ? p.batches : 1) > INT32_MAX ||
            p.lt_batches > INT32_MAX) {
            status = eg__op_error(call->op, EG_ERR_UNSUPPORTED,
                                  "on %s: a dimension beyond 2^31 - 1 (cuBLASLt's limit)",
                                  d->device->name);
            break;
        }
        for (int with_bias = bias ? 1 : 0; with_bias >= 0 && !chosen.found; with_bias--) {
            key = make_key(d, &p, out, with_bias, alignment_of(bias), activation);
            cublasStatus_t s = make_descriptors(&key, bias, &x);
            if (s != CUBLAS_STATUS_SUCCESS) {
                status = blas_error(call, d, s, "cuBLASLt descriptors");
                break;
            }
            status = choose(call, d, handle, &key, &x, workspace_bytes, &chosen);
            if (status != EG_OK || !chosen.found) destroy_descriptors(&x);
            if (status != EG_OK) break;
            bias_epilogue = with_bias;
        }
    }
    if (status == EG_OK && !chosen.found)
        status = eg__op_error(call->op, EG_ERR_UNSUPPORTED,
                              "on %s: cuBLASLt has no algorithm for %s (%lld x %lld) x (%lld x "
                              "%lld), %lld batches (%s)",
                              d->device->name, eg_dtype_name(p.dtype), (long long)p.m,
                              (long long)p.k, (long long)p.k, (long long)p.n, (long long)p.batches,
                              eg__cuda_fn(cublasLtGetStatusName)(chosen.status));
    if (status != EG_OK) {
        eg__cuda_scratch_free(&bias_scratch);
        return status;
    }

    const void *a_data = operand_data(d, &p.a, out, p.batches, &a_scratch);
    const void *b_data = a_data ? operand_data(d, &p.b, out, p.batches, &b_scratch) : NULL;
    if (a_data && b_data) {
        float one_f = 1.0f, zero_f = 0.0f;
        double one_d = 1.0, zero_d = 0.0;
        bool f64 = p.dtype == EG_DTYPE_F64;
        const void *alpha = f64 ? (const void *)&one_d : (const void *)&one_f;
        const void *beta = f64 ? (const void *)&zero_d : (const void *)&zero_f;
        if (chosen.workspace_bytes > workspace_bytes) /* chosen when the device had more */
            status = eg__op_error(call->op, EG_ERR_STATE,
                                  "on %s: the product's algorithm needs a %zu-byte workspace, "
                                  "the device has %zu",
                                  d->device->name, (size_t)chosen.workspace_bytes, workspace_bytes);
        cublasStatus_t s =
            status != EG_OK
                ? CUBLAS_STATUS_SUCCESS
                : eg__cuda_fn(cublasLtMatmul)(handle, x.op, alpha, b_data, x.a, a_data, x.b, beta,
                                              eg__data(out), x.c, eg__data(out), x.c, &chosen.algo,
                                              chosen.workspace_bytes ? workspace : NULL,
                                              chosen.workspace_bytes, eg__cuda_stream(d));
        if (status == EG_OK && s != CUBLAS_STATUS_SUCCESS) {
            status = blas_error(call, d, s, "cublasLtMatmul");
        } else if (status == EG_OK &&
                   (activation != EG__CUDA_ACTIVATION_NONE || (bias && !bias_epilogue))) {
            int64_t cols = p.n;
            eg__cuda_product_epilogue(f64, eg__data(out), out->n_elems / cols, cols,
                                      bias_epilogue ? NULL : bias, 1, activation,
                                      eg__cuda_stream(d));
        }
    } else {
        status = eg_last_status();
    }
    destroy_descriptors(&x);
    eg__cuda_scratch_free(&a_scratch);
    eg__cuda_scratch_free(&b_scratch);
    eg__cuda_scratch_free(&bias_scratch);
    return status == EG_OK ? eg__cuda_launched(call) : status;
}

const char *eg__cuda_product_note(const eg__kernel_call *call) {
    if (!call || (call->op != EG__OP_MATMUL && call->op != EG__OP_DENSE) || !call->output ||
        call->output->device->type != EG_DEVICE_CUDA || call->output->n_elems == 0)
        return NULL;
    const eg_tensor *a = call->inputs[0], *out = call->output;
    bool dense = call->op == EG__OP_DENSE;
    int64_t k = a->shape[a->n_dims - (!dense && call->attrs->transpose_a ? 2 : 1)];
    if (k == 0) return "k = 0: a memset and Eagle's epilogue kernel";
    int activation = call_activation(call);
    const eg_tensor *bias = dense ? call->inputs[2] : NULL;
    const eg__cuda_device *d = eg__cuda_of(out->device);
    plan p;
    bool retry = false;
    for (int attempt = 0; attempt < 2; attempt++) {
        if (attempt == 1 && !retry) break;
        make_plan(call, attempt == 0, &p);
        if (attempt == 0) retry = p.zero_stride;
        for (int with_bias = bias ? 1 : 0; with_bias >= 0; with_bias--) {
            product_key key =
                make_key(d, &p, out, with_bias, bias ? bias_alignment(bias) : 0, activation);
            const cache_entry *e = cache_find(&key);
            if (!e) return NULL; /* not run yet (or not kept) */
            if (e->found) return e->note;
        }
    }
    return NULL;
}

void eg__cuda_register_products(eg__cuda_kernel_table *table) {
    eg__cuda_register(table, EG__OP_MATMUL, cuda_product, EG__CUDA_FLOAT_DTYPES, true);
    eg__cuda_register(table, EG__OP_DENSE, cuda_product, EG__CUDA_FLOAT_DTYPES, true);
}
