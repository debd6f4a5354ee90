/*
 * Per-server connection pools and per-server order (client.c), and the
 * run_id bookkeeping of each server.
 *
 * Layering: above conn, below the fan-out and the subscriber.
 */
#ifndef REDMUTEX_POOL_H
#define REDMUTEX_POOL_H

#include "client.h"
#include "conn.h"

/** rm_pool_take: the connection that must carry the request is lent to another call. */
#define RM_CONN_BUSY 1
/**
 * Takes a connection to srv (deployment i itself, or one of its cluster
 * nodes) for a request ordered by `order_key` (0: no order): the connection that still owes replies for that key if there is
 * one, else a pooled or new one. RM_CONN_BUSY when that owing connection is
 * lent to another call right now (try again shortly: nothing was sent).
 * Caller holds no mutex.
 */
int rm_pool_take(rm_err *err, redmutex_client *c, rm_server *srv, uint64_t order_key, rm_conn **out);
/**
 * Returns a connection to the pool, or to the owing list when it still owes
 * replies (then order_key, the key of the request it owes for, is recorded).
 * Broken connections and those of another process are closed.
 */
void rm_pool_give(redmutex_client *c, rm_conn *conn, bool healthy, uint64_t order_key);
/**
 * Called the moment a call stops waiting for a connection's reply to a
 * request for order_key: from then on the connection is listed as owing for
 * it (and lent to the call), so that no later request for that name, from
 * any thread, takes another connection to the server. -1 if it could not be
 * recorded (no memory): then the connection must be closed.
 */
int rm_pool_mark_owing(redmutex_client *c, rm_conn *conn, uint64_t order_key);
/**
 * Queues `len` bytes holding `count` commands (a release that could not be
 * sent by its deadline because the connection it must follow was lent to
 * another call) behind every connection to srv that owes replies for
 * order_key. Each is sent as soon as its connection is free: at once if it
 * is, else when the call that has it gives it back. 0 when queued, 1 when no
 * connection owes for order_key (the request may take a connection itself),
 * REDMUTEX_ENOMEM. Never blocks beyond one non-blocking send.
 */
int rm_pool_defer(redmutex_client *c, rm_server *srv, uint64_t order_key, const void *bytes, size_t len, size_t count);
/** Called with the run_id a fresh connection reported; detects restarts and duplicates. */
int rm_server_note_run_id(rm_err *err, redmutex_client *c, rm_server *srv, const char *run_id);
/** In a forked child: closes the parent's pooled and owing connections (our copies of them). */
void rm_pool_after_fork(redmutex_client *c);
/** Closes a server's connections and frees its lists (client teardown). */
void rm_pool_clear(rm_server *srv);

#endif
