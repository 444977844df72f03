/* slot.h -- Redis Cluster key hash slots, used by libps to route requests.
 *
 * Pure C, no Redis. Must agree bit for bit with Redis's own keyHashSlot(),
 * or the client would route keys to the wrong node. */
#ifndef PS_SLOT_H
#define PS_SLOT_H

#include <stddef.h>
#include <stdint.h>

#define PS_CLUSTER_SLOTS 16384  /* hash slots in a Redis Cluster */

/* CRC16-CCITT in the XMODEM variant (polynomial 0x1021, initial value 0, no
 * reflection, no final xor), as used by Redis Cluster, of the 'len' bytes at
 * 'buf'. "123456789" gives 0x31C3. */
uint16_t ps_crc16(const void *buf, size_t len);

/* The Redis Cluster hash slot (0..16383) of the 'len'-byte key 'key': when
 * the key has a '{' followed later by a '}' with at least one byte between
 * the first '{' and the first '}' after it, only those bytes are hashed (the
 * hash tag); otherwise the whole key is. */
unsigned ps_key_hash_slot(const char *key, size_t len);

#endif /* PS_SLOT_H */
