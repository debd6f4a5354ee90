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
 *
 * The client's wait fd is an epoll instance over two descriptors: an eventfd
 * that is readable exactly while the ready list is not empty, and a timerfd
 * armed for the earliest due time of the waits. redmutex_client_next_ready()
 * moves waits whose time has come onto the ready list and pops the oldest.
 * Everything here runs under the client mutex, which also keeps the ready
 * list and the eventfd's readability in step.
 */
#define _GNU_SOURCE
#include "client.h"
#include "handle.h"
#include "internal.h"
#include "kind.h" /* fair locks: a wait of its own on the server's queue */
#include "lifetime.h"
#include "lockops.h"
#include "pollwait.h"
#include "waitfd.h"
#include "waiter.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

typedef struct rm_pollwaits rm_pollwaits;

struct rm_pollwaits {
    int epfd;           /* the client's wait fd: readable while efd or tfd is */
    int efd;            /* readable exactly while the ready list is not empty */
    int tfd;            /* fires at the earliest due time */
    int64_t timer_ns;   /* what tfd is armed for; INT64_MAX when disarmed */
    redmutex_wait *all; /* every wait of the client (for the due-time scan) */
    redmutex_wait *ready_head, *ready_tail;
    pthread_cond_t handoff_done; /* a hand-off to a wait being freed has ended */
};

struct redmutex_wait {
    redmutex_client *c;
    redmutex_lock *l;
    uint64_t id;
    rm_waiter *waiter; /* queue position on the channel; NULL if it could not join */
    bool explicit_owner;
    bool tried;   /* an attempt was made or skipped: later ones are retries */
    bool done;    /* acquired: nothing more to try */
    bool queued;  /* on the ready list */
    bool freeing; /* redmutex_wait_free waits for a hand-off in flight */
    int64_t backoff_ms;
    int64_t due_ns; /* when it becomes ready if nothing else makes it; INT64_MAX: never */
    redmutex_wait *next_ready;
    redmutex_wait *next_all, *prev_all;
    rm_claim claim; /* what a releasing thread needs to acquire for it (points below) */
    char owner_key[RM_VALUE_MAX + 1];
    char value[RM_VALUE_MAX + 1];
    char channel[RM_LONG_KEY_MAX];
    /* A fair lock's wait queues on the server (kind_fair.c): its id, and
       whether it may have joined the queue (then freeing it leaves; a
       nested wait never joins it). */
    bool fair;
    bool in_fair_queue;
    char nonce[17];
    /* A wait for something else than a lock (pollwait.h, rm_wait_new_custom):
       l is NULL, and the tries are these. */
    const rm_wait_ops *ops;
    void *obj;
    /* Statistics (stats.c): a wait is one acquisition from its creation to
       the try that acquires or to its free; a waiter while tries find the
       lock held. */
    int64_t start_ns;
    int last_rc; /* of the last try; 0 before the first */
    bool waiting;
};

static _Atomic uint64_t last_wait_id;

/* ---- the client's ready list and timer (caller holds c->mu) ----------------- */

static rm_pollwaits *ensure_pollwaits(rm_err *err, redmutex_client *c)
{
    if (c->pw)
        return c->pw;
    rm_pollwaits *pw = calloc(1, sizeof *pw);
    if (!pw) {
        rm_fail(err, REDMUTEX_ENOMEM, "out of memory");
        return NULL;
    }
    if (rm_waitfd_make(&pw->epfd, &pw->efd, &pw->tfd) != 0) {
        rm_fail(err, REDMUTEX_ENOMEM, "cannot create the client's wait fd: %s", strerror(errno));
        free(pw);
        return NULL;
    }
    pw->timer_ns = INT64_MAX;
    rm_cond_init_monotonic(&pw->handoff_done);
    c->pw = pw;
    return pw;
}

static void arm_timer(rm_pollwaits *pw, int64_t at_ns)
{
    struct itimerspec its = {{0, 0}, {0, 0}}; /* all zero disarms */
    if (at_ns != INT64_MAX) {
        its.it_value.tv_sec = (time_t)(at_ns / 1000000000);
        its.it_value.tv_nsec = (long)(at_ns % 1000000000);
        if (its.it_value.tv_sec == 0 && its.it_value.tv_nsec == 0)
            its.it_value.tv_nsec = 1;
    }
    timerfd_settime(pw->tfd, TFD_TIMER_ABSTIME, &its, NULL);
    pw->timer_ns = at_ns;
}

static void push_ready(rm_pollwaits *pw, redmutex_wait *w)
{
    w->due_ns = INT64_MAX;
    if (w->queued)
        return;
    w->queued = true;
    w->next_ready = NULL;
    if (pw->ready_tail)
        pw->ready_tail->next_ready = w;
    else
        pw->ready_head = w;
    pw->ready_tail = w;
    if (pw->ready_head == w)
        rm_waitfd_signal(pw->efd);
}

