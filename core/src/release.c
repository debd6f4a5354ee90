/*
 * Releases: redmutex_lock_release, the release of every hold at close, and
 * the cleanup of acquisitions whose outcome is unknown. A release carries an
 * unlock latch (see unsettled.h), goes only to the servers that may hold the
 * lock, and, on one server, may carry a waiting thread's acquisition in the
 * same round trip (the hand-off).
 */
#define _GNU_SOURCE
#include "client.h"
#include "fanout.h"
#include "handle.h"
#include "holds.h"
#include "internal.h"
#include "kind.h"
#include "lifetime.h"
#include "lockops.h"
#include "quorum.h"
#include "resp.h"
#include "tally.h"
#include "waiter.h"
#include "watchdog.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One release, from the claim of the local hold to the last latch. */
typedef struct release {
    rm_err *err; /* the call's error */
    redmutex_lock *l;
    redmutex_client *c;
    const char *owner_key;
    bool explicit_owner;
    int64_t deadline_ns; /* the caller's (shutdown), or INT64_MAX */
    char value[RM_VALUE_MAX + 1];
    char latch_key[RM_KEY_MAX];
    uint64_t hold_id; /* the local hold, 0 when there is none */
    bool was_lost, final;
    bool shared_live; /* lost, and another handle's live hold uses the same field: send nothing */
    int64_t lease;
    /* Where the hold may be: a release is not sent to servers that refused
       it (per-server order keeps the others safe, see client.c). */
    bool only[REDMUTEX_SERVERS_MAX];
    rm_req req;
    rm_kargs args;
    char channel[RM_LONG_KEY_MAX]; /* where this kind's local waiters listen */
    bool local_waiters;            /* this kind's waiters are woken by this process (no server queue) */
    bool armed[REDMUTEX_SERVERS_MAX];
    rm_waiter *heir; /* a waiting thread whose acquisition rides along */
    rm_claim claim;
    rm_kargs heir_cmd;
    rm_acq_form heir_form;
} release;

/* The servers' answers to a release: yes released (a level, or the key:
   deleted_at), no not the owner's (nil, or a server never asked: it never
   held it). */
typedef struct release_tally {
    rm_tally t;
    size_t deleted;
    bool deleted_at[REDMUTEX_SERVERS_MAX];
} release_tally;

/* Reads server i's answer to a release (rm_vote_fn; ud: the release_tally, or NULL). */
static rm_vote release_vote(void *ud, const rm_slot *s, size_t i, const rm_reply *r, rm_err *e, bool *unknown)
{
    (void)s;
    release_tally *t = ud;
    if (r->type == RM_REPLY_INTEGER) {
        if (t && r->integer == 1) {
            t->deleted++;
            t->deleted_at[i] = true;
        }
        return RM_VOTE_YES;
    }
    if (r->type == RM_REPLY_NIL)
        return RM_VOTE_NO;
    *unknown = true;
    rm_fail(e, REDMUTEX_EPROTOCOL, "a reply of the wrong type");
    return RM_VOTE_ERROR;
}

/* Counts the answers to the release of lock `name` (the reply-th command of
   the request) into t (NULL: only the tally tt). A server the release was
   not sent to (it never held the lock) counts as "not owner" in the outcome,
   but not towards deciding early: servers that may hold it are waited for. */
static void release_tally_call(rm_tally *tt, release_tally *t, const rm_call *call, const char *name, bool outcome,
                               size_t reply)
{
    rm_tally_init(tt);
    rm_tally_spec spec = {"release", name, reply, outcome, release_vote, t};
    rm_tally_call(tt, call, &spec);
}

/* Servers a release was not sent to: they never granted the hold. */
static size_t never_granted(const rm_call *call)
{
    size_t n = 0;
    for (size_t i = 0; i < call->n; i++)
        n += call->slots[i].excluded;
    return n;
}

/* Whether these answers leave the hold gone from a quorum q: released
   somewhere, and released or absent (never granted there, or not held
   there) on q servers, while no quorum says it was not held (that is a
   loss, reported as such). rm_tally t counts the servers never asked among
   its "no" when `outcome`. */
static bool gone_from_quorum(const rm_tally *t, const rm_call *call, size_t q, bool outcome)
{
    size_t n = call->n;
    size_t no = t->no + (outcome ? 0 : never_granted(call));
    return t->yes > 0 && t->yes + no >= q && no <= n - q && !rm_error_decides(t->error.code);
}

/* A release's outcome is decided once a quorum said "released" or "not
   owner", or once the hold is gone from a quorum and the servers still to
   answer all stall (rm_call_stalled): their answer is waited for no
   longer, as for a server that is down. ud: the lock. */
