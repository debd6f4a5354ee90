/*
 * Pollable waits (redmutex_wait_*, redmutex_client_wait_fd/next_ready): an
 * event loop acquires without a thread per waiter. Each test drives the
 * waits the way a loop does, polling the client's wait fd with a deadline,
 * against a real redis-server: a release by another client (its message),
 * a release by the same client (the hand-off), a holder whose lease runs out
 * without a message, a holder that never publishes (the backoff cap), and
 * hundreds of waits served in order on three descriptors.
 */
#define _GNU_SOURCE
#include "harness.h"
#include "waiter.h" /* rm_waiter_subscribed: whether the client has read a confirmation */

#include <dirent.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <string.h>

static rs_server srv;

static redmutex_client *pw_client(int64_t backoff_cap_ms)
{
    redmutex_client_options o = REDMUTEX_CLIENT_OPTIONS_INIT;
    o.wait_backoff_cap_ms = backoff_cap_ms;
    o.shutdown_timeout_ms = 1000;
    const char *url = srv.url;
    redmutex_client *c;
    CHECK_OK(redmutex_client_new(&c, &url, 1, &o));
    return c;
}

static redmutex_lock *pw_lock(redmutex_client *c, const char *name, redmutex_kind kind)
{
    redmutex_lock *l;
    CHECK_OK(redmutex_lock_new(&l, c, name, kind, NULL));
    return l;
}

static bool readable(int fd, int ms)
{
    struct pollfd p = {fd, POLLIN, 0};
    return poll(&p, 1, ms) == 1 && (p.revents & POLLIN);
}

/* Polls the client's wait fd until `w` is reported ready; fails after ms. Returns the elapsed ms. */
static int64_t await_ready(redmutex_client *c, redmutex_wait *w, int ms)
{
    int fd = redmutex_client_wait_fd(c);
    CHECK(fd >= 0);
    int64_t start = rt_now_ms(), deadline = start + ms;
    for (;;) {
        uint64_t id;
        int rc;
        while ((rc = redmutex_client_next_ready(c, &id)) == 1)
            if (id == redmutex_wait_id(w))
                return rt_now_ms() - start;
        CHECK_RC(rc, 0);
        int64_t left = deadline - rt_now_ms();
        CHECKF(left > 0, "wait %llu not ready within %d ms", (unsigned long long)redmutex_wait_id(w), ms);
        readable(fd, (int)left);
    }
}

/* Pops whatever is ready now (the subscription's confirmation makes waits ready once). */
static void drain_ready(redmutex_client *c)
{
    uint64_t id;
    while (redmutex_client_next_ready(c, &id) == 1) {
    }
}

static int open_fds(void)
{
    int n = 0;
    DIR *d = opendir("/proc/self/fd");
    CHECK(d);
    while (readdir(d))
        n++;
    closedir(d);
    return n;
}

/* A release by another client publishes; the wait becomes ready at once and its try wins. */
static void test_release_message_makes_the_wait_ready(void)
{
    rs_start(&srv, NULL);
    redmutex_client *holder_c = pw_client(5000), *c = pw_client(5000);
    redmutex_lock *holder = pw_lock(holder_c, "pw:msg", REDMUTEX_KIND_LOCK);
    redmutex_lock *l = pw_lock(c, "pw:msg", REDMUTEX_KIND_LOCK);
    CHECK_OK(redmutex_lock_acquire(holder, NULL, 0));

    redmutex_wait *w;
    CHECK_OK(redmutex_wait_new(&w, l, NULL));
    CHECK(redmutex_wait_id(w) > 0);
    CHECK_RC(redmutex_wait_try(w), REDMUTEX_ETIMEDOUT);
    CHECK(strstr(redmutex_last_error(), "pw:msg") != NULL);
    /* The subscription's confirmation makes it ready once (a release may
       have slipped in before it): a retry finds the lock still held. */
    WAIT_FOR(rs_numsub(&srv, "redisson_lock__channel:{pw:msg}") == 1, 2000);
    drain_ready(c);
    CHECK_RC(redmutex_wait_try(w), REDMUTEX_ETIMEDOUT);
    /* While the holder holds, retries come at a doubling backoff (50 ms
       first): after five of them the next is >= 1.2 s away. */
    for (int i = 0; i < 5; i++) {
        await_ready(c, w, 3000);
        CHECK_RC(redmutex_wait_try(w), REDMUTEX_ETIMEDOUT);
    }
    /* The release's message makes the wait ready long before that. */
    CHECK_OK(redmutex_lock_release(holder, NULL));
    int64_t ms = await_ready(c, w, 1000);
    CHECKF(ms < 1000, "ready after %lld ms", (long long)ms);
    CHECK_OK(redmutex_wait_try(w));
    CHECK_RC(redmutex_wait_try(w), REDMUTEX_EINVAL); /* finished */
    redmutex_wait_free(w);
    redmutex_state st;
    CHECK_OK(redmutex_lock_state(&st, l, NULL));
    CHECK(st == REDMUTEX_STATE_HELD);
    CHECK_OK(redmutex_lock_release(l, NULL));
    CHECK(!rs_exists(&srv, "pw:msg"));
    redmutex_lock_free(l);
    redmutex_lock_free(holder);
    redmutex_client_free(c);
    redmutex_client_free(holder_c);
    rs_stop(&srv);
}

/* An uncontended wait acquires in one attempt and never subscribes; a wait
   that joins a channel already subscribed is made ready once (a release may
   have come between its attempt and its joining). */
static void test_uncontended_wait_does_not_subscribe(void)
{
    rs_start(&srv, NULL);
    redmutex_client *c = pw_client(5000), *other_c = pw_client(5000);
    redmutex_lock *l = pw_lock(c, "pw:free", REDMUTEX_KIND_LOCK);
    redmutex_wait *w;
    CHECK_OK(redmutex_wait_new(&w, l, NULL));
    CHECK_OK(redmutex_wait_try(w));
    redmutex_wait_free(w);
    CHECK(rs_numsub(&srv, "redisson_lock__channel:{pw:free}") == 0);

    redmutex_lock *l2 = pw_lock(other_c, "pw:free", REDMUTEX_KIND_LOCK);
    redmutex_wait *w1, *w2;
    CHECK_OK(redmutex_wait_new(&w1, l2, NULL));
    CHECK_RC(redmutex_wait_try(w1), REDMUTEX_ETIMEDOUT);
    WAIT_FOR(rs_numsub(&srv, "redisson_lock__channel:{pw:free}") == 1, 2000);
    /* The client has read the confirmation (the server counting the
       subscriber comes before that): w2 joins a channel subscribed already. */
    WAIT_FOR(rm_waiter_subscribed(other_c, "redisson_lock__channel:{pw:free}"), 2000);
    drain_ready(other_c);
    CHECK_OK(redmutex_wait_new(&w2, l2, NULL));
    CHECK_RC(redmutex_wait_try(w2), REDMUTEX_ETIMEDOUT); /* queued behind w1: no attempt */
    uint64_t id;
    bool w2_ready = false;
    while (redmutex_client_next_ready(other_c, &id) == 1)
        w2_ready |= id == redmutex_wait_id(w2); /* (w1's backoff may have come too) */
    CHECK(w2_ready);
    redmutex_wait_free(w1);
    redmutex_wait_free(w2);
    CHECK_OK(redmutex_lock_release(l, NULL));
    redmutex_lock_free(l);
    redmutex_lock_free(l2);
    redmutex_client_free(c);
    redmutex_client_free(other_c);
    rs_stop(&srv);
}

