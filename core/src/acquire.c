/*
 * redmutex_lock_acquire: attempts (attempt.c) and the waits between them.
 * A waiter listens on the lock's channel for release messages, takes a
 * hand-off from a releasing thread of its client or (fair locks) a releasing
 * script, backs off with jitter, and ends on time, on interrupt or on close.
 */
#define _GNU_SOURCE
#include "client.h"
#include "handle.h"
#include "holds.h"
#include "internal.h"
#include "interrupt.h"
#include "kind.h"
#include "lockops.h"
#include "quorum.h"
#include "retry.h"
#include "waiter.h"
#include "waitstep.h"

#include <inttypes.h>
#include <string.h>

/* Politeness (see acquire_begin): how soon after a release it applies, and
   how long the releasing handle lets the woken waiters try first. */
#define RM_POLITE_WINDOW_NS (10 * RM_NS_PER_MS)
#define RM_POLITE_PAUSE_MS 1

/* One call of redmutex_lock_acquire, from its checks to its end: the wait
   engine's (waitstep.h) state, and what only a blocking acquire has. */
typedef struct acquisition {
    rm_err *err; /* the call's error */
    rm_waitstep s;
    bool queue;  /* threads of this process wait already: this one goes behind them */
    bool polite; /* lets the waiters its own release woke try first */
    bool early;  /* a fair waiter listening before its first attempt */
    int64_t wait_ms, start;
    rm_wait wait; /* redmutex_client_interrupt() ends it */
} acquisition;

/* A wait ended early: by redmutex_client_interrupt (or the interrupt callback), or by a close. */
static int interrupted_wait(rm_err *err, const redmutex_lock *l)
{
    if (!rm_client_open(l->c))
        return rm_fail(err, REDMUTEX_ECLOSED, "the client was closed while waiting for lock '%s'", l->name);
    return rm_fail(err, REDMUTEX_EINTR, "waiting for lock '%s' was interrupted", l->name);
}

/* Sleeps until until_ns without a waiter; 0, or REDMUTEX_EINTR when `wait` was interrupted. */
static int sleep_until(redmutex_client *c, rm_wait *wait, int64_t until_ns)
{
    return rm_wait_poll(c, wait, -1, until_ns) == RM_POLL_INTERRUPTED ? REDMUTEX_EINTR : 0;
}

/* Checks the call, resolves its owner and value, and decides how it starts. 0 or an error code. */
static int acquire_begin(rm_err *err, acquisition *q, redmutex_lock *l, const char *owner, int64_t wait_ms)
{
    q->err = err;
    rm_waitstep *s = &q->s;
    int rc = rm_lock_check_handle(err, l, "redmutex_lock_acquire");
    if (rc == 0)
        rc = rm_lock_check_wait(err, l, wait_ms);
    if (rc == 0)
        rc = rm_waitstep_begin(err, s, l, owner, wait_ms != 0);
    if (rc)
        return rc;
    redmutex_client *c = l->c;
    q->wait_ms = wait_ms;
    /* Threads of this process already waiting for the lock go first: a
       thread that just released it does not barge ahead of them. A fair
       acquisition goes behind another of its owner even without a wait. */
    q->queue = (s->fair || wait_ms != 0) && rm_waitstep_behind(s);
    if (q->queue && wait_ms == 0)
        return rm_fail(err, REDMUTEX_ETIMEDOUT,
                       "lock '%s' is not held by this owner, and another acquisition of this owner in this "
                       "client is waiting for it",
                       l->name);
    /* From here on, redmutex_client_interrupt() ends this call's wait. */
    memset(&q->wait, 0, sizeof q->wait);
    if (wait_ms != 0 && (rc = rm_wait_begin(err, c, &q->wait)) != 0)
        return rc;
    s->wait = &q->wait;
    s->by_message = true; /* a fair hand-off by message needs no round trip */
    q->start = s->sent_ns;
    s->deadline = rm_deadline_after_ms(wait_ms);
    /* Politeness towards other processes: a handle whose last acquisition
       had to wait, asking again right after its own release, would win every
       race against the waiters its release just woke (they need a message,
       a wake-up and a round trip). It gives them a moment first. */
    rm_client_lock(c);
    q->polite =
        !s->fair && !q->queue && wait_ms != 0 && l->contended && q->start - l->released_ns < RM_POLITE_WINDOW_NS;
    rm_client_unlock(c);
    /* A fair waiter whose channel is still subscribed from its last wait
       starts waiting before its first attempt: nothing published after that
       attempt can be missed, so it needs no second attempt. */
    bool ready_now;
    q->early = s->fair && wait_ms != 0 && rm_waiter_subscribed(c, s->channel);
    if (q->early)
        rm_waitstep_join(err, s, &ready_now);
    return 0;
}

