/* The API's contracts that need no lock server: options, errors, versions, bad input. */
#define _GNU_SOURCE
#include "harness.h"
#include "client.h" /* the client struct: a test reads its state */

#include <math.h>
#include <stddef.h>
#include <string.h>

static rs_server srv;

static void test_options_macro_and_init_function_agree(void)
{
    redmutex_client_options a = REDMUTEX_CLIENT_OPTIONS_INIT, b;
    memset(&b, 0xAB, sizeof b);
    CHECK_OK(redmutex_client_options_init(&b, REDMUTEX_CLIENT_OPTIONS_VERSION));
    CHECK(memcmp(&a, &b, sizeof a) == 0);
    redmutex_lock_options la = REDMUTEX_LOCK_OPTIONS_INIT, lb;
    memset(&lb, 0xAB, sizeof lb);
    CHECK_OK(redmutex_lock_options_init(&lb, REDMUTEX_LOCK_OPTIONS_VERSION));
    CHECK(memcmp(&la, &lb, sizeof la) == 0);
    CHECK_RC(redmutex_client_options_init(NULL, REDMUTEX_CLIENT_OPTIONS_VERSION), REDMUTEX_EINVAL);
    CHECK_RC(redmutex_client_options_init(&b, 99), REDMUTEX_EINVAL);
    CHECK_RC(redmutex_lock_options_init(&lb, 0), REDMUTEX_EINVAL);
    CHECK(a.command_timeout_ms == 1000 && a.watchdog_lease_ms == 30000 && a.wait_backoff_cap_ms == 1000);
    CHECK(a.tls_context == NULL && a.tls_ca_file == NULL && a.tls_server_name == NULL);
}

/* The layout of version 1 of redmutex_client_options, as a program built against 1.0 has it. */
typedef struct options_v1 {
    uint32_t version, flags;
    int64_t connect_timeout_ms, command_timeout_ms, watchdog_lease_ms, wait_backoff_cap_ms, retry_delay_ms, retry_count,
        min_replicas, replica_timeout_ms, shutdown_timeout_ms;
    redmutex_interrupt_fn interrupt;
    void *interrupt_payload;
} options_v1;

static void test_version_1_options_still_accepted(void)
{
    CHECK(sizeof(options_v1) == offsetof(redmutex_client_options, tls_context));
    /* What follows a version-1 struct in the caller's memory is never written or read. */
    struct {
        options_v1 o;
        unsigned char after[sizeof(redmutex_client_options)];
    } v1;
    memset(&v1, 0xAB, sizeof v1);
    CHECK_OK(redmutex_client_options_init((redmutex_client_options *)(void *)&v1.o, 1));
    CHECK(v1.o.version == 1 && v1.o.flags == 0 && v1.o.connect_timeout_ms == 2000 && v1.o.interrupt == NULL);
    for (size_t i = 0; i < sizeof v1.after; i++)
        CHECKF(v1.after[i] == 0xAB, "byte %zu after a version-1 struct was written", i);
    /* The bytes after it look like TLS pointers; the library must not read them. */
    v1.o.command_timeout_ms = 700;
    const char *url = "redis://127.0.0.1:1";
    redmutex_client *c = NULL;
    CHECK_OK(redmutex_client_new(&c, &url, 1, (redmutex_client_options *)(void *)&v1.o));
    CHECK(c->opts.command_timeout_ms == 700 && c->opts.tls_context == NULL);
    redmutex_client_free(c);
    v1.o.version = 3;
    CHECK_RC(redmutex_client_new(&c, &url, 1, (redmutex_client_options *)(void *)&v1.o), REDMUTEX_EINVAL);
}

static void test_version_and_strerror(void)
{
    CHECK(strcmp(redmutex_version(), REDMUTEX_VERSION_STRING) == 0);
    CHECK(redmutex_version_number() == REDMUTEX_VERSION_NUMBER);
    for (int code = 0; code >= REDMUTEX_EUNSUPPORTED; code--)
        CHECKF(strcmp(redmutex_strerror(code), "unknown error") != 0, "code %d has no description", code);
    CHECK(strcmp(redmutex_strerror(-1000), "unknown error") == 0);
    CHECK(strcmp(redmutex_strerror(42), "unknown error") == 0);
    redmutex_clear_error();
    CHECK(redmutex_last_error()[0] == '\0' && redmutex_last_error_code() == 0);
}

