/* Internal: Philox-4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3"). A
 * counter-based generator: the n-th block depends only on (key, n), so any thread can compute any
 * part of a random tensor and results never depend on how work was split. */
#ifndef EAGLE_SRC_CORE_RANDOM_H
#define EAGLE_SRC_CORE_RANDOM_H

#include <stdint.h>

/* Four 32-bit random words for counter `counter` under a 64-bit key. */
void eg__philox4x32(uint64_t key, uint64_t counter_high, uint64_t counter, uint32_t out[4]);

/* Uniform in [0, 1) from one word (24 bits: exactly representable in f32). */
static inline float eg__uniform_f32(uint32_t word) { return (float)(word >> 8) * 0x1.0p-24f; }
/* Uniform in [0, 1) from two words (53 bits). */
static inline double eg__uniform_f64(uint32_t high, uint32_t low) {
    return (double)(((uint64_t)high << 21) ^ (uint64_t)(low >> 11)) * 0x1.0p-53;
}

#endif
