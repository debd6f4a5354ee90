/*
 * Queries: what the servers say of a lock (is it locked, by whom how many
 * times, for how long), force release, and what this process knows of its
 * own holds (state, validity, fencing token).
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

#include <stdio.h>
#include <string.h>

typedef struct inspect_result {
    size_t exists;
    int64_t ttl[REDMUTEX_SERVERS_MAX];   /* per answering server; -2 absent, -1 no TTL */
    int64_t count[REDMUTEX_SERVERS_MAX];
    rm_tally t;                          /* yes: the key exists; no: it does not */
} inspect_result;

/* Reads server i's answer to the inspect script (rm_vote_fn, ud: the inspect_result). */
static rm_vote inspect_vote(void *ud, const rm_slot *s, size_t i, const rm_reply *r, rm_err *e, bool *unknown)
{
    (void)i;
    (void)s;
    (void)unknown;
    inspect_result *res = ud;
    if (r->type != RM_REPLY_ARRAY || r->elements != 3 || r->element[0]->type != RM_REPLY_INTEGER ||
        r->element[1]->type != RM_REPLY_INTEGER || r->element[2]->type != RM_REPLY_INTEGER) {
        rm_fail(e, REDMUTEX_EPROTOCOL, "unexpected reply to the inspect script");
        return RM_VOTE_ERROR;
    }
    size_t k = res->t.yes + res->t.no; /* answers so far */
    res->ttl[k] = r->element[1]->integer;
    res->count[k] = r->element[2]->integer;
    return r->element[0]->integer == 1 ? RM_VOTE_YES : RM_VOTE_NO;
}

/* How many servers answered the inspection. */
static size_t answered(const inspect_result *res) { return res->t.yes + res->t.no; }

static int inspect(rm_err *err, redmutex_lock *l, const char *value, inspect_result *res)
{
    redmutex_client *c = l->c;
    rm_kargs kargs;
    rm_req req = {1, {rm_kind_of(l)->inspect(l, value, &kargs)}, NULL, l->name, NULL};
    rm_call call;
    int rc = rm_call_begin(err, &call, c);
    if (rc)
        return rc;
    rm_call_run(&call, &req, rm_command_deadline(c, false), NULL, NULL);
    memset(res, 0, sizeof *res);
    rm_tally_init(&res->t);
    rm_tally_spec spec = {"inspect", l->name, 0, false, inspect_vote, res};
    rm_tally_call(&res->t, &call, &spec);
    res->exists = res->t.yes;
    if (res->t.error.code == REDMUTEX_EWRONGTYPE || answered(res) < c->quorum)
        rc = rm_tally_fail(err, &res->t, &call, "inspect", l->name);
    rm_call_end(&call);
    return rc;
}

/* The value an owner is known by on the servers ("" when this handle holds nothing for it). */
static int owner_value(rm_err *err, redmutex_lock *l, const char *owner, char value[RM_VALUE_MAX + 1])
{
    char owner_key[RM_VALUE_MAX + 1];
    int rc = rm_lock_resolve_owner(err, l, owner, owner_key);
    if (rc)
        return rc;
    if (rm_kind_of(l)->anonymous && !owner) {
        rm_client_lock(l->c);
        rm_hold *h = rm_hold_find(l, "", rm_pid());
        snprintf(value, RM_VALUE_MAX + 1, "%s", h ? h->value : "");
        rm_client_unlock(l->c);
    } else {
        rm_lock_owner_field(l, owner_key, value);
    }
    return 0;
}

/* Checks the handle and the out pointer of public query fn, then inspects the lock. */
static int inspect_lock(rm_err *err, redmutex_lock *l, const void *out, const char *fn, inspect_result *res)
{
    int rc = rm_lock_check_handle(err, l, fn);
    if (rc == 0 && !out)
        rc = rm_fail(err, REDMUTEX_EINVAL, "%s: out is NULL", fn);
    return rc ? rc : inspect(err, l, "", res);
}

