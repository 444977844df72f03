/* stream_journal.c -- `ps-train stream` (stream.c): the lease step. A
 * consumer reads entries only inside one transaction (libps
 * psTransactionAsync: MULTI ... EXEC, resent whole or not at all) with the
 * journal records that say what it holds:
 *   LeasePreLua   drops the batches whose pushes were acknowledged, picks
 *                 (or starts) the batch the read goes to, notes the group's
 *                 last-delivered-id L;
 *   XREADGROUP GROUP g C COUNT n NOACK STREAMS s >   (no pending list);
 *   LeasePostLua  notes the last-delivered-id E after the read: the range
 *                 (L, E] joins the batch.
 * With --wait N, "WAIT N" follows EXEC in the same request (it goes where
 * the transaction goes; the batch is pushed only after it answered).
 * Design: docs/design.md "Stream consumption". */

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cmds.h"
#include "conn.h"
#include "metrics.h"
#include "protocol.h"
#include "stream_work.h"
#include "tasks.h"
#include "util.h"
#include "wirefmt.h"

/* The journal of consumer C is a hash in the stream's slot:
 *   b    its held batches, one line each: "cid seq L1 E1 L2 E2 ...", the
 *        push identity and the id ranges (Li, Ei] the batch leased;
 *   t    server ms of its last lease step (claims take a record whose t is
 *        older than --claim-idle-ms: stream.c ClaimLua);
 *   ep   its epoch: bumped by every claim of the record; new batches
 *        push under "<base cid>" (epoch 0) or "<base cid>~<ep>";
 *   own  the last seq it gave a batch (seqs only grow, across restarts);
 *   L, tg  scratch of one lease step (the pre-read id, the target batch).
 * KEYS: stream, journal. ARGV: group, the batches to drop ("cid seq"
 * lines), mode ("new", "cont" or "drop"), base cid, the batch to continue
 * (cid, seq), a fresh seq. Returns {status (1, or 0: the batch to continue is
 * gone: claimed; a new one was started), the held batches' "cid seq"
 * joined by newlines, the target's cid, the target's seq, the epoch}. */
#define SW_LUA_LASTID                                                                     \
    "local function lastid(S, G)\n"                                                       \
    "  for _, g in ipairs(redis.call('XINFO', 'GROUPS', S)) do\n"                         \
    "    local t = {} for i = 1, #g, 2 do t[g[i]] = g[i + 1] end\n"                        \
    "    if t['name'] == G then return t['last-delivered-id'] end\n"                      \
    "  end\n"                                                                              \
    "  return redis.error_reply('ERR no consumer group ' .. G)\n"                          \
    "end\n"

const char SwLeasePreLua[] =
    SW_LUA_LASTID
    "local S, J, G, mode = KEYS[1], KEYS[2], ARGV[1], ARGV[3]\n"
    "local L = lastid(S, G)\n"
    "if type(L) == 'table' then return L end\n"
    "local drop = {} for l in string.gmatch(ARGV[2], '[^\\n]+') do drop[l] = true end\n"
    "local h = redis.call('HMGET', J, 'b', 'ep', 'own')\n"
    "local ep = tonumber(h[2] or '0') or 0\n"
    "local cid = ARGV[4] if ep > 0 then cid = cid .. '~' .. ep end\n"
    "local out, keys, has = {}, {}, {}\n"
    "for l in string.gmatch(h[1] or '', '[^\\n]+') do\n"
    "  local k = string.match(l, '^(%S+ %S+)')\n"
    "  if not drop[k] then out[#out+1] = l keys[#keys+1] = k has[k] = true end\n"
    "end\n"
    "local st, tg = 1, ''\n"
    "if mode ~= 'drop' then\n"
    "  tg = ARGV[5] .. ' ' .. ARGV[6]\n"
    "  if mode == 'cont' and not has[tg] then st = 0 end\n"
    "  if mode == 'new' or st == 0 then\n"
    "    tg = cid .. ' ' .. ARGV[7]\n"
    "    if not has[tg] then out[#out+1] = tg keys[#keys+1] = tg end\n"
    "    if tonumber(ARGV[7]) > (tonumber(h[3] or '0') or 0) then redis.call('HSET', J, 'own', "
    "ARGV[7]) end\n"
    "  end\n"
    "end\n"
    "local t = redis.call('TIME')\n"
    "redis.call('HSET', J, 'b', table.concat(out, '\\n'), 't', t[1] * 1000 + math.floor(t[2] / "
    "1000), 'L', mode == 'drop' and '' or L, 'tg', tg)\n"
    "local tc, ts = string.match(tg, '^(%S+) (%S+)$')\n"
    "return {st, table.concat(keys, '\\n'), tc or '', ts or '', tostring(ep)}\n";

