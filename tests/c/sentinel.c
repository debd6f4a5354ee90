/* The test Sentinel deployment (sentinel.h). */
#define _GNU_SOURCE
#include "sentinel.h"

#include <stdarg.h>
#include <string.h>

static bool live(const rs_server *s) { return s->pid > 0; }

redisReply *sn_sentinel_cmd(sn_deploy *d, rs_server *s, const char *fmt, ...)
{
    struct timeval tv = {2, 0};
    redisContext *ctx = redisConnectWithTimeout("127.0.0.1", s->port, tv);
    if (!ctx || ctx->err) {
        if (ctx)
            redisFree(ctx);
        return NULL;
    }
    redisSetTimeout(ctx, tv);
    if (d->sentinel_password) {
        redisReply *a = redisCommand(ctx, "AUTH %s", d->sentinel_password);
        if (a)
            freeReplyObject(a);
    }
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = redisvCommand(ctx, fmt, ap);
    va_end(ap);
    redisFree(ctx);
    return r;
}

/* The master's port as sentinel s names it, -1 when it does not answer. */
static int named_by(sn_deploy *d, rs_server *s)
{
    redisReply *r = sn_sentinel_cmd(d, s, "SENTINEL GET-MASTER-ADDR-BY-NAME %s", d->service);
    int port = r && r->type == REDIS_REPLY_ARRAY && r->elements == 2 ? atoi(r->element[1]->str) : -1;
    if (r)
        freeReplyObject(r);
    return port;
}

int sn_master_port(sn_deploy *d)
{
    for (int k = 0; k < SN_SENTINELS; k++)
        if (live(&d->sentinel[k])) {
            int port = named_by(d, &d->sentinel[k]);
            if (port > 0)
                return port;
        }
    return -1;
}

rs_server *sn_node(sn_deploy *d, int port)
{
    for (int k = 0; k < SN_NODES; k++)
        if (d->node[k].port == port)
            return &d->node[k];
    return NULL;
}

rs_server *sn_master(sn_deploy *d)
{
    rs_server *m = sn_node(d, sn_master_port(d));
    CHECKF(m && live(m), "no sentinel names a live master");
    return m;
}

const char *sn_role(rs_server *s)
{
    static _Thread_local char role[16];
    redisReply *r = rs_cmd(s, "ROLE");
    snprintf(role, sizeof role, "%s",
             r && r->type == REDIS_REPLY_ARRAY && r->elements > 0 && r->element[0]->type == REDIS_REPLY_STRING
                 ? r->element[0]->str
                 : "?");
    if (r)
        freeReplyObject(r);
    return role;
}

int sn_replicas_in_sync(sn_deploy *d, int master_port)
{
    rs_server *m = sn_node(d, master_port);
    redisReply *r = m ? rs_cmd(m, "ROLE") : NULL;
    int n = -1;
    if (r && r->type == REDIS_REPLY_ARRAY && r->elements == 3 && strcmp(r->element[0]->str, "master") == 0) {
        n = 0;
        for (size_t k = 0; k < r->element[2]->elements; k++) {
            rs_server *rep = sn_node(d, atoi(r->element[2]->element[k]->element[1]->str));
            redisReply *info = rep ? rs_cmd(rep, "INFO replication") : NULL;
            n += info && info->type == REDIS_REPLY_STRING && strstr(info->str, "master_link_status:up");
            if (info)
                freeReplyObject(info);
        }
    }
    if (r)
        freeReplyObject(r);
    return n;
}

