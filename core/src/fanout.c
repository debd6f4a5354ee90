/*
 * The one path every operation takes: send the same request to all N servers at once, then
 * collect the replies with poll() until all have answered, the deadline passes, or the caller's
 * decided() says the outcome can no longer change. N = 1 is simply the smallest N.
 *
 * A server that has not answered by then keeps its connection if the whole request went out: the
 * replies it still owes are skipped by the next request on that connection. That keeps commands
 * to one server in order (an acquire that timed out and the release that cleans it up travel on
 * the same connection), and a slow server costs no reconnect.
 *
 * Each of the N servers is a deployment (deploy.h): a standalone server, or a cluster, where the
 * request goes to the master of its lock name's hash slot and follows MOVED and ASK there
 * (redirect.c) - a table lookup, no round trip. A call may also be made of targets that each
 * carry their own request (the watchdog's batch per cluster node, renew.c).
 */
#define _GNU_SOURCE
#include "client.h"
#include "conn.h"
#include "deploy.h"
#include "failover.h"
#include "fanout.h"
#include "internal.h"
#include "pool.h"
#include "resp.h"
#include "scripts.h"
#include "sentinel.h"

#include <errno.h>
#include <stddef.h>
#include <stdatomic.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

/* Beyond this many owed replies a connection is not kept. Closing one ends
   the per-server order of the requests it carried, and on a server that
   stalls its replacement waits in a handshake that is not answered either:
   a stall of seconds owes thousands. (A request that does not fit in the
   socket's buffers is not sent whole, and closes it anyway.) */
#define RM_OWED_MAX 65536

int rm_call_begin_targets(rm_err *err, rm_call *call, redmutex_client *c, size_t n)
{
    memset(call, 0, offsetof(rm_call, inline_slots)); /* the slots not used stay as they are */
    call->c = c;
    call->n = n;
    if (n <= RM_INLINE_SLOTS) {
        call->slots = call->inline_slots;
        memset(call->slots, 0, n * sizeof *call->slots);
    } else {
        call->slots = calloc(n, sizeof *call->slots);
        if (!call->slots)
            return rm_fail(err, REDMUTEX_ENOMEM, "out of memory");
    }
    for (size_t i = 0; i < n; i++) {
        rm_slot *s = &call->slots[i];
        s->dep = i < c->n ? i : 0;
        s->replies = s->small_replies;
        s->n_replies = RM_REQ_MAX_CMDS;
    }
    return 0;
}

int rm_call_begin(rm_err *err, rm_call *call, redmutex_client *c) { return rm_call_begin_targets(err, call, c, c->n); }

void rm_call_clear(rm_call *call)
{
    for (size_t i = 0; i < call->n; i++)
        rm_slot_clear(&call->slots[i]);
}

void rm_call_end(rm_call *call)
{
    if (!call->slots)
        return;
    rm_call_clear(call);
    for (size_t i = 0; i < call->n; i++) {
        rm_slot *s = &call->slots[i];
        if (s->conn)
            rm_pool_give(call->c, s->conn, !s->broken, call->order_key);
        s->conn = NULL;
        if (s->replies != s->small_replies)
            free(s->replies);
        s->replies = s->small_replies;
    }
    if (call->slots != call->inline_slots)
        free(call->slots);
    call->slots = NULL;
}

static int mark_owing(rm_call *call, rm_conn *conn)
{
    if (call->order_key && rm_pool_mark_owing(call->c, conn, call->order_key) != 0)
        return -1;
    if (call->owner_key && rm_pool_mark_owing(call->c, conn, call->owner_key) != 0)
        return -1;
    for (size_t k = 0; k < call->n_order_keys; k++)
        if (rm_pool_mark_owing(call->c, conn, call->order_keys[k]) != 0)
            return -1;
    return 0;
}

