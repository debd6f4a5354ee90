/* Fair locks (Redisson RFairLock wire format) against real redis-servers, across threads and processes. */
#define _GNU_SOURCE
#include "harness.h"
#include "procs.h"

#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

static rs_server srv;

/* The waiter lease and refresh interval of kind.h: a dead waiter blocks at most their sum. */
#define WAITER_LEASE_MS 3000
#define REFRESH_MS 500

static redmutex_lock *fair(redmutex_client *c, const char *name, int64_t lease_ms, uint32_t flags)
{
    redmutex_lock_options o = REDMUTEX_LOCK_OPTIONS_INIT;
    o.lease_ms = lease_ms;
    o.flags = flags;
    redmutex_lock *l = NULL;
    CHECK_OK(redmutex_lock_new(&l, c, name, REDMUTEX_KIND_FAIR, &o));
    return l;
}

static long long queue_len(const char *name) { return rs_int(&srv, "LLEN redisson_lock_queue:{%s}", name); }

/* Nothing of the lock is left: lock, queue, timeouts, waiter records. */
static bool all_gone(const char *name)
{
    char k[4][256];
    snprintf(k[0], sizeof k[0], "%s", name);
    snprintf(k[1], sizeof k[1], "redisson_lock_queue:{%s}", name);
    snprintf(k[2], sizeof k[2], "redisson_lock_timeout:{%s}", name);
    snprintf(k[3], sizeof k[3], "redmutex_lock_waiters:{%s}", name);
    for (int i = 0; i < 4; i++)
        if (rs_exists(&srv, k[i]))
            return false;
    return true;
}

static void test_reentrant_in_redisson_fair_format(void)
{
    rs_start(&srv, NULL);
    redmutex_client *c = rt_client(&srv, 0);
    redmutex_lock *l = fair(c, "fq", 0, 0);
    CHECK(redmutex_lock_kind(l) == REDMUTEX_KIND_FAIR);
    char me[128];
    CHECK_OK(redmutex_client_thread_owner(me, sizeof me, c));
    for (int i = 1; i <= 3; i++) {
        CHECK_OK(redmutex_lock_acquire(l, NULL, 0));
        CHECK(rs_num(&srv, "HGET fq %s", me) == i);
    }
    long long pttl = rs_int(&srv, "PTTL fq");
    CHECK(pttl > 25000 && pttl <= 30000);
    int64_t n = 0;
    CHECK_OK(redmutex_lock_hold_count(&n, l, NULL));
    CHECK(n == 3);
    for (int i = 0; i < 3; i++)
        CHECK_OK(redmutex_lock_release(l, NULL));
    CHECK(all_gone("fq"));
    CHECK_RC(redmutex_lock_release(l, NULL), REDMUTEX_ENOTOWNER);
    redmutex_lock_free(l);
    redmutex_client_free(c);
}

/* ---- threads of one process ------------------------------------------------------ */

typedef struct waiter_arg {
    redmutex_lock *l;
    int id;
    int64_t wait_ms;
    int rc;
    _Atomic int *order; /* next slot */
    int *served;        /* ids in the order they got the lock */
} waiter_arg;

static void *waiter_thread(void *p)
{
    waiter_arg *a = p;
    a->rc = redmutex_lock_acquire(a->l, NULL, a->wait_ms);
    if (a->rc == 0) {
        a->served[atomic_fetch_add(a->order, 1)] = a->id;
        rt_sleep_ms(5);
        redmutex_lock_release(a->l, NULL);
    }
    return NULL;
}

static void test_thread_waiters_queue_in_arrival_order_in_redisson_keys(void)
{
    rs_start(&srv, NULL);
    redmutex_client *c = rt_client(&srv, 0);
    redmutex_lock *l = fair(c, "tq", 0, 0);
    CHECK_OK(redmutex_lock_acquire(l, NULL, 0));
    enum { N = 4 };
    pthread_t t[N];
    waiter_arg a[N];
    _Atomic int next = 0;
    int served[N] = {0};
    for (int i = 0; i < N; i++) {
        a[i] = (waiter_arg){.l = l, .id = i, .wait_ms = 20000, .order = &next, .served = served};
        pthread_create(&t[i], NULL, waiter_thread, &a[i]);
        WAIT_FOR(queue_len("tq") == i + 1, 10000);
    }
    /* Redisson's keys: the queue lists the waiting fields, each with a timeout
       further in the future than the one before; redmutex's records beside. */
    redisReply *q = rs_cmd(&srv, "LRANGE redisson_lock_queue:{tq} 0 -1");
    CHECK(q && q->type == REDIS_REPLY_ARRAY && q->elements == N);
    double prev = 0;
    for (size_t i = 0; i < q->elements; i++) {
        redisReply *sc = rs_cmd(&srv, "ZSCORE redisson_lock_timeout:{tq} %s", q->element[i]->str);
        CHECK(sc && sc->type == REDIS_REPLY_STRING);
        double score = atof(sc->str);
        CHECK(score > prev);
        prev = score;
        freeReplyObject(sc);
        CHECK(rs_int(&srv, "HEXISTS redmutex_lock_waiters:{tq} %s", q->element[i]->str) == 1);
        /* each waiter listens on its own channel */
        char ch[300];
        snprintf(ch, sizeof ch, "redisson_lock__channel:{tq}:%s", q->element[i]->str);
        WAIT_FOR(rs_numsub(&srv, ch) == 1, 2000); /* (a waiter subscribes after it has joined the queue) */
    }
    freeReplyObject(q);
    CHECK_OK(redmutex_lock_release(l, NULL));
    for (int i = 0; i < N; i++) {
        pthread_join(t[i], NULL);
        CHECK_OK(a[i].rc);
    }
    for (int i = 0; i < N; i++)
        CHECKF(served[i] == i, "position %d was served to waiter %d", i, served[i]);
    WAIT_FOR(all_gone("tq"), 2000);
    redmutex_lock_free(l);
    redmutex_client_free(c);
}

