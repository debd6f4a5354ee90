/*
 * The fan-out (fanout.c): one request to every server, replies collected
 * until decided.
 *
 * Layering: above the pool; below quorum, the kinds and everything that
 * talks to the servers.
 */
#ifndef REDMUTEX_FANOUT_H
#define REDMUTEX_FANOUT_H

#include "client.h"
#include "conn.h"
#include "resp.h"
#include "scripts.h"

/* ---- fan-out (fanout.c) ------------------------------------------- */

#define RM_REQ_MAX_CMDS 8

/** The same request is sent to every server of the client. */
typedef struct rm_req {
    size_t ncmds;
    rm_cmd cmds[RM_REQ_MAX_CMDS];
    /* The lock name whose commands must run in issue order on each server
       (acquire, release, extend: anything that writes it); NULL for requests
       whose order does not matter (renewals, queries). */
    const char *order_name;
    /* The name whose hash slot routes the request on a cluster when it has
       no order_name (queries); every key of a request is in that slot. NULL
       and no order_name: a request without keys (any node). */
    const char *route_name;
    /* More than RM_REQ_MAX_CMDS commands (a renewal batch of many slots):
       cmds[] is unused and these are the ncmds commands. */
    const rm_cmd *many;
} rm_req;

/** Command k of a request. */
static inline const rm_cmd *rm_req_cmd(const rm_req *req, size_t k)
{
    return req->many ? &req->many[k] : &req->cmds[k];
}

enum rm_slot_status { RM_SLOT_IDLE, RM_SLOT_RUNNING, RM_SLOT_DONE };

typedef struct rm_slot {
    rm_conn *conn;
    int status;
    int err;            /* 0, or the error code for this server */
    char msg[256];      /* this server's error message */
    bool want_info;     /* handshake asks INFO server (N > 1) */
    size_t handshake_n; /* handshake replies expected */
    size_t skip;        /* replies to skip before the handshake (owed + later) */
    size_t got;         /* replies read in this run */
    size_t total;       /* replies expected in this run */
    bool noscript;      /* a script reply said NOSCRIPT: resend with EVAL */
    bool used_eval;
    bool broken;         /* transport failed: the connection was closed */
    bool handshaking;    /* a fresh connection's handshake is out; the request follows its replies */
    bool sent;           /* bytes of the request went out: it may have run */
    bool not_waited;     /* the outcome was decided before this server answered */
    bool owing;          /* left unanswered: its connection went back to the pool owing the reply */
    bool stalled;        /* not sent, or unanswered in time: the server stalls (rm_server_stalls) */
    bool excluded;       /* not part of this run (rm_call.only) */
    int64_t deadline_ns; /* this slot's deadline (longer while connecting) */
    int64_t busy_since;  /* waiting for a lent connection: that one's last progress */
    rm_reply **replies;  /* one per command: small_replies, or allocated for a long request */
    rm_reply *small_replies[RM_REQ_MAX_CMDS];
    size_t n_replies; /* room in replies */
    /* Deployments and clusters: the deployment this slot talks to (its
       index; slot i is deployment i unless the caller made the call with
       rm_call_begin_targets), a node fixed by the caller (a renewal batch
       of that node) and its own request, or NULL. */
    size_t dep;
    rm_server *fixed_node;
    bool ask_fixed; /* with fixed_node: every command goes behind ASKING (a renewal following ASK) */
    const rm_req *req;
    int keyslot;      /* the request's hash slot on a cluster, -1: none */
    rm_server *node;  /* where this run's request goes (chosen when it starts) */
    int redirects;    /* MOVED and ASK followed in this run */
    int retries;      /* TRYAGAIN, CLUSTERDOWN... retried in this run */
    bool asking;      /* ASK: each command goes behind ASKING */
    int reroutes;     /* seeds or nodes tried after a connection failed before sending */
    int64_t retry_at; /* waiting to retry (TRYAGAIN, CLUSTERDOWN...) until then */
    int wait_need;    /* the replica count RM_ARG_REPLICAS becomes for this slot's node */
    bool role_probe;  /* a ROLE rides behind the request (deploy.h, rm_deploy_wants_role) */
    /* Statistics (stats.c): when the request went out (after a new
       connection's handshake) and when its last reply came, or that the
       deadline ended it. */
    int64_t req_ns, done_ns;
    bool timed_out;
} rm_slot;

typedef struct rm_call rm_call;
/** Early completion: return true when the outcome no longer depends on the servers still running. */
typedef bool (*rm_decided_fn)(rm_call *call, void *ud);

#define RM_INLINE_SLOTS 5

