/*
 * redmutex run: hold a lock (or, with --permits N, one permit of an
 * N-permit semaphore: GNU sem for a fleet) while a command runs.
 *
 * The main thread acquires the lock, starts CMD and then sleeps in poll() on
 * one wake-up pipe. Three things write to it: signal handlers (a signal to
 * forward, or SIGCHLD), and the lock's on_lost callback, which runs on the
 * library's watchdog thread and does nothing else, so that all decisions
 * (forwarding, SIGTERM/SIGKILL on a lost lock, the exit status) are taken on
 * the main thread.
 */
#include "cli.h"

#include <errno.h>
#include <getopt.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define DEFAULT_KILL_AFTER_MS 10000
/* The shortest --lease: the library takes 10 ms, but CMD has to be started
   under the lock (fork, exec, the dynamic loader) before the lease ends, and
   that takes milliseconds, more on a loaded host. */
#define LEASE_MIN_MS 100

extern char **environ;

typedef struct run_opts {
    cli_servers servers;
    int64_t lease_ms; /* 0: the watchdog renews the lease */
    int64_t wait_ms;  /* REDMUTEX_WAIT_FOREVER, or how long to wait (0 = -n) */
    bool wait_given, nonblock;
    int conflict_exit;     /* -E */
    int64_t kill_after_ms; /* SIGTERM -> SIGKILL grace after a lost lock */
    const char *fence_env;
    redmutex_kind kind;
    bool kind_given;
    int64_t permits; /* --permits N: a semaphore's permit instead of a lock; 0 = a lock */
    const char *name;
    char **cmd;
} run_opts;

typedef struct run_ctx {
    run_opts o;
    redmutex_client *client;
    redmutex_lock *lock; /* the lock, or (--permits) NULL and: */
    redmutex_semaphore *sem;
    char permit[REDMUTEX_PERMIT_ID_SIZE]; /* the permit held ("" while none) */
    const char *what;                     /* "lock" or "semaphore", for messages */
    cli_child child;
    atomic_int news; /* the last state on_lost reported, or -1 */
    int reported;    /* the last state reported on stderr */
    bool lost;
    bool stop_asked;     /* a signal that asks a job to stop was forwarded */
    int64_t kill_at;     /* CLOCK_MONOTONIC ms when SIGKILL goes to CMD's group; 0 = none pending */
    bool killed;         /* SIGKILL was sent */
    int die_by;          /* redmutex ends by this signal, once the lock is released; 0 = by its exit status */
    bool die_with_group; /* and sends it to its whole process group */
} run_ctx;

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- arguments ---------------------------------------------------------- */

enum { OPT_LEASE = 256, OPT_WAIT, OPT_KILL_AFTER, OPT_FENCE_ENV, OPT_KIND, OPT_PERMITS };

static const struct option run_options[] = {{"url", required_argument, NULL, 'u'},
                                            {"lease", required_argument, NULL, OPT_LEASE},
                                            {"wait", required_argument, NULL, OPT_WAIT},
                                            {"nonblock", no_argument, NULL, 'n'},
                                            {"conflict-exit-code", required_argument, NULL, 'E'},
                                            {"kill-after", required_argument, NULL, OPT_KILL_AFTER},
                                            {"fence-env", required_argument, NULL, OPT_FENCE_ENV},
                                            {"kind", required_argument, NULL, OPT_KIND},
                                            {"permits", required_argument, NULL, OPT_PERMITS},
                                            {"help", no_argument, NULL, 'h'},
                                            {NULL, 0, NULL, 0}};

