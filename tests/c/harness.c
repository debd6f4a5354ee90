#define _GNU_SOURCE
#include "harness.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static const char *current_test = "";
#define MAX_SERVERS 32
static rs_server *live[MAX_SERVERS];

int64_t rt_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

int64_t rt_now_ms(void) { return rt_now_us() / 1000; }

void rt_sleep_ms(int64_t ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static rt_certs *live_certs;

static void stop_all(void)
{
    for (int i = 0; i < MAX_SERVERS; i++)
        if (live[i])
            rs_stop(live[i]);
}

/* After a test: every server it started, but those kept for the whole binary. */
static void stop_unkept(void)
{
    for (int i = 0; i < MAX_SERVERS; i++)
        if (live[i] && !live[i]->keep)
            rs_stop(live[i]);
}

void rs_keep(rs_server *s) { s->keep = true; }

/* `name` found as execvp would find it, into out; false if it is not there. */
static bool find_executable(const char *name, char *out, size_t size)
{
    if (strchr(name, '/')) {
        snprintf(out, size, "%s", name);
        return access(out, X_OK) == 0;
    }
    const char *path = getenv("PATH");
    for (const char *p = path ? path : "/usr/local/bin:/usr/bin:/bin"; *p;) {
        size_t len = strcspn(p, ":");
        snprintf(out, size, "%.*s/%s", (int)len, p, name);
        if (len > 0 && access(out, X_OK) == 0)
            return true;
        p += len + (p[len] == ':');
    }
    return false;
}

/*
 * The rules of tests/rmserver.py, which every other suite uses: the binary is
 * $REDMUTEX_TEST_SERVER, else redis-server on PATH, and without one the test
 * fails saying what to install. It never skips: a suite that skips every test
 * passes CI while testing nothing.
 */
const char *rt_server_binary(void)
{
    static char path[1024];
    const char *env = getenv("REDMUTEX_TEST_SERVER");
    const char *name = env && *env ? env : "redis-server";
    if (!find_executable(name, path, sizeof path))
        rt_fail(__FILE__, __LINE__,
                "the test server '%s' (%s) is not an executable on PATH. Install Debian's redis-server "
                "(apt-get install redis-server, or scripts/deps.sh), or set REDMUTEX_TEST_SERVER to a "
                "redis-server or valkey-server binary. Tests fail rather than skip without a server "
                "(CONTRIBUTING.md, 'Test servers').",
                name, env && *env ? "REDMUTEX_TEST_SERVER" : "the default");
    return path;
}

double rt_time_scale(void)
{
    static double scale;
    if (scale == 0) {
        const char *e = getenv("REDMUTEX_TEST_TIME_SCALE");
        double v = e ? strtod(e, NULL) : 1;
        scale = v >= 1 ? v : 1;
    }
    return scale;
}

int64_t rt_scaled_ms(int64_t ms) { return (int64_t)((double)ms * rt_time_scale()); }

void rt_fail(const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "FAIL %s (%s:%d): ", current_test, file, line);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    stop_all();
    if (live_certs)
        rt_remove_certs(live_certs);
    _exit(1);
}

static bool named_in(const char *name, const char *const *names)
{
    for (; names && *names; names++)
        if (strcmp(*names, name) == 0)
            return true;
    return false;
}

int rt_run(const rt_test *tests, size_t n, int argc, char **argv) { return rt_run_marked(tests, n, NULL, argc, argv); }

int rt_run_marked(const rt_test *tests, size_t n, const char *const *alone_cases, int argc, char **argv)
{
    signal(SIGPIPE, SIG_DFL); /* the library must never raise it */
    size_t ran = 0;
    const char *mode = getenv("RT_ALONE"); /* "only", "skip" or unset (harness.h) */
    bool only = mode && strcmp(mode, "only") == 0, skip = mode && strcmp(mode, "skip") == 0;
    for (size_t i = 0; i < n; i++) {
        if (argc > 1 && !strstr(tests[i].name, argv[1]))
            continue;
        bool alone = named_in(tests[i].name, alone_cases);
        if ((only && !alone) || (skip && alone))
            continue;
        current_test = tests[i].name;
        int64_t t0 = rt_now_ms();
        tests[i].fn();
        stop_unkept();
        printf("ok   %s (%lld ms)\n", tests[i].name, (long long)(rt_now_ms() - t0));
        fflush(stdout);
        ran++;
    }
    stop_all(); /* the servers kept for the whole binary too */
    if (ran == 0) {
        fprintf(stderr, "no test matched\n");
        return 1;
    }
    return 0;
}

