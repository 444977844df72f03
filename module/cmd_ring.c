/* cmd_ring.c -- the ring protocol (issue #22): what a group's ring agent
 * needs from its server's tensors (the state and its rules: ring.h; the
 * commands: docs/commands.md "Ring").
 *
 *   PS.RING key TRACK origin [MAXQUEUE bytes] [MAXLAG n]  tracking on (base := values)
 *   PS.RING key STATE                                 [base, version, origin, marks]
 *   PS.RING key JOIN origin values [FROM origin seq]...  take a neighbour's copy
 *   PS.RING key UNTRACK                               tracking off (state dropped)
 *   PS.DELTATAKE key [SEQFLOOR s] [THRESHOLD r] [MAXELEMS m]
 *   PS.DELTAACK key seq
 *   PS.APPLYDELTA key ID origin seq indices values [HOPS h] [PREV p]
 *   PS.DELTAFWD key
 *   PS.DELTAFWDACK key origin seq
 *
 * Replication, decided here per handler (each is a function of the value
 * and its arguments, so verbatim replication gives identical replicas and
 * AOF replays): every write command is replicated verbatim when it changed
 * something, and not at all when it did not (a take answered again, an ack
 * of another seq, a duplicate delta, STATE, DELTAFWD).
 *
 * On a table key (ring_table.h) the same commands work on rows: deltas are
 * u64 ids and rows x dim F32 values; PS.RING STATE answers no copy (nil) and
 * JOIN is refused: a table joins by a paged copy of a neighbour's base view
 * (PS.RING key ROWS cursor COUNT n on the neighbour; JOINBEGIN origin
 * [FROM origin seq]..., JOINROWS page ids rows, JOINEND pages rows on the
 * joiner, which refuses pushes and ring traffic until JOINEND: those four
 * and a table's push hooks, PS.INFO fields and persistence of its ring
 * state are in cmd_ring_table.c). */

#include <limits.h>
#include <stdlib.h>
#include <math.h>
#include <string.h>

#include "embed_glue.h"
#include "ps_module.h"
#include "ring.h"
#include "ring_table.h"
#include "cmd_ring.h"

/* The reply of a failed ring operation (status PS_RING_E*). */
int ps_ring_reply_error(RedisModuleCtx *ctx, int st) {
    const char *e;
    switch (st) {
    case PS_RING_EOOM: e = PSERR_OOM; break;
    case PS_RING_EUNTRACKED: e = PSERR_RING_UNTRACKED; break;
    case PS_RING_EORIGIN: e = PSERR_RING_ORIGIN; break;
    case PS_RING_EOTHER: e = PSERR_RING_OTHER; break;
    case PS_RING_ECOUNT: e = PSERR_RING_COUNT; break;
    case PS_RING_EINDEX: e = PSERR_RING_INDEX; break;
    case PS_RING_ENONFINITE: e = PSERR_RING_NONFINITE; break;
    case PS_RING_EORIGINS: e = PSERR_RING_ORIGINS; break;
    case PS_RING_EDUPFROM: e = PSERR_RING_DUPFROM; break;
    case PS_RING_EACCUM: e = PSERR_RING_ACCUM; break;
    case PS_RING_EBIG: e = PSERR_RING_BIG; break;
    case PS_RING_ESEQ: e = PSERR_RING_SEQ; break;
    case PS_RING_EROUND: e = PSERR_ROUND_OPEN; break;
    case PS_RING_BACKLOG: e = PSERR_RING_BACKLOG; break;
    case PS_RING_EGAP: e = PSERR_RING_GAP; break;
    case PS_RINGT_EEVICT: e = PSERR_RING_TABLE_EVICT; break;
    case PS_RINGT_EFTRL: e = PSERR_RING_TABLE_FTRL; break;
    case PS_RINGT_ESIZE: e = PSERR_RING_ROWSIZE; break;
    case PS_RINGT_EJOINING: e = PSERR_RING_JOINING; break;
    case PS_RINGT_ENOJOIN: e = PSERR_RING_NOJOIN; break;
    case PS_RINGT_EPAGE: e = PSERR_RING_JOINPAGE; break;
    case PS_RINGT_EDUPROW: e = PSERR_RING_JOINDUP; break;
    default: e = PSERR_INTERNAL; break;
    }
    return RedisModule_ReplyWithError(ctx, e);
}

