/*
 * A tiny hostile RESP server for replies a real Redis never sends. It
 * answers the connection handshake (SCRIPT LOAD, INFO) like Redis and the first
 * other command with the scenario's bytes. Every case must end in a clear
 * error within the timeout: no crash, no hang, no SIGPIPE.
 */
#define _GNU_SOURCE
#include "harness.h"

#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

typedef struct hostile {
    int listen_fd;
    int port;
    const char *payload; /* bytes sent for the first non-SCRIPT command */
    size_t payload_len;
    bool close_after; /* close the connection after the payload */
    bool never_answer;
    pthread_t thread;
    atomic_bool stop;
} hostile;

/* Counts complete RESP commands in buf[0..len); sets *first_is_script per command. */
static size_t parse_commands(const char *buf, size_t len, size_t *used, bool *is_script, size_t max)
{
    size_t n = 0, pos = 0;
    while (pos < len && n < max) {
        size_t p = pos;
        if (buf[p] != '*')
            break;
        long argc = strtol(buf + p + 1, NULL, 10);
        const char *nl = memchr(buf + p, '\n', len - p);
        if (!nl)
            break;
        p = (size_t)(nl - buf) + 1;
        bool complete = true;
        bool script = false;
        for (long i = 0; i < argc; i++) {
            if (p >= len || buf[p] != '$') {
                complete = false;
                break;
            }
            long blen = strtol(buf + p + 1, NULL, 10);
            nl = memchr(buf + p, '\n', len - p);
            if (!nl) {
                complete = false;
                break;
            }
            p = (size_t)(nl - buf) + 1;
            if (p + (size_t)blen + 2 > len) {
                complete = false;
                break;
            }
            if (i == 0 && ((blen == 6 && strncasecmp(buf + p, "SCRIPT", 6) == 0) ||
                           (blen == 4 && strncasecmp(buf + p, "INFO", 4) == 0)))
                script = true;
            p += (size_t)blen + 2;
        }
        if (!complete)
            break;
        is_script[n++] = script;
        pos = p;
    }
    *used = pos;
    return n;
}

static void *hostile_main(void *arg)
{
    hostile *h = arg;
    while (!h->stop) {
        int fd = accept(h->listen_fd, NULL, NULL);
        if (fd < 0)
            continue;
        char buf[65536];
        size_t have = 0;
        bool done = false;
        while (!done && !h->stop) {
            ssize_t r = recv(fd, buf + have, sizeof buf - have, 0);
            if (r <= 0)
                break;
            have += (size_t)r;
            size_t used;
            bool script[64];
            size_t n = parse_commands(buf, have, &used, script, 64);
            memmove(buf, buf + used, have - used);
            have -= used;
            for (size_t i = 0; i < n && !done; i++) {
                if (script[i]) {
                    /* A 40-character answer does for SCRIPT LOAD (a SHA) and INFO (a run_id). */
                    static const char sha[] = "$47\r\nrun_id:0123456789012345678901234567890123456789\r\n";
                    if (send(fd, sha, sizeof sha - 1, MSG_NOSIGNAL) < 0)
                        done = true;
                } else if (!h->never_answer) {
                    if (send(fd, h->payload, h->payload_len, MSG_NOSIGNAL) < 0 || h->close_after)
                        done = true;
                }
            }
        }
        if (h->never_answer)
            while (!h->stop)
                rt_sleep_ms(10);
        close(fd);
    }
    return NULL;
}

