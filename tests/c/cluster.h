/*
 * A real Redis (or Valkey) Cluster for the C tests: masters and replicas
 * started on free loopback ports by the harness (rs_start), joined with
 * `redis-cli --cluster create`, waited for until every node says
 * cluster_state:ok and every replica is in sync, and killed with the test.
 *
 * The server binary is $REDMUTEX_TEST_SERVER (default redis-server); the
 * cluster tool is $REDMUTEX_TEST_CLI, else the "-cli" next to that server
 * (valkey-server -> valkey-cli), else redis-cli.
 */
#ifndef REDMUTEX_TEST_CLUSTER_H
#define REDMUTEX_TEST_CLUSTER_H

#include "harness.h"

#define RC_MAX_NODES 9

typedef struct rc_cluster {
    int n;       /* nodes */
    int masters; /* the first `masters` nodes start as masters */
    rs_server node[RC_MAX_NODES];
    char url[512]; /* redis://h:p1,h:p2,.../0: every node a seed */
} rc_cluster;

/*
 * Starts `masters` masters with `replicas` replicas each (cluster-node-timeout
 * 1000 ms unless `extra` says otherwise; extra config lines for every node).
 * Fails the test on error.
 */
void rc_start(rc_cluster *cl, int masters, int replicas, const char *extra);
/*
 * The same with TLS: every node also listens on a TLS port (certificates
 * server.pem/server.key of `certs`, no client certificate asked), the bus
 * and replication use TLS (tls-cluster, tls-replication), and cl->url is
 * rediss://h:tls1,h:tls2,.../0 (add ?ssl_ca_certs=). The cluster is made
 * over the plain ports, which a test may then close (CONFIG SET port 0).
 */
void rc_start_tls(rc_cluster *cl, int masters, int replicas, const rt_certs *certs);
/* Stops every node (also done by the harness at the end of each test). */
void rc_stop(rc_cluster *cl);
/* Waits until every live node reports cluster_state:ok and agrees on who owns every slot. */
void rc_wait_ok(rc_cluster *cl, int64_t ms);
/* The node whose port is `port`, or NULL. */
rs_server *rc_by_port(rc_cluster *cl, int port);
/* The master that owns `slot`, as `asker` (NULL: any live node) sees it; NULL if none. */
rs_server *rc_owner(rc_cluster *cl, int slot);
/* CLUSTER KEYSLOT of key (on any live node), -1 on error. */
int rc_keyslot(rc_cluster *cl, const char *key, size_t len);
/* A live replica of master m, or NULL. */
rs_server *rc_replica_of(rc_cluster *cl, rs_server *m);
/* The node id (CLUSTER MYID) of s into out[41]. */
void rc_node_id(rs_server *s, char out[64]);
/* Moves `slot` with its keys from its owner to `to` (SETSLOT IMPORTING/MIGRATING, MIGRATE, SETSLOT NODE on all
 * masters). */
void rc_migrate_slot(rc_cluster *cl, int slot, rs_server *to);
/* Starts moving `slot` to `to` and stops halfway: both nodes marked, no key moved yet. */
void rc_migrate_begin(rc_cluster *cl, int slot, rs_server *from, rs_server *to);
/* Moves the keys of `slot` from `from` to `to` (MIGRATE ... KEYS), while the slot is marked. */
void rc_migrate_keys(rc_cluster *cl, int slot, rs_server *from, rs_server *to);
/* Ends a move begun with rc_migrate_begin: SETSLOT NODE on every master. */
void rc_migrate_end(rc_cluster *cl, int slot, rs_server *to);
/* errorstat_<what>:count=N from INFO errorstats of s (0 when absent). */
long long rc_errorstat(rs_server *s, const char *what);
/* Sum of rc_errorstat over every live node. */
long long rc_errorstat_all(rc_cluster *cl, const char *what);
/* Resets INFO stats (CONFIG RESETSTAT) on every live node. */
void rc_resetstat(rc_cluster *cl);
/* A master that owns at least one slot, index k of them (0-based, by port order). */
rs_server *rc_master(rc_cluster *cl, int k);
/* A name (printf pattern with one %d) whose slot is owned by master m, into out. */
void rc_name_on(rc_cluster *cl, rs_server *m, const char *pattern, char *out, size_t size);

#endif
