/* cmd_table.c -- the command table: every command of the module with its
 * flags, arity, key specs and COMMAND DOCS, registered from OnLoad by
 * PSCommands_Register, and the routers of the verbs that serve both value
 * types. Adding a command is one row here, its handler in the cmd_*.c file
 * of its family (declared in ps_module.h or embed_glue.h) and its docs in
 * docs/commands.md.
 *
 * Every command takes one key, at argv[1] (first, last, step = 1, 1, 1).
 *
 * Routing (docs/design.md "Routing a command"): a row of a shared verb
 * names its router below, which routes once: it opens the key once, takes
 * tensor or table from the key's type (never from the arguments), parses
 * the arguments once into the command's struct (args.h), then calls the
 * tensor handler (cmd_push.c, cmd_tensor.c) or the table handler
 * (cmd_embed.c), which calls the core (tensor.c, embed_once.c). PS.CREATE
 * has no key to look at yet: EMBEDDING at argv[2] is its table form. */

#include <string.h>

#include "args.h"
#include "cmd_score.h"
#include "embed_glue.h"
#include "ps_module.h"

/* ========================================================================
 * Routers of the shared verbs
 * ====================================================================== */

/* The table held by an open key of kind PS_KIND_TABLE, or NULL after
 * replying BUSY while a PS._RESTORE EMBED is rebuilding it. */
static PSEmbedValue *table_ready(RedisModuleCtx *ctx, RedisModuleKey *key) {
    PSEmbedValue *v = RedisModule_ModuleTypeGetValue(key);
    if (!v->restoring) return v;
    RedisModule_ReplyWithError(ctx, PSERR_EMBED_RESTORING);
    return NULL;
}

/* PS.CREATE key (SHAPE ... | EMBEDDING ...) */
static int route_create(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    if (argc < 4) return RedisModule_WrongArity(ctx);
    if (ps_arg_is(argv[2], "EMBEDDING")) return ps_table_create(ctx, argv, argc);
    return ps_tensor_create(ctx, argv, argc);
}

/* PS.PUSHGRAD key ... (args.h PSPushArgs) */
static int route_push(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    if (argc < 3) return RedisModule_WrongArity(ctx);
    RedisModuleKey *key = RedisModule_OpenKey(ctx, argv[1], REDISMODULE_READ | REDISMODULE_WRITE);
    const PSKeyKind kind = ps_key_kind(key);
    PSPushArgs a;
    if (ps_args_push(ctx, argv, argc, kind, &a) == REDISMODULE_OK) {
        PSEmbedValue *v;
        if (kind == PS_KIND_TENSOR) ps_tensor_push(ctx, argv, RedisModule_ModuleTypeGetValue(key), &a);
        else if (kind != PS_KIND_TABLE) ps_reply_kind(ctx, kind);
        else if ((v = table_ready(ctx, key))) ps_table_push(ctx, argv, v, &a);
    }
    RedisModule_CloseKey(key);
    return REDISMODULE_OK;
}

/* PS.PULL key ... (args.h PSPullArgs) */
static int route_pull(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    if (argc < 2) return RedisModule_WrongArity(ctx);
    RedisModuleKey *key = RedisModule_OpenKey(ctx, argv[1], REDISMODULE_READ);
    const PSKeyKind kind = ps_key_kind(key);
    PSPullArgs a;
    if (ps_args_pull(ctx, argv, argc, kind, &a) == REDISMODULE_OK) {
        PSEmbedValue *v;
        if (kind == PS_KIND_TENSOR) ps_tensor_pull(ctx, argv, RedisModule_ModuleTypeGetValue(key), &a);
        else if (kind != PS_KIND_TABLE) ps_reply_kind(ctx, kind);
        else if ((v = table_ready(ctx, key))) ps_table_pull(ctx, v, &a);
    }
    RedisModule_CloseKey(key);
    return REDISMODULE_OK;
}

