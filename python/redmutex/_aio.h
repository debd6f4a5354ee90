/*
 * The worker pool of redmutex.asyncio (_aio.c): declarations shared by the C
 * file and the cffi build (which gives Python the fields it reads and writes).
 */
#ifndef REDMUTEX_PY_AIO_H
#define REDMUTEX_PY_AIO_H

#include <stdatomic.h>
#include <stdint.h>

#include "redmutex.h"

/* What a job does (one redmutex call each; see run() in _aio.c). */
enum {
    RMPY_OP_WAIT_TRY = 1,  /* redmutex_wait_try(wait) */
    RMPY_OP_ACQUIRE_NOW,   /* redmutex_lock_acquire(lock, owner, 0) */
    RMPY_OP_RELEASE,       /* redmutex_lock_release(lock, owner) */
    RMPY_OP_EXTEND,        /* redmutex_lock_extend(lock, owner, ms, mode) */
    RMPY_OP_IS_LOCKED,     /* redmutex_lock_is_locked -> out */
    RMPY_OP_IS_OWNED,      /* redmutex_lock_is_owned -> out */
    RMPY_OP_TTL,           /* redmutex_lock_ttl -> out */
    RMPY_OP_HOLD_COUNT,    /* redmutex_lock_hold_count -> out */
    RMPY_OP_FORCE_RELEASE, /* redmutex_lock_force_release -> out */
    RMPY_OP_WAIT_FREE,     /* [release (lock, owner) if release_first,] redmutex_wait_free(wait) */
    RMPY_OP_CLOSE,         /* redmutex_client_close(client) */
    /* Semaphores, multi-locks and latches (the job's ref says which; a
       release, extension or acquire-now of their ref acts on them). */
    RMPY_OP_SEM_AVAILABLE, /* redmutex_semaphore_available -> out */
    RMPY_OP_LATCH_TRY_SET, /* redmutex_latch_try_set_count(ms = count) -> out */
    RMPY_OP_LATCH_COUNT_DOWN,
    RMPY_OP_LATCH_COUNT    /* redmutex_latch_count -> out */
};

/* What an rmpy_lockref holds. */
enum { RMPY_REF_LOCK, RMPY_REF_SEMAPHORE, RMPY_REF_MULTI, RMPY_REF_LATCH };

typedef struct rmpy_lockref rmpy_lockref;
typedef struct rmpy_pool rmpy_pool;

typedef struct rmpy_job {
    /* Filled by the submitter. */
    int op;
    redmutex_wait *wait;
    redmutex_client *client;
    int has_owner;
    char owner[REDMUTEX_OWNER_MAX + 1];
    int64_t ms;
    int mode;
    int release_first;
    /* Results. */
    int rc;
    int64_t out;
    char msg[512];
    /* The pool's (under its mutex). */
    rmpy_lockref *lockref;
    int state;
    int abandoned;
    struct rmpy_job *next;
    _Atomic int refs;
} rmpy_job;

/* A reference-counted lock handle: takes over `lock`, freed with the last reference. NULL: no memory. */
rmpy_lockref *rmpy_lockref_new(redmutex_lock *lock);
/* The same for a semaphore, a multi-lock, a latch (RMPY_REF_*), whose handle is `obj`. */
rmpy_lockref *rmpy_ref_new(int type, void *obj);
redmutex_lock *rmpy_lockref_lock(rmpy_lockref *r);
void rmpy_lockref_unref(rmpy_lockref *r);

/* A job with one reference (the caller's). NULL: no memory. */
rmpy_job *rmpy_job_new(void);
void rmpy_job_unref(rmpy_job *j);
/* The lock the job acts on (the job takes a reference). */
void rmpy_job_set_lock(rmpy_job *j, rmpy_lockref *r);

/* Starts `threads` workers (1..64). NULL with errno on failure. */
rmpy_pool *rmpy_pool_new(int threads);
/* Readable exactly while finished jobs wait on the done queue. */
int rmpy_pool_fd(rmpy_pool *p);
/* Queues a new job. 0, or -1 when the pool is stopping or the job was submitted before. */
int rmpy_pool_submit(rmpy_pool *p, rmpy_job *j);
/* Takes up to max finished jobs; the pool's reference to each passes to the caller. */
int rmpy_pool_done(rmpy_pool *p, rmpy_job **out, int max);
/* Gives up on a job: 1 when it was still queued or running (the pool then
   undoes what it took for nobody), 0 when it had finished (its results are
   the caller's to act on). */
int rmpy_job_abandon(rmpy_pool *p, rmpy_job *j);
/* Drops the caller's reference: workers finish the queue and exit; never blocks. */
void rmpy_pool_stop(rmpy_pool *p);

#endif
