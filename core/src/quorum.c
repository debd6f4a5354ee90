/*
 * Quorum arithmetic (quorum.h): vote counting and lease validity, pure.
 */
#include "internal.h"
#include "quorum.h"

#include <stdio.h>
#include <string.h>

bool rm_restart_too_young(int64_t now_ns, int64_t seen_ns, size_t n, int64_t longest_lease_ms)
{
    if (n == 1 || seen_ns == 0)
        return false;
    return now_ns - seen_ns < longest_lease_ms * RM_NS_PER_MS + rm_drift_ns(longest_lease_ms);
}

int64_t rm_qth_largest(int64_t *v, size_t n, size_t q, bool ttl_order)
{
    /* At most REDMUTEX_SERVERS_MAX values: a selection sort is plenty. */
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

void rm_tally_init(rm_tally *t)
{
    t->yes = t->no = t->failed = t->errors = t->wrongtype = 0;
    memset(t->yes_at, 0, sizeof t->yes_at);
    memset(t->unknown_at, 0, sizeof t->unknown_at);
    rm_err_reset(&t->error);
    t->error_replied = false;
}

void rm_tally_yes(rm_tally *t, size_t i)
{
    t->yes++;
    t->yes_at[i] = true;
}

void rm_tally_no(rm_tally *t, size_t i)
{
    (void)i;
    t->no++;
}

/* Errors in the order they win: a wrong type, then refused credentials, then any other. */
static int error_rank(int code) { return code == REDMUTEX_EWRONGTYPE ? 2 : code == REDMUTEX_EAUTH ? 1 : 0; }

/* Keeps the first error, unless a later one outranks it. */
static bool keep_error(rm_tally *t, int code, const char *msg)
{
    if (t->error.code && error_rank(code) <= error_rank(t->error.code))
        return false;
    rm_fail(&t->error, code, "%s", msg ? msg : "");
    return true;
}

void rm_tally_unanswered(rm_tally *t, size_t i, bool unknown, int code, const char *msg)
{
    t->failed++;
    /* A request that went out may have been applied: it must be cleaned up. */
    t->unknown_at[i] = unknown;
    if (code != REDMUTEX_ECONN && keep_error(t, code, msg))
        t->error_replied = false;
}

void rm_tally_error(rm_tally *t, size_t i, bool unknown, const rm_err *e)
{
    t->failed++;
    t->errors++;
    t->wrongtype += e->code == REDMUTEX_EWRONGTYPE;
    t->unknown_at[i] = unknown;
    if (keep_error(t, e->code, e->msg))
        t->error_replied = true;
}

void rm_votes_init(rm_votes *v)
{
    rm_tally_init(&v->t);
    v->gone = v->young = 0;
    v->count = v->fence = 0;
    v->ttl = -1;
    v->granted_ttl = -1;
    v->behind = -1;
}

void rm_votes_behind(rm_votes *v, int64_t behind)
{
    if (behind < 0)
        behind = 0;
    if (v->behind < 0 || behind < v->behind)
        v->behind = behind;
}

void rm_votes_refused(rm_votes *v, int64_t holder_ttl_ms, bool gone)
{
    v->gone += gone;
    if (holder_ttl_ms >= 0 && (v->ttl < 0 || holder_ttl_ms < v->ttl))
        v->ttl = holder_ttl_ms;
}

void rm_votes_grant_figures(rm_votes *v, int64_t count, int64_t fence, int64_t granted_ttl_ms)
{
    if (count > v->count)
        v->count = count;
    if (fence > v->fence)
        v->fence = fence;
    if (granted_ttl_ms >= 0 && (v->granted_ttl < 0 || granted_ttl_ms < v->granted_ttl))
        v->granted_ttl = granted_ttl_ms;
}

void rm_votes_young(rm_votes *v, size_t i)
{
    v->t.yes_at[i] = true;
    v->young++;
}

rm_acquire_verdict rm_acquire_decide(const rm_votes *v, size_t n, size_t q, int64_t validity_ns, bool nested,
                                     size_t broken)
{
    const rm_tally *t = &v->t;
    int error = t->error.code;
    if (t->yes >= q && validity_ns > 0)
        return RM_VERDICT_WON;
    if (nested && v->gone > n - q)
        return RM_VERDICT_NESTED_LOST;
    if (t->yes >= q)
        return RM_VERDICT_TOO_SLOW;
    if (error == REDMUTEX_EREPLICAS)
        return RM_VERDICT_REPLICAS;
    if (t->yes + t->no >= q)
        return RM_VERDICT_BUSY;
    if (rm_error_decides(error) || (error && t->yes + t->no == 0))
        return RM_VERDICT_ERROR;
    if (broken > n - q)
        return RM_VERDICT_UNREACHABLE;
    /* A minority is down or slow and the rest did not settle it: keep
       waiting while a majority can still answer (Redlock's purpose). */
    return RM_VERDICT_UNDECIDED;
}
