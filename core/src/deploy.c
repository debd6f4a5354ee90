/*
 * Deployments: standalone or cluster, found out at the first handshake
 * (deploy.h). A cluster's slot map is built from CLUSTER SLOTS, corrected
 * slot by slot by MOVED, and reloaded from any node that answers when a
 * node cannot be reached or a slot has no master.
 */
#define _GNU_SOURCE
#include "client.h"
#include "conn.h"
#include "deploy.h"
#include "internal.h"
#include "pool.h"
#include "resp.h"
#include "sentinel.h"
#include "topology.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A full refresh is not repeated sooner than this: a MOVED storm must not become a refresh storm. */
#define RM_REFRESH_MIN_NS (100 * RM_NS_PER_MS)

int rm_deploy_init(rm_err *err, redmutex_client *c, size_t i)
{
    rm_server *srv = &c->pool.servers[i];
    rm_deploy *d = calloc(1, sizeof *d);
    if (!d)
        return rm_fail(err, REDMUTEX_ENOMEM, "out of memory");
    srv->dep = d;
    atomic_store(&srv->replicas, -1);
    atomic_store(&srv->role_replicas, -1);
    d->wanted = srv->ep.topology;
    if (d->wanted == RM_TOPOLOGY_SENTINEL) { /* its master is found through the sentinels (sentinel.c) */
        atomic_store(&d->topology, RM_TOPOLOGY_SENTINEL);
        atomic_store(&srv->ask_topology, false);
        return rm_sentinel_init(err, c, i);
    }
    /* A Unix socket reaches one server: there is no other node to route to. */
    int known = srv->ep.is_unix || d->wanted == RM_TOPOLOGY_STANDALONE ? RM_TOPOLOGY_STANDALONE : RM_TOPOLOGY_AUTO;
    atomic_store(&d->topology, known);
    atomic_store(&srv->ask_topology, known == RM_TOPOLOGY_AUTO);
    return 0;
}

void rm_deploy_free(rm_server *srv)
{
    rm_deploy *d = srv->dep;
    if (!d)
        return;
    for (size_t k = 0; k < d->n_nodes; k++) {
        rm_server *n = d->nodes[k];
        rm_pool_clear(n);
        rm_endpoint_clear(&n->ep);
        free(n);
    }
    free(d->nodes);
    free(d->slot_node);
    rm_sentinel_free(d->sentinel);
    free(d->ids);
    free(d);
    srv->dep = NULL;
}

void rm_deploy_after_fork(redmutex_client *c)
{
    for (size_t i = 0; i < c->n; i++) {
        rm_deploy *d = c->pool.servers[i].dep;
        for (size_t k = 0; d && k < d->n_nodes; k++) {
            rm_server *n = d->nodes[k];
            for (size_t j = 0; j < n->n_idle; j++)
                rm_conn_close(n->idle[j]);
            n->n_idle = 0;
            for (size_t j = 0; j < n->n_owing; j++)
                rm_conn_close(n->owing[j]);
            n->n_owing = 0;
        }
    }
}

/* The node of deployment i at host:port, added if new. Caller holds c->mu. NULL: no memory. */
static rm_server *node_at(redmutex_client *c, size_t i, const char *host, int port, size_t *index);

rm_server *rm_deploy_node_locked(redmutex_client *c, size_t i, const char *host, int port)
{
    size_t k;
    return node_at(c, i, host, port, &k);
}

rm_server *rm_deploy_home_locked(redmutex_client *c, size_t i)
{
    return rm_deploy_is_sentinel(c, i) ? rm_sentinel_master_locked(c, i) : &c->pool.servers[i];
}

