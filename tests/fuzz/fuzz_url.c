/*
 * libFuzzer target: the server URL parser (url.c), TLS query options
 * included. Any input must parse or be refused with REDMUTEX_EINVAL, without
 * a memory error, and a password must never reach the URL shown in messages.
 */
#include "url.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size);

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    char *url = malloc(size + 1);
    if (!url)
        return 0;
    memcpy(url, data, size);
    url[size] = '\0';
    rm_endpoint ep;
    rm_err e;
    rm_err_reset(&e);
    int rc = rm_endpoint_parse(&e, &ep, url);
    if (rc != 0 && (rc != REDMUTEX_EINVAL || e.code != rc || !e.msg[0]))
        abort(); /* refused, with its reason */
    if (rc == 0) {
        if (!ep.display || (!ep.is_unix && (!ep.host || ep.port < 1 || ep.port > 65535)) ||
            (ep.is_unix && !ep.path))
            abort();
        if (ep.password) {
            /* The shown URL masks the password: ":<password>@" must not be in it. */
            size_t n = strlen(ep.password) + 3;
            char *needle = malloc(n);
            snprintf(needle, n, ":%s@", ep.password);
            if (strstr(ep.display, needle))
                abort();
            free(needle);
        }
        rm_endpoint_clear(&ep);
    }
    free(url);
    return 0;
}
