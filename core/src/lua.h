/*
 * Lua fragments shared by the scripts of every lock kind (scripts.c,
 * kind_*.c).
 *
 * "An error means nothing changed": a script checks everything that could
 * make a later write fail before its first write. The shared checks:
 *
 * RM_LUA_FENCE_CHECK(key): the fencing counter must be absent or a canonical
 * non-negative integer below 2^63-1, so that INCR cannot fail after the lock
 * was taken (GET fails with WRONGTYPE on a key of another type, before any
 * write). String comparison of equal-length digit strings is numeric order.
 * RM_LUA_FENCE_OK_DEF defines fence_ok(key), the same test as a boolean, for
 * scripts that must choose another path instead of failing.
 *
 * RM_LUA_MAY_DEF defines may(cmd, key, ...): on Redis 7+, whether the ACL user
 * may run that write (redis.acl_check_cmd); an ACL that allows deleting a lock
 * but not publishing its release or setting its latch is refused up front
 * with NOPERM instead of failing halfway. Earlier servers have no such check.
 */
#ifndef REDMUTEX_LUA_H
#define REDMUTEX_LUA_H

#define RM_LUA_WRONGTYPE "redis.error_reply('WRONGTYPE Operation against a key holding the wrong kind of value')"

/*
 * The reentrant and fair locks share Redisson's hash of owner -> count; a
 * read-write lock is a hash too, told apart by its `mode` field ("read" or
 * "write", never a count). Before anything else, a script of the reentrant
 * or fair kind refuses such a hash (KEYS[1]) as a key of another kind,
 * instead of waiting on it or changing it.
 */
#define RM_LUA_NOT_RWLOCK                                                                                              \
    "if redis.call('type', KEYS[1])['ok'] == 'hash' then\n"                                                            \
    "  local md = redis.call('hget', KEYS[1], 'mode')\n"                                                               \
    "  if md == 'read' or md == 'write' then return " RM_LUA_WRONGTYPE " end\n"                                        \
    "end\n"

#define RM_LUA_FENCE_OK_DEF                                                                                            \
    "local function fence_ok(k)\n"                                                                                     \
    "  local fc = redis.call('get', k)\n"                                                                              \
    "  return not fc or (string.match(fc, '^%d+$') and not (#fc > 1 and string.sub(fc, 1, 1) == '0') and "             \
    "#fc <= 19 and not (#fc == 19 and fc >= '9223372036854775807'))\n"                                                 \
    "end\n"

#define RM_LUA_FENCE_CHECK(key)                                                                                        \
    "local fc = redis.call('get', " key ")\n"                                                                          \
    "if fc and (not string.match(fc, '^%d+$') or (#fc > 1 and string.sub(fc, 1, 1) == '0') or "                        \
    "#fc > 19 or (#fc == 19 and fc >= '9223372036854775807')) then\n"                                                  \
    "  return redis.error_reply('ERR redmutex: fencing counter ' .. " key " .. "                                       \
    "' is not an integer below 2^63-1; nothing was changed')\n"                                                        \
    "end\n"

#define RM_LUA_MAY_DEF                                                                                                 \
    "local function may(...)\n"                                                                                        \
    "  if redis.acl_check_cmd == nil or redis.acl_check_cmd(...) then return true end\n"                               \
    "  return false\n"                                                                                                 \
    "end\n"

/*
 * The TTL rule (docs/wire-format.md): no script lowers the TTL of a lock key
 * below the longest remaining validity of any hold the key still carries.
 * A hash is shared by every level of its owners (several handles of one
 * owner, each with its own lease; readers; a writer that also reads), and
 * the server does not know which level ends when one is released, renewed
 * or extended. So a script that changes one hold of a key that may carry
 * others only ever raises the key's TTL: at_least(key, ms) sets it to ms
 * when it is lower (and leaves a key without TTL, or a missing one, alone).
 * Each hold's validity was granted by some script that set the key's TTL to
 * at least that long, and nothing takes it back but the key's deletion.
 */
#define RM_LUA_AT_LEAST_DEF                                                                                            \
    "local function at_least(k, ms)\n"                                                                                 \
    "  ms = tonumber(ms)\n"                                                                                            \
    "  local t = redis.call('pttl', k)\n"                                                                              \
    "  if t >= 0 and t < ms then redis.call('pexpire', k, ms) end\n"                                                   \
    "end\n"

