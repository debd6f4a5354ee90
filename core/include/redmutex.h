/*
 * redmutex — distributed locks for Redis.
 *
 * This header is the whole public C API and its specification. Conventions:
 *
 *  - Every fallible function returns int: 0 (REDMUTEX_OK) on success or a
 *    negative REDMUTEX_E* code. Codes are never renumbered. After a failure,
 *    redmutex_last_error() returns a message for the calling thread that says
 *    what went wrong and what to do; it never contains a password.
 *  - Out-parameters come first and are named `out`. On failure they are left
 *    untouched unless the function says otherwise.
 *  - Handles are opaque. Every *_free(NULL) is a no-op.
 *  - Options structs start with a `version` field, are filled by their
 *    *_options_init() function (or the *_OPTIONS_INIT macro, which gives the
 *    same bytes), and only ever gain fields at the end. A struct of any
 *    version from 1 to the current one is accepted: the library reads only
 *    the fields that version has, and uses the defaults for the rest, so a
 *    program built against an older header keeps working.
 *  - Times are int64_t milliseconds. Waiting and timeouts use CLOCK_MONOTONIC,
 *    so wall-clock jumps on the client do not change them.
 *  - Strings passed in are copied when the function needs them later; the
 *    caller keeps ownership of what it passes. Strings returned as
 *    `const char *` are owned by the library and live as long as stated.
 *
 * Threading in one sentence: a client is fully thread-safe and meant to be
 * shared; a lock handle may be shared between threads too (each call is
 * atomic with respect to the handle's local state), and its ownership model
 * is described at redmutex_lock_new(). Clients and handles may be freed in
 * any order, from any thread, and freeing never blocks, so a garbage
 * collector can own them. See docs/threading.md.
 *
 * The only symbols the library exports start with redmutex_; it never
 * installs signal handlers and never raises SIGPIPE in the host process.
 */
#ifndef REDMUTEX_H
#define REDMUTEX_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__) || defined(__clang__)
#define REDMUTEX_API __attribute__((visibility("default")))
#else
#define REDMUTEX_API
#endif

/* ------------------------------------------------------------------------ */
/* Versions                                                                  */
/* ------------------------------------------------------------------------ */

#define REDMUTEX_VERSION_MAJOR 1
#define REDMUTEX_VERSION_MINOR 1
#define REDMUTEX_VERSION_PATCH 0
#define REDMUTEX_VERSION_STRING "1.1.0"
/** A single number that increases with every release: 10000*major + 100*minor + patch. */
#define REDMUTEX_VERSION_NUMBER 10100

/**
 * The version of the library actually loaded, as "MAJOR.MINOR.PATCH"
 * (compare with REDMUTEX_VERSION_STRING, the version compiled against).
 * Returns a static string. Never fails; thread-safe.
 */
REDMUTEX_API const char *redmutex_version(void);

/** The loaded library's version as REDMUTEX_VERSION_NUMBER would spell it. Thread-safe. */
REDMUTEX_API int redmutex_version_number(void);

/* ------------------------------------------------------------------------ */
/* Errors                                                                    */
/* ------------------------------------------------------------------------ */

/** Result codes. 0 is success; every error is negative. Never renumbered. */
typedef enum redmutex_error {
    REDMUTEX_OK = 0,
    /** An argument is invalid: NULL, empty or oversized name, bad time, malformed URL... */
    REDMUTEX_EINVAL = -1,
    /** Out of memory. */
    REDMUTEX_ENOMEM = -2,
    /** The lock is held by another owner and the wait (possibly zero) ran out. */
    REDMUTEX_ETIMEDOUT = -3,
    /** The caller does not hold the lock (release, extend, fence of a lock not held). */
    REDMUTEX_ENOTOWNER = -4,
    /** The lock was held but is lost: its lease ran out or renewal found it gone. */
    REDMUTEX_ELOST = -5,
    /** Could not connect, the connection dropped, or a server did not answer in time. */
    REDMUTEX_ECONN = -6,
    /** A server sent a reply that is malformed or not what the command returns. */
    REDMUTEX_EPROTOCOL = -7,
    /** A server answered with an error (READONLY, LOADING, OOM, BUSY, ...). */
    REDMUTEX_ESERVER = -8,
    /** The key exists but is not a lock of this kind (Redis WRONGTYPE). Nothing was changed. */
    REDMUTEX_EWRONGTYPE = -9,
    /** Authentication or authorization failed (WRONGPASS, NOAUTH, NOPERM). */
    REDMUTEX_EAUTH = -10,
    /** The handle was inherited through fork() and cannot act on the parent's lock. */
    REDMUTEX_EFORKED = -11,
    /** Two of a client's URLs lead to the same Redis server (same run_id). */
    REDMUTEX_EDUPLICATE = -12,
    /** Fewer replicas acknowledged a write than min_replicas asked for; the lock was released. */
    REDMUTEX_EREPLICAS = -13,
    /** The client was closed (redmutex_client_close or _free) while handles still referred to it. */
    REDMUTEX_ECLOSED = -14,
    /** A wait was interrupted: redmutex_client_interrupt() or the client's interrupt callback. */
    REDMUTEX_EINTR = -15,
    /** A cap set in the options (hold time, number of extensions) was reached. */
    REDMUTEX_ELIMIT = -16,
    /** The request needs a feature this build does not have. */
    REDMUTEX_EUNSUPPORTED = -17,
    /**
     * The operating system failed a request the library cannot do without
     * (no random bytes from getrandom for a token or client id). Nothing was
     * sent: redmutex fails closed rather than use a predictable token.
     */
    REDMUTEX_ESYSTEM = -18
} redmutex_error;

/**
 * A short, static, English description of a result code ("lock held by
 * another owner"). Unknown codes give "unknown error". Never NULL; thread-safe.
 */
REDMUTEX_API const char *redmutex_strerror(int code);

/**
 * The detail message of the last failure on the calling thread, e.g.
 * "lock 'jobs' is held by another owner; waited 2000 ms". The string is
 * thread-local and stays valid until the next redmutex call on this thread.
 * Only a call that returns an error code sets it; successful calls, other
 * threads and the library's own background work (renewals, the subscriber,
 * shutdown) leave it as it is. Returns "" when no call has failed on this
 * thread. Passwords never appear. Thread-safe.
 */
REDMUTEX_API const char *redmutex_last_error(void);

/** The result code of the last failure on the calling thread (0 if none). Thread-safe. */
REDMUTEX_API int redmutex_last_error_code(void);

/** Clears the calling thread's last error. Thread-safe. */
REDMUTEX_API void redmutex_clear_error(void);

/* ------------------------------------------------------------------------ */
/* Limits and special values                                                 */
/* ------------------------------------------------------------------------ */

/** Longest lock name, in bytes (Redis keys may be longer; lock names may not). */
#define REDMUTEX_NAME_MAX 1024
/** Longest explicit owner id, in bytes. */
#define REDMUTEX_OWNER_MAX 256
/** Most servers one client may use. */
#define REDMUTEX_SERVERS_MAX 64
/** Longest lease or wait, in milliseconds (about 100 years fits; this is 1 year). */
#define REDMUTEX_TIME_MAX_MS ((int64_t)366 * 24 * 3600 * 1000)
/** Wait value for redmutex_lock_acquire(): wait as long as it takes. */
#define REDMUTEX_WAIT_FOREVER ((int64_t)-1)
/** Length of a client id (a UUID in 8-4-4-4-12 form), without the terminating NUL. */
#define REDMUTEX_CLIENT_ID_LEN 36

/* ------------------------------------------------------------------------ */
/* Client                                                                    */
/* ------------------------------------------------------------------------ */

/** A connection to one Redis server, or to N independent masters (Redlock). */
typedef struct redmutex_client redmutex_client;

/**
 * Asked by a waiting acquire whether to give up: before each pause between
 * attempts, and whenever a signal interrupts a pause (poll() returned EINTR).
 * Return nonzero to abandon the wait: the acquire then fails with
 * REDMUTEX_EINTR and holds nothing. Return 0 to keep waiting. It runs on the
 * waiting thread, never while a command is in flight, and may call any
 * redmutex function except closing or freeing the client. A signal that
 * arrives at any point of the wait is seen within one pause (at most
 * wait_backoff_cap_ms). redmutex_client_interrupt() is the other way to end
 * waits, from any thread: most bindings want that one.
 */
typedef int (*redmutex_interrupt_fn)(void *payload);

/** Bits for redmutex_client_options.flags. */
enum {
    /**
     * On close (redmutex_client_close, or the background close of
     * redmutex_client_free), leave held locks to expire instead of releasing them.
     */
    REDMUTEX_CLIENT_LEAVE_LOCKS_ON_FREE = 1u << 0,
    /**
     * TLS: do not verify the servers' certificates at all (the URL option
     * ssl_cert_reqs=none). Anyone on the network path can then impersonate
     * the server. Never the default; meant for tests.
     */
    REDMUTEX_CLIENT_TLS_NO_VERIFY = 1u << 1,
    /**
     * TLS: verify the certificate chain but not that the certificate names
     * the server (the URL option ssl_check_hostname=false). Any certificate
     * the trusted CAs issued, for any host, is then accepted.
     */
    REDMUTEX_CLIENT_TLS_NO_HOSTNAME_CHECK = 1u << 2,
    /**
     * Do not count statistics (redmutex_client_stats() then reports zeros
     * and `counting` = 0). Counting costs a few relaxed atomic additions and
     * clock reads per operation (docs/benchmarks.md has the measured
     * figure); this flag exists to measure that cost and for programs that
     * want none of it. Log messages are unaffected. Since 1.1.
     */
    REDMUTEX_CLIENT_NO_STATS = 1u << 3
};

/**
 * Levels of log messages, numbered as Python's logging levels. Since 1.1.
 */
typedef enum redmutex_log_level {
    /** A condition ended that was reported before: renewal recovered, a server is reachable again. */
    REDMUTEX_LOG_INFO = 20,
    /** Something a user should look at: renewal failing, a lock lost, a server unreachable. */
    REDMUTEX_LOG_WARNING = 30
} redmutex_log_level;

/**
 * Receives the library's log messages (client option `log`). Since 1.1.
 *
 * Messages are written only when something changes, never on the fast path
 * of an acquisition or release:
 *  - WARNING when a hold's renewal starts failing, when a hold is lost, and
 *    when a server that answered (or was never reached) fails to answer:
 *    unreachable, timed out, refused the credentials, sent a malformed
 *    reply (once per change, not per request);
 *  - INFO when the renewal recovers and when the server answers again.
 * `level` is a redmutex_log_level; `message` is one line without a newline,
 * naming the lock and server; `lock_name` is the lock concerned or NULL;
 * `server` is the server's address as in messages (password masked) or
 * NULL. All three strings are valid only during the call.
 *
 * It runs on the thread that noticed: the caller's thread inside a redmutex
 * call (a server failing) or the client's watchdog thread (renewals and
 * losses), never with a library lock held. It must not close or free the
 * client, should return quickly and not block (renewals wait for it), and
 * may call other redmutex functions. A binding whose language may not run
 * on a foreign thread queues the message and hands it over on its own
 * thread.
 */
typedef void (*redmutex_log_fn)(int level, const char *message, const char *lock_name, const char *server,
                                void *payload);

/**
 * The current version of redmutex_client_options. Versions 1 (without the
 * tls_* fields) and 2 (without the log fields) are still accepted: a program
 * built against them passes its smaller struct with its version, the
 * library reads only the fields that version has and uses the defaults for
 * the rest.
 */
#define REDMUTEX_CLIENT_OPTIONS_VERSION 3

/**
 * Client options. Fill with redmutex_client_options_init() or
 * REDMUTEX_CLIENT_OPTIONS_INIT, then change what you need. The struct has no
 * padding, so the macro and the function give identical bytes.
 */
