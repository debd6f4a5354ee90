/*
 * Redis Cluster: every lock kind routed by hash slot over a real cluster
 * (3 masters + 3 replicas on loopback, made once for this binary), MOVED,
 * ASK and retries followed inside the call, sharded pub/sub, the watchdog's
 * per-node batches, and names whose keys could not share a slot refused.
 */
#define _GNU_SOURCE
#include "cluster.h"
#include "harness.h"
#include "resp.h"
#include "slots.h"
#include "topology.h"

#include <pthread.h>
#include <stdatomic.h>
#include <sys/wait.h>
#include <unistd.h>
#include <stdio.h>
#include <string.h>

static rc_cluster cl;

static void ensure_cluster(void)
{
    if (cl.n == 0)
        rc_start(&cl, 3, 1, NULL);
}

/* The core's slot of a key is the server's, for hash tags, binary bytes and the edge cases of braces. */
static void keyslot_matches_cluster_keyslot_on_a_real_node(void)
{
    ensure_cluster();
    static const char *fixed[] = {"",
                                  "a",
                                  "{",
                                  "}",
                                  "{}",
                                  "{}a",
                                  "a{}b",
                                  "{x}y",
                                  "y{x}",
                                  "{{x}}",
                                  "}{x}",
                                  "a}b",
                                  "{a}{b}",
                                  "foo{bar}{zap}",
                                  "{user1000}.following",
                                  "jobs:nightly",
                                  "123456789"};
    for (size_t k = 0; k < sizeof fixed / sizeof fixed[0]; k++) {
        int want = rc_keyslot(&cl, fixed[k], strlen(fixed[k]));
        CHECKF(rm_keyslot(fixed[k], strlen(fixed[k])) == want, "'%s': core %d, server %d", fixed[k],
               rm_keyslot(fixed[k], strlen(fixed[k])), want);
    }
    CHECK(rm_crc16("123456789", 9) == 0x31C3); /* the XMODEM check value */
    unsigned seed = 12345;
    for (int k = 0; k < 400; k++) {
        unsigned char key[40];
        size_t len = (size_t)(rand_r(&seed) % 40);
        for (size_t j = 0; j < len; j++) {
            int r = rand_r(&seed) % 10;
            key[j] = r == 0 ? '{' : r == 1 ? '}' : (unsigned char)(rand_r(&seed) % 256);
        }
        int want = rc_keyslot(&cl, (const char *)key, len);
        CHECKF(rm_keyslot(key, len) == want, "random key %d (len %zu): core %d, server %d", k, len,
               rm_keyslot(key, len), want);
    }
}

/* A hiredis reply as the core's reply type (for the topology readers). */
static rm_reply *to_rm(const redisReply *r)
{
    rm_reply *o = calloc(1, sizeof *o);
    switch (r->type) {
    case REDIS_REPLY_INTEGER:
        o->type = RM_REPLY_INTEGER;
        o->integer = r->integer;
        break;
    case REDIS_REPLY_NIL:
        o->type = RM_REPLY_NIL;
        break;
    case REDIS_REPLY_ARRAY:
        o->type = RM_REPLY_ARRAY;
        o->elements = r->elements;
        o->element = calloc(r->elements ? r->elements : 1, sizeof *o->element);
        for (size_t k = 0; k < r->elements; k++)
            o->element[k] = to_rm(r->element[k]);
        break;
    default:
        o->type = r->type == REDIS_REPLY_ERROR    ? RM_REPLY_ERROR
                  : r->type == REDIS_REPLY_STATUS ? RM_REPLY_STATUS
                                                  : RM_REPLY_STRING;
        o->len = r->len;
        o->str = malloc(r->len + 1);
        memcpy(o->str, r->str, r->len + 1);
    }
    return o;
}

static int range_owner[16384], range_replicas[16384];
static void note_range(void *ud, const rm_topo_range *r)
{
    (void)ud;
    for (int s = r->first; s <= r->last; s++) {
        range_owner[s] = r->port;
        range_replicas[s] = r->replicas;
    }
}

