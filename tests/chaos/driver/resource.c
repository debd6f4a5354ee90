/*
 * The resource the locks protect, on a Redis server the harness never
 * faults: a naive counter (GET, work, SET: loses updates unless the lock
 * excludes), a fenced register (accepts a write only with a token larger
 * than any it accepted, and logs what it accepted), and a CAS register.
 * The Lua texts are the same as the Python driver's (tests/chaos/chaoslib/resource.py).
 */
#include "driver.h"

#include <stdio.h>
#include <string.h>
#include <sys/time.h>

static const char FENCED_SCRIPT[] =
    "local max = tonumber(redis.call('GET', KEYS[1]) or '0') "
    "local tok = tonumber(ARGV[1]) "
    "if tok > max then "
    "  redis.call('SET', KEYS[1], ARGV[1]) "
    "  redis.call('RPUSH', KEYS[2], ARGV[1] .. '|' .. ARGV[2]) "
    "  return 1 "
    "end "
    "redis.call('RPUSH', KEYS[3], ARGV[1] .. '|' .. ARGV[2]) "
    "return 0";

static const char CAS_SCRIPT[] =
    "local v = redis.call('GET', KEYS[1]) or '0' "
    "if v == ARGV[1] then redis.call('SET', KEYS[1], ARGV[2]) return 1 end "
    "return 0";

int drv_resource_open(drv_resource *r, const drv_config *cfg)
{
    struct timeval tv = {2, 0};
    r->cfg = cfg;
    r->rc = redisConnectWithTimeout(cfg->resource_host, cfg->resource_port, tv);
    if (!r->rc || r->rc->err) {
        if (r->rc)
            redisFree(r->rc);
        r->rc = NULL;
        return -1;
    }
    redisSetTimeout(r->rc, tv);
    return 0;
}

void drv_resource_close(drv_resource *r)
{
    if (r->rc)
        redisFree(r->rc);
    r->rc = NULL;
}

/* One command; the reply or NULL (the connection is re-made on the next call). */
static redisReply *command(drv_resource *r, const char *fmt, ...)
{
    if (!r->rc && drv_resource_open(r, r->cfg) != 0)
        return NULL;
    va_list ap;
    va_start(ap, fmt);
    redisReply *rep = redisvCommand(r->rc, fmt, ap);
    va_end(ap);
    if (!rep)
        drv_resource_close(r);
    return rep;
}

static int integer_of(redisReply *rep, long long *out)
{
    if (!rep)
        return -1;
    int ok = 0;
    if (rep->type == REDIS_REPLY_NIL)
        *out = 0;
    else if (rep->type == REDIS_REPLY_STRING)
        *out = strtoll(rep->str, NULL, 10);
    else if (rep->type == REDIS_REPLY_INTEGER)
        *out = rep->integer;
    else
        ok = -1;
    freeReplyObject(rep);
    return ok;
}

int drv_resource_read(drv_resource *r, const char *key, long long *counter, long long *cas)
{
    if (integer_of(command(r, "GET ctr:%s", key), counter) != 0)
        return -1;
    return integer_of(command(r, "GET cas:%s", key), cas);
}

int drv_resource_set_counter(drv_resource *r, const char *key, long long value)
{
    redisReply *rep = command(r, "SET ctr:%s %lld", key, value);
    int ok = rep && rep->type == REDIS_REPLY_STATUS ? 0 : -1;
    if (rep)
        freeReplyObject(rep);
    return ok;
}

int drv_resource_fenced_write(drv_resource *r, const char *key, long long token, const char *hold_id)
{
    long long v;
    if (integer_of(command(r, "EVAL %s 3 fmax:%s flog:%s frej:%s %lld %s", FENCED_SCRIPT, key, key, key, token,
                           hold_id),
                   &v) != 0)
        return -1;
    return (int)v;
}

int drv_resource_cas(drv_resource *r, const char *key, long long expect, long long value)
{
    long long v;
    if (integer_of(command(r, "EVAL %s 1 cas:%s %lld %lld", CAS_SCRIPT, key, expect, value), &v) != 0)
        return -1;
    return (int)v;
}
