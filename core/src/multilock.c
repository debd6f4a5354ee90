/*
 * Multi-locks (redmutex_multi_lock_*): all-or-nothing over several locks of
 * one client, of any kinds, with RedissonMultiLock's semantics: every lock
 * is acquired within the wait or none is, and a release releases them all.
 * Each lock is held as it would be alone (its own hold, renewed by the
 * watchdog in the same batches, with its own lost-lock events), so Redisson
 * services and redmutex processes that take the same locks one by one
 * exclude a multi-lock and are excluded by it.
 *
 * No deadlock between multi-locks on overlapping sets, whatever order their
 * users list the locks in: an attempt takes every lock in one request (one
 * round trip, on one server) or in a fixed order (by name), and a failed
 * attempt gives back what it took before it waits. Nobody waits while
 * holding part of a set. The wait listens on the channel of the lock that
 * was busy and tries the whole set again when it is released, when its
 * holder's lease ends, or after the capped backoff; after an attempt that
 * won some locks and not others it pauses a random time first (as Redlock
 * does after split votes), so two sets that keep colliding draw apart.
 *
 * One request per attempt and per release when the client has one server,
 * every lock fits in a request, no lock is fair (a fair lock queues), none
 * is held already by the owner (a nested level), and no release of unknown
 * outcome is pending; otherwise the locks are tried one after another in
 * the fixed order, each with the lock operations' own attempt (Redlock's
 * quorum, fencing ratchet, nested levels and fair queues included).
 */
#define _GNU_SOURCE
#include "client.h"
#include "fanout.h"
#include "handle.h"
#include "holds.h"
#include "internal.h"
#include "interrupt.h"
#include "kind.h"
#include "lifetime.h"
#include "lockops.h"
#include "pollwait.h"
#include "quorum.h"
#include "tally.h"
#include "waiter.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct redmutex_multi_lock {
    redmutex_client *c;
    size_t n;
    redmutex_lock **locks; /* in the fixed order: by name */
};

/* One acquisition or release of a multi-lock for one owner. */
typedef struct multi_op {
    rm_err *err;
    redmutex_multi_lock *m;
    bool explicit_owner;
    char (*owner_key)[RM_VALUE_MAX + 1];
    char (*value)[RM_VALUE_MAX + 1];
    bool *held;       /* won by this attempt (recorded holds) */
    bool tried;       /* an attempt was made: later ones are retries */
    /* The last busy attempt: the lock that was busy, how long its holder
       still has, whether part of the set had been won. */
    size_t blocker;
    int64_t ttl_ms;
    bool split;
} multi_op;

/* ---- the handle ---------------------------------------------------------------- */

static int by_name(const void *a, const void *b)
{
    const redmutex_lock *x = *(redmutex_lock *const *)a, *y = *(redmutex_lock *const *)b;
    return strcmp(x->name, y->name);
}

static int check_locks(rm_err *err, redmutex_lock *const *locks, size_t n)
{
    if (n == 0 || n > REDMUTEX_MULTI_LOCK_MAX)
        return rm_fail(err, REDMUTEX_EINVAL, "a multi-lock takes 1..%d locks, not %zu", REDMUTEX_MULTI_LOCK_MAX, n);
    for (size_t j = 0; j < n; j++) {
        if (!locks[j])
            return rm_fail(err, REDMUTEX_EINVAL, "redmutex_multi_lock_new: locks[%zu] is NULL", j);
        if (locks[j]->c != locks[0]->c)
            return rm_fail(err, REDMUTEX_EINVAL, "the locks of a multi-lock must belong to one client (locks[%zu])", j);
        if (locks[j]->kind == RM_KIND_SEMAPHORE)
            return rm_fail(err, REDMUTEX_EINVAL, "a multi-lock takes locks, not semaphores (locks[%zu])", j);
    }
    return 0;
}

