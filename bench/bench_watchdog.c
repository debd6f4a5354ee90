/*
 * Watchdog benchmark (figures, not pass/fail): one client holds L locks on
 * one server with the default 30 s lease while the watchdog renews them.
 * Reports round trips per renewal tick, the watchdog's CPU time per minute
 * and heap memory per held lock.
 *
 *   bench_watchdog [locks] [seconds] [lease_ms]     (defaults 10000 60 30000)
 */
#define _GNU_SOURCE
#include "harness.h"

#include <malloc.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

static rs_server srv;

static long long commandstat(const char *cmd, const char *field)
{
    redisReply *r = rs_cmd(&srv, "INFO commandstats");
    long long v = 0;
    char key[64];
    snprintf(key, sizeof key, "cmdstat_%s:", cmd);
    if (r && r->type == REDIS_REPLY_STRING) {
        const char *p = strstr(r->str, key);
        const char *f = p ? strstr(p, field) : NULL;
        if (f)
            v = atoll(f + strlen(field));
    }
    if (r)
        freeReplyObject(r);
    return v;
}

static double cpu_seconds(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_utime.tv_sec + ru.ru_stime.tv_sec + (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

int main(int argc, char **argv)
{
    int locks = argc > 1 ? atoi(argv[1]) : 10000;
    double seconds = argc > 2 ? atof(argv[2]) : 60;
    int64_t lease = argc > 3 ? atoll(argv[3]) : 30000;
    rs_start(&srv, NULL);
    redmutex_client_options o = REDMUTEX_CLIENT_OPTIONS_INIT;
    o.watchdog_lease_ms = lease;
    const char *url = srv.url;
    redmutex_client *c;
    if (redmutex_client_new(&c, &url, 1, &o) != 0)
        return 1;
    redmutex_lock **l = calloc((size_t)locks, sizeof *l);
    char name[32];
    /* Warm up the client (threads, pool), so only per-lock memory is counted. */
    redmutex_lock *warm;
    redmutex_lock_new(&warm, c, "warm", REDMUTEX_KIND_LOCK, NULL);
    redmutex_lock_acquire(warm, NULL, 0);
    size_t heap0 = mallinfo2().uordblks;
    for (int i = 0; i < locks; i++) {
        snprintf(name, sizeof name, "wd:%06d", i);
        if (redmutex_lock_new(&l[i], c, name, i % 2 ? REDMUTEX_KIND_RLOCK : REDMUTEX_KIND_LOCK, NULL) != 0 ||
            redmutex_lock_acquire(l[i], NULL, 0) != 0) {
            fprintf(stderr, "%s\n", redmutex_last_error());
            return 1;
        }
    }
    size_t heap1 = mallinfo2().uordblks;
    double per_lock = (double)(heap1 - heap0) / locks;
    printf("redmutex %s: %d locks held (half plain, half reentrant, names of %zu bytes), lease %lld ms\n",
           redmutex_version(), locks, strlen(name), (long long)lease);
    printf("  heap per held lock: %.0f bytes (handle + hold + watchdog entry, name included)\n", per_lock);

    long long calls0 = commandstat("evalsha", "calls=");
    double cpu0 = cpu_seconds();
    struct timespec ts = {(time_t)seconds, (long)((seconds - (time_t)seconds) * 1e9)};
    nanosleep(&ts, NULL);
    double cpu = cpu_seconds() - cpu0;
    long long calls = commandstat("evalsha", "calls=") - calls0;
    double ticks = seconds * 1000.0 / (lease * 0.3);
    printf("  over %.0f s: %lld renewal script calls, about %.1f renewal ticks -> %.1f calls per tick, %.0f locks per "
           "call\n",
           seconds, calls, ticks, calls / ticks, calls ? (double)locks * ticks / calls : 0.0);
    printf("  watchdog CPU: %.3f s in %.0f s = %.3f%% of one core (%.2f s per minute)\n", cpu, seconds,
           100.0 * cpu / seconds, cpu * 60 / seconds);
    int alive = 0;
    for (int i = 0; i < locks; i += locks / 100 > 0 ? locks / 100 : 1)
        alive += rs_int(&srv, "PTTL wd:%06d", i) > lease / 2;
    printf("  sampled locks still held with more than half a lease left: %d of %d\n", alive,
           (locks + (locks / 100 > 0 ? locks / 100 : 1) - 1) / (locks / 100 > 0 ? locks / 100 : 1));
    for (int i = 0; i < locks; i++) {
        redmutex_lock_release(l[i], NULL);
        redmutex_lock_free(l[i]);
    }
    redmutex_lock_release(warm, NULL);
    redmutex_lock_free(warm);
    redmutex_client_free(c);
    rs_stop(&srv);
    free(l);
    return 0;
}
