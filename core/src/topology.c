/* Cluster topology replies (topology.h). */
#define _GNU_SOURCE
#include "internal.h"
#include "slots.h"
#include "topology.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* host and port of a CLUSTER SLOTS node entry [ip, port, id, ...]. */
static bool node_address(const rm_reply *n, char host[256], int *port)
{
    if (n->type != RM_REPLY_ARRAY || n->elements < 2 || n->element[0]->type != RM_REPLY_STRING ||
        n->element[1]->type != RM_REPLY_INTEGER || n->element[1]->integer <= 0 || n->element[1]->integer > 65535 ||
        n->element[0]->len >= 256)
        return false;
    /* "?" or "" (a node that does not know its address, Redis 7): the address it was reached at. */
    const char *ip = n->element[0]->str;
    snprintf(host, 256, "%s", strcmp(ip, "?") == 0 ? "" : ip);
    *port = (int)n->element[1]->integer;
    return true;
}

int rm_topo_read_slots(const rm_reply *r, void (*fn)(void *ud, const rm_topo_range *range), void *ud)
{
    if (!r || r->type != RM_REPLY_ARRAY)
        return -1;
    int n = 0;
    for (size_t k = 0; k < r->elements; k++) {
        const rm_reply *e = r->element[k];
        if (e->type != RM_REPLY_ARRAY || e->elements < 3 || e->element[0]->type != RM_REPLY_INTEGER ||
            e->element[1]->type != RM_REPLY_INTEGER)
            continue;
        rm_topo_range range;
        range.first = (int)e->element[0]->integer;
        range.last = (int)e->element[1]->integer;
        range.replicas = 0;
        for (size_t r2 = 3; r2 < e->elements; r2++)
            range.replicas += e->element[r2]->type == RM_REPLY_ARRAY;
        if (range.first < 0 || range.last >= RM_SLOTS || range.first > range.last ||
            !node_address(e->element[2], range.host, &range.port))
            continue;
        fn(ud, &range);
        n++;
    }
    return n;
}

/* The value of `field` in a flat map reply [k1, v1, k2, v2, ...], or NULL. */
static const rm_reply *map_get(const rm_reply *m, const char *field)
{
    if (m->type != RM_REPLY_ARRAY)
        return NULL;
    for (size_t k = 0; k + 1 < m->elements; k += 2)
        if (m->element[k]->type == RM_REPLY_STRING && strcmp(m->element[k]->str, field) == 0)
            return m->element[k + 1];
    return NULL;
}

static bool map_is(const rm_reply *m, const char *field, const char *value)
{
    const rm_reply *v = map_get(m, field);
    return v && v->type == RM_REPLY_STRING && strcmp(v->str, value) == 0;
}

/* A shard's master: online if one is, else the one listed; NULL when none.
   *ambiguous: more than one is online. (Valkey groups nodes by shard id:
   for about a node timeout after a replica took over from a master that
   stopped answering, it lists both as online masters of the one shard, and
   nothing in the reply says which owns the slots.) */
static const rm_reply *shard_master(const rm_reply *nodes, bool *ambiguous)
{
    const rm_reply *listed = NULL, *online = NULL;
    *ambiguous = false;
    for (size_t k = 0; nodes && nodes->type == RM_REPLY_ARRAY && k < nodes->elements; k++) {
        const rm_reply *n = nodes->element[k];
        if (!map_is(n, "role", "master"))
            continue;
        if (map_is(n, "health", "online")) {
            *ambiguous = online != NULL;
            if (*ambiguous)
                return NULL;
            online = n;
        }
        if (!listed)
            listed = n;
    }
    return online ? online : listed;
}

/* A shard's replicas that have not failed. ("loading" counts: a node also
   reports a replica that has seen no write yet - offset 0 - as loading.) */
static int shard_replicas(const rm_reply *nodes)
{
    int n = 0;
    for (size_t k = 0; nodes && nodes->type == RM_REPLY_ARRAY && k < nodes->elements; k++)
        n += map_is(nodes->element[k], "role", "replica") && !map_is(nodes->element[k], "health", "fail");
    return n;
}

/* A CLUSTER SHARDS node's address (tls: its tls-port when it has one). */
static bool shard_address(const rm_reply *n, bool tls, char host[256], int *port)
{
    const rm_reply *ep = map_get(n, "endpoint"), *ip = map_get(n, "ip");
    const rm_reply *p = tls && map_get(n, "tls-port") ? map_get(n, "tls-port") : map_get(n, "port");
    if (!p || p->type != RM_REPLY_INTEGER || p->integer <= 0 || p->integer > 65535)
        return false;
    const rm_reply *h = ep && ep->type == RM_REPLY_STRING && ep->len > 0 && strcmp(ep->str, "?") != 0 ? ep : ip;
    if (h && (h->type != RM_REPLY_STRING || h->len >= 256))
        return false;
    snprintf(host, 256, "%s", h && strcmp(h->str, "?") != 0 ? h->str : "");
    *port = (int)p->integer;
    return true;
}

