/*
 * The semaphore kind (RM_KIND_SEMAPHORE, behind redmutex_semaphore):
 * Redisson's RPermitExpirableSemaphore wire format (Redisson 3.27.2's), so
 * permits taken by Redisson and by redmutex count against one capacity.
 *
 * Keys (NAME in braces unless it has a '{', Redisson's suffixName/prefixName):
 *   NAME                string: the permits available now (an integer).
 *   {NAME}:timeout      zset: permit id (16 raw bytes) -> end of its lease,
 *                       in ms since the epoch (Redisson's "non-expirable"
 *                       permits have the score 922337203685477).
 *   redisson_sc:{NAME}  channel: every change that frees permits publishes
 *                       the count available after it.
 *   redisson_lock_token:{NAME}   the fencing counter (as for locks).
 *   redisson_unlock_latch:{NAME}:<request id>   a release's unlock latch.
 *
 * A hold's value (the owner of the hold: one acquisition) is its permit id,
 * 32 hex digits as Redisson writes them; an acquisition of k > 1 permits is
 * "<id>*<k>" and holds k permits whose ids are id, id+1, ... id+k-1 (the
 * last 4 bytes counted up, modulo 2^32), each one zset member as Redisson's
 * acquire(k) makes them. The scripts derive the members from the value
 * (RM_LUA_PERMIT_DEFS), so every command of a hold carries one short value.
 *
 * Leases end on the server's clock (TIME): a redmutex client's permits do
 * not depend on its own wall clock. Redisson computes the same scores from
 * its client's clock, so a Redisson peer is as right as its clock is.
 */
#define _GNU_SOURCE
#include "fanout.h"
#include "handle.h"
#include "internal.h"
#include "kind.h"
#include "lua.h"
#include "scripts.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- Lua ---------------------------------------------------------------------- */

/* clang-format off */

/* Checks shared by the scripts that write: the counter is absent or a
   string holding an integer, the timeout key absent or a zset. */
#define SEM_TYPES_CHECK(counter, zset)                                                                       \
    "local ct = redis.call('type', " counter ")['ok']\n"                                                     \
    "if ct ~= 'string' and ct ~= 'none' then return " RM_LUA_WRONGTYPE " end\n"                             \
    "local zt = redis.call('type', " zset ")['ok']\n"                                                        \
    "if zt ~= 'zset' and zt ~= 'none' then return " RM_LUA_WRONGTYPE " end\n"                               \
    "local avail = redis.call('get', " counter ")\n"                                                         \
    "if avail and not string.match(avail, '^%-?%d+$') then\n"                                                \
    "  return redis.error_reply('WRONGTYPE redmutex: semaphore counter ' .. " counter " .. "                 \
    "' does not hold an integer; nothing was changed')\n"                                                    \
    "end\n"

/* The first reads of the scripts that write, before anything is written:
   `avail`, the counter (absent: false), which must be a string holding an
   integer, and `first`, the permit whose lease ends first ({} when none),
   from the timeout key, which must be a zset. A key of another type is a
   WRONGTYPE error and nothing is changed; redis.pcall spares a TYPE each. */
#define SEM_FIRST_READS(counter, zset)                                                                       \
    "local avail = redis.pcall('get', " counter ")\n"                                                        \
    "if type(avail) == 'table' then return " RM_LUA_WRONGTYPE " end\n"                                      \
    "if avail and not string.match(avail, '^%-?%d+$') then\n"                                                \
    "  return redis.error_reply('WRONGTYPE redmutex: semaphore counter ' .. " counter " .. "                 \
    "' does not hold an integer; nothing was changed')\n"                                                    \
    "end\n"                                                                                                  \
    "local first = redis.pcall('zrange', " zset ", 0, 0, 'WITHSCORES')\n"                                    \
    "if first.err then return " RM_LUA_WRONGTYPE " end\n"

