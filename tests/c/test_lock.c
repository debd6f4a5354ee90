/* Plain locks (redis-py Lock wire format) against a real redis-server. */
#define _GNU_SOURCE
#include "harness.h"

#include <pthread.h>
#include <stdatomic.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static rs_server srv;

static redmutex_lock *new_lock(redmutex_client *c, const char *name, int64_t lease_ms)
{
    redmutex_lock_options o;
    redmutex_lock_options_init(&o, REDMUTEX_LOCK_OPTIONS_VERSION);
    o.lease_ms = lease_ms;
    redmutex_lock *l = NULL;
    CHECK_OK(redmutex_lock_new(&l, c, name, REDMUTEX_KIND_LOCK, &o));
    return l;
}

static void test_acquire_release_sets_and_deletes_key(void)
{
    rs_start(&srv, NULL);
    redmutex_client *c = rt_client(&srv, 0);
    redmutex_lock *l = new_lock(c, "jobs:nightly", 5000);
    int locked = -1;
    CHECK_OK(redmutex_lock_is_locked(&locked, l));
    CHECK(locked == 0);
    CHECK_OK(redmutex_lock_acquire(l, NULL, 0));
    /* redis-py format: a string key holding a 32-hex-digit token with a TTL. */
    redisReply *r = rs_cmd(&srv, "GET jobs:nightly");
    CHECK(r && r->type == REDIS_REPLY_STRING && r->len == 32);
    freeReplyObject(r);
    long long pttl = rs_int(&srv, "PTTL jobs:nightly");
    CHECK(pttl > 4000 && pttl <= 5000);
    CHECK_OK(redmutex_lock_is_locked(&locked, l));
    CHECK(locked == 1);
    int owned = -1;
    CHECK_OK(redmutex_lock_is_owned(&owned, l, NULL));
    CHECK(owned == 1);
    int64_t ttl = 0;
    CHECK_OK(redmutex_lock_ttl(&ttl, l));
    CHECK(ttl > 4000 && ttl <= 5000);
    redmutex_state st;
    CHECK_OK(redmutex_lock_state(&st, l, NULL));
    CHECK(st == REDMUTEX_STATE_HELD);
    CHECK_OK(redmutex_lock_release(l, NULL));
    CHECK(!rs_exists(&srv, "jobs:nightly"));
    CHECK_OK(redmutex_lock_state(&st, l, NULL));
    CHECK(st == REDMUTEX_STATE_UNLOCKED);
    CHECK_OK(redmutex_lock_ttl(&ttl, l));
    CHECK(ttl == -2);
    /* Releasing again: not held. */
    CHECK_RC(redmutex_lock_release(l, NULL), REDMUTEX_ENOTOWNER);
    redmutex_lock_free(l);
    redmutex_client_close(c);
    redmutex_client_free(c);
}

static void test_second_acquire_of_plain_lock_times_out(void)
{
    rs_start(&srv, NULL);
    redmutex_client *c = rt_client(&srv, 0);
    redmutex_lock *a = new_lock(c, "x", 10000), *b = new_lock(c, "x", 10000);
    CHECK_OK(redmutex_lock_acquire(a, NULL, 0));
    CHECK_RC(redmutex_lock_acquire(b, NULL, 0), REDMUTEX_ETIMEDOUT);
    CHECK(strstr(redmutex_last_error(), "held by another owner"));
    int64_t t0 = rt_now_ms();
    CHECK_RC(redmutex_lock_acquire(b, NULL, 300), REDMUTEX_ETIMEDOUT);
    int64_t waited = rt_now_ms() - t0;
    CHECKF(waited >= 290 && waited < 1500, "waited %lld ms", (long long)waited);
    /* Not reentrant: the same handle waits like anyone else. */
    CHECK_RC(redmutex_lock_acquire(a, NULL, 0), REDMUTEX_ETIMEDOUT);
    CHECK_OK(redmutex_lock_release(a, NULL));
    CHECK_OK(redmutex_lock_acquire(b, NULL, 0));
    CHECK_OK(redmutex_lock_release(b, NULL));
    redmutex_lock_free(a);
    redmutex_lock_free(b);
    redmutex_client_close(c);
    redmutex_client_free(c);
}

