/*
 * Per-kind wire formats. Each kind in this table keeps, in its own file,
 * everything the servers see of it: its keys and how they derive from the
 * lock name, its Lua scripts and the order of their arguments. The lock
 * operations ask the table instead of branching on the kind.
 *
 *   kind_plain.c  REDMUTEX_KIND_LOCK   redis-py Lock
 *   kind_rlock.c  REDMUTEX_KIND_RLOCK  Redisson RLock
 *   kind_fair.c   REDMUTEX_KIND_FAIR   Redisson RFairLock
 *   kind_rw.c     REDMUTEX_KIND_READ   Redisson RReadWriteLock, read side
 *                 REDMUTEX_KIND_WRITE  Redisson RReadWriteLock, write side
 *   kind_sem.c    RM_KIND_SEMAPHORE    Redisson RPermitExpirableSemaphore
 *
 * (scripts.c keeps the scripts several kinds share: INSPECT, FORCE_RELEASE,
 * the watchdog's RENEW and the Redlock fencing ratchet.)
 *
 * Layering: the kinds sit above the fan-out, the scripts and the utilities,
 * and call only those; the lock operations call them.
 */
#ifndef REDMUTEX_KIND_H
#define REDMUTEX_KIND_H

#include "fanout.h"
#include "handle.h"
#include "scripts.h"

/* Room for a key derived from a lock name and an owner's hash field (a fair
   waiter's channel, a reader's timeout keys). */
#define RM_LONG_KEY_MAX (RM_KEY_MAX + RM_VALUE_MAX + 48)

/* Argument storage for one command built by a kind. */
typedef struct rm_kargs {
    const char *argv[20];
    char num[6][24];
    char key[6][RM_LONG_KEY_MAX];
} rm_kargs;

/* What an acquisition attempt is (fair locks queue only when they will wait). */
enum rm_acq_mode {
    RM_ACQ_TRY,   /* one try, no waiting: never joins a queue */
    RM_ACQ_FIRST, /* the first attempt of a wait: joins the queue when busy */
    RM_ACQ_RETRY  /* a later attempt of the same wait: refreshes its place */
};

/* Everything an acquisition command depends on besides the lock itself. */
typedef struct rm_acq_in {
    const char *value; /* the owner's hash field */
    int64_t lease_ms;
    bool fencing;
    /* A nested acquisition (the owner holds it already, through this
       handle): its undo latch (lua.h, RM_LUA_NEST_GUARD) and that latch's
       life; NULL for a first acquisition. */
    const char *nest_latch;
    int64_t latch_ms;
    int mode;          /* enum rm_acq_mode */
    const char *nonce; /* fair: this wait's id (hex), named in a hand-off message */
    bool grantable;    /* fair: a releasing script may hand the lock over to this waiter */
} rm_acq_in;

