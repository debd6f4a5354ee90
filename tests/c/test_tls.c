/*
 * TLS against real TLS redis-servers (certificates made by
 * tests/tls/make_certs.sh): locks, waiting and the watchdog over TLS, mutual
 * TLS, and every way a handshake can fail — each a clear error within the
 * connect timeout, with nothing held on the server.
 */
#define _GNU_SOURCE
#include "cluster.h"
#include "harness.h"

#include <openssl/ssl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <string.h>

static rt_certs certs;
static rs_server srv;

/* A rediss:// URL for a port with query options (printf-style, appended after '?'). */
static const char *tls_url(int port, const char *query_fmt, ...) __attribute__((format(printf, 2, 3)));
static const char *tls_url(int port, const char *query_fmt, ...)
{
    static char url[2048];
    int n = snprintf(url, sizeof url, "rediss://127.0.0.1:%d?", port);
    va_list ap;
    va_start(ap, query_fmt);
    vsnprintf(url + n, sizeof url - (size_t)n, query_fmt, ap);
    va_end(ap);
    return url;
}

static redmutex_client *new_client(const char *url, const redmutex_client_options *opts)
{
    redmutex_client *c = NULL;
    CHECK_OK(redmutex_client_new(&c, &url, 1, opts));
    return c;
}

static void start_server(const char *cert, const char *key, bool mtls)
{
    rs_tls_config cfg = {cert, key, mtls, false};
    rs_start_tls(&srv, &certs, &cfg, NULL);
}

/*
 * Expects the first acquire on a client for `url` to fail with `want`
 * within the connect timeout, with a message containing `words`, and leave
 * no key behind.
 */
static void expect_refused(const char *url, const redmutex_client_options *opts, int want, const char *words)
{
    redmutex_client_options o = REDMUTEX_CLIENT_OPTIONS_INIT;
    if (opts)
        o = *opts;
    o.connect_timeout_ms = 1000;
    o.command_timeout_ms = 500;
    redmutex_client *c = new_client(url, &o);
    redmutex_lock *l;
    CHECK_OK(redmutex_lock_new(&l, c, "refused", REDMUTEX_KIND_LOCK, NULL));
    int64_t t0 = rt_now_ms();
    CHECK_RC(redmutex_lock_acquire(l, NULL, 0), want);
    int64_t took = rt_now_ms() - t0;
    CHECKF(strstr(redmutex_last_error(), words), "message '%s' does not say '%s'", redmutex_last_error(), words);
    CHECKF(!strstr(redmutex_last_error(), "hunter2"), "password shown: %s", redmutex_last_error());
    CHECKF(took <= rt_scaled_ms(1500), "took %lld ms with a 1000 ms connect timeout", (long long)took);
    printf("     refused in %lld ms: %s\n", (long long)took, redmutex_last_error());
    redmutex_lock_free(l);
    redmutex_client_close(c);
    redmutex_client_free(c);
    if (srv.pid > 0)
        CHECKF(rs_count_keys(&srv, "*refused*") == 0, "%lld keys left", rs_count_keys(&srv, "*refused*"));
}

/* ---- working TLS ------------------------------------------------------------ */

typedef struct waiter_arg {
    redmutex_lock *lock;
    int rc;
    int64_t got_ms;
} waiter_arg;

static void *wait_for_lock(void *arg)
{
    waiter_arg *w = arg;
    w->rc = redmutex_lock_acquire(w->lock, NULL, 10000);
    w->got_ms = rt_now_ms();
    if (w->rc == 0)
        w->rc = redmutex_lock_release(w->lock, NULL);
    return NULL;
}

