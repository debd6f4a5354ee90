/*
 * The one code -> class table of the bindings, and the calling thread's
 * pending error. Every language builds its exception classes from this
 * table (Ruby classes, Perl packages, Tcl -errorcode words, Lua names), so
 * a new code is added here once. Names are those of the Python package.
 */
#include "binding.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

const rmb_error_class rmb_error_classes[] = {
    {0, "Error", "ERROR"},
    {REDMUTEX_EINVAL, "InvalidArgument", "INVALID"},
    {REDMUTEX_ENOMEM, "OutOfMemory", "NOMEM"},
    {REDMUTEX_ETIMEDOUT, "LockTimeout", "TIMEOUT"},
    {REDMUTEX_ENOTOWNER, "NotOwnedError", "NOTOWNER"},
    {REDMUTEX_ELOST, "LockLostError", "LOST"},
    {REDMUTEX_ECONN, "ConnectionError", "CONNECTION"},
    {REDMUTEX_EPROTOCOL, "ProtocolError", "PROTOCOL"},
    {REDMUTEX_ESERVER, "ServerError", "SERVER"},
    {REDMUTEX_EWRONGTYPE, "WrongTypeError", "WRONGTYPE"},
    {REDMUTEX_EAUTH, "AuthError", "AUTH"},
    {REDMUTEX_EFORKED, "ForkedError", "FORKED"},
    {REDMUTEX_EDUPLICATE, "DuplicateEndpointError", "DUPLICATE"},
    {REDMUTEX_EREPLICAS, "ReplicaError", "REPLICAS"},
    {REDMUTEX_ECLOSED, "ClosedError", "CLOSED"},
    {REDMUTEX_EINTR, "InterruptedWait", "INTERRUPTED"},
    {REDMUTEX_ELIMIT, "LimitError", "LIMIT"},
    {REDMUTEX_EUNSUPPORTED, "UnsupportedError", "UNSUPPORTED"},
    {0, NULL, NULL},
};

const rmb_error_class *rmb_error_class_for(int code)
{
    for (const rmb_error_class *c = rmb_error_classes + 1; c->name; c++)
        if (c->code == code)
            return c;
    return rmb_error_classes;
}

static _Thread_local rmb_error pending;

rmb_error *rmb_error_pending(void)
{
    return &pending;
}

void rmb_error_clear(void)
{
    pending.code = 0;
    pending.message[0] = '\0';
}

int rmb_fail(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(pending.message, sizeof pending.message, fmt, ap);
    va_end(ap);
    pending.code = code;
    return code;
}

int rmb_check(int rc)
{
    if (rc >= 0)
        return rc;
    const char *detail = redmutex_last_error();
    if (!detail || !*detail)
        detail = redmutex_strerror(rc);
    return rmb_fail(rc, "%s", detail);
}
