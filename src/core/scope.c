/* Scopes own the tensors created inside them; debug tracking lists live tensors. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/settings.h"
#include "core/tensor_internal.h"

typedef struct eg__scope {
    eg_tensor **items; /* slots; NULL where a tensor was released or kept */
    size_t n_items, capacity;
    struct eg__scope *parent;
} eg__scope;

static _Thread_local eg__scope *innermost_scope;
static _Thread_local int scope_depth;

void eg_scope_begin(void) {
    eg__scope *scope = calloc(1, sizeof *scope);
    if (!scope) {
        eg__error(EG_ERR_OUT_OF_MEMORY, "scope_begin: out of host memory");
        return;
    }
    scope->parent = innermost_scope;
    innermost_scope = scope;
    scope_depth++;
}

int eg_scope_depth(void) {
    return scope_depth;
}

static void scope_append(eg__scope *scope, eg_tensor *t) {
    if (scope->n_items == scope->capacity) {
        size_t capacity = scope->capacity ? scope->capacity * 2 : 64;
        eg_tensor **items = realloc(scope->items, capacity * sizeof *items);
        if (!items) {
            /* The tensor stays valid but unowned; say so rather than lose it silently. */
            eg__error(EG_ERR_OUT_OF_MEMORY, "scope: out of host memory; tensor left unowned");
            return;
        }
        scope->items = items;
        scope->capacity = capacity;
    }
    t->scope = scope;
    t->scope_slot = scope->n_items;
    scope->items[scope->n_items++] = t;
}

static _Thread_local int scope_suspended;

void eg__scope_suspend(void) {
    scope_suspended++;
}
void eg__scope_resume(void) {
    scope_suspended--;
}

void eg__scope_register(eg_tensor *t) {
    if (innermost_scope && !scope_suspended) scope_append(innermost_scope, t);
}

void eg__scope_forget(eg_tensor *t) {
    eg__scope *scope = t->scope;
    if (!scope) return;
    if (t->scope_slot < scope->n_items && scope->items[t->scope_slot] == t)
        scope->items[t->scope_slot] = NULL;
    t->scope = NULL;
}

eg_status eg_scope_end(void) {
    eg__scope *scope = innermost_scope;
    if (!scope) return eg__error(EG_ERR_STATE, "scope_end: no scope is open");
    innermost_scope = scope->parent;
    scope_depth--;
    /* Reverse order: the newest tensors first, mirroring creation. */
    for (size_t i = scope->n_items; i-- > 0;) {
        eg_tensor *t = scope->items[i];
        if (!t) continue;
        t->scope = NULL;
        eg__unref_because(t, EG__RELEASED_BY_SCOPE);
    }
    free(scope->items);
    free(scope);
    return EG_OK;
}

eg_tensor *eg_scope_keep(eg_tensor *t) {
    if (!t || !innermost_scope || t->scope != innermost_scope) return t;
    eg__scope_forget(t);
    if (innermost_scope->parent) scope_append(innermost_scope->parent, t);
    return t;
}

/* ---- debug tracking ---- */

static pthread_mutex_t debug_mutex = PTHREAD_MUTEX_INITIALIZER;
static eg_tensor *debug_head;
static atomic_bool debug_enabled;
static pthread_once_t debug_env_once = PTHREAD_ONCE_INIT;
/* True until EG_DEBUG_TENSORS has been read and found off, and while tracking is on. */
atomic_bool eg__debug_maybe_on = true;

static void debug_report_at_exit(void) {
    size_t n = eg_debug_live_tensors(NULL);
    if (n) {
        fprintf(stderr, "eagle: %zu tensor(s) still alive at exit:\n", n);
        eg_debug_live_tensors(stderr);
    }
}

/* Debug builds check every tensor unless EG_DEBUG_TENSORS=0 says otherwise (without the exit
 * report, which only the variable asks for). */
#ifdef EG_DEBUG_TENSORS_BY_DEFAULT
#define DEBUG_TENSORS_DEFAULT true
#else
#define DEBUG_TENSORS_DEFAULT false
#endif

static void debug_read_environment(void) {
    if (eg__setting_on("EG_DEBUG_TENSORS")) {
        atomic_store(&debug_enabled, true);
        atexit(debug_report_at_exit);
    } else if (!getenv("EG_DEBUG_TENSORS")) {
        atomic_store(&debug_enabled, DEBUG_TENSORS_DEFAULT);
    }
    atomic_store(&eg__debug_maybe_on, atomic_load(&debug_enabled));
}

void eg_debug_track_tensors(bool on) {
    pthread_once(&debug_env_once, debug_read_environment);
    atomic_store(&debug_enabled, on);
    atomic_store(&eg__debug_maybe_on, on);
}

void eg__debug_track_slow(eg_tensor *t) {
    pthread_once(&debug_env_once, debug_read_environment);
    if (!atomic_load_explicit(&debug_enabled, memory_order_relaxed)) return;
    pthread_mutex_lock(&debug_mutex);
    t->debug_tracked = true;
    t->debug_next = debug_head;
    if (debug_head) debug_head->debug_prev = t;
    debug_head = t;
    pthread_mutex_unlock(&debug_mutex);
}

void eg__debug_untrack(eg_tensor *t) {
    pthread_mutex_lock(&debug_mutex);
    if (t->debug_prev)
        t->debug_prev->debug_next = t->debug_next;
    else
        debug_head = t->debug_next;
    if (t->debug_next) t->debug_next->debug_prev = t->debug_prev;
    pthread_mutex_unlock(&debug_mutex);
}

eg_status eg__debug_released_error(const eg_tensor *t, const char *what, bool again) {
    static const char *const by[] = {
        [EG__RELEASED_BY_LIBRARY] = "inside the call",
        [EG__RELEASED_BY_USER] = "by eg_release",
        [EG__RELEASED_BY_SCOPE] = "by eg_scope_end",
    };
    char made_at[160];
    const char *problem = again ? "tensor released twice" : "tensor used after release";
    return eg__error(EG_ERR_STATE, "%s%s%s: made at %s, released %s at %s:%d", what ? what : "",
                     what ? ": " : "", problem, eg__tensor_made_at(t, made_at, sizeof made_at),
                     by[t->released_cause],
                     t->released_file ? eg__file_base_name(t->released_file) : "?",
                     t->released_line);
}

size_t eg_debug_live_tensors(FILE *out) {
    size_t n = 0;
    pthread_mutex_lock(&debug_mutex);
    for (eg_tensor *t = debug_head; t; t = t->debug_next) {
        n++;
        if (!out) continue;
        char shape[160];
        fprintf(out, "  tensor #%llu %s %s refs=%ld%s created at %s:%d\n",
                (unsigned long long)t->id, eg__shape_format(t->n_dims, t->shape, shape, 160),
                eg_dtype_name(t->dtype), (long)atomic_load(&t->refcount),
                t->variable ? " (variable)" : "", t->created_file ? t->created_file : "?",
                t->created_line);
    }
    pthread_mutex_unlock(&debug_mutex);
    return n;
}