/* Seed lists and ?topology= parse, or are refused with a clear message that never shows a password. */
static void seed_lists_and_topology_options_parse_or_are_refused_clearly(void)
{
    static const char *good[] = {"redis://127.0.0.1:7000,127.0.0.1:7001/0",
                                 "redis://[::1]:7000,h-2:7001/0?topology=cluster",
                                 "rediss://u:pw@a:1,b:2/0?topology=standalone&ssl_cert_reqs=none", "redis://a,b,c"};
    for (size_t k = 0; k < sizeof good / sizeof good[0]; k++) {
        redmutex_client *c = NULL;
        CHECK_OK(redmutex_client_new(&c, &good[k], 1, NULL));
        redmutex_client_free(c);
    }
    static const struct {
        const char *url, *why;
    } bad[] = {{"redis://u:secret@h1:1,,h2:2/0", "no host"},
               {"redis://u:secret@h1:1/0?topology=mesh", "topology must be"},
               {"redis://u:secret@h1:1/0?topology=cluster&topology=auto", "twice"},
               {"redis://u:secret@h1:1/0?ssl_ca_certs=/x", "rediss://"},
               {"redis://u:secret@a,b,c,d,e,f,g,h,i,j,k,l,m,n,o,p,q/0", "more than 16"},
               {"redis://u:secret@h1:1,h2:0/0", "port"}};
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        redmutex_client *c = NULL;
        CHECK_RC(redmutex_client_new(&c, &bad[k].url, 1, NULL), REDMUTEX_EINVAL);
        CHECKF(strstr(redmutex_last_error(), bad[k].why), "%s: %s", bad[k].url, redmutex_last_error());
        CHECKF(!strstr(redmutex_last_error(), "secret"), "%s", redmutex_last_error());
    }
}

/* A CLUSTER SHARDS reply from RESP text (RESP2 maps are flat arrays). */
static rm_reply *shards_reply(const char *resp)
{
    rm_reader *rd = rm_reader_new();
    rm_reply *r = NULL;
    char why[160];
    CHECK(rd && rm_reader_feed(rd, resp, strlen(resp), why, sizeof why) == 0);
    CHECK(rm_reader_next(rd, &r, why, sizeof why) == 1);
    rm_reader_free(rd);
    return r;
}

/*
 * Valkey (8+) lists a shard's nodes by shard id: for about a node timeout
 * after a replica takes over from a master that stopped answering, it shows
 * both as "master" and "online" in the one shard, the old one often first.
 * Such a reply does not say which owns the slots: it is left for CLUSTER
 * SLOTS (-1), which names the owner, instead of routing to the silent node.
 */
static void a_shard_with_two_online_masters_is_read_from_cluster_slots(void)
{
#define NODE(port, role)                                                                                               \
    "*8\r\n$4\r\nport\r\n:" #port "\r\n$2\r\nip\r\n$9\r\n127.0.0.1\r\n$4\r\nrole\r\n$" role                            \
    "\r\n$6\r\nhealth\r\n$6\r\nonline\r\n"
    static const char two[] =
        "*1\r\n*4\r\n$5\r\nslots\r\n*2\r\n:0\r\n:16383\r\n$5\r\nnodes\r\n*2\r\n" NODE(7001, "6\r\nmaster")
            NODE(7002, "6\r\nmaster");
    static const char one[] =
        "*1\r\n*4\r\n$5\r\nslots\r\n*2\r\n:0\r\n:16383\r\n$5\r\nnodes\r\n*2\r\n" NODE(7001, "7\r\nreplica")
            NODE(7002, "6\r\nmaster");
#undef NODE
    rm_reply *r = shards_reply(two);
    CHECK(rm_topo_read_shards(r, false, note_range, NULL) == -1);
    rm_reply_free(r);
    memset(range_owner, 0, sizeof range_owner);
    r = shards_reply(one);
    CHECK(rm_topo_read_shards(r, false, note_range, NULL) == 1);
    CHECK(range_owner[0] == 7002 && range_owner[16383] == 7002);
    rm_reply_free(r);
}

