/*
 * Sentinel deployments (sentinel.h): the sentinels are asked, in order,
 * for the service's master (SENTINEL GET-MASTER-ADDR-BY-NAME); the node
 * they name becomes the deployment's master, a node with its own pool whose
 * every new connection confirms with ROLE that it is the master before a
 * request follows (conn.c). When it is no longer (READONLY, WAIT refused,
 * ROLE of a replica, refused at its address: failover.c) they are asked
 * again; when they announce a new one (+switch-master, sentinel_watch.c) it
 * is taken at once. Either way the pool counts the move and wakes the
 * subscriber and the watchdog (rm_pool_moved_locked), whose threads catch
 * up: the client's pub/sub connection, waiters and renewals follow.
 *
 * Layering: servers (with deploy.c): above conn, below the fan-out.
 */
#define _GNU_SOURCE
#include "client.h"
#include "conn.h"
#include "deploy.h"
#include "internal.h"
#include "pool.h"
#include "resp.h"
#include "sentinel.h"
#include "url.h"

#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Each sentinel gets at least this much of a resolution's time, however many are left to ask. */
#define RM_SENTINEL_MIN_BUDGET_NS (50 * RM_NS_PER_MS)

int rm_sentinel_init(rm_err *err, redmutex_client *c, size_t i)
{
    rm_server *entry = &c->pool.servers[i];
    const rm_endpoint *ep = &entry->ep;
    rm_sentinel *s = calloc(1, sizeof *s);
    if (!s)
        return rm_fail(err, REDMUTEX_ENOMEM, "out of memory");
    entry->dep->sentinel = s;
    s->sentinels = calloc((size_t)ep->n_seeds, sizeof *s->sentinels);
    if (!s->sentinels)
        return rm_fail(err, REDMUTEX_ENOMEM, "out of memory");
    for (int k = 0; k < ep->n_seeds; k++) {
        rm_server *srv = calloc(1, sizeof *srv);
        if (!srv || rm_endpoint_derive(err, &srv->ep, ep, ep->seed_host[k], ep->seed_port[k]) != 0) {
            free(srv);
            return rm_fail(err, REDMUTEX_ENOMEM, "out of memory");
        }
        s->sentinels[s->n++] = srv;
        /* The sentinels' own credentials, and no SELECT: a sentinel has no databases. */
        free(srv->ep.user);
        free(srv->ep.password);
        srv->ep.user = ep->sentinel_user ? strdup(ep->sentinel_user) : NULL;
        srv->ep.password = ep->sentinel_password ? strdup(ep->sentinel_password) : NULL;
        srv->ep.db = 0;
        if ((ep->sentinel_user && !srv->ep.user) || (ep->sentinel_password && !srv->ep.password))
            return rm_fail(err, REDMUTEX_ENOMEM, "out of memory");
        srv->client = c;
        srv->index = (int)i;
        srv->node = true;
        srv->dep = entry->dep;
        srv->tls = entry->tls; /* rediss+sentinel://: TLS to the sentinels too */
    }
    return 0;
}

void rm_sentinel_free(rm_sentinel *s)
{
    if (!s)
        return;
    for (int k = 0; k < s->n; k++) {
        rm_endpoint_clear(&s->sentinels[k]->ep);
        free(s->sentinels[k]);
    }
    free(s->sentinels);
    free(s);
}

rm_server *rm_sentinel_master_locked(redmutex_client *c, size_t i)
{
    rm_sentinel *s = c->pool.servers[i].dep->sentinel;
    return s ? s->master : NULL;
}

uint64_t rm_sentinel_switches(redmutex_client *c, size_t i)
{
    rm_sentinel *s = c->pool.servers[i].dep->sentinel;
    return s ? atomic_load(&s->switches) : 0;
}

void rm_sentinel_counts(redmutex_client *c, size_t i, uint64_t *resolutions, uint64_t *switches)
{
    rm_sentinel *s = c->pool.servers[i].dep->sentinel;
    *resolutions = s ? atomic_load(&s->resolutions) : 0;
    *switches = s ? atomic_load(&s->switches) : 0;
}

/* Makes node deployment i's master. Caller holds c->mu. */
static void set_master_locked(redmutex_client *c, size_t i, rm_server *node) RM_REQUIRES(c->mu)
{
    rm_sentinel *s = c->pool.servers[i].dep->sentinel;
    rm_server *old = s->master;
    s->resolved_ns = rm_now_ns();
    if (old == node)
        return;
    s->master = node;
    s->epoch++;
    rm_watch_probe_soon(c, i); /* its role and replicas */
    if (old) {
        atomic_fetch_add(&s->switches, 1);
        /* Its idle connections lead to a replica, or nowhere: they go. (Owing
           ones stay until paid or broken: a call may have one lent.) */
        for (size_t k = 0; k < old->n_idle; k++)
            rm_conn_close(old->idle[k]);
        old->n_idle = 0;
        rm_pool_moved_locked(c); /* the subscriber and the watchdog follow */
    }
}

