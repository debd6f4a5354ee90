/*
 * RESP: hiredis's parser (redisReader) building our own reply objects, and a
 * command formatter that writes straight into a connection's output buffer.
 *
 * Our own reply objects let us refuse hostile sizes (huge array counts, huge
 * buffered replies) before allocating, and keep the code independent of the
 * differences between hiredis 0.14 and 1.x.
 */
#define _GNU_SOURCE
#include "internal.h"
#include "resp.h"

#include <hiredis/read.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* No reply of ours has more elements than a renewal batch; leave room. */
#define RM_ARRAY_MAX 100000
/* No reply of ours is this large; a server sending more is hostile. */
#define RM_BUFFER_MAX (16u * 1024 * 1024)

struct rm_reader {
    redisReader *r;
};

void rm_reply_free(rm_reply *r)
{
    if (!r)
        return;
    if (r->element) {
        for (size_t i = 0; i < r->elements; i++)
            rm_reply_free(r->element[i]);
        free(r->element);
    }
    free(r->str);
    free(r);
}

static void *attach(const redisReadTask *task, rm_reply *r)
{
    if (task->parent) {
        rm_reply *parent = task->parent->obj;
        parent->element[task->idx] = r;
    }
    return r;
}

static void *create_string(const redisReadTask *task, char *str, size_t len)
{
    rm_reply *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    switch (task->type) {
    case REDIS_REPLY_STRING:
        r->type = RM_REPLY_STRING;
        break;
    case REDIS_REPLY_STATUS:
        r->type = RM_REPLY_STATUS;
        break;
    case REDIS_REPLY_ERROR:
        r->type = RM_REPLY_ERROR;
        break;
    default:
        r->type = RM_REPLY_OTHER;
        break;
    }
    r->str = malloc(len + 1);
    if (!r->str) {
        free(r);
        return NULL;
    }
    memcpy(r->str, str, len);
    r->str[len] = '\0';
    r->len = len;
    return attach(task, r);
}

#if HIREDIS_MAJOR >= 1
static void *create_array(const redisReadTask *task, size_t elements)
#else
static void *create_array(const redisReadTask *task, int elements)
#endif
{
    if (elements < 0 || (size_t)elements > RM_ARRAY_MAX)
        return NULL; /* the reader reports it as an error */
    rm_reply *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    r->type = task->type == REDIS_REPLY_ARRAY ? RM_REPLY_ARRAY : RM_REPLY_OTHER;
    r->element = calloc(elements > 0 ? (size_t)elements : 1, sizeof *r->element);
    if (!r->element) {
        free(r);
        return NULL;
    }
    r->elements = (size_t)elements;
    return attach(task, r);
}

static void *create_integer(const redisReadTask *task, long long value)
{
    rm_reply *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    r->type = RM_REPLY_INTEGER;
    r->integer = value;
    return attach(task, r);
}

static void *create_nil(const redisReadTask *task)
{
    rm_reply *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    (void)task->type; /* a null bulk string or null array: both are nil to us */
    r->type = RM_REPLY_NIL;
    return attach(task, r);
}

#if HIREDIS_MAJOR >= 1
static void *create_double(const redisReadTask *task, double value, char *str, size_t len)
{
    (void)value;
    rm_reply *r = create_string(task, str, len);
    if (r)
        r->type = RM_REPLY_OTHER;
    return r;
}

static void *create_bool(const redisReadTask *task, int value)
{
    rm_reply *r = create_integer(task, value);
    if (r)
        r->type = RM_REPLY_OTHER;
    return r;
}
#endif

static void free_object(void *obj) { rm_reply_free(obj); }

static redisReplyObjectFunctions reply_functions = {
    create_string, create_array, create_integer,
#if HIREDIS_MAJOR >= 1
    create_double,
#endif
    create_nil,
#if HIREDIS_MAJOR >= 1
    create_bool,
#endif
    free_object,
};

