/*
 * The watcher: one thread per client with Sentinel deployments. It keeps a
 * subscription to +switch-master and +promoted-slave on every sentinel of
 * every such deployment (the leader announces the promotion as soon as the
 * replica says it is a master - when the sentinels start naming it - and the
 * switch once the replicas follow; the others announce the switch within
 * their hello period: listening to all of them hears the first), checks each subscription with a PING every second (a
 * sentinel that stopped answering is left for the next try), and probes
 * each master's ROLE: every second, every 250 ms while it has fewer
 * replicas than the WAIT of the requests wants, and at once after a switch.
 * The probe tells how many replicas WAIT can count on (sentinel.h), and a
 * master that is demoted, refuses or does not answer makes it ask the
 * sentinels: the client follows a failover even when no announcement of it
 * reached the watcher (its subscriptions being made again, say).
 *
 * What it learns goes to sentinel.c (rm_sentinel_switch, resolve), which
 * tells the subscriber and the watchdog (rm_pool_moved_locked). Its setup
 * steps (connect, subscribe; a probe) block for up to
 * RM_WATCH_STEP_MS each: a slow sentinel delays the others' news by that
 * much at most, never a caller.
 *
 * Layering: servers (with sentinel.c).
 */
#define _GNU_SOURCE
#include "client.h"
#include "conn.h"
#include "deploy.h"
#include "internal.h"
#include "resp.h"
#include "sentinel.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#define RM_WATCH_STEP_MS 500          /* a blocking step's budget (connect + subscribe, a probe) */
#define RM_WATCH_PING_MS 1000         /* a subscription is PINGed this often, and dropped if still silent then */
#define RM_WATCH_PROBE_MS 1000        /* a master's ROLE is asked this often ... */
#define RM_WATCH_PROBE_WANTING_MS 250 /* ... or this often while it has fewer replicas than WAIT wants */
#define RM_WATCH_BACKOFF_MAX_MS 5000

/* A subscription to one sentinel. */
typedef struct watch_conn {
    size_t dep;
    int k; /* the sentinel's index in the deployment */
    rm_conn *conn;
    int64_t retry_at, backoff_ms, ping_at;
    bool awaiting; /* a PING not yet answered */
} watch_conn;

/* A deployment's master as probed. */
typedef struct probe {
    rm_conn *conn;
    rm_server *node; /* the master conn leads to */
    int64_t due;     /* the next probe */
    bool soon;       /* c->mu: asked for at once (rm_watch_probe_soon, a switch) */
} probe;

typedef struct rm_watch {
    pthread_t thread;
    /* c->mu. `exiting`: the thread has decided, under c->mu, whether it
       frees itself (detached) or is joined; a stop that gave up waiting
       joins one that decided, since nobody else would free it. */
    bool stop, detached, exiting;
    int wake_fd;
    watch_conn *conns;
    size_t n;
    probe *probes; /* one per deployment (only Sentinel deployments' are used) */
} rm_watch;

static void close_probe(probe *p)
{
    rm_conn_close(p->conn);
    p->conn = NULL;
    p->node = NULL;
}

static void watch_free(redmutex_client *c, rm_watch *w)
{
    for (size_t k = 0; k < w->n; k++)
        rm_conn_close(w->conns[k].conn);
    for (size_t i = 0; w->probes && i < c->n; i++)
        close_probe(&w->probes[i]);
    if (w->wake_fd >= 0)
        close(w->wake_fd);
    free(w->conns);
    free(w->probes);
    free(w);
}

/* The service name of deployment i. */
static const char *service(redmutex_client *c, size_t i) { return c->pool.servers[i].ep.service; }

/* AUTH (with srv's credentials) when it has a password; returns the count of commands added. */
static size_t add_auth(rm_buf *b, const rm_server *srv)
{
    if (!srv->ep.password)
        return 0;
    const char *argv[3] = {"AUTH", srv->ep.user ? srv->ep.user : srv->ep.password, srv->ep.password};
    rm_format_command(b, srv->ep.user ? 3 : 2, argv, NULL);
    return 1;
}

