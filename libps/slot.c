/* slot.c -- Redis Cluster key hash slots (CRC16 XMODEM, hash tags). */

#include "slot.h"

#include <string.h>

/* Bitwise CRC16: keys are short and slots are computed once per key per
 * routing decision, so a table buys nothing worth its 512 bytes. */
uint16_t ps_crc16(const void *buf, size_t len) {
    const unsigned char *p = buf;
    uint16_t crc = 0;
    for (size_t i = 0; i < len; i++) {
        crc ^= (uint16_t)((unsigned)p[i] << 8);
        for (int bit = 0; bit < 8; bit++)
            crc = (crc & 0x8000u) ? (uint16_t)((crc << 1) ^ 0x1021u) : (uint16_t)(crc << 1);
    }
    return crc;
}

unsigned ps_key_hash_slot(const char *key, size_t len) {
    const char *open = len ? memchr(key, '{', len) : NULL;
    if (open) {
        size_t start = (size_t)(open - key) + 1;
        const char *close = memchr(key + start, '}', len - start);
        /* An empty tag "{}" does not count: the whole key is hashed. */
        if (close && close > key + start)
            return ps_crc16(key + start, (size_t)(close - (key + start))) & (PS_CLUSTER_SLOTS - 1);
    }
    return ps_crc16(key, len) & (PS_CLUSTER_SLOTS - 1);
}
