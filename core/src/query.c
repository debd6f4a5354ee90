/*
 * Queries: what the servers say of a lock (is it locked, by whom how many
 * times, for how long, its fence and queue), force release, and what this
 * process knows of its own holds (state, validity, fencing token). Every
 * server-side query is one read, RM_SCRIPT_LOCK_INFO on each server at once:
 * redmutex_lock_inspect gives all of it, the older four a view of it.
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
#include <stdlib.h>
#include <string.h>

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

/* ---- one read of the servers: redmutex_lock_inspect and the older queries ---- */

/* What one server holds under the name (RM_SCRIPT_LOCK_INFO's reply). */
typedef struct lock_reading {
    bool answered, held;
    bool side; /* the handle's side of a read-write lock is held (else: anything is) */
    int kind;  /* a redmutex_kind, or -1 for nothing */
    int64_t ttl, count, readers, queue, fence;
    int64_t mine; /* the asked owner's hold count */
    char owner[REDMUTEX_LOCK_INFO_OWNER_SIZE];
} lock_reading;

typedef struct info_result {
    redmutex_lock *l;
    bool strict;     /* a query of the handle's own kind: a lock of another kind is EWRONGTYPE */
    lock_reading *r; /* one per server */
} info_result;

static bool reply_is(const rm_reply *r, const char *s)
{
    return r->type == RM_REPLY_STRING && r->len == strlen(s) && memcmp(r->str, s, r->len) == 0;
}

/* The kind a reading stands for. A hash without a queue is a reentrant lock or an idle fair one. */
static int reading_kind(const rm_reply *k, int64_t queue, redmutex_kind handle_kind)
{
    bool fair_handle = handle_kind == REDMUTEX_KIND_FAIR;
    if (reply_is(k, "none"))
        return queue > 0 ? REDMUTEX_KIND_FAIR : -1;
    if (reply_is(k, "string"))
        return REDMUTEX_KIND_LOCK;
    if (reply_is(k, "hash"))
        return queue > 0 || fair_handle ? REDMUTEX_KIND_FAIR : REDMUTEX_KIND_RLOCK;
    if (reply_is(k, "rw-read"))
        return REDMUTEX_KIND_READ;
    if (reply_is(k, "rw-write"))
        return REDMUTEX_KIND_WRITE;
    return -2; /* another type of key: no lock */
}

/* Whether a lock of `held` kind is stored the way a handle of `handle` kind stores its own. */
static bool same_format(redmutex_kind handle, int held)
{
    switch (handle) {
    case REDMUTEX_KIND_LOCK:
        return held == REDMUTEX_KIND_LOCK;
    case REDMUTEX_KIND_RLOCK:
    case REDMUTEX_KIND_FAIR:
        return held == REDMUTEX_KIND_RLOCK || held == REDMUTEX_KIND_FAIR;
    default:
        return held == REDMUTEX_KIND_READ || held == REDMUTEX_KIND_WRITE;
    }
}

static bool reply_shape_ok(const rm_reply *r)
{
    if (r->type != RM_REPLY_ARRAY || r->elements != 9)
        return false;
    rm_reply *const *el = r->element;
    for (size_t k = 1; k < 9; k++)
        if (k != 2 && k != 6 && el[k]->type != RM_REPLY_INTEGER)
            return false;
    return el[0]->type == RM_REPLY_STRING && el[2]->type == RM_REPLY_STRING &&
           (el[6]->type == RM_REPLY_STRING || el[6]->type == RM_REPLY_NIL);
}

/* Reads server i's answer (rm_vote_fn, ud: the info_result): yes when it holds the lock. */
static rm_vote info_vote(void *ud, const rm_slot *s, size_t i, const rm_reply *r, rm_err *e, bool *unknown)
{
    (void)s;
    (void)unknown;
    info_result *res = ud;
    if (!reply_shape_ok(r)) {
        rm_fail(e, REDMUTEX_EPROTOCOL, "unexpected reply to the inspect script");
        return RM_VOTE_ERROR;
    }
    rm_reply *const *el = r->element;
    lock_reading *rd = &res->r[i];
    rd->kind = reading_kind(el[0], el[5]->integer, res->l->kind);
    if (rd->kind == -2) {
        rm_fail(e, REDMUTEX_EWRONGTYPE, "the key is no lock: it holds a %.*s", (int)el[0]->len, el[0]->str);
        return RM_VOTE_ERROR;
    }
    rd->held = rd->kind >= 0 && !reply_is(el[0], "none");
    if (res->strict && rd->held && !same_format(res->l->kind, rd->kind)) {
        rm_fail(e, REDMUTEX_EWRONGTYPE,
                "lock '%s' is stored as a lock of another kind (%.*s) than this handle's; nothing was changed",
                res->l->name, (int)el[0]->len, el[0]->str);
        return RM_VOTE_ERROR;
    }
    rd->answered = true;
    rd->ttl = el[1]->integer;
    snprintf(rd->owner, sizeof rd->owner, "%.*s", (int)el[2]->len, el[2]->str);
    rd->count = el[3]->integer;
    rd->readers = el[4]->integer;
    rd->queue = el[5]->integer;
    char *end = NULL;
    rd->fence = el[6]->type == RM_REPLY_STRING ? strtoll(el[6]->str, &end, 10) : -1;
    if (end && (end == el[6]->str || *end))
        rd->fence = -1; /* not a counter */
    rd->mine = el[7]->integer;
    rd->side = rd->held && el[8]->integer == 1;
    return rd->held ? RM_VOTE_YES : RM_VOTE_NO;
}

