/*
 * redmutex: flock(1) for a fleet of machines. Subcommands run, status and
 * release; see cli/redmutex.1 for the manual.
 */
#include "cli.h"

#include <stdio.h>
#include <string.h>

static const char help_text[] =
    "Usage:\n"
    "  redmutex run [-u URL]... [--lease SEC] [--wait SEC | -n] [-E CODE] [--kill-after SEC]\n"
    "               [--fence-env VAR] [--kind lock|rlock | --permits N] NAME -- CMD [ARG]...\n"
    "  redmutex status [-u URL]... [--json] [--watch [--interval SEC]] NAME\n"
    "  redmutex release --force [-u URL]... NAME\n"
    "  redmutex --help | --version\n"
    "\n"
    "Holds the Redis lock NAME while CMD runs, so that CMD runs on one machine at a time.\n"
    "\n"
    "run options:\n"
    "  -u, --url URL         a Redis server: redis://[user:password@]host[:port][/db],\n"
    "                        rediss://... (TLS) or unix:///path, each also with ?db=N,\n"
    "                        ?username=U, ?password=P; repeat for a Redlock over several masters;\n"
    "                        redis://h1:p1,h2:p2/0 names one deployment by its seeds (a cluster).\n"
    "                        Default: $REDMUTEX_URL (comma-separated), else redis://127.0.0.1:6379\n"
    "      --lease SEC       lease without renewal (>= 0.1): the lock ends after SEC seconds (and CMD is\n"
    "                        stopped as for a lost lock). Default: a 30 s lease renewed every 9 s\n"
    "      --wait SEC        wait at most SEC seconds for the lock (default: as long as it takes)\n"
    "  -n, --nonblock        do not wait: fail at once if the lock is held\n"
    "  -E, --conflict-exit-code CODE\n"
    "                        exit status when the lock could not be had (default 75)\n"
    "      --kill-after SEC  after a lost lock, SIGKILL this long after SIGTERM; after a signal,\n"
    "                        what CMD left in its group this long after CMD's end (default 10)\n"
    "      --fence-env VAR   export the lock's fencing token to CMD as VAR\n"
    "      --kind lock|rlock plain lock (redis-py format, the default) or reentrant lock\n"
    "                        (Redisson RLock format, to exclude Java services using Redisson)\n"
    "      --permits N       hold one permit of the N-permit semaphore NAME instead of a lock: at\n"
    "                        most N commands run at once (Redisson RPermitExpirableSemaphore format)\n"
    "CMD runs only while the lock is held and renewed; the lock is released when CMD and what it\n"
    "left in its process group have ended.\n"
    "status prints whether NAME is held, its kind (lock, rlock, fair, rwlock), owner, TTL and fence\n"
    "counter (--json: as JSON). --watch refreshes it every --interval SEC (default 1): in place on a\n"
    "terminal, one JSON line per refresh with --json; Ctrl-C (or SIGTERM) ends it with status 0.\n"
    "release --force deletes NAME whoever holds it and wakes its waiters.\n"
    "\n"
    "Exit status of run: CMD's status (128+N if signal N killed it); 75 (or -E) when the lock\n"
    "could not be had; 76 when the lock was lost while CMD ran (CMD got SIGTERM, then SIGKILL);\n"
    "64 bad arguments; 69 servers unreachable; 77 authentication refused; 126/127 CMD could not\n"
    "be run. status: 0 held, 1 free, 74 output not written. release: 0 released, 1 nothing was held.\n"
    "Signals to redmutex (INT, TERM, HUP, QUIT, USR1, USR2) are passed on to CMD; when CMD dies of\n"
    "INT, TERM, HUP or QUIT, redmutex releases the lock and dies of it too.\n"
    "\n"
    "Examples:\n"
    "  redmutex run -n nightly-report -- /usr/local/bin/report     # skip if already running\n"
    "  */5 * * * * redmutex run -n nightly-report -- /usr/local/bin/report   # in a crontab\n"
    "  redmutex run --wait 60 deploy -- ./deploy.sh                # wait up to a minute\n"
    "  redmutex run -u redis://a:6379 -u redis://b:6379 -u redis://c:6379 job -- ./job\n"
    "  redmutex run --fence-env FENCE backup -- sh -c 'backup --token \"$FENCE\"'\n"
    "  redmutex run --permits 4 transcode -- ffmpeg -i in.mov out.mp4     # at most 4 at once\n"
    "  redmutex status --json nightly-report\n"
    "  redmutex status --watch nightly-report                      # holder, TTL, queue, live\n"
    "  redmutex release --force nightly-report\n"
    "\n"
    "Manual: man redmutex\n";

void cli_print_help(void) { fputs(help_text, stdout); }

int main(int argc, char **argv)
{
    if (argc < 2)
        return cli_usage_error("missing a command: run, status or release");
    const char *cmd = argv[1];
    if (!strcmp(cmd, "run"))
        return cli_run(argc - 1, argv + 1);
    if (!strcmp(cmd, "status"))
        return cli_status(argc - 1, argv + 1);
    if (!strcmp(cmd, "release"))
        return cli_release(argc - 1, argv + 1);
    if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h") || !strcmp(cmd, "help")) {
        cli_print_help();
        return CLI_EXIT_OK;
    }
    if (!strcmp(cmd, "--version") || !strcmp(cmd, "-V")) {
        printf("redmutex %s (library %s)\n", REDMUTEX_VERSION_STRING, redmutex_version());
        return CLI_EXIT_OK;
    }
    return cli_usage_error("unknown command '%s': expected run, status or release", cmd);
}
