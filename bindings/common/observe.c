/*
 * Statistics and log messages for every language.
 *
 * stats(): the client's snapshot (redmutex_client_stats) as flat
 * "key" -> number pairs, named as the Python package's client.stats() dict
 * would be walked: "acquire_wait_seconds.lock.acquired.count",
 * "hold_seconds.rlock.sum", "renewals.lost", "locks_held",
 * "servers[redis://h:6379/0].errors.timeout", and per histogram bucket
 * "...bucket.0.0025" (cumulative, as Prometheus's `le`; "+Inf" last). Each
 * language's typemap turns them into its own map.
 *
 * Log messages: the core calls the client's log callback on any thread
 * (the watchdog's too), where no interpreter may run. rmb_log_queue copies
 * the message into a small process-wide queue; the interface hands queued
 * messages to the language (Ruby warn or Redmutex.logger, Perl warn, a Tcl
 * proc or stderr, a Lua function or stderr) at the end of the next call
 * into the binding, on the language's own thread.
 */
#define _POSIX_C_SOURCE 200809L
#include "binding.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- statistics ----------------------------------------------------------- */

static const char *const kinds[] = {"lock", "rlock", "fair", "read", "write"};
static const char *const outcomes[] = {"acquired", "timeout", "interrupted", "error"};
static const char *const renewals[] = {"renewed", "failed", "lost"};
static const char *const errors[] = {"timeout", "connection", "protocol", "auth", "reply", "duplicate"};

static void put(rmb_stats *s, double value, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void put(rmb_stats *s, double value, const char *fmt, ...)
{
    if (s->n == s->cap)
        return; /* sized for the whole snapshot below */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->items[s->n].key, sizeof s->items[s->n].key, fmt, ap);
    va_end(ap);
    s->items[s->n++].value = value;
}

static void put_hist(rmb_stats *s, const redmutex_histogram *h, const uint64_t *bounds, const char *prefix)
{
    put(s, (double)h->count, "%s.count", prefix);
    put(s, (double)h->sum_ns / 1e9, "%s.sum", prefix);
    uint64_t total = 0;
    for (int i = 0; i < REDMUTEX_STATS_BUCKETS; i++) {
        total += h->buckets[i];
        if (bounds[i] == UINT64_MAX)
            put(s, (double)total, "%s.bucket.+Inf", prefix);
        else
            put(s, (double)total, "%s.bucket.%g", prefix, (double)bounds[i] / 1e9);
    }
}

int rmb_stats_get(rmb_client *c, rmb_stats *out)
{
    redmutex_stats st;
    st.version = REDMUTEX_STATS_VERSION;
    out->n = 0;
    out->items = NULL;
    if (rmb_check(redmutex_client_stats(c->ptr, &st)) != 0)
        return -1;
    const size_t per_hist = 2 + REDMUTEX_STATS_BUCKETS;
    out->cap = 8 + 5 * 5 * per_hist + st.server_count * (2 + per_hist + 6);
    if (!(out->items = calloc(out->cap, sizeof *out->items)))
        return rmb_fail(REDMUTEX_ENOMEM, "out of memory");
    char prefix[160];
    put(out, st.counting, "counting");
    for (int k = 0; k < 5; k++) {
        for (int o = 0; o < 4; o++) {
            snprintf(prefix, sizeof prefix, "acquire_wait_seconds.%s.%s", kinds[k], outcomes[o]);
            put_hist(out, &st.acquire_wait[k][o], st.bucket_bounds_ns, prefix);
        }
        snprintf(prefix, sizeof prefix, "hold_seconds.%s", kinds[k]);
        put_hist(out, &st.hold[k], st.bucket_bounds_ns, prefix);
    }
    put(out, (double)st.locks_held, "locks_held");
    put(out, (double)st.waiters, "waiters");
    for (int r = 0; r < 3; r++)
        put(out, (double)st.renewals[r], "renewals.%s", renewals[r]);
    put(out, (double)st.locks_lost, "locks_lost");
    for (uint64_t i = 0; i < st.server_count; i++) {
        redmutex_server_stats sv;
        sv.version = REDMUTEX_STATS_VERSION;
        if (redmutex_client_server_stats(c->ptr, i, &sv) != 0)
            break;
        put(out, sv.reachable, "servers[%.200s].reachable", sv.address);
        snprintf(prefix, sizeof prefix, "servers[%.100s].round_trip_seconds", sv.address);
        put_hist(out, &sv.round_trip, st.bucket_bounds_ns, prefix);
        for (int e = 0; e < 6; e++)
            put(out, (double)sv.errors[e], "servers[%.200s].errors.%s", sv.address, errors[e]);
    }
    return 0;
}

void rmb_stats_free(rmb_stats *s)
{
    free(s->items);
    s->items = NULL;
    s->n = 0;
}

/* ---- log messages -------------------------------------------------------------- */

#define RMB_LOG_QUEUE 64

static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;
static struct {
    int level;
    char message[RMB_LOG_MESSAGE_MAX];
} log_queue[RMB_LOG_QUEUE];
static size_t log_head, log_count;
static atomic_bool log_pending;

void rmb_log_queue(int level, const char *message, const char *lock_name, const char *server, void *payload)
{
    (void)lock_name; /* both are named in the message */
    (void)server;
    (void)payload;
    pthread_mutex_lock(&log_mu);
    if (log_count < RMB_LOG_QUEUE) { /* full: nobody called into the binding for a while; drop it */
        size_t i = (log_head + log_count++) % RMB_LOG_QUEUE;
        log_queue[i].level = level;
        snprintf(log_queue[i].message, sizeof log_queue[i].message, "%s", message);
        atomic_store(&log_pending, true);
    }
    pthread_mutex_unlock(&log_mu);
}

bool rmb_log_pending(void) { return atomic_load_explicit(&log_pending, memory_order_relaxed); }

bool rmb_log_next(int *level, char *message, size_t size)
{
    pthread_mutex_lock(&log_mu);
    bool got = log_count > 0;
    if (got) {
        *level = log_queue[log_head].level;
        snprintf(message, size, "%s", log_queue[log_head].message);
        log_head = (log_head + 1) % RMB_LOG_QUEUE;
        log_count--;
    }
    atomic_store(&log_pending, log_count > 0);
    pthread_mutex_unlock(&log_mu);
    return got;
}

const char *rmb_log_level_name(int level) { return level >= REDMUTEX_LOG_WARNING ? "WARNING" : "INFO"; }
