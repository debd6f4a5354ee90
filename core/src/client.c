/*
 * Clients: options, creation and destruction, and fork handling: the top
 * of the layers (docs/architecture.md). The connection pools and the
 * servers' run_ids are pool.c's.
 */
#define _GNU_SOURCE
#include "client.h"
#include "conn.h"
#include "deploy.h"
#include "events.h"
#include "fanout.h"
#include "holds.h"
#include "internal.h"
#include "interrupt.h"
#include "options.h"
#include "pollwait.h"
#include "pool.h"
#include "quorum.h"
#include "sentinel.h"
#include "tls.h"
#include "unsettled.h"
#include "url.h"
#include "subscriber.h"
#include "watchdog.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const redmutex_client_options default_client_options = REDMUTEX_CLIENT_OPTIONS_INIT;

/* The struct's size in each version (options.c). A new version appends its
   fields and its size here: RM_OPTIONS_END(redmutex_client_options, <its last field>). */
static const size_t client_options_sizes[] = {
    0, RM_OPTIONS_END(redmutex_client_options, interrupt_payload), /* 1 */
    RM_OPTIONS_END(redmutex_client_options, tls_server_name),      /* 2: TLS */
    RM_OPTIONS_END(redmutex_client_options, log_payload),          /* 3: log messages */
};
_Static_assert(sizeof client_options_sizes / sizeof client_options_sizes[0] == REDMUTEX_CLIENT_OPTIONS_VERSION + 1,
               "one size per client options version");

static const rm_options_layout client_options_layout = {"client options", "redmutex_client_options_init",
                                                        &default_client_options, client_options_sizes,
                                                        REDMUTEX_CLIENT_OPTIONS_VERSION + 1};

int redmutex_client_options_init(redmutex_client_options *opts, unsigned int version)
{
    rm_err e_, *err = rm_err_reset(&e_);
    return rm_publish(err, rm_options_init(err, opts, version, &client_options_layout));
}

static int check_ms(rm_err *err, const char *field, int64_t v, int64_t min)
{
    if (v < min || v > REDMUTEX_TIME_MAX_MS)
        return rm_fail(err, REDMUTEX_EINVAL, "client option %s = %lld is out of range (%lld..%lld ms)", field,
                       (long long)v, (long long)min, (long long)REDMUTEX_TIME_MAX_MS);
    return 0;
}

static int check_options(rm_err *err, const redmutex_client_options *o)
{
    const uint32_t known = REDMUTEX_CLIENT_LEAVE_LOCKS_ON_FREE | REDMUTEX_CLIENT_TLS_NO_VERIFY |
                           REDMUTEX_CLIENT_TLS_NO_HOSTNAME_CHECK | REDMUTEX_CLIENT_NO_STATS;
    if (o->flags & ~known)
        return rm_fail(err, REDMUTEX_EINVAL, "client options: unknown flags 0x%x", o->flags);
    int rc;
    if ((rc = check_ms(err, "connect_timeout_ms", o->connect_timeout_ms, 1)) ||
        (rc = check_ms(err, "command_timeout_ms", o->command_timeout_ms, 1)) ||
        (rc = check_ms(err, "watchdog_lease_ms", o->watchdog_lease_ms, 30)) ||
        (rc = check_ms(err, "wait_backoff_cap_ms", o->wait_backoff_cap_ms, 1)) ||
        (rc = check_ms(err, "retry_delay_ms", o->retry_delay_ms, 0)) ||
        (rc = check_ms(err, "replica_timeout_ms", o->replica_timeout_ms, 1)) ||
        (rc = check_ms(err, "shutdown_timeout_ms", o->shutdown_timeout_ms, 0)))
        return rc;
    if (o->retry_count < 0 || o->retry_count > 1000000)
        return rm_fail(err, REDMUTEX_EINVAL, "client option retry_count = %lld is out of range (0..1000000)",
                       (long long)o->retry_count);
    if (o->min_replicas < -1 || o->min_replicas > 1000)
        return rm_fail(err, REDMUTEX_EINVAL,
                       "client option min_replicas = %lld is out of range (0..1000, or -1: the deployment's default)",
                       (long long)o->min_replicas);
    return 0;
}