/* Opens the tensor or the table at 'kn': returns the tensor, or NULL with
 * *tab the table, or NULL with *tab NULL after replying the error (no such
 * key, WRONGTYPE, a table being restored) with the key closed. */
PSTensor *ps_ring_open(RedisModuleCtx *ctx, RedisModuleString *kn, int mode,
                       RedisModuleKey **key, PSEmbedValue **tab) {
    *key = RedisModule_OpenKey(ctx, kn, mode);
    *tab = NULL;
    const PSKeyKind kind = ps_key_kind(*key);
    if (kind == PS_KIND_TENSOR) return RedisModule_ModuleTypeGetValue(*key);
    if (kind == PS_KIND_TABLE) {
        PSEmbedValue *v = RedisModule_ModuleTypeGetValue(*key);
        if (v->t && !v->restoring) {
            *tab = v;
            return NULL;
        }
        RedisModule_ReplyWithError(ctx, PSERR_EMBED_RESTORING);
    } else {
        ps_reply_kind(ctx, kind);
    }
    RedisModule_CloseKey(*key);
    return NULL;
}

/* A table's tracked state, or NULL after replying UNTRACKED, or JOINING
 * while a JOIN of the table is in progress (ring traffic waits for JOINEND). */
static PSRingTable *table_ring(RedisModuleCtx *ctx, PSEmbedValue *v) {
    if (!v->ring) ps_ring_reply_error(ctx, PS_RING_EUNTRACKED);
    else if (v->ring->joining) ps_ring_reply_error(ctx, PS_RINGT_EJOINING);
    else return v->ring;
    return NULL;
}

/* ========================================================================
 * PS.RING key TRACK | STATE | JOIN
 * ====================================================================== */

/* TRACK origin [MAXQUEUE bytes] [MAXLAG n] -> 1 turned on, 0 already (same
 * origin; the bounds given are updated). Replicated when it changed
 * something. */
static int ring_track(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    if (argc < 4 || argc % 2) return RedisModule_WrongArity(ctx);
    static const PSOption opts[] = {{"MAXQUEUE", 1}, {"MAXLAG", 1}, {NULL, 0}};
    long long mq = 0, ml = 0;
    unsigned seen = 0;
    int has_mq = 0, has_ml = 0;
    for (int i = 4; i < argc; i += 2) {
        const int k = ps_option_at(ctx, argv, argc, i, opts, &seen);
        if (k < 0) return REDISMODULE_OK;
        if (k == 0) {
            if (ps_arg_ll(ctx, argv[i + 1], "MAXQUEUE", 0, (long long)PS_RING_MAX_MAXQUEUE, &mq) !=
                REDISMODULE_OK)
                return REDISMODULE_OK;
            has_mq = 1;
        } else {
            if (ps_arg_ll(ctx, argv[i + 1], "MAXLAG", LLONG_MIN, LLONG_MAX, &ml) != REDISMODULE_OK)
                return REDISMODULE_OK;
            if (ml < 0 || (unsigned long long)ml > PS_RING_MAX_MAXLAG)
                return RedisModule_ReplyWithError(ctx, PSERR_RING_MAXLAG);
            has_ml = 1;
        }
    }
    size_t ol;
    const char *origin = RedisModule_StringPtrLen(argv[3], &ol);
    RedisModuleKey *key;
    PSEmbedValue *v;
    PSTensor *t = ps_ring_open(ctx, argv[1], RW, &key, &v);
    if (!t && !v) return REDISMODULE_OK;
    if (v) {
        int r = 0, changed = 0;
        if (!v->ring) {
            int st;
            v->ring = PSRingTable_New(v->t, origin, ol, has_mq ? (uint64_t)mq : PS_RING_DEFAULT_MAXQUEUE,
                                      &st);
            if (!v->ring) {
                ps_ring_reply_error(ctx, st);
                goto tdone;
            }
            r = changed = 1;
        } else if (!PSRing_OriginValid(origin, ol)) {
            ps_ring_reply_error(ctx, PS_RING_EORIGIN);
            goto tdone;
        } else if (v->ring->originlen != ol || memcmp(v->ring->origin, origin, ol) != 0) {
            ps_ring_reply_error(ctx, PS_RING_EOTHER);
            goto tdone;
        } else if (has_mq && v->ring->maxqueue != (uint64_t)mq) {
            v->ring->maxqueue = (uint64_t)mq;
            changed = 1;
        }
        if (has_ml && v->ring->maxlag != (uint64_t)ml) {
            v->ring->maxlag = (uint64_t)ml;
            changed = 1;
        }
        if (changed) {
            RedisModule_ReplicateVerbatim(ctx);
            ps_notify(ctx, "ps.ringtrack", argv[1]);
        }
        RedisModule_ReplyWithLongLong(ctx, r);
    tdone:
        RedisModule_CloseKey(key);
        return REDISMODULE_OK;
    }
    const uint64_t before = t->ring ? t->ring->maxqueue : 0;
    const uint64_t lag_before = t->ring ? t->ring->maxlag : 0;
    const int r = PSRing_Track(t, origin, ol, has_mq, (uint64_t)mq);
    if (r < 0) {
        ps_ring_reply_error(ctx, -r);
    } else {
        if (has_ml) t->ring->maxlag = (uint64_t)ml;
        if (r == 1 || t->ring->maxqueue != before || t->ring->maxlag != lag_before) {
            RedisModule_ReplicateVerbatim(ctx);
            ps_notify(ctx, "ps.ringtrack", argv[1]);
        }
        RedisModule_ReplyWithLongLong(ctx, r);
    }
    RedisModule_CloseKey(key);
    return REDISMODULE_OK;
}

