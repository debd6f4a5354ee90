/* Reentrant locks (Redisson RLock wire format) against a real redis-server. */
#define _GNU_SOURCE
#include "harness.h"

#include <pthread.h>
#include <string.h>
#include <unistd.h>

static rs_server srv;

static redmutex_lock *new_rlock(redmutex_client *c, const char *name, int64_t lease_ms)
{
    redmutex_lock_options o = REDMUTEX_LOCK_OPTIONS_INIT;
    o.lease_ms = lease_ms;
    redmutex_lock *l = NULL;
    CHECK_OK(redmutex_lock_new(&l, c, name, REDMUTEX_KIND_RLOCK, &o));
    return l;
}

static long long field_count(const char *key, const char *field)
{
    redisReply *r = rs_cmd(&srv, "HGET %s %s", key, field);
    long long v = r && r->type == REDIS_REPLY_STRING ? atoll(r->str) : 0;
    if (r)
        freeReplyObject(r);
    return v;
}

static void test_reentrant_counts_in_redisson_format(void)
{
    rs_start(&srv, NULL);
    redmutex_client *c = rt_client(&srv, 0);
    redmutex_lock *l = new_rlock(c, "orders:42", 30000);
    char me[128];
    CHECK_OK(redmutex_client_thread_owner(me, sizeof me, c));
    CHECK(strlen(me) > REDMUTEX_CLIENT_ID_LEN + 1 && me[REDMUTEX_CLIENT_ID_LEN] == ':');
    for (int i = 1; i <= 3; i++) {
        CHECK_OK(redmutex_lock_acquire(l, NULL, 0));
        CHECK(field_count("orders:42", me) == i);
        int64_t n = 0;
        CHECK_OK(redmutex_lock_hold_count(&n, l, NULL));
        CHECK(n == i);
    }
    CHECK(rs_int(&srv, "HLEN orders:42") == 1);
    long long pttl = rs_int(&srv, "PTTL orders:42");
    CHECK(pttl > 29000 && pttl <= 30000);
    CHECK_OK(redmutex_lock_release(l, NULL));
    CHECK(field_count("orders:42", me) == 2);
    CHECK_OK(redmutex_lock_release(l, NULL));
    CHECK_OK(redmutex_lock_release(l, NULL));
    CHECK(!rs_exists(&srv, "orders:42"));
    CHECK_RC(redmutex_lock_release(l, NULL), REDMUTEX_ENOTOWNER);
    redmutex_lock_free(l);
    redmutex_client_close(c);
    redmutex_client_free(c);
}

typedef struct other_arg {
    redmutex_lock *l;
    int rc_try, rc_release;
} other_arg;

static void *other_thread(void *p)
{
    other_arg *a = p;
    a->rc_try = redmutex_lock_acquire(a->l, NULL, 0);
    a->rc_release = redmutex_lock_release(a->l, NULL);
    return NULL;
}

static void test_other_thread_is_another_owner(void)
{
    rs_start(&srv, NULL);
    redmutex_client *c = rt_client(&srv, 0);
    redmutex_lock *l = new_rlock(c, "per-thread", 30000);
    CHECK_OK(redmutex_lock_acquire(l, NULL, 0));
    other_arg a = {l, 99, 99};
    pthread_t t;
    pthread_create(&t, NULL, other_thread, &a);
    pthread_join(t, NULL);
    CHECK_RC(a.rc_try, REDMUTEX_ETIMEDOUT);
    CHECK_RC(a.rc_release, REDMUTEX_ENOTOWNER);
    CHECK(rs_int(&srv, "HLEN per-thread") == 1);
    CHECK_OK(redmutex_lock_release(l, NULL));
    redmutex_lock_free(l);
    redmutex_client_close(c);
    redmutex_client_free(c);
}

static void test_explicit_owner_ids(void)
{
    rs_start(&srv, NULL);
    redmutex_client *c = rt_client(&srv, 0);
    redmutex_lock *l = new_rlock(c, "tasks", 30000);
    CHECK_OK(redmutex_lock_acquire(l, "task-1", 0));
    CHECK_OK(redmutex_lock_acquire(l, "task-1", 0));
    CHECK(field_count("tasks", "task-1") == 2);
    CHECK_RC(redmutex_lock_acquire(l, "task-2", 0), REDMUTEX_ETIMEDOUT);
    int owned = 0;
    CHECK_OK(redmutex_lock_is_owned(&owned, l, "task-1"));
    CHECK(owned);
    CHECK_OK(redmutex_lock_is_owned(&owned, l, "task-2"));
    CHECK(!owned);
    CHECK_OK(redmutex_lock_is_owned(&owned, l, NULL));
    CHECK(!owned);
    /* Work handed to another handle (or process) with the same owner id continues the hold. */
    redmutex_lock *other = new_rlock(c, "tasks", 30000);
    CHECK_OK(redmutex_lock_release(other, "task-1"));
    CHECK(field_count("tasks", "task-1") == 1);
    CHECK_OK(redmutex_lock_release(l, "task-1"));
    CHECK(!rs_exists(&srv, "tasks"));
    redmutex_lock_free(other);
    redmutex_lock_free(l);
    redmutex_client_close(c);
    redmutex_client_free(c);
}