/* One option; 0, or an exit status (-1: --help was printed). */
static int run_option(run_opts *o, int c, const char *arg)
{
    switch (c) {
    case 'u':
        return cli_servers_add(&o->servers, arg);
    case OPT_LEASE:
        if (cli_parse_seconds(&o->lease_ms, arg))
            return cli_usage_error("--lease needs a number of seconds (at most %lld), not '%s'", CLI_SECONDS_MAX, arg);
        if (o->lease_ms < LEASE_MIN_MS)
            return cli_usage_error("--lease must be at least %g seconds (to start the command under the lock), not "
                                   "'%s'",
                                   LEASE_MIN_MS / 1000.0, arg);
        return 0;
    case OPT_WAIT:
        if (cli_parse_seconds(&o->wait_ms, arg))
            return cli_usage_error("--wait needs a number of seconds >= 0 (at most %lld), not '%s'", CLI_SECONDS_MAX,
                                   arg);
        o->wait_given = true;
        return 0;
    case 'n':
        o->nonblock = true;
        return 0;
    case 'E':
        if (cli_parse_exit_code(&o->conflict_exit, arg))
            return cli_usage_error("-E needs an exit status from 0 to 255, not '%s'", arg);
        return 0;
    case OPT_KILL_AFTER:
        if (cli_parse_seconds(&o->kill_after_ms, arg))
            return cli_usage_error("--kill-after needs a number of seconds >= 0 (at most %lld), not '%s'",
                                   CLI_SECONDS_MAX, arg);
        return 0;
    case OPT_FENCE_ENV:
        if (!cli_valid_env_name(arg))
            return cli_usage_error("--fence-env needs a variable name ([A-Za-z_][A-Za-z0-9_]*), not '%s'", arg);
        o->fence_env = arg;
        return 0;
    case OPT_KIND:
        if (strcmp(arg, "lock") && strcmp(arg, "rlock"))
            return cli_usage_error("--kind is 'lock' or 'rlock', not '%s'", arg);
        o->kind = strcmp(arg, "lock") ? REDMUTEX_KIND_RLOCK : REDMUTEX_KIND_LOCK;
        o->kind_given = true;
        return 0;
    case OPT_PERMITS: {
        char *end;
        errno = 0;
        long long n = strtoll(arg, &end, 10);
        if (errno || end == arg || *end || n < 1 || n > REDMUTEX_SEMAPHORE_PERMITS_MAX)
            return cli_usage_error("--permits needs a whole number from 1 to %lld, not '%s'",
                                   (long long)REDMUTEX_SEMAPHORE_PERMITS_MAX, arg);
        o->permits = n;
        return 0;
    }
    default:
        return CLI_EXIT_SOFTWARE; /* an option in run_options without a case here */
    }
}

/*
 * redmutex run [options] NAME -- CMD [ARG]...: options and NAME may come in
 * any order before "--"; everything after it is CMD, never parsed.
 */
static int parse_run(run_opts *o, int argc, char **argv)
{
    int dashdash = 1;
    while (dashdash < argc && strcmp(argv[dashdash], "--"))
        dashdash++;
    o->wait_ms = REDMUTEX_WAIT_FOREVER;
    o->conflict_exit = CLI_EXIT_TEMPFAIL;
    o->kill_after_ms = DEFAULT_KILL_AFTER_MS;
    o->kind = REDMUTEX_KIND_LOCK;
    opterr = 0;
    optind = 1;
    int c;
    while ((c = getopt_long(dashdash, argv, ":u:nE:h", run_options, NULL)) != -1) {
        if (c == 'h') {
            cli_print_help();
            return -1;
        }
        int rc = c == '?' || c == ':' ? cli_bad_option(c, argv, optind) : run_option(o, c, optarg);
        if (rc)
            return rc;
    }
    if (o->wait_given && o->nonblock)
        return cli_usage_error("--wait and -n/--nonblock exclude each other");
    if (o->kind_given && o->permits)
        return cli_usage_error("--kind and --permits exclude each other (--permits holds a semaphore's permit)");
    if (o->nonblock)
        o->wait_ms = 0;
    if (optind == dashdash)
        return cli_usage_error("run: missing the lock NAME");
    if (dashdash - optind > 1)
        return cli_usage_error("run: unexpected '%s' after the lock name (CMD goes after '--')", argv[optind + 1]);
    o->name = argv[optind];
    if (dashdash == argc)
        return cli_usage_error("run: missing '--' between the lock name and the command");
    if (dashdash + 1 == argc)
        return cli_usage_error("run: missing the command after '--'");
    o->cmd = argv + dashdash + 1;
    return cli_servers_finish(&o->servers);
}

/* ---- holding the lock --------------------------------------------------- */

