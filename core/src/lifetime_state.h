/*
 * The client's lifetime (lifetime.c): its references and its close. The
 * state is lifetime.c's; watchdog.c writes the callback fields around a
 * lost-lock callback. Embedded in the client as c->life.
 */
#ifndef REDMUTEX_LIFETIME_STATE_H
#define REDMUTEX_LIFETIME_STATE_H

#include "internal.h"

#include <pthread.h>

struct redmutex_lock;

/* Guarded by c->mu, all of it. */
typedef struct rm_lifetime {
    int refs;                            /* the user's reference (until free) + one per lock handle and per thread */
    bool closed;                         /* redmutex_client_close has begun (read through rm_client_open) */
    bool shut_down;                      /* close has finished: no holds are released any more */
    struct redmutex_lock *callback_lock; /* lock whose callback is running now (watchdog.c writes it) */
    pthread_t callback_thread;           /* ... and the thread running it */
} rm_lifetime;

#endif
