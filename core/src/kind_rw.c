/*
 * The read-write lock (REDMUTEX_KIND_READ, REDMUTEX_KIND_WRITE): Redisson's
 * RReadWriteLock wire format, so Redisson readers and redmutex readers share
 * the lock and a writer on either side excludes both.
 *
 * Keys (NAME in braces unless it has a '{'):
 *   NAME    hash: "mode" -> "read" | "write"; a reader's field
 *           "<client id>:<thread id>" (or the explicit owner) -> hold count; a
 *           writer's field "<owner>:write" -> hold count. Its TTL covers every
 *           hold.
 *   {NAME}:<reader field>:rwlock_timeout:<n>   one key per read hold n of a
 *           reader, with that hold's lease: when a reader leaves, the lock
 *           lives on only as long as the longest of the others' keys.
 *   redisson_rwlock:{NAME}   channel: a read release that frees the lock
 *           publishes "0" (wake one waiter), a write release "1" (wake all).
 *   redisson_lock_token:{NAME}, redisson_unlock_latch:{NAME}:<id> as RLock.
 *
 * Rules (Redisson's): many readers, or one writer; both reentrant; a writer
 * may also take the read lock (and keeps it after releasing the write lock),
 * a reader may not take the write lock. Not fair: nobody queues.
 *
 * Differences from Redisson, invisible to it: releasing a lock that is gone
 * answers "not the owner" (its holder learns that it was lost) instead of
 * success; a key that is a hash without "mode" (another kind of lock) is
 * refused with WRONGTYPE instead of being taken over; a write release that
 * leaves read holds behind publishes "1" so waiting readers come in; the
 * watchdog renews only its own readers' timeout keys (Redisson's renewal
 * also renews other readers', keeping a dead reader's hold alive).
 */
#define _GNU_SOURCE
#include "fanout.h"
#include "handle.h"
#include "kind.h"
#include "lua.h"
#include "scripts.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

/* ---- Lua ---------------------------------------------------------------------- */

/* clang-format off */

/* KEYS[1] must be absent or a read-write lock (a hash with a mode) before anything is written. */
#define RW_CHECK_TYPE                                                                             \
    "local t = redis.call('type', KEYS[1])['ok']\n"                                              \
    "if t ~= 'none' and t ~= 'hash' then return " RM_LUA_WRONGTYPE " end\n"                      \
    "local mode = redis.call('hget', KEYS[1], 'mode')\n"                                         \
    "if t == 'hash' and mode ~= 'read' and mode ~= 'write' then return " RM_LUA_WRONGTYPE " end\n"

/* Fencing: check the counter (KEYS[k]) before the first write of a new hold. */
#define RW_FENCE(k)                                                                               \
    "if FENCING then\n" RM_LUA_FENCE_CHECK("KEYS[" k "]") "end\n"                              \
    "if FENCING and not mine then\n"                                                            \
    "  if not may('incr', KEYS[" k "]) then " RM_LUA_NOPERM("INCR the fencing counter") " end\n"  \
    "end\n"                                                                                      \
    "local function fence(n)\n"                                                                  \
    "  if not FENCING then return 0 end\n"                                                       \
    "  if n == 1 then return redis.call('incr', KEYS[" k "]) end\n"                              \
    "  return tonumber(redis.call('get', KEYS[" k "]) or '0')\n"                                 \
    "end\n"

/*
 * Read acquire (Redisson's read tryLockInner). KEYS: [1] NAME, [2] this
 * reader's timeout prefix {NAME}:<field>:rwlock_timeout, [3] fencing counter.
 * ARGV: [1] lease ms, [2] field, [3] the same owner's writer field, [4]
 * fencing 0/1, [5] nested 0/1; a nested acquisition adds KEYS[4] its undo
 * latch and ARGV[6] that latch's life (lua.h, RM_LUA_NEST_GUARD). Replies
 * {1, count, fence}, {0, pttl} or {2, pttl} (nested, field gone: nothing
 * written). A field without a live timeout key is no hold (kind.h,
 * RM_LUA_READER_LIVE_DEF): a nested acquisition finds the hold gone, any
 * other replaces the field by a hold of its own, one level.
 */
