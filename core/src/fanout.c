/*
 * The one path every operation takes: send the same request to all N
 * servers at once, then collect the replies with poll() until all have
 * answered, the deadline passes, or the caller's decided() says the outcome
 * can no longer change. N = 1 is simply the smallest N.
 *
 * A server that has not answered by then keeps its connection if the whole
 * request went out: the replies it still owes are skipped by the next
 * request on that connection. That keeps commands to one server in order
 * (an acquire that timed out and the release that cleans it up travel on the
 * same connection), and a slow server costs no reconnect.
 */
#define _GNU_SOURCE
#include "client.h"
#include "conn.h"
#include "fanout.h"
#include "internal.h"
#include "pool.h"
#include "resp.h"
#include "scripts.h"

#include <errno.h>
#include <stdatomic.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

/* Beyond this many owed replies a connection is not worth keeping. */
#define RM_OWED_MAX 256

int rm_call_begin(rm_err *err, rm_call *call, redmutex_client *c)
{
    memset(call, 0, sizeof *call);
    call->c = c;
    call->n = c->n;
    if (c->n <= RM_INLINE_SLOTS) {
        call->slots = call->inline_slots;
        memset(call->slots, 0, c->n * sizeof *call->slots);
    } else {
        call->slots = calloc(c->n, sizeof *call->slots);
        if (!call->slots)
            return rm_fail(err, REDMUTEX_ENOMEM, "out of memory");
    }
    return 0;
}

void rm_call_clear(rm_call *call)
{
    for (size_t i = 0; i < call->n; i++) {
        rm_slot *s = &call->slots[i];
        for (size_t k = 0; k < RM_REQ_MAX_CMDS; k++) {
            rm_reply_free(s->replies[k]);
            s->replies[k] = NULL;
        }
    }
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
    }
    if (call->slots != call->inline_slots)
        free(call->slots);
    call->slots = NULL;
}

static void slot_fail(rm_slot *s, int code, const char *msg)
{
    s->err = code;
    snprintf(s->msg, sizeof s->msg, "%s", msg);
    s->status = RM_SLOT_DONE;
}

/* A transport failure: the connection's state is unknown, so it is closed. */
static void slot_break(rm_slot *s, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void slot_break(rm_slot *s, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->msg, sizeof s->msg, fmt, ap);
    va_end(ap);
    s->err = code;
    s->status = RM_SLOT_DONE;
    s->broken = true;
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
static void build_handshake(rm_slot *s)
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
}

static int build_request(rm_slot *s, const rm_req *req, bool eval)
{
    rm_conn *conn = s->conn;
    conn->out.len = 0;
    s->handshaking = false;
    s->handshake_n = 0;
    s->skip = conn->owed;
    conn->owed = 0;
    if (conn->later_count) {
        if (rm_buf_append(&conn->out, conn->later.data, conn->later.len))
            return REDMUTEX_ENOMEM;
        s->skip += conn->later_count;
        conn->later.len = 0;
        conn->later_count = 0;
        conn->flush_later = false;
    }
    for (size_t k = 0; k < req->ncmds; k++)
        if (rm_cmd_format(&conn->out, &req->cmds[k], eval))
            return REDMUTEX_ENOMEM;
    s->got = 0;
    s->total = s->skip + req->ncmds;
    s->used_eval = eval;
    s->req_ns = rm_now_ns();
    return 0;
}

static bool is_noscript(const rm_reply *r)
{
    return r && r->type == RM_REPLY_ERROR && strncmp(r->str, "NOSCRIPT", 8) == 0;
}

/* Called when every reply of the request is in. */
static void slot_write(rm_slot *s);

static void slot_complete(rm_slot *s, const rm_req *req)
{
    bool noscript = false;
    for (size_t k = 0; k < req->ncmds; k++)
        if (req->cmds[k].script >= 0 && is_noscript(s->replies[k]))
            noscript = true;
    if (noscript && !s->used_eval) {
        /* The server lost its script cache (restart, SCRIPT FLUSH): send the
           request again with the script bodies. A NOSCRIPT reply means the
           script did not run, and our other commands (PTTL, WAIT) have no
           side effects; the one exception, a hand-off's SET NX riding behind
           a release, is treated as unknown by its caller (used_eval). */
        for (size_t k = 0; k < req->ncmds; k++) {
            rm_reply_free(s->replies[k]);
            s->replies[k] = NULL;
        }
        if (build_request(s, req, true) != 0)
            slot_break(s, REDMUTEX_ENOMEM, "out of memory");
        return;
    }
    s->status = RM_SLOT_DONE;
    s->done_ns = rm_now_ns();
}

