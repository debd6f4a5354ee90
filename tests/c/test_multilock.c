/*
 * Multi-locks (redmutex_multi_lock_*): all of a set of locks or none, with
 * RedissonMultiLock's semantics, against real redis-servers: nothing kept
 * when one lock is busy, one round trip for the set on one server, no
 * deadlock between sets listed in opposite orders, waiting on the busy
 * lock's channel, each lock an ordinary hold, bad input, Redlock.
 */
#define _GNU_SOURCE
#include "cluster.h"
#include "harness.h"
#include "procs.h"

#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static rs_server srv;
static rs_server servers[5];
static rc_cluster cl;

static redmutex_client *client_for(const char *url)
{
    redmutex_client_options o = REDMUTEX_CLIENT_OPTIONS_INIT;
    o.command_timeout_ms = rt_scaled_ms(1000);
    o.connect_timeout_ms = rt_scaled_ms(2000);
    o.shutdown_timeout_ms = 1000;
    redmutex_client *c = NULL;
    CHECK_OK(redmutex_client_new(&c, &url, 1, &o));
    return c;
}

static redmutex_lock *new_lock(redmutex_client *c, const char *name, redmutex_kind kind)
{
    redmutex_lock *l;
    CHECK_OK(redmutex_lock_new(&l, c, name, kind, NULL));
    return l;
}

static void done(redmutex_client *c)
{
    redmutex_client_close(c);
    redmutex_client_free(c);
}

static void test_all_of_the_set_or_nothing(void)
{
    rs_start(&srv, NULL);
    redmutex_client *c = client_for(srv.url), *other = client_for(srv.url);
    redmutex_lock *ls[3] = {new_lock(c, "ml:a", REDMUTEX_KIND_LOCK), new_lock(c, "ml:b", REDMUTEX_KIND_RLOCK),
                            new_lock(c, "ml:c", REDMUTEX_KIND_WRITE)};
    redmutex_multi_lock *m;
    CHECK_OK(redmutex_multi_lock_new(&m, ls, 3));
    CHECK(redmutex_multi_lock_size(m) == 3);
    /* Another client holds the middle one: nothing of the set is kept. */
    redmutex_lock *b = new_lock(other, "ml:b", REDMUTEX_KIND_RLOCK);
    CHECK_OK(redmutex_lock_acquire(b, NULL, 0));
    CHECK_RC(redmutex_multi_lock_acquire(m, NULL, 0), REDMUTEX_ETIMEDOUT);
    CHECKF(strstr(redmutex_last_error(), "'ml:b'") != NULL, "%s", redmutex_last_error());
    CHECK(!rs_exists(&srv, "ml:a") && !rs_exists(&srv, "ml:c"));
    CHECK_RC(redmutex_multi_lock_acquire(m, NULL, 300), REDMUTEX_ETIMEDOUT);
    CHECK(!rs_exists(&srv, "ml:a") && !rs_exists(&srv, "ml:c"));
    redmutex_state st;
    CHECK_OK(redmutex_lock_state(&st, ls[0], NULL));
    CHECK(st == REDMUTEX_STATE_UNLOCKED);
    CHECK_OK(redmutex_lock_release(b, NULL));
    /* All of it: each lock an ordinary hold, excluding the others' users. */
    CHECK_OK(redmutex_multi_lock_acquire(m, NULL, 0));
    CHECK(rs_exists(&srv, "ml:a") && rs_exists(&srv, "ml:b") && rs_exists(&srv, "ml:c"));
    for (int i = 0; i < 3; i++) {
        CHECK_OK(redmutex_lock_state(&st, ls[i], NULL));
        CHECK(st == REDMUTEX_STATE_HELD);
    }
    CHECK_RC(redmutex_lock_acquire(b, NULL, 0), REDMUTEX_ETIMEDOUT);
    CHECK_OK(redmutex_multi_lock_release(m, NULL));
    CHECK(!rs_exists(&srv, "ml:a") && !rs_exists(&srv, "ml:b") && !rs_exists(&srv, "ml:c"));
    CHECK_RC(redmutex_multi_lock_release(m, NULL), REDMUTEX_ENOTOWNER);
    redmutex_multi_lock_free(m);
    for (int i = 0; i < 3; i++)
        redmutex_lock_free(ls[i]);
    redmutex_lock_free(b);
    done(c);
    done(other);
    rs_stop(&srv);
}

