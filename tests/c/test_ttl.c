/*
 * No hold is cut short: a lock key shared by several holds (reentrant
 * levels taken through several handles of one owner, readers, a writer that
 * also reads) keeps a TTL at least as long as the longest remaining
 * validity of any hold it still carries, whatever release, renewal,
 * extension or up/downgrade of one of them happens (docs/wire-format.md).
 *
 * Each case holds one hold long and another short (or renewed by the
 * watchdog with a short lease), ends or shortens the short one, and checks
 * that the key outlives the long hold's validity and that another client
 * still cannot take the lock once the short lease is over.
 */
#define _GNU_SOURCE
#include "harness.h"

#include <string.h>

static rs_server srv;

#define LONG_MS 30000
/* The watchdog lease of the renewal cases: shorter than the holds beside it,
   long enough that a loaded machine still renews in time. */
#define WATCHDOG_MS 1500

static const char *kind_name(redmutex_kind k)
{
    switch (k) {
    case REDMUTEX_KIND_RLOCK:
        return "rlock";
    case REDMUTEX_KIND_FAIR:
        return "fair";
    case REDMUTEX_KIND_READ:
        return "read";
    case REDMUTEX_KIND_WRITE:
        return "write";
    default:
        return "lock";
    }
}

static redmutex_lock *handle(redmutex_client *c, const char *name, redmutex_kind kind, int64_t lease_ms)
{
    redmutex_lock_options o = REDMUTEX_LOCK_OPTIONS_INIT;
    o.lease_ms = lease_ms;
    redmutex_lock *l = NULL;
    CHECK_OK(redmutex_lock_new(&l, c, name, kind, &o));
    return l;
}

static redmutex_client *client_with_watchdog(int64_t watchdog_lease_ms)
{
    redmutex_client_options o;
    redmutex_client_options_init(&o, REDMUTEX_CLIENT_OPTIONS_VERSION);
    o.watchdog_lease_ms = watchdog_lease_ms;
    o.command_timeout_ms = rt_scaled_ms(o.command_timeout_ms);
    const char *url = srv.url;
    redmutex_client *c = NULL;
    CHECK_OK(redmutex_client_new(&c, &url, 1, &o));
    return c;
}

/* The key lives at least as long as `l`'s hold is valid (validity read
   first: the time between the two reads is the client's, not the key's). */
static void key_covers(const char *name, redmutex_lock *l, const char *when)
{
    int64_t t1 = rt_now_ms(), validity = 0;
    CHECK_OK(redmutex_lock_validity(&validity, l, NULL));
    long long pttl = rs_int(&srv, "PTTL %s", name);
    int64_t t2 = rt_now_ms();
    CHECKF(validity > 0, "%s: %s: the long hold is not valid any more", name, when);
    CHECKF(pttl + (t2 - t1) >= validity, "%s: %s: the key's TTL is %lld ms, the hold is valid for %lld ms", name, when,
           pttl, (long long)validity);
}

/* Another client cannot take the lock (a writer for a read-write lock). */
static void others_excluded(const char *name, redmutex_kind kind, const char *when)
{
    redmutex_client *c = rt_client(&srv, rt_scaled_ms(1000));
    redmutex_kind k = kind == REDMUTEX_KIND_READ ? REDMUTEX_KIND_WRITE : kind;
    redmutex_lock *l = handle(c, name, k, 5000);
    int rc = redmutex_lock_acquire(l, NULL, 0);
    CHECKF(rc == REDMUTEX_ETIMEDOUT, "%s: %s: another client's %s acquire returned %d (%s)", name, when, kind_name(k),
           rc, rc ? redmutex_last_error() : "it took the lock");
    redmutex_lock_free(l);
    redmutex_client_close(c);
    redmutex_client_free(c);
}

/* Sleeps until the time is past t_ms (a lease that must be over by then). */
static void until(int64_t t_ms)
{
    while (rt_now_ms() <= t_ms)
        rt_sleep_ms(t_ms - rt_now_ms() + 1);
}

