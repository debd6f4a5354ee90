/*
 * The watchdog: one thread per client, a binary heap of holds ordered by
 * when they next need attention, on CLOCK_MONOTONIC.
 *
 *  - A hold without an explicit lease is renewed every 0.3 x lease (a third,
 *    less a margin for scheduling and the round trip). Renewals due
 *    within the same short window go out together: one RENEW script call per
 *    server carries up to RM_RENEW_BATCH locks, whatever their kind.
 *  - A hold with an explicit lease is never renewed; its heap entry is an
 *    expiry notice at the end of its validity, so the owner learns that the
 *    lease ran out while it still believed it held the lock.
 *
 * Renewal only extends a lock the owner still holds (the script compares
 * token or field first), so it can never resurrect a lost lock. A hold is
 * LOST when a majority of servers answer that it is gone, or when its
 * validity ends while renewals keep failing; it is RENEWAL_FAILING between a
 * failed renewal and then. Lost holds are never renewed again.
 */
#define _GNU_SOURCE
#include "client.h"
#include "deploy.h"
#include "events.h"
#include "fanout.h"
#include "handle.h"
#include "holds.h"
#include "internal.h"
#include "kind.h" /* each kind's tag in the RENEW script */
#include "lifetime.h"
#include "quorum.h"
#include "renew.h"
#include "resp.h"
#include "scripts.h"
#include "tally.h"
#include "watchdog.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define RM_RENEW_BATCH 1000
/* A cluster's slot map older than this is reloaded before a renewal. */
#define RM_MAP_MAX_AGE_NS (30000 * RM_NS_PER_MS)

typedef struct rm_watchdog {
    pthread_t thread;
    bool stop;
    bool detached;
    int64_t sleeping_until; /* the thread's wake-up time; INT64_MAX while it waits for work */
    rm_hold **heap;
    size_t n, cap;
    rm_hold **batch; /* the thread's work array, here so a forked child can free its copy */
} rm_watchdog;

/* Renewal interval: a third of the lease, minus a tenth of that as margin for
   scheduling and the round trip, so the TTL stays above two thirds. */
static int64_t renew_interval_ns(int64_t lease_ms) { return lease_ms * RM_NS_PER_MS * 3 / 10; }

/* ---- heap -------------------------------------------------------------- */

static void heap_set(rm_watchdog *wd, size_t i, rm_hold *h)
{
    wd->heap[i] = h;
    h->heap_index = i;
}

static void heap_up(rm_watchdog *wd, size_t i)
{
    rm_hold *h = wd->heap[i];
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (wd->heap[parent]->due_ns <= h->due_ns)
            break;
        heap_set(wd, i, wd->heap[parent]);
        i = parent;
    }
    heap_set(wd, i, h);
}

static void heap_down(rm_watchdog *wd, size_t i)
{
    rm_hold *h = wd->heap[i];
    for (;;) {
        size_t child = 2 * i + 1;
        if (child >= wd->n)
            break;
        if (child + 1 < wd->n && wd->heap[child + 1]->due_ns < wd->heap[child]->due_ns)
            child++;
        if (h->due_ns <= wd->heap[child]->due_ns)
            break;
        heap_set(wd, i, wd->heap[child]);
        i = child;
    }
    heap_set(wd, i, h);
}

static int heap_push(rm_watchdog *wd, rm_hold *h)
{
    if (wd->n == wd->cap) {
        size_t cap = wd->cap ? wd->cap * 2 : 64;
        rm_hold **heap = realloc(wd->heap, cap * sizeof *heap);
        if (!heap)
            return REDMUTEX_ENOMEM;
        wd->heap = heap;
        wd->cap = cap;
    }
    heap_set(wd, wd->n++, h);
    heap_up(wd, wd->n - 1);
    return 0;
}

static void heap_remove(rm_watchdog *wd, rm_hold *h)
{
    size_t i = h->heap_index;
    if (i == SIZE_MAX || i >= wd->n || wd->heap[i] != h)
        return;
    h->heap_index = SIZE_MAX;
    rm_hold *last = wd->heap[--wd->n];
    if (last == h)
        return;
    heap_set(wd, i, last);
    heap_up(wd, i);
    heap_down(wd, last->heap_index);
}

