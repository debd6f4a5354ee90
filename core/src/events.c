/*
 * Lost-lock news, one queue for both ways of hearing it. Every change of a
 * hold to RENEWAL_FAILING, LOST or back to HELD is queued here once
 * (watchdog.c is the one producer), and each entry is marked for its
 * consumers: the event fd, always, so that a program (or a language
 * binding, or an event loop) can learn of it on a thread of its own; and
 * the callbacks (the lock's on_lost, the client's log) when there are any,
 * which the watchdog thread runs. An entry goes when both have taken it, so
 * both see the same news in the same order.
 *
 * The event fd is readable exactly while an entry is due to it, and
 * redmutex_client_next_event() takes the oldest. Its share is bounded: a
 * program that never reads it must not grow the queue without limit. On
 * overflow the oldest entry due to the fd is dropped for the fd (a counter
 * records it) but still reaches the callbacks, which the watchdog thread
 * drains by itself. Everything here runs under the client mutex, which is
 * also what keeps the fd's readability and the queue in step.
 */
#define _GNU_SOURCE
#include "client.h"
#include "events.h"
#include "handle.h"
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

/* Most events kept per client before the oldest are dropped. */
#define RM_EVENTS_MAX 1024

struct rm_fd_event {
    struct rm_fd_event *next;
    uint64_t lock_id;
    redmutex_lock *lock; /* for the callbacks: NULL once they are not due (or the handle is freed) */
    redmutex_state state;
    bool for_fd;    /* still to be taken by redmutex_client_next_event() */
    bool call, log; /* still to be given to on_lost, to the log callback */
    char owner[];   /* "" for a plain lock held by the handle itself */
};

static bool for_callbacks(const rm_fd_event *e) { return e->lock && (e->call || e->log); }

/* Unlinks e (whose predecessor is prev, NULL at the head) and frees it. */
static void unlink_event(redmutex_client *c, rm_fd_event *prev, rm_fd_event *e)
{
    if (prev)
        prev->next = e->next;
    else
        c->events.head = e->next;
    if (c->events.tail == e)
        c->events.tail = prev;
    free(e);
}

/* The oldest entry due to `fd` (else to the callbacks), and its predecessor in *prev. */
static rm_fd_event *oldest(redmutex_client *c, bool fd, rm_fd_event **prev)
{
    *prev = NULL;
    for (rm_fd_event *e = c->events.head; e; *prev = e, e = e->next)
        if (fd ? e->for_fd : for_callbacks(e))
            return e;
    return NULL;
}

/* e (after prev) has been taken by one consumer: it goes when the other has it too. */
static void settle(redmutex_client *c, rm_fd_event *prev, rm_fd_event *e)
{
    if (!e->for_fd && !for_callbacks(e))
        unlink_event(c, prev, e);
}

/* The fd's share is full: its oldest entry is dropped for it. */
static void drop_oldest(redmutex_client *c)
{
    rm_fd_event *prev, *e = oldest(c, true, &prev);
    e->for_fd = false;
    c->events.n_due--;
    c->events.dropped++;
    settle(c, prev, e);
}

void rm_events_push(redmutex_client *c, redmutex_lock *l, redmutex_state state, const char *owner, bool call, bool log)
{
    size_t len = strlen(owner);
    rm_fd_event *e = malloc(sizeof *e + len + 1);
    if (!e) {
        c->events.dropped++;
        return;
    }
    e->next = NULL;
    e->lock_id = l->id;
    e->lock = l;
    e->state = state;
    e->for_fd = true;
    e->call = call;
    e->log = log;
    memcpy(e->owner, owner, len + 1);
    if (c->events.n_due == RM_EVENTS_MAX)
        drop_oldest(c);
    if (c->events.tail)
        c->events.tail->next = e;
    else
        c->events.head = e;
    c->events.tail = e;
    if (c->events.n_due++ == 0 && c->events.fd >= 0)
        rm_efd_signal(c->events.fd);
}

