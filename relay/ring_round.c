/* ring_round.c -- ps-relay --ring (ring.h): one round of a key for one
 * group: take, send to the successor (or straight to every group with
 * --mesh), acknowledge once every group it waits for has it (else resend
 * straight), pass the forward queue on; a GAP answer takes the group out. */

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
    if (rc == PS_ERR) {
        ring_say(r, "PS.APPLYDELTA %s (%s seq %" PRIu64 ") on %s: %s", key, origin, seq, g->name,
            g->c->errstr);
        ring_conn_failed(g);
        return -1;
    }
    uint64_t bytes = ring_delta_bytes(&r->keys[k], d);
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

/* One round of key k acting for group gi. Returns 1 when it acknowledged
 * a take or forwarded something (more may be waiting), else 0. */
int ring_act_key(ring *r, int gi, int k) {
    int work = 0;
    ringGroup *me = &r->g[gi];
    ringKey *key = &r->keys[k];
    int L = ring_live_count(r), succ = ring_successor(r, gi);
    double thr = r->o->barrier || r->o->leave ? 0 : r->threshold;
    if (!me->c) return 0;
    psDelta d;
    memset(&d, 0, sizeof(d));
    int rc = ring_key_take(key, me->c, gi == r->self ? key->seqfloor : 0, thr, &d);
    if (rc == PS_ERR) {
        ring_say(r, "PS.DELTATAKE %s on %s: %s", key->name, me->name, me->c->errstr);
        ring_conn_failed(me);
        return 0;
    }
    if (rc == 1 && (r->o->mesh || r->o->leave)) {
        /* Mesh: straight to every group; an APPLYDELTA reply (1, or 0 for a
         * repeat) is the proof it is there: acked when all answered. */
        agent_fault_point(r->fault, "take");
        if (d.seq != key->sent_seq[gi]) {
            r->st.takes++;
            key->sent_seq[gi] = d.seq;
            key->confirmed[gi] = 0;
        }
        int all = 1;
        for (int i = 0; i < r->ng; i++) {
            uint64_t bit = 1ULL << i;
            if (i == gi || !waits_for(r, i) || (key->confirmed[gi] & bit)) continue;
            if (send_delta(r, i, k, me->name, d.seq, &d, 0) >= 0) {
                key->confirmed[gi] |= bit;
                r->st.sent++;
                agent_fault_point(r->fault, "send");
            } else {
                all = 0;
            }
        }
        if (all) {
            if (psDeltaAck(me->c, key->name, d.seq) == PS_ERR) {
                ring_say(r, "PS.DELTAACK %s on %s: %s", key->name, me->name, me->c->errstr);
                ring_conn_failed(me);
            } else {
                r->st.acks++;
                work = 1;
                agent_fault_point(r->fault, "ack");
            }
        }
    } else if (rc == 1) {
        agent_fault_point(r->fault, "take");
        if (d.seq != key->sent_seq[gi]) {
            r->st.takes++;
            if (succ >= 0 && send_delta(r, succ, k, me->name, d.seq, &d, L - 2) >= 0) {
                key->sent_seq[gi] = d.seq;
                key->sent_round[gi] = r->round;
                key->sent_epoch[gi] = r->epoch;
                r->st.sent++;
                agent_fault_point(r->fault, "send");
            }
        }
        /* Acked only when every live group has it: their hwm, read now (a
         * group that does not answer counts as lacking it until it is out). */
        int lacking = 0;
        for (int i = 0; i < r->ng; i++) {
            if (i == gi || !waits_for(r, i)) continue;
            if (!r->o->barrier && r->g[i].c &&
                psInfo(r->g[i].c, key->name, &r->g[i].info[k]) != PS_OK) {
                ring_conn_failed(&r->g[i]);
                r->g[i].info[k].ring_norigins = 0;
            }
            const psRingOrigin *row = ring_origin_row(&r->g[i].info[k], me->name);
            if (!row || row->hwm < d.seq) lacking++;
        }
        if (!lacking) {
            if (psDeltaAck(me->c, key->name, d.seq) == PS_ERR) {
                ring_say(r, "PS.DELTAACK %s on %s: %s", key->name, me->name, me->c->errstr);
                ring_conn_failed(me);
            } else {
                r->st.acks++;
                work = 1;
                agent_fault_point(r->fault, "ack");
            }
        } else if (key->sent_seq[gi] == d.seq &&
                   (key->sent_epoch[gi] != r->epoch ||
                    r->round - key->sent_round[gi] > (uint64_t)L + 2)) {
            /* The ring re-formed (or the delta is late): straight to whoever lacks it. */
            for (int i = 0; i < r->ng; i++) {
                if (i == gi || !waits_for(r, i)) continue;
                const psRingOrigin *row = ring_origin_row(&r->g[i].info[k], me->name);
                if (row && row->hwm >= d.seq) continue;
                if (send_delta(r, i, k, me->name, d.seq, &d, 0) >= 0)
                    r->st.resends++;
            }
            key->sent_round[gi] = r->round;
            key->sent_epoch[gi] = r->epoch;
        }
    }
    psDeltaRelease(&d);
    /* The forward queue goes on to the successor. */
    for (int n = 0; n < RING_FWD_PER_ROUND && !AgentStop && me->c; n++) {
        psDelta e;
        memset(&e, 0, sizeof(e));
        rc = ring_key_fwd(key, me->c, &e);
        if (rc == PS_ERR) {
            ring_say(r, "PS.DELTAFWD %s on %s: %s", key->name, me->name, me->c->errstr);
            ring_conn_failed(me);
            break;
        }
        if (rc == 0) break;
        int ok = succ < 0 ? 0
                          : send_delta(r, succ, k, e.origin, e.seq, &e, (int64_t)e.hops);
        if (ok >= 0) {
            if (psDeltaFwdAck(me->c, key->name, e.origin, e.seq) == PS_ERR) {
                ring_say(r, "PS.DELTAFWDACK %s on %s: %s", key->name, me->name, me->c->errstr);
                ring_conn_failed(me);
                ok = -1;
            } else {
                r->st.forwarded++;
                work = 1;
                agent_fault_point(r->fault, "fwd");
            }
        }
        psDeltaRelease(&e);
        if (ok < 0) break;
    }
    return work;
}