/* STATE -> [copy F32, version, origin or nil, [[origin, hwm, applied], ...]].
 * What a joining group copies must not hold this group's own change that is
 * still to travel (it would arrive again as a delta): for a tracked tensor
 * the copy is the base (values minus that change), and the marks start with
 * this group's own origin at its take_seq (every take so far, the pending one
 * included, is in the base) with applied 0. An untracked tensor answers its
 * values and no marks. */
static int ring_state(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    if (argc != 3) return RedisModule_WrongArity(ctx);
    RedisModuleKey *key;
    PSEmbedValue *v;
    PSTensor *t = ps_ring_open(ctx, argv[1], REDISMODULE_READ, &key, &v);
    if (!t && !v) return REDISMODULE_OK;
    if (v) { /* no copy: a table's rows are read with the scan calls */
        const PSRingTable *r = v->ring;
        RedisModule_ReplyWithArray(ctx, 4);
        RedisModule_ReplyWithNull(ctx);
        RedisModule_ReplyWithLongLong(ctx, (long long)PSEmbed_Version(v->t));
        if (r) RedisModule_ReplyWithStringBuffer(ctx, r->origin, r->originlen);
        else RedisModule_ReplyWithNull(ctx);
        RedisModule_ReplyWithArray(ctx, r ? r->norigins + 1 : 0);
        if (r) {
            RedisModule_ReplyWithArray(ctx, 3);
            RedisModule_ReplyWithStringBuffer(ctx, r->origin, r->originlen);
            RedisModule_ReplyWithLongLong(ctx, (long long)r->take_seq);
            RedisModule_ReplyWithLongLong(ctx, 0);
            for (uint32_t i = 0; i < r->norigins; i++) {
                RedisModule_ReplyWithArray(ctx, 3);
                RedisModule_ReplyWithStringBuffer(ctx, r->origins[i].name, r->origins[i].len);
                RedisModule_ReplyWithLongLong(ctx, (long long)r->origins[i].hwm);
                RedisModule_ReplyWithLongLong(ctx, (long long)r->origins[i].applied);
            }
        }
        RedisModule_CloseKey(key);
        return REDISMODULE_OK;
    }
    const PSRing *r = t->ring;
    const float *copy = r ? r->base->v : t->data->v;
    RedisModule_ReplyWithArray(ctx, 4);
    RedisModule_ReplyWithStringBuffer(ctx, (const char *)copy, (size_t)t->n * sizeof(float));
    RedisModule_ReplyWithLongLong(ctx, (long long)t->version);
    if (r) RedisModule_ReplyWithStringBuffer(ctx, r->origin, r->originlen);
    else RedisModule_ReplyWithNull(ctx);
    const uint32_t k = r ? r->norigins : 0;
    RedisModule_ReplyWithArray(ctx, r ? k + 1 : 0);
    if (r) {
        RedisModule_ReplyWithArray(ctx, 3);
        RedisModule_ReplyWithStringBuffer(ctx, r->origin, r->originlen);
        RedisModule_ReplyWithLongLong(ctx, (long long)r->take_seq);
        RedisModule_ReplyWithLongLong(ctx, 0);
    }
    for (uint32_t i = 0; i < k; i++) {
        RedisModule_ReplyWithArray(ctx, 3);
        RedisModule_ReplyWithStringBuffer(ctx, r->origins[i].name, r->origins[i].len);
        RedisModule_ReplyWithLongLong(ctx, (long long)r->origins[i].hwm);
        RedisModule_ReplyWithLongLong(ctx, (long long)r->origins[i].applied);
    }
    PSStats.bytes_out += t->n * sizeof(float);
    RedisModule_CloseKey(key);
    return REDISMODULE_OK;
}