/*
 * Releases a hold with a short lease. A machine that stalls longer than that
 * lease between the acquisition and here makes it a lost hold: the release
 * then reports ELOST (and sends nothing, when another handle of the owner
 * holds), which is right too; the test goes on with what it checks.
 */
static void release_short(redmutex_lock *l, const char *what)
{
    int rc = redmutex_lock_release(l, NULL);
    CHECKF(rc == REDMUTEX_OK || rc == REDMUTEX_ELOST, "releasing %s: %d (%s)", what, rc, redmutex_last_error());
    if (rc == REDMUTEX_ELOST)
        printf("     note: %s ran out before its release (a slow machine)\n", what);
}

static void gone(const char *name)
{
    CHECKF(!rs_exists(&srv, name), "%s is left behind", name);
    CHECKF(rs_count_keys(&srv, "*rwlock_timeout*") == 0, "%s: timeout keys are left behind", name);
}

/*
 * Two handles of one owner (the calling thread), one with a long lease and
 * one with a short one; the short hold is taken first or second, then
 * released. What is left is the long hold, which must keep its lease.
 */
static void short_second_handle(redmutex_kind kind, bool short_first)
{
    char name[64];
    snprintf(name, sizeof name, "ttl:%s:%s", kind_name(kind), short_first ? "short-first" : "long-first");
    redmutex_client *c = rt_client(&srv, rt_scaled_ms(1000));
    int64_t short_ms = rt_scaled_ms(400);
    redmutex_lock *lng = handle(c, name, kind, LONG_MS), *shrt = handle(c, name, kind, short_ms);
    int64_t short_end = rt_now_ms() + short_ms;
    if (short_first) {
        CHECK_OK(redmutex_lock_acquire(shrt, NULL, 0));
        CHECK_OK(redmutex_lock_acquire(lng, NULL, 0));
    } else {
        CHECK_OK(redmutex_lock_acquire(lng, NULL, 0));
        short_end = rt_now_ms() + short_ms;
        CHECK_OK(redmutex_lock_acquire(shrt, NULL, 0));
    }
    key_covers(name, lng, "both held");
    release_short(shrt, "the short hold");
    key_covers(name, lng, "the short hold released");
    until(short_end);
    key_covers(name, lng, "the short lease is over");
    others_excluded(name, kind, "the short lease is over");
    CHECK_OK(redmutex_lock_release(lng, NULL));
    gone(name);
    redmutex_lock_free(shrt);
    redmutex_lock_free(lng);
    redmutex_client_close(c);
    redmutex_client_free(c);
}

static void test_releasing_a_shorter_hold_of_a_second_handle_keeps_the_longer_one(void)
{
    rs_start(&srv, NULL);
    redmutex_kind kinds[] = {REDMUTEX_KIND_RLOCK, REDMUTEX_KIND_FAIR, REDMUTEX_KIND_READ, REDMUTEX_KIND_WRITE};
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        short_second_handle(kinds[i], false);
        short_second_handle(kinds[i], true);
    }
}

/*
 * One handle with a short lease, extended to a long one, then acquired
 * again (nested) and released once: the extension must survive both.
 */
static void nested_after_extend(redmutex_kind kind)
{
    char name[64];
    snprintf(name, sizeof name, "ttl:ext:%s", kind_name(kind));
    redmutex_client *c = rt_client(&srv, rt_scaled_ms(1000));
    int64_t short_ms = rt_scaled_ms(1000); /* it must still be held when it is extended */
    redmutex_lock *l = handle(c, name, kind, short_ms);
    int64_t short_end = rt_now_ms() + short_ms;
    CHECK_OK(redmutex_lock_acquire(l, NULL, 0));
    CHECK_OK(redmutex_lock_extend(l, NULL, LONG_MS, REDMUTEX_EXTEND_ADD));
    key_covers(name, l, "extended");
    short_end = rt_now_ms() + short_ms;
    CHECK_OK(redmutex_lock_acquire(l, NULL, 0));
    key_covers(name, l, "extended, then nested");
    release_short(l, "the nested level");
    key_covers(name, l, "the nested level released");
    until(short_end);
    key_covers(name, l, "the nested lease is over");
    others_excluded(name, kind, "the nested lease is over");
    CHECK_OK(redmutex_lock_release(l, NULL));
    gone(name);
    redmutex_lock_free(l);
    redmutex_client_close(c);
    redmutex_client_free(c);
}