typedef struct redmutex_client_options {
    /**
     * The version of this struct: REDMUTEX_CLIENT_OPTIONS_VERSION as set by the
     * init function, or an older one (>= 1) for the older, shorter struct.
     */
    uint32_t version;
    /** REDMUTEX_CLIENT_* bits. Default 0. */
    uint32_t flags;
    /** Budget for making a TCP/Unix connection, its TLS handshake and its AUTH/SELECT handshake. Default 2000. */
    int64_t connect_timeout_ms;
    /**
     * Per-server budget for one request (one round trip). With N servers this
     * is the Redlock per-server timeout: keep it much smaller than the lease.
     * Default 1000.
     */
    int64_t command_timeout_ms;
    /** Lease of locks acquired without one; the watchdog renews every lease/3. Default 30000. */
    int64_t watchdog_lease_ms;
    /**
     * Longest gap between two attempts of a waiting acquire when no release
     * message arrives (a holder that never publishes, a missed message).
     * Default 1000.
     */
    int64_t wait_backoff_cap_ms;
    /**
     * Redlock: longest random pause after an acquisition attempt that did not
     * win a quorum (split votes), before the next attempt. Default 200.
     */
    int64_t retry_delay_ms;
    /** Redlock: most attempts of one acquire call; 0 = as many as the wait allows. Default 0. */
    int64_t retry_count;
    /**
     * After acquire/extend/renew, WAIT for this many replicas to acknowledge;
     * 0 = off. Default -1: each deployment's own default, which is 1 on a
     * Sentinel deployment (redis+sentinel://) and 0 on every other. A WAIT
     * asks a master for no more replicas than it has: on a cluster, those in
     * service in the topology as last read (after a failover the promoted
     * master has none at first) or online at its last ROLE; on a Sentinel
     * deployment with -1, those its ROLE lists (probed every second and
     * after each failover). So a master with no replica takes and renews
     * locks instead of refusing every lock until one attaches
     * (docs/deployments.md). An explicit value on a Sentinel deployment is
     * asked as given. Fewer acknowledgements than asked fail an acquisition
     * or extension with REDMUTEX_EREPLICAS (the acquisition undone). A
     * program built with an older header, whose initialiser set 0, keeps 0:
     * off, as it was.
     */
    int64_t min_replicas;
    /** Timeout given to WAIT when min_replicas > 0. Default 1000. */
    int64_t replica_timeout_ms;
    /**
     * Upper bound on how long closing the client (redmutex_client_close(), or
     * the background close of redmutex_client_free()) spends releasing held
     * locks and stopping background threads, even with servers unreachable.
     * Default 2000.
     */
    int64_t shutdown_timeout_ms;
    /** See redmutex_interrupt_fn. Default NULL (a signal never ends a wait). */
    redmutex_interrupt_fn interrupt;
    /** Passed to `interrupt`. */
    void *interrupt_payload;

    /* ---- version 2: TLS for rediss:// URLs ---- */
    /*
     * These apply to every rediss:// URL of the client; a URL's own query
     * options (ssl_ca_certs, ssl_certfile, ssl_keyfile, ssl_server_hostname,
     * ssl_cert_reqs, ssl_check_hostname) take precedence for that URL. Setting
     * any of them while a URL is not rediss:// fails with REDMUTEX_EINVAL, so
     * a configuration meant for TLS never silently runs in plain text.
     * Certificates and host names are verified unless the REDMUTEX_CLIENT_TLS_*
     * flags or the URL opt out. Paths are read by redmutex_client_new() and
     * not kept.
     */
    /**
     * An OpenSSL `SSL_CTX *` to make TLS connections with (its trust store,
     * client certificate, protocol versions and ciphers), passed as void * so
     * that this header needs no OpenSSL header. The client takes its own
     * reference (SSL_CTX_up_ref): the caller may free its reference after
     * redmutex_client_new() returns, but must not change the context while
     * any client uses it. Verification of the server's certificate and host
     * name is set per connection by redmutex, whatever the context's own
     * verify mode, so a context from SSL_CTX_new() is verified too. It cannot
     * be combined with tls_ca_file, tls_cert_file or tls_key_file (nor with
     * the URL options that name files): REDMUTEX_EINVAL. The context must
     * come from the same OpenSSL library redmutex is linked with. Default NULL.
     */
    void *tls_context;
    /**
     * PEM file of the CA certificates to trust (ssl_ca_certs). Default NULL:
     * the system trust store (/etc/ssl/certs).
     */
    const char *tls_ca_file;
    /** PEM file of the client certificate chain for mutual TLS (ssl_certfile). Default NULL. */
    const char *tls_cert_file;
    /**
     * PEM file of the client certificate's private key (ssl_keyfile), without
     * a passphrase. Default NULL: the key is read from tls_cert_file.
     */
    const char *tls_key_file;
    /**
     * The name to send as SNI and to verify the certificate against
     * (ssl_server_hostname). Default NULL: the host of each URL.
     */
    const char *tls_server_name;

    /* ---- version 3 (since 1.1): log messages ---- */
    /** See redmutex_log_fn. Default NULL: nothing is logged. */
    redmutex_log_fn log;
    /** Passed to `log`. */
    void *log_payload;
} redmutex_client_options;

#define REDMUTEX_CLIENT_OPTIONS_INIT                                                                                   \
    {                                                                                                                  \
        REDMUTEX_CLIENT_OPTIONS_VERSION, 0, 2000, 1000, 30000, 1000, 200, 0, -1, 1000, 2000, 0, 0, 0, 0, 0, 0, 0, 0, 0 \
    }

/**
 * Fills `opts` with the defaults for `version` (pass
 * REDMUTEX_CLIENT_OPTIONS_VERSION). For an older version (>= 1) only the
 * bytes of that version's struct are written (version 1 has no tls_* fields,
 * version 2 no log fields).
 * Errors: REDMUTEX_EINVAL if opts is NULL or the version is 0 or newer than
 * this library's. Does not block; thread-safe.
 */
REDMUTEX_API int redmutex_client_options_init(redmutex_client_options *opts, unsigned int version);

/**
 * Creates a client for `n_urls` servers. With one URL every lock lives on
 * that server; with N > 1 every operation runs on all N independent masters
 * at once and needs N/2+1 of them (Redlock). An odd N is recommended: an even
 * N tolerates no more failures than N-1 and is accepted, but documented as
 * wasteful.
 *
 * URLs: redis://[user[:password]@]host[:port][/db] (user and password
 * percent-decoded, IPv6 hosts in brackets, port 6379 by default) or
 * unix:///path/to/socket. Every scheme also takes redis-py's query options
 * db=N, username=U and password=P (values percent-decoded), e.g.
 * redis://host?password=P or unix:///run/redis.sock?db=2&password=P; a
 * value given twice (user part and query, /N and ?db=N) is refused. With a
 * password and no user, AUTH is sent with the password alone; with both,
 * ACL AUTH user password. Messages show a URL only through
 * redmutex_url_redact(), never with its password.
 *
 * TLS: rediss://[user[:password]@]host[:port][/db][?option=value&...] with
 * redis-py's query options (values percent-decoded), the ones above and:
 *   ssl_ca_certs=PATH        CA certificates (PEM) to trust; default the
 *                            system trust store
 *   ssl_certfile=PATH        client certificate chain (PEM), for mutual TLS
 *   ssl_keyfile=PATH         its private key (PEM); default: in ssl_certfile
 *   ssl_cert_reqs=required|none   verify the server's certificate (default
 *                            required; none turns verification off)
 *   ssl_check_hostname=true|false verify that the certificate names the
 *                            server (default true)
 *   ssl_server_hostname=NAME the name for SNI and verification; default the
 *                            URL's host (an IP address is checked against the
 *                            certificate's IP entries)
 * TLS 1.2 or later. The handshake is part of connecting and bounded by
 * connect_timeout_ms; with TLS 1.3 it costs one round trip more than a
 * plain connection. A failed handshake is REDMUTEX_ECONN with a message that
 * names the cause (unknown CA, name mismatch, expired certificate, the
 * server requires a client certificate, not a TLS port...). Files that cannot
 * be loaded fail here with REDMUTEX_EINVAL.
 *
 * Sentinel: redis+sentinel://[user[:password]@]s1[:port],s2[:port],.../SERVICE[/db]
 * names the sentinels (port 26379 by default) and the service they monitor
 * the master by; user, password and db are the master's. Query options:
 * sentinel_username and sentinel_password (the sentinels' own AUTH; values
 * percent-decoded), and on rediss+sentinel:// (TLS to the sentinels and
 * the data nodes) the ssl_ options above. The sentinels are asked in order
 * (any one that answers is enough) for the master
 * (SENTINEL GET-MASTER-ADDR-BY-NAME); every new connection to it confirms
 * with ROLE that it is the master before anything is sent. A master that
 * answers READONLY, refuses WAIT as a replica, says ROLE replica or refuses
 * connections sends the call back to the sentinels, within the call's own
 * deadline (a failover costs a call round trips, never a write to a
 * demoted master); a background thread per client listens to every
 * sentinel's +switch-master, so waits and renewals follow a failover too.
 * Errors of a Sentinel deployment: REDMUTEX_ECONN (no sentinel answered,
 * or none knows the service: the message names each sentinel and what it
 * said), REDMUTEX_EAUTH (the sentinels refused the sentinel credentials).
 * A standalone redis:// server that answers READONLY (a managed primary
 * endpoint after a failover) has its connections dropped, and the call goes
 * again on a new one, whose host name is resolved again, within its deadline.
 *
 * With one URL, connections are made on first use. With several, the client
 * connects to every server now to compare their run_ids: two URLs that reach
 * the same server would fake a majority and are refused (REDMUTEX_EDUPLICATE).
 * A server that cannot be reached now is checked when it is first reached.
 *
 * Ownership: *out receives a new client, closed with redmutex_client_close()
 * and freed with redmutex_client_free(). The URLs and options are copied.
 * `opts` may be NULL for the defaults; options of an older version are
 * accepted (see the conventions at the top).
 * Errors: REDMUTEX_EINVAL (NULL, n_urls 0 or > REDMUTEX_SERVERS_MAX, malformed
 * URL, option out of range, options version 0 or newer than this library,
 * a TLS file that cannot be loaded, TLS options with a URL that is not
 * rediss://), REDMUTEX_EDUPLICATE, REDMUTEX_EAUTH (a reachable server refused
 * the credentials), REDMUTEX_ENOMEM.
 * Blocking: with N > 1, up to connect_timeout_ms (all servers in parallel).
 * Thread-safety: safe to call from any thread.
 */
REDMUTEX_API int redmutex_client_new(redmutex_client **out, const char *const *urls, size_t n_urls,
                                     const redmutex_client_options *opts);

/**
 * Writes `url` into out[size] with every secret it may hold masked as
 * "***": the password of its user part (user:password@), and the value of
 * every query option that is not known to be harmless (password=,
 * ssl_password=, a misspelt option...). It works on any text, whether or
 * not it parses as a server URL, and changes nothing else, so a message
 * can show what the user typed (a text over 16 KiB is shown as "(a URL too
 * long to show)"). Every message of the library that shows a URL shows it
 * this way; bindings and tools use it for their own.
 *
 * out is NUL-terminated and truncated to fit (out may be NULL when size is
 * 0, to learn the length). Returns the length of the whole redacted text,
 * without the NUL (>= size means it was truncated), as snprintf does; or
 * REDMUTEX_EINVAL when url is NULL, or out is NULL with size > 0.
 * Never blocks; thread-safe; async-signal-unsafe (it may allocate).
 * Since 1.1.
 */
REDMUTEX_API int redmutex_url_redact(char *out, size_t size, const char *url);

