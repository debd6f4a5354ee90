/* Compiled with -std=c99 -pedantic -Werror (and as C++): the header stands alone and is strict-clean. */
#include "redmutex.h"
#include "redmutex.h" /* include guard */

#include <stdio.h>
#include <string.h>

int main(void)
{
    redmutex_client_options co = REDMUTEX_CLIENT_OPTIONS_INIT;
    redmutex_lock_options lo = REDMUTEX_LOCK_OPTIONS_INIT;
    redmutex_client_options co2;
    redmutex_lock_options lo2;
    if (redmutex_client_options_init(&co2, REDMUTEX_CLIENT_OPTIONS_VERSION) != 0 ||
        redmutex_lock_options_init(&lo2, REDMUTEX_LOCK_OPTIONS_VERSION) != 0)
        return 1;
    /* The macro and the function give identical bytes (the structs have no padding). */
    if (memcmp(&co, &co2, sizeof co) != 0 || memcmp(&lo, &lo2, sizeof lo) != 0)
        return 2;
    if (sizeof(redmutex_client_options) != 8 + 9 * 8 + 9 * sizeof(void *))
        return 3;
    /* The statistics snapshots have no padding either: what the caller's
       version names is all that is written. */
    if (sizeof(redmutex_histogram) != (2 + REDMUTEX_STATS_BUCKETS) * 8 ||
        sizeof(redmutex_stats) !=
            8 + REDMUTEX_STATS_BUCKETS * 8 +
                (REDMUTEX_STATS_KINDS * (REDMUTEX_STATS_OUTCOMES + 1)) * sizeof(redmutex_histogram) +
                (4 + REDMUTEX_STATS_RENEWAL_OUTCOMES) * 8 ||
        sizeof(redmutex_server_stats) !=
            8 + sizeof(void *) + sizeof(redmutex_histogram) + REDMUTEX_STATS_ERROR_CLASSES * 8)
        return 5;
    if (strcmp(redmutex_version(), REDMUTEX_VERSION_STRING) != 0)
        return 4;
    printf("header ok: %s\n", redmutex_version());
    return 0;
}
