/* Redlock over N independent redis-servers, fencing tokens and replica sync (WAIT). */
#define _GNU_SOURCE
#include "harness.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAXN 5
static rs_server servers[MAXN];

enum srv_state { FREE, DOWN, HELD, STALLED, NSTATES };
static const char *state_name[] = {"free", "down", "held", "stalled"};

static redmutex_client *quorum_client(size_t n, const char **urls, int64_t timeout_ms, int64_t lease_ms)
{
    redmutex_client_options o = REDMUTEX_CLIENT_OPTIONS_INIT;
    o.command_timeout_ms = timeout_ms;
    o.connect_timeout_ms = timeout_ms;
    o.watchdog_lease_ms = lease_ms;
    o.shutdown_timeout_ms = 500;
    redmutex_client *c = NULL;
    CHECK_OK(redmutex_client_new(&c, urls, n, &o));
    return c;
}

static void start_servers(size_t n)
{
    for (size_t i = 0; i < n; i++)
        rs_start(&servers[i], NULL);
}

/* Keys left by us (anything but the intruder's value) on any live server. */
static bool our_key_anywhere(size_t n, const enum srv_state *st, const char *name)
{
    for (size_t i = 0; i < n; i++) {
        if (st[i] == DOWN)
            continue;
        redisReply *r = rs_cmd(&servers[i], "GET %s", name);
        bool ours = r && r->type == REDIS_REPLY_STRING && strcmp(r->str, "intruder") != 0;
        if (r)
            freeReplyObject(r);
        if (ours)
            return true;
    }
    return false;
}

static void run_scenario(size_t n, const enum srv_state *st, int64_t timeout_ms, int *scenario)
{
    char name[32];
    snprintf(name, sizeof name, "matrix:%d", (*scenario)++);
    const char *urls[MAXN];
    char down_urls[MAXN][64];
    size_t free_count = 0;
    for (size_t i = 0; i < n; i++) {
        urls[i] = servers[i].url;
        if (st[i] == DOWN) {
            snprintf(down_urls[i], sizeof down_urls[i], "redis://127.0.0.1:%d", rt_free_port());
            urls[i] = down_urls[i];
        } else if (st[i] == HELD) {
            freeReplyObject(rs_cmd(&servers[i], "SET %s intruder PX 60000", name));
        }
        free_count += st[i] == FREE;
    }
    redmutex_client *c = quorum_client(n, urls, timeout_ms, 30000);
    redmutex_lock_options o = REDMUTEX_LOCK_OPTIONS_INIT;
    o.lease_ms = 10000;
    redmutex_lock *l;
    CHECK_OK(redmutex_lock_new(&l, c, name, REDMUTEX_KIND_LOCK, &o));
    for (size_t i = 0; i < n; i++)
        if (st[i] == STALLED)
            rs_pause(&servers[i]);
    int rc = redmutex_lock_acquire(l, NULL, 0);
    bool want = free_count >= n / 2 + 1;
    char desc[128] = "";
    for (size_t i = 0; i < n; i++)
        snprintf(desc + strlen(desc), sizeof desc - strlen(desc), "%s%s", i ? "," : "", state_name[st[i]]);
    CHECKF(want ? rc == 0 : rc != 0, "N=%zu [%s]: acquire returned %d (%s), expected %s", n, desc, rc,
           redmutex_last_error(), want ? "success" : "failure");
    if (!want)
        CHECKF(rc == REDMUTEX_ETIMEDOUT || rc == REDMUTEX_ECONN, "N=%zu [%s]: unexpected code %d", n, desc, rc);
    if (rc == 0)
        CHECK_OK(redmutex_lock_release(l, NULL));
    for (size_t i = 0; i < n; i++)
        if (st[i] == STALLED)
            rs_resume(&servers[i]);
    /* Stalled servers run what they were sent (acquire, then its cleanup) once resumed. */
    WAIT_FOR(!our_key_anywhere(n, st, name), 2000);
    for (size_t i = 0; i < n; i++)
        if (st[i] == HELD) {
            redisReply *r = rs_cmd(&servers[i], "GET %s", name);
            CHECKF(r && r->type == REDIS_REPLY_STRING && strcmp(r->str, "intruder") == 0,
                   "N=%zu [%s]: another owner's lock was touched", n, desc);
            freeReplyObject(r);
        }
    redmutex_lock_free(l);
    redmutex_client_close(c);
    redmutex_client_free(c);
}

