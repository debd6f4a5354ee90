/*
 * The worker pool of redmutex.asyncio: a small fixed number of C threads
 * that make the lock calls which need a round trip (an attempt, a release,
 * an extension, a query), so the event loop never blocks on the network.
 *
 * The loop submits a job and awaits it; a worker runs the redmutex call
 * without the GIL and without touching Python, stores the result and the
 * error message (redmutex_last_error() is per thread, so it is copied into
 * the job), and puts the job on the done queue, whose eventfd the loop
 * watches. The workers never take the GIL: a thousand waiting tasks cost no
 * thread each, and a completion costs the loop one read of the done queue.
 *
 * Lifetimes are the C side's business, so that a garbage collector may drop
 * anything in any order:
 *  - A job is reference counted: the Python object holds one reference, the
 *    pool another from submission until the loop took it off the done queue.
 *  - A lock handle is wrapped in a reference-counted rmpy_lockref: the
 *    Python lock object holds one reference, every job on it another, and
 *    the handle is freed (redmutex_lock_free, which never blocks) with the
 *    last.
 *  - A job the loop gave up on (its task was cancelled) is abandoned: when
 *    it ends, the worker undoes what it did for nobody (an acquisition that
 *    succeeded is released, the wait is freed), whether the loop still runs
 *    or not.
 *  - Stopping the pool (its Python object is gone) lets the workers finish
 *    the queue, follow-ups included, and exit; the last one frees the pool.
 */
#define _GNU_SOURCE
#include "redmutex.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "_aio.h"

enum { JOB_NEW, JOB_QUEUED, JOB_RUNNING, JOB_DONE };

struct rmpy_lockref {
    int type;  /* RMPY_REF_* */
    void *obj; /* the handle: a redmutex_lock, _semaphore, _multi_lock or _latch */
    _Atomic int refs;
};

typedef struct rmpy_pool {
    pthread_mutex_t mu;
    pthread_cond_t work;
    rmpy_job *queue_head, *queue_tail;
    rmpy_job *done_head, *done_tail;
    int efd;       /* readable exactly while the done queue is not empty */
    int refs;      /* the Python object's + one per running worker (mu) */
    bool stopping; /* the Python object is gone: results are dropped */
} rmpy_pool;

/* ---- lock references -------------------------------------------------- */

rmpy_lockref *rmpy_ref_new(int type, void *obj)
{
    rmpy_lockref *r = malloc(sizeof *r);
    if (!r)
        return NULL;
    r->type = type;
    r->obj = obj;
    atomic_init(&r->refs, 1);
    return r;
}

rmpy_lockref *rmpy_lockref_new(redmutex_lock *lock)
{
    return rmpy_ref_new(RMPY_REF_LOCK, lock);
}

redmutex_lock *rmpy_lockref_lock(rmpy_lockref *r)
{
    return r->type == RMPY_REF_LOCK ? r->obj : NULL;
}

/* Releases what `owner` holds through the ref's handle (a semaphore's: the permit `owner`). */
static int ref_release(rmpy_lockref *r, const char *owner)
{
    switch (r ? r->type : -1) {
    case RMPY_REF_LOCK:
        return redmutex_lock_release(r->obj, owner);
    case RMPY_REF_SEMAPHORE:
        return redmutex_semaphore_release(r->obj, owner);
    case RMPY_REF_MULTI:
        return redmutex_multi_lock_release(r->obj, owner);
    default:
        return 0; /* a latch holds nothing */
    }
}

static void lockref_ref(rmpy_lockref *r)
{
    if (r)
        atomic_fetch_add(&r->refs, 1);
}

void rmpy_lockref_unref(rmpy_lockref *r)
{
    if (r && atomic_fetch_sub(&r->refs, 1) == 1) {
        if (r->type == RMPY_REF_LOCK)
            redmutex_lock_free(r->obj);
        else if (r->type == RMPY_REF_SEMAPHORE)
            redmutex_semaphore_free(r->obj);
        else if (r->type == RMPY_REF_MULTI)
            redmutex_multi_lock_free(r->obj);
        else
            redmutex_latch_free(r->obj);
        free(r);
    }
}

/* ---- jobs ------------------------------------------------------------------ */

rmpy_job *rmpy_job_new(void)
{
    rmpy_job *j = calloc(1, sizeof *j);
    if (j)
        atomic_init(&j->refs, 1);
    return j;
}

static void job_ref(rmpy_job *j)
{
    atomic_fetch_add(&j->refs, 1);
}

void rmpy_job_unref(rmpy_job *j)
{
    if (j && atomic_fetch_sub(&j->refs, 1) == 1) {
        rmpy_lockref_unref(j->lockref); /* a job never run still holds its reference */
        free(j);
    }
}

