/*
 * The queue between the core's log callback and the `redmutex` logger
 * (_log.c): declarations shared by the C file and the cffi build.
 */
#ifndef REDMUTEX_PY_LOG_H
#define REDMUTEX_PY_LOG_H

#include <stdint.h>

#include "redmutex.h"

typedef struct rmpy_log_record {
    int level;
    char message[2400];
    char lock[REDMUTEX_NAME_MAX + 1];
    char server[512];
} rmpy_log_record;

/* The client option `log` of every client the package makes. */
void rmpy_log(int level, const char *message, const char *lock_name, const char *server, void *payload);
/* An eventfd readable while messages are queued (made on first call); -1 without one. */
int rmpy_log_fd(void);
/* Pops the oldest message: 1, or 0 when none is queued. */
int rmpy_log_next(rmpy_log_record *out);
/* Messages dropped because nobody read the queue. */
uint64_t rmpy_log_dropped(void);

#endif
