/*
 * Lock handles (handle.c): the struct, the room a lock's keys and values
 * take, and whom an operation acts for (owner.c).
 */
#ifndef REDMUTEX_HANDLE_H
#define REDMUTEX_HANDLE_H

#include "client.h"

/* ---- holds, locks ---------------------------------------------------- */

struct redmutex_lock {
    redmutex_client *c;
    uint64_t id; /* redmutex_lock_id(): process-unique, never reused */
    int refs;    /* user + holds + work in progress on it (c->mu); see lifetime.c */
    redmutex_kind kind;
    redmutex_lock_options opts;
    struct rm_hold *holds; /* this handle's holds; guarded by c->mu */
    int64_t released_ns;   /* when this handle last released the lock (c->mu) */
    bool contended;        /* its last acquisition had to wait (c->mu) */
    /* Servers that must grant a hold (and vouch for it while it lives): the
       client's majority, or more for a semaphore (semaphore.c). */
    size_t quorum;
    int64_t permits; /* a semaphore's capacity (kind_sem.c), else 0 */
    bool resize;     /* a semaphore whose acquisitions set its capacity to `permits` */
    size_t name_len;
    char name[]; /* the other keys of the lock are derived from it */
};

/* Room for any key derived from a lock name (channel, fencing counter, latch). */
#define RM_KEY_MAX (REDMUTEX_NAME_MAX + 96)

/* RM_VALUE_MAX, an owner's value on the servers: internal.h. */

/* ---- the handle (handle.c, owner.c) ------------------------------------- */

/**
 * Makes a handle of any kind, internal ones included (a semaphore's), with
 * options already loaded: what redmutex_lock_new does after its checks of
 * the kind and the options' version. 0 or an error code (message set).
 */
int rm_lock_make(rm_err *err, redmutex_lock **out, redmutex_client *c, const char *name, redmutex_kind kind,
                 const redmutex_lock_options *o);
/** The lease of a hold made through l: its own, or the client's watchdog lease. */
int64_t rm_lock_lease_ms(const redmutex_lock *l);
/** l is not NULL and its client usable: 0, or an error code (message set). */
int rm_lock_check_handle(rm_err *err, redmutex_lock *l, const char *fn);
/** A wait of ms is valid (0..REDMUTEX_TIME_MAX_MS or REDMUTEX_WAIT_FOREVER): 0 or REDMUTEX_EINVAL. */
int rm_lock_check_wait(rm_err *err, const redmutex_lock *l, int64_t ms);
/** The owner key of the local hold: explicit owner, thread owner (reentrant kinds) or "" (plain default). */
int rm_lock_resolve_owner(rm_err *err, redmutex_lock *l, const char *owner, char out[RM_VALUE_MAX + 1]);
/** What an owner is stored as on the servers, for the kinds whose value is not a fresh token. */
void rm_lock_owner_field(const redmutex_lock *l, const char *owner_key, char out[RM_VALUE_MAX + 1]);
/** A fresh 128-bit random token in hex (lock value, latch id). 0 or REDMUTEX_ESYSTEM: fails closed. */
int rm_new_token(rm_err *err, char out[33]);
/** A server's name for messages (its URL, password masked). */
static inline const char *rm_lock_server(const redmutex_lock *l, size_t i) { return l->c->pool.servers[i].ep.display; }

/**
 * The channel a waiter for `value` listens on, written into buf (RM_KEY_MAX +
 * RM_VALUE_MAX + 48 bytes: a fair lock's waiter has a channel of its own).
 */
void rm_lock_channel(const redmutex_lock *l, const char *value, char *buf);

#endif