static bool release_decided(rm_call *call, void *ud)
{
    const redmutex_lock *l = ud;
    rm_tally t;
    release_tally_call(&t, NULL, call, l->name, false, 0);
    if (rm_tally_decided(&t, call->n, l->quorum))
        return true;
    return gone_from_quorum(&t, call, l->quorum, false) && rm_call_stalled(call) == rm_call_running(call);
}

void rm_release_value(redmutex_lock *l, const char *value)
{
    char latch_id[33], latch_key[RM_KEY_MAX];
    if (rm_new_token(NULL, latch_id) != 0)
        return;
    rm_latch_key(l, latch_id, latch_key);
    rm_req req;
    rm_kargs k;
    rm_release_request(l, value, latch_key, rm_lock_lease_ms(l), &req, &k);
    rm_call call;
    if (rm_call_begin(NULL, &call, l->c) != 0)
        return;
    call.must_send = true;
    call.order_owner = value;
    rm_call_run(&call, &req, rm_command_deadline(l->c, false), NULL, NULL);
    rm_release_forget_latch(&call, latch_key);
    rm_call_end(&call);
}

/*
 * The hand-off. When the last hold of a lock is released on a single server
 * and a thread of this client is asleep waiting for the same lock, the
 * waiter's acquisition command travels right behind the release in the same
 * request. The releasing thread records the waiter's hold and wakes it: the
 * lock changes hands in one round trip instead of release, notification and
 * a second round trip. The acquisition cannot succeed while the release has
 * not run (the key is still the releaser's), so a release that fails or meets
 * NOSCRIPT leaves the waiter to try on its own.
 */
static int handoff_result(rm_call *call, const rm_claim *claim, rm_acq_form form)
{
    rm_slot *s = &call->slots[0];
    if (s->err)
        return s->err == REDMUTEX_ECONN ? RM_WAIT_UNKNOWN : 1;
    if (s->used_eval)
        return RM_WAIT_UNKNOWN; /* sent twice after NOSCRIPT: the first acquisition's reply is gone */
    int64_t lease = rm_lock_lease_ms(claim->lock);
    rm_acq_replies a;
    rm_acq_replies_init(&a, claim->lock, form, 1, lease);
    rm_acquire_count(&a, call);
    if (a.v.t.yes == 0)
        return 1; /* someone else was quicker: the waiter tries again now */
    if (rm_validity_left_ns(lease, rm_now_ns() - call->started_ns) <= 0)
        return RM_WAIT_UNKNOWN; /* too slow to count: the waiter undoes it */
    redmutex_client *c = claim->lock->c;
    rm_client_lock(c);
    int rc = rm_hold_record(NULL, claim->lock, claim->owner, claim->value, call->started_ns, &a.v);
    rm_client_unlock(c);
    return rc == 0 ? RM_WAIT_GRANTED : RM_WAIT_UNKNOWN;
}

/* Takes the local hold (waiting for another thread's release or extend of it)
   and decides what is released where. 0 or an error code. */
static int release_claim(release *p)
{
    redmutex_client *c = p->c;
    redmutex_lock *l = p->l;
    pid_t pid = rm_pid();
    char fresh_id[33], latch_id[33];
    rm_err *err = p->err;
    int rc = rm_new_token(err, fresh_id);
    if (rc)
        return rc;
    for (size_t i = 0; i < c->n; i++)
        p->only[i] = true;
    rm_client_lock(c);
    rm_hold *h = rm_hold_find(l, p->owner_key, pid);
    if (!h && rm_hold_find_foreign(l, p->owner_key, pid)) {
        rm_client_unlock(c);
        return rm_fail(err, REDMUTEX_EFORKED,
                       "lock '%s' was acquired by the parent process; a forked child cannot release it", l->name);
    }
    if (h)
        h = rm_hold_claim(c, l, h); /* another thread's release or extend of it finishes first */
    if (!h && !p->explicit_owner && rm_kind_of(l)->anonymous) {
        rm_client_unlock(c);
        return rm_fail(err, REDMUTEX_ENOTOWNER, "lock '%s' is not held through this handle", l->name);
    }
    if (h) {
        p->hold_id = h->id;
        p->was_lost = rm_hold_state(c, h, rm_now_ns()) == REDMUTEX_STATE_LOST;
        /* The field on the servers may be another handle's new hold of the
           same owner now (taken after this one was lost): not ours to touch. */
        rm_hold *other = p->was_lost ? rm_hold_find_shared(l, h->value, pid) : NULL;
        p->shared_live = other && rm_hold_state(c, other, rm_now_ns()) != REDMUTEX_STATE_LOST;
        /* The last release stops renewal first, so none can run after it. */
        p->final = h->count <= 1 && !p->was_lost;
        if (h->count <= 1)
            rm_watchdog_cancel(c, h);
        if (!h->release_id[0])
            memcpy(h->release_id, fresh_id, sizeof fresh_id);
        memcpy(latch_id, h->release_id, sizeof latch_id);
        memcpy(p->value, h->value, strlen(h->value) + 1); /* at most RM_VALUE_MAX + 1 bytes */
        p->lease = h->lease_ms;
        for (size_t i = 0; i < c->n; i++)
            p->only[i] = h->generations[i] != 0;
    } else {
        memcpy(latch_id, fresh_id, sizeof latch_id);
        rm_lock_owner_field(l, p->owner_key, p->value);
    }
    rm_client_unlock(c);
    rm_latch_key(l, latch_id, p->latch_key);
    return 0;
}

