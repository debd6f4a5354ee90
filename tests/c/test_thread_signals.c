/*
 * The library's threads (watchdog, subscriber, background close) never run
 * the host's signal handlers: they start with every signal blocked. Blocking
 * them first thing in the thread is too late - a signal that arrives
 * between the thread's birth and that call may be handed to it, and a
 * handler that only works on the host's own threads (Perl's, which needs its
 * interpreter's context) crashes there. So the mask must already be in
 * place when the thread is created: it inherits its creator's.
 *
 * This binary is linked with -Wl,--wrap=pthread_create: every thread the
 * library creates is checked, at its creation, for the mask it will start
 * with. The calling thread itself has every signal unblocked.
 */
#define _GNU_SOURCE
#include "harness.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>

static rs_server srv;

static atomic_int created;     /* threads created while checking */
static atomic_int unprotected; /* ... of which some could get a signal at birth */
static atomic_bool checking;
static _Atomic int first_unblocked;

int __real_pthread_create(pthread_t *thread, const pthread_attr_t *attr, void *(*fn)(void *), void *arg);
int __wrap_pthread_create(pthread_t *thread, const pthread_attr_t *attr, void *(*fn)(void *), void *arg);

int __wrap_pthread_create(pthread_t *thread, const pthread_attr_t *attr, void *(*fn)(void *), void *arg)
{
    if (atomic_load(&checking)) {
        sigset_t mask;
        pthread_sigmask(SIG_BLOCK, NULL, &mask);
        atomic_fetch_add(&created, 1);
        /* Every signal a host may handle; glibc keeps two real-time signals for itself. */
        for (int sig = 1; sig < NSIG; sig++) {
            if (sig == SIGKILL || sig == SIGSTOP || (sig > SIGSYS && sig < SIGRTMIN))
                continue;
            if (!sigismember(&mask, sig)) {
                atomic_fetch_add(&unprotected, 1);
                int none = 0;
                atomic_compare_exchange_strong(&first_unblocked, &none, sig);
                break;
            }
        }
    }
    return __real_pthread_create(thread, attr, fn, arg);
}

static void test_library_threads_start_with_every_signal_blocked(void)
{
    rs_start(&srv, NULL);
    sigset_t none;
    sigemptyset(&none);
    CHECK(pthread_sigmask(SIG_SETMASK, &none, NULL) == 0);
    atomic_store(&checking, true);

    /* The watchdog: a hold without a lease. */
    redmutex_client *c = rt_client(&srv, 0);
    redmutex_lock *held;
    CHECK_OK(redmutex_lock_new(&held, c, "sig:held", REDMUTEX_KIND_RLOCK, NULL));
    CHECK_OK(redmutex_lock_acquire(held, NULL, 0));

    /* The subscriber: another client waits for that lock. */
    redmutex_client *other = rt_client(&srv, 0);
    redmutex_lock *waiter;
    CHECK_OK(redmutex_lock_new(&waiter, other, "sig:held", REDMUTEX_KIND_RLOCK, NULL));
    CHECK(redmutex_lock_acquire(waiter, NULL, 200) == REDMUTEX_ETIMEDOUT);
    redmutex_lock_free(waiter);
    CHECK_OK(redmutex_client_close(other));
    redmutex_client_free(other);

    /* The background close: a client freed while it holds a lock. */
    redmutex_lock_free(held);
    redmutex_client_free(c);
    WAIT_FOR(!rs_exists(&srv, "sig:held"), 5000);

    atomic_store(&checking, false);
    printf("     %d threads created, %d could get a signal at birth (first: %d)\n", atomic_load(&created),
           atomic_load(&unprotected), atomic_load(&first_unblocked));
    CHECK(atomic_load(&created) >= 3);
    CHECK(atomic_load(&unprotected) == 0);
    rs_stop(&srv);
}

int main(int argc, char **argv)
{
    static const rt_test tests[] = {
        {"library_threads_start_with_every_signal_blocked", test_library_threads_start_with_every_signal_blocked},
    };
    return rt_run(tests, sizeof tests / sizeof tests[0], argc, argv);
}
