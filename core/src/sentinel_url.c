/*
 * Sentinel URLs (DESIGN §6):
 *   redis+sentinel://[user[:password]@]s1[:port],s2[:port],.../SERVICE[/db][?option=value&...]
 *   rediss+sentinel://...   (TLS, to the sentinels and to the data nodes alike)
 * The hosts are sentinels (port 26379 by default), SERVICE the name they
 * monitor the master by; user, password and db are the data nodes' (AUTH
 * and SELECT on the master), ?sentinel_username= and ?sentinel_password=
 * the sentinels' own, and rediss+sentinel:// takes the ssl_* options of
 * rediss://.
 *
 * The URL is taken apart here and the rest (credentials, hosts, db, TLS
 * options) is read by url.c's parser as the equivalent redis[s]:// URL of
 * the sentinels, so both kinds of URL follow the same rules. Messages show
 * the URL with every password masked, the sentinels' too.
 *
 * Layering: the wire's (with url.c).
 */
#define _GNU_SOURCE
#include "internal.h"
#include "url.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SENTINEL_PORT "26379"
#define SERVICE_MAX 200
#define URL_MAX 4096

bool rm_url_is_sentinel(const char *url)
{
    return strncmp(url, "redis+sentinel://", 17) == 0 || strncmp(url, "rediss+sentinel://", 18) == 0;
}

/* The pieces of a sentinel URL, as found. */
typedef struct sentinel_url {
    bool tls;
    char shown[320];          /* the URL with its passwords masked, for messages */
    char rest[URL_MAX + 256]; /* the equivalent redis[s]:// URL of the sentinels, for url.c */
    char *service, *user, *password;
} sentinel_url;

static void url_clear(sentinel_url *u)
{
    free(u->service);
    free(u->user);
    if (u->password) {
        volatile char *p = u->password;
        while (*p)
            *p++ = 0;
        free(u->password);
    }
    volatile char *r = u->rest;
    for (size_t i = 0; i < sizeof u->rest; i++)
        r[i] = 0;
}

static int refuse(rm_err *err, sentinel_url *u, const char *why)
{
    int rc = rm_fail(err, REDMUTEX_EINVAL, "malformed server URL '%s': %s", u->shown, why);
    url_clear(u);
    return rc;
}

static int hexval(int ch)
{
    if (isdigit(ch))
        return ch - '0';
    ch = tolower(ch);
    return ch >= 'a' && ch <= 'f' ? ch - 'a' + 10 : -1;
}

/* s[0..n) percent-decoded into a new string; NULL on a bad escape, a NUL byte, or no memory. */
static char *decode(const char *s, size_t n)
{
    char *out = malloc(n + 1);
    size_t j = 0;
    for (size_t i = 0; out && i < n; i++) {
        if (s[i] != '%') {
            out[j++] = s[i];
            continue;
        }
        int hi = i + 2 < n ? hexval((unsigned char)s[i + 1]) : -1;
        int lo = i + 2 < n ? hexval((unsigned char)s[i + 2]) : -1;
        if (hi < 0 || lo < 0 || (hi == 0 && lo == 0)) {
            free(out);
            return NULL;
        }
        out[j++] = (char)(hi * 16 + lo);
        i += 2;
    }
    if (out)
        out[j] = '\0';
    return out;
}

/* Appends to u->rest; false when it does not fit. */
static bool add(sentinel_url *u, const char *s, size_t n)
{
    size_t len = strlen(u->rest);
    if (len + n + 1 > sizeof u->rest)
        return false;
    memcpy(u->rest + len, s, n);
    u->rest[len + n] = '\0';
    return true;
}

/* The authority (user part and sentinels), each sentinel with its port (26379 when none is given). */
static bool add_authority(sentinel_url *u, const char *p, const char *end)
{
    const char *at = NULL;
    for (const char *s = p; s < end; s++)
        if (*s == '@')
            at = s;
    if (at && !add(u, p, (size_t)(at + 1 - p)))
        return false;
    for (const char *h = at ? at + 1 : p; h <= end;) {
        const char *comma = memchr(h, ',', (size_t)(end - h));
        const char *host_end = comma ? comma : end;
        const char *close = *h == '[' ? memchr(h, ']', (size_t)(host_end - h)) : NULL;
        bool has_port = close ? close + 1 < host_end : memchr(h, ':', (size_t)(host_end - h)) != NULL;
        if (!add(u, h, (size_t)(host_end - h)) || (!has_port && host_end > h && !add(u, ":" SENTINEL_PORT, 6)))
            return false;
        if (!comma)
            break;
        if (!add(u, ",", 1))
            return false;
        h = comma + 1;
    }
    return true;
}

