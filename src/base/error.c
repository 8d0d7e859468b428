#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "base/error.h"

typedef struct error_state {
    eg_status status;
    char message[EG_ERROR_MESSAGE_SIZE];
    const char *callsite_file;
    int callsite_line;
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

void eg__error_set_aside(eg__saved_error *saved) {
    saved->status = thread_error.status;
    memcpy(saved->message, thread_error.message, sizeof saved->message);
    eg_clear_error();
}

void eg__error_restore(const eg__saved_error *saved) {
    if (saved->status == EG_OK) return;
    thread_error.status = saved->status;
    memcpy(thread_error.message, saved->message, sizeof thread_error.message);
}

void eg_callsite_set(const char *file, int line) {
    thread_error.callsite_file = file;
    thread_error.callsite_line = line;
}

void eg__callsite_get(const char **file, int *line) {
    *file = thread_error.callsite_file;
    *line = thread_error.callsite_line;
}

const char *eg__file_base_name(const char *path) {
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

eg_status eg__error(eg_status status, const char *fmt, ...) {
    if (thread_error.status != EG_OK) return status;
    thread_error.status = status;
    va_list args;
    va_start(args, fmt);
    int n = vsnprintf(thread_error.message, sizeof thread_error.message, fmt, args);
    va_end(args);
    if (n < 0) n = 0;
    size_t used =
        (size_t)n < sizeof thread_error.message ? (size_t)n : sizeof thread_error.message - 1;
    if (thread_error.callsite_file)
        snprintf(thread_error.message + used, sizeof thread_error.message - used, " at %s:%d",
                 eg__file_base_name(thread_error.callsite_file), thread_error.callsite_line);
    return status;
}
