/* cmd_round.c -- sync-round timers (master only) and their replicated
 * effect command PS._CLOSEROUND.
 *
 * A sync tensor (SYNC n TIMEOUT ms) whose round is open has at most one
 * live timer: armed by the first push of the round (or by a pull of a round
 * left open by a restart or failover), stopped when the round closes by its
 * n-th push, and stopped when the tensor is freed (DEL, UNLINK, FLUSHALL,
 * overwrite: type.c's free callback) or its database is flushed (the
 * FlushDB event, which also covers FLUSHALL ASYNC, whose frees run on a
 * background thread). It follows its tensor through RENAME, MOVE and
 * SWAPDB. Timers are found by tensor in a hash table, so a
 * push or pull never scans them (issue 11 item 3).
 *
 * Replication, decided here:
 *   sync timer       master-only decision: replicated as the effect
 *                    PS._CLOSEROUND key version.
 *   PS._CLOSEROUND   verbatim. */

#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "ps_module.h"
#include "waiters.h"

extern RedisModuleCommandKeySpec *PSWriteKeySpec;

/* ========================================================================
 * Timer table: tensor pointer -> its round timer
 * ====================================================================== */

/* The armed timer of one tensor's open round. 't' is only compared, never
 * dereferenced from the timer: the table entry is removed before the
 * tensor is freed. 'db' and 'key' are where the tensor is: RENAME and MOVE
 * update them (keyMoved), SWAPDB swaps the db (dbSwapped). */
typedef struct RoundTimer {
    const PSTensor *t;
    RedisModuleTimerID id;
    uint64_t version; /* the round's tensor version */
    int db;
    size_t keylen;
    char *key;
} RoundTimer;

/* Open addressing, linear probing, backward-shift deletion; the capacity
 * is a power of two at least twice the count. */
static RoundTimer **Slots = NULL;
static size_t SlotCap = 0, TimerCount = 0;
static RedisModuleCtx *TimerCtx = NULL; /* detached: StopTimer needs a module ctx */
static pthread_t MainThread;

static size_t slot_of(const PSTensor *t) {
    uint64_t h = (uint64_t)(uintptr_t)t * 0x9e3779b97f4a7c15ULL;
    return (size_t)(h >> 32) & (SlotCap - 1);
}

static RoundTimer *timer_get(const PSTensor *t) {
    if (!TimerCount) return NULL;
    for (size_t i = slot_of(t);; i = (i + 1) & (SlotCap - 1)) {
        if (!Slots[i]) return NULL;
        if (Slots[i]->t == t) return Slots[i];
    }
}

static void timer_put_slot(RoundTimer *rt) {
    size_t i = slot_of(rt->t);
    while (Slots[i]) i = (i + 1) & (SlotCap - 1);
    Slots[i] = rt;
}

/* Adds 'rt' (its tensor has no entry yet). */
static void timer_put(RoundTimer *rt) {
    if (2 * (TimerCount + 1) > SlotCap) {
        RoundTimer **old = Slots;
        size_t oldcap = SlotCap;
        SlotCap = SlotCap ? SlotCap * 2 : 16;
        Slots = RedisModule_Calloc(SlotCap, sizeof(*Slots));
        for (size_t i = 0; i < oldcap; i++)
            if (old[i]) timer_put_slot(old[i]);
        RedisModule_Free(old);
    }
    timer_put_slot(rt);
    TimerCount++;
}

/* Removes the entry of 'rt' from the table (not the timer itself). */
static void timer_del(RoundTimer *rt) {
    size_t i = slot_of(rt->t);
    while (Slots[i] != rt) i = (i + 1) & (SlotCap - 1);
    Slots[i] = NULL;
    TimerCount--;
    /* Backward shift: move later entries of the cluster into the hole when
     * their home slot does not lie between the hole and them. */
    for (size_t j = (i + 1) & (SlotCap - 1); Slots[j]; j = (j + 1) & (SlotCap - 1)) {
        const size_t home = slot_of(Slots[j]->t);
        const int between = i <= j ? (home > i && home <= j) : (home > i || home <= j);
        if (between) continue;
        Slots[i] = Slots[j];
        Slots[j] = NULL;
        i = j;
    }
}

static void timer_free(RoundTimer *rt) {
    RedisModule_Free(rt->key);
    RedisModule_Free(rt);
}

/* Stops the timer of 'rt', removes and frees it. */
static void timer_cancel(RoundTimer *rt) {
    RedisModule_StopTimer(TimerCtx, rt->id, NULL);
    timer_del(rt);
    timer_free(rt);
}

static void timer_set_key(RoundTimer *rt, int db, const char *k, size_t kl) {
    if (rt->db == db && rt->keylen == kl && memcmp(rt->key, k, kl) == 0) return;
    RedisModule_Free(rt->key);
    rt->key = RedisModule_Alloc(kl ? kl : 1);
    memcpy(rt->key, k, kl);
    rt->keylen = kl;
    rt->db = db;
}

