/* test_abi.c -- pins module/redismodule.h (our own declaration of the Redis
 * 7.0 module API subset) against the Redis 7.0.15 x86-64 ABI.
 *
 * The server reads RedisModuleTypeMethods, RedisModuleCommandInfo and the
 * structs it points to byte for byte; a field in the wrong place is silently
 * misread (a copy callback taken for defrag, an arity taken for a pointer).
 * The _Static_asserts make such a header fail to compile; the cmocka tests
 * repeat the checks at run time so the test binary reports them by name.
 * Constants are compared with the values of Redis 7.0.15's own
 * src/redismodule.h (the ABI the module is built for); the ones the header
 * does not declare (it only declares what the module uses) are checked when
 * present. */

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <string.h>

#include "redismodule.h"

/* ------------------------------------------------------------------------
 * Struct layouts (x86-64 LP64; other LP64 targets share them)
 * ---------------------------------------------------------------------- */

#if defined(__x86_64__) || defined(__aarch64__)
#define PS_LP64_ABI 1
#endif

#ifdef PS_LP64_ABI
/* Type methods, method version 4. */
_Static_assert(sizeof(RedisModuleTypeMethods) == 144, "RedisModuleTypeMethods must be 144 bytes");
_Static_assert(offsetof(RedisModuleTypeMethods, version) == 0, "version at 0");
_Static_assert(offsetof(RedisModuleTypeMethods, rdb_load) == 8, "rdb_load at 8");
_Static_assert(offsetof(RedisModuleTypeMethods, rdb_save) == 16, "rdb_save at 16");
_Static_assert(offsetof(RedisModuleTypeMethods, aof_rewrite) == 24, "aof_rewrite at 24");
_Static_assert(offsetof(RedisModuleTypeMethods, mem_usage) == 32, "mem_usage at 32");
_Static_assert(offsetof(RedisModuleTypeMethods, digest) == 40, "digest at 40");
_Static_assert(offsetof(RedisModuleTypeMethods, free) == 48, "free at 48");
_Static_assert(offsetof(RedisModuleTypeMethods, aux_load) == 56, "aux_load at 56");
_Static_assert(offsetof(RedisModuleTypeMethods, aux_save) == 64, "aux_save at 64");
_Static_assert(offsetof(RedisModuleTypeMethods, aux_save_triggers) == 72, "aux_save_triggers at 72");
_Static_assert(offsetof(RedisModuleTypeMethods, free_effort) == 80, "free_effort at 80");
_Static_assert(offsetof(RedisModuleTypeMethods, unlink) == 88, "unlink at 88");
_Static_assert(offsetof(RedisModuleTypeMethods, copy) == 96, "copy at 96");
_Static_assert(offsetof(RedisModuleTypeMethods, defrag) == 104, "defrag at 104");
_Static_assert(offsetof(RedisModuleTypeMethods, mem_usage2) == 112, "mem_usage2 at 112");
_Static_assert(offsetof(RedisModuleTypeMethods, free_effort2) == 120, "free_effort2 at 120");
_Static_assert(offsetof(RedisModuleTypeMethods, unlink2) == 128, "unlink2 at 128");
_Static_assert(offsetof(RedisModuleTypeMethods, copy2) == 136, "copy2 at 136");
_Static_assert(sizeof(((RedisModuleTypeMethods *)0)->version) == 8, "version is uint64_t");
_Static_assert(sizeof(((RedisModuleTypeMethods *)0)->aux_save_triggers) == 4,
               "aux_save_triggers is an int");

/* Command info. */
_Static_assert(sizeof(RedisModuleCommandInfo) == 72, "RedisModuleCommandInfo must be 72 bytes");
_Static_assert(offsetof(RedisModuleCommandInfo, version) == 0, "version at 0");
_Static_assert(offsetof(RedisModuleCommandInfo, summary) == 8, "summary at 8");
_Static_assert(offsetof(RedisModuleCommandInfo, complexity) == 16, "complexity at 16");
_Static_assert(offsetof(RedisModuleCommandInfo, since) == 24, "since at 24");
_Static_assert(offsetof(RedisModuleCommandInfo, history) == 32, "history at 32");
_Static_assert(offsetof(RedisModuleCommandInfo, tips) == 40, "tips at 40");
_Static_assert(offsetof(RedisModuleCommandInfo, arity) == 48, "arity at 48");
_Static_assert(offsetof(RedisModuleCommandInfo, key_specs) == 56, "key_specs at 56");
_Static_assert(offsetof(RedisModuleCommandInfo, args) == 64, "args at 64");
_Static_assert(sizeof(((RedisModuleCommandInfo *)0)->arity) == 4, "arity is an int");

