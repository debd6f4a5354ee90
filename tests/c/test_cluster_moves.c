/*
 * Redis Cluster while locks are held: a slot migrated under a held lock
 * and a waiter, a failover by CLUSTER FAILOVER, and a master SIGKILLed.
 * Its own cluster (3 masters + 3 replicas): these tests change it.
 */
#define _GNU_SOURCE
#include "cluster.h"
#include "deploy.h"
#include "harness.h"
#include "slots.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

static rc_cluster cl;

/* The cluster, settled: a test that changed it (failover, kill) leaves it to the next to wait for. */
static void ensure_cluster(void)
{
    if (cl.n == 0)
        rc_start(&cl, 3, 1, NULL);
    rc_wait_ok(&cl, 30000);
}

static redmutex_client *client_with(int64_t lease_ms, int64_t min_replicas, int64_t command_timeout_ms)
{
    redmutex_client_options o;
    redmutex_client_options_init(&o, REDMUTEX_CLIENT_OPTIONS_VERSION);
    o.wait_backoff_cap_ms = 5000; /* a waiter woken by its timer would take seconds: only a message is quick */
    o.watchdog_lease_ms = rt_scaled_ms(lease_ms);
    o.min_replicas = min_replicas;
    if (command_timeout_ms)
        o.command_timeout_ms = rt_scaled_ms(command_timeout_ms);
    const char *url = cl.url;
    redmutex_client *c = NULL;
    CHECK_OK(redmutex_client_new(&c, &url, 1, &o));
    return c;
}

typedef struct waiter_arg {
    redmutex_lock *l;
    int rc;
    int64_t got_at;
} waiter_arg;

static void *wait_for_lock(void *p)
{
    waiter_arg *w = p;
    w->rc = redmutex_lock_acquire(w->l, "waiter", rt_scaled_ms(20000));
    w->got_at = rt_now_ms();
    return NULL;
}

/* A held lock's slot moves to another master while a waiter waits: renewals, the release and the waiter follow. */
static void held_lock_slot_migrated_while_a_waiter_waits(void)
{
    ensure_cluster();
    rc_resetstat(&cl);
    redmutex_client *a = client_with(1500, 0, 0), *b = client_with(1500, 0, 0);
    const char *name = "migrate:job";
    int slot = rm_keyslot(name, strlen(name));
    rs_server *from = rc_owner(&cl, slot), *to = rc_master(&cl, 0) == from ? rc_master(&cl, 1) : rc_master(&cl, 0);
    redmutex_lock *la, *lb;
    CHECK_OK(redmutex_lock_new(&la, a, name, REDMUTEX_KIND_RLOCK, NULL));
    CHECK_OK(redmutex_lock_new(&lb, b, name, REDMUTEX_KIND_RLOCK, NULL));
    CHECK_OK(redmutex_lock_acquire(la, NULL, 0));
    waiter_arg w = {lb, 1, 0};
    pthread_t t;
    pthread_create(&t, NULL, wait_for_lock, &w);
    rt_sleep_ms(200);
    rc_migrate_slot(&cl, slot, to);
    CHECK(rs_exists(to, name) && !rs_exists(from, name));
    rt_sleep_ms(rt_scaled_ms(1500)); /* three renewal periods on the new owner */
    redmutex_state st;
    CHECK_OK(redmutex_lock_state(&st, la, NULL));
    CHECKF(st == REDMUTEX_STATE_HELD, "state %d after the move", (int)st);
    CHECKF(rs_int(to, "PTTL %s", name) > 500, "TTL %lld on the new owner", rs_int(to, "PTTL %s", name));
    CHECK(w.rc == 1); /* still waiting: no double holder */
    int64_t released_at = rt_now_ms();
    CHECK_OK(redmutex_lock_release(la, NULL));
    pthread_join(t, NULL);
    CHECK_OK(w.rc);
    /* Woken by the release message on the slot's new owner (its subscription followed the slot). */
    CHECKF(w.got_at - released_at < rt_scaled_ms(400), "the waiter took %lld ms", (long long)(w.got_at - released_at));
    CHECK_OK(redmutex_lock_release(lb, "waiter"));
    CHECK(!rs_exists(to, name) && !rs_exists(from, name)); /* no orphan anywhere */
    uint64_t redirects, refreshes;
    rm_deploy_counts(a, 0, &redirects, &refreshes);
    printf("     client A followed %llu redirects; the cluster answered MOVED %lld times, ASK %lld times\n",
           (unsigned long long)redirects, rc_errorstat_all(&cl, "MOVED"), rc_errorstat_all(&cl, "ASK"));
    CHECK(rc_errorstat_all(&cl, "MOVED") <= 6); /* once per client and slot, not per call */
    redmutex_lock_free(la);
    redmutex_lock_free(lb);
    redmutex_client_free(a);
    redmutex_client_free(b);
}

