/*
 * CMD runs in a process group of its own, so that a lost lock can stop
 * everything CMD started (kill(-pgid)), not only CMD itself. When redmutex
 * runs in the foreground of a terminal, that group also gets the terminal,
 * as a shell would give it to a job: CMD can read from it, Ctrl-C reaches it,
 * and Ctrl-Z suspends CMD and redmutex together.
 */
#include "cli.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

/* redmutex's stdin, if it is a terminal whose foreground group is redmutex's own; else -1. */
static int foreground_tty(void)
{
    if (!isatty(STDIN_FILENO))
        return -1;
    pid_t fg = tcgetpgrp(STDIN_FILENO);
    return fg > 0 && fg == getpgrp() ? STDIN_FILENO : -1;
}

/* tcsetpgrp() from a background group raises SIGTTOU unless it is blocked. */
static void give_terminal(int tty, pid_t pgrp)
{
    sigset_t ttou, old;
    sigemptyset(&ttou);
    sigaddset(&ttou, SIGTTOU);
    pthread_sigmask(SIG_BLOCK, &ttou, &old);
    tcsetpgrp(tty, pgrp);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
}

/*
 * The child between fork() and exec(): the parent has threads, so only
 * async-signal-safe calls. Every signal is blocked on entry.
 */
static void exec_child(char *const argv[], char *const envp[], int tty, pid_t parent, const sigset_t *mask,
                       int err_fd)
{
    setpgid(0, 0);
    if (tty >= 0)
        tcsetpgrp(tty, getpid());
    /* If redmutex dies (SIGKILL, OOM), its lock ends with the lease: CMD must
       not go on as if it held it. The check closes the race with a parent
       that died before the prctl. */
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent)
        _exit(128 + SIGTERM);
    cli_signals_child_defaults();
    sigprocmask(SIG_SETMASK, mask, NULL);
    execvpe(argv[0], argv, envp);
    int e = errno;
    ssize_t ignored = write(err_fd, &e, sizeof e);
    (void)ignored;
    _exit(CLI_EXIT_NOT_FOUND);
}

static void reap(pid_t pid)
{
    while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
        ;
}

/* Waits until CMD has exec'd (0) or reports why it could not (an errno). */
static int exec_result(int err_fd)
{
    int e = 0;
    ssize_t n;
    do
        n = read(err_fd, &e, sizeof e);
    while (n < 0 && errno == EINTR);
    return n == (ssize_t)sizeof e ? e : 0;
}

int cli_child_spawn(cli_child *ch, char *const argv[], char *const envp[])
{
    int err_pipe[2];
    if (pipe2(err_pipe, O_CLOEXEC)) {
        cli_error("cannot start '%s': %s", argv[0], strerror(errno));
        return CLI_EXIT_OSERR;
    }
    int tty = foreground_tty();
    pid_t parent = getpid();
    sigset_t old;
    cli_signals_block(&old);
    pid_t pid = fork();
    if (pid == 0) {
        close(err_pipe[0]);
        exec_child(argv, envp, tty, parent, &old, err_pipe[1]);
    }
    int fork_errno = errno;
    if (pid > 0)
        setpgid(pid, pid); /* also here, so that neither side's timing matters */
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    close(err_pipe[1]);
    if (pid < 0) {
        close(err_pipe[0]);
        cli_error("cannot start '%s': %s", argv[0], strerror(fork_errno));
        return CLI_EXIT_OSERR;
    }
    int e = exec_result(err_pipe[0]);
    close(err_pipe[0]);
    ch->pid = pid;
    ch->tty = tty;
    if (!e)
        return 0;
    reap(pid);
    cli_child_release_terminal(ch);
    cli_error("cannot run '%s': %s", argv[0], strerror(e));
    return e == ENOENT || e == ENOTDIR ? CLI_EXIT_NOT_FOUND : CLI_EXIT_CANNOT_EXEC;
}

/*
 * CMD was stopped. A stop by the terminal (Ctrl-Z, or reading it from the
 * background) means the user suspends the job: redmutex hands the terminal
 * back, stops itself the same way, and when it is continued continues CMD
 * (with the terminal again if it is back in the foreground). Other stops
 * (SIGSTOP from someone) are not redmutex's business.
 */
static void follow_stop(cli_child *ch, int sig)
{
    if (ch->tty < 0 || (sig != SIGTSTP && sig != SIGTTIN && sig != SIGTTOU))
        return;
    if (tcgetpgrp(ch->tty) == ch->pid)
        give_terminal(ch->tty, getpgrp());
    /* In an orphaned process group the kernel discards SIGTSTP, as it does
       for CMD's group: then CMD is simply continued. */
    raise(SIGTSTP);
    if (tcgetpgrp(ch->tty) == getpgrp())
        give_terminal(ch->tty, ch->pid);
    kill(-ch->pid, SIGCONT);
}

int cli_child_poll(cli_child *ch, int *status)
{
    for (;;) {
        int st;
        pid_t r = waitpid(ch->pid, &st, WNOHANG | WUNTRACED);
        if (r == 0)
            return 0;
        if (r < 0) {
            if (errno == EINTR)
                continue;
            cli_error("waiting for CMD: %s", strerror(errno));
            *status = CLI_EXIT_SOFTWARE;
            return 1;
        }
        if (WIFEXITED(st)) {
            *status = WEXITSTATUS(st);
            return 1;
        }
        if (WIFSIGNALED(st)) {
            *status = 128 + WTERMSIG(st);
            return 1;
        }
        if (WIFSTOPPED(st))
            follow_stop(ch, WSTOPSIG(st));
    }
}

void cli_child_signal(const cli_child *ch, int sig)
{
    kill(-ch->pid, sig);
}

bool cli_child_group_alive(const cli_child *ch)
{
    return kill(-ch->pid, 0) == 0 || errno == EPERM;
}

void cli_child_release_terminal(cli_child *ch)
{
    /* Only if CMD's group still has it: after `bg` the shell has it, and must keep it. */
    if (ch->tty >= 0 && tcgetpgrp(ch->tty) == ch->pid)
        give_terminal(ch->tty, getpgrp());
    ch->tty = -1;
}