typedef struct rm_kind_ops {
    /* The hash field an owner is stored under (the owner id, or a form of it). */
    void (*field)(const redmutex_lock *l, const char *owner_key, char out[RM_VALUE_MAX + 1]);
    /* Why an explicit owner id cannot be one of this kind's owners (it would
       be stored as a field the format reserves), or NULL when it can; the
       member itself is NULL when the kind reserves nothing. */
    const char *(*refuse_owner)(const redmutex_lock *l, const char *owner);
    /* The channel a waiter of this owner subscribes to. */
    void (*wait_channel)(const redmutex_lock *l, const char *value, char out[RM_LONG_KEY_MAX]);
    rm_cmd (*acquire)(const redmutex_lock *l, const rm_acq_in *in, rm_kargs *st);
    /* Release one hold of `value`; replies 1 deleted, 0 decremented, nil not owner, or the latch's value. */
    rm_cmd (*release)(const redmutex_lock *l, const char *value, const char *latch_key, int64_t lease_ms,
                      int64_t latch_ms, rm_kargs *st);
    /* Extend `value`'s hold: replies the new TTL, 0 when not held. */
    rm_cmd (*extend)(const redmutex_lock *l, const char *value, int64_t ms, bool replace, rm_kargs *st);
    /* Replies {exists, pttl, hold count of value} ('' = nobody), as INSPECT. */
    rm_cmd (*inspect)(const redmutex_lock *l, const char *value, rm_kargs *st);
    /* The prefix of the keys "<prefix>:1".."<prefix>:N" whose presence makes
       value's N holds live (a reader's timeout keys), into out; NULL when
       the kind's holds are its hash field's count alone (then the member
       itself may be NULL). Read by RM_SCRIPT_LOCK_INFO. */
    const char *(*hold_keys)(const redmutex_lock *l, const char *value, char out[RM_LONG_KEY_MAX]);
    /* Deletes the lock whoever holds it: replies 1 deleted, 0 not there. */
    rm_cmd (*force)(const redmutex_lock *l, rm_kargs *st);
    /* Takes back the level a failed nested acquisition of `value` added, only
       where its undo latch says it did (RM_SCRIPT_NEST_UNDO); NULL when the
       kind is not reentrant. */
    rm_cmd (*nest_undo)(const redmutex_lock *l, const char *value, const char *latch_key, int64_t latch_ms,
                        rm_kargs *st);
    /* Behind a bare acquisition command (script -1: SET NX), the command that
       tells the holder's TTL in the same round trip; NULL when the kind's
       acquire script answers it. */
    rm_cmd (*ttl_probe)(const rm_cmd *acquire);
    /* The servers keep the waiters in order (fair): no local queue, no politeness, no local hand-off. */
    bool server_queue;
    /* Waiters of this process are woken, and may be handed the lock, by this
       process's releases (plain, reentrant): see waiter.c. */
    bool local_waiters;
    /* An owner may hold it several times (a count); else once. */
    bool reentrant;
    /* A holder named by no owner is anonymous: a fresh token per acquisition,
       released through the same handle. Else it is the calling thread. */
    bool anonymous;
} rm_kind_ops;

/** The operations of a kind redmutex knows (rm_kind_valid). */
const rm_kind_ops *rm_kind_ops_of(redmutex_kind kind);
/** The operations of l's kind. */
static inline const rm_kind_ops *rm_kind_of(const redmutex_lock *l) { return rm_kind_ops_of(l->kind); }

/** Whether kind is one redmutex knows. */
bool rm_kind_valid(int kind);

/**
 * The watchdog's tag for a hold of this kind in the RENEW script: 's' token
 * of a plain lock, 'h' hash field, 'r' reader (hash field and its timeout keys),
 * 'p' a semaphore's permits.
 */
char rm_kind_renew_tag(redmutex_kind kind);

/**
 * Redisson's prefixName(): "<prefix>:{NAME}<suffix>", or "<prefix>:NAME<suffix>"
 * when the name already holds a '{' (same cluster slot for every key of a
 * lock); with prefix NULL, suffixName(): "{NAME}<suffix>" or "NAME<suffix>".
 */
const char *rm_derived_key(const redmutex_lock *l, const char *prefix, const char *suffix, char *out, size_t size);

/** rm_kind_ops.field of the kinds that store the owner id as it is (plain, reentrant). */
void rm_kind_field_is_owner(const redmutex_lock *l, const char *owner_key, char out[RM_VALUE_MAX + 1]);
/** rm_kind_ops.wait_channel of the kinds whose waiters share the lock's channel (plain, reentrant). */
void rm_kind_lock_channel(const redmutex_lock *l, const char *value, char out[RM_LONG_KEY_MAX]);
/** rm_kind_ops.nest_undo of the kinds whose owner's count is a hash field and nothing else (reentrant, fair, write). */
rm_cmd rm_kind_nest_undo(const redmutex_lock *l, const char *value, const char *latch_key, int64_t latch_ms,
                         rm_kargs *st);
/*
 * Redisson's count-down latch channel: "redisson_countdownlatch__channel__{NAME}"
 * (braces always, unlike prefixName). Its messages: "0" zero reached, "1" a
 * new count (latch.c).
 */
#define RM_LATCH_CHANNEL_PREFIX "redisson_countdownlatch__channel__"

/**
 * How many waiters on `channel` a message `msg` wakes, as the kinds'
 * messages mean it: SIZE_MAX every one, else that many (the oldest first).
 */