/* Command info version block. */
_Static_assert(sizeof(RedisModuleCommandInfoVersion) == 32, "RedisModuleCommandInfoVersion 32 bytes");
_Static_assert(offsetof(RedisModuleCommandInfoVersion, version) == 0, "version at 0");
_Static_assert(offsetof(RedisModuleCommandInfoVersion, sizeof_historyentry) == 8,
               "sizeof_historyentry at 8");
_Static_assert(offsetof(RedisModuleCommandInfoVersion, sizeof_keyspec) == 16, "sizeof_keyspec at 16");
_Static_assert(offsetof(RedisModuleCommandInfoVersion, sizeof_arg) == 24, "sizeof_arg at 24");

/* Key spec. */
_Static_assert(sizeof(RedisModuleCommandKeySpec) == 56, "RedisModuleCommandKeySpec must be 56 bytes");
_Static_assert(offsetof(RedisModuleCommandKeySpec, notes) == 0, "notes at 0");
_Static_assert(offsetof(RedisModuleCommandKeySpec, flags) == 8, "flags at 8");
_Static_assert(offsetof(RedisModuleCommandKeySpec, begin_search_type) == 16, "begin_search_type at 16");
_Static_assert(offsetof(RedisModuleCommandKeySpec, bs) == 24, "bs union at 24");
_Static_assert(offsetof(RedisModuleCommandKeySpec, bs.index.pos) == 24, "bs.index.pos at 24");
_Static_assert(offsetof(RedisModuleCommandKeySpec, bs.keyword.keyword) == 24, "bs.keyword.keyword at 24");
_Static_assert(offsetof(RedisModuleCommandKeySpec, bs.keyword.startfrom) == 32,
               "bs.keyword.startfrom at 32");
_Static_assert(offsetof(RedisModuleCommandKeySpec, find_keys_type) == 40, "find_keys_type at 40");
_Static_assert(offsetof(RedisModuleCommandKeySpec, fk) == 44, "fk union at 44");
_Static_assert(offsetof(RedisModuleCommandKeySpec, fk.range.lastkey) == 44, "fk.range.lastkey at 44");
_Static_assert(offsetof(RedisModuleCommandKeySpec, fk.range.keystep) == 48, "fk.range.keystep at 48");
_Static_assert(offsetof(RedisModuleCommandKeySpec, fk.range.limit) == 52, "fk.range.limit at 52");
_Static_assert(offsetof(RedisModuleCommandKeySpec, fk.keynum.keynumidx) == 44, "fk.keynum.keynumidx at 44");
_Static_assert(offsetof(RedisModuleCommandKeySpec, fk.keynum.firstkey) == 48, "fk.keynum.firstkey at 48");
_Static_assert(offsetof(RedisModuleCommandKeySpec, fk.keynum.keystep) == 52, "fk.keynum.keystep at 52");
_Static_assert(sizeof(((RedisModuleCommandKeySpec *)0)->flags) == 8, "key spec flags are uint64_t");
_Static_assert(sizeof(((RedisModuleCommandKeySpec *)0)->begin_search_type) == 4, "enum is 4 bytes");

/* Command arg. */
_Static_assert(sizeof(RedisModuleCommandArg) == 64, "RedisModuleCommandArg must be 64 bytes");
_Static_assert(offsetof(RedisModuleCommandArg, name) == 0, "name at 0");
_Static_assert(offsetof(RedisModuleCommandArg, type) == 8, "type at 8");
_Static_assert(offsetof(RedisModuleCommandArg, key_spec_index) == 12, "key_spec_index at 12");
_Static_assert(offsetof(RedisModuleCommandArg, token) == 16, "token at 16");
_Static_assert(offsetof(RedisModuleCommandArg, summary) == 24, "summary at 24");
_Static_assert(offsetof(RedisModuleCommandArg, since) == 32, "since at 32");
_Static_assert(offsetof(RedisModuleCommandArg, flags) == 40, "flags at 40");
_Static_assert(offsetof(RedisModuleCommandArg, deprecated_since) == 48, "deprecated_since at 48");
_Static_assert(offsetof(RedisModuleCommandArg, subargs) == 56, "subargs at 56");

