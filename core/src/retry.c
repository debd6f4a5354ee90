/*
 * The retry policy of a wait (retry.h): the capped, doubling, jittered
 * backoff; the holder's lease end; the Redlock split-vote delay; the
 * deadline and retry_count.
 */
#include "retry.h"

void rm_retry_init(rm_retry *r, const redmutex_client_options *o)
{
    r->cap_ms = o->wait_backoff_cap_ms;
    r->backoff_ms = r->cap_ms < 50 ? r->cap_ms : 50;
    r->split_delay_ms = o->retry_delay_ms;
    r->retry_count = o->retry_count;
}

int64_t rm_retry_pause_ms(rm_retry *r, int64_t ttl_ms, bool split, bool timed_out)
{
    /* Silence means the release (if any) was not published, or this client
       missed it: back off further, but never past the cap. */
    if (timed_out && r->backoff_ms < r->cap_ms)
        r->backoff_ms = r->backoff_ms * 2 > r->cap_ms ? r->cap_ms : r->backoff_ms * 2;
    /* The jitter keeps waiters that started together from retrying together. */
    int64_t pause_ms = r->backoff_ms - (int64_t)rm_random_below((uint64_t)r->backoff_ms / 4 + 1);
    if (ttl_ms >= 0 && ttl_ms < pause_ms - 1) /* compared, not added: hostile TTLs cannot overflow */
        pause_ms = ttl_ms + 1;
    /* After a split vote every contender released what it got: a random
       delay lets one of them go first (Redlock's retry delay). */
    if (split && r->split_delay_ms > 0) {
        int64_t d = (int64_t)rm_random_below((uint64_t)r->split_delay_ms) + 1;
        if (d < pause_ms)
            pause_ms = d;
    }
    return pause_ms;
}

int64_t rm_retry_next_due(int64_t now_ns, int64_t pause_ms, int64_t deadline_ns)
{
    int64_t due = now_ns + pause_ms * RM_NS_PER_MS;
    return due > deadline_ns ? deadline_ns : due;
}

bool rm_retry_exhausted(const rm_retry *r, int64_t now_ns, int64_t deadline_ns, int64_t attempts)
{
    return now_ns >= deadline_ns || (r->retry_count > 0 && attempts >= r->retry_count);
}