/* ---- fork registry ----------------------------------------------------- */

/*
 * Every live client is on this list so that fork() can take all their
 * mutexes first (no other thread can then be inside one) and the child can
 * start from a consistent state. The library never holds a client mutex
 * while doing I/O, so the prepare handler waits only briefly.
 */
static pthread_mutex_t registry_mu = PTHREAD_MUTEX_INITIALIZER;
static redmutex_client *registry;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

/* every client mutex: taken in prepare, given back after */
static void atfork_prepare(void) RM_NO_TSA
{
    pthread_mutex_lock(&registry_mu);
    for (redmutex_client *c = registry; c; c = c->next_all)
        pthread_mutex_lock(&c->mu);
}

/* every client mutex: taken in prepare, given back after */
static void atfork_parent(void) RM_NO_TSA
{
    for (redmutex_client *c = registry; c; c = c->next_all)
        pthread_mutex_unlock(&c->mu);
    pthread_mutex_unlock(&registry_mu);
}

static void init_cond(pthread_cond_t *cond)
{
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(cond, &attr);
    pthread_condattr_destroy(&attr);
}

/*
 * In the child only the forking thread exists. The parent's connections,
 * watchdog and subscriber are not ours: forget them (closing our copies of
 * the sockets does not affect the parent) and make new ones on demand. Holds
 * keep the parent's pid, so the child cannot release or renew them.
 */
/* every client mutex: taken in prepare, given back after */
static void atfork_child(void) RM_NO_TSA
{
    for (redmutex_client *c = registry; c; c = c->next_all) {
        rm_pool_after_fork(c);
        rm_deploy_after_fork(c);
        rm_watchdog_forget(c);
        rm_subscriber_forget(c);
        rm_watch_forget(c);
        init_cond(&c->holds.renew_done);
        init_cond(&c->holds.wake);
        rm_interrupt_after_fork(c);
        rm_events_after_fork(c);
        rm_pollwaits_after_fork(c);
        rm_stats_after_fork(&c->stats);
        c->pid = getpid();
        pthread_mutex_unlock(&c->mu);
    }
    pthread_mutex_unlock(&registry_mu);
}

static void install_atfork(void)
{
    (void)rm_pid(); /* its own atfork handler first: the child's handlers below see the new pid */
    pthread_atfork(atfork_prepare, atfork_parent, atfork_child);
}

/* ---- creation ------------------------------------------------------------ */

/* The client id is the first half of every reentrant owner: like a token,
   it must not be predictable, so no randomness means no client. */
static int make_uuid(rm_err *err, char out[REDMUTEX_CLIENT_ID_LEN + 1])
{
    unsigned char b[16];
    if (rm_random_bytes(b, sizeof b) != 0)
        return rm_fail(err, REDMUTEX_ESYSTEM, "the system gave no random bytes (getrandom failed) for the client id");
    b[6] = (unsigned char)((b[6] & 0x0f) | 0x40); /* version 4 */
    b[8] = (unsigned char)((b[8] & 0x3f) | 0x80); /* RFC 4122 variant */
    char hex[33];
    rm_hex(hex, b, 16);
    snprintf(out, REDMUTEX_CLIENT_ID_LEN + 1, "%.8s-%.4s-%.4s-%.4s-%.12s", hex, hex + 8, hex + 12, hex + 16, hex + 20);
    return 0;
}

static void client_destroy(redmutex_client *c)
{
    for (size_t i = 0; i < c->n; i++) {
        rm_server *srv = &c->pool.servers[i];
        rm_pool_clear(srv);
        rm_deploy_free(srv);
        rm_tls_server_clear(srv);
        rm_endpoint_clear(&srv->ep);
    }
    free(c->pool.servers);
    rm_unsettled_free(c);
    rm_holds_free(c);
    rm_events_destroy(c);
    rm_pollwaits_destroy(c);
    rm_interrupt_destroy(c);
    rm_stats_destroy(&c->stats);
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->holds.renew_done);
    pthread_cond_destroy(&c->holds.wake);
    free(c);
}

