/*
 * The reentrant lock (REDMUTEX_KIND_RLOCK): Redisson's RLock wire format, so
 * Redisson and redmutex share the lock.
 *
 * Keys (NAME in braces unless it has a '{'):
 *   NAME    hash: "<client id>:<thread id>" (or the explicit owner id) ->
 *           hold count, with the lease as TTL.
 *   redisson_lock__channel:{NAME}   channel: a final release publishes "0".
 *   redisson_lock_token:{NAME}      the fencing counter (REDMUTEX_LOCK_FENCING).
 *   redisson_unlock_latch:{NAME}:<request id>   a release's unlock latch.
 *
 * Reentrant: each acquisition by the owner adds one to its count, each
 * release takes one away, the last deletes the key. A holder named by no
 * owner is the calling thread (redmutex_client_thread_owner()).
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

/* RM_SCRIPT_RLOCK_ACQUIRE: KEYS name, token key[, a nested acquisition's
   undo latch]; ARGV lease ms, field, fencing 0/1, nested 0/1[, latch ms].
   Redisson's tryLockInner, plus the count and the fencing token in the
   reply. A nested acquisition (the owner believes it holds the lock
   already) is guarded as lua.h says (RM_LUA_NEST_GUARD). A reentrant
   acquisition reports the token of the outer one, and only raises the
   key's TTL (lua.h, RM_LUA_AT_LEAST_DEF): Redisson's sets it to this
   lease, cutting an outer hold with a longer one short. */
const char rm_lua_rlock_acquire[] =
        RM_LUA_NOT_RWLOCK RM_LUA_AT_LEAST_DEF
        "local mine = redis.call('hexists', KEYS[1], ARGV[2]) == 1\n"
        "if ARGV[3] == '1' then\n" RM_LUA_FENCE_CHECK("KEYS[2]") "end\n"
        RM_LUA_NEST_GUARD("4", "KEYS[3]", "ARGV[5]")
        "if ARGV[3] == '1' and not mine then\n" RM_LUA_MAY_DEF
        "  if not may('incr', KEYS[2]) then " RM_LUA_NOPERM("INCR the fencing counter") " end\n"
        "end\n"
        "if mine or (redis.call('exists', KEYS[1]) == 0) then\n"
        "  local n = redis.call('hincrby', KEYS[1], ARGV[2], 1)\n"
        "  if mine then at_least(KEYS[1], ARGV[1]) else redis.call('pexpire', KEYS[1], ARGV[1]) end\n"
        "  local f = 0\n"
        "  if ARGV[3] == '1' then\n"
        "    if n == 1 then f = redis.call('incr', KEYS[2])\n"
        "    else f = tonumber(redis.call('get', KEYS[2]) or '0') end\n"
        "  end\n"
        "  return {1, n, f}\n"
        "end\n"
        "return {0, redis.call('pttl', KEYS[1])}\n";

/* RM_SCRIPT_RLOCK_RELEASE: Redisson's unlockInner, but a release that
   leaves levels behind keeps the key's TTL (Redisson's sets it to the
   releasing handle's lease, which may cut the levels left short; lua.h,
   RM_LUA_AT_LEAST_DEF), and a read-write lock's hash is refused.
   KEYS name, channel, latch; ARGV "0", lease ms (unused), field, "publish",
   latch ms. Returns 1 when deleted, 0 when decremented, nil when not the
   owner. */
const char rm_lua_rlock_release[] =
        "local val = redis.call('get', KEYS[3])\n"
        "if val ~= false then return tonumber(val) end\n" RM_LUA_NOT_RWLOCK
        "if (redis.call('hexists', KEYS[1], ARGV[3]) == 0) then return nil end\n" RM_LUA_MAY_DEF
        "if not may(ARGV[4], KEYS[2], ARGV[1]) then " RM_LUA_NOPERM("PUBLISH the release") " end\n"
        "if not may('set', KEYS[3], '1', 'px', ARGV[5]) then " RM_LUA_NOPERM("SET the unlock latch") " end\n"
        "local counter = redis.call('hincrby', KEYS[1], ARGV[3], -1)\n"
        "if (counter > 0) then\n"
        "  redis.call('set', KEYS[3], 0, 'px', ARGV[5])\n"
        "  return 0\n"
        "else\n"
        "  redis.call('del', KEYS[1])\n"
        "  redis.call(ARGV[4], KEYS[2], ARGV[1])\n"
        "  redis.call('set', KEYS[3], 1, 'px', ARGV[5])\n"
        "  return 1\n"
        "end\n";

