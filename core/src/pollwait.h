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
/** redmutex_wait_new with the call's error (lock not NULL, out not NULL). */
int rm_wait_new(rm_err *err, redmutex_wait **out, redmutex_lock *lock, const char *owner);

#endif