static rm_server *node_at(redmutex_client *c, size_t i, const char *host, int port, size_t *index) RM_REQUIRES(c->mu)
{
    rm_server *entry = &c->pool.servers[i];
    rm_deploy *d = entry->dep;
    for (size_t k = 0; k < d->n_nodes; k++)
        if (d->nodes[k]->ep.port == port && strcmp(d->nodes[k]->ep.host, host) == 0) {
            *index = k;
            return d->nodes[k];
        }
    if (d->n_nodes >= RM_NO_NODE - 1)
        return NULL;
    if (d->n_nodes == d->cap_nodes) {
        size_t cap = d->cap_nodes ? d->cap_nodes * 2 : 8;
        rm_server **nodes = realloc(d->nodes, cap * sizeof *nodes);
        if (!nodes)
            return NULL;
        d->nodes = nodes;
        d->cap_nodes = cap;
    }
    rm_server *n = calloc(1, sizeof *n);
    if (!n || rm_endpoint_derive(NULL, &n->ep, &entry->ep, host, port) != 0) {
        free(n);
        return NULL;
    }
    n->client = c;
    n->index = (int)i;
    n->node = true;
    n->dep = d;
    n->tls = entry->tls;                 /* the deployment's settings, freed with it */
    n->check_role = d->sentinel != NULL; /* a master named by sentinels is confirmed by its ROLE */
    atomic_store(&n->replicas, -1);
    atomic_store(&n->role_replicas, -1);
    n->stats = rm_stats_server_for(&c->stats, n->ep.display); /* kept by address: a node that returns counts on */
    *index = d->n_nodes;
    d->nodes[d->n_nodes++] = n;
    return n;
}

typedef struct map_build {
    redmutex_client *c;
    size_t i;
    const char *reached_host; /* where the reply came from: the address of a node that does not know its own */
    size_t ranges;
    bool failed;
} map_build;

static void map_range(void *ud, const rm_topo_range *r)
{
    map_build *mb = ud;
    rm_client_held(mb->c); /* map_load's parse runs with c->mu held */
    rm_deploy *d = mb->c->pool.servers[mb->i].dep;
    size_t k;
    if (!node_at(mb->c, mb->i, r->host[0] ? r->host : mb->reached_host, r->port, &k)) {
        mb->failed = true;
        return;
    }
    for (int s = r->first; s <= r->last; s++)
        d->slot_node[s] = (uint16_t)k;
    atomic_store(&d->nodes[k]->replicas, r->replicas);
    mb->ranges++;
}

typedef struct id_list {
    char (*ids)[41];
    size_t n, cap;
    bool failed;
} id_list;

static void add_id(void *ud, const char *id)
{
    id_list *l = ud;
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 16;
        char(*more)[41] = realloc(l->ids, cap * sizeof *more);
        if (!more) {
            l->failed = true;
            return;
        }
        l->ids = more;
        l->cap = cap;
    }
    memcpy(l->ids[l->n], id, RM_NODE_ID_LEN);
    l->ids[l->n++][RM_NODE_ID_LEN] = '\0';
}

static int id_cmp(const void *a, const void *b) { return memcmp(a, b, RM_NODE_ID_LEN); }

/* Deployment i's node ids from a topology reply (kept as they were when memory runs out). Caller holds c->mu. */
static void ids_load(rm_deploy *d, const rm_reply *shards, const rm_reply *slots)
{
    id_list l = {NULL, 0, 0, false};
    rm_topo_read_ids(shards, slots, add_id, &l);
    if (l.failed || l.n == 0) {
        free(l.ids);
        return;
    }
    qsort(l.ids, l.n, sizeof *l.ids, id_cmp);
    free(d->ids);
    d->ids = l.ids;
    d->n_ids = l.n;
}

/* A node id deployment i shares with another cluster deployment (*other), or NULL. Caller holds c->mu. */
static const char *shared_id(redmutex_client *c, size_t i, size_t *other) RM_REQUIRES(c->mu)
{
    const rm_deploy *d = c->pool.servers[i].dep;
    for (size_t j = 0; j < c->n; j++) {
        const rm_deploy *e = c->pool.servers[j].dep;
        for (size_t x = 0; j != i && x < d->n_ids; x++)
            if (e->n_ids && bsearch(d->ids[x], e->ids, e->n_ids, sizeof *e->ids, id_cmp)) {
                *other = j;
                return d->ids[x];
            }
    }
    return NULL;
}

