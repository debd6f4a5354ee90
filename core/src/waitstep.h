/*
 * The wait engine (waitstep.c): one acquisition of a lock, from its start to
 * its end, whichever way it waits. redmutex_lock_acquire() (acquire.c)
 * sleeps on the calling thread between steps; a pollable wait (pollwait.c)
 * is stepped by an event loop each time it is ready. Both run the same
 * steps, so the rules of waiting are written once: which hand-off news to
 * take, when to make no attempt, joining the channel, when to try again,
 * and the one way out.
 *
 * Layering: with the lock operations (layer 10), below the pollable waits.
 */
#ifndef REDMUTEX_WAITSTEP_H
#define REDMUTEX_WAITSTEP_H

#include "lockops.h"
#include "retry.h"

/** One acquisition's wait (not thread-safe: stepped by one thread at a time). */
typedef struct rm_waitstep {
    redmutex_client *c;
    redmutex_lock *l;                 /* NULL: a pollable wait for something else (pollwait.h) */
    char owner_key[RM_VALUE_MAX + 1]; /* the key of the local hold */
    char value[RM_VALUE_MAX + 1];     /* the token or hash field stored on the servers */
    bool explicit_owner;
    bool fair;      /* the servers keep the queue (kind_fair.c) */
    char nonce[17]; /* a fair wait's id ("" when it never waits) */
    char channel[RM_LONG_KEY_MAX];
    /* How it listens: a blocking acquire through `wait` (joining waits
       until subscribed; redmutex_client_interrupt ends it), a pollable wait
       through notify(ud) (called with c->mu held). */
    rm_wait *wait;
    void (*notify)(void *ud);
    void *ud;
    /* Option: a fair hand-off by message is taken without a round trip
       (the blocking acquire; a pollable wait's next attempt takes it). */
    bool by_message;
    uint64_t intr_start; /* a pollable wait's interrupt generation when it began */
    int64_t deadline;    /* INT64_MAX: none (the caller decides) */
    rm_retry retry;      /* when to try again (retry.c) */
    rm_waiter *waiter;   /* on the channel; NULL before joining or if that failed */
    rm_claim claim;      /* offered to releasing threads (points into this struct) */
    bool tried;          /* an attempt was made or skipped: later ones are retries */
    bool hold_back;      /* the next step makes no attempt (set by the caller) */
    int64_t sent_ns;     /* when the last attempt was sent */
    int64_t attempts;
    rm_attempt_info info; /* the last attempt's figures; info.queued: it may be in a fair queue */
} rm_waitstep;

/** What a busy step says about the next one. */
typedef struct rm_step_out {
    int64_t due_ns;   /* step again then if no news comes first; INT64_MAX: only on news */
    bool ready_now;   /* joined a channel subscribed already: no confirmation will come, step again */
    bool interrupted; /* an interrupt came after the wait began (s->wait, s->intr_start): the caller stops */
} rm_step_out;

/** rm_waitstep_step's news when there was a release message, or the wait is to try now. */
#define RM_NEWS_NOTIFIED 1

/**
 * Resolves the owner and the value (the caller checked the handle), the
 * channel and, when `waiting` and the lock is fair, the wait's id. The
 * wait's way of listening (wait or notify), intr_start, deadline and
 * options are the caller's to set afterwards (zero: none). 0 or an error.
 */
int rm_waitstep_begin(rm_err *err, rm_waitstep *s, redmutex_lock *l, const char *owner, bool waiting);
/** Before the first step: the retry policy's first backoff. */
void rm_waitstep_arm(rm_waitstep *s);
/**
 * Whether an acquisition goes behind others of this process before
 * trying: threads of this client wait for the lock already (it does not
 * barge ahead of them, unless the owner holds it), or, for a fair lock, a
 * wait of the same owner may have been handed it: a wait marked by
 * rm_waiter_serial is ahead of this one on its channel (on it at all before
 * joining), while the owner holds no live hold.
 */
bool rm_waitstep_behind(rm_waitstep *s);
/**
 * Joins the lock's channel (s->channel): marked for hand-offs by script,
 * with a claim offered to releasing threads when one server and no replica
 * wait let them acquire for it (release.c). A blocking wait returns once
 * subscribed (or at the command timeout, or the deadline); a pollable one
 * at once, *ready_now when the channel was subscribed already. 0, or
 * REDMUTEX_ENOMEM for a pollable wait (then timers alone wake it).
 */
int rm_waitstep_join(rm_err *err, rm_waitstep *s, bool *ready_now);
/**
 * One step: takes `news` (rm_waiter_wait's or rm_waiter_take's result, 0
 * none, RM_NEWS_NOTIFIED to try now), makes an attempt unless the wait goes
 * behind another (hold_back, rm_waitstep_behind), joins the channel if a
 * pollable wait has not, and computes the next due time. 0 acquired,
 * RM_ATTEMPT_BUSY (out says when next; s->info.why why), or an error (the
 * caller then gives up). Blocks for one attempt, plus the undo of an
 * acquisition of unknown outcome (RM_WAIT_UNKNOWN news) and a join.
 */
int rm_waitstep_step(rm_err *err, rm_waitstep *s, int news, rm_step_out *out);
/** When a wait is due after its last try (s->info's figures), `silent`: the pause brought no news. */
int64_t rm_waitstep_due(rm_waitstep *s, bool silent);
/**
 * The one way out, won or not, and idempotent: gives back what a hand-off
 * reported by `news` gave a wait that does not take it, leaves the fair
 * queue (unless `won`, or a granted hold is kept), then the channel. True when a granted hold could
 * not be given back: it stays recorded, and the caller reports it held.
 */
bool rm_waitstep_give_up(rm_waitstep *s, int news, bool won);

#endif