/* Runs on the watchdog thread: hand the news over and return. */
static void on_lost(redmutex_lock *lock, const char *owner, redmutex_state state, void *payload)
{
    (void)lock;
    (void)owner;
    run_ctx *r = payload;
    atomic_store(&r->news, (int)state);
    cli_wake();
}

static void on_permit_lost(redmutex_semaphore *sem, const char *permit, redmutex_state state, void *payload)
{
    (void)sem;
    (void)permit;
    run_ctx *r = payload;
    atomic_store(&r->news, (int)state);
    cli_wake();
}

/* ---- the hold: a lock, or one permit of a semaphore ------------------------------ */

static int hold_acquire(run_ctx *r, int64_t wait_ms)
{
    if (r->sem)
        return redmutex_semaphore_acquire(r->permit, sizeof r->permit, r->sem, 1, wait_ms);
    return redmutex_lock_acquire(r->lock, NULL, wait_ms);
}

static int hold_release(run_ctx *r)
{
    if (!r->sem)
        return redmutex_lock_release(r->lock, NULL);
    int rc = r->permit[0] ? redmutex_semaphore_release(r->sem, r->permit) : REDMUTEX_ENOTOWNER;
    if (rc != REDMUTEX_ECONN)
        r->permit[0] = '\0';
    return rc;
}

static int hold_fence(run_ctx *r, int64_t *fence)
{
    return r->sem ? redmutex_semaphore_fence(fence, r->sem, r->permit) : redmutex_lock_fence(fence, r->lock, NULL);
}

static redmutex_state hold_state(run_ctx *r)
{
    redmutex_state st = REDMUTEX_STATE_LOST;
    if (r->sem)
        redmutex_semaphore_state(&st, r->sem, r->permit);
    else
        redmutex_lock_state(&st, r->lock, NULL);
    return st;
}

static int64_t hold_validity(run_ctx *r)
{
    int64_t left = 0;
    if (r->sem)
        redmutex_semaphore_validity(&left, r->sem, r->permit);
    else
        redmutex_lock_validity(&left, r->lock, NULL);
    return left;
}

/* Asked by a waiting acquire between attempts: a signal ends the wait. */
static int interrupted(void *payload)
{
    (void)payload;
    return cli_signal_first() != 0;
}

static int open_lock(run_ctx *r)
{
    redmutex_client_options copts;
    redmutex_client_options_init(&copts, REDMUTEX_CLIENT_OPTIONS_VERSION);
    copts.interrupt = interrupted;
    int rc = cli_client_new(&r->client, &r->o.servers, &copts);
    if (rc)
        return rc;
    r->what = r->o.permits ? "semaphore" : "lock";
    if (r->o.permits) {
        redmutex_semaphore_options sopts;
        redmutex_semaphore_options_init(&sopts, REDMUTEX_SEMAPHORE_OPTIONS_VERSION);
        sopts.lease_ms = r->o.lease_ms;
        sopts.flags = r->o.fence_env ? REDMUTEX_SEMAPHORE_FENCING : 0;
        sopts.on_lost = on_permit_lost;
        sopts.on_lost_payload = r;
        rc = redmutex_semaphore_new(&r->sem, r->client, r->o.name, r->o.permits, &sopts);
        return rc ? cli_library_error("bad semaphore name", rc) : 0;
    }
    redmutex_lock_options lopts;
    redmutex_lock_options_init(&lopts, REDMUTEX_LOCK_OPTIONS_VERSION);
    lopts.lease_ms = r->o.lease_ms;
    lopts.flags = r->o.fence_env ? REDMUTEX_LOCK_FENCING : 0;
    lopts.on_lost = on_lost;
    lopts.on_lost_payload = r;
    rc = redmutex_lock_new(&r->lock, r->client, r->o.name, r->o.kind, &lopts);
    return rc ? cli_library_error("bad lock name", rc) : 0;
}

/* The signals that ask a job to stop: after one, what CMD leaves behind gets --kill-after to end. */
static bool asks_to_stop(int sig) { return sig == SIGINT || sig == SIGTERM || sig == SIGHUP || sig == SIGQUIT; }

