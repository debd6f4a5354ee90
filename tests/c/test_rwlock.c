/* Read-write locks (Redisson RReadWriteLock wire format) against a real redis-server. */
#define _GNU_SOURCE
#include "harness.h"
#include "procs.h"

#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

static rs_server srv;

static redmutex_lock *side(redmutex_client *c, const char *name, redmutex_kind kind, int64_t lease_ms)
{
    redmutex_lock_options o = REDMUTEX_LOCK_OPTIONS_INIT;
    o.lease_ms = lease_ms;
    redmutex_lock *l = NULL;
    CHECK_OK(redmutex_lock_new(&l, c, name, kind, &o));
    return l;
}

static void mode_is(const char *name, const char *want)
{
    redisReply *r = rs_cmd(&srv, "HGET %s mode", name);
    CHECKF(r && r->type == REDIS_REPLY_STRING && strcmp(r->str, want) == 0, "mode of %s is not %s", name, want);
    freeReplyObject(r);
}

/* An owner id for a reader or writer that stands for another process. */
static const char *other(int i)
{
    static char buf[8][64];
    snprintf(buf[i], sizeof buf[i], "aaaaaaaa-0000-0000-0000-00000000000%d:1", i);
    return buf[i];
}

static void test_readers_share_a_writer_excludes_in_redisson_format(void)
{
    rs_start(&srv, NULL);
    redmutex_client *c = rt_client(&srv, 0);
    redmutex_lock *r = side(c, "cat", REDMUTEX_KIND_READ, 0), *w = side(c, "cat", REDMUTEX_KIND_WRITE, 0);
    CHECK(redmutex_lock_kind(r) == REDMUTEX_KIND_READ && redmutex_lock_kind(w) == REDMUTEX_KIND_WRITE);
    CHECK_OK(redmutex_lock_acquire(r, other(0), 0));
    CHECK_OK(redmutex_lock_acquire(r, other(1), 0));
    mode_is("cat", "read");
    CHECK(rs_num(&srv, "HGET cat %s", other(0)) == 1 && rs_num(&srv, "HGET cat %s", other(1)) == 1);
    /* one timeout key per read hold, with the lease */
    char key[200];
    snprintf(key, sizeof key, "{cat}:%s:rwlock_timeout:1", other(0));
    long long pttl = rs_int(&srv, "PTTL %s", key);
    CHECK(pttl > 25000 && pttl <= 30000);
    int locked = 0;
    CHECK_OK(redmutex_lock_is_locked(&locked, r));
    CHECK(locked == 1);
    CHECK_OK(redmutex_lock_is_locked(&locked, w));
    CHECK(locked == 0);
    /* readers exclude a writer */
    CHECK_RC(redmutex_lock_acquire(w, other(2), 0), REDMUTEX_ETIMEDOUT);
    CHECK_OK(redmutex_lock_release(r, other(0)));
    CHECK(!rs_exists(&srv, key));
    CHECK_RC(redmutex_lock_acquire(w, other(2), 0), REDMUTEX_ETIMEDOUT);
    CHECK_OK(redmutex_lock_release(r, other(1)));
    CHECK(!rs_exists(&srv, "cat"));
    /* a writer excludes readers and other writers */
    CHECK_OK(redmutex_lock_acquire(w, other(2), 0));
    mode_is("cat", "write");
    char wfield[100];
    snprintf(wfield, sizeof wfield, "%s:write", other(2));
    CHECK(rs_num(&srv, "HGET cat %s", wfield) == 1);
    CHECK_RC(redmutex_lock_acquire(r, other(0), 0), REDMUTEX_ETIMEDOUT);
    CHECK_RC(redmutex_lock_acquire(w, other(3), 0), REDMUTEX_ETIMEDOUT);
    CHECK_OK(redmutex_lock_is_locked(&locked, w));
    CHECK(locked == 1);
    int64_t n = 0;
    CHECK_OK(redmutex_lock_hold_count(&n, w, other(2)));
    CHECK(n == 1);
    CHECK_OK(redmutex_lock_release(w, other(2)));
    CHECK(rs_int(&srv, "DBSIZE") <= 2); /* only unlock latches are left */
    CHECK_RC(redmutex_lock_release(w, other(2)), REDMUTEX_ENOTOWNER);
    CHECK_RC(redmutex_lock_release(r, other(0)), REDMUTEX_ENOTOWNER);
    redmutex_lock_free(r);
    redmutex_lock_free(w);
    redmutex_client_free(c);
}

static void test_reentrant_and_writer_may_read(void)
{
    rs_start(&srv, NULL);
    redmutex_client *c = rt_client(&srv, 0);
    redmutex_lock *r = side(c, "re", REDMUTEX_KIND_READ, 0), *w = side(c, "re", REDMUTEX_KIND_WRITE, 0);
    char me[128], key[300];
    CHECK_OK(redmutex_client_thread_owner(me, sizeof me, c));
    CHECK_OK(redmutex_lock_acquire(r, NULL, 0));
    CHECK_OK(redmutex_lock_acquire(r, NULL, 0));
    CHECK(rs_num(&srv, "HGET re %s", me) == 2);
    snprintf(key, sizeof key, "{re}:%s:rwlock_timeout:2", me);
    CHECK(rs_exists(&srv, key));
    /* a reader cannot upgrade */
    CHECK_RC(redmutex_lock_acquire(w, NULL, 100), REDMUTEX_ETIMEDOUT);
    CHECK_OK(redmutex_lock_release(r, NULL));
    CHECK(!rs_exists(&srv, key));
    CHECK_OK(redmutex_lock_release(r, NULL));
    CHECK(!rs_exists(&srv, "re"));
    /* a writer is reentrant and may take the read side too */
    CHECK_OK(redmutex_lock_acquire(w, NULL, 0));
    CHECK_OK(redmutex_lock_acquire(w, NULL, 0));
    CHECK_OK(redmutex_lock_acquire(r, NULL, 0));
    CHECK(rs_num(&srv, "HGET re %s", me) == 1);
    int locked = 0;
    CHECK_OK(redmutex_lock_is_locked(&locked, r));
    CHECK(locked == 1);
    CHECK_OK(redmutex_lock_release(w, NULL));
    mode_is("re", "write");
    CHECK_OK(redmutex_lock_release(w, NULL));
    mode_is("re", "read"); /* the writer left; its read hold stays */
    CHECK_RC(redmutex_lock_acquire(r, other(0), 0), REDMUTEX_OK);
    CHECK_OK(redmutex_lock_release(r, other(0)));
    CHECK_OK(redmutex_lock_release(r, NULL));
    CHECK(!rs_exists(&srv, "re"));
    redmutex_lock_free(r);
    redmutex_lock_free(w);
    redmutex_client_free(c);
}

