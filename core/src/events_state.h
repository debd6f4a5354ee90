/*
 * Lost-lock news (events.c): the queue's state, embedded in the client as
 * c->events; events.c's alone, guarded by c->mu.
 */
#ifndef REDMUTEX_EVENTS_STATE_H
#define REDMUTEX_EVENTS_STATE_H

#include "internal.h"

typedef struct rm_fd_event rm_fd_event;

/* The queue: c->events, events.c's alone, guarded by c->mu. */
typedef struct rm_events {
    rm_fd_event *head, *tail;
    size_t n_due;     /* entries still due to the event fd */
    uint64_t dropped; /* entries dropped unread (the queue was full) */
    int fd;           /* the event fd: -1 until redmutex_client_event_fd() makes it */
} rm_events;

#endif
