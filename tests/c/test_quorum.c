/*
 * Quorum arithmetic (core/src/quorum.c), without Redis: majorities, the
 * settling of a question before every server answered, lease validity with
 * the drift allowance, the delayed restart rule, the q-th largest TTL, and
 * what an acquisition's votes decide.
 */
#define _GNU_SOURCE
#include "harness.h"
#include "quorum.h"

#include <string.h>

#define MS RM_NS_PER_MS

static void test_a_majority_is_more_than_half(void)
{
    static const size_t want[] = {0, 1, 2, 2, 3, 3, 4, 4, 5};
    for (size_t n = 1; n < sizeof want / sizeof want[0]; n++)
        CHECKF(rm_quorum_of(n) == want[n], "quorum of %zu is %zu, want %zu", n, rm_quorum_of(n), want[n]);
}

static void test_a_question_is_settled_by_a_majority_or_by_too_many_noes(void)
{
    /* Three servers, majority two. */
    CHECK(!rm_quorum_decided(0, 0, 3, 2));
    CHECK(!rm_quorum_decided(1, 1, 3, 2)); /* the third decides */
    CHECK(rm_quorum_decided(2, 0, 3, 2));
    CHECK(rm_quorum_decided(0, 2, 3, 2)); /* one server left cannot make two */
    /* One server decides alone, either way. */
    CHECK(rm_quorum_decided(1, 0, 1, 1));
    CHECK(rm_quorum_decided(0, 1, 1, 1));
    /* Five servers: two noes still leave a majority possible, three do not. */
    CHECK(!rm_quorum_decided(2, 2, 5, 3));
    CHECK(rm_quorum_decided(0, 3, 5, 3));
}

static void test_validity_is_the_lease_less_time_spent_and_drift(void)
{
    /* Drift: 1% of the lease plus 2 ms. */
    CHECK(rm_drift_ns(10000) == 102 * MS);
    CHECK(rm_drift_ns(0) == 2 * MS);
    CHECK(rm_validity_end_ns(1000 * MS, 1000) == (1000 + 1000 - 12) * MS);
    CHECK(rm_validity_left_ns(1000, 0) == 988 * MS);
    CHECK(rm_validity_left_ns(1000, 900 * MS) == 88 * MS);
    /* A request that took the whole lease less the drift leaves nothing to rely on. */
    CHECK(rm_validity_left_ns(1000, 988 * MS) == 0);
    CHECK(rm_validity_left_ns(1000, 2000 * MS) < 0);
    /* Renewal at the latest a third of the way through (3/10). */
    CHECK(rm_renew_due_ns(5 * MS, 30000) == 5 * MS + 9000 * MS);
}

static void test_a_restarted_server_counts_only_after_the_longest_lease(void)
{
    int64_t seen = 100000 * MS;
    /* Longest lease 30 s: drift 302 ms. */
    CHECK(rm_restart_too_young(seen, seen, 3, 30000));
    CHECK(rm_restart_too_young(seen + 30301 * MS, seen, 3, 30000));
    CHECK(!rm_restart_too_young(seen + 30302 * MS, seen, 3, 30000));
    /* Never seen restarting, or one server alone: no majority to protect. */
    CHECK(!rm_restart_too_young(seen, 0, 3, 30000));
    CHECK(!rm_restart_too_young(seen, seen, 1, 30000));
}

static void test_the_qth_largest_is_what_a_majority_reaches(void)
{
    int64_t ttls[] = {5, 1, 9};
    CHECK(rm_qth_largest(ttls, 3, 2, false) == 5);
    int64_t one[] = {42};
    CHECK(rm_qth_largest(one, 1, 1, false) == 42);
    /* -1 is "no TTL": it never expires, so it is the largest in TTL order. */
    int64_t forever[] = {-1, 100, 50};
    CHECK(rm_qth_largest(forever, 3, 2, true) == 100);
    int64_t plain[] = {-1, 100, 50};
    CHECK(rm_qth_largest(plain, 3, 2, false) == 50);
    int64_t five[] = {7, 3, 8, 1, 6};
    CHECK(rm_qth_largest(five, 5, 3, false) == 6);
}

static void test_votes_keep_the_extremes_and_the_first_error(void)
{
    rm_votes v;
    rm_votes_init(&v);
    CHECK(v.ttl == -1 && v.granted_ttl == -1 && v.yes == 0 && v.error == 0);
    rm_votes_grant_figures(&v, 2, 7, -1);
    rm_votes_grant_figures(&v, 1, 9, 400);
    rm_votes_grant_figures(&v, 1, 3, 250);
    CHECK(v.count == 2 && v.fence == 9 && v.granted_ttl == 250);
    rm_votes_refused(&v, 0, -1, false);
    CHECK(v.no == 1 && v.ttl == -1);
    rm_votes_refused(&v, 1, 800, true);
    rm_votes_refused(&v, 2, 300, false);
    CHECK(v.no == 3 && v.ttl == 300 && v.gone == 1);
    /* A lost connection is no error worth reporting; the first real one is kept. */
    rm_votes_unanswered(&v, 3, true, REDMUTEX_ECONN, "connection lost");
    CHECK(v.failed == 1 && v.errors == 0 && v.error == 0 && v.unknown_at[3]);
    rm_votes_unanswered(&v, 4, false, REDMUTEX_ETIMEDOUT, "timed out");
    rm_votes_error(&v, 5, true, REDMUTEX_EREPLICAS, "replicas");
    CHECK(v.failed == 3 && v.errors == 1 && v.error == REDMUTEX_ETIMEDOUT && strcmp(v.error_msg, "timed out") == 0);
    CHECK(!v.unknown_at[4] && v.unknown_at[5]);
    /* A young server's grant is part of the hold but no vote. */
    rm_votes_granted(&v, 6, true);
    rm_votes_granted(&v, 7, false);
    CHECK(v.yes == 1 && v.no == 4 && v.young == 1 && v.yes_at[6] && v.yes_at[7]);
}

