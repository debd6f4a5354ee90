/*
 * Releases whose outcome on some server is unknown: sent, but unanswered
 * when the call ended (a deadline, a lost connection, a queue behind a busy
 * connection). Such a release may still run there later. If it did so after
 * the same owner took the lock again (a reentrant lock's field, a plain
 * lock's explicit owner value), it would delete or decrement the new hold on
 * that server, and the lock could go to two owners.
 *
 * Every release carries an unlock latch (redisson_unlock_latch:{NAME}:<id>)
 * that its script writes and that makes the same release a no-op once it
 * exists. So the next acquisition of the name sends the release again first,
 * in the same request and on the same connection: it runs now if it had not,
 * or finds its latch and changes nothing; and a late copy that arrives after
 * it finds the latch. The latches of such a release are not deleted early,
 * so this holds while they live (10 command timeouts from the release);
 * after that the release is forgotten. Per client, under c->mu.
 */
#ifndef REDMUTEX_UNSETTLED_H
#define REDMUTEX_UNSETTLED_H

#include "client.h"
#include "fanout.h"

/* Most unsettled releases one acquisition sends again (each is one command). */
#define RM_UNSETTLED_PER_REQ 2
/* Most arguments of a release command. */
#define RM_UNSETTLED_ARGS 12

typedef struct rm_unsettled_copy {
    uint64_t serial;
    int script;
    int argc;
    const char *argv[RM_UNSETTLED_ARGS];
    size_t lens[RM_UNSETTLED_ARGS];
    char *data;        /* the arguments, owned; the latch key last */
    const char *latch; /* that latch key, in data */
    /* SET <latch> 0 NX PX <ms>: a release that found nothing to release
       writes no latch, so the latch is written after it in any case. */
    const char *set_argv[6];
    char ms[24];
} rm_unsettled_copy;

/* The releases an acquisition sends first, and which entries they settle. */
typedef struct rm_unsettled_cmds {
    size_t n;
    rm_unsettled_copy copy[RM_UNSETTLED_PER_REQ];
} rm_unsettled_cmds;

/**
 * Records that the final release `release` of `name` (its unlock latch
 * latch_key), whose call started at started_ns and whose latch lives
 * latch_ms, may still run on the servers marked in unknown[]. Returns
 * whether it was recorded (then the caller must leave its latches to
 * expire); false when no server is unknown or memory ran out.
 */
bool rm_unsettled_note(redmutex_client *c, const char *name, const char *value, const rm_cmd *release,
                       const char *latch_key, int64_t started_ns, int64_t latch_ms, const bool *unknown);
/** Fills out with the releases of `value` (an owner's token or field) an
    acquisition of `name` by that owner, holding nothing yet, must send
    first, each followed by its latch write: two commands each (copies: free
    them with rm_unsettled_cmds_free). Releases of other owners cannot touch
    this owner's hold and are left alone. */
void rm_unsettled_take(redmutex_client *c, const char *name, const char *value, rm_unsettled_cmds *out);
void rm_unsettled_cmds_free(rm_unsettled_cmds *cmds);
/** After the acquisition's call: servers that answered copy k's latch
    write (reply index first + 2k + 1) are settled for it. */
void rm_unsettled_done(redmutex_client *c, const rm_unsettled_cmds *cmds, const rm_call *call, size_t first);
/** Frees the client's list (client teardown). */
void rm_unsettled_free(redmutex_client *c);

#endif
