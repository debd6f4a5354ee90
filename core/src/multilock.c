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
#include "deploy.h"
#include "slots.h"
#include "fanout.h"
#include "handle.h"
#include "holds.h"
#include "internal.h"
#include "interrupt.h"
#include "kind.h"
#include "lifetime.h"
#include "lockops.h"
#include "multilock.h"
#include "pollwait.h"
#include "quorum.h"
#include "retry.h"
#include "tally.h"
#include "waiter.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
        return rm_publish(err,
                          rm_fail(err, REDMUTEX_EINVAL, "redmutex_multi_lock_new: %s is NULL", !out ? "out" : "locks"));
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
    c->life.refs++; /* the multi-lock's: it unreferences its locks under the client's mutex */
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
        rc = acquire ? rm_acquire_owner_value(err, m->locks[j], owner, op->owner_key[j], op->value[j])
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
    rm_retry retry; /* the locks' policy (retry.c) */
    rm_retry_init(&retry, &c->opts);
    bool silent = false;
    char channel[RM_LONG_KEY_MAX] = "";
    rm_waiter *w = NULL;
    int rc;
    while ((rc = rm_multi_attempt(op)) == RM_ATTEMPT_BUSY) {
        redmutex_lock *l = op->m->locks[op->blocker];
        int64_t now = rm_now_ns();
        if (now >= deadline) {
            rc = rm_fail(op->err, REDMUTEX_ETIMEDOUT,
                         "multi-lock: lock '%s' is held by another owner; waited %" PRId64 " ms", l->name,
                         (now - start) / RM_NS_PER_MS);
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
        int64_t pause = rm_retry_pause_ms(&retry, op->ttl_ms, op->split, silent);
        bool interrupted = false;
        int r = rm_waiter_wait(c, w, rm_retry_next_due(now, pause, deadline), &interrupted);
        if (interrupted || !rm_client_open(c) || (c->opts.interrupt && c->opts.interrupt(c->opts.interrupt_payload))) {
            rc = !rm_client_open(c)
                     ? rm_fail(op->err, REDMUTEX_ECLOSED, "the client was closed while waiting for a multi-lock")
                     : rm_fail(op->err, REDMUTEX_EINTR, "waiting for a multi-lock was interrupted");
            break;
        }
        silent = r == 0; /* no news: the next pause backs off further */
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
        rc = wait_ms == 0 ? rm_multi_attempt(&op) : wait_loop(&op, wait_ms, &wait);
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
            op.held[j] = rm_hold_exists(m->locks[j], op.owner_key[j]);
            if (!op.held[j] && missing == m->n)
                missing = j;
        }
        rc = rm_multi_release_held(&op, "release");
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
    int rc = rm_multi_attempt(&mw->op);
    if (rc != RM_ATTEMPT_BUSY)
        return rc;
    redmutex_lock *l = mw->op.m->locks[mw->op.blocker];
    *ttl_ms = mw->op.split && mw->op.m->c->opts.retry_delay_ms > 0
                  ? (int64_t)rm_random_below((uint64_t)mw->op.m->c->opts.retry_delay_ms)
                  : mw->op.ttl_ms;
    rm_lock_channel(l, mw->op.value[mw->op.blocker], channel);
    return rm_fail(err, REDMUTEX_ETIMEDOUT,
                   "multi-lock: lock '%s' is held by another owner; the wait becomes ready "
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
        return rm_publish(err, rm_fail(err, REDMUTEX_EINVAL, "redmutex_multi_lock_wait_new: %s is NULL",
                                       !out ? "out" : "multi-lock"));
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
