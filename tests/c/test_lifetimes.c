/*
 * Lifetimes a garbage collector can live with: clients and lock handles are
 * freed in any order and from any thread, freeing never blocks, a handle can
 * be freed from its own lost-lock callback, a handle freed while it holds a
 * lock leaves it to be released by close, and calls racing a close get
 * REDMUTEX_ECLOSED or complete. Run under ASan, TSan and valgrind, a wrong
 * order shows as use-after-free, a race or a leak.
 */
#define _GNU_SOURCE
#include "harness.h"

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

/* "Never blocks": far below what a blocking close would take with a stopped
   server (the 400 ms command timeout), with room for thread creation under
   sanitizers (and stretched under valgrind, see rt_scaled_ms). */
#define QUICK_MS rt_scaled_ms(150)

static rs_server srv;

static redmutex_client *lt_client(int64_t lease_ms, int64_t cmd_timeout_ms, int64_t shutdown_ms)
{
    redmutex_client_options o = REDMUTEX_CLIENT_OPTIONS_INIT;
    o.watchdog_lease_ms = lease_ms;
    o.command_timeout_ms = cmd_timeout_ms;
    o.shutdown_timeout_ms = shutdown_ms;
    const char *url = srv.url;
    redmutex_client *c;
    CHECK_OK(redmutex_client_new(&c, &url, 1, &o));
    return c;
}

static redmutex_lock *new_lock(redmutex_client *c, const char *name, redmutex_kind kind)
{
    redmutex_lock *l;
    CHECK_OK(redmutex_lock_new(&l, c, name, kind, NULL));
    return l;
}

/* ---- freeing in every order ------------------------------------------------ */

enum { N_OBJECTS = 4 }; /* the client, a held plain lock, a held rlock, an idle lock */

typedef struct objects {
    redmutex_client *c;
    redmutex_lock *l[3];
} objects;

static void make_objects(objects *o)
{
    o->c = lt_client(30000, rt_scaled_ms(1000), rt_scaled_ms(1000));
    o->l[0] = new_lock(o->c, "a", REDMUTEX_KIND_LOCK);
    o->l[1] = new_lock(o->c, "b", REDMUTEX_KIND_RLOCK);
    o->l[2] = new_lock(o->c, "c", REDMUTEX_KIND_LOCK);
    CHECK_OK(redmutex_lock_acquire(o->l[0], NULL, 0));
    CHECK_OK(redmutex_lock_acquire(o->l[1], NULL, 0));
    CHECK_OK(redmutex_lock_acquire(o->l[1], NULL, 0));
}

static void free_object(objects *o, int k)
{
    int64_t t0 = rt_now_ms();
    if (k == 0)
        redmutex_client_free(o->c);
    else
        redmutex_lock_free(o->l[k - 1]);
    int64_t took = rt_now_ms() - t0;
    CHECKF(took < QUICK_MS, "freeing object %d took %lld ms", k, (long long)took);
}

/* No lock key left (unlock latches, which live for 10 command timeouts, aside). */
static long long lock_keys(void)
{
    redisReply *r = rs_cmd(&srv, "KEYS *");
    CHECK(r && r->type == REDIS_REPLY_ARRAY);
    long long n = 0;
    for (size_t i = 0; i < r->elements; i++)
        n += strncmp(r->element[i]->str, "redisson_unlock_latch:", 22) != 0;
    freeReplyObject(r);
    return n;
}

static bool wait_no_keys(int64_t ms)
{
    int64_t end = rt_now_ms() + ms;
    while (lock_keys() != 0) {
        if (rt_now_ms() > end)
            return false;
        rt_sleep_ms(5);
    }
    return true;
}

static void test_client_and_handles_freed_in_every_order(void)
{
    rs_start(&srv, NULL);
    int perm[N_OBJECTS] = {0, 1, 2, 3};
    int orders = 0;
    for (;;) {
        objects o;
        make_objects(&o);
        for (int i = 0; i < N_OBJECTS; i++)
            free_object(&o, perm[i]);
        /* Held locks are released: by the background close, or (handles
           freed first) by the close that releases what they left behind. */
        CHECKF(wait_no_keys(rt_scaled_ms(5000)), "keys left after freeing in the order %d %d %d %d", perm[0], perm[1],
               perm[2], perm[3]);
        orders++;
        /* next permutation */
        int i = N_OBJECTS - 2;
        while (i >= 0 && perm[i] > perm[i + 1])
            i--;
        if (i < 0)
            break;
        int j = N_OBJECTS - 1;
        while (perm[j] < perm[i])
            j--;
        int t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
        for (int a = i + 1, b = N_OBJECTS - 1; a < b; a++, b--) {
            t = perm[a];
            perm[a] = perm[b];
            perm[b] = t;
        }
    }
    CHECK(orders == 24);
}