/* The watchdog renews the lock and every timeout key of each of its readers. */
static void test_watchdog_renews_every_reader_timeout_key(void)
{
    rs_start(&srv, NULL);
    const char *url = srv.url;
    redmutex_client_options co;
    redmutex_client_options_init(&co, REDMUTEX_CLIENT_OPTIONS_VERSION);
    co.watchdog_lease_ms = rt_scaled_ms(600);
    redmutex_client *c;
    CHECK_OK(redmutex_client_new(&c, &url, 1, &co));
    redmutex_lock *r = side(c, "wd", REDMUTEX_KIND_READ, 0);
    CHECK_OK(redmutex_lock_acquire(r, other(0), 0));
    CHECK_OK(redmutex_lock_acquire(r, other(0), 0));
    CHECK_OK(redmutex_lock_acquire(r, other(1), 0));
    int64_t t0 = rt_now_ms();
    char k[3][200];
    snprintf(k[0], sizeof k[0], "{wd}:%s:rwlock_timeout:1", other(0));
    snprintf(k[1], sizeof k[1], "{wd}:%s:rwlock_timeout:2", other(0));
    snprintf(k[2], sizeof k[2], "{wd}:%s:rwlock_timeout:1", other(1));
    while (rt_now_ms() - t0 < 5 * co.watchdog_lease_ms) { /* five leases */
        for (int i = 0; i < 3; i++)
            CHECKF(rs_int(&srv, "PTTL %s", k[i]) > 0, "%s expired", k[i]);
        CHECK(rs_int(&srv, "PTTL wd") > 0);
        rt_sleep_ms(50);
    }
    redmutex_state st;
    CHECK_OK(redmutex_lock_state(&st, r, other(0)));
    CHECK(st == REDMUTEX_STATE_HELD);
    CHECK_OK(redmutex_lock_release(r, other(0)));
    CHECK_OK(redmutex_lock_release(r, other(0)));
    CHECK_OK(redmutex_lock_release(r, other(1)));
    CHECK(!rs_exists(&srv, "wd"));
    redmutex_lock_free(r);
    redmutex_client_free(c);
}

typedef struct lost_seen {
    _Atomic int lost;
} lost_seen;

static void on_lost(redmutex_lock *l, const char *owner, redmutex_state st, void *p)
{
    (void)l;
    (void)owner;
    if (st == REDMUTEX_STATE_LOST)
        atomic_store(&((lost_seen *)p)->lost, 1);
}

/* A read hold whose lock was deleted behind its back is reported lost by the watchdog. */
static void test_lost_read_and_write_holds_are_reported(void)
{
    rs_start(&srv, NULL);
    const char *url = srv.url;
    redmutex_client_options co;
    redmutex_client_options_init(&co, REDMUTEX_CLIENT_OPTIONS_VERSION);
    co.watchdog_lease_ms = rt_scaled_ms(600);
    redmutex_client *c;
    CHECK_OK(redmutex_client_new(&c, &url, 1, &co));
    lost_seen seen[2] = {{0}, {0}};
    redmutex_lock *l[2];
    for (int i = 0; i < 2; i++) {
        redmutex_lock_options o = REDMUTEX_LOCK_OPTIONS_INIT;
        o.on_lost = on_lost;
        o.on_lost_payload = &seen[i];
        CHECK_OK(redmutex_lock_new(&l[i], c, i ? "lw" : "lr", i ? REDMUTEX_KIND_WRITE : REDMUTEX_KIND_READ, &o));
        CHECK_OK(redmutex_lock_acquire(l[i], NULL, 0));
    }
    freeReplyObject(rs_cmd(&srv, "DEL lr lw"));
    for (int i = 0; i < 2; i++) {
        WAIT_FOR(atomic_load(&seen[i].lost), 3000);
        CHECK_RC(redmutex_lock_release(l[i], NULL), REDMUTEX_ELOST);
        redmutex_lock_free(l[i]);
    }
    redmutex_client_free(c);
}

typedef struct wait_arg {
    redmutex_lock *l;
    int rc;
    int64_t got_ms;
} wait_arg;

static void *acquire_thread(void *p)
{
    wait_arg *a = p;
    a->rc = redmutex_lock_acquire(a->l, NULL, 20000);
    a->got_ms = rt_now_ms();
    if (a->rc == 0)
        redmutex_lock_release(a->l, NULL);
    return NULL;
}