/* PS.INFO key */
static int route_info(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    if (argc != 2) return RedisModule_WrongArity(ctx);
    RedisModuleKey *key = RedisModule_OpenKey(ctx, argv[1], REDISMODULE_READ);
    const PSKeyKind kind = ps_key_kind(key);
    PSEmbedValue *v;
    if (kind == PS_KIND_TENSOR) ps_tensor_info(ctx, RedisModule_ModuleTypeGetValue(key));
    else if (kind != PS_KIND_TABLE) ps_reply_kind(ctx, kind);
    else if ((v = table_ready(ctx, key))) ps_table_info(ctx, v);
    RedisModule_CloseKey(key);
    return REDISMODULE_OK;
}

/* PS.CONFIG key param value [param value ...]: each type parses its own
 * parameters (cmd_tensor.c, cmd_embed.c). */
static int route_config(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    if (argc < 4 || (argc - 2) % 2) return RedisModule_WrongArity(ctx);
    RedisModuleKey *key = RedisModule_OpenKey(ctx, argv[1], REDISMODULE_READ | REDISMODULE_WRITE);
    const PSKeyKind kind = ps_key_kind(key);
    PSEmbedValue *v;
    if (kind == PS_KIND_TENSOR) ps_tensor_config(ctx, argv, argc, RedisModule_ModuleTypeGetValue(key));
    else if (kind != PS_KIND_TABLE) ps_reply_kind(ctx, kind);
    else if ((v = table_ready(ctx, key))) ps_table_config(ctx, argv, argc, v);
    RedisModule_CloseKey(key);
    return REDISMODULE_OK;
}

/* ========================================================================
 * Key specs: the one key at argv[1], by how the command touches it
 * ====================================================================== */

#define PS_KEY_AT_1(fl)                                                                  \
    {{.flags = (fl), .begin_search_type = REDISMODULE_KSPEC_BS_INDEX, .bs.index.pos = 1, \
      .find_keys_type = REDISMODULE_KSPEC_FK_RANGE, .fk.range = {0, 1, 0}},              \
     {0}}

static RedisModuleCommandKeySpec ReadKey[] = PS_KEY_AT_1(REDISMODULE_CMD_KEY_RO | REDISMODULE_CMD_KEY_ACCESS);
static RedisModuleCommandKeySpec WriteKey[] = PS_KEY_AT_1(REDISMODULE_CMD_KEY_RW | REDISMODULE_CMD_KEY_UPDATE);
static RedisModuleCommandKeySpec InsertKey[] = PS_KEY_AT_1(REDISMODULE_CMD_KEY_RW | REDISMODULE_CMD_KEY_INSERT);
static RedisModuleCommandKeySpec OverwriteKey[] = PS_KEY_AT_1(REDISMODULE_CMD_KEY_OW | REDISMODULE_CMD_KEY_UPDATE);

/* ========================================================================
 * Arguments (COMMAND DOCS)
 * ====================================================================== */

static RedisModuleCommandArg CreateArgs[] = {
    PS_ARG_KEY,
    PS_ARG("dims", "SHAPE", INTEGER, REDISMODULE_CMD_ARG_MULTIPLE),
    PS_ARG("init", "INIT", STRING, PS_ARG_OPTIONAL),
    PS_ARG("data", "DATA", STRING, PS_ARG_OPTIONAL),
    PS_ARG("format", "FORMAT", STRING, PS_ARG_OPTIONAL),
    PS_ARG("seed", "SEED", INTEGER, PS_ARG_OPTIONAL),
    PS_ARG("optim", "OPTIM", STRING, PS_ARG_OPTIONAL),
#define PS_HP_ARG(K, f, d, r, s) PS_ARG(#f, #K, DOUBLE, PS_ARG_OPTIONAL),
    PS_HYPERPARAMS(PS_HP_ARG)
#undef PS_HP_ARG
    PS_ARG("maxstaleness", "MAXSTALENESS", INTEGER, PS_ARG_OPTIONAL),
    PS_ARG("policy", "POLICY", STRING, PS_ARG_OPTIONAL),
    PS_ARG("sync", "SYNC", INTEGER, PS_ARG_OPTIONAL),
    PS_ARG("timeout", "TIMEOUT", INTEGER, PS_ARG_OPTIONAL),
    PS_ARG("dedupmax", "DEDUPMAX", INTEGER, PS_ARG_OPTIONAL),
    PS_ARG("maxsnapshots", "MAXSNAPSHOTS", INTEGER, PS_ARG_OPTIONAL),
    PS_ARG_FLAG("nx", "NX"),
    /* The table form (route_create): PS.CREATE key EMBEDDING DIM d ... */
    PS_ARG_FLAG("embedding", "EMBEDDING"),
    PS_ARG("dim", "DIM", INTEGER, PS_ARG_OPTIONAL),
    PS_ARG("admit", "ADMIT", INTEGER, PS_ARG_OPTIONAL),
    PS_ARG("filter", "FILTER", INTEGER, PS_ARG_OPTIONAL),
    PS_ARG("capacity", "CAPACITY", INTEGER, PS_ARG_OPTIONAL),
    PS_ARG("ttl", "TTL", INTEGER, PS_ARG_OPTIONAL),
    PS_ARG("unknown", "UNKNOWN", STRING, PS_ARG_OPTIONAL),
    {0}};