static void test_redisson_holder_excludes_and_is_excluded(void)
{
    /* What Java's Redisson does for lock(): HINCRBY + PEXPIRE on the hash, field uuid:threadId. */
    rs_start(&srv, NULL);
    redmutex_client *c = rt_client(&srv, 0);
    redmutex_lock *l = new_rlock(c, "shared-r", 30000);
    const char *java = "6f9619ff-8b86-d011-b42d-00c04fc964ff:1";
    CHECK(rs_int(&srv, "HINCRBY shared-r %s 1", java) == 1);
    CHECK(rs_int(&srv, "PEXPIRE shared-r 30000") == 1);
    CHECK_RC(redmutex_lock_acquire(l, NULL, 0), REDMUTEX_ETIMEDOUT);
    int64_t ttl = 0;
    CHECK_OK(redmutex_lock_ttl(&ttl, l));
    CHECK(ttl > 29000);
    /* Java unlocks with its script: DEL + PUBLISH on the channel redmutex waits on. */
    CHECK(rs_int(&srv, "DEL shared-r") == 1);
    CHECK(rs_int(&srv, "PUBLISH redisson_lock__channel:{shared-r} 0") >= 0);
    CHECK_OK(redmutex_lock_acquire(l, NULL, 0));
    /* Now Java's tryLock script finds another owner's field and gets the PTTL back. */
    redisReply *r =
        rs_cmd(&srv, "EVAL %s 1 shared-r 30000 %s",
               "if ((redis.call('exists', KEYS[1]) == 0) or (redis.call('hexists', KEYS[1], ARGV[2]) == 1)) "
               "then redis.call('hincrby', KEYS[1], ARGV[2], 1); redis.call('pexpire', KEYS[1], ARGV[1]); "
               "return nil; end; return redis.call('pttl', KEYS[1]);",
               java);
    CHECK(r && r->type == REDIS_REPLY_INTEGER && r->integer > 29000);
    freeReplyObject(r);
    CHECK_OK(redmutex_lock_release(l, NULL));
    redmutex_lock_free(l);
    redmutex_client_close(c);
    redmutex_client_free(c);
}

static void test_unlock_latch_makes_retried_release_idempotent(void)
{
    rs_start(&srv, NULL);
    redmutex_client *c = rt_client(&srv, 300);
    redmutex_lock *l = new_rlock(c, "latch", 30000);
    CHECK_OK(redmutex_lock_acquire(l, NULL, 0));
    CHECK_OK(redmutex_lock_acquire(l, NULL, 0));
    /* The reply of the first release is lost: the server is stopped while it is in flight. */
    rs_pause(&srv);
    CHECK_RC(redmutex_lock_release(l, NULL), REDMUTEX_ECONN);
    rs_resume(&srv);
    char me[128];
    redmutex_client_thread_owner(me, sizeof me, c);
    WAIT_FOR(field_count("latch", me) == 1, 2000);
    CHECK(rs_count_keys(&srv, "redisson_unlock_latch:{latch}:*") == 1);
    /* The retry reads the latch: it reports success and does not decrement twice. */
    CHECK_OK(redmutex_lock_release(l, NULL));
    CHECK(field_count("latch", me) == 1);
    /* The latch is deleted with the next request on that connection. */
    int owned = 0;
    CHECK_OK(redmutex_lock_is_owned(&owned, l, NULL));
    CHECK(owned);
    CHECK(rs_count_keys(&srv, "redisson_unlock_latch:*") == 0);
    CHECK_OK(redmutex_lock_release(l, NULL));
    CHECK(!rs_exists(&srv, "latch"));
    redmutex_lock_free(l);
    redmutex_client_close(c);
    redmutex_client_free(c);
}

