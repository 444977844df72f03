/* eval.c -- ps-train eval: the job's model (or, dense jobs, snapshot --at
 * NAME of every partition) on its test data, by its kind (kind.h):
 * accuracy (dense_job.c) or AUC (sparse_job.c). */


#include "cmds.h"
#include "kind.h"
#include "runlog.h"
#include "util.h"

int tr_cmd_eval(const trainOpts *o) {
    const modelKind *kind;
    runLog *lg;
    if (tr_job_kind(o, &kind) != 0) return TR_EXIT_FAIL;
    if (tr_open_log(o, &lg) != 0) return TR_EXIT_FAIL;
    int rc = kind->eval(o, lg);
    runlog_close(lg);
    return rc;
}
