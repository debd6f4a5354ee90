/*
 * Redis Cluster hash slots: CRC16 (XMODEM) and the hash-tag rule (slots.h).
 * Written from the cluster specification: a slot is CRC16(key) mod 16384,
 * where key is the hash tag when the key has a non-empty one.
 */
#include "internal.h"
#include "slots.h"

#include <string.h>

/* The CRC16 of every byte value, built once from the polynomial at compile
   time would need a generator; 256 shifts of 8 bits at first use are as
   cheap and leave nothing to copy wrong. */
static uint16_t crc_table[256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

static void crc_init(void)
{
    for (unsigned b = 0; b < 256; b++) {
        uint16_t crc = (uint16_t)(b << 8);
        for (int k = 0; k < 8; k++)
            crc = (uint16_t)(crc & 0x8000 ? (crc << 1) ^ 0x1021 : crc << 1);
        crc_table[b] = crc;
    }
}

uint16_t rm_crc16(const void *data, size_t len)
{
    pthread_once(&crc_once, crc_init);
    const unsigned char *p = data;
    uint16_t crc = 0;
    for (size_t i = 0; i < len; i++)
        crc = (uint16_t)((crc << 8) ^ crc_table[((crc >> 8) ^ p[i]) & 0xff]);
    return crc;
}

int rm_keyslot(const void *key, size_t len)
{
    const char *k = key;
    const char *open = memchr(k, '{', len);
    if (open) {
        size_t rest = len - (size_t)(open + 1 - k);
        const char *close = memchr(open + 1, '}', rest);
        /* "{}" is no tag: the whole key is hashed (Redis's rule). */
        if (close && close > open + 1)
            return rm_crc16(open + 1, (size_t)(close - open - 1)) & (RM_SLOTS - 1);
    }
    return rm_crc16(k, len) & (RM_SLOTS - 1);
}

bool rm_name_fits_one_slot(const char *name, size_t len)
{
    const char *open = memchr(name, '{', len);
    if (!open)
        return memchr(name, '}', len) == NULL;
    const char *close = memchr(open + 1, '}', len - (size_t)(open + 1 - name));
    return close && close > open + 1;
}