static RedisModuleCommandArg SetArgs[] = {
    PS_ARG_KEY, PS_ARG("data", NULL, STRING, 0), PS_ARG("format", "FORMAT", STRING, PS_ARG_OPTIONAL), {0}};
static RedisModuleCommandArg KeyArgs[] = {PS_ARG_KEY, {0}};
static RedisModuleCommandArg ConfigArgs[] = {
    PS_ARG_KEY, PS_ARG("param", NULL, STRING, 0),
    PS_ARG("value", NULL, STRING, REDISMODULE_CMD_ARG_MULTIPLE), {0}};
static RedisModuleCommandArg RestoreArgs[] = {
    PS_ARG_KEY, PS_ARG("part", NULL, STRING, 0),
    PS_ARG("arg", NULL, STRING, REDISMODULE_CMD_ARG_MULTIPLE), {0}};
static RedisModuleCommandArg PushArgs[] = {
    PS_ARG_KEY,
    PS_ARG("gradient", NULL, STRING, 0),
    PS_ARG("format", "FORMAT", STRING, PS_ARG_OPTIONAL),
    PS_ARG("rows", "ROWS", STRING, PS_ARG_OPTIONAL),
    PS_ARG("version", "VERSION", INTEGER, PS_ARG_OPTIONAL),
    PS_ARG("id", "ID", STRING, PS_ARG_OPTIONAL),
    PS_ARG("scale", "SCALE", DOUBLE, PS_ARG_OPTIONAL),
    PS_ARG("ids", "IDS", STRING, PS_ARG_OPTIONAL), /* tables */
    {0}};
static RedisModuleCommandArg PullArgs[] = {
    PS_ARG_KEY,
    PS_ARG("format", "FORMAT", STRING, PS_ARG_OPTIONAL),
    PS_ARG("rows", "ROWS", STRING, PS_ARG_OPTIONAL),
    PS_ARG("snapshot", "AT", STRING, PS_ARG_OPTIONAL),
    PS_ARG("minversion", "MINVERSION", INTEGER, PS_ARG_OPTIONAL),
    PS_ARG("timeout", "TIMEOUT", INTEGER, PS_ARG_OPTIONAL),
    PS_ARG("ids", "IDS", STRING, PS_ARG_OPTIONAL), /* tables */
    {0}};
static RedisModuleCommandArg CloseRoundArgs[] = {
    PS_ARG_KEY, PS_ARG("version", NULL, INTEGER, 0), {0}};
static RedisModuleCommandArg NameArgs[] = {PS_ARG_KEY, PS_ARG("name", NULL, STRING, 0), {0}};
static RedisModuleCommandArg ScanRowsArgs[] = {
    PS_ARG_KEY, PS_ARG("cursor", NULL, STRING, 0),
    PS_ARG("since", "SINCE", INTEGER, PS_ARG_OPTIONAL),
    PS_ARG("count", "COUNT", INTEGER, PS_ARG_OPTIONAL),
    PS_ARG("format", "FORMAT", STRING, PS_ARG_OPTIONAL),
    PS_ARG("gone", "GONE", PURE_TOKEN, PS_ARG_OPTIONAL), {0}};
