/*
 * The CHAOS.md workload: worker threads loop acquire -> critical section ->
 * release on randomly chosen lock names, logging every step. The critical
 * section reads the naive counter, works, writes the fenced register and the
 * CAS register, then writes the counter. It never skips a write because the
 * lock might be gone: the history shows what a client that trusts its lock
 * does, and the checkers judge it.
 */
#define _GNU_SOURCE
#include "driver.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct worker {
    drv_ctx *ctx;
    int idx;
    pthread_t thread;
    uint64_t rng;
    drv_resource res;
    redmutex_lock **locks; /* per lock name, made on first use */
    drv_lock_tag *tags;
    int64_t holds;
    /* What the monitor thread watches: the hold in progress (guarded by mu). */
    pthread_mutex_t mu;
    redmutex_lock *watched;
    char watched_owner[128];
    bool watched_has_owner;
    int64_t watched_h;
    int64_t watched_end_ns;
} worker;

/* The hold in progress: which handle, owner and name it is about. */
typedef struct hold {
    worker *w;
    int64_t h;
    redmutex_lock *lock;
    const char *owner;
    char owner_buf[128];
    char name[256];
    int64_t fence;
} hold;

static redmutex_lock *lock_for(worker *w, int k, const char *name)
{
    if (w->locks[k])
        return w->locks[k];
    redmutex_lock_options o;
    drv_lock_options(&o, &w->ctx->cfg, &w->tags[k]);
    if (redmutex_lock_new(&w->locks[k], w->ctx->client, name, w->ctx->cfg.kind, &o) != 0)
        w->locks[k] = NULL;
    return w->locks[k];
}

/* Starts or stops the monitor's watch of the hold in progress. */
static void watch(worker *w, hold *x)
{
    pthread_mutex_lock(&w->mu);
    w->watched = x ? x->lock : NULL;
    w->watched_has_owner = x && x->owner;
    snprintf(w->watched_owner, sizeof w->watched_owner, "%s", x && x->owner ? x->owner : "");
    w->watched_h = x ? x->h : 0;
    w->watched_end_ns = 0;
    pthread_mutex_unlock(&w->mu);
}

/* Forgets a handle whose hold could not be released: it expires on the server. */
static void drop_lock(worker *w, int k)
{
    watch(w, NULL);
    redmutex_lock_free(w->locks[k]);
    w->locks[k] = NULL;
}

static void check_validity(hold *x, const char *where)
{
    int64_t v = -1;
    redmutex_state st = REDMUTEX_STATE_UNLOCKED;
    int64_t t = drv_now_ns();
    redmutex_lock_validity(&v, x->lock, x->owner);
    redmutex_lock_state(&st, x->lock, x->owner);
    drv_log_at(t, x->w->idx, x->h, "chk", "\"at\":\"%s\",\"val\":%lld,\"state\":%d", where, (long long)v, (int)st);
}

static void work_pause(hold *x)
{
    const drv_config *cfg = &x->w->ctx->cfg;
    if (cfg->hold_margin_ms > 0) {
        int64_t v = 0;
        redmutex_lock_validity(&v, x->lock, x->owner);
        drv_sleep_ms(v - cfg->hold_margin_ms);
    } else {
        drv_sleep_ms(drv_rand_between(&x->w->rng, cfg->cs_min_ms, cfg->cs_max_ms));
    }
}

static void critical_section(hold *x)
{
    worker *w = x->w;
    long long counter = 0, cas = 0;
    check_validity(x, "read");
    if (drv_resource_read(&w->res, x->name, &counter, &cas) != 0) {
        drv_log(w->idx, x->h, "res_err", "\"op\":\"read\"");
        return;
    }
    drv_log(w->idx, x->h, "cs_read", "\"key\":\"%s\",\"v\":%lld,\"cas\":%lld", x->name, counter, cas);
    work_pause(x);
    if (w->ctx->cfg.fencing) {
        char hold_id[200];
        snprintf(hold_id, sizeof hold_id, "%s:%d:%lld", w->ctx->cfg.id, w->idx, (long long)x->h);
        check_validity(x, "fenced");
        int acc = drv_resource_fenced_write(&w->res, x->name, x->fence, hold_id);
        drv_log(w->idx, x->h, "fenced", "\"key\":\"%s\",\"tok\":%lld,\"acc\":%d", x->name, (long long)x->fence, acc);
    }
    check_validity(x, "cas");
    int ok = drv_resource_cas(&w->res, x->name, cas, cas + 1);
    drv_log(w->idx, x->h, "cas", "\"key\":\"%s\",\"from\":%lld,\"ok\":%d", x->name, cas, ok);
    check_validity(x, "set");
    ok = drv_resource_set_counter(&w->res, x->name, counter + 1) == 0;
    drv_log(w->idx, x->h, "cset", "\"key\":\"%s\",\"v\":%lld,\"ok\":%d", x->name, counter + 1, ok);
}