const char rm_lua_read_acquire[] =
    RW_CHECK_TYPE RM_LUA_MAY_DEF RM_LUA_READER_LIVE_DEF
    "if not (may('hset', KEYS[1], 'mode', 'read') and may('hdel', KEYS[1], 'f') and "
    "may('set', KEYS[2] .. ':1', '1', 'px', '1')) then "
    RM_LUA_NOPERM("write the lock and its timeout keys") " end\n"
    "local FENCING = ARGV[4] == '1'\n"
    "local field = redis.call('hexists', KEYS[1], ARGV[2]) == 1\n"
    "local mine = field and live(KEYS[2], tonumber(redis.call('hget', KEYS[1], ARGV[2])) or 0)\n"
    RW_FENCE("3") RM_LUA_NEST_GUARD("5", "KEYS[4]", "ARGV[6]")
    "if field and not mine then redis.call('hdel', KEYS[1], ARGV[2]) end\n"
    "if mode == false then\n"
    "  redis.call('hset', KEYS[1], 'mode', 'read')\n"
    "  redis.call('hset', KEYS[1], ARGV[2], 1)\n"
    "  redis.call('set', KEYS[2] .. ':1', 1, 'px', ARGV[1])\n"
    "  redis.call('pexpire', KEYS[1], ARGV[1])\n"
    "  return {1, 1, fence(1)}\n"
    "end\n"
    "if mode == 'read' or (mode == 'write' and redis.call('hexists', KEYS[1], ARGV[3]) == 1) then\n"
    "  local n = redis.call('hincrby', KEYS[1], ARGV[2], 1)\n"
    "  redis.call('set', KEYS[2] .. ':' .. n, 1, 'px', ARGV[1])\n"
    "  local rt = redis.call('pttl', KEYS[1])\n"
    "  redis.call('pexpire', KEYS[1], math.max(rt, tonumber(ARGV[1])))\n"
    "  return {1, n, fence(n)}\n"
    "end\n"
    "return {0, redis.call('pttl', KEYS[1])}\n";

/*
 * Read release (Redisson's read unlockInner, with the unlock latch). KEYS:
 * [1] NAME, [2] channel, [3] this reader's timeout prefix, [4] {NAME},
 * [5] latch. ARGV: [1] "0", [2] field, [3] latch ms. Replies 1 when the lock
 * was deleted, 0 when others (or this owner's other holds) keep it, nil when
 * not held by this reader.
 *
 * No hold is cut short (lua.h, RM_LUA_AT_LEAST_DEF), where Redisson's
 * script cuts two: the reader's top timeout key goes, but which of its
 * holds ended is not known here, so the key below takes over its TTL when
 * that is longer (RM_LUA_PASS_DOWN_DEF); and while a writer holds the lock
 * (the writer reads too), the lock keeps its TTL: the write hold has no
 * timeout key, and the longest reader's key says nothing of it. A reader
 * field without a live timeout key holds nothing (kind.h,
 * RM_LUA_READER_LIVE_DEF): this reader's is taken out and the release
 * answers nil (its hold ran out), others' are taken out on the way.
 */