const rm_server *rm_deploy_same_process_locked(redmutex_client *c, const rm_server *srv, const char *run_id)
{
    for (size_t j = 0; run_id[0] && j < c->n; j++) {
        if ((int)j == srv->index)
            continue;
        const rm_server *entry = &c->pool.servers[j];
        if (strcmp(entry->run_id, run_id) == 0)
            return entry;
        const rm_deploy *e = entry->dep;
        for (size_t k = 0; e && k < e->n_nodes; k++)
            if (strcmp(e->nodes[k]->run_id, run_id) == 0)
                return e->nodes[k];
    }
    return NULL;
}

/* Rebuilds deployment i's map from a CLUSTER SHARDS reply, else (6.x) a
   CLUSTER SLOTS reply. Caller holds c->mu. False: unreadable. */
static bool map_load(redmutex_client *c, size_t i, const rm_reply *shards, const rm_reply *slots,
                     const char *reached_host) RM_REQUIRES(c->mu)
{
    rm_deploy *d = c->pool.servers[i].dep;
    if (!d->slot_node && !(d->slot_node = malloc(RM_SLOTS * sizeof *d->slot_node)))
        return false;
    for (int s = 0; s < RM_SLOTS; s++)
        d->slot_node[s] = RM_NO_NODE;
    d->loaded_ns = rm_now_ns();
    map_build mb = {c, i, reached_host, 0, false};
    int n = rm_topo_read_shards(shards, c->pool.servers[i].ep.tls, map_range, &mb);
    if (n < 0)
        n = rm_topo_read_slots(slots, map_range, &mb);
    ids_load(d, shards, slots);
    return n >= 0 && !mb.failed;
}

rm_server *rm_deploy_route_locked(redmutex_client *c, size_t i, int slot)
{
    rm_deploy *d = c->pool.servers[i].dep;
    uint16_t k = d->slot_node && slot >= 0 ? d->slot_node[slot] : RM_NO_NODE;
    return k != RM_NO_NODE ? d->nodes[k] : NULL;
}

bool rm_deploy_sharded_locked(redmutex_client *c, size_t i)
{
    rm_deploy *d = c->pool.servers[i].dep;
    return atomic_load(&d->topology) == RM_TOPOLOGY_CLUSTER && atomic_load(&d->sharded);
}

rm_server *rm_deploy_moved_locked(redmutex_client *c, size_t i, int slot, const char *host, int port)
{
    rm_deploy *d = c->pool.servers[i].dep;
    size_t k;
    rm_server *node = d->slot_node ? node_at(c, i, host, port, &k) : NULL;
    if (node)
        d->slot_node[slot] = (uint16_t)k;
    atomic_fetch_add(&d->redirects, 1);
    return node;
}

rm_server *rm_deploy_route(rm_err *err, redmutex_client *c, size_t i, int slot)
{
    rm_server *entry = &c->pool.servers[i];
    rm_deploy *d = entry->dep;
    if (d->sentinel) { /* the master as known now (the fan-out asks the sentinels when there is none) */
        rm_client_lock(c);
        rm_server *m = rm_sentinel_master_locked(c, i);
        rm_client_unlock(c);
        if (!m)
            rm_fail(err, REDMUTEX_ECONN, "%s: the sentinels have not named a master yet", entry->ep.display);
        return m;
    }
    if (atomic_load(&d->topology) != RM_TOPOLOGY_CLUSTER || slot < 0)
        return entry;
    rm_client_lock(c);
    uint16_t k = d->slot_node ? d->slot_node[slot] : RM_NO_NODE;
    rm_server *node = k != RM_NO_NODE ? d->nodes[k] : NULL;
    rm_client_unlock(c);
    if (!node)
        rm_fail(err, REDMUTEX_ECONN,
                "%s: hash slot %d has no master in the cluster (CLUSTERDOWN, or a slot left uncovered)",
                entry->ep.display, slot);
    return node;
}

