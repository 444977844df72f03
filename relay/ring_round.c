/* ring_round.c -- ps-relay --ring (ring.h): one round of every key for one
 * group: take, send to the successor (or straight to every group with
 * --mesh), acknowledge once every group it waits for has it (else resend
 * straight), pass the forward queue on; a GAP answer takes the group out.
 * What crosses the WAN goes in waves (ring_wave.c): the round's takes, the
 * forward queues' oldest entries and the marks it acknowledges by are one
 * pipelined batch per group, all keys at once, so a round costs one WAN
 * round trip, plus one per further forward entry of a key (the queue
 * hands out its oldest entry only), not one per key and command. */

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <redis-ps/ps.h>

#include "agent.h"
#include "clock.h"
#include "protocol.h"
#include "ring_int.h"

/* Group 'to' answered GAP to a delta (origin, seq) of key k: it lacks
 * origin's delta 'prev' (docs/design.md "Ring state": per origin, deltas
 * apply in seq order, no gap). It cannot take any later delta of that
 * origin until its agent copies the ring again (it lacks a delta the origin
 * acknowledged, which its agent's stale check sees), so this agent takes it
 * out of the ring (forward entries go around it) and, once it has not
 * rejoined for --dead-after-ms (its agent may be gone), stops waiting for
 * it (waits_for); it enters again once a probe shows it has that delta
 * (probe_all). With --barrier nothing moves: the barrier cannot drain a
 * group that has to rejoin. */
static void gap_seen(ring *r, int to, int k, const char *origin, uint64_t seq, uint64_t prev) {
    ringGroup *g = &r->g[to];
    if (g->gap) return; /* known: its agent is on it */
    ring_say(r, "PS.APPLYDELTA %s (%s seq %" PRIu64 ") on %s: GAP, it lacks %s's delta %" PRIu64,
        r->keys[k].name, origin, seq, g->name, origin, prev);
    if (r->o->barrier) return;
    g->gap = 1;
    g->gap_ms = agent_mono_ms();
    g->gap_key = k;
    g->gap_prev = prev;
    snprintf(g->gap_origin, sizeof(g->gap_origin), "%s", origin);
    g->stale = 1;
    char buf[1024];
    if (g->live) {
        g->live = 0;
        r->epoch++;
    }
    ring_order_str(r, buf, sizeof(buf));
    printf("[ring %s] group %s lacks delta %" PRIu64 " of %s (GAP): kept out until its agent "
           "rejoins it; ring %s\n", r->o->self, g->name, prev, origin, buf);
    ring_event(r, "group_gap", ", \"stale\": \"%s\", \"origin\": \"%s\", \"lacks\": %" PRIu64
          ", \"ring\": \"%s\"", g->name, origin, prev, buf);
    fflush(stdout);
}

/* PS.APPLYDELTA of key k to group 'to', with PREV seq - 1: an origin's
 * seqs are dense (one per take; SEQFLOOR and JOIN only skip seqs some group
 * already holds), so the delta before seq is seq - 1. 1 applied, 0 a
 * repeat, -1 failed, -2 GAP (gap_seen). A module without PREV is sent to
 * without it from then on (its first answer to a PREV is an error that a
 * resend without PREV does not give). */