/*
 * Ports for the servers of this test process. Test programs run two at a
 * time (ctest -j2, valgrind.sh), and a server that a test stops and restarts
 * gives its port back meanwhile: a port the kernel picks (bind to port 0)
 * could then go to the other program's next server, and the restarted one's
 * first PING would reach a stranger. So each process takes a block of ports
 * of its own, below the kernel's ephemeral range (which starts at 32768), by
 * holding a flock on /tmp/redmutex-test-ports/block-N until it exits, and
 * hands them out in turn, skipping any that something listens on. Without
 * the directory it falls back to the kernel's choice.
 */
#define PORT_BASE 20000
#define PORT_BLOCK 96
#define PORT_BLOCKS 120 /* 20000..31519 */
static pthread_mutex_t port_mu = PTHREAD_MUTEX_INITIALIZER;
static int port_block = -2; /* -2: not tried yet, -1: no block (kernel's choice) */
static unsigned port_next;

static int reserve_port_block(void)
{
    const char *dir = "/tmp/redmutex-test-ports";
    if (mkdir(dir, 0777) != 0 && errno != EEXIST)
        return -1;
    for (int k = 0; k < PORT_BLOCKS; k++) {
        int b = (int)((unsigned)getpid() + (unsigned)k) % PORT_BLOCKS;
        char path[64];
        snprintf(path, sizeof path, "%s/block-%d", dir, b);
        int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
        if (fd < 0)
            return -1;
        if (flock(fd, LOCK_EX | LOCK_NB) == 0)
            return b; /* fd stays open: the block is ours until exit */
        close(fd);
    }
    return -1;
}

/* Binds port (0: the kernel's choice) as a listening server would; returns the port or 0. */
static int try_port(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    struct sockaddr_in sa = {0};
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    sa.sin_port = htons((uint16_t)port);
    socklen_t len = sizeof sa;
    bool ok = fd >= 0 && setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) == 0 &&
              bind(fd, (struct sockaddr *)&sa, sizeof sa) == 0 && getsockname(fd, (struct sockaddr *)&sa, &len) == 0;
    if (fd >= 0)
        close(fd);
    return ok ? ntohs(sa.sin_port) : 0;
}

int rt_free_port(void)
{
    pthread_mutex_lock(&port_mu);
    if (port_block == -2)
        port_block = reserve_port_block();
    int port = 0;
    for (int tries = 0; port_block >= 0 && tries < PORT_BLOCK && !port; tries++)
        port = try_port(PORT_BASE + port_block * PORT_BLOCK + (int)(port_next++ % PORT_BLOCK));
    pthread_mutex_unlock(&port_mu);
    if (!port && !(port = try_port(0)))
        rt_fail(__FILE__, __LINE__, "cannot find a free port: %s", strerror(errno));
    return port;
}

static void spawn(rs_server *s)
{
    char conf[1024];
    snprintf(conf, sizeof conf, "%s/redis.conf", s->dir);
    FILE *f = fopen(conf, "w");
    if (!f)
        rt_fail(__FILE__, __LINE__, "cannot write %s", conf);
    /* The configuration every suite's servers share, then this server's own. */
    fprintf(f, "include %s\nport %d\ndir %s\nlogfile %s/redis.log\nunixsocket %s\nunixsocketperm 700\n%s\n",
            RT_SERVER_CONF, s->port, s->dir, s->dir, s->unix_path, s->extra);
    if (s->tls_port)
        fprintf(f, "tls-port %d\n", s->tls_port);
    fclose(f);
    const char *binary = rt_server_binary(); /* fails the test here, not as an exit of the child */
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid == 0) {
        /* The server dies with the test process, whatever happens to it. */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(1);
        execl(binary, binary, conf, s->sentinel ? "--sentinel" : (char *)NULL, (char *)NULL);
        _exit(127);
    }
    s->pid = pid;
    int64_t deadline = rt_now_ms() + 10000;
    for (;;) {
        redisReply *r = rs_cmd(s, "PING");
        if (r) {
            bool loading = r->type == REDIS_REPLY_ERROR && strncmp(r->str, "LOADING", 7) == 0;
            freeReplyObject(r);
            if (!loading)
                break;
        }
        int status;
        if (waitpid(pid, &status, WNOHANG) == pid)
            rt_fail(__FILE__, __LINE__, "%s exited at start (see %s/redis.log)", binary, s->dir);
        if (rt_now_ms() > deadline)
            rt_fail(__FILE__, __LINE__, "%s did not start within 10 s", rt_server_binary());
        rt_sleep_ms(5);
    }
}

