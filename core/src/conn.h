/*
 * One connection to one server (conn.c), and the server it belongs to.
 *
 * Layering: above url, resp and scripts; below the pool (client.c), the
 * fan-out and the subscriber.
 */
#ifndef REDMUTEX_CONN_H
#define REDMUTEX_CONN_H

#include "internal.h"
#include "resp.h"
#include "url.h"

/* ---- connections (conn.c) ------------------------------------------- */

struct rm_server;

typedef struct rm_conn {
    int fd;
    bool connecting; /* not yet usable: connect() or the TLS handshake in progress */
    bool fresh;      /* handshake not yet sent */
    pid_t pid;       /* process that made it */
    rm_reader *reader;
    struct rm_server *srv;
    size_t owed;  /* replies to requests abandoned at a deadline, to be skipped */
    rm_buf out;   /* bytes of the current request not yet sent (kept allocated) */
    rm_buf later; /* fire-and-forget commands sent before the next request */
    size_t later_count;
    bool flush_later;    /* `later` holds a deferred release: sent as soon as the connection is free */
    uint64_t generation; /* server generation (run_id epoch) when connected */
    /* Per-server order (see client.c, the pool): hashes of the lock names
       whose requests on this connection still owe replies. A later request
       for one of them must travel on this connection, behind them. */
    uint64_t *order_keys;
    size_t n_order_keys, cap_order_keys;
    bool lent; /* an owing connection taken out by a call */
    /* The last time this connection showed its server at work: a request
       sent when no reply was owed, or a reply read. One that owes replies
       and has shown nothing for a command timeout is on a server that
       stalls (rm_server_stalls). Written by the thread that has the
       connection, read by others under the client mutex. */
    _Atomic int64_t progress_ns;
    /* Transport state kept by conn.c and tls.c only. */
    void *tls;             /* OpenSSL SSL*, NULL for a plain connection */
    bool tls_handshaking;  /* connect() is done, the TLS handshake is not */
    short tls_want;        /* poll events the pending handshake step waits for */
    bool write_wants_read; /* TLS: the last write waits for the socket to be readable */
    bool read_wants_write; /* TLS: the last read waits for the socket to be writable */
    bool received;         /* a byte has arrived (tells "refused TLS" from "closed") */
    char run_id[48];       /* what the handshake's INFO reported, for the pool to record ("" once taken) */
    /* A handshake that also asked what the deployment is (srv->ask_topology):
       INFO cluster's cluster_enabled (1, 0; -1 not asked) and the CLUSTER
       SLOTS reply, kept for the deployment (deploy.c) to read and free. */
    bool topo_asked;
    int cluster_enabled;
    rm_reply *topo;        /* CLUSTER SLOTS */
    rm_reply *topo_shards; /* CLUSTER SHARDS (7.0+; NULL on 6.x, which answers with an error) */
    int major;             /* redis_version's major number from INFO server (0: not known) */
} rm_conn;

typedef struct rm_server {
    struct redmutex_client *client;
    int index;
    rm_endpoint ep;
    /* Idle connection pool; guarded by client->mu. */
    rm_conn **idle;
    size_t n_idle;
    size_t cap_idle;
    /* Connections that still owe replies, lent or not (guarded by client->mu). */
    rm_conn **owing;
    size_t n_owing;
    size_t cap_owing;
    /* The server's run_id as last seen, and a counter bumped whenever it changes. */
    char run_id[48];
    uint64_t generation;
    /* When this client saw the server come back with a new run_id (0:
       never). Until the longest lease has passed since then, its grants are
       no votes: a holder of its previous life may still hold elsewhere. */
    _Atomic int64_t restart_seen_ns;
    _Atomic bool duplicate; /* read by callers without the client mutex */
    /* The last reply read from the server on any connection, and the last
       time one of its connections was seen stalling (fanout.c): from then
       until its next reply the server counts as stalling. */
    _Atomic int64_t answered_ns;
    _Atomic int64_t stall_seen_ns;
    struct rm_tls *tls; /* rediss:// servers: the TLS settings (tls.c), else NULL */
    /* Deployments (deploy.c): c->pool.servers[i] is deployment i, reached at its
       seeds; a cluster's nodes are more rm_servers of the same deployment
       (index i, node true, their TLS settings the deployment's). */
    struct rm_deploy *dep;
    bool node;
    _Atomic int seed;          /* the seed a new connection goes to (a multi-host URL) */
    _Atomic bool ask_topology; /* a new connection's handshake asks what the deployment is */
    int major;                 /* redis_version's major number, 0 until known */
    /* The replicas in service this server had when its deployment's
       topology was last read (-1: not known; a Sentinel deployment's master:
       the online replicas its last ROLE listed, at each new connection's
       handshake and each probe of the watcher), and the replicas it said it
       has online at its last ROLE riding behind a request (-1: not asked).
       A WAIT asks no more of it than the larger (deploy.h,
       rm_deploy_wait_need). */
    _Atomic int replicas;
    _Atomic int role_replicas;
    /* A master found through sentinels (sentinel.c): every new connection's
       handshake asks ROLE, and a node that is no master gets no request. */
    bool check_role;
    /* A cluster node: when a request to it last went unanswered or its
       connection failed (0: never). A refresh asks such nodes last. */
    _Atomic int64_t failed_ns;
    struct rm_stats_server *stats; /* stats.c: this server's counts, by its address (NULL: not counted) */
} rm_server;

