/*
 * The redmutex command-line tool: declarations shared by its files.
 *
 * The tool uses only the public API (redmutex.h): every server it talks to
 * is reached through the library, with its transport (TLS, AUTH, ACL
 * users), its URL forms and its redaction of URLs in messages.
 */
#ifndef REDMUTEX_CLI_H
#define REDMUTEX_CLI_H

#include <redmutex.h>

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <signal.h>
#include <sys/types.h>

/* Exit statuses. Where sysexits.h has a fitting code, it is that code. */
enum {
    CLI_EXIT_OK = 0,
    CLI_EXIT_FREE = 1,          /* status: not held; release: there was nothing to release */
    CLI_EXIT_USAGE = 64,        /* EX_USAGE: bad arguments */
    CLI_EXIT_DATAERR = 65,      /* EX_DATAERR: the key exists but is not a lock */
    CLI_EXIT_UNAVAILABLE = 69,  /* EX_UNAVAILABLE: servers unreachable or refusing */
    CLI_EXIT_SOFTWARE = 70,     /* EX_SOFTWARE: an error that should not happen */
    CLI_EXIT_OSERR = 71,        /* EX_OSERR: fork, pipe or memory failed */
    CLI_EXIT_IOERR = 74,        /* EX_IOERR: the output could not be written */
    CLI_EXIT_TEMPFAIL = 75,     /* EX_TEMPFAIL: the lock is held by someone else (default of -E) */
    CLI_EXIT_LOST = 76,         /* the lock was lost while CMD ran */
    CLI_EXIT_NOPERM = 77,       /* EX_NOPERM: authentication refused */
    CLI_EXIT_CANNOT_EXEC = 126, /* CMD exists but could not be executed (as in sh, env, timeout) */
    CLI_EXIT_NOT_FOUND = 127    /* CMD was not found */
};

/* ---- args.c: parsing and messages ---------------------------------------- */

/* Prints "redmutex: <message>" on stderr. */
void cli_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Prints the message and a hint to --help on stderr; returns CLI_EXIT_USAGE. */
int cli_usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Prints "redmutex: <what>: <library message>" and returns the exit status for `code`. */
int cli_library_error(const char *what, int code);
/* Reports a getopt_long() failure (c is '?' or ':'; index is optind). Returns CLI_EXIT_USAGE. */
int cli_bad_option(int c, char **argv, int index);
/* The exit status that stands for a redmutex error code (see the table in cli/redmutex.1). */
int cli_exit_for(int code);

/*
 * Parses a duration in seconds ("30", "2.5", "0.1") into whole milliseconds,
 * rounded up. Returns 0, or -1 when `text` is not a finite, non-negative
 * number of at most REDMUTEX_TIME_MAX_MS. Callers check their own minimum
 * and say it in seconds, the unit the user gave.
 */
int cli_parse_seconds(int64_t *out, const char *text);
/* The longest duration, in seconds, for messages. */
#define CLI_SECONDS_MAX ((long long)(REDMUTEX_TIME_MAX_MS / 1000))
/* Parses an exit status 0..255. Returns 0 or -1. */
int cli_parse_exit_code(int *out, const char *text);
/* Whether `name` can be an environment variable name ([A-Za-z_][A-Za-z0-9_]*). */
bool cli_valid_env_name(const char *name);

/* The servers a command talks to: -u URLs, else REDMUTEX_URL, else the default. */
typedef struct cli_servers {
    const char *urls[REDMUTEX_SERVERS_MAX];
    size_t n;
    char *env_copy; /* REDMUTEX_URL split in place; owned */
} cli_servers;

/* Adds a -u URL. Returns 0, or CLI_EXIT_USAGE (message printed) when there are too many. */
int cli_servers_add(cli_servers *s, const char *url);
/* When no -u was given: REDMUTEX_URL (comma-separated) or redis://127.0.0.1:6379. Returns 0 or an exit
 * status. */
int cli_servers_finish(cli_servers *s);
void cli_servers_clear(cli_servers *s);

/*
 * Makes a client for the servers, with `opts` (may be NULL). On failure
 * prints the reason and returns the exit status; 0 on success.
 */
int cli_client_new(redmutex_client **out, const cli_servers *s, const redmutex_client_options *opts);

/* ---- signals.c: signals and wake-ups for the main thread --------------------- */

