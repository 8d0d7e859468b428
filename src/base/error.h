/* Internal error helpers: how library code raises the per-thread error. */
#ifndef EAGLE_SRC_BASE_ERROR_H
#define EAGLE_SRC_BASE_ERROR_H

#include <stdbool.h>
#include <stdint.h>

#include "eagle/status.h"

/* Records an error, appending " at FILE:LINE" from the caller's call site when known, unless the
 * rule of include/eagle/status.h keeps the pending one: it does when the pending error belongs to
 * the current public call (the first cause inside one call wins) or when status is
 * EG_ERR_NULL_ARGUMENT (a NULL handed on from that failure; the pending error then becomes the
 * current call's too); otherwise the new error replaces one an earlier call left uncleared.
 * Returns status so callers can write `return eg__error(...)`. fmt is printf-style. */
eg_status eg__error(eg_status status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Whether any error is pending on this thread, also a stale one from an earlier call. */
bool eg__error_pending(void);

/* "Did this step fail?" for code that judges a step by the error state: take a mark before it,
 * then eg__error_since(mark) is true only when an error was recorded (or taken over by the
 * current call) after the mark, never for one an earlier call left pending. */
uint64_t eg__error_mark(void);
bool eg__error_since(uint64_t mark);

/* A copy of the error state. A compound operation (a gradient, an optimizer step) that judges its
 * own success by the error state sets a pending error aside first and restores it at the end;
 * the rule above then decides between it and any error raised meanwhile (whose status the
 * operation returns): an error raised meanwhile by this call replaces one an earlier call left.
 * A copy made on another thread (a worker's failure) is raised again by eg__error_restore or
 * eg__error_raise_copy as an error of the current call here. */
#define EG_ERROR_MESSAGE_SIZE 1024
typedef struct eg__saved_error {
    eg_status status;
    char message[EG_ERROR_MESSAGE_SIZE];
    uint64_t call, serial; /* the call it belonged to and when, on the thread it came from */
    const void *owner;     /* that thread's error state */
} eg__saved_error;
void eg__error_save(eg__saved_error *saved);
void eg__error_set_aside(eg__saved_error *saved); /* save, then clear */
void eg__error_restore(const eg__saved_error *saved);
/* Raises the copy's status and message (which has its call site already) as a new error of the
 * current call, by the rule above. Returns the copy's status. */
eg_status eg__error_raise_copy(const eg__saved_error *saved);

/* The call site last recorded by a public macro on this thread (file may be NULL). */
void eg__callsite_get(const char **file, int *line);
/* Only the part of path after its last '/': build paths are noise in a message. */
const char *eg__file_base_name(const char *path);

/* Around a user callback that a library call runs (a traced function, a dataset map, a fit
 * callback): the callback's own wrapped calls set call sites and start calls of their own; the
 * frame brings the library call's back afterwards, and an error the callback raised becomes the
 * library call's (so a later error of that call does not replace it). */
typedef struct eg__callback_frame {
    const char *file;
    int line;
    uint64_t call, mark;
} eg__callback_frame;
void eg__callback_begin(eg__callback_frame *frame);
void eg__callback_end(const eg__callback_frame *frame);

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
