/*
 * Server URLs:
 *   redis://[user[:password]@]host[:port][/db][?option=value&...]
 *   rediss://[user[:password]@]host[:port][/db][?option=value&...]   (TLS)
 *   unix:///path/to/socket[?option=value&...]
 * with redis-py's query options: db, username and password on every scheme, ssl_* on rediss://.
 * Several hosts (redis://h1:p1,h2:p2/db) are seeds of one deployment, tried
 * in order; ?topology=auto|standalone|cluster says what that deployment is
 * (default auto: a node that reports cluster_enabled:1 makes it a cluster).
 *
 * A URL is shown in a message only through rm_url_redact(), which masks
 * every secret it may hold (the password of the user part, the value of
 * every query option that is not known to be harmless), whether or not
 * the URL parses.
 */
#define _GNU_SOURCE
#include "internal.h"
#include "url.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define URL_MAX 4096

static int hexval(int ch)
{
    if (ch >= '0' && ch <= '9')
        return ch - '0';
    ch = tolower(ch);
    if (ch >= 'a' && ch <= 'f')
        return ch - 'a' + 10;
    return -1;
}

/* Percent-decodes s[0..n) into a new string; NULL on a bad escape or a NUL byte. */
static char *percent_decode(const char *s, size_t n)
{
    char *out = malloc(n + 1);
    if (!out)
        return NULL;
    size_t j = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '%') {
            int hi = i + 1 < n ? hexval((unsigned char)s[i + 1]) : -1;
            int lo = i + 2 < n ? hexval((unsigned char)s[i + 2]) : -1;
            if (hi < 0 || lo < 0 || (hi == 0 && lo == 0)) {
                free(out);
                return NULL;
            }
            out[j++] = (char)(hi * 16 + lo);
            i += 2;
        } else {
            out[j++] = s[i];
        }
    }
    out[j] = '\0';
    return out;
}

static int parse_uint(const char *s, size_t n, long max, long *out)
{
    if (n == 0 || n > 10)
        return -1;
    long v = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isdigit((unsigned char)s[i]))
            return -1;
        v = v * 10 + (s[i] - '0');
    }
    if (v > max)
        return -1;
    *out = v;
    return 0;
}

/* Frees a string that held a secret, overwritten first. */
static void wipe_free(char *s)
{
    if (!s)
        return;
    volatile char *p = s;
    while (*p)
        *p++ = 0;
    free(s);
}

void rm_endpoint_clear(rm_endpoint *ep)
{
    free(ep->host);
    for (int k = 0; k < ep->n_seeds; k++)
        free(ep->seed_host[k]);
    free(ep->path);
    free(ep->user);
    wipe_free(ep->password); /* do not leave it lying around in freed memory */
    free(ep->display);
    free(ep->tls_ca_file);
    free(ep->tls_cert_file);
    free(ep->tls_key_file);
    free(ep->tls_server_name);
    free(ep->service);
    free(ep->sentinel_user);
    wipe_free(ep->sentinel_password);
    memset(ep, 0, sizeof *ep);
}

static int bad(rm_err *err, rm_endpoint *ep, const char *shown, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Refuses the URL: "malformed server URL '<shown>': <why>" (shown is redacted). */
static int bad(rm_err *err, rm_endpoint *ep, const char *shown, const char *fmt, ...)
{
    char why[320];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    rm_endpoint_clear(ep);
    return rm_fail(err, REDMUTEX_EINVAL, "malformed server URL '%s': %s", shown, why);
}

/* A text being built in a fixed buffer (it never needs more than 3 x URL_MAX). */
typedef struct text {
    char *buf;
    size_t size, len;
} text;

/* Appends what fits, always NUL-terminated; len counts what was asked for. */
static void put(text *t, const char *s, size_t n)
{
    if (t->size == 0)
        return;
    size_t room = t->len < t->size - 1 ? t->size - 1 - t->len : 0;
    size_t k = n < room ? n : room;
    memcpy(t->buf + (t->size - 1 - room), s, k);
    t->buf[t->size - 1 - room + k] = '\0';
    t->len += n;
}

static void put_str(text *t, const char *s) { put(t, s, strlen(s)); }

/* Appends s percent-encoding all but unreserved characters (RFC 3986), so the text parses back. */
static void put_encoded(text *t, const char *s)
{
    static const char hex[] = "0123456789ABCDEF";
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        char esc[3] = {'%', hex[ch >> 4], hex[ch & 15]};
        if (isalnum(ch) || ch == '-' || ch == '.' || ch == '_' || ch == '~')
            put(t, s, 1);
        else
            put(t, esc, 3);
    }
}

