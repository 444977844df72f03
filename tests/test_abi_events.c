/* test_abi_events.c -- pins the server-event and keyspace-notification part
 * of module/redismodule.h that cmd_round.c / cmd_push.c use (issue 11):
 * the FlushDB event struct the server passes by pointer, the event id pair
 * passed by value, and the constants, against Redis 7.0.15. */

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "redismodule.h"

#if defined(__x86_64__) || defined(__aarch64__)
_Static_assert(sizeof(RedisModuleEvent) == 16, "RedisModuleEvent is {uint64 id, uint64 dataver}");
_Static_assert(sizeof(RedisModuleFlushInfo) == 16, "RedisModuleFlushInfo v1 is 16 bytes");
_Static_assert(offsetof(RedisModuleFlushInfo, sync) == 8, "FlushInfo.sync at 8");
_Static_assert(offsetof(RedisModuleFlushInfo, dbnum) == 12, "FlushInfo.dbnum at 12");
#endif

static void test_event_and_notification_constants_match_redis_7_0(void **state) {
    (void)state;
    assert_int_equal(REDISMODULE_EVENT_FLUSHDB, 2);
    assert_int_equal(REDISMODULE_SUBEVENT_FLUSHDB_START, 0);
    assert_int_equal(REDISMODULE_SUBEVENT_FLUSHDB_END, 1);
    assert_int_equal(REDISMODULE_NOTIFY_GENERIC, 1 << 2);
    assert_int_equal(REDISMODULE_NOTIFY_EXPIRED, 1 << 8);
    assert_int_equal(REDISMODULE_NOTIFY_EVICTED, 1 << 9);
    assert_int_equal(offsetof(RedisModuleFlushInfo, dbnum), 12);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_event_and_notification_constants_match_redis_7_0),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
