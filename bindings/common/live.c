/*
 * Live objects and the exit path, for every language.
 *
 * A method's self comes from the language as a pointer that may be anything:
 * NULL (nil, undef), an object the language already freed (Perl's DESTROY
 * called by hand, a Tcl command deleted while its name is still around, a Lua
 * __gc called by hand), or a Tcl pointer string made up by a script. The set
 * of live objects tells a live object of the right class from all of those
 * without reading their memory.
 *
 * The exit path: documentation promises that a script which ends without
 * closing its client releases the locks it still holds. A client freed by
 * the garbage collector is closed in the background, and an exiting process
 * would kill that close half-way (languages free their objects as they exit:
 * Perl's global destruction, Ruby's finalizers, Lua's lua_close), and a
 * client still alive at exit (Tcl) would not be closed at all. So every
 * client not closed by its user is closed here, by one C atexit handler for
 * every language - it runs after the language's own teardown, whatever the
 * way out (the end of the script, exit, an uncaught error) - and the closes
 * of freed clients run on threads of our own, which that handler waits for.
 * _exit() and fatal signals end the process without it, as they must.
 */
#define _GNU_SOURCE
#include "binding.h"

#include <errno.h>
#include <pthread.h>
#include <search.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static void *live;          /* tsearch tree of live objects, by address; under mu */
static rmb_client *clients; /* live clients; under mu */
static pthread_cond_t closes_done = PTHREAD_COND_INITIALIZER;
static unsigned closing; /* closes that an exiting process waits for; under mu */
static pthread_once_t exit_once = PTHREAD_ONCE_INIT;

static int by_address(const void *a, const void *b)
{
    uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
    return (x > y) - (x < y);
}

/* ---- live objects ------------------------------------------------------- */

int rmb_live_add(void *obj, rmb_type type)
{
    *(rmb_type *)obj = type;
    pthread_mutex_lock(&mu);
    bool added = tsearch(obj, &live, by_address) != NULL;
    pthread_mutex_unlock(&mu);
    return added ? 0 : rmb_fail(REDMUTEX_ENOMEM, "out of memory");
}

void rmb_live_remove(void *obj)
{
    pthread_mutex_lock(&mu);
    tdelete(obj, &live, by_address);
    pthread_mutex_unlock(&mu);
}

static const char *type_name(rmb_type type)
{
    return type == RMB_TYPE_CLIENT ? "Client" : type == RMB_TYPE_LOCK ? "Lock" : "Guard";
}

bool rmb_live_is(const void *obj, rmb_type type)
{
    if (!obj)
        return false;
    pthread_mutex_lock(&mu);
    /* The type is read only once the set says the memory is an object's. */
    bool ok = tfind(obj, &live, by_address) && *(const rmb_type *)obj == type;
    pthread_mutex_unlock(&mu);
    return ok;
}

int rmb_self(const void *obj, rmb_type type)
{
    const char *name = type_name(type);
    if (!obj)
        return rmb_fail(REDMUTEX_EINVAL, "a %s method was called on nothing (nil, undef or NULL) instead of a %s", name,
                        name);
    if (!rmb_live_is(obj, type))
        return rmb_fail(REDMUTEX_EINVAL, "this %s was freed (or was never made by redmutex); make a new one", name);
    return 0;
}

/* ---- closes an exiting process waits for -------------------------------- */

static void close_done(void)
{
    pthread_mutex_lock(&mu);
    if (--closing == 0)
        pthread_cond_broadcast(&closes_done);
    pthread_mutex_unlock(&mu);
}

static void *close_and_free(void *client)
{
    redmutex_client_close(client);
    redmutex_client_free(client);
    close_done();
    return NULL;
}

static void *close_only(void *client)
{
    redmutex_client_close(client);
    close_done();
    return NULL;
}

/* Runs fn(client) on a detached thread that exit waits for; false when no
   thread could be made. Caller holds mu. */
static bool start_locked(void *(*fn)(void *), redmutex_client *client)
{
    sigset_t all, old;
    sigfillset(&all);
    /* Signals are for the language's own threads, as with the core's threads. */
    pthread_sigmask(SIG_BLOCK, &all, &old);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_t thread;
    closing++;
    bool started = pthread_create(&thread, &attr, fn, client) == 0;
    if (!started)
        closing--;
    pthread_attr_destroy(&attr);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return started;
}

void rmb_exit_closing(bool begins)
{
    if (begins) {
        pthread_mutex_lock(&mu);
        closing++;
        pthread_mutex_unlock(&mu);
    } else {
        close_done();
    }
}

/* ---- the exit path ------------------------------------------------------ */

static void close_all_at_exit(void)
{
    int saved_errno = errno;
    pthread_mutex_lock(&mu);
    for (rmb_client *c = clients; c; c = c->next_live) {
        /* A reference of our own, never given back: nothing may free the
           client under its close, and the process is ending. At 0 its last
           reference is going, and rmb_exit_free closes it instead. */
        int refs = atomic_load(&c->refs);
        while (refs > 0 && !atomic_compare_exchange_weak(&c->refs, &refs, refs + 1))
            ;
        if (refs > 0 && !atomic_exchange(&c->closed, true) && !start_locked(close_only, c->ptr))
            redmutex_client_close(c->ptr);
    }
    while (closing > 0)
        pthread_cond_wait(&closes_done, &mu);
    pthread_mutex_unlock(&mu);
    errno = saved_errno;
}

static void before_fork(void) { pthread_mutex_lock(&mu); }

static void after_fork_in_parent(void) { pthread_mutex_unlock(&mu); }

/* The child has none of the parent's threads: it waits for no close of
   theirs. Its clients' holds are the parent's, which a close in the child
   leaves alone (the core checks the pid). */
static void after_fork_in_child(void)
{
    closing = 0;
    pthread_cond_init(&closes_done, NULL);
    pthread_mutex_unlock(&mu);
}

static void install_exit_path(void)
{
    atexit(close_all_at_exit);
    pthread_atfork(before_fork, after_fork_in_parent, after_fork_in_child);
}

void rmb_exit_watch(rmb_client *c)
{
    pthread_once(&exit_once, install_exit_path);
    pthread_mutex_lock(&mu);
    c->prev_live = NULL;
    c->next_live = clients;
    if (clients)
        clients->prev_live = c;
    clients = c;
    pthread_mutex_unlock(&mu);
}

void rmb_exit_free(rmb_client *c)
{
    pthread_mutex_lock(&mu);
    if (c->prev_live)
        c->prev_live->next_live = c->next_live;
    else
        clients = c->next_live;
    if (c->next_live)
        c->next_live->prev_live = c->prev_live;
    tdelete(c, &live, by_address);
    bool background = !atomic_load(&c->closed) && start_locked(close_and_free, c->ptr);
    pthread_mutex_unlock(&mu);
    /* Closed already: nothing is left to release. Without a thread of our
       own, the core closes it in the background (an exit may cut that short). */
    if (!background)
        redmutex_client_free(c->ptr);
}
