/*
 * Semaphore and multi-lock benchmarks (figures, not pass/fail), on one
 * redis-server of its own.
 *
 *  pair     uncontended acquire+release of one permit of a semaphore (the
 *           watchdog lease), against a floor that sends the same commands
 *           raw on a hiredis connection (the previous release's unlock-latch
 *           DEL pipelined in front of EVALSHA of the acquire script, then
 *           EVALSHA of the release script); and a multi-lock of 3 plain
 *           locks against one plain lock's pair. Every series runs in short
 *           blocks interleaved in one run; client CPU (getrusage, the whole
 *           process: the library's threads and the kernel's TCP work) is
 *           summed per series.
 *  contend  W processes share P permits, each holding one for H us at a
 *           time: the busy share of permit-time (time permits were held /
 *           (P x the window)), acquisitions per second and per worker,
 *           client and server CPU and scripts run per acquisition; then
 *           the same with W threads of one process sharing one client.
 *
 * Usage: bench_sem [pair|contend|all] [seconds]
 */
#define _GNU_SOURCE
#include "harness.h"
#include "scripts.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
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

/* User + system CPU of the whole process, in ns. */
static int64_t cpu_ns(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ((int64_t)ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000000 +
           ((int64_t)ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1000;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

static int64_t pct(int64_t *v, size_t n, double p)
{
    qsort(v, n, sizeof *v, cmp_i64);
    return v[(size_t)(p / 100.0 * (double)(n - 1) + 0.5)];
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

static void die(const char *what)
{
    fprintf(stderr, "%s: %s\n", what, redmutex_last_error());
    exit(1);
}

/* ---- uncontended pairs ---------------------------------------------------------- */

enum {
    SERIES_PING,
    SERIES_FLOOR,
    SERIES_SEM,
    SERIES_LOCK_FLOOR,
    SERIES_LOCK,
    SERIES_MULTI_FLOOR,
    SERIES_MULTI,
    NSERIES
};
static const char *series_name[NSERIES] = {
    "round trip (PING)",
    "floor: the semaphore's commands, raw (hiredis)",
    "redmutex semaphore, one permit",
    "floor: a plain lock's commands, raw",
    "redmutex plain lock",
    "floor: the multi-lock's commands, raw",
    "redmutex multi-lock of 3 plain locks",
};

typedef struct series {
    int64_t *ns;
    size_t n;
    int64_t cpu;
} series;

/* A fresh permit id, as redmutex makes them (32 hex digits). */
static void permit_id(char out[33])
{
    static const char hex[] = "0123456789abcdef";
    unsigned char b[16];
    for (int i = 0; i < 16; i++)
        b[i] = (unsigned char)rand();
    for (int i = 0; i < 16; i++) {
        out[2 * i] = hex[b[i] >> 4];
        out[2 * i + 1] = hex[b[i] & 15];
    }
    out[32] = '\0';
}

/* One pair of the floor: DEL of the previous latch + EVALSHA acquire, then EVALSHA release. */
static void floor_pair(redisContext *raw, char *latch)
{
    char id[33], latch_id[33];
    permit_id(id);
    const char *acq = rm_script_sha(RM_SCRIPT_SEM_ACQUIRE), *rel = rm_script_sha(RM_SCRIPT_SEM_RELEASE);
    if (latch[0])
        redisAppendCommand(raw, "DEL %s", latch);
    redisAppendCommand(raw, "EVALSHA %s 4 bench:fsem {bench:fsem}:timeout redisson_sc:{bench:fsem} "
                            "redisson_lock_token:{bench:fsem} %s 30000 3 0 0 publish",
                       acq, id);
    redisReply *r;
    if (latch[0]) {
        redisGetReply(raw, (void **)&r);
        freeReplyObject(r);
    }
    redisGetReply(raw, (void **)&r);
    if (!r || r->type != REDIS_REPLY_ARRAY) {
        fprintf(stderr, "floor acquire: %s\n", r && r->str ? r->str : "no reply");
        exit(1);
    }
    freeReplyObject(r);
    permit_id(latch_id);
    snprintf(latch, 128, "redisson_unlock_latch:{bench:fsem}:%s", latch_id);
    r = redisCommand(raw, "EVALSHA %s 4 bench:fsem redisson_sc:{bench:fsem} {bench:fsem}:timeout %s %s 10000 publish",
                     rel, latch, id);
    if (!r || r->type != REDIS_REPLY_INTEGER) {
        fprintf(stderr, "floor release: %s\n", r && r->str ? r->str : "no reply");
        exit(1);
    }
    freeReplyObject(r);
}

/* One pair of n plain locks' commands, raw, as redmutex sends them with one
   server: the previous releases' latch DELs pipelined in front of the n
   SET NX PX, then the n release scripts in one write. */
static void lock_floor_pair(redisContext *raw, char (*latch)[128], int n)
{
    static const char *names[] = {"bench:fl1", "bench:fl2", "bench:fl3"};
    char token[4][33];
    const char *rel = rm_script_sha(RM_SCRIPT_LOCK_RELEASE);
    int sent = 0;
    for (int i = 0; i < n; i++)
        if (latch[i][0]) {
            redisAppendCommand(raw, "DEL %s", latch[i]);
            sent++;
        }
    for (int i = 0; i < n; i++) {
        permit_id(token[i]);
        redisAppendCommand(raw, "SET %s %s NX PX 30000", names[i], token[i]);
        sent++;
    }
    for (int i = 0; i < sent; i++) {
        redisReply *r;
        if (redisGetReply(raw, (void **)&r) != REDIS_OK || !r || r->type == REDIS_REPLY_NIL) {
            fprintf(stderr, "lock floor acquire: no lock\n");
            exit(1);
        }
        freeReplyObject(r);
    }
    for (int i = 0; i < n; i++) {
        char id[33];
        permit_id(id);
        snprintf(latch[i], 128, "redisson_unlock_latch:{%s}:%s", names[i], id);
        redisAppendCommand(raw, "EVALSHA %s 3 %s redisson_lock__channel:{%s} %s %s 10000 publish", rel, names[i],
                           names[i], latch[i], token[i]);
    }
    for (int i = 0; i < n; i++) {
        redisReply *r;
        if (redisGetReply(raw, (void **)&r) != REDIS_OK || !r || r->type != REDIS_REPLY_INTEGER) {
            fprintf(stderr, "lock floor release: %s\n", r && r->str ? r->str : "no reply");
            exit(1);
        }
        freeReplyObject(r);
    }
}

typedef struct pair_ctx {
    redisContext *raw;
    char latch[128];
    char lock_latch[3][128];
    char multi_latch[3][128];
    redmutex_semaphore *sem;
    redmutex_lock *lock;
    redmutex_multi_lock *multi;
} pair_ctx;

static void one(pair_ctx *x, int s)
{
    char id[REDMUTEX_PERMIT_ID_SIZE];
    switch (s) {
    case SERIES_PING:
        freeReplyObject(redisCommand(x->raw, "PING"));
        break;
    case SERIES_FLOOR:
        floor_pair(x->raw, x->latch);
        break;
    case SERIES_LOCK_FLOOR:
        lock_floor_pair(x->raw, x->lock_latch, 1);
        break;
    case SERIES_MULTI_FLOOR:
        lock_floor_pair(x->raw, x->multi_latch, 3);
        break;
    case SERIES_SEM:
        if (redmutex_semaphore_acquire(id, sizeof id, x->sem, 1, 0) || redmutex_semaphore_release(x->sem, id))
            die("semaphore");
        break;
    case SERIES_LOCK:
        if (redmutex_lock_acquire(x->lock, NULL, 0) || redmutex_lock_release(x->lock, NULL))
            die("lock");
        break;
    default:
        if (redmutex_multi_lock_acquire(x->multi, NULL, 0) || redmutex_multi_lock_release(x->multi, NULL))
            die("multi-lock");
        break;
    }
}

static void bench_pair(double seconds)
{
    redmutex_client *c = client();
    pair_ctx x = {redisConnect("127.0.0.1", srv.port), "", {""}, {""}, NULL, NULL, NULL};
    if (redmutex_semaphore_new(&x.sem, c, "bench:sem", 3, NULL) != 0 ||
        redmutex_lock_new(&x.lock, c, "bench:lock", REDMUTEX_KIND_LOCK, NULL) != 0)
        die("setup");
    redmutex_lock *ls[3];
    const char *names[3] = {"bench:m1", "bench:m2", "bench:m3"};
    for (int i = 0; i < 3; i++)
        if (redmutex_lock_new(&ls[i], c, names[i], REDMUTEX_KIND_LOCK, NULL) != 0)
            die("setup");
    if (redmutex_multi_lock_new(&x.multi, ls, 3) != 0)
        die("setup");
    /* The floor's scripts are loaded by redmutex's own first calls. */
    for (int i = 0; i < 500; i++)
        for (int s = NSERIES - 1; s >= 0; s--)
            one(&x, s);
    enum { BLOCK = 100 };
    size_t cap = 1000000;
    series sr[NSERIES];
    for (int s = 0; s < NSERIES; s++)
        sr[s] = (series){malloc(cap * sizeof(int64_t)), 0, 0};
    int order[NSERIES];
    for (int s = 0; s < NSERIES; s++)
        order[s] = s;
    int64_t end = now_ns() + (int64_t)(seconds * 1e9);
    while (now_ns() < end && sr[0].n + BLOCK < cap) {
        for (int k = NSERIES - 1; k > 0; k--) { /* a shuffled order in each round */
            int j = rand() % (k + 1), t = order[k];
            order[k] = order[j];
            order[j] = t;
        }
        for (int k = 0; k < NSERIES; k++) {
            series *q = &sr[order[k]];
            int64_t cpu0 = cpu_ns();
            for (int i = 0; i < BLOCK; i++) {
                int64_t t0 = now_ns();
                one(&x, order[k]);
                q->ns[q->n++] = now_ns() - t0;
            }
            q->cpu += cpu_ns() - cpu0;
        }
    }
    int64_t p50[NSERIES];
    for (int s = 0; s < NSERIES; s++)
        p50[s] = pct(sr[s].ns, sr[s].n, 50);
    printf("uncontended pairs, one server (%zu each, interleaved blocks of %d)\n", sr[0].n, BLOCK);
    printf("  %-48s %10s %10s %14s\n", "", "p50 us", "p99 us", "CPU us per op");
    for (int s = 0; s < NSERIES; s++)
        printf("  %-48s %10.1f %10.1f %14.1f\n", series_name[s], p50[s] / 1e3, pct(sr[s].ns, sr[s].n, 99) / 1e3,
               sr[s].cpu / 1e3 / (double)sr[s].n);
    printf("  semaphore vs its same-commands floor: %.2fx (CPU %.1f us beyond the floor's)\n",
           (double)p50[SERIES_SEM] / (double)p50[SERIES_FLOOR],
           (sr[SERIES_SEM].cpu / (double)sr[SERIES_SEM].n - sr[SERIES_FLOOR].cpu / (double)sr[SERIES_FLOOR].n) / 1e3);
    printf("  plain lock vs its same-commands floor: %.2fx\n",
           (double)p50[SERIES_LOCK] / (double)p50[SERIES_LOCK_FLOOR]);
    printf("  multi-lock of 3 vs one lock's pair:   %.2fx (their floors: %.2fx; multi-lock vs its floor %.2fx)\n",
           (double)p50[SERIES_MULTI] / (double)p50[SERIES_LOCK],
           (double)p50[SERIES_MULTI_FLOOR] / (double)p50[SERIES_LOCK_FLOOR],
           (double)p50[SERIES_MULTI] / (double)p50[SERIES_MULTI_FLOOR]);
    for (int s = 0; s < NSERIES; s++)
        free(sr[s].ns);
    redmutex_multi_lock_free(x.multi);
    for (int i = 0; i < 3; i++)
        redmutex_lock_free(ls[i]);
    redmutex_lock_free(x.lock);
    redmutex_semaphore_free(x.sem);
    redisFree(x.raw);
    redmutex_client_close(c);
    redmutex_client_free(c);
}

/* ---- contention ------------------------------------------------------------------- */

/* The server's CPU (user + system, in us) and the scripts it has run. */
static void server_counts(double *cpu_us, long *scripts)
{
    *cpu_us = 0;
    *scripts = 0;
    redisReply *r = rs_cmd(&srv, "INFO everything");
    if (!r || r->type != REDIS_REPLY_STRING) {
        if (r)
            freeReplyObject(r);
        return;
    }
    const char *p;
    if ((p = strstr(r->str, "used_cpu_sys:")))
        *cpu_us += atof(p + 13) * 1e6;
    if ((p = strstr(r->str, "used_cpu_user:")))
        *cpu_us += atof(p + 14) * 1e6;
    if ((p = strstr(r->str, "cmdstat_evalsha:calls=")))
        *scripts += atol(p + 22);
    if ((p = strstr(r->str, "cmdstat_eval:calls=")))
        *scripts += atol(p + 19);
    freeReplyObject(r);
}

#define MAX_EVENTS 400000

typedef struct board {
    atomic_long next;
    atomic_int inside, most, errors;
    int64_t start_ns, end_ns;
    struct {
        int64_t got, released;
        int worker;
    } ev[MAX_EVENTS];
} board;

/* One worker's loop on the semaphore handle s until the board's end. */
static void contend_loop(board *b, redmutex_semaphore *s, int id, int64_t hold_us)
{
    while (now_ns() < b->start_ns) {
        struct timespec ts = {0, 100000};
        nanosleep(&ts, NULL);
    }
    while (now_ns() < b->end_ns) {
        char pid[REDMUTEX_PERMIT_ID_SIZE];
        if (redmutex_semaphore_acquire(pid, sizeof pid, s, 1, 5000) != 0) {
            atomic_fetch_add(&b->errors, 1);
            continue;
        }
        int64_t got = now_ns();
        int in = atomic_fetch_add(&b->inside, 1) + 1, most = atomic_load(&b->most);
        while (in > most && !atomic_compare_exchange_weak(&b->most, &most, in)) {
        }
        struct timespec ts = {0, hold_us * 1000};
        nanosleep(&ts, NULL);
        atomic_fetch_sub(&b->inside, 1);
        if (redmutex_semaphore_release(s, pid) != 0)
            atomic_fetch_add(&b->errors, 1);
        long k = atomic_fetch_add(&b->next, 1);
        if (k < MAX_EVENTS) {
            b->ev[k].got = got;
            b->ev[k].released = now_ns();
            b->ev[k].worker = id;
        }
    }
}

static void contend_worker(board *b, int id, int permits, int64_t hold_us)
{
    redmutex_client *c = client();
    redmutex_semaphore *s;
    if (redmutex_semaphore_new(&s, c, "bench:contend", permits, NULL) != 0)
        die("semaphore");
    contend_loop(b, s, id, hold_us);
    redmutex_semaphore_free(s);
    redmutex_client_close(c);
    redmutex_client_free(c);
}

typedef struct thread_arg {
    board *b;
    redmutex_semaphore *s;
    int id;
    int64_t hold_us;
} thread_arg;

static void *contend_thread(void *p)
{
    thread_arg *a = p;
    contend_loop(a->b, a->s, a->id, a->hold_us);
    return NULL;
}

/* W processes (threads = false) or W threads of this process sharing one client. */
static void bench_contend(double seconds, int workers, int permits, int64_t hold_us, bool threads)
{
    board *b = mmap(NULL, sizeof *b, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    memset(b, 0, sizeof *b);
    b->start_ns = now_ns() + 500000000;
    b->end_ns = b->start_ns + (int64_t)(seconds * 1e9);
    pid_t pids[64];
    struct rusage before, after;
    getrusage(threads ? RUSAGE_SELF : RUSAGE_CHILDREN, &before);
    double server0, server1;
    long scripts0, scripts1;
    server_counts(&server0, &scripts0);
    if (threads) {
        redmutex_client *c = client();
        redmutex_semaphore *s;
        if (redmutex_semaphore_new(&s, c, "bench:contend-threads", permits, NULL) != 0)
            die("semaphore");
        pthread_t tids[64];
        thread_arg args[64];
        for (int w = 0; w < workers; w++) {
            args[w] = (thread_arg){b, s, w, hold_us};
            pthread_create(&tids[w], NULL, contend_thread, &args[w]);
        }
        for (int w = 0; w < workers; w++)
            pthread_join(tids[w], NULL);
        redmutex_semaphore_free(s);
        redmutex_client_close(c);
        redmutex_client_free(c);
    } else {
        for (int w = 0; w < workers; w++)
            if ((pids[w] = fork()) == 0) {
                contend_worker(b, w, permits, hold_us);
                _exit(0);
            }
        for (int w = 0; w < workers; w++)
            waitpid(pids[w], NULL, 0);
    }
    getrusage(threads ? RUSAGE_SELF : RUSAGE_CHILDREN, &after);
    server_counts(&server1, &scripts1);
    size_t n = (size_t)atomic_load(&b->next);
    if (n > MAX_EVENTS)
        n = MAX_EVENTS;
    int64_t first = INT64_MAX, last = 0, held = 0;
    long per[64] = {0};
    for (size_t i = 0; i < n; i++) {
        first = b->ev[i].got < first ? b->ev[i].got : first;
        last = b->ev[i].released > last ? b->ev[i].released : last;
        held += b->ev[i].released - b->ev[i].got;
        per[b->ev[i].worker]++;
    }
    long fewest = per[0], most = per[0];
    for (int w = 1; w < workers; w++) {
        fewest = per[w] < fewest ? per[w] : fewest;
        most = per[w] > most ? per[w] : most;
    }
    double window = (double)(last - first);
    double cpu = (double)(after.ru_utime.tv_sec - before.ru_utime.tv_sec + after.ru_stime.tv_sec -
                          before.ru_stime.tv_sec) * 1e6 +
                 (double)(after.ru_utime.tv_usec - before.ru_utime.tv_usec + after.ru_stime.tv_usec -
                          before.ru_stime.tv_usec);
    printf("%d %s share %d permits, %" PRId64 " us critical section, %.0f s\n", workers,
           threads ? "threads of one process (one client)" : "processes", permits, hold_us, seconds);
    printf("  acquisitions %zu (%.0f/s), per worker %ld..%ld, at most %d held at once, errors %d\n", n,
           n / (window / 1e9), fewest, most, atomic_load(&b->most), atomic_load(&b->errors));
    printf("  busy share of permit-time: %.1f%% (permits held / (%d x window))\n",
           100.0 * (double)held / ((double)permits * window), permits);
    printf("  client CPU per acquisition (all workers): %.1f us\n", cpu / (double)(n ? n : 1));
    printf("  server: %.1f scripts and %.1f us CPU per acquisition\n",
           (double)(scripts1 - scripts0) / (double)(n ? n : 1),
           (server1 - server0) / (double)(n ? n : 1));
    munmap(b, sizeof *b);
}

int main(int argc, char **argv)
{
    const char *what = argc > 1 ? argv[1] : "all";
    double seconds = argc > 2 ? atof(argv[2]) : 5;
    srand((unsigned)now_ns());
    rs_start(&srv, NULL);
    char load[128] = "";
    FILE *f = fopen("/proc/loadavg", "r");
    if (f && fgets(load, sizeof load, f))
        printf("load average at the start: %s", load);
    if (f)
        fclose(f);
    if (!strcmp(what, "pair") || !strcmp(what, "all"))
        bench_pair(seconds);
    if (!strcmp(what, "contend") || !strcmp(what, "all")) {
        bench_contend(seconds, 8, 3, 1000, false);
        bench_contend(seconds, 8, 3, 1000, true);
    }
    f = fopen("/proc/loadavg", "r");
    if (f && fgets(load, sizeof load, f))
        printf("load average at the end: %s", load);
    if (f)
        fclose(f);
    rs_stop(&srv);
    return 0;
}