struct rm_call {
    redmutex_client *c;
    size_t n;
    rm_slot *slots;
    int64_t started_ns;   /* when the last run's requests started going out */
    bool strict_deadline; /* new connections get no connect_timeout beyond the deadline */
    const bool *only;     /* when set, servers i with only[i] false are left out of the run */
    /* Releases: even once decided, a run goes on (to the deadline at most)
       until the request has been sent to every server it is for, so that a
       server whose ordering connection is busy still gets it, in order. */
    bool must_send;
    uint64_t order_key; /* the last run's rm_order_key(req->order_name), 0 if none */
    /* Set by the caller for a request that touches many locks without
       writing them (a renewal batch): a connection left owing replies is
       ordered for each of these keys too, so a later release of one of the
       locks runs after the renewal on that server, never before it. */
    const uint64_t *order_keys;
    size_t n_order_keys;
    /* Set by the caller: the owner (token or field) whose hold the call's
       requests change, if any. Of several connections that owe for the
       name, a request that cannot wait for them is queued behind those
       carrying this owner's earlier requests (rm_pool_defer). */
    const char *order_owner;
    uint64_t owner_key; /* the last run's rm_owner_key(order_name, order_owner), 0 if none */
    bool *pending;      /* rm_call_run's: slots waiting to start (a busy connection, a retry's pause) */
    /* Last: a call clears only the fields above and the slots it uses. */
    rm_slot inline_slots[RM_INLINE_SLOTS];
};

int rm_call_begin(rm_err *err, rm_call *call, redmutex_client *c);
/**
 * A call with n targets instead of one per deployment: the caller sets each
 * slot's dep, fixed_node and req (a renewal batch per cluster node). 0 or
 * REDMUTEX_ENOMEM.
 */
int rm_call_begin_targets(rm_err *err, rm_call *call, redmutex_client *c, size_t n);
/**
 * Sends req to every server and collects replies until all answered, the
 * deadline passed, or decided() says the result is known. Per-server
 * outcome in call->slots[i].err / replies[]. Returns 0, or an error code
 * only for failures that are not per server (ENOMEM).
 */
int rm_call_run(rm_call *call, const rm_req *req, int64_t deadline_ns, rm_decided_fn decided, void *ud);
/** Frees the replies of the last run (done before each run and at end). */
void rm_call_clear(rm_call *call);
void rm_call_end(rm_call *call);
/**
 * How many slots are still running on a server that stalls
 * (rm_server_stalls). Such a server answers no sooner than its stall ends;
 * a call whose other answers already settle a majority need not wait for it.
 */
size_t rm_call_stalled(const rm_call *call);
/**
 * An rm_decided_fn for a request every server should answer but no server
 * is worth waiting for once it stalls (a renewal, an extend): decided when
 * each server still to answer stalls (rm_server_stalls). Such a server
 * answers no sooner than its stall ends, and a caller who holds the lock
 * meanwhile keeps it from the others (a release waits for the renewal in
 * flight). ud is unused.
 */
bool rm_call_only_stalls_left(rm_call *call, void *ud);
/* ---- one slot's I/O (slot.c), for fanout.c ------------------------------ */

/** Frees s's replies. */
void rm_slot_clear(rm_slot *s);
/** Ends s with an error (its connection is kept). */
void rm_slot_fail(rm_slot *s, int code, const char *msg);
/** A transport failure: ends s and closes its connection. */
void rm_slot_break(rm_slot *s, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/** Puts a fresh connection's handshake in its output. */
void rm_slot_handshake(rm_slot *s);
/** Puts the request in the connection's output (behind what it owes). 0 or REDMUTEX_ENOMEM. */
int rm_slot_request(rm_slot *s, const rm_req *req, bool eval);
/** Sends what it can without blocking (connecting first). */
void rm_slot_write(rm_slot *s);
/** Reads the replies that arrived and acts on them once all are in. */
void rm_slot_read(rm_call *call, rm_slot *s, const rm_req *req);
/** (fanout.c) Takes s's connection and sends; false while the connection it must follow is lent out. */
bool rm_slot_start(rm_call *call, rm_slot *s, const rm_req *req, int64_t connect_deadline);

/* ---- cluster redirects (redirect.c) ----------------------------------- */

enum { RM_REDIRECT_NONE, RM_REDIRECT_NOW, RM_REDIRECT_LATER, RM_REDIRECT_FAIL };
/** At most this many MOVED/ASK per target and run (then the redirect loop is the error). */
#define RM_REDIRECTS_MAX 5

/**
 * Routes slot s of a cluster deployment: checks that the request's name
 * can be used on a cluster (every key of the lock in one slot) and sets
 * s->keyslot and s->node. 0, or an error code (EINVAL for such a name,
 * ECONN when no master owns the slot).
 */
int rm_redirect_route(rm_err *err, rm_call *call, rm_slot *s, const rm_req *req);
/**
 * Reads s's replies for a cluster's redirect or retry: MOVED (the map is
 * corrected, s->node is the new owner), ASK (s->node the node to ask,
 * s->asking), TRYAGAIN, CLUSTERDOWN, MASTERDOWN, LOADING (s->retry_at, after
 * a short pause within the deadline). RM_REDIRECT_NONE when there is none;
 * RM_REDIRECT_FAIL with s->err and s->msg set when it cannot be followed (too
 * many redirects, no time left). The replies are left to the caller.
 */
int rm_redirect_read(rm_call *call, rm_slot *s, const rm_req *req);

/** Whether server i's request went out but its reply did not arrive: it may have run. */
static inline bool rm_slot_unknown(const rm_slot *s) { return s->err != 0 && s->sent && !s->excluded; }

#endif
