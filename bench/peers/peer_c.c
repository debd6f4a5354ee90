/*
 * The C side of the peer benchmarks (bench/peers/driver.py): redmutex's C
 * core, and the floors it is measured against, which send the same commands
 * raw on hiredis connections.
 *
 * It reads one command a line on stdin and answers one line on stdout (the
 * protocol every peer program of bench/peers speaks; driver.py documents it).
 * Libraries ("LIB" below):
 *
 *   redmutex:lock, redmutex:rlock   the C core, plain / reentrant lock, defaults
 *   redmutex:fair                   the C core, fair lock (contention only)
 *                                   (watchdog lease), one client per URL list
 *   floor:2rt                       raw SET NAME TOKEN NX PX 30000, then DEL NAME
 *   floor:lock, floor:rlock         exactly what redmutex sends for that kind: the
 *                                   previous release's latch DEL in front of the
 *                                   acquisition, then the release script (EVALSHA).
 *                                   With several URLs the same commands go to all
 *                                   servers at once and each step ends at a majority;
 *                                   the replies still owed are skipped in front of
 *                                   the next step, as redmutex does.
 */
#define _GNU_SOURCE
#include "handle.h"  /* RM_KEY_MAX */
#include "scripts.h" /* the scripts redmutex sends (rm_script_text) */

