/*
 * Races between threads of one client, made deterministic with a proxy that
 * holds back one kind of request (a renewal, an extend, a SUBSCRIBE). Each
 * case was a real bug once; under AddressSanitizer they would show as
 * use-after-free, here they must end with the documented results.
 */
#define _GNU_SOURCE
#include "harness.h"
#include "scripts.h" /* rm_script_sha(), to delay one script by its SHA */

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

static rs_server srv;

static redmutex_client *client_via(const char *url, int64_t lease_ms, int64_t timeout_ms)
{
    redmutex_client_options o = REDMUTEX_CLIENT_OPTIONS_INIT;
    o.watchdog_lease_ms = lease_ms;
    o.command_timeout_ms = timeout_ms;
    redmutex_client *c;
    CHECK_OK(redmutex_client_new(&c, &url, 1, &o));
    return c;
}

/* ---- forgetting a hold while its renewal is in flight ------------------ */

static redmutex_lock *shared_lock;
static atomic_int results[2];

static void *force_release_thread(void *p)
{
    int out = -1;
    int rc = redmutex_lock_force_release(&out, shared_lock);
    atomic_store(&results[(intptr_t)p], rc == 0 ? out : 100 + rc);
    return NULL;
}

static void *release_thread(void *p)
{
    rt_sleep_ms(20);
    atomic_store(&results[(intptr_t)p], 200 + redmutex_lock_release(shared_lock, NULL));
    return NULL;
}

static void forget_during_renewal(bool second_is_release)
{
    rs_start(&srv, NULL);
    rs_proxy *proxy = rs_proxy_start(&srv, rm_script_sha(RM_SCRIPT_RENEW), (int)rt_scaled_ms(500));
    redmutex_client *c = client_via(proxy->url, rt_scaled_ms(300), rt_scaled_ms(2000));
    CHECK_OK(redmutex_lock_new(&shared_lock, c, "forget", REDMUTEX_KIND_LOCK, NULL));
    CHECK_OK(redmutex_lock_acquire(shared_lock, NULL, 0));
    WAIT_FOR(atomic_load(&proxy->delayed) > 0, 2000); /* a renewal is held up now */
    pthread_t a, b;
    pthread_create(&a, NULL, force_release_thread, (void *)0);
    pthread_create(&b, NULL, second_is_release ? release_thread : force_release_thread, (void *)1);
    pthread_join(a, NULL);
    pthread_join(b, NULL);
    int r0 = atomic_load(&results[0]), r1 = atomic_load(&results[1]);
    if (second_is_release) {
        /* Either the release ran first (then force found nothing) or force did (then release reports it lost). */
        CHECKF((r0 == 0 && r1 == 200) || (r0 == 1 && (r1 == 200 + REDMUTEX_ELOST || r1 == 200 + REDMUTEX_ENOTOWNER)),
               "force_release -> %d, release -> %d", r0, r1 - 200);
    } else {
        CHECKF(r0 + r1 == 1 && (r0 == 1 || r1 == 1), "force_release deleted %d and %d times", r0, r1);
    }
    CHECK(!rs_exists(&srv, "forget"));
    redmutex_state st;
    CHECK_OK(redmutex_lock_state(&st, shared_lock, NULL));
    CHECK(st == REDMUTEX_STATE_UNLOCKED);
    redmutex_lock_free(shared_lock);
    redmutex_client_close(c);
    redmutex_client_free(c);
    rs_proxy_stop(proxy);
}

static void test_two_force_releases_during_a_renewal(void) { forget_during_renewal(false); }
static void test_force_release_and_release_during_a_renewal(void) { forget_during_renewal(true); }

/* ---- freeing a handle while its renewal is in flight --------------------- */

static atomic_int callbacks_after_free;
static atomic_bool handle_freed;

static void count_late_callback(redmutex_lock *l, const char *owner, redmutex_state st, void *payload)
{
    (void)l;
    (void)owner;
    (void)st;
    (void)payload;
    rt_sleep_ms(50); /* a callback doing some work */
    if (atomic_load(&handle_freed))
        atomic_fetch_add(&callbacks_after_free, 1);
}

