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

#include <inttypes.h>
#include <string.h>

/* Politeness (see acquire_begin): how soon after a release it applies, and
   how long the releasing handle lets the woken waiters try first. */
#define RM_POLITE_WINDOW_NS (10 * RM_NS_PER_MS)
#define RM_POLITE_PAUSE_MS 1

/* One call of redmutex_lock_acquire, from its checks to its end. */
typedef struct acquisition {
    rm_err *err; /* the call's error */
    redmutex_lock *l;
    redmutex_client *c;
    const char *owner; /* as the caller named it (NULL: the default owner) */
    char owner_key[RM_VALUE_MAX + 1], value[RM_VALUE_MAX + 1];
    const rm_kind_ops *ops;
    bool fair;      /* the servers keep the queue (kind_fair.c) */
    bool queue;     /* threads of this process wait already: this one goes behind them */
    bool polite;    /* lets the waiters its own release woke try first */
    bool early;     /* a fair waiter listening before its first attempt */
    char nonce[17]; /* a fair wait's id */
    char channel[RM_LONG_KEY_MAX];
    int64_t wait_ms, start, deadline, sent_ns, attempts;
    rm_retry retry; /* when to try again, when to stop (retry.c) */
    bool silent;    /* the last pause ended with no news: the backoff doubles */
    rm_wait wait;   /* redmutex_client_interrupt() ends it */
    rm_waiter *w;
    rm_claim claim; /* offered to releasing threads (kept alive here) */
    rm_attempt_info info;
} acquisition;

/*
 * A fair waiter woken by a message on its channel: if a releasing script
 * handed the lock to this wait (kind_fair.c), records the hold and returns 0,
 * without a round trip. The hand-off's TTL runs to the end of the waiter's
 * record, which its last attempt (sent at sent_ns) refreshed: it is valid
 * that long from then, and the watchdog extends it to the full lease a third
 * of that later. RM_ATTEMPT_BUSY when the message was no hand-off (or one
 * too old to trust: the next attempt then finds the hold on the server), or
 * an error (the caller then leaves the queue, which gives the lock back).
 */
static int take_grant(acquisition *q)
{
    char msg[64];
    int64_t fence = 0;
    int64_t ttl = RM_FAIR_WAITER_LEASE_MS;
    if (!rm_waiter_message(q->c, q->w, msg, sizeof msg) || !rm_fair_grant_parse(msg, q->nonce, &fence))
        return RM_ATTEMPT_BUSY;
    if (rm_now_ns() >= rm_validity_end_ns(q->sent_ns, ttl))
        return RM_ATTEMPT_BUSY;
    rm_votes v;
    rm_votes_init(&v);
    rm_votes_grant_figures(&v, 1, fence, ttl);
    rm_tally_yes(&v.t, 0); /* hand-offs happen on one server only */
    rm_client_lock(q->c);
    int rc = rm_hold_record(q->err, q->l, q->owner_key, q->value, q->sent_ns, &v);
    rm_client_unlock(q->c);
    return rc;
}

/* A wait ended early: by redmutex_client_interrupt (or the interrupt callback), or by a close. */
static int interrupted_wait(rm_err *err, const redmutex_lock *l)
{
    if (!rm_client_open(l->c))
        return rm_fail(err, REDMUTEX_ECLOSED, "the client was closed while waiting for lock '%s'", l->name);
    return rm_fail(err, REDMUTEX_EINTR, "waiting for lock '%s' was interrupted", l->name);
}

/*
 * The one way a wait gives up what a hand-off may have given it, for
 * blocking acquires (interrupted) and pollable waits (freed) alike. `news`
 * is what a releasing thread of this client reported (rm_waiter_wait,
 * rm_waiter_take): a hold it acquired and recorded for the wait is released
 * (its release wakes the next waiter), an acquisition of unknown outcome is
 * undone. True when a granted hold could not be given back: it stays
 * recorded, and the caller reports it held rather than orphan it.
 */
bool rm_handoff_give_back(redmutex_lock *l, const char *owner_key, const char *value, bool explicit_owner, int news)
{
    if (news == RM_WAIT_GRANTED)
        return rm_release_owner(NULL, l, owner_key, explicit_owner, INT64_MAX) != 0;
    if (news == RM_WAIT_UNKNOWN)
        rm_release_value(l, value); /* the acquisition made for us may have happened */
    return false;
}

