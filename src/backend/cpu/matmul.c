/* CPU matmul: Eagle's own f32 GEMM (gemm.c) where the CPU has AVX2/FMA, OpenBLAS otherwise and
 * for f64; bf16 and f16 on gemm_lowp.c (f32 accumulation, one rounding of each result) always.
 * Strided views whose last two axes have a unit stride on either side are passed as they are (a
 * transposed view becomes a transpose flag), so the backward pass's A^T·G and G·B^T make no copies.
 *
 * Results must not depend on the number of threads. Eagle's GEMM gives every element the same
 * bits however C is split, so it splits C into one part per thread. OpenBLAS's own threading
 * blocks the K axis differently for different thread counts (so the bits change): it always runs
 * single-threaded, on fixed TILE_ROWS x TILE_COLS tiles of the output that Eagle's thread pool
 * shares out, every tile the same call whichever thread makes it. */
#include <cblas.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "backend/cpu/gemm.h"
#include "backend/cpu/gemm_lowp.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/vecmath.h"
#include "base/cpu_features.h"
#include "base/error.h"
#include "eagle/nn.h"
#include "eagle/runtime.h"

static char blas_description[512];

static void describe_blas(void) {
    snprintf(blas_description, sizeof blas_description, "%s%s; bf16 matmul: %s; f16 matmul: %s",
             openblas_get_config(),
             !eg__gemm_f32_available() ? ""
             : eg__cpu_avx512_active() ? "; f32 matmul: Eagle's GEMM, AVX-512 micro-kernel"
                                       : "; f32 matmul: Eagle's AVX2/FMA GEMM",
             eg__gemm_lowp_path(EG_DTYPE_BF16), eg__gemm_lowp_path(EG_DTYPE_F16));
}

#define TILE_ROWS 64
/* Rows of a bf16 / f16 tile: whole 32-row blocks of the low-precision kernels. */
#define LOWP_TILE_ROWS 64
/* Rows of a tile on Eagle's GEMM, which gives the same bits for any tiling: a whole number of
 * micro-tiles (64 rows would end every tile in a partial one). */
#define OWN_TILE_ROWS (11 * EG_GEMM_MR)
#define TILE_COLS     256
/* Columns of a tile on Eagle's GEMM: whole rows up to this width. A graph's fused optimizer
 * update then reads each tile's parameters and moments as one contiguous range; at 256 columns
 * of a 512-wide weight it read 66 runs of 1 KiB, 2 KiB apart, and Adam ran at half the speed
 * of its contiguous pass (perf, 784-512-512-10 graph step). */
#define OWN_TILE_COLS_MAX 512
/* Multiply-adds per parallel chunk below which splitting does not pay. */
#define MIN_CHUNK_WORK (1 << 20)

/* OpenBLAS's pthread build starts its server threads when it is loaded, before any of Eagle's
 * code runs, and they spin in sched_yield for ~50-85 ms before sleeping (2-5 % of a short run's
 * samples, on the core Eagle's second thread wants). Setting one thread does not stop threads
 * that exist; blas_thread_shutdown_ (what OpenBLAS's own fork handler calls) does, and with one
 * thread OpenBLAS runs every call on its caller and starts none again. Weak: other BLAS builds
 * (OpenMP, serial) do not have it, and then there is nothing to stop. */
extern int blas_thread_shutdown_(void) __attribute__((weak));

static void blas_single_thread(void) {
    openblas_set_num_threads(1);
    if (blas_thread_shutdown_) blas_thread_shutdown_();
}
static pthread_once_t blas_once = PTHREAD_ONCE_INIT;

void eg__blas_single_threaded(void) {
    pthread_once(&blas_once, blas_single_thread);
}

/* Called by eg_set_num_threads: Eagle's pool does the threading, BLAS stays at one thread. */
void eg__blas_set_threads(int n);
void eg__blas_set_threads(int n) {
    (void)n;
    eg__blas_single_threaded();
}

const char *eg_blas_info(void) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, describe_blas);
    return blas_description;
}

/* How BLAS should read the last two axes of t (rows x cols as stored in t). */
typedef struct blas_operand {
    bool transposed; /* stored column-major: BLAS reads it transposed */
    int64_t leading; /* leading dimension in elements */
} blas_operand;