static void test_raw_set_nx_holder_excludes_and_is_excluded(void)
{
    /* A redis-py Lock is SET name token NX PX: it and redmutex exclude each other. */
    rs_start(&srv, NULL);
    redmutex_client *c = rt_client(&srv, 0);
    redmutex_lock *l = new_lock(c, "shared", 10000);
    redisReply *r = rs_cmd(&srv, "SET shared pytoken NX PX 10000");
    CHECK(r && r->type == REDIS_REPLY_STATUS);
    freeReplyObject(r);
    CHECK_RC(redmutex_lock_acquire(l, NULL, 0), REDMUTEX_ETIMEDOUT);
    int locked = 0, owned = 1;
    CHECK_OK(redmutex_lock_is_locked(&locked, l));
    CHECK_OK(redmutex_lock_is_owned(&owned, l, NULL));
    CHECK(locked == 1 && owned == 0);
    /* The redis-py token as an explicit owner may release it (redis-py's token= hand-off). */
    CHECK_OK(redmutex_lock_release(l, "pytoken"));
    CHECK(!rs_exists(&srv, "shared"));
    /* And the other way round: SET NX fails while redmutex holds it. */
    CHECK_OK(redmutex_lock_acquire(l, NULL, 0));
    r = rs_cmd(&srv, "SET shared other NX PX 10000");
    CHECK(r && r->type == REDIS_REPLY_NIL);
    freeReplyObject(r);
    CHECK_OK(redmutex_lock_release(l, NULL));
    /* A redis-py lock without TTL (its default): ttl reports -1, waiters still give up on time. */
    r = rs_cmd(&srv, "SET shared forever NX");
    freeReplyObject(r);
    int64_t ttl = 0;
    CHECK_OK(redmutex_lock_ttl(&ttl, l));
    CHECK(ttl == -1);
    CHECK_RC(redmutex_lock_acquire(l, NULL, 100), REDMUTEX_ETIMEDOUT);
    redmutex_lock_free(l);
    redmutex_client_close(c);
    redmutex_client_free(c);
}

static void test_release_by_non_owner_refused_and_lock_intact(void)
{
    rs_start(&srv, NULL);
    redmutex_client *c = rt_client(&srv, 0);
    redmutex_lock *a = new_lock(c, "res", 10000), *b = new_lock(c, "res", 10000);
    CHECK_OK(redmutex_lock_acquire(a, "owner-a", 0));
    CHECK_RC(redmutex_lock_release(b, NULL), REDMUTEX_ENOTOWNER);
    CHECK_RC(redmutex_lock_release(b, "owner-b"), REDMUTEX_ENOTOWNER);
    CHECK_RC(redmutex_lock_extend(b, "owner-b", 1000, REDMUTEX_EXTEND_ADD), REDMUTEX_ENOTOWNER);
    redisReply *r = rs_cmd(&srv, "GET res");
    CHECK(r && r->type == REDIS_REPLY_STRING && strcmp(r->str, "owner-a") == 0);
    freeReplyObject(r);
    CHECK(rs_int(&srv, "PTTL res") > 9000);
    CHECK_OK(redmutex_lock_release(a, "owner-a"));
    redmutex_lock_free(a);
    redmutex_lock_free(b);
    redmutex_client_close(c);
    redmutex_client_free(c);
}

static void test_extend_adds_or_replaces_ttl(void)
{
    rs_start(&srv, NULL);
    redmutex_client *c = rt_client(&srv, 0);
    redmutex_lock *l = new_lock(c, "ext", 2000);
    CHECK_OK(redmutex_lock_acquire(l, NULL, 0));
    CHECK_OK(redmutex_lock_extend(l, NULL, 10000, REDMUTEX_EXTEND_ADD));
    long long pttl = rs_int(&srv, "PTTL ext");
    CHECKF(pttl > 11000 && pttl <= 12000, "pttl %lld", pttl);
    int64_t validity = 0;
    CHECK_OK(redmutex_lock_validity(&validity, l, NULL));
    CHECK(validity > 10000 && validity <= 12000);
    CHECK_OK(redmutex_lock_extend(l, NULL, 3000, REDMUTEX_EXTEND_REPLACE));
    pttl = rs_int(&srv, "PTTL ext");
    CHECKF(pttl > 2500 && pttl <= 3000, "pttl %lld", pttl);
    /* Extension never re-creates a lock that is gone. */
    CHECK(rs_int(&srv, "DEL ext") == 1);
    CHECK_RC(redmutex_lock_extend(l, NULL, 3000, REDMUTEX_EXTEND_ADD), REDMUTEX_ELOST);
    CHECK(!rs_exists(&srv, "ext"));
    redmutex_state st;
    CHECK_OK(redmutex_lock_state(&st, l, NULL));
    CHECK(st == REDMUTEX_STATE_LOST);
    CHECK_RC(redmutex_lock_release(l, NULL), REDMUTEX_ELOST);
    CHECK_OK(redmutex_lock_state(&st, l, NULL));
    CHECK(st == REDMUTEX_STATE_UNLOCKED);
    redmutex_lock_free(l);
    redmutex_client_close(c);
    redmutex_client_free(c);
}