/* What happens to a connection whose request is still unanswered at the end. */
static void slot_abandon(rm_call *call, rm_slot *s, const char *why)
{
    rm_conn *conn = s->conn;
    if (conn && rm_deploy_is_cluster(call->c, s->dep))
        rm_deploy_node_failed(conn->srv); /* a node silent past the deadline may be gone: read the map again */
    /* Keep it if the request went out whole (a connection still in its
       handshake has sent no request: closing it changes nothing). */
    bool keep = conn && !conn->connecting && conn->out.len == 0 && !s->handshaking && s->total - s->got <= RM_OWED_MAX;
    if (keep && mark_owing(call, conn) != 0)
        keep = false;
    if (keep) {
        conn->owed = s->total - s->got;
        s->err = REDMUTEX_ECONN;
        snprintf(s->msg, sizeof s->msg, "%s %s", conn->srv->ep.display, why);
        s->status = RM_SLOT_DONE;
        /* Back to the pool's owing list now, not at the call's end: the
           call may go on waiting for other servers for a while, and the
           next request for these names, from any thread, is to follow this
           connection (its replies are read then), not to wait for the call. */
        s->owing = true;
        s->conn = NULL;
        rm_pool_give(call->c, conn, true, call->order_key);
    } else {
        const char *step = conn ? rm_conn_pending_step(conn) : NULL;
        rm_slot_break(s, REDMUTEX_ECONN, "%s %s%s%s%s", conn ? conn->srv->ep.display : "server", why, step ? " (" : "",
                      step ? step : "", step ? ")" : "");
    }
}

/* When slot s's server counts as stalling if it shows no progress meanwhile; 0 if unknown. */
static int64_t stall_time(const rm_call *call, const rm_slot *s)
{
    int64_t since = s->conn ? atomic_load_explicit(&s->conn->progress_ns, memory_order_relaxed) : s->busy_since;
    return since > 0 && since < INT64_MAX ? since + call->c->opts.command_timeout_ms * RM_NS_PER_MS : 0;
}

/* s's server stalls (rm_server_stalls): the request is not sent there. */
static void slot_skip_stalled(rm_call *call, rm_slot *s, int64_t now)
{
    rm_server *srv = s->node;
    int64_t since = atomic_load_explicit(&srv->answered_ns, memory_order_relaxed);
    /* On a cluster, a node that stalls may have been failed over: as for a
       request that timed out there, the map is read again before the next
       request is routed (else, once skipped without a timeout, nothing would
       ever look for its replacement). */
    if (rm_deploy_is_cluster(call->c, s->dep))
        rm_deploy_node_failed(srv);
    if (s->conn) {
        rm_pool_give(call->c, s->conn, true, 0); /* it stays listed as owing what it owed */
        s->conn = NULL;
    }
    rm_slot_fail(s, REDMUTEX_ECONN, "");
    s->stalled = true;
    snprintf(s->msg, sizeof s->msg, "%s has answered nothing for %lld ms (it stalls): not asked", srv->ep.display,
             (long long)((now - since) / RM_NS_PER_MS));
}

/* The server this run's request goes to: the caller's node, the node a
   redirect named, or the deployment's route for the request's slot. False
   with the slot failed when there is none (or the name cannot be used on a
   cluster). */
static bool slot_target(rm_call *call, rm_slot *s, const rm_req *req)
{
    if (s->fixed_node)
        s->node = s->fixed_node;
    if (s->node)
        return true;
    if (rm_deploy_is_sentinel(call->c, s->dep))
        return rm_failover_route(call, s);
    rm_err e;
    rm_err_reset(&e);
    if (rm_deploy_is_cluster(call->c, s->dep) ? rm_redirect_route(&e, call, s, req) != 0
                                              : !(s->node = rm_deploy_route(&e, call->c, s->dep, -1))) {
        rm_slot_fail(s, e.code, e.msg);
        s->broken = e.code == REDMUTEX_ECONN; /* a slot with no master: a refresh may find one */
        return false;
    }
    return true;
}

/* Gets the slot's connection and sends what can be sent at once. false while
   the connection this request must follow is lent to another call. */
