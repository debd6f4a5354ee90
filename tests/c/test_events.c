/*
 * Pollable lost-lock events: the client's event fd becomes readable when a
 * hold turns RENEWAL_FAILING or LOST (or HELD again), with or without an
 * on_lost callback; redmutex_client_next_event() drains it on the caller's
 * own thread. Losses are made real: a key deleted behind the holder's back,
 * a redis-server stopped with SIGSTOP, a lease that runs out. Leases, timeouts
 * and bounds are stretched by REDMUTEX_TEST_TIME_SCALE (valgrind).
 */
#define _GNU_SOURCE
#include "harness.h"

#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdatomic.h>
#include <string.h>

static rs_server srv;

static redmutex_client *ev_client(int64_t lease_ms, int64_t cmd_timeout_ms)
{
    redmutex_client_options o = REDMUTEX_CLIENT_OPTIONS_INIT;
    o.watchdog_lease_ms = rt_scaled_ms(lease_ms);
    o.command_timeout_ms = rt_scaled_ms(cmd_timeout_ms);
    o.shutdown_timeout_ms = 1000;
    const char *url = srv.url;
    redmutex_client *c;
    CHECK_OK(redmutex_client_new(&c, &url, 1, &o));
    return c;
}

static redmutex_lock *ev_lock(redmutex_client *c, const char *name, redmutex_kind kind, int64_t lease_ms)
{
    redmutex_lock_options o = REDMUTEX_LOCK_OPTIONS_INIT;
    o.lease_ms = rt_scaled_ms(lease_ms);
    redmutex_lock *l;
    CHECK_OK(redmutex_lock_new(&l, c, name, kind, &o));
    return l;
}

static bool readable(int fd, int ms)
{
    struct pollfd p = {fd, POLLIN, 0};
    return poll(&p, 1, (int)rt_scaled_ms(ms)) == 1 && (p.revents & POLLIN);
}

typedef struct event {
    uint64_t lock_id;
    redmutex_state state;
    char owner[REDMUTEX_OWNER_MAX + 1];
} event;

/* Waits (poll on the fd, with a deadline) for the next event and pops it. */
static event next_event(redmutex_client *c, int timeout_ms)
{
    int fd = redmutex_client_event_fd(c);
    CHECK(fd >= 0);
    CHECKF(readable(fd, timeout_ms), "no event within %d ms", timeout_ms);
    event e;
    CHECK_RC(redmutex_client_next_event(c, &e.lock_id, &e.state, e.owner, sizeof e.owner), 1);
    return e;
}

static void check_empty(redmutex_client *c)
{
    event e;
    CHECK_RC(redmutex_client_next_event(c, &e.lock_id, &e.state, e.owner, sizeof e.owner), 0);
    CHECK(!readable(redmutex_client_event_fd(c), 0));
}

static void deleted_key_gives_lost_event(redmutex_kind kind)
{
    rs_start(&srv, NULL);
    redmutex_client *c = ev_client(300, 200);
    redmutex_lock *l = ev_lock(c, "gone", kind, 0); /* no on_lost callback */
    int fd = redmutex_client_event_fd(c);
    CHECK(fd >= 0 && redmutex_client_event_fd(c) == fd);
    CHECK_OK(redmutex_lock_acquire(l, NULL, 0));
    CHECK(!readable(fd, 150)); /* renewals succeed: no news */
    CHECK(rs_int(&srv, "DEL gone") == 1);
    event e = next_event(c, 2000);
    CHECK(e.lock_id == redmutex_lock_id(l) && e.lock_id > 0);
    CHECK(e.state == REDMUTEX_STATE_LOST);
    if (kind == REDMUTEX_KIND_LOCK) {
        CHECK(e.owner[0] == '\0');
    } else {
        char me[128];
        CHECK_OK(redmutex_client_thread_owner(me, sizeof me, c));
        CHECKF(strcmp(e.owner, me) == 0, "owner '%s', expected '%s'", e.owner, me);
    }
    check_empty(c);
    CHECK_RC(redmutex_lock_release(l, NULL), REDMUTEX_ELOST);
    redmutex_lock_free(l);
    redmutex_client_free(c);
}

