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

#endif
