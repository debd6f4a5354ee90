/*
 * Statistics (redmutex_client_stats, redmutex_client_server_stats) and log
 * messages (the client option `log`): scripted scenarios against real
 * redis-servers with exact expectations - N acquisitions give N samples, K
 * timeouts K timeout outcomes, a key deleted under the watchdog one loss, a
 * stopped server errors for that server only - and the promise that
 * counting allocates nothing.
 */
#define _GNU_SOURCE
#include "cluster.h"
#include "harness.h"
#include "slots.h"

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

static rs_server srv;

/* ---- log messages, collected --------------------------------------------- */

#define MAX_LOGS 64

typedef struct log_line {
    int level;
    char message[600];
    char lock[64];
    char server[160];
} log_line;

static pthread_mutex_t logs_mu = PTHREAD_MUTEX_INITIALIZER;
static log_line logs[MAX_LOGS];
static int n_logs;

static void collect_log(int level, const char *message, const char *lock_name, const char *server, void *payload)
{
    (void)payload;
    pthread_mutex_lock(&logs_mu);
    if (n_logs < MAX_LOGS) {
        log_line *l = &logs[n_logs++];
        l->level = level;
        snprintf(l->message, sizeof l->message, "%s", message);
        snprintf(l->lock, sizeof l->lock, "%s", lock_name ? lock_name : "");
        snprintf(l->server, sizeof l->server, "%s", server ? server : "");
    }
    pthread_mutex_unlock(&logs_mu);
}

/* How many collected messages have this level and contain `text` (and name this lock / server, if given). */
static int logs_with(int level, const char *text, const char *lock, const char *server)
{
    int n = 0;
    pthread_mutex_lock(&logs_mu);
    for (int i = 0; i < n_logs; i++)
        n += logs[i].level == level && strstr(logs[i].message, text) && (!lock || strcmp(logs[i].lock, lock) == 0) &&
             (!server || strcmp(logs[i].server, server) == 0);
    pthread_mutex_unlock(&logs_mu);
    return n;
}

static void logs_clear(void)
{
    pthread_mutex_lock(&logs_mu);
    n_logs = 0;
    pthread_mutex_unlock(&logs_mu);
}

/* ---- helpers ----------------------------------------------------------------- */

static redmutex_client *stats_client(const char *const *urls, size_t n, int64_t lease_ms, int64_t cmd_ms,
                                     uint32_t flags)
{
    redmutex_client_options o = REDMUTEX_CLIENT_OPTIONS_INIT;
    o.watchdog_lease_ms = rt_scaled_ms(lease_ms);
    o.command_timeout_ms = rt_scaled_ms(cmd_ms);
    o.connect_timeout_ms = rt_scaled_ms(cmd_ms);
    o.shutdown_timeout_ms = 1000;
    o.flags = flags;
    o.log = collect_log;
    redmutex_client *c;
    CHECK_OK(redmutex_client_new(&c, urls, n, &o));
    return c;
}

static redmutex_lock *new_lock(redmutex_client *c, const char *name, redmutex_kind kind)
{
    redmutex_lock *l;
    CHECK_OK(redmutex_lock_new(&l, c, name, kind, NULL));
    return l;
}

static redmutex_stats snap(redmutex_client *c)
{
    redmutex_stats s;
    memset(&s, 0xA5, sizeof s);
    s.version = REDMUTEX_STATS_VERSION;
    CHECK_OK(redmutex_client_stats(c, &s));
    return s;
}

static redmutex_server_stats server_snap(redmutex_client *c, size_t i)
{
    redmutex_server_stats s;
    memset(&s, 0xA5, sizeof s);
    s.version = REDMUTEX_STATS_VERSION;
    CHECK_OK(redmutex_client_server_stats(c, i, &s));
    return s;
}

static uint64_t outcome_count(const redmutex_stats *s, redmutex_kind kind, int outcome)
{
    return s->acquire_wait[kind][outcome].count;
}

