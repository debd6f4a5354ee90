/*
 * Counting one request's replies (tally.c): the one walk over a fan-out's
 * answers that every operation uses. The walk sorts each server's answer
 * into a tally (quorum.h): no answer, an error reply (with its message), or
 * the operation's own reading of the reply.
 *
 * Layering: with quorum, above the fan-out; below the kinds and the lock
 * operations.
 */
#ifndef REDMUTEX_TALLY_H
#define REDMUTEX_TALLY_H

#include "fanout.h"
#include "quorum.h"

typedef enum rm_vote {
    RM_VOTE_YES,   /* the answer the operation asks a majority for */
    RM_VOTE_NO,    /* the other answer */
    RM_VOTE_ERROR, /* no vote: *e says why (malformed, replicas missing, ...) */
    RM_VOTE_NONE   /* not counted at all */
} rm_vote;

/** How one operation reads server i's reply r (never an error reply: the walk reports
    those). For RM_VOTE_ERROR it fills e with the code and what is wrong ("a reply of the
    wrong type"): the walk names the operation, the lock and the server in front of it.
    It sets *unknown when the request may have changed something there. */
typedef rm_vote (*rm_vote_fn)(void *ud, const rm_slot *s, size_t i, const rm_reply *r, rm_err *e, bool *unknown);

typedef struct rm_tally_spec {
    const char *what;    /* the operation, for messages ("release") */
    const char *name;    /* the lock's name, for messages */
    size_t reply;        /* which of a server's replies holds the vote */
    bool excluded_is_no; /* a server left out of the run counts as a no (it was never asked) */
    rm_vote_fn vote;
    void *ud;
} rm_tally_spec;

/**
 * Counts into t (which the caller initialised) the answer of every server
 * whose part of the call is done; servers still running are left out, so
 * the walk also serves a fan-out's early decision.
 */
void rm_tally_call(rm_tally *t, const rm_call *call, const rm_tally_spec *spec);

/** How many slots were not sent, or not answered in time, because their server stalls (also counted by rm_call_failed).
 */
size_t rm_call_skipped(const rm_call *call);
/** How many slots are still running. */
size_t rm_call_running(const rm_call *call);
/** How many slots finished without a transport error. */
size_t rm_call_answered(const rm_call *call);
/** Slots that failed for real (not excluded, not merely left unwaited-for). */
size_t rm_call_failed(const rm_call *call);
/** Fails with the most telling per-server transport error of the call (no majority answered). */
int rm_call_fail(rm_err *err, const rm_call *call, const char *what, const char *name);

/**
 * The error of an operation the tally did not settle: the error a server
 * answered with when it decides by itself, when no server gave a yes or no,
 * or when at least as many servers answered with an error as failed to
 * answer; else the most telling transport failure (rm_call_fail). Returns
 * the code.
 */
int rm_tally_fail(rm_err *err, const rm_tally *t, const rm_call *call, const char *what, const char *name);

#endif
