/* Small helpers: monotonic time, randomness, hex, SHA-1, growable buffers. */
#define _GNU_SOURCE
#include "internal.h"

#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

int64_t rm_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int64_t rm_deadline_after_ms(int64_t ms)
{
    if (ms < 0 || ms > INT64_MAX / RM_NS_PER_MS / 2)
        return INT64_MAX;
    return rm_now_ns() + ms * RM_NS_PER_MS;
}

int64_t rm_ms_until(int64_t deadline_ns)
{
    if (deadline_ns == INT64_MAX)
        return INT64_MAX;
    int64_t d = deadline_ns - rm_now_ns();
    if (d <= 0)
        return 0;
    return (d + RM_NS_PER_MS - 1) / RM_NS_PER_MS;
}

void rm_efd_signal(int fd)
{
    uint64_t one = 1;
    ssize_t r = write(fd, &one, sizeof one);
    (void)r; /* EAGAIN: the counter is saturated, which is "readable" all the same */
}

void rm_efd_drain(int fd)
{
    uint64_t v;
    ssize_t r = read(fd, &v, sizeof v);
    (void)r;
}

bool rm_join_until(pthread_t thread, int64_t deadline_ns)
{
    /* pthread_timedjoin_np takes CLOCK_REALTIME; convert the remaining time.
       At least a few milliseconds: an idle thread exits at once when asked. */
    int64_t ms = rm_ms_until(deadline_ns);
    if (ms < 10)
        ms = 10;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += ms / 1000;
    ts.tv_nsec += (ms % 1000) * RM_NS_PER_MS;
    if (ts.tv_nsec >= 1000000000) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000;
    }
    return pthread_timedjoin_np(thread, NULL, &ts) == 0;
}

int rm_thread_start(pthread_t *thread, const pthread_attr_t *attr, void *(*fn)(void *), void *arg)
{
    /* A thread inherits its creator's mask. Blocking the signals in the new
       thread itself would leave a window at its start in which a signal can
       be handed to it, and a host's handler may work only on the host's own
       threads (Perl's needs its interpreter's context and crashes elsewhere). */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    int rc = pthread_create(thread, attr, fn, arg);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return rc;
}

/* The process id, kept current across fork() by an atfork handler (the same
   mechanism that gives a forked child its own connections and threads). It
   is asked several times per request, and getpid() is a system call. */
static atomic_int current_pid;
static pthread_once_t pid_once = PTHREAD_ONCE_INIT;

static void pid_refresh(void) { atomic_store(&current_pid, (int)getpid()); }

static void pid_init(void)
{
    pid_refresh();
    pthread_atfork(NULL, NULL, pid_refresh);
}

pid_t rm_pid(void)
{
    pthread_once(&pid_once, pid_init);
    return (pid_t)atomic_load_explicit(&current_pid, memory_order_relaxed);
}

/* Cached per thread; a forked child's thread has a new id, hence the pid. */
static _Thread_local long tid_cache;
static _Thread_local pid_t tid_pid;

long rm_thread_id(void)
{
    pid_t pid = rm_pid();
    if (tid_pid != pid) {
        tid_cache = (long)syscall(SYS_gettid);
        tid_pid = pid;
    }
    return tid_cache;
}

char *rm_i64_str(char out[24], int64_t v)
{
    char tmp[24], *p = tmp + sizeof tmp;
    uint64_t u = v < 0 ? 0 - (uint64_t)v : (uint64_t)v;
    *--p = '\0';
    do {
        *--p = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (v < 0)
        *--p = '-';
    memcpy(out, p, (size_t)(tmp + sizeof tmp - p));
    return out;
}

static int getrandom_all(unsigned char *p, size_t n)
{
    while (n > 0) {
        ssize_t r = getrandom(p, n, 0);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        p += r;
        n -= (size_t)r;
    }
    return 0;
}

/* Small requests are served from a per-thread buffer of getrandom() output,
   so a token costs a copy rather than a system call. After fork() the child
   discards what it inherited: parent and child must never share tokens. */
static _Thread_local unsigned char pool[512];
static _Thread_local size_t pool_left;
static _Thread_local pid_t pool_pid;

int rm_random_bytes(void *buf, size_t n)
{
    if (n > sizeof pool / 4)
        return getrandom_all(buf, n);
    pid_t pid = rm_pid();
    if (pool_pid != pid) {
        pool_left = 0;
        pool_pid = pid;
    }
    if (pool_left < n) {
        if (getrandom_all(pool, sizeof pool) != 0)
            return -1;
        pool_left = sizeof pool;
    }
    unsigned char *src = pool + sizeof pool - pool_left;
    memcpy(buf, src, n);
    memset(src, 0, n); /* used bytes do not linger */
    pool_left -= n;
    return 0;
}

uint64_t rm_random_below(uint64_t bound)
{
    uint64_t x = 0;
    if (bound <= 1)
        return 0;
    /* Rejection sampling keeps the result uniform. */
    uint64_t limit = UINT64_MAX - UINT64_MAX % bound;
    do {
        if (rm_random_bytes(&x, sizeof x) != 0)
            x = (uint64_t)rm_now_ns() * UINT64_C(6364136223846793005);
    } while (x >= limit);
    return x % bound;
}

void rm_hex(char *out, const unsigned char *in, size_t n)
{
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[in[i] >> 4];
        out[2 * i + 1] = digits[in[i] & 15];
    }
    out[2 * n] = '\0';
}

