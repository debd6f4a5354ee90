/*
 * One acquisition attempt on all servers: the request (with any unsettled
 * release of the same owner sent again first), the votes read from the
 * replies, Redlock's fencing ratchet, the decision by quorum, the record of
 * the hold, and the undoing of whatever a failed attempt left behind.
 */
#define _GNU_SOURCE
#include "client.h"
#include "fanout.h"
#include "handle.h"
#include "holds.h"
#include "internal.h"
#include "kind.h"
#include "lockops.h"
#include "quorum.h"
#include "resp.h"
#include "scripts.h"
#include "tally.h"
#include "unsettled.h"
#include "watchdog.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

/*
 * Whether server i came back with a new run_id (a restart, perhaps without
 * its data) less than the longest lease ago. Its grant then counts as no
 * vote (Redlock's "delayed restart", done by the client): a holder that was
 * granted the lock by it before the restart may still hold a majority with
 * it, and can learn of the restart only at its next request there. The
 * longest lease is taken to be the larger of the client's watchdog lease and
 * this lock's lease. A client sees a restart only if it talked to the
 * server before.
 */
static bool restarted_recently(const redmutex_lock *l, size_t i)
{
    redmutex_client *c = l->c;
    int64_t seen = atomic_load(&c->pool.servers[i].restart_seen_ns);
    int64_t lease = rm_lock_lease_ms(l);
    int64_t longest = c->opts.watchdog_lease_ms > lease ? c->opts.watchdog_lease_ms : lease;
    return seen != 0 && rm_restart_too_young(rm_now_ns(), seen, c->n, longest);
}

/* SET NX's answer: a grant (OK), a refusal (nil; the pipelined PTTL tells
   how long), or no vote. */
static rm_vote set_vote(rm_acq_replies *a, const rm_slot *s, const rm_reply *r, rm_err *e)
{
    if (r->type == RM_REPLY_STATUS && strcmp(r->str, "OK") == 0) {
        rm_votes_grant_figures(&a->v, 1, 0, -1);
        return RM_VOTE_YES;
    }
    if (r->type == RM_REPLY_NIL) {
        const rm_reply *t = a->pttl_index >= 0 ? s->replies[a->pttl_index] : NULL;
        rm_votes_refused(&a->v, t && t->type == RM_REPLY_INTEGER && t->integer >= 0 ? t->integer : -1, false);
        return RM_VOTE_NO;
    }
    rm_fail(e, REDMUTEX_EPROTOCOL, "unexpected reply to SET");
    return RM_VOTE_ERROR;
}

/* An acquire script's answer {1 granted | 0 held | 2 owner's field gone,
   count or ttl, fence[, ttl of a hand-off]}. */
static rm_vote script_vote(rm_acq_replies *a, const rm_reply *r, rm_err *e)
{
    if (r->type != RM_REPLY_ARRAY || r->elements < 2 || r->element[0]->type != RM_REPLY_INTEGER ||
        r->element[1]->type != RM_REPLY_INTEGER ||
        (r->element[0]->integer == 1 && (r->elements < 3 || r->element[2]->type != RM_REPLY_INTEGER))) {
        rm_fail(e, REDMUTEX_EPROTOCOL, "unexpected reply to the acquire script");
        return RM_VOTE_ERROR;
    }
    if (r->element[0]->integer == 1) {
        int64_t short_ttl = -1;
        if (r->elements >= 4 && r->element[3]->type == RM_REPLY_INTEGER && r->element[3]->integer >= 0 &&
            r->element[3]->integer < a->lease_ms)
            short_ttl = r->element[3]->integer;
        rm_votes_grant_figures(&a->v, r->element[1]->integer, r->element[2]->integer, short_ttl);
        return RM_VOTE_YES;
    }
    long long ttl = r->element[1]->integer;
    rm_votes_refused(&a->v, ttl > 0 ? ttl : -1, r->element[0]->integer == 2);
    if (r->element[0]->integer == 0 && r->elements >= 3 && r->element[2]->type == RM_REPLY_INTEGER)
        rm_votes_behind(&a->v, r->element[2]->integer); /* a fair lock's place in its queue */
    return RM_VOTE_NO;
}