void rmpy_job_set_lock(rmpy_job *j, rmpy_lockref *r)
{
    lockref_ref(r);
    rmpy_lockref_unref(j->lockref);
    j->lockref = r;
}

static void note_error(rmpy_job *j, int rc)
{
    j->rc = rc;
    if (rc < 0)
        snprintf(j->msg, sizeof j->msg, "%s", redmutex_last_error());
}

/* An acquisition of the job's handle without waiting: a lock's for owner,
   a semaphore's of j->ms permits (its id written into the job's owner), a
   multi-lock's whole set. */
static int acquire_now(rmpy_job *j, const char *owner)
{
    rmpy_lockref *r = j->lockref;
    switch (r ? r->type : -1) {
    case RMPY_REF_LOCK:
        return redmutex_lock_acquire(r->obj, owner, 0);
    case RMPY_REF_SEMAPHORE: {
        int rc = redmutex_semaphore_acquire(j->owner, sizeof j->owner, r->obj, j->ms, 0);
        j->has_owner = rc == 0;
        return rc;
    }
    case RMPY_REF_MULTI:
        return redmutex_multi_lock_acquire(r->obj, owner, 0);
    default:
        return REDMUTEX_EINVAL;
    }
}

/* The semaphore's and latch's own calls. */
static int run_other(rmpy_job *j)
{
    void *obj = j->lockref ? j->lockref->obj : NULL;
    int flag = 0, rc = REDMUTEX_EINVAL;
    switch (j->op) {
    case RMPY_OP_SEM_AVAILABLE:
        rc = redmutex_semaphore_available(&j->out, NULL, obj);
        break;
    case RMPY_OP_LATCH_TRY_SET:
        rc = redmutex_latch_try_set_count(&flag, obj, j->ms);
        j->out = flag;
        break;
    case RMPY_OP_LATCH_COUNT_DOWN:
        rc = redmutex_latch_count_down(obj);
        break;
    case RMPY_OP_LATCH_COUNT:
        rc = redmutex_latch_count(&j->out, obj);
        break;
    default:
        break;
    }
    return rc;
}

static void run(rmpy_job *j)
{
    redmutex_lock *l = j->lockref ? rmpy_lockref_lock(j->lockref) : NULL;
    const char *owner = j->has_owner ? j->owner : NULL;
    int flag = 0, rc = REDMUTEX_EINVAL;
    switch (j->op) {
    case RMPY_OP_WAIT_TRY:
        rc = redmutex_wait_try(j->wait);
        break;
    case RMPY_OP_ACQUIRE_NOW:
        rc = acquire_now(j, owner);
        break;
    case RMPY_OP_RELEASE:
        rc = ref_release(j->lockref, owner);
        break;
    case RMPY_OP_EXTEND:
        rc = j->lockref && j->lockref->type == RMPY_REF_SEMAPHORE
                 ? redmutex_semaphore_extend(j->lockref->obj, owner, j->ms, (redmutex_extend_mode)j->mode)
                 : redmutex_lock_extend(l, owner, j->ms, (redmutex_extend_mode)j->mode);
        break;
    case RMPY_OP_IS_LOCKED:
        rc = redmutex_lock_is_locked(&flag, l);
        j->out = flag;
        break;
    case RMPY_OP_IS_OWNED:
        rc = redmutex_lock_is_owned(&flag, l, owner);
        j->out = flag;
        break;
    case RMPY_OP_TTL:
        rc = redmutex_lock_ttl(&j->out, l);
        break;
    case RMPY_OP_HOLD_COUNT:
        rc = redmutex_lock_hold_count(&j->out, l, owner);
        break;
    case RMPY_OP_FORCE_RELEASE:
        rc = redmutex_lock_force_release(&flag, l);
        j->out = flag;
        break;
    case RMPY_OP_WAIT_FREE:
        rc = j->release_first ? ref_release(j->lockref, owner) : 0;
        note_error(j, rc);
        redmutex_wait_free(j->wait);
        return;
    case RMPY_OP_CLOSE:
        rc = redmutex_client_close(j->client);
        break;
    default:
        rc = run_other(j);
        break;
    }
    note_error(j, rc);
}

/* An abandoned job's result goes to nobody: undo what it took. */
static void follow_up(rmpy_job *j)
{
    const char *owner = j->has_owner ? j->owner : NULL;
    if (j->op == RMPY_OP_WAIT_TRY) {
        if (j->rc == 0)
            ref_release(j->lockref, owner);
        redmutex_wait_free(j->wait);
    } else if (j->op == RMPY_OP_ACQUIRE_NOW && j->rc == 0) {
        ref_release(j->lockref, owner);
    }
}

/* ---- the pool ---------------------------------------------------------------- */

static void pool_unref_locked(rmpy_pool *p, bool *free_it)
{
    *free_it = --p->refs == 0;
}