static void slot_read(rm_slot *s, const rm_req *req)
{
    rm_err e;
    rm_err_reset(&e);
    char buf[16384];
    rm_conn *conn = s->conn;
    const char *who = conn->srv->ep.display;
    for (;;) {
        ssize_t n = rm_conn_recv(&e, conn, buf, sizeof buf);
        if (n < 0) {
            slot_break(s, (int)n, "%s", e.msg);
            return;
        }
        if (n == 0)
            break;
        char err[160];
        if (rm_reader_feed(conn->reader, buf, (size_t)n, err, sizeof err) != 0) {
            slot_break(s, REDMUTEX_EPROTOCOL, "%s sent a bad reply: %s", who, err);
            return;
        }
        if ((size_t)n < sizeof buf)
            break;
    }
    for (;;) {
        rm_reply *r = NULL;
        char err[160];
        int got = rm_reader_next(conn->reader, &r, err, sizeof err);
        if (got < 0) {
            slot_break(s, REDMUTEX_EPROTOCOL, "%s sent a bad reply: %s", who, err);
            return;
        }
        if (got == 0)
            return;
        size_t idx = s->got++;
        if (idx >= s->total) {
            rm_reply_free(r);
            slot_break(s, REDMUTEX_EPROTOCOL, "%s sent a reply nobody asked for", who);
            return;
        }
        if (s->handshaking) {
            int rc = rm_conn_check_handshake(&e, conn, idx, s->handshake_n, s->want_info, r);
            if (rc == 0 && conn->run_id[0]) {
                /* INFO's run_id: the server's life, recorded by its pool. */
                rc = rm_server_note_run_id(&e, conn->srv->client, conn->srv, conn->run_id);
                conn->run_id[0] = '\0';
            }
            rm_reply_free(r);
            if (rc != 0) {
                slot_break(s, rc, "%s", e.msg);
                return;
            }
        } else if (idx < s->skip) {
            rm_reply_free(r);
        } else {
            s->replies[idx - s->skip] = r;
        }
        if (s->got == s->total) {
            if (rm_reader_pending(conn->reader) > 0) {
                /* Bytes nobody asked for would be taken as the next request's reply. */
                slot_break(s, REDMUTEX_EPROTOCOL, "%s sent more than was asked for", who);
                return;
            }
            if (!s->handshaking) {
                slot_complete(s, req);
                return;
            }
            /* The handshake succeeded: now the request. */
            if (build_request(s, req, false) != 0) {
                slot_break(s, REDMUTEX_ENOMEM, "out of memory");
                return;
            }
            slot_write(s);
            return;
        }
    }
}