static void test_waiter_that_gives_up_leaves_the_queue(void)
{
    rs_start(&srv, NULL);
    redmutex_client *c = rt_client(&srv, 0);
    redmutex_lock *l = fair(c, "gq", 0, 0);
    CHECK_OK(redmutex_lock_acquire(l, NULL, 0));
    _Atomic int next = 0;
    int served[1];
    waiter_arg a = {.l = l, .id = 0, .wait_ms = 300, .order = &next, .served = served};
    pthread_t t;
    int64_t t0 = rt_now_ms();
    pthread_create(&t, NULL, waiter_thread, &a);
    pthread_join(t, NULL);
    CHECK_RC(a.rc, REDMUTEX_ETIMEDOUT);
    CHECK(rt_now_ms() - t0 < rt_scaled_ms(3000));
    CHECK(queue_len("gq") == 0);
    CHECK(!rs_exists(&srv, "redisson_lock_timeout:{gq}") && !rs_exists(&srv, "redmutex_lock_waiters:{gq}"));
    /* A try without waiting never joins the queue. */
    a.wait_ms = 0;
    pthread_create(&t, NULL, waiter_thread, &a);
    pthread_join(t, NULL);
    CHECK_RC(a.rc, REDMUTEX_ETIMEDOUT);
    CHECK(queue_len("gq") == 0);
    CHECK_OK(redmutex_lock_release(l, NULL));
    CHECK(all_gone("gq"));
    redmutex_lock_free(l);
    redmutex_client_free(c);
}

/* A thread that acquires, says so, and holds until told to release. */
typedef struct hold_arg {
    redmutex_lock *l;
    int rc;
    int64_t fence;
    _Atomic int got, stop;
} hold_arg;

static void *hold_thread(void *p)
{
    hold_arg *a = p;
    a->rc = redmutex_lock_acquire(a->l, NULL, 20000);
    if (a->rc != 0)
        return NULL;
    redmutex_lock_fence(&a->fence, a->l, NULL);
    atomic_store(&a->got, 1);
    while (!atomic_load(&a->stop))
        rt_sleep_ms(2);
    a->rc = redmutex_lock_release(a->l, NULL);
    return NULL;
}

/*
 * The releasing script hands the lock to a waiting watchdog holder: it
 * publishes "g <wait id> <fencing token>" on the waiter's own channel, and the
 * waiter holds the lock without another round trip. The hand-off's TTL is
 * only the waiter's record (3 s); its watchdog extends it to the full lease a
 * third of that later (not a third of a lease later).
 */
static void test_handoff_by_the_releasing_script(void)
{
    rs_start(&srv, NULL);
    redmutex_client *c = rt_client(&srv, 0);
    redmutex_lock *l = fair(c, "hq", 0, REDMUTEX_LOCK_FENCING), *l2 = fair(c, "hq", 0, REDMUTEX_LOCK_FENCING);
    CHECK_OK(redmutex_lock_acquire(l, NULL, 0));
    int64_t f1 = 0;
    CHECK_OK(redmutex_lock_fence(&f1, l, NULL));
    hold_arg a = {.l = l2};
    pthread_t t;
    pthread_create(&t, NULL, hold_thread, &a);
    WAIT_FOR(queue_len("hq") == 1, 10000);
    redisReply *head = rs_cmd(&srv, "LINDEX redisson_lock_queue:{hq} 0");
    CHECK(head && head->type == REDIS_REPLY_STRING);
    redisContext *sub = redisConnect("127.0.0.1", srv.port);
    CHECK(sub && !sub->err);
    struct timeval tv = {10, 0};
    redisSetTimeout(sub, tv);
    redisReply *r = redisCommand(sub, "SUBSCRIBE redisson_lock__channel:{hq}:%s", head->str);
    CHECK(r && r->type == REDIS_REPLY_ARRAY);
    freeReplyObject(r);
    freeReplyObject(head);
    CHECK_OK(redmutex_lock_release(l, NULL));
    r = NULL;
    CHECK(redisGetReply(sub, (void **)&r) == REDIS_OK && r && r->type == REDIS_REPLY_ARRAY && r->elements == 3);
    char id[32];
    long long token = 0;
    CHECKF(sscanf(r->element[2]->str, "g %31s %lld", id, &token) == 2 && strlen(id) == 16, "message '%s'",
           r->element[2]->str);
    freeReplyObject(r);
    redisFree(sub);
    CHECK(token == f1 + 1);
    WAIT_FOR(atomic_load(&a.got), 5000);
    CHECK(a.fence == token);
    WAIT_FOR(rs_int(&srv, "PTTL hq") > 20000, 2000);
    atomic_store(&a.stop, 1);
    pthread_join(t, NULL);
    CHECK_OK(a.rc);
    CHECK(all_gone("hq"));
    redmutex_lock_free(l);
    redmutex_lock_free(l2);
    redmutex_client_free(c);
}

/* ---- processes -------------------------------------------------------------------- */

typedef struct proc_arg {
    const char *name;
    int id;
    int64_t lease_ms;
    int hold_ms;
    int rounds;
} proc_arg;

