/*
 * The watchdog (watchdog.c): renewal and expiry schedule, lost-lock
 * callbacks.
 *
 * Layering: above the hold registry and the fan-out; below the lock
 * operations and the client.
 */
#ifndef REDMUTEX_WATCHDOG_H
#define REDMUTEX_WATCHDOG_H

#include "holds.h"

/* ---- watchdog (watchdog.c) --------------------------------------------- */

/** Schedules h (renewal for watchdog holds, expiry notice otherwise). Caller holds c->mu. */
int rm_watchdog_schedule(rm_err *err, redmutex_client *c, rm_hold *h) RM_REQUIRES(c->mu);
/** Moves h's next renewal forward to due_ns if it is later. Caller holds c->mu. */
void rm_watchdog_renew_by(redmutex_client *c, rm_hold *h, int64_t due_ns) RM_REQUIRES(c->mu);
/** Removes h from the schedule and waits out an in-flight renewal. Caller holds c->mu. */
void rm_watchdog_cancel(redmutex_client *c, rm_hold *h) RM_REQUIRES(c->mu);
/** Stops and joins the watchdog thread (shutdown or fork). */
void rm_watchdog_stop(redmutex_client *c, int64_t deadline_ns);
/** Forgets the watchdog in a forked child without touching its thread. */
void rm_watchdog_forget(redmutex_client *c);
/** Marks h lost / failing and queues the news for the event fd and the callbacks (events.h); caller holds c->mu. */
void rm_hold_set_state(redmutex_client *c, rm_hold *h, redmutex_state st) RM_REQUIRES(c->mu);

#endif