/* ---- events ------------------------------------------------------------ */

void rm_hold_set_state(redmutex_client *c, rm_hold *h, redmutex_state st)
{
    if (h->state == st)
        return;
    h->state = st;
    if (st == REDMUTEX_STATE_LOST)
        rm_hold_count_end(c, h, true);
    if (h->orphan)
        return; /* its handle was freed: nobody to tell */
    /* One entry for both consumers: the event fd and, when the lock has
       on_lost or the client a log, the callbacks run on the watchdog thread. */
    bool call = h->lock->opts.on_lost != NULL, log = c->stats.log != NULL;
    rm_events_push(c, h->lock, st, h->owner, call, log);
    /* Callbacks run on the watchdog thread: wake it if another thread
       noticed the change (an expiry seen by a state query, say). */
    if ((call || log) && c->holds.wd) {
        c->holds.wd->sleeping_until = 0;
        pthread_cond_signal(&c->holds.wake);
    }
}

/* Runs the callbacks due in the event queue; caller holds c->mu, which is released around each call. */
static void run_callbacks_locked(redmutex_client *c) RM_REQUIRES(c->mu)
{
    rm_callback_event e;
    while (rm_events_take_callback(c, &e)) {
        redmutex_lock *l = e.lock;
        c->life.callback_lock = l;
        c->life.callback_thread = pthread_self();
        l->refs++; /* the callback may free the handle: it stays valid until the callback returns */
        redmutex_lost_fn fn = e.call ? l->opts.on_lost : NULL;
        void *payload = l->opts.on_lost_payload;
        rm_client_unlock(c);
        if (e.log)
            rm_log_hold_state(&c->stats, e.state, l->name, e.owner);
        if (fn)
            fn(l, e.owner[0] ? e.owner : NULL, e.state, payload);
        rm_client_lock(c);
        c->life.callback_lock = NULL;
        rm_lock_unref_locked(c, l);
        pthread_cond_broadcast(&c->holds.renew_done);
    }
}

/* ---- renewal --------------------------------------------------------- */

/* Builds the RENEW request for batch[0..k) into argv and vals and runs it
   on every server (on a cluster, one call per slot on each node: *plan);
   false when memory ran out (nothing was sent). */
static bool renew_send(redmutex_client *c, rm_hold **batch, size_t k, const char **argv, char *vals, rm_call *call,
                       rm_renew_plan **plan)
{
    char lease_s[24], nkeys[24], tbuf[24];
    snprintf(lease_s, sizeof lease_s, "%lld", (long long)c->opts.watchdog_lease_ms);
    snprintf(nkeys, sizeof nkeys, "%zu", k);
    size_t argc = 1 + k + 1 + k;
    *plan = NULL;
    if (!argv || !vals)
        return false;
    argv[0] = nkeys;
    char *p = vals;
    for (size_t j = 0; j < k; j++) {
        argv[1 + j] = batch[j]->lock->name;
        size_t len = strlen(batch[j]->value);
        p[0] = rm_kind_renew_tag(batch[j]->lock->kind);
        memcpy(p + 1, batch[j]->value, len + 1);
        argv[2 + k + j] = p;
        p += len + 2;
    }
    argv[1 + k] = lease_s;
    rm_req req = {0};
    req.cmds[req.ncmds++] = (rm_cmd){RM_SCRIPT_RENEW, (int)argc, argv, NULL};
    /* WAIT asks each node for no more replicas than it has (deploy.h). */
    const char *wait_argv[3] = {"WAIT", RM_ARG_REPLICAS, tbuf};
    int64_t ms = c->opts.command_timeout_ms;
    if (c->opts.min_replicas > 0) {
        snprintf(tbuf, sizeof tbuf, "%lld", (long long)c->opts.replica_timeout_ms);
        req.cmds[req.ncmds++] = (rm_cmd){-1, 3, wait_argv, NULL};
        ms += c->opts.replica_timeout_ms;
    }
    /* A renewal that has not answered when a hold's validity ends cannot
       save it: stop waiting then, so LOST is reported at validity end and
       not a command timeout later. */
    int64_t deadline = rm_deadline_after_ms(ms);
    for (size_t j = 0; j < k; j++)
        if (batch[j]->validity_end_ns < deadline)
            deadline = batch[j]->validity_end_ns;
    /* A renewal left unanswered on a server must run there before a later
       release of any of these locks (fanout.h, order_keys). Without memory
       for the keys it is sent unordered: a late renewal of a released token
       finds nothing to renew. */
    if (atomic_load(&c->pool.has_cluster) ? !(*plan = rm_renew_plan_make(c, batch, k, &req, lease_s, call))
                                          : rm_call_begin(NULL, call, c) != 0)
        return false;
    /* A renewal must end within its timeout even on a fresh connection:
       the lock's validity does not wait for a slow connect. */
    call->strict_deadline = true;
    uint64_t *keys = malloc(k * sizeof *keys);
    for (size_t j = 0; keys && j < k; j++)
        keys[j] = rm_order_key(batch[j]->lock->name);
    call->order_keys = keys;
    call->n_order_keys = keys ? k : 0;
    rm_call_run(call, &req, deadline, call->n > 1 ? rm_call_only_stalls_left : NULL, NULL);
    if (*plan) /* a cluster's ASKs followed at once, its map looked at after trouble */
        rm_renew_plan_follow(*plan, call, deadline);
    call->order_keys = NULL;
    call->n_order_keys = 0;
    free(keys);
    return true;
}

