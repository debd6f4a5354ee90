/*
 * Semaphores with leased permits (redmutex_semaphore_*), in Redisson's
 * RPermitExpirableSemaphore format, against real redis-servers: how many hold
 * at once, leases that end with a dead holder and are renewed for a live
 * one, waiting by notification, bad input, Redlock's larger quorum.
 */
#define _GNU_SOURCE
#include "cluster.h"
#include "harness.h"
#include "procs.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAXN 5
static rs_server srv;
static rs_server servers[MAXN];

static redmutex_client *sem_client(const rs_server *s, int64_t lease_ms)
{
    redmutex_client_options o = REDMUTEX_CLIENT_OPTIONS_INIT;
    o.watchdog_lease_ms = lease_ms;
    o.command_timeout_ms = rt_scaled_ms(1000);
    o.connect_timeout_ms = rt_scaled_ms(2000);
    o.shutdown_timeout_ms = 1000;
    const char *url = s->url;
    redmutex_client *c = NULL;
    CHECK_OK(redmutex_client_new(&c, &url, 1, &o));
    return c;
}

static redmutex_semaphore *new_sem(redmutex_client *c, const char *name, int64_t permits, int64_t lease_ms,
                                   uint32_t flags)
{
    redmutex_semaphore_options o = REDMUTEX_SEMAPHORE_OPTIONS_INIT;
    o.lease_ms = lease_ms;
    o.flags = flags;
    redmutex_semaphore *s = NULL;
    CHECK_OK(redmutex_semaphore_new(&s, c, name, permits, &o));
    return s;
}

static void done(redmutex_client *c)
{
    redmutex_client_close(c);
    redmutex_client_free(c);
}

/* ZCARD of the semaphore's timeout zset. */
static long long held_on_server(rs_server *s, const char *name) { return rs_int(s, "ZCARD {%s}:timeout", name); }

/* ---- the wire format ----------------------------------------------------------- */

static void test_permits_are_kept_in_redissons_keys(void)
{
    rs_start(&srv, NULL);
    redmutex_client *c = sem_client(&srv, 30000);
    redmutex_semaphore *s = new_sem(c, "jobs", 3, 0, 0);
    CHECK(!rs_exists(&srv, "jobs"));
    char id[REDMUTEX_PERMIT_ID_SIZE], id2[REDMUTEX_PERMIT_ID_SIZE];
    CHECK_OK(redmutex_semaphore_acquire(id, sizeof id, s, 1, 0));
    CHECK(strlen(id) == 32 && strspn(id, "0123456789abcdef") == 32);
    /* The counter holds what is left; the zset the permit (16 raw bytes) with the end of its lease. */
    CHECK(rs_num(&srv, "GET jobs") == 2);
    CHECK(held_on_server(&srv, "jobs") == 1);
    redisReply *r = rs_cmd(&srv, "ZRANGE {jobs}:timeout 0 -1 WITHSCORES");
    CHECK(r && r->type == REDIS_REPLY_ARRAY && r->elements == 2 && r->element[0]->len == 16);
    char hex[33];
    for (int i = 0; i < 16; i++)
        snprintf(hex + 2 * i, 3, "%02x", (unsigned char)r->element[0]->str[i]);
    CHECKF(strcmp(hex, id) == 0, "member %s, permit id %s", hex, id);
    long long score = atoll(r->element[1]->str);
    freeReplyObject(r);
    r = rs_cmd(&srv, "TIME");
    long long now = atoll(r->element[0]->str) * 1000 + atoll(r->element[1]->str) / 1000;
    freeReplyObject(r);
    /* The lease (the watchdog's 30 s) ends on the server's clock. */
    CHECKF(score > now + 25000 && score <= now + 30000, "lease ends %lld ms from now", score - now);
    /* Two permits in one acquisition: two members, consecutive ids. */
    CHECK_OK(redmutex_semaphore_acquire(id2, sizeof id2, s, 2, 0));
    CHECKF(strlen(id2) == 34 && strcmp(id2 + 32, "*2") == 0, "id %s", id2);
    CHECK(rs_num(&srv, "GET jobs") == 0);
    CHECK(held_on_server(&srv, "jobs") == 3);
    CHECK_OK(redmutex_semaphore_release(s, id2));
    CHECK(rs_num(&srv, "GET jobs") == 2);
    CHECK_OK(redmutex_semaphore_release(s, id));
    CHECK(rs_num(&srv, "GET jobs") == 3);
    CHECK(held_on_server(&srv, "jobs") == 0);
    redmutex_semaphore_free(s);
    done(c);
    rs_stop(&srv);
}

