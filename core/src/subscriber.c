/*
 * The subscriber: one thread per client keeps one pub/sub connection per server and subscribes
 * to the release channel of every lock somebody in this process waits for. A release message
 * wakes one waiter of that channel (the oldest not yet woken), so a release costs one retry per
 * process rather than one per waiting thread.
 *
 * The thread owns the connections (it connects, subscribes, closes); a waiter that leads
 * (waiter.c) reads them meanwhile through rm_subscriber_read. All reading and writing on them
 * happens under the client mutex. An unused channel stays subscribed for a while, so
 * back-to-back waits do not churn.
 *
 * Layering: above conn; below the waiters (waiter.c), whose queues on each channel it keeps
 * and wakes.
 */
#define _GNU_SOURCE
#include "client.h"
#include "conn.h"
#include "deploy.h"
#include "internal.h"
#include "kind.h" /* what a message means: rm_message_wakes */
#include "pool.h"
#include "resp.h"
#include "sentinel.h"
#include "subscriber.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

/* An unused channel stays subscribed this long, so back-to-back waits do not churn. */
#define LINGER_NS (2000 * RM_NS_PER_MS)

/* Tells w to look at its state again. Caller holds c->mu. */
void rm_waiter_signal(rm_waiter *w)
{
    if (w->notify)
        w->notify(w->notify_ud);
    else
        rm_efd_signal(w->efd);
}

static void wake_waiter(rm_waiter *w)
{
    w->notified = true;
    rm_waiter_signal(w);
}

/* Wakes the oldest waiter of ch that has not been woken yet. */
void rm_channel_wake_one(rm_channel *ch)
{
    for (rm_waiter *w = ch->head; w; w = w->next)
        if (!w->notified && w->handoff == 0) {
            wake_waiter(w);
            return;
        }
}

void rm_channel_wake_all(rm_channel *ch)
{
    for (rm_waiter *w = ch->head; w; w = w->next)
        wake_waiter(w);
}

static void wake_all(rm_subscriber *sub)
{
    for (rm_channel *ch = sub->channels; ch; ch = ch->next)
        rm_channel_wake_all(ch);
}

bool rm_channel_up(redmutex_client *c, const rm_subscriber *sub, const rm_channel *ch, size_t i)
{
    return !rm_deploy_sharded_locked(c, i) ? sub->up[i] : ch->at[i] >= 0 && sub->shards[ch->at[i]].conn != NULL;
}

static void free_channel(rm_channel *ch)
{
    free(ch->name);
    free(ch->sent);
    free(ch->confirmed);
    free(ch->skip);
    free(ch->at);
    free(ch);
}

static void free_subscriber(redmutex_client *c, rm_subscriber *sub)
{
    for (size_t i = 0; i < c->n; i++) {
        if (sub->conns)
            rm_conn_close(sub->conns[i]);
        if (sub->out)
            rm_buf_free(&sub->out[i]);
    }
    while (sub->channels) {
        rm_channel *ch = sub->channels;
        sub->channels = ch->next;
        free_channel(ch);
    }
    rm_shard_free(sub);
    if (sub->wake_fd >= 0)
        close(sub->wake_fd);
    free(sub->refresh);
    free(sub->conns);
    free(sub->up);
    free(sub->out);
    free(sub->retry_at);
    free(sub->backoff_ms);
    free(sub->dead);
    free(sub->switches_seen);
    free(sub);
}

/* ---- the thread -------------------------------------------------------- */

static void append_cmd(rm_buf *b, const char *verb, const char *channel)
{
    const char *argv[2] = {verb, channel};
    rm_format_command(b, 2, argv, NULL);
}

rm_channel *rm_channel_find(rm_subscriber *sub, const char *name, size_t len)
{
    for (rm_channel *ch = sub->channels; ch; ch = ch->next)
        if (strlen(ch->name) == len && memcmp(ch->name, name, len) == 0)
            return ch;
    return NULL;
}