int rm_topo_read_shards(const rm_reply *r, bool tls, void (*fn)(void *ud, const rm_topo_range *range), void *ud)
{
    if (!r || r->type != RM_REPLY_ARRAY || (r->elements > 0 && !map_get(r->element[0], "slots")))
        return -1;
    /* Before any range is given to fn: CLUSTER SLOTS names the owner of a shard that has two. */
    for (size_t k = 0; k < r->elements; k++) {
        const rm_reply *slots = map_get(r->element[k], "slots");
        bool ambiguous;
        shard_master(map_get(r->element[k], "nodes"), &ambiguous);
        if (ambiguous && slots && slots->type == RM_REPLY_ARRAY && slots->elements > 0)
            return -1;
    }
    int n = 0;
    for (size_t k = 0; k < r->elements; k++) {
        const rm_reply *slots = map_get(r->element[k], "slots");
        bool ambiguous;
        const rm_reply *master = shard_master(map_get(r->element[k], "nodes"), &ambiguous);
        rm_topo_range range;
        if (!slots || slots->type != RM_REPLY_ARRAY || !master || !shard_address(master, tls, range.host, &range.port))
            continue;
        range.replicas = shard_replicas(map_get(r->element[k], "nodes"));
        for (size_t s = 0; s + 1 < slots->elements; s += 2) {
            const rm_reply *a = slots->element[s], *b = slots->element[s + 1];
            if (a->type != RM_REPLY_INTEGER || b->type != RM_REPLY_INTEGER || a->integer < 0 ||
                b->integer >= RM_SLOTS || a->integer > b->integer)
                continue;
            range.first = (int)a->integer;
            range.last = (int)b->integer;
            fn(ud, &range);
            n++;
        }
    }
    return n;
}

int rm_topo_read_redirect(const char *msg, int *slot, char host[256], int *port)
{
    int kind = strncmp(msg, "MOVED ", 6) == 0 ? 1 : strncmp(msg, "ASK ", 4) == 0 ? 2 : 0;
    if (!kind)
        return 0;
    const char *p = msg + (kind == 1 ? 6 : 4);
    char *end;
    long s = strtol(p, &end, 10);
    if (end == p || *end != ' ' || s < 0 || s >= RM_SLOTS)
        return 0;
    const char *addr = end + 1;
    const char *colon = strrchr(addr, ':');
    if (!colon || (size_t)(colon - addr) >= 256)
        return 0;
    long prt = strtol(colon + 1, &end, 10);
    if (end == colon + 1 || prt <= 0 || prt > 65535)
        return 0;
    size_t hlen = (size_t)(colon - addr);
    /* [IPv6]:port */
    if (hlen >= 2 && addr[0] == '[' && addr[hlen - 1] == ']') {
        addr++;
        hlen -= 2;
    }
    memcpy(host, addr, hlen);
    host[hlen] = '\0';
    *slot = (int)s;
    *port = (int)prt;
    return kind;
}

int rm_topo_read_ids(const rm_reply *shards, const rm_reply *slots, void (*fn)(void *ud, const char *id), void *ud)
{
    int n = 0;
    if (shards && shards->type == RM_REPLY_ARRAY && (shards->elements == 0 || map_get(shards->element[0], "slots"))) {
        for (size_t k = 0; k < shards->elements; k++) {
            const rm_reply *nodes = map_get(shards->element[k], "nodes");
            for (size_t x = 0; nodes && nodes->type == RM_REPLY_ARRAY && x < nodes->elements; x++) {
                const rm_reply *id = map_get(nodes->element[x], "id");
                if (id && id->type == RM_REPLY_STRING && id->len == RM_NODE_ID_LEN) {
                    fn(ud, id->str);
                    n++;
                }
            }
        }
        return n;
    }
    /* CLUSTER SLOTS: [first, last, [ip, port, id], replicas...] (6.x: ids since 4.0). */
    for (size_t k = 0; slots && slots->type == RM_REPLY_ARRAY && k < slots->elements; k++) {
        const rm_reply *e = slots->element[k];
        for (size_t x = 2; e->type == RM_REPLY_ARRAY && x < e->elements; x++) {
            const rm_reply *node = e->element[x];
            if (node->type == RM_REPLY_ARRAY && node->elements >= 3 && node->element[2]->type == RM_REPLY_STRING &&
                node->element[2]->len == RM_NODE_ID_LEN) {
                fn(ud, node->element[2]->str);
                n++;
            }
        }
    }
    return n;
}