int redmutex_lock_is_locked(int *out, redmutex_lock *l)
{
    rm_err e_, *err = rm_err_reset(&e_);
    inspect_result res;
    int rc = inspect_lock(err, l, out, "redmutex_lock_is_locked", &res);
    if (rc == 0)
        *out = res.exists >= l->c->quorum;
    return rm_publish(err, rc);
}

static int hold_count(rm_err *err, int64_t *out, redmutex_lock *l, const char *owner);

int redmutex_lock_is_owned(int *out, redmutex_lock *l, const char *owner)
{
    rm_err e_, *err = rm_err_reset(&e_);
    int64_t count;
    int rc = hold_count(err, &count, l, owner);
    if (rc == 0 && !out)
        rc = rm_fail(err, REDMUTEX_EINVAL, "redmutex_lock_is_owned: out is NULL");
    if (rc == 0)
        *out = count > 0;
    return rm_publish(err, rc);
}

/* redmutex_lock_hold_count, with the call's error. */
static int hold_count(rm_err *err, int64_t *out, redmutex_lock *l, const char *owner)
{
    int rc = rm_lock_check_handle(err, l, "redmutex_lock_hold_count");
    if (rc)
        return rc;
    if (!out)
        return rm_fail(err, REDMUTEX_EINVAL, "redmutex_lock_hold_count: out is NULL");
    char value[RM_VALUE_MAX + 1];
    if ((rc = owner_value(err, l, owner, value)))
        return rc;
    if (!value[0]) {
        *out = 0;
        return 0;
    }
    inspect_result res;
    if ((rc = inspect(err, l, value, &res)))
        return rc;
    *out = rm_qth_largest(res.count, answered(&res), l->c->quorum, false);
    return 0;
}

int redmutex_lock_hold_count(int64_t *out, redmutex_lock *l, const char *owner)
{
    rm_err e_, *err = rm_err_reset(&e_);
    return rm_publish(err, hold_count(err, out, l, owner));
}

int redmutex_lock_ttl(int64_t *out, redmutex_lock *l)
{
    rm_err e_, *err = rm_err_reset(&e_);
    inspect_result res;
    int rc = inspect_lock(err, l, out, "redmutex_lock_ttl", &res);
    if (rc == 0)
        *out = rm_qth_largest(res.ttl, answered(&res), l->c->quorum, true);
    return rm_publish(err, rc);
}

/* A forced release's answer (rm_vote_fn): yes deleted, no nothing to delete. */
static rm_vote force_vote(void *ud, const rm_slot *s, size_t i, const rm_reply *r, rm_err *e, bool *unknown)
{
    (void)i;
    (void)ud;
    (void)s;
    *unknown = true;
    if (r->type == RM_REPLY_INTEGER)
        return r->integer == 1 ? RM_VOTE_YES : RM_VOTE_NO;
    rm_fail(e, REDMUTEX_EPROTOCOL, "a reply of the wrong type");
    return RM_VOTE_ERROR;
}

int redmutex_lock_force_release(int *out, redmutex_lock *l)
{
    rm_err e_, *err = rm_err_reset(&e_);
    int rc = rm_lock_check_handle(err, l, "redmutex_lock_force_release");
    if (rc)
        return rm_publish(err, rc);
    redmutex_client *c = l->c;
    rm_kargs kargs;
    rm_req req = {1, {rm_kind_of(l)->force(l, &kargs)}, l->name, NULL, NULL};
    rm_call call;
    if ((rc = rm_call_begin(err, &call, c)))
        return rm_publish(err, rc);
    rm_call_run(&call, &req, rm_command_deadline(c, false), NULL, NULL);
    rm_tally t;
    rm_tally_init(&t);
    rm_tally_spec spec = {"force release", l->name, 0, false, force_vote, NULL};
    rm_tally_call(&t, &call, &spec);
    size_t deleted = t.yes;
    if (t.error.code == REDMUTEX_EWRONGTYPE || t.yes + t.no < c->quorum)
        rc = rm_tally_fail(err, &t, &call, "force release", l->name);
    rm_call_end(&call);
    if (rc)
        return rm_publish(err, rc);
    rm_client_lock(c);
    pid_t pid = rm_pid();
    /* One at a time from the start: forgetting may wait and let the list change. */
    for (;;) {
        rm_hold *h = l->holds;
        while (h && (h->pid != pid || h->busy || h->forgetting))
            h = h->next_in_lock;
        if (!h)
            break;
        rm_hold_forget(c, h);
    }
    rm_client_unlock(c);
    if (out)
        *out = deleted > 0;
    return rm_publish(err, 0);
}

