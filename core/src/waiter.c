/*
 * Waiting by notification. One subscriber thread per client keeps one
 * pub/sub connection per server and subscribes to the release channel of
 * every lock somebody in this process waits for. A release message wakes one
 * waiter of that channel (the oldest not yet woken), so a release costs one
 * retry per process rather than one per waiting thread. Waiters sleep in
 * poll() on their own eventfd, which lets a signal (Ctrl-C) interrupt them.
 *
 * A thread blocked in rm_waiter_wait reads the pub/sub connections itself
 * while nobody else does (leader/followers): the first such waiter becomes
 * the leader, and the subscriber thread stops reading until the leader's
 * wait ends. A release message for the leader's own lock then needs no
 * hand-off between threads: on a busy machine every thread wake-up may wait
 * for a CPU. Messages for other waiters are passed on as before. The
 * subscriber thread still owns the connections (it connects, subscribes,
 * closes); all reading and writing on them happens under the client mutex.
 *
 * Notification is an optimisation, never a requirement: waiters also retry
 * when the holder's lease ends and after a capped backoff, so a missed
 * message, a lost pub/sub connection or a holder that never publishes costs
 * at most the backoff cap.
 */
#define _GNU_SOURCE
#include "client.h"
#include "conn.h"
#include "internal.h"
#include "interrupt.h"
#include "resp.h"
#include "waiter.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

/* An unused channel stays subscribed this long, so back-to-back waits do not churn. */
#define LINGER_NS (2000 * RM_NS_PER_MS)
/* A client with more servers than this leaves the reading to the subscriber thread. */
#define LEAD_MAX_SERVERS 16

typedef struct rm_channel {
    struct rm_channel *next;
    char *name;
    int refs;
    int64_t idle_since;
    bool *sent;      /* per server: SUBSCRIBE sent (and no UNSUBSCRIBE since) */
    bool *confirmed; /* per server: the server confirmed the subscription */
    int *skip;       /* per server: release messages already acted on by a local hand-off */
    rm_waiter *head, *tail;
} rm_channel;

struct rm_waiter {
    rm_waiter *next, *prev;
    rm_channel *ch;
    int efd;           /* -1 for a pollable wait, which is told through notify() instead */
    void (*notify)(void *ud);
    void *notify_ud;
    bool notified;
    bool sleeping;     /* in poll(): not attempting on its own right now */
    rm_wait *wait;     /* the acquire's wait: interrupts end the sleeps */
    rm_claim claim;    /* claim.lock == NULL: no hand-off offered */
    int handoff;       /* 0 none, -1 in flight, else the result for rm_waiter_wait */
    char message[64];  /* the last message that named this waiter's lock (kind.h: fair hand-off), or "" */
};

typedef struct rm_subscriber {
    pthread_t thread;
    bool stop;
    bool detached; /* shutdown gave up joining: the thread frees this struct */
    int wake_fd;
    rm_channel *channels;
    /* Owned by the thread; `up` mirrors conns[i] != NULL under the client mutex. */
    rm_conn **conns;
    bool *up;
    rm_buf *out;
    int64_t *retry_at;
    int64_t *backoff_ms;
    bool *dead;         /* per server: the leader found the connection broken (the thread closes it) */
    rm_waiter *leader;  /* the waiter reading the connections, or NULL (the thread reads) */
    bool polling_conns; /* the thread is in poll() on the connections */
} rm_subscriber;

static void signal_fd(int fd)
{
    uint64_t one = 1;
    ssize_t r = write(fd, &one, sizeof one);
    (void)r; /* a full counter already means "wake up" */
}

static void drain_fd(int fd)
{
    uint64_t v;
    ssize_t r = read(fd, &v, sizeof v);
    (void)r;
}

/* Tells w to look at its state again. Caller holds c->mu. */
static void signal_waiter(rm_waiter *w)
{
    if (w->notify)
        w->notify(w->notify_ud);
    else
        signal_fd(w->efd);
}

static void wake_waiter(rm_waiter *w)
{
    w->notified = true;
    signal_waiter(w);
}