static void test_plain_deleted_key_gives_lost_event(void) { deleted_key_gives_lost_event(REDMUTEX_KIND_LOCK); }
static void test_rlock_deleted_key_gives_lost_event(void) { deleted_key_gives_lost_event(REDMUTEX_KIND_RLOCK); }

static void test_stopped_server_gives_failing_then_lost_events(void)
{
    rs_start(&srv, NULL);
    const int64_t lease = 900;
    redmutex_client *c = ev_client(lease, 150);
    redmutex_lock *l = ev_lock(c, "stalled", REDMUTEX_KIND_LOCK, 0);
    CHECK_OK(redmutex_lock_acquire(l, NULL, 0));
    rs_pause(&srv);
    int64_t paused = rt_now_ms();
    event e = next_event(c, 2000);
    CHECK(e.lock_id == redmutex_lock_id(l) && e.state == REDMUTEX_STATE_RENEWAL_FAILING);
    e = next_event(c, 3000);
    CHECK(e.lock_id == redmutex_lock_id(l) && e.state == REDMUTEX_STATE_LOST);
    int64_t lost_after = rt_now_ms() - paused;
    /* At the end of validity (at most a lease after the stop), not a renewal attempt later. */
    CHECKF(lost_after <= rt_scaled_ms(lease + 600), "LOST came %lld ms after the stop", (long long)lost_after);
    rs_resume(&srv);
    check_empty(c);
    redmutex_lock_free(l);
    redmutex_client_free(c);
}

static void test_short_stall_gives_failing_then_held_events(void)
{
    rs_start(&srv, NULL);
    redmutex_client *c = ev_client(1200, 100);
    redmutex_lock *l = ev_lock(c, "blip", REDMUTEX_KIND_LOCK, 0);
    CHECK_OK(redmutex_lock_acquire(l, NULL, 0));
    rs_pause(&srv);
    event e = next_event(c, 2000);
    CHECK(e.state == REDMUTEX_STATE_RENEWAL_FAILING);
    rs_resume(&srv);
    e = next_event(c, 2000);
    CHECK(e.lock_id == redmutex_lock_id(l) && e.state == REDMUTEX_STATE_HELD);
    CHECK_OK(redmutex_lock_release(l, NULL));
    check_empty(c);
    redmutex_lock_free(l);
    redmutex_client_free(c);
}

static void test_explicit_lease_expiry_gives_lost_event(void)
{
    rs_start(&srv, NULL);
    redmutex_client *c = ev_client(30000, 200);
    redmutex_lock *l = ev_lock(c, "leased", REDMUTEX_KIND_RLOCK, 300);
    int64_t t0 = rt_now_ms();
    CHECK_OK(redmutex_lock_acquire(l, "job-7", 0));
    event e = next_event(c, 2000);
    int64_t at = rt_now_ms() - t0;
    CHECKF(at >= rt_scaled_ms(280) && at <= rt_scaled_ms(1000), "expiry event after %lld ms for a 300 ms lease",
           (long long)at);
    CHECK(e.lock_id == redmutex_lock_id(l) && e.state == REDMUTEX_STATE_LOST && strcmp(e.owner, "job-7") == 0);
    check_empty(c);
    CHECK_RC(redmutex_lock_release(l, "job-7"), REDMUTEX_ELOST);
    redmutex_lock_free(l);
    redmutex_client_free(c);
}

static atomic_int callback_calls;

static void count_callback(redmutex_lock *l, const char *owner, redmutex_state st, void *payload)
{
    (void)l;
    (void)owner;
    (void)st;
    (void)payload;
    atomic_fetch_add(&callback_calls, 1);
}