static bool blas_view(const eg_tensor *t, blas_operand *op) {
    int64_t rows = t->shape[t->n_dims - 2], cols = t->shape[t->n_dims - 1];
    int64_t row_stride = t->strides[t->n_dims - 2], col_stride = t->strides[t->n_dims - 1];
    if ((col_stride == 1 || cols == 1) && row_stride >= (cols > 1 ? cols : 1)) {
        op->transposed = false;
        op->leading = row_stride > 0 ? row_stride : 1;
        if (rows == 1) op->leading = cols > 1 ? cols : 1;
        return true;
    }
    if ((row_stride == 1 || rows == 1) && col_stride >= (rows > 1 ? rows : 1)) {
        op->transposed = true;
        op->leading = col_stride > 0 ? col_stride : 1;
        if (cols == 1) op->leading = rows > 1 ? rows : 1;
        return true;
    }
    return false;
}

/* Offset (elements) of batch element `batch` of t, with broadcasting over the output's batch
 * shape. */
static int64_t batch_offset(const eg_tensor *t, const eg_tensor *out, int64_t batch) {
    int out_batch_dims = out->n_dims - 2, t_batch_dims = t->n_dims - 2;
    int64_t offset = 0;
    for (int d = out_batch_dims - 1; d >= 0; d--) {
        int64_t index = batch % out->shape[d];
        batch /= out->shape[d];
        int td = d - (out_batch_dims - t_batch_dims);
        if (td >= 0 && t->shape[td] != 1) offset += index * t->strides[td];
    }
    return offset;
}

typedef struct matmul_job {
    const eg_tensor *a, *b;
    eg_tensor *out;
    int64_t lda, ldb, m, n, k, row_tiles, col_tiles;
    int64_t tile_cols; /* columns of a tile (tile_cols_for) */
    bool trans_a, trans_b;
    /* epilogue: bias (a 1-d tensor of n elements, or NULL) and activation (EG__OP_COUNT: none) */
    const eg_tensor *bias;
    eg__op activation;
    /* A fast-math dense (eagle/ops.h: f32 sigmoid or tanh): activation is then EG__OP_COUNT and
     * this vecmath function is applied to each tile or part after the GEMM's bias epilogue (the
     * epilogue's own activations are exact; gemm.c is not this file's); -1: none. The same bits
     * as the unfused product, add and fast activation, however C is split. */
    int fast_activation;
    /* Eagle's GEMM: each batch element is cut into parts_m x parts_n parts */
    bool own;         /* Eagle's GEMM (own_gemm), else OpenBLAS tiles */
    bool lowp;        /* a bf16 or f16 product (gemm_lowp.c; own is then set too) */
    eg_dtype compute; /* its dtype: the operands', or attrs->compute_dtype (low_precision) */
    int64_t tile_rows;
    int64_t parts_m, parts_n, part_rows, part_cols;
    atomic_bool failed;
} matmul_job;

/* Eagle's GEMM problem of batch element `batch` of the job (all of C), writing to c (row stride
 * n). c is passed in: a tile consumer's output has no memory of its own. */
static eg__gemm_f32 own_problem(const matmul_job *j, int64_t batch, float *c) {
    return (eg__gemm_f32){
        .m = j->m,
        .n = j->n,
        .k = j->k,
        .a = (const float *)eg__data(j->a) + batch_offset(j->a, j->out, batch),
        .a_row = j->trans_a ? 1 : j->lda,
        .a_col = j->trans_a ? j->lda : 1,
        .b = (const float *)eg__data(j->b) + batch_offset(j->b, j->out, batch),
        .b_row = j->trans_b ? 1 : j->ldb,
        .b_col = j->trans_b ? j->ldb : 1,
        .c = c,
        .ldc = j->n,
        .bias = j->bias ? (const float *)eg__data(j->bias) : NULL,
        .bias_stride = j->bias ? j->bias->strides[0] : 0,
        .activation = j->activation,
    };
}

