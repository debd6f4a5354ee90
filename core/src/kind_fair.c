/*
 * The fair lock (REDMUTEX_KIND_FAIR): Redisson's RFairLock wire format, so a
 * Redisson fair lock and a redmutex fair lock on one name share one FIFO.
 *
 * Keys (NAME in braces unless it has a '{', as everywhere):
 *   NAME                              hash field -> hold count, with a TTL (as RLock)
 *   redisson_lock_queue:{NAME}        list of waiting fields, oldest first
 *   redisson_lock_timeout:{NAME}      zset field -> wall-clock ms after which a
 *                                     waiter at the head counts as gone (Redisson's)
 *   redisson_lock__channel:{NAME}:<field>   each waiter's own channel
 *   redmutex_lock_waiters:{NAME}      hash field -> "<deadline> <grant> <fencing> <wait id>"
 *                                     for redmutex's waiters (see below)
 *   redisson_lock_token:{NAME}        fencing counter; redisson_unlock_latch:... as RLock
 *
 * Redisson's rules, followed here: the lock is taken when it is free and the
 * taker is at the head of the queue (or the queue is empty); a busy attempt
 * joins the tail with a timeout of the previous waiter's timeout (or the
 * lock's TTL) plus a thread wait time; every acquisition moves all timeouts
 * down by one thread wait; a head whose timeout has passed is dropped by the
 * next script; a release publishes "0" to the head's channel only.
 *
 * What redmutex adds, invisible to Redisson:
 *  - Its waiters use Redisson's default thread wait (5 minutes) in the
 *    timeouts, so Redisson sees them as it sees its own lock() waiters, and
 *    push their timeout forward while they wait, so Redisson never drops a
 *    live redmutex waiter that waits long.
 *  - A waiter that dies must not block the queue for minutes. Each redmutex
 *    waiter keeps a record with a deadline on the server's clock, refreshed
 *    by every attempt (kind.h: RM_FAIR_REFRESH_MS near the head of the queue,
 *    RM_FAIR_QUEUED_REFRESH_MS further back); a record past its
 *    deadline marks a dead waiter, and the next script drops it from the head.
 *  - Hand-off without a round trip: when the lock is freed and the head is a
 *    redmutex waiter renewed by a watchdog on a single server, the releasing
 *    script grants the lock to it (HSET, PEXPIRE) and publishes "g <wait id>
 *    <fence>" on its channel; the waiter holds the lock as soon as the message
 *    arrives. The grant's TTL ends at the waiter's record deadline, so a
 *    waiter that died before it could take the lock holds it no longer than
 *    it would have blocked the queue; a live one's watchdog extends it to the
 *    full lease a third of that TTL later.
 *  - Only the head tries: a busy attempt tells the waiter its place, and a
 *    waiter behind others makes no attempt until it is notified (pass_on
 *    reaches the head only) or its refresh is due, so a hand-off costs one
 *    release and one acquire however long the queue (kind.h, rm_fair_pause_ms).
 *  - A waiter that stops waiting leaves the queue (Redisson's acquireFailed
 *    script, plus giving back a grant that raced with it), and a script that
 *    frees the lock or drops dead waiters passes the lock on to the new head.
 */
#define _GNU_SOURCE
#include "client.h"
#include "fanout.h"
#include "handle.h"
#include "internal.h"
#include "kind.h"
#include "lua.h"
#include "scripts.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

/* Redisson's default threadWaitTime: how far apart queued timeouts are. */
#define THREAD_WAIT_MS 300000
/* A grant needs this much of the waiter's record left; less and the waiter may be gone. */
#define MIN_GRANT_MS 1000

#define STR_(x) #x
#define STR(x) STR_(x)

/* ---- Lua ---------------------------------------------------------------------- */

/* clang-format off */

/*
 * Shared by all fair scripts. KEYS: [1] lock, [2] queue, [3] timeouts,
 * [4] redmutex waiter records, [5] channel prefix, [6] fencing counter.
 * Before anything is written: every key's type (a read-write lock's hash
 * is another kind, lua.h), and (Redis 7+) the ACL permission of a write to
 * each of them.
 */
