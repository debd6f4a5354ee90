/*
 * One connection to one server: a non-blocking TCP or Unix socket (with TLS
 * on top for rediss://, see tls.c), the byte I/O every other file uses, the
 * AUTH/SELECT handshake that goes out in front of the first request, and a
 * health check for pooled connections. Plain sends use send(MSG_NOSIGNAL)
 * and TLS writes go through a BIO that does the same, so a closed peer never
 * raises SIGPIPE in the host.
 */
#define _GNU_SOURCE
#include "conn.h"
#include "internal.h"
#include "resp.h"
#include "scripts.h"
#include "tls.h"
#include "url.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

static int connect_unix(rm_err *err, rm_conn *c, const rm_endpoint *ep)
{
    struct sockaddr_un sa;
    memset(&sa, 0, sizeof sa);
    sa.sun_family = AF_UNIX;
    if (strlen(ep->path) >= sizeof sa.sun_path)
        return rm_fail(err, REDMUTEX_EINVAL, "%s: socket path longer than %zu bytes", ep->display,
                       sizeof sa.sun_path - 1);
    strcpy(sa.sun_path, ep->path);
    c->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (c->fd < 0)
        return rm_fail(err, REDMUTEX_ECONN, "%s: socket: %s", ep->display, strerror(errno));
    if (connect(c->fd, (struct sockaddr *)&sa, sizeof sa) == 0)
        return 0;
    if (errno == EINPROGRESS || errno == EAGAIN) {
        c->connecting = true;
        return 0;
    }
    return rm_fail(err, REDMUTEX_ECONN, "%s: connect: %s", ep->display, strerror(errno));
}

static int connect_tcp(rm_err *err, rm_conn *c, const rm_endpoint *ep, int seed)
{
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV;
    char port[16];
    /* A multi-host URL: the seed its server says (the others are tried when this one fails). */
    const char *host = seed > 0 && seed < ep->n_seeds ? ep->seed_host[seed] : ep->host;
    snprintf(port, sizeof port, "%d", seed > 0 && seed < ep->n_seeds ? ep->seed_port[seed] : ep->port);
    /* Name resolution is the one step not bounded by the connect timeout;
       numeric addresses and /etc/hosts names resolve without the network. */
    int gai = getaddrinfo(host, port, &hints, &res);
    if (gai != 0)
        return rm_fail(err, REDMUTEX_ECONN, "%s: cannot resolve host %s: %s", ep->display, host, gai_strerror(gai));
    int last_errno = 0;
    for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
        int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
        if (fd < 0) {
            last_errno = errno;
            continue;
        }
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
        if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0 || errno == EINPROGRESS) {
            c->connecting = errno == EINPROGRESS;
            c->fd = fd;
            freeaddrinfo(res);
            return 0;
        }
        last_errno = errno;
        close(fd);
    }
    freeaddrinfo(res);
    return rm_fail(err, REDMUTEX_ECONN, "%s: connect to %s:%s: %s", ep->display, host, port,
                   strerror(last_errno ? last_errno : ECONNREFUSED));
}

int rm_conn_open(rm_err *err, rm_conn **out, rm_server *srv)
{
    return rm_conn_open_seed(err, out, srv, atomic_load(&srv->seed));
}

int rm_conn_open_seed(rm_err *err, rm_conn **out, rm_server *srv, int seed)
{
    rm_conn *c = calloc(1, sizeof *c);
    if (!c)
        return rm_fail(err, REDMUTEX_ENOMEM, "out of memory");
    c->fd = -1;
    c->srv = srv;
    c->pid = getpid();
    c->fresh = true;
    c->reader = rm_reader_new();
    if (!c->reader) {
        free(c);
        return rm_fail(err, REDMUTEX_ENOMEM, "out of memory");
    }
    errno = 0;
    c->cluster_enabled = -1;
    int rc = srv->ep.is_unix ? connect_unix(err, c, &srv->ep) : connect_tcp(err, c, &srv->ep, seed);
    if (rc != 0) {
        rm_conn_close(c);
        return rc;
    }
    /* TLS starts once connect() is known to be done, in rm_conn_establish. */
    if (srv->tls)
        c->connecting = true;
    *out = c;
    return 0;
}

