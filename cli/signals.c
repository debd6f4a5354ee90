/*
 * Signals. The main thread is the only one that takes them: the library's
 * threads block every signal. A handler only records the signal and writes a
 * byte to a pipe (the self-pipe trick), so the main thread learns of signals,
 * of CMD's end (SIGCHLD) and of a lost lock (cli_wake() from the watchdog
 * thread) through one poll()able descriptor.
 *
 * Nothing but redmutex's own exit may end redmutex while it holds a lock:
 * it must be there to stop CMD when the lock is lost and to release it
 * afterwards. So the signals that act on a process for what it writes or
 * where it stands on the terminal are ignored by redmutex itself: SIGPIPE (a
 * closed stderr: the write fails instead) and SIGTTOU, SIGTTIN (while CMD
 * has the terminal, redmutex is in the background; with `stty tostop` a
 * message would stop it, watchdog and all). CMD gets back the dispositions
 * redmutex inherited.
 */
#include "cli.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

static const int forwarded[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2};
#define N_FORWARDED (sizeof forwarded / sizeof forwarded[0])
static const int ignored_here[] = {SIGPIPE, SIGTTOU, SIGTTIN};
#define N_IGNORED_HERE (sizeof ignored_here / sizeof ignored_here[0])

static int wake_pipe[2] = {-1, -1};
static volatile sig_atomic_t arrived[NSIG];
static volatile sig_atomic_t first_forwarded;
static bool caught[NSIG];
static bool inherited_ignored[NSIG]; /* ignored when redmutex started (nohup, `cmd &` in scripts) */
static bool restore_for_cmd[NSIG];   /* ignored here, inherited otherwise: given back to CMD */

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

static bool ignored_now(int sig)
{
    struct sigaction sa;
    return sigaction(sig, NULL, &sa) == 0 && sa.sa_handler == SIG_IGN;
}

static int set_handler(int sig, void (*handler)(int))
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = handler;
    sigemptyset(&sa.sa_mask);
    return sigaction(sig, &sa, NULL);
}

static int catch_signal(int sig, bool unless_ignored)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    if (unless_ignored && inherited_ignored[sig]) {
        /* nohup and `cmd &` in scripts ignore some signals on purpose: keep that. */
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
    for (int sig = 1; sig < NSIG; sig++)
        inherited_ignored[sig] = ignored_now(sig);
    for (size_t i = 0; i < N_FORWARDED; i++)
        if (catch_signal(forwarded[i], true))
            return -1;
    for (size_t i = 0; i < N_IGNORED_HERE; i++) {
        int sig = ignored_here[i];
        restore_for_cmd[sig] = !inherited_ignored[sig];
        if (set_handler(sig, SIG_IGN))
            return -1;
    }
    return catch_signal(SIGCHLD, false);
}

bool cli_signal_inherited_ignored(int sig) { return sig > 0 && sig < NSIG && inherited_ignored[sig]; }

void cli_signals_die_by(int sig, bool whole_group)
{
    /* The core dump of a SIGQUIT would be redmutex's, of no use to anyone:
       CMD, which the user meant, has dumped its own. */
    if (sig == SIGQUIT) {
        struct rlimit none = {0, 0};
        setrlimit(RLIMIT_CORE, &none);
    }
    set_handler(sig, SIG_DFL);
    sigset_t only;
    sigemptyset(&only);
    sigaddset(&only, sig);
    pthread_sigmask(SIG_UNBLOCK, &only, NULL);
    if (whole_group)
        kill(0, sig);
    raise(sig);
}

int cli_wake_fd(void) { return wake_pipe[0]; }

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

int cli_signal_first(void) { return first_forwarded; }

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
        if (caught[sig] || restore_for_cmd[sig])
            sigaction(sig, &sa, NULL);
}