/* The low-precision problem of batch element `batch` (all of C), writing to c (row stride n). */
static eg__gemm_lowp lowp_problem(const matmul_job *j, int64_t batch, void *c) {
    /* f32 operands (a low-precision product's master weights) are rounded as they are read */
    bool a32 = j->a->dtype == EG_DTYPE_F32, b32 = j->b->dtype == EG_DTYPE_F32;
    const char *a = (const char *)eg__data(j->a) +
                    (size_t)batch_offset(j->a, j->out, batch) * eg_dtype_size(j->a->dtype);
    const char *b = (const char *)eg__data(j->b) +
                    (size_t)batch_offset(j->b, j->out, batch) * eg_dtype_size(j->b->dtype);
    return (eg__gemm_lowp){
        .dtype = j->compute,
        .m = j->m,
        .n = j->n,
        .k = j->k,
        .a = a32 ? NULL : (const uint16_t *)a,
        .a32 = a32 ? (const float *)a : NULL,
        .a_row = j->trans_a ? 1 : j->lda,
        .a_col = j->trans_a ? j->lda : 1,
        .b = b32 ? NULL : (const uint16_t *)b,
        .b32 = b32 ? (const float *)b : NULL,
        .b_row = j->trans_b ? 1 : j->ldb,
        .b_col = j->trans_b ? j->ldb : 1,
        .c_dtype = j->out->dtype,
        .c = c,
        .ldc = j->n,
        .bias = j->bias ? eg__data(j->bias) : NULL,
        .bias_dtype = j->bias ? j->bias->dtype : EG_DTYPE_F32,
        .bias_stride = j->bias ? j->bias->strides[0] : 0,
        .activation = j->activation,
    };
}

/* The fast activation on rows x cols f32 elements at c, rows ldc elements apart. */
static void apply_fast_activation(const matmul_job *j, char *c, int64_t ldc, int64_t rows,
                                  int64_t cols) {
    if (j->fast_activation < 0) return;
    for (int64_t r = 0; r < rows; r++) {
        float *row = (float *)c + r * ldc;
        eg__vecmath_f32((eg__vecmath_fn)j->fast_activation, cols, row, row);
    }
}

/* Output tile `task` ((batch, row tile, column tile) in row-major order) into c, whose rows are
 * ldc elements apart, epilogue included: the same computation wherever c is. On Eagle's GEMM the
 * tile is a sub-problem with the same k, whose elements have the bits of the whole product's
 * (gemm.h); false when its packing buffers cannot be allocated. */
static bool compute_tile(const matmul_job *j, int64_t task, char *c, int64_t ldc) {
    int64_t per_batch = j->row_tiles * j->col_tiles;
    size_t size = eg_dtype_size(j->out->dtype);
    int64_t batch = task / per_batch, tile = task % per_batch;
    int64_t i0 = tile / j->col_tiles * j->tile_rows, j0 = tile % j->col_tiles * j->tile_cols;
    int rows = (int)(j->m - i0 < j->tile_rows ? j->m - i0 : j->tile_rows);
    int cols = (int)(j->n - j0 < j->tile_cols ? j->n - j0 : j->tile_cols);
    if (j->lowp) {
        eg__gemm_lowp g = lowp_problem(j, batch, c);
        g.m = rows;
        g.n = cols;
        if (g.a32)
            g.a32 += i0 * g.a_row;
        else
            g.a += i0 * g.a_row;
        if (g.b32)
            g.b32 += j0 * g.b_col;
        else
            g.b += j0 * g.b_col;
        g.ldc = ldc;
        if (g.bias)
            g.bias =
                (const char *)g.bias + (size_t)(j0 * g.bias_stride) * eg_dtype_size(g.bias_dtype);
        if (!eg__gemm_lowp_range(&g, 0, rows, 0, cols)) return false;
        apply_fast_activation(j, c, ldc, rows, cols);
        return true;
    }
    if (j->own) {
        eg__gemm_f32 g = own_problem(j, batch, (float *)c);
        g.m = rows;
        g.n = cols;
        g.a += i0 * g.a_row;
        g.b += j0 * g.b_col;
        g.ldc = ldc;
        if (g.bias) g.bias += j0 * g.bias_stride;
        if (!eg__gemm_f32_range(&g, 0, rows, 0, cols)) return false;
        apply_fast_activation(j, c, ldc, rows, cols);
        return true;
    }
    /* rows i0.. of op(A) and columns j0.. of op(B) in this batch element */
    int64_t ao = batch_offset(j->a, j->out, batch) + (j->trans_a ? i0 : i0 * j->lda);
    int64_t bo = batch_offset(j->b, j->out, batch) + (j->trans_b ? j0 * j->ldb : j0);
    const char *a = (const char *)eg__data(j->a) + (size_t)ao * size;
    const char *b = (const char *)eg__data(j->b) + (size_t)bo * size;
    if (j->k == 0) {
        for (int r = 0; r < rows; r++) memset(c + (size_t)(r * ldc) * size, 0, (size_t)cols * size);
    } else {
        enum CBLAS_TRANSPOSE ta = j->trans_a ? CblasTrans : CblasNoTrans;
        enum CBLAS_TRANSPOSE tb = j->trans_b ? CblasTrans : CblasNoTrans;
        if (j->out->dtype == EG_DTYPE_F32)
            cblas_sgemm(CblasRowMajor, ta, tb, rows, cols, (int)j->k, 1.0f, (const float *)a,
                        (int)j->lda, (const float *)b, (int)j->ldb, 0.0f, (float *)c, (int)ldc);
        else
            cblas_dgemm(CblasRowMajor, ta, tb, rows, cols, (int)j->k, 1.0, (const double *)a,
                        (int)j->lda, (const double *)b, (int)j->ldb, 0.0, (double *)c, (int)ldc);
    }
    /* the epilogue while the tile is still in cache */
    if (j->bias || j->activation != EG__OP_COUNT)
        eg__gemm_epilogue(j->out->dtype, c, ldc, rows, cols, j0,
                          j->bias ? (const char *)eg__data(j->bias) : NULL,
                          j->bias ? j->bias->strides[0] : 0, j->activation);
    apply_fast_activation(j, c, ldc, rows, cols);
    return true;
}