/* An address reply [host, port] into host/port; false when it is none. */
static bool read_addr(const rm_reply *r, char host[256], int *port)
{
    if (!r || r->type != RM_REPLY_ARRAY || r->elements != 2 || r->element[0]->type != RM_REPLY_STRING ||
        r->element[1]->type != RM_REPLY_STRING || r->element[0]->len >= 256)
        return false;
    snprintf(host, 256, "%s", r->element[0]->str);
    *port = atoi(r->element[1]->str);
    return *port > 0 && *port < 65536;
}

/*
 * Connects to wc's sentinel and subscribes (blocking, RM_WATCH_STEP_MS).
 * The master's address, asked in the same round trip, is taken if it
 * differs from the one known: a switch announced while nobody listened.
 */
static rm_conn *subscribe(redmutex_client *c, watch_conn *wc)
{
    rm_server *srv = c->pool.servers[wc->dep].dep->sentinel->sentinels[wc->k];
    rm_conn *conn = NULL;
    if (rm_conn_open(NULL, &conn, srv) != 0)
        return NULL;
    rm_buf out = {0};
    size_t n = add_auth(&out, srv);
    const char *addr[3] = {"SENTINEL", "GET-MASTER-ADDR-BY-NAME", service(c, wc->dep)},
               *sub[3] = {"SUBSCRIBE", "+switch-master", "+promoted-slave"};
    rm_format_command(&out, 3, addr, NULL);
    rm_format_command(&out, 3, sub, NULL);
    n += 3; /* the address, and one confirmation per channel */
    rm_reply *r[4] = {NULL, NULL, NULL, NULL};
    char why[160];
    int rc = rm_sentinel_roundtrip(conn, &out, n, r, rm_deadline_after_ms(RM_WATCH_STEP_MS), why, sizeof why);
    bool ok = rc == 0 && r[n - 1]->type == RM_REPLY_ARRAY && (n == 3 || r[0]->type != RM_REPLY_ERROR);
    char host[256];
    int port;
    if (ok && read_addr(r[n - 3], host, &port)) {
        rm_client_lock(c);
        rm_server *m = rm_sentinel_master_locked(c, wc->dep);
        bool differs = m && (m->ep.port != port || strcmp(m->ep.host, host) != 0);
        rm_client_unlock(c);
        if (differs)
            rm_sentinel_switch(c, wc->dep, host, port);
    }
    for (size_t k = 0; k < 4; k++)
        rm_reply_free(r[k]);
    rm_buf_free(&out);
    if (!ok) {
        rm_conn_close(conn);
        return NULL;
    }
    return conn;
}

/*
 * The new master a sentinel announces, into host/port; false when the
 * message is about another service. "+switch-master" says "<service> <old
 * ip> <old port> <new ip> <new port>", "+promoted-slave" "slave <ip>:<port>
 * <ip> <port> @ <service> <master ip> <master port>".
 */
static bool announced(const rm_reply *r, const char *svc, char host[256], int *port)
{
    char name[256], a[256], b[256];
    int old_port;
    const char *text = r->element[2]->str;
    if (strcmp(r->element[1]->str, "+promoted-slave") == 0)
        return sscanf(text, "%255s %255s %255s %d @ %255s", a, b, host, port, name) == 5 && strcmp(a, "slave") == 0 &&
               strcmp(name, svc) == 0 && *port > 0 && *port < 65536;
    return sscanf(text, "%255s %255s %d %255s %d", name, a, &old_port, host, port) == 5 && strcmp(name, svc) == 0 &&
           *port > 0 && *port < 65536;
}

/* A sentinel announced a new master of deployment wc->dep: it follows. */
static void on_message(redmutex_client *c, rm_watch *w, watch_conn *wc, const rm_reply *r)
{
    if (r->type != RM_REPLY_ARRAY || r->elements < 2 || r->element[0]->type != RM_REPLY_STRING)
        return;
    if (strcmp(r->element[0]->str, "pong") == 0) {
        wc->awaiting = false;
        return;
    }
    if (r->elements != 3 || strcmp(r->element[0]->str, "message") != 0 || r->element[1]->type != RM_REPLY_STRING ||
        r->element[2]->type != RM_REPLY_STRING)
        return;
    char host[256];
    int port;
    if (!announced(r, service(c, wc->dep), host, &port))
        return;
    rm_sentinel_switch(c, wc->dep, host, port);
    rm_client_lock(c);
    w->probes[wc->dep].soon = true;
    rm_client_unlock(c);
}

