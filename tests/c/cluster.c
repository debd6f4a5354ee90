/* The test cluster (cluster.h). */
#define _GNU_SOURCE
#include "cluster.h"

#include "slots.h" /* the core's keyslot: names are picked without asking a node */

#include <errno.h>
#include <libgen.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The cluster tool that goes with the server binary. */
static const char *cli_binary(void)
{
    static char path[512];
    const char *cli = getenv("REDMUTEX_TEST_CLI");
    if (cli && *cli)
        return cli;
    const char *srv = getenv("REDMUTEX_TEST_SERVER");
    if (srv && *srv && strstr(srv, "-server")) {
        snprintf(path, sizeof path, "%s", srv);
        char *p = strstr(path, "-server");
        memcpy(p, "-cli", 5);
        if (access(path, X_OK) == 0)
            return path;
    }
    return "redis-cli";
}

static bool node_live(const rs_server *s) { return s->pid > 0; }

rs_server *rc_by_port(rc_cluster *cl, int port)
{
    for (int i = 0; i < cl->n; i++)
        if (cl->node[i].port == port)
            return &cl->node[i];
    return NULL;
}

/* An INFO section's text of s into out; false when unreachable. */
static bool info(rs_server *s, const char *section, char *out, size_t size)
{
    redisReply *r = rs_cmd(s, "INFO %s", section);
    bool ok = r && r->type == REDIS_REPLY_STRING;
    if (ok)
        snprintf(out, size, "%s", r->str);
    if (r)
        freeReplyObject(r);
    return ok;
}

/* Every live node: cluster_state:ok, and the same owner for each slot range (by CLUSTER SLOTS). */
static bool all_ok(rc_cluster *cl)
{
    char text[8192];
    int owner_of_0 = -1;
    for (int i = 0; i < cl->n; i++) {
        rs_server *s = &cl->node[i];
        if (!node_live(s))
            continue;
        redisReply *ci = rs_cmd(s, "CLUSTER INFO");
        bool ok = ci && ci->type == REDIS_REPLY_STRING && strstr(ci->str, "cluster_state:ok");
        if (ci)
            freeReplyObject(ci);
        if (!ok)
            return false;
        /* A replica must be in sync before the cluster is called ready. */
        if (!info(s, "replication", text, sizeof text))
            return false;
        if (strstr(text, "role:slave") && !strstr(text, "master_link_status:up"))
            return false;
        redisReply *r = rs_cmd(s, "CLUSTER SLOTS");
        bool covered = r && r->type == REDIS_REPLY_ARRAY;
        long long total = 0;
        int here_0 = -1;
        for (size_t k = 0; covered && k < r->elements; k++) {
            redisReply *e = r->element[k];
            total += e->element[1]->integer - e->element[0]->integer + 1;
            if (e->element[0]->integer == 0)
                here_0 = (int)e->element[2]->element[1]->integer;
        }
        if (r)
            freeReplyObject(r);
        if (!covered || total != 16384)
            return false;
        if (owner_of_0 < 0)
            owner_of_0 = here_0;
        else if (owner_of_0 != here_0)
            return false;
    }
    return true;
}

void rc_wait_ok(rc_cluster *cl, int64_t ms) { WAIT_FOR(all_ok(cl), ms); }

/* Starts the nodes (TLS too when certs is set), joins them and waits for the cluster. */
static void start_cluster(rc_cluster *cl, int masters, int replicas, const char *extra, const rt_certs *certs)
{
    memset(cl, 0, sizeof *cl);
    cl->n = masters * (1 + replicas);
    cl->masters = masters;
    if (cl->n > RC_MAX_NODES)
        rt_fail(__FILE__, __LINE__, "at most %d cluster nodes", RC_MAX_NODES);
    char conf[1024];
    /* A TLS bus handshake on a loaded machine can outlast a 1 s handshake timeout (= node timeout). */
    snprintf(conf, sizeof conf,
             "cluster-enabled yes\ncluster-config-file nodes.conf\ncluster-node-timeout %d\n"
             "cluster-require-full-coverage yes\n%s%s",
             certs ? 5000 : 1000, certs ? "tls-cluster yes\ntls-replication yes\n" : "", extra ? extra : "");
    char cmd[4096];
    int len = snprintf(cmd, sizeof cmd, "'%s' --cluster create", cli_binary());
    size_t off = (size_t)snprintf(cl->url, sizeof cl->url, certs ? "rediss://" : "redis://");
    for (int i = 0; i < cl->n; i++) {
        /* The bus port is chosen too: port + 10000 may be out of range or taken. */
        char node_conf[1200];
        snprintf(node_conf, sizeof node_conf, "cluster-port %d\n%s", rt_free_port(), conf);
        rs_tls_config tls = {"server.pem", "server.key", false, true};
        if (certs)
            rs_start_tls(&cl->node[i], certs, &tls, node_conf);
        else
            rs_start(&cl->node[i], node_conf);
        rs_keep(&cl->node[i]); /* one cluster serves every test of a binary */
        /* The cluster is made over the plain ports; clients go to the TLS ones. */
        len += snprintf(cmd + len, sizeof cmd - (size_t)len, " 127.0.0.1:%d", cl->node[i].port);
        off += (size_t)snprintf(cl->url + off, sizeof cl->url - off, "%s127.0.0.1:%d", i ? "," : "",
                                certs ? cl->node[i].tls_port : cl->node[i].port);
    }
    snprintf(cl->url + off, sizeof cl->url - off, "/0");
    snprintf(cmd + len, sizeof cmd - (size_t)len, " --cluster-replicas %d --cluster-yes >'%s/create.log' 2>&1",
             replicas, cl->node[0].dir);
    if (system(cmd) != 0)
        rt_fail(__FILE__, __LINE__, "%s failed (see %s/create.log)", cmd, cl->node[0].dir);
    rc_wait_ok(cl, 30000);
}