/* Tasks are (batch, row tile, column tile) in row-major order (OpenBLAS). */
static void blas_tiles(void *context, int64_t begin, int64_t end) {
    matmul_job *j = context;
    int64_t per_batch = j->row_tiles * j->col_tiles;
    size_t size = eg_dtype_size(j->out->dtype);
    for (int64_t task = begin; task < end; task++) {
        int64_t batch = task / per_batch, tile = task % per_batch;
        int64_t i0 = tile / j->col_tiles * j->tile_rows, j0 = tile % j->col_tiles * j->tile_cols;
        int64_t co = batch * j->m * j->n + i0 * j->n + j0;
        compute_tile(j, task, (char *)eg__data(j->out) + (size_t)co * size, j->n);
    }
}

/* Tasks are (batch, row part, column part) in row-major order. */
static void own_parts(void *context, int64_t begin, int64_t end) {
    matmul_job *j = context;
    int64_t per_batch = j->parts_m * j->parts_n;
    for (int64_t task = begin; task < end; task++) {
        int64_t batch = task / per_batch, part = task % per_batch;
        int64_t m0 = part / j->parts_n * j->part_rows, n0 = part % j->parts_n * j->part_cols;
        int64_t m1 = m0 + j->part_rows < j->m ? m0 + j->part_rows : j->m;
        int64_t n1 = n0 + j->part_cols < j->n ? n0 + j->part_cols : j->n;
        char *c =
            (char *)eg__data(j->out) + (size_t)(batch * j->m * j->n) * eg_dtype_size(j->out->dtype);
        bool done;
        if (j->lowp) {
            eg__gemm_lowp g = lowp_problem(j, batch, c);
            done = eg__gemm_lowp_range(&g, m0, m1, n0, n1);
        } else {
            eg__gemm_f32 g = own_problem(j, batch, (float *)c);
            done = eg__gemm_f32_range(&g, m0, m1, n0, n1);
        }
        if (!done)
            atomic_store(&j->failed, true);
        else if (j->fast_activation >= 0)
            apply_fast_activation(j, c + (size_t)(m0 * j->n + n0) * sizeof(float), j->n, m1 - m0,
                                  n1 - n0);
    }
}

/* Multiply-adds per part from which Eagle's GEMM splits a product among the threads. The pool's
 * workers poll for the next job (threadpool.c), so a split costs no wake-up: at 2^19 the seed
 * model's two 1.6M products split, and its step at 2 threads went from 118-121 to 92-104 us in
 * the quieter runs (p10 of bench_modes_step, alternating with 2^21). A replayed graph used 2^19
 * already. */
#define MIN_PART_WORK (1 << 19)

/* Cuts each batch element into parts for the threads. The bits do not depend on the cut (see
 * gemm.h), so it may follow the thread count: one part per thread, along the longer side of C
 * counted in micro-tiles, so that the parts repack as little of A or B as possible. */
static void split_parts(matmul_job *j, int64_t parts);

static void plan_parts(matmul_job *j, int64_t batches, int64_t min_part_work) {
    int64_t threads = eg__num_threads();
    int64_t work = j->m * j->n * (j->k > 0 ? j->k : 1);
    int64_t parts = threads / (batches > 0 ? batches : 1);
    if (parts > work / min_part_work) parts = work / min_part_work;
    split_parts(j, parts);
}