/* Reads what a subscription sent; false when it broke. */
static bool read_conn(redmutex_client *c, rm_watch *w, watch_conn *wc)
{
    char buf[4096], why[160];
    for (;;) {
        ssize_t k = rm_conn_recv(NULL, wc->conn, buf, sizeof buf);
        if (k < 0 || (k > 0 && rm_reader_feed(wc->conn->reader, buf, (size_t)k, why, sizeof why) != 0))
            return false;
        if (k < (ssize_t)sizeof buf)
            break;
    }
    rm_reply *r;
    int more;
    while ((more = rm_reader_next(wc->conn->reader, &r, why, sizeof why)) == 1) {
        on_message(c, w, wc, r);
        rm_reply_free(r);
    }
    return more == 0;
}

static void drop_conn(watch_conn *wc, int64_t now)
{
    rm_conn_close(wc->conn);
    wc->conn = NULL;
    wc->backoff_ms = wc->backoff_ms
                         ? (wc->backoff_ms * 2 > RM_WATCH_BACKOFF_MAX_MS ? RM_WATCH_BACKOFF_MAX_MS : wc->backoff_ms * 2)
                         : 100;
    wc->retry_at = now + wc->backoff_ms * RM_NS_PER_MS;
}

/* Sends a PING on a subscription, or drops it when the last one is still unanswered. */
static void ping(watch_conn *wc, int64_t now)
{
    if (wc->awaiting) {
        drop_conn(wc, now); /* a sentinel that stopped answering: the others are listened to meanwhile */
        wc->retry_at = now;
        return;
    }
    static const char cmd[] = "*1\r\n$4\r\nPING\r\n";
    if (rm_conn_send(NULL, wc->conn, cmd, sizeof cmd - 1) != (ssize_t)(sizeof cmd - 1)) {
        drop_conn(wc, now);
        return;
    }
    wc->awaiting = true;
    wc->ping_at = now + RM_WATCH_PING_MS * RM_NS_PER_MS;
}

/*
 * Probes deployment i's master: its ROLE, on a connection kept for it.
 * Master: its replicas are counted; replica: the sentinels are asked again,
 * passing over it. Blocks up to RM_WATCH_STEP_MS. Returns the next due time.
 */
static int64_t probe_master(redmutex_client *c, probe *p, size_t i)
{
    rm_client_lock(c);
    rm_server *node = rm_sentinel_master_locked(c, i);
    rm_client_unlock(c);
    int64_t deadline = rm_deadline_after_ms(RM_WATCH_STEP_MS);
    if (!node) { /* nobody asked yet: ask now, so waits and renewals have a master to follow */
        rm_sentinel_resolve(NULL, c, i, NULL, deadline);
        return rm_now_ns() + RM_WATCH_PROBE_WANTING_MS * RM_NS_PER_MS;
    }
    if (p->node != node)
        close_probe(p);
    rm_buf out = {0};
    size_t n = 0;
    if (!p->conn) {
        if (rm_conn_open(NULL, &p->conn, node) != 0) { /* refused: the sentinels may name another by now */
            rm_sentinel_resolve(NULL, c, i, node, deadline);
            return rm_now_ns() + RM_WATCH_PROBE_WANTING_MS * RM_NS_PER_MS;
        }
        p->node = node;
        n = add_auth(&out, node);
    }
    const char *role[1] = {"ROLE"};
    rm_format_command(&out, 1, role, NULL);
    rm_reply *r[2] = {NULL, NULL};
    char why[160];
    int rc = rm_sentinel_roundtrip(p->conn, &out, n + 1, r, deadline, why, sizeof why);
    const rm_reply *role_r = rc == 0 ? r[n] : NULL;
    bool master = role_r && role_r->type == RM_REPLY_ARRAY && role_r->elements >= 3 &&
                  role_r->element[0]->type == RM_REPLY_STRING && strcmp(role_r->element[0]->str, "master") == 0 &&
                  role_r->element[2]->type == RM_REPLY_ARRAY;
    bool refused = role_r && role_r->type == RM_REPLY_ERROR; /* an ACL without ROLE: it cannot tell */
    if (master)
        atomic_store(&node->replicas, (int)role_r->element[2]->elements);
    rm_reply_free(r[0]);
    rm_reply_free(r[1]);
    rm_buf_free(&out);
    if (refused)
        return rm_now_ns() + RM_WATCH_PROBE_MS * RM_NS_PER_MS;
    if (!master) { /* demoted, dead or silent while the sentinels were not heard: ask them, passing over it */
        close_probe(p);
        rm_sentinel_resolve(NULL, c, i, node, rm_deadline_after_ms(RM_WATCH_STEP_MS));
    }
    int64_t wanted = c->replicas_by_deployment ? 1 : c->opts.min_replicas;
    bool wanting = !master || atomic_load(&node->replicas) < wanted;
    return rm_now_ns() + (wanting ? RM_WATCH_PROBE_WANTING_MS : RM_WATCH_PROBE_MS) * RM_NS_PER_MS;
}

