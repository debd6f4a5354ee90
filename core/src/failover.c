/*
 * Never write to a demoted master (failover.h). A master found through
 * sentinels is confirmed by ROLE on every new connection (conn.c); after
 * that, three things say it is not the master any more: a connection
 * refused (or a handshake that times out) at its address, READONLY, and
 * "WAIT cannot be used with replica instances" (a replica made writable ran
 * the script, but nothing it wrote reaches the master's replicas). Each
 * sends the slot back to the sentinels and to whichever node they name,
 * within the call's deadline: a failover costs a call its extra round
 * trips, never a write to the wrong node. The replies of a request that met
 * READONLY are dropped: a replica that refuses writes wrote nothing.
 *
 * A standalone URL may name a managed primary endpoint whose address moves
 * in a failover: READONLY there drops the connection and the server's idle
 * ones, and the request goes again on a new connection, made after a short
 * pause, whose connect() resolves the host name again - twice at most: a
 * URL that names a replica gets its READONLY (REDMUTEX_ESERVER) within a few
 * milliseconds, and the next call starts on a new connection anyway.
 *
 * Layering: the fan-out's own, above the deployments (sentinel.c).
 */
#define _GNU_SOURCE
#include "client.h"
#include "conn.h"
#include "deploy.h"
#include "failover.h"
#include "fanout.h"
#include "internal.h"
#include "pool.h"
#include "sentinel.h"

#include <stdio.h>
#include <string.h>

/* Pauses between tries while the sentinels still name the old master: 5, 10, 20, 40, then 50 ms. */
#define RM_FAILOVER_PAUSE_MAX_MS 50
/* A standalone server that answers READONLY is tried this many more times, on new connections. */
#define RM_READONLY_RETRIES 2

static int64_t pause_ns(int tries)
{
    int64_t ms = (int64_t)5 << (tries < 4 ? tries : 4);
    return (ms > RM_FAILOVER_PAUSE_MAX_MS ? RM_FAILOVER_PAUSE_MAX_MS : ms) * RM_NS_PER_MS;
}

bool rm_failover_route(rm_call *call, rm_slot *s)
{
    redmutex_client *c = call->c;
    for (int tries = 0;; tries++) {
        rm_client_lock(c);
        s->node = rm_sentinel_master_locked(c, s->dep);
        bool watched = c->pool.watch != NULL;
        rm_client_unlock(c);
        if (!watched) /* a forked child: the parent's watcher did not come along */
            rm_watch_start(NULL, c);
        if (s->node)
            return true;
        rm_err e;
        rm_err_reset(&e);
        int rc = rm_sentinel_resolve(&e, c, s->dep, NULL, s->deadline_ns);
        if (rc == 0)
            continue;
        if (rc == RM_SENTINEL_SAME && rm_now_ns() + pause_ns(0) < s->deadline_ns) {
            /* Another thread is asking the sentinels: its answer comes within its deadline. */
            rm_poll_fd(-1, 0, rm_now_ns() + pause_ns(tries > 2 ? 2 : tries));
            continue;
        }
        rm_slot_fail(s, rc == RM_SENTINEL_SAME ? REDMUTEX_ECONN : rc, e.msg);
        s->broken = rc != REDMUTEX_EAUTH; /* the sentinels may answer better a moment later: rerouted */
        return false;
    }
}

/* Starts s again: at once on the master the sentinels name now, or after a pause (s->msg says why). */
static void start_again(rm_call *call, rm_slot *s, const rm_req *req, int64_t connect_deadline, bool now)
{
    size_t i = (size_t)(s - call->slots);
    s->status = RM_SLOT_RUNNING;
    s->err = 0;
    s->broken = false;
    s->sent = false;
    s->asking = false;
    s->node = NULL;
    s->retry_at = 0;
    s->reroutes++;
    if (!now) {
        s->retry_at = rm_now_ns() + pause_ns(s->reroutes - 1);
        call->pending[i] = true;
        return;
    }
    call->pending[i] = !rm_slot_start(call, s, req, connect_deadline);
}

/* The sentinels asked again, passing over `avoid`: start s again now or after a pause, or fail it. */
static void ask_again(rm_call *call, rm_slot *s, rm_server *avoid, const rm_req *req, int64_t connect_deadline,
                      const char *why)
{
    rm_err e;
    rm_err_reset(&e);
    /* Too late to ask: the node's own failure is the reason to report. */
    int rc = rm_now_ns() + RM_NS_PER_MS * 20 < s->deadline_ns
                 ? rm_sentinel_resolve(&e, call->c, s->dep, avoid, s->deadline_ns)
                 : rm_fail(&e, REDMUTEX_ECONN, "no time was left to ask the sentinels again");
    if (rc != 0 && rc != RM_SENTINEL_SAME) {
        char msg[sizeof s->msg];
        if (avoid) /* the node's failure, then the sentinels' */
            snprintf(msg, sizeof msg, "%.100s; %.140s", why, e.msg);
        else /* the sentinels' own, again */
            snprintf(msg, sizeof msg, "%.250s", e.msg);
        rm_slot_fail(s, rc, msg);
        s->broken = false; /* the sentinels' own answer: no use asking again at once */
        return;
    }
    /* While paused, the slot's message is why: it is the error if the deadline comes first. */
    char msg[sizeof s->msg];
    snprintf(msg, sizeof msg, "%.120s, and the sentinels have not named another master yet", why);
    start_again(call, s, req, connect_deadline, rc == 0);
    if (rc != 0)
        memcpy(s->msg, msg, sizeof msg);
}