bool rm_slot_start(rm_call *call, rm_slot *s, const rm_req *req, int64_t connect_deadline)
{
    redmutex_client *c = call->c;
    if (!slot_target(call, s, req))
        return true;
    int64_t now = rm_now_ns();
    /* A stall that ended shows in the replies owed; with none awaited any
       more, this request goes, to see whether it has. */
    if (!call->must_send && !s->conn && rm_server_stalls(c, s->node, 0, now) && rm_pool_settle(c, s->node) &&
        rm_server_stalls(c, s->node, 0, now)) {
        slot_skip_stalled(call, s, now);
        return true;
    }
    /* The connection of the call's last request there, unless another one
       must be followed now (see rm_pool_retake). */
    rm_err e;
    rm_err_reset(&e);
    int rc = rm_pool_retake(&e, c, s->node, call->order_key, &s->conn, &s->busy_since);
    if (rc == RM_CONN_BUSY)
        return false;
    if (rc != 0) {
        rm_slot_break(s, rc, "%s", e.msg);
        return true;
    }
    int64_t since = atomic_load_explicit(&s->conn->progress_ns, memory_order_relaxed);
    if (!call->must_send && s->conn->owed > 0 && rm_server_stalls(c, s->node, since, now)) {
        slot_skip_stalled(call, s, now);
        return true;
    }
    if (s->conn->fresh && connect_deadline > s->deadline_ns && !call->strict_deadline)
        s->deadline_ns = connect_deadline;
    if (s->conn->fresh)
        rm_slot_handshake(s);
    else
        rc = rm_slot_request(s, req, false);
    if (rc != 0) {
        rm_slot_break(s, REDMUTEX_ENOMEM, "out of memory");
        return true;
    }
    /* Most requests are small: try to send at once, saving a poll. */
    if (!s->conn->connecting)
        rm_slot_write(s);
    return true;
}

/*
 * A request that must reach every server (a release, an undo) and is still
 * waiting at its deadline for the connection it must follow, lent to
 * another call: dropping it would leave the key to its lease, so it is
 * queued behind that connection and goes out when the connection is free.
 * Its outcome there is unknown to the caller. (A slot pausing before a
 * retry - TRYAGAIN, CLUSTERDOWN - ends with the reason it paused for: its
 * request did not run.)
 */
static void slot_defer(rm_call *call, rm_slot *s, const rm_req *req, int64_t connect_deadline)
{
    if (s->retry_at) {
        char why[sizeof s->msg];
        memcpy(why, s->msg, sizeof why);
        rm_slot_fail(s, REDMUTEX_ECONN, why);
        return;
    }
    if (call->must_send && call->order_key && slot_target(call, s, req)) {
        rm_buf b = {0};
        int rc = 0;
        for (size_t k = 0; rc == 0 && k < req->ncmds; k++) /* EVAL: the script cache may be gone by then */
            rc = rm_cmd_format(&b, rm_req_cmd(req, k), true, rm_deploy_publish_verb(call->c, s->dep), NULL);
        if (rc == 0)
            rc = rm_pool_defer(call->c, s->node, call->order_key, call->owner_key, b.data, b.len, req->ncmds);
        rm_buf_free(&b);
        if (rc == 0) {
            rm_slot_fail(s, REDMUTEX_ECONN, "queued behind an earlier request for this lock that is still unanswered");
            s->sent = true; /* it will run there: its outcome is unknown */
            return;
        }
        if (rc == 1 && rm_slot_start(call, s, req, connect_deadline))
            return; /* the earlier request was answered meanwhile: sent now, abandoned at the next turn */
    }
    if (s->status == RM_SLOT_RUNNING)
        rm_slot_fail(s, REDMUTEX_ECONN, "an earlier request for this lock is still unanswered there");
}

static void slot_reset(rm_slot *s, int64_t deadline_ns)
{
    s->node = NULL;
    s->redirects = 0;
    s->retries = 0;
    s->asking = s->ask_fixed;
    s->reroutes = 0;
    s->retry_at = 0;
    s->keyslot = -1;
    s->status = RM_SLOT_RUNNING;
    s->err = 0;
    s->msg[0] = '\0';
    s->broken = false;
    s->sent = false;
    s->not_waited = false;
    s->owing = false;
    s->stalled = false;
    s->excluded = false;
    s->handshaking = false;
    s->timed_out = false;
    s->deadline_ns = deadline_ns;
    s->busy_since = 0;
}

