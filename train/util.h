/* util.h -- small helpers every ps-train file may use: exit codes, error
 * lines, clocks, job key names, the --log-json file (util.c). They call
 * nothing else of train/. */
#ifndef PS_TRAIN_UTIL_H
#define PS_TRAIN_UTIL_H

#include <stddef.h>

#include "opts.h"

/* Exit codes of ps-train. */
#define TR_EXIT_OK 0
#define TR_EXIT_FAIL 1  /* runtime failure: server, data, training */
#define TR_EXIT_USAGE 2 /* bad command line, or settings that differ from the job's */
#define TR_EXIT_FINISHED 3 /* init/run: every task of the job was trained already */
#define TR_EXIT_INTERRUPTED 130 /* SIGINT/SIGTERM: the job is resumable */

#define TR_JOB_MAX 64

/* Builds key "psjob:{job}:<what>" into 'buf'. Returns buf. */
const char *tr_key(char *buf, size_t len, const char *job, const char *what);
/* Prints an error with the subcommand prefix. */
void tr_err(const trainOpts *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Appends printf-formatted text to 'out' of 'len' bytes, comma separated
 * from what it holds (the "--flag given (job: stored)" lists). */
void tr_add_diff(char *out, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
double tr_now(void);
/* Wall clock (unix seconds), comparable between processes. */
double tr_wall(void);
void tr_sleep_ms(long ms);
/* Opens --log-json into *lg (NULL when the flag is not given). Returns 0, or
 * -1 when the file cannot be opened (printed). */
struct runLog;
int tr_open_log(const trainOpts *o, struct runLog **lg);

#endif
