/*
 * The descriptors of the client's wait fd (waitfd.c): an eventfd, a
 * timerfd and an epoll instance over both, as pollwait.c uses them.
 *
 * Layering: with the pollable waits (layer 11); calls only the system.
 */
#ifndef REDMUTEX_WAITFD_H
#define REDMUTEX_WAITFD_H

#include "internal.h"

#include <unistd.h>

/** Makes the eventfd, the timerfd and the epoll instance over both. 0 or -1 (errno set, nothing left open). */
int rm_waitfd_make(int *epfd, int *efd, int *tfd);
/**
 * In a forked child: fresh descriptors under the same numbers (the old
 * ones are shared with the parent, whose readiness the epoll instance
 * would even report), so a loop that registered the wait fd keeps working.
 */
void rm_waitfd_renew(int epfd, int efd, int tfd);
/** A condition variable on CLOCK_MONOTONIC. */
void rm_cond_init_monotonic(pthread_cond_t *cond);

#endif
