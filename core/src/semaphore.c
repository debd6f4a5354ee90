/*
 * Semaphores (redmutex_semaphore_*): a handle over a lock handle of the
 * internal semaphore kind (kind_sem.c). Every acquisition is a hold of its
 * own whose owner is a fresh permit id, so the lock operations serve it
 * unchanged: the attempts, the waits on the semaphore's channel, the
 * hand-off of released permits to a waiting thread, the watchdog's batched
 * renewals, lost-permit events, releases with their unlock latch, Redlock.
 * What this file adds is the capacity (and the larger quorum it needs over
 * N servers, quorum.h), the permit ids, the checks of the arguments, and
 * messages that speak of permits.
 *
 * Why a handle of its own rather than a redmutex_kind: a lock's owner is
 * someone (a thread, a task) who holds it once or reentrantly, while a
 * semaphore's holds are anonymous permits, any number per thread, released
 * by id from any thread; an acquisition takes a count and returns an id.
 * Lock functions would take an owner argument that means something else
 * here, and queries (is_locked, hold_count, force_release) that mean
 * nothing. The handle keeps each call's meaning plain.
 */
#define _GNU_SOURCE
#include "client.h"
#include "handle.h"
#include "holds.h"
#include "internal.h"
#include "kind.h"
#include "lockops.h"
#include "options.h"
#include "pollwait.h"
#include "quorum.h"
#include "tally.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct redmutex_semaphore {
    redmutex_lock *l; /* the internal lock handle (RM_KIND_SEMAPHORE) whose holds are the permits */
    redmutex_permit_lost_fn on_lost;
    void *on_lost_payload;
};

static const redmutex_semaphore_options default_options = REDMUTEX_SEMAPHORE_OPTIONS_INIT;

static const size_t options_sizes[] = {
    0, RM_OPTIONS_END(redmutex_semaphore_options, on_lost_payload), /* 1 */
};
_Static_assert(sizeof options_sizes / sizeof options_sizes[0] == REDMUTEX_SEMAPHORE_OPTIONS_VERSION + 1,
               "one size per semaphore options version");

static const rm_options_layout options_layout = {"semaphore options", "redmutex_semaphore_options_init",
                                                 &default_options, options_sizes,
                                                 REDMUTEX_SEMAPHORE_OPTIONS_VERSION + 1};

int redmutex_semaphore_options_init(redmutex_semaphore_options *opts, unsigned int version)
{
    rm_err e_, *err = rm_err_reset(&e_);
    return rm_publish(err, rm_options_init(err, opts, version, &options_layout));
}

/* The lock handle's lost callback: the semaphore's, with the semaphore. */
static void permit_lost(redmutex_lock *l, const char *owner, redmutex_state st, void *payload)
{
    (void)l;
    redmutex_semaphore *s = payload;
    s->on_lost(s, owner, st, s->on_lost_payload);
}

/* The lock options of the handle under a semaphore made with o. */
static int lock_options_of(rm_err *err, const redmutex_semaphore_options *o, redmutex_semaphore *s,
                           redmutex_lock_options *out)
{
    if (o->flags & ~(uint32_t)(REDMUTEX_SEMAPHORE_FENCING | REDMUTEX_SEMAPHORE_RESIZE))
        return rm_fail(err, REDMUTEX_EINVAL, "semaphore options: unknown flags 0x%x", o->flags);
    redmutex_lock_options lo = REDMUTEX_LOCK_OPTIONS_INIT;
    lo.flags = (o->flags & REDMUTEX_SEMAPHORE_FENCING) ? REDMUTEX_LOCK_FENCING : 0;
    lo.lease_ms = o->lease_ms;
    lo.max_hold_ms = o->max_hold_ms;
    lo.max_extensions = o->max_extensions;
    if (o->on_lost) {
        lo.on_lost = permit_lost;
        lo.on_lost_payload = s;
    }
    *out = lo;
    return 0;
}

