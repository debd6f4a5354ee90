/*
 * The least-privilege ACL rule set of docs/security.md, tested both ways:
 * every feature works for a user with exactly those rules (sufficient), each
 * rule is needed by some feature (smallest: without it that feature fails
 * with REDMUTEX_EAUTH or visibly stops working), and a user who may read but
 * not write the lock keys gets REDMUTEX_EAUTH with nothing changed.
 */
#define _GNU_SOURCE
#include "harness.h"

#include <pthread.h>
#include <stdbool.h>
#include <string.h>

static rs_server srv, more[2];

/* The rule set for locks named app:* (docs/security.md). Keep the two in step. */
static const char *const commands[] = {
    "+set",         "+get",       "+del",         "+pttl", "+pexpire", "+type",    "+exists",
    "+hexists",     "+hincrby",   "+hget",        "+incr", "+publish", "+evalsha", "+eval",
    "+script|load", "+subscribe", "+unsubscribe", "+wait", "+info",    "+select",  "+hgetall",
};
#define N_COMMANDS (sizeof commands / sizeof commands[0])
/*
 * Recommended, not required: without +script|load every script's first call
 * on a server costs a NOSCRIPT round trip (EVAL then loads it); without
 * +unsubscribe the subscriber re-makes its pub/sub connection, instead of
 * unsubscribing, when a channel has had no waiter for a while; without
 * +hgetall redmutex_lock_inspect (redmutex status) gives no owner for a
 * reentrant lock.
 */
static bool optional_command(const char *c)
{
    return strcmp(c, "+script|load") == 0 || strcmp(c, "+unsubscribe") == 0 || strcmp(c, "+hgetall") == 0;
}
static const char *const patterns =
    "~app:* ~redisson_lock_token:{app:* ~redisson_unlock_latch:{app:* ~redisson_lock__channel:{app:* "
    "&redisson_lock__channel:{app:*";

/* (Re)defines the user `locker` on s with the rule set, less commands[skip] (SIZE_MAX: none). */
static void set_user(rs_server *s, size_t skip, const char *keys)
{
    char cmd[2048];
    int n = snprintf(cmd, sizeof cmd, "ACL SETUSER locker reset on >locker-pw %s", keys);
    for (size_t i = 0; i < N_COMMANDS; i++)
        if (i != skip)
            n += snprintf(cmd + n, sizeof cmd - (size_t)n, " %s", commands[i]);
    /* hiredis splits a format at spaces; '%' in key patterns (%R~) must be escaped for it. */
    char fmt[4096];
    size_t j = 0;
    for (size_t i = 0; cmd[i] && j + 2 < sizeof fmt; i++) {
        if (cmd[i] == '%')
            fmt[j++] = '%';
        fmt[j++] = cmd[i];
    }
    fmt[j] = '\0';
    redisReply *r = rs_cmd(s, fmt);
    CHECKF(r && r->type == REDIS_REPLY_STATUS, "%s: %s", cmd, r && r->str ? r->str : "no reply");
    freeReplyObject(r);
}

static redmutex_client *user_client(const rs_server *s, int db, int64_t lease_ms)
{
    redmutex_client_options o = REDMUTEX_CLIENT_OPTIONS_INIT;
    o.command_timeout_ms = 1000;
    o.watchdog_lease_ms = lease_ms ? lease_ms : 30000;
    o.wait_backoff_cap_ms = 5000;
    o.replica_timeout_ms = 50;
    char url[128];
    snprintf(url, sizeof url, "redis://locker:locker-pw@127.0.0.1:%d/%d", s->port, db);
    const char *u = url;
    redmutex_client *c = NULL;
    CHECK_OK(redmutex_client_new(&c, &u, 1, &o));
    return c;
}

static redmutex_lock *new_lock(redmutex_client *c, const char *name, redmutex_kind kind, uint32_t flags,
                               int64_t lease_ms)
{
    redmutex_lock_options o = REDMUTEX_LOCK_OPTIONS_INIT;
    o.flags = flags;
    o.lease_ms = lease_ms;
    redmutex_lock *l;
    CHECK_OK(redmutex_lock_new(&l, c, name, kind, &o));
    return l;
}

/* ---- features: each returns the first failing result code, 0 when all worked ---- */

