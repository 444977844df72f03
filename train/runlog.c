/* runlog.c -- ps-train's JSON-lines log of a run (see runlog.h).
 *
 * The escaper and the field formatter are pure (tests/test_runlog.c); the
 * rest opens the file, keeps the time origin and writes whole lines. */

#include "runlog.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"

struct runLog {
    int fd;
    double t0;          /* origin of "t", unix seconds */
    int warned;         /* a failed write was reported */
    char path[512];     /* for the message */
};

/* ========================================================================
 * Escaping and formatting (pure)
 * ====================================================================== */

/* Length (2..4) of the valid UTF-8 sequence of more than one byte at 'p',
 * or 0 when it is not one (overlong, surrogate, above U+10FFFF, cut). */
static int utf8_seq(const unsigned char *p) {
    unsigned char c = p[0];
    int n;
    unsigned char lo = 0x80, hi = 0xBF; /* range of the second byte */
    if (c >= 0xC2 && c <= 0xDF) n = 2;
    else if (c == 0xE0) n = 3, lo = 0xA0;
    else if (c == 0xED) n = 3, hi = 0x9F;
    else if (c >= 0xE1 && c <= 0xEF) n = 3;
    else if (c == 0xF0) n = 4, lo = 0x90;
    else if (c == 0xF4) n = 4, hi = 0x8F;
    else if (c >= 0xF1 && c <= 0xF3) n = 4;
    else return 0;
    if (p[1] < lo || p[1] > hi) return 0;
    for (int i = 2; i < n; i++)
        if (p[i] < 0x80 || p[i] > 0xBF) return 0;
    return n;
}

size_t runlog_escape(char *dst, size_t cap, const char *s) {
    const unsigned char *p = (const unsigned char *)s;
    size_t need = 0, used = 0;
    int full = 0;
    while (*p) {
        char esc[8];
        const char *piece = esc;
        size_t n;
        unsigned char c = *p;
        if (c == '"' || c == '\\') {
            esc[0] = '\\', esc[1] = (char)c, n = 2;
            p++;
        } else if (c < 0x20) {
            const char *named = c == '\n' ? "\\n" : c == '\r' ? "\\r" : c == '\t' ? "\\t"
                              : c == '\b' ? "\\b" : c == '\f' ? "\\f" : NULL;
            if (named) piece = named, n = 2;
            else n = (size_t)snprintf(esc, sizeof(esc), "\\u%04x", c);
            p++;
        } else if (c < 0x80) {
            piece = (const char *)p, n = 1;
            p++;
        } else if ((n = (size_t)utf8_seq(p)) > 0) {
            piece = (const char *)p;
            p += n;
        } else {
            piece = "\\ufffd", n = 6;
            p++;
        }
        /* Whole pieces only: a cut string never ends inside an escape or
         * a UTF-8 sequence. */
        if (!full && used + n < cap) {
            memcpy(dst + used, piece, n);
            used += n;
        } else {
            full = 1;
        }
        need += n;
    }
    if (cap > 0) dst[used] = '\0';
    return need;
}

/* Appends ,"key":value of 'f' at buf[len..cap). Returns the new length, or
 * 0 when it does not fit (buf[len] is then reset to NUL). */
