/*
 * TLS for rediss:// servers, with OpenSSL, inside the core's own
 * non-blocking transport: the handshake is one more step of connecting,
 * driven by the same poll() loop that waits for every server (fanout.c,
 * subscriber.c), so it is bounded by connect_timeout_ms like the rest.
 *
 * Verification is on unless the URL or the client options turn it off:
 * the chain against the CA file (or the system trust store) and the host
 * name (or IP address) against the certificate. Errors name the cause in
 * words a user can act on, never a password (messages show the masked URL).
 *
 * The socket is wrapped in a BIO of our own that sends with MSG_NOSIGNAL:
 * OpenSSL's socket BIO writes with write(2), which would raise SIGPIPE in
 * the host when a server closes the connection.
 */
#define _GNU_SOURCE
#include "conn.h"
#include "internal.h"
#include "tls.h"
#include "url.h"

#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>

/* The settings of one rediss:// server, shared by all its connections. */
struct rm_tls {
    SSL_CTX *ctx;
    char *name; /* SNI and the name (or IP address) to verify */
    bool name_is_ip;
    bool verify;         /* verify the chain */
    bool check_hostname; /* and the name */
};

/* ---- a socket BIO that never raises SIGPIPE -------------------------- */

static BIO_METHOD *bio_method;
static pthread_once_t bio_once = PTHREAD_ONCE_INIT;

static int bio_fd(BIO *b) { return (int)(intptr_t)BIO_get_data(b); }

static int bio_write(BIO *b, const char *data, int len)
{
    BIO_clear_retry_flags(b);
    ssize_t n;
    do
        n = send(bio_fd(b), data, (size_t)len, MSG_NOSIGNAL | MSG_DONTWAIT);
    while (n < 0 && errno == EINTR);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
        BIO_set_retry_write(b);
    return (int)n;
}

static int bio_read(BIO *b, char *data, int len)
{
    BIO_clear_retry_flags(b);
    ssize_t n;
    do
        n = recv(bio_fd(b), data, (size_t)len, MSG_DONTWAIT);
    while (n < 0 && errno == EINTR);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
        BIO_set_retry_read(b);
    return (int)n;
}

static long bio_ctrl(BIO *b, int cmd, long num, void *ptr)
{
    (void)b;
    (void)num;
    (void)ptr;
    return cmd == BIO_CTRL_FLUSH ? 1 : 0; /* nothing is buffered here */
}

static int bio_create(BIO *b)
{
    BIO_set_init(b, 1);
    return 1;
}

static void make_bio_method(void)
{
    BIO_METHOD *m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "redmutex socket");
    if (m && BIO_meth_set_write(m, bio_write) && BIO_meth_set_read(m, bio_read) && BIO_meth_set_ctrl(m, bio_ctrl) &&
        BIO_meth_set_create(m, bio_create))
        bio_method = m;
    else
        BIO_meth_free(m);
}

/* ---- per-server settings ------------------------------------------------ */

bool rm_tls_options_given(const redmutex_client_options *o)
{
    return o->tls_context || o->tls_ca_file || o->tls_cert_file || o->tls_key_file || o->tls_server_name ||
           (o->flags & (REDMUTEX_CLIENT_TLS_NO_VERIFY | REDMUTEX_CLIENT_TLS_NO_HOSTNAME_CHECK));
}

/* The last OpenSSL error's reason. */
static const char *openssl_reason(void)
{
    unsigned long e = ERR_peek_last_error();
    const char *r = e ? ERR_reason_error_string(e) : NULL;
    return r ? r : "unknown error";
}

/* Whether the open file f holds a PEM block anywhere in its first 64 KiB. */
static bool has_pem(FILE *f)
{
    static const char begin[] = "-----BEGIN ";
    enum { MARK = sizeof begin - 1 };
    char buf[4096];
    size_t kept = 0; /* the end of the last read: a marker may straddle two */
    for (int i = 0; i < 16; i++) {
        size_t n = fread(buf + kept, 1, sizeof buf - kept, f);
        if (n == 0)
            return false;
        size_t len = kept + n;
        if (memmem(buf, len, begin, MARK))
            return true;
        kept = len < MARK - 1 ? len : MARK - 1;
        memmove(buf, buf + len - kept, kept);
    }
    return false;
}