static void test_three_locks_on_one_server_take_one_round_trip_each_way(void)
{
    rs_start(&srv, NULL);
    rs_proxy *p = rs_flight_proxy_start(srv.port, 20000);
    redmutex_client *c = client_for(p->url);
    redmutex_lock *ls[3] = {new_lock(c, "rt:1", REDMUTEX_KIND_LOCK), new_lock(c, "rt:2", REDMUTEX_KIND_RLOCK),
                            new_lock(c, "rt:3", REDMUTEX_KIND_LOCK)};
    redmutex_multi_lock *m;
    CHECK_OK(redmutex_multi_lock_new(&m, ls, 3));
    /* Connect first: the handshake is no part of what is counted. */
    int64_t n;
    CHECK_OK(redmutex_lock_hold_count(&n, ls[1], NULL));
    int before = atomic_load(&p->flights);
    CHECK_OK(redmutex_multi_lock_acquire(m, NULL, 0));
    int acquire = atomic_load(&p->flights) - before;
    before = atomic_load(&p->flights);
    CHECK_OK(redmutex_multi_lock_release(m, NULL));
    int release = atomic_load(&p->flights) - before;
    printf("     acquire: %d round trip(s), release: %d\n", acquire, release);
    CHECK(acquire == 1 && release == 1);
    redmutex_multi_lock_free(m);
    for (int i = 0; i < 3; i++)
        redmutex_lock_free(ls[i]);
    done(c);
    rs_proxy_stop(p);
    rs_stop(&srv);
}

/* ---- no deadlock -------------------------------------------------------------- */

typedef struct shared {
    atomic_int inside;
    atomic_int violations;
    atomic_int errors;
    atomic_int rounds;
} shared;

typedef struct set_arg {
    const char *urls[5];
    size_t n;
    shared *sh;
    bool reversed;
    bool with_fair; /* a fair lock in the set: the lock-by-lock path */
    int rounds;
} set_arg;

static int run_set(void *p)
{
    set_arg *a = p;
    redmutex_client_options o = REDMUTEX_CLIENT_OPTIONS_INIT;
    o.command_timeout_ms = rt_scaled_ms(1000);
    o.connect_timeout_ms = rt_scaled_ms(2000);
    redmutex_client *c = NULL;
    if (redmutex_client_new(&c, a->urls, a->n, &o) != 0)
        return 2;
    /* On a cluster these three names are in three slots (and on three masters). */
    const char *names[3] = {"dl:x", "dl:y", "dl:z"};
    redmutex_lock *ls[3];
    for (int i = 0; i < 3; i++) {
        redmutex_kind kind = a->with_fair && i == 1 ? REDMUTEX_KIND_FAIR
                             : i == 2               ? REDMUTEX_KIND_RLOCK
                                                    : REDMUTEX_KIND_LOCK;
        if (redmutex_lock_new(&ls[a->reversed ? 2 - i : i], c, names[i], kind, NULL) != 0)
            return 3;
    }
    redmutex_multi_lock *m;
    if (redmutex_multi_lock_new(&m, ls, 3) != 0)
        return 4;
    for (int r = 0; r < a->rounds; r++) {
        if (redmutex_multi_lock_acquire(m, NULL, rt_scaled_ms(30000)) != 0) {
            fprintf(stderr, "acquire: %s\n", redmutex_last_error());
            atomic_fetch_add(&a->sh->errors, 1);
            continue;
        }
        if (atomic_fetch_add(&a->sh->inside, 1) != 0)
            atomic_fetch_add(&a->sh->violations, 1);
        usleep(200);
        atomic_fetch_sub(&a->sh->inside, 1);
        atomic_fetch_add(&a->sh->rounds, 1);
        if (redmutex_multi_lock_release(m, NULL) != 0) {
            fprintf(stderr, "release: %s\n", redmutex_last_error());
            atomic_fetch_add(&a->sh->errors, 1);
        }
    }
    redmutex_multi_lock_free(m);
    for (int i = 0; i < 3; i++)
        redmutex_lock_free(ls[i]);
    proc_client_done(c);
    return 0;
}

/* Two processes, each 100 rounds of acquire + release of one set listed in
   opposite orders, on `n` servers (`urls`), or a cluster. */
