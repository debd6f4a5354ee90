/*
 * Argument checks and keyword options, in one place for every language.
 *
 * The languages' typemaps only classify a value (nil, bool, int, float,
 * string, other); whether it is acceptable, and the message when it is not,
 * is decided here, so `lease: Float::NAN` in Ruby and `lease => "nan"` in
 * Perl fail the same way, before anything is sent.
 */
#include "binding.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static const char *type_of(const rmb_value *v)
{
    switch (v->kind) {
    case RMB_MISSING:
        return "nothing";
    case RMB_NIL:
        return v->type ? v->type : "nil";
    default:
        return v->type ? v->type : "a value of another type";
    }
}

int rmb_text(const char **out, const rmb_value *v, const char *what, size_t max)
{
    if (!v->s)
        return rmb_fail(REDMUTEX_EINVAL, "%s must be a string, not %s", what, type_of(v));
    if (v->len == 0)
        return rmb_fail(REDMUTEX_EINVAL, "%s is empty", what);
    if (v->has_nul || memchr(v->s, '\0', v->len))
        return rmb_fail(REDMUTEX_EINVAL, "%s contains a NUL character, which the C API cannot pass", what);
    if (v->len > max)
        return rmb_fail(REDMUTEX_EINVAL, "%s is %zu bytes long; at most %zu are allowed", what, v->len, max);
    *out = v->s;
    return 0;
}

int rmb_seconds(int64_t *out, const rmb_value *v, const char *what, bool allow_zero, bool allow_forever)
{
    if (allow_forever && v->kind == RMB_NIL) {
        *out = REDMUTEX_WAIT_FOREVER;
        return 0;
    }
    if (!v->numeric)
        return rmb_fail(REDMUTEX_EINVAL, "%s must be a number of seconds, not %s", what, type_of(v));
    double s = v->d;
    if (isnan(s))
        return rmb_fail(REDMUTEX_EINVAL, "%s must be a finite number of seconds, not NaN", what);
    if (isinf(s))
        return rmb_fail(REDMUTEX_EINVAL, "%s must be a finite number of seconds, not %sinfinity", what,
                        s < 0 ? "-" : "");
    if (allow_forever && s == -1) {
        *out = REDMUTEX_WAIT_FOREVER;
        return 0;
    }
    if (s < 0)
        return rmb_fail(REDMUTEX_EINVAL, "%s must not be negative (got %g)", what, s);
    if (s > (double)REDMUTEX_TIME_MAX_MS / 1000)
        return rmb_fail(REDMUTEX_EINVAL, "%s of %g seconds is too long; at most %lld seconds (one year) are allowed",
                        what, s, (long long)(REDMUTEX_TIME_MAX_MS / 1000));
    /* Round to microseconds first so that 0.1 s is 100 ms, not 101. */
    int64_t ms = (int64_t)ceil(round(s * 1e6) / 1e3);
    if (ms == 0 && !allow_zero)
        return rmb_fail(REDMUTEX_EINVAL, "%s must be positive (got %g)", what, s);
    *out = ms;
    return 0;
}

static int count(int64_t *out, const rmb_value *v, const char *what)
{
    if (!v->numeric || !v->integral)
        return rmb_fail(REDMUTEX_EINVAL, "%s must be an integer, not %s", what, type_of(v));
    if (v->i < 0)
        return rmb_fail(REDMUTEX_EINVAL, "%s must not be negative (got %lld)", what, (long long)v->i);
    if (v->i > ((int64_t)1 << 62))
        return rmb_fail(REDMUTEX_EINVAL, "%s is too large (got %lld)", what, (long long)v->i);
    *out = v->i;
    return 0;
}

int rmb_flag(bool *out, const rmb_value *v, const char *what)
{
    if (v->kind == RMB_MISSING) {
        *out = false;
        return 0;
    }
    if (v->kind == RMB_BOOL || v->truth >= 0) {
        *out = v->kind == RMB_BOOL ? v->i != 0 : v->truth != 0;
        return 0;
    }
    return rmb_fail(REDMUTEX_EINVAL, "%s must be true or false, not %s", what, type_of(v));
}

