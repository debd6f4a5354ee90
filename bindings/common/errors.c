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
    {0, "Error", "ERROR", NULL},
    {REDMUTEX_EINVAL, "InvalidArgument", "INVALID", NULL},
    {REDMUTEX_ENOMEM, "OutOfMemory", "NOMEM", NULL},
    {REDMUTEX_ETIMEDOUT, "LockTimeout", "TIMEOUT", NULL},
    {REDMUTEX_ENOTOWNER, "NotOwnedError", "NOTOWNER", NULL},
    /* No longer owned, as with redis-py, whose LockNotOwnedError callers catch it. */
    {REDMUTEX_ELOST, "LockLostError", "LOST", "NotOwnedError"},
    {REDMUTEX_ECONN, "ConnectionError", "CONNECTION", NULL},
    {REDMUTEX_EPROTOCOL, "ProtocolError", "PROTOCOL", NULL},
    {REDMUTEX_ESERVER, "ServerError", "SERVER", NULL},
    {REDMUTEX_EWRONGTYPE, "WrongTypeError", "WRONGTYPE", NULL},
    {REDMUTEX_EAUTH, "AuthError", "AUTH", NULL},
    {REDMUTEX_EFORKED, "ForkedError", "FORKED", NULL},
    {REDMUTEX_EDUPLICATE, "DuplicateEndpointError", "DUPLICATE", NULL},
    {REDMUTEX_EREPLICAS, "ReplicaError", "REPLICAS", NULL},
    {REDMUTEX_ECLOSED, "ClosedError", "CLOSED", NULL},
    {REDMUTEX_EINTR, "InterruptedWait", "INTERRUPTED", NULL},
    {REDMUTEX_ELIMIT, "LimitError", "LIMIT", NULL},
    {REDMUTEX_EUNSUPPORTED, "UnsupportedError", "UNSUPPORTED", NULL},
    {REDMUTEX_ESYSTEM, "SystemFailure", "SYSTEM", NULL},
    {0, NULL, NULL, NULL},
};

const rmb_error_class *rmb_error_class_for(int code)
{
    for (const rmb_error_class *c = rmb_error_classes + 1; c->name; c++)
        if (c->code == code)
            return c;
    return rmb_error_classes;
}

static _Thread_local rmb_error pending;

rmb_error *rmb_error_pending(void) { return &pending; }

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
