/*
 * Single-server lock benchmarks (not a test: figures, not pass/fail).
 *
 *  pair      uncontended acquire+release of a plain lock, against the floor of
 *            two raw round trips (SET NX PX, DEL) on a hiredis connection to the
 *            same server, measured interleaved in the same run.
 *  contend   W worker processes, one lock, a 1 ms critical section: lock
 *            utilisation, hand-off latency from release to the next acquire,
 *            and fairness (fewest / most acquisitions per worker).
 *
 *  fair      the contention run of the fair lock only (processes, then threads).
 *  rw        W processes holding the read side for 1 ms each, against the same
 *            work under the write side (throughput ratio, interleaved rounds).
 *
 * It starts its own redis-server. Usage: bench_lock [pair|contend|fair|rw|all] [seconds]
 */
#define _GNU_SOURCE
#include "harness.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

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

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

static int64_t pct(int64_t *v, size_t n, double p)
{
    qsort(v, n, sizeof *v, cmp_i64);
    size_t i = (size_t)(p / 100.0 * (double)(n - 1) + 0.5);
    return v[i];
}

static redmutex_client *client(void)
{
    const char *url = srv.url;
    redmutex_client *c;
    if (redmutex_client_new(&c, &url, 1, NULL) != 0) {
        fprintf(stderr, "%s\n", redmutex_last_error());
        exit(1);
    }
    return c;
}

static redmutex_lock *plain_lock(redmutex_client *c, const char *name, redmutex_kind kind, int64_t lease_ms)
{
    redmutex_lock_options o = REDMUTEX_LOCK_OPTIONS_INIT;
    o.lease_ms = lease_ms;
    redmutex_lock *l;
    if (redmutex_lock_new(&l, c, name, kind, &o) != 0)
        exit(1);
    return l;
}

/* ---- pair latency --------------------------------------------------------- */

static void bench_pair(double seconds)
{
    redmutex_client *c = client();
    redmutex_lock *plain = plain_lock(c, "bench:pair", REDMUTEX_KIND_LOCK, 10000);
    redmutex_lock *reentrant = plain_lock(c, "bench:rpair", REDMUTEX_KIND_RLOCK, 10000);
    redisContext *raw = redisConnect("127.0.0.1", srv.port);
    enum { BLOCK = 200 };
    size_t cap = 2000000;
    int64_t *floor_ns = malloc(cap * sizeof *floor_ns), *pair_ns = malloc(cap * sizeof *pair_ns);
    int64_t *rpair_ns = malloc(cap * sizeof *rpair_ns), *ping_ns = malloc(cap * sizeof *ping_ns);
    size_t nf = 0, np = 0, nr = 0, nping = 0;
    /* warm up: connections, script cache */
    for (int i = 0; i < 1000; i++) {
        redmutex_lock_acquire(plain, NULL, 0);
        redmutex_lock_release(plain, NULL);
        redmutex_lock_acquire(reentrant, NULL, 0);
        redmutex_lock_release(reentrant, NULL);
    }
    int64_t end = now_ns() + (int64_t)(seconds * 1e9);
    /* Interleave blocks so drifts of the machine hit all series alike. */
    while (now_ns() < end && np + BLOCK < cap) {
        for (int i = 0; i < BLOCK; i++) {
            int64_t t0 = now_ns();
            redisReply *r1 = redisCommand(raw, "SET bench:raw tok NX PX 10000");
            redisReply *r2 = redisCommand(raw, "DEL bench:raw");
            floor_ns[nf++] = now_ns() - t0;
            freeReplyObject(r1);
            freeReplyObject(r2);
        }
        for (int i = 0; i < BLOCK; i++) {
            int64_t t0 = now_ns();
            redisReply *r = redisCommand(raw, "PING");
            ping_ns[nping++] = now_ns() - t0;
            freeReplyObject(r);
        }
        for (int i = 0; i < BLOCK; i++) {
            int64_t t0 = now_ns();
            if (redmutex_lock_acquire(plain, NULL, 0) || redmutex_lock_release(plain, NULL)) {
                fprintf(stderr, "%s\n", redmutex_last_error());
                exit(1);
            }
            pair_ns[np++] = now_ns() - t0;
        }
        for (int i = 0; i < BLOCK; i++) {
            int64_t t0 = now_ns();
            if (redmutex_lock_acquire(reentrant, NULL, 0) || redmutex_lock_release(reentrant, NULL)) {
                fprintf(stderr, "%s\n", redmutex_last_error());
                exit(1);
            }
            rpair_ns[nr++] = now_ns() - t0;
        }
    }
    int64_t f50 = pct(floor_ns, nf, 50), p50 = pct(pair_ns, np, 50), r50 = pct(rpair_ns, nr, 50);
    int64_t ping50 = pct(ping_ns, nping, 50);
    printf("pair latency (uncontended acquire+release, %zu pairs each, interleaved)\n", np);
    printf("  round trip (PING)                      p50 %6.1f us\n", ping50 / 1e3);
    printf("  floor: raw SET NX PX + DEL (hiredis)   p50 %6.1f us  p99 %6.1f us\n", f50 / 1e3,
           pct(floor_ns, nf, 99) / 1e3);
    printf("  redmutex plain lock                    p50 %6.1f us  p99 %6.1f us  = %.2fx floor\n", p50 / 1e3,
           pct(pair_ns, np, 99) / 1e3, (double)p50 / (double)f50);
    printf("  redmutex reentrant lock                p50 %6.1f us  p99 %6.1f us  = %.2fx floor\n", r50 / 1e3,
           pct(rpair_ns, nr, 99) / 1e3, (double)r50 / (double)f50);
    redisFree(raw);
    redmutex_lock_free(plain);
    redmutex_lock_free(reentrant);
    redmutex_client_free(c);
    free(floor_ns);
    free(pair_ns);
    free(rpair_ns);
    free(ping_ns);
}