/* The FROM origin seq triples of JOIN / JOINBEGIN, 'argv[first]' on (a
 * multiple of 3 arguments), into 'from' (PS_RING_MAX_ORIGINS + 1 entries:
 * every origin at most once, the own one included). Their count, or -1
 * with the error replied. */
long ps_ring_parse_from(RedisModuleCtx *ctx, RedisModuleString **argv, int argc, int first,
                       PSRingFrom *from) {
    const size_t nfrom = (size_t)(argc - first) / 3;
    if (nfrom > PS_RING_MAX_ORIGINS + 1) {
        RedisModule_ReplyWithError(ctx, PSERR_RING_ORIGINS);
        return -1;
    }
    for (size_t k = 0; k < nfrom; k++) {
        RedisModuleString **a = &argv[first + 3 * k];
        if (!ps_arg_is(a[0], "FROM")) {
            ps_reply_errorf(ctx, PSERR_UNKNOWN_OPT_F, RedisModule_StringPtrLen(a[0], NULL));
            return -1;
        }
        from[k].origin = RedisModule_StringPtrLen(a[1], &from[k].len);
        if (ps_arg_u64(ctx, a[2], "seq", &from[k].seq) != REDISMODULE_OK) return -1;
    }
    return (long)nfrom;
}

/* JOIN origin values [FROM origin seq]... [KEEPOWN] -> 1 */
static int ring_join(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    int keepown = 0;
    if (argc >= 6 && (argc - 5) % 3 == 1 && ps_arg_is(argv[argc - 1], "KEEPOWN")) {
        keepown = 1;
        argc--;
    }
    if (argc < 5 || (argc - 5) % 3) return RedisModule_WrongArity(ctx);
    PSRingFrom from[PS_RING_MAX_ORIGINS + 1];
    const long nf = ps_ring_parse_from(ctx, argv, argc, 5, from);
    if (nf < 0) return REDISMODULE_OK;
    const size_t nfrom = (size_t)nf;
    size_t ol;
    const char *origin = RedisModule_StringPtrLen(argv[3], &ol);
    RedisModuleKey *key;
    PSEmbedValue *v;
    PSTensor *t = ps_ring_open(ctx, argv[1], RW, &key, &v);
    if (!t && !v) return REDISMODULE_OK;
    if (v) {
        RedisModule_ReplyWithError(ctx, PSERR_RING_TABLE_JOIN);
        goto done;
    }
    if (t->round_count) {
        RedisModule_ReplyWithError(ctx, PSERR_ROUND_OPEN);
        goto done;
    }
    const unsigned char *vals = ps_decode_dense(ctx, "values", argv[4], PS_FMT_F32, t->n);
    if (!vals) goto done;
    const int st = PSRing_Join(t, origin, ol, vals, from, nfrom, keepown);
    if (st != PS_RING_OK) {
        ps_ring_reply_error(ctx, st < 0 ? -st : st);
        goto done;
    }
    ps_values_overwritten(ctx, argv[1], "ps.ringjoin", t->n);
    RedisModule_ReplyWithLongLong(ctx, 1);
done:
    RedisModule_CloseKey(key);
    return REDISMODULE_OK;
}

/* UNTRACK -> 1 when tracking was on (its state dropped), 0 otherwise. */
static int ring_untrack(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    if (argc != 3) return RedisModule_WrongArity(ctx);
    RedisModuleKey *key;
    PSEmbedValue *v;
    PSTensor *t = ps_ring_open(ctx, argv[1], RW, &key, &v);
    if (!t && !v) return REDISMODULE_OK;
    int dropped;
    if (v && v->ring && v->ring->joining) {
        RedisModule_CloseKey(key);
        return ps_ring_reply_error(ctx, PS_RINGT_EJOINING);
    }
    if (v) {
        dropped = v->ring != NULL;
        PSRingTable_Free(v->ring);
        v->ring = NULL;
    } else {
        dropped = PSRing_Untrack(t);
    }
    if (dropped) {
        RedisModule_ReplicateVerbatim(ctx);
        ps_notify(ctx, "ps.ringuntrack", argv[1]);
    }
    RedisModule_CloseKey(key);
    return RedisModule_ReplyWithLongLong(ctx, dropped);
}