static void test_nested_acquire_and_release_after_extend_keep_the_extension(void)
{
    rs_start(&srv, NULL);
    redmutex_kind kinds[] = {REDMUTEX_KIND_RLOCK, REDMUTEX_KIND_FAIR, REDMUTEX_KIND_READ, REDMUTEX_KIND_WRITE};
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
        nested_after_extend(kinds[i]);
}

/*
 * Two handles of one owner, both long; one of them is extended to a short
 * TTL (replace) and released: the other keeps its lease.
 */
static void replace_shorter(redmutex_kind kind)
{
    char name[64];
    snprintf(name, sizeof name, "ttl:replace:%s", kind_name(kind));
    redmutex_client *c = rt_client(&srv, rt_scaled_ms(1000));
    int64_t short_ms = rt_scaled_ms(400);
    redmutex_lock *a = handle(c, name, kind, LONG_MS), *b = handle(c, name, kind, LONG_MS);
    CHECK_OK(redmutex_lock_acquire(a, NULL, 0));
    CHECK_OK(redmutex_lock_acquire(b, NULL, 0));
    int64_t short_end = rt_now_ms() + short_ms;
    CHECK_OK(redmutex_lock_extend(b, NULL, short_ms, REDMUTEX_EXTEND_REPLACE));
    int64_t v = 0;
    CHECK_OK(redmutex_lock_validity(&v, b, NULL));
    CHECKF(v <= short_ms, "%s: the shortened hold is valid for %lld ms", name, (long long)v);
    key_covers(name, a, "the other hold shortened");
    release_short(b, "the shortened hold");
    key_covers(name, a, "the shortened hold released");
    until(short_end);
    others_excluded(name, kind, "the shortened lease is over");
    CHECK_OK(redmutex_lock_release(a, NULL));
    gone(name);
    redmutex_lock_free(b);
    redmutex_lock_free(a);
    redmutex_client_close(c);
    redmutex_client_free(c);
}

static void test_shortening_one_hold_by_extend_replace_keeps_the_others(void)
{
    rs_start(&srv, NULL);
    redmutex_kind kinds[] = {REDMUTEX_KIND_RLOCK, REDMUTEX_KIND_FAIR, REDMUTEX_KIND_READ, REDMUTEX_KIND_WRITE};
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
        replace_shorter(kinds[i]);
}

/* A hold alone may still be shortened by its owner (extend, replace). */
static void test_extend_replace_still_shortens_a_hold_that_is_alone(void)
{
    rs_start(&srv, NULL);
    redmutex_client *c = rt_client(&srv, rt_scaled_ms(1000));
    redmutex_kind kinds[] = {REDMUTEX_KIND_LOCK, REDMUTEX_KIND_RLOCK, REDMUTEX_KIND_FAIR, REDMUTEX_KIND_READ,
                             REDMUTEX_KIND_WRITE};
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        char name[64];
        snprintf(name, sizeof name, "ttl:alone:%s", kind_name(kinds[i]));
        redmutex_lock *l = handle(c, name, kinds[i], LONG_MS);
        CHECK_OK(redmutex_lock_acquire(l, NULL, 0));
        CHECK_OK(redmutex_lock_extend(l, NULL, 3000, REDMUTEX_EXTEND_REPLACE));
        long long pttl = rs_int(&srv, "PTTL %s", name);
        CHECKF(pttl > 0 && pttl <= 3000, "%s: pttl %lld after replacing the lease with 3000 ms", name, pttl);
        CHECK_OK(redmutex_lock_release(l, NULL));
        gone(name);
        redmutex_lock_free(l);
    }
    redmutex_client_close(c);
    redmutex_client_free(c);
}

