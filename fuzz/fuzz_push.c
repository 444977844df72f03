/* fuzz_push.c -- libFuzzer harness for PSTensor_Push and the other tensor
 * writes (module/core/tensor.c) on small tensors: fuzzed optimizer, hyper-
 * parameters, sync mode, staleness policy and exactly-once table, then a
 * fuzzed sequence of pushes (dense or ROWS, VERSION, ID, SCALE, raw float
 * bits including NaN/Inf), snapshots, rollbacks, round closes, SET and copies.
 *
 * Invariants checked after every operation:
 *  - an error status (or a duplicate) leaves every byte of state unchanged;
 *  - PST_OK bumps the version by one (async) / closes the round (sync),
 *    PST_PENDING adds one gradient to the open round and keeps the version;
 *    on an ACCUM tensor PST_OK adds it to the sum and keeps version and values;
 *  - an ACCUM take answers the same pending slot until it is acknowledged;
 *  - snapshots and copies never change when the live tensor is written
 *    (copy on write);
 *  - the exactly-once table stays within its bound and a replayed (id, seq)
 *    (one applied before, or below the 64-seq window)
 *    answers the newest version its client's pushes produced;
 *  - its index finds every entry at its array position, and a new client at
 *    a full table evicts the entry the former linear scan chose (the first
 *    with the oldest version), so RDB/AOF order is unchanged;
 *  - a pull of any ROWS request (repeats included) is either refused or
 *    returns at most the whole tensor and at most the byte bound
 *    (ps_pull_size: the memory a pull may cost, issue 11 item 1).
 * The sync-round timers and the scratch trim are glue (Redis timers and
 * allocator) and are tested by python_tests/test_timers.py / test_limits.py. */

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "accum.h"
#include "codec.h"
#include "fuzz_util.h"
#include "ps_limits.h"
#include "tensor.h"

#define MAXD 6

/* FNV-1a over the tensor's state (what DEBUG DIGEST-VALUE covers). */
static uint64_t h_add(uint64_t h, const void *p, size_t n) {
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
    return h;
}
static uint64_t h_buf(uint64_t h, const PSBuf *b) {
    return b ? h_add(h, b->v, b->n * sizeof(float)) : h_add(h, "-", 1);
}
static uint64_t state_hash(const PSTensor *t) {
    uint64_t h = 1469598103934665603ull;
    h = h_add(h, &t->version, 8);
    h = h_add(h, &t->h, sizeof(t->h));
    h = h_add(h, &t->opt.step, 8);
    h = h_add(h, &t->opt.b1pow, 8);
    h = h_add(h, &t->opt.b2pow, 8);
    h = h_buf(h, t->data);
    h = h_buf(h, t->opt.s[0]);
    h = h_buf(h, t->opt.s[1]);
    h = h_buf(h, t->round_acc);
    h = h_add(h, &t->round_count, 4);
    h = h_add(h, &t->acc.count, 8);
    h = h_add(h, &t->acc.seq, 8);
    h = h_add(h, &t->acc.pend_count, 8);
    h = h_buf(h, t->acc.sum);
    h = h_buf(h, t->acc.pend);
    for (uint32_t i = 0; i < t->dedup_len; i++) {
        h = h_add(h, t->dedup[i].id, t->dedup[i].idlen);
        h = h_add(h, &t->dedup[i].seq, 8);
        h = h_add(h, &t->dedup[i].window, 8);
        h = h_add(h, &t->dedup[i].version, 8);
    }
    for (uint32_t i = 0; i < t->nsnap; i++) {
        h = h_add(h, t->snaps[i].name, t->snaps[i].namelen);
        h = h_add(h, &t->snaps[i].version, 8);
        h = h_buf(h, t->snaps[i].data);
        h = h_buf(h, t->snaps[i].opt.s[0]);
        h = h_buf(h, t->snaps[i].opt.s[1]);
    }
    return h;
}