#define FAIR_CHECKS                                                                               \
    "local function kind_is(k, ty)\n"                                                            \
    "  local t = redis.call('type', k)['ok']\n"                                                  \
    "  return t == 'none' or t == ty\n"                                                          \
    "end\n"                                                                                      \
    "if not (kind_is(KEYS[1], 'hash') and kind_is(KEYS[2], 'list') and kind_is(KEYS[3], 'zset') and " \
    "kind_is(KEYS[4], 'hash')) then return " RM_LUA_WRONGTYPE " end\n" RM_LUA_NOT_RWLOCK          \
    RM_LUA_MAY_DEF RM_LUA_AT_LEAST_DEF                                                             \
    "if not (may('hset', KEYS[1], 'f', '1') and may('rpush', KEYS[2], 'f') and "                  \
    "may('zadd', KEYS[3], '0', 'f') and may('hset', KEYS[4], 'f', 'v') and "                      \
    "may(ARGV[#ARGV], KEYS[5] .. ':f', '0') and may('pexpire', KEYS[2], '1') and "                \
    "may('pexpire', KEYS[3], '1') and may('pexpire', KEYS[4], '1')) then "                         \
    RM_LUA_NOPERM("change the keys of this fair lock") " end\n"

/*
 * Every fair script's last ARGV is the command it publishes with
 * (RM_ARG_PUBLISH: spublish on a 7.0+ cluster, as Redisson does).
 *
 * Shared definitions. now: the server's clock in ms (waiter records); nowc:
 * the caller's wall clock in ms (Redisson's timeouts, ARGV[NOWC]); W: the
 * thread wait (ARGV[W]).
 *  gone(w)  - whether the waiter w is gone: its Redisson timeout has passed
 *             (or it has none), or its redmutex record's deadline has.
 *  prune()  - drops gone waiters from the head; returns how many.
 *  place(w) - w's position in the queue, 0 for the head (LPOS where the
 *             server has it).
 *  tend()   - the queue, its timeouts and the waiter records expire one
 *             thread wait after the last queued timeout: waiters that die
 *             leave nothing behind for good (every script that may have
 *             written them calls it before it returns).
 *  shift()  - Redisson: after an acquisition every timeout moves down one wait.
 *  pass_on()- the lock is free: grant it to the head if that is a redmutex
 *             waiter that takes grants and is surely alive, else publish "0"
 *             on the head's channel.
 */
