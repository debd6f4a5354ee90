/*
 * Waits in progress and how they are ended (interrupt.c). Embedded in the
 * client as c->intr. redmutex_client_interrupt runs in signal handlers, so
 * what it touches is atomic.
 */
#ifndef REDMUTEX_INTERRUPT_STATE_H
#define REDMUTEX_INTERRUPT_STATE_H

#include "internal.h"

struct rm_wait;

typedef struct rm_interrupt {
    _Atomic uint64_t gen;  /* atomic: bumped by redmutex_client_interrupt(), async-signal-safe */
    _Atomic int fd;        /* atomic: eventfd written by it; -1 until the first wait */
    _Atomic bool closing;  /* atomic: close has begun, every wait ends */
    uint64_t drained;      /* c->mu: the generation when the eventfd was last drained */
    struct rm_wait *waits; /* c->mu: waits in progress */
} rm_interrupt;

#endif
