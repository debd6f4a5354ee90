/*
 * Count-down latches (redmutex_latch_*) in Redisson's RCountDownLatch
 * format, so a latch counted down by a Java service releases a redmutex
 * waiter and the other way round.
 *
 * Keys:
 *   NAME    string: the count; absent once it reached zero (or never set).
 *   redisson_countdownlatch__channel__{NAME}   channel (braces always, as
 *           Redisson spells it): "0" when the count reaches zero, "1" when a
 *           new count is set or the latch is deleted.
 *
 * With N servers every call goes to all of them: try_set_count() sets when
 * a majority set it, count() is the count a majority has reached (the q-th
 * largest), and a wait ends when a majority is at zero.
 *
 * A wait asks for the count, listens on the channel, and asks again after
 * the subscription (a "0" published in between is not missed), then on
 * every message, and at the latest after the capped backoff.
 */
#define _GNU_SOURCE
#include "client.h"
#include "deploy.h"
#include "fanout.h"
#include "internal.h"
#include "interrupt.h"
#include "kind.h"    /* RM_LATCH_CHANNEL_PREFIX */
#include "lockops.h" /* rm_command_deadline */
#include "lua.h"
#include "pollwait.h"
#include "quorum.h"
#include "retry.h"
#include "scripts.h"
#include "tally.h"
#include "waiter.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- Lua ---------------------------------------------------------------------- */

/* clang-format off */

#define LATCH_TYPE_CHECK                                                                                     \
    "local t = redis.call('type', KEYS[1])['ok']\n"                                                          \
    "if t ~= 'string' and t ~= 'none' then return " RM_LUA_WRONGTYPE " end\n"                               \
    "if t == 'string' and not string.match(redis.call('get', KEYS[1]), '^%-?%d+$') then\n"                   \
    "  return redis.error_reply('WRONGTYPE redmutex: latch ' .. KEYS[1] .. ' does not hold a count; "        \
    "nothing was changed')\n"                                                                                \
    "end\n"

/* RM_SCRIPT_LATCH_TRY_SET: KEYS name, channel; ARGV count, publish command.
   Redisson's trySetCount: 1 when set (and "1" published), 0 when a count is there. */
const char rm_lua_latch_try_set[] =
        LATCH_TYPE_CHECK
        "if t ~= 'none' then return 0 end\n" RM_LUA_MAY_DEF
        "if not may(ARGV[2], KEYS[2], '1') then " RM_LUA_NOPERM("PUBLISH to the latch channel") " end\n"
        "redis.call('set', KEYS[1], ARGV[1])\n"
        "redis.call(ARGV[2], KEYS[2], '1')\n"
        "return 1\n";

/* RM_SCRIPT_LATCH_COUNT_DOWN: KEYS name, channel; ARGV publish command.
   Redisson's countDown: the count less one; at zero the key goes and "0"
   is published. Returns the count after it (<= 0: open). */
const char rm_lua_latch_count_down[] =
        LATCH_TYPE_CHECK RM_LUA_MAY_DEF
        "if not may(ARGV[1], KEYS[2], '0') then " RM_LUA_NOPERM("PUBLISH to the latch channel") " end\n"
        "local v = redis.call('decr', KEYS[1])\n"
        "if v <= 0 then redis.call('del', KEYS[1]) end\n"
        "if v == 0 then redis.call(ARGV[1], KEYS[2], '0') end\n"
        "return v\n";

/* RM_SCRIPT_LATCH_DELETE: KEYS name, channel; ARGV publish command.
   Redisson's delete: 1 when a count was deleted ("1" published), else 0. */
const char rm_lua_latch_delete[] =
        LATCH_TYPE_CHECK RM_LUA_MAY_DEF
        "if not may(ARGV[1], KEYS[2], '1') then " RM_LUA_NOPERM("PUBLISH to the latch channel") " end\n"
        "if redis.call('del', KEYS[1]) == 1 then redis.call(ARGV[1], KEYS[2], '1') return 1 end\n"
        "return 0\n";

/* clang-format on */

/* ---- the handle ---------------------------------------------------------------- */

struct redmutex_latch {
    redmutex_client *c;
    char channel[RM_LONG_KEY_MAX];
    size_t name_len;
    char name[];
};