/**
 * Closes the client: releases the locks still held through it (or, with
 * REDMUTEX_CLIENT_LEAVE_LOCKS_ON_FREE, leaves them to expire), including
 * those of lock handles freed while they held a lock; ends every wait in
 * progress (those acquires fail with REDMUTEX_ECLOSED, holding nothing;
 * every pollable wait becomes ready, and its next try fails with
 * REDMUTEX_ECLOSED); stops renewals and joins the background threads.
 * Afterwards every call on the client or its handles fails with
 * REDMUTEX_ECLOSED, except the *_free functions and these, which keep
 * working: redmutex_client_id, redmutex_client_server_count,
 * redmutex_client_thread_owner, redmutex_client_interrupt (a no-op),
 * redmutex_client_event_fd, redmutex_client_next_event,
 * redmutex_client_events_dropped, redmutex_client_wait_fd,
 * redmutex_client_next_ready, redmutex_wait_id,
 * redmutex_lock_name, redmutex_lock_kind, redmutex_lock_id,
 * redmutex_lock_state, redmutex_lock_validity and redmutex_lock_fence.
 * The client's memory stays valid until redmutex_client_free().
 *
 * Idempotent: a second call (or a call after the background close of
 * redmutex_client_free has begun) returns 0 at once.
 * Errors: REDMUTEX_EINVAL if client is NULL, or if called from a lost-lock
 * callback of this client (it would wait for the thread running the
 * callback; redmutex_client_free is allowed there).
 * Blocking: up to shutdown_timeout_ms (plus scheduling), even with servers
 * unreachable. Thread-safety: may race with calls on the client and its
 * handles from other threads; they complete, or fail with REDMUTEX_ECLOSED.
 * Since 1.1.
 */
REDMUTEX_API int redmutex_client_close(redmutex_client *client);

/**
 * Drops the caller's reference to the client. Never blocks. If the client
 * was not closed, it is closed in the background: a short-lived thread of
 * the library does what redmutex_client_close() does, within
 * shutdown_timeout_ms (locks left to expire with
 * REDMUTEX_CLIENT_LEAVE_LOCKS_ON_FREE). A process that exits meanwhile may
 * leave locks to expire: call redmutex_client_close() first where that
 * matters.
 *
 * Lock handles keep their client alive: the client and its handles may be
 * freed in any order, from any thread, including from a lost-lock callback.
 * Memory is returned when the client and every handle are freed and the
 * background work has ended. After this call the caller must not use
 * `client` again (its handles remain usable and report REDMUTEX_ECLOSED).
 * NULL is a no-op. Thread-safe.
 */
REDMUTEX_API void redmutex_client_free(redmutex_client *client);

/**
 * Ends every wait of the client that is in progress when it is called:
 * blocked redmutex_lock_acquire() calls, including their wait for the
 * subscription to the release channel, return REDMUTEX_EINTR with nothing
 * held (like sqlite3_interrupt). A sleeping wait ends within a few
 * milliseconds; an acquire in the middle of a round trip to a server ends
 * when that round trip does (at most command_timeout_ms). Pollable waits
 * (redmutex_wait_new() and the other *_wait_new) created before the call
 * end too: the client's wait fd becomes readable at once,
 * redmutex_client_next_ready() reports each of them, and their tries
 * return REDMUTEX_EINTR from then on (since 1.1; see redmutex_wait_try).
 * A wait that begins after the call is not affected.
 *
 * Callable from any thread and from a signal handler: it is
 * async-signal-safe (an atomic counter and a write(2) to the client's
 * interrupt eventfd; errno is preserved). Never blocks, never fails. NULL is
 * a no-op, and so is a closed client. The client must not have been freed
 * (a handle keeps its memory alive, not the caller's right to use it).
 * The interrupt callback of the options keeps working beside it.
 * Since 1.1.
 */
REDMUTEX_API void redmutex_client_interrupt(redmutex_client *client);

/**
 * The client's id: a random UUID made at creation, the first part of the
 * default owner of reentrant locks (Redisson's connection-manager id).
 * Owned by the client; valid until redmutex_client_free(). Works after
 * close. Thread-safe.
 */
REDMUTEX_API const char *redmutex_client_id(const redmutex_client *client);

/** The number of servers (N) the client was made with; 0 for NULL. Thread-safe. */
REDMUTEX_API size_t redmutex_client_server_count(const redmutex_client *client);

/**
 * Writes the calling thread's default owner id for reentrant locks,
 * "<client id>:<OS thread id>", into `out` (NUL-terminated).
 * Errors: REDMUTEX_EINVAL if an argument is NULL or `size` is too small
 * (REDMUTEX_CLIENT_ID_LEN + 22 always suffices). Does not block; thread-safe.
 */
REDMUTEX_API int redmutex_client_thread_owner(char *out, size_t size, const redmutex_client *client);

/* ------------------------------------------------------------------------ */
/* Locks                                                                     */
/* ------------------------------------------------------------------------ */

/** A named lock on a client's servers. */
typedef struct redmutex_lock redmutex_lock;

/** The kinds of lock. Their wire formats are fixed (docs/wire-format.md). */
typedef enum redmutex_kind {
    /** Plain, non-reentrant: a string key holding a random token (redis-py Lock format). */
    REDMUTEX_KIND_LOCK = 0,
    /** Reentrant: a hash of owner -> hold count (Redisson RLock format). */
    REDMUTEX_KIND_RLOCK = 1,
    /**
     * Reentrant and fair (Redisson RFairLock format): waiters queue on the
     * server and get the lock in the order they arrived, whichever process or
     * library (a Redisson RFairLock on the same name shares the queue). A
     * release wakes only the head of the queue; on one server, for a lock
     * renewed by the watchdog, the releasing script hands the lock straight
     * to a waiting redmutex acquirer, which then holds it without another
     * round trip. A waiter that gives up leaves the queue; one that dies is
     * dropped from it within 3.5 s (it refreshes its place every 0.5 s while
     * it waits, and a place not refreshed for 3 s is given up), while a live
     * waiter keeps its place however long it waits. With Redlock (N > 1) the
     * order is FIFO on each server; waiters that arrive at the same moment
     * may be queued in different orders on different servers, and one that
     * wins only a minority goes to the back there.
     */
    REDMUTEX_KIND_FAIR = 2,
    /**
     * The read side of a read-write lock (Redisson RReadWriteLock format):
     * shared by any number of readers, excluded by a writer, reentrant. Use a
     * REDMUTEX_KIND_READ and a REDMUTEX_KIND_WRITE handle on the same name.
     * Not fair: nobody queues. A reader cannot upgrade: acquiring the write
     * side while holding the read side waits until the wait runs out.
     */
    REDMUTEX_KIND_READ = 3,
    /**
     * The write side of a read-write lock: one writer, excluding all readers,
     * reentrant. The writer may also take the read side (and keeps it after
     * releasing the write side). An explicit owner id is stored as
     * "<owner>:write", as Redisson names its writers.
     */
    REDMUTEX_KIND_WRITE = 4
} redmutex_kind;

/** What the library knows locally about one owner's hold of a lock. */
typedef enum redmutex_state {
    /** This owner does not hold the lock through this handle. */
    REDMUTEX_STATE_UNLOCKED = 0,
    /** Held, and the last acquisition or renewal is within its validity. */
    REDMUTEX_STATE_HELD = 1,
    /**
     * Renewal is failing (servers unreachable or slow). The lock may still be
     * held until its validity ends; after that it turns LOST.
     */
    REDMUTEX_STATE_RENEWAL_FAILING = 2,
    /** Definitely not held any more: the lease ran out or renewal found it gone. */
    REDMUTEX_STATE_LOST = 3
} redmutex_state;

/**
 * Called when a held lock changes to REDMUTEX_STATE_RENEWAL_FAILING or
 * REDMUTEX_STATE_LOST (and back to HELD when renewal recovers before the
 * validity ends). `owner` is the owner id whose hold changed, in the form the
 * lock functions accept: NULL for a plain lock held by the handle itself,
 * else the owner id; it is valid only during the call.
 *
 * It runs on the client's watchdog thread, never with a library lock held.
 * It may query the lock (state, fence, validity), release it, and hand the
 * news to another thread. It may free the lock (the handle stays valid until
 * the callback returns) and free the client, but not close it (that returns
 * REDMUTEX_EINVAL). It should return quickly: renewals of other locks wait
 * for it. Every such change is also queued for redmutex_client_next_event(),
 * with or without a callback; a binding whose language may not run on a
 * foreign thread uses that instead.
 */
typedef void (*redmutex_lost_fn)(redmutex_lock *lock, const char *owner, redmutex_state state, void *payload);

/** Bits for redmutex_lock_options.flags. */
enum {
    /** Maintain a fencing token (INCR of redisson_lock_token:{NAME}) on every acquisition. */
    REDMUTEX_LOCK_FENCING = 1u << 0
};

#define REDMUTEX_LOCK_OPTIONS_VERSION 1

/** Lock options. Fill with redmutex_lock_options_init() or REDMUTEX_LOCK_OPTIONS_INIT. */
typedef struct redmutex_lock_options {
    /** REDMUTEX_LOCK_OPTIONS_VERSION, or an older version (>= 1) for the older, shorter struct. */
    uint32_t version;
    /** REDMUTEX_LOCK_* bits. Default 0. */
    uint32_t flags;
    /**
     * Lease in milliseconds. 0 (the default) means: use the client's
     * watchdog_lease_ms and let the watchdog renew it while held. A lease
     * given here is not renewed; extend it with redmutex_lock_extend().
     */
    int64_t lease_ms;
    /** Watchdog: stop renewing after the lock has been held this long (0 = no cap). */
    int64_t max_hold_ms;
    /** Most extensions (explicit or by the watchdog) per acquisition (0 = no cap). */
    int64_t max_extensions;
    /** See redmutex_lost_fn. Default NULL. */
    redmutex_lost_fn on_lost;
    /** Passed to on_lost. */
    void *on_lost_payload;
} redmutex_lock_options;

#define REDMUTEX_LOCK_OPTIONS_INIT                                                                                     \
    {                                                                                                                  \
        REDMUTEX_LOCK_OPTIONS_VERSION, 0, 0, 0, 0, 0, 0                                                                \
    }

/**
 * Fills `opts` with the defaults for `version` (REDMUTEX_LOCK_OPTIONS_VERSION;
 * for an older version >= 1, only the bytes of that version's struct).
 * Errors: REDMUTEX_EINVAL (NULL, version 0 or newer than this library's).
 * Does not block; thread-safe.
 */
REDMUTEX_API int redmutex_lock_options_init(redmutex_lock_options *opts, unsigned int version);

/**
 * Makes a handle for the lock `name` of the given kind. Sends nothing.
 *
 * Ownership model. Every call that acts for an owner takes `owner`:
 *  - NULL means the default owner. For a plain lock that is the handle
 *    itself: the handle remembers the random token of its acquisition, so
 *    any thread may release what another thread acquired (like
 *    threading.Lock or a semaphore). For every other kind (reentrant, fair,
 *    read, write) it is the calling thread, "<client id>:<OS thread id>"
 *    (Redisson's convention).
 *  - A string names the owner explicitly: for the hash kinds it is the hash
 *    field used verbatim (a writer's field is "<owner>:write", as Redisson
 *    names writers); for a plain lock it is the token stored in the
 *    key. Use ids that are unique across processes (for example prefix them
 *    with redmutex_client_id()). This lets asyncio tasks, green threads or
 *    work handed between threads own a lock.
 *
 * `name` is 1..REDMUTEX_NAME_MAX bytes, NUL-terminated, used verbatim as the
 * Redis key. Ownership: *out receives a new handle that holds a reference to
 * the client (the client's memory lives at least as long as the handle);
 * free it with redmutex_lock_free(). name and opts are copied; options of an
 * older version are accepted.
 * Errors: REDMUTEX_EINVAL (NULL, bad name, bad kind or options),
 * REDMUTEX_ECLOSED, REDMUTEX_ENOMEM.
 * Does not block. Thread-safe.
 */
