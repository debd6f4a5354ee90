/*
 * Deployments (deploy.c): what one URL names. c->pool.servers[i] is deployment
 * i as it is reached at its seeds; a standalone deployment is that one
 * server, a cluster has more nodes (rm_servers of its own, each with its
 * pool) and a map from hash slot to the master that owns it. A Sentinel
 * deployment would resolve its master here the same way.
 *
 * Layering: servers (with the pool): above conn and the wire's topology
 * replies; below the fan-out, the subscriber and the watchdog, which route
 * through it.
 */
#ifndef REDMUTEX_DEPLOY_H
#define REDMUTEX_DEPLOY_H

#include "client.h"
#include "conn.h"
#include "slots.h"

#define RM_NO_NODE UINT16_MAX

typedef struct rm_deploy {
    int wanted;           /* enum rm_topology: what the URL asked for */
    _Atomic int topology; /* what it is: RM_TOPOLOGY_AUTO until the first handshake tells */
    _Atomic bool sharded; /* a cluster of 7.0+ nodes: SSUBSCRIBE and SPUBLISH (written under c->mu) */
    /* A cluster's nodes and slot map (c->mu). Nodes are never freed before
       the client: connections and holds point at them. */
    rm_server **nodes;
    size_t n_nodes, cap_nodes;
    uint16_t *slot_node;     /* RM_SLOTS entries: index into nodes, RM_NO_NODE when uncovered */
    int64_t next_refresh_ns; /* a full refresh is not done again before this */
    int64_t loaded_ns;       /* when the whole map was last loaded */
    /* A node did not answer in time, or its connection failed: the map is
       read again before the next request is routed (it may have failed over). */
    _Atomic bool refresh_wanted;
    /* The ids of every node the last topology listed, sorted (c->mu): two
       deployments that share one are the same cluster. */
    char (*ids)[41];
    size_t n_ids;
    _Atomic uint64_t redirects, refreshes; /* diagnostics (rm_deploy_counts) */
    struct rm_sentinel *sentinel;          /* a Sentinel deployment's sentinels and master (sentinel.h), else NULL */
} rm_deploy;

/** Sets up deployment i from its URL. 0 or REDMUTEX_ENOMEM. */
int rm_deploy_init(rm_err *err, redmutex_client *c, size_t i);
/** Frees deployment i's nodes (their connections and endpoints) and map (client teardown). */
void rm_deploy_free(rm_server *srv);
/** In a forked child: closes the parent's connections of every cluster node. */
void rm_deploy_after_fork(redmutex_client *c);

/** Whether deployment i is known to be a cluster (no lock taken). */
static inline bool rm_deploy_is_cluster(const redmutex_client *c, size_t i)
{
    return atomic_load(&c->pool.servers[i].dep->topology) == RM_TOPOLOGY_CLUSTER;
}
/**
 * The server a request for hash slot `slot` (-1: a request without keys)
 * goes to in deployment i: the deployment itself unless it is a cluster,
 * else the master that owns the slot. NULL with err set when no master owns
 * it. Takes c->mu for a cluster only.
 */
rm_server *rm_deploy_route(rm_err *err, redmutex_client *c, size_t i, int slot);
/**
 * After a handshake that asked what the deployment is (conn->topo_asked):
 * classifies it, and for a cluster builds its slot map from the reply. 0,
 * or an error code (topology=cluster on a server that is no cluster node).
 */
int rm_deploy_learn(rm_err *err, redmutex_client *c, rm_conn *conn);
/** The node of deployment i at host:port, added if new; NULL: no memory. Caller holds c->mu. */
rm_server *rm_deploy_node_locked(redmutex_client *c, size_t i, const char *host, int port) RM_REQUIRES(c->mu);
/**
 * Where deployment i's pub/sub connection goes (not a 7.0+ cluster's, whose
 * channels live on their slots' nodes): the deployment itself, or the
 * master of a Sentinel deployment (NULL while unknown). Caller holds c->mu.
 */
rm_server *rm_deploy_home_locked(redmutex_client *c, size_t i) RM_REQUIRES(c->mu);
/** rm_deploy_route for a caller that holds c->mu (NULL when no master owns the slot). */
rm_server *rm_deploy_route_locked(redmutex_client *c, size_t i, int slot) RM_REQUIRES(c->mu);
/** Whether deployment i is a cluster that speaks sharded pub/sub (7.0+). Caller holds c->mu. */
bool rm_deploy_sharded_locked(redmutex_client *c, size_t i) RM_REQUIRES(c->mu);
/** rm_deploy_moved for a caller that holds c->mu. */
rm_server *rm_deploy_moved_locked(redmutex_client *c, size_t i, int slot, const char *host, int port)
    RM_REQUIRES(c->mu);