/* Releases wake waiters at once: a write release every waiting reader, a read release a writer. */
static void test_release_wakes_waiters(void)
{
    rs_start(&srv, NULL);
    const char *url = srv.url;
    redmutex_client_options co;
    redmutex_client_options_init(&co, REDMUTEX_CLIENT_OPTIONS_VERSION);
    co.wait_backoff_cap_ms = 10000; /* only a message explains a prompt wake-up */
    redmutex_client *c;
    CHECK_OK(redmutex_client_new(&c, &url, 1, &co));
    redmutex_lock *w = side(c, "wake", REDMUTEX_KIND_WRITE, 0);
    CHECK_OK(redmutex_lock_acquire(w, other(0), 0));
    enum { R = 3 };
    redmutex_lock *r[R];
    wait_arg a[R];
    pthread_t t[R];
    for (int i = 0; i < R; i++) {
        r[i] = side(c, "wake", REDMUTEX_KIND_READ, 0);
        a[i] = (wait_arg){r[i], -1, 0};
        pthread_create(&t[i], NULL, acquire_thread, &a[i]);
    }
    WAIT_FOR(rs_numsub(&srv, "redisson_rwlock:{wake}") >= 1, 5000);
    rt_sleep_ms(300); /* past the first backoff steps: every reader now sleeps on the channel */
    int64_t released = rt_now_ms();
    CHECK_OK(redmutex_lock_release(w, other(0)));
    for (int i = 0; i < R; i++) {
        pthread_join(t[i], NULL);
        CHECK_OK(a[i].rc);
        CHECKF(a[i].got_ms - released < rt_scaled_ms(2000), "reader %d woke %lld ms after the release", i,
               (long long)(a[i].got_ms - released));
    }
    /* a read release wakes a waiting writer */
    CHECK_OK(redmutex_lock_acquire(r[0], other(1), 0));
    wait_arg wa = {w, -1, 0};
    pthread_t wt;
    pthread_create(&wt, NULL, acquire_thread, &wa);
    rt_sleep_ms(300);
    released = rt_now_ms();
    CHECK_OK(redmutex_lock_release(r[0], other(1)));
    pthread_join(wt, NULL);
    CHECK_OK(wa.rc);
    CHECK(wa.got_ms - released < rt_scaled_ms(2000));
    for (int i = 0; i < R; i++)
        redmutex_lock_free(r[i]);
    redmutex_lock_free(w);
    redmutex_client_free(c);
}

/* A pollable wait (an event loop's acquire) on the write side is made ready by the read release. */
static void test_pollable_wait_for_the_write_side(void)
{
    rs_start(&srv, NULL);
    const char *url = srv.url;
    redmutex_client_options co;
    redmutex_client_options_init(&co, REDMUTEX_CLIENT_OPTIONS_VERSION);
    co.wait_backoff_cap_ms = 10000; /* only the release message explains a prompt readiness */
    redmutex_client *c;
    CHECK_OK(redmutex_client_new(&c, &url, 1, &co));
    redmutex_lock *r = side(c, "pw", REDMUTEX_KIND_READ, 0), *w = side(c, "pw", REDMUTEX_KIND_WRITE, 0);
    CHECK_OK(redmutex_lock_acquire(r, other(0), 0));
    redmutex_wait *wait;
    CHECK_OK(redmutex_wait_new(&wait, w, other(1)));
    CHECK_RC(redmutex_wait_try(wait), REDMUTEX_ETIMEDOUT);
    WAIT_FOR(rs_numsub(&srv, "redisson_rwlock:{pw}") >= 1, 5000);
    uint64_t id;
    while (redmutex_client_next_ready(c, &id) == 1) { /* the subscription's confirmation */
        CHECK(id == redmutex_wait_id(wait));
        CHECK_RC(redmutex_wait_try(wait), REDMUTEX_ETIMEDOUT);
    }
    int64_t released = rt_now_ms();
    CHECK_OK(redmutex_lock_release(r, other(0)));
    int fd = redmutex_client_wait_fd(c);
    int rc = REDMUTEX_ETIMEDOUT;
    while (rc == REDMUTEX_ETIMEDOUT) {
        CHECK(rt_now_ms() - released < rt_scaled_ms(2000));
        struct pollfd p = {fd, POLLIN, 0};
        poll(&p, 1, 100);
        while (rc == REDMUTEX_ETIMEDOUT && redmutex_client_next_ready(c, &id) == 1)
            rc = redmutex_wait_try(wait);
    }
    CHECK_OK(rc);
    redmutex_wait_free(wait);
    mode_is("pw", "write");
    CHECK_OK(redmutex_lock_release(w, other(1)));
    redmutex_lock_free(r);
    redmutex_lock_free(w);
    redmutex_client_free(c);
}

static void test_wrong_types_change_nothing(void)
{
    rs_start(&srv, NULL);
    redmutex_client *c = rt_client(&srv, 0);
    redmutex_lock *r = side(c, "wt", REDMUTEX_KIND_READ, 0), *w = side(c, "wt", REDMUTEX_KIND_WRITE, 0);
    /* a reentrant lock (a hash without "mode") is another kind of lock */
    freeReplyObject(rs_cmd(&srv, "HSET wt someone:1 1"));
    CHECK_RC(redmutex_lock_acquire(r, NULL, 0), REDMUTEX_EWRONGTYPE);
    CHECK_RC(redmutex_lock_acquire(w, NULL, 100), REDMUTEX_EWRONGTYPE);
    int deleted = 0;
    CHECK_RC(redmutex_lock_force_release(&deleted, w), REDMUTEX_EWRONGTYPE);
    CHECK(rs_int(&srv, "HLEN wt") == 1 && rs_int(&srv, "DBSIZE") == 1);
    freeReplyObject(rs_cmd(&srv, "DEL wt"));
    freeReplyObject(rs_cmd(&srv, "SET wt plain"));
    CHECK_RC(redmutex_lock_acquire(r, NULL, 0), REDMUTEX_EWRONGTYPE);
    CHECK(rs_int(&srv, "DBSIZE") == 1);
    freeReplyObject(rs_cmd(&srv, "DEL wt"));
    /* force release acts on its own side only */
    CHECK_OK(redmutex_lock_acquire(r, NULL, 0));
    CHECK_OK(redmutex_lock_force_release(&deleted, w));
    CHECK(deleted == 0 && rs_exists(&srv, "wt"));
    CHECK_OK(redmutex_lock_force_release(&deleted, r));
    CHECK(deleted == 1 && !rs_exists(&srv, "wt"));
    CHECK_RC(redmutex_lock_release(r, NULL), REDMUTEX_ENOTOWNER); /* the handle forgot its hold */
    redmutex_lock_free(r);
    redmutex_lock_free(w);
    redmutex_client_free(c);
}

