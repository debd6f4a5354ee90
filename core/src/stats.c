/*
 * Statistics and log messages (stats.h).
 *
 * Every number is a relaxed atomic: the hooks run on the fast path of
 * acquire and release, from any thread, and must cost a few nanoseconds,
 * never a lock or an allocation. No ordering between two numbers is
 * promised (a snapshot taken meanwhile may see one update and not the
 * other), so none is needed. A histogram keeps no separate count: the
 * snapshot sums the buckets, so the count always matches them.
 */
#define _GNU_SOURCE
#include "internal.h"
#include "stats.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RELAXED memory_order_relaxed

/* Bucket bounds in ns (redmutex.h): from a loopback round trip to an hour's hold. */
static const uint64_t bounds_ns[REDMUTEX_STATS_BUCKETS] = {
    100000,     250000,      500000,      1000000,     2500000,      5000000,       10000000,
    25000000,   50000000,    100000000,   250000000,   500000000,    1000000000,    2500000000,
    5000000000, 10000000000, 30000000000, 60000000000, 300000000000, 3600000000000, UINT64_MAX};

static void observe(rm_hist *h, int64_t ns)
{
    uint64_t v = ns > 0 ? (uint64_t)ns : 0;
    size_t i = 0;
    while (v > bounds_ns[i]) /* the last bound is UINT64_MAX: it stops there */
        i++;
    atomic_fetch_add_explicit(&h->sum_ns, v, RELAXED);
    atomic_fetch_add_explicit(&h->buckets[i], 1, RELAXED);
}

static void hist_zero(rm_hist *h)
{
    atomic_store_explicit(&h->sum_ns, 0, RELAXED);
    for (size_t i = 0; i < REDMUTEX_STATS_BUCKETS; i++)
        atomic_store_explicit(&h->buckets[i], 0, RELAXED);
}

static void hist_read(redmutex_histogram *out, rm_hist *h)
{
    out->count = 0;
    out->sum_ns = atomic_load_explicit(&h->sum_ns, RELAXED);
    for (size_t i = 0; i < REDMUTEX_STATS_BUCKETS; i++) {
        out->buckets[i] = atomic_load_explicit(&h->buckets[i], RELAXED);
        out->count += out->buckets[i];
    }
}

/* ---- lifetime ------------------------------------------------------------- */

void rm_stats_init(rm_stats *st, const redmutex_client_options *opts)
{
    st->on = !(opts->flags & REDMUTEX_CLIENT_NO_STATS);
    st->log = opts->log;
    st->log_payload = opts->log_payload;
    pthread_mutex_init(&st->mu, NULL);
}

void rm_stats_destroy(rm_stats *st)
{
    rm_stats_server *sv = atomic_load(&st->servers);
    while (sv) {
        rm_stats_server *next = atomic_load(&sv->next);
        free(sv->address);
        free(sv);
        sv = next;
    }
    pthread_mutex_destroy(&st->mu);
}

void rm_stats_after_fork(rm_stats *st)
{
    pthread_mutex_init(&st->mu, NULL);
    for (size_t k = 0; k < REDMUTEX_STATS_KINDS; k++) {
        for (size_t o = 0; o < REDMUTEX_STATS_OUTCOMES; o++)
            hist_zero(&st->acquire_wait[k][o]);
        hist_zero(&st->hold[k]);
    }
    atomic_store(&st->held, 0);
    atomic_store(&st->waiters, 0);
    for (size_t o = 0; o < REDMUTEX_STATS_RENEWAL_OUTCOMES; o++)
        atomic_store(&st->renewals[o], 0);
    atomic_store(&st->lost, 0);
    for (rm_stats_server *sv = atomic_load(&st->servers); sv; sv = atomic_load(&sv->next)) {
        hist_zero(&sv->round_trip);
        for (size_t e = 0; e < REDMUTEX_STATS_ERROR_CLASSES; e++)
            atomic_store(&sv->errors[e], 0);
        atomic_store(&sv->reachable, 0);
    }
}

rm_stats_server *rm_stats_server_for(rm_stats *st, const char *address)
{
    pthread_mutex_lock(&st->mu);
    rm_stats_server *_Atomic *tail = &st->servers;
    rm_stats_server *sv;
    while ((sv = atomic_load(tail)) != NULL && strcmp(sv->address, address) != 0)
        tail = &sv->next;
    if (!sv && (sv = calloc(1, sizeof *sv)) != NULL) {
        sv->stats = st;
        if (!(sv->address = strdup(address))) {
            free(sv);
            sv = NULL;
        } else {
            /* Published whole: a snapshot walking the list without st->mu
               sees the entry complete or not at all. */
            atomic_store(tail, sv);
            atomic_fetch_add(&st->n_servers, 1);
        }
    }
    pthread_mutex_unlock(&st->mu);
    return sv;
}