/* unix:///path?db=N&username=U&password=P, each only when given. */
static void canonical_unix(text *t, const rm_endpoint *ep)
{
    char num[24];
    const char *sep = "?";
    put_str(t, "unix://");
    put_str(t, ep->path);
    if (ep->db) {
        put_str(t, "?db=");
        put_str(t, rm_i64_str(num, ep->db));
        sep = "&";
    }
    if (ep->user) {
        put_str(t, sep);
        put_str(t, "username=");
        put_encoded(t, ep->user);
        sep = "&";
    }
    if (ep->password) {
        put_str(t, sep);
        put_str(t, "password=");
        put_encoded(t, ep->password);
    }
}

/* The URL in one canonical form, credentials and all, for rm_url_redact() to mask. */
static void canonical_url(text *t, const rm_endpoint *ep)
{
    char num[24];
    if (ep->is_unix) {
        canonical_unix(t, ep);
        return;
    }
    put_str(t, ep->tls ? "rediss://" : "redis://");
    if (ep->user)
        put_encoded(t, ep->user);
    if (ep->password) {
        put_str(t, ":");
        put_encoded(t, ep->password);
    }
    if (ep->user || ep->password)
        put_str(t, "@");
    for (int k = 0; k < ep->n_seeds; k++) {
        bool v6 = strchr(ep->seed_host[k], ':') != NULL;
        put_str(t, k ? "," : "");
        put_str(t, v6 ? "[" : "");
        put_str(t, ep->seed_host[k]);
        put_str(t, v6 ? "]:" : ":");
        put_str(t, rm_i64_str(num, ep->seed_port[k]));
    }
    put_str(t, "/");
    put_str(t, rm_i64_str(num, ep->db));
    static const char *const topo[] = {"", "?topology=standalone", "?topology=cluster", ""}; /* sentinel: its own */
    put_str(t, topo[ep->topology]);
}

static int make_display(rm_endpoint *ep)
{
    char buf[3 * URL_MAX + 64];
    text t = {buf, sizeof buf, 0};
    canonical_url(&t, ep);
    size_t len = rm_url_redact(NULL, 0, buf);
    ep->display = malloc(len + 1);
    if (ep->display)
        rm_url_redact(ep->display, len + 1, buf);
    /* It held the password: leave no copy on the stack. */
    volatile char *p = buf;
    for (size_t i = 0; i < sizeof buf; i++)
        p[i] = 0;
    return ep->display ? 0 : REDMUTEX_ENOMEM;
}

static int parse_bool(const char *v, int *out)
{
    static const char *const yes[] = {"true", "1", "yes", "on"}, *const no[] = {"false", "0", "no", "off"};
    for (size_t i = 0; i < 4; i++) {
        if (strcasecmp(v, yes[i]) == 0)
            return *out = 1, 0;
        if (strcasecmp(v, no[i]) == 0)
            return *out = 0, 0;
    }
    return -1;
}

/* What the query gave, to be checked against the rest of the URL. */
typedef struct query_seen {
    bool db, user, password, topology;
} query_seen;

#define IS(name, n, s) ((n) == sizeof(s) - 1 && memcmp((name), (s), (n)) == 0)

