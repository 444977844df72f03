/* ring_barrier.c -- ps-relay --ring --barrier (ring.h): is every live group
 * drained, and do the groups then hold the same values (bit-identical, or
 * within the float bound of docs/design.md "Ring state")? */

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <redis-ps/ps.h>

#include "agent.h"
#include "ring_int.h"

/* Barrier: every live group drained (nothing pending, accumulated or
 * queued), per the probe at the start of this round. */
int ring_drained(const ring *r) {
    for (int i = 0; i < r->ng; i++) {
        if (!r->g[i].live) continue;
        for (int k = 0; k < r->nkeys; k++) {
            const psKeyInfo *x = &r->g[i].info[k];
            if (x->ring_pending_seq || x->ring_accumulated || x->ring_fwd_entries) return 0;
        }
    }
    return 1;
}

/* After a barrier: do the live groups hold the same values? Prints the
 * largest difference. 0 when bit-identical. */
int ring_compare_groups(ring *r) {
    int differ = 0;
    for (int k = 0; k < r->nkeys; k++) {
        if (r->keys[k].dim) { /* a table: its rows (ring_table.c) */
            int t = ring_table_compare(r, k);
            if (t > differ) differ = t;
            continue;
        }
        psRingSnapshot ref;
        int have = 0;
        double maxd = 0, maxabs = 0;
        uint64_t applied = 0;
        for (int i = 0; i < r->ng; i++)
            if (r->g[i].live) applied += r->g[i].info[k].ring_applied;
        memset(&ref, 0, sizeof(ref));
        for (int i = 0; i < r->ng; i++) {
            if (!r->g[i].live || !r->g[i].c) continue;
            psRingSnapshot s;
            if (psRingState(r->g[i].c, r->keys[k].name, r->keys[k].n, &s) != PS_OK) continue;
            for (size_t j = 0; j < s.n; j++) maxabs = fmax(maxabs, fabs((double)s.values[j]));
            if (!have) {
                ref = s;
                have = 1;
                continue;
            }
            for (size_t j = 0; j < s.n; j++) {
                double dd = fabs((double)s.values[j] - (double)ref.values[j]);
                if (dd > maxd || (s.values[j] != ref.values[j] && dd == 0)) maxd = dd;
                if (memcmp(&s.values[j], &ref.values[j], sizeof(float)) && !differ) differ = 1;
            }
            psRingStateFree(&s);
        }
        /* docs/design.md "Ring topology": each applied delta rounds values and
         * base by at most half an ulp each, each take's difference by half an
         * ulp: two groups differ by at most (deltas applied in all + takes) ulps
         * of the largest value. */
        double ulp = maxabs > 0 ? ldexp(1.0, ilogb(maxabs) - 23) : 0;
        double bound = (double)(applied + 2) * 2 * ulp;
        printf("[ring %s] barrier: %s: largest difference between groups %g (bound %g)\n",
               r->o->self, r->keys[k].name, maxd, bound);
        if (maxd > bound) differ = 2;
        psRingStateFree(&ref);
    }
    return differ;
}