/*
 * A reader's level goes (read release, undo of a nested acquisition): its
 * top timeout key `from` is deleted, but which of the reader's holds ended
 * is not known, so the key of the level below, `to`, takes over the top
 * key's TTL when that is longer (re-made if it expired meanwhile).
 */
#define RM_LUA_PASS_DOWN_DEF                                                                                           \
    "local function pass_down(from, to)\n"                                                                             \
    "  local t = redis.call('pttl', from)\n"                                                                           \
    "  local b = redis.call('pttl', to)\n"                                                                             \
    "  if t > 0 and b ~= -1 and b < t then redis.call('set', to, '1', 'px', t) end\n"                                  \
    "  redis.call('del', from)\n"                                                                                      \
    "end\n"

/* The rest of an extend script once the owner is found: KEYS[1]'s new TTL
   from ARGV ms, mode (0 add, 1 replace), longest TTL; returns it. For the
   plain lock, whose key carries one hold: that hold's TTL is set as asked. */
#define RM_LUA_EXTEND_TTL                                                                                              \
    "local ttl = redis.call('pttl', KEYS[1])\n"                                                                        \
    "if ttl < 0 then ttl = 0 end\n"                                                                                    \
    "local new = tonumber(ARGV[2])\n"                                                                                  \
    "if ARGV[3] == '0' then new = new + ttl end\n"                                                                     \
    "if new > tonumber(ARGV[4]) then new = tonumber(ARGV[4]) end\n"                                                    \
    "redis.call('pexpire', KEYS[1], new)\n"                                                                            \
    "return new\n"

/*
 * The same for a hash kind (reentrant, fair, a writer): the hold's new TTL
 * is returned as its validity, but the key is only lowered to it when this
 * owner's one level is all the key carries; otherwise the other holds keep
 * theirs (RM_LUA_AT_LEAST_DEF). While the owner holds such a lock no other
 * owner has a field in it (it is exclusive), so the owner's count says it -
 * and, for a writer, ARGV[5]: the same owner's reader field, which may also
 * be there (a writer may read). Only commands the least-privilege ACL of
 * docs/security.md allows.
 */
#define RM_LUA_EXTEND_HASH_TTL                                                                                         \
    RM_LUA_AT_LEAST_DEF                                                                                                \
    "local ttl = redis.call('pttl', KEYS[1])\n"                                                                        \
    "if ttl < 0 then ttl = 0 end\n"                                                                                    \
    "local new = tonumber(ARGV[2])\n"                                                                                  \
    "if ARGV[3] == '0' then new = new + ttl end\n"                                                                     \
    "if new > tonumber(ARGV[4]) then new = tonumber(ARGV[4]) end\n"                                                    \
    "if redis.call('hget', KEYS[1], ARGV[1]) == '1' and "                                                              \
    "(ARGV[5] == nil or redis.call('hexists', KEYS[1], ARGV[5]) == 0) then\n"                                          \
    "  redis.call('pexpire', KEYS[1], new)\n"                                                                          \
    "else\n"                                                                                                           \
    "  at_least(KEYS[1], new)\n"                                                                                       \
    "end\n"                                                                                                            \
    "return new\n"

/*
 * A nested acquisition (ARGV[flag] '1': the owner believes it holds the lock
 * already) only adds to an existing field: when the field is gone it returns
 * {2, pttl} and writes nothing, so a lost lock is never re-created behind its
 * owner's back. Before it adds its level it writes its undo latch (KEYS
 * latch, '1', ARGV ms): an undo (RM_SCRIPT_NEST_UNDO) takes a level back only
 * where that latch says this acquisition added one, so an undo sent where
 * the request never arrived takes nothing. A copy arriving after its undo
 * finds the latch and changes nothing. `mine` must be defined; this is the
 * script's first write on the nested path.
 */
#define RM_LUA_NEST_GUARD(flag, latch, ms)                                                                             \
    "if ARGV[" flag "] == '1' then\n"                                                                                  \
    "  if not mine then return {2, redis.call('pttl', KEYS[1])} end\n"                                                 \
    "  if redis.call('exists', " latch ") == 1 then return {0, redis.call('pttl', KEYS[1])} end\n"                     \
    "  redis.call('set', " latch ", '1', 'px', " ms ")\n"                                                              \
    "end\n"

#define RM_LUA_NOPERM(what)                                                                                            \
    "return redis.error_reply('NOPERM redmutex: this user may not " what "; nothing was changed')"

#endif