/* History entry. */
_Static_assert(sizeof(RedisModuleCommandHistoryEntry) == 16, "RedisModuleCommandHistoryEntry 16 bytes");
_Static_assert(offsetof(RedisModuleCommandHistoryEntry, since) == 0, "since at 0");
_Static_assert(offsetof(RedisModuleCommandHistoryEntry, changes) == 8, "changes at 8");
#endif /* PS_LP64_ABI */

/* ------------------------------------------------------------------------
 * Constants (Redis 7.0.15 values)
 * ---------------------------------------------------------------------- */

/* Always required: the module uses them. */
_Static_assert(REDISMODULE_OK == 0, "OK");
_Static_assert(REDISMODULE_ERR == 1, "ERR");
_Static_assert(REDISMODULE_APIVER_1 == 1, "APIVER_1");
_Static_assert(REDISMODULE_TYPE_METHOD_VERSION == 4, "TYPE_METHOD_VERSION 4 (copy needs >= 3)");
_Static_assert(REDISMODULE_READ == (1 << 0), "READ");
_Static_assert(REDISMODULE_WRITE == (1 << 1), "WRITE");
_Static_assert(REDISMODULE_KEYTYPE_EMPTY == 0, "KEYTYPE_EMPTY");
_Static_assert(REDISMODULE_KEYTYPE_MODULE == 6, "KEYTYPE_MODULE");
_Static_assert(REDISMODULE_POSTPONED_LEN == -1, "POSTPONED_LEN");
_Static_assert(REDISMODULE_OPTIONS_HANDLE_IO_ERRORS == (1 << 0), "HANDLE_IO_ERRORS");
_Static_assert(REDISMODULE_CONFIG_DEFAULT == 0, "CONFIG_DEFAULT");
_Static_assert(REDISMODULE_CONFIG_MEMORY == (1 << 7), "CONFIG_MEMORY");
_Static_assert(REDISMODULE_CTX_FLAGS_LUA == (1 << 0), "CTX_FLAGS_LUA");
_Static_assert(REDISMODULE_CTX_FLAGS_MULTI == (1 << 1), "CTX_FLAGS_MULTI");
_Static_assert(REDISMODULE_CTX_FLAGS_SLAVE == (1 << 3), "CTX_FLAGS_SLAVE");
_Static_assert(REDISMODULE_CTX_FLAGS_LOADING == (1 << 13), "CTX_FLAGS_LOADING");
_Static_assert(REDISMODULE_CTX_FLAGS_DENY_BLOCKING == (1 << 21), "CTX_FLAGS_DENY_BLOCKING");
_Static_assert(REDISMODULE_NOTIFY_MODULE == (1 << 13), "NOTIFY_MODULE");
_Static_assert(REDISMODULE_CMD_KEY_RO == (1ULL << 0), "KEY_RO");
_Static_assert(REDISMODULE_CMD_KEY_RW == (1ULL << 1), "KEY_RW");
_Static_assert(REDISMODULE_CMD_KEY_OW == (1ULL << 2), "KEY_OW");
_Static_assert(REDISMODULE_CMD_KEY_ACCESS == (1ULL << 4), "KEY_ACCESS");
_Static_assert(REDISMODULE_CMD_KEY_UPDATE == (1ULL << 5), "KEY_UPDATE");
_Static_assert(REDISMODULE_CMD_KEY_INSERT == (1ULL << 6), "KEY_INSERT");
_Static_assert(REDISMODULE_KSPEC_BS_INDEX == 2, "KSPEC_BS_INDEX");
_Static_assert(REDISMODULE_KSPEC_FK_RANGE == 2, "KSPEC_FK_RANGE");
_Static_assert(REDISMODULE_COMMAND_INFO_VERSION == 1, "COMMAND_INFO_VERSION");