int PSRing_RedisCommand(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    if (argc < 3) return RedisModule_WrongArity(ctx);
    if (ps_arg_is(argv[2], "UNTRACK")) return ring_untrack(ctx, argv, argc);
    if (ps_arg_is(argv[2], "TRACK")) return ring_track(ctx, argv, argc);
    if (ps_arg_is(argv[2], "STATE")) return ring_state(ctx, argv, argc);
    if (ps_arg_is(argv[2], "JOIN")) return ring_join(ctx, argv, argc);
    if (ps_arg_is(argv[2], "ROWS")) return ps_ring_rows(ctx, argv, argc);
    if (ps_arg_is(argv[2], "JOINBEGIN")) return ps_ring_join_begin(ctx, argv, argc);
    if (ps_arg_is(argv[2], "JOINROWS")) return ps_ring_join_rows(ctx, argv, argc);
    if (ps_arg_is(argv[2], "JOINEND")) return ps_ring_join_end(ctx, argv, argc);
    return ps_reply_errorf(ctx, PSERR_RING_SUB_F, RedisModule_StringPtrLen(argv[2], NULL));
}

/* ========================================================================
 * PS.DELTATAKE / PS.DELTAACK
 * ====================================================================== */

/* [seq, count, indices u32 blob, values F32 blob, still accumulated] */
static void reply_take(RedisModuleCtx *ctx, const PSTensor *t) {
    const PSRingDelta *d = t->ring->pend;
    RedisModule_ReplyWithArray(ctx, 5);
    RedisModule_ReplyWithLongLong(ctx, (long long)d->seq);
    RedisModule_ReplyWithLongLong(ctx, (long long)d->count);
    RedisModule_ReplyWithStringBuffer(ctx, (const char *)d->idx, (size_t)d->count * 4);
    RedisModule_ReplyWithStringBuffer(ctx, (const char *)d->val, (size_t)d->count * 4);
    RedisModule_ReplyWithLongLong(ctx, (long long)PSRing_Accumulated(t));
    PSStats.bytes_out += d->count * 8;
}

/* A table's take: [seq, rows, ids u64 blob, values F32 blob (rows x dim),
 * rows still accumulated] */
static void reply_take_rows(RedisModuleCtx *ctx, const PSRingTable *r, const PSEmbed *t) {
    const PSRingRows *d = r->pend;
    RedisModule_ReplyWithArray(ctx, 5);
    RedisModule_ReplyWithLongLong(ctx, (long long)d->seq);
    RedisModule_ReplyWithLongLong(ctx, (long long)d->rows);
    RedisModule_ReplyWithStringBuffer(ctx, (const char *)d->ids, (size_t)d->rows * 8);
    RedisModule_ReplyWithStringBuffer(ctx, (const char *)d->val, (size_t)d->rows * d->dim * 4);
    RedisModule_ReplyWithLongLong(ctx, (long long)PSRingTable_Accumulated(r, t));
    PSStats.bytes_out += d->rows * (8 + 4 * (uint64_t)d->dim);
}

