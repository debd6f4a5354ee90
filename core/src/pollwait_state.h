/*
 * Pollable waits (pollwait.c, waitready.c): the ready list, its timer and
 * the client's wait fd. Embedded in the client as c->pollwait.
 */
#ifndef REDMUTEX_POLLWAIT_STATE_H
#define REDMUTEX_POLLWAIT_STATE_H

#include "internal.h"

struct rm_pollwaits;

typedef struct rm_pollwait_state {
    struct rm_pollwaits *pw; /* c->mu: NULL until the first pollable wait or wait fd */
    /* Its ready eventfd, which redmutex_client_interrupt() writes (atomic,
       unlocked: async-signal-safe); -1 until made. */
    _Atomic int efd;
} rm_pollwait_state;

#endif
