/* Low-rank Dense layers (eagle/approx.h): a Dense kernel W (K, N) factorized by a truncated SVD,
 * W ~ U_r S_r V_r^T, into two thinner products x (U_r S_r^1/2) (S_r^1/2 V_r^T). The split of S
 * between the factors keeps both of the same scale, which fine-tuning them together likes.
 *
 * The SVD is LAPACK's sgesdd (divide and conquer), from the BLAS library Eagle links (OpenBLAS
 * carries LAPACK): Eagle does not write its own. */
#include <math.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>

#include "eagle/approx.h"
#include "nn/internal.h"

/* LAPACK (Fortran calling convention: every argument by pointer, column-major matrices). */
extern void sgesdd_(const char *jobz, const int *m, const int *n, float *a, const int *lda,
                    float *s, float *u, const int *ldu, float *vt, const int *ldvt, float *work,
                    const int *lwork, int *iwork, int *info);

typedef struct lowrank_state {
    int64_t rank, units;
    bool use_bias;
    eg_activation activation;
} lowrank_state;

static eg_status lowrank_build(eg_layer *layer, void *state, int n_inputs,
                               const eg_layer_shape *shapes) {
    (void)n_inputs;
    const lowrank_state *s = state;
    int64_t inputs = shapes[0].dims[shapes[0].n_dims - 1];
    if (inputs <= 0)
        return eg__error(EG_ERR_SHAPE, "LowRankDense '%s': the input's last axis is unknown",
                         eg_layer_name(layer));
    int64_t u_shape[2] = {inputs, s->rank}, v_shape[2] = {s->rank, s->units};
    eg_initializer glorot = eg_initializer_of(EG_INITIALIZER_GLOROT_UNIFORM);
    if (!eg_layer_add_weight(layer, "u", 2, u_shape, EG_DTYPE_F32, &glorot, true) ||
        !eg_layer_add_weight(layer, "v", 2, v_shape, EG_DTYPE_F32, &glorot, true))
        return eg_last_status();
    if (s->use_bias && !eg_layer_add_weight(layer, "bias", 1, &s->units, EG_DTYPE_F32, NULL, true))
        return eg_last_status();
    return EG_OK;
}

static eg_status lowrank_output_shape(eg_layer *layer, void *state, int n_inputs,
                                      const eg_layer_shape *shapes, eg_layer_shape *output) {
    (void)layer;
    (void)n_inputs;
    *output = shapes[0];
    output->dims[output->n_dims - 1] = ((const lowrank_state *)state)->units;
    return EG_OK;
}

static eg_tensor *lowrank_call(eg_layer *layer, void *state, int n_inputs, eg_tensor *const *inputs,
                               eg_tensor *const *variables, bool training) {
    (void)layer;
    (void)n_inputs;
    (void)training;
    const lowrank_state *s = state;
    eg_activation act = s->activation;
    const eg_tensor *bias = s->use_bias ? variables[2] : NULL;
    eg_tensor *thin = eg_matmul(inputs[0], variables[0]);
    /* as Dense calls: the bias and a simple activation fused into the second product */
    if (thin && bias && eg_tensor_n_dims(thin) == 2 &&
        (act == EG_ACTIVATION_NONE || act == EG_ACTIVATION_RELU || act == EG_ACTIVATION_SIGMOID ||
         act == EG_ACTIVATION_TANH)) {
        eg_tensor *y = eg_dense(thin, variables[1], bias, act);
        eg_release(thin);
        return y;
    }
    eg_tensor *product = thin ? eg_matmul(thin, variables[1]) : NULL;
    eg_release(thin);
    eg_tensor *biased = product && bias ? eg_add(product, bias) : NULL;
    if (biased) {
        eg_release(product);
        product = biased;
    }
    eg_tensor *y = product ? eg_activation_apply(act, product) : NULL;
    eg_release(product);
    return y;
}

static const eg_layer_class lowrank_class = {
    .type = "LowRankDense",
    .name_prefix = "low_rank_dense",
    .build = lowrank_build,
    .compute_output_shape = lowrank_output_shape,
    .call = lowrank_call,
    .free_state = free,
};

bool eg_layer_is_lowrank(const eg_layer *layer) {
    return layer && layer->kind == EG__LAYER_CUSTOM && layer->layer_class == &lowrank_class;
}

/* The SVD of w (k, n, row-major f32 on the host): s (min(k, n)) descending, u (k, min) and vt
 * (min, n), both row-major. */