/* Votes of n servers: y yes, o no, f failed with error code err (0: transport). */
static rm_votes tally(size_t y, size_t o, size_t f, int err)
{
    rm_votes v;
    rm_votes_init(&v);
    size_t i = 0;
    for (size_t k = 0; k < y; k++)
        rm_votes_granted(&v, i++, false);
    for (size_t k = 0; k < o; k++)
        rm_votes_refused(&v, i++, 100, false);
    for (size_t k = 0; k < f; k++) {
        if (err)
            rm_votes_error(&v, i++, false, err, "error");
        else
            rm_votes_unanswered(&v, i++, false, REDMUTEX_ECONN, "gone");
    }
    return v;
}

static void test_an_attempt_is_decided_by_its_votes(void)
{
    rm_votes v = tally(2, 1, 0, 0);
    CHECK(rm_acquire_decide(&v, 3, 2, 100 * MS, false, 0) == RM_VERDICT_WON);
    CHECK(rm_acquire_decide(&v, 3, 2, 0, false, 0) == RM_VERDICT_TOO_SLOW);
    v = tally(1, 2, 0, 0);
    CHECK(rm_acquire_decide(&v, 3, 2, 100 * MS, false, 0) == RM_VERDICT_BUSY);
    v = tally(1, 0, 2, REDMUTEX_EREPLICAS);
    CHECK(rm_acquire_decide(&v, 3, 2, 100 * MS, false, 2) == RM_VERDICT_REPLICAS);
    /* A wrong type is an error even when a majority did not answer it. */
    v = tally(1, 0, 1, REDMUTEX_EWRONGTYPE);
    CHECK(rm_acquire_decide(&v, 3, 2, 100 * MS, false, 1) == RM_VERDICT_ERROR);
    v = tally(0, 0, 1, REDMUTEX_EPROTOCOL);
    CHECK(rm_acquire_decide(&v, 1, 1, 100 * MS, false, 1) == RM_VERDICT_ERROR);
    /* Two of three servers unreachable: no majority can answer. */
    v = tally(1, 0, 2, 0);
    CHECK(rm_acquire_decide(&v, 3, 2, 100 * MS, false, 2) == RM_VERDICT_UNREACHABLE);
    /* One of three unreachable, one grant: a majority may still come. */
    v = tally(1, 0, 1, 0);
    CHECK(rm_acquire_decide(&v, 3, 2, 100 * MS, false, 1) == RM_VERDICT_UNDECIDED);
    /* A nested acquisition that finds the owner's field gone on a majority lost the lock. */
    rm_votes_init(&v);
    rm_votes_refused(&v, 0, -1, true);
    rm_votes_refused(&v, 1, -1, true);
    rm_votes_granted(&v, 2, false);
    CHECK(rm_acquire_decide(&v, 3, 2, 100 * MS, true, 0) == RM_VERDICT_NESTED_LOST);
    CHECK(rm_acquire_decide(&v, 3, 2, 100 * MS, false, 0) == RM_VERDICT_BUSY);
    /* Two grants of which one from a server restarted too recently: busy, not won. */
    rm_votes_init(&v);
    rm_votes_granted(&v, 0, false);
    rm_votes_granted(&v, 1, true);
    rm_votes_refused(&v, 2, 50, false);
    CHECK(rm_acquire_decide(&v, 3, 2, 100 * MS, false, 0) == RM_VERDICT_BUSY);
}

int main(int argc, char **argv)
{
    static const rt_test tests[] = {
        {"a_majority_is_more_than_half", test_a_majority_is_more_than_half},
        {"a_question_is_settled_by_a_majority_or_by_too_many_noes",
         test_a_question_is_settled_by_a_majority_or_by_too_many_noes},
        {"validity_is_the_lease_less_time_spent_and_drift", test_validity_is_the_lease_less_time_spent_and_drift},
        {"a_restarted_server_counts_only_after_the_longest_lease",
         test_a_restarted_server_counts_only_after_the_longest_lease},
        {"the_qth_largest_is_what_a_majority_reaches", test_the_qth_largest_is_what_a_majority_reaches},
        {"votes_keep_the_extremes_and_the_first_error", test_votes_keep_the_extremes_and_the_first_error},
        {"an_attempt_is_decided_by_its_votes", test_an_attempt_is_decided_by_its_votes},
    };
    return rt_run(tests, sizeof tests / sizeof tests[0], argc, argv);
}