#define FAIR_DEFS(NOWC, W)                                                                        \
    "if redis.replicate_commands then redis.replicate_commands() end\n"                          \
    "local tm = redis.call('time')\n"                                                            \
    "local now = tonumber(tm[1]) * 1000 + math.floor(tonumber(tm[2]) / 1000)\n"                  \
    "local nowc = tonumber(ARGV[" NOWC "])\n"                                                    \
    "local W = tonumber(ARGV[" W "])\n" RM_LUA_FENCE_OK_DEF                                      \
    "local function gone(w)\n"                                                                   \
    "  local to = redis.call('zscore', KEYS[3], w)\n"                                            \
    "  if not to or tonumber(to) <= nowc then return true end\n"                                 \
    "  local rec = redis.call('hget', KEYS[4], w)\n"                                             \
    "  return rec ~= false and tonumber(string.match(rec, '^%d+') or '0') <= now\n"              \
    "end\n"                                                                                      \
    "local function prune()\n"                                                                   \
    "  local n = 0\n"                                                                            \
    "  while true do\n"                                                                          \
    "    local h = redis.call('lindex', KEYS[2], 0)\n"                                           \
    "    if not h or not gone(h) then return n end\n"                                            \
    "    redis.call('lpop', KEYS[2])\n"                                                          \
    "    redis.call('zrem', KEYS[3], h)\n"                                                       \
    "    redis.call('hdel', KEYS[4], h)\n"                                                       \
    "    n = n + 1\n"                                                                            \
    "  end\n"                                                                                    \
    "end\n"                                                                                      \
    "local function place(w)\n"                                                                  \
    "  local p = redis.pcall('lpos', KEYS[2], w)\n"                                              \
    "  if type(p) == 'number' then return p end\n"                                               \
    "  if type(p) == 'table' then\n"                                                             \
    "    local q = redis.call('lrange', KEYS[2], 0, -1)\n"                                       \
    "    for i = 1, #q do if q[i] == w then return i - 1 end end\n"                              \
    "  end\n"                                                                                    \
    "  return 0\n"                                                                               \
    "end\n"                                                                                      \
    "local function tend()\n"                                                                    \
    "  local last = redis.call('zrange', KEYS[3], -1, -1, 'withscores')\n"                       \
    "  if #last < 2 then return end\n"                                                           \
    "  local ttl = math.floor(tonumber(last[2]) - nowc + W)\n"                                   \
    "  if ttl < 1 then ttl = 1 end\n"                                                            \
    "  for k = 2, 4 do redis.call('pexpire', KEYS[k], ttl) end\n"                                \
    "end\n"                                                                                      \
    "local function shift()\n"                                                                   \
    "  local ws = redis.call('zrange', KEYS[3], 0, -1)\n"                                        \
    "  for i = 1, #ws do redis.call('zincrby', KEYS[3], -W, ws[i]) end\n"                        \
    "end\n"                                                                                      \
    "local function pass_on()\n"                                                                 \
    "  local h = redis.call('lindex', KEYS[2], 0)\n"                                             \
    "  if not h then return end\n"                                                               \
    "  local rec = redis.call('hget', KEYS[4], h)\n"                                             \
    "  if rec then\n"                                                                            \
    "    local dl, g, fz, id = string.match(rec, '^(%d+) (%d) (%d) (%x+)$')\n"                   \
    "    dl = tonumber(dl)\n"                                                                    \
    "    if g == '1' and dl and dl - now >= " STR(MIN_GRANT_MS) " and (fz ~= '1' or fence_ok(KEYS[6])) then\n" \
    "      redis.call('lpop', KEYS[2])\n"                                                        \
    "      redis.call('zrem', KEYS[3], h)\n"                                                     \
    "      redis.call('hdel', KEYS[4], h)\n"                                                     \
    "      shift()\n"                                                                            \
    "      redis.call('hset', KEYS[1], h, 1)\n"                                                  \
    "      redis.call('pexpire', KEYS[1], dl - now)\n"                                           \
    "      local f = 0\n"                                                                        \
    "      if fz == '1' then f = redis.call('incr', KEYS[6]) end\n"                              \
    "      redis.call(ARGV[#ARGV], KEYS[5] .. ':' .. h, 'g ' .. id .. ' ' .. f)\n"                 \
    "      return\n"                                                                             \
    "    end\n"                                                                                  \
    "  end\n"                                                                                    \
    "  redis.call(ARGV[#ARGV], KEYS[5] .. ':' .. h, '0')\n"                                        \
    "end\n"

/*
 * Acquire. KEYS as above. ARGV: [1] lease ms, [2] field, [3] thread wait,
 * [4] wall clock ms, [5] mode ('t' try, 'f' first attempt of a wait, 'r' a
 * later one), [6] fencing 0/1, [7] nested 0/1, [8] the record's tail
 * "<grant 0/1> <fencing 0/1> <wait id>", [9] waiter lease ms; a nested
 * acquisition adds KEYS[7] its undo latch and ARGV[10] that latch's life
 * (lua.h, RM_LUA_NEST_GUARD).
 * Replies {1, count, fence, pttl} taken, {0, pttl, behind} busy (behind:
 * how many waiters are ahead of this one in the queue, 0 for a try), {2,
 * pttl} a nested acquisition whose field is gone (nothing written). A
 * waiter with others ahead of it learns of its turn from the script that
 * makes it the head of a free lock (pass_on), so it need not try before.
 *
 * A waiting attempt ('r') that finds its own field was handed the lock by a
 * releasing script (the message may be late or lost): it takes that hold as
 * it is. A first attempt finding its field is a reentrant acquisition,
 * which only raises the key's TTL (lua.h, RM_LUA_AT_LEAST_DEF; Redisson's
 * sets it to this lease, cutting an outer hold with a longer one short).
 */
