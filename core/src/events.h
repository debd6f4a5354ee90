/*
 * Lost-lock news (events.c): one queue, filled by one producer (a hold's
 * change of state, watchdog.c) and read by two consumers: the event fd
 * (redmutex_client_next_event, on the program's thread) and the lock's
 * on_lost and the client's log callbacks (on the watchdog thread).
 */
#ifndef REDMUTEX_EVENTS_H
#define REDMUTEX_EVENTS_H

/* Only internal.h: client.h embeds rm_events, so this comes before it. */
#include "internal.h"

/* ---- pollable events (events.c) ---------------------------------------------- */

typedef struct rm_fd_event rm_fd_event;

/* The queue: c->events, events.c's alone, guarded by c->mu. */
typedef struct rm_events {
    rm_fd_event *head, *tail;
    size_t n_due;     /* entries still due to the event fd */
    uint64_t dropped; /* entries dropped unread (the queue was full) */
    int fd;           /* the event fd: -1 until redmutex_client_event_fd() makes it */
} rm_events;

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
                    bool log);
/** Takes the oldest event still due to the callbacks into *out; false when none. Caller holds c->mu. */
bool rm_events_take_callback(redmutex_client *c, rm_callback_event *out);
/** Forgets the callbacks still due to l (its handle is being freed); its fd events stay. Caller holds c->mu. */
void rm_events_forget_lock(redmutex_client *c, struct redmutex_lock *l);
void rm_events_after_fork(redmutex_client *c);
void rm_events_destroy(redmutex_client *c);

#endif
