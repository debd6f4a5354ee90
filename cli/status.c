/*
 * redmutex status: who holds a lock, of what kind, for how long, and its
 * fence counter. redmutex release --force: delete a lock whoever holds it.
 *
 * Both read the lock with redmutex_lock_inspect(), over the library's own
 * connections (TLS, ACL users, every URL form it takes). With several
 * servers the headline is the library's Redlock answer (what a majority
 * holds), and each server is then read on its own, through a client of
 * its own, for its line.
 */
#include "cli.h"

#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Budgets for reading one server of several: an unreachable one costs at most their sum. */
#define SERVER_CONNECT_TIMEOUT_MS 1000
#define SERVER_COMMAND_TIMEOUT_MS 1000

/* One server's own view, for the per-server lines. */
typedef struct server_view {
    char url[1024]; /* as given, redacted */
    bool reachable;
    char error[400]; /* why not, when !reachable */
    redmutex_lock_info info;
} server_view;

typedef struct status_report {
    const char *name;
    redmutex_lock_info info; /* the servers' answer */
    size_t n;
    server_view *servers; /* n of them */
} status_report;

/* Parses [-u URL]... [--json] [--force] NAME. */
/* status --watch: refresh every interval_ms until a signal; NULL for release. */
typedef struct watch_opts {
    bool on;
    int64_t interval_ms;
} watch_opts;

static int parse_common(cli_servers *servers, const char **name, bool *json, bool *force, watch_opts *watch, int argc,
                        char **argv)
{
    static const struct option opts[] = {{"url", required_argument, NULL, 'u'},
                                         {"json", no_argument, NULL, 'j'},
                                         {"force", no_argument, NULL, 'f'},
                                         {"watch", no_argument, NULL, 'w'},
                                         {"interval", required_argument, NULL, 'i'},
                                         {"help", no_argument, NULL, 'h'},
                                         {NULL, 0, NULL, 0}};
    opterr = 0;
    optind = 1;
    int c;
    while ((c = getopt_long(argc, argv, ":u:h", opts, NULL)) != -1) {
        int rc = 0;
        if (c == 'h') {
            cli_print_help();
            return -1;
        } else if (c == 'u') {
            rc = cli_servers_add(servers, optarg);
        } else if (c == 'j' && json) {
            *json = true;
        } else if (c == 'f' && force) {
            *force = true;
        } else if (c == 'w' && watch) {
            watch->on = true;
        } else if (c == 'i' && watch) {
            char *end;
            double sec = strtod(optarg, &end);
            if (end == optarg || *end || !(sec >= 0.1 && sec <= 3600))
                rc = cli_usage_error("%s: --interval takes seconds from 0.1 to 3600, not '%s'", argv[0], optarg);
            watch->interval_ms = (int64_t)(sec * 1000 + 0.5);
        } else if (c == 'j' || c == 'f' || c == 'w' || c == 'i') { /* options of the other command */
            rc = cli_usage_error("%s: unknown option '%s'", argv[0], argv[optind - 1]);
        } else {
            rc = cli_bad_option(c, argv, optind);
        }
        if (rc)
            return rc;
    }
    if (optind == argc)
        return cli_usage_error("%s: missing the lock NAME", argv[0]);
    if (argc - optind > 1)
        return cli_usage_error("%s: unexpected '%s' after the lock name", argv[0], argv[optind + 1]);
    *name = argv[optind];
    if (watch && watch->interval_ms && !watch->on)
        return cli_usage_error("%s: --interval goes with --watch", argv[0]);
    return cli_servers_finish(servers);
}

/*
 * Reads what the servers hold under `name` into *info. A fair lock nobody
 * waits for stores what a reentrant lock does, and is read as one.
 * Returns 0 or an exit status (message printed).
 */
static int inspect(redmutex_lock_info *info, redmutex_client *client, const char *name)
{
    redmutex_lock *lock;
    int rc = redmutex_lock_new(&lock, client, name, REDMUTEX_KIND_RLOCK, NULL);
    if (rc)
        return cli_library_error("bad lock name", rc);
    redmutex_lock_info fresh = REDMUTEX_LOCK_INFO_INIT;
    *info = fresh;
    rc = redmutex_lock_inspect(info, lock);
    redmutex_lock_free(lock);
    if (rc == REDMUTEX_EWRONGTYPE) {
        cli_error("'%s' is not a lock: %s", name, redmutex_last_error());
        return CLI_EXIT_DATAERR;
    }
    return rc ? cli_library_error("cannot read the lock", rc) : 0;
}

