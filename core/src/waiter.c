/*
 * Waiting by notification. Waiters queue on the release channel of the lock
 * they want (subscriber.c keeps the channels and wakes their waiters) and
 * sleep in poll() on their own eventfd, which lets a signal (Ctrl-C)
 * interrupt them.
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
 * A releasing thread of the same client may acquire the lock for the oldest
 * sleeping waiter that offered a claim (the hand-off): rm_waiter_claim,
 * rm_waiter_claim_done.
 *
 * Notification is an optimisation, never a requirement: waiters also retry
 * when the holder's lease ends and after a capped backoff, so a missed
 * message, a lost pub/sub connection or a holder that never publishes costs
 * at most the backoff cap.
 *
 * Layering: above the subscriber and interrupts; below the lock operations.
 */
#define _GNU_SOURCE
#include "client.h"
#include "internal.h"
#include "interrupt.h"
#include "subscriber.h"
#include "waiter.h"

#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

/* A client with more servers than this leaves the reading to the subscriber thread. */
#define LEAD_MAX_SERVERS 16

/*
 * Whether ch is confirmed on a majority of the servers, or somewhere and on
 * every server whose connection is up. A majority is enough: a holder's
 * release is published by the servers that held the lock, a majority, and
 * two majorities share a server. So a server that is up but stalls (a long
 * script) does not hold up every new wait for the whole subscription
 * deadline. Caller holds c->mu.
 */
static bool subscribed_enough(redmutex_client *c, const rm_subscriber *sub, const rm_channel *ch) RM_REQUIRES(c->mu)
{
    size_t confirmed = 0;
    bool all_up = true;
    for (size_t i = 0; i < c->n; i++) {
        if (ch->confirmed[i])
            confirmed++;
        else if (rm_channel_up(c, sub, ch, i))
            all_up = false;
    }
    return confirmed >= c->quorum || (all_up && confirmed > 0);
}

/*
 * Makes w (a blocking waiter) the reader of the subscription connections if
 * nobody else reads them. True when w leads. Caller holds c->mu.
 */
static bool take_lead(redmutex_client *c, rm_waiter *w) RM_REQUIRES(c->mu)
{
    rm_subscriber *sub = c->sub;
    if (!sub || sub->stop || !w->ch || w->efd < 0 || c->n > LEAD_MAX_SERVERS || (sub->leader && sub->leader != w))
        return false;
    if (!sub->leader) {
        sub->leader = w;
        if (sub->polling_conns)
            rm_efd_signal(sub->wake_fd); /* it stops reading: two readers would wake two threads */
    }
    return true;
}

/*
 * If w leads (or may take the lead), fills p with the subscription
 * connections to poll (conns[] the connections, map[] their servers).
 * Returns the number of entries. Caller holds c->mu.
 */
static size_t lead(redmutex_client *c, rm_waiter *w, struct pollfd *p, rm_conn **conns, size_t *map) RM_REQUIRES(c->mu)
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
                           const size_t *map, size_t np) RM_REQUIRES(c->mu)
{
    rm_subscriber *sub = c->sub;
    if (!sub || sub->leader != w)
        return;
    for (size_t k = 0; k < np; k++) {
        size_t i = map[k];
        if (!p[k].revents || sub->conns[i] != conns[k] || sub->dead[i] || rm_subscriber_read(sub, i))
            continue;
        sub->dead[i] = true;
        rm_efd_signal(sub->wake_fd);
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
        rm_efd_drain(w->efd);
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
    if (rm_channel_join(c, channel, w)) {
        rm_subscriber *sub = c->sub;
        rm_channel *ch = w->ch;
        /* Leading from now on, the subscriber thread (which rm_channel_join
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
    if (rm_channel_join(c, channel, w))
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
    rm_channel *ch = c->sub ? rm_channel_find(c->sub, channel, strlen(channel)) : NULL;
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
    rm_waiter_signal(w);
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
        /* A wake-up this waiter did not use goes to the next one, and so
           does the turn on a serial channel. */
        if (w->notified || w->serial)
            rm_channel_wake_one(ch);
        if (c->sub && c->sub->leader == w)
            c->sub->leader = NULL; /* the subscriber thread reads again (woken below) */
        if (--ch->refs == 0)
            ch->idle_since = rm_now_ns();
        if (c->sub)
            rm_efd_signal(c->sub->wake_fd);
    }
    rm_client_unlock(c);
    if (w->efd >= 0)
        close(w->efd);
    free(w);
}

void rm_waiter_serial(redmutex_client *c, rm_waiter *w)
{
    rm_client_lock(c);
    w->serial = true;
    rm_client_unlock(c);
}

bool rm_waiter_clear(redmutex_client *c, const char *channel, rm_waiter *w)
{
    rm_client_lock(c);
    rm_channel *ch = w ? w->ch : c->sub ? rm_channel_find(c->sub, channel, strlen(channel)) : NULL;
    bool clear = true;
    for (rm_waiter *o = ch ? ch->head : NULL; o && o != w && clear; o = o->next)
        clear = !o->serial;
    rm_client_unlock(c);
    return clear;
}

bool rm_waiter_subscribed(redmutex_client *c, const char *channel)
{
    rm_client_lock(c);
    rm_channel *ch = c->sub ? rm_channel_find(c->sub, channel, strlen(channel)) : NULL;
    bool ready = ch && subscribed_enough(c, c->sub, ch);
    rm_client_unlock(c);
    return ready;
}

size_t rm_waiters_queued(redmutex_client *c, const char *channel)
{
    size_t n = 0;
    rm_client_lock(c);
    rm_channel *ch = c->sub ? rm_channel_find(c->sub, channel, strlen(channel)) : NULL;
    for (rm_waiter *w = ch ? ch->head : NULL; w; w = w->next)
        n++;
    rm_client_unlock(c);
    return n;
}

void rm_waiter_expect_release(redmutex_client *c, const char *channel, bool *armed)
{
    rm_client_lock(c);
    rm_channel *ch = c->sub ? rm_channel_find(c->sub, channel, strlen(channel)) : NULL;
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

void rm_waiter_released(redmutex_client *c, const char *channel, const bool *armed, const bool *deleted, bool wake)
{
    rm_client_lock(c);
    rm_channel *ch = c->sub ? rm_channel_find(c->sub, channel, strlen(channel)) : NULL;
    if (ch) {
        bool any = false;
        for (size_t i = 0; i < c->n; i++) {
            /* A server that did not delete (or surely did not answer) publishes nothing. */
            if (armed[i] && !deleted[i] && ch->skip[i] > 0)
                ch->skip[i]--;
            any |= deleted[i];
        }
        if (wake && any && ch->head)
            rm_channel_wake_one(ch);
    }
    rm_client_unlock(c);
}