static objects shared;
static pthread_barrier_t go; /* not a spin: under valgrind a spinning thread starves the others */

static void *free_on_thread(void *p)
{
    pthread_barrier_wait(&go);
    free_object(&shared, (int)(intptr_t)p);
    return NULL;
}

static void test_client_and_handles_freed_at_once_from_different_threads(void)
{
    rs_start(&srv, NULL);
    for (int round = 0; round < 20; round++) {
        make_objects(&shared);
        pthread_barrier_init(&go, NULL, N_OBJECTS);
        pthread_t t[N_OBJECTS];
        for (int k = 0; k < N_OBJECTS; k++)
            pthread_create(&t[k], NULL, free_on_thread, (void *)(intptr_t)k);
        for (int k = 0; k < N_OBJECTS; k++)
            pthread_join(t[k], NULL);
        pthread_barrier_destroy(&go);
        CHECK(wait_no_keys(rt_scaled_ms(5000)));
    }
}

static void test_calls_after_close_fail_with_eclosed_queries_still_work(void)
{
    rs_start(&srv, NULL);
    redmutex_client *c = lt_client(30000, 1000, 1000);
    redmutex_lock *l = new_lock(c, "q", REDMUTEX_KIND_LOCK);
    redmutex_lock *r = new_lock(c, "r", REDMUTEX_KIND_RLOCK);
    CHECK_OK(redmutex_lock_acquire(l, NULL, 0));
    CHECK_OK(redmutex_client_close(c));
    CHECK_OK(redmutex_client_close(c)); /* idempotent */
    CHECK_RC(redmutex_client_close(NULL), REDMUTEX_EINVAL);
    CHECK(!rs_exists(&srv, "q"));
    int out;
    int64_t n;
    CHECK_RC(redmutex_lock_acquire(l, NULL, 0), REDMUTEX_ECLOSED);
    CHECK_RC(redmutex_lock_release(l, NULL), REDMUTEX_ECLOSED);
    CHECK_RC(redmutex_lock_extend(l, NULL, 100, REDMUTEX_EXTEND_ADD), REDMUTEX_ECLOSED);
    CHECK_RC(redmutex_lock_is_locked(&out, l), REDMUTEX_ECLOSED);
    CHECK_RC(redmutex_lock_ttl(&n, r), REDMUTEX_ECLOSED);
    CHECK_RC(redmutex_lock_force_release(&out, r), REDMUTEX_ECLOSED);
    redmutex_lock *l2;
    CHECK_RC(redmutex_lock_new(&l2, c, "q", REDMUTEX_KIND_LOCK, NULL), REDMUTEX_ECLOSED);
    redmutex_state st;
    CHECK_OK(redmutex_lock_state(&st, l, NULL));
    CHECK(st == REDMUTEX_STATE_UNLOCKED);
    CHECK(strcmp(redmutex_lock_name(l), "q") == 0 && redmutex_lock_id(l) > 0);
    CHECK(strlen(redmutex_client_id(c)) == REDMUTEX_CLIENT_ID_LEN && redmutex_client_server_count(c) == 1);
    redmutex_client_free(c); /* the handles keep it alive */
    CHECK_RC(redmutex_lock_acquire(r, NULL, 0), REDMUTEX_ECLOSED);
    redmutex_lock_free(r);
    redmutex_lock_free(l);
}

/* ---- freeing never blocks ------------------------------------------------------ */

static void test_free_never_blocks_with_a_stopped_server(void)
{
    rs_start(&srv, NULL);
    redmutex_client *c = lt_client(600, 400, 700);
    redmutex_lock *l[4];
    for (int i = 0; i < 4; i++) {
        char name[16];
        snprintf(name, sizeof name, "held:%d", i);
        l[i] = new_lock(c, name, i % 2 ? REDMUTEX_KIND_RLOCK : REDMUTEX_KIND_LOCK);
        CHECK_OK(redmutex_lock_acquire(l[i], NULL, 0));
    }
    rs_pause(&srv);
    rt_sleep_ms(250); /* a renewal is in flight now */
    int64_t t0 = rt_now_ms();
    redmutex_lock_free(l[0]);
    redmutex_client_free(c);
    for (int i = 1; i < 4; i++)
        redmutex_lock_free(l[i]);
    int64_t took = rt_now_ms() - t0;
    CHECKF(took < QUICK_MS, "freeing took %lld ms with the server stopped", (long long)took);
    rs_resume(&srv);
}

/* ---- lost-lock callbacks that free ----------------------------------------------- */

typedef struct freeing_cb {
    redmutex_lock *lock;     /* set before the callback can run */
    redmutex_client *client; /* freed by the callback too, when set */
    atomic_int calls;
    atomic_int close_rc;
} freeing_cb;