/* Checked when the header declares them. */
#define PIN(name, value) _Static_assert((name) == (value), #name " must be " #value)
#ifdef REDISMODULE_KEYTYPE_STRING
PIN(REDISMODULE_KEYTYPE_STRING, 1);
#endif
#ifdef REDISMODULE_KEYTYPE_LIST
PIN(REDISMODULE_KEYTYPE_LIST, 2);
#endif
#ifdef REDISMODULE_KEYTYPE_HASH
PIN(REDISMODULE_KEYTYPE_HASH, 3);
#endif
#ifdef REDISMODULE_KEYTYPE_SET
PIN(REDISMODULE_KEYTYPE_SET, 4);
#endif
#ifdef REDISMODULE_KEYTYPE_ZSET
PIN(REDISMODULE_KEYTYPE_ZSET, 5);
#endif
#ifdef REDISMODULE_KEYTYPE_STREAM
PIN(REDISMODULE_KEYTYPE_STREAM, 7);
#endif
#ifdef REDISMODULE_REPLY_UNKNOWN
PIN(REDISMODULE_REPLY_UNKNOWN, -1);
#endif
#ifdef REDISMODULE_REPLY_STRING
PIN(REDISMODULE_REPLY_STRING, 0);
#endif
#ifdef REDISMODULE_REPLY_ERROR
PIN(REDISMODULE_REPLY_ERROR, 1);
#endif
#ifdef REDISMODULE_REPLY_INTEGER
PIN(REDISMODULE_REPLY_INTEGER, 2);
#endif
#ifdef REDISMODULE_REPLY_ARRAY
PIN(REDISMODULE_REPLY_ARRAY, 3);
#endif
#ifdef REDISMODULE_REPLY_NULL
PIN(REDISMODULE_REPLY_NULL, 4);
#endif
#ifdef REDISMODULE_REPLY_MAP
PIN(REDISMODULE_REPLY_MAP, 5);
#endif
#ifdef REDISMODULE_REPLY_SET
PIN(REDISMODULE_REPLY_SET, 6);
#endif
#ifdef REDISMODULE_REPLY_BOOL
PIN(REDISMODULE_REPLY_BOOL, 7);
#endif
#ifdef REDISMODULE_REPLY_DOUBLE
PIN(REDISMODULE_REPLY_DOUBLE, 8);
#endif
#ifdef REDISMODULE_REPLY_BIG_NUMBER
PIN(REDISMODULE_REPLY_BIG_NUMBER, 9);
#endif
#ifdef REDISMODULE_REPLY_VERBATIM_STRING
PIN(REDISMODULE_REPLY_VERBATIM_STRING, 10);
#endif
#ifdef REDISMODULE_REPLY_ATTRIBUTE
PIN(REDISMODULE_REPLY_ATTRIBUTE, 11);
#endif
#ifdef REDISMODULE_POSTPONED_ARRAY_LEN
PIN(REDISMODULE_POSTPONED_ARRAY_LEN, -1);
#endif
#ifdef REDISMODULE_NO_EXPIRE
PIN(REDISMODULE_NO_EXPIRE, -1);
#endif
#ifdef REDISMODULE_OPTION_NO_IMPLICIT_SIGNAL_MODIFIED
PIN(REDISMODULE_OPTION_NO_IMPLICIT_SIGNAL_MODIFIED, 1 << 1);
#endif
#ifdef REDISMODULE_OPTIONS_HANDLE_REPL_ASYNC_LOAD
PIN(REDISMODULE_OPTIONS_HANDLE_REPL_ASYNC_LOAD, 1 << 2);
#endif
#ifdef REDISMODULE_CONFIG_IMMUTABLE
PIN(REDISMODULE_CONFIG_IMMUTABLE, 1u << 0);
#endif
#ifdef REDISMODULE_CONFIG_SENSITIVE
PIN(REDISMODULE_CONFIG_SENSITIVE, 1u << 1);
#endif
#ifdef REDISMODULE_CONFIG_HIDDEN
PIN(REDISMODULE_CONFIG_HIDDEN, 1u << 4);
#endif
#ifdef REDISMODULE_CONFIG_PROTECTED
PIN(REDISMODULE_CONFIG_PROTECTED, 1u << 5);
#endif
#ifdef REDISMODULE_CONFIG_DENY_LOADING
PIN(REDISMODULE_CONFIG_DENY_LOADING, 1u << 6);
#endif
#ifdef REDISMODULE_CONFIG_BITFLAGS
PIN(REDISMODULE_CONFIG_BITFLAGS, 1u << 8);
#endif
#ifdef REDISMODULE_CTX_FLAGS_MASTER
PIN(REDISMODULE_CTX_FLAGS_MASTER, 1 << 2);
#endif
#ifdef REDISMODULE_CTX_FLAGS_READONLY
PIN(REDISMODULE_CTX_FLAGS_READONLY, 1 << 4);
#endif
#ifdef REDISMODULE_CTX_FLAGS_CLUSTER
PIN(REDISMODULE_CTX_FLAGS_CLUSTER, 1 << 5);
#endif
#ifdef REDISMODULE_CTX_FLAGS_AOF
PIN(REDISMODULE_CTX_FLAGS_AOF, 1 << 6);
#endif
#ifdef REDISMODULE_CTX_FLAGS_RDB
PIN(REDISMODULE_CTX_FLAGS_RDB, 1 << 7);
#endif
#ifdef REDISMODULE_CTX_FLAGS_MAXMEMORY
PIN(REDISMODULE_CTX_FLAGS_MAXMEMORY, 1 << 8);
#endif
#ifdef REDISMODULE_CTX_FLAGS_EVICT
PIN(REDISMODULE_CTX_FLAGS_EVICT, 1 << 9);
#endif
#ifdef REDISMODULE_CTX_FLAGS_OOM
PIN(REDISMODULE_CTX_FLAGS_OOM, 1 << 10);
#endif
#ifdef REDISMODULE_CTX_FLAGS_OOM_WARNING
PIN(REDISMODULE_CTX_FLAGS_OOM_WARNING, 1 << 11);
#endif
#ifdef REDISMODULE_CTX_FLAGS_REPLICATED
PIN(REDISMODULE_CTX_FLAGS_REPLICATED, 1 << 12);
#endif
#ifdef REDISMODULE_CTX_FLAGS_RESP3
PIN(REDISMODULE_CTX_FLAGS_RESP3, 1 << 22);
#endif
#ifdef REDISMODULE_CTX_FLAGS_ASYNC_LOADING
PIN(REDISMODULE_CTX_FLAGS_ASYNC_LOADING, 1 << 23);
#endif
#ifdef REDISMODULE_NOTIFY_GENERIC
PIN(REDISMODULE_NOTIFY_GENERIC, 1 << 2);
#endif
#ifdef REDISMODULE_AUX_BEFORE_RDB
PIN(REDISMODULE_AUX_BEFORE_RDB, 1 << 0);
#endif
#ifdef REDISMODULE_AUX_AFTER_RDB
PIN(REDISMODULE_AUX_AFTER_RDB, 1 << 1);
#endif
#ifdef REDISMODULE_CMD_KEY_RM
PIN(REDISMODULE_CMD_KEY_RM, 1ULL << 3);
#endif
#ifdef REDISMODULE_CMD_KEY_DELETE
PIN(REDISMODULE_CMD_KEY_DELETE, 1ULL << 7);
#endif
#ifdef REDISMODULE_CMD_KEY_NOT_KEY
PIN(REDISMODULE_CMD_KEY_NOT_KEY, 1ULL << 8);
#endif
#ifdef REDISMODULE_CMD_KEY_INCOMPLETE
PIN(REDISMODULE_CMD_KEY_INCOMPLETE, 1ULL << 9);
#endif
#ifdef REDISMODULE_CMD_KEY_VARIABLE_FLAGS
PIN(REDISMODULE_CMD_KEY_VARIABLE_FLAGS, 1ULL << 10);
#endif
#ifdef REDISMODULE_CMD_ARG_NONE
PIN(REDISMODULE_CMD_ARG_NONE, 0);
#endif
#ifdef REDISMODULE_CMD_ARG_OPTIONAL
PIN(REDISMODULE_CMD_ARG_OPTIONAL, 1 << 0);
#endif
#ifdef REDISMODULE_CMD_ARG_MULTIPLE
PIN(REDISMODULE_CMD_ARG_MULTIPLE, 1 << 1);
#endif
#ifdef REDISMODULE_CMD_ARG_MULTIPLE_TOKEN
PIN(REDISMODULE_CMD_ARG_MULTIPLE_TOKEN, 1 << 2);
#endif

