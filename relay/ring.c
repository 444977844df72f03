/* ring.c -- ps-relay --ring: the ring topology's agent (ring.h). Setup
 * (groups, keys, the start check, TRACK or JOIN), then rounds: probe every
 * group (PS.INFO: liveness, hwm tables, RTT), act for this group (or, with
 * --barrier, for every live group): take, send, ack when everyone has it,
 * forward the queue; progress lines and JSON events. This file is the main
 * loop; the parts it calls are listed in ring_int.h. */

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <redis-ps/ps.h>

#include "agent.h"
#include "clock.h"
#include "ring_int.h"

static void ring_progress(ring *r, const char *what) {
    long long now = agent_mono_ms();
    double el = (double)(now - r->start_ms) / 1e3;
    char buf[1024];
    ring_order_str(r, buf, sizeof(buf));
    printf("[ring %s] %s%.1fs: ring %s, threshold %g, takes %" PRIu64 " acked %" PRIu64
           " forwarded %" PRIu64 " resent %" PRIu64 " repeats %" PRIu64 ", %" PRIu64
           " elements / %.2f MB sent, %" PRIu64 " flushes\n",
           r->o->self, what, el, buf, r->threshold, r->st.takes, r->st.acks, r->st.forwarded,
           r->st.resends, r->st.dups, r->st.elems_sent, (double)r->st.bytes_sent / 1e6,
           r->st.flushes);
    for (int i = 0; i < r->ng; i++) {
        ringGroup *g = &r->g[i];
        if (i == r->self) continue;
        double db = (double)(g->bytes_to - g->bytes_to_last), ds = g->send_s - g->send_s_last;
        double bps = ds > 0 ? db / ds : 0;
        printf("[ring %s]   link -> %s: %s, rtt %.2f ms, %.2f MB sent, %.2f MB/s while sending\n",
               r->o->self, g->name, g->live ? "live" : "out", g->rtt_ms, db / 1e6, bps / 1e6);
        ring_event(r, "link", ", \"to\": \"%s\", \"live\": %d, \"rtt_ms\": %.3f, \"bytes\": %.0f, "
                         "\"bytes_per_s\": %.0f",
              g->name, g->live, g->rtt_ms, db, bps);
        g->bytes_to_last = g->bytes_to;
        g->send_s_last = g->send_s;
    }
    ring_event(r, "progress", ", \"takes\": %" PRIu64 ", \"acks\": %" PRIu64 ", \"forwarded\": %" PRIu64
                         ", \"resends\": %" PRIu64 ", \"bytes_sent\": %" PRIu64
                         ", \"threshold\": %g",
          r->st.takes, r->st.acks, r->st.forwarded, r->st.resends, r->st.bytes_sent, r->threshold);
    ring_load_print(r);
    ring_timing_print(r);
    fflush(stdout);
}