/* Per-slot wait state for the poll loop: a slot waiting for its connection
   polls nothing and is retried every few milliseconds. */
#define RM_CONN_RETRY_MS 2

/* Whether some running slot has not sent its request whole yet: still
   waiting for its connection, in its handshake, or with bytes unsent. */
static bool any_unsent(const rm_call *call, const bool *pending)
{
    for (size_t i = 0; i < call->n; i++) {
        const rm_slot *s = &call->slots[i];
        if (s->status == RM_SLOT_RUNNING &&
            (pending[i] || !s->conn || s->handshaking || !s->sent || s->conn->connecting || s->conn->out.len > 0))
            return true;
    }
    return false;
}

/* The request slot s sends: its own (a per-node renewal batch), or the run's. */
static const rm_req *slot_req(const rm_slot *s, const rm_req *req) { return s->req ? s->req : req; }

/* Starts every slot of the run (or fails it at once: left out, duplicate);
   pending[i]: waiting for a connection lent to another call. */
static void start_slots(rm_call *call, const rm_req *req, int64_t deadline_ns, int64_t connect_deadline, bool *pending)
{
    redmutex_client *c = call->c;
    for (size_t i = 0; i < call->n; i++) {
        rm_slot *s = &call->slots[i];
        slot_reset(s, deadline_ns);
        if (call->only && !call->only[i]) {
            s->excluded = true;
            rm_slot_fail(s, REDMUTEX_ENOTOWNER, "not sent: this server did not grant the lock");
            continue;
        }
        if (atomic_load(&c->pool.servers[s->dep].duplicate)) {
            rm_slot_fail(s, REDMUTEX_EDUPLICATE, "server is a duplicate of another endpoint");
            continue;
        }
        pending[i] = !rm_slot_start(call, s, slot_req(s, req), connect_deadline);
    }
}

/* The descriptors of one poll() round, and when it must end. */
typedef struct poll_set {
    struct pollfd *pfds;
    size_t *map; /* pfds[k] is slot map[k] */
    size_t np;
    int64_t next_deadline;
    bool retrying; /* a slot waits for a lent connection: poll briefly and try again */
} poll_set;

/* A pending slot: starts it if it may, else notes when to look again. */
static void poll_pending(rm_call *call, rm_slot *s, const rm_req *req, int64_t now, int64_t connect_deadline,
                         bool *pending, poll_set *ps)
{
    size_t i = (size_t)(s - call->slots);
    if (now >= s->deadline_ns)
        return;
    if (s->retry_at > now) { /* a pause before a retry (TRYAGAIN, CLUSTERDOWN...) */
        if (s->retry_at < ps->next_deadline)
            ps->next_deadline = s->retry_at;
        return;
    }
    pending[i] = !rm_slot_start(call, s, req, connect_deadline);
    if (s->status == RM_SLOT_RUNNING && pending[i])
        ps->retrying = true;
}

