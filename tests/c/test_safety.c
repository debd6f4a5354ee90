/*
 * Safety and liveness under timing faults: late requests (a delaying proxy),
 * a straggler server (a busy script in a loop), stopped and restarted
 * servers, scripts that must not fail halfway, and the documented worst-case
 * blocking times. Every test here failed before the fix it guards.
 */
#define _GNU_SOURCE
#include "harness.h"
#include "scripts.h"

#include <arpa/inet.h>
#include <errno.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAXN 5
static rs_server srv[MAXN];

static redmutex_client *client_for(const char *const *urls, size_t n, int64_t timeout_ms, int64_t lease_ms)
{
    redmutex_client_options o = REDMUTEX_CLIENT_OPTIONS_INIT;
    o.command_timeout_ms = timeout_ms;
    o.connect_timeout_ms = timeout_ms;
    o.watchdog_lease_ms = lease_ms;
    o.shutdown_timeout_ms = 500;
    o.retry_delay_ms = 20;
    redmutex_client *c = NULL;
    CHECK_OK(redmutex_client_new(&c, urls, n, &o));
    return c;
}

static redmutex_lock *lock_for(redmutex_client *c, const char *name, redmutex_kind kind, int64_t lease_ms,
                               redmutex_lost_fn cb, void *payload)
{
    redmutex_lock_options lo = REDMUTEX_LOCK_OPTIONS_INIT;
    lo.lease_ms = lease_ms;
    lo.on_lost = cb;
    lo.on_lost_payload = payload;
    redmutex_lock *l = NULL;
    CHECK_OK(redmutex_lock_new(&l, c, name, kind, &lo));
    return l;
}

static void stop_all(size_t n)
{
    for (size_t i = 0; i < n; i++)
        rs_stop(&srv[i]);
}

/* ---- per-server order (point 1) ------------------------------------------- */

/*
 * Hold 1 is granted by s1 and s2; s3 refuses (another owner holds it there).
 * The release of hold 1 is held back 300 ms on the way to s3. Hold 2 of the
 * same owner then needs s3; a late release must not delete it there.
 */
static void test_late_release_never_deletes_the_next_hold(void)
{
    for (int i = 0; i < 3; i++)
        rs_start(&srv[i], NULL);
    /* The release script's SHA marks the chunk the proxy holds back. */
    rs_proxy *p = rs_proxy_start(&srv[2], rm_script_sha(RM_SCRIPT_RLOCK_RELEASE), 300);
    const char *urls[3] = {srv[0].url, srv[1].url, p->url};
    redmutex_client *c = client_for(urls, 3, 1000, 5000);
    redmutex_lock *l = lock_for(c, "order:rel", REDMUTEX_KIND_RLOCK, 5000, NULL, NULL);
    CHECK(rs_int(&srv[2], "EVAL %s 1 %s",
                 "redis.call('hset', KEYS[1], 'foreign', 1) "
                 "return redis.call('pexpire', KEYS[1], 200)",
                 "order:rel") == 1);
    CHECK_OK(redmutex_lock_acquire(l, "owner-1", 0)); /* s1, s2 */
    CHECK_OK(redmutex_lock_release(l, "owner-1"));
    /* Hold 2 can only have a majority with s3: s2 is taken by someone else. */
    CHECK(rs_int(&srv[1], "EVAL %s 1 %s",
                 "redis.call('hset', KEYS[1], 'foreign', 1) "
                 "return redis.call('pexpire', KEYS[1], 5000)",
                 "order:rel") == 1);
    WAIT_FOR(!rs_exists(&srv[2], "order:rel"), 2000);
    CHECK_OK(redmutex_lock_acquire(l, "owner-1", 0)); /* s1, s3 */
    rt_sleep_ms(500);                                 /* anything held back has landed by now */
    CHECK(rs_int(&srv[2], "HEXISTS order:rel owner-1") == 1);
    redmutex_client *other = client_for(urls, 3, 1000, 5000);
    redmutex_lock *ol = lock_for(other, "order:rel", REDMUTEX_KIND_RLOCK, 5000, NULL, NULL);
    CHECK_RC(redmutex_lock_acquire(ol, "owner-2", 0), REDMUTEX_ETIMEDOUT);
    redmutex_state st;
    CHECK_OK(redmutex_lock_state(&st, l, "owner-1"));
    CHECK(st == REDMUTEX_STATE_HELD);
    CHECK_OK(redmutex_lock_release(l, "owner-1"));
    redmutex_lock_free(ol);
    redmutex_client_close(other);
    redmutex_client_free(other);
    redmutex_lock_free(l);
    redmutex_client_close(c);
    redmutex_client_free(c);
    rs_proxy_stop(p);
    stop_all(3);
}

/* How many SET commands s has run (INFO commandstats). */
static long long set_calls(rs_server *s)
{
    redisReply *r = rs_cmd(s, "INFO commandstats");
    CHECK(r && r->type == REDIS_REPLY_STRING);
    const char *at = strstr(r->str, "cmdstat_set:calls=");
    long long n = at ? strtoll(at + strlen("cmdstat_set:calls="), NULL, 10) : 0;
    freeReplyObject(r);
    return n;
}

/*
 * The SET NX of an acquisition is held back 300 ms on the way to s3; the
 * call returns at the s1+s2 majority and the caller releases at once. The
 * release must run after the SET NX on s3, or s3 keeps a key nobody owns.
 */
static void test_late_acquire_leaves_no_orphan_key(void)
{
    for (int i = 0; i < 3; i++)
        rs_start(&srv[i], NULL);
    rs_proxy *p = rs_proxy_start(&srv[2], "$2\r\nNX\r\n", 300);
    const char *urls[3] = {srv[0].url, srv[1].url, p->url};
    redmutex_client *c = client_for(urls, 3, 1000, 5000);
    /* An orphan would live for the whole lease: far longer than the wait
       for the key to go, even stretched for valgrind. */
    redmutex_lock *l = lock_for(c, "order:acq", REDMUTEX_KIND_LOCK, 10000, NULL, NULL);
    for (int round = 0; round < 3; round++) {
        int delayed = atomic_load(&p->delayed);
        long long sets = set_calls(&srv[2]);
        CHECK_OK(redmutex_lock_acquire(l, NULL, 0));
        CHECK_OK(redmutex_lock_release(l, NULL));
        WAIT_FOR(atomic_load(&p->delayed) > delayed, 2000); /* the SET NX to s3 really was held back */
        WAIT_FOR(set_calls(&srv[2]) > sets, 2000);          /* ... and has run there now */
        WAIT_FOR(!rs_exists(&srv[2], "order:acq"), 1000);   /* an orphan key would stay */
    }
    redmutex_lock_free(l);
    redmutex_client_close(c);
    redmutex_client_free(c);
    rs_proxy_stop(p);
    stop_all(3);
}

/*
 * Two threads of one client try the same name at once; both SET NX are held
 * back 800 ms on the way to s3, so two connections there owe replies for
 * the name. The release (or the undo) that follows cannot follow both by
 * its 200 ms deadline: it must be queued behind them, not dropped, or s3
 * keeps a key for the whole lease once the late SET NX lands.
 */
typedef struct racer {
    redmutex_lock *l;
    pthread_barrier_t *go;
    int rc;
} racer;

static void *race_acquire(void *p)
{
    racer *r = p;
    pthread_barrier_wait(r->go);
    r->rc = redmutex_lock_acquire(r->l, NULL, 0);
    if (r->rc == 0)
        CHECK_OK(redmutex_lock_release(r->l, NULL));
    return NULL;
}

static void test_release_behind_a_busy_order_is_queued_not_dropped(void)
{
    for (int i = 0; i < 3; i++)
        rs_start(&srv[i], NULL);
    rs_proxy *p = rs_proxy_start(&srv[2], "$2\r\nNX\r\n", 800);
    /* s1 and s2 answer 100 ms late: neither call is decided before both sent to s3. */
    rs_proxy *slow[2] = {rs_proxy_start(&srv[0], "$2\r\nNX\r\n", 100), rs_proxy_start(&srv[1], "$2\r\nNX\r\n", 100)};
    const char *urls[3] = {slow[0]->url, slow[1]->url, p->url};
    int raced = 0;
    for (int round = 0; round < 5; round++) {
        /* A new client each round: the connections start clean. */
        redmutex_client *c = client_for(urls, 3, 200, 10000);
        redmutex_lock *l[2] = {lock_for(c, "order:busy", REDMUTEX_KIND_LOCK, 10000, NULL, NULL),
                               lock_for(c, "order:busy", REDMUTEX_KIND_LOCK, 10000, NULL, NULL)};
        int delayed = atomic_load(&p->delayed);
        long long sets = set_calls(&srv[2]);
        pthread_barrier_t go;
        pthread_barrier_init(&go, NULL, 2);
        racer r[2] = {{l[0], &go, 0}, {l[1], &go, 0}};
        pthread_t t[2];
        for (int k = 0; k < 2; k++)
            pthread_create(&t[k], NULL, race_acquire, &r[k]);
        for (int k = 0; k < 2; k++)
            pthread_join(t[k], NULL);
        pthread_barrier_destroy(&go);
        /* Every held-back SET NX landed, and what followed it ran. Both were
           held back when the threads really raced (valgrind runs one thread
           at a time, so there they may not). */
        if (rt_time_scale() == 1)
            WAIT_FOR(set_calls(&srv[2]) >= sets + 2, 3000); /* each racer sent one SET NX to s3 */
        WAIT_FOR(atomic_load(&p->forwarded) == atomic_load(&p->delayed), 3000);
        /* One thread at a time, the second racer may start after s3 already looks stalled (others
           answered, it did not) and not send there at all: wait for the SETs the proxy held. */
        WAIT_FOR(set_calls(&srv[2]) >= sets + (atomic_load(&p->delayed) - delayed), 3000);
        raced += atomic_load(&p->delayed) - delayed >= 2;
        WAIT_FOR(!rs_exists(&srv[2], "order:busy"), 1500);
        for (int i = 0; i < 3; i++)
            CHECKF(!rs_exists(&srv[i], "order:busy"), "round %d: a key was left on s%d (results %d %d)", round, i + 1,
                   r[0].rc, r[1].rc);
        redmutex_lock_free(l[0]);
        redmutex_lock_free(l[1]);
        redmutex_client_close(c);
        redmutex_client_free(c);
    }
    if (rt_time_scale() == 1)
        CHECKF(raced > 0, "no round had both SET NX held back at once: the case was not tested");
    rs_proxy_stop(p);
    rs_proxy_stop(slow[0]);
    rs_proxy_stop(slow[1]);
    stop_all(3);
}

/*
 * The release of hold 1 is held back on the way to s3 and s3's connection
 * ends meanwhile, so its outcome there is unknown and no connection orders
 * it any more. Hold 1's copy on s3 is gone meanwhile (expired, say), and
 * hold 2 of the same owner is granted by s1 and s3 (s2 is taken by someone
 * else). When the late release reaches s3 it must not delete hold 2: the
 * acquisition of hold 2 sent that release again first and wrote its unlock
 * latch, so the late copy changes nothing.
 */