void rm_conn_close(rm_conn *c)
{
    if (!c)
        return;
    rm_tls_free(c);
    if (c->fd >= 0)
        close(c->fd);
    rm_reader_free(c->reader);
    rm_reply_free(c->topo);
    rm_reply_free(c->topo_shards);
    free(c->order_keys);
    rm_buf_free(&c->later);
    rm_buf_free(&c->out);
    free(c);
}

bool rm_conn_looks_healthy(rm_conn *c)
{
    if (c->fd < 0 || c->connecting)
        return false;
    if (rm_tls_pending(c))
        return c->owed > 0;
    /* One non-blocking peek: nothing waiting is the healthy case; EOF means
       the server closed it; data is fine only if late replies are owed. */
    char byte;
    ssize_t n = recv(c->fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n < 0)
        return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
    return n > 0 && c->owed > 0;
}

int rm_conn_drain(rm_conn *c)
{
    char buf[4096];
    for (;;) {
        ssize_t n = rm_conn_recv(NULL, c, buf, sizeof buf);
        if (n < 0)
            return -1;
        if (n == 0)
            break;
        char why[160];
        if (rm_reader_feed(c->reader, buf, (size_t)n, why, sizeof why) != 0)
            return -1;
        if ((size_t)n < sizeof buf)
            break;
    }
    while (c->owed > 0) {
        rm_reply *r = NULL;
        char why[160];
        int got = rm_reader_next(c->reader, &r, why, sizeof why);
        if (got < 0)
            return -1;
        if (got == 0)
            break;
        rm_reply_free(r);
        c->owed--;
        rm_conn_answered(c);
    }
    /* Anything beyond what was owed would be taken as the next request's reply. */
    return c->owed == 0 && rm_reader_pending(c->reader) > 0 ? -1 : 0;
}

bool rm_conn_queue_later(rm_conn *c, int argc, const char *const *argv)
{
    if (c->later_count >= RM_LATER_MAX || rm_format_command(&c->later, argc, argv, NULL) != 0)
        return false;
    c->later_count++;
    return true;
}

int rm_conn_flush_later(rm_err *err, rm_conn *c)
{
    if (c->owed == 0 && c->later.len > 0)
        rm_conn_progress(c); /* nothing owed before: the wait for an answer starts now */
    while (c->later.len > 0) {
        ssize_t n = rm_conn_send(err, c, c->later.data, c->later.len);
        if (n < 0)
            return (int)n;
        if (n == 0)
            return 0; /* the rest goes out before the next request, or at the next flush */
        rm_buf_consume(&c->later, (size_t)n);
    }
    c->owed += c->later_count;
    c->later_count = 0;
    c->flush_later = false;
    return 0;
}

uint64_t rm_order_key(const char *name)
{
    uint64_t h = UINT64_C(14695981039346656037); /* FNV-1a */
    for (const unsigned char *p = (const unsigned char *)name; *p; p++)
        h = (h ^ *p) * UINT64_C(1099511628211);
    return h ? h : 1; /* 0 means "no order" */
}

uint64_t rm_owner_key(const char *name, const char *value)
{
    uint64_t h = rm_order_key(name);
    h = (h ^ 0xff) * UINT64_C(1099511628211); /* a byte no name holds: "name" + "value" is no name */
    for (const unsigned char *p = (const unsigned char *)value; *p; p++)
        h = (h ^ *p) * UINT64_C(1099511628211);
    return h ? h : 1;
}

bool rm_conn_owes_for(const rm_conn *c, uint64_t key)
{
    for (size_t i = 0; i < c->n_order_keys; i++)
        if (c->order_keys[i] == key)
            return true;
    return false;
}