static void test_free_null_is_noop(void)
{
    redmutex_client_free(NULL);
    redmutex_lock_free(NULL);
    CHECK(redmutex_client_server_count(NULL) == 0);
}

static int new_client(const char *url)
{
    redmutex_client *c = NULL;
    int rc = redmutex_client_new(&c, &url, 1, NULL);
    redmutex_client_free(c);
    return rc;
}

static void test_malformed_urls_rejected_without_password_leak(void)
{
    const char *bad[] = {
        "",
        "localhost:6379",
        "http://localhost",
        "redis://",
        "redis://:6379",
        "redis://host:0",
        "redis://host:65536",
        "redis://host:12ab",
        "redis://host:6379/x",
        "redis://host:6379/1/2",
        "redis://ho st",
        "redis://host?timeout=1",
        "redis://[::1",
        "redis://[zz]:6379",
        "redis://user@host",
        "redis://u:p%zz@host",
        "redis://u:p%00@host",
        "unix://",
        "unix://relative/path",
        "unix:///tmp/x?db=abc",
        "unix:///tmp/x?foo=1",
        "rediss://",
        "rediss://host?ssl_cert_reqs=maybe",
        "rediss://host?ssl_check_hostname=perhaps",
        "rediss://host?ssl_verify=none",
        "rediss://host?ssl_ca_certs=",
        "rediss://host?ssl_ca_certs",
        "rediss://host?ssl_ca_certs=/a&ssl_ca_certs=/b",
        "rediss://host?ssl_cert_reqs=none&ssl_cert_reqs=required",
        "rediss://host?ssl_ca_certs=%zz",
        "rediss://host#fragment",
        "redis://host?ssl_ca_certs=/etc/ssl/certs/ca-certificates.crt",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc = new_client(bad[i]);
        CHECKF(rc == REDMUTEX_EINVAL, "URL '%s' gave %d", bad[i], rc);
        CHECKF(strstr(redmutex_last_error(), "malformed server URL") || strstr(redmutex_last_error(), "URL"),
               "message for '%s': %s", bad[i], redmutex_last_error());
    }
    const char *secret_urls[] = {"redis://admin:hunter2@host:bad",   "redis:/admin:hunter2@host",
                                 "redis:admin:hunter2@host",         "admin:hunter2@host",
                                 "http://admin:hunter2@host",        "rediss://admin:hunter2@host?ssl_cert_reqs=no",
                                 "rediss://admin:hunter2@host:99999"};
    for (size_t i = 0; i < sizeof secret_urls / sizeof secret_urls[0]; i++) {
        CHECK_RC(new_client(secret_urls[i]), REDMUTEX_EINVAL);
        CHECKF(strstr(redmutex_last_error(), "hunter2") == NULL, "password shown: %s", redmutex_last_error());
    }
    char huge[5000];
    memset(huge, 'a', sizeof huge - 1);
    huge[sizeof huge - 1] = '\0';
    memcpy(huge, "redis://", 8);
    CHECK_RC(new_client(huge), REDMUTEX_EINVAL);
    /* Good ones parse (no connection is made for one server). */
    const char *good[] = {"redis://127.0.0.1",
                          "redis://localhost:6380/15",
                          "redis://[::1]:6379",
                          "redis://:pass@h",
                          "redis://user:p%40ss@h:1/0",
                          "unix:///tmp/redis.sock",
                          "unix:///tmp/redis.sock?db=2",
                          "rediss://h",
                          "rediss://u:p@h:6380/2?ssl_cert_reqs=none",
                          "rediss://h?ssl_check_hostname=FALSE&ssl_server_hostname=redis.example",
                          "rediss://[::1]:6380?ssl_cert_reqs=required&ssl_check_hostname=1"};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++)
        CHECKF(new_client(good[i]) == 0, "URL '%s' refused: %s", good[i], redmutex_last_error());
}