/* KEYS: stream, journal. ARGV: group. Appends (L, E] to the target batch
 * when the read took entries; a batch that leased nothing is removed. The
 * scratch fields are cleared, so a step whose first script failed cannot
 * record a range from an older step's L (it answers an error instead).
 * Returns {the target's line ('' when removed), E}. */
const char SwLeasePostLua[] =
    SW_LUA_LASTID
    "local S, J, G = KEYS[1], KEYS[2], ARGV[1]\n"
    "local E = lastid(S, G)\n"
    "if type(E) == 'table' then return E end\n"
    "local h = redis.call('HMGET', J, 'b', 'L', 'tg')\n"
    "if not h[2] or h[2] == '' then return redis.error_reply('ERR lease: the step before the "
    "read did not run (entries read after ' .. E .. ' are not journaled)') end\n"
    "local out, line = {}, ''\n"
    "for l in string.gmatch(h[1] or '', '[^\\n]+') do\n"
    "  if string.match(l, '^(%S+ %S+)') == h[3] then\n"
    "    if E ~= h[2] then l = l .. ' ' .. h[2] .. ' ' .. E end\n"
    "    if string.match(l, '^%S+ %S+ ') then out[#out+1] = l line = l end\n"
    "  else out[#out+1] = l end\n"
    "end\n"
    "redis.call('HSET', J, 'b', table.concat(out, '\\n'), 'L', '', 'tg', '')\n"
    "return {line, E}\n";

const char *sw_refused(const char *script, const char *err, char *out, size_t len) {
    static const char Role[] = "the role: docs/operations.md section 4, \"worker, stream\"";
    out[0] = '\0';
    if (err == NULL) return out;
    int inscript = strstr(err, "executing the script can't") != NULL;
    if (!inscript && ps_proto_error_class(err, strlen(err)) != PS_PROTO_ERR_NOPERM) return out;
    const char *at = inscript ? strstr(err, "@user_script:") : NULL;
    int line = at ? atoi(at + 13) : 0;
    const char *p = script;
    for (int i = 1; p && i < line; i++) {
        p = strchr(p, '\n');
        if (p) p++;
    }
    if (!inscript || p == NULL || line < 1) {
        snprintf(out, len, " (%s)", Role);
        return out;
    }
    /* The commands the refused line calls: redis.call('A'[, 'B' in capitals]). */
    char what[160] = "";
    size_t n = 0;
    const char *e = strchr(p, '\n');
    for (const char *q = p; (q = strstr(q, "redis.call('")) != NULL && (!e || q < e);) {
        q += 12;
        size_t k = strcspn(q, "'");
        const char *sub = q + k + 1;
        size_t sk = 0;
        if (!strncmp(sub, ", '", 3) && sub[3] >= 'A' && sub[3] <= 'Z') sk = strcspn(sub + 3, "'");
        n += (size_t)snprintf(what + n, n < sizeof(what) ? sizeof(what) - n : 0, "%s%.*s%s%.*s",
                              n ? " or " : "", (int)k, q, sk ? " " : "", (int)sk, sub + 3);
        if (n >= sizeof(what)) break;
    }
    snprintf(out, len, " (refused: the script's %s, line %d; %s)", what[0] ? what : "command", line,
             Role);
    return out;
}

