/*
 * What the SWIG bindings share, whatever the language: the objects that
 * language values wrap, the one table of error classes, the pending error
 * that the interface's single %exception block turns into a native
 * exception, the checks every argument goes through, and the waiting
 * policy hooks that let each interpreter stay responsive during a wait.
 *
 * Nothing here knows a language: bindings/redmutex.i converts native values
 * into rmb_value (and back), and supplies the waiting policy.
 */
#ifndef REDMUTEX_BINDING_H
#define REDMUTEX_BINDING_H

#include <redmutex.h>

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ------------------------------------------------------------------------ */
/* Errors                                                                    */
/* ------------------------------------------------------------------------ */

/** One entry of the code -> class table (see errors.c). */
typedef struct rmb_error_class {
    int code;           /* REDMUTEX_E*, or 0 for the base class */
    const char *name;   /* class name in every language: "LockTimeout" */
    const char *tag;    /* Tcl -errorcode word: "TIMEOUT" */
    const char *parent; /* the class it derives from, an earlier entry; NULL: the base */
} rmb_error_class;

/** The base class first, then one entry per REDMUTEX_E* code; ends with a NULL name. */
extern const rmb_error_class rmb_error_classes[];

/** The class for a code; the base class for codes without their own. */
const rmb_error_class *rmb_error_class_for(int code);

/**
 * The calling thread's pending error: set by a failing call, read and
 * cleared by the interface's %exception block, which raises it.
 */
typedef struct rmb_error {
    int code; /* 0: none */
    char message[600];
} rmb_error;

rmb_error *rmb_error_pending(void);
void rmb_error_clear(void);