/* Hold j of a renewal batch of k. */
typedef struct renew_item {
    const redmutex_client *c;
    const rm_hold *h;
    size_t j, k;
} renew_item;

/* Server i's vote for hold j (rm_vote_fn): renewed in the life that granted
   it (yes), answered otherwise (no); a malformed answer, or one the
   replicas did not confirm, is no vote. Caller holds c->mu. */
static rm_vote renew_vote(void *ud, const rm_slot *s, size_t i, const rm_reply *r, rm_err *e, bool *unknown)
{
    const renew_item *it = ud;
    const redmutex_client *c = it->c;
    (void)e;
    (void)unknown;
    if (r->type != RM_REPLY_ARRAY || r->elements != it->k || r->element[it->j]->type != RM_REPLY_INTEGER)
        return RM_VOTE_NONE;
    if (c->opts.min_replicas > 0) {
        const rm_reply *w = s->replies[1];
        if (!w || w->type != RM_REPLY_INTEGER || w->integer < s->wait_need)
            return RM_VOTE_NONE;
    }
    /* A server restarted since it granted the lock no longer counts. */
    bool same_life = it->h->generations[i] == c->pool.servers[i].generation + 1;
    return r->element[it->j]->integer == 1 && same_life ? RM_VOTE_YES : RM_VOTE_NO;
}

/* Whether server i answers from the life that granted the hold (rm_renew_plan_count's test). */
static bool same_life(void *ud, size_t i)
{
    const renew_item *it = ud;
    return it->h->generations[i] == it->c->pool.servers[i].generation + 1;
}

/* A cluster moved h's slot: renewed again at once on the new owner (the map
   knows it now), not counted as a failure. (A few milliseconds later: a
   cluster that sends MOVED back and forth while it settles must not make
   the watchdog spin.) Caller holds c->mu. */
static void renew_again(redmutex_client *c, rm_hold *h, int64_t now) RM_REQUIRES(c->mu)
{
    h->renewing = false;
    if (h->state == REDMUTEX_STATE_LOST || h->forgetting)
        return;
    h->due_ns = now + 5 * RM_NS_PER_MS;
    if (c->holds.wd && h->heap_index == SIZE_MAX && heap_push(c->holds.wd, h) != 0)
        rm_hold_set_state(c, h, REDMUTEX_STATE_RENEWAL_FAILING);
}

