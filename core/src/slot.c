/*
 * One slot of a fan-out (slot.c): the handshake and the request on its
 * connection, sending, reading the replies, and acting on what they say
 * (NOSCRIPT, a cluster's redirects). fanout.c runs the slots together.
 *
 * Layering: the fan-out's own (fanout.c, slot.c, redirect.c).
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

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Frees slot s's replies (their array stays). */
void rm_slot_clear(rm_slot *s)
{
    for (size_t k = 0; k < s->n_replies; k++) {
        rm_reply_free(s->replies[k]);
        s->replies[k] = NULL;
    }
}

void rm_slot_fail(rm_slot *s, int code, const char *msg)
{
    s->err = code;
    snprintf(s->msg, sizeof s->msg, "%s", msg);
    s->status = RM_SLOT_DONE;
}

/* A transport failure: the connection's state is unknown, so it is closed. */
void rm_slot_break(rm_slot *s, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->msg, sizeof s->msg, fmt, ap);
    va_end(ap);
    s->err = code;
    s->status = RM_SLOT_DONE;
    s->broken = true;
    if (s->conn && code == REDMUTEX_ECONN)
        rm_deploy_node_failed(s->conn->srv); /* on a cluster: it may have failed over */
    if (s->conn) {
        rm_pool_give(s->conn->srv->client, s->conn, false, 0); /* closes it, off every list */
        s->conn = NULL;
    }
}

/*
 * A fresh connection sends its handshake (AUTH, SELECT, INFO, SCRIPT LOAD)
 * alone and the request only once every handshake reply said yes: a failed
 * AUTH or SELECT must not let a lock command run as the default user or in
 * the wrong database. It costs one round trip per new connection.
 */
void rm_slot_handshake(rm_slot *s)
{
    rm_conn *conn = s->conn;
    conn->out.len = 0;
    s->skip = 0;
    /* Every server's run_id is tracked, one server or many: a restart
       without persistence loses the locks it held (see client.c). */
    s->want_info = true;
    s->handshake_n = rm_conn_handshake(conn, &conn->out, s->want_info);
    conn->fresh = false;
    s->got = 0;
    s->total = s->handshake_n;
    s->handshaking = true;
    rm_conn_progress(conn); /* a fresh connection owes nothing yet */
}

/* Room for one reply per command of req. 0 or REDMUTEX_ENOMEM. */
static int slot_room(rm_slot *s, const rm_req *req)
{
    if (req->ncmds <= s->n_replies)
        return 0;
    rm_reply **r = calloc(req->ncmds, sizeof *r);
    if (!r)
        return REDMUTEX_ENOMEM;
    rm_slot_clear(s);
    if (s->replies != s->small_replies)
        free(s->replies);
    s->replies = r;
    s->n_replies = req->ncmds;
    return 0;
}

int rm_slot_request(rm_slot *s, const rm_req *req, bool eval)
{
    rm_conn *conn = s->conn;
    conn->out.len = 0;
    if (slot_room(s, req) != 0)
        return REDMUTEX_ENOMEM;
    s->handshaking = false;
    s->handshake_n = 0;
    s->skip = conn->owed;
    conn->owed = 0;
    /* Commands queued behind this connection go first (their replies are skipped). */
    size_t later = rm_pool_take_later(conn->srv->client, conn, &conn->out);
    if (later == (size_t)-1)
        return REDMUTEX_ENOMEM;
    s->skip += later;
    if (s->skip == 0)
        rm_conn_progress(conn); /* nothing was owed: the wait for this answer starts now */
    /* The deployment's own publish command, the replicas a WAIT can ask of
       this node, and ASKING in front of each command after an ASK (it holds
       for one command). */
    redmutex_client *c = conn->srv->client;
    const char *verb = rm_deploy_publish_verb(c, s->dep);
    char need[24];
    s->wait_need = c->opts.min_replicas > 0 ? rm_deploy_wait_need(c, conn->srv) : 0;
    snprintf(need, sizeof need, "%d", s->wait_need);
    s->role_probe = false;
    static const char *const asking[1] = {"ASKING"}, *const role[1] = {"ROLE"};
    for (size_t k = 0; k < req->ncmds; k++) {
        const rm_cmd *cmd = rm_req_cmd(req, k);
        if ((s->asking && rm_format_command(&conn->out, 1, asking, NULL)) ||
            rm_cmd_format(&conn->out, cmd, eval, verb, need))
            return REDMUTEX_ENOMEM;
        s->role_probe |= cmd->script < 0 && cmd->argc == 3 && cmd->argv[1] == RM_ARG_REPLICAS;
    }
    /* A master with fewer replicas than min_replicas: is one back? (No round trip: it rides along.) */
    s->role_probe = s->role_probe && rm_deploy_wants_role(c, conn->srv);
    if (s->role_probe && rm_format_command(&conn->out, 1, role, NULL))
        return REDMUTEX_ENOMEM;
    s->got = 0;
    s->total = s->skip + req->ncmds * (s->asking ? 2 : 1) + s->role_probe;
    s->used_eval = eval;
    s->req_ns = rm_now_ns();
    return 0;
}

