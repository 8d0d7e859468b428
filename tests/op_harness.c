/* The op-case harness: parses input specs, makes inputs with their reference values, reads
 * tensors back as doubles, and the small index helpers the references use. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "op_cases.h"
#include "op_reference.h"

/* ---- random numbers (splitmix64) ---- */

uint64_t oc_rng_next(oc_rng *rng) {
    uint64_t z = (rng->state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

double oc_rng_uniform(oc_rng *rng, double low, double high) {
    return low + (high - low) * (double)(oc_rng_next(rng) >> 11) * 0x1.0p-53;
}

/* ---- reference tensors ---- */

void oc_ref_init(oc_ref *r, eg_dtype dtype, int n_dims, const int64_t *shape) {
    r->dtype = dtype;
    r->n_dims = n_dims;
    memset(r->shape, 0, sizeof r->shape);
    int64_t n = 1;
    for (int d = 0; d < n_dims; d++) {
        r->shape[d] = shape[d];
        n *= shape[d];
    }
    if (n > OC_MAX_ELEMS) {
        fprintf(stderr, "op_cases: a reference of %lld elements is too large\n", (long long)n);
        abort(); /* a mistake in the case table, not in Eagle */
    }
    r->n_elems = n;
    memset(r->data, 0, (size_t)n * sizeof(double));
}

void oc_unravel(int n_dims, const int64_t *shape, int64_t flat, int64_t *index) {
    for (int d = n_dims - 1; d >= 0; d--) {
        index[d] = shape[d] ? flat % shape[d] : 0;
        flat = shape[d] ? flat / shape[d] : 0;
    }
}

int64_t oc_ravel(int n_dims, const int64_t *shape, const int64_t *index) {
    int64_t flat = 0;
    for (int d = 0; d < n_dims; d++) flat = flat * shape[d] + index[d];
    return flat;
}

double oc_broadcast_get(const oc_ref *t, int out_n_dims, const int64_t *out_index) {
    int64_t index[EG_MAX_DIMS];
    int lead = out_n_dims - t->n_dims;
    for (int d = 0; d < t->n_dims; d++) index[d] = t->shape[d] == 1 ? 0 : out_index[d + lead];
    return t->data[oc_ravel(t->n_dims, t->shape, index)];
}

bool oc_broadcast_shape(int n, const oc_ref *const *in, int *n_dims, int64_t *shape) {
    int nd = 0;
    for (int i = 0; i < n; i++) nd = in[i]->n_dims > nd ? in[i]->n_dims : nd;
    for (int d = 0; d < nd; d++) {
        int64_t size = 1;
        for (int i = 0; i < n; i++) {
            int td = d - (nd - in[i]->n_dims);
            if (td < 0 || in[i]->shape[td] == 1) continue;
            if (size != 1 && size != in[i]->shape[td]) return false;
            size = in[i]->shape[td];
        }
        shape[d] = size;
    }
    *n_dims = nd;
    return true;
}

/* ---- specs ---- */

typedef struct spec {
    eg_dtype dtype;
    bool is_float;
    int n_dims;
    int64_t shape[EG_MAX_DIMS];
    char view;
    char gen;
    int64_t gen_param;
} spec;

static bool parse_dtype(const char *text, eg_dtype float_dtype, spec *s) {
    static const struct {
        const char *name;
        eg_dtype dtype;
    } names[] = {{"f32", EG_DTYPE_F32}, {"f64", EG_DTYPE_F64}, {"bf16", EG_DTYPE_BF16},
                 {"f16", EG_DTYPE_F16}, {"i32", EG_DTYPE_I32}, {"i64", EG_DTYPE_I64},
                 {"u8", EG_DTYPE_U8},   {"b", EG_DTYPE_BOOL},  {"i8", EG_DTYPE_I8}};
    s->is_float = strcmp(text, "F") == 0 || strcmp(text, "Fs") == 0;
    if (s->is_float) {
        /* Fs: a statistic or parameter of batch normalization, f32 for bf16 / f16 F */
        bool stat = text[1] == 's' && (float_dtype == EG_DTYPE_BF16 || float_dtype == EG_DTYPE_F16);
        s->dtype = stat ? EG_DTYPE_F32 : float_dtype;
        return true;
    }
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        if (strcmp(text, names[i].name) == 0) {
            s->dtype = names[i].dtype;
            return true;
        }
    }
    return false;
}

static bool parse_spec(const char *text, eg_dtype float_dtype, spec *s) {
    char dtype[8], shape[64], gen[16];
    if (sscanf(text, "%7s %63s %15s", dtype, shape, gen) != 3) return false;
    if (!parse_dtype(dtype, float_dtype, s)) return false;
    char *colon = strchr(shape, ':');
    s->view = 0;
    if (colon) {
        s->view = colon[1];
        *colon = 0;
        if (s->view != 'T' && s->view != 'S' && s->view != 'B') return false;
    }
    s->n_dims = 0;
    if (strcmp(shape, "-") != 0) {
        char *p = shape;
        while (*p) {
            if (s->n_dims == EG_MAX_DIMS) return false;
            char *end;
            s->shape[s->n_dims++] = strtoll(p, &end, 10);
            if (end == p) return false;
            p = *end == ',' ? end + 1 : end;
        }
    }
    if (s->view == 'T' && s->n_dims < 2) return false;
    if (s->view == 'S' && s->n_dims < 1) return false;
    if (s->view == 'B' && s->n_dims >= EG_MAX_DIMS) return false;
    s->gen = gen[0];
    s->gen_param = gen[1] ? strtoll(gen + 1, NULL, 10) : 0;
    return strchr("npadwzqib", s->gen) != NULL;
}

int oc_case_n_inputs(const oc_case *c) {
    int n = 0;
    while (n < OC_MAX_INPUTS && c->inputs[n]) n++;
    return n;
}

bool oc_case_has_float_input(const oc_case *c) {
    for (int i = 0; i < oc_case_n_inputs(c); i++)
        if (strncmp(c->inputs[i], "F ", 2) == 0) return true;
    return false;
}

static void generate(const spec *s, int input_index, oc_rng *rng, int64_t n, double *values) {
    for (int64_t i = 0; i < n; i++) {
        double v = 0;
        switch (s->gen) {
        case 'n':
            v = oc_rng_uniform(rng, -2, 2);
            break;
        case 'p':
            v = oc_rng_uniform(rng, 0.5, 2);
            break;
        case 'a':
            v = oc_rng_uniform(rng, 0.2, 2) * (oc_rng_next(rng) & 1 ? 1 : -1);
            break;
        case 'w':
            v = oc_rng_uniform(rng, -40, 40);
            break;
        case 'z':
            v = (double)(oc_rng_next(rng) % 9) - 4;
            break;
        case 'q':
            v = (double)(oc_rng_next(rng) % 5 + 1) * (oc_rng_next(rng) & 1 ? 1 : -1);
            break;
        case 'i':
            v = (double)(oc_rng_next(rng) % (uint64_t)s->gen_param);
            break;
        case 'b':
            v = (double)(oc_rng_next(rng) & 1);
            break;
        case 'd':
            v = (double)i;
            break; /* shuffled below */
        default:
            break;
        }
        values[i] = v;
    }
    if (s->gen == 'd') { /* a shuffled ladder 0.25 apart, offset per input: no ties anywhere */
        for (int64_t i = n - 1; i > 0; i--) {
            int64_t j = (int64_t)(oc_rng_next(rng) % (uint64_t)(i + 1));
            double t = values[i];
            values[i] = values[j];
            values[j] = t;
        }
        for (int64_t i = 0; i < n; i++)
            values[i] = (values[i] - (double)(n / 2)) * 0.25 + 0.03 + 0.07 * input_index;
    }
    for (int64_t i = 0; i < n; i++) values[i] = oc_convert(s->dtype, values[i]);
}

static eg_tensor *tensor_from_values(const spec *s, const double *values, int64_t n) {
    size_t size = eg_dtype_size(s->dtype);
    char *bytes = malloc((size_t)(n > 0 ? n : 1) * size);
    if (!bytes) return NULL;
    for (int64_t i = 0; i < n; i++) {
        void *p = bytes + (size_t)i * size;
        switch (s->dtype) {
        case EG_DTYPE_F32:
            *(float *)p = (float)values[i];
            break;
        case EG_DTYPE_F64:
            *(double *)p = values[i];
            break;
        case EG_DTYPE_I32:
            *(int32_t *)p = (int32_t)values[i];
            break;
        case EG_DTYPE_I64:
            *(int64_t *)p = (int64_t)values[i];
            break;
        case EG_DTYPE_I8:
            *(int8_t *)p = (int8_t)values[i];
            break;
        case EG_DTYPE_F16:
        case EG_DTYPE_BF16: { /* both bytes of the element, rounded to nearest even */
            float f = (float)values[i];
            if (s->dtype == EG_DTYPE_F16)
                eg_f32_to_f16(&f, (uint16_t *)p, 1);
            else
                eg_f32_to_bf16(&f, (uint16_t *)p, 1);
            break;
        }
        default:
            *(uint8_t *)p = (uint8_t)values[i];
            break;
        }
    }
    eg_tensor *t = eg_tensor_from_data(bytes, s->dtype, s->n_dims, s->shape);
    free(bytes);
    return t;
}

/* The logical values of the view of base (plain C, not Eagle). */
static void view_values(const spec *s, const oc_ref *base, oc_ref *out) {
    int64_t shape[EG_MAX_DIMS], index[EG_MAX_DIMS];
    memcpy(shape, base->shape, sizeof shape);
    int nd = base->n_dims;
    if (s->view == 'B') { /* (2, base shape...) repeating base */
        shape[0] = 2;
        memcpy(shape + 1, base->shape, sizeof(int64_t) * (size_t)nd);
        oc_ref_init(out, base->dtype, nd + 1, shape);
        for (int64_t o = 0; o < out->n_elems; o++) out->data[o] = base->data[o % base->n_elems];
        return;
    }
    if (s->view == 'T') {
        shape[nd - 1] = base->shape[nd - 2];
        shape[nd - 2] = base->shape[nd - 1];
    } else if (s->view == 'S') {
        shape[0] = base->shape[0] / 2; /* elements 1, 3, 5, ... */
    }
    oc_ref_init(out, base->dtype, nd, shape);
    for (int64_t o = 0; o < out->n_elems; o++) {
        oc_unravel(nd, shape, o, index);
        if (s->view == 'T') {
            int64_t t = index[nd - 1];
            index[nd - 1] = index[nd - 2];
            index[nd - 2] = t;
        } else if (s->view == 'S') {
            index[0] = 1 + 2 * index[0];
        }
        out->data[o] = base->data[oc_ravel(nd, base->shape, index)];
    }
}

bool oc_inputs_make(const oc_case *c, eg_dtype float_dtype, uint64_t seed, oc_inputs *inputs) {
    memset(inputs, 0, sizeof *inputs);
    inputs->n = oc_case_n_inputs(c);
    inputs->ref = calloc(OC_MAX_INPUTS, sizeof *inputs->ref);
    oc_ref *base = malloc(sizeof *base);
    if (!inputs->ref || !base) {
        free(base);
        return false;
    }
    oc_rng rng = {seed * 0x2545F4914F6CDD1Dull + 17};
    bool ok = true;
    for (int i = 0; i < inputs->n && ok; i++) {
        spec s;
        if (!parse_spec(c->inputs[i], float_dtype, &s)) {
            fprintf(stderr, "case '%s': bad input spec '%s'\n", c->name, c->inputs[i]);
            ok = false;
            break;
        }
        oc_ref_init(base, s.dtype, s.n_dims, s.shape);
        generate(&s, i, &rng, base->n_elems, base->data);
        inputs->base[i] = tensor_from_values(&s, base->data, base->n_elems);
        inputs->view[i] = s.view;
        inputs->is_float[i] = s.is_float;
        view_values(&s, base, &inputs->ref[i]);
        if (!inputs->base[i]) {
            fprintf(stderr, "case '%s': cannot create input %d: %s\n", c->name, i, eg_last_error());
            ok = false;
        }
    }
    free(base);
    return ok;
}

void oc_inputs_free(oc_inputs *inputs) {
    free(inputs->ref);
    inputs->ref = NULL;
}

/* (2, shape of b...) with a zero stride on the new axis. */
static eg_tensor *broadcast_view(const eg_tensor *b) {
    int64_t shape[EG_MAX_DIMS] = {2};
    int n = eg_tensor_n_dims(b);
    memcpy(shape + 1, eg_tensor_shape(b), sizeof(int64_t) * (size_t)n);
    return eg_broadcast_to(b, n + 1, shape);
}

bool oc_inputs_views(const oc_inputs *inputs, eg_tensor **views) {
    for (int i = 0; i < inputs->n; i++) {
        eg_tensor *b = inputs->base[i];
        if (inputs->view[i] == 'T')
            views[i] = eg_transpose(b, -1, -2);
        else if (inputs->view[i] == 'S')
            views[i] = eg_slice(b, 0, 1, eg_tensor_dim(b, 0), 2);
        else if (inputs->view[i] == 'B')
            views[i] = broadcast_view(b);
        else
            views[i] = b;
        if (!views[i]) return false;
    }
    return true;
}

/* ---- reading results ---- */

static double half_to_double(uint16_t h) {
    int exponent = (h >> 10) & 31, mantissa = h & 1023;
    double v = exponent == 0    ? ldexp(mantissa, -24)
               : exponent == 31 ? (mantissa ? NAN : INFINITY)
                                : ldexp(1024 + mantissa, exponent - 25);
    return h & 0x8000 ? -v : v;
}

bool oc_read(const eg_tensor *t, oc_ref *out) {
    if (!t) return false;
    int64_t n = eg_tensor_n_elems(t);
    if (n > OC_MAX_ELEMS) return false;
    eg_dtype dtype = eg_tensor_dtype(t);
    oc_ref_init(out, dtype, eg_tensor_n_dims(t), eg_tensor_shape(t));
    size_t size = eg_dtype_size(dtype);
    char *bytes = malloc((size_t)(n > 0 ? n : 1) * size);
    if (!bytes) return false;
    if (eg_tensor_copy_to_host(t, bytes, (size_t)n * size) != EG_OK) {
        free(bytes);
        return false;
    }
    for (int64_t i = 0; i < n; i++) {
        const void *p = bytes + (size_t)i * size;
        double v = 0;
        switch (dtype) {
        case EG_DTYPE_F32:
            v = *(const float *)p;
            break;
        case EG_DTYPE_F64:
            v = *(const double *)p;
            break;
        case EG_DTYPE_F16:
            v = half_to_double(*(const uint16_t *)p);
            break;
        case EG_DTYPE_BF16: {
            uint32_t bits = (uint32_t) * (const uint16_t *)p << 16;
            float f;
            memcpy(&f, &bits, sizeof f);
            v = f;
            break;
        }
        case EG_DTYPE_I32:
            v = *(const int32_t *)p;
            break;
        case EG_DTYPE_I64:
            v = (double)*(const int64_t *)p;
            break;
        case EG_DTYPE_I8:
            v = *(const int8_t *)p;
            break;
        default:
            v = *(const uint8_t *)p;
            break;
        }
        out->data[i] = v;
    }
    free(bytes);
    return true;
}
