/*
 * The fair lock's hand-off cost against the length of its queue: N threads
 * of one process (one client) wait on one fair lock and each holds it for a
 * critical section of 1 ms, for 16, 128 and 256 threads. Per acquisition it
 * reports what the server did, from `INFO commandstats` deltas (the server
 * is this program's own):
 *
 *   scripts   EVAL/EVALSHA/FCALL calls (acquire, release, leave, extend...)
 *   Lua µs    the time the server spent in them
 *   commands  every command the server ran, the scripts' own calls included
 *
 * A hand-off by the releasing script costs one release plus the acquire
 * that put the waiter in the queue; anything above two scripts is waiters
 * trying out of turn. With --redisson CLASSPATH the same run also drives
 * Redisson's RFairLock (bench/peers/java, FairHandoff.java: one
 * RedissonClient, N threads, lock() / 1 ms / unlock()) against the same
 * server, series by series.
 *
 * Usage: bench_fair [--commands] [--redisson CLASSPATH] [seconds] [threads...]
 *        (defaults: 5 s; 16 128 256)
 *
 * The Redisson peer, built as bench/peers/run builds it (Maven), here with Redisson 3.29.0:
 *   rm -rf build-peers/java && cp -r bench/peers/java build-peers/java &&
 *   (cd build-peers/java && mvn -q -B package -DskipTests -Dredisson.version=3.29.0)
 *   build-rel/bench/bench_fair --redisson "$CP"
 * where CP is build-peers/java/target/redisson-bench-peer-1.0.0.jar, a colon, and
 * build-peers/java/target/lib/ followed by a star (java's "every jar in it").
 */
#define _GNU_SOURCE
#include "harness.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define HOLD_US 1000

static rs_server srv;

typedef struct stats {
    long long scripts, script_us, commands;
} stats;

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Sums the INFO commandstats lines: all commands, and the scripts among them. */
static stats server_stats(void)
{
    stats s = {0, 0, 0};
    redisReply *r = rs_cmd(&srv, "INFO commandstats");
    for (char *line = r->str; line && *line;) {
        char *end = strchr(line, '\n');
        char name[64];
        long long calls = 0, usec = 0;
        if (sscanf(line, "cmdstat_%63[^:]:calls=%lld,usec=%lld", name, &calls, &usec) == 3) {
            s.commands += calls;
            if (!strcmp(name, "eval") || !strcmp(name, "evalsha") || !strcmp(name, "eval_ro") ||
                !strcmp(name, "evalsha_ro") || !strcmp(name, "fcall")) {
                s.scripts += calls;
                s.script_us += usec;
            }
        }
        line = end ? end + 1 : NULL;
    }
    freeReplyObject(r);
    return s;
}

/* The counts since the series began (CONFIG RESETSTAT), command by command: where the server's time went. */
static void dump_stats(void)
{
    redisReply *r = rs_cmd(&srv, "INFO commandstats");
    printf("%s\n", r && r->str ? r->str : "(no INFO)");
    freeReplyObject(r);
}

typedef struct board {
    redmutex_client *c;
    int64_t start_ns, end_ns;
    atomic_long acquired, failed, violations;
    atomic_int inside, ready;
} board;

static void *worker(void *p)
{
    board *b = p;
    redmutex_lock_options o = REDMUTEX_LOCK_OPTIONS_INIT; /* the watchdog lease, as by default */
    redmutex_lock *l;
    if (redmutex_lock_new(&l, b->c, "bench:fair", REDMUTEX_KIND_FAIR, &o) != 0) {
        fprintf(stderr, "lock: %s\n", redmutex_last_error());
        exit(1);
    }
    atomic_fetch_add(&b->ready, 1);
    while (now_ns() < b->start_ns) {
        struct timespec ts = {0, 100000};
        nanosleep(&ts, NULL);
    }
    while (now_ns() < b->end_ns) {
        if (redmutex_lock_acquire(l, NULL, 60000) != 0) {
            atomic_fetch_add(&b->failed, 1);
            fprintf(stderr, "acquire: %s\n", redmutex_last_error());
            continue;
        }
        if (atomic_fetch_add(&b->inside, 1) != 0)
            atomic_fetch_add(&b->violations, 1);
        struct timespec ts = {0, HOLD_US * 1000};
        nanosleep(&ts, NULL);
        atomic_fetch_sub(&b->inside, 1);
        atomic_fetch_add(&b->acquired, 1);
        redmutex_lock_release(l, NULL);
    }
    redmutex_lock_free(l);
    return NULL;
}

