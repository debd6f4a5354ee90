/*
 * Quorum arithmetic: Redlock's vote counting and the validity of a lease.
 *
 * Pure functions over numbers the callers read from the servers' replies
 * and from the clock: no I/O, no client mutex, no clock of its own, no
 * thread-local error. tests/c/test_quorum.c proves them without Redis.
 *
 * Layering: above the utilities (internal.h), below the hold registry and the
 * lock operations that count their replies with it.
 */
#ifndef REDMUTEX_QUORUM_H
#define REDMUTEX_QUORUM_H

#include "internal.h"

/** Servers that make a majority of n: n/2 + 1 (so one server needs its one vote). */
static inline size_t rm_quorum_of(size_t n) { return n / 2 + 1; }

/**
 * Servers that must grant a permit of a semaphore of capacity k on n
 * servers: floor(k * n / (k + 1)) + 1. Each server grants at most k
 * permits, so the permits held at once are at most k * n / q < k + 1: no
 * more than k. With k = 1 it is the majority.
 */
static inline size_t rm_sem_quorum_of(size_t n, int64_t k) { return (size_t)((int64_t)n * k / (k + 1)) + 1; }

/**
 * Whether a question put to n servers is settled: `yes` servers gave the
 * answer that needs a majority q, or `no` servers ruled it out (more than
 * n - q can never leave a majority).
 */
static inline bool rm_quorum_decided(size_t yes, size_t no, size_t n, size_t q) { return yes >= q || no > n - q; }

/** Clock drift allowance for a lease (DESIGN: lease * 1% + 2 ms), in ns. */
static inline int64_t rm_drift_ns(int64_t lease_ms) { return lease_ms * RM_NS_PER_MS / 100 + 2 * RM_NS_PER_MS; }

/** When a lease of lease_ms granted by a request sent at started_ns stops being safe to rely on. */
static inline int64_t rm_validity_end_ns(int64_t started_ns, int64_t lease_ms)
{
    return started_ns + lease_ms * RM_NS_PER_MS - rm_drift_ns(lease_ms);
}

/**
 * What is left of a lease of lease_ms once elapsed_ns went by since its
 * request was sent, less the drift: > 0 while the holder may rely on it.
 */
static inline int64_t rm_validity_left_ns(int64_t lease_ms, int64_t elapsed_ns)
{
    return lease_ms * RM_NS_PER_MS - elapsed_ns - rm_drift_ns(lease_ms);
}

/**
 * When a hold whose servers last reported ttl_ms (at started_ns) is renewed
 * at the latest: a third of the way through, so two renewals can fail
 * before it runs out.
 */
static inline int64_t rm_renew_due_ns(int64_t started_ns, int64_t ttl_ms)
{
    return started_ns + ttl_ms * RM_NS_PER_MS * 3 / 10;
}

/**
 * Whether a server that came back with a new run_id at seen_ns (0: never)
 * is still too young at now_ns for its grant to count, given the longest
 * lease a holder of its previous life may have (Redlock's delayed restart).
 * Never with one server: there is no majority to protect.
 */
bool rm_restart_too_young(int64_t now_ns, int64_t seen_ns, size_t n, int64_t longest_lease_ms);

/**
 * The q-th largest of v[0..n) (1 <= q <= n): the value a majority reaches.
 * Reorders v. With ttl_order, -1 ("no TTL": the key never expires) counts as
 * the largest.
 */
int64_t rm_qth_largest(int64_t *v, size_t n, size_t q, bool ttl_order);

/* ---- the tally of one request's answers ----------------------------------- */

/**
 * How the servers answered one request: every operation (acquire, release,
 * extend, renewal, queries) counts its replies with one tally. `yes` is the
 * answer the operation asks a majority for, `no` the other answer of a live
 * server; `failed` servers gave no usable answer (transport failure, error or
 * malformed reply). The error kept is the first, or a later one that decides
 * by itself (wrong type, authentication), whose code and message go together.
 */
typedef struct rm_tally {
    size_t yes, no, failed;
    size_t errors;                         /* error or malformed replies (among failed) */
    size_t wrongtype;                      /* of them, keys that hold another kind of value */
    bool yes_at[REDMUTEX_SERVERS_MAX];     /* answered yes (an acquisition: part of the hold) */
    bool unknown_at[REDMUTEX_SERVERS_MAX]; /* the request may have run: outcome unknown */
    rm_err error;
    bool error_replied; /* the error kept is a server's answer, not a transport failure */
} rm_tally;

