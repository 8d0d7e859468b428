/* Internal error helpers: how library code raises the per-thread error. */
#ifndef EAGLE_SRC_BASE_ERROR_H
#define EAGLE_SRC_BASE_ERROR_H

#include <stdbool.h>

#include "eagle/status.h"

/* Records an error unless one is already pending on this thread (the first one wins), appending
 * " at FILE:LINE" from the caller's call site when known. Returns status so callers can write
 * `return eg__error(...)`. fmt is printf-style. */
eg_status eg__error(eg_status status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
bool eg__error_pending(void);
/* A compound operation (a gradient, an optimizer step) that judges its own success by the error
 * state sets a pending earlier error aside first, so that a stale error does not make it fail,
 * and restores it at the end: the earlier error still wins over any raised meanwhile (whose
 * status the operation returns). */
#define EG_ERROR_MESSAGE_SIZE 1024
typedef struct eg__saved_error {
    eg_status status;
    char message[EG_ERROR_MESSAGE_SIZE];
} eg__saved_error;
void eg__error_set_aside(eg__saved_error *saved);
void eg__error_restore(const eg__saved_error *saved);

/* The call site last recorded by a public macro on this thread (file may be NULL). */
void eg__callsite_get(const char **file, int *line);
/* Only the part of path after its last '/': build paths are noise in a message. */
const char *eg__file_base_name(const char *path);

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