int rm_deploy_learn(rm_err *err, redmutex_client *c, rm_conn *conn)
{
    if (!conn->topo_asked)
        return 0;
    conn->topo_asked = false;
    size_t i = (size_t)conn->srv->index;
    rm_server *entry = &c->pool.servers[i];
    rm_deploy *d = entry->dep;
    int rc = 0;
    rm_client_lock(c);
    if (conn->cluster_enabled == 1 && d->wanted != RM_TOPOLOGY_STANDALONE) {
        if (!map_load(c, i, conn->topo_shards, conn->topo, conn->srv->ep.host))
            rc = rm_fail(err, REDMUTEX_EPROTOCOL, "%s is a cluster node, but its CLUSTER SLOTS reply could not be read",
                         conn->srv->ep.display);
        atomic_store(&d->sharded, conn->major >= 7);
        size_t other;
        const char *id = rc == 0 ? shared_id(c, i, &other) : NULL;
        if (id) {
            entry->duplicate = true;
            rc = rm_fail(err, REDMUTEX_EDUPLICATE,
                         "%s and %s reach the same cluster (node %s is in both); a Redlock majority needs "
                         "independent deployments",
                         c->pool.servers[other].ep.display, entry->ep.display, id);
        }
        if (rc == 0) {
            atomic_store(&d->topology, RM_TOPOLOGY_CLUSTER);
            atomic_store(&c->pool.has_cluster, true);
        }
    } else if (d->wanted == RM_TOPOLOGY_CLUSTER) {
        rc = rm_fail(err, REDMUTEX_EINVAL,
                     "%s is not a cluster node (cluster_enabled:0), but the URL says topology=cluster",
                     conn->srv->ep.display);
    } else {
        atomic_store(&d->topology, RM_TOPOLOGY_STANDALONE);
    }
    if (rc == 0)
        atomic_store(&entry->ask_topology, false);
    rm_client_unlock(c);
    rm_reply_free(conn->topo);
    rm_reply_free(conn->topo_shards);
    conn->topo = conn->topo_shards = NULL;
    return rc;
}

rm_server *rm_deploy_moved(redmutex_client *c, size_t i, int slot, const char *host, int port)
{
    rm_client_lock(c);
    rm_server *node = rm_deploy_moved_locked(c, i, slot, host, port);
    rm_client_unlock(c);
    return node;
}

rm_server *rm_deploy_asked(redmutex_client *c, size_t i, const char *host, int port)
{
    size_t k;
    rm_client_lock(c);
    rm_server *node = node_at(c, i, host, port, &k);
    rm_client_unlock(c);
    atomic_fetch_add(&c->pool.servers[i].dep->redirects, 1);
    return node;
}

int rm_deploy_refresh_stale(rm_err *err, redmutex_client *c, size_t i, int64_t max_age_ns, int64_t deadline_ns)
{
    rm_deploy *d = c->pool.servers[i].dep;
    if (atomic_load(&d->topology) != RM_TOPOLOGY_CLUSTER)
        return 0;
    rm_client_lock(c);
    bool stale = rm_now_ns() - d->loaded_ns > max_age_ns;
    rm_client_unlock(c);
    return stale ? rm_deploy_refresh(err, c, i, deadline_ns) : 0;
}

const char *rm_deploy_publish_verb(redmutex_client *c, size_t i)
{
    rm_deploy *d = c->pool.servers[i].dep;
    return atomic_load(&d->topology) == RM_TOPOLOGY_CLUSTER && atomic_load(&d->sharded) ? "spublish" : "publish";
}

/* What a WAIT to srv wants before its replicas are counted: min_replicas as
   given, or with the per-deployment default (-1) 1 on a Sentinel deployment
   and 0 on any other (client.c, replicas_default). */
static int wanted_replicas(const redmutex_client *c, const rm_server *srv)
{
    if (!c->replicas_by_deployment)
        return (int)c->opts.min_replicas;
    return srv->dep && srv->dep->sentinel ? 1 : 0;
}

int rm_deploy_wait_need(const redmutex_client *c, rm_server *srv)
{
    int want = wanted_replicas(c, srv);
    int known = atomic_load(&srv->replicas), role = atomic_load(&srv->role_replicas);
    if (known < 0 || known >= want)
        return want;
    /* An explicit min_replicas on a Sentinel deployment stands as given: a
       master with fewer replicas refuses the lock (docs/deployments.md). */
    if (!c->replicas_by_deployment && srv->dep && srv->dep->sentinel)
        return want;
    /* Fewer in the topology: no fewer than the master itself last said it has online. */
    int seen = role > known ? role : known;
    return seen < want ? seen : want;
}

