/* Yes/no settings of the environment (see settings.h). */
#include "base/settings.h"

#include <stdlib.h>
#include <string.h>

bool eg__setting_on(const char *name) {
    const char *value = getenv(name);
    return value && *value && strcmp(value, "0") != 0;
}

bool eg__setting_on_once(atomic_int *state, const char *name) {
    int s = atomic_load_explicit(state, memory_order_relaxed);
    if (s < 0) {
        s = eg__setting_on(name);
        atomic_store_explicit(state, s, memory_order_relaxed);
    }
    return s != 0;
}
