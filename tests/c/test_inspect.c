/*
 * redmutex_lock_inspect: what the servers hold under a name, whatever its
 * kind, in one round trip, against real redis-servers.
 */
#define _GNU_SOURCE
#include "cluster.h"
#include "harness.h"
#include "scripts.h"

#include <pthread.h>
#include <string.h>

static rs_server srv;

static redmutex_lock *new_lock(redmutex_client *c, const char *name, redmutex_kind kind, uint32_t flags)
{
    redmutex_lock_options o = REDMUTEX_LOCK_OPTIONS_INIT;
    o.flags = flags;
    o.lease_ms = 20000;
    redmutex_lock *l = NULL;
    CHECK_OK(redmutex_lock_new(&l, c, name, kind, &o));
    return l;
}

/* Closes (joining the client's threads, so nothing runs on past the test) and frees a client. */
static void done(redmutex_client *c)
{
    redmutex_client_close(c);
    redmutex_client_free(c);
}

/* Inspects name through a handle of kind `as` (any kind reads any lock). */
static redmutex_lock_info inspect(redmutex_client *c, const char *name, redmutex_kind as)
{
    redmutex_lock *l = new_lock(c, name, as, 0);
    redmutex_lock_info info = REDMUTEX_LOCK_INFO_INIT;
    CHECK_OK(redmutex_lock_inspect(&info, l));
    redmutex_lock_free(l);
    return info;
}

static void test_a_free_name_is_reported_free(void)
{
    rs_start(&srv, NULL);
    redmutex_client *c = rt_client(&srv, 0);
    redmutex_lock_info info = inspect(c, "nothing", REDMUTEX_KIND_RLOCK);
    CHECK(info.version == REDMUTEX_LOCK_INFO_VERSION);
    CHECK(info.held == 0 && info.kind == -1 && info.ttl_ms == -2 && info.owner[0] == '\0');
    CHECK(info.hold_count == 0 && info.fence == -1 && info.queue_length == 0 && info.readers == 0);
    CHECK(info.servers_answered == 1);
    done(c);
}

static void test_plain_and_reentrant_locks_show_owner_count_ttl_and_fence(void)
{
    rs_start(&srv, NULL);
    redmutex_client *c = rt_client(&srv, 0);
    redmutex_lock *plain = new_lock(c, "p", REDMUTEX_KIND_LOCK, REDMUTEX_LOCK_FENCING);
    CHECK_OK(redmutex_lock_acquire(plain, NULL, 0));
    redmutex_lock_info info = inspect(c, "p", REDMUTEX_KIND_RLOCK);
    redisReply *token = rs_cmd(&srv, "GET p");
    CHECK(info.held == 1 && info.kind == REDMUTEX_KIND_LOCK && info.hold_count == 1);
    CHECKF(strlen(info.owner) == 8 && strncmp(info.owner, token->str, 8) == 0, "only the start of the token: %s",
           info.owner);
    freeReplyObject(token);
    CHECK(info.ttl_ms > 15000 && info.ttl_ms <= 20000);
    CHECK(info.fence == rs_num(&srv, "GET redisson_lock_token:{p}") && info.fence >= 1);
    CHECK_OK(redmutex_lock_release(plain, NULL));
    redmutex_lock_free(plain);

    redmutex_lock *re = new_lock(c, "r", REDMUTEX_KIND_RLOCK, 0);
    CHECK_OK(redmutex_lock_acquire(re, NULL, 0));
    CHECK_OK(redmutex_lock_acquire(re, NULL, 0));
    char me[128];
    CHECK_OK(redmutex_client_thread_owner(me, sizeof me, c));
    info = inspect(c, "r", REDMUTEX_KIND_LOCK);
    CHECK(info.held == 1 && info.kind == REDMUTEX_KIND_RLOCK && info.hold_count == 2);
    CHECKF(strcmp(info.owner, me) == 0, "owner %s, expected %s", info.owner, me);
    CHECK(info.fence == -1);
    CHECK_OK(redmutex_lock_release(re, NULL));
    CHECK_OK(redmutex_lock_release(re, NULL));
    redmutex_lock_free(re);
    /* A redis-py lock without a TTL. */
    rs_int(&srv, "SET nottl some-redis-py-token");
    info = inspect(c, "nottl", REDMUTEX_KIND_LOCK);
    CHECK(info.held == 1 && info.ttl_ms == -1 && strcmp(info.owner, "some-red") == 0);
    done(c);
}

typedef struct waiter {
    redmutex_lock *l;
    int64_t wait_ms; /* worked out on the main thread: the harness's time scale is read once, there */
    int rc;
} waiter;