int ring_run(const ringOpts *o) {
    static ring R;
    ring *r = &R;
    memset(r, 0, sizeof(*r));
    r->o = o;
    r->threshold = o->threshold;
    r->least = -1;
    r->fault = getenv("PS_RING_FAULT");
    r->start_ms = r->last_progress_ms = agent_mono_ms();
    agent_catch_signals();
    int rc = 2;
    if (o->log_json && !(r->log = fopen(o->log_json, "a"))) {
        ring_say(r, "--log-json %s: %s", o->log_json, strerror(errno));
        return 2;
    }
    if (ring_parse_groups(r) != 0) goto out;
    if (ring_ensure_conn(r, &r->g[r->self], agent_mono_ms()) != 0) {
        ring_say(r, "this group's server %s does not answer", r->g[r->self].addr);
        rc = 1;
        goto out;
    }
    if (ring_find_keys(r, r->g[r->self].c) != 0) goto out;
    if (ring_wave_init(r) != 0) {
        ring_say(r, "out of memory");
        rc = 1;
        goto out;
    }
    if ((rc = ring_setup(r)) != 0) goto out;
    for (int k = 0; k < r->nkeys; k++) r->keys[k].flushed_ms = agent_mono_ms();
    rc = 1;
    /* Every group is in the ring until it has not answered for --dead-after-ms:
     * origins wait for a group whose agent starts late. */
    for (int i = 0; i < r->ng; i++) {
        r->g[i].live = 1;
        r->g[i].last_ok_ms = agent_mono_ms();
    }
    ring_probe_all(r);
    char buf[1024];
    ring_order_str(r, buf, sizeof(buf));
    printf("[ring %s] %s %d keys, %s %s, threshold %g%s, every %ld ms, a group out after %ld ms, "
           "max lag %lld pushes%s%s\n",
           o->self, o->barrier ? "barrier over" : "exchanging", r->nkeys,
           o->mesh ? "mesh of" : "ring", buf, o->barrier ? 0.0 : r->threshold,
           o->adapt ? " (adapted)" : "", o->every_ms, o->dead_ms, o->maxlag,
           o->maxlag ? "" : " (no bound)", o->flush_ms ? ", every change taken at least every --flush-ms" : "");
    ring_event(r, "start", ", \"ring\": \"%s\", \"keys\": %d, \"threshold\": %g, \"barrier\": %d", buf,
          r->nkeys, r->threshold, o->barrier);
    fflush(stdout);
    long long barrier_end = agent_mono_ms() + o->barrier_timeout_ms;
    int quiet = 0;
    for (;;) {
        long long t0 = agent_mono_ms();
        double tr = ps_mono_s();
        r->round++;
        r->round_send_s = 0;
        double tp = ps_mono_s();
        ring_probe_all(r);
        double tl = ps_mono_s();
        r->tm.s[RING_PH_PROBE] += tl - tp;
        if (!o->barrier && !o->leave) ring_load_update(r);
        r->tm.s[RING_PH_LOAD] += ps_mono_s() - tl;
        if (o->leave) {
            /* Leaving: done once this group has nothing pending or
             * accumulated (every group has all of its change). What its
             * forward queue still holds is dropped with the tracking: those
             * deltas' origins still wait for the groups that lack them and
             * send them straight there once this group is out. */
            const ringGroup *me = &r->g[r->self];
            int empty = me->c != NULL;
            for (int k = 0; k < r->nkeys && empty; k++) {
                psKeyInfo ki;
                if (psInfo(me->c, r->keys[k].name, &ki) != PS_OK || ki.ring_pending_seq ||
                    ki.ring_accumulated)
                    empty = 0;
            }
            if (empty && ++quiet >= 2) break;
            if (!empty) quiet = 0;
        }
        if (o->barrier && ring_drained(r)) {
            /* Twice in a row: the first drained probe may predate a send of
             * this agent's own last round. */
            if (++quiet >= 2) break;
        } else if (o->barrier) {
            quiet = 0;
        }
        if ((o->barrier || o->leave) && t0 > barrier_end) {
            ring_say(r, "%s: not drained after %ld ms", o->barrier ? "--barrier" : "--leave",
                o->barrier_timeout_ms);
            goto out;
        }
        if (ring_noperm()) { rc = 2; goto out; } /* a role without what the agent needs */
        if (AgentStop && !o->barrier && !o->leave) break;
        int work = 0;
        r->awaiting = 0;
        for (int i = 0; i < r->ng; i++) {
            if (!r->g[i].live || (!o->barrier && i != r->self)) continue;
            work |= ring_act(r, i);
        }
        if (o->adapt && !o->barrier) ring_adapt_threshold(r);
        if (o->reorder && ring_reorder_due(r)) {
            ring_publish_rtts(r);
            ring_reorder(r);
        }
        long long now = agent_mono_ms();
        if (o->progress_ms > 0 && now - r->last_progress_ms >= o->progress_ms) {
            ring_progress(r, "");
            r->last_progress_ms = now;
        }
        if (AgentStop && (o->barrier || o->leave)) {
            ring_say(r, "%s interrupted", o->barrier ? "--barrier" : "--leave");
            goto out;
        }
        /* A round that acknowledged or forwarded something is followed at
         * once (a tenth of the period): its workers may be waiting on the lag
         * bound, and the next hop on this forward queue. One that left a take
         * out waiting for its acks looks again after a quarter of it (the
         * groups' marks are read only then: 1.2 KB per key and group). */
        long long period = work ? o->every_ms / 10 : r->awaiting ? o->every_ms / 4 : o->every_ms;
        long long left = period - (agent_mono_ms() - t0);
        double ts = ps_mono_s();
        if (left > 0 && !((o->barrier || o->leave) && quiet)) agent_sleep_ms(left);
        r->tm.sleep_s += ps_mono_s() - ts;
        r->tm.round_s += ps_mono_s() - tr;
        r->tm.rounds++;
    }
    ring_progress(r, o->barrier ? "drained after " : "stopped after ");
    if (o->leave) {
        for (int k = 0; k < r->nkeys; k++)
            if (psRingUntrack(r->g[r->self].c, r->keys[k].name) == PS_ERR) {
                ring_say(r, "PS.RING %s UNTRACK: %s", r->keys[k].name, r->g[r->self].c->errstr);
                goto out;
            }
        printf("[ring %s] left the ring: every change of this group delivered, tracking "
               "dropped\n", o->self);
        ring_event(r, "left", "");
    }
    if (o->barrier) {
        int differ = ring_compare_groups(r);
        printf("[ring %s] barrier done: every live group drained, %s\n", o->self,
               differ == 2   ? "VALUES DIFFER beyond the float bound"
               : differ == 1 ? "values equal within the float bound"
                             : "values bit-identical");
        ring_event(r, "barrier_done", ", \"bit_identical\": %d, \"within_bound\": %d", !differ,
              differ < 2);
        if (differ == 2) {
            rc = 1;
            goto out;
        }
    }
    fflush(stdout);
    rc = 0;
out:
    for (int i = 0; i < r->ng; i++) {
        psClientFree(r->g[i].c);
        free(r->g[i].info);
    }
    for (int k = 0; k < r->nkeys; k++) free(r->keys[k].name);
    free(r->keys);
    ring_wave_free(r);
    if (r->log) fclose(r->log);
    return rc;
}
