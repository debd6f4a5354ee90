/*
 * Lifetimes of clients and lock handles, made for garbage collectors: they
 * may be freed in any order, from any thread, and freeing never blocks.
 *
 *  - Reference counts. A client is referenced by its user (until
 *    redmutex_client_free), by every lock handle whose memory is alive and by
 *    each of its background threads. A handle is referenced by its user
 *    (until redmutex_lock_free), by each of its holds, and while the library
 *    works with it on another thread (a callback running, a shutdown
 *    releasing it). Memory goes when the last reference does.
 *  - Close and free (SQLite's close_v2 model). redmutex_client_close() does
 *    the blocking part: release held locks, stop renewals and waits, join the
 *    threads, all within shutdown_timeout_ms. redmutex_client_free() only
 *    drops the user's reference; a client not closed yet is closed by a
 *    short-lived background thread.
 *  - Orphans. A handle freed while it still holds a lock leaves its holds to
 *    the client: they are no longer renewed and nobody hears of them again,
 *    but a close before they expire still releases them (the lock is then
 *    free at once, not after its lease). At the end of its validity an
 *    orphan is dropped by the watchdog.
 */
#define _GNU_SOURCE
#include "client.h"
#include "conn.h"
#include "events.h"
#include "handle.h"
#include "holds.h"
#include "internal.h"
#include "interrupt.h"
#include "lifetime.h"
#include "lockops.h"
#include "sentinel.h"
#include "subscriber.h"
#include "watchdog.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

void rm_lock_unref_locked(redmutex_client *c, redmutex_lock *l)
{
    if (--l->refs > 0)
        return;
    free(l);
    /* The handle's reference to the client. Never the last one: whoever runs
       this (a call on another handle, the watchdog, a closing thread) holds
       a reference of its own. */
    c->life.refs--;
}

/* ---- closing ------------------------------------------------------------ */

/* Drops orphaned holds nobody else is working on. Caller holds c->mu and a client reference. */
void rm_orphans_drop_locked(redmutex_client *c)
{
    for (rm_hold *h = c->holds.all, *next; h; h = next) {
        next = h->next_in_client;
        if (h->orphan && !h->busy && !h->renewing && !h->forgetting) {
            rm_watchdog_cancel(c, h); /* not renewing: does not wait */
            rm_hold_destroy(c, h);
        }
    }
}

static void shut_down(redmutex_client *c, int64_t deadline_ns, bool release)
{
    rm_interrupt_wake_all(c); /* waits of other threads end with ECLOSED */
    if (release && !(c->opts.flags & REDMUTEX_CLIENT_LEAVE_LOCKS_ON_FREE))
        rm_release_all(c, deadline_ns);
    rm_watchdog_stop(c, deadline_ns);
    rm_subscriber_stop(c, deadline_ns);
    rm_watch_stop(c, deadline_ns);
    rm_client_lock(c);
    c->life.shut_down = true;
    rm_orphans_drop_locked(c);
    /* Idle connections are of no further use. */
    for (size_t i = 0; i < c->n; i++) {
        rm_server *srv = &c->pool.servers[i];
        for (size_t k = 0; k < srv->n_idle; k++)
            rm_conn_close(srv->idle[k]);
        srv->n_idle = 0;
        /* Owing connections stay until the last reference goes: a call may
           still have one lent, and their requests are on their way anyway. */
    }
    rm_client_unlock(c);
}

static bool in_own_callback(redmutex_client *c)
{
    return c->life.callback_lock && pthread_equal(c->life.callback_thread, pthread_self());
}

int redmutex_client_close(redmutex_client *c)
{
    rm_err err;
    rm_err_reset(&err);
    if (!c)
        return rm_publish(&err, rm_fail(&err, REDMUTEX_EINVAL, "redmutex_client_close: client is NULL"));
    rm_client_lock(c);
    bool refused = in_own_callback(c);
    bool already = c->life.closed;
    if (!refused)
        c->life.closed = true;
    rm_client_unlock(c);
    if (refused)
        return rm_publish(&err, rm_fail(&err, REDMUTEX_EINVAL,
                                        "redmutex_client_close cannot run in a lost-lock callback (it waits for "
                                        "the thread running the callback); use redmutex_client_free, which "
                                        "closes in the background"));
    if (!already)
        shut_down(c, rm_deadline_after_ms(c->opts.shutdown_timeout_ms), true);
    return 0;
}

static void *closer_main(void *arg)
{
    redmutex_client *c = arg;
    shut_down(c, rm_deadline_after_ms(c->opts.shutdown_timeout_ms), true);
    rm_client_unref(c);
    return NULL;
}

void redmutex_client_free(redmutex_client *c)
{
    if (!c)
        return;
    rm_client_lock(c);
    bool already = c->life.closed;
    c->life.closed = true;
    /* Without holds or threads there is nothing to wait for: close here. */
    bool background = !already && (c->holds.all || c->holds.wd || c->sub);
    if (background)
        c->life.refs++; /* the closing thread's */
    rm_client_unlock(c);
    if (background) {
        pthread_attr_t attr;
        pthread_t thread;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        int started = rm_thread_start(&thread, &attr, closer_main, c);
        pthread_attr_destroy(&attr);
        if (started != 0) {
            /* No thread to release them: the locks are left to expire, and
               the background threads are told to stop without waiting. */
            shut_down(c, rm_now_ns(), false);
            rm_client_unref(c);
        }
    } else if (!already) {
        shut_down(c, rm_now_ns(), true);
    }
    rm_client_unref(c);
}

/* ---- lock handles --------------------------------------------------------- */

/*
 * What becomes of a hold when its handle is freed. Caller holds c->mu; the
 * handle's user reference is still counted.
 */
static void settle_hold_of_freed_handle(redmutex_client *c, rm_hold *h) RM_REQUIRES(c->mu)
{
    if (h->busy || h->renewing || h->forgetting) {
        /* Another thread is working on it; whatever survives that is an orphan. */
        h->orphan = true;
        h->renew_stopped = true;
        return;
    }
    rm_holds_catch_up_locked(c); /* a restart the pool recorded may have lost it */
    bool held = h->state != REDMUTEX_STATE_LOST && rm_now_ns() < h->validity_end_ns;
    /* A close that is still to release holds (it may have begun) releases this one too. */
    if (held && !c->life.shut_down && h->pid == getpid()) {
        h->orphan = true;
        h->renew_stopped = true;
        rm_watchdog_schedule(NULL, c, h); /* expiry at the end of validity; failing that, the close */
        return;
    }
    rm_watchdog_cancel(c, h); /* not renewing: does not wait */
    rm_hold_destroy(c, h);
}

void redmutex_lock_free(redmutex_lock *l)
{
    if (!l)
        return;
    redmutex_client *c = l->c;
    rm_client_lock(c);
    /* A callback of this handle running on another thread may still use it:
       let it finish. Freed from inside its own callback, the handle stays
       valid until that callback returns (the callback holds a reference). */
    while (c->life.callback_lock == l && !pthread_equal(c->life.callback_thread, pthread_self()))
        pthread_cond_wait(&c->holds.renew_done, &c->mu);
    rm_events_forget_lock(c, l);
    for (rm_hold *h = l->holds, *next; h; h = next) {
        next = h->next_in_lock;
        settle_hold_of_freed_handle(c, h);
    }
    bool last = --l->refs == 0;
    rm_client_unlock(c);
    if (last) {
        free(l);
        rm_client_unref(c);
    }
}
