/* waiters.h -- clients blocked on a key by a PS.* command (PS.PULL
 * MINVERSION in cmd_push.c, PS.TAKEWAIT in cmd_relay.c), kept in one list
 * so that every way a key can go away answers its waiters at once: DEL,
 * expiry, eviction, RENAME/MOVE away (keyspace events), FLUSHDB/FLUSHALL and
 * SWAPDB (ps_waiters_flush, from cmd_round.c's server events), and a value
 * freed under its name (SET or RESTORE over it: ps_waiters_value_freed,
 * from the type's free callback). Redis 7.0 does not wake module key
 * waiters in those cases, or serves them the newcomer.
 *
 * A command embeds a PSWaiter as the FIRST member of its private data, asks
 * ps_waiter_may_block() (the MULTI/Lua rule and ps.max-blocked-pulls, which
 * bounds all waiters together), then ps_waiter_block(); its free callback
 * calls ps_waiter_release() and frees the rest. A waiter whose key went
 * away is unblocked with 'gone' set: the command's timeout callback sees it
 * and answers the error. */
#ifndef PS_WAITERS_H
#define PS_WAITERS_H

#include <stddef.h>

#include "redismodule.h"

typedef struct PSWaiter {
    struct PSWaiter *prev, *next;
    RedisModuleBlockedClient *bc;
    const void *value;                /* the key's value when it blocked: only compared */
    unsigned long long *gone_counter; /* NULL, or a counter of waiters whose key went away */
    int db, gone;
    char *key;                        /* a copy of the key name */
    size_t keylen;
} PSWaiter;

/* 1: the command may block. 0: it must answer now as a timeout would (MULTI,
 * Lua, DENY_BLOCKING contexts). -1: too many waiters, the error was replied. */
int ps_waiter_may_block(RedisModuleCtx *ctx);

/* Blocks the client on 'keyname' (BlockClientOnKeys with 'privdata', whose
 * first member is 'w'), links 'w' into the list and counts it. */
void ps_waiter_block(RedisModuleCtx *ctx, PSWaiter *w, RedisModuleString *keyname,
                     const void *value, RedisModuleCmdFunc ready, RedisModuleCmdFunc timeout,
                     void (*free_privdata)(RedisModuleCtx *, void *), long long timeout_ms,
                     void *privdata);

/* From the command's free callback: unlinks 'w' and frees its key copy. */
void ps_waiter_release(PSWaiter *w);

/* Answers (unblocks with 'gone') every waiter of db 'dbnum' (-1: all). */
void ps_waiters_flush(int dbnum);

/* Answers every waiter that blocked on 'value' (being freed). */
void ps_waiters_value_freed(const void *value);

/* Subscribes to the keyspace events that take a key away (OnLoad). */
int PSWaiterHooks_Register(RedisModuleCtx *ctx);

#endif
