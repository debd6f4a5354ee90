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

void rm_votes_init(rm_votes *v)
{
    memset(v, 0, sizeof *v);
    v->ttl = -1;
    v->granted_ttl = -1;
}

static void keep_error(rm_votes *v, int code, const char *msg)
{
    if (v->error)
        return;
    v->error = code;
    snprintf(v->error_msg, sizeof v->error_msg, "%s", msg ? msg : "");
}

void rm_votes_unanswered(rm_votes *v, size_t i, bool unknown, int code, const char *msg)
{
    v->failed++;
    /* A request that went out may have been applied: it must be cleaned up. */
    v->unknown_at[i] = unknown;
    if (code != REDMUTEX_ECONN)
        keep_error(v, code, msg);
}

void rm_votes_error(rm_votes *v, size_t i, bool unknown, int code, const char *msg)
{
    v->failed++;
    v->errors++;
    v->unknown_at[i] = unknown;
    keep_error(v, code, msg);
}

void rm_votes_refused(rm_votes *v, size_t i, int64_t holder_ttl_ms, bool gone)
{
    (void)i;
    v->no++;
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

void rm_votes_granted(rm_votes *v, size_t i, bool too_young)
{
    v->yes_at[i] = true; /* part of the hold, renewed and released with it, in any case */
    if (too_young) {
        v->no++;
        v->young++;
    } else {
        v->yes++;
    }
}

rm_acquire_verdict rm_acquire_decide(const rm_votes *v, size_t n, size_t q, int64_t validity_ns, bool nested,
                                     size_t broken)
{
    if (v->yes >= q && validity_ns > 0)
        return RM_VERDICT_WON;
    if (nested && v->gone > n - q)
        return RM_VERDICT_NESTED_LOST;
    if (v->yes >= q)
        return RM_VERDICT_TOO_SLOW;
    if (v->error == REDMUTEX_EREPLICAS)
        return RM_VERDICT_REPLICAS;
    if (v->yes + v->no >= q)
        return RM_VERDICT_BUSY;
    if (v->error == REDMUTEX_EWRONGTYPE || v->error == REDMUTEX_EAUTH || (v->error && v->yes + v->no == 0))
        return RM_VERDICT_ERROR;
    if (broken > n - q)
        return RM_VERDICT_UNREACHABLE;
    /* A minority is down or slow and the rest did not settle it: keep
       waiting while a majority can still answer (Redlock's purpose). */
    return RM_VERDICT_UNDECIDED;
}