static void test_late_release_on_a_lost_connection_changes_nothing(void)
{
    for (int i = 0; i < 3; i++)
        rs_start(&srv[i], NULL);
    /* The release is held back long enough for the next acquisition to be
       made first, even under valgrind. */
    rs_proxy *p = rs_proxy_start(&srv[2], rm_script_sha(RM_SCRIPT_RLOCK_RELEASE), (int)rt_scaled_ms(400));
    atomic_store(&p->cut_client, true);
    const char *urls[3] = {srv[0].url, srv[1].url, p->url};
    redmutex_client *c = client_for(urls, 3, 1000, 5000);
    redmutex_lock *l = lock_for(c, "order:cut", REDMUTEX_KIND_RLOCK, 5000, NULL, NULL);
    for (int round = 0; round < 3; round++) {
        int forwarded = atomic_load(&p->forwarded);
        CHECK_OK(redmutex_lock_acquire(l, "owner-1", 0));
        WAIT_FOR(rs_exists(&srv[2], "order:cut"), 2000); /* hold 1 has reached s3 too (a majority may answer first) */
        int held = atomic_load(&p->delayed);
        atomic_store(&p->hold_until, held + 1);        /* this release only */
        CHECK_OK(redmutex_lock_release(l, "owner-1")); /* s1 and s2: a majority */
        /* The proxy has taken the release and cut s3's connection (a majority
           may answer before the proxy even reads it: under valgrind, say). */
        WAIT_FOR(atomic_load(&p->delayed) > held, 2000);
        CHECK(rs_int(&srv[2], "DEL order:cut") == 1);
        CHECK(rs_int(&srv[1], "EVAL %s 1 %s",
                     "redis.call('hset', KEYS[1], 'foreign', 1) "
                     "return redis.call('pexpire', KEYS[1], 5000)",
                     "order:cut") == 1);
        CHECK_OK(redmutex_lock_acquire(l, "owner-1", 0));       /* s1 and s3 */
        CHECK(atomic_load(&p->forwarded) == forwarded);         /* ... before the late release landed */
        WAIT_FOR(atomic_load(&p->forwarded) > forwarded, 2000); /* the late release has reached s3 */
        CHECKF(rs_num(&srv[2], "HGET order:cut owner-1") == 1, "round %d: the late release changed hold 2 on s3",
               round);
        redmutex_state st;
        CHECK_OK(redmutex_lock_state(&st, l, "owner-1"));
        CHECK(st == REDMUTEX_STATE_HELD);
        CHECK_OK(redmutex_lock_release(l, "owner-1"));
        CHECK(rs_int(&srv[1], "DEL order:cut") == 1);
        for (int i = 0; i < 3; i++)
            WAIT_FOR(!rs_exists(&srv[i], "order:cut"), 2000);
    }
    redmutex_lock_free(l);
    redmutex_client_close(c);
    redmutex_client_free(c);
    rs_proxy_stop(p);
    stop_all(3);
}

/*
 * A nested acquisition whose request dies with its connection: on a server
 * where it never ran, or ran only after its undo (a late copy), the undo
 * must not take away a level the owner held before it. The owner holds the
 * lock once; its nested acquisition is cut on the way to the proxied
 * servers (one of one, or two of three: the attempt fails and is undone).
 * The outer hold must stay on every server - no other owner can take it -
 * and its one release must leave nothing behind. `late`: the cut request
 * still reaches the server, after the undo. Variants: a try through the
 * holding handle; a wait through it (every attempt cut: a fair lock's
 * waiter that gives up must not "give back" the owner's level); the same
 * owner's first acquisition through a second handle (one field on the
 * servers, shared by both handles).
 */
enum nest_variant { NEST_TRY, NEST_WAIT, NEST_OTHER_HANDLE };

typedef struct nest_case {
    redmutex_kind kind;
    int script; /* the kind's acquire script: the proxies cut what carries its SHA */
    const char *field;
    size_t n;
    bool late;
    enum nest_variant variant;
} nest_case;

static void nested_cut_case(const nest_case *t)
{
    size_t n = t->n, first_cut = n == 1 ? 0 : 1;
    for (size_t i = 0; i < n; i++)
        rs_start(&srv[i], NULL);
    rs_proxy *px[MAXN] = {NULL};
    const char *urls[MAXN];
    for (size_t i = 0; i < n; i++) {
        urls[i] = srv[i].url;
        if (i < first_cut)
            continue;
        px[i] = rs_proxy_start(&srv[i], rm_script_sha(t->script), t->late ? 300 : 0);
        atomic_store(&px[i]->hold_until, -1); /* nothing held until the nested acquisition */
        atomic_store(&px[i]->cut_client, true);
        atomic_store(&px[i]->drop_held, !t->late);
        urls[i] = px[i]->url;
    }
    redmutex_client *c = client_for(urls, n, 1000, 5000);
    redmutex_client *other = client_for(urls, n, 1000, 5000);
    redmutex_lock *l = lock_for(c, "nest:cut", t->kind, 5000, NULL, NULL);
    redmutex_lock *l2 = lock_for(c, "nest:cut", t->kind, 5000, NULL, NULL);
    redmutex_lock *lo =
        lock_for(other, "nest:cut", t->kind == REDMUTEX_KIND_READ ? REDMUTEX_KIND_WRITE : t->kind, 5000, NULL, NULL);
    CHECK_OK(redmutex_lock_acquire(l, "owner-1", 0));
    for (size_t i = 0; i < n; i++)
        WAIT_FOR(rs_num(&srv[i], "HGET nest:cut %s", t->field) == 1, 2000);
    int forwarded[MAXN] = {0};
    for (size_t i = first_cut; i < n; i++) {
        forwarded[i] = atomic_load(&px[i]->forwarded);
        /* the nested request only, or every attempt of the wait */
        atomic_store(&px[i]->hold_until, t->variant == NEST_WAIT ? 0 : atomic_load(&px[i]->delayed) + 1);
    }
    int rc = redmutex_lock_acquire(t->variant == NEST_OTHER_HANDLE ? l2 : l, "owner-1",
                                   t->variant == NEST_WAIT ? rt_scaled_ms(300) : 0);
    for (size_t i = first_cut; i < n; i++)
        atomic_store(&px[i]->hold_until, -1);
    CHECKF(rc != 0, "the nested acquisition succeeded without a majority");
    for (size_t i = first_cut; t->late && i < n; i++)
        WAIT_FOR(atomic_load(&px[i]->forwarded) > forwarded[i], 2000); /* a late copy has landed */
    for (size_t i = 0; i < n; i++)
        CHECKF(rs_num(&srv[i], "HGET nest:cut %s", t->field) == 1,
               "kind %d, %zu servers, %s, variant %d: server %zu holds %lld levels after the failed nested acquisition",
               t->kind, n, t->late ? "late" : "dropped", t->variant, i, rs_num(&srv[i], "HGET nest:cut %s", t->field));
    CHECKF(redmutex_lock_acquire(lo, "owner-2", 0) == REDMUTEX_ETIMEDOUT,
           "another owner took the lock while its holder still held it");
    redmutex_state st;
    CHECK_OK(redmutex_lock_state(&st, l, "owner-1"));
    CHECK(st == REDMUTEX_STATE_HELD);
    CHECK_OK(redmutex_lock_release(l, "owner-1"));
    for (size_t i = 0; i < n; i++) /* late copies, if any, have been refused: nothing is left */
        WAIT_FOR(!rs_exists(&srv[i], "nest:cut") && rs_count_keys(&srv[i], "*rwlock_timeout*") == 0, 2000);
    redmutex_lock_free(lo);
    redmutex_lock_free(l2);
    redmutex_lock_free(l);
    redmutex_client_close(other);
    redmutex_client_free(other);
    redmutex_client_close(c);
    redmutex_client_free(c);
    for (size_t i = 0; i < n; i++)
        if (px[i])
            rs_proxy_stop(px[i]);
    stop_all(n);
}

static void test_failed_nested_acquire_never_takes_the_outer_level(void)
{
    const struct {
        redmutex_kind kind;
        int script;
        const char *field;
    } kinds[] = {{REDMUTEX_KIND_RLOCK, RM_SCRIPT_RLOCK_ACQUIRE, "owner-1"},
                 {REDMUTEX_KIND_FAIR, RM_SCRIPT_FAIR_ACQUIRE, "owner-1"},
                 {REDMUTEX_KIND_READ, RM_SCRIPT_READ_ACQUIRE, "owner-1"},
                 {REDMUTEX_KIND_WRITE, RM_SCRIPT_WRITE_ACQUIRE, "owner-1:write"}};
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++)
        for (size_t n = 1; n <= 3; n += 2)
            for (int late = 0; late < 2; late++)
                for (int v = NEST_TRY; v <= NEST_OTHER_HANDLE; v++) {
                    nest_case t = {kinds[k].kind, kinds[k].script, kinds[k].field, n, late, (enum nest_variant)v};
                    nested_cut_case(&t);
                }
}

/*
 * A renewal left unanswered (point 1, S18 of docs/safety.md). The watchdog's
 * renewal is held back on its way to every server, past its command
 * timeout, so the watchdog gives up waiting while the request is still in
 * flight; the owner then releases. The release must run on each server
 * after that renewal, never before it: it travels behind it on the
 * connection that owes its reply. MONITOR on each server shows the order.
 */

/* A direct connection to s in MONITOR mode (reads fail after 10 s, scaled). */
static redisContext *monitor_open(const rs_server *s)
{
    redisContext *m = redisConnect("127.0.0.1", s->port);
    CHECK(m && !m->err);
    struct timeval tv = {rt_scaled_ms(10000) / 1000, 0};
    CHECK(redisSetTimeout(m, tv) == REDIS_OK);
    redisReply *r = redisCommand(m, "MONITOR");
    CHECK(r && r->type == REDIS_REPLY_STATUS);
    freeReplyObject(r);
    return m;
}

typedef struct monitor_tally {
    int renew_before, renew_after, releases;
} monitor_tally;

/* Reads m's feed up to the line holding `marker`, counting the renewals
   before and after the first release (scripts by SHA: all are loaded). */
static void monitor_scan(redisContext *m, const char *marker, int release_script, monitor_tally *t)
{
    const char *renew = rm_script_sha(RM_SCRIPT_RENEW), *release = rm_script_sha(release_script);
    for (;;) {
        redisReply *r = NULL;
        CHECKF(redisGetReply(m, (void **)&r) == REDIS_OK && r, "MONITOR: %s", m->errstr);
        CHECK(r->type == REDIS_REPLY_STATUS);
        bool end = strstr(r->str, marker) != NULL;
        if (strstr(r->str, release))
            t->releases++;
        else if (strstr(r->str, renew))
            *(t->releases ? &t->renew_after : &t->renew_before) += 1;
        freeReplyObject(r);
        if (end)
            return;
    }
}

/* Asserts that on every server the held renewal ran, then the release, and
   no renewal after it. */
