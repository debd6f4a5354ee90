/*
 * Every Lua script redmutex runs, in one place: this file is the definition
 * of the wire formats (docs/wire-format.md explains them).
 *
 * Plain lock (redis-py Lock format): key = NAME, value = token, with a TTL.
 * Reentrant lock (Redisson RLock format): key = NAME, a hash of
 * "<client id>:<thread id>" -> hold count, with a TTL.
 * Both: release channel redisson_lock__channel:{NAME} (message "0"), unlock
 * latch redisson_unlock_latch:{NAME}:<request id>, fencing counter
 * redisson_lock_token:{NAME}.
 *
 * Acquire scripts return {1, hold count, fence} when the lock was taken and
 * {0, pttl of the holder} when it is held by someone else. A key of the other
 * kind makes the first read fail with WRONGTYPE before anything is written.
 */
#define _GNU_SOURCE
#include "internal.h"

#include <pthread.h>

#define WRONGTYPE_REPLY \
    "redis.error_reply('WRONGTYPE Operation against a key holding the wrong kind of value')"

/*
 * "An error means nothing changed": a script checks everything that could
 * make a later write fail before its first write. Two such checks are shared:
 *
 * FENCE_CHECK: the fencing counter (KEYS[2]) must be absent or a canonical
 * non-negative integer below 2^63-1, so that INCR cannot fail after the lock
 * was taken (GET fails with WRONGTYPE on a key of another type, before any
 * write). String comparison of equal-length digit strings is numeric order.
 *
 * MAY(cmd, key, ...): on Redis 7+, whether the ACL user may run that write
 * (redis.acl_check_cmd); an ACL that allows deleting a lock but not
 * publishing its release or setting its latch is refused up front with
 * NOPERM instead of failing halfway. Earlier servers have no such check.
 */
#define FENCE_CHECK                                                                               \
    "local fc = redis.call('get', KEYS[2])\n"                                                    \
    "if fc and (not string.match(fc, '^%d+$') or (#fc > 1 and string.sub(fc, 1, 1) == '0') or "  \
    "#fc > 19 or (#fc == 19 and fc >= '9223372036854775807')) then\n"                            \
    "  return redis.error_reply('ERR redmutex: fencing counter ' .. KEYS[2] .. "                  \
    "' is not an integer below 2^63-1; nothing was changed')\n"                                  \
    "end\n"
#define MAY_DEF                                                                                   \
    "local function may(...)\n"                                                                  \
    "  if redis.acl_check_cmd == nil or redis.acl_check_cmd(...) then return true end\n"         \
    "  return false\n"                                                                           \
    "end\n"
#define NOPERM(what) "return redis.error_reply('NOPERM redmutex: this user may not " what "; nothing was changed')"

