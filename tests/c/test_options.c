/*
 * Options structs that can grow: a struct of any version from 1 to the
 * current one is accepted, and only the bytes that version has are read or
 * written. The structs are allocated at exactly their version's size, so
 * AddressSanitizer reports any access past them.
 */
#define _GNU_SOURCE
#include "harness.h"
#include "options.h" /* RM_OPTIONS_END and the generic loader, tested with a made-up two-version struct */

#include <stddef.h>
#include <string.h>

static rs_server srv;

/* ---- the mechanism, with a struct that has two versions ------------------ */

typedef struct fake_options {
    uint32_t version;
    uint32_t flags;
    int64_t timeout_ms;
    int64_t added_in_v2; /* a field appended in version 2 */
} fake_options;

/* The same struct as a caller built against version 1 of the header sees it. */
typedef struct fake_options_v1 {
    uint32_t version;
    uint32_t flags;
    int64_t timeout_ms;
} fake_options_v1;

static const fake_options fake_defaults = {2, 0, 1000, 77};
static const size_t fake_sizes[] = {0, RM_OPTIONS_END(fake_options, timeout_ms), sizeof(fake_options)};
static const rm_options_layout fake_layout = {"fake options", "fake_options_init", &fake_defaults, fake_sizes, 3};

static void test_a_v1_struct_is_read_only_as_far_as_v1_reaches(void)
{
    rm_err e = {0};
    _Static_assert(sizeof(fake_options_v1) == RM_OPTIONS_END(fake_options, timeout_ms), "v1 layout");
    fake_options_v1 *p = malloc(sizeof *p); /* a caller built against the v1 header */
    void *v1 = p;
    CHECK_OK(rm_options_init(&e, v1, 1, &fake_layout));
    CHECK(p->version == 1 && p->timeout_ms == 1000);
    p->flags = 3;
    p->timeout_ms = 250;
    fake_options out;
    memset(&out, 0xEE, sizeof out);
    CHECK_OK(rm_options_load(&e, &out, v1, &fake_layout, "fake_new"));
    CHECK(out.version == 2 && out.flags == 3 && out.timeout_ms == 250);
    CHECK(out.added_in_v2 == 77); /* the default, not bytes past the caller's struct */
    free(v1);
}

static void test_a_current_struct_is_read_whole(void)
{
    rm_err e = {0};
    fake_options in, out;
    CHECK_OK(rm_options_init(&e, &in, 2, &fake_layout));
    in.added_in_v2 = 5;
    CHECK_OK(rm_options_load(&e, &out, &in, &fake_layout, "fake_new"));
    CHECK(out.added_in_v2 == 5 && out.timeout_ms == 1000);
    CHECK_OK(rm_options_load(&e, &out, NULL, &fake_layout, "fake_new"));
    CHECK(memcmp(&out, &fake_defaults, sizeof out) == 0);
}

static void test_unknown_versions_are_refused(void)
{
    rm_err e = {0};
    fake_options in = fake_defaults, out;
    for (uint32_t v = 0; v < 6; v += 3) {
        in.version = v;
        CHECK_RC(rm_options_load(&e, &out, &in, &fake_layout, "fake_new"), REDMUTEX_EINVAL);
        CHECKF(e.code == REDMUTEX_EINVAL && strstr(e.msg, "versions 1 to 2"), "message: %s", e.msg);
        CHECK_RC(rm_options_init(&e, &out, v, &fake_layout), REDMUTEX_EINVAL);
    }
}

/* ---- the public structs ---------------------------------------------------- */

/* Version 1 of the public options structs, as a program built against the
   1.0 header has them: later versions only append fields. */
typedef struct client_options_v1 {
    uint32_t version;
    uint32_t flags;
    int64_t connect_timeout_ms, command_timeout_ms, watchdog_lease_ms, wait_backoff_cap_ms, retry_delay_ms, retry_count,
        min_replicas, replica_timeout_ms, shutdown_timeout_ms;
    redmutex_interrupt_fn interrupt;
    void *interrupt_payload;
} client_options_v1;
_Static_assert(sizeof(client_options_v1) == RM_OPTIONS_END(redmutex_client_options, interrupt_payload),
               "client options v1 layout");
_Static_assert(offsetof(client_options_v1, shutdown_timeout_ms) ==
                   offsetof(redmutex_client_options, shutdown_timeout_ms),
               "client options v1 layout");