/* About `parts` parts (fewer where C has fewer micro-tiles along its longer side). */
static void split_parts(matmul_job *j, int64_t parts) {
    if (parts < 1) parts = 1;
    int64_t mr = j->lowp ? EG_GEMM_LOWP_MR : EG_GEMM_MR;
    int64_t nr = j->lowp ? EG_GEMM_LOWP_NR : EG_GEMM_NR;
    int64_t tiles_m = (j->m + mr - 1) / mr;
    int64_t tiles_n = (j->n + nr - 1) / nr;
    j->parts_m = j->parts_n = 1;
    if (tiles_n >= tiles_m) {
        if (parts > tiles_n) parts = tiles_n;
        j->part_cols = (tiles_n + parts - 1) / parts * nr;
        j->part_rows = j->m;
        j->parts_n = (j->n + j->part_cols - 1) / j->part_cols;
    } else {
        if (parts > tiles_m) parts = tiles_m;
        j->part_rows = (tiles_m + parts - 1) / parts * mr;
        j->part_cols = j->n;
        j->parts_m = (j->m + j->part_rows - 1) / j->part_rows;
    }
    if (j->part_rows < 1) j->part_rows = 1;
    if (j->part_cols < 1) j->part_cols = 1;
}

static bool lowp_dtype(eg_dtype dtype) {
    return dtype == EG_DTYPE_BF16 || dtype == EG_DTYPE_F16;
}

/* Whether Eagle's GEMM computes a product with this output (else OpenBLAS): f32 on a CPU that
 * allows it, bf16 and f16 everywhere (gemm_lowp.c; OpenBLAS has no such products). Products
 * narrower than one micro-tile (the 10 logits) it computes transposed (gemm.c), which beat
 * OpenBLAS there (bench/gemm --versus --mlp). */
static bool own_gemm(const eg_tensor *out) {
    return (out->dtype == EG_DTYPE_F32 && eg__gemm_f32_available()) || lowp_dtype(out->dtype);
}

static int64_t tile_rows_for(const eg_tensor *out) {
    if (lowp_dtype(out->dtype)) return LOWP_TILE_ROWS;
    return own_gemm(out) ? OWN_TILE_ROWS : TILE_ROWS;
}

/* OpenBLAS's bits depend on the tile, so its tiles are fixed; Eagle's GEMM gives the same bits
 * for any tiling, so its tiles take whole rows where they are not too wide. */
static int64_t tile_cols_for(const eg_tensor *out) {
    if (!own_gemm(out)) return TILE_COLS;
    int64_t n = out->shape[out->n_dims - 1];
    return n > 0 && n <= OWN_TILE_COLS_MAX ? n : OWN_TILE_COLS_MAX;
}

/* Fills *job for call (epilogue: bias, activation); *a_copy and *b_copy receive contiguous copies
 * of operands BLAS cannot read as they are (release them with eg__unref). */