/* A grant the replicas did not confirm is no vote, and must be undone. True when confirmed. */
static bool replicas_confirm(rm_acq_replies *a, const rm_slot *s, rm_err *e)
{
    const redmutex_client *c = a->l->c;
    const rm_reply *w = s->replies[a->wait_index];
    if (w && w->type == RM_REPLY_ERROR) /* WAIT refused (an ACL without it, say): say so, and undo the hold */
        rm_reply_error(e, w, "WAIT after acquiring", NULL, NULL);
    else if (!w || w->type != RM_REPLY_INTEGER || w->integer < s->wait_need)
        rm_fail(e, REDMUTEX_EREPLICAS, "%lld of %d replicas acknowledged within %" PRId64 " ms",
                w && w->type == RM_REPLY_INTEGER ? w->integer : 0LL, s->wait_need, c->opts.replica_timeout_ms);
    else
        return true;
    return false;
}

/* Reads server i's answer to an acquire request (rm_vote_fn). */
static rm_vote acquire_vote(void *ud, const rm_slot *s, size_t i, const rm_reply *r, rm_err *e, bool *unknown)
{
    rm_acq_replies *a = ud;
    rm_vote v = a->form == RM_ACQ_SET ? set_vote(a, s, r, e) : script_vote(a, r, e);
    if (v != RM_VOTE_YES)
        return v;
    if (a->wait_replicas && !replicas_confirm(a, s, e)) {
        *unknown = true; /* granted on the master: to be undone */
        return RM_VOTE_ERROR;
    }
    if (restarted_recently(a->l, i)) {
        rm_votes_young(&a->v, i);
        return RM_VOTE_NO;
    }
    return RM_VOTE_YES;
}

void rm_acquire_count(rm_acq_replies *a, rm_call *call)
{
    rm_votes_init(&a->v);
    rm_tally_spec spec = {"acquire", a->l->name, (size_t)a->reply_index, false, acquire_vote, a};
    rm_tally_call(&a->v.t, call, &spec);
}

/* Decided when the votes settle it, or when the votes cast reach a
   majority and the servers still to answer all stall: a tie among the
   others (one yes, one no) waits for no server that answers nothing, as
   it would not for one that is down. */
static bool acquire_decided(rm_call *call, void *ud)
{
    rm_acq_replies *a = ud;
    rm_acquire_count(a, call);
    const rm_tally *t = &a->v.t;
    if (rm_quorum_decided(t->yes, t->no + t->failed, call->n, a->l->quorum))
        return true;
    return t->yes + t->no >= a->l->quorum && rm_call_stalled(call) == rm_call_running(call);
}

/* The inspection after a first failed SET NX: the holder's TTL (*ud, the
   least over the servers; 0 when the key went meanwhile). */
static rm_vote inspect_vote(void *ud, const rm_slot *s, size_t i, const rm_reply *r, rm_err *e, bool *unknown)
{
    (void)s;
    (void)i;
    (void)unknown;
    int64_t *ttl_ms = ud;
    if (r->type != RM_REPLY_ARRAY || r->elements != 3 || r->element[0]->type != RM_REPLY_INTEGER ||
        r->element[1]->type != RM_REPLY_INTEGER) {
        rm_fail(e, REDMUTEX_EPROTOCOL, "unexpected reply to the inspect script");
        return RM_VOTE_ERROR;
    }
    long long ttl = r->element[0]->integer == 0 ? 0 : r->element[1]->integer; /* 0: released meanwhile */
    if (ttl_ms && ttl >= 0 && (*ttl_ms < 0 || ttl < *ttl_ms))
        *ttl_ms = ttl;
    return RM_VOTE_YES;
}

/* The type check is decided once a wrong type on a majority is certain or ruled out. */
static bool inspect_decided(rm_call *call, void *ud)
{
    const char *name = ud;
    rm_tally t;
    rm_tally_init(&t);
    rm_tally_spec spec = {"acquire", name, 0, false, inspect_vote, NULL};
    rm_tally_call(&t, call, &spec);
    return rm_quorum_decided(t.yes + t.errors - t.wrongtype, t.wrongtype, call->n, call->c->quorum);
}