/* Every histogram's count is the sum of its buckets, and no other kind or outcome has samples. */
static void check_consistent(const redmutex_histogram *h)
{
    uint64_t sum = 0;
    for (int i = 0; i < REDMUTEX_STATS_BUCKETS; i++)
        sum += h->buckets[i];
    CHECKF(sum == h->count, "buckets add up to %llu, count is %llu", (unsigned long long)sum,
           (unsigned long long)h->count);
}

/* ---- scenarios ------------------------------------------------------------------ */

static atomic_bool reading;

/* Snapshots from another thread while the pairs run: the snapshot is for any thread, at any time. */
static void *read_stats(void *arg)
{
    redmutex_client *c = arg;
    while (atomic_load(&reading)) {
        redmutex_stats s = snap(c);
        check_consistent(&s.acquire_wait[REDMUTEX_KIND_LOCK][REDMUTEX_ACQUIRE_ACQUIRED]);
        CHECK(s.locks_held >= 0 && s.locks_held <= 1);
        rt_sleep_ms(1);
    }
    return NULL;
}

static void test_n_uncontended_acquisitions_give_n_acquisitions_and_n_hold_samples(void)
{
    rs_start(&srv, NULL);
    const char *url = srv.url;
    redmutex_client *c = stats_client(&url, 1, 30000, 1000, 0);
    redmutex_stats s = snap(c);
    CHECK(s.version == REDMUTEX_STATS_VERSION && s.counting == 1 && s.server_count == 1);
    CHECK(s.bucket_bounds_ns[0] == 100000 && s.bucket_bounds_ns[REDMUTEX_STATS_BUCKETS - 1] == UINT64_MAX);
    CHECK(outcome_count(&s, REDMUTEX_KIND_LOCK, REDMUTEX_ACQUIRE_ACQUIRED) == 0 &&
          s.hold[REDMUTEX_KIND_LOCK].count == 0);

    redmutex_lock *l = new_lock(c, "pairs", REDMUTEX_KIND_LOCK);
    pthread_t reader;
    atomic_store(&reading, true);
    CHECK(pthread_create(&reader, NULL, read_stats, c) == 0);
    const int n = 25;
    for (int i = 0; i < n; i++) {
        CHECK_OK(redmutex_lock_acquire(l, NULL, 0));
        if (i == 0)
            CHECK(snap(c).locks_held == 1);
        CHECK_OK(redmutex_lock_release(l, NULL));
    }
    atomic_store(&reading, false);
    pthread_join(reader, NULL);
    s = snap(c);
    CHECK(outcome_count(&s, REDMUTEX_KIND_LOCK, REDMUTEX_ACQUIRE_ACQUIRED) == (uint64_t)n);
    CHECK(s.hold[REDMUTEX_KIND_LOCK].count == (uint64_t)n);
    check_consistent(&s.hold[REDMUTEX_KIND_LOCK]);
    CHECK(s.acquire_wait[REDMUTEX_KIND_LOCK][REDMUTEX_ACQUIRE_ACQUIRED].sum_ns > 0);
    for (int k = 0; k < REDMUTEX_STATS_KINDS; k++)
        for (int o = 0; o < REDMUTEX_STATS_OUTCOMES; o++)
            if (k != REDMUTEX_KIND_LOCK || o != REDMUTEX_ACQUIRE_ACQUIRED)
                CHECKF(s.acquire_wait[k][o].count == 0, "kind %d outcome %d has %llu samples", k, o,
                       (unsigned long long)s.acquire_wait[k][o].count);
    CHECK(s.locks_held == 0 && s.waiters == 0 && s.locks_lost == 0);
    /* Every request was answered: one round trip per acquire and per release. */
    redmutex_server_stats sv = server_snap(c, 0);
    CHECK(sv.round_trip.count >= (uint64_t)(2 * n) && sv.reachable == 1 && strstr(sv.address, "127.0.0.1"));
    for (int e = 0; e < REDMUTEX_STATS_ERROR_CLASSES; e++)
        CHECK(sv.errors[e] == 0);

    /* A reentrant lock: three nested acquisitions, one hold (the outermost). */
    redmutex_lock *r = new_lock(c, "nested", REDMUTEX_KIND_RLOCK);
    for (int i = 0; i < 3; i++)
        CHECK_OK(redmutex_lock_acquire(r, NULL, 0));
    CHECK(snap(c).locks_held == 1);
    for (int i = 0; i < 3; i++)
        CHECK_OK(redmutex_lock_release(r, NULL));
    s = snap(c);
    CHECK(outcome_count(&s, REDMUTEX_KIND_RLOCK, REDMUTEX_ACQUIRE_ACQUIRED) == 3);
    CHECK(s.hold[REDMUTEX_KIND_RLOCK].count == 1 && s.locks_held == 0);
    CHECK(logs_with(REDMUTEX_LOG_WARNING, "", NULL, NULL) == 0); /* nothing on the fast path */
    redmutex_lock_free(r);
    redmutex_lock_free(l);
    redmutex_client_close(c);
    redmutex_client_free(c);
}

