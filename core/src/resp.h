/*
 * RESP (resp.c): reply objects, the parser, the command formatter.
 */
#ifndef REDMUTEX_RESP_H
#define REDMUTEX_RESP_H

#include "internal.h"

/* ---- RESP (resp.c) --------------------------------------------------- */

enum rm_reply_type {
    RM_REPLY_STRING = 1,
    RM_REPLY_ARRAY,
    RM_REPLY_INTEGER,
    RM_REPLY_NIL,
    RM_REPLY_STATUS,
    RM_REPLY_ERROR,
    RM_REPLY_OTHER /* RESP3 types a RESP2 server never sends */
};

typedef struct rm_reply {
    int type;
    long long integer;
    size_t len;
    char *str;
    size_t elements;
    struct rm_reply **element;
} rm_reply;

void rm_reply_free(rm_reply *r);

/** A RESP parser (hiredis's redisReader making rm_reply objects). */
typedef struct rm_reader rm_reader;
rm_reader *rm_reader_new(void);
void rm_reader_free(rm_reader *r);
/** 0, or -1 (protocol error; message in errbuf). */
int rm_reader_feed(rm_reader *r, const char *data, size_t len, char *errbuf, size_t errlen);
/** 1 with *out set, 0 when more data is needed, -1 on a protocol error. */
int rm_reader_next(rm_reader *r, rm_reply **out, char *errbuf, size_t errlen);

/** Bytes received but not yet parsed into replies. */
size_t rm_reader_pending(const rm_reader *r);
/** Appends one command in RESP (array of bulk strings). */
int rm_format_command(rm_buf *b, int argc, const char *const *argv, const size_t *lens);

/**
 * Classifies a server's error reply into a code (WRONGTYPE, an ACL refusal,
 * ...) and sets the message: "<what> '<name>' on <server>: ..." with a hint.
 */
int rm_reply_error(rm_err *err, const rm_reply *r, const char *what, const char *name, const char *server);

#endif