/* RM_SCRIPT_RLOCK_EXTEND: KEYS name; ARGV field, ms, mode, longest TTL[,
   a writer's reader field]. As LOCK_EXTEND, but the key keeps the other
   holds it carries (lua.h, RM_LUA_EXTEND_HASH_TTL). Also a writer's, for a
   read-write lock. */
const char rm_lua_rlock_extend[] =
        "if redis.call('hexists', KEYS[1], ARGV[1]) == 0 then return 0 end\n"
        RM_LUA_EXTEND_HASH_TTL;

/* clang-format on */

/* ---- commands ------------------------------------------------------------------ */

static rm_cmd rlock_acquire(const redmutex_lock *l, const rm_acq_in *in, rm_kargs *st)
{
    rm_i64_str(st->num[0], in->lease_ms);
    const char *token_key = rm_lock_token_key(l, st->key[0], sizeof st->key[0]);
    if (in->nest_latch) {
        rm_i64_str(st->num[1], in->latch_ms);
        const char *argv[] = {"3", l->name,   token_key, in->nest_latch, st->num[0], in->value, in->fencing ? "1" : "0",
                              "1", st->num[1]};
        memcpy(st->argv, argv, sizeof argv);
        return (rm_cmd){RM_SCRIPT_RLOCK_ACQUIRE, 9, st->argv, NULL};
    }
    const char *argv[] = {"2", l->name, token_key, st->num[0], in->value, in->fencing ? "1" : "0", "0"};
    memcpy(st->argv, argv, sizeof argv);
    return (rm_cmd){RM_SCRIPT_RLOCK_ACQUIRE, 7, st->argv, NULL};
}

static rm_cmd rlock_release(const redmutex_lock *l, const char *value, const char *latch_key, int64_t lease_ms,
                            int64_t latch_ms, rm_kargs *st)
{
    rm_i64_str(st->num[0], latch_ms);
    rm_i64_str(st->num[1], lease_ms);
    const char *channel = rm_lock_channel_key(l, st->key[0], sizeof st->key[0]);
    /* Redisson's own way: the publish command is an argument (spublish on a 7.0+ cluster). */
    const char *argv[] = {"3", l->name, channel, latch_key, "0", st->num[1], value, RM_ARG_PUBLISH, st->num[0]};
    memcpy(st->argv, argv, sizeof argv);
    return (rm_cmd){RM_SCRIPT_RLOCK_RELEASE, 9, st->argv, NULL};
}

static rm_cmd rlock_extend(const redmutex_lock *l, const char *value, int64_t ms, bool replace, rm_kargs *st)
{
    rm_i64_str(st->num[0], ms);
    rm_i64_str(st->num[1], REDMUTEX_TIME_MAX_MS);
    const char *argv[] = {"1", l->name, value, st->num[0], replace ? "1" : "0", st->num[1]};
    memcpy(st->argv, argv, sizeof argv);
    return (rm_cmd){RM_SCRIPT_RLOCK_EXTEND, 6, st->argv, NULL};
}

static rm_cmd rlock_inspect(const redmutex_lock *l, const char *value, rm_kargs *st)
{
    const char *argv[] = {"1", l->name, "hash", value};
    memcpy(st->argv, argv, sizeof argv);
    return (rm_cmd){RM_SCRIPT_INSPECT, 4, st->argv, NULL};
}

static rm_cmd rlock_force(const redmutex_lock *l, rm_kargs *st)
{
    const char *argv[] = {"2", l->name, rm_lock_channel_key(l, st->key[0], sizeof st->key[0]), "hash", RM_ARG_PUBLISH};
    memcpy(st->argv, argv, sizeof argv);
    return (rm_cmd){RM_SCRIPT_FORCE_RELEASE, 5, st->argv, NULL};
}

const rm_kind_ops rm_rlock_ops = {
    .field = rm_kind_field_is_owner, /* Redisson's "<client id>:<thread id>", or the explicit owner */
    .wait_channel = rm_kind_lock_channel,
    .acquire = rlock_acquire,
    .ttl_probe = NULL,
    .release = rlock_release,
    .extend = rlock_extend,
    .inspect = rlock_inspect,
    .force = rlock_force,
    .nest_undo = rm_kind_nest_undo,
    .server_queue = false,
    .local_waiters = true,
    .reentrant = true,
    .anonymous = false,
};