/*
 * Ends a wait that stops without the lock (fair_queued: its attempts may
 * have put it in a fair lock's queue), or that got it (fair_queued false):
 * it leaves the fair queue first, which gives back a hand-off the releasing
 * script made to it meanwhile, and only then leaves the channel, which lets
 * the next wait of the same owner try (rm_waiter_serial). In the other order
 * that wait's attempt would find the hand-off and count it as its own.
 */
void rm_wait_leave(redmutex_lock *l, const char *value, bool fair_queued, rm_waiter *w)
{
    if (fair_queued)
        rm_fair_stop_waiting(l, value);
    if (w)
        rm_waiter_end(l->c, w);
}

bool rm_fair_wait_behind(redmutex_lock *l, const char *value, const char *channel, rm_waiter *w)
{
    /* Unless the owner holds it: a nested acquisition never waits. (The
       channel first: it is one lookup, the holds a walk over the client's.) */
    return !rm_waiter_clear(l->c, channel, w) && !rm_hold_value_live(l, value);
}

int rm_sleep_until(redmutex_client *c, rm_wait *wait, int64_t until_ns)
{
    return rm_wait_poll(c, wait, -1, until_ns) == RM_POLL_INTERRUPTED ? REDMUTEX_EINTR : 0;
}

/* The owner key of the local hold, and the value the servers will store:
   a fresh token for a plain lock's anonymous holder, else the owner's field. */
static int owner_and_value(rm_err *err, redmutex_lock *l, const char *owner, char owner_key[RM_VALUE_MAX + 1],
                           char value[RM_VALUE_MAX + 1])
{
    int rc = rm_lock_resolve_owner(err, l, owner, owner_key);
    if (rc)
        return rc;
    if (rm_kind_of(l)->anonymous && !owner)
        return rm_new_token(err, value);
    rm_lock_owner_field(l, owner_key, value);
    return 0;
}

int rm_acquire_prepare(rm_err *err, redmutex_lock *l, const char *owner, char owner_key[RM_VALUE_MAX + 1],
                       char value[RM_VALUE_MAX + 1])
{
    int rc = rm_lock_check_handle(err, l, "redmutex_wait_new");
    return rc ? rc : owner_and_value(err, l, owner, owner_key, value);
}

bool rm_lock_holds(redmutex_lock *l, const char *owner_key) { return rm_hold_exists(l, owner_key); }

/* Joins the lock's channel (a fair lock's that hand-offs may reach: rm_waiter_serial). */
static void begin_waiting(acquisition *q, int64_t sub_deadline)
{
    rm_waiter_begin(q->c, q->channel, sub_deadline, &q->wait, &q->w);
    if (q->w && rm_handoff_by_script(q->l))
        rm_waiter_serial(q->c, q->w);
}

