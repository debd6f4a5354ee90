/*
 * Interrupting waits: redmutex_client_interrupt() ends every wait of a client
 * that is in progress, from any thread or from a signal handler.
 *
 * A signal handler may not take a mutex, so the interrupt itself only does
 * two async-signal-safe things: it bumps the client's interrupt generation
 * (an atomic counter) and writes to the client's interrupt eventfd. A wait
 * records the generation when it begins; it is interrupted once the counter
 * has moved on. Every sleeping wait polls the eventfd beside its own fd, so
 * the write wakes all of them at once.
 *
 * The eventfd is level-triggered and shared, so nobody may drain it while a
 * wait it is meant for may still be asleep (a drained fd wakes nobody). It is
 * drained, under the client mutex, only when no wait that began before the
 * latest interrupt is left; a wait that began later and finds the fd
 * readable meanwhile polls without it, in short slices, until then. An
 * interrupt that lands during the drain is not lost: the drain re-arms the
 * fd when the generation moved while it read.
 *
 * Pollable waits (pollwait.c) do not sleep here: the interrupt also writes
 * the eventfd of the client's wait fd, so the event loop calls
 * redmutex_client_next_ready(), which compares the generation with the last
 * one it saw and makes every pollable wait begun before it ready; their
 * tries then end with REDMUTEX_EINTR.
 */
#define _GNU_SOURCE
#include "client.h"
#include "internal.h"
#include "interrupt.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

/* A wait that must not watch the interrupt fd (it is stale) looks again this often. */
#define RM_STALE_SLICE_MS 10

/* Wakes every kind of wait: blocked acquires poll the interrupt eventfd,
   pollable waits are behind the wait fd's. Async-signal-safe. */
static void wake_waits(redmutex_client *c)
{
    int fd = atomic_load(&c->intr.fd);
    if (fd >= 0)
        rm_efd_signal(fd);
    fd = atomic_load(&c->pollwait.efd);
    if (fd >= 0)
        rm_efd_signal(fd);
}

void redmutex_client_interrupt(redmutex_client *c)
{
    if (!c || atomic_load(&c->intr.closing))
        return;
    int saved_errno = errno; /* a signal handler must leave errno as it found it */
    atomic_fetch_add(&c->intr.gen, 1);
    wake_waits(c);
    errno = saved_errno;
}

void rm_interrupt_wake_all(redmutex_client *c)
{
    /* Close: waits see `closing` when they wake, and end with ECLOSED;
       pollable waits are made ready when the loop next looks (waitready.c). */
    atomic_store(&c->intr.closing, true);
    wake_waits(c);
}

int rm_wait_begin(rm_err *err, redmutex_client *c, rm_wait *w)
{
    memset(w, 0, sizeof *w);
    rm_client_lock(c);
    if (atomic_load(&c->intr.fd) < 0) {
        int fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        if (fd < 0) {
            rm_client_unlock(c);
            return rm_fail(err, REDMUTEX_ENOMEM, "cannot create the client's interrupt eventfd: %s", strerror(errno));
        }
        atomic_store(&c->intr.fd, fd);
    }
    /* Read after the fd is published: an interrupt from now on either moves
       the generation past `start` before this wait looks, or wakes its poll. */
    w->start = atomic_load(&c->intr.gen);
    w->next = c->intr.waits;
    c->intr.waits = w;
    w->registered = true;
    rm_client_unlock(c);
    return 0;
}

bool rm_wait_interrupted(redmutex_client *c, const rm_wait *w)
{
    return w && w->registered && (atomic_load(&c->intr.gen) != w->start || atomic_load(&c->intr.closing));
}

/*
 * Drains the interrupt fd if no wait in progress began before the latest
 * interrupt. Returns false when such a wait is still there (the fd must stay
 * readable for it). Caller holds c->mu.
 */