int redmutex_semaphore_new(redmutex_semaphore **out, redmutex_client *c, const char *name, int64_t permits,
                           const redmutex_semaphore_options *opts)
{
    rm_err e_, *err = rm_err_reset(&e_);
    if (!out || !c || !name)
        return rm_publish(err, rm_fail(err, REDMUTEX_EINVAL, "redmutex_semaphore_new: %s is NULL",
                                       !out ? "out"
                                       : !c ? "client"
                                            : "name"));
    if (permits < 1 || permits > REDMUTEX_SEMAPHORE_PERMITS_MAX)
        return rm_publish(err, rm_fail(err, REDMUTEX_EINVAL,
                                       "semaphore '%.200s': permits = %" PRId64 " is out of range (1..%" PRId64 ")",
                                       name, permits, (int64_t)REDMUTEX_SEMAPHORE_PERMITS_MAX));
    redmutex_semaphore_options o;
    int rc = rm_options_load(err, &o, opts, &options_layout, "redmutex_semaphore_new");
    if (rc)
        return rm_publish(err, rc);
    redmutex_semaphore *s = calloc(1, sizeof *s);
    if (!s)
        return rm_publish(err, rm_fail(err, REDMUTEX_ENOMEM, "out of memory"));
    redmutex_lock_options lo;
    s->on_lost = o.on_lost;
    s->on_lost_payload = o.on_lost_payload;
    rc = lock_options_of(err, &o, s, &lo);
    if (rc == 0)
        rc = rm_lock_make(err, &s->l, c, name, RM_KIND_SEMAPHORE, &lo);
    if (rc) {
        free(s);
        return rm_publish(err, rc);
    }
    s->l->permits = permits;
    s->l->resize = (o.flags & REDMUTEX_SEMAPHORE_RESIZE) != 0;
    s->l->quorum = rm_sem_quorum_of(c->n, permits);
    *out = s;
    return rm_publish(err, 0);
}

void redmutex_semaphore_free(redmutex_semaphore *s)
{
    if (!s)
        return;
    /* After this no callback of the lock handle starts, and one running
       (it points at s) has ended. */
    redmutex_lock_free(s->l);
    free(s);
}

const char *redmutex_semaphore_name(const redmutex_semaphore *s) { return s ? s->l->name : ""; }

uint64_t redmutex_semaphore_id(const redmutex_semaphore *s) { return s ? s->l->id : 0; }

int64_t redmutex_semaphore_permits(const redmutex_semaphore *s) { return s ? s->l->permits : 0; }

/* ---- acquiring ------------------------------------------------------------------ */

/* Checks an acquisition's arguments and makes its permit id into id. 0 or an error code. */
static int new_permit(rm_err *err, redmutex_semaphore *s, int64_t permits, char *out, size_t size, const char *fn,
                      char id[REDMUTEX_PERMIT_ID_SIZE])
{
    if (!s || !out)
        return rm_fail(err, REDMUTEX_EINVAL, "%s: %s is NULL", fn, !s ? "semaphore" : "out");
    redmutex_lock *l = s->l;
    if (permits < 1 || permits > REDMUTEX_ACQUIRE_PERMITS_MAX || permits > l->permits)
        return rm_fail(err, REDMUTEX_EINVAL,
                       "semaphore '%s': cannot acquire %" PRId64 " permits (1..%" PRId64 ": it has %" PRId64
                       " permits, and one acquisition takes at most %d)",
                       l->name, permits,
                       l->permits < REDMUTEX_ACQUIRE_PERMITS_MAX ? l->permits : REDMUTEX_ACQUIRE_PERMITS_MAX,
                       l->permits, REDMUTEX_ACQUIRE_PERMITS_MAX);
    int rc = rm_new_token(err, id);
    if (rc)
        return rc;
    if (permits > 1)
        snprintf(id + RM_PERMIT_HEX, REDMUTEX_PERMIT_ID_SIZE - RM_PERMIT_HEX, "*%" PRId64, permits);
    if (strlen(id) + 1 > size)
        return rm_fail(err, REDMUTEX_EINVAL, "%s: out has %zu bytes, the permit id needs %zu", fn, size,
                       strlen(id) + 1);
    return rm_lock_check_handle(err, l, fn);
}

/* What a failed acquisition says, in the semaphore's words. */
static int acquire_failed(rm_err *err, const redmutex_lock *l, int64_t permits, int rc)
{
    if (rc == REDMUTEX_ETIMEDOUT) {
        /* The lock operations' message ends with how long they waited. */
        const char *waited = strstr(err->msg, "; waited ");
        return rm_fail(err, rc, "semaphore '%s': %" PRId64 " of its %" PRId64 " permits are not free%s", l->name,
                       permits, l->permits, waited ? waited : "");
    }
    return rc;
}