static void test_locks_waiting_and_watchdog_over_tls(void)
{
    start_server("server.pem", "server.key", false);
    redmutex_client_options o = REDMUTEX_CLIENT_OPTIONS_INIT;
    o.connect_timeout_ms = rt_scaled_ms(2000);
    o.watchdog_lease_ms = rt_scaled_ms(600);
    o.wait_backoff_cap_ms = rt_scaled_ms(5000); /* a waiter that wakes quickly was woken by the release message */
    redmutex_client *c = new_client(tls_url(srv.tls_port, "ssl_ca_certs=%s", rt_cert(&certs, "ca.pem")), &o);

    /* Plain lock, reentrant lock (reentry), fencing. */
    redmutex_lock *plain, *re;
    redmutex_lock_options lo = REDMUTEX_LOCK_OPTIONS_INIT;
    lo.flags = REDMUTEX_LOCK_FENCING;
    CHECK_OK(redmutex_lock_new(&plain, c, "tls:plain", REDMUTEX_KIND_LOCK, &lo));
    CHECK_OK(redmutex_lock_new(&re, c, "tls:re", REDMUTEX_KIND_RLOCK, NULL));
    /* Connect first: under valgrind the first TLS handshake alone can outlast a short lease. */
    int locked;
    CHECK_OK(redmutex_lock_is_locked(&locked, plain));
    CHECK(!locked);
    CHECK_OK(redmutex_lock_acquire(plain, NULL, 0));
    int64_t fence;
    CHECK_OK(redmutex_lock_fence(&fence, plain, NULL));
    CHECK(fence == 1 && rs_exists(&srv, "redisson_lock_token:{tls:plain}"));
    CHECK_OK(redmutex_lock_acquire(re, NULL, 0));
    CHECK_OK(redmutex_lock_acquire(re, NULL, 0));
    int64_t count;
    CHECK_OK(redmutex_lock_hold_count(&count, re, NULL));
    CHECK(count == 2);

    /* The watchdog renews over TLS: held for three leases, still there. */
    int64_t until = rt_now_ms() + 3 * o.watchdog_lease_ms;
    while (rt_now_ms() < until) {
        CHECK(rs_exists(&srv, "tls:re"));
        rt_sleep_ms(50);
    }
    redmutex_state st;
    CHECK_OK(redmutex_lock_state(&st, re, NULL));
    CHECK(st == REDMUTEX_STATE_HELD);
    CHECK_OK(redmutex_lock_release(re, NULL));
    CHECK_OK(redmutex_lock_release(re, NULL));
    CHECK(!rs_exists(&srv, "tls:re"));

    /* A waiter in another client subscribes over TLS and is woken by the release. */
    redmutex_client *c2 = new_client(tls_url(srv.tls_port, "ssl_ca_certs=%s", rt_cert(&certs, "ca.pem")), &o);
    waiter_arg w = {0};
    CHECK_OK(redmutex_lock_new(&w.lock, c2, "tls:plain", REDMUTEX_KIND_LOCK, NULL));
    pthread_t t;
    pthread_create(&t, NULL, wait_for_lock, &w);
    WAIT_FOR(rs_numsub(&srv, "redisson_lock__channel:{tls:plain}") == 1, 5000);
    rt_sleep_ms(100); /* the waiter is asleep in its wait, not between attempts */
    int64_t released = rt_now_ms();
    CHECK_OK(redmutex_lock_release(plain, NULL));
    pthread_join(t, NULL);
    CHECK_RC(w.rc, REDMUTEX_OK);
    CHECKF(w.got_ms - released < rt_scaled_ms(1000), "the waiter took %lld ms after the release",
           (long long)(w.got_ms - released));
    redmutex_lock_free(w.lock);
    redmutex_client_close(c2);
    redmutex_client_free(c2);
    redmutex_lock_free(plain);
    redmutex_lock_free(re);
    redmutex_client_close(c);
    redmutex_client_free(c);
    CHECK(rs_count_keys(&srv, "tls:*") == 0);
}