/* SHA-1 (FIPS 180-4), only to name scripts for EVALSHA; not used for security. */
typedef struct {
    uint32_t h[5];
    uint64_t total;
    unsigned char block[64];
    size_t used;
} sha1_ctx;

static uint32_t rol(uint32_t x, int n) { return (x << n) | (x >> (32 - n)); }

static void sha1_block(sha1_ctx *s, const unsigned char *p)
{
    uint32_t w[80];
    for (int i = 0; i < 16; i++)
        w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 | (uint32_t)p[4 * i + 2] << 8 |
               (uint32_t)p[4 * i + 3];
    for (int i = 16; i < 80; i++)
        w[i] = rol(w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16], 1);
    uint32_t a = s->h[0], b = s->h[1], c = s->h[2], d = s->h[3], e = s->h[4];
    for (int i = 0; i < 80; i++) {
        uint32_t f, k;
        if (i < 20) {
            f = (b & c) | (~b & d);
            k = 0x5A827999;
        } else if (i < 40) {
            f = b ^ c ^ d;
            k = 0x6ED9EBA1;
        } else if (i < 60) {
            f = (b & c) | (b & d) | (c & d);
            k = 0x8F1BBCDC;
        } else {
            f = b ^ c ^ d;
            k = 0xCA62C1D6;
        }
        uint32_t t = rol(a, 5) + f + e + k + w[i];
        e = d;
        d = c;
        c = rol(b, 30);
        b = a;
        a = t;
    }
    s->h[0] += a;
    s->h[1] += b;
    s->h[2] += c;
    s->h[3] += d;
    s->h[4] += e;
}

static void sha1_update(sha1_ctx *s, const unsigned char *p, size_t n)
{
    s->total += n;
    while (n > 0) {
        size_t take = 64 - s->used < n ? 64 - s->used : n;
        memcpy(s->block + s->used, p, take);
        s->used += take;
        p += take;
        n -= take;
        if (s->used == 64) {
            sha1_block(s, s->block);
            s->used = 0;
        }
    }
}

void rm_sha1_hex(char out[41], const void *data, size_t len)
{
    sha1_ctx s = {{0x67452301, 0xEFCDAB89, 0x98BADCFE, 0x10325476, 0xC3D2E1F0}, 0, {0}, 0};
    sha1_update(&s, data, len);
    uint64_t bits = s.total * 8;
    unsigned char pad = 0x80, zero = 0, lenbuf[8];
    sha1_update(&s, &pad, 1);
    while (s.used != 56)
        sha1_update(&s, &zero, 1);
    for (int i = 0; i < 8; i++)
        lenbuf[i] = (unsigned char)(bits >> (56 - 8 * i));
    sha1_update(&s, lenbuf, 8);
    unsigned char digest[20];
    for (int i = 0; i < 5; i++) {
        digest[4 * i] = (unsigned char)(s.h[i] >> 24);
        digest[4 * i + 1] = (unsigned char)(s.h[i] >> 16);
        digest[4 * i + 2] = (unsigned char)(s.h[i] >> 8);
        digest[4 * i + 3] = (unsigned char)s.h[i];
    }
    rm_hex(out, digest, 20);
}

int rm_buf_reserve(rm_buf *b, size_t extra)
{
    if (b->cap - b->len >= extra)
        return 0;
    size_t cap = b->cap ? b->cap : 256;
    while (cap - b->len < extra) {
        if (cap > SIZE_MAX / 2)
            return REDMUTEX_ENOMEM;
        cap *= 2;
    }
    char *d = realloc(b->data, cap);
    if (!d)
        return REDMUTEX_ENOMEM;
    b->data = d;
    b->cap = cap;
    return 0;
}

int rm_buf_append(rm_buf *b, const void *data, size_t len)
{
    if (rm_buf_reserve(b, len) != 0)
        return REDMUTEX_ENOMEM;
    if (len)
        memcpy(b->data + b->len, data, len);
    b->len += len;
    return 0;
}

void rm_buf_consume(rm_buf *b, size_t n)
{
    if (n >= b->len) {
        b->len = 0;
        return;
    }
    memmove(b->data, b->data + n, b->len - n);
    b->len -= n;
}

void rm_buf_free(rm_buf *b)
{
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}
