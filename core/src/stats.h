/*
 * Statistics and log messages (stats.c): what a client counts, and the one
 * place that words its log messages.
 *
 * Layering: common (layer 0). The layers above call these hooks where a
 * number becomes known: the fan-out (each server's round trip or failure),
 * the hold registry and the watchdog (holds, renewals, losses), acquire and
 * the pollable waits (how long an acquisition waited and how it ended).
 * Counting is relaxed atomic additions: no lock, no allocation.
 */
#ifndef REDMUTEX_STATS_H
#define REDMUTEX_STATS_H

#include "internal.h"

/** A histogram: the total and the count per bucket (the count is their sum). */
typedef struct rm_hist {
    _Atomic uint64_t sum_ns;
    _Atomic uint64_t buckets[REDMUTEX_STATS_BUCKETS];
} rm_hist;

struct rm_stats;

/** One server's numbers, kept by address for the client's life (never freed before the client). */
typedef struct rm_stats_server {
    struct rm_stats *stats;
    struct rm_stats_server *_Atomic next;
    char *address;
    rm_hist round_trip;
    _Atomic uint64_t errors[REDMUTEX_STATS_ERROR_CLASSES];
    /* 1 answered last, -1 failed last, 0 never tried: log messages go out on changes. */
    _Atomic int reachable;
} rm_stats_server;

typedef struct rm_stats {
    bool on; /* not REDMUTEX_CLIENT_NO_STATS */
    redmutex_log_fn log;
    void *log_payload;
    rm_hist acquire_wait[REDMUTEX_STATS_KINDS][REDMUTEX_STATS_OUTCOMES];
    rm_hist hold[REDMUTEX_STATS_KINDS];
    _Atomic int64_t held, waiters;
    _Atomic uint64_t renewals[REDMUTEX_STATS_RENEWAL_OUTCOMES];
    _Atomic uint64_t lost;
    /* Servers by address, in the order they were first named; appended
       under mu, read without it (each entry is published whole). */
    pthread_mutex_t mu;
    rm_stats_server *_Atomic servers;
    _Atomic size_t n_servers;
} rm_stats;

/** Sets up st for a client with these options (counting on unless REDMUTEX_CLIENT_NO_STATS). */
void rm_stats_init(rm_stats *st, const redmutex_client_options *opts);
/** Frees the server entries. */
void rm_stats_destroy(rm_stats *st);
/** In a forked child: every count starts again from zero (the parent's are the parent's). */
void rm_stats_after_fork(rm_stats *st);
/**
 * The entry of the server at `address`, made on first use: a cluster node
 * that comes and goes keeps its counts. NULL without memory (that server is
 * then not counted). Not for the fast path: it takes st->mu.
 */
rm_stats_server *rm_stats_server_for(rm_stats *st, const char *address);

/** Whether the fan-out's results are wanted at all (counting, or log messages on a server's changes). */
static inline bool rm_stats_watching(const rm_stats *st) { return st->on || st->log; }

/* ---- hooks: where the numbers are known --------------------------------- */

/**
 * A request to a server ended (the fan-out, once per server and run): err 0
 * and rtt_ns when it was answered (refused: an error reply's text, or NULL),
 * else its error code, timed_out when its deadline passed, and msg.
 */
void rm_stats_server_done(rm_stats_server *sv, int err, bool timed_out, int64_t rtt_ns, const char *msg);
/** An acquisition of kind that began at start_ns ended with rc (redmutex_lock_acquire's codes). */
void rm_stats_acquire(rm_stats *st, redmutex_kind kind, int rc, int64_t start_ns);
/** An acquisition began (+1) or stopped (-1) waiting. */
void rm_stats_waiting(rm_stats *st, int delta);
/** A hold began. */
void rm_stats_hold_begin(rm_stats *st);
/** A hold of kind that began at acquired_ns ended: released or forgotten, or lost. */
void rm_stats_hold_end(rm_stats *st, redmutex_kind kind, int64_t acquired_ns, bool lost);
/** A renewal of one hold ended (redmutex_renewal_outcome). */
void rm_stats_renewal(rm_stats *st, int outcome);

/* ---- snapshots (redmutex_client_stats, redmutex_client_server_stats) ---- */

/** Checks out's version and fills it. 0 or REDMUTEX_EINVAL. */
int rm_stats_read(rm_err *err, rm_stats *st, redmutex_stats *out);
/** The same for server number index (in the order of first use). */
int rm_stats_read_server(rm_err *err, rm_stats *st, size_t index, redmutex_server_stats *out);

/* ---- log messages ------------------------------------------------------- */

/**
 * Tells the client's log callback that a hold of lock `name` (for `owner`,
 * "" for a plain lock's own hold) changed to state. Call without any
 * library lock held: the callback may call back into the library.
 */
void rm_log_hold_state(const rm_stats *st, redmutex_state state, const char *name, const char *owner);

#endif