static void test_extension_cap(void)
{
    rs_start(&srv, NULL);
    redmutex_client *c = rt_client(&srv, 0);
    redmutex_lock_options o = REDMUTEX_LOCK_OPTIONS_INIT;
    o.lease_ms = 5000;
    o.max_extensions = 2;
    redmutex_lock *l;
    CHECK_OK(redmutex_lock_new(&l, c, "capped", REDMUTEX_KIND_LOCK, &o));
    CHECK_OK(redmutex_lock_acquire(l, NULL, 0));
    CHECK_OK(redmutex_lock_extend(l, NULL, 100, REDMUTEX_EXTEND_ADD));
    CHECK_OK(redmutex_lock_extend(l, NULL, 100, REDMUTEX_EXTEND_ADD));
    CHECK_RC(redmutex_lock_extend(l, NULL, 100, REDMUTEX_EXTEND_ADD), REDMUTEX_ELIMIT);
    CHECK_OK(redmutex_lock_release(l, NULL));
    /* The count starts again with the next acquisition. */
    CHECK_OK(redmutex_lock_acquire(l, NULL, 0));
    CHECK_OK(redmutex_lock_extend(l, NULL, 100, REDMUTEX_EXTEND_ADD));
    CHECK_OK(redmutex_lock_release(l, NULL));
    redmutex_lock_free(l);
    redmutex_client_close(c);
    redmutex_client_free(c);
}

static void test_expired_lease_is_reported_lost(void)
{
    rs_start(&srv, NULL);
    redmutex_client *c = rt_client(&srv, 0);
    redmutex_lock *l = new_lock(c, "short", 100);
    CHECK_OK(redmutex_lock_acquire(l, NULL, 0));
    WAIT_FOR(!rs_exists(&srv, "short"), 2000);
    redmutex_state st;
    CHECK_OK(redmutex_lock_state(&st, l, NULL));
    CHECK(st == REDMUTEX_STATE_LOST);
    int64_t validity = 1;
    CHECK_OK(redmutex_lock_validity(&validity, l, NULL));
    CHECK(validity == 0);
    /* Acquiring again before releasing the lost hold is refused at once (not a wait). */
    CHECK_RC(redmutex_lock_acquire(l, NULL, REDMUTEX_WAIT_FOREVER), REDMUTEX_ELOST);
    CHECK_RC(redmutex_lock_release(l, NULL), REDMUTEX_ELOST);
    CHECK(strstr(redmutex_last_error(), "lost"));
    CHECK_OK(redmutex_lock_acquire(l, NULL, 0));
    CHECK_OK(redmutex_lock_release(l, NULL));
    redmutex_lock_free(l);
    redmutex_client_close(c);
    redmutex_client_free(c);
}

/* ---- waiting -------------------------------------------------------------- */

typedef struct waiter_arg {
    redmutex_lock *l;
    int64_t wait_ms;
    int rc;
    int64_t acquired_at_us;
} waiter_arg;

static void *waiter_thread(void *p)
{
    waiter_arg *a = p;
    a->rc = redmutex_lock_acquire(a->l, "waiter", a->wait_ms);
    a->acquired_at_us = rt_now_us();
    return NULL;
}

