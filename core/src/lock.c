/*
 * Lock operations. Each one builds the request for its kind, runs it on all
 * servers through the fan-out, counts votes against the quorum (N/2+1, so
 * N = 1 needs its one server) and updates the local record of the hold.
 */
#define _GNU_SOURCE
#include "internal.h"
#include "kind.h" /* the kinds of the operations table: fair, read, write */
#include "unsettled.h"

#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const redmutex_lock_options default_lock_options = REDMUTEX_LOCK_OPTIONS_INIT;

/* The struct's size in each version (options.c); a new version appends its size. */
static const size_t lock_options_sizes[] = {
    0,
    RM_OPTIONS_END(redmutex_lock_options, on_lost_payload), /* 1 */
};
_Static_assert(sizeof lock_options_sizes / sizeof lock_options_sizes[0] == REDMUTEX_LOCK_OPTIONS_VERSION + 1,
               "one size per lock options version");

static const rm_options_layout lock_options_layout = {"lock options", "redmutex_lock_options_init",
                                                      &default_lock_options, lock_options_sizes,
                                                      REDMUTEX_LOCK_OPTIONS_VERSION + 1};

/* Politeness (see redmutex_lock_acquire): how soon after a release it applies,
   and how long the releasing handle lets the woken waiters try first. */
#define RM_POLITE_WINDOW_NS (10 * RM_NS_PER_MS)
#define RM_POLITE_PAUSE_MS 1

int redmutex_lock_options_init(redmutex_lock_options *opts, unsigned int version)
{
    return rm_options_init(opts, version, &lock_options_layout);
}

static int check_lock_options(const redmutex_lock_options *o)
{
    if (o->flags & ~(uint32_t)REDMUTEX_LOCK_FENCING)
        return rm_fail(REDMUTEX_EINVAL, "lock options: unknown flags 0x%x", o->flags);
    if (o->lease_ms != 0 && (o->lease_ms < 10 || o->lease_ms > REDMUTEX_TIME_MAX_MS))
        return rm_fail(REDMUTEX_EINVAL, "lease_ms = %" PRId64 " is out of range (0 for the watchdog, or 10..%" PRId64 ")",
                       o->lease_ms, (int64_t)REDMUTEX_TIME_MAX_MS);
    if (o->max_hold_ms < 0 || o->max_hold_ms > REDMUTEX_TIME_MAX_MS)
        return rm_fail(REDMUTEX_EINVAL, "max_hold_ms = %" PRId64 " is out of range (0..%" PRId64 ")", o->max_hold_ms,
                       (int64_t)REDMUTEX_TIME_MAX_MS);
    if (o->max_extensions < 0)
        return rm_fail(REDMUTEX_EINVAL, "max_extensions = %" PRId64 " is negative", o->max_extensions);
    return 0;
}

/*
 * Redisson's prefixName(): "<prefix>:{NAME}<suffix>", or "<prefix>:NAME<suffix>"
 * when the name already has a hash tag, so every key of a lock lands in the
 * same cluster slot. Written into buf (RM_KEY_MAX bytes).
 */
static const char *derived_key(const redmutex_lock *l, const char *prefix, const char *suffix, char *buf)
{
    return rm_derived_key(l, prefix, suffix, buf, RM_KEY_MAX);
}

#define CHANNEL_KEY(l, buf) derived_key(l, "redisson_lock__channel", "", buf)
#define TOKEN_KEY(l, buf) derived_key(l, "redisson_lock_token", "", buf)

int redmutex_lock_new(redmutex_lock **out, redmutex_client *c, const char *name, redmutex_kind kind,
                      const redmutex_lock_options *opts)
{
    if (!out || !c || !name)
        return rm_fail(REDMUTEX_EINVAL, "redmutex_lock_new: %s is NULL", !out ? "out" : !c ? "client" : "name");
    size_t len = strnlen(name, REDMUTEX_NAME_MAX + 1);
    if (len == 0)
        return rm_fail(REDMUTEX_EINVAL, "lock name is empty");
    if (len > REDMUTEX_NAME_MAX)
        return rm_fail(REDMUTEX_EINVAL, "lock name is longer than %d bytes", REDMUTEX_NAME_MAX);
    if (!rm_kind_valid((int)kind))
        return rm_fail(REDMUTEX_EINVAL, "unknown lock kind %d", (int)kind);
    redmutex_lock_options o;
    int rc = rm_options_load(&o, opts, &lock_options_layout, "redmutex_lock_new");
    if (rc == 0)
        rc = check_lock_options(&o);
    if (rc)
        return rc;
    redmutex_lock *l = calloc(1, sizeof *l + len + 1);
    if (!l)
        return rm_fail(REDMUTEX_ENOMEM, "out of memory");
    l->c = c;
    l->id = rm_lock_next_id();
    l->refs = 1; /* the user's */
    l->kind = kind;
    l->opts = o;
    l->name_len = len;
    memcpy(l->name, name, len + 1);
    rm_client_lock(c);
    if (c->closed) {
        rm_client_unlock(c);
        free(l);
        return rm_fail(REDMUTEX_ECLOSED, "the client was closed");
    }
    c->refs++;
    rm_client_unlock(c);
    *out = l;
    return 0;
}

const char *redmutex_lock_name(const redmutex_lock *l) { return l ? l->name : ""; }

redmutex_kind redmutex_lock_kind(const redmutex_lock *l) { return l ? l->kind : REDMUTEX_KIND_LOCK; }

/* ---- holds ------------------------------------------------------------- */

void rm_hold_destroy(redmutex_client *c, rm_hold *h)
{
    redmutex_lock *l = h->lock;
    for (rm_hold **p = &l->holds; *p; p = &(*p)->next_in_lock)
        if (*p == h) {
            *p = h->next_in_lock;
            break;
        }
    if (h->prev_in_client)
        h->prev_in_client->next_in_client = h->next_in_client;
    else if (c->holds == h)
        c->holds = h->next_in_client;
    if (h->next_in_client)
        h->next_in_client->prev_in_client = h->prev_in_client;
    free(h);
    rm_lock_unref_locked(c, l); /* the hold's reference */
}

/*
 * Holds and threads. A hold is changed by one operation at a time: the thread
 * that sets `busy` (release, extend, forget) owns it until it clears it;
 * other operations on the same hold wait for that (hold_claim) or skip it.
 * Waiting for a renewal in flight drops c->mu, so ownership, not the mutex,
 * is what keeps a hold alive across it.
 */

/* Clears busy and lets threads waiting for the hold look again. Caller holds c->mu. */
static void hold_unbusy(redmutex_client *c, rm_hold *h)
{
    h->busy = false;
    pthread_cond_broadcast(&c->renew_done);
}

/*
 * Removes h from the watchdog and frees it. The caller owns h (busy) or has
 * the handle to itself (redmutex_lock_free). Caller holds c->mu.
 */
static void hold_forget(redmutex_client *c, rm_hold *h)
{
    h->busy = true;
    h->forgetting = true;
    rm_watchdog_cancel(c, h); /* may wait for a renewal in flight */
    rm_hold_destroy(c, h);
    pthread_cond_broadcast(&c->renew_done);
}

static rm_hold *find_hold(redmutex_lock *l, const char *owner, pid_t pid)
{
    for (rm_hold *h = l->holds; h; h = h->next_in_lock)
        if (h->pid == pid && !h->forgetting && strcmp(h->owner, owner) == 0)
            return h;
    return NULL;
}

static rm_hold *find_hold_by_id(redmutex_lock *l, uint64_t id)
{
    for (rm_hold *h = l->holds; h; h = h->next_in_lock)
        if (h->id == id && !h->forgetting)
            return h;
    return NULL;
}

/* Waits until nobody owns h, then takes it. NULL if it was forgotten meanwhile. Caller holds c->mu. */
static rm_hold *hold_claim(redmutex_client *c, redmutex_lock *l, rm_hold *h)
{
    uint64_t id = h->id;
    while (h && h->busy) {
        pthread_cond_wait(&c->renew_done, &c->mu);
        h = find_hold_by_id(l, id);
    }
    if (h)
        h->busy = true;
    return h;
}

/* A hold for this owner made by another process (inherited through fork). */
static rm_hold *find_foreign_hold(redmutex_lock *l, const char *owner, pid_t pid)
{
    for (rm_hold *h = l->holds; h; h = h->next_in_lock)
        if (h->pid != pid && strcmp(h->owner, owner) == 0)
            return h;
    return NULL;
}

/* Current state, turning HELD/FAILING into LOST once validity has run out
   (whoever notices first: the lost-lock callback fires either way). Caller
   holds c->mu. */
static redmutex_state hold_state(redmutex_client *c, rm_hold *h, int64_t now)
{
    if ((h->state == REDMUTEX_STATE_HELD || h->state == REDMUTEX_STATE_RENEWAL_FAILING) &&
        now >= h->validity_end_ns)
        rm_hold_set_state(c, h, REDMUTEX_STATE_LOST);
    return h->state;
}

/* ---- argument checks ------------------------------------------------- */

static int check_handle(redmutex_lock *l, const char *fn)
{
    if (!l)
        return rm_fail(REDMUTEX_EINVAL, "%s: lock is NULL", fn);
    return rm_client_usable(l->c);
}

/* The owner key of the local hold: explicit owner, thread owner (rlock) or "" (plain default). */
static int resolve_owner(redmutex_lock *l, const char *owner, char out[RM_VALUE_MAX + 1])
{
    if (owner) {
        size_t len = strnlen(owner, REDMUTEX_OWNER_MAX + 1);
        if (len == 0)
            return rm_fail(REDMUTEX_EINVAL, "lock '%s': owner id is empty (pass NULL for the default owner)",
                           l->name);
        if (len > REDMUTEX_OWNER_MAX)
            return rm_fail(REDMUTEX_EINVAL, "lock '%s': owner id is longer than %d bytes", l->name,
                           REDMUTEX_OWNER_MAX);
        memcpy(out, owner, len + 1);
    } else if (l->kind != REDMUTEX_KIND_LOCK) {
        /* "<client id>:<thread id>", as redmutex_client_thread_owner() writes it (twice per pair) */
        memcpy(out, l->c->id, REDMUTEX_CLIENT_ID_LEN);
        out[REDMUTEX_CLIENT_ID_LEN] = ':';
        rm_i64_str(out + REDMUTEX_CLIENT_ID_LEN + 1, rm_thread_id());
    } else {
        out[0] = '\0';
    }
    return 0;
}

/* What an owner is stored as on the servers, for the kinds whose value is
   not a fresh token: the owner id, or the kind's form of it (kind.h). */
static void owner_field(const redmutex_lock *l, const char *owner_key, char out[RM_VALUE_MAX + 1])
{
    const rm_kind_ops *ops = rm_kind_ops_of(l->kind);
    if (ops)
        ops->field(l, owner_key, out);
    else
        memcpy(out, owner_key, RM_VALUE_MAX + 1);
}

/* A fresh 128-bit random token (lock value, latch id). Fails closed: a
   predictable token would let another client release or extend the lock. */