int redmutex_latch_new(redmutex_latch **out, redmutex_client *c, const char *name)
{
    rm_err e_, *err = rm_err_reset(&e_);
    if (!out || !c || !name)
        return rm_publish(err, rm_fail(err, REDMUTEX_EINVAL, "redmutex_latch_new: %s is NULL",
                                       !out ? "out"
                                       : !c ? "client"
                                            : "name"));
    size_t len = strnlen(name, REDMUTEX_NAME_MAX + 1);
    if (len == 0 || len > REDMUTEX_NAME_MAX)
        return rm_publish(err, rm_fail(err, REDMUTEX_EINVAL, "latch name is %s", len ? "too long" : "empty"));
    int rc = rm_client_usable(err, c);
    if (rc)
        return rm_publish(err, rc);
    redmutex_latch *l = calloc(1, sizeof *l + len + 1);
    if (!l)
        return rm_publish(err, rm_fail(err, REDMUTEX_ENOMEM, "out of memory"));
    l->c = c;
    l->name_len = len;
    memcpy(l->name, name, len + 1);
    snprintf(l->channel, sizeof l->channel, RM_LATCH_CHANNEL_PREFIX "{%s}", name);
    rm_client_lock(c);
    c->life.refs++; /* the handle keeps the client's memory */
    rm_client_unlock(c);
    *out = l;
    return rm_publish(err, 0);
}

void redmutex_latch_free(redmutex_latch *l)
{
    if (!l)
        return;
    redmutex_client *c = l->c;
    free(l);
    rm_client_unref(c);
}

const char *redmutex_latch_name(const redmutex_latch *l) { return l ? l->name : ""; }

/* ---- one request to every server ---------------------------------------------------- */

/* The answers of a latch request: one integer (or nil: 0) per server. */
typedef struct latch_result {
    int64_t v[REDMUTEX_SERVERS_MAX];
    size_t n;
} latch_result;

static rm_vote number_vote(void *ud, const rm_slot *s, size_t i, const rm_reply *r, rm_err *e, bool *unknown)
{
    (void)s;
    (void)i;
    (void)unknown;
    latch_result *res = ud;
    long long v = 0;
    if (r->type == RM_REPLY_INTEGER)
        v = r->integer;
    else if (r->type == RM_REPLY_STRING) {
        char *end;
        v = strtoll(r->str, &end, 10);
        if (end == r->str || *end) {
            rm_fail(e, REDMUTEX_EWRONGTYPE, "the latch's key does not hold a count");
            return RM_VOTE_ERROR;
        }
    } else if (r->type != RM_REPLY_NIL) {
        rm_fail(e, REDMUTEX_EPROTOCOL, "a reply of the wrong type");
        return RM_VOTE_ERROR;
    }
    res->v[res->n++] = v;
    return RM_VOTE_YES;
}

/* A latch name with a brace on a cluster: EINVAL. */
static int cluster_braces(rm_err *err, const redmutex_latch *l, const char *nothing)
{
    return rm_fail(err, REDMUTEX_EINVAL,
                   "latch '%s': on a cluster a latch name cannot hold '{' or '}' (Redisson's latch channel "
                   "would be in another hash slot than its count); nothing was %s",
                   l->name, nothing);
}

/* Sends cmd to every server; res gets the answers. 0 when a majority answered, else an error. */
static int latch_call(rm_err *err, const redmutex_latch *l, const rm_cmd *cmd, bool writes, const char *what,
                      latch_result *res)
{
    redmutex_client *c = l->c;
    int rc = rm_client_usable(err, c);
    if (rc)
        return rc;
    /* On a cluster a latch's channel must be in its key's slot: Redisson
       spells it with braces around the whole name, which for a name that
       holds a brace names another slot. */
    bool braces = strpbrk(l->name, "{}") != NULL;
    for (size_t i = 0; braces && i < c->n; i++)
        if (rm_deploy_is_cluster(c, i))
            return cluster_braces(err, l, "sent");
    rm_req req = {1, {*cmd}, writes ? l->name : NULL, writes ? NULL : l->name, NULL};
    rm_call call;
    if ((rc = rm_call_begin(err, &call, c)) != 0)
        return rc;
    rm_call_run(&call, &req, rm_command_deadline(c, false), NULL, NULL);
    res->n = 0;
    rm_tally t;
    rm_tally_init(&t);
    rm_tally_spec spec = {what, l->name, 0, false, number_vote, res};
    rm_tally_call(&t, &call, &spec);
    if (t.error.code == REDMUTEX_EWRONGTYPE || res->n < c->quorum)
        rc = rm_tally_fail(err, &t, &call, what, l->name);
    /* The first call of a client may go out before it knows it talks to a
       cluster; the cluster refuses the script's two slots before running it. */
    if (rc && braces && strstr(err->msg, "CROSSSLOT"))
        rc = cluster_braces(err, l, "changed");
    rm_call_end(&call);
    return rc;
}

