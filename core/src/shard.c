/*
 * Sharded pub/sub on clusters of 7.0+ nodes (Redisson's sharded
 * subscription mode AUTO): a release channel is subscribed with SSUBSCRIBE
 * on the node that owns its slot, one connection per node for all the
 * channels there, and the release scripts SPUBLISH. When the slot moves
 * (the node sends sunsubscribe, or answers MOVED) or the node's connection
 * is lost, the channel is subscribed again on its new owner and its waiters
 * are woken to look at the lock at once: a release published meanwhile
 * must not leave anyone asleep until their backoff.
 *
 * Layering: with the subscriber (subscriber.c), above the deployments.
 */
#define _GNU_SOURCE
#include "client.h"
#include "conn.h"
#include "deploy.h"
#include "internal.h"
#include "resp.h"
#include "slots.h"
#include "subscriber.h"
#include "topology.h"

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

/* Connects to srv and runs the handshake, giving up at the deadline or on a wake-up. */
rm_conn *rm_pubsub_connect(redmutex_client *c, rm_subscriber *sub, rm_server *srv)
{
    rm_conn *conn = NULL;
    if (rm_conn_open(NULL, &conn, srv) != 0)
        return NULL;
    int64_t deadline = rm_deadline_after_ms(c->opts.connect_timeout_ms);
    rm_buf hs = {0};
    size_t n = rm_conn_handshake(conn, &hs, false);
    conn->fresh = false;
    size_t sent = 0, got = 0;
    bool ok = true;
    while (ok && (conn->connecting || sent < hs.len || got < n)) {
        struct pollfd p[2] = {{conn->fd, rm_conn_events(conn, sent < hs.len), 0}, {sub->wake_fd, POLLIN, 0}};
        int64_t ms = rm_ms_until(deadline);
        if (ms <= 0)
            break;
        int r = poll(p, 2, ms > 1000 ? 1000 : (int)ms);
        if (r < 0 && errno != EINTR)
            ok = false;
        if (r <= 0)
            continue;
        if (p[1].revents) {
            rm_client_lock(c);
            bool stop = sub->stop;
            rm_client_unlock(c);
            if (stop)
                ok = false;
            else
                rm_efd_drain(sub->wake_fd);
            /* The wake-up is not lost: the main loop re-plans after connecting. */
        }
        if (!ok || !p[0].revents)
            continue;
        int rc = rm_conn_establish(NULL, conn); /* connect() and the TLS handshake */
        if (rc != 0) {
            ok = rc > 0;
            continue;
        }
        if (sent < hs.len) {
            ssize_t w = rm_conn_send(NULL, conn, hs.data + sent, hs.len - sent);
            ok = w >= 0;
            sent += w > 0 ? (size_t)w : 0;
            continue;
        }
        char buf[4096], err[160];
        ssize_t k;
        while ((k = rm_conn_recv(NULL, conn, buf, sizeof buf)) > 0) {
            if (rm_reader_feed(conn->reader, buf, (size_t)k, err, sizeof err) != 0)
                k = -1;
            if (k < 0 || (size_t)k < sizeof buf)
                break;
        }
        if (k < 0) {
            ok = false;
            continue;
        }
        rm_reply *rep;
        while (ok && got < n && rm_reader_next(conn->reader, &rep, err, sizeof err) == 1) {
            if (rm_conn_check_handshake(NULL, conn, got, n, false, &rep) != 0)
                ok = false;
            rm_reply_free(rep);
            got++;
        }
    }
    rm_buf_free(&hs);
    if (!ok || conn->connecting || sent < hs.len || got < n) {
        rm_conn_close(conn);
        return NULL;
    }
    return conn;
}

static void append2(rm_buf *b, const char *verb, const char *channel)
{
    const char *argv[2] = {verb, channel};
    rm_format_command(b, 2, argv, NULL);
}

/* The shard connection of deployment i to node, added if new; SIZE_MAX: no memory. */
static size_t shard_of(rm_subscriber *sub, size_t i, rm_server *node)
{
    for (size_t k = 0; k < sub->n_shards; k++)
        if (sub->shards[k].dep == i && sub->shards[k].node == node)
            return k;
    if (sub->n_shards == sub->cap_shards) {
        size_t cap = sub->cap_shards ? sub->cap_shards * 2 : 4;
        rm_shard_conn *s = realloc(sub->shards, cap * sizeof *s);
        if (!s)
            return SIZE_MAX;
        sub->shards = s;
        sub->cap_shards = cap;
    }
    sub->shards[sub->n_shards] = (rm_shard_conn){i, node, NULL, {0}, 0, 0};
    return sub->n_shards++;
}

/* Channel ch of sharded deployment i: subscribed on its slot's owner, or that node's connection is wanted. */
static void plan_channel(redmutex_client *c, rm_subscriber *sub, rm_channel *ch, size_t i, int64_t now,
                         size_t *connect_k, int64_t *next_ns) RM_REQUIRES(c->mu)
{
    rm_server *node = rm_deploy_route_locked(c, i, rm_keyslot(ch->name, strlen(ch->name)));
    size_t k = node ? shard_of(sub, i, node) : SIZE_MAX;
    if (k == SIZE_MAX) {
        sub->refresh[i] = true; /* no master for the slot in the map: ask the cluster */
        return;
    }
    rm_shard_conn *sc = &sub->shards[k];
    if (sc->conn) {
        append2(&sc->out, "SSUBSCRIBE", ch->name);
        ch->at[i] = (int)k;
        ch->sent[i] = true;
        ch->confirmed[i] = false;
    } else if (now >= sc->retry_at && *connect_k == SIZE_MAX) {
        *connect_k = k;
    } else if (sc->retry_at < *next_ns) {
        *next_ns = sc->retry_at;
    }
}