/* What redmutex_url_redact makes of a URL, well formed or not: every secret masked, the rest as typed. */
static void test_url_redact_masks_every_secret_and_keeps_the_rest(void)
{
    static const char *const cases[][2] = {
        {"redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"},
        {"redis://alice:hunter22@h:1/2", "redis://***@h:1/2"}, /* the user name too: it may be a password */
        {"redis://:hunter22@h", "redis://***@h"},
        {"redis://hunter22@h", "redis://***@h"},        /* a password typed without its ':' */
        {"redis://u:hun@ter22@h", "redis://***@h"},     /* '@' in the password, unencoded */
        {"redis://u:hun/ter22@h/0", "redis://***@h/0"}, /* '/' in the password, unencoded */
        {"redis://h?password=hunter22", "redis://h?password=***"},
        {"redis://h/0?db=3&password=hunter22&username=bob", "redis://h/0?db=3&password=***&username=bob"},
        {"rediss://h?ssl_ca_certs=/ca.pem&ssl_password=hunter22", "rediss://h?ssl_ca_certs=/ca.pem&ssl_password=***"},
        {"redis+sentinel://s:26379/m?sentinel_password=hunter22", "redis+sentinel://s:26379/m?sentinel_password=***"},
        {"redis://h?passwd=hunter22&token=t0ken&api_secret=s3", "redis://h?passwd=***&token=***&api_secret=***"},
        {"redis://h?pasword=hunter22", "redis://h?pasword=***"}, /* misspelt: masked all the same */
        {"redis://h?hunter22", "redis://h?***"},                 /* no name */
        {"redis://h?password=hun&ter22", "redis://h?password=***&***"},
        {"redis://h?password=hun?ter22", "redis://h?password=***"}, /* the parser reads it so */
        {"redis://h?ssl_ca_certs=/x?password=hunter22", "redis://h?ssl_ca_certs=/x?password=***"},
        {"redis://h/0?password=hun@ter22", "redis://***"}, /* the user part runs to the last '@', the value past it */
        {"redis://:hunter22", "redis://***"},
        {"redis://hunter22:", "redis://***"},
        {"redis://h:6379", "redis://h:6379"},
        {"redis://[::1]:6379", "redis://[::1]:6379"},
        /* A seed list (a cluster): each seed shown; one that cannot be a host[:port] masked. */
        {"redis://10.0.0.1:7000,10.0.0.2:7001,h3/0", "redis://10.0.0.1:7000,10.0.0.2:7001,h3/0"},
        {"redis://[::1]:7000,[::2]:7001/0?topology=cluster", "redis://[::1]:7000,[::2]:7001/0?topology=cluster"},
        {"redis://h1:7000,:hunter22,h3:7002/0", "redis://h1:7000,***,h3:7002/0"},
        {"redis://h1:7000,hunter22:/0", "redis://h1:7000,***/0"},
        {"redis://u:pw@h1:7000,h2:7001/0", "redis://***@h1:7000,h2:7001/0"},
        {"unix:///run/redis.sock?db=1&password=hunter22", "unix:///run/redis.sock?db=1&password=***"},
        {"admin:hunter22@host", "***@host"},
        {"", ""},
    };
    char out[256];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int n = redmutex_url_redact(out, sizeof out, cases[i][0]);
        CHECKF(strcmp(out, cases[i][1]) == 0, "'%s' shown as '%s', expected '%s'", cases[i][0], out, cases[i][1]);
        CHECKF(n == (int)strlen(cases[i][1]), "'%s': length %d", cases[i][0], n);
    }
    /* snprintf's contract: the whole length, a truncated NUL-terminated copy. */
    CHECK(redmutex_url_redact(NULL, 0, "redis://u:hunter22@h") == (int)strlen("redis://***@h"));
    char small[8];
    CHECK(redmutex_url_redact(small, sizeof small, "redis://u:hunter22@h") == (int)strlen("redis://***@h"));
    CHECK(strcmp(small, "redis:/") == 0);
    CHECK_RC(redmutex_url_redact(out, sizeof out, NULL), REDMUTEX_EINVAL);
    CHECK_RC(redmutex_url_redact(NULL, 4, "redis://h"), REDMUTEX_EINVAL);
    static char huge[20000];
    memset(huge, 'p', sizeof huge - 1);
    memcpy(huge, "redis://u:", 10);
    redmutex_url_redact(out, sizeof out, huge);
    CHECKF(strchr(out, 'p') == NULL || strstr(out, "ppp") == NULL, "a huge URL shown: %.60s", out);
}