/* Records a renewal's outcome in h and schedules its next one. Caller holds c->mu. */
static void renew_settle(redmutex_client *c, rm_hold *h, size_t yes, size_t no, int64_t started, int64_t now)
    RM_REQUIRES(c->mu)
{
    int64_t lease = c->opts.watchdog_lease_ms;
    h->renewing = false;
    if (h->state == REDMUTEX_STATE_LOST || h->forgetting)
        return;                 /* a hold being released or freed gets no news (and no callback) */
    size_t q = h->lock->quorum; /* a semaphore's may be more than the majority */
    int outcome = yes >= q                                     ? REDMUTEX_RENEWAL_RENEWED
                  : no > c->n - q || now >= h->validity_end_ns ? REDMUTEX_RENEWAL_LOST
                                                               : REDMUTEX_RENEWAL_FAILED;
    rm_stats_renewal(&c->stats, outcome);
    if (outcome == REDMUTEX_RENEWAL_RENEWED) {
        h->validity_end_ns = rm_validity_end_ns(started, lease);
        h->extensions++;
        rm_hold_set_state(c, h, REDMUTEX_STATE_HELD);
        h->due_ns = started + renew_interval_ns(lease);
    } else if (outcome == REDMUTEX_RENEWAL_LOST) {
        rm_hold_set_state(c, h, REDMUTEX_STATE_LOST);
        return;
    } else {
        rm_hold_set_state(c, h, REDMUTEX_STATE_RENEWAL_FAILING);
        int64_t retry = now + (lease / 10 < 50 ? 50 : lease / 10) * RM_NS_PER_MS;
        h->due_ns = retry < h->validity_end_ns ? retry : h->validity_end_ns;
    }
    if (c->holds.wd && h->heap_index == SIZE_MAX && heap_push(c->holds.wd, h) != 0)
        rm_hold_set_state(c, h, REDMUTEX_STATE_RENEWAL_FAILING);
}

/* Renews batch[0..k) on all servers and records the outcome. Called without c->mu. */
static void renew_batch(redmutex_client *c, rm_hold **batch, size_t k)
{
    const char **argv = malloc((1 + k + 1 + k) * sizeof *argv);
    size_t total = 0;
    for (size_t j = 0; j < k; j++)
        total += strlen(batch[j]->value) + 2;
    char *vals = malloc(total ? total : 1);
    /* A cluster's map is looked at again now and then, so that a failover
       nobody's request ran into is noticed here, off the callers' path. */
    for (size_t i = 0; atomic_load(&c->pool.has_cluster) && i < c->n; i++)
        rm_deploy_refresh_stale(NULL, c, i, RM_MAP_MAX_AGE_NS, rm_deadline_after_ms(c->opts.command_timeout_ms));
    rm_call call;
    rm_renew_plan *plan;
    bool ran = renew_send(c, batch, k, argv, vals, &call, &plan);
    int64_t now = rm_now_ns();
    int64_t started = ran ? call.started_ns : now;
    rm_client_lock(c);
    for (size_t j = 0; j < k; j++) {
        rm_tally t;
        rm_tally_init(&t);
        renew_item it = {c, batch[j], j, k};
        rm_tally_spec spec = {"renew", batch[j]->lock->name, 0, false, renew_vote, &it};
        bool again = false;
        if (plan)
            rm_renew_plan_count(plan, &call, j, &t.yes, &t.no, &again, same_life, &it);
        else if (ran)
            rm_tally_call(&t, &call, &spec);
        if (again && t.yes < c->quorum)
            renew_again(c, batch[j], now);
        else
            renew_settle(c, batch[j], t.yes, t.no, started, now);
    }
    pthread_cond_broadcast(&c->holds.renew_done);
    rm_client_unlock(c);
    if (ran)
        rm_call_end(&call);
    rm_renew_plan_free(plan);
    free(argv);
    free(vals);
}

/*
 * Takes the holds due now (and watchdog renewals due within `window`) off
 * the heap into batch: returns how many need a renewal. Expiry notices,
 * caps and orphans are dealt with on the way. Caller holds c->mu.
 */