/* Builds the release's request, with a sleeping waiter's acquisition behind
   it when it can ride along (heir_ok), and arms the skipping of its message. */
static void release_build(release *p, bool heir_ok)
{
    redmutex_client *c = p->c;
    rm_release_request(p->l, p->value, p->latch_key, p->lease, &p->req, &p->args);
    /* The other kinds hand over by themselves (fair) or not at all
       (read-write), and their channels wake waiters directly. */
    p->local_waiters = rm_kind_of(p->l)->local_waiters;
    if (p->local_waiters)
        rm_lock_channel(p->l, p->value, p->channel);
    if (heir_ok && p->final && p->local_waiters && c->n == 1 && c->opts.min_replicas == 0 &&
        p->deadline_ns == INT64_MAX && (p->heir = rm_waiter_claim(c, p->channel, p->l->kind, &p->claim)) != NULL)
        p->req.cmds[p->req.ncmds++] =
            rm_acquire_command(p->claim.lock, p->claim.value, NULL, RM_ACQ_TRY, NULL, &p->heir_cmd, &p->heir_form);
    if (p->local_waiters)
        rm_waiter_expect_release(c, p->channel, p->armed);
}

/* Builds the request and runs it. 0 or REDMUTEX_ENOMEM. */
static int release_send(release *p, rm_call *call)
{
    redmutex_client *c = p->c;
    release_build(p, true);
    int rc = rm_call_begin(p->err, call, c);
    if (rc)
        return rc;
    call->order_owner = p->value;
    int64_t dl = rm_command_deadline(c, false);
    /* A caller's deadline (shutdown) is a hard one, even for a new connection. */
    call->strict_deadline = p->deadline_ns != INT64_MAX;
    call->only = p->only;
    call->must_send = true;
    /* With several servers the answer is known at a majority; the others
       still get the release (their replies are skipped later). A hand-off
       needs its one server's reply. */
    rm_call_run(call, &p->req, dl < p->deadline_ns ? dl : p->deadline_ns, c->n > 1 ? release_decided : NULL, p->l);
    return 0;
}

/* Outcome unknown: keep the hold and its request id so that a retry reports
   what this attempt did. Renewal stays off (the release was meant to end
   it); the owner is told when validity runs out. Caller holds c->mu. */
static int release_unknown(release *p, rm_call *call, const release_tally *t, rm_hold *h, int rc) RM_REQUIRES(p->c->mu)
{
    if (h) {
        if (h->count <= 1) {
            h->watchdog = false;
            rm_watchdog_schedule(NULL, p->c, h);
        }
        rm_hold_unbusy(p->c, h);
    }
    if (rc == 0)
        rc = rm_tally_fail(p->err, &t->t, call, "release", p->l->name);
    return rc;
}

