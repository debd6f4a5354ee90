/*
 * What counting statistics costs (not a test: figures, not pass/fail).
 *
 * Two ways, in one run against its own redis-server:
 *  - end to end: uncontended acquire+release pairs of a plain lock through
 *    a client that counts and one made with REDMUTEX_CLIENT_NO_STATS,
 *    alternating short blocks in a shuffled order (drifts of a shared
 *    machine hit both alike); the median time per pair of each, and the
 *    median of the per-round ratios;
 *  - the counting alone: the hooks one pair runs (an acquisition, a hold's
 *    begin and end, two answered requests) and the four clock reads that
 *    time its two requests, in a tight loop, in ns per pair, against the
 *    same run's pair time. (The clock reads happen with counting off too,
 *    so the end-to-end ratio does not see them.)
 *
 * Usage: bench_stats [rounds]    (default 40 rounds of 2 x 400 pairs)
 */
#define _GNU_SOURCE
#include "harness.h"
#include "stats.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static rs_server srv;

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, size_t n)
{
    qsort(v, n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static redmutex_lock *new_lock(uint32_t flags, const char *name)
{
    redmutex_client_options o = REDMUTEX_CLIENT_OPTIONS_INIT;
    o.flags = flags;
    const char *url = srv.url;
    redmutex_client *c;
    redmutex_lock *l;
    if (redmutex_client_new(&c, &url, 1, &o) != 0 || redmutex_lock_new(&l, c, name, REDMUTEX_KIND_LOCK, NULL) != 0) {
        fprintf(stderr, "%s\n", redmutex_last_error());
        exit(1);
    }
    /* the client stays open for the whole run (freeing it would close it) */
    return l;
}

/* ns per pair over n pairs. */
static double pairs(redmutex_lock *l, int n)
{
    int64_t t0 = now_ns();
    for (int i = 0; i < n; i++)
        if (redmutex_lock_acquire(l, NULL, 0) != 0 || redmutex_lock_release(l, NULL) != 0) {
            fprintf(stderr, "%s\n", redmutex_last_error());
            exit(1);
        }
    return (double)(now_ns() - t0) / n;
}

/* ns per pair of the counting a pair does, alone. */
static double hooks_alone(void)
{
    redmutex_client_options o = REDMUTEX_CLIENT_OPTIONS_INIT;
    rm_stats st;
    memset(&st, 0, sizeof st);
    rm_stats_init(&st, &o);
    rm_stats_server *sv = rm_stats_server_for(&st, "redis://127.0.0.1:6379/0");
    const int n = 2000000;
    volatile int64_t sink = 0;
    int64_t t0 = now_ns();
    for (int i = 0; i < n; i++) {
        /* The fan-out times each request (sent, last reply), counting or not: four clock reads a pair. */
        sink += rm_now_ns() + rm_now_ns() + rm_now_ns() + rm_now_ns();
        int64_t start = rm_now_ns();                            /* acquire's own start (it has one anyway) */
        rm_stats_server_done(sv, 0, false, 40000, NULL);        /* the acquire's round trip */
        rm_stats_hold_begin(&st);
        rm_stats_acquire(&st, REDMUTEX_KIND_LOCK, 0, start);
        rm_stats_server_done(sv, 0, false, 40000, NULL);        /* the release's round trip */
        rm_stats_hold_end(&st, REDMUTEX_KIND_LOCK, start, false);
    }
    double per = (double)(now_ns() - t0) / n;
    (void)sink;
    rm_stats_destroy(&st);
    return per;
}

int main(int argc, char **argv)
{
    int rounds = argc > 1 ? atoi(argv[1]) : 40;
    const int block = 400;
    rs_start(&srv, NULL);
    redmutex_lock *on = new_lock(0, "bench:stats-on");
    redmutex_lock *off = new_lock(REDMUTEX_CLIENT_NO_STATS, "bench:stats-off");
    pairs(on, 500); /* warm up both */
    pairs(off, 500);
    double *t_on = calloc((size_t)rounds, sizeof *t_on), *t_off = calloc((size_t)rounds, sizeof *t_off);
    double *ratio = calloc((size_t)rounds, sizeof *ratio);
    srand((unsigned)now_ns());
    for (int r = 0; r < rounds; r++) {
        if (rand() % 2) {
            t_on[r] = pairs(on, block);
            t_off[r] = pairs(off, block);
        } else {
            t_off[r] = pairs(off, block);
            t_on[r] = pairs(on, block);
        }
        ratio[r] = t_on[r] / t_off[r];
    }
    double hooks = hooks_alone();
    double m_on = median(t_on, (size_t)rounds), m_off = median(t_off, (size_t)rounds);
    double m_ratio = median(ratio, (size_t)rounds);
    printf("pairs: %d rounds of %d pairs each way, interleaved in a shuffled order\n", rounds, block);
    printf("counting on:  %.1f us per pair (median of rounds)\n", m_on / 1000);
    printf("counting off: %.1f us per pair (median of rounds)\n", m_off / 1000);
    printf("on / off:     %.4f (median of the per-round ratios): %+.2f %%\n", m_ratio, (m_ratio - 1) * 100);
    printf("the counting of one pair alone: %.0f ns = %.2f %% of a pair\n", hooks, hooks / m_off * 100);
    redmutex_lock_free(on);
    redmutex_lock_free(off);
    free(t_on);
    free(t_off);
    free(ratio);
    rs_stop(&srv);
    return 0;
}
