/* job.c -- ps-train init: a job's creation (the kind's part is
 * dense_job.c or sparse_job.c), rerun and --reset.
 *
 * A job is created by init in this order, so a re-run is safe and an
 * interrupted init is detected rather than half-repeated:
 *   1. HSETNX config state init     (0: the job exists; leave it alone)
 *   2. load the data to learn its size, check the layers fit it
 *   3. HSET the config fields, create the tensors with NX
 *   4. XGROUP CREATE ... MKSTREAM, XADD one task per shard per epoch
 *   5. HSET config state ready      (workers refuse a job not ready)
 * An init that fails after step 1 deletes what it wrote (config, tensors,
 * stream); a server without the module is refused at connect, before 1.
 * On an existing job, settings given that differ from its config are an
 * error, and a job with every task done is reported finished. */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cmds.h"
#include "conn.h"
#include "kind.h"
#include "sparse.h"
#include "tasks.h"
#include "util.h"
#include "wirefmt.h"

/* DEL the job's non-tensor keys and, when its config is known, its tensors. */
static int delete_job(const trainOpts *o, psClient *c) {
    jobConfig cfg;
    char k[4][128];
    int rc = tr_load_config(c, o->job, &cfg);
    if (rc < 0) return -1;
    if (rc == 0 && tr_kind_of(&cfg)->delete_keys(o, c, &cfg) != 0) return -1;
    tr_key(k[0], 128, o->job, "config");
    tr_key(k[1], 128, o->job, "tasks");
    tr_key(k[2], 128, o->job, "progress");
    tr_key(k[3], 128, o->job, "done");
    redisReply *r = tr_cmd_ok(o, c, k[0], "DEL %s %s %s %s", k[0], k[1], k[2], k[3]);
    if (r == NULL) return -1;
    freeReplyObject(r);
    return 0;
}

/* Lists in 'out' every job setting given on the command line that differs
 * from the existing job's config, as "--flag given (job: stored)". Returns
 * how many differ. Flags not given are not compared: a rerun may leave them
 * out. */
static int config_diff(const trainOpts *o, const jobConfig *cfg, char *out, size_t len) {
    const denseOpts *d = &o->dense;
    int n = 0;
    out[0] = '\0';
#define DIFF(cond, ...) do { if (cond) { tr_add_diff(out, len, __VA_ARGS__); n++; } } while (0)
    if (tr_given(o, "--layers")) {
        int sizes[TR_MAX_LAYERS], k = ps_parse_layers(d->layers, sizes, TR_MAX_LAYERS, NULL, 0);
        int same = k == cfg->nsizes && !memcmp(sizes, cfg->sizes, (size_t)k * sizeof(int));
        DIFF(!same, "--layers %s (job: %s)", d->layers, cfg->layers);
    }
    DIFF(tr_given(o, "--optim") && strcasecmp(o->optim, cfg->optim), "--optim %s (job: %s)",
         o->optim, cfg->optim);
    DIFF(tr_given(o, "--lr") && o->lr != cfg->lr, "--lr %g (job: %g)", o->lr, cfg->lr);
    char mom[32] = "server default";
    if (cfg->momentum >= 0) snprintf(mom, sizeof(mom), "%g", cfg->momentum);
    DIFF(tr_given(o, "--momentum") && cfg->has_momentum && o->momentum != cfg->momentum,
         "--momentum %g (job: %s)", o->momentum, mom);
    DIFF(tr_given(o, "--seed") && o->seed != cfg->seed, "--seed %llu (job: %llu)",
         (unsigned long long)o->seed, (unsigned long long)cfg->seed);
    DIFF(tr_given(o, "--epochs") && o->epochs != cfg->epochs, "--epochs %d (job: %d)", o->epochs,
         cfg->epochs);
    DIFF(tr_given(o, "--batch") && o->batch != cfg->batch, "--batch %d (job: %d)", o->batch,
         cfg->batch);
    DIFF(tr_given(o, "--task-samples") && d->task_samples != cfg->shard_size,
         "--task-samples %d (job: %d)", d->task_samples, cfg->shard_size);
    DIFF(tr_given(o, "--partition-bytes") && d->partition_bytes != cfg->partition_bytes,
         "--partition-bytes %lld (job: %lld)", d->partition_bytes, cfg->partition_bytes);
    DIFF(tr_given(o, "--data") && strcmp(d->data, cfg->data), "--data %s (job: %s)", d->data,
         cfg->data[0] ? cfg->data : "default");
    DIFF(tr_given(o, "--csv") && strcmp(d->csv, cfg->csv), "--csv %s (job: %s)", d->csv,
         cfg->csv[0] ? cfg->csv : "none, Fashion-MNIST");
    DIFF(tr_given(o, "--test-csv") && strcmp(d->test_csv, cfg->test_csv),
         "--test-csv %s (job: %s)", d->test_csv, cfg->test_csv[0] ? cfg->test_csv : "none");
    DIFF(tr_given(o, "--label-col") && d->label_col != cfg->label_col,
         "--label-col %d (job: %d)", d->label_col, cfg->label_col);
    DIFF(tr_given(o, "--limit") && cfg->has_limit && d->limit != cfg->limit,
         "--limit %d (job: %d)", d->limit, cfg->limit);
    DIFF(tr_given(o, "--slice") && strcmp(d->slice, cfg->slice), "--slice %s (job: %s)", d->slice,
         cfg->slice[0] ? cfg->slice : "all");
#undef DIFF
    return n + tr_sparse_diff(o, cfg, out, len);
}