/*
 * Redlock fencing. Each server keeps its own counter and INCRs it whenever it
 * grants the lock, even in attempts that fail overall, so counters drift
 * apart and "the largest token among the voters" is not monotonic across
 * different majorities by itself. Before the token T is handed out, every
 * server is asked to raise its counter to T, and this must be confirmed by a
 * majority of the servers that granted the lock. Any later holder needs a
 * majority too, which shares a server with that one; on that server it can
 * only be granted after our key is gone, hence after the raise, so its INCR
 * yields more than T. One extra round trip, for fenced Redlock locks only.
 */
/* A ratchet confirmed by a server that granted the lock (ud: granted[]). */
static rm_vote ratchet_vote(void *ud, const rm_slot *s, size_t i, const rm_reply *r, rm_err *e, bool *unknown)
{
    (void)s;
    (void)unknown;
    const bool *granted = ud;
    if (r->type != RM_REPLY_INTEGER) {
        rm_fail(e, REDMUTEX_EPROTOCOL, "unexpected reply to the fencing ratchet");
        return RM_VOTE_ERROR;
    }
    return granted[i] ? RM_VOTE_YES : RM_VOTE_NONE;
}

static bool fenced_quorum(redmutex_lock *l, rm_call *call, const rm_votes *v, int64_t deadline)
{
    char token[24];
    snprintf(token, sizeof token, "%" PRId64, v->fence);
    char token_key[RM_KEY_MAX];
    const char *argv[] = {"1", rm_lock_token_key(l, token_key, sizeof token_key), token};
    rm_req req = {1, {{RM_SCRIPT_FENCE_RATCHET, 3, argv, NULL}}, l->name, NULL, NULL};
    bool granted[REDMUTEX_SERVERS_MAX];
    memcpy(granted, v->t.yes_at, sizeof granted);
    rm_call_run(call, &req, deadline, NULL, NULL);
    rm_tally t;
    rm_tally_init(&t);
    rm_tally_spec spec = {"raise the fencing token of", l->name, 0, false, ratchet_vote, granted};
    rm_tally_call(&t, call, &spec);
    return t.yes >= l->quorum;
}

/* Whether a live hold h (this handle's or another's) keeps its level on
   the servers: after a last release whose outcome is unknown the servers
   may or may not still have the field, and the owner acquires afresh. */
static bool hold_keeps_field(redmutex_client *c, rm_hold *h) RM_REQUIRES(c->mu)
{
    return rm_hold_state(c, h, rm_now_ns()) != REDMUTEX_STATE_LOST && !(h->release_id[0] && h->count <= 1);
}

/* What an attempt learns from the local holds before it starts. */
typedef struct attempt_local {
    bool nested;          /* the owner holds it already: the attempt adds a level */
    uint64_t shared_id;   /* ... through another handle's hold (its id), 0 through this one's */
    int64_t shared_fence; /* that hold's fencing token, which a nested level keeps */
} attempt_local;

/* Checks, before an attempt, the local record of owner's hold: nested when
   this owner holds the reentrant lock already - through this handle, or
   (may_share) through another handle of this client (one field on the
   servers: the attempt adds a level to it). RM_ATTEMPT_BUSY for a plain
   lock held through this handle; ELOST for a hold lost and not yet
   released. */
static int check_local_hold(rm_err *err, redmutex_lock *l, const char *owner, const char *value, bool may_share,
                            attempt_local *loc)
{
    redmutex_client *c = l->c;
    int rc = 0;
    *loc = (attempt_local){false, 0, 0};
    rm_client_lock(c);
    rm_hold *h = rm_hold_find(l, owner, rm_pid());
    rm_hold *shared = !h && may_share && rm_kind_of(l)->reentrant ? rm_hold_find_shared(l, value, rm_pid()) : NULL;
    if (shared && hold_keeps_field(c, shared))
        *loc = (attempt_local){true, shared->id, shared->fence};
    if (h) {
        redmutex_state st = rm_hold_state(c, h, rm_now_ns());
        if (st == REDMUTEX_STATE_LOST)
            rc = rm_fail(err, REDMUTEX_ELOST,
                         "lock '%s': this owner's earlier hold was lost; release it before acquiring again", l->name);
        else if (!rm_kind_of(l)->reentrant)
            rc = RM_ATTEMPT_BUSY; /* not reentrant: held through this handle means held */
        else
            loc->nested = hold_keeps_field(c, h);
    }
    rm_client_unlock(c);
    return rc;
}