static int send_delta(ring *r, int to, int k, const char *origin, uint64_t seq,
                      const psDelta *d, int64_t hops) {
    ringGroup *g = &r->g[to];
    const char *key = r->keys[k].name;
    if (!g->c) return -1;
    double t0 = ps_mono_s();
    uint64_t prev = g->noprev ? 0 : seq - 1;
    int rc = ring_key_apply(&r->keys[k], g->c, origin, seq, prev, d, hops);
    if (rc == PS_ERR && prev && g->c->err == PS_ERR_SERVER) {
        const ps_proto_error cls = ps_proto_error_class(g->c->errstr, strlen(g->c->errstr));
        if (cls == PS_PROTO_ERR_GAP) {
            gap_seen(r, to, k, origin, seq, prev);
            return -2;
        }
        if (cls == PS_PROTO_ERR_ERR || cls == PS_PROTO_ERR_UNKNOWN_OPT) {
            char why[256];
            snprintf(why, sizeof(why), "%s", g->c->errstr);
            rc = ring_key_apply(&r->keys[k], g->c, origin, seq, 0, d, hops);
            if (rc != PS_ERR) {
                g->noprev = 1;
                ring_say(r, "group %s's module has no PS.APPLYDELTA ... PREV (%s): sending without it "
                       "(a gap in its deltas goes unnoticed there)", g->name, why);
            }
        }
    }
    double dt = ps_mono_s() - t0;
    ring_count_rt(r, to, r->ph, 1);
    r->tm.cmds[r->ph] += to != r->self;
    if (rc == PS_ERR) {
        ring_say(r, "PS.APPLYDELTA %s (%s seq %" PRIu64 ") on %s: %s", key, origin, seq, g->name,
            g->c->errstr);
        ring_conn_failed(g);
        return -1;
    }
    uint64_t bytes = ring_delta_bytes(&r->keys[k], d->count);
    g->bytes_to += bytes;
    g->send_s += dt;
    r->round_send_s += dt;
    r->st.bytes_sent += bytes;
    r->st.elems_sent += d->count;
    if (rc == 0) r->st.dups++;
    return rc;
}

/* A take is acknowledged only once group i has it: i is in the ring (or
 * was until it stopped answering, for --dead-after-ms), or it answers as
 * tracked, in the ring or not (a group rejoining: waiting for it lets the
 * delta reach it right after its copy), unless it answered GAP and has not
 * rejoined for --dead-after-ms: its agent is gone or cannot copy, and it
 * can take no delta of that origin before it does (if it rejoins later and
 * lacks what was acknowledged meanwhile, its agent sees that and copies
 * again). */
static int waits_for(const ring *r, int i) {
    const ringGroup *g = &r->g[i];
    if (g->gap && agent_mono_ms() - g->gap_ms >= r->o->dead_ms) return 0;
    return g->live || g->ok;
}


/* What a pipelined PS.APPLYDELTA's answer means, as send_delta's return
 * (1 applied, 0 a repeat, -1 failed, -2 GAP), with its accounting. A
 * module without PREV: resent without it (send_delta) once. */
static int apply_result(ring *r, int to, int k, const psRingOp *op) {
    ringGroup *g = &r->g[to];
    if (op->rc == PS_ERR) {
        if (op->status == PS_ERR_SERVER && op->prev) {
            const ps_proto_error cls = ps_proto_error_class(op->err, strlen(op->err));
            if (cls == PS_PROTO_ERR_GAP) {
                gap_seen(r, to, k, op->origin, op->seq, op->prev);
                return -2;
            }
            if (cls == PS_PROTO_ERR_ERR || cls == PS_PROTO_ERR_UNKNOWN_OPT) {
                psDelta d;
                memset(&d, 0, sizeof(d));
                d.idx = op->idx;
                d.ids = op->ids;
                d.dim = op->dim;
                d.vals = op->vals;
                d.count = op->count;
                return send_delta(r, to, k, op->origin, op->seq, &d, op->hops);
            }
        }
        ring_say(r, "PS.APPLYDELTA %s (%s seq %" PRIu64 ") on %s: %s", r->keys[k].name, op->origin,
            op->seq, g->name, op->err);
        if (ring_op_noreply(op) && g->c) ring_conn_drop(g);
        return -1;
    }
    uint64_t bytes = ring_delta_bytes(&r->keys[k], op->count);
    g->bytes_to += bytes;
    r->st.bytes_sent += bytes;
    r->st.elems_sent += op->count;
    if (op->rc == 0) r->st.dups++;
    return op->rc;
}

/* Queues PS.APPLYDELTA of (origin, seq, delta) to group 'to' in the wave. */
static void queue_apply(ring *r, int to, int k, int tag, const char *origin, uint64_t seq,
                        const psDelta *d, int64_t hops) {
    psRingOp *op = ring_wave_op(r, to, k, tag, PS_RING_OP_APPLY);
    if (!op) return;
    op->origin = origin;
    op->seq = seq;
    op->prev = r->g[to].noprev ? 0 : seq - 1;
    op->idx = d->idx;
    op->ids = d->ids;
    op->dim = d->dim;
    op->vals = d->vals;
    op->count = (size_t)d->count;
    op->hops = hops;
}

enum { TAG_TAKE, TAG_FWD, TAG_INFO };