static void test_a_release_publishes_the_count_on_redissons_channel(void)
{
    rs_start(&srv, NULL);
    redmutex_client *c = sem_client(&srv, 30000);
    redmutex_semaphore *s = new_sem(c, "pub", 2, 0, 0);
    char id[REDMUTEX_PERMIT_ID_SIZE];
    CHECK_OK(redmutex_semaphore_acquire(id, sizeof id, s, 1, 0));
    redisContext *sub = redisConnect("127.0.0.1", srv.port);
    CHECK(sub && !sub->err);
    redisReply *r = redisCommand(sub, "SUBSCRIBE redisson_sc:{pub}");
    CHECK(r);
    freeReplyObject(r);
    CHECK_OK(redmutex_semaphore_release(s, id));
    r = NULL;
    CHECK(redisGetReply(sub, (void **)&r) == REDIS_OK && r && r->type == REDIS_REPLY_ARRAY && r->elements == 3);
    CHECK(strcmp(r->element[1]->str, "redisson_sc:{pub}") == 0);
    CHECKF(strcmp(r->element[2]->str, "2") == 0, "published '%s'", r->element[2]->str);
    freeReplyObject(r);
    redisFree(sub);
    redmutex_semaphore_free(s);
    done(c);
    rs_stop(&srv);
}

/* ---- deployments: one server, five (Redlock), a cluster -------------------------- */

/* Where a test runs: its URLs, and the server that keeps a name's keys there. */
typedef struct deployment {
    const char *urls[MAXN];
    size_t n;
    rc_cluster *cl; /* a cluster: one URL with every node as a seed */
} deployment;

static rc_cluster cl;

static deployment one_server(void)
{
    rs_start(&srv, NULL);
    return (deployment){{srv.url}, 1, NULL};
}

static deployment five_servers(void)
{
    deployment d = {{NULL}, MAXN, NULL};
    for (int i = 0; i < MAXN; i++) {
        rs_start(&servers[i], NULL);
        d.urls[i] = servers[i].url;
    }
    return d;
}

static deployment a_cluster(void)
{
    if (cl.n == 0)
        rc_start(&cl, 3, 0, NULL);
    return (deployment){{cl.url}, 1, &cl};
}

/* The server (a cluster: the master of the slot) holding semaphore `name`'s keys (server 0 of several). */
static rs_server *keeper(const deployment *d, const char *name)
{
    if (!d->cl)
        return d->n == 1 ? &srv : &servers[0];
    char key[128];
    snprintf(key, sizeof key, "{%s}:timeout", name);
    return rc_owner(d->cl, rc_keyslot(d->cl, key, strlen(key)));
}

static redmutex_client *dep_client(const deployment *d, int64_t lease_ms)
{
    redmutex_client_options o = REDMUTEX_CLIENT_OPTIONS_INIT;
    o.watchdog_lease_ms = lease_ms;
    o.command_timeout_ms = rt_scaled_ms(1000);
    o.connect_timeout_ms = rt_scaled_ms(2000);
    o.shutdown_timeout_ms = 1000;
    redmutex_client *c = NULL;
    if (redmutex_client_new(&c, d->urls, d->n, &o) != 0) {
        fprintf(stderr, "client: %s\n", redmutex_last_error());
        _exit(98);
    }
    return c;
}

static void stop_deployment(const deployment *d)
{
    if (d->cl)
        return; /* one cluster serves the binary */
    if (d->n == 1)
        rs_stop(&srv);
    for (size_t i = 0; d->n > 1 && i < d->n; i++)
        rs_stop(&servers[i]);
}

/* ---- how many hold at once ---------------------------------------------------- */

typedef struct shared {
    atomic_int inside;
    atomic_int most;
    atomic_int violations;
    atomic_int errors;
    atomic_long acquisitions;
} shared;

typedef struct holder_arg {
    const deployment *d;
    const char *name;
    shared *sh;
    int rounds;
} holder_arg;

static int permit_holder(void *p)
{
    holder_arg *a = p;
    redmutex_client *c = dep_client(a->d, 30000);
    redmutex_semaphore *s = NULL;
    if (redmutex_semaphore_new(&s, c, a->name, 3, NULL) != 0)
        return 3;
    for (int i = 0; i < a->rounds; i++) {
        char id[REDMUTEX_PERMIT_ID_SIZE];
        int rc = redmutex_semaphore_acquire(id, sizeof id, s, 1, rt_scaled_ms(60000));
        if (rc != 0) {
            fprintf(stderr, "acquire: %s\n", redmutex_last_error());
            atomic_fetch_add(&a->sh->errors, 1);
            continue;
        }
        int in = atomic_fetch_add(&a->sh->inside, 1) + 1;
        if (in > 3)
            atomic_fetch_add(&a->sh->violations, 1);
        int most = atomic_load(&a->sh->most);
        while (in > most && !atomic_compare_exchange_weak(&a->sh->most, &most, in))
            ;
        usleep(300);
        atomic_fetch_sub(&a->sh->inside, 1);
        atomic_fetch_add(&a->sh->acquisitions, 1);
        if (redmutex_semaphore_release(s, id) != 0) {
            fprintf(stderr, "release: %s\n", redmutex_last_error());
            atomic_fetch_add(&a->sh->errors, 1);
        }
    }
    redmutex_semaphore_free(s);
    proc_client_done(c);
    return 0;
}

