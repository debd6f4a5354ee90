/* Plain locks (redis-py Lock wire format) against a real redis-server. */
#define _GNU_SOURCE
#include "harness.h"

#include <pthread.h>
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
    redmutex_client_free(c);
}

int main(int argc, char **argv)
{
    static const rt_test tests[] = {
        {"acquire_release_sets_and_deletes_key", test_acquire_release_sets_and_deletes_key},
        {"second_acquire_of_plain_lock_times_out", test_second_acquire_of_plain_lock_times_out},
    };
    return rt_run(tests, sizeof tests / sizeof tests[0], argc, argv);
}