/* Holds the lock until the key "<name>:go" appears. */
static int holder_proc(void *p)
{
    proc_arg *a = p;
    redmutex_client *c = proc_client(srv.url);
    redmutex_lock *l = fair(c, a->name, a->lease_ms, 0);
    if (redmutex_lock_acquire(l, NULL, 10000) != 0)
        return 2;
    char go[300];
    snprintf(go, sizeof go, "%s:go", a->name);
    while (!rs_exists(&srv, go))
        rt_sleep_ms(2);
    int rc = redmutex_lock_release(l, NULL);
    redmutex_lock_free(l);
    proc_client_done(c);
    return rc == 0 ? 0 : 3;
}

/* Waits for the lock, writes its id to "<name>:served" while holding, holds hold_ms. */
static int served_proc(void *p)
{
    proc_arg *a = p;
    redmutex_client *c = proc_client(srv.url);
    redmutex_lock *l = fair(c, a->name, a->lease_ms, 0);
    if (redmutex_lock_acquire(l, NULL, 60000) != 0) {
        fprintf(stderr, "worker %d: %s\n", a->id, redmutex_last_error());
        return 2;
    }
    redisReply *r = rs_cmd(&srv, "RPUSH %s:served %d:%lld", a->name, a->id, (long long)rt_now_ms());
    if (r)
        freeReplyObject(r);
    rt_sleep_ms(a->hold_ms);
    int rc = redmutex_lock_release(l, NULL);
    redmutex_lock_free(l);
    proc_client_done(c);
    return rc == 0 ? 0 : 3;
}

/* The ids in "<name>:served" in order, and (optionally) when each got the lock. */
static int served(const char *name, int *ids, long long *at, int max)
{
    redisReply *r = rs_cmd(&srv, "LRANGE %s:served 0 -1", name);
    CHECK(r && r->type == REDIS_REPLY_ARRAY);
    int n = (int)r->elements < max ? (int)r->elements : max;
    for (int i = 0; i < n; i++) {
        ids[i] = atoi(r->element[i]->str);
        if (at)
            at[i] = atoll(strchr(r->element[i]->str, ':') + 1);
    }
    freeReplyObject(r);
    return n;
}

/*
 * Starts a holder of `name` (it releases when "<name>:go" appears), then n
 * waiters (served_proc, ids 0..n-1), one at a time: each is in the queue
 * before the next starts. Returns the holder.
 */
static pid_t queue_behind_holder(const char *name, int64_t lease_ms, int n, pid_t *pid)
{
    proc_arg h = {name, -1, lease_ms, 0, 0};
    pid_t holder = proc_start(holder_proc, &h);
    WAIT_FOR(rs_exists(&srv, name), 10000);
    for (int i = 0; i < n; i++) {
        proc_arg a = {name, i, lease_ms, 2, 0}; /* the child has its own copy */
        pid[i] = proc_start(served_proc, &a);
        WAIT_FOR(queue_len(name) == i + 1, 15000);
    }
    return holder;
}

/* 8 processes queue one after another behind a holder; they get the lock in exactly that order. */
static void fifo_of_8_processes(const char *name, int64_t lease_ms)
{
    enum { N = 8 };
    pid_t pid[N];
    pid_t holder = queue_behind_holder(name, lease_ms, N, pid);
    freeReplyObject(rs_cmd(&srv, "SET %s:go 1", name));
    CHECK(proc_wait(holder, 20000) == 0);
    for (int i = 0; i < N; i++)
        CHECKF(proc_wait(pid[i], 30000) == 0, "worker %d failed", i);
    int ids[N];
    CHECK(served(name, ids, NULL, N) == N);
    for (int i = 0; i < N; i++)
        CHECKF(ids[i] == i, "position %d was served to process %d", i, ids[i]);
    CHECK(all_gone(name));
}

static void test_fifo_of_8_processes_exact(void)
{
    rs_start(&srv, NULL);
    fifo_of_8_processes("fifo:wd", 0);        /* watchdog locks: hand-offs by the releasing script */
    fifo_of_8_processes("fifo:lease", 10000); /* explicit leases: the head is woken and takes it */
}

/*
 * A queued waiter killed with SIGKILL blocks the queue no longer than the
 * waiter lease plus one refresh interval (Redisson's own waiters: 5 minutes).
 */
static void test_sigkill_of_a_queued_waiter_does_not_stall_the_queue(void)
{
    rs_start(&srv, NULL);
    const char *name = "killq";
    pid_t pid[2];
    pid_t holder = queue_behind_holder(name, 0, 2, pid);
    kill(pid[0], SIGKILL); /* the first in the queue */
    int64_t killed = rt_now_ms();
    CHECK(proc_wait(pid[0], 5000) == -1);
    /* The holder leaves at once: the lock goes to the dead head first. */
    freeReplyObject(rs_cmd(&srv, "SET %s:go 1", name));
    CHECK(proc_wait(holder, 10000) == 0);
    CHECK(proc_wait(pid[1], 20000) == 0);
    int ids[2];
    long long at[2];
    CHECK(served(name, ids, at, 2) == 1 && ids[0] == 1);
    long long stalled = at[0] - killed;
    printf("     next waiter served %lld ms after the kill (bound %d ms)\n", stalled, WAITER_LEASE_MS + REFRESH_MS);
    CHECKF(stalled <= WAITER_LEASE_MS + REFRESH_MS + rt_scaled_ms(1500), "the queue stalled %lld ms", stalled);
    CHECK(all_gone(name));
}