void rm_sentinel_switch(redmutex_client *c, size_t i, const char *host, int port)
{
    rm_client_lock(c);
    rm_server *node = rm_deploy_node_locked(c, i, host, port);
    if (node)
        set_master_locked(c, i, node);
    rm_client_unlock(c);
}

/* ---- asking the sentinels ---------------------------------------------- */

int rm_sentinel_roundtrip(rm_conn *conn, const rm_buf *out, size_t n, rm_reply **r, int64_t deadline, char *why,
                          size_t size)
{
    size_t sent = 0, got = 0;
    rm_err e;
    rm_err_reset(&e);
    while (got < n) {
        int p = rm_poll_fd(conn->fd, rm_conn_events(conn, sent < out->len), deadline);
        if (p <= 0) {
            snprintf(why, size, "%s", p == 0 ? "did not answer in time" : "poll failed");
            return REDMUTEX_ECONN;
        }
        int rc = rm_conn_establish(&e, conn);
        if (rc > 0)
            continue;
        ssize_t k = 0;
        if (rc == 0 && sent < out->len) {
            k = rm_conn_send(&e, conn, out->data + sent, out->len - sent);
            sent += k > 0 ? (size_t)k : 0;
        } else if (rc == 0) {
            char buf[4096];
            k = rm_conn_recv(&e, conn, buf, sizeof buf);
            if (k > 0 && rm_reader_feed(conn->reader, buf, (size_t)k, why, size) != 0)
                return REDMUTEX_EPROTOCOL;
        }
        if (rc < 0 || k < 0) {
            /* The transport's reason, without the server's name (the caller says which). */
            const char *colon = strstr(e.msg, ": ");
            snprintf(why, size, "%.190s", colon ? colon + 2 : e.msg);
            return REDMUTEX_ECONN;
        }
        while (got < n && rm_reader_next(conn->reader, &r[got], why, size) == 1)
            got++;
    }
    return 0;
}

/* What one sentinel said. */
typedef struct asked {
    int rc;       /* 0: an address; REDMUTEX_EAUTH; REDMUTEX_ECONN (unreachable or no such service) */
    bool unknown; /* it answered, but knows no such service */
    char host[256];
    int port;
    char why[200];
} asked;

/* The AUTH reply and the address reply of one sentinel, read into *a. */
static void read_answer(asked *a, const rm_endpoint *ep, rm_reply *const *r, size_t n)
{
    const rm_reply *auth = n == 2 ? r[0] : NULL, *addr = r[n - 1];
    a->rc = REDMUTEX_ECONN;
    if (auth && auth->type == RM_REPLY_ERROR) {
        a->rc = REDMUTEX_EAUTH;
        snprintf(a->why, sizeof a->why, "refused the credentials (sentinel_password): %.150s", auth->str);
    } else if (addr->type == RM_REPLY_ERROR) {
        a->rc = strncmp(addr->str, "NOAUTH", 6) == 0 || strncmp(addr->str, "NOPERM", 6) == 0 ? REDMUTEX_EAUTH
                                                                                             : REDMUTEX_ECONN;
        snprintf(a->why, sizeof a->why, "%s%.150s", a->rc == REDMUTEX_EAUTH ? "needs credentials: " : "", addr->str);
    } else if (addr->type == RM_REPLY_NIL || (addr->type == RM_REPLY_ARRAY && addr->elements == 0)) {
        a->unknown = true;
        snprintf(a->why, sizeof a->why, "knows no service '%.100s'", ep->service);
    } else if (addr->type == RM_REPLY_ARRAY && addr->elements == 2 && addr->element[0]->type == RM_REPLY_STRING &&
               addr->element[1]->type == RM_REPLY_STRING && addr->element[0]->len < sizeof a->host &&
               atoi(addr->element[1]->str) > 0 && atoi(addr->element[1]->str) < 65536) {
        snprintf(a->host, sizeof a->host, "%s", addr->element[0]->str);
        a->port = atoi(addr->element[1]->str);
        a->rc = 0;
    } else {
        snprintf(a->why, sizeof a->why, "gave a malformed address");
    }
}

