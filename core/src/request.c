/*
 * The requests the lock operations send around each kind's own commands
 * (kind.h): WAIT for replicas, deadlines, the unlock latch of a release and
 * its afterlife (kept for an unsettled release, else deleted later).
 */
#define _GNU_SOURCE
#include "client.h"
#include "conn.h"
#include "fanout.h"
#include "handle.h"
#include "internal.h"
#include "kind.h"
#include "lockops.h"
#include "pool.h"
#include "resp.h"
#include "unsettled.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

void rm_req_add_wait(rm_req *req, redmutex_client *c, char *tbuf, const char **argv)
{
    snprintf(tbuf, 24, "%" PRId64, c->opts.replica_timeout_ms);
    argv[0] = "WAIT";
    argv[1] = RM_ARG_REPLICAS; /* min_replicas, or fewer for a master known to have fewer (deploy.h) */
    argv[2] = tbuf;
    req->cmds[req->ncmds++] = (rm_cmd){-1, 3, argv, NULL};
}

int64_t rm_command_deadline(redmutex_client *c, bool with_wait)
{
    int64_t ms = c->opts.command_timeout_ms;
    if (with_wait)
        ms += c->opts.replica_timeout_ms;
    return rm_deadline_after_ms(ms);
}

void rm_release_request(redmutex_lock *l, const char *value, const char *latch_key, int64_t lease_ms, rm_req *req,
                        rm_kargs *st)
{
    int64_t latch_ms = rm_latch_ms(l->c);
    req->ncmds = 1;
    req->order_name = l->name;
    req->route_name = NULL;
    req->many = NULL;
    req->cmds[0] = rm_kind_of(l)->release(l, value, latch_key, lease_ms, latch_ms, st);
}

void rm_latch_key(const redmutex_lock *l, const char *id, char *out)
{
    char suffix[40] = ":";
    strncat(suffix, id, sizeof suffix - 2);
    rm_derived_key(l, "redisson_unlock_latch", suffix, out, RM_KEY_MAX);
}

bool rm_release_note_unsettled(redmutex_lock *l, const rm_call *call, const bool *among, const char *value,
                               const rm_cmd *release, const char *latch_key)
{
    bool unknown[REDMUTEX_SERVERS_MAX] = {false};
    for (size_t i = 0; call->slots && i < call->n; i++)
        unknown[i] = (!among || among[i]) && rm_slot_unknown(&call->slots[i]);
    return rm_unsettled_note(l->c, l->name, value, release, latch_key, call->started_ns, rm_latch_ms(l->c), unknown);
}

void rm_release_forget_latch(rm_call *call, const char *latch_key)
{
    const char *argv[2] = {"DEL", latch_key};
    /* Every connection still open, answered or not: behind a request still
       owed, the DEL runs after it. */
    for (size_t i = 0; call->slots && i < call->n; i++)
        if (call->slots[i].conn)
            rm_pool_queue_later(call->c, call->slots[i].conn, 2, argv);
}

int64_t rm_latch_ms(const redmutex_client *c) { return c->opts.command_timeout_ms * 10; }

bool rm_handoff_by_script(const redmutex_lock *l)
{
    /* A hand-off by the releasing script needs a watchdog to extend it and
       one server whose reply needs no WAIT (kind_fair.c). */
    const redmutex_client *c = l->c;
    return rm_kind_of(l)->server_queue && l->opts.lease_ms == 0 && c->n == 1 && c->opts.min_replicas == 0;
}

rm_cmd rm_acquire_command(redmutex_lock *l, const char *value, const char *nest_latch, int mode, const char *nonce,
                          rm_kargs *st, rm_acq_form *form)
{
    redmutex_client *c = l->c;
    rm_acq_in in = {value,      rm_lock_lease_ms(l),    (l->opts.flags & REDMUTEX_LOCK_FENCING) != 0,
                    nest_latch, rm_latch_ms(c),         mode,
                    nonce,      rm_handoff_by_script(l)};
    rm_cmd cmd = rm_kind_of(l)->acquire(l, &in, st);
    *form = cmd.script < 0 ? RM_ACQ_SET : RM_ACQ_SCRIPT;
    return cmd;
}