/* CLUSTER SHARDS and CLUSTER SLOTS, as real nodes answer them, read into the same map; MOVED and ASK parsed. */
static void topology_replies_read_as_the_cluster_says(void)
{
    ensure_cluster();
    int slots_owner[16384];
    for (int which = 0; which < 2; which++) {
        memset(range_owner, 0, sizeof range_owner);
        redisReply *r = rs_cmd(&cl.node[0], which ? "CLUSTER SLOTS" : "CLUSTER SHARDS");
        CHECK(r && r->type == REDIS_REPLY_ARRAY);
        rm_reply *m = to_rm(r);
        int n = which ? rm_topo_read_slots(m, note_range, NULL) : rm_topo_read_shards(m, false, note_range, NULL);
        CHECKF(n >= 3, "%s: %d ranges", which ? "SLOTS" : "SHARDS", n);
        CHECK(which ? rm_topo_read_shards(m, false, note_range, NULL) == -1
                    : true); /* a SLOTS reply is no SHARDS reply */
        rm_reply_free(m);
        freeReplyObject(r);
        for (int slot = 0; slot < 16384; slot++) {
            if (slot % 997 == 0) /* spot checks against CLUSTER SLOTS as the harness reads it */
                CHECKF(range_owner[slot] == rc_owner(&cl, slot)->port, "slot %d", slot);
            CHECK(range_owner[slot] != 0);
            /* 3 masters, 3 replicas, all in service (CLUSTER SLOTS of 7.0+ also leaves out a replica that
               has seen no write yet: offset 0; only 6.x nodes are asked it). */
            CHECKF(which ? range_replicas[slot] <= 1 : range_replicas[slot] == 1,
                   "%s: slot %d's master has %d replicas", which ? "SLOTS" : "SHARDS", slot, range_replicas[slot]);
            if (which)
                CHECK(range_owner[slot] == slots_owner[slot]);
            else
                slots_owner[slot] = range_owner[slot];
        }
    }
    char host[256];
    int slot, port;
    CHECK(rm_topo_read_redirect("MOVED 3999 127.0.0.1:6381", &slot, host, &port) == 1 && slot == 3999 && port == 6381 &&
          strcmp(host, "127.0.0.1") == 0);
    CHECK(rm_topo_read_redirect("ASK 1 [::1]:7000", &slot, host, &port) == 2 && strcmp(host, "::1") == 0);
    CHECK(rm_topo_read_redirect("MOVED 1 :7000", &slot, host, &port) == 1 && host[0] == '\0' && port == 7000);
    CHECK(rm_topo_read_redirect("MOVED 16384 h:1", &slot, host, &port) == 0);
    CHECK(rm_topo_read_redirect("MOVED x h:1", &slot, host, &port) == 0);
    CHECK(rm_topo_read_redirect("ERR MOVED", &slot, host, &port) == 0);
}

static redmutex_client *cluster_client(const char *url, int64_t command_timeout_ms)
{
    redmutex_client_options o;
    redmutex_client_options_init(&o, REDMUTEX_CLIENT_OPTIONS_VERSION);
    if (command_timeout_ms > 0)
        o.command_timeout_ms = command_timeout_ms;
    redmutex_client *c = NULL;
    CHECK_OK(redmutex_client_new(&c, &url, 1, &o));
    return c;
}

static const redmutex_kind all_kinds[] = {REDMUTEX_KIND_LOCK, REDMUTEX_KIND_RLOCK, REDMUTEX_KIND_FAIR,
                                          REDMUTEX_KIND_READ, REDMUTEX_KIND_WRITE};

/* Every kind on 200 names spread over every master: held by one client, refused to another, released. */
static void every_kind_on_200_names_over_all_masters_excludes_another_client(void)
{
    ensure_cluster();
    redmutex_client *a = cluster_client(cl.url, 0), *b = cluster_client(cl.url, 0);
    int per_master[RC_MAX_NODES] = {0};
    for (int k = 0; k < 200; k++) {
        char name[64];
        snprintf(name, sizeof name, "jobs:nightly:%d", k);
        redmutex_kind kind = all_kinds[k % 5];
        /* A writer is refused by a reader of another client, and the reverse; read+read share. */
        redmutex_kind other = kind == REDMUTEX_KIND_READ ? REDMUTEX_KIND_WRITE : kind;
        redmutex_lock *la, *lb;
        CHECK_OK(redmutex_lock_new(&la, a, name, kind, NULL));
        CHECK_OK(redmutex_lock_new(&lb, b, name, other, NULL));
        CHECK_OK(redmutex_lock_acquire(la, NULL, 0));
        CHECK_RC(redmutex_lock_acquire(lb, NULL, 0), REDMUTEX_ETIMEDOUT);
        rs_server *owner = rc_owner(&cl, rm_keyslot(name, strlen(name)));
        CHECK(owner != NULL);
        CHECKF(rs_exists(owner, name), "lock '%s' is not on the master of its slot (port %d)", name, owner->port);
        per_master[owner - cl.node]++;
        CHECK_OK(redmutex_lock_release(la, NULL));
        CHECK_OK(redmutex_lock_acquire(lb, NULL, 0));
        CHECK_OK(redmutex_lock_release(lb, NULL));
        CHECK(!rs_exists(owner, name));
        redmutex_lock_free(la);
        redmutex_lock_free(lb);
    }
    int masters_used = 0;
    for (int i = 0; i < cl.n; i++)
        masters_used += per_master[i] > 0;
    CHECKF(masters_used == 3, "names landed on %d masters", masters_used);
    redmutex_client_free(a);
    redmutex_client_free(b);
}