/* A release by the same client hands the lock over in its own round trip. */
static void test_release_by_the_same_client_hands_the_lock_over(void)
{
    rs_start(&srv, NULL);
    redmutex_client *c = pw_client(5000);
    redmutex_lock *l = pw_lock(c, "pw:handoff", REDMUTEX_KIND_RLOCK);
    char holder[] = "holder-task", waiter[] = "waiter-task";
    /* Scripts loaded first: a hand-off that met NOSCRIPT is redone by the waiter. */
    CHECK_OK(redmutex_lock_acquire(l, holder, 0));
    CHECK_OK(redmutex_lock_release(l, holder));
    CHECK_OK(redmutex_lock_acquire(l, holder, 0));
    redmutex_wait *w;
    CHECK_OK(redmutex_wait_new(&w, l, waiter));
    CHECK_RC(redmutex_wait_try(w), REDMUTEX_ETIMEDOUT);
    WAIT_FOR(rs_numsub(&srv, "redisson_lock__channel:{pw:handoff}") == 1, 2000);
    drain_ready(c); /* the subscription's confirmation */
    CHECK_RC(redmutex_wait_try(w), REDMUTEX_ETIMEDOUT);

    CHECK_OK(redmutex_lock_release(l, holder));
    await_ready(c, w, 1000);
    /* The hold was recorded by the releasing call: the server has the
       waiter's field already, before the try. */
    CHECK(rs_int(&srv, "HEXISTS pw:handoff waiter-task") == 1);
    CHECK_OK(redmutex_wait_try(w));
    redmutex_wait_free(w);
    int64_t count;
    CHECK_OK(redmutex_lock_hold_count(&count, l, waiter));
    CHECK(count == 1);
    CHECK_OK(redmutex_lock_release(l, waiter));
    CHECK(!rs_exists(&srv, "pw:handoff"));
    redmutex_lock_free(l);
    redmutex_client_free(c);
    rs_stop(&srv);
}

/* A wait freed after a hand-off granted it the lock, but before it tried, gives the lock back. */
static void test_free_gives_back_a_lock_handed_over_meanwhile(void)
{
    rs_start(&srv, NULL);
    redmutex_client *c = pw_client(5000);
    redmutex_lock *l = pw_lock(c, "pw:giveback", REDMUTEX_KIND_LOCK);
    redmutex_lock *other = pw_lock(c, "pw:giveback", REDMUTEX_KIND_LOCK);
    CHECK_OK(redmutex_lock_acquire(other, NULL, 0));
    redmutex_wait *w;
    CHECK_OK(redmutex_wait_new(&w, l, NULL));
    CHECK_RC(redmutex_wait_try(w), REDMUTEX_ETIMEDOUT);
    CHECK_OK(redmutex_lock_release(other, NULL));
    await_ready(c, w, 1000);
    CHECK(rs_exists(&srv, "pw:giveback")); /* taken for the wait */
    redmutex_wait_free(w);                 /* cancelled before it looked */
    CHECK(!rs_exists(&srv, "pw:giveback"));
    redmutex_state st;
    CHECK_OK(redmutex_lock_state(&st, l, NULL));
    CHECK(st == REDMUTEX_STATE_UNLOCKED);
    /* The lock is usable by anyone at once. */
    CHECK_OK(redmutex_lock_acquire(other, NULL, 0));
    CHECK_OK(redmutex_lock_release(other, NULL));
    redmutex_lock_free(l);
    redmutex_lock_free(other);
    redmutex_client_free(c);
    rs_stop(&srv);
}

/* A holder whose lease runs out publishes nothing: the wait is due at the lease's end. */
static void test_lease_end_makes_the_wait_ready(void)
{
    rs_start(&srv, NULL);
    redmutex_client *c = pw_client(10000);
    redmutex_lock *l = pw_lock(c, "pw:ttl", REDMUTEX_KIND_LOCK);
    int64_t start = rt_now_ms();
    freeReplyObject(rs_cmd(&srv, "SET pw:ttl foreign PX 400"));
    redmutex_wait *w;
    CHECK_OK(redmutex_wait_new(&w, l, NULL));
    CHECK_RC(redmutex_wait_try(w), REDMUTEX_ETIMEDOUT);
    /* Ready at the subscription, then at the lease's end (not at the 10 s cap). */
    for (;;) {
        await_ready(c, w, 3000);
        int rc = redmutex_wait_try(w);
        if (rc == 0)
            break;
        CHECK_RC(rc, REDMUTEX_ETIMEDOUT);
    }
    int64_t ms = rt_now_ms() - start;
    CHECKF(ms >= 400 && ms < 3000, "acquired after %lld ms; the lease ended after 400", (long long)ms);
    redmutex_wait_free(w);
    CHECK_OK(redmutex_lock_release(l, NULL));
    redmutex_lock_free(l);
    redmutex_client_free(c);
    rs_stop(&srv);
}

/* A holder without a TTL that deletes its key without publishing (redis-py's
   default lock): the wait retries at the backoff cap. */