/* ---- contention ----------------------------------------------------------- */

#define MAX_EVENTS 200000

typedef struct event {
    int64_t acquired_ns;  /* acquire returned */
    int64_t releasing_ns; /* release called */
    int64_t released_ns;  /* release returned */
    int worker;
} event;

typedef struct board {
    atomic_long next;
    atomic_int inside;
    atomic_int most_inside; /* readers: most holding the lock at once */
    atomic_int violations;
    atomic_int ready;
    int64_t start_ns, end_ns;
    event ev[MAX_EVENTS];
} board;

static const char *kind_name(redmutex_kind kind)
{
    switch (kind) {
    case REDMUTEX_KIND_LOCK:
        return "plain";
    case REDMUTEX_KIND_RLOCK:
        return "reentrant";
    case REDMUTEX_KIND_FAIR:
        return "fair (watchdog lease)";
    case REDMUTEX_KIND_READ:
        return "read-write, read side";
    case REDMUTEX_KIND_WRITE:
        return "read-write, write side";
    default:
        return "?";
    }
}

static void contend_worker(board *b, int id, redmutex_client *c, redmutex_kind kind, int64_t hold_us)
{
    /* The fair and read-write locks run with the watchdog, as by default
       (a fair lock's hand-offs are then made by the releasing script). */
    redmutex_lock *l = plain_lock(c, "bench:contend", kind, kind >= REDMUTEX_KIND_FAIR ? 0 : 10000);
    atomic_fetch_add(&b->ready, 1);
    while (now_ns() < b->start_ns) {
        struct timespec ts = {0, 100000};
        nanosleep(&ts, NULL);
    }
    while (now_ns() < b->end_ns) {
        if (redmutex_lock_acquire(l, NULL, 5000) != 0) {
            fprintf(stderr, "worker %d: %s\n", id, redmutex_last_error());
            continue;
        }
        int64_t got = now_ns();
        int in = atomic_fetch_add(&b->inside, 1) + 1;
        if (kind == REDMUTEX_KIND_READ) {
            int most = atomic_load(&b->most_inside);
            while (in > most && !atomic_compare_exchange_weak(&b->most_inside, &most, in)) {
            }
        } else if (in != 1) {
            atomic_fetch_add(&b->violations, 1);
        }
        struct timespec ts = {0, hold_us * 1000};
        nanosleep(&ts, NULL);
        atomic_fetch_sub(&b->inside, 1);
        int64_t rel = now_ns();
        redmutex_lock_release(l, NULL);
        int64_t done = now_ns();
        long k = atomic_fetch_add(&b->next, 1);
        if (k < MAX_EVENTS)
            b->ev[k] = (event){got, rel, done, id};
    }
    redmutex_lock_free(l);
}

