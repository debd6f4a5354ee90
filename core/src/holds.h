/*
 * The hold registry (holds.c): what this process holds, per handle and per
 * client, and the rules for changing a hold.
 *
 * A hold is changed by one operation at a time: the thread that sets `busy`
 * (release, extend, forget) owns it until it clears it; other operations on
 * the same hold wait for that (rm_hold_claim) or skip it. Waiting for a
 * renewal in flight drops c->mu, so ownership, not the mutex, is what keeps
 * a hold alive across it. Every function here is called with c->mu held,
 * unless it says otherwise.
 *
 * Layering: above quorum (votes) and the watchdog's schedule, below the lock
 * operations (attempt.c, acquire.c, release.c, extend.c, query.c).
 */
#ifndef REDMUTEX_HOLDS_H
#define REDMUTEX_HOLDS_H

#include "internal.h"
#include "quorum.h"

/** This process's hold of owner through l (not one being forgotten), or NULL. */
rm_hold *rm_hold_find(redmutex_lock *l, const char *owner, pid_t pid);
/** The hold with this id (not one being forgotten), or NULL: finds a hold again after a round trip. */
rm_hold *rm_hold_find_by_id(redmutex_lock *l, uint64_t id);
/** A hold for this owner made by another process (inherited through fork), or NULL. */
rm_hold *rm_hold_find_foreign(redmutex_lock *l, const char *owner, pid_t pid);
/** Waits until nobody owns h, then takes it (busy). NULL if it was forgotten meanwhile. */
rm_hold *rm_hold_claim(redmutex_client *c, redmutex_lock *l, rm_hold *h);
/** Clears busy and lets threads waiting for the hold look again. */
void rm_hold_unbusy(redmutex_client *c, rm_hold *h);
/** Removes h from the watchdog and frees it. The caller owns h (busy) or has the handle to itself. */
void rm_hold_forget(redmutex_client *c, rm_hold *h);
/** Current state, turning HELD/FAILING into LOST once validity has run out (whoever notices first). */
redmutex_state rm_hold_state(redmutex_client *c, rm_hold *h, int64_t now_ns);
/** Whether this process holds the lock for owner through l (reentrancy). Takes c->mu itself. */
bool rm_hold_exists(redmutex_lock *l, const char *owner);
/**
 * Records a successful acquisition by owner (value on the servers), sent at
 * `started_ns`, with the votes that granted it, and schedules its renewal or
 * expiry notice. 0, REDMUTEX_ECLOSED, REDMUTEX_ELOST (the owner's earlier
 * hold was lost, or a plain lock's is still there), REDMUTEX_ENOMEM: then
 * the caller undoes the acquisition on the servers.
 */
int rm_hold_record(redmutex_lock *l, const char *owner, const char *value, int64_t started_ns, const rm_votes *v);

#endif