/** Records a reply read from c: its server answers (conn->progress_ns, srv->answered_ns). */
static inline void rm_conn_answered(rm_conn *c)
{
    int64_t now = rm_now_ns();
    atomic_store_explicit(&c->progress_ns, now, memory_order_relaxed);
    atomic_store_explicit(&c->srv->answered_ns, now, memory_order_relaxed);
}

/** Reads, without blocking, what a connection owes and drops it. -1 if the connection is broken. */
int rm_conn_drain(rm_conn *c);
/** Whether the connection owes replies to requests for the lock name hashed to key. */
bool rm_conn_owes_for(const rm_conn *c, uint64_t key);
/** Records that the connection owes replies to a request for key. 0 or -1 (no memory). */
int rm_conn_add_order_key(rm_conn *c, uint64_t key);
/** The hash that orders requests of one lock name on a server (never 0). */
uint64_t rm_order_key(const char *name);
/**
 * The hash of one owner's requests for one lock name (never 0, and apart
 * from every rm_order_key): a connection owing for it carries requests of
 * that owner that change its hold (see rm_pool_defer).
 */
uint64_t rm_owner_key(const char *name, const char *value);
/** Starts a non-blocking connection. 0 or an error code (message set). */
int rm_conn_open(rm_err *err, rm_conn **out, struct rm_server *srv);
/** rm_conn_open to seed number `seed` of a multi-host URL (0: the first). */
int rm_conn_open_seed(rm_err *err, rm_conn **out, struct rm_server *srv, int seed);
void rm_conn_close(rm_conn *c);
/** Connected, ready to use and nothing unexpected waiting on the socket. */
bool rm_conn_looks_healthy(rm_conn *c);
/** Appends the AUTH/SELECT handshake (and INFO server when asked; with it,
    INFO cluster and CLUSTER SLOTS when the server's ask_topology is set) to
    b; returns the count. */
size_t rm_conn_handshake(rm_conn *c, rm_buf *b, bool want_info);
/**
 * Interprets handshake reply *r, number i of n. 0 or an error code with
 * message. The run_id of INFO server (want_info) is left in c->run_id for
 * the caller to record with its pool (rm_server_note_run_id), the topology
 * replies in c->cluster_enabled and c->topo (the reply is taken: *r becomes
 * NULL): a connection knows nothing of the client above it.
 */
int rm_conn_check_handshake(rm_err *err, rm_conn *c, size_t i, size_t n, bool want_info, rm_reply **r);
/** Waits for fd events until deadline; EINTR is retried. Returns poll()'s result. */
int rm_poll_fd(int fd, short events, int64_t deadline_ns);

/*
 * Transport I/O. Every byte to and from a server goes through these, so a
 * connection is plain or TLS in one place only. They never block and never
 * raise SIGPIPE. Poll a connection for rm_conn_events() before calling them
 * again after they reported "not ready".
 */
/** Drives connect() and the TLS handshake on: 0 usable, 1 not ready yet, or an error code (message set). */
int rm_conn_establish(rm_err *err, rm_conn *c);
/** Sends up to len bytes: the count sent, 0 when not ready, or an error code (message set). */
ssize_t rm_conn_send(rm_err *err, rm_conn *c, const void *data, size_t len);
/**
 * Receives up to len bytes: the count, 0 when nothing is ready, or an error
 * code (message set; a closed connection is REDMUTEX_ECONN). A count below
 * len means nothing more is buffered inside the connection: poll before
 * reading again.
 */
ssize_t rm_conn_recv(rm_err *err, rm_conn *c, void *buf, size_t len);
/** The poll events to wait for; have_output when bytes wait to be sent. */
short rm_conn_events(const rm_conn *c, bool have_output);
/** While not usable: the pending step, for messages ("while connecting", ...); NULL once usable. */
const char *rm_conn_pending_step(const rm_conn *c);

/* Most fire-and-forget commands a connection keeps for its next request. */
#define RM_LATER_MAX 64
/**
 * Queues a fire-and-forget command (a latch's DEL) that goes out in front
 * of the connection's next request; its reply is skipped. False when the
 * queue is full or memory ran out: the command is dropped.
 */
bool rm_conn_queue_later(rm_conn *c, int argc, const char *const *argv);
/** Sends what it can of c's queued `later` bytes without blocking; once all
    are out, their replies are owed. 0, or an error code (message set). */
int rm_conn_flush_later(rm_err *err, rm_conn *c);
/** Records that a wait for c's answer starts now (conn->progress_ns). */
static inline void rm_conn_progress(rm_conn *c)
{
    atomic_store_explicit(&c->progress_ns, rm_now_ns(), memory_order_relaxed);
}

#endif