REDMUTEX_API int redmutex_lock_new(redmutex_lock **out, redmutex_client *client, const char *name, redmutex_kind kind,
                                   const redmutex_lock_options *opts);

/**
 * Frees the handle and drops its reference to the client. Locks it still
 * holds are not released now: their renewal stops, nobody is told about
 * them any more (no callback, no event), and they expire at the end of their
 * lease, unless the client is closed before that, which releases them. No
 * callback of the handle starts after this returns. NULL is a no-op.
 *
 * Blocking: never, except while an on_lost callback of this handle runs on
 * another thread (it is let finish). From inside the handle's own callback
 * it returns at once; the handle stays valid until the callback returns.
 * Thread-safety: any thread, in any order with the client and other
 * handles, also after the client was closed or freed; but no other call may
 * use this handle concurrently or after (a callback in progress aside).
 */
REDMUTEX_API void redmutex_lock_free(redmutex_lock *lock);

/** The lock's name (owned by the handle). Thread-safe. */
REDMUTEX_API const char *redmutex_lock_name(const redmutex_lock *lock);

/** The lock's kind. Thread-safe. */
REDMUTEX_API redmutex_kind redmutex_lock_kind(const redmutex_lock *lock);

/**
 * The handle's id: a number > 0, unique in the process and never reused, not
 * even after the handle is freed (0 for NULL). Events of
 * redmutex_client_next_event() name the handle by it. Never blocks;
 * thread-safe.
 * Since 1.1.
 */
REDMUTEX_API uint64_t redmutex_lock_id(const redmutex_lock *lock);

/**
 * Acquires the lock for `owner` (NULL: default owner, see redmutex_lock_new).
 *
 * wait_ms = 0 tries once; wait_ms > 0 waits up to that long;
 * REDMUTEX_WAIT_FOREVER waits until the lock is had or an error occurs.
 * While waiting, the client subscribes to the lock's release channel and
 * retries when a release is published, when the holder's lease runs out, and
 * at the latest after a capped backoff (wait_backoff_cap_ms): it does not
 * poll at short fixed intervals.
 *
 * Threads of one client waiting for the same lock are served in order: a
 * release by one of them hands the lock to the oldest waiter, in the same
 * round trip as the release when the client has one server. A fair lock
 * (REDMUTEX_KIND_FAIR) orders all its waiters, of every process, on the
 * server instead: a waiting acquire joins the queue, wakes when it is the
 * head and the lock is released (or is handed the lock by the release), and
 * refreshes its place at least every 500 ms; when it stops waiting (timeout,
 * error, interrupt) it leaves the queue. wait_ms = 0 never joins the queue,
 * and a free lock with waiters queued is not taken by a newcomer. While a
 * wait of an owner that a releasing script may hand the lock to (a fair
 * lock renewed by the watchdog, one server) is in progress in a client -
 * a blocking acquire, or a pollable wait not yet freed - other acquisitions
 * of the same owner and lock in that client make no attempt (wait_ms = 0
 * fails at once with REDMUTEX_ETIMEDOUT) and go on when it has ended: a
 * hand-off to one wait is never counted as a hold of another.
 *
 * A reentrant lock already held by `owner` is acquired again (hold count + 1),
 * through this handle or through another handle of the same name and client
 * (one count on the servers; each handle releases its own levels).
 * Such a nested acquisition that fails takes back only the level it added:
 * the outer hold is never lost to it, and it never re-creates a lock whose
 * key or field is gone (REDMUTEX_ELOST). A fair lock's nested acquisition
 * never queues. A plain lock is not reentrant: acquiring it again waits like
 * anyone else.
 * The acquisition counts only if it completed within the lease minus the
 * clock drift allowance (and, with N servers, on a majority); otherwise what
 * was taken is released and the attempt counts as failed.
 *
 * Errors: REDMUTEX_ETIMEDOUT (held by another owner when the wait ran out;
 * the message names the wait), REDMUTEX_EINVAL (bad wait or owner),
 * REDMUTEX_EWRONGTYPE, REDMUTEX_ECONN (servers unreachable, with N servers:
 * fewer than a majority answered), REDMUTEX_EAUTH, REDMUTEX_ESERVER,
 * REDMUTEX_EPROTOCOL, REDMUTEX_EREPLICAS, REDMUTEX_EINTR (redmutex_client_interrupt
 * or the interrupt callback ended the wait), REDMUTEX_ELOST (this
 * owner's earlier hold through this handle was lost and not yet released:
 * release it first, which reports the loss, then acquire again; or a
 * nested acquisition found the owner's field gone on enough servers),
 * REDMUTEX_EFORKED, REDMUTEX_ECLOSED (also when the client is closed while
 * this call waits).
 * On any error nothing is held. (One exception: when an interrupt stops a
 * wait just as a releasing thread handed this waiter the lock and it cannot
 * be given back, the call reports success and the lock is held.)
 * A server that answered this client before and then answers nothing, on
 * any connection, for command_timeout_ms while a request waits for it (a
 * long script, a fork, swapping) counts as stalling until it answers again:
 * it is not asked (no vote, as if down) and no attempt waits for it. A wait
 * goes on through such a stall with its usual pauses, ending with
 * REDMUTEX_ETIMEDOUT if no majority can be had in time; with wait_ms = 0 a
 * majority that stalls is REDMUTEX_ECONN (within one attempt's budget, at
 * once once the stall is known). A server that never answered is
 * unreachable: REDMUTEX_ECONN, wait or not.
 * Blocking: at most wait_ms + T, where T = max(connect_timeout_ms,
 * command_timeout_ms) is one attempt's budget (a cleanup of a failed attempt
 * is sent within it, not waited for beyond it), plus replica_timeout_ms when
 * min_replicas > 0. With wait_ms = 0: at most T. A fair lock that stops
 * waiting without the lock spends up to command_timeout_ms more to leave
 * the queue. Tested against a server that accepts but never answers and
 * with 3 of 5 servers stopped.
 * Thread-safe.
 */
REDMUTEX_API int redmutex_lock_acquire(redmutex_lock *lock, const char *owner, int64_t wait_ms);

/**
 * Releases one hold of `owner`. For a reentrant lock this decrements the
 * hold count and deletes the lock when it reaches zero; a plain lock is
 * deleted. When the lock is deleted, the release is published so waiters
 * wake at once. Renewal of this hold is cancelled before the call returns.
 *
 * Releasing is idempotent across retries: if the reply to a release was lost
 * (REDMUTEX_ECONN) and the caller retries, the retry reports the first
 * attempt's result instead of a false REDMUTEX_ENOTOWNER.
 * With N servers the release succeeds once the hold is released on a
 * majority, or, while its validity lasts, once it is released somewhere and
 * absent from a majority (released there, never granted, or not held; a
 * majority saying it was not held is REDMUTEX_ELOST). A server that stalls
 * gets the release behind its earlier requests for the lock, and is not
 * waited for.
 *
 * Errors: REDMUTEX_ENOTOWNER (this owner does not hold it; nothing changed),
 * REDMUTEX_ELOST (it was held but lost before the release: the work done
 * under it was not protected to the end; the hold is forgotten),
 * REDMUTEX_EWRONGTYPE, REDMUTEX_ECONN (the outcome is unknown; the hold is
 * kept so a retry can finish it), REDMUTEX_EFORKED (a child process tried to
 * release its parent's lock; nothing changed), REDMUTEX_ECLOSED, others as
 * for acquire.
 * Blocking: first until a renewal or another call on the same hold that is
 * in flight ends (each bounded as below), then at most T =
 * max(connect_timeout_ms, command_timeout_ms) for the release itself (a new
 * connection may take connect_timeout_ms): at most 2 x T while only the
 * watchdog competes. A server whose connection for this lock is still busy
 * with an earlier request at the deadline gets the release queued behind
 * it, sent when that connection is free (not waited for). Tested with two
 * of three servers stopped. Thread-safe.
 */
REDMUTEX_API int redmutex_lock_release(redmutex_lock *lock, const char *owner);

/** Modes for redmutex_lock_extend(). */
typedef enum redmutex_extend_mode {
    /** New TTL = remaining TTL + ms (redis-py's extend()). */
    REDMUTEX_EXTEND_ADD = 0,
    /** New TTL = ms (redis-py's extend(replace_ttl=True)). */
    REDMUTEX_EXTEND_REPLACE = 1
} redmutex_extend_mode;

/**
 * Extends the lease of `owner`'s hold by `ms` (or sets it to `ms`), only if
 * the owner still holds it; it never re-creates a lock that is gone.
 * Errors: REDMUTEX_ENOTOWNER (not held by this owner), REDMUTEX_ELOST (this
 * handle held it but it is gone), REDMUTEX_ELIMIT (max_extensions reached),
 * REDMUTEX_EINVAL, REDMUTEX_EREPLICAS, connection and server errors as for
 * acquire. Blocking: as release (2 x T at most while only the watchdog
 * competes), plus replica_timeout_ms when min_replicas > 0. Thread-safe.
 */
REDMUTEX_API int redmutex_lock_extend(redmutex_lock *lock, const char *owner, int64_t ms, redmutex_extend_mode mode);

/**
 * Deletes the lock whoever holds it and publishes the release, like
 * Redisson's forceUnlock(). *out (may be NULL) is 1 if a lock was deleted.
 * Local holds of this handle are forgotten. A fair lock passes on to the
 * head of its queue; a read (write) handle deletes the read-write lock only
 * while it is in read (write) mode, as Redisson's.
 * Errors: REDMUTEX_EWRONGTYPE (the key is not a lock of this kind; not
 * deleted), connection and server errors. Blocking: one command timeout.
 * Thread-safe.
 */
REDMUTEX_API int redmutex_lock_force_release(int *out, redmutex_lock *lock);

/*
 * The four queries below are views of the read redmutex_lock_inspect()
 * makes: one script call per server, all servers at once, over the client's
 * own connections (on a Cluster, at the master of the name's slot). Unlike
 * it they answer for the handle's own kind: a lock stored in another kind's
 * format is REDMUTEX_EWRONGTYPE, and a read-write handle sees its own side.
 */

/**
 * Asks the servers whether anyone holds the lock: *out = 1 or 0. With N
 * servers, 1 means a majority report it held. For the read side of a
 * read-write lock: read-locked (in read mode, or by a writer that also
 * reads); for the write side: write-locked.
 * Errors: REDMUTEX_EWRONGTYPE, connection and server errors.
 * Blocking: one command timeout. Thread-safe.
 */
REDMUTEX_API int redmutex_lock_is_locked(int *out, redmutex_lock *lock);

/**
 * Asks the servers whether `owner` (NULL: default owner) holds the lock:
 * *out = 1 or 0 (majority with N servers). Blocking: one command timeout.
 * Errors as for redmutex_lock_is_locked. Thread-safe.
 */
REDMUTEX_API int redmutex_lock_is_owned(int *out, redmutex_lock *lock, const char *owner);

/**
 * The lock's remaining time to live in ms as the servers see it: -2 if not
 * locked, -1 if locked without a TTL (a redis-py lock made with timeout=None).
 * With N servers, the time until fewer than a majority still hold it.
 * Blocking: one command timeout. Errors as for redmutex_lock_is_locked.
 * Thread-safe.
 */
REDMUTEX_API int redmutex_lock_ttl(int64_t *out, redmutex_lock *lock);

/**
 * The hold count of `owner` as the servers see it: for the hash kinds the
 * owner's field's value (0 when not held); for a plain lock 1 or 0.
 * Blocking: one command timeout. Errors as for redmutex_lock_is_locked.
 * Thread-safe.
 */
REDMUTEX_API int redmutex_lock_hold_count(int64_t *out, redmutex_lock *lock, const char *owner);

/** The current version of redmutex_lock_info. Since 1.1. */
#define REDMUTEX_LOCK_INFO_VERSION 1
/** Size of redmutex_lock_info.owner: an owner id of REDMUTEX_OWNER_MAX bytes, ":write", a NUL. Since 1.1. */
#define REDMUTEX_LOCK_INFO_OWNER_SIZE 264