/* Updates the local hold by the answers: the result of the release. rc: rm_call_begin's. */
static int release_settle(release *p, rm_call *call, const release_tally *t, int rc)
{
    redmutex_client *c = p->c;
    redmutex_lock *l = p->l;
    size_t q = l->quorum;
    rm_client_lock(c);
    rm_hold *h = p->hold_id ? rm_hold_find_by_id(l, p->hold_id) : NULL;
    rm_err *err = p->err;
    /* Released on a quorum; or gone from a quorum (above) while its
       validity ran: the lock is free for others, a server still owing an
       answer gets the release in order behind its earlier requests (or the
       key expires with the lease), and the hold was valid to the end. */
    if (rc == 0 && (t->t.yes >= q || (!p->was_lost && gone_from_quorum(&t->t, call, q, true)))) {
        l->released_ns = rm_now_ns();
        if (h) {
            h->release_id[0] = '\0';
            h->count = t->deleted >= q ? 0 : h->count - 1;
            if (h->count <= 0)
                rm_hold_forget(c, h);
            else
                rm_hold_unbusy(c, h);
        }
        rc = p->was_lost ? rm_fail(err, REDMUTEX_ELOST,
                                   "lock '%s' was lost before it was released (its lease ran out); the work done "
                                   "under it was not protected to the end",
                                   l->name)
                         : 0;
    } else if (rc == 0 && t->t.no > c->n - q) {
        if (h) {
            rm_hold_forget(c, h);
            rc = rm_fail(err, REDMUTEX_ELOST,
                         "lock '%s' was lost before it was released: its lease ran out or another owner took it",
                         l->name);
        } else {
            rc = rm_fail(err, REDMUTEX_ENOTOWNER, "lock '%s' is not held by owner '%s'", l->name, p->value);
        }
    } else if (h && p->was_lost) {
        /* It was lost before the release; removing what may be left of it
           was best effort. There is nothing to retry. */
        rm_hold_forget(c, h);
        rc = rm_fail(err, REDMUTEX_ELOST,
                     "lock '%s' was lost before it was released (its lease ran out or renewal failed)", l->name);
    } else {
        rc = release_unknown(p, call, t, h, rc);
    }
    rm_client_unlock(c);
    return rc;
}

/* A lost hold whose field now belongs to another handle's live hold of the
   same owner: forgotten here, nothing sent. */
static int release_lost_shared(release *p)
{
    rm_client_lock(p->c);
    rm_hold *h = rm_hold_find_by_id(p->l, p->hold_id);
    if (h)
        rm_hold_forget(p->c, h);
    rm_client_unlock(p->c);
    return rm_fail(p->err, REDMUTEX_ELOST,
                   "lock '%s' was lost before it was released (its lease ran out or renewal failed); the same "
                   "owner holds it again through another handle, which this release leaves alone",
                   p->l->name);
}

/* Reads a release's answers (its command the reply-th of the call's
   request) after the call: the hold's settlement, the hand-off, the waiters
   and the latch. rc: rm_call_begin's. Returns the release's result. */
static int release_finish(release *p, rm_call *call, int rc, size_t reply)
{
    release_tally t;
    rm_tally_init(&t.t);
    t.deleted = 0;
    memset(t.deleted_at, 0, sizeof t.deleted_at);
    if (rc == 0)
        release_tally_call(&t.t, &t, call, p->l->name, true, reply);
    rc = release_settle(p, call, &t, rc);
    if (p->heir)
        rm_waiter_claim_done(p->c, p->heir, call->slots ? handoff_result(call, &p->claim, p->heir_form) : 1);
    /* Servers the early decision did not wait for count as deleting: their
       message is likely on its way. */
    for (size_t i = 0; call->slots && i < call->n; i++)
        if (call->slots[i].owing)
            t.deleted_at[i] = true;
    if (p->local_waiters)
        rm_waiter_released(p->c, p->channel, p->armed, t.deleted_at, p->heir == NULL);
    /* Final: the request id is never used again. */
    if ((rc == 0 || rc == REDMUTEX_ELOST || rc == REDMUTEX_ENOTOWNER) && call->slots &&
        !rm_release_note_unsettled(p->l, call, NULL, p->value, &p->req.cmds[0], p->latch_key))
        rm_release_forget_latch(call, p->latch_key);
    return rc;
}

/* A release's state before its claim (as rm_release_owner starts it). */
static void release_init(release *p, rm_err *err, redmutex_lock *l, const char *owner_key, bool explicit_owner,
                         int64_t deadline_ns)
{
    memset(p, 0, offsetof(release, req));
    p->err = err;
    p->l = l;
    p->c = l->c;
    p->owner_key = owner_key;
    p->explicit_owner = explicit_owner;
    p->deadline_ns = deadline_ns;
    p->lease = rm_lock_lease_ms(l);
    p->heir = NULL;
    memset(p->armed, 0, sizeof p->armed);
}

int rm_release_owner(rm_err *err, redmutex_lock *l, const char *owner_key, bool explicit_owner, int64_t deadline_ns)
{
    release p;
    release_init(&p, err, l, owner_key, explicit_owner, deadline_ns);
    int rc = release_claim(&p);
    if (rc)
        return rc;
    if (p.shared_live)
        return release_lost_shared(&p);
    rm_call call;
    call.slots = NULL;
    rc = release_send(&p, &call);
    rc = release_finish(&p, &call, rc, 0);
    if (call.slots)
        rm_call_end(&call);
    return rc;
}