/* 8 processes x `rounds` acquisitions of a 3-permit semaphore: never more than 3 inside, and 3 reached. */
static void exactly_three_holders(deployment d, int rounds)
{
    shared *sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    CHECK(sh != MAP_FAILED);
    memset(sh, 0, sizeof *sh);
    enum { PROCS = 8 };
    rounds = proc_rounds(rounds);
    holder_arg a = {&d, "three", sh, rounds};
    pid_t pids[PROCS];
    for (int i = 0; i < PROCS; i++)
        pids[i] = proc_start(permit_holder, &a);
    for (int i = 0; i < PROCS; i++)
        CHECK(proc_wait(pids[i], 240000) == 0);
    printf("     %ld acquisitions, at most %d inside at once\n", (long)atomic_load(&sh->acquisitions),
           atomic_load(&sh->most));
    CHECK(atomic_load(&sh->errors) == 0);
    CHECK(atomic_load(&sh->violations) == 0);
    CHECK(atomic_load(&sh->acquisitions) == PROCS * rounds);
    /* Exactly three: all three permits were in use at once, never four. */
    CHECK(atomic_load(&sh->most) == 3);
    rs_server *k = keeper(&d, "three");
    CHECK(rs_num(k, "GET three") == 3);
    CHECK(held_on_server(k, "three") == 0);
    munmap(sh, sizeof *sh);
    stop_deployment(&d);
}

static void test_exactly_three_holders_at_once_over_eight_processes(void) { exactly_three_holders(one_server(), 200); }

static void test_exactly_three_holders_at_once_on_five_servers(void) { exactly_three_holders(five_servers(), 200); }

static void test_exactly_three_holders_at_once_on_a_cluster(void) { exactly_three_holders(a_cluster(), 200); }

/* ---- leases ------------------------------------------------------------------- */

/* The server's clock (TIME) in ms. */
static long long server_ms(rs_server *s)
{
    redisReply *r = rs_cmd(s, "TIME");
    long long now = atoll(r->element[0]->str) * 1000 + atoll(r->element[1]->str) / 1000;
    freeReplyObject(r);
    return now;
}