static void hostile_start(hostile *h, const char *payload, size_t len, bool close_after, bool never_answer)
{
    memset(h, 0, sizeof *h);
    h->payload = payload;
    h->payload_len = len;
    h->close_after = close_after;
    h->never_answer = never_answer;
    h->listen_fd = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(h->listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in sa = {0};
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t sl = sizeof sa;
    CHECK(bind(h->listen_fd, (struct sockaddr *)&sa, sizeof sa) == 0);
    CHECK(listen(h->listen_fd, 16) == 0);
    getsockname(h->listen_fd, (struct sockaddr *)&sa, &sl);
    h->port = ntohs(sa.sin_port);
    struct timeval tv = {0, 100000};
    setsockopt(h->listen_fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    pthread_create(&h->thread, NULL, hostile_main, h);
}

static void hostile_stop(hostile *h)
{
    h->stop = true;
    shutdown(h->listen_fd, SHUT_RDWR);
    pthread_join(h->thread, NULL);
    close(h->listen_fd);
}

/* Runs acquire (plain: SET; rlock: a script) against the scenario; returns its code. */
static int run_case(const char *payload, size_t len, bool close_after, bool never_answer, redmutex_kind kind,
                    int64_t *took_ms)
{
    hostile h;
    hostile_start(&h, payload, len, close_after, never_answer);
    char url[64];
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", h.port);
    const char *u = url;
    redmutex_client_options o = REDMUTEX_CLIENT_OPTIONS_INIT;
    o.command_timeout_ms = rt_scaled_ms(300);
    o.connect_timeout_ms = rt_scaled_ms(300);
    redmutex_client *c;
    CHECK_OK(redmutex_client_new(&c, &u, 1, &o));
    redmutex_lock *l;
    redmutex_lock_options lo = REDMUTEX_LOCK_OPTIONS_INIT;
    lo.lease_ms = 5000;
    CHECK_OK(redmutex_lock_new(&l, c, "victim", kind, &lo));
    int64_t t0 = rt_now_ms();
    int rc = redmutex_lock_acquire(l, NULL, 0);
    *took_ms = rt_now_ms() - t0;
    redmutex_lock_free(l);
    redmutex_client_close(c);
    redmutex_client_free(c);
    hostile_stop(&h);
    return rc;
}

#define CASE(payload, close_after, kind, want)                                                                         \
    do {                                                                                                               \
        int64_t took;                                                                                                  \
        int rc = run_case(payload, sizeof(payload) - 1, close_after, false, kind, &took);                              \
        CHECKF(rc == (want), "payload %s: got %d (%s), want %d", #payload, rc, redmutex_last_error(), want);           \
        CHECKF(took < rt_scaled_ms(1000), "payload %s took %lld ms", #payload, (long long)took);                       \
    } while (0)

static void test_garbage_is_a_protocol_error(void)
{
    CASE("HTTP/1.1 400 Bad Request\r\n\r\n", true, REDMUTEX_KIND_LOCK, REDMUTEX_EPROTOCOL);
    CASE("\x01\x02\x03\r\n", false, REDMUTEX_KIND_LOCK, REDMUTEX_EPROTOCOL);
    CASE(":abc\r\n", false, REDMUTEX_KIND_LOCK, REDMUTEX_EPROTOCOL);
}

static void test_wrong_reply_types_are_protocol_errors(void)
{
    CASE(":5\r\n", false, REDMUTEX_KIND_LOCK, REDMUTEX_EPROTOCOL);
    CASE("*0\r\n", false, REDMUTEX_KIND_LOCK, REDMUTEX_EPROTOCOL);
    CASE("+OK\r\n", false, REDMUTEX_KIND_RLOCK, REDMUTEX_EPROTOCOL);
    CASE("*3\r\n:1\r\n$1\r\nx\r\n:1\r\n", false, REDMUTEX_KIND_RLOCK, REDMUTEX_EPROTOCOL);
    CASE("*1\r\n:1\r\n", false, REDMUTEX_KIND_RLOCK, REDMUTEX_EPROTOCOL);
    /* Two replies for one command. */
    CASE("+OK\r\n+OK\r\n", false, REDMUTEX_KIND_LOCK, REDMUTEX_EPROTOCOL);
}

static void test_error_replies_are_server_errors(void)
{
    CASE("-ERR something broke\r\n", false, REDMUTEX_KIND_LOCK, REDMUTEX_ESERVER);
    CASE("-READONLY You can't write against a read only replica.\r\n", false, REDMUTEX_KIND_LOCK, REDMUTEX_ESERVER);
    CASE("-LOADING Redis is loading the dataset in memory\r\n", false, REDMUTEX_KIND_RLOCK, REDMUTEX_ESERVER);
    CASE("-NOPERM this user has no permissions to run the 'evalsha' command\r\n", false, REDMUTEX_KIND_RLOCK,
         REDMUTEX_EAUTH);
}

static void test_truncated_and_oversized_replies(void)
{
    CASE("$10\r\nabc", true, REDMUTEX_KIND_LOCK, REDMUTEX_ECONN);
    CASE("*2147483647\r\n", false, REDMUTEX_KIND_RLOCK, REDMUTEX_EPROTOCOL);
    CASE("*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n:1\r\n", false, REDMUTEX_KIND_RLOCK,
         REDMUTEX_EPROTOCOL);
    /* A bulk string announced as huge that never comes: the timeout ends it. */
    CASE("$999999999\r\nabc", false, REDMUTEX_KIND_LOCK, REDMUTEX_ECONN);
}

static void test_server_that_never_answers_times_out(void)
{
    int64_t took;
    int rc = run_case("", 0, false, true, REDMUTEX_KIND_LOCK, &took);
    CHECK_RC(rc, REDMUTEX_ECONN);
    CHECKF(took >= 250 && took < rt_scaled_ms(1000), "took %lld ms with a %lld ms timeout", (long long)took,
           (long long)rt_scaled_ms(300));
}

int main(int argc, char **argv)
{
    static const rt_test tests[] = {
        {"garbage_is_a_protocol_error", test_garbage_is_a_protocol_error},
        {"wrong_reply_types_are_protocol_errors", test_wrong_reply_types_are_protocol_errors},
        {"error_replies_are_server_errors", test_error_replies_are_server_errors},
        {"truncated_and_oversized_replies", test_truncated_and_oversized_replies},
        {"server_that_never_answers_times_out", test_server_that_never_answers_times_out},
    };
    return rt_run(tests, sizeof tests / sizeof tests[0], argc, argv);
}