/* Retries pending slots, ends those past their deadline, and lists the rest for poll(). */
static void poll_prepare(rm_call *call, const rm_req *req, int64_t connect_deadline, bool *pending, poll_set *ps)
{
    int64_t now = rm_now_ns();
    ps->next_deadline = INT64_MAX;
    ps->np = 0;
    ps->retrying = false;
    for (size_t i = 0; i < call->n; i++) {
        rm_slot *s = &call->slots[i];
        const rm_req *r = slot_req(s, req);
        if (s->status != RM_SLOT_RUNNING)
            continue;
        if (pending[i])
            poll_pending(call, s, r, now, connect_deadline, pending, ps);
        if (s->status != RM_SLOT_RUNNING)
            continue;
        if (pending[i] && !s->retry_at && s->node && rm_server_stalls(call->c, s->node, s->busy_since, now)) {
            /* The connection it must follow is lent, and its server stalls. */
            pending[i] = false;
            if (call->must_send)
                slot_defer(call, s, r, connect_deadline);
            else
                slot_skip_stalled(call, s, now);
            continue;
        }
        if (now >= s->deadline_ns) {
            s->timed_out = true;
            if (pending[i]) {
                pending[i] = false;
                slot_defer(call, s, r, connect_deadline);
            } else {
                /* Unanswered for a command timeout: the server stalls, if
                   it answered nothing else meanwhile either. The wait began
                   with the request, or before it on a connection that owed
                   answers already; a connection opened for this request
                   started its wait a little after the request, and the
                   deadline would otherwise always come just too soon. */
                int64_t since = atomic_load(&s->conn->progress_ns);
                if (s->req_ns > 0 && s->req_ns < since)
                    since = s->req_ns;
                bool stalled = rm_server_stalls(call->c, s->node, since, now);
                slot_abandon(call, s, stalled ? "did not answer in time (it stalls)" : "did not answer in time");
                s->stalled = stalled;
            }
            continue;
        }
        if (s->deadline_ns < ps->next_deadline)
            ps->next_deadline = s->deadline_ns;
        /* The moment its server would count as stalling may decide the call. */
        int64_t stalls_at = stall_time(call, s);
        if (stalls_at > now && stalls_at < ps->next_deadline)
            ps->next_deadline = stalls_at;
        if (pending[i])
            continue;
        ps->pfds[ps->np].fd = s->conn->fd;
        ps->pfds[ps->np].events = rm_conn_events(s->conn, s->conn->out.len > 0);
        ps->pfds[ps->np].revents = 0;
        ps->map[ps->np++] = i;
    }
}

/* Writes and reads what poll() reported ready. */
static void poll_dispatch(rm_call *call, const rm_req *req, const poll_set *ps)
{
    for (size_t k = 0; k < ps->np; k++) {
        rm_slot *s = &call->slots[ps->map[k]];
        short ev = ps->pfds[k].revents;
        if (!ev || s->status != RM_SLOT_RUNNING)
            continue;
        if (ev & POLLOUT || s->conn->connecting)
            rm_slot_write(s);
        /* Any event may let TLS read on (it can wait for writability too). */
        if (s->status == RM_SLOT_RUNNING && !s->conn->connecting)
            rm_slot_read(call, s, slot_req(s, req));
        if (s->status == RM_SLOT_RUNNING && s->conn && s->conn->out.len > 0 && !s->conn->connecting)
            rm_slot_write(s);
    }
}

/* decided() ended the run early: the rest are not waited for. */
static void end_unwaited(rm_call *call, const bool *pending)
{
    for (size_t i = 0; i < call->n; i++) {
        rm_slot *s = &call->slots[i];
        if (s->status != RM_SLOT_RUNNING)
            continue;
        /* One left because its server stalls is named so in messages. */
        bool stalls = s->node && rm_server_stalls(call->c, s->node, 0, rm_now_ns());
        const char *why = stalls ? "stalls: not waited for" : "was not waited for (outcome already decided)";
        if (pending[i]) {
            rm_slot_fail(s, REDMUTEX_ECONN, why);
        } else {
            slot_abandon(call, s, why);
        }
        s->not_waited = true;
        s->stalled = s->stalled || stalls;
    }
}

/* Polls and serves the slots until the outcome is decided (and, for a
   release, sent everywhere), every slot is done, or poll() fails. */
static void run_loop(rm_call *call, const rm_req *req, int64_t connect_deadline, bool *pending, rm_decided_fn decided,
                     void *ud, poll_set *ps)
{
    bool decided_now = false;
    for (;;) {
        if (!decided_now && decided && decided(call, ud))
            decided_now = true;
        if (decided_now && !(call->must_send && any_unsent(call, pending)))
            break;
        rm_failover_reroute_failed(call, req, connect_deadline, pending);
        poll_prepare(call, req, connect_deadline, pending, ps);
        if (ps->np == 0 && !ps->retrying && ps->next_deadline == INT64_MAX)
            break;
        int64_t ms = rm_ms_until(ps->next_deadline);
        if (ps->retrying && ms > RM_CONN_RETRY_MS)
            ms = RM_CONN_RETRY_MS;
        int r = poll(ps->pfds, ps->np, ms > 60000 ? 60000 : (int)ms);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            for (size_t k = 0; k < ps->np; k++)
                rm_slot_break(&call->slots[ps->map[k]], REDMUTEX_ECONN, "poll: %s", strerror(errno));
            break;
        }
        poll_dispatch(call, req, ps);
    }
}

