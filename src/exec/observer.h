/* Internal: op observers — how the tape and the profiler see every op an executor runs or
 * records, without the executors naming them.
 *
 * An observer registers once (eg__observer_add) and then switches itself on and off: for every
 * thread (the profiler while it runs) or for the calling thread only (a tape while it records
 * outside a no-grad region). While no observer is on, an op pays one check (eg__observing). */
#ifndef EAGLE_SRC_EXEC_OBSERVER_H
#define EAGLE_SRC_EXEC_OBSERVER_H

#include <stdatomic.h>
#include <stdint.h>

#include "ops/internal.h"

/* What an observer keeps from an op's begin to its end (the profiler's clocks). */
typedef struct eg__op_span {
    uint64_t values[4];
} eg__op_span;

typedef struct eg__op_observer {
    const char *name;
    /* Observers are called in rising `order` at an op's begin and in falling order at its end:
     * one that times ops (low order) then encloses one that records them (high order). */
    int order;
    /* Before the op runs (eager) or is recorded (lazy, graph tracing). May be NULL. */
    void (*op_begin)(eg__op op, int n_inputs, const eg_tensor *const *inputs, eg__op_span *span);
    /* After it: output is its result, or NULL when the op failed or a NULL input was passed on
     * (then nothing ran). May be NULL. */
    void (*op_end)(eg__op op, int n_inputs, const eg_tensor *const *inputs, const eg__attrs *attrs,
                   eg_tensor *output, eg__op_span *span);
} eg__op_observer;

/* The observers that can be on at once. */
#define EG__MAX_OBSERVERS 8

/* Registers observer (static storage) and returns its slot, the same for a second call; -1 with
 * an error when all slots are taken. Thread-safe. */
int eg__observer_add(const eg__op_observer *observer);

/* Bit `slot` on: the observer sees ops of every thread / of the calling thread. */
extern atomic_uint eg__observing_everywhere;
extern _Thread_local unsigned eg__observing_here;
void eg__observe_everywhere(int slot, bool on);
static inline void eg__observe_here(int slot, bool on) {
    if (on)
        eg__observing_here |= 1u << slot;
    else
        eg__observing_here &= ~(1u << slot);
}

/* Whether any observer is on for this thread: the one check every op makes. */
static inline bool eg__observing(void) {
    return (eg__observing_here |
            atomic_load_explicit(&eg__observing_everywhere, memory_order_relaxed)) != 0;
}

/* Calls every observer that is on: begin in rising order, end in falling order. `on` is the
 * set of observers that were on at begin (the same set gets the end). */
unsigned eg__observers_begin(eg__op op, int n_inputs, const eg_tensor *const *inputs,
                             eg__op_span *spans);
void eg__observers_end(unsigned on, eg__op op, int n_inputs, const eg_tensor *const *inputs,
                       const eg__attrs *attrs, eg_tensor *output, eg__op_span *spans);

#endif