/*
 * Why OpenSSL could not load the file at path, for a message: what the
 * system says when it cannot be read at all (OpenSSL 3 calls that "system
 * lib"), that it is a directory, that it holds no PEM data at all (OpenSSL:
 * "PEM lib", "no start line"), or else OpenSSL's reason about its content
 * ("no certificate or crl found": PEM, but not of that kind).
 */
static const char *file_problem(const char *path, char *buf, size_t size)
{
    FILE *f = fopen(path, "r");
    struct stat st;
    if (!f)
        snprintf(buf, size, "%s", strerror(errno));
    else if (fstat(fileno(f), &st) == 0 && S_ISDIR(st.st_mode))
        snprintf(buf, size, "it is a directory, not a PEM file");
    else if (!has_pem(f))
        snprintf(buf, size, "it holds no PEM data (no '-----BEGIN' line)");
    else
        snprintf(buf, size, "%s", openssl_reason());
    if (f)
        fclose(f);
    return buf;
}

static int load_files(rm_err *err, struct rm_tls *t, const rm_endpoint *ep, const char *ca, const char *cert,
                      const char *key)
{
    char why[200];
    ERR_clear_error();
    if (ca ? SSL_CTX_load_verify_locations(t->ctx, ca, NULL) != 1 : SSL_CTX_set_default_verify_paths(t->ctx) != 1)
        return rm_fail(err, REDMUTEX_EINVAL, "%s: cannot load the CA certificates %s%s%s: %s", ep->display,
                       ca ? "from ssl_ca_certs '" : "of the system", ca ? ca : "", ca ? "'" : "",
                       ca ? file_problem(ca, why, sizeof why) : openssl_reason());
    if (key && !cert)
        return rm_fail(err, REDMUTEX_EINVAL, "%s: ssl_keyfile needs ssl_certfile (the client certificate)",
                       ep->display);
    if (!cert)
        return 0;
    if (SSL_CTX_use_certificate_chain_file(t->ctx, cert) != 1)
        return rm_fail(err, REDMUTEX_EINVAL, "%s: cannot load the client certificate ssl_certfile '%s': %s",
                       ep->display, cert, file_problem(cert, why, sizeof why));
    if (SSL_CTX_use_PrivateKey_file(t->ctx, key ? key : cert, SSL_FILETYPE_PEM) != 1 &&
        ERR_GET_REASON(ERR_peek_last_error()) != X509_R_KEY_VALUES_MISMATCH)
        return rm_fail(err, REDMUTEX_EINVAL, "%s: cannot load the private key %s '%s': %s", ep->display,
                       key ? "ssl_keyfile" : "from ssl_certfile", key ? key : cert,
                       file_problem(key ? key : cert, why, sizeof why));
    if (SSL_CTX_check_private_key(t->ctx) != 1)
        return rm_fail(err, REDMUTEX_EINVAL, "%s: the private key '%s' does not belong to the certificate '%s'",
                       ep->display, key ? key : cert, cert);
    return 0;
}

static int make_context(rm_err *err, struct rm_tls *t, const rm_endpoint *ep, const redmutex_client_options *o)
{
    const char *ca = ep->tls_ca_file ? ep->tls_ca_file : o->tls_ca_file;
    const char *cert = ep->tls_cert_file ? ep->tls_cert_file : o->tls_cert_file;
    const char *key = ep->tls_key_file ? ep->tls_key_file : o->tls_key_file;
    if (o->tls_context) {
        if (ca || cert || key)
            return rm_fail(err, REDMUTEX_EINVAL,
                           "%s: a TLS context (tls_context) comes with its own CA and certificates; it "
                           "cannot be combined with ssl_ca_certs, ssl_certfile or ssl_keyfile",
                           ep->display);
        t->ctx = o->tls_context;
        SSL_CTX_up_ref(t->ctx);
        return 0;
    }
    t->ctx = SSL_CTX_new(TLS_client_method());
    if (!t->ctx)
        return rm_fail(err, REDMUTEX_ENOMEM, "%s: cannot make a TLS context: %s", ep->display, openssl_reason());
    SSL_CTX_set_min_proto_version(t->ctx, TLS1_2_VERSION);
    SSL_CTX_set_options(t->ctx, SSL_OP_NO_RENEGOTIATION);
    return load_files(err, t, ep, ca, cert, key);
}

