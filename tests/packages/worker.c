/* The C worker of tests/packages/run, built against an installed libredmutex-dev (pkg-config
 * or CMake's find_package), in the form of bindings/tests/worker.*:
 *   worker URL NAME COUNTER_FILE ITERATIONS
 * adds 1 to the number in COUNTER_FILE ITERATIONS times, each time under the lock NAME. */
#include <redmutex.h>

#include <stdio.h>
#include <stdlib.h>

static long read_counter(const char *path) {
    FILE *f = fopen(path, "r");
    long value = 0;
    if (!f || fscanf(f, "%ld", &value) != 1)
        value = 0;
    if (f)
        fclose(f);
    return value;
}

static int write_counter(const char *path, long value) {
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    fprintf(f, "%ld", value);
    return fclose(f);
}

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: worker URL NAME COUNTER_FILE ITERATIONS\n");
        return 2;
    }
    const char *url = argv[1];
    redmutex_client *client;
    redmutex_lock *lock;
    if (redmutex_client_new(&client, &url, 1, NULL) != 0 ||
        redmutex_lock_new(&lock, client, argv[2], REDMUTEX_KIND_LOCK, NULL) != 0) {
        fprintf(stderr, "worker: %s\n", redmutex_last_error());
        return 1;
    }
    int rc = 0;
    for (int i = 0; i < atoi(argv[4]) && rc == 0; i++) {
        if (redmutex_lock_acquire(lock, NULL, 60000) != 0) {
            fprintf(stderr, "worker: %s\n", redmutex_last_error());
            rc = 1;
            break;
        }
        if (write_counter(argv[3], read_counter(argv[3]) + 1) != 0)
            rc = 1;
        if (redmutex_lock_release(lock, NULL) != 0) {
            fprintf(stderr, "worker: %s\n", redmutex_last_error());
            rc = 1;
        }
    }
    redmutex_lock_free(lock);
    redmutex_client_close(client);
    redmutex_client_free(client);
    return rc;
}
