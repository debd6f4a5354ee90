/*
 * Server URLs:
 *   redis://[user[:password]@]host[:port][/db]
 *   rediss://[user[:password]@]host[:port][/db][?ssl_option=value&...]
 *   unix:///path/to/socket[?db=N]
 * Several hosts (redis://h1:p1,h2:p2/db) are seeds of one deployment, tried
 * in order; ?topology=auto|standalone|cluster says what that deployment is
 * (default auto: a node that reports cluster_enabled:1 makes it a cluster).
 * Messages about a URL show it with the password masked, never the password.
 */
#define _GNU_SOURCE
#include "internal.h"
#include "url.h"

#include <ctype.h>
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

void rm_endpoint_clear(rm_endpoint *ep)
{
    free(ep->host);
    for (int k = 0; k < ep->n_seeds; k++)
        free(ep->seed_host[k]);
    free(ep->path);
    free(ep->user);
    if (ep->password) {
        /* Do not leave the password lying around in freed memory. */
        volatile char *p = ep->password;
        while (*p)
            *p++ = 0;
        free(ep->password);
    }
    free(ep->display);
    free(ep->tls_ca_file);
    free(ep->tls_cert_file);
    free(ep->tls_key_file);
    free(ep->tls_server_name);
    free(ep->service);
    free(ep->sentinel_user);
    if (ep->sentinel_password) {
        volatile char *p = ep->sentinel_password;
        while (*p)
            *p++ = 0;
        free(ep->sentinel_password);
    }
    memset(ep, 0, sizeof *ep);
}

static int bad(rm_err *err, rm_endpoint *ep, const char *shown, const char *why)
{
    rm_endpoint_clear(ep);
    return rm_fail(err, REDMUTEX_EINVAL, "malformed server URL '%s': %s", shown, why);
}

static int make_display(rm_endpoint *ep)
{
    char buf[URL_MAX + 64];
    if (ep->is_unix) {
        snprintf(buf, sizeof buf, "unix://%s", ep->path);
        if (ep->db)
            snprintf(buf + strlen(buf), sizeof buf - strlen(buf), "?db=%d", ep->db);
    } else {
        int n = snprintf(buf, sizeof buf, "%s://%s%s%s", ep->tls ? "rediss" : "redis", ep->user ? ep->user : "",
                         ep->password ? ":***" : "", ep->user || ep->password ? "@" : "");
        for (int k = 0; k < ep->n_seeds && n < (int)sizeof buf; k++) {
            bool v6 = strchr(ep->seed_host[k], ':') != NULL;
            n += snprintf(buf + n, sizeof buf - (size_t)n, "%s%s%s%s:%d", k ? "," : "", v6 ? "[" : "",
                          ep->seed_host[k], v6 ? "]" : "", ep->seed_port[k]);
        }
        static const char *const topo[] = {"", "?topology=standalone", "?topology=cluster"};
        if (n < (int)sizeof buf)
            snprintf(buf + n, sizeof buf - (size_t)n, "/%d%s", ep->db, topo[ep->topology]);
    }
    ep->display = strdup(buf);
    return ep->display ? 0 : REDMUTEX_ENOMEM;
}

/*
 * The URL as it may be shown: when it has an '@', everything between the
 * scheme and the last '@' is masked, whether or not the scheme is well
 * formed ("redis:/user:secret@host" must not leak either).
 */
