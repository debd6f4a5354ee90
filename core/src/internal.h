/*
 * What every file of the core shares: time, randomness, hex and SHA-1, the
 * error value and its publication, growable buffers. Each module has a private header of
 * its own (docs/architecture.md lists them with their layers). Nothing here
 * is part of the ABI; every non-static function is hidden by -fvisibility
 * and the version script, and prefixed rm_ so it cannot clash in a static
 * link.
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

/* An owner's value on the servers: token, owner id, or owner id + ":write"
   (kind.h). Here, not in handle.h, because the client's own state (the
   events' queue, events.h) holds owners and client.h comes before handle.h. */
#define RM_VALUE_MAX                                                                                                   \
    (REDMUTEX_CLIENT_ID_LEN + 24 > REDMUTEX_OWNER_MAX ? REDMUTEX_CLIENT_ID_LEN + 24 : REDMUTEX_OWNER_MAX + 8)

/* ---- time.c / misc --------------------------------------------------- */

/** CLOCK_MONOTONIC in nanoseconds. */
int64_t rm_now_ns(void);
/** now + ms, saturating; ms < 0 means "no deadline" and gives INT64_MAX. */
int64_t rm_deadline_after_ms(int64_t ms);
/** Milliseconds from now until deadline, rounded up, >= 0; INT64_MAX stays "forever". */
int64_t rm_ms_until(int64_t deadline_ns);
/** Joins thread if it ends by deadline_ns (at least ~10 ms allowed); false if not. */
/*
 * Thread-safety annotations, checked by clang's -Wthread-safety (the clang
 * builds: fuzzing, scripts/fuzz.sh) and empty elsewhere. rm_mutex is a
 * pthread mutex that clang knows as a lock; a function that must be called
 * with a client's mutex held says RM_REQUIRES(c->mu), and every call is
 * checked to hold it. (Fields cannot carry GUARDED_BY in C: their guard is
 * written beside them instead.)
 */
#if defined(__clang__)
#define RM_TSA(x) __attribute__((x))
#else
#define RM_TSA(x)
#endif
#define RM_REQUIRES(...) RM_TSA(requires_capability(__VA_ARGS__))
#define RM_EXCLUDES(...) RM_TSA(locks_excluded(__VA_ARGS__))
#define RM_ACQUIRES(...) RM_TSA(acquire_capability(__VA_ARGS__))
#define RM_RELEASES(...) RM_TSA(release_capability(__VA_ARGS__))
#define RM_ASSERTS(...) RM_TSA(assert_capability(__VA_ARGS__))
#define RM_NO_TSA RM_TSA(no_thread_safety_analysis)
typedef pthread_mutex_t rm_mutex RM_TSA(capability("mutex"));

bool rm_join_until(pthread_t thread, int64_t deadline_ns);
/**
 * Makes an eventfd readable (adds 1; a saturated counter is readable all the
 * same). One write(2): async-signal-safe (the caller keeps errno if it must).
 */
void rm_efd_signal(int fd);
/** Reads a non-blocking eventfd's (or timerfd's) counter back to 0: not readable until the next signal. */
void rm_efd_drain(int fd);
/**
 * pthread_create for the library's own threads: the thread starts with every
 * signal blocked (the host's signals belong to its own threads). Returns
 * pthread_create's result.
 */
int rm_thread_start(pthread_t *thread, const pthread_attr_t *attr, void *(*fn)(void *), void *arg);
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

/* ---- error.c ------------------------------------------------------- */

/**
 * One error: a code and its message. Internal functions that can fail take
 * an rm_err * and fill it; only the public entry points (redmutex_*) hand
 * it to the caller's thread with rm_publish. Background threads keep their
 * own, so nothing they do is seen by, or hides, a caller's error.
 */
typedef struct rm_err {
    int code;
    char msg[512];
} rm_err;

/** Empties e (no error) without clearing its whole message buffer; returns e. */
static inline rm_err *rm_err_reset(rm_err *e)
{
    e->code = 0;
    e->msg[0] = '\0';
    return e;
}
/** Sets *e to code + formatted message (e NULL: dropped); returns code. The
    arguments may point into e->msg. */
int rm_fail(rm_err *e, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/** Like rm_fail with a va_list. */
int rm_vfail(rm_err *e, int code, const char *fmt, va_list ap) __attribute__((format(printf, 3, 0)));
/** Copies src into e (e NULL: nothing); returns src->code. */
int rm_err_copy(rm_err *e, const rm_err *src);
/**
 * For public entry points only (scripts/check-layers.py holds it): when rc
 * is an error (< 0), it becomes the thread's last error with e's message (or
 * the code's description when e says nothing of rc). Returns rc.
 */
int rm_publish(const rm_err *e, int rc);

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

#endif
