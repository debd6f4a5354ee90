/*
 * The objects the languages wrap: reference-counted clients, lock handles
 * and guards, and the calls that may block, which go through the
 * language's waiting policy (Ruby releases its GVL, the others take over
 * the signals they handle while waiting).
 *
 * Reference counts make garbage collection order irrelevant: a Lock keeps
 * its client, a guard keeps its Lock, and the core objects are freed when
 * the last reference goes, without blocking (a client never closed is
 * closed in the background, and at exit; see live.c).
 *
 * Every function here leaves errno as it found it: the core's sockets set it,
 * and a language may read it after a call (Perl's die exits with $!).
 */
#define _POSIX_C_SOURCE 200809L
#include "binding.h"

#include <errno.h>
#include <stdio.h>
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

static bool nothing_pending(void) { return false; }

static bool wait_on(void) { return true; }

static const rmb_policy direct_policy = {run_direct, nothing_pending, wait_on, false};
static const rmb_policy *policy = &direct_policy;

void rmb_set_policy(const rmb_policy *p) { policy = p ? p : &direct_policy; }

const rmb_policy *rmb_policy_get(void) { return policy; }

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
    int saved_errno = errno;
    int rc = rmb_check(redmutex_client_new(&c->ptr, text, urls->n, &s.client));
    errno = saved_errno;
    if (rc != 0 || rmb_live_add(c, RMB_TYPE_CLIENT) != 0) {
        redmutex_client_free(c->ptr);
        free(c);
        return NULL;
    }
    atomic_init(&c->refs, 1);
    atomic_init(&c->closed, false);
    rmb_exit_watch(c);
    return c;
}

void rmb_client_unref(rmb_client *c)
{
    if (c && atomic_fetch_sub(&c->refs, 1) == 1) {
        int saved_errno = errno;
        if (c->lang_free)
            c->lang_free(c);
        rmb_exit_free(c); /* never blocks */
        free(c);
        errno = saved_errno;
    }
}

int rmb_check_open(rmb_client *c)
{
    if (atomic_load(&c->closed))
        return rmb_fail(REDMUTEX_ECLOSED, "the client was closed");
    return 0;
}

static int call_close(rmb_call *call) { return redmutex_client_close(call->client->ptr); }

/* Runs a call through the language's policy, keeping errno. */
static void run(rmb_call *call, rmb_client *client, bool interruptible)
{
    int saved_errno = errno;
    policy->run(call, client, interruptible);
    errno = saved_errno;
}

int rmb_close(rmb_client *c)
{
    rmb_exit_closing(true); /* an exit from now on waits for this close, which it leaves to us */
    atomic_store(&c->closed, true);
    rmb_call call = {.fn = call_close, .client = c};
    run(&call, c, false);
    rmb_exit_closing(false);
    return rmb_check(call.rc);
}