/* A plain server, or a sentinel (its config file says so, spawn()). */
static void start_as(rs_server *s, const char *extra_config, bool sentinel)
{
    memset(s, 0, sizeof s[0]);
    s->sentinel = sentinel;
    snprintf(s->dir, sizeof s->dir, "/tmp/redmutex-test-XXXXXX");
    if (!mkdtemp(s->dir))
        rt_fail(__FILE__, __LINE__, "mkdtemp: %s", strerror(errno));
    snprintf(s->unix_path, sizeof s->unix_path, "%s/redis.sock", s->dir);
    snprintf(s->extra, sizeof s->extra, "%s", extra_config ? extra_config : "");
    s->port = rt_free_port();
    snprintf(s->url, sizeof s->url, "redis://127.0.0.1:%d", s->port);
    for (int i = 0; i < MAX_SERVERS; i++)
        if (!live[i]) {
            live[i] = s;
            break;
        }
    spawn(s);
}

void rs_start(rs_server *s, const char *extra_config) { start_as(s, extra_config, false); }

void rs_start_sentinel(rs_server *s, const char *extra_config) { start_as(s, extra_config, true); }

void rs_start_tls(rs_server *s, const rt_certs *certs, const rs_tls_config *tls, const char *extra_config)
{
    memset(s, 0, sizeof s[0]);
    snprintf(s->dir, sizeof s->dir, "/tmp/redmutex-test-XXXXXX");
    if (!mkdtemp(s->dir))
        rt_fail(__FILE__, __LINE__, "mkdtemp: %s", strerror(errno));
    snprintf(s->unix_path, sizeof s->unix_path, "%s/redis.sock", s->dir);
    snprintf(s->extra, sizeof s->extra,
             "tls-cert-file %s\ntls-key-file %s\ntls-ca-cert-file %s\ntls-auth-clients %s\n%s",
             rt_cert(certs, tls->cert), rt_cert(certs, tls->key), rt_cert(certs, "ca.pem"),
             tls->require_client_cert ? "yes" : "no", extra_config ? extra_config : "");
    s->port = tls->plain_port ? rt_free_port() : 0;
    s->tls_port = rt_free_port();
    snprintf(s->url, sizeof s->url, "rediss://127.0.0.1:%d", s->tls_port);
    for (int i = 0; i < MAX_SERVERS; i++)
        if (!live[i]) {
            live[i] = s;
            break;
        }
    spawn(s);
}

void rt_make_certs(rt_certs *c)
{
    snprintf(c->dir, sizeof c->dir, "/tmp/redmutex-certs-XXXXXX");
    if (!mkdtemp(c->dir))
        rt_fail(__FILE__, __LINE__, "mkdtemp: %s", strerror(errno));
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "sh '%s' '%s' >'%s/make_certs.log' 2>&1", RT_MAKE_CERTS, c->dir, c->dir);
    if (system(cmd) != 0)
        rt_fail(__FILE__, __LINE__, "making test certificates failed (see %s/make_certs.log)", c->dir);
    live_certs = c;
}

const char *rt_cert(const rt_certs *c, const char *file)
{
    static _Thread_local char bufs[8][512];
    static _Thread_local int next;
    char *b = bufs[next++ % 8];
    snprintf(b, sizeof bufs[0], "%s/%s", c->dir, file);
    return b;
}

