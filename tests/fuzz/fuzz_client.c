/*
 * libFuzzer target: a whole client (connection handshake, every lock
 * operation, waiting with its pub/sub connection, the watchdog) against an
 * in-process fake server that answers with the fuzzer's bytes: replies real
 * Redis never sends, hostile sizes, wrong types, overflowing integers.
 * Whatever it answers, every call must return (within its timeouts) with a
 * result code, and nothing may leak or touch freed memory.
 *
 * Input: byte 0 chooses the operations, byte 1 the options; the rest is the
 * reply stream: each command the server receives is answered with the next
 * chunk (a length byte, then that many bytes). When the stream runs out the
 * server closes the connection. With option bit 0 set, SCRIPT LOAD is
 * answered like Redis does, so that inputs get past the handshake.
 */
#define _GNU_SOURCE
#include "internal.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size);

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t idle = PTHREAD_COND_INITIALIZER;
static const unsigned char *stream;
static size_t stream_len, stream_pos;
static bool honest_handshake;
static int handlers; /* connections being served */
static int listen_fd = -1;
static char sock_path[108];

/* Counts the complete RESP commands at the start of buf; *script says whether each is SCRIPT LOAD. */
static size_t next_command(const char *buf, size_t len, bool *script)
{
    if (len < 1 || buf[0] != '*')
        return len ? len : 0; /* not RESP: consume it all as one "command" */
    const char *nl = memchr(buf, '\n', len);
    if (!nl)
        return 0;
    long argc = strtol(buf + 1, NULL, 10);
    size_t p = (size_t)(nl - buf) + 1;
    *script = false;
    for (long i = 0; i < argc; i++) {
        if (p >= len || buf[p] != '$')
            return 0;
        nl = memchr(buf + p, '\n', len - p);
        if (!nl)
            return 0;
        long n = strtol(buf + p + 1, NULL, 10);
        p = (size_t)(nl - buf) + 1;
        if (n < 0 || p + (size_t)n + 2 > len)
            return 0;
        if (i == 0 && n == 6 && strncasecmp(buf + p, "SCRIPT", 6) == 0)
            *script = true;
        p += (size_t)n + 2;
    }
    return p;
}

/* The next reply chunk, or false when the stream is used up. */
static bool next_chunk(unsigned char *out, size_t *len)
{
    pthread_mutex_lock(&mu);
    bool ok = stream_pos < stream_len;
    if (ok) {
        size_t n = stream[stream_pos++];
        if (n > stream_len - stream_pos)
            n = stream_len - stream_pos;
        memcpy(out, stream + stream_pos, n);
        stream_pos += n;
        *len = n;
    }
    pthread_mutex_unlock(&mu);
    return ok;
}

static void *serve(void *arg)
{
    int fd = (int)(intptr_t)arg;
    char in[65536];
    size_t have = 0;
    bool open = true;
    while (open) {
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, 2000) <= 0)
            break;
        ssize_t n = recv(fd, in + have, sizeof in - have, 0);
        if (n <= 0)
            break;
        have += (size_t)n;
        size_t used;
        bool script = false;
        while (open && (used = next_command(in, have, &script)) > 0) {
            memmove(in, in + used, have - used);
            have -= used;
            unsigned char reply[256];
            size_t len = 0;
            if (script && honest_handshake) {
                static const char sha[] = "$40\r\n0123456789012345678901234567890123456789\r\n";
                open = send(fd, sha, sizeof sha - 1, MSG_NOSIGNAL) > 0;
            } else if (next_chunk(reply, &len)) {
                open = len == 0 || send(fd, reply, len, MSG_NOSIGNAL) > 0;
            } else {
                open = false; /* the stream is used up: hang up */
            }
        }
        if (have == sizeof in)
            break;
    }
    close(fd);
    pthread_mutex_lock(&mu);
    if (--handlers == 0)
        pthread_cond_broadcast(&idle);
    pthread_mutex_unlock(&mu);
    return NULL;
}