static void test_host_name_and_explicit_server_name_verified(void)
{
    start_server("server.pem", "server.key", false);
    const char *ca = rt_cert(&certs, "ca.pem");
    char url[1024];
    snprintf(url, sizeof url, "rediss://localhost:%d/0?ssl_ca_certs=%s", srv.tls_port, ca);
    redmutex_client *c = new_client(url, NULL);
    redmutex_lock *l;
    CHECK_OK(redmutex_lock_new(&l, c, "by-name", REDMUTEX_KIND_LOCK, NULL));
    CHECK_OK(redmutex_lock_acquire(l, NULL, 0));
    CHECK_OK(redmutex_lock_release(l, NULL));
    redmutex_lock_free(l);
    redmutex_client_close(c);
    redmutex_client_free(c);

    /* A certificate for another name: refused unless that name is the one checked. */
    rs_stop(&srv);
    start_server("wrong_name.pem", "wrong_name.key", false);
    expect_refused(tls_url(srv.tls_port, "ssl_ca_certs=%s", ca), NULL, REDMUTEX_ECONN, "name mismatch");
    c = new_client(tls_url(srv.tls_port, "ssl_ca_certs=%s&ssl_server_hostname=elsewhere.example", ca), NULL);
    CHECK_OK(redmutex_lock_new(&l, c, "by-name", REDMUTEX_KIND_LOCK, NULL));
    CHECK_OK(redmutex_lock_acquire(l, NULL, 0));
    CHECK_OK(redmutex_lock_release(l, NULL));
    redmutex_lock_free(l);
    redmutex_client_close(c);
    redmutex_client_free(c);
    /* ... or the host name check is turned off explicitly (the chain is still verified). */
    c = new_client(tls_url(srv.tls_port, "ssl_ca_certs=%s&ssl_check_hostname=false", ca), NULL);
    CHECK_OK(redmutex_lock_new(&l, c, "by-name", REDMUTEX_KIND_LOCK, NULL));
    CHECK_OK(redmutex_lock_acquire(l, NULL, 0));
    CHECK_OK(redmutex_lock_release(l, NULL));
    redmutex_lock_free(l);
    redmutex_client_close(c);
    redmutex_client_free(c);
    expect_refused(tls_url(srv.tls_port, "ssl_ca_certs=%s&ssl_check_hostname=false", rt_cert(&certs, "other_ca.pem")),
                   NULL, REDMUTEX_ECONN, "unknown CA");
}

static void test_mutual_tls_required_by_the_server(void)
{
    start_server("server.pem", "server.key", true);
    const char *ca = rt_cert(&certs, "ca.pem");
    expect_refused(tls_url(srv.tls_port, "ssl_ca_certs=%s", ca), NULL, REDMUTEX_ECONN, "client certificate");
    expect_refused(tls_url(srv.tls_port, "ssl_ca_certs=%s&ssl_certfile=%s&ssl_keyfile=%s", ca,
                           rt_cert(&certs, "rogue.pem"), rt_cert(&certs, "rogue.key")),
                   NULL, REDMUTEX_ECONN, "refused this client's certificate");
    /* With the client certificate, in the URL or in the C options. */
    redmutex_client *c = new_client(tls_url(srv.tls_port, "ssl_ca_certs=%s&ssl_certfile=%s&ssl_keyfile=%s", ca,
                                            rt_cert(&certs, "client.pem"), rt_cert(&certs, "client.key")),
                                    NULL);
    redmutex_lock *l;
    CHECK_OK(redmutex_lock_new(&l, c, "mtls", REDMUTEX_KIND_RLOCK, NULL));
    CHECK_OK(redmutex_lock_acquire(l, NULL, 0));
    CHECK(rs_exists(&srv, "mtls"));
    CHECK_OK(redmutex_lock_release(l, NULL));
    redmutex_lock_free(l);
    redmutex_client_close(c);
    redmutex_client_free(c);

    redmutex_client_options o = REDMUTEX_CLIENT_OPTIONS_INIT;
    o.tls_ca_file = ca;
    o.tls_cert_file = rt_cert(&certs, "client.pem");
    o.tls_key_file = rt_cert(&certs, "client.key");
    c = new_client(srv.url, &o);
    CHECK_OK(redmutex_lock_new(&l, c, "mtls", REDMUTEX_KIND_LOCK, NULL));
    CHECK_OK(redmutex_lock_acquire(l, NULL, 0));
    CHECK_OK(redmutex_lock_release(l, NULL));
    redmutex_lock_free(l);
    redmutex_client_close(c);
    redmutex_client_free(c);
}

