/*
 * Releases of unknown outcome (unsettled.c). Embedded in the client as
 * c->unsettled.
 */
#ifndef REDMUTEX_UNSETTLED_STATE_H
#define REDMUTEX_UNSETTLED_STATE_H

#include "internal.h"

struct rm_unsettled_list;

typedef struct rm_unsettled_state {
    struct rm_unsettled_list *list; /* c->mu; NULL until the first */
    /* ... how many. Atomic, unlocked: 0 lets an acquisition skip c->mu and
       the list; a release recorded just after the read is one the
       acquisition could not have waited for anyway. */
    _Atomic int n;
} rm_unsettled_state;

#endif