typedef struct waiter_arg {
    redmutex_lock *l;
    int64_t wait_ms;
    int rc;
} waiter_arg;

static void *wait_for_lock(void *p)
{
    waiter_arg *a = p;
    a->rc = redmutex_lock_acquire(a->l, "waiter", a->wait_ms);
    return NULL;
}

static void test_k_timeouts_give_k_timeout_outcomes_and_waiters_while_waiting(void)
{
    rs_start(&srv, NULL);
    const char *url = srv.url;
    redmutex_client *holder = stats_client(&url, 1, 30000, 1000, 0);
    redmutex_client *c = stats_client(&url, 1, 30000, 1000, 0);
    redmutex_lock *h = new_lock(holder, "busy", REDMUTEX_KIND_RLOCK);
    CHECK_OK(redmutex_lock_acquire(h, NULL, 0));
    redmutex_lock *l = new_lock(c, "busy", REDMUTEX_KIND_RLOCK);
    const int k = 4;
    for (int i = 0; i < k; i++)
        CHECK_RC(redmutex_lock_acquire(l, NULL, i % 2 ? 0 : 30), REDMUTEX_ETIMEDOUT);
    redmutex_stats s = snap(c);
    CHECK(outcome_count(&s, REDMUTEX_KIND_RLOCK, REDMUTEX_ACQUIRE_TIMEOUT) == (uint64_t)k);
    CHECK(outcome_count(&s, REDMUTEX_KIND_RLOCK, REDMUTEX_ACQUIRE_ACQUIRED) == 0);
    CHECK(s.hold[REDMUTEX_KIND_RLOCK].count == 0 && s.locks_held == 0 && s.waiters == 0);
    /* The waits of 30 ms are in the buckets above 25 ms. */
    const redmutex_histogram *t = &s.acquire_wait[REDMUTEX_KIND_RLOCK][REDMUTEX_ACQUIRE_TIMEOUT];
    uint64_t long_ones = 0;
    for (int i = 0; i < REDMUTEX_STATS_BUCKETS; i++)
        if (s.bucket_bounds_ns[i] > 25000000)
            long_ones += t->buckets[i];
    CHECK(long_ones >= (uint64_t)(k + 1) / 2 && t->sum_ns >= (uint64_t)(k + 1) / 2 * 30000000);
    CHECK(snap(holder).locks_held == 1);

    /* A blocked acquire is a waiter until it ends; an interrupt ends it as "interrupted". */
    waiter_arg a = {l, REDMUTEX_WAIT_FOREVER, 1};
    pthread_t th;
    CHECK(pthread_create(&th, NULL, wait_for_lock, &a) == 0);
    WAIT_FOR(snap(c).waiters == 1, 5000);
    redmutex_client_interrupt(c);
    pthread_join(th, NULL);
    CHECK_RC(a.rc, REDMUTEX_EINTR);
    s = snap(c);
    CHECK(s.waiters == 0 && outcome_count(&s, REDMUTEX_KIND_RLOCK, REDMUTEX_ACQUIRE_INTERRUPTED) == 1);

    /* A waiter that gets the lock: acquired, after a wait. */
    a = (waiter_arg){l, REDMUTEX_WAIT_FOREVER, 1};
    CHECK(pthread_create(&th, NULL, wait_for_lock, &a) == 0);
    WAIT_FOR(snap(c).waiters == 1, 5000);
    CHECK_OK(redmutex_lock_release(h, NULL));
    pthread_join(th, NULL);
    CHECK_OK(a.rc);
    s = snap(c);
    CHECK(s.waiters == 0 && s.locks_held == 1 &&
          outcome_count(&s, REDMUTEX_KIND_RLOCK, REDMUTEX_ACQUIRE_ACQUIRED) == 1);
    CHECK_OK(redmutex_lock_release(l, "waiter"));
    CHECK(snap(c).locks_held == 0 && snap(holder).hold[REDMUTEX_KIND_RLOCK].count == 1);
    redmutex_lock_free(l);
    redmutex_lock_free(h);
    redmutex_client_close(c);
    redmutex_client_free(c);
    redmutex_client_close(holder);
    redmutex_client_free(holder);
}