/* RM_SCRIPT_SEM_ACQUIRE: KEYS name, timeout, channel, token key; ARGV value,
   lease ms, capacity, fencing 0/1, resize 0/1, publish command.
   The capacity is set when the semaphore is absent (trySetPermits), checked
   otherwise (an error, nothing changed, unless resize: then setPermits).
   Leases that ended are reclaimed (and published) first, as Redisson does.
   A counter with a TTL (Redisson's expire()) passes it on to the zset, as
   Redisson's script does, but only where that does not shorten the TTL
   the zset has for other holders' permits.
   Returns {1, permits, fence} when taken (also when this value holds them
   already: an attempt repeated after an unknown outcome takes nothing
   twice), else {0, ms until the first lease ends (-1: none ends)}.
   Every acquisition runs it, and so does every waiter a release wakes
   (the channel tells all of them), so it reads what it must and no more:
   TIME, GET, ZRANGE, ZCARD and ZSCORE when it fails. */
const char rm_lua_sem_acquire[] =
        RM_LUA_PERMIT_DEFS SEM_FIRST_READS("KEYS[1]", "KEYS[2]")
        "if ARGV[4] == '1' then\n" RM_LUA_FENCE_CHECK("KEYS[4]") "end\n"
        "local cap = tonumber(ARGV[3])\n"
        "local mine = permit_ids(ARGV[1])\n"
        "if #mine > cap then\n"
        "  return redis.error_reply('EINVAL redmutex: ' .. #mine .. ' permits asked of a semaphore of ' .. cap .. "
        "'; nothing was changed')\n"
        "end\n"
        "local held = redis.call('zcard', KEYS[2])\n"
        "local have = cap\n"
        "if avail then have = tonumber(avail) + held end\n"
        "if avail and have ~= cap and ARGV[5] ~= '1' then\n"
        "  return redis.error_reply('EINVAL redmutex: semaphore ' .. KEYS[1] .. ' has ' .. have .. "
        "' permits on the server, not ' .. cap .. ' (resize to change it); nothing was changed')\n"
        "end\n" RM_LUA_MAY_DEF
        "if not may(ARGV[6], KEYS[3], '0') then " RM_LUA_NOPERM("PUBLISH to the semaphore channel") " end\n"
        "if not may('zadd', KEYS[2], '0', 'x') then " RM_LUA_NOPERM("ZADD the semaphore permits") " end\n"
        "if ARGV[4] == '1' and not may('incr', KEYS[4]) then " RM_LUA_NOPERM("INCR the fencing counter") " end\n"
        "local now = now_ms()\n"
        "local n = cap\n"
        "if not avail then\n"
        "  redis.call('set', KEYS[1], cap)\n"
        "  redis.call(ARGV[6], KEYS[3], cap)\n"
        "elseif have ~= cap then\n"
        "  n = redis.call('incrby', KEYS[1], cap - have)\n"
        "  redis.call(ARGV[6], KEYS[3], cap)\n"
        "else\n"
        "  n = tonumber(avail)\n"
        "end\n"
        /* the leases that ended go back first */
        "if first[1] and tonumber(first[2]) <= now then\n"
        "  local dead = redis.call('zrangebyscore', KEYS[2], '-inf', now)\n"
        "  for i = 1, #dead, 1000 do redis.call('zrem', KEYS[2], unpack(dead, i, math.min(i + 999, #dead))) end\n"
        "  n = redis.call('incrby', KEYS[1], #dead)\n"
        "  redis.call(ARGV[6], KEYS[3], n)\n"
        "  held = held - #dead\n"
        "  first = redis.call('zrange', KEYS[2], 0, 0, 'WITHSCORES')\n"
        "end\n"
        "local lease_end = now + tonumber(ARGV[2])\n"
        "local add = {}\n"
        "for i = 1, #mine do add[2 * i - 1] = lease_end; add[2 * i] = mine[i] end\n"
        "if held > 0 and redis.call('zscore', KEYS[2], mine[1]) then\n"
        "  redis.call('zadd', KEYS[2], unpack(add))\n"
        "  return {1, #mine, tonumber(redis.call('get', KEYS[4]) or '0')}\n"
        "end\n"
        "if n >= #mine then\n"
        "  redis.call('decrby', KEYS[1], #mine)\n"
        "  redis.call('zadd', KEYS[2], unpack(add))\n"
        "  local ttl = redis.call('pttl', KEYS[1])\n"
        "  if ttl > 0 then\n"
        "    local zttl = -1\n"
        "    if held > 0 then zttl = redis.call('pttl', KEYS[2]) end\n"
        "    if held == 0 or (zttl > 0 and zttl < ttl) then redis.call('pexpire', KEYS[2], ttl) end\n"
        "  end\n"
        "  local f = 0\n"
        "  if ARGV[4] == '1' then f = redis.call('incr', KEYS[4]) end\n"
        "  return {1, #mine, f}\n"
        "end\n"
        "if first[1] and tonumber(first[2]) < 922337203685477 then\n"
        "  return {0, math.max(tonumber(first[2]) - now, 1)}\n"
        "end\n"
        "return {0, -1}\n";