/* The hash, as the server has it now (for "nothing changed"). */
static void snapshot(const char *name, char *out, size_t size)
{
    redisReply *r = rs_cmd(&srv, "HGETALL %s", name);
    size_t n = (size_t)snprintf(out, size, "dbsize=%lld", rs_int(&srv, "DBSIZE"));
    for (size_t i = 0; r && r->type == REDIS_REPLY_ARRAY && i < r->elements && n < size; i++)
        n += (size_t)snprintf(out + n, size - n, " %s", r->element[i]->str);
    if (r)
        freeReplyObject(r);
}

/* A reentrant or fair lock on a read-write lock's name: a wrong type at once, in any mode, nothing changed. */
static void test_reentrant_and_fair_handles_refuse_a_read_write_lock(void)
{
    rs_start(&srv, NULL);
    redmutex_client *c = rt_client(&srv, 0);
    redmutex_lock *r = side(c, "rwk", REDMUTEX_KIND_READ, 0), *w = side(c, "rwk", REDMUTEX_KIND_WRITE, 0);
    redmutex_kind kinds[] = {REDMUTEX_KIND_RLOCK, REDMUTEX_KIND_FAIR};
    for (int mode = 0; mode < 2; mode++) {
        if (mode == 0)
            CHECK_OK(redmutex_lock_acquire(r, other(0), 0));
        else
            CHECK_OK(redmutex_lock_acquire(w, other(0), 0));
        char before[1024], after[1024];
        snapshot("rwk", before, sizeof before);
        for (size_t k = 0; k < 2; k++) {
            redmutex_lock *l = side(c, "rwk", kinds[k], 5000);
            int64_t t0 = rt_now_ms();
            CHECK_RC(redmutex_lock_acquire(l, NULL, 2000), REDMUTEX_EWRONGTYPE);
            CHECKF(rt_now_ms() - t0 < 1500, "the acquire waited %lld ms", (long long)(rt_now_ms() - t0));
            /* the reader's (or writer's owner's) own id: not a reentrant level of it */
            CHECK_RC(redmutex_lock_acquire(l, other(0), 0), REDMUTEX_EWRONGTYPE);
            CHECK_RC(redmutex_lock_release(l, other(0)), REDMUTEX_EWRONGTYPE);
            int out = 0;
            int64_t n = 0;
            CHECK_RC(redmutex_lock_is_locked(&out, l), REDMUTEX_EWRONGTYPE);
            CHECK_RC(redmutex_lock_hold_count(&n, l, other(0)), REDMUTEX_EWRONGTYPE);
            CHECK_RC(redmutex_lock_force_release(&out, l), REDMUTEX_EWRONGTYPE);
            snapshot("rwk", after, sizeof after);
            CHECKF(strcmp(before, after) == 0, "%s changed the lock: %s -> %s",
                   kinds[k] == REDMUTEX_KIND_FAIR ? "fair" : "rlock", before, after);
            redmutex_lock_free(l);
        }
        CHECK_OK(redmutex_lock_release(mode == 0 ? r : w, other(0)));
    }
    redmutex_lock_free(r);
    redmutex_lock_free(w);
    redmutex_client_free(c);
}

static bool same_format(redmutex_kind a, redmutex_kind b)
{
    /* Redisson's RLock and RFairLock share the hash; both sides of a read-write lock share theirs */
    bool ra = a == REDMUTEX_KIND_RLOCK || a == REDMUTEX_KIND_FAIR;
    bool rb = b == REDMUTEX_KIND_RLOCK || b == REDMUTEX_KIND_FAIR;
    bool wa = a == REDMUTEX_KIND_READ || a == REDMUTEX_KIND_WRITE;
    bool wb = b == REDMUTEX_KIND_READ || b == REDMUTEX_KIND_WRITE;
    return a == b || (ra && rb) || (wa && wb);
}

/* The serialized value of a key (DUMP) and the number of keys: "nothing changed" compares these. */
static size_t dump(const char *name, char *out, size_t size)
{
    redisReply *r = rs_cmd(&srv, "DUMP %s", name);
    CHECK(r && r->type == REDIS_REPLY_STRING && r->len + 8 <= size);
    memcpy(out, r->str, r->len);
    long long n = rs_int(&srv, "DBSIZE");
    memcpy(out + r->len, &n, sizeof n);
    size_t len = r->len + sizeof n;
    freeReplyObject(r);
    return len;
}