const char rm_lua_fair_acquire[] =
    FAIR_CHECKS
    "local mine = redis.call('hexists', KEYS[1], ARGV[2]) == 1\n"
    "if ARGV[6] == '1' then\n" RM_LUA_FENCE_CHECK("KEYS[6]") "end\n"
    "if ARGV[6] == '1' and not mine then\n"
    "  if not may('incr', KEYS[6]) then " RM_LUA_NOPERM("INCR the fencing counter") " end\n"
    "end\n" FAIR_DEFS("4", "3")
    RM_LUA_NEST_GUARD("7", "KEYS[7]", "ARGV[10]")
    "local function cur_fence()\n"
    "  if ARGV[6] ~= '1' then return 0 end\n"
    "  return tonumber(redis.call('get', KEYS[6]) or '0')\n"
    "end\n"
    "if mine then\n"
    "  if ARGV[7] ~= '1' and ARGV[5] == 'r' then\n"
    "    redis.call('lrem', KEYS[2], 0, ARGV[2])\n"
    "    redis.call('zrem', KEYS[3], ARGV[2])\n"
    "    redis.call('hdel', KEYS[4], ARGV[2])\n"
    "    tend()\n"
    "    return {1, tonumber(redis.call('hget', KEYS[1], ARGV[2])), cur_fence(), redis.call('pttl', KEYS[1])}\n"
    "  end\n"
    "  local n = redis.call('hincrby', KEYS[1], ARGV[2], 1)\n"
    "  at_least(KEYS[1], ARGV[1])\n"
    "  return {1, n, cur_fence(), tonumber(ARGV[1])}\n"
    "end\n"
    "local evicted = prune()\n"
    "local head = redis.call('lindex', KEYS[2], 0)\n"
    "if redis.call('exists', KEYS[1]) == 0 and (not head or head == ARGV[2]) then\n"
    "  if head then redis.call('lpop', KEYS[2]) end\n"
    "  redis.call('zrem', KEYS[3], ARGV[2])\n"
    "  redis.call('hdel', KEYS[4], ARGV[2])\n"
    "  shift()\n"
    "  redis.call('hset', KEYS[1], ARGV[2], 1)\n"
    "  redis.call('pexpire', KEYS[1], ARGV[1])\n"
    "  local f = 0\n"
    "  if ARGV[6] == '1' then f = redis.call('incr', KEYS[6]) end\n"
    "  tend()\n"
    "  return {1, 1, f, tonumber(ARGV[1])}\n"
    "end\n"
    "if ARGV[5] ~= 't' then\n"
    "  local to = redis.call('zscore', KEYS[3], ARGV[2])\n"
    "  if to then\n"
    "    local keep = nowc + (place(ARGV[2]) + 1) * W\n"
    "    if tonumber(to) < keep then redis.call('zadd', KEYS[3], keep, ARGV[2]) end\n"
    "  else\n"
    "    local last = redis.call('lindex', KEYS[2], -1)\n"
    "    local ls = last and last ~= ARGV[2] and redis.call('zscore', KEYS[3], last)\n"
    "    local ttl\n"
    "    if ls then ttl = tonumber(ls) - nowc else ttl = redis.call('pttl', KEYS[1]) end\n"
    "    redis.call('zadd', KEYS[3], ttl + W + nowc, ARGV[2])\n"
    "    redis.call('rpush', KEYS[2], ARGV[2])\n"
    "  end\n"
    "  redis.call('hset', KEYS[4], ARGV[2], (now + tonumber(ARGV[9])) .. ' ' .. ARGV[8])\n"
    "end\n"
    "if evicted > 0 and redis.call('exists', KEYS[1]) == 0 then pass_on() end\n"
    "tend()\n"
    "local behind = 0\n"
    "if ARGV[5] ~= 't' then behind = place(ARGV[2]) end\n"
    "return {0, redis.call('pttl', KEYS[1]), behind}\n";