/* The side of a read-write lock a handle asks about, "" for the other kinds. */
static const char *asked_side(const redmutex_lock *l)
{
    return l->kind == REDMUTEX_KIND_READ ? "read" : l->kind == REDMUTEX_KIND_WRITE ? "write" : "";
}

/*
 * Runs RM_SCRIPT_LOCK_INFO once on every server (one round trip) and fills
 * r[] (c->n readings; those of servers that did not answer stay zero).
 * `value`: the owner whose hold count is asked ("" for none); strict: a
 * lock of another format than the handle's is EWRONGTYPE. Fails unless a
 * quorum answered.
 */
static int read_lock(rm_err *err, redmutex_lock *l, const char *value, bool strict, lock_reading *r)
{
    redmutex_client *c = l->c;
    char token_key[RM_LONG_KEY_MAX], queue_key[RM_LONG_KEY_MAX], holds_key[RM_LONG_KEY_MAX], owner_max[24];
    rm_i64_str(owner_max, REDMUTEX_LOCK_INFO_OWNER_SIZE - 1);
    const rm_kind_ops *ops = rm_kind_of(l);
    const char *holds = value[0] && ops->hold_keys ? ops->hold_keys(l, value, holds_key) : NULL;
    const char *argv[] = {holds ? "3" : "2",
                          l->name,
                          rm_lock_token_key(l, token_key, sizeof token_key),
                          holds ? holds : NULL,
                          rm_derived_key(l, "redisson_lock_queue", "", queue_key, sizeof queue_key),
                          owner_max,
                          value,
                          asked_side(l)};
    /* Without a holds key, its slot is left out of the argument list. */
    const char *args[8];
    size_t n = 0;
    for (size_t k = 0; k < 8; k++)
        if (k != 3 || holds)
            args[n++] = argv[k];
    rm_req req = {1, {{RM_SCRIPT_LOCK_INFO, (int)n, args, NULL}}, NULL, l->name, NULL};
    info_result res = {l, strict, r};
    memset(r, 0, c->n * sizeof *r);
    rm_call call;
    int rc = rm_call_begin(err, &call, c);
    if (rc)
        return rc;
    rm_call_run(&call, &req, rm_command_deadline(c, false), NULL, NULL);
    rm_tally t;
    rm_tally_init(&t);
    rm_tally_spec spec = {"inspect", l->name, 0, false, info_vote, &res};
    rm_tally_call(&t, &call, &spec);
    if (t.error.code == REDMUTEX_EWRONGTYPE || t.yes + t.no < c->quorum)
        rc = rm_tally_fail(err, &t, &call, "inspect", l->name);
    rm_call_end(&call);
    return rc;
}

/* The kind most servers that store anything report (the first of equals); -1 when none does. */
static int agreed_kind(const lock_reading *r, size_t n)
{
    int best = -1;
    size_t best_votes = 0;
    for (size_t i = 0; i < n; i++) {
        size_t votes = 0;
        for (size_t k = 0; k < n && r[i].answered && r[i].kind >= 0; k++)
            votes += r[k].answered && r[k].kind == r[i].kind;
        if (votes > best_votes)
            best = r[i].kind, best_votes = votes;
    }
    return best;
}

/* The owner a quorum of servers agree on, with its hold count as a quorum has it. */
static void agreed_owner(redmutex_lock_info *out, const lock_reading *r, size_t n, size_t quorum)
{
    int64_t counts[REDMUTEX_SERVERS_MAX];
    for (size_t i = 0; i < n; i++) {
        size_t same = 0;
        for (size_t k = 0; k < n && r[i].answered && r[i].owner[0]; k++)
            same += r[k].answered && strcmp(r[k].owner, r[i].owner) == 0;
        if (same < quorum)
            continue;
        size_t m = 0;
        for (size_t k = 0; k < n; k++)
            if (r[k].answered)
                counts[m++] = strcmp(r[k].owner, r[i].owner) == 0 ? r[k].count : 0;
        snprintf(out->owner, sizeof out->owner, "%s", r[i].owner);
        out->hold_count = rm_qth_largest(counts, m, quorum, false);
        return;
    }
}

