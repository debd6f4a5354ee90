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

#include <stdio.h>
#include <string.h>

typedef struct inspect_result {
    size_t answered;
    size_t exists;
    int64_t ttl[REDMUTEX_SERVERS_MAX];   /* per answering server; -2 absent, -1 no TTL */
    int64_t count[REDMUTEX_SERVERS_MAX];
} inspect_result;

static int inspect(redmutex_lock *l, const char *value, inspect_result *res)
{
    redmutex_client *c = l->c;
    rm_kargs kargs;
    rm_req req = {1, {rm_kind_of(l)->inspect(l, value, &kargs)}, NULL};
    rm_call call;
    int rc = rm_call_begin(&call, c);
    if (rc)
        return rc;
    rm_call_run(&call, &req, rm_command_deadline(c, false), NULL, NULL);
    memset(res, 0, sizeof *res);
    int err = 0;
    char err_msg[512] = "";
    for (size_t i = 0; i < call.n; i++) {
        rm_reply *r = call.slots[i].err ? NULL : call.slots[i].replies[0];
        if (!r)
            continue;
        if (r->type == RM_REPLY_ERROR) {
            int code = rm_reply_error(r, "inspect", l->name, rm_lock_server(l, i));
            if (!err || code == REDMUTEX_EWRONGTYPE) {
                err = code;
                snprintf(err_msg, sizeof err_msg, "%s", redmutex_last_error());
            }
            continue;
        }
        if (r->type != RM_REPLY_ARRAY || r->elements != 3 || r->element[0]->type != RM_REPLY_INTEGER ||
            r->element[1]->type != RM_REPLY_INTEGER || r->element[2]->type != RM_REPLY_INTEGER) {
            if (!err) {
                err = rm_fail(REDMUTEX_EPROTOCOL, "%s: unexpected reply to the inspect script", rm_lock_server(l, i));
                snprintf(err_msg, sizeof err_msg, "%s", redmutex_last_error());
            }
            continue;
        }
        size_t k = res->answered++;
        res->exists += r->element[0]->integer == 1;
        res->ttl[k] = r->element[1]->integer;
        res->count[k] = r->element[2]->integer;
    }
    if (err == REDMUTEX_EWRONGTYPE || (err && res->answered < c->quorum))
        rc = rm_fail(err, "%s", err_msg);
    else if (res->answered < c->quorum)
        rc = rm_call_fail(&call, "inspect", l->name);
    rm_call_end(&call);
    return rc;
}