/*
 * Release: Redisson's fair unlock script with the unlock latch. KEYS as
 * above, [7] latch. ARGV: [1] lease ms, [2] field, [3] thread wait, [4] wall
 * clock ms, [5] latch ms. Replies 1 deleted (and passed on), 0 decremented,
 * nil not the owner, or an earlier attempt's result from the latch. Unlike
 * Redisson's, a release that finds the lock gone answers nil (its holder
 * learns that it was lost) - after passing the free lock on to the head;
 * and a release that leaves levels behind keeps the key's TTL (Redisson's
 * sets it to this lease: lua.h, RM_LUA_AT_LEAST_DEF). ARGV[1] is unused.
 */
const char rm_lua_fair_release[] =
    "local l = redis.call('get', KEYS[7])\n"
    "if l ~= false then return tonumber(l) end\n" FAIR_CHECKS
    "if not may('set', KEYS[7], '1', 'px', ARGV[5]) then " RM_LUA_NOPERM("SET the unlock latch") " end\n"
    FAIR_DEFS("4", "3")
    "prune()\n"
    "tend()\n"
    "if redis.call('exists', KEYS[1]) == 0 then\n"
    "  pass_on()\n"
    "  tend()\n"
    "  return nil\n"
    "end\n"
    "if redis.call('hexists', KEYS[1], ARGV[2]) == 0 then return nil end\n"
    "local n = redis.call('hincrby', KEYS[1], ARGV[2], -1)\n"
    "if n > 0 then\n"
    "  redis.call('set', KEYS[7], 0, 'px', ARGV[5])\n"
    "  return 0\n"
    "end\n"
    "redis.call('del', KEYS[1])\n"
    "redis.call('set', KEYS[7], 1, 'px', ARGV[5])\n"
    "pass_on()\n"
    "tend()\n"
    "return 1\n";

/*
 * A waiter stops waiting. KEYS as above. ARGV: [1] field, [2] thread wait,
 * [3] wall clock ms, [4] give back 1/0. A grant that reached this field
 * meanwhile is given back (and passed on) - unless ARGV[4] is 0: the same
 * owner holds the lock otherwise, and the field's count is (also) that
 * hold's; then Redisson's acquireFailed: the waiters behind move up one
 * thread wait, and the field leaves the queue. Replies 1.
 */
const char rm_lua_fair_leave[] =
    FAIR_CHECKS FAIR_DEFS("3", "2")
    "if ARGV[4] == '1' and redis.call('hexists', KEYS[1], ARGV[1]) == 1 and "
    "redis.call('hincrby', KEYS[1], ARGV[1], -1) <= 0 then\n"
    "  redis.call('del', KEYS[1])\n"
    "end\n"
    "local q = redis.call('lrange', KEYS[2], 0, -1)\n"
    "local i = 1\n"
    "while i <= #q and q[i] ~= ARGV[1] do i = i + 1 end\n"
    "for k = i + 1, #q do redis.call('zincrby', KEYS[3], -W, q[k]) end\n"
    "redis.call('zrem', KEYS[3], ARGV[1])\n"
    "redis.call('lrem', KEYS[2], 0, ARGV[1])\n"
    "redis.call('hdel', KEYS[4], ARGV[1])\n"
    "prune()\n"
    "if redis.call('exists', KEYS[1]) == 0 then pass_on() end\n"
    "tend()\n"
    "return 1\n";

/* Force release (Redisson's forceUnlock). KEYS as above. ARGV: [1] thread wait, [2] wall clock ms. */
const char rm_lua_fair_force[] =
    FAIR_CHECKS FAIR_DEFS("2", "1")
    "prune()\n"
    "local deleted = redis.call('del', KEYS[1])\n"
    "if deleted == 1 then pass_on() end\n"
    "tend()\n"
    "return deleted\n";

/* clang-format on */

/* ---- commands ------------------------------------------------------------------ */

