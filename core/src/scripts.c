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
#include "kind.h" /* kinds of the operations table: their scripts, and the RENEW branch for readers */
#include "lua.h"
#include "scripts.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* The checks every script shares are in lua.h (why they exist is said there). */
#define WRONGTYPE_REPLY RM_LUA_WRONGTYPE
#define MAY_DEF RM_LUA_MAY_DEF
#define NOPERM(what) RM_LUA_NOPERM(what)

/* Lua text, laid out as Lua reads; clang-format would re-indent it around the macros. */
/* clang-format off */
static const char *const script_text[RM_SCRIPT_COUNT] = {
    /* RM_SCRIPT_FORCE_RELEASE: KEYS name, channel; ARGV expected type (string|hash),
       the publish command (RM_ARG_PUBLISH: spublish on a 7.0+ cluster).
       A read-write lock's hash is not the reentrant kind's (lua.h). */
    [RM_SCRIPT_FORCE_RELEASE] =
        "local t = redis.call('type', KEYS[1])['ok']\n"
        "if t == 'none' then return 0 end\n"
        "if t ~= ARGV[1] then return " WRONGTYPE_REPLY " end\n" RM_LUA_NOT_RWLOCK MAY_DEF
        "if not may(ARGV[2], KEYS[2], '0') then " NOPERM("PUBLISH the release") " end\n"
        "redis.call('del', KEYS[1])\n"
        "redis.call(ARGV[2], KEYS[2], '0')\n"
        "return 1\n",

    /* RM_SCRIPT_INSPECT: KEYS name; ARGV expected type, owner value ('' = nobody).
       Returns {exists, pttl, hold count of the owner}. */
    [RM_SCRIPT_INSPECT] =
        "local t = redis.call('type', KEYS[1])['ok']\n"
        "if t == 'none' then return {0, -2, 0} end\n"
        "if t ~= ARGV[1] then return " WRONGTYPE_REPLY " end\n" RM_LUA_NOT_RWLOCK
        "local n = 0\n"
        "if ARGV[2] ~= '' then\n"
        "  if t == 'string' then\n"
        "    if redis.call('get', KEYS[1]) == ARGV[2] then n = 1 end\n"
        "  else n = tonumber(redis.call('hget', KEYS[1], ARGV[2]) or '0') end\n"
        "end\n"
        "return {1, redis.call('pttl', KEYS[1]), n}\n",

    /* RM_SCRIPT_RENEW: the watchdog's batch. KEYS names; ARGV[1] lease ms,
       ARGV[1+i] = 's'..token (plain), 'h'..field (hash kinds), 'r'..field
       (a reader of a read-write lock, kind.h) or 'p'..permit id (a
       semaphore's hold, kind.h) for KEYS[i].
       Extends only locks still held by that owner; never creates a key, and
       never lowers a TTL: the key may carry other holds that last longer
       (lua.h, RM_LUA_AT_LEAST_DEF). A reader counts only while one of its
       timeout keys lives (kind.h, RM_LUA_READER_LIVE_DEF). Returns one 1/0
       per key. */
    [RM_SCRIPT_RENEW] =
        RM_LUA_AT_LEAST_DEF RM_LUA_READER_LIVE_DEF MAY_DEF RM_LUA_PERMIT_DEFS
        "local now\n"
        "local res = {}\n"
        "for i = 1, #KEYS do\n"
        "  local a = ARGV[i + 1]\n"
        "  local who = string.sub(a, 2)\n"
        "  local key = KEYS[i]\n"
        "  local t = redis.call('type', key)['ok']\n"
        "  local ok = 0\n"
        "  local tag = string.sub(a, 1, 1)\n"
        "  if tag == 'r' then\n" RM_LUA_RENEW_READER
        "  elseif tag == 'p' then\n" RM_LUA_RENEW_PERMIT
        "  else\n"
        "    if tag == 'h' then\n"
        "      if t == 'hash' and redis.call('hexists', key, who) == 1 then ok = 1 end\n"
        "    elseif t == 'string' and redis.call('get', key) == who then ok = 1 end\n"
        "    if ok == 1 then at_least(key, ARGV[1]) end\n"
        "  end\n"
        "  res[i] = ok\n"
        "end\n"
        "return res\n",

    /* RM_SCRIPT_FENCE_RATCHET: KEYS token key; ARGV token. Raises the counter
       to the token if it is lower (Redlock: see attempt.c, fenced_quorum). */
    [RM_SCRIPT_FENCE_RATCHET] =
        "if tonumber(redis.call('get', KEYS[1]) or '0') < tonumber(ARGV[1]) then\n"
        "  redis.call('set', KEYS[1], ARGV[1])\n"
        "end\n"
        "return 1\n",

    /* RM_SCRIPT_NEST_UNDO: KEYS lock, undo latch[, a reader's timeout
       prefix]; ARGV field, latch ms. Takes back the level a nested
       acquisition added (lua.h, RM_LUA_NEST_GUARD), only where its latch
       says '1', and marks the latch '0' in any case, so a late copy of the
       acquisition changes nothing. Never takes the last level: that one is
       an outer hold's. A reader's top timeout key goes with it, its TTL
       passed on to the key below when longer (lua.h, RM_LUA_PASS_DOWN_DEF:
       which hold the top key stands for is not known here). Replies 1 when
       a level was taken back, else 0. */
    [RM_SCRIPT_NEST_UNDO] =
        RM_LUA_PASS_DOWN_DEF
        "local n = 0\n"
        "if redis.call('get', KEYS[2]) == '1' and redis.call('type', KEYS[1])['ok'] == 'hash' then\n"
        "  n = tonumber(redis.call('hget', KEYS[1], ARGV[1])) or 0\n"
        "end\n"
        "redis.call('set', KEYS[2], '0', 'px', ARGV[2])\n"
        "if n <= 1 or n % 1 ~= 0 then return 0 end\n"
        "redis.call('hincrby', KEYS[1], ARGV[1], -1)\n"
        "if KEYS[3] then pass_down(KEYS[3] .. ':' .. n, KEYS[3] .. ':' .. (n - 1)) end\n"
        "return 1\n",

    /* Every kind's own scripts live with it (kind.h). */
    [RM_SCRIPT_LOCK_ACQUIRE] = rm_lua_lock_acquire,
    [RM_SCRIPT_LOCK_RELEASE] = rm_lua_lock_release,
    [RM_SCRIPT_LOCK_EXTEND] = rm_lua_lock_extend,
    [RM_SCRIPT_RLOCK_ACQUIRE] = rm_lua_rlock_acquire,
    [RM_SCRIPT_RLOCK_RELEASE] = rm_lua_rlock_release,
    [RM_SCRIPT_RLOCK_EXTEND] = rm_lua_rlock_extend,
    [RM_SCRIPT_FAIR_ACQUIRE] = rm_lua_fair_acquire,
    [RM_SCRIPT_FAIR_RELEASE] = rm_lua_fair_release,
    [RM_SCRIPT_FAIR_LEAVE] = rm_lua_fair_leave,
    [RM_SCRIPT_FAIR_FORCE] = rm_lua_fair_force,
    [RM_SCRIPT_READ_ACQUIRE] = rm_lua_read_acquire,
    [RM_SCRIPT_READ_RELEASE] = rm_lua_read_release,
    [RM_SCRIPT_READ_EXTEND] = rm_lua_read_extend,
    [RM_SCRIPT_WRITE_ACQUIRE] = rm_lua_write_acquire,
    [RM_SCRIPT_WRITE_RELEASE] = rm_lua_write_release,
    [RM_SCRIPT_RW_FORCE] = rm_lua_rw_force,
    [RM_SCRIPT_RW_INSPECT] = rm_lua_rw_inspect,
    [RM_SCRIPT_SEM_ACQUIRE] = rm_lua_sem_acquire,
    [RM_SCRIPT_SEM_RELEASE] = rm_lua_sem_release,
    [RM_SCRIPT_SEM_EXTEND] = rm_lua_sem_extend,
    [RM_SCRIPT_SEM_INSPECT] = rm_lua_sem_inspect,
    [RM_SCRIPT_SEM_INFO] = rm_lua_sem_info,
    [RM_SCRIPT_SEM_FORCE] = rm_lua_sem_force,
    [RM_SCRIPT_LATCH_TRY_SET] = rm_lua_latch_try_set,
    [RM_SCRIPT_LATCH_COUNT_DOWN] = rm_lua_latch_count_down,
    [RM_SCRIPT_LATCH_DELETE] = rm_lua_latch_delete,

    /* RM_SCRIPT_LOCK_INFO: what is stored under a name, whatever the kind;
       read only. Every query of a lock's server side is an answer of this
       one script (query.c): redmutex_lock_inspect and the older
       is_locked/is_owned/ttl/hold_count. KEYS name, fencing counter[, a
       reader's timeout prefix]; ARGV a fair lock's queue key, the longest
       owner to return, the asked owner's value ('' = nobody), the asked
       side of a read-write lock ('read', 'write' or '' = either).
       The queue key is not declared and its reads may fail: a user whose
       ACL covers plain and reentrant locks only (docs/security.md) has no
       rights on it, and gets a queue of 0 instead of an error; so does one
       without HGETALL, with no owner for a hash (the asked owner's count
       is read with HGET, which that user has). Replies {kind, pttl, owner,
       its hold count, readers, queue length, fence counter or nil, the
       asked owner's hold count, 1 when the asked side is held}; kind is
       'none', 'string', 'hash', 'rw-read', 'rw-write', or the key's type
       when it is no lock. The asked owner's count is a plain lock's 1 when
       its token is the value; with a reader's timeout prefix, the reader's
       holds whose timeout keys are still there (a reader whose leases ran
       out keeps its field while other readers keep the lock alive, but
       holds nothing any more). The read side is held in read mode, or when
       the writer also reads (more than the mode and the writer's field).
       A plain lock's token is cut to its first 8 characters: the whole
       token would let anyone release it. */
    [RM_SCRIPT_LOCK_INFO] =
        "local t = redis.call('type', KEYS[1])['ok']\n"
        "local fence = false\n"
        "if redis.call('type', KEYS[2])['ok'] == 'string' then fence = redis.call('get', KEYS[2]) end\n"
        "local q = 0\n"
        "local qt = redis.pcall('type', ARGV[1])\n"
        "if type(qt) == 'table' and qt['ok'] == 'list' then\n"
        "  q = redis.pcall('llen', ARGV[1])\n"
        "  if type(q) ~= 'number' then q = 0 end\n"
        "end\n"
        "if t == 'none' then return {'none', -2, '', 0, 0, q, fence, 0, 0} end\n"
        "local ttl = redis.call('pttl', KEYS[1])\n"
        "if t == 'string' then\n"
        "  local v = redis.call('get', KEYS[1])\n"
        "  local mine = 0\n"
        "  if ARGV[3] ~= '' and v == ARGV[3] then mine = 1 end\n"
        "  return {'string', ttl, string.sub(v, 1, math.min(8, math.floor(#v / 2))), 1, 0, q, fence, mine, 1}\n"
        "end\n"
        "if t ~= 'hash' then return {t, ttl, '', 0, 0, q, fence, 0, 0} end\n"
        "local mode = redis.call('hget', KEYS[1], 'mode')\n"
        "if mode ~= 'read' and mode ~= 'write' then mode = false end\n"
        "local mine = 0\n"
        "if ARGV[3] ~= '' then mine = tonumber(redis.call('hget', KEYS[1], ARGV[3]) or '0') or 0 end\n"
        "if KEYS[3] then\n"
        "  local live = 0\n"
        "  for i = 1, mine do live = live + redis.call('exists', KEYS[3] .. ':' .. i) end\n"
        "  mine = live\n"
        "end\n"
        "local side = 1\n"
        "if mode and ARGV[4] ~= '' and mode ~= ARGV[4] then\n"
        "  side = 0\n"
        "  if ARGV[4] == 'read' and redis.call('hlen', KEYS[1]) > 2 then side = 1 end\n"
        "end\n"
        "local owner, count, readers = '', 0, 0\n"
        "local all = redis.pcall('hgetall', KEYS[1])\n"
        "if type(all) == 'table' and not all['err'] then\n"
        "  for i = 1, #all, 2 do\n"
        "    local k, v = all[i], all[i + 1]\n"
        "    if not (mode and k == 'mode') then\n"
        "      local writer = mode == 'write' and string.sub(k, -6) == ':write'\n"
        "      if mode and not writer then readers = readers + 1 end\n"
        "      if (mode == 'write' and writer) or (mode ~= 'write' and (owner == '' or k < owner)) then\n"
        "        owner, count = k, tonumber(v) or 0\n"
        "      end\n"
        "    end\n"
        "  end\n"
        "end\n"
        "local kind = 'hash'\n"
        "if mode then kind = 'rw-' .. mode end\n"
        "return {kind, ttl, string.sub(owner, 1, tonumber(ARGV[2])), count, readers, q, fence, mine, side}\n",
};
/* clang-format on */

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

