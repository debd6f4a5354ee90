/*
 * libFuzzer target: the RESP reader (resp.c) fed in fragments. The input's
 * first byte seeds the fragment sizes; the rest is a reply stream. Reading
 * it in fragments must give exactly the replies (and the same error, at the
 * same place) as reading it whole, and every reply tree must be well formed.
 */
#include "resp.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size);

/* Appends a canonical description of r to out (bounded). */
static void describe(const rm_reply *r, rm_buf *out, int depth)
{
    if (depth > 64)
        abort(); /* the reader must refuse deeper nesting */
    char head[64];
    int n = snprintf(head, sizeof head, "<%d:%lld:%zu:%zu>", r->type, r->integer, r->len, r->elements);
    rm_buf_append(out, head, (size_t)n);
    if (r->str) {
        if (r->str[r->len] != '\0')
            abort();
        rm_buf_append(out, r->str, r->len);
    }
    if (r->elements && !r->element)
        abort();
    for (size_t i = 0; i < r->elements; i++) {
        if (!r->element[i])
            abort();
        describe(r->element[i], out, depth + 1);
    }
}

/* Feeds data in pieces of the given sizes (0: all at once); returns replies read, -1 on error. */
static long read_all(const unsigned char *data, size_t size, unsigned seed, rm_buf *out)
{
    rm_reader *rd = rm_reader_new();
    if (!rd)
        abort();
    long count = 0;
    size_t pos = 0;
    char err[160];
    while (pos < size || count == 0) {
        size_t piece = size - pos;
        if (seed) {
            seed = seed * 1103515245u + 12345u;
            size_t want = 1 + (seed >> 16) % 17;
            piece = want < piece ? want : piece;
        }
        if (piece && rm_reader_feed(rd, (const char *)data + pos, piece, err, sizeof err) != 0) {
            count = -1;
            break;
        }
        pos += piece;
        for (;;) {
            rm_reply *r = NULL;
            int got = rm_reader_next(rd, &r, err, sizeof err);
            if (got < 0) {
                count = -1;
                break;
            }
            if (got == 0)
                break;
            describe(r, out, 0);
            rm_reply_free(r);
            count++;
        }
        if (count < 0 || piece == 0)
            break;
    }
    rm_reader_free(rd);
    return count;
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    if (size < 1)
        return 0;
    unsigned seed = data[0] | 1u;
    rm_buf whole = {0}, pieces = {0};
    long a = read_all(data + 1, size - 1, 0, &whole);
    long b = read_all(data + 1, size - 1, seed, &pieces);
    /* Fragmenting must change nothing: the same replies, and an error (if
       any) after the same replies. */
    if (a != b || whole.len != pieces.len || (whole.len && memcmp(whole.data, pieces.data, whole.len) != 0))
        abort();
    rm_buf_free(&whole);
    rm_buf_free(&pieces);
    return 0;
}
