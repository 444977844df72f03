/* ps_module.h -- what the glue files (module.c, glue.c, args.c, type.c,
 * cmd_*.c) share: the registered type, module configs, module-wide counters,
 * the helpers of glue.c, the argument parsing of args.h and the command
 * handlers. Not included by the pure cores. */

#ifndef PS_MODULE_H
#define PS_MODULE_H

#include <stdint.h>

#include "args.h"
#include "codec.h"
#include "errors.h"
#include "header.h"
#include "redismodule.h"
#include "tensor.h"

#define PS_MODULE_NAME "ps"
#define PS_MODULE_VERSION 100 /* 0.1.0 */
#define PS_TYPE_NAME "ps-tensor"

extern RedisModuleType *PSTensorType;

/* Module configs (ps.*): defaults copied into a tensor at creation, and bounds. */
typedef struct PSConfig {
    long long max_tensor_bytes;
    long long max_snapshots;
    long long dedup_max;
    long long max_staleness; /* -1 = none */
    long long stale_policy;  /* PS_POLICY_* */
    double default_lr;
    long long max_pull_bytes;    /* float32 bytes one pull may return (issue 11) */
    long long scratch_keep_bytes; /* scratch kept cached between requests */
    long long max_blocked_pulls; /* MINVERSION waiters at once */
} PSConfig;
extern PSConfig PSConf;

/* Module-wide counters reported by INFO ps. */
typedef struct PSModuleStats {
    unsigned long long creates, pushes, pulls, sets, bytes_in, bytes_out;
    unsigned long long stale_rejects, dedup_hits, nonfinite_rejects;
    unsigned long long blocked_pulls, blocked_timeouts, rounds_closed, rounds_timed_out;
    unsigned long long snapshots, rollbacks;
    unsigned long long pulls_refused;       /* over ps.max-pull-bytes or too many ROWS */
    unsigned long long blocked_pulls_gone;  /* waiters answered because their key went away */
} PSModuleStats;
extern PSModuleStats PSStats;

