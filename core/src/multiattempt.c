/*
 * One attempt at a multi-lock's set (multilock.h): every lock at once in
 * one request per group (one server: the whole set; a cluster: one hash
 * slot's locks), or lock by lock with the lock operations' own attempt,
 * and the give-back of what an attempt took when it missed a lock.
 */
#define _GNU_SOURCE
#include "client.h"
#include "deploy.h"
#include "fanout.h"
#include "handle.h"
#include "holds.h"
#include "internal.h"
#include "kind.h"
#include "lockops.h"
#include "multilock.h"
#include "quorum.h"
#include "slots.h"
#include "tally.h"

#include <stdlib.h>
#include <string.h>

/* ---- one attempt, in one request ---------------------------------------------------- */

/* Whether an attempt can take every lock in one request (see the top). */
static bool one_request(const multi_op *op)
{
    redmutex_multi_lock *m = op->m;
    redmutex_client *c = m->c;
    size_t room = RM_REQ_MAX_CMDS - (c->opts.min_replicas > 0 ? 1 : 0);
    if (c->n != 1 || m->n > room || atomic_load(&c->unsettled.n) > 0)
        return false;
    for (size_t j = 0; j < m->n; j++)
        if (rm_kind_of(m->locks[j])->server_queue || rm_hold_value_live(m->locks[j], op->value[j]))
            return false;
    return true;
}

/* After an attempt found a bare SET NX refused: the holder's TTL, or an
   error when the key is no lock of this kind (WRONGTYPE, as a single lock's
   first attempt finds it). */
static rm_vote inspect_vote(void *ud, const rm_slot *s, size_t i, const rm_reply *r, rm_err *e, bool *unknown)
{
    (void)s;
    (void)i;
    (void)unknown;
    int64_t *ttl = ud;
    if (r->type != RM_REPLY_ARRAY || r->elements != 3 || r->element[0]->type != RM_REPLY_INTEGER ||
        r->element[1]->type != RM_REPLY_INTEGER) {
        rm_fail(e, REDMUTEX_EPROTOCOL, "unexpected reply to the inspect script");
        return RM_VOTE_ERROR;
    }
    *ttl = r->element[0]->integer == 0 ? 0 : r->element[1]->integer;
    return RM_VOTE_YES;
}

static int inspect_blocker(rm_err *err, redmutex_lock *l, int64_t *ttl_ms)
{
    rm_kargs k;
    rm_req req = {1, {rm_kind_of(l)->inspect(l, "", &k)}, NULL, l->name, NULL};
    rm_call call;
    int rc = rm_call_begin(err, &call, l->c);
    if (rc)
        return rc;
    rm_call_run(&call, &req, rm_command_deadline(l->c, false), NULL, NULL);
    rm_tally t;
    rm_tally_init(&t);
    rm_tally_spec spec = {"acquire", l->name, 0, false, inspect_vote, ttl_ms};
    rm_tally_call(&t, &call, &spec);
    if (t.yes == 0)
        rc = rm_tally_fail(err, &t, &call, "acquire", l->name);
    rm_call_end(&call);
    return rc;
}

/* Takes back, in one request, what an attempt's replies say it may have
   taken (granted, or unknown) of the locks in `undo`. */
static void undo_values(multi_op *op, rm_call *call, const rm_acq_replies *a, const bool *undo)
{
    redmutex_multi_lock *m = op->m;
    rm_req req = {0};
    rm_kargs *k = calloc(m->n, sizeof *k);
    char(*latch)[RM_KEY_MAX] = calloc(m->n, sizeof *latch);
    bool dirty[REDMUTEX_SERVERS_MAX] = {false};
    for (size_t j = 0; k && latch && j < m->n; j++) {
        char id[33];
        if (!undo[j] || rm_new_token(NULL, id) != 0)
            continue;
        rm_latch_key(m->locks[j], id, latch[j]);
        rm_req one;
        rm_release_request(m->locks[j], op->value[j], latch[j], rm_lock_lease_ms(m->locks[j]), &one, &k[j]);
        req.cmds[req.ncmds++] = one.cmds[0];
        req.order_name = req.order_name ? req.order_name : m->locks[j]->name;
        for (size_t i = 0; i < call->n; i++)
            dirty[i] = dirty[i] || a[j].v.t.yes_at[i] || a[j].v.t.unknown_at[i];
    }
    if (req.ncmds) {
        call->only = dirty;
        call->strict_deadline = true;
        call->must_send = true;
        rm_call_run(call, &req, rm_command_deadline(m->c, false), NULL, NULL);
        call->only = NULL;
        for (size_t j = 0, x = 0; j < m->n; j++)
            if (undo[j] && latch[j][0] &&
                !rm_release_note_unsettled(m->locks[j], call, dirty, op->value[j], &req.cmds[x++], latch[j]))
                rm_release_forget_latch(call, latch[j]);
    }
    free(k);
    free(latch);
}

