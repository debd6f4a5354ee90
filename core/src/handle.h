/*
 * Lock handles (handle.c): the struct, and the room a lock's keys and
 * values take.
 */
#ifndef REDMUTEX_HANDLE_H
#define REDMUTEX_HANDLE_H

#include "client.h"

/* ---- holds, locks ---------------------------------------------------- */

struct redmutex_lock {
    redmutex_client *c;
    uint64_t id;           /* redmutex_lock_id(): process-unique, never reused */
    int refs;              /* user + holds + work in progress on it (c->mu); see lifetime.c */
    redmutex_kind kind;
    redmutex_lock_options opts;
    struct rm_hold *holds; /* this handle's holds; guarded by c->mu */
    int64_t released_ns;   /* when this handle last released the lock (c->mu) */
    bool contended;        /* its last acquisition had to wait (c->mu) */
    size_t name_len;
    char name[];           /* the other keys of the lock are derived from it */
};

/* Room for any key derived from a lock name (channel, fencing counter, latch). */
#define RM_KEY_MAX (REDMUTEX_NAME_MAX + 96)

/* An owner's value on the servers: token, owner id, or owner id + ":write" (kind.h). */
#define RM_VALUE_MAX (REDMUTEX_CLIENT_ID_LEN + 24 > REDMUTEX_OWNER_MAX ? REDMUTEX_CLIENT_ID_LEN + 24 : REDMUTEX_OWNER_MAX + 8)

#endif