static void test_force_release_and_plain_rlock_type_clash(void)
{
    rs_start(&srv, NULL);
    redmutex_client *c = rt_client(&srv, 0);
    redmutex_lock *r = new_rlock(c, "both", 30000);
    redmutex_lock_options o = REDMUTEX_LOCK_OPTIONS_INIT;
    redmutex_lock *p;
    CHECK_OK(redmutex_lock_new(&p, c, "both", REDMUTEX_KIND_LOCK, &o));
    CHECK_OK(redmutex_lock_acquire(r, NULL, 0));
    /* A plain lock on a name held by a reentrant lock is a type clash, not a wait. */
    CHECK_RC(redmutex_lock_acquire(p, NULL, 0), REDMUTEX_EWRONGTYPE);
    CHECK_RC(redmutex_lock_force_release(NULL, p), REDMUTEX_EWRONGTYPE);
    CHECK(rs_exists(&srv, "both"));
    int deleted = 0;
    CHECK_OK(redmutex_lock_force_release(&deleted, r));
    CHECK(deleted == 1 && !rs_exists(&srv, "both"));
    redmutex_state st;
    CHECK_OK(redmutex_lock_state(&st, r, NULL));
    CHECK(st == REDMUTEX_STATE_UNLOCKED);
    CHECK_OK(redmutex_lock_acquire(p, NULL, 0));
    CHECK_RC(redmutex_lock_acquire(r, NULL, 0), REDMUTEX_EWRONGTYPE);
    CHECK_OK(redmutex_lock_release(p, NULL));
    redmutex_lock_free(p);
    redmutex_lock_free(r);
    redmutex_client_close(c);
    redmutex_client_free(c);
}

static void test_reentrant_fence_is_outer_token(void)
{
    rs_start(&srv, NULL);
    redmutex_client *c = rt_client(&srv, 0);
    redmutex_lock_options o = REDMUTEX_LOCK_OPTIONS_INIT;
    o.flags = REDMUTEX_LOCK_FENCING;
    redmutex_lock *a, *b;
    CHECK_OK(redmutex_lock_new(&a, c, "rf", REDMUTEX_KIND_RLOCK, &o));
    CHECK_OK(redmutex_lock_new(&b, c, "rf", REDMUTEX_KIND_RLOCK, &o));
    int64_t f1 = 0, f2 = 0, f3 = 0;
    CHECK_OK(redmutex_lock_acquire(a, NULL, 0));
    CHECK_OK(redmutex_lock_fence(&f1, a, NULL));
    CHECK_OK(redmutex_lock_acquire(b, NULL, 0)); /* reentrant through another handle */
    CHECK_OK(redmutex_lock_fence(&f2, b, NULL));
    CHECK(f1 > 0 && f2 == f1);
    CHECK_OK(redmutex_lock_release(b, NULL));
    CHECK_OK(redmutex_lock_release(a, NULL));
    CHECK_OK(redmutex_lock_acquire(a, NULL, 0));
    CHECK_OK(redmutex_lock_fence(&f3, a, NULL));
    CHECK(f3 > f1);
    CHECK_OK(redmutex_lock_release(a, NULL));
    redmutex_lock_free(a);
    redmutex_lock_free(b);
    redmutex_client_close(c);
    redmutex_client_free(c);
}

/*
 * Two handles of one owner (one thread, one name) share the server's field,
 * each counting its own levels: a balanced acquire/release on one never
 * leaves it holding levels the other took, and never ends the other's hold.
 */
static void test_two_handles_of_one_owner_count_their_own_levels(void)
{
    rs_start(&srv, NULL);
    redmutex_client *c = rt_client(&srv, 0);
    redmutex_lock *a = new_rlock(c, "shared-owner", 0); /* watchdog */
    redmutex_lock *b = new_rlock(c, "shared-owner", 0);
    char me[128];
    CHECK_OK(redmutex_client_thread_owner(me, sizeof me, c));
    CHECK_OK(redmutex_lock_acquire(a, NULL, 0));
    CHECK_OK(redmutex_lock_acquire(a, NULL, 0));
    CHECK_OK(redmutex_lock_acquire(b, NULL, 0));
    CHECK(field_count("shared-owner", me) == 3);
    CHECK_OK(redmutex_lock_release(b, NULL));
    redmutex_state st;
    CHECK_OK(redmutex_lock_state(&st, b, NULL));
    CHECK(st != REDMUTEX_STATE_HELD);            /* b's one level is released: b holds nothing */
    CHECK(field_count("shared-owner", me) == 2); /* ... and a's two levels are intact */
    CHECK_OK(redmutex_lock_state(&st, a, NULL));
    CHECK(st == REDMUTEX_STATE_HELD);
    CHECK_OK(redmutex_lock_release(a, NULL));
    CHECK_OK(redmutex_lock_release(a, NULL));
    CHECK(!rs_exists(&srv, "shared-owner"));
    redmutex_lock_free(a);
    redmutex_lock_free(b);
    redmutex_client_close(c);
    redmutex_client_free(c);
}

/*
 * A second handle of the same owner nests on the first one's hold: it keeps
 * the outer fencing token even when the counter moved on meanwhile (on a
 * Redlock, attempts granted by a minority raise it).
 */