/* A waiter that waits longer than the waiter lease keeps its place: it is alive. */
static void test_live_waiter_keeps_its_place_past_the_waiter_lease(void)
{
    rs_start(&srv, NULL);
    const char *name = "slowq";
    pid_t pid[2];
    pid_t holder = queue_behind_holder(name, 0, 2, pid);
    rt_sleep_ms(2 * WAITER_LEASE_MS); /* the point of the test: time passes while they wait */
    CHECK(queue_len(name) == 2);
    freeReplyObject(rs_cmd(&srv, "SET %s:go 1", name));
    CHECK(proc_wait(holder, 10000) == 0);
    CHECK(proc_wait(pid[0], 10000) == 0);
    CHECK(proc_wait(pid[1], 10000) == 0);
    int ids[2];
    CHECK(served(name, ids, NULL, 2) == 2 && ids[0] == 0 && ids[1] == 1);
    CHECK(all_gone(name));
}

/* Redisson's thread wait, how far apart queued timeouts are (kind_fair.c). */
#define THREAD_WAIT_MS 300000

/* The wall clock in ms, as the fair lock's timeouts (Redisson's) use it. */
static long long wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static long long zscore(const char *name, const char *field)
{
    return rs_num(&srv, "ZSCORE redisson_lock_timeout:{%s} %s", name, field);
}

/*
 * A waiter keeps its place however long it waits. Queued timeouts are one
 * thread wait (5 minutes) apart, and every acquisition moves them all down
 * by one. A waiter that has waited longer than a thread wait has pushed its
 * timeout forward itself; when that put it only one thread wait ahead, the
 * next acquisition in front of it left it at "now": the next script dropped
 * it as gone, and it queued again at the tail. The timeout planted here is
 * where a waiter stands after that long a wait (time passing brings every
 * timeout closer to now); its next attempt must push it far enough ahead
 * for every acquisition in front of it.
 */
static void test_waiter_keeps_its_place_however_long_it_waits(void)
{
    rs_start(&srv, NULL);
    const char *name = "longq";
    pid_t pid[3];
    pid_t holder = queue_behind_holder(name, 0, 3, pid);
    redisReply *r = rs_cmd(&srv, "LINDEX redisson_lock_queue:{%s} 1", name);
    CHECK(r && r->type == REDIS_REPLY_STRING);
    char second[256];
    snprintf(second, sizeof second, "%s", r->str);
    freeReplyObject(r);
    long long planted = wall_ms() + 10000;
    CHECK(rs_int(&srv, "ZADD redisson_lock_timeout:{%s} XX CH %lld %s", name, planted, second) == 1);
    WAIT_FOR(zscore(name, second) > planted + 60000, 5000); /* its next attempt */
    freeReplyObject(rs_cmd(&srv, "SET %s:go 1", name));
    CHECK(proc_wait(holder, 10000) == 0);
    for (int i = 0; i < 3; i++)
        CHECKF(proc_wait(pid[i], 20000) == 0, "worker %d failed", i);
    int ids[3];
    CHECK(served(name, ids, NULL, 3) == 3);
    CHECKF(ids[0] == 0 && ids[1] == 1 && ids[2] == 2, "served in the order %d %d %d", ids[0], ids[1], ids[2]);
    CHECK(all_gone(name));
}

/*
 * Waiters that die leave nothing behind for good: once the lock is gone,
 * the queue, its timeouts and the waiter records carry a TTL that ends
 * with the last queued timeout (plus one thread wait), not none at all.
 */
static void test_keys_of_dead_waiters_carry_a_ttl(void)
{
    rs_start(&srv, NULL);
    const char *name = "deadq";
    pid_t pid[2];
    pid_t holder = queue_behind_holder(name, 0, 2, pid);
    for (int i = 0; i < 2; i++) {
        kill(pid[i], SIGKILL);
        CHECK(proc_wait(pid[i], 5000) == -1);
    }
    freeReplyObject(rs_cmd(&srv, "SET %s:go 1", name));
    CHECK(proc_wait(holder, 10000) == 0);
    /* the lock went to the dead head with its waiter record's few seconds, then expired */
    WAIT_FOR(!rs_exists(&srv, name), WAITER_LEASE_MS + 5000);
    const char *prefix[] = {"redisson_lock_queue", "redisson_lock_timeout", "redmutex_lock_waiters"};
    int left = 0;
    for (int i = 0; i < 3; i++) {
        char key[256];
        snprintf(key, sizeof key, "%s:{%s}", prefix[i], name);
        long long ttl = rs_int(&srv, "PTTL %s", key);
        CHECKF(ttl == -2 || (ttl > 0 && ttl <= 3LL * THREAD_WAIT_MS), "%s has PTTL %lld", key, ttl);
        left += ttl != -2;
    }
    CHECK(left > 0); /* the second waiter is still queued: what the TTLs are about */
}

static int counter_proc(void *p)
{
    proc_arg *a = p;
    redmutex_client *c = proc_client(srv.url);
    redmutex_lock *l = fair(c, a->name, a->lease_ms, 0);
    for (int i = 0; i < a->rounds; i++) {
        if (redmutex_lock_acquire(l, NULL, 30000) != 0) {
            fprintf(stderr, "worker %d: %s\n", a->id, redmutex_last_error());
            return 2;
        }
        /* Read, then write: two increments in the lock at once would lose one. */
        long long v = rs_num(&srv, "GET %s:n", a->name);
        freeReplyObject(rs_cmd(&srv, "SET %s:n %lld", a->name, v + 1));
        if (redmutex_lock_release(l, NULL) != 0)
            return 3;
    }
    redmutex_lock_free(l);
    proc_client_done(c);
    return 0;
}

