/* Result codes, their descriptions and the thread-local detail message. */
#define _GNU_SOURCE
#include "internal.h"

#include <stdio.h>
#include <string.h>

static _Thread_local char last_message[512];
static _Thread_local int last_code;
_Static_assert(sizeof(((rm_err *)0)->msg) == sizeof last_message, "an error fits the thread's message");

const char *redmutex_strerror(int code)
{
    switch (code) {
    case REDMUTEX_OK:
        return "success";
    case REDMUTEX_EINVAL:
        return "invalid argument";
    case REDMUTEX_ENOMEM:
        return "out of memory";
    case REDMUTEX_ETIMEDOUT:
        return "lock held by another owner; wait timed out";
    case REDMUTEX_ENOTOWNER:
        return "lock not held by this owner";
    case REDMUTEX_ELOST:
        return "lock lost";
    case REDMUTEX_ECONN:
        return "connection failed or timed out";
    case REDMUTEX_EPROTOCOL:
        return "protocol error";
    case REDMUTEX_ESERVER:
        return "server error";
    case REDMUTEX_EWRONGTYPE:
        return "key holds a value that is not a lock of this kind";
    case REDMUTEX_EAUTH:
        return "authentication or permission failure";
    case REDMUTEX_EFORKED:
        return "handle inherited across fork";
    case REDMUTEX_EDUPLICATE:
        return "duplicate server endpoint";
    case REDMUTEX_EREPLICAS:
        return "not enough replicas acknowledged";
    case REDMUTEX_ECLOSED:
        return "client closed";
    case REDMUTEX_EINTR:
        return "wait interrupted";
    case REDMUTEX_ELIMIT:
        return "limit reached";
    case REDMUTEX_EUNSUPPORTED:
        return "not supported by this build";
    case REDMUTEX_ESYSTEM:
        return "a system facility failed";
    default:
        return "unknown error";
    }
}

const char *redmutex_last_error(void) { return last_message; }

int redmutex_last_error_code(void) { return last_code; }

void redmutex_clear_error(void)
{
    last_message[0] = '\0';
    last_code = 0;
}

int rm_vfail(rm_err *e, int code, const char *fmt, va_list ap)
{
    if (!e)
        return code;
    char tmp[sizeof e->msg];
    vsnprintf(tmp, sizeof tmp, fmt, ap);
    memcpy(e->msg, tmp, sizeof tmp);
    e->code = code;
    return code;
}

int rm_fail(rm_err *e, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    rm_vfail(e, code, fmt, ap);
    va_end(ap);
    return code;
}

int rm_err_copy(rm_err *e, const rm_err *src)
{
    if (e && e != src)
        memcpy(e, src, sizeof *e);
    return src->code;
}

int rm_publish(const rm_err *e, int rc)
{
    if (rc >= 0) /* success: a count, a descriptor, or 0 */
        return rc;
    const char *msg = e && e->code == rc && e->msg[0] ? e->msg : redmutex_strerror(rc);
    snprintf(last_message, sizeof last_message, "%s", msg);
    last_code = rc;
    return rc;
}

const char *redmutex_version(void) { return REDMUTEX_VERSION_STRING; }

int redmutex_version_number(void) { return REDMUTEX_VERSION_NUMBER; }
