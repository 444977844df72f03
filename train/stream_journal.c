/* stream_journal.c -- `ps-train stream` (stream.c): the journal step of a
 * batch, pipelined to the stream's node: the XACK of the batch journaled
 * before, the fence-and-journal script, the read of the next batch and,
 * with --wait N, "WAIT N" before the batch is pushed. */

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cmds.h"
#include "conn.h"
#include "metrics.h"
#include "stream_work.h"
#include "tasks.h"
#include "util.h"
#include "wirefmt.h"

/* The journal: check that the consumer still owns every entry of the new
 * batch (a claim may have taken some: then the batch is "fenced") and
 * journal it. KEYS: stream, journal. ARGV: group, consumer, cid, seq, own,
 * exact, the entry ids joined by spaces, their count (0: the journal is
 * emptied). Returns 1 or -1 (fenced). With exact 0 the caller
 * knows its pending list holds nothing but this batch (see journal_send), so
 * an unchanged count of its pending entries (XPENDING summary) proves that
 * nothing was taken; otherwise, or when the count differs, every id is
 * looked up. The XACK of the batch journaled before and the XREADGROUP of
 * the next batch go in the same pipeline (journal_send). */
static const char JournalLua[] =
    "local S, J, G, me = KEYS[1], KEYS[2], ARGV[1], ARGV[2]\n"
    "local n = tonumber(ARGV[8])\n"
    "if n > 0 then\n"
    "  local ok = false\n"
    "  if ARGV[6] == '0' then\n"
    "    local s = redis.call('XPENDING', S, G)\n"
    "    for _, c in ipairs(s[4] or {}) do if c[1] == me then ok = tonumber(c[2]) == n end end\n"
    "  end\n"
    "  if not ok then\n"
    "    local ids = {} for w in string.gmatch(ARGV[7], '%S+') do ids[#ids+1] = w end\n"
    "    local p = redis.call('XPENDING', S, G, ids[1], ids[#ids], n + 256, me)\n"
    "    local mine = {} for _, e in ipairs(p) do mine[e[1]] = true end\n"
    "    ok = true\n"
    "    for _, id in ipairs(ids) do if not mine[id] then ok = false break end end\n"
    "    if not ok and #p >= n + 256 then\n"
    "      ok = true\n"
    "      for _, id in ipairs(ids) do\n"
    "        if #redis.call('XPENDING', S, G, id, id, 1, me) == 0 then ok = false break end\n"
    "      end\n"
    "    end\n"
    "  end\n"
    "  if not ok then redis.call('HSET', J, 'ids', '', 'own', ARGV[5]) return -1 end\n"
    "end\n"
    "redis.call('HSET', J, 'cid', ARGV[3], 'seq', ARGV[4], 'own', ARGV[5], 'ids', ARGV[7])\n"
    "return 1\n";

/* Remembers 'ids' (len bytes) as the batch journaled last. 0 or -1. */
int sw_set_old(struct streamWork *w, const char *ids, size_t len) {
    if (len + 1 > w->oldcap) {
        char *n = realloc(w->old, len + 1);
        if (n == NULL) return -1;
        w->old = n;
        w->oldcap = len + 1;
    }
    if (len) memcpy(w->old, ids, len);
    w->oldlen = len;
    w->old[len] = '\0';
    return 0;
}

/* Appends the space-separated ids of s[0..len) to argv/argl from *argc on. */
static void split_ids(const char *s, size_t len, const char **argv, size_t *argl, int *argc) {
    size_t i = 0;
    while (i < len) {
        while (i < len && s[i] == ' ') i++;
        size_t j = i;
        while (j < len && s[j] != ' ') j++;
        if (j > i) {
            argv[*argc] = s + i;
            argl[(*argc)++] = j - i;
        }
        i = j;
    }
}

/* ---------------------------------------------------------------------- */

/* With --wait N: "WAIT N" on the stream's node, after the journal step. A
 * batch is pushed only once its journal (and the XREADGROUP that made its
 * entries pending) reached N replicas: otherwise a master killed before
 * replicating them leaves a promoted replica that delivers the entries again
 * as new, while the push that trained them (on another master, or WAITed
 * there) stands: trained twice. NULL on error (errstr set). */