/* Replicas sentinel s sees following master_port with their link up (its last INFO of each). */
static int replicas_seen(sn_deploy *d, rs_server *s, int master_port)
{
    redisReply *r = sn_sentinel_cmd(d, s, "SENTINEL REPLICAS %s", d->service);
    int n = 0;
    for (size_t k = 0; r && r->type == REDIS_REPLY_ARRAY && k < r->elements; k++) {
        redisReply *f = r->element[k];
        bool ok = false, follows = false, down = false;
        for (size_t j = 0; j + 1 < f->elements; j += 2) {
            const char *key = f->element[j]->str, *val = f->element[j + 1]->str;
            ok |= strcmp(key, "master-link-status") == 0 && strcmp(val, "ok") == 0;
            follows |= strcmp(key, "master-port") == 0 && atoi(val) == master_port;
            down |= strcmp(key, "flags") == 0 && (strstr(val, "s_down") || strstr(val, "disconnected"));
        }
        n += ok && follows && !down;
    }
    if (r)
        freeReplyObject(r);
    return n;
}

/* Whether sentinel s names master_port, sees its live replicas follow it, knows the other live sentinels
   and can authorise a failover. */
static bool sentinel_agrees(sn_deploy *d, rs_server *s, int master_port, int live_sentinels)
{
    int live_replicas = -1;
    for (int k = 0; k < SN_NODES; k++)
        live_replicas += live(&d->node[k]);
    if (named_by(d, s) != master_port || replicas_seen(d, s, master_port) < live_replicas)
        return false;
    redisReply *others = sn_sentinel_cmd(d, s, "SENTINEL SENTINELS %s", d->service);
    redisReply *quorum = sn_sentinel_cmd(d, s, "SENTINEL CKQUORUM %s", d->service);
    bool ok = others && others->type == REDIS_REPLY_ARRAY && (int)others->elements >= live_sentinels - 1 && quorum &&
              quorum->type == REDIS_REPLY_STATUS && strncmp(quorum->str, "OK", 2) == 0;
    if (others)
        freeReplyObject(others);
    if (quorum)
        freeReplyObject(quorum);
    return ok;
}

/* Why the deployment is not whole around master_port (why[0] == '\0': it is). */
static bool agreed(sn_deploy *d, int master_port, char why[200])
{
    int live_nodes = 0, live_sentinels = 0;
    for (int k = 0; k < SN_NODES; k++)
        live_nodes += live(&d->node[k]);
    for (int k = 0; k < SN_SENTINELS; k++)
        live_sentinels += live(&d->sentinel[k]);
    int in_sync = sn_replicas_in_sync(d, master_port);
    if (in_sync < live_nodes - 1) {
        int n = snprintf(why, 200, "%d of %d replicas of %d in sync; roles:", in_sync, live_nodes - 1, master_port);
        for (int k = 0; k < SN_NODES && n < 200; k++)
            if (live(&d->node[k]))
                n += snprintf(why + n, 200 - (size_t)n, " %d %s", d->node[k].port, sn_role(&d->node[k]));
        return false;
    }
    for (int k = 0; k < SN_SENTINELS; k++)
        if (live(&d->sentinel[k]) && !sentinel_agrees(d, &d->sentinel[k], master_port, live_sentinels)) {
            snprintf(why, 200, "sentinel %d names %d, or sees too few replicas, sentinels or no quorum",
                     d->sentinel[k].port, named_by(d, &d->sentinel[k]));
            return false;
        }
    why[0] = '\0';
    return true;
}

/* Waits until the deployment is whole around master_port; fails the test with the reason. */
static void wait_agreed(sn_deploy *d, int master_port, int64_t ms)
{
    char why[200];
    int64_t deadline = rt_now_ms() + rt_scaled_ms(ms);
    while (!agreed(d, master_port, why)) {
        CHECKF(rt_now_ms() < deadline, "the deployment is not whole around port %d after %lld ms: %s", master_port,
               (long long)ms, why);
        rt_sleep_ms(20);
    }
}

