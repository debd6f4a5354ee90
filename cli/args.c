/*
 * Argument parsing shared by the subcommands, messages, and the mapping from
 * library errors to exit statuses.
 */
#include "cli.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define DEFAULT_URL "redis://127.0.0.1:6379"

/*
 * A message is one write(2), retried. The signal handlers have no SA_RESTART
 * (cli/signals.c), and a terminal write with a signal pending fails with
 * EINTR: through stdio, the SIGCHLD of a CMD that redmutex has just stopped
 * would drop the very message that says why.
 */
static void vmessage(const char *fmt, va_list ap, const char *tail) __attribute__((format(printf, 1, 0)));
static void vmessage(const char *fmt, va_list ap, const char *tail)
{
    int saved = errno;
    char *body = NULL, *all = NULL;
    if (vasprintf(&body, fmt, ap) < 0)
        body = NULL;
    int n = asprintf(&all, "redmutex: %s%s", body ? body : fmt, tail);
    free(body);
    fflush(stderr);
    for (size_t off = 0; n > 0 && off < (size_t)n;) {
        ssize_t w = write(STDERR_FILENO, all + off, (size_t)n - off);
        if (w > 0)
            off += (size_t)w;
        else if (w == 0 || errno != EINTR)
            break;
    }
    if (n >= 0)
        free(all);
    errno = saved;
}

void cli_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vmessage(fmt, ap, "\n");
    va_end(ap);
}

int cli_usage_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vmessage(fmt, ap, "\nTry 'redmutex --help' for more information.\n");
    va_end(ap);
    return CLI_EXIT_USAGE;
}

int cli_exit_for(int code)
{
    switch (code) {
    case REDMUTEX_OK:
        return CLI_EXIT_OK;
    case REDMUTEX_EINVAL:
    case REDMUTEX_EDUPLICATE: /* two URLs for one server: the command line is wrong */
        return CLI_EXIT_USAGE;
    case REDMUTEX_ETIMEDOUT:
        return CLI_EXIT_TEMPFAIL;
    case REDMUTEX_ELOST:
        return CLI_EXIT_LOST;
    case REDMUTEX_EWRONGTYPE:
        return CLI_EXIT_DATAERR;
    case REDMUTEX_EAUTH:
        return CLI_EXIT_NOPERM;
    case REDMUTEX_ENOMEM:
    case REDMUTEX_ESYSTEM:
        return CLI_EXIT_OSERR;
    case REDMUTEX_ECONN:
    case REDMUTEX_EPROTOCOL:
    case REDMUTEX_ESERVER:
    case REDMUTEX_EREPLICAS:
    case REDMUTEX_EUNSUPPORTED:
        return CLI_EXIT_UNAVAILABLE;
    default:
        return CLI_EXIT_SOFTWARE;
    }
}

int cli_library_error(const char *what, int code)
{
    /* The library's message names the lock, the server and the reason. */
    const char *detail = redmutex_last_error();
    if (detail[0])
        cli_error("%s", detail);
    else
        cli_error("%s: %s", what, redmutex_strerror(code));
    return cli_exit_for(code);
}

int cli_parse_seconds(int64_t *out, const char *text)
{
    char *end;
    errno = 0;
    double s = strtod(text, &end);
    /* strtod also takes "inf", "nan" and hex floats; only plain decimals are seconds. */
    if (errno || end == text || *end || !isfinite(s) || s < 0 || strpbrk(text, "xXnN"))
        return -1;
    /* Whole milliseconds, rounded up (0.0001 s waits 1 ms rather than not at
       all); rounded to microseconds first, so that 0.1 s is 100 ms, not 101. */
    double ms = ceil(round(s * 1e6) / 1e3);
    if (ms > (double)REDMUTEX_TIME_MAX_MS)
        return -1;
    *out = (int64_t)ms;
    return 0;
}

int cli_parse_exit_code(int *out, const char *text)
{
    char *end;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (errno || end == text || *end || v < 0 || v > 255)
        return -1;
    *out = (int)v;
    return 0;
}

bool cli_valid_env_name(const char *name)
{
    if (!name[0] || (name[0] >= '0' && name[0] <= '9'))
        return false;
    for (const char *p = name; *p; p++)
        if (!(*p == '_' || (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9')))
            return false;
    return true;
}

int cli_servers_add(cli_servers *s, const char *url)
{
    if (s->n == REDMUTEX_SERVERS_MAX)
        return cli_usage_error("too many servers: at most %d", REDMUTEX_SERVERS_MAX);
    s->urls[s->n++] = url;
    return 0;
}

/* The first comma of p that is followed by a URL scheme ("redis://", "unix://", ...), or NULL. */
static char *next_deployment(char *p)
{
    for (char *comma = strchr(p, ','); comma; comma = strchr(comma + 1, ',')) {
        const char *q = comma + 1;
        size_t n = strspn(q, "abcdefghijklmnopqrstuvwxyz0123456789+.-");
        if (n > 0 && q[0] >= 'a' && q[0] <= 'z' && strncmp(q + n, "://", 3) == 0)
            return comma;
    }
    return NULL;
}

int cli_servers_finish(cli_servers *s)
{
    if (s->n)
        return 0;
    const char *env = getenv("REDMUTEX_URL");
    if (!env || !env[0]) {
        s->urls[s->n++] = DEFAULT_URL;
        return 0;
    }
    size_t len = strlen(env);
    if (env[0] == ',' || env[len - 1] == ',' || strstr(env, ",,"))
        return cli_usage_error("REDMUTEX_URL has an empty entry (a comma too many)");
    s->env_copy = strdup(env);
    if (!s->env_copy) {
        cli_error("out of memory");
        return CLI_EXIT_OSERR;
    }
    /* A comma followed by a scheme starts the next deployment; a comma
       followed by host:port adds a seed to the current URL (DESIGN §6). */
    for (char *p = s->env_copy;;) {
        char *comma = next_deployment(p);
        if (comma)
            *comma = '\0';
        if (!p[0])
            return cli_usage_error("REDMUTEX_URL has an empty entry (a comma too many)");
        int rc = cli_servers_add(s, p);
        if (rc)
            return rc;
        if (!comma)
            return 0;
        p = comma + 1;
    }
}

void cli_servers_clear(cli_servers *s)
{
    free(s->env_copy);
    s->env_copy = NULL;
    s->n = 0;
}

int cli_client_new(redmutex_client **out, const cli_servers *s, const redmutex_client_options *opts)
{
    int rc = redmutex_client_new(out, s->urls, s->n, opts);
    if (rc)
        return cli_library_error("cannot use the servers", rc);
    return 0;
}

int cli_bad_option(int c, char **argv, int index)
{
    const char *arg = argv[index - 1];
    if (c == ':')
        return cli_usage_error("option '%s' needs a value", arg);
    if (optopt > 0 && optopt < 128 && strncmp(arg, "--", 2) != 0)
        return cli_usage_error("unknown option '-%c'", optopt);
    return cli_usage_error("unknown option '%s'", arg);
}