/* ---- status ------------------------------------------------------------- */

/* Server i's own view, through a client for it alone. */
static void read_server(server_view *v, const char *url, const char *name)
{
    redmutex_url_redact(v->url, sizeof v->url, url);
    redmutex_client_options o;
    redmutex_client_options_init(&o, REDMUTEX_CLIENT_OPTIONS_VERSION);
    o.connect_timeout_ms = SERVER_CONNECT_TIMEOUT_MS;
    o.command_timeout_ms = SERVER_COMMAND_TIMEOUT_MS;
    redmutex_client *c = NULL;
    redmutex_lock *lock = NULL;
    redmutex_lock_info fresh = REDMUTEX_LOCK_INFO_INIT;
    v->info = fresh;
    int rc = redmutex_client_new(&c, &url, 1, &o);
    if (rc == 0)
        rc = redmutex_lock_new(&lock, c, name, REDMUTEX_KIND_RLOCK, NULL);
    if (rc == 0)
        rc = redmutex_lock_inspect(&v->info, lock);
    v->reachable = rc == 0;
    if (rc)
        snprintf(v->error, sizeof v->error, "%s", redmutex_last_error());
    redmutex_lock_free(lock);
    redmutex_client_free(c);
}

static const char *kind_name(int kind)
{
    switch (kind) {
    case REDMUTEX_KIND_LOCK:
        return "lock";
    case REDMUTEX_KIND_RLOCK:
        return "rlock";
    case REDMUTEX_KIND_FAIR:
        return "fair";
    case REDMUTEX_KIND_READ:
    case REDMUTEX_KIND_WRITE:
        return "rwlock";
    default:
        return NULL;
    }
}

static const char *kind_text(int kind)
{
    switch (kind) {
    case REDMUTEX_KIND_LOCK:
        return "lock (plain, redis-py Lock format)";
    case REDMUTEX_KIND_RLOCK:
        return "rlock (reentrant, Redisson RLock format)";
    case REDMUTEX_KIND_FAIR:
        return "fair (reentrant and fair, Redisson RFairLock format)";
    case REDMUTEX_KIND_READ:
        return "rwlock, read-locked (Redisson RReadWriteLock format)";
    default:
        return "rwlock, write-locked (Redisson RReadWriteLock format)";
    }
}

/* The Redis type the kind is stored as (the JSON's "type", kept from earlier versions). */
static const char *redis_type(const redmutex_lock_info *i)
{
    return !i->held ? "none" : i->kind == REDMUTEX_KIND_LOCK ? "string" : "hash";
}

static void print_ttl(int64_t ttl)
{
    if (ttl == -1)
        printf("none (the lock never expires)");
    else
        printf("%.3f s", (double)ttl / 1000);
}

static void print_server(const server_view *v)
{
    printf("    %s  ", v->url);
    if (!v->reachable) {
        printf("unreachable: %s\n", v->error);
        return;
    }
    printf("%s", v->info.held ? "held" : "free");
    if (v->info.owner[0])
        printf("  owner %s", v->info.owner);
    if (v->info.held) {
        printf("  ttl ");
        print_ttl(v->info.ttl_ms);
    }
    if (v->info.fence >= 0)
        printf("  fence %lld", (long long)v->info.fence);
    printf("\n");
}

static void print_owner(const redmutex_lock_info *i)
{
    if (!i->owner[0])
        return;
    if (i->kind == REDMUTEX_KIND_LOCK)
        printf("  owner   %s... (start of the token)\n", i->owner);
    else if (i->kind == REDMUTEX_KIND_READ)
        printf("  owner   %s (hold count %lld; %lld reader%s)\n", i->owner, (long long)i->hold_count,
               (long long)i->readers, i->readers == 1 ? "" : "s");
    else
        printf("  owner   %s (hold count %lld)\n", i->owner, (long long)i->hold_count);
}