static void quorum_matrix(size_t n)
{
    start_servers(n);
    int scenario = 0;
    size_t total = 1;
    for (size_t i = 0; i < n; i++)
        total *= NSTATES;
    size_t ran = 0;
    /* Every assignment of states to servers for N = 3; for N = 5 every
       multiset of states (the servers are interchangeable), in a varying order. */
    for (size_t code = 0; code < total; code++) {
        enum srv_state st[MAXN];
        size_t x = code;
        for (size_t i = 0; i < n; i++) {
            st[i] = (enum srv_state)(x % NSTATES);
            x /= NSTATES;
        }
        if (n == 5) {
            bool sorted = true;
            for (size_t i = 1; i < n; i++)
                sorted &= st[i - 1] <= st[i];
            if (!sorted)
                continue;
            size_t rot = code % n; /* rotate, so no state always sits on the same server */
            enum srv_state tmp[MAXN];
            for (size_t i = 0; i < n; i++)
                tmp[(i + rot) % n] = st[i];
            memcpy(st, tmp, sizeof tmp);
        }
        run_scenario(n, st, rt_scaled_ms(100), &scenario);
        ran++;
    }
    printf("     %zu scenarios\n", ran);
}

static void test_quorum_matrix_n3(void) { quorum_matrix(3); }
static void test_quorum_matrix_n5(void) { quorum_matrix(5); }

/* ---- watchdog over a quorum --------------------------------------------- */

typedef struct lost_flag {
    atomic_int lost;
} lost_flag;

static void on_lost(redmutex_lock *l, const char *owner, redmutex_state st, void *p)
{
    (void)l;
    (void)owner;
    if (st == REDMUTEX_STATE_LOST)
        atomic_fetch_add(&((lost_flag *)p)->lost, 1);
}

static redmutex_lock *flagged_lock(redmutex_client *c, const char *name, redmutex_kind kind, lost_flag *flag)
{
    redmutex_lock_options o = REDMUTEX_LOCK_OPTIONS_INIT;
    o.on_lost = on_lost;
    o.on_lost_payload = flag;
    redmutex_lock *l;
    CHECK_OK(redmutex_lock_new(&l, c, name, kind, &o));
    return l;
}

static void test_holder_survives_two_of_five_dead_loses_on_third(void)
{
    start_servers(5);
    const char *urls[5];
    for (int i = 0; i < 5; i++)
        urls[i] = servers[i].url;
    const int64_t lease = rt_scaled_ms(600);
    redmutex_client *c = quorum_client(5, urls, rt_scaled_ms(150), lease);
    lost_flag flag = {0};
    redmutex_lock *l = flagged_lock(c, "quorum-hold", REDMUTEX_KIND_RLOCK, &flag);
    CHECK_OK(redmutex_lock_acquire(l, NULL, 0));
    rs_kill(&servers[0]);
    rs_kill(&servers[1]);
    /* Three leases later it is still held: renewed on the three that remain. */
    rt_sleep_ms(3 * lease);
    redmutex_state st;
    CHECK_OK(redmutex_lock_state(&st, l, NULL));
    CHECKF(st == REDMUTEX_STATE_HELD, "state %d", st);
    CHECK(atomic_load(&flag.lost) == 0);
    for (int i = 2; i < 5; i++)
        CHECK(rs_int(&servers[i], "PTTL quorum-hold") > lease / 2);
    int64_t t0 = rt_now_ms();
    rs_kill(&servers[2]);
    WAIT_FOR(atomic_load(&flag.lost) == 1, 3000);
    int64_t after = rt_now_ms() - t0;
    CHECKF(after <= lease + rt_scaled_ms(300), "lost reported %lld ms after the third server died", (long long)after);
    CHECK_OK(redmutex_lock_state(&st, l, NULL));
    CHECK(st == REDMUTEX_STATE_LOST);
    CHECK_RC(redmutex_lock_release(l, NULL), REDMUTEX_ELOST);
    redmutex_lock_free(l);
    redmutex_client_close(c);
    redmutex_client_free(c);
}

