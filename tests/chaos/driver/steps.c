/*
 * Step modes: short scripted sequences whose every step logs a "step" event
 * with the result it got and the results it may get (checker C4 and the
 * scenario checks read them).
 *   probe      S15: one non-blocking acquire per "probe NAME" command.
 *   nonowner   S16: release/extend by a non-owner, after an overwrite, through a stale handle.
 *   fork       S19: a child process tries to release and extend its parent's locks.
 *   reentrant  S17: nested holds count exactly, keep the token, and a vanished key is reported.
 *   hold       S18: takes --keys watchdog locks and keeps them until "exit"; the client is
 *              then freed (or the process killed) with every one of them held.
 */
#define _GNU_SOURCE
#include "driver.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* Logs step `name`: pass when rc is one of the allowed codes (list ends with 1). */
static bool step(const char *name, int rc, ...)
{
    va_list ap;
    va_start(ap, rc);
    bool pass = false;
    char expect[128] = "";
    for (int want; (want = va_arg(ap, int)) != 1;) {
        pass |= rc == want;
        size_t len = strlen(expect);
        snprintf(expect + len, sizeof expect - len, "%s%s", len ? "|" : "", drv_code_name(want));
    }
    va_end(ap);
    char msg[600];
    drv_json_escape(msg, sizeof msg, rc ? redmutex_last_error() : "");
    drv_log(0, 0, "step", "\"name\":\"%s\",\"rc\":%d,\"err\":\"%s\",\"expect\":\"%s\",\"pass\":%d,\"msg\":\"%s\"", name,
            rc, drv_code_name(rc), expect, pass ? 1 : 0, msg);
    return pass;
}

/* Logs a yes/no fact as a step ("the other holder's key is intact"). */
static bool fact(const char *name, bool ok, const char *detail)
{
    char d[600];
    drv_json_escape(d, sizeof d, detail ? detail : "");
    drv_log(0, 0, "step", "\"name\":\"%s\",\"pass\":%d,\"msg\":\"%s\"", name, ok ? 1 : 0, d);
    return ok;
}

/* ---- raw access to the lock servers (the "outside actor") ----------------- */

static redisContext *raw_connect(const char *url)
{
    char host[64];
    int port = 0;
    if (sscanf(url, "redis://%63[^:]:%d", host, &port) != 2)
        return NULL;
    struct timeval tv = {1, 0};
    redisContext *rc = redisConnectWithTimeout(host, port, tv);
    if (rc && rc->err) {
        redisFree(rc);
        return NULL;
    }
    if (rc)
        redisSetTimeout(rc, tv);
    return rc;
}

/* Runs one command on every server; returns how many replies matched `want` (string or integer). */
static int raw_all(const drv_config *cfg, const char *want, const char *fmt, ...)
{
    int matched = 0;
    for (size_t i = 0; i < cfg->n_urls; i++) {
        redisContext *c = raw_connect(cfg->urls[i]);
        if (!c)
            continue;
        va_list ap;
        va_start(ap, fmt);
        redisReply *r = redisvCommand(c, fmt, ap);
        va_end(ap);
        if (r && want) {
            char buf[64];
            const char *got = r->type == REDIS_REPLY_INTEGER ? (snprintf(buf, sizeof buf, "%lld", r->integer), buf)
                              : (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS) ? r->str
                                                                                                 : "(nil)";
            matched += strcmp(got, want) == 0;
        }
        if (r)
            freeReplyObject(r);
        redisFree(c);
    }
    return matched;
}

static redmutex_lock *new_lock(redmutex_client *c, const drv_config *cfg, const char *name, redmutex_kind kind,
                               int64_t lease_ms)
{
    redmutex_lock_options o;
    drv_lock_options(&o, cfg, NULL);
    o.lease_ms = lease_ms;
    redmutex_lock *l = NULL;
    if (redmutex_lock_new(&l, c, name, kind, &o) != 0)
        return NULL;
    return l;
}

static int owned(redmutex_lock *l, const char *owner)
{
    int out = -1;
    return redmutex_lock_is_owned(&out, l, owner) == 0 ? out : -1;
}