/* /SERVICE[/db]: the service is kept, the db goes to the rest. */
static int take_path(rm_err *err, sentinel_url *u, const char *p, const char *end)
{
    if (p >= end || *p != '/' || p + 1 == end || p[1] == '/')
        return refuse(err, u, "the path must name the service: redis+sentinel://host:port,.../SERVICE[/db]");
    const char *slash = memchr(p + 1, '/', (size_t)(end - p - 1));
    const char *svc_end = slash ? slash : end;
    if (svc_end - p - 1 > SERVICE_MAX)
        return refuse(err, u, "the service name is longer than 200 bytes");
    u->service = decode(p + 1, (size_t)(svc_end - p - 1));
    if (!u->service || !u->service[0])
        return refuse(err, u, "bad percent-escape (or a NUL byte) in the service name");
    if (!slash)
        return 0;
    if (slash + 1 == end || strspn(slash + 1, "0123456789") != (size_t)(end - slash - 1) || end - slash - 1 > 7)
        return refuse(err, u, "after the service name, the path may only hold a database number (/SERVICE/db)");
    return add(u, slash, (size_t)(end - slash)) ? 0 : refuse(err, u, "too long");
}

/* One name=value of the query: the sentinels' credentials are kept, ssl_* options go to the rest. */
static int take_option(rm_err *err, sentinel_url *u, const char *item, const char *item_end, bool *first)
{
    const char *eq = memchr(item, '=', (size_t)(item_end - item));
    if (!eq || eq == item)
        return refuse(err, u, "query options must be name=value");
    size_t n = (size_t)(eq - item);
    char **slot = n == 17 && memcmp(item, "sentinel_username", 17) == 0   ? &u->user
                  : n == 17 && memcmp(item, "sentinel_password", 17) == 0 ? &u->password
                                                                          : NULL;
    if (slot) {
        if (*slot)
            return refuse(err, u, "a sentinel_ option is given twice");
        *slot = decode(eq + 1, (size_t)(item_end - eq - 1));
        if (!*slot || !**slot)
            return refuse(err, u, "a sentinel_ option is empty or has a bad percent-escape");
        return 0;
    }
    if (n == 8 && memcmp(item, "topology", 8) == 0)
        return refuse(err, u, "topology does not apply to redis+sentinel:// (the sentinels name one master)");
    /* redis-py's db, username and password are the master's, as in a redis:// URL. */
    bool data = (n == 2 && memcmp(item, "db", 2) == 0) || (n == 8 && memcmp(item, "username", 8) == 0) ||
                (n == 8 && memcmp(item, "password", 8) == 0);
    if (!data && (n < 4 || memcmp(item, "ssl_", 4) != 0))
        return refuse(err, u,
                      "unknown query option (redis+sentinel:// takes sentinel_username, sentinel_password, db, "
                      "username, password; rediss+sentinel:// the ssl_ options too)");
    if (!data && !u->tls)
        return refuse(err, u, "ssl_ options need a rediss+sentinel:// URL");
    if (!add(u, *first ? "?" : "&", 1) || !add(u, item, (size_t)(item_end - item)))
        return refuse(err, u, "too long");
    *first = false;
    return 0;
}

/* Splits url into u: the service, the sentinels' credentials, and the rest for url.c. */
static int take_apart(rm_err *err, sentinel_url *u, const char *url)
{
    const char *p = url + (u->tls ? 18 : 17), *end = url + strlen(url);
    if (memchr(p, '#', (size_t)(end - p)))
        return refuse(err, u, "fragments are not supported");
    const char *query = memchr(p, '?', (size_t)(end - p));
    const char *path_end = query ? query : end;
    const char *slash = memchr(p, '/', (size_t)(path_end - p));
    const char *authority_end = slash ? slash : path_end;
    if (!add(u, u->tls ? "rediss://" : "redis://", u->tls ? 9 : 8) || !add_authority(u, p, authority_end))
        return refuse(err, u, "too long");
    int rc = take_path(err, u, authority_end, path_end);
    bool first = true;
    for (const char *item = query ? query + 1 : end; rc == 0 && item < end;) {
        const char *amp = memchr(item, '&', (size_t)(end - item));
        rc = take_option(err, u, item, amp ? amp : end, &first);
        item = amp ? amp + 1 : end;
    }
    if (rc == 0 && u->user && !u->password)
        rc = refuse(err, u, "sentinel_username needs sentinel_password");
    return rc;
}

