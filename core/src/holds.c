/*
 * The hold registry and the rules for changing a hold (holds.h).
 */
#define _GNU_SOURCE
#include "client.h"
#include "handle.h"
#include "holds.h"
#include "internal.h"
#include "kind.h"
#include "lifetime.h"
#include "quorum.h"
#include "sentinel.h"
#include "watchdog.h"

#include <stdlib.h>
#include <string.h>

void rm_hold_count_end(redmutex_client *c, rm_hold *h, bool lost)
{
    /* A hold inherited through fork() is the parent's to count. */
    if (h->counted && h->pid == rm_pid()) {
        h->counted = false;
        rm_stats_hold_end(&c->stats, h->lock->kind, h->acquired_ns, lost);
    }
}

void rm_hold_destroy(redmutex_client *c, rm_hold *h)
{
    redmutex_lock *l = h->lock;
    rm_hold_count_end(c, h, false);
    for (rm_hold **p = &l->holds; *p; p = &(*p)->next_in_lock)
        if (*p == h) {
            *p = h->next_in_lock;
            break;
        }
    if (h->prev_in_client)
        h->prev_in_client->next_in_client = h->next_in_client;
    else if (c->holds.all == h)
        c->holds.all = h->next_in_client;
    if (h->next_in_client)
        h->next_in_client->prev_in_client = h->prev_in_client;
    free(h);
    rm_lock_unref_locked(c, l); /* the hold's reference */
}

void rm_hold_unbusy(redmutex_client *c, rm_hold *h)
{
    h->busy = false;
    pthread_cond_broadcast(&c->holds.renew_done);
}

void rm_hold_forget(redmutex_client *c, rm_hold *h)
{
    h->busy = true;
    h->forgetting = true;
    rm_watchdog_cancel(c, h); /* may wait for a renewal in flight */
    rm_hold_destroy(c, h);
    pthread_cond_broadcast(&c->holds.renew_done);
}

rm_hold *rm_hold_find(redmutex_lock *l, const char *owner, pid_t pid)
{
    for (rm_hold *h = l->holds; h; h = h->next_in_lock)
        if (h->pid == pid && !h->forgetting && strcmp(h->owner, owner) == 0)
            return h;
    return NULL;
}

/* Whether h is a hold, in process pid, of l's name and kind stored under
   `value`: one field on the servers. */
static bool same_field(const rm_hold *h, const redmutex_lock *l, const char *value, pid_t pid)
{
    return h->pid == pid && !h->forgetting && h->lock->kind == l->kind && strcmp(h->value, value) == 0 &&
           strcmp(h->lock->name, l->name) == 0;
}

rm_hold *rm_hold_find_shared(redmutex_lock *l, const char *value, pid_t pid)
{
    for (rm_hold *h = l->c->holds.all; h; h = h->next_in_client)
        if (h->lock != l && same_field(h, l, value, pid))
            return h;
    return NULL;
}

bool rm_hold_value_live(redmutex_lock *l, const char *value)
{
    redmutex_client *c = l->c;
    pid_t pid = rm_pid();
    bool live = false;
    rm_client_lock(c);
    for (rm_hold *h = c->holds.all; h && !live; h = h->next_in_client)
        live = same_field(h, l, value, pid) && rm_hold_state(c, h, rm_now_ns()) != REDMUTEX_STATE_LOST;
    rm_client_unlock(c);
    return live;
}

rm_hold *rm_hold_find_by_id(redmutex_lock *l, uint64_t id)
{
    for (rm_hold *h = l->holds; h; h = h->next_in_lock)
        if (h->id == id && !h->forgetting)
            return h;
    return NULL;
}

rm_hold *rm_hold_claim(redmutex_client *c, redmutex_lock *l, rm_hold *h)
{
    rm_holds_catch_up_locked(c);
    uint64_t id = h->id;
    while (h && h->busy) {
        pthread_cond_wait(&c->holds.renew_done, &c->mu);
        h = rm_hold_find_by_id(l, id);
    }
    if (h)
        h->busy = true;
    return h;
}

rm_hold *rm_hold_find_foreign(redmutex_lock *l, const char *owner, pid_t pid)
{
    for (rm_hold *h = l->holds; h; h = h->next_in_lock)
        if (h->pid != pid && strcmp(h->owner, owner) == 0)
            return h;
    return NULL;
}