/*
 * One round of the timers: a subscription to make (returns after making
 * it, so stop is looked at between blocking steps), PINGs, probes. Returns
 * when the next is due. Caller holds c->mu; it is released around blocking
 * steps.
 */
static int64_t run_timers(redmutex_client *c, rm_watch *w, bool *again) RM_REQUIRES(c->mu)
{
    int64_t now = rm_now_ns(), next = now + RM_WATCH_PING_MS * RM_NS_PER_MS;
    *again = false;
    for (size_t k = 0; k < w->n; k++) {
        watch_conn *wc = &w->conns[k];
        if (!wc->conn && now >= wc->retry_at) {
            rm_client_unlock(c);
            rm_conn *conn = subscribe(c, wc);
            rm_client_lock(c);
            wc->conn = conn;
            wc->awaiting = false;
            if (conn) {
                wc->backoff_ms = 0;
                wc->ping_at = rm_now_ns() + RM_WATCH_PING_MS * RM_NS_PER_MS;
            } else {
                drop_conn(wc, rm_now_ns());
            }
            *again = true;
            return now;
        }
        if (wc->conn && now >= wc->ping_at)
            ping(wc, now);
        int64_t at = wc->conn ? wc->ping_at : wc->retry_at;
        next = at < next ? at : next;
    }
    for (size_t i = 0; i < c->n; i++) {
        probe *p = &w->probes[i];
        if (!rm_deploy_is_sentinel(c, i))
            continue;
        if (p->soon || now >= p->due) {
            p->soon = false; /* a switch while it runs asks again */
            rm_client_unlock(c);
            int64_t due = probe_master(c, p, i);
            rm_client_lock(c);
            p->due = due;
            *again = true;
            return now;
        }
        next = p->due < next ? p->due : next;
    }
    return next;
}

static void *watch_main(void *arg)
{
    redmutex_client *c = arg;
    rm_client_lock(c);
    rm_watch *w = c->pool.watch;
    struct pollfd *pfds = calloc(w->n + 1, sizeof *pfds);
    size_t *map = calloc(w->n + 1, sizeof *map);
    while (!w->stop && pfds && map) {
        bool again;
        int64_t next = run_timers(c, w, &again);
        if (again)
            continue;
        size_t np = 0;
        pfds[np++] = (struct pollfd){w->wake_fd, POLLIN, 0};
        for (size_t k = 0; k < w->n; k++)
            if (w->conns[k].conn) {
                pfds[np] = (struct pollfd){w->conns[k].conn->fd, POLLIN, 0};
                map[np++] = k;
            }
        rm_client_unlock(c);
        int64_t ms = rm_ms_until(next);
        int r = poll(pfds, np, ms > 60000 ? 60000 : (int)ms);
        rm_client_lock(c);
        if (r <= 0)
            continue;
        if (pfds[0].revents)
            rm_efd_drain(w->wake_fd);
        for (size_t k = 1; k < np; k++) {
            watch_conn *wc = &w->conns[map[k]];
            if (!pfds[k].revents || !wc->conn)
                continue;
            rm_client_unlock(c);
            bool ok = read_conn(c, w, wc);
            rm_client_lock(c);
            if (!ok)
                drop_conn(wc, rm_now_ns());
        }
    }
    free(pfds);
    free(map);
    bool detached = w->detached;
    w->exiting = true;
    if (detached)
        c->pool.watch = NULL;
    rm_client_unlock(c);
    if (detached)
        watch_free(c, w);
    rm_client_unref(c);
    return NULL;
}