/* Sharded pub/sub names its pushes with an "s" in front; they mean the same. */
static const char *push_kind(const char *kind)
{
    return kind[0] == 's' && (strcmp(kind, "smessage") == 0 || strcmp(kind, "ssubscribe") == 0 ||
                              strcmp(kind, "sunsubscribe") == 0)
               ? kind + 1
               : kind;
}

/* A server-sent sunsubscribe: the channel's slot moved away (or its node was
   demoted). It is subscribed again on the slot's owner from a fresh map, and
   its waiters look at the lock now. */
static void moved_away(rm_subscriber *sub, rm_channel *ch, size_t i)
{
    ch->at[i] = -1;
    ch->sent[i] = false;
    ch->skip[i] = 0;
    sub->refresh[i] = true;
    rm_channel_wake_all(ch);
    rm_efd_signal(sub->wake_fd);
}

void rm_subscriber_push(rm_subscriber *sub, size_t i, rm_reply *r)
{
    if (r->type != RM_REPLY_ARRAY || r->elements < 3 || r->element[0]->type != RM_REPLY_STRING ||
        r->element[1]->type != RM_REPLY_STRING)
        return;
    const char *kind = push_kind(r->element[0]->str);
    bool sharded = kind != r->element[0]->str;
    rm_channel *ch = rm_channel_find(sub, r->element[1]->str, r->element[1]->len);
    if (!ch)
        return;
    if (strcmp(kind, "message") == 0) {
        const rm_reply *m = r->element[2];
        /* What the message means is the kind's (a release, a count of
           permits, a latch at zero, the end of a write lock). */
        size_t wakes = m->type == RM_REPLY_STRING ? rm_message_wakes(ch->name, m->str) : 1;
        if (ch->skip[i] > 0) {
            ch->skip[i]--; /* this release already woke a waiter directly */
        } else if (wakes == SIZE_MAX) {
            for (rm_waiter *w = ch->head; w; w = w->next)
                wake_waiter(w);
        } else {
            /* A fair lock's hand-off names one waiter, the only one on its
               channel: keep the message for it, even if already woken. */
            if (ch->head && m->type == RM_REPLY_STRING && m->len < sizeof ch->head->message &&
                strncmp(m->str, "g ", 2) == 0)
                memcpy(ch->head->message, m->str, m->len + 1);
            size_t woken = 0; /* the oldest not woken yet, as rm_channel_wake_one */
            for (rm_waiter *w = ch->head; w && woken < wakes; w = w->next)
                if (!w->notified && w->handoff == 0) {
                    wake_waiter(w);
                    woken++;
                }
        }
    } else if (strcmp(kind, "subscribe") == 0) {
        ch->confirmed[i] = true;
        /* Waiters waiting for the subscription check again. After a lost
           connection (a new master) every waiter looks at the lock: a
           release published while nobody listened must not leave it asleep. */
        for (rm_waiter *w = ch->head; w; w = w->next)
            rm_waiter_signal(w);
        if (ch->rejoin)
            rm_channel_wake_all(ch);
        ch->rejoin = false;
    } else if (strcmp(kind, "unsubscribe") == 0) {
        ch->confirmed[i] = false;
        if (sharded) /* the channel still exists: we did not ask */
            moved_away(sub, ch, i);
    }
}

bool rm_subscriber_fill(rm_conn *conn)
{
    char buf[4096], err[160];
    for (;;) {
        ssize_t got = rm_conn_recv(NULL, conn, buf, sizeof buf);
        if (got < 0 || (got > 0 && rm_reader_feed(conn->reader, buf, (size_t)got, err, sizeof err) != 0))
            return false;
        if (got == 0 || (size_t)got < sizeof buf)
            return true;
    }
}