static void test_backoff_cap_bounds_a_silent_release(void)
{
    rs_start(&srv, NULL);
    redmutex_client *c = pw_client(300);
    redmutex_lock *l = pw_lock(c, "pw:silent", REDMUTEX_KIND_LOCK);
    freeReplyObject(rs_cmd(&srv, "SET pw:silent foreign"));
    redmutex_wait *w;
    CHECK_OK(redmutex_wait_new(&w, l, NULL));
    CHECK_RC(redmutex_wait_try(w), REDMUTEX_ETIMEDOUT);
    /* Retries come at a growing backoff, capped at 300 ms. */
    int64_t start = rt_now_ms();
    for (int tries = 0; tries < 4; tries++) {
        await_ready(c, w, 2000);
        CHECK_RC(redmutex_wait_try(w), REDMUTEX_ETIMEDOUT);
    }
    CHECKF(rt_now_ms() - start >= 150, "4 retries within %lld ms: no backoff", (long long)(rt_now_ms() - start));
    CHECK(rs_int(&srv, "DEL pw:silent") == 1);
    int64_t deleted_at = rt_now_ms();
    for (;;) {
        await_ready(c, w, 2000);
        int rc = redmutex_wait_try(w);
        if (rc == 0)
            break;
        CHECK_RC(rc, REDMUTEX_ETIMEDOUT);
    }
    int64_t after = rt_now_ms() - deleted_at;
    CHECKF(after < 1500, "acquired %lld ms after the silent release (cap 300)", (long long)after);
    redmutex_wait_free(w);
    CHECK_OK(redmutex_lock_release(l, NULL));
    redmutex_lock_free(l);
    redmutex_client_free(c);
    rs_stop(&srv);
}

/*
 * 300 waits on one lock, served one after another by a single thread that
 * polls the wait fd: each is served exactly once, in the order they queued,
 * the process gains no descriptor per wait, and no key is left.
 */
static void test_many_waits_share_three_descriptors_and_are_served_in_order(void)
{
    enum { N = 300 };
    rs_start(&srv, NULL);
    redmutex_client *c = pw_client(5000);
    redmutex_lock *l = pw_lock(c, "pw:many", REDMUTEX_KIND_RLOCK);
    int fd = redmutex_client_wait_fd(c);
    CHECK(fd >= 0);
    char first[] = "first";
    CHECK_OK(redmutex_lock_acquire(l, first, 0));
    static redmutex_wait *w[N];
    static char owners[N][16];
    int fds_before = open_fds();
    for (int i = 0; i < N; i++) {
        snprintf(owners[i], sizeof owners[i], "task-%d", i);
        CHECK_OK(redmutex_wait_new(&w[i], l, owners[i]));
        CHECK_RC(redmutex_wait_try(w[i]), REDMUTEX_ETIMEDOUT);
    }
    int gained = open_fds() - fds_before;
    CHECKF(gained <= 4, "%d waits took %d descriptors", N, gained); /* the subscriber's thread and socket */

    CHECK_OK(redmutex_lock_release(l, first));
    uint64_t base = redmutex_wait_id(w[0]);
    int served = 0, next = 0;
    int64_t deadline = rt_now_ms() + 60000;
    while (served < N) {
        CHECK(rt_now_ms() < deadline);
        readable(fd, 1000);
        uint64_t id;
        while (redmutex_client_next_ready(c, &id) == 1) {
            int i = (int)(id - base);
            CHECK(i >= 0 && i < N && w[i] && redmutex_wait_id(w[i]) == id);
            int rc = redmutex_wait_try(w[i]);
            if (rc == REDMUTEX_ETIMEDOUT)
                continue;
            CHECK_OK(rc);
            CHECKF(i == next, "wait %d was served when %d was next", i, next);
            next++;
            redmutex_wait_free(w[i]);
            w[i] = NULL;
            served++;
            CHECK_OK(redmutex_lock_release(l, owners[i])); /* hands it to the next */
        }
    }
    CHECK(!rs_exists(&srv, "pw:many"));
    CHECK(open_fds() - fds_before <= 4);
    redmutex_lock_free(l);
    redmutex_client_free(c);
    rs_stop(&srv);
}

/*
 * A pollable wait is a wait, as a blocking acquire's is: a server that
 * stalls (it will answer when its stall ends) makes its tries busy, not
 * fail with REDMUTEX_ECONN, and the wait acquires once the server answers
 * again (test_safety: waiting_acquire_rides_out_a_stall, for the blocking
 * acquire).
 */
static void test_wait_rides_out_a_stall(void)
{
    rs_start(&srv, NULL);
    redmutex_client_options o = REDMUTEX_CLIENT_OPTIONS_INIT;
    o.command_timeout_ms = 300;
    o.shutdown_timeout_ms = 1000;
    const char *url = srv.url;
    redmutex_client *c;
    CHECK_OK(redmutex_client_new(&c, &url, 1, &o));
    redmutex_lock *l = pw_lock(c, "pw:stall", REDMUTEX_KIND_LOCK);
    CHECK_OK(redmutex_lock_acquire(l, NULL, 0)); /* the server has answered this client */
    CHECK_OK(redmutex_lock_release(l, NULL));
    redmutex_wait *w;
    CHECK_OK(redmutex_wait_new(&w, l, NULL));
    rs_pause(&srv);
    for (int i = 0; i < 2; i++) { /* the try that meets the stall, and one after it */
        int rc = redmutex_wait_try(w);
        CHECKF(rc == REDMUTEX_ETIMEDOUT, "try %d during the stall: %d (%s)", i, rc, redmutex_last_error());
        CHECKF(strstr(redmutex_last_error(), "slow or down") != NULL, "message: %s", redmutex_last_error());
    }
    rs_resume(&srv);
    int rc;
    int64_t deadline = rt_now_ms() + rt_scaled_ms(5000);
    while ((rc = redmutex_wait_try(w)) == REDMUTEX_ETIMEDOUT && rt_now_ms() < deadline)
        await_ready(c, w, (int)rt_scaled_ms(5000));
    CHECKF(rc == 0, "after the stall: %d (%s)", rc, redmutex_last_error());
    redmutex_wait_free(w);
    CHECK_OK(redmutex_lock_release(l, NULL));
    CHECK(!rs_exists(&srv, "pw:stall"));
    redmutex_lock_free(l);
    redmutex_client_free(c);
    rs_stop(&srv);
}

