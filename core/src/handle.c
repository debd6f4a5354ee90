/*
 * Lock handles: their options (versioned), creation, name and kind, and the
 * lease a hold made through one gets. (Reference counts and freeing:
 * lifetime.c.)
 */
#define _GNU_SOURCE
#include "client.h"
#include "handle.h"
#include "internal.h"
#include "kind.h"
#include "lifetime.h"
#include "options.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

static const redmutex_lock_options default_lock_options = REDMUTEX_LOCK_OPTIONS_INIT;

/* The struct's size in each version (options.c); a new version appends its size. */
static const size_t lock_options_sizes[] = {
    0, RM_OPTIONS_END(redmutex_lock_options, on_lost_payload), /* 1 */
};
_Static_assert(sizeof lock_options_sizes / sizeof lock_options_sizes[0] == REDMUTEX_LOCK_OPTIONS_VERSION + 1,
               "one size per lock options version");

static const rm_options_layout lock_options_layout = {"lock options", "redmutex_lock_options_init",
                                                      &default_lock_options, lock_options_sizes,
                                                      REDMUTEX_LOCK_OPTIONS_VERSION + 1};

int redmutex_lock_options_init(redmutex_lock_options *opts, unsigned int version)
{
    rm_err e_, *err = rm_err_reset(&e_);
    return rm_publish(err, rm_options_init(err, opts, version, &lock_options_layout));
}

static int check_lock_options(rm_err *err, const redmutex_lock_options *o)
{
    if (o->flags & ~(uint32_t)REDMUTEX_LOCK_FENCING)
        return rm_fail(err, REDMUTEX_EINVAL, "lock options: unknown flags 0x%x", o->flags);
    if (o->lease_ms != 0 && (o->lease_ms < 10 || o->lease_ms > REDMUTEX_TIME_MAX_MS))
        return rm_fail(err, REDMUTEX_EINVAL,
                       "lease_ms = %" PRId64 " is out of range (0 for the watchdog, or 10..%" PRId64 ")", o->lease_ms,
                       (int64_t)REDMUTEX_TIME_MAX_MS);
    if (o->max_hold_ms < 0 || o->max_hold_ms > REDMUTEX_TIME_MAX_MS)
        return rm_fail(err, REDMUTEX_EINVAL, "max_hold_ms = %" PRId64 " is out of range (0..%" PRId64 ")",
                       o->max_hold_ms, (int64_t)REDMUTEX_TIME_MAX_MS);
    if (o->max_extensions < 0)
        return rm_fail(err, REDMUTEX_EINVAL, "max_extensions = %" PRId64 " is negative", o->max_extensions);
    return 0;
}

static _Atomic uint64_t last_lock_id;

/* A new process-unique lock id (> 0). */
static uint64_t next_lock_id(void) { return atomic_fetch_add(&last_lock_id, 1) + 1; }

int rm_lock_make(rm_err *err, redmutex_lock **out, redmutex_client *c, const char *name, redmutex_kind kind,
                 const redmutex_lock_options *o)
{
    size_t len = strnlen(name, REDMUTEX_NAME_MAX + 1);
    if (len == 0)
        return rm_fail(err, REDMUTEX_EINVAL, "lock name is empty");
    if (len > REDMUTEX_NAME_MAX)
        return rm_fail(err, REDMUTEX_EINVAL, "lock name is longer than %d bytes", REDMUTEX_NAME_MAX);
    int rc = check_lock_options(err, o);
    if (rc)
        return rc;
    redmutex_lock *l = calloc(1, sizeof *l + len + 1);
    if (!l)
        return rm_fail(err, REDMUTEX_ENOMEM, "out of memory");
    l->c = c;
    l->id = next_lock_id();
    l->refs = 1; /* the user's */
    l->kind = kind;
    l->opts = *o;
    l->quorum = c->quorum;
    l->name_len = len;
    memcpy(l->name, name, len + 1);
    rm_client_lock(c);
    if (c->life.closed) {
        rm_client_unlock(c);
        free(l);
        return rm_fail(err, REDMUTEX_ECLOSED, "the client was closed");
    }
    c->life.refs++;
    rm_client_unlock(c);
    *out = l;
    return 0;
}

int redmutex_lock_new(redmutex_lock **out, redmutex_client *c, const char *name, redmutex_kind kind,
                      const redmutex_lock_options *opts)
{
    rm_err e_, *err = rm_err_reset(&e_);
    if (!out || !c || !name)
        return rm_publish(err, rm_fail(err, REDMUTEX_EINVAL, "redmutex_lock_new: %s is NULL",
                                       !out ? "out"
                                       : !c ? "client"
                                            : "name"));
    size_t len = strnlen(name, REDMUTEX_NAME_MAX + 1);
    if (len == 0)
        return rm_publish(err, rm_fail(err, REDMUTEX_EINVAL, "lock name is empty"));
    if (len > REDMUTEX_NAME_MAX)
        return rm_publish(err, rm_fail(err, REDMUTEX_EINVAL, "lock name is longer than %d bytes", REDMUTEX_NAME_MAX));
    if (!rm_kind_valid((int)kind))
        return rm_publish(err, rm_fail(err, REDMUTEX_EINVAL, "unknown lock kind %d", (int)kind));
    redmutex_lock_options o;
    int rc = rm_options_load(err, &o, opts, &lock_options_layout, "redmutex_lock_new");
    if (rc == 0)
        rc = rm_lock_make(err, out, c, name, kind, &o);
    return rm_publish(err, rc);
}

const char *redmutex_lock_name(const redmutex_lock *l) { return l ? l->name : ""; }

redmutex_kind redmutex_lock_kind(const redmutex_lock *l) { return l ? l->kind : REDMUTEX_KIND_LOCK; }

uint64_t redmutex_lock_id(const redmutex_lock *l) { return l ? l->id : 0; }

int64_t rm_lock_lease_ms(const redmutex_lock *l)
{
    return l->opts.lease_ms ? l->opts.lease_ms : l->c->opts.watchdog_lease_ms;
}