/* PS.DELTATAKE key [SEQFLOOR s] [THRESHOLD r] [MAXELEMS m] */
int PSDeltaTake_RedisCommand(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    if (argc < 2 || argc % 2) return RedisModule_WrongArity(ctx);
    static const PSOption opts[] = {{"SEQFLOOR", 1}, {"THRESHOLD", 1}, {"MAXELEMS", 1}, {NULL, 0}};
    PSRingTakeOpts o = {0, 0.0, 0};
    unsigned seen = 0;
    for (int i = 2; i < argc; i += 2) {
        const int k = ps_option_at(ctx, argv, argc, i, opts, &seen);
        if (k < 0) return REDISMODULE_OK;
        long long x;
        if (k == 0) {
            if (ps_arg_ll(ctx, argv[i + 1], "SEQFLOOR", 0, 1LL << 62, &x) != REDISMODULE_OK)
                return REDISMODULE_OK;
            o.seqfloor = (uint64_t)x;
        } else if (k == 1) {
            if (ps_arg_double(ctx, argv[i + 1], "THRESHOLD", &o.threshold) != REDISMODULE_OK)
                return REDISMODULE_OK;
            if (!(o.threshold >= 0) || !isfinite(o.threshold))
                return ps_reply_errorf(ctx, PSERR_NOT_FLOAT_F, "THRESHOLD (>= 0)");
        } else {
            if (ps_arg_ll(ctx, argv[i + 1], "MAXELEMS", 1, 1LL << 62, &x) != REDISMODULE_OK)
                return REDISMODULE_OK;
            o.maxelems = (uint64_t)x;
        }
    }
    RedisModuleKey *key;
    PSEmbedValue *v;
    PSTensor *t = ps_ring_open(ctx, argv[1], RW, &key, &v);
    if (!t && !v) return REDISMODULE_OK;
    PSRingTable *rt = NULL;
    if (v && !(rt = table_ring(ctx, v))) {
        RedisModule_CloseKey(key);
        return REDISMODULE_OK;
    }
    const int r = rt ? PSRingTable_Take(rt, v->t, &o) : PSRing_Take(t, &o);
    if (r < 0) {
        ps_ring_reply_error(ctx, -r);
    } else if (r == PS_RING_TAKE_NONE || r == PS_RING_TAKE_NONE_CAUGHTUP) {
        if (r == PS_RING_TAKE_NONE_CAUGHTUP) { /* the lag mark moved */
            RedisModule_ReplicateVerbatim(ctx);
            ps_notify(ctx, "ps.deltatake", argv[1]);
        }
        RedisModule_ReplyWithLongLong(ctx, 0);
    } else {
        if (r == PS_RING_TAKE_NEW) {
            RedisModule_ReplicateVerbatim(ctx);
            ps_notify(ctx, "ps.deltatake", argv[1]);
        }
        if (rt) reply_take_rows(ctx, rt, v->t);
        else reply_take(ctx, t);
    }
    RedisModule_CloseKey(key);
    return REDISMODULE_OK;
}

/* PS.DELTAACK key seq -> 1 when the pending take had this seq (dropped). */
int PSDeltaAck_RedisCommand(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    if (argc != 3) return RedisModule_WrongArity(ctx);
    uint64_t seq;
    if (ps_arg_u64(ctx, argv[2], "seq", &seq) != REDISMODULE_OK) return REDISMODULE_OK;
    RedisModuleKey *key;
    PSEmbedValue *v;
    PSTensor *t = ps_ring_open(ctx, argv[1], RW, &key, &v);
    if (!t && !v) return REDISMODULE_OK;
    if (v ? !v->ring : !t->ring) {
        ps_ring_reply_error(ctx, PS_RING_EUNTRACKED);
    } else if (v && v->ring->joining) {
        ps_ring_reply_error(ctx, PS_RINGT_EJOINING);
    } else {
        const int dropped = v ? PSRingTable_Ack(v->ring, seq) : PSRing_Ack(t, seq);
        if (dropped) {
            RedisModule_ReplicateVerbatim(ctx);
            ps_notify(ctx, "ps.deltaack", argv[1]);
        }
        RedisModule_ReplyWithLongLong(ctx, dropped);
    }
    RedisModule_CloseKey(key);
    return REDISMODULE_OK;
}

/* ========================================================================
 * PS.APPLYDELTA / PS.DELTAFWD / PS.DELTAFWDACK
 * ====================================================================== */

/* PS.APPLYDELTA key ID origin seq indices values [HOPS h] [PREV p] -> 1
 * applied, 0 ignored (own origin, or seq not above the origin's mark); GAP
 * when p (the origin's previous seq) is above the origin's mark. */