/* A nested attempt through another handle's hold found the owner's field
   gone on enough servers: that hold is lost (unless a release or renewal of
   it is in flight, which settles it). */
static void shared_lost(redmutex_lock *l, const char *value, uint64_t id)
{
    redmutex_client *c = l->c;
    rm_client_lock(c);
    rm_hold *h = rm_hold_find_shared(l, value, rm_pid());
    if (h && h->id == id && !h->busy) {
        rm_watchdog_cancel(c, h);
        rm_hold_set_state(c, h, REDMUTEX_STATE_LOST);
    }
    rm_client_unlock(c);
}

/* A nested acquisition found this owner's field gone on enough servers that
   no majority can still hold it: the hold is lost, and is reported so. */
static int nested_lost(rm_err *err, redmutex_lock *l, const char *owner)
{
    redmutex_client *c = l->c;
    rm_client_lock(c);
    rm_hold *h = rm_hold_find(l, owner, rm_pid());
    if (h && !h->busy) {
        rm_watchdog_cancel(c, h);
        rm_hold_set_state(c, h, REDMUTEX_STATE_LOST);
    } else if (h) {
        rm_hold_set_state(c, h, REDMUTEX_STATE_LOST);
    }
    rm_client_unlock(c);
    return rm_fail(err, REDMUTEX_ELOST,
                   "lock '%s' was lost while held (its key or this owner's field is gone); nothing was re-created",
                   l->name);
}

/* The servers an undo goes to: those that granted the attempt or whose
   answer is unknown. False when there are none. */
static bool undo_targets(const rm_call *call, const rm_votes *v, bool dirty[REDMUTEX_SERVERS_MAX])
{
    bool any = false;
    for (size_t i = 0; i < call->n; i++) {
        dirty[i] = v->t.yes_at[i] || v->t.unknown_at[i];
        any = any || dirty[i];
    }
    return any;
}

/* An undo is waited for until every server still to answer stalls
   (rm_server_stalls): behind the attempt it undoes, such a server answers
   no sooner than its stall ends. There the undo is sent, not waited for,
   and is noted as unsettled (unsettled.h) by the caller. A server that is
   merely slower is waited for: an answered undo needs no copy later. */
static bool undo_decided(rm_call *call, void *ud)
{
    (void)ud;
    return rm_call_stalled(call) == rm_call_running(call);
}

/* Sends an undo to the servers in dirty[], behind the attempt on each, and
   waits for it no longer than the attempt's deadline (and not for servers
   that stall). */
static void undo_send(rm_call *call, const rm_req *req, const bool *dirty, int64_t deadline)
{
    call->only = dirty;
    call->strict_deadline = true;
    call->must_send = true;
    rm_call_run(call, req, deadline, undo_decided, NULL);
    call->only = NULL;
}

/* Takes back whatever the attempt may have left on servers that granted it
   or whose answer is unknown. The release travels behind the acquisition on
   each server (per-server order), and is not waited for beyond the attempt's
   deadline: a slow server still gets it, after the acquisition it undoes. */
static void undo_attempt(redmutex_lock *l, rm_call *call, const char *value, const rm_votes *v, int64_t deadline)
{
    bool dirty[REDMUTEX_SERVERS_MAX] = {false};
    char latch_id[33], latch_key[RM_KEY_MAX];
    if (!undo_targets(call, v, dirty) || rm_new_token(NULL, latch_id) != 0)
        return;
    rm_latch_key(l, latch_id, latch_key);
    rm_req rel;
    rm_kargs k;
    rm_release_request(l, value, latch_key, rm_lock_lease_ms(l), &rel, &k);
    undo_send(call, &rel, dirty, deadline);
    if (!rm_release_note_unsettled(l, call, dirty, value, &rel.cmds[0], latch_key))
        rm_release_forget_latch(call, latch_key);
}