size_t rm_message_wakes(const char *channel, const char *msg);

/** redisson_lock__channel:{NAME}: the release channel of the plain and reentrant kinds. */
const char *rm_lock_channel_key(const redmutex_lock *l, char *out, size_t size);
/** redisson_lock_token:{NAME}: the fencing counter of every kind. */
const char *rm_lock_token_key(const redmutex_lock *l, char *out, size_t size);

/* ---- fair locks (kind_fair.c) -------------------------------------------- */

/*
 * A waiting fair acquirer keeps a record on the servers that it refreshes at
 * least every RM_FAIR_REFRESH_MS at the head of the queue or next to it, and
 * every RM_FAIR_QUEUED_REFRESH_MS further back; a record not refreshed for
 * RM_FAIR_WAITER_LEASE_MS marks a waiter that is gone, and the next script
 * that looks at the queue removes it. So a waiter that dies blocks the queue
 * for at most RM_FAIR_WAITER_LEASE_MS + RM_FAIR_REFRESH_MS once the waiter
 * behind it knows it is next, RM_FAIR_WAITER_LEASE_MS +
 * RM_FAIR_QUEUED_REFRESH_MS at worst (plus a round trip). A queued record
 * always has more than the 1 s left that a hand-off needs (kind_fair.c).
 */
#define RM_FAIR_WAITER_LEASE_MS 3000
#define RM_FAIR_REFRESH_MS 500
#define RM_FAIR_QUEUED_REFRESH_MS 1000

/*
 * The pause of a fair waiter before its next attempt, given the pause its
 * backoff and the holder's TTL ask for and how many waiters are ahead of it
 * (its last attempt's answer). Only the head may take the lock, and the
 * script that makes it the head of a free lock tells it (a grant or a
 * release message on its channel), so a waiter behind others waits for that
 * or for its refresh: attempts out of turn would cost a script each for
 * every waiter at every hand-off. If that message is lost, or its turn comes
 * with none (the head went away while the holder's lease ran out), the
 * refresh finds the turn: at most RM_FAIR_REFRESH_MS late next to the head,
 * RM_FAIR_QUEUED_REFRESH_MS further back (where a wait lasts as many
 * hand-offs as there are waiters ahead: the longer interval keeps the
 * refreshes of a long queue off the server). The caller still caps the pause
 * at the wait's deadline.
 */
static inline int64_t rm_fair_pause_ms(int64_t pause_ms, int64_t behind)
{
    if (behind > 1)
        return RM_FAIR_QUEUED_REFRESH_MS;
    if (behind > 0 || pause_ms > RM_FAIR_REFRESH_MS)
        return RM_FAIR_REFRESH_MS;
    return pause_ms;
}

/** A fresh wait id: 16 hex digits. 0, or REDMUTEX_ESYSTEM (message set). */
int rm_fair_new_nonce(rm_err *err, char out[17]);
/** Whether msg is a hand-off of the lock to the wait `nonce`; *fence gets its fencing token. */
bool rm_fair_grant_parse(const char *msg, const char *nonce, int64_t *fence);
/**
 * Takes `value` out of the lock's queue on every server (a waiter that stops
 * waiting), or on the servers i with only[i] (only may be NULL), and, with
 * give_back, gives back a hold a releasing script handed to it meanwhile
 * (without: the same owner holds the lock otherwise, and the field's count
 * is that hold's too). Best effort, bounded by one command timeout; never
 * changes the thread's last error.
 */
void rm_fair_leave(redmutex_lock *l, const char *value, const bool *only, bool give_back);

/* ---- Lua (kind_*.c), referenced by scripts.c's table ----------------------- */

extern const char rm_lua_lock_acquire[];
extern const char rm_lua_lock_release[];
extern const char rm_lua_lock_extend[];
extern const char rm_lua_rlock_acquire[];
extern const char rm_lua_rlock_release[];
extern const char rm_lua_rlock_extend[];