typedef struct ender {
    int slot;
    rs_server *to;
    int64_t after_ms;
} ender;

static void *end_migration_later(void *p)
{
    ender *e = p;
    rt_sleep_ms(e->after_ms);
    rc_migrate_end(&cl, e->slot, e->to);
    return NULL;
}

/* A release sent while its slot is half moved: ASK is followed, TRYAGAIN retried until the move ends, within the deadline. */
static void a_release_during_a_migration_follows_ask_and_retries(void)
{
    ensure_cluster();
    rc_resetstat(&cl);
    redmutex_client *a = client_with(30000, 0, 3000);
    const char *name = "midmove:job";
    int slot = rm_keyslot(name, strlen(name));
    rs_server *from = rc_owner(&cl, slot), *to = rc_master(&cl, 0) == from ? rc_master(&cl, 1) : rc_master(&cl, 0);
    redmutex_lock *l;
    CHECK_OK(redmutex_lock_new(&l, a, name, REDMUTEX_KIND_RLOCK, NULL));
    CHECK_OK(redmutex_lock_acquire(l, NULL, 0));
    rc_migrate_begin(&cl, slot, from, to);
    rc_migrate_keys(&cl, slot, from, to);
    CHECK(rs_int(to, "CLUSTER COUNTKEYSINSLOT %d", slot) == 1); /* moved, while the slot is still the old owner's */
    ender e = {slot, to, 300};
    pthread_t t;
    pthread_create(&t, NULL, end_migration_later, &e);
    int64_t t0 = rt_now_ms();
    CHECK_OK(redmutex_lock_release(l, NULL));
    int64_t took = rt_now_ms() - t0;
    pthread_join(t, NULL);
    CHECK(!rs_exists(to, name) && !rs_exists(from, name));
    printf("     released in %lld ms; the cluster answered ASK %lld, TRYAGAIN %lld, MOVED %lld times\n", (long long)took,
           rc_errorstat_all(&cl, "ASK"), rc_errorstat_all(&cl, "TRYAGAIN"), rc_errorstat_all(&cl, "MOVED"));
    CHECK(rc_errorstat_all(&cl, "ASK") >= 1);
    redmutex_lock_free(l);
    redmutex_client_free(a);
}

/* CLUSTER FAILOVER on the replica of the lock's master: with min_replicas=1 the lock is on the replica and survives. */
static void cluster_failover_keeps_a_lock_taken_with_min_replicas(void)
{
    ensure_cluster();
    redmutex_client *a = client_with(1500, 1, 0), *b = client_with(1500, 0, 0);
    const char *name = "failover:job";
    rs_server *m = rc_owner(&cl, rm_keyslot(name, strlen(name)));
    rs_server *r = NULL;
    WAIT_FOR((r = rc_replica_of(&cl, m)) != NULL, 10000);
    redmutex_lock *la, *lb;
    CHECK_OK(redmutex_lock_new(&la, a, name, REDMUTEX_KIND_RLOCK, NULL));
    CHECK_OK(redmutex_lock_new(&lb, b, name, REDMUTEX_KIND_RLOCK, NULL));
    CHECK_OK(redmutex_lock_acquire(la, NULL, 0));
    redisReply *rep = rs_cmd(r, "CLUSTER FAILOVER");
    CHECK(rep && rep->type == REDIS_REPLY_STATUS);
    freeReplyObject(rep);
    WAIT_FOR(rc_owner(&cl, rm_keyslot(name, strlen(name))) == r, 15000);
    rc_wait_ok(&cl, 15000);
    CHECK(rs_exists(r, name));
    rt_sleep_ms(rt_scaled_ms(1500));
    redmutex_state st;
    CHECK_OK(redmutex_lock_state(&st, la, NULL));
    CHECKF(st == REDMUTEX_STATE_HELD, "state %d after the failover", (int)st);
    CHECK_RC(redmutex_lock_acquire(lb, NULL, 0), REDMUTEX_ETIMEDOUT); /* still excluded */
    CHECK_OK(redmutex_lock_release(la, NULL));
    CHECK_OK(redmutex_lock_acquire(lb, NULL, 0));
    CHECK_OK(redmutex_lock_release(lb, NULL));
    redmutex_lock_free(la);
    redmutex_lock_free(lb);
    redmutex_client_free(a);
    redmutex_client_free(b);
}

