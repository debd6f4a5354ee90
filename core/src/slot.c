/*
 * One server's part of a call: the handshake of a fresh connection, the
 * request behind the replies the connection still owes, the replies read
 * and checked (a NOSCRIPT answer sends the scripts whole), and the end of
 * the slot when they are all in or the transport fails.
 */
#define _GNU_SOURCE
#include "client.h"
#include "conn.h"
#include "fanout.h"
#include "internal.h"
#include "pool.h"
#include "resp.h"
#include "scripts.h"
#include "slot.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

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

int rm_slot_build(rm_slot *s, const rm_req *req, bool eval)
{
    rm_conn *conn = s->conn;
    conn->out.len = 0;
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
    for (size_t k = 0; k < req->ncmds; k++)
        if (rm_cmd_format(&conn->out, &req->cmds[k], eval))
            return REDMUTEX_ENOMEM;
    s->got = 0;
    s->total = s->skip + req->ncmds;
    s->used_eval = eval;
    return 0;
}

static bool is_noscript(const rm_reply *r)
{
    return r && r->type == RM_REPLY_ERROR && strncmp(r->str, "NOSCRIPT", 8) == 0;
}

/* Called when every reply of the request is in. */
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
        if (rm_slot_build(s, req, true) != 0)
            rm_slot_break(s, REDMUTEX_ENOMEM, "out of memory");
        return;
    }
    s->status = RM_SLOT_DONE;
    /* Every reply it owed is read: it no longer holds up the requests of
       other calls for the same lock (rm_pool_paid). */
    rm_pool_paid(s->conn->srv->client, s->conn);
}

void rm_slot_read(rm_slot *s, const rm_req *req)
{
    rm_err e;
    rm_err_reset(&e);
    char buf[16384];
    rm_conn *conn = s->conn;
    const char *who = conn->srv->ep.display;
    for (;;) {
        ssize_t n = rm_conn_recv(&e, conn, buf, sizeof buf);
        if (n < 0) {
            rm_slot_break(s, (int)n, "%s", e.msg);
            return;
        }
        if (n == 0)
            break;
        char err[160];
        if (rm_reader_feed(conn->reader, buf, (size_t)n, err, sizeof err) != 0) {
            rm_slot_break(s, REDMUTEX_EPROTOCOL, "%s sent a bad reply: %s", who, err);
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
            int rc = rm_conn_check_handshake(&e, conn, idx, s->handshake_n, s->want_info, r);
            if (rc == 0 && conn->run_id[0]) {
                /* INFO's run_id: the server's life, recorded by its pool. */
                rc = rm_server_note_run_id(&e, conn->srv->client, conn->srv, conn->run_id);
                conn->run_id[0] = '\0';
            }
            rm_reply_free(r);
            if (rc != 0) {
                rm_slot_break(s, rc, "%s", e.msg);
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
                rm_slot_break(s, REDMUTEX_EPROTOCOL, "%s sent more than was asked for", who);
                return;
            }
            if (!s->handshaking) {
                slot_complete(s, req);
                return;
            }
            /* The handshake succeeded: now the request. */
            if (rm_slot_build(s, req, false) != 0) {
                rm_slot_break(s, REDMUTEX_ENOMEM, "out of memory");
                return;
            }
            rm_slot_write(s);
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
