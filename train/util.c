/* util.c -- ps-train's small helpers (util.h). */

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "clock.h"
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


double tr_wall(void) { return ps_wall_s(); }


double tr_now(void) { return ps_mono_s(); }


/* A signal cuts the sleep short (a stop request is seen at once). */
void tr_sleep_ms(long ms) { ps_sleep_ms(ms); }


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