/* A new wait queues behind the client's waits instead of racing them, unless it re-enters. */
static void test_new_wait_queues_behind_older_ones(void)
{
    rs_start(&srv, NULL);
    redmutex_client *c = pw_client(5000);
    redmutex_lock *l = pw_lock(c, "pw:queue", REDMUTEX_KIND_RLOCK);
    char a[] = "a", b[] = "b", holder[] = "holder";
    CHECK_OK(redmutex_lock_acquire(l, holder, 0));
    redmutex_wait *wa, *wb, *wh;
    CHECK_OK(redmutex_wait_new(&wa, l, a));
    CHECK_RC(redmutex_wait_try(wa), REDMUTEX_ETIMEDOUT);
    /* The holder re-enters at once, queue or not. */
    CHECK_OK(redmutex_wait_new(&wh, l, holder));
    CHECK_OK(redmutex_wait_try(wh));
    redmutex_wait_free(wh);
    CHECK(rs_int(&srv, "HINCRBY pw:queue holder 0") == 2);
    CHECK_OK(redmutex_lock_release(l, holder));
    CHECK_OK(redmutex_lock_release(l, holder)); /* hands it to a */
    await_ready(c, wa, 1000);
    /* b arrives while a is about to take it: b waits its turn. */
    CHECK_OK(redmutex_wait_new(&wb, l, b));
    CHECK_RC(redmutex_wait_try(wb), REDMUTEX_ETIMEDOUT);
    CHECK_OK(redmutex_wait_try(wa));
    redmutex_wait_free(wa);
    CHECK_OK(redmutex_lock_release(l, a));
    for (;;) {
        await_ready(c, wb, 2000);
        int rc = redmutex_wait_try(wb);
        if (rc == 0)
            break;
        CHECK_RC(rc, REDMUTEX_ETIMEDOUT);
    }
    redmutex_wait_free(wb);
    CHECK_OK(redmutex_lock_release(l, b));
    CHECK(!rs_exists(&srv, "pw:queue"));
    redmutex_lock_free(l);
    redmutex_client_free(c);
    rs_stop(&srv);
}

typedef struct releaser {
    redmutex_lock *lock;
    char *owner;
    int rc;
} releaser;

static void *release_main(void *arg)
{
    releaser *r = arg;
    r->rc = redmutex_lock_release(r->lock, r->owner);
    return NULL;
}

/*
 * A wait freed while a releasing thread hands it the lock: before the
 * release claims it, during the hand-off's round trip, or after. Whatever
 * the order, the freed wait leaves nothing held and no key behind.
 */
static void test_free_racing_a_hand_off_leaves_nothing(void)
{
    rs_start(&srv, NULL);
    redmutex_client *c = pw_client(5000);
    redmutex_lock *l = pw_lock(c, "pw:race", REDMUTEX_KIND_RLOCK);
    char holder[] = "holder", waiter[] = "waiter";
    CHECK_OK(redmutex_lock_acquire(l, holder, 0)); /* scripts loaded */
    CHECK_OK(redmutex_lock_release(l, holder));
    for (int i = 0; i < 200; i++) {
        CHECK_OK(redmutex_lock_acquire(l, holder, 0));
        redmutex_wait *w;
        CHECK_OK(redmutex_wait_new(&w, l, waiter));
        CHECK_RC(redmutex_wait_try(w), REDMUTEX_ETIMEDOUT);
        releaser r = {l, holder, -1};
        pthread_t t;
        CHECK(pthread_create(&t, NULL, release_main, &r) == 0);
        if (i % 3 == 1)
            sched_yield();
        else if (i % 3 == 2)
            rt_sleep_ms(0);
        redmutex_wait_free(w);
        pthread_join(t, NULL);
        CHECK_OK(r.rc);
        int64_t count;
        CHECK_OK(redmutex_lock_hold_count(&count, l, waiter));
        CHECK(count == 0);
        CHECKF(!rs_exists(&srv, "pw:race"), "iteration %d left the lock held", i);
        redmutex_state st;
        CHECK_OK(redmutex_lock_state(&st, l, waiter));
        CHECK(st == REDMUTEX_STATE_UNLOCKED);
    }
    redmutex_lock_free(l);
    redmutex_client_free(c);
    rs_stop(&srv);
}

/* Polls until the wait acquires (tries that find it busy go on); fails after ms. */
static void try_until_held(redmutex_client *c, redmutex_wait *w, int ms)
{
    int64_t deadline = rt_now_ms() + rt_scaled_ms(ms);
    int rc;
    while ((rc = redmutex_wait_try(w)) == REDMUTEX_ETIMEDOUT) {
        int64_t left = deadline - rt_now_ms();
        CHECKF(left > 0, "the wait did not acquire within %d ms", ms);
        await_ready(c, w, (int)left);
    }
    CHECK_OK(rc);
}

/*
 * A fair lock's releasing script hands the lock to the oldest waiter on the
 * server: the waiter's field appears in the hash before the waiter looks. An
 * event loop that cancels that wait may start its retry (a new wait, or a
 * try, of the same owner) before it gets round to freeing the cancelled
 * one. The retry must not count the hand-off as a hold of its own (the
 * owner's field would then carry one level more than anyone releases, and
 * the lock would stay held by nobody for a whole lease): it waits until the
 * cancelled wait has ended, which gives the hand-off back.
 */
static void test_fair_wait_cancelled_at_a_hand_off_and_retried_before_its_free_leaves_no_orphan(void)
{
    rs_start(&srv, NULL);
    redmutex_client *c = pw_client(5000);
    redmutex_lock *l = pw_lock(c, "pw:fair", REDMUTEX_KIND_FAIR);
    char holder[] = "holder", me[] = "me";
    CHECK_OK(redmutex_lock_acquire(l, holder, 0));
    redmutex_wait *cancelled;
    CHECK_OK(redmutex_wait_new(&cancelled, l, me));
    CHECK_RC(redmutex_wait_try(cancelled), REDMUTEX_ETIMEDOUT);
    CHECK(rs_int(&srv, "LLEN redisson_lock_queue:{pw:fair}") == 1);
    CHECK_OK(redmutex_lock_release(l, holder)); /* the script hands the lock to "me" */
    CHECK(rs_num(&srv, "HGET pw:fair me") == 1);

    /* The loop cancels that wait and retries before freeing it. */
    CHECK_RC(redmutex_lock_acquire(l, me, 0), REDMUTEX_ETIMEDOUT);
    CHECK(strstr(redmutex_last_error(), "pw:fair") != NULL);
    redmutex_wait *retry;
    CHECK_OK(redmutex_wait_new(&retry, l, me));
    CHECK_RC(redmutex_wait_try(retry), REDMUTEX_ETIMEDOUT);
    CHECK(rs_num(&srv, "HGET pw:fair me") == 1); /* nothing added to the hand-off */
    redmutex_wait_free(cancelled);               /* gives the hand-off back, and lets the retry go */
    try_until_held(c, retry, 5000);
    redmutex_wait_free(retry);
    CHECK(rs_num(&srv, "HGET pw:fair me") == 1);
    CHECK_OK(redmutex_lock_release(l, me));
    CHECK(!rs_exists(&srv, "pw:fair")); /* no level left that nobody holds */
    CHECK(rs_count_keys(&srv, "*lock_queue*") == 0);
    redmutex_lock_free(l);
    redmutex_client_close(c); /* threads stopped before the test ends */
    redmutex_client_free(c);
    rs_stop(&srv);
}

typedef struct fair_acquirer {
    redmutex_lock *lock;
    char *owner;
    int64_t wait_ms;
    int rc;
} fair_acquirer;