static void test_pollable_waits_count_as_acquisitions(void)
{
    rs_start(&srv, NULL);
    const char *url = srv.url;
    redmutex_client *c = stats_client(&url, 1, 30000, 1000, 0);
    redmutex_lock *h = new_lock(c, "polled", REDMUTEX_KIND_LOCK);
    redmutex_lock *l = new_lock(c, "polled", REDMUTEX_KIND_LOCK);
    CHECK_OK(redmutex_lock_acquire(h, NULL, 0));
    /* Given up while the lock is held: a timeout. */
    redmutex_wait *w;
    CHECK_OK(redmutex_wait_new(&w, l, NULL));
    CHECK_RC(redmutex_wait_try(w), REDMUTEX_ETIMEDOUT);
    CHECK(snap(c).waiters == 1);
    redmutex_wait_free(w);
    redmutex_stats s = snap(c);
    CHECK(s.waiters == 0 && outcome_count(&s, REDMUTEX_KIND_LOCK, REDMUTEX_ACQUIRE_TIMEOUT) == 1);
    /* Tried again after the release: acquired, one acquisition for the whole wait. */
    CHECK_OK(redmutex_wait_new(&w, l, NULL));
    CHECK_RC(redmutex_wait_try(w), REDMUTEX_ETIMEDOUT);
    CHECK_RC(redmutex_wait_try(w), REDMUTEX_ETIMEDOUT);
    CHECK_OK(redmutex_lock_release(h, NULL));
    int rc;
    WAIT_FOR((rc = redmutex_wait_try(w)) == 0, 5000);
    redmutex_wait_free(w);
    s = snap(c);
    CHECK(s.waiters == 0 && outcome_count(&s, REDMUTEX_KIND_LOCK, REDMUTEX_ACQUIRE_ACQUIRED) == 2);
    CHECK(outcome_count(&s, REDMUTEX_KIND_LOCK, REDMUTEX_ACQUIRE_TIMEOUT) == 1 && s.locks_held == 1);
    /* A wait freed before it tried was no acquisition. */
    CHECK_OK(redmutex_wait_new(&w, h, NULL));
    redmutex_wait_free(w);
    CHECK_OK(redmutex_lock_release(l, NULL));
    s = snap(c);
    CHECK(s.locks_held == 0 && s.hold[REDMUTEX_KIND_LOCK].count == 2);
    CHECK(outcome_count(&s, REDMUTEX_KIND_LOCK, REDMUTEX_ACQUIRE_ACQUIRED) +
              outcome_count(&s, REDMUTEX_KIND_LOCK, REDMUTEX_ACQUIRE_TIMEOUT) ==
          3);
    redmutex_lock_free(l);
    redmutex_lock_free(h);
    redmutex_client_close(c);
    redmutex_client_free(c);
}

