/*
 * Pollable waits: acquiring a lock from an event loop, without a thread per
 * waiter. A redmutex_wait is the waiting half of redmutex_lock_acquire() cut
 * loose from the waiting thread: it is queued on the lock's release channel
 * like a blocked acquire (so releases wake it, and a releasing thread of the
 * client may hand it the lock), and it is given a due time (the holder's
 * lease end, the capped backoff) after each failed attempt. Instead of
 * sleeping in poll(), it is put on the client's ready list, and the loop
 * learns of that through one descriptor per client, so a thousand waits cost
 * three descriptors, not a thousand. Its tries are steps of the wait engine
 * that redmutex_lock_acquire() runs too (waitstep.h); the loop runs them
 * where a round trip may block: a worker thread, or the loop itself if it
 * does not mind.
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
#include "waitstep.h"

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
    if (w->ws.l)
        rm_lock_unref_locked(c, w->ws.l); /* never the last client reference: the wait has its own */
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
    if (w->ws.l)
        w->ws.l->refs++;
    /* Read after the eventfd is published: a later interrupt reaches it. */
    w->ws.intr_start = atomic_load(&c->intr.gen);
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
    int rc = rm_lock_check_handle(err, lock, "redmutex_wait_new");
    if (rc == 0)
        rc = rm_waitstep_begin(err, &w->ws, lock, owner, true);
    if (rc) {
        free(w);
        return rc;
    }
    w->ws.notify = notify;
    w->ws.ud = w;
    rm_waitstep_arm(&w->ws);
    w->c = lock->c;
    w->id = atomic_fetch_add(&last_wait_id, 1) + 1;
    w->start_ns = w->ws.sent_ns;
    w->due_ns = INT64_MAX;
    if ((rc = register_wait(err, w)) == 0)
        *out = w;
    return rc;
}

int rm_wait_new_custom(rm_err *err, redmutex_wait **out, redmutex_client *c, const rm_wait_ops *ops, void *obj)
{
    redmutex_wait *w = calloc(1, sizeof *w);
    if (!w)
        return rm_fail(err, REDMUTEX_ENOMEM, "out of memory");
    w->c = w->ws.c = c;
    w->ops = ops;
    w->obj = obj;
    w->id = atomic_fetch_add(&last_wait_id, 1) + 1;
    w->ws.notify = notify;
    w->ws.ud = w;
    w->ws.deadline = INT64_MAX;
    w->ws.info.ttl_ms = -1;
    rm_waitstep_arm(&w->ws);
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

uint64_t redmutex_wait_id(const redmutex_wait *wait) { return wait ? wait->id : 0; }

/* After a busy try: the wait becomes ready at due_ns (and now, when it
   joined a channel subscribed already), and hand-offs may reach it. */
static void set_due(redmutex_wait *w, const rm_step_out *out)
{
    redmutex_client *c = w->c;
    rm_client_lock(c);
    if (out->ready_now)
        rm_ready_push(c->pollwait.pw, w);
    rm_ready_set_due(c->pollwait.pw, w, out->due_ns);
    rm_client_unlock(c);
    if (w->ws.waiter)
        rm_waiter_sleep(c, w->ws.waiter);
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
 * back (it stays recorded for the owner, see rm_waitstep_give_up).
 */
static bool give_up(redmutex_wait *w)
{
    redmutex_client *c = w->c;
    rm_client_lock(c);
    w->freeing = true; /* notifications now only end the wait below */
    rm_ready_unqueue(c->pollwait.pw, w);
    w->due_ns = INT64_MAX;
    rm_client_unlock(c);
    int news = 0;
    if (w->ws.waiter && (news = rm_waiter_take(c, w->ws.waiter)) < 0) { /* no new hand-off can start after this */
        /* A releasing thread is acquiring for this wait: its request is
           out, and it will record the result in the waiter. Wait for it
           (one round trip of that thread, bounded by its deadline). */
        rm_client_lock(c);
        while (rm_waiter_handoff_in_flight(w->ws.waiter))
            pthread_cond_wait(&c->pollwait.pw->handoff_done, &c->mu);
        rm_client_unlock(c);
        news = rm_waiter_take(c, w->ws.waiter);
    }
    return rm_waitstep_give_up(&w->ws, news, w->done);
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
            rm_waitstep_give_up(&w->ws, 0, false); /* leaves its channel */
        } else if (give_up(w)) {
            mark_done(w); /* as redmutex_lock_acquire: a hand-off that cannot be given back is held */
            return 0;
        }
    }
    if (w->ops)
        return rm_fail(err, REDMUTEX_EINTR, "the wait was interrupted (redmutex_client_interrupt)");
    return rm_fail(err, REDMUTEX_EINTR, "waiting for lock '%s' was interrupted", w->ws.l->name);
}

static bool interrupted(const redmutex_wait *w) { return atomic_load(&w->c->intr.gen) != w->ws.intr_start; }