int rm_conn_add_order_key(rm_conn *c, uint64_t key)
{
    if (rm_conn_owes_for(c, key))
        return 0;
    if (c->n_order_keys == c->cap_order_keys) {
        size_t cap = c->cap_order_keys ? c->cap_order_keys * 2 : 4;
        uint64_t *keys = realloc(c->order_keys, cap * sizeof *keys);
        if (!keys)
            return -1;
        c->order_keys = keys;
        c->cap_order_keys = cap;
    }
    c->order_keys[c->n_order_keys++] = key;
    return 0;
}

size_t rm_conn_handshake(rm_conn *c, rm_buf *b, bool want_info)
{
    const rm_endpoint *ep = &c->srv->ep;
    size_t n = 0;
    if (ep->password) {
        const char *argv[3] = {"AUTH", ep->user ? ep->user : ep->password, ep->password};
        rm_format_command(b, ep->user ? 3 : 2, argv, NULL);
        n++;
    }
    if (ep->db != 0) {
        char db[16];
        snprintf(db, sizeof db, "%d", ep->db);
        const char *argv[2] = {"SELECT", db};
        rm_format_command(b, 2, argv, NULL);
        n++;
    }
    if (c->srv->check_role) { /* before anything is sent: is it still the master? */
        const char *argv[1] = {"ROLE"};
        rm_format_command(b, 1, argv, NULL);
        n++;
    }
    if (want_info) {
        const char *argv[2] = {"INFO", "server"};
        rm_format_command(b, 2, argv, NULL);
        n++;
    }
    /* Load the scripts up front, so that even a request abandoned at its
       deadline runs as sent instead of stopping at NOSCRIPT. (EVALSHA still
       falls back to EVAL if the cache is flushed later.) */
    for (int id = 0; id < RM_SCRIPT_COUNT; id++) {
        const char *argv[3] = {"SCRIPT", "LOAD", rm_script_text(id)};
        rm_format_command(b, 3, argv, NULL);
        n++;
    }
    /* What the deployment is, asked once (or again after a refresh was
       wanted): in the same round trip, never in front of the request. A
       standalone server answers CLUSTER SLOTS with an error, ignored. */
    c->topo_asked = want_info && atomic_load(&c->srv->ask_topology);
    if (c->topo_asked) {
        const char *info[2] = {"INFO", "cluster"}, *shards[2] = {"CLUSTER", "SHARDS"}, *slots[2] = {"CLUSTER", "SLOTS"};
        rm_format_command(b, 2, info, NULL);
        rm_format_command(b, 2, shards, NULL);
        rm_format_command(b, 2, slots, NULL);
        n += 3;
    }
    return n;
}

/* INFO server's redis_version major number (Valkey reports a Redis version too). */
static int version_major(const char *info)
{
    const char *v = strstr(info, "redis_version:");
    return v ? atoi(v + 14) : 0;
}

/*
 * ROLE of a node named master by sentinels: "master" and its online
 * replicas (counted for WAIT), or anything else, which ends the handshake
 * before a request could follow. An error reply (an ACL without ROLE)
 * confirms nothing but stops nothing: READONLY would still tell.
 */
static int check_role(rm_err *err, rm_conn *c, const rm_reply *r)
{
    rm_server *srv = c->srv;
    if (r->type == RM_REPLY_ERROR) {
        atomic_store(&srv->replicas, -1);
        return 0;
    }
    bool master = r->type == RM_REPLY_ARRAY && r->elements >= 3 && r->element[0]->type == RM_REPLY_STRING &&
                  strcmp(r->element[0]->str, "master") == 0 && r->element[2]->type == RM_REPLY_ARRAY;
    if (master) {
        atomic_store(&srv->replicas, (int)r->element[2]->elements);
        return 0;
    }
    const char *role = r->type == RM_REPLY_ARRAY && r->elements > 0 && r->element[0]->type == RM_REPLY_STRING
                           ? r->element[0]->str
                           : "?";
    return rm_fail(err, REDMUTEX_ECONN, "%s is not the master (ROLE: %.20s): nothing was sent to it", srv->ep.display,
                   role);
}