static void *acquire_main(void *arg)
{
    fair_acquirer *a = arg;
    a->rc = redmutex_lock_acquire(a->lock, a->owner, a->wait_ms);
    return NULL;
}

/*
 * The same, with a blocking acquire of the owner on another thread as the
 * retry: it waits behind the cancelled wait (no attempt of its own), and
 * takes the lock once that wait is freed.
 */
static void test_blocking_retry_waits_behind_a_cancelled_fair_wait_of_its_owner(void)
{
    rs_start(&srv, NULL);
    redmutex_client *c = pw_client(5000);
    redmutex_lock *l = pw_lock(c, "pw:fairb", REDMUTEX_KIND_FAIR), *l2 = pw_lock(c, "pw:fairb", REDMUTEX_KIND_FAIR);
    char holder[] = "holder", me[] = "me";
    CHECK_OK(redmutex_lock_acquire(l, holder, 0));
    redmutex_wait *cancelled;
    CHECK_OK(redmutex_wait_new(&cancelled, l, me));
    CHECK_RC(redmutex_wait_try(cancelled), REDMUTEX_ETIMEDOUT);
    CHECK_OK(redmutex_lock_release(l, holder));
    CHECK(rs_num(&srv, "HGET pw:fairb me") == 1);
    fair_acquirer a = {l2, me, 20000, -1};
    pthread_t t;
    CHECK(pthread_create(&t, NULL, acquire_main, &a) == 0);
    WAIT_FOR(rm_waiters_queued(c, "redisson_lock__channel:{pw:fairb}:me") == 2, 5000);
    CHECK(rs_num(&srv, "HGET pw:fairb me") == 1);
    redmutex_wait_free(cancelled);
    pthread_join(t, NULL);
    CHECK_OK(a.rc);
    CHECK(rs_num(&srv, "HGET pw:fairb me") == 1);
    CHECK_OK(redmutex_lock_release(l2, me));
    CHECK(!rs_exists(&srv, "pw:fairb"));
    redmutex_lock_free(l);
    redmutex_lock_free(l2);
    redmutex_client_close(c); /* threads stopped before the test ends */
    redmutex_client_free(c);
    rs_stop(&srv);
}

/*
 * A fair wait cancelled at any moment around a hand-off by the releasing
 * script (before it, while the release runs, after it), its retry started
 * before the cancelled wait is freed: every round ends with the retry
 * holding one level, and nothing left once it releases.
 */
static void test_fair_wait_cancelled_around_a_hand_off_never_orphans_the_lock(void)
{
    rs_start(&srv, NULL);
    redmutex_client *c = pw_client(5000), *hc = pw_client(5000);
    redmutex_lock *l = pw_lock(c, "pw:fairr", REDMUTEX_KIND_FAIR), *h = pw_lock(hc, "pw:fairr", REDMUTEX_KIND_FAIR);
    char holder[] = "holder", me[] = "me";
    for (int i = 0; i < 60; i++) {
        CHECK_OK(redmutex_lock_acquire(h, holder, 0));
        redmutex_wait *cancelled, *retry;
        CHECK_OK(redmutex_wait_new(&cancelled, l, me));
        CHECK_RC(redmutex_wait_try(cancelled), REDMUTEX_ETIMEDOUT);
        releaser r = {h, holder, -1};
        pthread_t t;
        CHECK(pthread_create(&t, NULL, release_main, &r) == 0);
        if (i % 3 == 1)
            sched_yield();
        else if (i % 3 == 2)
            rt_sleep_ms(i % 5);
        CHECK_OK(redmutex_wait_new(&retry, l, me));
        int rc = redmutex_wait_try(retry);
        CHECKF(rc == REDMUTEX_ETIMEDOUT || rc == 0, "round %d: the retry's try returned %d", i, rc);
        redmutex_wait_free(cancelled);
        if (rc != 0)
            try_until_held(c, retry, 10000);
        redmutex_wait_free(retry);
        pthread_join(t, NULL);
        CHECK_OK(r.rc);
        CHECKF(rs_num(&srv, "HGET pw:fairr me") == 1, "round %d: the owner's field has %lld levels", i,
               rs_num(&srv, "HGET pw:fairr me"));
        CHECK_OK(redmutex_lock_release(l, me));
        CHECKF(!rs_exists(&srv, "pw:fairr"), "round %d left the lock held by nobody", i);
    }
    redmutex_lock_free(l);
    redmutex_lock_free(h);
    redmutex_client_close(c); /* threads stopped before the test ends */
    redmutex_client_free(c);
    redmutex_client_close(hc); /* threads stopped before the test ends */
    redmutex_client_free(hc);
    rs_stop(&srv);
}

/* Closing the client makes every wait ready; tries fail with ECLOSED; frees work in any order. */
static void test_close_makes_waits_ready_and_frees_work_in_any_order(void)
{
    rs_start(&srv, NULL);
    redmutex_client *c = pw_client(5000);
    redmutex_lock *l = pw_lock(c, "pw:close", REDMUTEX_KIND_LOCK);
    freeReplyObject(rs_cmd(&srv, "SET pw:close foreign"));
    redmutex_wait *w1, *w2;
    CHECK_OK(redmutex_wait_new(&w1, l, NULL));
    CHECK_OK(redmutex_wait_new(&w2, l, NULL));
    CHECK_RC(redmutex_wait_try(w1), REDMUTEX_ETIMEDOUT);
    CHECK_RC(redmutex_wait_try(w2), REDMUTEX_ETIMEDOUT);
    WAIT_FOR(rs_numsub(&srv, "redisson_lock__channel:{pw:close}") == 1, 2000);
    drain_ready(c);
    CHECK_OK(redmutex_client_close(c));
    await_ready(c, w1, 1000);
    CHECK_RC(redmutex_wait_try(w1), REDMUTEX_ECLOSED);
    redmutex_wait *w3;
    CHECK_RC(redmutex_wait_new(&w3, l, NULL), REDMUTEX_ECLOSED);
    /* The client and the handle go first; the waits keep their memory alive. */
    int fd = redmutex_client_wait_fd(c);
    CHECK(fd >= 0);
    redmutex_lock_free(l);
    redmutex_client_free(c);
    redmutex_wait_free(w1);
    redmutex_wait_free(w2);
    CHECK(rs_exists(&srv, "pw:close")); /* the foreign holder's key is untouched */
    rs_stop(&srv);
}