static int new_token(char out[33])
{
    unsigned char b[16];
    if (rm_random_bytes(b, sizeof b) != 0)
        return rm_fail(REDMUTEX_ESYSTEM, "the system gave no random bytes (getrandom failed); nothing was sent");
    rm_hex(out, b, sizeof b);
    return 0;
}

static int release_owner(redmutex_lock *l, const char *owner_key, bool explicit_owner, int64_t deadline_ns);
static void release_value(redmutex_lock *l, const char *value);

/* Whether this process holds the lock for owner through this handle (reentrancy). */
static bool holds_it(redmutex_lock *l, const char *owner)
{
    rm_client_lock(l->c);
    bool held = find_hold(l, owner, rm_pid()) != NULL;
    rm_client_unlock(l->c);
    return held;
}

static int check_wait(const redmutex_lock *l, int64_t ms)
{
    if (ms == REDMUTEX_WAIT_FOREVER || (ms >= 0 && ms <= REDMUTEX_TIME_MAX_MS))
        return 0;
    return rm_fail(REDMUTEX_EINVAL,
                   "lock '%s': wait of %" PRId64 " ms is invalid (0..%" PRId64 ", or REDMUTEX_WAIT_FOREVER)",
                   l->name, ms, (int64_t)REDMUTEX_TIME_MAX_MS);
}

static int64_t lease_of(const redmutex_lock *l)
{
    return l->opts.lease_ms ? l->opts.lease_ms : l->c->opts.watchdog_lease_ms;
}

/* ---- votes -------------------------------------------------------------- */

typedef struct votes {
    size_t yes, no, failed;   /* granted / refused by a live server / no usable answer */
    size_t errors;            /* error or malformed replies (among failed) */
    size_t gone;              /* nested acquisitions that found the owner's field gone (among no) */
    size_t young;             /* grants of servers restarted less than a lease ago (among no) */
    int64_t count, fence;     /* max over yes votes */
    int64_t ttl;              /* min positive pttl over no votes, -1 when unknown */
    /* A hold handed over by a releasing script (fair) lives shorter than the
       lease until its watchdog extends it: min TTL the yes votes reported
       below the lease, -1 when none. */
    int64_t granted_ttl;
    int64_t value[REDMUTEX_SERVERS_MAX]; /* per-server number (new ttl, count...) */
    bool yes_at[REDMUTEX_SERVERS_MAX];
    bool unknown_at[REDMUTEX_SERVERS_MAX]; /* request may have run: outcome unknown */
    int error;                /* first server error reply code, with its message saved */
    char error_msg[300];
} votes;

static void votes_error(votes *v, size_t i, int code)
{
    v->failed++;
    v->errors++;
    v->unknown_at[i] = false;
    if (!v->error) {
        v->error = code;
        snprintf(v->error_msg, sizeof v->error_msg, "%s", redmutex_last_error());
    }
}

static const char *server_name(const redmutex_lock *l, size_t i) { return l->c->servers[i].ep.display; }

typedef enum { ACQ_SET, ACQ_SCRIPT } acq_form;

typedef struct acquire_ctx {
    redmutex_lock *l;
    acq_form form;
    bool wait_replicas;
    int reply_index; /* reply index of the acquisition (0, or 1 behind a release) */
    int pttl_index;  /* reply index of a pipelined PTTL, or -1 */
    int wait_index;  /* reply index of WAIT, or -1 */
    int64_t lease_ms;
    votes v;
} acquire_ctx;

/*
 * Whether server i came back with a new run_id (a restart, perhaps without
 * its data) less than the longest lease ago. Its grant then counts as no
 * vote (Redlock's "delayed restart", done by the client): a holder that was
 * granted the lock by it before the restart may still hold a majority with
 * it, and can learn of the restart only at its next request there. The
 * longest lease is taken to be the larger of the client's watchdog lease and
 * this lock's lease. Only with several servers: one server has no majority
 * to protect. A client sees a restart only if it talked to the server before.
 */
static bool restarted_recently(const redmutex_lock *l, size_t i)
{
    redmutex_client *c = l->c;
    int64_t seen = atomic_load(&c->servers[i].restart_seen_ns);
    if (c->n == 1 || seen == 0)
        return false;
    int64_t longest = c->opts.watchdog_lease_ms > lease_of(l) ? c->opts.watchdog_lease_ms : lease_of(l);
    return rm_now_ns() - seen < longest * RM_NS_PER_MS + rm_drift_ns(longest);
}

/* Classifies server i's answer to an acquire request. */
static void acquire_vote(acquire_ctx *a, rm_call *call, size_t i)
{
    rm_slot *s = &call->slots[i];
    votes *v = &a->v;
    if (s->err) {
        v->failed++;
        /* A request that went out may have been applied: clean it up. */
        v->unknown_at[i] = rm_slot_unknown(s);
        if (!v->error && s->err != REDMUTEX_ECONN) {
            v->error = s->err;
            snprintf(v->error_msg, sizeof v->error_msg, "%s", s->msg);
        }
        return;
    }
    rm_reply *r = s->replies[a->reply_index];
    if (r->type == RM_REPLY_ERROR) {
        votes_error(v, i, rm_reply_error(r, "acquire", a->l->name, server_name(a->l, i)));
        return;
    }
    bool granted = false;
    if (a->form == ACQ_SET) {
        if (r->type == RM_REPLY_STATUS && strcmp(r->str, "OK") == 0) {
            granted = true;
            if (v->count < 1)
                v->count = 1;
        } else if (r->type == RM_REPLY_NIL) {
            v->no++;
            rm_reply *t = a->pttl_index >= 0 ? s->replies[a->pttl_index] : NULL;
            if (t && t->type == RM_REPLY_INTEGER && t->integer >= 0 && (v->ttl < 0 || t->integer < v->ttl))
                v->ttl = t->integer;
        } else {
            votes_error(v, i, rm_fail(REDMUTEX_EPROTOCOL, "%s: unexpected reply to SET", server_name(a->l, i)));
            return;
        }
    } else {
        if (r->type != RM_REPLY_ARRAY || r->elements < 2 || r->element[0]->type != RM_REPLY_INTEGER ||
            r->element[1]->type != RM_REPLY_INTEGER ||
            (r->element[0]->integer == 1 && (r->elements < 3 || r->element[2]->type != RM_REPLY_INTEGER))) {
            votes_error(v, i,
                        rm_fail(REDMUTEX_EPROTOCOL, "%s: unexpected reply to the acquire script",
                                server_name(a->l, i)));
            return;
        }
        if (r->element[0]->integer == 2)
            v->gone++; /* and a "no" */
        if (r->element[0]->integer == 1) {
            granted = true;
            if (r->element[1]->integer > v->count)
                v->count = r->element[1]->integer;
            if (r->element[2]->integer > v->fence)
                v->fence = r->element[2]->integer;
            if (r->elements >= 4 && r->element[3]->type == RM_REPLY_INTEGER && r->element[3]->integer >= 0 &&
                r->element[3]->integer < a->lease_ms &&
                (v->granted_ttl < 0 || r->element[3]->integer < v->granted_ttl))
                v->granted_ttl = r->element[3]->integer;
        } else {
            v->no++;
            long long ttl = r->element[1]->integer;
            if (ttl > 0 && (v->ttl < 0 || ttl < v->ttl))
                v->ttl = ttl;
        }
    }
    if (granted && a->wait_replicas) {
        rm_reply *w = s->replies[a->wait_index];
        if (w && w->type == RM_REPLY_ERROR) {
            /* WAIT refused (an ACL without it, say): say so, and undo the hold. */
            votes_error(v, i, rm_reply_error(w, "WAIT after acquiring", a->l->name, server_name(a->l, i)));
            v->unknown_at[i] = true;
            return;
        }
        if (!w || w->type != RM_REPLY_INTEGER || w->integer < a->l->c->opts.min_replicas) {
            /* Taken on the master but not known to the replicas: not a vote,
               and it must be undone. */
            votes_error(v, i,
                        rm_fail(REDMUTEX_EREPLICAS,
                                "lock '%s' on %s: %lld of %" PRId64 " replicas acknowledged within %" PRId64 " ms",
                                a->l->name, server_name(a->l, i),
                                w && w->type == RM_REPLY_INTEGER ? w->integer : 0LL,
                                a->l->c->opts.min_replicas, a->l->c->opts.replica_timeout_ms));
            v->unknown_at[i] = true;
            return;
        }
    }
    if (granted) {
        v->yes_at[i] = true; /* part of the hold, renewed and released with it, in any case */
        if (restarted_recently(a->l, i)) {
            v->no++;
            v->young++;
        } else {
            v->yes++;
        }
    }
}

static void acquire_count(acquire_ctx *a, rm_call *call)
{
    memset(&a->v, 0, sizeof a->v);
    a->v.ttl = -1;
    a->v.granted_ttl = -1;
    for (size_t i = 0; i < call->n; i++)
        if (call->slots[i].status == RM_SLOT_DONE)
            acquire_vote(a, call, i);
}

static bool acquire_decided(rm_call *call, void *ud)
{
    acquire_ctx *a = ud;
    acquire_count(a, call);
    size_t q = call->c->quorum;
    return a->v.yes >= q || a->v.no + a->v.failed > call->n - q;
}

/* ---- request helpers ---------------------------------------------------- */

typedef struct argbuf {
    const char *argv[12];
    char nums[4][24];
    char channel[RM_KEY_MAX];
    rm_kargs k; /* kinds of the operations table */
} argbuf;

static void add_wait(rm_req *req, redmutex_client *c, char *nbuf, char *tbuf, const char **argv)
{
    snprintf(nbuf, 24, "%" PRId64, c->opts.min_replicas);
    snprintf(tbuf, 24, "%" PRId64, c->opts.replica_timeout_ms);
    argv[0] = "WAIT";
    argv[1] = nbuf;
    argv[2] = tbuf;
    req->cmds[req->ncmds++] = (rm_cmd){-1, 3, argv, NULL};
}

static int64_t command_deadline(redmutex_client *c, bool with_wait)
{
    int64_t ms = c->opts.command_timeout_ms;
    if (with_wait)
        ms += c->opts.replica_timeout_ms;
    return rm_deadline_after_ms(ms);
}

/* Builds the release request for `value` into req (argument storage in ab). */
static void release_request(redmutex_lock *l, const char *value, const char *latch_key, int64_t lease_ms,
                            rm_req *req, argbuf *ab)
{
    int64_t latch_ms = l->c->opts.command_timeout_ms * 10;
    rm_i64_str(ab->nums[0], latch_ms);
    rm_i64_str(ab->nums[1], lease_ms);
    req->ncmds = 1;
    req->order_name = l->name;
    const rm_kind_ops *ops = rm_kind_ops_of(l->kind);
    if (ops) {
        ab->channel[0] = '\0';
        req->cmds[0] = ops->release(l, value, latch_key, lease_ms, latch_ms, &ab->k);
    } else if (l->kind == REDMUTEX_KIND_LOCK) {
        const char *argv[] = {"3", l->name, CHANNEL_KEY(l, ab->channel), latch_key, value, ab->nums[0]};
        memcpy(ab->argv, argv, sizeof argv);
        req->cmds[0] = (rm_cmd){RM_SCRIPT_LOCK_RELEASE, 6, ab->argv, NULL};
    } else {
        const char *argv[] = {"3",   l->name,   CHANNEL_KEY(l, ab->channel), latch_key, "0", ab->nums[1],
                              value, "publish", ab->nums[0]};
        memcpy(ab->argv, argv, sizeof argv);
        req->cmds[0] = (rm_cmd){RM_SCRIPT_RLOCK_RELEASE, 9, ab->argv, NULL};
    }
}