/** An empty tally. */
void rm_tally_init(rm_tally *t);
/** Server i answered yes. */
void rm_tally_yes(rm_tally *t, size_t i);
/** Server i answered no. */
void rm_tally_no(rm_tally *t, size_t i);
/**
 * Server i gave no answer (transport failure, deadline): `unknown` when the
 * request went out and may have run. Its error is kept unless one is kept
 * already or it is merely a lost connection (REDMUTEX_ECONN: the fan-out
 * summarises those, rm_call_fail).
 */
void rm_tally_unanswered(rm_tally *t, size_t i, bool unknown, int code, const char *msg);
/** Server i answered with an error or with a reply that is no vote (`unknown`: it may have changed something). */
void rm_tally_error(rm_tally *t, size_t i, bool unknown, const rm_err *e);
/** Whether the question is settled with majority q of n (rm_quorum_decided). */
static inline bool rm_tally_decided(const rm_tally *t, size_t n, size_t q)
{
    return rm_quorum_decided(t->yes, t->no, n, q);
}
/** Whether an error decides the operation by itself: a wrong type, a refusal of the credentials. */
static inline bool rm_error_decides(int code) { return code == REDMUTEX_EWRONGTYPE || code == REDMUTEX_EAUTH; }

/* ---- the votes of one acquisition -------------------------------------- */

typedef struct rm_votes {
    rm_tally t;           /* yes: granted (and old enough); no: refused, or a grant too young */
    size_t gone;          /* nested acquisitions that found the owner's field gone (among no) */
    size_t young;         /* grants of servers restarted less than a lease ago (among no) */
    int64_t count, fence; /* max over the grants reported */
    int64_t ttl;          /* min holder's TTL over no votes, -1 when unknown */
    /* A hold handed over by a releasing script (fair) lives shorter than the
       lease until its watchdog extends it: min TTL the grants reported below
       the lease, -1 when none. */
    int64_t granted_ttl;
    /* A fair lock's refusals: the fewest waiters ahead of this one in a
       server's queue, -1 when no server said. */
    int64_t behind;
} rm_votes;

/** Empty votes: nothing counted, TTLs unknown. */
void rm_votes_init(rm_votes *v);
/** The figures of a refusal (the tally counts the no): held by another owner for
    holder_ttl_ms (-1 unknown); `gone` for a nested acquisition that found the owner's
    field missing. */
void rm_votes_refused(rm_votes *v, int64_t holder_ttl_ms, bool gone);
/** A fair lock's refusal said how many waiters are ahead of this one in its queue (the fewest is kept). */
void rm_votes_behind(rm_votes *v, int64_t behind);
/** A grant's figures, counted as soon as a server reports it: hold count and fencing token (max),
    and a hand-off's short TTL (min; -1 when the grant has the full lease). */
void rm_votes_grant_figures(rm_votes *v, int64_t count, int64_t fence, int64_t granted_ttl_ms);
/** Server i granted, but it restarted too recently for its grant to count (the tally counts a
    no): the grant is part of the hold all the same, renewed and released with it. */
void rm_votes_young(rm_votes *v, size_t i);

/** What one acquisition attempt's votes decide. */
typedef enum rm_acquire_verdict {
    RM_VERDICT_WON,         /* a majority granted with validity left: the hold is ours */
    RM_VERDICT_NESTED_LOST, /* a nested acquisition found the owner's field gone where no majority is left */
    RM_VERDICT_TOO_SLOW,    /* a majority granted, but the lease ran out on the way: undo and retry now */
    RM_VERDICT_REPLICAS,    /* the replicas did not confirm (v->t.error, EREPLICAS) */
    RM_VERDICT_BUSY,        /* a majority answered: held elsewhere (v->ttl: when to retry) */
    RM_VERDICT_ERROR,       /* v->t.error decides: wrong type, auth, or every answer an error */
    RM_VERDICT_UNREACHABLE, /* no majority can answer */
    RM_VERDICT_UNDECIDED    /* a minority is down or slow: wait while a majority may still answer */
} rm_acquire_verdict;

/**
 * Decides an attempt on n servers with majority q: validity_ns is what is
 * left of the lease (rm_validity_left_ns), `nested` whether the owner held
 * the lock already, `broken` how many servers cannot answer at all
 * (transport failures and error replies).
 */
rm_acquire_verdict rm_acquire_decide(const rm_votes *v, size_t n, size_t q, int64_t validity_ns, bool nested,
                                     size_t broken);

#endif