/* Wakes the oldest waiter of ch that has not been woken yet. */
static void wake_one(rm_channel *ch)
{
    for (rm_waiter *w = ch->head; w; w = w->next)
        if (!w->notified && w->handoff == 0) {
            wake_waiter(w);
            return;
        }
}

static void wake_all(rm_subscriber *sub)
{
    for (rm_channel *ch = sub->channels; ch; ch = ch->next)
        for (rm_waiter *w = ch->head; w; w = w->next)
            wake_waiter(w);
}

static void free_channel(rm_channel *ch)
{
    free(ch->name);
    free(ch->sent);
    free(ch->confirmed);
    free(ch->skip);
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
    if (sub->wake_fd >= 0)
        close(sub->wake_fd);
    free(sub->conns);
    free(sub->up);
    free(sub->out);
    free(sub->retry_at);
    free(sub->backoff_ms);
    free(sub->dead);
    free(sub);
}

/* ---- the thread -------------------------------------------------------- */

/* Connects to server i and runs the handshake, giving up at the deadline or on a wake-up. */
static rm_conn *connect_pubsub(redmutex_client *c, rm_subscriber *sub, size_t i)
{
    rm_conn *conn = NULL;
    if (rm_conn_open(NULL, &conn, &c->servers[i]) != 0)
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
                drain_fd(sub->wake_fd);
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
            if (rm_conn_check_handshake(NULL, conn, got, n, false, rep) != 0)
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

static void append_cmd(rm_buf *b, const char *verb, const char *channel)
{
    const char *argv[2] = {verb, channel};
    rm_format_command(b, 2, argv, NULL);
}

/* Caller holds c->mu. */
static rm_channel *find_channel(rm_subscriber *sub, const char *name, size_t len)
{
    for (rm_channel *ch = sub->channels; ch; ch = ch->next)
        if (strlen(ch->name) == len && memcmp(ch->name, name, len) == 0)
            return ch;
    return NULL;
}

/* A pub/sub push or reply from server i. Caller holds c->mu. */
static void handle_push(rm_subscriber *sub, size_t i, rm_reply *r)
{
    if (r->type != RM_REPLY_ARRAY || r->elements < 3 || r->element[0]->type != RM_REPLY_STRING ||
        r->element[1]->type != RM_REPLY_STRING)
        return;
    const char *kind = r->element[0]->str;
    rm_channel *ch = find_channel(sub, r->element[1]->str, r->element[1]->len);
    if (!ch)
        return;
    if (strcmp(kind, "message") == 0) {
        const rm_reply *m = r->element[2];
        if (ch->skip[i] > 0) {
            ch->skip[i]--; /* this release already woke a waiter directly */
        } else if (m->type == RM_REPLY_STRING && strcmp(m->str, "1") == 0) {
            /* Redisson's read-unlock message (a write lock ended): readers may all go on. */
            for (rm_waiter *w = ch->head; w; w = w->next)
                wake_waiter(w);
        } else {
            /* A fair lock's hand-off names one waiter, the only one on its
               channel: keep the message for it, even if already woken. */
            if (ch->head && m->type == RM_REPLY_STRING && m->len < sizeof ch->head->message &&
                strncmp(m->str, "g ", 2) == 0)
                memcpy(ch->head->message, m->str, m->len + 1);
            wake_one(ch);
        }
    } else if (strcmp(kind, "subscribe") == 0) {
        ch->confirmed[i] = true;
        /* Waiters waiting for the subscription check again. */
        for (rm_waiter *w = ch->head; w; w = w->next)
            signal_waiter(w);
    } else if (strcmp(kind, "unsubscribe") == 0) {
        ch->confirmed[i] = false;
    }
}

/* Server i's pub/sub connection is gone. Caller holds c->mu. */
static void lose_server(redmutex_client *c, rm_subscriber *sub, size_t i)
{
    sub->up[i] = false;
    for (rm_channel *ch = sub->channels; ch; ch = ch->next) {
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
static bool read_server(rm_subscriber *sub, size_t i)
{
    rm_conn *conn = sub->conns[i];
    bool broken = false;
    char buf[4096], err[160];
    for (;;) {
        ssize_t got = rm_conn_recv(NULL, conn, buf, sizeof buf);
        if (got < 0 || (got > 0 && rm_reader_feed(conn->reader, buf, (size_t)got, err, sizeof err) != 0))
            broken = true;
        if (got <= 0 || broken || (size_t)got < sizeof buf)
            break;
    }
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
        handle_push(sub, i, rep);
        rm_reply_free(rep);
    }
    return !broken;
}

/* Closes server i's connection (the thread only). Caller holds c->mu. */
static void drop_server(redmutex_client *c, rm_subscriber *sub, size_t i)
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
static size_t plan(redmutex_client *c, rm_subscriber *sub, int64_t *next_ns)
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
                if (ch->sent[i] && sub->conns[i])
                    append_cmd(&sub->out[i], "UNSUBSCRIBE", ch->name);
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
    return connect_i;
}

/*
 * Sends what is queued and fills the thread's poll set: its wake-up fd, and
 * each connection, unless a leader reads them (then only those with output
 * still to send). Returns the number of entries. Caller holds c->mu.
 */
static size_t poll_set(redmutex_client *c, rm_subscriber *sub, struct pollfd *pfds, size_t *map)
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
    return np;
}

