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

/* A release sent while its slot is half moved: ASK is followed, TRYAGAIN retried until the move ends, within the
 * deadline. */
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
    printf("     released in %lld ms; the cluster answered ASK %lld, TRYAGAIN %lld, MOVED %lld times\n",
           (long long)took, rc_errorstat_all(&cl, "ASK"), rc_errorstat_all(&cl, "TRYAGAIN"),
           rc_errorstat_all(&cl, "MOVED"));
    CHECK(rc_errorstat_all(&cl, "ASK") >= 1);
    redmutex_lock_free(l);
    redmutex_client_free(a);
}

/*
 * A held lock whose slot stays half moved (its key already on the new owner,
 * the slot still the old one's) for two leases: the old owner answers every
 * renewal ASK, and the watchdog follows it (ASKING + RENEW on the new
 * owner) in the same round instead of failing and retrying after lease/10.
 */
static void renewals_follow_ask_while_the_slot_is_half_moved(void)
{
    ensure_cluster();
    rc_resetstat(&cl);
    int64_t lease = 1500;
    redmutex_client *a = client_with(lease, 0, 0);
    const char *name = "askrenew:job";
    int slot = rm_keyslot(name, strlen(name));
    rs_server *from = rc_owner(&cl, slot), *to = rc_master(&cl, 0) == from ? rc_master(&cl, 1) : rc_master(&cl, 0);
    redmutex_lock *l;
    CHECK_OK(redmutex_lock_new(&l, a, name, REDMUTEX_KIND_RLOCK, NULL));
    CHECK_OK(redmutex_lock_acquire(l, NULL, 0));
    rc_migrate_begin(&cl, slot, from, to);
    rc_migrate_keys(&cl, slot, from, to);
    CHECK(rs_int(to, "CLUSTER COUNTKEYSINSLOT %d", slot) == 1 && !rs_exists(from, name));
    /* Two leases: without ASK followed, the hold would fail its renewals and be LOST by then. */
    int64_t until = rt_now_ms() + rt_scaled_ms(2 * lease);
    redmutex_state st = REDMUTEX_STATE_HELD;
    while (rt_now_ms() < until) {
        CHECK_OK(redmutex_lock_state(&st, l, NULL));
        CHECKF(st == REDMUTEX_STATE_HELD, "state %d while the slot is half moved (ASK %lld times)", (int)st,
               rc_errorstat_all(&cl, "ASK"));
        rt_sleep_ms(20);
    }
    long long asked = rc_errorstat_all(&cl, "ASK");
    printf("     the old owner answered ASK %lld times in %lld ms of renewals\n", asked, (long long)(2 * lease));
    CHECK(asked >= 2);
    CHECKF(asked <= 2 * 2 * 10 / 3 + 2, "ASK %lld times: more than once per renewal", asked);
    rc_migrate_end(&cl, slot, to);
    CHECKF(rs_int(to, "PTTL %s", name) > lease / 2, "TTL %lld on the new owner", rs_int(to, "PTTL %s", name));
    CHECK_OK(redmutex_lock_release(l, NULL));
    CHECK(!rs_exists(to, name) && !rs_exists(from, name));
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

/* Whether `asker` sees node s as failed (FAIL, not only PFAIL) in CLUSTER NODES. */
static bool seen_failed(rs_server *asker, rs_server *s)
{
    redisReply *r = rs_cmd(asker, "CLUSTER NODES");
    char port[16];
    snprintf(port, sizeof port, ":%d@", s->port);
    const char *line = r && r->type == REDIS_REPLY_STRING ? strstr(r->str, port) : NULL;
    const char *eol = line ? strchr(line, '\n') : NULL;
    const char *f = line ? strstr(line, "fail") : NULL;
    bool failed = f && (!eol || f < eol) && f[4] != '?';
    if (r)
        freeReplyObject(r);
    return failed;
}

/*
 * With min_replicas=1 a renewal's WAIT asks the master for the replicas the
 * cluster says it has, not for whatever a WAIT happens to get: a replica
 * that stops answering (SIGSTOP) makes renewals fail (the client still
 * counts it), and only once the cluster has marked it failed do renewals go
 * on without it (the master has no replica left in service). The hold is
 * never LOST on the way.
 */
static void a_renewal_asks_a_master_for_the_replicas_it_really_has(void)
{
    ensure_cluster();
    rs_server *m = NULL, *r = NULL;
    for (int k = 0; k < 3 && !r; k++)
        if ((m = rc_master(&cl, k)) != NULL)
            r = rc_replica_of(&cl, m);
    CHECK(r != NULL);
    char name[64];
    rc_name_on(&cl, m, "replicas:%d", name, sizeof name);
    int64_t lease = 6000;
    redmutex_client_options o;
    redmutex_client_options_init(&o, REDMUTEX_CLIENT_OPTIONS_VERSION);
    o.watchdog_lease_ms = rt_scaled_ms(lease);
    o.min_replicas = 1;
    o.replica_timeout_ms = 300;
    const char *url = cl.url;
    redmutex_client *a = NULL;
    CHECK_OK(redmutex_client_new(&a, &url, 1, &o));
    redmutex_lock *l;
    CHECK_OK(redmutex_lock_new(&l, a, name, REDMUTEX_KIND_RLOCK, NULL));
    CHECK_OK(redmutex_lock_acquire(l, NULL, 0));
    rs_pause(r);
    redmutex_state st = REDMUTEX_STATE_HELD;
    WAIT_FOR(redmutex_lock_state(&st, l, NULL) == 0 && st != REDMUTEX_STATE_HELD, lease);
    CHECKF(st == REDMUTEX_STATE_RENEWAL_FAILING, "state %d with the replica stopped", (int)st);
    int64_t failing_at = rt_now_ms();
    WAIT_FOR(redmutex_lock_state(&st, l, NULL) == 0 && st != REDMUTEX_STATE_RENEWAL_FAILING, lease);
    printf("     renewals failed for %lld ms with the replica stopped; then %s\n",
           (long long)(rt_now_ms() - failing_at), st == REDMUTEX_STATE_HELD ? "renewed without it" : "lost");
    CHECKF(st == REDMUTEX_STATE_HELD, "state %d: the hold was lost", (int)st);
    CHECK(seen_failed(m, r)); /* renewed without a replica only once the cluster gave it up */
    rs_resume(r);
    CHECK_OK(redmutex_lock_release(l, NULL));
    redmutex_lock_free(l);
    redmutex_client_free(a);
    rc_wait_ok(&cl, 30000);
}

/*
 * SIGKILL of the master that owns a held lock's slot: the replica is
 * promoted. Without min_replicas the hold is either still on it (HELD, its
 * key there) or reported LOST - never believed held with its key gone. With
 * min_replicas=1 and a lease longer than the promotion, WAIT put the key on
 * the replica before acquire returned, so it must survive: the watchdog
 * finds the promoted replica (a refresh after the dead master did not
 * answer) and renews there, its WAIT asking only for the replicas the new
 * master has (none yet). New acquisitions work again within a bound
 * (printed: the promotion time).
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
    int64_t validity0 = 0;
    CHECK_OK(redmutex_lock_validity(&validity0, la, NULL));
    int64_t killed = rt_now_ms();
    int64_t end0 = killed + validity0; /* the hold's validity as the kill found it */
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
    /* The watchdog settles it: renewed on the promoted replica (its validity now ends later than at
       the kill), or reported LOST. */
    redmutex_state st = REDMUTEX_STATE_RENEWAL_FAILING;
    int64_t v = 0;
    WAIT_FOR(
        redmutex_lock_state(&st, la, NULL) == 0 &&
            (st == REDMUTEX_STATE_LOST ||
             (st == REDMUTEX_STATE_HELD && redmutex_lock_validity(&v, la, NULL) == 0 && rt_now_ms() + v > end0 + 100)),
        lease_ms + 12000);
    bool there = rs_exists(r, name);
    printf("     min_replicas %lld: first acquisition %lld ms after the SIGKILL; key %s the promoted replica; the "
           "hold is then %s (key %s)\n",
           (long long)min_replicas, (long long)gap, promoted_with_it ? "on" : "not on",
           st == REDMUTEX_STATE_HELD ? "renewed there" : "reported lost", there ? "present" : "absent");
    CHECK(st == REDMUTEX_STATE_HELD ? there : st == REDMUTEX_STATE_LOST);
    /* WAIT made the replica have it before acquire returned, and the promoted master (no replica of its own
       yet) renews it. */
    if (must_survive) {
        CHECKF(promoted_with_it, "a hold taken with min_replicas=1 was not on the promoted replica");
        CHECKF(st == REDMUTEX_STATE_HELD, "a hold taken with min_replicas=1 was lost though its key survived");
        CHECK(rs_int(r, "PTTL %s", name) > lease_ms / 2);
    }
    if (st == REDMUTEX_STATE_HELD) {
        CHECK_OK(redmutex_lock_release(la, NULL));
        CHECK(!rs_exists(r, name));
    } else {
        redmutex_lock_release(la, NULL); /* a lost hold: the release only forgets it */
    }
    redmutex_lock_free(la);
    redmutex_lock_free(lb);
    redmutex_client_free(a);
    redmutex_client_free(b);
}

