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

/* Waits for the worker to exit within ms (scaled); returns its exit status (-1 if it was killed). */
static inline int proc_wait(pid_t pid, int64_t ms)
{
    int64_t deadline = rt_now_ms() + rt_scaled_ms(ms);
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

/* A client of its own for a worker (after fork: never the parent's); its timeouts are scaled as the tests'
 * bounds. */
static inline redmutex_client *proc_client(const char *url)
{
    redmutex_client_options o;
    redmutex_client_options_init(&o, REDMUTEX_CLIENT_OPTIONS_VERSION);
    o.command_timeout_ms = rt_scaled_ms(o.command_timeout_ms);
    o.connect_timeout_ms = rt_scaled_ms(o.connect_timeout_ms);
    redmutex_client *c = NULL;
    if (redmutex_client_new(&c, &url, 1, &o) != 0) {
        fprintf(stderr, "worker %d: %s\n", (int)getpid(), redmutex_last_error());
        _exit(98);
    }
    return c;
}

/* A worker's client, closed (its threads joined, so valgrind's leak check of the worker is clean) and freed.
 */
static inline void proc_client_done(redmutex_client *c)
{
    redmutex_client_close(c);
    redmutex_client_free(c);
}

/*
 * Rounds of the many-process tests: all of them normally; a quarter when the
 * time scale says the code runs many times slower (valgrind), where the point
 * is the memory check of the same paths.
 */
static inline int proc_rounds(int rounds) { return rt_time_scale() > 1 ? rounds / 4 : rounds; }

#endif