int rm_conn_check_handshake(rm_err *err, rm_conn *c, size_t i, size_t n, bool want_info, rm_reply **rp)
{
    const rm_endpoint *ep = &c->srv->ep;
    const rm_reply *r = *rp;
    size_t topo_n = c->topo_asked ? 3 : 0;
    size_t auth_i = ep->password ? 0 : SIZE_MAX;
    size_t select_i = ep->db != 0 ? (ep->password ? 1 : 0) : SIZE_MAX;
    size_t role_i = c->srv->check_role ? (size_t)(ep->password ? 1 : 0) + (ep->db != 0) : SIZE_MAX;
    if (i == role_i)
        return check_role(err, c, r);
    size_t info_i = want_info ? n - topo_n - RM_SCRIPT_COUNT - 1 : SIZE_MAX;
    if (topo_n && i == n - 3) { /* INFO cluster: an error (ACL) is taken as "no cluster" */
        c->cluster_enabled = r->type == RM_REPLY_STRING && strstr(r->str, "cluster_enabled:1") ? 1 : 0;
        return 0;
    }
    if (topo_n && i >= n - 2) { /* CLUSTER SHARDS, CLUSTER SLOTS: kept for the deployment */
        rm_reply **keep = i == n - 2 ? &c->topo_shards : &c->topo;
        rm_reply_free(*keep);
        *keep = r->type == RM_REPLY_ARRAY ? *rp : NULL;
        if (*keep)
            *rp = NULL;
        return 0;
    }
    if (i == auth_i) {
        if (r->type == RM_REPLY_ERROR)
            return rm_fail(err, REDMUTEX_EAUTH, "%s refused the credentials: %.200s", ep->display, r->str);
        return 0;
    }
    if (i == select_i) {
        if (r->type == RM_REPLY_ERROR) {
            if (strncmp(r->str, "NOAUTH", 6) == 0 || strncmp(r->str, "NOPERM", 6) == 0)
                return rm_fail(err, REDMUTEX_EAUTH, "%s: SELECT %d refused: %.200s", ep->display, ep->db, r->str);
            return rm_fail(err, REDMUTEX_ESERVER, "%s: SELECT %d failed: %.200s", ep->display, ep->db, r->str);
        }
        return 0;
    }
    if (i == info_i) {
        if (r->type == RM_REPLY_ERROR)
            return rm_reply_error(err, r, "INFO server", NULL, ep->display);
        if (r->type != RM_REPLY_STRING)
            return rm_fail(err, REDMUTEX_EPROTOCOL, "%s: INFO server did not return text", ep->display);
        const char *id = strstr(r->str, "run_id:");
        if (!id)
            return rm_fail(err, REDMUTEX_EPROTOCOL, "%s: INFO server has no run_id", ep->display);
        id += 7;
        size_t len = strcspn(id, "\r\n");
        char run_id[48];
        if (len == 0 || len >= sizeof run_id)
            return rm_fail(err, REDMUTEX_EPROTOCOL, "%s: INFO server has a malformed run_id", ep->display);
        memcpy(run_id, id, len);
        run_id[len] = '\0';
        memcpy(c->run_id, run_id, len + 1); /* recorded by the caller's pool (rm_server_note_run_id) */
        c->major = version_major(r->str);
        return 0;
    }
    /* SCRIPT LOAD: an error (an ACL without @scripting, say) shows up again,
       and clearly, when a script is called. */
    return 0;
}

