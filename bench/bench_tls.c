/*
 * What TLS costs (figures, not pass/fail), against plain TCP to the same
 * redis-server (it listens on a plain and a TLS port), measured interleaved
 * in the same run:
 *
 *  connect   round trips the client waits for before its first acquisition
 *            is answered, counted by a proxy that delays every chunk (so the
 *            count does not depend on timing), and the wall time of a new
 *            client's first acquire+release on loopback;
 *  pair      uncontended acquire+release on an open connection, plain and
 *            reentrant locks, beside the floor of the same two commands on
 *            a bare blocking connection (OpenSSL, or plain send/recv); on
 *            loopback, and through proxies that add 0.5 ms of round trip
 *            (a network between hosts) to both kinds alike.
 *
 * It makes its own certificates (tests/tls/make_certs.sh, EC P-256) and
 * starts its own redis-server. Usage: bench_tls [seconds]
 */
#define _GNU_SOURCE
#include "harness.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/ssl.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static rs_server srv;
static rt_certs certs;

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

static int64_t pct(int64_t *v, size_t n, double p)
{
    qsort(v, n, sizeof *v, cmp_i64);
    return v[(size_t)(p / 100.0 * (double)(n - 1) + 0.5)];
}

static void die(void)
{
    fprintf(stderr, "%s\n", redmutex_last_error());
    exit(1);
}

static const char *url_for(int port, bool tls)
{
    static char url[1024];
    if (tls)
        snprintf(url, sizeof url, "rediss://127.0.0.1:%d?ssl_ca_certs=%s", port, rt_cert(&certs, "ca.pem"));
    else
        snprintf(url, sizeof url, "redis://127.0.0.1:%d", port);
    return url;
}

static redmutex_client *client(int port, bool tls)
{
    const char *url = url_for(port, tls);
    redmutex_client *c;
    if (redmutex_client_new(&c, &url, 1, NULL) != 0)
        die();
    return c;
}

static redmutex_lock *lock_of(redmutex_client *c, const char *name, redmutex_kind kind)
{
    redmutex_lock_options o = REDMUTEX_LOCK_OPTIONS_INIT;
    o.lease_ms = 10000;
    redmutex_lock *l;
    if (redmutex_lock_new(&l, c, name, kind, &o) != 0)
        die();
    return l;
}

static void pair(redmutex_lock *l)
{
    if (redmutex_lock_acquire(l, NULL, 0) || redmutex_lock_release(l, NULL))
        die();
}

/* A new client's first acquire+release: connect, handshakes, the requests. */
static int64_t first_pair_ns(int port, bool tls)
{
    int64_t t0 = now_ns();
    redmutex_client *c = client(port, tls);
    redmutex_lock *l = lock_of(c, tls ? "bench:tls:first" : "bench:plain:first", REDMUTEX_KIND_LOCK);
    pair(l);
    int64_t took = now_ns() - t0;
    redmutex_lock_free(l);
    redmutex_client_free(c);
    return took;
}

static int flights(int port, bool tls)
{
    rs_proxy *p = rs_flight_proxy_start(port, 20000);
    redmutex_client *c = client(p->port, tls);
    redmutex_lock *l = lock_of(c, "bench:flights", REDMUTEX_KIND_LOCK);
    if (redmutex_lock_acquire(l, NULL, 0))
        die();
    int n = atomic_load(&p->flights);
    if (redmutex_lock_release(l, NULL))
        die();
    redmutex_lock_free(l);
    redmutex_client_free(c);
    rs_proxy_stop(p);
    return n;
}