/* The value an owner is known by on the servers ("" when this handle holds nothing for it). */
static int owner_value(redmutex_lock *l, const char *owner, char value[RM_VALUE_MAX + 1])
{
    char owner_key[RM_VALUE_MAX + 1];
    int rc = rm_lock_resolve_owner(l, owner, owner_key);
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

int redmutex_lock_is_locked(int *out, redmutex_lock *l)
{
    int rc = rm_lock_check_handle(l, "redmutex_lock_is_locked");
    if (rc)
        return rc;
    if (!out)
        return rm_fail(REDMUTEX_EINVAL, "redmutex_lock_is_locked: out is NULL");
    inspect_result res;
    if ((rc = inspect(l, "", &res)))
        return rc;
    *out = res.exists >= l->c->quorum;
    return 0;
}

int redmutex_lock_is_owned(int *out, redmutex_lock *l, const char *owner)
{
    int64_t count;
    int rc = redmutex_lock_hold_count(&count, l, owner);
    if (rc == 0 && !out)
        rc = rm_fail(REDMUTEX_EINVAL, "redmutex_lock_is_owned: out is NULL");
    if (rc == 0)
        *out = count > 0;
    return rc;
}

int redmutex_lock_hold_count(int64_t *out, redmutex_lock *l, const char *owner)
{
    int rc = rm_lock_check_handle(l, "redmutex_lock_hold_count");
    if (rc)
        return rc;
    if (!out)
        return rm_fail(REDMUTEX_EINVAL, "redmutex_lock_hold_count: out is NULL");
    char value[RM_VALUE_MAX + 1];
    if ((rc = owner_value(l, owner, value)))
        return rc;
    if (!value[0]) {
        *out = 0;
        return 0;
    }
    inspect_result res;
    if ((rc = inspect(l, value, &res)))
        return rc;
    *out = rm_qth_largest(res.count, res.answered, l->c->quorum, false);
    return 0;
}

int redmutex_lock_ttl(int64_t *out, redmutex_lock *l)
{
    int rc = rm_lock_check_handle(l, "redmutex_lock_ttl");
    if (rc)
        return rc;
    if (!out)
        return rm_fail(REDMUTEX_EINVAL, "redmutex_lock_ttl: out is NULL");
    inspect_result res;
    if ((rc = inspect(l, "", &res)))
        return rc;
    *out = rm_qth_largest(res.ttl, res.answered, l->c->quorum, true);
    return 0;
}

int redmutex_lock_force_release(int *out, redmutex_lock *l)
{
    int rc = rm_lock_check_handle(l, "redmutex_lock_force_release");
    if (rc)
        return rc;
    redmutex_client *c = l->c;
    rm_kargs kargs;
    rm_req req = {1, {rm_kind_of(l)->force(l, &kargs)}, l->name};
    rm_call call;
    if ((rc = rm_call_begin(&call, c)))
        return rc;
    rm_call_run(&call, &req, rm_command_deadline(c, false), NULL, NULL);
    size_t answered = 0, deleted = 0;
    int err = 0;
    char err_msg[512] = "";
    for (size_t i = 0; i < call.n; i++) {
        rm_reply *r = call.slots[i].err ? NULL : call.slots[i].replies[0];
        if (r && r->type == RM_REPLY_INTEGER) {
            answered++;
            deleted += r->integer == 1;
        } else if (r && !err) {
            err = r->type == RM_REPLY_ERROR ? rm_reply_error(r, "force release", l->name, rm_lock_server(l, i))
                                            : rm_fail(REDMUTEX_EPROTOCOL, "force release lock '%s': %s sent a "
                                                      "reply of the wrong type", l->name, rm_lock_server(l, i));
            snprintf(err_msg, sizeof err_msg, "%s", redmutex_last_error());
        }
    }
    if (err == REDMUTEX_EWRONGTYPE)
        rc = rm_fail(err, "%s", err_msg);
    else if (answered < c->quorum)
        rc = err ? rm_fail(err, "%s", err_msg) : rm_call_fail(&call, "force release", l->name);
    rm_call_end(&call);
    if (rc)
        return rc;
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
    return 0;
}

/* ---- local state ------------------------------------------------------- */

static int local_hold(redmutex_lock *l, const char *owner, const char *fn, rm_hold **out)
{
    if (!l)
        return rm_fail(REDMUTEX_EINVAL, "%s: lock is NULL", fn);
    char owner_key[RM_VALUE_MAX + 1];
    int rc = rm_lock_resolve_owner(l, owner, owner_key);
    if (rc)
        return rc;
    rm_client_lock(l->c);
    *out = rm_hold_find(l, owner_key, rm_pid());
    return 0; /* returns with the client mutex held */
}

int redmutex_lock_state(redmutex_state *out, redmutex_lock *l, const char *owner)
{
    if (!out)
        return rm_fail(REDMUTEX_EINVAL, "redmutex_lock_state: out is NULL");
    rm_hold *h;
    int rc = local_hold(l, owner, "redmutex_lock_state", &h);
    if (rc)
        return rc;
    *out = h ? rm_hold_state(l->c, h, rm_now_ns()) : REDMUTEX_STATE_UNLOCKED;
    rm_client_unlock(l->c);
    return 0;
}

int redmutex_lock_validity(int64_t *out, redmutex_lock *l, const char *owner)
{
    if (!out)
        return rm_fail(REDMUTEX_EINVAL, "redmutex_lock_validity: out is NULL");
    rm_hold *h;
    int rc = local_hold(l, owner, "redmutex_lock_validity", &h);
    if (rc)
        return rc;
    int64_t now = rm_now_ns();
    *out = 0;
    if (h && rm_hold_state(l->c, h, now) != REDMUTEX_STATE_LOST)
        *out = (h->validity_end_ns - now) / RM_NS_PER_MS;
    rm_client_unlock(l->c);
    return 0;
}

int redmutex_lock_fence(int64_t *out, redmutex_lock *l, const char *owner)
{
    if (!out)
        return rm_fail(REDMUTEX_EINVAL, "redmutex_lock_fence: out is NULL");
    if (l && !(l->opts.flags & REDMUTEX_LOCK_FENCING))
        return rm_fail(REDMUTEX_EINVAL, "lock '%s' was made without REDMUTEX_LOCK_FENCING", l->name);
    rm_hold *h;
    int rc = local_hold(l, owner, "redmutex_lock_fence", &h);
    if (rc)
        return rc;
    if (h)
        *out = h->fence;
    else
        rc = rm_fail(REDMUTEX_ENOTOWNER, "lock '%s' is not held by this owner through this handle", l->name);
    rm_client_unlock(l->c);
    return rc;
}