static void test_unknown_ca_and_expired_certificate_refused(void)
{
    start_server("server.pem", "server.key", false);
    expect_refused(tls_url(srv.tls_port, "ssl_ca_certs=%s", rt_cert(&certs, "other_ca.pem")), NULL, REDMUTEX_ECONN,
                   "unknown CA");
    /* The system trust store does not know the test CA either. */
    char url[256];
    snprintf(url, sizeof url, "rediss://admin:hunter2@127.0.0.1:%d", srv.tls_port);
    expect_refused(url, NULL, REDMUTEX_ECONN, "unknown CA");
    /* Verification off, explicitly: then any certificate passes. */
    redmutex_client *c = new_client(tls_url(srv.tls_port, "ssl_cert_reqs=none"), NULL);
    redmutex_lock *l;
    CHECK_OK(redmutex_lock_new(&l, c, "unverified", REDMUTEX_KIND_LOCK, NULL));
    CHECK_OK(redmutex_lock_acquire(l, NULL, 0));
    CHECK_OK(redmutex_lock_release(l, NULL));
    redmutex_lock_free(l);
    redmutex_client_close(c);
    redmutex_client_free(c);

    rs_stop(&srv);
    start_server("expired.pem", "expired.key", false);
    expect_refused(tls_url(srv.tls_port, "ssl_ca_certs=%s", rt_cert(&certs, "ca.pem")), NULL, REDMUTEX_ECONN,
                   "expired");
}

static void test_plain_and_tls_mixed_up_ports(void)
{
    rs_tls_config cfg = {"server.pem", "server.key", false, true};
    rs_start_tls(&srv, &certs, &cfg, NULL);
    /* Plain text to the TLS port. */
    char url[128];
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", srv.tls_port);
    expect_refused(url, NULL, REDMUTEX_ECONN, "rediss://");
    /* TLS to the plain port. */
    expect_refused(tls_url(srv.port, "ssl_ca_certs=%s", rt_cert(&certs, "ca.pem")), NULL, REDMUTEX_ECONN, "TLS");
}