/* One release, retried while its outcome is unknown (ECONN keeps the hold). Returns the last rc. */
static int release_once(hold *x, int level)
{
    int rc = REDMUTEX_ECONN;
    for (int attempt = 0; attempt < 3 && (rc == REDMUTEX_ECONN || rc == REDMUTEX_ESERVER); attempt++) {
        if (attempt > 0)
            check_validity(x, "retry");
        else
            check_validity(x, "release");
        drv_log(x->w->idx, x->h, "rel", "\"key\":\"%s\",\"lvl\":%d,\"try\":%d", x->name, level, attempt);
        int64_t t0 = drv_now_ns();
        rc = redmutex_lock_release(x->lock, x->owner);
        if (rc == 0)
            drv_log(x->w->idx, x->h, "rel_ok", "\"key\":\"%s\",\"lvl\":%d,\"dur_ms\":%.3f", x->name, level,
                    (double)(drv_now_ns() - t0) / 1e6);
        else
            drv_log_error(x->w->idx, x->h, "rel_err", rc, t0);
    }
    return rc;
}

static void release_all(hold *x, int depth, int k)
{
    watch(x->w, NULL);
    for (int level = depth; level >= 1; level--) {
        int rc = release_once(x, level);
        if (rc == REDMUTEX_ECONN || rc == REDMUTEX_ESERVER) {
            drv_log(x->w->idx, x->h, "rel_gaveup", "\"key\":\"%s\"", x->name);
            drop_lock(x->w, k);
            return;
        }
        if (rc != 0)
            return; /* ELOST / ENOTOWNER: nothing is held any more */
    }
}

static int nested_acquires(hold *x)
{
    int depth = 1;
    const drv_config *cfg = &x->w->ctx->cfg;
    for (int level = 2; level <= cfg->nest && cfg->kind == REDMUTEX_KIND_RLOCK; level++) {
        drv_log(x->w->idx, x->h, "nest", "\"key\":\"%s\",\"lvl\":%d", x->name, level);
        int64_t t0 = drv_now_ns();
        int rc = redmutex_lock_acquire(x->lock, x->owner, 0);
        if (rc != 0) {
            drv_log_error(x->w->idx, x->h, "nest_err", rc, t0);
            break;
        }
        int64_t fence = 0;
        if (cfg->fencing)
            redmutex_lock_fence(&fence, x->lock, x->owner);
        drv_log(x->w->idx, x->h, "nest_ok", "\"key\":\"%s\",\"lvl\":%d,\"fence\":%lld", x->name, level,
                (long long)fence);
        depth++;
    }
    return depth;
}

static void one_hold(worker *w)
{
    const drv_config *cfg = &w->ctx->cfg;
    hold x = {.w = w, .h = ++w->holds};
    int k = (int)drv_rand_between(&w->rng, 0, cfg->nkeys - 1);
    snprintf(x.name, sizeof x.name, "%s%d", cfg->prefix, k);
    if (!(x.lock = lock_for(w, k, x.name)))
        return;
    if (cfg->owner_per_hold && cfg->kind == REDMUTEX_KIND_LOCK) {
        snprintf(x.owner_buf, sizeof x.owner_buf, "%s-%d-%lld", cfg->id, w->idx, (long long)x.h);
        x.owner = x.owner_buf;
    } else if (cfg->owner_fixed && cfg->kind == REDMUTEX_KIND_LOCK) {
        snprintf(x.owner_buf, sizeof x.owner_buf, "%s-w%d", cfg->id, w->idx);
        x.owner = x.owner_buf;
    }
    atomic_store(&w->tags[k].hold, x.h);
    drv_log(w->idx, x.h, "acq", "\"key\":\"%s\",\"owner\":\"%s\"", x.name, x.owner ? x.owner : "");
    int64_t t0 = drv_now_ns();
    int rc = redmutex_lock_acquire(x.lock, x.owner, cfg->wait_ms);
    if (rc != 0) {
        drv_log_error(w->idx, x.h, "acq_err", rc, t0);
        if (rc == REDMUTEX_ELOST)
            release_all(&x, 1, k); /* reports the earlier loss and clears the handle */
        else if (rc != REDMUTEX_ETIMEDOUT)
            drv_sleep_ms(drv_rand_between(&w->rng, 10, 50)); /* servers unreachable: do not spin */
        return;
    }
    int64_t validity = 0;
    int64_t t_ok = drv_now_ns();
    redmutex_lock_validity(&validity, x.lock, x.owner);
    if (cfg->fencing)
        redmutex_lock_fence(&x.fence, x.lock, x.owner);
    drv_log_at(t_ok, w->idx, x.h, "acq_ok", "\"key\":\"%s\",\"fence\":%lld,\"val\":%lld,\"dur_ms\":%.3f", x.name,
            (long long)x.fence, (long long)validity, (double)(drv_now_ns() - t0) / 1e6);
    watch(w, &x);
    int depth = nested_acquires(&x);
    critical_section(&x);
    release_all(&x, depth, k);
}