int PSApplyDelta_RedisCommand(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    if (argc < 7 || argc > 11 || argc % 2 == 0) return RedisModule_WrongArity(ctx);
    if (!ps_arg_is(argv[2], "ID")) return RedisModule_ReplyWithError(ctx, PSERR_RING_ID);
    long long seq, hops = 0, prev = 0;
    if (ps_arg_ll(ctx, argv[4], "seq", 1, (long long)(~0ULL >> 1), &seq) != REDISMODULE_OK)
        return REDISMODULE_OK;
    static const PSOption opts[] = {{"HOPS", 1}, {"PREV", 1}, {NULL, 0}};
    unsigned seen = 0;
    for (int i = 7; i < argc; i += 2) {
        const int k = ps_option_at(ctx, argv, argc, i, opts, &seen);
        if (k < 0) return REDISMODULE_OK;
        if (k == 0) {
            if (ps_arg_ll(ctx, argv[i + 1], "HOPS", 0, PS_RING_MAX_HOPS, &hops) != REDISMODULE_OK)
                return REDISMODULE_OK;
        } else {
            if (ps_arg_ll(ctx, argv[i + 1], "PREV", 0, seq - 1, &prev) != REDISMODULE_OK)
                return REDISMODULE_OK;
        }
    }
    size_t ol, il, vl;
    const char *origin = RedisModule_StringPtrLen(argv[3], &ol);
    const unsigned char *idx = (const unsigned char *)RedisModule_StringPtrLen(argv[5], &il);
    const unsigned char *val = (const unsigned char *)RedisModule_StringPtrLen(argv[6], &vl);
    RedisModuleKey *key;
    PSEmbedValue *v;
    PSTensor *t = ps_ring_open(ctx, argv[1], RW, &key, &v);
    if (!t && !v) return REDISMODULE_OK;
    int r;
    if (v) {
        if (!table_ring(ctx, v)) goto done;
        if (il % 8) {
            ps_ring_reply_error(ctx, PS_RINGT_ESIZE);
            goto done;
        }
        r = PSRingTable_Apply(v->ring, v->t, origin, ol, (uint64_t)seq, (uint64_t)prev, idx, il / 8,
                              val, vl, (uint64_t)hops);
    } else {
        if (il % 4 || il != vl) {
            ps_ring_reply_error(ctx, PS_RING_ECOUNT);
            goto done;
        }
        r = PSRing_ApplyPrev(t, origin, ol, (uint64_t)seq, (uint64_t)prev, idx, val, il / 4,
                             (uint64_t)hops);
    }
    if (r < 0) {
        ps_ring_reply_error(ctx, -r);
        goto done;
    }
    if (r == 1) {
        RedisModule_ReplicateVerbatim(ctx);
        ps_notify(ctx, "ps.applydelta", argv[1]);
        ps_signal_ready(ctx, argv[1]); /* the version moved: MINVERSION pulls */
        PSStats.bytes_in += il + vl;
    }
    RedisModule_ReplyWithLongLong(ctx, r);
done:
    RedisModule_CloseKey(key);
    return REDISMODULE_OK;
}

/* PS.DELTAFWD key -> [origin, seq, hops left, indices, values] or nil. */
int PSDeltaFwd_RedisCommand(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    if (argc != 2) return RedisModule_WrongArity(ctx);
    RedisModuleKey *key;
    PSEmbedValue *v;
    PSTensor *t = ps_ring_open(ctx, argv[1], REDISMODULE_READ, &key, &v);
    if (!t && !v) return REDISMODULE_OK;
    if (v) {
        const PSRingRows *d = v->ring ? PSRingTable_FwdPeek(v->ring) : NULL;
        if (!v->ring) {
            ps_ring_reply_error(ctx, PS_RING_EUNTRACKED);
        } else if (v->ring->joining) {
            ps_ring_reply_error(ctx, PS_RINGT_EJOINING);
        } else if (!d) {
            RedisModule_ReplyWithNull(ctx);
        } else {
            RedisModule_ReplyWithArray(ctx, 5);
            RedisModule_ReplyWithStringBuffer(ctx, d->origin, d->originlen);
            RedisModule_ReplyWithLongLong(ctx, (long long)d->seq);
            RedisModule_ReplyWithLongLong(ctx, (long long)d->hops);
            RedisModule_ReplyWithStringBuffer(ctx, (const char *)d->ids, (size_t)d->rows * 8);
            RedisModule_ReplyWithStringBuffer(ctx, (const char *)d->val,
                                              (size_t)d->rows * d->dim * 4);
            PSStats.bytes_out += d->rows * (8 + 4 * (uint64_t)d->dim);
        }
        RedisModule_CloseKey(key);
        return REDISMODULE_OK;
    }
    const PSRingDelta *d = PSRing_FwdPeek(t);
    if (!t->ring) {
        ps_ring_reply_error(ctx, PS_RING_EUNTRACKED);
    } else if (!d) {
        RedisModule_ReplyWithNull(ctx);
    } else {
        RedisModule_ReplyWithArray(ctx, 5);
        RedisModule_ReplyWithStringBuffer(ctx, d->origin, d->originlen);
        RedisModule_ReplyWithLongLong(ctx, (long long)d->seq);
        RedisModule_ReplyWithLongLong(ctx, (long long)d->hops);
        RedisModule_ReplyWithStringBuffer(ctx, (const char *)d->idx, (size_t)d->count * 4);
        RedisModule_ReplyWithStringBuffer(ctx, (const char *)d->val, (size_t)d->count * 4);
        PSStats.bytes_out += d->count * 8;
    }
    RedisModule_CloseKey(key);
    return REDISMODULE_OK;
}

