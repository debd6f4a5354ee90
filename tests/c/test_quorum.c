/*
 * Quorum arithmetic (core/src/quorum.c), without Redis: majorities, the
 * settling of a question before every server answered, lease validity with
 * the drift allowance, the delayed restart rule, the q-th largest TTL, and
 * what an acquisition's votes decide.
 */
#define _GNU_SOURCE
#include "harness.h"
#include "quorum.h"
#include "tally.h"

#include <stdio.h>

#include <string.h>

#define MS RM_NS_PER_MS

static void test_a_majority_is_more_than_half(void)
{
    static const size_t want[] = {0, 1, 2, 2, 3, 3, 4, 4, 5};
    for (size_t n = 1; n < sizeof want / sizeof want[0]; n++)
        CHECKF(rm_quorum_of(n) == want[n], "quorum of %zu is %zu, want %zu", n, rm_quorum_of(n), want[n]);
}

/* A semaphore's quorum keeps the permits held at once within its capacity
   on any number of servers, and is the least quorum that does. */
static void test_a_semaphore_quorum_never_lets_more_than_its_permits_hold(void)
{
    for (size_t n = 1; n <= REDMUTEX_SERVERS_MAX; n++) {
        CHECK(rm_sem_quorum_of(n, 1) == rm_quorum_of(n));
        for (int64_t k = 1; k <= 200; k++) {
            size_t q = rm_sem_quorum_of(n, k);
            CHECKF(q >= 1 && q <= n, "quorum %zu of %zu servers", q, n);
            /* Each of n servers grants at most k permits; each held permit
               needs q grants: at most floor(k * n / q) held. */
            CHECKF((int64_t)n * k / (int64_t)q <= k, "%zu servers, %lld permits, quorum %zu: %lld could hold", n,
                   (long long)k, q, (long long)((int64_t)n * k / (int64_t)q));
            /* One server fewer would let k + 1 hold. */
            CHECKF(q == 1 || (int64_t)n * k / (int64_t)(q - 1) > k, "quorum %zu of %zu for %lld is not the least", q, n,
                   (long long)k);
        }
    }
    CHECK(rm_sem_quorum_of(5, 2) == 4 && rm_sem_quorum_of(5, 3) == 4 && rm_sem_quorum_of(5, 5) == 5);
    CHECK(rm_sem_quorum_of(5, REDMUTEX_SEMAPHORE_PERMITS_MAX) == 5);
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

static void test_votes_keep_the_extremes(void)
{
    rm_votes v;
    rm_votes_init(&v);
    CHECK(v.ttl == -1 && v.granted_ttl == -1 && v.t.yes == 0 && v.t.error.code == 0);
    rm_votes_grant_figures(&v, 2, 7, -1);
    rm_votes_grant_figures(&v, 1, 9, 400);
    rm_votes_grant_figures(&v, 1, 3, 250);
    CHECK(v.count == 2 && v.fence == 9 && v.granted_ttl == 250);
    rm_votes_refused(&v, -1, false);
    CHECK(v.ttl == -1);
    rm_votes_refused(&v, 800, true);
    rm_votes_refused(&v, 300, false);
    CHECK(v.ttl == 300 && v.gone == 1);
    /* A young server's grant is part of the hold but no yes. */
    rm_votes_young(&v, 6);
    CHECK(v.young == 1 && v.t.yes_at[6] && v.t.yes == 0);
}

static rm_err error_of(int code, const char *msg)
{
    rm_err e = {0};
    rm_fail(&e, code, "%s", msg);
    return e;
}

static void test_a_tally_keeps_the_first_error_unless_a_later_one_decides(void)
{
    rm_tally t;
    rm_tally_init(&t);
    /* A lost connection is no error worth reporting; the first real one is kept. */
    rm_tally_unanswered(&t, 3, true, REDMUTEX_ECONN, "connection lost");
    CHECK(t.failed == 1 && t.errors == 0 && t.error.code == 0 && t.unknown_at[3]);
    rm_tally_unanswered(&t, 4, false, REDMUTEX_ETIMEDOUT, "timed out");
    rm_err e = error_of(REDMUTEX_EREPLICAS, "replicas");
    rm_tally_error(&t, 5, true, &e);
    CHECK(t.failed == 3 && t.errors == 1 && t.error.code == REDMUTEX_ETIMEDOUT &&
          strcmp(t.error.msg, "timed out") == 0);
    CHECK(!t.unknown_at[4] && t.unknown_at[5]);
    /* A wrong type decides by itself: it replaces what was kept, with its own message. */
    e = error_of(REDMUTEX_EWRONGTYPE, "wrong type on server 7");
    rm_tally_error(&t, 6, false, &e);
    CHECK(t.error.code == REDMUTEX_EWRONGTYPE && strcmp(t.error.msg, "wrong type on server 7") == 0);
    CHECK(t.wrongtype == 1 && t.errors == 2);
    /* ... and is not replaced by refused credentials, which rank below it... */
    e = error_of(REDMUTEX_EAUTH, "no permission");
    rm_tally_error(&t, 7, false, &e);
    CHECK(t.error.code == REDMUTEX_EWRONGTYPE && t.error_replied);
    /* ... though refused credentials replace any other error. */
    rm_tally t2;
    rm_tally_init(&t2);
    rm_tally_unanswered(&t2, 0, false, REDMUTEX_ETIMEDOUT, "timed out");
    CHECK(!t2.error_replied);
    rm_tally_error(&t2, 1, false, &e);
    CHECK(t2.error.code == REDMUTEX_EAUTH && t2.error_replied);
    e = error_of(REDMUTEX_EWRONGTYPE, "wrong type");
    rm_tally_error(&t2, 2, false, &e);
    CHECK(t2.error.code == REDMUTEX_EWRONGTYPE);
    rm_tally_yes(&t, 0);
    rm_tally_no(&t, 1);
    CHECK(t.yes == 1 && t.no == 1 && t.yes_at[0] && !t.yes_at[1]);
    CHECK(!rm_tally_decided(&t, 3, 2));
    rm_tally_yes(&t, 2);
    CHECK(rm_tally_decided(&t, 3, 2));
}

/* ---- the walk over a fan-out's replies (tally.c) ---------------------------- */

static rm_reply int_reply(long long v) { return (rm_reply){.type = RM_REPLY_INTEGER, .integer = v}; }

/* Reads integer replies: 1 yes, 0 no, anything else no vote. */
static rm_vote int_vote(void *ud, const rm_slot *s, size_t i, const rm_reply *r, rm_err *e, bool *unknown)
{
    (void)s;
    (*(int *)ud)++;
    if (r->type == RM_REPLY_INTEGER && (r->integer == 0 || r->integer == 1))
        return r->integer ? RM_VOTE_YES : RM_VOTE_NO;
    *unknown = true;
    (void)i;
    rm_fail(e, REDMUTEX_EPROTOCOL, "not 0 or 1");
    return RM_VOTE_ERROR;
}

static void test_the_walk_sorts_every_kind_of_answer(void)
{
    /* Six servers: yes, no, error reply, malformed, transport failure after
       sending, and one still running. */
    redmutex_client c;
    memset(&c, 0, sizeof c);
    rm_server servers[6];
    memset(servers, 0, sizeof servers);
    static char names[6][16];
    for (size_t i = 0; i < 6; i++) {
        snprintf(names[i], sizeof names[i], "server-%zu", i + 1);
        servers[i].ep.display = names[i];
    }
    c.pool.servers = servers;
    c.n = 6;
    c.quorum = 4;
    rm_call call;
    memset(&call, 0, sizeof call);
    call.c = &c;
    call.n = 6;
    rm_slot slots[6];
    memset(slots, 0, sizeof slots);
    for (size_t i = 0; i < 6; i++) {
        slots[i].replies = slots[i].small_replies;
        slots[i].n_replies = RM_REQ_MAX_CMDS;
    }
    call.slots = slots;
    rm_reply yes = int_reply(1), no = int_reply(0), bad = int_reply(7);
    char wrongtype[] = "WRONGTYPE Operation against a key holding the wrong kind of value";
    rm_reply err = {.type = RM_REPLY_ERROR, .str = wrongtype, .len = sizeof wrongtype - 1};
    rm_reply *replies[] = {&yes, &no, &err, &bad};
    for (size_t i = 0; i < 4; i++) {
        slots[i].status = RM_SLOT_DONE;
        slots[i].replies[0] = replies[i];
    }
    slots[4].status = RM_SLOT_DONE;
    slots[4].err = REDMUTEX_ECONN;
    slots[4].sent = true;
    snprintf(slots[4].msg, sizeof slots[4].msg, "server-5 closed the connection");
    slots[5].status = RM_SLOT_RUNNING;
    int read = 0;
    rm_tally t;
    rm_tally_init(&t);
    rm_tally_spec spec = {"release", "job", 0, false, int_vote, &read};
    rm_tally_call(&t, &call, &spec);
    CHECKF(read == 3, "the operation read %d replies, want 3 (not the error reply)", read);
    CHECK(t.yes == 1 && t.no == 1 && t.failed == 3 && t.errors == 2 && t.wrongtype == 1);
    CHECK(t.yes_at[0] && t.unknown_at[3] && t.unknown_at[4] && !t.unknown_at[2] && !t.unknown_at[5]);
    CHECKF(t.error.code == REDMUTEX_EWRONGTYPE && strstr(t.error.msg, "release 'job' on server-3"), "kept: %d %s",
           t.error.code, t.error.msg);
    /* The operation's own complaint is named after the operation, the lock and the server. */
    rm_tally t3;
    rm_tally_init(&t3);
    slots[2].replies[0] = &bad;
    rm_tally_call(&t3, &call, &spec);
    CHECKF(t3.error.code == REDMUTEX_EPROTOCOL && strcmp(t3.error.msg, "release 'job' on server-3: not 0 or 1") == 0,
           "kept: %s", t3.error.msg);
    slots[2].replies[0] = &err;
    /* Undecided: the kept error decides by itself, so it is the one reported. */
    rm_err e = {0};
    CHECK(rm_tally_fail(&e, &t, &call, "release", "job") == REDMUTEX_EWRONGTYPE);
    CHECK(strcmp(e.msg, t.error.msg) == 0);
    /* A server left out of the run counts as a no only where the operation says so. */
    slots[5].status = RM_SLOT_IDLE;
    slots[5].excluded = true;
    rm_tally_init(&t);
    spec.excluded_is_no = true;
    rm_tally_call(&t, &call, &spec);
    CHECK(t.no == 2);
}

/* Votes of n servers: y yes, o no, f failed with error code err (0: transport). */
static rm_votes tally(size_t y, size_t o, size_t f, int err)
{
    rm_votes v;
    rm_votes_init(&v);
    size_t i = 0;
    for (size_t k = 0; k < y; k++)
        rm_tally_yes(&v.t, i++);
    for (size_t k = 0; k < o; k++) {
        rm_votes_refused(&v, 100, false);
        rm_tally_no(&v.t, i++);
    }
    for (size_t k = 0; k < f; k++) {
        rm_err e = error_of(err, "error");
        if (err)
            rm_tally_error(&v.t, i++, false, &e);
        else
            rm_tally_unanswered(&v.t, i++, false, REDMUTEX_ECONN, "gone");
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
    rm_votes_refused(&v, -1, true);
    rm_votes_refused(&v, -1, true);
    rm_tally_no(&v.t, 0);
    rm_tally_no(&v.t, 1);
    rm_tally_yes(&v.t, 2);
    CHECK(rm_acquire_decide(&v, 3, 2, 100 * MS, true, 0) == RM_VERDICT_NESTED_LOST);
    CHECK(rm_acquire_decide(&v, 3, 2, 100 * MS, false, 0) == RM_VERDICT_BUSY);
    /* Two grants of which one from a server restarted too recently: busy, not won. */
    rm_votes_init(&v);
    rm_tally_yes(&v.t, 0);
    rm_votes_young(&v, 1);
    rm_tally_no(&v.t, 1);
    rm_votes_refused(&v, 50, false);
    rm_tally_no(&v.t, 2);
    CHECK(rm_acquire_decide(&v, 3, 2, 100 * MS, false, 0) == RM_VERDICT_BUSY);
}

int main(int argc, char **argv)
{
    static const rt_test tests[] = {
        {"a_majority_is_more_than_half", test_a_majority_is_more_than_half},
        {"a_semaphore_quorum_never_lets_more_than_its_permits_hold",
         test_a_semaphore_quorum_never_lets_more_than_its_permits_hold},
        {"a_question_is_settled_by_a_majority_or_by_too_many_noes",
         test_a_question_is_settled_by_a_majority_or_by_too_many_noes},
        {"validity_is_the_lease_less_time_spent_and_drift", test_validity_is_the_lease_less_time_spent_and_drift},
        {"a_restarted_server_counts_only_after_the_longest_lease",
         test_a_restarted_server_counts_only_after_the_longest_lease},
        {"the_qth_largest_is_what_a_majority_reaches", test_the_qth_largest_is_what_a_majority_reaches},
        {"votes_keep_the_extremes", test_votes_keep_the_extremes},
        {"a_tally_keeps_the_first_error_unless_a_later_one_decides",
         test_a_tally_keeps_the_first_error_unless_a_later_one_decides},
        {"the_walk_sorts_every_kind_of_answer", test_the_walk_sorts_every_kind_of_answer},
        {"an_attempt_is_decided_by_its_votes", test_an_attempt_is_decided_by_its_votes},
    };
    return rt_run(tests, sizeof tests / sizeof tests[0], argc, argv);
}