int redmutex_client_event_fd(redmutex_client *c)
{
    rm_err e_, *err = rm_err_reset(&e_);
    if (!c)
        return rm_publish(err, rm_fail(err, REDMUTEX_EINVAL, "redmutex_client_event_fd: client is NULL"));
    int rc = 0;
    rm_client_lock(c);
    if (c->events.fd < 0) {
        /* Made on first use: a client nobody polls needs no descriptor. */
        c->events.fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        if (c->events.fd < 0)
            rc = rm_fail(err, REDMUTEX_ENOMEM, "cannot create the client's event fd: %s", strerror(errno));
        else if (c->events.n_due > 0)
            rm_efd_signal(c->events.fd);
    }
    if (rc == 0)
        rc = c->events.fd;
    rm_client_unlock(c);
    return rm_publish(err, rc);
}

int redmutex_client_next_event(redmutex_client *c, uint64_t *lock_id, redmutex_state *state, char *owner,
                               size_t owner_size)
{
    rm_err e_, *err = rm_err_reset(&e_);
    if (!c || !lock_id || !state)
        return rm_publish(err, rm_fail(err, REDMUTEX_EINVAL, "redmutex_client_next_event: %s is NULL",
                                       !c         ? "client"
                                       : !lock_id ? "lock_id"
                                                  : "state"));
    if (!owner && owner_size)
        return rm_publish(err, rm_fail(err, REDMUTEX_EINVAL,
                                       "redmutex_client_next_event: owner is NULL but owner_size is %zu", owner_size));
    int rc = 0;
    rm_client_lock(c);
    rm_fd_event *prev, *e = oldest(c, true, &prev);
    if (e && owner_size && strlen(e->owner) >= owner_size) {
        rc = rm_fail(err, REDMUTEX_EINVAL,
                     "redmutex_client_next_event: owner buffer of %zu bytes is too small for %zu "
                     "(REDMUTEX_OWNER_MAX + 1 always suffices); the event stays queued",
                     owner_size, strlen(e->owner) + 1);
    } else if (e) {
        if (--c->events.n_due == 0 && c->events.fd >= 0)
            rm_efd_drain(c->events.fd);
        *lock_id = e->lock_id;
        *state = e->state;
        if (owner_size)
            memcpy(owner, e->owner, strlen(e->owner) + 1);
        e->for_fd = false;
        settle(c, prev, e);
        rc = 1;
    }
    rm_client_unlock(c);
    return rm_publish(err, rc);
}

bool rm_events_take_callback(redmutex_client *c, rm_callback_event *out)
{
    rm_fd_event *prev, *e = oldest(c, false, &prev);
    if (!e)
        return false;
    out->lock = e->lock;
    out->state = e->state;
    out->call = e->call;
    out->log = e->log;
    snprintf(out->owner, sizeof out->owner, "%s", e->owner);
    e->lock = NULL;
    settle(c, prev, e);
    return true;
}

void rm_events_forget_lock(redmutex_client *c, redmutex_lock *l)
{
    for (rm_fd_event *prev = NULL, *e = c->events.head, *next; e; e = next) {
        next = e->next;
        if (e->lock == l) {
            e->lock = NULL;
            if (!e->for_fd) {
                unlink_event(c, prev, e);
                continue;
            }
        }
        prev = e;
    }
}

uint64_t redmutex_client_events_dropped(const redmutex_client *c)
{
    if (!c)
        return 0;
    redmutex_client *mc = (redmutex_client *)c; /* the mutex is not part of the value */
    rm_client_lock(mc);
    uint64_t n = mc->events.dropped;
    rm_client_unlock(mc);
    return n;
}

void rm_events_after_fork(redmutex_client *c)
{
    /* Queued news is about the parent's holds, and the eventfd is shared with
       the parent: the child gets an empty queue (for both consumers) and a
       fresh eventfd under the same number (so a loop that registered the
       number keeps working). */
    while (c->events.head)
        unlink_event(c, NULL, c->events.head);
    c->events.n_due = 0;
    c->events.dropped = 0;
    if (c->events.fd >= 0) {
        int fresh = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        if (fresh >= 0) {
            dup3(fresh, c->events.fd, O_CLOEXEC);
            close(fresh);
        }
    }
}

void rm_events_destroy(redmutex_client *c)
{
    while (c->events.head)
        unlink_event(c, NULL, c->events.head);
    if (c->events.fd >= 0)
        close(c->events.fd);
}
