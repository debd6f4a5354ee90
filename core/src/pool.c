/*
 * Servers: one connection pool per server, per-server order of requests
 * (the owing connections), and what is known of each server's life (its
 * run_id: restarts and duplicate endpoints).
 *
 * Layering: above conn; below the fan-out and the subscriber, which take and
 * give back connections here. The state lives in the client's rm_server
 * array, guarded by the client mutex.
 */
#define _GNU_SOURCE
#include "client.h"
#include "conn.h"
#include "internal.h"
#include "deploy.h"
#include "pool.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Idle connections kept per server; more concurrent callers open more. */
#define RM_POOL_MAX 32

/*
 * Per-server order. A call may return before a slow server answered (a
 * deadline, or a majority already decided the outcome); its connection then
 * still owes replies and carries requests that may not have run yet. Redis
 * runs the commands of one connection in order but gives no order between
 * connections, so a later request for the same lock name on another
 * connection could run first: a late release deleting the owner's next hold,
 * or a late acquisition leaving a key nobody owns. Such a connection
 * therefore goes to the server's owing list, marked with the lock names it
 * owes for, and the next request for one of those names travels on it,
 * behind the replies still owed. Requests that do not write a lock
 * (renewals, queries) take any clean connection.
 */
static bool pool_push(rm_server *srv, rm_conn *conn);
static bool owing_push(rm_server *srv, rm_conn *conn);

static void owing_remove(rm_server *srv, rm_conn *conn)
{
    for (size_t k = 0; k < srv->n_owing; k++)
        if (srv->owing[k] == conn) {
            srv->owing[k] = srv->owing[--srv->n_owing];
            return;
        }
}

/* Sends a connection's deferred release without blocking; a send error
   leaves the connection to fail at its next use. */
static void flush_quietly(rm_conn *conn)
{
    if (rm_conn_flush_later(NULL, conn) != 0)
        conn->flush_later = false;
}

/* Owing connections nobody asks for are read without blocking; those that
   are paid up rejoin the pool. Caller holds c->mu. */
static void owing_settle(redmutex_client *c, rm_server *srv) RM_REQUIRES(c->mu)
{
    for (size_t k = 0; k < srv->n_owing;) {
        rm_conn *conn = srv->owing[k];
        if (conn->lent) {
            k++;
            continue;
        }
        if (conn->later.len > 0 && conn->pid == rm_pid())
            flush_quietly(conn);
        if (rm_conn_drain(conn) != 0 || (conn->owed == 0 && conn->later_count == 0) || conn->pid != rm_pid()) {
            srv->owing[k] = srv->owing[--srv->n_owing];
            conn->n_order_keys = 0;
            if (!(conn->owed == 0 && conn->pid == rm_pid() && !c->life.closed && pool_push(srv, conn)))
                rm_conn_close(conn);
            continue;
        }
        k++;
    }
}

/* The owing connection a request for order_key must follow, lent to it
   (0); RM_CONN_BUSY when it cannot be had now (*busy_since: its last
   progress); -1 when none owes for it. Caller holds c->mu. */
static int take_owing(redmutex_client *c, rm_server *srv, uint64_t order_key, rm_conn **out, int64_t *busy_since)
    RM_REQUIRES(c->mu)
{
    if (srv->n_owing == 0 || !order_key)
        return -1;
    owing_settle(c, srv);
    /* Two connections may owe for one name (two threads' requests that
       were both left unanswered); a new request cannot follow both, so
       it waits until one is paid up. */
    rm_conn *owing = NULL;
    size_t owing_n = 0;
    int64_t since = INT64_MAX;
    for (size_t k = 0; k < srv->n_owing; k++)
        if (rm_conn_owes_for(srv->owing[k], order_key)) {
            owing = srv->owing[k];
            owing_n++;
            int64_t p = atomic_load_explicit(&owing->progress_ns, memory_order_relaxed);
            since = p < since ? p : since;
        }
    if (owing_n > 1 || (owing && owing->lent)) {
        if (busy_since)
            *busy_since = since;
        return RM_CONN_BUSY;
    }
    if (!owing)
        return -1;
    owing->lent = true;
    *out = owing;
    return 0;
}

/*
 * On a server that stalls, with no idle connection, a request (a release,
 * an undo: nothing else is sent there) rides an owing connection that no
 * call has (it owes replies for other names: they are skipped) rather than
 * open a new one, whose handshake would not be answered either: it is
 * queued there, in order, instead of waiting a connect timeout and never
 * going out. The one that answered last is taken. 0, or -1 when there is
 * none. Caller holds c->mu.
 */