/* ---- probe (S15) ------------------------------------------------------------ */

int drv_run_probe(drv_ctx *ctx)
{
    char line[512];
    while (drv_read_command(line, sizeof line, -1) > 0) {
        if (strcmp(line, "exit") == 0)
            break;
        if (strncmp(line, "probe ", 6) != 0)
            continue;
        const char *name = line + 6;
        redmutex_lock *l = new_lock(ctx->client, &ctx->cfg, name, REDMUTEX_KIND_LOCK, ctx->cfg.lease_ms);
        int64_t t0 = drv_now_ns();
        int rc = l ? redmutex_lock_acquire(l, NULL, 0) : REDMUTEX_ENOMEM;
        double dur = (double)(drv_now_ns() - t0) / 1e6;
        int64_t validity = 0;
        if (rc == 0)
            redmutex_lock_validity(&validity, l, NULL);
        char msg[600];
        drv_json_escape(msg, sizeof msg, rc ? redmutex_last_error() : "");
        drv_log(0, 0, "probe", "\"key\":\"%s\",\"rc\":%d,\"err\":\"%s\",\"dur_ms\":%.3f,\"val\":%lld,\"msg\":\"%s\"",
                name, rc, drv_code_name(rc), dur, (long long)validity, msg);
        if (rc == 0) {
            t0 = drv_now_ns();
            int rr = redmutex_lock_release(l, NULL);
            drv_log(0, 0, "probe_rel", "\"key\":\"%s\",\"rc\":%d,\"err\":\"%s\",\"dur_ms\":%.3f", name, rr,
                    drv_code_name(rr), (double)(drv_now_ns() - t0) / 1e6);
        }
        redmutex_lock_free(l);
        drv_log(0, 0, "probe_done", "\"key\":\"%s\"", name);
    }
    return 0;
}

/* ---- non-owner release / extend (S16) ------------------------------------------ */

static void nonowner_plain(drv_ctx *ctx, redmutex_client *b)
{
    const drv_config *cfg = &ctx->cfg;
    char name[128];
    snprintf(name, sizeof name, "%sfg", cfg->prefix);
    redmutex_lock *a = new_lock(ctx->client, cfg, name, REDMUTEX_KIND_LOCK, 0);
    redmutex_lock *bl = new_lock(b, cfg, name, REDMUTEX_KIND_LOCK, 0);
    step("plain: owner acquires", redmutex_lock_acquire(a, NULL, 1000), REDMUTEX_OK, 1);
    step("plain: other handle releases", redmutex_lock_release(bl, NULL), REDMUTEX_ENOTOWNER, 1);
    step("plain: other handle extends", redmutex_lock_extend(bl, NULL, 5000, REDMUTEX_EXTEND_ADD),
         REDMUTEX_ENOTOWNER, 1);
    step("plain: forged token releases", redmutex_lock_release(bl, "forged-token"), REDMUTEX_ENOTOWNER, 1);
    step("plain: forged token extends", redmutex_lock_extend(bl, "forged-token", 5000, REDMUTEX_EXTEND_REPLACE),
         REDMUTEX_ENOTOWNER, 1);
    fact("plain: owner still holds after foreign calls", owned(a, NULL) == 1, NULL);

    /* Someone else's value replaces the key (a redis-py lock after a failover, an operator). */
    raw_all(cfg, NULL, "SET %s intruder PX 5000", name);
    step("plain: release after overwrite", redmutex_lock_release(a, NULL), REDMUTEX_ELOST, REDMUTEX_ENOTOWNER, 1);
    int intact = raw_all(cfg, "intruder", "GET %s", name);
    fact("plain: overwritten key intact after release", intact == (int)cfg->n_urls, NULL);
    raw_all(cfg, NULL, "DEL %s", name);
    redmutex_lock_free(a);
    redmutex_lock_free(bl);
}