static void check_renewal_ran_before_release(redisContext **mon, size_t n, int release_script)
{
    for (size_t i = 0; i < n; i++) {
        char marker[64];
        snprintf(marker, sizeof marker, "renewal-order-end-%zu", i);
        redisReply *r = rs_cmd(&srv[i], "ECHO %s", marker);
        CHECK(r);
        freeReplyObject(r);
        monitor_tally t = {0};
        monitor_scan(mon[i], marker, release_script, &t);
        CHECKF(t.renew_before == 1 && t.releases >= 1 && t.renew_after == 0,
               "server %zu: %d renewals before the release, %d releases, %d renewals after the release", i + 1,
               t.renew_before, t.releases, t.renew_after);
    }
}

/* The shared set-up: n servers with every script loaded, each behind a proxy
   that holds back the first renewal for `hold_ms`, and their monitors. */
static redmutex_client *renewal_setup(size_t n, rs_proxy **px, redisContext **mon, int64_t timeout_ms, int64_t lease_ms,
                                      int hold_ms)
{
    const char *urls[MAXN];
    for (size_t i = 0; i < n; i++) {
        rs_start(&srv[i], NULL);
        for (int id = 0; id < RM_SCRIPT_COUNT; id++) {
            redisReply *r = rs_cmd(&srv[i], "SCRIPT LOAD %s", rm_script_text(id));
            CHECK(r && r->type == REDIS_REPLY_STRING && strcmp(r->str, rm_script_sha(id)) == 0);
            freeReplyObject(r);
        }
        px[i] = rs_proxy_start(&srv[i], rm_script_sha(RM_SCRIPT_RENEW), hold_ms);
        atomic_store(&px[i]->hold_until, 1); /* the first renewal only */
        mon[i] = monitor_open(&srv[i]);
        urls[i] = px[i]->url;
    }
    return client_for(urls, n, timeout_ms, lease_ms);
}

static void renewal_teardown(redmutex_client *c, size_t n, rs_proxy **px, redisContext **mon)
{
    redmutex_client_close(c);
    redmutex_client_free(c);
    for (size_t i = 0; i < n; i++) {
        redisFree(mon[i]);
        rs_proxy_stop(px[i]);
    }
    stop_all(n);
}

/* Waits until the first renewal is held back on every server, and checks
   that none of them has passed yet. */
static void wait_renewal_in_flight(size_t n, rs_proxy **px, int64_t lease_ms)
{
    for (size_t i = 0; i < n; i++)
        WAIT_FOR(atomic_load(&px[i]->delayed) == 1, lease_ms);
    for (size_t i = 0; i < n; i++)
        CHECKF(atomic_load(&px[i]->forwarded) == 0, "server %zu: the renewal was no longer in flight", i + 1);
}

/* The release returned: it ran behind the renewal on every server that
   answered it; then every held-back renewal has reached its server. */
static void check_release_followed_renewal(size_t n, rs_proxy **px)
{
    size_t behind = 0;
    for (size_t i = 0; i < n; i++)
        behind += atomic_load(&px[i]->forwarded) == 1;
    CHECKF(behind * 2 > n, "the release returned before the renewal reached a majority (%zu of %zu)", behind, n);
    for (size_t i = 0; i < n; i++)
        WAIT_FOR(atomic_load(&px[i]->forwarded) == 1, 2000);
}

static void unanswered_renewal_then_release(size_t n)
{
    /* T = 400 ms: the renewal (due 600 ms after the acquisition) is
       abandoned 400 ms after it went out, then the release goes, and waits
       up to T for its reply; the renewal lands at 600 ms, in between. */
    const int64_t timeout = rt_scaled_ms(400), lease = rt_scaled_ms(2000);
    rs_proxy *px[MAXN];
    redisContext *mon[MAXN];
    redmutex_client *c = renewal_setup(n, px, mon, timeout, lease, (int)rt_scaled_ms(600));
    redmutex_lock *l = lock_for(c, "renew:order", REDMUTEX_KIND_LOCK, 0, NULL, NULL);
    CHECK_OK(redmutex_lock_acquire(l, NULL, 0));
    wait_renewal_in_flight(n, px, 2000);
    CHECK_OK(redmutex_lock_release(l, NULL));
    check_release_followed_renewal(n, px);
    /* Nothing is left, and nothing comes back for longer than a lease. */
    int64_t until = rt_now_ms() + lease + rt_scaled_ms(200);
    while (rt_now_ms() < until) {
        for (size_t i = 0; i < n; i++)
            CHECKF(!rs_exists(&srv[i], "renew:order"), "server %zu has the released lock", i + 1);
        rt_sleep_ms(20);
    }
    check_renewal_ran_before_release(mon, n, RM_SCRIPT_LOCK_RELEASE);
    redmutex_lock_free(l);
    renewal_teardown(c, n, px, mon);
}

static void test_unanswered_renewal_never_runs_after_the_release(void) { unanswered_renewal_then_release(1); }
static void test_unanswered_renewal_never_runs_after_the_release_redlock(void) { unanswered_renewal_then_release(3); }

/*
 * The same, and then the same owner takes the reentrant lock again at once
 * through another handle, with an explicit lease E shorter than the
 * watchdog's. The renewal of the first hold, had it run after the release,
 * would find the owner's field again and stretch the new hold to the
 * watchdog lease: the key must be gone when E is over.
 */
static void unanswered_renewal_then_next_hold(size_t n)
{
    const int64_t timeout = rt_scaled_ms(400), lease = rt_scaled_ms(2000), explicit_lease = rt_scaled_ms(500);
    rs_proxy *px[MAXN];
    redisContext *mon[MAXN];
    redmutex_client *c = renewal_setup(n, px, mon, timeout, lease, (int)rt_scaled_ms(600));
    redmutex_lock *l = lock_for(c, "renew:next", REDMUTEX_KIND_RLOCK, 0, NULL, NULL);
    redmutex_lock *next = lock_for(c, "renew:next", REDMUTEX_KIND_RLOCK, explicit_lease, NULL, NULL);
    CHECK_OK(redmutex_lock_acquire(l, "owner-1", 0));
    wait_renewal_in_flight(n, px, 2000);
    CHECK_OK(redmutex_lock_release(l, "owner-1"));
    CHECK_OK(redmutex_lock_acquire(next, "owner-1", 0));
    check_release_followed_renewal(n, px);
    for (size_t i = 0; i < n; i++)
        WAIT_FOR(!rs_exists(&srv[i], "renew:next"), 500 + 300);
    check_renewal_ran_before_release(mon, n, RM_SCRIPT_RLOCK_RELEASE);
    redmutex_state st;
    CHECK_OK(redmutex_lock_state(&st, next, "owner-1"));
    CHECK(st == REDMUTEX_STATE_LOST);
    redmutex_lock_free(next);
    redmutex_lock_free(l);
    renewal_teardown(c, n, px, mon);
}

static void test_unanswered_renewal_never_stretches_the_next_hold(void) { unanswered_renewal_then_next_hold(1); }
static void test_unanswered_renewal_never_stretches_the_next_hold_redlock(void)
{
    unanswered_renewal_then_next_hold(3);
}

/* ---- straggler stress (point 1, 11) ---------------------------------------- */

typedef struct stress_shared {
    const char **urls;
    _Atomic int stop;
    _Atomic long holder[2]; /* per name: who holds it now (0: nobody) */
    _Atomic long overlaps, holds, errors;
} stress_shared;

typedef struct stress_arg {
    stress_shared *sh;
    redmutex_client *c;
    int id;
} stress_arg;

static const char *stress_names[2] = {"stress:plain", "stress:reentrant"};

static void *stress_worker(void *p)
{
    stress_arg *a = p;
    stress_shared *sh = a->sh;
    redmutex_lock *locks[2] = {lock_for(a->c, stress_names[0], REDMUTEX_KIND_LOCK, 0, NULL, NULL),
                               lock_for(a->c, stress_names[1], REDMUTEX_KIND_RLOCK, 0, NULL, NULL)};
    char owner[32];
    snprintf(owner, sizeof owner, "stress-owner-%d", a->id); /* reused: the dangerous case */
    for (long round = 0; !atomic_load(&sh->stop); round++) {
        int k = (int)(round % 2);
        int rc = redmutex_lock_acquire(locks[k], owner, 3000);
        if (rc != 0) {
            if (rc != REDMUTEX_ETIMEDOUT && atomic_fetch_add(&sh->errors, 1) < 5)
                fprintf(stderr, "    acquire: %s\n", redmutex_last_error());
            if (rc == REDMUTEX_ELOST) /* an earlier hold was lost: released first, as the API asks */
                redmutex_lock_release(locks[k], owner);
            continue;
        }
        long expected = 0;
        if (!atomic_compare_exchange_strong(&sh->holder[k], &expected, a->id))
            atomic_fetch_add(&sh->overlaps, 1);
        atomic_fetch_add(&sh->holds, 1);
        usleep(200);
        expected = a->id;
        atomic_compare_exchange_strong(&sh->holder[k], &expected, 0);
        rc = redmutex_lock_release(locks[k], owner);
        if (rc != 0 && atomic_fetch_add(&sh->errors, 1) < 5)
            fprintf(stderr, "    release: %s\n", redmutex_last_error());
    }
    redmutex_lock_free(locks[0]);
    redmutex_lock_free(locks[1]);
    return NULL;
}

/*
 * A busy script that spins a counted loop: how long it runs does not depend
 * on TIME advancing inside a script (Valkey freezes TIME there until the
 * busy threshold, so a loop that waits for TIME to move runs that long).
 */
#define BUSY_SCRIPT "local x = 0 for i = 1, tonumber(ARGV[1]) do x = x + 1 end return x"

/* Runs BUSY_SCRIPT for n iterations on ctx; how long it took in microseconds, -1 on error. */
static int64_t busy_run(redisContext *ctx, long long n)
{
    int64_t t0 = rt_now_us();
    redisReply *r = redisCommand(ctx, "EVAL %s 0 %lld", BUSY_SCRIPT, n);
    bool ok = r && r->type == REDIS_REPLY_INTEGER;
    if (r)
        freeReplyObject(r);
    return ok ? rt_now_us() - t0 : -1;
}

/* Iterations of BUSY_SCRIPT per millisecond on server s (the fastest of
   three runs of at least 50 ms: a loaded machine only makes a stall longer). */
static double busy_rate(rs_server *s)
{
    redisContext *ctx = redisConnect("127.0.0.1", s->port);
    CHECK(ctx && !ctx->err);
    long long n = 100000;
    int64_t us = busy_run(ctx, n);
    while (us >= 0 && us < 50000 && n < 4000000000LL) {
        n *= 4;
        us = busy_run(ctx, n);
    }
    double best = 0;
    for (int k = 0; k < 3 && us > 0; k++, us = busy_run(ctx, n))
        if ((double)n * 1000 / (double)us > best)
            best = (double)n * 1000 / (double)us;
    redisFree(ctx);
    CHECKF(best > 0, "the busy script failed on %s", s->url);
    return best;
}

typedef struct straggler {
    rs_server *s;
    long long iters; /* one busy script */
    int pause_ms;    /* between two scripts */
    int max_scripts; /* 0: until stopped */
    _Atomic int stop;
    _Atomic int scripts; /* busy scripts that ended */
} straggler;