static void test_restarted_server_vote_no_longer_counts(void)
{
    /* With persistence the key survives a restart, but the server's run_id
       changes: its vote stops counting towards the holder's quorum. */
    for (int i = 0; i < 3; i++)
        rs_start(&servers[i], "save 3600 1\n");
    const char *urls[3] = {servers[0].url, servers[1].url, servers[2].url};
    const int64_t lease = rt_scaled_ms(800);
    redmutex_client *c = quorum_client(3, urls, rt_scaled_ms(150), lease);
    lost_flag flag = {0};
    redmutex_lock *l = flagged_lock(c, "restart", REDMUTEX_KIND_LOCK, &flag);
    CHECK_OK(redmutex_lock_acquire(l, NULL, 0));
    freeReplyObject(rs_cmd(&servers[0], "SAVE"));
    rs_restart(&servers[0]);
    CHECK(rs_exists(&servers[0], "restart")); /* loaded from the RDB file */
    rt_sleep_ms(lease);
    redmutex_state st;
    CHECK_OK(redmutex_lock_state(&st, l, NULL));
    CHECK(st == REDMUTEX_STATE_HELD); /* servers 1 and 2 still make a quorum */
    rs_kill(&servers[1]);
    /* Server 0 still has the key and renews it, but its new life does not count. */
    WAIT_FOR(atomic_load(&flag.lost) == 1, 3000);
    redmutex_lock_free(l);
    redmutex_client_close(c);
    redmutex_client_free(c);
}

/*
 * A holder was granted the lock by s1, s2 and s3; s3 restarts empty, and
 * the holder's copy on s2 is gone (it expired there, say). A contender that
 * had talked to s3 before its restart sees the new run_id: s3's grant is no
 * vote until the longest lease has passed, so s2 + s3 is no majority while
 * the holder may still count s1 + s3. After that s3 votes again.
 */
static void test_restarted_server_is_no_vote_for_a_lease(void)
{
    start_servers(3);
    const char *urls[3] = {servers[0].url, servers[1].url, servers[2].url};
    const int64_t lease = rt_scaled_ms(2000);
    redmutex_client *holder = quorum_client(3, urls, 300, lease);
    redmutex_client *other = quorum_client(3, urls, 300, lease);
    redmutex_lock_options o = REDMUTEX_LOCK_OPTIONS_INIT;
    o.lease_ms = lease;
    redmutex_lock *h, *x, *warm;
    CHECK_OK(redmutex_lock_new(&h, holder, "young", REDMUTEX_KIND_LOCK, &o));
    CHECK_OK(redmutex_lock_new(&x, other, "young", REDMUTEX_KIND_LOCK, &o));
    CHECK_OK(redmutex_lock_new(&warm, other, "warm", REDMUTEX_KIND_LOCK, &o));
    CHECK_OK(redmutex_lock_acquire(warm, NULL, 0)); /* the contender knows every server's run_id */
    CHECK_OK(redmutex_lock_release(warm, NULL));
    CHECK_OK(redmutex_lock_acquire(h, NULL, 0));
    int64_t held_at = rt_now_ms();
    rs_restart(&servers[2]);
    CHECK(rs_int(&servers[1], "DEL young") == 1);
    CHECK_RC(redmutex_lock_acquire(x, NULL, 0), REDMUTEX_ETIMEDOUT);
    CHECK(rt_now_ms() - held_at < lease); /* ... while the holder's validity could still be open */
    CHECKF(strstr(redmutex_last_error(), "restarted less than a lease ago"), "message: %s", redmutex_last_error());
    CHECK(!rs_exists(&servers[2], "young")); /* its grant there was taken back */
    /* Once the lease has passed since the restart was seen, s3 counts again. */
    WAIT_FOR(redmutex_lock_acquire(x, NULL, 0) == 0, 3 * lease);
    CHECK_OK(redmutex_lock_release(x, NULL));
    redmutex_lock_free(h);
    redmutex_lock_free(x);
    redmutex_lock_free(warm);
    redmutex_client_close(holder);
    redmutex_client_free(holder);
    redmutex_client_close(other);
    redmutex_client_free(other);
}

