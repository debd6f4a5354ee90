/*
 * Waiting by notification (waiter.c): the waiters on release channels and
 * the hand-off between threads of one client. The subscriber thread that
 * feeds them is subscriber.c (subscriber.h).
 *
 * Layering: above the subscriber and interrupts; below the lock operations.
 */
#ifndef REDMUTEX_WAITER_H
#define REDMUTEX_WAITER_H

#include "handle.h"
#include "interrupt.h"

/* ---- waiting (waiter.c) ------------------------------------------------ */

typedef struct rm_waiter rm_waiter;

/* What a waiting acquire offers to a releasing thread of its client, so the
   release can carry the waiter's acquisition in the same round trip. */
typedef struct rm_claim {
    redmutex_lock *lock;
    const char *owner; /* owner key of the waiting acquire */
    const char *value; /* its token or hash field */
} rm_claim;

/** rm_waiter_wait's result when a releasing thread acquired the lock for this waiter. */
#define RM_WAIT_GRANTED 2
/** ... and when such an acquisition's outcome is unknown (the round trip failed). */
#define RM_WAIT_UNKNOWN 3
/** Registers interest in a channel and waits (bounded, interruptible through `wait`) until subscribed. */
int rm_waiter_begin(redmutex_client *c, const char *channel, int64_t deadline_ns, rm_wait *wait, rm_waiter **out);
/**
 * Sleeps until a release message for the channel, a hand-off result, or
 * `until_ns`. Returns 1 (notified: try now), 0 (time is up), RM_WAIT_GRANTED
 * (a releasing thread acquired the lock for this waiter and recorded the
 * hold) or RM_WAIT_UNKNOWN (it tried, but the round trip failed: clean up).
 * *interrupted is set when the wait was interrupted (rm_wait_poll).
 */
int rm_waiter_wait(redmutex_client *c, rm_waiter *w, int64_t until_ns, bool *interrupted);
void rm_waiter_end(redmutex_client *c, rm_waiter *w);
/**
 * Marks w as a wait that a releasing script may hand the lock to (a fair
 * lock's waiter renewed by the watchdog, kind_fair.c). A fair lock's
 * waiters wait on a channel of their own field, so every waiter on it acts
 * for the same owner, and on the server a hand-off to that owner's wait is
 * the owner's field, like a hold. While w is on the channel, the waits
 * behind it make no attempt (rm_waiter_clear), which would take that
 * hand-off for a hold of their own; when it ends, the next is woken, after
 * w has settled whatever the hand-off gave it.
 */
void rm_waiter_serial(redmutex_client *c, rm_waiter *w);
/**
 * Whether no wait marked by rm_waiter_serial is ahead of w on its channel
 * (w NULL: on the channel `channel` at all).
 */
bool rm_waiter_clear(redmutex_client *c, const char *channel, rm_waiter *w);
/** Takes the hand-off message kept for w (kind.h, fair locks) into out: false when there is none. */
bool rm_waiter_message(redmutex_client *c, rm_waiter *w, char *out, size_t size);
/**
 * Registers a pollable wait's interest in a channel without waiting for the
 * subscription (see pollwait.c). It has no eventfd: whenever it should look
 * at its state again (a release message, a hand-off result, the
 * subscription confirmed, shutdown) notify(ud) is called, with c->mu held.
 * *subscribed tells whether the channel was subscribed already (then no
 * confirmation will come).
 */
int rm_waiter_join(redmutex_client *c, const char *channel, void (*notify)(void *ud), void *ud, rm_waiter **out,
                   bool *subscribed);
/**
 * The non-blocking counterpart of rm_waiter_wait: takes what happened since
 * the last call. Returns a hand-off result (RM_WAIT_GRANTED, RM_WAIT_UNKNOWN,
 * or 1: retry now), 1 when notified, 0 when nothing happened, -1 while a
 * hand-off is in flight. The waiter is awake afterwards (no hand-off is
 * offered to it) until rm_waiter_sleep().
 */
int rm_waiter_take(redmutex_client *c, rm_waiter *w);
/** Marks w asleep: releasing threads may hand it the lock (if it offered a claim). */
void rm_waiter_sleep(redmutex_client *c, rm_waiter *w);
/** Whether a releasing thread is acquiring for w right now. Caller holds c->mu. */
bool rm_waiter_handoff_in_flight(const rm_waiter *w);
/** Offers w's acquisition to releasing threads (claim is copied by reference: keep it alive). */
void rm_waiter_offer(redmutex_client *c, rm_waiter *w, const rm_claim *claim);
/**
 * Takes the oldest waiter of the channel that sleeps and offered a claim of
 * this kind, and marks a hand-off in flight for it (it will wait for the
 * result). NULL if there is none.
 */
rm_waiter *rm_waiter_claim(redmutex_client *c, const char *channel, redmutex_kind kind, rm_claim *out);
/** Ends a hand-off with RM_WAIT_GRANTED, RM_WAIT_UNKNOWN or 1 (not granted: retry now). */
void rm_waiter_claim_done(redmutex_client *c, rm_waiter *w, int result);
/** Number of threads of this client waiting on a channel. */
size_t rm_waiters_queued(redmutex_client *c, const char *channel);
/** Whether this client is subscribed to the channel right now (a wait begun now starts at once). */
bool rm_waiter_subscribed(redmutex_client *c, const char *channel);
/**
 * Before a release is sent: arms, per server where this client is surely
 * subscribed to the channel (armed[i]), the skipping of the release message
 * that server will deliver, so it wakes nobody in this process.
 */
void rm_waiter_expect_release(redmutex_client *c, const char *channel, bool *armed);
/**
 * After the release: disarms servers that did not delete the lock (deleted[i]
 * false), and, when `wake` and the lock was deleted somewhere, wakes the
 * oldest local waiter at once.
 */
void rm_waiter_released(redmutex_client *c, const char *channel, const bool *armed, const bool *deleted, bool wake);

#endif
