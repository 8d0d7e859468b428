/* The three executors' tables, and which one a thread has now. Eager's op path itself is
 * inlined in eg__execute (src/eager/execute.c): it is every small op's overhead. */
#include "exec/executor.h"
#include "lazy/internal.h"

/* Fast-math regions (eagle/ops.h) live here, below the op builders that read them, so that
 * graph mode can key its traces by them too. */
static _Thread_local int fast_math_depth;

void eg_fast_math_begin(void) {
    fast_math_depth++;
}
void eg_fast_math_end(void) {
    if (fast_math_depth > 0) fast_math_depth--;
}
bool eg_fast_math_enabled(void) {
    return fast_math_depth > 0;
}

static eg_status run_now(const eg__effect *effect) {
    eg_status status = effect->run(effect->context);
    if (effect->free_context) effect->free_context(effect->context);
    return status;
}

static eg_status update_now(const eg__updater *updater, void *optimizer, int n,
                            eg_tensor *const *grads, eg_tensor *const *variables) {
    return updater->apply(optimizer, n, grads, variables);
}

static eg_status realize_tensors(int n, const eg_tensor *const *tensors) {
    return eg__lazy_realize(n, tensors);
}

/* A seed drawn now stays drawn. */
static void random_drawn_now(eg_tensor *t, eg_generator *generator) {
    (void)t;
    (void)generator;
}

/* Eager's run is reached only through eg__execute's inlined path. */
const eg__executor eg__eager_executor = {.name = "eager",
                                         .apply = run_now,
                                         .update = update_now,
                                         .random_drawn = random_drawn_now,
                                         .realize = realize_tensors};

/* Lazy mode computes tensors when they are read; effects happen at once (pending readers of a
 * variable keep the value they were called with: eg__lazy_before_write). */
const eg__executor eg__lazy_executor = {.name = "lazy",
                                        .run = eg__lazy_record,
                                        .apply = run_now,
                                        .update = update_now,
                                        .random_drawn = random_drawn_now,
                                        .realize = realize_tensors};

static eg_status defer(const eg__effect *effect) {
    return eg__graph_defer(effect->run, effect->free_context, effect->context, effect->n_reads,
                           effect->reads);
}

/* A traced function records ops as lazy mode does; its effects run at every replay. */
const eg__executor eg__graph_executor = {.name = "graph",
                                         .run = eg__lazy_record,
                                         .apply = defer,
                                         .update = eg__graph_defer_update,
                                         .random_drawn = eg__graph_note_random,
                                         .realize = realize_tensors};

const eg__executor *eg__executor_current(void) {
    if (eg__graph_tracing()) return &eg__graph_executor;
    return eg__lazy_recording() ? &eg__lazy_executor : &eg__eager_executor;
}