typedef struct thread_arg {
    board *b;
    int id;
    redmutex_client *c;
    redmutex_kind kind;
    int64_t hold_us;
} thread_arg;

static void *contend_thread(void *p)
{
    thread_arg *a = p;
    contend_worker(a->b, a->id, a->c, a->kind, a->hold_us);
    return NULL;
}

/* Forks `workers` processes, each with a client of its own, running contend_worker on b; waits for them. */
static void run_worker_processes(board *b, int workers, redmutex_kind kind, int64_t hold_us)
{
    pid_t pids[64];
    for (int w = 0; w < workers; w++) {
        pids[w] = fork();
        if (pids[w] == 0) {
            redmutex_client *c = client();
            contend_worker(b, w, c, kind, hold_us);
            redmutex_client_close(c);
            redmutex_client_free(c);
            _exit(0);
        }
    }
    for (int w = 0; w < workers; w++)
        waitpid(pids[w], NULL, 0);
}

static int cmp_event(const void *a, const void *b)
{
    const event *x = a, *y = b;
    return x->acquired_ns < y->acquired_ns ? -1 : x->acquired_ns > y->acquired_ns;
}

/* Measures the round trip (PING) while the workers run, so hand-offs are
   counted in round trips of the same, loaded, machine. */
typedef struct pinger {
    atomic_bool stop;
    int64_t rtt[100000];
    size_t n;
} pinger;

static void *pinger_main(void *p)
{
    pinger *pg = p;
    redisContext *raw = redisConnect("127.0.0.1", srv.port);
    while (!atomic_load(&pg->stop) && pg->n < sizeof pg->rtt / sizeof pg->rtt[0]) {
        int64_t t0 = now_ns();
        freeReplyObject(redisCommand(raw, "PING"));
        pg->rtt[pg->n++] = now_ns() - t0;
        struct timespec ts = {0, 2000000};
        nanosleep(&ts, NULL);
    }
    redisFree(raw);
    return NULL;
}