static void pool_free(rmpy_pool *p)
{
    while (p->done_head) {
        rmpy_job *j = p->done_head;
        p->done_head = j->next;
        rmpy_job_unref(j);
    }
    close(p->efd);
    pthread_cond_destroy(&p->work);
    pthread_mutex_destroy(&p->mu);
    free(p);
}

static void *worker_main(void *arg)
{
    rmpy_pool *p = arg;
    /* Signals belong to the interpreter's main thread. */
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, NULL);
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->queue_head && !p->stopping)
            pthread_cond_wait(&p->work, &p->mu);
        rmpy_job *j = p->queue_head;
        if (!j)
            break; /* stopping, and the queue is empty */
        p->queue_head = j->next;
        if (!p->queue_head)
            p->queue_tail = NULL;
        j->next = NULL;
        j->state = JOB_RUNNING;
        pthread_mutex_unlock(&p->mu);

        run(j);
        pthread_mutex_lock(&p->mu);
        if (j->abandoned) {
            pthread_mutex_unlock(&p->mu);
            follow_up(j);
            pthread_mutex_lock(&p->mu);
        }
        j->state = JOB_DONE;
        rmpy_lockref *lr = j->lockref;
        j->lockref = NULL;
        bool deliver = !p->stopping;
        if (deliver) {
            /* The pool's reference passes to the done queue. */
            if (p->done_tail)
                p->done_tail->next = j;
            else
                p->done_head = j;
            p->done_tail = j;
            if (p->done_head == j) {
                uint64_t one = 1;
                ssize_t w = write(p->efd, &one, sizeof one);
                (void)w;
            }
        }
        pthread_mutex_unlock(&p->mu);
        rmpy_lockref_unref(lr); /* may free the handle: never blocks */
        if (!deliver)
            rmpy_job_unref(j);
        pthread_mutex_lock(&p->mu);
    }
    bool free_it;
    pool_unref_locked(p, &free_it);
    pthread_mutex_unlock(&p->mu);
    if (free_it)
        pool_free(p);
    return NULL;
}

rmpy_pool *rmpy_pool_new(int threads)
{
    if (threads < 1 || threads > 64) {
        errno = EINVAL;
        return NULL;
    }
    rmpy_pool *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (p->efd < 0) {
        free(p);
        return NULL;
    }
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->work, NULL);
    p->refs = 1; /* the Python object's */
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    int started = 0;
    for (int i = 0; i < threads; i++) {
        pthread_mutex_lock(&p->mu);
        p->refs++;
        pthread_mutex_unlock(&p->mu);
        pthread_t t;
        if (pthread_create(&t, &attr, worker_main, p) != 0) {
            pthread_mutex_lock(&p->mu);
            p->refs--;
            pthread_mutex_unlock(&p->mu);
            break;
        }
        started++;
    }
    pthread_attr_destroy(&attr);
    if (started == 0) {
        rmpy_pool_stop(p);
        errno = EAGAIN;
        return NULL;
    }
    return p;
}

int rmpy_pool_fd(rmpy_pool *p)
{
    return p->efd;
}

int rmpy_pool_submit(rmpy_pool *p, rmpy_job *j)
{
    pthread_mutex_lock(&p->mu);
    if (p->stopping || j->state != JOB_NEW) {
        pthread_mutex_unlock(&p->mu);
        return -1;
    }
    job_ref(j); /* the pool's */
    j->state = JOB_QUEUED;
    j->next = NULL;
    if (p->queue_tail)
        p->queue_tail->next = j;
    else
        p->queue_head = j;
    p->queue_tail = j;
    pthread_cond_signal(&p->work);
    pthread_mutex_unlock(&p->mu);
    return 0;
}

int rmpy_pool_done(rmpy_pool *p, rmpy_job **out, int max)
{
    int n = 0;
    pthread_mutex_lock(&p->mu);
    while (n < max && p->done_head) {
        rmpy_job *j = p->done_head;
        p->done_head = j->next;
        if (!p->done_head)
            p->done_tail = NULL;
        j->next = NULL;
        out[n++] = j;
    }
    if (!p->done_head) {
        uint64_t v;
        ssize_t r = read(p->efd, &v, sizeof v);
        (void)r;
    }
    pthread_mutex_unlock(&p->mu);
    return n;
}

int rmpy_job_abandon(rmpy_pool *p, rmpy_job *j)
{
    pthread_mutex_lock(&p->mu);
    bool pending = j->state == JOB_QUEUED || j->state == JOB_RUNNING;
    if (pending)
        j->abandoned = 1;
    pthread_mutex_unlock(&p->mu);
    return pending;
}

void rmpy_pool_stop(rmpy_pool *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->mu);
    p->stopping = true;
    pthread_cond_broadcast(&p->work);
    bool free_it;
    pool_unref_locked(p, &free_it);
    pthread_mutex_unlock(&p->mu);
    if (free_it)
        pool_free(p);
}