static void test_second_handle_keeps_the_outer_token(void)
{
    rs_start(&srv, NULL);
    redmutex_client *c = rt_client(&srv, 0);
    redmutex_lock_options o = REDMUTEX_LOCK_OPTIONS_INIT;
    o.flags = REDMUTEX_LOCK_FENCING;
    redmutex_lock *a, *b;
    CHECK_OK(redmutex_lock_new(&a, c, "rf2", REDMUTEX_KIND_RLOCK, &o));
    CHECK_OK(redmutex_lock_new(&b, c, "rf2", REDMUTEX_KIND_RLOCK, &o));
    int64_t fa = 0, fb = 0;
    CHECK_OK(redmutex_lock_acquire(a, NULL, 0));
    CHECK_OK(redmutex_lock_fence(&fa, a, NULL));
    CHECK(rs_int(&srv, "INCRBY redisson_lock_token:{rf2} 500") > fa);
    CHECK_OK(redmutex_lock_acquire(b, NULL, 0));
    CHECK_OK(redmutex_lock_fence(&fb, b, NULL));
    CHECKF(fb == fa, "the second handle's token is %lld, the hold's %lld", (long long)fb, (long long)fa);
    CHECK_OK(redmutex_lock_release(b, NULL));
    CHECK_OK(redmutex_lock_release(a, NULL));
    CHECK(!rs_exists(&srv, "rf2"));
    redmutex_lock_free(a);
    redmutex_lock_free(b);
    redmutex_client_close(c);
    redmutex_client_free(c);
}

/*
 * The first handle's hold is gone from the server (deleted from outside):
 * the same owner's acquisition through a second handle takes the lock
 * afresh instead of failing, the first handle learns of its loss, and
 * releasing the first (ELOST) leaves the second's hold alone. Also when the
 * first hold was lost by its lease running out.
 */
static void test_second_handle_after_the_first_was_lost(void)
{
    rs_start(&srv, NULL);
    redmutex_client *c = rt_client(&srv, 0);
    char me[128];
    CHECK_OK(redmutex_client_thread_owner(me, sizeof me, c));
    for (int expired = 0; expired < 2; expired++) {
        redmutex_lock *a = new_rlock(c, "lost-first", expired ? 300 : 5000);
        redmutex_lock *b = new_rlock(c, "lost-first", 5000);
        CHECK_OK(redmutex_lock_acquire(a, NULL, 0));
        redmutex_state st = REDMUTEX_STATE_HELD;
        if (expired) {
            WAIT_FOR(redmutex_lock_state(&st, a, NULL) == 0 && st == REDMUTEX_STATE_LOST, 3000);
            WAIT_FOR(!rs_exists(&srv, "lost-first"), 3000);
        } else {
            CHECK(rs_int(&srv, "DEL lost-first") == 1);
        }
        int rc = redmutex_lock_acquire(b, NULL, 1000);
        CHECKF(rc == 0, "expired %d: the second handle could not take the free lock: %d (%s)", expired, rc,
               redmutex_last_error());
        CHECK(field_count("lost-first", me) == 1);
        CHECK_OK(redmutex_lock_state(&st, a, NULL));
        CHECK(st == REDMUTEX_STATE_LOST);
        CHECK(redmutex_lock_release(a, NULL) == REDMUTEX_ELOST);
        CHECKF(field_count("lost-first", me) == 1, "expired %d: releasing the lost hold took the new one", expired);
        CHECK_OK(redmutex_lock_state(&st, b, NULL));
        CHECK(st == REDMUTEX_STATE_HELD);
        CHECK_OK(redmutex_lock_release(b, NULL));
        CHECK(!rs_exists(&srv, "lost-first"));
        redmutex_lock_free(a);
        redmutex_lock_free(b);
    }
    redmutex_client_close(c);
    redmutex_client_free(c);
}

int main(int argc, char **argv)
{
    static const rt_test tests[] = {
        {"reentrant_counts_in_redisson_format", test_reentrant_counts_in_redisson_format},
        {"other_thread_is_another_owner", test_other_thread_is_another_owner},
        {"explicit_owner_ids", test_explicit_owner_ids},
        {"redisson_holder_excludes_and_is_excluded", test_redisson_holder_excludes_and_is_excluded},
        {"unlock_latch_makes_retried_release_idempotent", test_unlock_latch_makes_retried_release_idempotent},
        {"force_release_and_plain_rlock_type_clash", test_force_release_and_plain_rlock_type_clash},
        {"reentrant_fence_is_outer_token", test_reentrant_fence_is_outer_token},
        {"two_handles_of_one_owner_count_their_own_levels", test_two_handles_of_one_owner_count_their_own_levels},
        {"second_handle_keeps_the_outer_token", test_second_handle_keeps_the_outer_token},
        {"second_handle_after_the_first_was_lost", test_second_handle_after_the_first_was_lost},
    };
    return rt_run(tests, sizeof tests / sizeof tests[0], argc, argv);
}