/* Server i's pub/sub connection is gone. Caller holds c->mu. */
static void lose_server(redmutex_client *c, rm_subscriber *sub, size_t i) RM_REQUIRES(c->mu)
{
    sub->up[i] = false;
    for (rm_channel *ch = sub->channels; ch; ch = ch->next) {
        ch->rejoin |= ch->confirmed[i];
        ch->sent[i] = ch->confirmed[i] = false;
        ch->skip[i] = 0;
    }
    /* A release may have been published while we were not listening. */
    wake_all(sub);
    int64_t b = sub->backoff_ms[i];
    sub->backoff_ms[i] = b ? (b * 2 > 2000 ? 2000 : b * 2) : 50;
    sub->retry_at[i] = rm_now_ns() + sub->backoff_ms[i] * RM_NS_PER_MS;
    (void)c;
}

/*
 * Reads what server i sent and acts on it. False when the connection broke
 * (or sent what no subscriber connection may). Caller holds c->mu.
 */
bool rm_subscriber_read(rm_subscriber *sub, size_t i)
{
    rm_conn *conn = sub->conns[i];
    bool broken = !rm_subscriber_fill(conn);
    char err[160];
    rm_reply *rep;
    int more;
    while (!broken && (more = rm_reader_next(conn->reader, &rep, err, sizeof err)) != 0) {
        if (more < 0 || rep->type == RM_REPLY_ERROR) {
            /* NOAUTH, NOPERM on a channel, a hostile reply: start over later. */
            if (more > 0)
                rm_reply_free(rep);
            broken = true;
            break;
        }
        rm_subscriber_push(sub, i, rep);
        rm_reply_free(rep);
    }
    return !broken;
}

/* Closes server i's connection (the thread only). Caller holds c->mu. */
static void drop_server(redmutex_client *c, rm_subscriber *sub, size_t i) RM_REQUIRES(c->mu)
{
    rm_conn_close(sub->conns[i]);
    sub->conns[i] = NULL;
    sub->out[i].len = 0;
    sub->dead[i] = false;
    lose_server(c, sub, i);
}

/*
 * Drops channels nobody has used for a while and connections the leader
 * found broken, and queues the SUBSCRIBEs still owed. Returns a server to
 * connect to now (SIZE_MAX: none); *next_ns is the next timer. Caller holds c->mu.
 */
static size_t plan(redmutex_client *c, rm_subscriber *sub, int64_t *next_ns) RM_REQUIRES(c->mu)
{
    int64_t now = rm_now_ns();
    bool any_wanted = false;
    for (size_t i = 0; i < c->n; i++)
        if (sub->dead[i] && sub->conns[i])
            drop_server(c, sub, i);
    for (rm_channel **p = &sub->channels; *p;) {
        rm_channel *ch = *p;
        if (ch->refs == 0 && now - ch->idle_since >= LINGER_NS) {
            for (size_t i = 0; i < c->n; i++)
                if (ch->sent[i] && sub->conns[i] && ch->at[i] < 0)
                    append_cmd(&sub->out[i], "UNSUBSCRIBE", ch->name);
            rm_shard_forget(c, sub, ch);
            *p = ch->next;
            free_channel(ch);
            continue;
        }
        if (ch->refs == 0 && ch->idle_since + LINGER_NS < *next_ns)
            *next_ns = ch->idle_since + LINGER_NS;
        any_wanted |= ch->refs > 0;
        p = &ch->next;
    }
    size_t connect_i = SIZE_MAX;
    for (size_t i = 0; i < c->n; i++) {
        if (rm_deploy_sharded_locked(c, i))
            continue; /* its channels live on the nodes of their slots (shard.c) */
        if (!sub->conns[i]) {
            if (any_wanted && now >= sub->retry_at[i] && connect_i == SIZE_MAX)
                connect_i = i;
            else if (any_wanted && sub->retry_at[i] < *next_ns)
                *next_ns = sub->retry_at[i];
            continue;
        }
        for (rm_channel *ch = sub->channels; ch; ch = ch->next)
            if (!ch->sent[i]) {
                append_cmd(&sub->out[i], "SUBSCRIBE", ch->name);
                ch->sent[i] = true;
            }
    }
    size_t shard = rm_shard_plan(c, sub, any_wanted, next_ns);
    return connect_i == SIZE_MAX && shard != SIZE_MAX ? c->n + shard : connect_i;
}