/* KEYS[1..6] into st->key[0..4] (the lock name itself is l->name). */
static void fair_keys(const redmutex_lock *l, rm_kargs *st, const char **argv)
{
    argv[0] = l->name;
    argv[1] = rm_derived_key(l, "redisson_lock_queue", "", st->key[0], sizeof st->key[0]);
    argv[2] = rm_derived_key(l, "redisson_lock_timeout", "", st->key[1], sizeof st->key[1]);
    argv[3] = rm_derived_key(l, "redmutex_lock_waiters", "", st->key[2], sizeof st->key[2]);
    argv[4] = rm_derived_key(l, "redisson_lock__channel", "", st->key[3], sizeof st->key[3]);
    argv[5] = rm_derived_key(l, "redisson_lock_token", "", st->key[4], sizeof st->key[4]);
}

/* The wall clock in ms, as Redisson's timeouts use it. */
static int64_t wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void fair_field(const redmutex_lock *l, const char *owner_key, char out[RM_VALUE_MAX + 1])
{
    (void)l;
    snprintf(out, RM_VALUE_MAX + 1, "%s", owner_key);
}

static void fair_wait_channel(const redmutex_lock *l, const char *value, char out[RM_LONG_KEY_MAX])
{
    char suffix[RM_VALUE_MAX + 2];
    snprintf(suffix, sizeof suffix, ":%s", value);
    rm_derived_key(l, "redisson_lock__channel", suffix, out, RM_LONG_KEY_MAX);
}

static rm_cmd fair_acquire(const redmutex_lock *l, const rm_acq_in *in, rm_kargs *st)
{
    const char **a = st->argv;
    a[0] = in->nest_latch ? "7" : "6";
    fair_keys(l, st, a + 1);
    size_t k = 7; /* the first ARGV */
    if (in->nest_latch)
        a[k++] = in->nest_latch;
    snprintf(st->num[0], sizeof st->num[0], "%" PRId64, in->lease_ms);
    snprintf(st->num[1], sizeof st->num[1], "%d", THREAD_WAIT_MS);
    snprintf(st->num[2], sizeof st->num[2], "%" PRId64, wall_ms());
    snprintf(st->num[3], sizeof st->num[3], "%d %d %.16s", in->grantable ? 1 : 0, in->fencing ? 1 : 0,
             in->nonce ? in->nonce : "0");
    snprintf(st->num[4], sizeof st->num[4], "%d", RM_FAIR_WAITER_LEASE_MS);
    a[k++] = st->num[0];
    a[k++] = in->value;
    a[k++] = st->num[1];
    a[k++] = st->num[2];
    a[k++] = in->mode == RM_ACQ_TRY ? "t" : in->mode == RM_ACQ_FIRST ? "f" : "r";
    a[k++] = in->fencing ? "1" : "0";
    a[k++] = in->nest_latch ? "1" : "0";
    a[k++] = st->num[3];
    a[k++] = st->num[4];
    if (in->nest_latch)
        a[k++] = rm_i64_str(st->num[5], in->latch_ms);
    a[k++] = RM_ARG_PUBLISH;
    return (rm_cmd){RM_SCRIPT_FAIR_ACQUIRE, (int)k, a, NULL};
}

static rm_cmd fair_release(const redmutex_lock *l, const char *value, const char *latch_key, int64_t lease_ms,
                           int64_t latch_ms, rm_kargs *st)
{
    const char **a = st->argv;
    a[0] = "7";
    fair_keys(l, st, a + 1);
    a[7] = latch_key;
    snprintf(st->num[0], sizeof st->num[0], "%" PRId64, lease_ms);
    snprintf(st->num[1], sizeof st->num[1], "%d", THREAD_WAIT_MS);
    snprintf(st->num[2], sizeof st->num[2], "%" PRId64, wall_ms());
    snprintf(st->num[3], sizeof st->num[3], "%" PRId64, latch_ms);
    a[8] = st->num[0];
    a[9] = value;
    a[10] = st->num[1];
    a[11] = st->num[2];
    a[12] = st->num[3];
    a[13] = RM_ARG_PUBLISH;
    return (rm_cmd){RM_SCRIPT_FAIR_RELEASE, 14, a, NULL};
}