static void test_lock_free_during_renewal_runs_no_callback_after(void)
{
    rs_start(&srv, NULL);
    rs_proxy *proxy = rs_proxy_start(&srv, rm_script_sha(RM_SCRIPT_RENEW), (int)rt_scaled_ms(500));
    redmutex_client *c = client_via(proxy->url, rt_scaled_ms(300), rt_scaled_ms(2000));
    redmutex_lock_options o = REDMUTEX_LOCK_OPTIONS_INIT;
    o.on_lost = count_late_callback;
    redmutex_lock *l;
    CHECK_OK(redmutex_lock_new(&l, c, "freed", REDMUTEX_KIND_LOCK, &o));
    CHECK_OK(redmutex_lock_acquire(l, NULL, 0));
    CHECK(rs_int(&srv, "DEL freed") == 1); /* the renewal in flight will find it gone */
    WAIT_FOR(atomic_load(&proxy->delayed) > 0, 2000);
    redmutex_lock_free(l); /* waits for the renewal, drops its news */
    atomic_store(&handle_freed, true);
    rt_sleep_ms(400);
    CHECK(atomic_load(&callbacks_after_free) == 0);
    redmutex_client_close(c);
    redmutex_client_free(c);
    rs_proxy_stop(proxy);
}

/* ---- release while an extend of the same hold is in flight ------------- */

static atomic_int extend_rc;

static void *extend_thread(void *p)
{
    atomic_store(&extend_rc, redmutex_lock_extend(p, NULL, 5000, REDMUTEX_EXTEND_ADD));
    return NULL;
}

static void test_release_waits_for_an_extend_in_flight(void)
{
    rs_start(&srv, NULL);
    rs_proxy *proxy = rs_proxy_start(&srv, rm_script_sha(RM_SCRIPT_LOCK_EXTEND), (int)rt_scaled_ms(300));
    redmutex_client *c = client_via(proxy->url, rt_scaled_ms(30000), rt_scaled_ms(2000));
    redmutex_lock *l;
    CHECK_OK(redmutex_lock_new(&l, c, "ext", REDMUTEX_KIND_LOCK, NULL));
    CHECK_OK(redmutex_lock_acquire(l, NULL, 0));
    pthread_t t;
    pthread_create(&t, NULL, extend_thread, l);
    WAIT_FOR(atomic_load(&proxy->delayed) > 0, 2000);
    CHECK_OK(redmutex_lock_release(l, NULL)); /* not a false "not owner" */
    pthread_join(t, NULL);
    CHECK_OK(atomic_load(&extend_rc));
    CHECK(!rs_exists(&srv, "ext"));
    redmutex_state st;
    CHECK_OK(redmutex_lock_state(&st, l, NULL));
    CHECK(st == REDMUTEX_STATE_UNLOCKED);
    redmutex_lock_free(l);
    redmutex_client_close(c);
    redmutex_client_free(c);
    rs_proxy_stop(proxy);
}

/* ---- client freed while a thread waits for its subscription --------------- */

static atomic_int waiter_rc;

static void *waiting_thread(void *p)
{
    atomic_store(&waiter_rc, redmutex_lock_acquire(p, NULL, 5000));
    return NULL;
}

static void test_client_free_while_a_thread_waits_for_its_subscription(void)
{
    rs_start(&srv, NULL);
    rs_proxy *proxy = rs_proxy_start(&srv, "SUBSCRIBE", (int)rt_scaled_ms(1500)); /* the confirmation is slow */
    redmutex_client *waiting = client_via(proxy->url, rt_scaled_ms(30000), rt_scaled_ms(3000)),
                    *holding = rt_client(&srv, 0);
    redmutex_lock *held, *wanted;
    CHECK_OK(redmutex_lock_new(&held, holding, "sub", REDMUTEX_KIND_LOCK, NULL));
    CHECK_OK(redmutex_lock_new(&wanted, waiting, "sub", REDMUTEX_KIND_LOCK, NULL));
    CHECK_OK(redmutex_lock_acquire(held, NULL, 0));
    pthread_t t;
    pthread_create(&t, NULL, waiting_thread, wanted);
    WAIT_FOR(atomic_load(&proxy->delayed) > 0, 3000);
    redmutex_client_close(waiting);
    redmutex_client_free(waiting);
    pthread_join(t, NULL);
    CHECK_RC(atomic_load(&waiter_rc), REDMUTEX_ECLOSED);
    redmutex_lock_free(wanted);
    CHECK_OK(redmutex_lock_release(held, NULL));
    redmutex_lock_free(held);
    redmutex_client_close(holding);
    redmutex_client_free(holding);
    rs_proxy_stop(proxy);
}

/* ---- without a proxy ------------------------------------------------------ */