/* redisson_unlock_latch:{NAME}:<request id> */
static void make_latch_key(const redmutex_lock *l, const char *id, char *out)
{
    char suffix[40] = ":";
    strncat(suffix, id, sizeof suffix - 2);
    derived_key(l, "redisson_unlock_latch", suffix, out);
}

/* A final release that may still run where its outcome is unknown is
   sent again by the next acquisition (see unsettled.h); `among` limits it to
   the servers it was sent to. True when recorded: its latches must stay. */
static bool note_unsettled(redmutex_lock *l, const rm_call *call, const bool *among, const char *value,
                           const rm_cmd *release, const char *latch_key)
{
    bool unknown[REDMUTEX_SERVERS_MAX] = {false};
    for (size_t i = 0; call->slots && i < call->n; i++)
        unknown[i] = (!among || among[i]) && rm_slot_unknown(&call->slots[i]);
    return rm_unsettled_note(l->c, l->name, value, release, latch_key, call->started_ns, l->c->opts.command_timeout_ms * 10,
                             unknown);
}

/* After a release was answered, its latch is deleted with the next request on each connection. */
static void forget_latch(rm_call *call, const char *latch_key)
{
    const char *argv[2] = {"DEL", latch_key};
    for (size_t i = 0; call->slots && i < call->n; i++) {
        rm_conn *conn = call->slots[i].conn;
        if (conn && call->slots[i].err == 0 && conn->later_count < 64 &&
            rm_format_command(&conn->later, 2, argv, NULL) == 0)
            conn->later_count++;
    }
}

/* ---- acquire ----------------------------------------------------------- */

/* The type check after a first failed SET NX is decided once a wrong type on
   a majority is certain or ruled out. */
static bool inspect_decided(rm_call *call, void *ud)
{
    (void)ud;
    size_t wrongtype = 0, other = 0;
    for (size_t i = 0; i < call->n; i++) {
        rm_slot *s = &call->slots[i];
        rm_reply *r = s->status == RM_SLOT_DONE && !s->err ? s->replies[0] : NULL;
        if (r && r->type == RM_REPLY_ERROR && strstr(r->str, "WRONGTYPE"))
            wrongtype++;
        else if (r)
            other++;
    }
    return wrongtype > call->n - call->c->quorum || other >= call->c->quorum;
}

/*
 * Records a successful acquisition by owner (value on the servers), sent at
 * `started`, with the votes that granted it, and schedules its renewal or
 * expiry notice. Caller holds c->mu.
 */
static int record_hold(redmutex_lock *l, const char *owner, const char *value, int64_t started, const votes *v)
{
    redmutex_client *c = l->c;
    int64_t lease = lease_of(l);
    pid_t pid = rm_pid();
    if (c->closed)
        return rm_fail(REDMUTEX_ECLOSED, "the client was closed while lock '%s' was being acquired", l->name);
    rm_hold *h = find_hold(l, owner, pid);
    /* A plain lock shared by threads: another thread's release of the
       previous hold deleted the key (or this SET NX could not have
       succeeded) and is about to forget it. Wait for that, not ELOST. */
    while (h && h->busy && l->kind == REDMUTEX_KIND_LOCK) {
        uint64_t id = h->id;
        pthread_cond_wait(&c->renew_done, &c->mu);
        h = find_hold_by_id(l, id);
        if (!h || h->forgetting)
            h = find_hold(l, owner, pid);
    }
    if (h && (l->kind == REDMUTEX_KIND_LOCK || hold_state(c, h, rm_now_ns()) == REDMUTEX_STATE_LOST))
        /* A plain lock is held once per owner, and a lost hold is not
           continued: the caller must release the old one first. */
        return rm_fail(REDMUTEX_ELOST, "lock '%s': this owner's earlier hold was lost; release it first", l->name);
    bool created = !h;
    if (!h) {
        size_t olen = strlen(owner) + 1, vlen = strlen(value) + 1;
        /* One allocation: the hold, then per-server generations, owner and value. */
        h = calloc(1, sizeof *h + c->n * sizeof(uint64_t) + olen + vlen);
        if (!h)
            return rm_fail(REDMUTEX_ENOMEM, "out of memory");
        h->lock = l;
        l->refs++;
        h->id = ++c->next_hold_id;
        h->heap_index = SIZE_MAX;
        h->pid = pid;
        h->generations = (uint64_t *)(h + 1);
        h->owner = (char *)(h->generations + c->n);
        h->value = h->owner + olen;
        memcpy(h->owner, owner, olen);
        memcpy(h->value, value, vlen);
        h->next_in_lock = l->holds;
        l->holds = h;
        h->next_in_client = c->holds;
        if (c->holds)
            c->holds->prev_in_client = h;
        c->holds = h;
        h->fence = v->fence;
        h->acquired_ns = started;
        h->hold_deadline_ns = l->opts.max_hold_ms ? started + l->opts.max_hold_ms * RM_NS_PER_MS : INT64_MAX;
    }
    /* The life of each server that may hold it now (granted, or its answer
       unknown); 0 for servers that refused. A server that restarts later
       stops counting for this hold, and a release goes only where it may
       hold. A nested acquisition adds the servers that granted it. */
    for (size_t i = 0; i < c->n; i++)
        if (v->yes_at[i] || v->unknown_at[i])
            h->generations[i] = c->servers[i].generation + 1;
    h->count = v->count;
    h->lease_ms = lease;
    h->watchdog = l->opts.lease_ms == 0;
    h->validity_end_ns = started + lease * RM_NS_PER_MS - rm_drift_ns(lease);
    if (v->granted_ttl >= 0) /* handed over with a short TTL (kind.h, fair): valid that long */
        h->validity_end_ns = started + v->granted_ttl * RM_NS_PER_MS - rm_drift_ns(v->granted_ttl);
    h->state = REDMUTEX_STATE_HELD;
    h->release_id[0] = '\0'; /* a latch from an earlier, unfinished release must not answer the next one */
    int rc = rm_watchdog_schedule(c, h);
    if (rc == 0 && v->granted_ttl >= 0) /* ... and extended to the full lease a third of that later */
        rm_watchdog_renew_by(c, h, started + v->granted_ttl * RM_NS_PER_MS * 3 / 10);
    if (rc != 0 && created)
        rm_hold_destroy(c, h); /* the caller undoes the acquisition on the servers */
    return rc;
}

/*
 * Redlock fencing. Each server keeps its own counter and INCRs it whenever it
 * grants the lock, even in attempts that fail overall, so counters drift
 * apart and "the largest token among the voters" is not monotonic across
 * different majorities by itself. Before the token T is handed out, every
 * server is asked to raise its counter to T, and this must be confirmed by a
 * majority of the servers that granted the lock. Any later holder needs a
 * majority too, which shares a server with that one; on that server it can
 * only be granted after our key is gone, hence after the raise, so its INCR
 * yields more than T. One extra round trip, for fenced Redlock locks only.
 */
static bool fenced_quorum(redmutex_lock *l, rm_call *call, const votes *v, int64_t deadline)
{
    char token[24];
    snprintf(token, sizeof token, "%" PRId64, v->fence);
    char token_key[RM_KEY_MAX];
    const char *argv[] = {"1", TOKEN_KEY(l, token_key), token};
    rm_req req = {1, {{RM_SCRIPT_FENCE_RATCHET, 3, argv, NULL}}, l->name};
    bool granted[REDMUTEX_SERVERS_MAX];
    memcpy(granted, v->yes_at, sizeof granted);
    rm_call_run(call, &req, deadline, NULL, NULL);
    size_t confirmed = 0;
    for (size_t i = 0; i < call->n; i++) {
        rm_reply *r = call->slots[i].err ? NULL : call->slots[i].replies[0];
        if (granted[i] && r && r->type == RM_REPLY_INTEGER)
            confirmed++;
    }
    return confirmed >= l->c->quorum;
}

enum { ATTEMPT_WON = 0, ATTEMPT_BUSY = 1 };

typedef struct acq_cmd {
    const char *argv[8];
    char lease_s[24];
    char token_key[RM_KEY_MAX];
    rm_kargs k; /* kinds of the operations table */
} acq_cmd;

/*
 * The acquisition command for `value`: the bare SET NX PX redis-py sends
 * (plain lock without fencing; argv[6..7] hold "PTTL NAME" for pipelining),
 * or the kind's acquire script. Argument storage lives in *st.
 */
static rm_cmd acquire_command(redmutex_lock *l, const char *value, bool nested, int mode, const char *nonce,
                              acq_cmd *st, acq_form *form)
{
    bool fencing = l->opts.flags & REDMUTEX_LOCK_FENCING;
    const rm_kind_ops *ops = rm_kind_ops_of(l->kind);
    if (ops) {
        redmutex_client *c = l->c;
        /* A hand-off by the releasing script needs a watchdog to extend it
           and one server whose reply needs no WAIT (kind_fair.c). */
        rm_acq_in in = {value, lease_of(l), fencing, nested, mode, nonce,
                        l->opts.lease_ms == 0 && c->n == 1 && c->opts.min_replicas == 0};
        *form = ACQ_SCRIPT;
        return ops->acquire(l, &in, &st->k);
    }
    rm_i64_str(st->lease_s, lease_of(l));
    if (l->kind == REDMUTEX_KIND_LOCK && !fencing) {
        *form = ACQ_SET;
        const char *argv[] = {"SET", l->name, value, "NX", "PX", st->lease_s, "PTTL", l->name};
        memcpy(st->argv, argv, sizeof argv);
        return (rm_cmd){-1, 6, st->argv, NULL};
    }
    *form = ACQ_SCRIPT;
    TOKEN_KEY(l, st->token_key);
    if (l->kind == REDMUTEX_KIND_LOCK) {
        const char *argv[] = {"2", l->name, st->token_key, value, st->lease_s, "1"};
        memcpy(st->argv, argv, sizeof argv);
        return (rm_cmd){RM_SCRIPT_LOCK_ACQUIRE, 6, st->argv, NULL};
    }
    const char *argv[] = {"2", l->name, st->token_key, st->lease_s, value, fencing ? "1" : "0", nested ? "1" : "0"};
    memcpy(st->argv, argv, sizeof argv);
    return (rm_cmd){RM_SCRIPT_RLOCK_ACQUIRE, 7, st->argv, NULL};
}