/* ---- option tables ------------------------------------------------------ */

typedef enum opt_type {
    OPT_SECONDS,          /* >= 0 */
    OPT_SECONDS_POSITIVE, /* > 0 */
    OPT_WAIT,             /* >= 0, or nil / -1 for forever */
    OPT_COUNT,
    OPT_FLAG,
    OPT_OWNER
} opt_type;

typedef struct opt {
    const char *name;
    opt_type type;
    size_t offset; /* into rmb_settings */
    uint32_t bit;  /* OPT_FLAG: the flag bit set at offset */
} opt;

#define CLIENT(field) offsetof(rmb_settings, client.field)
#define LOCK(field) offsetof(rmb_settings, lock.field)

static const opt client_opts[] = {
    {"watchdog_lease", OPT_SECONDS_POSITIVE, CLIENT(watchdog_lease_ms), 0},
    {"connect_timeout", OPT_SECONDS, CLIENT(connect_timeout_ms), 0},
    {"command_timeout", OPT_SECONDS, CLIENT(command_timeout_ms), 0},
    {"wait_backoff_cap", OPT_SECONDS, CLIENT(wait_backoff_cap_ms), 0},
    {"min_replicas", OPT_COUNT, CLIENT(min_replicas), 0},
    {"replica_timeout", OPT_SECONDS, CLIENT(replica_timeout_ms), 0},
    {"retry_count", OPT_COUNT, CLIENT(retry_count), 0},
    {"retry_delay", OPT_SECONDS, CLIENT(retry_delay_ms), 0},
    {"shutdown_timeout", OPT_SECONDS, CLIENT(shutdown_timeout_ms), 0},
    {"leave_locks_on_close", OPT_FLAG, CLIENT(flags), REDMUTEX_CLIENT_LEAVE_LOCKS_ON_FREE},
    {NULL, 0, 0, 0},
};

static const opt lock_opts[] = {
    {"lease", OPT_SECONDS_POSITIVE, LOCK(lease_ms), 0},
    {"timeout", OPT_WAIT, offsetof(rmb_settings, timeout_ms), 0},
    {"fencing", OPT_FLAG, LOCK(flags), REDMUTEX_LOCK_FENCING},
    {"owner", OPT_OWNER, offsetof(rmb_settings, owner), 0},
    {"max_hold", OPT_SECONDS_POSITIVE, LOCK(max_hold_ms), 0},
    {"max_extensions", OPT_COUNT, LOCK(max_extensions), 0},
    {NULL, 0, 0, 0},
};

/* A semaphore's (client.semaphore(name, permits, ...)): a lock's but owner, and resize. */
static const opt semaphore_opts[] = {
    {"lease", OPT_SECONDS_POSITIVE, LOCK(lease_ms), 0},
    {"timeout", OPT_WAIT, offsetof(rmb_settings, timeout_ms), 0},
    {"fencing", OPT_FLAG, LOCK(flags), REDMUTEX_LOCK_FENCING},
    {"resize", OPT_FLAG, offsetof(rmb_settings, semaphore_flags), REDMUTEX_SEMAPHORE_RESIZE},
    {"max_hold", OPT_SECONDS_POSITIVE, LOCK(max_hold_ms), 0},
    {"max_extensions", OPT_COUNT, LOCK(max_extensions), 0},
    {NULL, 0, 0, 0},
};

static const opt wait_opts[] = {
    {"timeout", OPT_WAIT, offsetof(rmb_settings, timeout_ms), 0},
    {NULL, 0, 0, 0},
};

static const opt *table_for(rmb_scope scope)
{
    return scope == RMB_SCOPE_CLIENT      ? client_opts
           : scope == RMB_SCOPE_LOCK      ? lock_opts
           : scope == RMB_SCOPE_SEMAPHORE ? semaphore_opts
                                          : wait_opts;
}