static void free_from_callback(redmutex_lock *l, const char *owner, redmutex_state st, void *payload)
{
    (void)owner;
    freeing_cb *cb = payload;
    if (st != REDMUTEX_STATE_LOST)
        return;
    CHECK(l == cb->lock);
    redmutex_state now;
    CHECK_OK(redmutex_lock_state(&now, l, NULL));
    if (cb->client) {
        atomic_store(&cb->close_rc, redmutex_client_close(cb->client)); /* refused here */
        redmutex_client_free(cb->client);
    }
    redmutex_lock_free(l); /* like a registry dropping the last reference */
    atomic_fetch_add(&cb->calls, 1);
}

static void test_handle_freed_from_its_own_callback(void)
{
    rs_start(&srv, NULL);
    const int64_t lease = rt_scaled_ms(900);
    redmutex_client *c = lt_client(lease, rt_scaled_ms(300), 1000);
    freeing_cb cb = {0};
    redmutex_lock_options o = REDMUTEX_LOCK_OPTIONS_INIT;
    o.on_lost = free_from_callback;
    o.on_lost_payload = &cb;
    CHECK_OK(redmutex_lock_new(&cb.lock, c, "victim", REDMUTEX_KIND_LOCK, &o));
    redmutex_lock *other = new_lock(c, "other", REDMUTEX_KIND_LOCK);
    CHECK_OK(redmutex_lock_acquire(cb.lock, NULL, 0));
    CHECK_OK(redmutex_lock_acquire(other, NULL, 0));
    CHECK(rs_int(&srv, "DEL victim") == 1);
    WAIT_FOR(atomic_load(&cb.calls) == 1, 2000);
    /* The watchdog is not stuck: the other lock keeps being renewed (a stuck
       watchdog would let it expire within one lease). */
    int64_t end = rt_now_ms() + 3 * lease;
    while (rt_now_ms() < end) {
        CHECK(rs_int(&srv, "PTTL other") > 0);
        rt_sleep_ms(10);
    }
    int64_t t0 = rt_now_ms();
    CHECK_OK(redmutex_client_close(c));
    CHECK(rt_now_ms() - t0 < rt_scaled_ms(1000));
    CHECK(!rs_exists(&srv, "other"));
    redmutex_lock_free(other);
    redmutex_client_free(c);
}

static void test_client_freed_and_close_refused_in_a_callback(void)
{
    rs_start(&srv, NULL);
    redmutex_client *c = lt_client(300, 200, 1000);
    freeing_cb cb = {0};
    cb.client = c;
    redmutex_lock_options o = REDMUTEX_LOCK_OPTIONS_INIT;
    o.on_lost = free_from_callback;
    o.on_lost_payload = &cb;
    CHECK_OK(redmutex_lock_new(&cb.lock, c, "victim", REDMUTEX_KIND_LOCK, &o));
    redmutex_lock *other = new_lock(c, "other", REDMUTEX_KIND_LOCK);
    CHECK_OK(redmutex_lock_acquire(cb.lock, NULL, 0));
    CHECK_OK(redmutex_lock_acquire(other, NULL, 0));
    CHECK(rs_int(&srv, "DEL victim") == 1);
    WAIT_FOR(atomic_load(&cb.calls) == 1, 2000);
    CHECK(atomic_load(&cb.close_rc) == REDMUTEX_EINVAL);
    /* The client freed by the callback closes in the background and releases. */
    WAIT_FOR(!rs_exists(&srv, "other"), 3000);
    CHECK_RC(redmutex_lock_release(other, NULL), REDMUTEX_ECLOSED);
    redmutex_lock_free(other);
}

/* ---- handles freed while holding ---------------------------------------------------- */

static void test_handle_freed_while_held_is_released_by_close(void)
{
    rs_start(&srv, NULL);
    redmutex_client *c = lt_client(30000, 1000, 1000);
    redmutex_lock *l = new_lock(c, "dropped", REDMUTEX_KIND_LOCK);
    redmutex_lock *r = new_lock(c, "dropped-r", REDMUTEX_KIND_RLOCK);
    CHECK_OK(redmutex_lock_acquire(l, NULL, 0));
    CHECK_OK(redmutex_lock_acquire(r, "task-1", 0));
    redmutex_lock_free(l);
    redmutex_lock_free(r);
    CHECK(rs_exists(&srv, "dropped") && rs_exists(&srv, "dropped-r")); /* not released by the free */
    CHECK_OK(redmutex_client_close(c));
    CHECK(!rs_exists(&srv, "dropped") && !rs_exists(&srv, "dropped-r"));
    redmutex_client_free(c);
}