static void test_a_lock_deleted_under_the_watchdog_counts_one_loss(void)
{
    rs_start(&srv, NULL);
    const char *url = srv.url;
    logs_clear();
    redmutex_client *c = stats_client(&url, 1, 1200, 400, 0);
    redmutex_lock *l = new_lock(c, "deleted", REDMUTEX_KIND_LOCK);
    CHECK_OK(redmutex_lock_acquire(l, NULL, 0));
    WAIT_FOR(snap(c).renewals[REDMUTEX_RENEWAL_RENEWED] >= 1, 5000);
    CHECK(rs_int(&srv, "DEL deleted") == 1);
    redmutex_state st = REDMUTEX_STATE_HELD;
    WAIT_FOR(redmutex_lock_state(&st, l, NULL) == 0 && st == REDMUTEX_STATE_LOST, 5000);
    redmutex_stats s = snap(c);
    CHECK(s.locks_lost == 1 && s.renewals[REDMUTEX_RENEWAL_LOST] == 1 && s.renewals[REDMUTEX_RENEWAL_FAILED] == 0);
    CHECK(s.locks_held == 0 && s.hold[REDMUTEX_KIND_LOCK].count == 1);
    /* The message goes out on the watchdog thread after the state changed. */
    WAIT_FOR(logs_with(REDMUTEX_LOG_WARNING, "is lost", "deleted", NULL) == 1, 5000);
    CHECK_RC(redmutex_lock_release(l, NULL), REDMUTEX_ELOST);
    s = snap(c);
    CHECK(s.locks_lost == 1 && s.hold[REDMUTEX_KIND_LOCK].count == 1 && s.locks_held == 0); /* counted once */
    CHECK(logs_with(REDMUTEX_LOG_WARNING, "", NULL, NULL) == 1);
    redmutex_lock_free(l);
    redmutex_client_close(c);
    redmutex_client_free(c);
}

static void test_a_stalled_server_logs_failing_renewal_then_recovery(void)
{
    rs_start(&srv, NULL);
    const char *url = srv.url;
    logs_clear();
    redmutex_client *c = stats_client(&url, 1, 1500, 100, 0);
    redmutex_lock *l = new_lock(c, "stall", REDMUTEX_KIND_LOCK);
    CHECK_OK(redmutex_lock_acquire(l, NULL, 0));
    rs_pause(&srv);
    WAIT_FOR(logs_with(REDMUTEX_LOG_WARNING, "renewal is failing", "stall", NULL) == 1, 5000);
    rs_resume(&srv);
    WAIT_FOR(logs_with(REDMUTEX_LOG_INFO, "renewal recovered", "stall", NULL) == 1, 5000);
    char display[160];
    snprintf(display, sizeof display, "%s/0", url); /* as messages show it */
    WAIT_FOR(logs_with(REDMUTEX_LOG_INFO, "answers again", NULL, display) == 1, 5000);
    redmutex_stats s = snap(c);
    CHECK(s.renewals[REDMUTEX_RENEWAL_FAILED] >= 1 && s.renewals[REDMUTEX_RENEWAL_RENEWED] >= 1 && s.locks_lost == 0);
    redmutex_server_stats sv = server_snap(c, 0);
    CHECK(sv.errors[REDMUTEX_SERVER_ERROR_TIMEOUT] >= 1 && sv.reachable == 1);
    /* The server's trouble is told once however many requests failed. */
    CHECK(logs_with(REDMUTEX_LOG_WARNING, "is unreachable", NULL, display) == 1);
    CHECK_OK(redmutex_lock_release(l, NULL));
    redmutex_lock_free(l);
    redmutex_client_close(c);
    redmutex_client_free(c);
}