static void opposite_orders(const char *const *urls, size_t n, bool with_fair)
{
    shared *sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    CHECK(sh != MAP_FAILED);
    memset(sh, 0, sizeof *sh);
    int rounds = proc_rounds(100);
    set_arg fwd = {{NULL}, n, sh, false, with_fair, rounds}, rev = {{NULL}, n, sh, true, with_fair, rounds};
    for (size_t i = 0; i < n; i++)
        fwd.urls[i] = rev.urls[i] = urls[i];
    int64_t t0 = rt_now_ms();
    pid_t a = proc_start(run_set, &fwd), b = proc_start(run_set, &rev);
    CHECK(proc_wait(a, 120000) == 0);
    CHECK(proc_wait(b, 120000) == 0);
    printf("     %d rounds of two sets in opposite orders in %lld ms\n", atomic_load(&sh->rounds),
           (long long)(rt_now_ms() - t0));
    CHECK(atomic_load(&sh->errors) == 0);
    CHECK(atomic_load(&sh->violations) == 0);
    CHECK(atomic_load(&sh->rounds) == 2 * rounds);
    munmap(sh, sizeof *sh);
}

static void test_opposite_orders_never_deadlock_one_request(void)
{
    rs_start(&srv, NULL);
    opposite_orders((const char *[]){srv.url}, 1, false);
    CHECK(rs_count_keys(&srv, "dl:*") == 0);
}

static void test_opposite_orders_never_deadlock_lock_by_lock(void)
{
    rs_start(&srv, NULL);
    opposite_orders((const char *[]){srv.url}, 1, true);
    CHECK(rs_count_keys(&srv, "dl:*") == 0);
}

static void test_opposite_orders_never_deadlock_on_five_servers(void)
{
    const char *urls[5];
    for (int i = 0; i < 5; i++) {
        rs_start(&servers[i], NULL);
        urls[i] = servers[i].url;
    }
    opposite_orders(urls, 5, false);
    for (int i = 0; i < 5; i++)
        CHECK(rs_count_keys(&servers[i], "dl:*") == 0);
}

static void test_opposite_orders_never_deadlock_on_a_cluster_one_request_per_slot(void)
{
    if (cl.n == 0)
        rc_start(&cl, 3, 0, NULL);
    rc_resetstat(&cl);
    opposite_orders((const char *[]){cl.url}, 1, false);
    CHECK(rc_errorstat_all(&cl, "CROSSSLOT") == 0);
    for (int i = 0; i < cl.n; i++)
        CHECK(rs_count_keys(&cl.node[i], "dl:*") == 0);
}

/* ---- waiting ------------------------------------------------------------------- */

typedef struct waiter {
    redmutex_multi_lock *m;
    int rc;
    _Atomic int64_t done_ms;
} waiter;

static void *waiter_main(void *p)
{
    waiter *w = p;
    w->rc = redmutex_multi_lock_acquire(w->m, "job-7", rt_scaled_ms(20000));
    atomic_store(&w->done_ms, rt_now_ms());
    return NULL;
}

