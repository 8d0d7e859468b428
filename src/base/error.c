#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "base/error.h"

typedef struct error_state {
    eg_status status;
    char message[EG_ERROR_MESSAGE_SIZE];
    uint64_t call;   /* the public call the pending error belongs to */
    uint64_t serial; /* when it was recorded or taken over (eg__error_mark) */
    const char *callsite_file;
    int callsite_line;
    uint64_t current_call; /* the public call running now (0 before the first wrapped one) */
    uint64_t calls_started;
    uint64_t last_serial;
} error_state;

static _Thread_local error_state thread_error;

const char *eg_status_string(eg_status status) {
    switch (status) {
#define EG_STATUS_CASE_(name, value, text)                                                         \
    case name:                                                                                     \
        return text;
        EG_STATUS_TABLE(EG_STATUS_CASE_)
#undef EG_STATUS_CASE_
    }
    return "unknown status";
}

const char *eg_last_error(void) {
    return thread_error.message;
}
eg_status eg_last_status(void) {
    return thread_error.status;
}
bool eg__error_pending(void) {
    return thread_error.status != EG_OK;
}

void eg_clear_error(void) {
    thread_error.status = EG_OK;
    thread_error.message[0] = '\0';
}

uint64_t eg__error_mark(void) {
    return thread_error.last_serial;
}
bool eg__error_since(uint64_t mark) {
    return thread_error.status != EG_OK && thread_error.serial > mark;
}

/* The rule of include/eagle/status.h: whether a new error with `status`, raised by the current
 * call, takes the place of the pending one. A dropped EG_ERR_NULL_ARGUMENT makes the pending
 * error the current call's too (its cause), so that later errors of this call keep it. */
static bool takes_over(eg_status status) {
    error_state *e = &thread_error;
    if (e->status == EG_OK) return true;
    if (e->call == e->current_call) return false;
    if (status != EG_ERR_NULL_ARGUMENT) return true;
    e->call = e->current_call;
    e->serial = ++e->last_serial;
    return false;
}

static void record(eg_status status) {
    thread_error.status = status;
    thread_error.call = thread_error.current_call;
    thread_error.serial = ++thread_error.last_serial;
}

void eg__error_save(eg__saved_error *saved) {
    saved->status = thread_error.status;
    memcpy(saved->message, thread_error.message, sizeof saved->message);
    saved->call = thread_error.call;
    saved->serial = thread_error.serial;
    saved->owner = &thread_error;
}

void eg__error_set_aside(eg__saved_error *saved) {
    eg__error_save(saved);
    eg_clear_error();
}

eg_status eg__error_raise_copy(const eg__saved_error *saved) {
    if (saved->status == EG_OK || !takes_over(saved->status)) return saved->status;
    memcpy(thread_error.message, saved->message, sizeof thread_error.message);
    thread_error.message[sizeof thread_error.message - 1] = '\0';
    record(saved->status);
    return saved->status;
}

void eg__error_restore(const eg__saved_error *saved) {
    if (saved->status == EG_OK) return;
    if (saved->owner != &thread_error) { /* another thread's: raised here, now */
        eg__error_raise_copy(saved);
        return;
    }
    error_state *e = &thread_error;
    /* The saved error came first: it stays unless the one raised meanwhile belongs to a later
     * call and is not a NULL handed on (the rule of eg__error, applied in that order). */
    if (e->status != EG_OK && e->call != saved->call && e->status != EG_ERR_NULL_ARGUMENT) return;
    uint64_t call = e->status != EG_OK ? e->call : saved->call;
    uint64_t serial = e->status != EG_OK ? e->serial : saved->serial;
    e->status = saved->status;
    memcpy(e->message, saved->message, sizeof e->message);
    e->call = call;
    e->serial = serial;
}

void eg_callsite_set(const char *file, int line) {
    thread_error.callsite_file = file;
    thread_error.callsite_line = line;
    thread_error.current_call = ++thread_error.calls_started;
}

void eg__callsite_get(const char **file, int *line) {
    *file = thread_error.callsite_file;
    *line = thread_error.callsite_line;
}

void eg__callback_begin(eg__callback_frame *frame) {
    frame->file = thread_error.callsite_file;
    frame->line = thread_error.callsite_line;
    frame->call = thread_error.current_call;
    frame->mark = thread_error.last_serial;
}

void eg__callback_end(const eg__callback_frame *frame) {
    thread_error.callsite_file = frame->file;
    thread_error.callsite_line = frame->line;
    thread_error.current_call = frame->call;
    if (eg__error_since(frame->mark)) thread_error.call = frame->call;
}

const char *eg__file_base_name(const char *path) {
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

eg_status eg__error(eg_status status, const char *fmt, ...) {
    if (!takes_over(status)) return status;
    /* formatted aside first: the arguments may quote the message this one replaces */
    char message[sizeof thread_error.message];
    va_list args;
    va_start(args, fmt);
    int n = vsnprintf(message, sizeof message, fmt, args);
    va_end(args);
    if (n < 0) n = 0;
    size_t used = (size_t)n < sizeof message ? (size_t)n : sizeof message - 1;
    if (thread_error.callsite_file)
        snprintf(message + used, sizeof message - used, " at %s:%d",
                 eg__file_base_name(thread_error.callsite_file), thread_error.callsite_line);
    memcpy(thread_error.message, message, sizeof message);
    record(status);
    return status;
}
