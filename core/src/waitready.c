/*
 * The client's ready list and wait fd for pollable waits (waitready.h).
 *
 * The client's wait fd is an epoll instance over two descriptors: an eventfd
 * that is readable exactly while the ready list is not empty, and a timerfd
 * armed for the earliest due time of the waits. redmutex_client_next_ready()
 * moves waits whose time has come onto the ready list and pops the oldest.
 * Everything here runs under the client mutex, which also keeps the ready
 * list and the eventfd's readability in step. The one exception is
 * redmutex_client_interrupt(), which may run in a signal handler: it writes
 * the eventfd without the mutex, after bumping the interrupt generation, and
 * the next redmutex_client_next_ready() makes every wait begun before that
 * generation ready (its try reports REDMUTEX_EINTR). So a drain of the
 * eventfd re-arms it while an interrupt is not seen yet.
 */
#define _GNU_SOURCE
#include "client.h"
#include "internal.h"
#include "pollwait.h"
#include "waitfd.h"
#include "waitready.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

/* ---- the client's ready list and timer (caller holds c->mu) ----------------- */

rm_pollwaits *rm_ready_ensure(rm_err *err, redmutex_client *c)
{
    if (c->pollwait.pw)
        return c->pollwait.pw;
    rm_pollwaits *pw = calloc(1, sizeof *pw);
    if (!pw) {
        rm_fail(err, REDMUTEX_ENOMEM, "out of memory");
        return NULL;
    }
    if (rm_waitfd_make(&pw->epfd, &pw->efd, &pw->tfd) != 0) {
        rm_fail(err, REDMUTEX_ENOMEM, "cannot create the client's wait fd: %s", strerror(errno));
        free(pw);
        return NULL;
    }
    pw->timer_ns = INT64_MAX;
    rm_cond_init_monotonic(&pw->handoff_done);
    pw->c = c;
    pw->intr_seen = atomic_load(&c->intr.gen);
    c->pollwait.pw = pw;
    atomic_store(&c->pollwait.efd, pw->efd); /* interrupts write it from now on */
    return pw;
}

static void arm_timer(rm_pollwaits *pw, int64_t at_ns)
{
    struct itimerspec its = {{0, 0}, {0, 0}}; /* all zero disarms */
    if (at_ns != INT64_MAX) {
        its.it_value.tv_sec = (time_t)(at_ns / 1000000000);
        its.it_value.tv_nsec = (long)(at_ns % 1000000000);
        if (its.it_value.tv_sec == 0 && its.it_value.tv_nsec == 0)
            its.it_value.tv_nsec = 1;
    }
    timerfd_settime(pw->tfd, TFD_TIMER_ABSTIME, &its, NULL);
    pw->timer_ns = at_ns;
}

/* The ready list is empty: the eventfd must not stay readable, but an
   interrupt or a close not seen yet keeps it so (each records itself before
   it writes the eventfd, without the client mutex). */
static void drain_ready_fd(rm_pollwaits *pw)
{
    rm_efd_drain(pw->efd);
    if (atomic_load(&pw->c->intr.gen) != pw->intr_seen || (atomic_load(&pw->c->intr.closing) && !pw->closing_seen))
        rm_efd_signal(pw->efd);
}

void rm_ready_push(rm_pollwaits *pw, redmutex_wait *w)
{
    w->due_ns = INT64_MAX;
    if (w->queued)
        return;
    w->queued = true;
    w->next_ready = NULL;
    if (pw->ready_tail)
        pw->ready_tail->next_ready = w;
    else
        pw->ready_head = w;
    pw->ready_tail = w;
    if (pw->ready_head == w)
        rm_efd_signal(pw->efd);
}

void rm_ready_unqueue(rm_pollwaits *pw, redmutex_wait *w)
{
    if (!w->queued)
        return;
    redmutex_wait *prev = NULL;
    for (redmutex_wait *p = pw->ready_head; p && p != w; p = p->next_ready)
        prev = p;
    if (prev)
        prev->next_ready = w->next_ready;
    else
        pw->ready_head = w->next_ready;
    if (pw->ready_tail == w)
        pw->ready_tail = prev;
    w->queued = false;
    w->next_ready = NULL;
    if (!pw->ready_head)
        drain_ready_fd(pw);
}

/* After an interrupt: every wait begun before it that is still waiting is
   ready. After a close: every wait still waiting (its try says ECLOSED). */