static bool is_noscript(const rm_reply *r)
{
    return r && r->type == RM_REPLY_ERROR && strncmp(r->str, "NOSCRIPT", 8) == 0;
}

/* Called when every reply of the request is in. */
static bool follow_redirect(rm_call *call, rm_slot *s, const rm_req *req);

static void slot_complete(rm_call *call, rm_slot *s, const rm_req *req)
{
    bool noscript = false;
    for (size_t k = 0; k < req->ncmds; k++)
        if (rm_req_cmd(req, k)->script >= 0 && is_noscript(s->replies[k]))
            noscript = true;
    /* A cluster's redirects and retries first: a request that met them did not run. So did
       not one a replica refused (a demoted master: failover.c). */
    if (rm_deploy_is_cluster(call->c, s->dep) ? follow_redirect(call, s, req) : rm_failover_read(call, s, req))
        return;
    if (noscript && !s->used_eval) {
        /* The server lost its script cache (restart, SCRIPT FLUSH): send the
           request again with the script bodies. A NOSCRIPT reply means the
           script did not run, and our other commands (PTTL, WAIT) have no
           side effects; the one exception, a hand-off's SET NX riding behind
           a release, is treated as unknown by its caller (used_eval). */
        rm_slot_clear(s);
        if (rm_slot_request(s, req, true) != 0)
            rm_slot_break(s, REDMUTEX_ENOMEM, "out of memory");
        return;
    }
    s->status = RM_SLOT_DONE;
    s->done_ns = rm_now_ns();
    /* Every reply it owed is read: it no longer holds up the requests of
       other calls for the same lock (rm_pool_paid). */
    rm_pool_paid(call->c, s->conn);
}

/* The connection goes back to its pool and the slot starts again towards
   s->node (a redirect, or the owner of the slot the first handshake found):
   nothing of the request ran on it. */
static void slot_restart(rm_call *call, rm_slot *s, const rm_req *req)
{
    rm_pool_give(call->c, s->conn, true, 0); /* it owes nothing: every reply was read */
    s->conn = NULL;
    s->sent = false;
    s->handshaking = false;
    if (call->pending)
        call->pending[s - call->slots] = !rm_slot_start(call, s, req, s->deadline_ns);
}

/*
 * A cluster answered MOVED, ASK or asked for a retry (redirect.c): the
 * request did not run there. It goes again to the node named, now or after
 * a pause, within the run's deadline; or the slot fails with the reason.
 * True when the replies were such an answer.
 *
 * Per-node order holds across a move: a request abandoned on the old owner
 * (still owed there) either ran before the slot left it - its effect moved
 * with the keys, before the new owner served anything of that slot - or it
 * meets MOVED/ASK there and never runs. A release lost that way leaves the
 * key to its lease.
 */
static bool follow_redirect(rm_call *call, rm_slot *s, const rm_req *req)
{
    int action = rm_redirect_read(call, s, req);
    if (action == RM_REDIRECT_NONE)
        return false;
    rm_slot_clear(s);
    s->sent = false; /* it did not run */
    if (action == RM_REDIRECT_FAIL) {
        s->status = RM_SLOT_DONE; /* the connection is healthy: it goes back to its pool at the end */
        return true;
    }
    if (action == RM_REDIRECT_NOW) {
        slot_restart(call, s, req);
        return true;
    }
    rm_pool_give(call->c, s->conn, true, 0); /* RM_REDIRECT_LATER: at s->retry_at */
    s->conn = NULL;
    call->pending[s - call->slots] = true;
    return true;
}

/* One handshake reply: the server's life, and what the deployment is once
   the last reply is in. 0 or an error code (e's message). */
static int handshake_reply(rm_call *call, rm_slot *s, size_t idx, rm_reply **r, rm_err *e)
{
    rm_conn *conn = s->conn;
    int rc = rm_conn_check_handshake(e, conn, idx, s->handshake_n, s->want_info, r);
    if (rc == 0 && conn->run_id[0]) {
        /* INFO's run_id: the server's life, recorded by its pool. */
        rc = rm_server_note_run_id(e, call->c, conn->srv, conn->run_id);
        conn->run_id[0] = '\0';
    }
    if (rc == 0 && idx + 1 == s->handshake_n && conn->topo_asked)
        rc = rm_deploy_learn(e, call->c, conn);
    return rc;
}

