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

bool eg__parse_bytes(const char *text, uint64_t *bytes) {
    if (!text || *text < '0' || *text > '9') return false;
    uint64_t whole = 0;
    const char *p = text;
    for (; *p >= '0' && *p <= '9'; p++) {
        if (whole > (UINT64_MAX - (uint64_t)(*p - '0')) / 10) return false;
        whole = whole * 10 + (uint64_t)(*p - '0');
    }
    double fraction = 0, place = 0.1;
    if (*p == '.') {
        if (p[1] < '0' || p[1] > '9') return false;
        for (p++; *p >= '0' && *p <= '9'; p++, place *= 0.1) fraction += (*p - '0') * place;
    }
    unsigned shift = 0;
    switch (*p) {
    case 'k':
    case 'K':
        shift = 10;
        break;
    case 'm':
    case 'M':
        shift = 20;
        break;
    case 'g':
    case 'G':
        shift = 30;
        break;
    default:
        break;
    }
    if (shift) p++;
    if (*p != '\0' || whole > (UINT64_MAX >> shift)) return false;
    uint64_t part = (uint64_t)(fraction * (double)((uint64_t)1 << shift));
    if ((whole << shift) > UINT64_MAX - part) return false;
    *bytes = (whole << shift) + part;
    return true;
}