extern const char rm_lua_fair_acquire[];
extern const char rm_lua_fair_release[];
extern const char rm_lua_fair_leave[];
extern const char rm_lua_fair_force[];
extern const char rm_lua_read_acquire[];
extern const char rm_lua_read_release[];
extern const char rm_lua_read_extend[];
extern const char rm_lua_write_acquire[];
extern const char rm_lua_write_release[];
extern const char rm_lua_rw_force[];
extern const char rm_lua_rw_inspect[];

/*
 * A reader's holds are its timeout keys, {NAME}:<field>:rwlock_timeout:<i>
 * for i = 1..its count (Redisson's format): live(pre, n) tells whether any
 * of them is still there (`pre` the prefix up to ":rwlock_timeout"). A
 * reader whose leases all ran out leaves its field behind while other
 * readers keep the hash alive; that field holds nothing. Every script that
 * would take the field for a hold (acquire's "mine", extend, the watchdog's
 * renewal, release) asks this first, and takes a dead field out: counted,
 * an extension of it would succeed without a timeout key (and the next
 * release, finding no key, would delete the lock under its "holder").
 */
#define RM_LUA_READER_LIVE_DEF                                                                                         \
    "local function live(pre, n)\n"                                                                                    \
    "  for i = 1, n do\n"                                                                                              \
    "    if redis.call('exists', pre .. ':' .. i) == 1 then return true end\n"                                         \
    "  end\n"                                                                                                          \
    "  return false\n"                                                                                                 \
    "end\n"

/*
 * The RENEW script's branch for a reader (tag 'r'), spliced into it by
 * scripts.c after its at_least() (lua.h), live() (above) and may() (lua.h):
 * `key` is the lock, `who` the reader's field, `ok` set to 1 when renewed.
 * It extends the lock and every timeout key of this reader (one per hold)
 * to at least the lease, never creating a key and never lowering one:
 * another hold of the same reader may have a longer lease. A reader whose
 * timeout keys are all gone is not renewed (its hold ran out: lost); its
 * field goes, and the lock with it when no other field is left (no hold is
 * left to wake anyone for: waiters try again within the TTL they saw).
 */
#define RM_LUA_RENEW_READER                                                                                            \
    "    if t == 'hash' and redis.call('hexists', key, who) == 1 then\n"                                               \
    "      local pre = key\n"                                                                                          \
    "      if not string.find(key, '{', 1, true) then pre = '{' .. key .. '}' end\n"                                   \
    "      pre = pre .. ':' .. who .. ':rwlock_timeout'\n"                                                             \
    "      local n = tonumber(redis.call('hget', key, who)) or 0\n"                                                    \
    "      if live(pre, n) then\n"                                                                                     \
    "        ok = 1\n"                                                                                                 \
    "        at_least(key, ARGV[1])\n"                                                                                 \
    "        for i = 1, n do at_least(pre .. ':' .. i, ARGV[1]) end\n"                                                 \
    "      elseif may('hdel', key, who) and may('del', key) then\n"                                                    \
    "        redis.call('hdel', key, who)\n"                                                                           \
    "        if redis.call('hlen', key) <= 1 then redis.call('del', key) end\n"                                        \
    "      end\n"                                                                                                      \
    "    end\n"

/* ---- semaphores (kind_sem.c) --------------------------------------------- */

/*
 * The semaphore is a kind of its own, behind the redmutex_semaphore handle
 * (semaphore.c): a hold is one acquisition of permits, its owner and value
 * the permit id. Not a redmutex_kind a user can pass to redmutex_lock_new.
 */
#define RM_KIND_SEMAPHORE ((redmutex_kind)100)
/* A permit id: 16 random bytes in hex, as Redisson's generateId() writes it. */
#define RM_PERMIT_HEX 32
/* Most permits one acquisition takes (each is a zset member the script writes). */
#define RM_PERMITS_PER_ACQUIRE_MAX REDMUTEX_ACQUIRE_PERMITS_MAX