/*
 * An option's name as a message may show it: quoted when it looks like a
 * name ([A-Za-z0-9_-], at most 40 bytes) and the redacted URL (shown) shows
 * it too. A malformed URL may have anything there, a password too.
 */
static const char *name_for_message(char out[48], const char *name, size_t n, const char *shown)
{
    bool plain = n > 0 && n <= 40 && memmem(shown, strlen(shown), name, n);
    for (size_t i = 0; plain && i < n; i++)
        plain = isalnum((unsigned char)name[i]) || name[i] == '_' || name[i] == '-';
    if (plain)
        snprintf(out, 48, "'%.*s'", (int)n, name);
    else
        snprintf(out, 48, "(name not shown)");
    return out;
}

/* ssl_cert_reqs and ssl_check_hostname. 0, or -1 when the value is not one of theirs. */
static int tls_flag(rm_endpoint *ep, const char *name, size_t n, const char *value)
{
    if (IS(name, n, "ssl_cert_reqs") && ep->tls_verify < 0) {
        if (strcasecmp(value, "required") == 0)
            return ep->tls_verify = 1, 0;
        if (strcasecmp(value, "none") == 0)
            return ep->tls_verify = 0, 0;
        return -1;
    }
    return parse_bool(value, &ep->tls_check_hostname);
}

/* One ssl_* option of a rediss:// query (takes value). */
static int tls_option(rm_err *err, rm_endpoint *ep, const char *name, size_t n, char *value, const char *shown)
{
    char **slot = IS(name, n, "ssl_ca_certs")          ? &ep->tls_ca_file
                  : IS(name, n, "ssl_certfile")        ? &ep->tls_cert_file
                  : IS(name, n, "ssl_keyfile")         ? &ep->tls_key_file
                  : IS(name, n, "ssl_server_hostname") ? &ep->tls_server_name
                                                       : NULL;
    bool flag = IS(name, n, "ssl_cert_reqs") || IS(name, n, "ssl_check_hostname");
    int given = slot ? *slot != NULL : IS(name, n, "ssl_cert_reqs") ? ep->tls_verify >= 0 : ep->tls_check_hostname >= 0;
    if (!slot && !flag) {
        char nm[48];
        free(value);
        return bad(err, ep, shown,
                   "unknown query option %s (rediss:// takes db, username, password, topology, ssl_ca_certs, "
                   "ssl_certfile, ssl_keyfile, ssl_cert_reqs, ssl_check_hostname, ssl_server_hostname)",
                   name_for_message(nm, name, n, shown));
    }
    if (given || !value[0]) {
        free(value);
        return bad(err, ep, shown, "query option '%.*s' is %s", (int)n, name, given ? "given twice" : "empty");
    }
    if (slot) {
        *slot = value;
        return 0;
    }
    int ok = tls_flag(ep, name, n, value);
    free(value);
    if (ok != 0)
        return bad(err, ep, shown, "%s",
                   IS(name, n, "ssl_cert_reqs") ? "ssl_cert_reqs must be required or none"
                                                : "ssl_check_hostname must be true or false");
    return 0;
}