/**
 * What the servers hold for a lock, whatever its kind: the answer of
 * redmutex_lock_inspect(). The caller sets `version` (the struct only ever
 * gains fields at its end; the library fills only those of the caller's
 * version); REDMUTEX_LOCK_INFO_INIT does it. Since 1.1.
 */
typedef struct redmutex_lock_info {
    /** REDMUTEX_LOCK_INFO_VERSION, set by the caller. */
    uint32_t version;
    /** 1 when a majority of the servers hold the lock (by anyone, either side of a read-write lock). */
    int32_t held;
    /**
     * What is stored under the name, as most of the servers that hold
     * something there report it: REDMUTEX_KIND_LOCK (a token),
     * REDMUTEX_KIND_RLOCK (a Redisson hash), REDMUTEX_KIND_FAIR (such a hash
     * with a queue of waiters, or the queue alone while the lock passes to
     * its head), REDMUTEX_KIND_READ or REDMUTEX_KIND_WRITE (a read-write
     * lock in read or write mode); -1 when nothing is. A fair lock that
     * nobody waits for stores exactly what a reentrant lock does: it is
     * reported as REDMUTEX_KIND_FAIR when the handle is a fair one, else as
     * REDMUTEX_KIND_RLOCK.
     */
    int32_t kind;
    /** How many servers answered (a majority at least, or the call fails). */
    uint32_t servers_answered;
    /** Time to live in ms as redmutex_lock_ttl() gives it: -2 not held, -1 held without a TTL. */
    int64_t ttl_ms;
    /** owner's hold count (1 for a plain lock); 0 when owner is "". */
    int64_t hold_count;
    /** The fencing counter, redisson_lock_token:{NAME}: the highest on any server; -1 when none was issued. */
    int64_t fence;
    /** Waiters in a fair lock's queue (the most any server reports); 0 for the other kinds. */
    int64_t queue_length;
    /**
     * Owners holding the read side of a read-write lock (a writer's own
     * read holds included; the most any server reports); 0 for the others.
     */
    int64_t readers;
    /**
     * The holder, as a majority of the servers agree on it (else ""): the
     * first 8 characters of a plain lock's token (the whole token would let
     * anyone release the lock), the Redisson hash field of a reentrant or
     * fair lock's owner, a read-write lock's writer ("<owner>:write") or,
     * in read mode, the first of its readers in byte order. Truncated to fit
     * and NUL-terminated. A reentrant lock's field is read with HGETALL: a
     * user whose ACL lacks it gets "" (see docs/security.md).
     * (REDMUTEX_LOCK_INFO_OWNER_SIZE bytes, spelt as a number for binding generators.)
     */
    char owner[264];
} redmutex_lock_info;

#define REDMUTEX_LOCK_INFO_INIT                                                                                        \
    {                                                                                                                  \
        REDMUTEX_LOCK_INFO_VERSION, 0, 0, 0, 0, 0, 0, 0, 0, { 0 }                                                      \
    }

/**
 * Reads what the servers hold under the lock's name, whatever kind of lock
 * it is (the handle's kind need not match): whether it is held, its kind,
 * owner, hold count, TTL, fencing counter, a fair lock's queue length and
 * a read-write lock's readers, into *out. One script call per server, all
 * servers at once (one round trip), over the client's own connections
 * (TLS, AUTH and ACL users as for every operation); reads only.
 *
 * The caller sets out->version (REDMUTEX_LOCK_INFO_INIT); the fields of that
 * version are written on success, nothing on failure.
 * Errors: REDMUTEX_EINVAL (NULL, version 0 or newer than this library's),
 * REDMUTEX_EWRONGTYPE (the key holds something that is no lock),
 * REDMUTEX_ECONN (fewer than a majority answered), REDMUTEX_EAUTH,
 * REDMUTEX_ESERVER, REDMUTEX_EPROTOCOL, REDMUTEX_ECLOSED, REDMUTEX_EFORKED.
 * Blocking: one command timeout (plus a connection's connect_timeout_ms).
 * Thread-safe. Since 1.1.
 */
REDMUTEX_API int redmutex_lock_inspect(redmutex_lock_info *out, redmutex_lock *lock);

/**
 * The local state of `owner`'s hold through this handle. Never blocks, sends
 * nothing. Errors: REDMUTEX_EINVAL. Thread-safe.
 */
REDMUTEX_API int redmutex_lock_state(redmutex_state *out, redmutex_lock *lock, const char *owner);

/**
 * The remaining validity of `owner`'s hold, in ms: how long the lock is
 * known to be held (lease - elapsed since the acquisition or last renewal
 * was sent - drift allowance, on CLOCK_MONOTONIC). 0 if not held.
 * Never blocks. Errors: REDMUTEX_EINVAL. Thread-safe.
 */
REDMUTEX_API int redmutex_lock_validity(int64_t *out, redmutex_lock *lock, const char *owner);

/**
 * The fencing token of `owner`'s current hold (the value issued by its
 * outermost acquisition). Never blocks. Errors: REDMUTEX_ENOTOWNER (not
 * held), REDMUTEX_EINVAL (fencing not enabled on the handle). Thread-safe.
 */
REDMUTEX_API int redmutex_lock_fence(int64_t *out, redmutex_lock *lock, const char *owner);

/* ------------------------------------------------------------------------ */
/* Events: lost-lock news on the caller's own thread                         */
/* ------------------------------------------------------------------------ */

/*
 * Every change of a hold to REDMUTEX_STATE_RENEWAL_FAILING or
 * REDMUTEX_STATE_LOST, and back to REDMUTEX_STATE_HELD when renewal recovers,
 * including the expiry of a lease given in the options, is queued in the
 * client, whether or not the lock has an on_lost callback. An event loop
 * polls the client's event fd and drains the queue on its own thread; a
 * language binding does the same instead of running code on the watchdog
 * thread. Changes of handles that were freed while holding are not queued.
 * The on_lost callbacks are given the same entries, in the same order: the
 * queue has two readers, the event fd and the watchdog thread. Entries
 * dropped for the event fd (see redmutex_client_events_dropped) still
 * reach on_lost.
 */

/**
 * A file descriptor that is readable (POLLIN) while events are queued for
 * this client. It is an eventfd owned by the client and made on the first
 * call: do not read, write or close it; drain the queue with
 * redmutex_client_next_event() until it returns 0. It stays the same number
 * for the client's life (also in a child after fork(), where it is a new
 * eventfd of the child's own) and is closed by the last free.
 * Returns the fd (>= 0), or REDMUTEX_EINVAL (NULL) or REDMUTEX_ENOMEM (no
 * descriptor available). Never blocks; thread-safe; works after close.
 * Since 1.1.
 */
REDMUTEX_API int redmutex_client_event_fd(redmutex_client *client);

/**
 * Pops the oldest queued event. Returns 1 with the out-parameters filled, 0
 * when the queue is empty (the event fd is then not readable), or a negative
 * code.
 *  - *lock_id: the redmutex_lock_id() of the handle whose hold changed (the
 *    handle may have been freed since).
 *  - *state: REDMUTEX_STATE_RENEWAL_FAILING, REDMUTEX_STATE_LOST, or
 *    REDMUTEX_STATE_HELD (renewal recovered).
 *  - owner: written NUL-terminated into owner[owner_size]: "" for a plain
 *    lock held by the handle itself, else the owner id, as the lock
 *    functions take it. owner may be NULL when owner_size is 0 (the owner is
 *    then not reported). REDMUTEX_OWNER_MAX + 1 bytes always suffice.
 * The queue holds at most 1024 events; on overflow the oldest are dropped
 * and counted (redmutex_client_events_dropped()).
 * Errors: REDMUTEX_EINVAL (NULL client, lock_id or state; owner NULL with
 * owner_size > 0; owner_size too small for this event's owner, in which case
 * the event stays queued). Never blocks; thread-safe; works after close.
 * Since 1.1.
 */
REDMUTEX_API int redmutex_client_next_event(redmutex_client *client, uint64_t *lock_id, redmutex_state *state,
                                            char *owner, size_t owner_size);

/**
 * How many events were dropped because the queue was full (0 for NULL).
 * Never blocks; thread-safe. Since 1.1.
 */
REDMUTEX_API uint64_t redmutex_client_events_dropped(const redmutex_client *client);

/* ------------------------------------------------------------------------ */
/* Pollable waits: acquiring from an event loop                              */
/* ------------------------------------------------------------------------ */

/*
 * redmutex_lock_acquire() waits on the calling thread. An event loop (Python
 * asyncio, a Ruby or Tcl event loop, libuv...) that must not give a thread
 * to every waiter uses a pollable wait instead:
 *
 *   redmutex_wait_new(&w, lock, owner);
 *   for (;;) {
 *       rc = redmutex_wait_try(w);            one attempt: one round trip
 *       if (rc != REDMUTEX_ETIMEDOUT) break;  0: held; < 0: an error
 *       ... until redmutex_client_next_ready() names redmutex_wait_id(w),
 *           poll redmutex_client_wait_fd() with the loop's other fds ...
 *   }
 *   redmutex_wait_free(w);
 *
 * A wait behaves like a blocked acquire: it is queued on the lock's release
 * channel (a release wakes it; a releasing thread of the same client may
 * hand it the lock in the release's round trip), and after each failed
 * attempt it is due again when the holder's lease ends, and at the latest
 * after the capped backoff (wait_backoff_cap_ms). The loop learns that a
 * wait is ready through one descriptor per client, whatever the number of
 * waits. The attempts run where the caller runs redmutex_wait_try(): on a
 * worker thread, if the loop must not block for a round trip.
 *
 * Timeouts and cancellation belong to the caller: stop trying and free the
 * wait. redmutex_client_interrupt() ends every pollable wait created before
 * it (since 1.1): each becomes ready, and its tries fail with REDMUTEX_EINTR
 * (see redmutex_wait_try); closing the client makes every wait ready, and
 * its next try fails with REDMUTEX_ECLOSED. The client's retry_count is not applied (the caller
 * counts attempts if it wants a cap).
 */

/** A pollable acquisition of one lock for one owner. */
typedef struct redmutex_wait redmutex_wait;

/**
 * Starts a pollable acquisition of `lock` for `owner` (NULL: the default
 * owner, see redmutex_lock_new(); for a reentrant lock that is the calling
 * thread, so event loops pass an explicit owner per task). Sends nothing:
 * the first redmutex_wait_try() makes the first attempt, and only a wait
 * that has to wait joins the lock's release channel (the client subscribes
 * to it in the background), so an uncontended acquisition costs one round
 * trip, as with redmutex_lock_acquire().
 *
 * Ownership: *out receives a new wait, freed with redmutex_wait_free(). It
 * holds a reference to the lock handle (and so to the client): the handle
 * may be freed before the wait. owner is copied.
 * Errors: REDMUTEX_EINVAL (NULL, bad owner), REDMUTEX_ECLOSED, REDMUTEX_ENOMEM
 * (also when no descriptor is left for the client's wait fd), REDMUTEX_ESYSTEM
 * (no random bytes for a plain lock's token).
 * Blocking: never (the client mutex only). Thread-safe.
 * Since 1.1.
 */
REDMUTEX_API int redmutex_wait_new(redmutex_wait **out, redmutex_lock *lock, const char *owner);

/**
 * The wait's id: a number > 0, unique in the process and never reused; what
 * redmutex_client_next_ready() reports. 0 for NULL. Never blocks; thread-safe.
 * Since 1.1.
 */
REDMUTEX_API uint64_t redmutex_wait_id(const redmutex_wait *wait);