/* Appends the line "cid seq" to the batches to drop. 0 or -1. */
int sw_drop_add(struct streamWork *w, const char *cid, uint64_t seq) {
    char k[400];
    int n = snprintf(k, sizeof(k), "%s%s %llu", w->droplen ? "\n" : "", cid,
                     (unsigned long long)seq);
    if (n < 0 || (size_t)n >= sizeof(k)) return -1;
    if (w->droplen + (size_t)n + 1 > w->dropcap) {
        size_t cap = (w->dropcap ? w->dropcap * 2 : 1024) + (size_t)n;
        char *d = realloc(w->drop, cap);
        if (d == NULL) return -1;
        w->drop = d;
        w->dropcap = cap;
    }
    memcpy(w->drop + w->droplen, k, (size_t)n + 1);
    w->droplen += (size_t)n;
    return 0;
}

/* ---------------------------------------------------------------------- */

/* With --wait N: "WAIT N" on the stream's node, after the lease step (in
 * its request: sw_lease_send). A batch is pushed only once its lease (the
 * journal record and the group's last-delivered-id) reached N replicas:
 * otherwise a master killed before replicating them leaves a promoted
 * replica that delivers the entries again as new, while the push that
 * trained them stands: trained twice. This one repeats it (policy block):
 * behind a read of the journal in a transaction, so that it follows the
 * slot as the lease steps do (an ASK while the slot migrates). The reply
 * of the WAIT, NULL on error (errstr set). */
static redisReply *journal_wait_again(struct streamWork *w) {
    const char *get[] = {"HGET", w->jkey, "t"};
    const char *const *argv[] = {get};
    int argc[] = {3};
    redisReply *wr = NULL;
    psAsync *a = psTransactionWaitAsync(w->own.c, w->skey, 1, argc, argv, NULL, w->o->wait,
                                        PS_DEFAULT_WAIT_TIMEOUT_MS);
    redisReply *r = a ? psTransactionWait(w->own.c, a, &wr) : NULL;
    if (r && wr == NULL)
        snprintf(w->own.c->errstr, sizeof(w->own.c->errstr), "%.200s",
                 r->type == REDIS_REPLY_ERROR ? r->str : "no reply to WAIT");
    if (r) freeReplyObject(r);
    return wr;
}

/* The WAIT of a lease step answered 'r': 0 replicated (or short under
 * --on-degraded degrade: counted, announced once per outage, and the next
 * WAIT sent a probe interval later), -1 short under fail (printed). Under
 * block the WAIT is repeated here until it is answered in full (or the
 * worker is told to stop). */
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
        r = journal_wait_again(w);
        if (r == NULL) {
            tr_err(w->o, "[%s] WAIT: %s", w->me, w->own.c->errstr);
            return -1;
        }
    }
}

/* Sends a lease step of up to 'count' entries (0: only drop the
 * acknowledged batches) into the batch being leased (w->nseq, or a new one)
 * and, with --wait N, its WAIT. 0, or -1 (printed). */
