/* status.c -- ps-train status (the job's config, progress, workers
 * and where its partitions live) and ps-train snapshot (PS.SNAPSHOT of
 * every partition of the job's model under one name). */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cmds.h"
#include "conn.h"
#include "dense.h"
#include "kind.h"
#include "tasks.h"
#include "util.h"

/* ========================================================================
 * status
 * ====================================================================== */

/* "host:port" of the master serving 'slot' according to CLUSTER SLOTS
 * reply 'slots', or "?". */
static const char *slot_owner(const redisReply *slots, long long slot, char *buf, size_t len) {
    snprintf(buf, len, "?");
    if (slots == NULL || slots->type != REDIS_REPLY_ARRAY) return buf;
    for (size_t i = 0; i < slots->elements; i++) {
        const redisReply *e = slots->element[i];
        if (e->type != REDIS_REPLY_ARRAY || e->elements < 3) continue;
        if (slot >= e->element[0]->integer && slot <= e->element[1]->integer) {
            const redisReply *n = e->element[2];
            if (n->type == REDIS_REPLY_ARRAY && n->elements >= 2)
                snprintf(buf, len, "%s:%lld", n->element[0]->str, n->element[1]->integer);
            return buf;
        }
    }
    return buf;
}

/* Prints every partition: key, rows, version, pushes and (cluster) node.
 * Returns the highest partition version. */
static long long print_partitions(const trainOpts *o, psClient *c, psModel *m) {
    long long top = 0;
    redisReply *slots = c->cluster ? psCommand(c, NULL, "CLUSTER SLOTS") : NULL;
    printf("partitions:\n");
    for (int t = 0; t < psModelNumTensors(m); t++) {
        for (int p = 0; p < psModelNumPartitions(m, t); p++) {
            const char *key = psModelPartitionKey(m, t, p);
            uint64_t first, nrows;
            long long version = -1, pushes = -1;
            psKeyInfo ki;
            psModelPartitionRows(m, t, p, &first, &nrows);
            if (psInfo(c, key, &ki) == PS_OK) {
                version = (long long)ki.version;
                pushes = (long long)ki.pushes;
            } else {
                tr_err(o, "PS.INFO %s: %s", key, c->errstr);
            }
            if (version > top) top = version;
            char node[80] = "";
            if (c->cluster) {
                redisReply *s = psCommand(c, NULL, "CLUSTER KEYSLOT %s", key);
                if (s && s->type == REDIS_REPLY_INTEGER) {
                    char owner[64];
                    snprintf(node, sizeof(node), "  slot %5lld on %s", s->integer,
                             slot_owner(slots, s->integer, owner, sizeof(owner)));
                }
                if (s) freeReplyObject(s);
            }
            printf("  %-16s rows %5llu..%-5llu version %8lld pushes %8lld%s\n", key,
                   (unsigned long long)first, (unsigned long long)(first + nrows - 1), version,
                   pushes, node);
        }
    }
    if (slots) freeReplyObject(slots);
    return top;
}