/* Enumerations (declared as enums in the header, so always present). */
_Static_assert(REDISMODULE_KSPEC_BS_INVALID == 0, "KSPEC_BS_INVALID");
_Static_assert(REDISMODULE_KSPEC_BS_UNKNOWN == 1, "KSPEC_BS_UNKNOWN");
_Static_assert(REDISMODULE_KSPEC_BS_KEYWORD == 3, "KSPEC_BS_KEYWORD");
_Static_assert(REDISMODULE_KSPEC_FK_OMITTED == 0, "KSPEC_FK_OMITTED");
_Static_assert(REDISMODULE_KSPEC_FK_UNKNOWN == 1, "KSPEC_FK_UNKNOWN");
_Static_assert(REDISMODULE_KSPEC_FK_KEYNUM == 3, "KSPEC_FK_KEYNUM");
_Static_assert(REDISMODULE_ARG_TYPE_STRING == 0, "ARG_TYPE_STRING");
_Static_assert(REDISMODULE_ARG_TYPE_INTEGER == 1, "ARG_TYPE_INTEGER");
_Static_assert(REDISMODULE_ARG_TYPE_DOUBLE == 2, "ARG_TYPE_DOUBLE");
_Static_assert(REDISMODULE_ARG_TYPE_KEY == 3, "ARG_TYPE_KEY");
_Static_assert(REDISMODULE_ARG_TYPE_PATTERN == 4, "ARG_TYPE_PATTERN");
_Static_assert(REDISMODULE_ARG_TYPE_UNIX_TIME == 5, "ARG_TYPE_UNIX_TIME");
_Static_assert(REDISMODULE_ARG_TYPE_PURE_TOKEN == 6, "ARG_TYPE_PURE_TOKEN");
_Static_assert(REDISMODULE_ARG_TYPE_ONEOF == 7, "ARG_TYPE_ONEOF");
_Static_assert(REDISMODULE_ARG_TYPE_BLOCK == 8, "ARG_TYPE_BLOCK");