/* Asks sentinel srv for the service's master by deadline. */
static void ask(const rm_endpoint *ep, rm_server *srv, int64_t deadline, asked *a)
{
    memset(a, 0, sizeof *a);
    a->rc = REDMUTEX_ECONN;
    rm_conn *conn = NULL;
    rm_err e;
    rm_err_reset(&e);
    if (rm_conn_open(&e, &conn, srv) != 0) {
        const char *colon = strstr(e.msg, ": ");
        snprintf(a->why, sizeof a->why, "%.190s", colon ? colon + 2 : e.msg);
        return;
    }
    rm_buf out = {0};
    size_t n = 0;
    if (srv->ep.password) {
        const char *argv[3] = {"AUTH", srv->ep.user ? srv->ep.user : srv->ep.password, srv->ep.password};
        rm_format_command(&out, srv->ep.user ? 3 : 2, argv, NULL);
        n++;
    }
    const char *argv[3] = {"SENTINEL", "GET-MASTER-ADDR-BY-NAME", ep->service};
    rm_format_command(&out, 3, argv, NULL);
    n++;
    rm_reply *r[2] = {NULL, NULL};
    a->rc = rm_sentinel_roundtrip(conn, &out, n, r, deadline, a->why, sizeof a->why);
    if (a->rc == 0)
        read_answer(a, ep, r, n);
    rm_reply_free(r[0]);
    rm_reply_free(r[1]);
    rm_buf_free(&out);
    rm_conn_close(conn);
}

/* Whether another thread is asking now, or the master moved away from `avoid` a moment ago; takes the
   resolution for this thread otherwise. Caller holds c->mu. 0: go; 1: no need (*same: try again shortly). */
static int claim(rm_sentinel *s, rm_server *avoid, bool *same)
{
    *same = false;
    if (s->resolving) {
        *same = true;
        return 1;
    }
    if (s->master && s->master != avoid)
        return 1;
    s->resolving = true;
    return 0;
}

/* The message when no sentinel named a master: the most telling reason first. */
static int none_named(rm_err *err, const rm_endpoint *ep, const asked *a, int n, bool avoided)
{
    int code = REDMUTEX_ECONN;
    bool unknown = false;
    for (int k = 0; k < n; k++) {
        if (a[k].rc == REDMUTEX_EAUTH)
            code = REDMUTEX_EAUTH;
        unknown |= a[k].unknown;
    }
    char list[400];
    size_t len = 0;
    list[0] = '\0';
    for (int k = 0; k < n && len + 2 < sizeof list; k++)
        len += (size_t)snprintf(list + len, sizeof list - len, "%s%s:%d %s", k ? "; " : "", ep->seed_host[k],
                                ep->seed_port[k], a[k].rc == 0 ? "named it again" : a[k].why);
    if (avoided)
        return rm_fail(err, RM_SENTINEL_SAME, "the sentinels still name a master that is not one (%s)", list);
    return rm_fail(err, code, "%s: no sentinel named the master of '%s'%s (%s)", ep->display, ep->service,
                   code == REDMUTEX_EAUTH ? ": wrong sentinel credentials"
                   : unknown              ? ": unknown service name"
                                          : "",
                   list);
}

int rm_sentinel_resolve(rm_err *err, redmutex_client *c, size_t i, rm_server *avoid, int64_t deadline_ns)
{
    rm_server *entry = &c->pool.servers[i];
    rm_sentinel *s = entry->dep->sentinel;
    bool same;
    rm_client_lock(c);
    int skip = claim(s, avoid, &same);
    rm_client_unlock(c);
    if (skip)
        return same ? rm_fail(err, RM_SENTINEL_SAME, "another thread is asking the sentinels") : 0;
    atomic_fetch_add(&s->resolutions, 1);
    asked a[RM_SEEDS_MAX];
    int first = atomic_load(&s->first), found = -1, avoided = 0;
    for (int k = 0; k < s->n && found < 0; k++) {
        int x = (first + k) % s->n;
        /* A sentinel that does not answer must leave time to ask the others. */
        int64_t now = rm_now_ns(), share = (deadline_ns - now) / (s->n - k);
        int64_t until = share < RM_SENTINEL_MIN_BUDGET_NS ? now + RM_SENTINEL_MIN_BUDGET_NS : now + share;
        ask(&entry->ep, s->sentinels[x], until < deadline_ns ? until : deadline_ns, &a[x]);
        if (a[x].rc != 0)
            continue;
        rm_client_lock(c);
        rm_server *node = rm_deploy_node_locked(c, i, a[x].host, a[x].port);
        rm_client_unlock(c);
        if (node && node == avoid) {
            avoided++; /* a sentinel that has not heard of the failover yet: another may have */
            continue;
        }
        if (node)
            found = x;
    }
    rm_client_lock(c);
    s->resolving = false;
    if (found >= 0)
        set_master_locked(c, i, rm_deploy_node_locked(c, i, a[found].host, a[found].port));
    rm_client_unlock(c);
    if (found >= 0) {
        atomic_store(&s->first, found);
        return 0;
    }
    return none_named(err, &entry->ep, a, s->n, avoided > 0);
}