/* The index agrees with the array: each entry is found at its position. */
static void check_dedup_index(PSTensor *t) {
    for (uint32_t i = 0; i < t->dedup_len; i++)
        FZ_CHECK(PSTensor_DedupFind(t, t->dedup[i].id, t->dedup[i].idlen) == &t->dedup[i]);
}

/* What the linear table evicted: the first entry with the oldest version. */
static const PSDedupEntry *linear_victim(const PSTensor *t) {
    uint32_t v = 0;
    for (uint32_t i = 1; i < t->dedup_len; i++)
        if (t->dedup[i].version < t->dedup[v].version) v = i;
    return &t->dedup[v];
}

static double fz_hyper(FuzzIn *in, double dflt) {
    uint8_t sel = fz_u8(in);
    if (sel < 160) return dflt;
    if (sel < 240) return (double)(sel - 160) / 40.0; /* 0 .. 2 */
    uint64_t bits = fz_uint(in, 8);
    double d;
    memcpy(&d, &bits, 8);
    return d;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    FuzzIn in = {data, size};
    uint64_t dims[2] = {1 + fz_range(&in, MAXD), 1 + fz_range(&in, MAXD)};
    uint32_t ndim = 1 + (fz_u8(&in) & 1);
    uint64_t n = ndim == 1 ? dims[0] : dims[0] * dims[1];
    const uint64_t rl = ndim == 1 ? 1 : dims[1];

    PSTensorOpts o;
    PSTensor_DefaultOpts(&o, 0.1);
    o.optim = (int)fz_range(&in, PS_OPT_COUNT);
    PSHyper h = o.h;
    h.lr = fz_hyper(&in, h.lr);
    h.momentum = fz_hyper(&in, h.momentum);
    h.beta1 = fz_hyper(&in, h.beta1);
    h.beta2 = fz_hyper(&in, h.beta2);
    h.eps = fz_hyper(&in, h.eps);
    h.wd = fz_hyper(&in, h.wd);
    h.clipnorm = fz_hyper(&in, h.clipnorm);
    if (ps_optim_check(&h) == NULL) o.h = h; /* the commands refuse the rest */
    uint8_t mode = fz_u8(&in);
    o.sync_n = (mode & 3) == 3 && o.optim != PS_OPT_ACCUM ? 1 + fz_range(&in, 3) : 0;
    o.maxstale = (mode & 4) ? (int64_t)fz_range(&in, 4) : -1;
    o.policy = (mode & 8) ? PS_POLICY_SCALE : PS_POLICY_REJECT;
    o.dedup_max = fz_range(&in, 4);
    o.max_snapshots = 4;

    PSTensor *t = PSTensor_New(ndim, dims, n, &o);
    FZ_CHECK(t != NULL);
    for (uint64_t i = 0; i < n; i++) t->data->v[i] = fz_float(&in);

    float g[MAXD * MAXD * 4], first_snap[MAXD * MAXD];
    uint32_t rows[MAXD * 4];
    int have_snap = 0;
    PSTensor *copy = NULL;
    uint64_t copy_hash = 0;
    static const char *ids[] = {"a", "b", "c"};

    for (int step = 0; step < 24 && in.len; step++) {
        uint8_t op = fz_u8(&in);
        const uint64_t before = state_hash(t);
        const uint64_t v0 = t->version;
        const uint32_t rc0 = t->round_count;
        const uint64_t ac0 = t->acc.count;
        switch (op % 8) {
        case 0:
        case 1:
        case 2:
        case 3: { /* push */
            PSPush p = {.scale = 1.0};
            uint8_t f = fz_u8(&in);
            if ((f & 1) && ndim == 2) {
                size_t nr = 1 + fz_range(&in, MAXD * 2);
                for (size_t i = 0; i < nr; i++) rows[i] = fz_range(&in, (uint32_t)dims[0] + 1);
                /* Only what the command lets through (ps_rows_check). */
                if (ps_rows_check((const unsigned char *)rows, nr * 4, dims[0], NULL) != 0) break;
                p.rows = (const unsigned char *)rows;
                p.nrows = nr;
                /* The same ROWS as a pull: bounded by the tensor and the bound. */
                const uint64_t maxb = 4 * (1 + fz_range(&in, (uint32_t)(2 * n)));
                uint64_t m;
                const uint64_t eb = (f & 16) ? PS_PULL_VALUE_BYTES : PS_PULL_ELEM_BYTES;
                const int why = ps_pull_size(t, nr, eb, maxb, &m);
                if (nr > dims[0]) FZ_CHECK(why == PS_PULL_TOO_MANY_ROWS);
                if (why == PS_PULL_OK) FZ_CHECK(m <= t->n && m * eb <= maxb);
                else FZ_CHECK(nr > dims[0] || nr * rl * eb > maxb);
            }
            size_t m = p.rows ? p.nrows * rl : n;
            for (size_t i = 0; i < m; i++) g[i] = fz_float(&in);
            p.g = (const unsigned char *)g;
            if (f & 2) {
                p.has_version = 1;
                p.version = t->version - (t->version ? fz_range(&in, (uint32_t)(t->version > 5 ? 5 : t->version) + 1) : 0);
                if (f & 64) p.version += 1; /* from the future */
            }
            if (f & 4) {
                const char *id = ids[fz_range(&in, 3)];
                p.id = id;
                p.idlen = strlen(id);
                p.seq = 1 + fz_range(&in, 8);
            }
            if (f & 8) p.scale = fz_hyper(&in, 1.0);
            if (!isfinite(p.scale)) p.scale = 1.0; /* the command's parser refuses these */
            PSDedupEntry *de = p.id ? PSTensor_DedupFind(t, p.id, p.idlen) : NULL;
            const uint64_t dup_version = de ? de->version : 0;
            const int is_dup = de && PSDedupEntry_Seen(de, p.seq);
            const uint64_t newest0 = de ? de->seq : 0;
            char victim[8] = {0};
            size_t victimlen = 0;
            if (p.id && !de && t->dedup_max && t->dedup_len >= t->dedup_max) {
                const PSDedupEntry *v = linear_victim(t);
                victimlen = v->idlen < sizeof(victim) ? v->idlen : 0;
                memcpy(victim, v->id, victimlen);
            }
            PSPushResult r;
            int st = PSTensor_Push(t, &p, &r);
            if (is_dup) FZ_CHECK(st == PST_DUPLICATE && r.version == dup_version);
            if (st == PST_OK && t->optim == PS_OPT_ACCUM) {
                FZ_CHECK(t->version == v0 && r.version == v0 && t->acc.count == ac0 + 1);
            } else if (st == PST_OK) {
                FZ_CHECK(t->version == v0 + 1 && r.version == t->version);
                if (t->sync_n) FZ_CHECK(t->round_count == 0 && t->round_acc == NULL);
            } else if (st == PST_PENDING) {
                FZ_CHECK(t->sync_n && t->version == v0 && t->round_count == rc0 + 1);
                FZ_CHECK(r.version == v0 + 1);
            } else {
                FZ_CHECK(state_hash(t) == before);
            }
            if ((st == PST_OK || st == PST_PENDING) && p.id && t->dedup_max) {
                PSDedupEntry *e = PSTensor_DedupFind(t, p.id, p.idlen);
                /* Applied: now seen; the newest seq moved to it unless it was a
                 * late seq inside the window; the entry's version includes it. */
                FZ_CHECK(e && PSDedupEntry_Seen(e, p.seq) && e->version >= r.version);
                FZ_CHECK(e->seq == (p.seq > newest0 ? p.seq : newest0));
            }
            FZ_CHECK(t->dedup_len <= t->dedup_max);
            if (victimlen && (st == PST_OK || st == PST_PENDING))
                FZ_CHECK(PSTensor_DedupFind(t, victim, victimlen) == NULL);
            check_dedup_index(t);
            break;
        }
        case 4: { /* snapshot take / drop */
            char nm[2] = {(char)('p' + (fz_u8(&in) & 1)), 0};
            if (fz_u8(&in) & 1) {
                if (PSTensor_SnapshotFind(t, nm, 1) || t->nsnap >= t->max_snapshots) break;
                FZ_CHECK(PSTensor_SnapshotTake(t, nm, 1, 0) == PST_OK);
                if (!have_snap && nm[0] == 'p') {
                    memcpy(first_snap, t->data->v, n * sizeof(float));
                    have_snap = 1;
                }
            } else {
                int had = PSTensor_SnapshotFind(t, nm, 1) != NULL;
                FZ_CHECK(PSTensor_SnapshotDrop(t, nm, 1) == had);
                if (nm[0] == 'p') have_snap = 0;
            }
            break;
        }
        case 5: { /* rollback */
            char nm[2] = {(char)('p' + (fz_u8(&in) & 1)), 0};
            PSSnapshot *s = PSTensor_SnapshotFind(t, nm, 1);
            if (!s || t->round_count) break; /* the command refuses during a round */
            FZ_CHECK(PSTensor_Rollback(t, s) == PST_OK);
            FZ_CHECK(t->version == v0 + 1 && memcmp(t->data->v, s->data->v, n * 4) == 0);
            break;
        }
        case 6: { /* round close (timer) or SET; on ACCUM tensors take / ack */
            if (t->optim == PS_OPT_ACCUM) {
                const uint64_t pend0 = t->acc.pend_count, seq0 = t->acc.seq;
                const uint8_t how = fz_u8(&in);
                if (how & 1) {
                    FZ_CHECK(PSAccum_Ack(t, seq0 - (how & 2 ? 1 : 0)) == (pend0 && !(how & 2)));
                    break;
                }
                int st = PSAccum_Take(t, 1 + (how >> 6), 0);
                if (st == PS_TAKE_AGAIN) FZ_CHECK(pend0 && state_hash(t) == before);
                else if (st == PS_TAKE_SHORT) FZ_CHECK(state_hash(t) == before);
                else FZ_CHECK(!pend0 && t->acc.seq == seq0 + 1 && t->acc.pend_count == ac0 &&
                              t->acc.count == 0 && t->version == v0);
                break;
            }
            if (fz_u8(&in) & 1) {
                int st = PSTensor_CloseRound(t);
                if (st == PST_PENDING) FZ_CHECK(state_hash(t) == before);
                else FZ_CHECK(st == PST_OK && t->version == v0 + 1 && t->round_count == 0);
            } else {
                for (uint64_t i = 0; i < n; i++) g[i] = (float)i;
                FZ_CHECK(PSTensor_SetValues(t, (const unsigned char *)g) == PST_OK);
                FZ_CHECK(t->version == v0 + 1 && memcmp(t->data->v, g, n * 4) == 0);
            }
            break;
        }
        default: /* copy: must not change while the original is written */
            if (copy) PSTensor_Free(copy);
            copy = PSTensor_Copy(t);
            FZ_CHECK(copy != NULL);
            copy_hash = state_hash(copy);
            FZ_CHECK(copy_hash == state_hash(t));
            break;
        }
        if (have_snap) {
            PSSnapshot *s = PSTensor_SnapshotFind(t, "p", 1);
            FZ_CHECK(s && memcmp(s->data->v, first_snap, n * sizeof(float)) == 0);
        }
        if (copy) {
            FZ_CHECK(state_hash(copy) == copy_hash);
            check_dedup_index(copy);
        }
    }
    PSTensor_Free(copy);
    PSTensor_Free(t);
    return 0;
}