/* One name=value pair of the query (takes value). */
static int query_option(rm_err *err, rm_endpoint *ep, query_seen *seen, const char *name, size_t n, char *value,
                        const char *shown)
{
    if (IS(name, n, "db")) {
        long db;
        int rc = seen->db || parse_uint(value, strlen(value), 1000000, &db);
        free(value);
        if (rc)
            return bad(err, ep, shown,
                       seen->db ? "query option 'db' is given twice" : "query option 'db' must be a database number");
        seen->db = true;
        ep->db = (int)db;
        return 0;
    }
    if (IS(name, n, "topology")) {
        /* What the deployment is: found out (auto), or fixed by the user. */
        static const char *const names[] = {"auto", "standalone", "cluster"};
        int k = 0;
        while (k < 3 && strcmp(value, names[k]) != 0)
            k++;
        free(value);
        if (seen->topology || k == 3)
            return bad(err, ep, shown,
                       seen->topology ? "query option 'topology' is given twice"
                                      : "topology must be auto, standalone or cluster");
        seen->topology = true;
        ep->topology = k;
        return 0;
    }
    if (IS(name, n, "username") || IS(name, n, "password")) {
        bool user = name[0] == 'u';
        char **slot = user ? &ep->user : &ep->password;
        if (*slot || !value[0]) {
            wipe_free(value);
            return bad(err, ep, shown, "query option '%s' is %s", user ? "username" : "password",
                       *slot ? "given twice" : "empty");
        }
        *slot = value;
        *(user ? &seen->user : &seen->password) = true;
        return 0;
    }
    char nm[48];
    if (n > 4 && memcmp(name, "ssl_", 4) == 0 && !ep->tls) {
        free(value);
        return bad(err, ep, shown, "query option %s is for TLS: it needs a rediss:// URL",
                   name_for_message(nm, name, n, shown));
    }
    if (ep->tls)
        return tls_option(err, ep, name, n, value, shown);
    free(value);
    return bad(err, ep, shown, "unknown query option %s (%s takes db, username, password, topology)",
               name_for_message(nm, name, n, shown), ep->is_unix ? "unix://" : "redis://");
}

#undef IS

/* The query: name=value options separated by '&' (values percent-decoded). */
static int parse_query(rm_err *err, rm_endpoint *ep, query_seen *seen, const char *q, const char *end,
                       const char *shown)
{
    while (q < end) {
        const char *amp = memchr(q, '&', (size_t)(end - q));
        const char *item_end = amp ? amp : end;
        const char *eq = memchr(q, '=', (size_t)(item_end - q));
        if (!eq || eq == q)
            return bad(err, ep, shown, "query options must be name=value");
        char *value = percent_decode(eq + 1, (size_t)(item_end - eq - 1));
        if (!value)
            return bad(err, ep, shown, "bad percent-escape in a query option");
        int rc = query_option(err, ep, seen, q, (size_t)(eq - q), value, shown);
        if (rc != 0)
            return rc;
        q = amp ? amp + 1 : end;
    }
    return 0;
}

/* unix:///path[?option=value&...] */
static int parse_unix(rm_err *err, rm_endpoint *ep, const char *url, const char *shown)
{
    const char *p = url + 7;
    const char *q = strchr(p, '?');
    size_t plen = q ? (size_t)(q - p) : strlen(p);
    if (plen == 0 || p[0] != '/')
        return bad(err, ep, shown, "expected unix:///absolute/path");
    ep->is_unix = true;
    ep->path = percent_decode(p, plen);
    if (!ep->path)
        return bad(err, ep, shown, "bad percent-escape in the path");
    query_seen seen = {0};
    int rc = q ? parse_query(err, ep, &seen, q + 1, q + strlen(q), shown) : 0;
    if (rc)
        return rc;
    if (ep->user && !ep->password)
        return bad(err, ep, shown, "a user name needs a password (?username=U&password=P)");
    if (make_display(ep))
        return bad(err, ep, shown, "out of memory");
    return 0;
}

/* user:password@ in front of the host, if any: *p moves past it. The last
   '@' before the path separates it from the host. */
static int parse_userinfo(rm_err *err, rm_endpoint *ep, const query_seen *seen, const char **p,
                          const char *authority_end, const char *shown)
{
    const char *at = NULL;
    for (const char *s = *p; s < authority_end; s++)
        if (*s == '@')
            at = s;
    if (!at)
        return 0;
    const char *colon = memchr(*p, ':', (size_t)(at - *p));
    const char *user_end = colon ? colon : at;
    if (user_end > *p) {
        if (seen->user)
            return bad(err, ep, shown, "the user name is given twice (user@ and ?username=)");
        ep->user = percent_decode(*p, (size_t)(user_end - *p));
        if (!ep->user)
            return bad(err, ep, shown, "bad percent-escape in the user name");
    }
    if (colon && colon + 1 < at) {
        if (seen->password)
            return bad(err, ep, shown, "the password is given twice (:password@ and ?password=)");
        ep->password = percent_decode(colon + 1, (size_t)(at - colon - 1));
        if (!ep->password)
            return bad(err, ep, shown, "bad percent-escape in the password");
    }
    *p = at + 1;
    return 0;
}