static void *wait_for_it(void *p)
{
    waiter *w = p;
    w->rc = redmutex_lock_acquire(w->l, NULL, w->wait_ms);
    if (w->rc == 0)
        redmutex_lock_release(w->l, NULL);
    return NULL;
}

static void test_a_fair_lock_shows_its_queue(void)
{
    rs_start(&srv, NULL);
    redmutex_client *c = rt_client(&srv, 0);
    redmutex_lock *holder = new_lock(c, "f", REDMUTEX_KIND_FAIR, 0);
    CHECK_OK(redmutex_lock_acquire(holder, NULL, 0));
    /* Nobody waits: a fair lock's hash is a reentrant lock's; the handle's kind tells them apart. */
    CHECK(inspect(c, "f", REDMUTEX_KIND_RLOCK).kind == REDMUTEX_KIND_RLOCK);
    CHECK(inspect(c, "f", REDMUTEX_KIND_FAIR).kind == REDMUTEX_KIND_FAIR);
    redmutex_client *other = rt_client(&srv, 0);
    waiter w = {new_lock(other, "f", REDMUTEX_KIND_FAIR, 0), rt_scaled_ms(20000), -99};
    pthread_t t;
    pthread_create(&t, NULL, wait_for_it, &w);
    WAIT_FOR(rs_int(&srv, "LLEN redisson_lock_queue:{f}") == 1, 10000);
    redmutex_lock_info info = inspect(c, "f", REDMUTEX_KIND_LOCK);
    CHECK(info.held == 1 && info.kind == REDMUTEX_KIND_FAIR && info.queue_length == 1 && info.hold_count == 1);
    CHECK_OK(redmutex_lock_release(holder, NULL));
    pthread_join(t, NULL);
    CHECK_OK(w.rc);
    redmutex_lock_free(w.l);
    redmutex_lock_free(holder);
    done(other);
    done(c);
}

static void test_a_read_write_lock_shows_its_mode_writer_and_readers(void)
{
    rs_start(&srv, NULL);
    redmutex_client *a = rt_client(&srv, 0), *b = rt_client(&srv, 0);
    redmutex_lock *ra = new_lock(a, "rw", REDMUTEX_KIND_READ, 0), *rb = new_lock(b, "rw", REDMUTEX_KIND_READ, 0);
    CHECK_OK(redmutex_lock_acquire(ra, NULL, 0));
    CHECK_OK(redmutex_lock_acquire(rb, NULL, 0));
    CHECK_OK(redmutex_lock_acquire(rb, NULL, 0));
    char owner_a[128], owner_b[128];
    CHECK_OK(redmutex_client_thread_owner(owner_a, sizeof owner_a, a));
    CHECK_OK(redmutex_client_thread_owner(owner_b, sizeof owner_b, b));
    const char *first = strcmp(owner_a, owner_b) < 0 ? owner_a : owner_b;
    redmutex_lock_info info = inspect(a, "rw", REDMUTEX_KIND_RLOCK);
    CHECK(info.held == 1 && info.kind == REDMUTEX_KIND_READ && info.readers == 2);
    CHECKF(strcmp(info.owner, first) == 0 && info.hold_count == (first == owner_a ? 1 : 2), "owner %s x%lld",
           info.owner, (long long)info.hold_count);
    CHECK(strcmp(info.owner, "mode") != 0);
    CHECK_OK(redmutex_lock_release(ra, NULL));
    CHECK_OK(redmutex_lock_release(rb, NULL));
    CHECK_OK(redmutex_lock_release(rb, NULL));

    redmutex_lock *wa = new_lock(a, "rw", REDMUTEX_KIND_WRITE, 0);
    CHECK_OK(redmutex_lock_acquire(wa, NULL, 0));
    CHECK_OK(redmutex_lock_acquire(ra, NULL, 0)); /* the writer also reads */
    info = inspect(b, "rw", REDMUTEX_KIND_LOCK);
    char writer[160];
    snprintf(writer, sizeof writer, "%s:write", owner_a);
    CHECK(info.held == 1 && info.kind == REDMUTEX_KIND_WRITE && info.readers == 1 && info.hold_count == 1);
    CHECKF(strcmp(info.owner, writer) == 0, "owner %s", info.owner);
    CHECK_OK(redmutex_lock_release(ra, NULL));
    CHECK_OK(redmutex_lock_release(wa, NULL));
    redmutex_lock_free(wa);
    redmutex_lock_free(ra);
    redmutex_lock_free(rb);
    done(a);
    done(b);
}