/* Polls the wait fd until every one of the n waits was reported ready; fails after ms. Returns the elapsed ms. */
static int64_t await_each_ready(redmutex_client *c, redmutex_wait **ws, int n, int ms)
{
    int fd = redmutex_client_wait_fd(c);
    int64_t start = rt_now_ms(), deadline = start + rt_scaled_ms(ms);
    bool seen[8] = {false};
    int left_to_see = n;
    CHECK(fd >= 0 && n <= 8);
    for (;;) {
        uint64_t id;
        while (redmutex_client_next_ready(c, &id) == 1)
            for (int i = 0; i < n; i++)
                if (!seen[i] && id == redmutex_wait_id(ws[i])) {
                    seen[i] = true;
                    left_to_see--;
                }
        if (left_to_see == 0)
            return rt_now_ms() - start;
        int64_t left = deadline - rt_now_ms();
        CHECKF(left > 0, "%d of %d waits not ready within %d ms", left_to_see, n, ms);
        readable(fd, (int)left);
    }
}

/* How many channels matching the pattern have subscribers. */
static long long n_channels(const char *pattern)
{
    redisReply *r = rs_cmd(&srv, "PUBSUB CHANNELS %s", pattern);
    long long n = r && r->type == REDIS_REPLY_ARRAY ? (long long)r->elements : -1;
    if (r)
        freeReplyObject(r);
    return n;
}

/* The wait fd stays readable while next_ready pops nothing: a loop would spin.
   (A timer armed for a wait that has been tried since may fire once; the
   next call drains it, so only lasting readability counts.) */
static bool ready_without_a_wait(redmutex_client *c)
{
    for (int i = 0; i < 3; i++) {
        uint64_t id;
        if (redmutex_client_next_ready(c, &id) == 0 && !readable(redmutex_client_wait_fd(c), 0))
            return false;
    }
    return true;
}

/*
 * redmutex_client_interrupt() ends pollable waits too, as it ends blocked
 * acquires: every wait that began before it (tried or not, a lock's or a
 * latch's) becomes ready at once and its tries report REDMUTEX_EINTR, with
 * the fair queue left and nothing held; a wait begun after it is not
 * affected; the wait fd is not left readable with nothing to pop.
 */
static void test_interrupt_ends_pollable_waits_begun_before_it(void)
{
    rs_start(&srv, NULL);
    redmutex_client *c = pw_client(60000), *hc = pw_client(60000);
    redmutex_lock *l = pw_lock(c, "pw:intr", REDMUTEX_KIND_FAIR), *h = pw_lock(hc, "pw:intr", REDMUTEX_KIND_FAIR);
    CHECK_OK(redmutex_lock_acquire(h, "holder", 0));
    redmutex_latch *latch;
    CHECK_OK(redmutex_latch_new(&latch, c, "pw:intr-latch"));
    int set;
    CHECK_OK(redmutex_latch_try_set_count(&set, latch, 1));
    CHECK(set);

    redmutex_wait *tried, *untried, *lw;
    CHECK_OK(redmutex_wait_new(&tried, l, "a"));
    CHECK_OK(redmutex_wait_new(&untried, l, "b"));
    CHECK_OK(redmutex_latch_wait_new(&lw, latch));
    CHECK_RC(redmutex_wait_try(tried), REDMUTEX_ETIMEDOUT);
    CHECK_RC(redmutex_wait_try(lw), REDMUTEX_ETIMEDOUT);
    CHECK(rs_int(&srv, "LLEN redisson_lock_queue:{pw:intr}") == 1);
    WAIT_FOR(n_channels("redisson_lock__channel:{pw:intr}:*") == 1, 2000); /* the fair wait's own */
    drain_ready(c);
    /* `untried` has made no attempt: nothing but the interrupt can make it
       ready. All three are ready at once. */
    redmutex_client_interrupt(c);
    redmutex_wait *ws[] = {tried, untried, lw};
    int64_t ms = await_each_ready(c, ws, 3, 2000);
    CHECKF(ms < rt_scaled_ms(500), "ready %lld ms after the interrupt", (long long)ms);
    CHECK_RC(redmutex_wait_try(tried), REDMUTEX_EINTR);
    CHECK(strstr(redmutex_last_error(), "interrupt") != NULL);
    /* It left the server's queue, and its channel, with its EINTR. */
    CHECK(rs_int(&srv, "LLEN redisson_lock_queue:{pw:intr}") == 0);
    CHECK(rs_int(&srv, "ZCARD redisson_lock_timeout:{pw:intr}") == 0);
    CHECK(rs_int(&srv, "HLEN redmutex_lock_waiters:{pw:intr}") == 0);
    /* Off its channel too: the client unsubscribes once the channel has
       been unused for its linger time (2 s). */
    WAIT_FOR(n_channels("redisson_lock__channel:{pw:intr}:*") == 0, 5000);
    CHECK_RC(redmutex_wait_try(tried), REDMUTEX_EINTR); /* ended: every later try says so */
    CHECK_RC(redmutex_wait_try(untried), REDMUTEX_EINTR);
    CHECK_RC(redmutex_wait_try(lw), REDMUTEX_EINTR);
    drain_ready(c);
    CHECK(!ready_without_a_wait(c));

    /* A wait begun after the interrupt waits as usual. */
    redmutex_wait *later;
    CHECK_OK(redmutex_wait_new(&later, l, "c"));
    CHECK_RC(redmutex_wait_try(later), REDMUTEX_ETIMEDOUT);
    CHECK(rs_int(&srv, "LLEN redisson_lock_queue:{pw:intr}") == 1);
    redmutex_wait_free(tried);
    redmutex_wait_free(untried);
    redmutex_wait_free(lw);
    drain_ready(c);
    CHECK(!ready_without_a_wait(c));
    CHECK_OK(redmutex_lock_release(h, "holder"));
    try_until_held(c, later, 10000);
    redmutex_wait_free(later);
    CHECK(rs_num(&srv, "HGET pw:intr c") == 1);
    CHECK(rs_num(&srv, "HGET pw:intr a") == 0 && rs_num(&srv, "HGET pw:intr b") == 0);
    CHECK(rs_int(&srv, "ZCARD redisson_lock_timeout:{pw:intr}") == 0);
    CHECK_OK(redmutex_lock_release(l, "c"));
    CHECK(!rs_exists(&srv, "pw:intr"));
    CHECK(rs_int(&srv, "LLEN redisson_lock_queue:{pw:intr}") == 0);
    redmutex_latch_free(latch);
    redmutex_lock_free(l);
    redmutex_lock_free(h);
    redmutex_client_close(c);
    redmutex_client_free(c);
    redmutex_client_close(hc);
    redmutex_client_free(hc);
    rs_stop(&srv);
}

#define N_RACERS 8

