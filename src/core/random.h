/* Internal: Philox-4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3"). A
 * counter-based generator: the n-th block depends only on (key, n), so any thread can compute any
 * part of a random tensor and results never depend on how work was split. */
#ifndef EAGLE_SRC_CORE_RANDOM_H
#define EAGLE_SRC_CORE_RANDOM_H

#include <stdint.h>

#include "eagle/tensor.h"

/* Four 32-bit random words for counter `counter` under a 64-bit key. */
void eg__philox4x32(uint64_t key, uint64_t counter_high, uint64_t counter, uint32_t out[4]);

/* Uniform in [0, 1) from one word (24 bits: exactly representable in f32). */
static inline float eg__uniform_f32(uint32_t word) {
    return (float)(word >> 8) * 0x1.0p-24f;
}
/* Uniform in [0, 1) from two words (53 bits). */
static inline double eg__uniform_f64(uint32_t high, uint32_t low) {
    return (double)(((uint64_t)high << 21) ^ (uint64_t)(low >> 11)) * 0x1.0p-53;
}

/* How eg_random_uniform / eg_random_normal filled a tensor. */
typedef struct eg__random_fill {
    int distribution; /* 0 uniform in [a, b), 1 normal of mean a and standard deviation b */
    double a, b;
} eg__random_fill;

/* Told, on the calling thread, of every tensor eg_random_uniform/normal fill (t owned by the
 * caller of the random function: an observer that keeps t takes a reference). Graph mode records
 * the draws of a traced function so that each replay draws anew, as the eager calls would. NULL:
 * nobody (the default). */
typedef void (*eg__random_observer)(eg_tensor *t, eg_generator *generator, eg__random_fill fill);
void eg__random_set_observer(eg__random_observer observer);

/* Makes generator what NULL names on this thread instead of the default generator (NULL: the
 * default again): a data-parallel replica's own stream, so that replicas running at once draw
 * their dropout masks in a fixed order, and different ones. The caller keeps it alive while set. */
void eg__random_set_thread_default(eg_generator *generator);
/* The default generator's seed (eg_manual_seed's). */
uint64_t eg__random_default_seed(void);

/* Where generator's stream is (NULL: the default generator), and putting it back there: a
 * model whose build failed leaves the stream as it found it, so that a retry draws the same
 * initial weights as a first build would. */
uint64_t eg__generator_position(const eg_generator *generator);
void eg__generator_set_position(eg_generator *generator, uint64_t position);

/* Fills t (made by eg_random_uniform/normal with `fill`) with the next values of generator's
 * stream (NULL: the default generator), as a new call would. On a GPU the values are drawn on
 * the host and copied (the same values on every device); an error of that copy is returned. */
eg_status eg__random_refill(eg_tensor *t, eg_generator *generator, eg__random_fill fill);

#endif