/*
 * One hold renewed by the watchdog with a short watchdog lease, another of
 * the same owner with a long explicit lease: no renewal may bring the key
 * below the long hold, and releasing the renewed one leaves it whole.
 */
static void renewal_beside(redmutex_kind kind)
{
    char name[64];
    snprintf(name, sizeof name, "ttl:renew:%s", kind_name(kind));
    int64_t wd_ms = rt_scaled_ms(WATCHDOG_MS);
    redmutex_client *c = client_with_watchdog(wd_ms);
    redmutex_lock *lng = handle(c, name, kind, LONG_MS), *renewed = handle(c, name, kind, 0);
    CHECK_OK(redmutex_lock_acquire(lng, NULL, 0));
    CHECK_OK(redmutex_lock_acquire(renewed, NULL, 0));
    int64_t end = rt_now_ms() + 2 * wd_ms; /* about six renewals */
    while (rt_now_ms() < end) {
        key_covers(name, lng, "while the other hold is renewed");
        rt_sleep_ms(20);
    }
    CHECK_OK(redmutex_lock_release(renewed, NULL));
    key_covers(name, lng, "the renewed hold released");
    until(rt_now_ms() + wd_ms);
    others_excluded(name, kind, "a watchdog lease after the renewed hold was released");
    CHECK_OK(redmutex_lock_release(lng, NULL));
    gone(name);
    redmutex_lock_free(renewed);
    redmutex_lock_free(lng);
    redmutex_client_close(c);
    redmutex_client_free(c);
}

static void test_watchdog_renewal_of_one_hold_keeps_the_others(void)
{
    rs_start(&srv, NULL);
    redmutex_kind kinds[] = {REDMUTEX_KIND_RLOCK, REDMUTEX_KIND_FAIR, REDMUTEX_KIND_READ, REDMUTEX_KIND_WRITE};
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
        renewal_beside(kinds[i]);
}

/* ---- the cases of the issue, as reported ------------------------------------------ */

/* A1: lease 30 s; the same owner again through a second handle with lease 1 s, released. */
static void a1(redmutex_kind kind)
{
    char name[64];
    snprintf(name, sizeof name, "a1:%s", kind_name(kind));
    redmutex_client *c = rt_client(&srv, rt_scaled_ms(1000));
    redmutex_lock *outer = handle(c, name, kind, LONG_MS), *inner = handle(c, name, kind, rt_scaled_ms(1000));
    CHECK_OK(redmutex_lock_acquire(outer, NULL, 0));
    int64_t inner_end = rt_now_ms() + rt_scaled_ms(1000);
    CHECK_OK(redmutex_lock_acquire(inner, NULL, 0));
    release_short(inner, "the inner hold");
    until(inner_end);
    others_excluded(name, kind, "a second after the inner hold was released");
    key_covers(name, outer, "a second after the inner hold was released");
    CHECK_OK(redmutex_lock_release(outer, NULL));
    redmutex_lock_free(inner);
    redmutex_lock_free(outer);
    redmutex_client_close(c);
    redmutex_client_free(c);
}

static void test_a1_inner_hold_with_a_shorter_lease_does_not_cut_the_outer(void)
{
    rs_start(&srv, NULL);
    a1(REDMUTEX_KIND_RLOCK);
    a1(REDMUTEX_KIND_FAIR);
}