static void test_8_processes_200_increments_exact(void)
{
    rs_start(&srv, NULL);
    enum { N = 8 };
    int rounds = proc_rounds(200);
    proc_arg a[N];
    pid_t pid[N];
    for (int i = 0; i < N; i++) {
        a[i] = (proc_arg){"cq", i, 0, 0, rounds};
        pid[i] = proc_start(counter_proc, &a[i]);
    }
    for (int i = 0; i < N; i++)
        CHECKF(proc_wait(pid[i], 120000) == 0, "worker %d failed", i);
    CHECK(rs_num(&srv, "GET cq:n") == N * rounds);
    CHECK(all_gone("cq"));
}

/* ---- keys of the wrong type, force release ------------------------------------------ */

static void test_wrong_types_change_nothing(void)
{
    rs_start(&srv, NULL);
    redmutex_client *c = rt_client(&srv, 0);
    redmutex_lock *l = fair(c, "wt", 0, 0);
    freeReplyObject(rs_cmd(&srv, "SET wt plain"));
    CHECK_RC(redmutex_lock_acquire(l, NULL, 100), REDMUTEX_EWRONGTYPE);
    CHECK(rs_int(&srv, "DBSIZE") == 1);
    freeReplyObject(rs_cmd(&srv, "DEL wt"));
    freeReplyObject(rs_cmd(&srv, "SET redisson_lock_queue:{wt} x"));
    CHECK_RC(redmutex_lock_acquire(l, NULL, 0), REDMUTEX_EWRONGTYPE);
    CHECK(!rs_exists(&srv, "wt") && rs_int(&srv, "DBSIZE") == 1);
    freeReplyObject(rs_cmd(&srv, "DEL redisson_lock_queue:{wt}"));
    freeReplyObject(rs_cmd(&srv, "SET redisson_lock_token:{wt} 12x"));
    redmutex_lock *fenced = fair(c, "wt", 0, REDMUTEX_LOCK_FENCING);
    CHECK_RC(redmutex_lock_acquire(fenced, NULL, 0), REDMUTEX_ESERVER);
    CHECK(!rs_exists(&srv, "wt"));
    CHECK_OK(redmutex_lock_acquire(l, NULL, 0));
    CHECK_OK(redmutex_lock_release(l, NULL));
    redmutex_lock_free(fenced);
    redmutex_lock_free(l);
    redmutex_client_free(c);
}

static void test_force_release_passes_the_lock_on(void)
{
    rs_start(&srv, NULL);
    redmutex_client *c = rt_client(&srv, 0);
    redmutex_lock *l = fair(c, "fr", 0, 0), *l2 = fair(c, "fr", 0, 0);
    CHECK_OK(redmutex_lock_acquire(l, NULL, 0));
    _Atomic int next = 0;
    int served_ids[1];
    waiter_arg a = {.l = l2, .id = 7, .wait_ms = 20000, .order = &next, .served = served_ids};
    pthread_t t;
    pthread_create(&t, NULL, waiter_thread, &a);
    WAIT_FOR(queue_len("fr") == 1, 10000);
    int deleted = 0;
    int64_t t0 = rt_now_ms();
    CHECK_OK(redmutex_lock_force_release(&deleted, l2));
    CHECK(deleted == 1);
    pthread_join(t, NULL);
    CHECK_OK(a.rc);
    CHECK(rt_now_ms() - t0 < rt_scaled_ms(2000)); /* woken by the force release, not by a timer */
    CHECK_RC(redmutex_lock_release(l, NULL), REDMUTEX_ELOST);
    CHECK(all_gone("fr"));
    redmutex_lock_free(l);
    redmutex_lock_free(l2);
    redmutex_client_free(c);
}

static void on_lost(redmutex_lock *l, const char *owner, redmutex_state st, void *p)
{
    (void)l;
    (void)owner;
    if (st == REDMUTEX_STATE_LOST)
        atomic_store((_Atomic int *)p, 1);
}

/* The watchdog renews a fair hold and reports it lost when its key is gone; a nested acquisition never
 * re-creates it. */
static void test_lost_fair_hold_is_reported_and_not_recreated(void)
{
    rs_start(&srv, NULL);
    const char *url = srv.url;
    redmutex_client_options co;
    redmutex_client_options_init(&co, REDMUTEX_CLIENT_OPTIONS_VERSION);
    co.watchdog_lease_ms = rt_scaled_ms(600);
    redmutex_client *c;
    CHECK_OK(redmutex_client_new(&c, &url, 1, &co));
    _Atomic int lost = 0;
    redmutex_lock_options o = REDMUTEX_LOCK_OPTIONS_INIT;
    o.on_lost = on_lost;
    o.on_lost_payload = (void *)&lost;
    redmutex_lock *l;
    CHECK_OK(redmutex_lock_new(&l, c, "lf", REDMUTEX_KIND_FAIR, &o));
    CHECK_OK(redmutex_lock_acquire(l, NULL, 0));
    int64_t t0 = rt_now_ms();
    while (rt_now_ms() - t0 < rt_scaled_ms(1500)) /* a few leases: renewed */
        rt_sleep_ms(50);
    redmutex_state st;
    CHECK_OK(redmutex_lock_state(&st, l, NULL));
    CHECK(st == REDMUTEX_STATE_HELD && rs_int(&srv, "PTTL lf") > 0);
    freeReplyObject(rs_cmd(&srv, "DEL lf"));
    CHECK_RC(redmutex_lock_acquire(l, NULL, 0), REDMUTEX_ELOST); /* nested: the field is gone */
    CHECK(!rs_exists(&srv, "lf"));
    WAIT_FOR(atomic_load(&lost), 3000); /* (scaled) */
    CHECK_RC(redmutex_lock_release(l, NULL), REDMUTEX_ELOST);
    redmutex_lock *bad;
    CHECK_RC(redmutex_lock_new(&bad, c, "lf", (redmutex_kind)5, NULL), REDMUTEX_EINVAL);
    CHECK_RC(redmutex_lock_new(&bad, c, "lf", (redmutex_kind)-1, NULL), REDMUTEX_EINVAL);
    redmutex_lock_free(l);
    redmutex_client_free(c);
}