int rmb_next_event(rmb_client *c, rmb_event *ev)
{
    ev->has = false;
    int saved_errno = errno;
    int rc = redmutex_client_next_event(c->ptr, &ev->lock_id, &ev->state, ev->owner, sizeof ev->owner);
    errno = saved_errno;
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
    if (rmb_check(redmutex_lock_new(&l->ptr, c->ptr, text, kind, &s.lock)) != 0 ||
        rmb_live_add(l, RMB_TYPE_LOCK) != 0) {
        redmutex_lock_free(l->ptr);
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

rmb_lock *rmb_semaphore_new(rmb_client *c, const rmb_value *name, const rmb_value *permits, const rmb_kwargs *kwargs)
{
    const char *text;
    rmb_settings s;
    if (rmb_check_open(c) != 0 || rmb_text(&text, name, "semaphore name", REDMUTEX_NAME_MAX) != 0 ||
        rmb_settings_parse(&s, RMB_SCOPE_SEMAPHORE, kwargs) != 0)
        return NULL;
    if (!permits->numeric || !permits->integral || permits->kind == RMB_BOOL)
        return rmb_fail(REDMUTEX_EINVAL, "permits must be a whole number from 1 to %lld, not %s",
                        (long long)REDMUTEX_SEMAPHORE_PERMITS_MAX, permits->type ? permits->type : "nothing"),
               NULL;
    if (permits->i < 1 || permits->i > REDMUTEX_SEMAPHORE_PERMITS_MAX)
        return rmb_fail(REDMUTEX_EINVAL, "permits must be from 1 to %lld, not %lld",
                        (long long)REDMUTEX_SEMAPHORE_PERMITS_MAX, (long long)permits->i),
               NULL;
    redmutex_semaphore_options o;
    redmutex_semaphore_options_init(&o, REDMUTEX_SEMAPHORE_OPTIONS_VERSION);
    o.lease_ms = s.lock.lease_ms;
    o.max_hold_ms = s.lock.max_hold_ms;
    o.max_extensions = s.lock.max_extensions;
    o.flags = s.semaphore_flags | ((s.lock.flags & REDMUTEX_LOCK_FENCING) ? REDMUTEX_SEMAPHORE_FENCING : 0);
    rmb_lock *l = calloc(1, sizeof *l);
    if (!l)
        return rmb_fail(REDMUTEX_ENOMEM, "out of memory"), NULL;
    if (rmb_check(redmutex_semaphore_new(&l->sem, c->ptr, text, permits->i, &o)) != 0 ||
        rmb_live_add(l, RMB_TYPE_SEMAPHORE) != 0) {
        redmutex_semaphore_free(l->sem);
        free(l);
        return NULL;
    }
    atomic_init(&l->refs, 1);
    atomic_fetch_add(&c->refs, 1);
    l->client = c;
    l->timeout_ms = s.timeout_ms;
    l->fencing = (o.flags & REDMUTEX_SEMAPHORE_FENCING) != 0;
    return l;
}

void rmb_lock_unref(rmb_lock *l)
{
    if (l && atomic_fetch_sub(&l->refs, 1) == 1) {
        int saved_errno = errno;
        rmb_live_remove(l);
        redmutex_lock_free(l->ptr); /* never blocks; a hold left behind is the client's to release */
        redmutex_semaphore_free(l->sem);
        rmb_client_unref(l->client);
        free(l->owner);
        free(l);
        errno = saved_errno;
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
    rmb_lock *l = call->lock;
    if (l->sem)
        return redmutex_semaphore_acquire(call->permit, sizeof call->permit, l->sem, call->permits, call->arg);
    return redmutex_lock_acquire(l->ptr, l->owner, call->arg);
}

static int call_release(rmb_call *call)
{
    rmb_lock *l = call->lock;
    if (l->sem)
        return redmutex_semaphore_release(l->sem, call->permit);
    return redmutex_lock_release(l->ptr, l->owner);
}

static int interrupted(rmb_lock *l)
{
    return rmb_fail(REDMUTEX_EINTR, "waiting for %s '%s' was interrupted", l->sem ? "semaphore" : "lock",
                    l->sem ? redmutex_semaphore_name(l->sem) : redmutex_lock_name(l->ptr));
}

/*
 * The signal policy (see signals.c): a signal that the language handles
 * ends the wait; the language runs its handler with nothing held by this
 * acquire - a hold granted in the same moment is given back first, since the
 * handler may unwind and no handle would know the hold was taken - and the
 * wait goes on for the time it has left if the handler returns. Returns 0 to
 * go on waiting, or the error to end the acquire with.
 */
static int after_signal(rmb_lock *l, const rmb_call *call)
{
    if (call->rc == 0) {
        rmb_call back = {.fn = call_release, .lock = l};
        memcpy(back.permit, call->permit, sizeof back.permit);
        run(&back, l->client, false);
    } else if (call->rc != REDMUTEX_EINTR && call->rc != REDMUTEX_ETIMEDOUT) {
        return rmb_check(call->rc);
    }
    if (call->stop)
        return interrupted(l); /* a SIGINT nobody handles: end the wait, not the process */
    int saved_errno = errno;
    bool go_on = policy->deliver(); /* may unwind with the handler's exception */
    errno = saved_errno;
    if (!go_on)
        return rmb_error_pending()->code ? rmb_error_pending()->code : interrupted(l);
    return 0;
}

int rmb_acquire(rmb_lock *l, int64_t wait_ms) { return rmb_acquire_permit(l, wait_ms, 1, NULL); }

int rmb_acquire_permit(rmb_lock *l, int64_t wait_ms, int64_t permits, char *permit)
{
    int64_t deadline = wait_ms < 0 ? -1 : now_ms() + wait_ms;
    /* First, where the policy asks for it, one try outside the costly interruptible region. */
    bool once = policy->try_before_waiting;
    for (;;) {
        rmb_call call = {.fn = call_acquire, .lock = l, .arg = once ? 0 : wait_ms, .permits = permits};
        run(&call, l->client, !once);
        if (call.ran && call.rc == 0 && permit)
            memcpy(permit, call.permit, sizeof call.permit);
        if (!call.ran)
            return interrupted(l);
        if (call.signalled || call.stop || policy->pending()) {
            int rc = after_signal(l, &call);
            if (rc != 0)
                return rc;
            if (call.rc == REDMUTEX_ETIMEDOUT && !once)
                return rmb_check(call.rc); /* the handler ran; the wait was over anyway */
        } else if (call.rc == 0) {
            return 0;
        } else if (call.rc == REDMUTEX_ETIMEDOUT) {
            if (!once || wait_ms == 0)
                return rmb_check(call.rc);
        } else if (call.rc != REDMUTEX_EINTR) {
            return rmb_check(call.rc);
        }
        /* On: after the try, after a handler that returned, or after an
           interrupt meant for another thread (redmutex_client_interrupt ends
           every wait of the client). Wait for what is left. */
        once = false;
        if (deadline >= 0) {
            int64_t left = deadline - now_ms();
            wait_ms = left > 0 ? left : 0;
        }
    }
}

int rmb_release(rmb_lock *l)
{
    rmb_call call = {.fn = call_release, .lock = l};
    run(&call, l->client, false);
    return rmb_check(call.rc);
}

int rmb_release_permit(rmb_lock *l, const char *permit)
{
    rmb_call call = {.fn = call_release, .lock = l};
    snprintf(call.permit, sizeof call.permit, "%s", permit);
    if (strlen(permit) >= sizeof call.permit)
        return rmb_fail(REDMUTEX_EINVAL, "'%.60s' is no permit id", permit);
    run(&call, l->client, false);
    return rmb_check(call.rc);
}

/* ---- guard -------------------------------------------------------------- */

rmb_guard *rmb_guard_new(rmb_lock *l, const rmb_kwargs *kwargs)
{
    rmb_settings s;
    if (rmb_settings_parse(&s, RMB_SCOPE_WAIT, kwargs) != 0)
        return NULL;
    /* Nothing allocated before the wait: a language may unwind out of it. */
    char permit[REDMUTEX_PERMIT_ID_SIZE] = "";
    if (rmb_acquire_permit(l, s.has_timeout ? s.timeout_ms : l->timeout_ms, 1, permit) != 0)
        return NULL;
    rmb_guard *g = calloc(1, sizeof *g);
    if (!g || rmb_live_add(g, RMB_TYPE_GUARD) != 0) {
        free(g);
        if (l->sem)
            rmb_release_permit(l, permit);
        else
            rmb_release(l);
        rmb_fail(REDMUTEX_ENOMEM, "out of memory");
        return NULL;
    }
    atomic_fetch_add(&l->refs, 1);
    g->lock = l;
    memcpy(g->permit, permit, sizeof permit);
    atomic_init(&g->held, true);
    return g;
}

int rmb_guard_end(rmb_guard *g)
{
    if (!atomic_exchange(&g->held, false))
        return 0;
    return g->lock->sem ? rmb_release_permit(g->lock, g->permit) : rmb_release(g->lock);
}

void rmb_guard_free(rmb_guard *g)
{
    if (!g)
        return;
    rmb_live_remove(g);
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
    case RMB_QUERY_AVAILABLE:
        return redmutex_semaphore_available(&call->out, NULL, call->lock->sem);
    default:
        return REDMUTEX_EINVAL;
    }
    call->out = flag;
    return rc;
}

int rmb_query_lock(rmb_lock *l, rmb_query what, int64_t arg, int64_t *out)
{
    rmb_call call = {.fn = call_query, .lock = l, .what = what, .arg = arg};
    run(&call, l->client, false);
    if (rmb_check(call.rc) != 0)
        return call.rc;
    if (out)
        *out = call.out;
    return 0;
}