static size_t take_due(redmutex_client *c, rm_watchdog *wd, rm_hold **batch, int64_t now, int64_t window)
    RM_REQUIRES(c->mu)
{
    size_t k = 0;
    while (wd->n > 0 && k < RM_RENEW_BATCH) {
        rm_hold *h = wd->heap[0];
        bool due = h->due_ns <= now;
        if (!due && !(h->watchdog && !h->renew_stopped && h->due_ns <= now + window))
            break;
        heap_remove(wd, h);
        if (h->orphan && !h->busy && (h->state == REDMUTEX_STATE_LOST || now >= h->validity_end_ns)) {
            rm_hold_destroy(c, h); /* a freed handle's hold ran out: nothing is left to release */
            continue;
        }
        redmutex_state st = h->state;
        if (st == REDMUTEX_STATE_LOST)
            continue;
        if (now >= h->validity_end_ns) {
            /* Validity is over: whatever the servers say now, the lock
               was not known to be held for a while. */
            rm_hold_set_state(c, h, REDMUTEX_STATE_LOST);
            continue;
        }
        if (!h->watchdog || h->renew_stopped) {
            /* An expiry notice that came early (extended since). */
            h->due_ns = h->validity_end_ns;
            heap_push(wd, h);
            continue;
        }
        if (now >= h->hold_deadline_ns ||
            (h->lock->opts.max_extensions && h->extensions >= h->lock->opts.max_extensions)) {
            /* The cap is reached: let the lease run out, then report it. */
            h->renew_stopped = true;
            h->due_ns = h->validity_end_ns;
            heap_push(wd, h);
            continue;
        }
        h->renewing = true;
        batch[k++] = h;
    }
    return k;
}

/* The thread's end: a detached watchdog (shutdown gave up waiting for it)
   frees itself. Caller holds c->mu; it is released. */
static void watchdog_exit(redmutex_client *c, rm_watchdog *wd) RM_RELEASES(c->mu)
{
    free(wd->batch);
    wd->batch = NULL;
    bool detached = wd->detached;
    if (detached) {
        /* Orphans it was renewing are its to drop. */
        rm_orphans_drop_locked(c);
        c->holds.wd = NULL;
        for (size_t i = 0; i < wd->n; i++)
            wd->heap[i]->heap_index = SIZE_MAX;
    }
    rm_client_unlock(c);
    if (detached) {
        free(wd->heap);
        free(wd);
    }
}

static void *watchdog_main(void *arg)
{
    redmutex_client *c = arg;
    rm_client_lock(c);
    rm_watchdog *wd = c->holds.wd;
    rm_hold **batch = malloc(RM_RENEW_BATCH * sizeof *batch);
    wd->batch = batch;
    /* Renewals due within this window join the current batch: renewing a
       little early costs nothing and saves round trips. */
    int64_t window = c->opts.watchdog_lease_ms * RM_NS_PER_MS / 10;
    while (!wd->stop && batch) {
        rm_holds_catch_up_locked(c);     /* a restart the pool recorded (it broadcast c->holds.wake) */
        rm_holds_follow_moves_locked(c); /* a failover the pool counted (likewise) */
        run_callbacks_locked(c);
        if (wd->stop)
            break;
        /* A restart or failover recorded while a callback ran (c->mu
           released) broadcast to nobody: catch up before sleeping. */
        if (c->pool.restarts != c->holds.restarts_seen || c->pool.moves != c->holds.moves_seen)
            continue;
        if (wd->n == 0) {
            wd->sleeping_until = INT64_MAX;
            pthread_cond_wait(&c->holds.wake, &c->mu);
            continue;
        }
        int64_t now = rm_now_ns();
        rm_hold *top = wd->heap[0];
        if (top->due_ns > now) {
            wd->sleeping_until = top->due_ns;
            struct timespec ts = {top->due_ns / 1000000000, top->due_ns % 1000000000};
            pthread_cond_timedwait(&c->holds.wake, &c->mu, &ts);
            continue;
        }
        wd->sleeping_until = 0; /* working: it looks at the heap again before sleeping */
        size_t k = take_due(c, wd, batch, now, window);
        if (k == 0)
            continue;
        rm_client_unlock(c);
        renew_batch(c, batch, k);
        rm_client_lock(c);
    }
    watchdog_exit(c, wd);
    rm_client_unref(c);
    return NULL;
}

