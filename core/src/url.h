/*
 * Server URLs (url.c): parsed endpoints.
 */
#ifndef REDMUTEX_URL_H
#define REDMUTEX_URL_H

#include "internal.h"

/* ---- URLs and servers (url.c) ---------------------------------------- */

/* What a URL says its deployment is (?topology=): found out, or fixed; a
   redis+sentinel:// URL (sentinel_url.c) names a Sentinel deployment. */
enum rm_topology { RM_TOPOLOGY_AUTO, RM_TOPOLOGY_STANDALONE, RM_TOPOLOGY_CLUSTER, RM_TOPOLOGY_SENTINEL };

/* Most hosts one URL may list (seeds of one deployment). */
#define RM_SEEDS_MAX 16

typedef struct rm_endpoint {
    bool is_unix;
    char *host; /* TCP host (no brackets): the first seed */
    int port;
    /* redis://h1:p1,h2:p2/...: every host given, in order (seed 0 is
       host/port above); n_seeds is 1 for a single host or a Unix socket. */
    int n_seeds;
    char *seed_host[RM_SEEDS_MAX];
    int seed_port[RM_SEEDS_MAX];
    int topology;   /* enum rm_topology, ?topology= (default auto) */
    char *path;     /* Unix socket path */
    char *user;     /* NULL when absent */
    char *password; /* NULL when absent */
    int db;
    char *display; /* the URL in canonical form, redacted (rm_url_redact), for messages */
    /* rediss:// only: the URL's query options (NULL / -1 when absent, so
       client options can supply the default). */
    bool tls;
    char *tls_ca_file;      /* ssl_ca_certs */
    char *tls_cert_file;    /* ssl_certfile */
    char *tls_key_file;     /* ssl_keyfile */
    char *tls_server_name;  /* ssl_server_hostname */
    int tls_verify;         /* ssl_cert_reqs: 1 required, 0 none, -1 absent */
    int tls_check_hostname; /* ssl_check_hostname: 1, 0, -1 absent */
    /* redis+sentinel:// (topology RM_TOPOLOGY_SENTINEL): the seeds are the
       sentinels, `service` the name they know the master by, and the
       sentinels' own credentials (?sentinel_username=&sentinel_password=;
       NULL when absent). user, password and db are the data nodes'. */
    char *service;
    char *sentinel_user;
    char *sentinel_password;
} rm_endpoint;

/**
 * Writes url into out[size] (NUL-terminated, truncated to fit) with every
 * secret masked as "***": the password of its user part, and the value of
 * every query option that is not known to be harmless; whether or not url
 * parses. Returns the length of the whole redacted text (as snprintf does).
 * Every message that shows a URL shows it through this function.
 */
size_t rm_url_redact(char *out, size_t size, const char *url);

/** Parses url into ep (zeroed first). REDMUTEX_EINVAL with a message on bad input. */
int rm_endpoint_parse(rm_err *err, rm_endpoint *ep, const char *url);
/** Whether url starts with redis+sentinel:// or rediss+sentinel:// (sentinel_url.c). */
bool rm_url_is_sentinel(const char *url);
/**
 * Parses a redis+sentinel:// or rediss+sentinel:// URL into ep (zeroed
 * first; sentinel_url.c): [user[:password]@]s1[:port],s2.../SERVICE[/DB]
 * [?sentinel_username=..&sentinel_password=..&ssl_...]. The sentinels' port
 * is 26379 by default. REDMUTEX_EINVAL with a message on bad input.
 */
int rm_sentinel_url_parse(rm_err *err, rm_endpoint *ep, const char *url);
void rm_endpoint_clear(rm_endpoint *ep);
/**
 * A node of the same deployment at host:port (found in a cluster's
 * topology): ep's credentials, database and TLS settings with another
 * address, into out (zeroed first). 0 or REDMUTEX_ENOMEM.
 */
int rm_endpoint_derive(rm_err *err, rm_endpoint *out, const rm_endpoint *ep, const char *host, int port);

#endif
