/*
 * The fair lock's hand-off cost against the length of its queue: a waiter
 * behind others is told when its turn comes (the releasing script grants it
 * the lock or publishes to the head only), so it runs no acquire script out
 * of turn, and a hand-off costs one release and the acquire that queued the
 * waiter, however many wait. Counted with the server's INFO commandstats.
 */
#define _GNU_SOURCE
#include "harness.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static rs_server srv;

/* kind.h's shorter refresh interval (near the head): a queued waiter's own timer, the one attempt it makes
   out of turn (further back it refreshes half as often: the bound below allows the more). */
#define REFRESH_MS 500

static redmutex_lock *fair(redmutex_client *c, const char *name, int64_t lease_ms)
{
    redmutex_lock_options o = REDMUTEX_LOCK_OPTIONS_INIT;
    o.lease_ms = lease_ms;
    redmutex_lock *l = NULL;
    CHECK_OK(redmutex_lock_new(&l, c, name, REDMUTEX_KIND_FAIR, &o));
    return l;
}

/* EVAL/EVALSHA calls the server ran since its last CONFIG RESETSTAT. */
static long long scripts_run(void)
{
    redisReply *r = rs_cmd(&srv, "INFO commandstats");
    CHECK(r && r->str);
    long long n = 0;
    for (const char *line = r->str; line && *line;) {
        char name[64];
        long long calls = 0;
        if (sscanf(line, "cmdstat_%63[^:]:calls=%lld", name, &calls) == 2 &&
            (!strcmp(name, "eval") || !strcmp(name, "evalsha")))
            n += calls;
        const char *end = strchr(line, '\n');
        line = end ? end + 1 : NULL;
    }
    freeReplyObject(r);
    return n;
}

enum { ROUNDS = 5 };

typedef struct queue_run {
    redmutex_client *c;
    pthread_barrier_t warm, go;
    atomic_long waited_ms, acquired, inside, violations;
} queue_run;

/* One waiter: one acquisition to warm up (its channel subscribed), then ROUNDS measured ones of 1 ms each. */
static void *queue_thread(void *p)
{
    queue_run *q = p;
    redmutex_lock *l = fair(q->c, "hq", 0);
    for (int i = 0; i <= ROUNDS; i++) {
        if (i == 1) {
            pthread_barrier_wait(&q->warm); /* the main thread resets the counts meanwhile */
            pthread_barrier_wait(&q->go);
        }
        int64_t t0 = rt_now_ms();
        CHECK_OK(redmutex_lock_acquire(l, NULL, rt_scaled_ms(120000)));
        if (i > 0) {
            atomic_fetch_add(&q->waited_ms, rt_now_ms() - t0);
            atomic_fetch_add(&q->acquired, 1);
        }
        if (atomic_fetch_add(&q->inside, 1) != 0)
            atomic_fetch_add(&q->violations, 1);
        rt_sleep_ms(1);
        atomic_fetch_sub(&q->inside, 1);
        CHECK_OK(redmutex_lock_release(l, NULL));
    }
    redmutex_lock_free(l);
    return NULL;
}

/*
 * n threads of one client wait on one fair lock; returns the scripts per
 * measured acquisition, and the most it may be: two (a release, and the
 * acquire that queued the waiter), plus one refresh per RM_FAIR_REFRESH_MS
 * of its wait (a waiter's own timer keeps its place: time, not queue
 * length), plus a little for the hand-offs that came as a plain message.
 */
static double scripts_per_acquisition(int n, double *bound)
{
    queue_run q = {0};
    q.c = rt_client(&srv, 0);
    pthread_barrier_init(&q.warm, NULL, (unsigned)n + 1);
    pthread_barrier_init(&q.go, NULL, (unsigned)n + 1);
    pthread_t t[64];
    for (int i = 0; i < n; i++)
        pthread_create(&t[i], NULL, queue_thread, &q);
    pthread_barrier_wait(&q.warm);
    freeReplyObject(rs_cmd(&srv, "CONFIG RESETSTAT"));
    pthread_barrier_wait(&q.go);
    for (int i = 0; i < n; i++)
        pthread_join(t[i], NULL);
    long long scripts = scripts_run();
    pthread_barrier_destroy(&q.warm);
    pthread_barrier_destroy(&q.go);
    redmutex_client_free(q.c);
    CHECK(atomic_load(&q.violations) == 0);
    long acquired = atomic_load(&q.acquired);
    CHECK(acquired == (long)n * ROUNDS);
    double mean_wait = (double)atomic_load(&q.waited_ms) / (double)acquired;
    *bound = 2.0 + mean_wait / REFRESH_MS + 0.4;
    double per = (double)scripts / (double)acquired;
    fprintf(stderr, "  %d waiters: %.2f scripts per acquisition (bound %.2f; mean wait %.0f ms)\n", n, per, *bound,
            mean_wait);
    return per;
}

static void test_scripts_per_acquisition_do_not_grow_with_the_queue(void)
{
    rs_start(&srv, NULL);
    double bound_few, bound_many;
    double few = scripts_per_acquisition(4, &bound_few);
    double many = scripts_per_acquisition(48, &bound_many);
    CHECKF(few <= bound_few, "4 waiters: %.2f scripts per acquisition, more than %.2f", few, bound_few);
    CHECKF(many <= bound_many, "48 waiters: %.2f scripts per acquisition, more than %.2f", many, bound_many);
}

/*
 * A waiter behind another gets its turn without any message: the head
 * (a Redisson waiter whose timeout runs out) goes away, and the holder's
 * lease ends without a release. Its own timer finds the turn: it holds the
 * lock within one refresh interval of the lease's end, not later.
 */
static void test_waiter_behind_gets_an_unannounced_turn_by_its_timer(void)
{
    rs_start(&srv, NULL);
    redmutex_client *c = rt_client(&srv, 0);
    redmutex_client *c2 = rt_client(&srv, 0);
    redmutex_lock *holder = fair(c, "ut", 800); /* no watchdog, never released */
    CHECK_OK(redmutex_lock_acquire(holder, NULL, 0));
    int64_t held_at = rt_now_ms();
    /* A Redisson waiter at the head whose timeout passes before the lease ends. */
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    long long now = (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
    freeReplyObject(rs_cmd(&srv, "RPUSH redisson_lock_queue:{ut} ghost:1"));
    freeReplyObject(rs_cmd(&srv, "ZADD redisson_lock_timeout:{ut} %lld ghost:1", now + 400));
    redmutex_lock *waiter = fair(c2, "ut", 0);
    CHECK_OK(redmutex_lock_acquire(waiter, NULL, rt_scaled_ms(10000)));
    int64_t took = rt_now_ms() - held_at;
    CHECKF(took >= 700, "got the lock after %lld ms, before the holder's lease ended", (long long)took);
    CHECKF(took <= 800 + REFRESH_MS + rt_scaled_ms(700), "got the lock only after %lld ms", (long long)took);
    CHECK_OK(redmutex_lock_release(waiter, NULL));
    redmutex_lock_free(waiter);
    redmutex_lock_free(holder);
    redmutex_client_free(c2);
    redmutex_client_free(c);
}

int main(int argc, char **argv)
{
    static const rt_test tests[] = {
        {"scripts_per_acquisition_do_not_grow_with_the_queue", test_scripts_per_acquisition_do_not_grow_with_the_queue},
        {"waiter_behind_gets_an_unannounced_turn_by_its_timer",
         test_waiter_behind_gets_an_unannounced_turn_by_its_timer},
    };
    return rt_run(tests, sizeof tests / sizeof tests[0], argc, argv);
}