void rm_release_batch(rm_err *errs, int *rcs, redmutex_lock *const *ls, char *const *owner_keys,
                      const bool *explicit_owner, size_t k)
{
    release *ps = calloc(k, sizeof *ps);
    if (!ps || k > RM_REQ_MAX_CMDS) {
        for (size_t j = 0; j < k; j++)
            rcs[j] = rm_fail(&errs[j], REDMUTEX_ENOMEM, "out of memory");
        free(ps);
        return;
    }
    redmutex_client *c = ls[0]->c;
    rm_req req = {0};
    size_t index[RM_REQ_MAX_CMDS];
    uint64_t keys[RM_REQ_MAX_CMDS];
    bool only[REDMUTEX_SERVERS_MAX] = {false};
    const char *first_value = NULL;
    for (size_t j = 0; j < k; j++) {
        release *p = &ps[j];
        release_init(p, &errs[j], ls[j], owner_keys[j], explicit_owner[j], INT64_MAX);
        if ((rcs[j] = release_claim(p)) != 0 || (p->shared_live && (rcs[j] = release_lost_shared(p)) != 0))
            continue;
        release_build(p, false); /* no hand-off: one request carries every release */
        index[j] = req.ncmds;
        keys[req.ncmds] = rm_order_key(ls[j]->name);
        req.cmds[req.ncmds++] = p->req.cmds[0];
        if (!req.order_name) {
            req.order_name = ls[j]->name;
            first_value = p->value;
        }
        for (size_t i = 0; i < c->n; i++)
            only[i] = only[i] || p->only[i];
        rcs[j] = 1; /* sent: finished below */
    }
    rm_call call;
    memset(&call, 0, sizeof call);
    int rc = req.ncmds ? rm_call_begin(NULL, &call, c) : 0;
    if (req.ncmds && rc == 0) {
        call.only = only;
        call.must_send = true;
        call.order_owner = first_value;
        /* A connection left owing replies is ordered for every name. */
        call.order_keys = keys;
        call.n_order_keys = req.ncmds;
        rm_call_run(&call, &req, rm_command_deadline(c, false), NULL, NULL);
        call.order_keys = NULL;
        call.n_order_keys = 0;
    }
    for (size_t j = 0; j < k; j++)
        if (rcs[j] == 1)
            rcs[j] = release_finish(&ps[j], &call, rc, index[j]);
    if (call.slots)
        rm_call_end(&call);
    free(ps);
}

int rm_lock_release_key(rm_err *err, redmutex_lock *l, const char *owner_key, bool explicit_owner)
{
    return rm_release_owner(err, l, owner_key, explicit_owner, INT64_MAX);
}

int redmutex_lock_release(redmutex_lock *l, const char *owner)
{
    rm_err err;
    rm_err_reset(&err);
    char owner_key[RM_VALUE_MAX + 1];
    int rc = rm_lock_check_handle(&err, l, "redmutex_lock_release");
    if (rc == 0)
        rc = rm_lock_resolve_owner(&err, l, owner, owner_key);
    if (rc == 0)
        rc = rm_release_owner(&err, l, owner_key, owner != NULL, INT64_MAX);
    return rm_publish(&err, rc);
}

void rm_release_all(redmutex_client *c, int64_t deadline_ns)
{
    pid_t pid = rm_pid();
    for (;;) {
        if (rm_now_ns() >= deadline_ns)
            return;
        /* Take one hold at a time: releasing changes the list. */
        rm_client_lock(c);
        rm_hold *h = c->holds.all;
        while (h && (h->pid != pid || h->busy || rm_hold_state(c, h, rm_now_ns()) == REDMUTEX_STATE_LOST))
            h = h->next_in_client;
        redmutex_lock *l = h ? h->lock : NULL;
        char owner[RM_VALUE_MAX + 1];
        uint64_t id = h ? h->id : 0;
        if (h) {
            snprintf(owner, sizeof owner, "%s", h->owner);
            l->refs++; /* a handle freed meanwhile stays valid for this release */
        }
        rm_client_unlock(c);
        if (!l)
            return;
        int rc = rm_release_owner(NULL, l, owner, owner[0] != '\0', deadline_ns);
        rm_client_lock(c);
        if (rc != 0) {
            /* Could not release it: leave it to expire and stop renewing it. */
            rm_hold *again = rm_hold_find_by_id(l, id);
            if (again && !again->busy)
                rm_hold_forget(c, again);
        }
        rm_lock_unref_locked(c, l);
        rm_client_unlock(c);
    }
}
