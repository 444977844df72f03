/* redismodule.h -- redis-ps's own declaration of the part of the Redis 7.0
 * module API that the ps module uses.
 *
 * Debian ships redis-server 7.0 without this header, so the project declares
 * what it needs itself: the constants, the opaque handle types, the structs
 * whose layout must match the server byte for byte (pinned by static asserts
 * in tests/test_abi.c), and one function pointer per API call, filled by
 * RedisModule_Init() through the lookup function the server places in the
 * first field of the context.
 *
 * Only redis-ps glue files (module.c, cmd_table.c, type.c, cmd_*.c) include this header; the
 * pure cores never do. */

#ifndef PS_REDISMODULE_H
#define PS_REDISMODULE_H

#include <stddef.h>
#include <stdint.h>

/* ---------------------------------------------------------------------------
 * Constants (values of Redis 7.0.15)
 * ------------------------------------------------------------------------- */

#define REDISMODULE_OK 0
#define REDISMODULE_ERR 1
#define REDISMODULE_APIVER_1 1
#define REDISMODULE_TYPE_METHOD_VERSION 4

#define REDISMODULE_READ (1 << 0)
#define REDISMODULE_WRITE (1 << 1)

#define REDISMODULE_KEYTYPE_EMPTY 0
#define REDISMODULE_KEYTYPE_STRING 1
#define REDISMODULE_KEYTYPE_LIST 2
#define REDISMODULE_KEYTYPE_HASH 3
#define REDISMODULE_KEYTYPE_SET 4
#define REDISMODULE_KEYTYPE_ZSET 5
#define REDISMODULE_KEYTYPE_MODULE 6
#define REDISMODULE_KEYTYPE_STREAM 7

#define REDISMODULE_REPLY_UNKNOWN -1
#define REDISMODULE_REPLY_STRING 0
#define REDISMODULE_REPLY_ERROR 1
#define REDISMODULE_REPLY_INTEGER 2
#define REDISMODULE_REPLY_ARRAY 3
#define REDISMODULE_REPLY_NULL 4

#define REDISMODULE_POSTPONED_LEN -1
#define REDISMODULE_POSTPONED_ARRAY_LEN -1
#define REDISMODULE_NO_EXPIRE -1

#define REDISMODULE_ERRORMSG_WRONGTYPE \
    "WRONGTYPE Operation against a key holding the wrong kind of value"

/* Module options (RedisModule_SetModuleOptions). */
#define REDISMODULE_OPTIONS_HANDLE_IO_ERRORS (1 << 0)
#define REDISMODULE_OPTION_NO_IMPLICIT_SIGNAL_MODIFIED (1 << 1)
#define REDISMODULE_OPTIONS_HANDLE_REPL_ASYNC_LOAD (1 << 2)

/* Module config flags. */
#define REDISMODULE_CONFIG_DEFAULT 0
#define REDISMODULE_CONFIG_IMMUTABLE (1ULL << 0)
#define REDISMODULE_CONFIG_SENSITIVE (1ULL << 1)
#define REDISMODULE_CONFIG_HIDDEN (1ULL << 4)
#define REDISMODULE_CONFIG_PROTECTED (1ULL << 5)
#define REDISMODULE_CONFIG_DENY_LOADING (1ULL << 6)
#define REDISMODULE_CONFIG_MEMORY (1ULL << 7)
#define REDISMODULE_CONFIG_BITFLAGS (1ULL << 8)

