/*
 * The client (client.c): its state, its mutex and its reference count.
 * The struct is shared by every layer: each field names who keeps it.
 */
#ifndef REDMUTEX_CLIENT_H
#define REDMUTEX_CLIENT_H

#include "conn.h"
#include "stats.h"

/* ---- client ---------------------------------------------------------- */

struct rm_watchdog;
struct rm_subscriber;
struct rm_hold;

struct redmutex_client {
    pthread_mutex_t mu;
    int refs;        /* the user's reference (until free) + one per lock handle */
    bool closed;
    pid_t pid;       /* process whose connections and threads these are */
    char id[REDMUTEX_CLIENT_ID_LEN + 1];
    redmutex_client_options opts;
    size_t n;        /* servers: deployments, each named by one URL (deploy.h) */
    size_t quorum;   /* n/2 + 1 */
    rm_server *servers;
    struct rm_watchdog *wd;
    struct rm_subscriber *sub;
    struct rm_hold *holds; /* every hold of every handle (for shutdown) */
    pthread_cond_t renew_done; /* broadcast when a renewal batch or callback finishes */
    uint64_t next_hold_id;
    struct redmutex_lock *callback_lock; /* lock whose callback is running now */
    pthread_t callback_thread;           /* ... and the thread running it */
    struct redmutex_client *next_all, *prev_all; /* fork registry */
    /* interrupt.c: waits in progress and how they are ended */
    _Atomic uint64_t intr_gen; /* bumped by every redmutex_client_interrupt() */
    _Atomic int intr_fd;       /* eventfd written by it; -1 until the first wait */
    uint64_t intr_drained;     /* the generation when the eventfd was last drained (c->mu) */
    _Atomic bool closing;      /* close has begun: every wait ends */
    bool shut_down;            /* close has finished: no holds are released any more (c->mu) */
    struct rm_wait *waits;     /* waits in progress (c->mu) */
    /* events.c: lost-lock news for the event fd and the callbacks, one queue (c->mu) */
    struct rm_fd_event *events_head, *events_tail;
    size_t n_events; /* entries still due to the event fd */
    uint64_t events_dropped;
    int event_fd; /* -1 until redmutex_client_event_fd() makes it */
    struct rm_pollwaits *pw; /* pollwait.c: NULL until the first pollable wait or wait fd (c->mu) */
    _Atomic int pw_efd;      /* ... its ready eventfd, which redmutex_client_interrupt() writes; -1 until made */
    /* Called by the pool (pool.c) when a server comes back with a new
       run_id, with c->mu held: the hold registry's answer to a restart
       (holds.c), installed by the client so the pool need not know holds. */
    void (*on_server_restart)(struct redmutex_client *c, size_t i);
    struct rm_unsettled_list *unsettled; /* unsettled.c: releases of unknown outcome (c->mu) */
    _Atomic int n_unsettled;             /* ... how many: 0 keeps acquisitions off c->mu */
    _Atomic bool has_cluster;            /* deploy.c: some deployment is a cluster (requests are routed by slot) */
    /* Sentinel deployments (sentinel.c, sentinel_watch.c). min_replicas was
       left at -1: each deployment's WAIT count is its own default (client.c
       sets opts.min_replicas to 1 when some deployment waits, else 0). */
    bool replicas_by_deployment;
    /* Called with c->mu held when deployment i's master moved (a failover):
       the subscriber and the watchdog follow it. Installed by the client. */
    void (*on_deploy_moved)(struct redmutex_client *c, size_t i);
    struct rm_watch *watch; /* the thread that watches the sentinels, or NULL */
    rm_stats stats;                      /* stats.c: counts and the log callback (atomics, no mutex) */
};

/** Locks client->mu. */
static inline void rm_client_lock(redmutex_client *c) { pthread_mutex_lock(&c->mu); }
static inline void rm_client_unlock(redmutex_client *c) { pthread_mutex_unlock(&c->mu); }
/** False once the client was closed (redmutex_client_close, or free). */
static inline bool rm_client_open(redmutex_client *c)
{
    rm_client_lock(c);
    bool closed = c->closed;
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