#define TRY(expr)                                                                                                      \
    do {                                                                                                               \
        int rc_ = (expr);                                                                                              \
        if (rc_ != 0) {                                                                                                \
            rc = rc_;                                                                                                  \
            goto out;                                                                                                  \
        }                                                                                                              \
    } while (0)

static int feature_plain_lock(void)
{
    redmutex_client *c = user_client(&srv, 0, 0);
    redmutex_lock *l = new_lock(c, "app:plain", REDMUTEX_KIND_LOCK, 0, 10000);
    int rc = 0, locked;
    int64_t ttl;
    TRY(redmutex_lock_acquire(l, NULL, 0));
    TRY(redmutex_lock_extend(l, NULL, 5000, REDMUTEX_EXTEND_ADD));
    TRY(redmutex_lock_is_locked(&locked, l));
    TRY(redmutex_lock_ttl(&ttl, l));
    TRY(redmutex_lock_release(l, NULL));
out:
    redmutex_lock_free(l);
    redmutex_client_close(c);
    redmutex_client_free(c);
    return rc;
}

static int feature_busy_lock_reports_holder(void)
{
    redmutex_client *c = user_client(&srv, 0, 0);
    redmutex_lock *a = new_lock(c, "app:busy", REDMUTEX_KIND_LOCK, 0, 10000);
    redmutex_lock *b = new_lock(c, "app:busy", REDMUTEX_KIND_LOCK, 0, 10000);
    int rc = 0;
    TRY(redmutex_lock_acquire(a, NULL, 0));
    rc = redmutex_lock_acquire(b, NULL, 0); /* inspects the holder's TTL */
    rc = rc == REDMUTEX_ETIMEDOUT ? 0 : rc ? rc : REDMUTEX_EPROTOCOL;
    redmutex_lock_release(a, NULL);
out:
    redmutex_lock_free(a);
    redmutex_lock_free(b);
    redmutex_client_close(c);
    redmutex_client_free(c);
    return rc;
}

static int feature_reentrant_lock(void)
{
    redmutex_client *c = user_client(&srv, 0, 0);
    redmutex_lock *l = new_lock(c, "app:re", REDMUTEX_KIND_RLOCK, 0, 10000);
    int rc = 0;
    int64_t count;
    TRY(redmutex_lock_acquire(l, NULL, 0));
    TRY(redmutex_lock_acquire(l, NULL, 0));
    TRY(redmutex_lock_hold_count(&count, l, NULL));
    TRY(redmutex_lock_release(l, NULL));
    TRY(redmutex_lock_release(l, NULL));
out:
    redmutex_lock_free(l);
    redmutex_client_close(c);
    redmutex_client_free(c);
    return rc;
}

static int feature_fencing(void)
{
    redmutex_client *c = user_client(&srv, 0, 0);
    redmutex_lock *p = new_lock(c, "app:fenced", REDMUTEX_KIND_LOCK, REDMUTEX_LOCK_FENCING, 10000);
    redmutex_lock *r = new_lock(c, "app:rfenced", REDMUTEX_KIND_RLOCK, REDMUTEX_LOCK_FENCING, 10000);
    int rc = 0;
    TRY(redmutex_lock_acquire(p, NULL, 0));
    TRY(redmutex_lock_release(p, NULL));
    TRY(redmutex_lock_acquire(r, NULL, 0));
    TRY(redmutex_lock_acquire(r, NULL, 0)); /* reentrant: reads the token again */
    TRY(redmutex_lock_release(r, NULL));
    TRY(redmutex_lock_release(r, NULL));
out:
    redmutex_lock_free(p);
    redmutex_lock_free(r);
    redmutex_client_close(c);
    redmutex_client_free(c);
    return rc;
}

static int feature_force_release(void)
{
    redmutex_client *c = user_client(&srv, 0, 0);
    redmutex_lock *l = new_lock(c, "app:forced", REDMUTEX_KIND_LOCK, 0, 10000);
    int rc = 0, deleted = 0;
    TRY(redmutex_lock_acquire(l, NULL, 0));
    TRY(redmutex_lock_force_release(&deleted, l));
    rc = deleted == 1 ? 0 : REDMUTEX_EPROTOCOL;
out:
    redmutex_lock_free(l);
    redmutex_client_close(c);
    redmutex_client_free(c);
    return rc;
}

