/*
 * The per-kind operations table (kind.h) and the key naming every kind shares.
 */
#define _GNU_SOURCE
#include "handle.h"
#include "kind.h"
#include "scripts.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern const rm_kind_ops rm_plain_ops; /* kind_plain.c */
extern const rm_kind_ops rm_rlock_ops; /* kind_rlock.c */
extern const rm_kind_ops rm_fair_ops;  /* kind_fair.c */
extern const rm_kind_ops rm_rw_ops;    /* kind_rw.c: both sides of a read-write lock */
extern const rm_kind_ops rm_sem_ops;   /* kind_sem.c: a semaphore's permits */

const rm_kind_ops *rm_kind_ops_of(redmutex_kind kind)
{
    if (kind == RM_KIND_SEMAPHORE) /* internal: no value of the public enum */
        return &rm_sem_ops;
    switch (kind) {
    case REDMUTEX_KIND_RLOCK:
        return &rm_rlock_ops;
    case REDMUTEX_KIND_FAIR:
        return &rm_fair_ops;
    case REDMUTEX_KIND_READ:
    case REDMUTEX_KIND_WRITE:
        return &rm_rw_ops;
    default:
        return &rm_plain_ops;
    }
}

bool rm_kind_valid(int kind) { return kind >= REDMUTEX_KIND_LOCK && kind <= REDMUTEX_KIND_WRITE; }

char rm_kind_renew_tag(redmutex_kind kind)
{
    if (kind == RM_KIND_SEMAPHORE)
        return 'p';
    switch (kind) {
    case REDMUTEX_KIND_LOCK:
        return 's';
    case REDMUTEX_KIND_READ:
        return 'r';
    default:
        return 'h';
    }
}

const char *rm_derived_key(const redmutex_lock *l, const char *prefix, const char *suffix, char *out, size_t size)
{
    /* Pieces copied by hand: this runs several times per request. */
    bool braces = memchr(l->name, '{', l->name_len) == NULL;
    size_t plen = prefix ? strlen(prefix) : 0, slen = strlen(suffix);
    if (plen + 1 + l->name_len + 2 + slen + 1 > size) { /* never, with the buffers kind.h names */
        snprintf(out, size, "%s%s%s%s%s%s", prefix ? prefix : "", prefix ? ":" : "", braces ? "{" : "", l->name,
                 braces ? "}" : "", suffix);
        return out;
    }
    size_t n = 0;
    if (prefix) {
        memcpy(out, prefix, plen);
        n = plen;
        out[n++] = ':';
    }
    if (braces)
        out[n++] = '{';
    memcpy(out + n, l->name, l->name_len);
    n += l->name_len;
    if (braces)
        out[n++] = '}';
    memcpy(out + n, suffix, slen + 1);
    return out;
}

size_t rm_message_wakes(const char *channel, const char *msg)
{
    if (strncmp(channel, "redisson_sc:", 12) == 0) {
        /* A semaphore's message is the count of permits free: that many
           waiters may go on (Redisson's SemaphorePubSub releases as many). */
        long long v = strtoll(msg, NULL, 10);
        return v > 1 ? (size_t)v : 1;
    }
    if (strncmp(channel, RM_LATCH_CHANNEL_PREFIX, sizeof RM_LATCH_CHANNEL_PREFIX - 1) == 0)
        return strcmp(msg, "0") == 0 ? SIZE_MAX : 0; /* zero reached: every waiter goes on */
    /* Redisson's read-unlock message (a write lock ended): readers may all go on. */
    return strcmp(msg, "1") == 0 ? SIZE_MAX : 1;
}

const char *rm_lock_channel_key(const redmutex_lock *l, char *out, size_t size)
{
    return rm_derived_key(l, "redisson_lock__channel", "", out, size);
}

const char *rm_lock_token_key(const redmutex_lock *l, char *out, size_t size)
{
    return rm_derived_key(l, "redisson_lock_token", "", out, size);
}

void rm_kind_field_is_owner(const redmutex_lock *l, const char *owner_key, char out[RM_VALUE_MAX + 1])
{
    (void)l;
    memcpy(out, owner_key, RM_VALUE_MAX + 1);
}

void rm_kind_lock_channel(const redmutex_lock *l, const char *value, char out[RM_LONG_KEY_MAX])
{
    (void)value;
    rm_lock_channel_key(l, out, RM_LONG_KEY_MAX);
}

rm_cmd rm_kind_nest_undo(const redmutex_lock *l, const char *value, const char *latch_key, int64_t latch_ms,
                         rm_kargs *st)
{
    rm_i64_str(st->num[0], latch_ms);
    const char *argv[] = {"2", l->name, latch_key, value, st->num[0]};
    memcpy(st->argv, argv, sizeof argv);
    return (rm_cmd){RM_SCRIPT_NEST_UNDO, 5, st->argv, NULL};
}