void sn_start(sn_deploy *d, const char *sentinel_password)
{
    memset(d, 0, sizeof *d);
    snprintf(d->service, sizeof d->service, "mymaster");
    d->sentinel_password = sentinel_password;
    d->down_after_ms = 1000;
    d->failover_timeout_ms = 2000;
    const char *repl = "repl-diskless-sync yes\nrepl-diskless-sync-delay 0\n";
    rs_start(&d->node[0], repl);
    rs_keep(&d->node[0]);
    for (int k = 1; k < SN_NODES; k++) {
        char conf[256];
        snprintf(conf, sizeof conf, "%sreplicaof 127.0.0.1 %d\n", repl, d->node[0].port);
        rs_start(&d->node[k], conf);
        rs_keep(&d->node[k]);
    }
    WAIT_FOR(sn_replicas_in_sync(d, d->node[0].port) == SN_NODES - 1, 30000);
    char conf[1024];
    int n = snprintf(conf, sizeof conf,
                     "sentinel monitor %s 127.0.0.1 %d 2\nsentinel down-after-milliseconds %s %d\n"
                     "sentinel failover-timeout %s %d\nsentinel parallel-syncs %s 2\n",
                     d->service, d->node[0].port, d->service, d->down_after_ms, d->service, d->failover_timeout_ms,
                     d->service);
    if (sentinel_password)
        snprintf(conf + n, sizeof conf - (size_t)n, "requirepass %s\nsentinel sentinel-pass %s\n", sentinel_password,
                 sentinel_password);
    int off = snprintf(d->url, sizeof d->url, "redis+sentinel://");
    for (int k = 0; k < SN_SENTINELS; k++) {
        rs_start_sentinel(&d->sentinel[k], conf);
        rs_keep(&d->sentinel[k]);
        /* INFO every second (not 10): the sentinels' view of each replica (and of a demoted master)
           is fresh when a test faults the deployment, as after a real failover's settling. */
        redisReply *r = sn_sentinel_cmd(d, &d->sentinel[k], "SENTINEL DEBUG info-period 1000");
        CHECKF(r && r->type == REDIS_REPLY_STATUS, "SENTINEL DEBUG info-period: %s", r ? r->str : "no answer");
        freeReplyObject(r);
        off += snprintf(d->url + off, sizeof d->url - (size_t)off, "%s127.0.0.1:%d", k ? "," : "", d->sentinel[k].port);
    }
    off += snprintf(d->url + off, sizeof d->url - (size_t)off, "/%s", d->service);
    if (sentinel_password)
        snprintf(d->url + off, sizeof d->url - (size_t)off, "?sentinel_password=%s", sentinel_password);
    wait_agreed(d, d->node[0].port, 30000);
}

int sn_wait_switch(sn_deploy *d, int old_port, int64_t ms)
{
    int64_t deadline = rt_now_ms() + rt_scaled_ms(ms);
    for (;;) {
        int port = -1;
        bool same = true;
        for (int k = 0; k < SN_SENTINELS; k++) {
            if (!live(&d->sentinel[k]))
                continue;
            int p = named_by(d, &d->sentinel[k]);
            same &= port < 0 || p == port;
            port = p;
        }
        rs_server *m = same && port > 0 && port != old_port ? sn_node(d, port) : NULL;
        if (m && strcmp(sn_role(m), "master") == 0)
            return port;
        CHECKF(rt_now_ms() < deadline, "the sentinels did not switch away from port %d in %lld ms", old_port,
               (long long)ms);
        rt_sleep_ms(5);
    }
}

int sn_failover(sn_deploy *d)
{
    int old = sn_master_port(d);
    /* A sentinel still finishing the last failover (reconfiguring replicas) answers INPROG, one whose
       view of the replicas is not fresh yet (its next INFO round) NOGOODSLAVE: asked again. */
    int64_t deadline = rt_now_ms() + rt_scaled_ms(30000);
    for (;;) {
        redisReply *r = NULL;
        for (int k = 0; k < SN_SENTINELS && !r; k++)
            if (live(&d->sentinel[k]))
                r = sn_sentinel_cmd(d, &d->sentinel[k], "SENTINEL FAILOVER %s", d->service);
        bool ok = r && r->type == REDIS_REPLY_STATUS;
        bool busy = r && r->type == REDIS_REPLY_ERROR && (strstr(r->str, "INPROG") || strstr(r->str, "NOGOODSLAVE"));
        CHECKF(ok || (busy && rt_now_ms() < deadline), "SENTINEL FAILOVER: %s", r ? r->str : "no sentinel answered");
        if (r)
            freeReplyObject(r);
        if (ok)
            break;
        rt_sleep_ms(50);
    }
    d->last_failover_ms = rt_now_ms();
    return sn_wait_switch(d, old, 20000);
}

