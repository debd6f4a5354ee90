/*
 * Sentinel deployments (sentinel.c, sentinel_watch.c): a redis+sentinel://
 * URL names the sentinels and the service; the master is the node they name
 * (a node of the deployment, deploy.h, with its own pool), confirmed by the
 * ROLE every new connection's handshake asks for, and asked for again when
 * it answers like a replica or cannot be reached. A thread per client keeps
 * a subscription to +switch-master on every sentinel and probes the
 * master's replicas (ROLE), so that waits, renewals and WAIT follow a
 * failover nobody's request ran into.
 *
 * Layering: servers (with deploy.c and the pool): above conn; below the
 * fan-out (which routes through rm_sentinel_master and asks again through
 * rm_sentinel_resolve). News of a new master goes up as data, not as a
 * call: the pool counts it (c->pool.moves) and wakes the threads that
 * follow it (rm_pool_moved_locked).
 */
#ifndef REDMUTEX_SENTINEL_H
#define REDMUTEX_SENTINEL_H

#include "client.h"
#include "conn.h"

typedef struct rm_sentinel {
    int n;                 /* sentinels: the URL's seeds */
    rm_server **sentinels; /* each as a server: the sentinels' credentials, no database */
    _Atomic int first;     /* the sentinel asked first: the last one that named a master */
    /* Guarded by c->mu. */
    rm_server *master;                      /* the node the sentinels name now, NULL until known */
    uint64_t epoch;                         /* bumped whenever master changes */
    bool resolving;                         /* a thread is asking the sentinels */
    int64_t resolved_ns;                    /* when they last named a master */
    _Atomic uint64_t resolutions, switches; /* diagnostics (rm_sentinel_counts) */
} rm_sentinel;

/** rm_sentinel_resolve: the sentinels still name the node to avoid (or another thread asks them now). */
#define RM_SENTINEL_SAME 1

/** Whether deployment i is a Sentinel deployment (no lock taken). */
static inline bool rm_deploy_is_sentinel(const redmutex_client *c, size_t i)
{
    return c->pool.servers[i].ep.topology == RM_TOPOLOGY_SENTINEL;
}

/** Sets up deployment i's sentinels from its URL. 0 or REDMUTEX_ENOMEM. */
int rm_sentinel_init(rm_err *err, redmutex_client *c, size_t i);
/** Frees what rm_sentinel_init made (client teardown). */
void rm_sentinel_free(rm_sentinel *s);
/** The master of Sentinel deployment i as known now, or NULL. Caller holds c->mu. */
rm_server *rm_sentinel_master_locked(redmutex_client *c, size_t i) RM_REQUIRES(c->mu);
/**
 * Asks the sentinels of deployment i, in order (the one that answered last
 * first), for the master's address until one names a node other than
 * `avoid` (NULL: any) by deadline_ns, and makes it the master. Returns 0
 * (the master is known, and is not `avoid`), RM_SENTINEL_SAME (every
 * sentinel that answered still names `avoid`, or another thread is asking
 * them right now: try again shortly) or an error code with a message:
 * REDMUTEX_EAUTH (the sentinels refused the credentials), REDMUTEX_ECONN (no
 * sentinel answered, or none knows the service). Blocks up to deadline_ns.
 * Caller holds no mutex.
 */
int rm_sentinel_resolve(rm_err *err, redmutex_client *c, size_t i, rm_server *avoid, int64_t deadline_ns);
/**
 * The sentinels announced that deployment i's master is host:port now
 * (+switch-master): it becomes the master. Caller holds no mutex.
 */
void rm_sentinel_switch(redmutex_client *c, size_t i, const char *host, int port);
/**
 * Sends the n commands in `out` on conn (connecting first) and reads their
 * n replies into r[] by deadline (blocking). 0, or REDMUTEX_ECONN /
 * REDMUTEX_EPROTOCOL with `why` set (refused, closed, no answer in time).
 */
int rm_sentinel_roundtrip(rm_conn *conn, const rm_buf *out, size_t n, rm_reply **r, int64_t deadline, char *why,
                          size_t size);
/** Resolutions asked of the sentinels and masters switched in deployment i (tests, diagnostics). */
void rm_sentinel_counts(redmutex_client *c, size_t i, uint64_t *resolutions, uint64_t *switches);
/** How often deployment i's master has moved (0 unless a Sentinel deployment): who follows failovers compares. */
uint64_t rm_sentinel_switches(redmutex_client *c, size_t i);

/* ---- the watcher thread (sentinel_watch.c) ----------------------------- */

/** Starts the client's watcher thread if it has Sentinel deployments. 0, or REDMUTEX_ENOMEM/ESYSTEM. */
int rm_watch_start(rm_err *err, redmutex_client *c);
/** Stops it, joining until deadline_ns (then it is detached and frees itself). Caller holds no mutex. */
void rm_watch_stop(redmutex_client *c, int64_t deadline_ns);
/** In a forked child: drops the watcher's state (the thread did not survive fork). Caller holds c->mu. */
void rm_watch_forget(redmutex_client *c) RM_REQUIRES(c->mu);
/** Asks the watcher to probe deployment i's master soon (its ROLE: role and replicas). Caller holds c->mu. */
void rm_watch_probe_soon(redmutex_client *c, size_t i) RM_REQUIRES(c->mu);

#endif