int redmutex_semaphore_acquire(char *out, size_t size, redmutex_semaphore *s, int64_t permits, int64_t wait_ms)
{
    rm_err e_, *err = rm_err_reset(&e_);
    char id[REDMUTEX_PERMIT_ID_SIZE];
    int rc = new_permit(err, s, permits, out, size, "redmutex_semaphore_acquire", id);
    if (rc == 0)
        rc = rm_lock_check_wait(err, s->l, wait_ms);
    if (rc)
        return rm_publish(err, rc);
    rc = rm_lock_acquire(err, s->l, id, wait_ms);
    if (rc)
        return rm_publish(err, acquire_failed(err, s->l, permits, rc));
    memcpy(out, id, strlen(id) + 1);
    return rm_publish(err, 0);
}

int redmutex_semaphore_wait_new(redmutex_wait **out, char *permit_id, size_t size, redmutex_semaphore *s,
                                int64_t permits)
{
    rm_err e_, *err = rm_err_reset(&e_);
    char id[REDMUTEX_PERMIT_ID_SIZE];
    int rc = out ? new_permit(err, s, permits, permit_id, size, "redmutex_semaphore_wait_new", id)
                 : rm_fail(err, REDMUTEX_EINVAL, "redmutex_semaphore_wait_new: out is NULL");
    if (rc == 0)
        rc = rm_wait_new(err, out, s->l, id);
    if (rc == 0)
        memcpy(permit_id, id, strlen(id) + 1);
    return rm_publish(err, rc);
}

/* ---- permits held --------------------------------------------------------------- */

/* Checks a permit id passed in. 0 or REDMUTEX_EINVAL. */
static int check_permit(rm_err *err, const redmutex_semaphore *s, const char *id, const char *fn)
{
    if (!s || !id)
        return rm_fail(err, REDMUTEX_EINVAL, "%s: %s is NULL", fn, !s ? "semaphore" : "permit_id");
    if (!rm_sem_value_valid(id))
        return rm_fail(err, REDMUTEX_EINVAL,
                       "semaphore '%s': '%.64s' is no permit id (32 lowercase hex digits, then '*<permits>' for "
                       "more than one)",
                       s->l->name, id);
    return 0;
}

int redmutex_semaphore_release(redmutex_semaphore *s, const char *id)
{
    rm_err e_, *err = rm_err_reset(&e_);
    char owner_key[RM_VALUE_MAX + 1];
    int rc = check_permit(err, s, id, "redmutex_semaphore_release");
    if (rc == 0)
        rc = rm_lock_check_handle(err, s->l, "redmutex_semaphore_release");
    if (rc == 0)
        rc = rm_lock_resolve_owner(err, s->l, id, owner_key); /* the key of its hold, as a lock's owner */
    if (rc == 0)
        rc = rm_lock_release_key(err, s->l, owner_key, true);
    if (rc == REDMUTEX_ENOTOWNER)
        rc = rm_fail(err, rc, "semaphore '%s': permit %s is not held (released already, or never acquired)", s->l->name,
                     id);
    else if (rc == REDMUTEX_ELOST)
        rc = rm_fail(err, rc,
                     "semaphore '%s': permit %s was lost before it was released (its lease ended or it was taken "
                     "away); the work done under it was not protected to the end",
                     s->l->name, id);
    return rm_publish(err, rc);
}

int redmutex_semaphore_extend(redmutex_semaphore *s, const char *id, int64_t ms, redmutex_extend_mode mode)
{
    rm_err e_, *err = rm_err_reset(&e_);
    int rc = check_permit(err, s, id, "redmutex_semaphore_extend");
    if (rc == 0)
        rc = rm_lock_extend(err, s->l, id, ms, mode);
    return rm_publish(err, rc);
}

/* Checks a query of a permit's local hold; the caller then finds it with the client mutex held. */
static int local_permit(rm_err *err, redmutex_semaphore *s, const char *id, const char *fn, void *out)
{
    return out ? check_permit(err, s, id, fn) : rm_fail(err, REDMUTEX_EINVAL, "%s: out is NULL", fn);
}

int redmutex_semaphore_state(redmutex_state *out, redmutex_semaphore *s, const char *id)
{
    rm_err e_, *err = rm_err_reset(&e_);
    int rc = local_permit(err, s, id, "redmutex_semaphore_state", out);
    if (rc)
        return rm_publish(err, rc);
    rm_client_lock(s->l->c);
    rm_hold *h = rm_hold_find(s->l, id, rm_pid());
    *out = h ? rm_hold_state(s->l->c, h, rm_now_ns()) : REDMUTEX_STATE_UNLOCKED;
    rm_client_unlock(s->l->c);
    return rm_publish(err, 0);
}