static void print_text(const status_report *s)
{
    const redmutex_lock_info *i = &s->info;
    printf("%s: %s\n", s->name, i->held ? "held" : "free");
    if (i->held) {
        printf("  kind    %s\n", kind_text(i->kind));
        print_owner(i);
        if (i->kind == REDMUTEX_KIND_WRITE && i->readers)
            printf("  readers %lld (the writer's own read holds)\n", (long long)i->readers);
        printf("  ttl     ");
        print_ttl(i->ttl_ms);
        printf("\n");
    }
    if (i->queue_length)
        printf("  queue   %lld waiting\n", (long long)i->queue_length);
    if (i->fence >= 0)
        printf("  fence   %lld (the last fencing token issued)\n", (long long)i->fence);
    if (s->n > 1) {
        printf("  servers %zu\n", s->n);
        for (size_t k = 0; k < s->n; k++)
            print_server(&s->servers[k]);
    }
}

static void json_int_or_null(const char *key, bool present, int64_t v)
{
    if (present)
        printf(",\"%s\":%lld", key, (long long)v);
    else
        printf(",\"%s\":null", key);
}

static void json_str_or_null(const char *key, const char *v)
{
    printf(",\"%s\":", key);
    if (v)
        cli_json_string(stdout, v);
    else
        printf("null");
}

/* The fields a server's view and the whole answer share. */
static void json_info(const redmutex_lock_info *i)
{
    const char *mode = i->kind == REDMUTEX_KIND_READ ? "read" : i->kind == REDMUTEX_KIND_WRITE ? "write" : NULL;
    json_str_or_null("kind", i->held ? kind_name(i->kind) : NULL);
    json_str_or_null("mode", i->held ? mode : NULL);
    json_str_or_null("owner", i->held && i->owner[0] ? i->owner : NULL);
    printf(",\"holds\":%lld", i->held && i->owner[0] ? (long long)i->hold_count : 0LL);
    json_int_or_null("ttl_ms", i->held, i->ttl_ms);
    printf(",\"readers\":%lld,\"queue\":%lld", (long long)i->readers, (long long)i->queue_length);
    json_int_or_null("fence", i->fence >= 0, i->fence);
}

static void json_server(const server_view *v)
{
    printf("{\"url\":");
    cli_json_string(stdout, v->url);
    printf(",\"reachable\":%s", v->reachable ? "true" : "false");
    if (!v->reachable) {
        json_str_or_null("error", v->error);
    } else {
        json_str_or_null("type", redis_type(&v->info));
        printf(",\"held\":%s", v->info.held ? "true" : "false");
        json_info(&v->info);
    }
    printf("}");
}

static void print_json(const status_report *s)
{
    printf("{\"name\":");
    cli_json_string(stdout, s->name);
    printf(",\"held\":%s", s->info.held ? "true" : "false");
    json_info(&s->info);
    printf(",\"servers\":[");
    for (size_t k = 0; k < s->n; k++) {
        printf(k ? "," : "");
        json_server(&s->servers[k]);
    }
    printf("]}\n");
}

/* With one server its view is the answer; with several, each is read on its own. */
static int gather(status_report *s, redmutex_client *client, const cli_servers *servers)
{
    int rc = inspect(&s->info, client, s->name);
    if (rc)
        return rc;
    s->n = servers->n;
    s->servers = calloc(s->n, sizeof *s->servers);
    if (!s->servers) {
        cli_error("out of memory");
        return CLI_EXIT_OSERR;
    }
    if (s->n == 1) {
        redmutex_url_redact(s->servers[0].url, sizeof s->servers[0].url, servers->urls[0]);
        s->servers[0].reachable = true;
        s->servers[0].info = s->info;
        return 0;
    }
    for (size_t k = 0; k < s->n; k++)
        read_server(&s->servers[k], servers->urls[k], s->name);
    return 0;
}

/* A status nobody could read is no status: a full disk or a closed pipe is an error. */
static int flush_output(void)
{
    if (fflush(stdout) == 0 && !ferror(stdout))
        return 0;
    cli_error("cannot write the status: %s", strerror(errno ? errno : EIO));
    return CLI_EXIT_IOERR;
}

/* ---- status --watch ------------------------------------------------------ */

static volatile sig_atomic_t watch_stop;

static void on_watch_signal(int sig)
{
    (void)sig;
    watch_stop = 1;
}