/* Context flags (RedisModule_GetContextFlags). */
#define REDISMODULE_CTX_FLAGS_LUA (1 << 0)
#define REDISMODULE_CTX_FLAGS_MULTI (1 << 1)
#define REDISMODULE_CTX_FLAGS_MASTER (1 << 2)
#define REDISMODULE_CTX_FLAGS_SLAVE (1 << 3)
#define REDISMODULE_CTX_FLAGS_READONLY (1 << 4)
#define REDISMODULE_CTX_FLAGS_CLUSTER (1 << 5)
#define REDISMODULE_CTX_FLAGS_AOF (1 << 6)
#define REDISMODULE_CTX_FLAGS_RDB (1 << 7)
#define REDISMODULE_CTX_FLAGS_MAXMEMORY (1 << 8)
#define REDISMODULE_CTX_FLAGS_EVICT (1 << 9)
#define REDISMODULE_CTX_FLAGS_OOM (1 << 10)
#define REDISMODULE_CTX_FLAGS_OOM_WARNING (1 << 11)
#define REDISMODULE_CTX_FLAGS_REPLICATED (1 << 12)
#define REDISMODULE_CTX_FLAGS_LOADING (1 << 13)
#define REDISMODULE_CTX_FLAGS_DENY_BLOCKING (1 << 21)
#define REDISMODULE_CTX_FLAGS_RESP3 (1 << 22)
#define REDISMODULE_CTX_FLAGS_ASYNC_LOADING (1 << 23)

/* Keyspace notification classes. */
#define REDISMODULE_NOTIFY_GENERIC (1 << 2)
#define REDISMODULE_NOTIFY_MODULE (1 << 13)
#define REDISMODULE_NOTIFY_EXPIRED (1 << 8)
#define REDISMODULE_NOTIFY_EVICTED (1 << 9)

/* Server events (SubscribeToServerEvent): the FlushDB event and its data. */
#define REDISMODULE_EVENT_FLUSHDB 2
#define REDISMODULE_SUBEVENT_FLUSHDB_START 0
#define REDISMODULE_SUBEVENT_FLUSHDB_END 1
#define REDISMODULE_EVENT_SWAPDB 11

/* Aux save triggers. */
#define REDISMODULE_AUX_BEFORE_RDB (1 << 0)
#define REDISMODULE_AUX_AFTER_RDB (1 << 1)

/* Command key-spec flags. */
#define REDISMODULE_CMD_KEY_RO (1ULL << 0)
#define REDISMODULE_CMD_KEY_RW (1ULL << 1)
#define REDISMODULE_CMD_KEY_OW (1ULL << 2)
#define REDISMODULE_CMD_KEY_RM (1ULL << 3)
#define REDISMODULE_CMD_KEY_ACCESS (1ULL << 4)
#define REDISMODULE_CMD_KEY_UPDATE (1ULL << 5)
#define REDISMODULE_CMD_KEY_INSERT (1ULL << 6)
#define REDISMODULE_CMD_KEY_DELETE (1ULL << 7)
#define REDISMODULE_CMD_KEY_NOT_KEY (1ULL << 8)
#define REDISMODULE_CMD_KEY_INCOMPLETE (1ULL << 9)
#define REDISMODULE_CMD_KEY_VARIABLE_FLAGS (1ULL << 10)

/* Command argument flags. */
#define REDISMODULE_CMD_ARG_NONE 0
#define REDISMODULE_CMD_ARG_OPTIONAL (1 << 0)
#define REDISMODULE_CMD_ARG_MULTIPLE (1 << 1)
#define REDISMODULE_CMD_ARG_MULTIPLE_TOKEN (1 << 2)

#define REDISMODULE_COMMAND_INFO_VERSION 1

/* ---------------------------------------------------------------------------
 * Opaque handles
 * ------------------------------------------------------------------------- */

typedef struct RedisModuleCtx RedisModuleCtx;
typedef struct RedisModuleString RedisModuleString;
typedef struct RedisModuleKey RedisModuleKey;
typedef struct RedisModuleIO RedisModuleIO;
typedef struct RedisModuleType RedisModuleType;
typedef struct RedisModuleDigest RedisModuleDigest;
typedef struct RedisModuleBlockedClient RedisModuleBlockedClient;
typedef struct RedisModuleCommand RedisModuleCommand;
typedef struct RedisModuleCallReply RedisModuleCallReply;
typedef struct RedisModuleInfoCtx RedisModuleInfoCtx;
typedef struct RedisModuleDefragCtx RedisModuleDefragCtx;
typedef struct RedisModuleServerInfoData RedisModuleServerInfoData;
typedef uint64_t RedisModuleTimerID;