/* ------------------------------------------------------------------------
 * Run-time checks (the same facts, reported by name when run)
 * ---------------------------------------------------------------------- */

static void test_type_methods_match_redis_7_0_layout(void **state) {
    (void)state;
#ifdef PS_LP64_ABI
    assert_int_equal(sizeof(RedisModuleTypeMethods), 144);
    assert_int_equal(offsetof(RedisModuleTypeMethods, aux_save_triggers), 72);
    assert_int_equal(offsetof(RedisModuleTypeMethods, free_effort), 80);
    assert_int_equal(offsetof(RedisModuleTypeMethods, copy), 96);
    assert_int_equal(offsetof(RedisModuleTypeMethods, copy2), 136);
#else
    skip();
#endif
}

/* A designated initializer puts each callback where the server looks for it:
 * writing through the struct and reading raw words at the 7.0 offsets. */
static void *fake_copy(RedisModuleString *f, RedisModuleString *t, const void *v) {
    (void)f;
    (void)t;
    return (void *)v;
}
static void fake_free(void *v) { (void)v; }

static void test_type_methods_callbacks_land_at_server_offsets(void **state) {
    (void)state;
#ifdef PS_LP64_ABI
    RedisModuleTypeMethods tm;
    memset(&tm, 0, sizeof(tm));
    tm.version = REDISMODULE_TYPE_METHOD_VERSION;
    tm.free = fake_free;
    tm.copy = fake_copy;
    tm.aux_save_triggers = 3;
    const unsigned char *raw = (const unsigned char *)&tm;
    uint64_t ver;
    void *p;
    int trig;
    memcpy(&ver, raw + 0, 8);
    assert_int_equal(ver, 4);
    memcpy(&p, raw + 48, sizeof(p));
    assert_ptr_equal(p, (void *)fake_free);
    memcpy(&p, raw + 96, sizeof(p));
    assert_ptr_equal(p, (void *)fake_copy);
    memcpy(&trig, raw + 72, sizeof(trig));
    assert_int_equal(trig, 3);
#else
    skip();
#endif
}

