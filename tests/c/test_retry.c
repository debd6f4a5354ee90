/*
 * The retry policy of waits (core/src/retry.c), without Redis: the first
 * backoff, its doubling after silent pauses up to the cap, the jitter's
 * bounds, the holder's lease end, the split-vote delay, the deadline and
 * retry_count. Blocking acquires and pollable waits both pause by it.
 */
#define _GNU_SOURCE
#include "harness.h"
#include "retry.h"

#define MS RM_NS_PER_MS
#define SAMPLES 2000

static rm_retry retry_with(int64_t cap_ms, int64_t retry_delay_ms, int64_t retry_count)
{
    redmutex_client_options o = REDMUTEX_CLIENT_OPTIONS_INIT;
    o.wait_backoff_cap_ms = cap_ms;
    o.retry_delay_ms = retry_delay_ms;
    o.retry_count = retry_count;
    rm_retry r;
    rm_retry_init(&r, &o);
    return r;
}

/* Every pause of a backoff b lies in [b - b/4, b], and both ends are reached. */
static void check_jitter(rm_retry *r, int64_t b)
{
    int64_t lo = INT64_MAX, hi = 0;
    for (int i = 0; i < SAMPLES; i++) {
        int64_t p = rm_retry_pause_ms(r, -1, false, false);
        CHECKF(p >= b - b / 4 && p <= b, "pause %lld outside [%lld, %lld]", (long long)p, (long long)(b - b / 4),
               (long long)b);
        lo = p < lo ? p : lo;
        hi = p > hi ? p : hi;
    }
    CHECKF(lo == b - b / 4 && hi == b, "backoff %lld: pauses spanned only [%lld, %lld]", (long long)b, (long long)lo,
           (long long)hi);
}

static void test_backoff_starts_at_50_ms_or_the_cap(void)
{
    rm_retry r = retry_with(5000, 0, 0);
    CHECK(r.backoff_ms == 50);
    check_jitter(&r, 50);
    r = retry_with(20, 0, 0);
    CHECK(r.backoff_ms == 20);
    check_jitter(&r, 20);
    r = retry_with(1, 0, 0);
    CHECK(rm_retry_pause_ms(&r, -1, false, true) == 1);
}

static void test_silent_pauses_double_the_backoff_up_to_the_cap(void)
{
    rm_retry r = retry_with(300, 0, 0);
    static const int64_t want[] = {100, 200, 300, 300};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        int64_t p = rm_retry_pause_ms(&r, -1, false, true);
        CHECKF(r.backoff_ms == want[i], "step %zu: backoff %lld, want %lld", i, (long long)r.backoff_ms,
               (long long)want[i]);
        CHECK(p >= want[i] - want[i] / 4 && p <= want[i]);
    }
    check_jitter(&r, 300);
    /* A pause a release message or a hand-off ended does not back off further. */
    r = retry_with(300, 0, 0);
    for (int i = 0; i < 10; i++)
        rm_retry_pause_ms(&r, -1, false, false);
    CHECK(r.backoff_ms == 50);
}

static void test_the_holders_lease_end_comes_first(void)
{
    rm_retry r = retry_with(5000, 0, 0);
    for (int i = 0; i < 4; i++)
        rm_retry_pause_ms(&r, -1, false, true); /* backoff 800 */
    CHECK(rm_retry_pause_ms(&r, 10, false, false) == 11);
    CHECK(rm_retry_pause_ms(&r, 0, false, false) == 1);
    int64_t p = rm_retry_pause_ms(&r, 100000, false, false); /* a longer lease: the backoff */
    CHECK(p >= 600 && p <= 800);
    p = rm_retry_pause_ms(&r, INT64_MAX, false, false); /* hostile TTLs do not overflow */
    CHECK(p >= 600 && p <= 800);
}

static void test_a_split_vote_retries_within_retry_delay(void)
{
    rm_retry r = retry_with(5000, 20, 0);
    bool saw_low = false, saw_high = false;
    for (int i = 0; i < SAMPLES; i++) {
        int64_t p = rm_retry_pause_ms(&r, -1, true, false);
        CHECKF(p >= 1 && p <= 20, "split pause %lld outside [1, 20]", (long long)p);
        saw_low |= p == 1;
        saw_high |= p == 20;
    }
    CHECK(saw_low && saw_high);
    /* Never longer than the backoff would be, nor without a split. */
    r = retry_with(8, 1000, 0);
    for (int i = 0; i < SAMPLES; i++)
        CHECK(rm_retry_pause_ms(&r, -1, true, false) <= 8);
    r = retry_with(5000, 20, 0);
    for (int i = 0; i < SAMPLES; i++)
        CHECK(rm_retry_pause_ms(&r, -1, false, false) >= 38);
    r = retry_with(5000, 0, 0); /* retry_delay_ms 0: no split delay */
    for (int i = 0; i < SAMPLES; i++)
        CHECK(rm_retry_pause_ms(&r, -1, true, false) >= 38);
}

static void test_the_deadline_caps_the_due_time(void)
{
    CHECK(rm_retry_next_due(1000 * MS, 50, 2000 * MS) == 1050 * MS);
    CHECK(rm_retry_next_due(1000 * MS, 50, 1020 * MS) == 1020 * MS);
    CHECK(rm_retry_next_due(1000 * MS, 50, INT64_MAX) == 1050 * MS); /* no deadline (pollable waits) */
}

static void test_the_wait_ends_at_the_deadline_or_after_retry_count_attempts(void)
{
    rm_retry r = retry_with(5000, 0, 0);
    CHECK(!rm_retry_exhausted(&r, 999, 1000, 1000000));
    CHECK(rm_retry_exhausted(&r, 1000, 1000, 1));
    CHECK(rm_retry_exhausted(&r, 1001, 1000, 1));
    r = retry_with(5000, 0, 3);
    CHECK(!rm_retry_exhausted(&r, 0, 1000, 2));
    CHECK(rm_retry_exhausted(&r, 0, 1000, 3));
    CHECK(rm_retry_exhausted(&r, 0, 1000, 4));
}

int main(int argc, char **argv)
{
    static const rt_test tests[] = {
        {"backoff_starts_at_50_ms_or_the_cap", test_backoff_starts_at_50_ms_or_the_cap},
        {"silent_pauses_double_the_backoff_up_to_the_cap", test_silent_pauses_double_the_backoff_up_to_the_cap},
        {"the_holders_lease_end_comes_first", test_the_holders_lease_end_comes_first},
        {"a_split_vote_retries_within_retry_delay", test_a_split_vote_retries_within_retry_delay},
        {"the_deadline_caps_the_due_time", test_the_deadline_caps_the_due_time},
        {"the_wait_ends_at_the_deadline_or_after_retry_count_attempts",
         test_the_wait_ends_at_the_deadline_or_after_retry_count_attempts},
    };
    return rt_run(tests, sizeof tests / sizeof tests[0], argc, argv);
}