bool rm_deploy_wants_role(const redmutex_client *c, rm_server *srv)
{
    int known = atomic_load(&srv->replicas);
    return known >= 0 && known < wanted_replicas(c, srv);
}

void rm_deploy_note_role(rm_server *srv, const rm_reply *r)
{
    /* ["master", offset, [[ip, port, offset], ...]]: the replicas online on it. */
    bool master = r && r->type == RM_REPLY_ARRAY && r->elements >= 3 && r->element[0]->type == RM_REPLY_STRING &&
                  strcmp(r->element[0]->str, "master") == 0 && r->element[2]->type == RM_REPLY_ARRAY;
    atomic_store(&srv->role_replicas, master ? (int)r->element[2]->elements : -1);
}

void rm_deploy_counts(redmutex_client *c, size_t i, uint64_t *redirects, uint64_t *refreshes)
{
    *redirects = atomic_load(&c->pool.servers[i].dep->redirects);
    *refreshes = atomic_load(&c->pool.servers[i].dep->refreshes);
}

/* The commands of a refresh: AUTH (when the URL has a password), CLUSTER SHARDS and CLUSTER SLOTS. */
static size_t slots_request(const rm_endpoint *ep, rm_buf *b)
{
    size_t n = 0;
    if (ep->password) {
        const char *argv[3] = {"AUTH", ep->user ? ep->user : ep->password, ep->password};
        rm_format_command(b, ep->user ? 3 : 2, argv, NULL);
        n++;
    }
    const char *shards[2] = {"CLUSTER", "SHARDS"}, *slots[2] = {"CLUSTER", "SLOTS"};
    rm_format_command(b, 2, shards, NULL);
    rm_format_command(b, 2, slots, NULL);
    return n + 2;
}

/* CLUSTER SHARDS (*shards, NULL on 6.x) and CLUSTER SLOTS from srv (seed number `seed`) on a connection of
   its own, by deadline; NULL when they did not come. */
static rm_reply *ask_slots(rm_server *srv, int seed, int64_t deadline, rm_reply **shards)
{
    *shards = NULL;
    rm_conn *conn = NULL;
    if (rm_conn_open_seed(NULL, &conn, srv, seed) != 0)
        return NULL;
    rm_buf out = {0};
    size_t n = slots_request(&srv->ep, &out), sent = 0, got = 0;
    rm_reply *slots = NULL;
    bool ok = true;
    while (ok && got < n && rm_poll_fd(conn->fd, rm_conn_events(conn, sent < out.len), deadline) > 0) {
        int rc = rm_conn_establish(NULL, conn);
        if (rc != 0) {
            ok = rc > 0;
            continue;
        }
        if (sent < out.len) {
            ssize_t w = rm_conn_send(NULL, conn, out.data + sent, out.len - sent);
            ok = w >= 0;
            sent += w > 0 ? (size_t)w : 0;
            continue;
        }
        char buf[16384], why[160];
        ssize_t k = rm_conn_recv(NULL, conn, buf, sizeof buf);
        ok = k >= 0 && (k == 0 || rm_reader_feed(conn->reader, buf, (size_t)k, why, sizeof why) == 0);
        rm_reply *r;
        while (ok && got < n && rm_reader_next(conn->reader, &r, why, sizeof why) == 1) {
            if (++got == n)
                slots = r;
            else if (got == n - 1 && r->type == RM_REPLY_ARRAY)
                *shards = r;
            else
                rm_reply_free(r);
        }
    }
    rm_buf_free(&out);
    rm_conn_close(conn);
    if (slots && slots->type != RM_REPLY_ARRAY) {
        rm_reply_free(slots);
        slots = NULL;
    }
    if (!slots) {
        rm_reply_free(*shards);
        *shards = NULL;
    }
    return slots;
}