int tr_cmd_status(const trainOpts *o) {
    jobConfig cfg;
    const modelKind *kind;
    char tkey[128], pkey[128];
    int status = TR_EXIT_FAIL;
    psModel *m = NULL;
    psClient *c = tr_connect(o, 0, 0);
    if (c == NULL) return TR_EXIT_FAIL;
    int rc = tr_load_config(c, o->job, &cfg);
    if (rc != 0) {
        if (rc == 1) tr_err(o, "--job %s: no such job (run ps-train init first)", o->job);
        goto out;
    }
    if (strcmp(cfg.state, "ready") != 0) {
        tr_err(o, "job %s: init did not finish (state %s); rerun init with --reset", o->job,
               cfg.state);
        goto out;
    }
    kind = tr_kind_of(&cfg);
    tr_key(tkey, sizeof(tkey), o->job, "tasks");
    tr_key(pkey, sizeof(pkey), o->job, "progress");

    long long acked = 0, samples = 0, pending = 0;
    if (tr_progress(o, c, &acked, &samples) != 0) goto out;
    redisReply *r = psCommand(c, pkey, "HGETALL %s", pkey);
    redisReply *pend = psCommand(c, tkey, "XPENDING %s %s", tkey, TR_GROUP);
    if (pend && pend->type == REDIS_REPLY_ARRAY && pend->elements >= 1)
        pending = pend->element[0]->integer;
    /* The state a reader needs: "ready" is only init's bookkeeping word. */
    const char *state = acked >= cfg.tasks && cfg.tasks > 0 ? "finished (every task acked)"
                        : acked + pending > 0 ? "training" : "ready (no task taken yet)";
    kind->describe(o, &cfg, state);
    printf("tasks: %lld total, %lld acked, %lld pending (taken, not acked), %lld not started\n",
           cfg.tasks, acked, pending, cfg.tasks - acked - pending);
    printf("samples trained: %lld\n", samples);
    if (cfg.batch > 0 && cfg.shard_size > 0) { /* a sparse job's tasks are byte ranges: 0 */
        /* Every task done once gives this many pushes per partition. */
        long long per_epoch = 0;
        for (long long s = 0; s < cfg.train_n; s += cfg.shard_size) {
            long long n = cfg.train_n - s < cfg.shard_size ? cfg.train_n - s : cfg.shard_size;
            per_epoch += (n + cfg.batch - 1) / cfg.batch;
        }
        printf("model pushes per partition when every task is trained once: %lld\n",
               per_epoch * cfg.epochs);
    }
    if (r && r->type == REDIS_REPLY_ARRAY) {
        printf("workers:\n");
        for (size_t i = 0; i + 1 < r->elements; i += 2) {
            const char *f = r->element[i]->str;
            if (strncmp(f, "w:", 2) != 0) continue;
            printf("  %-40s %s\n", f + 2, r->element[i + 1]->str);
        }
    }
    if (pend && pend->type == REDIS_REPLY_ARRAY && pend->elements >= 4 &&
        pend->element[3]->type == REDIS_REPLY_ARRAY) {
        for (size_t i = 0; i < pend->element[3]->elements; i++) {
            redisReply *e = pend->element[3]->element[i];
            printf("  pending on %s: %s tasks\n", e->element[0]->str, e->element[1]->str);
        }
    }
    if (r) freeReplyObject(r);
    if (pend) freeReplyObject(pend);
    if ((m = kind->status(o, c, &cfg)) == NULL) goto out;
    if (print_partitions(o, c, m) > 0 && acked == 0 && pending == 0)
        printf("note: no task of job %s was taken on this server, yet its model has been "
               "pushed to: it is trained elsewhere (through a ps-relay, or by workers of "
               "another tool); ps-train status on the relays' local servers shows their "
               "tasks\n", o->job);
    status = TR_EXIT_OK;
out:
    psModelFree(m);
    psClientFree(c);
    return status;
}

/* ========================================================================
 * snapshot
 * ====================================================================== */

int tr_cmd_snapshot(const trainOpts *o) {
    jobConfig cfg;
    int status = TR_EXIT_FAIL, n = 0;
    psModel *m = NULL;
    psClient *c = tr_connect(o, 0, 0);
    if (c == NULL) return TR_EXIT_FAIL;
    int rc = tr_load_config(c, o->job, &cfg);
    if (rc != 0) {
        if (rc == 1) tr_err(o, "--job %s: no such job", o->job);
        goto out;
    }
    if (cfg.sp.model[0]) {
        tr_err(o, "job %s is a sparse job: embedding tables have no snapshots (PS.SNAPSHOT "
                  "answers WRONGTYPE; COPY the shard keys for a point-in-time copy)", o->job);
        goto out;
    }
    if ((m = tr_model(c, o->job, &cfg)) == NULL) goto out;
    for (int t = 0; t < psModelNumTensors(m); t++) {
        for (int p = 0; p < psModelNumPartitions(m, t); p++) {
            const char *key = psModelPartitionKey(m, t, p);
            if (psSnapshot(c, key, o->at) != PS_OK) {
                tr_err(o, "%s", c->errstr);
                goto out;
            }
            n++;
        }
    }
    printf("ps-train snapshot: %d partitions of job %s saved as '%s'\n", n, o->job, o->at);
    status = TR_EXIT_OK;
out:
    psModelFree(m);
    psClientFree(c);
    return status;
}