/** redisson_sc:{NAME}: the semaphore's channel. */
const char *rm_sem_channel_key(const redmutex_lock *l, char *out, size_t size);
/** {NAME}:timeout: the zset of permit ids and the ends of their leases. */
const char *rm_sem_timeout_key(const redmutex_lock *l, char *out, size_t size);
/** How many permits a hold's value stands for ("<id>" 1, "<id>*<k>" k). */
int64_t rm_sem_permits_of(const char *value);
/** Whether value is a permit id redmutex writes: 32 lowercase hex digits, then "*<k>" for k > 1 permits. */
bool rm_sem_value_valid(const char *value);
/** RM_SCRIPT_SEM_INFO's command: {exists, available now, capacity}. */
rm_cmd rm_sem_info_command(const redmutex_lock *l, rm_kargs *st);

extern const char rm_lua_sem_acquire[];
extern const char rm_lua_sem_release[];
extern const char rm_lua_sem_extend[];
extern const char rm_lua_sem_inspect[];
extern const char rm_lua_sem_info[];
extern const char rm_lua_sem_force[];

/*
 * Lua helpers of the semaphore's scripts (and of the RENEW script's branch
 * for permits): now_ms(), the server's clock (TIME) in ms, on which leases
 * end; permit_ids(value), the zset members of a hold (kind_sem.c says how
 * they derive from its value; the value is checked by rm_sem_value_valid
 * before any script sees it). The hex is decoded 8 digits at a time: these
 * run in every acquisition, release and renewal of a permit, and a gsub
 * calling a function per byte cost as much as the rest of a release.
 */
#define RM_LUA_PERMIT_DEFS                                                                                             \
    "local function now_ms()\n"                                                                                        \
    "  local t = redis.call('time')\n"                                                                                 \
    "  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"                                             \
    "end\n"                                                                                                            \
    "local function b4(n)\n"                                                                                           \
    "  return string.char(math.floor(n / 16777216) % 256, math.floor(n / 65536) % 256, "                               \
    "math.floor(n / 256) % 256, n % 256)\n"                                                                            \
    "end\n"                                                                                                            \
    "local function permit_ids(v)\n"                                                                                   \
    "  local k = 1\n"                                                                                                  \
    "  if #v > 32 then k = tonumber(string.sub(v, 34)) end\n"                                                          \
    "  local head = b4(tonumber(string.sub(v, 1, 8), 16)) .. b4(tonumber(string.sub(v, 9, 16), 16)) .. "               \
    "b4(tonumber(string.sub(v, 17, 24), 16))\n"                                                                        \
    "  local tail = tonumber(string.sub(v, 25, 32), 16)\n"                                                             \
    "  local out = {}\n"                                                                                               \
    "  for j = 0, k - 1 do out[j + 1] = head .. b4((tail + j) % 4294967296) end\n"                                     \
    "  return out\n"                                                                                                   \
    "end\n"

/*
 * The RENEW script's branch for a semaphore's hold (tag 'p'), spliced into
 * it by scripts.c like the reader's: `key` is the counter, `who` the hold's
 * value, `ok` set to 1 when every permit of it was still in its lease and
 * is renewed to ARGV[1] ms from now, or kept where it ends later (an
 * extension): never shortened, and never re-created (ZADD XX). `now` is
 * the script's, read once.
 */
#define RM_LUA_RENEW_PERMIT                                                                                            \
    "    local pre = key\n"                                                                                            \
    "    if not string.find(key, '{', 1, true) then pre = '{' .. key .. '}' end\n"                                     \
    "    local tk = pre .. ':timeout'\n"                                                                               \
    "    if redis.call('type', tk)['ok'] == 'zset' then\n"                                                             \
    "      if not now then now = now_ms() end\n"                                                                       \
    "      local mine, ends = permit_ids(who), {}\n"                                                                   \
    "      ok = 1\n"                                                                                                   \
    "      for p = 1, #mine do\n"                                                                                      \
    "        ends[p] = tonumber(redis.call('zscore', tk, mine[p]) or '0')\n"                                           \
    "        if ends[p] <= now then ok = 0 end\n"                                                                      \
    "      end\n"                                                                                                      \
    "      for p = 1, #mine do\n"                                                                                      \
    "        local e = math.max(ends[p], now + tonumber(ARGV[1]))\n"                                                   \
    "        if ok == 1 then redis.call('zadd', tk, 'XX', e, mine[p]) end\n"                                           \
    "      end\n"                                                                                                      \
    "    end\n"

#endif