/* Records the holds of a group's request that won every lock of it. 0, or
   an error (the group's holds recorded are forgotten; the caller takes the
   locks back). */
static int record_all(multi_op *op, const rm_acq_replies *a, const bool *group, int64_t started)
{
    redmutex_multi_lock *m = op->m;
    int rc = 0;
    rm_client_lock(m->c);
    for (size_t j = 0; j < m->n && rc == 0; j++)
        if (group[j] &&
            (rc = rm_hold_record(op->err, m->locks[j], op->owner_key[j], op->value[j], started, &a[j].v)) == 0)
            op->held[j] = true;
    for (size_t j = 0; rc && j < m->n; j++) {
        rm_hold *h = group[j] && op->held[j] ? rm_hold_find(m->locks[j], op->owner_key[j], rm_pid()) : NULL;
        if (h)
            rm_hold_forget(m->c, h);
        op->held[j] = op->held[j] && !group[j];
    }
    rm_client_unlock(m->c);
    return rc;
}

/* What an attempt that did not win every lock says: RM_ATTEMPT_BUSY with
   op's blocker, or the first lock's error. */
static int not_won(multi_op *op, rm_call *call, const rm_acq_replies *a, const rm_acquire_verdict *verdict)
{
    redmutex_multi_lock *m = op->m;
    bool some = false;
    for (size_t j = 0; j < m->n; j++)
        some = some || verdict[j] == RM_VERDICT_WON;
    for (size_t j = 0; j < m->n; j++) {
        switch (verdict[j]) {
        case RM_VERDICT_WON:
            continue;
        case RM_VERDICT_ERROR:
        case RM_VERDICT_REPLICAS:
            return rm_err_copy(op->err, &a[j].v.t.error);
        case RM_VERDICT_UNREACHABLE:
            return rm_tally_fail(op->err, &a[j].v.t, call, "acquire", m->locks[j]->name);
        default:
            op->blocker = j;
            op->ttl_ms = verdict[j] == RM_VERDICT_BUSY ? a[j].v.ttl : 0;
            op->split = some;
            /* A bare SET NX says nothing of the holder: its TTL (and that the
               key is a lock of this kind at all) takes one more look. */
            if (a[j].form == RM_ACQ_SET && verdict[j] == RM_VERDICT_BUSY)
                return inspect_blocker(op->err, m->locks[j], &op->ttl_ms) ? op->err->code : RM_ATTEMPT_BUSY;
            return RM_ATTEMPT_BUSY;
        }
    }
    return RM_ATTEMPT_BUSY;
}

/* The locks of `group` (a mask over the set) in one request:
   RM_ATTEMPT_WON (their holds recorded), RM_ATTEMPT_BUSY (nothing of the
   group kept) or an error. */