/*
 * min_replicas -1, the default: each deployment's own (1 on a Sentinel
 * deployment, as far as its master has replicas; 0 elsewhere: sentinel.c).
 * opts.min_replicas then says whether any request carries a WAIT at all.
 */
static void replicas_default(redmutex_client *c)
{
    if (c->opts.min_replicas >= 0)
        return;
    c->replicas_by_deployment = true;
    c->opts.min_replicas = 0;
    for (size_t i = 0; i < c->n; i++)
        if (rm_deploy_is_sentinel(c, i))
            c->opts.min_replicas = 1;
}

static int ping_all(rm_err *err, redmutex_client *c)
{
    rm_call call;
    const char *argv[1] = {"PING"};
    rm_req req = {1, {{-1, 1, argv, NULL}}, NULL, NULL, NULL};
    if (rm_call_begin(err, &call, c) != 0)
        return REDMUTEX_ENOMEM;
    rm_call_run(&call, &req, rm_deadline_after_ms(c->opts.connect_timeout_ms), NULL, NULL);
    int rc = 0;
    for (size_t i = 0; i < call.n; i++) {
        int e = call.slots[i].err;
        if (e == REDMUTEX_EDUPLICATE || e == REDMUTEX_EAUTH) {
            rc = rm_fail(err, e, "%s", call.slots[i].msg);
            break;
        }
    }
    rm_call_end(&call);
    return rc;
}

/* Puts a new client on the fork registry (fork() then takes its mutex first). */
static void registry_add(redmutex_client *c)
{
    pthread_once(&atfork_once, install_atfork);
    pthread_mutex_lock(&registry_mu);
    c->next_all = registry;
    if (registry)
        registry->prev_all = c;
    registry = c;
    pthread_mutex_unlock(&registry_mu);
}

/* redmutex_client_new, with the call's error. */
static int client_new(rm_err *err, redmutex_client **out, const char *const *urls, size_t n_urls,
                      const redmutex_client_options *opts)
{
    if (!out)
        return rm_fail(err, REDMUTEX_EINVAL, "redmutex_client_new: out is NULL");
    if (!urls)
        return rm_fail(err, REDMUTEX_EINVAL, "redmutex_client_new: urls is NULL");
    if (n_urls == 0)
        return rm_fail(err, REDMUTEX_EINVAL, "redmutex_client_new: at least one server URL is needed");
    if (n_urls > REDMUTEX_SERVERS_MAX)
        return rm_fail(err, REDMUTEX_EINVAL, "redmutex_client_new: %zu servers given, at most %d supported", n_urls,
                       REDMUTEX_SERVERS_MAX);
    redmutex_client_options o;
    int rc = rm_options_load(err, &o, opts, &client_options_layout, "redmutex_client_new");
    if (rc == 0)
        rc = check_options(err, &o);
    if (rc != 0)
        return rc;

    redmutex_client *c = calloc(1, sizeof *c);
    if (!c)
        return rm_fail(err, REDMUTEX_ENOMEM, "out of memory");
    c->pool.servers = calloc(n_urls, sizeof *c->pool.servers);
    if (!c->pool.servers) {
        free(c);
        return rm_fail(err, REDMUTEX_ENOMEM, "out of memory");
    }
    pthread_mutex_init(&c->mu, NULL);
    init_cond(&c->holds.renew_done);
    init_cond(&c->holds.wake);
    c->life.refs = 1;
    c->intr.fd = -1;
    c->events.fd = -1;
    c->pollwait.efd = -1;
    c->pid = getpid();
    c->opts = o;
    c->n = n_urls;
    c->quorum = rm_quorum_of(n_urls);
    c->pool.news_fd = -1; /* no subscriber yet */
    rm_stats_init(&c->stats, &o);
    if ((rc = make_uuid(err, c->id)) != 0) {
        client_destroy(c);
        return rc;
    }
    for (size_t i = 0; i < n_urls; i++) {
        c->pool.servers[i].client = c;
        c->pool.servers[i].index = (int)i;
        rc = rm_endpoint_parse(err, &c->pool.servers[i].ep, urls[i]);
        if (rc == 0 && !c->pool.servers[i].ep.tls && rm_tls_options_given(&o))
            rc = rm_fail(err, REDMUTEX_EINVAL,
                         "%s is not a TLS URL, but TLS options are set: use rediss:// (nothing is sent "
                         "in plain text when TLS was asked for)",
                         c->pool.servers[i].ep.display);
        if (rc == 0)
            rc = rm_tls_server_init(err, &c->pool.servers[i], &o);
        if (rc == 0 && (rc = rm_deploy_init(err, c, i)) == 0) /* counted by address (stats.c) */
            c->pool.servers[i].stats = rm_stats_server_for(&c->stats, c->pool.servers[i].ep.display);
        if (rc != 0) {
            if (n_urls > 1)
                rm_fail(err, rc, "server %zu: %s", i + 1, err->msg);
            client_destroy(c);
            return rc;
        }
    }
    replicas_default(c);
    /* The TLS setup has read the caller's paths and context: keep no pointers to them. */
    c->opts.tls_context = NULL;
    c->opts.tls_ca_file = c->opts.tls_cert_file = c->opts.tls_key_file = c->opts.tls_server_name = NULL;
    if ((n_urls > 1 && (rc = ping_all(err, c)) != 0) || (rc = rm_watch_start(err, c)) != 0) {
        client_destroy(c);
        return rc;
    }
    registry_add(c);
    *out = c;
    return 0;
}