/* A busy script, a pause, again: the server answers everyone late. */
static void *straggle(void *p)
{
    straggler *st = p;
    redisContext *ctx = redisConnect("127.0.0.1", st->s->port);
    while (ctx && !ctx->err && !atomic_load(&st->stop) &&
           (st->max_scripts == 0 || atomic_load(&st->scripts) < st->max_scripts)) {
        if (busy_run(ctx, st->iters) < 0)
            break;
        atomic_fetch_add(&st->scripts, 1);
        rt_sleep_ms(st->pause_ms);
    }
    if (ctx)
        redisFree(ctx);
    return NULL;
}

enum { STRESS_CLIENTS = 3, STRESS_THREADS = 2 };

typedef struct stress_run {
    stress_shared sh;
    redmutex_client *clients[STRESS_CLIENTS];
    stress_arg args[STRESS_CLIENTS * STRESS_THREADS];
    pthread_t threads[STRESS_CLIENTS * STRESS_THREADS];
} stress_run;

/* 3 clients x 2 threads taking and releasing the two names on three servers. */
static void stress_start(stress_run *r, const char **urls)
{
    memset(&r->sh, 0, sizeof r->sh);
    r->sh.urls = urls;
    for (int c = 0; c < STRESS_CLIENTS; c++)
        r->clients[c] = client_for(urls, 3, 1000, 2000);
    for (int t = 0; t < STRESS_CLIENTS * STRESS_THREADS; t++) {
        r->args[t] = (stress_arg){&r->sh, r->clients[t / STRESS_THREADS], t + 1};
        pthread_create(&r->threads[t], NULL, stress_worker, &r->args[t]);
    }
}

static void stress_stop(stress_run *r)
{
    atomic_store(&r->sh.stop, 1);
    for (int t = 0; t < STRESS_CLIENTS * STRESS_THREADS; t++)
        pthread_join(r->threads[t], NULL);
}

/* Commands s has run (INFO stats), or -1. */
static long long commands_run(rs_server *s)
{
    redisReply *r = rs_cmd(s, "INFO stats");
    const char *at = r && r->type == REDIS_REPLY_STRING ? strstr(r->str, "total_commands_processed:") : NULL;
    long long n = at ? strtoll(at + strlen("total_commands_processed:"), NULL, 10) : -1;
    if (r)
        freeReplyObject(r);
    return n;
}

/* Waits until s has run everything it was sent: no command but our own
   INFO for 200 ms (a server that stalled may owe a long backlog). */
static void wait_until_quiet(rs_server *s)
{
    int64_t deadline = rt_now_ms() + rt_scaled_ms(20000);
    long long last = commands_run(s);
    int64_t quiet_since = rt_now_ms();
    while (rt_now_ms() - quiet_since < 200) {
        CHECKF(rt_now_ms() < deadline, "%s never stopped running commands", s->url);
        rt_sleep_ms(20);
        long long now = commands_run(s);
        if (now != last + 1)
            quiet_since = rt_now_ms();
        last = now;
    }
}

/* Closes the clients, then checks that every server is left without a lock
   key once it has run what it was sent: one still there was left by a
   request that ran out of order. (Checked at once: a key of a 2 s lease
   left in order would be gone, one left out of order outlives the check.)
   The servers first run their backlog (a server that was stopped owes
   seconds of requests): a release queued behind it is sent by the close,
   which gives up after shutdown_timeout_ms (500 ms here) and leaves such a
   lock to expire, as documented; that is not what this checks. */
static void stress_close_and_check_keys(stress_run *r)
{
    for (int i = 0; i < 3; i++)
        wait_until_quiet(&srv[i]);
    for (int c = 0; c < STRESS_CLIENTS; c++) {
        redmutex_client_close(r->clients[c]);
        redmutex_client_free(r->clients[c]);
    }
    for (int i = 0; i < 3; i++) {
        wait_until_quiet(&srv[i]);
        for (int k = 0; k < 2; k++) {
            if (!rs_exists(&srv[i], stress_names[k]))
                continue;
            redisReply *ttl = rs_cmd(&srv[i], "PTTL %s", stress_names[k]);
            CHECKF(false, "server %d kept %s (PTTL %lld ms)", i, stress_names[k],
                   ttl && ttl->type == REDIS_REPLY_INTEGER ? (long long)ttl->integer : -3LL);
        }
    }
}

static void test_straggler_stress_keeps_exclusion_and_leaves_no_keys(void)
{
    for (int i = 0; i < 3; i++)
        rs_start(&srv[i], NULL);
    const char *urls[3] = {srv[0].url, srv[1].url, srv[2].url};
    /* A 3 ms busy script every 5 ms. */
    straggler st = {&srv[2], (long long)(busy_rate(&srv[2]) * 3), 2, 0, 0, 0};
    pthread_t strag;
    pthread_create(&strag, NULL, straggle, &st);
    stress_run run;
    stress_start(&run, urls);
    const char *secs = getenv("REDMUTEX_STRESS_SECONDS");
    rt_sleep_ms((secs ? atoi(secs) : 30) * 1000);
    stress_stop(&run);
    atomic_store(&st.stop, 1);
    pthread_join(strag, NULL);
    stress_shared *sh = &run.sh;
    fprintf(stderr, "    %ld holds, %ld overlaps, %ld errors, %d busy scripts\n", (long)sh->holds, (long)sh->overlaps,
            (long)sh->errors, (int)st.scripts);
    CHECKF(sh->overlaps == 0, "%ld overlapping holds", (long)sh->overlaps);
    CHECK(sh->holds > 100);
    /* Every call ended well: a count one too high on some server (a release
       that ran out of order) shows up as a false ELOST here. */
    CHECKF(sh->errors == 0, "%ld errors", (long)sh->errors);
    stress_close_and_check_keys(&run);
    stop_all(3);
}

/* Holds per second over [t0, t1] given the counts then. */
static double per_second(long holds0, int64_t t0, long holds1, int64_t t1)
{
    return (double)(holds1 - holds0) * 1000 / (double)(t1 - t0 > 0 ? t1 - t0 : 1);
}

/*
 * The most common way a server misbehaves: it stalls for seconds (a long
 * script, a fork on a big dataset, swapping) and recovers. With one of three
 * servers running a 5 s script, answering everything queued, and running it
 * again 2 ms later, the lock must behave as with that server gone for good:
 * the stalled server costs its votes and nothing more. No call fails while
 * two of three answer, and the throughput is about that of the same run with
 * the server hung for good (stopped), measured right after; that one in turn
 * is within a small factor of the run with all three answering, measured
 * first (Redlock needs both remaining servers then).
 */
static void test_stalling_minority_costs_only_its_votes(void)
{
    for (int i = 0; i < 3; i++)
        rs_start(&srv[i], i == 2 ? "busy-reply-threshold 60000\n" : NULL); /* stalls are silent, no BUSY */
    const char *urls[3] = {srv[0].url, srv[1].url, srv[2].url};
    straggler st = {&srv[2], (long long)(busy_rate(&srv[2]) * 5000), 2, 2, 0, 0};
    stress_run run;
    stress_start(&run, urls);
    rt_sleep_ms(500); /* connected */
    int64_t t[4];
    long holds[4], errors[4];
    t[0] = rt_now_ms(), holds[0] = atomic_load(&run.sh.holds), errors[0] = atomic_load(&run.sh.errors);
    rt_sleep_ms(2000);
    /* Stalling: two 5 s stalls, the answers after each, and a second more. */
    t[1] = rt_now_ms(), holds[1] = atomic_load(&run.sh.holds), errors[1] = atomic_load(&run.sh.errors);
    pthread_t strag;
    pthread_create(&strag, NULL, straggle, &st);
    pthread_join(strag, NULL);
    rt_sleep_ms(1000);
    t[2] = rt_now_ms(), holds[2] = atomic_load(&run.sh.holds), errors[2] = atomic_load(&run.sh.errors);
    /* Hung for good: stopped (it owes replies to requests made meanwhile). */
    rs_pause(&srv[2]);
    rt_sleep_ms(4000);
    t[3] = rt_now_ms(), holds[3] = atomic_load(&run.sh.holds), errors[3] = atomic_load(&run.sh.errors);
    rs_resume(&srv[2]);
    stress_stop(&run);
    double healthy = per_second(holds[0], t[0], holds[1], t[1]), stalling = per_second(holds[1], t[1], holds[2], t[2]);
    double hung = per_second(holds[2], t[2], holds[3], t[3]);
    fprintf(stderr,
            "    all answer: %.0f holds/s; %d stalls of one: %.0f/s, %ld errors; it hung for good: %.0f/s, %ld errors; "
            "%ld overlaps\n",
            healthy, (int)st.scripts, stalling, errors[2] - errors[1], hung, errors[3] - errors[2],
            (long)run.sh.overlaps);
    CHECKF(run.sh.overlaps == 0, "%ld overlapping holds", (long)run.sh.overlaps);
    CHECKF(errors[2] - errors[1] == 0, "%ld errors while one of three servers stalled", errors[2] - errors[1]);
    CHECKF(run.sh.errors == 0, "%ld errors", (long)run.sh.errors);
    CHECKF(hung * 4 >= healthy, "%.0f holds/s with one of three servers hung, %.0f/s with all answering", hung,
           healthy);
    CHECKF(stalling * 3 >= hung, "%.0f holds/s while a server stalled, %.0f/s with it hung for good", stalling, hung);
    stress_close_and_check_keys(&run);
    stop_all(3);
}

/* ---- nested levels and extends while a minority stalls (review 22, F3) ---- */

typedef struct nest_shared {
    const char **urls;
    _Atomic int stop;
    _Atomic long holder, overlaps, holds, timeouts, errors;
} nest_shared;

typedef struct nest_arg {
    nest_shared *sh;
    int id;
} nest_arg;

/* One client per thread, as separate processes would have: a reentrant
   lock, then a nested level through a second handle (400 ms lease, no
   wait) or an extend to 2.5 s, then the release. */