redmutex_state rm_hold_state(redmutex_client *c, rm_hold *h, int64_t now_ns)
{
    rm_holds_catch_up_locked(c);
    /* The lost-lock callback fires either way: the watchdog's expiry notice
       or this check, whichever sees the end of validity first. */
    if ((h->state == REDMUTEX_STATE_HELD || h->state == REDMUTEX_STATE_RENEWAL_FAILING) && now_ns >= h->validity_end_ns)
        rm_hold_set_state(c, h, REDMUTEX_STATE_LOST);
    return h->state;
}

bool rm_hold_exists(redmutex_lock *l, const char *owner)
{
    rm_client_lock(l->c);
    bool held = rm_hold_find(l, owner, rm_pid()) != NULL;
    rm_client_unlock(l->c);
    return held;
}

/* A new hold of owner (value on the servers), linked into the handle and the client. NULL: no memory. */
static rm_hold *hold_new(redmutex_lock *l, const char *owner, const char *value, pid_t pid, int64_t started_ns)
{
    redmutex_client *c = l->c;
    size_t olen = strlen(owner) + 1, vlen = strlen(value) + 1;
    /* One allocation: the hold, then per-server generations, owner and value. */
    rm_hold *h = calloc(1, sizeof *h + c->n * sizeof(uint64_t) + olen + vlen);
    if (!h)
        return NULL;
    h->lock = l;
    l->refs++;
    h->id = ++c->holds.next_id;
    h->heap_index = SIZE_MAX;
    h->pid = pid;
    h->generations = (uint64_t *)(h + 1);
    h->owner = (char *)(h->generations + c->n);
    h->value = h->owner + olen;
    memcpy(h->owner, owner, olen);
    memcpy(h->value, value, vlen);
    h->next_in_lock = l->holds;
    l->holds = h;
    h->next_in_client = c->holds.all;
    if (c->holds.all)
        c->holds.all->prev_in_client = h;
    c->holds.all = h;
    h->acquired_ns = started_ns;
    h->hold_deadline_ns = l->opts.max_hold_ms ? started_ns + l->opts.max_hold_ms * RM_NS_PER_MS : INT64_MAX;
    return h;
}

/*
 * The hold owner has through l already, if any. A plain lock shared by
 * threads: another thread's release of the previous hold deleted the key (or
 * this SET NX could not have succeeded) and is about to forget it. Wait for
 * that, not ELOST.
 */
static rm_hold *hold_settled(redmutex_lock *l, const char *owner, pid_t pid) RM_REQUIRES(l->c->mu)
{
    rm_hold *h = rm_hold_find(l, owner, pid);
    while (h && h->busy && !rm_kind_of(l)->reentrant) {
        uint64_t id = h->id;
        pthread_cond_wait(&l->c->holds.renew_done, &l->c->mu);
        h = rm_hold_find_by_id(l, id);
        if (!h || h->forgetting)
            h = rm_hold_find(l, owner, pid);
    }
    return h;
}

int rm_hold_record(rm_err *err, redmutex_lock *l, const char *owner, const char *value, int64_t started_ns,
                   const rm_votes *v)
{
    redmutex_client *c = l->c;
    int64_t lease = rm_lock_lease_ms(l);
    pid_t pid = rm_pid();
    if (c->life.closed)
        return rm_fail(err, REDMUTEX_ECLOSED, "the client was closed while lock '%s' was being acquired", l->name);
    rm_hold *h = hold_settled(l, owner, pid);
    if (h && (!rm_kind_of(l)->reentrant || rm_hold_state(c, h, rm_now_ns()) == REDMUTEX_STATE_LOST))
        /* A plain lock is held once per owner, and a lost hold is not
           continued: the caller must release the old one first. */
        return rm_fail(err, REDMUTEX_ELOST, "lock '%s': this owner's earlier hold was lost; release it first", l->name);
    bool created = !h;
    if (!h) {
        if (!(h = hold_new(l, owner, value, pid, started_ns)))
            return rm_fail(err, REDMUTEX_ENOMEM, "out of memory");
        h->fence = v->fence;
    }
    /* The life of each server that may hold it now (granted, or its answer
       unknown); 0 for servers that refused. A server that restarts later
       stops counting for this hold, and a release goes only where it may
       hold. A nested acquisition adds the servers that granted it. */
    for (size_t i = 0; i < c->n; i++)
        if (v->t.yes_at[i] || v->t.unknown_at[i])
            h->generations[i] = c->pool.servers[i].generation + 1;
    /* Levels taken through this handle: the server's count also holds the
       levels of the same owner's other handles (one thread, one field), and
       a release through this handle must only give back its own. */
    h->count = created ? 1 : h->count + 1;
    h->lease_ms = lease;
    h->watchdog = l->opts.lease_ms == 0;
    int64_t end = rm_validity_end_ns(started_ns, v->granted_ttl >= 0 ? v->granted_ttl : lease);
    /* handed over with a short TTL (kind.h, fair): valid that long. A
       nested level keeps what the levels before it had (an extension, say):
       no script lowers the key's TTL below a validity it granted (lua.h). */
    h->validity_end_ns = created || end > h->validity_end_ns ? end : h->validity_end_ns;
    h->state = REDMUTEX_STATE_HELD;
    h->release_id[0] = '\0'; /* a latch from an earlier, unfinished release must not answer the next one */
    int rc = rm_watchdog_schedule(err, c, h);
    if (rc == 0 && v->granted_ttl >= 0) /* ... and extended to the full lease a third of that later */
        rm_watchdog_renew_by(c, h, rm_renew_due_ns(started_ns, v->granted_ttl));
    if (rc != 0 && created)
        rm_hold_destroy(c, h); /* the caller undoes the acquisition on the servers */
    if (rc == 0 && created) {
        h->counted = true;
        rm_stats_hold_begin(&c->stats);
    }
    return rc;
}