unsigned long long ps_round_timers_pending(void) { return TimerCount; }

void ps_round_timer_stop(const PSTensor *t) {
    /* The thread first: a background free must not even read the table. */
    if (!pthread_equal(pthread_self(), MainThread) || !TimerCount) return;
    RoundTimer *rt = timer_get(t);
    if (rt) timer_cancel(rt);
}

void ps_round_timer_forget(const PSTensor *t) {
    /* Only a tensor being freed answers its waiters: a round that closes
     * stops its timer (ps_round_timer_stop) and wakes them with the new
     * version instead. */
    if (!pthread_equal(pthread_self(), MainThread)) return;
    ps_waiters_value_freed(t);
    ps_round_timer_stop(t);
}

/* FlushDB (start): stops the timers of the flushed database(s) while their
 * tensors still exist (an async flush frees them on another thread). */
static void timers_flush(int dbnum) {
    if (!TimerCount) return;
    size_t n = 0;
    RoundTimer **victims = RedisModule_Alloc(TimerCount * sizeof(*victims));
    for (size_t i = 0; i < SlotCap; i++)
        if (Slots[i] && (dbnum == -1 || Slots[i]->db == dbnum)) victims[n++] = Slots[i];
    for (size_t i = 0; i < n; i++) timer_cancel(victims[i]);
    RedisModule_Free(victims);
}

static void roundTimerFired(RedisModuleCtx *ctx, void *data) {
    RoundTimer *rt = data;
    /* Unregistered first: nothing may stop this timer while it runs. */
    timer_del(rt);
    /* Became a replica meanwhile: the new master decides (and replicates). */
    if (RedisModule_GetContextFlags(ctx) & REDISMODULE_CTX_FLAGS_SLAVE) {
        timer_free(rt);
        return;
    }
    /* Writes are paused (CLIENT PAUSE WRITE, a failover, a shutdown waiting
     * for replicas): nothing may be propagated now, so try again shortly. */
    if (RedisModule_AvoidReplicaTraffic()) {
        rt->id = RedisModule_CreateTimer(ctx, 100, roundTimerFired, rt);
        timer_put(rt);
        return;
    }
    RedisModule_SelectDb(ctx, rt->db);
    RedisModuleString *kn = RedisModule_CreateString(ctx, rt->key, rt->keylen);
    RedisModuleKey *key = RedisModule_OpenKey(ctx, kn, REDISMODULE_READ | REDISMODULE_WRITE);
    /* Only the tensor the timer was armed for (not another value that took
     * its name after a RENAME or SWAPDB). */
    if (RedisModule_KeyType(key) == REDISMODULE_KEYTYPE_MODULE &&
        RedisModule_ModuleTypeGetType(key) == PSTensorType &&
        RedisModule_ModuleTypeGetValue(key) == rt->t) {
        PSTensor *t = RedisModule_ModuleTypeGetValue(key);
        if (t->sync_n && t->version == rt->version && t->round_count > 0 &&
            PSTensor_CloseRound(t) == PST_OK) {
            t->stats.rounds_timed_out++;
            PSStats.rounds_timed_out++;
            PSStats.rounds_closed++;
            RedisModule_Replicate(ctx, "ps._closeround", "sl", kn, (long long)rt->version);
            ps_notify(ctx, "ps.round", kn);
            ps_signal_ready(ctx, kn);
        }
    }
    RedisModule_CloseKey(key);
    RedisModule_FreeString(ctx, kn);
    timer_free(rt);
}

void ps_round_timer_arm(RedisModuleCtx *ctx, RedisModuleString *keyname, const PSTensor *t) {
    if (!t->sync_n || !t->sync_timeout_ms || !t->round_count) return;
    int flags = RedisModule_GetContextFlags(ctx);
    if (flags & (REDISMODULE_CTX_FLAGS_SLAVE | REDISMODULE_CTX_FLAGS_LOADING)) return;
    size_t kl;
    const char *k = RedisModule_StringPtrLen(keyname, &kl);
    int db = RedisModule_GetSelectedDb(ctx);
    RoundTimer *rt = timer_get(t);
    if (rt && rt->version == t->version) {
        timer_set_key(rt, db, k, kl); /* the name this pull or push used */
        return;
    }
    /* A timer of an earlier round that closed another way (ROLLBACK, SET):
     * replaced, so there is never more than one per tensor. */
    if (rt) timer_cancel(rt);
    rt = RedisModule_Calloc(1, sizeof(*rt));
    rt->t = t;
    rt->version = t->version;
    rt->db = -1;
    timer_set_key(rt, db, k, kl);
    rt->id = RedisModule_CreateTimer(ctx, t->sync_timeout_ms, roundTimerFired, rt);
    timer_put(rt);
}