/* Holds over every master renewed by the watchdog for several periods: still held, no CROSSSLOT, no MOVED. */
static void watchdog_renews_holds_over_all_masters_by_slot(void)
{
    ensure_cluster();
    rc_resetstat(&cl);
    redmutex_client_options o;
    redmutex_client_options_init(&o, REDMUTEX_CLIENT_OPTIONS_VERSION);
    o.watchdog_lease_ms = rt_scaled_ms(600);
    const char *url = cl.url;
    redmutex_client *c;
    CHECK_OK(redmutex_client_new(&c, &url, 1, &o));
    enum { N = 60 };
    redmutex_lock *l[N];
    for (int k = 0; k < N; k++) {
        char name[64];
        snprintf(name, sizeof name, "renew:%d", k);
        CHECK_OK(redmutex_lock_new(&l[k], c, name, all_kinds[k % 5], NULL));
        CHECK_OK(redmutex_lock_acquire(l[k], NULL, 0));
    }
    rt_sleep_ms(rt_scaled_ms(2000)); /* three leases: every hold was renewed several times */
    for (int k = 0; k < N; k++) {
        redmutex_state st;
        CHECK_OK(redmutex_lock_state(&st, l[k], NULL));
        CHECKF(st == REDMUTEX_STATE_HELD, "hold %d is in state %d", k, (int)st);
        int64_t ttl;
        CHECK_OK(redmutex_lock_ttl(&ttl, l[k]));
        CHECKF(ttl > 0, "lock %d has TTL %lld", k, (long long)ttl);
    }
    CHECK(rc_errorstat_all(&cl, "CROSSSLOT") == 0);
    CHECK(rc_errorstat_all(&cl, "MOVED") <= 3); /* the first routing only, never per renewal */
    for (int k = 0; k < N; k++) {
        CHECK_OK(redmutex_lock_release(l[k], NULL));
        redmutex_lock_free(l[k]);
    }
    redmutex_client_free(c);
}

static int64_t released_at;
static long long shard_subscribers; /* PUBSUB SHARDNUMSUB of the lock's channel on its slot's master */

/* Holds long enough for the waiter's backoff to grow past a second, then releases. */
static void *release_later(void *arg)
{
    rt_sleep_ms(2000);
    redmutex_lock *l = arg;
    char channel[128];
    snprintf(channel, sizeof channel, "redisson_lock__channel:{%s}", redmutex_lock_name(l));
    rs_server *owner = rc_owner(&cl, rm_keyslot(channel, strlen(channel)));
    redisReply *r = owner ? rs_cmd(owner, "PUBSUB SHARDNUMSUB %s", channel) : NULL;
    shard_subscribers = r && r->type == REDIS_REPLY_ARRAY && r->elements == 2 ? r->element[1]->integer : -1;
    if (r)
        freeReplyObject(r);
    released_at = rt_now_ms();
    return redmutex_lock_release(arg, "holder") == 0 ? NULL : arg;
}

/* A waiter is woken by the release message (sharded pub/sub on the slot's node), long before its backoff would retry.
 */
static void waiter_is_woken_by_the_release_on_a_cluster(void)
{
    ensure_cluster();
    redmutex_client_options o;
    redmutex_client_options_init(&o, REDMUTEX_CLIENT_OPTIONS_VERSION);
    o.wait_backoff_cap_ms = 5000; /* a wake-up by timer would take seconds */
    const char *url = cl.url;
    redmutex_client *a, *b;
    CHECK_OK(redmutex_client_new(&a, &url, 1, &o));
    CHECK_OK(redmutex_client_new(&b, &url, 1, &o));
    for (int kind_i = 0; kind_i < 3; kind_i++) {
        char name[64];
        snprintf(name, sizeof name, "wake:%d", kind_i);
        redmutex_lock *la, *lb;
        CHECK_OK(redmutex_lock_new(&la, a, name, all_kinds[kind_i], NULL));
        CHECK_OK(redmutex_lock_new(&lb, b, name, all_kinds[kind_i], NULL));
        CHECK_OK(redmutex_lock_acquire(la, "holder", 0));
        pthread_t t;
        pthread_create(&t, NULL, release_later, la);
        CHECK_OK(redmutex_lock_acquire(lb, NULL, 10000));
        int64_t waited = rt_now_ms() - released_at;
        void *rc;
        pthread_join(t, &rc);
        CHECK(rc == NULL);
        CHECKF(waited < rt_scaled_ms(400), "kind %d: woken %lld ms after the release", kind_i, (long long)waited);
        if (kind_i < 2) /* plain and reentrant share the lock's channel: one sharded subscriber on its node */
            CHECKF(shard_subscribers == 1, "kind %d: %lld sharded subscribers", kind_i, shard_subscribers);
        CHECK_OK(redmutex_lock_release(lb, NULL));
        redmutex_lock_free(la);
        redmutex_lock_free(lb);
    }
    redmutex_client_free(a);
    redmutex_client_free(b);
}

