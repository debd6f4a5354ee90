/*
 * Worker processes for the multi-process tests (fair and read-write locks).
 * A worker is a forked child that runs one function and exits with its
 * result; it dies with the test process. The parent makes no redmutex client
 * (no threads) before it forks, so the tests run under ThreadSanitizer too.
 */
#ifndef REDMUTEX_TEST_PROCS_H
#define REDMUTEX_TEST_PROCS_H

#include "harness.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

/* Forks a worker running fn(arg); its exit status is fn's result (0 = success). */
static inline pid_t proc_start(int (*fn)(void *), void *arg)
{
    pid_t parent = getpid();
    fflush(NULL);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(99);
        _exit(fn(arg));
    }
    return pid;
}

/* Waits for the worker to exit within ms; returns its exit status (-1 if it was killed). */
static inline int proc_wait(pid_t pid, int64_t ms)
{
    int64_t deadline = rt_now_ms() + ms;
    for (;;) {
        int status;
        pid_t r = waitpid(pid, &status, WNOHANG);
        if (r == pid)
            return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
        if (rt_now_ms() > deadline) {
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            rt_fail(__FILE__, __LINE__, "worker %d did not finish within %lld ms", (int)pid, (long long)ms);
        }
        rt_sleep_ms(5);
    }
}

/* A client of its own for a worker (after fork: never the parent's). */
static inline redmutex_client *proc_client(const char *url)
{
    redmutex_client *c = NULL;
    if (redmutex_client_new(&c, &url, 1, NULL) != 0) {
        fprintf(stderr, "worker %d: %s\n", (int)getpid(), redmutex_last_error());
        _exit(98);
    }
    return c;
}

#endif