/* A2: a writer (30 s) that also reads twice with a 1 s lease releases one read hold. */
static void test_a2_read_release_does_not_cut_the_same_owners_write_hold(void)
{
    rs_start(&srv, NULL);
    const char *name = "a2";
    redmutex_client *c = rt_client(&srv, rt_scaled_ms(1000));
    redmutex_lock *w = handle(c, name, REDMUTEX_KIND_WRITE, LONG_MS);
    redmutex_lock *r = handle(c, name, REDMUTEX_KIND_READ, rt_scaled_ms(1000));
    CHECK_OK(redmutex_lock_acquire(w, NULL, 0));
    int64_t read_end = rt_now_ms() + rt_scaled_ms(1000);
    CHECK_OK(redmutex_lock_acquire(r, NULL, 0));
    CHECK_OK(redmutex_lock_acquire(r, NULL, 0));
    release_short(r, "one read hold");
    key_covers(name, w, "one read hold released");
    until(read_end);
    others_excluded(name, REDMUTEX_KIND_WRITE, "the read lease is over");
    key_covers(name, w, "the read lease is over");
    int rc = redmutex_lock_release(r, NULL); /* its own lease ran out */
    CHECKF(rc == REDMUTEX_ELOST || rc == REDMUTEX_ENOTOWNER, "the read hold's release: %d", rc);
    CHECK_OK(redmutex_lock_release(w, NULL));
    gone(name);
    redmutex_lock_free(r);
    redmutex_lock_free(w);
    redmutex_client_close(c);
    redmutex_client_free(c);
}

/* A3: write side renewed by the watchdog, read side with an explicit lease; the write side is released. */
static void test_a3_watchdog_renewal_and_downgrade_do_not_cut_the_read_hold(void)
{
    rs_start(&srv, NULL);
    const char *name = "a3";
    int64_t wd_ms = rt_scaled_ms(WATCHDOG_MS);
    redmutex_client *c = client_with_watchdog(wd_ms);
    redmutex_lock *w = handle(c, name, REDMUTEX_KIND_WRITE, 0);
    redmutex_lock *r = handle(c, name, REDMUTEX_KIND_READ, rt_scaled_ms(8000));
    CHECK_OK(redmutex_lock_acquire(w, NULL, 0));
    CHECK_OK(redmutex_lock_acquire(r, NULL, 0));
    int64_t end = rt_now_ms() + 2 * wd_ms; /* several renewals of the write side */
    while (rt_now_ms() < end) {
        key_covers(name, r, "the write side renewed");
        rt_sleep_ms(20);
    }
    CHECK_OK(redmutex_lock_release(w, NULL));
    key_covers(name, r, "downgraded");
    until(rt_now_ms() + wd_ms);
    key_covers(name, r, "a watchdog lease after the downgrade");
    others_excluded(name, REDMUTEX_KIND_WRITE, "a watchdog lease after the downgrade");
    CHECK_OK(redmutex_lock_release(r, NULL));
    gone(name);
    redmutex_lock_free(r);
    redmutex_lock_free(w);
    redmutex_client_close(c);
    redmutex_client_free(c);
}

int main(int argc, char **argv)
{
    const rt_test tests[] = {
        {"a1_inner_hold_with_a_shorter_lease_does_not_cut_the_outer",
         test_a1_inner_hold_with_a_shorter_lease_does_not_cut_the_outer},
        {"a2_read_release_does_not_cut_the_same_owners_write_hold",
         test_a2_read_release_does_not_cut_the_same_owners_write_hold},
        {"a3_watchdog_renewal_and_downgrade_do_not_cut_the_read_hold",
         test_a3_watchdog_renewal_and_downgrade_do_not_cut_the_read_hold},
        {"releasing_a_shorter_hold_of_a_second_handle_keeps_the_longer_one",
         test_releasing_a_shorter_hold_of_a_second_handle_keeps_the_longer_one},
        {"nested_acquire_and_release_after_extend_keep_the_extension",
         test_nested_acquire_and_release_after_extend_keep_the_extension},
        {"shortening_one_hold_by_extend_replace_keeps_the_others",
         test_shortening_one_hold_by_extend_replace_keeps_the_others},
        {"extend_replace_still_shortens_a_hold_that_is_alone", test_extend_replace_still_shortens_a_hold_that_is_alone},
        {"watchdog_renewal_of_one_hold_keeps_the_others", test_watchdog_renewal_of_one_hold_keeps_the_others},
    };
    return rt_run(tests, sizeof tests / sizeof tests[0], argc, argv);
}