/* Replies an error built from a printf format (7.0 lacks ReplyWithErrorFormat). */
int ps_reply_errorf(RedisModuleCtx *ctx, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Opens 'keyname' and returns its tensor. When the key is empty: NULL with
 * *empty = 1 (no reply sent). When it holds another type: replies WRONGTYPE
 * and returns NULL with *empty = 0. The caller closes *key. */
PSTensor *ps_open_tensor(RedisModuleCtx *ctx, RedisModuleString *keyname, int mode,
                         RedisModuleKey **key, int *empty);

/* Like ps_open_tensor, but when the key is not a tensor it replies the
 * error (ERR no such key / WRONGTYPE), closes the key and returns NULL. */
PSTensor *ps_open_tensor_or_reply(RedisModuleCtx *ctx, RedisModuleString *keyname, int mode,
                                  RedisModuleKey **key);

/* What an open key holds (args.h's PSKeyKind). */
PSKeyKind ps_key_kind(RedisModuleKey *key);

/* Replies the error for a PS_ERR_* status of a tensor operation. */
int ps_reply_status(RedisModuleCtx *ctx, int status);

/* Decodes a dense blob of format 'fmt' holding 'n' floats into a reusable
 * scratch buffer (no allocation when F32: returns the blob itself). Replies
 * an error and returns NULL on a length mismatch or OOM. 'what' names the
 * argument in errors. */
const unsigned char *ps_decode_dense(RedisModuleCtx *ctx, const char *what,
                                     RedisModuleString *blob, ps_format fmt, uint64_t n);

/* A module-owned float scratch buffer of at least n floats (reused), or
 * NULL on OOM. Valid until the next call or ps_scratch_trim(). */
float *ps_scratch(uint64_t n);

/* One field/value pair of a flat PS.INFO reply; adds 2 to *n. */
void ps_reply_pair_ll(RedisModuleCtx *ctx, const char *name, long long v, long *n);
void ps_reply_pair_d(RedisModuleCtx *ctx, const char *name, double v, long *n);
void ps_reply_pair_s(RedisModuleCtx *ctx, const char *name, const char *v, long *n);

/* Registers every command of the table in cmd_table.c (OnLoad). */
int PSCommands_Register(RedisModuleCtx *ctx);

/* A second, byte scratch buffer (encoding replies while the float scratch
 * holds their source), same rules. */
unsigned char *ps_scratch_bytes(size_t bytes);

/* Frees the scratch buffers above ps.scratch-keep-bytes: called at the end
 * of a request that may have grown them (and scheduled automatically when a
 * request grows them past the limit), so a large request does not pin its
 * memory. Returns the bytes still held. */
size_t ps_scratch_trim(void);

/* Bytes the scratch buffers hold now (INFO ps scratch_bytes). */
size_t ps_scratch_held(void);

/* Sync-round timers (cmd_round.c). A tensor being freed forgets its timer
 * and answers its MINVERSION waiters (type.c's free callback calls this;
 * off the main thread, as in a lazy FLUSHALL ASYNC, it does nothing: the
 * FlushDB event already stopped the timers and answered the waiters of
 * every flushed tensor). */
void ps_round_timer_forget(const PSTensor *t);

/* Round timers pending now (INFO ps round_timers). */
unsigned long long ps_round_timers_pending(void);

/* Arms the round timer of a sync tensor whose round is open (once per
 * round, on a master only; replicas and AOF loading get PS._CLOSEROUND). */
void ps_round_timer_arm(RedisModuleCtx *ctx, RedisModuleString *keyname, const PSTensor *t);

/* Stops the timer of a round that just closed (n-th push, PS._CLOSEROUND). */
void ps_round_timer_stop(const PSTensor *t);

/* Answers an error to every pull waiting on MINVERSION in database 'dbnum'
 * (-1: all), whose keys are about to be flushed (cmd_push.c; cmd_round.c's
 * FlushDB and SwapDB hooks call it, and cmd_push.c arms round timers: the
 * one circle of two files left in the glue). */
void ps_pull_waiters_flush(int dbnum);

/* Answers an error to every pull waiting on tensor 't', which is being
 * freed on the main thread (ps_round_timer_forget calls it): whatever
 * takes its name next is another tensor (cmd_push.c). */
void ps_pull_waiters_value_freed(const PSTensor *t);

/* Event hooks OnLoad installs after the command table: the round timers'
 * FlushDB and key-move hooks (cmd_round.c), the MINVERSION waiters'
 * key-removed hook (cmd_push.c). */
int PSRoundHooks_Register(RedisModuleCtx *ctx);
int PSPushHooks_Register(RedisModuleCtx *ctx);
int PSRelayHooks_Register(RedisModuleCtx *ctx);

/* Command handlers, one family per cmd_*.c file; cmd_table.c's table
 * registers them. The shared verbs (PS.CREATE, PS.PUSHGRAD, PS.PULL,
 * PS.INFO, PS.CONFIG) are routed there: the key opened once, its kind
 * decided by its type, the arguments parsed once (args.h), then one of the
 * tensor handlers below or a table handler (embed_glue.h). A handler
 * replies; the router closes the key. */
int ps_tensor_create(RedisModuleCtx *ctx, RedisModuleString **argv, int argc);
int ps_tensor_info(RedisModuleCtx *ctx, PSTensor *t);
int ps_tensor_config(RedisModuleCtx *ctx, RedisModuleString **argv, int argc, PSTensor *t);
int ps_tensor_push(RedisModuleCtx *ctx, RedisModuleString **argv, PSTensor *t, const PSPushArgs *a);
int ps_tensor_pull(RedisModuleCtx *ctx, RedisModuleString **argv, PSTensor *t, const PSPullArgs *a);
int PSSet_RedisCommand(RedisModuleCtx *ctx, RedisModuleString **argv, int argc);
int PSRestore_RedisCommand(RedisModuleCtx *ctx, RedisModuleString **argv, int argc);
int PSCloseRound_RedisCommand(RedisModuleCtx *ctx, RedisModuleString **argv, int argc);
int PSSnapshot_RedisCommand(RedisModuleCtx *ctx, RedisModuleString **argv, int argc);
int PSSnapshots_RedisCommand(RedisModuleCtx *ctx, RedisModuleString **argv, int argc);
int PSRollback_RedisCommand(RedisModuleCtx *ctx, RedisModuleString **argv, int argc);
int PSDropSnapshot_RedisCommand(RedisModuleCtx *ctx, RedisModuleString **argv, int argc);
int PSTake_RedisCommand(RedisModuleCtx *ctx, RedisModuleString **argv, int argc);
int PSTakeAck_RedisCommand(RedisModuleCtx *ctx, RedisModuleString **argv, int argc);
int PSMirror_RedisCommand(RedisModuleCtx *ctx, RedisModuleString **argv, int argc);
int PSTakeWait_RedisCommand(RedisModuleCtx *ctx, RedisModuleString **argv, int argc);
/* cmd_ring.c: the ring protocol (issue #22). */
int PSRing_RedisCommand(RedisModuleCtx *ctx, RedisModuleString **argv, int argc);
int PSDeltaTake_RedisCommand(RedisModuleCtx *ctx, RedisModuleString **argv, int argc);
int PSDeltaAck_RedisCommand(RedisModuleCtx *ctx, RedisModuleString **argv, int argc);
int PSApplyDelta_RedisCommand(RedisModuleCtx *ctx, RedisModuleString **argv, int argc);
int PSDeltaFwd_RedisCommand(RedisModuleCtx *ctx, RedisModuleString **argv, int argc);
int PSDeltaFwdAck_RedisCommand(RedisModuleCtx *ctx, RedisModuleString **argv, int argc);
/* The ring_* fields of PS.INFO of a tracked tensor (none when untracked);
 * adds to *n as ps_reply_pair_ll. */
void ps_ring_info(RedisModuleCtx *ctx, const PSTensor *t, long *n);

/* Type registration (type.c). */
int PSType_Register(RedisModuleCtx *ctx);

/* Pulls blocked on MINVERSION right now. */
extern unsigned long long PSBlockedNow;

/* Wakes pulls blocked on 'key' after its version moved; free when none is
 * blocked anywhere (the common case on the push path). */
void ps_signal_ready(RedisModuleCtx *ctx, RedisModuleString *key);

/* Keyspace notification for the module's events. */
void ps_notify(RedisModuleCtx *ctx, const char *event, RedisModuleString *key);

/* After a command overwrote all n values of 'key' (PS.SET, PS.MIRROR):
 * replicates it verbatim, fires 'event', wakes MINVERSION pulls, counts it. */
void ps_values_overwritten(RedisModuleCtx *ctx, RedisModuleString *key, const char *event,
                           uint64_t n);

/* Command-info argument helpers (COMMAND DOCS): the key, a token with a
 * value, a bare token. Non-key arguments carry key_spec_index -1. */
#define PS_ARG_KEY {.name = "key", .type = REDISMODULE_ARG_TYPE_KEY, .key_spec_index = 0}
#define PS_ARG(nm, tok, typ, fl) \
    {.name = nm, .type = REDISMODULE_ARG_TYPE_##typ, .key_spec_index = -1, .token = tok, .flags = fl}
#define PS_ARG_FLAG(nm, tok) \
    {.name = nm, .type = REDISMODULE_ARG_TYPE_PURE_TOKEN, .key_spec_index = -1, .token = tok, \
     .flags = REDISMODULE_CMD_ARG_OPTIONAL}
#define PS_ARG_OPTIONAL REDISMODULE_CMD_ARG_OPTIONAL

/* PS._RESTORE SNAPSHOT's blob: step, b1pow, b2pow, flags (the short form,
 * all that was written before PS_ENCVER_SNAP_SHARING), then in the long form
 * the earlier snapshot's index of each array shared with one. */
#define PS_RESTORE_SNAP_WORDS_SHORT 4
#define PS_RESTORE_SNAP_WORDS_LONG 7
_Static_assert(PS_RESTORE_SNAP_WORDS_LONG == PS_RESTORE_SNAP_WORDS_SHORT + 3,
               "the long form adds one earlier-snapshot index per array");

#endif /* PS_MODULE_H */