static void test_callback_and_event_both_report_a_loss(void)
{
    rs_start(&srv, NULL);
    redmutex_client *c = ev_client(300, 200);
    redmutex_lock_options o = REDMUTEX_LOCK_OPTIONS_INIT;
    o.on_lost = count_callback;
    redmutex_lock *l;
    CHECK_OK(redmutex_lock_new(&l, c, "both", REDMUTEX_KIND_LOCK, &o));
    CHECK_OK(redmutex_lock_acquire(l, NULL, 0));
    CHECK(rs_int(&srv, "DEL both") == 1);
    event e = next_event(c, 2000);
    CHECK(e.state == REDMUTEX_STATE_LOST);
    WAIT_FOR(atomic_load(&callback_calls) == 1, 2000);
    redmutex_lock_free(l);
    redmutex_client_free(c);
}

static void test_events_outlive_the_handle_and_ids_are_never_reused(void)
{
    rs_start(&srv, NULL);
    redmutex_client *c = ev_client(30000, 200);
    redmutex_lock *l = ev_lock(c, "short", REDMUTEX_KIND_LOCK, 300);
    uint64_t id = redmutex_lock_id(l);
    CHECK_OK(redmutex_lock_acquire(l, NULL, 0));
    WAIT_FOR(readable(redmutex_client_event_fd(c), 0), 2000);
    redmutex_lock_free(l); /* the news stays queued, by id */
    event e = next_event(c, 0);
    CHECK(e.lock_id == id && e.state == REDMUTEX_STATE_LOST);
    uint64_t last = id;
    for (int i = 0; i < 100; i++) {
        CHECK_OK(redmutex_lock_new(&l, c, "short", REDMUTEX_KIND_LOCK, NULL));
        CHECK(redmutex_lock_id(l) > last);
        last = redmutex_lock_id(l);
        redmutex_lock_free(l);
    }
    CHECK(redmutex_lock_id(NULL) == 0);
    redmutex_client_free(c);
}

static void test_small_owner_buffer_keeps_the_event(void)
{
    rs_start(&srv, NULL);
    redmutex_client *c = ev_client(30000, 200);
    redmutex_lock *l = ev_lock(c, "owned", REDMUTEX_KIND_RLOCK, 300);
    CHECK_OK(redmutex_lock_acquire(l, "a-long-owner-id", 0));
    WAIT_FOR(readable(redmutex_client_event_fd(c), 0), 2000);
    uint64_t id;
    redmutex_state st;
    char small[4];
    CHECK_RC(redmutex_client_next_event(c, &id, &st, small, sizeof small), REDMUTEX_EINVAL);
    CHECK_RC(redmutex_client_next_event(c, &id, &st, NULL, 8), REDMUTEX_EINVAL);
    CHECK_RC(redmutex_client_next_event(c, NULL, &st, NULL, 0), REDMUTEX_EINVAL);
    CHECK_RC(redmutex_client_next_event(NULL, &id, &st, NULL, 0), REDMUTEX_EINVAL);
    CHECK_RC(redmutex_client_event_fd(NULL), REDMUTEX_EINVAL);
    CHECK(readable(redmutex_client_event_fd(c), 0));
    CHECK_RC(redmutex_client_next_event(c, &id, &st, NULL, 0), 1); /* the owner not wanted */
    CHECK(id == redmutex_lock_id(l) && st == REDMUTEX_STATE_LOST);
    check_empty(c);
    redmutex_lock_free(l);
    redmutex_client_free(c);
}