static void slot_write(rm_slot *s)
{
    rm_conn *conn = s->conn;
    rm_err e;
    rm_err_reset(&e);
    int rc = rm_conn_establish(&e, conn); /* connect() and the TLS handshake */
    if (rc < 0)
        slot_break(s, rc, "%s", e.msg);
    if (rc != 0)
        return;
    while (s->conn->out.len > 0) {
        ssize_t n = rm_conn_send(&e, conn, s->conn->out.data, s->conn->out.len);
        if (n < 0) {
            slot_break(s, (int)n, "%s", e.msg);
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
static int mark_owing(rm_call *call, rm_conn *conn)
{
    if (call->order_key && rm_pool_mark_owing(call->c, conn, call->order_key) != 0)
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
    /* Keep it if the request went out whole (a connection still in its
       handshake has sent no request: closing it changes nothing). */
    bool keep = conn && !conn->connecting && conn->out.len == 0 && !s->handshaking &&
                s->total - s->got <= RM_OWED_MAX;
    if (keep && mark_owing(call, conn) != 0)
        keep = false;
    if (keep) {
        conn->owed = s->total - s->got;
        s->err = REDMUTEX_ECONN;
        snprintf(s->msg, sizeof s->msg, "%s %s", conn->srv->ep.display, why);
        s->status = RM_SLOT_DONE;
    } else {
        const char *step = conn ? rm_conn_pending_step(conn) : NULL;
        slot_break(s, REDMUTEX_ECONN, "%s %s%s%s%s", conn ? conn->srv->ep.display : "server", why,
                   step ? " (" : "", step ? step : "", step ? ")" : "");
    }
}

/* Gets server i's connection and sends what can be sent at once. false while
   the connection this request must follow is lent to another call. */
static bool slot_start(rm_call *call, rm_slot *s, size_t i, const rm_req *req, int64_t connect_deadline)
{
    redmutex_client *c = call->c;
    if (!s->conn) {
        rm_err e;
        rm_err_reset(&e);
        int rc = rm_pool_take(&e, c, i, call->order_key, &s->conn);
        if (rc == RM_CONN_BUSY)
            return false;
        if (rc != 0) {
            slot_break(s, rc, "%s", e.msg);
            return true;
        }
    }
    if (s->conn->fresh && connect_deadline > s->deadline_ns && !call->strict_deadline)
        s->deadline_ns = connect_deadline;
    int rc = 0;
    if (s->conn->fresh)
        build_handshake(s);
    else
        rc = build_request(s, req, false);
    if (rc != 0) {
        slot_break(s, REDMUTEX_ENOMEM, "out of memory");
        return true;
    }
    /* Most requests are small: try to send at once, saving a poll. */
    if (!s->conn->connecting)
        slot_write(s);
    return true;
}

/*
 * A request that must reach every server (a release, an undo) and is still
 * waiting at its deadline for the connection it must follow, lent to
 * another call: dropping it would leave the key to its lease, so it is
 * queued behind that connection and goes out when the connection is free.
 * Its outcome there is unknown to the caller.
 */
static void slot_defer(rm_call *call, rm_slot *s, size_t i, const rm_req *req, int64_t connect_deadline)
{
    if (call->must_send && call->order_key) {
        rm_buf b = {0};
        int rc = 0;
        for (size_t k = 0; rc == 0 && k < req->ncmds; k++)
            rc = rm_cmd_format(&b, &req->cmds[k], true); /* EVAL: the script cache may be gone by then */
        if (rc == 0)
            rc = rm_pool_defer(call->c, i, call->order_key, b.data, b.len, req->ncmds);
        rm_buf_free(&b);
        if (rc == 0) {
            slot_fail(s, REDMUTEX_ECONN, "queued behind an earlier request for this lock that is still unanswered");
            s->sent = true; /* it will run there: its outcome is unknown */
            return;
        }
        if (rc == 1 && slot_start(call, s, i, req, connect_deadline))
            return; /* the earlier request was answered meanwhile: sent now, abandoned at the next turn */
    }
    slot_fail(s, REDMUTEX_ECONN, "an earlier request for this lock is still unanswered there");
}

static void slot_reset(rm_slot *s, int64_t deadline_ns)
{
    s->status = RM_SLOT_RUNNING;
    s->err = 0;
    s->msg[0] = '\0';
    s->broken = false;
    s->sent = false;
    s->not_waited = false;
    s->excluded = false;
    s->handshaking = false;
    s->timed_out = false;
    s->deadline_ns = deadline_ns;
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
            (pending[i] || s->handshaking || !s->sent || s->conn->connecting || s->conn->out.len > 0))
            return true;
    }
    return false;
}

/* Starts every slot of the run (or fails it at once: left out, duplicate);
   pending[i]: waiting for a connection lent to another call. */
static void start_slots(rm_call *call, const rm_req *req, int64_t deadline_ns, int64_t connect_deadline,
                        bool *pending)
{
    redmutex_client *c = call->c;
    for (size_t i = 0; i < call->n; i++) {
        rm_slot *s = &call->slots[i];
        slot_reset(s, deadline_ns);
        if (call->only && !call->only[i]) {
            s->excluded = true;
            slot_fail(s, REDMUTEX_ENOTOWNER, "not sent: this server did not grant the lock");
            continue;
        }
        if (atomic_load(&c->servers[i].duplicate)) {
            slot_fail(s, REDMUTEX_EDUPLICATE, "server is a duplicate of another endpoint");
            continue;
        }
        pending[i] = !slot_start(call, s, i, req, connect_deadline);
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

/* Retries pending slots, ends those past their deadline, and lists the rest for poll(). */
static void poll_prepare(rm_call *call, const rm_req *req, int64_t connect_deadline, bool *pending, poll_set *ps)
{
    int64_t now = rm_now_ns();
    ps->next_deadline = INT64_MAX;
    ps->np = 0;
    ps->retrying = false;
    for (size_t i = 0; i < call->n; i++) {
        rm_slot *s = &call->slots[i];
        if (s->status != RM_SLOT_RUNNING)
            continue;
        if (pending[i] && now < s->deadline_ns)
            pending[i] = !slot_start(call, s, i, req, connect_deadline);
        if (s->status != RM_SLOT_RUNNING)
            continue;
        if (now >= s->deadline_ns) {
            s->timed_out = true;
            if (pending[i]) {
                pending[i] = false;
                slot_defer(call, s, i, req, connect_deadline);
            } else
                slot_abandon(call, s, "did not answer in time");
            continue;
        }
        if (s->deadline_ns < ps->next_deadline)
            ps->next_deadline = s->deadline_ns;
        if (pending[i]) {
            ps->retrying = true;
            continue;
        }
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
            slot_write(s);
        /* Any event may let TLS read on (it can wait for writability too). */
        if (s->status == RM_SLOT_RUNNING && !s->conn->connecting)
            slot_read(s, req);
        if (s->status == RM_SLOT_RUNNING && s->conn->out.len > 0 && !s->conn->connecting)
            slot_write(s);
    }
}

/* decided() ended the run early: the rest are not waited for. */
static void end_unwaited(rm_call *call, const bool *pending)
{
    for (size_t i = 0; i < call->n; i++) {
        rm_slot *s = &call->slots[i];
        if (s->status != RM_SLOT_RUNNING)
            continue;
        if (pending[i]) {
            slot_fail(s, REDMUTEX_ECONN, "was not waited for (outcome already decided)");
        } else {
            slot_abandon(call, s, "was not waited for (outcome already decided)");
        }
        s->not_waited = true;
    }
}

/* Polls and serves the slots until the outcome is decided (and, for a
   release, sent everywhere), every slot is done, or poll() fails. */
static void run_loop(rm_call *call, const rm_req *req, int64_t connect_deadline, bool *pending,
                     rm_decided_fn decided, void *ud, poll_set *ps)
{
    bool decided_now = false;
    for (;;) {
        if (!decided_now && decided && decided(call, ud))
            decided_now = true;
        if (decided_now && !(call->must_send && any_unsent(call, pending)))
            break;
        poll_prepare(call, req, connect_deadline, pending, ps);
        if (ps->np == 0 && !ps->retrying)
            break;
        int64_t ms = rm_ms_until(ps->next_deadline);
        if (ps->retrying && ms > RM_CONN_RETRY_MS)
            ms = RM_CONN_RETRY_MS;
        int r = poll(ps->pfds, ps->np, ms > 60000 ? 60000 : (int)ms);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            for (size_t k = 0; k < ps->np; k++)
                slot_break(&call->slots[ps->map[k]], REDMUTEX_ECONN, "poll: %s", strerror(errno));
            break;
        }
        poll_dispatch(call, req, ps);
    }
}

/* Statistics and log messages (stats.c): each server's round trip, or the
   class of its failure; servers left out or not waited for tell nothing. */
static void count_servers(const rm_call *call)
{
    if (!rm_stats_watching(&call->c->stats))
        return;
    for (size_t i = 0; i < call->n; i++) {
        const rm_slot *s = &call->slots[i];
        const char *refused = NULL; /* an error reply: answered all the same */
        for (size_t k = 0; k < RM_REQ_MAX_CMDS && !s->err && !refused; k++)
            if (s->replies[k] && s->replies[k]->type == RM_REPLY_ERROR)
                refused = s->replies[k]->str;
        if (s->status == RM_SLOT_DONE && !s->excluded && !s->not_waited)
            rm_stats_server_done(call->c->servers[i].stats, s->err, s->timed_out, s->done_ns - s->req_ns,
                                 s->err ? s->msg : refused);
    }
}

int rm_call_run(rm_call *call, const rm_req *req, int64_t deadline_ns, rm_decided_fn decided, void *ud)
{
    redmutex_client *c = call->c;
    rm_call_clear(call);
    call->started_ns = rm_now_ns();
    call->order_key = req->order_name ? rm_order_key(req->order_name) : 0;
    int64_t connect_deadline = call->started_ns + c->opts.connect_timeout_ms * RM_NS_PER_MS;
    bool pending[REDMUTEX_SERVERS_MAX] = {false}; /* waiting for a lent connection */
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
            for (size_t k = 0; k < call->n; k++)
                if (call->slots[k].status == RM_SLOT_RUNNING)
                    slot_break(&call->slots[k], REDMUTEX_ENOMEM, "out of memory");
            return REDMUTEX_ENOMEM;
        }
    }
    run_loop(call, req, connect_deadline, pending, decided, ud, &ps);
    end_unwaited(call, pending);
    count_servers(call);
    if (ps.pfds != small_pfds) {
        free(ps.pfds);
        free(ps.map);
    }
    return 0;
}

size_t rm_call_failed(const rm_call *call)
{
    size_t n = 0;
    for (size_t i = 0; i < call->n; i++) {
        const rm_slot *s = &call->slots[i];
        n += s->err != 0 && !s->excluded && !s->not_waited;
    }
    return n;
}

size_t rm_call_answered(const rm_call *call)
{
    size_t n = 0;
    for (size_t i = 0; i < call->n; i++)
        if (call->slots[i].status == RM_SLOT_DONE && call->slots[i].err == 0)
            n++;
    return n;
}