size_t rm_shard_plan(redmutex_client *c, rm_subscriber *sub, bool any_wanted, int64_t *next_ns)
{
    size_t connect_k = SIZE_MAX;
    int64_t now = rm_now_ns();
    for (size_t i = 0; i < c->n; i++) {
        if (!rm_deploy_sharded_locked(c, i))
            continue;
        for (rm_channel *ch = sub->channels; ch; ch = ch->next)
            if (ch->at[i] < 0 && any_wanted)
                plan_channel(c, sub, ch, i, now, &connect_k, next_ns);
    }
    return connect_k;
}

void rm_shard_forget(redmutex_client *c, rm_subscriber *sub, const rm_channel *ch)
{
    for (size_t i = 0; i < c->n; i++)
        if (ch->at[i] >= 0 && sub->shards[ch->at[i]].conn)
            append2(&sub->shards[ch->at[i]].out, "SUNSUBSCRIBE", ch->name);
}

/* Shard k's connection is gone (or never came): its channels go elsewhere or wait for it. */
static void shard_lost(rm_subscriber *sub, size_t k)
{
    rm_shard_conn *sc = &sub->shards[k];
    size_t i = sc->dep;
    for (rm_channel *ch = sub->channels; ch; ch = ch->next) {
        if (ch->at[i] != (int)k)
            continue;
        ch->at[i] = -1;
        ch->sent[i] = ch->confirmed[i] = false;
        ch->skip[i] = 0;
        rm_channel_wake_all(ch); /* a release may have been published while we were not listening */
    }
    sub->refresh[i] = true; /* a node that went away may have been replaced */
    int64_t b = sc->backoff_ms;
    sc->backoff_ms = b ? (b * 2 > 2000 ? 2000 : b * 2) : 50;
    sc->retry_at = rm_now_ns() + sc->backoff_ms * RM_NS_PER_MS;
}

void rm_shard_connected(redmutex_client *c, rm_subscriber *sub, size_t k, rm_conn *conn)
{
    (void)c;
    rm_shard_conn *sc = &sub->shards[k];
    if (!conn) {
        shard_lost(sub, k);
        return;
    }
    sc->conn = conn;
    sc->backoff_ms = 0;
    sc->out.len = 0;
}

size_t rm_shard_poll_set(redmutex_client *c, rm_subscriber *sub, struct pollfd *pfds, size_t *map, size_t np)
{
    for (size_t k = 0; k < sub->n_shards; k++) {
        rm_shard_conn *sc = &sub->shards[k];
        if (!sc->conn)
            continue;
        while (sc->out.len > 0) {
            ssize_t w = rm_conn_send(NULL, sc->conn, sc->out.data, sc->out.len);
            if (w < 0)
                shutdown(sc->conn->fd, SHUT_RDWR); /* poll() reports it and the read drops it */
            if (w <= 0)
                break;
            rm_buf_consume(&sc->out, (size_t)w);
        }
        pfds[np] = (struct pollfd){sc->conn->fd, rm_conn_events(sc->conn, sc->out.len > 0), 0};
        map[np++] = c->n + k;
    }
    return np;
}

/* An error reply on a shard connection: a MOVED for an SSUBSCRIBE whose slot moved (the map is corrected
   and the channels there are planned again), anything else breaks it. */
static bool shard_error(redmutex_client *c, rm_subscriber *sub, size_t k, const rm_reply *r) RM_REQUIRES(c->mu)
{
    rm_shard_conn *sc = &sub->shards[k];
    char host[256];
    int slot, port;
    if (rm_topo_read_redirect(r->str, &slot, host, &port) != 1)
        return false;
    rm_deploy_moved_locked(c, sc->dep, slot, host[0] ? host : sc->node->ep.host, port);
    for (rm_channel *ch = sub->channels; ch; ch = ch->next)
        if (ch->at[sc->dep] == (int)k && !ch->confirmed[sc->dep]) {
            ch->at[sc->dep] = -1;
            ch->sent[sc->dep] = false;
        }
    return true;
}

void rm_shard_read(redmutex_client *c, rm_subscriber *sub, size_t k)
{
    rm_shard_conn *sc = &sub->shards[k];
    bool ok = rm_subscriber_fill(sc->conn);
    rm_reply *rep;
    char err[160];
    int more;
    while (ok && (more = rm_reader_next(sc->conn->reader, &rep, err, sizeof err)) != 0) {
        if (more < 0)
            ok = false;
        else if (rep->type == RM_REPLY_ERROR)
            ok = shard_error(c, sub, k, rep);
        else
            rm_subscriber_push(sub, sc->dep, rep);
        if (more > 0)
            rm_reply_free(rep);
    }
    if (ok)
        return;
    rm_conn_close(sc->conn);
    sc->conn = NULL;
    sc->out.len = 0;
    shard_lost(sub, k);
}

void rm_shard_free(rm_subscriber *sub)
{
    for (size_t k = 0; k < sub->n_shards; k++) {
        rm_conn_close(sub->shards[k].conn);
        rm_buf_free(&sub->shards[k].out);
    }
    free(sub->shards);
    sub->shards = NULL;
    sub->n_shards = sub->cap_shards = 0;
}