/* redmutex_client_interrupt() from another thread ends a fair wait at once, and the waiter leaves the queue.
 */
static void test_interrupted_fair_waiter_leaves_the_queue(void)
{
    rs_start(&srv, NULL);
    redmutex_client *c = rt_client(&srv, 0);
    redmutex_lock *l = fair(c, "iq", 0, 0);
    CHECK_OK(redmutex_lock_acquire(l, "holder", 0));
    _Atomic int next = 0;
    int served_ids[1];
    waiter_arg a = {.l = l, .id = 0, .wait_ms = 20000, .order = &next, .served = served_ids};
    pthread_t t;
    pthread_create(&t, NULL, waiter_thread, &a);
    WAIT_FOR(queue_len("iq") == 1, 10000);
    int64_t t0 = rt_now_ms();
    redmutex_client_interrupt(c);
    pthread_join(t, NULL);
    CHECK_RC(a.rc, REDMUTEX_EINTR);
    CHECK(rt_now_ms() - t0 < rt_scaled_ms(1000));
    CHECK(queue_len("iq") == 0 && !rs_exists(&srv, "redmutex_lock_waiters:{iq}"));
    CHECK_OK(redmutex_lock_release(l, "holder"));
    CHECK(all_gone("iq"));
    redmutex_lock_free(l);
    redmutex_client_free(c);
}

typedef struct owner_wait {
    redmutex_lock *l;
    const char *owner;
    _Atomic int rc;
} owner_wait;

static void *owner_wait_main(void *p)
{
    owner_wait *a = p;
    a->rc = redmutex_lock_acquire(a->l, a->owner, 20000);
    return NULL;
}

static void *release_holder_main(void *p)
{
    owner_wait *a = p;
    a->rc = redmutex_lock_release(a->l, a->owner);
    return NULL;
}

/*
 * The blocking side of a cancelled hand-off: a waiting acquire interrupted
 * at any moment around the releasing script's hand-off to it (before,
 * while the release runs, as the message arrives, after). The waiter either
 * reports the lock held (it came with the hand-off) or holds nothing and
 * gave the hand-off back: in no round is the lock left held by nobody.
 */
static void test_interrupted_fair_wait_around_a_hand_off_leaves_no_orphan(void)
{
    rs_start(&srv, NULL);
    redmutex_client *c = rt_client(&srv, 0), *hc = rt_client(&srv, 0);
    redmutex_lock *l = fair(c, "ih", 0, 0), *h = fair(hc, "ih", 0, 0);
    int held = 0;
    for (int i = 0; i < 40; i++) {
        CHECK_OK(redmutex_lock_acquire(h, "holder", 0));
        owner_wait w = {l, "me", -1}, r = {h, "holder", -1};
        pthread_t tw, tr;
        CHECK(pthread_create(&tw, NULL, owner_wait_main, &w) == 0);
        WAIT_FOR(queue_len("ih") == 1, 10000);
        CHECK(pthread_create(&tr, NULL, release_holder_main, &r) == 0);
        if (i % 4 == 1)
            sched_yield();
        else if (i % 4 == 2)
            rt_sleep_ms(i % 3);
        else if (i % 4 == 3)
            WAIT_FOR(rs_num(&srv, "HGET ih me") == 1 || w.rc != -1, 5000);
        redmutex_client_interrupt(c);
        pthread_join(tw, NULL);
        pthread_join(tr, NULL);
        CHECK_OK(r.rc);
        int rc = w.rc;
        CHECKF(rc == 0 || rc == REDMUTEX_EINTR, "round %d: the wait returned %d", i, rc);
        if (rc == 0) {
            held++;
            CHECK(rs_num(&srv, "HGET ih me") == 1);
            CHECK_OK(redmutex_lock_release(l, "me"));
        }
        CHECKF(all_gone("ih"), "round %d (wait returned %d) left the lock held by nobody", i, rc);
    }
    CHECKF(held < 40, "the interrupt never came before the hand-off (%d of 40 held)", held);
    redmutex_lock_free(l);
    redmutex_lock_free(h);
    redmutex_client_close(c); /* threads stopped before the test ends */
    redmutex_client_free(c);
    redmutex_client_close(hc); /* threads stopped before the test ends */
    redmutex_client_free(hc);
}

/* Polls the client's wait fd until the wait is reported ready and tries it; its result. */
static int poll_and_try(redmutex_client *c, redmutex_wait *w, int64_t ms)
{
    int fd = redmutex_client_wait_fd(c);
    CHECK(fd >= 0);
    int64_t deadline = rt_now_ms() + rt_scaled_ms(ms);
    for (;;) {
        uint64_t id;
        while (redmutex_client_next_ready(c, &id) == 1)
            if (id == redmutex_wait_id(w))
                return redmutex_wait_try(w);
        int64_t left = deadline - rt_now_ms();
        CHECKF(left > 0, "the wait was not ready within %lld ms", (long long)ms);
        struct pollfd p = {fd, POLLIN, 0};
        poll(&p, 1, (int)left);
    }
}

/*
 * A pollable wait (an event loop's acquire) on a fair lock holds its place in
 * the server's queue among blocking waiters, takes the lock when it comes
 * first, and leaves the queue when it is freed without it.
 */
