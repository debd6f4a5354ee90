/*
 * The per-kind operations table (kind.h) and the key naming every kind shares.
 */
#define _GNU_SOURCE
#include "kind.h"

#include <stdio.h>
#include <string.h>

extern const rm_kind_ops rm_fair_ops; /* kind_fair.c */
extern const rm_kind_ops rm_rw_ops;   /* kind_rw.c: both sides of a read-write lock */

const rm_kind_ops *rm_kind_ops_of(redmutex_kind kind)
{
    switch (kind) {
    case REDMUTEX_KIND_FAIR:
        return &rm_fair_ops;
    case REDMUTEX_KIND_READ:
    case REDMUTEX_KIND_WRITE:
        return &rm_rw_ops;
    default:
        return NULL;
    }
}

bool rm_kind_valid(int kind)
{
    return kind >= REDMUTEX_KIND_LOCK && kind <= REDMUTEX_KIND_WRITE;
}

char rm_kind_renew_tag(redmutex_kind kind)
{
    switch (kind) {
    case REDMUTEX_KIND_LOCK:
        return 's';
    case REDMUTEX_KIND_READ:
        return 'r';
    default:
        return 'h';
    }
}

const char *rm_derived_key(const redmutex_lock *l, const char *prefix, const char *suffix, char *out,
                           size_t size)
{
    bool braces = memchr(l->name, '{', l->name_len) == NULL;
    snprintf(out, size, "%s%s%s%s%s%s", prefix ? prefix : "", prefix ? ":" : "", braces ? "{" : "", l->name,
             braces ? "}" : "", suffix);
    return out;
}
