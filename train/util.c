/* util.c -- ps-train's small helpers (util.h). */

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "runlog.h"
#include "util.h"

const char *tr_key(char *buf, size_t len, const char *job, const char *what) {
    snprintf(buf, len, "psjob:{%s}:%s", job, what);
    return buf;
}


void tr_err(const trainOpts *o, const char *fmt, ...) {
    va_list ap;
    fprintf(stderr, "ps-train %s: ", o->cmd);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}


double tr_wall(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}


double tr_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}


void tr_sleep_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}


void tr_add_diff(char *out, size_t len, const char *fmt, ...) {
    size_t n = strlen(out);
    va_list ap;
    if (n + 3 >= len) return;
    if (n) {
        strcpy(out + n, ", ");
        n += 2;
    }
    va_start(ap, fmt);
    vsnprintf(out + n, len - n, fmt, ap);
    va_end(ap);
}


int tr_open_log(const trainOpts *o, runLog **lg) {
    char err[600];
    *lg = NULL;
    if (o->log_json == NULL) return 0;
    if ((*lg = runlog_open(o->log_json, err, sizeof(err))) != NULL) return 0;
    tr_err(o, "--log-json %s", err);
    return -1;
}