rm_reader *rm_reader_new(void)
{
    rm_reader *rd = calloc(1, sizeof *rd);
    if (!rd)
        return NULL;
    rd->r = redisReaderCreateWithFunctions(&reply_functions);
    if (!rd->r) {
        free(rd);
        return NULL;
    }
    return rd;
}

void rm_reader_free(rm_reader *rd)
{
    if (!rd)
        return;
    redisReaderFree(rd->r);
    free(rd);
}

int rm_reader_feed(rm_reader *rd, const char *data, size_t len, char *errbuf, size_t errlen)
{
    if (rd->r->len - rd->r->pos + len > RM_BUFFER_MAX) {
        snprintf(errbuf, errlen, "reply larger than %u bytes", RM_BUFFER_MAX);
        return -1;
    }
    if (redisReaderFeed(rd->r, data, len) != REDIS_OK) {
        snprintf(errbuf, errlen, "%s", rd->r->errstr);
        return -1;
    }
    return 0;
}

int rm_reader_next(rm_reader *rd, rm_reply **out, char *errbuf, size_t errlen)
{
    void *reply = NULL;
    if (redisReaderGetReply(rd->r, &reply) != REDIS_OK) {
        /* The parser also reports our refusal of an oversized array as "out of memory". */
        snprintf(errbuf, errlen, "malformed reply (%s)", rd->r->errstr);
        return -1;
    }
    if (!reply)
        return 0;
    *out = reply;
    return 1;
}

size_t rm_reader_pending(const rm_reader *rd) { return rd->r->len - rd->r->pos; }

/* "<prefix><n>\r\n". Written by hand: every request formats a few dozen of
   these, and snprintf was most of a request's client-side instructions. */
static int append_decimal_line(rm_buf *b, char prefix, size_t n)
{
    char tmp[32];
    char *end = tmp + sizeof tmp, *p = end;
    *--p = '\n';
    *--p = '\r';
    do {
        *--p = (char)('0' + n % 10);
        n /= 10;
    } while (n);
    *--p = prefix;
    return rm_buf_append(b, p, (size_t)(end - p));
}

int rm_format_command(rm_buf *b, int argc, const char *const *argv, const size_t *lens)
{
    if (append_decimal_line(b, '*', (size_t)argc))
        return REDMUTEX_ENOMEM;
    for (int i = 0; i < argc; i++) {
        size_t len = lens ? lens[i] : strlen(argv[i]);
        if (append_decimal_line(b, '$', len) || rm_buf_append(b, argv[i], len) || rm_buf_append(b, "\r\n", 2))
            return REDMUTEX_ENOMEM;
    }
    return 0;
}

int rm_reply_error(rm_err *err, const rm_reply *r, const char *what, const char *name, const char *server)
{
    const char *e = r->str ? r->str : "";
    int code = REDMUTEX_ESERVER;
    const char *hint = "";
    if (strstr(e, "WRONGTYPE")) {
        code = REDMUTEX_EWRONGTYPE;
        hint = " (the key exists but is not a lock of this kind; nothing was changed)";
    } else if (strncmp(e, "NOAUTH", 6) == 0 || strncmp(e, "WRONGPASS", 9) == 0 || strstr(e, "NOPERM") ||
               strstr(e, "The user executing the script can't")) { /* an ACL refusal inside a script */
        code = REDMUTEX_EAUTH;
        hint = " (check the user, password and ACL permissions in the URL)";
    } else if (strncmp(e, "EINVAL ", 7) == 0) {
        /* A script refused its arguments before writing (a semaphore's capacity). */
        code = REDMUTEX_EINVAL;
    } else if (strncmp(e, "READONLY", 8) == 0) {
        hint = " (this server is a read-only replica; use the master)";
    } else if (strncmp(e, "LOADING", 7) == 0) {
        hint = " (the server is loading its data; retry shortly)";
    }
    if (name)
        return rm_fail(err, code, "%s '%s' on %s: %.300s%s", what, name, server, e, hint);
    if (server)
        return rm_fail(err, code, "%s on %s: %.300s%s", what, server, e, hint);
    return rm_fail(err, code, "%s: %.300s%s", what, e, hint);
}
