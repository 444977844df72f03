/* waiters.c -- the one list of clients blocked on a key (waiters.h). */

#include "waiters.h"

#include <string.h>

#include "ps_module.h"

/* Every blocked client, to find the waiters of a key that goes away. It is
 * scanned only while some client waits (at most ps.max-blocked-pulls). */
static PSWaiter *Waiters = NULL;

int ps_waiter_may_block(RedisModuleCtx *ctx) {
    int flags = RedisModule_GetContextFlags(ctx);
    if (flags & (REDISMODULE_CTX_FLAGS_MULTI | REDISMODULE_CTX_FLAGS_LUA |
                 REDISMODULE_CTX_FLAGS_DENY_BLOCKING))
        return 0;
    if (PSBlockedNow >= (unsigned long long)PSConf.max_blocked_pulls) {
        ps_reply_errorf(ctx, PSERR_TOO_MANY_WAITERS_F, PSBlockedNow);
        return -1;
    }
    return 1;
}

void ps_waiter_block(RedisModuleCtx *ctx, PSWaiter *w, RedisModuleString *keyname,
                     const void *value, RedisModuleCmdFunc ready, RedisModuleCmdFunc timeout,
                     void (*free_privdata)(RedisModuleCtx *, void *), long long timeout_ms,
                     void *privdata) {
    size_t kl;
    const char *k = RedisModule_StringPtrLen(keyname, &kl);
    w->key = RedisModule_Alloc(kl + 1);
    memcpy(w->key, k, kl);
    w->key[kl] = '\0';
    w->keylen = kl;
    w->db = RedisModule_GetSelectedDb(ctx);
    w->value = value;
    w->gone = 0;
    w->prev = NULL;
    w->next = Waiters;
    if (Waiters) Waiters->prev = w;
    Waiters = w;
    w->bc = RedisModule_BlockClientOnKeys(ctx, ready, timeout, free_privdata, timeout_ms,
                                          &keyname, 1, privdata);
    PSBlockedNow++;
}

void ps_waiter_release(PSWaiter *w) {
    if (w->prev) w->prev->next = w->next;
    else Waiters = w->next;
    if (w->next) w->next->prev = w->prev;
    PSBlockedNow--;
    RedisModule_Free(w->key);
    w->key = NULL;
}

/* Unblocks 'w': UnblockClient answers a key waiter through the timeout
 * callback, which sees 'gone'. */
static void waiter_gone(PSWaiter *w) {
    w->gone = 1;
    if (w->gone_counter) (*w->gone_counter)++;
    RedisModule_UnblockClient(w->bc, NULL);
}

void ps_waiters_flush(int dbnum) {
    for (PSWaiter *w = Waiters, *nx; w; w = nx) {
        nx = w->next;
        if (!w->gone && (dbnum == -1 || w->db == dbnum)) waiter_gone(w);
    }
}

void ps_waiters_value_freed(const void *value) {
    for (PSWaiter *w = Waiters, *nx; w; w = nx) {
        nx = w->next;
        if (!w->gone && w->value == value) waiter_gone(w);
    }
}

/* Keyspace events that take a key away from its waiters. */
static int keyRemoved(RedisModuleCtx *ctx, int type, const char *event, RedisModuleString *key) {
    (void)type;
    if (!Waiters) return REDISMODULE_OK;
    if (strcmp(event, "del") && strcmp(event, "expired") && strcmp(event, "evicted") &&
        strcmp(event, "rename_from") && strcmp(event, "move_from"))
        return REDISMODULE_OK;
    size_t kl;
    const char *k = RedisModule_StringPtrLen(key, &kl);
    const int db = RedisModule_GetSelectedDb(ctx);
    for (PSWaiter *w = Waiters, *nx; w; w = nx) {
        nx = w->next;
        if (!w->gone && w->db == db && w->keylen == kl && memcmp(w->key, k, kl) == 0)
            waiter_gone(w);
    }
    return REDISMODULE_OK;
}

int PSWaiterHooks_Register(RedisModuleCtx *ctx) {
    const int removed = REDISMODULE_NOTIFY_GENERIC | REDISMODULE_NOTIFY_EXPIRED |
                        REDISMODULE_NOTIFY_EVICTED;
    if (RedisModule_SubscribeToKeyspaceEvents(ctx, removed, keyRemoved) != REDISMODULE_OK) {
        RedisModule_Log(ctx, "warning", "could not subscribe to keyspace events");
        return REDISMODULE_ERR;
    }
    return REDISMODULE_OK;
}
