/*
 * The objects the languages wrap: reference-counted clients, lock handles
 * and guards, and the calls that may block, which go through the
 * language's waiting policy (Ruby releases its GVL, the others catch SIGINT).
 *
 * Reference counts make garbage collection order irrelevant: a Lock keeps
 * its client, a guard keeps its Lock, and the core objects are freed when
 * the last reference goes, without blocking (redmutex_client_free never
 * blocks; a client never closed is closed in the background).
 */
#define _POSIX_C_SOURCE 200809L
#include "binding.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- policy ------------------------------------------------------------- */

static void run_direct(rmb_call *call, rmb_client *client, bool interruptible)
{
    (void)client;
    (void)interruptible;
    call->rc = call->fn(call);
    call->ran = true;
}

static bool never_interrupted(void)
{
    return false;
}

static const rmb_policy direct_policy = {run_direct, never_interrupted, false};
static const rmb_policy *policy = &direct_policy;

void rmb_set_policy(const rmb_policy *p)
{
    policy = p ? p : &direct_policy;
}

const rmb_policy *rmb_policy_get(void)
{
    return policy;
}

/* ---- client ------------------------------------------------------------- */

rmb_client *rmb_client_new(const rmb_list *urls, const rmb_kwargs *kwargs)
{
    if (urls->too_long)
        return rmb_fail(REDMUTEX_EINVAL, "at most %d server URLs are allowed", REDMUTEX_SERVERS_MAX), NULL;
    if (urls->n == 0)
        return rmb_fail(REDMUTEX_EINVAL, "at least one server URL is needed"), NULL;
    const char *text[RMB_LIST_MAX];
    for (size_t i = 0; i < urls->n; i++)
        if (rmb_text(&text[i], &urls->items[i], "server URL", 65536) != 0)
            return NULL;
    rmb_settings s;
    if (rmb_settings_parse(&s, RMB_SCOPE_CLIENT, kwargs) != 0)
        return NULL;
    s.client.log = rmb_log_queue; /* handed to the language after its next call (observe.c) */
    rmb_client *c = calloc(1, sizeof *c);
    if (!c)
        return rmb_fail(REDMUTEX_ENOMEM, "out of memory"), NULL;
    if (rmb_check(redmutex_client_new(&c->ptr, text, urls->n, &s.client)) != 0) {
        free(c);
        return NULL;
    }
    atomic_init(&c->refs, 1);
    atomic_init(&c->closed, false);
    return c;
}

void rmb_client_unref(rmb_client *c)
{
    if (c && atomic_fetch_sub(&c->refs, 1) == 1) {
        if (c->lang_free)
            c->lang_free(c);
        redmutex_client_free(c->ptr); /* never blocks */
        free(c);
    }
}

int rmb_check_open(rmb_client *c)
{
    if (atomic_load(&c->closed))
        return rmb_fail(REDMUTEX_ECLOSED, "the client was closed");
    return 0;
}

static int call_close(rmb_call *call)
{
    return redmutex_client_close(call->client->ptr);
}

int rmb_close(rmb_client *c)
{
    atomic_store(&c->closed, true);
    rmb_call call = {.fn = call_close, .client = c};
    policy->run(&call, c, false);
    return rmb_check(call.rc);
}

int rmb_next_event(rmb_client *c, rmb_event *ev)
{
    ev->has = false;
    int rc = redmutex_client_next_event(c->ptr, &ev->lock_id, &ev->state, ev->owner, sizeof ev->owner);
    if (rc < 0)
        return rmb_check(rc);
    ev->has = rc == 1;
    return 0;
}

/* ---- lock --------------------------------------------------------------- */

rmb_lock *rmb_lock_new(rmb_client *c, const rmb_value *name, redmutex_kind kind, const rmb_kwargs *kwargs)
{
    const char *text;
    rmb_settings s;
    if (rmb_check_open(c) != 0 || rmb_text(&text, name, "lock name", REDMUTEX_NAME_MAX) != 0 ||
        rmb_settings_parse(&s, RMB_SCOPE_LOCK, kwargs) != 0)
        return NULL;
    rmb_lock *l = calloc(1, sizeof *l);
    if (!l || (s.owner && !(l->owner = strdup(s.owner)))) {
        free(l);
        return rmb_fail(REDMUTEX_ENOMEM, "out of memory"), NULL;
    }
    if (rmb_check(redmutex_lock_new(&l->ptr, c->ptr, text, kind, &s.lock)) != 0) {
        free(l->owner);
        free(l);
        return NULL;
    }
    atomic_init(&l->refs, 1);
    atomic_fetch_add(&c->refs, 1);
    l->client = c;
    l->timeout_ms = s.timeout_ms;
    l->fencing = (s.lock.flags & REDMUTEX_LOCK_FENCING) != 0;
    return l;
}

