/*
 * The request encoder (rm_format_command) and the number formatting that
 * requests use: exact RESP bytes for argument counts and lengths around
 * powers of ten, and a real server that parses them back into the same
 * arguments.
 */
#define _GNU_SOURCE
#include "harness.h"
#include "resp.h"

#include <inttypes.h>
#include <string.h>
#include <unistd.h>

static void test_lengths_are_written_in_decimal(void)
{
    rm_buf b = {0};
    const char *argv[] = {"", "a", "SET"};
    CHECK(rm_format_command(&b, 3, argv, NULL) == 0);
    const char want[] = "*3\r\n$0\r\n\r\n$1\r\na\r\n$3\r\nSET\r\n";
    CHECKF(b.len == sizeof want - 1 && memcmp(b.data, want, b.len) == 0, "got %.*s", (int)b.len, b.data);
    rm_buf_free(&b);

    static const size_t lens[] = {9, 10, 11, 99, 100, 101, 999, 1000, 12345, 100000};
    for (size_t k = 0; k < sizeof lens / sizeof lens[0]; k++) {
        char *arg = malloc(lens[k]);
        memset(arg, 'x', lens[k]);
        const char *one[] = {arg};
        rm_buf out = {0};
        CHECK(rm_format_command(&out, 1, one, &lens[k]) == 0);
        char head[64];
        int n = snprintf(head, sizeof head, "*1\r\n$%zu\r\n", lens[k]);
        CHECKF(out.len == (size_t)n + lens[k] + 2 && memcmp(out.data, head, (size_t)n) == 0,
               "length %zu encoded as %.20s", lens[k], out.data);
        CHECK(memcmp(out.data + n + lens[k], "\r\n", 2) == 0);
        rm_buf_free(&out);
        free(arg);
    }
}

static void test_numbers_are_written_in_decimal(void)
{
    static const int64_t v[] = {0, 7, -1, 10, 30000, -9000000000, INT64_MAX, INT64_MIN};
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        char got[24], want[24];
        snprintf(want, sizeof want, "%" PRId64, v[i]);
        CHECKF(strcmp(rm_i64_str(got, v[i]), want) == 0, "%s written as %s", want, got);
    }
}

static void test_a_server_reads_back_the_same_arguments(void)
{
    rs_server s;
    rs_start(&s, NULL);
    /* Eleven arguments (a two-digit count), one of 10 bytes and one of 100. */
    char ten[11], hundred[101];
    memset(ten, 't', 10), ten[10] = '\0';
    memset(hundred, 'h', 100), hundred[100] = '\0';
    const char *argv[] = {"RPUSH", "list", ten, hundred, "", "1", "2", "3", "4", "5", "6"};
    rm_buf b = {0};
    CHECK(rm_format_command(&b, 11, argv, NULL) == 0);
    redisContext *ctx = redisConnect("127.0.0.1", s.port);
    CHECK(ctx && !ctx->err);
    CHECK(write(ctx->fd, b.data, b.len) == (ssize_t)b.len);
    redisReply *r;
    CHECK(redisGetReply(ctx, (void **)&r) == REDIS_OK);
    CHECKF(r->type == REDIS_REPLY_INTEGER && r->integer == 9, "RPUSH answered type %d", r->type);
    freeReplyObject(r);
    r = redisCommand(ctx, "LRANGE list 0 -1");
    CHECK(r && r->type == REDIS_REPLY_ARRAY && r->elements == 9);
    for (size_t i = 0; i < 9; i++)
        CHECKF(strcmp(r->element[i]->str, argv[i + 2]) == 0, "element %zu is '%s'", i, r->element[i]->str);
    freeReplyObject(r);
    redisFree(ctx);
    rm_buf_free(&b);
    rs_stop(&s);
}

int main(int argc, char **argv)
{
    static const rt_test tests[] = {
        {"lengths_are_written_in_decimal", test_lengths_are_written_in_decimal},
        {"numbers_are_written_in_decimal", test_numbers_are_written_in_decimal},
        {"a_server_reads_back_the_same_arguments", test_a_server_reads_back_the_same_arguments},
    };
    return rt_run(tests, sizeof tests / sizeof tests[0], argc, argv);
}