rs_server *sn_kill_master(sn_deploy *d)
{
    /* A sentinel starts no new failover of a master within twice the
       failover-timeout of the last one: wait that out (a known pause). */
    int64_t ready = d->last_failover_ms + 2 * d->failover_timeout_ms + 100;
    if (rt_now_ms() < ready)
        rt_sleep_ms(ready - rt_now_ms());
    rs_server *m = sn_master(d);
    rs_kill(m);
    d->last_failover_ms = rt_now_ms();
    return m;
}

/* The port a replica replicates from (ROLE), 0 for a master or a node that does not answer. */
static int master_of(rs_server *s)
{
    redisReply *r = rs_cmd(s, "ROLE");
    int port = r && r->type == REDIS_REPLY_ARRAY && r->elements >= 3 && strcmp(r->element[0]->str, "slave") == 0
                   ? (int)r->element[2]->integer
                   : 0;
    if (r)
        freeReplyObject(r);
    return port;
}

void sn_settle(sn_deploy *d)
{
    /* The master is asked again each round: what a sentinel names right after a fault may not be what they
       settle on (a switch still spreading, a second failover on a loaded machine), and a deployment waited for
       around a master it no longer has is never whole. Nodes are pointed only at a master that says it is one. */
    char why[200];
    int64_t deadline = rt_now_ms() + rt_scaled_ms(30000);
    for (;;) {
        int master = sn_master_port(d);
        rs_server *m = master > 0 ? sn_node(d, master) : NULL;
        if (m && live(m) && strcmp(sn_role(m), "master") == 0) {
            for (int k = 0; k < SN_NODES; k++) {
                rs_server *s = &d->node[k];
                if (!live(s) || s->port == master || master_of(s) == master)
                    continue;
                /* A demoted master (or a replica of a promotion the sentinels gave
                   up and redid) is pointed at the master by the sentinels only at
                   their next INFO round: done here at once, as they would. */
                redisReply *r = rs_cmd(s, "REPLICAOF 127.0.0.1 %d", master);
                if (r)
                    freeReplyObject(r);
            }
            if (agreed(d, master, why))
                return;
        } else {
            snprintf(why, sizeof why, "the sentinels name %d, which is no master (%s)", master, m ? sn_role(m) : "?");
        }
        CHECKF(rt_now_ms() < deadline, "the deployment did not settle in 30000 ms: %s", why);
        rt_sleep_ms(20);
    }
}

void sn_restart_as_replica(sn_deploy *d, rs_server *node)
{
    int master = sn_master_port(d);
    const char *repl = "repl-diskless-sync yes\nrepl-diskless-sync-delay 0\n";
    snprintf(node->extra, sizeof node->extra, "%sreplicaof 127.0.0.1 %d\n", repl, master);
    rs_restart(node);
}

void sn_restart_as_master(sn_deploy *d, rs_server *node)
{
    (void)d;
    snprintf(node->extra, sizeof node->extra, "repl-diskless-sync yes\nrepl-diskless-sync-delay 0\n");
    rs_restart(node);
}

long long sn_cmdstat(rs_server *s, const char *cmd)
{
    redisReply *r = rs_cmd(s, "INFO commandstats");
    long long n = 0;
    char key[64];
    snprintf(key, sizeof key, "cmdstat_%s:calls=", cmd);
    const char *p = r && r->type == REDIS_REPLY_STRING ? strstr(r->str, key) : NULL;
    if (p) {
        n = atoll(p + strlen(key));
        const char *rej = strstr(p, "rejected_calls=");
        if (rej && rej < strchr(p, '\n'))
            n += atoll(rej + 15);
    }
    if (r)
        freeReplyObject(r);
    return n;
}