/* Per key, this round. */
typedef struct keyRound {
    psDelta d;        /* the take (have) */
    psDelta e;        /* the forward queue's oldest entry (have_e) */
    int have, fresh;  /* a take; a new one (not sent yet) */
    int all;          /* --mesh: every group it waits for answered */
    int have_e, e_ok; /* an entry; the successor has it */
    int fwd_done;     /* no more forwarding of this key this round */
    int nfwd;
} keyRound;

/* The oldest forward entry of every key still forwarding, on group gi's
 * server. 1 when some key has one. */
static int fetch_heads(ring *r, int gi, keyRound *kr) {
    ringGroup *me = &r->g[gi];
    int any = 0;
    double t0 = ps_mono_s();
    for (int k = 0; k < r->nkeys; k++) {
        keyRound *x = &kr[k];
        x->have_e = x->e_ok = 0;
        if (x->fwd_done || x->nfwd >= RING_FWD_PER_ROUND || AgentStop || !me->c) continue;
        ring_count_rt(r, gi, RING_PH_FWD, 1);
        int rc = ring_key_fwd(&r->keys[k], me->c, &x->e);
        if (rc == PS_ERR) {
            ring_say(r, "PS.DELTAFWD %s on %s: %s", r->keys[k].name, me->name, me->c->errstr);
            ring_conn_failed(me);
            x->fwd_done = 1;
        } else if (rc == 0) {
            x->fwd_done = 1;
        } else {
            x->have_e = 1;
            any = 1;
        }
    }
    r->tm.s[RING_PH_FWD] += ps_mono_s() - t0;
    return any;
}

/* Pops (PS.DELTAFWDACK) every entry the successor applied; a key whose
 * entry failed stops forwarding this round. 1 when something was popped. */
static int pop_heads(ring *r, int gi, keyRound *kr) {
    ringGroup *me = &r->g[gi];
    int work = 0;
    double t0 = ps_mono_s();
    for (int k = 0; k < r->nkeys; k++) {
        keyRound *x = &kr[k];
        if (!x->have_e) continue;
        if (x->e_ok && me->c) {
            ring_count_rt(r, gi, RING_PH_FWD, 1);
            if (psDeltaFwdAck(me->c, r->keys[k].name, x->e.origin, x->e.seq) == PS_ERR) {
                ring_say(r, "PS.DELTAFWDACK %s on %s: %s", r->keys[k].name, me->name,
                    me->c->errstr);
                ring_conn_failed(me);
                x->fwd_done = 1;
            } else {
                r->st.forwarded++;
                x->nfwd++;
                work = 1;
                agent_fault_point(r->fault, "fwd");
            }
        } else {
            x->fwd_done = 1;
        }
        psDeltaRelease(&x->e);
        x->have_e = 0;
    }
    r->tm.s[RING_PH_FWD] += ps_mono_s() - t0;
    return work;
}

/* Queues every fetched forward entry to the successor; with none (alone
 * in the ring) an entry counts as passed on (nobody is left to take it;
 * its origin still waits for whoever lacks it). */
static void queue_heads(ring *r, int succ, keyRound *kr) {
    for (int k = 0; k < r->nkeys; k++) {
        keyRound *x = &kr[k];
        if (!x->have_e) continue;
        if (succ < 0) {
            x->e_ok = 1;
        } else if (r->g[succ].c) {
            queue_apply(r, succ, k, TAG_FWD, x->e.origin, x->e.seq, &x->e, (int64_t)x->e.hops);
        }
    }
}

/* Reads the answers of the wave just run into kr. */
static void wave_results(ring *r, int gi, keyRound *kr) {
    ringWave *w = &r->w;
    for (int i = 0; i < r->ng; i++) {
        for (size_t j = 0; j < w->n[i]; j++) {
            size_t at = (size_t)i * w->cap + j;
            const psRingOp *op = &w->ops[at];
            int k = w->key[at];
            ringKey *key = &r->keys[k];
            keyRound *x = &kr[k];
            if (w->tag[at] == TAG_INFO) {
                if (op->rc != PS_OK && ring_op_noreply(op) && r->g[i].c) ring_conn_drop(&r->g[i]);
                continue;
            }
            int rc = apply_result(r, i, k, op);
            if (w->tag[at] == TAG_FWD) {
                x->e_ok = rc >= 0;
            } else if (r->o->mesh || r->o->leave) {
                if (rc >= 0) {
                    key->confirmed[gi] |= 1ULL << i;
                    r->st.sent++;
                    agent_fault_point(r->fault, "send");
                } else {
                    x->all = 0;
                }
            } else if (rc >= 0) {
                key->sent_seq[gi] = op->seq;
                key->sent_ms[gi] = agent_mono_ms();
                key->sent_epoch[gi] = r->epoch;
                key->confirmed[gi] = 1ULL << i; /* the answer is the proof it is there */
                r->st.sent++;
                agent_fault_point(r->fault, "send");
            }
        }
    }
}

