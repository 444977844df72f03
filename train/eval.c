/* eval.c -- ps-train eval: the job's model (or, dense jobs, snapshot --at
 * NAME of every partition) on its test data: accuracy (dense.h
 * tr_evaluate) or AUC (sparse_job.c). */

#include <cblas.h>
#include <stdio.h>

#include "cmds.h"
#include "dense.h"
#include "runlog.h"
#include "sparse.h"
#include "tasks.h"
#include "util.h"

int tr_cmd_eval(const trainOpts *o) {
    double loss = 0, acc = 0;
    uint64_t v = 0;
    int n = 0, sparse = tr_sparse_job(o);
    if (sparse < 0) return TR_EXIT_FAIL;
    runLog *lg;
    if (tr_open_log(o, &lg) != 0) return TR_EXIT_FAIL;
    if (sparse) {
        int rc = tr_sparse_cmd_eval(o, lg);
        runlog_close(lg);
        return rc;
    }
    if (o->threads > 0) openblas_set_num_threads(o->threads);
    if (tr_evaluate(o, &loss, &acc, &v, &n) != 0) {
        runlog_close(lg);
        return TR_EXIT_FAIL;
    }
    printf("eval job %s%s%s: test_loss=%.4f test_acc=%.4f on %d samples, model version %llu\n",
           o->job, o->at ? " at " : "", o->at ? o->at : "", loss, acc, n, (unsigned long long)v);
    /* "samples": what the job's workers had trained when it was evaluated. */
    RUNLOG(lg, "eval", RL_STR("job", o->job), o->at ? RL_STR("snapshot", o->at) : RL_NONE,
           RL_NUM("test_acc", acc), RL_NUM("test_loss", loss), RL_INT("test_samples", n),
           RL_INT("version", v), lg ? RL_INT("samples", tr_samples_trained(o)) : RL_NONE);
    runlog_close(lg);
    if (o->dense.min_acc >= 0 && acc < o->dense.min_acc) {
        tr_err(o, "test accuracy %.4f is below --min-acc %.4f", acc, o->dense.min_acc);
        return TR_EXIT_FAIL;
    }
    return TR_EXIT_OK;
}