int sw_lease_send(struct streamWork *w, int count, leaseStep *ls) {
    const trainOpts *o = w->o;
    char s_count[24], s_cont[24], s_new[24];
    memset(ls, 0, sizeof(*ls));
    uint64_t now = (uint64_t)(tr_wall() * 1e6);
    ls->fresh = now > w->own_seq ? now : w->own_seq + 1;
    snprintf(s_count, sizeof(s_count), "%d", count);
    snprintf(s_cont, sizeof(s_cont), "%llu", (unsigned long long)w->nseq);
    snprintf(s_new, sizeof(s_new), "%llu", (unsigned long long)ls->fresh);
    const char *mode = count <= 0 ? "drop" : w->nseq ? "cont" : "new";
    const char *pre[] = {"EVAL", SwLeasePreLua, "2", w->skey, w->jkey, o->group,
                         w->drop ? w->drop : "", mode, w->base, w->ncid, s_cont, s_new};
    size_t prel[12];
    for (int i = 0; i < 12; i++) prel[i] = strlen(pre[i]);
    prel[6] = w->droplen;
    ls->ndrop = w->droplen;
    if (count <= 0) {
        ls->tx = psCommandArgvAsync(w->own.c, w->skey, 12, pre, prel);
    } else {
        const char *rd[] = {"XREADGROUP", "GROUP", o->group, w->me, "COUNT", s_count,
                            "NOACK", "STREAMS", w->skey, ">"};
        const char *post[] = {"EVAL", SwLeasePostLua, "2", w->skey, w->jkey, o->group};
        const char *const *argv[] = {pre, rd, post};
        const size_t *argvlen[] = {prel, NULL, NULL};
        int argc[] = {12, 10, 6};
        /* The WAIT rides in the transaction's request, right after EXEC: it
         * goes where the transaction goes, to the node an ASK sent it to
         * while the slot migrates too. Degraded (a WAIT came back short;
         * policy degrade): no WAIT until the next probe, as libps does for
         * pushes, or every batch would pay its timeout. */
        ls->wait = o->wait > 0 && (!w->jshort || tr_now() >= w->jprobe);
        ls->tx = ls->wait ? psTransactionWaitAsync(w->own.c, w->skey, 3, argc, argv, argvlen,
                                                   o->wait, PS_DEFAULT_WAIT_TIMEOUT_MS)
                          : psTransactionAsync(w->own.c, w->skey, 3, argc, argv, argvlen);
        ls->read = 1;
    }
    if (ls->tx == NULL) goto fail;
    return 0;
fail:
    tr_err(o, "[%s] lease %s: %s", w->me, w->jkey, w->own.c->errstr);
    return -1;
}

/* Counts the ranges of a journal line "cid seq L1 E1 ...". */
static int line_ranges(const char *s, size_t len) {
    int words = 0;
    for (size_t i = 0; i < len;) {
        while (i < len && s[i] == ' ') i++;
        if (i < len) words++;
        while (i < len && s[i] != ' ') i++;
    }
    return words > 2 ? (words - 2) / 2 : 0;
}

static int str_is(const redisReply *r) { return r && r->type == REDIS_REPLY_STRING; }

/* Waits for a lease step. Returns 1 done, -1 error (printed). On 1: the
 * entries read are in *entries (the step's reply, to free; sw_lease_entries
 * gives its XREADGROUP reply; NULL when none were read), the held
 * batches' "cid seq" lines in w->held, the batch being leased in
 * w->ncid/w->nseq/w->nranges; ls->fenced: the batch continued was claimed
 * (a new one started); ls->rebuild: the journal's line of the batch differs
 * from what this process read (a lost reply ran a lease twice, or a failover
 * lost one): the batch is to be read again from the journal's ranges
 * (w->rebuild holds the line). */