typedef struct tried_by_worker {
    redmutex_wait *w[N_RACERS];
    _Atomic bool ready[N_RACERS]; /* reported by next_ready, not tried since */
    _Atomic int rc[N_RACERS];     /* of the last try */
    _Atomic bool stop;
} tried_by_worker;

/* A worker thread that tries each wait the loop found ready, as asyncio's pool does. */
static void *try_worker_main(void *arg)
{
    tried_by_worker *t = arg;
    while (!atomic_load(&t->stop)) {
        bool any = false;
        for (int i = 0; i < N_RACERS; i++)
            if (atomic_exchange(&t->ready[i], false)) {
                atomic_store(&t->rc[i], redmutex_wait_try(t->w[i]));
                any = true;
            }
        if (!any)
            rt_sleep_ms(1);
    }
    return NULL;
}

/* The loop's thread pops ready waits and interrupts while a worker tries
   them: every wait ends with REDMUTEX_EINTR and nothing is left held. */
static void test_interrupt_while_a_worker_tries_ends_every_wait(void)
{
    rs_start(&srv, NULL);
    redmutex_client *c = pw_client(200), *hc = pw_client(200);
    redmutex_lock *l = pw_lock(c, "pw:intr-race", REDMUTEX_KIND_LOCK),
                  *h = pw_lock(hc, "pw:intr-race", REDMUTEX_KIND_LOCK);
    CHECK_OK(redmutex_lock_acquire(h, NULL, 0));
    tried_by_worker t;
    memset(&t, 0, sizeof t);
    for (int i = 0; i < N_RACERS; i++) {
        CHECK_OK(redmutex_wait_new(&t.w[i], l, NULL));
        atomic_store(&t.ready[i], true);
    }
    pthread_t worker;
    CHECK(pthread_create(&worker, NULL, try_worker_main, &t) == 0);
    int fd = redmutex_client_wait_fd(c);
    int64_t start = rt_now_ms(), interrupt_at = start + 300, deadline = start + rt_scaled_ms(5000);
    bool interrupted = false;
    for (;;) {
        uint64_t id;
        while (redmutex_client_next_ready(c, &id) == 1)
            for (int i = 0; i < N_RACERS; i++)
                if (id == redmutex_wait_id(t.w[i]))
                    atomic_store(&t.ready[i], true);
        if (!interrupted && rt_now_ms() >= interrupt_at) {
            redmutex_client_interrupt(c);
            interrupted = true;
        }
        int ended = 0;
        for (int i = 0; i < N_RACERS; i++)
            ended += atomic_load(&t.rc[i]) == REDMUTEX_EINTR;
        if (ended == N_RACERS)
            break;
        CHECKF(rt_now_ms() < deadline, "%d of %d waits ended by the interrupt", ended, N_RACERS);
        readable(fd, 20);
    }
    atomic_store(&t.stop, true);
    pthread_join(worker, NULL);
    for (int i = 0; i < N_RACERS; i++)
        redmutex_wait_free(t.w[i]);
    CHECK(rs_count_keys(&srv, "*") == 1); /* the holder's lock only */
    CHECK_OK(redmutex_lock_release(h, NULL));
    redmutex_lock_free(l);
    redmutex_lock_free(h);
    redmutex_client_close(c);
    redmutex_client_free(c);
    redmutex_client_close(hc);
    redmutex_client_free(hc);
    rs_stop(&srv);
}