/* Names whose keys would land in different slots are refused before anything is sent; {x}y and binary names work. */
static void names_with_braces_follow_redissons_rule_and_never_meet_crossslot(void)
{
    ensure_cluster();
    redmutex_client *c = cluster_client(cl.url, 0);
    static const char *bad[] = {"a{}b", "{}", "a}b", "x{y", "}{"};
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        redmutex_lock *l;
        CHECK_OK(redmutex_lock_new(&l, c, bad[k], REDMUTEX_KIND_RLOCK, NULL));
        CHECK_RC(redmutex_lock_acquire(l, NULL, 0), REDMUTEX_EINVAL);
        CHECKF(strstr(redmutex_last_error(), "hash slots"), "'%s': %s", bad[k], redmutex_last_error());
        redmutex_lock_free(l);
    }
    static const char *good[] = {"{x}y", "y{x}", "{user1000}.lock", "caf\xc3\xa9\x01\xff", "a:b:c"};
    for (size_t k = 0; k < sizeof good / sizeof good[0]; k++)
        for (size_t kind = 0; kind < 5; kind++) {
            redmutex_lock *l;
            CHECK_OK(redmutex_lock_new(&l, c, good[k], all_kinds[kind], NULL));
            CHECK_OK(redmutex_lock_acquire(l, NULL, 0));
            CHECK_OK(redmutex_lock_release(l, NULL));
            redmutex_lock_free(l);
        }
    CHECK(rc_errorstat_all(&cl, "CROSSSLOT") == 0);
    redmutex_client_free(c);
}

/* ?topology= overrides detection; a multi-host URL whose first seed is down works. */
static void topology_override_and_first_seed_down(void)
{
    ensure_cluster();
    char url[600];
    int dead = rt_free_port();
    snprintf(url, sizeof url, "redis://127.0.0.1:%d,127.0.0.1:%d/0", dead, cl.node[1].port);
    redmutex_client *c = cluster_client(url, 0);
    redmutex_lock *l;
    for (int k = 0; k < 20; k++) {
        char name[32];
        snprintf(name, sizeof name, "seed:%d", k);
        CHECK_OK(redmutex_lock_new(&l, c, name, REDMUTEX_KIND_LOCK, NULL));
        CHECK_OK(redmutex_lock_acquire(l, NULL, 0));
        CHECK_OK(redmutex_lock_release(l, NULL));
        redmutex_lock_free(l);
    }
    redmutex_client_free(c);
    /* topology=cluster on a standalone server: a clear error, nothing written. */
    static rs_server plain; /* the harness stops it after the test: it must outlive this frame */
    rs_start(&plain, NULL);
    snprintf(url, sizeof url, "%s/0?topology=cluster", plain.url);
    c = cluster_client(url, 0);
    CHECK_OK(redmutex_lock_new(&l, c, "t", REDMUTEX_KIND_LOCK, NULL));
    CHECK_RC(redmutex_lock_acquire(l, NULL, 0), REDMUTEX_EINVAL);
    CHECKF(strstr(redmutex_last_error(), "not a cluster node"), "%s", redmutex_last_error());
    CHECK(!rs_exists(&plain, "t"));
    redmutex_lock_free(l);
    redmutex_client_free(c);
    /* topology=standalone on a cluster node: never asks, and MOVED is an error it reports (not followed). */
    char name[64];
    rc_name_on(&cl, &cl.node[0], "standalone:%d", name, sizeof name);
    snprintf(url, sizeof url, "redis://127.0.0.1:%d/0?topology=standalone", cl.node[0].port);
    c = cluster_client(url, 0);
    CHECK_OK(redmutex_lock_new(&l, c, name, REDMUTEX_KIND_LOCK, NULL));
    CHECK_OK(redmutex_lock_acquire(l, NULL, 0)); /* its own slot: served */
    CHECK_OK(redmutex_lock_release(l, NULL));
    redmutex_lock_free(l);
    redmutex_client_free(c);
}