/* ---- hooks ------------------------------------------------------------------ */

static int error_class(int err, bool timed_out)
{
    switch (err) {
    case REDMUTEX_EPROTOCOL:
        return REDMUTEX_SERVER_ERROR_PROTOCOL;
    case REDMUTEX_EAUTH:
        return REDMUTEX_SERVER_ERROR_AUTH;
    case REDMUTEX_EDUPLICATE:
        return REDMUTEX_SERVER_ERROR_DUPLICATE;
    case REDMUTEX_ECONN:
        return timed_out ? REDMUTEX_SERVER_ERROR_TIMEOUT : REDMUTEX_SERVER_ERROR_CONNECTION;
    default:
        return REDMUTEX_SERVER_ERROR_REPLY;
    }
}

static void server_log(const rm_stats_server *sv, int level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void server_log(const rm_stats_server *sv, int level, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    sv->stats->log(level, msg, NULL, sv->address, sv->stats->log_payload);
}

void rm_stats_server_done(rm_stats_server *sv, int err, bool timed_out, int64_t rtt_ns, const char *msg)
{
    if (!sv || err == REDMUTEX_ENOMEM) /* ours, not the server's */
        return;
    rm_stats *st = sv->stats;
    if (st->on && err)
        atomic_fetch_add_explicit(&sv->errors[error_class(err, timed_out)], 1, RELAXED);
    else if (st->on) {
        observe(&sv->round_trip, rtt_ns);
        if (msg) /* an error reply: answered, and refused */
            atomic_fetch_add_explicit(&sv->errors[REDMUTEX_SERVER_ERROR_REPLY], 1, RELAXED);
    }
    /* Only a change is news (the first failure, the first answer after
       failures); exchanging the state lets one thread alone tell it. An
       error reply is an answer: the server is there. */
    int now = err ? -1 : 1;
    if (atomic_load_explicit(&sv->reachable, RELAXED) == now)
        return;
    int was = atomic_exchange(&sv->reachable, now);
    if (!st->log || was == now)
        return;
    if (err)
        server_log(sv, REDMUTEX_LOG_WARNING, "redis server %s is unreachable: %s", sv->address, msg ? msg : "");
    else if (was < 0)
        server_log(sv, REDMUTEX_LOG_INFO, "redis server %s answers again", sv->address);
}

static int acquire_outcome(int rc)
{
    switch (rc) {
    case 0:
        return REDMUTEX_ACQUIRE_ACQUIRED;
    case REDMUTEX_ETIMEDOUT:
        return REDMUTEX_ACQUIRE_TIMEOUT;
    case REDMUTEX_EINTR:
    case REDMUTEX_ECLOSED:
        return REDMUTEX_ACQUIRE_INTERRUPTED; /* a close ends every wait */
    default:
        return REDMUTEX_ACQUIRE_ERROR;
    }
}

void rm_stats_acquire(rm_stats *st, redmutex_kind kind, int rc, int64_t start_ns)
{
    if (st->on && (unsigned)kind < REDMUTEX_STATS_KINDS)
        observe(&st->acquire_wait[kind][acquire_outcome(rc)], rm_now_ns() - start_ns);
}

void rm_stats_waiting(rm_stats *st, int delta)
{
    if (st->on)
        atomic_fetch_add_explicit(&st->waiters, delta, RELAXED);
}

void rm_stats_hold_begin(rm_stats *st)
{
    if (st->on)
        atomic_fetch_add_explicit(&st->held, 1, RELAXED);
}

void rm_stats_hold_end(rm_stats *st, redmutex_kind kind, int64_t acquired_ns, bool lost)
{
    if (!st->on)
        return;
    atomic_fetch_sub_explicit(&st->held, 1, RELAXED);
    if ((unsigned)kind < REDMUTEX_STATS_KINDS)
        observe(&st->hold[kind], rm_now_ns() - acquired_ns);
    if (lost)
        atomic_fetch_add_explicit(&st->lost, 1, RELAXED);
}

void rm_stats_renewal(rm_stats *st, int outcome)
{
    if (st->on && outcome >= 0 && outcome < REDMUTEX_STATS_RENEWAL_OUTCOMES)
        atomic_fetch_add_explicit(&st->renewals[outcome], 1, RELAXED);
}

/* ---- snapshots ---------------------------------------------------------------- */

int rm_stats_read(rm_err *err, rm_stats *st, redmutex_stats *out)
{
    if (!out)
        return rm_fail(err, REDMUTEX_EINVAL, "redmutex_client_stats: out is NULL");
    if (out->version < 1 || out->version > REDMUTEX_STATS_VERSION)
        return rm_fail(err, REDMUTEX_EINVAL,
                       "redmutex_client_stats: stats version %u is unknown (this library knows 1 to %d; set "
                       "version to REDMUTEX_STATS_VERSION)",
                       out->version, REDMUTEX_STATS_VERSION);
    /* Version 1 is the whole struct; a later version writes only the
       fields the caller's version has (a table of sizes, as for options). */
    out->counting = st->on;
    memcpy(out->bucket_bounds_ns, bounds_ns, sizeof bounds_ns);
    for (size_t k = 0; k < REDMUTEX_STATS_KINDS; k++) {
        for (size_t o = 0; o < REDMUTEX_STATS_OUTCOMES; o++)
            hist_read(&out->acquire_wait[k][o], &st->acquire_wait[k][o]);
        hist_read(&out->hold[k], &st->hold[k]);
    }
    out->locks_held = atomic_load_explicit(&st->held, RELAXED);
    out->waiters = atomic_load_explicit(&st->waiters, RELAXED);
    for (size_t o = 0; o < REDMUTEX_STATS_RENEWAL_OUTCOMES; o++)
        out->renewals[o] = atomic_load_explicit(&st->renewals[o], RELAXED);
    out->locks_lost = atomic_load_explicit(&st->lost, RELAXED);
    out->server_count = atomic_load(&st->n_servers);
    return 0;
}

int rm_stats_read_server(rm_err *err, rm_stats *st, size_t index, redmutex_server_stats *out)
{
    if (!out)
        return rm_fail(err, REDMUTEX_EINVAL, "redmutex_client_server_stats: out is NULL");
    if (out->version < 1 || out->version > REDMUTEX_STATS_VERSION)
        return rm_fail(err, REDMUTEX_EINVAL,
                       "redmutex_client_server_stats: stats version %u is unknown (this library knows 1 to %d; "
                       "set version to REDMUTEX_STATS_VERSION)",
                       out->version, REDMUTEX_STATS_VERSION);
    rm_stats_server *sv = atomic_load(&st->servers);
    for (size_t i = 0; sv && i < index; i++)
        sv = atomic_load(&sv->next);
    if (!sv)
        return rm_fail(err, REDMUTEX_EINVAL, "redmutex_client_server_stats: no server %zu (the client has %zu)", index,
                       atomic_load(&st->n_servers));
    out->reachable = atomic_load_explicit(&sv->reachable, RELAXED) > 0;
    out->address = sv->address;
    hist_read(&out->round_trip, &sv->round_trip);
    for (size_t e = 0; e < REDMUTEX_STATS_ERROR_CLASSES; e++)
        out->errors[e] = atomic_load_explicit(&sv->errors[e], RELAXED);
    return 0;
}

/* ---- log messages ---------------------------------------------------------------- */

void rm_log_hold_state(const rm_stats *st, redmutex_state state, const char *name, const char *owner)
{
    if (!st->log)
        return;
    char msg[REDMUTEX_NAME_MAX + REDMUTEX_OWNER_MAX + 200];
    char who[REDMUTEX_OWNER_MAX + 16] = "";
    if (owner && owner[0])
        snprintf(who, sizeof who, " of owner '%s'", owner);
    int level = REDMUTEX_LOG_WARNING;
    switch (state) {
    case REDMUTEX_STATE_RENEWAL_FAILING:
        snprintf(msg, sizeof msg,
                 "lock '%s'%s: renewal is failing (servers unreachable or slow); the lock may still be held "
                 "until its validity ends",
                 name, who);
        break;
    case REDMUTEX_STATE_LOST:
        snprintf(msg, sizeof msg,
                 "lock '%s'%s is lost: its lease ran out or the servers no longer have it; the work done "
                 "under it since is not protected",
                 name, who);
        break;
    case REDMUTEX_STATE_HELD:
        level = REDMUTEX_LOG_INFO;
        snprintf(msg, sizeof msg, "lock '%s'%s: renewal recovered", name, who);
        break;
    default:
        return;
    }
    st->log(level, msg, name, NULL, st->log_payload);
}