/* Appends s to b (from *n on), percent-encoding all but unreserved characters, so the text parses back. */
static void put_encoded(char *b, size_t size, size_t *n, const char *s)
{
    static const char hex[] = "0123456789ABCDEF";
    for (; *s && *n + 4 < size; s++) {
        unsigned char ch = (unsigned char)*s;
        if (isalnum(ch) || ch == '-' || ch == '.' || ch == '_' || ch == '~') {
            b[(*n)++] = (char)ch;
        } else {
            b[(*n)++] = '%';
            b[(*n)++] = hex[ch >> 4];
            b[(*n)++] = hex[ch & 15];
        }
    }
    b[*n] = '\0';
}

/* The URL in canonical form, credentials and all, for rm_url_redact to mask: the display for messages. */
static int make_display(rm_endpoint *ep)
{
    char buf[3 * URL_MAX + 512];
    size_t n = (size_t)snprintf(buf, sizeof buf, "%s+sentinel://", ep->tls ? "rediss" : "redis");
    if (ep->user)
        put_encoded(buf, sizeof buf, &n, ep->user);
    if (ep->password) {
        n += (size_t)snprintf(buf + n, sizeof buf - n, ":");
        put_encoded(buf, sizeof buf, &n, ep->password);
    }
    if (ep->user || ep->password)
        n += (size_t)snprintf(buf + n, sizeof buf - n, "@");
    for (int k = 0; k < ep->n_seeds && n < sizeof buf; k++) {
        bool v6 = strchr(ep->seed_host[k], ':') != NULL;
        n += (size_t)snprintf(buf + n, sizeof buf - n, "%s%s%s%s:%d", k ? "," : "", v6 ? "[" : "", ep->seed_host[k],
                              v6 ? "]" : "", ep->seed_port[k]);
    }
    if (n < sizeof buf) {
        n += (size_t)snprintf(buf + n, sizeof buf - n, "/");
        put_encoded(buf, sizeof buf, &n, ep->service);
        n += (size_t)snprintf(buf + n, sizeof buf - n, "/%d", ep->db);
    }
    if (n < sizeof buf && ep->sentinel_user) {
        n += (size_t)snprintf(buf + n, sizeof buf - n, "?sentinel_username=");
        put_encoded(buf, sizeof buf, &n, ep->sentinel_user);
    }
    if (n < sizeof buf && ep->sentinel_password) {
        n += (size_t)snprintf(buf + n, sizeof buf - n, "%ssentinel_password=", ep->sentinel_user ? "&" : "?");
        put_encoded(buf, sizeof buf, &n, ep->sentinel_password);
    }
    free(ep->display);
    size_t len = rm_url_redact(NULL, 0, buf);
    ep->display = malloc(len + 1);
    if (ep->display)
        rm_url_redact(ep->display, len + 1, buf);
    volatile char *p = buf; /* it held the passwords: leave no copy on the stack */
    for (size_t i = 0; i < sizeof buf; i++)
        p[i] = 0;
    return ep->display ? 0 : REDMUTEX_ENOMEM;
}

int rm_sentinel_url_parse(rm_err *err, rm_endpoint *ep, const char *url)
{
    memset(ep, 0, sizeof *ep);
    sentinel_url u;
    memset(&u, 0, sizeof u);
    u.tls = strncmp(url, "rediss+", 7) == 0;
    rm_url_redact(u.shown, sizeof u.shown, url);
    int rc = take_apart(err, &u, url);
    if (rc != 0)
        return rc;
    rm_err inner;
    rm_err_reset(&inner);
    rc = rm_endpoint_parse(&inner, ep, u.rest);
    if (rc != 0) {
        /* url.c's reason, about the URL as the user wrote it. */
        const char *why = strstr(inner.msg, "': ");
        return refuse(err, &u, why ? why + 3 : inner.msg);
    }
    ep->topology = RM_TOPOLOGY_SENTINEL;
    ep->service = u.service;
    ep->sentinel_user = u.user;
    ep->sentinel_password = u.password;
    u.service = u.user = u.password = NULL;
    url_clear(&u);
    if (make_display(ep) != 0) {
        rm_endpoint_clear(ep);
        return rm_fail(err, REDMUTEX_ENOMEM, "out of memory");
    }
    return 0;
}