static void test_retried_release_latch_is_not_reused_after_reacquire(void)
{
    rs_start(&srv, NULL);
    redmutex_client *c = rt_client(&srv, 300);
    redmutex_lock *l;
    CHECK_OK(redmutex_lock_new(&l, c, "latch2", REDMUTEX_KIND_RLOCK, NULL));
    CHECK_OK(redmutex_lock_acquire(l, NULL, 0));
    rs_pause(&srv);
    CHECK_RC(redmutex_lock_release(l, NULL), REDMUTEX_ECONN); /* outcome unknown... */
    rs_resume(&srv);
    WAIT_FOR(!rs_exists(&srv, "latch2"), 2000);  /* ...it did run */
    CHECK_OK(redmutex_lock_acquire(l, NULL, 0)); /* the owner takes it again instead of retrying */
    CHECK(rs_exists(&srv, "latch2"));
    CHECK_OK(redmutex_lock_release(l, NULL)); /* a new request id: really released */
    CHECK(!rs_exists(&srv, "latch2"));
    redmutex_lock_free(l);
    redmutex_client_close(c);
    redmutex_client_free(c);
}

static void test_extend_replace_on_a_watchdog_hold_renews_sooner(void)
{
    rs_start(&srv, NULL);
    redmutex_client *c = client_via(srv.url, rt_scaled_ms(3000), rt_scaled_ms(1000)); /* renewals every 900 ms */
    redmutex_lock *l;
    CHECK_OK(redmutex_lock_new(&l, c, "shorter", REDMUTEX_KIND_LOCK, NULL));
    CHECK_OK(redmutex_lock_acquire(l, NULL, 0));
    /* A lease far shorter than the renewal period: it lives only if the
       renewals come sooner now. */
    CHECK_OK(redmutex_lock_extend(l, NULL, rt_scaled_ms(200), REDMUTEX_EXTEND_REPLACE));
    int64_t end = rt_now_ms() + rt_scaled_ms(1500);
    while (rt_now_ms() < end) {
        CHECK(rs_exists(&srv, "shorter"));
        rt_sleep_ms(10);
    }
    redmutex_state st;
    CHECK_OK(redmutex_lock_state(&st, l, NULL));
    CHECK(st == REDMUTEX_STATE_HELD);
    CHECK_OK(redmutex_lock_release(l, NULL));
    redmutex_lock_free(l);
    redmutex_client_close(c);
    redmutex_client_free(c);
}

static redmutex_lock *stale_handle;
static atomic_int stale_rc;

static void *stale_waiter(void *p)
{
    (void)p;
    atomic_store(&stale_rc, redmutex_lock_acquire(stale_handle, NULL, 3000));
    return NULL;
}

static void test_handoff_never_revives_a_lost_hold(void)
{
    rs_start(&srv, NULL);
    redmutex_client *c = rt_client(&srv, 0);
    redmutex_lock_options o = REDMUTEX_LOCK_OPTIONS_INIT;
    o.lease_ms = 2000;
    redmutex_lock *other;
    CHECK_OK(redmutex_lock_new(&stale_handle, c, "revive", REDMUTEX_KIND_LOCK, &o));
    CHECK_OK(redmutex_lock_new(&other, c, "revive", REDMUTEX_KIND_LOCK, NULL));
    CHECK_OK(redmutex_lock_acquire(stale_handle, NULL, 0));
    CHECK(rs_int(&srv, "DEL revive") == 1); /* lost behind its back */
    CHECK_OK(redmutex_lock_acquire(other, NULL, 0));
    pthread_t t;
    pthread_create(&t, NULL, stale_waiter, NULL);
    pthread_join(t, NULL);
    /* The handle still carries its lost hold: it must be released first, not waited on or revived. */
    CHECK_RC(atomic_load(&stale_rc), REDMUTEX_ELOST);
    CHECK_OK(redmutex_lock_release(other, NULL));
    CHECK_RC(redmutex_lock_release(stale_handle, NULL), REDMUTEX_ELOST);
    CHECK(!rs_exists(&srv, "revive"));
    CHECK_OK(redmutex_lock_acquire(stale_handle, NULL, 0));
    CHECK_OK(redmutex_lock_release(stale_handle, NULL));
    redmutex_lock_free(stale_handle);
    redmutex_lock_free(other);
    redmutex_client_close(c);
    redmutex_client_free(c);
}

static redmutex_lock *other_process_lock;
static _Atomic int64_t released_at_us;

static void *release_later(void *p)
{
    (void)p;
    rt_sleep_ms(200);
    atomic_store(&released_at_us, rt_now_us());
    redmutex_lock_release(other_process_lock, NULL);
    return NULL;
}