void rt_remove_certs(rt_certs *c)
{
    if (!c->dir[0])
        return;
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", c->dir);
    if (system(cmd) != 0)
        fprintf(stderr, "warning: could not remove %s\n", c->dir);
    c->dir[0] = '\0';
    if (live_certs == c)
        live_certs = NULL;
}

void rs_restart(rs_server *s)
{
    if (s->pid > 0)
        rs_kill(s);
    spawn(s);
}

void rs_kill(rs_server *s)
{
    pid_t pid = s->pid; /* never kill(0, ...): that is the whole process group */
    if (pid > 0) {
        kill(pid, SIGCONT);
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        s->pid = 0;
    }
}

void rs_stop(rs_server *s)
{
    rs_kill(s);
    for (int i = 0; i < MAX_SERVERS; i++)
        if (live[i] == s)
            live[i] = NULL;
    if (s->dir[0]) {
        char cmd[600];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", s->dir);
        if (system(cmd) != 0)
            fprintf(stderr, "warning: could not remove %s\n", s->dir);
        s->dir[0] = '\0';
    }
}

void rs_pause(rs_server *s) { kill(s->pid, SIGSTOP); }

void rs_resume(rs_server *s) { kill(s->pid, SIGCONT); }

static redisReply *vcmd(rs_server *s, const char *fmt, va_list ap)
{
    struct timeval tv = {2, 0};
    /* A TLS-only server is reached over its Unix socket. */
    redisContext *ctx =
        s->port ? redisConnectWithTimeout("127.0.0.1", s->port, tv) : redisConnectUnixWithTimeout(s->unix_path, tv);
    if (!ctx || ctx->err) {
        if (ctx)
            redisFree(ctx);
        return NULL;
    }
    redisSetTimeout(ctx, tv);
    redisReply *r = redisvCommand(ctx, fmt, ap);
    redisFree(ctx);
    return r;
}

redisReply *rs_cmd(rs_server *s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = vcmd(s, fmt, ap);
    va_end(ap);
    return r;
}

long long rs_int(rs_server *s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = vcmd(s, fmt, ap);
    va_end(ap);
    long long v = r && r->type == REDIS_REPLY_INTEGER ? r->integer : -999;
    if (r)
        freeReplyObject(r);
    return v;
}

long long rs_num(rs_server *s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = vcmd(s, fmt, ap);
    va_end(ap);
    long long v = -999;
    if (r && r->type == REDIS_REPLY_INTEGER)
        v = r->integer;
    else if (r && r->type == REDIS_REPLY_STRING)
        v = atoll(r->str);
    else if (r && r->type == REDIS_REPLY_NIL)
        v = 0;
    if (r)
        freeReplyObject(r);
    return v;
}

bool rs_exists(rs_server *s, const char *key) { return rs_int(s, "EXISTS %s", key) == 1; }

long long rs_count_keys(rs_server *s, const char *pattern)
{
    redisReply *r = rs_cmd(s, "KEYS %s", pattern);
    long long n = r && r->type == REDIS_REPLY_ARRAY ? (long long)r->elements : -1;
    if (r)
        freeReplyObject(r);
    return n;
}

redmutex_client *rt_client(const rs_server *s, int64_t command_timeout_ms)
{
    redmutex_client_options o;
    redmutex_client_options_init(&o, REDMUTEX_CLIENT_OPTIONS_VERSION);
    if (command_timeout_ms > 0)
        o.command_timeout_ms = command_timeout_ms;
    const char *url = s->url;
    redmutex_client *c = NULL;
    CHECK_OK(redmutex_client_new(&c, &url, 1, &o));
    return c;
}

long long rs_numsub(rs_server *s, const char *channel)
{
    redisReply *r = rs_cmd(s, "PUBSUB NUMSUB %s", channel);
    long long n = r && r->type == REDIS_REPLY_ARRAY && r->elements == 2 ? r->element[1]->integer : -1;
    if (r)
        freeReplyObject(r);
    return n;
}

/* ---- delaying proxy ---------------------------------------------------- */

typedef struct proxy_pipe {
    rs_proxy *p;
    int from, to;
    bool to_server;
} proxy_pipe;