/* A new connection to server i (or none: NULL). Caller holds c->mu. */
static void connected(redmutex_client *c, rm_subscriber *sub, size_t i, rm_conn *conn)
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
        signal_waiter(sub->leader); /* it reads this connection too from now on */
}

static void *subscriber_main(void *arg)
{
    redmutex_client *c = arg;
    /* The host's signals belong to its own threads. */
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, NULL);

    rm_client_lock(c);
    rm_subscriber *sub = c->sub;
    struct pollfd *pfds = calloc(c->n + 1, sizeof *pfds);
    size_t *map = calloc(c->n + 1, sizeof *map);
    while (!sub->stop && pfds && map) {
        int64_t next_ns = INT64_MAX;
        size_t connect_i = plan(c, sub, &next_ns);
        if (connect_i != SIZE_MAX) {
            rm_client_unlock(c);
            rm_conn *conn = connect_pubsub(c, sub, connect_i);
            rm_client_lock(c);
            connected(c, sub, connect_i, conn);
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
            drain_fd(sub->wake_fd);
        for (size_t k = 1; k < np; k++) {
            size_t i = map[k];
            if (pfds[k].revents && sub->conns[i] && !sub->dead[i] && !read_server(sub, i))
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
static rm_subscriber *ensure_subscriber(redmutex_client *c)
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
    c->sub = sub;
    if (sub->wake_fd < 0 || !sub->conns || !sub->up || !sub->out || !sub->retry_at || !sub->backoff_ms ||
        !sub->dead || pthread_create(&sub->thread, NULL, subscriber_main, c) != 0) {
        c->sub = NULL;
        free_subscriber(c, sub);
        return NULL;
    }
    c->refs++; /* the thread's reference, dropped when it exits */
    return sub;
}

/* ---- waiters --------------------------------------------------------- */

static bool subscribed_enough(const redmutex_client *c, const rm_subscriber *sub, const rm_channel *ch)
{
    bool any = false;
    for (size_t i = 0; i < c->n; i++) {
        if (ch->confirmed[i])
            any = true;
        else if (sub->up[i])
            return false;
    }
    return any;
}

/* Puts w at the end of the channel's queue, making the channel (and the
   subscriber) if needed. Caller holds c->mu. False when the client is closed
   or memory ran out: w then waits without notifications (timers only). */
static bool join_channel(redmutex_client *c, const char *channel, rm_waiter *w)
{
    rm_subscriber *sub = c->closed ? NULL : ensure_subscriber(c);
    if (!sub)
        return false;
    size_t len = strlen(channel);
    rm_channel *ch = find_channel(sub, channel, len);
    if (!ch) {
        ch = calloc(1, sizeof *ch);
        if (!ch)
            return false;
        ch->name = strdup(channel);
        ch->sent = calloc(c->n, sizeof *ch->sent);
        ch->confirmed = calloc(c->n, sizeof *ch->confirmed);
        ch->skip = calloc(c->n, sizeof *ch->skip);
        if (!ch->name || !ch->sent || !ch->confirmed || !ch->skip) {
            free_channel(ch);
            return false;
        }
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
        signal_fd(sub->wake_fd);
    return true;
}

/*
 * Makes w (a blocking waiter) the reader of the subscription connections if
 * nobody else reads them. True when w leads. Caller holds c->mu.
 */
static bool take_lead(redmutex_client *c, rm_waiter *w)
{
    rm_subscriber *sub = c->sub;
    if (!sub || sub->stop || !w->ch || w->efd < 0 || c->n > LEAD_MAX_SERVERS ||
        (sub->leader && sub->leader != w))
        return false;
    if (!sub->leader) {
        sub->leader = w;
        if (sub->polling_conns)
            signal_fd(sub->wake_fd); /* it stops reading: two readers would wake two threads */
    }
    return true;
}

/*
 * If w leads (or may take the lead), fills p with the subscription
 * connections to poll (conns[] the connections, map[] their servers).
 * Returns the number of entries. Caller holds c->mu.
 */
static size_t lead(redmutex_client *c, rm_waiter *w, struct pollfd *p, rm_conn **conns, size_t *map)
{
    if (!take_lead(c, w))
        return 0;
    rm_subscriber *sub = c->sub;
    size_t np = 0;
    for (size_t i = 0; i < c->n; i++) {
        rm_conn *conn = sub->conns[i];
        if (!conn || sub->dead[i])
            continue;
        p[np] = (struct pollfd){conn->fd, rm_conn_events(conn, false), 0};
        conns[np] = conn;
        map[np++] = i;
    }
    return np;
}

/*
 * The leader reads the connections poll() found ready. A broken one is
 * left to the subscriber thread to close. Caller holds c->mu.
 */
static void read_as_leader(redmutex_client *c, rm_waiter *w, const struct pollfd *p, rm_conn *const *conns,
                           const size_t *map, size_t np)
{
    rm_subscriber *sub = c->sub;
    if (!sub || sub->leader != w)
        return;
    for (size_t k = 0; k < np; k++) {
        size_t i = map[k];
        if (!p[k].revents || sub->conns[i] != conns[k] || sub->dead[i] || read_server(sub, i))
            continue;
        sub->dead[i] = true;
        signal_fd(sub->wake_fd);
    }
}

/*
 * One sleep of a blocking waiter, until its eventfd is signalled (1),
 * until_ns (0) or an interrupt (RM_POLL_INTERRUPTED; `wait` may be NULL),
 * reading the subscription connections meanwhile if it leads. Caller holds
 * no mutex.
 */
static int sleep_once(redmutex_client *c, rm_waiter *w, rm_wait *wait, int64_t until_ns)
{
    /* p[0] is w's eventfd, then the connections it reads as the leader, then the interrupt fd's slot. */
    struct pollfd p[LEAD_MAX_SERVERS + 2];
    rm_conn *conns[LEAD_MAX_SERVERS];
    size_t map[LEAD_MAX_SERVERS];
    rm_client_lock(c);
    size_t np = lead(c, w, p + 1, conns, map);
    rm_client_unlock(c);
    p[0] = (struct pollfd){w->efd, POLLIN, 0};
    int r = rm_wait_poll_set(c, wait, p, np + 1, until_ns);
    if (r > 0 && np > 0) {
        rm_client_lock(c);
        read_as_leader(c, w, p + 1, conns, map, np);
        rm_client_unlock(c);
    }
    /* Every signal of the eventfd follows a change of state that the
       caller looks at next, under the mutex. */
    if (r > 0)
        drain_fd(w->efd);
    return r;
}

int rm_waiter_begin(redmutex_client *c, const char *channel, int64_t deadline_ns, rm_wait *wait, rm_waiter **out)
{
    *out = NULL;
    rm_waiter *w = calloc(1, sizeof *w);
    if (!w)
        return REDMUTEX_ENOMEM;
    w->wait = wait;
    w->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (w->efd < 0) {
        free(w);
        return REDMUTEX_ENOMEM;
    }
    rm_client_lock(c);
    if (join_channel(c, channel, w)) {
        rm_subscriber *sub = c->sub;
        rm_channel *ch = w->ch;
        /* Leading from now on, the subscriber thread (which join_channel
           woke) stops reading before the message this wait is for arrives. */
        take_lead(c, w);
        /* Wait (briefly) until the server confirms, so that the retry
           after this cannot miss a release. */
        while (!subscribed_enough(c, sub, ch) && rm_now_ns() < deadline_ns) {
            rm_client_unlock(c);
            int r = sleep_once(c, w, wait, deadline_ns);
            rm_client_lock(c);
            if (r == RM_POLL_INTERRUPTED || w->ch != ch || c->sub != sub)
                break; /* interrupted, or the client is shutting down (channel and subscriber gone) */
        }
    }
    rm_client_unlock(c);
    *out = w;
    return 0;
}

int rm_waiter_join(redmutex_client *c, const char *channel, void (*notify)(void *ud), void *ud, rm_waiter **out,
                   bool *subscribed)
{
    *out = NULL;
    *subscribed = false;
    rm_waiter *w = calloc(1, sizeof *w);
    if (!w)
        return REDMUTEX_ENOMEM;
    w->efd = -1;
    w->notify = notify;
    w->notify_ud = ud;
    rm_client_lock(c);
    if (join_channel(c, channel, w))
        *subscribed = subscribed_enough(c, c->sub, w->ch);
    rm_client_unlock(c);
    *out = w;
    return 0;
}

int rm_waiter_take(redmutex_client *c, rm_waiter *w)
{
    rm_client_lock(c);
    int result = 0;
    if (w->handoff < 0) {
        result = -1;
    } else if (w->handoff > 0) {
        result = w->handoff;
        w->handoff = 0;
        w->notified = false;
    } else if (w->notified) {
        result = 1;
        w->notified = false;
    }
    w->sleeping = false;
    rm_client_unlock(c);
    return result;
}

void rm_waiter_sleep(redmutex_client *c, rm_waiter *w)
{
    rm_client_lock(c);
    w->sleeping = w->handoff == 0;
    rm_client_unlock(c);
}

bool rm_waiter_handoff_in_flight(const rm_waiter *w) { return w->handoff < 0; }

int rm_waiter_wait(redmutex_client *c, rm_waiter *w, int64_t until_ns, bool *interrupted)
{
    *interrupted = false;
    for (;;) {
        rm_client_lock(c);
        int result = -1; /* keep waiting */
        if (w->handoff > 0) {
            result = w->handoff;
            w->handoff = 0;
            w->notified = false;
        } else if (w->handoff == 0 && w->notified) {
            result = 1;
            w->notified = false;
        } else if (w->handoff == 0 && (*interrupted || rm_now_ns() >= until_ns)) {
            result = 0;
        }
        /* While a releasing thread acquires for us (handoff < 0) the outcome
           must be waited for, whatever the deadline or a signal say. */
        bool in_flight = w->handoff < 0;
        w->sleeping = result < 0 && !in_flight;
        rm_client_unlock(c);
        if (result >= 0)
            return result;
        /* Once interrupted (or while a hand-off is in flight) only the result is waited for. */
        rm_wait *wait = in_flight || *interrupted ? NULL : w->wait;
        if (sleep_once(c, w, wait, in_flight ? rm_deadline_after_ms(100) : until_ns) == RM_POLL_INTERRUPTED)
            *interrupted = true;
    }
}

bool rm_waiter_message(redmutex_client *c, rm_waiter *w, char *out, size_t size)
{
    rm_client_lock(c);
    bool got = w->message[0] != '\0' && strlen(w->message) < size;
    if (got)
        memcpy(out, w->message, strlen(w->message) + 1);
    w->message[0] = '\0';
    rm_client_unlock(c);
    return got;
}

void rm_waiter_offer(redmutex_client *c, rm_waiter *w, const rm_claim *claim)
{
    rm_client_lock(c);
    w->claim = *claim;
    rm_client_unlock(c);
}

rm_waiter *rm_waiter_claim(redmutex_client *c, const char *channel, redmutex_kind kind, rm_claim *out)
{
    rm_waiter *found = NULL;
    rm_client_lock(c);
    rm_channel *ch = c->sub ? find_channel(c->sub, channel, strlen(channel)) : NULL;
    for (rm_waiter *w = ch ? ch->head : NULL; w; w = w->next) {
        if (w->sleeping && !w->notified && w->handoff == 0 && w->claim.lock && w->claim.lock->kind == kind) {
            w->handoff = -1;
            w->sleeping = false;
            *out = w->claim;
            found = w;
            break;
        }
        if (!w->sleeping || w->notified)
            break; /* the oldest waiter is busy trying on its own: no queue jumping */
    }
    rm_client_unlock(c);
    return found;
}

void rm_waiter_claim_done(redmutex_client *c, rm_waiter *w, int result)
{
    rm_client_lock(c);
    w->handoff = result;
    signal_waiter(w);
    rm_client_unlock(c);
}

void rm_waiter_end(redmutex_client *c, rm_waiter *w)
{
    rm_client_lock(c);
    rm_channel *ch = w->ch;
    if (ch) {
        if (w->prev)
            w->prev->next = w->next;
        else
            ch->head = w->next;
        if (w->next)
            w->next->prev = w->prev;
        else
            ch->tail = w->prev;
        /* A wake-up this waiter did not use goes to the next one. */
        if (w->notified)
            wake_one(ch);
        if (c->sub && c->sub->leader == w)
            c->sub->leader = NULL; /* the subscriber thread reads again (woken below) */
        if (--ch->refs == 0)
            ch->idle_since = rm_now_ns();
        if (c->sub)
            signal_fd(c->sub->wake_fd);
    }
    rm_client_unlock(c);
    if (w->efd >= 0)
        close(w->efd);
    free(w);
}

bool rm_waiter_subscribed(redmutex_client *c, const char *channel)
{
    rm_client_lock(c);
    rm_channel *ch = c->sub ? find_channel(c->sub, channel, strlen(channel)) : NULL;
    bool ready = ch && subscribed_enough(c, c->sub, ch);
    rm_client_unlock(c);
    return ready;
}

size_t rm_waiters_queued(redmutex_client *c, const char *channel)
{
    size_t n = 0;
    rm_client_lock(c);
    rm_channel *ch = c->sub ? find_channel(c->sub, channel, strlen(channel)) : NULL;
    for (rm_waiter *w = ch ? ch->head : NULL; w; w = w->next)
        n++;
    rm_client_unlock(c);
    return n;
}

void rm_waiter_expect_release(redmutex_client *c, const char *channel, bool *armed)
{
    rm_client_lock(c);
    rm_channel *ch = c->sub ? find_channel(c->sub, channel, strlen(channel)) : NULL;
    /* Messages from one server to one subscriber connection arrive in order,
       and while this client holds the lock nobody else releases it: the next
       message from a server where we are surely subscribed is this release's
       own, whether it arrives before or after the reply. It must not wake
       anyone here (not even a thread that starts waiting later): it is news
       only for other processes. Armed before the request goes out. */
    for (size_t i = 0; i < c->n; i++) {
        armed[i] = ch && ch->confirmed[i];
        if (armed[i])
            ch->skip[i]++;
    }
    rm_client_unlock(c);
}

void rm_waiter_released(redmutex_client *c, const char *channel, const bool *armed, const bool *deleted,
                        bool wake)
{
    rm_client_lock(c);
    rm_channel *ch = c->sub ? find_channel(c->sub, channel, strlen(channel)) : NULL;
    if (ch) {
        bool any = false;
        for (size_t i = 0; i < c->n; i++) {
            /* A server that did not delete (or surely did not answer) publishes nothing. */
            if (armed[i] && !deleted[i] && ch->skip[i] > 0)
                ch->skip[i]--;
            any |= deleted[i];
        }
        if (wake && any && ch->head)
            wake_one(ch);
    }
    rm_client_unlock(c);
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
    signal_fd(sub->wake_fd);
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
    c->refs--;
    detach_waiters(sub, false); /* their eventfds are shared with the parent: do not touch them */
    free_subscriber(c, sub);
}
