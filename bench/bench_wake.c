/*
 * Wake-up latency against its floor: a waiter process blocked on a lock
 * another process holds, from the holder's release call to the waiter's
 * acquire returning (and from the release returning), for
 *
 *   raw     the same protocol on bare hiredis, no library: the waiter sits
 *           in a blocking read on its SUBSCRIBE connection and, on the
 *           release message, sends SET NX PX; the holder releases with one
 *           EVAL that deletes the key and publishes;
 *   plain   redmutex's plain lock (redmutex_lock_acquire / _release).
 *
 * Samples alternate between the two, so load drifts hit both alike. The
 * raw series is the floor: what waking two sleeping processes and two round
 * trips cost on this machine, which a loopback PING measured back to back
 * (the round trip given) does not show.
 *
 * Usage: bench_wake [samples]   (starts its own redis-server)
 */
#define _GNU_SOURCE
#include "harness.h"

#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static rs_server srv;

static const char *RELEASE_RAW = "redis.call('del', KEYS[1]); redis.call('publish', KEYS[2], '0'); return 1";

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

static int64_t median(int64_t *v, size_t n)
{
    qsort(v, n, sizeof *v, cmp_i64);
    return v[n / 2];
}

static redisContext *connect_or_die(void)
{
    redisContext *r = redisConnect("127.0.0.1", srv.port);
    if (!r || r->err) {
        fprintf(stderr, "connect: %s\n", r ? r->errstr : "out of memory");
        exit(1);
    }
    return r;
}

static void command_or_die(redisContext *r, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    redisReply *rep = redisvCommand(r, fmt, ap);
    va_end(ap);
    if (!rep) {
        fprintf(stderr, "command failed: %s\n", r->errstr);
        exit(1);
    }
    freeReplyObject(rep);
}

static void put(int fd, int64_t v)
{
    if (write(fd, &v, sizeof v) != sizeof v)
        exit(1);
}

static int64_t get(int fd)
{
    int64_t v;
    if (read(fd, &v, sizeof v) != sizeof v)
        exit(1);
    return v;
}

/* The raw waiter: SET NX PX until it wins, waiting for a release message in between. */
static void raw_wait(redisContext *cmd, redisContext *sub)
{
    for (;;) {
        redisReply *rep = redisCommand(cmd, "SET bench:wake:raw waiter NX PX 30000");
        bool won = rep && rep->type == REDIS_REPLY_STATUS;
        if (rep)
            freeReplyObject(rep);
        if (won)
            return;
        void *msg;
        if (redisGetReply(sub, &msg) != REDIS_OK)
            exit(1);
        freeReplyObject(msg);
    }
}

/* The waiting process: per request (0 raw, 1 plain) it says "started", waits, reports when it acquired,
 * releases. */
static void waiter_main(int in, int out)
{
    redisContext *cmd = connect_or_die(), *sub = connect_or_die();
    command_or_die(sub, "SUBSCRIBE bench:wake:raw:channel");
    redmutex_client *c = rt_client(&srv, 0);
    redmutex_lock *l;
    if (redmutex_lock_new(&l, c, "bench:wake:plain", REDMUTEX_KIND_LOCK, NULL) != 0)
        exit(1);
    int64_t what;
    while ((what = get(in)) >= 0) {
        put(out, now_ns());
        if (what == 0) {
            raw_wait(cmd, sub);
            put(out, now_ns());
            command_or_die(cmd, "DEL bench:wake:raw");
        } else {
            if (redmutex_lock_acquire(l, NULL, REDMUTEX_WAIT_FOREVER) != 0)
                exit(1);
            put(out, now_ns());
            redmutex_lock_release(l, NULL);
        }
    }
    redmutex_lock_free(l);
    redmutex_client_close(c);
    redmutex_client_free(c);
    redisFree(cmd);
    redisFree(sub);
}

static int64_t ping_median(redisContext *r)
{
    int64_t v[200];
    for (int i = 0; i < 200; i++) {
        int64_t t0 = now_ns();
        command_or_die(r, "PING");
        v[i] = now_ns() - t0;
    }
    return median(v, 200);
}

int main(int argc, char **argv)
{
    int samples = argc > 1 ? atoi(argv[1]) : 40;
    if (samples < 1)
        samples = 40;
    rs_start(&srv, NULL);
    int to_child[2], from_child[2];
    if (pipe(to_child) || pipe(from_child))
        return 1;
    pid_t pid = fork();
    if (pid == 0) {
        waiter_main(to_child[0], from_child[1]);
        _exit(0);
    }
    redisContext *r = connect_or_die(), *pinger = connect_or_die();
    redmutex_client *c = rt_client(&srv, 0);
    redmutex_lock *l;
    if (redmutex_lock_new(&l, c, "bench:wake:plain", REDMUTEX_KIND_LOCK, NULL) != 0)
        return 1;
    int64_t *call[2], *ret[2], *rtt = calloc((size_t)samples, sizeof *rtt);
    for (int k = 0; k < 2; k++) {
        call[k] = calloc((size_t)samples, sizeof *call[k]);
        ret[k] = calloc((size_t)samples, sizeof *ret[k]);
    }
    srand((unsigned)getpid());
    for (int s = 0; s < samples; s++) {
        for (int j = 0; j < 2; j++) {
            int k = (s + j) % 2; /* alternate which series goes first */
            if (k == 0)
                command_or_die(r, "SET bench:wake:raw holder NX PX 30000");
            else if (redmutex_lock_acquire(l, NULL, 0) != 0)
                return 1;
            put(to_child[1], k);
            get(from_child[0]);                           /* started: about to block */
            usleep((useconds_t)(30000 + rand() % 50000)); /* it is blocked */
            int64_t t_call = now_ns();
            if (k == 0)
                command_or_die(r, "EVAL %s 2 bench:wake:raw bench:wake:raw:channel", RELEASE_RAW);
            else
                redmutex_lock_release(l, NULL);
            int64_t t_ret = now_ns();
            int64_t t_acq = get(from_child[0]);
            call[k][s] = t_acq - t_call;
            ret[k][s] = t_acq - t_ret;
        }
        rtt[s] = ping_median(pinger);
    }
    put(to_child[1], -1);
    waitpid(pid, NULL, 0);
    double rt = (double)median(rtt, (size_t)samples);
    printf(
        "wake-up: a waiter process blocked on a lock another process holds, %d samples each, interleaved\n",
        samples);
    printf("  round trip (PING back to back, median): %.1f us\n", rt / 1e3);
    const char *names[2] = {"raw hiredis, same protocol (floor)", "redmutex plain lock"};
    int64_t m[2][2];
    for (int k = 0; k < 2; k++) {
        m[k][0] = median(call[k], (size_t)samples);
        m[k][1] = median(ret[k], (size_t)samples);
        printf("  %-36s release called -> acquired p50 %6.1f us (%5.1f RT); release returned -> acquired p50 "
               "%6.1f us (%5.1f RT)\n",
               names[k], m[k][0] / 1e3, m[k][0] / rt, m[k][1] / 1e3, m[k][1] / rt);
    }
    printf("  redmutex / floor: %.2fx from the release call, %.2fx from its return\n",
           (double)m[1][0] / m[0][0], (double)m[1][1] / m[0][1]);
    redmutex_lock_free(l);
    redmutex_client_close(c);
    redmutex_client_free(c);
    redisFree(r);
    redisFree(pinger);
    rs_stop(&srv);
    return 0;
}
