/*
 * Pollable lost-lock news (events.c).
 */
#ifndef REDMUTEX_EVENTS_H
#define REDMUTEX_EVENTS_H

#include "client.h"

/* ---- pollable events (events.c) ---------------------------------------------- */

typedef struct rm_fd_event rm_fd_event;
/** Queues the news that lock_id's hold of owner turned `state`. Caller holds c->mu. */
void rm_events_push(redmutex_client *c, uint64_t lock_id, redmutex_state state, const char *owner);
void rm_events_after_fork(redmutex_client *c);
void rm_events_destroy(redmutex_client *c);

#endif