typedef struct attempt_info {
    int64_t ttl_ms;   /* the holder's remaining lease, -1 when unknown */
    bool split;       /* some servers granted, but not a majority */
    /* Set by the caller: the attempt is part of a wait (a fair lock then
       queues), and that wait's id (kind.h). */
    bool waiting;
    const char *nonce;
} attempt_info;

/* Checks, before an attempt, the local record of owner's hold: *nested is
   set when this owner holds the reentrant lock already. ATTEMPT_BUSY for a
   plain lock held through this handle; ELOST for a hold lost and not yet
   released. */
static int check_local_hold(redmutex_lock *l, const char *owner, bool *nested)
{
    redmutex_client *c = l->c;
    int rc = 0;
    *nested = false;
    rm_client_lock(c);
    rm_hold *h = find_hold(l, owner, rm_pid());
    if (h) {
        redmutex_state st = hold_state(c, h, rm_now_ns());
        if (st == REDMUTEX_STATE_LOST)
            rc = rm_fail(REDMUTEX_ELOST,
                         "lock '%s': this owner's earlier hold was lost; release it before acquiring again", l->name);
        else if (l->kind == REDMUTEX_KIND_LOCK)
            rc = ATTEMPT_BUSY; /* not reentrant: held through this handle means held */
        else
            /* After a last release whose outcome is unknown the servers may
               or may not still have the field: acquire afresh. */
            *nested = !(h->release_id[0] && h->count <= 1);
    }
    rm_client_unlock(c);
    return rc;
}

/* A nested acquisition found this owner's field gone on enough servers that
   no majority can still hold it: the hold is lost, and is reported so. */
static int nested_lost(redmutex_lock *l, const char *owner)
{
    redmutex_client *c = l->c;
    rm_client_lock(c);
    rm_hold *h = find_hold(l, owner, rm_pid());
    if (h && !h->busy) {
        rm_watchdog_cancel(c, h);
        rm_hold_set_state(c, h, REDMUTEX_STATE_LOST);
    } else if (h) {
        rm_hold_set_state(c, h, REDMUTEX_STATE_LOST);
    }
    rm_client_unlock(c);
    return rm_fail(REDMUTEX_ELOST,
                   "lock '%s' was lost while held (its key or this owner's field is gone); nothing was re-created",
                   l->name);
}

/* Takes back whatever the attempt may have left on servers that granted it
   or whose answer is unknown. The release travels behind the acquisition on
   each server (per-server order), and is not waited for beyond the attempt's
   deadline: a slow server still gets it, after the acquisition it undoes. */
static void undo_attempt(redmutex_lock *l, rm_call *call, const char *value, const votes *v, int64_t deadline)
{
    bool dirty[REDMUTEX_SERVERS_MAX] = {false};
    bool any = false;
    for (size_t i = 0; i < call->n; i++) {
        dirty[i] = v->yes_at[i] || v->unknown_at[i];
        any = any || dirty[i];
    }
    char latch_id[33], latch_key[RM_KEY_MAX];
    if (!any || new_token(latch_id) != 0)
        return;
    make_latch_key(l, latch_id, latch_key);
    rm_req rel;
    argbuf ab;
    release_request(l, value, latch_key, lease_of(l), &rel, &ab);
    int saved = redmutex_last_error_code();
    char saved_msg[512];
    snprintf(saved_msg, sizeof saved_msg, "%s", redmutex_last_error());
    call->only = dirty;
    call->strict_deadline = true;
    call->must_send = true;
    rm_call_run(call, &rel, deadline, NULL, NULL);
    call->only = NULL;
    if (!note_unsettled(l, call, dirty, value, &rel.cmds[0], latch_key))
        forget_latch(call, latch_key);
    if (saved)
        rm_fail(saved, "%s", saved_msg);
}

/* After a first SET NX found the key taken: the holder's TTL, and whether the
   key is a lock of this kind at all, decide how to wait. */
static int inspect_after_set(redmutex_lock *l, rm_call *call, int64_t deadline, attempt_info *info)
{
    redmutex_client *c = l->c;
    const char *iargv[] = {"1", l->name, "string", ""};
    rm_req ireq = {1, {{RM_SCRIPT_INSPECT, 4, iargv, NULL}}, NULL};
    rm_call_run(call, &ireq, deadline, c->n > 1 ? inspect_decided : NULL, NULL);
    size_t wrongtype = 0;
    for (size_t i = 0; i < call->n; i++) {
        rm_reply *r = call->slots[i].err ? NULL : call->slots[i].replies[0];
        if (!r)
            continue;
        if (r->type == RM_REPLY_ERROR) {
            /* Enough servers holding another kind of key that no majority
               can ever be had: an error, not a wait. */
            if (rm_reply_error(r, "acquire", l->name, server_name(l, i)) == REDMUTEX_EWRONGTYPE &&
                ++wrongtype > c->n - c->quorum)
                return REDMUTEX_EWRONGTYPE;
        } else if (r->type == RM_REPLY_ARRAY && r->elements == 3 && r->element[0]->type == RM_REPLY_INTEGER &&
                   r->element[1]->type == RM_REPLY_INTEGER) {
            long long ttl = r->element[0]->integer == 0 ? 0 : r->element[1]->integer; /* 0: released meanwhile */
            if (ttl >= 0 && (info->ttl_ms < 0 || ttl < info->ttl_ms))
                info->ttl_ms = ttl;
        }
    }
    return ATTEMPT_BUSY;
}

/*
 * One acquisition attempt on all servers. Returns ATTEMPT_WON (hold recorded),
 * ATTEMPT_BUSY (held elsewhere, or undecided while a majority can still
 * answer; *info says when to retry) or an error code. The whole attempt,
 * cleanup included, ends by one deadline.
 */
static int attempt(redmutex_lock *l, const char *owner, const char *value, bool retry, attempt_info *info)
{
    redmutex_client *c = l->c;
    int64_t lease = lease_of(l);
    bool fencing = l->opts.flags & REDMUTEX_LOCK_FENCING;
    info->ttl_ms = -1;
    info->split = false;
    bool nested;
    int rc = check_local_hold(l, owner, &nested);
    if (rc)
        return rc;

    acq_cmd ac;
    acquire_ctx a = {l, ACQ_SCRIPT, c->opts.min_replicas > 0, 0, -1, -1, lease, {0}};
    rm_req req = {0};
    req.order_name = l->name;
    /* Releases of this name whose outcome is unknown somewhere go first,
       again, in the same request (see unsettled.h). */
    rm_unsettled_cmds unsettled = {0};
    if (!nested)
        rm_unsettled_take(c, l->name, value, &unsettled);
    for (size_t k = 0; k < unsettled.n; k++) {
        rm_unsettled_copy *u = &unsettled.copy[k];
        req.cmds[req.ncmds++] = (rm_cmd){u->script, u->argc, u->argv, u->lens};
        req.cmds[req.ncmds++] = (rm_cmd){-1, 6, u->set_argv, NULL};
    }
    a.reply_index = (int)req.ncmds;
    const char *wait_argv[3];
    char nbuf[24], tbuf[24];
    int mode = !info->waiting ? RM_ACQ_TRY : retry ? RM_ACQ_RETRY : RM_ACQ_FIRST;
    req.cmds[req.ncmds++] = acquire_command(l, value, nested, mode, info->nonce, &ac, &a.form);
    if (a.form == ACQ_SET && retry) {
        /* While waiting, learn the holder's TTL in the same round trip
           (the first failure checked the key's type with INSPECT). */
        a.pttl_index = (int)req.ncmds;
        req.cmds[req.ncmds++] = (rm_cmd){-1, 2, ac.argv + 6, NULL};
    }
    if (a.wait_replicas) {
        a.wait_index = (int)req.ncmds;
        add_wait(&req, c, nbuf, tbuf, wait_argv);
    }

    rm_call call;
    if (rm_call_begin(&call, c) != 0) {
        rm_unsettled_cmds_free(&unsettled);
        return REDMUTEX_ENOMEM;
    }
    int64_t deadline = command_deadline(c, a.wait_replicas);
    rc = rm_call_run(&call, &req, deadline, c->n > 1 ? acquire_decided : NULL, &a);
    if (rc == 0)
        rm_unsettled_done(c, &unsettled, &call, 0);
    rm_unsettled_cmds_free(&unsettled);
    if (rc) {
        rm_call_end(&call);
        return rc;
    }
    int64_t started = call.started_ns;
    acquire_count(&a, &call);
    votes *v = &a.v;
    if (fencing && c->n > 1 && v->yes >= c->quorum && !fenced_quorum(l, &call, v, deadline))
        v->yes = 0; /* the token could not be made safe: the attempt fails and is undone */
    int64_t validity_ns = lease * RM_NS_PER_MS - (rm_now_ns() - started) - rm_drift_ns(lease);
    size_t q = c->quorum;
    /* Servers that cannot answer at all: transport failures and error
       replies, not those the early decision merely did not wait for. */
    size_t broken = rm_call_failed(&call) + v->errors;

    if (v->yes >= q && validity_ns > 0) {
        rm_client_lock(c);
        rc = record_hold(l, owner, value, started, v);
        rm_client_unlock(c);
        if (rc == 0) {
            rm_call_end(&call);
            if (info->waiting && c->n > 1 && rm_kind_ops_of(l->kind) && rm_kind_ops_of(l->kind)->server_queue) {
                /* A fair Redlock waiter won a majority: it leaves the queues of the others. */
                bool others[REDMUTEX_SERVERS_MAX];
                for (size_t i = 0; i < c->n; i++)
                    others[i] = !v->yes_at[i];
                rm_fair_leave(l, value, others);
            }
            return ATTEMPT_WON;
        }
    } else if (nested && v->gone > c->n - q) {
        rc = nested_lost(l, owner);
    } else if (v->yes >= q) {
        rc = ATTEMPT_BUSY; /* too slow to count: undone below, then tried again */
        info->ttl_ms = 0;
    } else if (v->error == REDMUTEX_EREPLICAS) {
        rc = rm_fail(REDMUTEX_EREPLICAS, "%s", v->error_msg);
    } else if (v->yes + v->no >= q) {
        rc = ATTEMPT_BUSY;
        info->ttl_ms = v->ttl;
        info->split = v->yes > 0;
    } else if (v->error == REDMUTEX_EWRONGTYPE || v->error == REDMUTEX_EAUTH || (v->error && v->yes + v->no == 0)) {
        rc = rm_fail(v->error, "%s", v->error_msg);
    } else if (broken > c->n - q) {
        rc = rm_call_fail(&call, "acquire", l->name); /* no majority can answer */
    } else {
        /* A minority is down or slow and the rest did not settle it: keep
           waiting while a majority can still answer (Redlock's purpose). */
        rc = ATTEMPT_BUSY;
        info->split = v->yes > 0;
    }
    if (rc != ATTEMPT_WON)
        undo_attempt(l, &call, value, v, deadline);
    if (rc == ATTEMPT_BUSY && a.form == ACQ_SET && !retry)
        rc = inspect_after_set(l, &call, deadline, info);
    rm_call_end(&call);
    return rc;
}