typedef struct contender {
    redmutex_client *c;
    int id;
    _Atomic int *inside; /* per name: holders right now */
    _Atomic long *overlaps, *holds, *errors;
} contender;

static void *contend(void *p)
{
    contender *w = p;
    redmutex_lock *l[5];
    for (int k = 0; k < 5; k++) {
        char name[32];
        snprintf(name, sizeof name, "contend:%d", k);
        CHECK_OK(redmutex_lock_new(&l[k], w->c, name,
                                   all_kinds[k] == REDMUTEX_KIND_READ ? REDMUTEX_KIND_WRITE : all_kinds[k], NULL));
    }
    int64_t end = rt_now_ms() + 2000;
    for (unsigned i = (unsigned)w->id; rt_now_ms() < end; i++) {
        int k = (int)(i % 5);
        if (redmutex_lock_acquire(l[k], NULL, 2000) != 0) {
            atomic_fetch_add(w->errors, 1);
            continue;
        }
        if (atomic_fetch_add(&w->inside[k], 1) != 0)
            atomic_fetch_add(w->overlaps, 1);
        rt_sleep_ms(1);
        atomic_fetch_sub(&w->inside[k], 1);
        atomic_fetch_add(w->holds, 1);
        if (redmutex_lock_release(l[k], NULL) != 0)
            atomic_fetch_add(w->errors, 1);
    }
    for (int k = 0; k < 5; k++)
        redmutex_lock_free(l[k]);
    return NULL;
}

/* Two clients, four threads each, on names over all masters: never two holders, no errors. */
static void contending_clients_exclude_each_other_on_a_cluster(void)
{
    ensure_cluster();
    redmutex_client *c[2] = {cluster_client(cl.url, 0), cluster_client(cl.url, 0)};
    static _Atomic int inside[5];
    static _Atomic long overlaps, holds, errors;
    contender w[8];
    pthread_t t[8];
    for (int i = 0; i < 8; i++) {
        w[i] = (contender){c[i % 2], i, inside, &overlaps, &holds, &errors};
        pthread_create(&t[i], NULL, contend, &w[i]);
    }
    for (int i = 0; i < 8; i++)
        pthread_join(t[i], NULL);
    printf("     %ld holds, %ld overlaps, %ld errors\n", atomic_load(&holds), atomic_load(&overlaps),
           atomic_load(&errors));
    CHECK(atomic_load(&overlaps) == 0);
    CHECK(atomic_load(&errors) == 0);
    CHECK(atomic_load(&holds) > 50);
    redmutex_client_free(c[0]);
    redmutex_client_free(c[1]);
}

