/*
 * Pollable waits: acquiring a lock from an event loop, without a thread per
 * waiter. A redmutex_wait is the waiting half of redmutex_lock_acquire() cut
 * loose from the waiting thread: it is queued on the lock's release channel
 * like a blocked acquire (so releases wake it, and a releasing thread of the
 * client may hand it the lock), and it is given a due time (the holder's
 * lease end, the capped backoff) after each failed attempt. Instead of
 * sleeping in poll(), it is put on the client's ready list, and the loop
 * learns of that through one descriptor per client, so a thousand waits cost
 * three descriptors, not a thousand. The attempts themselves are the same as
 * a blocking acquire's (rm_acquire_attempt); the loop runs them where a round
 * trip may block: a worker thread, or the loop itself if it does not mind.
 * The client's ready list, timer and wait fd are waitready.c's; an
 * interrupt (redmutex_client_interrupt) makes every wait begun before it
 * ready there, and its next try gives up and reports REDMUTEX_EINTR.
 */
#define _GNU_SOURCE
#include "client.h"
#include "handle.h"
#include "internal.h"
#include "kind.h" /* fair locks: a wait of its own on the server's queue */
#include "lifetime.h"
#include "lockops.h"
#include "pollwait.h"
#include "retry.h"
#include "waitready.h"
#include "waiter.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static _Atomic uint64_t last_wait_id;

/* The waiter's notification (rm_waiter_join): called with c->mu held. */
static void notify(void *ud)
{
    redmutex_wait *w = ud;
    rm_client_held(w->c);
    rm_pollwaits *pw = w->c->pollwait.pw;
    if (w->freeing)
        pthread_cond_broadcast(&pw->handoff_done);
    else
        rm_ready_push(pw, w);
}

/* ---- the API ----------------------------------------------------------------- */

static void release_refs(redmutex_wait *w)
{
    redmutex_client *c = w->c;
    rm_client_lock(c);
    rm_pollwaits *pw = c->pollwait.pw;
    rm_ready_unqueue(pw, w);
    if (w->prev_all)
        w->prev_all->next_all = w->next_all;
    else if (pw->all == w)
        pw->all = w->next_all;
    if (w->next_all)
        w->next_all->prev_all = w->prev_all;
    if (w->l)
        rm_lock_unref_locked(c, w->l); /* never the last client reference: the wait has its own */
    rm_client_unlock(c);
    rm_client_unref(c);
    free(w);
}

/* Links a new wait into the client's (with a reference to the client and
   its lock), or frees it: 0, REDMUTEX_ECLOSED or REDMUTEX_ENOMEM. */
static int register_wait(rm_err *err, redmutex_wait *w)
{
    redmutex_client *c = w->c;
    rm_client_lock(c);
    rm_pollwaits *pw = c->life.closed ? NULL : rm_ready_ensure(err, c);
    if (!pw) {
        rm_client_unlock(c);
        free(w);
        return c->life.closed ? rm_fail(err, REDMUTEX_ECLOSED, "the client was closed") : REDMUTEX_ENOMEM;
    }
    c->life.refs++;
    if (w->l)
        w->l->refs++;
    /* Read after the eventfd is published: a later interrupt reaches it. */
    w->intr_start = atomic_load(&c->intr.gen);
    w->next_all = pw->all;
    if (pw->all)
        pw->all->prev_all = w;
    pw->all = w;
    rm_client_unlock(c);
    return 0;
}

int rm_wait_new(rm_err *err, redmutex_wait **out, redmutex_lock *lock, const char *owner)
{
    redmutex_wait *w = calloc(1, sizeof *w);
    if (!w)
        return rm_fail(err, REDMUTEX_ENOMEM, "out of memory");
    int rc = rm_acquire_prepare(err, lock, owner, w->owner_key, w->value);
    if (rc) {
        free(w);
        return rc;
    }
    redmutex_client *c = lock->c;
    w->c = c;
    w->l = lock;
    w->id = atomic_fetch_add(&last_wait_id, 1) + 1;
    w->explicit_owner = owner != NULL;
    w->start_ns = rm_now_ns();
    rm_retry_init(&w->retry, &c->opts);
    w->due_ns = INT64_MAX;
    rm_lock_channel(lock, w->value, w->channel);
    const rm_kind_ops *ops = rm_kind_ops_of(lock->kind);
    w->fair = ops && ops->server_queue;
    if (w->fair && (rc = rm_fair_new_nonce(err, w->nonce)) != 0) {
        free(w);
        return rc;
    }

    if ((rc = register_wait(err, w)) == 0)
        *out = w;
    return rc;
}