static void test_handle_freed_while_held_is_no_longer_renewed(void)
{
    rs_start(&srv, NULL);
    const int64_t lease = rt_scaled_ms(1000);
    redmutex_client *c = lt_client(lease, rt_scaled_ms(300), 1000);
    redmutex_lock *l = new_lock(c, "expiring", REDMUTEX_KIND_LOCK);
    redmutex_lock *kept = new_lock(c, "kept", REDMUTEX_KIND_LOCK);
    CHECK_OK(redmutex_lock_acquire(l, NULL, 0));
    CHECK_OK(redmutex_lock_acquire(kept, NULL, 0));
    int fd = redmutex_client_event_fd(c);
    redmutex_lock_free(l);
    WAIT_FOR(!rs_exists(&srv, "expiring"), 2 * lease);
    rt_sleep_ms(lease); /* the watchdog drops the orphan at the end of its validity */
    uint64_t id;
    redmutex_state st;
    CHECK_RC(redmutex_client_next_event(c, &id, &st, NULL, 0), 0); /* a freed handle's hold is not news */
    (void)fd;
    CHECK(rs_exists(&srv, "kept"));
    CHECK_OK(redmutex_client_close(c));
    CHECK(!rs_exists(&srv, "kept"));
    redmutex_lock_free(kept);
    redmutex_client_free(c);
}

/* ---- close racing calls from other threads ---------------------------------------- */

static atomic_int race_bad;
static atomic_int race_ops;

static void *acquire_release_loop(void *p)
{
    redmutex_lock *l = p;
    for (;;) {
        int rc = redmutex_lock_acquire(l, NULL, 50);
        if (rc == REDMUTEX_ECLOSED)
            break;
        if (rc == 0) {
            rc = redmutex_lock_release(l, NULL);
            if (rc == REDMUTEX_ECLOSED || rc == REDMUTEX_ENOTOWNER)
                break; /* the close released it (before, or while this release waited its turn) */
            if (rc != 0)
                atomic_fetch_add(&race_bad, 1);
        } else if (rc != REDMUTEX_ETIMEDOUT) {
            fprintf(stderr, "acquire: %s\n", redmutex_last_error());
            atomic_fetch_add(&race_bad, 1);
        }
        atomic_fetch_add(&race_ops, 1);
    }
    return NULL;
}

static void test_close_racing_acquires_from_other_threads(void)
{
    rs_start(&srv, NULL);
    for (int round = 0; round < 5; round++) {
        redmutex_client *c = lt_client(30000, 1000, 2000);
        enum { T = 6 };
        pthread_t t[T];
        redmutex_lock *l[T];
        for (int i = 0; i < T; i++) {
            /* Threads 0 and 3 contend on a reentrant lock, the others on two plain ones. */
            l[i] = i % 3 ? new_lock(c, i % 2 ? "race-a" : "race-b", REDMUTEX_KIND_LOCK)
                         : new_lock(c, "race-r", REDMUTEX_KIND_RLOCK);
            pthread_create(&t[i], NULL, acquire_release_loop, l[i]);
        }
        WAIT_FOR(atomic_load(&race_ops) > 20 * (round + 1), 5000);
        int64_t t0 = rt_now_ms();
        CHECK_OK(redmutex_client_close(c));
        for (int i = 0; i < T; i++)
            pthread_join(t[i], NULL);
        CHECKF(rt_now_ms() - t0 < 3000, "threads ended %lld ms after the close", (long long)(rt_now_ms() - t0));
        CHECK(atomic_load(&race_bad) == 0);
        CHECK(wait_no_keys(3000)); /* nothing held, nothing left behind */
        for (int i = 0; i < T; i++)
            redmutex_lock_free(l[i]);
        redmutex_client_free(c);
    }
}

int main(int argc, char **argv)
{
    static const rt_test tests[] = {
        {"client_and_handles_freed_in_every_order", test_client_and_handles_freed_in_every_order},
        {"client_and_handles_freed_at_once_from_different_threads",
         test_client_and_handles_freed_at_once_from_different_threads},
        {"calls_after_close_fail_with_eclosed_queries_still_work",
         test_calls_after_close_fail_with_eclosed_queries_still_work},
        {"free_never_blocks_with_a_stopped_server", test_free_never_blocks_with_a_stopped_server},
        {"handle_freed_from_its_own_callback", test_handle_freed_from_its_own_callback},
        {"client_freed_and_close_refused_in_a_callback", test_client_freed_and_close_refused_in_a_callback},
        {"handle_freed_while_held_is_released_by_close", test_handle_freed_while_held_is_released_by_close},
        {"handle_freed_while_held_is_no_longer_renewed", test_handle_freed_while_held_is_no_longer_renewed},
        {"close_racing_acquires_from_other_threads", test_close_racing_acquires_from_other_threads},
    };
    return rt_run(tests, sizeof tests / sizeof tests[0], argc, argv);
}
