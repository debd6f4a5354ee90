/*
 * Ctrl-C during a wait, for interpreters that wait on their own thread
 * (Perl, Tcl, Lua).
 *
 * For as long as at least one acquire is waiting, SIGINT goes to a C handler
 * that ends the waits of every client with a waiting acquire
 * (redmutex_client_interrupt is async-signal-safe and works whichever
 * thread the signal lands on). When the last wait is over, the previous
 * disposition comes back, and if it was a handler - Perl's %SIG dispatcher,
 * lua.c's "interrupted!" hook - the signal is raised again, so the language
 * sees the Ctrl-C exactly as it would have without us. With the default
 * disposition the interrupted acquire raises InterruptedWait instead of the
 * process dying on the spot, so scoped forms on the way out release what
 * they hold. An ignored SIGINT (nohup) stays ignored.
 */
#define _POSIX_C_SOURCE 200809L
#include "binding.h"

#include <pthread.h>
#include <signal.h>
#include <string.h>

/* Clients with a waiting acquire; the handler interrupts them all. */
#define SLOTS 64
static _Atomic(redmutex_client *) waiting[SLOTS];

static atomic_uint caught;
static atomic_int in_handler; /* handlers running now, on any thread */
static pthread_mutex_t install_lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned waits; /* waits in progress; under install_lock */
static bool installed;
static unsigned caught_at_install;
static struct sigaction previous;

static _Thread_local bool seen; /* a SIGINT arrived during this thread's last wait */

static void on_sigint(int sig)
{
    (void)sig;
    atomic_fetch_add(&in_handler, 1);
    atomic_fetch_add(&caught, 1);
    for (int i = 0; i < SLOTS; i++) {
        redmutex_client *c = atomic_load(&waiting[i]);
        if (c)
            redmutex_client_interrupt(c);
    }
    atomic_fetch_sub(&in_handler, 1);
}

static void begin(void)
{
    pthread_mutex_lock(&install_lock);
    if (waits++ == 0) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_sigint;
        sigemptyset(&sa.sa_mask);
        /* Keep an ignored SIGINT ignored; otherwise take it for the wait. */
        installed = sigaction(SIGINT, NULL, &previous) == 0 && previous.sa_handler != SIG_IGN &&
                    sigaction(SIGINT, &sa, NULL) == 0;
        caught_at_install = atomic_load(&caught);
    }
    pthread_mutex_unlock(&install_lock);
}

static void end(void)
{
    bool reraise = false;
    pthread_mutex_lock(&install_lock);
    if (--waits == 0 && installed) {
        sigaction(SIGINT, &previous, NULL);
        installed = false;
        reraise = atomic_load(&caught) != caught_at_install && previous.sa_handler != SIG_DFL;
    }
    pthread_mutex_unlock(&install_lock);
    if (reraise)
        raise(SIGINT); /* to the language's own handler, now back in place */
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

static void run(rmb_call *call, rmb_client *client, bool interruptible)
{
    if (!interruptible) {
        call->rc = call->fn(call);
        call->ran = true;
        return;
    }
    begin();
    int slot = slot_take(client->ptr);
    unsigned before = atomic_load(&caught);
    call->rc = call->fn(call);
    call->ran = true;
    seen = atomic_load(&caught) != before;
    slot_clear(slot);
    end();
}

static bool was_interrupted(void)
{
    return seen;
}

const rmb_policy rmb_signal_policy = {run, was_interrupted, false};

unsigned rmb_signals_caught(void)
{
    return atomic_load(&caught);
}