static void *worker_main(void *arg)
{
    worker *w = arg;
    const drv_config *cfg = &w->ctx->cfg;
    if (drv_resource_open(&w->res, cfg) != 0)
        drv_log(w->idx, 0, "res_err", "\"op\":\"connect\"");
    while (!atomic_load(&w->ctx->stop) && (cfg->ops == 0 || w->holds < cfg->ops)) {
        one_hold(w);
        if (cfg->think_ms > 0)
            drv_sleep_ms(drv_rand_between(&w->rng, 0, cfg->think_ms));
    }
    drv_resource_close(&w->res);
    drv_log(w->idx, 0, "worker_done", "\"holds\":%lld", (long long)w->holds);
    return NULL;
}

typedef struct monitor {
    drv_ctx *ctx;
    worker *ws;
    pthread_t thread;
} monitor;

/*
 * Logs a "chk" event whenever the validity end of a watched hold moves
 * (a renewal went through), so the checkers know the end of validity the
 * client believed in to within one period, not only at the workers' checks.
 */
static void *monitor_main(void *arg)
{
    monitor *m = arg;
    const drv_config *cfg = &m->ctx->cfg;
    int64_t lease = cfg->lease_ms ? cfg->lease_ms : cfg->watchdog_lease_ms;
    int64_t period = lease / 20 < 5 ? 5 : lease / 20;
    while (!atomic_load(&m->ctx->stop)) {
        for (int i = 0; i < cfg->threads; i++) {
            worker *w = &m->ws[i];
            pthread_mutex_lock(&w->mu);
            if (w->watched) {
                int64_t v = 0;
                const char *owner = w->watched_has_owner ? w->watched_owner : NULL;
                int64_t t = drv_now_ns();
                if (redmutex_lock_validity(&v, w->watched, owner) == 0 && v > 0) {
                    int64_t end = t + v * 1000000;
                    if (end - w->watched_end_ns > 3000000 || w->watched_end_ns - end > 3000000) {
                        w->watched_end_ns = end;
                        drv_log_at(t, i, w->watched_h, "chk", "\"at\":\"mon\",\"val\":%lld", (long long)v);
                    }
                }
            }
            pthread_mutex_unlock(&w->mu);
        }
        /* The monitor's own lateness measures how starved this process is: C6
           does not blame the library for a timer the kernel did not run. */
        int64_t asleep = drv_now_ns();
        drv_sleep_ms(period);
        int64_t late_ms = (drv_now_ns() - asleep) / 1000000 - period;
        if (late_ms >= 20)
            drv_log(-1, 0, "late_wakeup", "\"ms\":%lld", (long long)late_ms);
    }
    return NULL;
}

/* Reads stdin until `word` (or EOF), logging process stats every 5 s. */
static void wait_for(const char *word)
{
    char line[256];
    for (;;) {
        int r = drv_read_command(line, sizeof line, 5000);
        if (r < 0 || (r > 0 && (strcmp(line, word) == 0 || strcmp(line, "exit") == 0)))
            return;
        if (r == 0)
            drv_log_stats();
    }
}

int drv_run_workload(drv_ctx *ctx)
{
    const drv_config *cfg = &ctx->cfg;
    worker *ws = calloc((size_t)cfg->threads, sizeof *ws);
    if (!ws)
        return -1;
    for (int i = 0; i < cfg->threads; i++) {
        worker *w = &ws[i];
        w->ctx = ctx;
        w->idx = i;
        w->rng = cfg->seed * 1000003u + (uint64_t)i + 1;
        w->locks = calloc((size_t)cfg->nkeys, sizeof *w->locks);
        w->tags = calloc((size_t)cfg->nkeys, sizeof *w->tags);
        pthread_mutex_init(&w->mu, NULL);
        for (int k = 0; w->tags && k < cfg->nkeys; k++)
            w->tags[k].worker = i;
        if (!w->locks || !w->tags || pthread_create(&w->thread, NULL, worker_main, w) != 0) {
            drv_log(-1, 0, "fatal", "\"what\":\"worker start\"");
            exit(70);
        }
    }
    monitor mon = {ctx, ws, 0};
    bool monitoring = pthread_create(&mon.thread, NULL, monitor_main, &mon) == 0;
    wait_for("stop");
    atomic_store(&ctx->stop, true);
    for (int i = 0; i < cfg->threads; i++)
        pthread_join(ws[i].thread, NULL);
    if (monitoring)
        pthread_join(mon.thread, NULL);
    drv_log(-1, 0, "stopped", "%s", "");
    drv_log_stats();
    wait_for("exit");
    for (int i = 0; i < cfg->threads; i++) {
        for (int k = 0; k < cfg->nkeys; k++)
            redmutex_lock_free(ws[i].locks[k]);
        free(ws[i].locks);
        free(ws[i].tags);
    }
    free(ws);
    return 0;
}
