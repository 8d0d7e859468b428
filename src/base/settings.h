/* Internal: settings read from the environment. Yes/no ones (EG_CHECK_NUMERICS=1, EG_CUDA_SYNC=1,
 * …) are on when the variable is set to anything but "" and "0", so that every switch reads the
 * same way; sizes (EG_MEMORY_LIMIT=512M) are read by eg__parse_bytes. */
#ifndef EAGLE_SRC_BASE_SETTINGS_H
#define EAGLE_SRC_BASE_SETTINGS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

/* Whether the variable `name` is set to something other than "" and "0". */
bool eg__setting_on(const char *name);

/* The same, read once into *state (an atomic_int initialised to -1) and then answered from it:
 * for settings asked on every op. Thread-safe (racing first calls store the same value). */
bool eg__setting_on_once(atomic_int *state, const char *name);

/* A size "<bytes>[K|M|G]": an unsigned decimal number ("1048576", "1.5G"), then at most one of
 * K, M, G (binary units, either case), nothing else: no sign, space or unit letters after. False,
 * *bytes untouched, for anything else and for a size past 2^64 - 1. */
bool eg__parse_bytes(const char *text, uint64_t *bytes);

#endif
