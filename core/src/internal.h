/*
 * Internal declarations shared by the files of the core. Nothing here is
 * part of the ABI; every non-static function is hidden by -fvisibility and
 * the version script, and prefixed rm_ so it cannot clash in a static link.
 */
#ifndef REDMUTEX_INTERNAL_H
#define REDMUTEX_INTERNAL_H

#include "redmutex.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define RM_HIDDEN __attribute__((visibility("hidden")))

#define RM_NS_PER_MS INT64_C(1000000)

/* ---- time.c / misc --------------------------------------------------- */

/** CLOCK_MONOTONIC in nanoseconds. */
int64_t rm_now_ns(void);
/** now + ms, saturating; ms < 0 means "no deadline" and gives INT64_MAX. */
int64_t rm_deadline_after_ms(int64_t ms);
/** Milliseconds from now until deadline, rounded up, >= 0; INT64_MAX stays "forever". */
int64_t rm_ms_until(int64_t deadline_ns);
/** Joins thread if it ends by deadline_ns (at least ~10 ms allowed); false if not. */
bool rm_join_until(pthread_t thread, int64_t deadline_ns);
/** The OS thread id of the caller (cached per thread, renewed in a forked child). */
long rm_thread_id(void);
/** getpid() without a system call: refreshed in a forked child by an atfork handler. */
pid_t rm_pid(void);
/** Writes v in decimal plus NUL into out; returns out. */
char *rm_i64_str(char out[24], int64_t v);
/** Fills buf with n cryptographically random bytes (getrandom). 0 or -1. */
int rm_random_bytes(void *buf, size_t n);
/** A uniformly random integer in [0, bound) from rm_random_bytes (bound > 0). */
uint64_t rm_random_below(uint64_t bound);
/** Writes 2*n lowercase hex digits of in[] plus NUL into out. */
void rm_hex(char *out, const unsigned char *in, size_t n);
/** SHA-1 of data as 40 hex digits + NUL (for EVALSHA). */
void rm_sha1_hex(char out[41], const void *data, size_t len);

/* ---- versioned options (options.c) --------------------------------- */

/** The byte size of an options struct up to and including `field`. */
#define RM_OPTIONS_END(type, field) (offsetof(type, field) + sizeof(((type *)0)->field))

typedef struct rm_options_layout {
    const char *what;     /* "client options" */
    const char *init_fn;  /* "redmutex_client_options_init" */
    const void *defaults; /* a struct of the current version with the defaults */
    const size_t *sizes;  /* sizes[v]: the struct's size in version v; sizes[0] unused */
    size_t n_sizes;       /* current version + 1 */
} rm_options_layout;

/** *_options_init(): writes the defaults of `version` (only its bytes) and the version. */
int rm_options_init(void *opts, unsigned int version, const rm_options_layout *layout);
/**
 * Copies caller options of any known version into `out` (a struct of the
 * current version): defaults first, then the caller's bytes of its version.
 * opts NULL gives the defaults. REDMUTEX_EINVAL for an unknown version.
 */
int rm_options_load(void *out, const void *opts, const rm_options_layout *layout, const char *fn);

/* ---- error.c ------------------------------------------------------- */