/** Records a binding-side error (bad argument...). Returns code. */
int rmb_fail(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/** Records rc with the core's detail message when rc < 0. Returns rc. */
int rmb_check(int rc);

/**
 * A pending "error" that is the language's own and already in place: a
 * signal handler of the language raised it while a wait was being ended for
 * it (Tcl: the interpreter's result holds it). The exception block passes it
 * on instead of raising a redmutex error.
 */
#define RMB_EFOREIGN 1

/* ------------------------------------------------------------------------ */
/* Values from the languages                                                 */
/* ------------------------------------------------------------------------ */

typedef enum rmb_kind {
    RMB_MISSING = 0, /* not given at all */
    RMB_NIL,         /* nil / undef / Lua nil */
    RMB_BOOL,
    RMB_INT,
    RMB_FLOAT,
    RMB_STRING,
    RMB_OTHER /* anything else: a hash, an object... */
} rmb_kind;

/**
 * A language value, classified by the language's typemap. Perl and Tcl
 * values can be strings and numbers at once ("5"): `s` is set whenever the
 * language reads the value as a string, `numeric` whenever it reads it as a
 * number. Strings point into the language's own NUL-terminated buffer,
 * valid for the call.
 */
typedef struct rmb_value {
    rmb_kind kind;
    int truth;    /* the language's truthiness where it has a rule: 1/0; -1 otherwise */
    bool numeric; /* d (and, when integral, i) hold its number */
    bool integral;
    int64_t i;
    double d;
    const char *s; /* NULL: not a string */
    size_t len;
    bool has_nul;     /* a NUL character the language stores another way (Tcl: C0 80) */
    const char *type; /* the language's name of the value's type, for messages */
} rmb_value;

/** Most values in a list argument: a URL list has at most REDMUTEX_SERVERS_MAX. */
#define RMB_LIST_MAX REDMUTEX_SERVERS_MAX
/** Most keyword arguments in one call. */
#define RMB_KWARGS_MAX 16

typedef struct rmb_list {
    size_t n;
    bool too_long;
    rmb_value items[RMB_LIST_MAX];
} rmb_list;

typedef struct rmb_kwargs {
    size_t n;
    bool too_many;
    bool odd; /* a flat key/value list had a key without a value */
    rmb_value keys[RMB_KWARGS_MAX];
    rmb_value values[RMB_KWARGS_MAX];
} rmb_kwargs;

/** A string argument: NUL-free, 1..max bytes. Returns 0 or records EINVAL. */
int rmb_text(const char **out, const rmb_value *v, const char *what, size_t max);

/** A true/false argument; a missing one is false. Returns 0 or records EINVAL. */
int rmb_flag(bool *out, const rmb_value *v, const char *what);

/**
 * Seconds to whole milliseconds, rounded up: a finite number >= 0 (> 0 when
 * !allow_zero) and at most REDMUTEX_TIME_MAX_MS. With allow_forever, nil and
 * -1 give REDMUTEX_WAIT_FOREVER. Returns 0 or records EINVAL.
 */
int rmb_seconds(int64_t *out, const rmb_value *v, const char *what, bool allow_zero, bool allow_forever);

/* ------------------------------------------------------------------------ */
/* Options (keyword arguments)                                               */
/* ------------------------------------------------------------------------ */

typedef enum rmb_scope {
    RMB_SCOPE_CLIENT,   /* Client.new(urls, ...) */
    RMB_SCOPE_LOCK,     /* client.lock(name, ...), client.rlock(name, ...) */
    RMB_SCOPE_WAIT,     /* lock.synchronize / guard / with: timeout */
    RMB_SCOPE_SEMAPHORE /* client.semaphore(name, permits, ...) */
} rmb_scope;

/** Everything keyword arguments can set, for any scope. */
typedef struct rmb_settings {
    redmutex_client_options client;
    redmutex_lock_options lock;
    int64_t timeout_ms; /* wait of the scoped forms */
    bool has_timeout;
    const char *owner;        /* points into the language's string; NULL: default owner */
    uint32_t semaphore_flags; /* REDMUTEX_SEMAPHORE_RESIZE */
} rmb_settings;

/** Fills defaults, then applies kwargs for the scope. Returns 0 or records EINVAL. */
int rmb_settings_parse(rmb_settings *out, rmb_scope scope, const rmb_kwargs *kwargs);

/* ------------------------------------------------------------------------ */
/* Objects                                                                   */
/* ------------------------------------------------------------------------ */

/** What an object is; the first member of each, so that a live object tells its class. */
typedef enum rmb_type {
    RMB_TYPE_CLIENT = 0x52634c69, /* arbitrary, unlike small integers and pointers */
    RMB_TYPE_LOCK,
    RMB_TYPE_GUARD,
    RMB_TYPE_SEMAPHORE /* an rmb_lock whose holds are a semaphore's permits */
} rmb_type;

/**
 * A client shared by the language's Client object and by every lock made
 * from it: the core client is freed when the last of them is gone, so a
 * garbage collector may free them in any order, and a lock stays usable
 * after its Client object is collected.
 */
typedef struct rmb_client {
    rmb_type type;
    redmutex_client *ptr;
    atomic_int refs;
    atomic_bool closed;
    void *lang;                               /* the language's own state (Tcl: the event-loop watch) */
    void (*lang_free)(struct rmb_client *c);  /* called before the client is freed */
    struct rmb_client *prev_live, *next_live; /* every live client, for the exit path (live.c) */
} rmb_client;

/**
 * A lock handle, shared by the language's Lock object and its guards; or a
 * semaphore's (the language's Semaphore object), whose holds are permits:
 * then ptr is NULL, sem the handle, and each hold a permit id.
 */
typedef struct rmb_lock {
    rmb_type type;
    redmutex_lock *ptr;
    redmutex_semaphore *sem;
    rmb_client *client;
    atomic_int refs;
    char *owner;        /* explicit owner (copied) or NULL */
    int64_t timeout_ms; /* wait of the scoped forms */
    bool fencing;
} rmb_lock;

/** One hold taken by a scoped form, released once (explicitly or on destruction). */
typedef struct rmb_guard {
    rmb_type type;
    rmb_lock *lock;
    atomic_bool held;
    char permit[REDMUTEX_PERMIT_ID_SIZE]; /* a semaphore's: the permit it holds */
} rmb_guard;

rmb_client *rmb_client_new(const rmb_list *urls, const rmb_kwargs *kwargs);
void rmb_client_unref(rmb_client *c);
/** Releases held locks and stops background work; later calls fail with ClosedError. */
int rmb_close(rmb_client *c);
int rmb_check_open(rmb_client *c);

rmb_lock *rmb_lock_new(rmb_client *c, const rmb_value *name, redmutex_kind kind, const rmb_kwargs *kwargs);
void rmb_lock_unref(rmb_lock *l);
/** A semaphore with `permits` permits (an integer value); its object is an rmb_lock with sem set. */
rmb_lock *rmb_semaphore_new(rmb_client *c, const rmb_value *name, const rmb_value *permits, const rmb_kwargs *kwargs);

/**
 * Acquires within wait_ms (REDMUTEX_WAIT_FOREVER: as long as it takes)
 * through the language's waiting policy. Returns 0 when held,
 * REDMUTEX_ETIMEDOUT, or another negative code; every code but 0 is
 * recorded as the pending error (callers that map a timeout to `false`
 * clear it). On any error nothing is held.
 */
int rmb_acquire(rmb_lock *l, int64_t wait_ms);

/** Releases one hold of the lock's owner (through the blocking policy). */
int rmb_release(rmb_lock *l);

/**
 * A semaphore's acquisition of `permits` permits (rmb_acquire's waits and
 * signal policy): its permit id into permit[REDMUTEX_PERMIT_ID_SIZE].
 */
int rmb_acquire_permit(rmb_lock *l, int64_t wait_ms, int64_t permits, char *permit);
/** Releases a semaphore's permit (any permit id, also one acquired elsewhere). */
int rmb_release_permit(rmb_lock *l, const char *permit);

/** One lost-lock event (see redmutex_client_next_event). */
typedef struct rmb_event {
    bool has;
    uint64_t lock_id;
    redmutex_state state;
    char owner[REDMUTEX_OWNER_MAX + 1]; /* "" for a plain lock's own hold */
} rmb_event;

/** Pops the client's oldest lost-lock event; ev->has is false when there is none. */
int rmb_next_event(rmb_client *c, rmb_event *ev);

/* ---- statistics and log messages (observe.c) ---- */

/** One number of client.stats(), named by its path ("acquire_wait_seconds.lock.acquired.count"). */
typedef struct rmb_stat {
    char key[256];
    double value;
} rmb_stat;

typedef struct rmb_stats {
    rmb_stat *items;
    size_t n, cap;
} rmb_stats;

/** The client's statistics as flat pairs (see observe.c). 0, or -1 with the error recorded. */
int rmb_stats_get(rmb_client *c, rmb_stats *out);
void rmb_stats_free(rmb_stats *s);
/** Whether rmb_stats_get failed for s (its error is pending: the call raises). */
static inline bool rmb_stats_get_failed(const rmb_stats *s) { return s->items == NULL; }

/** Longest log message handed to a language. */
#define RMB_LOG_MESSAGE_MAX 1200
/** The client option `log` of every binding client: queues the message for the language's thread. */
void rmb_log_queue(int level, const char *message, const char *lock_name, const char *server, void *payload);
/** Whether messages wait to be handed over (cheap: read after every call). */
bool rmb_log_pending(void);
/** Pops the oldest message into message[size]; false when none is queued. */
bool rmb_log_next(int *level, char *message, size_t size);
/** "WARNING" or "INFO". */
const char *rmb_log_level_name(int level);

/** Calls that ask the servers (one round trip each). */
typedef enum rmb_query {
    RMB_QUERY_LOCKED,         /* out: 1 or 0 */
    RMB_QUERY_OWNED,          /* out: 1 or 0 */
    RMB_QUERY_TTL,            /* out: ms, -2 not locked, -1 no TTL */
    RMB_QUERY_HOLD_COUNT,     /* out: hold count */
    RMB_QUERY_FORCE_RELEASE,  /* out: 1 if a lock was deleted */
    RMB_QUERY_EXTEND,         /* arg: ms to add */
    RMB_QUERY_EXTEND_REPLACE, /* arg: new TTL in ms */
    RMB_QUERY_AVAILABLE       /* a semaphore's: out: permits free */
} rmb_query;

/** Runs a query through the blocking policy. Returns 0 or records the error. */
int rmb_query_lock(rmb_lock *l, rmb_query what, int64_t arg, int64_t *out);

/** Acquires with the scoped forms' wait (kwargs `timeout` or the lock's) and returns a guard. */
rmb_guard *rmb_guard_new(rmb_lock *l, const rmb_kwargs *kwargs);
/** Releases the guard's hold if it still has it. */
int rmb_guard_end(rmb_guard *g);
/** Frees the guard, releasing its hold first if it still has it (errors ignored). */
void rmb_guard_free(rmb_guard *g);

/* ------------------------------------------------------------------------ */
/* Live objects and the exit path (live.c)                                   */
/* ------------------------------------------------------------------------ */

/**
 * Every object the bindings made and have not freed is in one set, so that a
 * method can tell a live object of its class from nothing (nil, undef, a
 * NULL pointer), a freed one or a forged one without touching its memory.
 * Returns 0, or REDMUTEX_ENOMEM (recorded) when the set cannot grow.
 */
int rmb_live_add(void *obj, rmb_type type);
void rmb_live_remove(void *obj);
/** True when obj is a live object of `type` (records nothing). */
bool rmb_live_is(const void *obj, rmb_type type);

/**
 * Checks that a method's self is a live object of `type`. Returns 0, or
 * records REDMUTEX_EINVAL with a message that says which: nothing, or an
 * object that was freed (or never made by redmutex).
 */
int rmb_self(const void *obj, rmb_type type);

/**
 * The one exit path of every language: a client nobody closed is closed when
 * the process exits (exit(), the end of the script, an uncaught error - not
 * _exit() or a fatal signal), so the locks it still holds are released
 * rather than left to expire; with leave_locks_on_close they are left. Each
 * client's close is bounded by its shutdown_timeout, all run at once.
 * rmb_exit_watch adds a new client to those closed at exit. rmb_exit_free,
 * when the client's last reference goes, takes it out and frees its core
 * client without blocking: at once if it was closed, else after a close on
 * a thread of the exit path's own, which an exiting process waits for.
 */
void rmb_exit_watch(rmb_client *c);
void rmb_exit_free(rmb_client *c);
/** Brackets a close that the caller runs itself: exit waits for it. */
void rmb_exit_closing(bool begins);

/* ------------------------------------------------------------------------ */
/* Waiting policy, supplied by each language                                 */
/* ------------------------------------------------------------------------ */

/** A core call to run in the language's blocking context. */
typedef struct rmb_call {
    int (*fn)(struct rmb_call *call);
    rmb_client *client;
    rmb_lock *lock;
    int what;    /* rmb_query for queries */
    int64_t arg; /* wait or extension in ms */
    int64_t out;
    int64_t permits;                      /* a semaphore's acquisition: how many */
    char permit[REDMUTEX_PERMIT_ID_SIZE]; /* ... and its permit id (out; in for a release) */
    int rc;
    bool ran;
    bool signalled; /* a signal the language handles arrived during the call */
    bool stop;      /* a SIGINT with the default disposition arrived during the call */
} rmb_call;

typedef struct rmb_policy {
    /**
     * Runs call->fn(call), setting call->ran. `interruptible`: a wait that the
     * language's interrupt (a signal it handles, Thread#raise) must be able to
     * end; before it starts, the language may instead unwind (raise) with
     * nothing done, or return with call->ran false, so callers allocate
     * nothing around it.
     */
    void (*run)(rmb_call *call, rmb_client *client, bool interruptible);
    /**
     * True when the language has a signal handler or interrupt waiting to run
     * on the calling thread (Perl: a deferred %SIG handler; Tcl: a marked
     * asynchronous handler; Lua: a hook set by a signal handler; Ruby: a
     * trap, Thread#raise...). A hold granted meanwhile is given back first.
     */
    bool (*pending)(void);
    /**
     * Lets the language run what is pending, with nothing held by the
     * acquire. Returns true when the wait is to go on for the time it has
     * left (the handlers returned); false to end it: with the error the
     * language's handler raised recorded (RMB_EFOREIGN), or else with
     * InterruptedWait. May instead unwind with the handler's exception.
     */
    bool (*deliver)(void);
    /**
     * Try once without waiting, not interruptible, before an interruptible
     * wait: so that an uncontended acquire - the common case - never pays for
     * the interruptible region (Ruby's costs some 20 us, taking over the
     * signals some 10 us).
     */
    bool try_before_waiting;
} rmb_policy;

/** The language's policy (set once by the module's init); runs calls directly by default. */
void rmb_set_policy(const rmb_policy *policy);
const rmb_policy *rmb_policy_get(void);

/* ------------------------------------------------------------------------ */
/* Signals during waits (Perl, Tcl, Lua: interpreters without their own)     */
/* ------------------------------------------------------------------------ */

/**
 * The `run` of interpreters that wait on their own thread. For the length of
 * an interruptible call, every signal that has a handler (the language's, or
 * its host's) goes first to a C handler that passes it on to that handler,
 * then ends the waits of every waiting client (redmutex_client_interrupt,
 * async-signal-safe, whichever thread the signal lands on) and sets
 * call->signalled; a SIGINT with the default disposition ends them too and
 * sets call->stop (the acquire raises InterruptedWait instead of the process
 * dying holding locks). Ignored signals stay ignored; the dispositions are
 * put back when the last wait ends. See signals.c.
 */
void rmb_signal_run(rmb_call *call, rmb_client *client, bool interruptible);

/** The same for a `run` of its own (Ruby's): between watch and unwatch, nothing may unwind. */
typedef struct rmb_signal_watch {
    int slot;
    unsigned handled, stops;
} rmb_signal_watch;
void rmb_signals_watch(rmb_signal_watch *w, rmb_client *client);
void rmb_signals_unwatch(rmb_signal_watch *w, rmb_call *call);

/** Never takes sig over: the language uses it for its own machinery (call at init). */
void rmb_signals_leave(int sig);

/** Number of signals caught during waits so far (tests, messages). */
unsigned rmb_signals_caught(void);

#endif /* REDMUTEX_BINDING_H */