/**
 * One step of the acquisition. Returns:
 *  - 0: the lock is held by the wait's owner (acquired by this attempt, or
 *    handed over by a releasing thread of the client, then without a round
 *    trip). The wait is finished: free it; the hold is the owner's, released
 *    with redmutex_lock_release() as usual.
 *  - REDMUTEX_ETIMEDOUT: held by another owner. The wait is reported by
 *    redmutex_client_next_ready() when it may be free (a release message, a
 *    hand-off's result, the holder's lease end, the backoff), and may be
 *    tried again then. Trying earlier is allowed; it costs a round trip.
 *  - REDMUTEX_EINTR: redmutex_client_interrupt() was called after the wait
 *    was created (before this try or during its round trip). The wait has
 *    ended with nothing held for it: a lock a releasing thread handed it is
 *    released, and a fair lock's wait has left the server's queue (then
 *    this try blocks one round trip, bounded by command_timeout_ms). Every
 *    later try returns REDMUTEX_EINTR again; free the wait. (As with
 *    redmutex_lock_acquire, a lock handed to it that cannot be given back
 *    makes the try return 0 instead: it is held.) Since 1.1.
 *  - any other error of redmutex_lock_acquire(), with nothing held
 *    (REDMUTEX_EINVAL also for a finished wait). The wait stays valid:
 *    free it, or try again.
 * A new wait whose lock other waits or threads of the client are queued for
 * does not try on its first call: it queues behind them (returns
 * REDMUTEX_ETIMEDOUT), unless its owner already holds the reentrant lock.
 * A wait for a fair lock (REDMUTEX_KIND_FAIR) joins the server's queue with
 * its first try and refreshes its place with each later one: it is due again
 * within 500 ms at the latest; a lock handed to it by a release is taken by
 * its next try. It makes no attempt (returns REDMUTEX_ETIMEDOUT) while an
 * earlier wait of the same owner in this client that may be handed the lock
 * is not freed (see redmutex_lock_acquire), and is ready again when that
 * wait is freed: an event loop that cancels a wait and retries before it
 * frees the cancelled one loses nothing.
 * Blocking: at most one attempt's budget, as redmutex_lock_acquire() with
 * wait_ms = 0 (one round trip, bounded by max(connect_timeout_ms,
 * command_timeout_ms), plus replica_timeout_ms with min_replicas).
 * Thread-safety: any thread, but not concurrently with another call on the
 * same wait (tries of one wait are made one after another).
 * Since 1.1.
 */
REDMUTEX_API int redmutex_wait_try(redmutex_wait *wait);

/**
 * Ends the wait and frees it; NULL is a no-op. Nothing stays held for it:
 * if a releasing thread has just handed the lock to the wait (its try did
 * not see it yet), the lock is released here; a fair lock handed to it by a
 * releasing script is given back to the next in the queue, before the next
 * wait of the same owner in this client may try. (If that release fails,
 * the hold stays recorded for the owner, who may release it, and ends with
 * its lease.) A lock the wait's try returned 0 for is not touched (it is
 * the owner's now).
 * Blocking: never, unless a releasing thread is acquiring for this wait at
 * this moment or has just done so: then up to that thread's round trip plus
 * one release (each bounded by one attempt's budget, see redmutex_wait_try).
 * A fair lock's wait that tried and did not acquire leaves the server's
 * queue here: one round trip (bounded by command_timeout_ms).
 * Event loops that must never block call it on a worker thread when the
 * last try did not return 0.
 * Thread-safety: any thread, in any order with the lock handle and the
 * client; not concurrently with another call on the same wait, nor after.
 * Since 1.1.
 */
REDMUTEX_API void redmutex_wait_free(redmutex_wait *wait);

/**
 * A file descriptor that is readable (POLLIN) while a wait of this client
 * is ready, or the time at which one becomes ready has come: register it
 * with the event loop once, and call redmutex_client_next_ready() until it
 * returns 0 whenever it is readable. It is an epoll instance owned by the
 * client (made on first use): do not read, write or close it. It stays the
 * same number for the client's life (in a child after fork() it is a fresh
 * instance under the same number) and is closed when the client's memory
 * goes (the last of redmutex_client_free() and the handles' frees).
 * Returns the fd (>= 0), REDMUTEX_EINVAL (NULL) or REDMUTEX_ENOMEM (no
 * descriptor available). Never blocks; thread-safe; works after close.
 * Since 1.1.
 */
REDMUTEX_API int redmutex_client_wait_fd(redmutex_client *client);

/**
 * Pops the oldest ready wait of the client: returns 1 with *wait_id set to
 * its redmutex_wait_id(), or 0 when none is ready (the wait fd is then not
 * readable, until the next wait becomes ready). A wait is reported once per
 * time it becomes ready; one that was freed meanwhile is not reported.
 * Errors: REDMUTEX_EINVAL (NULL argument). Never blocks; thread-safe;
 * works after close.
 * Since 1.1.
 */
REDMUTEX_API int redmutex_client_next_ready(redmutex_client *client, uint64_t *wait_id);

/* ------------------------------------------------------------------------ */
/* Statistics (since 1.1)                                                    */
/* ------------------------------------------------------------------------ */

/*
 * Every client counts what it does: how long acquisitions waited and how
 * they ended, how long locks were held, renewals and losses, and each
 * server's round trips and failures. The numbers are the metrics of
 * docs/observability.md (Prometheus names: redmutex_acquire_wait_seconds,
 * redmutex_hold_seconds, redmutex_locks_held, redmutex_waiters,
 * redmutex_renewals_total, redmutex_locks_lost_total,
 * redmutex_server_round_trip_seconds, redmutex_server_errors_total), which
 * the Python package and the bindings read from here.
 *
 * Counting is relaxed atomic additions where the numbers are known; it
 * allocates nothing. A snapshot reads each number once: taken while other
 * threads work, two numbers may be a moment apart (a histogram's count is
 * always the sum of its buckets). Counters only grow for the client's life;
 * in a child after fork() they start again from zero. Times are
 * CLOCK_MONOTONIC nanoseconds. REDMUTEX_CLIENT_NO_STATS turns counting off.
 */

/** Buckets of every histogram; the last one is +Inf. */
#define REDMUTEX_STATS_BUCKETS 21
/** Room for the lock kinds, indexed by redmutex_kind (kinds added later fill the spare rows). */
#define REDMUTEX_STATS_KINDS 8
/** How an acquisition ended: redmutex_acquire_outcome. */
#define REDMUTEX_STATS_OUTCOMES 4
/** How a renewal ended: redmutex_renewal_outcome. */
#define REDMUTEX_STATS_RENEWAL_OUTCOMES 3
/** Room for the classes of server errors, redmutex_server_error (classes added later fill the rest). */
#define REDMUTEX_STATS_ERROR_CLASSES 8
/** The current version of redmutex_stats and redmutex_server_stats. */
#define REDMUTEX_STATS_VERSION 1

/** How an acquisition ended (label `outcome` of redmutex_acquire_wait_seconds). */
typedef enum redmutex_acquire_outcome {
    /** "acquired": the lock was had. */
    REDMUTEX_ACQUIRE_ACQUIRED = 0,
    /** "timeout": held by another owner until the wait ran out (also a try with no wait). */
    REDMUTEX_ACQUIRE_TIMEOUT = 1,
    /** "interrupted": redmutex_client_interrupt(), the interrupt callback, or a close ended the wait. */
    REDMUTEX_ACQUIRE_INTERRUPTED = 2,
    /** "error": any other failure (servers unreachable, wrong type, a lost earlier hold...). */
    REDMUTEX_ACQUIRE_ERROR = 3
} redmutex_acquire_outcome;

/** How one renewal of one hold by the watchdog ended (label `outcome` of redmutex_renewals_total). */
typedef enum redmutex_renewal_outcome {
    /** "renewed": a majority extended the lease. */
    REDMUTEX_RENEWAL_RENEWED = 0,
    /** "failed": no majority answered; the hold may still be valid (RENEWAL_FAILING). */
    REDMUTEX_RENEWAL_FAILED = 1,
    /** "lost": the servers answered that the lock is gone, or its validity ran out. */
    REDMUTEX_RENEWAL_LOST = 2
} redmutex_renewal_outcome;

/** Classes of a server's failures (label `error` of redmutex_server_errors_total). */
typedef enum redmutex_server_error {
    /** "timeout": the server did not answer within the request's deadline. */
    REDMUTEX_SERVER_ERROR_TIMEOUT = 0,
    /** "connection": could not connect (refused, TLS failed...) or the connection broke. */
    REDMUTEX_SERVER_ERROR_CONNECTION = 1,
    /** "protocol": a malformed reply, or more replies than asked for. */
    REDMUTEX_SERVER_ERROR_PROTOCOL = 2,
    /** "auth": the credentials or ACL permissions were refused. */
    REDMUTEX_SERVER_ERROR_AUTH = 3,
    /** "reply": an error reply (LOADING, READONLY, OOM, BUSY, WRONGTYPE...). */
    REDMUTEX_SERVER_ERROR_REPLY = 4,
    /** "duplicate": the URL leads to a server another URL of the client reaches. */
    REDMUTEX_SERVER_ERROR_DUPLICATE = 5
} redmutex_server_error;

/** A histogram of durations with the fixed buckets of redmutex_stats.bucket_bounds_ns. */
typedef struct redmutex_histogram {
    /** Observations: the sum of buckets[]. */
    uint64_t count;
    /** Their total, in nanoseconds. */
    uint64_t sum_ns;
    /**
     * Observations per bucket, not cumulative: buckets[i] counts those above
     * bucket_bounds_ns[i-1] and at most bucket_bounds_ns[i] (a Prometheus
     * `le` bucket is the sum of buckets[0..i]).
     */
    uint64_t buckets[REDMUTEX_STATS_BUCKETS];
} redmutex_histogram;

/** A snapshot of a client's statistics. Since 1.1. */
typedef struct redmutex_stats {
    /** In: REDMUTEX_STATS_VERSION (or an older version); only that version's fields are written. */
    uint32_t version;
    /** 1 while the client counts; 0 with REDMUTEX_CLIENT_NO_STATS (everything else is then 0). */
    uint32_t counting;
    /**
     * The upper bound of each histogram bucket, in nanoseconds: 100 µs,
     * 250 µs, 500 µs, 1, 2.5, 5, 10, 25, 50, 100, 250, 500 ms, 1, 2.5, 5,
     * 10, 30, 60, 300, 3600 s, and UINT64_MAX for +Inf.
     */
    uint64_t bucket_bounds_ns[REDMUTEX_STATS_BUCKETS];
    /**
     * redmutex_lock_acquire() calls, and pollable waits, by kind and outcome:
     * from the call (redmutex_wait_new()) to its end (the acquiring
     * redmutex_wait_try(), or redmutex_wait_free() without the lock: timeout
     * when its last try found the lock held, error when it failed). Calls
     * refused before anything was sent (bad arguments, closed client) are
     * not counted. An uncontended acquisition is one round trip.
     */
    redmutex_histogram acquire_wait[REDMUTEX_STATS_KINDS][REDMUTEX_STATS_OUTCOMES];
    /**
     * Holds by kind, from the acquisition (when its request was sent) to the
     * release that ended it (one sample per outermost hold of a reentrant
     * lock), or to the moment it was known lost.
     */
    redmutex_histogram hold[REDMUTEX_STATS_KINDS];
    /** Holds of this process not known lost or released (a gauge). */
    int64_t locks_held;
    /** Acquisitions waiting now: blocked calls past their first attempt, pollable waits that tried (a gauge). */
    int64_t waiters;
    /** Renewals of holds by the watchdog, by redmutex_renewal_outcome. */
    uint64_t renewals[REDMUTEX_STATS_RENEWAL_OUTCOMES];
    /** Holds that turned REDMUTEX_STATE_LOST. */
    uint64_t locks_lost;
    /** How many servers redmutex_client_server_stats() reports (indexes 0 to server_count - 1). */
    uint64_t server_count;
} redmutex_stats;