static void unqueue(rm_pollwaits *pw, redmutex_wait *w)
{
    if (!w->queued)
        return;
    redmutex_wait *prev = NULL;
    for (redmutex_wait *p = pw->ready_head; p && p != w; p = p->next_ready)
        prev = p;
    if (prev)
        prev->next_ready = w->next_ready;
    else
        pw->ready_head = w->next_ready;
    if (pw->ready_tail == w)
        pw->ready_tail = prev;
    w->queued = false;
    w->next_ready = NULL;
    if (!pw->ready_head)
        rm_waitfd_drain(pw->efd);
}

/* Makes every wait whose due time has come ready, and re-arms the timer. */
static void scan_due(rm_pollwaits *pw, int64_t now)
{
    if (now < pw->timer_ns)
        return;
    rm_waitfd_drain(pw->tfd);
    int64_t next = INT64_MAX;
    for (redmutex_wait *w = pw->all; w; w = w->next_all) {
        if (w->due_ns <= now)
            push_ready(pw, w);
        else if (w->due_ns < next)
            next = w->due_ns;
    }
    arm_timer(pw, next);
}

static void set_due(rm_pollwaits *pw, redmutex_wait *w, int64_t at_ns)
{
    w->due_ns = at_ns;
    if (at_ns < pw->timer_ns)
        arm_timer(pw, at_ns);
}

/* The waiter's notification (rm_waiter_join): called with c->mu held. */
static void notify(void *ud)
{
    redmutex_wait *w = ud;
    rm_pollwaits *pw = w->c->pw;
    if (w->freeing)
        pthread_cond_broadcast(&pw->handoff_done);
    else
        push_ready(pw, w);
}

/* ---- the API ----------------------------------------------------------------- */

static void release_refs(redmutex_wait *w)
{
    redmutex_client *c = w->c;
    rm_client_lock(c);
    rm_pollwaits *pw = c->pw;
    unqueue(pw, w);
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
    rm_pollwaits *pw = c->closed ? NULL : ensure_pollwaits(err, c);
    if (!pw) {
        rm_client_unlock(c);
        free(w);
        return c->closed ? rm_fail(err, REDMUTEX_ECLOSED, "the client was closed") : REDMUTEX_ENOMEM;
    }
    c->refs++;
    if (w->l)
        w->l->refs++;
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
    w->backoff_ms = c->opts.wait_backoff_cap_ms < 50 ? c->opts.wait_backoff_cap_ms : 50;
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
    w->backoff_ms = c->opts.wait_backoff_cap_ms < 50 ? c->opts.wait_backoff_cap_ms : 50;
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
        push_ready(c->pw, w);
        rm_client_unlock(c);
    }
    return 0;
}

uint64_t redmutex_wait_id(const redmutex_wait *wait)
{
    return wait ? wait->id : 0;
}

/* Milliseconds until the next attempt after a busy one (as redmutex_lock_acquire pauses). */
static int64_t next_pause_ms(redmutex_wait *w, int64_t ttl_ms, bool split, bool timed_out, int64_t behind)
{
    redmutex_client *c = w->c;
    if (timed_out && w->backoff_ms < c->opts.wait_backoff_cap_ms)
        w->backoff_ms =
            w->backoff_ms * 2 > c->opts.wait_backoff_cap_ms ? c->opts.wait_backoff_cap_ms : w->backoff_ms * 2;
    int64_t pause_ms = w->backoff_ms - (int64_t)rm_random_below((uint64_t)w->backoff_ms / 4 + 1);
    if (ttl_ms >= 0 && ttl_ms < pause_ms - 1)
        pause_ms = ttl_ms + 1;
    if (split && c->opts.retry_delay_ms > 0) {
        int64_t d = (int64_t)rm_random_below((uint64_t)c->opts.retry_delay_ms) + 1;
        if (d < pause_ms)
            pause_ms = d;
    }
    if (w->fair) /* only the head tries; each try refreshes the wait's place in the queue */
        pause_ms = rm_fair_pause_ms(pause_ms, behind);
    return pause_ms;
}

/* A custom wait's try: the creator's try, then, while it is not done, the
   wait listens on the channel the try named (it may change) until due. */