static void test_waiter_wakes_on_release_well_before_ttl(void)
{
    rs_start(&srv, NULL);
    redmutex_client *c = rt_client(&srv, 0);
    redmutex_lock *holder = new_lock(c, "wake", 20000), *waiter = new_lock(c, "wake", 20000);
    CHECK_OK(redmutex_lock_acquire(holder, NULL, 0));
    waiter_arg a = {waiter, 15000, 99, 0};
    pthread_t t;
    pthread_create(&t, NULL, waiter_thread, &a);
    /* Let the waiter subscribe: it shows up as a subscriber of the channel. */
    WAIT_FOR(rs_numsub(&srv, "redisson_lock__channel:{wake}") == 1, 5000);
    rt_sleep_ms(50);
    int64_t released_at = rt_now_us();
    CHECK_OK(redmutex_lock_release(holder, NULL));
    pthread_join(t, NULL);
    CHECK_OK(a.rc);
    int64_t latency_ms = (a.acquired_at_us - released_at) / 1000;
    /* The holder's TTL was 20 s and the backoff cap is 1 s: only the release message explains this. */
    CHECKF(latency_ms < 500, "waiter took %lld ms after the release", (long long)latency_ms);
    printf("     wake-up after release: %lld us\n", (long long)(a.acquired_at_us - released_at));
    CHECK_OK(redmutex_lock_release(waiter, "waiter"));
    redmutex_lock_free(holder);
    redmutex_lock_free(waiter);
    redmutex_client_close(c);
    redmutex_client_free(c);
}

static void test_waiter_of_silent_holder_retries_within_backoff_cap(void)
{
    /* A redis-py holder never publishes: the waiter must notice within the cap. */
    rs_start(&srv, NULL);
    redmutex_client_options o = REDMUTEX_CLIENT_OPTIONS_INIT;
    o.wait_backoff_cap_ms = 200;
    redmutex_client *c;
    const char *url = srv.url;
    CHECK_OK(redmutex_client_new(&c, &url, 1, &o));
    redmutex_lock *l = new_lock(c, "silent", 5000);
    redisReply *r = rs_cmd(&srv, "SET silent pyholder NX");
    freeReplyObject(r);
    waiter_arg a = {l, 10000, 99, 0};
    pthread_t t;
    pthread_create(&t, NULL, waiter_thread, &a);
    rt_sleep_ms(2000); /* an uncapped backoff would be 0.8 s or more by now */
    int64_t deleted_at = rt_now_us();
    CHECK(rs_int(&srv, "DEL silent") == 1); /* what redis-py's release does: no PUBLISH */
    pthread_join(t, NULL);
    CHECK_OK(a.rc);
    int64_t latency_ms = (a.acquired_at_us - deleted_at) / 1000;
    CHECKF(latency_ms <= 200 + rt_scaled_ms(200), "waiter took %lld ms with a 200 ms cap", (long long)latency_ms);
    redmutex_lock_free(l);
    redmutex_client_close(c);
    redmutex_client_free(c);
}

static void test_waiter_retries_when_holder_ttl_ends(void)
{
    rs_start(&srv, NULL);
    redmutex_client_options o = REDMUTEX_CLIENT_OPTIONS_INIT;
    o.wait_backoff_cap_ms = 5000; /* so only the TTL hint can explain a prompt retry */
    redmutex_client *c;
    const char *url = srv.url;
    CHECK_OK(redmutex_client_new(&c, &url, 1, &o));
    redmutex_lock *l = new_lock(c, "ttl", 5000);
    redisReply *r = rs_cmd(&srv, "SET ttl crashed NX PX 700");
    freeReplyObject(r);
    int64_t t0 = rt_now_ms();
    CHECK_OK(redmutex_lock_acquire(l, NULL, 4000));
    int64_t waited = rt_now_ms() - t0;
    CHECKF(waited >= 600 && waited < 700 + rt_scaled_ms(300), "acquired after %lld ms, holder TTL was 700 ms",
           (long long)waited);
    CHECK_OK(redmutex_lock_release(l, NULL));
    redmutex_lock_free(l);
    redmutex_client_close(c);
    redmutex_client_free(c);
}

static atomic_int stop_waiting;

static int interrupt_cb(void *payload)
{
    (void)payload;
    return atomic_load(&stop_waiting);
}

static void on_usr1(int sig) { (void)sig; }

