/*
 * The redmutex side of bench/cluster_bench.py (not a test):
 *
 *   bench_cluster pace URL NAME [MIN_REPLICAS]
 *       takes and releases NAME every 10 ms until killed (min_replicas as
 *       given, else the deployment's default); prints "ok T0 T1",
 *       "err T0 T1 CODE" and "rel T0 T1 RC" lines as bench_sentinel does
 *       (CLOCK_MONOTONIC nanoseconds at the call and at its return).
 *   bench_cluster pairs SECONDS ROUNDS URL...
 *       uncontended acquire + release of one name through one client per URL
 *       (at most 8), taking turns of SECONDS each, ROUNDS times. One line per
 *       turn: "turn I PAIRS NS CPU_NS" (I: the URL's index; CPU: this
 *       process, user + system).
 *   bench_cluster moved URL TAG NAMES PAIRS
 *       NAMES names sharing the hash tag {TAG} (one slot); takes and releases
 *       each once, prints "ready", waits for a line on stdin (the driver moves
 *       the slot meanwhile), then does PAIRS pairs on each name and prints
 *       "moved CALLS REQUESTS REDIRECTS REFRESHES": requests answered and
 *       redirects followed by the deployment during those calls.
 *   bench_cluster watchdog URL LOCKS SECONDS
 *       holds LOCKS names spread over every slot (default 30 s lease), prints
 *       "held"; for each "go" line on stdin sleeps SECONDS and prints
 *       "watchdog CPU_NS NS RENEWED LOST"; "quit" releases them and ends.
 *
 * Links the core's internals for rm_deploy_counts (the redirect counter).
 */
#define _GNU_SOURCE
#include "deploy.h"
#include "redmutex.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

static long long now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static long long cpu_ns(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000000LL +
           (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1000LL;
}

static void sleep_until(long long t)
{
    struct timespec ts = {t / 1000000000LL, t % 1000000000LL};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) != 0) {
    }
}

static void wait_line(void)
{
    char buf[64];
    if (!fgets(buf, sizeof buf, stdin))
        exit(3);
}

static redmutex_client *client_with(const char *url, long long min_replicas)
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

static redmutex_client *client(const char *url)
{
    return client_with(url, -1);
}

static redmutex_lock *lock(redmutex_client *c, const char *name)
{
    redmutex_lock *l;
    if (redmutex_lock_new(&l, c, name, REDMUTEX_KIND_RLOCK, NULL) != 0) {
        fprintf(stderr, "lock: %s\n", redmutex_last_error());
        exit(2);
    }
    return l;
}

static int pair(redmutex_lock *l)
{
    if (redmutex_lock_acquire(l, NULL, 0) != 0 || redmutex_lock_release(l, NULL) != 0) {
        fprintf(stderr, "pair: %s\n", redmutex_last_error());
        return -1;
    }
    return 0;
}