/* A fragment is refused by the parser, and the refusal shows the URL: what follows '#' may be a secret. */
static void test_url_redact_masks_a_fragment(void)
{
    static const char *const cases[][2] = {
        {"redis://127.0.0.1:1#password=s3cr3tL", "redis://127.0.0.1:1#***"},
        {"redis://h/0#hunter22", "redis://h/0#***"},
        {"redis://h?db=1#hunter22", "redis://h?db=1#***"},
        {"redis://u:pw@h#hunter22", "redis://***@h#***"},
        {"redis://u:hun#ter22@h", "redis://***@h"}, /* '#' in the password: the user part masks it */
        {"redis://h#", "redis://h#"},
    };
    char out[256];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int n = redmutex_url_redact(out, sizeof out, cases[i][0]);
        CHECKF(strcmp(out, cases[i][1]) == 0, "'%s' shown as '%s', expected '%s'", cases[i][0], out, cases[i][1]);
        CHECKF(n == (int)strlen(cases[i][1]), "'%s': length %d", cases[i][0], n);
    }
    /* The refusal of such a URL, as a client reports it. */
    const char *u = "redis://127.0.0.1:1#password=s3cr3tL";
    redmutex_client *c = NULL;
    CHECK_RC(redmutex_client_new(&c, &u, 1, NULL), REDMUTEX_EINVAL);
    CHECKF(!strstr(redmutex_last_error(), "s3cr3tL") && strstr(redmutex_last_error(), "fragments are not supported"),
           "message: %s", redmutex_last_error());
}

/* The messages of a client that cannot reach its server show the URL redacted, whichever form held the password. */
static void test_query_password_is_used_and_never_shown(void)
{
    rs_server s;
    rs_start(&s, "requirepass hunter22\n");
    char url[256];
    /* redis-py's form: accepted on redis://, and AUTH is sent with it. */
    snprintf(url, sizeof url, "redis://127.0.0.1:%d/0?password=hunter22", s.port);
    const char *u = url;
    redmutex_client *c = NULL;
    CHECK_OK(redmutex_client_new(&c, &u, 1, NULL));
    redmutex_lock *l = NULL;
    CHECK_OK(redmutex_lock_new(&l, c, "job", REDMUTEX_KIND_LOCK, NULL));
    CHECK_OK(redmutex_lock_acquire(l, NULL, 0));
    CHECK_OK(redmutex_lock_release(l, NULL));
    redmutex_lock_free(l);
    redmutex_client_free(c);
    /* With ?username= too (ACL AUTH user password): the default user. */
    snprintf(url, sizeof url, "redis://127.0.0.1:%d?username=default&password=hunter22", s.port);
    CHECK_OK(redmutex_client_new(&c, &u, 1, NULL));
    CHECK_OK(redmutex_lock_new(&l, c, "job", REDMUTEX_KIND_LOCK, NULL));
    CHECK_OK(redmutex_lock_acquire(l, NULL, 0));
    CHECK_OK(redmutex_lock_release(l, NULL));
    redmutex_lock_free(l);
    redmutex_client_free(c);
    /* A wrong one: refused, and the message shows neither. */
    snprintf(url, sizeof url, "redis://127.0.0.1:%d?password=not-hunter22", s.port);
    CHECK_OK(redmutex_client_new(&c, &u, 1, NULL));
    CHECK_OK(redmutex_lock_new(&l, c, "job", REDMUTEX_KIND_LOCK, NULL));
    CHECK_RC(redmutex_lock_acquire(l, NULL, 0), REDMUTEX_EAUTH);
    CHECKF(!strstr(redmutex_last_error(), "hunter22") && strstr(redmutex_last_error(), "redis://***@"), "message: %s",
           redmutex_last_error());
    redmutex_lock_free(l);
    redmutex_client_free(c);
    rs_stop(&s);
    /* Unreachable, over TLS and plain text, and a Unix socket: connection errors. */
    const char *forms[][2] = {{"redis", "?password=hunter22"},
                              {"rediss", "/1?password=hunter22"},
                              {"redis", "?username=bob&password=hunter22"}};
    for (size_t i = 0; i < sizeof forms / sizeof forms[0]; i++) {
        snprintf(url, sizeof url, "%s://127.0.0.1:%d%s", forms[i][0], rt_free_port(), forms[i][1]);
        CHECK_OK(redmutex_client_new(&c, &u, 1, NULL));
        CHECK_OK(redmutex_lock_new(&l, c, "job", REDMUTEX_KIND_LOCK, NULL));
        CHECK_RC(redmutex_lock_acquire(l, NULL, 0), REDMUTEX_ECONN);
        CHECKF(!strstr(redmutex_last_error(), "hunter22"), "%s: %s", url, redmutex_last_error());
        redmutex_lock_free(l);
        redmutex_client_free(c);
    }
    u = "unix:///nonexistent/redis.sock?password=hunter22";
    CHECK_OK(redmutex_client_new(&c, &u, 1, NULL));
    CHECK_OK(redmutex_lock_new(&l, c, "job", REDMUTEX_KIND_LOCK, NULL));
    CHECK_RC(redmutex_lock_acquire(l, NULL, 0), REDMUTEX_ECONN);
    CHECKF(!strstr(redmutex_last_error(), "hunter22"), "message: %s", redmutex_last_error());
    redmutex_lock_free(l);
    redmutex_client_free(c);
}

