/*
 * What one server stores for a lock, read with plain Redis commands: the
 * owner (a plain lock's token, a reentrant lock's hash field) and the fencing
 * counter are not available through the public API, and `status` shows them.
 * The reading is one MULTI/EXEC, so its parts are consistent with each other.
 *
 * Only the URL forms redmutex_client_new() accepts are parsed here, and only
 * after it accepted them.
 */
#include "cli.h"

#include <ctype.h>
#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct endpoint {
    bool is_unix;
    char host[256];
    int port;
    char path[1024];
    char user[256];
    char password[256];
    bool has_password;
    long db;
} endpoint;

static int hexval(int ch)
{
    return ch >= '0' && ch <= '9'   ? ch - '0'
           : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10
           : ch >= 'A' && ch <= 'F' ? ch - 'A' + 10
                                    : -1;
}

/* Percent-decodes s[0..n) into out (size bytes). Returns -1 if it does not fit or is malformed. */
static int decode(char *out, size_t size, const char *s, size_t n)
{
    size_t j = 0;
    for (size_t i = 0; i < n; i++) {
        int ch = (unsigned char)s[i];
        if (ch == '%') {
            int hi = i + 2 < n ? hexval((unsigned char)s[i + 1]) : -1;
            int lo = i + 2 < n ? hexval((unsigned char)s[i + 2]) : -1;
            if (hi < 0 || lo < 0)
                return -1;
            ch = hi * 16 + lo;
            i += 2;
        }
        if (j + 1 >= size)
            return -1;
        out[j++] = (char)ch;
    }
    out[j] = '\0';
    return 0;
}

static int parse_unix(endpoint *ep, const char *p)
{
    const char *q = strchr(p, '?');
    ep->is_unix = true;
    if (decode(ep->path, sizeof ep->path, p, q ? (size_t)(q - p) : strlen(p)))
        return -1;
    if (q && sscanf(q, "?db=%ld", &ep->db) != 1)
        return -1;
    return 0;
}

static int parse_userinfo(endpoint *ep, const char *p, const char *at)
{
    const char *colon = memchr(p, ':', (size_t)(at - p));
    const char *user_end = colon ? colon : at;
    if (decode(ep->user, sizeof ep->user, p, (size_t)(user_end - p)))
        return -1;
    if (colon) {
        if (decode(ep->password, sizeof ep->password, colon + 1, (size_t)(at - colon - 1)))
            return -1;
        ep->has_password = ep->password[0] != '\0';
    }
    return 0;
}

static int parse_tcp(endpoint *ep, const char *p)
{
    const char *slash = strchr(p, '/');
    const char *end = slash ? slash : p + strlen(p);
    const char *at = NULL;
    for (const char *s = p; s < end; s++)
        if (*s == '@')
            at = s;
    if (at && parse_userinfo(ep, p, at))
        return -1;
    p = at ? at + 1 : p;
    const char *host_end, *port = NULL;
    if (*p == '[') {
        host_end = memchr(p, ']', (size_t)(end - p));
        if (!host_end)
            return -1;
        p++;
        port = host_end[1] == ':' ? host_end + 2 : NULL;
    } else {
        host_end = memchr(p, ':', (size_t)(end - p));
        port = host_end ? host_end + 1 : NULL;
        host_end = host_end ? host_end : end;
    }
    if ((size_t)(host_end - p) >= sizeof ep->host)
        return -1;
    memcpy(ep->host, p, (size_t)(host_end - p));
    ep->port = port ? atoi(port) : 6379;
    ep->db = slash && slash[1] ? atol(slash + 1) : 0;
    return 0;
}

/* The URL as shown: the password masked, as the library shows it. */
static void display(const endpoint *ep, char *out, size_t size)
{
    if (ep->is_unix) {
        snprintf(out, size, ep->db ? "unix://%s?db=%ld" : "unix://%s", ep->path, ep->db);
        return;
    }
    bool v6 = strchr(ep->host, ':') != NULL;
    bool auth = ep->user[0] || ep->has_password;
    snprintf(out, size, "redis://%s%s%s%s%s%s:%d/%ld", ep->user, ep->has_password ? ":***" : "",
             auth ? "@" : "", v6 ? "[" : "", ep->host, v6 ? "]" : "", ep->port, ep->db);
}

static void fail(cli_server_view *out, const char *what, const char *detail)
{
    out->reachable = false;
    snprintf(out->error, sizeof out->error, "%s%.150s", what, detail);
}

static void append(redisContext *ctx, int argc, const char **argv)
{
    redisAppendCommandArgv(ctx, argc, argv, NULL);
}

