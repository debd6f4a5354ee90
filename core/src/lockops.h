/*
 * What the lock operations share: the requests they send (request.c) and
 * one acquisition attempt (attempt.c), used by acquire.c, release.c,
 * extend.c, query.c and the pollable waits.
 *
 * Layering: the lock operations sit above the hold registry (holds.h), the
 * watchdog and the waiters, the kinds (kind.h), quorum (quorum.h) and the
 * fan-out; only the client lifecycle is above them.
 */
#ifndef REDMUTEX_LOCKOPS_H
#define REDMUTEX_LOCKOPS_H

#include "fanout.h"
#include "handle.h"
#include "interrupt.h"
#include "kind.h"
#include "quorum.h"
#include "waiter.h"

/* ---- requests (request.c) ----------------------------------------------- */

/** How an acquisition's reply reads: SET's OK/nil, or an acquire script's array. */
typedef enum { RM_ACQ_SET, RM_ACQ_SCRIPT } rm_acq_form;

/**
 * Appends WAIT <replicas> replica_timeout (argument storage in tbuf, argv[3]):
 * <replicas> is put in per node as the request is sent (RM_ARG_REPLICAS,
 * rm_deploy_wait_need), and a reply is judged against the slot's wait_need.
 */
void rm_req_add_wait(rm_req *req, redmutex_client *c, char *tbuf, const char **argv);
/** The deadline of one command (plus the replica wait when a WAIT follows it). */
int64_t rm_command_deadline(redmutex_client *c, bool with_wait);
/** Builds the release request of `value` into req (the kind's command; argument storage in st). */
void rm_release_request(redmutex_lock *l, const char *value, const char *latch_key, int64_t lease_ms, rm_req *req,
                        rm_kargs *st);
/** redisson_unlock_latch:{NAME}:<id>, RM_KEY_MAX bytes. */
void rm_latch_key(const redmutex_lock *l, const char *id, char *out);
/**
 * A final release that may still run where its outcome is unknown is sent
 * again by the next acquisition (see unsettled.h); `among` limits it to the
 * servers it was sent to. True when recorded: its latches must stay.
 */
bool rm_release_note_unsettled(redmutex_lock *l, const rm_call *call, const bool *among, const char *value,
                               const rm_cmd *release, const char *latch_key);
/** After a release was settled (or a nested acquisition won), its latch is
    deleted with the next request on each connection still open. */
void rm_release_forget_latch(rm_call *call, const char *latch_key);
/** How long an unlock latch (or a nested acquisition's undo latch) lives: 10 command timeouts. */
int64_t rm_latch_ms(const redmutex_client *c);
/**
 * The kind's acquisition command for `value` (nest_latch: a nested
 * acquisition's undo latch key, NULL for a first one; mode: enum
 * rm_acq_mode; nonce: a fair wait's id or NULL); *form says how its reply
 * reads. Argument storage lives in *st.
 */
/** Whether a releasing script may hand the lock to a waiter of this handle (fair locks, kind_fair.c). */
bool rm_handoff_by_script(const redmutex_lock *l);
rm_cmd rm_acquire_command(redmutex_lock *l, const char *value, const char *nest_latch, int mode, const char *nonce,
                          rm_kargs *st, rm_acq_form *form);

/* ---- one acquisition attempt (attempt.c) -------------------------------- */

enum { RM_ATTEMPT_WON = 0, RM_ATTEMPT_BUSY = 1 };

typedef struct rm_attempt_info {
    int64_t ttl_ms;  /* the holder's remaining lease, -1 when unknown */
    bool split;      /* some servers granted, but not a majority */
    const char *why; /* why it was not won, after "lock 'NAME' ": "is held by another owner" */
    /* Set by the caller: the attempt is part of a wait (a fair lock then
       queues), and that wait's id (kind.h). */
    bool waiting;
    const char *nonce;
    /* Sticky, set by the attempts: one of them may have joined a fair
       lock's queue (a waiting attempt that was not nested), so giving up
       must leave it. A nested wait must not: the leave gives back a level. */
    bool queued;
    /* A fair lock's busy attempt: how many waiters are ahead of this one in
       the queue (the fewest over the servers that answered; 0 at the head,
       or when unknown). */
    int64_t behind;
} rm_attempt_info;