/*
 * Sends what is queued and fills the thread's poll set: its wake-up fd, and
 * each connection, unless a leader reads them (then only those with output
 * still to send). Returns the number of entries. Caller holds c->mu.
 */
static size_t poll_set(redmutex_client *c, rm_subscriber *sub, struct pollfd *pfds, size_t *map) RM_REQUIRES(c->mu)
{
    size_t np = 0;
    pfds[np] = (struct pollfd){sub->wake_fd, POLLIN, 0};
    map[np++] = SIZE_MAX;
    for (size_t i = 0; i < c->n; i++) {
        rm_conn *conn = sub->conns[i];
        if (!conn || sub->dead[i])
            continue;
        while (sub->out[i].len > 0) {
            ssize_t w = rm_conn_send(NULL, conn, sub->out[i].data, sub->out[i].len);
            if (w < 0)
                shutdown(conn->fd, SHUT_RDWR); /* poll() reports it and the read drops it */
            if (w <= 0)
                break;
            rm_buf_consume(&sub->out[i], (size_t)w);
        }
        if (sub->leader && sub->out[i].len == 0)
            continue;
        pfds[np] = (struct pollfd){conn->fd, rm_conn_events(conn, sub->out[i].len > 0), 0};
        map[np++] = i;
    }
    return rm_shard_poll_set(c, sub, pfds, map, np); /* always read by the thread */
}

/* A new connection to server i (or none: NULL). Caller holds c->mu. */
static void connected(redmutex_client *c, rm_subscriber *sub, size_t i, rm_conn *conn) RM_REQUIRES(c->mu)
{
    if (!conn) {
        lose_server(c, sub, i);
        return;
    }
    sub->conns[i] = conn;
    sub->up[i] = true;
    sub->dead[i] = false;
    sub->backoff_ms[i] = 0;
    sub->out[i].len = 0;
    for (rm_channel *ch = sub->channels; ch; ch = ch->next) {
        ch->sent[i] = ch->confirmed[i] = false;
        ch->skip[i] = 0;
    }
    if (sub->leader)
        rm_waiter_signal(sub->leader); /* it reads this connection too from now on */
}

/* Room in the poll set for every connection, shard connections included. False: no memory. */
static bool poll_room(redmutex_client *c, rm_subscriber *sub, struct pollfd **pfds, size_t **map, size_t *cap)
{
    size_t need = c->n + 1 + sub->n_shards;
    if (need <= *cap)
        return true;
    struct pollfd *p = realloc(*pfds, need * sizeof *p);
    if (p)
        *pfds = p;
    size_t *m = p ? realloc(*map, need * sizeof *m) : NULL;
    if (m)
        *map = m;
    if (!p || !m)
        return false;
    *cap = need;
    return true;
}

/* Reloads the slot maps a sunsubscribe, a MOVED or a lost node asked for, without c->mu. Caller holds c->mu. */
static void refresh_maps(redmutex_client *c, rm_subscriber *sub) RM_REQUIRES(c->mu)
{
    for (size_t i = 0; i < c->n; i++) {
        if (!sub->refresh[i])
            continue;
        sub->refresh[i] = false;
        rm_client_unlock(c);
        rm_deploy_refresh(NULL, c, i, rm_deadline_after_ms(c->opts.command_timeout_ms));
        rm_client_lock(c);
    }
}

/* A master moved (the pool counted it, woke us): a connection made before is dropped (a release
   may have been missed, even if the master moved back since), a missing one made at once. */
static void follow_moves(redmutex_client *c, rm_subscriber *sub) RM_REQUIRES(c->mu)
{
    if (sub->moves_seen == c->pool.moves)
        return;
    sub->moves_seen = c->pool.moves;
    for (size_t i = 0; i < c->n; i++) {
        uint64_t switches = rm_sentinel_switches(c, i);
        if (switches == sub->switches_seen[i] || rm_deploy_sharded_locked(c, i))
            continue;
        sub->switches_seen[i] = switches;
        sub->dead[i] = sub->conns[i] != NULL; /* dropped below (plan) */
        sub->backoff_ms[i] = sub->retry_at[i] = 0;
    }
}

