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
#include "watchdog.h"

#include <inttypes.h>
#include <stdio.h>

/* The servers' answers to an extension. */
typedef struct extend_tally {
    int64_t ttls[REDMUTEX_SERVERS_MAX]; /* new TTLs of the servers that extended it */
    size_t ok, notowner;
    int err;
    char err_msg[512];
} extend_tally;

static int check_extend(redmutex_lock *l, int64_t ms, redmutex_extend_mode mode)
{
    int rc = rm_lock_check_handle(l, "redmutex_lock_extend");
    if (rc)
        return rc;
    if (ms <= 0 || ms > REDMUTEX_TIME_MAX_MS)
        return rm_fail(REDMUTEX_EINVAL, "lock '%s': extension of %" PRId64 " ms is invalid (1..%" PRId64 ")", l->name,
                       ms, (int64_t)REDMUTEX_TIME_MAX_MS);
    if (mode != REDMUTEX_EXTEND_ADD && mode != REDMUTEX_EXTEND_REPLACE)
        return rm_fail(REDMUTEX_EINVAL, "lock '%s': unknown extend mode %d", l->name, (int)mode);
    return 0;
}

/* Takes the local hold of owner_key (*hold_id, 0 when none) and the value to
   extend. 0 or an error code. */
static int extend_claim(redmutex_lock *l, const char *owner, const char *owner_key, uint64_t *hold_id,
                        char value[RM_VALUE_MAX + 1])
{
    redmutex_client *c = l->c;
    pid_t pid = rm_pid();
    int rc = 0;
    rm_client_lock(c);
    rm_hold *h = rm_hold_find(l, owner_key, pid);
    if (!h && rm_hold_find_foreign(l, owner_key, pid))
        rc = rm_fail(REDMUTEX_EFORKED, "lock '%s' was acquired by the parent process; a forked child cannot extend it",
                     l->name);
    else if (!h && !owner && rm_kind_of(l)->anonymous)
        rc = rm_fail(REDMUTEX_ENOTOWNER, "lock '%s' is not held through this handle", l->name);
    else if (h && !(h = rm_hold_claim(c, l, h)) && !owner && rm_kind_of(l)->anonymous)
        rc = rm_fail(REDMUTEX_ENOTOWNER, "lock '%s' was released by another thread meanwhile", l->name);
    else if (h && rm_hold_state(c, h, rm_now_ns()) == REDMUTEX_STATE_LOST)
        rc = rm_fail(REDMUTEX_ELOST, "lock '%s' was lost; it can no longer be extended", l->name);
    else if (h && l->opts.max_extensions && h->extensions >= l->opts.max_extensions)
        rc = rm_fail(REDMUTEX_ELIMIT, "lock '%s' reached its cap of %" PRId64 " extensions", l->name,
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

/* Server i's answer: a new TTL (> 0) confirmed by the replicas, 0 not held, or an error. */
static void extend_vote(redmutex_lock *l, const rm_slot *s, size_t i, bool wait_replicas, extend_tally *t)
{
    const redmutex_client *c = l->c;
    const rm_reply *r = s->err ? NULL : s->replies[0];
    if (!r)
        return;
    if (r->type == RM_REPLY_ERROR) {
        int code = rm_reply_error(r, "extend", l->name, rm_lock_server(l, i));
        if (!t->err) {
            t->err = code;
            snprintf(t->err_msg, sizeof t->err_msg, "%s", redmutex_last_error());
        }
    } else if (r->type == RM_REPLY_INTEGER && r->integer > 0) {
        const rm_reply *w = wait_replicas ? s->replies[1] : NULL;
        if (wait_replicas && (!w || w->type != RM_REPLY_INTEGER || w->integer < c->opts.min_replicas)) {
            if (!t->err) {
                t->err = REDMUTEX_EREPLICAS;
                snprintf(t->err_msg, sizeof t->err_msg,
                         "extend lock '%s' on %s: fewer than %" PRId64 " replicas acknowledged", l->name,
                         rm_lock_server(l, i), c->opts.min_replicas);
            }
            return;
        }
        t->ttls[t->ok++] = r->integer;
    } else if (r->type == RM_REPLY_INTEGER) {
        t->notowner++;
    } else if (!t->err) {
        t->err = rm_fail(REDMUTEX_EPROTOCOL, "%s: unexpected reply to extend", rm_lock_server(l, i));
        snprintf(t->err_msg, sizeof t->err_msg, "%s", redmutex_last_error());
    }
}

/* A majority extended it to ttl_ms (from started_ns): the hold's new validity
   and its place in the watchdog's schedule. Caller holds c->mu and owns h. */
static int extended(redmutex_client *c, rm_hold *h, int64_t started_ns, int64_t ttl_ms)
{
    h->validity_end_ns = rm_validity_end_ns(started_ns, ttl_ms);
    h->extensions++;
    if (h->state == REDMUTEX_STATE_RENEWAL_FAILING)
        rm_hold_set_state(c, h, REDMUTEX_STATE_HELD); /* reported, as a recovered renewal is */
    if (!h->watchdog) {
        rm_watchdog_cancel(c, h);
        return rm_watchdog_schedule(c, h);
    }
    /* A shorter TTL than the time to the next renewal: renew sooner. */
    rm_watchdog_renew_by(c, h, rm_renew_due_ns(started_ns, ttl_ms));
    return 0;
}

/* Updates the local hold by the answers: the result of the extension. */
static int extend_settle(redmutex_lock *l, uint64_t hold_id, const char *value, rm_call *call, extend_tally *t)
{
    redmutex_client *c = l->c;
    size_t q = c->quorum;
    int rc = 0;
    rm_client_lock(c);
    rm_hold *h = hold_id ? rm_hold_find_by_id(l, hold_id) : NULL; /* ours: busy */
    if (t->ok >= q) {
        if (h) /* the q-th largest new TTL is how long a majority holds it */
            rc = extended(c, h, call->started_ns, rm_qth_largest(t->ttls, t->ok, q, false));
    } else if (t->notowner > c->n - q) {
        if (h) {
            rm_watchdog_cancel(c, h); /* may wait; h stays ours (busy) */
            rm_hold_set_state(c, h, REDMUTEX_STATE_LOST);
            rc = rm_fail(REDMUTEX_ELOST, "lock '%s' was lost: its lease ran out or another owner took it", l->name);
        } else {
            rc = rm_fail(REDMUTEX_ENOTOWNER, "lock '%s' is not held by owner '%s'", l->name, value);
        }
    } else if (t->err && (t->err == REDMUTEX_EWRONGTYPE || t->err == REDMUTEX_EREPLICAS || t->ok + t->notowner == 0)) {
        rc = rm_fail(t->err, "%s", t->err_msg);
    } else {
        rc = rm_call_fail(call, "extend", l->name);
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

int redmutex_lock_extend(redmutex_lock *l, const char *owner, int64_t ms, redmutex_extend_mode mode)
{
    int rc = check_extend(l, ms, mode);
    redmutex_client *c = l ? l->c : NULL;
    char owner_key[RM_VALUE_MAX + 1], value[RM_VALUE_MAX + 1];
    uint64_t hold_id = 0;
    if (rc == 0)
        rc = rm_lock_resolve_owner(l, owner, owner_key);
    if (rc == 0)
        rc = extend_claim(l, owner, owner_key, &hold_id, value);
    if (rc)
        return rc;

    char nbuf[24], tbuf[24];
    const char *wait_argv[3];
    rm_req req = {0};
    req.order_name = l->name;
    rm_kargs kargs;
    req.cmds[req.ncmds++] = rm_kind_of(l)->extend(l, value, ms, mode == REDMUTEX_EXTEND_REPLACE, &kargs);
    bool wait_replicas = c->opts.min_replicas > 0;
    if (wait_replicas)
        rm_req_add_wait(&req, c, nbuf, tbuf, wait_argv);
    rm_call call;
    if ((rc = rm_call_begin(&call, c)) != 0) {
        extend_unclaim(l, hold_id);
        return rc;
    }
    rm_call_run(&call, &req, rm_command_deadline(c, wait_replicas), NULL, NULL);
    extend_tally t = {.ok = 0};
    for (size_t i = 0; i < call.n; i++)
        extend_vote(l, &call.slots[i], i, wait_replicas, &t);
    rc = extend_settle(l, hold_id, value, &call, &t);
    rm_call_end(&call);
    return rc;
}