/* Query options are refused with the true reason, never one that blames TLS for something else. */
static void test_query_option_refusals_say_what_is_wrong(void)
{
    static const char *const cases[][2] = {
        {"redis://h?db=x", "'db' must be a database number"},
        {"redis://h?db=1&db=2", "'db' is given twice"},
        {"redis://h/1?db=2", "database is given twice"},
        {"unix:///s?db=x", "'db' must be a database number"},
        {"redis://h?ssl_ca_certs=/ca.pem", "needs a rediss:// URL"},
        {"unix:///s?ssl_certfile=/c.pem", "needs a rediss:// URL"},
        {"redis://h?timeout=1", "unknown query option 'timeout'"},
        {"rediss://h?ssl_verify=none", "unknown query option 'ssl_verify'"},
        {"redis://u:p@h?password=q", "password is given twice"},
        {"redis://u:p@h?username=v", "user name is given twice"},
        {"redis://h?password=a&password=b", "'password' is given twice"},
        {"redis://h?password=", "'password' is empty"},
        {"redis://h?username=bob", "a user name needs a password"},
        {"unix:///s?username=bob", "a user name needs a password"},
        {"rediss://h?ssl_cert_reqs=maybe", "ssl_cert_reqs must be required or none"},
        {"rediss://h?ssl_check_hostname=perhaps", "ssl_check_hostname must be true or false"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        CHECK_RC(new_client(cases[i][0]), REDMUTEX_EINVAL);
        CHECKF(strstr(redmutex_last_error(), cases[i][1]), "'%s': %s", cases[i][0], redmutex_last_error());
        if (!strstr(cases[i][0], "ssl_"))
            CHECKF(!strstr(redmutex_last_error(), "rediss") && !strstr(redmutex_last_error(), "TLS"),
                   "'%s' blamed on TLS: %s", cases[i][0], redmutex_last_error());
    }
    const char *good[] = {"redis://h?db=3",
                          "rediss://h?db=3&ssl_cert_reqs=none",
                          "unix:///s?db=2&password=p",
                          "unix:///s?username=u&password=p",
                          "redis://u@h?password=p",
                          "redis://:p@h?username=u"};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++)
        CHECKF(new_client(good[i]) == 0, "URL '%s' refused: %s", good[i], redmutex_last_error());
}