/* Checks the call, resolves its owner and value, and decides how it starts. 0 or an error code. */
static int acquire_begin(rm_err *err, acquisition *q, redmutex_lock *l, const char *owner, int64_t wait_ms)
{
    q->err = err;
    int rc = rm_lock_check_handle(err, l, "redmutex_lock_acquire");
    if (rc == 0)
        rc = rm_lock_check_wait(err, l, wait_ms);
    if (rc == 0)
        rc = owner_and_value(err, l, owner, q->owner_key, q->value);
    if (rc)
        return rc;
    redmutex_client *c = q->c = l->c;
    q->l = l;
    q->owner = owner;
    q->wait_ms = wait_ms;
    /* A fair lock's waiters queue on the servers (kind_fair.c): each waits on
       its own channel, with an id that a hand-off message names. */
    q->ops = rm_kind_of(l);
    q->fair = q->ops->server_queue;
    q->nonce[0] = '\0';
    rm_lock_channel(l, q->value, q->channel);
    /* A fair lock's channel is its owner's (kind.h): a waiter on it here is
       another acquisition of this owner, whose wait may have been handed
       the lock on the server already. This one comes after it. */
    bool behind = q->fair && rm_fair_wait_behind(l, q->value, q->channel, NULL);
    if (behind && wait_ms == 0)
        return rm_fail(err, REDMUTEX_ETIMEDOUT,
                       "lock '%s' is not held by this owner, and another acquisition of this owner in this "
                       "client is waiting for it",
                       l->name);
    if (q->fair && wait_ms != 0 && (rc = rm_fair_new_nonce(err, q->nonce)))
        return rc;
    /* From here on, redmutex_client_interrupt() ends this call's wait. */
    memset(&q->wait, 0, sizeof q->wait);
    if (wait_ms != 0 && (rc = rm_wait_begin(err, c, &q->wait)) != 0)
        return rc;
    q->start = rm_now_ns();
    q->deadline = rm_deadline_after_ms(wait_ms);
    q->info = (rm_attempt_info){-1, false, "is held by another owner", wait_ms != 0, q->nonce, false, 0};
    q->sent_ns = q->start; /* when the last attempt was sent */
    /* Threads of this process already waiting for the lock go first: a
       thread that just released it does not barge ahead of them. (A
       reentrant acquisition by a holder never waits.) */
    q->queue = behind ||
               (!q->fair && wait_ms != 0 && rm_waiters_queued(c, q->channel) > 0 && !rm_hold_exists(l, q->owner_key));
    /* Politeness towards other processes: a handle whose last acquisition
       had to wait, asking again right after its own release, would win every
       race against the waiters its release just woke (they need a message,
       a wake-up and a round trip). It gives them a moment first. */
    rm_client_lock(c);
    q->polite =
        !q->fair && !q->queue && wait_ms != 0 && l->contended && q->start - l->released_ns < RM_POLITE_WINDOW_NS;
    rm_client_unlock(c);
    /* A fair waiter whose channel is still subscribed from its last wait
       starts waiting before its first attempt: nothing published after that
       attempt can be missed, so it needs no second attempt. */
    q->w = NULL;
    q->early = q->fair && wait_ms != 0 && rm_waiter_subscribed(c, q->channel);
    if (q->early)
        begin_waiting(q, rm_deadline_after_ms(c->opts.command_timeout_ms));
    return 0;
}

/* The first attempt: true when it settled the call (*rc its result). */
static bool first_attempt(acquisition *q, int *rc)
{
    *rc = rm_attempt(q->err, q->l, q->owner_key, q->value, false, &q->info);
    if (*rc == RM_ATTEMPT_BUSY)
        return false;
    /* An error after joining the queue (it may have): out of it first. */
    rm_wait_leave(q->l, q->value, *rc != 0 && q->fair && q->info.queued, q->w);
    if (*rc == 0) {
        rm_client_lock(q->c);
        q->l->contended = false;
        rm_client_unlock(q->c);
    }
    rm_wait_end(q->c, &q->wait);
    return true;
}

/* Waiting: subscribe first, then try again, so a release published between
   the failed attempt and the subscription is not missed. */
static void start_waiting(acquisition *q)
{
    redmutex_client *c = q->c;
    if (q->wait_ms != 0 && !q->w) {
        int64_t sub_deadline = rm_deadline_after_ms(c->opts.command_timeout_ms);
        begin_waiting(q, sub_deadline < q->deadline ? sub_deadline : q->deadline);
    }
    /* A releasing thread of this client may acquire for us in its release's
       round trip (one server, no replica wait: see release.c). */
    q->claim = (rm_claim){q->l, q->owner_key, q->value};
    if (q->w && q->ops->local_waiters && c->n == 1 && c->opts.min_replicas == 0)
        rm_waiter_offer(c, q->w, &q->claim);
    rm_retry_init(&q->retry, &c->opts);
    q->silent = false;
    q->attempts = q->queue || q->polite ? 0 : 1;
    rm_stats_waiting(&c->stats, 1); /* until the call ends */
    if (q->polite)
        q->info.ttl_ms = RM_POLITE_PAUSE_MS; /* the first pause */
}

/* Before a pause: RM_ATTEMPT_BUSY to go on, or the call's end (closed,
   interrupted, out of time or of tries). *now is set. */
static int may_pause(acquisition *q, int64_t *now)
{
    redmutex_client *c = q->c;
    if (!rm_client_open(c))
        return rm_fail(q->err, REDMUTEX_ECLOSED, "the client was closed while waiting for lock '%s'", q->l->name);
    /* Asked before every pause, not only when poll() reports EINTR: a
       signal may have landed while a request was in flight, where EINTR
       is retried. */
    if (rm_wait_interrupted(c, &q->wait) || (c->opts.interrupt && c->opts.interrupt(c->opts.interrupt_payload)))
        return interrupted_wait(q->err, q->l);
    *now = rm_now_ns();
    if (rm_retry_exhausted(&q->retry, *now, q->deadline, q->attempts))
        return rm_fail(q->err, REDMUTEX_ETIMEDOUT, "lock '%s' %s; waited %" PRId64 " ms", q->l->name, q->info.why,
                       (*now - q->start) / RM_NS_PER_MS);
    return RM_ATTEMPT_BUSY;
}