/* ---- parallel fan-out ---------------------------------------------------- */

static void test_stalled_server_costs_one_timeout_not_n(void)
{
    start_servers(5);
    const char *urls[5];
    for (int i = 0; i < 5; i++)
        urls[i] = servers[i].url;
    const int64_t timeout = rt_scaled_ms(300);
    redmutex_client *c = quorum_client(5, urls, timeout, 30000);
    redmutex_lock_options o = REDMUTEX_LOCK_OPTIONS_INIT;
    o.lease_ms = 10000;
    redmutex_lock *l;
    CHECK_OK(redmutex_lock_new(&l, c, "parallel", REDMUTEX_KIND_LOCK, &o));
    CHECK_OK(redmutex_lock_acquire(l, NULL, 0)); /* connections made */
    CHECK_OK(redmutex_lock_release(l, NULL));
    rs_pause(&servers[4]);
    int64_t t0 = rt_now_ms();
    CHECK_OK(redmutex_lock_acquire(l, NULL, 0));
    int64_t acquire_ms = rt_now_ms() - t0;
    /* Four answer at once: the quorum is known without waiting for the fifth. */
    CHECKF(acquire_ms < timeout / 2, "acquire took %lld ms", (long long)acquire_ms);
    t0 = rt_now_ms();
    CHECK_OK(redmutex_lock_release(l, NULL));
    int64_t release_ms = rt_now_ms() - t0;
    /* Release goes to all five but is decided by the majority that answers at once. */
    CHECKF(release_ms < timeout / 2, "release took %lld ms", (long long)release_ms);
    /* Two stalled and one held: the outcome needs the stalled ones, so it costs one timeout. */
    rs_pause(&servers[3]);
    freeReplyObject(rs_cmd(&servers[0], "SET parallel intruder PX 60000"));
    t0 = rt_now_ms();
    CHECK_RC(redmutex_lock_acquire(l, NULL, 0), REDMUTEX_ETIMEDOUT);
    int64_t fail_ms = rt_now_ms() - t0;
    /* One timeout for the attempt and one for the cleanup on all five: not five of each. */
    CHECKF(fail_ms >= timeout - 20 && fail_ms < 2 * timeout + rt_scaled_ms(200), "failed acquire took %lld ms",
           (long long)fail_ms);
    printf("     acquire %lld ms, release %lld ms, failed acquire %lld ms (per-server timeout %lld ms)\n",
           (long long)acquire_ms, (long long)release_ms, (long long)fail_ms, (long long)timeout);
    rs_resume(&servers[3]);
    rs_resume(&servers[4]);
    /* The stalled servers run what they were sent once resumed: nothing of ours is left. */
    enum srv_state st[5] = {HELD, FREE, FREE, FREE, FREE};
    WAIT_FOR(!our_key_anywhere(5, st, "parallel"), 2000);
    redmutex_lock_free(l);
    redmutex_client_close(c);
    redmutex_client_free(c);
}

/* ---- duplicates ---------------------------------------------------------- */