static void test_a_stopped_server_counts_errors_for_that_server_only(void)
{
    static rs_server servers[3]; /* the harness stops them after the test */
    const char *urls[3];
    for (int i = 0; i < 3; i++) {
        rs_start(&servers[i], NULL);
        urls[i] = servers[i].url;
    }
    logs_clear();
    redmutex_client *c = stats_client(urls, 3, 30000, 500, 0);
    redmutex_lock *l = new_lock(c, "redlock", REDMUTEX_KIND_LOCK);
    CHECK_OK(redmutex_lock_acquire(l, NULL, 0));
    CHECK_OK(redmutex_lock_release(l, NULL));
    redmutex_stats s = snap(c);
    CHECK(s.server_count == 3);
    uint64_t before[3];
    char display[3][160];
    for (size_t i = 0; i < 3; i++) {
        redmutex_server_stats sv = server_snap(c, i);
        snprintf(display[i], sizeof display[i], "%s/0", urls[i]);
        CHECK(strcmp(sv.address, display[i]) == 0 && sv.reachable == 1);
        before[i] = sv.round_trip.count;
    }
    rs_kill(&servers[1]);
    const int n = 5;
    for (int i = 0; i < n; i++) {
        CHECK_OK(redmutex_lock_acquire(l, NULL, 0));
        CHECK_OK(redmutex_lock_release(l, NULL));
    }
    for (size_t i = 0; i < 3; i++) {
        redmutex_server_stats sv = server_snap(c, i);
        uint64_t errors = 0;
        for (int e = 0; e < REDMUTEX_STATS_ERROR_CLASSES; e++)
            errors += sv.errors[e];
        if (i == 1) {
            /* Each acquisition reached for it and failed at once (unless the other two decided
               first: a request not waited for counts nothing); releases went only where the lock was. */
            uint64_t refused = sv.errors[REDMUTEX_SERVER_ERROR_CONNECTION];
            CHECKF(refused >= 1 && refused <= (uint64_t)n && errors == refused,
                   "server 2: %llu connection errors, %llu in all", (unsigned long long)sv.errors[1],
                   (unsigned long long)errors);
            CHECK(sv.round_trip.count == before[i] && sv.reachable == 0);
        } else {
            CHECK(errors == 0 && sv.round_trip.count == before[i] + 2 * n && sv.reachable == 1);
        }
    }
    CHECK(logs_with(REDMUTEX_LOG_WARNING, "is unreachable", NULL, display[1]) == 1);
    CHECK(logs_with(REDMUTEX_LOG_WARNING, "", NULL, NULL) == 1);
    s = snap(c);
    CHECK(outcome_count(&s, REDMUTEX_KIND_LOCK, REDMUTEX_ACQUIRE_ACQUIRED) == (uint64_t)n + 1);
    redmutex_lock_free(l);
    redmutex_client_close(c);
    redmutex_client_free(c);
}

/* On a cluster, each request counts for the node it went to, under that node's own address. */
static void test_cluster_nodes_are_counted_by_their_own_address(void)
{
    static rc_cluster cl; /* the harness stops it after the test */
    rc_start(&cl, 3, 0, NULL);
    const char *url = cl.url;
    redmutex_client *c = stats_client(&url, 1, 30000, 1000, 0);
    /* Names whose slots lie on each of the three masters. */
    const char *names[3] = {"{a}job", "{b}job", "{c}job"};
    for (int k = 0; k < 3; k++) {
        redmutex_lock *l = new_lock(c, names[k], REDMUTEX_KIND_RLOCK);
        CHECK_OK(redmutex_lock_acquire(l, NULL, 0));
        CHECK_OK(redmutex_lock_release(l, NULL));
        redmutex_lock_free(l);
    }
    redmutex_stats s = snap(c);
    CHECK(s.server_count >= 2); /* the seed list's entry, and the nodes it led to */
    for (int k = 0; k < 3; k++) {
        rs_server *owner = rc_owner(&cl, rm_keyslot(names[k], strlen(names[k])));
        CHECK(owner != NULL);
        char address[160];
        snprintf(address, sizeof address, "redis://127.0.0.1:%d/0", owner->port);
        uint64_t round_trips = 0;
        for (uint64_t i = 0; i < s.server_count; i++) {
            redmutex_server_stats sv = server_snap(c, i);
            if (strcmp(sv.address, address) == 0)
                round_trips = sv.round_trip.count;
        }
        CHECKF(round_trips >= 2, "node %s (owner of '%s') has %llu round trips", address, names[k],
               (unsigned long long)round_trips);
    }
    CHECK(outcome_count(&s, REDMUTEX_KIND_RLOCK, REDMUTEX_ACQUIRE_ACQUIRED) == 3 &&
          s.hold[REDMUTEX_KIND_RLOCK].count == 3);
    redmutex_client_close(c);
    redmutex_client_free(c);
}