static int ride_owing(redmutex_client *c, rm_server *srv, rm_conn **out) RM_REQUIRES(c->mu)
{
    rm_conn *best = NULL;
    owing_settle(c, srv);
    for (size_t k = 0; k < srv->n_owing; k++) {
        rm_conn *conn = srv->owing[k];
        if (!conn->lent && conn->pid == rm_pid() &&
            (!best || atomic_load_explicit(&conn->progress_ns, memory_order_relaxed) >
                          atomic_load_explicit(&best->progress_ns, memory_order_relaxed)))
            best = conn;
    }
    if (!best)
        return -1;
    best->lent = true;
    *out = best;
    return 0;
}

int rm_pool_take(rm_err *err, redmutex_client *c, rm_server *srv, uint64_t order_key, rm_conn **out,
                 int64_t *busy_since)
{
    rm_client_lock(c);
    int rc = take_owing(c, srv, order_key, out, busy_since);
    rm_client_unlock(c);
    if (rc != -1)
        return rc;
    for (;;) {
        rm_conn *conn = NULL;
        rm_client_lock(c);
        if (srv->n_idle > 0)
            conn = srv->idle[--srv->n_idle];
        rm_client_unlock(c);
        if (!conn)
            break;
        /* A server that closed an idle connection (timeout, restart) is found
           here, before a command is sent on it, so nothing is retried blindly. */
        if (conn->pid == rm_pid() && rm_conn_looks_healthy(conn)) {
            *out = conn;
            return 0;
        }
        rm_conn_close(conn);
    }
    rm_client_lock(c);
    /* A request for this name may have been left unanswered meanwhile. */
    rc = take_owing(c, srv, order_key, out, busy_since);
    if (rc == -1 && !c->life.closed && rm_server_stalls(c, srv, 0, rm_now_ns()))
        rc = ride_owing(c, srv, out);
    rm_client_unlock(c);
    if (rc != -1)
        return rc;
    return rm_conn_open(err, out, srv);
}

int rm_pool_retake(rm_err *err, redmutex_client *c, rm_server *srv, uint64_t order_key, rm_conn **conn,
                   int64_t *busy_since)
{
    rm_conn *mine = *conn;
    if (!mine)
        return rm_pool_take(err, c, srv, order_key, conn, busy_since);
    /* A connection that still owes for the name carries this call's own
       unanswered request: the next one follows it there. One that was paid
       up (rm_pool_paid) orders nothing, and another call may have left a
       request for the name unanswered on another connection since: the
       next one follows that. */
    bool follow = mine->srv != srv; /* a cluster's slot moved to another node */
    rm_client_lock(c);
    for (size_t k = 0; order_key && !(mine->lent && rm_conn_owes_for(mine, order_key)) && k < srv->n_owing; k++)
        if (srv->owing[k] != mine && rm_conn_owes_for(srv->owing[k], order_key))
            follow = true;
    rm_client_unlock(c);
    if (!follow)
        return 0;
    *conn = NULL;
    rm_pool_give(c, mine, true, order_key);
    return rm_pool_take(err, c, srv, order_key, conn, busy_since);
}

void rm_pool_paid(redmutex_client *c, rm_conn *conn)
{
    rm_client_lock(c);
    if (conn->lent && conn->owed == 0 && conn->later_count == 0 && !conn->flush_later) {
        owing_remove(conn->srv, conn);
        conn->lent = false;
        conn->n_order_keys = 0;
    }
    rm_client_unlock(c);
}

size_t rm_pool_take_later(redmutex_client *c, rm_conn *conn, rm_buf *out)
{
    size_t n = 0;
    rm_client_lock(c);
    if (conn->later_count) {
        if (rm_buf_append(out, conn->later.data, conn->later.len) != 0) {
            n = (size_t)-1;
        } else {
            n = conn->later_count;
            conn->later.len = 0;
            conn->later_count = 0;
            conn->flush_later = false;
        }
    }
    rm_client_unlock(c);
    return n;
}

bool rm_pool_queue_later(redmutex_client *c, rm_conn *conn, int argc, const char *const *argv)
{
    rm_client_lock(c);
    bool ok = rm_conn_queue_later(conn, argc, argv);
    rm_client_unlock(c);
    return ok;
}