static void *subscriber_main(void *arg)
{
    redmutex_client *c = arg;
    rm_client_lock(c);
    rm_subscriber *sub = c->sub;
    size_t cap = 0;
    struct pollfd *pfds = NULL;
    size_t *map = NULL;
    while (!sub->stop && poll_room(c, sub, &pfds, &map, &cap)) {
        follow_moves(c, sub);
        refresh_maps(c, sub);
        int64_t next_ns = INT64_MAX;
        size_t connect_i = plan(c, sub, &next_ns);
        if (connect_i != SIZE_MAX) {
            /* A Sentinel deployment's is its master's: none yet, and it is retried later. */
            rm_server *srv =
                connect_i < c->n ? rm_deploy_home_locked(c, connect_i) : sub->shards[connect_i - c->n].node;
            rm_client_unlock(c);
            rm_conn *conn = srv ? rm_pubsub_connect(c, sub, srv) : NULL;
            rm_client_lock(c);
            if (connect_i < c->n)
                connected(c, sub, connect_i, conn);
            else
                rm_shard_connected(c, sub, connect_i - c->n, conn);
            continue;
        }
        size_t np = poll_set(c, sub, pfds, map);
        sub->polling_conns = sub->leader == NULL;
        rm_client_unlock(c);
        int64_t ms = next_ns == INT64_MAX ? 60000 : rm_ms_until(next_ns);
        int r = poll(pfds, np, ms > 60000 ? 60000 : (int)ms);
        rm_client_lock(c);
        sub->polling_conns = false;
        if (r <= 0)
            continue;
        if (pfds[0].revents)
            rm_efd_drain(sub->wake_fd);
        for (size_t k = 1; k < np; k++) {
            size_t i = map[k];
            if (i >= c->n && pfds[k].revents)
                rm_shard_read(c, sub, i - c->n);
            else if (i < c->n && pfds[k].revents && sub->conns[i] && !sub->dead[i] && !rm_subscriber_read(sub, i))
                drop_server(c, sub, i);
        }
    }
    free(pfds);
    free(map);
    bool detached = sub->detached;
    if (detached)
        c->sub = NULL;
    rm_client_unlock(c);
    if (detached)
        free_subscriber(c, sub);
    rm_client_unref(c);
    return NULL;
}

/* Starts the subscriber if needed. Caller holds c->mu. */
static rm_subscriber *ensure_subscriber(redmutex_client *c) RM_REQUIRES(c->mu)
{
    if (c->sub)
        return c->sub;
    rm_subscriber *sub = calloc(1, sizeof *sub);
    if (!sub)
        return NULL;
    sub->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    sub->conns = calloc(c->n, sizeof *sub->conns);
    sub->up = calloc(c->n, sizeof *sub->up);
    sub->out = calloc(c->n, sizeof *sub->out);
    sub->retry_at = calloc(c->n, sizeof *sub->retry_at);
    sub->backoff_ms = calloc(c->n, sizeof *sub->backoff_ms);
    sub->dead = calloc(c->n, sizeof *sub->dead);
    sub->switches_seen = calloc(c->n, sizeof *sub->switches_seen);
    sub->refresh = calloc(c->n, sizeof *sub->refresh);
    c->sub = sub;
    if (sub->wake_fd < 0 || !sub->conns || !sub->up || !sub->out || !sub->retry_at || !sub->backoff_ms || !sub->dead ||
        !sub->switches_seen || !sub->refresh || rm_thread_start(&sub->thread, NULL, subscriber_main, c) != 0) {
        c->sub = NULL;
        free_subscriber(c, sub);
        return NULL;
    }
    c->life.refs++; /* the thread's reference, dropped when it exits */
    sub->moves_seen = c->pool.moves;
    for (size_t i = 0; i < c->n; i++)
        sub->switches_seen[i] = rm_sentinel_switches(c, i);
    rm_pool_listen_locked(c, sub->wake_fd); /* a failover wakes the thread (follow_moves) */
    return sub;
}