static void test_interrupt_callback_ends_a_wait_promptly(void)
{
    rs_start(&srv, NULL);
    /* A signal handler without SA_RESTART, as Python installs for SIGINT. */
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_usr1;
    sigaction(SIGUSR1, &sa, NULL);
    redmutex_client_options o = REDMUTEX_CLIENT_OPTIONS_INIT;
    o.wait_backoff_cap_ms = 5000; /* so only the signal explains a prompt return */
    o.interrupt = interrupt_cb;
    const char *url = srv.url;
    redmutex_client *c;
    CHECK_OK(redmutex_client_new(&c, &url, 1, &o));
    redmutex_lock *holder = new_lock(c, "intr", 60000), *waiter = new_lock(c, "intr", 60000);
    CHECK_OK(redmutex_lock_acquire(holder, NULL, 0));
    for (int round = 0; round < 2; round++) {
        atomic_store(&stop_waiting, 0);
        waiter_arg a = {waiter, REDMUTEX_WAIT_FOREVER, 99, 0};
        pthread_t t;
        pthread_create(&t, NULL, waiter_thread, &a);
        rt_sleep_ms(round == 0 ? 200 : 5); /* round 1: the signal may land mid-request */
        atomic_store(&stop_waiting, 1);
        int64_t t0 = rt_now_us();
        pthread_kill(t, SIGUSR1);
        pthread_join(t, NULL);
        int64_t took_ms = (a.acquired_at_us - t0) / 1000;
        CHECK_RC(a.rc, REDMUTEX_EINTR);
        CHECKF(took_ms < 1000, "the wait ended %lld ms after the signal", (long long)took_ms);
    }
    int owned = 1;
    CHECK_OK(redmutex_lock_is_owned(&owned, waiter, "waiter"));
    CHECK(!owned);
    CHECK_OK(redmutex_lock_release(holder, NULL));
    redmutex_lock_free(holder);
    redmutex_lock_free(waiter);
    redmutex_client_close(c);
    redmutex_client_free(c);
    signal(SIGUSR1, SIG_DFL);
}

static void test_client_freed_under_a_waiting_thread(void)
{
    /* Not allowed by the contract, but it must end the wait cleanly, not corrupt memory. */
    rs_start(&srv, NULL);
    redmutex_client *a = rt_client(&srv, 0), *b = rt_client(&srv, 0);
    redmutex_lock *held = new_lock(b, "freed", 10000), *waiter = new_lock(a, "freed", 10000);
    CHECK_OK(redmutex_lock_acquire(held, NULL, 0));
    waiter_arg w = {waiter, 3000, 99, 0};
    pthread_t t;
    pthread_create(&t, NULL, waiter_thread, &w);
    rt_sleep_ms(300);
    int64_t t0 = rt_now_us();
    redmutex_client_close(a);
    redmutex_client_free(a);
    pthread_join(t, NULL);
    CHECK_RC(w.rc, REDMUTEX_ECLOSED);
    CHECKF((w.acquired_at_us - t0) / 1000 < 1500, "the waiter ended %lld ms after free",
           (long long)((w.acquired_at_us - t0) / 1000));
    redmutex_lock_free(waiter);
    CHECK_OK(redmutex_lock_release(held, NULL));
    redmutex_lock_free(held);
    redmutex_client_close(b);
    redmutex_client_free(b);
}

static void test_sigkilled_holder_frees_lock_after_ttl(void)
{
    rs_start(&srv, NULL);
    pid_t pid = fork();
    if (pid == 0) {
        redmutex_client *c = rt_client(&srv, 0);
        redmutex_lock *l = new_lock(c, "crash", rt_scaled_ms(800));
        if (redmutex_lock_acquire(l, NULL, 0) != 0)
            _exit(2);
        for (;;)
            pause();
    }
    WAIT_FOR(rs_exists(&srv, "crash"), 5000);
    int64_t held_at = rt_now_ms();
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    redmutex_client *c = rt_client(&srv, 0);
    redmutex_lock *l = new_lock(c, "crash", 5000);
    CHECK_RC(redmutex_lock_acquire(l, NULL, 0), REDMUTEX_ETIMEDOUT);
    CHECK_OK(redmutex_lock_acquire(l, NULL, rt_scaled_ms(3000)));
    int64_t after = rt_now_ms() - held_at;
    CHECKF(after < rt_scaled_ms(1500), "took %lld ms to get a lock whose holder died with 800 ms left",
           (long long)after);
    CHECK_OK(redmutex_lock_release(l, NULL));
    redmutex_lock_free(l);
    redmutex_client_close(c);
    redmutex_client_free(c);
}

/* ---- server behaviour ------------------------------------------------------- */