static bool pool_push(rm_server *srv, rm_conn *conn)
{
    if (srv->n_idle >= RM_POOL_MAX)
        return false;
    if (srv->n_idle == srv->cap_idle) {
        size_t cap = srv->cap_idle ? srv->cap_idle * 2 : 4;
        rm_conn **idle = realloc(srv->idle, cap * sizeof *idle);
        if (!idle)
            return false;
        srv->idle = idle;
        srv->cap_idle = cap;
    }
    srv->idle[srv->n_idle++] = conn;
    return true;
}

static bool owing_push(rm_server *srv, rm_conn *conn)
{
    if (conn->lent) {
        conn->lent = false; /* it is on the list already */
        return true;
    }
    if (srv->n_owing == srv->cap_owing) {
        size_t cap = srv->cap_owing ? srv->cap_owing * 2 : 4;
        rm_conn **owing = realloc(srv->owing, cap * sizeof *owing);
        if (!owing)
            return false;
        srv->owing = owing;
        srv->cap_owing = cap;
    }
    srv->owing[srv->n_owing++] = conn;
    return true;
}

int rm_pool_mark_owing(redmutex_client *c, rm_conn *conn, uint64_t order_key)
{
    int rc = 0;
    rm_client_lock(c);
    if (!conn->lent) {
        /* Listed and lent at once: visible to everyone from now on. */
        rc = rm_conn_add_order_key(conn, order_key) == 0 && owing_push(conn->srv, conn) ? 0 : -1;
        conn->lent = rc == 0;
    } else {
        rc = rm_conn_add_order_key(conn, order_key);
    }
    rm_client_unlock(c);
    return rc;
}

int rm_pool_defer(redmutex_client *c, rm_server *srv, uint64_t order_key, uint64_t owner_key, const void *bytes,
                  size_t len, size_t count)
{
    int rc = 1;
    rm_client_lock(c);
    size_t owing = 0, own = 0;
    for (size_t k = 0; k < srv->n_owing; k++)
        if (rm_conn_owes_for(srv->owing[k], order_key) && srv->owing[k]->pid == rm_pid()) {
            owing++;
            own += owner_key && rm_conn_owes_for(srv->owing[k], owner_key);
        }
    for (size_t k = 0; k < srv->n_owing; k++) {
        rm_conn *conn = srv->owing[k];
        if (!rm_conn_owes_for(conn, order_key) || conn->pid != rm_pid())
            continue;
        if (owing > 1 && own > 0 && !rm_conn_owes_for(conn, owner_key))
            continue;
        if (rm_buf_append(&conn->later, bytes, len) != 0) {
            rc = REDMUTEX_ENOMEM;
            break;
        }
        conn->later_count += count;
        conn->flush_later = true;
        if (!conn->lent)
            flush_quietly(conn);
        rc = 0;
    }
    rm_client_unlock(c);
    return rc;
}

void rm_pool_give(redmutex_client *c, rm_conn *conn, bool healthy, uint64_t order_key)
{
    if (!conn)
        return;
    rm_server *srv = conn->srv;
    bool usable = healthy && conn->pid == rm_pid() && !conn->connecting && conn->fd >= 0;
    bool kept = false;
    rm_client_lock(c);
    if (usable && conn->flush_later)
        flush_quietly(conn); /* a release queued behind this connection's call */
    if (usable && !c->life.closed && (conn->owed > 0 || conn->flush_later)) {
        /* Without its key the order could not be kept: then it is closed. */
        kept = (!order_key || rm_conn_add_order_key(conn, order_key) == 0) && owing_push(srv, conn);
    }
    if (!kept) {
        if (conn->lent)
            owing_remove(srv, conn);
        conn->lent = false;
        conn->n_order_keys = 0;
        kept = usable && !c->life.closed && conn->owed == 0 && pool_push(srv, conn);
    }
    rm_client_unlock(c);
    if (!kept)
        rm_conn_close(conn);
}

bool rm_pool_settle(redmutex_client *c, rm_server *srv)
{
    bool awaits = false;
    rm_client_lock(c);
    owing_settle(c, srv);
    for (size_t k = 0; k < srv->n_owing && !awaits; k++)
        awaits = srv->owing[k]->lent || srv->owing[k]->owed > 0;
    rm_client_unlock(c);
    return awaits;
}

/* Whether another server of c has answered: then one that never did is not
   unreachable but silent while the others work (Redlock). */
static bool others_answer(const redmutex_client *c, const rm_server *srv)
{
    for (size_t i = 0; c->n > 1 && i < c->n; i++)
        if (&c->pool.servers[i] != srv &&
            atomic_load_explicit(&c->pool.servers[i].answered_ns, memory_order_relaxed) > 0)
            return true;
    return false;
}