/* host[:port] or [IPv6][:port], up to authority_end. */
static int parse_host_port(rm_err *err, rm_endpoint *ep, const char *p, const char *authority_end, const char *shown)
{
    const char *host_start = p, *host_end;
    const char *port_start = NULL;
    if (*p == '[') {
        const char *close = memchr(p, ']', (size_t)(authority_end - p));
        if (!close || close == p + 1)
            return bad(err, ep, shown, "unterminated IPv6 address");
        host_start = p + 1;
        host_end = close;
        if (close + 1 < authority_end) {
            if (close[1] != ':')
                return bad(err, ep, shown, "unexpected text after the IPv6 address");
            port_start = close + 2;
        }
        for (const char *s = host_start; s < host_end; s++)
            if (!isxdigit((unsigned char)*s) && *s != ':' && *s != '.')
                return bad(err, ep, shown, "bad character in the IPv6 address");
    } else {
        const char *colon = memchr(p, ':', (size_t)(authority_end - p));
        host_end = colon ? colon : authority_end;
        if (colon)
            port_start = colon + 1;
        for (const char *s = host_start; s < host_end; s++)
            if (!isalnum((unsigned char)*s) && *s != '.' && *s != '-' && *s != '_')
                return bad(err, ep, shown, "bad character in the host name");
    }
    if (host_end == host_start)
        return bad(err, ep, shown, "no host");
    if (host_end - host_start > 253)
        return bad(err, ep, shown, "host name too long");
    ep->host = strndup(host_start, (size_t)(host_end - host_start));
    ep->port = 6379;
    if (port_start) {
        long port;
        if (parse_uint(port_start, (size_t)(authority_end - port_start), 65535, &port) || port == 0)
            return bad(err, ep, shown, "port must be a number from 1 to 65535");
        ep->port = (int)port;
    }
    return 0;
}

/* h1[:p1],h2[:p2],...: the seeds, each as parse_host_port reads it. */
static int parse_hosts(rm_err *err, rm_endpoint *ep, const char *p, const char *authority_end, const char *shown)
{
    for (;;) {
        const char *comma = memchr(p, ',', (size_t)(authority_end - p));
        const char *host_end = comma ? comma : authority_end;
        if (ep->n_seeds == RM_SEEDS_MAX)
            return bad(err, ep, shown, "more than 16 hosts");
        free(ep->host);
        ep->host = NULL;
        int rc = parse_host_port(err, ep, p, host_end, shown);
        if (rc != 0)
            return rc;
        if (!ep->host || !(ep->seed_host[ep->n_seeds] = strdup(ep->host)))
            return bad(err, ep, shown, "out of memory");
        ep->seed_port[ep->n_seeds++] = ep->port;
        if (!comma)
            break;
        p = comma + 1;
    }
    /* The first seed is the one tried first. */
    free(ep->host);
    ep->host = strdup(ep->seed_host[0]);
    ep->port = ep->seed_port[0];
    return ep->host ? 0 : bad(err, ep, shown, "out of memory");
}