static void test_bad_arguments_and_keys_that_are_no_lock_are_refused(void)
{
    rs_start(&srv, NULL);
    redmutex_client *c = rt_client(&srv, 0);
    redmutex_lock *l = new_lock(c, "list", REDMUTEX_KIND_LOCK, 0);
    redmutex_lock_info info = REDMUTEX_LOCK_INFO_INIT;
    CHECK_RC(redmutex_lock_inspect(NULL, l), REDMUTEX_EINVAL);
    CHECK_RC(redmutex_lock_inspect(&info, NULL), REDMUTEX_EINVAL);
    info.version = 0;
    CHECK_RC(redmutex_lock_inspect(&info, l), REDMUTEX_EINVAL);
    info.version = REDMUTEX_LOCK_INFO_VERSION + 1;
    CHECK_RC(redmutex_lock_inspect(&info, l), REDMUTEX_EINVAL);
    CHECK(strstr(redmutex_last_error(), "REDMUTEX_LOCK_INFO_VERSION"));
    rs_int(&srv, "RPUSH list x");
    info.version = REDMUTEX_LOCK_INFO_VERSION;
    info.held = 42;
    CHECK_RC(redmutex_lock_inspect(&info, l), REDMUTEX_EWRONGTYPE);
    CHECK(info.held == 42); /* untouched on failure */
    CHECK(strstr(redmutex_last_error(), "list"));
    CHECK(rs_int(&srv, "LLEN list") == 1);
    redmutex_lock_free(l);
    done(c);
}

static void test_redlock_answers_with_a_majority(void)
{
    static rs_server s[3]; /* the harness stops them after the test returns */
    for (int i = 0; i < 3; i++)
        rs_start(&s[i], NULL);
    const char *urls[3] = {s[0].url, s[1].url, s[2].url};
    redmutex_client *c = NULL;
    CHECK_OK(redmutex_client_new(&c, urls, 3, NULL));
    redmutex_lock *l = new_lock(c, "rl", REDMUTEX_KIND_LOCK, REDMUTEX_LOCK_FENCING);
    CHECK_OK(redmutex_lock_acquire(l, NULL, 0));
    rs_stop(&s[2]);
    redmutex_lock_info info = REDMUTEX_LOCK_INFO_INIT;
    CHECK_OK(redmutex_lock_inspect(&info, l));
    CHECK(info.held == 1 && info.kind == REDMUTEX_KIND_LOCK && info.servers_answered == 2);
    CHECK(strlen(info.owner) == 8 && info.fence >= 1 && info.ttl_ms > 0);
    rs_stop(&s[1]);
    CHECK_RC(redmutex_lock_inspect(&info, l), REDMUTEX_ECONN);
    redmutex_lock_free(l);
    done(c);
}

/* The four older queries are answers of the one inspect script: no other script reaches the server. */
static void test_every_query_runs_the_one_inspect_script(void)
{
    rs_start(&srv, NULL);
    redmutex_client *c = rt_client(&srv, 0);
    static const redmutex_kind kinds[] = {REDMUTEX_KIND_LOCK, REDMUTEX_KIND_RLOCK, REDMUTEX_KIND_FAIR,
                                          REDMUTEX_KIND_READ, REDMUTEX_KIND_WRITE};
    static const char *names[] = {"q:lock", "q:rlock", "q:fair", "q:read", "q:write"};
    redmutex_lock *l[5];
    for (int k = 0; k < 5; k++) {
        l[k] = new_lock(c, names[k], kinds[k], 0);
        CHECK_OK(redmutex_lock_acquire(l[k], NULL, 0));
    }
    freeReplyObject(rs_cmd(&srv, "SCRIPT FLUSH"));
    for (int k = 0; k < 5; k++) {
        int locked = -1, owned = -1;
        int64_t ttl = -9, count = -9;
        CHECK_OK(redmutex_lock_is_locked(&locked, l[k]));
        CHECK_OK(redmutex_lock_is_owned(&owned, l[k], NULL));
        CHECK_OK(redmutex_lock_ttl(&ttl, l[k]));
        CHECK_OK(redmutex_lock_hold_count(&count, l[k], NULL));
        CHECKF(locked == 1 && owned == 1 && ttl > 0 && ttl <= 20000 && count == 1, "%s: %d %d %lld %lld", names[k],
               locked, owned, (long long)ttl, (long long)count);
    }
    redisReply *r = rs_cmd(&srv, "SCRIPT EXISTS %s %s %s", rm_script_sha(RM_SCRIPT_LOCK_INFO),
                           rm_script_sha(RM_SCRIPT_INSPECT), rm_script_sha(RM_SCRIPT_RW_INSPECT));
    CHECK(r && r->type == REDIS_REPLY_ARRAY && r->elements == 3);
    CHECKF(r->element[0]->integer == 1 && r->element[1]->integer == 0 && r->element[2]->integer == 0,
           "scripts run by the queries: info %lld, inspect %lld, rw inspect %lld", r->element[0]->integer,
           r->element[1]->integer, r->element[2]->integer);
    freeReplyObject(r);
    for (int k = 0; k < 5; k++) {
        CHECK_OK(redmutex_lock_release(l[k], NULL));
        redmutex_lock_free(l[k]);
    }
    done(c);
}

