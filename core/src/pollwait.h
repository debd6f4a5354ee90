/*
 * Pollable waits (pollwait.c).
 */
#ifndef REDMUTEX_POLLWAIT_H
#define REDMUTEX_POLLWAIT_H

#include "client.h"

/* ---- pollable waits (pollwait.c) -------------------------------------------- */

struct rm_pollwaits;
void rm_pollwaits_after_fork(redmutex_client *c);
void rm_pollwaits_destroy(redmutex_client *c);
/*
 * A pollable wait for something other than a lock (a latch, a multi-lock):
 * redmutex_wait_try() calls try_once, which returns 0 (done: the wait is
 * finished), REDMUTEX_ETIMEDOUT (not yet; *ttl_ms: when it may be, -1
 * unknown; `channel`: where news of it is published, "" none) or an error;
 * the wait then listens on that channel and is ready again on a message,
 * at *ttl_ms, or after the capped backoff, as a lock's wait is.
 * redmutex_wait_free() calls end. obj must outlive the wait.
 */
typedef struct rm_wait_ops {
    int (*try_once)(rm_err *err, void *obj, int64_t *ttl_ms, char *channel);
    void (*end)(void *obj);
} rm_wait_ops;
int rm_wait_new_custom(rm_err *err, redmutex_wait **out, redmutex_client *c, const rm_wait_ops *ops, void *obj);
/** redmutex_wait_new with the call's error (lock not NULL, out not NULL). */
int rm_wait_new(rm_err *err, redmutex_wait **out, redmutex_lock *lock, const char *owner);

#endif