int rm_wait_new_custom(rm_err *err, redmutex_wait **out, redmutex_client *c, const rm_wait_ops *ops, void *obj)
{
    redmutex_wait *w = calloc(1, sizeof *w);
    if (!w)
        return rm_fail(err, REDMUTEX_ENOMEM, "out of memory");
    w->c = c;
    w->ops = ops;
    w->obj = obj;
    w->id = atomic_fetch_add(&last_wait_id, 1) + 1;
    rm_retry_init(&w->retry, &c->opts);
    w->due_ns = INT64_MAX;
    int rc = register_wait(err, w);
    if (rc == 0)
        *out = w;
    return rc;
}

int redmutex_wait_new(redmutex_wait **out, redmutex_lock *lock, const char *owner)
{
    rm_err e_, *err = rm_err_reset(&e_);
    if (!out || !lock)
        return rm_publish(err, rm_fail(err, REDMUTEX_EINVAL, "redmutex_wait_new: %s is NULL", !out ? "out" : "lock"));
    return rm_publish(err, rm_wait_new(err, out, lock, owner));
}

/*
 * Queues the wait on the lock's release channel, as a blocked acquire does
 * after its first failed attempt. A release published between that attempt
 * and the subscription is not missed: the subscription's confirmation makes
 * the wait ready (one more attempt), and so does joining a channel that is
 * subscribed already. 0, or REDMUTEX_ENOMEM (then timers alone wake it).
 */
static int join(rm_err *err, redmutex_wait *w)
{
    redmutex_client *c = w->c;
    bool subscribed;
    if (rm_waiter_join(c, w->channel, notify, w, &w->waiter, &subscribed) != 0)
        return rm_fail(err, REDMUTEX_ENOMEM, "out of memory");
    if (w->l && rm_handoff_by_script(w->l))
        rm_waiter_serial(c, w->waiter); /* a hand-off to it is for it alone (waiter.h) */
    /* As for a blocked acquire: with one server and no replica wait, a
       releasing thread of this client may acquire for this wait in its
       release's round trip (see release.c). */
    if (w->l && c->n == 1 && c->opts.min_replicas == 0 && rm_kind_ops_of(w->l->kind)->local_waiters) {
        w->claim = (rm_claim){w->l, w->owner_key, w->value};
        rm_waiter_offer(c, w->waiter, &w->claim);
    }
    if (subscribed) {
        rm_client_lock(c);
        rm_ready_push(c->pollwait.pw, w);
        rm_client_unlock(c);
    }
    return 0;
}

uint64_t redmutex_wait_id(const redmutex_wait *wait) { return wait ? wait->id : 0; }

/* When the wait is due again after a busy try: the retry policy of
   redmutex_lock_acquire (retry.c), with no deadline and no retry_count. */
static void set_next_due(redmutex_wait *w, int64_t ttl_ms, bool split, bool timed_out, int64_t behind)
{
    redmutex_client *c = w->c;
    int64_t pause_ms = rm_retry_pause_ms(&w->retry, ttl_ms, split, timed_out);
    if (w->fair) /* only the head tries; each try refreshes the wait's place in the queue */
        pause_ms = rm_fair_pause_ms(pause_ms, behind);
    rm_client_lock(c);
    rm_ready_set_due(c->pollwait.pw, w, rm_retry_next_due(rm_now_ns(), pause_ms, INT64_MAX));
    rm_client_unlock(c);
}

/* Nothing more to try: acquired. Set under the mutex, as the loop's thread
   reads it (catch_interrupts) while a worker may be trying. */
static void mark_done(redmutex_wait *w)
{
    rm_client_lock(w->c);
    w->done = true;
    rm_client_unlock(w->c);
}

/*
 * Ends a lock's wait: nothing stays held for it. A lock a releasing thread
 * has just handed it (its try did not see it yet) is released; a fair
 * lock's hand-off by the script is given back as it leaves the queue, then
 * it leaves its channel. True when a lock handed to it could not be given
 * back (it stays recorded for the owner, see rm_handoff_give_back).
 */
