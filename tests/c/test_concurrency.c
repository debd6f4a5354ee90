/* Mutual exclusion under contention: threads of one client and separate processes. */
#define _GNU_SOURCE
#include "harness.h"

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

static rs_server srv;

/* A counter updated with a deliberate race window: only mutual exclusion keeps it exact. */
typedef struct shared {
    long counter;
    atomic_int inside;
    atomic_int violations;
    atomic_int errors;
} shared;

static void critical_section(shared *sh)
{
    if (atomic_fetch_add(&sh->inside, 1) != 0)
        atomic_fetch_add(&sh->violations, 1);
    long v = sh->counter;
    usleep(200);
    sh->counter = v + 1;
    atomic_fetch_sub(&sh->inside, 1);
}

typedef struct worker {
    redmutex_client *c;
    const char *name;
    redmutex_kind kind;
    int rounds;
    shared *sh;
} worker;

static void run_worker(worker *w)
{
    redmutex_lock_options o = REDMUTEX_LOCK_OPTIONS_INIT;
    o.lease_ms = 10000;
    redmutex_lock *l;
    if (redmutex_lock_new(&l, w->c, w->name, w->kind, &o) != 0) {
        atomic_fetch_add(&w->sh->errors, 1);
        return;
    }
    for (int i = 0; i < w->rounds; i++) {
        int rc = redmutex_lock_acquire(l, NULL, 20000);
        if (rc != 0) {
            fprintf(stderr, "acquire: %s\n", redmutex_last_error());
            atomic_fetch_add(&w->sh->errors, 1);
            continue;
        }
        critical_section(w->sh);
        if (redmutex_lock_release(l, NULL) != 0) {
            fprintf(stderr, "release: %s\n", redmutex_last_error());
            atomic_fetch_add(&w->sh->errors, 1);
        }
    }
    redmutex_lock_free(l);
}

static void *thread_main(void *p)
{
    run_worker(p);
    return NULL;
}

static void threads_case(redmutex_kind kind)
{
    rs_start(&srv, NULL);
    redmutex_client *c = rt_client(&srv, 0);
    shared sh = {0};
    enum { THREADS = 8, ROUNDS = 100 };
    worker w[THREADS];
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++) {
        w[i] = (worker){c, "counter", kind, ROUNDS, &sh};
        pthread_create(&t[i], NULL, thread_main, &w[i]);
    }
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    CHECK(atomic_load(&sh.errors) == 0);
    CHECK(atomic_load(&sh.violations) == 0);
    CHECKF(sh.counter == THREADS * ROUNDS, "counter %ld, expected %d", sh.counter, THREADS * ROUNDS);
    CHECK(!rs_exists(&srv, "counter"));
    redmutex_client_close(c);
    redmutex_client_free(c);
}

static void test_eight_threads_plain_lock_counter_exact(void) { threads_case(REDMUTEX_KIND_LOCK); }

static void test_eight_threads_rlock_counter_exact(void) { threads_case(REDMUTEX_KIND_RLOCK); }

static void test_four_processes_counter_exact(void)
{
    rs_start(&srv, NULL);
    shared *sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    CHECK(sh != MAP_FAILED);
    memset(sh, 0, sizeof *sh);
    enum { PROCS = 4, ROUNDS = 150 };
    pid_t pids[PROCS];
    for (int i = 0; i < PROCS; i++) {
        pids[i] = fork();
        if (pids[i] == 0) {
            redmutex_client *c = rt_client(&srv, 0);
            worker w = {c, "proc-counter", REDMUTEX_KIND_LOCK, ROUNDS, sh};
            run_worker(&w);
            redmutex_client_close(c);
            redmutex_client_free(c);
            _exit(0);
        }
    }
    for (int i = 0; i < PROCS; i++) {
        int status;
        waitpid(pids[i], &status, 0);
        CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    CHECK(atomic_load(&sh->errors) == 0);
    CHECK(atomic_load(&sh->violations) == 0);
    CHECKF(sh->counter == PROCS * ROUNDS, "counter %ld, expected %d", sh->counter, PROCS * ROUNDS);
    munmap(sh, sizeof *sh);
}

int main(int argc, char **argv)
{
    static const rt_test tests[] = {
        {"eight_threads_plain_lock_counter_exact", test_eight_threads_plain_lock_counter_exact},
        {"eight_threads_rlock_counter_exact", test_eight_threads_rlock_counter_exact},
        {"four_processes_counter_exact", test_four_processes_counter_exact},
    };
    return rt_run(tests, sizeof tests / sizeof tests[0], argc, argv);
}