/* A lock of any kind on a name that holds a lock of another format: a wrong type at once, nothing changed. */
static void test_every_kind_refuses_a_lock_of_another_format(void)
{
    rs_start(&srv, NULL);
    redmutex_client *c = rt_client(&srv, 0);
    redmutex_kind kinds[] = {REDMUTEX_KIND_LOCK, REDMUTEX_KIND_RLOCK, REDMUTEX_KIND_FAIR, REDMUTEX_KIND_READ,
                             REDMUTEX_KIND_WRITE};
    for (size_t h = 0; h < 5; h++) {
        redmutex_lock *holder = side(c, "kinds", kinds[h], 30000);
        CHECK_OK(redmutex_lock_acquire(holder, kinds[h] == REDMUTEX_KIND_LOCK ? NULL : other(0), 0));
        char before[4096], after[4096];
        size_t nb = dump("kinds", before, sizeof before);
        for (size_t k = 0; k < 5; k++) {
            if (same_format(kinds[h], kinds[k]))
                continue;
            redmutex_lock *l = side(c, "kinds", kinds[k], 30000);
            int64_t t0 = rt_now_ms();
            int rc = redmutex_lock_acquire(l, NULL, 2000);
            CHECKF(rc == REDMUTEX_EWRONGTYPE, "kind %d on a lock of kind %d: %d (%s)", (int)kinds[k], (int)kinds[h], rc,
                   redmutex_last_error());
            CHECKF(rt_now_ms() - t0 < 1500, "kind %d waited on a lock of kind %d", (int)kinds[k], (int)kinds[h]);
            size_t na = dump("kinds", after, sizeof after);
            CHECKF(na == nb && memcmp(before, after, na) == 0, "kind %d changed a lock of kind %d", (int)kinds[k],
                   (int)kinds[h]);
            redmutex_lock_free(l);
        }
        CHECK_OK(redmutex_lock_release(holder, kinds[h] == REDMUTEX_KIND_LOCK ? NULL : other(0)));
        CHECK(!rs_exists(&srv, "kinds"));
        redmutex_lock_free(holder);
    }
    redmutex_client_free(c);
}

/* A reader whose lease ran out while another reader keeps the lock alive does not own it any more. */
static void test_owned_is_false_for_a_reader_whose_hold_ran_out(void)
{
    rs_start(&srv, NULL);
    redmutex_client *c = rt_client(&srv, 0);
    int64_t short_ms = rt_scaled_ms(1000);
    redmutex_lock *brief = side(c, "own", REDMUTEX_KIND_READ, short_ms);
    redmutex_lock *lasting = side(c, "own", REDMUTEX_KIND_READ, 30000);
    int64_t end = rt_now_ms() + short_ms;
    CHECK_OK(redmutex_lock_acquire(brief, other(0), 0));
    CHECK_OK(redmutex_lock_acquire(lasting, other(1), 0));
    int owned = 0;
    CHECK_OK(redmutex_lock_is_owned(&owned, brief, other(0)));
    CHECK(owned);
    while (rt_now_ms() <= end)
        rt_sleep_ms(end - rt_now_ms() + 1);
    WAIT_FOR(rs_int(&srv, "PTTL {own}:%s:rwlock_timeout:1", other(0)) == -2, 1000);
    CHECK_OK(redmutex_lock_is_owned(&owned, brief, other(0)));
    CHECKF(!owned, "a reader whose hold ran out still owns the lock");
    int64_t n = -1;
    CHECK_OK(redmutex_lock_hold_count(&n, brief, other(0)));
    CHECK(n == 0);
    CHECK_OK(redmutex_lock_is_owned(&owned, lasting, other(1)));
    CHECK(owned);
    CHECK_RC(redmutex_lock_release(brief, other(0)), REDMUTEX_ELOST);
    CHECK_OK(redmutex_lock_release(lasting, other(1)));
    CHECK(!rs_exists(&srv, "own"));
    redmutex_lock_free(brief);
    redmutex_lock_free(lasting);
    redmutex_client_free(c);
}

/* A reader's owner id must not be a field the format reserves: "mode", or a writer's "<owner>:write". */
static void test_reader_owner_ids_that_are_reserved_fields_are_refused(void)
{
    rs_start(&srv, NULL);
    redmutex_client *c = rt_client(&srv, 0);
    redmutex_lock *r = side(c, "res", REDMUTEX_KIND_READ, 30000), *w = side(c, "res", REDMUTEX_KIND_WRITE, 30000);
    const char *bad[] = {"mode", "someone:write"};
    for (int i = 0; i < 2; i++) {
        CHECK_RC(redmutex_lock_acquire(r, bad[i], 0), REDMUTEX_EINVAL);
        CHECK(strstr(redmutex_last_error(), bad[i]) != NULL);
        CHECK(rs_int(&srv, "DBSIZE") == 0);
    }
    /* the writer "someone" holds: a reader named like its field would count as its read hold */
    CHECK_OK(redmutex_lock_acquire(w, "someone", 0));
    char before[1024], after[1024];
    snapshot("res", before, sizeof before);
    for (int i = 0; i < 2; i++) {
        int out = 0;
        CHECK_RC(redmutex_lock_acquire(r, bad[i], 0), REDMUTEX_EINVAL);
        CHECK_RC(redmutex_lock_release(r, bad[i]), REDMUTEX_EINVAL);
        CHECK_RC(redmutex_lock_extend(r, bad[i], 1000, REDMUTEX_EXTEND_ADD), REDMUTEX_EINVAL);
        CHECK_RC(redmutex_lock_is_owned(&out, r, bad[i]), REDMUTEX_EINVAL);
    }
    snapshot("res", after, sizeof after);
    CHECKF(strcmp(before, after) == 0, "the lock changed: %s -> %s", before, after);
    CHECK_OK(redmutex_lock_release(w, "someone"));
    /* a writer named "mode" is stored as "mode:write": no clash */
    CHECK_OK(redmutex_lock_acquire(w, "mode", 0));
    mode_is("res", "write");
    CHECK_OK(redmutex_lock_release(w, "mode"));
    CHECK(!rs_exists(&srv, "res"));
    redmutex_lock_free(r);
    redmutex_lock_free(w);
    redmutex_client_free(c);
}