static void bench_contend(double seconds, int workers, bool threads, redmutex_kind kind, int64_t hold_us)
{
    static pinger pg;
    pg.n = 0;
    atomic_store(&pg.stop, false);
    pthread_t ping_thread;
    board *b = mmap(NULL, sizeof *b, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    memset(b, 0, sizeof *b);
    b->start_ns = now_ns() + 500000000; /* let every worker connect first */
    b->end_ns = b->start_ns + (int64_t)(seconds * 1e9);
    pthread_create(&ping_thread, NULL, pinger_main, &pg);
    if (threads) {
        /* Threads of one process share one client, as an application would. */
        redmutex_client *c = client();
        pthread_t t[64];
        thread_arg args[64];
        for (int w = 0; w < workers; w++) {
            args[w] = (thread_arg){b, w, c, kind, hold_us};
            pthread_create(&t[w], NULL, contend_thread, &args[w]);
        }
        for (int w = 0; w < workers; w++)
            pthread_join(t[w], NULL);
        redmutex_client_free(c);
    } else {
        run_worker_processes(b, workers, kind, hold_us);
    }
    atomic_store(&pg.stop, true);
    pthread_join(ping_thread, NULL);
    int64_t rtt_ns = pct(pg.rtt, pg.n, 50);
    size_t n = (size_t)atomic_load(&b->next);
    if (n > MAX_EVENTS)
        n = MAX_EVENTS;
    qsort(b->ev, n, sizeof *b->ev, cmp_event);
    /* The lock is held from the moment acquire returns until release
       returns: on the client's clock that is the server's SET-to-DEL
       interval shifted by half a round trip. Utilisation is held time over
       the window from the first acquisition to the last release. */
    int64_t held = 0;
    long per[64] = {0};
    int64_t *handoff = malloc((n ? n : 1) * sizeof *handoff), *from_call = malloc((n ? n : 1) * sizeof *handoff);
    int64_t *self_h = malloc((n ? n : 1) * sizeof *handoff), *other_h = malloc((n ? n : 1) * sizeof *handoff);
    size_t nh = 0, ns = 0, no = 0;
    for (size_t i = 0; i < n; i++) {
        held += b->ev[i].released_ns - b->ev[i].acquired_ns;
        per[b->ev[i].worker]++;
        if (i > 0) {
            int64_t h = b->ev[i].acquired_ns - b->ev[i - 1].released_ns;
            from_call[nh] = b->ev[i].acquired_ns - b->ev[i - 1].releasing_ns;
            handoff[nh++] = h;
            if (b->ev[i].worker == b->ev[i - 1].worker)
                self_h[ns++] = h;
            else
                other_h[no++] = h;
        }
    }
    int64_t window = n ? b->ev[n - 1].released_ns - b->ev[0].acquired_ns : 1;
    long lo = per[0], hi = per[0];
    for (int w = 1; w < workers; w++) {
        lo = per[w] < lo ? per[w] : lo;
        hi = per[w] > hi ? per[w] : hi;
    }
    int64_t h50 = nh ? pct(handoff, nh, 50) : 0, h99 = nh ? pct(handoff, nh, 99) : 0;
    int64_t h90 = nh ? pct(handoff, nh, 90) : 0, hmax = nh ? pct(handoff, nh, 100) : 0;
    double hmean = 0;
    for (size_t i = 0; i < nh; i++)
        hmean += (double)handoff[i] / (double)nh;
    printf("contention: %d worker %s, one %s lock, %lld us critical section, %.1f s\n", workers,
           threads ? "threads sharing a client" : "processes",
           kind_name(kind), (long long)hold_us, seconds);
    printf("  acquisitions %zu (%.0f/s), mutual-exclusion violations %d\n", n, n / seconds,
           atomic_load(&b->violations));
    printf("  round trip (PING from another connection during the run): p50 %.1f us\n", rtt_ns / 1e3);
    printf("  utilisation %.1f%% (lock held: acquire returned .. release returned)\n", 100.0 * held / window);
    printf("  hand-off release returned -> next acquire returned: p50 %.1f us (%.2f round trips), p99 %.1f us\n",
           h50 / 1e3, (double)h50 / rtt_ns, h99 / 1e3);
    printf("  hand-off tail: p90 %.1f us, mean %.1f us, max %.1f us\n", h90 / 1e3, hmean / 1e3, hmax / 1e3);
    int64_t c50 = nh ? pct(from_call, nh, 50) : 0;
    printf("  hand-off release called -> next acquire returned:   p50 %.1f us (%.2f round trips)\n", c50 / 1e3,
           (double)c50 / rtt_ns);
    free(from_call);
    printf("  hand-offs to the releasing worker itself: %zu (p50 %.1f us); to another worker: %zu (p50 %.1f us)\n",
           ns, ns ? pct(self_h, ns, 50) / 1e3 : 0.0, no, no ? pct(other_h, no, 50) / 1e3 : 0.0);
    free(self_h);
    free(other_h);
    printf("  fairness: fewest %ld, most %ld acquisitions per worker (ratio %.2f)\n", lo, hi,
           lo ? (double)hi / lo : INFINITY);
    free(handoff);
    munmap(b, sizeof *b);
}

/* ---- read-write lock: readers against writers ------------------------------------ */

/* Acquisitions per second of `workers` processes holding the lock of this kind for hold_us each. */
static double rw_rate(double seconds, int workers, redmutex_kind kind, int64_t hold_us, int *most, int *violations)
{
    board *b = mmap(NULL, sizeof *b, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    memset(b, 0, sizeof *b);
    b->start_ns = now_ns() + 500000000;
    b->end_ns = b->start_ns + (int64_t)(seconds * 1e9);
    run_worker_processes(b, workers, kind, hold_us);
    double rate = (double)atomic_load(&b->next) / seconds;
    *most = atomic_load(&b->most_inside);
    *violations += atomic_load(&b->violations);
    munmap(b, sizeof *b);
    return rate;
}

/* Readers of the read side against the same work under the write side, interleaved over rounds. */
static void bench_rw(double seconds, int workers, int rounds)
{
    double ratio[32], rr[32], wr[32];
    int most = 0, violations = 0;
    if (rounds > 32)
        rounds = 32;
    for (int r = 0; r < rounds; r++) {
        int m = 0, ignored = 0;
        bool read_first = r % 2 == 0;
        if (!read_first)
            wr[r] = rw_rate(seconds, workers, REDMUTEX_KIND_WRITE, 1000, &ignored, &violations);
        rr[r] = rw_rate(seconds, workers, REDMUTEX_KIND_READ, 1000, &m, &violations);
        if (read_first)
            wr[r] = rw_rate(seconds, workers, REDMUTEX_KIND_WRITE, 1000, &ignored, &violations);
        ratio[r] = rr[r] / wr[r];
        most = m > most ? m : most;
    }
    qsort(ratio, (size_t)rounds, sizeof ratio[0], cmp_double);
    qsort(rr, (size_t)rounds, sizeof rr[0], cmp_double);
    qsort(wr, (size_t)rounds, sizeof wr[0], cmp_double);
    printf("read-write lock: %d worker processes, 1000 us critical section, %d rounds of %.1f s per side\n", workers,
           rounds, seconds);
    printf("  read side:  %.0f acquisitions/s (median), up to %d readers inside at once\n", rr[rounds / 2], most);
    printf("  write side: %.0f acquisitions/s (median), mutual-exclusion violations %d\n", wr[rounds / 2], violations);
    printf("  readers' throughput over the writers': %.1fx (median of the rounds' ratios; range %.1f-%.1f)\n",
           ratio[rounds / 2], ratio[0], ratio[rounds - 1]);
}

int main(int argc, char **argv)
{
    const char *what = argc > 1 ? argv[1] : "all";
    double seconds = argc > 2 ? atof(argv[2]) : 3.0;
    rs_start(&srv, NULL);
    printf("redmutex %s, redis-server on loopback, %ld CPUs\n\n", redmutex_version(), sysconf(_SC_NPROCESSORS_ONLN));
    if (!strcmp(what, "pair") || !strcmp(what, "all")) {
        bench_pair(seconds);
        printf("\n");
    }
    if (!strcmp(what, "contend") || !strcmp(what, "all")) {
        bench_contend(seconds, 8, true, REDMUTEX_KIND_LOCK, 1000);
        bench_contend(seconds, 8, false, REDMUTEX_KIND_LOCK, 1000);
        bench_contend(seconds, 8, true, REDMUTEX_KIND_RLOCK, 1000);
        bench_contend(seconds, 8, false, REDMUTEX_KIND_RLOCK, 1000);
    }
    if (!strcmp(what, "fair") || !strcmp(what, "contend") || !strcmp(what, "all")) {
        bench_contend(seconds, 8, false, REDMUTEX_KIND_FAIR, 1000);
        bench_contend(seconds, 8, true, REDMUTEX_KIND_FAIR, 1000);
    }
    if (!strcmp(what, "rw") || !strcmp(what, "all"))
        bench_rw(seconds, 8, 5);
    rs_stop(&srv);
    return 0;
}
