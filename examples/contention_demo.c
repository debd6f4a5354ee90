/*
 * Contention demo: several worker processes increment a counter kept in a
 * plain file, a read-modify-write that loses updates unless something
 * serialises it. Here one redmutex lock does, so the final count is exact.
 *
 *   contention_demo [-w WORKERS] [-n ROUNDS] [-r] URL [URL...]
 *
 * With several URLs the lock is a Redlock over those servers. -r uses a
 * reentrant (Redisson-format) lock instead of a plain one.
 */
#define _GNU_SOURCE
#include <redmutex.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef struct stats {
    long acquisitions;
    double total_wait_ms;
    double max_wait_ms;
} stats;

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static long read_counter(const char *path)
{
    FILE *f = fopen(path, "r");
    long v = 0;
    if (f) {
        if (fscanf(f, "%ld", &v) != 1)
            v = 0;
        fclose(f);
    }
    return v;
}

static void write_counter(const char *path, long v)
{
    FILE *f = fopen(path, "w");
    if (f) {
        fprintf(f, "%ld\n", v);
        fclose(f);
    }
}

static int worker(const char *const *urls, size_t n_urls, redmutex_kind kind, int rounds, const char *path,
                  stats *out)
{
    redmutex_client *client;
    if (redmutex_client_new(&client, urls, n_urls, NULL) != 0) {
        fprintf(stderr, "client: %s\n", redmutex_last_error());
        return 1;
    }
    redmutex_lock_options opts = REDMUTEX_LOCK_OPTIONS_INIT;
    opts.lease_ms = 10000; /* the work is short; a lease bounds a crash */
    redmutex_lock *lock;
    if (redmutex_lock_new(&lock, client, "demo:counter", kind, &opts) != 0) {
        fprintf(stderr, "lock: %s\n", redmutex_last_error());
        return 1;
    }
    for (int i = 0; i < rounds; i++) {
        double t0 = now_ms();
        if (redmutex_lock_acquire(lock, NULL, 30000) != 0) {
            fprintf(stderr, "acquire: %s\n", redmutex_last_error());
            return 1;
        }
        double waited = now_ms() - t0;
        out->acquisitions++;
        out->total_wait_ms += waited;
        if (waited > out->max_wait_ms)
            out->max_wait_ms = waited;

        long v = read_counter(path); /* the critical section: read, work, write */
        usleep(1000);
        write_counter(path, v + 1);

        if (redmutex_lock_release(lock, NULL) != 0) {
            fprintf(stderr, "release: %s\n", redmutex_last_error());
            return 1;
        }
    }
    redmutex_lock_free(lock);
    redmutex_client_free(client);
    return 0;
}

int main(int argc, char **argv)
{
    int workers = 6, rounds = 50, opt;
    redmutex_kind kind = REDMUTEX_KIND_LOCK;
    while ((opt = getopt(argc, argv, "w:n:r")) != -1) {
        if (opt == 'w')
            workers = atoi(optarg);
        else if (opt == 'n')
            rounds = atoi(optarg);
        else if (opt == 'r')
            kind = REDMUTEX_KIND_RLOCK;
        else
            return 2;
    }
    if (optind >= argc || workers < 1 || workers > 64 || rounds < 1) {
        fprintf(stderr, "usage: %s [-w WORKERS] [-n ROUNDS] [-r] URL [URL...]\n", argv[0]);
        return 2;
    }
    const char *const *urls = (const char *const *)argv + optind;
    size_t n_urls = (size_t)(argc - optind);

    char path[] = "/tmp/redmutex-demo-XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0)
        return 1;
    close(fd);
    write_counter(path, 0);
    stats *st = mmap(NULL, sizeof(stats) * (size_t)workers, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                     -1, 0);
    if (st == MAP_FAILED)
        return 1;
    memset(st, 0, sizeof(stats) * (size_t)workers);

    printf("redmutex %s: %d workers x %d increments of a file counter, one %s lock on %zu server%s\n",
           redmutex_version(), workers, rounds, kind == REDMUTEX_KIND_LOCK ? "plain" : "reentrant", n_urls,
           n_urls > 1 ? "s (Redlock)" : "");
    double t0 = now_ms();
    for (int w = 0; w < workers; w++) {
        pid_t pid = fork();
        if (pid == 0)
            _exit(worker(urls, n_urls, kind, rounds, path, &st[w]));
    }
    int failed = 0;
    for (int w = 0; w < workers; w++) {
        int status;
        wait(&status);
        failed |= !WIFEXITED(status) || WEXITSTATUS(status) != 0;
    }
    double elapsed = now_ms() - t0;
    long counter = read_counter(path);
    unlink(path);
    for (int w = 0; w < workers; w++)
        printf("  worker %d: %3ld acquisitions, waited %7.1f ms on average, %7.1f ms at most\n", w + 1,
               st[w].acquisitions, st[w].acquisitions ? st[w].total_wait_ms / st[w].acquisitions : 0.0,
               st[w].max_wait_ms);
    long expected = (long)workers * rounds;
    printf("counter = %ld (expected %ld): %s; %.0f ms in all, %.0f acquisitions/s\n", counter, expected,
           counter == expected ? "exact" : "LOST UPDATES", elapsed, expected / (elapsed / 1000));
    return failed || counter != expected;
}