static void nonowner_stale(drv_ctx *ctx, redmutex_client *b)
{
    const drv_config *cfg = &ctx->cfg;
    char name[128];
    snprintf(name, sizeof name, "%sstale", cfg->prefix);
    int64_t lease = 300;
    redmutex_lock *a = new_lock(ctx->client, cfg, name, REDMUTEX_KIND_LOCK, lease);
    redmutex_lock *bl = new_lock(b, cfg, name, REDMUTEX_KIND_LOCK, 5000);
    step("stale: owner acquires with a short lease", redmutex_lock_acquire(a, NULL, 1000), REDMUTEX_OK, 1);
    drv_sleep_ms(lease + 100);
    step("stale: other client acquires after expiry", redmutex_lock_acquire(bl, NULL, 1000), REDMUTEX_OK, 1);
    step("stale: expired handle extends", redmutex_lock_extend(a, NULL, 5000, REDMUTEX_EXTEND_ADD), REDMUTEX_ELOST,
         REDMUTEX_ENOTOWNER, 1);
    step("stale: expired handle releases", redmutex_lock_release(a, NULL), REDMUTEX_ELOST, REDMUTEX_ENOTOWNER, 1);
    fact("stale: new holder still owns", owned(bl, NULL) == 1, NULL);
    step("stale: new holder releases", redmutex_lock_release(bl, NULL), REDMUTEX_OK, 1);
    redmutex_lock_free(a);
    redmutex_lock_free(bl);
}

static void nonowner_rlock(drv_ctx *ctx, redmutex_client *b)
{
    const drv_config *cfg = &ctx->cfg;
    char name[128], mine[128];
    snprintf(name, sizeof name, "%srfg", cfg->prefix);
    redmutex_lock *a = new_lock(ctx->client, cfg, name, REDMUTEX_KIND_RLOCK, 0);
    redmutex_lock *bl = new_lock(b, cfg, name, REDMUTEX_KIND_RLOCK, 0);
    redmutex_client_thread_owner(mine, sizeof mine, ctx->client);
    step("rlock: owner acquires", redmutex_lock_acquire(a, NULL, 1000), REDMUTEX_OK, 1);
    step("rlock: other client's thread releases", redmutex_lock_release(bl, NULL), REDMUTEX_ENOTOWNER, 1);
    step("rlock: other client's thread extends", redmutex_lock_extend(bl, NULL, 5000, REDMUTEX_EXTEND_ADD),
         REDMUTEX_ENOTOWNER, 1);
    fact("rlock: owner still holds", owned(a, NULL) == 1, NULL);

    /* Stale handle of the same owner: a second handle of the same thread holds the lock anew. */
    redmutex_lock *a2 = new_lock(ctx->client, cfg, name, REDMUTEX_KIND_RLOCK, 0);
    raw_all(cfg, NULL, "DEL %s", name);
    step("rlock: second handle of the same owner acquires after the key vanished",
         redmutex_lock_acquire(a2, NULL, 1000), REDMUTEX_OK, 1);
    /* Same owner (this thread), two handles: by Redisson's model one owner, so the
       first handle's release counts against the second's hold. Reported, not judged. */
    int rc = redmutex_lock_release(a, NULL);
    int64_t count = -1;
    redmutex_lock_hold_count(&count, a2, NULL);
    drv_log(0, 0, "observe",
            "\"name\":\"rlock: same owner, second handle after the key vanished; first handle's release\","
            "\"err\":\"%s\",\"second_hold_count\":%lld",
            drv_code_name(rc), (long long)count);

    raw_all(cfg, NULL, "DEL %s", name);
    raw_all(cfg, NULL, "HSET %s intruder:1 1", name);
    raw_all(cfg, NULL, "PEXPIRE %s 5000", name);
    step("rlock: release after another owner took the hash", redmutex_lock_release(a2, NULL), REDMUTEX_ELOST,
         REDMUTEX_ENOTOWNER, 1);
    int intact = raw_all(cfg, "1", "HGET %s intruder:1", name);
    fact("rlock: other owner's field intact", intact == (int)cfg->n_urls, NULL);
    raw_all(cfg, NULL, "DEL %s", name);
    redmutex_lock_free(a);
    redmutex_lock_free(a2);
    redmutex_lock_free(bl);
}