/* AUTH/SELECT, then one transaction reading the lock key and the fence counter. */
static void send_reads(redisContext *ctx, const endpoint *ep, const char *name, const char *fence_key)
{
    char db[24];
    snprintf(db, sizeof db, "%ld", ep->db);
    if (ep->has_password && ep->user[0])
        append(ctx, 3, (const char *[]){"AUTH", ep->user, ep->password});
    else if (ep->has_password)
        append(ctx, 2, (const char *[]){"AUTH", ep->password});
    if (ep->db)
        append(ctx, 2, (const char *[]){"SELECT", db});
    append(ctx, 1, (const char *[]){"MULTI"});
    append(ctx, 2, (const char *[]){"TYPE", name});
    append(ctx, 2, (const char *[]){"GET", name});
    append(ctx, 2, (const char *[]){"HGETALL", name});
    append(ctx, 2, (const char *[]){"PTTL", name});
    append(ctx, 2, (const char *[]){"GET", fence_key});
    append(ctx, 1, (const char *[]){"EXEC"});
}

/* A plain lock's token is a secret that lets anyone release it: show only its start. */
static void token_prefix(char *out, size_t size, const redisReply *r)
{
    size_t n = r->len / 2 < 8 ? r->len / 2 : 8;
    snprintf(out, size, "%.*s", (int)n, r->str);
}

static void read_exec(cli_server_view *out, const redisReply *exec)
{
    if (!exec || exec->type != REDIS_REPLY_ARRAY || exec->elements != 5) {
        fail(out, "", exec && exec->type == REDIS_REPLY_ERROR ? exec->str : "unexpected reply to EXEC");
        return;
    }
    redisReply **e = exec->element;
    out->reachable = true;
    if (e[0]->type == REDIS_REPLY_STATUS)
        snprintf(out->type, sizeof out->type, "%s", e[0]->str);
    if (e[1]->type == REDIS_REPLY_STRING) {
        token_prefix(out->owner, sizeof out->owner, e[1]);
        out->holds = 1;
    } else if (e[2]->type == REDIS_REPLY_ARRAY && e[2]->elements >= 2) {
        snprintf(out->owner, sizeof out->owner, "%s", e[2]->element[0]->str);
        out->holds = atoll(e[2]->element[1]->str);
    }
    out->ttl_ms = e[3]->type == REDIS_REPLY_INTEGER ? e[3]->integer : -2;
    if (e[4]->type == REDIS_REPLY_STRING) {
        char *end;
        out->fence = strtoll(e[4]->str, &end, 10);
        out->has_fence = *end == '\0' && end != e[4]->str;
    }
}

static void read_replies(cli_server_view *out, redisContext *ctx, const endpoint *ep)
{
    int n = 7 + (ep->has_password ? 1 : 0) + (ep->db ? 1 : 0);
    for (int i = 0; i < n; i++) {
        redisReply *r = NULL;
        if (redisGetReply(ctx, (void **)&r) != REDIS_OK) {
            fail(out, "", ctx->errstr[0] ? ctx->errstr : "connection lost");
            return;
        }
        bool last = i == n - 1;
        if (!last && r->type == REDIS_REPLY_ERROR && !out->error[0])
            fail(out, i == 0 && ep->has_password ? "authentication refused: " : "", r->str);
        if (last && !out->error[0])
            read_exec(out, r);
        freeReplyObject(r);
    }
}

void cli_inspect_server(cli_server_view *out, const char *url, const char *name, int64_t timeout_ms)
{
    memset(out, 0, sizeof *out);
    out->ttl_ms = -2;
    snprintf(out->type, sizeof out->type, "none");
    endpoint ep;
    memset(&ep, 0, sizeof ep);
    int bad = strncmp(url, "unix://", 7) == 0    ? parse_unix(&ep, url + 7)
              : strncmp(url, "redis://", 8) == 0 ? parse_tcp(&ep, url + 8)
                                                 : -1;
    if (bad) {
        const char *at = strrchr(url, '@');
        snprintf(out->url, sizeof out->url, "%.*s%s%.100s", (int)strcspn(url, ":"), url, at ? "://***" : "",
                 at ? at : url + strcspn(url, ":"));
        fail(out, "owner and fence not read: ", "only redis:// and unix:// servers are read directly");
        return;
    }
    display(&ep, out->url, sizeof out->url);
    struct timeval tv = {(time_t)(timeout_ms / 1000), (suseconds_t)(timeout_ms % 1000) * 1000};
    redisContext *ctx =
        ep.is_unix ? redisConnectUnixWithTimeout(ep.path, tv) : redisConnectWithTimeout(ep.host, ep.port, tv);
    if (!ctx || ctx->err) {
        fail(out, "cannot connect: ", ctx ? ctx->errstr : "out of memory");
    } else {
        char fence_key[REDMUTEX_NAME_MAX + 64];
        snprintf(fence_key, sizeof fence_key,
                 strchr(name, '{') ? "redisson_lock_token:%s" : "redisson_lock_token:{%s}", name);
        redisSetTimeout(ctx, tv);
        send_reads(ctx, &ep, name, fence_key);
        read_replies(out, ctx, &ep);
    }
    redisFree(ctx);
    memset(ep.password, 0, sizeof ep.password);
}
