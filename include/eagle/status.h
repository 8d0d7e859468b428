/* Eagle — status codes and the per-thread error state.
 *
 * Every fallible non-op function returns an eg_status (EG_OK == 0, failures negative). Ops return
 * a tensor or NULL; the reason for a NULL is kept per thread and read with eg_last_error().
 *
 * Which error is kept — "the first cause of a chain wins":
 *   - Every public call made through the headers' macros starts a new call on its thread.
 *   - A failing call whose arguments were valid reports its own error, even when an earlier call
 *     left an error that was never cleared: the new error replaces the stale one.
 *   - A NULL passed along a chain (eg_relu(eg_add(eg_matmul(x, w), b)) where matmul failed) is
 *     not a new cause: a call failing with EG_ERR_NULL_ARGUMENT while an error is pending keeps
 *     that error, so the chain can be checked once at its end and names the real cause.
 *   - Inside one call the first error wins: what fails later in the same call is a consequence.
 *     A callback that a call runs (a traced function, a dataset map, a fit callback) makes calls
 *     of its own, under the same rule; the error it leaves becomes the running call's.
 * eg_clear_error() forgets the pending error. Code that calls the library without the macros (a
 * language binding, or EG_NO_CALLSITE defined) calls eg_callsite_set(NULL, 0) before each call to
 * get the same; without it every error until eg_clear_error() counts as one call's (the first
 * wins). */
#ifndef EAGLE_STATUS_H
#define EAGLE_STATUS_H

#ifdef __cplusplus
extern "C" {
#endif

/* X(name, value, description): the one table every status code and its text come from. */
#define EG_STATUS_TABLE(X)                                                                         \
    X(EG_OK, 0, "ok")                                                                              \
    X(EG_ERR_INVALID_ARGUMENT, -1, "invalid argument")                                             \
    X(EG_ERR_NULL_ARGUMENT, -2, "NULL argument")                                                   \
    X(EG_ERR_SHAPE, -3, "shape mismatch")                                                          \
    X(EG_ERR_DTYPE, -4, "dtype mismatch")                                                          \
    X(EG_ERR_DEVICE, -5, "device mismatch")                                                        \
    X(EG_ERR_AXIS, -6, "axis out of range")                                                        \
    X(EG_ERR_OUT_OF_MEMORY, -7, "out of memory")                                                   \
    X(EG_ERR_UNSUPPORTED, -8, "unsupported")                                                       \
    X(EG_ERR_STATE, -9, "invalid state")                                                           \
    X(EG_ERR_IO, -10, "input/output error")                                                        \
    X(EG_ERR_FORMAT, -11, "malformed data")                                                        \
    X(EG_ERR_INTERNAL, -12, "internal error")                                                     \
    X(EG_ERR_NUMERICS, -13, "non-finite value")

typedef enum eg_status {
#define EG_STATUS_ENUM_(name, value, text) name = value,
    EG_STATUS_TABLE(EG_STATUS_ENUM_)
#undef EG_STATUS_ENUM_
} eg_status;

/* Short fixed text of a status code ("shape mismatch"); never NULL, static storage. */
const char *eg_status_string(eg_status status);

/* The message of the pending error on this thread (the rule above), e.g.
 * "matmul: inner dimensions differ: (32, 784) x (128, 64) at train.c:41", or "" when none.
 * The pointer stays valid for the thread's life; the text it points to changes when a later
 * call's error replaces this one and empties at eg_clear_error(). */
const char *eg_last_error(void);

/* The status of that error, or EG_OK when none is pending. */
eg_status eg_last_status(void);

/* Forget the pending error on this thread. */
void eg_clear_error(void);

/* Records the caller's file:line (file may be NULL) for the next library call on this thread and
 * starts a new call for the rule above; the public headers' macros call it so that errors name
 * the user's line. Not normally called directly. */
void eg_callsite_set(const char *file, int line);

#if !defined(EG_NO_CALLSITE)
/* Wraps a public call so that an error it raises names the caller's file:line. Every public
 * function that can fail is wrapped: an unwrapped one would report the line of the previous
 * wrapped call instead. */
#define EG_CALLSITE_(call) (eg_callsite_set(__FILE__, __LINE__), call)
#endif

#ifdef __cplusplus
}
#endif
#endif