static void test_duplicate_endpoints_refused(void)
{
    start_servers(2);
    char unix_url[400], host_url[64];
    snprintf(unix_url, sizeof unix_url, "unix://%s", servers[0].unix_path);
    snprintf(host_url, sizeof host_url, "redis://localhost:%d", servers[0].port);
    const char *same_twice[3] = {servers[0].url, servers[1].url, servers[0].url};
    const char *two_addresses[3] = {servers[0].url, servers[1].url, unix_url};
    const char *by_name[3] = {host_url, servers[1].url, servers[0].url};
    const char *const *cases[3] = {same_twice, two_addresses, by_name};
    for (int k = 0; k < 3; k++) {
        redmutex_client *c = NULL;
        CHECK_RC(redmutex_client_new(&c, cases[k], 3, NULL), REDMUTEX_EDUPLICATE);
        CHECK(c == NULL);
        CHECK(strstr(redmutex_last_error(), "same Redis server"));
    }
    /* A duplicate that is down at creation is caught when first reached. */
    rs_server third;
    rs_start(&third, NULL);
    const char *urls[3] = {servers[0].url, servers[1].url, third.url};
    rs_pause(&third);
    redmutex_client *c = quorum_client(3, urls, 100, 30000);
    rs_resume(&third);
    redmutex_lock *l;
    CHECK_OK(redmutex_lock_new(&l, c, "dup", REDMUTEX_KIND_LOCK, NULL));
    CHECK_OK(redmutex_lock_acquire(l, NULL, 0));
    CHECK_OK(redmutex_lock_release(l, NULL));
    redmutex_lock_free(l);
    redmutex_client_close(c);
    redmutex_client_free(c);
    rs_stop(&third);
}

static void test_wrong_key_type_on_a_majority_is_an_error(void)
{
    start_servers(3);
    const char *urls[3] = {servers[0].url, servers[1].url, servers[2].url};
    for (int i = 0; i < 2; i++)
        CHECK(rs_int(&servers[i], "HSET typed f 1") == 1);
    redmutex_client *c = quorum_client(3, urls, 300, 30000);
    redmutex_lock *l;
    CHECK_OK(redmutex_lock_new(&l, c, "typed", REDMUTEX_KIND_LOCK, NULL));
    CHECK_RC(redmutex_lock_acquire(l, NULL, 0), REDMUTEX_EWRONGTYPE);
    int64_t t0 = rt_now_ms();
    CHECK_RC(redmutex_lock_acquire(l, NULL, REDMUTEX_WAIT_FOREVER), REDMUTEX_EWRONGTYPE);
    CHECK(rt_now_ms() - t0 < 1000);
    CHECK(!rs_exists(&servers[2], "typed")); /* the attempt was undone on the third */
    redmutex_lock_free(l);
    redmutex_client_close(c);
    redmutex_client_free(c);
}

/* A minority refusing the scripts (an ACL change on one server) leaves the
   queries and force release to the majority, and a majority of error
   replies is reported as the servers said it, not as "no answer". */
static void test_queries_follow_the_majority_and_report_its_errors(void)
{
    start_servers(3);
    const char *urls[3] = {servers[0].url, servers[1].url, servers[2].url};
    redmutex_client *c = quorum_client(3, urls, 300, 30000);
    redmutex_lock *l;
    CHECK_OK(redmutex_lock_new(&l, c, "acl", REDMUTEX_KIND_LOCK, NULL));
    CHECK_OK(redmutex_lock_acquire(l, NULL, 0));
    freeReplyObject(rs_cmd(&servers[2], "ACL SETUSER default -evalsha -eval"));
    int locked = 0;
    int64_t ttl = 0;
    CHECKF(redmutex_lock_is_locked(&locked, l) == 0 && locked == 1, "is_locked: %s", redmutex_last_error());
    CHECKF(redmutex_lock_ttl(&ttl, l) == 0 && ttl > 0, "ttl: %s", redmutex_last_error());
    int deleted = 0;
    CHECKF(redmutex_lock_force_release(&deleted, l) == 0 && deleted == 1, "force: %s", redmutex_last_error());
    redmutex_state st;
    CHECK_OK(redmutex_lock_state(&st, l, NULL));
    CHECK(st == REDMUTEX_STATE_UNLOCKED); /* forgotten here too: no renewal of a removed lock */
    CHECK(!rs_exists(&servers[0], "acl") && !rs_exists(&servers[1], "acl"));
    /* Two of three now refuse: the answer is the servers' refusal. */
    freeReplyObject(rs_cmd(&servers[1], "ACL SETUSER default -evalsha -eval"));
    CHECK_RC(redmutex_lock_is_locked(&locked, l), REDMUTEX_EAUTH);
    CHECKF(strstr(redmutex_last_error(), "inspect 'acl' on ") && strstr(redmutex_last_error(), "NOPERM"), "message: %s",
           redmutex_last_error());
    CHECK_RC(redmutex_lock_force_release(&deleted, l), REDMUTEX_EAUTH);
    for (int i = 1; i < 3; i++)
        freeReplyObject(rs_cmd(&servers[i], "ACL SETUSER default +evalsha +eval"));
    redmutex_lock_free(l);
    redmutex_client_close(c);
    redmutex_client_free(c);
}