static void *nest_worker(void *p)
{
    nest_arg *a = p;
    nest_shared *sh = a->sh;
    redmutex_client *c = client_for(sh->urls, 3, 1000, 3000);
    redmutex_lock *l = lock_for(c, "nest:stall", REDMUTEX_KIND_RLOCK, 0, NULL, NULL);
    redmutex_lock *inner = lock_for(c, "nest:stall", REDMUTEX_KIND_RLOCK, 400, NULL, NULL);
    char owner[32];
    snprintf(owner, sizeof owner, "nest-owner-%d", a->id);
    for (long round = a->id; !atomic_load(&sh->stop); round++) {
        int rc = redmutex_lock_acquire(l, owner, 3000);
        if (rc != 0) {
            if (rc == REDMUTEX_ETIMEDOUT)
                atomic_fetch_add(&sh->timeouts, 1);
            else if (atomic_fetch_add(&sh->errors, 1) < 5)
                fprintf(stderr, "    acquire: %s\n", redmutex_last_error());
            if (rc == REDMUTEX_ELOST)
                redmutex_lock_release(l, owner);
            continue;
        }
        long expected = 0;
        if (!atomic_compare_exchange_strong(&sh->holder, &expected, a->id))
            atomic_fetch_add(&sh->overlaps, 1);
        atomic_fetch_add(&sh->holds, 1);
        if (round % 2 == 0) {
            rc = redmutex_lock_acquire(inner, owner, 0);
            if (rc == 0)
                rc = redmutex_lock_release(inner, owner);
        } else {
            rc = redmutex_lock_extend(l, owner, 2500, REDMUTEX_EXTEND_REPLACE);
        }
        if (rc != 0 && atomic_fetch_add(&sh->errors, 1) < 5)
            fprintf(stderr, "    %s: %s\n", round % 2 ? "extend" : "nested level", redmutex_last_error());
        usleep(300);
        expected = a->id;
        atomic_compare_exchange_strong(&sh->holder, &expected, 0);
        rc = redmutex_lock_release(l, owner);
        if (rc != 0 && atomic_fetch_add(&sh->errors, 1) < 5)
            fprintf(stderr, "    release: %s\n", redmutex_last_error());
    }
    redmutex_lock_free(inner);
    redmutex_lock_free(l);
    redmutex_client_close(c);
    redmutex_client_free(c);
    return NULL;
}

enum { NEST_THREADS = 6 };

/* DEBUG SLEEP 5, a 2 ms pause, again, until stopped: the server stalls for
   5 s at a time and answers its backlog in between. */
static void *sleep_straggle(void *p)
{
    straggler *st = p;
    redisContext *ctx = redisConnect("127.0.0.1", st->s->port);
    while (ctx && !ctx->err && !atomic_load(&st->stop)) {
        redisReply *r = redisCommand(ctx, "DEBUG SLEEP 5");
        if (!r)
            break;
        freeReplyObject(r);
        rt_sleep_ms(st->pause_ms);
    }
    if (ctx)
        redisFree(ctx);
    return NULL;
}

/*
 * Six clients take a reentrant lock with nested levels and extends on three
 * servers while the third runs DEBUG SLEEP 5 again and again, from before
 * the clients' first request (it answers its backlog for a moment between
 * stalls). It had never answered them, so it was never judged to stall:
 * renewals and extends waited a command timeout for it, the holder's
 * release waited behind the renewal, and split attempts kept their grant
 * on one server meanwhile: about one hold a second, most waits timed out.
 * It must do about as well as with that server stopped for good.
 */
static void test_nested_levels_and_extends_ride_out_a_stalling_minority(void)
{
    for (int i = 0; i < 3; i++)
        rs_start(&srv[i], i == 2 ? "enable-debug-command yes\n" : NULL);
    const char *urls[3] = {srv[0].url, srv[1].url, srv[2].url};
    straggler st = {&srv[2], 0, 2, 0, 0, 0};
    nest_shared sh;
    memset(&sh, 0, sizeof sh);
    sh.urls = urls;
    nest_arg args[NEST_THREADS];
    pthread_t threads[NEST_THREADS], strag;
    pthread_create(&strag, NULL, sleep_straggle, &st);
    rt_sleep_ms(100); /* the first stall is under way: clients meet the server stalling */
    for (int t = 0; t < NEST_THREADS; t++) {
        args[t] = (nest_arg){&sh, t + 1};
        pthread_create(&threads[t], NULL, nest_worker, &args[t]);
    }
    rt_sleep_ms(1000);
    int64_t t0 = rt_now_ms();
    long h0 = atomic_load(&sh.holds), to0 = atomic_load(&sh.timeouts);
    rt_sleep_ms(10000);
    int64_t t1 = rt_now_ms();
    long h1 = atomic_load(&sh.holds), to1 = atomic_load(&sh.timeouts);
    atomic_store(&st.stop, 1);
    pthread_join(strag, NULL);
    rs_pause(&srv[2]); /* hung for good, for comparison */
    rt_sleep_ms(3000);
    int64_t t2 = rt_now_ms();
    long h2 = atomic_load(&sh.holds), to2 = atomic_load(&sh.timeouts);
    rt_sleep_ms(3000);
    int64_t t3 = rt_now_ms();
    long h3 = atomic_load(&sh.holds), to3 = atomic_load(&sh.timeouts);
    rs_resume(&srv[2]);
    atomic_store(&sh.stop, 1);
    for (int t = 0; t < NEST_THREADS; t++)
        pthread_join(threads[t], NULL);
    double stalling = per_second(h0, t0, h1, t1), hung = per_second(h2, t2, h3, t3);
    fprintf(stderr,
            "    stalling again and again: %.0f holds/s, %ld timeouts; hung for good: %.0f/s, %ld timeouts; "
            "%ld errors, %ld overlaps\n",
            stalling, to1 - to0, hung, to3 - to2, (long)sh.errors, (long)sh.overlaps);
    CHECKF(sh.overlaps == 0, "%ld overlapping holds", (long)sh.overlaps);
    /* Throughput is asserted in the plain build only: under the sanitizers and valgrind this case
       has been seen both ways (about 55 holds/s, and about 1/s in some runs on a loaded machine,
       docs/safety.md row 33), which those builds cannot tell from their own slowness. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    bool measure = false;
#else
    bool measure = rt_time_scale() == 1;
#endif
    if (!measure) {
        stop_all(3);
        return;
    }
    /* Generous: each client still pays one command timeout per stall before
       it sees it (before: about 1 hold/s against hundreds with it hung). */
    CHECKF(stalling * 10 >= hung, "%.0f holds/s while a server stalled again and again, %.0f/s with it hung", stalling,
           hung);
    CHECKF((to1 - to0) * 20 <= h1 - h0, "%ld waits of 3 s timed out while a server stalled, %ld holds", to1 - to0,
           h1 - h0);
    stop_all(3);
}

/* An extend that one server refuses (the hold is gone there) while another
   stalls says so: "1 of 3 servers failed, need 2 answers" alone read as if
   two answers had been enough. */
static void test_failed_extend_says_which_servers_refused_and_which_failed(void)
{
    for (int i = 0; i < 3; i++)
        rs_start(&srv[i], NULL);
    const char *urls[3] = {srv[0].url, srv[1].url, srv[2].url};
    redmutex_client *c = client_for(urls, 3, 300, 5000);
    redmutex_lock *l = lock_for(c, "extend:msg", REDMUTEX_KIND_RLOCK, 5000, NULL, NULL);
    CHECK_OK(redmutex_lock_acquire(l, "owner-1", 0));
    redisReply *r = rs_cmd(&srv[1], "DEL extend:msg");
    if (r)
        freeReplyObject(r);
    rs_pause(&srv[2]);
    int rc = redmutex_lock_extend(l, "owner-1", 2500, REDMUTEX_EXTEND_REPLACE);
    CHECKF(rc != 0, "extend succeeded with one server refusing and one hung");
    CHECKF(strstr(redmutex_last_error(), "1 refused and 1 agreed, need 2 to agree") != NULL, "message: %s",
           redmutex_last_error());
    fprintf(stderr, "    %s\n", redmutex_last_error());
    rs_resume(&srv[2]);
    redmutex_lock_release(l, "owner-1");
    redmutex_lock_free(l);
    redmutex_client_close(c);
    redmutex_client_free(c);
    stop_all(3);
}

/* ---- Redlock with a minority down (point 2) ------------------------------ */

typedef struct release_later_arg {
    redmutex_lock *l;
    int64_t after_ms;
} release_later_arg;

static void *release_later(void *p)
{
    release_later_arg *a = p;
    rt_sleep_ms(a->after_ms);
    CHECK_OK(redmutex_lock_release(a->l, NULL));
    return NULL;
}

static void minority_down_waiter(size_t n)
{
    const char *urls[MAXN];
    char dead[64];
    snprintf(dead, sizeof dead, "redis://127.0.0.1:%d", rt_free_port());
    for (size_t i = 0; i < n; i++) {
        if (i == 0) {
            urls[i] = dead;
            continue;
        }
        rs_start(&srv[i], NULL);
        urls[i] = srv[i].url;
    }
    redmutex_client *holder_c = client_for(urls, n, 300, 5000);
    redmutex_client *waiter_c = client_for(urls, n, 300, 5000);
    redmutex_lock *h = lock_for(holder_c, "minority", REDMUTEX_KIND_LOCK, 5000, NULL, NULL);
    redmutex_lock *w = lock_for(waiter_c, "minority", REDMUTEX_KIND_LOCK, 5000, NULL, NULL);
    CHECK_OK(redmutex_lock_acquire(h, NULL, 0));
    release_later_arg ra = {h, 400};
    pthread_t t;
    pthread_create(&t, NULL, release_later, &ra);
    int64_t t0 = rt_now_ms();
    CHECK_OK(redmutex_lock_acquire(w, NULL, 5000)); /* waits for the holder instead of failing */
    int64_t took = rt_now_ms() - t0;
    pthread_join(t, NULL);
    CHECKF(took >= 350 && took < rt_scaled_ms(2000), "the waiter got the lock after %lld ms", (long long)took);
    CHECK_OK(redmutex_lock_release(w, NULL));
    redmutex_lock_free(h);
    redmutex_lock_free(w);
    redmutex_client_close(holder_c);
    redmutex_client_free(holder_c);
    redmutex_client_close(waiter_c);
    redmutex_client_free(waiter_c);
    for (size_t i = 1; i < n; i++)
        rs_stop(&srv[i]);
}

static void test_waiter_keeps_waiting_with_one_of_three_down(void) { minority_down_waiter(3); }
static void test_waiter_keeps_waiting_with_one_of_five_down(void) { minority_down_waiter(5); }

typedef struct resume_later_arg {
    size_t n;
    int64_t after_ms;
} resume_later_arg;

static void *resume_later(void *p)
{
    resume_later_arg *a = p;
    rt_sleep_ms(a->after_ms);
    for (size_t i = 0; i < a->n; i++)
        rs_resume(&srv[i]);
    return NULL;
}

/*
 * A wait is for the lock, whatever stands in the way: an acquire that may
 * wait rides out servers that stall (they answered before, they answer
 * nothing now) with its usual pauses, instead of ending at its first
 * command timeout with ECONN, which a caller could only try again at once.
 * Without a wait a stalled majority is ECONN within one command timeout; a
 * wait that ends during the stall is ETIMEDOUT within wait + T.
 */
