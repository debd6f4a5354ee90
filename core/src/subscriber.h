/*
 * The subscriber (subscriber.c): per client, the thread that keeps one
 * pub/sub connection per server, the release channels subscribed there and
 * the queue of waiters on each channel.
 *
 * Layering: above the pool's connections; below the waiters (waiter.c),
 * which are the only other file that sees the structs below. The rest of
 * the core waits through waiter.h.
 */
#ifndef REDMUTEX_SUBSCRIBER_H
#define REDMUTEX_SUBSCRIBER_H

#include "conn.h"
#include "interrupt.h"
#include "waiter.h"

#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <unistd.h>

typedef struct rm_channel {
    struct rm_channel *next;
    char *name;
    int refs;
    int64_t idle_since;
    bool *sent;      /* per server: SUBSCRIBE sent (and no UNSUBSCRIBE since) */
    bool *confirmed; /* per server: the server confirmed the subscription */
    int *skip;       /* per server: release messages already acted on by a local hand-off */
    int *at;         /* per server: on a sharded cluster, the shard connection it is subscribed on, -1 none */
    bool rejoin;     /* its subscription was lost: when it is confirmed again, every waiter looks at the lock */
    rm_waiter *head, *tail;
} rm_channel;

/* A pub/sub connection to one node of a cluster that speaks sharded pub/sub
   (shard.c): the channels whose slot that node owns are subscribed there. */
typedef struct rm_shard_conn {
    size_t dep; /* the deployment */
    rm_server *node;
    rm_conn *conn; /* NULL while not connected */
    rm_buf out;
    int64_t retry_at, backoff_ms;
} rm_shard_conn;

struct rm_waiter {
    rm_waiter *next, *prev;
    rm_channel *ch;
    int efd; /* -1 for a pollable wait, which is told through notify() instead */
    void (*notify)(void *ud);
    void *notify_ud;
    bool notified;
    bool sleeping;    /* in poll(): not attempting on its own right now */
    bool serial;      /* its channel serves one owner's acquisitions one after another (waiter.h) */
    rm_wait *wait;    /* the acquire's wait: interrupts end the sleeps */
    rm_claim claim;   /* claim.lock == NULL: no hand-off offered */
    int handoff;      /* 0 none, -1 in flight, else the result for rm_waiter_wait */
    char message[64]; /* the last message that named this waiter's lock (kind.h: fair hand-off), or "" */
};

typedef struct rm_subscriber {
    pthread_t thread;
    bool stop;
    bool detached; /* shutdown gave up joining: the thread frees this struct */
    int wake_fd;
    rm_channel *channels;
    /* Owned by the thread; `up` mirrors conns[i] != NULL under the client mutex. */
    rm_conn **conns;
    bool *up;
    rm_buf *out;
    int64_t *retry_at;
    int64_t *backoff_ms;
    bool *dead;         /* per server: the leader found the connection broken (the thread closes it) */
    rm_waiter *leader;  /* the waiter reading the connections, or NULL (the thread reads) */
    bool polling_conns; /* the thread is in poll() on the connections */
    /* Sharded pub/sub (shard.c): connections per cluster node, always read
       by the thread; per deployment, whether the thread must reload the
       slot map first (a sunsubscribe or a MOVED said it moved). */
    rm_shard_conn *shards;
    size_t n_shards, cap_shards;
    bool *refresh;
    uint64_t moves_seen;     /* the pool's failovers (c->pool.moves) the thread has followed */
    uint64_t *switches_seen; /* per deployment: its failovers (rm_sentinel_switches) followed */
} rm_subscriber;

/* ---- channels and their waiters (subscriber.c) -------------------------- */

