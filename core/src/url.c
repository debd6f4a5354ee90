/*
 * Server URLs:
 *   redis://[user[:password]@]host[:port][/db]
 *   unix:///path/to/socket[?db=N]
 * Messages about a URL show it with the password masked, never the password.
 */
#define _GNU_SOURCE
#include "internal.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    memset(ep, 0, sizeof *ep);
}

static int bad(rm_endpoint *ep, const char *shown, const char *why)
{
    rm_endpoint_clear(ep);
    return rm_fail(REDMUTEX_EINVAL, "malformed server URL '%s': %s", shown, why);
}

static int make_display(rm_endpoint *ep)
{
    char buf[URL_MAX + 64];
    if (ep->is_unix) {
        snprintf(buf, sizeof buf, "unix://%s", ep->path);
        if (ep->db)
            snprintf(buf + strlen(buf), sizeof buf - strlen(buf), "?db=%d", ep->db);
    } else {
        bool v6 = strchr(ep->host, ':') != NULL;
        snprintf(buf, sizeof buf, "redis://%s%s%s%s%s%s:%d/%d", ep->user ? ep->user : "",
                 ep->password ? ":***" : "", ep->user || ep->password ? "@" : "", v6 ? "[" : "",
                 ep->host, v6 ? "]" : "", ep->port, ep->db);
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

int rm_endpoint_parse(rm_endpoint *ep, const char *url)
{
    memset(ep, 0, sizeof *ep);
    if (!url)
        return rm_fail(REDMUTEX_EINVAL, "server URL is NULL");
    size_t url_len = strlen(url);
    char shown[256];
    masked_copy(shown, sizeof shown, url);
    if (url_len == 0)
        return bad(ep, shown, "empty");
    if (url_len > URL_MAX)
        return bad(ep, "(too long)", "longer than 4096 bytes");
    for (size_t i = 0; i < url_len; i++)
        if ((unsigned char)url[i] <= ' ' || url[i] == 0x7f)
            return bad(ep, shown, "contains a space or control character (percent-encode it)");

    if (strncmp(url, "rediss://", 9) == 0) {
        rm_endpoint_clear(ep);
        return rm_fail(REDMUTEX_EUNSUPPORTED, "'%s': TLS (rediss://) is not supported by this build",
                       shown);
    }
    if (strncmp(url, "unix://", 7) == 0) {
        const char *p = url + 7;
        const char *q = strchr(p, '?');
        size_t plen = q ? (size_t)(q - p) : strlen(p);
        if (plen == 0 || p[0] != '/')
            return bad(ep, shown, "expected unix:///absolute/path");
        ep->is_unix = true;
        ep->path = percent_decode(p, plen);
        if (!ep->path)
            return bad(ep, shown, "bad percent-escape in the path");
        if (q) {
            long db;
            if (strncmp(q, "?db=", 4) != 0 || parse_uint(q + 4, strlen(q + 4), 1000000, &db))
                return bad(ep, shown, "the only query parameter is db=N");
            ep->db = (int)db;
        }
        if (make_display(ep))
            return bad(ep, shown, "out of memory");
        return 0;
    }
    if (strncmp(url, "redis://", 8) != 0)
        return bad(ep, shown, "expected redis://host[:port][/db] or unix:///path");

    const char *p = url + 8;
    const char *end = url + url_len;
    const char *slash = strchr(p, '/');
    const char *authority_end = slash ? slash : end;
    if (memchr(p, '?', (size_t)(end - p)) || memchr(p, '#', (size_t)(end - p)))
        return bad(ep, shown, "query strings and fragments are not supported");

    /* userinfo: the last '@' before the path separates it from the host. */
    const char *at = NULL;
    for (const char *s = p; s < authority_end; s++)
        if (*s == '@')
            at = s;
    if (at) {
        const char *colon = memchr(p, ':', (size_t)(at - p));
        const char *user_end = colon ? colon : at;
        if (user_end > p) {
            ep->user = percent_decode(p, (size_t)(user_end - p));
            if (!ep->user)
                return bad(ep, shown, "bad percent-escape in the user name");
        }
        if (colon) {
            ep->password = percent_decode(colon + 1, (size_t)(at - colon - 1));
            if (!ep->password)
                return bad(ep, shown, "bad percent-escape in the password");
            if (!ep->password[0]) {
                free(ep->password);
                ep->password = NULL;
            }
        }
        if (ep->user && !ep->password)
            return bad(ep, shown, "a user name needs a password (redis://user:password@host)");
        p = at + 1;
    }

    const char *host_start = p, *host_end;
    const char *port_start = NULL;
    if (*p == '[') {
        const char *close = memchr(p, ']', (size_t)(authority_end - p));
        if (!close || close == p + 1)
            return bad(ep, shown, "unterminated IPv6 address");
        host_start = p + 1;
        host_end = close;
        if (close + 1 < authority_end) {
            if (close[1] != ':')
                return bad(ep, shown, "unexpected text after the IPv6 address");
            port_start = close + 2;
        }
        for (const char *s = host_start; s < host_end; s++)
            if (!isxdigit((unsigned char)*s) && *s != ':' && *s != '.')
                return bad(ep, shown, "bad character in the IPv6 address");
    } else {
        const char *colon = memchr(p, ':', (size_t)(authority_end - p));
        host_end = colon ? colon : authority_end;
        if (colon)
            port_start = colon + 1;
        for (const char *s = host_start; s < host_end; s++)
            if (!isalnum((unsigned char)*s) && *s != '.' && *s != '-' && *s != '_')
                return bad(ep, shown, "bad character in the host name");
    }
    if (host_end == host_start)
        return bad(ep, shown, "no host");
    if (host_end - host_start > 253)
        return bad(ep, shown, "host name too long");
    ep->host = strndup(host_start, (size_t)(host_end - host_start));
    ep->port = 6379;
    if (port_start) {
        long port;
        if (parse_uint(port_start, (size_t)(authority_end - port_start), 65535, &port) || port == 0)
            return bad(ep, shown, "port must be a number from 1 to 65535");
        ep->port = (int)port;
    }
    if (slash && slash + 1 < end) {
        long db;
        if (parse_uint(slash + 1, (size_t)(end - slash - 1), 1000000, &db))
            return bad(ep, shown, "the path must be a database number");
        ep->db = (int)db;
    }
    if (!ep->host || make_display(ep))
        return bad(ep, shown, "out of memory");
    return 0;
}