static void test_bad_input_is_refused(void)
{
    rs_start(&srv, NULL);
    redmutex_client *c = pw_client(5000);
    redmutex_lock *l = pw_lock(c, "pw:bad", REDMUTEX_KIND_RLOCK);
    redmutex_wait *w = NULL;
    CHECK_RC(redmutex_wait_new(NULL, l, NULL), REDMUTEX_EINVAL);
    CHECK_RC(redmutex_wait_new(&w, NULL, NULL), REDMUTEX_EINVAL);
    CHECK_RC(redmutex_wait_new(&w, l, ""), REDMUTEX_EINVAL);
    char big[REDMUTEX_OWNER_MAX + 2];
    memset(big, 'o', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    CHECK_RC(redmutex_wait_new(&w, l, big), REDMUTEX_EINVAL);
    CHECK(w == NULL);
    CHECK_RC(redmutex_wait_try(NULL), REDMUTEX_EINVAL);
    redmutex_wait_free(NULL);
    CHECK(redmutex_wait_id(NULL) == 0);
    uint64_t id;
    CHECK_RC(redmutex_client_wait_fd(NULL), REDMUTEX_EINVAL);
    CHECK_RC(redmutex_client_next_ready(NULL, &id), REDMUTEX_EINVAL);
    CHECK_RC(redmutex_client_next_ready(c, NULL), REDMUTEX_EINVAL);
    CHECK_RC(redmutex_client_next_ready(c, &id), 0);
    /* A wait of a key of another type fails like an acquire and holds nothing. */
    freeReplyObject(rs_cmd(&srv, "SET pw:bad a-string"));
    CHECK_OK(redmutex_wait_new(&w, l, "someone"));
    CHECK_RC(redmutex_wait_try(w), REDMUTEX_EWRONGTYPE);
    redmutex_wait_free(w);
    CHECK(rs_count_keys(&srv, "*") == 1);
    redmutex_lock_free(l);
    redmutex_client_free(c);
    rs_stop(&srv);
}

/*
 * redmutex_client_close() ends every wait in progress: a pollable wait too
 * becomes ready at once (not at its next due time, a minute away here), so
 * the loop that polls the wait fd learns it; its try reports
 * REDMUTEX_ECLOSED and it leaves the server's fair queue.
 */
static void test_close_makes_every_pollable_wait_ready(void)
{
    rs_start(&srv, NULL);
    redmutex_client *c = pw_client(60000), *hc = pw_client(60000);
    redmutex_lock *l = pw_lock(c, "pw:closef", REDMUTEX_KIND_FAIR), *h = pw_lock(hc, "pw:closef", REDMUTEX_KIND_FAIR);
    redmutex_lock *pl = pw_lock(c, "pw:close-plain", REDMUTEX_KIND_LOCK);
    redmutex_lock *ph = pw_lock(hc, "pw:close-plain", REDMUTEX_KIND_LOCK);
    CHECK_OK(redmutex_lock_acquire(h, "holder", 0));
    CHECK_OK(redmutex_lock_acquire(ph, NULL, 0));
    redmutex_wait *tried, *untried, *plain;
    CHECK_OK(redmutex_wait_new(&tried, l, "a"));
    CHECK_OK(redmutex_wait_new(&untried, l, "b"));
    CHECK_OK(redmutex_wait_new(&plain, pl, NULL));
    CHECK_RC(redmutex_wait_try(tried), REDMUTEX_ETIMEDOUT);
    CHECK_RC(redmutex_wait_try(plain), REDMUTEX_ETIMEDOUT);
    CHECK(rs_int(&srv, "LLEN redisson_lock_queue:{pw:closef}") == 1);
    drain_ready(c);
    CHECK(redmutex_client_wait_fd(c) >= 0);
    CHECK_OK(redmutex_client_close(c));
    redmutex_wait *ws[] = {tried, untried, plain};
    int64_t ms = await_each_ready(c, ws, 3, 2000);
    CHECKF(ms < rt_scaled_ms(500), "ready %lld ms after the close returned", (long long)ms);
    CHECK_RC(redmutex_wait_try(tried), REDMUTEX_ECLOSED);
    CHECK_RC(redmutex_wait_try(untried), REDMUTEX_ECLOSED);
    CHECK_RC(redmutex_wait_try(plain), REDMUTEX_ECLOSED);
    redmutex_wait_free(tried);
    redmutex_wait_free(untried);
    redmutex_wait_free(plain);
    /* Nobody is left in the fair queue: the holder's release frees the lock. */
    CHECK(rs_int(&srv, "LLEN redisson_lock_queue:{pw:closef}") == 0);
    CHECK_OK(redmutex_lock_release(h, "holder"));
    CHECK(!rs_exists(&srv, "pw:closef"));
    CHECK_OK(redmutex_lock_release(ph, NULL));
    redmutex_lock_free(l);
    redmutex_lock_free(pl);
    redmutex_lock_free(h);
    redmutex_lock_free(ph);
    redmutex_client_free(c);
    redmutex_client_close(hc);
    redmutex_client_free(hc);
    rs_stop(&srv);
}

/*
 * The close's wake-up is not lost when the ready list empties meanwhile: a
 * queued wait freed right after the close drains the wait fd (the list is
 * empty), yet the fd becomes readable for the untried wait the close ended.
 */
static void test_close_is_not_lost_to_a_free_that_empties_the_ready_list(void)
{
    rs_start(&srv, NULL);
    redmutex_client *c = pw_client(60000), *hc = pw_client(60000);
    redmutex_lock *lx = pw_lock(c, "pw:cfx", REDMUTEX_KIND_LOCK), *hx = pw_lock(hc, "pw:cfx", REDMUTEX_KIND_LOCK);
    redmutex_lock *ly = pw_lock(c, "pw:cfy", REDMUTEX_KIND_LOCK);
    CHECK_OK(redmutex_lock_acquire(hx, NULL, 0));
    redmutex_wait *d, *untried;
    CHECK_OK(redmutex_wait_new(&d, lx, NULL));
    CHECK_OK(redmutex_wait_new(&untried, ly, NULL));
    CHECK_RC(redmutex_wait_try(d), REDMUTEX_ETIMEDOUT);
    WAIT_FOR(rs_numsub(&srv, "redisson_lock__channel:{pw:cfx}") == 1, 2000);
    int fd = redmutex_client_wait_fd(c);
    /* Until nothing is due any more: the subscription's confirmation and
       d's first due time (its 50 ms backoff) have both come and gone. */
    do
        drain_ready(c);
    while (readable(fd, 300));
    CHECK(!readable(fd, 0));
    CHECK_OK(redmutex_lock_release(hx, NULL)); /* the release message makes d ready (queued) */
    CHECK(readable(fd, rt_scaled_ms(2000)));
    CHECK_OK(redmutex_client_close(c));
    redmutex_wait_free(d); /* unqueues d: the list is empty, the fd drained */
    CHECKF(readable(fd, rt_scaled_ms(1000)), "the wait fd is not readable after the close and the free");
    uint64_t id = 0;
    CHECK(redmutex_client_next_ready(c, &id) == 1 && id == redmutex_wait_id(untried));
    CHECK_RC(redmutex_wait_try(untried), REDMUTEX_ECLOSED);
    redmutex_wait_free(untried);
    redmutex_lock_free(lx);
    redmutex_lock_free(ly);
    redmutex_lock_free(hx);
    redmutex_client_free(c);
    redmutex_client_close(hc);
    redmutex_client_free(hc);
    rs_stop(&srv);
}

int main(int argc, char **argv)
{
    static const rt_test tests[] = {
        {"release_message_makes_the_wait_ready", test_release_message_makes_the_wait_ready},
        {"uncontended_wait_does_not_subscribe", test_uncontended_wait_does_not_subscribe},
        {"release_by_the_same_client_hands_the_lock_over", test_release_by_the_same_client_hands_the_lock_over},
        {"free_gives_back_a_lock_handed_over_meanwhile", test_free_gives_back_a_lock_handed_over_meanwhile},
        {"lease_end_makes_the_wait_ready", test_lease_end_makes_the_wait_ready},
        {"backoff_cap_bounds_a_silent_release", test_backoff_cap_bounds_a_silent_release},
        {"many_waits_share_three_descriptors_and_are_served_in_order",
         test_many_waits_share_three_descriptors_and_are_served_in_order},
        {"new_wait_queues_behind_older_ones", test_new_wait_queues_behind_older_ones},
        {"wait_rides_out_a_stall", test_wait_rides_out_a_stall},
        {"free_racing_a_hand_off_leaves_nothing", test_free_racing_a_hand_off_leaves_nothing},
        {"fair_wait_cancelled_at_a_hand_off_and_retried_before_its_free_leaves_no_orphan",
         test_fair_wait_cancelled_at_a_hand_off_and_retried_before_its_free_leaves_no_orphan},
        {"blocking_retry_waits_behind_a_cancelled_fair_wait_of_its_owner",
         test_blocking_retry_waits_behind_a_cancelled_fair_wait_of_its_owner},
        {"fair_wait_cancelled_around_a_hand_off_never_orphans_the_lock",
         test_fair_wait_cancelled_around_a_hand_off_never_orphans_the_lock},
        {"close_makes_waits_ready_and_frees_work_in_any_order",
         test_close_makes_waits_ready_and_frees_work_in_any_order},
        {"interrupt_ends_pollable_waits_begun_before_it", test_interrupt_ends_pollable_waits_begun_before_it},
        {"interrupt_while_a_worker_tries_ends_every_wait", test_interrupt_while_a_worker_tries_ends_every_wait},
        {"close_makes_every_pollable_wait_ready", test_close_makes_every_pollable_wait_ready},
        {"close_is_not_lost_to_a_free_that_empties_the_ready_list",
         test_close_is_not_lost_to_a_free_that_empties_the_ready_list},
        {"bad_input_is_refused", test_bad_input_is_refused},
    };
    return rt_run(tests, sizeof tests / sizeof tests[0], argc, argv);
}