static psAsync *journal_wait_send(struct streamWork *w) {
    char n[24], ms[24];
    snprintf(n, sizeof(n), "%d", w->o->wait);
    snprintf(ms, sizeof(ms), "%d", PS_DEFAULT_WAIT_TIMEOUT_MS);
    const char *x[] = {"WAIT", n, ms};
    return psCommandArgvAsync(w->own.c, w->skey, 3, x, NULL);
}

/* The WAIT of a journal step answered 'r': 0 replicated (or short under
 * --on-degraded degrade: counted, announced once per outage, and the next
 * WAIT sent a probe interval later), -1 short under fail (printed). Under block the WAIT is repeated here until it is
 * answered in full (or the worker is told to stop). */
static int journal_waited(struct streamWork *w, redisReply *r) {
    int pol = PS_DURABILITY_DEGRADE, lost;
    tr_parse_policies(w->o, &pol, &lost);
    for (;;) {
        long long got = r && r->type == REDIS_REPLY_INTEGER ? r->integer : -1;
        if (r && r->type == REDIS_REPLY_ERROR) {
            tr_err(w->o, "[%s] WAIT %d on the stream's node: %s", w->me, w->o->wait, r->str);
            freeReplyObject(r);
            return -1;
        }
        if (r) freeReplyObject(r);
        if (got >= w->o->wait) {
            if (w->jshort) fprintf(stderr, "[%s] journal: WAIT %d answered in full again\n", w->me,
                                   w->o->wait);
            w->jshort = 0;
            return 0;
        }
        w->jshort_total++;
        if (!w->jshort)
            fprintf(stderr, "[%s] journal: WAIT %d on the stream's node answered %lld (policy %s)\n",
                    w->me, w->o->wait, got, w->o->on_degraded ? w->o->on_degraded : "degrade");
        w->jshort = 1;
        w->jprobe = tr_now() + PS_DEFAULT_PROBE_MS / 1000.0;
        if (pol == PS_DURABILITY_FAIL) {
            tr_err(w->o, "[%s] journal not replicated to %d replicas (--on-degraded fail)", w->me,
                   w->o->wait);
            return -1;
        }
        if (pol != PS_DURABILITY_BLOCK || tw_stop) return 0;
        psAsync *a = journal_wait_send(w);
        r = a ? psCommandWait(w->own.c, a) : NULL;
        if (r == NULL) {
            tr_err(w->o, "[%s] WAIT: %s", w->me, w->own.c->errstr);
            return -1;
        }
    }
}

/* Sends, pipelined to the stream's node: the XACK of the batch journaled
 * before (its pushes were acknowledged), the fence-and-journal script of
 * the batch built, and (w->want > 0) a non-blocking XREADGROUP of the next
 * batch's entries. 0, or -1 (printed; what was sent is waited for). */