int rm_endpoint_derive(rm_err *err, rm_endpoint *out, const rm_endpoint *ep, const char *host, int port)
{
    memset(out, 0, sizeof *out);
    out->is_unix = false;
    out->port = port;
    out->db = ep->db;
    out->tls = ep->tls;
    out->tls_verify = ep->tls_verify;
    out->tls_check_hostname = ep->tls_check_hostname;
    /* A node found through the sentinels is one server. */
    out->topology = ep->topology == RM_TOPOLOGY_SENTINEL ? RM_TOPOLOGY_AUTO : ep->topology;
    out->n_seeds = 1;
    out->seed_port[0] = port;
    bool ok = (out->host = strdup(host)) && (out->seed_host[0] = strdup(host)) &&
              (!ep->user || (out->user = strdup(ep->user))) &&
              (!ep->password || (out->password = strdup(ep->password)));
    const char *const *files[] = {(const char *const *)&ep->tls_ca_file, (const char *const *)&ep->tls_cert_file,
                                  (const char *const *)&ep->tls_key_file, (const char *const *)&ep->tls_server_name};
    char **dst[] = {&out->tls_ca_file, &out->tls_cert_file, &out->tls_key_file, &out->tls_server_name};
    for (int k = 0; ok && k < 4; k++)
        ok = !*files[k] || (*dst[k] = strdup(*files[k]));
    if (!ok || make_display(out)) {
        rm_endpoint_clear(out);
        return rm_fail(err, REDMUTEX_ENOMEM, "out of memory");
    }
    return 0;
}

/* The authority and path of a redis:// or rediss:// URL, in front of its query (end). */
static int parse_tcp(rm_err *err, rm_endpoint *ep, const query_seen *seen, const char *p, const char *end,
                     const char *shown)
{
    const char *slash = memchr(p, '/', (size_t)(end - p));
    const char *authority_end = slash ? slash : end;
    int rc = parse_userinfo(err, ep, seen, &p, authority_end, shown);
    if (rc == 0)
        rc = parse_hosts(err, ep, p, authority_end, shown);
    if (rc != 0)
        return rc;
    if (ep->user && !ep->password)
        return bad(err, ep, shown, "a user name needs a password (redis://user:password@host)");
    if (slash && slash + 1 < end) {
        long db;
        if (seen->db)
            return bad(err, ep, shown, "the database is given twice (/N and ?db=N)");
        if (parse_uint(slash + 1, (size_t)(end - slash - 1), 1000000, &db))
            return bad(err, ep, shown, "the path must be a database number");
        ep->db = (int)db;
    }
    if (!ep->host || make_display(ep))
        return bad(err, ep, shown, "out of memory");
    return 0;
}

int rm_endpoint_parse(rm_err *err, rm_endpoint *ep, const char *url)
{
    memset(ep, 0, sizeof *ep);
    if (!url)
        return rm_fail(err, REDMUTEX_EINVAL, "server URL is NULL");
    size_t url_len = strlen(url);
    char shown[256];
    rm_url_redact(shown, sizeof shown, url);
    if (url_len == 0)
        return bad(err, ep, shown, "empty");
    if (url_len > URL_MAX)
        return bad(err, ep, "(too long)", "longer than 4096 bytes");
    for (size_t i = 0; i < url_len; i++)
        if ((unsigned char)url[i] <= ' ' || url[i] == 0x7f)
            return bad(err, ep, shown, "contains a space or control character (percent-encode it)");
    if (strncmp(url, "unix://", 7) == 0)
        return parse_unix(err, ep, url, shown);
    if (rm_url_is_sentinel(url))
        return rm_sentinel_url_parse(err, ep, url);
    ep->tls = strncmp(url, "rediss://", 9) == 0;
    ep->tls_verify = ep->tls_check_hostname = -1;
    if (!ep->tls && strncmp(url, "redis://", 8) != 0)
        return bad(err, ep, shown,
                   "expected redis://host[:port][/db], rediss://... (TLS), unix:///path or "
                   "redis+sentinel://sentinel[:port],.../SERVICE[/db]");

    const char *p = url + (ep->tls ? 9 : 8);
    const char *end = url + url_len;
    if (memchr(p, '#', (size_t)(end - p)))
        return bad(err, ep, shown, "fragments are not supported");
    const char *query = memchr(p, '?', (size_t)(end - p));
    query_seen seen = {0};
    if (query) {
        int rc = parse_query(err, ep, &seen, query + 1, end, shown);
        if (rc != 0)
            return rc;
        end = query;
    }
    return parse_tcp(err, ep, &seen, p, end, shown);
}
