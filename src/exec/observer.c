/* The op observer list (src/exec/observer.h). */
#include <pthread.h>

#include "base/error.h"
#include "exec/observer.h"

atomic_uint eg__observing_everywhere;
_Thread_local unsigned eg__observing_here;

/* The list readers walk: sorted by order, each entry with its slot (bit). A registration
 * writes the next list (one entry longer; lists[k] holds k observers) and publishes it, never
 * changing a published one, so readers need no lock and may still walk an older list. */
typedef struct observer_list {
    int n;
    const eg__op_observer *observers[EG__MAX_OBSERVERS];
    int slots[EG__MAX_OBSERVERS];
} observer_list;

static observer_list lists[EG__MAX_OBSERVERS + 1];
static _Atomic(const observer_list *) current_list = &lists[0];
static pthread_mutex_t observers_mutex = PTHREAD_MUTEX_INITIALIZER;

int eg__observer_add(const eg__op_observer *observer) {
    pthread_mutex_lock(&observers_mutex);
    const observer_list *old = atomic_load_explicit(&current_list, memory_order_relaxed);
    for (int i = 0; i < old->n; i++)
        if (old->observers[i] == observer) {
            pthread_mutex_unlock(&observers_mutex);
            return old->slots[i];
        }
    if (old->n == EG__MAX_OBSERVERS) {
        pthread_mutex_unlock(&observers_mutex);
        eg__error(EG_ERR_INTERNAL, "observer '%s': all %d observer slots are taken", observer->name,
                  EG__MAX_OBSERVERS);
        return -1;
    }
    observer_list *list = &lists[old->n + 1];
    int slot = old->n, at = old->n;
    *list = *old;
    for (; at > 0 && list->observers[at - 1]->order > observer->order; at--) {
        list->observers[at] = list->observers[at - 1];
        list->slots[at] = list->slots[at - 1];
    }
    list->observers[at] = observer;
    list->slots[at] = slot;
    list->n++;
    atomic_store_explicit(&current_list, list, memory_order_release);
    pthread_mutex_unlock(&observers_mutex);
    return slot;
}

void eg__observe_everywhere(int slot, bool on) {
    if (on)
        atomic_fetch_or_explicit(&eg__observing_everywhere, 1u << slot, memory_order_release);
    else
        atomic_fetch_and_explicit(&eg__observing_everywhere, ~(1u << slot), memory_order_release);
}

unsigned eg__observers_begin(eg__op op, int n_inputs, const eg_tensor *const *inputs,
                             eg__op_span *spans) {
    unsigned on =
        eg__observing_here | atomic_load_explicit(&eg__observing_everywhere, memory_order_acquire);
    const observer_list *list = atomic_load_explicit(&current_list, memory_order_acquire);
    for (int i = 0; i < list->n; i++)
        if ((on >> list->slots[i]) & 1u && list->observers[i]->op_begin)
            list->observers[i]->op_begin(op, n_inputs, inputs, &spans[list->slots[i]]);
    return on;
}

void eg__observers_end(unsigned on, eg__op op, int n_inputs, const eg_tensor *const *inputs,
                       const eg__attrs *attrs, eg_tensor *output, eg__op_span *spans) {
    const observer_list *list = atomic_load_explicit(&current_list, memory_order_acquire);
    for (int i = list->n - 1; i >= 0; i--)
        if ((on >> list->slots[i]) & 1u && list->observers[i]->op_end)
            list->observers[i]->op_end(op, n_inputs, inputs, attrs, output, &spans[list->slots[i]]);
}