const char rm_lua_read_release[] =
    "local l = redis.call('get', KEYS[5])\n"
    "if l ~= false then return tonumber(l) end\n" RW_CHECK_TYPE RM_LUA_MAY_DEF RM_LUA_PASS_DOWN_DEF
    RM_LUA_READER_LIVE_DEF
    "if not may(ARGV[#ARGV], KEYS[2], ARGV[1]) then " RM_LUA_NOPERM("PUBLISH the release") " end\n"
    "if not may('set', KEYS[5], '1', 'px', ARGV[3]) then " RM_LUA_NOPERM("SET the unlock latch") " end\n"
    "if not (may('del', KEYS[3] .. ':1') and may('set', KEYS[3] .. ':1', '1', 'px', '1')) then "
    RM_LUA_NOPERM("DEL and SET its timeout keys") " end\n"
    "if mode == false then\n"
    "  redis.call(ARGV[#ARGV], KEYS[2], ARGV[1])\n"
    "  return nil\n"
    "end\n"
    /* What is left after a reader's level went: 0 others hold (the lock
       lives as long as their longest timeout key; readers without one are
       taken out), 1 nobody (deleted, published). */
    "local function rest()\n"
    "  if redis.call('hlen', KEYS[1]) > 1 and mode == 'write' then return 0 end\n"
    "  local maxRemain = -3\n"
    "  for _, key in ipairs(redis.call('hkeys', KEYS[1])) do\n"
    "    local c = tonumber(redis.call('hget', KEYS[1], key))\n"
    "    if type(c) == 'number' then\n"
    "      local pre = KEYS[4] .. ':' .. key .. ':rwlock_timeout'\n"
    "      if not live(pre, c) then redis.call('hdel', KEYS[1], key) end\n"
    "      for i = c, 1, -1 do maxRemain = math.max(maxRemain, redis.call('pttl', pre .. ':' .. i)) end\n"
    "    end\n"
    "  end\n"
    "  if maxRemain > 0 and redis.call('hlen', KEYS[1]) > 1 then\n"
    "    redis.call('pexpire', KEYS[1], maxRemain)\n"
    "    return 0\n"
    "  end\n"
    "  redis.call('del', KEYS[1])\n"
    "  redis.call(ARGV[#ARGV], KEYS[2], ARGV[1])\n"
    "  return 1\n"
    "end\n"
    "if redis.call('hexists', KEYS[1], ARGV[2]) == 0 then return nil end\n"
    "if not live(KEYS[3], tonumber(redis.call('hget', KEYS[1], ARGV[2])) or 0) then\n"
    "  redis.call('hdel', KEYS[1], ARGV[2])\n"
    "  rest()\n"
    "  return nil\n"
    "end\n"
    "local counter = redis.call('hincrby', KEYS[1], ARGV[2], -1)\n"
    "if counter == 0 then redis.call('hdel', KEYS[1], ARGV[2]) end\n"
    "if counter > 0 then pass_down(KEYS[3] .. ':' .. (counter + 1), KEYS[3] .. ':' .. counter)\n"
    "else redis.call('del', KEYS[3] .. ':1') end\n"
    "local r = rest()\n"
    "redis.call('set', KEYS[5], r, 'px', ARGV[3])\n"
    "return r\n";

/*
 * Extend one reader's holds. KEYS: [1] NAME, [2] its timeout prefix. ARGV:
 * [1] field, [2] ms, [3] 0 add to the remaining TTL / 1 replace, [4] longest
 * TTL. Replies the new TTL, 0 when not held. Which of the reader's holds
 * this is, is not known here: its timeout keys and the lock get at least
 * the new TTL (lua.h, RM_LUA_AT_LEAST_DEF) - exactly it when this reader's
 * one hold is all the lock carries. A reader without a live timeout key
 * holds nothing (kind.h, RM_LUA_READER_LIVE_DEF): its field goes (the lock
 * too, when no other field is left) and the reply is 0.
 */
const char rm_lua_read_extend[] =
    "if redis.call('type', KEYS[1])['ok'] ~= 'hash' or redis.call('hexists', KEYS[1], ARGV[1]) == 0 then\n"
    "  return 0\n"
    "end\n" RM_LUA_AT_LEAST_DEF RM_LUA_READER_LIVE_DEF
    "local n = tonumber(redis.call('hget', KEYS[1], ARGV[1])) or 0\n"
    "if not live(KEYS[2], n) then\n"
    "  redis.call('hdel', KEYS[1], ARGV[1])\n"
    "  if redis.call('hlen', KEYS[1]) <= 1 then redis.call('del', KEYS[1]) end\n"
    "  return 0\n"
    "end\n"
    "local ttl = redis.call('pttl', KEYS[2] .. ':' .. n)\n"
    "if ttl < 0 then ttl = 0 end\n"
    "local new = tonumber(ARGV[2])\n"
    "if ARGV[3] == '0' then new = new + ttl end\n"
    "if new > tonumber(ARGV[4]) then new = tonumber(ARGV[4]) end\n"
    "if n == 1 and redis.call('hlen', KEYS[1]) == 2 then\n"
    "  redis.call('pexpire', KEYS[2] .. ':1', new)\n"
    "  redis.call('pexpire', KEYS[1], new)\n"
    "  return new\n"
    "end\n"
    "for i = 1, n do at_least(KEYS[2] .. ':' .. i, new) end\n"
    "at_least(KEYS[1], new)\n"
    "return new\n";