int rm_tls_server_init(rm_err *err, rm_server *srv, const redmutex_client_options *o)
{
    const rm_endpoint *ep = &srv->ep;
    if (!ep->tls)
        return 0;
    pthread_once(&bio_once, make_bio_method);
    if (!bio_method)
        return rm_fail(err, REDMUTEX_ENOMEM, "cannot set up TLS: out of memory");
    struct rm_tls *t = calloc(1, sizeof *t);
    if (!t)
        return rm_fail(err, REDMUTEX_ENOMEM, "out of memory");
    srv->tls = t;
    t->verify = ep->tls_verify >= 0 ? ep->tls_verify == 1 : !(o->flags & REDMUTEX_CLIENT_TLS_NO_VERIFY);
    t->check_hostname =
        t->verify && (ep->tls_check_hostname >= 0 ? ep->tls_check_hostname == 1
                                                  : !(o->flags & REDMUTEX_CLIENT_TLS_NO_HOSTNAME_CHECK));
    const char *name = ep->tls_server_name ? ep->tls_server_name : o->tls_server_name ? o->tls_server_name : ep->host;
    t->name = strdup(name);
    if (!t->name)
        return rm_fail(err, REDMUTEX_ENOMEM, "out of memory");
    unsigned char addr[16];
    t->name_is_ip = inet_pton(AF_INET, name, addr) == 1 || inet_pton(AF_INET6, name, addr) == 1;
    return make_context(err, t, ep, o);
}

void rm_tls_server_clear(rm_server *srv)
{
    struct rm_tls *t = srv->tls;
    if (!t)
        return;
    SSL_CTX_free(t->ctx);
    free(t->name);
    free(t);
    srv->tls = NULL;
}

/* ---- connections -------------------------------------------------------- */