/*
 * Installs handlers for the signals redmutex forwards to CMD (INT, TERM,
 * HUP, QUIT, USR1, USR2; those inherited as ignored stay ignored, and CMD
 * inherits that) and for SIGCHLD, and makes the wake-up pipe. Handlers do not
 * restart system calls, so a signal ends a lock wait's pause at once.
 * Returns 0 or -1 with errno.
 */
int cli_signals_install(void);
/* Readable when a signal arrived or cli_wake() was called. */
int cli_wake_fd(void);
/* Makes cli_wake_fd() readable. Async-signal-safe; callable from any thread. */
void cli_wake(void);
/* Empties the wake-up pipe. */
void cli_wake_drain(void);
/* The next signal that arrived and was not taken yet (SIGCHLD included), or 0. */
int cli_signal_take(void);
/* The first forwarded signal that ever arrived (not SIGCHLD), or 0. Async-signal-safe. */
int cli_signal_first(void);
/* Whether sig was ignored when redmutex started (then CMD inherits that, and redmutex never dies of it). */
bool cli_signal_inherited_ignored(int sig);
/*
 * Ends redmutex by signal sig, as if it had not caught it (a shell that runs
 * redmutex in a loop stops only when its child dies of SIGINT, not when it
 * exits 130); with whole_group, sends it to redmutex's whole process group.
 * Returns only if the signal did not end the process.
 */
void cli_signals_die_by(int sig, bool whole_group);
/* Blocks every signal in the calling thread; *old receives the previous mask. */
void cli_signals_block(sigset_t *old);
/* In a forked child, before exec: the dispositions redmutex inherited, for the signals it
   catches or ignores itself. Async-signal-safe. */
void cli_signals_child_defaults(void);

/* ---- child.c: CMD in its own process group ------------------------------ */

typedef struct cli_child {
    pid_t pid;           /* CMD, also the id of its process group */
    int tty;             /* redmutex's terminal (its own descriptor), handed to CMD's group; or -1 */
    bool ended;          /* CMD has ended: */
    int status;          /*   its exit status, or 128+N if signal N killed it */
    int signal;          /*   N if signal N killed it, else 0 */
    bool had_terminal;   /*   whether its group had the terminal then */
    bool resume_pending; /* redmutex was continued after a job-control stop; CMD waits for cli_child_resume() */
} cli_child;

/*
 * Starts argv (searched in PATH) with `envp`, in a new process group that
 * gets the terminal when redmutex runs in the terminal's foreground. CMD
 * gets SIGTERM if redmutex dies (Linux); the processes CMD leaves behind
 * become redmutex's children (child subreaper). The child execs CMD only
 * before deadline_ms (CLOCK_MONOTONIC ms; 0: no deadline), when the lock
 * that CMD needs stops being valid. Returns 0, CLI_EXIT_LOST (the deadline
 * passed, CMD never ran, nothing printed), or an exit status with the reason
 * printed (CLI_EXIT_NOT_FOUND, CLI_EXIT_CANNOT_EXEC, CLI_EXIT_OSERR).
 */
int cli_child_spawn(cli_child *ch, char *const argv[], char *const envp[], int64_t deadline_ms);
/*
 * Reaps every child that ended (CMD, and the orphans of its group) without
 * waiting. Returns whether CMD has ended (ch->status, ch->signal). Follows
 * job control: when the terminal stopped CMD, redmutex stops too, and when
 * it is continued sets ch->resume_pending.
 */
bool cli_child_poll(cli_child *ch);
/* Continues CMD after a job-control stop, with the terminal if redmutex has it. */
void cli_child_resume(cli_child *ch);
/* Sends sig to CMD's process group. */
void cli_child_signal(const cli_child *ch, int sig);
/* Whether any process is left in CMD's process group. */
bool cli_child_group_alive(const cli_child *ch);
/* Takes the terminal back after CMD's group ended (when it had it), and closes it. */
void cli_child_release_terminal(cli_child *ch);

/* ---- json.c ------------------------------------------------------------ */

/* Writes str as a JSON string (quoted, escaped; invalid UTF-8 becomes U+FFFD). */
void cli_json_string(FILE *f, const char *str);

/* ---- commands ---------------------------------------------------------- */

int cli_run(int argc, char **argv);
int cli_status(int argc, char **argv);
int cli_release(int argc, char **argv);
void cli_print_help(void);

#endif
