/*
 * redmutex_lock_inspect: what the servers hold under a name, whatever its
 * kind, in one round trip, against real redis-servers.
 */
#define _GNU_SOURCE
#include "harness.h"

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
    CHECKF(strlen(info.owner) == 8 && strncmp(info.owner, token->str, 8) == 0,
           "only the start of the token: %s", info.owner);
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

int main(int argc, char **argv)
{
    static const rt_test tests[] = {
        {"a_free_name_is_reported_free", test_a_free_name_is_reported_free},
        {"plain_and_reentrant_locks_show_owner_count_ttl_and_fence",
         test_plain_and_reentrant_locks_show_owner_count_ttl_and_fence},
        {"a_fair_lock_shows_its_queue", test_a_fair_lock_shows_its_queue},
        {"a_read_write_lock_shows_its_mode_writer_and_readers", test_a_read_write_lock_shows_its_mode_writer_and_readers},
        {"bad_arguments_and_keys_that_are_no_lock_are_refused", test_bad_arguments_and_keys_that_are_no_lock_are_refused},
        {"redlock_answers_with_a_majority", test_redlock_answers_with_a_majority},
    };
    return rt_run(tests, sizeof tests / sizeof tests[0], argc, argv);
}
