/*
 * TLS for rediss:// servers (tls.c), used by conn.c only.
 */
#ifndef REDMUTEX_TLS_H
#define REDMUTEX_TLS_H

#include "conn.h"

/* ---- TLS (tls.c) ---------------------------------------------------- */

struct rm_tls;
/** For a rediss:// server: loads its TLS settings (URL options over client options). 0 or an error code. */
int rm_tls_server_init(rm_err *err, rm_server *srv, const redmutex_client_options *opts);
void rm_tls_server_clear(rm_server *srv);
/** Whether client options ask for TLS settings (so a plain URL with them is refused). */
bool rm_tls_options_given(const redmutex_client_options *opts);
/** Starts TLS on a connected socket (makes the SSL object). 0 or an error code. */
int rm_tls_start(rm_err *err, rm_conn *c);
/** One handshake step: 0 done, 1 not ready (c->tls_want set), or an error code. */
int rm_tls_handshake(rm_err *err, rm_conn *c);
ssize_t rm_tls_send(rm_err *err, rm_conn *c, const void *data, size_t len);
ssize_t rm_tls_recv(rm_err *err, rm_conn *c, void *buf, size_t len);
/** Whether bytes read from the socket wait inside the TLS layer (poll() would not show them). */
bool rm_tls_pending(const rm_conn *c);
void rm_tls_free(rm_conn *c);

#endif
