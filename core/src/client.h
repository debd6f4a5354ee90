/*
 * The client (client.c): its state, its mutex and its reference count.
 * The struct is shared by every layer: its fields are grouped by the module
 * that owns them, each group saying what guards it.
 */
#ifndef REDMUTEX_CLIENT_H
#define REDMUTEX_CLIENT_H

#include "conn.h"
#include "events.h"
#include "stats.h"

/* ---- client ---------------------------------------------------------- */

struct rm_watchdog;
struct rm_subscriber;
struct rm_hold;

/*
 * One struct, one mutex. Every field below belongs to one module, which alone
 * writes it; each group says which, and what guards it:
 *   c->mu      the client mutex: read and written only with it held;
 *   atomic     _Atomic: read by anyone without the mutex (relaxed unless
 *              the field says otherwise);
 *   set once   written in redmutex_client_new before any thread of the
 *              client exists (and again in a forked child's atfork handler,
 *              when the forking thread is the only one), then only read, by
 *              anyone, without the mutex.
 * A field read without its guard says so, and why that is safe ("unlocked").
 * docs/architecture.md, "State and locks", tabulates the same.
 */
struct redmutex_client {
    /* ---- client.c: identity and configuration (set once) ---- */
    pthread_mutex_t mu;
    pid_t pid; /* process whose connections and threads these are */
    char id[REDMUTEX_CLIENT_ID_LEN + 1];
    /* opts.min_replicas and the TLS fields are settled inside
       redmutex_client_new too (replicas_default, the TLS context taken). */
    redmutex_client_options opts;
    size_t n;      /* servers: deployments, each named by one URL (deploy.h) */
    size_t quorum; /* n/2 + 1 */
    /* min_replicas was left at -1: each deployment's WAIT count is its own
       default (opts.min_replicas is then 1 when some deployment waits, else 0). */
    bool replicas_by_deployment;
    struct redmutex_client *next_all, *prev_all; /* the fork registry: client.c's registry_mu, not c->mu */

    /* ---- lifetime.c: references and close (c->mu) ---- */
    int refs;                            /* the user's reference (until free) + one per lock handle and per thread */
    bool closed;                         /* redmutex_client_close has begun (read through rm_client_open) */
    bool shut_down;                      /* close has finished: no holds are released any more */
    struct redmutex_lock *callback_lock; /* lock whose callback is running now (watchdog.c writes it) */
    pthread_t callback_thread;           /* ... and the thread running it */

    /* ---- pool.c, deploy.c, sentinel*.c: the servers ----
       The array is set once; each rm_server's fields are c->mu's except the
       _Atomic ones of rm_server (conn.h), read unlocked: each is one value
       whose stale reading only delays a decision (a stall, a restart's
       grace, a seed). */
    rm_server *servers;
    /* Server restarts recorded (a new run_id: pool.c), broadcast on wake;
       the hold registry catches up with them (restarts_seen below). */
    uint64_t restarts;   /* c->mu */
    pthread_cond_t wake; /* set once; the watchdog thread sleeps on it (with c->mu) */
    /* deploy.c: some deployment is a cluster (requests are routed by slot).
       Atomic, unlocked: only ever turns true, and a reader that misses it
       just plans a renewal as for standalone servers once more. */
    _Atomic bool has_cluster;
    /* Called with c->mu held when deployment i's master moved (a failover,
       sentinel.c): the subscriber and the watchdog follow it. Installed by
       client.c (set once): the one callback left that carries news up. */
    void (*on_deploy_moved)(struct redmutex_client *c, size_t i);
    struct rm_watch *watch; /* sentinel_watch.c: the thread that watches the sentinels, or NULL (c->mu) */

    /* ---- holds.c, watchdog.c, renew.c: holds and their renewal (c->mu) ---- */
    struct rm_hold *holds; /* every hold of every handle (for shutdown) */
    uint64_t next_hold_id;
    uint64_t restarts_seen;    /* the pool's restarts the registry has acted on */
    struct rm_watchdog *wd;    /* NULL until the first hold */
    pthread_cond_t renew_done; /* set once; broadcast when a renewal batch or callback finishes */

    /* ---- events.c: lost-lock news for the event fd and the callbacks, one queue (c->mu) ---- */
    rm_events events;

    /* ---- unsettled.c: releases of unknown outcome (c->mu) ---- */
    struct rm_unsettled_list *unsettled;
    /* ... how many. Atomic, unlocked: 0 lets an acquisition skip c->mu and
       the list; a release recorded just after the read is one the
       acquisition could not have waited for anyway. */
    _Atomic int n_unsettled;

    /* ---- subscriber.c: the subscriber thread and its channels (c->mu) ---- */
    struct rm_subscriber *sub;

    /* ---- interrupt.c: waits in progress and how they are ended ---- */
    _Atomic uint64_t intr_gen; /* atomic: bumped by redmutex_client_interrupt(), async-signal-safe */
    _Atomic int intr_fd;       /* atomic: eventfd written by it; -1 until the first wait */
    _Atomic bool closing;      /* atomic: close has begun, every wait ends */
    uint64_t intr_drained;     /* c->mu: the generation when the eventfd was last drained */
    struct rm_wait *waits;     /* c->mu: waits in progress */

    /* ---- pollwait.c: NULL until the first pollable wait or wait fd (c->mu) ---- */
    struct rm_pollwaits *pw;
    /* ... its ready eventfd, which redmutex_client_interrupt() writes (atomic,
       unlocked: async-signal-safe); -1 until made */
    _Atomic int pw_efd;

    /* ---- stats.c: counts and the log callback (atomics; set once: the callback) ---- */
    rm_stats stats;
};

/** Locks client->mu. */
static inline void rm_client_lock(redmutex_client *c) { pthread_mutex_lock(&c->mu); }
static inline void rm_client_unlock(redmutex_client *c) { pthread_mutex_unlock(&c->mu); }
/** False once the client was closed (redmutex_client_close, or free). */
static inline bool rm_client_open(redmutex_client *c)
{
    rm_client_lock(c);
    bool closed = c->life.closed;
    rm_client_unlock(c);
    return !closed;
}
/** Checks closed state: 0 or REDMUTEX_ECLOSED (message set). */
static inline int rm_client_usable(rm_err *err, redmutex_client *c)
{
    return rm_client_open(c) ? 0 : rm_fail(err, REDMUTEX_ECLOSED, "the client was closed");
}
/**
 * Drops one reference; frees the client when none is left. The one call that
 * runs up the layers (client.c): whoever drops the last reference, a
 * background thread or a lock handle, destroys the client.
 */
void rm_client_unref(redmutex_client *c);

#endif