static eg_status prepare_job(const eg__kernel_call *call, const eg_tensor *bias, eg__op activation,
                             matmul_job *job_out, eg_tensor **a_copy, eg_tensor **b_copy) {
    eg__blas_single_threaded();
    const eg_tensor *a_in = call->inputs[0], *b_in = call->inputs[1];
    eg_tensor *out = call->output;
    blas_operand a_op = {false, 1}, b_op = {false, 1};
    eg_tensor *a = NULL, *b = NULL;
    if (!blas_view(a_in, &a_op)) {
        a = eg__contiguous_temp(a_in);
        if (!a) return eg_last_status();
        blas_view(a, &a_op);
    }
    if (!blas_view(b_in, &b_op)) {
        b = eg__contiguous_temp(b_in);
        if (!b) {
            eg__unref(a);
            return eg_last_status();
        }
        blas_view(b, &b_op);
    }
    const eg_tensor *A = a ? a : a_in, *B = b ? b : b_in;
    /* fast math (eagle/ops.h): an f32 result's sigmoid or tanh, after the GEMM */
    int fast = -1;
    if (call->attrs->fast_math && out->dtype == EG_DTYPE_F32)
        fast = activation == EG__OP_SIGMOID ? EG__VECMATH_SIGMOID_FAST
               : activation == EG__OP_TANH  ? EG__VECMATH_TANH_FAST
                                            : -1;
    *job_out = (matmul_job){.a = A,
                            .b = B,
                            .out = out,
                            .lda = a_op.leading,
                            .ldb = b_op.leading,
                            .bias = bias,
                            .activation = fast >= 0 ? EG__OP_COUNT : activation,
                            .fast_activation = fast};
    atomic_init(&job_out->failed, false);
    job_out->m = out->shape[out->n_dims - 2];
    job_out->n = out->shape[out->n_dims - 1];
    job_out->k = A->shape[A->n_dims - (call->attrs->transpose_a ? 2 : 1)];
    job_out->trans_a = call->attrs->transpose_a != a_op.transposed;
    job_out->trans_b = call->attrs->transpose_b != b_op.transposed;
    job_out->tile_rows = tile_rows_for(out);
    job_out->row_tiles = (job_out->m + job_out->tile_rows - 1) / job_out->tile_rows;
    job_out->tile_cols = tile_cols_for(out);
    job_out->col_tiles = (job_out->n + job_out->tile_cols - 1) / job_out->tile_cols;
    job_out->lowp = call->attrs->low_precision || lowp_dtype(out->dtype);
    job_out->compute = call->attrs->low_precision ? call->attrs->compute_dtype : out->dtype;
    job_out->own = own_gemm(out) || job_out->lowp;
    *a_copy = a;
    *b_copy = b;
    return EG_OK;
}

static eg_status matmul_fused(const eg__kernel_call *call, const eg_tensor *bias, eg__op activation,
                              int64_t min_part_work) {
    matmul_job job;
    eg_tensor *a, *b;
    eg_status prepared = prepare_job(call, bias, activation, &job, &a, &b);
    if (prepared != EG_OK) return prepared;
    eg_tensor *out = call->output;
    int64_t batches = job.m * job.n > 0 ? out->n_elems / (job.m * job.n) : 0;
    eg_status status = EG_OK;
    if (job.own) {
        plan_parts(&job, batches, min_part_work);
        eg__parallel_for(batches * job.parts_m * job.parts_n, 1, own_parts, &job);
        if (atomic_load(&job.failed))
            status = eg__error(EG_ERR_OUT_OF_MEMORY, "matmul: no memory for packing buffers");
    } else {
        int64_t tile_work = (job.m < job.tile_rows ? job.m : job.tile_rows) *
                            (job.n < job.tile_cols ? job.n : job.tile_cols) *
                            (job.k > 0 ? job.k : 1);
        eg__parallel_for(batches * job.row_tiles * job.col_tiles,
                         MIN_CHUNK_WORK / (tile_work > 0 ? tile_work : 1) + 1, blas_tiles, &job);
    }
    eg__unref(a);
    eg__unref(b);
    return status;
}

eg_status eg__cpu_matmul_fused(const eg__kernel_call *call, const eg_tensor *bias,
                               eg__op activation) {
    return matmul_fused(call, bias, activation, MIN_PART_WORK);
}

eg_status eg__cpu_matmul(const eg__kernel_call *call);
eg_status eg__cpu_matmul(const eg__kernel_call *call) {
    return eg__cpu_matmul_fused(call, NULL, EG__OP_COUNT);
}

/* A dense call (x: (M, K), kernel: (K, N), bias: (N,) -> activation(x · kernel + bias)) as its
 * product alone, the same call as matmul's (no transposes; *attrs zeroed for it), and the
 * activation of the epilogue; the bias is call->inputs[2]. */
static eg_status dense_as_product(const eg__kernel_call *call, eg__attrs *attrs,
                                  eg__kernel_call *product, eg__op *activation) {
    static const eg__op activations[] = {
        [EG_ACTIVATION_NONE] = EG__OP_COUNT,
        [EG_ACTIVATION_RELU] = EG__OP_RELU,
        [EG_ACTIVATION_SIGMOID] = EG__OP_SIGMOID,
        [EG_ACTIVATION_TANH] = EG__OP_TANH,
    };
    int64_t requested = call->attrs->ints[0];
    if (requested < 0 || requested > EG_ACTIVATION_TANH)
        return eg__error(EG_ERR_INVALID_ARGUMENT, "dense: activation %lld cannot be fused",
                         (long long)requested);
    memset(attrs, 0, sizeof *attrs);
    attrs->low_precision = call->attrs->low_precision; /* eg_dense_low_precision */
    attrs->compute_dtype = call->attrs->compute_dtype;
    attrs->result_dtype = call->attrs->result_dtype;
    attrs->fast_math = call->attrs->fast_math;
    *product = *call;
    product->attrs = attrs;
    *activation = activations[requested];
    return EG_OK;
}

