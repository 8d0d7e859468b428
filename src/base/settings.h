/* Internal: yes/no settings read from the environment (EG_CHECK_NUMERICS=1, EG_CUDA_SYNC=1, …):
 * on when the variable is set to anything but "" and "0", so that every switch reads the same
 * way. */
#ifndef EAGLE_SRC_BASE_SETTINGS_H
#define EAGLE_SRC_BASE_SETTINGS_H

#include <stdatomic.h>
#include <stdbool.h>

/* Whether the variable `name` is set to something other than "" and "0". */
bool eg__setting_on(const char *name);

/* The same, read once into *state (an atomic_int initialised to -1) and then answered from it:
 * for settings asked on every op. Thread-safe (racing first calls store the same value). */
bool eg__setting_on_once(atomic_int *state, const char *name);

#endif
