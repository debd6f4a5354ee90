/*
 * A real Sentinel deployment for the C tests: one master and two replicas
 * (the harness's rs_start) and three sentinels (the same server binary with
 * --sentinel) on free loopback ports, short down-after-milliseconds and
 * failover-timeout, started once per test binary and waited for until the
 * replicas are in sync and every sentinel names the master, knows the other
 * sentinels and can authorise a failover (SENTINEL CKQUORUM). The binary is
 * $REDMUTEX_TEST_SERVER (default redis-server; valkey-server works too).
 */
#ifndef REDMUTEX_TEST_SENTINEL_H
#define REDMUTEX_TEST_SENTINEL_H

#include "harness.h"

#define SN_NODES 3
#define SN_SENTINELS 3

typedef struct sn_deploy {
    rs_server node[SN_NODES]; /* data nodes; node[0] starts as the master */
    rs_server sentinel[SN_SENTINELS];
    char service[32];
    const char *sentinel_password; /* requirepass of the sentinels, or NULL */
    int down_after_ms, failover_timeout_ms;
    int64_t last_failover_ms; /* when the last failover began (rt_now_ms) */
    char url[512];            /* redis+sentinel://127.0.0.1:s1,...,s3/SERVICE[?sentinel_password=...] */
} sn_deploy;

/* Starts the deployment (service "mymaster"); sentinel_password may be NULL. Fails the test on error. */
void sn_start(sn_deploy *d, const char *sentinel_password);
/* A command to a sentinel (AUTH first with the deployment's sentinel password); NULL when unreachable. */
redisReply *sn_sentinel_cmd(sn_deploy *d, rs_server *s, const char *fmt, ...);
/* The master's port as the first live sentinel names it (-1: none answered). */
int sn_master_port(sn_deploy *d);
/* The data node with that port, or NULL. */
rs_server *sn_node(sn_deploy *d, int port);
/* The current master (fails the test when no sentinel names a live node). */
rs_server *sn_master(sn_deploy *d);
/* "master" or "slave" as the node's ROLE says ("?" when unreachable). */
const char *sn_role(rs_server *s);
/* Waits until every live sentinel names a master other than old_port that says ROLE master; its port. */
int sn_wait_switch(sn_deploy *d, int old_port, int64_t ms);
/* SENTINEL FAILOVER; returns the new master's port once the sentinels switched (not yet settled). */
int sn_failover(sn_deploy *d);
/* SIGKILLs the master once the sentinels may start another failover (2 x failover-timeout after the last). */
rs_server *sn_kill_master(sn_deploy *d);
/* Makes every live data node but the master its replica, waits for them in sync and for the sentinels to agree. */
void sn_settle(sn_deploy *d);
/* Restarts a killed data node as a replica of the current master. */
void sn_restart_as_replica(sn_deploy *d, rs_server *node);
/* Restarts a killed data node as a master (empty: no persistence), as a master that crashed comes back. */
void sn_restart_as_master(sn_deploy *d, rs_server *node);
/* Online replicas (ROLE) of the node on that port whose link is up. */
int sn_replicas_in_sync(sn_deploy *d, int master_port);
/* calls=N of a command in INFO commandstats (cmdstat_<cmd>), including rejected and failed calls. */
long long sn_cmdstat(rs_server *s, const char *cmd);

#endif