/* redmutex_lock_inspect (redmutex status): a plain lock in full, a reentrant one without its owner
   unless +hgetall is granted (recommended). */
static int feature_inspect(void)
{
    redmutex_client *c = user_client(&srv, 0, 0);
    redmutex_lock *p = new_lock(c, "app:inspected", REDMUTEX_KIND_LOCK, REDMUTEX_LOCK_FENCING, 10000);
    redmutex_lock *r = new_lock(c, "app:rinspected", REDMUTEX_KIND_RLOCK, 0, 10000);
    redmutex_lock_info pi = REDMUTEX_LOCK_INFO_INIT, ri = REDMUTEX_LOCK_INFO_INIT;
    int rc = 0;
    TRY(redmutex_lock_acquire(p, NULL, 0));
    TRY(redmutex_lock_acquire(r, NULL, 0));
    TRY(redmutex_lock_inspect(&pi, p));
    TRY(redmutex_lock_inspect(&ri, r));
    bool plain_ok = pi.held && pi.kind == REDMUTEX_KIND_LOCK && strlen(pi.owner) == 8 && pi.fence >= 1;
    bool re_ok = ri.held && ri.kind == REDMUTEX_KIND_RLOCK && ri.ttl_ms > 0;
    rc = plain_ok && re_ok ? 0 : REDMUTEX_EPROTOCOL;
    redmutex_lock_release(p, NULL);
    redmutex_lock_release(r, NULL);
out:
    redmutex_lock_free(p);
    redmutex_lock_free(r);
    redmutex_client_close(c);
    redmutex_client_free(c);
    return rc;
}

static int feature_watchdog_renews(void)
{
    redmutex_client *c = user_client(&srv, 0, 1500);
    redmutex_lock *l = new_lock(c, "app:renewed", REDMUTEX_KIND_RLOCK, 0, 0);
    int rc = 0;
    TRY(redmutex_lock_acquire(l, NULL, 0));
    /* Renewed when the TTL goes up again (the first renewal is due after a third of the lease). */
    long long prev = rs_int(&srv, "PTTL app:renewed"), cur = prev;
    int64_t deadline = rt_now_ms() + rt_scaled_ms(1400);
    while (cur <= prev && rt_now_ms() < deadline) {
        rt_sleep_ms(20);
        prev = cur;
        cur = rs_int(&srv, "PTTL app:renewed");
    }
    rc = cur > prev ? 0 : REDMUTEX_ELOST;
    redmutex_lock_release(l, NULL);
out:
    redmutex_lock_free(l);
    redmutex_client_close(c);
    redmutex_client_free(c);
    return rc;
}

typedef struct wait_arg {
    redmutex_lock *l;
    int rc;
} wait_arg;

static void *waiter(void *arg)
{
    wait_arg *w = arg;
    w->rc = redmutex_lock_acquire(w->l, NULL, rt_scaled_ms(1500));
    if (w->rc == 0)
        redmutex_lock_release(w->l, NULL);
    return NULL;
}

/* A waiter subscribes to the release channel (and is woken through it). */
static int feature_waiting_by_notification(void)
{
    redmutex_client *c = user_client(&srv, 0, 0), *c2 = user_client(&srv, 0, 0);
    redmutex_lock *holder = new_lock(c, "app:wait", REDMUTEX_KIND_LOCK, 0, 10000);
    wait_arg w = {new_lock(c2, "app:wait", REDMUTEX_KIND_LOCK, 0, 10000), -1};
    int rc = 0;
    TRY(redmutex_lock_acquire(holder, NULL, 0));
    pthread_t t;
    pthread_create(&t, NULL, waiter, &w);
    int64_t deadline = rt_now_ms() + rt_scaled_ms(2000);
    while (rs_numsub(&srv, "redisson_lock__channel:{app:wait}") != 1 && rt_now_ms() < deadline)
        rt_sleep_ms(5);
    bool subscribed = rs_numsub(&srv, "redisson_lock__channel:{app:wait}") == 1;
    redmutex_lock_release(holder, NULL);
    pthread_join(t, NULL);
    rc = w.rc ? w.rc : subscribed ? 0 : REDMUTEX_EAUTH;
out:
    redmutex_lock_free(holder);
    redmutex_lock_free(w.l);
    redmutex_client_close(c);
    redmutex_client_free(c);
    redmutex_client_close(c2);
    redmutex_client_free(c2);
    return rc;
}