/* RM_SCRIPT_SEM_RELEASE: KEYS name, channel, timeout, latch; ARGV value,
   latch ms, publish command. Gives back every permit of the value still in
   the zset and publishes the count available. Returns 1 when all of them
   were there with their lease running; nil when none was (not held), or
   when some were missing or past their lease (the hold was lost: what was
   left is given back all the same, and no latch is written, so a retry
   answers nil again). A latch left by an earlier attempt answers a retry. */
const char rm_lua_sem_release[] =
        "local l = redis.call('get', KEYS[4])\n"
        "if l ~= false then return tonumber(l) end\n"
        RM_LUA_PERMIT_DEFS
        "local avail = redis.pcall('get', KEYS[1])\n"
        "if type(avail) == 'table' then return " RM_LUA_WRONGTYPE " end\n"
        "if avail and not string.match(avail, '^%-?%d+$') then\n"
        "  return redis.error_reply('WRONGTYPE redmutex: semaphore counter ' .. KEYS[1] .. "
        "' does not hold an integer; nothing was changed')\n"
        "end\n"
        "local mine = permit_ids(ARGV[1])\n"
        "local live, found = 0, {}\n"
        "local now\n"
        "for i = 1, #mine do\n"
        "  local s = redis.pcall('zscore', KEYS[3], mine[i])\n"
        "  if type(s) == 'table' then return " RM_LUA_WRONGTYPE " end\n"
        "  if s then\n"
        "    if not now then now = now_ms() end\n"
        "    found[#found + 1] = mine[i]\n"
        "    if tonumber(s) > now then live = live + 1 end\n"
        "  end\n"
        "end\n"
        "if #found == 0 then return nil end\n" RM_LUA_MAY_DEF
        "if not may(ARGV[3], KEYS[2], '0') then " RM_LUA_NOPERM("PUBLISH the release") " end\n"
        "if not may('set', KEYS[4], '1', 'px', ARGV[2]) then " RM_LUA_NOPERM("SET the unlock latch") " end\n"
        "redis.call('zrem', KEYS[3], unpack(found))\n"
        "local v = redis.call('incrby', KEYS[1], #found)\n"
        "redis.call(ARGV[3], KEYS[2], v)\n"
        "if live < #mine then return nil end\n"
        "redis.call('set', KEYS[4], 1, 'px', ARGV[2])\n"
        "return 1\n";

/* RM_SCRIPT_SEM_EXTEND: KEYS name, timeout; ARGV value, ms, mode (0 add, 1
   replace), longest TTL. Returns the new TTL, or 0 when a permit of the
   value is gone or past its lease (never re-created). */
const char rm_lua_sem_extend[] =
        RM_LUA_PERMIT_DEFS
        "if redis.call('type', KEYS[2])['ok'] ~= 'zset' then return 0 end\n"
        "local mine = permit_ids(ARGV[1])\n"
        "local now = now_ms()\n"
        "local ttl = 0\n"
        "for i = 1, #mine do\n"
        "  local s = redis.call('zscore', KEYS[2], mine[i])\n"
        "  if not s or tonumber(s) <= now then return 0 end\n"
        "  ttl = tonumber(s) - now\n"
        "end\n"
        "local new = tonumber(ARGV[2])\n"
        "if ARGV[3] == '0' then new = new + ttl end\n"
        "if new > tonumber(ARGV[4]) then new = tonumber(ARGV[4]) end\n"
        "for i = 1, #mine do redis.call('zadd', KEYS[2], 'XX', now + new, mine[i]) end\n"
        "return new\n";

/* RM_SCRIPT_SEM_INSPECT: KEYS name, timeout; ARGV value ('' = nobody).
   Reads only. Returns {permits held by anyone (0/1), ms until the first
   lease ends (-2 none held, -1 none ends), permits of the value held}. */