/** A snapshot of one server's statistics. Since 1.1. */
typedef struct redmutex_server_stats {
    /** In: REDMUTEX_STATS_VERSION (or an older version). */
    uint32_t version;
    /** 1 when the server's last request was answered, 0 when it failed or none was made. */
    uint32_t reachable;
    /**
     * The server's address as messages show it (the URL, password masked),
     * owned by the client: valid until redmutex_client_free().
     */
    const char *address;
    /** Requests answered, from when each was sent to its last reply (connecting not included). */
    redmutex_histogram round_trip;
    /** Requests that failed at this server, by redmutex_server_error. */
    uint64_t errors[REDMUTEX_STATS_ERROR_CLASSES];
} redmutex_server_stats;

/**
 * Writes a snapshot of the client's statistics into *out, whose `version`
 * the caller sets (REDMUTEX_STATS_VERSION); only that version's fields are
 * written. Since 1.1.
 * Errors: REDMUTEX_EINVAL (NULL, version 0 or newer than this library's).
 * Never blocks, allocates nothing, works after close (the counts of a
 * closed client stay as they were). Thread-safe: any thread, at any time.
 */
REDMUTEX_API int redmutex_client_stats(redmutex_client *client, redmutex_stats *out);

/**
 * Writes a snapshot of server number `index` (0 to server_count - 1 of
 * redmutex_client_stats()) into *out, whose `version` the caller sets. A
 * server keeps its index for the client's life; servers are numbered in the
 * order of the client's URLs. Since 1.1.
 * Errors: REDMUTEX_EINVAL (NULL, bad version, index out of range).
 * Never blocks, allocates nothing, works after close. Thread-safe.
 */
REDMUTEX_API int redmutex_client_server_stats(redmutex_client *client, size_t index, redmutex_server_stats *out);

/* ------------------------------------------------------------------------ */
/* Semaphores: at most N holders at once (since 1.1)                         */
/* ------------------------------------------------------------------------ */

/*
 * A counting semaphore in Redisson's RPermitExpirableSemaphore format
 * (docs/wire-format.md): a Java service using Redisson's
 * RPermitExpirableSemaphore and a redmutex client on the same name take
 * permits from one capacity. Each acquisition gets a permit id with a lease,
 * so a holder that dies gives its permits back when the lease ends; while
 * held, the watchdog renews the lease (a permit acquired with lease_ms = 0),
 * batched with the client's locks. Waiting is by notification on the
 * semaphore's channel (redisson_sc:{NAME}), as for locks.
 *
 * A semaphore handle is separate from a lock handle: its holds are permits,
 * named by permit ids that each acquisition returns, not owners; any thread
 * may release a permit acquired by another (like a POSIX semaphore). The
 * lost-permit events of redmutex_client_next_event() name the handle by
 * redmutex_semaphore_id() and the permit by its id (the `owner`).
 *
 * Redlock (a client with N servers): a semaphore of capacity K holds a
 * permit when Q = floor(K * N / (K + 1)) + 1 servers grant it, and releases
 * it everywhere. Each server grants at most K permits, so at most K * N / Q
 * < K + 1 permits can be held at once: never more than K. For K = 1 that is
 * Redlock's majority; for larger K it grows towards N, so such a semaphore
 * tolerates fewer unreachable servers (with N = 5: K = 1 tolerates 2,
 * K = 2 or 3 tolerate 1, K >= 4 none). See docs/safety.md.
 */

/** A named semaphore on a client's servers. Since 1.1. */
typedef struct redmutex_semaphore redmutex_semaphore;

/** Most permits a semaphore may have. Since 1.1. */
#define REDMUTEX_SEMAPHORE_PERMITS_MAX ((int64_t)1000000000)
/** Most permits one acquisition may take. Since 1.1. */
#define REDMUTEX_ACQUIRE_PERMITS_MAX 1024
/**
 * Room for a permit id and its NUL: 32 hex digits (Redisson's permit id),
 * followed by "*<k>" for an acquisition of k > 1 permits. Since 1.1.
 */
#define REDMUTEX_PERMIT_ID_SIZE 48

/**
 * Called when a held permit changes to REDMUTEX_STATE_RENEWAL_FAILING or
 * REDMUTEX_STATE_LOST (and back to HELD when renewal recovers), as
 * redmutex_lost_fn is for locks, on the watchdog thread and under the same
 * rules. `permit_id` is valid only during the call. Since 1.1.
 */
typedef void (*redmutex_permit_lost_fn)(redmutex_semaphore *sem, const char *permit_id, redmutex_state state,
                                        void *payload);

/** Bits for redmutex_semaphore_options.flags. Since 1.1. */
enum {
    /** Each acquisition increments the fencing counter redisson_lock_token:{NAME} and gets its value. */
    REDMUTEX_SEMAPHORE_FENCING = 1u << 0,
    /**
     * The semaphore's capacity on the servers is set to this handle's
     * `permits` when they differ (Redisson's setPermits: the permits held
     * stay held; fewer available until enough are released). Without it a
     * different capacity is an error (REDMUTEX_EINVAL) and nothing changes.
     */
    REDMUTEX_SEMAPHORE_RESIZE = 1u << 1
};

#define REDMUTEX_SEMAPHORE_OPTIONS_VERSION 1

/** Semaphore options. Fill with redmutex_semaphore_options_init() or REDMUTEX_SEMAPHORE_OPTIONS_INIT. Since 1.1. */
typedef struct redmutex_semaphore_options {
    /** REDMUTEX_SEMAPHORE_OPTIONS_VERSION. */
    uint32_t version;
    /** REDMUTEX_SEMAPHORE_* bits. Default 0. */
    uint32_t flags;
    /**
     * Lease of each permit in milliseconds. 0 (the default): the client's
     * watchdog_lease_ms, renewed by the watchdog while held. A lease given
     * here is not renewed (extend it with redmutex_semaphore_extend()).
     */
    int64_t lease_ms;
    /** Watchdog: stop renewing a permit held this long (0 = no cap). */
    int64_t max_hold_ms;
    /** Most extensions (explicit or by the watchdog) per acquisition (0 = no cap). */
    int64_t max_extensions;
    /** See redmutex_permit_lost_fn. Default NULL. */
    redmutex_permit_lost_fn on_lost;
    /** Passed to on_lost. */
    void *on_lost_payload;
} redmutex_semaphore_options;

#define REDMUTEX_SEMAPHORE_OPTIONS_INIT                                                                                \
    {                                                                                                                  \
        REDMUTEX_SEMAPHORE_OPTIONS_VERSION, 0, 0, 0, 0, 0, 0                                                           \
    }

/**
 * Fills `opts` with the defaults for `version` (REDMUTEX_SEMAPHORE_OPTIONS_VERSION).
 * Errors: REDMUTEX_EINVAL (NULL, version 0 or newer than this library's).
 * Does not block; thread-safe. Since 1.1.
 */
REDMUTEX_API int redmutex_semaphore_options_init(redmutex_semaphore_options *opts, unsigned int version);

/**
 * Makes a handle for the semaphore `name` with `permits` permits
 * (1..REDMUTEX_SEMAPHORE_PERMITS_MAX). Sends nothing: the first acquisition
 * creates the semaphore with that capacity when it does not exist
 * (Redisson's trySetPermits), and fails with REDMUTEX_EINVAL, changing
 * nothing, when it exists with another capacity (unless
 * REDMUTEX_SEMAPHORE_RESIZE). `name` is used verbatim as the counter's key,
 * 1..REDMUTEX_NAME_MAX bytes.
 * Ownership: *out receives a new handle that keeps the client's memory
 * alive; free it with redmutex_semaphore_free(). name and opts are copied.
 * Errors: REDMUTEX_EINVAL (NULL, bad name, permits out of range, bad
 * options), REDMUTEX_ECLOSED, REDMUTEX_ENOMEM. Does not block. Thread-safe.
 * Since 1.1.
 */
REDMUTEX_API int redmutex_semaphore_new(redmutex_semaphore **out, redmutex_client *client, const char *name,
                                        int64_t permits, const redmutex_semaphore_options *opts);

/**
 * Frees the handle. Permits it still holds are not released now: their
 * renewal stops and they come back at the end of their lease (or when the
 * client is closed before that, which releases them), as for a lock handle
 * freed while holding. No on_lost callback starts after this returns.
 * NULL is a no-op. Blocking and thread-safety as redmutex_lock_free().
 * Since 1.1.
 */
REDMUTEX_API void redmutex_semaphore_free(redmutex_semaphore *sem);

/** The semaphore's name (owned by the handle; "" for NULL). Thread-safe. Since 1.1. */
REDMUTEX_API const char *redmutex_semaphore_name(const redmutex_semaphore *sem);

/**
 * The handle's id (> 0, unique in the process, 0 for NULL): the lock_id of
 * its permits' events (redmutex_client_next_event). Thread-safe. Since 1.1.
 */
REDMUTEX_API uint64_t redmutex_semaphore_id(const redmutex_semaphore *sem);

/** The capacity the handle was made with (0 for NULL). Thread-safe. Since 1.1. */
REDMUTEX_API int64_t redmutex_semaphore_permits(const redmutex_semaphore *sem);

/**
 * Acquires `permits` permits (1..REDMUTEX_ACQUIRE_PERMITS_MAX, and at most
 * the capacity) as one hold, and writes its permit id into out[size]
 * (REDMUTEX_PERMIT_ID_SIZE bytes suffice). wait_ms as for
 * redmutex_lock_acquire(): 0 tries once, REDMUTEX_WAIT_FOREVER waits as
 * long as it takes. While waiting, the client listens on the semaphore's
 * channel and tries again when permits are released, when the first lease
 * of a holder ends, and at the latest after the capped backoff. Threads of
 * one client waiting for the same semaphore are served in order, and a
 * release may hand its permits to the oldest in its round trip.
 * Errors: REDMUTEX_ETIMEDOUT (not enough permits free when the wait ran
 * out), REDMUTEX_EINVAL (bad argument, or the semaphore exists with another
 * capacity: nothing was changed), REDMUTEX_EWRONGTYPE, and the others of
 * redmutex_lock_acquire(). On any error nothing is held and out is left
 * untouched. Blocking: as redmutex_lock_acquire(). Thread-safe. Since 1.1.
 */
REDMUTEX_API int redmutex_semaphore_acquire(char *out, size_t size, redmutex_semaphore *sem, int64_t permits,
                                            int64_t wait_ms);

/**
 * Releases the permits of `permit_id` (the id an acquisition returned; any
 * thread may release it) and publishes the count available. Renewal of it
 * stops before the call returns. Idempotent across retries, as
 * redmutex_lock_release().
 * Errors: REDMUTEX_ENOTOWNER (no such permit is held: nothing changed),
 * REDMUTEX_ELOST (it was held through this handle but its lease ended or it
 * was taken away before the release; whatever was left of it is given
 * back), REDMUTEX_EINVAL (malformed id), connection and server errors as for
 * redmutex_lock_release() (REDMUTEX_ECONN: outcome unknown, retry). A
 * permit id of another client or of Redisson may be released too (nothing
 * is known of it locally). Blocking: as redmutex_lock_release().
 * Thread-safe. Since 1.1.
 */
REDMUTEX_API int redmutex_semaphore_release(redmutex_semaphore *sem, const char *permit_id);

/**
 * Extends the lease of a held permit by `ms` (or sets it to `ms`), only if
 * it is still held: it never re-creates a permit. Errors and blocking as
 * redmutex_lock_extend(). Thread-safe. Since 1.1.
 */
REDMUTEX_API int redmutex_semaphore_extend(redmutex_semaphore *sem, const char *permit_id, int64_t ms,
                                           redmutex_extend_mode mode);

