/*
 * Multi-locks (multilock.c, multiattempt.c): the set and one attempt at it.
 *
 * Layering: the top (with the semaphores and latches), over the lock
 * operations, the pollable waits and the client's lifecycle.
 */
#ifndef REDMUTEX_MULTILOCK_H
#define REDMUTEX_MULTILOCK_H

#include "handle.h"

struct redmutex_multi_lock {
    redmutex_client *c;
    size_t n;
    redmutex_lock **locks; /* in the fixed order: by name */
};

/* One acquisition or release of a multi-lock for one owner. */
typedef struct multi_op {
    rm_err *err;
    redmutex_multi_lock *m;
    bool explicit_owner;
    char (*owner_key)[RM_VALUE_MAX + 1];
    char (*value)[RM_VALUE_MAX + 1];
    bool *held; /* won by this attempt (recorded holds) */
    bool tried; /* an attempt was made: later ones are retries */
    /* The last busy attempt: the lock that was busy, how long its holder
       still has, whether part of the set had been won. */
    size_t blocker;
    int64_t ttl_ms;
    bool split;
} multi_op;

/**
 * One attempt at the whole set for op's owner: RM_ATTEMPT_WON (every lock
 * held, each hold recorded), RM_ATTEMPT_BUSY (nothing of the set kept; op
 * says which lock was busy, its holder's TTL, whether part was won) or an
 * error (nothing kept). Blocks a round trip per group (multiattempt.c).
 */
int rm_multi_attempt(multi_op *op);
/**
 * Releases the locks op->held marks (and clears the marks), a request per
 * slot and RM_REQ_MAX_CMDS locks. Returns 0, or the first failure in the
 * set's order with its message ("multi-lock: <why>: ..."; why NULL: no
 * message, 0 returned).
 */
int rm_multi_release_held(multi_op *op, const char *why);

#endif