static bool give_up(redmutex_wait *w)
{
    redmutex_client *c = w->c;
    bool kept = false;
    rm_client_lock(c);
    w->freeing = true; /* notifications now only end the wait below */
    rm_ready_unqueue(c->pollwait.pw, w);
    w->due_ns = INT64_MAX;
    rm_client_unlock(c);
    if (w->waiter) {
        int news = rm_waiter_take(c, w->waiter); /* no new hand-off can start after this */
        if (news < 0) {
            /* A releasing thread is acquiring for this wait: its request is
               out, and it will record the result in the waiter. Wait for it
               (one round trip of that thread, bounded by its deadline). */
            rm_client_lock(c);
            while (rm_waiter_handoff_in_flight(w->waiter))
                pthread_cond_wait(&c->pollwait.pw->handoff_done, &c->mu);
            rm_client_unlock(c);
            news = rm_waiter_take(c, w->waiter);
        }
        kept = rm_handoff_give_back(w->l, w->owner_key, w->value, w->explicit_owner, news);
    }
    /* Out of the queue (a hand-off by the script given back), then off the
       channel: a release message it did not use, and the turn of its owner's
       next wait, go on from there. */
    rm_wait_leave(w->l, w->value, w->fair && w->in_fair_queue && !w->done, w->waiter);
    w->waiter = NULL;
    w->in_fair_queue = false;
    return kept;
}

/* A try of a wait an interrupt ended: the first gives up (a custom wait
   leaves its channel; its creator's end() comes with the free). */
static int end_interrupted(rm_err *err, redmutex_wait *w)
{
    redmutex_client *c = w->c;
    if (!w->ended) {
        w->ended = true;
        if (w->ops) {
            rm_client_lock(c);
            w->freeing = true;
            rm_ready_unqueue(c->pollwait.pw, w);
            w->due_ns = INT64_MAX;
            rm_client_unlock(c);
            if (w->waiter)
                rm_waiter_end(c, w->waiter);
            w->waiter = NULL;
        } else if (give_up(w)) {
            mark_done(w); /* as redmutex_lock_acquire: a hand-off that cannot be given back is held */
            return 0;
        }
    }
    if (w->ops)
        return rm_fail(err, REDMUTEX_EINTR, "the wait was interrupted (redmutex_client_interrupt)");
    return rm_fail(err, REDMUTEX_EINTR, "waiting for lock '%s' was interrupted", w->l->name);
}

static bool interrupted(const redmutex_wait *w) { return atomic_load(&w->c->intr.gen) != w->intr_start; }

/* try_begin's result when the try goes on. */
#define RM_TRY_ON 1

/* The start of a try: RM_TRY_ON with the wait off the ready list and no
   due time, or the try's result (the client closed, an interrupt). */
static int try_begin(rm_err *err, redmutex_wait *w)
{
    redmutex_client *c = w->c;
    int rc = w->ended ? 0 : rm_client_usable(err, c); /* ended: EINTR, even after a close */
    if (rc || w->ended || interrupted(w))
        return rc ? rc : end_interrupted(err, w);
    rm_client_lock(c);
    rm_ready_unqueue(c->pollwait.pw, w);
    w->due_ns = INT64_MAX;
    rm_client_unlock(c);
    return RM_TRY_ON;
}

/* A custom wait's try: the creator's try, then, while it is not done, the
   wait listens on the channel the try named (it may change) until due. */
static int custom_try(rm_err *err, redmutex_wait *w)
{
    redmutex_client *c = w->c;
    int rc =
        w->done ? rm_fail(err, REDMUTEX_EINVAL, "redmutex_wait_try: this wait is done; free it") : try_begin(err, w);
    if (rc != RM_TRY_ON)
        return rc;
    int news = w->waiter ? rm_waiter_take(c, w->waiter) : 0; /* no claim offered: 0 or 1 */
    bool first = !w->tried;
    int64_t ttl_ms = -1;
    char channel[RM_LONG_KEY_MAX] = "";
    w->tried = true;
    if ((rc = w->ops->try_once(err, w->obj, &ttl_ms, channel)) != REDMUTEX_ETIMEDOUT) {
        if (rc == 0)
            mark_done(w);
        return rc;
    }
    if (interrupted(w)) /* during the try: no more waiting */
        return end_interrupted(err, w);
    if (w->waiter && strcmp(channel, w->channel) != 0) {
        rm_waiter_end(c, w->waiter);
        w->waiter = NULL;
    }
    snprintf(w->channel, sizeof w->channel, "%s", channel);
    rm_err e;
    if (!w->waiter && channel[0] && join(&e, w) != 0)
        return rm_err_copy(err, &e);
    set_next_due(w, ttl_ms, false, !first && news == 0, 0);
    if (w->waiter)
        rm_waiter_sleep(c, w->waiter);
    return REDMUTEX_ETIMEDOUT; /* with the try's message */
}

static int busy(rm_err *err, const redmutex_wait *w, const char *why)
{
    return rm_fail(err, REDMUTEX_ETIMEDOUT, "lock '%s' %s; the wait becomes ready when it may be free", w->l->name,
                   why);
}

