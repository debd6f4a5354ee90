/*
 * Count-down latches (redmutex_latch_*) in Redisson's RCountDownLatch format,
 * against real redis-servers: the keys and messages, waiters woken by a
 * count down from anyone (Redisson's own script run raw stands in for a Java
 * service here; tests/python/test_interop_redisson.py runs the real one),
 * bounded and interruptible waits, pollable waits, bad input, Redlock.
 */
#define _GNU_SOURCE
#include "cluster.h"
#include "harness.h"

#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

static rs_server srv;
static rs_server servers[3];
static rc_cluster cl;

/* Redisson 3.27.2's countDown script, as a Java service runs it. */
#define REDISSON_COUNT_DOWN                                                                                            \
    "local v = redis.call('decr', KEYS[1]);if v <= 0 then redis.call('del', KEYS[1]) end;if v == 0 then "              \
    "redis.call(ARGV[2], KEYS[2], ARGV[1]) end;"

static redmutex_client *latch_client(const rs_server *s, int64_t backoff_cap_ms)
{
    redmutex_client_options o = REDMUTEX_CLIENT_OPTIONS_INIT;
    o.wait_backoff_cap_ms = backoff_cap_ms;
    o.command_timeout_ms = rt_scaled_ms(1000);
    const char *url = s->url;
    redmutex_client *c = NULL;
    CHECK_OK(redmutex_client_new(&c, &url, 1, &o));
    return c;
}

static void done(redmutex_client *c)
{
    redmutex_client_close(c);
    redmutex_client_free(c);
}

static void test_a_latch_is_kept_in_redissons_key_and_channel(void)
{
    rs_start(&srv, NULL);
    redmutex_client *c = latch_client(&srv, 1000);
    redmutex_latch *l;
    CHECK_OK(redmutex_latch_new(&l, c, "gate"));
    redisContext *sub = redisConnect("127.0.0.1", srv.port);
    CHECK(sub && !sub->err);
    freeReplyObject(redisCommand(sub, "SUBSCRIBE redisson_countdownlatch__channel__{gate}"));
    int set = -1;
    CHECK_OK(redmutex_latch_try_set_count(&set, l, 2));
    CHECK(set == 1);
    CHECK(rs_num(&srv, "GET gate") == 2);
    CHECK_OK(redmutex_latch_try_set_count(&set, l, 5));
    CHECK(set == 0 && rs_num(&srv, "GET gate") == 2);
    int64_t n = -1;
    CHECK_OK(redmutex_latch_count(&n, l));
    CHECK(n == 2);
    CHECK_OK(redmutex_latch_count_down(l));
    CHECK_OK(redmutex_latch_count(&n, l));
    CHECK(n == 1);
    CHECK_OK(redmutex_latch_count_down(l));
    CHECK(!rs_exists(&srv, "gate"));
    CHECK_OK(redmutex_latch_count(&n, l));
    CHECK(n == 0);
    /* Counting down an open latch leaves nothing behind. */
    CHECK_OK(redmutex_latch_count_down(l));
    CHECK(!rs_exists(&srv, "gate"));
    /* Messages: "1" for the new count, "0" when it reached zero. */
    const char *want[] = {"1", "0"};
    for (int i = 0; i < 2; i++) {
        redisReply *r = NULL;
        CHECK(redisGetReply(sub, (void **)&r) == REDIS_OK && r && r->type == REDIS_REPLY_ARRAY);
        CHECKF(strcmp(r->element[2]->str, want[i]) == 0, "message %d is '%s'", i, r->element[2]->str);
        freeReplyObject(r);
    }
    redisFree(sub);
    redmutex_latch_free(l);
    done(c);
    rs_stop(&srv);
}

typedef struct waiter {
    redmutex_latch *l;
    int64_t wait_ms;
    int rc;
    _Atomic int64_t done_ms;
} waiter;

static void *waiter_main(void *p)
{
    waiter *w = p;
    w->rc = redmutex_latch_wait(w->l, w->wait_ms);
    atomic_store(&w->done_ms, rt_now_ms());
    return NULL;
}