/* Redlock over three deployments, one of them a cluster: one code path; renewals batch per node and per server. */
static void redlock_over_a_cluster_and_two_servers(void)
{
    ensure_cluster();
    static rs_server s1, s2;
    rs_start(&s1, NULL);
    rs_start(&s2, NULL);
    const char *urls[3] = {cl.url, s1.url, s2.url};
    redmutex_client_options o;
    redmutex_client_options_init(&o, REDMUTEX_CLIENT_OPTIONS_VERSION);
    /* Renewals every lease/3: 1.5 s leaves a loaded 2-core machine room for a late one. */
    o.watchdog_lease_ms = rt_scaled_ms(1500);
    redmutex_client *a, *b;
    CHECK_OK(redmutex_client_new(&a, urls, 3, &o));
    CHECK_OK(redmutex_client_new(&b, urls, 3, &o));
    enum { N = 12 };
    redmutex_lock *l[N], *other;
    for (int k = 0; k < N; k++) {
        char name[32];
        snprintf(name, sizeof name, "redlock:%d", k);
        CHECK_OK(redmutex_lock_new(&l[k], a, name, all_kinds[k % 5], NULL));
        CHECK_OK(redmutex_lock_acquire(l[k], NULL, 0));
        /* A majority holds it (the cluster may be the one not waited for: its first request finds its topology). */
        CHECK(rs_exists(&s1, name) + rs_exists(&s2, name) +
                  rs_exists(rc_owner(&cl, rm_keyslot(name, strlen(name))), name) >=
              2);
    }
    rt_sleep_ms(rt_scaled_ms(2000)); /* several renewals: per node on the cluster, one call per server */
    int on_cluster = 0;
    for (int k = 0; k < N; k++) {
        redmutex_state st;
        CHECK_OK(redmutex_lock_state(&st, l[k], NULL));
        CHECKF(st == REDMUTEX_STATE_HELD, "hold %d: state %d", k, (int)st);
        char name[32];
        snprintf(name, sizeof name, "redlock:%d", k);
        rs_server *owner = rc_owner(&cl, rm_keyslot(name, strlen(name)));
        if (rs_exists(owner, name)) {
            on_cluster++;
            CHECKF(rs_int(owner, "PTTL %s", name) > rt_scaled_ms(1500) / 3, "%s not renewed on the cluster", name);
        }
    }
    printf("     %d of %d holds include the cluster\n", on_cluster, N);
    CHECK_OK(redmutex_lock_new(&other, b, "redlock:1", REDMUTEX_KIND_RLOCK, NULL));
    CHECK_RC(redmutex_lock_acquire(other, NULL, 0), REDMUTEX_ETIMEDOUT);
    for (int k = 0; k < N; k++) {
        CHECK_OK(redmutex_lock_release(l[k], NULL));
        redmutex_lock_free(l[k]);
    }
    CHECK_OK(redmutex_lock_acquire(other, NULL, 0));
    CHECK_OK(redmutex_lock_release(other, NULL));
    redmutex_lock_free(other);
    redmutex_client_free(a);
    redmutex_client_free(b);
}

/*
 * Two deployments of one Redlock that reach the same cluster would vote
 * twice: two of its nodes given as two URLs (a master, a replica), or one
 * node given as a standalone server. Refused with REDMUTEX_EDUPLICATE, at
 * creation when the topologies meet, else when the same node is reached
 * through both (then that deployment is left out: it can decide nothing).
 */
static void deployments_that_reach_one_cluster_are_duplicates(void)
{
    ensure_cluster();
    static rs_server s1;
    rs_start(&s1, NULL);
    char master_url[64], replica_url[64];
    snprintf(master_url, sizeof master_url, "redis://127.0.0.1:%d/0", rc_master(&cl, 1)->port);
    rs_server *replica = rc_replica_of(&cl, rc_master(&cl, 2));
    CHECK(replica != NULL);
    snprintf(replica_url, sizeof replica_url, "redis://localhost:%d", replica->port);
    const char *two_nodes[3] = {cl.url, master_url, s1.url};
    const char *with_replica[3] = {s1.url, replica_url, cl.url};
    const char *const *cases[2] = {two_nodes, with_replica};
    for (int k = 0; k < 2; k++) {
        redmutex_client *c = NULL;
        CHECK_RC(redmutex_client_new(&c, cases[k], 3, NULL), REDMUTEX_EDUPLICATE);
        CHECKF(strstr(redmutex_last_error(), "same cluster"), "%s", redmutex_last_error());
        printf("     %s\n", redmutex_last_error());
    }
    /* A node forced standalone is not asked for the topology: found when the cluster reaches it too. */
    char name[64], forced[96];
    rs_server *owner = NULL;
    for (int k = 0; !owner || owner->port == cl.node[0].port; k++) { /* not the first seed: no match at creation */
        snprintf(name, sizeof name, "dup:%d", k);
        owner = rc_owner(&cl, rm_keyslot(name, strlen(name)));
    }
    snprintf(forced, sizeof forced, "redis://127.0.0.1:%d/0?topology=standalone", owner->port);
    const char *urls[3] = {cl.url, s1.url, forced};
    redmutex_client *c = NULL;
    CHECK_OK(redmutex_client_new(&c, urls, 3, NULL));
    rs_stop(&s1); /* no independent third vote: the node must not count twice */
    redmutex_lock *l;
    CHECK_OK(redmutex_lock_new(&l, c, name, REDMUTEX_KIND_RLOCK, NULL));
    int rc = redmutex_lock_acquire(l, NULL, 0);
    CHECKF(rc == REDMUTEX_EDUPLICATE, "acquire through the cluster and one of its nodes returned %d: %s", rc,
           redmutex_last_error());
    CHECK(strstr(redmutex_last_error(), "same Redis server"));
    CHECK(rs_int(owner, "HLEN %s", name) == 0); /* nothing left behind */
    redmutex_lock_free(l);
    redmutex_client_free(c);
}