/*
 * Asks for the renewal, now, of every renewed hold server i granted (its
 * deployment's master moved). Caller holds c->mu.
 */
/* Deployment i has a new master: the watchdog renews every hold there now. */
static void renew_now(redmutex_client *c, size_t i) RM_REQUIRES(c->mu)
{
    pid_t pid = rm_pid();
    int64_t now = rm_now_ns();
    for (rm_hold *h = c->holds.all; h; h = h->next_in_client)
        if (h->pid == pid && !h->forgetting && h->watchdog && !h->renew_stopped && h->generations[i] != 0 &&
            h->state != REDMUTEX_STATE_LOST)
            rm_watchdog_renew_by(c, h, now);
}

void rm_holds_follow_moves_locked(redmutex_client *c)
{
    if (c->holds.moves_seen == c->pool.moves || !c->holds.switches_seen)
        return;
    c->holds.moves_seen = c->pool.moves;
    for (size_t i = 0; i < c->n; i++) {
        uint64_t switches = rm_sentinel_switches(c, i);
        if (switches != c->holds.switches_seen[i]) {
            c->holds.switches_seen[i] = switches;
            renew_now(c, i);
        }
    }
}

int rm_holds_track_moves(redmutex_client *c)
{
    if (c->holds.switches_seen)
        return 0;
    uint64_t *seen = calloc(c->n, sizeof *seen);
    if (!seen)
        return -1;
    for (size_t i = 0; i < c->n; i++)
        seen[i] = rm_sentinel_switches(c, i);
    c->holds.switches_seen = seen;
    c->holds.moves_seen = c->pool.moves; /* no hold was renewed before this: nothing to catch up */
    return 0;
}

void rm_holds_free(redmutex_client *c) { free(c->holds.switches_seen); }

/*
 * A restart without persistence loses every lock the server held, and a
 * server that may have lost a lock cannot vouch for it. The pool records each
 * restart (a new run_id: the server's generation moves, c->pool.restarts counts
 * up, c->holds.wake is broadcast); this catches up with those it has not seen:
 * holds granted by a server whose generation has moved since, and now with
 * fewer than a majority of servers in the life that granted them, are lost.
 * It runs before a hold's state is read or a hold is claimed, and on the
 * watchdog thread that the broadcast wakes, so a hold is lost at the first
 * request that reaches the restarted server, not at its next renewal or the
 * end of its lease. Caller holds c->mu.
 */
void rm_holds_catch_up_locked(redmutex_client *c)
{
    if (c->holds.restarts_seen == c->pool.restarts)
        return;
    c->holds.restarts_seen = c->pool.restarts;
    pid_t pid = rm_pid();
    for (rm_hold *h = c->holds.all; h; h = h->next_in_client) {
        if (h->pid != pid || h->forgetting || h->state == REDMUTEX_STATE_LOST)
            continue;
        size_t granted = 0, alive = 0;
        for (size_t j = 0; j < c->n; j++) {
            granted += h->generations[j] != 0;
            alive += h->generations[j] == c->pool.servers[j].generation + 1;
        }
        if (alive < granted && alive < h->lock->quorum)
            rm_hold_set_state(c, h, REDMUTEX_STATE_LOST);
    }
}