/* try_begin's result when the try goes on. */
#define RM_TRY_ON 1

/* The start of a try: RM_TRY_ON with the wait off the ready list and no
   due time, or the try's result (the client closed, an interrupt). */
static int try_begin(rm_err *err, redmutex_wait *w)
{
    redmutex_client *c = w->c;
    if (w->ended) /* EINTR, even after a close */
        return end_interrupted(err, w);
    /* The closed flag is read where the wait leaves the ready list: a close
       after this makes it ready again (catch_interrupts), one before it is
       seen here, so the close's readiness is never taken back unseen. */
    rm_client_lock(c);
    bool closed = c->life.closed;
    if (!closed) {
        rm_ready_unqueue(c->pollwait.pw, w);
        w->due_ns = INT64_MAX;
    }
    rm_client_unlock(c);
    if (closed)
        return rm_fail(err, REDMUTEX_ECLOSED, "the client was closed");
    return interrupted(w) ? end_interrupted(err, w) : RM_TRY_ON;
}

/* A custom wait's try: the creator's try, then, while it is not done, the
   wait listens on the channel the try named (it may change) until due. */
static int custom_try(rm_err *err, redmutex_wait *w)
{
    redmutex_client *c = w->c;
    rm_waitstep *s = &w->ws;
    int rc =
        w->done ? rm_fail(err, REDMUTEX_EINVAL, "redmutex_wait_try: this wait is done; free it") : try_begin(err, w);
    if (rc != RM_TRY_ON)
        return rc;
    int news = s->waiter ? rm_waiter_take(c, s->waiter) : 0; /* no claim offered: 0 or 1 */
    bool silent = s->tried && news == 0;
    char channel[RM_LONG_KEY_MAX] = "";
    s->tried = true;
    s->info.ttl_ms = -1;
    if ((rc = w->ops->try_once(err, w->obj, &s->info.ttl_ms, channel)) != REDMUTEX_ETIMEDOUT) {
        if (rc == 0)
            mark_done(w);
        return rc;
    }
    if (interrupted(w)) /* during the try: no more waiting */
        return end_interrupted(err, w);
    if (s->waiter && strcmp(channel, s->channel) != 0)
        rm_waitstep_give_up(s, 0, false); /* leaves the old channel */
    snprintf(s->channel, sizeof s->channel, "%s", channel);
    rm_err e;
    rm_step_out out = {INT64_MAX, false, false};
    if (!s->waiter && channel[0] && rm_waitstep_join(&e, s, &out.ready_now) != 0)
        return rm_err_copy(err, &e);
    out.due_ns = rm_waitstep_due(s, silent);
    set_due(w, &out);
    return REDMUTEX_ETIMEDOUT; /* with the try's message */
}

static int busy(rm_err *err, const redmutex_wait *w, const char *why)
{
    return rm_fail(err, REDMUTEX_ETIMEDOUT, "lock '%s' %s; the wait becomes ready when it may be free", w->ws.l->name,
                   why);
}

/* Statistics: how a wait ended (rc: its last try's result, 0 acquired). */
static void count_end(redmutex_wait *w, int rc)
{
    if (w->waiting)
        rm_stats_waiting(&w->c->stats, -1);
    w->waiting = false;
    rm_stats_acquire(&w->c->stats, w->ws.l->kind, rc, w->start_ns);
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

/* One step of redmutex_wait_try for a wait that has not acquired yet: one
   step of the wait engine, with the news since the last. */
static int wait_try(rm_err *err, redmutex_wait *w)
{
    redmutex_client *c = w->c;
    int rc = try_begin(err, w);
    if (rc != RM_TRY_ON)
        return rc;
    /* Notifications from here on make the wait ready again: none is lost. */
    int news = w->ws.waiter ? rm_waiter_take(c, w->ws.waiter) : 0;
    rm_step_out out;
    rc = rm_waitstep_step(err, &w->ws, news, &out);
    if (rc == 0)
        mark_done(w);
    if (rc != RM_ATTEMPT_BUSY)
        return rc;
    if (out.interrupted)
        return end_interrupted(err, w);
    if (news >= 0) /* else a releasing thread acquires for us: its result makes the wait ready */
        set_due(w, &out);
    return busy(err, w, w->ws.info.why);
}

int redmutex_wait_try(redmutex_wait *w)
{
    rm_err e_, *err = rm_err_reset(&e_);
    if (!w)
        return rm_publish(err, rm_fail(err, REDMUTEX_EINVAL, "redmutex_wait_try: wait is NULL"));
    if (w->ops)
        return rm_publish(err, custom_try(err, w));
    if (w->done)
        return rm_publish(err,
                          rm_fail(err, REDMUTEX_EINVAL,
                                  "redmutex_wait_try: this wait acquired lock '%s' already; free it", w->ws.l->name));
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
        rm_waitstep_give_up(&w->ws, 0, false); /* leaves its channel */
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