bool rm_server_stalls(redmutex_client *c, rm_server *srv, int64_t since, int64_t now)
{
    int64_t limit = c->opts.command_timeout_ms * RM_NS_PER_MS;
    /* answered is 0 while the server has never answered this client. When
       the others answer, one met stalling (or hung) from the start stalls
       all the same, or every call would wait its whole timeout there, each
       one's grant elsewhere kept meanwhile, and nobody would reach a
       majority. Alone, it is unreachable. */
    int64_t answered = atomic_load_explicit(&srv->answered_ns, memory_order_relaxed);
    if ((answered > 0 || others_answer(c, srv)) && since > 0 && since < INT64_MAX && now - since >= limit &&
        now - answered >= limit) {
        atomic_store_explicit(&srv->stall_seen_ns, now, memory_order_relaxed);
        return true;
    }
    return atomic_load_explicit(&srv->stall_seen_ns, memory_order_relaxed) > answered;
}

int rm_server_note_run_id(rm_err *err, redmutex_client *c, rm_server *srv, const char *run_id)
{
    int rc = 0;
    const rm_server *dup = NULL;
    rm_client_lock(c);
    /* A cluster's locks are judged by their keys wherever the slot lives
       now (a failover, a migration): no restart rule for its nodes. */
    bool cluster = srv->node || atomic_load(&srv->dep->topology) == RM_TOPOLOGY_CLUSTER;
    if (cluster) {
        snprintf(srv->run_id, sizeof srv->run_id, "%s", run_id);
    } else if (strcmp(srv->run_id, run_id) != 0) {
        /* A new run_id means the server restarted: locks granted by its
           previous life no longer count towards a quorum. */
        bool restarted = srv->run_id[0] != '\0';
        snprintf(srv->run_id, sizeof srv->run_id, "%s", run_id);
        srv->generation++;
        if (restarted) {
            /* Recorded, not acted on: the hold registry, above, loses the
               holds this life cannot vouch for when it next looks
               (rm_holds_catch_up_locked: a state query, a claim, or the
               watchdog thread this wakes). */
            c->pool.restarts++;
            pthread_cond_broadcast(&c->holds.wake);
            atomic_store(&srv->restart_seen_ns, rm_now_ns());
        }
    }
    /* The same process reached through another deployment (another URL,
       address or name, or a node of a cluster another URL reaches too)
       would vote twice. The deployment that finds it is left out from now
       on; a cluster stays so, a standalone server until its run_id no
       longer matches. */
    dup = rm_deploy_same_process_locked(c, srv, run_id);
    rm_server *entry = &c->pool.servers[srv->index];
    if (dup) {
        entry->duplicate = true;
        rc = REDMUTEX_EDUPLICATE;
    } else if (!cluster) {
        entry->duplicate = false;
    }
    rm_client_unlock(c);
    if (dup)
        rm_fail(err, REDMUTEX_EDUPLICATE,
                "%s and %s are the same Redis server (run_id %s); a Redlock majority needs "
                "independent servers",
                dup->ep.display, srv->ep.display, run_id);
    return rc;
}

void rm_pool_after_fork(redmutex_client *c)
{
    /* The parent's connections are not ours: closing our copies of the
       sockets does not affect the parent. */
    for (size_t i = 0; i < c->n; i++) {
        rm_server *srv = &c->pool.servers[i];
        for (size_t k = 0; k < srv->n_idle; k++)
            rm_conn_close(srv->idle[k]);
        srv->n_idle = 0;
        for (size_t k = 0; k < srv->n_owing; k++)
            rm_conn_close(srv->owing[k]);
        srv->n_owing = 0;
    }
}

void rm_pool_clear(rm_server *srv)
{
    for (size_t k = 0; k < srv->n_idle; k++)
        rm_conn_close(srv->idle[k]);
    free(srv->idle);
    for (size_t k = 0; k < srv->n_owing; k++)
        rm_conn_close(srv->owing[k]);
    free(srv->owing);
}

void rm_pool_moved_locked(redmutex_client *c)
{
    c->pool.moves++;
    pthread_cond_broadcast(&c->holds.wake);
    if (c->pool.news_fd >= 0)
        rm_efd_signal(c->pool.news_fd);
}

void rm_pool_listen_locked(redmutex_client *c, int fd) { c->pool.news_fd = fd; }
