/*
 * The client (client.c): its state, its mutex and its reference count.
 * The struct is shared by every layer: each field names who keeps it.
 */
#ifndef REDMUTEX_CLIENT_H
#define REDMUTEX_CLIENT_H

#include "conn.h"

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
    size_t n;        /* servers */
    size_t quorum;   /* n/2 + 1 */
    rm_server *servers;
    struct rm_watchdog *wd;
    struct rm_subscriber *sub;
    struct rm_hold *holds; /* every hold of every handle (for shutdown) */
    pthread_cond_t renew_done; /* broadcast when a renewal batch or callback finishes */
    uint64_t next_hold_id;
    struct rm_event *events;   /* lost-lock callbacks waiting to run */
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
    /* events.c: pollable lost-lock news (c->mu) */
    struct rm_fd_event *events_head, *events_tail;
    size_t n_events;
    uint64_t events_dropped;
    int event_fd; /* -1 until redmutex_client_event_fd() makes it */
    struct rm_pollwaits *pw; /* pollwait.c: NULL until the first pollable wait or wait fd (c->mu) */
    struct rm_unsettled_list *unsettled; /* unsettled.c: releases of unknown outcome (c->mu) */
    _Atomic int n_unsettled;             /* ... how many: 0 keeps acquisitions off c->mu */
};

/** Locks client->mu (and, in a forked child, resets what the child must not use). */
void rm_client_lock(redmutex_client *c);
void rm_client_unlock(redmutex_client *c);
/** False once redmutex_client_free() has begun. */
bool rm_client_open(redmutex_client *c);
/** Checks closed / forked-away state: 0 or REDMUTEX_ECLOSED (message set). */
int rm_client_usable(redmutex_client *c);
/** Drops one reference; frees the client when none is left. */
void rm_client_unref(redmutex_client *c);

#endif