void rm_failover_reroute(rm_call *call, rm_slot *s, const rm_req *req, int64_t connect_deadline)
{
    char why[sizeof s->msg];
    memcpy(why, s->msg, sizeof why);
    rm_server *avoid = s->node;
    if (s->stalled) {
        /* A master that stalls is not asked (fanout.c): the sentinels are, once; if they still name
           it, the slot keeps its reason and nothing waits for it (a stall costs no time). */
        rm_err e;
        rm_err_reset(&e);
        if (rm_sentinel_resolve(&e, call->c, s->dep, avoid, s->deadline_ns) == 0) {
            s->stalled = false;
            start_again(call, s, req, connect_deadline, true);
        }
        return;
    }
    ask_again(call, s, avoid, req, connect_deadline, why);
}

/* The first reply of s saying its server is a replica, or NULL. */
static const char *replica_reply(const rm_slot *s, const rm_req *req)
{
    for (size_t k = 0; k < req->ncmds; k++) {
        const rm_reply *r = s->replies[k];
        if (r && r->type == RM_REPLY_ERROR &&
            (strncmp(r->str, "READONLY", 8) == 0 || strncmp(r->str, "ERR WAIT cannot be used with replica", 36) == 0))
            return r->str;
    }
    return NULL;
}

/* Closes the idle connections of srv: they lead to the same replica. */
static void drop_idle(redmutex_client *c, rm_server *srv)
{
    rm_client_lock(c);
    for (size_t k = 0; k < srv->n_idle; k++)
        rm_conn_close(srv->idle[k]);
    srv->n_idle = 0;
    rm_client_unlock(c);
}

bool rm_failover_read(rm_call *call, rm_slot *s, const rm_req *req)
{
    redmutex_client *c = call->c;
    const char *m = s->fixed_node ? NULL : replica_reply(s, req);
    if (!m)
        return false;
    rm_server *srv = s->conn->srv;
    char why[sizeof s->msg];
    snprintf(why, sizeof why, "%s answered %.*s: it is a replica now, not the master", srv->ep.display,
             (int)strcspn(m, " "), m);
    rm_slot_clear(s);
    rm_pool_give(c, s->conn, false, 0); /* closed: it leads to a replica */
    s->conn = NULL;
    drop_idle(c, srv);
    if (rm_now_ns() >= s->deadline_ns) {
        rm_slot_fail(s, REDMUTEX_ECONN, why);
        return true;
    }
    if (rm_deploy_is_sentinel(c, s->dep)) {
        ask_again(call, s, srv, req, s->deadline_ns, why);
        return true;
    }
    /* A standalone endpoint: a new connection after a pause, to wherever its name leads now. */
    char msg[sizeof s->msg];
    snprintf(msg, sizeof msg, "%.180s (tried again on new connections; the next call starts on a new one)", why);
    if (s->reroutes >= RM_READONLY_RETRIES || rm_now_ns() + pause_ns(s->reroutes) >= s->deadline_ns) {
        rm_slot_fail(s, REDMUTEX_ESERVER, msg); /* a replica's refusal: the server's own error */
        return true;
    }
    start_again(call, s, req, s->deadline_ns, false);
    memcpy(s->msg, msg, sizeof msg);
    return true;
}

/*
 * A slot whose connection failed before its request went out may try
 * elsewhere within its deadline: the next seed of a multi-host URL, or, on
 * a cluster, the slot's owner after a refresh of the map (a master that
 * died and was replaced), on a Sentinel deployment the master the sentinels
 * name (rm_failover_reroute). Nothing ran, so nothing is sent twice.
 */
void rm_failover_reroute_failed(rm_call *call, const rm_req *req, int64_t connect_deadline, bool *pending)
{
    redmutex_client *c = call->c;
    for (size_t i = 0; i < call->n; i++) {
        rm_slot *s = &call->slots[i];
        bool sentinel = rm_deploy_is_sentinel(c, s->dep);
        if (s->status != RM_SLOT_DONE || !(s->broken || (s->stalled && sentinel)) || s->sent ||
            s->err != REDMUTEX_ECONN || s->excluded || s->fixed_node || rm_now_ns() >= s->deadline_ns)
            continue;
        if (sentinel) { /* the sentinels may name another master (failover.c) */
            rm_failover_reroute(call, s, (s->req ? s->req : req), connect_deadline);
            continue;
        }
        rm_server *entry = &c->pool.servers[s->dep];
        bool cluster = rm_deploy_is_cluster(c, s->dep);
        int seeds = entry->ep.n_seeds;
        if (cluster ? s->reroutes >= 2 : seeds < 2 || s->reroutes >= seeds - 1)
            continue;
        s->reroutes++;
        if (cluster)
            rm_deploy_refresh(NULL, c, s->dep, s->deadline_ns);
        else
            atomic_store(&entry->seed, (atomic_load(&entry->seed) + 1) % seeds);
        s->status = RM_SLOT_RUNNING;
        s->err = 0;
        s->broken = false;
        s->node = NULL;
        s->asking = s->ask_fixed;
        pending[i] = !rm_slot_start(call, s, (s->req ? s->req : req), connect_deadline);
    }
}
