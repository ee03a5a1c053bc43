/*
 * slot.c - Redis Cluster hash slots (see slot.h). Written from the Redis
 * Cluster specification: HASH_SLOT = CRC16(key) mod 16384 with the
 * hash-tag rule; the CRC is computed bit by bit (keys are short, and a
 * table would only be a second thing to get right).
 */
#include "base/slot.h"

#include <string.h>

uint16_t dlock__crc16(const char *buf, size_t len)
{
    uint16_t crc = 0;

    for (size_t i = 0; i < len; i++) {
        crc ^= (uint16_t)((unsigned)(unsigned char)buf[i] << 8);
        for (int bit = 0; bit < 8; bit++) {
            if (crc & 0x8000)
                crc = (uint16_t)((crc << 1) ^ 0x1021);
            else
                crc = (uint16_t)(crc << 1);
        }
    }
    return crc;
}

uint16_t dlock__key_slot(const char *key, size_t len)
{
    const char *lb, *rb;
    size_t start;

    if (len == 0)
        return 0; /* CRC16 of nothing */
    lb = memchr(key, '{', len);
    if (lb != NULL) {
        start = (size_t)(lb - key) + 1;
        rb = memchr(key + start, '}', len - start);
        /* "{}" (nothing between) is no tag: the whole key is hashed. */
        if (rb != NULL && rb != key + start)
            return dlock__crc16(key + start, (size_t)(rb - (key + start))) &
                   (DLOCK__CLUSTER_SLOTS - 1);
    }
    return dlock__crc16(key, len) & (DLOCK__CLUSTER_SLOTS - 1);
}
