/*
 * The plain lock (REDMUTEX_KIND_LOCK): redis-py's Lock wire format, so a
 * redis-py Lock and a redmutex plain lock exclude each other.
 *
 * Keys (NAME in braces unless it has a '{'):
 *   NAME    string: the holder's value (a fresh random token per
 *           acquisition, or the explicit owner id), with the lease as TTL.
 *   redisson_lock__channel:{NAME}   channel: a release publishes "0".
 *   redisson_lock_token:{NAME}      the fencing counter (REDMUTEX_LOCK_FENCING).
 *   redisson_unlock_latch:{NAME}:<request id>   a release's unlock latch.
 *
 * Without fencing the lock is taken by the bare SET NX PX redis-py sends; a
 * waiting acquirer pipelines PTTL NAME behind it to learn the holder's TTL.
 * Not reentrant: an owner holds it once. A holder named by no owner is
 * anonymous, known by its token only, and releases through the same handle.
 */
#define _GNU_SOURCE
#include "fanout.h"
#include "handle.h"
#include "internal.h"
#include "kind.h"
#include "lua.h"
#include "scripts.h"

#include <inttypes.h>
#include <string.h>

/* ---- Lua ---------------------------------------------------------------------- */

/* clang-format off */

/* RM_SCRIPT_LOCK_ACQUIRE: KEYS name, token key; ARGV token, lease ms, fencing 0/1.
   (Without fencing the plain lock is taken by a bare SET NX PX instead.) */
const char rm_lua_lock_acquire[] =
        "if ARGV[3] == '1' then\n" RM_LUA_FENCE_CHECK("KEYS[2]") RM_LUA_MAY_DEF
        "  if not may('incr', KEYS[2]) then " RM_LUA_NOPERM("INCR the fencing counter") " end\n"
        "end\n"
        "if redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then\n"
        "  local f = 0\n"
        "  if ARGV[3] == '1' then f = redis.call('incr', KEYS[2]) end\n"
        "  return {1, 1, f}\n"
        "end\n"
        "local t = redis.call('type', KEYS[1])['ok']\n"
        "if t ~= 'string' and t ~= 'none' then return " RM_LUA_WRONGTYPE " end\n"
        "return {0, redis.call('pttl', KEYS[1])}\n";

/* RM_SCRIPT_LOCK_RELEASE: KEYS name, channel, latch; ARGV token, latch ms,
   the publish command (RM_ARG_PUBLISH: spublish on a 7.0+ cluster).
   Returns 1 when deleted, nil when the token does not match. A latch left
   by an earlier attempt with the same request id answers a retry. */
const char rm_lua_lock_release[] =
        "local l = redis.call('get', KEYS[3])\n"
        "if l ~= false then return tonumber(l) end\n"
        "if redis.call('get', KEYS[1]) ~= ARGV[1] then return nil end\n" RM_LUA_MAY_DEF
        "if not may(ARGV[3], KEYS[2], '0') then " RM_LUA_NOPERM("PUBLISH the release") " end\n"
        "if not may('set', KEYS[3], '1', 'px', ARGV[2]) then " RM_LUA_NOPERM("SET the unlock latch") " end\n"
        "redis.call('del', KEYS[1])\n"
        "redis.call(ARGV[3], KEYS[2], '0')\n"
        "redis.call('set', KEYS[3], 1, 'px', ARGV[2])\n"
        "return 1\n";

/* RM_SCRIPT_LOCK_EXTEND: KEYS name; ARGV token, ms, mode (0 add, 1 replace),
   longest TTL. Returns the new TTL, or 0 when the token does not match. */
const char rm_lua_lock_extend[] =
        "if redis.call('get', KEYS[1]) ~= ARGV[1] then return 0 end\n"
        RM_LUA_EXTEND_TTL;

/* clang-format on */

/* ---- commands ------------------------------------------------------------------ */

/* The bare SET NX PX (argv[6..7] hold "PTTL NAME" for plain_ttl_probe), or the fencing script. */
static rm_cmd plain_acquire(const redmutex_lock *l, const rm_acq_in *in, rm_kargs *st)
{
    rm_i64_str(st->num[0], in->lease_ms);
    if (!in->fencing) {
        const char *argv[] = {"SET", l->name, in->value, "NX", "PX", st->num[0], "PTTL", l->name};
        memcpy(st->argv, argv, sizeof argv);
        return (rm_cmd){-1, 6, st->argv, NULL};
    }
    const char *token_key = rm_lock_token_key(l, st->key[0], sizeof st->key[0]);
    const char *argv[] = {"2", l->name, token_key, in->value, st->num[0], "1"};
    memcpy(st->argv, argv, sizeof argv);
    return (rm_cmd){RM_SCRIPT_LOCK_ACQUIRE, 6, st->argv, NULL};
}

/* PTTL NAME, pipelined behind the bare SET of plain_acquire (in the same storage). */
static rm_cmd plain_ttl_probe(const rm_cmd *acquire) { return (rm_cmd){-1, 2, acquire->argv + 6, NULL}; }

static rm_cmd plain_release(const redmutex_lock *l, const char *value, const char *latch_key, int64_t lease_ms,
                            int64_t latch_ms, rm_kargs *st)
{
    (void)lease_ms;
    rm_i64_str(st->num[0], latch_ms);
    const char *channel = rm_lock_channel_key(l, st->key[0], sizeof st->key[0]);
    const char *argv[] = {"3", l->name, channel, latch_key, value, st->num[0], RM_ARG_PUBLISH};
    memcpy(st->argv, argv, sizeof argv);
    return (rm_cmd){RM_SCRIPT_LOCK_RELEASE, 7, st->argv, NULL};
}

static rm_cmd plain_extend(const redmutex_lock *l, const char *value, int64_t ms, bool replace, rm_kargs *st)
{
    /* The script caps the new TTL at REDMUTEX_TIME_MAX_MS (adding to the
       remaining TTL could pass it). */
    rm_i64_str(st->num[0], ms);
    rm_i64_str(st->num[1], REDMUTEX_TIME_MAX_MS);
    const char *argv[] = {"1", l->name, value, st->num[0], replace ? "1" : "0", st->num[1]};
    memcpy(st->argv, argv, sizeof argv);
    return (rm_cmd){RM_SCRIPT_LOCK_EXTEND, 6, st->argv, NULL};
}

static rm_cmd plain_inspect(const redmutex_lock *l, const char *value, rm_kargs *st)
{
    const char *argv[] = {"1", l->name, "string", value};
    memcpy(st->argv, argv, sizeof argv);
    return (rm_cmd){RM_SCRIPT_INSPECT, 4, st->argv, NULL};
}

static rm_cmd plain_force(const redmutex_lock *l, rm_kargs *st)
{
    const char *argv[] = {"2", l->name, rm_lock_channel_key(l, st->key[0], sizeof st->key[0]), "string",
                          RM_ARG_PUBLISH};
    memcpy(st->argv, argv, sizeof argv);
    return (rm_cmd){RM_SCRIPT_FORCE_RELEASE, 5, st->argv, NULL};
}

const rm_kind_ops rm_plain_ops = {
    .field = rm_kind_field_is_owner, /* only an explicit owner reaches the servers this way */
    .wait_channel = rm_kind_lock_channel,
    .acquire = plain_acquire,
    .ttl_probe = plain_ttl_probe,
    .release = plain_release,
    .extend = plain_extend,
    .inspect = plain_inspect,
    .force = plain_force,
    .server_queue = false,
    .local_waiters = true,
    .reentrant = false,
    .anonymous = true,
};
