/*
 * redmutex_lock_extend: a new TTL for a hold on every server that has it;
 * the hold is valid as long as a majority holds it (the q-th largest TTL).
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
#include "tally.h"
#include "watchdog.h"

#include <inttypes.h>
#include <stdio.h>

/* The servers' answers to an extension: yes extended, no not the owner's. */
typedef struct extend_tally {
    rm_tally t;
    redmutex_lock *l;
    bool wait_replicas;
    int64_t ttls[REDMUTEX_SERVERS_MAX]; /* new TTLs of the servers that extended it */
} extend_tally;

static int check_extend(rm_err *err, redmutex_lock *l, int64_t ms, redmutex_extend_mode mode)
{
    int rc = rm_lock_check_handle(err, l, "redmutex_lock_extend");
    if (rc)
        return rc;
    if (ms <= 0 || ms > REDMUTEX_TIME_MAX_MS)
        return rm_fail(err, REDMUTEX_EINVAL, "lock '%s': extension of %" PRId64 " ms is invalid (1..%" PRId64 ")",
                       l->name, ms, (int64_t)REDMUTEX_TIME_MAX_MS);
    if (mode != REDMUTEX_EXTEND_ADD && mode != REDMUTEX_EXTEND_REPLACE)
        return rm_fail(err, REDMUTEX_EINVAL, "lock '%s': unknown extend mode %d", l->name, (int)mode);
    return 0;
}

/* Takes the local hold of owner_key (*hold_id, 0 when none) and the value to
   extend. 0 or an error code. */
static int extend_claim(rm_err *err, redmutex_lock *l, const char *owner, const char *owner_key, uint64_t *hold_id,
                        char value[RM_VALUE_MAX + 1])
{
    redmutex_client *c = l->c;
    pid_t pid = rm_pid();
    int rc = 0;
    rm_client_lock(c);
    rm_hold *h = rm_hold_find(l, owner_key, pid);
    if (!h && rm_hold_find_foreign(l, owner_key, pid))
        rc = rm_fail(err, REDMUTEX_EFORKED,
                     "lock '%s' was acquired by the parent process; a forked child cannot extend it", l->name);
    else if (!h && !owner && rm_kind_of(l)->anonymous)
        rc = rm_fail(err, REDMUTEX_ENOTOWNER, "lock '%s' is not held through this handle", l->name);
    else if (h && !(h = rm_hold_claim(c, l, h)) && !owner && rm_kind_of(l)->anonymous)
        rc = rm_fail(err, REDMUTEX_ENOTOWNER, "lock '%s' was released by another thread meanwhile", l->name);
    else if (h && rm_hold_state(c, h, rm_now_ns()) == REDMUTEX_STATE_LOST)
        rc = rm_fail(err, REDMUTEX_ELOST, "lock '%s' was lost; it can no longer be extended", l->name);
    else if (h && l->opts.max_extensions && h->extensions >= l->opts.max_extensions)
        rc = rm_fail(err, REDMUTEX_ELIMIT, "lock '%s' reached its cap of %" PRId64 " extensions", l->name,
                     l->opts.max_extensions);
    if (rc != 0 && h)
        rm_hold_unbusy(c, h);
    if (rc == 0 && h) {
        *hold_id = h->id;
        snprintf(value, RM_VALUE_MAX + 1, "%s", h->value);
    } else if (rc == 0) {
        rm_lock_owner_field(l, owner_key, value);
    }
    rm_client_unlock(c);
    return rc;
}

/* Server i's answer (rm_vote_fn): a new TTL (> 0) confirmed by the replicas, 0 not held. */
static rm_vote extend_vote(void *ud, const rm_slot *s, size_t i, const rm_reply *r, rm_err *e, bool *unknown)
{
    (void)i;
    extend_tally *t = ud;
    const rm_reply *w = t->wait_replicas ? s->replies[1] : NULL;
    if (r->type != RM_REPLY_INTEGER) {
        rm_fail(e, REDMUTEX_EPROTOCOL, "unexpected reply to extend");
        return RM_VOTE_ERROR;
    }
    if (r->integer <= 0)
        return RM_VOTE_NO;
    *unknown = true; /* extended on the master */
    if (w && w->type == RM_REPLY_ERROR) {
        rm_reply_error(e, w, "WAIT after extending", NULL, NULL);
        return RM_VOTE_ERROR;
    }
    if (t->wait_replicas && (!w || w->type != RM_REPLY_INTEGER || w->integer < s->wait_need)) {
        rm_fail(e, REDMUTEX_EREPLICAS, "fewer than %d replicas acknowledged", s->wait_need);
        return RM_VOTE_ERROR;
    }
    t->ttls[t->t.yes] = r->integer; /* the tally counts the yes after this */
    return RM_VOTE_YES;
}

/* A majority extended it to ttl_ms (from started_ns): the hold's new validity
   and its place in the watchdog's schedule. Caller holds c->mu and owns h. */