void rc_start(rc_cluster *cl, int masters, int replicas, const char *extra)
{
    start_cluster(cl, masters, replicas, extra, NULL);
}

void rc_start_tls(rc_cluster *cl, int masters, int replicas, const rt_certs *certs)
{
    start_cluster(cl, masters, replicas, NULL, certs);
}

void rc_stop(rc_cluster *cl)
{
    for (int i = 0; i < cl->n; i++)
        rs_stop(&cl->node[i]);
}

static rs_server *any_live(rc_cluster *cl)
{
    for (int i = 0; i < cl->n; i++)
        if (node_live(&cl->node[i]))
            return &cl->node[i];
    return NULL;
}

rs_server *rc_owner(rc_cluster *cl, int slot)
{
    rs_server *ask = any_live(cl);
    redisReply *r = ask ? rs_cmd(ask, "CLUSTER SLOTS") : NULL;
    rs_server *owner = NULL;
    for (size_t k = 0; r && r->type == REDIS_REPLY_ARRAY && k < r->elements; k++) {
        redisReply *e = r->element[k];
        if (slot >= e->element[0]->integer && slot <= e->element[1]->integer)
            owner = rc_by_port(cl, (int)e->element[2]->element[1]->integer);
    }
    if (r)
        freeReplyObject(r);
    return owner;
}

int rc_keyslot(rc_cluster *cl, const char *key, size_t len)
{
    rs_server *s = any_live(cl);
    redisReply *r = s ? rs_cmd(s, "CLUSTER KEYSLOT %b", key, len) : NULL;
    int slot = r && r->type == REDIS_REPLY_INTEGER ? (int)r->integer : -1;
    if (r)
        freeReplyObject(r);
    return slot;
}

void rc_node_id(rs_server *s, char out[64])
{
    redisReply *r = rs_cmd(s, "CLUSTER MYID");
    if (!r || r->type != REDIS_REPLY_STRING)
        rt_fail(__FILE__, __LINE__, "CLUSTER MYID failed on port %d", s->port);
    snprintf(out, 64, "%s", r->str);
    freeReplyObject(r);
}

rs_server *rc_replica_of(rc_cluster *cl, rs_server *m)
{
    char id[64];
    rc_node_id(m, id);
    redisReply *r = rs_cmd(m, "CLUSTER REPLICAS %s", id);
    rs_server *rep = NULL;
    for (size_t k = 0; r && r->type == REDIS_REPLY_ARRAY && k < r->elements && !rep; k++) {
        /* "<id> <ip:port@bus> ..." */
        const char *colon = strchr(r->element[k]->str, ':');
        rs_server *s = colon ? rc_by_port(cl, atoi(colon + 1)) : NULL;
        if (s && node_live(s) && !strstr(r->element[k]->str, "fail"))
            rep = s;
    }
    if (r)
        freeReplyObject(r);
    return rep;
}

static void setslot_all(rc_cluster *cl, int slot, const char *id)
{
    for (int i = 0; i < cl->n; i++)
        if (node_live(&cl->node[i])) {
            redisReply *r = rs_cmd(&cl->node[i], "CLUSTER SETSLOT %d NODE %s", slot, id);
            if (r)
                freeReplyObject(r);
        }
}

static void expect_ok(redisReply *r, const char *what)
{
    bool ok = r && r->type == REDIS_REPLY_STATUS;
    if (!ok)
        rt_fail(__FILE__, __LINE__, "%s: %s", what, r && r->str ? r->str : "no reply");
    freeReplyObject(r);
}