int redmutex_multi_lock_new(redmutex_multi_lock **out, redmutex_lock *const *locks, size_t n)
{
    rm_err e_, *err = rm_err_reset(&e_);
    if (!out || !locks)
        return rm_publish(err, rm_fail(err, REDMUTEX_EINVAL, "redmutex_multi_lock_new: %s is NULL", !out ? "out" : "locks"));
    int rc = check_locks(err, locks, n);
    if (rc)
        return rm_publish(err, rc);
    redmutex_multi_lock *m = calloc(1, sizeof *m);
    redmutex_lock **ls = calloc(n, sizeof *ls);
    if (!m || !ls) {
        free(m);
        free(ls);
        return rm_publish(err, rm_fail(err, REDMUTEX_ENOMEM, "out of memory"));
    }
    memcpy(ls, locks, n * sizeof *ls);
    qsort(ls, n, sizeof *ls, by_name);
    for (size_t j = 1; j < n; j++)
        if (strcmp(ls[j]->name, ls[j - 1]->name) == 0) {
            rc = rm_fail(err, REDMUTEX_EINVAL, "lock '%s' is twice in the multi-lock", ls[j]->name);
            free(m);
            free(ls);
            return rm_publish(err, rc);
        }
    redmutex_client *c = ls[0]->c;
    rm_client_lock(c);
    c->refs++; /* the multi-lock's: it unreferences its locks under the client's mutex */
    for (size_t j = 0; j < n; j++)
        ls[j]->refs++;
    rm_client_unlock(c);
    m->c = c;
    m->n = n;
    m->locks = ls;
    *out = m;
    return rm_publish(err, 0);
}

void redmutex_multi_lock_free(redmutex_multi_lock *m)
{
    if (!m)
        return;
    redmutex_client *c = m->c;
    rm_client_lock(c);
    for (size_t j = 0; j < m->n; j++)
        rm_lock_unref_locked(c, m->locks[j]);
    rm_client_unlock(c);
    rm_client_unref(c);
    free(m->locks);
    free(m);
}

size_t redmutex_multi_lock_size(const redmutex_multi_lock *m) { return m ? m->n : 0; }

/* ---- one attempt, in one request ---------------------------------------------------- */

