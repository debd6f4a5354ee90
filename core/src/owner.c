/*
 * Whom a lock operation acts for: the checks every operation makes of its
 * handle, the owner key of the local hold, and what the owner is stored as
 * on the servers (a fresh token, or the owner id in the kind's form).
 */
#define _GNU_SOURCE
#include "client.h"
#include "handle.h"
#include "internal.h"
#include "kind.h"

#include <inttypes.h>
#include <string.h>

int rm_lock_check_handle(rm_err *err, redmutex_lock *l, const char *fn)
{
    if (!l)
        return rm_fail(err, REDMUTEX_EINVAL, "%s: lock is NULL", fn);
    return rm_client_usable(err, l->c);
}

/* The owner key of the local hold: explicit owner, thread owner (rlock) or "" (plain default). */
int rm_lock_resolve_owner(rm_err *err, redmutex_lock *l, const char *owner, char out[RM_VALUE_MAX + 1])
{
    if (owner) {
        size_t len = strnlen(owner, REDMUTEX_OWNER_MAX + 1);
        if (len == 0)
            return rm_fail(err, REDMUTEX_EINVAL, "lock '%s': owner id is empty (pass NULL for the default owner)",
                           l->name);
        if (len > REDMUTEX_OWNER_MAX)
            return rm_fail(err, REDMUTEX_EINVAL, "lock '%s': owner id is longer than %d bytes", l->name,
                           REDMUTEX_OWNER_MAX);
        const rm_kind_ops *ops = rm_kind_of(l);
        const char *why = ops->refuse_owner ? ops->refuse_owner(l, owner) : NULL;
        if (why)
            return rm_fail(err, REDMUTEX_EINVAL,
                           "lock '%s': owner id '%s' cannot be used for this kind of lock: it %s; nothing was sent",
                           l->name, owner, why);
        memcpy(out, owner, len + 1);
    } else if (!rm_kind_of(l)->anonymous) {
        /* "<client id>:<thread id>", as redmutex_client_thread_owner() writes it (twice per pair) */
        memcpy(out, l->c->id, REDMUTEX_CLIENT_ID_LEN);
        out[REDMUTEX_CLIENT_ID_LEN] = ':';
        rm_i64_str(out + REDMUTEX_CLIENT_ID_LEN + 1, rm_thread_id());
    } else {
        out[0] = '\0';
    }
    return 0;
}

/* What an owner is stored as on the servers, for the kinds whose value is
   not a fresh token: the owner id, or the kind's form of it (kind.h). */
void rm_lock_owner_field(const redmutex_lock *l, const char *owner_key, char out[RM_VALUE_MAX + 1])
{
    rm_kind_of(l)->field(l, owner_key, out);
}

/* A fresh 128-bit random token (lock value, latch id). Fails closed: a
   predictable token would let another client release or extend the lock. */
int rm_new_token(rm_err *err, char out[33])
{
    unsigned char b[16];
    if (rm_random_bytes(b, sizeof b) != 0)
        return rm_fail(err, REDMUTEX_ESYSTEM, "the system gave no random bytes (getrandom failed); nothing was sent");
    rm_hex(out, b, sizeof b);
    return 0;
}

int rm_lock_check_wait(rm_err *err, const redmutex_lock *l, int64_t ms)
{
    if (ms == REDMUTEX_WAIT_FOREVER || (ms >= 0 && ms <= REDMUTEX_TIME_MAX_MS))
        return 0;
    return rm_fail(err, REDMUTEX_EINVAL,
                   "lock '%s': wait of %" PRId64 " ms is invalid (0..%" PRId64 ", or REDMUTEX_WAIT_FOREVER)", l->name,
                   ms, (int64_t)REDMUTEX_TIME_MAX_MS);
}

void rm_lock_channel(const redmutex_lock *l, const char *value, char *buf)
{
    rm_kind_of(l)->wait_channel(l, value, buf);
}
