/* runlog.h -- ps-train's machine-readable log of a run (--log-json FILE).
 *
 * One JSON object per line, appended to FILE; several processes (run and
 * its workers) append to the same file. Each line goes out in one write()
 * on a descriptor opened with O_APPEND, so lines of different processes
 * never interleave. Every line starts with
 *   "t":    seconds since the run started (ps-train run exports its start
 *           to its workers in PS_TRAIN_LOG_T0), or since this process opened
 *           the log when there is no run around it
 *   "time": unix seconds (wall clock), comparable between machines
 *   "event": what the line is (progress, start, done, eval, result, ...)
 * then the event's fields. The field names are the ones
 * `python3 -m redis_ps.plot` reads (the format examples/torch_async_ps.py
 * writes): progress lines carry worker, epoch, samples, loss, version,
 * staleness; "result" lines carry test_acc, samples, samples_per_s.
 * A number that is not finite is written as null (JSON has no NaN).
 *
 * Events are written through RUNLOG():
 *   RUNLOG(lg, "progress", RL_STR("worker", name), RL_INT("samples", n),
 *          have_loss ? RL_NUM("loss", loss) : RL_NONE);
 * A NULL log writes nothing, so call sites need no test of their own. */
#ifndef PS_RUNLOG_H
#define PS_RUNLOG_H

#include <stddef.h>

/* Environment variable through which run gives its workers its start time
 * (unix seconds), so that "t" of every process counts from the same zero. */
#define RUNLOG_T0_ENV "PS_TRAIN_LOG_T0"
/* Longest line written, newline included. A field that does not fit is
 * left out and the line gets "truncated":true. */
#define RUNLOG_LINE_MAX 4096

typedef struct runLog runLog;

enum { RL_T_NONE, RL_T_STR, RL_T_INT, RL_T_NUM, RL_T_BOOL };

/* One field of an event: a key and a typed value. key NULL (RL_NONE) is
 * skipped, which lets a call site leave a field out conditionally. */
typedef struct rlField {
    const char *key;
    int type;
    const char *s;
    long long i;
    double d;
} rlField;

#define RL_STR(k, v) ((rlField){(k), RL_T_STR, (v), 0, 0})
#define RL_INT(k, v) ((rlField){(k), RL_T_INT, NULL, (long long)(v), 0})
#define RL_NUM(k, v) ((rlField){(k), RL_T_NUM, NULL, 0, (double)(v)})
#define RL_BOOL(k, v) ((rlField){(k), RL_T_BOOL, NULL, (v) ? 1 : 0, 0})
#define RL_NONE ((rlField){NULL, RL_T_NONE, NULL, 0, 0})

/* Writes one event line with the fields given after 'event'. */
#define RUNLOG(lg, event, ...)                                                     \
    runlog_emit((lg), (event), (int)(sizeof((rlField[]){__VA_ARGS__}) / sizeof(rlField)), \
                (rlField[]){__VA_ARGS__})

/* Opens (creates, 0644) 'path' for appending. The time origin is
 * PS_TRAIN_LOG_T0 when it holds a valid number, else now. Returns the log
 * (free with runlog_close) or NULL with a message in 'err'. */
runLog *runlog_open(const char *path, char *err, size_t errlen);
/* Closes 'lg' (NULL is fine). */
void runlog_close(runLog *lg);
/* Sets PS_TRAIN_LOG_T0 to the origin of 'lg' for child processes. Returns
 * 0, or -1 when setenv fails. */
int runlog_export_origin(const runLog *lg);
/* Seconds since the origin of 'lg' (0 for NULL). */
double runlog_elapsed(const runLog *lg);

/* Builds the line {"t":..,"time":..,"event":"<event>", fields...} and
 * appends it with one write(). A write that fails is reported on stderr
 * once per log; training goes on. Returns 0 (also for a NULL log) or -1. */
int runlog_emit(runLog *lg, const char *event, int nfields, const rlField *f);

/* Pure part, for tests. */

/* Writes 's' as the inside of a JSON string into 'dst' (capacity 'cap',
 * always NUL-terminated when cap > 0): '"' and '\' escaped, control
 * characters as \n \r \t \b \f or \u00XX, bytes that are not valid UTF-8
 * as \ufffd; valid UTF-8 is copied. Returns the length the whole escaped
 * string needs (without the NUL); it was truncated when that is >= cap. */
size_t runlog_escape(char *dst, size_t cap, const char *s);
/* Formats the fields (no braces) after 'prefix' into 'buf' of 'cap' bytes:
 * ,"key":value for each field that fits. Returns the length, and sets
 * *dropped when some field did not fit. */
size_t runlog_format(char *buf, size_t cap, size_t len, int nfields, const rlField *f,
                     int *dropped);

#endif
