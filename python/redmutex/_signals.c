/*
 * Ctrl-C for waits that run with the GIL released.
 *
 * A blocking acquire runs in C without the GIL. When SIGINT arrives,
 * Python's own C-level handler only notes it; the KeyboardInterrupt is
 * raised later, by the main thread, once it runs Python code again. The main
 * thread is inside redmutex_lock_acquire() and the signal may well have been
 * delivered to another thread, so nothing would wake the wait.
 *
 * This handler is chained in front of Python's: it calls the previous
 * handler first (Python notes the signal), then redmutex_client_interrupt()
 * for the client of every wait the main thread has in progress. The wait
 * returns REDMUTEX_EINTR at once; the Python layer runs the pending signal
 * handlers and either raises what they raise or waits on (PEP 475).
 *
 * Everything the handler touches is async-signal-safe: atomics, and
 * redmutex_client_interrupt(), which is documented to be.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>

#include "redmutex.h"

/* Waits in progress that a signal should end (Python's main thread only). */
#define RMPY_SLOTS 64
static redmutex_client *_Atomic waiting[RMPY_SLOTS];
static atomic_int handlers_running;

static struct sigaction previous[NSIG];
static pthread_mutex_t install_mu = PTHREAD_MUTEX_INITIALIZER;

static void on_signal(int sig, siginfo_t *info, void *ctx)
{
    int saved_errno = errno;
    /* Python first: its handler must have noted the signal before the wait
       it ends returns and looks for pending handlers. */
    const struct sigaction *prev = &previous[sig];
    if (prev->sa_flags & SA_SIGINFO) {
        if (prev->sa_sigaction)
            prev->sa_sigaction(sig, info, ctx);
    } else if (prev->sa_handler != SIG_DFL && prev->sa_handler != SIG_IGN) {
        prev->sa_handler(sig);
    }
    atomic_fetch_add(&handlers_running, 1);
    for (int i = 0; i < RMPY_SLOTS; i++) {
        redmutex_client *c = atomic_load(&waiting[i]);
        if (c)
            redmutex_client_interrupt(c);
    }
    atomic_fetch_sub(&handlers_running, 1);
    errno = saved_errno;
}

/* 1 if our handler is installed for sig now. */
int rmpy_signal_chained(int sig)
{
    struct sigaction cur;
    if (sig <= 0 || sig >= NSIG || sigaction(sig, NULL, &cur) != 0)
        return 0;
    return (cur.sa_flags & SA_SIGINFO) && cur.sa_sigaction == on_signal;
}

/*
 * Puts the interrupting handler in front of the one installed for sig (the
 * Python signal module reinstalls its own whenever signal.signal() is
 * called, so callers check before every wait). Signals that are ignored or
 * have their default action are left alone: nothing in Python would run.
 * Returns 1 when chained, 0 when left alone, -1 on error.
 */
int rmpy_signal_chain(int sig)
{
    if (sig <= 0 || sig >= NSIG)
        return -1;
    pthread_mutex_lock(&install_mu);
    int rc = 1;
    struct sigaction cur;
    if (sigaction(sig, NULL, &cur) != 0) {
        rc = -1;
    } else if ((cur.sa_flags & SA_SIGINFO) && cur.sa_sigaction == on_signal) {
        rc = 1;
    } else if (!(cur.sa_flags & SA_SIGINFO) && (cur.sa_handler == SIG_DFL || cur.sa_handler == SIG_IGN)) {
        rc = 0;
    } else {
        previous[sig] = cur;
        struct sigaction act = cur;
        act.sa_sigaction = on_signal;
        act.sa_flags = (cur.sa_flags | SA_SIGINFO) & ~(int)SA_RESETHAND;
        rc = sigaction(sig, &act, NULL) == 0 ? 1 : -1;
    }
    pthread_mutex_unlock(&install_mu);
    return rc;
}

/* The signals whose Python handlers commonly raise; any of them with a handler ends the waits. */
static const int chained_signals[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGALRM};

/*
 * Registers a wait of the main thread on `client`, after putting the handler
 * in front of every signal of chained_signals that has one (Python puts its
 * own back whenever signal.signal() is called, so this is checked before
 * every wait: one sigaction() query per signal). Returns a slot number, or
 * -1 if all are taken.
 */
int rmpy_wait_begin(redmutex_client *client)
{
    for (size_t k = 0; k < sizeof chained_signals / sizeof chained_signals[0]; k++)
        if (!rmpy_signal_chained(chained_signals[k]))
            rmpy_signal_chain(chained_signals[k]);
    for (int i = 0; i < RMPY_SLOTS; i++) {
        redmutex_client *expected = NULL;
        if (atomic_compare_exchange_strong(&waiting[i], &expected, client))
            return i;
    }
    return -1;
}

/* Ends the registration. A handler on another thread may have read the slot
   just before: it is let finish, so the client is never interrupted after
   its owner may free it. */
void rmpy_wait_end(int slot)
{
    if (slot < 0 || slot >= RMPY_SLOTS)
        return;
    atomic_store(&waiting[slot], NULL);
    while (atomic_load(&handlers_running) > 0)
        sched_yield();
}

/*
 * A blocking acquire for the Python layer: registers the wait of the main
 * thread (interruptible), runs it, ends the registration, and stores the
 * result in *rc before returning. A signal handler that raises does so as
 * this call returns, before Python code could read a return value; *rc,
 * written first, still tells the Python layer whether the lock was won and
 * must be given back (see Lock._acquire_ms).
 */
void rmpy_acquire(redmutex_client *client, redmutex_lock *lock, const char *owner, int64_t wait_ms,
                  int interruptible, int *rc)
{
    int slot = interruptible ? rmpy_wait_begin(client) : -1;
    *rc = redmutex_lock_acquire(lock, owner, wait_ms);
    rmpy_wait_end(slot);
}

/* The same for a semaphore's acquisition (out: its permit id), a
   multi-lock's and a latch's wait. */
void rmpy_semaphore_acquire(redmutex_client *client, char *out, size_t size, redmutex_semaphore *sem,
                            int64_t permits, int64_t wait_ms, int interruptible, int *rc)
{
    int slot = interruptible ? rmpy_wait_begin(client) : -1;
    *rc = redmutex_semaphore_acquire(out, size, sem, permits, wait_ms);
    rmpy_wait_end(slot);
}

void rmpy_multi_lock_acquire(redmutex_client *client, redmutex_multi_lock *multi, const char *owner, int64_t wait_ms,
                             int interruptible, int *rc)
{
    int slot = interruptible ? rmpy_wait_begin(client) : -1;
    *rc = redmutex_multi_lock_acquire(multi, owner, wait_ms);
    rmpy_wait_end(slot);
}

void rmpy_latch_wait(redmutex_client *client, redmutex_latch *latch, int64_t wait_ms, int interruptible, int *rc)
{
    int slot = interruptible ? rmpy_wait_begin(client) : -1;
    *rc = redmutex_latch_wait(latch, wait_ms);
    rmpy_wait_end(slot);
}
