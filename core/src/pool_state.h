/*
 * The servers (pool.c, deploy.c, sentinel.c, sentinel_watch.c): one
 * deployment per URL, its connections and its topology. Embedded in the
 * client as c->pool.
 */
#ifndef REDMUTEX_POOL_STATE_H
#define REDMUTEX_POOL_STATE_H

#include "conn.h"

struct rm_watch;

typedef struct rm_pool {
    /* Set once (the array); each rm_server's fields are c->mu's except the
       _Atomic ones of rm_server (conn.h), read unlocked: each is one value
       whose stale reading only delays a decision (a stall, a restart's
       grace, a seed). */
    rm_server *servers;
    /* Server restarts recorded (a new run_id: pool.c), c->mu; the pool
       broadcasts c->holds.wake on each, and the hold registry catches up
       with them (rm_holds_catch_up_locked, holds.h). */
    uint64_t restarts;
    /* Failovers followed (a Sentinel deployment's master moved: sentinel.c),
       c->mu; the subscriber and the watchdog catch up with them. */
    uint64_t moves;
    /* The subscriber's wake-up eventfd (rm_pool_listen_locked), written on a
       failover so that its thread catches up at once; -1 while there is no
       subscriber (c->mu). */
    int news_fd;
    /* deploy.c: some deployment is a cluster (requests are routed by slot).
       Atomic, unlocked: only ever turns true, and a reader that misses it
       just plans a renewal as for standalone servers once more. */
    _Atomic bool has_cluster;
    struct rm_watch *watch; /* sentinel_watch.c: the thread that watches the sentinels, or NULL (c->mu) */
} rm_pool;

#endif