static void test_a_count_down_by_another_service_releases_every_waiter(void)
{
    rs_start(&srv, NULL);
    /* A long backoff cap: only the "0" message can end the waits soon. */
    redmutex_client *c = latch_client(&srv, 20000);
    redmutex_latch *l;
    CHECK_OK(redmutex_latch_new(&l, c, "start"));
    CHECK_OK(redmutex_latch_try_set_count(NULL, l, 1));
    enum { WAITERS = 4 };
    waiter w[WAITERS];
    pthread_t t[WAITERS];
    for (int i = 0; i < WAITERS; i++) {
        w[i] = (waiter){l, rt_scaled_ms(30000), -99, 0};
        pthread_create(&t[i], NULL, waiter_main, &w[i]);
    }
    WAIT_FOR(rs_numsub(&srv, "redisson_countdownlatch__channel__{start}") == 1, 5000);
    /* Every waiter past its first looks, its backoff grown past a second:
       only the message can end its wait within the bound below. */
    rt_sleep_ms(2500);
    int64_t t0 = rt_now_ms();
    freeReplyObject(
        rs_cmd(&srv, "EVAL %s 2 start redisson_countdownlatch__channel__{start} 0 publish", REDISSON_COUNT_DOWN));
    for (int i = 0; i < WAITERS; i++) {
        pthread_join(t[i], NULL);
        CHECK_OK(w[i].rc);
        int64_t took = atomic_load(&w[i].done_ms) - t0;
        CHECKF(took < rt_scaled_ms(700), "waiter %d ended %lld ms after the count down", i, (long long)took);
    }
    redmutex_latch_free(l);
    done(c);
    rs_stop(&srv);
}

static void test_a_wait_is_bounded_and_an_open_latch_returns_at_once(void)
{
    rs_start(&srv, NULL);
    redmutex_client *c = latch_client(&srv, 1000);
    redmutex_latch *l;
    CHECK_OK(redmutex_latch_new(&l, c, "bounded"));
    CHECK_OK(redmutex_latch_wait(l, 0)); /* never set: open */
    CHECK_OK(redmutex_latch_try_set_count(NULL, l, 3));
    CHECK_RC(redmutex_latch_wait(l, 0), REDMUTEX_ETIMEDOUT);
    int64_t t0 = rt_now_ms();
    CHECK_RC(redmutex_latch_wait(l, 400), REDMUTEX_ETIMEDOUT);
    int64_t took = rt_now_ms() - t0;
    CHECKF(took >= 400 && took < rt_scaled_ms(2000), "a 400 ms wait took %lld ms", (long long)took);
    CHECKF(strstr(redmutex_last_error(), "latch 'bounded' is at 3"), "%s", redmutex_last_error());
    CHECK(rs_num(&srv, "GET bounded") == 3);
    redmutex_latch_free(l);
    done(c);
    rs_stop(&srv);
}

static void test_interrupt_ends_a_latch_wait(void)
{
    rs_start(&srv, NULL);
    redmutex_client *c = latch_client(&srv, 20000);
    redmutex_latch *l;
    CHECK_OK(redmutex_latch_new(&l, c, "never"));
    CHECK_OK(redmutex_latch_try_set_count(NULL, l, 1));
    waiter w = {l, REDMUTEX_WAIT_FOREVER, -99, 0};
    pthread_t t;
    pthread_create(&t, NULL, waiter_main, &w);
    WAIT_FOR(rs_numsub(&srv, "redisson_countdownlatch__channel__{never}") == 1, 5000);
    int64_t t0 = rt_now_ms();
    redmutex_client_interrupt(c);
    pthread_join(t, NULL);
    CHECK(w.rc == REDMUTEX_EINTR);
    CHECK(atomic_load(&w.done_ms) - t0 < rt_scaled_ms(1000));
    redmutex_latch_free(l);
    done(c);
    rs_stop(&srv);
}

/* Polls the client's wait fd until `w` is reported ready (a stale timer may
   make the fd readable with nothing ready: look again); fails after ms. */
static void await_ready(redmutex_client *c, redmutex_wait *w, int64_t ms)
{
    int fd = redmutex_client_wait_fd(c);
    CHECK(fd >= 0);
    int64_t deadline = rt_now_ms() + rt_scaled_ms(ms);
    for (;;) {
        uint64_t id;
        int rc;
        while ((rc = redmutex_client_next_ready(c, &id)) == 1)
            if (id == redmutex_wait_id(w))
                return;
        CHECK_RC(rc, 0);
        int64_t left = deadline - rt_now_ms();
        CHECKF(left > 0, "wait %llu not ready within %lld ms", (unsigned long long)redmutex_wait_id(w), (long long)ms);
        struct pollfd p = {fd, POLLIN, 0};
        poll(&p, 1, (int)left);
    }
}