static RedisModuleCommandArg TombArgs[] = {
    PS_ARG_KEY, PS_ARG("cursor", NULL, STRING, 0),
    PS_ARG("since", "SINCE", INTEGER, 0),
    PS_ARG("count", "COUNT", INTEGER, PS_ARG_OPTIONAL), {0}};
static RedisModuleCommandArg ScoreArgs[] = {
    PS_ARG_KEY, PS_ARG("model", "MODEL", STRING, 0), PS_ARG("counts", "COUNTS", STRING, 0),
    PS_ARG("ids", "IDS", STRING, 0), PS_ARG("vals", "VALS", STRING, PS_ARG_OPTIONAL),
    PS_ARG("bias", "BIAS", DOUBLE, PS_ARG_OPTIONAL),
    PS_ARG("format", "FORMAT", STRING, PS_ARG_OPTIONAL),
    PS_ARG("fields", "FIELDS", STRING, PS_ARG_OPTIONAL),
    PS_ARG("fieldcount", "FIELDCOUNT", INTEGER, PS_ARG_OPTIONAL), {0}};
static RedisModuleCommandArg EvictArgs[] = {PS_ARG_KEY, PS_ARG("age", "AGE", INTEGER, 0), {0}};
static RedisModuleCommandArg TakeArgs[] = {
    PS_ARG_KEY, PS_ARG("mincount", "MINCOUNT", INTEGER, PS_ARG_OPTIONAL),
    PS_ARG("seqfloor", "SEQFLOOR", INTEGER, PS_ARG_OPTIONAL),
    PS_ARG("maxround", "MAXROUND", INTEGER, PS_ARG_OPTIONAL),
    PS_ARG("maxbacklog", "MAXBACKLOG", INTEGER, PS_ARG_OPTIONAL), {0}};
static RedisModuleCommandArg TakeWaitArgs[] = {
    PS_ARG_KEY, PS_ARG("mincount", "MINCOUNT", INTEGER, 0),
    PS_ARG("timeout", "TIMEOUT", INTEGER, PS_ARG_OPTIONAL), {0}};
static RedisModuleCommandArg TakeAckArgs[] = {PS_ARG_KEY, PS_ARG("seq", NULL, INTEGER, 0), {0}};
static RedisModuleCommandArg MirrorArgs[] = {
    PS_ARG_KEY, PS_ARG("version", NULL, INTEGER, 0), PS_ARG("data", NULL, STRING, 0), {0}};
static RedisModuleCommandArg RingArgs[] = {
    PS_ARG_KEY, PS_ARG("subcommand", NULL, STRING, 0),
    PS_ARG("arg", NULL, STRING, REDISMODULE_CMD_ARG_OPTIONAL | REDISMODULE_CMD_ARG_MULTIPLE), {0}};
static RedisModuleCommandArg DeltaTakeArgs[] = {
    PS_ARG_KEY, PS_ARG("seqfloor", "SEQFLOOR", INTEGER, PS_ARG_OPTIONAL),
    PS_ARG("threshold", "THRESHOLD", DOUBLE, PS_ARG_OPTIONAL),
    PS_ARG("maxelems", "MAXELEMS", INTEGER, PS_ARG_OPTIONAL), {0}};
static RedisModuleCommandArg ApplyDeltaArgs[] = {
    PS_ARG_KEY, PS_ARG("origin", "ID", STRING, 0), PS_ARG("seq", NULL, INTEGER, 0),
    PS_ARG("indices", NULL, STRING, 0), PS_ARG("values", NULL, STRING, 0),
    PS_ARG("hops", "HOPS", INTEGER, PS_ARG_OPTIONAL), {0}};
static RedisModuleCommandArg FwdAckArgs[] = {
    PS_ARG_KEY, PS_ARG("origin", NULL, STRING, 0), PS_ARG("seq", NULL, INTEGER, 0), {0}};
static RedisModuleCommandArg SnapArgs[] = {
    PS_ARG_KEY, PS_ARG("name", NULL, STRING, 0), PS_ARG("unix-ms", "TIME", INTEGER, PS_ARG_OPTIONAL), {0}};

/* ========================================================================
 * The table
 * ====================================================================== */