static void test_extend_a_read_hold_extends_its_timeout_keys(void)
{
    rs_start(&srv, NULL);
    redmutex_client *c = rt_client(&srv, 0);
    redmutex_lock *r = side(c, "ex", REDMUTEX_KIND_READ, 2000);
    CHECK_OK(redmutex_lock_acquire(r, other(0), 0));
    CHECK_OK(redmutex_lock_acquire(r, other(0), 0));
    CHECK_OK(redmutex_lock_extend(r, other(0), 20000, REDMUTEX_EXTEND_REPLACE));
    char key[200];
    for (int i = 1; i <= 2; i++) {
        snprintf(key, sizeof key, "{ex}:%s:rwlock_timeout:%d", other(0), i);
        CHECK(rs_int(&srv, "PTTL %s", key) > 15000);
    }
    CHECK(rs_int(&srv, "PTTL ex") > 15000);
    int64_t v = 0;
    CHECK_OK(redmutex_lock_validity(&v, r, other(0)));
    CHECK(v > 15000);
    CHECK_RC(redmutex_lock_extend(r, other(1), 1000, REDMUTEX_EXTEND_ADD), REDMUTEX_ENOTOWNER);
    CHECK_OK(redmutex_lock_release(r, other(0)));
    CHECK_OK(redmutex_lock_release(r, other(0)));
    redmutex_lock_free(r);
    redmutex_client_free(c);
}

/*
 * A reader whose holds ran out leaves its field behind while other readers
 * keep the lock alive; the field counts nothing, its timeout keys are gone.
 * Returns once reader other(0)'s short hold (one level, `short_ms`) is over
 * and other(1) holds for 30 s.
 */
static void reader_ran_out(redmutex_client *c, const char *name, redmutex_lock **brief, redmutex_lock **lasting)
{
    int64_t short_ms = rt_scaled_ms(500);
    *brief = side(c, name, REDMUTEX_KIND_READ, short_ms);
    *lasting = side(c, name, REDMUTEX_KIND_READ, 30000);
    CHECK_OK(redmutex_lock_acquire(*brief, other(0), 0));
    CHECK_OK(redmutex_lock_acquire(*lasting, other(1), 0));
    WAIT_FOR(rs_int(&srv, "PTTL {%s}:%s:rwlock_timeout:1", name, other(0)) == -2, 3000);
    CHECK(rs_int(&srv, "HEXISTS %s %s", name, other(0)) == 1); /* the dead field is still there */
}

/* After the last reader leaves, nothing of the lock is left: no key, no timeout key. */
static void nothing_left(const char *name)
{
    CHECKF(!rs_exists(&srv, name), "%s is left behind", name);
    CHECKF(rs_count_keys(&srv, "*rwlock_timeout*") == 0, "%s: timeout keys are left behind", name);
}

/*
 * A read hold that ran out cannot be extended by its owner through another
 * handle (work handed over by owner id): the field left behind is no hold.
 * Were it one, the extension would report success, set no timeout key, and
 * the other reader's release would delete the lock under the "extended"
 * reader, letting a writer in.
 */
static void test_a_read_hold_that_ran_out_cannot_be_extended_through_another_handle(void)
{
    rs_start(&srv, NULL);
    redmutex_client *c = rt_client(&srv, 0), *c2 = rt_client(&srv, 0);
    redmutex_lock *brief, *lasting;
    reader_ran_out(c, "rx", &brief, &lasting);
    redmutex_lock *handed = side(c2, "rx", REDMUTEX_KIND_READ, 1000);
    CHECK_RC(redmutex_lock_extend(handed, other(0), 20000, REDMUTEX_EXTEND_ADD), REDMUTEX_ENOTOWNER);
    CHECK_RC(redmutex_lock_extend(handed, other(0), 20000, REDMUTEX_EXTEND_REPLACE), REDMUTEX_ENOTOWNER);
    CHECKF(rs_int(&srv, "HEXISTS rx %s", other(0)) == 0, "the dead reader's field was not cleaned up");
    CHECK(rs_int(&srv, "EXISTS {rx}:%s:rwlock_timeout:1", other(0)) == 0);
    int owned = 1;
    CHECK_OK(redmutex_lock_is_owned(&owned, handed, other(0)));
    CHECK(!owned);
    CHECK_OK(redmutex_lock_release(lasting, other(1)));
    nothing_left("rx");
    redmutex_lock_free(handed);
    redmutex_lock_free(brief);
    redmutex_lock_free(lasting);
    redmutex_client_free(c2);
    redmutex_client_free(c);
}

/* Nor released as if it held: the release answers that the owner holds nothing, and takes the field out. */
static void test_a_read_hold_that_ran_out_is_not_released_as_held(void)
{
    rs_start(&srv, NULL);
    redmutex_client *c = rt_client(&srv, 0), *c2 = rt_client(&srv, 0);
    redmutex_lock *brief, *lasting;
    reader_ran_out(c, "rr", &brief, &lasting);
    redmutex_lock *handed = side(c2, "rr", REDMUTEX_KIND_READ, 1000);
    CHECK_RC(redmutex_lock_release(handed, other(0)), REDMUTEX_ENOTOWNER);
    CHECKF(rs_int(&srv, "HEXISTS rr %s", other(0)) == 0, "the dead reader's field was not cleaned up");
    CHECK(rs_int(&srv, "PTTL rr") > 20000); /* the other reader still holds */
    CHECK_OK(redmutex_lock_release(lasting, other(1)));
    nothing_left("rr");
    redmutex_lock_free(handed);
    redmutex_lock_free(brief);
    redmutex_lock_free(lasting);
    redmutex_client_free(c2);
    redmutex_client_free(c);
}