static bool drain_if_stale(redmutex_client *c) RM_REQUIRES(c->mu)
{
    uint64_t gen = atomic_load(&c->intr.gen);
    for (rm_wait *w = c->intr.waits; w; w = w->next)
        if (w->start != gen)
            return false;
    int fd = atomic_load(&c->intr.fd);
    rm_efd_drain(fd);
    c->intr.drained = gen;
    /* An interrupt between the generation read above and the read(2) may have
       had its write swallowed: it bumped the generation first, so re-arm. */
    if (atomic_load(&c->intr.gen) != gen)
        rm_efd_signal(fd);
    return true;
}

void rm_wait_end(redmutex_client *c, rm_wait *w)
{
    if (!w->registered)
        return;
    rm_client_lock(c);
    /* Found by walking the list: after fork() the child starts with an empty
       one, and a wait of the forking thread must not unlink a stale neighbour. */
    for (rm_wait **p = &c->intr.waits; *p; p = &(*p)->next)
        if (*p == w) {
            *p = w->next;
            break;
        }
    w->registered = false;
    /* An interrupt since the last drain left the fd readable: drain it once
       no older wait needs it (else the last of those does). */
    if (atomic_load(&c->intr.gen) != c->intr.drained && !atomic_load(&c->intr.closing))
        drain_if_stale(c);
    rm_client_unlock(c);
}

int rm_wait_poll_set(redmutex_client *c, rm_wait *w, struct pollfd *p, size_t n, int64_t until_ns)
{
    bool interruptible = w && w->registered;
    bool watch = interruptible; /* poll the interrupt fd too (false while it is stale) */
    for (;;) {
        if (rm_wait_interrupted(c, w))
            return RM_POLL_INTERRUPTED;
        int64_t ms = rm_ms_until(until_ns);
        if (ms <= 0)
            return 0;
        if (ms > 60000)
            ms = 60000;
        int ifd = interruptible ? atomic_load(&c->intr.fd) : -1;
        if (interruptible && !watch) {
            /* The fd was readable for an older wait. Watch it again once it
               has been drained; until then look every few milliseconds. */
            rm_client_lock(c);
            struct pollfd q = {ifd, POLLIN, 0};
            watch = poll(&q, 1, 0) == 0 || drain_if_stale(c);
            rm_client_unlock(c);
            if (!watch && ms > RM_STALE_SLICE_MS)
                ms = RM_STALE_SLICE_MS;
        }
        for (size_t i = 0; i < n; i++)
            p[i].revents = 0;
        p[n] = (struct pollfd){watch ? ifd : -1, POLLIN, 0};
        int r = poll(p, (nfds_t)n + 1, (int)ms);
        if (r < 0 && errno == EINTR && interruptible && c->opts.interrupt &&
            c->opts.interrupt(c->opts.interrupt_payload))
            return RM_POLL_INTERRUPTED;
        if (r <= 0)
            continue;
        for (size_t i = 0; i < n; i++)
            if (p[i].revents)
                return 1;
        if (p[n].revents && !rm_wait_interrupted(c, w))
            watch = false;
    }
}

int rm_wait_poll(redmutex_client *c, rm_wait *w, int fd, int64_t until_ns)
{
    struct pollfd p[2] = {{fd, POLLIN, 0}, {-1, 0, 0}};
    return rm_wait_poll_set(c, w, p, 1, until_ns);
}

void rm_interrupt_after_fork(redmutex_client *c)
{
    /* The parent's waits do not exist here, and its interrupts are not ours:
       a fresh eventfd under the same number, so nothing the parent does
       wakes the child's waits. */
    c->intr.waits = NULL;
    int fd = atomic_load(&c->intr.fd);
    if (fd >= 0) {
        int fresh = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        if (fresh >= 0) {
            dup3(fresh, fd, O_CLOEXEC);
            close(fresh);
        }
    }
}

void rm_interrupt_destroy(redmutex_client *c)
{
    int fd = atomic_load(&c->intr.fd);
    if (fd >= 0)
        close(fd);
}