static int custom_try(rm_err *err, redmutex_wait *w)
{
    redmutex_client *c = w->c;
    int rc = w->done ? rm_fail(err, REDMUTEX_EINVAL, "redmutex_wait_try: this wait is done; free it")
                     : rm_client_usable(err, c);
    if (rc)
        return rc;
    rm_client_lock(c);
    unqueue(c->pw, w);
    w->due_ns = INT64_MAX;
    rm_client_unlock(c);
    int news = w->waiter ? rm_waiter_take(c, w->waiter) : 0; /* no claim offered: 0 or 1 */
    bool first = !w->tried;
    int64_t ttl_ms = -1;
    char channel[RM_LONG_KEY_MAX] = "";
    w->tried = true;
    if ((rc = w->ops->try_once(err, w->obj, &ttl_ms, channel)) != REDMUTEX_ETIMEDOUT) {
        w->done = rc == 0;
        return rc;
    }
    if (w->waiter && strcmp(channel, w->channel) != 0) {
        rm_waiter_end(c, w->waiter);
        w->waiter = NULL;
    }
    snprintf(w->channel, sizeof w->channel, "%s", channel);
    rm_err e;
    if (!w->waiter && channel[0] && join(&e, w) != 0)
        return rm_err_copy(err, &e);
    int64_t pause_ms = next_pause_ms(w, ttl_ms, false, !first && news == 0, 0);
    rm_client_lock(c);
    set_due(c->pw, w, rm_now_ns() + pause_ms * RM_NS_PER_MS);
    rm_client_unlock(c);
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
    int rc = rm_client_usable(err, c);
    if (rc)
        return rc;
    rm_client_lock(c);
    unqueue(c->pw, w);
    w->due_ns = INT64_MAX;
    rm_client_unlock(c);
    /* Notifications from here on make the wait ready again: none is lost. */
    int news = w->waiter ? rm_waiter_take(c, w->waiter) : 0;
    if (news < 0)
        return busy(err, w, "is held by another owner"); /* a releasing thread acquires for us: its result makes the wait ready */
    if (news == RM_WAIT_GRANTED) {
        w->done = true;
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
            w->done = true;
            return 0;
        }
        if (rc < 0)
            return rc;
    }
    if (!w->waiter && (rc = join(err, w)) != 0)
        return rc;
    int64_t pause_ms = next_pause_ms(w, ttl_ms, split, !first && news == 0, behind);
    rm_client_lock(c);
    set_due(c->pw, w, rm_now_ns() + pause_ms * RM_NS_PER_MS);
    rm_client_unlock(c);
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
                                       "redmutex_wait_try: this wait acquired lock '%s' already; free it",
                                       w->l->name));
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
    rm_client_lock(c);
    w->freeing = true; /* notifications now only end the wait below */
    unqueue(c->pw, w);
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
                pthread_cond_wait(&c->pw->handoff_done, &c->mu);
            rm_client_unlock(c);
            news = rm_waiter_take(c, w->waiter);
        }
        /* A hold that cannot be given back stays recorded for the owner
           (released by the owner or the client's close, never renewed
           past its lease once its release failed). */
        rm_handoff_give_back(w->l, w->owner_key, w->value, w->explicit_owner, news);
    }
    /* Out of the queue (a hand-off by the script given back), then off the
       channel: a release message it did not use, and the turn of its owner's
       next wait, go on from there. */
    rm_wait_leave(w->l, w->value, w->fair && w->in_fair_queue && !w->done, w->waiter);
    if (!w->done && w->last_rc)
        count_end(w, w->last_rc); /* given up: timeout when the lock was held, else its error */
    release_refs(w);
}

int redmutex_client_wait_fd(redmutex_client *c)
{
    rm_err e_, *err = rm_err_reset(&e_);
    if (!c)
        return rm_publish(err, rm_fail(err, REDMUTEX_EINVAL, "redmutex_client_wait_fd: client is NULL"));
    rm_client_lock(c);
    rm_pollwaits *pw = ensure_pollwaits(err, c);
    int rc = pw ? pw->epfd : REDMUTEX_ENOMEM;
    rm_client_unlock(c);
    return rm_publish(err, rc);
}

int redmutex_client_next_ready(redmutex_client *c, uint64_t *wait_id)
{
    rm_err e_, *err = rm_err_reset(&e_);
    if (!c || !wait_id)
        return rm_publish(err, rm_fail(err, REDMUTEX_EINVAL, "redmutex_client_next_ready: %s is NULL", !c ? "client" : "wait_id"));
    int rc = 0;
    rm_client_lock(c);
    rm_pollwaits *pw = c->pw;
    if (pw) {
        scan_due(pw, rm_now_ns());
        redmutex_wait *w = pw->ready_head;
        if (w) {
            unqueue(pw, w);
            *wait_id = w->id;
            rc = 1;
        }
    }
    rm_client_unlock(c);
    return rm_publish(err, rc);
}

/* ---- fork and destruction ---------------------------------------------------- */

void rm_pollwaits_after_fork(redmutex_client *c)
{
    rm_pollwaits *pw = c->pw;
    if (!pw)
        return;
    /* The descriptors are shared with the parent (the epoll instance would
       even report the parent's readiness): the child gets fresh ones under
       the same numbers, so a loop that registered the wait fd keeps working. */
    rm_waitfd_renew(pw->epfd, pw->efd, pw->tfd);
    /* Nothing is ready or timed in the child. Its waits were cut from their
       channels with the subscriber; their next try starts afresh. */
    for (redmutex_wait *w = pw->all; w; w = w->next_all) {
        w->queued = false;
        w->next_ready = NULL;
        w->due_ns = INT64_MAX;
    }
    pw->ready_head = pw->ready_tail = NULL;
    pw->timer_ns = INT64_MAX;
    rm_cond_init_monotonic(&pw->handoff_done);
}

void rm_pollwaits_destroy(redmutex_client *c)
{
    rm_pollwaits *pw = c->pw;
    if (!pw)
        return;
    close(pw->epfd);
    close(pw->efd);
    close(pw->tfd);
    pthread_cond_destroy(&pw->handoff_done);
    free(pw);
    c->pw = NULL;
}