/* A signal ended the wait, or came as the lock was taken: CMD does not start. */
static int stopped_before_cmd(run_ctx *r)
{
    int sig = cli_signal_first();
    if (asks_to_stop(sig))
        r->die_by = sig;
    return 128 + sig;
}

/* Errors a server may get over while a wait goes on: no answer, BUSY, LOADING, a failover. */
static bool passing(int code)
{
    return code == REDMUTEX_ECONN || code == REDMUTEX_ESERVER || code == REDMUTEX_EREPLICAS;
}

/* Sleeps up to ms, less when a signal arrives. */
static void pause_ms(int64_t ms)
{
    struct pollfd pfd = {cli_wake_fd(), POLLIN, 0};
    if (poll(&pfd, 1, (int)ms) > 0)
        cli_wake_drain();
}

#define RETRY_PAUSE_MIN_MS 100
#define RETRY_PAUSE_MAX_MS 1000

/*
 * Takes the lock within --wait. *held says whether it was taken: the exit
 * status alone cannot, since -E may make a conflict exit 0, and CMD must
 * never start unless *held. Returns the exit status when not held.
 *
 * A wait is for the lock, whatever stands in the way: servers that do not
 * answer for a while (a stall, a restart, a failover) are tried again with
 * a growing pause until the wait ends, so `--wait` (and waiting forever)
 * outlast them; -n tries once.
 */
static int acquire(run_ctx *r, bool *held)
{
    bool forever = r->o.wait_ms == REDMUTEX_WAIT_FOREVER;
    int64_t end = forever ? 0 : now_ms() + r->o.wait_ms, pause = RETRY_PAUSE_MIN_MS;
    bool told = false;
    for (;;) {
        int64_t left = forever ? REDMUTEX_WAIT_FOREVER : end - now_ms();
        int rc = hold_acquire(r, forever || left > 0 ? left : 0);
        *held = rc == 0;
        if (rc == 0) {
            if (told)
                cli_error("%s '%s' acquired: the servers answer again", r->what, r->o.name);
            return 0;
        }
        if (rc == REDMUTEX_EINTR || cli_signal_first())
            return stopped_before_cmd(r);
        if (rc == REDMUTEX_ETIMEDOUT) {
            /* Silent like flock(1) unless someone watches: cron would mail it every time. */
            if (isatty(STDERR_FILENO))
                cli_error("%s", redmutex_last_error());
            return r->o.conflict_exit;
        }
        left = forever ? RETRY_PAUSE_MAX_MS : end - now_ms();
        if (!passing(rc) || r->o.wait_ms == 0 || left <= 0)
            return cli_library_error(r->sem ? "cannot acquire a permit" : "cannot acquire the lock", rc);
        if (!told)
            cli_error("%s; trying again until the wait ends", redmutex_last_error());
        told = true;
        pause_ms(pause < left ? pause : left);
        if (cli_signal_first())
            return stopped_before_cmd(r);
        pause = pause * 2 < RETRY_PAUSE_MAX_MS ? pause * 2 : RETRY_PAUSE_MAX_MS;
    }
}

/*
 * *out = environ with VAR=<fencing token> (an inherited VAR replaced), or
 * NULL without --fence-env. One allocation holds the array and the new
 * entry; the other strings are environ's. Returns 0 or an exit status.
 */
static int cmd_environment(char ***out, run_ctx *r)
{
    *out = NULL;
    if (!r->o.fence_env)
        return 0;
    int64_t fence;
    int rc = hold_fence(r, &fence);
    if (rc)
        return cli_library_error("cannot read the fencing token", rc);
    size_t n = 0, len = strlen(r->o.fence_env);
    while (environ[n])
        n++;
    size_t entry_size = len + 24; /* "=" and an int64 */
    char **env = malloc((n + 2) * sizeof *env + entry_size);
    if (!env) {
        cli_error("out of memory");
        return CLI_EXIT_OSERR;
    }
    char *entry = (char *)(env + n + 2);
    snprintf(entry, entry_size, "%s=%lld", r->o.fence_env, (long long)fence);
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (strncmp(environ[i], r->o.fence_env, len) || environ[i][len] != '=')
            env[k++] = environ[i];
    env[k++] = entry;
    env[k] = NULL;
    *out = env;
    return 0;
}

