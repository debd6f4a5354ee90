/*
 * Redlock benchmark (figures, not pass/fail): uncontended acquire+release pair
 * latency of a plain lock on N = 5 independent servers, against the same pair
 * on one server, and against a sequential fan-out (each of the five servers
 * asked in turn, which is what sequential Redlock clients do), all in one
 * run, interleaved.   bench_redlock [seconds]
 */
#define _GNU_SOURCE
#include "harness.h"

#include <string.h>
#include <time.h>

#define N 5
static rs_server srv[N];

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int cmp(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

static int64_t p(int64_t *v, size_t n, double q)
{
    qsort(v, n, sizeof *v, cmp);
    return v[(size_t)(q / 100 * (double)(n - 1))];
}

static redmutex_lock *make(redmutex_client **c, const char **urls, size_t n, const char *name)
{
    if (redmutex_client_new(c, urls, n, NULL) != 0)
        exit(1);
    redmutex_lock_options o = REDMUTEX_LOCK_OPTIONS_INIT;
    o.lease_ms = 10000;
    redmutex_lock *l;
    if (redmutex_lock_new(&l, *c, name, REDMUTEX_KIND_LOCK, &o) != 0)
        exit(1);
    return l;
}

static void must(int rc)
{
    if (rc != 0) {
        fprintf(stderr, "%s\n", redmutex_last_error());
        exit(1);
    }
}

int main(int argc, char **argv)
{
    double seconds = argc > 1 ? atof(argv[1]) : 5;
    const char *urls[N];
    for (int i = 0; i < N; i++) {
        rs_start(&srv[i], NULL);
        urls[i] = srv[i].url;
    }
    redmutex_client *c1, *c5, *seq_c[N];
    redmutex_lock *single = make(&c1, urls, 1, "rl:single");
    redmutex_lock *quorum = make(&c5, urls, N, "rl:quorum");
    redmutex_lock *seq[N];
    for (int i = 0; i < N; i++)
        seq[i] = make(&seq_c[i], &urls[i], 1, "rl:sequential");
    size_t cap = 1000000, n1 = 0, n5 = 0, ns = 0;
    int64_t *t1 = malloc(cap * 8), *t5 = malloc(cap * 8), *ts = malloc(cap * 8);
    for (int w = 0; w < 300; w++) {
        must(redmutex_lock_acquire(single, NULL, 0));
        must(redmutex_lock_release(single, NULL));
        must(redmutex_lock_acquire(quorum, NULL, 0));
        must(redmutex_lock_release(quorum, NULL));
    }
    int64_t end = now_ns() + (int64_t)(seconds * 1e9);
    while (now_ns() < end && n1 + 100 < cap) {
        for (int k = 0; k < 100; k++) {
            int64_t t = now_ns();
            must(redmutex_lock_acquire(single, NULL, 0));
            must(redmutex_lock_release(single, NULL));
            t1[n1++] = now_ns() - t;
        }
        for (int k = 0; k < 100; k++) {
            int64_t t = now_ns();
            must(redmutex_lock_acquire(quorum, NULL, 0));
            must(redmutex_lock_release(quorum, NULL));
            t5[n5++] = now_ns() - t;
        }
        for (int k = 0; k < 100; k++) {
            int64_t t = now_ns();
            for (int i = 0; i < N; i++)
                must(redmutex_lock_acquire(seq[i], NULL, 0));
            for (int i = 0; i < N; i++)
                must(redmutex_lock_release(seq[i], NULL));
            ts[ns++] = now_ns() - t;
        }
    }
    int64_t a = p(t1, n1, 50), b = p(t5, n5, 50), s = p(ts, ns, 50);
    printf("redmutex %s: uncontended acquire+release pairs, plain lock, %zu of each, interleaved\n",
           redmutex_version(), n1);
    printf("  one server                     p50 %7.1f us  p99 %7.1f us\n", a / 1e3, p(t1, n1, 99) / 1e3);
    printf("  Redlock N=5, parallel fan-out  p50 %7.1f us  p99 %7.1f us  = %.2fx one server\n", b / 1e3,
           p(t5, n5, 99) / 1e3, (double)b / a);
    printf("  N=5 asked one after another    p50 %7.1f us  p99 %7.1f us  = %.2fx one server\n", s / 1e3,
           p(ts, ns, 99) / 1e3, (double)s / a);
    redmutex_lock_free(single);
    redmutex_lock_free(quorum);
    redmutex_client_free(c1);
    redmutex_client_free(c5);
    for (int i = 0; i < N; i++) {
        redmutex_lock_free(seq[i]);
        redmutex_client_free(seq_c[i]);
        rs_stop(&srv[i]);
    }
    return 0;
}