/*
 * The owner of such a field that acquires the read lock again (not nested:
 * it holds nothing) gets a hold of its own, one level with its timeout key,
 * as if the field were not there. Counted as a second level on top of the
 * dead one, its release would pass its TTL down to a re-made ":1" that
 * nobody holds, keeping writers out for a lease.
 */
static void test_a_reader_whose_hold_ran_out_acquires_afresh(void)
{
    rs_start(&srv, NULL);
    redmutex_client *c = rt_client(&srv, 0), *c2 = rt_client(&srv, 0);
    redmutex_lock *brief, *lasting;
    reader_ran_out(c, "ra", &brief, &lasting);
    redmutex_lock *again = side(c2, "ra", REDMUTEX_KIND_READ, 30000);
    CHECK_OK(redmutex_lock_acquire(again, other(0), 0));
    CHECKF(rs_num(&srv, "HGET ra %s", other(0)) == 1, "the dead level was counted");
    CHECK(rs_int(&srv, "PTTL {ra}:%s:rwlock_timeout:1", other(0)) > 20000);
    CHECK(rs_int(&srv, "EXISTS {ra}:%s:rwlock_timeout:2", other(0)) == 0);
    int64_t n = 0;
    CHECK_OK(redmutex_lock_hold_count(&n, again, other(0)));
    CHECK(n == 1);
    CHECK_OK(redmutex_lock_release(again, other(0)));
    CHECK(rs_int(&srv, "HEXISTS ra %s", other(0)) == 0);
    CHECK_OK(redmutex_lock_release(lasting, other(1)));
    nothing_left("ra");
    redmutex_lock_free(again);
    redmutex_lock_free(brief);
    redmutex_lock_free(lasting);
    redmutex_client_free(c2);
    redmutex_client_free(c);
}

/*
 * The watchdog's renewal of a reader whose timeout keys are gone (its hold
 * ran out while the client stalled, say) reports the hold lost, and takes
 * the dead field out, instead of renewing the lock for a hold that has no
 * timeout key: the other reader's release would delete the lock under it.
 */
static void test_the_watchdog_reports_a_reader_whose_timeout_keys_are_gone_as_lost(void)
{
    rs_start(&srv, NULL);
    const char *url = srv.url;
    redmutex_client_options co;
    redmutex_client_options_init(&co, REDMUTEX_CLIENT_OPTIONS_VERSION);
    co.watchdog_lease_ms = rt_scaled_ms(900);
    redmutex_client *c;
    CHECK_OK(redmutex_client_new(&c, &url, 1, &co));
    lost_seen seen = {0};
    redmutex_lock_options o = REDMUTEX_LOCK_OPTIONS_INIT;
    o.on_lost = on_lost;
    o.on_lost_payload = &seen;
    redmutex_lock *r = NULL, *lasting = side(c, "rw", REDMUTEX_KIND_READ, 30000);
    CHECK_OK(redmutex_lock_new(&r, c, "rw", REDMUTEX_KIND_READ, &o));
    CHECK_OK(redmutex_lock_acquire(r, other(0), 0));
    CHECK_OK(redmutex_lock_acquire(r, other(0), 0));
    CHECK_OK(redmutex_lock_acquire(lasting, other(1), 0));
    freeReplyObject(rs_cmd(&srv, "DEL {rw}:%s:rwlock_timeout:1 {rw}:%s:rwlock_timeout:2", other(0), other(0)));
    WAIT_FOR(atomic_load(&seen.lost), 3000);
    CHECKF(rs_int(&srv, "HEXISTS rw %s", other(0)) == 0, "the dead reader's field was not cleaned up");
    CHECK(rs_int(&srv, "HEXISTS rw %s", other(1)) == 1);
    CHECK_RC(redmutex_lock_release(r, other(0)), REDMUTEX_ELOST);
    CHECK_OK(redmutex_lock_release(lasting, other(1)));
    nothing_left("rw");
    redmutex_lock_free(r);
    redmutex_lock_free(lasting);
    redmutex_client_free(c);
}

/* ---- processes -------------------------------------------------------------------- */

typedef struct proc_arg {
    const char *name;
    int id;
    bool writer;
    int rounds;
} proc_arg;

/*
 * A writer increments "<name>:n" by reading and writing it (a second writer
 * inside would lose an increment). A reader reads it twice around a pause and
 * counts, in "<name>:inside", how many readers are in at once; the value must
 * not change under a read hold. Exit 0 when all went well.
 */
static int rw_proc(void *p)
{
    proc_arg *a = p;
    redmutex_client *c = proc_client(srv.url);
    redmutex_lock *l = side(c, a->name, a->writer ? REDMUTEX_KIND_WRITE : REDMUTEX_KIND_READ, 0);
    int bad = 0;
    for (int i = 0; i < a->rounds && !bad; i++) {
        if (redmutex_lock_acquire(l, NULL, 60000) != 0) {
            fprintf(stderr, "worker %d: %s\n", a->id, redmutex_last_error());
            return 2;
        }
        long long v = rs_num(&srv, "GET %s:n", a->name);
        if (a->writer) {
            freeReplyObject(rs_cmd(&srv, "SET %s:n %lld", a->name, v + 1));
        } else {
            long long in = rs_int(&srv, "INCR %s:inside", a->name);
            long long best = rs_num(&srv, "GET %s:most", a->name);
            if (in > best)
                freeReplyObject(rs_cmd(&srv, "SET %s:most %lld", a->name, in));
            rt_sleep_ms(1);
            if (rs_num(&srv, "GET %s:n", a->name) != v)
                bad = 4; /* a writer got in while reading */
            rs_int(&srv, "DECR %s:inside", a->name);
        }
        if (redmutex_lock_release(l, NULL) != 0)
            return 3;
    }
    redmutex_lock_free(l);
    proc_client_done(c);
    return bad;
}

