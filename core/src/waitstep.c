/*
 * The wait engine (waitstep.h): the steps of an acquisition that waits,
 * for the blocking acquire and the pollable waits alike. A waiter listens
 * on the lock's channel for release messages, takes a hand-off from a
 * releasing thread of its client or (fair locks) a releasing script, and
 * tries again when it is due by the retry policy (retry.c).
 */
#define _GNU_SOURCE
#include "waitstep.h"

#include "client.h"
#include "handle.h"
#include "holds.h"
#include "internal.h"
#include "kind.h"
#include "quorum.h"
#include "waiter.h"

#include <string.h>

/* The owner key of the local hold, and the value the servers will store:
   a fresh token for a plain lock's anonymous holder, else the owner's field. */
int rm_acquire_owner_value(rm_err *err, redmutex_lock *l, const char *owner, char owner_key[RM_VALUE_MAX + 1],
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

int rm_waitstep_begin(rm_err *err, rm_waitstep *s, redmutex_lock *l, const char *owner, bool waiting)
{
    int rc = rm_acquire_owner_value(err, l, owner, s->owner_key, s->value);
    if (rc)
        return rc;
    s->c = l->c;
    s->l = l;
    s->explicit_owner = owner != NULL;
    /* A fair lock's waiters queue on the servers (kind_fair.c): each waits on
       its own channel, with an id that a hand-off message names. */
    s->fair = rm_kind_of(l)->server_queue;
    s->nonce[0] = '\0';
    if (s->fair && waiting && (rc = rm_fair_new_nonce(err, s->nonce)) != 0)
        return rc;
    rm_lock_channel(l, s->value, s->channel);
    s->wait = NULL;
    s->notify = NULL;
    s->by_message = false;
    s->intr_start = 0;
    s->deadline = INT64_MAX;
    s->waiter = NULL;
    s->tried = s->hold_back = false;
    s->sent_ns = rm_now_ns();
    s->attempts = 0;
    s->info = (rm_attempt_info){-1, false, "is held by another owner", waiting, s->nonce, false, 0};
    return 0;
}

void rm_waitstep_arm(rm_waitstep *s) { rm_retry_init(&s->retry, &s->c->opts); }

bool rm_waitstep_behind(rm_waitstep *s)
{
    /* A fair lock's channel is its owner's (kind.h): a serial waiter on it
       here is another acquisition of this owner, whose wait may have been
       handed the lock on the server already. Unless the owner holds it: a
       nested acquisition never waits. (The channel first: it is one lookup,
       the holds a walk over the client's.) */
    if (s->fair)
        return !rm_waiter_clear(s->c, s->channel, s->waiter) && !rm_hold_value_live(s->l, s->value);
    return rm_waiters_queued(s->c, s->channel) > 0 && !rm_hold_exists(s->l, s->owner_key);
}

int rm_waitstep_join(rm_err *err, rm_waitstep *s, bool *ready_now)
{
    redmutex_client *c = s->c;
    *ready_now = false;
    if (s->wait) {
        int64_t sub_deadline = rm_deadline_after_ms(c->opts.command_timeout_ms);
        rm_waiter_begin(c, s->channel, sub_deadline < s->deadline ? sub_deadline : s->deadline, s->wait, &s->waiter);
    } else if (rm_waiter_join(c, s->channel, s->notify, s->ud, &s->waiter, ready_now) != 0) {
        return rm_fail(err, REDMUTEX_ENOMEM, "out of memory");
    }
    if (!s->waiter || !s->l)
        return 0;
    if (rm_handoff_by_script(s->l))
        rm_waiter_serial(c, s->waiter); /* a hand-off to it is for it alone (waiter.h) */
    /* With one server and no replica wait, a releasing thread of this
       client may acquire for this wait in its release's round trip. */
    if (rm_kind_of(s->l)->local_waiters && c->n == 1 && c->opts.min_replicas == 0) {
        s->claim = (rm_claim){s->l, s->owner_key, s->value};
        rm_waiter_offer(c, s->waiter, &s->claim);
    }
    return 0;
}

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
static int take_grant(rm_err *err, rm_waitstep *s)
{
    char msg[64];
    int64_t fence = 0;
    int64_t ttl = RM_FAIR_WAITER_LEASE_MS;
    if (!rm_waiter_message(s->c, s->waiter, msg, sizeof msg) || !rm_fair_grant_parse(msg, s->nonce, &fence))
        return RM_ATTEMPT_BUSY;
    if (rm_now_ns() >= rm_validity_end_ns(s->sent_ns, ttl))
        return RM_ATTEMPT_BUSY;
    rm_votes v;
    rm_votes_init(&v);
    rm_votes_grant_figures(&v, 1, fence, ttl);
    rm_tally_yes(&v.t, 0); /* hand-offs happen on one server only */
    rm_client_lock(s->c);
    int rc = rm_hold_record(err, s->l, s->owner_key, s->value, s->sent_ns, &v);
    rm_client_unlock(s->c);
    return rc;
}

/* The news a step starts with: 0 when a hand-off granted the lock,
   RM_ATTEMPT_BUSY to go on, or an error. */
static int take_news(rm_err *err, rm_waitstep *s, int news)
{
    if (news == RM_NEWS_NOTIFIED && s->by_message && s->fair && s->waiter) {
        int g = take_grant(err, s);
        if (g != RM_ATTEMPT_BUSY)
            return g;
    }
    if (news == RM_WAIT_GRANTED)
        return 0; /* a releasing thread acquired for us and recorded the hold */
    if (news == RM_WAIT_UNKNOWN)
        rm_release_value(s->l, s->value); /* the acquisition made for us may have happened */
    return RM_ATTEMPT_BUSY;
}

static bool interrupted(const rm_waitstep *s)
{
    return s->wait ? rm_wait_interrupted(s->c, s->wait) : atomic_load(&s->c->intr.gen) != s->intr_start;
}

/* Whether this step makes no attempt: the caller held it back, or it goes
   behind another wait of this process (a non-fair one only before its
   first attempt; a fair one as long as that other wait is ahead). */
static bool skip_attempt(rm_waitstep *s)
{
    if (s->hold_back) {
        s->hold_back = false;
        return true; /* its pause: the caller's figures (s->info) */
    }
    if (s->fair ? !rm_waitstep_behind(s) : s->tried || !rm_waitstep_behind(s))
        return false;
    s->info.ttl_ms = -1;
    s->info.split = false;
    s->info.behind = 0;
    s->info.why = s->fair ? "is waited for by another acquisition of this owner in this client, which goes first"
                          : "is held by another owner";
    return true;
}

int rm_waitstep_step(rm_err *err, rm_waitstep *s, int news, rm_step_out *out)
{
    out->due_ns = INT64_MAX;
    out->ready_now = out->interrupted = false;
    int rc = take_news(err, s, news);
    if (rc != RM_ATTEMPT_BUSY)
        return rc;
    if (news < 0) { /* a releasing thread acquires for us: its result is the next news */
        s->info.why = "is held by another owner";
        return RM_ATTEMPT_BUSY;
    }
    bool silent = s->tried && news == 0; /* the pause before brought nothing: back off further */
    if (interrupted(s)) {
        out->interrupted = true;
        return RM_ATTEMPT_BUSY;
    }
    if (!skip_attempt(s)) {
        s->sent_ns = rm_now_ns();
        rc = rm_attempt(err, s->l, s->owner_key, s->value, s->tried, &s->info);
        s->attempts++;
        s->tried = true;
        if (rc != RM_ATTEMPT_BUSY)
            return rc;
    }
    s->tried = true;
    if (interrupted(s)) { /* during the attempt: no more waiting */
        out->interrupted = true;
        return RM_ATTEMPT_BUSY;
    }
    /* A pollable wait joins after its first attempt: the subscription's
       confirmation makes it ready for one more, so a release published in
       between is not missed. (A blocking one joined before: rm_waitstep_join.) */
    if (!s->waiter && !s->wait && (rc = rm_waitstep_join(err, s, &out->ready_now)) != 0)
        return rc;
    out->due_ns = rm_waitstep_due(s, silent);
    return RM_ATTEMPT_BUSY;
}

/* Next attempt: on a release message, when the holder's lease ends, or after
   a capped, jittered backoff, whichever comes first. */
int64_t rm_waitstep_due(rm_waitstep *s, bool silent)
{
    int64_t pause_ms = rm_retry_pause_ms(&s->retry, s->info.ttl_ms, s->info.split, silent);
    if (s->fair) /* only the head tries; each attempt refreshes this waiter's place */
        pause_ms = rm_fair_pause_ms(pause_ms, s->info.behind);
    return rm_retry_next_due(rm_now_ns(), pause_ms, s->deadline);
}

/*
 * A hold a releasing thread acquired and recorded for the wait is released
 * (its release wakes the next waiter), an acquisition of unknown outcome is
 * undone. True when a granted hold could not be given back.
 */
static bool give_back(rm_waitstep *s, int news)
{
    if (news == RM_WAIT_GRANTED)
        return rm_release_owner(NULL, s->l, s->owner_key, s->explicit_owner, INT64_MAX) != 0;
    if (news == RM_WAIT_UNKNOWN)
        rm_release_value(s->l, s->value); /* the acquisition made for us may have happened */
    return false;
}

/*
 * It leaves the fair queue first, which gives back a hand-off the releasing
 * script made to it meanwhile, and only then leaves the channel, which lets
 * the next wait of the same owner try (rm_waiter_serial). In the other order
 * that wait's attempt would find the hand-off and count it as its own.
 */
bool rm_waitstep_give_up(rm_waitstep *s, int news, bool won)
{
    bool kept = s->l && give_back(s, news);
    if (s->fair && s->info.queued && !won && !kept)
        rm_fair_stop_waiting(s->l, s->value);
    s->info.queued = false;
    if (s->waiter)
        rm_waiter_end(s->c, s->waiter);
    s->waiter = NULL;
    return kept;
}
