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
#include "internal.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

/* Beyond this many owed replies a connection is not worth keeping. */
#define RM_OWED_MAX 256

int rm_call_begin(rm_call *call, redmutex_client *c)
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
            return rm_fail(REDMUTEX_ENOMEM, "out of memory");
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
            rm_client_give_conn(call->c, s->conn, !s->broken);
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
    s->unsent = !s->conn || s->conn->connecting;
    if (s->conn) {
        rm_conn_close(s->conn);
        s->conn = NULL;
    }
}

static int format_cmd(rm_buf *b, const rm_cmd *cmd, bool eval)
{
    if (cmd->script < 0)
        return rm_format_command(b, cmd->argc, cmd->argv, cmd->lens);
    const char *small_argv[16];
    size_t small_lens[16];
    const char **argv = small_argv;
    size_t *lens = small_lens;
    int argc = cmd->argc + 2;
    if (argc > 16) {
        argv = malloc((size_t)argc * sizeof *argv);
        lens = malloc((size_t)argc * sizeof *lens);
        if (!argv || !lens) {
            free(argv);
            free(lens);
            return REDMUTEX_ENOMEM;
        }
    }
    argv[0] = eval ? "EVAL" : "EVALSHA";
    lens[0] = eval ? 4 : 7;
    argv[1] = eval ? rm_script_text(cmd->script) : rm_script_sha(cmd->script);
    lens[1] = strlen(argv[1]);
    for (int k = 0; k < cmd->argc; k++) {
        argv[k + 2] = cmd->argv[k];
        lens[k + 2] = cmd->lens ? cmd->lens[k] : strlen(cmd->argv[k]);
    }
    int rc = rm_format_command(b, argc, argv, lens);
    if (argv != small_argv) {
        free(argv);
        free(lens);
    }
    return rc;
}

static int build_out(rm_call *call, rm_slot *s, const rm_req *req, bool eval)
{
    rm_conn *conn = s->conn;
    s->conn->out.len = 0;
    s->skip = conn->owed;
    conn->owed = 0;
    if (conn->later_count) {
        if (rm_buf_append(&s->conn->out, conn->later.data, conn->later.len))
            return REDMUTEX_ENOMEM;
        s->skip += conn->later_count;
        conn->later.len = 0;
        conn->later_count = 0;
    }
    s->handshake_n = 0;
    if (conn->fresh) {
        s->want_info = call->n > 1;
        s->handshake_n = rm_conn_handshake(conn, &s->conn->out, s->want_info);
        conn->fresh = false;
    }
    for (size_t k = 0; k < req->ncmds; k++)
        if (format_cmd(&s->conn->out, &req->cmds[k], eval))
            return REDMUTEX_ENOMEM;
    s->got = 0;
    s->total = s->skip + s->handshake_n + req->ncmds;
    s->used_eval = eval;
    return 0;
}

static bool is_noscript(const rm_reply *r)
{
    return r && r->type == RM_REPLY_ERROR && strncmp(r->str, "NOSCRIPT", 8) == 0;
}

/* Called when every reply of the request is in. */
static void slot_complete(rm_call *call, rm_slot *s, const rm_req *req)
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
        if (build_out(call, s, req, true) != 0)
            slot_break(s, REDMUTEX_ENOMEM, "out of memory");
        return;
    }
    s->status = RM_SLOT_DONE;
}