static void test_counting_off_reports_zeros_and_still_logs(void)
{
    const char *url = "redis://127.0.0.1:1"; /* nobody listens: connections are refused */
    logs_clear();
    redmutex_client *c = stats_client(&url, 1, 30000, 200, REDMUTEX_CLIENT_NO_STATS);
    redmutex_lock *l = new_lock(c, "off", REDMUTEX_KIND_LOCK);
    CHECK_RC(redmutex_lock_acquire(l, NULL, 0), REDMUTEX_ECONN);
    redmutex_stats s = snap(c);
    CHECK(s.counting == 0 && s.server_count == 1 && outcome_count(&s, REDMUTEX_KIND_LOCK, REDMUTEX_ACQUIRE_ERROR) == 0);
    CHECK(server_snap(c, 0).errors[REDMUTEX_SERVER_ERROR_CONNECTION] == 0);
    CHECK(logs_with(REDMUTEX_LOG_WARNING, "is unreachable", NULL, "redis://127.0.0.1:1/0") == 1);
    redmutex_lock_free(l);
    redmutex_client_close(c);
    redmutex_client_free(c);

    /* Counting on: the same failure is an error outcome and a connection error. */
    c = stats_client(&url, 1, 30000, 200, 0);
    l = new_lock(c, "on", REDMUTEX_KIND_LOCK);
    CHECK_RC(redmutex_lock_acquire(l, NULL, 0), REDMUTEX_ECONN);
    s = snap(c);
    CHECK(s.counting == 1 && outcome_count(&s, REDMUTEX_KIND_LOCK, REDMUTEX_ACQUIRE_ERROR) == 1);
    CHECK(server_snap(c, 0).errors[REDMUTEX_SERVER_ERROR_CONNECTION] == 1);
    redmutex_lock_free(l);
    redmutex_client_close(c);
    redmutex_client_free(c);
}

static void test_bad_arguments_to_the_snapshots_are_refused(void)
{
    const char *url = "redis://127.0.0.1:1";
    redmutex_client *c;
    CHECK_OK(redmutex_client_new(&c, &url, 1, NULL));
    redmutex_stats s = {0};
    redmutex_server_stats sv = {0};
    CHECK_RC(redmutex_client_stats(c, &s), REDMUTEX_EINVAL); /* version 0 */
    CHECK(strstr(redmutex_last_error(), "REDMUTEX_STATS_VERSION"));
    s.version = REDMUTEX_STATS_VERSION + 1;
    CHECK_RC(redmutex_client_stats(c, &s), REDMUTEX_EINVAL);
    CHECK_RC(redmutex_client_stats(NULL, &s), REDMUTEX_EINVAL);
    CHECK_RC(redmutex_client_stats(c, NULL), REDMUTEX_EINVAL);
    sv.version = REDMUTEX_STATS_VERSION;
    CHECK_RC(redmutex_client_server_stats(c, 1, &sv), REDMUTEX_EINVAL);
    CHECK(strstr(redmutex_last_error(), "no server 1"));
    CHECK_RC(redmutex_client_server_stats(NULL, 0, &sv), REDMUTEX_EINVAL);
    CHECK_RC(redmutex_client_server_stats(c, 0, NULL), REDMUTEX_EINVAL);
    sv.version = 0;
    CHECK_RC(redmutex_client_server_stats(c, 0, &sv), REDMUTEX_EINVAL);
    /* After close the snapshot still works. */
    CHECK_OK(redmutex_client_close(c));
    s.version = REDMUTEX_STATS_VERSION;
    CHECK_OK(redmutex_client_stats(c, &s));
    sv.version = REDMUTEX_STATS_VERSION;
    CHECK_OK(redmutex_client_server_stats(c, 0, &sv));
    CHECK(strcmp(sv.address, "redis://127.0.0.1:1/0") == 0);
    redmutex_client_free(c);
}

/* ---- counting allocates nothing --------------------------------------------------- */

/*
 * The test program's malloc family counts the calls made on the measuring
 * thread and hands them to glibc's. Dynamic symbol lookup finds the
 * program's definitions first, so the library's calls (and hiredis's) come
 * here too. The sanitizers bring their own allocators, so this test runs in
 * the plain build (and under valgrind, where the counts may read zero on both
 * sides: still equal).
 */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define COUNT_ALLOCATIONS 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define COUNT_ALLOCATIONS 0
#endif
#endif
#ifndef COUNT_ALLOCATIONS
#define COUNT_ALLOCATIONS 1
#endif