static _Noreturn void pace(const char *url, const char *name, long long min_replicas)
{
    redmutex_lock *l = lock(client_with(url, min_replicas), name);
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

static int pairs(double seconds, int rounds, int n, char **urls)
{
    redmutex_client *c[8];
    redmutex_lock *l[8];
    for (int i = 0; i < n; i++) {
        c[i] = client(urls[i]);
        l[i] = lock(c[i], "bench:pairs");
        for (int k = 0; k < 200; k++) /* warm: connections, topology, scripts loaded */
            if (pair(l[i]) != 0)
                return 1;
    }
    for (int r = 0; r < rounds; r++)
        for (int j = 0; j < n; j++) { /* each round starts with the next client: no one always goes first */
            int i = (r + j) % n;
            long long t0 = now_ns(), c0 = cpu_ns(), end = t0 + (long long)(seconds * 1e9), m = 0, t;
            do {
                for (int k = 0; k < 10; k++)
                    if (pair(l[i]) != 0)
                        return 1;
                m += 10;
                t = now_ns();
            } while (t < end);
            printf("turn %d %lld %lld %lld\n", i, m, t - t0, cpu_ns() - c0);
            fflush(stdout);
        }
    for (int i = 0; i < n; i++) {
        redmutex_lock_free(l[i]);
        redmutex_client_free(c[i]);
    }
    return 0;
}

static long long requests(redmutex_client *c)
{
    /* A cluster's nodes are counted as servers of their own (by address), after the URLs'. */
    redmutex_stats st = {.version = REDMUTEX_STATS_VERSION};
    redmutex_client_stats(c, &st);
    long long n = 0;
    for (size_t i = 0; i < st.server_count; i++) {
        redmutex_server_stats s = {.version = REDMUTEX_STATS_VERSION};
        if (redmutex_client_server_stats(c, i, &s) == 0)
            n += (long long)s.round_trip.count;
    }
    return n;
}

static int moved(const char *url, const char *tag, int names, int per_name)
{
    redmutex_client *c = client(url);
    redmutex_lock **l = calloc((size_t)names, sizeof *l);
    char name[128];
    for (int i = 0; i < names; i++) {
        snprintf(name, sizeof name, "bench:moved:{%s}:%d", tag, i);
        l[i] = lock(c, name);
        if (pair(l[i]) != 0)
            return 1;
    }
    printf("ready\n");
    fflush(stdout);
    wait_line();
    uint64_t red0, ref0, red1, ref1;
    rm_deploy_counts(c, 0, &red0, &ref0);
    long long q0 = requests(c);
    for (int k = 0; k < per_name; k++)
        for (int i = 0; i < names; i++)
            if (pair(l[i]) != 0)
                return 1;
    rm_deploy_counts(c, 0, &red1, &ref1);
    printf("moved %d %lld %llu %llu\n", 2 * names * per_name, requests(c) - q0,
           (unsigned long long)(red1 - red0), (unsigned long long)(ref1 - ref0));
    fflush(stdout);
    for (int i = 0; i < names; i++)
        redmutex_lock_free(l[i]);
    free(l);
    redmutex_client_free(c);
    return 0;
}

static int watchdog(const char *url, int locks, double seconds)
{
    redmutex_client *c = client(url);
    redmutex_lock **l = calloc((size_t)locks, sizeof *l);
    char name[32];
    for (int i = 0; i < locks; i++) {
        snprintf(name, sizeof name, "wd:%06d", i);
        l[i] = lock(c, name);
        if (redmutex_lock_acquire(l[i], NULL, 0) != 0) {
            fprintf(stderr, "acquire: %s\n", redmutex_last_error());
            return 1;
        }
    }
    printf("held\n");
    fflush(stdout);
    char cmd[64];
    while (fgets(cmd, sizeof cmd, stdin) && cmd[0] != 'q') { /* one window per "go" line, "quit" ends */
        redmutex_stats s0 = {.version = REDMUTEX_STATS_VERSION}, s1 = {.version = REDMUTEX_STATS_VERSION};
        redmutex_client_stats(c, &s0);
        long long t0 = now_ns(), c0 = cpu_ns();
        sleep_until(t0 + (long long)(seconds * 1e9));
        long long cpu = cpu_ns() - c0, t = now_ns() - t0;
        redmutex_client_stats(c, &s1);
        printf("watchdog %lld %lld %llu %llu\n", cpu, t,
               (unsigned long long)(s1.renewals[REDMUTEX_RENEWAL_RENEWED] -
                                    s0.renewals[REDMUTEX_RENEWAL_RENEWED]),
               (unsigned long long)(s1.locks_lost - s0.locks_lost));
        fflush(stdout);
    }
    for (int i = 0; i < locks; i++) {
        redmutex_lock_release(l[i], NULL);
        redmutex_lock_free(l[i]);
    }
    free(l);
    redmutex_client_free(c);
    return 0;
}

int main(int argc, char **argv)
{
    const char *m = argc > 1 ? argv[1] : "";
    if (strcmp(m, "pace") == 0 && (argc == 4 || argc == 5))
        pace(argv[2], argv[3], argc == 5 ? atoll(argv[4]) : -1);
    if (strcmp(m, "pairs") == 0 && argc >= 5 && argc <= 12)
        return pairs(atof(argv[2]), atoi(argv[3]), argc - 4, argv + 4);
    if (strcmp(m, "moved") == 0 && argc == 6)
        return moved(argv[2], argv[3], atoi(argv[4]), atoi(argv[5]));
    if (strcmp(m, "watchdog") == 0 && argc == 5)
        return watchdog(argv[2], atoi(argv[3]), atof(argv[4]));
    fprintf(stderr, "usage: bench_cluster pace URL NAME [MIN_REPLICAS] | pairs SECONDS ROUNDS URL... |\n"
                    "       moved URL TAG NAMES PAIRS | watchdog URL LOCKS SECONDS\n");
    return 64;
}