/* PS.DELTAFWDACK key origin seq -> 1 when the oldest entry was (origin, seq). */
int PSDeltaFwdAck_RedisCommand(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    if (argc != 4) return RedisModule_WrongArity(ctx);
    uint64_t seq;
    if (ps_arg_u64(ctx, argv[3], "seq", &seq) != REDISMODULE_OK) return REDISMODULE_OK;
    size_t ol;
    const char *origin = RedisModule_StringPtrLen(argv[2], &ol);
    RedisModuleKey *key;
    PSEmbedValue *v;
    PSTensor *t = ps_ring_open(ctx, argv[1], RW, &key, &v);
    if (!t && !v) return REDISMODULE_OK;
    if (v ? !v->ring : !t->ring) {
        ps_ring_reply_error(ctx, PS_RING_EUNTRACKED);
    } else if (v && v->ring->joining) {
        ps_ring_reply_error(ctx, PS_RINGT_EJOINING);
    } else {
        const int popped = v ? PSRingTable_FwdAck(v->ring, origin, ol, seq)
                             : PSRing_FwdAck(t, origin, ol, seq);
        if (popped) {
            RedisModule_ReplicateVerbatim(ctx);
            ps_notify(ctx, "ps.deltafwdack", argv[1]);
        }
        RedisModule_ReplyWithLongLong(ctx, popped);
    }
    RedisModule_CloseKey(key);
    return REDISMODULE_OK;
}

/* ========================================================================
 * PS.INFO fields of a tracked tensor
 * ====================================================================== */

void ps_ring_info(RedisModuleCtx *ctx, const PSTensor *t, long *n) {
    const PSRing *r = t->ring;
    if (!r) return;
    RedisModule_ReplyWithCString(ctx, "ring_origin");
    RedisModule_ReplyWithStringBuffer(ctx, r->origin, r->originlen);
    *n += 2;
    ps_reply_pair_ll(ctx, "ring_take_seq", (long long)r->take_seq, n);
    ps_reply_pair_ll(ctx, "ring_pending_seq", (long long)(r->pend ? r->pend->seq : 0), n);
    ps_reply_pair_ll(ctx, "ring_pending_elems", (long long)(r->pend ? r->pend->count : 0), n);
    ps_reply_pair_ll(ctx, "ring_accumulated", (long long)PSRing_Accumulated(t), n);
    ps_reply_pair_ll(ctx, "ring_fwd_entries", (long long)r->fwd_len, n);
    ps_reply_pair_ll(ctx, "ring_fwd_bytes", (long long)r->fwd_bytes, n);
    ps_reply_pair_ll(ctx, "ring_maxqueue", (long long)r->maxqueue, n);
    ps_reply_pair_ll(ctx, "ring_applied", (long long)r->applied, n);
    ps_reply_pair_ll(ctx, "ring_maxlag", (long long)r->maxlag, n);
    ps_reply_pair_ll(ctx, "ring_lag", (long long)PSRing_Lag(r), n);
    ps_reply_pair_ll(ctx, "ring_own_pushes", (long long)r->own_pushes, n);
    ps_reply_pair_ll(ctx, "ring_lag_refusals", (long long)t->stats.ring_lag_refusals, n);
    RedisModule_ReplyWithCString(ctx, "ring_origins");
    RedisModule_ReplyWithArray(ctx, r->norigins);
    for (uint32_t i = 0; i < r->norigins; i++) {
        RedisModule_ReplyWithArray(ctx, 3);
        RedisModule_ReplyWithStringBuffer(ctx, r->origins[i].name, r->origins[i].len);
        RedisModule_ReplyWithLongLong(ctx, (long long)r->origins[i].hwm);
        RedisModule_ReplyWithLongLong(ctx, (long long)r->origins[i].applied);
    }
    *n += 2;
}