/* How many replicas `m` itself lists online (ROLE): what a client's ROLE probe sees. */
static int replicas_online(rs_server *m)
{
    redisReply *r = rs_cmd(m, "ROLE");
    int n = r && r->type == REDIS_REPLY_ARRAY && r->elements >= 3 && r->element[2]->type == REDIS_REPLY_ARRAY
                ? (int)r->element[2]->elements
                : -1;
    if (r)
        freeReplyObject(r);
    return n;
}

/*
 * min_replicas=1 across a SIGKILL failover: the promoted master has no
 * replica, so acquisitions WAIT for none there (they are not refused until
 * one comes back, redisson#4706's trap); once the old master is back as its
 * replica and in sync, the ROLE that rides with the next WAIT counts it, and
 * an acquisition that it cannot acknowledge (stopped) fails again.
 */
static void acquisitions_after_a_failover_wait_for_the_replicas_the_new_master_has(void)
{
    ensure_cluster();
    rs_server *m = NULL, *r = NULL;
    for (int k = 0; k < 3 && !r; k++)
        if ((m = rc_master(&cl, k)) != NULL)
            r = rc_replica_of(&cl, m);
    CHECK(r != NULL);
    char name[64], n2[96], n3[96];
    rc_name_on(&cl, m, "repl:%d", name, sizeof name);
    snprintf(n2, sizeof n2, "second{%s}", name);
    snprintf(n3, sizeof n3, "third{%s}", name);
    int slot = rm_keyslot(name, strlen(name));
    redmutex_client_options o;
    redmutex_client_options_init(&o, REDMUTEX_CLIENT_OPTIONS_VERSION);
    o.min_replicas = 1;
    o.replica_timeout_ms = 300;
    const char *url = cl.url;
    redmutex_client *a = NULL;
    CHECK_OK(redmutex_client_new(&a, &url, 1, &o));
    redmutex_lock *l1, *l2, *l3;
    CHECK_OK(redmutex_lock_new(&l1, a, name, REDMUTEX_KIND_LOCK, NULL));
    CHECK_OK(redmutex_lock_new(&l2, a, n2, REDMUTEX_KIND_LOCK, NULL));
    CHECK_OK(redmutex_lock_new(&l3, a, n3, REDMUTEX_KIND_LOCK, NULL));
    CHECK_OK(redmutex_lock_acquire(l1, NULL, 0));
    CHECK_OK(redmutex_lock_release(l1, NULL));
    rs_kill(m);
    WAIT_FOR(rc_owner(&cl, slot) == r, 15000);
    int64_t promoted = rt_now_ms(), got = -1;
    while (got < 0 && rt_now_ms() - promoted < rt_scaled_ms(5000)) {
        int rc = redmutex_lock_acquire(l1, NULL, 0);
        if (rc == 0)
            got = rt_now_ms() - promoted;
        else
            CHECKF(rc == REDMUTEX_ECONN || rc == REDMUTEX_EREPLICAS, "acquire: %d %s", rc, redmutex_last_error());
    }
    CHECKF(got >= 0, "no acquisition with min_replicas=1 within 5 s of the promotion: %s", redmutex_last_error());
    printf("     acquired with min_replicas=1 on the promoted master %lld ms after it was promoted\n", (long long)got);
    CHECK_OK(redmutex_lock_release(l1, NULL));
    /* The old master comes back empty as the new one's replica. */
    rs_restart(m);
    rc_wait_ok(&cl, 30000);
    CHECK(rc_replica_of(&cl, r) == m);
    /* Known to the cluster is not yet in sync: the master lists it in ROLE once its link is online. */
    WAIT_FOR(replicas_online(r) >= 1, 30000);
    CHECK_OK(redmutex_lock_acquire(l2, NULL, 0)); /* its WAIT's ROLE sees the replica back */
    CHECK_OK(redmutex_lock_release(l2, NULL));
    rs_pause(m);
    int rc = redmutex_lock_acquire(l3, NULL, 0);
    rs_resume(m);
    CHECKF(rc == REDMUTEX_EREPLICAS, "acquire with the replica back but stopped returned %d: %s", rc,
           redmutex_last_error());
    CHECK(!rs_exists(r, n3)); /* the unconfirmed grant was undone */
    redmutex_lock_free(l1);
    redmutex_lock_free(l2);
    redmutex_lock_free(l3);
    redmutex_client_free(a);
}

