/* test_slot.c -- cmocka tests of libps/slot.[ch]: CRC16 (XMODEM) and the
 * Redis Cluster hash-slot rules, including hash tags. Expected slots are the
 * ones Redis's CLUSTER KEYSLOT answers. */

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <string.h>

#include "slot.h"

static unsigned slot_of(const char *key) {
    return ps_key_hash_slot(key, strlen(key));
}

static void test_crc16_matches_the_xmodem_check_values(void **state) {
    (void)state;
    assert_int_equal(ps_crc16("123456789", 9), 0x31C3);
    assert_int_equal(ps_crc16("", 0), 0x0000);
    assert_int_equal(ps_crc16("A", 1), 0x58E5);
    assert_int_equal(ps_crc16("foo", 3), 0xAF96);
    assert_int_equal(ps_crc16("a\0b", 3), 0xE0BF); /* binary-safe: NUL is data */
}

static void test_key_hash_slot_matches_redis_for_known_keys(void **state) {
    (void)state;
    assert_int_equal(slot_of("foo"), 12182);
    assert_int_equal(slot_of("bar"), 5061);
    assert_int_equal(slot_of("hello"), 866);
    assert_int_equal(slot_of("somekey"), 11058);
    assert_int_equal(slot_of("123456789"), 12739);
    assert_int_equal(slot_of(""), 0);
    assert_int_equal(ps_key_hash_slot("a\0b", 3), 8383);
}

static void test_hash_tag_puts_keys_in_the_same_slot(void **state) {
    (void)state;
    unsigned a = slot_of("{user1000}.following");
    unsigned b = slot_of("{user1000}.followers");
    assert_int_equal(a, b);
    assert_int_equal(a, slot_of("user1000"));
    assert_int_equal(a, 3443);
    assert_int_equal(slot_of("model:{job7}:w1"), slot_of("model:{job7}:b1"));
}

static void test_empty_hash_tag_hashes_the_whole_key(void **state) {
    (void)state;
    unsigned s = slot_of("foo{}{bar}");
    assert_int_equal(s, ps_crc16("foo{}{bar}", 10) & 16383);
    assert_int_equal(s, 8363);
    assert_int_not_equal(s, slot_of("bar"));
}

static void test_hash_tag_ends_at_the_first_closing_brace(void **state) {
    (void)state;
    assert_int_equal(slot_of("foo{{bar}}zap"), slot_of("{bar"));
    assert_int_equal(slot_of("foo{{bar}}zap"), 4015);
    assert_int_equal(slot_of("foo{bar}{zap}"), slot_of("bar"));
}

static void test_unclosed_brace_hashes_the_whole_key(void **state) {
    (void)state;
    assert_int_equal(slot_of("foo{bar"), 15278);
    assert_int_equal(slot_of("foo}bar{"), ps_crc16("foo}bar{", 8) & 16383);
    /* The tag is bounded by 'len', not by a NUL terminator. */
    assert_int_equal(ps_key_hash_slot("{bar}", 4), ps_crc16("{bar", 4) & 16383);
}

static void test_every_slot_is_below_16384(void **state) {
    (void)state;
    char key[16];
    unsigned seen_high = 0;
    for (unsigned i = 0; i < 100000; i++) {
        int len = 0;
        for (unsigned v = i; len == 0 || v; v /= 10) key[len++] = (char)('0' + v % 10);
        unsigned s = ps_key_hash_slot(key, (size_t)len);
        assert_true(s < 16384);
        if (s >= 8192) seen_high = 1;
    }
    assert_true(seen_high); /* the mask keeps 14 bits, not fewer */
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_crc16_matches_the_xmodem_check_values),
        cmocka_unit_test(test_key_hash_slot_matches_redis_for_known_keys),
        cmocka_unit_test(test_hash_tag_puts_keys_in_the_same_slot),
        cmocka_unit_test(test_empty_hash_tag_hashes_the_whole_key),
        cmocka_unit_test(test_hash_tag_ends_at_the_first_closing_brace),
        cmocka_unit_test(test_unclosed_brace_hashes_the_whole_key),
        cmocka_unit_test(test_every_slot_is_below_16384),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