static rm_watchdog *ensure_watchdog(redmutex_client *c) RM_REQUIRES(c->mu)
{
    if (c->holds.wd)
        return c->holds.wd;
    rm_watchdog *wd = calloc(1, sizeof *wd);
    if (!wd)
        return NULL;
    wd->sleeping_until = 0; /* starting: it looks at the heap before sleeping */
    if (rm_holds_track_moves(c) != 0) {
        free(wd);
        return NULL;
    }
    c->holds.wd = wd;
    if (rm_thread_start(&wd->thread, NULL, watchdog_main, c) != 0) {
        c->holds.wd = NULL;
        free(wd);
        return NULL;
    }
    c->life.refs++; /* the thread's reference */
    return wd;
}

int rm_watchdog_schedule(rm_err *err, redmutex_client *c, rm_hold *h)
{
    if (c->life.closed || h->pid != rm_pid())
        return 0;
    if (h->renewing)
        return 0; /* the renewal in flight reschedules it */
    rm_watchdog *wd = ensure_watchdog(c);
    if (!wd)
        return rm_fail(err, REDMUTEX_ENOMEM, "cannot start the watchdog thread");
    heap_remove(wd, h);
    int64_t now = rm_now_ns();
    if (h->watchdog && !h->renew_stopped)
        h->due_ns = now + renew_interval_ns(h->lease_ms);
    else
        h->due_ns = h->validity_end_ns;
    if (heap_push(wd, h) != 0)
        return rm_fail(err, REDMUTEX_ENOMEM, "out of memory");
    /* Wake the thread only if it would otherwise sleep past this entry
       (an entry removed early just makes it wake for nothing). */
    if (h->due_ns < wd->sleeping_until) {
        wd->sleeping_until = h->due_ns;
        pthread_cond_signal(&c->holds.wake);
    }
    return 0;
}

void rm_watchdog_renew_by(redmutex_client *c, rm_hold *h, int64_t due_ns)
{
    rm_watchdog *wd = c->holds.wd;
    if (!wd || h->renewing || h->heap_index == SIZE_MAX || h->due_ns <= due_ns)
        return;
    heap_remove(wd, h);
    h->due_ns = due_ns;
    if (heap_push(wd, h) == 0 && due_ns < wd->sleeping_until) {
        wd->sleeping_until = due_ns;
        pthread_cond_signal(&c->holds.wake);
    }
}

void rm_watchdog_cancel(redmutex_client *c, rm_hold *h)
{
    if (c->holds.wd)
        heap_remove(c->holds.wd, h);
    h->heap_index = SIZE_MAX;
    while (h->renewing)
        pthread_cond_wait(&c->holds.renew_done, &c->mu);
    /* A renewal that finished meanwhile may have put it back. */
    if (c->holds.wd)
        heap_remove(c->holds.wd, h);
}

void rm_watchdog_stop(redmutex_client *c, int64_t deadline_ns)
{
    rm_client_lock(c);
    rm_watchdog *wd = c->holds.wd;
    if (!wd) {
        rm_client_unlock(c);
        return;
    }
    wd->stop = true;
    pthread_cond_signal(&c->holds.wake);
    rm_client_unlock(c);
    if (rm_join_until(wd->thread, deadline_ns)) {
        rm_client_lock(c);
        c->holds.wd = NULL;
        for (size_t i = 0; i < wd->n; i++)
            wd->heap[i]->heap_index = SIZE_MAX;
        rm_client_unlock(c);
        free(wd->heap);
        free(wd);
    } else {
        rm_client_lock(c);
        wd->detached = true;
        pthread_detach(wd->thread);
        rm_client_unlock(c);
    }
}

void rm_watchdog_forget(redmutex_client *c)
{
    /* The parent's schedule is gone with its thread: no hold is scheduled or
       being renewed in the child. */
    for (rm_hold *h = c->holds.all; h; h = h->next_in_client) {
        h->heap_index = SIZE_MAX;
        h->renewing = false;
    }
    rm_watchdog *wd = c->holds.wd;
    if (!wd)
        return;
    c->holds.wd = NULL;
    c->life.refs--; /* the thread did not survive fork */
    free(wd->batch);
    free(wd->heap);
    free(wd);
    /* Events of the parent's holds are not for the child: rm_events_after_fork empties the queue. */
    c->life.callback_lock = NULL;
}