/* ---- local state ------------------------------------------------------- */

static int local_hold(rm_err *err, redmutex_lock *l, const char *owner, const char *fn, rm_hold **out)
{
    if (!l)
        return rm_fail(err, REDMUTEX_EINVAL, "%s: lock is NULL", fn);
    char owner_key[RM_VALUE_MAX + 1];
    int rc = rm_lock_resolve_owner(err, l, owner, owner_key);
    if (rc)
        return rc;
    rm_client_lock(l->c);
    *out = rm_hold_find(l, owner_key, rm_pid());
    return 0; /* returns with the client mutex held */
}

int redmutex_lock_state(redmutex_state *out, redmutex_lock *l, const char *owner)
{
    rm_err e_, *err = rm_err_reset(&e_);
    if (!out)
        return rm_publish(err, rm_fail(err, REDMUTEX_EINVAL, "redmutex_lock_state: out is NULL"));
    rm_hold *h = NULL;
    int rc = local_hold(err, l, owner, "redmutex_lock_state", &h);
    if (rc)
        return rm_publish(err, rc);
    *out = h ? rm_hold_state(l->c, h, rm_now_ns()) : REDMUTEX_STATE_UNLOCKED;
    rm_client_unlock(l->c);
    return rm_publish(err, 0);
}

int redmutex_lock_validity(int64_t *out, redmutex_lock *l, const char *owner)
{
    rm_err e_, *err = rm_err_reset(&e_);
    if (!out)
        return rm_publish(err, rm_fail(err, REDMUTEX_EINVAL, "redmutex_lock_validity: out is NULL"));
    rm_hold *h = NULL;
    int rc = local_hold(err, l, owner, "redmutex_lock_validity", &h);
    if (rc)
        return rm_publish(err, rc);
    int64_t now = rm_now_ns();
    *out = 0;
    if (h && rm_hold_state(l->c, h, now) != REDMUTEX_STATE_LOST)
        *out = (h->validity_end_ns - now) / RM_NS_PER_MS;
    rm_client_unlock(l->c);
    return rm_publish(err, 0);
}

int redmutex_lock_fence(int64_t *out, redmutex_lock *l, const char *owner)
{
    rm_err e_, *err = rm_err_reset(&e_);
    if (!out)
        return rm_publish(err, rm_fail(err, REDMUTEX_EINVAL, "redmutex_lock_fence: out is NULL"));
    if (l && !(l->opts.flags & REDMUTEX_LOCK_FENCING))
        return rm_publish(err, rm_fail(err, REDMUTEX_EINVAL, "lock '%s' was made without REDMUTEX_LOCK_FENCING", l->name));
    rm_hold *h = NULL;
    int rc = local_hold(err, l, owner, "redmutex_lock_fence", &h);
    if (rc)
        return rm_publish(err, rc);
    if (h)
        *out = h->fence;
    else
        rc = rm_fail(err, REDMUTEX_ENOTOWNER, "lock '%s' is not held by this owner through this handle", l->name);
    rm_client_unlock(l->c);
    return rm_publish(err, rc);
}