static void slot_read(rm_call *call, rm_slot *s, const rm_req *req)
{
    char buf[16384];
    rm_conn *conn = s->conn;
    const char *who = conn->srv->ep.display;
    for (;;) {
        ssize_t n = rm_conn_recv(conn, buf, sizeof buf);
        if (n < 0) {
            slot_break(s, (int)n, "%s", redmutex_last_error());
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
        if (idx < s->skip) {
            rm_reply_free(r);
        } else if (idx < s->skip + s->handshake_n) {
            int rc = rm_conn_check_handshake(conn, idx - s->skip, s->handshake_n, s->want_info, r);
            rm_reply_free(r);
            if (rc != 0) {
                slot_break(s, rc, "%s", redmutex_last_error());
                return;
            }
        } else {
            s->replies[idx - s->skip - s->handshake_n] = r;
        }
        if (s->got == s->total) {
            if (rm_reader_pending(conn->reader) > 0) {
                /* Bytes nobody asked for would be taken as the next request's reply. */
                slot_break(s, REDMUTEX_EPROTOCOL, "%s sent more than was asked for", who);
                return;
            }
            slot_complete(call, s, req);
            return;
        }
    }
}

static void slot_write(rm_slot *s)
{
    rm_conn *conn = s->conn;
    int rc = rm_conn_establish(conn); /* connect() and the TLS handshake */
    if (rc < 0)
        slot_break(s, rc, "%s", redmutex_last_error());
    if (rc != 0)
        return;
    while (s->conn->out.len > 0) {
        ssize_t n = rm_conn_send(conn, s->conn->out.data, s->conn->out.len);
        if (n < 0) {
            slot_break(s, (int)n, "%s", redmutex_last_error());
            return;
        }
        if (n == 0)
            return;
        rm_buf_consume(&s->conn->out, (size_t)n);
    }
}

/* What happens to a connection whose request is still unanswered at the end. */
static void slot_abandon(rm_slot *s, const char *why)
{
    rm_conn *conn = s->conn;
    /* Keep it if the request went out whole and the handshake (if any) was answered. */
    bool keep = conn && !conn->connecting && conn->out.len == 0 &&
                (s->handshake_n == 0 || s->got >= s->skip + s->handshake_n) && s->total - s->got <= RM_OWED_MAX;
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

int rm_call_run(rm_call *call, const rm_req *req, int64_t deadline_ns, rm_decided_fn decided, void *ud)
{
    redmutex_client *c = call->c;
    rm_call_clear(call);
    call->started_ns = rm_now_ns();
    int64_t connect_deadline = call->started_ns + c->opts.connect_timeout_ms * RM_NS_PER_MS;

    for (size_t i = 0; i < call->n; i++) {
        rm_slot *s = &call->slots[i];
        s->status = RM_SLOT_RUNNING;
        s->err = 0;
        s->msg[0] = '\0';
        s->broken = false;
        s->unsent = false;
        s->deadline_ns = deadline_ns;
        if (c->servers[i].duplicate) {
            slot_fail(s, REDMUTEX_EDUPLICATE, "server is a duplicate of another endpoint");
            continue;
        }
        if (!s->conn) {
            int rc = rm_client_take_conn(c, i, &s->conn);
            if (rc != 0) {
                slot_break(s, rc, "%s", redmutex_last_error());
                continue;
            }
        }
        if (s->conn->fresh && connect_deadline > deadline_ns && !call->strict_deadline)
            s->deadline_ns = connect_deadline;
        if (build_out(call, s, req, false) != 0) {
            /* Requests already sent on other slots would leave replies unread. */
            for (size_t k = 0; k <= i; k++)
                if (call->slots[k].status == RM_SLOT_RUNNING)
                    slot_break(&call->slots[k], REDMUTEX_ENOMEM, "out of memory");
            return rm_fail(REDMUTEX_ENOMEM, "out of memory");
        }
        /* Most requests are small: try to send at once, saving a poll. */
        if (!s->conn->connecting)
            slot_write(s);
    }

    struct pollfd small_pfds[RM_INLINE_SLOTS];
    size_t small_map[RM_INLINE_SLOTS];
    struct pollfd *pfds = small_pfds;
    size_t *map = small_map;
    if (call->n > RM_INLINE_SLOTS) {
        pfds = malloc(call->n * sizeof *pfds);
        map = malloc(call->n * sizeof *map);
        if (!pfds || !map) {
            free(pfds);
            free(map);
            for (size_t k = 0; k < call->n; k++)
                if (call->slots[k].status == RM_SLOT_RUNNING)
                    slot_break(&call->slots[k], REDMUTEX_ENOMEM, "out of memory");
            return rm_fail(REDMUTEX_ENOMEM, "out of memory");
        }
    }

    for (;;) {
        if (decided && decided(call, ud))
            break;
        int64_t now = rm_now_ns();
        int64_t next_deadline = INT64_MAX;
        size_t np = 0;
        for (size_t i = 0; i < call->n; i++) {
            rm_slot *s = &call->slots[i];
            if (s->status != RM_SLOT_RUNNING)
                continue;
            if (now >= s->deadline_ns) {
                slot_abandon(s, "did not answer in time");
                continue;
            }
            if (s->deadline_ns < next_deadline)
                next_deadline = s->deadline_ns;
            pfds[np].fd = s->conn->fd;
            pfds[np].events = rm_conn_events(s->conn, s->conn->out.len > 0);
            pfds[np].revents = 0;
            map[np++] = i;
        }
        if (np == 0)
            break;
        int64_t ms = rm_ms_until(next_deadline);
        int r = poll(pfds, np, ms > 60000 ? 60000 : (int)ms);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            for (size_t k = 0; k < np; k++)
                slot_break(&call->slots[map[k]], REDMUTEX_ECONN, "poll: %s", strerror(errno));
            break;
        }
        for (size_t k = 0; k < np; k++) {
            rm_slot *s = &call->slots[map[k]];
            short ev = pfds[k].revents;
            if (!ev || s->status != RM_SLOT_RUNNING)
                continue;
            if (ev & POLLOUT || s->conn->connecting)
                slot_write(s);
            /* Any event may let TLS read on (it can wait for writability too). */
            if (s->status == RM_SLOT_RUNNING && !s->conn->connecting)
                slot_read(call, s, req);
            if (s->status == RM_SLOT_RUNNING && s->conn->out.len > 0 && !s->conn->connecting)
                slot_write(s);
        }
    }
    /* decided() ended the run early: the rest are not waited for. */
    for (size_t i = 0; i < call->n; i++)
        if (call->slots[i].status == RM_SLOT_RUNNING)
            slot_abandon(&call->slots[i], "was not waited for (outcome already decided)");
    if (pfds != small_pfds) {
        free(pfds);
        free(map);
    }
    return 0;
}

size_t rm_call_answered(const rm_call *call)
{
    size_t n = 0;
    for (size_t i = 0; i < call->n; i++)
        if (call->slots[i].status == RM_SLOT_DONE && call->slots[i].err == 0)
            n++;
    return n;
}

static int severity(int code)
{
    switch (code) {
    case REDMUTEX_EAUTH: return 7;
    case REDMUTEX_EWRONGTYPE: return 6;
    case REDMUTEX_EDUPLICATE: return 5;
    case REDMUTEX_ESERVER: return 4;
    case REDMUTEX_EPROTOCOL: return 3;
    case REDMUTEX_ENOMEM: return 2;
    default: return 1;
    }
}

int rm_call_fail(const rm_call *call, const char *what, const char *name)
{
    const rm_slot *worst = NULL;
    size_t failed = 0;
    for (size_t i = 0; i < call->n; i++) {
        const rm_slot *s = &call->slots[i];
        if (s->err == 0)
            continue;
        failed++;
        if (!worst || severity(s->err) > severity(worst->err))
            worst = s;
    }
    if (!worst)
        return rm_fail(REDMUTEX_ECONN, "%s '%s': no majority of servers answered", what, name);
    if (call->n == 1)
        return rm_fail(worst->err, "%s '%s': %s", what, name, worst->msg);
    return rm_fail(worst->err, "%s '%s': %zu of %zu servers failed, need %zu answers; %s", what, name,
                   failed, call->n, call->c->quorum, worst->msg);
}

int rm_reply_error(const rm_reply *r, const char *what, const char *name, const char *server)
{
    const char *e = r->str ? r->str : "";
    int code = REDMUTEX_ESERVER;
    const char *hint = "";
    if (strstr(e, "WRONGTYPE")) {
        code = REDMUTEX_EWRONGTYPE;
        hint = " (the key exists but is not a lock of this kind; nothing was changed)";
    } else if (strncmp(e, "NOAUTH", 6) == 0 || strncmp(e, "WRONGPASS", 9) == 0 || strstr(e, "NOPERM") ||
               strstr(e, "The user executing the script can't")) { /* an ACL refusal inside a script */
        code = REDMUTEX_EAUTH;
        hint = " (check the user, password and ACL permissions in the URL)";
    } else if (strncmp(e, "READONLY", 8) == 0) {
        hint = " (this server is a read-only replica; use the master)";
    } else if (strncmp(e, "LOADING", 7) == 0) {
        hint = " (the server is loading its data; retry shortly)";
    }
    if (name)
        return rm_fail(code, "%s '%s' on %s: %.300s%s", what, name, server, e, hint);
    return rm_fail(code, "%s on %s: %.300s%s", what, server, e, hint);
}