static void masked_copy(char *out, size_t size, const char *url)
{
    const char *at = strrchr(url, '@');
    if (!at) {
        /* No '@', but a ':' in the authority may still be a password typed
           without one ("redis://:secret", "redis://secret:"): mask all of
           the authority then, unless it is plainly host:port. */
        const char *auth = strstr(url, "://");
        auth = auth ? auth + 3 : url;
        size_t alen = strcspn(auth, "/?#");
        const char *colon = memchr(auth, ':', alen);
        bool plain_port = colon && colon > auth && colon + 1 < auth + alen &&
                          strspn(colon + 1, "0123456789") == (size_t)(auth + alen - colon - 1);
        if (colon && !plain_port && auth[0] != '[')
            snprintf(out, size, "%.*s***%s", (int)(auth - url), url, auth + alen);
        else
            snprintf(out, size, "%s", url);
        return;
    }
    const char *scheme_end = strstr(url, "://");
    size_t keep = scheme_end && scheme_end < at ? (size_t)(scheme_end + 3 - url) : strcspn(url, ":/");
    if (url + keep > at)
        keep = 0;
    snprintf(out, size, "%.*s***%s", (int)keep, url, at);
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

/* One name=value pair of a rediss:// query. */
static int tls_option(rm_err *err, rm_endpoint *ep, const char *name, size_t name_len, char *value, const char *shown)
{
#define IS(s) (name_len == sizeof(s) - 1 && memcmp(name, s, name_len) == 0)
    char **slot = IS("ssl_ca_certs") ? &ep->tls_ca_file
                  : IS("ssl_certfile") ? &ep->tls_cert_file
                  : IS("ssl_keyfile") ? &ep->tls_key_file
                  : IS("ssl_server_hostname") ? &ep->tls_server_name
                                              : NULL;
    if (slot) {
        if (*slot || !value[0]) {
            free(value);
            return bad(err, ep, shown, *slot ? "an ssl_ option is given twice" : "an ssl_ option has an empty value");
        }
        *slot = value;
        return 0;
    }
    int ok = -1;
    if (IS("ssl_cert_reqs") && ep->tls_verify < 0) {
        if (strcasecmp(value, "required") == 0)
            ok = 0, ep->tls_verify = 1;
        else if (strcasecmp(value, "none") == 0)
            ok = 0, ep->tls_verify = 0;
    } else if (IS("ssl_check_hostname") && ep->tls_check_hostname < 0) {
        ok = parse_bool(value, &ep->tls_check_hostname);
    } else {
        free(value);
        return bad(err, ep, shown,
                   "unknown or repeated query option (rediss:// takes ssl_ca_certs, ssl_certfile, ssl_keyfile, "
                   "ssl_cert_reqs, ssl_check_hostname, ssl_server_hostname)");
    }
#undef IS
    free(value);
    if (ok != 0)
        return bad(err, ep, shown, "ssl_cert_reqs must be required or none; ssl_check_hostname true or false");
    return 0;
}

/* topology=auto|standalone|cluster (any scheme). 1 when `name` is not that option. */
static int topology_option(rm_err *err, rm_endpoint *ep, const char *name, size_t name_len, const char *value,
                           const char *shown, bool *seen)
{
    if (name_len != 8 || memcmp(name, "topology", 8) != 0)
        return 1;
    static const char *const names[] = {"auto", "standalone", "cluster"};
    for (int k = 0; k < 3 && !*seen; k++)
        if (strcmp(value, names[k]) == 0) {
            ep->topology = k;
            *seen = true;
            return 0;
        }
    return bad(err, ep, shown, *seen ? "topology is given twice" : "topology must be auto, standalone or cluster");
}

/* The query: ssl_* options (rediss:// only) and topology, separated by '&'. */
static int parse_query(rm_err *err, rm_endpoint *ep, const char *q, const char *end, const char *shown)
{
    bool topology_seen = false;
    while (q < end) {
        const char *amp = memchr(q, '&', (size_t)(end - q));
        const char *item_end = amp ? amp : end;
        const char *eq = memchr(q, '=', (size_t)(item_end - q));
        if (!eq || eq == q)
            return bad(err, ep, shown, "query options must be name=value");
        char *value = percent_decode(eq + 1, (size_t)(item_end - eq - 1));
        if (!value)
            return bad(err, ep, shown, "bad percent-escape in a query option");
        int rc = topology_option(err, ep, q, (size_t)(eq - q), value, shown, &topology_seen);
        if (rc != 1) {
            free(value);
            if (rc != 0)
                return rc;
            q = amp ? amp + 1 : end;
            continue;
        }
        if (!ep->tls) {
            free(value);
            return bad(err, ep, shown, "query options (ssl_*) need a rediss:// URL (redis:// takes topology only)");
        }
        rc = tls_option(err, ep, q, (size_t)(eq - q), value, shown);
        if (rc != 0)
            return rc;
        q = amp ? amp + 1 : end;
    }
    return 0;
}

/* unix:///path[?db=N] */
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
    if (q) {
        long db;
        if (strncmp(q, "?db=", 4) != 0 || parse_uint(q + 4, strlen(q + 4), 1000000, &db))
            return bad(err, ep, shown, "the only query parameter is db=N");
        ep->db = (int)db;
    }
    if (make_display(ep))
        return bad(err, ep, shown, "out of memory");
    return 0;
}

/* user:password@ in front of the host, if any: *p moves past it. The last
   '@' before the path separates it from the host. */
static int parse_userinfo(rm_err *err, rm_endpoint *ep, const char **p, const char *authority_end, const char *shown)
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
        ep->user = percent_decode(*p, (size_t)(user_end - *p));
        if (!ep->user)
            return bad(err, ep, shown, "bad percent-escape in the user name");
    }
    if (colon) {
        ep->password = percent_decode(colon + 1, (size_t)(at - colon - 1));
        if (!ep->password)
            return bad(err, ep, shown, "bad percent-escape in the password");
        if (!ep->password[0]) {
            free(ep->password);
            ep->password = NULL;
        }
    }
    if (ep->user && !ep->password)
        return bad(err, ep, shown, "a user name needs a password (redis://user:password@host)");
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
    out->topology = ep->topology == RM_TOPOLOGY_SENTINEL ? RM_TOPOLOGY_STANDALONE : ep->topology;
    out->n_seeds = 1;
    out->seed_port[0] = port;
    bool ok = (out->host = strdup(host)) && (out->seed_host[0] = strdup(host)) &&
              (!ep->user || (out->user = strdup(ep->user))) && (!ep->password || (out->password = strdup(ep->password)));
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

int rm_endpoint_parse(rm_err *err, rm_endpoint *ep, const char *url)
{
    memset(ep, 0, sizeof *ep);
    if (!url)
        return rm_fail(err, REDMUTEX_EINVAL, "server URL is NULL");
    size_t url_len = strlen(url);
    char shown[256];
    masked_copy(shown, sizeof shown, url);
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
    if (query) {
        int rc = parse_query(err, ep, query + 1, end, shown);
        if (rc != 0)
            return rc;
        end = query;
    }
    const char *slash = memchr(p, '/', (size_t)(end - p));
    const char *authority_end = slash ? slash : end;
    int rc = parse_userinfo(err, ep, &p, authority_end, shown);
    if (rc == 0)
        rc = parse_hosts(err, ep, p, authority_end, shown);
    if (rc != 0)
        return rc;
    if (slash && slash + 1 < end) {
        long db;
        if (parse_uint(slash + 1, (size_t)(end - slash - 1), 1000000, &db))
            return bad(err, ep, shown, "the path must be a database number");
        ep->db = (int)db;
    }
    if (!ep->host || make_display(ep))
        return bad(err, ep, shown, "out of memory");
    return 0;
}