/*
 * Write acquire (Redisson's write tryLockInner). KEYS: [1] NAME, [2] fencing
 * counter. ARGV: [1] lease ms, [2] writer field, [3] fencing 0/1, [4] nested
 * 0/1; nested: KEYS[3] and ARGV[5] as the read acquire's. Replies as the
 * read acquire.
 */
const char rm_lua_write_acquire[] =
    RW_CHECK_TYPE RM_LUA_MAY_DEF
    "if not may('hset', KEYS[1], 'mode', 'write') then " RM_LUA_NOPERM("write the lock") " end\n"
    "local FENCING = ARGV[3] == '1'\n"
    "local mine = redis.call('hexists', KEYS[1], ARGV[2]) == 1\n"
    RW_FENCE("2") RM_LUA_NEST_GUARD("4", "KEYS[3]", "ARGV[5]")
    "if mode == false then\n"
    "  redis.call('hset', KEYS[1], 'mode', 'write')\n"
    "  redis.call('hset', KEYS[1], ARGV[2], 1)\n"
    "  redis.call('pexpire', KEYS[1], ARGV[1])\n"
    "  return {1, 1, fence(1)}\n"
    "end\n"
    "if mode == 'write' and mine then\n"
    "  local n = redis.call('hincrby', KEYS[1], ARGV[2], 1)\n"
    "  local t = redis.call('pttl', KEYS[1])\n"
    "  if t >= 0 then redis.call('pexpire', KEYS[1], t + tonumber(ARGV[1])) end\n"
    "  return {1, n, fence(n)}\n"
    "end\n"
    "return {0, redis.call('pttl', KEYS[1])}\n";

/*
 * Write release (Redisson's write unlockInner, with the unlock latch). KEYS:
 * [1] NAME, [2] channel, [3] latch. ARGV: [1] "1", [2] lease ms (unused),
 * [3] writer field, [4] latch ms. Replies 1 when the write hold ended, 0
 * decremented, nil not the writer. A release that leaves holds behind (the
 * writer's other levels, its read holds) keeps the lock's TTL, where
 * Redisson's sets it to this lease (lua.h, RM_LUA_AT_LEAST_DEF).
 */
const char rm_lua_write_release[] =
    "local l = redis.call('get', KEYS[3])\n"
    "if l ~= false then return tonumber(l) end\n" RW_CHECK_TYPE RM_LUA_MAY_DEF
    "if not may(ARGV[#ARGV], KEYS[2], ARGV[1]) then " RM_LUA_NOPERM("PUBLISH the release") " end\n"
    "if not may('set', KEYS[3], '1', 'px', ARGV[4]) then " RM_LUA_NOPERM("SET the unlock latch") " end\n"
    "if mode == false then\n"
    "  redis.call(ARGV[#ARGV], KEYS[2], ARGV[1])\n"
    "  return nil\n"
    "end\n"
    "if mode ~= 'write' or redis.call('hexists', KEYS[1], ARGV[3]) == 0 then return nil end\n"
    "local counter = redis.call('hincrby', KEYS[1], ARGV[3], -1)\n"
    "if counter > 0 then\n"
    "  redis.call('set', KEYS[3], 0, 'px', ARGV[4])\n"
    "  return 0\n"
    "end\n"
    "redis.call('hdel', KEYS[1], ARGV[3])\n"
    "if redis.call('hlen', KEYS[1]) == 1 then\n"
    "  redis.call('del', KEYS[1])\n"
    "else\n"
    "  redis.call('hset', KEYS[1], 'mode', 'read')\n"
    "end\n"
    "redis.call(ARGV[#ARGV], KEYS[2], ARGV[1])\n"
    "redis.call('set', KEYS[3], 1, 'px', ARGV[4])\n"
    "return 1\n";