static void test_noscript_falls_back_to_eval(void)
{
    rs_start(&srv, NULL);
    redmutex_client *c = rt_client(&srv, 0);
    redmutex_lock *l = new_lock(c, "flush", 5000);
    CHECK_OK(redmutex_lock_acquire(l, NULL, 0));
    redisReply *r = rs_cmd(&srv, "SCRIPT FLUSH");
    freeReplyObject(r);
    /* Release is a script: after the flush EVALSHA says NOSCRIPT, EVAL must follow. */
    CHECK_OK(redmutex_lock_release(l, NULL));
    CHECK(!rs_exists(&srv, "flush"));
    r = rs_cmd(&srv, "SCRIPT FLUSH");
    freeReplyObject(r);
    int locked = 1;
    CHECK_OK(redmutex_lock_is_locked(&locked, l));
    CHECK(locked == 0);
    redmutex_lock_free(l);
    redmutex_client_close(c);
    redmutex_client_free(c);
}

static void test_wrongtype_key_is_refused_and_untouched(void)
{
    rs_start(&srv, NULL);
    redmutex_client *c = rt_client(&srv, 0);
    redmutex_lock *l = new_lock(c, "ahash", 5000);
    CHECK(rs_int(&srv, "HSET ahash field 1") == 1);
    CHECK_RC(redmutex_lock_acquire(l, NULL, 0), REDMUTEX_EWRONGTYPE);
    CHECK_RC(redmutex_lock_acquire(l, NULL, 200), REDMUTEX_EWRONGTYPE);
    CHECK_RC(redmutex_lock_release(l, "someone"), REDMUTEX_EWRONGTYPE);
    CHECK_RC(redmutex_lock_extend(l, "someone", 100, REDMUTEX_EXTEND_ADD), REDMUTEX_EWRONGTYPE);
    int locked;
    CHECK_RC(redmutex_lock_is_locked(&locked, l), REDMUTEX_EWRONGTYPE);
    CHECK_RC(redmutex_lock_force_release(NULL, l), REDMUTEX_EWRONGTYPE);
    CHECK(rs_int(&srv, "HGET ahash field") == -999); /* still a hash: HGET gives a string */
    redisReply *r = rs_cmd(&srv, "HGET ahash field");
    CHECK(r && r->type == REDIS_REPLY_STRING && strcmp(r->str, "1") == 0);
    freeReplyObject(r);
    CHECK(rs_int(&srv, "PTTL ahash") == -1);
    redmutex_lock_free(l);
    redmutex_client_close(c);
    redmutex_client_free(c);
}

static void test_force_release_deletes_and_publishes(void)
{
    rs_start(&srv, NULL);
    redmutex_client *c = rt_client(&srv, 0);
    redmutex_lock *a = new_lock(c, "force", 20000), *b = new_lock(c, "force", 20000);
    CHECK_OK(redmutex_lock_acquire(a, NULL, 0));
    waiter_arg w = {b, 10000, 99, 0};
    pthread_t t;
    pthread_create(&t, NULL, waiter_thread, &w);
    rt_sleep_ms(100);
    int deleted = 0;
    CHECK_OK(redmutex_lock_force_release(&deleted, b));
    CHECK(deleted == 1);
    pthread_join(t, NULL);
    CHECK_OK(w.rc);
    CHECK_OK(redmutex_lock_force_release(&deleted, b));
    CHECK(deleted == 1);
    CHECK_OK(redmutex_lock_force_release(&deleted, b));
    CHECK(deleted == 0);
    /* a's hold is gone from under it */
    CHECK_RC(redmutex_lock_release(a, NULL), REDMUTEX_ELOST);
    redmutex_lock_free(a);
    redmutex_lock_free(b);
    redmutex_client_close(c);
    redmutex_client_free(c);
}