static void waiting_through_a_stall(size_t n, size_t stalled)
{
    const char *urls[3];
    for (size_t i = 0; i < n; i++) {
        rs_start(&srv[i], NULL);
        urls[i] = srv[i].url;
    }
    redmutex_client *c = client_for(urls, n, 300, 5000); /* T = 300 ms */
    redmutex_lock *l = lock_for(c, "ride-out", REDMUTEX_KIND_LOCK, 5000, NULL, NULL);
    CHECK_OK(redmutex_lock_acquire(l, NULL, 0)); /* every server has answered this client */
    CHECK_OK(redmutex_lock_release(l, NULL));
    for (size_t i = 0; i < stalled; i++)
        rs_pause(&srv[i]);
    /* First the wait meets the stall (its first attempt's timeout shows it). */
    int64_t t0 = rt_now_ms();
    CHECK_RC(redmutex_lock_acquire(l, NULL, 800), REDMUTEX_ETIMEDOUT);
    int64_t took = rt_now_ms() - t0;
    CHECKF(took >= 800 && took <= 800 + 300 + rt_scaled_ms(150), "a wait of 800 ms: %lld ms", (long long)took);
    CHECKF(strstr(redmutex_last_error(), "slow or down") != NULL, "message: %s", redmutex_last_error());
    t0 = rt_now_ms();
    CHECK_RC(redmutex_lock_acquire(l, NULL, 0), REDMUTEX_ECONN);
    took = rt_now_ms() - t0;
    CHECKF(took <= 300 + rt_scaled_ms(150), "without a wait: %lld ms", (long long)took);
    resume_later_arg ra = {stalled, 1500};
    pthread_t t;
    pthread_create(&t, NULL, resume_later, &ra);
    t0 = rt_now_ms();
    CHECK_OK(redmutex_lock_acquire(l, NULL, rt_scaled_ms(10000)));
    took = rt_now_ms() - t0;
    pthread_join(t, NULL);
    CHECKF(took >= 1400, "acquired after %lld ms, before the servers answered again", (long long)took);
    CHECK_OK(redmutex_lock_release(l, NULL));
    redmutex_lock_free(l);
    redmutex_client_close(c);
    redmutex_client_free(c);
    stop_all(n);
}

static void test_waiting_acquire_rides_out_a_stall(void) { waiting_through_a_stall(1, 1); }
static void test_waiting_acquire_rides_out_a_stall_redlock(void) { waiting_through_a_stall(3, 2); }

static void test_majority_down_counts_only_real_failures(void)
{
    const char *urls[5];
    char dead[3][64];
    for (int i = 0; i < 3; i++) {
        snprintf(dead[i], sizeof dead[i], "redis://127.0.0.1:%d", rt_free_port());
        urls[i] = dead[i];
    }
    for (int i = 3; i < 5; i++) {
        rs_start(&srv[i], NULL);
        urls[i] = srv[i].url;
    }
    redmutex_client *c = client_for(urls, 5, 300, 5000);
    redmutex_lock *l = lock_for(c, "majority-down", REDMUTEX_KIND_LOCK, 5000, NULL, NULL);
    CHECK_RC(redmutex_lock_acquire(l, NULL, 500), REDMUTEX_ECONN);
    CHECKF(strstr(redmutex_last_error(), "3 of 5 servers failed") != NULL, "message: %s", redmutex_last_error());
    for (int i = 3; i < 5; i++)
        CHECK(!rs_exists(&srv[i], "majority-down"));
    redmutex_lock_free(l);
    redmutex_client_close(c);
    redmutex_client_free(c);
    for (int i = 3; i < 5; i++)
        rs_stop(&srv[i]);
}

/* ---- lost locks are never silent (points 3, 4, 5) ------------------------- */

typedef struct lost_log {
    _Atomic int lost, failing;
    _Atomic int64_t lost_at_ms;
} lost_log;

static void log_lost(redmutex_lock *l, const char *owner, redmutex_state st, void *p)
{
    (void)l;
    (void)owner;
    lost_log *log = p;
    if (st == REDMUTEX_STATE_LOST) {
        atomic_store(&log->lost_at_ms, rt_now_ms());
        atomic_fetch_add(&log->lost, 1);
    } else if (st == REDMUTEX_STATE_RENEWAL_FAILING) {
        atomic_fetch_add(&log->failing, 1);
    }
}

static void test_nested_acquire_never_recreates_a_lost_rlock(void)
{
    rs_start(&srv[0], NULL);
    const char *url = srv[0].url;
    redmutex_client *c = client_for(&url, 1, 1000, 30000);
    lost_log log = {0};
    redmutex_lock *l = lock_for(c, "nested", REDMUTEX_KIND_RLOCK, 0, log_lost, &log);
    CHECK_OK(redmutex_lock_acquire(l, NULL, 0));
    CHECK(rs_int(&srv[0], "DEL nested") == 1); /* force release, eviction, failover... */
    CHECK_RC(redmutex_lock_acquire(l, NULL, 0), REDMUTEX_ELOST);
    CHECK(!rs_exists(&srv[0], "nested"));
    redmutex_state st;
    CHECK_OK(redmutex_lock_state(&st, l, NULL));
    CHECK(st == REDMUTEX_STATE_LOST);
    WAIT_FOR(atomic_load(&log.lost) == 1, 2000);
    CHECK_RC(redmutex_lock_release(l, NULL), REDMUTEX_ELOST); /* the outer block learns it too */
    CHECK(!rs_exists(&srv[0], "nested"));
    CHECK_OK(redmutex_lock_acquire(l, NULL, 0)); /* and then it is free to take again */
    CHECK_OK(redmutex_lock_release(l, NULL));
    redmutex_lock_free(l);
    redmutex_client_close(c);
    redmutex_client_free(c);
    rs_stop(&srv[0]);
}

static void test_lost_is_reported_at_validity_end_with_the_server_stopped(void)
{
    rs_start(&srv[0], NULL);
    const char *url = srv[0].url;
    redmutex_client *c = client_for(&url, 1, 1000, 1000); /* command timeout = lease */
    lost_log log = {0};
    redmutex_lock *l = lock_for(c, "lost-timing", REDMUTEX_KIND_LOCK, 0, log_lost, &log);
    CHECK_OK(redmutex_lock_acquire(l, NULL, 0));
    int64_t validity;
    CHECK_OK(redmutex_lock_validity(&validity, l, NULL));
    int64_t end = rt_now_ms() + validity; /* at most this; renewals cannot move it now */
    rs_pause(&srv[0]);
    WAIT_FOR(atomic_load(&log.lost) == 1, 3000);
    int64_t late = atomic_load(&log.lost_at_ms) - end;
    rs_resume(&srv[0]);
    CHECKF(late <= rt_scaled_ms(100), "LOST came %lld ms after validity ended", (long long)late);
    redmutex_lock_free(l);
    redmutex_client_close(c);
    redmutex_client_free(c);
    rs_stop(&srv[0]);
}

static void test_restart_without_persistence_is_lost_at_the_first_request(void)
{
    rs_start(&srv[0], "save \"\"\nappendonly no\n");
    const char *url = srv[0].url;
    redmutex_client *c = client_for(&url, 1, 1000, 30000);
    lost_log log = {0};
    redmutex_lock *l = lock_for(c, "restarted", REDMUTEX_KIND_RLOCK, 30000, log_lost, &log);
    redmutex_lock *probe = lock_for(c, "something-else", REDMUTEX_KIND_LOCK, 0, NULL, NULL);
    CHECK_OK(redmutex_lock_acquire(l, NULL, 0));
    rs_restart(&srv[0]); /* kill -9, back empty */
    int locked = -1;
    /* The first request to reach the new server (any lock) tells the holder. */
    for (int i = 0; i < 100 && redmutex_lock_is_locked(&locked, probe) != 0; i++)
        rt_sleep_ms(20);
    redmutex_state st;
    CHECK_OK(redmutex_lock_state(&st, l, NULL));
    CHECK(st == REDMUTEX_STATE_LOST);
    WAIT_FOR(atomic_load(&log.lost) == 1, 2000);
    redmutex_lock_free(probe);
    redmutex_lock_free(l);
    redmutex_client_close(c);
    redmutex_client_free(c);
    rs_stop(&srv[0]);
}

/* Nobody asks for the state: the first request to reach the restarted server
   is enough for every hold it granted to be reported lost (on_lost, from the
   watchdog thread), long before any renewal is due. */
static void test_restart_without_persistence_reports_every_hold_lost_unasked(void)
{
    rs_start(&srv[0], "save \"\"\nappendonly no\n");
    const char *url = srv[0].url;
    redmutex_client *c = client_for(&url, 1, 1000, 30000);
    lost_log log[3] = {{0}};
    redmutex_lock *l[3] = {
        lock_for(c, "unasked-rlock", REDMUTEX_KIND_RLOCK, 30000, log_lost, &log[0]),
        lock_for(c, "unasked-plain", REDMUTEX_KIND_LOCK, 0, log_lost, &log[1]), /* renewed */
        lock_for(c, "unasked-fair", REDMUTEX_KIND_FAIR, 30000, log_lost, &log[2]),
    };
    redmutex_lock *probe = lock_for(c, "unasked-probe", REDMUTEX_KIND_LOCK, 0, NULL, NULL);
    for (int k = 0; k < 3; k++)
        CHECK_OK(redmutex_lock_acquire(l[k], NULL, 0));
    rs_restart(&srv[0]); /* kill -9, back empty */
    int locked = -1;
    for (int i = 0; i < 100 && redmutex_lock_is_locked(&locked, probe) != 0; i++)
        rt_sleep_ms(20);
    for (int k = 0; k < 3; k++)
        WAIT_FOR(atomic_load(&log[k].lost) == 1, 2000);
    redmutex_lock_free(probe);
    for (int k = 0; k < 3; k++)
        redmutex_lock_free(l[k]);
    redmutex_client_close(c);
    redmutex_client_free(c);
    rs_stop(&srv[0]);
}

/* A lost-lock callback that takes its time (the user's), and says when it started. */
typedef struct slow_callback {
    _Atomic int running, may_return;
} slow_callback;

static void slow_on_lost(redmutex_lock *l, const char *owner, redmutex_state st, void *p)
{
    (void)l;
    (void)owner;
    slow_callback *s = p;
    if (st != REDMUTEX_STATE_LOST)
        return;
    atomic_store(&s->running, 1);
    for (int i = 0; i < 2000 && !atomic_load(&s->may_return); i++)
        rt_sleep_ms(5);
}

/* The restart is recorded while the watchdog thread runs another lock's
   callback (the client mutex released): it must still be acted on when the
   callback returns, not at the next renewal (10 s here). */
static void test_restart_during_a_callback_is_reported_when_it_returns(void)
{
    rs_start(&srv[0], "save \"\"\nappendonly no\n");
    const char *url = srv[0].url;
    redmutex_client *c = client_for(&url, 1, 1000, 30000);
    slow_callback slow = {0};
    lost_log log = {0};
    redmutex_lock *a = lock_for(c, "cb-restart-a", REDMUTEX_KIND_LOCK, 300, slow_on_lost, &slow); /* runs out */
    redmutex_lock *b = lock_for(c, "cb-restart-b", REDMUTEX_KIND_LOCK, 0, log_lost, &log);        /* renewed */
    redmutex_lock *probe = lock_for(c, "cb-restart-probe", REDMUTEX_KIND_LOCK, 0, NULL, NULL);
    CHECK_OK(redmutex_lock_acquire(b, NULL, 0));
    CHECK_OK(redmutex_lock_acquire(a, NULL, 0));
    WAIT_FOR(atomic_load(&slow.running) == 1, 3000);
    rs_restart(&srv[0]); /* kill -9, back empty */
    int locked = -1;
    for (int i = 0; i < 100 && redmutex_lock_is_locked(&locked, probe) != 0; i++)
        rt_sleep_ms(20);
    atomic_store(&slow.may_return, 1);
    WAIT_FOR(atomic_load(&log.lost) == 1, 2000);
    redmutex_lock_free(probe);
    redmutex_lock_free(a);
    redmutex_lock_free(b);
    redmutex_client_close(c);
    redmutex_client_free(c);
    rs_stop(&srv[0]);
}