int sw_journal_send(struct streamWork *w, const char *cid, uint64_t seq, journalStep *js) {
    const trainOpts *o = w->o;
    char s_seq[24], s_own[24], s_want[24];
    int nold = 4, nnew = 14, k = 0, rc = -1;
    memset(js, 0, sizeof(*js));
    snprintf(s_seq, sizeof(s_seq), "%llu", (unsigned long long)seq);
    snprintf(s_own, sizeof(s_own), "%llu", (unsigned long long)w->own_seq);
    snprintf(s_want, sizeof(s_want), "%d", w->want);
    for (size_t i = 0; i < w->oldlen; i++) nold += w->old[i] == ' ';
    for (size_t i = 0; i < w->idlen; i++) nnew += w->ids[i] == ' ';
    int cap = nold > nnew ? nold : nnew;
    const char **av = malloc((size_t)cap * sizeof(char *));
    size_t *al = malloc((size_t)cap * sizeof(size_t));
    if (av == NULL || al == NULL) {
        tr_err(o, "out of memory");
        goto out;
    }
    if (w->oldlen) {
        const char *x[] = {"XACK", w->skey, o->group};
        for (k = 0; k < 3; k++) {
            av[k] = x[k];
            al[k] = strlen(x[k]);
        }
        split_ids(w->old, w->oldlen, av, al, &k);
        if ((js->ack = psCommandArgvAsync(w->own.c, w->skey, k, av, al)) == NULL) goto fail;
    }
    {
        /* Exact unless this consumer's pending list is known to hold only this
         * batch: after a fence (its rest stays pending here), a resent command (a
         * lost XREADGROUP reply delivers entries this process never saw) or
         * before the restart's own pending entries were all taken back. */
        uint64_t resent = w->own.c->stats.retries + w->own.c->stats.reconnects;
        int exact = w->exact || resent != w->resent;
        char s_n[24];
        snprintf(s_n, sizeof(s_n), "%d", w->idlen ? nnew - 13 : 0);
        const char *x[] = {"EVAL", JournalLua, "2", w->skey, w->jkey, o->group, w->me, cid,
                           s_seq, s_own, exact ? "1" : "0", w->ids ? w->ids : "", s_n};
        for (k = 0; k < 13; k++) {
            av[k] = x[k];
            al[k] = k == 11 ? w->idlen : strlen(x[k]);
        }
        if ((js->eval = psCommandArgvAsync(w->own.c, w->skey, k, av, al)) == NULL) goto fail;
    }
    if (w->want > 0 && w->idlen && !w->pre) {
        const char *x[] = {"XREADGROUP", "GROUP", o->group, w->me, "COUNT", s_want, "STREAMS",
                           w->skey, ">"};
        if ((js->read = psCommandArgvAsync(w->own.c, w->skey, 9, x, NULL)) == NULL) goto fail;
    }
    /* Degraded (a WAIT came back short; policy degrade): no WAIT until the
     * next probe, as libps does for pushes, or every batch would pay its
     * timeout. */
    if (o->wait > 0 && (!w->jshort || tr_now() >= w->jprobe) &&
        (js->wait = journal_wait_send(w)) == NULL)
        goto fail;
    rc = 0;
    goto out;
fail:
    tr_err(o, "[%s] journal %s: %s", w->me, w->jkey, w->own.c->errstr);
out:
    free(av);
    free(al);
    return rc;
}

/* Waits for the commands of journal_send. Returns 1 journaled, 0 fenced,
 * -1 error (printed). The entries read go to w->pre (the next batch). */
int sw_journal_wait(struct streamWork *w, journalStep *js) {
    psAsync *as[4] = {js->ack, js->eval, js->read, js->wait};
    redisReply *rs[4] = {NULL, NULL, NULL, NULL};
    int rc = 1;
    for (int i = 0; i < 4; i++) {
        if (as[i] == NULL) continue;
        rs[i] = psCommandWait(w->own.c, as[i]);
        if ((rs[i] == NULL || rs[i]->type == REDIS_REPLY_ERROR) && rc == 1) {
            tr_err(w->o, "[%s] journal %s: %s", w->me, w->jkey,
                   rs[i] ? rs[i]->str : w->own.c->errstr);
            rc = -1;
        }
    }
    memset(js, 0, sizeof(*js));
    if (as[3] && rc == 1) {
        if (journal_waited(w, rs[3]) != 0) rc = -1;
        rs[3] = NULL;               /* freed by journal_waited */
    }
    if (rc == 1 && (rs[1] == NULL || rs[1]->type != REDIS_REPLY_INTEGER)) {
        tr_err(w->o, "[%s] journal %s: bad reply", w->me, w->jkey);
        rc = -1;
    }
    if (rc == 1) {
        rc = rs[1]->integer == 1;
        if (sw_set_old(w, rc ? w->ids : "", rc ? w->idlen : 0) != 0) {
            tr_err(w->o, "out of memory");
            rc = -1;
        }
    }
    if (rs[2] && rs[2]->type == REDIS_REPLY_ARRAY && !w->pre) {
        w->pre = rs[2];             /* kept for the next batch */
        rs[2] = NULL;
    }
    for (int i = 0; i < 4; i++)
        if (rs[i]) freeReplyObject(rs[i]);
    return rc;
}

/* One journal step for the batch built (none: just the XACK of the one
 * before), waited for. Returns 1 journaled, 0 fenced, -1 error (printed). */
int sw_journal(struct streamWork *w, const char *cid, uint64_t seq) {
    journalStep js;
    if (sw_journal_send(w, cid, seq, &js) != 0) {
        sw_journal_wait(w, &js);
        return -1;
    }
    return sw_journal_wait(w, &js);
}
