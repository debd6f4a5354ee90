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
 * nodes) for a request ordered by `order_key` (0: no order): the connection
 * that still owes replies for that key if there is one, else a pooled or
 * new one. RM_CONN_BUSY when that owing connection is lent to another call
 * right now (try again shortly: nothing was sent); then *busy_since (may be
 * NULL) is the last progress (conn->progress_ns) of the connection(s) it
 * waits for. Caller holds no mutex.
 */
int rm_pool_take(rm_err *err, redmutex_client *c, rm_server *srv, uint64_t order_key, rm_conn **out,
                 int64_t *busy_since);
/**
 * Takes the connection to srv for a further request of the same call:
 * *conn, the one the slot used for the last request (NULL: none yet, as
 * rm_pool_take), is kept while it still owes for order_key (this call's own
 * unanswered request), or while no other connection owes for it; else it is
 * given back and the one that owes is taken (as rm_pool_take: RM_CONN_BUSY,
 * *conn NULL, while it is lent). One to another node (a cluster's slot
 * moved) is given back too. Caller holds no mutex.
 */
int rm_pool_retake(rm_err *err, redmutex_client *c, rm_server *srv, uint64_t order_key, rm_conn **conn,
                   int64_t *busy_since);
/**
 * Called when a call has read every reply its connection owed: it orders
 * nothing any more, so it leaves the owing list (it stays with the call)
 * and the next request for its lock names, from any thread, may take any
 * connection instead of waiting for this call to end. One with a release
 * queued behind it meanwhile (rm_pool_defer) stays listed.
 */
void rm_pool_paid(redmutex_client *c, rm_conn *conn);
/**
 * Moves the commands queued behind conn (rm_pool_defer, rm_pool_queue_later)
 * to the end of out, for the request its call sends now; their count, or
 * (size_t)-1 when out of memory.
 */
size_t rm_pool_take_later(redmutex_client *c, rm_conn *conn, rm_buf *out);
/** rm_conn_queue_later under the client mutex (a deferred release may be queued on conn meanwhile). */
bool rm_pool_queue_later(redmutex_client *c, rm_conn *conn, int argc, const char *const *argv);
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
 * another call) behind the connection to srv that owes replies for
 * order_key. When several do (two calls' requests were left unanswered
 * together), it goes behind those that also owe for owner_key (the same
 * owner's earlier requests: a copy behind another one could run before
 * them, and its latch would turn away the copy that runs after them), or
 * behind each of them when none does. Each is sent as soon as its
 * connection is free: at once if it is, else when the call that has it
 * gives it back. 0 when queued, 1 when no connection owes for order_key (the
 * request may take a connection itself), REDMUTEX_ENOMEM. Never blocks
 * beyond one non-blocking send.
 */
int rm_pool_defer(redmutex_client *c, rm_server *srv, uint64_t order_key, uint64_t owner_key, const void *bytes,
                  size_t len, size_t count);
/**
 * Whether srv stalls: a request to it (or a connection's handshake) has
 * waited a command timeout for its answer and the server answered nothing
 * on any connection meanwhile (a long script, a fork, swapping, a hang;
 * conn.h, progress_ns), also when it never answered this client but other
 * servers of the client did: one met stalling from the start, that takes
 * connections and answers nothing while the others answer, stalls too (one
 * that never answered, alone, is unreachable). From then until it answers
 * again it counts as stalling, whatever the connection. It answers no request sooner than its stall
 * ends: no call waits for it, and a request that need not reach it (an
 * acquisition, a renewal, a query) is not sent there, unless nothing sent
 * there awaits an answer any more (then one goes, to see it recover). A
 * release or an undo still goes, behind what it owes (fanout.c). `since`:
 * when the wait for an answer on the connection at hand began (its
 * progress_ns), 0 if none waits; `now`: the time. Any thread, no mutex.
 */
bool rm_server_stalls(redmutex_client *c, rm_server *srv, int64_t since, int64_t now);
/**
 * Reads, without blocking, what srv's owing connections that no call has
 * received (a server that ends a stall answers there first; its answered_ns
 * moves on), and returns those paid up to the pool. Whether a request sent
 * there still awaits its answer. Caller holds no mutex.
 */
bool rm_pool_settle(redmutex_client *c, rm_server *srv);
/**
 * A deployment's master moved (a failover followed, sentinel.c): counts it in
 * c->pool.moves and wakes whoever follows moves, without calling them: the
 * watchdog (c->holds.wake, rm_holds_follow_moves_locked) and the subscriber
 * thread (the fd it listens on). Caller holds c->mu.
 */
void rm_pool_moved_locked(redmutex_client *c) RM_REQUIRES(c->mu);
/** The eventfd written on each move (the subscriber's), or -1 for none. Caller holds c->mu. */
void rm_pool_listen_locked(redmutex_client *c, int fd) RM_REQUIRES(c->mu);
/** Called with the run_id a fresh connection reported; detects restarts and duplicates. */
int rm_server_note_run_id(rm_err *err, redmutex_client *c, rm_server *srv, const char *run_id);
/** In a forked child: closes the parent's pooled and owing connections (our copies of them). */
void rm_pool_after_fork(redmutex_client *c);
/** Closes a server's connections and frees its lists (client teardown). */
void rm_pool_clear(rm_server *srv);

#endif