static void test_a_waiter_wakes_when_the_busy_lock_is_released(void)
{
    rs_start(&srv, NULL);
    redmutex_client *holder = client_for(srv.url);
    redmutex_client_options o = REDMUTEX_CLIENT_OPTIONS_INIT;
    o.wait_backoff_cap_ms = 20000; /* only the release message wakes it soon */
    const char *url = srv.url;
    redmutex_client *c;
    CHECK_OK(redmutex_client_new(&c, &url, 1, &o));
    redmutex_lock *ls[2] = {new_lock(c, "w:1", REDMUTEX_KIND_LOCK), new_lock(c, "w:2", REDMUTEX_KIND_RLOCK)};
    redmutex_multi_lock *m;
    CHECK_OK(redmutex_multi_lock_new(&m, ls, 2));
    redmutex_lock *h = new_lock(holder, "w:2", REDMUTEX_KIND_RLOCK);
    CHECK_OK(redmutex_lock_acquire(h, NULL, 0));
    waiter w = {m, -99, 0};
    pthread_t t;
    pthread_create(&t, NULL, waiter_main, &w);
    WAIT_FOR(rs_numsub(&srv, "redisson_lock__channel:{w:2}") == 1, 5000);
    rt_sleep_ms(1500); /* its backoff has grown past the bound below */
    int64_t t0 = rt_now_ms();
    CHECK_OK(redmutex_lock_release(h, NULL));
    pthread_join(t, NULL);
    CHECK_OK(w.rc);
    int64_t took = atomic_load(&w.done_ms) - t0;
    CHECKF(took < rt_scaled_ms(700), "the multi-lock took %lld ms after the release", (long long)took);
    CHECK_OK(redmutex_multi_lock_release(m, "job-7"));
    redmutex_multi_lock_free(m);
    redmutex_lock_free(ls[0]);
    redmutex_lock_free(ls[1]);
    redmutex_lock_free(h);
    done(c);
    done(holder);
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

static void test_a_pollable_wait_takes_the_set_when_it_is_free(void)
{
    rs_start(&srv, NULL);
    redmutex_client *c = client_for(srv.url), *other = client_for(srv.url);
    redmutex_lock *ls[2] = {new_lock(c, "p:1", REDMUTEX_KIND_RLOCK), new_lock(c, "p:2", REDMUTEX_KIND_LOCK)};
    redmutex_multi_lock *m;
    CHECK_OK(redmutex_multi_lock_new(&m, ls, 2));
    redmutex_lock *h = new_lock(other, "p:2", REDMUTEX_KIND_LOCK);
    CHECK_OK(redmutex_lock_acquire(h, NULL, 0));
    redmutex_wait *w;
    CHECK_OK(redmutex_multi_lock_wait_new(&w, m, "task-1"));
    CHECK_RC(redmutex_wait_try(w), REDMUTEX_ETIMEDOUT);
    CHECK(!rs_exists(&srv, "p:1"));
    await_ready(c, w, 5000); /* subscribed: one more look */
    CHECK_RC(redmutex_wait_try(w), REDMUTEX_ETIMEDOUT);
    CHECK_OK(redmutex_lock_release(h, NULL));
    await_ready(c, w, 2000);
    CHECK_OK(redmutex_wait_try(w));
    redmutex_wait_free(w);
    CHECK(rs_exists(&srv, "p:1") && rs_exists(&srv, "p:2"));
    CHECK_OK(redmutex_multi_lock_release(m, "task-1"));
    CHECK(!rs_exists(&srv, "p:1") && !rs_exists(&srv, "p:2"));
    redmutex_multi_lock_free(m);
    redmutex_lock_free(ls[0]);
    redmutex_lock_free(ls[1]);
    redmutex_lock_free(h);
    done(c);
    done(other);
    rs_stop(&srv);
}

/* ---- bad input, lost members, Redlock ---------------------------------------------- */

static void test_bad_input_is_refused_and_changes_nothing(void)
{
    rs_start(&srv, NULL);
    redmutex_client *c = client_for(srv.url), *other = client_for(srv.url);
    redmutex_lock *a = new_lock(c, "bad:a", REDMUTEX_KIND_LOCK), *a2 = new_lock(c, "bad:a", REDMUTEX_KIND_RLOCK);
    redmutex_lock *x = new_lock(other, "bad:x", REDMUTEX_KIND_LOCK);
    redmutex_multi_lock *m;
    redmutex_lock *none[1] = {NULL};
    CHECK_RC(redmutex_multi_lock_new(&m, none, 0), REDMUTEX_EINVAL);
    CHECK_RC(redmutex_multi_lock_new(&m, none, 1), REDMUTEX_EINVAL);
    CHECK_RC(redmutex_multi_lock_new(NULL, &a, 1), REDMUTEX_EINVAL);
    CHECK_RC(redmutex_multi_lock_new(&m, NULL, 1), REDMUTEX_EINVAL);
    redmutex_lock *dup[2] = {a, a2}, *mixed[2] = {a, x};
    CHECK_RC(redmutex_multi_lock_new(&m, dup, 2), REDMUTEX_EINVAL);
    CHECK_RC(redmutex_multi_lock_new(&m, mixed, 2), REDMUTEX_EINVAL);
    CHECK_RC(redmutex_multi_lock_new(&m, &a, REDMUTEX_MULTI_LOCK_MAX + 1), REDMUTEX_EINVAL);
    CHECK_OK(redmutex_multi_lock_new(&m, &a, 1));
    CHECK_RC(redmutex_multi_lock_acquire(m, NULL, -7), REDMUTEX_EINVAL);
    CHECK_RC(redmutex_multi_lock_acquire(m, "", 0), REDMUTEX_EINVAL);
    CHECK_RC(redmutex_multi_lock_acquire(NULL, NULL, 0), REDMUTEX_EINVAL);
    CHECK_RC(redmutex_multi_lock_release(NULL, NULL), REDMUTEX_EINVAL);
    CHECK(rs_count_keys(&srv, "*") == 0);
    /* A key of another type: an error, not a wait. */
    freeReplyObject(rs_cmd(&srv, "HSET bad:a f 1"));
    CHECK_RC(redmutex_multi_lock_acquire(m, NULL, 2000), REDMUTEX_EWRONGTYPE);
    redmutex_multi_lock_free(m);
    redmutex_multi_lock_free(NULL);
    redmutex_lock_free(a);
    redmutex_lock_free(a2);
    redmutex_lock_free(x);
    done(c);
    done(other);
    rs_stop(&srv);
}

static void test_a_lost_member_is_reported_for_its_lock(void)
{
    rs_start(&srv, NULL);
    redmutex_client_options o = REDMUTEX_CLIENT_OPTIONS_INIT;
    o.watchdog_lease_ms = rt_scaled_ms(600);
    const char *url = srv.url;
    redmutex_client *c;
    CHECK_OK(redmutex_client_new(&c, &url, 1, &o));
    redmutex_lock *ls[2] = {new_lock(c, "lost:1", REDMUTEX_KIND_RLOCK), new_lock(c, "lost:2", REDMUTEX_KIND_RLOCK)};
    redmutex_multi_lock *m;
    CHECK_OK(redmutex_multi_lock_new(&m, ls, 2));
    CHECK(redmutex_client_event_fd(c) >= 0);
    CHECK_OK(redmutex_multi_lock_acquire(m, NULL, 0));
    freeReplyObject(rs_cmd(&srv, "DEL lost:2"));
    uint64_t id = 0;
    redmutex_state st;
    WAIT_FOR(redmutex_client_next_event(c, &id, &st, NULL, 0) == 1, 3000);
    CHECK(id == redmutex_lock_id(ls[1]) && st == REDMUTEX_STATE_LOST);
    CHECK_RC(redmutex_multi_lock_release(m, NULL), REDMUTEX_ELOST);
    CHECK(!rs_exists(&srv, "lost:1")); /* released all the same */
    redmutex_multi_lock_free(m);
    redmutex_lock_free(ls[0]);
    redmutex_lock_free(ls[1]);
    done(c);
    rs_stop(&srv);
}

static void test_redlock_multi_lock_needs_a_majority_for_every_lock(void)
{
    for (int i = 0; i < 3; i++)
        rs_start(&servers[i], NULL);
    const char *urls[3] = {servers[0].url, servers[1].url, servers[2].url};
    redmutex_client_options o = REDMUTEX_CLIENT_OPTIONS_INIT;
    o.command_timeout_ms = rt_scaled_ms(300);
    o.connect_timeout_ms = rt_scaled_ms(300);
    o.shutdown_timeout_ms = 500;
    redmutex_client *c;
    CHECK_OK(redmutex_client_new(&c, urls, 3, &o));
    redmutex_lock *ls[2] = {new_lock(c, "rl:1", REDMUTEX_KIND_LOCK), new_lock(c, "rl:2", REDMUTEX_KIND_RLOCK)};
    redmutex_multi_lock *m;
    CHECK_OK(redmutex_multi_lock_new(&m, ls, 2));
    /* rl:2 held by someone else on two of three servers. */
    for (int i = 0; i < 2; i++)
        freeReplyObject(rs_cmd(&servers[i], "HSET rl:2 intruder 1"));
    CHECK_RC(redmutex_multi_lock_acquire(m, NULL, 0), REDMUTEX_ETIMEDOUT);
    for (int i = 0; i < 3; i++)
        CHECK(!rs_exists(&servers[i], "rl:1"));
    for (int i = 0; i < 2; i++)
        freeReplyObject(rs_cmd(&servers[i], "DEL rl:2"));
    rs_kill(&servers[2]);
    CHECK_OK(redmutex_multi_lock_acquire(m, NULL, 0));
    CHECK_OK(redmutex_multi_lock_release(m, NULL));
    for (int i = 0; i < 2; i++)
        CHECK(!rs_exists(&servers[i], "rl:1") && !rs_exists(&servers[i], "rl:2"));
    redmutex_multi_lock_free(m);
    redmutex_lock_free(ls[0]);
    redmutex_lock_free(ls[1]);
    done(c);
    for (int i = 0; i < 3; i++)
        rs_stop(&servers[i]);
}

static void test_all_or_nothing_over_three_masters_of_a_cluster(void)
{
    if (cl.n == 0)
        rc_start(&cl, 3, 0, NULL);
    rc_resetstat(&cl);
    const char *url = cl.url;
    redmutex_client *c = client_for(url), *other = client_for(url);
    char names[3][64];
    for (int i = 0; i < 3; i++)
        rc_name_on(&cl, rc_master(&cl, i), i == 0 ? "m0:%d" : i == 1 ? "m1:%d" : "m2:%d", names[i], sizeof names[i]);
    redmutex_lock *ls[3] = {new_lock(c, names[0], REDMUTEX_KIND_LOCK), new_lock(c, names[1], REDMUTEX_KIND_RLOCK),
                            new_lock(c, names[2], REDMUTEX_KIND_LOCK)};
    redmutex_multi_lock *m;
    CHECK_OK(redmutex_multi_lock_new(&m, ls, 3));
    redmutex_lock *h = new_lock(other, names[2], REDMUTEX_KIND_LOCK);
    CHECK_OK(redmutex_lock_acquire(h, NULL, 0));
    CHECK_RC(redmutex_multi_lock_acquire(m, NULL, 0), REDMUTEX_ETIMEDOUT);
    CHECK(!rs_exists(rc_master(&cl, 0), names[0]) && !rs_exists(rc_master(&cl, 1), names[1]));
    CHECK_OK(redmutex_lock_release(h, NULL));
    CHECK_OK(redmutex_multi_lock_acquire(m, NULL, 0));
    for (int i = 0; i < 3; i++)
        CHECK(rs_exists(rc_master(&cl, i), names[i]));
    CHECK_OK(redmutex_multi_lock_release(m, NULL));
    for (int i = 0; i < 3; i++)
        CHECK(!rs_exists(rc_master(&cl, i), names[i]));
    CHECK(rc_errorstat_all(&cl, "CROSSSLOT") == 0);
    redmutex_multi_lock_free(m);
    for (int i = 0; i < 3; i++)
        redmutex_lock_free(ls[i]);
    redmutex_lock_free(h);
    done(c);
    done(other);
}

int main(int argc, char **argv)
{
    static const rt_test tests[] = {
        {"all_of_the_set_or_nothing", test_all_of_the_set_or_nothing},
        {"three_locks_on_one_server_take_one_round_trip_each_way",
         test_three_locks_on_one_server_take_one_round_trip_each_way},
        {"opposite_orders_never_deadlock_one_request", test_opposite_orders_never_deadlock_one_request},
        {"opposite_orders_never_deadlock_lock_by_lock", test_opposite_orders_never_deadlock_lock_by_lock},
        {"opposite_orders_never_deadlock_on_five_servers", test_opposite_orders_never_deadlock_on_five_servers},
        {"opposite_orders_never_deadlock_on_a_cluster_one_request_per_slot",
         test_opposite_orders_never_deadlock_on_a_cluster_one_request_per_slot},
        {"all_or_nothing_over_three_masters_of_a_cluster", test_all_or_nothing_over_three_masters_of_a_cluster},
        {"a_waiter_wakes_when_the_busy_lock_is_released", test_a_waiter_wakes_when_the_busy_lock_is_released},
        {"a_pollable_wait_takes_the_set_when_it_is_free", test_a_pollable_wait_takes_the_set_when_it_is_free},
        {"bad_input_is_refused_and_changes_nothing", test_bad_input_is_refused_and_changes_nothing},
        {"a_lost_member_is_reported_for_its_lock", test_a_lost_member_is_reported_for_its_lock},
        {"redlock_multi_lock_needs_a_majority_for_every_lock", test_redlock_multi_lock_needs_a_majority_for_every_lock},
    };
    return rt_run(tests, sizeof tests / sizeof tests[0], argc, argv);
}
