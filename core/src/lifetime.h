/*
 * Lifetimes of clients and lock handles (lifetime.c).
 */
#ifndef REDMUTEX_LIFETIME_H
#define REDMUTEX_LIFETIME_H

#include "handle.h"

/* ---- lifetimes (lifetime.c) ----------------------------------------------- */

/** Drops a reference to l, freeing it at zero. Caller holds c->mu and a client reference of its own. */
void rm_lock_unref_locked(redmutex_client *c, redmutex_lock *l) RM_REQUIRES(c->mu);
/** Destroys orphaned holds nobody works on. Caller holds c->mu and a client reference. */
void rm_orphans_drop_locked(redmutex_client *c) RM_REQUIRES(c->mu);

#endif
