/*
 * Redis Cluster hash slots (slots.c): CRC16 and the hash-tag rule, exactly
 * as the servers compute them, so that a key is routed to the node that
 * owns it without asking.
 *
 * Layering: wire (with url, resp and scripts): pure functions, no I/O.
 */
#ifndef REDMUTEX_SLOTS_H
#define REDMUTEX_SLOTS_H

#include "internal.h"

/* A cluster has 16384 hash slots. */
#define RM_SLOTS 16384

/** CRC16-CCITT (XMODEM: polynomial 0x1021, initial value 0), as Redis Cluster uses it. */
uint16_t rm_crc16(const void *data, size_t len);

/**
 * The hash slot of a key, as CLUSTER KEYSLOT computes it: when the key has
 * a '{' followed later by a '}' with at least one byte between them, only
 * the bytes between the first '{' and the first '}' after it are hashed
 * (the hash tag); otherwise the whole key.
 */
int rm_keyslot(const void *key, size_t len);

/**
 * Whether every key of a lock named `name` lands in the name's own slot
 * under Redisson's naming ("prefix:{NAME}suffix", or "prefix:NAMEsuffix"
 * when NAME holds a '{'): a name without '{' must not hold a '}' (the
 * braces added would end early), and a name with a '{' must have a
 * non-empty hash tag of its own ("a{}b" has none: it hashes whole, its
 * derived keys differ). Only such names can be used on a cluster.
 */
bool rm_name_fits_one_slot(const char *name, size_t len);

#endif