/* ---------------------------------------------------------------------------
 * Callback types
 * ------------------------------------------------------------------------- */

typedef int (*RedisModuleCmdFunc)(RedisModuleCtx *ctx, RedisModuleString **argv, int argc);
typedef void *(*RedisModuleTypeLoadFunc)(RedisModuleIO *rdb, int encver);
typedef void (*RedisModuleTypeSaveFunc)(RedisModuleIO *rdb, void *value);
typedef int (*RedisModuleTypeAuxLoadFunc)(RedisModuleIO *rdb, int encver, int when);
typedef void (*RedisModuleTypeAuxSaveFunc)(RedisModuleIO *rdb, int when);
typedef void (*RedisModuleTypeRewriteFunc)(RedisModuleIO *aof, RedisModuleString *key, void *value);
typedef size_t (*RedisModuleTypeMemUsageFunc)(const void *value);
typedef void (*RedisModuleTypeDigestFunc)(RedisModuleDigest *digest, void *value);
typedef void (*RedisModuleTypeFreeFunc)(void *value);
typedef size_t (*RedisModuleTypeFreeEffortFunc)(RedisModuleString *key, const void *value);
typedef void (*RedisModuleTypeUnlinkFunc)(RedisModuleString *key, const void *value);
typedef void *(*RedisModuleTypeCopyFunc)(RedisModuleString *fromkey, RedisModuleString *tokey,
                                         const void *value);
typedef int (*RedisModuleTypeDefragFunc)(RedisModuleDefragCtx *ctx, RedisModuleString *key,
                                         void **value);
/* The *2 variants (method version 4) receive a key-optimization context; the
 * module does not use them but the slots must exist for the layout. */
typedef size_t (*RedisModuleTypeMemUsageFunc2)(void *ctx, const void *value, size_t sample_size);
typedef size_t (*RedisModuleTypeFreeEffortFunc2)(void *ctx, const void *value);
typedef void (*RedisModuleTypeUnlinkFunc2)(void *ctx, const void *value);
typedef void *(*RedisModuleTypeCopyFunc2)(void *ctx, const void *value);

typedef void (*RedisModuleInfoFunc)(RedisModuleInfoCtx *ctx, int for_crash_report);
typedef void (*RedisModuleTimerProc)(RedisModuleCtx *ctx, void *data);
typedef int (*RedisModuleNotificationFunc)(RedisModuleCtx *ctx, int type, const char *event,
                                           RedisModuleString *key);
typedef void (*RedisModuleEventLoopOneShotFunc)(void *user_data);

/* A server event: its id and the version of the struct passed as 'data'. */
typedef struct RedisModuleEvent {
    uint64_t id;
    uint64_t dataver;
} RedisModuleEvent;
typedef void (*RedisModuleEventCallback)(RedisModuleCtx *ctx, RedisModuleEvent eid,
                                         uint64_t subevent, void *data);
/* Data of the SwapDB event (version 1): the two databases swapped. */
typedef struct RedisModuleSwapDbInfo {
    uint64_t version;
    int32_t dbnum_first;
    int32_t dbnum_second;
} RedisModuleSwapDbInfo;
/* Data of the FlushDB event (version 1); dbnum -1 means every database. */
typedef struct RedisModuleFlushInfo {
    uint64_t version;
    int32_t sync;
    int32_t dbnum;
} RedisModuleFlushInfo;

typedef long long (*RedisModuleConfigGetNumericFunc)(const char *name, void *privdata);
typedef int (*RedisModuleConfigSetNumericFunc)(const char *name, long long val, void *privdata,
                                               RedisModuleString **err);
typedef RedisModuleString *(*RedisModuleConfigGetStringFunc)(const char *name, void *privdata);
typedef int (*RedisModuleConfigSetStringFunc)(const char *name, RedisModuleString *val,
                                              void *privdata, RedisModuleString **err);