#if COUNT_ALLOCATIONS
extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
static __thread bool measuring;
static __thread uint64_t allocations;

void *malloc(size_t n)
{
    allocations += measuring;
    return __libc_malloc(n);
}

void *calloc(size_t n, size_t size)
{
    allocations += measuring;
    return __libc_calloc(n, size);
}

void *realloc(void *p, size_t n)
{
    allocations += measuring;
    return __libc_realloc(p, n);
}
#endif

/* Allocations made by n acquire + release pairs on this thread, after a few to warm up. */
static uint64_t allocations_for_pairs(redmutex_client *c, const char *name, int n)
{
    redmutex_lock *l = new_lock(c, name, REDMUTEX_KIND_LOCK);
    for (int i = 0; i < 3; i++) {
        CHECK_OK(redmutex_lock_acquire(l, NULL, 0));
        CHECK_OK(redmutex_lock_release(l, NULL));
    }
#if COUNT_ALLOCATIONS
    allocations = 0;
    measuring = true;
#endif
    for (int i = 0; i < n; i++) {
        CHECK_OK(redmutex_lock_acquire(l, NULL, 0));
        CHECK_OK(redmutex_lock_release(l, NULL));
    }
    uint64_t got = 0;
#if COUNT_ALLOCATIONS
    measuring = false;
    got = allocations;
#endif
    redmutex_lock_free(l);
    return got;
}

static void test_counting_allocates_nothing_on_the_fast_path(void)
{
    rs_start(&srv, NULL);
    const char *url = srv.url;
    redmutex_client *on = stats_client(&url, 1, 30000, 1000, 0);
    redmutex_client *off = stats_client(&url, 1, 30000, 1000, REDMUTEX_CLIENT_NO_STATS);
    const int n = 50;
    uint64_t with = allocations_for_pairs(on, "alloc-on", n);
    uint64_t without = allocations_for_pairs(off, "alloc-off", n);
    CHECKF(with == without, "%d pairs allocate %llu times with counting, %llu without", n, (unsigned long long)with,
           (unsigned long long)without);
    redmutex_stats s = snap(on);
    CHECK(outcome_count(&s, REDMUTEX_KIND_LOCK, REDMUTEX_ACQUIRE_ACQUIRED) == (uint64_t)n + 3);
#if COUNT_ALLOCATIONS
    printf("     %d pairs: %llu allocations with counting and without\n", n, (unsigned long long)with);
#endif
    redmutex_client_close(on);
    redmutex_client_free(on);
    redmutex_client_close(off);
    redmutex_client_free(off);
}

int main(int argc, char **argv)
{
    static const rt_test tests[] = {
        {"n_uncontended_acquisitions_give_n_acquisitions_and_n_hold_samples",
         test_n_uncontended_acquisitions_give_n_acquisitions_and_n_hold_samples},
        {"k_timeouts_give_k_timeout_outcomes_and_waiters_while_waiting",
         test_k_timeouts_give_k_timeout_outcomes_and_waiters_while_waiting},
        {"pollable_waits_count_as_acquisitions", test_pollable_waits_count_as_acquisitions},
        {"a_lock_deleted_under_the_watchdog_counts_one_loss", test_a_lock_deleted_under_the_watchdog_counts_one_loss},
        {"a_stalled_server_logs_failing_renewal_then_recovery",
         test_a_stalled_server_logs_failing_renewal_then_recovery},
        {"a_stopped_server_counts_errors_for_that_server_only",
         test_a_stopped_server_counts_errors_for_that_server_only},
        {"cluster_nodes_are_counted_by_their_own_address", test_cluster_nodes_are_counted_by_their_own_address},
        {"counting_off_reports_zeros_and_still_logs", test_counting_off_reports_zeros_and_still_logs},
        {"bad_arguments_to_the_snapshots_are_refused", test_bad_arguments_to_the_snapshots_are_refused},
        {"counting_allocates_nothing_on_the_fast_path", test_counting_allocates_nothing_on_the_fast_path},
    };
    return rt_run(tests, sizeof tests / sizeof tests[0], argc, argv);
}
