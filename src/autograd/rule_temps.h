/* Internal: temporaries of one backward rule, released together when it ends (the rules of
 * backward_recurrent.c and backward_attention.c, whose composites make dozens). */
#ifndef EAGLE_SRC_AUTOGRAD_RULE_TEMPS_H
#define EAGLE_SRC_AUTOGRAD_RULE_TEMPS_H

#include "base/error.h"
#include "core/tensor_internal.h"

#define EG__RULE_TEMPS_MAX 64

typedef struct eg__rule_temps {
    eg_tensor *items[EG__RULE_TEMPS_MAX];
    int n;
    bool full; /* a rule made more: it fails instead of leaking */
} eg__rule_temps;

/* Remembers x (may be NULL) for release; returns it, or NULL (released) when full. */
static inline eg_tensor *eg__rule_temp(eg__rule_temps *t, eg_tensor *x) {
    if (!x) return NULL;
    if (t->n == EG__RULE_TEMPS_MAX) {
        t->full = true;
        eg_release(x);
        return NULL;
    }
    t->items[t->n++] = x;
    return x;
}

/* Releases them all; the rule's status (an internal error naming `rule` when it ran out). */
static inline eg_status eg__rule_finish(eg__rule_temps *t, const char *rule) {
    for (int i = 0; i < t->n; i++) eg_release(t->items[i]);
    t->n = 0;
    if (t->full) return eg__error(EG_ERR_INTERNAL, "%s backward: too many temporaries", rule);
    return eg_last_status();
}

#endif