static void test_a_pollable_wait_is_ready_when_the_count_reaches_zero(void)
{
    rs_start(&srv, NULL);
    redmutex_client *c = latch_client(&srv, 20000);
    redmutex_latch *l;
    CHECK_OK(redmutex_latch_new(&l, c, "poll"));
    CHECK_OK(redmutex_latch_try_set_count(NULL, l, 1));
    redmutex_wait *w;
    CHECK_OK(redmutex_latch_wait_new(&w, l));
    CHECK(redmutex_wait_id(w) > 0);
    CHECK_RC(redmutex_wait_try(w), REDMUTEX_ETIMEDOUT);
    /* Ready once subscribed (a second look closes the gap), still not zero. */
    await_ready(c, w, 5000);
    CHECK_RC(redmutex_wait_try(w), REDMUTEX_ETIMEDOUT);
    redmutex_latch *other;
    CHECK_OK(redmutex_latch_new(&other, c, "poll"));
    CHECK_OK(redmutex_latch_count_down(other));
    await_ready(c, w, 2000);
    CHECK_OK(redmutex_wait_try(w));
    CHECK_RC(redmutex_wait_try(w), REDMUTEX_EINVAL);
    redmutex_wait_free(w);
    redmutex_latch_free(other);
    redmutex_latch_free(l);
    done(c);
    rs_stop(&srv);
}

static void test_bad_input_is_refused_and_changes_nothing(void)
{
    rs_start(&srv, NULL);
    redmutex_client *c = latch_client(&srv, 1000);
    redmutex_latch *l;
    CHECK_RC(redmutex_latch_new(&l, c, ""), REDMUTEX_EINVAL);
    CHECK_RC(redmutex_latch_new(&l, NULL, "x"), REDMUTEX_EINVAL);
    CHECK_RC(redmutex_latch_new(NULL, c, "x"), REDMUTEX_EINVAL);
    CHECK_OK(redmutex_latch_new(&l, c, "bad"));
    CHECK_RC(redmutex_latch_try_set_count(NULL, l, 0), REDMUTEX_EINVAL);
    CHECK_RC(redmutex_latch_try_set_count(NULL, l, -4), REDMUTEX_EINVAL);
    CHECK_RC(redmutex_latch_wait(l, -2), REDMUTEX_EINVAL);
    CHECK_RC(redmutex_latch_wait(NULL, 0), REDMUTEX_EINVAL);
    CHECK_RC(redmutex_latch_count(NULL, l), REDMUTEX_EINVAL);
    CHECK_RC(redmutex_latch_count_down(NULL), REDMUTEX_EINVAL);
    CHECK(rs_count_keys(&srv, "*") == 0);
    freeReplyObject(rs_cmd(&srv, "HSET bad f 1"));
    CHECK_RC(redmutex_latch_count_down(l), REDMUTEX_EWRONGTYPE);
    CHECK_RC(redmutex_latch_try_set_count(NULL, l, 2), REDMUTEX_EWRONGTYPE);
    int64_t n;
    CHECK_RC(redmutex_latch_count(&n, l), REDMUTEX_EWRONGTYPE);
    freeReplyObject(rs_cmd(&srv, "DEL bad"));
    freeReplyObject(rs_cmd(&srv, "SET bad hello"));
    CHECK_RC(redmutex_latch_count_down(l), REDMUTEX_EWRONGTYPE);
    CHECK_RC(redmutex_latch_wait(l, 0), REDMUTEX_EWRONGTYPE);
    redisReply *r = rs_cmd(&srv, "GET bad");
    CHECK(r && r->type == REDIS_REPLY_STRING && strcmp(r->str, "hello") == 0);
    freeReplyObject(r);
    redmutex_latch_free(l);
    redmutex_latch_free(NULL);
    done(c);
    rs_stop(&srv);
}

static void test_redlock_latch_counts_with_a_majority(void)
{
    for (int i = 0; i < 3; i++)
        rs_start(&servers[i], NULL);
    const char *urls[3] = {servers[0].url, servers[1].url, servers[2].url};
    redmutex_client_options o = REDMUTEX_CLIENT_OPTIONS_INIT;
    o.command_timeout_ms = rt_scaled_ms(300);
    o.connect_timeout_ms = rt_scaled_ms(300);
    redmutex_client *c;
    CHECK_OK(redmutex_client_new(&c, urls, 3, &o));
    redmutex_latch *l;
    CHECK_OK(redmutex_latch_new(&l, c, "red"));
    int set = 0;
    CHECK_OK(redmutex_latch_try_set_count(&set, l, 2));
    CHECK(set == 1);
    for (int i = 0; i < 3; i++)
        CHECK(rs_num(&servers[i], "GET red") == 2);
    rs_kill(&servers[2]);
    CHECK_OK(redmutex_latch_count_down(l));
    int64_t n;
    CHECK_OK(redmutex_latch_count(&n, l));
    CHECK(n == 1);
    CHECK_RC(redmutex_latch_wait(l, 0), REDMUTEX_ETIMEDOUT);
    CHECK_OK(redmutex_latch_count_down(l));
    CHECK_OK(redmutex_latch_wait(l, 0));
    rs_kill(&servers[1]);
    int rc = redmutex_latch_count(&n, l);
    CHECKF(rc == REDMUTEX_ECONN, "count with 1 of 3 servers returned %d", rc);
    redmutex_latch_free(l);
    done(c);
    for (int i = 0; i < 3; i++)
        rs_stop(&servers[i]);
}