static void test_full_queue_drops_the_oldest_and_counts_them(void)
{
    rs_start(&srv, NULL);
    redmutex_client *c = ev_client(30000, 1000);
    enum { N = 1030, QUEUE = 1024 };
    static redmutex_lock *locks[N];
    char name[32];
    for (int i = 0; i < N; i++) {
        snprintf(name, sizeof name, "many:%d", i);
        locks[i] = ev_lock(c, name, REDMUTEX_KIND_LOCK, 2000);
    }
    for (int i = 0; i < N; i++)
        CHECK_OK(redmutex_lock_acquire(locks[i], NULL, 0));
    WAIT_FOR(redmutex_client_events_dropped(c) == N - QUEUE, 15000);
    /* The expiry notices come in the order of the acquisitions: the first ones were dropped. */
    int popped = 0;
    uint64_t id;
    redmutex_state st;
    while (redmutex_client_next_event(c, &id, &st, NULL, 0) == 1) {
        CHECKF(id == redmutex_lock_id(locks[N - QUEUE + popped]), "event %d is of lock id %llu", popped,
               (unsigned long long)id);
        popped++;
    }
    CHECK(popped == QUEUE);
    CHECK(redmutex_client_events_dropped(c) == N - QUEUE);
    CHECK(redmutex_client_events_dropped(NULL) == 0);
    check_empty(c);
    for (int i = 0; i < N; i++)
        redmutex_lock_free(locks[i]);
    redmutex_client_free(c);
}

/* What on_lost was told, in order (the watchdog thread writes, the test reads after it settles). */
typedef struct lost_log {
    pthread_mutex_t mu;
    size_t n;
    uint64_t id[64];
    redmutex_state state[64];
} lost_log;

static void log_callback(redmutex_lock *l, const char *owner, redmutex_state st, void *payload)
{
    (void)owner;
    lost_log *g = payload;
    pthread_mutex_lock(&g->mu);
    if (g->n < 64) {
        g->id[g->n] = redmutex_lock_id(l);
        g->state[g->n] = st;
    }
    g->n++;
    pthread_mutex_unlock(&g->mu);
}

static size_t logged(lost_log *g)
{
    pthread_mutex_lock(&g->mu);
    size_t n = g->n;
    pthread_mutex_unlock(&g->mu);
    return n;
}

/* One queue, two consumers: on_lost and the event fd are told the same news in the same order. */
static void test_on_lost_and_the_event_fd_are_told_one_sequence(void)
{
    rs_start(&srv, NULL);
    redmutex_client *c = ev_client(30000, 1000);
    static lost_log g = {PTHREAD_MUTEX_INITIALIZER, 0, {0}, {0}};
    enum { N = 6 };
    redmutex_lock *l[N];
    for (int i = 0; i < N; i++) {
        redmutex_lock_options o = REDMUTEX_LOCK_OPTIONS_INIT;
        o.lease_ms = rt_scaled_ms(300 + 100 * i); /* they expire one after the other */
        o.on_lost = log_callback;
        o.on_lost_payload = &g;
        char name[16];
        snprintf(name, sizeof name, "seq:%d", i);
        CHECK_OK(redmutex_lock_new(&l[i], c, name, REDMUTEX_KIND_LOCK, &o));
        CHECK_OK(redmutex_lock_acquire(l[i], NULL, 0));
    }
    for (int i = 0; i < N; i++) {
        event e = next_event(c, 5000);
        CHECKF(e.lock_id == redmutex_lock_id(l[i]) && e.state == REDMUTEX_STATE_LOST, "fd event %d: lock %llu", i,
               (unsigned long long)e.lock_id);
    }
    WAIT_FOR(logged(&g) == N, 5000);
    for (size_t i = 0; i < N; i++)
        CHECKF(g.id[i] == redmutex_lock_id(l[i]) && g.state[i] == REDMUTEX_STATE_LOST, "on_lost %zu: lock %llu", i,
               (unsigned long long)g.id[i]);
    check_empty(c);
    CHECK(logged(&g) == N);
    for (int i = 0; i < N; i++)
        redmutex_lock_free(l[i]);
    redmutex_client_free(c);
}

static atomic_int full_calls;

static void count_full(redmutex_lock *l, const char *owner, redmutex_state st, void *payload)
{
    (void)l;
    (void)owner;
    (void)st;
    (void)payload;
    atomic_fetch_add(&full_calls, 1);
}