typedef struct PSCommandDef {
    const char *name; /* lower case */
    RedisModuleCmdFunc handler;
    const char *flags;
    int arity;
    RedisModuleCommandKeySpec *key;
    RedisModuleCommandArg *args;
    const char *summary;
    const char *complexity;
} PSCommandDef;

#define PS_O_N "O(N) where N is the number of elements"
#define PS_O_ROWS "O(N) where N is the number of elements (or of the given rows)"

static const PSCommandDef PSCommands[] = {
    /* routed (above): cmd_tensor.c for tensors, cmd_embed.c for tables */
    {"ps.create", route_create, "write deny-oom", -4, InsertKey, CreateArgs,
     "Creates a tensor with a shape, initial values and an optimizer", PS_O_N},
    /* cmd_tensor.c */
    {"ps.set", PSSet_RedisCommand, "write deny-oom", -3, WriteKey, SetArgs,
     "Overwrites the values of a tensor; returns the new version", PS_O_N},
    {"ps.info", route_info, "readonly fast", 2, ReadKey, KeyArgs,
     "Returns shape, version, optimizer settings and counters of a tensor",
     "O(1) (O(N) for a ring-tracked tensor)"},
    {"ps.config", route_config, "write", -4, WriteKey, ConfigArgs,
     "Changes hyper-parameters and policies of a tensor while it trains", "O(1)"},
    /* cmd_restore.c */
    {"ps._restore", PSRestore_RedisCommand, "write deny-oom", -3, OverwriteKey, RestoreArgs,
     "Internal: rebuilds a tensor from an AOF rewrite", "O(N) where N is the size of the argument"},
    /* routed (above): cmd_push.c for tensors, cmd_embed.c for tables */
    {"ps.pushgrad", route_push, "write deny-oom", -3, WriteKey, PushArgs,
     "Applies a gradient with the tensor's optimizer; returns the new version", PS_O_ROWS},
    {"ps.pull", route_pull, "readonly blocking", -2, ReadKey, PullArgs,
     "Returns [version, values] of a tensor, optionally waiting for a version", PS_O_ROWS},
    /* cmd_round.c */
    {"ps._closeround", PSCloseRound_RedisCommand, "write", 3, WriteKey, CloseRoundArgs,
     "Internal: closes a sync round (replicated effect of a master's timer)", PS_O_N},
    /* cmd_snapshot.c */
    {"ps.snapshot", PSSnapshot_RedisCommand, "write deny-oom", -3, WriteKey, SnapArgs,
     "Takes an immutable named snapshot of values and optimizer state",
     "O(1) (copy on the next write)"},
    {"ps.snapshots", PSSnapshots_RedisCommand, "readonly", 2, ReadKey, KeyArgs,
     "Lists the snapshots of a tensor: name, version, unix-ms",
     "O(S) where S is the number of snapshots"},
    {"ps.rollback", PSRollback_RedisCommand, "write deny-oom", 3, WriteKey, NameArgs,
     "Restores values and optimizer state from a snapshot as a new version", "O(1)"},
    {"ps.dropsnapshot", PSDropSnapshot_RedisCommand, "write", 3, WriteKey, NameArgs,
     "Drops a snapshot", "O(S) where S is the number of snapshots"},
    /* cmd_embed.c (tables only) */
    {"ps.scanrows", PSScanRows_RedisCommand, "readonly", -3, ReadKey, ScanRowsArgs,
     "Export scan of an embedding table: rows changed since a version, by cursor",
     "O(COUNT) per call, O(N) for a full scan where N is the number of rows"},
    {"ps.tombstones", PSTombstones_RedisCommand, "readonly", -5, ReadKey, TombArgs,
     "Rows of an embedding table removed since a version (the tombstone log), by cursor",
     "O(COUNT) per call, O(T) for the whole log where T is its size"},
    {"ps.evict", PSEvict_RedisCommand, "write", 4, WriteKey, EvictArgs,
     "Removes the rows of an embedding table not pushed for AGE versions; returns how many",
     "O(N) where N is the number of rows"},
    /* cmd_score.c */
    {"ps.score", PSScore_RedisCommand, "readonly", -8, ReadKey, ScoreArgs,
     "Answers [version, logits] of a batch of samples under the LR or FM model of a table, "
     "or [version, pooled inputs] under the MLP's",
     "O(N * dim) where N is the number of ids"},
    /* cmd_relay.c */
    {"ps.take", PSTake_RedisCommand, "write", -2, WriteKey, TakeArgs,
     "Moves the summed gradient of an ACCUM tensor into its pending slot (or answers the slot)",
     PS_O_N},
    {"ps.takeack", PSTakeAck_RedisCommand, "write fast", 3, WriteKey, TakeAckArgs,
     "Drops the pending slot of an ACCUM tensor once its upstream push was acknowledged",
     "O(1)"},
    {"ps.mirror", PSMirror_RedisCommand, "write deny-oom", 4, WriteKey, MirrorArgs,
     "Sets the values and version of an ACCUM tensor to the upstream tensor's", PS_O_N},
    {"ps.takewait", PSTakeWait_RedisCommand, "readonly", -4, ReadKey, TakeWaitArgs,
     "Waits until an ACCUM tensor has MINCOUNT pushes summed or a pending take (or TIMEOUT)",
     "O(1)"},
    /* cmd_ring.c (tensors; tables answer that they are not tracked yet) */
    {"ps.ring", PSRing_RedisCommand, "write deny-oom", -3, WriteKey, RingArgs,
     "Ring tracking of a tensor: TRACK origin, STATE (what a joining group copies), JOIN, UNTRACK",
     PS_O_N},
    {"ps.deltatake", PSDeltaTake_RedisCommand, "write", -2, WriteKey, DeltaTakeArgs,
     "Takes the significant part of the group's own change of a ring-tracked tensor (pending until acked)",
     "O(N) where N is the number of elements (O(N log N) with MAXELEMS)"},
    {"ps.deltaack", PSDeltaAck_RedisCommand, "write fast", 3, WriteKey, TakeAckArgs,
     "Drops the pending ring take of that seq", "O(1)"},
    {"ps.applydelta", PSApplyDelta_RedisCommand, "write deny-oom", -7, WriteKey, ApplyDeltaArgs,
     "Adds another group's delta to a ring-tracked tensor once per (origin, seq), without the optimizer",
     "O(K) where K is the number of elements of the delta"},
    {"ps.deltafwd", PSDeltaFwd_RedisCommand, "readonly", 2, ReadKey, KeyArgs,
     "Answers the oldest received delta still to be forwarded around the ring", "O(K)"},
    {"ps.deltafwdack", PSDeltaFwdAck_RedisCommand, "write fast", 4, WriteKey, FwdAckArgs,
     "Pops the oldest forward entry once it was passed on to the successor", "O(1)"},
};