/* Sleeps ms unless a signal asks to stop first (nanosleep returns early on it). */
static void watch_sleep(int64_t ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
    while (!watch_stop && nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* One refresh: in place on a terminal, else a block (a JSON line with --json) after the last. */
static void watch_print(const status_report *s, bool json, bool tty, int64_t interval_ms)
{
    if (json) {
        print_json(s);
        return;
    }
    if (tty) {
        time_t now = time(NULL);
        char stamp[32];
        strftime(stamp, sizeof stamp, "%H:%M:%S", localtime(&now));
        printf("\033[H\033[2J"); /* home and clear: the screen shows this refresh only */
        printf("every %.1f s, Ctrl-C to stop    %s\n\n", (double)interval_ms / 1000, stamp);
    }
    print_text(s);
    if (!tty)
        printf("\n");
}

/*
 * status --watch: reads and prints the lock every interval until SIGINT or
 * SIGTERM (exit 0). A server that does not answer is reported in place of
 * the lock for that refresh (a JSON line with "error"), and the watch goes on.
 */
static int watch(status_report *s, redmutex_client *client, const cli_servers *servers, bool json, int64_t interval_ms)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_watch_signal; /* no SA_RESTART: the sleep ends at once */
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    bool tty = isatty(STDOUT_FILENO);
    while (!watch_stop) {
        int rc = gather(s, client, servers);
        if (rc == 0)
            watch_print(s, json, tty, interval_ms);
        else if (json) {
            printf("{\"name\":");
            cli_json_string(stdout, s->name);
            printf(",\"error\":");
            cli_json_string(stdout, redmutex_last_error());
            printf("}\n");
        }
        free(s->servers);
        s->servers = NULL;
        if ((rc = flush_output()) != 0)
            return rc;
        watch_sleep(interval_ms);
    }
    return 0;
}

int cli_status(int argc, char **argv)
{
    cli_servers servers = {0};
    status_report s;
    memset(&s, 0, sizeof s);
    bool json = false;
    watch_opts w = {false, 0};
    redmutex_client *client = NULL;
    int rc = parse_common(&servers, &s.name, &json, NULL, &w, argc, argv);
    if (rc == 0)
        rc = cli_client_new(&client, &servers, NULL);
    if (rc == 0 && w.on) {
        rc = watch(&s, client, &servers, json, w.interval_ms ? w.interval_ms : 1000);
        rc = rc ? rc : -1; /* a watch that was asked to stop exits 0 */
    } else if (rc == 0)
        rc = gather(&s, client, &servers);
    if (rc == 0) {
        if (json)
            print_json(&s);
        else
            print_text(&s);
        rc = flush_output();
        if (rc == 0)
            rc = s.info.held ? CLI_EXIT_OK : CLI_EXIT_FREE;
    }
    free(s.servers);
    redmutex_client_free(client);
    cli_servers_clear(&servers);
    return rc < 0 ? 0 : rc;
}

/* ---- release --force ---------------------------------------------------- */

/*
 * Deletes the lock with a handle of the kind it is, so that its own force
 * script runs: a fair lock passes to the head of its queue, a read-write
 * lock wakes its waiters on its own channel. The kind may change between
 * the reading and the deleting (released and taken again as another kind):
 * then it is read again.
 */
static int force_release(int *deleted, redmutex_client *client, const char *name)
{
    int rc = REDMUTEX_EWRONGTYPE;
    for (int attempt = 0; attempt < 3 && rc == REDMUTEX_EWRONGTYPE; attempt++) {
        redmutex_lock_info info;
        int status = inspect(&info, client, name);
        if (status)
            return status;
        *deleted = 0;
        if (info.kind < 0)
            return 0;
        redmutex_lock *lock;
        if ((rc = redmutex_lock_new(&lock, client, name, (redmutex_kind)info.kind, NULL)))
            return cli_library_error("bad lock name", rc);
        rc = redmutex_lock_force_release(deleted, lock);
        redmutex_lock_free(lock);
    }
    return rc ? cli_library_error("cannot release the lock", rc) : 0;
}

int cli_release(int argc, char **argv)
{
    cli_servers servers = {0};
    const char *name = NULL;
    bool force = false;
    redmutex_client *client = NULL;
    int deleted = 0;
    int rc = parse_common(&servers, &name, NULL, &force, NULL, argc, argv);
    if (rc == 0 && !force)
        rc = cli_usage_error("release deletes the lock whoever holds it: say so with --force");
    if (rc == 0)
        rc = cli_client_new(&client, &servers, NULL);
    if (rc == 0)
        rc = force_release(&deleted, client, name);
    if (rc == 0 && !deleted) {
        cli_error("lock '%s' was not held; nothing released", name);
        rc = CLI_EXIT_FREE;
    }
    redmutex_client_free(client);
    cli_servers_clear(&servers);
    return rc < 0 ? 0 : rc;
}