void rmb_lock_unref(rmb_lock *l)
{
    if (l && atomic_fetch_sub(&l->refs, 1) == 1) {
        redmutex_lock_free(l->ptr); /* never blocks; a hold left behind expires */
        rmb_client_unref(l->client);
        free(l->owner);
        free(l);
    }
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int call_acquire(rmb_call *call)
{
    return redmutex_lock_acquire(call->lock->ptr, call->lock->owner, call->arg);
}

static int call_release(rmb_call *call)
{
    return redmutex_lock_release(call->lock->ptr, call->lock->owner);
}

static int interrupted(rmb_lock *l)
{
    return rmb_fail(REDMUTEX_EINTR, "waiting for lock '%s' was interrupted", redmutex_lock_name(l->ptr));
}

/* A lock granted while the language has an interrupt pending is given back,
   so that an interrupted acquire never leaves anything held. */
static int granted(rmb_lock *l)
{
    if (!policy->interrupted())
        return 0;
    rmb_call back = {.fn = call_release, .lock = l};
    policy->run(&back, l->client, false);
    return interrupted(l);
}

int rmb_acquire(rmb_lock *l, int64_t wait_ms)
{
    int64_t deadline = wait_ms < 0 ? -1 : now_ms() + wait_ms;
    if (policy->try_before_waiting && wait_ms != 0) {
        rmb_call once = {.fn = call_acquire, .lock = l, .arg = 0};
        policy->run(&once, l->client, false);
        if (once.rc == 0)
            return granted(l);
        if (once.rc != REDMUTEX_ETIMEDOUT)
            return rmb_check(once.rc);
        if (deadline >= 0) {
            int64_t left = deadline - now_ms();
            wait_ms = left > 0 ? left : 0;
        }
    }
    for (;;) {
        rmb_call call = {.fn = call_acquire, .lock = l, .arg = wait_ms};
        policy->run(&call, l->client, true);
        if (!call.ran)
            return interrupted(l);
        if (call.rc == 0)
            return granted(l);
        if (call.rc != REDMUTEX_EINTR || policy->interrupted())
            return rmb_check(call.rc);
        /* redmutex_client_interrupt ends every wait of the client: this one
           was ended for another thread's sake. Wait on for what is left. */
        if (deadline >= 0) {
            int64_t left = deadline - now_ms();
            wait_ms = left > 0 ? left : 0;
        }
    }
}

int rmb_release(rmb_lock *l)
{
    rmb_call call = {.fn = call_release, .lock = l};
    policy->run(&call, l->client, false);
    return rmb_check(call.rc);
}

/* ---- guard -------------------------------------------------------------- */

rmb_guard *rmb_guard_new(rmb_lock *l, const rmb_kwargs *kwargs)
{
    rmb_settings s;
    if (rmb_settings_parse(&s, RMB_SCOPE_WAIT, kwargs) != 0)
        return NULL;
    /* Nothing allocated before the wait: a language may unwind out of it. */
    if (rmb_acquire(l, s.has_timeout ? s.timeout_ms : l->timeout_ms) != 0)
        return NULL;
    rmb_guard *g = calloc(1, sizeof *g);
    if (!g) {
        rmb_release(l);
        rmb_fail(REDMUTEX_ENOMEM, "out of memory");
        return NULL;
    }
    atomic_fetch_add(&l->refs, 1);
    g->lock = l;
    atomic_init(&g->held, true);
    return g;
}

int rmb_guard_end(rmb_guard *g)
{
    if (!atomic_exchange(&g->held, false))
        return 0;
    return rmb_release(g->lock);
}

void rmb_guard_free(rmb_guard *g)
{
    if (!g)
        return;
    if (atomic_load(&g->held)) {
        rmb_guard_end(g);
        rmb_error_clear(); /* a destructor has nobody to tell */
    }
    rmb_lock_unref(g->lock);
    free(g);
}

/* ---- queries ------------------------------------------------------------ */

static int call_query(rmb_call *call)
{
    redmutex_lock *l = call->lock->ptr;
    const char *owner = call->lock->owner;
    int flag = 0, rc;
    switch ((rmb_query)call->what) {
    case RMB_QUERY_LOCKED:
        rc = redmutex_lock_is_locked(&flag, l);
        break;
    case RMB_QUERY_OWNED:
        rc = redmutex_lock_is_owned(&flag, l, owner);
        break;
    case RMB_QUERY_FORCE_RELEASE:
        rc = redmutex_lock_force_release(&flag, l);
        break;
    case RMB_QUERY_TTL:
        return redmutex_lock_ttl(&call->out, l);
    case RMB_QUERY_HOLD_COUNT:
        return redmutex_lock_hold_count(&call->out, l, owner);
    case RMB_QUERY_EXTEND:
        return redmutex_lock_extend(l, owner, call->arg, REDMUTEX_EXTEND_ADD);
    case RMB_QUERY_EXTEND_REPLACE:
        return redmutex_lock_extend(l, owner, call->arg, REDMUTEX_EXTEND_REPLACE);
    default:
        return REDMUTEX_EINVAL;
    }
    call->out = flag;
    return rc;
}

int rmb_query_lock(rmb_lock *l, rmb_query what, int64_t arg, int64_t *out)
{
    rmb_call call = {.fn = call_query, .lock = l, .what = what, .arg = arg};
    policy->run(&call, l->client, false);
    if (rmb_check(call.rc) != 0)
        return call.rc;
    if (out)
        *out = call.out;
    return 0;
}