/* A node that failed within this long is asked last by a refresh. */
#define RM_NODE_SUSPECT_NS (30000 * RM_NS_PER_MS)

/*
 * Nodes known to deployment i, in the order a refresh asks them (a copy of
 * the list: nodes live as long as the client): those that did not fail
 * lately first, starting at a different one each time (a dead one is not
 * always asked first), then those that did. Caller holds c->mu.
 */
static rm_server **known_nodes(rm_deploy *d, size_t *n)
{
    rm_server **copy = d->n_nodes ? malloc(d->n_nodes * sizeof *copy) : NULL;
    *n = copy ? d->n_nodes : 0;
    size_t start = *n ? (size_t)atomic_load(&d->refreshes) % *n : 0, front = 0, back = *n;
    int64_t lately = rm_now_ns() - RM_NODE_SUSPECT_NS;
    for (size_t k = 0; k < *n; k++) {
        rm_server *node = d->nodes[(start + k) % *n];
        int64_t failed = atomic_load(&node->failed_ns);
        if (failed && failed > lately)
            copy[--back] = node;
        else
            copy[front++] = node;
    }
    return copy;
}

void rm_deploy_node_failed(rm_server *srv)
{
    rm_deploy *d = srv->dep;
    if (!d || atomic_load(&d->topology) != RM_TOPOLOGY_CLUSTER)
        return;
    atomic_store(&srv->failed_ns, rm_now_ns());
    atomic_store(&d->refresh_wanted, true);
}

int rm_deploy_refresh_if_wanted(redmutex_client *c, size_t i, int64_t deadline_ns)
{
    rm_deploy *d = c->pool.servers[i].dep;
    return atomic_load(&d->refresh_wanted) ? rm_deploy_refresh(NULL, c, i, deadline_ns) : 0;
}

int rm_deploy_refresh(rm_err *err, redmutex_client *c, size_t i, int64_t deadline_ns)
{
    rm_server *entry = &c->pool.servers[i];
    rm_deploy *d = entry->dep;
    if (atomic_load(&d->topology) != RM_TOPOLOGY_CLUSTER)
        return 0;
    rm_client_lock(c);
    int64_t now = rm_now_ns();
    bool soon = now < d->next_refresh_ns;
    if (!soon)
        d->next_refresh_ns = now + RM_REFRESH_MIN_NS;
    size_t n = 0;
    rm_server **nodes = soon ? NULL : known_nodes(d, &n);
    rm_client_unlock(c);
    if (soon)
        return 1;
    /* Every known node (known_nodes' order), then every seed of the URL.
       Each gets at most half the time left: a node that does not answer
       at all must not use up the refresh. */
    size_t total = n + (size_t)(entry->ep.n_seeds > 0 ? entry->ep.n_seeds : 1);
    int rc =
        rm_fail(err, REDMUTEX_ECONN, "%s: no node of the cluster answered CLUSTER SLOTS in time", entry->ep.display);
    for (size_t k = 0; k < total && rm_now_ns() < deadline_ns; k++) {
        rm_server *srv = k < n ? nodes[k] : entry;
        int seed = k < n ? 0 : (int)(k - n);
        int64_t left = deadline_ns - rm_now_ns(), slice = left / 2 > RM_REFRESH_MIN_NS / 5 ? left / 2 : left;
        rm_reply *shards, *slots = ask_slots(srv, seed, rm_now_ns() + slice, &shards);
        if (!slots)
            continue;
        rm_client_lock(c);
        bool loaded = map_load(c, i, shards, slots, seed && srv == entry ? entry->ep.seed_host[seed] : srv->ep.host);
        size_t other;
        if (loaded && shared_id(c, i, &other))
            entry->duplicate = true; /* it grew into another deployment's cluster: left out from now on */
        rm_client_unlock(c);
        rm_reply_free(shards);
        rm_reply_free(slots);
        if (loaded) {
            atomic_fetch_add(&d->refreshes, 1);
            atomic_store(&d->refresh_wanted, false);
            rc = 0;
            break;
        }
    }
    free(nodes);
    return rc;
}