int rm_watch_start(rm_err *err, redmutex_client *c)
{
    size_t n = 0;
    for (size_t i = 0; i < c->n; i++)
        if (rm_deploy_is_sentinel(c, i))
            n += (size_t)c->pool.servers[i].dep->sentinel->n;
    if (n == 0)
        return 0;
    rm_watch *w = calloc(1, sizeof *w);
    if (!w)
        return rm_fail(err, REDMUTEX_ENOMEM, "out of memory");
    w->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    w->conns = calloc(n, sizeof *w->conns);
    w->probes = calloc(c->n, sizeof *w->probes);
    if (w->wake_fd < 0 || !w->conns || !w->probes) {
        watch_free(c, w);
        return rm_fail(err, REDMUTEX_ENOMEM, "cannot set up the sentinels' watcher: out of memory or descriptors");
    }
    for (size_t i = 0; i < c->n; i++)
        for (int k = 0; rm_deploy_is_sentinel(c, i) && k < c->pool.servers[i].dep->sentinel->n; k++)
            w->conns[w->n++] = (watch_conn){i, k, NULL, 0, 0, 0, false};
    rm_client_lock(c);
    bool none = !c->pool.watch && !c->life.closed;
    if (none) {
        c->pool.watch = w;
        c->life.refs++; /* the thread's reference, dropped when it exits */
    }
    rm_client_unlock(c);
    if (!none) { /* another thread started it (a forked child's first requests), or the client is closed */
        watch_free(c, w);
        return 0;
    }
    if (rm_thread_start(&w->thread, NULL, watch_main, c) != 0) {
        rm_client_lock(c);
        c->pool.watch = NULL;
        c->life.refs--;
        rm_client_unlock(c);
        watch_free(c, w);
        return rm_fail(err, REDMUTEX_ESYSTEM, "cannot start the sentinels' watcher thread");
    }
    return 0;
}

static void wake(rm_watch *w) { rm_efd_signal(w->wake_fd); }

void rm_watch_probe_soon(redmutex_client *c, size_t i)
{
    rm_watch *w = c->pool.watch;
    if (!w)
        return;
    w->probes[i].soon = true;
    wake(w);
}

void rm_watch_stop(redmutex_client *c, int64_t deadline_ns)
{
    rm_client_lock(c);
    rm_watch *w = c->pool.watch;
    if (!w || w->stop) {
        rm_client_unlock(c);
        return;
    }
    w->stop = true;
    wake(w);
    rm_client_unlock(c);
    bool joined = rm_join_until(w->thread, deadline_ns);
    rm_client_lock(c);
    if (!joined && !w->exiting) { /* it frees itself when it ends */
        w->detached = true;
        pthread_detach(w->thread);
        rm_client_unlock(c);
        return;
    }
    c->pool.watch = NULL;
    rm_client_unlock(c);
    if (!joined) /* it ended as the wait gave up: only its last unlock and unref are left */
        pthread_join(w->thread, NULL);
    watch_free(c, w);
}

void rm_watch_forget(redmutex_client *c)
{
    rm_watch *w = c->pool.watch;
    if (!w)
        return;
    /*
     * The thread did not survive fork, and it works on its connections
     * without the client mutex: their copies here may be half changed. Only
     * the descriptors are closed (the parent's sockets are not affected);
     * the memory is left. The child's first request to a Sentinel
     * deployment starts a watcher of its own (rm_failover_route).
     */
    for (size_t k = 0; k < w->n; k++)
        if (w->conns[k].conn && w->conns[k].conn->fd >= 0)
            close(w->conns[k].conn->fd);
    for (size_t i = 0; i < c->n; i++)
        if (w->probes[i].conn && w->probes[i].conn->fd >= 0)
            close(w->probes[i].conn->fd);
    close(w->wake_fd);
    c->pool.watch = NULL;
    c->life.refs--;
}
