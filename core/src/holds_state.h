/*
 * The hold registry and its renewal (holds.c, watchdog.c, renew.c): every
 * hold of every handle, and the watchdog that renews them. Embedded in the
 * client as c->holds.all; guarded by c->mu, all of it (the conditions are set
 * once and waited on with c->mu).
 */
#ifndef REDMUTEX_HOLDS_STATE_H
#define REDMUTEX_HOLDS_STATE_H

#include "internal.h"

#include <pthread.h>

struct rm_hold;
struct rm_watchdog;

typedef struct rm_holds_state {
    struct rm_hold *all; /* every hold of every handle (for shutdown) */
    uint64_t next_id;
    uint64_t restarts_seen;    /* the pool's restarts (c->pool.restarts) the registry has acted on */
    uint64_t moves_seen;       /* the pool's failovers (c->pool.moves) the watchdog has acted on */
    uint64_t *switches_seen;   /* per deployment: its failovers acted on; NULL until the watchdog starts */
    struct rm_watchdog *wd;    /* NULL until the first hold */
    pthread_cond_t wake;       /* the watchdog thread sleeps on it; the pool broadcasts it on news */
    pthread_cond_t renew_done; /* broadcast when a renewal batch or callback finishes */
} rm_holds_state;

#endif