static void *proxy_pump(void *arg)
{
    proxy_pipe *pp = arg;
    char buf[65536];
    for (;;) {
        ssize_t n = recv(pp->from, buf, sizeof buf, 0);
        /* Accepted sockets inherit the listener's receive timeout: an idle
           connection is not a closed one. */
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) && !atomic_load(&pp->p->stop))
            continue;
        if (n <= 0)
            break;
        int until = atomic_load(&pp->p->hold_until);
        if (pp->to_server && pp->p->pattern[0] && memmem(buf, (size_t)n, pp->p->pattern, strlen(pp->p->pattern)) &&
            (until == 0 || (until > 0 && atomic_load(&pp->p->delayed) < until))) {
            /* The cut comes before the count: a test that sees `delayed`
               grow may rely on the client's connection having ended. */
            if (atomic_load(&pp->p->drop_held)) {
                shutdown(pp->from, SHUT_RDWR); /* the connection dies with the request unsent */
                atomic_fetch_add(&pp->p->delayed, 1);
                goto out;
            }
            if (atomic_load(&pp->p->cut_client))
                shutdown(pp->from, SHUT_RDWR); /* the client sees its connection end */
            atomic_fetch_add(&pp->p->delayed, 1);
            rt_sleep_ms(pp->p->delay_ms);
            for (ssize_t off = 0; off < n;) {
                ssize_t w = send(pp->to, buf + off, (size_t)(n - off), MSG_NOSIGNAL);
                if (w <= 0)
                    goto out;
                off += w;
            }
            atomic_fetch_add(&pp->p->forwarded, 1);
            continue;
        }
        for (ssize_t off = 0; off < n;) {
            ssize_t w = send(pp->to, buf + off, (size_t)(n - off), MSG_NOSIGNAL);
            if (w <= 0)
                goto out;
            off += w;
        }
    }
out:
    shutdown(pp->to, SHUT_WR);
    shutdown(pp->from, SHUT_RD);
    free(pp);
    return NULL;
}

/*
 * The flight-counting proxy: one thread per connection reads both sides as
 * soon as bytes arrive (so bytes the client sends back to back count as one
 * flight) and forwards each chunk delay_us after it arrived, in order.
 */
typedef struct flight_chunk {
    struct flight_chunk *next;
    int64_t due_us;
    size_t len;
    char data[];
} flight_chunk;

typedef struct flight_conn {
    rs_proxy *p;
    int fd[2]; /* client, server */
} flight_conn;

static void *flight_main(void *arg)
{
    flight_conn *fc = arg;
    rs_proxy *p = fc->p;
    flight_chunk *head[2] = {NULL, NULL}, **tail[2] = {&head[0], &head[1]}; /* [0] to the server */
    bool open = true;
    while (open || head[0] || head[1]) {
        int64_t now = rt_now_us(), wait = 100000;
        for (int d = 0; d < 2; d++) {
            while (head[d] && head[d]->due_us <= now) {
                flight_chunk *ch = head[d];
                for (size_t off = 0; off < ch->len;) {
                    ssize_t w = send(fc->fd[1 - d], ch->data + off, ch->len - off, MSG_NOSIGNAL);
                    if (w <= 0)
                        break;
                    off += (size_t)w;
                }
                head[d] = ch->next;
                if (!head[d])
                    tail[d] = &head[d];
                free(ch);
            }
            if (head[d] && head[d]->due_us - now < wait)
                wait = head[d]->due_us - now;
        }
        if (!open)
            continue;
        struct pollfd pf[2] = {{fc->fd[0], POLLIN, 0}, {fc->fd[1], POLLIN, 0}};
        struct timespec ts = {wait / 1000000, (wait % 1000000) * 1000};
        if (ppoll(pf, 2, &ts, NULL) <= 0)
            continue;
        for (int d = 0; d < 2 && open; d++) {
            if (!pf[d].revents)
                continue;
            char buf[65536];
            ssize_t n = recv(fc->fd[d], buf, sizeof buf, 0);
            if (n <= 0) {
                open = false;
                break;
            }
            /* A client flight starts with the first chunk after the server spoke. */
            if (atomic_exchange(&p->last_dir, d + 1) != d + 1 && d == 0)
                atomic_fetch_add(&p->flights, 1);
            flight_chunk *ch = malloc(sizeof *ch + (size_t)n);
            ch->next = NULL;
            ch->due_us = rt_now_us() + p->delay_us;
            ch->len = (size_t)n;
            memcpy(ch->data, buf, (size_t)n);
            *tail[d] = ch;
            tail[d] = &ch->next;
        }
    }
    close(fc->fd[0]);
    close(fc->fd[1]);
    free(fc);
    return NULL;
}

