/*
 * test_slot.c - unit tests of the cluster hash slot function (src/slot.c):
 * the CRC16 check value of the Redis Cluster specification, slots of
 * plain keys, and the hash-tag rule's cases from the specification. No
 * server needed (tests/integration/topology_selftest.c compares with a
 * real server's CLUSTER KEYSLOT).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "base/slot.h"

/* The slot of a NUL-terminated key. */
static unsigned slot_of(const char *key)
{
    return dlock__key_slot(key, strlen(key));
}

/* The specification's check value: CRC16("123456789") = 0x31C3. */
static void test_crc16_check_value(void **state)
{
    (void)state;
    assert_int_equal(dlock__crc16("123456789", 9), 0x31C3);
    assert_int_equal(dlock__crc16("", 0), 0);
    assert_int_equal(dlock__key_slot("123456789", 9), 0x31C3 & 16383);
}

/* Slots of plain keys, as CLUSTER KEYSLOT answers them. */
static void test_plain_keys(void **state)
{
    (void)state;
    assert_int_equal(slot_of("foo"), 12182);
    assert_int_equal(slot_of("bar"), 5061);
    assert_int_equal(slot_of("hello"), 866);
    assert_int_equal(slot_of("user1000"), 3443);
    assert_int_equal(slot_of(""), 0);
    assert_int_equal(dlock__key_slot(NULL, 0), 0);
}

/* Every result is a valid slot, and bytes >= 0x80 and NUL are hashed as
 * bytes like any other. */
static void test_binary_keys(void **state)
{
    char key[64];
    unsigned seen_high = 0;

    (void)state;
    for (unsigned i = 0; i < 4096; i++) {
        for (size_t k = 0; k < sizeof key; k++)
            key[k] = (char)((i * 131 + k * 17 + (i >> 3)) & 0xff);
        unsigned s = dlock__key_slot(key, 1 + i % sizeof key);
        assert_true(s < 16384);
        seen_high |= s >= 8192;
    }
    assert_true(seen_high);
    /* A NUL in the middle counts: "a\0b" is not "a". */
    assert_int_not_equal(dlock__key_slot("a\0b", 3), dlock__key_slot("a", 1));
    /* Tags work on binary content too. */
    assert_int_equal(dlock__key_slot("x{a\0b}y", 7),
                     dlock__key_slot("a\0b", 3));
}

/* The hash-tag cases of the specification. */
static void test_hash_tags(void **state)
{
    (void)state;
    /* Only "user1000" is hashed. */
    assert_int_equal(slot_of("{user1000}.following"), slot_of("user1000"));
    assert_int_equal(slot_of("{user1000}.followers"), slot_of("user1000"));
    /* First '{' to the first '}' after it: "bar". */
    assert_int_equal(slot_of("foo{bar}{zap}"), slot_of("bar"));
    /* "{}" is empty: no tag at all, the whole key is hashed (the later
     * "{bar}" does not count: only the first '{' is looked at). */
    assert_int_equal(slot_of("foo{}{bar}"),
                     dlock__crc16("foo{}{bar}", 10) & 16383);
    assert_int_not_equal(slot_of("foo{}{bar}"), slot_of("bar"));
    /* The tag is "{bar": from the first '{' to the first '}'. */
    assert_int_equal(slot_of("foo{{bar}}zap"), slot_of("{bar"));
    /* A '{' with no '}' after it, or only a '}' before it: no tag. */
    assert_int_equal(slot_of("foo{bar"), dlock__crc16("foo{bar", 7) & 16383);
    assert_int_equal(slot_of("foo}bar{"), dlock__crc16("foo}bar{", 8) & 16383);
    /* The tag may be anywhere and hold anything but '}'. */
    assert_int_equal(slot_of("{a}"), slot_of("a"));
    assert_int_equal(slot_of("x{a}"), slot_of("a"));
    assert_int_equal(slot_of("x{a{b}y"), slot_of("a{b"));
    /* The tag is looked for within len only. */
    assert_int_equal(dlock__key_slot("foo{bar}", 5),
                     dlock__crc16("foo{b", 5) & 16383);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_crc16_check_value),
        cmocka_unit_test(test_plain_keys),
        cmocka_unit_test(test_binary_keys),
        cmocka_unit_test(test_hash_tags),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