int rm_tls_start(rm_err *err, rm_conn *c)
{
    struct rm_tls *t = c->srv->tls;
    const char *who = c->srv->ep.display;
    ERR_clear_error();
    SSL *ssl = SSL_new(t->ctx);
    BIO *bio = ssl ? BIO_new(bio_method) : NULL;
    if (!bio) {
        SSL_free(ssl);
        return rm_fail(err, REDMUTEX_ENOMEM, "%s: cannot start TLS: %s", who, openssl_reason());
    }
    BIO_set_data(bio, (void *)(intptr_t)c->fd);
    SSL_set_bio(ssl, bio, bio);
    c->tls = ssl;
    SSL_set_connect_state(ssl);
    SSL_set_mode(ssl, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    /* One recv() per read instead of one for the record header and one for
       its body; what it reads beyond a record waits inside OpenSSL
       (SSL_has_pending), which rm_tls_recv drains before returning. */
    SSL_set_read_ahead(ssl, 1);
    /* SNI carries host names only (RFC 6066), never an address. */
    if (!t->name_is_ip && SSL_set_tlsext_host_name(ssl, t->name) != 1)
        return rm_fail(err, REDMUTEX_EINVAL, "%s: '%s' cannot be sent as the TLS server name", who, t->name);
    /* Set here, whatever a caller's context says, so verification is never off by accident. */
    SSL_set_verify(ssl, t->verify ? SSL_VERIFY_PEER : SSL_VERIFY_NONE, NULL);
    if (t->check_hostname) {
        X509_VERIFY_PARAM *param = SSL_get0_param(ssl);
        X509_VERIFY_PARAM_set_hostflags(param, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
        int ok = t->name_is_ip ? X509_VERIFY_PARAM_set1_ip_asc(param, t->name)
                               : X509_VERIFY_PARAM_set1_host(param, t->name, 0);
        if (ok != 1)
            return rm_fail(err, REDMUTEX_EINVAL, "%s: cannot verify the name '%s'", who, t->name);
    }
    return 0;
}

void rm_tls_free(rm_conn *c)
{
    /* No close_notify: in a forked child the stream belongs to the parent,
       and a request/response protocol with explicit lengths does not need it. */
    SSL_free(c->tls);
    c->tls = NULL;
}

bool rm_tls_pending(const rm_conn *c) { return c->tls && SSL_has_pending(c->tls); }

/* Why the server's certificate was refused, in the words users search for. */
static const char *verify_hint(long v)
{
    switch (v) {
    case X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT:
    case X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY:
    case X509_V_ERR_UNABLE_TO_VERIFY_LEAF_SIGNATURE:
    case X509_V_ERR_DEPTH_ZERO_SELF_SIGNED_CERT:
    case X509_V_ERR_SELF_SIGNED_CERT_IN_CHAIN:
    case X509_V_ERR_CERT_UNTRUSTED:
        return "unknown CA: the certificate is not signed by a CA this client trusts (ssl_ca_certs)";
    case X509_V_ERR_HOSTNAME_MISMATCH:
    case X509_V_ERR_IP_ADDRESS_MISMATCH:
        return "name mismatch: the certificate is not issued for the name checked (the URL's host or "
               "ssl_server_hostname)";
    case X509_V_ERR_CERT_HAS_EXPIRED:
        return "expired: the server's certificate is past its end date (or this machine's clock is wrong)";
    case X509_V_ERR_CERT_NOT_YET_VALID:
        return "not yet valid: the server's certificate starts later (or this machine's clock is wrong)";
    default:
        return "the server's certificate was refused";
    }
}

/* Hints for errors OpenSSL reports by reason code. */
static const char *reason_hint(int lib, int reason)
{
    if (lib != ERR_LIB_SSL)
        return NULL;
    switch (reason) {
    case SSL_R_WRONG_VERSION_NUMBER:
    case SSL_R_PACKET_LENGTH_TOO_LONG:
    case SSL_R_UNKNOWN_PROTOCOL:
    case SSL_R_RECORD_LENGTH_MISMATCH:
        return "the server did not answer in TLS: is it a plain-text port? (use a redis:// URL)";
#ifdef SSL_R_TLSV13_ALERT_CERTIFICATE_REQUIRED
    case SSL_R_TLSV13_ALERT_CERTIFICATE_REQUIRED:
#endif
    case SSL_R_SSLV3_ALERT_HANDSHAKE_FAILURE:
        return "the server requires a client certificate this client did not give (ssl_certfile, "
               "ssl_keyfile)";
    case SSL_R_TLSV1_ALERT_UNKNOWN_CA:
    case SSL_R_SSLV3_ALERT_BAD_CERTIFICATE:
    case SSL_R_SSLV3_ALERT_CERTIFICATE_UNKNOWN:
    case SSL_R_SSLV3_ALERT_CERTIFICATE_EXPIRED:
    case SSL_R_SSLV3_ALERT_CERTIFICATE_REVOKED:
    case SSL_R_TLSV1_ALERT_ACCESS_DENIED:
        return "the server refused this client's certificate (ssl_certfile)";
#ifdef SSL_R_UNEXPECTED_EOF_WHILE_READING
    case SSL_R_UNEXPECTED_EOF_WHILE_READING:
        return "the server closed the connection";
#endif
    default:
        return NULL;
    }
}

/* Sets the message for a failed SSL call (ret, its SSL_get_error and errno) and returns REDMUTEX_ECONN. */
static int tls_fail(rm_err *err, rm_conn *c, int ssl_error, int saved_errno, const char *during)
{
    const char *who = c->srv->ep.display;
    unsigned long e = ERR_peek_error();
    int lib = e ? ERR_GET_LIB(e) : 0, reason = e ? ERR_GET_REASON(e) : 0;
    ERR_clear_error();
    if (lib == ERR_LIB_SSL && reason == SSL_R_CERTIFICATE_VERIFY_FAILED) {
        long v = SSL_get_verify_result(c->tls);
        return rm_fail(err, REDMUTEX_ECONN, "%s: TLS %s failed: certificate verification failed: %s (%s)", who, during,
                       verify_hint(v), X509_verify_cert_error_string(v));
    }
    const char *hint = reason_hint(lib, reason);
    if (hint)
        return rm_fail(err, REDMUTEX_ECONN, "%s: TLS %s failed: %s (%s)", who, during, hint,
                       ERR_reason_error_string(e));
    if (ssl_error == SSL_ERROR_ZERO_RETURN || (ssl_error == SSL_ERROR_SYSCALL && saved_errno == 0 && !e))
        return rm_fail(err, REDMUTEX_ECONN, "%s closed the connection%s", who,
                       c->tls_handshaking ? " during the TLS handshake (is it a TLS port?)" : "");
    if (ssl_error == SSL_ERROR_SYSCALL && saved_errno != 0)
        return rm_fail(err, REDMUTEX_ECONN, "%s: TLS %s: %s", who, during, strerror(saved_errno));
    const char *r = e ? ERR_reason_error_string(e) : NULL;
    return rm_fail(err, REDMUTEX_ECONN, "%s: TLS %s failed: %s", who, during, r ? r : "unknown error");
}

int rm_tls_handshake(rm_err *err, rm_conn *c)
{
    ERR_clear_error();
    errno = 0;
    int r = SSL_do_handshake(c->tls);
    if (r == 1)
        return 0;
    int saved_errno = errno;
    int e = SSL_get_error(c->tls, r);
    if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
        c->tls_want = e == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT;
        return 1;
    }
    return tls_fail(err, c, e, saved_errno, "handshake");
}

ssize_t rm_tls_send(rm_err *err, rm_conn *c, const void *data, size_t len)
{
    ERR_clear_error();
    errno = 0;
    int n = SSL_write(c->tls, data, len > INT_MAX ? INT_MAX : (int)len);
    c->write_wants_read = false;
    if (n > 0)
        return n;
    int saved_errno = errno;
    int e = SSL_get_error(c->tls, n);
    if (e == SSL_ERROR_WANT_WRITE)
        return 0;
    if (e == SSL_ERROR_WANT_READ) {
        c->write_wants_read = true;
        return 0;
    }
    /* A server that refuses the client (its certificate, say) sends an
       alert and closes; the write that follows fails with a reset. The
       alert, still in the receive queue, says why: report that instead. */
    ERR_clear_error();
    char byte;
    int r = SSL_read(c->tls, &byte, 1);
    if (r <= 0 && SSL_get_error(c->tls, r) == SSL_ERROR_SSL) {
        unsigned long why = ERR_peek_error();
        if (reason_hint(ERR_GET_LIB(why), ERR_GET_REASON(why)))
            return tls_fail(err, c, SSL_ERROR_SSL, 0, "write");
    }
    ERR_clear_error();
    return tls_fail(err, c, e, saved_errno, "write");
}

ssize_t rm_tls_recv(rm_err *err, rm_conn *c, void *buf, size_t len)
{
    /* Read until the buffer is full or nothing decrypted is left inside
       OpenSSL: the callers poll the socket before reading again, and the
       socket does not show bytes OpenSSL already took from it. */
    size_t got = 0;
    c->read_wants_write = false;
    while (got < len) {
        size_t want = len - got;
        ERR_clear_error();
        errno = 0;
        int n = SSL_read(c->tls, (char *)buf + got, want > INT_MAX ? INT_MAX : (int)want);
        if (n > 0) {
            got += (size_t)n;
            c->received = true;
            if (!SSL_has_pending(c->tls))
                break;
            continue;
        }
        int saved_errno = errno;
        int e = SSL_get_error(c->tls, n);
        if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
            c->read_wants_write = e == SSL_ERROR_WANT_WRITE;
            break;
        }
        if (got > 0)
            break; /* the error shows again on the next call */
        return tls_fail(err, c, e, saved_errno, "read");
    }
    return (ssize_t)got;
}
