/*
 * The core's log messages, handed to Python's `redmutex` logger.
 *
 * The core calls its log callback on the thread that noticed: a caller's
 * thread inside a redmutex call, or the client's watchdog thread. No Python
 * code may run there: the watchdog would wait for the GIL (and for whatever
 * a logging handler does) while leases run out. So the callback only copies
 * the message into a small process-wide queue and makes an eventfd
 * readable; a daemon thread of the package ("redmutex-log") reads the queue
 * with the GIL and calls the logger. A full queue drops the newest message
 * and counts it: messages are rare (one per change of a server or a hold),
 * so 64 only fill up if nothing reads them.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "_log.h"

#define RMPY_LOG_QUEUE 64

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static rmpy_log_record queue[RMPY_LOG_QUEUE];
static size_t head, count;
static uint64_t dropped;
static int efd = -1;
static pthread_once_t once = PTHREAD_ONCE_INIT;

/* In a forked child the eventfd would be the parent's (one counter for
   both): the child gets its own, and none of the parent's messages. */
static void after_fork(void)
{
    pthread_mutex_init(&mu, NULL);
    head = count = 0;
    dropped = 0;
    if (efd >= 0) {
        close(efd);
        efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    }
}

static void setup(void)
{
    efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    pthread_atfork(NULL, NULL, after_fork);
}

int rmpy_log_fd(void)
{
    pthread_once(&once, setup);
    return efd;
}

void rmpy_log(int level, const char *message, const char *lock_name, const char *server, void *payload)
{
    (void)payload;
    pthread_mutex_lock(&mu);
    if (count == RMPY_LOG_QUEUE) {
        dropped++;
        pthread_mutex_unlock(&mu);
        return;
    }
    rmpy_log_record *r = &queue[(head + count++) % RMPY_LOG_QUEUE];
    r->level = level;
    snprintf(r->message, sizeof r->message, "%s", message ? message : "");
    snprintf(r->lock, sizeof r->lock, "%s", lock_name ? lock_name : "");
    snprintf(r->server, sizeof r->server, "%s", server ? server : "");
    int fd = efd;
    pthread_mutex_unlock(&mu);
    if (fd >= 0) {
        uint64_t one = 1;
        ssize_t n = write(fd, &one, sizeof one);
        (void)n; /* a saturated counter is readable all the same */
    }
}

int rmpy_log_next(rmpy_log_record *out)
{
    pthread_mutex_lock(&mu);
    int got = count > 0;
    if (got) {
        *out = queue[head];
        head = (head + 1) % RMPY_LOG_QUEUE;
        count--;
    } else if (efd >= 0) {
        uint64_t v;
        ssize_t n = read(efd, &v, sizeof v); /* empty: not readable until the next message */
        (void)n;
    }
    pthread_mutex_unlock(&mu);
    return got;
}

uint64_t rmpy_log_dropped(void)
{
    pthread_mutex_lock(&mu);
    uint64_t n = dropped;
    pthread_mutex_unlock(&mu);
    return n;
}