static eg_status svd(const float *w, int k, int n, float *s, float *u, float *vt) {
    /* LAPACK reads column-major, so it sees row-major w (k, n) as w^T (n, k) */
    int m = n, cols = k, small = m < cols ? m : cols;
    float *a = malloc(sizeof(float) * (size_t)m * (size_t)cols);
    float *left = malloc(sizeof(float) * (size_t)m * (size_t)small);     /* (m, small) col-major */
    float *right = malloc(sizeof(float) * (size_t)small * (size_t)cols); /* (small, cols) */
    int *iwork = malloc(sizeof(int) * 8 * (size_t)small);
    eg_status status = a && left && right && iwork
                           ? EG_OK
                           : eg__error(EG_ERR_OUT_OF_MEMORY, "lowrank: out of host memory");
    float query = 0, *work = NULL;
    int lwork = -1, info = 0;
    if (status == EG_OK) {
        memcpy(a, w, sizeof(float) * (size_t)m * (size_t)cols);
        sgesdd_("S", &m, &cols, a, &m, s, left, &m, right, &small, &query, &lwork, iwork, &info);
        lwork = info == 0 ? (int)query : 0;
        work = lwork > 0 ? malloc(sizeof(float) * (size_t)lwork) : NULL;
        if (!work) status = eg__error(EG_ERR_OUT_OF_MEMORY, "lowrank: out of host memory");
    }
    if (status == EG_OK) {
        sgesdd_("S", &m, &cols, a, &m, s, left, &m, right, &small, work, &lwork, iwork, &info);
        if (info != 0)
            status = eg__error(EG_ERR_INTERNAL, "lowrank: LAPACK's sgesdd failed (info %d)", info);
    }
    if (status == EG_OK) {
        /* w^T (n, k) = left (n, small) S right (small, k), column-major; so w (k, n) =
         * right^T S left^T: u (k, small) = right^T, vt (small, n) = left^T, row-major. */
        for (int i = 0; i < k; i++)
            for (int j = 0; j < small; j++) u[(size_t)i * small + j] = right[(size_t)i * small + j];
        for (int j = 0; j < small; j++)
            for (int c = 0; c < n; c++) vt[(size_t)j * n + c] = left[(size_t)j * m + c];
    }
    free(a);
    free(left);
    free(right);
    free(iwork);
    free(work);
    return status;
}

eg_layer *eg_dense_lowrank_new(const eg_layer *dense, int64_t rank, double energy,
                               double *kept_energy) {
    static const char *what = "dense_lowrank_new";
    if (kept_energy) *kept_energy = 0;
    if (!dense) {
        eg__error(EG_ERR_NULL_ARGUMENT, "%s: dense is NULL", what);
        return NULL;
    }
    if (dense->kind != EG__LAYER_DENSE || !dense->built ||
        dense->variables[0]->dtype != EG_DTYPE_F32 || dense->variables[0]->n_dims != 2) {
        eg__error(dense->kind != EG__LAYER_DENSE ? EG_ERR_UNSUPPORTED : EG_ERR_STATE,
                  "%s: '%s' is not a built Dense layer with an f32 kernel", what,
                  eg_layer_name(dense));
        return NULL;
    }
    const eg_tensor *kernel = dense->variables[0];
    int64_t k = kernel->shape[0], n = kernel->shape[1], small = k < n ? k : n;
    if ((rank > 0) == (energy > 0) || rank > small || !(energy <= 1) || k > INT32_MAX / 2 ||
        n > INT32_MAX / 2) {
        eg__error(EG_ERR_INVALID_ARGUMENT,
                  "%s: give a rank in [1, %lld] or an energy fraction in (0, 1], not both "
                  "(rank %lld, energy %g)",
                  what, (long long)small, (long long)rank, energy);
        return NULL;
    }
    size_t count = (size_t)k * (size_t)n;
    float *w = malloc(sizeof(float) * count), *s = malloc(sizeof(float) * (size_t)small);
    float *u = malloc(sizeof(float) * (size_t)k * (size_t)small);
    float *vt = malloc(sizeof(float) * (size_t)small * (size_t)n);
    eg_status status =
        w && s && u && vt ? EG_OK : eg__error(EG_ERR_OUT_OF_MEMORY, "%s: out of host memory", what);
    if (status == EG_OK) status = eg_tensor_copy_to_host(kernel, w, sizeof(float) * count);
    if (status == EG_OK) status = svd(w, (int)k, (int)n, s, u, vt);
    double total = 0, kept = 0;
    for (int64_t i = 0; status == EG_OK && i < small; i++) total += (double)s[i] * s[i];
    if (status == EG_OK && rank <= 0) /* the smallest rank keeping that share of sum s^2 */
        for (rank = 0; rank < small && (rank == 0 || kept < energy * total); rank++)
            kept += (double)s[rank] * s[rank];
    else
        for (int64_t i = 0; status == EG_OK && i < rank; i++) kept += (double)s[i] * s[i];
    eg_layer *layer = NULL;
    lowrank_state *state = status == EG_OK ? malloc(sizeof *state) : NULL;
    if (status == EG_OK && !state)
        status = eg__error(EG_ERR_OUT_OF_MEMORY, "%s: out of memory", what);
    if (status == EG_OK) {
        *state = (lowrank_state){rank, n, dense->n_variables > 1, dense->activation};
        layer = eg_layer_new_custom(&lowrank_class, state, NULL);
        status = layer ? eg_layer_build(layer, 2, (const int64_t[]){-1, k}) : eg_last_status();
    }
    if (status == EG_OK) { /* the factors, S split evenly between them */
        float *left = malloc(sizeof(float) * (size_t)k * (size_t)rank);
        float *right = malloc(sizeof(float) * (size_t)rank * (size_t)n);
        if (!left || !right) status = eg__error(EG_ERR_OUT_OF_MEMORY, "%s: out of memory", what);
        for (int64_t i = 0; status == EG_OK && i < k; i++)
            for (int64_t j = 0; j < rank; j++) left[i * rank + j] = u[i * small + j] * sqrtf(s[j]);
        for (int64_t j = 0; status == EG_OK && j < rank; j++)
            for (int64_t c = 0; c < n; c++) right[j * n + c] = sqrtf(s[j]) * vt[j * n + c];
        eg_tensor *const *vars = layer->variables;
        eg_scope_begin();
        if (status == EG_OK)
            status = eg_assign(
                vars[0], eg_tensor_from_data(left, EG_DTYPE_F32, 2, (const int64_t[]){k, rank}));
        if (status == EG_OK)
            status = eg_assign(
                vars[1], eg_tensor_from_data(right, EG_DTYPE_F32, 2, (const int64_t[]){rank, n}));
        if (status == EG_OK && dense->n_variables > 1)
            status = eg_assign(vars[2], dense->variables[1]);
        eg_scope_end();
        free(left);
        free(right);
    }
    free(w);
    free(s);
    free(u);
    free(vt);
    if (status != EG_OK) {
        eg_layer_free(layer);
        return NULL;
    }
    if (kept_energy) *kept_energy = total > 0 ? kept / total : 1;
    return layer;
}

