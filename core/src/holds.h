/*
 * The hold registry (holds.c): what this process holds, per handle and per
 * client, and the rules for changing a hold.
 *
 * A hold is changed by one operation at a time: the thread that sets `busy`
 * (release, extend, forget) owns it until it clears it; other operations on
 * the same hold wait for that (rm_hold_claim) or skip it. Waiting for a
 * renewal in flight drops c->mu, so ownership, not the mutex, is what keeps
 * a hold alive across it. Every function here is called with c->mu held,
 * unless it says otherwise.
 *
 * Layering: above quorum (votes) and the watchdog's schedule, below the lock
 * operations (attempt.c, acquire.c, release.c, extend.c, query.c).
 */
#ifndef REDMUTEX_HOLDS_H
#define REDMUTEX_HOLDS_H

#include "handle.h"
#include "quorum.h"

typedef struct rm_hold {
    redmutex_lock *lock;
    uint64_t id;     /* unique per client: finds the hold again after a round trip */
    bool busy;       /* one thread's release, extend or forget owns it; others wait or skip */
    bool forgetting; /* being destroyed: invisible to lookups, left alone by the watchdog */
    bool orphan;     /* its handle was freed: not renewed, released by a close, dropped at expiry */
    /* The owner as the caller named it: "" for a plain lock's anonymous
       holder, else the explicit owner or the thread's default owner id. */
    char *owner;
    /* What is stored in Redis: the token (plain) or the hash field (rlock). */
    char *value;
    /* Per server: its generation + 1 when the lock was acquired. */
    uint64_t *generations;
    int64_t count; /* hold count as last reported by the servers */
    int64_t fence; /* fencing token (0 when fencing is off) */
    int64_t lease_ms;
    bool watchdog;       /* renewed by the watchdog */
    int64_t acquired_ns; /* when the winning acquisition was sent */
    int64_t validity_end_ns;
    int64_t hold_deadline_ns; /* max_hold_ms cap, INT64_MAX when none */
    int64_t extensions;
    redmutex_state state;
    pid_t pid;           /* process that acquired it */
    char release_id[33]; /* latch id of a release whose outcome is unknown */
    /* watchdog */
    size_t heap_index; /* position in the watchdog heap, SIZE_MAX when absent */
    int64_t due_ns;
    bool renewing;      /* a renewal for this hold is in flight */
    bool renew_stopped; /* a cap was reached: no more renewals, expiry notice only */
    bool counted;       /* in the client's statistics as held (stats.c) until it ends or is lost */
    struct rm_hold *next_in_lock;
    struct rm_hold *next_in_client, *prev_in_client;
} rm_hold;

/**
 * Catches up with the server restarts the pool recorded since the last call
 * (c->pool.restarts): holds that now have fewer than a majority of servers in the
 * life that granted them are lost. Cheap when nothing restarted. Runs before
 * a hold's state is read, a hold claimed or a freed handle's hold settled,
 * and on the watchdog thread, which the pool wakes (c->holds.wake). Caller holds
 * c->mu.
 */
void rm_holds_catch_up_locked(redmutex_client *c) RM_REQUIRES(c->mu);
/**
 * Catches up with the failovers the pool counted (c->pool.moves; it
 * broadcast c->holds.wake): every hold on a deployment whose master moved
 * since is renewed at once, so a lock the new master lacks is reported LOST
 * now, not at its next renewal. Runs on the watchdog thread. Caller holds
 * c->mu.
 */
void rm_holds_follow_moves_locked(redmutex_client *c) RM_REQUIRES(c->mu);
/** From now on, failovers are followed (the watchdog starts): 0, or -1 out of memory. Caller holds c->mu. */
int rm_holds_track_moves(redmutex_client *c) RM_REQUIRES(c->mu);
/** Frees what the registry allocated for itself (the client's end). */
void rm_holds_free(redmutex_client *c);
/** Statistics: h's hold ends (released, forgotten, or lost): counted once, by this process. */
void rm_hold_count_end(redmutex_client *c, rm_hold *h, bool lost) RM_REQUIRES(c->mu);
/** Unlinks and frees h; caller holds c->mu and h is not scheduled. */
void rm_hold_destroy(redmutex_client *c, rm_hold *h) RM_REQUIRES(c->mu);

/** This process's hold of owner through l (not one being forgotten), or NULL. */
rm_hold *rm_hold_find(redmutex_lock *l, const char *owner, pid_t pid) RM_REQUIRES(l->c->mu);
/** Another handle's hold, in this process, of the same lock name, kind and
    owner's value (one field on the servers, shared by both handles). */
rm_hold *rm_hold_find_shared(redmutex_lock *l, const char *value, pid_t pid) RM_REQUIRES(l->c->mu);
/** Whether any handle of this client (l's included) has a live (not LOST)
    hold, in this process, of l's name and kind with this value. Takes c->mu. */
bool rm_hold_value_live(redmutex_lock *l, const char *value) RM_EXCLUDES(l->c->mu);
/** The hold with this id (not one being forgotten), or NULL: finds a hold again after a round trip. */
rm_hold *rm_hold_find_by_id(redmutex_lock *l, uint64_t id) RM_REQUIRES(l->c->mu);
/** A hold for this owner made by another process (inherited through fork), or NULL. */
rm_hold *rm_hold_find_foreign(redmutex_lock *l, const char *owner, pid_t pid) RM_REQUIRES(l->c->mu);
/** Waits until nobody owns h, then takes it (busy). NULL if it was forgotten meanwhile. */
rm_hold *rm_hold_claim(redmutex_client *c, redmutex_lock *l, rm_hold *h) RM_REQUIRES(c->mu);
/** Clears busy and lets threads waiting for the hold look again. */
void rm_hold_unbusy(redmutex_client *c, rm_hold *h) RM_REQUIRES(c->mu);
/** Removes h from the watchdog and frees it. The caller owns h (busy) or has the handle to itself. */
void rm_hold_forget(redmutex_client *c, rm_hold *h) RM_REQUIRES(c->mu);
/** Current state, turning HELD/FAILING into LOST once validity has run out (whoever notices first). */
redmutex_state rm_hold_state(redmutex_client *c, rm_hold *h, int64_t now_ns) RM_REQUIRES(c->mu);
/** Whether this process holds the lock for owner through l (reentrancy). Takes c->mu itself. */
bool rm_hold_exists(redmutex_lock *l, const char *owner) RM_EXCLUDES(l->c->mu);
/**
 * Records a successful acquisition by owner (value on the servers), sent at
 * `started_ns`, with the votes that granted it, and schedules its renewal or
 * expiry notice. 0, REDMUTEX_ECLOSED, REDMUTEX_ELOST (the owner's earlier
 * hold was lost, or a plain lock's is still there), REDMUTEX_ENOMEM: then
 * the caller undoes the acquisition on the servers.
 */
int rm_hold_record(rm_err *err, redmutex_lock *l, const char *owner, const char *value, int64_t started_ns,
                   const rm_votes *v) RM_REQUIRES(l->c->mu);

#endif