/* The servers' readings as one answer (pure). */
static void aggregate(redmutex_lock_info *out, const lock_reading *r, size_t n, size_t quorum)
{
    int64_t ttls[REDMUTEX_SERVERS_MAX];
    size_t held = 0, m = 0;
    out->fence = -1;
    for (size_t i = 0; i < n; i++) {
        if (!r[i].answered)
            continue;
        held += r[i].held;
        ttls[m++] = r[i].ttl;
        out->fence = r[i].fence > out->fence ? r[i].fence : out->fence;
        out->queue_length = r[i].queue > out->queue_length ? r[i].queue : out->queue_length;
        out->readers = r[i].readers > out->readers ? r[i].readers : out->readers;
    }
    out->servers_answered = (uint32_t)m;
    out->held = held >= quorum;
    out->kind = agreed_kind(r, n);
    out->ttl_ms = rm_qth_largest(ttls, m, quorum, true);
    agreed_owner(out, r, n, quorum);
}

_Static_assert(sizeof(((redmutex_lock_info *)0)->owner) == REDMUTEX_LOCK_INFO_OWNER_SIZE,
               "redmutex_lock_info.owner is REDMUTEX_LOCK_INFO_OWNER_SIZE bytes");

/* The bytes of each version of redmutex_lock_info (index: version). */
static const size_t lock_info_sizes[] = {0, sizeof(redmutex_lock_info)};

int redmutex_lock_inspect(redmutex_lock_info *out, redmutex_lock *l)
{
    rm_err e_, *err = rm_err_reset(&e_);
    int rc = rm_lock_check_handle(err, l, "redmutex_lock_inspect");
    if (rc == 0 && !out)
        rc = rm_fail(err, REDMUTEX_EINVAL, "redmutex_lock_inspect: out is NULL");
    if (rc == 0 && (out->version == 0 || out->version > REDMUTEX_LOCK_INFO_VERSION))
        rc = rm_fail(err, REDMUTEX_EINVAL,
                     "redmutex_lock_inspect: redmutex_lock_info version %u is unknown to this library "
                     "(1..%d): set it to REDMUTEX_LOCK_INFO_VERSION",
                     (unsigned)out->version, REDMUTEX_LOCK_INFO_VERSION);
    if (rc)
        return rm_publish(err, rc);
    lock_reading *r = calloc(l->c->n, sizeof *r);
    if (!r)
        return rm_publish(err, rm_fail(err, REDMUTEX_ENOMEM, "out of memory"));
    redmutex_lock_info info;
    memset(&info, 0, sizeof info);
    rc = read_lock(err, l, "", false, r);
    if (rc == 0)
        aggregate(&info, r, l->c->n, l->c->quorum);
    free(r);
    if (rc)
        return rm_publish(err, rc);
    uint32_t version = out->version;
    memcpy(out, &info, lock_info_sizes[version]);
    out->version = version;
    return rm_publish(err, 0);
}

/*
 * is_locked, is_owned, ttl and hold_count are views of the same read, from
 * the handle's side: its own kind only (another kind's lock is EWRONGTYPE),
 * the side of a read-write lock it stands for, and the hold count of one
 * owner as a quorum has it.
 */
typedef struct side_view {
    size_t held; /* servers where the handle's side is held */
    size_t answered;
    int64_t ttl[REDMUTEX_SERVERS_MAX];  /* per answering server; -2 not held, -1 no TTL */
    int64_t mine[REDMUTEX_SERVERS_MAX]; /* the asked owner's count, per answering server */
} side_view;

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

/* Checks the handle and out of public query fn, reads the lock and sees it from the handle's side. */
static int read_side(rm_err *err, redmutex_lock *l, const void *out, const char *fn, const char *value, side_view *v)
{
    int rc = rm_lock_check_handle(err, l, fn);
    if (rc == 0 && !out)
        rc = rm_fail(err, REDMUTEX_EINVAL, "%s: out is NULL", fn);
    lock_reading *r = rc ? NULL : calloc(l->c->n, sizeof *r);
    if (rc == 0 && !r)
        rc = rm_fail(err, REDMUTEX_ENOMEM, "out of memory");
    if (rc == 0)
        rc = read_lock(err, l, value, true, r);
    memset(v, 0, sizeof *v);
    for (size_t i = 0; rc == 0 && i < l->c->n; i++) {
        if (!r[i].answered)
            continue;
        v->held += r[i].side;
        v->ttl[v->answered] = r[i].side ? r[i].ttl : -2;
        v->mine[v->answered++] = r[i].mine;
    }
    free(r);
    return rc;
}