static void test_tls_files_and_options_checked_at_creation(void)
{
    const char *ca = rt_cert(&certs, "ca.pem");
    struct {
        const char *option, *file, *option2, *file2;
        const char *words;
    } bad[] = {
        {"ssl_ca_certs", "/nonexistent/ca.pem", NULL, NULL, "/nonexistent/ca.pem"},
        {"ssl_ca_certs", rt_cert(&certs, "client.key"), NULL, NULL, "ssl_ca_certs"},
        {"ssl_certfile", rt_cert(&certs, "missing.pem"), NULL, NULL, "ssl_certfile"},
        {"ssl_certfile", rt_cert(&certs, "client.pem"), "ssl_keyfile", rt_cert(&certs, "rogue.key"), "does not belong"},
        {"ssl_keyfile", rt_cert(&certs, "client.key"), NULL, NULL, "needs ssl_certfile"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const char *u = bad[i].option2
                            ? tls_url(6379, "%s=%s&%s=%s", bad[i].option, bad[i].file, bad[i].option2, bad[i].file2)
                            : tls_url(6379, "%s=%s", bad[i].option, bad[i].file);
        redmutex_client *c = NULL;
        CHECK_RC(redmutex_client_new(&c, &u, 1, NULL), REDMUTEX_EINVAL);
        CHECKF(strstr(redmutex_last_error(), bad[i].words), "%s: %s", u, redmutex_last_error());
    }
    /* TLS options with a plain URL: refused, never silently plain text. */
    redmutex_client_options o = REDMUTEX_CLIENT_OPTIONS_INIT;
    o.tls_ca_file = ca;
    const char *plain = "redis://127.0.0.1:6379";
    redmutex_client *c = NULL;
    CHECK_RC(redmutex_client_new(&c, &plain, 1, &o), REDMUTEX_EINVAL);
    CHECK(strstr(redmutex_last_error(), "rediss://"));
    /* A context cannot be combined with files. */
    SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
    o.tls_context = ctx;
    const char *u = "rediss://127.0.0.1:6379";
    CHECK_RC(redmutex_client_new(&c, &u, 1, &o), REDMUTEX_EINVAL);
    SSL_CTX_free(ctx);
}

/* A file that cannot be loaded is blamed on what is wrong with it, in words the user can act on. */
static void test_tls_file_problems_name_their_cause(void)
{
    char garbage[320];
    snprintf(garbage, sizeof garbage, "%s/garbage.pem", certs.dir);
    FILE *f = fopen(garbage, "w");
    CHECK(f);
    fputs("this is not a certificate\n", f);
    fclose(f);
    char queries[6][800];
    snprintf(queries[0], sizeof queries[0], "ssl_ca_certs=/nonexistent/ca.pem");
    snprintf(queries[1], sizeof queries[1], "ssl_certfile=/nonexistent/client.pem");
    snprintf(queries[2], sizeof queries[2], "ssl_ca_certs=%s", certs.dir);
    snprintf(queries[3], sizeof queries[3], "ssl_ca_certs=%s", garbage);
    snprintf(queries[4], sizeof queries[4], "ssl_certfile=%s", garbage);
    snprintf(queries[5], sizeof queries[5], "ssl_certfile=%s&ssl_keyfile=/nonexistent/client.key",
             rt_cert(&certs, "client.pem"));
    const char *words[] = {
        "No such file or directory", "No such file or directory", "is a directory", "no PEM data", "no PEM data",
        "No such file or directory"};
    for (size_t i = 0; i < sizeof words / sizeof words[0]; i++) {
        const char *u = tls_url(6379, "%s", queries[i]);
        redmutex_client *c = NULL;
        CHECK_RC(redmutex_client_new(&c, &u, 1, NULL), REDMUTEX_EINVAL);
        CHECKF(strstr(redmutex_last_error(), words[i]) && !strstr(redmutex_last_error(), "system lib"), "%s: %s", u,
               redmutex_last_error());
    }
    remove(garbage);
}

static void test_caller_tls_context_is_verified(void)
{
    start_server("server.pem", "server.key", false);
    /* A bare context trusts nothing and asks for no verification itself:
       redmutex still verifies, so the handshake is refused. */
    SSL_CTX *bare = SSL_CTX_new(TLS_client_method());
    redmutex_client_options o = REDMUTEX_CLIENT_OPTIONS_INIT;
    o.tls_context = bare;
    expect_refused(srv.url, &o, REDMUTEX_ECONN, "unknown CA");
    /* A context that trusts the test CA works; the caller frees its reference at once. */
    SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
    CHECK(SSL_CTX_load_verify_locations(ctx, rt_cert(&certs, "ca.pem"), NULL) == 1);
    o.tls_context = ctx;
    redmutex_client *c = new_client(srv.url, &o);
    SSL_CTX_free(ctx);
    SSL_CTX_free(bare);
    redmutex_lock *l;
    CHECK_OK(redmutex_lock_new(&l, c, "ctx", REDMUTEX_KIND_LOCK, NULL));
    CHECK_OK(redmutex_lock_acquire(l, NULL, 0));
    CHECK_OK(redmutex_lock_release(l, NULL));
    redmutex_lock_free(l);
    redmutex_client_close(c);
    redmutex_client_free(c);
}

static void test_server_gone_mid_session_is_an_error_not_sigpipe(void)
{
    start_server("server.pem", "server.key", false);
    redmutex_client_options o = REDMUTEX_CLIENT_OPTIONS_INIT;
    o.connect_timeout_ms = 500;
    o.command_timeout_ms = 500;
    redmutex_client *c = new_client(tls_url(srv.tls_port, "ssl_ca_certs=%s", rt_cert(&certs, "ca.pem")), &o);
    redmutex_lock *l;
    redmutex_lock_options lo = REDMUTEX_LOCK_OPTIONS_INIT;
    lo.lease_ms = 5000;
    CHECK_OK(redmutex_lock_new(&l, c, "gone", REDMUTEX_KIND_LOCK, &lo));
    CHECK_OK(redmutex_lock_acquire(l, NULL, 0));
    rs_kill(&srv);
    /* SIGPIPE is at its default here (the harness): raising it would kill the test. */
    CHECK_RC(redmutex_lock_release(l, NULL), REDMUTEX_ECONN);
    CHECK_RC(redmutex_lock_extend(l, NULL, 1000, REDMUTEX_EXTEND_ADD), REDMUTEX_ECONN);
    redmutex_lock_free(l);
    redmutex_client_close(c);
    redmutex_client_free(c);
}

/* Round trips the client waits for before its first acquisition is answered. */
static int first_acquire_flights(int upstream_port, bool tls)
{
    rs_proxy *p = rs_flight_proxy_start(upstream_port, 30000);
    char url[1024];
    if (tls)
        snprintf(url, sizeof url, "rediss://127.0.0.1:%d?ssl_ca_certs=%s", p->port, rt_cert(&certs, "ca.pem"));
    else
        snprintf(url, sizeof url, "redis://127.0.0.1:%d", p->port);
    redmutex_client *c = new_client(url, NULL);
    redmutex_lock *l;
    CHECK_OK(redmutex_lock_new(&l, c, tls ? "flights:tls" : "flights:plain", REDMUTEX_KIND_LOCK, NULL));
    CHECK_OK(redmutex_lock_acquire(l, NULL, 0));
    int flights = atomic_load(&p->flights);
    CHECK_OK(redmutex_lock_release(l, NULL));
    redmutex_lock_free(l);
    redmutex_client_close(c);
    redmutex_client_free(c);
    rs_proxy_stop(p);
    return flights;
}

static void test_tls_costs_one_round_trip_at_connect(void)
{
    rs_tls_config cfg = {"server.pem", "server.key", false, true};
    rs_start_tls(&srv, &certs, &cfg, NULL);
    int plain = first_acquire_flights(srv.port, false);
    int tls = first_acquire_flights(srv.tls_port, true);
    printf("     first acquisition on a new connection: %d round trip(s) plain, %d with TLS\n", plain, tls);
    /* Plain: the AUTH/SELECT/SCRIPT LOAD handshake, then the request (docs/wire-format.md). */
    CHECKF(plain >= 1 && plain <= 2, "plain: %d round trips", plain);
    CHECKF(tls == plain + 1, "TLS: %d round trips, plain %d", tls, plain);
}

/* The node of a TLS-only cluster that holds key (its plain ports are closed: CLUSTER SLOTS can't say). */
static rs_server *holder_of(rc_cluster *tcl, const char *key)
{
    rs_server *found = NULL;
    for (int i = 0; i < tcl->n; i++)
        if (rs_exists(&tcl->node[i], key)) {
            CHECKF(!found, "%s is on two nodes", key);
            found = &tcl->node[i];
        }
    return found;
}

/* Sharded subscribers of a channel on node s (PUBSUB SHARDNUMSUB). */
static long long shard_numsub(rs_server *s, const char *channel)
{
    redisReply *r = rs_cmd(s, "PUBSUB SHARDNUMSUB %s", channel);
    long long n = r && r->type == REDIS_REPLY_ARRAY && r->elements == 2 ? r->element[1]->integer : -1;
    if (r)
        freeReplyObject(r);
    return n;
}

/*
 * A cluster that speaks TLS only: its topology (CLUSTER SHARDS) gives each
 * node's tls-port beside its port, and a rediss:// seed list routes every
 * lock to its master's TLS port - acquire, the watchdog, a waiter woken by
 * the sharded release message - with the plain ports closed.
 */
static void test_a_tls_cluster_is_reached_on_its_tls_ports(void)
{
    static rc_cluster tcl;
    rc_start_tls(&tcl, 3, 0, &certs);
    for (int i = 0; i < tcl.n; i++) { /* TLS only from now on */
        redisReply *r = rs_cmd(&tcl.node[i], "CONFIG SET port 0");
        CHECK(r && r->type == REDIS_REPLY_STATUS);
        freeReplyObject(r);
        tcl.node[i].port = 0; /* the harness reaches it over its Unix socket now */
        r = rs_cmd(&tcl.node[i], "CONFIG GET port");
        CHECK(r && r->type == REDIS_REPLY_ARRAY && r->elements == 2 && strcmp(r->element[1]->str, "0") == 0);
        freeReplyObject(r);
    }
    static char url[800];
    snprintf(url, sizeof url, "%s?ssl_ca_certs=%s", tcl.url, rt_cert(&certs, "ca.pem"));
    redmutex_client_options o = REDMUTEX_CLIENT_OPTIONS_INIT;
    o.connect_timeout_ms = rt_scaled_ms(2000);
    o.watchdog_lease_ms = rt_scaled_ms(900);
    o.wait_backoff_cap_ms = rt_scaled_ms(5000); /* a quick wake-up was the release message */
    redmutex_client *a = new_client(url, &o), *b = new_client(url, &o);
    enum { N = 12 };
    redmutex_lock *l[N];
    bool on[RC_MAX_NODES] = {false};
    for (int k = 0; k < N; k++) {
        char name[32];
        snprintf(name, sizeof name, "tlscl:%d", k);
        CHECK_OK(redmutex_lock_new(&l[k], a, name, REDMUTEX_KIND_RLOCK, NULL));
        CHECK_OK(redmutex_lock_acquire(l[k], NULL, 0));
        rs_server *holder = holder_of(&tcl, name);
        CHECKF(holder, "%s is on no node", name);
        on[holder - tcl.node] = true;
    }
    CHECK(on[0] && on[1] && on[2]);                        /* every master, each on its TLS port */
    int64_t until = rt_now_ms() + 3 * o.watchdog_lease_ms; /* renewals over TLS, per node */
    while (rt_now_ms() < until) {
        CHECK(holder_of(&tcl, "tlscl:0") != NULL);
        rt_sleep_ms(50);
    }
    redmutex_state st;
    CHECK_OK(redmutex_lock_state(&st, l[0], NULL));
    CHECK(st == REDMUTEX_STATE_HELD);
    waiter_arg w = {0};
    CHECK_OK(redmutex_lock_new(&w.lock, b, "tlscl:0", REDMUTEX_KIND_RLOCK, NULL));
    pthread_t t;
    pthread_create(&t, NULL, wait_for_lock, &w);
    rs_server *owner = holder_of(&tcl, "tlscl:0");
    WAIT_FOR(shard_numsub(owner, "redisson_lock__channel:{tlscl:0}") == 1, 5000);
    rt_sleep_ms(100); /* the waiter is asleep in its wait, not between attempts */
    int64_t released = rt_now_ms();
    for (int k = 0; k < N; k++) {
        CHECK_OK(redmutex_lock_release(l[k], NULL));
        redmutex_lock_free(l[k]);
    }
    pthread_join(t, NULL);
    CHECK_RC(w.rc, REDMUTEX_OK);
    CHECKF(w.got_ms - released < rt_scaled_ms(1000), "the waiter took %lld ms", (long long)(w.got_ms - released));
    redmutex_lock_free(w.lock);
    redmutex_client_free(a);
    redmutex_client_free(b);
    for (int i = 0; i < tcl.n; i++)
        CHECK(rs_count_keys(&tcl.node[i], "tlscl:*") == 0);
    rc_stop(&tcl);
}

int main(int argc, char **argv)
{
    rt_make_certs(&certs);
    static const rt_test tests[] = {
        {"locks_waiting_and_watchdog_over_tls", test_locks_waiting_and_watchdog_over_tls},
        {"host_name_and_explicit_server_name_verified", test_host_name_and_explicit_server_name_verified},
        {"mutual_tls_required_by_the_server", test_mutual_tls_required_by_the_server},
        {"unknown_ca_and_expired_certificate_refused", test_unknown_ca_and_expired_certificate_refused},
        {"plain_and_tls_mixed_up_ports", test_plain_and_tls_mixed_up_ports},
        {"tls_file_problems_name_their_cause", test_tls_file_problems_name_their_cause},
        {"tls_files_and_options_checked_at_creation", test_tls_files_and_options_checked_at_creation},
        {"caller_tls_context_is_verified", test_caller_tls_context_is_verified},
        {"server_gone_mid_session_is_an_error_not_sigpipe", test_server_gone_mid_session_is_an_error_not_sigpipe},
        {"tls_costs_one_round_trip_at_connect", test_tls_costs_one_round_trip_at_connect},
        {"a_tls_cluster_is_reached_on_its_tls_ports", test_a_tls_cluster_is_reached_on_its_tls_ports},
    };
    int rc = rt_run(tests, sizeof tests / sizeof tests[0], argc, argv);
    rt_remove_certs(&certs);
    return rc;
}