/*
 * A fair waiter woken by a message on its channel: if a releasing script
 * handed the lock to this wait (kind_fair.c), records the hold and returns 0,
 * without a round trip. The hand-off's TTL runs to the end of the waiter's
 * record, which its last attempt (sent at sent_ns) refreshed: it is valid
 * that long from then, and the watchdog extends it to the full lease a third
 * of that later. ATTEMPT_BUSY when
 * the message was no hand-off (or one too old to trust: the next attempt
 * then finds the hold on the server), or an error (the caller then leaves
 * the queue, which gives the lock back).
 */
static int take_grant(redmutex_lock *l, rm_waiter *w, const char *owner_key, const char *value, const char *nonce,
                      int64_t sent_ns)
{
    char msg[64];
    int64_t fence = 0;
    int64_t ttl = RM_FAIR_WAITER_LEASE_MS;
    if (!rm_waiter_message(l->c, w, msg, sizeof msg) || !rm_fair_grant_parse(msg, nonce, &fence))
        return ATTEMPT_BUSY;
    if (rm_now_ns() >= sent_ns + ttl * RM_NS_PER_MS - rm_drift_ns(ttl))
        return ATTEMPT_BUSY;
    votes v;
    memset(&v, 0, sizeof v);
    v.ttl = -1;
    v.granted_ttl = ttl;
    v.yes = 1;
    v.yes_at[0] = true; /* hand-offs happen on one server only */
    v.count = 1;
    v.fence = fence;
    rm_client_lock(l->c);
    int rc = record_hold(l, owner_key, value, sent_ns, &v);
    rm_client_unlock(l->c);
    return rc;
}

/* A wait ended early: by redmutex_client_interrupt (or the interrupt callback), or by a close. */
static int interrupted_wait(const redmutex_lock *l)
{
    if (!rm_client_open(l->c))
        return rm_fail(REDMUTEX_ECLOSED, "the client was closed while waiting for lock '%s'", l->name);
    return rm_fail(REDMUTEX_EINTR, "waiting for lock '%s' was interrupted", l->name);
}

int redmutex_lock_acquire(redmutex_lock *l, const char *owner, int64_t wait_ms)
{
    int rc = check_handle(l, "redmutex_lock_acquire");
    if (rc)
        return rc;
    if ((rc = check_wait(l, wait_ms)))
        return rc;
    redmutex_client *c = l->c;
    char owner_key[RM_VALUE_MAX + 1], value[RM_VALUE_MAX + 1];
    if ((rc = resolve_owner(l, owner, owner_key)))
        return rc;
    if (l->kind == REDMUTEX_KIND_LOCK && !owner) {
        if ((rc = new_token(value)))
            return rc;
    } else
        owner_field(l, owner_key, value);

    /* A fair lock's waiters queue on the servers (kind_fair.c): each waits on
       its own channel, with an id that a hand-off message names. */
    const rm_kind_ops *ops = rm_kind_ops_of(l->kind);
    bool fair = ops && ops->server_queue;
    char nonce[17] = "";
    if (fair && wait_ms != 0 && (rc = rm_fair_new_nonce(nonce)))
        return rc;
    /* From here on, redmutex_client_interrupt() ends this call's wait. */
    rm_wait wait = {0};
    if (wait_ms != 0 && (rc = rm_wait_begin(c, &wait)) != 0)
        return rc;
    int64_t start = rm_now_ns();
    int64_t deadline = rm_deadline_after_ms(wait_ms);
    attempt_info info = {-1, false, wait_ms != 0, nonce};
    int64_t sent_ns = start; /* when the last attempt was sent */
    /* Threads of this process already waiting for the lock go first: a
       thread that just released it does not barge ahead of them. (A
       reentrant acquisition by a holder never waits.) */
    char channel[RM_LONG_KEY_MAX];
    if (ops)
        ops->wait_channel(l, value, channel);
    else
        CHANNEL_KEY(l, channel);
    bool queue = !fair && wait_ms != 0 && rm_waiters_queued(c, channel) > 0 && !holds_it(l, owner_key);
    /* Politeness towards other processes: a handle whose last acquisition
       had to wait, asking again right after its own release, would win every
       race against the waiters its release just woke (they need a message,
       a wake-up and a round trip). It gives them a moment first. */
    rm_client_lock(c);
    bool polite = !fair && !queue && wait_ms != 0 && l->contended && start - l->released_ns < RM_POLITE_WINDOW_NS;
    rm_client_unlock(c);
    /* A fair waiter whose channel is still subscribed from its last wait
       starts waiting before its first attempt: nothing published after that
       attempt can be missed, so it needs no second attempt. */
    rm_waiter *w = NULL;
    bool early = fair && wait_ms != 0 && rm_waiter_subscribed(c, channel);
    if (early)
        rm_waiter_begin(c, channel, rm_deadline_after_ms(c->opts.command_timeout_ms), &wait, &w);
    if (!queue && !polite) {
        rc = attempt(l, owner_key, value, false, &info);
        if (rc != ATTEMPT_BUSY) {
            if (w)
                rm_waiter_end(c, w);
            if (rc == 0) {
                rm_client_lock(c);
                l->contended = false;
                rm_client_unlock(c);
            } else if (fair && wait_ms != 0) {
                rm_fair_leave(l, value, NULL); /* it may have joined the queue */
            }
            rm_wait_end(c, &wait);
            return rc;
        }
    }

    /* Waiting: subscribe first, then try again, so a release published
       between the failed attempt and the subscription is not missed. */
    if (wait_ms != 0 && !w) {
        int64_t sub_deadline = rm_deadline_after_ms(c->opts.command_timeout_ms);
        rm_waiter_begin(c, channel, sub_deadline < deadline ? sub_deadline : deadline, &wait, &w);
    }
    /* A releasing thread of this client may acquire for us in its release's
       round trip (one server, no replica wait: see release_owner). */
    rm_claim claim = {l, owner_key, value};
    if (w && !ops && c->n == 1 && c->opts.min_replicas == 0)
        rm_waiter_offer(c, w, &claim);
    int64_t backoff_ms = c->opts.wait_backoff_cap_ms < 50 ? c->opts.wait_backoff_cap_ms : 50;
    int64_t attempts = queue || polite ? 0 : 1;
    /* Try again right after subscribing, unless there is no wait at all or
       this thread queues behind others (it waits for its turn first). */
    bool try_now = !queue && !polite && wait_ms != 0 && !early;
    if (polite)
        info.ttl_ms = RM_POLITE_PAUSE_MS; /* the first pause */
    for (;;) {
        if (try_now && rm_wait_interrupted(c, &wait)) {
            rc = interrupted_wait(l);
            break;
        }
        if (try_now) {
            sent_ns = rm_now_ns();
            rc = attempt(l, owner_key, value, true, &info);
            attempts++;
            if (rc != ATTEMPT_BUSY)
                break;
        }
        try_now = true;
        if (!rm_client_open(c)) {
            rc = rm_fail(REDMUTEX_ECLOSED, "the client was closed while waiting for lock '%s'", l->name);
            break;
        }
        /* Asked before every pause, not only when poll() reports EINTR: a
           signal may have landed while a request was in flight, where EINTR
           is retried. */
        if (rm_wait_interrupted(c, &wait) ||
            (c->opts.interrupt && c->opts.interrupt(c->opts.interrupt_payload))) {
            rc = interrupted_wait(l);
            break;
        }
        int64_t now = rm_now_ns();
        if (now >= deadline || (c->opts.retry_count > 0 && attempts >= c->opts.retry_count)) {
            rc = rm_fail(REDMUTEX_ETIMEDOUT, "lock '%s' is held by another owner; waited %" PRId64 " ms", l->name,
                         (now - start) / RM_NS_PER_MS);
            break;
        }
        /* Next attempt: on a release message, when the holder's lease ends,
           or after a capped, jittered backoff, whichever comes first. */
        int64_t pause_ms = backoff_ms - (int64_t)rm_random_below((uint64_t)backoff_ms / 4 + 1);
        if (info.ttl_ms >= 0 && info.ttl_ms < pause_ms - 1) /* hostile TTLs cannot overflow */
            pause_ms = info.ttl_ms + 1;
        if (info.split && c->opts.retry_delay_ms > 0) {
            int64_t d = (int64_t)rm_random_below((uint64_t)c->opts.retry_delay_ms) + 1;
            if (d < pause_ms)
                pause_ms = d;
        }
        if (fair && pause_ms > RM_FAIR_REFRESH_MS)
            pause_ms = RM_FAIR_REFRESH_MS; /* each attempt refreshes this waiter's place */
        int64_t until = now + pause_ms * RM_NS_PER_MS;
        if (until > deadline)
            until = deadline;
        bool interrupted = false;
        int r = w ? rm_waiter_wait(c, w, until, &interrupted) : rm_sleep_until(c, &wait, until);
        if (fair && w && r == 1) {
            int g = take_grant(l, w, owner_key, value, nonce, sent_ns);
            if (g == 0)
                r = RM_WAIT_GRANTED;
            else if (g != ATTEMPT_BUSY) {
                rc = g;
                break;
            }
        }
        if (r == RM_WAIT_GRANTED && !interrupted) {
            rc = 0;
            break;
        }
        if (r == RM_WAIT_GRANTED && release_owner(l, owner_key, owner != NULL, INT64_MAX) != 0) {
            /* Interrupted, but the lock came with the hand-off and could not
               be given back: report it held rather than fail holding it. */
            rc = 0;
            break;
        } else if (r == RM_WAIT_UNKNOWN)
            release_value(l, value); /* the acquisition made for us may have happened */
        if (interrupted || r == REDMUTEX_EINTR) {
            rc = interrupted_wait(l);
            break;
        }
        if (r == 0 && backoff_ms < c->opts.wait_backoff_cap_ms)
            backoff_ms = backoff_ms * 2 > c->opts.wait_backoff_cap_ms ? c->opts.wait_backoff_cap_ms : backoff_ms * 2;
    }
    if (w)
        rm_waiter_end(c, w);
    if (fair && rc != 0 && wait_ms != 0)
        rm_fair_leave(l, value, NULL); /* a waiter that gives up leaves the queue (and gives back a late hand-off) */
    rm_wait_end(c, &wait);
    rm_client_lock(c);
    l->contended = attempts > 1 || queue || polite;
    rm_client_unlock(c);
    return rc;
}

int rm_sleep_until(redmutex_client *c, rm_wait *wait, int64_t until_ns)
{
    return rm_wait_poll(c, wait, -1, until_ns) == RM_POLL_INTERRUPTED ? REDMUTEX_EINTR : 0;
}

/* ---- release ------------------------------------------------------------ */

/* A release's outcome is decided once a majority said "released" or "not owner". */
static bool release_decided(rm_call *call, void *ud)
{
    (void)ud;
    size_t ok = 0, notowner = 0;
    for (size_t i = 0; i < call->n; i++) {
        rm_slot *s = &call->slots[i];
        rm_reply *r = s->status == RM_SLOT_DONE && !s->err ? s->replies[0] : NULL;
        ok += r && r->type == RM_REPLY_INTEGER;
        notowner += r && r->type == RM_REPLY_NIL;
    }
    return ok >= call->c->quorum || notowner > call->n - call->c->quorum;
}