/* ---- while CMD runs ------------------------------------------------------- */

/* SIGKILL for CMD's group --kill-after from now, unless it is already due or sent. */
static void arm_kill(run_ctx *r)
{
    if (r->kill_at || r->killed)
        return;
    r->kill_at = now_ms() + r->o.kill_after_ms;
    if (!r->kill_at)
        r->kill_at = 1;
}

/* The lock is gone: CMD's group is stopped first, and then told why (stderr may be a closed pipe). */
static void lose(run_ctx *r, const char *when)
{
    r->lost = true;
    cli_child_signal(&r->child, SIGTERM);
    arm_kill(r);
    char grace[32];
    snprintf(grace, sizeof grace, "%.3g s", (double)r->o.kill_after_ms / 1000);
    const char *held = r->sem ? "the permit of semaphore" : "lock";
    if (r->o.lease_ms)
        cli_error("%s '%s' expired: its lease of %.3g s ran out %s; sent SIGTERM to the command's process "
                  "group, SIGKILL after %s",
                  held, r->o.name, (double)r->o.lease_ms / 1000, when, grace);
    else
        cli_error("%s '%s' was lost %s (renewal found it deleted or taken, or could not reach the servers in "
                  "time); sent SIGTERM to the command's process group, SIGKILL after %s",
                  held, r->o.name, when, grace);
}

static void follow_lock_news(run_ctx *r)
{
    int st = atomic_load(&r->news);
    if (st < 0 || st == r->reported || r->lost)
        return;
    r->reported = st;
    if (st == REDMUTEX_STATE_LOST) {
        lose(r, "while the command ran");
    } else if (st == REDMUTEX_STATE_RENEWAL_FAILING) {
        cli_error("renewing %s '%s' fails; it stays valid for %lld ms more unless renewal recovers", r->what, r->o.name,
                  (long long)hold_validity(r));
    } else if (st == REDMUTEX_STATE_HELD) {
        cli_error("renewing %s '%s' works again", r->what, r->o.name);
    }
}

/*
 * redmutex was suspended with CMD (Ctrl-Z) and is continued. Nothing
 * renewed the lease meanwhile: CMD goes on only if the lock is still valid;
 * otherwise it is continued into SIGTERM, as for any lost lock.
 */
static void resume(run_ctx *r)
{
    redmutex_state st = hold_state(r);
    if (st == REDMUTEX_STATE_LOST && !r->lost)
        lose(r, "while the command was suspended");
    cli_child_resume(&r->child);
}

static void forward_signals(run_ctx *r)
{
    int sig;
    while ((sig = cli_signal_take()) != 0) {
        if (sig == SIGCHLD)
            continue;
        cli_child_signal(&r->child, sig);
        r->stop_asked = r->stop_asked || asks_to_stop(sig);
    }
}

static void kill_if_due(run_ctx *r)
{
    if (r->kill_at && now_ms() >= r->kill_at) {
        cli_child_signal(&r->child, SIGKILL);
        r->kill_at = 0;
        r->killed = true;
    }
}

static void sleep_until_woken(const run_ctx *r, int64_t cap_ms)
{
    int64_t timeout = cap_ms;
    if (r->kill_at) {
        int64_t left = r->kill_at - now_ms();
        timeout = left < 0 ? 0 : (timeout < 0 || left < timeout ? left : timeout);
    }
    struct pollfd pfd = {cli_wake_fd(), POLLIN, 0};
    if (poll(&pfd, 1, timeout > INT32_MAX ? INT32_MAX : (int)timeout) > 0)
        cli_wake_drain();
}

/*
 * Until CMD and everything it left in its process group have ended: the
 * lock covers all of it, as flock(1)'s covers every process that inherited
 * it. Signals are forwarded to the group, and a lost lock stops it. When
 * the job was asked to stop (a forwarded SIGINT, SIGTERM, SIGHUP or
 * SIGQUIT, CMD killed by one of them, or a lost lock), what is left of the
 * group after CMD's end gets --kill-after, then SIGKILL. Otherwise it keeps
 * the lock as long as it runs. There is no event for "the group is empty",
 * so once CMD has ended this looks every 50 ms.
 */