static int ack_take(ring *r, int gi, int k, uint64_t seq) {
    ringGroup *me = &r->g[gi];
    ring_count_rt(r, gi, RING_PH_ACK, 1);
    if (psDeltaAck(me->c, r->keys[k].name, seq) == PS_ERR) {
        ring_say(r, "PS.DELTAACK %s on %s: %s", r->keys[k].name, me->name, me->c->errstr);
        ring_conn_failed(me);
        return 0;
    }
    r->st.acks++;
    agent_fault_point(r->fault, "ack");
    return 1;
}

/* One round of every key acting for group gi: (1) the takes on gi's server;
 * (2) one wave: each new take to the successor (--mesh: straight to every
 * group it waits for), each key's oldest forward entry to the successor,
 * then PS.INFO of the keys with a take pending on every group it waits for
 * (after the applies on the same connection, so they read them); (3) the
 * acks of the takes every such group has (else, late, straight resends);
 * (4) the forward entries the successor applied popped, the next ones sent
 * in another wave, until the queues are empty (RING_FWD_PER_ROUND per key). */
int ring_act(ring *r, int gi) {
    ringGroup *me = &r->g[gi];
    const int nk = r->nkeys, mesh = r->o->mesh || r->o->leave;
    int work = 0, L = ring_live_count(r), succ = ring_successor(r, gi);
    double thr = r->o->barrier || r->o->leave ? 0 : r->threshold;
    if (!me->c) return 0;
    keyRound *kr = calloc((size_t)nk, sizeof(*kr));
    if (!kr) {
        ring_say(r, "out of memory");
        return 0;
    }
    /* (1) takes */
    double t0 = ps_mono_s();
    for (int k = 0; k < nk && me->c; k++) {
        ringKey *key = &r->keys[k];
        keyRound *x = &kr[k];
        /* --flush-ms: the whole accumulated change, now and then (what stays under
         * the threshold is change the other groups never see until then: each
         * group's own, summed at the end, overshoots) */
        long long now = agent_mono_ms();
        int flush = r->o->flush_ms > 0 && gi == r->self && thr > 0 &&
                    now - key->flushed_ms >= r->o->flush_ms;
        ring_count_rt(r, gi, RING_PH_TAKE, 1);
        int rc = ring_key_take(key, me->c, gi == r->self ? key->seqfloor : 0, flush ? 0 : thr,
                               &x->d);
        if (flush && rc != PS_ERR && (rc == 0 || x->d.seq != key->sent_seq[gi])) {
            key->flushed_ms = now; /* a new take (or nothing at all) took everything */
            if (rc == 1) r->st.flushes++;
        }
        if (rc == PS_ERR) {
            ring_say(r, "PS.DELTATAKE %s on %s: %s", key->name, me->name, me->c->errstr);
            ring_conn_failed(me);
            continue;
        }
        if (rc != 1) continue;
        x->have = 1;
        x->all = 1;
        agent_fault_point(r->fault, "take");
        if (x->d.seq != key->sent_seq[gi]) {
            r->st.takes++;
            x->fresh = 1;
            if (mesh) key->sent_seq[gi] = x->d.seq;
            key->confirmed[gi] = 0;
        }
    }
    r->tm.s[RING_PH_TAKE] += ps_mono_s() - t0;
    fetch_heads(r, gi, kr);
    /* (2) the wave */
    ring_wave_clear(r);
    for (int k = 0; k < nk; k++) {
        ringKey *key = &r->keys[k];
        keyRound *x = &kr[k];
        if (!x->have) continue;
        if (mesh) {
            for (int i = 0; i < r->ng; i++) {
                if (i == gi || !waits_for(r, i) || (key->confirmed[gi] & (1ULL << i))) continue;
                if (!r->g[i].c) {
                    x->all = 0;
                    continue;
                }
                queue_apply(r, i, k, TAG_TAKE, me->name, x->d.seq, &x->d, 0);
            }
        } else if (x->fresh && succ >= 0 && r->g[succ].c) {
            queue_apply(r, succ, k, TAG_TAKE, me->name, x->d.seq, &x->d, L - 2);
        }
    }
    queue_heads(r, succ, kr);
    /* The marks of the groups not known to hold a take sent before (one
     * sent now reaches the successor only: its answer tells, and the
     * others have it only after the successor's agent passed it on). */
    if (!mesh && !r->o->barrier)
        for (int k = 0; k < nk; k++) {
            if (!kr[k].have || kr[k].fresh) continue;
            for (int i = 0; i < r->ng; i++) {
                if (i == gi || !waits_for(r, i) || !r->g[i].c ||
                    (r->keys[k].confirmed[gi] & (1ULL << i)))
                    continue;
                psRingOp *op = ring_wave_op(r, i, k, TAG_INFO, PS_RING_OP_INFO);
                if (op) op->info = &r->g[i].info[k];
            }
        }
    r->ph = RING_PH_SEND;
    ring_wave_run(r, RING_PH_SEND);
    wave_results(r, gi, kr);
    /* (3) acks: every group it waits for has the take (ring: its mark, read
     * in the wave; mesh: it answered) */
    t0 = ps_mono_s();
    r->ph = RING_PH_ACK;
    for (int k = 0; k < nk && me->c; k++) {
        ringKey *key = &r->keys[k];
        keyRound *x = &kr[k];
        if (!x->have) continue;
        if (mesh) {
            if (x->all) work |= ack_take(r, gi, k, x->d.seq);
            continue;
        }
        /* (a group's mark, once read at the take, stays known: a server
         * that loses what it applied is a group that rejoins) */
        int lacking = 0;
        for (int i = 0; i < r->ng; i++) {
            if (i == gi || !waits_for(r, i) || (key->confirmed[gi] & (1ULL << i))) continue;
            const psRingOrigin *row = ring_origin_row(&r->g[i].info[k], me->name);
            if (!row || row->hwm < x->d.seq)
                lacking++;
            else if (key->sent_seq[gi] == x->d.seq)
                key->confirmed[gi] |= 1ULL << i;
        }
        if (!lacking) {
            work |= ack_take(r, gi, k, x->d.seq);
            continue;
        }
        if (key->sent_seq[gi] == x->d.seq) r->awaiting = 1;
        if (key->sent_seq[gi] == x->d.seq &&
            (key->sent_epoch[gi] != r->epoch ||
             agent_mono_ms() - key->sent_ms[gi] > (long long)(L + 2) * r->o->every_ms)) {
            /* The ring re-formed (or the delta is late): straight to whoever lacks it. */
            for (int i = 0; i < r->ng; i++) {
                if (i == gi || !waits_for(r, i) || (key->confirmed[gi] & (1ULL << i))) continue;
                if (send_delta(r, i, k, me->name, x->d.seq, &x->d, 0) >= 0) {
                    r->st.resends++;
                    key->confirmed[gi] |= 1ULL << i;
                }
            }
            key->sent_ms[gi] = agent_mono_ms();
            key->sent_epoch[gi] = r->epoch;
        }
    }
    r->tm.s[RING_PH_ACK] += ps_mono_s() - t0;
    /* (4) forwarding: pop what the successor applied, send the next entries */
    r->ph = RING_PH_FWD;
    for (;;) {
        work |= pop_heads(r, gi, kr);
        if (!fetch_heads(r, gi, kr)) break;
        ring_wave_clear(r);
        queue_heads(r, succ, kr);
        ring_wave_run(r, RING_PH_FWD);
        wave_results(r, gi, kr);
    }
    ring_wave_clear(r);
    for (int k = 0; k < nk; k++) {
        psDeltaRelease(&kr[k].d);
        psDeltaRelease(&kr[k].e);
    }
    free(kr);
    return work;
}