typedef int (*RedisModuleConfigApplyFunc)(RedisModuleCtx *ctx, void *privdata,
                                          RedisModuleString **err);

/* ---------------------------------------------------------------------------
 * Structs whose layout the server reads
 * ------------------------------------------------------------------------- */

/* Data type methods: 144 bytes at method version 4 on x86-64. */
typedef struct RedisModuleTypeMethods {
    uint64_t version;
    RedisModuleTypeLoadFunc rdb_load;
    RedisModuleTypeSaveFunc rdb_save;
    RedisModuleTypeRewriteFunc aof_rewrite;
    RedisModuleTypeMemUsageFunc mem_usage;
    RedisModuleTypeDigestFunc digest;
    RedisModuleTypeFreeFunc free;
    RedisModuleTypeAuxLoadFunc aux_load;
    RedisModuleTypeAuxSaveFunc aux_save;
    int aux_save_triggers;
    RedisModuleTypeFreeEffortFunc free_effort;
    RedisModuleTypeUnlinkFunc unlink;
    RedisModuleTypeCopyFunc copy;
    RedisModuleTypeDefragFunc defrag;
    RedisModuleTypeMemUsageFunc2 mem_usage2;
    RedisModuleTypeFreeEffortFunc2 free_effort2;
    RedisModuleTypeUnlinkFunc2 unlink2;
    RedisModuleTypeCopyFunc2 copy2;
} RedisModuleTypeMethods;

typedef enum {
    REDISMODULE_KSPEC_BS_INVALID = 0,
    REDISMODULE_KSPEC_BS_UNKNOWN,
    REDISMODULE_KSPEC_BS_INDEX,
    REDISMODULE_KSPEC_BS_KEYWORD
} RedisModuleKeySpecBeginSearchType;

typedef enum {
    REDISMODULE_KSPEC_FK_OMITTED = 0,
    REDISMODULE_KSPEC_FK_UNKNOWN,
    REDISMODULE_KSPEC_FK_RANGE,
    REDISMODULE_KSPEC_FK_KEYNUM
} RedisModuleKeySpecFindKeysType;

/* One key specification: 56 bytes. */
typedef struct RedisModuleCommandKeySpec {
    const char *notes;
    uint64_t flags;
    RedisModuleKeySpecBeginSearchType begin_search_type;
    union {
        struct {
            int pos;
        } index;
        struct {
            const char *keyword;
            int startfrom;
        } keyword;
    } bs;
    RedisModuleKeySpecFindKeysType find_keys_type;
    union {
        struct {
            int lastkey;
            int keystep;
            int limit;
        } range;
        struct {
            int keynumidx;
            int firstkey;
            int keystep;
        } keynum;
    } fk;
} RedisModuleCommandKeySpec;

typedef enum {
    REDISMODULE_ARG_TYPE_STRING = 0,
    REDISMODULE_ARG_TYPE_INTEGER,
    REDISMODULE_ARG_TYPE_DOUBLE,
    REDISMODULE_ARG_TYPE_KEY,
    REDISMODULE_ARG_TYPE_PATTERN,
    REDISMODULE_ARG_TYPE_UNIX_TIME,
    REDISMODULE_ARG_TYPE_PURE_TOKEN,
    REDISMODULE_ARG_TYPE_ONEOF,
    REDISMODULE_ARG_TYPE_BLOCK
} RedisModuleCommandArgType;

/* One command argument: 64 bytes. */
typedef struct RedisModuleCommandArg {
    const char *name;
    RedisModuleCommandArgType type;
    int key_spec_index;
    const char *token;
    const char *summary;
    const char *since;
    int flags;
    const char *deprecated_since;
    struct RedisModuleCommandArg *subargs;
} RedisModuleCommandArg;

/* One history entry: 16 bytes. */
typedef struct RedisModuleCommandHistoryEntry {
    const char *since;
    const char *changes;
} RedisModuleCommandHistoryEntry;

/* Tells the server the sizes of the structs this module was built with. */
typedef struct RedisModuleCommandInfoVersion {
    int version;
    size_t sizeof_historyentry;
    size_t sizeof_keyspec;
    size_t sizeof_arg;
} RedisModuleCommandInfoVersion;