static void run_procs(const char *name, int writers, int readers, int rounds)
{
    enum { N = 8 };
    proc_arg a[N];
    pid_t pid[N];
    for (int i = 0; i < writers + readers; i++) {
        a[i] = (proc_arg){name, i, i < writers, rounds};
        pid[i] = proc_start(rw_proc, &a[i]);
    }
    for (int i = 0; i < writers + readers; i++)
        CHECKF(proc_wait(pid[i], 120000) == 0, "worker %d failed", i);
}

static void test_8_processes_200_increments_exact_under_the_write_lock(void)
{
    rs_start(&srv, NULL);
    run_procs("wq", 8, 0, proc_rounds(200));
    CHECK(rs_num(&srv, "GET wq:n") == 8 * proc_rounds(200));
    CHECK(!rs_exists(&srv, "wq"));
}

static void test_mixed_readers_and_writers_exact(void)
{
    rs_start(&srv, NULL);
    run_procs("mq", 4, 4, proc_rounds(200));
    CHECK(rs_num(&srv, "GET mq:n") == 4 * proc_rounds(200));
    CHECK(rs_num(&srv, "GET mq:most") >= 2); /* readers did share the lock */
    CHECK(!rs_exists(&srv, "mq"));
}

/* Redlock: readers share and a writer excludes on a majority of 3 servers. */
static void test_redlock_readers_share_writer_excludes(void)
{
    rs_server s[3];
    const char *urls[3];
    for (int i = 0; i < 3; i++) {
        rs_start(&s[i], NULL);
        urls[i] = s[i].url;
    }
    redmutex_client *c;
    CHECK_OK(redmutex_client_new(&c, urls, 3, NULL));
    redmutex_lock *r = side(c, "rl", REDMUTEX_KIND_READ, 0), *w = side(c, "rl", REDMUTEX_KIND_WRITE, 0);
    CHECK_OK(redmutex_lock_acquire(r, other(0), 0));
    CHECK_OK(redmutex_lock_acquire(r, other(1), 0));
    CHECK_RC(redmutex_lock_acquire(w, other(2), 0), REDMUTEX_ETIMEDOUT);
    CHECK_OK(redmutex_lock_release(r, other(0)));
    CHECK_OK(redmutex_lock_release(r, other(1)));
    CHECK_OK(redmutex_lock_acquire(w, other(2), 0));
    CHECK_RC(redmutex_lock_acquire(r, other(0), 0), REDMUTEX_ETIMEDOUT);
    CHECK_OK(redmutex_lock_release(w, other(2)));
    for (int i = 0; i < 3; i++)
        CHECK(!rs_exists(&s[i], "rl"));
    redmutex_lock_free(r);
    redmutex_lock_free(w);
    redmutex_client_free(c);
    for (int i = 0; i < 3; i++)
        rs_stop(&s[i]);
}

int main(int argc, char **argv)
{
    static const rt_test tests[] = {
        {"8_processes_200_increments_exact_under_the_write_lock",
         test_8_processes_200_increments_exact_under_the_write_lock},
        {"mixed_readers_and_writers_exact", test_mixed_readers_and_writers_exact},
        {"readers_share_a_writer_excludes_in_redisson_format", test_readers_share_a_writer_excludes_in_redisson_format},
        {"reentrant_and_writer_may_read", test_reentrant_and_writer_may_read},
        {"watchdog_renews_every_reader_timeout_key", test_watchdog_renews_every_reader_timeout_key},
        {"lost_read_and_write_holds_are_reported", test_lost_read_and_write_holds_are_reported},
        {"release_wakes_waiters", test_release_wakes_waiters},
        {"pollable_wait_for_the_write_side", test_pollable_wait_for_the_write_side},
        {"wrong_types_change_nothing", test_wrong_types_change_nothing},
        {"reentrant_and_fair_handles_refuse_a_read_write_lock",
         test_reentrant_and_fair_handles_refuse_a_read_write_lock},
        {"every_kind_refuses_a_lock_of_another_format", test_every_kind_refuses_a_lock_of_another_format},
        {"owned_is_false_for_a_reader_whose_hold_ran_out", test_owned_is_false_for_a_reader_whose_hold_ran_out},
        {"reader_owner_ids_that_are_reserved_fields_are_refused",
         test_reader_owner_ids_that_are_reserved_fields_are_refused},
        {"extend_a_read_hold_extends_its_timeout_keys", test_extend_a_read_hold_extends_its_timeout_keys},
        {"redlock_readers_share_writer_excludes", test_redlock_readers_share_writer_excludes},
        {"a_read_hold_that_ran_out_cannot_be_extended_through_another_handle",
         test_a_read_hold_that_ran_out_cannot_be_extended_through_another_handle},
        {"a_read_hold_that_ran_out_is_not_released_as_held", test_a_read_hold_that_ran_out_is_not_released_as_held},
        {"a_reader_whose_hold_ran_out_acquires_afresh", test_a_reader_whose_hold_ran_out_acquires_afresh},
        {"the_watchdog_reports_a_reader_whose_timeout_keys_are_gone_as_lost",
         test_the_watchdog_reports_a_reader_whose_timeout_keys_are_gone_as_lost},
    };
    return rt_run(tests, sizeof tests / sizeof tests[0], argc, argv);
}