/* A majority answering with an error is reported as the servers said it,
   whatever the order of the replies: the acquisition's error is theirs. */
static void test_a_majority_of_error_replies_is_the_error(void)
{
    start_servers(3);
    /* The two refusing servers answer the acquisition 50 ms late, so the
       third's grant is in first (the order that once read as "no answer"). */
    rs_proxy *late[2] = {rs_proxy_start(&servers[0], "EVAL", 50), rs_proxy_start(&servers[1], "EVAL", 50)};
    const char *urls[3] = {late[0]->url, late[1]->url, servers[2].url};
    redmutex_client *c = quorum_client(3, urls, 1000, 30000);
    redmutex_lock *l;
    CHECK_OK(redmutex_lock_new(&l, c, "oom", REDMUTEX_KIND_RLOCK, NULL));
    for (int i = 0; i < 2; i++)
        freeReplyObject(rs_cmd(&servers[i], "CONFIG SET maxmemory 1"));
    for (int64_t wait_ms = 0; wait_ms <= 400; wait_ms += 400) {
        CHECK_RC(redmutex_lock_acquire(l, NULL, wait_ms), REDMUTEX_ESERVER);
        CHECKF(strstr(redmutex_last_error(), "acquire 'oom' on ") && strstr(redmutex_last_error(), "OOM"),
               "wait %lld ms: %s", (long long)wait_ms, redmutex_last_error());
    }
    CHECK(!rs_exists(&servers[2], "oom")); /* the third's grant was undone */
    for (int i = 0; i < 2; i++)
        freeReplyObject(rs_cmd(&servers[i], "CONFIG SET maxmemory 0"));
    CHECK_OK(redmutex_lock_acquire(l, NULL, 0));
    CHECK_OK(redmutex_lock_release(l, NULL));
    redmutex_lock_free(l);
    redmutex_client_close(c);
    redmutex_client_free(c);
    rs_proxy_stop(late[0]);
    rs_proxy_stop(late[1]);
}

/* ---- fencing ---------------------------------------------------------------- */

typedef struct resource {
    pthread_mutex_t mu; /* process-shared: the resource checks tokens atomically */
    int64_t last;
    long accepted, rejected, decreasing;
    long reentrant_mismatch, errors;
} resource;

static void fencing_worker(const char *const *urls, size_t n, resource *res, int rounds, redmutex_kind kind)
{
    redmutex_client_options co = REDMUTEX_CLIENT_OPTIONS_INIT;
    co.command_timeout_ms = 500;
    redmutex_client *c;
    if (redmutex_client_new(&c, urls, n, &co) != 0)
        _exit(3);
    redmutex_lock_options o = REDMUTEX_LOCK_OPTIONS_INIT;
    o.lease_ms = 10000;
    o.flags = REDMUTEX_LOCK_FENCING;
    redmutex_lock *l;
    if (redmutex_lock_new(&l, c, "fenced", kind, &o) != 0)
        _exit(4);
    for (int i = 0; i < rounds; i++) {
        int64_t token = 0, inner = 0;
        if (redmutex_lock_acquire(l, NULL, 30000) != 0 || redmutex_lock_fence(&token, l, NULL) != 0) {
            pthread_mutex_lock(&res->mu);
            res->errors++;
            pthread_mutex_unlock(&res->mu);
            continue;
        }
        if (kind == REDMUTEX_KIND_RLOCK) {
            if (redmutex_lock_acquire(l, NULL, 0) != 0 || redmutex_lock_fence(&inner, l, NULL) != 0 ||
                redmutex_lock_release(l, NULL) != 0 || inner != token) {
                pthread_mutex_lock(&res->mu);
                res->reentrant_mismatch++;
                pthread_mutex_unlock(&res->mu);
            }
        }
        /* The resource accepts a write only with a token larger than the last one. */
        pthread_mutex_lock(&res->mu);
        if (token > res->last) {
            res->last = token;
            res->accepted++;
        } else {
            res->rejected++;
        }
        pthread_mutex_unlock(&res->mu);
        if (redmutex_lock_release(l, NULL) != 0) {
            pthread_mutex_lock(&res->mu);
            res->errors++;
            pthread_mutex_unlock(&res->mu);
        }
    }
    redmutex_lock_free(l);
    /* A worker exits right after: close joins the client's threads first
       (free alone would leave them to finish in the background). */
    redmutex_client_close(c);
    redmutex_client_free(c);
}

