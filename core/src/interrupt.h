/*
 * Interrupting waits (interrupt.c).
 *
 * Layering: above the client's state; below the waiters and the lock
 * operations.
 */
#ifndef REDMUTEX_INTERRUPT_H
#define REDMUTEX_INTERRUPT_H

#include "client.h"

/* ---- interrupts (interrupt.c) --------------------------------------------- */

/** One blocking wait of an acquire, from its start to its end (on the waiting thread's stack). */
typedef struct rm_wait {
    struct rm_wait *next;
    uint64_t start; /* interrupt generation when the wait began */
    bool registered;
} rm_wait;

/** rm_wait_poll's result when the wait was interrupted (or the client is closing). */
#define RM_POLL_INTERRUPTED (-1)
/** Registers a wait: interrupts from now on end it. 0 or REDMUTEX_ENOMEM (no eventfd). */
int rm_wait_begin(rm_err *err, redmutex_client *c, rm_wait *w);
void rm_wait_end(redmutex_client *c, rm_wait *w);
/** True once an interrupt arrived after w began, or the client is closing. w may be NULL (false). */
bool rm_wait_interrupted(redmutex_client *c, const rm_wait *w);
/**
 * Sleeps until fd (may be -1) is readable (1), until_ns (0), or, when w is
 * a registered wait, an interrupt or a signal the interrupt callback wants
 * to stop for (RM_POLL_INTERRUPTED). Caller holds no mutex.
 */
int rm_wait_poll(redmutex_client *c, rm_wait *w, int fd, int64_t until_ns);
/**
 * rm_wait_poll over the n descriptors of p (p has n + 1 slots: the last is
 * the interrupt fd's). 1 when one of them has revents (the caller reads
 * them), else as rm_wait_poll.
 */
struct pollfd;
int rm_wait_poll_set(redmutex_client *c, rm_wait *w, struct pollfd *p, size_t n, int64_t until_ns);
/** Close: marks the client closing and wakes every wait. */
void rm_interrupt_wake_all(redmutex_client *c);
void rm_interrupt_after_fork(redmutex_client *c);
void rm_interrupt_destroy(redmutex_client *c);

#endif