/* Takes back the level a failed nested acquisition may have added, where it
   was granted or its answer is unknown: the undo runs only where the
   acquisition's undo latch says it added one (lua.h, RM_LUA_NEST_GUARD), so
   a server the request never reached keeps the owner's outer hold. Its
   latches are left to expire: they also turn away a late copy. */
static void undo_nested(redmutex_lock *l, rm_call *call, const char *value, const rm_votes *v, const char *latch_key,
                        int64_t deadline)
{
    bool dirty[REDMUTEX_SERVERS_MAX] = {false};
    if (!undo_targets(call, v, dirty))
        return;
    rm_kargs k;
    rm_req req = {1, {rm_kind_of(l)->nest_undo(l, value, latch_key, rm_latch_ms(l->c), &k)}, l->name, NULL, NULL};
    undo_send(call, &req, dirty, deadline);
}

/* After a first SET NX found the key taken: the holder's TTL, and whether the
   key is a lock of this kind at all, decide how to wait. */
static int inspect_after_set(rm_err *err, redmutex_lock *l, rm_call *call, int64_t deadline, rm_attempt_info *info)
{
    redmutex_client *c = l->c;
    rm_kargs k;
    rm_req ireq = {1, {rm_kind_of(l)->inspect(l, "", &k)}, NULL, l->name, NULL};
    rm_call_run(call, &ireq, deadline, c->n > 1 ? inspect_decided : NULL, l->name);
    rm_tally t;
    rm_tally_init(&t);
    rm_tally_spec spec = {"acquire", l->name, 0, false, inspect_vote, &info->ttl_ms};
    rm_tally_call(&t, call, &spec);
    /* Enough servers holding another kind of key that no majority can ever
       be had: an error, not a wait. */
    if (t.wrongtype > c->n - c->quorum)
        return rm_err_copy(err, &t.error);
    return RM_ATTEMPT_BUSY;
}

/* An attempt's request and the storage of its arguments. */
typedef struct attempt_req {
    rm_req req;
    rm_kargs ac;
    rm_unsettled_cmds unsettled;
    const char *wait_argv[3];
    char tbuf[24];
    char nest_latch[RM_KEY_MAX]; /* a nested acquisition's undo latch, "" for a first one */
} attempt_req;

/* Builds the attempt's request into ar and says in a where its replies are. */
static void attempt_request(redmutex_lock *l, const char *value, bool retry, const rm_attempt_info *info,
                            attempt_req *ar, rm_acq_replies *a)
{
    redmutex_client *c = l->c;
    rm_req *req = &ar->req;
    bool nested = ar->nest_latch[0] != '\0';
    req->order_name = l->name;
    /* Releases of this name whose outcome is unknown somewhere go first,
       again, in the same request (see unsettled.h). */
    if (!nested)
        rm_unsettled_take(c, l->name, value, &ar->unsettled);
    for (size_t k = 0; k < ar->unsettled.n; k++) {
        rm_unsettled_copy *u = &ar->unsettled.copy[k];
        req->cmds[req->ncmds++] = (rm_cmd){u->script, u->argc, u->argv, u->lens};
        req->cmds[req->ncmds++] = (rm_cmd){-1, 6, u->set_argv, NULL};
    }
    a->reply_index = (int)req->ncmds;
    int mode = !info->waiting ? RM_ACQ_TRY : retry ? RM_ACQ_RETRY : RM_ACQ_FIRST;
    req->cmds[req->ncmds++] =
        rm_acquire_command(l, value, nested ? ar->nest_latch : NULL, mode, info->nonce, &ar->ac, &a->form);
    if (a->form == RM_ACQ_SET && retry) {
        /* While waiting, learn the holder's TTL in the same round trip
           (the first failure checked the key's type with INSPECT). */
        a->pttl_index = (int)req->ncmds;
        req->cmds[req->ncmds] = rm_kind_of(l)->ttl_probe(&req->cmds[req->ncmds - 1]);
        req->ncmds++;
    }
    if (a->wait_replicas) {
        a->wait_index = (int)req->ncmds;
        rm_req_add_wait(req, c, ar->tbuf, ar->wait_argv);
    }
}

/* The attempt won (its call ended): a fair Redlock waiter that won a
   majority leaves the queues of the others. */