typedef struct lock_options_v1 {
    uint32_t version;
    uint32_t flags;
    int64_t lease_ms, max_hold_ms, max_extensions;
    redmutex_lost_fn on_lost;
    void *on_lost_payload;
} lock_options_v1;
_Static_assert(sizeof(lock_options_v1) == RM_OPTIONS_END(redmutex_lock_options, on_lost_payload),
               "lock options v1 layout");

static void test_v1_sized_client_and_lock_options_work(void)
{
    rs_start(&srv, NULL);
    /* Heap objects of exactly the v1 size: AddressSanitizer sees any byte read past them. */
    client_options_v1 *co = malloc(sizeof *co);
    lock_options_v1 *lo = malloc(sizeof *lo);
    CHECK_OK(redmutex_client_options_init((redmutex_client_options *)(void *)co, 1));
    CHECK_OK(redmutex_lock_options_init((redmutex_lock_options *)(void *)lo, 1));
    CHECK(co->version == 1 && lo->version == 1 && co->command_timeout_ms == 1000 && lo->lease_ms == 0);
    co->command_timeout_ms = 700;
    lo->lease_ms = 5000;
    const char *url = srv.url;
    redmutex_client *c;
    CHECK_OK(redmutex_client_new(&c, &url, 1, (const redmutex_client_options *)(void *)co));
    redmutex_lock *l;
    CHECK_OK(redmutex_lock_new(&l, c, "v1", REDMUTEX_KIND_LOCK, (const redmutex_lock_options *)(void *)lo));
    CHECK_OK(redmutex_lock_acquire(l, NULL, 0));
    long long pttl = rs_int(&srv, "PTTL v1");
    CHECKF(pttl > 4000 && pttl <= 5000, "PTTL %lld: the v1 lease was not used", pttl);
    CHECK_OK(redmutex_lock_release(l, NULL));
    redmutex_lock_free(l);
    redmutex_client_close(c); /* free alone closes in the background, past the end of the test */
    redmutex_client_free(c);
    free(co);
    free(lo);
}

static void test_newer_versions_than_the_library_are_refused(void)
{
    redmutex_client_options co = REDMUTEX_CLIENT_OPTIONS_INIT;
    redmutex_lock_options lo = REDMUTEX_LOCK_OPTIONS_INIT;
    const char *url = "redis://127.0.0.1:1";
    redmutex_client *c = NULL;
    co.version = REDMUTEX_CLIENT_OPTIONS_VERSION + 1;
    CHECK_RC(redmutex_client_new(&c, &url, 1, &co), REDMUTEX_EINVAL);
    CHECK(strstr(redmutex_last_error(), "client options version"));
    co.version = 0;
    CHECK_RC(redmutex_client_new(&c, &url, 1, &co), REDMUTEX_EINVAL);
    CHECK(c == NULL);
    CHECK_OK(redmutex_client_new(&c, &url, 1, NULL));
    redmutex_lock *l = NULL;
    lo.version = REDMUTEX_LOCK_OPTIONS_VERSION + 1;
    CHECK_RC(redmutex_lock_new(&l, c, "x", REDMUTEX_KIND_LOCK, &lo), REDMUTEX_EINVAL);
    CHECK(strstr(redmutex_last_error(), "lock options version"));
    CHECK_RC(redmutex_lock_options_init(&lo, REDMUTEX_LOCK_OPTIONS_VERSION + 1), REDMUTEX_EINVAL);
    CHECK(l == NULL);
    redmutex_client_close(c); /* free alone closes in the background, past the end of the test */
    redmutex_client_free(c);
}

int main(int argc, char **argv)
{
    static const rt_test tests[] = {
        {"a_v1_struct_is_read_only_as_far_as_v1_reaches", test_a_v1_struct_is_read_only_as_far_as_v1_reaches},
        {"a_current_struct_is_read_whole", test_a_current_struct_is_read_whole},
        {"unknown_versions_are_refused", test_unknown_versions_are_refused},
        {"v1_sized_client_and_lock_options_work", test_v1_sized_client_and_lock_options_work},
        {"newer_versions_than_the_library_are_refused", test_newer_versions_than_the_library_are_refused},
    };
    return rt_run(tests, sizeof tests / sizeof tests[0], argc, argv);
}