/* Releases whatever `value` holds on the servers, with no local record (cleanup). */
static void release_value(redmutex_lock *l, const char *value)
{
    char latch_id[33], latch_key[RM_KEY_MAX];
    if (new_token(latch_id) != 0)
        return;
    make_latch_key(l, latch_id, latch_key);
    rm_req req;
    argbuf ab;
    release_request(l, value, latch_key, lease_of(l), &req, &ab);
    rm_call call;
    if (rm_call_begin(&call, l->c) != 0)
        return;
    call.must_send = true;
    rm_call_run(&call, &req, command_deadline(l->c, false), NULL, NULL);
    forget_latch(&call, latch_key);
    rm_call_end(&call);
}

/*
 * The hand-off. When the last hold of a lock is released on a single server
 * and a thread of this client is asleep waiting for the same lock, the
 * waiter's acquisition command travels right behind the release in the same
 * request. The releasing thread records the waiter's hold and wakes it: the
 * lock changes hands in one round trip instead of release, notification and
 * a second round trip. The acquisition cannot succeed while the release has
 * not run (the key is still the releaser's), so a release that fails or meets
 * NOSCRIPT leaves the waiter to try on its own.
 */
static int handoff_result(rm_call *call, const rm_claim *claim, acq_form form)
{
    rm_slot *s = &call->slots[0];
    if (s->err)
        return s->err == REDMUTEX_ECONN ? RM_WAIT_UNKNOWN : 1;
    if (s->used_eval)
        return RM_WAIT_UNKNOWN; /* sent twice after NOSCRIPT: the first acquisition's reply is gone */
    acquire_ctx a = {claim->lock, form, false, 1, -1, -1, lease_of(claim->lock), {0}};
    acquire_count(&a, call);
    if (a.v.yes == 0)
        return 1; /* someone else was quicker: the waiter tries again now */
    int64_t lease = lease_of(claim->lock);
    if (lease * RM_NS_PER_MS - (rm_now_ns() - call->started_ns) - rm_drift_ns(lease) <= 0)
        return RM_WAIT_UNKNOWN; /* too slow to count: the waiter undoes it */
    redmutex_client *c = claim->lock->c;
    rm_client_lock(c);
    int rc = record_hold(claim->lock, claim->owner, claim->value, call->started_ns, &a.v);
    rm_client_unlock(c);
    return rc == 0 ? RM_WAIT_GRANTED : RM_WAIT_UNKNOWN;
}

static int release_owner(redmutex_lock *l, const char *owner_key, bool explicit_owner, int64_t deadline_ns)
{
    redmutex_client *c = l->c;
    pid_t pid = rm_pid();
    char value[RM_VALUE_MAX + 1];
    char latch_id[33];
    uint64_t hold_id = 0;
    bool was_lost = false, final = false;
    int64_t lease = lease_of(l);
    /* Where the hold may be: a release is not sent to servers that refused
       it (per-server order keeps the others safe, see client.c). */
    bool only[REDMUTEX_SERVERS_MAX];
    char fresh_id[33];
    int rc = new_token(fresh_id);
    if (rc)
        return rc;
    for (size_t i = 0; i < c->n; i++)
        only[i] = true;

    rm_client_lock(c);
    rm_hold *h = find_hold(l, owner_key, pid);
    if (!h && find_foreign_hold(l, owner_key, pid)) {
        rm_client_unlock(c);
        return rm_fail(REDMUTEX_EFORKED,
                       "lock '%s' was acquired by the parent process; a forked child cannot release it", l->name);
    }
    if (!h && !explicit_owner && l->kind == REDMUTEX_KIND_LOCK) {
        rm_client_unlock(c);
        return rm_fail(REDMUTEX_ENOTOWNER, "lock '%s' is not held through this handle", l->name);
    }
    if (h)
        h = hold_claim(c, l, h); /* another thread's release or extend of it finishes first */
    if (!h && !explicit_owner && l->kind == REDMUTEX_KIND_LOCK) {
        rm_client_unlock(c);
        return rm_fail(REDMUTEX_ENOTOWNER, "lock '%s' is not held through this handle", l->name);
    }
    if (h) {
        hold_id = h->id;
        was_lost = hold_state(c, h, rm_now_ns()) == REDMUTEX_STATE_LOST;
        /* The last release stops renewal first, so none can run after it. */
        final = h->count <= 1 && !was_lost;
        if (h->count <= 1)
            rm_watchdog_cancel(c, h);
        if (!h->release_id[0])
            memcpy(h->release_id, fresh_id, sizeof fresh_id);
        memcpy(latch_id, h->release_id, sizeof latch_id);
        memcpy(value, h->value, strlen(h->value) + 1); /* at most RM_VALUE_MAX + 1 bytes */
        lease = h->lease_ms;
        for (size_t i = 0; i < c->n; i++)
            only[i] = h->generations[i] != 0;
    } else {
        memcpy(latch_id, fresh_id, sizeof latch_id);
        owner_field(l, owner_key, value);
    }
    rm_client_unlock(c);

    char latch_key[RM_KEY_MAX];
    make_latch_key(l, latch_id, latch_key);
    rm_req req;
    argbuf ab;
    release_request(l, value, latch_key, lease, &req, &ab);
    rm_waiter *heir = NULL;
    rm_claim claim;
    acq_cmd heir_cmd;
    acq_form heir_form = ACQ_SET;
    /* The kinds of the operations table hand over by themselves (fair) or
       not at all (read-write), and their channels wake waiters directly. */
    bool local_waiters = rm_kind_ops_of(l->kind) == NULL;
    if (final && local_waiters && c->n == 1 && c->opts.min_replicas == 0 && deadline_ns == INT64_MAX &&
        (heir = rm_waiter_claim(c, ab.channel, l->kind, &claim)) != NULL)
        req.cmds[req.ncmds++] = acquire_command(claim.lock, claim.value, false, RM_ACQ_TRY, NULL, &heir_cmd, &heir_form);
    bool armed[REDMUTEX_SERVERS_MAX] = {false};
    if (local_waiters)
        rm_waiter_expect_release(c, ab.channel, armed);
    rm_call call;
    rc = rm_call_begin(&call, c);
    if (rc == 0) {
        int64_t dl = command_deadline(c, false);
        /* A caller's deadline (shutdown) is a hard one, even for a new connection. */
        call.strict_deadline = deadline_ns != INT64_MAX;
        call.only = only;
        call.must_send = true;
        /* With several servers the answer is known at a majority; the
           others still get the release (their replies are skipped later). A
           hand-off needs its one server's reply. */
        rm_call_run(&call, &req, dl < deadline_ns ? dl : deadline_ns, c->n > 1 ? release_decided : NULL, NULL);
    }
    size_t ok = 0, deleted = 0, notowner = 0, failed = 0;
    bool deleted_at[REDMUTEX_SERVERS_MAX] = {false};
    int err = 0;
    for (size_t i = 0; rc == 0 && i < call.n; i++) {
        rm_slot *s = &call.slots[i];
        rm_reply *r = s->err ? NULL : s->replies[0];
        if (s->excluded) {
            notowner++; /* it refused the acquisition: it never held it */
        } else if (!r) {
            failed++;
        } else if (r->type == RM_REPLY_INTEGER) {
            ok++;
            deleted += r->integer == 1;
            deleted_at[i] = r->integer == 1;
        } else if (r->type == RM_REPLY_NIL) {
            notowner++;
        } else if (r->type == RM_REPLY_ERROR) {
            failed++;
            int code = rm_reply_error(r, "release", l->name, server_name(l, i));
            if (!err || code == REDMUTEX_EWRONGTYPE)
                err = code;
        } else {
            failed++;
            int code = rm_fail(REDMUTEX_EPROTOCOL, "release lock '%s': %s sent a reply of the wrong type",
                               l->name, server_name(l, i));
            if (!err)
                err = code;
        }
    }
    size_t q = c->quorum;
    char saved[512] = "";
    if (err) /* the server's error message, used below only then */
        snprintf(saved, sizeof saved, "%s", redmutex_last_error());

    rm_client_lock(c);
    h = hold_id ? find_hold_by_id(l, hold_id) : NULL;
    if (rc == 0 && ok >= q) {
        l->released_ns = rm_now_ns();
        if (h) {
            h->release_id[0] = '\0';
            h->count = deleted >= q ? 0 : h->count - 1;
            if (h->count <= 0)
                hold_forget(c, h);
            else
                hold_unbusy(c, h);
        }
        rc = was_lost ? rm_fail(REDMUTEX_ELOST,
                                "lock '%s' was lost before it was released (its lease ran out); the work done "
                                "under it was not protected to the end",
                                l->name)
                      : 0;
    } else if (rc == 0 && notowner > c->n - q) {
        if (h) {
            hold_forget(c, h);
            rc = rm_fail(REDMUTEX_ELOST,
                         "lock '%s' was lost before it was released: its lease ran out or another owner took it",
                         l->name);
        } else {
            rc = rm_fail(REDMUTEX_ENOTOWNER, "lock '%s' is not held by owner '%s'", l->name, value);
        }
    } else if (h && was_lost) {
        /* It was lost before the release; removing what may be left of it
           was best effort. There is nothing to retry. */
        hold_forget(c, h);
        rc = rm_fail(REDMUTEX_ELOST,
                     "lock '%s' was lost before it was released (its lease ran out or renewal failed)", l->name);
    } else {
        /* Outcome unknown: keep the hold and its request id so that a retry
           reports what this attempt did. Renewal stays off (the release was
           meant to end it); the owner is told when validity runs out. */
        if (h) {
            if (h->count <= 1) {
                h->watchdog = false;
                rm_watchdog_schedule(c, h);
            }
            hold_unbusy(c, h);
        }
        if (rc == 0)
            rc = err && (err == REDMUTEX_EWRONGTYPE || ok + notowner == 0) ? rm_fail(err, "%s", saved)
                                                                            : rm_call_fail(&call, "release", l->name);
    }
    rm_client_unlock(c);
    if (heir)
        rm_waiter_claim_done(c, heir, call.slots ? handoff_result(&call, &claim, heir_form) : 1);
    /* Servers the early decision did not wait for count as deleting: their
       message is likely on its way. */
    for (size_t i = 0; call.slots && i < call.n; i++)
        if (call.slots[i].err && call.slots[i].conn && !call.slots[i].broken)
            deleted_at[i] = true;
    if (local_waiters)
        rm_waiter_released(c, ab.channel, armed, deleted_at, heir == NULL);
    /* Final: the request id is never used again. */
    if ((rc == 0 || rc == REDMUTEX_ELOST || rc == REDMUTEX_ENOTOWNER) && !note_unsettled(l, &call, NULL, value, &req.cmds[0], latch_key))
        forget_latch(&call, latch_key);
    if (call.slots)
        rm_call_end(&call);
    return rc;
}