static void test_pollable_wait_queues_in_the_same_fifo(void)
{
    rs_start(&srv, NULL);
    redmutex_client *c = rt_client(&srv, 0);
    redmutex_lock *l = fair(c, "pq", 0, 0), *mine = fair(c, "pq", 0, 0);
    CHECK_OK(redmutex_lock_acquire(l, "holder", 0));
    redmutex_wait *w;
    CHECK_OK(redmutex_wait_new(&w, mine, "poller"));
    CHECK_RC(redmutex_wait_try(w), REDMUTEX_ETIMEDOUT);
    CHECK(queue_len("pq") == 1);
    _Atomic int next = 0;
    int served_ids[1] = {-1};
    waiter_arg a = {.l = l, .id = 1, .wait_ms = 20000, .order = &next, .served = served_ids};
    pthread_t t;
    pthread_create(&t, NULL, waiter_thread, &a); /* a blocking waiter behind the pollable one */
    WAIT_FOR(queue_len("pq") == 2, 10000);
    CHECK_OK(redmutex_lock_release(l, "holder"));
    int rc;
    while ((rc = poll_and_try(c, w, 5000)) == REDMUTEX_ETIMEDOUT) {
    }
    CHECK_OK(rc); /* first in the queue, first served */
    CHECK(atomic_load(&next) == 0 && queue_len("pq") == 1);
    redmutex_wait_free(w);
    CHECK_OK(redmutex_lock_release(mine, "poller"));
    pthread_join(t, NULL);
    CHECK_OK(a.rc);
    CHECK(served_ids[0] == 1);
    /* A pollable wait freed without the lock leaves the queue. */
    CHECK_OK(redmutex_lock_acquire(l, "holder", 0));
    CHECK_OK(redmutex_wait_new(&w, mine, "poller"));
    CHECK_RC(redmutex_wait_try(w), REDMUTEX_ETIMEDOUT);
    CHECK(queue_len("pq") == 1);
    redmutex_wait_free(w);
    CHECK(queue_len("pq") == 0 && !rs_exists(&srv, "redmutex_lock_waiters:{pq}"));
    CHECK_OK(redmutex_lock_release(l, "holder"));
    CHECK(all_gone("pq"));
    redmutex_lock_free(l);
    redmutex_lock_free(mine);
    redmutex_client_free(c);
}

/* The longest name and owner id make the longest derived keys (a waiter's channel): they work, and waiting
 * works. */
static void test_longest_name_and_owner(void)
{
    rs_start(&srv, NULL);
    redmutex_client *c = rt_client(&srv, 0);
    static char name[REDMUTEX_NAME_MAX + 1], owner[2][REDMUTEX_OWNER_MAX + 1];
    memset(name, 'n', REDMUTEX_NAME_MAX);
    for (int i = 0; i < 2; i++) {
        memset(owner[i], 'a' + i, REDMUTEX_OWNER_MAX);
        owner[i][REDMUTEX_OWNER_MAX] = '\0';
    }
    redmutex_lock *l = fair(c, name, 0, REDMUTEX_LOCK_FENCING);
    CHECK_OK(redmutex_lock_acquire(l, owner[0], 0));
    CHECK_RC(redmutex_lock_acquire(l, owner[1], 200), REDMUTEX_ETIMEDOUT); /* queued, then left */
    CHECK(queue_len(name) == 0);
    CHECK_OK(redmutex_lock_release(l, owner[0]));
    CHECK_OK(redmutex_lock_acquire(l, owner[1], 0));
    CHECK_OK(redmutex_lock_release(l, owner[1]));
    redmutex_lock_free(l);
    for (int kind = REDMUTEX_KIND_READ; kind <= REDMUTEX_KIND_WRITE; kind++) {
        CHECK_OK(redmutex_lock_new(&l, c, name, (redmutex_kind)kind, NULL));
        CHECK_OK(redmutex_lock_acquire(l, owner[0], 0));
        CHECK_OK(redmutex_lock_extend(l, owner[0], 5000, REDMUTEX_EXTEND_ADD));
        CHECK_OK(redmutex_lock_release(l, owner[0]));
        redmutex_lock_free(l);
    }
    CHECK(!rs_exists(&srv, name));
    redmutex_client_free(c);
}

/* ---- Redlock ------------------------------------------------------------------------ */

typedef struct rl_arg {
    redmutex_lock *l;
    _Atomic int *inside;
    _Atomic int *violations;
    int rounds, rc;
} rl_arg;

static void *redlock_thread(void *p)
{
    rl_arg *a = p;
    for (int i = 0; i < a->rounds && a->rc == 0; i++) {
        a->rc = redmutex_lock_acquire(a->l, NULL, 30000);
        if (a->rc)
            break;
        if (atomic_fetch_add(a->inside, 1) != 0)
            atomic_fetch_add(a->violations, 1);
        rt_sleep_ms(1);
        atomic_fetch_sub(a->inside, 1);
        a->rc = redmutex_lock_release(a->l, NULL);
    }
    return NULL;
}