/* min_replicas: WAIT runs (no replica here, so the answer is "too few", not "not allowed"). */
static int feature_replica_wait(void)
{
    redmutex_client_options o = REDMUTEX_CLIENT_OPTIONS_INIT;
    o.min_replicas = 1;
    o.replica_timeout_ms = 50;
    char url[128];
    snprintf(url, sizeof url, "redis://locker:locker-pw@127.0.0.1:%d", srv.port);
    const char *u = url;
    redmutex_client *c;
    CHECK_OK(redmutex_client_new(&c, &u, 1, &o));
    redmutex_lock *l = new_lock(c, "app:replicated", REDMUTEX_KIND_LOCK, 0, 10000);
    int rc = redmutex_lock_acquire(l, NULL, 0);
    rc = rc == REDMUTEX_EREPLICAS ? 0 : rc ? rc : REDMUTEX_EPROTOCOL;
    redmutex_lock_free(l);
    redmutex_client_close(c);
    redmutex_client_free(c);
    return rc;
}

/* Redlock over three servers: the handshake asks INFO server for the run_id. */
static int feature_redlock(void)
{
    char urls[3][128];
    const char *u[3];
    rs_server *s[3] = {&srv, &more[0], &more[1]};
    for (int i = 0; i < 3; i++) {
        snprintf(urls[i], sizeof urls[i], "redis://locker:locker-pw@127.0.0.1:%d", s[i]->port);
        u[i] = urls[i];
    }
    redmutex_client *c = NULL;
    int rc = redmutex_client_new(&c, u, 3, NULL);
    if (rc != 0)
        return rc;
    redmutex_lock *l = new_lock(c, "app:redlock", REDMUTEX_KIND_LOCK, REDMUTEX_LOCK_FENCING, 10000);
    rc = redmutex_lock_acquire(l, NULL, 0);
    if (rc == 0)
        rc = redmutex_lock_release(l, NULL);
    redmutex_lock_free(l);
    redmutex_client_close(c);
    redmutex_client_free(c);
    return rc;
}

static int feature_database_number(void)
{
    redmutex_client *c = user_client(&srv, 3, 0);
    redmutex_lock *l = new_lock(c, "app:db3", REDMUTEX_KIND_LOCK, 0, 10000);
    int rc = redmutex_lock_acquire(l, NULL, 0);
    if (rc == 0)
        rc = redmutex_lock_release(l, NULL);
    redmutex_lock_free(l);
    redmutex_client_close(c);
    redmutex_client_free(c);
    return rc;
}

/* After SCRIPT FLUSH, scripts are sent again in full (EVAL). */
static int feature_script_cache_flushed(void)
{
    redmutex_client *c = user_client(&srv, 0, 0);
    redmutex_lock *l = new_lock(c, "app:flushed", REDMUTEX_KIND_RLOCK, 0, 10000);
    int rc = redmutex_lock_acquire(l, NULL, 0);
    freeReplyObject(rs_cmd(&srv, "SCRIPT FLUSH"));
    if (rc == 0)
        rc = redmutex_lock_release(l, NULL);
    redmutex_lock_free(l);
    redmutex_client_close(c);
    redmutex_client_free(c);
    return rc;
}

typedef struct feature {
    const char *name;
    int (*run)(void);
} feature;

static const feature features[] = {
    {"plain lock", feature_plain_lock},
    {"busy plain lock", feature_busy_lock_reports_holder},
    {"reentrant lock", feature_reentrant_lock},
    {"fencing", feature_fencing},
    {"force release", feature_force_release},
    {"watchdog", feature_watchdog_renews},
    {"waiting", feature_waiting_by_notification},
    {"min_replicas", feature_replica_wait},
    {"Redlock", feature_redlock},
    {"database number", feature_database_number},
    {"script cache flushed", feature_script_cache_flushed},
    {"inspect", feature_inspect},
};
#define N_FEATURES (sizeof features / sizeof features[0])

static void start_servers(void)
{
    rs_start(&srv, NULL);
    rs_start(&more[0], NULL);
    rs_start(&more[1], NULL);
    for (int i = 0; i < 3; i++)
        set_user(i == 0 ? &srv : &more[i - 1], SIZE_MAX, patterns);
}