static void *proxy_accept(void *arg)
{
    rs_proxy *p = arg;
    while (!atomic_load(&p->stop)) {
        int cfd = accept(p->listen_fd, NULL, NULL);
        if (cfd < 0)
            continue;
        int sfd = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in sa = {0};
        sa.sin_family = AF_INET;
        sa.sin_port = htons((uint16_t)p->upstream_port);
        sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        if (connect(sfd, (struct sockaddr *)&sa, sizeof sa) != 0) {
            close(cfd);
            close(sfd);
            continue;
        }
        int one = 1;
        setsockopt(cfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        setsockopt(sfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        if (p->delay_all) {
            flight_conn *fc = malloc(sizeof *fc);
            *fc = (flight_conn){p, {cfd, sfd}};
            pthread_t t;
            pthread_create(&t, NULL, flight_main, fc);
            pthread_detach(t);
            continue;
        }
        proxy_pipe *up = malloc(sizeof *up), *down = malloc(sizeof *down);
        *up = (proxy_pipe){p, cfd, sfd, true};
        *down = (proxy_pipe){p, sfd, cfd, false};
        pthread_t t1, t2;
        pthread_create(&t1, NULL, proxy_pump, up);
        pthread_detach(t1);
        pthread_create(&t2, NULL, proxy_pump, down);
        pthread_detach(t2);
    }
    return NULL;
}

/* Proxies live in static storage and are never reused: detached threads of
   an earlier one may still be reading theirs. */
static rs_proxy proxies[160]; /* never reused: pump threads may outlive a stop */
static atomic_int proxies_used;

static rs_proxy *proxy_start(int upstream_port, const char *pattern, int delay_ms, bool delay_all);

rs_proxy *rs_proxy_start(const rs_server *upstream, const char *pattern, int delay_ms)
{
    return proxy_start(upstream->port, pattern, delay_ms, false);
}

rs_proxy *rs_flight_proxy_start(int upstream_port, int delay_us)
{
    rs_proxy *p = proxy_start(upstream_port, "", 0, true);
    p->delay_us = delay_us;
    return p;
}

static rs_proxy *proxy_start(int upstream_port, const char *pattern, int delay_ms, bool delay_all)
{
    int k = atomic_fetch_add(&proxies_used, 1);
    if (k >= (int)(sizeof proxies / sizeof proxies[0]))
        rt_fail(__FILE__, __LINE__, "too many proxies");
    rs_proxy *p = &proxies[k];
    p->upstream_port = upstream_port;
    p->delay_all = delay_all;
    snprintf(p->pattern, sizeof p->pattern, "%s", pattern);
    p->delay_ms = delay_ms;
    p->listen_fd = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(p->listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct timeval tv = {0, 100000}; /* accept() wakes up to notice stop */
    setsockopt(p->listen_fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    struct sockaddr_in sa = {0};
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof sa;
    if (bind(p->listen_fd, (struct sockaddr *)&sa, sizeof sa) != 0 ||
        getsockname(p->listen_fd, (struct sockaddr *)&sa, &len) != 0 || listen(p->listen_fd, 64) != 0)
        rt_fail(__FILE__, __LINE__, "proxy: %s", strerror(errno));
    p->port = ntohs(sa.sin_port);
    snprintf(p->url, sizeof p->url, "redis://127.0.0.1:%d", p->port);
    pthread_t t;
    pthread_create(&t, NULL, proxy_accept, p);
    pthread_detach(t);
    return p;
}

void rs_proxy_stop(rs_proxy *p)
{
    atomic_store(&p->stop, 1);
    rt_sleep_ms(150); /* the accept loop notices within its 100 ms timeout */
    close(p->listen_fd);
}
