/*
 * redmutex status: who holds a lock, for how long, and its fence counter.
 * redmutex release --force: delete a lock whoever holds it.
 *
 * Whether the lock is held and its TTL come from the public queries, so with
 * several servers they are the Redlock answers (what a majority says). The
 * owner and the fence counter are read from each server (inspect.c).
 */
#include "cli.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define INSPECT_TIMEOUT_MS 1000

typedef struct status_report {
    const char *name;
    int held;
    redmutex_kind kind;
    int64_t ttl_ms;
    const char *owner; /* agreed by a majority of the servers, or NULL */
    int64_t holds;
    bool has_fence;
    int64_t fence; /* the highest counter on any server */
    size_t n;
    cli_server_view servers[REDMUTEX_SERVERS_MAX];
} status_report;

/* Parses [-u URL]... [--json] [--force] NAME. */
static int parse_common(cli_servers *servers, const char **name, bool *json, bool *force, int argc,
                        char **argv)
{
    static const struct option opts[] = {{"url", required_argument, NULL, 'u'},
                                         {"json", no_argument, NULL, 'j'},
                                         {"force", no_argument, NULL, 'f'},
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
        } else if (c == 'j' || c == 'f') { /* --json of release, --force of status */
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
    return cli_servers_finish(servers);
}

/* ---- status ------------------------------------------------------------- */

static void agree(status_report *s, size_t quorum)
{
    for (size_t i = 0; i < s->n; i++) {
        const cli_server_view *v = &s->servers[i];
        if (v->has_fence && (!s->has_fence || v->fence > s->fence)) {
            s->has_fence = true;
            s->fence = v->fence;
        }
        size_t same = 0;
        for (size_t k = 0; k < s->n && v->owner[0]; k++)
            same += s->servers[k].reachable && strcmp(s->servers[k].owner, v->owner) == 0;
        if (v->reachable && v->owner[0] && same >= quorum && !s->owner) {
            s->owner = v->owner;
            s->holds = v->holds;
        }
    }
}

static const char *kind_name(const status_report *s)
{
    return s->kind == REDMUTEX_KIND_RLOCK ? "rlock" : "lock";
}

static void print_ttl(int64_t ttl)
{
    if (ttl == -1)
        printf("none (the lock never expires)");
    else
        printf("%.3f s", (double)ttl / 1000);
}

static void print_server(const cli_server_view *v)
{
    printf("    %s  ", v->url);
    if (!v->reachable) {
        printf("unreachable: %s\n", v->error);
        return;
    }
    bool held = strcmp(v->type, "none") != 0;
    printf("%s", held ? "held" : "free");
    if (v->owner[0])
        printf("  owner %s", v->owner);
    if (held) {
        printf("  ttl ");
        print_ttl(v->ttl_ms);
    }
    if (v->has_fence)
        printf("  fence %lld", (long long)v->fence);
    printf("\n");
}

static void print_text(const status_report *s)
{
    printf("%s: %s\n", s->name, s->held ? "held" : "free");
    if (s->held) {
        printf("  kind    %s\n", s->kind == REDMUTEX_KIND_RLOCK ? "rlock (reentrant, Redisson RLock format)"
                                                                : "lock (plain, redis-py Lock format)");
        if (s->owner && s->kind == REDMUTEX_KIND_RLOCK)
            printf("  owner   %s (hold count %lld)\n", s->owner, (long long)s->holds);
        else if (s->owner)
            printf("  owner   %s... (start of the token)\n", s->owner);
        printf("  ttl     ");
        print_ttl(s->ttl_ms);
        printf("\n");
    }
    if (s->has_fence)
        printf("  fence   %lld (the last fencing token issued)\n", (long long)s->fence);
    if (s->n > 1) {
        printf("  servers %zu\n", s->n);
        for (size_t i = 0; i < s->n; i++)
            print_server(&s->servers[i]);
    }
}

static void json_int_or_null(const char *key, bool present, int64_t v)
{
    if (present)
        printf(",\"%s\":%lld", key, (long long)v);
    else
        printf(",\"%s\":null", key);
}

static void json_owner(bool present, const char *owner)
{
    printf(",\"owner\":");
    if (present)
        cli_json_string(stdout, owner);
    else
        printf("null");
}

static void json_server(const cli_server_view *v)
{
    printf("{\"url\":");
    cli_json_string(stdout, v->url);
    printf(",\"reachable\":%s", v->reachable ? "true" : "false");
    if (!v->reachable) {
        printf(",\"error\":");
        cli_json_string(stdout, v->error);
    } else {
        printf(",\"type\":");
        cli_json_string(stdout, v->type);
        json_owner(v->owner[0] != '\0', v->owner);
        printf(",\"holds\":%lld", (long long)v->holds);
        json_int_or_null("ttl_ms", v->ttl_ms != -2, v->ttl_ms);
    }
    json_int_or_null("fence", v->has_fence, v->fence);
    printf("}");
}

static void print_json(const status_report *s)
{
    printf("{\"name\":");
    cli_json_string(stdout, s->name);
    printf(",\"held\":%s,\"kind\":", s->held ? "true" : "false");
    if (s->held)
        printf("\"%s\"", kind_name(s));
    else
        printf("null");
    json_owner(s->held && s->owner, s->owner);
    printf(",\"holds\":%lld", s->held && s->owner ? (long long)s->holds : 0LL);
    json_int_or_null("ttl_ms", s->held, s->ttl_ms);
    json_int_or_null("fence", s->has_fence, s->fence);
    printf(",\"servers\":[");
    for (size_t i = 0; i < s->n; i++) {
        printf(i ? "," : "");
        json_server(&s->servers[i]);
    }
    printf("]}\n");
}

static int gather(status_report *s, redmutex_client *client, const cli_servers *servers)
{
    redmutex_lock *lock = NULL;
    int rc = cli_open_existing(&lock, &s->held, client, s->name);
    if (rc)
        return rc;
    s->kind = redmutex_lock_kind(lock);
    if (s->held && (rc = redmutex_lock_ttl(&s->ttl_ms, lock)))
        rc = cli_library_error("cannot read the lock's TTL", rc);
    redmutex_lock_free(lock);
    if (rc)
        return rc;
    s->n = servers->n;
    for (size_t i = 0; i < s->n; i++)
        cli_inspect_server(&s->servers[i], servers->urls[i], s->name, INSPECT_TIMEOUT_MS);
    agree(s, s->n / 2 + 1);
    return 0;
}

int cli_status(int argc, char **argv)
{
    cli_servers servers = {0};
    static status_report s; /* large: REDMUTEX_SERVERS_MAX views */
    memset(&s, 0, sizeof s);
    bool json = false;
    redmutex_client *client = NULL;
    int rc = parse_common(&servers, &s.name, &json, NULL, argc, argv);
    if (rc == 0)
        rc = cli_client_new(&client, &servers, NULL);
    if (rc == 0)
        rc = gather(&s, client, &servers);
    if (rc == 0) {
        if (json)
            print_json(&s);
        else
            print_text(&s);
        rc = s.held ? CLI_EXIT_OK : CLI_EXIT_FREE;
    }
    redmutex_client_free(client);
    cli_servers_clear(&servers);
    return rc < 0 ? 0 : rc;
}

/* ---- release --force ---------------------------------------------------- */

/* Deletes the lock as a plain lock, or as a reentrant one when the key is a hash. */
static int force_release(int *deleted, redmutex_client *client, const char *name)
{
    static const redmutex_kind kinds[] = {REDMUTEX_KIND_LOCK, REDMUTEX_KIND_RLOCK};
    int rc = 0;
    for (size_t i = 0; i < 2; i++) {
        redmutex_lock *lock;
        if ((rc = redmutex_lock_new(&lock, client, name, kinds[i], NULL)))
            return cli_library_error("bad lock name", rc);
        rc = redmutex_lock_force_release(deleted, lock);
        redmutex_lock_free(lock);
        if (rc != REDMUTEX_EWRONGTYPE)
            break;
    }
    if (rc == REDMUTEX_EWRONGTYPE) {
        cli_error(
            "'%s' is not a lock: the key holds neither a token (string) nor a Redisson hash; not deleted",
            name);
        return CLI_EXIT_DATAERR;
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
    int rc = parse_common(&servers, &name, NULL, &force, argc, argv);
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