static void test_unix_socket_acl_user_and_db(void)
{
    rs_start(&srv, "user alice on >s3cret ~* &* +@all\nuser default off\n");
    char url[512];
    snprintf(url, sizeof url, "unix://%s?db=3", srv.unix_path);
    const char *u = url;
    redmutex_client *c;
    /* The default user is off: without credentials every command is refused. */
    CHECK_OK(redmutex_client_new(&c, &u, 1, NULL));
    redmutex_lock *l = new_lock(c, "acl", 5000);
    CHECK_RC(redmutex_lock_acquire(l, NULL, 0), REDMUTEX_EAUTH);
    redmutex_lock_free(l);
    redmutex_client_close(c);
    redmutex_client_free(c);

    snprintf(url, sizeof url, "redis://alice:wrong@127.0.0.1:%d/2", srv.port);
    CHECK_OK(redmutex_client_new(&c, &u, 1, NULL));
    l = new_lock(c, "acl", 5000);
    CHECK_RC(redmutex_lock_acquire(l, NULL, 0), REDMUTEX_EAUTH);
    CHECK(strstr(redmutex_last_error(), "wrong") == NULL); /* never the password */
    CHECK(strstr(redmutex_last_error(), "***"));
    redmutex_lock_free(l);
    redmutex_client_close(c);
    redmutex_client_free(c);

    snprintf(url, sizeof url, "redis://alice:s3cret@127.0.0.1:%d/2", srv.port);
    CHECK_OK(redmutex_client_new(&c, &u, 1, NULL));
    l = new_lock(c, "acl", 5000);
    CHECK_OK(redmutex_lock_acquire(l, NULL, 0));
    redisReply *r = rs_cmd(&srv, "AUTH alice s3cret");
    freeReplyObject(r);
    /* rs_cmd opens a new connection per call: check db 2 through a MULTI-free path */
    redisContext *ctx = redisConnect("127.0.0.1", srv.port);
    r = redisCommand(ctx, "AUTH alice s3cret");
    freeReplyObject(r);
    r = redisCommand(ctx, "SELECT 2");
    freeReplyObject(r);
    r = redisCommand(ctx, "EXISTS acl");
    CHECK(r && r->integer == 1);
    freeReplyObject(r);
    redisFree(ctx);
    CHECK_OK(redmutex_lock_release(l, NULL));
    redmutex_lock_free(l);
    redmutex_client_close(c);
    redmutex_client_free(c);

    /* Unix socket with credentials in the ACL-less form is covered by a second server. */
    rs_server plain;
    rs_start(&plain, NULL);
    snprintf(url, sizeof url, "unix://%s?db=1", plain.unix_path);
    CHECK_OK(redmutex_client_new(&c, &u, 1, NULL));
    l = new_lock(c, "sock", 5000);
    CHECK_OK(redmutex_lock_acquire(l, NULL, 0));
    CHECK_OK(redmutex_lock_release(l, NULL));
    redmutex_lock_free(l);
    redmutex_client_close(c);
    redmutex_client_free(c);
    rs_stop(&plain);
}

static void test_dropped_connection_reconnects_on_next_call(void)
{
    rs_start(&srv, NULL);
    redmutex_client *c = rt_client(&srv, 500);
    redmutex_lock *l = new_lock(c, "drop", 5000);
    CHECK_OK(redmutex_lock_acquire(l, NULL, 0));
    /* The server drops every client connection: the pooled one is dead. */
    redisReply *r = rs_cmd(&srv, "CLIENT KILL TYPE normal");
    freeReplyObject(r);
    CHECK_OK(redmutex_lock_release(l, NULL));
    CHECK(!rs_exists(&srv, "drop"));
    /* A server that goes away: a clear error within the timeout, then recovery. */
    rs_kill(&srv);
    int64_t t0 = rt_now_ms();
    CHECK_RC(redmutex_lock_acquire(l, NULL, 0), REDMUTEX_ECONN);
    CHECK(rt_now_ms() - t0 < 1000);
    rs_restart(&srv);
    CHECK_OK(redmutex_lock_acquire(l, NULL, 0));
    CHECK_OK(redmutex_lock_release(l, NULL));
    redmutex_lock_free(l);
    redmutex_client_close(c);
    redmutex_client_free(c);
}