/* Next attempt: on a release message, when the holder's lease ends, or after
   a capped, jittered backoff, whichever comes first. */
static int64_t pause_until(acquisition *q, int64_t now)
{
    int64_t pause_ms = rm_retry_pause_ms(&q->retry, q->info.ttl_ms, q->info.split, q->silent);
    if (q->fair) /* only the head tries; each attempt refreshes this waiter's place */
        pause_ms = rm_fair_pause_ms(pause_ms, q->info.behind);
    return rm_retry_next_due(now, pause_ms, q->deadline);
}

/* After a pause that ended with r (rm_waiter_wait's result): RM_ATTEMPT_BUSY
   to try again, or the call's end. */
static int after_pause(acquisition *q, int r, bool interrupted)
{
    if (q->fair && q->w && r == 1) {
        int g = take_grant(q);
        if (g == 0)
            r = RM_WAIT_GRANTED;
        else if (g != RM_ATTEMPT_BUSY)
            return g;
    }
    if (r == RM_WAIT_GRANTED && !interrupted)
        return 0;
    /* Interrupted as the lock came with a hand-off: given back, or, if it
       cannot be, reported held rather than failing while holding it. */
    if (rm_handoff_give_back(q->l, q->owner_key, q->value, q->owner != NULL, r))
        return 0;
    if (interrupted || r == REDMUTEX_EINTR)
        return interrupted_wait(q->err, q->l);
    q->silent = r == 0; /* the next pause backs off further */
    return RM_ATTEMPT_BUSY;
}

/* Attempts and pauses until the lock is won or the wait ends. */
static int wait_loop(acquisition *q, bool try_now)
{
    for (;;) {
        int rc;
        if (try_now && rm_wait_interrupted(q->c, &q->wait))
            return interrupted_wait(q->err, q->l);
        if (try_now && q->fair && q->w && rm_fair_wait_behind(q->l, q->value, q->channel, q->w)) {
            try_now = false; /* another wait of this owner goes first: its end wakes this one */
            q->info.why = "is waited for by another acquisition of this owner in this client, which goes first";
        }
        if (try_now) {
            q->sent_ns = rm_now_ns();
            rc = rm_attempt(q->err, q->l, q->owner_key, q->value, true, &q->info);
            q->attempts++;
            if (rc != RM_ATTEMPT_BUSY)
                return rc;
        }
        try_now = true;
        int64_t now = 0;
        if ((rc = may_pause(q, &now)) != RM_ATTEMPT_BUSY)
            return rc;
        int64_t until = pause_until(q, now);
        bool interrupted = false;
        int r = q->w ? rm_waiter_wait(q->c, q->w, until, &interrupted) : rm_sleep_until(q->c, &q->wait, until);
        if ((rc = after_pause(q, r, interrupted)) != RM_ATTEMPT_BUSY)
            return rc;
    }
}

int rm_lock_acquire(rm_err *err, redmutex_lock *l, const char *owner, int64_t wait_ms)
{
    acquisition q;
    int rc = acquire_begin(err, &q, l, owner, wait_ms);
    if (rc)
        return rc;
    if (!q.queue && !q.polite && first_attempt(&q, &rc)) {
        rm_stats_acquire(&q.c->stats, l->kind, rc, q.start);
        return rc;
    }
    start_waiting(&q);
    /* Try again right after subscribing, unless there is no wait at all or
       this thread queues behind others (it waits for its turn first). */
    rc = wait_loop(&q, !q.queue && !q.polite && wait_ms != 0 && !q.early);
    redmutex_client *c = q.c;
    /* A waiter that gives up leaves the queue (and gives back a late hand-off). */
    rm_wait_leave(l, q.value, q.fair && rc != 0 && q.info.queued, q.w);
    rm_wait_end(c, &q.wait);
    rm_client_lock(c);
    l->contended = q.attempts > 1 || q.queue || q.polite;
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