/* The port of the master of `slot` as node `asker` sees it (CLUSTER SLOTS), 0 if none. */
static int owner_seen_by(rs_server *asker, int slot)
{
    redisReply *r = rs_cmd(asker, "CLUSTER SLOTS");
    int port = 0;
    for (size_t k = 0; r && r->type == REDIS_REPLY_ARRAY && k < r->elements; k++) {
        redisReply *e = r->element[k];
        if (slot >= e->element[0]->integer && slot <= e->element[1]->integer)
            port = (int)e->element[2]->element[1]->integer;
    }
    if (r)
        freeReplyObject(r);
    return port;
}

/*
 * A master that stops answering (SIGSTOP: connections open, nothing comes
 * back - a host gone, a partition) while its replica is promoted: the
 * requests that time out there make the client read the map again, so the
 * next attempt goes to the new master instead of timing out on the old one
 * until some periodic refresh.
 */
static void a_master_that_stops_answering_is_routed_around_after_a_failover(void)
{
    ensure_cluster();
    rs_server *m = NULL, *r = NULL;
    for (int k = 0; k < 3 && !r; k++)
        if ((m = rc_master(&cl, k)) != NULL)
            r = rc_replica_of(&cl, m);
    CHECK(r != NULL);
    char name[64];
    rc_name_on(&cl, m, "silent:%d", name, sizeof name);
    int slot = rm_keyslot(name, strlen(name));
    redmutex_client *a = client_with(30000, 0, 200);
    redmutex_lock *l;
    CHECK_OK(redmutex_lock_new(&l, a, name, REDMUTEX_KIND_LOCK, NULL));
    CHECK_OK(redmutex_lock_acquire(l, NULL, 0));
    CHECK_OK(redmutex_lock_release(l, NULL));
    rs_pause(m);
    redisReply *rep = rs_cmd(r, "CLUSTER FAILOVER TAKEOVER");
    CHECK(rep && rep->type == REDIS_REPLY_STATUS);
    freeReplyObject(rep);
    WAIT_FOR(owner_seen_by(r, slot) == r->port, 15000); /* (the stopped master cannot be asked) */
    /* Attempts as an application makes them: each that fails (the old master silent) is retried. One
       may time out there; the others fail at once ("it stalls: not asked"), costing no timeout, and
       each of those too asks for the map to be read again - so the time to the first acquisition on
       the promoted master, not the number of attempts, is what is bounded. */
    int64_t t0 = rt_now_ms();
    int rc, attempts = 0, timed_out = 0;
    while ((rc = redmutex_lock_acquire(l, NULL, 0)) != 0 && rt_now_ms() - t0 < rt_scaled_ms(5000)) {
        CHECKF(rc == REDMUTEX_ECONN, "acquire: %d %s", rc, redmutex_last_error());
        attempts++;
        timed_out += strstr(redmutex_last_error(), "did not answer in time") != NULL;
    }
    int64_t took = rt_now_ms() - t0;
    rs_resume(m);
    CHECKF(rc == 0, "acquire with the old master silent and its replica promoted: %d %s", rc, redmutex_last_error());
    printf("     acquired on the promoted master after %d failed attempts (%d timed out), %lld ms\n", attempts,
           timed_out, (long long)took);
    CHECKF(timed_out <= 1, "%d attempts timed out on the silent master", timed_out);
    /* One command timeout (200 ms), then map reads at most every 100 ms until the cluster agrees. */
    CHECKF(took <= rt_scaled_ms(1500), "the promoted master was used only after %lld ms", (long long)took);
    CHECK(rs_exists(r, name));
    CHECK_OK(redmutex_lock_release(l, NULL));
    redmutex_lock_free(l);
    redmutex_client_free(a);
    rc_wait_ok(&cl, 30000); /* the old master back, as the new one's replica */
}