eg_status eg__model_replace_layer(eg_model *model, int index, eg_layer *layer) {
    eg_layer *old = model->layers[index];
    /* the new layer takes the old one's place and name: its variables are "<name>/u" ... */
    char *name = strdup(eg_layer_name(old));
    eg_status status = name ? EG_OK : eg__error(EG_ERR_OUT_OF_MEMORY, "model: out of memory");
    if (status == EG_OK) {
        free(layer->name);
        layer->name = name;
        layer->name_fixed = true;
        status = eg__layer_rename_variables(layer);
    }
    if (status != EG_OK) {
        eg_layer_free(layer);
        return status;
    }
    layer->owner = model;
    eg__layer_destroy(old);
    model->layers[index] = layer;
    if (model->attachment && model->attachment_free) {
        /* a training configuration compiled for the old variables */
        model->attachment_free(model->attachment);
        model->attachment = NULL;
    }
    return EG_OK;
}

eg_status eg_model_lowrank(eg_model *model, int64_t rank, double energy, int *n_factorized) {
    if (n_factorized) *n_factorized = 0;
    if (!model) return eg__error(EG_ERR_NULL_ARGUMENT, "model_lowrank: model is NULL");
    if (model->functional)
        return eg__error(EG_ERR_UNSUPPORTED,
                         "model_lowrank: '%s' is a functional model; only a Sequential model's "
                         "layers are replaced",
                         model->name);
    int count = 0;
    for (int i = 0; i < model->n_layers; i++) {
        eg_layer *dense = model->layers[i];
        if (dense->kind != EG__LAYER_DENSE) continue;
        const eg_tensor *kernel = dense->variables[0];
        int64_t k = kernel ? kernel->shape[0] : 0, n = kernel ? kernel->shape[1] : 0;
        int64_t small = k < n ? k : n;
        /* a rank that saves nothing keeps the layer (the classifier's 10 outputs, say) */
        if (rank > 0 && rank * (k + n) >= k * n) continue;
        eg_layer *thin = eg_dense_lowrank_new(dense, rank > small ? small : rank, energy, NULL);
        if (!thin) return eg_last_status();
        int64_t r = ((const lowrank_state *)thin->state)->rank;
        if (rank <= 0 && r * (k + n) >= k * n) { /* the energy asked for all of it */
            eg_layer_free(thin);
            continue;
        }
        eg_status status = eg__model_replace_layer(model, i, thin);
        if (status != EG_OK) return status;
        count++;
    }
    if (n_factorized) *n_factorized = count;
    return EG_OK;
}