static void bench_connect(double seconds)
{
    printf("connect (new client, first acquisition)\n");
    printf("  round trips waited for:  plain %d, TLS %d  (counted by a delaying proxy)\n",
           flights(srv.port, false), flights(srv.tls_port, true));
    enum { CAP = 100000, BLOCK = 20 };
    int64_t *plain = malloc(CAP * sizeof *plain), *tls = malloc(CAP * sizeof *tls);
    size_t n = 0;
    for (int i = 0; i < 20; i++) { /* warm up */
        first_pair_ns(srv.port, false);
        first_pair_ns(srv.tls_port, true);
    }
    int64_t end = now_ns() + (int64_t)(seconds * 1e9);
    while (now_ns() < end && n + BLOCK < CAP) {
        for (int i = 0; i < BLOCK; i++)
            plain[n + (size_t)i] = first_pair_ns(srv.port, false);
        for (int i = 0; i < BLOCK; i++)
            tls[n + (size_t)i] = first_pair_ns(srv.tls_port, true);
        n += BLOCK;
    }
    int64_t p50 = pct(plain, n, 50), t50 = pct(tls, n, 50);
    printf("  new client + first acquire+release, %zu each, interleaved:\n", n);
    printf("    plain  p50 %7.1f us  p99 %7.1f us\n", p50 / 1e3, pct(plain, n, 99) / 1e3);
    printf("    TLS    p50 %7.1f us  p99 %7.1f us  (+%.1f us: handshake round trip and crypto)\n", t50 / 1e3,
           pct(tls, n, 99) / 1e3, (t50 - p50) / 1e3);
    free(plain);
    free(tls);
}

/* ---- the floor: the two commands of a pair on a bare blocking connection ---- */

typedef struct raw_conn {
    int fd;
    SSL_CTX *ctx;
    SSL *ssl; /* NULL: plain TCP */
} raw_conn;