/* The event fd's share of the queue is bounded; the callbacks still get every event. */
static void test_a_full_event_queue_still_calls_every_on_lost(void)
{
    rs_start(&srv, NULL);
    redmutex_client *c = ev_client(30000, 1000);
    enum { N = 1030, QUEUE = 1024 };
    static redmutex_lock *locks[N];
    for (int i = 0; i < N; i++) {
        redmutex_lock_options o = REDMUTEX_LOCK_OPTIONS_INIT;
        o.lease_ms = rt_scaled_ms(2000);
        o.on_lost = count_full;
        char name[32];
        snprintf(name, sizeof name, "fullcb:%d", i);
        CHECK_OK(redmutex_lock_new(&locks[i], c, name, REDMUTEX_KIND_LOCK, &o));
    }
    for (int i = 0; i < N; i++)
        CHECK_OK(redmutex_lock_acquire(locks[i], NULL, 0));
    WAIT_FOR(redmutex_client_events_dropped(c) == N - QUEUE, 15000);
    WAIT_FOR(atomic_load(&full_calls) == N, 15000);
    uint64_t id;
    redmutex_state st;
    int popped = 0;
    while (redmutex_client_next_event(c, &id, &st, NULL, 0) == 1)
        CHECK(id == redmutex_lock_id(locks[N - QUEUE + popped++]));
    CHECK(popped == QUEUE);
    for (int i = 0; i < N; i++)
        redmutex_lock_free(locks[i]);
    redmutex_client_free(c);
}

static void test_events_are_readable_after_close(void)
{
    rs_start(&srv, NULL);
    redmutex_client *c = ev_client(300, 200);
    redmutex_lock *l = ev_lock(c, "closing", REDMUTEX_KIND_LOCK, 0);
    CHECK_OK(redmutex_lock_acquire(l, NULL, 0));
    int fd = redmutex_client_event_fd(c);
    CHECK(rs_int(&srv, "DEL closing") == 1);
    WAIT_FOR(readable(fd, 0), 2000);
    CHECK_OK(redmutex_client_close(c));
    CHECK(redmutex_client_event_fd(c) == fd);
    event e = next_event(c, 0);
    CHECK(e.state == REDMUTEX_STATE_LOST);
    check_empty(c);
    redmutex_lock_free(l);
    redmutex_client_free(c);
}

int main(int argc, char **argv)
{
    static const rt_test tests[] = {
        {"plain_deleted_key_gives_lost_event", test_plain_deleted_key_gives_lost_event},
        {"rlock_deleted_key_gives_lost_event", test_rlock_deleted_key_gives_lost_event},
        {"stopped_server_gives_failing_then_lost_events", test_stopped_server_gives_failing_then_lost_events},
        {"short_stall_gives_failing_then_held_events", test_short_stall_gives_failing_then_held_events},
        {"explicit_lease_expiry_gives_lost_event", test_explicit_lease_expiry_gives_lost_event},
        {"callback_and_event_both_report_a_loss", test_callback_and_event_both_report_a_loss},
        {"events_outlive_the_handle_and_ids_are_never_reused", test_events_outlive_the_handle_and_ids_are_never_reused},
        {"small_owner_buffer_keeps_the_event", test_small_owner_buffer_keeps_the_event},
        {"full_queue_drops_the_oldest_and_counts_them", test_full_queue_drops_the_oldest_and_counts_them},
        {"events_are_readable_after_close", test_events_are_readable_after_close},
        {"on_lost_and_the_event_fd_are_told_one_sequence", test_on_lost_and_the_event_fd_are_told_one_sequence},
        {"a_full_event_queue_still_calls_every_on_lost", test_a_full_event_queue_still_calls_every_on_lost},
    };
    return rt_run(tests, sizeof tests / sizeof tests[0], argc, argv);
}