static void leave_other_queues(redmutex_lock *l, const char *value, const rm_votes *v, const rm_attempt_info *info)
{
    redmutex_client *c = l->c;
    if (!info->waiting || c->n == 1 || !rm_kind_of(l)->server_queue || !info->queued)
        return;
    bool others[REDMUTEX_SERVERS_MAX];
    for (size_t i = 0; i < c->n; i++)
        others[i] = !v->t.yes_at[i];
    rm_fair_leave(l, value, others, false); /* the field is this new hold's: nothing to give back */
}

/* What the votes of an attempt decide, when it did not win: RM_ATTEMPT_BUSY (info says when to retry) or an error. */
static int attempt_verdict(rm_err *err, redmutex_lock *l, const char *owner, rm_call *call, const rm_votes *v,
                           rm_acquire_verdict verdict, rm_attempt_info *info)
{
    switch (verdict) {
    case RM_VERDICT_NESTED_LOST:
        return nested_lost(err, l, owner);
    case RM_VERDICT_TOO_SLOW:
        info->ttl_ms = 0; /* too slow to count: undone, then tried again at once */
        info->why = "was granted by a majority, but the acquisition took longer than its lease and was undone";
        return RM_ATTEMPT_BUSY;
    case RM_VERDICT_REPLICAS:
    case RM_VERDICT_ERROR:
        return rm_err_copy(err, &v->t.error);
    case RM_VERDICT_BUSY:
        info->ttl_ms = v->ttl;
        info->split = v->t.yes > 0;
        info->behind = v->behind > 0 ? v->behind : 0;
        if (v->young > 0 && v->t.yes + v->young >= l->quorum)
            info->why = "is free, but servers that restarted less than a lease ago cannot grant it yet";
        return RM_ATTEMPT_BUSY;
    case RM_VERDICT_UNREACHABLE:
        return rm_tally_fail(err, &v->t, call, "acquire", l->name); /* no majority can answer */
    default:
        /* A minority is down or slow and the rest did not settle it: keep
           waiting while a majority can still answer (Redlock's purpose). */
        info->split = v->t.yes > 0;
        info->why = v->t.errors
                        ? "was not granted by a majority (some servers answered with an error, others not in time)"
                        : "was not granted by a majority in time (some servers are slow or down)";
        return RM_ATTEMPT_BUSY;
    }
}

/* Builds an attempt's request and runs it on every server. 0, or an error
   code (nothing was sent, or the call failed for want of memory). */
static int attempt_send(rm_err *err, redmutex_lock *l, const char *value, bool retry, const rm_attempt_info *info,
                        attempt_req *ar, rm_acq_replies *a, rm_call *call, int64_t *deadline)
{
    redmutex_client *c = l->c;
    rm_acq_replies_init(a, l, RM_ACQ_SCRIPT, 0, rm_lock_lease_ms(l));
    a->wait_replicas = c->opts.min_replicas > 0;
    attempt_request(l, value, retry, info, ar, a);
    if (rm_call_begin(err, call, c) != 0) {
        rm_unsettled_cmds_free(&ar->unsettled);
        return REDMUTEX_ENOMEM;
    }
    call->order_owner = value; /* its undo, too, changes this owner's hold */
    *deadline = rm_command_deadline(c, a->wait_replicas);
    int rc = rm_call_run(call, &ar->req, *deadline, c->n > 1 ? acquire_decided : NULL, a);
    if (rc == 0)
        rm_unsettled_done(c, &ar->unsettled, call, 0);
    rm_unsettled_cmds_free(&ar->unsettled);
    if (rc) {
        rm_call_end(call);
        return rm_fail(err, rc, "acquire lock '%s': out of memory", l->name);
    }
    return 0;
}

/* The votes of an attempt, and the verdict on them (Redlock's fencing
   ratchet first: a nested level keeps its outer token, nothing to raise). */