/* Force release of one side. KEYS: [1] NAME, [2] channel. ARGV: [1] mode, [2] message, then the
   publish command (as every publishing script here: its last ARGV, RM_ARG_PUBLISH). */
const char rm_lua_rw_force[] =
    RW_CHECK_TYPE RM_LUA_MAY_DEF
    "if not may(ARGV[#ARGV], KEYS[2], ARGV[2]) then " RM_LUA_NOPERM("PUBLISH the release") " end\n"
    "if mode ~= ARGV[1] then return 0 end\n"
    "redis.call('del', KEYS[1])\n"
    "redis.call(ARGV[#ARGV], KEYS[2], ARGV[2])\n"
    "return 1\n";

/*
 * Queries for one side (Redisson's isLocked: read-locked when in read mode or
 * when the writer holds read locks too). KEYS: [1] NAME[, [2] the reader's
 * timeout prefix]. ARGV: [1] mode, [2] field ('' = nobody). Replies {held,
 * pttl (-2 when not), field's count}. A reader's count is that of its holds
 * whose timeout keys are still there: the field of a reader whose leases
 * ran out stays in the hash while other readers keep the lock alive, but
 * it holds nothing any more.
 */
const char rm_lua_rw_inspect[] =
    "local t = redis.call('type', KEYS[1])['ok']\n"
    "if t == 'none' then return {0, -2, 0} end\n"
    "if t ~= 'hash' then return " RM_LUA_WRONGTYPE " end\n"
    "local mode = redis.call('hget', KEYS[1], 'mode')\n"
    "if mode ~= 'read' and mode ~= 'write' then return " RM_LUA_WRONGTYPE " end\n"
    "local held = mode == ARGV[1] or (ARGV[1] == 'read' and redis.call('hlen', KEYS[1]) > 2)\n"
    "local n = 0\n"
    "if ARGV[2] ~= '' then n = tonumber(redis.call('hget', KEYS[1], ARGV[2]) or '0') or 0 end\n"
    "if KEYS[2] then\n"
    "  local live = 0\n"
    "  for i = 1, n do live = live + redis.call('exists', KEYS[2] .. ':' .. i) end\n"
    "  n = live\n"
    "end\n"
    "if not held then return {0, -2, n} end\n"
    "return {1, redis.call('pttl', KEYS[1]), n}\n";

/* clang-format on */

/* ---- commands ------------------------------------------------------------------ */

#define WRITE_SUFFIX ":write"

static bool is_write(const redmutex_lock *l) { return l->kind == REDMUTEX_KIND_WRITE; }

/* A reader is stored as its owner id, a writer as "<owner id>:write" (Redisson). */
static void rw_field(const redmutex_lock *l, const char *owner_key, char out[RM_VALUE_MAX + 1])
{
    snprintf(out, RM_VALUE_MAX + 1, "%s%s", owner_key, is_write(l) ? WRITE_SUFFIX : "");
}

/* A reader's field is its owner id as it is: "mode" is the lock's mode, and
   "<owner>:write" a writer's field (a reader by that name would count as
   the writer's read hold, and the writer's hold as its own). */
static const char *rw_refuse_owner(const redmutex_lock *l, const char *owner)
{
    size_t n = strlen(owner), k = sizeof WRITE_SUFFIX - 1;
    if (is_write(l))
        return NULL; /* stored as "<owner>:write": never "mode", never a reader's */
    if (strcmp(owner, "mode") == 0)
        return "is the field a read-write lock keeps its mode in";
    if (n >= k && memcmp(owner + n - k, WRITE_SUFFIX, k) == 0)
        return "ends in \"" WRITE_SUFFIX "\", as a writer's field does";
    return NULL;
}