static eg_status dense(const eg__kernel_call *call, int64_t min_part_work) {
    eg__attrs attrs;
    eg__kernel_call product;
    eg__op activation = EG__OP_COUNT;
    eg_status status = dense_as_product(call, &attrs, &product, &activation);
    if (status != EG_OK) return status;
    return matmul_fused(&product, call->inputs[2], activation, min_part_work);
}

eg_status eg__cpu_dense(const eg__kernel_call *call);
eg_status eg__cpu_dense(const eg__kernel_call *call) {
    return dense(call, MIN_PART_WORK);
}

eg_status eg__cpu_matmul_graph(const eg__kernel_call *call) {
    if (call->op == EG__OP_DENSE) return dense(call, MIN_PART_WORK);
    return matmul_fused(call, NULL, EG__OP_COUNT, MIN_PART_WORK);
}

/* The job of a matmul or dense call (dense: its bias and activation as the epilogue). */
static eg_status graph_job(const eg__kernel_call *call, matmul_job *job, eg_tensor **a,
                           eg_tensor **b, eg__attrs *attrs) {
    if (call->op != EG__OP_DENSE) return prepare_job(call, NULL, EG__OP_COUNT, job, a, b);
    eg__kernel_call product;
    eg__op activation = EG__OP_COUNT;
    eg_status status = dense_as_product(call, attrs, &product, &activation);
    if (status != EG_OK) return status;
    return prepare_job(&product, call->inputs[2], activation, job, a, b);
}

int64_t eg__cpu_matmul_part_count(const eg__kernel_call *call, int threads) {
    matmul_job job;
    eg_tensor *a, *b;
    eg__attrs attrs;
    eg__saved_error saved;
    eg__error_set_aside(&saved);
    eg_status status = graph_job(call, &job, &a, &b, &attrs);
    eg__error_restore(&saved);
    int64_t parts = 1;
    if (status == EG_OK && job.own && !a && !b && job.m * job.n == call->output->n_elems) {
        int64_t work = job.m * job.n * (job.k > 0 ? job.k : 1);
        parts = threads < work / MIN_PART_WORK ? threads : work / MIN_PART_WORK;
        split_parts(&job, parts);
        parts = job.parts_m * job.parts_n;
    }
    if (status == EG_OK) {
        eg__unref(a);
        eg__unref(b);
    }
    return parts > 1 ? parts : 1;
}

eg_status eg__cpu_matmul_part(const eg__kernel_call *call, int64_t part, int64_t n_parts) {
    matmul_job job;
    eg_tensor *a, *b;
    eg__attrs attrs;
    eg_status status = graph_job(call, &job, &a, &b, &attrs);
    if (status != EG_OK) return status;
    if (!job.own || a || b || n_parts <= 1) { /* not split (eg__cpu_matmul_part_count said 1) */
        eg__unref(a);
        eg__unref(b);
        if (part > 0) return EG_OK;
        return call->op == EG__OP_DENSE ? dense(call, MIN_PART_WORK)
                                        : matmul_fused(call, NULL, EG__OP_COUNT, MIN_PART_WORK);
    }
    split_parts(&job, n_parts);
    if (part < job.parts_m * job.parts_n) own_parts(&job, part, part + 1);
    if (atomic_load(&job.failed))
        return eg__error(EG_ERR_OUT_OF_MEMORY, "matmul: no memory for packing buffers");
    return EG_OK;
}

/* ---- tiles handed to a consumer (graph mode's fused optimizer updates) ---- */

size_t eg__cpu_matmul_tile_bytes(const eg_tensor *out) {
    int64_t m = out->shape[out->n_dims - 2], n = out->shape[out->n_dims - 1];
    int64_t rows = tile_rows_for(out);
    int64_t cols = tile_cols_for(out);
    return (size_t)((m < rows ? m : rows) * (n < cols ? n : cols)) * eg_dtype_size(out->dtype);
}