static void catch_interrupts(rm_pollwaits *pw) RM_REQUIRES(pw->c->mu)
{
    uint64_t gen = atomic_load(&pw->c->intr.gen);
    bool closing = atomic_load(&pw->c->intr.closing) && !pw->closing_seen;
    if (gen == pw->intr_seen && !closing)
        return;
    pw->intr_seen = gen;
    pw->closing_seen |= closing;
    for (redmutex_wait *w = pw->all; w; w = w->next_all)
        if ((closing || w->ws.intr_start != gen) && !w->done && !w->freeing) /* an ended wait is freeing */
            rm_ready_push(pw, w);
    if (!pw->ready_head)
        drain_ready_fd(pw);
}

/* Makes every wait whose due time has come ready, and re-arms the timer. */
static void scan_due(rm_pollwaits *pw, int64_t now) RM_REQUIRES(pw->c->mu)
{
    if (now < pw->timer_ns)
        return;
    rm_efd_drain(pw->tfd);
    int64_t next = INT64_MAX;
    for (redmutex_wait *w = pw->all; w; w = w->next_all) {
        if (w->due_ns <= now)
            rm_ready_push(pw, w);
        else if (w->due_ns < next)
            next = w->due_ns;
    }
    arm_timer(pw, next);
}

void rm_ready_set_due(rm_pollwaits *pw, redmutex_wait *w, int64_t at_ns)
{
    w->due_ns = at_ns;
    if (at_ns < pw->timer_ns)
        arm_timer(pw, at_ns);
}

int redmutex_client_wait_fd(redmutex_client *c)
{
    rm_err e_, *err = rm_err_reset(&e_);
    if (!c)
        return rm_publish(err, rm_fail(err, REDMUTEX_EINVAL, "redmutex_client_wait_fd: client is NULL"));
    rm_client_lock(c);
    rm_pollwaits *pw = rm_ready_ensure(err, c);
    int rc = pw ? pw->epfd : REDMUTEX_ENOMEM;
    rm_client_unlock(c);
    return rm_publish(err, rc);
}

int redmutex_client_next_ready(redmutex_client *c, uint64_t *wait_id)
{
    rm_err e_, *err = rm_err_reset(&e_);
    if (!c || !wait_id)
        return rm_publish(
            err, rm_fail(err, REDMUTEX_EINVAL, "redmutex_client_next_ready: %s is NULL", !c ? "client" : "wait_id"));
    int rc = 0;
    rm_client_lock(c);
    rm_pollwaits *pw = c->pollwait.pw;
    if (pw) {
        catch_interrupts(pw);
        scan_due(pw, rm_now_ns());
        redmutex_wait *w = pw->ready_head;
        if (w) {
            rm_ready_unqueue(pw, w);
            *wait_id = w->id;
            rc = 1;
        } else {
            /* Nothing to pop, so the fd must not stay readable: an interrupt
               bumps the generation before it writes the eventfd, and a write
               landing after catch_interrupts() saw that generation would
               otherwise make an event loop spin on it. */
            drain_ready_fd(pw);
        }
    }
    rm_client_unlock(c);
    return rm_publish(err, rc);
}

/* ---- fork and destruction ---------------------------------------------------- */

void rm_pollwaits_after_fork(redmutex_client *c)
{
    rm_pollwaits *pw = c->pollwait.pw;
    if (!pw)
        return;
    /* The descriptors are shared with the parent (the epoll instance would
       even report the parent's readiness): the child gets fresh ones under
       the same numbers, so a loop that registered the wait fd keeps working. */
    rm_waitfd_renew(pw->epfd, pw->efd, pw->tfd);
    /* Nothing is ready or timed in the child. Its waits were cut from their
       channels with the subscriber; their next try starts afresh. */
    for (redmutex_wait *w = pw->all; w; w = w->next_all) {
        w->queued = false;
        w->next_ready = NULL;
        w->due_ns = INT64_MAX;
    }
    pw->ready_head = pw->ready_tail = NULL;
    pw->timer_ns = INT64_MAX;
    rm_cond_init_monotonic(&pw->handoff_done);
}

void rm_pollwaits_destroy(redmutex_client *c)
{
    rm_pollwaits *pw = c->pollwait.pw;
    if (!pw)
        return;
    atomic_store(&c->pollwait.efd, -1);
    close(pw->epfd);
    close(pw->efd);
    close(pw->tfd);
    pthread_cond_destroy(&pw->handoff_done);
    free(pw);
    c->pollwait.pw = NULL;
}