/** MOVED slot host:port from deployment i: the slot's owner is that node from now on. The node, or NULL (no memory). */
rm_server *rm_deploy_moved(redmutex_client *c, size_t i, int slot, const char *host, int port);
/** ASK slot host:port: the node to ask (found or added), or NULL. The map is not changed. */
rm_server *rm_deploy_asked(redmutex_client *c, size_t i, const char *host, int port);
/**
 * Reloads deployment i's slot map from the first node (then seed) that
 * answers CLUSTER SLOTS by deadline_ns; not more than once per 100 ms
 * (then 1 at once). Blocks. 0, 1 (skipped: too soon), or an error code.
 */
int rm_deploy_refresh(rm_err *err, redmutex_client *c, size_t i, int64_t deadline_ns);
/**
 * A request to srv (a node of a cluster deployment; anything else is
 * ignored) went unanswered by its deadline or lost its connection: the
 * deployment's map is reloaded before its next request is routed, asking
 * srv last. Any thread, no lock held.
 */
void rm_deploy_node_failed(rm_server *srv);
/**
 * Before routing a request of deployment i: reloads the map if a node
 * failed since the last load (rm_deploy_node_failed), bounded by
 * deadline_ns and at most once per 100 ms. Blocks; 0 when nothing was due.
 */
int rm_deploy_refresh_if_wanted(redmutex_client *c, size_t i, int64_t deadline_ns);
/**
 * Reloads deployment i's map when it is older than max_age_ns (the
 * watchdog's periodic look, so a failover without traffic is noticed).
 * Blocks up to deadline_ns; 0 when nothing was due.
 */
int rm_deploy_refresh_stale(rm_err *err, redmutex_client *c, size_t i, int64_t max_age_ns, int64_t deadline_ns);
/** The command a release script of deployment i publishes with: "spublish" on a 7.0+ cluster, else "publish". */
const char *rm_deploy_publish_verb(redmutex_client *c, size_t i);
/**
 * The replicas a WAIT (after an acquisition, an extension, a renewal) asks
 * of srv: min_replicas, or fewer when the deployment's topology, as last
 * read, gives srv fewer replicas in service - a replica promoted by a
 * failover has none at first - and srv itself, at its last ROLE, had no more
 * online. So a master with no replica that could be promoted grants and
 * renews instead of refusing every lock until one comes back (Redisson's
 * trap, redisson#4706), while a replica that is only slow or cut off from
 * its master still counts (the topology has not given it up).
 *
 * With the per-deployment default (min_replicas -1) a Sentinel
 * deployment wants 1 and any other 0; an explicit min_replicas on a
 * Sentinel deployment is asked as given (fewer replicas refuse the lock).
 *
 * srv->replicas comes from the topology (CLUSTER SHARDS: replicas whose
 * health is not "fail"; CLUSTER SLOTS leaves failed ones out) at every full
 * load; a Sentinel deployment's master sets it from the ROLE every new
 * connection's handshake and the watcher's probe ask (its online replicas). srv->role_replicas comes from a ROLE that
 * rides behind any request with a WAIT to a node that has fewer replicas than min_replicas (rm_deploy_wants_role), so a
 * replica that comes back is counted again at the next request, without waiting for a refresh.
 */
int rm_deploy_wait_need(const redmutex_client *c, rm_server *srv);
/** Whether a request with a WAIT to srv should also ask ROLE (srv has fewer replicas than min_replicas). */
bool rm_deploy_wants_role(const redmutex_client *c, rm_server *srv);
/** Records srv's answer to ROLE: the replicas online on it (-1 when it is no master or the reply is not ROLE's). */
void rm_deploy_note_role(rm_server *srv, const rm_reply *r);
/**
 * A server of another deployment than srv's (its URL's server, or one of
 * its cluster's nodes) that reported run_id too: the same process reached
 * twice. NULL when none. Caller holds c->mu.
 */
const rm_server *rm_deploy_same_process_locked(redmutex_client *c, const rm_server *srv, const char *run_id)
    RM_REQUIRES(c->mu);
/** Redirects followed and full refreshes done by deployment i (tests, diagnostics). */
void rm_deploy_counts(redmutex_client *c, size_t i, uint64_t *redirects, uint64_t *refreshes);

#endif