/* Statistics: how a wait ended (rc: its last try's result, 0 acquired). */
static void count_end(redmutex_wait *w, int rc)
{
    if (w->waiting)
        rm_stats_waiting(&w->c->stats, -1);
    w->waiting = false;
    rm_stats_acquire(&w->c->stats, w->l->kind, rc, w->start_ns);
}

static int counted_try(redmutex_wait *w, int rc)
{
    w->last_rc = rc;
    if (rc == 0)
        count_end(w, 0);
    else if (rc == REDMUTEX_ETIMEDOUT && !w->waiting) {
        w->waiting = true;
        rm_stats_waiting(&w->c->stats, 1);
    }
    return rc;
}

/* One step of redmutex_wait_try for a wait that has not acquired yet. */
static int wait_try(rm_err *err, redmutex_wait *w)
{
    redmutex_client *c = w->c;
    int rc = try_begin(err, w);
    if (rc != RM_TRY_ON)
        return rc;
    /* Notifications from here on make the wait ready again: none is lost. */
    int news = w->waiter ? rm_waiter_take(c, w->waiter) : 0;
    if (news < 0)
        return busy(
            err, w,
            "is held by another owner"); /* a releasing thread acquires for us: its result makes the wait ready */
    if (news == RM_WAIT_GRANTED) {
        mark_done(w);
        return 0;
    }
    if (news == RM_WAIT_UNKNOWN)
        rm_lock_release_value(w->l, w->value); /* the acquisition made for us may have happened */

    /* Like a blocked acquire, a new wait queues behind the client's waits
       for the same lock instead of racing them (unless it re-enters). A
       fair wait makes no attempt while another wait of its owner in this
       client goes first, however often it is tried: that wait may have
       been handed the lock on the server (rm_fair_wait_behind). */
    bool first = !w->tried;
    bool skip = w->fair ? rm_fair_wait_behind(w->l, w->value, w->channel, w->waiter)
                        : first && rm_waiters_queued(c, w->channel) > 0 && !rm_lock_holds(w->l, w->owner_key);
    int64_t ttl_ms = -1, behind = 0;
    bool split = false;
    const char *why = w->fair && skip ? "is waited for by another wait of this owner in this client, which goes first"
                                      : "is held by another owner";
    w->tried = true;
    if (!skip) {
        /* A fair lock's try takes a hand-off to this wait from the server
           (its field is there): one round trip, not none, for a wait. */
        rc = rm_acquire_attempt(err, w->l, w->owner_key, w->value, !first, w->fair ? w->nonce : NULL, &ttl_ms, &split,
                                &why, &w->in_fair_queue, &behind);
        if (rc == 0) {
            mark_done(w);
            return 0;
        }
        if (rc < 0)
            return rc;
    }
    if (interrupted(w)) /* during the attempt: no more waiting */
        return end_interrupted(err, w);
    if (!w->waiter && (rc = join(err, w)) != 0)
        return rc;
    set_next_due(w, ttl_ms, split, !first && news == 0, behind);
    if (w->waiter)
        rm_waiter_sleep(c, w->waiter);
    return busy(err, w, why);
}

int redmutex_wait_try(redmutex_wait *w)
{
    rm_err e_, *err = rm_err_reset(&e_);
    if (!w)
        return rm_publish(err, rm_fail(err, REDMUTEX_EINVAL, "redmutex_wait_try: wait is NULL"));
    if (w->ops)
        return rm_publish(err, custom_try(err, w));
    if (w->done)
        return rm_publish(err, rm_fail(err, REDMUTEX_EINVAL,
                                       "redmutex_wait_try: this wait acquired lock '%s' already; free it", w->l->name));
    return rm_publish(err, counted_try(w, wait_try(err, w)));
}

void redmutex_wait_free(redmutex_wait *w)
{
    if (!w)
        return;
    redmutex_client *c = w->c;
    if (w->ops) {
        rm_client_lock(c);
        w->freeing = true;
        rm_client_unlock(c);
        if (w->waiter)
            rm_waiter_end(c, w->waiter);
        w->ops->end(w->obj);
        release_refs(w);
        return;
    }
    /* A hold that cannot be given back stays recorded for the owner
       (released by the owner or the client's close, never renewed past
       its lease once its release failed). */
    if (!w->ended)
        give_up(w);
    if (!w->done && w->last_rc)
        count_end(w, w->last_rc); /* given up: timeout when the lock was held, else its error */
    release_refs(w);
}