static void *accept_loop(void *arg)
{
    (void)arg;
    for (;;) {
        int fd = accept(listen_fd, NULL, NULL);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            return NULL;
        }
        pthread_mutex_lock(&mu);
        handlers++;
        pthread_mutex_unlock(&mu);
        pthread_t t;
        if (pthread_create(&t, NULL, serve, (void *)(intptr_t)fd) != 0)
            abort();
        pthread_detach(t);
    }
}

static void start_server(void)
{
    snprintf(sock_path, sizeof sock_path, "/tmp/redmutex-fuzz-%d.sock", (int)getpid());
    unlink(sock_path);
    listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un sa = {0};
    sa.sun_family = AF_UNIX;
    strcpy(sa.sun_path, sock_path);
    if (bind(listen_fd, (struct sockaddr *)&sa, sizeof sa) != 0 || listen(listen_fd, 64) != 0)
        abort();
    pthread_t t;
    pthread_create(&t, NULL, accept_loop, NULL);
    pthread_detach(t);
}

static void remove_socket(void)
{
    unlink(sock_path);
}

static void run_operations(redmutex_client *c, unsigned ops)
{
    redmutex_lock_options lo = REDMUTEX_LOCK_OPTIONS_INIT;
    lo.flags = ops & 1 ? REDMUTEX_LOCK_FENCING : 0;
    lo.lease_ms = ops & 2 ? 0 : 5000; /* 0: the watchdog renews it */
    redmutex_lock *l;
    if (redmutex_lock_new(&l, c, "fuzz", ops & 4 ? REDMUTEX_KIND_RLOCK : REDMUTEX_KIND_LOCK, &lo) != 0)
        abort();
    int locked;
    int64_t v;
    redmutex_state st;
    /* A short wait exercises the waiting path: subscribe, the holder's TTL, backoff. */
    if (redmutex_lock_acquire(l, NULL, ops & 8 ? 60 : 0) == 0) {
        if (ops & 16)
            redmutex_lock_extend(l, NULL, 1000, REDMUTEX_EXTEND_ADD);
        redmutex_lock_fence(&v, l, NULL);
        redmutex_lock_validity(&v, l, NULL);
        redmutex_lock_release(l, NULL);
    }
    if (ops & 32) {
        redmutex_lock_is_locked(&locked, l);
        redmutex_lock_ttl(&v, l);
        redmutex_lock_hold_count(&v, l, NULL);
    }
    if (ops & 64)
        redmutex_lock_force_release(&locked, l);
    redmutex_lock_state(&st, l, NULL);
    redmutex_lock_free(l);
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    if (listen_fd < 0) {
        start_server();
        atexit(remove_socket);
    }
    if (size < 2)
        return 0;
    pthread_mutex_lock(&mu);
    stream = data + 2;
    stream_len = size - 2;
    stream_pos = 0;
    honest_handshake = data[1] & 1;
    pthread_mutex_unlock(&mu);

    char url[160];
    snprintf(url, sizeof url, "unix://%s%s", sock_path, data[1] & 2 ? "?db=1" : "");
    const char *u = url;
    redmutex_client_options o = REDMUTEX_CLIENT_OPTIONS_INIT;
    o.connect_timeout_ms = 100;
    o.command_timeout_ms = 30;
    o.wait_backoff_cap_ms = 20;
    o.shutdown_timeout_ms = 100;
    o.watchdog_lease_ms = 60;
    o.min_replicas = data[1] & 4 ? 1 : 0;
    o.replica_timeout_ms = 10;
    redmutex_client *c;
    if (redmutex_client_new(&c, &u, 1, &o) != 0)
        abort();
    run_operations(c, data[0]);
    redmutex_client_free(c);

    /* Every connection of this input is closed before the next input starts. */
    pthread_mutex_lock(&mu);
    while (handlers > 0)
        pthread_cond_wait(&idle, &mu);
    stream = NULL;
    stream_len = 0;
    pthread_mutex_unlock(&mu);
    return 0;
}