/**
 * One acquisition attempt on all servers. Returns RM_ATTEMPT_WON (hold
 * recorded), RM_ATTEMPT_BUSY (held elsewhere, or undecided while a majority
 * can still answer; *info says when to retry) or an error code. The whole
 * attempt, cleanup included, ends by one deadline.
 */
int rm_attempt(rm_err *err, redmutex_lock *l, const char *owner, const char *value, bool retry, rm_attempt_info *info);

/** Where an acquisition's replies are in a request and how they read. */
typedef struct rm_acq_replies {
    redmutex_lock *l;
    rm_acq_form form;
    bool wait_replicas;
    int reply_index; /* reply index of the acquisition (0, or further behind releases) */
    int pttl_index;  /* reply index of a pipelined PTTL, or -1 */
    int wait_index;  /* reply index of WAIT, or -1 */
    int64_t lease_ms;
    rm_votes v;
} rm_acq_replies;

/** Where an acquisition's replies are: no PTTL, no WAIT (the caller adds them). The votes
    are initialised when counted. */
static inline void rm_acq_replies_init(rm_acq_replies *a, redmutex_lock *l, rm_acq_form form, int reply_index,
                                       int64_t lease_ms)
{
    a->l = l;
    a->form = form;
    a->wait_replicas = false;
    a->reply_index = reply_index;
    a->pttl_index = a->wait_index = -1;
    a->lease_ms = lease_ms;
}
/** Counts the votes of every server that answered the acquisition into a->v. */
void rm_acquire_count(rm_acq_replies *a, rm_call *call);

/** redmutex_lock_acquire with the call's error (acquire.c). */
int rm_lock_acquire(rm_err *err, redmutex_lock *l, const char *owner, int64_t wait_ms);
/** redmutex_lock_extend with the call's error (extend.c). */
int rm_lock_extend(rm_err *err, redmutex_lock *l, const char *owner, int64_t ms, redmutex_extend_mode mode);

/* ---- releases (release.c) ------------------------------------------------ */

/** Releases owner_key's hold (the caller's deadline: INT64_MAX, or shutdown's). */
int rm_release_owner(rm_err *err, redmutex_lock *l, const char *owner_key, bool explicit_owner, int64_t deadline_ns);
/**
 * Releases the holds of owner_keys[j] through ls[j] (k <= RM_REQ_MAX_CMDS
 * locks of one client, different names) in one request: rcs[j] and errs[j]
 * are each one's result, as rm_release_owner's. No hand-off to a waiter
 * rides along; the waiters are woken by the releases' messages.
 */
void rm_release_batch(rm_err *errs, int *rcs, redmutex_lock *const *ls, char *const *owner_keys,
                      const bool *explicit_owner, size_t k);
/** Releases whatever `value` holds on the servers, with no local record (cleanup). */
void rm_release_value(redmutex_lock *l, const char *value);

/* ---- for the watchdog, shutdown and pollable waits ------------------------ */

/** Releases every hold of the client (shutdown). */
void rm_release_all(redmutex_client *c, int64_t deadline_ns);

/**
 * Checks the owner and fills owner_key (the key of the local hold) and value
 * (the token or hash field to store) as redmutex_lock_acquire does (the
 * caller checked the handle). 0 or an error code with message.
 */
int rm_acquire_owner_value(rm_err *err, redmutex_lock *l, const char *owner, char owner_key[RM_VALUE_MAX + 1],
                           char value[RM_VALUE_MAX + 1]);
/** A fair lock's wait that stops waiting leaves the queue on every server,
    and gives back a hand-off that reached it unless the owner holds the lock
    through a live hold of this client (the field's level is that hold's). */
void rm_fair_stop_waiting(redmutex_lock *l, const char *value);
/** redmutex_lock_release for an owner key already resolved. */
int rm_lock_release_key(rm_err *err, redmutex_lock *l, const char *owner_key, bool explicit_owner);

#endif
