/*
 * A master that is no longer one (failover.c): what the fan-out does when a
 * Sentinel deployment's master cannot be reached or says it is a replica,
 * and when any standalone server answers like a replica.
 *
 * Layering: the fan-out's own (with fanout.c, slot.c, redirect.c), above
 * the deployments and their sentinels (sentinel.h).
 */
#ifndef REDMUTEX_FAILOVER_H
#define REDMUTEX_FAILOVER_H

#include "fanout.h"

/**
 * Routes slot s of a Sentinel deployment to the master, asking the
 * sentinels when none is known yet (blocking, by s->deadline_ns). False
 * with the slot failed when none can be had.
 */
bool rm_failover_route(rm_call *call, rm_slot *s);
/**
 * Slot s of a Sentinel deployment failed before its request went out (its
 * master refused the connection, did not answer, or its ROLE said replica):
 * the sentinels are asked again, passing over that node, and the slot
 * starts again now on the master they name, or after a short pause while
 * they still name that node, within its deadline. Nothing ran, so nothing
 * is sent twice. A master that stalls (not asked: fanout.c) gets one
 * question to the sentinels, no pause: a stall costs no time.
 */
void rm_failover_reroute(rm_call *call, rm_slot *s, const rm_req *req, int64_t connect_deadline);
/**
 * Every reply of s's request is in. When one says the server is a replica
 * now (READONLY, or WAIT refused on a replica) the request did not take
 * effect on the master: on a Sentinel deployment the sentinels are asked
 * again (as rm_failover_reroute); on a standalone server the connection is
 * dropped and a new one made after a short pause, which resolves the host
 * name again (a managed primary endpoint that moved). True when the slot
 * goes on this way (its replies are cleared).
 */
bool rm_failover_read(rm_call *call, rm_slot *s, const rm_req *req);

/**
 * The slots of a call whose connection failed before their request went
 * out try again elsewhere within their deadline: the next seed of a
 * multi-host URL, a cluster's owner after a refresh of its map, a Sentinel
 * deployment's master (rm_failover_reroute). pending[i]: as rm_slot_start.
 */
void rm_failover_reroute_failed(rm_call *call, const rm_req *req, int64_t connect_deadline, bool *pending);

#endif