static int latch_query(rm_err *err, const redmutex_latch *l, int64_t *count)
{
    const char *argv[] = {"GET", l->name};
    rm_cmd cmd = {-1, 2, argv, NULL};
    latch_result res;
    int rc = latch_call(err, l, &cmd, false, "read the count of latch", &res);
    if (rc == 0) /* the count a majority has reached: a wait ends when a majority is at zero */
        *count = rm_qth_largest(res.v, res.n, l->c->quorum, false);
    return rc;
}

int redmutex_latch_try_set_count(int *out, redmutex_latch *l, int64_t count)
{
    rm_err e_, *err = rm_err_reset(&e_);
    if (!l)
        return rm_publish(err, rm_fail(err, REDMUTEX_EINVAL, "redmutex_latch_try_set_count: latch is NULL"));
    if (count < 1)
        return rm_publish(err, rm_fail(err, REDMUTEX_EINVAL,
                                       "latch '%s': count %" PRId64 " is not positive (a latch at zero is open)",
                                       l->name, count));
    char num[24];
    const char *argv[] = {"2", l->name, l->channel, rm_i64_str(num, count), RM_ARG_PUBLISH};
    rm_cmd cmd = {RM_SCRIPT_LATCH_TRY_SET, 5, argv, NULL};
    latch_result res;
    int rc = latch_call(err, l, &cmd, true, "set the count of latch", &res);
    if (rc == 0 && out) {
        size_t set = 0;
        for (size_t i = 0; i < res.n; i++)
            set += res.v[i] == 1;
        *out = set >= l->c->quorum;
    }
    return rm_publish(err, rc);
}

int redmutex_latch_count_down(redmutex_latch *l)
{
    rm_err e_, *err = rm_err_reset(&e_);
    if (!l)
        return rm_publish(err, rm_fail(err, REDMUTEX_EINVAL, "redmutex_latch_count_down: latch is NULL"));
    const char *argv[] = {"2", l->name, l->channel, RM_ARG_PUBLISH};
    rm_cmd cmd = {RM_SCRIPT_LATCH_COUNT_DOWN, 4, argv, NULL};
    latch_result res;
    return rm_publish(err, latch_call(err, l, &cmd, true, "count down latch", &res));
}

int redmutex_latch_count(int64_t *out, redmutex_latch *l)
{
    rm_err e_, *err = rm_err_reset(&e_);
    if (!out || !l)
        return rm_publish(err,
                          rm_fail(err, REDMUTEX_EINVAL, "redmutex_latch_count: %s is NULL", !out ? "out" : "latch"));
    int64_t v = 0;
    int rc = latch_query(err, l, &v);
    if (rc == 0)
        *out = v > 0 ? v : 0;
    return rm_publish(err, rc);
}

int redmutex_latch_delete(int *out, redmutex_latch *l)
{
    rm_err e_, *err = rm_err_reset(&e_);
    if (!l)
        return rm_publish(err, rm_fail(err, REDMUTEX_EINVAL, "redmutex_latch_delete: latch is NULL"));
    const char *argv[] = {"2", l->name, l->channel, RM_ARG_PUBLISH};
    rm_cmd cmd = {RM_SCRIPT_LATCH_DELETE, 4, argv, NULL};
    latch_result res;
    int rc = latch_call(err, l, &cmd, true, "delete latch", &res);
    if (rc == 0 && out) {
        size_t deleted = 0;
        for (size_t i = 0; i < res.n; i++)
            deleted += res.v[i] == 1;
        *out = deleted >= l->c->quorum;
    }
    return rm_publish(err, rc);
}

/* ---- waiting ----------------------------------------------------------------------- */