int drv_run_nonowner(drv_ctx *ctx)
{
    redmutex_client *b = NULL;
    if (drv_client_new(&b, &ctx->cfg) != 0) {
        fact("second client", false, redmutex_last_error());
        return 1;
    }
    nonowner_plain(ctx, b);
    nonowner_stale(ctx, b);
    nonowner_rlock(ctx, b);
    redmutex_client_free(b);
    drv_log(0, 0, "steps_done", "%s", "");
    return 0;
}

/* ---- fork (S19) ------------------------------------------------------------------ */

static void fork_case(drv_ctx *ctx, redmutex_kind kind, const char *label)
{
    const drv_config *cfg = &ctx->cfg;
    char name[128], what[160];
    snprintf(name, sizeof name, "%sfork:%s", cfg->prefix, label);
    redmutex_lock *l = new_lock(ctx->client, cfg, name, kind, 0);
    snprintf(what, sizeof what, "%s: parent acquires (watchdog)", label);
    step(what, redmutex_lock_acquire(l, NULL, 1000), REDMUTEX_OK, 1);
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        drv_log_init("fork-child");
        snprintf(what, sizeof what, "%s: child releases", label);
        bool ok = step(what, redmutex_lock_release(l, NULL), REDMUTEX_EFORKED, REDMUTEX_ENOTOWNER, 1);
        snprintf(what, sizeof what, "%s: child extends", label);
        ok &= step(what, redmutex_lock_extend(l, NULL, 60000, REDMUTEX_EXTEND_REPLACE), REDMUTEX_EFORKED,
                   REDMUTEX_ENOTOWNER, 1);
        _exit(ok ? 0 : 1);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    snprintf(what, sizeof what, "%s: child exited cleanly", label);
    fact(what, WIFEXITED(status) && WEXITSTATUS(status) == 0, NULL);
    snprintf(what, sizeof what, "%s: parent still owns after the child's attempts", label);
    fact(what, owned(l, NULL) == 1, NULL);
    drv_sleep_ms(2 * cfg->watchdog_lease_ms);
    redmutex_state st = REDMUTEX_STATE_UNLOCKED;
    redmutex_lock_state(&st, l, NULL);
    snprintf(what, sizeof what, "%s: parent's watchdog keeps it for 2 leases", label);
    fact(what, st == REDMUTEX_STATE_HELD && owned(l, NULL) == 1, NULL);
    snprintf(what, sizeof what, "%s: parent releases", label);
    step(what, redmutex_lock_release(l, NULL), REDMUTEX_OK, 1);
    redmutex_lock_free(l);
}

int drv_run_fork(drv_ctx *ctx)
{
    fork_case(ctx, REDMUTEX_KIND_LOCK, "plain");
    fork_case(ctx, REDMUTEX_KIND_RLOCK, "rlock");
    drv_log(0, 0, "steps_done", "%s", "");
    return 0;
}

/* ---- reentrancy (S17) ------------------------------------------------------------- */

static void nested_counts(drv_ctx *ctx, int depth)
{
    const drv_config *cfg = &ctx->cfg;
    char name[128], what[160];
    snprintf(name, sizeof name, "%snest", cfg->prefix);
    redmutex_lock *l = new_lock(ctx->client, cfg, name, REDMUTEX_KIND_RLOCK, 0);
    int64_t outer = -1;
    bool counts = true, fences = true;
    for (int level = 1; level <= depth; level++) {
        snprintf(what, sizeof what, "nested: acquire level %d", level);
        step(what, redmutex_lock_acquire(l, NULL, 1000), REDMUTEX_OK, 1);
        int64_t count = -1, fence = -2;
        redmutex_lock_hold_count(&count, l, NULL);
        redmutex_lock_fence(&fence, l, NULL);
        if (level == 1)
            outer = fence;
        counts &= count == level;
        fences &= fence == outer;
        drv_log(0, 0, "nest_ok", "\"key\":\"%s\",\"lvl\":%d,\"count\":%lld,\"fence\":%lld", name, level,
                (long long)count, (long long)fence);
    }
    for (int level = depth; level >= 1; level--) {
        snprintf(what, sizeof what, "nested: release level %d", level);
        step(what, redmutex_lock_release(l, NULL), REDMUTEX_OK, 1);
        int64_t count = -1;
        redmutex_lock_hold_count(&count, l, NULL);
        counts &= count == level - 1;
    }
    fact("nested: server hold count equals the local depth at every level", counts, NULL);
    fact("nested: every level reports the outer acquisition's token", fences, NULL);
    fact("nested: nothing left after the last release", raw_all(cfg, "0", "EXISTS %s", name) == (int)cfg->n_urls,
         NULL);
    redmutex_lock_free(l);
}

