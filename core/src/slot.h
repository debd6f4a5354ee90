/*
 * One server's part of a call (slot.c): its request on the wire and its
 * replies, on the connection the fan-out took for it. A fresh connection's
 * handshake goes first; the replies a connection still owes are skipped.
 *
 * Layering: with the fan-out (fanout.c drives the slots), above the pool.
 */
#ifndef REDMUTEX_SLOT_H
#define REDMUTEX_SLOT_H

#include "fanout.h"

/** Ends the slot with an error (code, msg) and no reply; its connection stays with it. */
void rm_slot_fail(rm_slot *s, int code, const char *msg);
/** A transport failure: ends the slot with an error and closes its connection (its state is unknown). */
void rm_slot_break(rm_slot *s, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/** Puts a fresh connection's handshake (AUTH, SELECT, INFO, SCRIPT LOAD) in its output; the request follows its replies. */
void rm_slot_handshake(rm_slot *s);
/** Puts req in the connection's output, behind what is queued there; `eval` sends scripts whole. 0 or REDMUTEX_ENOMEM. */
int rm_slot_build(rm_slot *s, const rm_req *req, bool eval);
/** Reads what arrived: the replies owed, the handshake's, the request's. Ends the slot when all are in. */
void rm_slot_read(rm_slot *s, const rm_req *req);
/** Connects (and TLS) as far as it can, then writes what it can of the output without blocking. */
void rm_slot_write(rm_slot *s);

#endif
