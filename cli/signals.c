/*
 * Signals. The main thread is the only one that takes them: the library's
 * threads block every signal. A handler only records the signal and writes a
 * byte to a pipe (the self-pipe trick), so the main thread learns of signals,
 * of CMD's end (SIGCHLD) and of a lost lock (cli_wake() from the watchdog
 * thread) through one poll()able descriptor.
 */
#include "cli.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

static const int forwarded[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2};
#define N_FORWARDED (sizeof forwarded / sizeof forwarded[0])

static int wake_pipe[2] = {-1, -1};
static volatile sig_atomic_t arrived[NSIG];
static volatile sig_atomic_t first_forwarded;
static bool caught[NSIG];

void cli_wake(void)
{
    int saved = errno;
    char byte = 0;
    /* A full pipe already wakes the reader: a failed write loses nothing. */
    ssize_t ignored = write(wake_pipe[1], &byte, 1);
    (void)ignored;
    errno = saved;
}

static void on_signal(int sig)
{
    arrived[sig] = 1;
    if (sig != SIGCHLD && !first_forwarded)
        first_forwarded = sig;
    cli_wake();
}

static int catch_signal(int sig, bool unless_ignored)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    if (unless_ignored) {
        /* nohup and `cmd &` in scripts ignore some signals on purpose: keep that. */
        if (sigaction(sig, NULL, &sa) == 0 && sa.sa_handler == SIG_IGN)
            return 0;
    }
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    /* No SA_RESTART: a signal must end the pause of a lock wait (EINTR). No
       SA_NOCLDSTOP: job control needs to know when CMD stops. */
    sa.sa_flags = 0;
    if (sigaction(sig, &sa, NULL))
        return -1;
    caught[sig] = true;
    return 0;
}

int cli_signals_install(void)
{
    if (pipe2(wake_pipe, O_CLOEXEC | O_NONBLOCK))
        return -1;
    for (size_t i = 0; i < N_FORWARDED; i++)
        if (catch_signal(forwarded[i], true))
            return -1;
    return catch_signal(SIGCHLD, false);
}

int cli_wake_fd(void)
{
    return wake_pipe[0];
}

void cli_wake_drain(void)
{
    char buf[64];
    while (read(wake_pipe[0], buf, sizeof buf) > 0)
        ;
}

int cli_signal_take(void)
{
    for (int sig = 1; sig < NSIG; sig++)
        if (arrived[sig]) {
            arrived[sig] = 0;
            return sig;
        }
    return 0;
}

int cli_signal_first(void)
{
    return first_forwarded;
}

void cli_signals_block(sigset_t *old)
{
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, old);
}

void cli_signals_child_defaults(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = SIG_DFL;
    sigemptyset(&sa.sa_mask);
    for (int sig = 1; sig < NSIG; sig++)
        if (caught[sig])
            sigaction(sig, &sa, NULL);
}