static void vanished_between_levels(drv_ctx *ctx)
{
    const drv_config *cfg = &ctx->cfg;
    char name[128];
    snprintf(name, sizeof name, "%svanish", cfg->prefix);
    drv_lock_tag tag = {.worker = 0};
    redmutex_lock_options o;
    drv_lock_options(&o, cfg, &tag);
    redmutex_lock *l = NULL;
    redmutex_lock_new(&l, ctx->client, name, REDMUTEX_KIND_RLOCK, &o);
    step("vanish: acquire level 1", redmutex_lock_acquire(l, NULL, 1000), REDMUTEX_OK, 1);
    step("vanish: acquire level 2", redmutex_lock_acquire(l, NULL, 1000), REDMUTEX_OK, 1);
    raw_all(cfg, NULL, "DEL %s", name); /* eviction, FLUSHDB, a failover that lost it */
    drv_log(0, 0, "vanished", "\"key\":\"%s\"", name);
    step("vanish: nested acquire after the key vanished", redmutex_lock_acquire(l, NULL, 0), REDMUTEX_ELOST, 1);
    fact("vanish: the nested acquire left nothing on the servers",
         raw_all(cfg, "0", "EXISTS %s", name) == (int)cfg->n_urls, NULL);
    redmutex_state st = REDMUTEX_STATE_UNLOCKED;
    redmutex_lock_state(&st, l, NULL);
    fact("vanish: the hold is reported LOST", st == REDMUTEX_STATE_LOST || st == REDMUTEX_STATE_UNLOCKED, NULL);
    int rc = redmutex_lock_release(l, NULL);
    step("vanish: release reports the loss", rc, REDMUTEX_ELOST, 1);
    if (rc == REDMUTEX_OK)
        redmutex_lock_release(l, NULL);
    drv_sleep_ms(50); /* the callback runs on the watchdog thread */
    redmutex_lock_free(l);
}

int drv_run_reentrant(drv_ctx *ctx)
{
    for (int depth = 1; depth <= 5; depth += 2)
        nested_counts(ctx, depth);
    vanished_between_levels(ctx);
    drv_log(0, 0, "steps_done", "%s", "");
    return 0;
}

/* ---- hold (S18) -------------------------------------------------------------------- */

int drv_run_hold(drv_ctx *ctx)
{
    const drv_config *cfg = &ctx->cfg;
    redmutex_lock **locks = calloc((size_t)cfg->nkeys, sizeof *locks);
    if (!locks)
        return 1;
    int held = 0;
    for (int k = 0; k < cfg->nkeys; k++) {
        char name[256];
        snprintf(name, sizeof name, "%s%d", cfg->prefix, k);
        locks[k] = new_lock(ctx->client, cfg, name, cfg->kind, 0);
        int64_t t0 = drv_now_ns();
        int rc = locks[k] ? redmutex_lock_acquire(locks[k], NULL, 2000) : REDMUTEX_ENOMEM;
        if (rc == 0)
            held++;
        else
            drv_log_error(0, k, "acq_err", rc, t0);
    }
    drv_log(0, 0, "holding", "\"held\":%d", held);
    char line[64];
    while (drv_read_command(line, sizeof line, -1) > 0 && strcmp(line, "exit") != 0) {
    }
    /* The handles are left as they are: main() frees the client with every lock held. */
    free(locks);
    return 0;
}
