/*
 * Lost-lock news (events.c): one queue, filled by one producer (a hold's
 * change of state, watchdog.c) and read by two consumers: the event fd
 * (redmutex_client_next_event, on the program's thread) and the lock's
 * on_lost and the client's log callbacks (on the watchdog thread).
 */
#ifndef REDMUTEX_EVENTS_H
#define REDMUTEX_EVENTS_H

#include "client.h"

/* One event as the callback consumer takes it. */
typedef struct rm_callback_event {
    struct redmutex_lock *lock;
    redmutex_state state;
    bool call; /* for the lock's on_lost callback */
    bool log;  /* for the client's log callback (stats.c) */
    char owner[RM_VALUE_MAX + 1];
} rm_callback_event;

/**
 * Queues the news that l's hold of owner turned `state`: for the event fd
 * always; for the callbacks too when `call` (l has on_lost) or `log`.
 * Caller holds c->mu.
 */
void rm_events_push(redmutex_client *c, struct redmutex_lock *l, redmutex_state state, const char *owner, bool call,
                    bool log) RM_REQUIRES(c->mu);
/** Takes the oldest event still due to the callbacks into *out; false when none. Caller holds c->mu. */
bool rm_events_take_callback(redmutex_client *c, rm_callback_event *out) RM_REQUIRES(c->mu);
/** Forgets the callbacks still due to l (its handle is being freed); its fd events stay. Caller holds c->mu. */
void rm_events_forget_lock(redmutex_client *c, struct redmutex_lock *l) RM_REQUIRES(c->mu);
void rm_events_after_fork(redmutex_client *c);
void rm_events_destroy(redmutex_client *c);

#endif