/* Every reply of the handshake or of the request is in. */
static void slot_all_in(rm_call *call, rm_slot *s, const rm_req *req)
{
    if (rm_reader_pending(s->conn->reader) > 0) {
        /* Bytes nobody asked for would be taken as the next request's reply. */
        rm_slot_break(s, REDMUTEX_EPROTOCOL, "%s sent more than was asked for", s->conn->srv->ep.display);
        return;
    }
    if (!s->handshaking) {
        slot_complete(call, s, req);
        return;
    }
    /* The handshake succeeded. On a deployment found to be a cluster just
       now, the request goes to the owner of its slot, and a name whose keys
       cannot share a slot goes nowhere. */
    if (rm_deploy_is_cluster(call->c, s->dep) && !s->fixed_node) {
        rm_err e;
        rm_err_reset(&e);
        if (rm_redirect_route(&e, call, s, req) != 0) {
            rm_slot_fail(s, e.code, e.msg);
            return;
        }
        if (s->node != s->conn->srv) {
            slot_restart(call, s, req);
            return;
        }
    }
    if (rm_slot_request(s, req, false) != 0) {
        rm_slot_break(s, REDMUTEX_ENOMEM, "out of memory");
        return;
    }
    rm_slot_write(s);
}

/* Reads what the connection has; false when the slot broke. */
static bool slot_receive(rm_slot *s)
{
    rm_err e;
    rm_err_reset(&e);
    char buf[16384];
    rm_conn *conn = s->conn;
    for (;;) {
        ssize_t n = rm_conn_recv(&e, conn, buf, sizeof buf);
        if (n < 0) {
            rm_slot_break(s, (int)n, "%s", e.msg);
            return false;
        }
        if (n == 0)
            return true;
        char err[160];
        if (rm_reader_feed(conn->reader, buf, (size_t)n, err, sizeof err) != 0) {
            rm_slot_break(s, REDMUTEX_EPROTOCOL, "%s sent a bad reply: %s", conn->srv->ep.display, err);
            return false;
        }
        if ((size_t)n < sizeof buf)
            return true;
    }
}

/* Where reply number idx of a request goes: the slot's replies, or nowhere (a skipped reply, an
   ASKING's OK, the ROLE probe's answer - recorded on the node first). */
static rm_reply **reply_place(rm_slot *s, size_t idx, const rm_reply *r)
{
    if (idx < s->skip)
        return NULL;
    if (s->role_probe && idx + 1 == s->total) {
        rm_deploy_note_role(s->conn->srv, r);
        return NULL;
    }
    size_t k = idx - s->skip;
    if (s->asking) {
        if (k % 2 == 0)
            return NULL;
        k /= 2;
    }
    return &s->replies[k];
}

void rm_slot_read(rm_call *call, rm_slot *s, const rm_req *req)
{
    if (!slot_receive(s))
        return;
    rm_conn *conn = s->conn;
    const char *who = conn->srv->ep.display;
    for (;;) {
        rm_reply *r = NULL;
        char err[160];
        int got = rm_reader_next(conn->reader, &r, err, sizeof err);
        if (got < 0) {
            rm_slot_break(s, REDMUTEX_EPROTOCOL, "%s sent a bad reply: %s", who, err);
            return;
        }
        if (got == 0)
            return;
        size_t idx = s->got++;
        rm_conn_answered(conn);
        if (idx >= s->total) {
            rm_reply_free(r);
            rm_slot_break(s, REDMUTEX_EPROTOCOL, "%s sent a reply nobody asked for", who);
            return;
        }
        if (s->handshaking) {
            rm_err e;
            rm_err_reset(&e);
            int rc = handshake_reply(call, s, idx, &r, &e);
            rm_reply_free(r);
            if (rc != 0) {
                rm_slot_break(s, rc, "%s", e.msg);
                return;
            }
        } else {
            rm_reply **place = reply_place(s, idx, r);
            if (place)
                *place = r;
            else
                rm_reply_free(r);
        }
        if (s->got == s->total) {
            slot_all_in(call, s, req);
            return;
        }
    }
}

void rm_slot_write(rm_slot *s)
{
    rm_conn *conn = s->conn;
    rm_err e;
    rm_err_reset(&e);
    int rc = rm_conn_establish(&e, conn); /* connect() and the TLS handshake */
    if (rc < 0)
        rm_slot_break(s, rc, "%s", e.msg);
    if (rc != 0)
        return;
    while (s->conn->out.len > 0) {
        ssize_t n = rm_conn_send(&e, conn, s->conn->out.data, s->conn->out.len);
        if (n < 0) {
            rm_slot_break(s, (int)n, "%s", e.msg);
            return;
        }
        if (n == 0)
            return;
        rm_buf_consume(&s->conn->out, (size_t)n);
        if (!s->handshaking)
            s->sent = true;
    }
}

/* Lists conn as owing replies for every lock name the call orders. */
