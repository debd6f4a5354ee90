/*
 * The watchdog's renewals on clusters (renew.c): a batch of holds becomes,
 * per cluster node, one RENEW script call per hash slot (a script cannot
 * span slots), all of a node's calls pipelined in one write, every node and
 * every other deployment in one fan-out run.
 *
 * Layering: with the watchdog (holds), above the fan-out and the deployments.
 */
#ifndef REDMUTEX_RENEW_H
#define REDMUTEX_RENEW_H

#include "fanout.h"
#include "holds.h"

typedef struct rm_renew_plan rm_renew_plan;

/**
 * Makes call (begun here: rm_call_end it) for the holds batch[0..k): one
 * target per standalone deployment carrying `whole` (the batch's one RENEW
 * call, and its WAIT), one per node of each cluster deployment carrying its
 * slots' calls. NULL when memory ran out (call not begun).
 */
rm_renew_plan *rm_renew_plan_make(redmutex_client *c, rm_hold **batch, size_t k, const rm_req *whole, const char *lease,
                                  rm_call *call);
/**
 * Hold j's answers after the run: *yes, *no (deployments that renewed it, or
 * answered it is gone), *again when a cluster moved its slot (renew it at
 * once: the map is corrected). same_life(ud, i) says whether deployment i's
 * answer comes from the life of the server that granted the hold (standalone).
 * Caller holds c->mu.
 */
void rm_renew_plan_count(const rm_renew_plan *p, const rm_call *call, size_t j, size_t *yes, size_t *no, bool *again,
                         bool (*same_life)(void *ud, size_t i), void *ud);
/**
 * After call's run: follows the ASK answers at once (a slot half moved to
 * another node: ASKING + RENEW there, in a second call whose answers count
 * in place of the ASKs), then looks at a cluster's map again when one of
 * its nodes did not answer or confirmed fewer replicas than asked (a
 * failover). Blocks up to deadline_ns for the follow-up, and up to a
 * command timeout for the refresh. Called without c->mu.
 */
void rm_renew_plan_follow(rm_renew_plan *p, rm_call *call, int64_t deadline_ns);
/** Frees the plan (and ends its follow-up call). Called without c->mu. */
void rm_renew_plan_free(rm_renew_plan *p);

#endif