static void test_own_release_message_never_swallows_the_next(void)
{
    rs_start(&srv, NULL);
    redmutex_client_options o = REDMUTEX_CLIENT_OPTIONS_INIT;
    o.wait_backoff_cap_ms = 3000; /* a missed message would cost seconds */
    const char *u = srv.url;
    redmutex_client *mine, *theirs;
    CHECK_OK(redmutex_client_new(&mine, &u, 1, &o));
    theirs = rt_client(&srv, 0); /* stands for another process */
    redmutex_lock *l;
    CHECK_OK(redmutex_lock_new(&l, mine, "skip", REDMUTEX_KIND_LOCK, NULL));
    CHECK_OK(redmutex_lock_new(&other_process_lock, theirs, "skip", REDMUTEX_KIND_LOCK, NULL));
    for (int i = 0; i < 10; i++) {
        CHECK_OK(redmutex_lock_acquire(other_process_lock, NULL, REDMUTEX_WAIT_FOREVER));
        pthread_t t;
        pthread_create(&t, NULL, release_later, NULL);
        CHECK_OK(redmutex_lock_acquire(l, NULL, 10000));
        int64_t late_ms = (rt_now_us() - atomic_load(&released_at_us)) / 1000;
        pthread_join(t, NULL);
        CHECKF(late_ms < 500, "round %d: woke %lld ms after the other client's release", i, (long long)late_ms);
        CHECK_OK(redmutex_lock_release(l, NULL)); /* its own message must not stay armed */
        rt_sleep_ms(30);
    }
    redmutex_lock_free(l);
    redmutex_lock_free(other_process_lock);
    redmutex_client_close(mine);
    redmutex_client_free(mine);
    redmutex_client_close(theirs);
    redmutex_client_free(theirs);
}

/* ---- waiters that read the pub/sub connection themselves ---------------- */

typedef struct waiting {
    redmutex_lock *l;
    pthread_t t;
    atomic_llong done_us; /* when acquire returned, 0 before */
    atomic_int rc;
} waiting;

static void *wait_thread(void *p)
{
    waiting *a = p;
    int rc = redmutex_lock_acquire(a->l, NULL, rt_scaled_ms(20000));
    atomic_store(&a->rc, rc);
    atomic_store(&a->done_us, rt_now_us());
    return NULL;
}

/* A waiter that has waited this long retries on its own only 1.2 s or more
   later (its backoff doubles from 50 ms, less up to a quarter of jitter: its
   retries come at 1.16-1.55 s, then 2.36-3.15 s, then 4.76-6.35 s after it
   began): a wake-up within 500 ms of a release was the release's message. */
#define ASLEEP_MS 3500
#define PROMPT_MS 500

/* Starts a thread waiting for `name` (held by another client); returns once it is subscribed. */
static void start_waiting(waiting *a, redmutex_client *c, const char *name)
{
    char channel[128];
    snprintf(channel, sizeof channel, "redisson_lock__channel:{%s}", name);
    CHECK_OK(redmutex_lock_new(&a->l, c, name, REDMUTEX_KIND_LOCK, NULL));
    atomic_store(&a->done_us, 0);
    atomic_store(&a->rc, -1);
    pthread_create(&a->t, NULL, wait_thread, a);
    int64_t deadline = rt_now_ms() + rt_scaled_ms(5000);
    while (rs_numsub(&srv, channel) != 1 && rt_now_ms() < deadline)
        rt_sleep_ms(5);
    CHECKF(rs_numsub(&srv, channel) == 1, "the waiter for %s never subscribed", name);
}

/* Releases `theirs` and checks that a (and only a) acquires promptly. */
static void release_wakes(redmutex_lock *theirs, waiting *a, waiting *still)
{
    int64_t released = rt_now_us();
    CHECK_OK(redmutex_lock_release(theirs, NULL));
    pthread_join(a->t, NULL);
    CHECK_OK(atomic_load(&a->rc));
    int64_t late_ms = (atomic_load(&a->done_us) - released) / 1000;
    CHECKF(late_ms < PROMPT_MS, "woke %lld ms after the release", (long long)late_ms);
    CHECK(!still || atomic_load(&still->done_us) == 0);
    CHECK_OK(redmutex_lock_release(a->l, NULL));
    redmutex_lock_free(a->l);
}

static redmutex_client *patient_client(void)
{
    redmutex_client_options o = REDMUTEX_CLIENT_OPTIONS_INIT;
    o.wait_backoff_cap_ms = 30000; /* only a message explains a prompt wake-up */
    const char *u = srv.url;
    redmutex_client *c;
    CHECK_OK(redmutex_client_new(&c, &u, 1, &o));
    return c;
}

static void close_all(redmutex_client *a, redmutex_client *b)
{
    redmutex_client_close(a);
    redmutex_client_free(a);
    redmutex_client_close(b);
    redmutex_client_free(b);
}