static void test_rule_set_is_sufficient_for_every_feature(void)
{
    start_servers();
    for (size_t f = 0; f < N_FEATURES; f++) {
        int rc = features[f].run();
        CHECKF(rc == 0, "%s under the rule set: %s (%s)", features[f].name, redmutex_strerror(rc),
               redmutex_last_error());
    }
    CHECK(rs_count_keys(&srv, "app:*") == 0);
}

static void test_every_rule_is_needed(void)
{
    start_servers();
    for (size_t skip = 0; skip < N_COMMANDS; skip++) {
        for (int i = 0; i < 3; i++)
            set_user(i == 0 ? &srv : &more[i - 1], skip, patterns);
        size_t failing = 0, eauth = 0;
        for (size_t f = 0; f < N_FEATURES; f++) {
            int rc = features[f].run();
            if (rc != 0) {
                if (getenv("ACL_VERBOSE"))
                    printf("       %s: %s\n", features[f].name, redmutex_last_error());
                failing++;
                eauth += rc == REDMUTEX_EAUTH;
            }
        }
        printf("     without %-14s %zu feature(s) fail, %zu of them with EAUTH\n", commands[skip], failing, eauth);
        if (optional_command(commands[skip]))
            CHECKF(failing == 0, "the optional %s is needed after all", commands[skip]);
        else
            CHECKF(failing > 0, "every feature works without %s: it is not needed", commands[skip]);
        for (int i = 0; i < 3; i++) /* a script refused halfway may have left keys */
            freeReplyObject(rs_cmd(i == 0 ? &srv : &more[i - 1], "FLUSHALL"));
    }
}

static void test_user_without_write_access_gets_eauth_and_changes_nothing(void)
{
    rs_start(&srv, NULL);
    /* All the commands, but the keys only readable. */
    set_user(&srv, SIZE_MAX,
             "%R~app:* %R~redisson_lock_token:{app:* %R~redisson_unlock_latch:{app:* "
             "%R~redisson_lock__channel:{app:* &redisson_lock__channel:{app:*");
    freeReplyObject(rs_cmd(&srv, "SET app:held someone-else-token PX 60000"));
    redmutex_client *c = user_client(&srv, 0, 0);
    redmutex_lock *l = new_lock(c, "app:new", REDMUTEX_KIND_LOCK, REDMUTEX_LOCK_FENCING, 10000);
    redmutex_lock *r = new_lock(c, "app:rnew", REDMUTEX_KIND_RLOCK, 0, 10000);
    redmutex_lock *held = new_lock(c, "app:held", REDMUTEX_KIND_LOCK, 0, 10000);
    CHECK_RC(redmutex_lock_acquire(l, NULL, 0), REDMUTEX_EAUTH);
    CHECK(strstr(redmutex_last_error(), "ACL") || strstr(redmutex_last_error(), "NOPERM"));
    CHECK(!strstr(redmutex_last_error(), "locker-pw"));
    CHECK_RC(redmutex_lock_acquire(r, NULL, 1000), REDMUTEX_EAUTH);
    int deleted;
    CHECK_RC(redmutex_lock_force_release(&deleted, held), REDMUTEX_EAUTH);
    /* Nothing changed: no lock, no fencing counter, the other holder's key intact. */
    CHECK(rs_count_keys(&srv, "*") == 1);
    redisReply *v = rs_cmd(&srv, "GET app:held");
    CHECK(v && v->type == REDIS_REPLY_STRING && strcmp(v->str, "someone-else-token") == 0);
    freeReplyObject(v);
    CHECK(rs_int(&srv, "PTTL app:held") > 50000);
    redmutex_lock_free(l);
    redmutex_lock_free(r);
    redmutex_lock_free(held);
    redmutex_client_close(c);
    redmutex_client_free(c);
}

int main(int argc, char **argv)
{
    static const rt_test tests[] = {
        {"rule_set_is_sufficient_for_every_feature", test_rule_set_is_sufficient_for_every_feature},
        {"every_rule_is_needed", test_every_rule_is_needed},
        {"user_without_write_access_gets_eauth_and_changes_nothing",
         test_user_without_write_access_gets_eauth_and_changes_nothing},
    };
    return rt_run(tests, sizeof tests / sizeof tests[0], argc, argv);
}
