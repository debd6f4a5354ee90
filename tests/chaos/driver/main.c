/* chaos_driver: options, the client, the lost-lock callback, stdin commands, mode dispatch. */
#define _GNU_SOURCE
#include "driver.h"

#include <errno.h>
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void usage(void)
{
    fprintf(stderr,
            "usage: chaos_driver --id NAME --url URL [--url URL...] --resource HOST:PORT [options]\n"
            "  --mode workload|probe|nonowner|fork|reentrant|hold   --threads N --keys N --prefix P\n"
            "  --kind lock|rlock --lease MS (0: watchdog) --watchdog-lease MS --no-fencing\n"
            "  --cs MIN:MAX --think MS --wait MS --nest K --hold-margin MS --owner-per-hold --owner-fixed\n"
            "  --cmd-timeout MS --connect-timeout MS --backoff-cap MS --retry-delay MS\n"
            "  --min-replicas N --replica-timeout MS --leave-on-free --seed N --ops N\n");
    exit(64);
}

static void defaults(drv_config *c)
{
    memset(c, 0, sizeof *c);
    c->id = "c";
    c->mode = "workload";
    c->threads = 1;
    c->nkeys = 1;
    c->prefix = "lk:";
    c->kind = REDMUTEX_KIND_LOCK;
    c->watchdog_lease_ms = 1000;
    c->fencing = true;
    c->cs_min_ms = 5;
    c->cs_max_ms = 20;
    c->wait_ms = 2000;
    c->cmd_timeout_ms = 200;
    c->connect_timeout_ms = 300;
    c->backoff_cap_ms = 100;
    c->retry_delay_ms = 50;
    c->replica_timeout_ms = 200;
    c->nest = 1;
    c->seed = 1;
}

static int64_t num(const char *s)
{
    char *end;
    long long v = strtoll(s, &end, 10);
    if (*s == '\0' || *end != '\0')
        usage();
    return v;
}

static void parse_resource(drv_config *c, const char *s)
{
    const char *colon = strrchr(s, ':');
    if (!colon || (size_t)(colon - s) >= sizeof c->resource_host)
        usage();
    memcpy(c->resource_host, s, (size_t)(colon - s));
    c->resource_host[colon - s] = '\0';
    c->resource_port = (int)num(colon + 1);
}

static void parse_range(const char *s, int64_t *lo, int64_t *hi)
{
    char buf[64];
    snprintf(buf, sizeof buf, "%s", s);
    char *colon = strchr(buf, ':');
    if (colon)
        *colon = '\0';
    *lo = num(buf);
    *hi = colon ? num(colon + 1) : *lo;
}

static void parse_args(drv_config *c, int argc, char **argv)
{
    static const struct option opts[] = {
        {"id", 1, 0, 'i'},           {"mode", 1, 0, 'm'},         {"url", 1, 0, 'u'},
        {"resource", 1, 0, 'r'},     {"threads", 1, 0, 't'},      {"keys", 1, 0, 'k'},
        {"prefix", 1, 0, 'P'},       {"kind", 1, 0, 'K'},         {"lease", 1, 0, 'l'},
        {"watchdog-lease", 1, 0, 'W'}, {"no-fencing", 0, 0, 'F'}, {"cs", 1, 0, 'c'},
        {"think", 1, 0, 'T'},        {"wait", 1, 0, 'w'},         {"nest", 1, 0, 'n'},
        {"hold-margin", 1, 0, 'H'},  {"owner-per-hold", 0, 0, 'O'}, {"cmd-timeout", 1, 0, 'C'},
        {"owner-fixed", 0, 0, 'f'},
        {"connect-timeout", 1, 0, 'N'}, {"backoff-cap", 1, 0, 'B'}, {"retry-delay", 1, 0, 'R'},
        {"min-replicas", 1, 0, 'M'}, {"replica-timeout", 1, 0, 'X'}, {"leave-on-free", 0, 0, 'L'},
        {"seed", 1, 0, 's'},         {"ops", 1, 0, 'o'},          {0, 0, 0, 0}};
    for (int ch; (ch = getopt_long(argc, argv, "", opts, NULL)) != -1;) {
        switch (ch) {
        case 'i': c->id = optarg; break;
        case 'm': c->mode = optarg; break;
        case 'u':
            if (c->n_urls == DRV_MAX_URLS)
                usage();
            c->urls[c->n_urls++] = optarg;
            break;
        case 'r': parse_resource(c, optarg); break;
        case 't': c->threads = (int)num(optarg); break;
        case 'k': c->nkeys = (int)num(optarg); break;
        case 'P': c->prefix = optarg; break;
        case 'K': c->kind = strcmp(optarg, "rlock") == 0 ? REDMUTEX_KIND_RLOCK : REDMUTEX_KIND_LOCK; break;
        case 'l': c->lease_ms = num(optarg); break;
        case 'W': c->watchdog_lease_ms = num(optarg); break;
        case 'F': c->fencing = false; break;
        case 'c': parse_range(optarg, &c->cs_min_ms, &c->cs_max_ms); break;
        case 'T': c->think_ms = num(optarg); break;
        case 'w': c->wait_ms = num(optarg); break;
        case 'n': c->nest = (int)num(optarg); break;
        case 'H': c->hold_margin_ms = num(optarg); break;
        case 'O': c->owner_per_hold = true; break;
        case 'f': c->owner_fixed = true; break;
        case 'C': c->cmd_timeout_ms = num(optarg); break;
        case 'N': c->connect_timeout_ms = num(optarg); break;
        case 'B': c->backoff_cap_ms = num(optarg); break;
        case 'R': c->retry_delay_ms = num(optarg); break;
        case 'M': c->min_replicas = num(optarg); break;
        case 'X': c->replica_timeout_ms = num(optarg); break;
        case 'L': c->leave_on_free = true; break;
        case 's': c->seed = (uint64_t)num(optarg); break;
        case 'o': c->ops = num(optarg); break;
        default: usage();
        }
    }
    if (c->n_urls == 0 || c->resource_port == 0 || c->threads < 1 || c->nkeys < 1 || c->nest < 1)
        usage();
}