/** Sets the thread's last error to code + formatted message; returns code. */
int rm_fail(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/** Like rm_fail with a va_list. */
int rm_vfail(int code, const char *fmt, va_list ap) __attribute__((format(printf, 2, 0)));
/** Keeps the message already set and returns code (for propagation). */
int rm_keep(int code);

/* ---- buffers ------------------------------------------------------- */

typedef struct rm_buf {
    char *data;
    size_t len;
    size_t cap;
} rm_buf;

int rm_buf_reserve(rm_buf *b, size_t extra);
int rm_buf_append(rm_buf *b, const void *data, size_t len);
void rm_buf_consume(rm_buf *b, size_t n);
void rm_buf_free(rm_buf *b);

/* ---- RESP (resp.c) --------------------------------------------------- */

enum rm_reply_type {
    RM_REPLY_STRING = 1,
    RM_REPLY_ARRAY,
    RM_REPLY_INTEGER,
    RM_REPLY_NIL,
    RM_REPLY_STATUS,
    RM_REPLY_ERROR,
    RM_REPLY_OTHER /* RESP3 types a RESP2 server never sends */
};

typedef struct rm_reply {
    int type;
    long long integer;
    size_t len;
    char *str;
    size_t elements;
    struct rm_reply **element;
} rm_reply;

void rm_reply_free(rm_reply *r);

/** A RESP parser (hiredis's redisReader making rm_reply objects). */
typedef struct rm_reader rm_reader;
rm_reader *rm_reader_new(void);
void rm_reader_free(rm_reader *r);
/** 0, or -1 (protocol error; message in errbuf). */
int rm_reader_feed(rm_reader *r, const char *data, size_t len, char *errbuf, size_t errlen);
/** 1 with *out set, 0 when more data is needed, -1 on a protocol error. */
int rm_reader_next(rm_reader *r, rm_reply **out, char *errbuf, size_t errlen);

/** Bytes received but not yet parsed into replies. */
size_t rm_reader_pending(const rm_reader *r);
/** Appends one command in RESP (array of bulk strings). */
int rm_format_command(rm_buf *b, int argc, const char *const *argv, const size_t *lens);

/* ---- URLs and servers (url.c) ---------------------------------------- */

typedef struct rm_endpoint {
    bool is_unix;
    char *host; /* TCP host (no brackets) */
    int port;
    char *path; /* Unix socket path */
    char *user;     /* NULL when absent */
    char *password; /* NULL when absent */
    int db;
    char *display; /* the URL with the password masked, for messages */
    /* rediss:// only: the URL's query options (NULL / -1 when absent, so
       client options can supply the default). */
    bool tls;
    char *tls_ca_file;     /* ssl_ca_certs */
    char *tls_cert_file;   /* ssl_certfile */
    char *tls_key_file;    /* ssl_keyfile */
    char *tls_server_name; /* ssl_server_hostname */
    int tls_verify;        /* ssl_cert_reqs: 1 required, 0 none, -1 absent */
    int tls_check_hostname; /* ssl_check_hostname: 1, 0, -1 absent */
} rm_endpoint;

/** Parses url into ep (zeroed first). REDMUTEX_EINVAL with a message on bad input. */
int rm_endpoint_parse(rm_endpoint *ep, const char *url);
void rm_endpoint_clear(rm_endpoint *ep);

/* ---- connections (conn.c) ------------------------------------------- */

struct rm_server;

typedef struct rm_conn {
    int fd;
    bool connecting;  /* not yet usable: connect() or the TLS handshake in progress */
    bool fresh;       /* handshake not yet sent */
    pid_t pid;        /* process that made it */
    rm_reader *reader;
    struct rm_server *srv;
    size_t owed;      /* replies to requests abandoned at a deadline, to be skipped */
    rm_buf out;       /* bytes of the current request not yet sent (kept allocated) */
    rm_buf later;     /* fire-and-forget commands sent before the next request */
    size_t later_count;
    bool flush_later; /* `later` holds a deferred release: sent as soon as the connection is free */
    uint64_t generation; /* server generation (run_id epoch) when connected */
    /* Per-server order (see client.c, the pool): hashes of the lock names
       whose requests on this connection still owe replies. A later request
       for one of them must travel on this connection, behind them. */
    uint64_t *order_keys;
    size_t n_order_keys, cap_order_keys;
    bool lent;        /* an owing connection taken out by a call */
    /* Transport state kept by conn.c and tls.c only. */
    void *tls;           /* OpenSSL SSL*, NULL for a plain connection */
    bool tls_handshaking; /* connect() is done, the TLS handshake is not */
    short tls_want;      /* poll events the pending handshake step waits for */
    bool write_wants_read; /* TLS: the last write waits for the socket to be readable */
    bool read_wants_write; /* TLS: the last read waits for the socket to be writable */
    bool received;       /* a byte has arrived (tells "refused TLS" from "closed") */
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
    struct rm_tls *tls; /* rediss:// servers: the TLS settings (tls.c), else NULL */
} rm_server;

/** Reads, without blocking, what a connection owes and drops it. -1 if the connection is broken. */
int rm_conn_drain(rm_conn *c);
/** Whether the connection owes replies to requests for the lock name hashed to key. */
bool rm_conn_owes_for(const rm_conn *c, uint64_t key);
/** Records that the connection owes replies to a request for key. 0 or -1 (no memory). */
int rm_conn_add_order_key(rm_conn *c, uint64_t key);
/** The hash that orders requests of one lock name on a server (never 0). */
uint64_t rm_order_key(const char *name);
/** Starts a non-blocking connection. 0 or an error code (message set). */
int rm_conn_open(rm_conn **out, struct rm_server *srv);
void rm_conn_close(rm_conn *c);
/** Connected, ready to use and nothing unexpected waiting on the socket. */
bool rm_conn_looks_healthy(rm_conn *c);
/** Appends the AUTH/SELECT handshake (and INFO server when asked) to b; returns the count. */
size_t rm_conn_handshake(rm_conn *c, rm_buf *b, bool want_info);
/** Interprets handshake reply i of n. 0 or an error code with message. */
int rm_conn_check_handshake(rm_conn *c, size_t i, size_t n, bool want_info, rm_reply *r);
/** Waits for fd events until deadline; EINTR is retried. Returns poll()'s result. */
int rm_poll_fd(int fd, short events, int64_t deadline_ns);

/*
 * Transport I/O. Every byte to and from a server goes through these, so a
 * connection is plain or TLS in one place only. They never block and never
 * raise SIGPIPE. Poll a connection for rm_conn_events() before calling them
 * again after they reported "not ready".
 */
/** Drives connect() and the TLS handshake on: 0 usable, 1 not ready yet, or an error code (message set). */
int rm_conn_establish(rm_conn *c);
/** Sends up to len bytes: the count sent, 0 when not ready, or an error code (message set). */
ssize_t rm_conn_send(rm_conn *c, const void *data, size_t len);
/**
 * Receives up to len bytes: the count, 0 when nothing is ready, or an error
 * code (message set; a closed connection is REDMUTEX_ECONN). A count below
 * len means nothing more is buffered inside the connection: poll before
 * reading again.
 */
ssize_t rm_conn_recv(rm_conn *c, void *buf, size_t len);
/** The poll events to wait for; have_output when bytes wait to be sent. */
short rm_conn_events(const rm_conn *c, bool have_output);
/** While not usable: the pending step, for messages ("while connecting", ...); NULL once usable. */
const char *rm_conn_pending_step(const rm_conn *c);

/* ---- TLS (tls.c) ---------------------------------------------------- */

struct rm_tls;
/** For a rediss:// server: loads its TLS settings (URL options over client options). 0 or an error code. */
int rm_tls_server_init(rm_server *srv, const redmutex_client_options *opts);
void rm_tls_server_clear(rm_server *srv);
/** Whether client options ask for TLS settings (so a plain URL with them is refused). */
bool rm_tls_options_given(const redmutex_client_options *opts);
/** Starts TLS on a connected socket (makes the SSL object). 0 or an error code. */
int rm_tls_start(rm_conn *c);
/** One handshake step: 0 done, 1 not ready (c->tls_want set), or an error code. */
int rm_tls_handshake(rm_conn *c);
ssize_t rm_tls_send(rm_conn *c, const void *data, size_t len);
ssize_t rm_tls_recv(rm_conn *c, void *buf, size_t len);
/** Whether bytes read from the socket wait inside the TLS layer (poll() would not show them). */
bool rm_tls_pending(const rm_conn *c);
void rm_tls_free(rm_conn *c);

/* ---- client ---------------------------------------------------------- */

struct rm_watchdog;
struct rm_subscriber;
struct rm_hold;

struct redmutex_client {
    pthread_mutex_t mu;
    int refs;        /* the user's reference (until free) + one per lock handle */
    bool closed;
    pid_t pid;       /* process whose connections and threads these are */
    char id[REDMUTEX_CLIENT_ID_LEN + 1];
    redmutex_client_options opts;
    size_t n;        /* servers */
    size_t quorum;   /* n/2 + 1 */
    rm_server *servers;
    struct rm_watchdog *wd;
    struct rm_subscriber *sub;
    struct rm_hold *holds; /* every hold of every handle (for shutdown) */
    pthread_cond_t renew_done; /* broadcast when a renewal batch or callback finishes */
    uint64_t next_hold_id;
    struct rm_event *events;   /* lost-lock callbacks waiting to run */
    struct redmutex_lock *callback_lock; /* lock whose callback is running now */
    pthread_t callback_thread;           /* ... and the thread running it */
    struct redmutex_client *next_all, *prev_all; /* fork registry */
    /* interrupt.c: waits in progress and how they are ended */
    _Atomic uint64_t intr_gen; /* bumped by every redmutex_client_interrupt() */
    _Atomic int intr_fd;       /* eventfd written by it; -1 until the first wait */
    uint64_t intr_drained;     /* the generation when the eventfd was last drained (c->mu) */
    _Atomic bool closing;      /* close has begun: every wait ends */
    bool shut_down;            /* close has finished: no holds are released any more (c->mu) */
    struct rm_wait *waits;     /* waits in progress (c->mu) */
    /* events.c: pollable lost-lock news (c->mu) */
    struct rm_fd_event *events_head, *events_tail;
    size_t n_events;
    uint64_t events_dropped;
    int event_fd; /* -1 until redmutex_client_event_fd() makes it */
    struct rm_pollwaits *pw; /* pollwait.c: NULL until the first pollable wait or wait fd (c->mu) */
    struct rm_unsettled_list *unsettled; /* unsettled.c: releases of unknown outcome (c->mu) */
    _Atomic int n_unsettled;             /* ... how many: 0 keeps acquisitions off c->mu */
};

/** Locks client->mu (and, in a forked child, resets what the child must not use). */
void rm_client_lock(redmutex_client *c);
void rm_client_unlock(redmutex_client *c);
/** False once redmutex_client_free() has begun. */
bool rm_client_open(redmutex_client *c);
/** Checks closed / forked-away state: 0 or REDMUTEX_ECLOSED (message set). */
int rm_client_usable(redmutex_client *c);
/** Drops one reference; frees the client when none is left. */
void rm_client_unref(redmutex_client *c);
/** rm_client_take_conn: the connection that must carry the request is lent to another call. */
#define RM_CONN_BUSY 1
/**
 * Takes a connection for server i for a request ordered by `order_key` (0:
 * no order): the connection that still owes replies for that key if there is
 * one, else a pooled or new one. RM_CONN_BUSY when that owing connection is
 * lent to another call right now (try again shortly: nothing was sent).
 * Caller holds no mutex.
 */
int rm_client_take_conn(redmutex_client *c, size_t i, uint64_t order_key, rm_conn **out);
/**
 * Returns a connection to the pool, or to the owing list when it still owes
 * replies (then order_key, the key of the request it owes for, is recorded).
 * Broken connections and those of another process are closed.
 */
void rm_client_give_conn(redmutex_client *c, rm_conn *conn, bool healthy, uint64_t order_key);
/**
 * Called the moment a call stops waiting for a connection's reply to a
 * request for order_key: from then on the connection is listed as owing for
 * it (and lent to the call), so that no later request for that name, from
 * any thread, takes another connection to the server. -1 if it could not be
 * recorded (no memory): then the connection must be closed.
 */
int rm_client_mark_owing(redmutex_client *c, rm_conn *conn, uint64_t order_key);
/**
 * Queues `len` bytes holding `count` commands (a release that could not be
 * sent by its deadline because the connection it must follow was lent to
 * another call) behind every connection to server i that owes replies for
 * order_key. Each is sent as soon as its connection is free: at once if it
 * is, else when the call that has it gives it back. 0 when queued, 1 when no
 * connection owes for order_key (the request may take a connection itself),
 * REDMUTEX_ENOMEM. Never blocks beyond one non-blocking send.
 */
int rm_client_defer(redmutex_client *c, size_t i, uint64_t order_key, const void *bytes, size_t len, size_t count);
/** Sends what it can of c's queued `later` bytes without blocking; once all
    are out, their replies are owed. 0, or an error code (message set). */
int rm_conn_flush_later(rm_conn *c);
/** Called with the run_id a fresh connection reported; detects restarts and duplicates. */
int rm_client_note_run_id(redmutex_client *c, rm_server *srv, const char *run_id);

/* ---- fan-out (fanout.c) ------------------------------------------- */

/** One command of a request. Script commands go out as EVALSHA, EVAL on NOSCRIPT. */
typedef struct rm_cmd {
    int script; /* an rm_script id, or -1 for a plain command */
    int argc;
    const char **argv;
    size_t *lens;
} rm_cmd;

#define RM_REQ_MAX_CMDS 8

/** The same request is sent to every server of the client. */
typedef struct rm_req {
    size_t ncmds;
    rm_cmd cmds[RM_REQ_MAX_CMDS];
    /* The lock name whose commands must run in issue order on each server
       (acquire, release, extend: anything that writes it); NULL for requests
       whose order does not matter (renewals, queries). */
    const char *order_name;
} rm_req;

enum rm_slot_status { RM_SLOT_IDLE, RM_SLOT_RUNNING, RM_SLOT_DONE };

typedef struct rm_slot {
    rm_conn *conn;
    int status;
    int err;              /* 0, or the error code for this server */
    char msg[256];        /* this server's error message */
    bool want_info;       /* handshake asks INFO server (N > 1) */
    size_t handshake_n;   /* handshake replies expected */
    size_t skip;          /* replies to skip before the handshake (owed + later) */
    size_t got;           /* replies read in this run */
    size_t total;         /* replies expected in this run */
    bool noscript;        /* a script reply said NOSCRIPT: resend with EVAL */
    bool used_eval;
    bool broken;          /* transport failed: the connection was closed */
    bool handshaking;     /* a fresh connection's handshake is out; the request follows its replies */
    bool sent;            /* bytes of the request went out: it may have run */
    bool not_waited;      /* the outcome was decided before this server answered */
    bool excluded;        /* not part of this run (rm_call.only) */
    int64_t deadline_ns;  /* this slot's deadline (longer while connecting) */
    rm_reply *replies[RM_REQ_MAX_CMDS];
} rm_slot;

typedef struct rm_call rm_call;
/** Early completion: return true when the outcome no longer depends on the servers still running. */
typedef bool (*rm_decided_fn)(rm_call *call, void *ud);

#define RM_INLINE_SLOTS 5

struct rm_call {
    redmutex_client *c;
    size_t n;
    rm_slot *slots;
    rm_slot inline_slots[RM_INLINE_SLOTS];
    int64_t started_ns; /* when the last run's requests started going out */
    bool strict_deadline; /* new connections get no connect_timeout beyond the deadline */
    const bool *only;     /* when set, servers i with only[i] false are left out of the run */
    /* Releases: even once decided, a run goes on (to the deadline at most)
       until the request has been sent to every server it is for, so that a
       server whose ordering connection is busy still gets it, in order. */
    bool must_send;
    uint64_t order_key;   /* the last run's rm_order_key(req->order_name), 0 if none */
};

int rm_call_begin(rm_call *call, redmutex_client *c);
/**
 * Sends req to every server and collects replies until all answered, the
 * deadline passed, or decided() says the result is known. Per-server
 * outcome in call->slots[i].err / replies[]. Returns 0, or an error code
 * only for failures that are not per server (ENOMEM).
 */
int rm_call_run(rm_call *call, const rm_req *req, int64_t deadline_ns, rm_decided_fn decided,
                void *ud);
/** Frees the replies of the last run (done before each run and at end). */
void rm_call_clear(rm_call *call);
void rm_call_end(rm_call *call);
/** How many slots finished without a transport error. */
size_t rm_call_answered(const rm_call *call);
/** Slots that failed for real (not excluded, not merely left unwaited-for). */
size_t rm_call_failed(const rm_call *call);
/** Whether server i's request went out but its reply did not arrive: it may have run. */
static inline bool rm_slot_unknown(const rm_slot *s) { return s->err != 0 && s->sent && !s->excluded; }
/** Fails with the most telling per-server error (used when no quorum answered). */
int rm_call_fail(const rm_call *call, const char *what, const char *name);

/** Classifies an error reply into a code and sets the message. */
int rm_reply_error(const rm_reply *r, const char *what, const char *name, const char *server);

/* ---- scripts (scripts.c) ------------------------------------------- */

enum rm_script_id {
    RM_SCRIPT_LOCK_ACQUIRE,      /* plain lock acquire with fencing / ttl */
    RM_SCRIPT_LOCK_RELEASE,
    RM_SCRIPT_LOCK_EXTEND,
    RM_SCRIPT_RLOCK_ACQUIRE,
    RM_SCRIPT_RLOCK_RELEASE,
    RM_SCRIPT_RLOCK_EXTEND,
    RM_SCRIPT_FORCE_RELEASE,
    RM_SCRIPT_INSPECT,
    RM_SCRIPT_RENEW,
    RM_SCRIPT_FENCE_RATCHET,
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
    RM_SCRIPT_COUNT
};

const char *rm_script_text(int id);
const char *rm_script_sha(int id);

/* ---- holds, locks ---------------------------------------------------- */

struct redmutex_lock {
    redmutex_client *c;
    uint64_t id;           /* redmutex_lock_id(): process-unique, never reused */
    int refs;              /* user + holds + work in progress on it (c->mu); see lifetime.c */
    redmutex_kind kind;
    redmutex_lock_options opts;
    struct rm_hold *holds; /* this handle's holds; guarded by c->mu */
    int64_t released_ns;   /* when this handle last released the lock (c->mu) */
    bool contended;        /* its last acquisition had to wait (c->mu) */
    size_t name_len;
    char name[];           /* the other keys of the lock are derived from it */
};

/* Room for any key derived from a lock name (channel, fencing counter, latch). */
#define RM_KEY_MAX (REDMUTEX_NAME_MAX + 96)

/* An owner's value on the servers: token, owner id, or owner id + ":write" (kind.h). */
#define RM_VALUE_MAX (REDMUTEX_CLIENT_ID_LEN + 24 > REDMUTEX_OWNER_MAX ? REDMUTEX_CLIENT_ID_LEN + 24 : REDMUTEX_OWNER_MAX + 8)

typedef struct rm_hold {
    redmutex_lock *lock;
    uint64_t id;          /* unique per client: finds the hold again after a round trip */
    bool busy;            /* one thread's release, extend or forget owns it; others wait or skip */
    bool forgetting;      /* being destroyed: invisible to lookups, left alone by the watchdog */
    bool orphan;          /* its handle was freed: not renewed, released by a close, dropped at expiry */
    /* The owner as the caller named it: "" for a plain lock's anonymous
       holder, else the explicit owner or the thread's default owner id. */
    char *owner;
    /* What is stored in Redis: the token (plain) or the hash field (rlock). */
    char *value;
    /* Per server: its generation + 1 when the lock was acquired. */
    uint64_t *generations;
    int64_t count;        /* hold count as last reported by the servers */
    int64_t fence;        /* fencing token (0 when fencing is off) */
    int64_t lease_ms;
    bool watchdog;        /* renewed by the watchdog */
    int64_t acquired_ns;  /* when the winning acquisition was sent */
    int64_t validity_end_ns;
    int64_t hold_deadline_ns; /* max_hold_ms cap, INT64_MAX when none */
    int64_t extensions;
    redmutex_state state;
    pid_t pid;            /* process that acquired it */
    char release_id[33];  /* latch id of a release whose outcome is unknown */
    /* watchdog */
    size_t heap_index;    /* position in the watchdog heap, SIZE_MAX when absent */
    int64_t due_ns;
    bool renewing;        /* a renewal for this hold is in flight */
    bool renew_stopped;   /* a cap was reached: no more renewals, expiry notice only */
    struct rm_hold *next_in_lock;
    struct rm_hold *next_in_client, *prev_in_client;
} rm_hold;

/* ---- watchdog (watchdog.c) --------------------------------------------- */

/** Schedules h (renewal for watchdog holds, expiry notice otherwise). Caller holds c->mu. */
int rm_watchdog_schedule(redmutex_client *c, rm_hold *h);
/** Moves h's next renewal forward to due_ns if it is later. Caller holds c->mu. */
void rm_watchdog_renew_by(redmutex_client *c, rm_hold *h, int64_t due_ns);
/** Removes h from the schedule and waits out an in-flight renewal. Caller holds c->mu. */
void rm_watchdog_cancel(redmutex_client *c, rm_hold *h);
/** Stops and joins the watchdog thread (shutdown or fork). */
void rm_watchdog_stop(redmutex_client *c, int64_t deadline_ns);
/** Forgets the watchdog in a forked child without touching its thread. */
void rm_watchdog_forget(redmutex_client *c);
typedef struct rm_event {
    struct rm_event *next;
    redmutex_lock *lock;
    redmutex_state state;
    char owner[RM_VALUE_MAX + 1];
} rm_event;

/** Marks h lost / failing and queues the callback; caller holds c->mu. */
void rm_hold_set_state(redmutex_client *c, rm_hold *h, redmutex_state st);

/* ---- interrupts (interrupt.c) --------------------------------------------- */

/** One blocking wait of an acquire, from its start to its end (on the waiting thread's stack). */
typedef struct rm_wait {
    struct rm_wait *next;
    uint64_t start;  /* interrupt generation when the wait began */
    bool registered;
} rm_wait;

/** rm_wait_poll's result when the wait was interrupted (or the client is closing). */
#define RM_POLL_INTERRUPTED (-1)
/** Registers a wait: interrupts from now on end it. 0 or REDMUTEX_ENOMEM (no eventfd). */
int rm_wait_begin(redmutex_client *c, rm_wait *w);
void rm_wait_end(redmutex_client *c, rm_wait *w);
/** True once an interrupt arrived after w began, or the client is closing. w may be NULL (false). */
bool rm_wait_interrupted(redmutex_client *c, const rm_wait *w);
/**
 * Sleeps until fd (may be -1) is readable (1), until_ns (0), or, when w is
 * a registered wait, an interrupt or a signal the interrupt callback wants
 * to stop for (RM_POLL_INTERRUPTED). Caller holds no mutex.
 */
int rm_wait_poll(redmutex_client *c, rm_wait *w, int fd, int64_t until_ns);
/**
 * rm_wait_poll over the n descriptors of p (p has n + 1 slots: the last is
 * the interrupt fd's). 1 when one of them has revents (the caller reads
 * them), else as rm_wait_poll.
 */
struct pollfd;
int rm_wait_poll_set(redmutex_client *c, rm_wait *w, struct pollfd *p, size_t n, int64_t until_ns);
/** Close: marks the client closing and wakes every wait. */
void rm_interrupt_wake_all(redmutex_client *c);
void rm_interrupt_after_fork(redmutex_client *c);
void rm_interrupt_destroy(redmutex_client *c);

/* ---- waiting (waiter.c) ------------------------------------------------ */

typedef struct rm_waiter rm_waiter;

/* What a waiting acquire offers to a releasing thread of its client, so the
   release can carry the waiter's acquisition in the same round trip. */
typedef struct rm_claim {
    redmutex_lock *lock;
    const char *owner; /* owner key of the waiting acquire */
    const char *value; /* its token or hash field */
} rm_claim;

/** rm_waiter_wait's result when a releasing thread acquired the lock for this waiter. */
#define RM_WAIT_GRANTED 2
/** ... and when such an acquisition's outcome is unknown (the round trip failed). */
#define RM_WAIT_UNKNOWN 3
/** Registers interest in a channel and waits (bounded, interruptible through `wait`) until subscribed. */
int rm_waiter_begin(redmutex_client *c, const char *channel, int64_t deadline_ns, rm_wait *wait, rm_waiter **out);
/**
 * Sleeps until a release message for the channel, a hand-off result, or
 * `until_ns`. Returns 1 (notified: try now), 0 (time is up), RM_WAIT_GRANTED
 * (a releasing thread acquired the lock for this waiter and recorded the
 * hold) or RM_WAIT_UNKNOWN (it tried, but the round trip failed: clean up).
 * *interrupted is set when the wait was interrupted (rm_wait_poll).
 */
int rm_waiter_wait(redmutex_client *c, rm_waiter *w, int64_t until_ns, bool *interrupted);
void rm_waiter_end(redmutex_client *c, rm_waiter *w);
/** Takes the hand-off message kept for w (kind.h, fair locks) into out: false when there is none. */
bool rm_waiter_message(redmutex_client *c, rm_waiter *w, char *out, size_t size);
/**
 * Registers a pollable wait's interest in a channel without waiting for the
 * subscription (see pollwait.c). It has no eventfd: whenever it should look
 * at its state again (a release message, a hand-off result, the
 * subscription confirmed, shutdown) notify(ud) is called, with c->mu held.
 * *subscribed tells whether the channel was subscribed already (then no
 * confirmation will come).
 */
int rm_waiter_join(redmutex_client *c, const char *channel, void (*notify)(void *ud), void *ud, rm_waiter **out,
                   bool *subscribed);
/**
 * The non-blocking counterpart of rm_waiter_wait: takes what happened since
 * the last call. Returns a hand-off result (RM_WAIT_GRANTED, RM_WAIT_UNKNOWN,
 * or 1: retry now), 1 when notified, 0 when nothing happened, -1 while a
 * hand-off is in flight. The waiter is awake afterwards (no hand-off is
 * offered to it) until rm_waiter_sleep().
 */
int rm_waiter_take(redmutex_client *c, rm_waiter *w);
/** Marks w asleep: releasing threads may hand it the lock (if it offered a claim). */
void rm_waiter_sleep(redmutex_client *c, rm_waiter *w);
/** Whether a releasing thread is acquiring for w right now. Caller holds c->mu. */
bool rm_waiter_handoff_in_flight(const rm_waiter *w);
/** Offers w's acquisition to releasing threads (claim is copied by reference: keep it alive). */
void rm_waiter_offer(redmutex_client *c, rm_waiter *w, const rm_claim *claim);
/**
 * Takes the oldest waiter of the channel that sleeps and offered a claim of
 * this kind, and marks a hand-off in flight for it (it will wait for the
 * result). NULL if there is none.
 */
rm_waiter *rm_waiter_claim(redmutex_client *c, const char *channel, redmutex_kind kind, rm_claim *out);
/** Ends a hand-off with RM_WAIT_GRANTED, RM_WAIT_UNKNOWN or 1 (not granted: retry now). */
void rm_waiter_claim_done(redmutex_client *c, rm_waiter *w, int result);
/** Number of threads of this client waiting on a channel. */
size_t rm_waiters_queued(redmutex_client *c, const char *channel);
/** Whether this client is subscribed to the channel right now (a wait begun now starts at once). */
bool rm_waiter_subscribed(redmutex_client *c, const char *channel);
/**
 * Before a release is sent: arms, per server where this client is surely
 * subscribed to the channel (armed[i]), the skipping of the release message
 * that server will deliver, so it wakes nobody in this process.
 */
void rm_waiter_expect_release(redmutex_client *c, const char *channel, bool *armed);
/**
 * After the release: disarms servers that did not delete the lock (deleted[i]
 * false), and, when `wake` and the lock was deleted somewhere, wakes the
 * oldest local waiter at once.
 */
void rm_waiter_released(redmutex_client *c, const char *channel, const bool *armed, const bool *deleted,
                        bool wake);
void rm_subscriber_stop(redmutex_client *c, int64_t deadline_ns);
void rm_subscriber_forget(redmutex_client *c);

/* ---- lock.c helpers used by the watchdog and shutdown ----------------- */

/** Releases every hold of the client (shutdown). */
void rm_release_all(redmutex_client *c, int64_t deadline_ns);
/** Unlinks and frees h; caller holds c->mu and h is not scheduled. */
void rm_hold_destroy(redmutex_client *c, rm_hold *h);
/** Sleeps until `until_ns` without a waiter; 0, or REDMUTEX_EINTR when `wait` was interrupted. */
int rm_sleep_until(redmutex_client *c, rm_wait *wait, int64_t until_ns);
/* ---- pollable events (events.c) ---------------------------------------------- */

typedef struct rm_fd_event rm_fd_event;
/** Queues the news that lock_id's hold of owner turned `state`. Caller holds c->mu. */
void rm_events_push(redmutex_client *c, uint64_t lock_id, redmutex_state state, const char *owner);
void rm_events_after_fork(redmutex_client *c);
void rm_events_destroy(redmutex_client *c);

/* ---- lock.c, for pollable waits (pollwait.c) ------------------------------ */

/**
 * Checks the handle and owner and fills owner_key (the key of the local hold)
 * and value (the token or hash field to store) as redmutex_lock_acquire does.
 * 0 or an error code with message.
 */
int rm_acquire_prepare(redmutex_lock *l, const char *owner, char owner_key[RM_VALUE_MAX + 1],
                       char value[RM_VALUE_MAX + 1]);
/* (For a fair lock, `nonce` below names the wait (kind.h), and an attempt
   with a nonce joins or refreshes the lock's queue; NULL: a try that never
   queues.) */
/**
 * One acquisition attempt (see attempt() in lock.c): 0 when won (hold
 * recorded), 1 when busy (*ttl_ms: the holder's remaining lease or -1,
 * *split: some but not a majority granted), or an error code. `retry` is
 * false for the first attempt of an acquisition. Blocks one round trip.
 */
int rm_acquire_attempt(redmutex_lock *l, const char *owner_key, const char *value, bool retry, const char *nonce,
                       int64_t *ttl_ms, bool *split);
/**
 * The channel a waiter for `value` listens on, written into buf (RM_KEY_MAX +
 * RM_VALUE_MAX + 48 bytes: a fair lock's waiter has a channel of its own).
 */
void rm_lock_channel(const redmutex_lock *l, const char *value, char *buf);
/** Whether this process holds the lock for owner_key through this handle. */
bool rm_lock_holds(redmutex_lock *l, const char *owner_key);
/** redmutex_lock_release for an owner key already resolved. */
int rm_lock_release_key(redmutex_lock *l, const char *owner_key, bool explicit_owner);
/** Releases whatever `value` holds, with no local record (cleanup of an unknown outcome). */
void rm_lock_release_value(redmutex_lock *l, const char *value);

/* ---- pollable waits (pollwait.c) -------------------------------------------- */

struct rm_pollwaits;
void rm_pollwaits_after_fork(redmutex_client *c);
void rm_pollwaits_destroy(redmutex_client *c);

/* ---- lifetimes (lifetime.c) ----------------------------------------------- */

/** A new process-unique lock id (> 0). */
uint64_t rm_lock_next_id(void);
/** Drops a reference to l, freeing it at zero. Caller holds c->mu and a client reference of its own. */
void rm_lock_unref_locked(redmutex_client *c, redmutex_lock *l);
/** Destroys orphaned holds nobody works on. Caller holds c->mu and a client reference. */
void rm_orphans_drop_locked(redmutex_client *c);

/** Clock drift allowance for a lease (DESIGN: lease * 1% + 2 ms), in ns. */
static inline int64_t rm_drift_ns(int64_t lease_ms) { return lease_ms * RM_NS_PER_MS / 100 + 2 * RM_NS_PER_MS; }

#endif