static void test_dropped_connection_mid_call_does_not_hang(void)
{
    /* The server stops answering in the middle of a call (SIGSTOP), then dies. */
    rs_start(&srv, NULL);
    redmutex_client *c = rt_client(&srv, 300);
    redmutex_lock *l = new_lock(c, "mid", 5000);
    CHECK_OK(redmutex_lock_acquire(l, NULL, 0));
    rs_pause(&srv);
    int64_t t0 = rt_now_ms();
    CHECK_RC(redmutex_lock_release(l, NULL), REDMUTEX_ECONN);
    int64_t took = rt_now_ms() - t0;
    CHECKF(took >= 250 && took < 1000, "release took %lld ms with a 300 ms timeout", (long long)took);
    /* The outcome was unknown, so the hold is kept for a retry. */
    redmutex_state st;
    CHECK_OK(redmutex_lock_state(&st, l, NULL));
    CHECK(st == REDMUTEX_STATE_HELD);
    rs_resume(&srv);
    /* The first release went through after the resume; the retry reports success (unlock latch). */
    WAIT_FOR(!rs_exists(&srv, "mid"), 2000);
    CHECK_OK(redmutex_lock_release(l, NULL));
    CHECK_OK(redmutex_lock_state(&st, l, NULL));
    CHECK(st == REDMUTEX_STATE_UNLOCKED);
    redmutex_lock_free(l);
    redmutex_client_close(c);
    redmutex_client_free(c);
}

static void test_fencing_tokens_increase(void)
{
    rs_start(&srv, NULL);
    redmutex_client *c = rt_client(&srv, 0);
    redmutex_lock_options o = REDMUTEX_LOCK_OPTIONS_INIT;
    o.lease_ms = 5000;
    o.flags = REDMUTEX_LOCK_FENCING;
    redmutex_lock *l;
    CHECK_OK(redmutex_lock_new(&l, c, "fenced", REDMUTEX_KIND_LOCK, &o));
    int64_t last = 0, fence = 0;
    for (int i = 0; i < 5; i++) {
        CHECK_OK(redmutex_lock_acquire(l, NULL, 0));
        CHECK_OK(redmutex_lock_fence(&fence, l, NULL));
        CHECK(fence > last);
        last = fence;
        CHECK_OK(redmutex_lock_release(l, NULL));
    }
    CHECK(rs_int(&srv, "GET redisson_lock_token:{fenced}") == -999);
    redisReply *r = rs_cmd(&srv, "GET redisson_lock_token:{fenced}");
    CHECK(r && r->type == REDIS_REPLY_STRING && atoll(r->str) == last);
    freeReplyObject(r);
    CHECK_RC(redmutex_lock_fence(&fence, l, NULL), REDMUTEX_ENOTOWNER);
    redmutex_lock_free(l);
    redmutex_client_close(c);
    redmutex_client_free(c);
}

int main(int argc, char **argv)
{
    static const rt_test tests[] = {
        {"acquire_release_sets_and_deletes_key", test_acquire_release_sets_and_deletes_key},
        {"second_acquire_of_plain_lock_times_out", test_second_acquire_of_plain_lock_times_out},
        {"raw_set_nx_holder_excludes_and_is_excluded", test_raw_set_nx_holder_excludes_and_is_excluded},
        {"release_by_non_owner_refused_and_lock_intact", test_release_by_non_owner_refused_and_lock_intact},
        {"extend_adds_or_replaces_ttl", test_extend_adds_or_replaces_ttl},
        {"extension_cap", test_extension_cap},
        {"expired_lease_is_reported_lost", test_expired_lease_is_reported_lost},
        {"waiter_wakes_on_release_well_before_ttl", test_waiter_wakes_on_release_well_before_ttl},
        {"waiter_of_silent_holder_retries_within_backoff_cap", test_waiter_of_silent_holder_retries_within_backoff_cap},
        {"waiter_retries_when_holder_ttl_ends", test_waiter_retries_when_holder_ttl_ends},
        {"sigkilled_holder_frees_lock_after_ttl", test_sigkilled_holder_frees_lock_after_ttl},
        {"interrupt_callback_ends_a_wait_promptly", test_interrupt_callback_ends_a_wait_promptly},
        {"client_freed_under_a_waiting_thread", test_client_freed_under_a_waiting_thread},
        {"noscript_falls_back_to_eval", test_noscript_falls_back_to_eval},
        {"wrongtype_key_is_refused_and_untouched", test_wrongtype_key_is_refused_and_untouched},
        {"force_release_deletes_and_publishes", test_force_release_deletes_and_publishes},
        {"unix_socket_acl_user_and_db", test_unix_socket_acl_user_and_db},
        {"dropped_connection_reconnects_on_next_call", test_dropped_connection_reconnects_on_next_call},
        {"dropped_connection_mid_call_does_not_hang", test_dropped_connection_mid_call_does_not_hang},
        {"fencing_tokens_increase", test_fencing_tokens_increase},
    };
    return rt_run(tests, sizeof tests / sizeof tests[0], argc, argv);
}
