/* Internal error helpers: how library code raises the per-thread error. */
#ifndef EAGLE_SRC_CORE_ERROR_H
#define EAGLE_SRC_CORE_ERROR_H

#include <stdbool.h>

#include "eagle/status.h"

/* Records an error unless one is already pending on this thread (the first one wins), appending
 * " at FILE:LINE" from the caller's call site when known. Returns status so callers can write
 * `return eg__error(...)`. fmt is printf-style. */
eg_status eg__error(eg_status status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
bool eg__error_pending(void);
/* The call site last recorded by a public macro on this thread (file may be NULL). */
void eg__callsite_get(const char **file, int *line);

/* For broken internal invariants only — never for user input. Reports through the error state
 * (EG_ERR_INTERNAL) instead of aborting; `action` runs afterwards (usually a return). */
#define EG_ASSERT(cond, action)                                                                    \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            eg__error(EG_ERR_INTERNAL, "internal invariant failed: %s (%s:%d)", #cond, __FILE__,   \
                      __LINE__);                                                                   \
            action;                                                                                \
        }                                                                                          \
    } while (0)

#endif