int redmutex_lock_release(redmutex_lock *l, const char *owner)
{
    int rc = check_handle(l, "redmutex_lock_release");
    if (rc)
        return rc;
    char owner_key[RM_VALUE_MAX + 1];
    if ((rc = resolve_owner(l, owner, owner_key)))
        return rc;
    return release_owner(l, owner_key, owner != NULL, INT64_MAX);
}

void rm_release_all(redmutex_client *c, int64_t deadline_ns)
{
    pid_t pid = rm_pid();
    for (;;) {
        if (rm_now_ns() >= deadline_ns)
            return;
        /* Take one hold at a time: releasing changes the list. */
        rm_client_lock(c);
        rm_hold *h = c->holds;
        while (h && (h->pid != pid || h->busy || hold_state(c, h, rm_now_ns()) == REDMUTEX_STATE_LOST))
            h = h->next_in_client;
        redmutex_lock *l = h ? h->lock : NULL;
        char owner[RM_VALUE_MAX + 1];
        uint64_t id = h ? h->id : 0;
        if (h) {
            snprintf(owner, sizeof owner, "%s", h->owner);
            l->refs++; /* a handle freed meanwhile stays valid for this release */
        }
        rm_client_unlock(c);
        if (!l)
            return;
        int rc = release_owner(l, owner, owner[0] != '\0', deadline_ns);
        rm_client_lock(c);
        if (rc != 0) {
            /* Could not release it: leave it to expire and stop renewing it. */
            rm_hold *again = find_hold_by_id(l, id);
            if (again && !again->busy)
                hold_forget(c, again);
        }
        rm_lock_unref_locked(c, l);
        rm_client_unlock(c);
    }
}

/* ---- extend ------------------------------------------------------------- */

int redmutex_lock_extend(redmutex_lock *l, const char *owner, int64_t ms, redmutex_extend_mode mode)
{
    int rc = check_handle(l, "redmutex_lock_extend");
    if (rc)
        return rc;
    if (ms <= 0 || ms > REDMUTEX_TIME_MAX_MS)
        return rm_fail(REDMUTEX_EINVAL, "lock '%s': extension of %" PRId64 " ms is invalid (1..%" PRId64 ")", l->name,
                       ms, (int64_t)REDMUTEX_TIME_MAX_MS);
    if (mode != REDMUTEX_EXTEND_ADD && mode != REDMUTEX_EXTEND_REPLACE)
        return rm_fail(REDMUTEX_EINVAL, "lock '%s': unknown extend mode %d", l->name, (int)mode);
    redmutex_client *c = l->c;
    char owner_key[RM_VALUE_MAX + 1], value[RM_VALUE_MAX + 1];
    if ((rc = resolve_owner(l, owner, owner_key)))
        return rc;
    pid_t pid = rm_pid();
    uint64_t hold_id = 0;

    rm_client_lock(c);
    rm_hold *h = find_hold(l, owner_key, pid);
    if (!h && find_foreign_hold(l, owner_key, pid))
        rc = rm_fail(REDMUTEX_EFORKED, "lock '%s' was acquired by the parent process; a forked child cannot extend it",
                     l->name);
    else if (!h && !owner && l->kind == REDMUTEX_KIND_LOCK)
        rc = rm_fail(REDMUTEX_ENOTOWNER, "lock '%s' is not held through this handle", l->name);
    else if (h && !(h = hold_claim(c, l, h)) && !owner && l->kind == REDMUTEX_KIND_LOCK)
        rc = rm_fail(REDMUTEX_ENOTOWNER, "lock '%s' was released by another thread meanwhile", l->name);
    else if (h && hold_state(c, h, rm_now_ns()) == REDMUTEX_STATE_LOST)
        rc = rm_fail(REDMUTEX_ELOST, "lock '%s' was lost; it can no longer be extended", l->name);
    else if (h && l->opts.max_extensions && h->extensions >= l->opts.max_extensions)
        rc = rm_fail(REDMUTEX_ELIMIT, "lock '%s' reached its cap of %" PRId64 " extensions", l->name,
                     l->opts.max_extensions);
    if (rc != 0 && h)
        hold_unbusy(c, h);
    if (rc == 0) {
        if (h) {
            hold_id = h->id;
            snprintf(value, sizeof value, "%s", h->value);
        } else {
            owner_field(l, owner_key, value);
        }
    }
    rm_client_unlock(c);
    if (rc)
        return rc;

    char ms_s[24], max_s[24], nbuf[24], tbuf[24];
    snprintf(ms_s, sizeof ms_s, "%" PRId64, ms);
    snprintf(max_s, sizeof max_s, "%" PRId64, (int64_t)REDMUTEX_TIME_MAX_MS);
    /* The script caps the new TTL at REDMUTEX_TIME_MAX_MS (adding to the
       remaining TTL could pass it). */
    const char *argv[] = {"1", l->name, value, ms_s, mode == REDMUTEX_EXTEND_REPLACE ? "1" : "0", max_s};
    const char *wait_argv[3];
    rm_req req = {0};
    req.order_name = l->name;
    const rm_kind_ops *ops = rm_kind_ops_of(l->kind);
    rm_kargs kargs;
    if (ops)
        req.cmds[req.ncmds++] = ops->extend(l, value, ms, mode == REDMUTEX_EXTEND_REPLACE, &kargs);
    else
        req.cmds[req.ncmds++] =
            (rm_cmd){l->kind == REDMUTEX_KIND_LOCK ? RM_SCRIPT_LOCK_EXTEND : RM_SCRIPT_RLOCK_EXTEND, 6, argv, NULL};
    bool wait_replicas = c->opts.min_replicas > 0;
    if (wait_replicas)
        add_wait(&req, c, nbuf, tbuf, wait_argv);
    rm_call call;
    if ((rc = rm_call_begin(&call, c)) == 0)
        rm_call_run(&call, &req, command_deadline(c, wait_replicas), NULL, NULL);
    int64_t ttls[REDMUTEX_SERVERS_MAX];
    size_t ok = 0, notowner = 0;
    int err = 0;
    char err_msg[512] = "";
    for (size_t i = 0; rc == 0 && i < call.n; i++) {
        rm_slot *s = &call.slots[i];
        rm_reply *r = s->err ? NULL : s->replies[0];
        if (!r)
            continue;
        if (r->type == RM_REPLY_ERROR) {
            int code = rm_reply_error(r, "extend", l->name, server_name(l, i));
            if (!err) {
                err = code;
                snprintf(err_msg, sizeof err_msg, "%s", redmutex_last_error());
            }
        } else if (r->type == RM_REPLY_INTEGER && r->integer > 0) {
            rm_reply *w = wait_replicas ? s->replies[1] : NULL;
            if (wait_replicas && (!w || w->type != RM_REPLY_INTEGER || w->integer < c->opts.min_replicas)) {
                if (!err) {
                    err = REDMUTEX_EREPLICAS;
                    snprintf(err_msg, sizeof err_msg,
                             "extend lock '%s' on %s: fewer than %" PRId64 " replicas acknowledged", l->name,
                             server_name(l, i), c->opts.min_replicas);
                }
                continue;
            }
            ttls[ok++] = r->integer;
        } else if (r->type == RM_REPLY_INTEGER) {
            notowner++;
        } else if (!err) {
            err = rm_fail(REDMUTEX_EPROTOCOL, "%s: unexpected reply to extend", server_name(l, i));
            snprintf(err_msg, sizeof err_msg, "%s", redmutex_last_error());
        }
    }
    size_t q = c->quorum;
    rm_client_lock(c);
    h = hold_id ? find_hold_by_id(l, hold_id) : NULL; /* ours: busy */
    if (rc) {
        /* ENOMEM from rm_call_begin */
    } else if (ok >= q) {
        /* The q-th largest new TTL is how long a majority holds it. */
        for (size_t i = 0; i < ok; i++)
            for (size_t k = i + 1; k < ok; k++)
                if (ttls[k] > ttls[i]) {
                    int64_t t = ttls[i];
                    ttls[i] = ttls[k];
                    ttls[k] = t;
                }
        int64_t ttl = ttls[q - 1];
        if (h) {
            h->validity_end_ns = call.started_ns + ttl * RM_NS_PER_MS - rm_drift_ns(ttl);
            h->extensions++;
            if (h->state == REDMUTEX_STATE_RENEWAL_FAILING)
                rm_hold_set_state(c, h, REDMUTEX_STATE_HELD); /* reported, as a recovered renewal is */
            if (!h->watchdog) {
                rm_watchdog_cancel(c, h);
                rc = rm_watchdog_schedule(c, h);
            } else {
                /* A shorter TTL than the time to the next renewal: renew sooner. */
                rm_watchdog_renew_by(c, h, call.started_ns + ttl * RM_NS_PER_MS * 3 / 10);
            }
        }
    } else if (notowner > c->n - q) {
        if (h) {
            rm_watchdog_cancel(c, h); /* may wait; h stays ours (busy) */
            rm_hold_set_state(c, h, REDMUTEX_STATE_LOST);
            rc = rm_fail(REDMUTEX_ELOST, "lock '%s' was lost: its lease ran out or another owner took it", l->name);
        } else {
            rc = rm_fail(REDMUTEX_ENOTOWNER, "lock '%s' is not held by owner '%s'", l->name, value);
        }
    } else if (err && (err == REDMUTEX_EWRONGTYPE || err == REDMUTEX_EREPLICAS || ok + notowner == 0)) {
        rc = rm_fail(err, "%s", err_msg);
    } else {
        rc = rm_call_fail(&call, "extend", l->name);
    }
    if (h)
        hold_unbusy(c, h);
    rm_client_unlock(c);
    if (call.slots)
        rm_call_end(&call);
    return rc;
}

/* ---- queries ------------------------------------------------------------ */

typedef struct inspect_result {
    size_t answered;
    size_t exists;
    int64_t ttl[REDMUTEX_SERVERS_MAX];   /* per answering server; -2 absent, -1 no TTL */
    int64_t count[REDMUTEX_SERVERS_MAX];
} inspect_result;

static int inspect(redmutex_lock *l, const char *value, inspect_result *res)
{
    redmutex_client *c = l->c;
    const char *argv[] = {"1", l->name, l->kind == REDMUTEX_KIND_LOCK ? "string" : "hash", value};
    rm_req req = {1, {{RM_SCRIPT_INSPECT, 4, argv, NULL}}, NULL};
    const rm_kind_ops *ops = rm_kind_ops_of(l->kind);
    rm_kargs kargs;
    if (ops)
        req.cmds[0] = ops->inspect(l, value, &kargs);
    rm_call call;
    int rc = rm_call_begin(&call, c);
    if (rc)
        return rc;
    rm_call_run(&call, &req, command_deadline(c, false), NULL, NULL);
    memset(res, 0, sizeof *res);
    int err = 0;
    char err_msg[512] = "";
    for (size_t i = 0; i < call.n; i++) {
        rm_reply *r = call.slots[i].err ? NULL : call.slots[i].replies[0];
        if (!r)
            continue;
        if (r->type == RM_REPLY_ERROR) {
            int code = rm_reply_error(r, "inspect", l->name, server_name(l, i));
            if (!err || code == REDMUTEX_EWRONGTYPE) {
                err = code;
                snprintf(err_msg, sizeof err_msg, "%s", redmutex_last_error());
            }
            continue;
        }
        if (r->type != RM_REPLY_ARRAY || r->elements != 3 || r->element[0]->type != RM_REPLY_INTEGER ||
            r->element[1]->type != RM_REPLY_INTEGER || r->element[2]->type != RM_REPLY_INTEGER) {
            if (!err) {
                err = rm_fail(REDMUTEX_EPROTOCOL, "%s: unexpected reply to the inspect script", server_name(l, i));
                snprintf(err_msg, sizeof err_msg, "%s", redmutex_last_error());
            }
            continue;
        }
        size_t k = res->answered++;
        res->exists += r->element[0]->integer == 1;
        res->ttl[k] = r->element[1]->integer;
        res->count[k] = r->element[2]->integer;
    }
    if (err == REDMUTEX_EWRONGTYPE || (err && res->answered < c->quorum))
        rc = rm_fail(err, "%s", err_msg);
    else if (res->answered < c->quorum)
        rc = rm_call_fail(&call, "inspect", l->name);
    rm_call_end(&call);
    return rc;
}