/*
 * SIGKILL of the master that owns a held lock's slot: the replica is
 * promoted. Without min_replicas the hold is either still on it (HELD, its
 * key there) or reported LOST - never believed held with its key gone; with
 * min_replicas=1 and a lease longer than the promotion it must survive. New
 * acquisitions work again within a bound (printed: the promotion time).
 */
static void kill_case(const char *pattern, int64_t min_replicas, int64_t lease_ms, bool must_survive)
{
    ensure_cluster();
    /* A master that still has a live replica (an earlier case may have used one up). */
    rs_server *m = NULL, *r = NULL;
    for (int k = 0; k < 3 && !r; k++)
        if ((m = rc_master(&cl, k)) != NULL)
            r = rc_replica_of(&cl, m);
    CHECK(r != NULL);
    char name[64], other[96];
    rc_name_on(&cl, m, pattern, name, sizeof name);
    snprintf(other, sizeof other, "other{%s}", name);
    int slot = rm_keyslot(name, strlen(name));
    redmutex_client *a = client_with(lease_ms, min_replicas, 0), *b = client_with(lease_ms, 0, 300);
    redmutex_lock *la, *lb;
    CHECK_OK(redmutex_lock_new(&la, a, name, REDMUTEX_KIND_RLOCK, NULL));
    CHECK_OK(redmutex_lock_new(&lb, b, other, REDMUTEX_KIND_LOCK, NULL));
    CHECK_OK(redmutex_lock_acquire(la, NULL, 0));
    int64_t killed = rt_now_ms();
    rs_kill(m);
    int64_t gap = -1;
    while (gap < 0 && rt_now_ms() - killed < rt_scaled_ms(20000)) {
        if (redmutex_lock_acquire(lb, NULL, 0) == 0) {
            gap = rt_now_ms() - killed;
            CHECK_OK(redmutex_lock_release(lb, NULL));
        } else {
            rt_sleep_ms(10);
        }
    }
    CHECKF(gap >= 0, "no acquisition succeeded within 20 s of the kill");
    WAIT_FOR(rc_owner(&cl, slot) == r, 10000);
    bool promoted_with_it = rs_exists(r, name);
    /* The watchdog settles it: renewed on the promoted replica (HELD), or gone there (LOST). */
    redmutex_state st = REDMUTEX_STATE_RENEWAL_FAILING;
    WAIT_FOR(redmutex_lock_state(&st, la, NULL) == 0 && st != REDMUTEX_STATE_RENEWAL_FAILING &&
                 (st == REDMUTEX_STATE_LOST || rt_now_ms() - killed > rt_scaled_ms(4000)),
             12000);
    bool there = rs_exists(r, name);
    printf("     min_replicas %lld: first acquisition %lld ms after the SIGKILL; key %s the promoted replica; the "
           "hold is then %s (key %s)\n",
           (long long)min_replicas, (long long)gap, promoted_with_it ? "on" : "not on",
           st == REDMUTEX_STATE_HELD ? "held" : "reported lost", there ? "present" : "absent");
    CHECK(st == REDMUTEX_STATE_HELD ? there : st == REDMUTEX_STATE_LOST);
    /* WAIT made the replica have it before acquire returned. (Its renewals then need a replica of the new
       master to acknowledge them: one with none left reports the hold LOST when its validity ends.) */
    if (must_survive)
        CHECKF(promoted_with_it, "a hold taken with min_replicas=1 was not on the promoted replica");
    redmutex_lock_release(la, NULL);
    redmutex_lock_free(la);
    redmutex_lock_free(lb);
    redmutex_client_free(a);
    redmutex_client_free(b);
}

static void sigkill_of_a_master_without_min_replicas(void) { kill_case("kill0:%d", 0, 3000, false); }

static void sigkill_of_a_master_with_min_replicas_leaves_the_key_on_the_replica(void) { kill_case("kill1:%d", 1, 10000, true); }

int main(int argc, char **argv)
{
    static const rt_test tests[] = {
        {"held_lock_slot_migrated_while_a_waiter_waits", held_lock_slot_migrated_while_a_waiter_waits},
        {"a_release_during_a_migration_follows_ask_and_retries", a_release_during_a_migration_follows_ask_and_retries},
        {"cluster_failover_keeps_a_lock_taken_with_min_replicas", cluster_failover_keeps_a_lock_taken_with_min_replicas},
        {"sigkill_of_a_master_without_min_replicas", sigkill_of_a_master_without_min_replicas},
        {"sigkill_of_a_master_with_min_replicas_leaves_the_key_on_the_replica", sigkill_of_a_master_with_min_replicas_leaves_the_key_on_the_replica},
    };
    return rt_run(tests, sizeof tests / sizeof tests[0], argc, argv);
}
