/*
 * The client (client.c): its state, its mutex and its reference count.
 * The struct is a small root: each module's state is a struct of the
 * module's own, embedded here.
 */
#ifndef REDMUTEX_CLIENT_H
#define REDMUTEX_CLIENT_H

#include "conn.h"
#include "events_state.h"
#include "holds_state.h"
#include "interrupt_state.h"
#include "lifetime_state.h"
#include "pollwait_state.h"
#include "pool_state.h"
#include "stats.h"
#include "unsettled_state.h"

/* ---- client ---------------------------------------------------------- */

struct rm_subscriber;

/*
 * The root of a client's state. Each module keeps its state in a struct of
 * its own, declared in its own header and embedded here (or, for state made
 * on demand, behind a pointer); the module alone writes it, and its header
 * says what guards each field:
 *   c->mu      the client mutex: read and written only with it held;
 *   atomic     _Atomic: read by anyone without the mutex (relaxed unless
 *              the field says otherwise);
 *   set once   written in redmutex_client_new before any thread of the
 *              client exists (and again in a forked child's atfork handler,
 *              when the forking thread is the only one), then only read, by
 *              anyone, without the mutex.
 * Functions that need c->mu say so with RM_REQUIRES (internal.h), which
 * clang's -Wthread-safety checks at every call. docs/architecture.md,
 * "State and locks", tabulates the same.
 */
struct redmutex_client {
    /* ---- client.c: identity and configuration (set once) ---- */
    rm_mutex mu;
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

    rm_lifetime life;             /* lifetime_state.h: references and close */
    rm_pool pool;                 /* pool_state.h: the servers, restarts and failovers */
    rm_holds_state holds;         /* holds_state.h: the hold registry and the watchdog */
    rm_events events;             /* events_state.h: lost-lock news, one queue */
    rm_unsettled_state unsettled; /* unsettled_state.h: releases of unknown outcome */
    struct rm_subscriber *sub;    /* subscriber.h: the subscriber thread and its channels (c->mu) */
    rm_interrupt intr;            /* interrupt_state.h: waits in progress and their interrupt */
    rm_pollwait_state pollwait;   /* pollwait_state.h: pollable waits' ready list and wait fd */
    rm_stats stats;               /* stats.h: counts (atomics) and the log callback (set once) */
};

/** Locks client->mu. */
static inline void rm_client_lock(redmutex_client *c) RM_ACQUIRES(c->mu) RM_NO_TSA;
static inline void rm_client_lock(redmutex_client *c) { pthread_mutex_lock(&c->mu); }
static inline void rm_client_unlock(redmutex_client *c) RM_RELEASES(c->mu) RM_NO_TSA;
static inline void rm_client_unlock(redmutex_client *c) { pthread_mutex_unlock(&c->mu); }
/**
 * Says that c->mu is held here: for a callback that its caller runs with the
 * mutex held (a parser's, a waiter's notify), which the analysis cannot see
 * through a void pointer. Checks nothing at run time.
 */
static inline void rm_client_held(redmutex_client *c) RM_ASSERTS(c->mu) { (void)c; }
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
