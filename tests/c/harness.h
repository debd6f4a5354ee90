/*
 * Test harness for the C tests: a tiny runner, condition waits with
 * deadlines, and real redis-server processes started on free loopback ports
 * (they die with the test process, even if it crashes).
 */
#ifndef REDMUTEX_TEST_HARNESS_H
#define REDMUTEX_TEST_HARNESS_H

#include <hiredis/hiredis.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/types.h>

#include "redmutex.h"

/* ---- runner ------------------------------------------------------------ */

typedef struct rt_test {
    const char *name;
    void (*fn)(void);
} rt_test;

int rt_run(const rt_test *tests, size_t n, int argc, char **argv);
/*
 * rt_run, where the cases named in `alone` (NULL-terminated) compare timings
 * measured over seconds, so nothing may run beside them: RT_ALONE=only in the
 * environment runs only those, RT_ALONE=skip all others (ctest runs the two
 * halves as two tests, the first with RUN_SERIAL); unset, every case runs.
 */
int rt_run_marked(const rt_test *tests, size_t n, const char *const *alone, int argc, char **argv);
void rt_fail(const char *file, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4), noreturn));

#define CHECK(cond)                                                                                                    \
    do {                                                                                                               \
        if (!(cond))                                                                                                   \
            rt_fail(__FILE__, __LINE__, "CHECK(%s) failed", #cond);                                                    \
    } while (0)

#define CHECKF(cond, ...)                                                                                              \
    do {                                                                                                               \
        if (!(cond))                                                                                                   \
            rt_fail(__FILE__, __LINE__, __VA_ARGS__);                                                                  \
    } while (0)

/* Expects a redmutex call to return `want`; prints the library's message otherwise. */
#define CHECK_RC(expr, want)                                                                                           \
    do {                                                                                                               \
        int rt_rc_ = (expr);                                                                                           \
        if (rt_rc_ != (want))                                                                                          \
            rt_fail(__FILE__, __LINE__, "%s returned %d (%s: %s), expected %d (%s)", #expr, rt_rc_,                    \
                    redmutex_strerror(rt_rc_), redmutex_last_error(), (int)(want), redmutex_strerror(want));           \
    } while (0)

#define CHECK_OK(expr) CHECK_RC(expr, REDMUTEX_OK)

/*
 * A time bound of a test, stretched by the REDMUTEX_TEST_TIME_SCALE
 * environment variable (a number >= 1, default 1). Runs under valgrind set
 * it: code there runs tens of times slower, so upper bounds on how long
 * something may take get the slack they need, while what is asserted stays
 * the same. Lower bounds are not scaled.
 */
int64_t rt_scaled_ms(int64_t ms);
double rt_time_scale(void);

/* Waits until cond is true, failing the test after ms milliseconds (scaled). */
#define WAIT_FOR(cond, ms)                                                                                             \
    do {                                                                                                               \
        int64_t rt_deadline_ = rt_now_ms() + rt_scaled_ms(ms);                                                         \
        while (!(cond)) {                                                                                              \
            if (rt_now_ms() > rt_deadline_)                                                                            \
                rt_fail(__FILE__, __LINE__, "timed out after %d ms waiting for %s", (int)(ms), #cond);                 \
            rt_sleep_ms(2);                                                                                            \
        }                                                                                                              \
    } while (0)

int64_t rt_now_ms(void);
/* A loopback TCP port nothing listens on right now, from a block of ports this process alone hands out
   (harness.c): a port a stopped server gives back is not taken by another test program meanwhile. */
int rt_free_port(void);
int64_t rt_now_us(void);
void rt_sleep_ms(int64_t ms);

/* ---- redis servers --------------------------------------------------------- */

typedef struct rs_server {
    pid_t pid;
    int port; /* plain-text port; 0 for a TLS-only server */
    char dir[256];
    char unix_path[300];
    char url[128];
    char extra[2048];
    int tls_port;  /* TLS port, 0 without TLS */
    bool keep;     /* rs_keep: left running between the tests of a binary */
    bool sentinel; /* rs_start_sentinel: runs with --sentinel */
} rs_server;

/*
 * The server binary the tests run: the path of $REDMUTEX_TEST_SERVER (a
 * valkey-server, say: scripts/valkey.sh fetches one), else of redis-server on
 * PATH. Fails the test when there is none (never a skip), as tests/rmserver.py
 * does for the other suites.
 */
const char *rt_server_binary(void);
/* Keeps s running between the tests of this binary (a cluster made once); it still dies with the process. */
void rs_keep(rs_server *s);

/* Starts the server (rt_server_binary) with optional extra config lines ("key value\n..."). Fails the test on error. */
void rs_start(rs_server *s, const char *extra_config);
/* The same server binary in Sentinel mode (--sentinel), its config ("sentinel monitor ...") in extra_config. */
void rs_start_sentinel(rs_server *s, const char *extra_config);

/* ---- TLS ----------------------------------------------------------------- */

/* Certificates made by tests/tls/make_certs.sh (see there) in a temporary directory. */
typedef struct rt_certs {
    char dir[256];
} rt_certs;
void rt_make_certs(rt_certs *c);
/* The path of one file of the set, e.g. rt_cert(&certs, "ca.pem"); a static buffer per call site is not needed: 8
 * rotate. */
const char *rt_cert(const rt_certs *c, const char *file);
void rt_remove_certs(rt_certs *c);

typedef struct rs_tls_config {
    const char *cert, *key;   /* the server's certificate and key (file names in the cert set) */
    bool require_client_cert; /* tls-auth-clients yes (mutual TLS, clients signed by ca.pem) */
    bool plain_port;          /* also listen in plain text (s->port); else TLS only */
} rs_tls_config;

/*
 * Starts a redis-server with TLS on s->tls_port (certificates from `certs`).
 * The harness's own commands (rs_cmd, rs_int...) reach it over its Unix
 * socket, so they work on a TLS-only server too. s->url is rediss://127.0.0.1:tls_port.
 */
void rs_start_tls(rs_server *s, const rt_certs *certs, const rs_tls_config *tls, const char *extra_config);
/* Restarts a stopped server on the same port and directory. */
void rs_restart(rs_server *s);
/* SIGKILLs the server and reaps it. */
void rs_kill(rs_server *s);
/* SIGKILL + remove its directory. Safe to call twice. */
void rs_stop(rs_server *s);
void rs_pause(rs_server *s);
void rs_resume(rs_server *s);

/* A raw hiredis command on a fresh connection; NULL when the server is unreachable. Free with freeReplyObject. */
redisReply *rs_cmd(rs_server *s, const char *fmt, ...);
/* Shorthands: integer reply (or -999 on error), and whether a key exists. */
long long rs_int(rs_server *s, const char *fmt, ...);
/* A reply as a number, whether an integer, a string (GET, HGET) or nil (0); -999 otherwise. */
long long rs_num(rs_server *s, const char *fmt, ...);
bool rs_exists(rs_server *s, const char *key);
/* Subscribers of a channel (PUBSUB NUMSUB). */
long long rs_numsub(rs_server *s, const char *channel);
/* Keys matching a pattern. */
long long rs_count_keys(rs_server *s, const char *pattern);

/*
 * A TCP proxy in front of a server that holds back, for delay_ms, any
 * client->server chunk containing `pattern` (the SHA of one script, say):
 * it makes "a renewal is in flight" happen on demand. Everything else
 * passes at once. `delayed` counts the chunks held back.
 */
typedef struct rs_proxy {
    int listen_fd;
    int port;
    _Atomic int upstream_port; /* may be changed: connections accepted from then on go there */
    char pattern[64];
    int delay_ms;
    bool delay_all;       /* every chunk, both ways (flight counting) */
    int delay_us;         /* ... by this much */
    _Atomic int flights;  /* client->server chunks that follow server->client traffic */
    _Atomic int last_dir; /* 1 client->server, 2 server->client */
    _Atomic int delayed;
    _Atomic int forwarded;   /* held-back chunks passed on */
    _Atomic int hold_until;  /* > 0: hold chunks only while delayed < hold_until; < 0: hold none */
    _Atomic bool cut_client; /* close the client's side when a chunk is held back (it is still passed on) */
    _Atomic bool drop_held;  /* ... and a held-back chunk is never passed on (a request lost with its connection) */
    _Atomic int stop;
    char url[64];
} rs_proxy;

rs_proxy *rs_proxy_start(const rs_server *upstream, const char *pattern, int delay_ms);
void rs_proxy_stop(rs_proxy *p);

/*
 * A proxy to 127.0.0.1:upstream_port that delays every chunk by delay_us in
 * each direction (a network with a round trip of 2 * delay_us, chunks in
 * flight together) and counts the client's flights: a flight is what the
 * client sends before it hears from the server again, so the count is the
 * number of round trips the client waited for. Read p->flights.
 */
rs_proxy *rs_flight_proxy_start(int upstream_port, int delay_us);

/* A client for one server with default options (command timeout adjustable). */
redmutex_client *rt_client(const rs_server *s, int64_t command_timeout_ms);

#endif
