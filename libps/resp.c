/* resp.c -- the engine's RESP2 reply framer (resp.h). */
#include "resp.h"

#include <stdint.h>
#include <string.h>

/* The integer between 'p' and the "\r\n" at 'end'. 0, or -1 when malformed. */
static int scan_int(const char *p, const char *end, long long *v) {
    int neg = 0, digits = 0;
    long long x = 0;
    if (p < end && *p == '-') {
        neg = 1;
        p++;
    }
    for (; p < end; p++, digits++) {
        if (*p < '0' || *p > '9' || digits == 18) return -1;
        x = x * 10 + (*p - '0');
    }
    if (digits == 0) return -1;
    *v = neg ? -x : x;
    return 0;
}

int psi_scan_reply(psScan *s, const char *buf, size_t len) {
    if (s->pos == 0 && s->pending == 0) s->pending = 1;
    while (s->pending > 0) {
        const char *p = buf + s->pos, *nl;
        size_t hl;
        long long v = 0;
        if (s->pos >= len) {
            s->need = s->pos + 3;
            return 0;
        }
        nl = memchr(p, '\n', len - s->pos);
        if (nl == NULL) {
            s->need = len + 1;
            return 0;
        }
        if (nl == p || nl[-1] != '\r') return -1;
        hl = (size_t)(nl + 1 - p);
        switch (*p) {
        case '+':
        case '-':
            break;
        case ':':
            if (scan_int(p + 1, nl - 1, &v) != 0) return -1;
            break;
        case '$':
            if (scan_int(p + 1, nl - 1, &v) != 0 || v < -1) return -1;
            if (v >= 0) {
                size_t end = s->pos + hl + (size_t)v + 2;
                if (end > len) {
                    s->need = end;
                    return 0;
                }
                if (buf[end - 2] != '\r' || buf[end - 1] != '\n') return -1;
                hl = end - s->pos;
            }
            break;
        case '*':
            if (scan_int(p + 1, nl - 1, &v) != 0 || v < -1 || v > INT32_MAX) return -1;
            if (v > 0) s->pending += v;
            break;
        default:
            return -1;
        }
        s->pos += hl;
        s->pending--;
    }
    return 1;
}

int psi_resp_array_bulks(const char *buf, size_t len, int max, psRespBulkFn *fn, void *arg,
                         size_t *from, size_t *to) {
    const char *nl = memchr(buf, '\n', len);
    long long n = 0;
    size_t pos;
    int ntaken = 0;
    if (nl == NULL || buf[0] != '*' || scan_int(buf + 1, nl - 1, &n) != 0 || n <= 0 || n > max)
        return 0;
    pos = (size_t)(nl + 1 - buf);
    for (int idx = 0; idx < n; idx++) {
        long long v = 0;
        const char *p = buf + pos;
        size_t hl;
        nl = memchr(p, '\n', len - pos);
        hl = (size_t)(nl + 1 - p);
        if (*p == '*') break;           /* nested: offer nothing more */
        if (*p == '$' && scan_int(p + 1, nl - 1, &v) == 0 && v >= 0) {
            if (fn(arg, idx, (int)n, p + hl, (size_t)v)) {
                from[ntaken] = pos;
                to[ntaken++] = pos + hl + (size_t)v + 2;
            }
            hl += (size_t)v + 2;
        }
        pos += hl;
    }
    return ntaken;
}