#include <hiredis/hiredis.h>

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#define MAX_SERVERS 7
#define LEASE "30000"
#define LATCH_MS "10000"

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int64_t cpu_ns(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ((int64_t)ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000000 +
           ((int64_t)ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1000;
}

static void sleep_until(int64_t t)
{
    struct timespec ts = {t / 1000000000, t % 1000000000};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
        ;
}

static void die(const char *what, const char *detail)
{
    fprintf(stderr, "peer_c: %s: %s\n", what, detail);
    exit(1);
}

/* ---- floors: the same commands on raw hiredis connections ------------- */

typedef struct floor_peer {
    size_t n, quorum;
    redisContext *ctx[MAX_SERVERS];
    size_t owed[MAX_SERVERS]; /* replies of an earlier step not waited for */
    char latch[RM_KEY_MAX];   /* the previous release's latch, deleted in front of the next acquisition */
    char field[64];           /* reentrant hash field */
    uint64_t rng;
} floor_peer;

typedef struct step {
    int ncmds;
    int argc[3];
    const char *argv[3][12];
} step;

static void add_cmd(step *s, int argc, const char **argv)
{
    s->argc[s->ncmds] = argc;
    memcpy(s->argv[s->ncmds++], argv, (size_t)argc * sizeof *argv);
}

static void random_hex(floor_peer *f, char out[33])
{
    static const char hex[] = "0123456789abcdef";
    for (int i = 0; i < 32; i++) {
        f->rng ^= f->rng << 13, f->rng ^= f->rng >> 7, f->rng ^= f->rng << 17;
        out[i] = hex[f->rng & 15];
    }
    out[32] = '\0';
}

static void check_reply(redisReply *r, const char *want)
{
    bool ok = r && ((!strcmp(want, "OK") && r->type == REDIS_REPLY_STATUS && !strcmp(r->str, "OK")) ||
                    (!strcmp(want, "1") && r->type == REDIS_REPLY_INTEGER && r->integer == 1) ||
                    (!strcmp(want, "nil") && r->type == REDIS_REPLY_NIL) || !strcmp(want, "any"));
    if (!ok)
        die("floor: unexpected reply", r ? (r->type == REDIS_REPLY_ERROR ? r->str : "(type)") : "(none)");
}

/* One server: pipelined commands, then their replies, blocking. Checks the last reply. */
static void step_one(floor_peer *f, step *s, const char *want)
{
    for (int k = 0; k < s->ncmds; k++)
        redisAppendCommandArgv(f->ctx[0], s->argc[k], s->argv[k], NULL);
    for (int k = 0; k < s->ncmds; k++) {
        redisReply *r;
        if (redisGetReply(f->ctx[0], (void **)&r) != REDIS_OK)
            die("floor", f->ctx[0]->errstr);
        if (k == s->ncmds - 1)
            check_reply(r, want);
        freeReplyObject(r);
    }
}

/* N servers at once; the step ends when a majority answered every command. */
static void step_many(floor_peer *f, step *s, const char *want)
{
    int got[MAX_SERVERS] = {0};
    size_t done = 0;
    for (size_t i = 0; i < f->n; i++) {
        for (int k = 0; k < s->ncmds; k++)
            redisAppendCommandArgv(f->ctx[i], s->argc[k], s->argv[k], NULL);
        int wdone = 0;
        while (!wdone)
            if (redisBufferWrite(f->ctx[i], &wdone) != REDIS_OK)
                die("floor: write", f->ctx[i]->errstr);
    }
    while (done < f->quorum) {
        struct pollfd p[MAX_SERVERS];
        size_t map[MAX_SERVERS], np = 0;
        for (size_t i = 0; i < f->n; i++)
            if (got[i] < s->ncmds) {
                p[np] = (struct pollfd){f->ctx[i]->fd, POLLIN, 0};
                map[np++] = i;
            }
        if (poll(p, np, 5000) <= 0)
            die("floor", "no majority within 5 s");
        for (size_t k = 0; k < np; k++) {
            size_t i = map[k];
            if (!p[k].revents)
                continue;
            if (redisBufferRead(f->ctx[i]) != REDIS_OK)
                die("floor: read", f->ctx[i]->errstr);
            redisReply *r;
            while (got[i] < s->ncmds && redisGetReplyFromReader(f->ctx[i], (void **)&r) == REDIS_OK && r) {
                if (f->owed[i] > 0) {
                    f->owed[i]--;
                } else if (++got[i] == s->ncmds) {
                    check_reply(r, want);
                    done++;
                }
                freeReplyObject(r);
            }
        }
    }
    for (size_t i = 0; i < f->n; i++)
        f->owed[i] += (size_t)(s->ncmds - got[i]);
}

static void run_step(floor_peer *f, step *s, const char *want)
{
    if (f->n == 1)
        step_one(f, s, want);
    else
        step_many(f, s, want);
}

static void derived(char *out, const char *prefix, const char *name, const char *suffix)
{
    snprintf(out, RM_KEY_MAX, "%s:{%s}%s", prefix, name, suffix);
}

/* One acquire+release pair of `kind` ("2rt", "lock", "rlock") on lock `name`. */
static void floor_pair(floor_peer *f, const char *kind, const char *name)
{
    char token[33], latch_id[40], latch[RM_KEY_MAX], channel[RM_KEY_MAX], token_key[RM_KEY_MAX];
    step s = {0};
    if (!strcmp(kind, "2rt")) {
        random_hex(f, token);
        const char *set[] = {"SET", name, token, "NX", "PX", LEASE}, *del[] = {"DEL", name};
        add_cmd(&s, 6, set);
        run_step(f, &s, "OK");
        s.ncmds = 0;
        add_cmd(&s, 2, del);
        run_step(f, &s, "1");
        return;
    }
    const char *del_latch[] = {"DEL", f->latch};
    if (f->latch[0])
        add_cmd(&s, 2, del_latch);
    derived(channel, "redisson_lock__channel", name, "");
    latch_id[0] = ':';
    random_hex(f, latch_id + 1);
    derived(latch, "redisson_unlock_latch", name, latch_id);
    if (!strcmp(kind, "lock")) {
        random_hex(f, token);
        const char *set[] = {"SET", name, token, "NX", "PX", LEASE};
        add_cmd(&s, 6, set);
        run_step(f, &s, "OK");
        s.ncmds = 0;
        const char *rel[] = {"EVALSHA", rm_script_sha(RM_SCRIPT_LOCK_RELEASE), "3", name, channel, latch, token,
                             LATCH_MS, "publish"};
        add_cmd(&s, 9, rel);
    } else {
        derived(token_key, "redisson_lock_token", name, "");
        const char *acq[] = {
            "EVALSHA", rm_script_sha(RM_SCRIPT_RLOCK_ACQUIRE), "2", name, token_key, LEASE, f->field, "0"};
        add_cmd(&s, 8, acq);
        run_step(f, &s, "any");
        s.ncmds = 0;
        const char *rel[] = {"EVALSHA", rm_script_sha(RM_SCRIPT_RLOCK_RELEASE),
                             "3",       name,
                             channel,   latch,
                             "0",       LEASE,
                             f->field,  "publish",
                             LATCH_MS};
        add_cmd(&s, 11, rel);
    }
    run_step(f, &s, "1");
    memcpy(f->latch, latch, sizeof f->latch);
}

static void parse_url(const char *url, char *host, int *port)
{
    if (sscanf(url, "redis://%255[^:]:%d", host, port) != 2)
        die("only redis://HOST:PORT URLs", url);
}

static floor_peer *floor_new(const char **urls, size_t n)
{
    floor_peer *f = calloc(1, sizeof *f);
    f->n = n;
    f->quorum = n / 2 + 1;
    f->rng = (uint64_t)now_ns() | 1;
    for (size_t i = 0; i < n; i++) {
        char host[256];
        int port;
        parse_url(urls[i], host, &port);
        f->ctx[i] = redisConnect(host, port);
        if (!f->ctx[i] || f->ctx[i]->err)
            die("floor: connect", urls[i]);
        for (int id = 0; id < RM_SCRIPT_COUNT; id++)
            freeReplyObject(redisCommand(f->ctx[i], "SCRIPT LOAD %s", rm_script_text(id)));
    }
    /* A hash field of redmutex's length: "<36-char client id>:<thread id>". */
    snprintf(f->field, sizeof f->field, "6f1c7b9e-3d52-4a8e-9b0f-2c4d6e8a1b3c:%ld", (long)getpid());
    return f;
}

/* ---- the libraries, cached by (LIB, lock name, URLs) ------------------- */

typedef struct peer {
    char key[512];
    const char *lib; /* points into key */
    char name[256];
    redmutex_client *client;
    redmutex_lock *lock;
    floor_peer *floor;
    const char *floor_kind;
    redmutex_lock **held; /* hold series */
    int nheld;
    int64_t hold_cpu0;
} peer;

static peer *peers[256];
static size_t npeers;
static redmutex_client *clients[64];
static char client_keys[64][512];
static size_t nclients;

/* One redmutex client per URL list, shared by that list's locks (as an application would). */
static redmutex_client *client_for(const char **urls, size_t n, const char *key)
{
    for (size_t i = 0; i < nclients; i++)
        if (!strcmp(client_keys[i], key))
            return clients[i];
    redmutex_client *c;
    if (redmutex_client_new(&c, urls, n, NULL) != 0)
        die("redmutex_client_new", redmutex_last_error());
    snprintf(client_keys[nclients], sizeof client_keys[0], "%s", key);
    return clients[nclients++] = c;
}

static peer *peer_get(const char *lib, const char *name, const char **urls, size_t n)
{
    char key[512], ukey[400] = "";
    for (size_t i = 0; i < n; i++)
        snprintf(ukey + strlen(ukey), sizeof ukey - strlen(ukey), " %s", urls[i]);
    snprintf(key, sizeof key, "%s %s%s", lib, name, ukey);
    for (size_t i = 0; i < npeers; i++)
        if (!strcmp(peers[i]->key, key))
            return peers[i];
    peer *p = calloc(1, sizeof *p);
    snprintf(p->key, sizeof p->key, "%s", key);
    p->lib = lib;
    snprintf(p->name, sizeof p->name, "%s", name);
    if (!strncmp(lib, "redmutex:", 9)) {
        p->client = client_for(urls, n, ukey);
        redmutex_kind kind = !strcmp(lib + 9, "rlock")  ? REDMUTEX_KIND_RLOCK
                             : !strcmp(lib + 9, "fair") ? REDMUTEX_KIND_FAIR
                                                        : REDMUTEX_KIND_LOCK;
        if (redmutex_lock_new(&p->lock, p->client, name, kind, NULL) != 0)
            die("redmutex_lock_new", redmutex_last_error());
    } else if (!strncmp(lib, "floor:", 6)) {
        p->floor = floor_new(urls, n);
        p->floor_kind = lib + 6;
    } else {
        die("unknown library", lib);
    }
    peers[npeers++] = p;
    p->lib = p->key;
    return p;
}

static void must(int rc, const char *what)
{
    if (rc != 0)
        die(what, redmutex_last_error());
}

static void pair(peer *p)
{
    if (p->floor) {
        floor_pair(p->floor, p->floor_kind, p->name);
        return;
    }
    must(redmutex_lock_acquire(p->lock, NULL, REDMUTEX_WAIT_FOREVER), "acquire");
    must(redmutex_lock_release(p->lock, NULL), "release");
}

/* ---- commands ------------------------------------------------------------ */

/* pairs LIB NAME SECONDS URL...  ->  ok PAIRS WALL_NS CPU_NS */
static void cmd_pairs(peer *p, double seconds)
{
    int64_t n = 0, t0 = now_ns(), c0 = cpu_ns(), end = t0 + (int64_t)(seconds * 1e9), t;
    do {
        for (int i = 0; i < 20; i++)
            pair(p);
        n += 20;
        t = now_ns();
    } while (t < end);
    printf("ok %lld %lld %lld\n", (long long)n, (long long)(t - t0), (long long)(cpu_ns() - c0));
}

/* rtt SECONDS URL [PAUSE_US]  ->  ok N MEDIAN_NS  (raw PINGs on a hiredis connection,
   PAUSE_US apart: a pause keeps the measurement from loading the machine) */
static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

static void cmd_rtt(const char *url, double seconds, int64_t pause_us)
{
    static redisContext *ctx;
    static char ctx_url[256];
    if (!ctx || strcmp(ctx_url, url)) {
        char host[256];
        int port;
        parse_url(url, host, &port);
        if (ctx)
            redisFree(ctx);
        ctx = redisConnect(host, port);
        snprintf(ctx_url, sizeof ctx_url, "%s", url);
    }
    static int64_t v[1 << 20];
    size_t n = 0;
    int64_t end = now_ns() + (int64_t)(seconds * 1e9);
    while (n < sizeof v / sizeof v[0]) {
        int64_t t0 = now_ns();
        redisReply *r = redisCommand(ctx, "PING");
        if (!r)
            die("rtt", ctx->errstr);
        freeReplyObject(r);
        v[n++] = now_ns() - t0;
        if (t0 > end)
            break;
        if (pause_us > 0)
            sleep_until(now_ns() + pause_us * 1000);
    }
    qsort(v, n, sizeof v[0], cmp_i64);
    printf("ok %zu %lld\n", n, (long long)v[n / 2]);
}

/* contend LIB NAME START_NS END_NS HOLD_US URL...  ->  ok FAILURES (ACQ RELCALL RELDONE)... */
static void cmd_contend(peer *p, int64_t start, int64_t end, int64_t hold_us)
{
    if (!p->lock)
        die("contend", "only redmutex locks contend");
    size_t cap = 100000, n = 0;
    int64_t *ev = malloc(cap * 3 * sizeof *ev);
    long failures = 0;
    sleep_until(start);
    while (now_ns() < end && n < cap) {
        int64_t wait_ms = (end - now_ns()) / 1000000 + 2000;
        if (redmutex_lock_acquire(p->lock, NULL, wait_ms) != 0) {
            failures++;
            continue;
        }
        int64_t got = now_ns();
        sleep_until(got + hold_us * 1000);
        int64_t rel = now_ns();
        must(redmutex_lock_release(p->lock, NULL), "release");
        ev[3 * n] = got, ev[3 * n + 1] = rel, ev[3 * n + 2] = now_ns();
        n++;
    }
    printf("ok %ld", failures);
    for (size_t i = 0; i < 3 * n; i++)
        printf(" %lld", (long long)ev[i]);
    printf("\n");
    free(ev);
}

/* hold LIB NAME COUNT URL  ->  held  (then `unhold` ->  ok CPU_NS LOST) */
static void cmd_hold(peer *p, int count, const char **urls, size_t n)
{
    p->held = calloc((size_t)count, sizeof *p->held);
    p->nheld = count;
    redmutex_client *c = client_for(urls, n, "hold");
    for (int i = 0; i < count; i++) {
        char name[300];
        snprintf(name, sizeof name, "%s:%d", p->name, i);
        must(redmutex_lock_new(&p->held[i], c, name, REDMUTEX_KIND_LOCK, NULL), "lock_new");
        must(redmutex_lock_acquire(p->held[i], NULL, 0), "hold acquire");
    }
    p->hold_cpu0 = cpu_ns();
    printf("held\n");
}

static void cmd_unhold(peer *p)
{
    int64_t cpu = cpu_ns() - p->hold_cpu0;
    int lost = 0;
    for (int i = 0; i < p->nheld; i++) {
        lost += redmutex_lock_release(p->held[i], NULL) != 0;
        redmutex_lock_free(p->held[i]);
    }
    free(p->held);
    p->held = NULL;
    printf("ok %lld %d\n", (long long)cpu, lost);
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    char *line = NULL;
    size_t cap = 0;
    while (getline(&line, &cap, stdin) > 0) {
        char *tok[32];
        int nt = 0;
        for (char *s = strtok(line, " \n"); s && nt < 32; s = strtok(NULL, " \n"))
            tok[nt++] = s;
        if (nt == 0)
            continue;
        const char *op = tok[0];
        if (!strcmp(op, "quit"))
            break;
        if (!strcmp(op, "rtt") && (nt == 3 || nt == 4)) {
            cmd_rtt(tok[2], atof(tok[1]), nt == 4 ? atoll(tok[3]) : 0);
            continue;
        }
        /* OP LIB NAME ARGS... URL...: the URLs are the tokens that start with redis:// */
        int first_url = 3;
        while (first_url < nt && strncmp(tok[first_url], "redis://", 8))
            first_url++;
        if (nt < 4 || first_url == nt)
            die("bad command", op);
        const char **urls = (const char **)&tok[first_url];
        size_t nurls = (size_t)(nt - first_url);
        peer *p = peer_get(tok[1], tok[2], urls, nurls);
        if (!strcmp(op, "pairs")) {
            cmd_pairs(p, atof(tok[3]));
        } else if (!strcmp(op, "contend")) {
            cmd_contend(p, atoll(tok[3]), atoll(tok[4]), atoll(tok[5]));
        } else if (!strcmp(op, "acquire")) {
            printf("started %lld\n", (long long)now_ns());
            must(redmutex_lock_acquire(p->lock, NULL, REDMUTEX_WAIT_FOREVER), "acquire");
            printf("ok %lld\n", (long long)now_ns());
        } else if (!strcmp(op, "release")) {
            int64_t t0 = now_ns();
            must(redmutex_lock_release(p->lock, NULL), "release");
            printf("ok %lld %lld\n", (long long)t0, (long long)now_ns());
        } else if (!strcmp(op, "hold")) {
            cmd_hold(p, atoi(tok[3]), urls, nurls);
        } else if (!strcmp(op, "unhold")) {
            cmd_unhold(p);
        } else {
            die("unknown command", op);
        }
    }
    free(line);
    return 0;
}