const char rm_arg_publish[] = "publish";
const char rm_arg_replicas[] = "0";

int rm_cmd_format(rm_buf *b, const rm_cmd *cmd, bool eval, const char *publish, const char *replicas)
{
    if (!publish)
        publish = "publish";
    if (!replicas)
        replicas = rm_arg_replicas;
    int pre = cmd->script < 0 ? 0 : 2; /* EVALSHA <sha> in front of a script's arguments */
    const char *small_argv[16] = {NULL};
    size_t small_lens[16] = {0};
    const char **argv = small_argv;
    size_t *lens = small_lens;
    int argc = cmd->argc + pre;
    if (argc > 16) {
        argv = malloc((size_t)argc * sizeof *argv);
        lens = malloc((size_t)argc * sizeof *lens);
        if (!argv || !lens) {
            free(argv);
            free(lens);
            return REDMUTEX_ENOMEM;
        }
    }
    if (pre) {
        argv[0] = eval ? "EVAL" : "EVALSHA";
        lens[0] = eval ? 4 : 7;
        argv[1] = eval ? rm_script_text(cmd->script) : rm_script_sha(cmd->script);
        lens[1] = strlen(argv[1]);
    }
    for (int k = 0; k < cmd->argc; k++) {
        const char *a = cmd->argv[k] == rm_arg_publish ? publish : cmd->argv[k] == rm_arg_replicas ? replicas : NULL;
        argv[k + pre] = a ? a : cmd->argv[k];
        lens[k + pre] = a ? strlen(a) : cmd->lens ? cmd->lens[k] : strlen(cmd->argv[k]);
    }
    int rc = rm_format_command(b, argc, argv, lens);
    if (argv != small_argv) {
        free(argv);
        free(lens);
    }
    return rc;
}