static void test_client_arguments(void)
{
    redmutex_client *c = NULL;
    const char *url = "redis://127.0.0.1:1";
    CHECK_RC(redmutex_client_new(NULL, &url, 1, NULL), REDMUTEX_EINVAL);
    CHECK_RC(redmutex_client_new(&c, NULL, 1, NULL), REDMUTEX_EINVAL);
    CHECK_RC(redmutex_client_new(&c, &url, 0, NULL), REDMUTEX_EINVAL);
    CHECK_RC(redmutex_client_new(&c, &url, REDMUTEX_SERVERS_MAX + 1, NULL), REDMUTEX_EINVAL);
    const char *null_url = NULL;
    CHECK_RC(redmutex_client_new(&c, &null_url, 1, NULL), REDMUTEX_EINVAL);
    redmutex_client_options o = REDMUTEX_CLIENT_OPTIONS_INIT;
    o.command_timeout_ms = 0;
    CHECK_RC(redmutex_client_new(&c, &url, 1, &o), REDMUTEX_EINVAL);
    o = (redmutex_client_options)REDMUTEX_CLIENT_OPTIONS_INIT;
    o.connect_timeout_ms = -5;
    CHECK_RC(redmutex_client_new(&c, &url, 1, &o), REDMUTEX_EINVAL);
    o = (redmutex_client_options)REDMUTEX_CLIENT_OPTIONS_INIT;
    o.watchdog_lease_ms = INT64_MAX;
    CHECK_RC(redmutex_client_new(&c, &url, 1, &o), REDMUTEX_EINVAL);
    o = (redmutex_client_options)REDMUTEX_CLIENT_OPTIONS_INIT;
    o.version = 7;
    CHECK_RC(redmutex_client_new(&c, &url, 1, &o), REDMUTEX_EINVAL);
    o = (redmutex_client_options)REDMUTEX_CLIENT_OPTIONS_INIT;
    o.flags = 0x80;
    CHECK_RC(redmutex_client_new(&c, &url, 1, &o), REDMUTEX_EINVAL);
    o = (redmutex_client_options)REDMUTEX_CLIENT_OPTIONS_INIT;
    o.min_replicas = -2; /* -1 is the deployment's default */
    CHECK_RC(redmutex_client_new(&c, &url, 1, &o), REDMUTEX_EINVAL);
    CHECK(c == NULL);
    CHECK_OK(redmutex_client_new(&c, &url, 1, NULL));
    CHECK(strlen(redmutex_client_id(c)) == REDMUTEX_CLIENT_ID_LEN);
    CHECK(redmutex_client_server_count(c) == 1);
    char small[8];
    CHECK_RC(redmutex_client_thread_owner(small, sizeof small, c), REDMUTEX_EINVAL);
    CHECK_RC(redmutex_client_thread_owner(NULL, 100, c), REDMUTEX_EINVAL);
    redmutex_client_free(c);
}