/* RENAME and MOVE keep the value: its timer follows it to the new name. */
static int keyMoved(RedisModuleCtx *ctx, int type, const char *event, RedisModuleString *key) {
    (void)type;
    if (!TimerCount || (strcmp(event, "rename_to") && strcmp(event, "move_to")))
        return REDISMODULE_OK;
    RedisModuleKey *k = RedisModule_OpenKey(ctx, key, REDISMODULE_READ);
    if (RedisModule_KeyType(k) == REDISMODULE_KEYTYPE_MODULE &&
        RedisModule_ModuleTypeGetType(k) == PSTensorType) {
        RoundTimer *rt = timer_get(RedisModule_ModuleTypeGetValue(k));
        size_t kl;
        const char *kp = RedisModule_StringPtrLen(key, &kl);
        if (rt) timer_set_key(rt, RedisModule_GetSelectedDb(ctx), kp, kl);
    }
    RedisModule_CloseKey(k);
    return REDISMODULE_OK;
}

static void flushStarted(RedisModuleCtx *ctx, RedisModuleEvent eid, uint64_t sub, void *data) {
    (void)ctx;
    (void)eid;
    if (sub != REDISMODULE_SUBEVENT_FLUSHDB_START) return;
    const RedisModuleFlushInfo *fi = data;
    timers_flush(fi->dbnum);
    ps_waiters_flush(fi->dbnum);
}

/* SWAPDB a b: the tensors of a are now in b and the other way round; their
 * timers follow them (a timer left on the old db number would find another
 * value or none there when it fires, and its round would stay open with no
 * push to re-arm it). Pulls waiting in either db waited on a value that is
 * no longer under their name there: they are answered as for a flush. */
static void dbSwapped(RedisModuleCtx *ctx, RedisModuleEvent eid, uint64_t sub, void *data) {
    (void)ctx;
    (void)eid;
    (void)sub;
    const RedisModuleSwapDbInfo *si = data;
    const int a = si->dbnum_first, b = si->dbnum_second;
    if (a == b) return;
    for (size_t i = 0; TimerCount && i < SlotCap; i++) {
        if (!Slots[i]) continue;
        if (Slots[i]->db == a) Slots[i]->db = b;
        else if (Slots[i]->db == b) Slots[i]->db = a;
    }
    ps_waiters_flush(a);
    ps_waiters_flush(b);
}

/* ========================================================================
 * PS._CLOSEROUND
 * ====================================================================== */

/* PS._CLOSEROUND key version: closes the open round if the tensor is still
 * at 'version' (the effect of a master's timer). */
int PSCloseRound_RedisCommand(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    if (argc != 3) return RedisModule_WrongArity(ctx);
    uint64_t v;
    if (ps_arg_u64(ctx, argv[2], "version", &v) != REDISMODULE_OK) return REDISMODULE_OK;
    RedisModuleKey *key;
    PSTensor *t = ps_open_tensor_or_reply(ctx, argv[1], REDISMODULE_READ | REDISMODULE_WRITE, &key);
    if (!t) return REDISMODULE_OK;
    int closed = 0;
    if (t->version == v && t->round_count > 0) {
        int st = PSTensor_CloseRound(t);
        if (st != PST_OK) {
            RedisModule_CloseKey(key);
            return ps_reply_status(ctx, st);
        }
        t->stats.rounds_timed_out++;
        closed = 1;
        ps_round_timer_stop(t);
        RedisModule_ReplicateVerbatim(ctx);
        ps_signal_ready(ctx, argv[1]);
    }
    RedisModule_CloseKey(key);
    return RedisModule_ReplyWithLongLong(ctx, closed);
}

/* Installs the timers' hooks (OnLoad, after the command table, which
 * registers PS._CLOSEROUND). */
int PSRoundHooks_Register(RedisModuleCtx *ctx) {
    MainThread = pthread_self();
    TimerCtx = RedisModule_GetDetachedThreadSafeContext(ctx);
    static const RedisModuleEvent flushdb = {REDISMODULE_EVENT_FLUSHDB, 1};
    static const RedisModuleEvent swapdb = {REDISMODULE_EVENT_SWAPDB, 1};
    if (!TimerCtx || RedisModule_SubscribeToServerEvent(ctx, flushdb, flushStarted) != REDISMODULE_OK ||
        RedisModule_SubscribeToServerEvent(ctx, swapdb, dbSwapped) != REDISMODULE_OK ||
        RedisModule_SubscribeToKeyspaceEvents(ctx, REDISMODULE_NOTIFY_GENERIC, keyMoved) !=
            REDISMODULE_OK) {
        RedisModule_Log(ctx, "warning", "could not subscribe to the FlushDB, SwapDB and key events");
        return REDISMODULE_ERR;
    }
    return REDISMODULE_OK;
}
