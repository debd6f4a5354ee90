/*
 * The retry policy of a wait (retry.c): when an acquisition that found the
 * lock held tries again, and when it stops. One policy for both ways of
 * waiting, redmutex_lock_acquire() (acquire.c) and the pollable waits
 * (pollwait.c), so the two cannot drift apart.
 *
 * Layering: common (layer 0). Pure: no I/O, no lock, no clock (the caller
 * passes the time); randomness for the jitter only.
 */
#ifndef REDMUTEX_RETRY_H
#define REDMUTEX_RETRY_H

#include "internal.h"

/** One wait's retry state, on the waiter's side (not thread-safe: one per wait). */
typedef struct rm_retry {
    int64_t backoff_ms;     /* the pause before jitter: min(cap, 50) at first */
    int64_t cap_ms;         /* wait_backoff_cap_ms */
    int64_t split_delay_ms; /* retry_delay_ms: bound of the pause after a split vote; 0 none */
    int64_t retry_count;    /* attempts allowed; 0 no limit */
} rm_retry;

/** The first backoff (50 ms, or the cap if lower), from the client's options. */
void rm_retry_init(rm_retry *r, const redmutex_client_options *o);
/**
 * Milliseconds from now to the next attempt after one that found the lock
 * held. `timed_out`: the pause before that attempt ended with no news (no
 * release message, no hand-off), so the backoff doubles first, up to the
 * cap. The pause is the backoff less a jitter of up to a quarter of it,
 * shortened to the holder's lease end (ttl_ms >= 0: one ms past it) and,
 * after a split vote (split), to a random delay in 1..retry_delay_ms.
 * A fair lock's waiter shapes it further (rm_fair_pause_ms).
 */
int64_t rm_retry_pause_ms(rm_retry *r, int64_t ttl_ms, bool split, bool timed_out);
/** When the next attempt is due: now_ns + pause_ms, no later than deadline_ns. */
int64_t rm_retry_next_due(int64_t now_ns, int64_t pause_ms, int64_t deadline_ns);
/** Whether the wait is over: the deadline has come, or `attempts` used up retry_count. */
bool rm_retry_exhausted(const rm_retry *r, int64_t now_ns, int64_t deadline_ns, int64_t attempts);

#endif