static void test_lock_arguments(void)
{
    rs_start(&srv, NULL);
    redmutex_client *c = rt_client(&srv, 0);
    redmutex_lock *l = NULL;
    CHECK_RC(redmutex_lock_new(NULL, c, "x", REDMUTEX_KIND_LOCK, NULL), REDMUTEX_EINVAL);
    CHECK_RC(redmutex_lock_new(&l, NULL, "x", REDMUTEX_KIND_LOCK, NULL), REDMUTEX_EINVAL);
    CHECK_RC(redmutex_lock_new(&l, c, NULL, REDMUTEX_KIND_LOCK, NULL), REDMUTEX_EINVAL);
    CHECK_RC(redmutex_lock_new(&l, c, "", REDMUTEX_KIND_LOCK, NULL), REDMUTEX_EINVAL);
    char big[REDMUTEX_NAME_MAX + 2];
    memset(big, 'n', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    CHECK_RC(redmutex_lock_new(&l, c, big, REDMUTEX_KIND_LOCK, NULL), REDMUTEX_EINVAL);
    big[REDMUTEX_NAME_MAX] = '\0';
    CHECK_OK(redmutex_lock_new(&l, c, big, REDMUTEX_KIND_LOCK, NULL)); /* exactly the maximum */
    redmutex_lock_free(l);
    CHECK_RC(redmutex_lock_new(&l, c, "x", (redmutex_kind)7, NULL), REDMUTEX_EINVAL);
    redmutex_lock_options o = REDMUTEX_LOCK_OPTIONS_INIT;
    o.lease_ms = -1;
    CHECK_RC(redmutex_lock_new(&l, c, "x", REDMUTEX_KIND_LOCK, &o), REDMUTEX_EINVAL);
    o.lease_ms = 5;
    CHECK_RC(redmutex_lock_new(&l, c, "x", REDMUTEX_KIND_LOCK, &o), REDMUTEX_EINVAL);
    o.lease_ms = REDMUTEX_TIME_MAX_MS + 1;
    CHECK_RC(redmutex_lock_new(&l, c, "x", REDMUTEX_KIND_LOCK, &o), REDMUTEX_EINVAL);
    o = (redmutex_lock_options)REDMUTEX_LOCK_OPTIONS_INIT;
    o.flags = 0x10;
    CHECK_RC(redmutex_lock_new(&l, c, "x", REDMUTEX_KIND_LOCK, &o), REDMUTEX_EINVAL);
    o = (redmutex_lock_options)REDMUTEX_LOCK_OPTIONS_INIT;
    o.max_extensions = -3;
    CHECK_RC(redmutex_lock_new(&l, c, "x", REDMUTEX_KIND_LOCK, &o), REDMUTEX_EINVAL);

    o = (redmutex_lock_options)REDMUTEX_LOCK_OPTIONS_INIT;
    o.lease_ms = 5000;
    CHECK_OK(redmutex_lock_new(&l, c, "args", REDMUTEX_KIND_LOCK, &o));
    CHECK(strcmp(redmutex_lock_name(l), "args") == 0 && redmutex_lock_kind(l) == REDMUTEX_KIND_LOCK);
    CHECK_RC(redmutex_lock_acquire(NULL, NULL, 0), REDMUTEX_EINVAL);
    CHECK_RC(redmutex_lock_acquire(l, NULL, -2), REDMUTEX_EINVAL);
    CHECK_RC(redmutex_lock_acquire(l, NULL, INT64_MIN), REDMUTEX_EINVAL);
    CHECK_RC(redmutex_lock_acquire(l, NULL, REDMUTEX_TIME_MAX_MS + 1), REDMUTEX_EINVAL);
    CHECK_RC(redmutex_lock_acquire(l, "", 0), REDMUTEX_EINVAL);
    char long_owner[REDMUTEX_OWNER_MAX + 2];
    memset(long_owner, 'o', sizeof long_owner - 1);
    long_owner[sizeof long_owner - 1] = '\0';
    CHECK_RC(redmutex_lock_acquire(l, long_owner, 0), REDMUTEX_EINVAL);
    CHECK(rs_count_keys(&srv, "*") == 0); /* nothing reached the server */
    CHECK_OK(redmutex_lock_acquire(l, NULL, 0));
    CHECK_RC(redmutex_lock_extend(l, NULL, 0, REDMUTEX_EXTEND_ADD), REDMUTEX_EINVAL);
    CHECK_RC(redmutex_lock_extend(l, NULL, -10, REDMUTEX_EXTEND_ADD), REDMUTEX_EINVAL);
    CHECK_RC(redmutex_lock_extend(l, NULL, INT64_MAX, REDMUTEX_EXTEND_ADD), REDMUTEX_EINVAL);
    CHECK_RC(redmutex_lock_extend(l, NULL, 100, (redmutex_extend_mode)9), REDMUTEX_EINVAL);
    CHECK(rs_int(&srv, "PTTL args") <= 5000);
    CHECK_RC(redmutex_lock_is_locked(NULL, l), REDMUTEX_EINVAL);
    CHECK_RC(redmutex_lock_ttl(NULL, l), REDMUTEX_EINVAL);
    CHECK_RC(redmutex_lock_state(NULL, l, NULL), REDMUTEX_EINVAL);
    CHECK_RC(redmutex_lock_validity(NULL, l, NULL), REDMUTEX_EINVAL);
    int64_t fence;
    CHECK_RC(redmutex_lock_fence(&fence, l, NULL), REDMUTEX_EINVAL); /* fencing is off */
    CHECK_OK(redmutex_lock_release(l, NULL));
    redmutex_lock_free(l);
    redmutex_client_free(c);
}

static void test_use_after_client_free_reports_closed(void)
{
    rs_start(&srv, NULL);
    redmutex_client *c = rt_client(&srv, 0);
    redmutex_lock *l = NULL;
    CHECK_OK(redmutex_lock_new(&l, c, "closing", REDMUTEX_KIND_LOCK, NULL));
    CHECK_OK(redmutex_lock_acquire(l, NULL, 0));
    redmutex_client_free(c);
    /* The held lock is released by the close that free starts in the background. */
    WAIT_FOR(!rs_exists(&srv, "closing"), 5000);
    CHECK_RC(redmutex_lock_acquire(l, NULL, 0), REDMUTEX_ECLOSED);
    CHECK_RC(redmutex_lock_release(l, NULL), REDMUTEX_ECLOSED);
    int locked;
    CHECK_RC(redmutex_lock_is_locked(&locked, l), REDMUTEX_ECLOSED);
    redmutex_lock_free(l);
}

static void test_unreachable_server_fails_within_timeout(void)
{
    /* A port nobody listens on. (A server that accepts and never answers is in test_hostile.) */
    redmutex_client_options o = REDMUTEX_CLIENT_OPTIONS_INIT;
    o.connect_timeout_ms = 300;
    o.command_timeout_ms = 300;
    const char *urls[] = {"redis://127.0.0.1:1", "unix:///nonexistent/redis.sock"};
    for (int i = 0; i < 2; i++) {
        redmutex_client *c;
        CHECK_OK(redmutex_client_new(&c, &urls[i], 1, &o));
        redmutex_lock *l;
        CHECK_OK(redmutex_lock_new(&l, c, "x", REDMUTEX_KIND_LOCK, NULL));
        int64_t t0 = rt_now_ms();
        CHECK_RC(redmutex_lock_acquire(l, NULL, 0), REDMUTEX_ECONN);
        CHECK_RC(redmutex_lock_acquire(l, NULL, 5000), REDMUTEX_ECONN);
        int64_t took = rt_now_ms() - t0;
        CHECKF(took < 1500, "%s: took %lld ms", urls[i], (long long)took);
        redmutex_lock_free(l);
        t0 = rt_now_ms();
        redmutex_client_free(c);
        CHECK(rt_now_ms() - t0 < 1000);
    }
}

int main(int argc, char **argv)
{
    static const rt_test tests[] = {
        {"options_macro_and_init_function_agree", test_options_macro_and_init_function_agree},
        {"version_1_options_still_accepted", test_version_1_options_still_accepted},
        {"version_and_strerror", test_version_and_strerror},
        {"free_null_is_noop", test_free_null_is_noop},
        {"malformed_urls_rejected_without_password_leak", test_malformed_urls_rejected_without_password_leak},
        {"url_redact_masks_every_secret_and_keeps_the_rest", test_url_redact_masks_every_secret_and_keeps_the_rest},
        {"url_redact_masks_a_fragment", test_url_redact_masks_a_fragment},
        {"query_password_is_used_and_never_shown", test_query_password_is_used_and_never_shown},
        {"query_option_refusals_say_what_is_wrong", test_query_option_refusals_say_what_is_wrong},
        {"client_arguments", test_client_arguments},
        {"lock_arguments", test_lock_arguments},
        {"use_after_client_free_reports_closed", test_use_after_client_free_reports_closed},
        {"unreachable_server_fails_within_timeout", test_unreachable_server_fails_within_timeout},
    };
    return rt_run(tests, sizeof tests / sizeof tests[0], argc, argv);
}
