/*
 * The C core's own uncontended pair, for comparison with the language
 * bindings in the same run: acquire+release of one plain lock with the
 * watchdog lease, as `with client.lock(name):` does.
 *
 *   bench_pairs URL SECONDS      prints "<pairs per second> <PING round trip in us>"
 *
 * The round trip (median of raw PINGs on a hiredis connection, measured
 * right after) lets callers split a pair's time into two round trips and
 * the client's own cost.
 */
#define _POSIX_C_SOURCE 200809L
#include <redmutex.h>

#include <hiredis/hiredis.h>

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: %s URL SECONDS\n", argv[0]);
        return 2;
    }
    const char *url = argv[1];
    double seconds = atof(argv[2]);
    redmutex_client *c;
    redmutex_lock *l;
    if (redmutex_client_new(&c, &url, 1, NULL) != 0 ||
        redmutex_lock_new(&l, c, "bench:c-pairs", REDMUTEX_KIND_LOCK, NULL) != 0) {
        fprintf(stderr, "%s\n", redmutex_last_error());
        return 1;
    }
    for (int i = 0; i < 200; i++) { /* warm up */
        redmutex_lock_acquire(l, NULL, REDMUTEX_WAIT_FOREVER);
        redmutex_lock_release(l, NULL);
    }
    long n = 0;
    double start = now_s(), end = start + seconds, t;
    do {
        for (int i = 0; i < 100; i++) {
            if (redmutex_lock_acquire(l, NULL, REDMUTEX_WAIT_FOREVER) != 0 || redmutex_lock_release(l, NULL) != 0) {
                fprintf(stderr, "%s\n", redmutex_last_error());
                return 1;
            }
        }
        n += 100;
        t = now_s();
    } while (t < end);
    /* The URL's host and port, for a raw connection (redis://host:port only). */
    char host[256] = "127.0.0.1";
    int port = 6379;
    sscanf(url, "redis://%255[^:]:%d", host, &port);
    redisContext *raw = redisConnect(host, port);
    double rtt[1001];
    for (int i = 0; i < 1001; i++) {
        double t0 = now_s();
        freeReplyObject(redisCommand(raw, "PING"));
        rtt[i] = now_s() - t0;
    }
    redisFree(raw);
    for (int i = 0; i < 1001; i++) /* insertion sort: small */
        for (int k = i; k > 0 && rtt[k] < rtt[k - 1]; k--) {
            double x = rtt[k];
            rtt[k] = rtt[k - 1];
            rtt[k - 1] = x;
        }
    printf("%.0f %.1f\n", n / (t - start), rtt[500] * 1e6);
    redmutex_lock_free(l);
    redmutex_client_free(c);
    return 0;
}
