/*
 * Pollable lost-lock news. Every change of a hold to RENEWAL_FAILING, LOST or
 * back to HELD is queued here, whether or not the lock has an on_lost
 * callback, so that a program (or a language binding, or an event loop) can
 * learn of it on a thread of its own: the client's event fd is readable
 * exactly while the queue is not empty, and redmutex_client_next_event()
 * pops the oldest entry.
 *
 * The queue is bounded: a program that never reads it must not grow without
 * limit. On overflow the oldest entry goes and a counter records it.
 * Everything here runs under the client mutex, which is also what keeps the
 * fd's readability and the queue in step.
 */
#define _GNU_SOURCE
#include "client.h"
#include "events.h"
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
    redmutex_state state;
    char owner[]; /* "" for a plain lock held by the handle itself */
};

static void fd_signal(int fd)
{
    uint64_t one = 1;
    ssize_t r = write(fd, &one, sizeof one);
    (void)r;
}

static void fd_drain(int fd)
{
    uint64_t v;
    ssize_t r = read(fd, &v, sizeof v);
    (void)r;
}

static void drop_oldest(redmutex_client *c)
{
    rm_fd_event *e = c->events_head;
    c->events_head = e->next;
    if (!c->events_head)
        c->events_tail = NULL;
    c->n_events--;
    c->events_dropped++;
    free(e);
}

void rm_events_push(redmutex_client *c, uint64_t lock_id, redmutex_state state, const char *owner)
{
    size_t len = strlen(owner);
    rm_fd_event *e = malloc(sizeof *e + len + 1);
    if (!e) {
        c->events_dropped++;
        return;
    }
    e->next = NULL;
    e->lock_id = lock_id;
    e->state = state;
    memcpy(e->owner, owner, len + 1);
    if (c->n_events == RM_EVENTS_MAX)
        drop_oldest(c);
    if (c->events_tail)
        c->events_tail->next = e;
    else
        c->events_head = e;
    c->events_tail = e;
    if (c->n_events++ == 0 && c->event_fd >= 0)
        fd_signal(c->event_fd);
}

int redmutex_client_event_fd(redmutex_client *c)
{
    rm_err e_, *err = rm_err_reset(&e_);
    if (!c)
        return rm_publish(err, rm_fail(err, REDMUTEX_EINVAL, "redmutex_client_event_fd: client is NULL"));
    int rc = 0;
    rm_client_lock(c);
    if (c->event_fd < 0) {
        /* Made on first use: a client nobody polls needs no descriptor. */
        c->event_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        if (c->event_fd < 0)
            rc = rm_fail(err, REDMUTEX_ENOMEM, "cannot create the client's event fd: %s", strerror(errno));
        else if (c->n_events > 0)
            fd_signal(c->event_fd);
    }
    if (rc == 0)
        rc = c->event_fd;
    rm_client_unlock(c);
    return rm_publish(err, rc);
}

int redmutex_client_next_event(redmutex_client *c, uint64_t *lock_id, redmutex_state *state, char *owner,
                               size_t owner_size)
{
    rm_err e_, *err = rm_err_reset(&e_);
    if (!c || !lock_id || !state)
        return rm_publish(err, rm_fail(err, REDMUTEX_EINVAL, "redmutex_client_next_event: %s is NULL",
                       !c ? "client" : !lock_id ? "lock_id" : "state"));
    if (!owner && owner_size)
        return rm_publish(err, rm_fail(err, REDMUTEX_EINVAL, "redmutex_client_next_event: owner is NULL but owner_size is %zu",
                       owner_size));
    int rc = 0;
    rm_client_lock(c);
    rm_fd_event *e = c->events_head;
    if (e && owner_size && strlen(e->owner) >= owner_size) {
        rc = rm_fail(err, REDMUTEX_EINVAL,
                     "redmutex_client_next_event: owner buffer of %zu bytes is too small for %zu "
                     "(REDMUTEX_OWNER_MAX + 1 always suffices); the event stays queued",
                     owner_size, strlen(e->owner) + 1);
    } else if (e) {
        c->events_head = e->next;
        if (!c->events_head)
            c->events_tail = NULL;
        if (--c->n_events == 0 && c->event_fd >= 0)
            fd_drain(c->event_fd);
        *lock_id = e->lock_id;
        *state = e->state;
        if (owner_size)
            memcpy(owner, e->owner, strlen(e->owner) + 1);
        free(e);
        rc = 1;
    }
    rm_client_unlock(c);
    return rm_publish(err, rc);
}

uint64_t redmutex_client_events_dropped(const redmutex_client *c)
{
    if (!c)
        return 0;
    redmutex_client *mc = (redmutex_client *)c; /* the mutex is not part of the value */
    rm_client_lock(mc);
    uint64_t n = mc->events_dropped;
    rm_client_unlock(mc);
    return n;
}

void rm_events_after_fork(redmutex_client *c)
{
    /* Queued news is about the parent's holds, and the eventfd is shared with
       the parent: the child gets an empty queue and a fresh eventfd under
       the same number (so a loop that registered the number keeps working). */
    while (c->events_head)
        drop_oldest(c);
    c->events_dropped = 0;
    if (c->event_fd >= 0) {
        int fresh = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        if (fresh >= 0) {
            dup3(fresh, c->event_fd, O_CLOEXEC);
            close(fresh);
        }
    }
}

void rm_events_destroy(redmutex_client *c)
{
    while (c->events_head)
        drop_oldest(c);
    if (c->event_fd >= 0)
        close(c->event_fd);
}
