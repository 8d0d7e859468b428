#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "base/error.h"
#include "core/random.h"
#include "core/tensor_internal.h"

void eg__philox4x32(uint64_t key, uint64_t counter_high, uint64_t counter, uint32_t out[4]) {
    uint32_t c0 = (uint32_t)counter, c1 = (uint32_t)(counter >> 32);
    uint32_t c2 = (uint32_t)counter_high, c3 = (uint32_t)(counter_high >> 32);
    uint32_t k0 = (uint32_t)key, k1 = (uint32_t)(key >> 32);
    for (int round = 0; round < 10; round++) {
        uint64_t p0 = (uint64_t)0xD2511F53u * c0;
        uint64_t p1 = (uint64_t)0xCD9E8D57u * c2;
        uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0;
        uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
        c0 = n0;
        c1 = (uint32_t)p1;
        c2 = n2;
        c3 = (uint32_t)p0;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    out[0] = c0;
    out[1] = c1;
    out[2] = c2;
    out[3] = c3;
}

struct eg_generator {
    uint64_t seed;
    atomic_uint_fast64_t next_counter; /* Philox blocks used so far */
};

static eg_generator default_generator = {0x5eed, 0};
/* This thread's stand-in for the default generator (a data-parallel replica's), or NULL. */
static _Thread_local eg_generator *thread_default;

/* The generator a NULL argument names on this thread. */
static eg_generator *resolve(const eg_generator *generator) {
    if (generator) return (eg_generator *)generator;
    return thread_default ? thread_default : &default_generator;
}

void eg__random_set_thread_default(eg_generator *generator) {
    thread_default = generator;
}

uint64_t eg__random_default_seed(void) {
    return default_generator.seed;
}

eg_generator *eg_generator_new(uint64_t seed) {
    eg_generator *generator = malloc(sizeof *generator);
    if (!generator) {
        eg__error(EG_ERR_OUT_OF_MEMORY, "generator_new: out of host memory");
        return NULL;
    }
    generator->seed = seed;
    atomic_init(&generator->next_counter, 0);
    return generator;
}

void eg_generator_free(eg_generator *generator) {
    if (generator != &default_generator) free(generator);
}

void eg_manual_seed(uint64_t seed) {
    default_generator.seed = seed;
    atomic_store(&default_generator.next_counter, 0);
}

void eg_generator_get_state(const eg_generator *generator, uint64_t *seed, uint64_t *position) {
    const eg_generator *g = resolve(generator);
    if (seed) *seed = g->seed;
    if (position) *position = atomic_load(&((eg_generator *)g)->next_counter);
}

void eg_generator_set_state(eg_generator *generator, uint64_t seed, uint64_t position) {
    eg_generator *g = resolve(generator);
    g->seed = seed;
    atomic_store(&g->next_counter, position);
}

uint64_t eg__generator_position(const eg_generator *generator) {
    return atomic_load(&resolve(generator)->next_counter);
}

void eg__generator_set_position(eg_generator *generator, uint64_t position) {
    atomic_store(&resolve(generator)->next_counter, position);
}

/* Claims n_blocks consecutive Philox counters from the generator. */
static uint64_t claim_blocks(eg_generator *generator, uint64_t n_blocks) {
    return atomic_fetch_add(&resolve(generator)->next_counter, n_blocks);
}

static uint64_t generator_seed(const eg_generator *generator) {
    return resolve(generator)->seed;
}

uint64_t eg_generator_next_seed(eg_generator *generator) {
    uint64_t counter = claim_blocks(generator, 1);
    uint32_t words[4];
    eg__philox4x32(generator_seed(generator), 1, counter, words);
    return ((uint64_t)words[0] << 32) | words[1];
}

enum { DISTRIBUTION_UNIFORM = 0, DISTRIBUTION_NORMAL = 1 };

static _Thread_local eg__random_observer observer;

void eg__random_set_observer(eg__random_observer new_observer) {
    observer = new_observer;
}

/* Element i uses words 2i and 2i+1 of the stream (enough for f64 and for a Box-Muller pair). */
eg_status eg__random_refill(eg_tensor *t, eg_generator *generator, eg__random_fill fill) {
    double a = fill.a, b = fill.b;
    eg_dtype dtype = t->dtype;
    uint64_t n = (uint64_t)t->n_elems;
    uint64_t first = claim_blocks(generator, (n + 1) / 2);
    uint64_t seed = generator_seed(generator);
    eg__staging staging;
    void *data = eg__staging_begin(t, &staging);
    if (!data) return eg_last_status();
    float *f32 = dtype == EG_DTYPE_F32 ? data : NULL;
    for (uint64_t block = 0; block * 2 < n; block++) {
        uint32_t w[4];
        eg__philox4x32(seed, 0, first + block, w);
        for (int j = 0; j < 2 && block * 2 + (uint64_t)j < n; j++) {
            uint64_t i = block * 2 + (uint64_t)j;
            double value;
            if (fill.distribution == DISTRIBUTION_UNIFORM) {
                double u = eg__uniform_f64(w[2 * j], w[2 * j + 1]);
                value = a + (b - a) * u;
                if (value >= b) value = a; /* rounding must not reach the open bound */
            } else {
                /* Box-Muller with one of the two outputs: simple and exactly reproducible. */
                double u1 = 1.0 - eg__uniform_f64(w[2 * j], 0); /* (0, 1] */
                double u2 = eg__uniform_f64(w[2 * j + 1], 0);
                value = a + b * sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
            }
            if (f32)
                f32[i] = (float)value;
            else
                eg__store_from_double(data, dtype, (int64_t)i, value);
            /* Rounding to the stored precision (f32, and often f16/bf16) can reach the open
             * bound too: the interval is [a, b), so such draws become a, as above. */
            if (fill.distribution == DISTRIBUTION_UNIFORM && dtype != EG_DTYPE_F64 &&
                (f32 ? (double)f32[i] : eg__load_as_double(data, dtype, (int64_t)i)) >= b) {
                if (f32)
                    f32[i] = (float)a;
                else
                    eg__store_from_double(data, dtype, (int64_t)i, a);
            }
        }
    }
    return eg__staging_finish(t, &staging);
}

static eg_tensor *random_tensor(eg_generator *generator, eg_dtype dtype, int n_dims,
                                const int64_t *shape, double a, double b, int kind) {
    const char *name = kind == DISTRIBUTION_UNIFORM ? "random_uniform" : "random_normal";
    if (!eg_dtype_is_float(dtype)) {
        eg__error(EG_ERR_DTYPE, "%s: dtype must be a float type, got %s", name,
                  eg_dtype_name(dtype));
        return NULL;
    }
    if (!isfinite(a) || !isfinite(b) || (kind == DISTRIBUTION_NORMAL && b < 0)) {
        eg__error(EG_ERR_INVALID_ARGUMENT, "%s: invalid parameters %g, %g", name, a, b);
        return NULL;
    }
    eg_tensor *t = eg__tensor_alloc(dtype, n_dims, shape, NULL);
    if (!t) return NULL;
    eg__random_fill fill = {kind, a, b};
    if (eg__random_refill(t, generator, fill) != EG_OK) {
        eg_release(t);
        return NULL;
    }
    if (observer) observer(t, generator, fill);
    return t;
}

eg_tensor *eg_random_uniform(eg_generator *generator, eg_dtype dtype, int n_dims,
                             const int64_t *shape, double low, double high) {
    if (!(low < high)) {
        eg__error(EG_ERR_INVALID_ARGUMENT, "random_uniform: low (%g) must be < high (%g)", low,
                  high);
        return NULL;
    }
    return random_tensor(generator, dtype, n_dims, shape, low, high, DISTRIBUTION_UNIFORM);
}

eg_tensor *eg_random_normal(eg_generator *generator, eg_dtype dtype, int n_dims,
                            const int64_t *shape, double mean, double stddev) {
    return random_tensor(generator, dtype, n_dims, shape, mean, stddev, DISTRIBUTION_NORMAL);
}
