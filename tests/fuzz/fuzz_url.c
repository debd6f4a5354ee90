/*
 * libFuzzer target: the server URL parser (url.c) and the redaction of URLs
 * in messages (redact.c). Any input must parse or be refused with
 * REDMUTEX_EINVAL, without a memory error, and no secret may reach a
 * message.
 *
 * The input is a URL template: every 0x01 byte in it is replaced with
 * SECRET before parsing, so the fuzzer can put a known secret anywhere.
 * Then:
 *  - when the URL parses and SECRET landed only in what the parser takes for
 *    secrets (the password, from the user part or ?password=), neither the
 *    URL shown in messages nor the redacted URL may contain it;
 *  - whether or not it parses, a SECRET placed where a password is typed
 *    (between "://" and the last '@', or as the value of password=) never
 *    appears in the redacted URL nor in the refusal's message.
 */
#define _GNU_SOURCE
#include "url.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SECRET "Zq8SeKr3tw"

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size);

/* The template with every 0x01 replaced by SECRET, NUL-terminated; NULL when it has no 0x01. */
static char *fill(const unsigned char *data, size_t size, size_t *n_secrets)
{
    *n_secrets = 0;
    for (size_t i = 0; i < size; i++)
        *n_secrets += data[i] == 1;
    char *url = malloc(size + *n_secrets * strlen(SECRET) + 1);
    if (!url)
        return NULL;
    size_t j = 0;
    for (size_t i = 0; i < size; i++) {
        if (data[i] == 1) {
            memcpy(url + j, SECRET, strlen(SECRET));
            j += strlen(SECRET);
        } else {
            url[j++] = (char)data[i];
        }
    }
    url[j] = '\0';
    return url;
}

static bool has(const char *s, const char *what) { return s && strstr(s, what) != NULL; }

/* Whether SECRET stands where a password is typed, at every place it occurs. */
static bool typed_as_password(const char *url)
{
    const char *scheme_end = strstr(url, "://");
    const char *last_at = strrchr(url, '@');
    for (const char *p = strstr(url, SECRET); p; p = strstr(p + 1, SECRET)) {
        bool in_user_part = scheme_end && scheme_end < p && last_at && p + strlen(SECRET) <= last_at;
        bool password_value = (p - url >= 10 && memcmp(p - 9, "password=", 9) == 0 &&
                               (p[-10] == '?' || p[-10] == '&')) ||
                              (p - url >= 19 && memcmp(p - 18, "sentinel_password=", 18) == 0 &&
                               (p[-19] == '?' || p[-19] == '&'));
        if (!in_user_part && !password_value)
            return false;
    }
    return true;
}

/* Whether SECRET is in what the parser took for something other than a secret. */
static bool secret_outside_secrets(const rm_endpoint *ep)
{
    for (int i = 0; i < ep->n_seeds; i++)
        if (has(ep->seed_host[i], SECRET))
            return true; /* a seed's host name is shown, as every host is */
    return has(ep->host, SECRET) || has(ep->path, SECRET) || has(ep->user, SECRET) || has(ep->tls_ca_file, SECRET) ||
           has(ep->tls_cert_file, SECRET) || has(ep->tls_key_file, SECRET) || has(ep->tls_server_name, SECRET) ||
           has(ep->service, SECRET) || has(ep->sentinel_user, SECRET);
}

static void check_redaction_alone(const char *url)
{
    /* Every size, the small ones included: NUL-terminated, and the length does not depend on it. */
    char out[64];
    size_t whole = rm_url_redact(NULL, 0, url);
    for (size_t s = 1; s <= sizeof out; s += 7) {
        memset(out, 'x', sizeof out);
        if (rm_url_redact(out, s, url) != whole || memchr(out, '\0', s) == NULL)
            abort();
    }
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    size_t n_secrets;
    char *url = fill(data, size, &n_secrets);
    if (!url)
        return 0;
    check_redaction_alone(url);
    size_t len = rm_url_redact(NULL, 0, url);
    char *shown = malloc(len + 1);
    if (!shown)
        abort();
    rm_url_redact(shown, len + 1, url);
    rm_endpoint ep;
    rm_err e;
    rm_err_reset(&e);
    int rc = rm_endpoint_parse(&e, &ep, url);
    if (rc != 0 && (rc != REDMUTEX_EINVAL || e.code != rc || !e.msg[0]))
        abort(); /* refused, with its reason */
    bool typed = n_secrets > 0 && typed_as_password(url);
    if (typed && (has(shown, SECRET) || has(e.msg, SECRET)))
        abort(); /* a password typed where passwords go was shown */
    if (rc == 0) {
        if (!ep.display || (!ep.is_unix && (!ep.host || ep.port < 1 || ep.port > 65535)) ||
            (ep.is_unix && !ep.path))
            abort();
        bool only_in_secrets =
            (has(ep.password, SECRET) || has(ep.sentinel_password, SECRET)) && !secret_outside_secrets(&ep);
        if (only_in_secrets && (has(ep.display, SECRET) || has(shown, SECRET)))
            abort(); /* what the parser took for the password was shown */
        rm_endpoint_clear(&ep);
    }
    free(shown);
    free(url);
    return 0;
}
