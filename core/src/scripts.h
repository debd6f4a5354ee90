/*
 * Every Lua script by id (scripts.c; each kind keeps its own text, kind.h).
 */
#ifndef REDMUTEX_SCRIPTS_H
#define REDMUTEX_SCRIPTS_H

#include "internal.h"
#include "resp.h"

/* ---- scripts (scripts.c) ------------------------------------------- */

enum rm_script_id {
    RM_SCRIPT_LOCK_ACQUIRE, /* plain lock acquire with fencing / ttl */
    RM_SCRIPT_LOCK_RELEASE,
    RM_SCRIPT_LOCK_EXTEND,
    RM_SCRIPT_RLOCK_ACQUIRE,
    RM_SCRIPT_RLOCK_RELEASE,
    RM_SCRIPT_RLOCK_EXTEND,
    RM_SCRIPT_FORCE_RELEASE,
    RM_SCRIPT_INSPECT,
    RM_SCRIPT_RENEW,
    RM_SCRIPT_FENCE_RATCHET,
    RM_SCRIPT_NEST_UNDO, /* a failed nested acquisition taken back (lua.h) */
    /* kinds of the operations table (kind.h) */
    RM_SCRIPT_FAIR_ACQUIRE,
    RM_SCRIPT_FAIR_RELEASE,
    RM_SCRIPT_FAIR_LEAVE,
    RM_SCRIPT_FAIR_FORCE,
    RM_SCRIPT_READ_ACQUIRE,
    RM_SCRIPT_READ_RELEASE,
    RM_SCRIPT_READ_EXTEND,
    RM_SCRIPT_WRITE_ACQUIRE,
    RM_SCRIPT_WRITE_RELEASE,
    RM_SCRIPT_RW_FORCE,
    RM_SCRIPT_RW_INSPECT,
    RM_SCRIPT_SEM_ACQUIRE, /* semaphores (kind_sem.c) */
    RM_SCRIPT_SEM_RELEASE,
    RM_SCRIPT_SEM_EXTEND,
    RM_SCRIPT_SEM_INSPECT,
    RM_SCRIPT_SEM_INFO,
    RM_SCRIPT_SEM_FORCE,
    RM_SCRIPT_LATCH_TRY_SET, /* count-down latches (latch.c) */
    RM_SCRIPT_LATCH_COUNT_DOWN,
    RM_SCRIPT_LATCH_DELETE,
    RM_SCRIPT_LOCK_INFO, /* redmutex_lock_inspect: any kind (query.c reads its reply) */
    RM_SCRIPT_COUNT
};

/* The count-down latch's scripts (latch.c; the kinds' are declared in kind.h). */
extern const char rm_lua_latch_try_set[];
extern const char rm_lua_latch_count_down[];
extern const char rm_lua_latch_delete[];

const char *rm_script_text(int id);
const char *rm_script_sha(int id);

/** One command of a request. Script commands go out as EVALSHA, EVAL on NOSCRIPT. */
typedef struct rm_cmd {
    int script; /* an rm_script id, or -1 for a plain command */
    int argc;
    const char **argv;
    size_t *lens;
} rm_cmd;

/*
 * An argument that stands for the command a script publishes a release
 * with: each deployment's own ("spublish" on a 7.0+ cluster, "publish"
 * otherwise, as Redisson's sharded subscription mode AUTO does), put in
 * when the request is formatted for it. Compared by address.
 */
extern const char rm_arg_publish[];
#define RM_ARG_PUBLISH rm_arg_publish

/*
 * An argument that stands for the replica count a WAIT asks for on the
 * node it is sent to: min(min_replicas, the replicas that node is known to
 * have), put in when the request is formatted for it (the watchdog's
 * renewals: deploy.h, rm_deploy_wait_need). Compared by address.
 */
extern const char rm_arg_replicas[];
#define RM_ARG_REPLICAS rm_arg_replicas

/**
 * Appends cmd in RESP to b: a plain command as it is, a script command as
 * EVALSHA <sha> ..., or EVAL <text> ... when eval (after NOSCRIPT); an
 * argument RM_ARG_PUBLISH becomes `publish` (NULL: "publish"), one
 * RM_ARG_REPLICAS becomes `replicas` (NULL: "0"). 0 or REDMUTEX_ENOMEM.
 */
int rm_cmd_format(rm_buf *b, const rm_cmd *cmd, bool eval, const char *publish, const char *replicas);

#endif