static const char *const script_text[RM_SCRIPT_COUNT] = {
    /* RM_SCRIPT_LOCK_ACQUIRE: KEYS name, token key; ARGV token, lease ms, fencing 0/1.
       (Without fencing the plain lock is taken by a bare SET NX PX instead.) */
    [RM_SCRIPT_LOCK_ACQUIRE] =
        "if ARGV[3] == '1' then\n" FENCE_CHECK MAY_DEF
        "  if not may('incr', KEYS[2]) then " NOPERM("INCR the fencing counter") " end\n"
        "end\n"
        "if redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then\n"
        "  local f = 0\n"
        "  if ARGV[3] == '1' then f = redis.call('incr', KEYS[2]) end\n"
        "  return {1, 1, f}\n"
        "end\n"
        "local t = redis.call('type', KEYS[1])['ok']\n"
        "if t ~= 'string' and t ~= 'none' then return " WRONGTYPE_REPLY " end\n"
        "return {0, redis.call('pttl', KEYS[1])}\n",

    /* RM_SCRIPT_LOCK_RELEASE: KEYS name, channel, latch; ARGV token, latch ms.
       Returns 1 when deleted, nil when the token does not match. A latch left
       by an earlier attempt with the same request id answers a retry. */
    [RM_SCRIPT_LOCK_RELEASE] =
        "local l = redis.call('get', KEYS[3])\n"
        "if l ~= false then return tonumber(l) end\n"
        "if redis.call('get', KEYS[1]) ~= ARGV[1] then return nil end\n" MAY_DEF
        "if not may('publish', KEYS[2], '0') then " NOPERM("PUBLISH the release") " end\n"
        "if not may('set', KEYS[3], '1', 'px', ARGV[2]) then " NOPERM("SET the unlock latch") " end\n"
        "redis.call('del', KEYS[1])\n"
        "redis.call('publish', KEYS[2], '0')\n"
        "redis.call('set', KEYS[3], 1, 'px', ARGV[2])\n"
        "return 1\n",

    /* RM_SCRIPT_LOCK_EXTEND: KEYS name; ARGV token, ms, mode (0 add, 1 replace),
       longest TTL. Returns the new TTL, or 0 when the token does not match. */
    [RM_SCRIPT_LOCK_EXTEND] =
        "if redis.call('get', KEYS[1]) ~= ARGV[1] then return 0 end\n"
        "local ttl = redis.call('pttl', KEYS[1])\n"
        "if ttl < 0 then ttl = 0 end\n"
        "local new = tonumber(ARGV[2])\n"
        "if ARGV[3] == '0' then new = new + ttl end\n"
        "if new > tonumber(ARGV[4]) then new = tonumber(ARGV[4]) end\n"
        "redis.call('pexpire', KEYS[1], new)\n"
        "return new\n",

    /* RM_SCRIPT_RLOCK_ACQUIRE: KEYS name, token key; ARGV lease ms, field,
       fencing 0/1, nested 0/1. Redisson's tryLockInner, plus the count and the
       fencing token in the reply. A nested acquisition (the owner believes it
       holds the lock already) only increments an existing field: when the
       field is gone it returns {2, pttl} and writes nothing, so a lost lock is
       never re-created behind its owner's back. A reentrant acquisition
       reports the token of the outer one. */
    [RM_SCRIPT_RLOCK_ACQUIRE] =
        "local mine = redis.call('hexists', KEYS[1], ARGV[2]) == 1\n"
        "if ARGV[4] == '1' and not mine then return {2, redis.call('pttl', KEYS[1])} end\n"
        "if ARGV[3] == '1' and not mine then\n" FENCE_CHECK MAY_DEF
        "  if not may('incr', KEYS[2]) then " NOPERM("INCR the fencing counter") " end\n"
        "end\n"
        "if mine or (redis.call('exists', KEYS[1]) == 0) then\n"
        "  local n = redis.call('hincrby', KEYS[1], ARGV[2], 1)\n"
        "  redis.call('pexpire', KEYS[1], ARGV[1])\n"
        "  local f = 0\n"
        "  if ARGV[3] == '1' then\n"
        "    if n == 1 then f = redis.call('incr', KEYS[2])\n"
        "    else f = tonumber(redis.call('get', KEYS[2]) or '0') end\n"
        "  end\n"
        "  return {1, n, f}\n"
        "end\n"
        "return {0, redis.call('pttl', KEYS[1])}\n",

    /* RM_SCRIPT_RLOCK_RELEASE: Redisson's unlockInner, unchanged.
       KEYS name, channel, latch; ARGV "0", lease ms, field, "publish", latch ms.
       Returns 1 when deleted, 0 when decremented, nil when not the owner. */
    [RM_SCRIPT_RLOCK_RELEASE] =
        "local val = redis.call('get', KEYS[3])\n"
        "if val ~= false then return tonumber(val) end\n"
        "if (redis.call('hexists', KEYS[1], ARGV[3]) == 0) then return nil end\n" MAY_DEF
        "if not may(ARGV[4], KEYS[2], ARGV[1]) then " NOPERM("PUBLISH the release") " end\n"
        "if not may('set', KEYS[3], '1', 'px', ARGV[5]) then " NOPERM("SET the unlock latch") " end\n"
        "local counter = redis.call('hincrby', KEYS[1], ARGV[3], -1)\n"
        "if (counter > 0) then\n"
        "  redis.call('pexpire', KEYS[1], ARGV[2])\n"
        "  redis.call('set', KEYS[3], 0, 'px', ARGV[5])\n"
        "  return 0\n"
        "else\n"
        "  redis.call('del', KEYS[1])\n"
        "  redis.call(ARGV[4], KEYS[2], ARGV[1])\n"
        "  redis.call('set', KEYS[3], 1, 'px', ARGV[5])\n"
        "  return 1\n"
        "end\n",

    /* RM_SCRIPT_RLOCK_EXTEND: KEYS name; ARGV field, ms, mode, longest TTL. As LOCK_EXTEND. */
    [RM_SCRIPT_RLOCK_EXTEND] =
        "if redis.call('hexists', KEYS[1], ARGV[1]) == 0 then return 0 end\n"
        "local ttl = redis.call('pttl', KEYS[1])\n"
        "if ttl < 0 then ttl = 0 end\n"
        "local new = tonumber(ARGV[2])\n"
        "if ARGV[3] == '0' then new = new + ttl end\n"
        "if new > tonumber(ARGV[4]) then new = tonumber(ARGV[4]) end\n"
        "redis.call('pexpire', KEYS[1], new)\n"
        "return new\n",

    /* RM_SCRIPT_FORCE_RELEASE: KEYS name, channel; ARGV expected type (string|hash). */
    [RM_SCRIPT_FORCE_RELEASE] =
        "local t = redis.call('type', KEYS[1])['ok']\n"
        "if t == 'none' then return 0 end\n"
        "if t ~= ARGV[1] then return " WRONGTYPE_REPLY " end\n" MAY_DEF
        "if not may('publish', KEYS[2], '0') then " NOPERM("PUBLISH the release") " end\n"
        "redis.call('del', KEYS[1])\n"
        "redis.call('publish', KEYS[2], '0')\n"
        "return 1\n",

    /* RM_SCRIPT_INSPECT: KEYS name; ARGV expected type, owner value ('' = nobody).
       Returns {exists, pttl, hold count of the owner}. */
    [RM_SCRIPT_INSPECT] =
        "local t = redis.call('type', KEYS[1])['ok']\n"
        "if t == 'none' then return {0, -2, 0} end\n"
        "if t ~= ARGV[1] then return " WRONGTYPE_REPLY " end\n"
        "local n = 0\n"
        "if ARGV[2] ~= '' then\n"
        "  if t == 'string' then\n"
        "    if redis.call('get', KEYS[1]) == ARGV[2] then n = 1 end\n"
        "  else n = tonumber(redis.call('hget', KEYS[1], ARGV[2]) or '0') end\n"
        "end\n"
        "return {1, redis.call('pttl', KEYS[1]), n}\n",

    /* RM_SCRIPT_RENEW: the watchdog's batch. KEYS names; ARGV[1] lease ms,
       ARGV[1+i] = 's'..token (plain) or 'h'..field (reentrant) for KEYS[i].
       Extends only locks still held by that owner; never creates a key.
       Returns one 1/0 per key. */
    [RM_SCRIPT_RENEW] =
        "local res = {}\n"
        "for i = 1, #KEYS do\n"
        "  local a = ARGV[i + 1]\n"
        "  local who = string.sub(a, 2)\n"
        "  local t = redis.call('type', KEYS[i])['ok']\n"
        "  local ok = 0\n"
        "  if string.sub(a, 1, 1) == 'h' then\n"
        "    if t == 'hash' and redis.call('hexists', KEYS[i], who) == 1 then ok = 1 end\n"
        "  elseif t == 'string' and redis.call('get', KEYS[i]) == who then ok = 1 end\n"
        "  if ok == 1 then redis.call('pexpire', KEYS[i], ARGV[1]) end\n"
        "  res[i] = ok\n"
        "end\n"
        "return res\n",

    /* RM_SCRIPT_FENCE_RATCHET: KEYS token key; ARGV token. Raises the counter
       to the token if it is lower (Redlock: see lock.c, fenced_quorum). */
    [RM_SCRIPT_FENCE_RATCHET] =
        "if tonumber(redis.call('get', KEYS[1]) or '0') < tonumber(ARGV[1]) then\n"
        "  redis.call('set', KEYS[1], ARGV[1])\n"
        "end\n"
        "return 1\n",
};

static char script_sha[RM_SCRIPT_COUNT][41];
static pthread_once_t sha_once = PTHREAD_ONCE_INIT;

static void compute_shas(void)
{
    for (int i = 0; i < RM_SCRIPT_COUNT; i++) {
        const char *t = script_text[i];
        size_t len = 0;
        while (t[len])
            len++;
        rm_sha1_hex(script_sha[i], t, len);
    }
}

const char *rm_script_text(int id) { return script_text[id]; }

const char *rm_script_sha(int id)
{
    pthread_once(&sha_once, compute_shas);
    return script_sha[id];
}