/* Command info: 72 bytes. */
typedef struct RedisModuleCommandInfo {
    const RedisModuleCommandInfoVersion *version;
    const char *summary;
    const char *complexity;
    const char *since;
    RedisModuleCommandHistoryEntry *history;
    const char *tips;
    int arity;
    RedisModuleCommandKeySpec *key_specs;
    RedisModuleCommandArg *args;
} RedisModuleCommandInfo;

/* ---------------------------------------------------------------------------
 * API function pointers
 *
 * Declared 'extern' here and defined once in module.c (PS_REDISMODULE_DEFINE),
 * hidden from the dynamic symbol table like everything but RedisModule_OnLoad.
 * ------------------------------------------------------------------------- */

#ifdef PS_REDISMODULE_DEFINE
#define PS_API(ret, name, args) ret(*RedisModule_##name) args = NULL
#else
#define PS_API(ret, name, args) extern ret(*RedisModule_##name) args
#endif

/* Required APIs: OnLoad fails if the server lacks one of these. */
#define PS_API_REQUIRED(X) \
    X(void *, Alloc, (size_t bytes)) \
    X(void *, TryAlloc, (size_t bytes)) \
    X(void *, Calloc, (size_t nmemb, size_t size)) \
    X(void *, Realloc, (void *ptr, size_t bytes)) \
    X(void, Free, (void *ptr)) \
    X(int, IsModuleNameBusy, (const char *name)) \
    X(void, SetModuleAttribs, (RedisModuleCtx *ctx, const char *name, int ver, int apiver)) \
    X(int, CreateCommand, (RedisModuleCtx *ctx, const char *name, RedisModuleCmdFunc cmdfunc, \
                           const char *strflags, int firstkey, int lastkey, int keystep)) \
    X(RedisModuleCommand *, GetCommand, (RedisModuleCtx *ctx, const char *name)) \
    X(int, SetCommandInfo, (RedisModuleCommand *command, const RedisModuleCommandInfo *info)) \
    X(int, WrongArity, (RedisModuleCtx *ctx)) \
    X(int, ReplyWithLongLong, (RedisModuleCtx *ctx, long long ll)) \
    X(int, ReplyWithError, (RedisModuleCtx *ctx, const char *err)) \
    X(int, ReplyWithSimpleString, (RedisModuleCtx *ctx, const char *msg)) \
    X(int, ReplyWithArray, (RedisModuleCtx *ctx, long len)) \
    X(void, ReplySetArrayLength, (RedisModuleCtx *ctx, long len)) \
    X(int, ReplyWithStringBuffer, (RedisModuleCtx *ctx, const char *buf, size_t len)) \
    X(int, ReplyWithCString, (RedisModuleCtx *ctx, const char *buf)) \
    X(int, ReplyWithString, (RedisModuleCtx *ctx, RedisModuleString *str)) \
    X(int, ReplyWithNull, (RedisModuleCtx *ctx)) \
    X(int, ReplyWithDouble, (RedisModuleCtx *ctx, double d)) \
    X(const char *, StringPtrLen, (const RedisModuleString *str, size_t *len)) \
    X(int, StringToLongLong, (const RedisModuleString *str, long long *ll)) \
    X(int, StringToDouble, (const RedisModuleString *str, double *d)) \
    X(RedisModuleString *, CreateString, (RedisModuleCtx *ctx, const char *ptr, size_t len)) \
    X(RedisModuleString *, CreateStringFromLongLong, (RedisModuleCtx *ctx, long long ll)) \
    X(RedisModuleString *, CreateStringPrintf, (RedisModuleCtx *ctx, const char *fmt, ...)) \
    X(void, FreeString, (RedisModuleCtx *ctx, RedisModuleString *str)) \
    X(void *, OpenKey, (RedisModuleCtx *ctx, RedisModuleString *keyname, int mode)) \
    X(void, CloseKey, (RedisModuleKey *kp)) \
    X(int, KeyType, (RedisModuleKey *kp)) \
    X(int, DeleteKey, (RedisModuleKey *key)) \
    X(RedisModuleType *, ModuleTypeGetType, (RedisModuleKey *key)) \
    X(void *, ModuleTypeGetValue, (RedisModuleKey *key)) \
    X(int, ModuleTypeSetValue, (RedisModuleKey *key, RedisModuleType *mt, void *value)) \
    X(int, ReplicateVerbatim, (RedisModuleCtx *ctx)) \
    X(int, Replicate, (RedisModuleCtx *ctx, const char *cmdname, const char *fmt, ...)) \
    X(RedisModuleType *, CreateDataType, (RedisModuleCtx *ctx, const char *name, int encver, \
                                          RedisModuleTypeMethods *typemethods)) \
    X(void, SaveUnsigned, (RedisModuleIO *io, uint64_t value)) \
    X(uint64_t, LoadUnsigned, (RedisModuleIO *io)) \
    X(void, SaveSigned, (RedisModuleIO *io, int64_t value)) \
    X(int64_t, LoadSigned, (RedisModuleIO *io)) \
    X(void, SaveStringBuffer, (RedisModuleIO *io, const char *str, size_t len)) \
    X(char *, LoadStringBuffer, (RedisModuleIO *io, size_t *lenptr)) \
    X(void, SaveDouble, (RedisModuleIO *io, double value)) \
    X(double, LoadDouble, (RedisModuleIO *io)) \
    X(void, EmitAOF, (RedisModuleIO *io, const char *cmdname, const char *fmt, ...)) \
    X(int, IsIOError, (RedisModuleIO *io)) \
    X(void, SetModuleOptions, (RedisModuleCtx *ctx, int options)) \
    X(void, DigestAddStringBuffer, (RedisModuleDigest *md, const char *ele, size_t len)) \
    X(void, DigestAddLongLong, (RedisModuleDigest *md, long long ele)) \
    X(void, DigestEndSequence, (RedisModuleDigest *md)) \
    X(void, Log, (RedisModuleCtx *ctx, const char *level, const char *fmt, ...)) \
    X(void, LogIOError, (RedisModuleIO *io, const char *levelstr, const char *fmt, ...)) \
    X(int, NotifyKeyspaceEvent, (RedisModuleCtx *ctx, int type, const char *event, \
                                 RedisModuleString *key)) \
    X(int, GetContextFlags, (RedisModuleCtx *ctx)) \
    X(long long, Milliseconds, (void)) \
    X(void, GetRandomBytes, (unsigned char *dst, size_t len)) \
    X(int, RegisterNumericConfig, (RedisModuleCtx *ctx, const char *name, long long default_val, \
                                   unsigned int flags, long long min, long long max, \
                                   RedisModuleConfigGetNumericFunc getfn, \
                                   RedisModuleConfigSetNumericFunc setfn, \
                                   RedisModuleConfigApplyFunc applyfn, void *privdata)) \
    X(int, RegisterStringConfig, (RedisModuleCtx *ctx, const char *name, const char *default_val, \
                                  unsigned int flags, RedisModuleConfigGetStringFunc getfn, \
                                  RedisModuleConfigSetStringFunc setfn, \
                                  RedisModuleConfigApplyFunc applyfn, void *privdata)) \
    X(int, LoadConfigs, (RedisModuleCtx *ctx)) \
    X(int, RegisterInfoFunc, (RedisModuleCtx *ctx, RedisModuleInfoFunc cb)) \
    X(int, InfoAddSection, (RedisModuleInfoCtx *ctx, const char *name)) \
    X(int, InfoAddFieldLongLong, (RedisModuleInfoCtx *ctx, const char *field, long long value)) \
    X(int, InfoAddFieldULongLong, (RedisModuleInfoCtx *ctx, const char *field, \
                                   unsigned long long value)) \
    X(RedisModuleBlockedClient *, BlockClientOnKeys, \
      (RedisModuleCtx *ctx, RedisModuleCmdFunc reply_callback, \
       RedisModuleCmdFunc timeout_callback, void (*free_privdata)(RedisModuleCtx *, void *), \
       long long timeout_ms, RedisModuleString **keys, int numkeys, void *privdata)) \
    X(void, SignalKeyAsReady, (RedisModuleCtx *ctx, RedisModuleString *key)) \
    X(RedisModuleString *, GetBlockedClientReadyKey, (RedisModuleCtx *ctx)) \
    X(void *, GetBlockedClientPrivateData, (RedisModuleCtx *ctx)) \
    X(RedisModuleTimerID, CreateTimer, (RedisModuleCtx *ctx, long long period, \
                                        RedisModuleTimerProc callback, void *data)) \
    X(int, StopTimer, (RedisModuleCtx *ctx, RedisModuleTimerID id, void **data)) \
    X(RedisModuleCtx *, GetDetachedThreadSafeContext, (RedisModuleCtx *ctx)) \
    X(void, FreeThreadSafeContext, (RedisModuleCtx *ctx)) \
    X(RedisModuleString *, GetKeyNameFromModuleKey, (RedisModuleKey *key)) \
    X(int, KeyExists, (RedisModuleCtx *ctx, RedisModuleString *keyname)) \
    X(int, GetSelectedDb, (RedisModuleCtx *ctx)) \
    X(int, SelectDb, (RedisModuleCtx *ctx, int newid)) \
    X(int, AvoidReplicaTraffic, (void)) \
    X(int, UnblockClient, (RedisModuleBlockedClient *bc, void *privdata)) \
    X(RedisModuleBlockedClient *, GetBlockedClientHandle, (RedisModuleCtx *ctx)) \
    X(int, SubscribeToKeyspaceEvents, (RedisModuleCtx *ctx, int types, \
                                       RedisModuleNotificationFunc cb)) \
    X(int, SubscribeToServerEvent, (RedisModuleCtx *ctx, RedisModuleEvent event, \
                                    RedisModuleEventCallback callback)) \
    X(int, EventLoopAddOneShot, (RedisModuleEventLoopOneShotFunc func, void *user_data)) \
    X(RedisModuleServerInfoData *, GetServerInfo, (RedisModuleCtx *ctx, const char *section)) \
    X(void, FreeServerInfo, (RedisModuleCtx *ctx, RedisModuleServerInfoData *data)) \
    X(unsigned long long, ServerInfoGetFieldUnsigned, \
      (RedisModuleServerInfoData *data, const char *field, int *out_err))