int64_t eg__cpu_matmul_tile_count(const eg_tensor *out) {
    int64_t m = out->shape[out->n_dims - 2], n = out->shape[out->n_dims - 1];
    int64_t batches = m * n > 0 ? out->n_elems / (m * n) : 0, rows = tile_rows_for(out);
    int64_t cols = tile_cols_for(out);
    return batches * ((m + rows - 1) / rows) * ((n + cols - 1) / cols);
}

typedef struct consumer_job {
    matmul_job job;
    char *scratch;
    size_t tile_bytes;
    int64_t n_tiles;
    atomic_llong next_tile; /* tiles are claimed one at a time by whichever lane is running */
    eg__tile_fn fn;
    void *context;
} consumer_job;

/* Lanes [begin, end): each lane computes the tiles it claims into its own scratch tile and hands
 * them to the consumer. Claiming keeps both threads busy on a loaded machine, where a woken
 * worker may start late: whoever runs takes the next tile. */
static void tiles_to_consumer(void *context, int64_t begin, int64_t end) {
    consumer_job *c = context;
    const matmul_job *j = &c->job;
    int64_t per_batch = j->row_tiles * j->col_tiles;
    for (int64_t lane = begin; lane < end; lane++) {
        char *tile_data = c->scratch + (size_t)lane * c->tile_bytes;
        for (;;) {
            int64_t task = atomic_fetch_add(&c->next_tile, 1);
            if (task >= c->n_tiles) break;
            int64_t tile = task % per_batch;
            int64_t i0 = tile / j->col_tiles * j->tile_rows,
                    j0 = tile % j->col_tiles * j->tile_cols;
            int rows = (int)(j->m - i0 < j->tile_rows ? j->m - i0 : j->tile_rows);
            int cols = (int)(j->n - j0 < j->tile_cols ? j->n - j0 : j->tile_cols);
            if (!compute_tile(j, task, tile_data, cols)) {
                atomic_store((atomic_bool *)&j->failed, true);
                continue;
            }
            /* element offset of the tile's first element in the (never written) output */
            c->fn(c->context, task / per_batch * j->m * j->n + i0 * j->n + j0, rows, cols, j->n,
                  tile_data);
        }
    }
}

eg_status eg__cpu_matmul_tile(const eg__kernel_call *call, int64_t tile, void *scratch,
                              eg__tile_fn fn, void *context) {
    consumer_job c = {.scratch = scratch, .fn = fn, .context = context};
    eg_tensor *a, *b;
    eg_status status = prepare_job(call, NULL, EG__OP_COUNT, &c.job, &a, &b);
    if (status != EG_OK) return status;
    c.tile_bytes = 0;
    c.n_tiles = tile + 1;
    atomic_init(&c.next_tile, tile);
    tiles_to_consumer(&c, 0, 1);
    eg__unref(a);
    eg__unref(b);
    if (atomic_load(&c.job.failed))
        return eg__error(EG_ERR_OUT_OF_MEMORY, "matmul: no memory for packing buffers");
    return EG_OK;
}

eg_status eg__cpu_matmul_tiles(const eg__kernel_call *call, void *scratch, int n_scratch,
                               eg__tile_fn fn, void *context) {
    consumer_job c = {.scratch = scratch, .fn = fn, .context = context};
    eg_tensor *a, *b;
    eg_status status = prepare_job(call, NULL, EG__OP_COUNT, &c.job, &a, &b);
    if (status != EG_OK) return status;
    c.tile_bytes = eg__cpu_matmul_tile_bytes(call->output);
    c.n_tiles = eg__cpu_matmul_tile_count(call->output);
    atomic_init(&c.next_tile, 0);
    /* one lane per scratch tile, all in one parallel job; a small product (whose consumer is
     * then small too) stays on one thread, as in the plain product */
    int64_t tile_work = (c.job.m < c.job.tile_rows ? c.job.m : c.job.tile_rows) *
                        (c.job.n < c.job.tile_cols ? c.job.n : c.job.tile_cols) *
                        (c.job.k > 0 ? c.job.k : 1);
    int64_t lanes = n_scratch < 1 ? 1 : n_scratch;
    if (lanes > c.n_tiles) lanes = c.n_tiles;
    if (c.n_tiles * tile_work < MIN_CHUNK_WORK) lanes = 1;
    eg__parallel_for(lanes, 1, tiles_to_consumer, &c);
    eg__unref(a);
    eg__unref(b);
    if (atomic_load(&c.job.failed))
        return eg__error(EG_ERR_OUT_OF_MEMORY, "matmul: no memory for packing buffers");
    return EG_OK;
}