/* The first attempt: true when it settled the call (*rc its result). */
static bool first_attempt(acquisition *q, int *rc)
{
    rm_waitstep *s = &q->s;
    *rc = rm_attempt(q->err, s->l, s->owner_key, s->value, false, &s->info);
    if (*rc == RM_ATTEMPT_BUSY)
        return false;
    /* An error after joining the queue (it may have): out of it first. */
    rm_waitstep_give_up(s, 0, *rc == 0);
    if (*rc == 0) {
        rm_client_lock(s->c);
        s->l->contended = false;
        rm_client_unlock(s->c);
    }
    rm_wait_end(s->c, &q->wait);
    return true;
}

/* Waiting: subscribe first, then try again, so a release published between
   the failed attempt and the subscription is not missed. */
static void start_waiting(acquisition *q)
{
    rm_waitstep *s = &q->s;
    bool ready_now;
    s->attempts = q->queue || q->polite ? 0 : 1;
    s->tried = s->attempts > 0;
    if (q->wait_ms != 0 && !s->waiter)
        rm_waitstep_join(q->err, s, &ready_now);
    rm_waitstep_arm(s);
    rm_stats_waiting(&s->c->stats, 1); /* until the call ends */
    /* The first step makes no attempt when there is no wait at all, when
       this thread queues behind others (it waits for its turn first), when
       it is polite, and when it listened before its first attempt already. */
    s->hold_back = q->wait_ms == 0 || q->queue || q->polite || q->early;
    if (q->polite)
        s->info.ttl_ms = RM_POLITE_PAUSE_MS; /* the first pause */
}

/* Before a pause: RM_ATTEMPT_BUSY to go on, or the call's end (closed,
   interrupted, out of time or of tries). */
static int may_pause(acquisition *q)
{
    rm_waitstep *s = &q->s;
    redmutex_client *c = s->c;
    if (!rm_client_open(c))
        return rm_fail(q->err, REDMUTEX_ECLOSED, "the client was closed while waiting for lock '%s'", s->l->name);
    /* Asked before every pause, not only when poll() reports EINTR: a
       signal may have landed while a request was in flight, where EINTR
       is retried. */
    if (rm_wait_interrupted(c, &q->wait) || (c->opts.interrupt && c->opts.interrupt(c->opts.interrupt_payload)))
        return interrupted_wait(q->err, s->l);
    int64_t now = rm_now_ns();
    if (rm_retry_exhausted(&s->retry, now, s->deadline, s->attempts))
        return rm_fail(q->err, REDMUTEX_ETIMEDOUT, "lock '%s' %s; waited %" PRId64 " ms", s->l->name, s->info.why,
                       (now - q->start) / RM_NS_PER_MS);
    return RM_ATTEMPT_BUSY;
}

/* Steps of the wait engine and pauses until the lock is won or the wait
   ends; *news: what the last pause brought, if the wait ends with it. */
static int wait_loop(acquisition *q, int *news)
{
    rm_waitstep *s = &q->s;
    *news = RM_NEWS_NOTIFIED; /* right after subscribing: try again */
    for (;;) {
        rm_step_out out;
        int rc = rm_waitstep_step(q->err, s, *news, &out);
        *news = 0;
        if (rc != RM_ATTEMPT_BUSY)
            return rc;
        if (out.interrupted)
            return interrupted_wait(q->err, s->l);
        if ((rc = may_pause(q)) != RM_ATTEMPT_BUSY)
            return rc;
        bool intr = false;
        *news =
            s->waiter ? rm_waiter_wait(s->c, s->waiter, out.due_ns, &intr) : sleep_until(s->c, &q->wait, out.due_ns);
        if (intr || *news == REDMUTEX_EINTR)
            return interrupted_wait(q->err, s->l);
    }
}

int rm_lock_acquire(rm_err *err, redmutex_lock *l, const char *owner, int64_t wait_ms)
{
    acquisition q;
    int rc = acquire_begin(err, &q, l, owner, wait_ms);
    if (rc)
        return rc;
    if (!q.queue && !q.polite && first_attempt(&q, &rc)) {
        rm_stats_acquire(&l->c->stats, l->kind, rc, q.start);
        return rc;
    }
    start_waiting(&q);
    int news = 0;
    rc = wait_loop(&q, &news);
    redmutex_client *c = l->c;
    /* Interrupted as the lock came with a hand-off: given back, or, if it
       cannot be, reported held rather than failing while holding it. A
       waiter that gives up leaves the queue (and gives back a late hand-off). */
    if (rm_waitstep_give_up(&q.s, rc != 0 ? news : 0, rc == 0))
        rc = 0;
    rm_wait_end(c, &q.wait);
    rm_client_lock(c);
    l->contended = q.s.attempts > 1 || q.queue || q.polite;
    rm_client_unlock(c);
    rm_stats_waiting(&c->stats, -1);
    rm_stats_acquire(&c->stats, l->kind, rc, q.start);
    return rc;
}

int redmutex_lock_acquire(redmutex_lock *l, const char *owner, int64_t wait_ms)
{
    rm_err err;
    rm_err_reset(&err);
    return rm_publish(&err, rm_lock_acquire(&err, l, owner, wait_ms));
}