int sw_lease_wait(struct streamWork *w, leaseStep *ls, redisReply **entries) {
    redisReply *wr = NULL;
    redisReply *r = ls->tx ? psTransactionWait(w->own.c, ls->tx, &wr) : NULL;
    int rc = -1;
    ls->tx = NULL;
    if (entries) *entries = NULL;
    const redisReply *pre = NULL, *rd = NULL, *post = NULL;
    if (r && ls->read && r->type == REDIS_REPLY_ARRAY && r->elements == 3) {
        pre = r->element[0];
        rd = r->element[1];
        post = r->element[2];
    } else if (r && !ls->read) {
        pre = r;
    }
    if (r == NULL || pre == NULL || pre->type != REDIS_REPLY_ARRAY || pre->elements != 5 ||
        (post && (post->type != REDIS_REPLY_ARRAY || post->elements != 2))) {
        const redisReply *e = r == NULL ? NULL : r->type == REDIS_REPLY_ERROR ? r
                              : pre && pre->type == REDIS_REPLY_ERROR ? pre
                              : post && post->type == REDIS_REPLY_ERROR ? post : NULL;
        char why[300];
        tr_err(w->o, "[%s] lease %s: %s%s", w->me, w->jkey,
               r == NULL ? w->own.c->errstr : e ? e->str : "bad reply",
               sw_refused(e == post ? SwLeasePostLua : SwLeasePreLua, e ? e->str : NULL, why,
                          sizeof(why)));
        if (wr) freeReplyObject(wr);
        goto out;
    }
    if (ls->wait && wr == NULL) {
        tr_err(w->o, "[%s] lease %s: no reply to its WAIT", w->me, w->jkey);
        goto out;
    }
    if (wr && journal_waited(w, wr) != 0) goto out;
    /* The drops sent were applied: forget them (later ones stay queued). */
    if (ls->ndrop) {
        size_t n = ls->ndrop < w->droplen && w->drop[ls->ndrop] == '\n' ? ls->ndrop + 1 : ls->ndrop;
        memmove(w->drop, w->drop + n, w->droplen - n + 1);
        w->droplen -= n;
    }
    const redisReply *keys = pre->element[1];
    free(w->held);
    w->held = strdup(str_is(keys) ? keys->str : "");
    if (w->held == NULL) goto oom;
    ls->fenced = 0;
    if (!ls->read) {
        rc = 1;
        goto out;
    }
    ls->fenced = pre->element[0]->type == REDIS_REPLY_INTEGER && pre->element[0]->integer == 0;
    if (ls->fenced || w->nseq == 0) w->nranges = 0;
    if (str_is(pre->element[2]) && str_is(pre->element[3])) {
        snprintf(w->ncid, sizeof(w->ncid), "%s", pre->element[2]->str);
        w->nseq = strtoull(pre->element[3]->str, NULL, 10);
        if (w->nseq > w->own_seq) w->own_seq = w->nseq;
    }
    int got = rd && rd->type == REDIS_REPLY_ARRAY && rd->elements == 1 &&
              rd->element[0]->type == REDIS_REPLY_ARRAY && rd->element[0]->elements == 2 &&
              rd->element[0]->element[1]->type == REDIS_REPLY_ARRAY &&
              rd->element[0]->element[1]->elements > 0;
    if (str_is(post->element[1])) snprintf(w->lastE, sizeof(w->lastE), "%s", post->element[1]->str);
    const redisReply *line = post->element[0];
    int have = str_is(line) ? line_ranges(line->str, line->len) : 0;
    ls->rebuild = have != w->nranges + got;
    w->nranges = have;
    if (have == 0) w->nseq = 0;
    if (ls->rebuild) {
        free(w->rebuild);
        w->rebuild = strdup(str_is(line) ? line->str : "");
        if (w->rebuild == NULL) goto oom;
    } else if (got && entries) {
        *entries = r;           /* the caller's: sw_lease_entries */
        r = NULL;
    }
    rc = 1;
    goto out;
oom:
    tr_err(w->o, "out of memory");
out:
    if (r) freeReplyObject(r);
    return rc;
}

/* The XREADGROUP reply inside a lease step's reply kept by sw_lease_wait. */
const redisReply *sw_lease_entries(const redisReply *r) { return r->element[1]; }

/* Whether "cid seq" is among the held batches of the last lease step. */
int sw_holds(const struct streamWork *w, const char *cid, uint64_t seq) {
    char k[400];
    snprintf(k, sizeof(k), "%s %llu", cid, (unsigned long long)seq);
    size_t n = strlen(k);
    for (const char *p = w->held; p && *p;) {
        const char *e = strchr(p, '\n');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == n && !memcmp(p, k, n)) return 1;
        p = e ? e + 1 : p + len;
    }
    return 0;
}

/* One lease step waited for (count 0: drops only). 1 or -1. */
int sw_lease(struct streamWork *w, int count, leaseStep *ls, redisReply **entries) {
    if (sw_lease_send(w, count, ls) != 0) {
        if (ls->tx) freeReplyObject(psCommandWait(w->own.c, ls->tx));
        return -1;
    }
    return sw_lease_wait(w, ls, entries);
}
