/*
 * CMD runs in a process group of its own, so that a lost lock can stop
 * everything CMD started (kill(-pgid)), not only CMD itself, and so that
 * redmutex knows when all of it has ended: the lock is held until CMD's
 * group is empty, as flock(1)'s lock is held while any process that
 * inherited it runs. redmutex is the "child subreaper" of what CMD starts,
 * so the processes CMD leaves behind are reaped here when they end, and
 * their zombies never make the group look alive (PID 1 in a container may
 * never reap them).
 *
 * When redmutex runs in the foreground of its terminal, CMD's group gets the
 * terminal, as a shell would give it to a job: CMD can read from it, Ctrl-C
 * reaches it, and Ctrl-Z suspends CMD and redmutex together.
 */
#include "cli.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/*
 * redmutex's controlling terminal (a descriptor of its own), if redmutex's
 * group is its foreground group; else -1. Whatever stdin is: CMD may read
 * the terminal through /dev/tty (less, an editor, a password prompt) with
 * stdin redirected.
 */
static int foreground_tty(void)
{
    int fd = open("/dev/tty", O_RDWR | O_NOCTTY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    pid_t fg = tcgetpgrp(fd);
    if (fg > 0 && fg == getpgrp())
        return fd;
    close(fd);
    return -1;
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
static void exec_child(char *const argv[], char *const envp[], int tty, pid_t parent, const sigset_t *mask, int err_fd,
                       int64_t deadline_ms)
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
    /* The last moment to look: CMD must not start once the lock's validity
       has run out (the parent may have been descheduled since it looked). */
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    int e = ETIME;
    if (!deadline_ms || (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000 < deadline_ms) {
        execvpe(argv[0], argv, envp);
        e = errno;
    }
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

int cli_child_spawn(cli_child *ch, char *const argv[], char *const envp[], int64_t deadline_ms)
{
    int err_pipe[2];
    if (pipe2(err_pipe, O_CLOEXEC)) {
        cli_error("cannot start '%s': %s", argv[0], strerror(errno));
        return CLI_EXIT_OSERR;
    }
    /* Before CMD can start anything: its orphans come here to be reaped. */
    prctl(PR_SET_CHILD_SUBREAPER, 1);
    int tty = foreground_tty();
    pid_t parent = getpid();
    sigset_t old;
    cli_signals_block(&old);
    pid_t pid = fork();
    if (pid == 0) {
        close(err_pipe[0]);
        exec_child(argv, envp, tty, parent, &old, err_pipe[1], deadline_ms);
    }
    int fork_errno = errno;
    if (pid > 0)
        setpgid(pid, pid); /* also here, so that neither side's timing matters */
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    close(err_pipe[1]);
    if (pid < 0) {
        close(err_pipe[0]);
        if (tty >= 0)
            close(tty);
        cli_error("cannot start '%s': %s", argv[0], strerror(fork_errno));
        return CLI_EXIT_OSERR;
    }
    int e = exec_result(err_pipe[0]);
    close(err_pipe[0]);
    memset(ch, 0, sizeof *ch);
    ch->pid = pid;
    ch->tty = tty;
    if (!e)
        return 0;
    reap(pid);
    cli_child_release_terminal(ch);
    if (e == ETIME)
        return CLI_EXIT_LOST; /* the caller says why */
    cli_error("cannot run '%s': %s", argv[0], strerror(e));
    return e == ENOENT || e == ENOTDIR ? CLI_EXIT_NOT_FOUND : CLI_EXIT_CANNOT_EXEC;
}

/*
 * CMD was stopped. A stop by the terminal (Ctrl-Z, or reading it from the
 * background) means the user suspends the job: redmutex hands the terminal
 * back and stops its own process group, as the terminal would have stopped
 * it with CMD in it (redmutex, and the rest of its job: the other commands
 * of a pipeline, a script that runs it without job control), so that the
 * shell sees the job stopped. When it is continued, CMD is not continued here:
 * ch->resume_pending asks the caller to look at the lock first (it was not
 * renewed meanwhile), then cli_child_resume(). Other stops (SIGSTOP from
 * someone) are not redmutex's business.
 */
static void follow_stop(cli_child *ch, int sig)
{
    if (ch->tty < 0 || (sig != SIGTSTP && sig != SIGTTIN && sig != SIGTTOU))
        return;
    if (tcgetpgrp(ch->tty) == ch->pid)
        give_terminal(ch->tty, getpgrp());
    /* In an orphaned process group the kernel discards SIGTSTP, as it does
       for CMD's group: then CMD is simply continued. */
    kill(0, SIGTSTP);
    ch->resume_pending = true;
}

void cli_child_resume(cli_child *ch)
{
    ch->resume_pending = false;
    if (ch->tty >= 0 && tcgetpgrp(ch->tty) == getpgrp())
        give_terminal(ch->tty, ch->pid);
    kill(-ch->pid, SIGCONT);
}

static void ended(cli_child *ch, int st)
{
    ch->ended = true;
    ch->had_terminal = ch->tty >= 0 && tcgetpgrp(ch->tty) == ch->pid;
    ch->signal = WIFSIGNALED(st) ? WTERMSIG(st) : 0;
    ch->status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + ch->signal;
}

bool cli_child_poll(cli_child *ch)
{
    for (;;) {
        int st;
        /* Any child: CMD, or one of its orphans that ended (ours to reap). */
        pid_t r = waitpid(-1, &st, WNOHANG | WUNTRACED);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break; /* nothing more now, or no child left (ECHILD) */
        if (r != ch->pid || ch->ended)
            continue;
        if (WIFSTOPPED(st))
            follow_stop(ch, WSTOPSIG(st));
        else
            ended(ch, st);
    }
    return ch->ended;
}

void cli_child_signal(const cli_child *ch, int sig) { kill(-ch->pid, sig); }

bool cli_child_group_alive(const cli_child *ch) { return kill(-ch->pid, 0) == 0 || errno == EPERM; }

void cli_child_release_terminal(cli_child *ch)
{
    if (ch->tty < 0)
        return;
    /* Only if CMD's group still has it: after `bg` the shell has it, and must keep it. */
    if (tcgetpgrp(ch->tty) == ch->pid)
        give_terminal(ch->tty, getpgrp());
    close(ch->tty);
    ch->tty = -1;
}