/* Waits until the count is zero, the deadline passes or the wait is interrupted. */
static int wait_zero(rm_err *err, redmutex_latch *l, int64_t wait_ms, rm_wait *wait, rm_waiter **w)
{
    redmutex_client *c = l->c;
    int64_t start = rm_now_ns(), deadline = rm_deadline_after_ms(wait_ms);
    rm_retry retry; /* the locks' policy (retry.c); a latch has no holder's lease to wait for */
    rm_retry_init(&retry, &c->opts);
    bool silent = false;
    for (;;) {
        int64_t count = 0;
        int rc = latch_query(err, l, &count);
        if (rc || count <= 0)
            return rc;
        int64_t now = rm_now_ns();
        if (now >= deadline)
            return rm_fail(err, REDMUTEX_ETIMEDOUT, "latch '%s' is at %" PRId64 "; waited %" PRId64 " ms", l->name,
                           count, (now - start) / RM_NS_PER_MS);
        if (!*w) {
            /* Listen first, then ask again: a "0" published in between is not missed. */
            int64_t sub = rm_deadline_after_ms(c->opts.command_timeout_ms);
            rm_waiter_begin(c, l->channel, sub < deadline ? sub : deadline, wait, w);
            continue;
        }
        int64_t until = rm_retry_next_due(now, rm_retry_pause_ms(&retry, -1, false, silent), deadline);
        bool interrupted = false;
        int r = rm_waiter_wait(c, *w, until, &interrupted);
        if (interrupted || !rm_client_open(c) || (c->opts.interrupt && c->opts.interrupt(c->opts.interrupt_payload)))
            return !rm_client_open(c)
                       ? rm_fail(err, REDMUTEX_ECLOSED, "the client was closed while waiting for latch '%s'", l->name)
                       : rm_fail(err, REDMUTEX_EINTR, "waiting for latch '%s' was interrupted", l->name);
        silent = r == 0; /* no news: the next pause backs off further */
    }
}

int redmutex_latch_wait(redmutex_latch *l, int64_t wait_ms)
{
    rm_err e_, *err = rm_err_reset(&e_);
    if (!l)
        return rm_publish(err, rm_fail(err, REDMUTEX_EINVAL, "redmutex_latch_wait: latch is NULL"));
    if (wait_ms != REDMUTEX_WAIT_FOREVER && (wait_ms < 0 || wait_ms > REDMUTEX_TIME_MAX_MS))
        return rm_publish(err, rm_fail(err, REDMUTEX_EINVAL,
                                       "latch '%s': wait of %" PRId64 " ms is invalid (0..%" PRId64
                                       ", or REDMUTEX_WAIT_FOREVER)",
                                       l->name, wait_ms, (int64_t)REDMUTEX_TIME_MAX_MS));
    rm_wait wait;
    memset(&wait, 0, sizeof wait);
    int rc = wait_ms != 0 ? rm_wait_begin(err, l->c, &wait) : 0;
    if (rc)
        return rm_publish(err, rc);
    rm_waiter *w = NULL;
    rc = wait_zero(err, l, wait_ms, &wait, &w);
    if (w)
        rm_waiter_end(l->c, w);
    rm_wait_end(l->c, &wait);
    return rm_publish(err, rc);
}

/* ---- pollable waits ------------------------------------------------------------------ */

/* One try of a pollable wait (rm_wait_ops): done at zero, else it listens on the channel. */
static int latch_try_once(rm_err *err, void *obj, int64_t *ttl_ms, char *channel)
{
    redmutex_latch *l = obj;
    int64_t count = 0;
    int rc = latch_query(err, l, &count);
    if (rc || count <= 0)
        return rc;
    *ttl_ms = -1;
    snprintf(channel, RM_LONG_KEY_MAX, "%s", l->channel);
    return rm_fail(err, REDMUTEX_ETIMEDOUT,
                   "latch '%s' is at %" PRId64 "; the wait becomes ready when it may be at zero", l->name, count);
}

static void latch_wait_end(void *obj) { (void)obj; }

static const rm_wait_ops latch_wait_ops = {latch_try_once, latch_wait_end};

int redmutex_latch_wait_new(redmutex_wait **out, redmutex_latch *l)
{
    rm_err e_, *err = rm_err_reset(&e_);
    if (!out || !l)
        return rm_publish(err,
                          rm_fail(err, REDMUTEX_EINVAL, "redmutex_latch_wait_new: %s is NULL", !out ? "out" : "latch"));
    int rc = rm_client_usable(err, l->c);
    if (rc == 0)
        rc = rm_wait_new_custom(err, out, l->c, &latch_wait_ops, l);
    return rm_publish(err, rc);
}