static void test_failed_release_still_reports_the_end_of_validity(void)
{
    rs_start(&srv[0], NULL);
    const char *url = srv[0].url;
    redmutex_client *c = client_for(&url, 1, 200, 30000);
    lost_log log = {0};
    redmutex_lock *l = lock_for(c, "release-econn", REDMUTEX_KIND_LOCK, 800, log_lost, &log);
    CHECK_OK(redmutex_lock_acquire(l, NULL, 0));
    rs_pause(&srv[0]);
    CHECK_RC(redmutex_lock_release(l, NULL), REDMUTEX_ECONN);
    WAIT_FOR(atomic_load(&log.lost) == 1, 1500);
    rs_resume(&srv[0]);
    redmutex_lock_free(l);
    redmutex_client_close(c);
    redmutex_client_free(c);
    rs_stop(&srv[0]);
}

/* ---- an error means nothing changed (points 6, 7, 8) --------------------- */

static void test_fenced_acquire_checks_the_counter_first(void)
{
    rs_start(&srv[0], NULL);
    const char *url = srv[0].url;
    redmutex_client *c = client_for(&url, 1, 1000, 30000);
    const redmutex_kind kinds[2] = {REDMUTEX_KIND_LOCK, REDMUTEX_KIND_RLOCK};
    const char *bad[3] = {"9223372036854775807", "not-a-number", "hash"};
    for (int k = 0; k < 2; k++)
        for (int b = 0; b < 3; b++) {
            rs_int(&srv[0], "DEL redisson_lock_token:{fenced}");
            if (strcmp(bad[b], "hash") == 0)
                rs_int(&srv[0], "HSET redisson_lock_token:{fenced} a 1");
            else
                rs_int(&srv[0], "SET redisson_lock_token:{fenced} %s", bad[b]);
            redmutex_lock_options lo = REDMUTEX_LOCK_OPTIONS_INIT;
            lo.flags = REDMUTEX_LOCK_FENCING;
            lo.lease_ms = 5000;
            redmutex_lock *l;
            CHECK_OK(redmutex_lock_new(&l, c, "fenced", kinds[k], &lo));
            int rc = redmutex_lock_acquire(l, NULL, 0);
            CHECKF(rc == (b == 2 ? REDMUTEX_EWRONGTYPE : REDMUTEX_ESERVER), "kind %d counter %s: %d (%s)", k, bad[b],
                   rc, redmutex_last_error());
            CHECKF(!rs_exists(&srv[0], "fenced"), "kind %d counter %s: the lock was taken", k, bad[b]);
            redmutex_lock_free(l);
        }
    /* A nested acquisition too: the counter went bad while the owner held
       the lock; the reentrant kinds refuse it before adding a level. */
    const redmutex_kind nesting[4] = {REDMUTEX_KIND_RLOCK, REDMUTEX_KIND_FAIR, REDMUTEX_KIND_READ, REDMUTEX_KIND_WRITE};
    for (int k = 0; k < 4; k++) {
        rs_int(&srv[0], "DEL redisson_lock_token:{fenced}");
        redmutex_lock_options lo = REDMUTEX_LOCK_OPTIONS_INIT;
        lo.flags = REDMUTEX_LOCK_FENCING;
        lo.lease_ms = 5000;
        redmutex_lock *l;
        CHECK_OK(redmutex_lock_new(&l, c, "fenced", nesting[k], &lo));
        CHECK_OK(redmutex_lock_acquire(l, "owner-1", 0));
        rs_int(&srv[0], "SET redisson_lock_token:{fenced} not-a-number");
        int rc = redmutex_lock_acquire(l, "owner-1", 0);
        CHECKF(rc == REDMUTEX_ESERVER, "nested, kind %d: %d (%s)", nesting[k], rc, redmutex_last_error());
        const char *field = nesting[k] == REDMUTEX_KIND_WRITE ? "owner-1:write" : "owner-1";
        CHECKF(rs_num(&srv[0], "HGET fenced %s", field) == 1, "nested, kind %d: a level was added (%lld)", nesting[k],
               rs_num(&srv[0], "HGET fenced %s", field));
        CHECK_OK(redmutex_lock_release(l, "owner-1"));
        CHECK(!rs_exists(&srv[0], "fenced"));
        redmutex_lock_free(l);
    }
    redmutex_client_close(c);
    redmutex_client_free(c);
    rs_stop(&srv[0]);
}

static void test_release_refused_by_the_acl_changes_nothing(void)
{
    rs_start(&srv[0], NULL);
    redisReply *r = rs_cmd(&srv[0], "ACL SETUSER nopub on >pw ~* resetchannels +@all");
    CHECK(r && r->type == REDIS_REPLY_STATUS);
    freeReplyObject(r);
    char url[160];
    snprintf(url, sizeof url, "redis://nopub:pw@127.0.0.1:%d", srv[0].port);
    const char *u = url;
    redmutex_client *c = client_for(&u, 1, 1000, 30000);
    const redmutex_kind kinds[2] = {REDMUTEX_KIND_LOCK, REDMUTEX_KIND_RLOCK};
    for (int k = 0; k < 2; k++) {
        redmutex_lock *l = lock_for(c, "acl-release", kinds[k], 5000, NULL, NULL);
        CHECK_OK(redmutex_lock_acquire(l, NULL, 0));
        for (int attempt = 0; attempt < 2; attempt++) {
            CHECK_RC(redmutex_lock_release(l, NULL), REDMUTEX_EAUTH);
            CHECK(rs_exists(&srv[0], "acl-release"));
            redmutex_state st;
            CHECK_OK(redmutex_lock_state(&st, l, NULL));
            CHECK(st == REDMUTEX_STATE_HELD);
        }
        int deleted = 0;
        CHECK_RC(redmutex_lock_force_release(&deleted, l), REDMUTEX_EAUTH);
        CHECK(rs_exists(&srv[0], "acl-release"));
        CHECK(rs_int(&srv[0], "DEL acl-release") == 1);
        redmutex_lock_free(l);
    }
    redmutex_client_close(c);
    redmutex_client_free(c);
    rs_stop(&srv[0]);
}

static void test_failed_auth_or_select_runs_no_lock_command(void)
{
    rs_start(&srv[0], NULL);
    char url[160];
    const int want[2] = {REDMUTEX_EAUTH, REDMUTEX_ESERVER};
    for (int b = 0; b < 2; b++) {
        if (b == 0)
            snprintf(url, sizeof url, "redis://:wrong@127.0.0.1:%d", srv[0].port);
        else
            snprintf(url, sizeof url, "redis://127.0.0.1:%d/16", srv[0].port);
        const char *u = url;
        redmutex_client *c = client_for(&u, 1, 1000, 30000);
        const redmutex_kind kinds[2] = {REDMUTEX_KIND_LOCK, REDMUTEX_KIND_RLOCK};
        for (int k = 0; k < 2; k++) {
            redmutex_lock *l = lock_for(c, "handshake-first", kinds[k], 5000, NULL, NULL);
            CHECK_RC(redmutex_lock_acquire(l, NULL, 0), want[b]);
            CHECKF(!rs_exists(&srv[0], "handshake-first"), "url %s kind %d: the lock was taken", url, k);
            redmutex_lock_free(l);
        }
        redmutex_client_close(c);
        redmutex_client_free(c);
    }
    rs_stop(&srv[0]);
}

/* ---- threads (point 10) ---------------------------------------------------- */

typedef struct shared_handle {
    redmutex_lock *l;
    _Atomic int stop;
    _Atomic long lost, ok;
} shared_handle;

static void *shared_handle_worker(void *p)
{
    shared_handle *sh = p;
    while (!atomic_load(&sh->stop)) {
        int rc = redmutex_lock_acquire(sh->l, NULL, 2000);
        if (rc == REDMUTEX_ELOST)
            atomic_fetch_add(&sh->lost, 1);
        if (rc != 0)
            continue;
        atomic_fetch_add(&sh->ok, 1);
        if (redmutex_lock_release(sh->l, NULL) == REDMUTEX_ELOST)
            atomic_fetch_add(&sh->lost, 1);
    }
    return NULL;
}

static void test_plain_handle_shared_by_threads_never_sees_a_false_loss(void)
{
    rs_start(&srv[0], NULL);
    const char *url = srv[0].url;
    redmutex_client *c = client_for(&url, 1, 1000, 30000);
    shared_handle sh = {lock_for(c, "shared-handle", REDMUTEX_KIND_LOCK, 0, NULL, NULL), 0, 0, 0};
    pthread_t t[3];
    for (int i = 0; i < 3; i++)
        pthread_create(&t[i], NULL, shared_handle_worker, &sh);
    rt_sleep_ms(2000);
    atomic_store(&sh.stop, 1);
    for (int i = 0; i < 3; i++)
        pthread_join(t[i], NULL);
    CHECKF(sh.lost == 0, "%ld false losses in %ld acquisitions", (long)sh.lost, (long)sh.ok);
    CHECK(sh.ok > 50);
    redmutex_lock_free(sh.l);
    redmutex_client_close(c);
    redmutex_client_free(c);
    rs_stop(&srv[0]);
}

/* ---- bounds (point 15) ------------------------------------------------------ */

/* A listening socket nobody accepts on: connect succeeds, nothing answers. */
static int blackhole(int *port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    CHECK(bind(fd, (struct sockaddr *)&sa, sizeof sa) == 0);
    CHECK(listen(fd, 16) == 0);
    socklen_t len = sizeof sa;
    getsockname(fd, (struct sockaddr *)&sa, &len);
    *port = ntohs(sa.sin_port);
    return fd;
}

static void test_acquire_against_a_silent_server_is_bounded(void)
{
    int port;
    int fd = blackhole(&port);
    char url[64];
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", port);
    const char *u = url;
    redmutex_client_options o = REDMUTEX_CLIENT_OPTIONS_INIT;
    o.connect_timeout_ms = 400;
    o.command_timeout_ms = 300;
    redmutex_client *c;
    CHECK_OK(redmutex_client_new(&c, &u, 1, &o));
    redmutex_lock *l = lock_for(c, "silent", REDMUTEX_KIND_LOCK, 5000, NULL, NULL);
    for (int64_t wait = 0; wait <= 500; wait += 500) {
        int64_t t0 = rt_now_ms();
        CHECK_RC(redmutex_lock_acquire(l, NULL, wait), REDMUTEX_ECONN);
        int64_t took = rt_now_ms() - t0;
        /* header: wait_ms + max(connect_timeout_ms, command_timeout_ms) */
        CHECKF(took <= wait + 400 + rt_scaled_ms(150), "wait %lld took %lld ms", (long long)wait, (long long)took);
    }
    redmutex_lock_free(l);
    redmutex_client_close(c);
    redmutex_client_free(c);
    close(fd);
}

