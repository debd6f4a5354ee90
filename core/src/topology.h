/*
 * Cluster topology replies (topology.c): CLUSTER SLOTS read into slot
 * ranges and the address of each range's master. Pure functions.
 *
 * Layering: wire (with url, resp, scripts and slots).
 */
#ifndef REDMUTEX_TOPOLOGY_H
#define REDMUTEX_TOPOLOGY_H

#include "resp.h"

/* One range of slots and its master's address (host "" when the node does not know its own address). */
typedef struct rm_topo_range {
    int first, last;
    char host[256];
    int port;
    int replicas; /* the master's replicas the reply shows in service (not failed) */
} rm_topo_range;

/**
 * Reads a CLUSTER SLOTS reply: calls fn for each well-formed range (masters
 * only; replicas are not written to, only counted: a node leaves failed
 * replicas out of this reply). Returns the number of ranges read, or
 * -1 when the reply is not a CLUSTER SLOTS reply.
 */
int rm_topo_read_slots(const rm_reply *r, void (*fn)(void *ud, const rm_topo_range *range), void *ud);

/**
 * Reads a CLUSTER SHARDS reply (7.0+): for each shard, its master that is
 * online (else its master as it is listed), at its endpoint ("?" or empty:
 * its ip; none: host ""), on its tls-port when `tls` and it has one, and
 * the count of its replicas whose health is not "fail". Calls
 * fn per slot range; returns the number of ranges, or -1 when the reply is
 * not a CLUSTER SHARDS reply (a 6.x server's error) or a shard with slots
 * lists two online masters (Valkey, just after a failover): then use
 * CLUSTER SLOTS, which names each range's owner.
 */
int rm_topo_read_shards(const rm_reply *r, bool tls, void (*fn)(void *ud, const rm_topo_range *range), void *ud);

/* A cluster node's id: 40 hex characters. */
#define RM_NODE_ID_LEN 40

/**
 * Calls fn with the id of every node a CLUSTER SHARDS reply lists (masters
 * and replicas), else, when shards is no such reply, every node of a
 * CLUSTER SLOTS reply. Returns how many (an id may come more than once).
 */
int rm_topo_read_ids(const rm_reply *shards, const rm_reply *slots, void (*fn)(void *ud, const char *id), void *ud);

/**
 * Reads a MOVED or ASK error ("MOVED 3999 127.0.0.1:6381"): the slot and the
 * address (host "" for a node that does not know its own: the caller's). 1
 * MOVED, 2 ASK, 0 neither.
 */
int rm_topo_read_redirect(const char *msg, int *slot, char host[256], int *port);

#endif
