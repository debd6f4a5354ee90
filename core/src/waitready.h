/*
 * The client's ready list and wait fd for pollable waits (waitready.c), and
 * the state pollwait.c and waitready.c share. Nothing else includes it.
 *
 * Layering: with the pollable waits (layer 11).
 */
#ifndef REDMUTEX_WAITREADY_H
#define REDMUTEX_WAITREADY_H

#include "client.h"
#include "lockops.h"
#include "pollwait.h"
#include "retry.h"
#include "waiter.h"
#include "waitstep.h"

#include <pthread.h>

typedef struct rm_pollwaits rm_pollwaits;

struct rm_pollwaits {
    int epfd;           /* the client's wait fd: readable while efd or tfd is */
    int efd;            /* readable exactly while the ready list is not empty */
    int tfd;            /* fires at the earliest due time */
    int64_t timer_ns;   /* what tfd is armed for; INT64_MAX when disarmed */
    redmutex_wait *all; /* every wait of the client (for the due-time scan) */
    redmutex_wait *ready_head, *ready_tail;
    pthread_cond_t handoff_done; /* a hand-off to a wait being freed has ended */
    redmutex_client *c;
    uint64_t intr_seen; /* the interrupt generation whose waits were made ready */
    bool closing_seen;  /* the close's waits were made ready */
};

struct redmutex_wait {
    redmutex_client *c;
    rm_waitstep ws; /* a lock's wait, run by the wait engine (waitstep.h); ws.l NULL: a custom wait */
    uint64_t id;
    bool done;      /* acquired: nothing more to try (written under c->mu: the loop's thread reads it) */
    bool queued;    /* on the ready list */
    bool freeing;   /* ending: redmutex_wait_free, or an interrupted try, gave up (c->mu) */
    bool ended;     /* interrupted: it gave up, and every try reports REDMUTEX_EINTR (its own thread) */
    int64_t due_ns; /* when it becomes ready if nothing else makes it; INT64_MAX: never */
    redmutex_wait *next_ready;
    redmutex_wait *next_all, *prev_all;
    /* A wait for something else than a lock (pollwait.h, rm_wait_new_custom):
       ws.l is NULL, only ws's channel, waiter, retry and figures serve, and
       the tries are these. */
    const rm_wait_ops *ops;
    void *obj;
    /* Statistics (stats.c): a wait is one acquisition from its creation to
       the try that acquires or to its free; a waiter while tries find the
       lock held. */
    int64_t start_ns;
    int last_rc; /* of the last try; 0 before the first */
    bool waiting;
};

/* ---- the ready list and timer (caller holds c->mu) --------------------------- */

/** The client's pollable-wait state, made on first use; NULL with REDMUTEX_ENOMEM in err. */
rm_pollwaits *rm_ready_ensure(rm_err *err, redmutex_client *c) RM_REQUIRES(c->mu);
/** Puts w on the ready list (once) and clears its due time. */
void rm_ready_push(rm_pollwaits *pw, redmutex_wait *w) RM_REQUIRES(pw->c->mu);
/** Takes w off the ready list, if it is on it. */
void rm_ready_unqueue(rm_pollwaits *pw, redmutex_wait *w) RM_REQUIRES(pw->c->mu);
/** w becomes ready at at_ns (monotonic) unless something makes it so earlier. */
void rm_ready_set_due(rm_pollwaits *pw, redmutex_wait *w, int64_t at_ns) RM_REQUIRES(pw->c->mu);

#endif