/* The q-th largest of v[0..n) (n >= q); "no TTL" (-1) counts as the largest. */
static int64_t qth_largest(int64_t *v, size_t n, size_t q, bool ttl_order)
{
    for (size_t i = 0; i < n; i++)
        for (size_t k = i + 1; k < n; k++) {
            int64_t a = v[i], b = v[k];
            if (ttl_order) {
                a = a == -1 ? INT64_MAX : a;
                b = b == -1 ? INT64_MAX : b;
            }
            if (b > a) {
                int64_t t = v[i];
                v[i] = v[k];
                v[k] = t;
            }
        }
    return v[q - 1];
}

/* The value an owner is known by on the servers ("" when this handle holds nothing for it). */
static int owner_value(redmutex_lock *l, const char *owner, char value[RM_VALUE_MAX + 1])
{
    char owner_key[RM_VALUE_MAX + 1];
    int rc = resolve_owner(l, owner, owner_key);
    if (rc)
        return rc;
    if (l->kind == REDMUTEX_KIND_LOCK && !owner) {
        rm_client_lock(l->c);
        rm_hold *h = find_hold(l, "", rm_pid());
        snprintf(value, RM_VALUE_MAX + 1, "%s", h ? h->value : "");
        rm_client_unlock(l->c);
    } else {
        owner_field(l, owner_key, value);
    }
    return 0;
}

int redmutex_lock_is_locked(int *out, redmutex_lock *l)
{
    int rc = check_handle(l, "redmutex_lock_is_locked");
    if (rc)
        return rc;
    if (!out)
        return rm_fail(REDMUTEX_EINVAL, "redmutex_lock_is_locked: out is NULL");
    inspect_result res;
    if ((rc = inspect(l, "", &res)))
        return rc;
    *out = res.exists >= l->c->quorum;
    return 0;
}

int redmutex_lock_is_owned(int *out, redmutex_lock *l, const char *owner)
{
    int64_t count;
    int rc = redmutex_lock_hold_count(&count, l, owner);
    if (rc == 0 && !out)
        rc = rm_fail(REDMUTEX_EINVAL, "redmutex_lock_is_owned: out is NULL");
    if (rc == 0)
        *out = count > 0;
    return rc;
}

int redmutex_lock_hold_count(int64_t *out, redmutex_lock *l, const char *owner)
{
    int rc = check_handle(l, "redmutex_lock_hold_count");
    if (rc)
        return rc;
    if (!out)
        return rm_fail(REDMUTEX_EINVAL, "redmutex_lock_hold_count: out is NULL");
    char value[RM_VALUE_MAX + 1];
    if ((rc = owner_value(l, owner, value)))
        return rc;
    if (!value[0]) {
        *out = 0;
        return 0;
    }
    inspect_result res;
    if ((rc = inspect(l, value, &res)))
        return rc;
    *out = qth_largest(res.count, res.answered, l->c->quorum, false);
    return 0;
}

int redmutex_lock_ttl(int64_t *out, redmutex_lock *l)
{
    int rc = check_handle(l, "redmutex_lock_ttl");
    if (rc)
        return rc;
    if (!out)
        return rm_fail(REDMUTEX_EINVAL, "redmutex_lock_ttl: out is NULL");
    inspect_result res;
    if ((rc = inspect(l, "", &res)))
        return rc;
    *out = qth_largest(res.ttl, res.answered, l->c->quorum, true);
    return 0;
}

int redmutex_lock_force_release(int *out, redmutex_lock *l)
{
    int rc = check_handle(l, "redmutex_lock_force_release");
    if (rc)
        return rc;
    redmutex_client *c = l->c;
    char channel[RM_KEY_MAX];
    const char *argv[] = {"2", l->name, CHANNEL_KEY(l, channel), l->kind == REDMUTEX_KIND_LOCK ? "string" : "hash"};
    rm_req req = {1, {{RM_SCRIPT_FORCE_RELEASE, 4, argv, NULL}}, l->name};
    const rm_kind_ops *ops = rm_kind_ops_of(l->kind);
    rm_kargs kargs;
    if (ops)
        req.cmds[0] = ops->force(l, &kargs);
    rm_call call;
    if ((rc = rm_call_begin(&call, c)))
        return rc;
    rm_call_run(&call, &req, command_deadline(c, false), NULL, NULL);
    size_t answered = 0, deleted = 0;
    int err = 0;
    char err_msg[512] = "";
    for (size_t i = 0; i < call.n; i++) {
        rm_reply *r = call.slots[i].err ? NULL : call.slots[i].replies[0];
        if (r && r->type == RM_REPLY_INTEGER) {
            answered++;
            deleted += r->integer == 1;
        } else if (r && !err) {
            err = r->type == RM_REPLY_ERROR ? rm_reply_error(r, "force release", l->name, server_name(l, i))
                                            : rm_fail(REDMUTEX_EPROTOCOL, "force release lock '%s': %s sent a "
                                                      "reply of the wrong type", l->name, server_name(l, i));
            snprintf(err_msg, sizeof err_msg, "%s", redmutex_last_error());
        }
    }
    if (err == REDMUTEX_EWRONGTYPE)
        rc = rm_fail(err, "%s", err_msg);
    else if (answered < c->quorum)
        rc = err ? rm_fail(err, "%s", err_msg) : rm_call_fail(&call, "force release", l->name);
    rm_call_end(&call);
    if (rc)
        return rc;
    rm_client_lock(c);
    pid_t pid = rm_pid();
    /* One at a time from the start: forgetting may wait and let the list change. */
    for (;;) {
        rm_hold *h = l->holds;
        while (h && (h->pid != pid || h->busy || h->forgetting))
            h = h->next_in_lock;
        if (!h)
            break;
        hold_forget(c, h);
    }
    rm_client_unlock(c);
    if (out)
        *out = deleted > 0;
    return 0;
}

/* ---- local state ------------------------------------------------------- */

static int local_hold(redmutex_lock *l, const char *owner, const char *fn, rm_hold **out)
{
    if (!l)
        return rm_fail(REDMUTEX_EINVAL, "%s: lock is NULL", fn);
    char owner_key[RM_VALUE_MAX + 1];
    int rc = resolve_owner(l, owner, owner_key);
    if (rc)
        return rc;
    rm_client_lock(l->c);
    *out = find_hold(l, owner_key, rm_pid());
    return 0; /* returns with the client mutex held */
}

int redmutex_lock_state(redmutex_state *out, redmutex_lock *l, const char *owner)
{
    if (!out)
        return rm_fail(REDMUTEX_EINVAL, "redmutex_lock_state: out is NULL");
    rm_hold *h;
    int rc = local_hold(l, owner, "redmutex_lock_state", &h);
    if (rc)
        return rc;
    *out = h ? hold_state(l->c, h, rm_now_ns()) : REDMUTEX_STATE_UNLOCKED;
    rm_client_unlock(l->c);
    return 0;
}

int redmutex_lock_validity(int64_t *out, redmutex_lock *l, const char *owner)
{
    if (!out)
        return rm_fail(REDMUTEX_EINVAL, "redmutex_lock_validity: out is NULL");
    rm_hold *h;
    int rc = local_hold(l, owner, "redmutex_lock_validity", &h);
    if (rc)
        return rc;
    int64_t now = rm_now_ns();
    *out = 0;
    if (h && hold_state(l->c, h, now) != REDMUTEX_STATE_LOST)
        *out = (h->validity_end_ns - now) / RM_NS_PER_MS;
    rm_client_unlock(l->c);
    return 0;
}

int redmutex_lock_fence(int64_t *out, redmutex_lock *l, const char *owner)
{
    if (!out)
        return rm_fail(REDMUTEX_EINVAL, "redmutex_lock_fence: out is NULL");
    if (l && !(l->opts.flags & REDMUTEX_LOCK_FENCING))
        return rm_fail(REDMUTEX_EINVAL, "lock '%s' was made without REDMUTEX_LOCK_FENCING", l->name);
    rm_hold *h;
    int rc = local_hold(l, owner, "redmutex_lock_fence", &h);
    if (rc)
        return rc;
    if (h)
        *out = h->fence;
    else
        rc = rm_fail(REDMUTEX_ENOTOWNER, "lock '%s' is not held by this owner through this handle", l->name);
    rm_client_unlock(l->c);
    return rc;
}

/* ---- for pollable waits (pollwait.c) ------------------------------------- */

int rm_acquire_prepare(redmutex_lock *l, const char *owner, char owner_key[RM_VALUE_MAX + 1],
                       char value[RM_VALUE_MAX + 1])
{
    int rc = check_handle(l, "redmutex_wait_new");
    if (rc == 0)
        rc = resolve_owner(l, owner, owner_key);
    if (rc)
        return rc;
    if (l->kind == REDMUTEX_KIND_LOCK && !owner)
        return new_token(value);
    owner_field(l, owner_key, value);
    return 0;
}

int rm_acquire_attempt(redmutex_lock *l, const char *owner_key, const char *value, bool retry, const char *nonce,
                       int64_t *ttl_ms, bool *split)
{
    attempt_info info = {-1, false, nonce != NULL, nonce};
    int rc = attempt(l, owner_key, value, retry, &info);
    *ttl_ms = info.ttl_ms;
    *split = info.split;
    return rc;
}

void rm_lock_channel(const redmutex_lock *l, const char *value, char *buf)
{
    const rm_kind_ops *ops = rm_kind_ops_of(l->kind);
    if (ops)
        ops->wait_channel(l, value, buf);
    else
        CHANNEL_KEY(l, buf);
}

bool rm_lock_holds(redmutex_lock *l, const char *owner_key) { return holds_it(l, owner_key); }

int rm_lock_release_key(redmutex_lock *l, const char *owner_key, bool explicit_owner)
{
    return release_owner(l, owner_key, explicit_owner, INT64_MAX);
}

void rm_lock_release_value(redmutex_lock *l, const char *value) { release_value(l, value); }