/**
 * How many permits an acquisition could take now, as the servers see it
 * (the available count plus permits whose lease ended and which the next
 * acquisition reclaims); the handle's capacity when the semaphore does not
 * exist on the servers yet. With N servers: the value a quorum reaches
 * (the Q-th largest). *capacity (may be NULL) gets the capacity on the
 * servers (0 when absent). Reads only.
 * Errors: REDMUTEX_EWRONGTYPE, connection and server errors.
 * Blocking: one command timeout. Thread-safe. Since 1.1.
 */
REDMUTEX_API int redmutex_semaphore_available(int64_t *out, int64_t *capacity, redmutex_semaphore *sem);

/**
 * The local state of a permit acquired through this handle
 * (REDMUTEX_STATE_UNLOCKED when it is not held through it). Never blocks.
 * Errors: REDMUTEX_EINVAL. Thread-safe. Since 1.1.
 */
REDMUTEX_API int redmutex_semaphore_state(redmutex_state *out, redmutex_semaphore *sem, const char *permit_id);

/** The remaining validity of a permit held through this handle, in ms (0 if not held). Never blocks. Since 1.1. */
REDMUTEX_API int redmutex_semaphore_validity(int64_t *out, redmutex_semaphore *sem, const char *permit_id);

/**
 * The fencing token of a permit held through this handle. Errors:
 * REDMUTEX_ENOTOWNER (not held), REDMUTEX_EINVAL (no REDMUTEX_SEMAPHORE_FENCING).
 * Never blocks. Thread-safe. Since 1.1.
 */
REDMUTEX_API int redmutex_semaphore_fence(int64_t *out, redmutex_semaphore *sem, const char *permit_id);

/**
 * A pollable acquisition of `permits` permits (see the pollable waits
 * above): its permit id is chosen now and written into out[size];
 * redmutex_wait_try() returns 0 once that permit is held (released with
 * redmutex_semaphore_release() as usual), and redmutex_wait_free() ends the
 * wait. Errors: as redmutex_semaphore_acquire()'s argument checks, and
 * those of redmutex_wait_new(). Never blocks. Thread-safe. Since 1.1.
 */
REDMUTEX_API int redmutex_semaphore_wait_new(redmutex_wait **out, char *permit_id, size_t size, redmutex_semaphore *sem,
                                             int64_t permits);

/* ------------------------------------------------------------------------ */
/* Count-down latches (since 1.1)                                            */
/* ------------------------------------------------------------------------ */

/*
 * A count-down latch in Redisson's RCountDownLatch format: a count that
 * workers count down and waiters wait to reach zero, shared with Java
 * services using RCountDownLatch on the same name (a latch counted down
 * from Java releases a redmutex waiter and the other way round). The count
 * is the key NAME; zero is an absent key. Waiting is by notification on
 * redisson_countdownlatch__channel__{NAME}.
 *
 * With N servers every call goes to all of them: a count is set when a
 * majority set it, count() is the count a majority has reached, and a wait
 * ends when a majority is at zero. A count_down() whose outcome is unknown
 * (REDMUTEX_ECONN) may have counted on some servers: it is not retried for
 * the caller, as a retry could count twice.
 */

/** A named count-down latch on a client's servers. Since 1.1. */
typedef struct redmutex_latch redmutex_latch;

/**
 * Makes a handle for the latch `name` (1..REDMUTEX_NAME_MAX bytes, the key
 * used verbatim). Sends nothing. Ownership: *out receives a new handle that
 * keeps the client's memory alive; free it with redmutex_latch_free().
 * Errors: REDMUTEX_EINVAL (NULL, bad name), REDMUTEX_ECLOSED, REDMUTEX_ENOMEM.
 * Does not block. Thread-safe. Since 1.1.
 */
REDMUTEX_API int redmutex_latch_new(redmutex_latch **out, redmutex_client *client, const char *name);

/**
 * Frees the handle (the latch on the servers is untouched). NULL is a
 * no-op. No call on the handle, and no pollable wait of it, may be in
 * progress or follow. Never blocks. Since 1.1.
 */
REDMUTEX_API void redmutex_latch_free(redmutex_latch *latch);

/** The latch's name (owned by the handle; "" for NULL). Thread-safe. Since 1.1. */
REDMUTEX_API const char *redmutex_latch_name(const redmutex_latch *latch);

/**
 * Sets the count to `count` (>= 1) if the latch has none (Redisson's
 * trySetCount): *out (may be NULL) is 1 when it was set, 0 when a count
 * was there already (it is left as it is). Errors: REDMUTEX_EINVAL (count
 * < 1), REDMUTEX_EWRONGTYPE (the key holds no count; nothing changed),
 * connection and server errors. Blocking: one command timeout.
 * Thread-safe. Since 1.1.
 */
REDMUTEX_API int redmutex_latch_try_set_count(int *out, redmutex_latch *latch, int64_t count);

/**
 * Counts down by one; at zero the latch opens (its key goes) and every
 * waiter is woken. Counting down an open latch does nothing. Errors:
 * REDMUTEX_EWRONGTYPE, connection and server errors (REDMUTEX_ECONN: it may
 * or may not have counted). Blocking: one command timeout. Thread-safe.
 * Since 1.1.
 */
REDMUTEX_API int redmutex_latch_count_down(redmutex_latch *latch);

/**
 * The current count (0 when open or never set). Reads only. Errors as
 * redmutex_latch_count_down(). Blocking: one command timeout. Thread-safe.
 * Since 1.1.
 */
REDMUTEX_API int redmutex_latch_count(int64_t *out, redmutex_latch *latch);

/**
 * Waits until the count is zero: returns 0 at once when it is, else waits
 * up to wait_ms (0: does not wait; REDMUTEX_WAIT_FOREVER). Errors:
 * REDMUTEX_ETIMEDOUT (not zero when the wait ran out), REDMUTEX_EINTR
 * (redmutex_client_interrupt() or the interrupt callback), REDMUTEX_ECLOSED,
 * REDMUTEX_EINVAL (bad wait), REDMUTEX_EWRONGTYPE, connection and server
 * errors. Blocking: at most wait_ms plus one command timeout. Thread-safe.
 * Since 1.1.
 */
REDMUTEX_API int redmutex_latch_wait(redmutex_latch *latch, int64_t wait_ms);

/**
 * Deletes the latch's count (Redisson's delete()): *out (may be NULL) is 1
 * when a count was deleted. Waiters keep waiting for a new count to reach
 * zero. Blocking: one command timeout. Thread-safe. Since 1.1.
 */
REDMUTEX_API int redmutex_latch_delete(int *out, redmutex_latch *latch);

/**
 * A pollable wait for the latch to reach zero (see the pollable waits
 * above): redmutex_wait_try() returns 0 once it is (one round trip per
 * try), REDMUTEX_ETIMEDOUT while it is not; the wait is then reported by
 * redmutex_client_next_ready() on the latch's messages and after the capped
 * backoff. Free it with redmutex_wait_free() before the latch handle.
 * Errors: REDMUTEX_EINVAL, REDMUTEX_ECLOSED, REDMUTEX_ENOMEM. Never blocks.
 * Thread-safe. Since 1.1.
 */
REDMUTEX_API int redmutex_latch_wait_new(redmutex_wait **out, redmutex_latch *latch);

/* ------------------------------------------------------------------------ */
/* Multi-locks: all of several locks or none (since 1.1)                     */
/* ------------------------------------------------------------------------ */

/*
 * RedissonMultiLock's semantics over lock handles of one client, of any
 * kinds: redmutex_multi_lock_acquire() holds every lock when it returns 0
 * and none when it fails, and redmutex_multi_lock_release() releases them
 * all. Each lock is an ordinary hold of its handle (renewed by the watchdog,
 * its own lost-lock events, queries through the handle), so processes that
 * take the same locks one by one, redmutex or Redisson, exclude a
 * multi-lock and are excluded by it.
 *
 * Deadlock-free: an attempt takes the whole set, and one that does not get
 * every lock gives back what it got before it waits; nobody waits while
 * holding part of a set, so two multi-locks over overlapping sets in any
 * orders never block each other for good. The wait listens on the channel
 * of the lock that was busy and tries the set again on its release, its
 * holder's lease end, or the capped backoff; after an attempt that got part
 * of the set it pauses a random time up to retry_delay_ms first.
 *
 * Cost: with one server, one round trip per attempt and per release for up
 * to 8 locks (7 with min_replicas), unless a lock is fair or held already
 * by the owner; otherwise, and with Redlock, one attempt per lock, in a
 * fixed order. A fair lock in a multi-lock is tried, never queued for.
 */

/** A set of locks acquired and released together. Since 1.1. */
typedef struct redmutex_multi_lock redmutex_multi_lock;

/** Most locks in one multi-lock. Since 1.1. */
#define REDMUTEX_MULTI_LOCK_MAX 64

/**
 * Makes a multi-lock over locks[0..n) (1..REDMUTEX_MULTI_LOCK_MAX handles of
 * one client, different names; not semaphores). Sends nothing. The
 * multi-lock keeps a reference to each handle (they may be freed before
 * it). Ownership: *out receives a new multi-lock, freed with
 * redmutex_multi_lock_free(). Errors: REDMUTEX_EINVAL (NULL, n out of
 * range, handles of different clients, a name twice), REDMUTEX_ENOMEM.
 * Does not block. Thread-safe. Since 1.1.
 */
REDMUTEX_API int redmutex_multi_lock_new(redmutex_multi_lock **out, redmutex_lock *const *locks, size_t n);

/**
 * Frees the multi-lock (holds it acquired stay held, released through
 * their handles or redmutex_multi_lock_release() of another multi-lock over
 * them). NULL is a no-op. No call on it may be in progress or follow.
 * Never blocks. Since 1.1.
 */
REDMUTEX_API void redmutex_multi_lock_free(redmutex_multi_lock *multi);

/** The number of locks in the multi-lock (0 for NULL). Thread-safe. Since 1.1. */
REDMUTEX_API size_t redmutex_multi_lock_size(const redmutex_multi_lock *multi);

/**
 * Acquires every lock of the set for `owner` (NULL: each lock's default
 * owner, see redmutex_lock_new()), or none. wait_ms as for
 * redmutex_lock_acquire(). Errors: REDMUTEX_ETIMEDOUT (a lock was held by
 * another owner when the wait ran out; the message names it) and the other
 * errors of redmutex_lock_acquire(); on any error nothing of the set is
 * held. Blocking: at most wait_ms plus one attempt's budget per lock (one
 * for the set, with one server) and one release. Thread-safe. Since 1.1.
 */
REDMUTEX_API int redmutex_multi_lock_acquire(redmutex_multi_lock *multi, const char *owner, int64_t wait_ms);

/**
 * Releases every lock of the set that `owner` holds through the set's
 * handles (one hold each: a reentrant lock acquired again outside the set
 * keeps those levels). Errors: as redmutex_lock_release() for the first
 * lock in name order that failed (the others are released all the same),
 * REDMUTEX_ENOTOWNER when a lock of the set was not held (the others were
 * released). Blocking: one command timeout per 8 locks (first until a
 * renewal in flight ends, as for a lock). Thread-safe. Since 1.1.
 */
REDMUTEX_API int redmutex_multi_lock_release(redmutex_multi_lock *multi, const char *owner);

/**
 * A pollable acquisition of the set for `owner` (see the pollable waits
 * above): redmutex_wait_try() makes one attempt at the whole set and
 * returns 0 when every lock is held (released with
 * redmutex_multi_lock_release()), REDMUTEX_ETIMEDOUT when a lock was busy
 * (the wait is then ready on its release, its holder's lease end or the
 * backoff). Free the wait before the multi-lock. Errors: REDMUTEX_EINVAL,
 * REDMUTEX_ECLOSED, REDMUTEX_ENOMEM, REDMUTEX_ESYSTEM. Never blocks.
 * Thread-safe. Since 1.1.
 */
REDMUTEX_API int redmutex_multi_lock_wait_new(redmutex_wait **out, redmutex_multi_lock *multi, const char *owner);

#ifdef __cplusplus
}
#endif

#endif /* REDMUTEX_H */