static size_t format_field(char *buf, size_t cap, size_t len, const rlField *f) {
    size_t n, k;
    if (len + 4 >= cap) return 0;
    buf[len] = ',';
    buf[len + 1] = '"';
    k = runlog_escape(buf + len + 2, cap - len - 2, f->key);
    n = len + 2 + k;
    if (n + 2 >= cap) goto full;
    buf[n++] = '"';
    buf[n++] = ':';
    switch (f->type) {
    case RL_T_STR:
        buf[n++] = '"';
        k = runlog_escape(buf + n, cap - n, f->s ? f->s : "");
        n += k;
        if (n + 1 >= cap) goto full;
        buf[n++] = '"';
        buf[n] = '\0';
        return n;
    case RL_T_INT:
        k = (size_t)snprintf(buf + n, cap - n, "%lld", f->i);
        break;
    case RL_T_NUM:
        if (isfinite(f->d))
            k = (size_t)snprintf(buf + n, cap - n, "%.7g", f->d);
        else
            k = (size_t)snprintf(buf + n, cap - n, "null");
        break;
    case RL_T_BOOL:
        k = (size_t)snprintf(buf + n, cap - n, "%s", f->i ? "true" : "false");
        break;
    default:
        k = (size_t)snprintf(buf + n, cap - n, "null");
        break;
    }
    if (n + k >= cap) goto full;
    return n + k;
full:
    buf[len] = '\0';
    return 0;
}

size_t runlog_format(char *buf, size_t cap, size_t len, int nfields, const rlField *f,
                     int *dropped) {
    for (int i = 0; i < nfields; i++) {
        if (f[i].key == NULL) continue;
        size_t n = format_field(buf, cap, len, &f[i]);
        if (n == 0)
            *dropped = 1;
        else
            len = n;
    }
    return len;
}

/* ========================================================================
 * The log file
 * ====================================================================== */

static double wall_now(void) { return ps_wall_s(); }

runLog *runlog_open(const char *path, char *err, size_t errlen) {
    runLog *lg = calloc(1, sizeof(*lg));
    if (lg == NULL) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    lg->fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (lg->fd < 0) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        free(lg);
        return NULL;
    }
    snprintf(lg->path, sizeof(lg->path), "%s", path);
    const char *t0 = getenv(RUNLOG_T0_ENV);
    char *end = NULL;
    double v = t0 ? strtod(t0, &end) : 0;
    lg->t0 = t0 && end != t0 && *end == '\0' && isfinite(v) && v > 0 ? v : wall_now();
    return lg;
}

void runlog_close(runLog *lg) {
    if (lg == NULL) return;
    close(lg->fd);
    free(lg);
}

int runlog_export_origin(const runLog *lg) {
    char v[64];
    if (lg == NULL) return 0;
    snprintf(v, sizeof(v), "%.6f", lg->t0);
    return setenv(RUNLOG_T0_ENV, v, 1) == 0 ? 0 : -1;
}

double runlog_elapsed(const runLog *lg) {
    return lg ? wall_now() - lg->t0 : 0;
}

int runlog_emit(runLog *lg, const char *event, int nfields, const rlField *f) {
    static const char trunc[] = ",\"truncated\":true";
    char line[RUNLOG_LINE_MAX];
    int dropped = 0;
    if (lg == NULL) return 0;
    double now = wall_now();
    size_t len = (size_t)snprintf(line, sizeof(line), "{\"t\":%.3f,\"time\":%.3f", now - lg->t0,
                                  now);
    rlField ev = RL_STR("event", event);
    /* Room kept for the truncation mark, "}\n" and the NUL. */
    size_t cap = sizeof(line) - sizeof(trunc) - 2;
    len = runlog_format(line, cap, len, 1, &ev, &dropped);
    len = runlog_format(line, cap, len, nfields, f, &dropped);
    if (dropped) {
        memcpy(line + len, trunc, sizeof(trunc) - 1);
        len += sizeof(trunc) - 1;
    }
    line[len++] = '}';
    line[len++] = '\n';
    /* One write per line: with O_APPEND the kernel places it whole at the
     * end, so lines of concurrent writers do not interleave. */
    ssize_t w;
    do {
        w = write(lg->fd, line, len);
    } while (w < 0 && errno == EINTR);
    if (w == (ssize_t)len) return 0;
    if (!lg->warned) {
        fprintf(stderr, "ps-train: --log-json %s: write failed (%s); the log misses lines\n",
                lg->path, w < 0 ? strerror(errno) : "short write");
        lg->warned = 1;
    }
    return -1;
}