static raw_conn raw_open(int port, bool tls)
{
    raw_conn r = {socket(AF_INET, SOCK_STREAM, 0), NULL, NULL};
    struct sockaddr_in sa = {0};
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int one = 1;
    setsockopt(r.fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (connect(r.fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        perror("connect");
        exit(1);
    }
    if (tls) {
        r.ctx = SSL_CTX_new(TLS_client_method());
        SSL_CTX_load_verify_locations(r.ctx, rt_cert(&certs, "ca.pem"), NULL);
        SSL_CTX_set_verify(r.ctx, SSL_VERIFY_PEER, NULL);
        r.ssl = SSL_new(r.ctx);
        SSL_set_fd(r.ssl, r.fd);
        SSL_set_read_ahead(r.ssl, 1);
        if (SSL_connect(r.ssl) != 1) {
            fprintf(stderr, "raw TLS connect failed\n");
            exit(1);
        }
    }
    return r;
}

/* Sends one command and reads its one-line reply (":1", "+OK", "$-1"). */
static void raw_command(raw_conn *r, const char *cmd)
{
    size_t len = strlen(cmd);
    if ((r->ssl ? SSL_write(r->ssl, cmd, (int)len) : (int)send(r->fd, cmd, len, 0)) != (int)len)
        exit(1);
    char buf[256];
    size_t got = 0;
    while (got < 2 || buf[got - 1] != '\n') {
        int n = r->ssl ? SSL_read(r->ssl, buf + got, (int)(sizeof buf - got))
                       : (int)recv(r->fd, buf + got, sizeof buf - got, 0);
        if (n <= 0)
            exit(1);
        got += (size_t)n;
    }
}

static void raw_pair(raw_conn *r)
{
    raw_command(r,
                "*6\r\n$3\r\nSET\r\n$9\r\nbench:raw\r\n$3\r\ntok\r\n$2\r\nNX\r\n$2\r\nPX\r\n$5\r\n10000\r\n");
    raw_command(r, "*2\r\n$3\r\nDEL\r\n$9\r\nbench:raw\r\n");
}

static void raw_close(raw_conn *r)
{
    SSL_free(r->ssl);
    SSL_CTX_free(r->ctx);
    close(r->fd);
}

enum { SERIES = 6 };

static void run_series(int k, redmutex_lock *const *locks, raw_conn *raws)
{
    if (k < 2)
        raw_pair(&raws[k]);
    else
        pair(locks[k - 2]);
}

static void bench_pair(double seconds, int plain_port, int tls_port, const char *where)
{
    redmutex_client *pc = client(plain_port, false), *tc = client(tls_port, true);
    redmutex_lock *locks[4] = {
        lock_of(pc, "bench:pp", REDMUTEX_KIND_LOCK), lock_of(tc, "bench:tp", REDMUTEX_KIND_LOCK),
        lock_of(pc, "bench:pr", REDMUTEX_KIND_RLOCK), lock_of(tc, "bench:tr", REDMUTEX_KIND_RLOCK)};
    raw_conn raws[2] = {raw_open(plain_port, false), raw_open(tls_port, true)};
    enum { CAP = 2000000, BLOCK = 200 };
    int64_t *ns[SERIES];
    for (int k = 0; k < SERIES; k++)
        ns[k] = malloc(CAP * sizeof *ns[k]);
    size_t n = 0;
    for (int i = 0; i < 1000; i++)
        for (int k = 0; k < SERIES; k++)
            run_series(k, locks, raws);
    int64_t end = now_ns() + (int64_t)(seconds * 1e9);
    /* Interleaved blocks, so drifts of the machine hit every series alike. */
    while (now_ns() < end && n + BLOCK < CAP) {
        for (int k = 0; k < SERIES; k++)
            for (int i = 0; i < BLOCK; i++) {
                int64_t t0 = now_ns();
                run_series(k, locks, raws);
                ns[k][n + (size_t)i] = now_ns() - t0;
            }
        n += BLOCK;
    }
    static const char *names[SERIES] = {"floor: raw SET+DEL, TCP", "floor: raw SET+DEL, TLS",
                                        "plain lock, TCP",         "plain lock, TLS",
                                        "reentrant lock, TCP",     "reentrant lock, TLS"};
    int64_t p50[SERIES];
    printf(
        "pair latency, %s (uncontended acquire+release on an open connection, %zu pairs each, interleaved)\n",
        where, n);
    for (int k = 0; k < SERIES; k++) {
        p50[k] = pct(ns[k], n, 50);
        printf("  %-24s p50 %6.1f us  p99 %6.1f us", names[k], p50[k] / 1e3, pct(ns[k], n, 99) / 1e3);
        if (k % 2 == 1)
            printf("  TLS/TCP %.3fx (+%.1f us)", (double)p50[k] / (double)p50[k - 1],
                   (p50[k] - p50[k - 1]) / 1e3);
        if (k >= 2)
            printf("  vs its floor %.2fx", (double)p50[k] / (double)p50[k % 2]);
        printf("\n");
    }
    for (int k = 0; k < 4; k++)
        redmutex_lock_free(locks[k]);
    for (int k = 0; k < SERIES; k++)
        free(ns[k]);
    raw_close(&raws[0]);
    raw_close(&raws[1]);
    redmutex_client_free(pc);
    redmutex_client_free(tc);
}

int main(int argc, char **argv)
{
    double seconds = argc > 1 ? atof(argv[1]) : 5;
    rt_make_certs(&certs);
    rs_tls_config cfg = {"server.pem", "server.key", false, true};
    rs_start_tls(&srv, &certs, &cfg, NULL);
    bench_connect(seconds);
    bench_pair(seconds, srv.port, srv.tls_port, "loopback");
    /* The same through proxies that add 250 us each way, as a network between hosts would. */
    rs_proxy *plain = rs_flight_proxy_start(srv.port, 250), *tls = rs_flight_proxy_start(srv.tls_port, 250);
    bench_pair(seconds, plain->port, tls->port, "0.5 ms added round trip");
    rs_proxy_stop(plain);
    rs_proxy_stop(tls);
    rs_stop(&srv);
    rt_remove_certs(&certs);
    return 0;
}