static void rw_wait_channel(const redmutex_lock *l, const char *value, char out[RM_LONG_KEY_MAX])
{
    (void)value;
    rm_derived_key(l, "redisson_rwlock", "", out, RM_LONG_KEY_MAX);
}

/* {NAME}:<field>:rwlock_timeout */
static const char *timeout_prefix(const redmutex_lock *l, const char *field, char *out)
{
    char suffix[RM_VALUE_MAX + 32];
    snprintf(suffix, sizeof suffix, ":%s:rwlock_timeout", field);
    return rm_derived_key(l, NULL, suffix, out, RM_LONG_KEY_MAX);
}

static rm_cmd rw_acquire(const redmutex_lock *l, const rm_acq_in *in, rm_kargs *st)
{
    const char **a = st->argv;
    snprintf(st->num[0], sizeof st->num[0], "%" PRId64, in->lease_ms);
    const char *token = rm_derived_key(l, "redisson_lock_token", "", st->key[0], sizeof st->key[0]);
    const char *fencing = in->fencing ? "1" : "0", *latch = in->nest_latch;
    rm_i64_str(st->num[1], in->latch_ms);
    if (is_write(l) && latch) {
        const char *argv[] = {"3", l->name, token, latch, st->num[0], in->value, fencing, "1", st->num[1]};
        memcpy(a, argv, sizeof argv);
        return (rm_cmd){RM_SCRIPT_WRITE_ACQUIRE, 9, a, NULL};
    }
    if (is_write(l)) {
        const char *argv[] = {"2", l->name, token, st->num[0], in->value, fencing, "0"};
        memcpy(a, argv, sizeof argv);
        return (rm_cmd){RM_SCRIPT_WRITE_ACQUIRE, 7, a, NULL};
    }
    snprintf(st->key[1], sizeof st->key[1], "%s" WRITE_SUFFIX, in->value);
    const char *prefix = timeout_prefix(l, in->value, st->key[2]);
    if (latch) {
        const char *argv[] = {"4",       l->name,    prefix,  token, latch,     st->num[0],
                              in->value, st->key[1], fencing, "1",   st->num[1]};
        memcpy(a, argv, sizeof argv);
        return (rm_cmd){RM_SCRIPT_READ_ACQUIRE, 11, a, NULL};
    }
    const char *argv[] = {"3", l->name, prefix, token, st->num[0], in->value, st->key[1], fencing, "0"};
    memcpy(a, argv, sizeof argv);
    return (rm_cmd){RM_SCRIPT_READ_ACQUIRE, 9, a, NULL};
}

static rm_cmd rw_release(const redmutex_lock *l, const char *value, const char *latch_key, int64_t lease_ms,
                         int64_t latch_ms, rm_kargs *st)
{
    const char **a = st->argv;
    const char *channel = rm_derived_key(l, "redisson_rwlock", "", st->key[0], sizeof st->key[0]);
    snprintf(st->num[0], sizeof st->num[0], "%" PRId64, latch_ms);
    snprintf(st->num[1], sizeof st->num[1], "%" PRId64, lease_ms);
    if (is_write(l)) {
        const char *argv[] = {"3", l->name, channel, latch_key, "1", st->num[1], value, st->num[0], RM_ARG_PUBLISH};
        memcpy(a, argv, sizeof argv);
        return (rm_cmd){RM_SCRIPT_WRITE_RELEASE, 9, a, NULL};
    }
    const char *argv[] = {"5",
                          l->name,
                          channel,
                          timeout_prefix(l, value, st->key[1]),
                          rm_derived_key(l, NULL, "", st->key[2], sizeof st->key[2]),
                          latch_key,
                          "0",
                          value,
                          st->num[0],
                          RM_ARG_PUBLISH};
    memcpy(a, argv, sizeof argv);
    return (rm_cmd){RM_SCRIPT_READ_RELEASE, 10, a, NULL};
}