#define PS_API_DECLARE(ret, name, args) PS_API(ret, name, args);
PS_API_REQUIRED(PS_API_DECLARE)
PS_API(int, GetApi, (const char *, void *));
#undef PS_API_DECLARE

/* Fills every API pointer through the server's lookup function and registers
 * the module name. Returns REDISMODULE_ERR (after logging nothing: the caller
 * logs 'missing') when a required API is absent or the name is taken; on
 * failure *missing names the first API not found. */
static inline int RedisModule_Init(RedisModuleCtx *ctx, const char *name, int ver, int apiver,
                                   const char **missing) {
    void *getapifuncptr = ((void **)ctx)[0];
    RedisModule_GetApi = (int (*)(const char *, void *))(uintptr_t)getapifuncptr;
    *missing = NULL;
#define PS_API_LOOKUP(ret, fname, args) \
    if (RedisModule_GetApi("RedisModule_" #fname, (void *)&RedisModule_##fname) != REDISMODULE_OK) { \
        *missing = "RedisModule_" #fname; \
        return REDISMODULE_ERR; \
    }
    PS_API_REQUIRED(PS_API_LOOKUP)
#undef PS_API_LOOKUP
    if (RedisModule_IsModuleNameBusy(name)) return REDISMODULE_ERR;
    RedisModule_SetModuleAttribs(ctx, name, ver, apiver);
    return REDISMODULE_OK;
}

#endif /* PS_REDISMODULE_H */