/* Two threads of one client wait for two locks; the first to wait reads
   the subscription and must pass the other's message on, and after it is
   gone the other's message must still arrive. */
static void leader_and_follower(bool leader_first)
{
    rs_start(&srv, NULL);
    redmutex_client *mine = patient_client(), *theirs = rt_client(&srv, 0);
    redmutex_lock *x, *y;
    CHECK_OK(redmutex_lock_new(&x, theirs, "lead:x", REDMUTEX_KIND_LOCK, NULL));
    CHECK_OK(redmutex_lock_new(&y, theirs, "lead:y", REDMUTEX_KIND_LOCK, NULL));
    CHECK_OK(redmutex_lock_acquire(x, NULL, 0));
    CHECK_OK(redmutex_lock_acquire(y, NULL, 0));
    waiting lead, follow;
    start_waiting(&lead, mine, "lead:x");
    start_waiting(&follow, mine, "lead:y");
    rt_sleep_ms(ASLEEP_MS);
    CHECK(atomic_load(&lead.done_us) == 0 && atomic_load(&follow.done_us) == 0);
    if (leader_first) {
        release_wakes(x, &lead, &follow);
        release_wakes(y, &follow, NULL);
    } else {
        release_wakes(y, &follow, &lead);
        release_wakes(x, &lead, NULL);
    }
    redmutex_lock_free(x);
    redmutex_lock_free(y);
    close_all(mine, theirs);
}

static void test_a_waiter_that_reads_passes_on_another_waiters_message(void) { leader_and_follower(false); }

static void test_a_waiters_message_arrives_after_the_reading_waiter_left(void) { leader_and_follower(true); }

/* The waiter reading the subscription sees it killed: the subscriber
   thread reconnects and the next release still wakes it promptly. */
static void test_a_reading_waiter_survives_a_killed_subscription(void)
{
    rs_start(&srv, NULL);
    redmutex_client *mine = patient_client(), *theirs = rt_client(&srv, 0);
    redmutex_lock *x;
    CHECK_OK(redmutex_lock_new(&x, theirs, "lead:kill", REDMUTEX_KIND_LOCK, NULL));
    CHECK_OK(redmutex_lock_acquire(x, NULL, 0));
    waiting w;
    start_waiting(&w, mine, "lead:kill");
    rt_sleep_ms(50); /* past its attempt after subscribing: asleep, reading the subscription */
    CHECK(rs_int(&srv, "CLIENT KILL TYPE pubsub") == 1);
    int64_t deadline = rt_now_ms() + rt_scaled_ms(5000);
    while (rs_numsub(&srv, "redisson_lock__channel:{lead:kill}") != 1 && rt_now_ms() < deadline)
        rt_sleep_ms(5);
    CHECKF(rs_numsub(&srv, "redisson_lock__channel:{lead:kill}") == 1, "never subscribed again");
    rt_sleep_ms(ASLEEP_MS); /* past the retry the lost connection caused */
    CHECK(atomic_load(&w.done_us) == 0);
    release_wakes(x, &w, NULL);
    redmutex_lock_free(x);
    close_all(mine, theirs);
}

int main(int argc, char **argv)
{
    static const rt_test tests[] = {
        {"two_force_releases_during_a_renewal", test_two_force_releases_during_a_renewal},
        {"force_release_and_release_during_a_renewal", test_force_release_and_release_during_a_renewal},
        {"lock_free_during_renewal_runs_no_callback_after", test_lock_free_during_renewal_runs_no_callback_after},
        {"release_waits_for_an_extend_in_flight", test_release_waits_for_an_extend_in_flight},
        {"client_free_while_a_thread_waits_for_its_subscription",
         test_client_free_while_a_thread_waits_for_its_subscription},
        {"retried_release_latch_is_not_reused_after_reacquire",
         test_retried_release_latch_is_not_reused_after_reacquire},
        {"extend_replace_on_a_watchdog_hold_renews_sooner", test_extend_replace_on_a_watchdog_hold_renews_sooner},
        {"handoff_never_revives_a_lost_hold", test_handoff_never_revives_a_lost_hold},
        {"own_release_message_never_swallows_the_next", test_own_release_message_never_swallows_the_next},
        {"a_waiter_that_reads_passes_on_another_waiters_message",
         test_a_waiter_that_reads_passes_on_another_waiters_message},
        {"a_waiters_message_arrives_after_the_reading_waiter_left",
         test_a_waiters_message_arrives_after_the_reading_waiter_left},
        {"a_reading_waiter_survives_a_killed_subscription", test_a_reading_waiter_survives_a_killed_subscription},
    };
    return rt_run(tests, sizeof tests / sizeof tests[0], argc, argv);
}