static void fencing_case(size_t n, redmutex_kind kind)
{
    start_servers(n);
    const char *urls[MAXN];
    for (size_t i = 0; i < n; i++)
        urls[i] = servers[i].url;
    resource *res = mmap(NULL, sizeof *res, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    memset(res, 0, sizeof *res);
    pthread_mutexattr_t a;
    pthread_mutexattr_init(&a);
    pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
    pthread_mutex_init(&res->mu, &a);
    enum { PROCS = 4, ROUNDS = 200 };
    pid_t pids[PROCS];
    for (int p = 0; p < PROCS; p++) {
        pids[p] = fork();
        if (pids[p] == 0) {
            fencing_worker(urls, n, res, ROUNDS, kind);
            _exit(0);
        }
    }
    for (int p = 0; p < PROCS; p++) {
        int status;
        waitpid(pids[p], &status, 0);
        CHECKF(WIFEXITED(status) && WEXITSTATUS(status) == 0, "worker exited with %d", WEXITSTATUS(status));
    }
    CHECK(res->errors == 0);
    CHECK(res->reentrant_mismatch == 0);
    CHECKF(res->rejected == 0, "%ld writes rejected", res->rejected);
    CHECK(res->accepted == PROCS * ROUNDS);
    printf("     %ld fenced writes accepted, last token %lld\n", res->accepted, (long long)res->last);
    munmap(res, sizeof *res);
}

static void test_fencing_single_server_plain(void) { fencing_case(1, REDMUTEX_KIND_LOCK); }
static void test_fencing_single_server_reentrant(void) { fencing_case(1, REDMUTEX_KIND_RLOCK); }
static void test_fencing_redlock_n5_plain(void) { fencing_case(5, REDMUTEX_KIND_LOCK); }
static void test_fencing_redlock_n5_reentrant(void) { fencing_case(5, REDMUTEX_KIND_RLOCK); }

/* ---- replica sync ------------------------------------------------------------- */

static bool replica_online(rs_server *master)
{
    redisReply *r = rs_cmd(master, "INFO replication");
    bool ok =
        r && r->type == REDIS_REPLY_STRING && strstr(r->str, "connected_slaves:1") && strstr(r->str, "state=online");
    if (r)
        freeReplyObject(r);
    return ok;
}

static bool replica_acknowledges(rs_server *master)
{
    redisContext *ctx = redisConnect("127.0.0.1", master->port);
    redisReply *w = redisCommand(ctx, "SET replica-warmup 1");
    freeReplyObject(w);
    w = redisCommand(ctx, "WAIT 1 200");
    bool ok = w && w->type == REDIS_REPLY_INTEGER && w->integer == 1;
    freeReplyObject(w);
    redisFree(ctx);
    return ok;
}

static void test_replica_sync_wait(void)
{
    rs_server *master = &servers[0], *replica = &servers[1];
    rs_start(master, NULL);
    rs_start(replica, NULL);
    freeReplyObject(rs_cmd(replica, "REPLICAOF 127.0.0.1 %d", master->port));
    /* Wait until the replica is attached and in sync. */
    WAIT_FOR(replica_online(master), 10000);
    /* ...and acknowledging writes: for a few seconds after a full sync Redis
       can leave WAIT unanswered. */
    WAIT_FOR(replica_acknowledges(master), 20000);
    redmutex_client_options o = REDMUTEX_CLIENT_OPTIONS_INIT;
    o.min_replicas = 1;
    o.replica_timeout_ms = 300;
    o.command_timeout_ms = 300;
    const char *url = master->url;
    redmutex_client *c;
    CHECK_OK(redmutex_client_new(&c, &url, 1, &o));
    redmutex_lock_options lo = REDMUTEX_LOCK_OPTIONS_INIT;
    lo.lease_ms = 10000;
    redmutex_lock *plain, *re;
    CHECK_OK(redmutex_lock_new(&plain, c, "replicated", REDMUTEX_KIND_LOCK, &lo));
    CHECK_OK(redmutex_lock_new(&re, c, "replicated-r", REDMUTEX_KIND_RLOCK, &lo));
    CHECK_OK(redmutex_lock_acquire(plain, NULL, 0));
    CHECK(rs_exists(replica, "replicated")); /* WAIT returned: the replica has it */
    CHECK_OK(redmutex_lock_extend(plain, NULL, 1000, REDMUTEX_EXTEND_ADD));
    CHECK_OK(redmutex_lock_release(plain, NULL));
    CHECK_OK(redmutex_lock_acquire(re, NULL, 0));
    CHECK_OK(redmutex_lock_release(re, NULL));

    rs_pause(replica);
    int64_t t0 = rt_now_ms();
    CHECK_RC(redmutex_lock_acquire(plain, NULL, 0), REDMUTEX_EREPLICAS);
    int64_t took = rt_now_ms() - t0;
    CHECKF(took >= 280 && took < 1500, "failed after %lld ms with a 300 ms replica timeout", (long long)took);
    CHECK(strstr(redmutex_last_error(), "replicas"));
    CHECK(!rs_exists(master, "replicated")); /* released again on the master */
    CHECK_RC(redmutex_lock_acquire(re, NULL, 0), REDMUTEX_EREPLICAS);
    CHECK(!rs_exists(master, "replicated-r"));
    rs_resume(replica);
    redmutex_lock_free(plain);
    redmutex_lock_free(re);
    redmutex_client_close(c);
    redmutex_client_free(c);
}

int main(int argc, char **argv)
{
    static const rt_test tests[] = {
        {"quorum_matrix_n3", test_quorum_matrix_n3},
        {"quorum_matrix_n5", test_quorum_matrix_n5},
        {"holder_survives_two_of_five_dead_loses_on_third", test_holder_survives_two_of_five_dead_loses_on_third},
        {"restarted_server_vote_no_longer_counts", test_restarted_server_vote_no_longer_counts},
        {"restarted_server_is_no_vote_for_a_lease", test_restarted_server_is_no_vote_for_a_lease},
        {"stalled_server_costs_one_timeout_not_n", test_stalled_server_costs_one_timeout_not_n},
        {"duplicate_endpoints_refused", test_duplicate_endpoints_refused},
        {"wrong_key_type_on_a_majority_is_an_error", test_wrong_key_type_on_a_majority_is_an_error},
        {"queries_follow_the_majority_and_report_its_errors", test_queries_follow_the_majority_and_report_its_errors},
        {"a_majority_of_error_replies_is_the_error", test_a_majority_of_error_replies_is_the_error},
        {"fencing_single_server_plain", test_fencing_single_server_plain},
        {"fencing_single_server_reentrant", test_fencing_single_server_reentrant},
        {"fencing_redlock_n5_plain", test_fencing_redlock_n5_plain},
        {"fencing_redlock_n5_reentrant", test_fencing_redlock_n5_reentrant},
        {"replica_sync_wait", test_replica_sync_wait},
    };
    return rt_run(tests, sizeof tests / sizeof tests[0], argc, argv);
}