int redmutex_client_new(redmutex_client **out, const char *const *urls, size_t n_urls,
                        const redmutex_client_options *opts)
{
    rm_err err;
    rm_err_reset(&err);
    return rm_publish(&err, client_new(&err, out, urls, n_urls, opts));
}

void rm_client_unref(redmutex_client *c)
{
    rm_client_lock(c);
    int refs = --c->life.refs;
    rm_client_unlock(c);
    if (refs > 0)
        return;
    pthread_mutex_lock(&registry_mu);
    if (c->prev_all)
        c->prev_all->next_all = c->next_all;
    else if (registry == c)
        registry = c->next_all;
    if (c->next_all)
        c->next_all->prev_all = c->prev_all;
    pthread_mutex_unlock(&registry_mu);
    client_destroy(c);
}

const char *redmutex_client_id(const redmutex_client *c) { return c ? c->id : ""; }

size_t redmutex_client_server_count(const redmutex_client *c) { return c ? c->n : 0; }

int redmutex_client_thread_owner(char *out, size_t size, const redmutex_client *c)
{
    rm_err e_, *err = rm_err_reset(&e_);
    if (!out || !c)
        return rm_publish(err, rm_fail(err, REDMUTEX_EINVAL, "redmutex_client_thread_owner: NULL argument"));
    int n = snprintf(out, size, "%s:%ld", c->id, rm_thread_id());
    if (n < 0 || (size_t)n >= size) {
        if (size)
            out[0] = '\0';
        return rm_publish(
            err, rm_fail(err, REDMUTEX_EINVAL, "redmutex_client_thread_owner: buffer of %zu bytes is too small", size));
    }
    return rm_publish(err, 0);
}

int redmutex_client_stats(redmutex_client *c, redmutex_stats *out)
{
    rm_err e_, *err = rm_err_reset(&e_);
    if (!c)
        return rm_publish(err, rm_fail(err, REDMUTEX_EINVAL, "redmutex_client_stats: client is NULL"));
    return rm_publish(err, rm_stats_read(err, &c->stats, out));
}

int redmutex_client_server_stats(redmutex_client *c, size_t index, redmutex_server_stats *out)
{
    rm_err e_, *err = rm_err_reset(&e_);
    if (!c)
        return rm_publish(err, rm_fail(err, REDMUTEX_EINVAL, "redmutex_client_server_stats: client is NULL"));
    return rm_publish(err, rm_stats_read_server(err, &c->stats, index, out));
}
