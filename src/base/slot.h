/*
 * slot.h - the Redis Cluster key -> hash slot function (pure, no I/O).
 *
 * A key's slot is CRC16(key) mod 16384, where CRC16 is the XMODEM variant
 * (polynomial 0x1021, initial value 0, no reflection, no final xor). When
 * the key holds a hash tag - a '{', then a '}' somewhere after it with at
 * least one byte between them - only the bytes between the first '{' and
 * the first '}' after it are hashed, so that related keys can be forced
 * into one slot ("{user1000}.following", "{user1000}.followers").
 */
#ifndef DLOCK_SLOT_H
#define DLOCK_SLOT_H

#include <stddef.h>
#include <stdint.h>

#define DLOCK__CLUSTER_SLOTS 16384

/* CRC16-XMODEM of len bytes at buf (len 0: 0). */
uint16_t dlock__crc16(const char *buf, size_t len);

/* The cluster slot (0..16383) of the len-byte key, hash tags honoured.
 * key may hold any bytes, NUL included; it may be NULL when len is 0. */
uint16_t dlock__key_slot(const char *key, size_t len);

#endif