static rm_cmd fair_force(const redmutex_lock *l, rm_kargs *st)
{
    const char **a = st->argv;
    a[0] = "6";
    fair_keys(l, st, a + 1);
    snprintf(st->num[0], sizeof st->num[0], "%d", THREAD_WAIT_MS);
    snprintf(st->num[1], sizeof st->num[1], "%" PRId64, wall_ms());
    a[7] = st->num[0];
    a[8] = st->num[1];
    a[9] = RM_ARG_PUBLISH;
    return (rm_cmd){RM_SCRIPT_FAIR_FORCE, 10, a, NULL};
}

/* Extending and inspecting a fair lock is the reentrant lock's business: same hash. */
static rm_cmd fair_extend(const redmutex_lock *l, const char *value, int64_t ms, bool replace, rm_kargs *st)
{
    snprintf(st->num[0], sizeof st->num[0], "%" PRId64, ms);
    snprintf(st->num[1], sizeof st->num[1], "%" PRId64, (int64_t)REDMUTEX_TIME_MAX_MS);
    const char *argv[] = {"1", l->name, value, st->num[0], replace ? "1" : "0", st->num[1]};
    memcpy(st->argv, argv, sizeof argv);
    return (rm_cmd){RM_SCRIPT_RLOCK_EXTEND, 6, st->argv, NULL};
}

static rm_cmd fair_inspect(const redmutex_lock *l, const char *value, rm_kargs *st)
{
    const char *argv[] = {"1", l->name, "hash", value};
    memcpy(st->argv, argv, sizeof argv);
    return (rm_cmd){RM_SCRIPT_INSPECT, 4, st->argv, NULL};
}

const rm_kind_ops rm_fair_ops = {
    .field = fair_field,
    .wait_channel = fair_wait_channel,
    .acquire = fair_acquire,
    .release = fair_release,
    .extend = fair_extend,
    .inspect = fair_inspect,
    .force = fair_force,
    .nest_undo = rm_kind_nest_undo,
    .server_queue = true,
    .local_waiters = false,
    .reentrant = true,
    .anonymous = false,
};

/* ---- waiting ------------------------------------------------------------------- */

int rm_fair_new_nonce(rm_err *err, char out[17])
{
    unsigned char b[8];
    if (rm_random_bytes(b, sizeof b) != 0)
        return rm_fail(err, REDMUTEX_ESYSTEM, "the system gave no random bytes (getrandom failed); nothing was sent");
    rm_hex(out, b, sizeof b);
    return 0;
}

bool rm_fair_grant_parse(const char *msg, const char *nonce, int64_t *fence)
{
    size_t n = strlen(nonce);
    if (strncmp(msg, "g ", 2) != 0 || strncmp(msg + 2, nonce, n) != 0 || msg[2 + n] != ' ')
        return false;
    const char *p = msg + 3 + n;
    int64_t f = 0;
    if (*p < '0' || *p > '9')
        return false;
    for (; *p >= '0' && *p <= '9'; p++) {
        if (f > (INT64_MAX - 9) / 10)
            return false;
        f = f * 10 + (*p - '0');
    }
    if (*p != '\0')
        return false;
    *fence = f;
    return true;
}

void rm_fair_leave(redmutex_lock *l, const char *value, const bool *only, bool give_back)
{
    redmutex_client *c = l->c;
    rm_kargs st;
    const char **a = st.argv;
    a[0] = "6";
    fair_keys(l, &st, a + 1);
    snprintf(st.num[0], sizeof st.num[0], "%d", THREAD_WAIT_MS);
    snprintf(st.num[1], sizeof st.num[1], "%" PRId64, wall_ms());
    a[7] = value;
    a[8] = st.num[0];
    a[9] = st.num[1];
    a[10] = give_back ? "1" : "0";
    a[11] = RM_ARG_PUBLISH;
    rm_req req = {1, {{RM_SCRIPT_FAIR_LEAVE, 12, a, NULL}}, l->name, NULL, NULL};
    rm_call call;
    if (rm_call_begin(NULL, &call, c) == 0) {
        /* Like a release: sent to every server, in order behind this owner's attempts. */
        call.must_send = true;
        call.only = only;
        call.strict_deadline = only != NULL;
        rm_call_run(&call, &req, rm_deadline_after_ms(c->opts.command_timeout_ms), NULL, NULL);
        rm_call_end(&call);
    }
}
