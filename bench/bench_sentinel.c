/*
 * The redmutex side of bench/sentinel_failover.py (not a test):
 *
 *   bench_sentinel pace URL MIN_REPLICAS
 *       takes and releases the lock "bench:pace" every 10 ms until killed;
 *       prints one line per acquisition: "ok T0 T1" or "err T0 T1 CODE",
 *       CLOCK_MONOTONIC nanoseconds at the call and at its return, and
 *       "rel T0 T1" for each release.
 *   bench_sentinel pairs URL MIN_REPLICAS SECONDS
 *       uncontended acquire + release of one name for SECONDS: "pairs N NS".
 *
 * MIN_REPLICAS -1 is the deployment's default (1 on Sentinel).
 */
#define _GNU_SOURCE
#include "redmutex.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static long long now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void sleep_until(long long t)
{
    struct timespec ts = {t / 1000000000LL, t % 1000000000LL};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) != 0) {
    }
}

static redmutex_client *client(const char *url, long long min_replicas)
{
    redmutex_client_options o;
    redmutex_client_options_init(&o, REDMUTEX_CLIENT_OPTIONS_VERSION);
    o.min_replicas = min_replicas;
    redmutex_client *c = NULL;
    if (redmutex_client_new(&c, &url, 1, &o) != 0) {
        fprintf(stderr, "client: %s\n", redmutex_last_error());
        exit(2);
    }
    return c;
}

static _Noreturn void pace(redmutex_lock *l)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    for (long long next = now_ns();; next += 10000000LL) {
        long long t0 = now_ns();
        int rc = redmutex_lock_acquire(l, NULL, 0);
        long long t1 = now_ns();
        if (rc == 0) {
            printf("ok %lld %lld\n", t0, t1);
            rc = redmutex_lock_release(l, NULL);
            printf("rel %lld %lld %d\n", t1, now_ns(), rc);
        } else {
            printf("err %lld %lld %d\n", t0, t1, rc);
        }
        if (next < now_ns())
            next = now_ns();
        sleep_until(next + 10000000LL);
    }
}

static int pairs(redmutex_lock *l, double seconds)
{
    long long t0 = now_ns(), end = t0 + (long long)(seconds * 1e9), n = 0, t;
    do {
        for (int i = 0; i < 10; i++)
            if (redmutex_lock_acquire(l, NULL, 0) != 0 || redmutex_lock_release(l, NULL) != 0) {
                fprintf(stderr, "pairs: %s\n", redmutex_last_error());
                return 1;
            }
        n += 10;
        t = now_ns();
    } while (t < end);
    printf("pairs %lld %lld\n", n, t - t0);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 4 || (strcmp(argv[1], "pairs") == 0 && argc < 5)) {
        fprintf(stderr, "usage: bench_sentinel pace URL MIN_REPLICAS | pairs URL MIN_REPLICAS SECONDS\n");
        return 64;
    }
    redmutex_client *c = client(argv[2], atoll(argv[3]));
    redmutex_lock *l;
    const char *name = strcmp(argv[1], "pace") == 0 ? "bench:pace" : "bench:pairs";
    if (redmutex_lock_new(&l, c, name, REDMUTEX_KIND_RLOCK, NULL) != 0)
        return 2;
    if (strcmp(argv[1], "pace") == 0)
        pace(l);
    int rc = pairs(l, atof(argv[4]));
    redmutex_lock_free(l);
    redmutex_client_free(c);
    return rc;
}