static void test_nonblocking_redlock_with_three_of_five_stopped_is_bounded(void)
{
    const char *urls[5];
    for (int i = 0; i < 5; i++) {
        rs_start(&srv[i], NULL);
        urls[i] = srv[i].url;
    }
    redmutex_client *c = client_for(urls, 5, 300, 5000); /* connects to all five now */
    redmutex_lock *l = lock_for(c, "bounded", REDMUTEX_KIND_LOCK, 5000, NULL, NULL);
    for (int i = 0; i < 3; i++)
        rs_pause(&srv[i]);
    int64_t t0 = rt_now_ms();
    CHECK_RC(redmutex_lock_acquire(l, NULL, 0), REDMUTEX_ECONN);
    int64_t took = rt_now_ms() - t0;
    CHECKF(took <= 300 + rt_scaled_ms(150), "took %lld ms with a 300 ms command timeout", (long long)took);
    for (int i = 0; i < 3; i++)
        rs_resume(&srv[i]);
    rt_sleep_ms(300); /* the late acquisitions and their cleanup land */
    for (int i = 0; i < 5; i++)
        CHECKF(!rs_exists(&srv[i], "bounded"), "server %d kept the key", i);
    redmutex_lock_free(l);
    redmutex_client_close(c);
    redmutex_client_free(c);
    stop_all(5);
}

/*
 * Release's worst case (header): T = max(connect, command timeout) for its
 * own request, after a renewal of the same hold that is in flight: 2 x T.
 * Two of three servers stop while a watchdog hold renews every 100 ms, and
 * releases are called at several points of the renewal cycle.
 */
static void test_release_with_a_majority_stopped_is_bounded(void)
{
    const char *urls[3];
    for (int i = 0; i < 3; i++) {
        rs_start(&srv[i], NULL);
        urls[i] = srv[i].url;
    }
    redmutex_client *c = client_for(urls, 3, 300, 300); /* T = 300 ms; renewals every 100 ms */
    redmutex_lock *l = lock_for(c, "release-bound", REDMUTEX_KIND_LOCK, 0, NULL, NULL);
    for (int round = 0; round < 4; round++) {
        CHECK_OK(redmutex_lock_acquire(l, NULL, 0));
        rs_pause(&srv[0]);
        rs_pause(&srv[1]);
        rt_sleep_ms(30 * round); /* a different point of the renewal cycle each round */
        int64_t t0 = rt_now_ms();
        int rc = redmutex_lock_release(l, NULL);
        int64_t took = rt_now_ms() - t0;
        CHECKF(rc == REDMUTEX_ECONN || rc == REDMUTEX_ELOST, "round %d: release returned %d: %s", round, rc,
               rc ? redmutex_last_error() : "success");
        CHECKF(took <= 2 * 300 + rt_scaled_ms(150), "round %d: release took %lld ms with T = 300 ms", round,
               (long long)took);
        rs_resume(&srv[0]);
        rs_resume(&srv[1]);
        /* The hold stays for a retry after ECONN (then done), or was lost. */
        int again = redmutex_lock_release(l, NULL);
        CHECKF(again == 0 || again == REDMUTEX_ELOST || again == REDMUTEX_ENOTOWNER, "retry: %s",
               redmutex_last_error());
        for (int i = 0; i < 3; i++)
            WAIT_FOR(!rs_exists(&srv[i], "release-bound"), 2000);
    }
    redmutex_lock_free(l);
    redmutex_client_close(c);
    redmutex_client_free(c);
    stop_all(3);
}

/* ---- smaller points (14, 16) ------------------------------------------------ */

static void test_extend_never_passes_the_longest_ttl(void)
{
    rs_start(&srv[0], NULL);
    const char *url = srv[0].url;
    redmutex_client *c = client_for(&url, 1, 1000, 30000);
    redmutex_lock *l = lock_for(c, "long-extend", REDMUTEX_KIND_LOCK, 60000, NULL, NULL);
    CHECK_OK(redmutex_lock_acquire(l, NULL, 0));
    CHECK_OK(redmutex_lock_extend(l, NULL, REDMUTEX_TIME_MAX_MS, REDMUTEX_EXTEND_ADD));
    CHECK(rs_int(&srv[0], "PTTL long-extend") <= REDMUTEX_TIME_MAX_MS);
    CHECK(rs_int(&srv[0], "PTTL long-extend") > REDMUTEX_TIME_MAX_MS - 10000);
    CHECK_OK(redmutex_lock_release(l, NULL));
    redmutex_lock_free(l);
    redmutex_client_close(c);
    redmutex_client_free(c);
    rs_stop(&srv[0]);
}

/* Makes getrandom(2) fail with ENOSYS in this (child) process. */
static void forbid_getrandom(void)
{
    struct sock_filter filter[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_getrandom, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ENOSYS),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = {sizeof filter / sizeof filter[0], filter};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0)
        _exit(3);
}

static void test_no_randomness_fails_closed(void)
{
    rs_start(&srv[0], NULL);
    const char *url = srv[0].url;
    redmutex_client *c = client_for(&url, 1, 1000, 30000);
    redmutex_lock *l = lock_for(c, "no-random", REDMUTEX_KIND_LOCK, 5000, NULL, NULL);
    pid_t pid = fork();
    if (pid == 0) {
        forbid_getrandom();
        redmutex_client *c2;
        if (redmutex_client_new(&c2, &url, 1, NULL) != REDMUTEX_ESYSTEM)
            _exit(4);
        if (redmutex_lock_acquire(l, NULL, 0) != REDMUTEX_ESYSTEM)
            _exit(5);
        /* The child's copies, freed so that valgrind's leak check of the child passes. */
        redmutex_lock_free(l);
        redmutex_client_close(c);
        redmutex_client_free(c);
        _exit(0);
    }
    int status;
    CHECK(waitpid(pid, &status, 0) == pid);
    CHECKF(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status %d", status);
    CHECK(!rs_exists(&srv[0], "no-random"));
    redmutex_lock_free(l);
    redmutex_client_close(c);
    redmutex_client_free(c);
    rs_stop(&srv[0]);
}

static void test_passwords_never_appear_in_url_errors(void)
{
    const char *bad[] = {"redis://:S3cret",   "redis://S3cret:",      "redis://u:S3cret@",
                         "redis://:S3cret/x", "rediz://:S3cret@host", "redis://host:S3cret"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        redmutex_client *c = NULL;
        int rc = redmutex_client_new(&c, &bad[i], 1, NULL);
        CHECKF(rc != 0, "%zu accepted", i);
        CHECKF(strstr(redmutex_last_error(), "S3cret") == NULL, "message shows the password: %s",
               redmutex_last_error());
    }
}

int main(int argc, char **argv)
{
    static const rt_test tests[] = {
        {"late_release_never_deletes_the_next_hold", test_late_release_never_deletes_the_next_hold},
        {"late_acquire_leaves_no_orphan_key", test_late_acquire_leaves_no_orphan_key},
        {"release_behind_a_busy_order_is_queued_not_dropped", test_release_behind_a_busy_order_is_queued_not_dropped},
        {"late_release_on_a_lost_connection_changes_nothing", test_late_release_on_a_lost_connection_changes_nothing},
        {"failed_nested_acquire_never_takes_the_outer_level", test_failed_nested_acquire_never_takes_the_outer_level},
        {"unanswered_renewal_never_runs_after_the_release", test_unanswered_renewal_never_runs_after_the_release},
        {"unanswered_renewal_never_runs_after_the_release_redlock",
         test_unanswered_renewal_never_runs_after_the_release_redlock},
        {"unanswered_renewal_never_stretches_the_next_hold", test_unanswered_renewal_never_stretches_the_next_hold},
        {"unanswered_renewal_never_stretches_the_next_hold_redlock",
         test_unanswered_renewal_never_stretches_the_next_hold_redlock},
        {"waiter_keeps_waiting_with_one_of_three_down", test_waiter_keeps_waiting_with_one_of_three_down},
        {"waiter_keeps_waiting_with_one_of_five_down", test_waiter_keeps_waiting_with_one_of_five_down},
        {"majority_down_counts_only_real_failures", test_majority_down_counts_only_real_failures},
        {"waiting_acquire_rides_out_a_stall", test_waiting_acquire_rides_out_a_stall},
        {"waiting_acquire_rides_out_a_stall_redlock", test_waiting_acquire_rides_out_a_stall_redlock},
        {"nested_acquire_never_recreates_a_lost_rlock", test_nested_acquire_never_recreates_a_lost_rlock},
        {"lost_is_reported_at_validity_end_with_the_server_stopped",
         test_lost_is_reported_at_validity_end_with_the_server_stopped},
        {"restart_without_persistence_is_lost_at_the_first_request",
         test_restart_without_persistence_is_lost_at_the_first_request},
        {"restart_without_persistence_reports_every_hold_lost_unasked",
         test_restart_without_persistence_reports_every_hold_lost_unasked},
        {"restart_during_a_callback_is_reported_when_it_returns",
         test_restart_during_a_callback_is_reported_when_it_returns},
        {"failed_release_still_reports_the_end_of_validity", test_failed_release_still_reports_the_end_of_validity},
        {"fenced_acquire_checks_the_counter_first", test_fenced_acquire_checks_the_counter_first},
        {"release_refused_by_the_acl_changes_nothing", test_release_refused_by_the_acl_changes_nothing},
        {"failed_auth_or_select_runs_no_lock_command", test_failed_auth_or_select_runs_no_lock_command},
        {"plain_handle_shared_by_threads_never_sees_a_false_loss",
         test_plain_handle_shared_by_threads_never_sees_a_false_loss},
        {"acquire_against_a_silent_server_is_bounded", test_acquire_against_a_silent_server_is_bounded},
        {"nonblocking_redlock_with_three_of_five_stopped_is_bounded",
         test_nonblocking_redlock_with_three_of_five_stopped_is_bounded},
        {"release_with_a_majority_stopped_is_bounded", test_release_with_a_majority_stopped_is_bounded},
        {"extend_never_passes_the_longest_ttl", test_extend_never_passes_the_longest_ttl},
        {"no_randomness_fails_closed", test_no_randomness_fails_closed},
        {"passwords_never_appear_in_url_errors", test_passwords_never_appear_in_url_errors},
        {"straggler_stress_keeps_exclusion_and_leaves_no_keys",
         test_straggler_stress_keeps_exclusion_and_leaves_no_keys},
        {"stalling_minority_costs_only_its_votes", test_stalling_minority_costs_only_its_votes},
        {"failed_extend_says_which_servers_refused_and_which_failed",
         test_failed_extend_says_which_servers_refused_and_which_failed},
        {"nested_levels_and_extends_ride_out_a_stalling_minority",
         test_nested_levels_and_extends_ride_out_a_stalling_minority},
    };
    /* Throughputs compared over seconds: run with nothing beside them (harness.h). */
    static const char *const alone[] = {"straggler_stress_keeps_exclusion_and_leaves_no_keys",
                                        "stalling_minority_costs_only_its_votes",
                                        "nested_levels_and_extends_ride_out_a_stalling_minority", NULL};
    return rt_run_marked(tests, sizeof tests / sizeof tests[0], alone, argc, argv);
}