/* Statistics and log messages (stats.c): each server's round trip, or the
   class of its failure (counted for the node the request went to); servers
   left out or not waited for tell nothing. */
static void count_servers(const rm_call *call)
{
    if (!rm_stats_watching(&call->c->stats))
        return;
    for (size_t i = 0; i < call->n; i++) {
        const rm_slot *s = &call->slots[i];
        const char *refused = NULL; /* an error reply: answered all the same */
        for (size_t k = 0; k < s->n_replies && !s->err && !refused; k++)
            if (s->replies[k] && s->replies[k]->type == RM_REPLY_ERROR)
                refused = s->replies[k]->str;
        const rm_server *srv = s->node ? s->node : &call->c->pool.servers[s->dep];
        if (s->status == RM_SLOT_DONE && !s->excluded && !s->not_waited)
            rm_stats_server_done(srv->stats, s->err, s->timed_out, s->done_ns - s->req_ns, s->err ? s->msg : refused);
    }
}

int rm_call_run(rm_call *call, const rm_req *req, int64_t deadline_ns, rm_decided_fn decided, void *ud)
{
    redmutex_client *c = call->c;
    rm_call_clear(call);
    call->started_ns = rm_now_ns();
    call->order_key = req->order_name ? rm_order_key(req->order_name) : 0;
    call->owner_key = req->order_name && call->order_owner ? rm_owner_key(req->order_name, call->order_owner) : 0;
    int64_t connect_deadline = call->started_ns + c->opts.connect_timeout_ms * RM_NS_PER_MS;
    bool small_pending[REDMUTEX_SERVERS_MAX] = {false}; /* waiting for a lent connection, or to retry */
    bool *pending = call->n <= REDMUTEX_SERVERS_MAX ? small_pending : calloc(call->n, sizeof *pending);
    if (!pending)
        return REDMUTEX_ENOMEM;
    call->pending = pending;
    start_slots(call, req, deadline_ns, connect_deadline, pending);

    struct pollfd small_pfds[RM_INLINE_SLOTS];
    size_t small_map[RM_INLINE_SLOTS];
    poll_set ps = {small_pfds, small_map, 0, INT64_MAX, false};
    if (call->n > RM_INLINE_SLOTS) {
        ps.pfds = malloc(call->n * sizeof *ps.pfds);
        ps.map = malloc(call->n * sizeof *ps.map);
        if (!ps.pfds || !ps.map) {
            free(ps.pfds);
            free(ps.map);
            call->pending = NULL;
            if (pending != small_pending)
                free(pending);
            for (size_t k = 0; k < call->n; k++)
                if (call->slots[k].status == RM_SLOT_RUNNING)
                    rm_slot_break(&call->slots[k], REDMUTEX_ENOMEM, "out of memory");
            return REDMUTEX_ENOMEM;
        }
    }
    run_loop(call, req, connect_deadline, pending, decided, ud, &ps);
    end_unwaited(call, pending);
    count_servers(call);
    call->pending = NULL;
    if (pending != small_pending)
        free(pending);
    if (ps.pfds != small_pfds) {
        free(ps.pfds);
        free(ps.map);
    }
    return 0;
}

bool rm_call_only_stalls_left(rm_call *call, void *ud)
{
    (void)ud;
    size_t running = 0;
    for (size_t i = 0; i < call->n; i++)
        running += call->slots[i].status == RM_SLOT_RUNNING;
    return rm_call_stalled(call) == running;
}

size_t rm_call_stalled(const rm_call *call)
{
    int64_t now = rm_now_ns();
    size_t n = 0;
    for (size_t i = 0; i < call->n; i++) {
        const rm_slot *s = &call->slots[i];
        if (s->status != RM_SLOT_RUNNING || !s->node)
            continue;
        int64_t since = s->conn ? atomic_load_explicit(&s->conn->progress_ns, memory_order_relaxed) : s->busy_since;
        n += rm_server_stalls(call->c, s->node, since, now);
    }
    return n;
}