static int attempt_one_request(multi_op *op, const bool *group)
{
    redmutex_multi_lock *m = op->m;
    redmutex_client *c = m->c;
    rm_req req = {0};
    rm_kargs *k = calloc(m->n, sizeof *k);
    rm_acq_replies *a = calloc(m->n, sizeof *a);
    rm_acquire_verdict verdict[REDMUTEX_MULTI_LOCK_MAX];
    uint64_t keys[RM_REQ_MAX_CMDS];
    char tbuf[24];
    const char *wait_argv[3];
    bool wait = c->opts.min_replicas > 0;
    rm_call call;
    if (!k || !a || rm_call_begin(op->err, &call, c) != 0) {
        free(k);
        free(a);
        return rm_fail(op->err, REDMUTEX_ENOMEM, "out of memory");
    }
    for (size_t j = 0; j < m->n; j++) {
        verdict[j] = RM_VERDICT_WON; /* outside the group: nothing to decide here */
        if (!group[j])
            continue;
        rm_acq_form form;
        rm_acq_replies_init(&a[j], m->locks[j], RM_ACQ_SCRIPT, (int)req.ncmds, rm_lock_lease_ms(m->locks[j]));
        keys[req.ncmds] = rm_order_key(m->locks[j]->name);
        if (!req.order_name) {
            req.order_name = m->locks[j]->name;
            call.order_owner = op->value[j]; /* its undo, too, changes this owner's hold */
        }
        req.cmds[req.ncmds++] = rm_acquire_command(m->locks[j], op->value[j], NULL, RM_ACQ_TRY, NULL, &k[j], &form);
        a[j].form = form;
    }
    size_t ncmds = req.ncmds;
    if (wait)
        rm_req_add_wait(&req, c, tbuf, wait_argv);
    call.order_keys = keys; /* a connection left owing is ordered for every name */
    call.n_order_keys = ncmds;
    rm_call_run(&call, &req, rm_command_deadline(c, wait), NULL, NULL);
    int64_t started = call.started_ns;
    bool all = true, undo[REDMUTEX_MULTI_LOCK_MAX];
    for (size_t j = 0; j < m->n; j++) {
        if (!group[j])
            continue;
        a[j].wait_replicas = wait;
        a[j].wait_index = wait ? (int)ncmds : -1;
        rm_acquire_count(&a[j], &call);
        int64_t left = rm_validity_left_ns(a[j].lease_ms, rm_now_ns() - started);
        verdict[j] =
            rm_acquire_decide(&a[j].v, c->n, m->locks[j]->quorum, left, false, rm_call_failed(&call) + a[j].v.t.errors);
        all = all && verdict[j] == RM_VERDICT_WON;
    }
    int rc = all ? record_all(op, a, group, started) : not_won(op, &call, a, verdict);
    for (size_t j = 0; j < m->n; j++)
        undo[j] = rc != RM_ATTEMPT_WON && group[j] && (a[j].v.t.yes > 0 || a[j].v.t.unknown_at[0]);
    call.order_keys = keys;
    call.n_order_keys = ncmds;
    if (rc != RM_ATTEMPT_WON)
        undo_values(op, &call, a, undo);
    call.order_keys = NULL;
    call.n_order_keys = 0;
    rm_call_end(&call);
    free(k);
    free(a);
    return rc;
}

/*
 * Hash slots of the set's locks when its deployment is a cluster (one
 * request may carry the keys of one slot only), -1 each when it is one
 * server. False while the deployment's kind is not known yet: its first
 * connection tells, and the attempt goes lock by lock until then.
 */
static bool slots_of(const redmutex_multi_lock *m, int *slot)
{
    int topology = atomic_load(&m->c->pool.servers[0].dep->topology);
    if (topology == RM_TOPOLOGY_AUTO)
        return false;
    for (size_t j = 0; j < m->n; j++)
        slot[j] = topology == RM_TOPOLOGY_CLUSTER ? rm_keyslot(m->locks[j]->name, m->locks[j]->name_len) : -1;
    return true;
}

/* The locks of `left` (a mask) in the same slot as the first of them: the next group. */
static void next_group(const redmutex_multi_lock *m, const int *slot, bool *left, bool *group)
{
    int first = -2;
    for (size_t j = 0; j < m->n; j++) {
        if (left[j] && first == -2)
            first = slot[j];
        group[j] = left[j] && slot[j] == first;
        left[j] = left[j] && !group[j];
    }
}

/* ---- one attempt, lock by lock ------------------------------------------------------ */

/* Gives back the holds an attempt won (all of them, in one request per
   RM_REQ_MAX_CMDS locks): after a failed attempt, and for a release. The
   first error in the fixed order is returned with its lock named. */