static int extended(rm_err *err, redmutex_client *c, rm_hold *h, int64_t started_ns, int64_t ttl_ms) RM_REQUIRES(c->mu)
{
    h->validity_end_ns = rm_validity_end_ns(started_ns, ttl_ms);
    h->extensions++;
    if (h->state == REDMUTEX_STATE_RENEWAL_FAILING)
        rm_hold_set_state(c, h, REDMUTEX_STATE_HELD); /* reported, as a recovered renewal is */
    if (!h->watchdog) {
        rm_watchdog_cancel(c, h);
        return rm_watchdog_schedule(err, c, h);
    }
    /* A shorter TTL than the time to the next renewal: renew sooner. */
    rm_watchdog_renew_by(c, h, rm_renew_due_ns(started_ns, ttl_ms));
    return 0;
}

/* Updates the local hold by the answers: the result of the extension. */
static int extend_settle(rm_err *err, redmutex_lock *l, uint64_t hold_id, const char *value, rm_call *call,
                         extend_tally *t)
{
    redmutex_client *c = l->c;
    size_t q = l->quorum;
    int rc = 0;
    rm_client_lock(c);
    rm_hold *h = hold_id ? rm_hold_find_by_id(l, hold_id) : NULL; /* ours: busy */
    if (t->t.yes >= q) {
        if (h) /* the q-th largest new TTL is how long a majority holds it */
            rc = extended(err, c, h, call->started_ns, rm_qth_largest(t->ttls, t->t.yes, q, false));
    } else if (t->t.no > c->n - q) {
        if (h) {
            rm_watchdog_cancel(c, h); /* may wait; h stays ours (busy) */
            rm_hold_set_state(c, h, REDMUTEX_STATE_LOST);
            rc =
                rm_fail(err, REDMUTEX_ELOST, "lock '%s' was lost: its lease ran out or another owner took it", l->name);
        } else {
            rc = rm_fail(err, REDMUTEX_ENOTOWNER, "lock '%s' is not held by owner '%s'", l->name, value);
        }
    } else if (t->t.error.code == REDMUTEX_EREPLICAS) {
        rc = rm_err_copy(err, &t->t.error);
    } else {
        rc = rm_tally_fail(err, &t->t, call, "extend", l->name);
    }
    if (h)
        rm_hold_unbusy(c, h);
    rm_client_unlock(c);
    return rc;
}

/* Gives the claimed hold back untouched (the call could not be made). */
static void extend_unclaim(redmutex_lock *l, uint64_t hold_id)
{
    rm_client_lock(l->c);
    rm_hold *h = hold_id ? rm_hold_find_by_id(l, hold_id) : NULL;
    if (h)
        rm_hold_unbusy(l->c, h);
    rm_client_unlock(l->c);
}

int rm_lock_extend(rm_err *err, redmutex_lock *l, const char *owner, int64_t ms, redmutex_extend_mode mode)
{
    int rc = check_extend(err, l, ms, mode);
    redmutex_client *c = l ? l->c : NULL;
    char owner_key[RM_VALUE_MAX + 1], value[RM_VALUE_MAX + 1];
    uint64_t hold_id = 0;
    if (rc == 0)
        rc = rm_lock_resolve_owner(err, l, owner, owner_key);
    if (rc == 0)
        rc = extend_claim(err, l, owner, owner_key, &hold_id, value);
    if (rc)
        return rc;

    char tbuf[24];
    const char *wait_argv[3];
    rm_req req = {0};
    req.order_name = l->name;
    rm_kargs kargs;
    req.cmds[req.ncmds++] = rm_kind_of(l)->extend(l, value, ms, mode == REDMUTEX_EXTEND_REPLACE, &kargs);
    bool wait_replicas = c->opts.min_replicas > 0;
    if (wait_replicas)
        rm_req_add_wait(&req, c, tbuf, wait_argv);
    rm_call call;
    if ((rc = rm_call_begin(err, &call, c)) != 0) {
        extend_unclaim(l, hold_id);
        return rc;
    }
    rm_call_run(&call, &req, rm_command_deadline(c, wait_replicas), c->n > 1 ? rm_call_only_stalls_left : NULL, NULL);
    extend_tally t = {.l = l, .wait_replicas = wait_replicas};
    rm_tally_init(&t.t);
    rm_tally_spec spec = {"extend", l->name, 0, false, extend_vote, &t};
    rm_tally_call(&t.t, &call, &spec);
    rc = extend_settle(err, l, hold_id, value, &call, &t);
    rm_call_end(&call);
    return rc;
}

int redmutex_lock_extend(redmutex_lock *l, const char *owner, int64_t ms, redmutex_extend_mode mode)
{
    rm_err err;
    rm_err_reset(&err);
    return rm_publish(&err, rm_lock_extend(&err, l, owner, ms, mode));
}