static void supervise(run_ctx *r)
{
    for (;;) {
        bool ended = cli_child_poll(&r->child);
        if (r->child.resume_pending)
            resume(r);
        forward_signals(r);
        follow_lock_news(r);
        if (ended) {
            if (!cli_child_group_alive(&r->child))
                return;
            if (r->stop_asked || r->lost || asks_to_stop(r->child.signal))
                arm_kill(r);
        }
        kill_if_due(r);
        sleep_until_woken(r, ended ? 50 : -1);
    }
}

/*
 * How redmutex ends when CMD was killed by a signal that asks a job to stop:
 * by that signal too, so that a shell running redmutex in a loop stops.
 * When CMD had the terminal and the signal is one the terminal sends
 * (Ctrl-C, Ctrl-\), it went to CMD's group only: redmutex's own group (a
 * script running it without job control, the rest of a pipeline) would have
 * had it too without redmutex, and gets it now.
 */
static int end_like_cmd(run_ctx *r)
{
    int sig = r->child.signal;
    if (asks_to_stop(sig) && !cli_signal_inherited_ignored(sig)) {
        r->die_by = sig;
        r->die_with_group = r->child.had_terminal && (sig == SIGINT || sig == SIGQUIT);
    }
    return r->child.status;
}

static int finish(run_ctx *r)
{
    cli_child_release_terminal(&r->child);
    int rc = hold_release(r); /* after a loss: forgets it, deletes nothing */
    if (r->lost)
        return CLI_EXIT_LOST;
    if (rc == REDMUTEX_ELOST) {
        cli_error("%s '%s' was lost before the command ended: %s", r->what, r->o.name, redmutex_last_error());
        return CLI_EXIT_LOST;
    }
    if (rc)
        cli_error("could not release %s '%s' (%s); it ends with its lease", r->what, r->o.name, redmutex_last_error());
    return end_like_cmd(r);
}

static int hold_and_run(run_ctx *r)
{
    bool held;
    int rc = acquire(r, &held);
    if (!held)
        return rc;
    if (cli_signal_first()) {
        hold_release(r);
        return stopped_before_cmd(r);
    }
    char **env;
    rc = cmd_environment(&env, r);
    /* CMD starts only while the lock is valid: the child looks again at the
       last moment before exec, against the end of validity seen here. */
    int64_t left = hold_validity(r);
    if (rc == 0 && left <= 0)
        rc = CLI_EXIT_LOST;
    if (rc == 0)
        rc = cli_child_spawn(&r->child, r->o.cmd, env ? env : environ, now_ms() + left);
    free(env);
    if (rc) {
        if (rc == CLI_EXIT_LOST)
            cli_error("%s '%s' expired before the command could start (a lease too short for this host, or "
                      "redmutex was held up); the command was not run",
                      r->sem ? "the permit of semaphore" : "lock", r->o.name);
        hold_release(r);
        return rc;
    }
    /* It may have run out as CMD started: then CMD is stopped as for any lost lock. */
    if (hold_validity(r) <= 0)
        lose(r, "as the command started");
    supervise(r);
    return finish(r);
}

int cli_run(int argc, char **argv)
{
    run_ctx r;
    memset(&r, 0, sizeof r);
    atomic_init(&r.news, -1);
    r.reported = REDMUTEX_STATE_HELD;
    int rc = parse_run(&r.o, argc, argv);
    if (rc == 0 && cli_signals_install()) {
        cli_error("cannot set up signal handling: %s", strerror(errno));
        rc = CLI_EXIT_OSERR;
    }
    if (rc == 0)
        rc = open_lock(&r);
    if (rc == 0)
        rc = hold_and_run(&r);
    /* The client first: closing it releases what is still held (a release that
       failed), within its shutdown timeout; free alone would leave that to a
       background thread that the exit ends. */
    if (r.client)
        redmutex_client_close(r.client);
    redmutex_client_free(r.client);
    redmutex_lock_free(r.lock);
    redmutex_semaphore_free(r.sem);
    cli_servers_clear(&r.o.servers);
    if (r.die_by)
        cli_signals_die_by(r.die_by, r.die_with_group);
    return rc < 0 ? 0 : rc;
}