static void sigkill_of_a_master_without_min_replicas(void) { kill_case("kill0:%d", 0, 3000, false); }

static void sigkill_of_a_master_with_min_replicas_keeps_the_hold(void) { kill_case("kill1:%d", 1, 10000, true); }

int main(int argc, char **argv)
{
    static const rt_test tests[] = {
        {"held_lock_slot_migrated_while_a_waiter_waits", held_lock_slot_migrated_while_a_waiter_waits},
        {"a_release_during_a_migration_follows_ask_and_retries", a_release_during_a_migration_follows_ask_and_retries},
        {"renewals_follow_ask_while_the_slot_is_half_moved", renewals_follow_ask_while_the_slot_is_half_moved},
        {"cluster_failover_keeps_a_lock_taken_with_min_replicas",
         cluster_failover_keeps_a_lock_taken_with_min_replicas},
        {"a_renewal_asks_a_master_for_the_replicas_it_really_has",
         a_renewal_asks_a_master_for_the_replicas_it_really_has},
        {"a_master_that_stops_answering_is_routed_around_after_a_failover",
         a_master_that_stops_answering_is_routed_around_after_a_failover},
        {"sigkill_of_a_master_without_min_replicas", sigkill_of_a_master_without_min_replicas},
        {"acquisitions_after_a_failover_wait_for_the_replicas_the_new_master_has",
         acquisitions_after_a_failover_wait_for_the_replicas_the_new_master_has},
        {"sigkill_of_a_master_with_min_replicas_keeps_the_hold", sigkill_of_a_master_with_min_replicas_keeps_the_hold},
    };
    return rt_run(tests, sizeof tests / sizeof tests[0], argc, argv);
}
