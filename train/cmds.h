/* cmds.h -- the subcommands of ps-train, called by main (ps-train.c). Each
 * returns the process exit code (util.h TR_EXIT_*). */
#ifndef PS_TRAIN_CMDS_H
#define PS_TRAIN_CMDS_H

#include "opts.h"

int tr_cmd_init(const trainOpts *o);     /* job.c */
int tr_cmd_work(const trainOpts *o);     /* work.c */
int tr_cmd_eval(const trainOpts *o);     /* eval.c */
int tr_cmd_run(const trainOpts *o);      /* run.c */
int tr_cmd_status(const trainOpts *o);   /* status.c */
int tr_cmd_snapshot(const trainOpts *o); /* status.c */
int tr_cmd_stream(const trainOpts *o);   /* stream.c */

#endif