int rm_multi_release_held(multi_op *op, const char *why)
{
    redmutex_multi_lock *m = op->m;
    int slot[REDMUTEX_MULTI_LOCK_MAX], first = 0;
    /* Several names in one request follow no connection that still owes
       replies for one of them but the first's (per-server order, fanout.h):
       with N servers (a majority may have left a slow one owing) or a
       release of unknown outcome pending, each lock goes alone. */
    bool grouped = m->c->n == 1 && atomic_load(&m->c->unsettled.n) == 0 && slots_of(m, slot);
    bool left[REDMUTEX_MULTI_LOCK_MAX], group[REDMUTEX_MULTI_LOCK_MAX];
    for (size_t j = 0; j < m->n; j++) {
        left[j] = op->held[j];
        slot[j] = grouped ? slot[j] : (int)j;
    }
    for (size_t from = 0; from < m->n;) {
        if (!left[from]) {
            from++;
            continue;
        }
        next_group(m, slot, left, group);
        redmutex_lock *ls[RM_REQ_MAX_CMDS];
        char *keys[RM_REQ_MAX_CMDS];
        bool explicit_owner[RM_REQ_MAX_CMDS];
        size_t idx[RM_REQ_MAX_CMDS], k = 0;
        for (size_t j = 0; j < m->n; j++) {
            if (!group[j])
                continue;
            if (k == RM_REQ_MAX_CMDS) { /* the rest of the group goes with the next request */
                left[j] = true;
                continue;
            }
            idx[k] = j;
            ls[k] = m->locks[j];
            keys[k] = op->owner_key[j];
            explicit_owner[k++] = op->explicit_owner;
        }
        rm_err errs[RM_REQ_MAX_CMDS];
        int rcs[RM_REQ_MAX_CMDS];
        rm_release_batch(errs, rcs, ls, keys, explicit_owner, k);
        for (size_t x = 0; x < k; x++) {
            op->held[idx[x]] = false;
            if (rcs[x] && !first && why)
                first = rm_fail(op->err, rcs[x], "multi-lock: %s: %s", why, errs[x].msg);
        }
    }
    return first;
}

/* The locks one after another, each with the lock operations' attempt. */
static int attempt_each(multi_op *op)
{
    redmutex_multi_lock *m = op->m;
    for (size_t j = 0; j < m->n; j++) {
        rm_attempt_info info = {-1, false, "is held by another owner", false, NULL, false, 0};
        int rc = rm_attempt(op->err, m->locks[j], op->owner_key[j], op->value[j], op->tried, &info);
        if (rc == RM_ATTEMPT_WON) {
            op->held[j] = true;
            continue;
        }
        op->blocker = j;
        op->ttl_ms = info.ttl_ms;
        op->split = info.split || j > 0;
        rm_multi_release_held(op, NULL);
        return rc;
    }
    return RM_ATTEMPT_WON;
}

/* Group by group (every lock at once on one server, a slot's locks at once
   on a cluster); a group that misses a lock gives back the groups won. */
static int attempt_groups(multi_op *op, const int *slot)
{
    redmutex_multi_lock *m = op->m;
    bool left[REDMUTEX_MULTI_LOCK_MAX], group[REDMUTEX_MULTI_LOCK_MAX];
    for (size_t j = 0; j < m->n; j++)
        left[j] = true;
    for (size_t j = 0; j < m->n; j++) {
        if (!left[j])
            continue;
        next_group(m, slot, left, group);
        int rc = attempt_one_request(op, group);
        if (rc != RM_ATTEMPT_WON) {
            op->split = op->split || j > 0;
            rm_multi_release_held(op, NULL);
            return rc;
        }
    }
    return RM_ATTEMPT_WON;
}

int rm_multi_attempt(multi_op *op)
{
    int slot[REDMUTEX_MULTI_LOCK_MAX];
    int rc = one_request(op) && slots_of(op->m, slot) ? attempt_groups(op, slot) : attempt_each(op);
    op->tried = true;
    return rc;
}