static void test_command_info_structs_match_redis_7_0_layout(void **state) {
    (void)state;
#ifdef PS_LP64_ABI
    assert_int_equal(sizeof(RedisModuleCommandInfo), 72);
    assert_int_equal(offsetof(RedisModuleCommandInfo, arity), 48);
    assert_int_equal(offsetof(RedisModuleCommandInfo, key_specs), 56);
    assert_int_equal(offsetof(RedisModuleCommandInfo, args), 64);
    assert_int_equal(sizeof(RedisModuleCommandKeySpec), 56);
    assert_int_equal(offsetof(RedisModuleCommandKeySpec, flags), 8);
    assert_int_equal(offsetof(RedisModuleCommandKeySpec, bs), 24);
    assert_int_equal(offsetof(RedisModuleCommandKeySpec, find_keys_type), 40);
    assert_int_equal(offsetof(RedisModuleCommandKeySpec, fk), 44);
    assert_int_equal(sizeof(RedisModuleCommandArg), 64);
    assert_int_equal(offsetof(RedisModuleCommandArg, flags), 40);
    assert_int_equal(offsetof(RedisModuleCommandArg, subargs), 56);
    assert_int_equal(sizeof(RedisModuleCommandHistoryEntry), 16);
#else
    skip();
#endif
}

/* A key spec written the way cmd_tensor.c writes its read spec reads back,
 * word by word, as the server expects: flags, INDEX at pos 1, RANGE {0,1,0}. */
static void test_key_spec_initializer_lands_at_server_offsets(void **state) {
    (void)state;
#ifdef PS_LP64_ABI
    RedisModuleCommandKeySpec ks;
    memset(&ks, 0, sizeof(ks));
    ks.flags = REDISMODULE_CMD_KEY_RO | REDISMODULE_CMD_KEY_ACCESS;
    ks.begin_search_type = REDISMODULE_KSPEC_BS_INDEX;
    ks.bs.index.pos = 1;
    ks.find_keys_type = REDISMODULE_KSPEC_FK_RANGE;
    ks.fk.range.lastkey = 0;
    ks.fk.range.keystep = 1;
    ks.fk.range.limit = 0;
    const unsigned char *raw = (const unsigned char *)&ks;
    uint64_t flags;
    int v;
    memcpy(&flags, raw + 8, 8);
    assert_int_equal(flags, 0x11);
    memcpy(&v, raw + 16, 4);
    assert_int_equal(v, 2);
    memcpy(&v, raw + 24, 4);
    assert_int_equal(v, 1);
    memcpy(&v, raw + 40, 4);
    assert_int_equal(v, 2);
    memcpy(&v, raw + 48, 4);
    assert_int_equal(v, 1);
#else
    skip();
#endif
}

static void test_constants_match_redis_7_0_15(void **state) {
    (void)state;
    assert_int_equal(REDISMODULE_OK, 0);
    assert_int_equal(REDISMODULE_ERR, 1);
    assert_int_equal(REDISMODULE_TYPE_METHOD_VERSION, 4);
    assert_int_equal(REDISMODULE_KEYTYPE_MODULE, 6);
    assert_int_equal(REDISMODULE_CTX_FLAGS_DENY_BLOCKING, 1 << 21);
    assert_int_equal(REDISMODULE_NOTIFY_MODULE, 1 << 13);
    assert_int_equal(REDISMODULE_CMD_KEY_VARIABLE_FLAGS, 1ULL << 10);
    assert_string_equal(REDISMODULE_ERRORMSG_WRONGTYPE,
                        "WRONGTYPE Operation against a key holding the wrong kind of value");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_type_methods_match_redis_7_0_layout),
        cmocka_unit_test(test_type_methods_callbacks_land_at_server_offsets),
        cmocka_unit_test(test_command_info_structs_match_redis_7_0_layout),
        cmocka_unit_test(test_key_spec_initializer_lands_at_server_offsets),
        cmocka_unit_test(test_constants_match_redis_7_0_15),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