static void test_redlock_fair_excludes_and_cleans_up(void)
{
    rs_server s[3];
    const char *urls[3];
    for (int i = 0; i < 3; i++) {
        rs_start(&s[i], NULL);
        urls[i] = s[i].url;
    }
    redmutex_client *c;
    CHECK_OK(redmutex_client_new(&c, urls, 3, NULL));
    enum { T = 4 };
    pthread_t t[T];
    rl_arg a[T];
    redmutex_lock *l[T];
    _Atomic int inside = 0, violations = 0;
    for (int i = 0; i < T; i++) {
        CHECK_OK(redmutex_lock_new(&l[i], c, "rlq", REDMUTEX_KIND_FAIR, NULL));
        a[i] = (rl_arg){l[i], &inside, &violations, 25, 0};
        pthread_create(&t[i], NULL, redlock_thread, &a[i]);
    }
    for (int i = 0; i < T; i++) {
        pthread_join(t[i], NULL);
        CHECK_OK(a[i].rc);
        redmutex_lock_free(l[i]);
    }
    CHECK(atomic_load(&violations) == 0);
    /* Lock, queue, timeouts and waiter records are gone everywhere (unlock
       latches expire on their own). */
    for (int i = 0; i < 3; i++)
        WAIT_FOR(rs_count_keys(&s[i], "*rlq*") == rs_count_keys(&s[i], "redisson_unlock_latch:*"), 5000);
    redmutex_client_free(c);
    for (int i = 0; i < 3; i++)
        rs_stop(&s[i]);
}

/*
 * A wait of an owner joins the queue; the lock is released and the same
 * owner takes it through another handle (its field is the queue's head).
 * When the wait is then given up, leaving the queue must not "give back"
 * that field's level as if it were a hand-off to the wait: the owner holds
 * the lock, and nobody else may take it.
 */
static void test_abandoned_wait_leaves_the_owner_hold(void)
{
    rs_start(&srv, NULL);
    redmutex_client *c = rt_client(&srv, 0);
    redmutex_lock *x = fair(c, "fw", 5000, 0);
    redmutex_lock *waiting = fair(c, "fw", 5000, 0);
    redmutex_lock *taking = fair(c, "fw", 5000, 0);
    CHECK_OK(redmutex_lock_acquire(x, "holder", 0));
    redmutex_wait *w = NULL;
    CHECK_OK(redmutex_wait_new(&w, waiting, "svc"));
    int rc = redmutex_wait_try(w);
    CHECKF(rc == REDMUTEX_ETIMEDOUT, "wait_try: %d (%s)", rc, redmutex_last_error());
    CHECK(queue_len("fw") == 1); /* "svc" is queued */
    CHECK_OK(redmutex_lock_release(x, "holder"));
    CHECK_OK(redmutex_lock_acquire(taking, "svc", 0)); /* the head of the queue takes it */
    CHECK(rs_num(&srv, "HGET fw svc") == 1);
    redmutex_wait_free(w); /* the wait gives up */
    CHECKF(rs_num(&srv, "HGET fw svc") == 1, "leaving the queue took the owner's level (%lld)",
           rs_num(&srv, "HGET fw svc"));
    CHECK(redmutex_lock_acquire(x, "other", 0) == REDMUTEX_ETIMEDOUT);
    redmutex_state st;
    CHECK_OK(redmutex_lock_state(&st, taking, "svc"));
    CHECK(st == REDMUTEX_STATE_HELD);
    CHECK_OK(redmutex_lock_release(taking, "svc"));
    WAIT_FOR(all_gone("fw"), 2000);
    redmutex_lock_free(x);
    redmutex_lock_free(waiting);
    redmutex_lock_free(taking);
    redmutex_client_close(c);
    redmutex_client_free(c);
    rs_stop(&srv);
}

int main(int argc, char **argv)
{
    static const rt_test tests[] = {
        {"reentrant_in_redisson_fair_format", test_reentrant_in_redisson_fair_format},
        {"abandoned_wait_leaves_the_owner_hold", test_abandoned_wait_leaves_the_owner_hold},
        {"fifo_of_8_processes_exact", test_fifo_of_8_processes_exact},
        {"sigkill_of_a_queued_waiter_does_not_stall_the_queue",
         test_sigkill_of_a_queued_waiter_does_not_stall_the_queue},
        {"live_waiter_keeps_its_place_past_the_waiter_lease", test_live_waiter_keeps_its_place_past_the_waiter_lease},
        {"waiter_keeps_its_place_however_long_it_waits", test_waiter_keeps_its_place_however_long_it_waits},
        {"keys_of_dead_waiters_carry_a_ttl", test_keys_of_dead_waiters_carry_a_ttl},
        {"8_processes_200_increments_exact", test_8_processes_200_increments_exact},
        {"thread_waiters_queue_in_arrival_order_in_redisson_keys",
         test_thread_waiters_queue_in_arrival_order_in_redisson_keys},
        {"waiter_that_gives_up_leaves_the_queue", test_waiter_that_gives_up_leaves_the_queue},
        {"handoff_by_the_releasing_script", test_handoff_by_the_releasing_script},
        {"wrong_types_change_nothing", test_wrong_types_change_nothing},
        {"force_release_passes_the_lock_on", test_force_release_passes_the_lock_on},
        {"lost_fair_hold_is_reported_and_not_recreated", test_lost_fair_hold_is_reported_and_not_recreated},
        {"longest_name_and_owner", test_longest_name_and_owner},
        {"interrupted_fair_waiter_leaves_the_queue", test_interrupted_fair_waiter_leaves_the_queue},
        {"interrupted_fair_wait_around_a_hand_off_leaves_no_orphan",
         test_interrupted_fair_wait_around_a_hand_off_leaves_no_orphan},
        {"pollable_wait_queues_in_the_same_fifo", test_pollable_wait_queues_in_the_same_fifo},
        {"redlock_fair_excludes_and_cleans_up", test_redlock_fair_excludes_and_cleans_up},
    };
    return rt_run(tests, sizeof tests / sizeof tests[0], argc, argv);
}