/* Runs n threads for `seconds`; returns the acquisitions. */
static long run_redmutex(int n, double seconds, long *violations)
{
    const char *url = srv.url;
    board b = {0};
    if (redmutex_client_new(&b.c, &url, 1, NULL) != 0) {
        fprintf(stderr, "%s\n", redmutex_last_error());
        exit(1);
    }
    pthread_t *t = calloc((size_t)n, sizeof *t);
    b.start_ns = now_ns() + 2000000000LL; /* every thread started and waiting by then */
    b.end_ns = b.start_ns + (int64_t)(seconds * 1e9);
    for (int i = 0; i < n; i++)
        pthread_create(&t[i], NULL, worker, &b);
    for (int i = 0; i < n; i++)
        pthread_join(t[i], NULL);
    free(t);
    redmutex_client_free(b.c);
    *violations = atomic_load(&b.violations) + atomic_load(&b.failed);
    return atomic_load(&b.acquired);
}

/* Runs the Redisson peer; it prints "acquired N" when done. */
static long run_redisson(const char *cp, int n, double seconds)
{
    char url[128], threads[16], secs[32], hold[16], cmd[4096];
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", srv.port);
    snprintf(threads, sizeof threads, "%d", n);
    snprintf(secs, sizeof secs, "%g", seconds);
    snprintf(hold, sizeof hold, "%d", HOLD_US);
    snprintf(cmd, sizeof cmd, "java -cp '%s' redmutex.bench.FairHandoff %s %s %s %s 2>/dev/null", cp, url,
             threads, secs, hold);
    FILE *f = popen(cmd, "r");
    long got = -1;
    char line[256];
    while (f && fgets(line, sizeof line, f))
        sscanf(line, "acquired %ld", &got);
    if (!f || pclose(f) != 0 || got < 0) {
        fprintf(stderr, "the Redisson peer failed; run it alone to see why: %s\n", cmd);
        exit(1);
    }
    return got;
}

static void report(const char *who, int n, long acq, long bad, double seconds, stats d)
{
    double a = acq > 0 ? (double)acq : 1.0;
    printf("| %s | %d | %ld | %.0f | %.2f | %.0f | %.1f | %ld |\n", who, n, acq, (double)acq / seconds,
           (double)d.scripts / a, (double)d.script_us / a, (double)d.commands / a, bad);
    fflush(stdout);
}

static stats delta(stats a, stats b)
{
    return (stats){b.scripts - a.scripts, b.script_us - a.script_us, b.commands - a.commands};
}

int main(int argc, char **argv)
{
    const char *redisson = NULL;
    int k = 1;
    bool dump = false; /* --commands: each series' INFO commandstats as the server gave it */
    if (k < argc && !strcmp(argv[k], "--commands")) {
        dump = true;
        k++;
    }
    if (k + 1 < argc && !strcmp(argv[k], "--redisson")) {
        redisson = argv[k + 1];
        k += 2;
    }
    double seconds = k < argc ? atof(argv[k++]) : 5.0;
    int sizes[16], ns = 0;
    for (; k < argc && ns < 16; k++)
        sizes[ns++] = atoi(argv[k]);
    if (ns == 0) {
        sizes[0] = 16, sizes[1] = 128, sizes[2] = 256;
        ns = 3;
    }
    rs_start(&srv, NULL);
    printf("fair lock, N threads of one process, 1 ms critical section, %g s per series (per acquisition: "
           "scripts, server µs in them, all commands)\n\n",
           seconds);
    printf("| library | threads | acquisitions | per s | scripts | Lua µs | commands | errors |\n");
    printf("|---|---:|---:|---:|---:|---:|---:|---:|\n");
    for (int i = 0; i < ns; i++) {
        long bad = 0;
        freeReplyObject(rs_cmd(&srv, "FLUSHALL"));
        freeReplyObject(rs_cmd(&srv, "CONFIG RESETSTAT"));
        stats s0 = server_stats();
        long acq = run_redmutex(sizes[i], seconds, &bad);
        report("redmutex", sizes[i], acq, bad, seconds, delta(s0, server_stats()));
        if (dump)
            dump_stats();
        if (redisson) {
            freeReplyObject(rs_cmd(&srv, "FLUSHALL"));
            freeReplyObject(rs_cmd(&srv, "CONFIG RESETSTAT"));
            s0 = server_stats();
            acq = run_redisson(redisson, sizes[i], seconds);
            report("Redisson", sizes[i], acq, 0, seconds, delta(s0, server_stats()));
            if (dump)
                dump_stats();
        }
    }
    rs_stop(&srv);
    return 0;
}