static void killed_holder(deployment d)
{
    const int64_t lease = rt_scaled_ms(1500);
    rs_server *k = keeper(&d, "crash");
    pid_t pid = fork();
    if (pid == 0) {
        /* A watchdog permit: renewed while the holder lives. */
        redmutex_client *c = dep_client(&d, lease);
        redmutex_semaphore *s = new_sem(c, "crash", 1, 0, 0);
        char id[REDMUTEX_PERMIT_ID_SIZE];
        if (redmutex_semaphore_acquire(id, sizeof id, s, 1, 0) != 0)
            _exit(2);
        for (;;)
            pause();
    }
    WAIT_FOR(held_on_server(k, "crash") == 1, 5000);
    /* Let the watchdog renew it once: what ends it then is the renewed lease. */
    rt_sleep_ms(lease / 2);
    long long lease_end = 0;
    for (size_t i = 0; i < (d.n > 1 ? d.n : 1); i++) { /* the latest of the servers' */
        rs_server *si = d.n > 1 ? &servers[i] : k;
        redisReply *r = rs_cmd(si, "ZRANGE {crash}:timeout 0 0 WITHSCORES");
        if (r && r->type == REDIS_REPLY_ARRAY && r->elements == 2 && atoll(r->element[1]->str) > lease_end)
            lease_end = atoll(r->element[1]->str);
        if (r)
            freeReplyObject(r);
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    redmutex_client *c = dep_client(&d, 30000);
    redmutex_semaphore *s = new_sem(c, "crash", 1, 0, 0);
    char id[REDMUTEX_PERMIT_ID_SIZE];
    /* Not before the lease ends: every try until then is refused. */
    while (server_ms(k) < lease_end - 50) {
        CHECK_RC(redmutex_semaphore_acquire(id, sizeof id, s, 1, 0), REDMUTEX_ETIMEDOUT);
        rt_sleep_ms(20);
    }
    /* A waiter is woken when it ends (the busy reply tells it when). */
    int64_t t0 = rt_now_ms();
    CHECK_OK(redmutex_semaphore_acquire(id, sizeof id, s, 1, rt_scaled_ms(5000)));
    int64_t took = rt_now_ms() - t0;
    CHECKF(took < rt_scaled_ms(800), "the waiter got the dead holder's permit %lld ms after its lease end",
           (long long)took);
    CHECK_OK(redmutex_semaphore_release(s, id));
    redmutex_semaphore_free(s);
    done(c);
    stop_deployment(&d);
}

static void test_a_killed_holders_permit_returns_when_its_lease_ends_and_not_before(void)
{
    killed_holder(one_server());
}

static void test_a_killed_holders_permit_returns_at_its_lease_end_on_five_servers(void)
{
    killed_holder(five_servers());
}

static void test_a_killed_holders_permit_returns_at_its_lease_end_on_a_cluster(void) { killed_holder(a_cluster()); }

static void watchdog_ten_leases(deployment d)
{
    const int64_t lease = rt_scaled_ms(600);
    redmutex_client *holder = dep_client(&d, lease);
    redmutex_client *other = dep_client(&d, 30000);
    redmutex_semaphore *s = new_sem(holder, "long", 1, 0, 0);
    redmutex_semaphore *o = new_sem(other, "long", 1, 0, 0);
    char id[REDMUTEX_PERMIT_ID_SIZE], oid[REDMUTEX_PERMIT_ID_SIZE];
    CHECK_OK(redmutex_semaphore_acquire(id, sizeof id, s, 1, 0));
    int64_t end = rt_now_ms() + 11 * lease;
    int tries = 0;
    while (rt_now_ms() < end) {
        CHECK_RC(redmutex_semaphore_acquire(oid, sizeof oid, o, 1, 0), REDMUTEX_ETIMEDOUT);
        redmutex_state st;
        CHECK_OK(redmutex_semaphore_state(&st, s, id));
        /* A renewal late on a loaded machine may fail once (RENEWAL_FAILING
           until the next one); the permit is never lost, nor taken. */
        CHECKF(st == REDMUTEX_STATE_HELD || st == REDMUTEX_STATE_RENEWAL_FAILING, "state %d", (int)st);
        tries++;
        rt_sleep_ms(lease / 8);
    }
    int64_t validity;
    CHECK_OK(redmutex_semaphore_validity(&validity, s, id));
    CHECKF(validity > lease / 3, "validity %lld ms", (long long)validity);
    printf("     held 11 leases of %lld ms; %d tries of another client refused\n", (long long)lease, tries);
    CHECK_OK(redmutex_semaphore_release(s, id));
    CHECK_OK(redmutex_semaphore_acquire(oid, sizeof oid, o, 1, 0));
    CHECK_OK(redmutex_semaphore_release(o, oid));
    redmutex_semaphore_free(s);
    redmutex_semaphore_free(o);
    done(holder);
    done(other);
    stop_deployment(&d);
}

static void test_the_watchdog_keeps_a_long_holders_permit_past_ten_leases(void) { watchdog_ten_leases(one_server()); }

static void test_the_watchdog_keeps_a_permit_past_ten_leases_on_five_servers(void)
{
    watchdog_ten_leases(five_servers());
}

static void test_the_watchdog_keeps_a_permit_past_ten_leases_on_a_cluster(void) { watchdog_ten_leases(a_cluster()); }

static void test_a_permit_taken_away_is_reported_lost(void)
{
    rs_start(&srv, NULL);
    const int64_t lease = rt_scaled_ms(600);
    redmutex_client *c = sem_client(&srv, lease);
    redmutex_semaphore *s = new_sem(c, "gone", 2, 0, 0);
    int efd = redmutex_client_event_fd(c);
    CHECK(efd >= 0);
    char id[REDMUTEX_PERMIT_ID_SIZE];
    CHECK_OK(redmutex_semaphore_acquire(id, sizeof id, s, 1, 0));
    freeReplyObject(rs_cmd(&srv, "DEL {gone}:timeout"));
    uint64_t lock_id = 0;
    redmutex_state st = REDMUTEX_STATE_HELD;
    char owner[REDMUTEX_OWNER_MAX + 1];
    WAIT_FOR(redmutex_client_next_event(c, &lock_id, &st, owner, sizeof owner) == 1, 3000);
    CHECK(lock_id == redmutex_semaphore_id(s));
    CHECK(st == REDMUTEX_STATE_LOST);
    CHECKF(strcmp(owner, id) == 0, "event names '%s', permit %s", owner, id);
    CHECK_RC(redmutex_semaphore_release(s, id), REDMUTEX_ELOST);
    CHECK(strstr(redmutex_last_error(), "permit") != NULL);
    redmutex_semaphore_free(s);
    done(c);
    rs_stop(&srv);
}

static void test_an_explicit_lease_is_not_renewed_and_its_end_is_reported(void)
{
    rs_start(&srv, NULL);
    redmutex_client *c = sem_client(&srv, 30000);
    const int64_t lease = rt_scaled_ms(300);
    redmutex_semaphore *s = new_sem(c, "short", 1, lease, 0);
    char id[REDMUTEX_PERMIT_ID_SIZE];
    CHECK_OK(redmutex_semaphore_acquire(id, sizeof id, s, 1, 0));
    redmutex_state st;
    WAIT_FOR(redmutex_semaphore_state(&st, s, id) == 0 && st == REDMUTEX_STATE_LOST, 3000);
    /* The next acquisition reclaims it on the server, whoever makes it (the
       holder saw it lost a drift allowance before its end on the server). */
    redmutex_semaphore *t = new_sem(c, "short", 1, 0, 0);
    char id2[REDMUTEX_PERMIT_ID_SIZE];
    CHECK_OK(redmutex_semaphore_acquire(id2, sizeof id2, t, 1, rt_scaled_ms(1000)));
    CHECK_RC(redmutex_semaphore_release(s, id), REDMUTEX_ELOST);
    CHECK_OK(redmutex_semaphore_release(t, id2));
    redmutex_semaphore_free(s);
    redmutex_semaphore_free(t);
    done(c);
    rs_stop(&srv);
}

static void test_extend_moves_the_lease_and_never_recreates(void)
{
    rs_start(&srv, NULL);
    redmutex_client *c = sem_client(&srv, 30000);
    redmutex_semaphore *s = new_sem(c, "ext", 1, 5000, 0);
    char id[REDMUTEX_PERMIT_ID_SIZE];
    CHECK_OK(redmutex_semaphore_acquire(id, sizeof id, s, 1, 0));
    CHECK_OK(redmutex_semaphore_extend(s, id, 60000, REDMUTEX_EXTEND_REPLACE));
    int64_t validity;
    CHECK_OK(redmutex_semaphore_validity(&validity, s, id));
    CHECK(validity > 50000);
    CHECK_OK(redmutex_semaphore_release(s, id));
    CHECK_RC(redmutex_semaphore_extend(s, id, 60000, REDMUTEX_EXTEND_REPLACE), REDMUTEX_ENOTOWNER);
    CHECK(held_on_server(&srv, "ext") == 0);
    redmutex_semaphore_free(s);
    done(c);
    rs_stop(&srv);
}

/* ---- waiting ------------------------------------------------------------------- */

typedef struct waiter_arg {
    redmutex_semaphore *s;
    atomic_int started;
    int rc;
    _Atomic int64_t got_ms;
    char id[REDMUTEX_PERMIT_ID_SIZE];
} waiter_arg;

static void *waiter_main(void *p)
{
    waiter_arg *w = p;
    atomic_store(&w->started, 1);
    w->rc = redmutex_semaphore_acquire(w->id, sizeof w->id, w->s, 1, rt_scaled_ms(20000));
    atomic_store(&w->got_ms, rt_now_ms());
    return NULL;
}

static void test_a_waiter_wakes_on_a_release_not_on_a_timer(void)
{
    rs_start(&srv, NULL);
    redmutex_client *holder = sem_client(&srv, 30000);
    /* A long backoff cap: only the release message can wake it soon. */
    redmutex_client_options o = REDMUTEX_CLIENT_OPTIONS_INIT;
    o.wait_backoff_cap_ms = 10000;
    const char *url = srv.url;
    redmutex_client *wc;
    CHECK_OK(redmutex_client_new(&wc, &url, 1, &o));
    redmutex_semaphore *s = new_sem(holder, "wake", 1, 0, 0);
    redmutex_semaphore *ws = new_sem(wc, "wake", 1, 0, 0);
    char id[REDMUTEX_PERMIT_ID_SIZE];
    CHECK_OK(redmutex_semaphore_acquire(id, sizeof id, s, 1, 0));
    waiter_arg w = {.s = ws};
    pthread_t t;
    pthread_create(&t, NULL, waiter_main, &w);
    WAIT_FOR(rs_numsub(&srv, "redisson_sc:{wake}") == 1, 5000);
    rt_sleep_ms(300); /* past its first backoff: now only a message wakes it soon */
    int64_t released = rt_now_ms();
    CHECK_OK(redmutex_semaphore_release(s, id));
    pthread_join(t, NULL);
    CHECK_OK(w.rc);
    int64_t took = atomic_load(&w.got_ms) - released;
    CHECKF(took < rt_scaled_ms(1000), "the waiter took %lld ms after the release", (long long)took);
    CHECK_OK(redmutex_semaphore_release(ws, w.id));
    redmutex_semaphore_free(s);
    redmutex_semaphore_free(ws);
    done(holder);
    done(wc);
    rs_stop(&srv);
}

static void test_a_wait_that_runs_out_holds_nothing(void)
{
    rs_start(&srv, NULL);
    redmutex_client *c = sem_client(&srv, 30000);
    redmutex_semaphore *s = new_sem(c, "full", 2, 0, 0);
    char a[REDMUTEX_PERMIT_ID_SIZE], b[REDMUTEX_PERMIT_ID_SIZE];
    CHECK_OK(redmutex_semaphore_acquire(a, sizeof a, s, 2, 0));
    int64_t t0 = rt_now_ms();
    CHECK_RC(redmutex_semaphore_acquire(b, sizeof b, s, 1, 300), REDMUTEX_ETIMEDOUT);
    CHECK(rt_now_ms() - t0 >= 300);
    CHECKF(strstr(redmutex_last_error(), "semaphore 'full'") && strstr(redmutex_last_error(), "waited"), "%s",
           redmutex_last_error());
    CHECK(held_on_server(&srv, "full") == 2);
    CHECK_OK(redmutex_semaphore_release(s, a));
    int64_t avail = -1, cap = -1;
    CHECK_OK(redmutex_semaphore_available(&avail, &cap, s));
    CHECK(avail == 2 && cap == 2);
    redmutex_semaphore_free(s);
    done(c);
    rs_stop(&srv);
}

/* ---- capacity ------------------------------------------------------------------ */

/* Everything the servers have of semaphore `name`: counter, zset. */
static void server_state(rs_server *s, const char *name, char *out, size_t size)
{
    redisReply *g = rs_cmd(s, "GET %s", name);
    redisReply *z = rs_cmd(s, "ZRANGE {%s}:timeout 0 -1 WITHSCORES", name);
    snprintf(out, size, "%s|%zu|%s", g && g->type == REDIS_REPLY_STRING ? g->str : "-",
             z && z->type == REDIS_REPLY_ARRAY ? z->elements : (size_t)0,
             z && z->type == REDIS_REPLY_ARRAY && z->elements ? z->element[1]->str : "");
    if (g)
        freeReplyObject(g);
    if (z)
        freeReplyObject(z);
}

static void test_another_capacity_is_an_error_unless_resized(void)
{
    rs_start(&srv, NULL);
    redmutex_client *c = sem_client(&srv, 30000);
    redmutex_semaphore *three = new_sem(c, "cap", 3, 0, 0);
    char id[REDMUTEX_PERMIT_ID_SIZE], id5[REDMUTEX_PERMIT_ID_SIZE];
    CHECK_OK(redmutex_semaphore_acquire(id, sizeof id, three, 1, 0));
    char before[256], after[256];
    server_state(&srv, "cap", before, sizeof before);
    redmutex_semaphore *five = new_sem(c, "cap", 5, 0, 0);
    CHECK_RC(redmutex_semaphore_acquire(id5, sizeof id5, five, 1, 0), REDMUTEX_EINVAL);
    CHECKF(strstr(redmutex_last_error(), "has 3 permits") != NULL, "%s", redmutex_last_error());
    CHECK_RC(redmutex_semaphore_acquire(id5, sizeof id5, five, 1, 1000), REDMUTEX_EINVAL);
    server_state(&srv, "cap", after, sizeof after);
    CHECKF(strcmp(before, after) == 0, "the server changed: %s -> %s", before, after);
    /* Resized: five permits, the one held stays held. */
    redmutex_semaphore *resized = new_sem(c, "cap", 5, 0, REDMUTEX_SEMAPHORE_RESIZE);
    CHECK_OK(redmutex_semaphore_acquire(id5, sizeof id5, resized, 1, 0));
    int64_t avail, cap;
    CHECK_OK(redmutex_semaphore_available(&avail, &cap, resized));
    CHECKF(avail == 3 && cap == 5, "available %lld, capacity %lld", (long long)avail, (long long)cap);
    CHECK_RC(redmutex_semaphore_acquire(id5 + 0, sizeof id5, three, 1, 0), REDMUTEX_EINVAL);
    CHECK_OK(redmutex_semaphore_release(three, id));
    redmutex_semaphore_free(three);
    redmutex_semaphore_free(five);
    redmutex_semaphore_free(resized);
    done(c);
    rs_stop(&srv);
}

static void test_bad_input_is_refused_and_changes_nothing(void)
{
    rs_start(&srv, NULL);
    redmutex_client *c = sem_client(&srv, 30000);
    redmutex_semaphore *s = NULL;
    const char *url = srv.url;
    (void)url;
    CHECK_RC(redmutex_semaphore_new(&s, c, "bad", 0, NULL), REDMUTEX_EINVAL);
    CHECK_RC(redmutex_semaphore_new(&s, c, "bad", -3, NULL), REDMUTEX_EINVAL);
    CHECK_RC(redmutex_semaphore_new(&s, c, "bad", REDMUTEX_SEMAPHORE_PERMITS_MAX + 1, NULL), REDMUTEX_EINVAL);
    CHECK_RC(redmutex_semaphore_new(&s, c, "", 3, NULL), REDMUTEX_EINVAL);
    CHECK_RC(redmutex_semaphore_new(&s, NULL, "bad", 3, NULL), REDMUTEX_EINVAL);
    CHECK_RC(redmutex_semaphore_new(NULL, c, "bad", 3, NULL), REDMUTEX_EINVAL);
    redmutex_semaphore_options o = REDMUTEX_SEMAPHORE_OPTIONS_INIT;
    o.flags = 1u << 7;
    CHECK_RC(redmutex_semaphore_new(&s, c, "bad", 3, &o), REDMUTEX_EINVAL);
    o = (redmutex_semaphore_options)REDMUTEX_SEMAPHORE_OPTIONS_INIT;
    o.lease_ms = -1;
    CHECK_RC(redmutex_semaphore_new(&s, c, "bad", 3, &o), REDMUTEX_EINVAL);
    o = (redmutex_semaphore_options)REDMUTEX_SEMAPHORE_OPTIONS_INIT;
    o.version = 99;
    CHECK_RC(redmutex_semaphore_new(&s, c, "bad", 3, &o), REDMUTEX_EINVAL);
    s = new_sem(c, "bad", 3, 0, 0);
    char id[REDMUTEX_PERMIT_ID_SIZE];
    CHECK_RC(redmutex_semaphore_acquire(id, sizeof id, s, 0, 0), REDMUTEX_EINVAL);
    CHECK_RC(redmutex_semaphore_acquire(id, sizeof id, s, -1, 0), REDMUTEX_EINVAL);
    CHECK_RC(redmutex_semaphore_acquire(id, sizeof id, s, 4, 0), REDMUTEX_EINVAL);
    CHECKF(strstr(redmutex_last_error(), "it has 3 permits") != NULL, "%s", redmutex_last_error());
    CHECK_RC(redmutex_semaphore_acquire(id, sizeof id, s, 1, -5), REDMUTEX_EINVAL);
    CHECK_RC(redmutex_semaphore_acquire(id, sizeof id, s, 1, REDMUTEX_TIME_MAX_MS + 1), REDMUTEX_EINVAL);
    CHECK_RC(redmutex_semaphore_acquire(id, 10, s, 1, 0), REDMUTEX_EINVAL);
    CHECK_RC(redmutex_semaphore_acquire(NULL, sizeof id, s, 1, 0), REDMUTEX_EINVAL);
    CHECK_RC(redmutex_semaphore_acquire(id, sizeof id, NULL, 1, 0), REDMUTEX_EINVAL);
    CHECK_RC(redmutex_semaphore_release(s, NULL), REDMUTEX_EINVAL);
    CHECK_RC(redmutex_semaphore_release(s, "not-a-permit"), REDMUTEX_EINVAL);
    CHECK_RC(redmutex_semaphore_release(s, "0123456789abcdef0123456789abcdeF"), REDMUTEX_EINVAL);
    CHECK_RC(redmutex_semaphore_release(s, "0123456789abcdef0123456789abcdef*0"), REDMUTEX_EINVAL);
    CHECK_RC(redmutex_semaphore_release(s, "0123456789abcdef0123456789abcdef*99999"), REDMUTEX_EINVAL);
    CHECK_RC(redmutex_semaphore_extend(s, "0123456789abcdef0123456789abcdef", -1, REDMUTEX_EXTEND_ADD),
             REDMUTEX_EINVAL);
    int64_t v;
    CHECK_RC(redmutex_semaphore_fence(&v, s, "0123456789abcdef0123456789abcdef"), REDMUTEX_EINVAL);
    /* Nothing of any of that reached the server. */
    CHECK(rs_count_keys(&srv, "*") == 0);
    /* A permit nobody holds is no permit of ours. */
    CHECK_RC(redmutex_semaphore_release(s, "0123456789abcdef0123456789abcdef"), REDMUTEX_ENOTOWNER);
    /* A key of another type is refused, and left alone. */
    freeReplyObject(rs_cmd(&srv, "HSET other f 1"));
    redmutex_semaphore *w = new_sem(c, "other", 3, 0, 0);
    CHECK_RC(redmutex_semaphore_acquire(id, sizeof id, w, 1, 0), REDMUTEX_EWRONGTYPE);
    freeReplyObject(rs_cmd(&srv, "SET text hello"));
    redmutex_semaphore *t = new_sem(c, "text", 3, 0, 0);
    CHECK_RC(redmutex_semaphore_acquire(id, sizeof id, t, 1, 0), REDMUTEX_EWRONGTYPE);
    CHECK(rs_count_keys(&srv, "*") == 2);
    redmutex_semaphore_free(w);
    redmutex_semaphore_free(t);
    redmutex_semaphore_free(s);
    redmutex_semaphore_free(NULL);
    done(c);
    rs_stop(&srv);
}

static void test_fencing_tokens_increase_per_acquisition(void)
{
    rs_start(&srv, NULL);
    redmutex_client *c = sem_client(&srv, 30000);
    redmutex_semaphore *s = new_sem(c, "fenced", 2, 0, REDMUTEX_SEMAPHORE_FENCING);
    char a[REDMUTEX_PERMIT_ID_SIZE], b[REDMUTEX_PERMIT_ID_SIZE];
    CHECK_OK(redmutex_semaphore_acquire(a, sizeof a, s, 1, 0));
    CHECK_OK(redmutex_semaphore_acquire(b, sizeof b, s, 1, 0));
    int64_t fa, fb;
    CHECK_OK(redmutex_semaphore_fence(&fa, s, a));
    CHECK_OK(redmutex_semaphore_fence(&fb, s, b));
    CHECK(fa == 1 && fb == 2);
    CHECK(rs_num(&srv, "GET redisson_lock_token:{fenced}") == 2);
    CHECK_OK(redmutex_semaphore_release(s, a));
    CHECK_RC(redmutex_semaphore_fence(&fa, s, a), REDMUTEX_ENOTOWNER);
    CHECK_OK(redmutex_semaphore_release(s, b));
    redmutex_semaphore_free(s);
    done(c);
    rs_stop(&srv);
}

/* ---- Redlock -------------------------------------------------------------------- */

static void test_redlock_needs_the_larger_quorum_and_never_exceeds_the_capacity(void)
{
    for (int i = 0; i < MAXN; i++)
        rs_start(&servers[i], NULL);
    const char *urls[MAXN];
    for (int i = 0; i < MAXN; i++)
        urls[i] = servers[i].url;
    redmutex_client_options o = REDMUTEX_CLIENT_OPTIONS_INIT;
    o.command_timeout_ms = rt_scaled_ms(300);
    o.connect_timeout_ms = rt_scaled_ms(300);
    o.shutdown_timeout_ms = 500;
    redmutex_client *c;
    CHECK_OK(redmutex_client_new(&c, urls, MAXN, &o));
    /* Capacity 2 over 5 servers: a permit needs 2 * 5 / 3 + 1 = 4 servers.
       (With a majority, holders granted by 3 servers each could be three:
       {0,1,2}, {0,3,4}, {1,2,3}, no server granting more than 2.) Servers 0
       and 1 have both permits taken by others; 2, 3 and 4 grant: a majority,
       but not the quorum. */
    for (int i = 0; i < 2; i++)
        freeReplyObject(rs_cmd(&servers[i], "EVAL %s 2 red {red}:timeout",
                               "redis.call('set', KEYS[1], 0) "
                               "redis.call('zadd', KEYS[2], 9999999999999, 'x', 9999999999999, 'y') return 1"));
    redmutex_semaphore *s = new_sem(c, "red", 2, 0, 0);
    char a[REDMUTEX_PERMIT_ID_SIZE];
    CHECK_RC(redmutex_semaphore_acquire(a, sizeof a, s, 1, 0), REDMUTEX_ETIMEDOUT);
    /* The refused attempt was taken back where it was granted. */
    for (int i = 0; i < MAXN; i++)
        CHECKF(rs_int(&servers[i], "ZCARD {red}:timeout") == (i < 2 ? 2 : 0), "server %d holds %lld", i,
               rs_int(&servers[i], "ZCARD {red}:timeout"));
    /* One permit freed on server 0: four grant. */
    freeReplyObject(rs_cmd(&servers[0], "ZREM {red}:timeout x"));
    freeReplyObject(rs_cmd(&servers[0], "INCR red"));
    CHECK_OK(redmutex_semaphore_acquire(a, sizeof a, s, 1, 0));
    CHECK_OK(redmutex_semaphore_release(s, a));
    for (int i = 0; i < MAXN; i++)
        CHECK(rs_num(&servers[i], "GET red") == (i == 1 ? 0 : i == 0 ? 1 : 2));
    for (int i = 0; i < 2; i++)
        freeReplyObject(rs_cmd(&servers[i], "DEL red {red}:timeout"));
    /* One server down: 4 of 5 still grant. */
    rs_kill(&servers[4]);
    CHECK_OK(redmutex_semaphore_acquire(a, sizeof a, s, 1, 0));
    CHECK_OK(redmutex_semaphore_release(s, a));
    /* Two down: no permit can be had by four. */
    rs_kill(&servers[3]);
    int rc = redmutex_semaphore_acquire(a, sizeof a, s, 1, 0);
    CHECKF(rc == REDMUTEX_ECONN || rc == REDMUTEX_ETIMEDOUT, "acquire with 3 of 5 servers returned %d: %s", rc,
           redmutex_last_error());
    redmutex_semaphore_free(s);
    done(c);
    for (int i = 0; i < MAXN; i++)
        rs_stop(&servers[i]);
}

int main(int argc, char **argv)
{
    static const rt_test tests[] = {
        {"permits_are_kept_in_redissons_keys", test_permits_are_kept_in_redissons_keys},
        {"a_release_publishes_the_count_on_redissons_channel", test_a_release_publishes_the_count_on_redissons_channel},
        {"exactly_three_holders_at_once_over_eight_processes", test_exactly_three_holders_at_once_over_eight_processes},
        {"exactly_three_holders_at_once_on_five_servers", test_exactly_three_holders_at_once_on_five_servers},
        {"exactly_three_holders_at_once_on_a_cluster", test_exactly_three_holders_at_once_on_a_cluster},
        {"a_killed_holders_permit_returns_when_its_lease_ends_and_not_before",
         test_a_killed_holders_permit_returns_when_its_lease_ends_and_not_before},
        {"a_killed_holders_permit_returns_at_its_lease_end_on_five_servers",
         test_a_killed_holders_permit_returns_at_its_lease_end_on_five_servers},
        {"a_killed_holders_permit_returns_at_its_lease_end_on_a_cluster",
         test_a_killed_holders_permit_returns_at_its_lease_end_on_a_cluster},
        {"the_watchdog_keeps_a_long_holders_permit_past_ten_leases",
         test_the_watchdog_keeps_a_long_holders_permit_past_ten_leases},
        {"the_watchdog_keeps_a_permit_past_ten_leases_on_five_servers",
         test_the_watchdog_keeps_a_permit_past_ten_leases_on_five_servers},
        {"the_watchdog_keeps_a_permit_past_ten_leases_on_a_cluster",
         test_the_watchdog_keeps_a_permit_past_ten_leases_on_a_cluster},
        {"a_permit_taken_away_is_reported_lost", test_a_permit_taken_away_is_reported_lost},
        {"an_explicit_lease_is_not_renewed_and_its_end_is_reported",
         test_an_explicit_lease_is_not_renewed_and_its_end_is_reported},
        {"extend_moves_the_lease_and_never_recreates", test_extend_moves_the_lease_and_never_recreates},
        {"a_waiter_wakes_on_a_release_not_on_a_timer", test_a_waiter_wakes_on_a_release_not_on_a_timer},
        {"a_wait_that_runs_out_holds_nothing", test_a_wait_that_runs_out_holds_nothing},
        {"another_capacity_is_an_error_unless_resized", test_another_capacity_is_an_error_unless_resized},
        {"bad_input_is_refused_and_changes_nothing", test_bad_input_is_refused_and_changes_nothing},
        {"fencing_tokens_increase_per_acquisition", test_fencing_tokens_increase_per_acquisition},
        {"redlock_needs_the_larger_quorum_and_never_exceeds_the_capacity",
         test_redlock_needs_the_larger_quorum_and_never_exceeds_the_capacity},
    };
    return rt_run(tests, sizeof tests / sizeof tests[0], argc, argv);
}