/** Tells w to look at its state again (its eventfd or its notify callback). Caller holds c->mu. */
void rm_waiter_signal(rm_waiter *w);
/** Wakes the oldest waiter of ch that has not been woken yet (and has no hand-off). Caller holds c->mu. */
void rm_channel_wake_one(rm_channel *ch);
/** The channel of that name (len bytes), or NULL. Caller holds c->mu. */
rm_channel *rm_channel_find(rm_subscriber *sub, const char *name, size_t len);
/**
 * Puts w at the end of the channel's queue, making the channel (and the
 * subscriber thread) if needed, and wakes the thread if it has work. Caller
 * holds c->mu. False when the client is closed or memory ran out: w then
 * waits without notifications (timers only).
 */
bool rm_channel_join(redmutex_client *c, const char *channel, rm_waiter *w) RM_REQUIRES(c->mu);
/**
 * Reads what server i's pub/sub connection sent and acts on it (wakes
 * waiters). False when the connection broke (or sent what no subscriber
 * connection may): the thread closes it. Caller holds c->mu.
 */
bool rm_subscriber_read(rm_subscriber *sub, size_t i);

/** Acts on one pub/sub push from deployment i's connection (message, smessage, subscribe...). Caller holds c->mu. */
void rm_subscriber_push(rm_subscriber *sub, size_t i, rm_reply *r);
/** Reads and parses what conn has; false when it broke. Caller holds c->mu. */
bool rm_subscriber_fill(rm_conn *conn);
/** Whether the connection that carries ch for deployment i is up. Caller holds c->mu. */
bool rm_channel_up(redmutex_client *c, const rm_subscriber *sub, const rm_channel *ch, size_t i) RM_REQUIRES(c->mu);
/** Wakes every waiter of ch (its subscription moved or was lost: a release may have been missed). Caller holds c->mu.
 */
void rm_channel_wake_all(rm_channel *ch);

/* ---- sharded pub/sub (shard.c) ------------------------------------------ */

/**
 * Subscribes the channels of sharded deployments on the nodes that own
 * their slots (SSUBSCRIBE queued), and drops what the shard connections'
 * readers found broken. Returns a shard connection to open now (SIZE_MAX:
 * none); *next_ns is the next retry. Caller holds c->mu.
 */
size_t rm_shard_plan(redmutex_client *c, rm_subscriber *sub, bool any_wanted, int64_t *next_ns) RM_REQUIRES(c->mu);
/** Queues SUNSUBSCRIBE for a channel about to be freed. Caller holds c->mu. */
void rm_shard_forget(redmutex_client *c, rm_subscriber *sub, const rm_channel *ch) RM_REQUIRES(c->mu);
/** A new connection for shard k (or none: NULL, retried later). Caller holds c->mu. */
void rm_shard_connected(redmutex_client *c, rm_subscriber *sub, size_t k, rm_conn *conn) RM_REQUIRES(c->mu);
/** Sends what is queued and adds the shard connections to the poll set (map entries c->n + k). Caller holds c->mu. */
size_t rm_shard_poll_set(redmutex_client *c, rm_subscriber *sub, struct pollfd *pfds, size_t *map, size_t np)
    RM_REQUIRES(c->mu);
/** Reads shard k's connection; drops it when it broke. Caller holds c->mu. */
void rm_shard_read(redmutex_client *c, rm_subscriber *sub, size_t k) RM_REQUIRES(c->mu);
/** A pub/sub connection to srv with its handshake done, or NULL (deadline: connect_timeout_ms; a wake-up that stops the
 * thread ends it). Called without c->mu. */
rm_conn *rm_pubsub_connect(redmutex_client *c, rm_subscriber *sub, rm_server *srv);
/** Closes every shard connection and frees them (teardown, or a forked child's copy). */
void rm_shard_free(rm_subscriber *sub);

/**
 * Shutdown: cuts every waiter loose from its channel and wakes it, stops the
 * thread and joins it until deadline_ns (after that it is detached and frees
 * its own state). Caller holds no mutex.
 */
void rm_subscriber_stop(redmutex_client *c, int64_t deadline_ns);
/** In a forked child: drops the thread's state (the thread did not survive fork). */
void rm_subscriber_forget(redmutex_client *c) RM_REQUIRES(c->mu);

#endif