int redmutex_lock_is_locked(int *out, redmutex_lock *l)
{
    rm_err e_, *err = rm_err_reset(&e_);
    side_view v;
    int rc = read_side(err, l, out, "redmutex_lock_is_locked", "", &v);
    if (rc == 0)
        *out = v.held >= l->c->quorum;
    return rm_publish(err, rc);
}

/* redmutex_lock_hold_count, with the call's error (fn: the public function's name). */
static int hold_count(rm_err *err, int64_t *out, redmutex_lock *l, const char *owner, const char *fn)
{
    int rc = rm_lock_check_handle(err, l, fn);
    if (rc)
        return rc;
    if (!out)
        return rm_fail(err, REDMUTEX_EINVAL, "%s: out is NULL", fn);
    char value[RM_VALUE_MAX + 1];
    if ((rc = owner_value(err, l, owner, value)))
        return rc;
    if (!value[0]) { /* an anonymous holder this handle does not hold: nothing to ask */
        *out = 0;
        return 0;
    }
    side_view v;
    if ((rc = read_side(err, l, out, fn, value, &v)))
        return rc;
    *out = rm_qth_largest(v.mine, v.answered, l->c->quorum, false);
    return 0;
}

int redmutex_lock_is_owned(int *out, redmutex_lock *l, const char *owner)
{
    rm_err e_, *err = rm_err_reset(&e_);
    int64_t count = 0;
    int rc = l && !out ? rm_fail(err, REDMUTEX_EINVAL, "redmutex_lock_is_owned: out is NULL")
                       : hold_count(err, &count, l, owner, "redmutex_lock_is_owned");
    if (rc == 0)
        *out = count > 0;
    return rm_publish(err, rc);
}

int redmutex_lock_hold_count(int64_t *out, redmutex_lock *l, const char *owner)
{
    rm_err e_, *err = rm_err_reset(&e_);
    return rm_publish(err, hold_count(err, out, l, owner, "redmutex_lock_hold_count"));
}

int redmutex_lock_ttl(int64_t *out, redmutex_lock *l)
{
    rm_err e_, *err = rm_err_reset(&e_);
    side_view v;
    int rc = read_side(err, l, out, "redmutex_lock_ttl", "", &v);
    if (rc == 0)
        *out = rm_qth_largest(v.ttl, v.answered, l->c->quorum, true);
    return rm_publish(err, rc);
}

/* ---- local state ------------------------------------------------------- */

/* The owner's key, checked; the caller then finds its hold with the client mutex held. */
static int local_owner(rm_err *err, redmutex_lock *l, const char *owner, const char *fn, char key[RM_VALUE_MAX + 1])
{
    if (!l)
        return rm_fail(err, REDMUTEX_EINVAL, "%s: lock is NULL", fn);
    return rm_lock_resolve_owner(err, l, owner, key);
}

int redmutex_lock_state(redmutex_state *out, redmutex_lock *l, const char *owner)
{
    rm_err e_, *err = rm_err_reset(&e_);
    if (!out)
        return rm_publish(err, rm_fail(err, REDMUTEX_EINVAL, "redmutex_lock_state: out is NULL"));
    char key[RM_VALUE_MAX + 1];
    int rc = local_owner(err, l, owner, "redmutex_lock_state", key);
    if (rc)
        return rm_publish(err, rc);
    rm_client_lock(l->c);
    rm_hold *h = rm_hold_find(l, key, rm_pid());
    *out = h ? rm_hold_state(l->c, h, rm_now_ns()) : REDMUTEX_STATE_UNLOCKED;
    rm_client_unlock(l->c);
    return rm_publish(err, 0);
}

int redmutex_lock_validity(int64_t *out, redmutex_lock *l, const char *owner)
{
    rm_err e_, *err = rm_err_reset(&e_);
    if (!out)
        return rm_publish(err, rm_fail(err, REDMUTEX_EINVAL, "redmutex_lock_validity: out is NULL"));
    char key[RM_VALUE_MAX + 1];
    int rc = local_owner(err, l, owner, "redmutex_lock_validity", key);
    if (rc)
        return rm_publish(err, rc);
    rm_client_lock(l->c);
    rm_hold *h = rm_hold_find(l, key, rm_pid());
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
        return rm_publish(err,
                          rm_fail(err, REDMUTEX_EINVAL, "lock '%s' was made without REDMUTEX_LOCK_FENCING", l->name));
    char key[RM_VALUE_MAX + 1];
    int rc = local_owner(err, l, owner, "redmutex_lock_fence", key);
    if (rc)
        return rm_publish(err, rc);
    rm_client_lock(l->c);
    rm_hold *h = rm_hold_find(l, key, rm_pid());
    if (h)
        *out = h->fence;
    else
        rc = rm_fail(err, REDMUTEX_ENOTOWNER, "lock '%s' is not held by this owner through this handle", l->name);
    rm_client_unlock(l->c);
    return rm_publish(err, rc);
}