void rc_migrate_begin(rc_cluster *cl, int slot, rs_server *from, rs_server *to)
{
    (void)cl;
    char from_id[64], to_id[64];
    rc_node_id(from, from_id);
    rc_node_id(to, to_id);
    expect_ok(rs_cmd(to, "CLUSTER SETSLOT %d IMPORTING %s", slot, from_id), "SETSLOT IMPORTING");
    expect_ok(rs_cmd(from, "CLUSTER SETSLOT %d MIGRATING %s", slot, to_id), "SETSLOT MIGRATING");
}

void rc_migrate_keys(rc_cluster *cl, int slot, rs_server *from, rs_server *to)
{
    (void)cl;
    for (;;) {
        redisReply *r = rs_cmd(from, "CLUSTER GETKEYSINSLOT %d 100", slot);
        if (!r || r->type != REDIS_REPLY_ARRAY)
            rt_fail(__FILE__, __LINE__, "CLUSTER GETKEYSINSLOT failed");
        if (r->elements == 0) {
            freeReplyObject(r);
            return;
        }
        for (size_t k = 0; k < r->elements; k++) {
            redisReply *m = rs_cmd(from, "MIGRATE 127.0.0.1 %d %s 0 5000 KEYS %b", to->port, "", r->element[k]->str,
                                   r->element[k]->len);
            if (!m || m->type == REDIS_REPLY_ERROR)
                rt_fail(__FILE__, __LINE__, "MIGRATE failed: %s", m && m->str ? m->str : "no reply");
            freeReplyObject(m);
        }
        freeReplyObject(r);
    }
}

void rc_migrate_end(rc_cluster *cl, int slot, rs_server *to)
{
    char to_id[64];
    rc_node_id(to, to_id);
    /* The new owner first, so it never answers MOVED towards the old one. */
    redisReply *r = rs_cmd(to, "CLUSTER SETSLOT %d NODE %s", slot, to_id);
    if (r)
        freeReplyObject(r);
    setslot_all(cl, slot, to_id);
}

void rc_migrate_slot(rc_cluster *cl, int slot, rs_server *to)
{
    rs_server *from = rc_owner(cl, slot);
    if (!from)
        rt_fail(__FILE__, __LINE__, "slot %d has no owner", slot);
    if (from == to)
        return;
    rc_migrate_begin(cl, slot, from, to);
    rc_migrate_keys(cl, slot, from, to);
    rc_migrate_end(cl, slot, to);
}

long long rc_errorstat(rs_server *s, const char *what)
{
    char text[8192], key[64];
    if (!info(s, "errorstats", text, sizeof text))
        return 0;
    snprintf(key, sizeof key, "errorstat_%s:count=", what);
    const char *p = strstr(text, key);
    return p ? atoll(p + strlen(key)) : 0;
}

long long rc_errorstat_all(rc_cluster *cl, const char *what)
{
    long long n = 0;
    for (int i = 0; i < cl->n; i++)
        if (node_live(&cl->node[i]))
            n += rc_errorstat(&cl->node[i], what);
    return n;
}

void rc_resetstat(rc_cluster *cl)
{
    for (int i = 0; i < cl->n; i++)
        if (node_live(&cl->node[i])) {
            redisReply *r = rs_cmd(&cl->node[i], "CONFIG RESETSTAT");
            if (r)
                freeReplyObject(r);
        }
}

rs_server *rc_master(rc_cluster *cl, int k)
{
    int seen = 0;
    for (int i = 0; i < cl->n; i++) {
        rs_server *s = &cl->node[i];
        if (!node_live(s))
            continue;
        char text[8192];
        if (!info(s, "replication", text, sizeof text) || !strstr(text, "role:master"))
            continue;
        redisReply *r = rs_cmd(s, "CLUSTER COUNTKEYSINSLOT 0"); /* any reply: reachable */
        if (r)
            freeReplyObject(r);
        for (int slot = 0; slot < 16384; slot += 64)
            if (rc_owner(cl, slot) == s) {
                if (seen++ == k)
                    return s;
                break;
            }
    }
    return NULL;
}

void rc_name_on(rc_cluster *cl, rs_server *m, const char *pattern, char *out, size_t size)
{
    /* The owners of all slots once, then names tried locally. */
    static int owner_port[16384];
    rs_server *ask = any_live(cl);
    redisReply *r = ask ? rs_cmd(ask, "CLUSTER SLOTS") : NULL;
    for (size_t k = 0; r && r->type == REDIS_REPLY_ARRAY && k < r->elements; k++) {
        redisReply *e = r->element[k];
        for (long long s = e->element[0]->integer; s <= e->element[1]->integer; s++)
            owner_port[s] = (int)e->element[2]->element[1]->integer;
    }
    if (r)
        freeReplyObject(r);
    for (int i = 0; i < 100000; i++) {
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
        snprintf(out, size, pattern, i);
#pragma GCC diagnostic pop
        if (owner_port[rm_keyslot(out, strlen(out))] == m->port)
            return;
    }
    rt_fail(__FILE__, __LINE__, "no name of the form %s on port %d", pattern, m->port);
}