const char rm_lua_sem_inspect[] =
        RM_LUA_PERMIT_DEFS
        "local zt = redis.call('type', KEYS[2])['ok']\n"
        "if zt == 'none' then return {0, -2, 0} end\n"
        "if zt ~= 'zset' then return " RM_LUA_WRONGTYPE " end\n"
        "local now = now_ms()\n"
        "local first = redis.call('zrangebyscore', KEYS[2], '(' .. now, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)\n"
        "if not first[1] then return {0, -2, 0} end\n"
        "local ttl = -1\n"
        "if tonumber(first[2]) < 922337203685477 then ttl = tonumber(first[2]) - now end\n"
        "local n = 0\n"
        "if ARGV[1] ~= '' then\n"
        "  local mine = permit_ids(ARGV[1])\n"
        "  for i = 1, #mine do\n"
        "    local s = redis.call('zscore', KEYS[2], mine[i])\n"
        "    if s and tonumber(s) > now then n = n + 1 end\n"
        "  end\n"
        "end\n"
        "return {1, ttl, n}\n";

/* RM_SCRIPT_SEM_INFO: KEYS name, timeout. Reads only. Returns {exists 0/1,
   permits an acquisition could take now (the counter plus the permits
   whose lease ended, which the next acquisition reclaims), capacity (the
   counter plus every permit in the zset)}. */
const char rm_lua_sem_info[] =
        RM_LUA_PERMIT_DEFS SEM_TYPES_CHECK("KEYS[1]", "KEYS[2]")
        "if not avail then return {0, 0, 0} end\n"
        "local ended = redis.call('zcount', KEYS[2], '-inf', now_ms())\n"
        "return {1, tonumber(avail) + ended, tonumber(avail) + redis.call('zcard', KEYS[2])}\n";

/* RM_SCRIPT_SEM_FORCE: KEYS name, channel, timeout; ARGV expected type
   (unused), publish command. Gives back every permit, whoever holds it:
   replies 1 when some were held, 0 when none was. */
const char rm_lua_sem_force[] =
        SEM_TYPES_CHECK("KEYS[1]", "KEYS[3]")
        "local n = redis.call('zcard', KEYS[3])\n"
        "if n == 0 then return 0 end\n" RM_LUA_MAY_DEF
        "if not may(ARGV[2], KEYS[2], '0') then " RM_LUA_NOPERM("PUBLISH the release") " end\n"
        "redis.call('del', KEYS[3])\n"
        "local v = redis.call('incrby', KEYS[1], n)\n"
        "redis.call(ARGV[2], KEYS[2], v)\n"
        "return 1\n";

/* clang-format on */

/* ---- keys ----------------------------------------------------------------------- */

const char *rm_sem_channel_key(const redmutex_lock *l, char *out, size_t size)
{
    return rm_derived_key(l, "redisson_sc", "", out, size);
}

const char *rm_sem_timeout_key(const redmutex_lock *l, char *out, size_t size)
{
    return rm_derived_key(l, NULL, ":timeout", out, size);
}

int64_t rm_sem_permits_of(const char *value)
{
    const char *star = strchr(value, '*');
    return star ? strtoll(star + 1, NULL, 10) : 1;
}

bool rm_sem_value_valid(const char *value)
{
    size_t n = strspn(value, "0123456789abcdef");
    if (n != RM_PERMIT_HEX)
        return false;
    if (value[n] == '\0')
        return true;
    if (value[n] != '*' || value[n + 1] < '1' || value[n + 1] > '9')
        return false;
    const char *digits = value + n + 1;
    size_t d = strspn(digits, "0123456789");
    return digits[d] == '\0' && d <= 9 && strtoll(digits, NULL, 10) <= RM_PERMITS_PER_ACQUIRE_MAX;
}

/* ---- commands ------------------------------------------------------------------ */

static void sem_channel(const redmutex_lock *l, const char *value, char out[RM_LONG_KEY_MAX])
{
    (void)value;
    rm_sem_channel_key(l, out, RM_LONG_KEY_MAX);
}