static void test_a_latch_on_a_cluster_wakes_its_waiter_by_the_sharded_message(void)
{
    rc_start(&cl, 3, 0, NULL);
    const char *url = cl.url;
    redmutex_client_options o = REDMUTEX_CLIENT_OPTIONS_INIT;
    o.wait_backoff_cap_ms = 20000; /* only the message ends the wait soon */
    o.command_timeout_ms = rt_scaled_ms(1000);
    redmutex_client *c;
    CHECK_OK(redmutex_client_new(&c, &url, 1, &o));
    redmutex_latch *l, *braces;
    CHECK_OK(redmutex_latch_new(&l, c, "cl:start"));
    CHECK_OK(redmutex_latch_try_set_count(NULL, l, 1));
    char key[] = "cl:start";
    rs_server *owner = rc_owner(&cl, rc_keyslot(&cl, key, strlen(key)));
    CHECK(rs_num(owner, "GET cl:start") == 1);
    waiter w = {l, rt_scaled_ms(30000), -99, 0};
    pthread_t t;
    pthread_create(&t, NULL, waiter_main, &w);
    rt_sleep_ms(2500); /* subscribed, and past the first backoffs */
    int64_t t0 = rt_now_ms();
    redmutex_latch *other;
    CHECK_OK(redmutex_latch_new(&other, c, "cl:start"));
    CHECK_OK(redmutex_latch_count_down(other));
    pthread_join(t, NULL);
    CHECK_OK(w.rc);
    CHECKF(atomic_load(&w.done_ms) - t0 < rt_scaled_ms(700), "the waiter ended %lld ms after the count down",
           (long long)(atomic_load(&w.done_ms) - t0));
    /* A name with a brace would put Redisson's channel in another slot. */
    CHECK_OK(redmutex_latch_new(&braces, c, "{cl}:gate"));
    CHECK_RC(redmutex_latch_try_set_count(NULL, braces, 1), REDMUTEX_EINVAL);
    CHECK(rc_errorstat_all(&cl, "CROSSSLOT") == 0);
    redmutex_latch_free(braces);
    /* Also as the first call of a client, before it knows the cluster: the
       cluster refuses the script (CROSSSLOT), which changed nothing. */
    redmutex_client *fresh;
    CHECK_OK(redmutex_client_new(&fresh, &url, 1, &o));
    CHECK_OK(redmutex_latch_new(&braces, fresh, "{cl}:gate"));
    CHECK_RC(redmutex_latch_try_set_count(NULL, braces, 1), REDMUTEX_EINVAL);
    CHECKF(strstr(redmutex_last_error(), "cannot hold") != NULL, "%s", redmutex_last_error());
    CHECK(rs_num(rc_owner(&cl, rc_keyslot(&cl, "cl", 2)), "EXISTS {cl}:gate") == 0);
    CHECK_RC(redmutex_latch_try_set_count(NULL, braces, 1), REDMUTEX_EINVAL);
    redmutex_latch_free(braces);
    done(fresh);
    redmutex_latch_free(other);
    redmutex_latch_free(l);
    done(c);
}

int main(int argc, char **argv)
{
    static const rt_test tests[] = {
        {"a_latch_is_kept_in_redissons_key_and_channel", test_a_latch_is_kept_in_redissons_key_and_channel},
        {"a_count_down_by_another_service_releases_every_waiter",
         test_a_count_down_by_another_service_releases_every_waiter},
        {"a_wait_is_bounded_and_an_open_latch_returns_at_once",
         test_a_wait_is_bounded_and_an_open_latch_returns_at_once},
        {"interrupt_ends_a_latch_wait", test_interrupt_ends_a_latch_wait},
        {"a_pollable_wait_is_ready_when_the_count_reaches_zero",
         test_a_pollable_wait_is_ready_when_the_count_reaches_zero},
        {"bad_input_is_refused_and_changes_nothing", test_bad_input_is_refused_and_changes_nothing},
        {"redlock_latch_counts_with_a_majority", test_redlock_latch_counts_with_a_majority},
        {"a_latch_on_a_cluster_wakes_its_waiter_by_the_sharded_message",
         test_a_latch_on_a_cluster_wakes_its_waiter_by_the_sharded_message},
    };
    return rt_run(tests, sizeof tests / sizeof tests[0], argc, argv);
}