int redmutex_semaphore_validity(int64_t *out, redmutex_semaphore *s, const char *id)
{
    rm_err e_, *err = rm_err_reset(&e_);
    int rc = local_permit(err, s, id, "redmutex_semaphore_validity", out);
    if (rc)
        return rm_publish(err, rc);
    rm_client_lock(s->l->c);
    rm_hold *h = rm_hold_find(s->l, id, rm_pid());
    int64_t now = rm_now_ns();
    *out = h && rm_hold_state(s->l->c, h, now) != REDMUTEX_STATE_LOST ? (h->validity_end_ns - now) / RM_NS_PER_MS : 0;
    rm_client_unlock(s->l->c);
    return rm_publish(err, 0);
}

int redmutex_semaphore_fence(int64_t *out, redmutex_semaphore *s, const char *id)
{
    rm_err e_, *err = rm_err_reset(&e_);
    if (s && !(s->l->opts.flags & REDMUTEX_LOCK_FENCING))
        return rm_publish(err, rm_fail(err, REDMUTEX_EINVAL,
                                       "semaphore '%s' was made without REDMUTEX_SEMAPHORE_FENCING", s->l->name));
    int rc = local_permit(err, s, id, "redmutex_semaphore_fence", out);
    if (rc)
        return rm_publish(err, rc);
    rm_client_lock(s->l->c);
    rm_hold *h = rm_hold_find(s->l, id, rm_pid());
    if (h)
        *out = h->fence;
    else
        rc = rm_fail(err, REDMUTEX_ENOTOWNER, "semaphore '%s': permit %s is not held through this handle", s->l->name,
                     id);
    rm_client_unlock(s->l->c);
    return rm_publish(err, rc);
}

/* ---- what the servers say ---------------------------------------------------------- */

typedef struct info_result {
    int64_t avail[REDMUTEX_SERVERS_MAX], cap[REDMUTEX_SERVERS_MAX];
    size_t n;
    int64_t permits; /* the handle's: what an absent semaphore will have */
} info_result;

/* Server i's {exists, available, capacity} (rm_vote_fn). */
static rm_vote info_vote(void *ud, const rm_slot *s, size_t i, const rm_reply *r, rm_err *e, bool *unknown)
{
    (void)s;
    (void)i;
    (void)unknown;
    info_result *res = ud;
    if (r->type != RM_REPLY_ARRAY || r->elements != 3 || r->element[0]->type != RM_REPLY_INTEGER ||
        r->element[1]->type != RM_REPLY_INTEGER || r->element[2]->type != RM_REPLY_INTEGER) {
        rm_fail(e, REDMUTEX_EPROTOCOL, "unexpected reply to the semaphore's info script");
        return RM_VOTE_ERROR;
    }
    bool exists = r->element[0]->integer == 1;
    res->avail[res->n] = exists ? r->element[1]->integer : res->permits;
    res->cap[res->n] = exists ? r->element[2]->integer : 0;
    res->n++;
    return RM_VOTE_YES;
}

int redmutex_semaphore_available(int64_t *out, int64_t *capacity, redmutex_semaphore *s)
{
    rm_err e_, *err = rm_err_reset(&e_);
    if (!out || !s)
        return rm_publish(
            err, rm_fail(err, REDMUTEX_EINVAL, "redmutex_semaphore_available: %s is NULL", !out ? "out" : "semaphore"));
    redmutex_lock *l = s->l;
    int rc = rm_lock_check_handle(err, l, "redmutex_semaphore_available");
    if (rc)
        return rm_publish(err, rc);
    redmutex_client *c = l->c;
    rm_kargs k;
    rm_req req = {1, {rm_sem_info_command(l, &k)}, NULL, l->name, NULL};
    rm_call call;
    if ((rc = rm_call_begin(err, &call, c)) != 0)
        return rm_publish(err, rc);
    rm_call_run(&call, &req, rm_command_deadline(c, false), NULL, NULL);
    info_result res = {.n = 0, .permits = l->permits};
    rm_tally t;
    rm_tally_init(&t);
    rm_tally_spec spec = {"query the permits of semaphore", l->name, 0, false, info_vote, &res};
    rm_tally_call(&t, &call, &spec);
    if (t.error.code == REDMUTEX_EWRONGTYPE || res.n < l->quorum) {
        rc = rm_tally_fail(err, &t, &call, "query the permits of semaphore", l->name);
    } else {
        /* What a quorum of servers reaches: an acquisition needs that many. */
        *out = rm_qth_largest(res.avail, res.n, l->quorum, false);
        if (capacity)
            *capacity = rm_qth_largest(res.cap, res.n, l->quorum, false);
    }
    rm_call_end(&call);
    return rm_publish(err, rc);
}