static rm_cmd sem_acquire(const redmutex_lock *l, const rm_acq_in *in, rm_kargs *st)
{
    rm_i64_str(st->num[0], in->lease_ms);
    rm_i64_str(st->num[1], l->permits);
    const char *timeout = rm_sem_timeout_key(l, st->key[0], sizeof st->key[0]);
    const char *channel = rm_sem_channel_key(l, st->key[1], sizeof st->key[1]);
    const char *token = rm_lock_token_key(l, st->key[2], sizeof st->key[2]);
    const char *argv[] = {"4",
                          l->name,
                          timeout,
                          channel,
                          token,
                          in->value,
                          st->num[0],
                          st->num[1],
                          in->fencing ? "1" : "0",
                          l->resize ? "1" : "0",
                          RM_ARG_PUBLISH};
    memcpy(st->argv, argv, sizeof argv);
    return (rm_cmd){RM_SCRIPT_SEM_ACQUIRE, 11, st->argv, NULL};
}

static rm_cmd sem_release(const redmutex_lock *l, const char *value, const char *latch_key, int64_t lease_ms,
                          int64_t latch_ms, rm_kargs *st)
{
    (void)lease_ms;
    rm_i64_str(st->num[0], latch_ms);
    const char *channel = rm_sem_channel_key(l, st->key[0], sizeof st->key[0]);
    const char *timeout = rm_sem_timeout_key(l, st->key[1], sizeof st->key[1]);
    const char *argv[] = {"4", l->name, channel, timeout, latch_key, value, st->num[0], RM_ARG_PUBLISH};
    memcpy(st->argv, argv, sizeof argv);
    return (rm_cmd){RM_SCRIPT_SEM_RELEASE, 8, st->argv, NULL};
}

static rm_cmd sem_extend(const redmutex_lock *l, const char *value, int64_t ms, bool replace, rm_kargs *st)
{
    rm_i64_str(st->num[0], ms);
    rm_i64_str(st->num[1], REDMUTEX_TIME_MAX_MS);
    const char *timeout = rm_sem_timeout_key(l, st->key[0], sizeof st->key[0]);
    const char *argv[] = {"2", l->name, timeout, value, st->num[0], replace ? "1" : "0", st->num[1]};
    memcpy(st->argv, argv, sizeof argv);
    return (rm_cmd){RM_SCRIPT_SEM_EXTEND, 7, st->argv, NULL};
}

static rm_cmd sem_inspect(const redmutex_lock *l, const char *value, rm_kargs *st)
{
    const char *timeout = rm_sem_timeout_key(l, st->key[0], sizeof st->key[0]);
    const char *argv[] = {"2", l->name, timeout, value};
    memcpy(st->argv, argv, sizeof argv);
    return (rm_cmd){RM_SCRIPT_SEM_INSPECT, 4, st->argv, NULL};
}

static rm_cmd sem_force(const redmutex_lock *l, rm_kargs *st)
{
    const char *channel = rm_sem_channel_key(l, st->key[0], sizeof st->key[0]);
    const char *timeout = rm_sem_timeout_key(l, st->key[1], sizeof st->key[1]);
    const char *argv[] = {"3", l->name, channel, timeout, "zset", RM_ARG_PUBLISH};
    memcpy(st->argv, argv, sizeof argv);
    return (rm_cmd){RM_SCRIPT_SEM_FORCE, 6, st->argv, NULL};
}

rm_cmd rm_sem_info_command(const redmutex_lock *l, rm_kargs *st)
{
    const char *timeout = rm_sem_timeout_key(l, st->key[0], sizeof st->key[0]);
    const char *argv[] = {"2", l->name, timeout};
    memcpy(st->argv, argv, sizeof argv);
    return (rm_cmd){RM_SCRIPT_SEM_INFO, 3, st->argv, NULL};
}

const rm_kind_ops rm_sem_ops = {
    .field = rm_kind_field_is_owner, /* the permit id is the owner of its hold */
    .wait_channel = sem_channel,
    .acquire = sem_acquire,
    .ttl_probe = NULL,
    .release = sem_release,
    .extend = sem_extend,
    .inspect = sem_inspect,
    .force = sem_force,
    .nest_undo = NULL,
    .server_queue = false,
    /* A release hands the freed permits to a sleeping acquirer of this
       client in its round trip, as for locks (release.c). */
    .local_waiters = true,
    .reentrant = false,
    .anonymous = false,
};
