/*
 * Redaction: a URL as a message may show it. One function decides what of a
 * URL is secret, for every message of the library (url.c's display of a
 * parsed URL, the refusal of a malformed one, TLS and connection errors)
 * and for the bindings and the command-line tool (redmutex_url_redact).
 *
 * It reads the text as typed, not as parsed: a malformed URL is shown too,
 * and must not leak what the parser would have taken for a password. So it
 * masks generously: from the scheme to the last '@', every query value but
 * those of a few options known to be harmless, and a fragment.
 */
#define _GNU_SOURCE
#include "internal.h"
#include "url.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/*
 * Query options whose values are never secret and help to read a message.
 * Every other option's value is masked: the known secrets (password,
 * ssl_password, sentinel_password, ...), a misspelt one, any option a later
 * version may add.
 */
static bool value_may_show(const char *name, size_t n)
{
    static const char *const shown[] = {
        "db",          "username",      "topology",           "ssl_ca_certs",        "ssl_certfile",
        "ssl_keyfile", "ssl_cert_reqs", "ssl_check_hostname", "ssl_server_hostname", "sentinel_username"};
    for (size_t i = 0; i < sizeof shown / sizeof shown[0]; i++)
        if (strlen(shown[i]) == n && memcmp(shown[i], name, n) == 0)
            return true;
    return false;
}

static void mark(bool *mask, size_t from, size_t to)
{
    for (size_t i = from; i < to; i++)
        mask[i] = true;
}

/* Whether url[from..to) reads as a host with an optional port: no ':' but one that starts the port. */
static bool host_port(const char *url, size_t from, size_t to)
{
    if (url[from] == '[') /* [IPv6]:port: the brackets hold the colons */
        return true;
    const char *colon = memchr(url + from, ':', to - from);
    if (!colon)
        return true;
    size_t digits = strspn(colon + 1, "0123456789");
    return colon > url + from && digits > 0 && colon + 1 + digits == url + to;
}

/*
 * The user part, whole: everything from the scheme to the last '@'. A
 * password may hold '@', '/', '?' unencoded (the parser would refuse it, and
 * the message must not show it), and what stands where the user name goes
 * may be a password typed in the wrong place ("redis://secret@host"): the
 * user name is not worth that risk. Without an '@', a ':' in a seed of the
 * authority (hosts separated by ',') that starts no port may still be a
 * password typed without one ("redis://:secret", "redis://secret:"): that
 * seed is masked, the others are shown.
 */
static void mask_userinfo(const char *url, size_t n, bool *mask)
{
    const char *at = memrchr(url, '@', n);
    const char *scheme_end = strstr(url, "://");
    /* A "://" behind the '@' is not the scheme's ("user:pw@host/x://y"). */
    size_t start = scheme_end && (!at || scheme_end < at) ? (size_t)(scheme_end - url) + 3 : 0;
    if (at) {
        mark(mask, start, (size_t)(at - url));
        return;
    }
    size_t end = start + strcspn(url + start, "/?#");
    for (size_t from = start; from < end;) {
        size_t to = from + strcspn(url + from, ",/?#");
        if (to > end)
            to = end;
        if (to > from && !host_port(url, from, to))
            mark(mask, from, to);
        from = to + 1;
    }
}

/*
 * Query options, wherever a '?' or '&' starts one (a '?' inside a value or a
 * password may hide "password=..." too). A harmless option's value runs to
 * the next '?' or '&' and is shown; any other value is masked up to the
 * next '&', as the parser reads it ('?' may be part of a password); an item
 * without '=' is masked whole.
 */
static void mask_query(const char *url, size_t n, bool *mask)
{
    size_t i = 0;
    while (i < n) {
        if (url[i] != '?' && url[i] != '&') {
            i++;
            continue;
        }
        size_t name = i + 1, eq = name;
        while (eq < n && url[eq] != '=' && url[eq] != '&' && url[eq] != '?')
            eq++;
        size_t end = eq;
        if (eq == n || url[eq] != '=') {
            mark(mask, name, eq); /* no value: it may be one (a password without its name) */
        } else if (value_may_show(url + name, eq - name)) {
            end = eq + 1 + strcspn(url + eq + 1, "&?");
        } else {
            end = eq + 1 + strcspn(url + eq + 1, "&");
            mark(mask, eq + 1, end);
        }
        i = end;
    }
}

/*
 * A fragment, whole: the parser refuses one, and the refusal shows the URL;
 * what was typed after '#' ("#password=...") may be a secret. Its '#' is
 * the first one past the user part: a '#' before the last '@' is in the
 * user part, masked already.
 */
static void mask_fragment(const char *url, size_t n, bool *mask)
{
    const char *at = memrchr(url, '@', n);
    size_t from = at ? (size_t)(at - url) + 1 : 0;
    const char *hash = memchr(url + from, '#', n - from);
    if (hash)
        mark(mask, (size_t)(hash - url) + 1, n);
}

/* Longer texts are not shown at all (a URL is at most 4096 bytes). */
#define REDACT_MAX 16384

/* out[size] receives what fits of the text and a NUL; *len counts all of it. */
typedef struct text {
    char *buf;
    size_t size, len;
} text;

static void put(text *t, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++, t->len++)
        if (t->len + 1 < t->size)
            t->buf[t->len] = s[i];
}

static void put_str(text *t, const char *s) { put(t, s, strlen(s)); }

size_t rm_url_redact(char *out, size_t size, const char *url)
{
    text t = {out, out ? size : 0, 0};
    size_t n = strlen(url);
    bool small[1024], *mask = n <= sizeof small ? small : NULL;
    if (!mask && n <= REDACT_MAX)
        mask = malloc(n);
    if (!mask) {
        put_str(&t, "(a URL too long to show)");
        if (t.size)
            t.buf[t.len < t.size ? t.len : t.size - 1] = '\0';
        return t.len;
    }
    memset(mask, 0, n);
    mask_userinfo(url, n, mask);
    mask_query(url, n, mask);
    mask_fragment(url, n, mask);
    for (size_t i = 0; i < n;) {
        if (!mask[i]) {
            put(&t, url + i++, 1);
            continue;
        }
        put_str(&t, "***");
        while (i < n && mask[i])
            i++;
    }
    if (mask != small)
        free(mask);
    if (t.size)
        t.buf[t.len < t.size ? t.len : t.size - 1] = '\0';
    return t.len;
}

int redmutex_url_redact(char *out, size_t size, const char *url)
{
    rm_err e_, *err = rm_err_reset(&e_);
    if (!url || (!out && size))
        return rm_publish(err, rm_fail(err, REDMUTEX_EINVAL, "redmutex_url_redact: %s is NULL", url ? "out" : "url"));
    size_t len = rm_url_redact(out, size, url);
    return len > INT32_MAX ? INT32_MAX : (int)len;
}