int rm_poll_fd(int fd, short events, int64_t deadline_ns)
{
    for (;;) {
        int64_t ms = rm_ms_until(deadline_ns);
        struct pollfd p = {fd, events, 0};
        int r = poll(&p, 1, ms > INT32_MAX ? INT32_MAX : (int)ms);
        if (r < 0 && errno == EINTR)
            continue;
        return r;
    }
}

/* ---- transport I/O ------------------------------------------------------ */

int rm_conn_establish(rm_err *err, rm_conn *c)
{
    if (!c->connecting)
        return 0;
    if (!c->tls_handshaking) {
        /* Called when poll() reported the socket writable (or failed). */
        int soerr = 0;
        socklen_t len = sizeof soerr;
        if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &soerr, &len) != 0)
            soerr = errno;
        if (soerr != 0)
            return rm_fail(err, REDMUTEX_ECONN, "%s: connect: %s", c->srv->ep.display, strerror(soerr));
        if (!c->srv->tls) {
            c->connecting = false;
            return 0;
        }
        int rc = rm_tls_start(err, c);
        if (rc != 0)
            return rc;
        c->tls_handshaking = true;
    }
    int rc = rm_tls_handshake(err, c);
    if (rc == 0) {
        c->tls_handshaking = false;
        c->connecting = false;
    }
    return rc;
}

ssize_t rm_conn_send(rm_err *err, rm_conn *c, const void *data, size_t len)
{
    if (c->tls)
        return rm_tls_send(err, c, data, len);
    for (;;) {
        ssize_t n = send(c->fd, data, len, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n >= 0)
            return n;
        if (errno == EINTR)
            continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK)
            return 0;
        return rm_fail(err, REDMUTEX_ECONN, "%s: write: %s", c->srv->ep.display, strerror(errno));
    }
}

/* The first bytes a TLS server sends to a client that spoke plain text: an alert or a handshake record. */
static bool looks_like_tls(const unsigned char *b, size_t n)
{
    return n >= 3 && (b[0] == 0x15 || b[0] == 0x16) && b[1] == 0x03 && b[2] <= 0x04;
}

ssize_t rm_conn_recv(rm_err *err, rm_conn *c, void *buf, size_t len)
{
    if (c->tls)
        return rm_tls_recv(err, c, buf, len);
    const char *who = c->srv->ep.display;
    for (;;) {
        ssize_t n = recv(c->fd, buf, len, MSG_DONTWAIT);
        if (n > 0) {
            if (!c->received && looks_like_tls(buf, (size_t)n))
                return rm_fail(err, REDMUTEX_ECONN, "%s answered in TLS: it is a TLS port (use a rediss:// URL)", who);
            c->received = true;
            return n;
        }
        if (n == 0) {
            if (!c->received && !c->srv->ep.is_unix)
                return rm_fail(err, REDMUTEX_ECONN,
                               "%s closed the connection before answering (if it is a TLS port, use a "
                               "rediss:// URL)",
                               who);
            return rm_fail(err, REDMUTEX_ECONN, "%s closed the connection", who);
        }
        if (errno == EINTR)
            continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK)
            return 0;
        return rm_fail(err, REDMUTEX_ECONN, "%s: read: %s%s", who, strerror(errno),
                       errno == ECONNRESET && !c->received && !c->srv->ep.is_unix
                           ? " before answering (if it is a TLS port, use a rediss:// URL)"
                           : "");
    }
}

short rm_conn_events(const rm_conn *c, bool have_output)
{
    if (c->connecting)
        return c->tls_handshaking ? c->tls_want : POLLOUT;
    short ev = POLLIN;
    /* TLS may need to read before it can write, or the reverse. */
    if ((have_output && !c->write_wants_read) || c->read_wants_write)
        ev |= POLLOUT;
    return ev;
}

const char *rm_conn_pending_step(const rm_conn *c)
{
    if (!c->connecting)
        return NULL;
    return c->tls_handshaking ? "during the TLS handshake: does this port speak TLS?" : "while connecting";
}