/* Puts w at the end of the channel's queue, making the channel (and the
   subscriber) if needed. Caller holds c->mu. False when the client is closed
   or memory ran out: w then waits without notifications (timers only). */
bool rm_channel_join(redmutex_client *c, const char *channel, rm_waiter *w)
{
    rm_subscriber *sub = c->life.closed ? NULL : ensure_subscriber(c);
    if (!sub)
        return false;
    size_t len = strlen(channel);
    rm_channel *ch = rm_channel_find(sub, channel, len);
    if (!ch) {
        ch = calloc(1, sizeof *ch);
        if (!ch)
            return false;
        ch->name = strdup(channel);
        ch->sent = calloc(c->n, sizeof *ch->sent);
        ch->confirmed = calloc(c->n, sizeof *ch->confirmed);
        ch->skip = calloc(c->n, sizeof *ch->skip);
        ch->at = malloc(c->n * sizeof *ch->at);
        if (!ch->name || !ch->sent || !ch->confirmed || !ch->skip || !ch->at) {
            free_channel(ch);
            return false;
        }
        for (size_t i = 0; i < c->n; i++)
            ch->at[i] = -1;
        ch->next = sub->channels;
        sub->channels = ch;
    }
    ch->refs++;
    w->ch = ch;
    w->prev = ch->tail;
    if (ch->tail)
        ch->tail->next = w;
    else
        ch->head = w;
    ch->tail = w;
    /* The subscriber thread has work if the channel is not subscribed on
       every connection, a connection is missing, or a pollable wait needs
       a reader while nobody reads. (A blocking waiter takes the lead.) */
    bool work = w->efd < 0 && !sub->polling_conns && !sub->leader;
    for (size_t i = 0; i < c->n; i++)
        work |= !sub->up[i] || !ch->sent[i];
    if (work)
        rm_efd_signal(sub->wake_fd);
    return true;
}

/* Cuts every waiter loose from its channel and wakes it (shutdown). Caller holds c->mu. */
static void detach_waiters(rm_subscriber *sub, bool wake)
{
    sub->leader = NULL;
    for (rm_channel *ch = sub->channels; ch; ch = ch->next) {
        for (rm_waiter *w = ch->head, *next; w; w = next) {
            next = w->next;
            w->ch = NULL;
            w->next = w->prev = NULL;
            if (wake && w->handoff == 0)
                wake_waiter(w);
        }
        ch->head = ch->tail = NULL;
        ch->refs = 0;
    }
}

void rm_subscriber_stop(redmutex_client *c, int64_t deadline_ns)
{
    rm_client_lock(c);
    rm_subscriber *sub = c->sub;
    if (!sub) {
        rm_client_unlock(c);
        return;
    }
    /* Threads still waiting (against the rules, but it must not corrupt
       memory) find their channel gone and the client closed. */
    detach_waiters(sub, true);
    sub->stop = true;
    rm_pool_listen_locked(c, -1); /* its fd is closed with it */
    rm_efd_signal(sub->wake_fd);
    rm_client_unlock(c);
    if (rm_join_until(sub->thread, deadline_ns)) {
        rm_client_lock(c);
        c->sub = NULL;
        rm_client_unlock(c);
        free_subscriber(c, sub);
    } else {
        rm_client_lock(c);
        sub->detached = true;
        pthread_detach(sub->thread);
        rm_client_unlock(c);
    }
}

void rm_subscriber_forget(redmutex_client *c)
{
    rm_subscriber *sub = c->sub;
    if (!sub)
        return;
    /* The thread did not survive fork: drop its reference and its state.
       Waiters of other parent threads do not exist here either. */
    c->sub = NULL;
    rm_pool_listen_locked(c, -1);
    c->life.refs--;
    detach_waiters(sub, false); /* their eventfds are shared with the parent: do not touch them */
    free_subscriber(c, sub);
}
