/*
 * The one walk over a fan-out's replies (tally.h).
 */
#include "internal.h"
#include "tally.h"

void rm_tally_call(rm_tally *t, const rm_call *call, const rm_tally_spec *spec)
{
    for (size_t i = 0; i < call->n; i++) {
        const rm_slot *s = &call->slots[i];
        const char *server = call->c->pool.servers[i].ep.display;
        rm_err e;
        rm_err_reset(&e);
        bool unknown = false;
        if (s->excluded) {
            if (spec->excluded_is_no)
                rm_tally_no(t, i);
            continue;
        }
        if (s->status != RM_SLOT_DONE)
            continue;
        if (s->err) { /* named after the operation, unless a lost connection (never kept) */
            if (s->err != REDMUTEX_ECONN)
                rm_fail(&e, s->err, "%s '%s': %s", spec->what, spec->name, s->msg);
            rm_tally_unanswered(t, i, rm_slot_unknown(s), s->err, s->err != REDMUTEX_ECONN ? e.msg : s->msg);
            continue;
        }
        const rm_reply *r = s->replies[spec->reply];
        if (!r) {
            rm_fail(&e, REDMUTEX_EPROTOCOL, "%s '%s' on %s: a reply is missing", spec->what, spec->name, server);
            rm_tally_error(t, i, true, &e);
            continue;
        }
        if (r->type == RM_REPLY_ERROR) {
            rm_reply_error(&e, r, spec->what, spec->name, server);
            rm_tally_error(t, i, false, &e);
            continue;
        }
        switch (spec->vote(spec->ud, s, i, r, &e, &unknown)) {
        case RM_VOTE_YES:
            rm_tally_yes(t, i);
            break;
        case RM_VOTE_NO:
            rm_tally_no(t, i);
            break;
        case RM_VOTE_ERROR:
            rm_fail(&e, e.code, "%s '%s' on %s: %s", spec->what, spec->name, server, e.msg);
            rm_tally_error(t, i, unknown, &e);
            break;
        case RM_VOTE_NONE:
            break;
        }
    }
}

static int severity(int code)
{
    switch (code) {
    case REDMUTEX_EAUTH:
        return 7;
    case REDMUTEX_EWRONGTYPE:
        return 6;
    case REDMUTEX_EDUPLICATE:
        return 5;
    case REDMUTEX_ESERVER:
        return 4;
    case REDMUTEX_EPROTOCOL:
        return 3;
    case REDMUTEX_ENOMEM:
        return 2;
    default:
        return 1;
    }
}

/* The failure of a call that got no majority; t, when given, adds what the
   servers that did answer said: "1 of 3 servers failed" alone reads as if
   two answers had sufficed, when one of the two said no. */
static int call_fail(rm_err *err, const rm_call *call, const char *what, const char *name, const rm_tally *t)
{
    const rm_slot *worst = NULL;
    size_t failed = 0;
    for (size_t i = 0; i < call->n; i++) {
        const rm_slot *s = &call->slots[i];
        if (s->err == 0 || s->excluded || (s->not_waited && !s->stalled))
            continue;
        failed++;
        if (!worst || severity(s->err) > severity(worst->err))
            worst = s;
    }
    if (!worst)
        return rm_fail(err, REDMUTEX_ECONN, "%s '%s': no majority of servers answered", what, name);
    if (call->n == 1)
        return rm_fail(err, worst->err, "%s '%s': %s", what, name, worst->msg);
    if (t && t->no > 0)
        return rm_fail(err, worst->err,
                       "%s '%s': %zu of %zu servers failed, %zu refused and %zu agreed, need %zu to agree; %s", what,
                       name, failed, call->n, t->no, t->yes, call->c->quorum, worst->msg);
    return rm_fail(err, worst->err, "%s '%s': %zu of %zu servers failed, need %zu answers; %s", what, name, failed,
                   call->n, call->c->quorum, worst->msg);
}

int rm_call_fail(rm_err *err, const rm_call *call, const char *what, const char *name)
{
    return call_fail(err, call, what, name, NULL);
}

int rm_tally_fail(rm_err *err, const rm_tally *t, const rm_call *call, const char *what, const char *name)
{
    if (t->error.code && t->error_replied &&
        (rm_error_decides(t->error.code) || t->yes + t->no == 0 || t->errors >= rm_call_failed(call)))
        return rm_err_copy(err, &t->error);
    return call_fail(err, call, what, name, t);
}

size_t rm_call_skipped(const rm_call *call)
{
    size_t n = 0;
    for (size_t i = 0; i < call->n; i++)
        n += call->slots[i].stalled;
    return n;
}

size_t rm_call_running(const rm_call *call)
{
    size_t n = 0;
    for (size_t i = 0; i < call->n; i++)
        n += call->slots[i].status == RM_SLOT_RUNNING;
    return n;
}

size_t rm_call_failed(const rm_call *call)
{
    size_t n = 0;
    for (size_t i = 0; i < call->n; i++) {
        const rm_slot *s = &call->slots[i];
        n += s->err != 0 && !s->excluded && !s->not_waited;
    }
    return n;
}

size_t rm_call_answered(const rm_call *call)
{
    size_t n = 0;
    for (size_t i = 0; i < call->n; i++)
        if (call->slots[i].status == RM_SLOT_DONE && call->slots[i].err == 0)
            n++;
    return n;
}