/* A Cluster: each name is read on its slot's master, through the URL's seed list. */
static void test_a_cluster_is_read_on_each_names_master(void)
{
    static rc_cluster cl; /* the harness stops its nodes after the test */
    rc_start(&cl, 3, 0, NULL);
    const char *url = cl.url;
    redmutex_client *c = NULL;
    CHECK_OK(redmutex_client_new(&c, &url, 1, NULL));
    char pname[64], rname[64];
    rs_server *m0 = rc_master(&cl, 0), *m1 = rc_master(&cl, 1);
    rc_name_on(&cl, m0, "cl:p%d", pname, sizeof pname);
    rc_name_on(&cl, m1, "cl:r%d", rname, sizeof rname);
    redmutex_lock *plain = new_lock(c, pname, REDMUTEX_KIND_LOCK, REDMUTEX_LOCK_FENCING);
    redmutex_lock *re = new_lock(c, rname, REDMUTEX_KIND_RLOCK, 0);
    CHECK_OK(redmutex_lock_acquire(plain, NULL, 0));
    CHECK_OK(redmutex_lock_acquire(re, NULL, 0));
    CHECK_OK(redmutex_lock_acquire(re, NULL, 0));

    redmutex_lock_info info = REDMUTEX_LOCK_INFO_INIT;
    CHECK_OK(redmutex_lock_inspect(&info, plain));
    CHECK(info.held == 1 && info.kind == REDMUTEX_KIND_LOCK && info.servers_answered == 1);
    CHECK(strlen(info.owner) == 8 && info.ttl_ms > 0);
    CHECKF(info.fence >= 1 && info.fence == rs_num(m0, "GET redisson_lock_token:{%s}", pname), "fence %lld",
           (long long)info.fence);
    char me[128];
    CHECK_OK(redmutex_client_thread_owner(me, sizeof me, c));
    CHECK_OK(redmutex_lock_inspect(&info, re));
    CHECK(info.held == 1 && info.kind == REDMUTEX_KIND_RLOCK && info.hold_count == 2);
    CHECKF(strcmp(info.owner, me) == 0, "owner %s, expected %s", info.owner, me);
    int locked = 0;
    int64_t count = 0, ttl = 0;
    CHECK_OK(redmutex_lock_is_locked(&locked, plain));
    CHECK_OK(redmutex_lock_hold_count(&count, re, NULL));
    CHECK_OK(redmutex_lock_ttl(&ttl, re));
    CHECK(locked == 1 && count == 2 && ttl > 0);
    CHECK_OK(redmutex_lock_release(plain, NULL));
    CHECK_OK(redmutex_lock_inspect(&info, plain));
    CHECK(info.held == 0 && info.kind == -1 && info.fence >= 1);
    CHECK_OK(redmutex_lock_release(re, NULL));
    CHECK_OK(redmutex_lock_release(re, NULL));
    redmutex_lock_free(plain);
    redmutex_lock_free(re);
    done(c);
}

int main(int argc, char **argv)
{
    static const rt_test tests[] = {
        {"a_free_name_is_reported_free", test_a_free_name_is_reported_free},
        {"plain_and_reentrant_locks_show_owner_count_ttl_and_fence",
         test_plain_and_reentrant_locks_show_owner_count_ttl_and_fence},
        {"a_fair_lock_shows_its_queue", test_a_fair_lock_shows_its_queue},
        {"a_read_write_lock_shows_its_mode_writer_and_readers",
         test_a_read_write_lock_shows_its_mode_writer_and_readers},
        {"bad_arguments_and_keys_that_are_no_lock_are_refused",
         test_bad_arguments_and_keys_that_are_no_lock_are_refused},
        {"redlock_answers_with_a_majority", test_redlock_answers_with_a_majority},
        {"every_query_runs_the_one_inspect_script", test_every_query_runs_the_one_inspect_script},
        {"a_cluster_is_read_on_each_names_master", test_a_cluster_is_read_on_each_names_master},
    };
    return rt_run(tests, sizeof tests / sizeof tests[0], argc, argv);
}
