/*
 * Signals during a wait, for every language (the policy itself, what is done
 * once a wait has ended, is rmb_acquire's in objects.c):
 *
 *   a signal that the language would deliver to a handler ends the wait as
 *   it arrives; the language then runs its handler with nothing held by the
 *   acquire (a hold granted meanwhile is given back first); a handler that
 *   raises is what the acquire raises, and one that returns lets the wait go
 *   on for the time it has left. A SIGINT with the default disposition ends
 *   the wait with InterruptedWait (rather than killing the process while it
 *   holds locks); an ignored signal stays ignored.
 *
 * Interpreters do not run their handlers inside a signal handler: Perl's
 * C handler notes the signal for its next op, Tclx's and Expect's mark a Tcl
 * asynchronous handler, lua.c's sets a hook. A C wait would sleep through all
 * of them. So for as long as at least one interruptible call runs, every
 * signal whose disposition is a handler goes to on_signal below, which calls
 * that handler exactly as the kernel would have (so the language notes the
 * signal as usual), then ends the waits of every waiting client
 * (redmutex_client_interrupt is async-signal-safe and works whichever thread
 * the signal lands on). When the last wait is over, each disposition that is
 * still ours is put back; one that a handler changed meanwhile (lua.c resets
 * SIGINT to the default after the first Ctrl-C) is left as it was set.
 *
 * Ruby delivers its traps to a waiting thread through its unblocking
 * function, from its timer thread, a moment after the signal: on its own
 * that would let a hold granted in between look untouched by the signal.
 * Watching the signals here as well closes that gap.
 */
#define _GNU_SOURCE
#include "binding.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>

/* Clients with a waiting acquire; the handler interrupts them all. */
#define SLOTS 64
static _Atomic(redmutex_client *) waiting[SLOTS];

static atomic_uint handled;   /* signals passed on to a handler during waits */
static atomic_uint stops;     /* SIGINTs with the default disposition caught during waits */
static atomic_int in_handler; /* handlers interrupting clients now, on any thread */
static pthread_mutex_t install_lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned waits; /* interruptible calls in progress; under install_lock */
static struct sigaction previous[NSIG];
static bool taken[NSIG];
static bool left_alone[NSIG]; /* the language's own machinery (rmb_signals_leave) */

/* Signals that report a fault of the thread they hit, or cannot be caught,
   are never taken over: their handlers (sanitizers', the languages' own
   crash reports) must run as they are. */
static bool takeable(int sig)
{
    if (left_alone[sig])
        return false;
    switch (sig) {
    case SIGKILL:
    case SIGSTOP:
    case SIGSEGV:
    case SIGBUS:
    case SIGFPE:
    case SIGILL:
    case SIGTRAP:
    case SIGSYS:
    case SIGABRT:
        return false;
    default:
        return true;
    }
}

static void on_signal(int sig, siginfo_t *info, void *context)
{
    int saved_errno = errno;
    const struct sigaction *p = &previous[sig];
    bool stop = p->sa_handler == SIG_DFL; /* only SIGINT is taken with the default disposition */
    if (!stop && (p->sa_flags & SA_SIGINFO))
        p->sa_sigaction(sig, info, context);
    else if (!stop)
        p->sa_handler(sig);
    atomic_fetch_add(stop ? &stops : &handled, 1);
    atomic_fetch_add(&in_handler, 1);
    for (int i = 0; i < SLOTS; i++) {
        redmutex_client *c = atomic_load(&waiting[i]);
        if (c)
            redmutex_client_interrupt(c);
    }
    atomic_fetch_sub(&in_handler, 1);
    errno = saved_errno;
}

/* Takes over sig if its disposition is a handler, or if it is a SIGINT with
   the default one. Caller holds install_lock. */
static void take(int sig)
{
    struct sigaction cur;
    taken[sig] = false;
    if (!takeable(sig) || sigaction(sig, NULL, &cur) != 0 || cur.sa_handler == SIG_IGN ||
        (cur.sa_handler == SIG_DFL && sig != SIGINT))
        return;
    previous[sig] = cur;
    struct sigaction ours = cur; /* the same mask and flags: SA_RESETHAND and the like keep their meaning */
    ours.sa_sigaction = on_signal;
    ours.sa_flags |= SA_SIGINFO;
    taken[sig] = sigaction(sig, &ours, NULL) == 0;
}

static void give_back(int sig)
{
    struct sigaction cur;
    if (taken[sig] && sigaction(sig, NULL, &cur) == 0 && (cur.sa_flags & SA_SIGINFO) && cur.sa_sigaction == on_signal)
        sigaction(sig, &previous[sig], NULL);
    taken[sig] = false;
}

static void begin(void)
{
    pthread_mutex_lock(&install_lock);
    if (waits++ == 0)
        for (int sig = 1; sig < NSIG; sig++)
            take(sig);
    pthread_mutex_unlock(&install_lock);
}

static void end(void)
{
    pthread_mutex_lock(&install_lock);
    if (--waits == 0)
        for (int sig = 1; sig < NSIG; sig++)
            give_back(sig);
    pthread_mutex_unlock(&install_lock);
}

static int slot_take(redmutex_client *c)
{
    for (int i = 0; i < SLOTS; i++) {
        redmutex_client *expected = NULL;
        if (atomic_compare_exchange_strong(&waiting[i], &expected, c))
            return i;
    }
    return -1; /* more than SLOTS waits at once: this one is not interrupted */
}

/* A handler on another thread may have read the client from its slot just
   before it was cleared; it finishes within microseconds, and the client
   must outlive it. */
static void slot_clear(int slot)
{
    if (slot < 0)
        return;
    atomic_store(&waiting[slot], NULL);
    while (atomic_load(&in_handler) > 0)
        ;
}

void rmb_signals_leave(int sig)
{
    if (sig > 0 && sig < NSIG)
        left_alone[sig] = true;
}

void rmb_signals_watch(rmb_signal_watch *w, rmb_client *client)
{
    begin();
    w->slot = slot_take(client->ptr);
    w->handled = atomic_load(&handled);
    w->stops = atomic_load(&stops);
}

void rmb_signals_unwatch(rmb_signal_watch *w, rmb_call *call)
{
    call->signalled = atomic_load(&handled) != w->handled;
    call->stop = atomic_load(&stops) != w->stops;
    slot_clear(w->slot);
    end();
}

void rmb_signal_run(rmb_call *call, rmb_client *client, bool interruptible)
{
    if (!interruptible) {
        call->rc = call->fn(call);
        call->ran = true;
        return;
    }
    rmb_signal_watch w;
    rmb_signals_watch(&w, client);
    call->rc = call->fn(call);
    call->ran = true;
    rmb_signals_unwatch(&w, call);
}

unsigned rmb_signals_caught(void) { return atomic_load(&handled) + atomic_load(&stops); }