static rm_cmd rw_extend(const redmutex_lock *l, const char *value, int64_t ms, bool replace, rm_kargs *st)
{
    snprintf(st->num[0], sizeof st->num[0], "%" PRId64, ms);
    snprintf(st->num[1], sizeof st->num[1], "%" PRId64, (int64_t)REDMUTEX_TIME_MAX_MS);
    const char *mode = replace ? "1" : "0";
    if (is_write(l)) {
        /* A writer's field extends like a reentrant lock's; its owner's
           read holds (the field without ":write") are holds of the key too. */
        size_t n = strlen(value) - (sizeof WRITE_SUFFIX - 1);
        snprintf(st->key[1], sizeof st->key[1], "%.*s", (int)n, value);
        const char *argv[] = {"1", l->name, value, st->num[0], mode, st->num[1], st->key[1]};
        memcpy(st->argv, argv, sizeof argv);
        return (rm_cmd){RM_SCRIPT_RLOCK_EXTEND, 7, st->argv, NULL};
    }
    const char *argv[] = {"2", l->name, timeout_prefix(l, value, st->key[0]), value, st->num[0], mode, st->num[1]};
    memcpy(st->argv, argv, sizeof argv);
    return (rm_cmd){RM_SCRIPT_READ_EXTEND, 7, st->argv, NULL};
}

static rm_cmd rw_inspect(const redmutex_lock *l, const char *value, rm_kargs *st)
{
    if (!is_write(l) && value[0]) { /* a reader's holds are its timeout keys */
        const char *argv[] = {"2", l->name, timeout_prefix(l, value, st->key[0]), "read", value};
        memcpy(st->argv, argv, sizeof argv);
        return (rm_cmd){RM_SCRIPT_RW_INSPECT, 5, st->argv, NULL};
    }
    const char *argv[] = {"1", l->name, is_write(l) ? "write" : "read", value};
    memcpy(st->argv, argv, sizeof argv);
    return (rm_cmd){RM_SCRIPT_RW_INSPECT, 4, st->argv, NULL};
}

/* A reader's holds are its timeout keys; a writer's its field's count alone. */
static const char *rw_hold_keys(const redmutex_lock *l, const char *value, char out[RM_LONG_KEY_MAX])
{
    return is_write(l) ? NULL : timeout_prefix(l, value, out);
}

/* A writer's count is a hash field like a reentrant lock's; a reader's
   nested level also has its timeout key, taken back with it. */
static rm_cmd rw_nest_undo(const redmutex_lock *l, const char *value, const char *latch_key, int64_t latch_ms,
                           rm_kargs *st)
{
    if (is_write(l))
        return rm_kind_nest_undo(l, value, latch_key, latch_ms, st);
    rm_i64_str(st->num[0], latch_ms);
    const char *argv[] = {"3", l->name, latch_key, timeout_prefix(l, value, st->key[0]), value, st->num[0]};
    memcpy(st->argv, argv, sizeof argv);
    return (rm_cmd){RM_SCRIPT_NEST_UNDO, 6, st->argv, NULL};
}

static rm_cmd rw_force(const redmutex_lock *l, rm_kargs *st)
{
    const char *argv[] = {"2",
                          l->name,
                          rm_derived_key(l, "redisson_rwlock", "", st->key[0], sizeof st->key[0]),
                          is_write(l) ? "write" : "read",
                          is_write(l) ? "1" : "0",
                          RM_ARG_PUBLISH};
    memcpy(st->argv, argv, sizeof argv);
    return (rm_cmd){RM_SCRIPT_RW_FORCE, 6, st->argv, NULL};
}

const rm_kind_ops rm_rw_ops = {
    .field = rw_field,
    .refuse_owner = rw_refuse_owner,
    .wait_channel = rw_wait_channel,
    .acquire = rw_acquire,
    .release = rw_release,
    .extend = rw_extend,
    .inspect = rw_inspect,
    .hold_keys = rw_hold_keys,
    .force = rw_force,
    .nest_undo = rw_nest_undo,
    .server_queue = false,
    .local_waiters = false,
    .reentrant = true,
    .anonymous = false,
};
