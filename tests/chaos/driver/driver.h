/*
 * chaos_driver: a redmutex client for the fault-injection harness
 * (tests/chaos). It uses the core only through the public API, runs one of
 * the workloads of CHAOS.md, and writes every event as one JSON object per
 * line on stdout, stamped with CLOCK_MONOTONIC so that the histories of all
 * drivers on the host merge on one clock.
 *
 * The harness steers it through stdin, one command per line: "stop" (finish
 * the current critical section, release, report), "exit" (free the client and
 * exit), and, in probe mode, "probe NAME".
 */
#ifndef CHAOS_DRIVER_H
#define CHAOS_DRIVER_H

#include <hiredis/hiredis.h>
#include <redmutex.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#define DRV_MAX_URLS 16

typedef struct drv_config {
    const char *id;          /* this process's name in the history ("c0") */
    const char *mode;        /* workload | probe | nonowner | fork | reentrant */
    const char *urls[DRV_MAX_URLS];
    size_t n_urls;
    char resource_host[64];  /* the never-faulted resource server */
    int resource_port;
    int threads;
    int nkeys;
    const char *prefix;      /* lock names are "<prefix><i>" */
    redmutex_kind kind;
    int64_t lease_ms;        /* 0: watchdog locks */
    int64_t watchdog_lease_ms;
    bool fencing;
    int64_t cs_min_ms, cs_max_ms;
    int64_t think_ms;
    int64_t wait_ms;
    int64_t cmd_timeout_ms, connect_timeout_ms, backoff_cap_ms, retry_delay_ms;
    int64_t min_replicas, replica_timeout_ms;
    int nest;                /* holds per critical section (reentrant: nested acquires) */
    int64_t hold_margin_ms;  /* > 0: hold until validity - margin instead of cs_*_ms */
    bool owner_per_hold;     /* plain locks: an explicit, logged token per hold */
    bool owner_fixed;        /* plain locks: one explicit token per worker, reused by every hold */
    bool leave_on_free;
    uint64_t seed;
    int64_t ops;             /* holds per worker, 0 = until "stop" */
} drv_config;

/* ---- log.c: the JSONL history ------------------------------------------- */

int64_t drv_now_ns(void);
void drv_sleep_ms(int64_t ms);
/* Sets the process name used in every event. */
void drv_log_init(const char *id);
/*
 * Writes one event: {"t":<ns>,"p":<id>,"w":w,"h":h,"ev":ev<,fields>}.
 * `fields` is printf-formatted JSON members without braces ("" for none).
 * Thread-safe; each line is flushed at once so the harness sees it live.
 */
void drv_log(int w, int64_t h, const char *ev, const char *fields, ...) __attribute__((format(printf, 4, 5)));
/*
 * The same with the event's time given: events carrying a validity are stamped
 * with the time taken *before* the validity was read, so that t + validity never
 * overstates what the client believed (a pause between the two would).
 */
void drv_log_at(int64_t t, int w, int64_t h, const char *ev, const char *fields, ...)
    __attribute__((format(printf, 5, 6)));
/* Copies s into out as the inside of a JSON string (quotes and controls escaped). */
void drv_json_escape(char *out, size_t size, const char *s);
/* The symbolic name of a redmutex result code ("ECONN"). */
const char *drv_code_name(int rc);
/* Logs a failed call: event `ev` with rc, its name, the last error and the duration. */
void drv_log_error(int w, int64_t h, const char *ev, int rc, int64_t started_ns);
/* Logs the process's open descriptors and resident memory ("stats"). */
void drv_log_stats(void);

/* ---- resource.c: the protected resource ---------------------------------- */

typedef struct drv_resource {
    redisContext *rc;
    const drv_config *cfg;
} drv_resource;

int drv_resource_open(drv_resource *r, const drv_config *cfg);
void drv_resource_close(drv_resource *r);
/* Reads the naive counter and the CAS register of `key`. 0 or -1. */
int drv_resource_read(drv_resource *r, const char *key, long long *counter, long long *cas);
/* Writes the naive counter (SET, no check). 0 or -1. */
int drv_resource_set_counter(drv_resource *r, const char *key, long long value);
/* Fenced write: accepted (1) only if token > every token accepted before. -1 on error. */
int drv_resource_fenced_write(drv_resource *r, const char *key, long long token, const char *hold_id);
/* Compare-and-set of the CAS register: 1 done, 0 value changed, -1 error. */
int drv_resource_cas(drv_resource *r, const char *key, long long expect, long long value);

/* ---- the client and the modes --------------------------------------------- */

typedef struct drv_ctx {
    drv_config cfg;
    redmutex_client *client;
    atomic_bool stop;
} drv_ctx;

/* A client made from the configuration (options mapped one to one). */
int drv_client_new(redmutex_client **out, const drv_config *cfg);
/* Lock options for the configuration, with the lost-lock callback installed. */
void drv_lock_options(redmutex_lock_options *o, const drv_config *cfg, void *payload);
/* The lost-lock callback: logs "lost_cb" with the state and the validity left. */
void drv_on_lost(redmutex_lock *lock, const char *owner, redmutex_state state, void *payload);

typedef struct drv_lock_tag {
    int worker;
    _Atomic int64_t hold; /* the hold in progress, for the callback's event */
} drv_lock_tag;

int drv_run_workload(drv_ctx *ctx);
int drv_run_probe(drv_ctx *ctx);
int drv_run_nonowner(drv_ctx *ctx);
int drv_run_fork(drv_ctx *ctx);
int drv_run_reentrant(drv_ctx *ctx);
int drv_run_hold(drv_ctx *ctx);

/* The next stdin line into buf (without newline): 1, 0 after timeout_ms (-1: no timeout), -1 at EOF. */
int drv_read_command(char *buf, size_t size, int timeout_ms);

/* xorshift64* */
uint64_t drv_rand(uint64_t *state);
int64_t drv_rand_between(uint64_t *state, int64_t lo, int64_t hi);

#endif