/* A slot no master serves: a clear error within the call's deadline, never a hang; served again once it is covered. */
static void an_uncovered_slot_is_a_clear_error_within_the_deadline(void)
{
    ensure_cluster();
    const char *name = "uncovered:job";
    int slot = rm_keyslot(name, strlen(name));
    rs_server *owner = rc_owner(&cl, slot);
    char owner_id[64];
    rc_node_id(owner, owner_id);
    redmutex_client *c = cluster_client(cl.url, 500);
    redmutex_lock *l;
    CHECK_OK(redmutex_lock_new(&l, c, name, REDMUTEX_KIND_RLOCK, NULL));
    CHECK_OK(redmutex_lock_acquire(l, NULL, 0)); /* the map knows the slot's owner */
    CHECK_OK(redmutex_lock_release(l, NULL));
    for (int i = 0; i < cl.n; i++) {
        redisReply *r = rs_cmd(&cl.node[i], "CONFIG SET cluster-require-full-coverage no");
        if (r)
            freeReplyObject(r);
        r = rs_cmd(&cl.node[i], "CLUSTER DELSLOTS %d", slot);
        if (r)
            freeReplyObject(r);
    }
    int64_t t0 = rt_now_ms();
    int rc = redmutex_lock_acquire(l, NULL, 0);
    int64_t took = rt_now_ms() - t0;
    CHECKF(rc == REDMUTEX_ECONN, "acquire on an uncovered slot returned %d: %s", rc, redmutex_last_error());
    CHECKF(strstr(redmutex_last_error(), "slot") && !strstr(redmutex_last_error(), "MOVED"), "%s",
           redmutex_last_error());
    CHECKF(took < rt_scaled_ms(1500), "the error took %lld ms", (long long)took);
    printf("     %lld ms: %s\n", (long long)took, redmutex_last_error());
    /* Covered again: served again. */
    for (int i = 0; i < cl.n; i++) {
        redisReply *r = rs_cmd(&cl.node[i], "CLUSTER SETSLOT %d NODE %s", slot, owner_id);
        if (r)
            freeReplyObject(r);
    }
    redisReply *r = rs_cmd(owner, "CLUSTER ADDSLOTS %d", slot);
    if (r)
        freeReplyObject(r);
    WAIT_FOR(redmutex_lock_acquire(l, NULL, 0) == 0, 10000);
    CHECK_OK(redmutex_lock_release(l, NULL));
    redmutex_lock_free(l);
    redmutex_client_free(c);
}

int main(int argc, char **argv)
{
    static const rt_test tests[] = {
        {"keyslot_matches_cluster_keyslot_on_a_real_node", keyslot_matches_cluster_keyslot_on_a_real_node},
        {"seed_lists_and_topology_options_parse_or_are_refused_clearly",
         seed_lists_and_topology_options_parse_or_are_refused_clearly},
        {"topology_replies_read_as_the_cluster_says", topology_replies_read_as_the_cluster_says},
        {"a_shard_with_two_online_masters_is_read_from_cluster_slots",
         a_shard_with_two_online_masters_is_read_from_cluster_slots},
        {"every_kind_on_200_names_over_all_masters_excludes_another_client",
         every_kind_on_200_names_over_all_masters_excludes_another_client},
        {"watchdog_renews_holds_over_all_masters_by_slot", watchdog_renews_holds_over_all_masters_by_slot},
        {"waiter_is_woken_by_the_release_on_a_cluster", waiter_is_woken_by_the_release_on_a_cluster},
        {"names_with_braces_follow_redissons_rule_and_never_meet_crossslot",
         names_with_braces_follow_redissons_rule_and_never_meet_crossslot},
        {"topology_override_and_first_seed_down", topology_override_and_first_seed_down},
        {"contending_clients_exclude_each_other_on_a_cluster", contending_clients_exclude_each_other_on_a_cluster},
        {"redlock_over_a_cluster_and_two_servers", redlock_over_a_cluster_and_two_servers},
        {"deployments_that_reach_one_cluster_are_duplicates", deployments_that_reach_one_cluster_are_duplicates},
        {"an_uncovered_slot_is_a_clear_error_within_the_deadline",
         an_uncovered_slot_is_a_clear_error_within_the_deadline},
    };
    return rt_run(tests, sizeof tests / sizeof tests[0], argc, argv);
}