/* Whether an attempt can take every lock in one request (see the top). */
static bool one_request(const multi_op *op)
{
    redmutex_multi_lock *m = op->m;
    redmutex_client *c = m->c;
    size_t room = RM_REQ_MAX_CMDS - (c->opts.min_replicas > 0 ? 1 : 0);
    if (c->n != 1 || m->n > room || atomic_load(&c->n_unsettled) > 0)
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
    rm_req req = {1, {rm_kind_of(l)->inspect(l, "", &k)}, NULL};
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
    char (*latch)[RM_KEY_MAX] = calloc(m->n, sizeof *latch);
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

/* Records the holds of an attempt that won every lock. 0, or an error (the
   holds recorded are forgotten; the caller takes the locks back). */
static int record_all(multi_op *op, const rm_acq_replies *a, int64_t started)
{
    redmutex_multi_lock *m = op->m;
    int rc = 0;
    rm_client_lock(m->c);
    for (size_t j = 0; j < m->n && rc == 0; j++)
        if ((rc = rm_hold_record(op->err, m->locks[j], op->owner_key[j], op->value[j], started, &a[j].v)) == 0)
            op->held[j] = true;
    for (size_t j = 0; rc && j < m->n; j++) {
        rm_hold *h = op->held[j] ? rm_hold_find(m->locks[j], op->owner_key[j], rm_pid()) : NULL;
        if (h)
            rm_hold_forget(m->c, h);
        op->held[j] = false;
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

/* Every lock in one request: RM_ATTEMPT_WON (every hold recorded),
   RM_ATTEMPT_BUSY (nothing kept) or an error. */
static int attempt_one_request(multi_op *op)
{
    redmutex_multi_lock *m = op->m;
    redmutex_client *c = m->c;
    rm_req req = {0};
    rm_kargs *k = calloc(m->n, sizeof *k);
    rm_acq_replies *a = calloc(m->n, sizeof *a);
    rm_acquire_verdict verdict[RM_REQ_MAX_CMDS];
    uint64_t keys[RM_REQ_MAX_CMDS];
    char nbuf[24], tbuf[24];
    const char *wait_argv[3];
    bool wait = c->opts.min_replicas > 0;
    rm_call call;
    if (!k || !a || rm_call_begin(op->err, &call, c) != 0) {
        free(k);
        free(a);
        return rm_fail(op->err, REDMUTEX_ENOMEM, "out of memory");
    }
    for (size_t j = 0; j < m->n; j++) {
        rm_acq_form form;
        req.cmds[req.ncmds++] = rm_acquire_command(m->locks[j], op->value[j], NULL, RM_ACQ_TRY, NULL, &k[j], &form);
        rm_acq_replies_init(&a[j], m->locks[j], form, (int)j, rm_lock_lease_ms(m->locks[j]));
        keys[j] = rm_order_key(m->locks[j]->name);
    }
    if (wait)
        rm_req_add_wait(&req, c, nbuf, tbuf, wait_argv);
    req.order_name = m->locks[0]->name;
    call.order_keys = keys; /* a connection left owing is ordered for every name */
    call.n_order_keys = m->n;
    rm_call_run(&call, &req, rm_command_deadline(c, wait), NULL, NULL);
    int64_t started = call.started_ns;
    bool all = true, undo[RM_REQ_MAX_CMDS];
    for (size_t j = 0; j < m->n; j++) {
        a[j].wait_replicas = wait;
        a[j].wait_index = wait ? (int)m->n : -1;
        rm_acquire_count(&a[j], &call);
        int64_t left = rm_validity_left_ns(a[j].lease_ms, rm_now_ns() - started);
        verdict[j] = rm_acquire_decide(&a[j].v, c->n, m->locks[j]->quorum, left, false,
                                       rm_call_failed(&call) + a[j].v.t.errors);
        all = all && verdict[j] == RM_VERDICT_WON;
    }
    int rc = all ? record_all(op, a, started) : not_won(op, &call, a, verdict);
    for (size_t j = 0; j < m->n; j++)
        undo[j] = rc != RM_ATTEMPT_WON && (a[j].v.t.yes > 0 || a[j].v.t.unknown_at[0]);
    call.order_keys = keys;
    call.n_order_keys = m->n;
    if (rc != RM_ATTEMPT_WON)
        undo_values(op, &call, a, undo);
    call.order_keys = NULL;
    call.n_order_keys = 0;
    rm_call_end(&call);
    free(k);
    free(a);
    return rc;
}

/* ---- one attempt, lock by lock ------------------------------------------------------ */

/* Gives back the holds an attempt won (all of them, in one request per
   RM_REQ_MAX_CMDS locks): after a failed attempt, and for a release. The
   first error in the fixed order is returned with its lock named. */
static int release_held(multi_op *op, const char *why)
{
    redmutex_multi_lock *m = op->m;
    int first = 0;
    for (size_t from = 0; from < m->n; from += RM_REQ_MAX_CMDS) {
        redmutex_lock *ls[RM_REQ_MAX_CMDS];
        char *keys[RM_REQ_MAX_CMDS];
        bool explicit_owner[RM_REQ_MAX_CMDS];
        size_t idx[RM_REQ_MAX_CMDS], k = 0;
        for (size_t j = from; j < m->n && j < from + RM_REQ_MAX_CMDS; j++)
            if (op->held[j]) {
                idx[k] = j;
                ls[k] = m->locks[j];
                keys[k] = op->owner_key[j];
                explicit_owner[k++] = op->explicit_owner;
            }
        if (k == 0)
            continue;
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
        rm_attempt_info info = {-1, false, "is held by another owner", false, NULL, false};
        int rc = rm_attempt(op->err, m->locks[j], op->owner_key[j], op->value[j], op->tried, &info);
        if (rc == RM_ATTEMPT_WON) {
            op->held[j] = true;
            continue;
        }
        op->blocker = j;
        op->ttl_ms = info.ttl_ms;
        op->split = info.split || j > 0;
        release_held(op, NULL);
        return rc;
    }
    return RM_ATTEMPT_WON;
}

static int attempt(multi_op *op)
{
    int rc = one_request(op) ? attempt_one_request(op) : attempt_each(op);
    op->tried = true;
    return rc;
}

/* ---- acquiring -------------------------------------------------------------------- */

/* Resolves the owner of each lock and its value (a fresh token for a plain
   lock's anonymous holder), as a single acquisition would. */
static int op_begin(rm_err *err, multi_op *op, redmutex_multi_lock *m, const char *owner, bool acquire)
{
    memset(op, 0, sizeof *op);
    op->err = err;
    op->m = m;
    op->explicit_owner = owner != NULL;
    op->owner_key = calloc(m->n, sizeof *op->owner_key);
    op->value = calloc(m->n, sizeof *op->value);
    op->held = calloc(m->n, sizeof *op->held);
    if (!op->owner_key || !op->value || !op->held)
        return rm_fail(err, REDMUTEX_ENOMEM, "out of memory");
    int rc = rm_client_usable(err, m->c);
    for (size_t j = 0; rc == 0 && j < m->n; j++)
        rc = acquire ? rm_acquire_prepare(err, m->locks[j], owner, op->owner_key[j], op->value[j])
                     : rm_lock_resolve_owner(err, m->locks[j], owner, op->owner_key[j]);
    return rc;
}

static void op_end(multi_op *op)
{
    free(op->owner_key);
    free(op->value);
    free(op->held);
}

/* The wait of a blocking acquisition: attempts, and pauses on the busy lock's channel. */
static int wait_loop(multi_op *op, int64_t wait_ms, rm_wait *wait)
{
    redmutex_client *c = op->m->c;
    int64_t start = rm_now_ns(), deadline = rm_deadline_after_ms(wait_ms);
    int64_t backoff = c->opts.wait_backoff_cap_ms < 50 ? c->opts.wait_backoff_cap_ms : 50;
    char channel[RM_LONG_KEY_MAX] = "";
    rm_waiter *w = NULL;
    int rc;
    while ((rc = attempt(op)) == RM_ATTEMPT_BUSY) {
        redmutex_lock *l = op->m->locks[op->blocker];
        int64_t now = rm_now_ns();
        if (now >= deadline) {
            rc = rm_fail(op->err, REDMUTEX_ETIMEDOUT, "multi-lock: lock '%s' is held by another owner; waited %" PRId64 " ms",
                         l->name, (now - start) / RM_NS_PER_MS);
            break;
        }
        char busy[RM_LONG_KEY_MAX];
        rm_lock_channel(l, op->value[op->blocker], busy);
        if (!w || strcmp(busy, channel) != 0) {
            bool first = !w;
            if (w)
                rm_waiter_end(c, w);
            w = NULL;
            memcpy(channel, busy, sizeof busy);
            int64_t sub = rm_deadline_after_ms(c->opts.command_timeout_ms);
            rm_waiter_begin(c, channel, sub < deadline ? sub : deadline, wait, &w);
            /* Listen, then try again at once: a release in between is not
               missed. (Later a new busy lock's channel is listened to, and
               the pause below still comes first.) */
            if (first)
                continue;
        }
        int64_t pause = backoff - (int64_t)rm_random_below((uint64_t)backoff / 4 + 1);
        if (op->ttl_ms >= 0 && op->ttl_ms < pause - 1)
            pause = op->ttl_ms + 1;
        if (op->split && c->opts.retry_delay_ms > 0)
            pause = (int64_t)rm_random_below((uint64_t)c->opts.retry_delay_ms) + 1;
        int64_t until = now + pause * RM_NS_PER_MS;
        bool interrupted = false;
        int r = rm_waiter_wait(c, w, until < deadline ? until : deadline, &interrupted);
        if (interrupted || !rm_client_open(c) || (c->opts.interrupt && c->opts.interrupt(c->opts.interrupt_payload))) {
            rc = !rm_client_open(c) ? rm_fail(op->err, REDMUTEX_ECLOSED, "the client was closed while waiting for a multi-lock")
                                    : rm_fail(op->err, REDMUTEX_EINTR, "waiting for a multi-lock was interrupted");
            break;
        }
        if (r == 0 && backoff < c->opts.wait_backoff_cap_ms)
            backoff = backoff * 2 > c->opts.wait_backoff_cap_ms ? c->opts.wait_backoff_cap_ms : backoff * 2;
    }
    if (w)
        rm_waiter_end(c, w);
    return rc;
}

int redmutex_multi_lock_acquire(redmutex_multi_lock *m, const char *owner, int64_t wait_ms)
{
    rm_err e_, *err = rm_err_reset(&e_);
    if (!m)
        return rm_publish(err, rm_fail(err, REDMUTEX_EINVAL, "redmutex_multi_lock_acquire: multi-lock is NULL"));
    int rc = rm_lock_check_wait(err, m->locks[0], wait_ms);
    multi_op op;
    if (rc == 0)
        rc = op_begin(err, &op, m, owner, true);
    else
        memset(&op, 0, sizeof op);
    rm_wait wait;
    memset(&wait, 0, sizeof wait);
    if (rc == 0 && wait_ms != 0)
        rc = rm_wait_begin(err, m->c, &wait);
    if (rc == 0) {
        rc = wait_ms == 0 ? attempt(&op) : wait_loop(&op, wait_ms, &wait);
        if (rc == RM_ATTEMPT_BUSY)
            rc = rm_fail(err, REDMUTEX_ETIMEDOUT, "multi-lock: lock '%s' is held by another owner",
                         m->locks[op.blocker]->name);
    }
    rm_wait_end(m->c, &wait);
    op_end(&op);
    return rm_publish(err, rc);
}

int redmutex_multi_lock_release(redmutex_multi_lock *m, const char *owner)
{
    rm_err e_, *err = rm_err_reset(&e_);
    if (!m)
        return rm_publish(err, rm_fail(err, REDMUTEX_EINVAL, "redmutex_multi_lock_release: multi-lock is NULL"));
    multi_op op;
    int rc = op_begin(err, &op, m, owner, false);
    if (rc == 0) {
        /* Each lock this owner holds through the set's handles; the others
           are not held (reported, after the rest were released). */
        size_t missing = m->n;
        for (size_t j = 0; j < m->n; j++) {
            op.held[j] = rm_lock_holds(m->locks[j], op.owner_key[j]);
            if (!op.held[j] && missing == m->n)
                missing = j;
        }
        rc = release_held(&op, "release");
        if (rc == 0 && missing < m->n)
            rc = rm_fail(err, REDMUTEX_ENOTOWNER, "multi-lock: lock '%s' is not held by this owner through its handle",
                         m->locks[missing]->name);
    }
    op_end(&op);
    return rm_publish(err, rc);
}

/* ---- pollable waits ------------------------------------------------------------------ */

typedef struct multi_wait {
    rm_err err;
    multi_op op;
} multi_wait;

static int multi_try_once(rm_err *err, void *obj, int64_t *ttl_ms, char *channel)
{
    multi_wait *mw = obj;
    mw->op.err = err;
    int rc = attempt(&mw->op);
    if (rc != RM_ATTEMPT_BUSY)
        return rc;
    redmutex_lock *l = mw->op.m->locks[mw->op.blocker];
    *ttl_ms = mw->op.split && mw->op.m->c->opts.retry_delay_ms > 0
                  ? (int64_t)rm_random_below((uint64_t)mw->op.m->c->opts.retry_delay_ms)
                  : mw->op.ttl_ms;
    rm_lock_channel(l, mw->op.value[mw->op.blocker], channel);
    return rm_fail(err, REDMUTEX_ETIMEDOUT, "multi-lock: lock '%s' is held by another owner; the wait becomes ready "
                                            "when it may be free",
                   l->name);
}

static void multi_wait_end(void *obj)
{
    multi_wait *mw = obj;
    op_end(&mw->op);
    free(mw);
}

static const rm_wait_ops multi_wait_ops = {multi_try_once, multi_wait_end};

int redmutex_multi_lock_wait_new(redmutex_wait **out, redmutex_multi_lock *m, const char *owner)
{
    rm_err e_, *err = rm_err_reset(&e_);
    if (!out || !m)
        return rm_publish(err, rm_fail(err, REDMUTEX_EINVAL, "redmutex_multi_lock_wait_new: %s is NULL", !out ? "out" : "multi-lock"));
    multi_wait *mw = calloc(1, sizeof *mw);
    if (!mw)
        return rm_publish(err, rm_fail(err, REDMUTEX_ENOMEM, "out of memory"));
    int rc = op_begin(err, &mw->op, m, owner, true);
    if (rc == 0)
        rc = rm_wait_new_custom(err, out, m->c, &multi_wait_ops, mw);
    if (rc)
        multi_wait_end(mw);
    return rm_publish(err, rc);
}