int drv_client_new(redmutex_client **out, const drv_config *cfg)
{
    redmutex_client_options o;
    redmutex_client_options_init(&o, REDMUTEX_CLIENT_OPTIONS_VERSION);
    o.watchdog_lease_ms = cfg->watchdog_lease_ms;
    o.command_timeout_ms = cfg->cmd_timeout_ms;
    o.connect_timeout_ms = cfg->connect_timeout_ms;
    o.wait_backoff_cap_ms = cfg->backoff_cap_ms;
    o.retry_delay_ms = cfg->retry_delay_ms;
    o.min_replicas = cfg->min_replicas;
    o.replica_timeout_ms = cfg->replica_timeout_ms;
    o.shutdown_timeout_ms = 2000;
    if (cfg->leave_on_free)
        o.flags |= REDMUTEX_CLIENT_LEAVE_LOCKS_ON_FREE;
    return redmutex_client_new(out, cfg->urls, cfg->n_urls, &o);
}

void drv_lock_options(redmutex_lock_options *o, const drv_config *cfg, void *payload)
{
    redmutex_lock_options_init(o, REDMUTEX_LOCK_OPTIONS_VERSION);
    o->lease_ms = cfg->lease_ms;
    if (cfg->fencing)
        o->flags |= REDMUTEX_LOCK_FENCING;
    o->on_lost = drv_on_lost;
    o->on_lost_payload = payload;
}

void drv_on_lost(redmutex_lock *lock, const char *owner, redmutex_state state, void *payload)
{
    drv_lock_tag *tag = payload;
    static const char *names[] = {"UNLOCKED", "HELD", "FAILING", "LOST"};
    int64_t validity = -1;
    int64_t t = drv_now_ns();
    redmutex_lock_validity(&validity, lock, owner);
    char key[1100];
    drv_json_escape(key, sizeof key, redmutex_lock_name(lock));
    drv_log_at(t, tag ? tag->worker : -1, tag ? atomic_load(&tag->hold) : 0, "lost_cb",
            "\"state\":\"%s\",\"val\":%lld,\"key\":\"%s\"", names[state & 3], (long long)validity, key);
}

int drv_read_command(char *buf, size_t size, int timeout_ms)
{
    /* Own line buffer over read(2), so that poll() tells the truth about it. */
    static char pending[4096];
    static size_t have;
    for (;;) {
        char *nl = memchr(pending, '\n', have);
        if (nl) {
            size_t len = (size_t)(nl - pending);
            size_t n = len < size - 1 ? len : size - 1;
            memcpy(buf, pending, n);
            buf[n] = '\0';
            memmove(pending, nl + 1, have - len - 1);
            have -= len + 1;
            return 1;
        }
        if (have == sizeof pending)
            have = 0; /* an absurdly long line: drop it */
        struct pollfd pfd = {0, POLLIN, 0};
        int pr = poll(&pfd, 1, timeout_ms);
        if (pr == 0)
            return 0;
        if (pr < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        ssize_t got = read(0, pending + have, sizeof pending - have);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            return -1;
        have += (size_t)got;
    }
}

int main(int argc, char **argv)
{
    signal(SIGPIPE, SIG_IGN);
    drv_ctx ctx;
    defaults(&ctx.cfg);
    parse_args(&ctx.cfg, argc, argv);
    atomic_init(&ctx.stop, false);
    drv_log_init(ctx.cfg.id);

    int rc = drv_client_new(&ctx.client, &ctx.cfg);
    if (rc != 0) {
        drv_log_error(-1, 0, "client_err", rc, drv_now_ns());
        return 69;
    }
    char cid[1100];
    drv_json_escape(cid, sizeof cid, redmutex_client_id(ctx.client));
    drv_log(-1, 0, "start", "\"lang\":\"c\",\"pid\":%d,\"client\":\"%s\",\"mode\":\"%s\"", (int)getpid(), cid,
            ctx.cfg.mode);
    drv_log_stats();

    const char *m = ctx.cfg.mode;
    if (strcmp(m, "workload") == 0)
        rc = drv_run_workload(&ctx);
    else if (strcmp(m, "probe") == 0)
        rc = drv_run_probe(&ctx);
    else if (strcmp(m, "nonowner") == 0)
        rc = drv_run_nonowner(&ctx);
    else if (strcmp(m, "fork") == 0)
        rc = drv_run_fork(&ctx);
    else if (strcmp(m, "reentrant") == 0)
        rc = drv_run_reentrant(&ctx);
    else if (strcmp(m, "hold") == 0)
        rc = drv_run_hold(&ctx);
    else
        usage();

    drv_log_stats();
    /* close() releases what is still held (the S18 rows free a client holding 50
       locks) and blocks until done; free() alone would do it in the background,
       which the exit right after would cut short. */
    int64_t t0 = drv_now_ns();
    int closed = redmutex_client_close(ctx.client);
    redmutex_client_free(ctx.client);
    drv_log(-1, 0, "end", "\"rc\":%d,\"close_rc\":%d,\"free_ms\":%.3f", rc, closed,
            (double)(drv_now_ns() - t0) / 1e6);
    return rc == 0 ? 0 : 1;
}