/* init/run on a job that exists: an error when a setting given differs
 * (TR_EXIT_USAGE), TR_EXIT_FINISHED when every task is trained, else
 * TR_EXIT_OK to continue it. */
static int existing_job(const trainOpts *o, psClient *c, const jobConfig *cfg) {
    char diff[1024];
    if (config_diff(o, cfg, diff, sizeof(diff)) > 0) {
        tr_err(o, "job %s exists with other settings: %s. Use --reset to delete it and start "
                  "over, or another --job name", o->job, diff);
        return TR_EXIT_USAGE;
    }
    long long done, samples;
    if (tr_progress(o, c, &done, &samples) != 0) return TR_EXIT_FAIL;
    if (cfg->tasks > 0 && done >= cfg->tasks) {
        tr_err(o, "job %s is finished: all %lld tasks were trained. See its accuracy with "
                  "'ps-train eval --addr %s --job %s'; train again with --reset or another "
                  "--job name", o->job, cfg->tasks, o->addr, o->job);
        return TR_EXIT_FINISHED;
    }
    printf("ps-train %s: job %s exists (layers %s, %lld of %lld tasks trained); continuing it\n",
           o->cmd, o->job, cfg->layers, done, cfg->tasks);
    return TR_EXIT_OK;
}

int tr_cmd_init(const trainOpts *o) {
    char ckey[128];
    int status = TR_EXIT_FAIL;
    jobConfig cfg;
    psClient *c = tr_connect(o, 0, 0);
    if (c == NULL) return TR_EXIT_FAIL;
    tr_key(ckey, sizeof(ckey), o->job, "config");
    if (o->reset && delete_job(o, c) != 0) goto out;

    redisReply *r = tr_cmd_ok(o, c, ckey, "HSETNX %s state init", ckey);
    if (r == NULL) goto out;
    int fresh = r->type == REDIS_REPLY_INTEGER && r->integer == 1;
    freeReplyObject(r);
    if (!fresh) {
        if (tr_load_config(c, o->job, &cfg) != 0) goto out;
        if (strcmp(cfg.state, "ready") != 0) {
            tr_err(o, "job %s: an earlier init did not finish (state %s); rerun with --reset",
                   o->job, cfg.state);
            goto out;
        }
        if (tr_check_push_format(o, &cfg) != 0) {
            status = TR_EXIT_USAGE;
            goto out;
        }
        status = existing_job(o, c, &cfg);
        goto out;
    }

    /* Fresh job: its kind's init (dense_job.c, sparse_job.c) writes the
     * config fields, creates its keys and fills the stream; on failure it
     * deletes the keys it created. */
    if ((status = tr_kind_for(o)->init(o, c)) == TR_EXIT_OK) goto out;

    /* This init made the job (HSETNX answered 1): remove what it wrote, so
     * no half-made job stays behind and init can be rerun. */
    {
        char tkey[128];
        tr_key(tkey, sizeof(tkey), o->job, "tasks");
        r = psCommand(c, ckey, "DEL %s %s", ckey, tkey);
        if (r) freeReplyObject(r);
    }
out:
    psClientFree(c);
    return status;
}