static rm_acquire_verdict attempt_decide(redmutex_lock *l, rm_call *call, rm_votes *v, bool nested, int64_t started,
                                         int64_t deadline, bool waiting)
{
    redmutex_client *c = l->c;
    if ((l->opts.flags & REDMUTEX_LOCK_FENCING) && c->n > 1 && !nested && v->t.yes >= l->quorum &&
        !fenced_quorum(l, call, v, deadline))
        v->t.yes = 0; /* the token could not be made safe: the attempt fails and is undone */
    /* Servers that cannot answer at all: transport failures and error
       replies, not those the early decision merely did not wait for. A
       server that stalls will answer when its stall ends: a wait goes on
       for it (with its pauses) rather than end at once with an error,
       which a caller would only retry at once. */
    size_t broken = rm_call_failed(call) + v->t.errors - (waiting ? rm_call_skipped(call) : 0);
    int64_t left = rm_validity_left_ns(rm_lock_lease_ms(l), rm_now_ns() - started);
    return rm_acquire_decide(v, c->n, l->quorum, left, nested, broken);
}

static int attempt_run(rm_err *err, redmutex_lock *l, const char *owner, const char *value, bool retry,
                       rm_attempt_info *info, bool may_share)
{
    redmutex_client *c = l->c;
    info->ttl_ms = -1;
    info->split = false;
    info->behind = 0;
    info->why = "is held by another owner";
    attempt_local loc;
    int rc = check_local_hold(err, l, owner, value, may_share, &loc);
    if (rc == RM_ATTEMPT_BUSY)
        info->why = "is held through this handle already (a plain lock is not reentrant)";
    if (rc)
        return rc;
    /* A nested attempt never queues (the owner holds the lock); any other
       waiting attempt may have joined a fair lock's queue. */
    info->queued = info->queued || (!loc.nested && info->waiting);
    attempt_req ar;
    memset(&ar.req, 0, sizeof ar.req);
    memset(&ar.unsettled, 0, sizeof ar.unsettled);
    ar.nest_latch[0] = '\0';
    char latch_id[33];
    if (loc.nested) {
        if ((rc = rm_new_token(err, latch_id)) != 0)
            return rc;
        rm_latch_key(l, latch_id, ar.nest_latch);
    }
    rm_acq_replies a;
    rm_call call;
    int64_t deadline;
    if ((rc = attempt_send(err, l, value, retry, info, &ar, &a, &call, &deadline)) != 0)
        return rc;
    int64_t started = call.started_ns; /* the ratchet's round trip below does not restart it */
    rm_votes *v = &a.v;
    rm_acquire_count(&a, &call);
    rm_acquire_verdict verdict = attempt_decide(l, &call, v, loc.nested, started, deadline, info->waiting);
    if (verdict == RM_VERDICT_NESTED_LOST && loc.shared_id) {
        /* The other handle's hold is gone: this handle acquires afresh. */
        shared_lost(l, value, loc.shared_id);
        undo_nested(l, &call, value, v, ar.nest_latch, deadline);
        rm_call_end(&call);
        return attempt_run(err, l, owner, value, retry, info, false);
    }
    if (verdict == RM_VERDICT_WON) {
        if (loc.shared_id)
            v->fence = loc.shared_fence; /* a new hold of this handle, one more level of the owner's */
        rm_client_lock(c);
        rc = rm_hold_record(err, l, owner, value, started, v);
        rm_client_unlock(c);
        if (rc == 0) {
            if (loc.nested) /* no undo will come: its latches go with the next request */
                rm_release_forget_latch(&call, ar.nest_latch);
            rm_call_end(&call);
            leave_other_queues(l, value, v, info);
            return RM_ATTEMPT_WON;
        }
    } else {
        rc = attempt_verdict(err, l, owner, &call, v, verdict, info);
    }
    if (loc.nested)
        undo_nested(l, &call, value, v, ar.nest_latch, deadline);
    else
        undo_attempt(l, &call, value, v, deadline);
    if (rc == RM_ATTEMPT_BUSY && a.form == RM_ACQ_SET && !retry)
        rc = inspect_after_set(err, l, &call, deadline, info);
    rm_call_end(&call);
    return rc;
}

int rm_attempt(rm_err *err, redmutex_lock *l, const char *owner, const char *value, bool retry, rm_attempt_info *info)
{
    return attempt_run(err, l, owner, value, retry, info, true);
}

void rm_fair_stop_waiting(redmutex_lock *l, const char *value)
{
    rm_fair_leave(l, value, NULL, !rm_hold_value_live(l, value));
}