static const char *scope_name(rmb_scope scope)
{
    return scope == RMB_SCOPE_CLIENT      ? "a client"
           : scope == RMB_SCOPE_LOCK      ? "a lock"
           : scope == RMB_SCOPE_SEMAPHORE ? "a semaphore"
                                          : "a scoped lock";
}

static int unknown_option(rmb_scope scope, const char *key, size_t len)
{
    char known[400] = "";
    for (const opt *o = table_for(scope); o->name; o++) {
        strncat(known, o->name, sizeof known - strlen(known) - 1);
        if (o[1].name)
            strncat(known, ", ", sizeof known - strlen(known) - 1);
    }
    return rmb_fail(REDMUTEX_EINVAL, "unknown option '%.*s' for %s; known options: %s", (int)(len > 100 ? 100 : len),
                    key, scope_name(scope), known);
}

/* Tcl spells options -lease; the other languages lease. */
static const opt *find(rmb_scope scope, const rmb_value *key)
{
    const char *k = key->s;
    size_t len = key->len;
    if (len > 1 && k[0] == '-') {
        k++;
        len--;
    }
    for (const opt *o = table_for(scope); o->name; o++)
        if (strlen(o->name) == len && memcmp(o->name, k, len) == 0)
            return o;
    return NULL;
}

static int apply(rmb_settings *s, const opt *o, const rmb_value *v)
{
    char *field = (char *)s + o->offset;
    switch (o->type) {
    case OPT_SECONDS:
        return rmb_seconds((int64_t *)field, v, o->name, true, false);
    case OPT_SECONDS_POSITIVE:
        return rmb_seconds((int64_t *)field, v, o->name, false, false);
    case OPT_WAIT:
        s->has_timeout = true;
        return rmb_seconds((int64_t *)field, v, o->name, true, true);
    case OPT_COUNT:
        return count((int64_t *)field, v, o->name);
    case OPT_OWNER:
        return v->kind == RMB_NIL ? 0 : rmb_text((const char **)field, v, o->name, REDMUTEX_OWNER_MAX);
    case OPT_FLAG: {
        bool on = false;
        if (rmb_flag(&on, v, o->name) != 0)
            return REDMUTEX_EINVAL;
        uint32_t *bits = (uint32_t *)field;
        *bits = on ? (*bits | o->bit) : (*bits & ~o->bit);
        return 0;
    }
    }
    return rmb_fail(REDMUTEX_EINVAL, "option %s has no type", o->name);
}

int rmb_settings_parse(rmb_settings *out, rmb_scope scope, const rmb_kwargs *kwargs)
{
    memset(out, 0, sizeof *out);
    redmutex_client_options_init(&out->client, REDMUTEX_CLIENT_OPTIONS_VERSION);
    redmutex_lock_options_init(&out->lock, REDMUTEX_LOCK_OPTIONS_VERSION);
    out->timeout_ms = REDMUTEX_WAIT_FOREVER;
    if (!kwargs)
        return 0;
    if (kwargs->too_many)
        return rmb_fail(REDMUTEX_EINVAL, "too many options (at most %d)", RMB_KWARGS_MAX);
    if (kwargs->odd)
        return rmb_fail(REDMUTEX_EINVAL, "options come in name/value pairs; the last name has no value");
    for (size_t i = 0; i < kwargs->n; i++) {
        const rmb_value *key = &kwargs->keys[i];
        if (!key->s)
            return rmb_fail(REDMUTEX_EINVAL, "option names must be strings, not %s", type_of(key));
        const opt *o = find(scope, key);
        if (!o)
            return unknown_option(scope, key->s, key->len);
        if (apply(out, o, &kwargs->values[i]) != 0)
            return REDMUTEX_EINVAL;
    }
    return 0;
}