static const RedisModuleCommandInfoVersion PSCommandInfoVersion = {
    .version = REDISMODULE_COMMAND_INFO_VERSION,
    .sizeof_historyentry = sizeof(RedisModuleCommandHistoryEntry),
    .sizeof_keyspec = sizeof(RedisModuleCommandKeySpec),
    .sizeof_arg = sizeof(RedisModuleCommandArg),
};

int PSCommands_Register(RedisModuleCtx *ctx) {
    for (size_t i = 0; i < sizeof(PSCommands) / sizeof(PSCommands[0]); i++) {
        const PSCommandDef *d = &PSCommands[i];
        if (RedisModule_CreateCommand(ctx, d->name, d->handler, d->flags, 1, 1, 1) ==
            REDISMODULE_ERR) {
            RedisModule_Log(ctx, "warning", "could not register command %s", d->name);
            return REDISMODULE_ERR;
        }
        const RedisModuleCommandInfo info = {
            .version = &PSCommandInfoVersion,
            .summary = d->summary,
            .complexity = d->complexity,
            .since = "0.1.0",
            .arity = d->arity,
            .key_specs = d->key,
            .args = d->args,
        };
        RedisModuleCommand *cmd = RedisModule_GetCommand(ctx, d->name);
        if (!cmd || RedisModule_SetCommandInfo(cmd, &info) == REDISMODULE_ERR) {
            RedisModule_Log(ctx, "warning", "could not set command info of %s", d->name);
            return REDISMODULE_ERR;
        }
    }
    return REDISMODULE_OK;
}
