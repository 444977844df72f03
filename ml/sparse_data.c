/* sparse_data.c -- libsvm and Criteo readers over byte ranges (see
 * sparse_data.h). */

#include "sparse_data.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

void ps_sparse_seterr(char *err, size_t errlen, const char *fmt, ...)
{
    if (err == NULL || errlen == 0) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

#define seterr ps_sparse_seterr

/* ================================ batches ================================= */

void ps_sparse_batch_clear(ps_sparse_batch *b)
{
    b->n = 0;
    b->nnz = 0;
}

/* Grows the feature arrays (fields, ids, values) to hold 'need' entries,
 * doubling from 'first'. Returns 0 or -1 (OOM; the arrays stay valid). */
static int grow_features(uint32_t **f, uint64_t **id, float **v, size_t *cap, size_t need,
                         size_t first)
{
    if (need <= *cap) return 0;
    size_t c = *cap ? *cap : first;
    while (c < need) c *= 2;
    uint32_t *nf = realloc(*f, c * sizeof(*nf));
    if (nf == NULL) return -1;
    *f = nf;
    uint64_t *nid = realloc(*id, c * sizeof(*nid));
    if (nid == NULL) return -1;
    *id = nid;
    float *nv = realloc(*v, c * sizeof(*nv));
    if (nv == NULL) return -1;
    *v = nv;
    *cap = c;
    return 0;
}

/* Makes room for one more row with 'k' features. Returns 0 or -1 (OOM). */
static int batch_reserve(ps_sparse_batch *b, size_t k)
{
    if ((size_t)b->n + 1 >= b->cap_rows || b->off == NULL) {
        size_t cap = b->cap_rows ? b->cap_rows * 2 : 256;
        float *l = realloc(b->label, cap * sizeof(*l));
        if (l == NULL) return -1;
        b->label = l;
        size_t *o = realloc(b->off, (cap + 1) * sizeof(*o));
        if (o == NULL) return -1;
        b->off = o;
        if (b->ndense > 0) {
            float *d = realloc(b->dense, cap * (size_t)b->ndense * sizeof(*d));
            if (d == NULL) return -1;
            b->dense = d;
        }
        b->cap_rows = cap;
    }
    return grow_features(&b->field, &b->id, &b->val, &b->cap_nnz, b->nnz + k, 4096);
}

int ps_sparse_batch_add(ps_sparse_batch *b, float label, const uint32_t *fields,
                        const uint64_t *ids, const float *vals, size_t k, const float *dense)
{
    if (batch_reserve(b, k) != 0) return -1;
    if (b->n == 0) b->off[0] = 0;
    for (size_t j = 0; j < k; j++) {
        b->field[b->nnz + j] = fields ? fields[j] : 0;
        b->id[b->nnz + j] = ids[j];
        b->val[b->nnz + j] = vals ? vals[j] : 1.0f;
    }
    b->nnz += k;
    if (b->ndense > 0) {
        float *d = b->dense + (size_t)b->n * (size_t)b->ndense;
        if (dense)
            memcpy(d, dense, (size_t)b->ndense * sizeof(float));
        else
            memset(d, 0, (size_t)b->ndense * sizeof(float));
    }
    b->label[b->n] = label;
    b->n++;
    b->off[b->n] = b->nnz;
    return 0;
}

void ps_sparse_batch_free(ps_sparse_batch *b)
{
    free(b->label);
    free(b->off);
    free(b->field);
    free(b->id);
    free(b->val);
    free(b->dense);
    memset(b, 0, sizeof(*b));
}

/* ================================ hashing ================================= */

/* The splitmix64 finalizer: a bijection of 64-bit words that spreads every
 * input bit over the output. */
static uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

#define ID_MASK ((1ULL << (64 - PS_SPARSE_FIELD_BITS)) - 1)

static uint64_t tag_id(uint32_t field, uint64_t h)
{
    return ((uint64_t)(field & (PS_SPARSE_MAX_FIELDS - 1)) << (64 - PS_SPARSE_FIELD_BITS)) |
           (h & ID_MASK);
}

uint64_t ps_sparse_id(uint32_t field, const void *tok, size_t len)
{
    /* FNV-1a over the bytes from a field-dependent start, then mixed. */
    const unsigned char *p = tok;
    uint64_t h = 0xcbf29ce484222325ULL ^ mix64((uint64_t)field + 1);
    for (size_t i = 0; i < len; i++) h = (h ^ p[i]) * 0x100000001b3ULL;
    return tag_id(field, mix64(h ^ (uint64_t)len));
}

uint64_t ps_sparse_id_u64(uint32_t field, uint64_t v)
{
    return tag_id(field, mix64(v ^ mix64(((uint64_t)field + 1) * 0x9e3779b97f4a7c15ULL)));
}

unsigned ps_criteo_bucket(long long v, int missing)
{
    if (missing) return 0;
    if (v < 0) return 1;
    if (v == 0) return 2;
    unsigned b = 0;
    unsigned long long u = (unsigned long long)v;
    while (u > 1) {
        u >>= 1;
        b++;
    }
    return 3 + b;
}

/* ================================= reader ================================= */

struct ps_sparse_reader {
    gzFile f;
    char *path;
    ps_sparse_opts o;
    char *buf;            /* bytes read, not yet consumed: buf[head..tail) */
    size_t cap, head, tail;
    uint64_t pos;         /* file offset of buf[head] */
    int eof;              /* gzread reported the end */
    int failed;           /* an error was returned; later calls fail too */
    unsigned long long line; /* lines read so far in this range */
    /* Scratch of one row. */
    uint32_t *rf;
    uint64_t *rid;
    float *rv;
    size_t rcap;
};


/* Formats "path:line" of the current line into 'out': the line number is
 * counted from 'start', so a range that does not begin the file says so. */
static const char *where(const ps_sparse_reader *r, char *out, size_t len)
{
    if (r->o.start == 0)
        snprintf(out, len, "%s:%llu", r->path, r->line);
    else
        snprintf(out, len, "%s:%llu (lines counted from byte %llu)", r->path, r->line,
                 (unsigned long long)r->o.start);
    return out;
}

/* The end of the input was reached with r->tail bytes buffered: a gzip
 * stream cut short (zlib reports it only through gzerror, gzread returns 0
 * as at a clean end) or a file shorter than o.expect_bytes is an error.
 * Returns 0 or -1 with the message in 'err'. */
static int eof_check(ps_sparse_reader *r, char *err, size_t errlen)
{
    const uint64_t at = r->pos + (r->tail - r->head); /* bytes in the file */
    int zerr = Z_OK;
    (void)gzerror(r->f, &zerr);
    if (zerr == Z_BUF_ERROR) {
        seterr(err, errlen, "%s: gzip stream cut short after %llu bytes (a truncated or "
                            "partly written file)", r->path, (unsigned long long)at);
        return -1;
    }
    if (r->o.expect_bytes != 0 && at != r->o.expect_bytes) {
        seterr(err, errlen, "%s: the file ends at byte %llu but has %llu bytes for this job "
                            "(changed since init?)", r->path, (unsigned long long)at,
               (unsigned long long)r->o.expect_bytes);
        return -1;
    }
    return 0;
}

/* Next line of the file: sets *line (NUL-terminated in place, without its
 * '\n') and *len, and advances. Returns 1, 0 at EOF, -1 on a read error or a
 * line longer than PS_SPARSE_MAX_LINE. *startp gets the line's offset. */
static int next_line(ps_sparse_reader *r, char **line, size_t *len, uint64_t *startp, char *err,
                     size_t errlen)
{
    size_t scan = r->head;
    for (;;) {
        char *nl = memchr(r->buf + scan, '\n', r->tail - scan);
        if (nl != NULL || (r->eof && r->tail > r->head)) {
            size_t end = nl ? (size_t)(nl - r->buf) : r->tail;
            *line = r->buf + r->head;
            *len = end - r->head;
            r->buf[end] = '\0'; /* the buffer keeps one spare byte for this */
            *startp = r->pos;
            size_t used = (nl ? end + 1 : end) - r->head;
            r->head += used;
            r->pos += used;
            return 1;
        }
        if (r->eof) return 0;
        scan = r->tail;
        /* Compact, grow if full, refill. */
        if (r->head > 0) {
            memmove(r->buf, r->buf + r->head, r->tail - r->head);
            r->tail -= r->head;
            scan -= r->head;
            r->head = 0;
        }
        if (r->tail + 1 >= r->cap) {
            if (r->cap > PS_SPARSE_MAX_LINE) {
                char w[600];
                r->line++;
                seterr(err, errlen, "%s: line longer than %d bytes", where(r, w, sizeof(w)),
                       PS_SPARSE_MAX_LINE);
                return -1;
            }
            char *nb = realloc(r->buf, r->cap * 2);
            if (nb == NULL) {
                seterr(err, errlen, "%s: out of memory", r->path);
                return -1;
            }
            r->buf = nb;
            r->cap *= 2;
        }
        int want = (int)(r->cap - 1 - r->tail);
        int got = gzread(r->f, r->buf + r->tail, (unsigned)want);
        if (got < 0) {
            int zerr;
            const char *m = gzerror(r->f, &zerr);
            seterr(err, errlen, "%s: read error: %s", r->path,
                   zerr == Z_ERRNO ? strerror(errno) : m);
            return -1;
        }
        if (got == 0 && eof_check(r, err, errlen) != 0) return -1;
        if (got == 0) r->eof = 1;
        r->tail += (size_t)got;
    }
}

ps_sparse_reader *ps_sparse_open(const char *path, const ps_sparse_opts *o, char *err,
                                 size_t errlen)
{
    ps_sparse_opts def = {0};
    if (o == NULL) o = &def;
    if (o->format != PS_SPARSE_LIBSVM && o->format != PS_SPARSE_CRITEO) {
        seterr(err, errlen, "%s: unknown data format %d", path, o->format);
        return NULL;
    }
    if (o->field_bits < 0 || o->field_bits > 16) {
        seterr(err, errlen, "%s: field bits %d must be 0..16", path, o->field_bits);
        return NULL;
    }
    if (o->end != 0 && o->end < o->start) {
        seterr(err, errlen, "%s: byte range end %llu is before its start %llu", path,
               (unsigned long long)o->end, (unsigned long long)o->start);
        return NULL;
    }
    ps_sparse_reader *r = calloc(1, sizeof(*r));
    if (r == NULL) goto oom;
    r->o = *o;
    r->path = strdup(path);
    r->cap = 1 << 16;
    r->buf = malloc(r->cap);
    if (r->path == NULL || r->buf == NULL) goto oom;
    r->f = gzopen(path, "rb");
    if (r->f == NULL) {
        seterr(err, errlen, "%s: cannot open: %s", path, errno ? strerror(errno) : "out of memory");
        ps_sparse_close(r);
        return NULL;
    }
    gzbuffer(r->f, 1 << 17);
    /* zlib decides plain vs gzip at the first read; until then gzseek()
     * cannot lseek a plain file and reads up to the offset instead, so a
     * task late in a large file would read all of it. gzdirect() decides
     * now. */
    if (gzdirect(r->f) && o->expect_bytes != 0) {
        struct stat st;
        if (stat(path, &st) == 0 && (uint64_t)st.st_size != o->expect_bytes) {
            seterr(err, errlen, "%s: %llu bytes but %llu for this job (changed since init?)",
                   path, (unsigned long long)st.st_size, (unsigned long long)o->expect_bytes);
            ps_sparse_close(r);
            return NULL;
        }
    }
    if (o->start > 0) {
        /* Land on the byte before 'start' and drop the rest of its line: a
         * range starting right after a '\n' keeps its first line, one starting
         * mid-line leaves that line to the range before it. */
        z_off_t want = (z_off_t)(o->start - 1);
        if ((uint64_t)want != o->start - 1 || gzseek(r->f, want, SEEK_SET) != want) {
            seterr(err, errlen, "%s: cannot seek to byte %llu", path,
                   (unsigned long long)o->start - 1);
            ps_sparse_close(r);
            return NULL;
        }
        r->pos = o->start - 1;
        char *line;
        size_t len;
        uint64_t at;
        if (next_line(r, &line, &len, &at, err, errlen) < 0) {
            ps_sparse_close(r);
            return NULL;
        }
    }
    return r;
oom:
    seterr(err, errlen, "%s: out of memory", path);
    ps_sparse_close(r);
    return NULL;
}

void ps_sparse_close(ps_sparse_reader *r)
{
    if (r == NULL) return;
    if (r->f) gzclose(r->f);
    free(r->path);
    free(r->buf);
    free(r->rf);
    free(r->rid);
    free(r->rv);
    free(r);
}

uint64_t ps_sparse_tell(const ps_sparse_reader *r)
{
    return r->pos;
}

/* Room for 'k' features in the row scratch. Returns 0 or -1. */
static int row_reserve(ps_sparse_reader *r, size_t k)
{
    return grow_features(&r->rf, &r->rid, &r->rv, &r->rcap, k, 64);
}

/* Parses a plain decimal uint64 (digits only, no sign, no overflow) from
 * s[0..len). Returns 0 or -1. */
static int parse_u64(const char *s, size_t len, uint64_t *out)
{
    if (len == 0) return -1;
    uint64_t v = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9') return -1;
        uint64_t d = (uint64_t)(s[i] - '0');
        if (v > (UINT64_MAX - d) / 10) return -1;
        v = v * 10 + d;
    }
    *out = v;
    return 0;
}

/* Parses a finite float that fills the NUL-terminated 's'. Returns 0 or -1. */
static int parse_float(const char *s, double *out)
{
    char *end;
    errno = 0;
    double d = strtod(s, &end);
    if (end == s || *end != '\0' || !isfinite(d) || errno == ERANGE) return -1;
    *out = d;
    return 0;
}

#define TOKEN_SHOWN 40 /* bad tokens are quoted up to this many bytes */

/* One libsvm line (NUL-terminated, '\r' already stripped) into r's row
 * scratch. Returns the feature count, -2 for a blank line, -1 on error. */
static int parse_libsvm(ps_sparse_reader *r, char *s, float *label, char *err, size_t errlen)
{
    char w[600];
    size_t k = 0;
    int have_label = 0;
    while (*s) {
        while (*s == ' ' || *s == '\t') s++;
        if (*s == '\0') break;
        char *tok = s;
        while (*s && *s != ' ' && *s != '\t') s++;
        if (*s) *s++ = '\0';
        if (!have_label) {
            double y;
            if (parse_float(tok, &y) != 0 || (y != 0.0 && y != 1.0 && y != -1.0)) {
                seterr(err, errlen, "%s: bad label '%.*s' (expected 0, 1, -1 or +1)",
                       where(r, w, sizeof(w)), TOKEN_SHOWN, tok);
                return -1;
            }
            *label = y > 0 ? 1.0f : 0.0f;
            have_label = 1;
            continue;
        }
        char *colon = strchr(tok, ':');
        size_t idlen = colon ? (size_t)(colon - tok) : strlen(tok);
        uint64_t id;
        double v = 1.0;
        if (parse_u64(tok, idlen, &id) != 0) {
            seterr(err, errlen, "%s: bad feature id in '%.*s' (expected a decimal 0..2^64-1)",
                   where(r, w, sizeof(w)), TOKEN_SHOWN, tok);
            return -1;
        }
        if (colon && parse_float(colon + 1, &v) != 0) {
            seterr(err, errlen, "%s: bad feature value in '%.*s' (expected a finite number)",
                   where(r, w, sizeof(w)), TOKEN_SHOWN, tok);
            return -1;
        }
        if (row_reserve(r, k + 1) != 0) {
            seterr(err, errlen, "%s: out of memory", where(r, w, sizeof(w)));
            return -1;
        }
        r->rf[k] = r->o.field_bits ? (uint32_t)(id >> (64 - r->o.field_bits)) : 0;
        r->rid[k] = id;
        r->rv[k] = (float)v;
        k++;
    }
    return have_label ? (int)k : -2;
}

/* One Criteo line (label, 13 integers, 26 hex categoricals, tab-separated;
 * empty = missing) into r's row scratch and 'dense'. Returns the feature
 * count, -2 for a blank line, -1 on error. */
static int parse_criteo(ps_sparse_reader *r, char *s, float *label, float *dense, char *err,
                        size_t errlen)
{
    char w[600];
    if (*s == '\0') return -2;
    if (row_reserve(r, PS_CRITEO_FIELDS) != 0) {
        seterr(err, errlen, "%s: out of memory", where(r, w, sizeof(w)));
        return -1;
    }
    char *col[1 + PS_CRITEO_FIELDS];
    int ncol = 0;
    for (char *p = s;;) {
        char *tab = strchr(p, '\t');
        if (ncol < 1 + PS_CRITEO_FIELDS) col[ncol] = p;
        ncol++;
        if (tab == NULL) break;
        *tab = '\0';
        p = tab + 1;
    }
    if (ncol != 1 + PS_CRITEO_FIELDS) {
        seterr(err, errlen, "%s: %d tab-separated columns, expected %d (label, %d integers, %d "
                            "categoricals)",
               where(r, w, sizeof(w)), ncol, 1 + PS_CRITEO_FIELDS, PS_CRITEO_INTS, PS_CRITEO_CATS);
        return -1;
    }
    if (strcmp(col[0], "0") != 0 && strcmp(col[0], "1") != 0) {
        seterr(err, errlen, "%s: bad label '%.*s' (expected 0 or 1)", where(r, w, sizeof(w)),
               TOKEN_SHOWN, col[0]);
        return -1;
    }
    *label = col[0][0] == '1' ? 1.0f : 0.0f;
    for (int f = 0; f < PS_CRITEO_INTS; f++) {
        const char *t = col[1 + f];
        int missing = *t == '\0';
        long long v = 0;
        if (!missing) {
            char *end;
            errno = 0;
            v = strtoll(t, &end, 10);
            if (errno || *end != '\0' || !((*t >= '0' && *t <= '9') || *t == '-')) {
                seterr(err, errlen, "%s: bad integer feature I%d '%.*s'", where(r, w, sizeof(w)),
                       f + 1, TOKEN_SHOWN, t);
                return -1;
            }
        }
        r->rf[f] = (uint32_t)f;
        r->rid[f] = ps_sparse_id_u64((uint32_t)f, ps_criteo_bucket(v, missing));
        r->rv[f] = 1.0f;
        if (dense) dense[f] = (float)log1p(v > 0 ? (double)v : 0.0);
    }
    for (int c = 0; c < PS_CRITEO_CATS; c++) {
        const char *t = col[1 + PS_CRITEO_INTS + c];
        size_t len = strlen(t);
        if (len > 16 || strspn(t, "0123456789abcdefABCDEF") != len) {
            seterr(err, errlen, "%s: bad categorical feature C%d '%.*s' (expected up to 16 hex "
                                "digits or empty)",
                   where(r, w, sizeof(w)), c + 1, TOKEN_SHOWN, t);
            return -1;
        }
        uint64_t v = len ? strtoull(t, NULL, 16) : 0;
        uint32_t f = (uint32_t)(PS_CRITEO_INTS + c);
        r->rf[f] = f;
        /* Missing categoricals get their own id per field, apart from value 0. */
        r->rid[f] = len ? ps_sparse_id_u64(f, v) : ps_sparse_id(f, "", 0);
        r->rv[f] = 1.0f;
    }
    return PS_CRITEO_FIELDS;
}

int ps_sparse_read(ps_sparse_reader *r, ps_sparse_batch *b, int max_rows, char *err,
                   size_t errlen)
{
    if (r->failed || max_rows < 1) {
        seterr(err, errlen, "%s: %s", r->path,
               r->failed ? "reader failed earlier" : "max rows must be >= 1");
        return -1;
    }
    int want_dense = r->o.format == PS_SPARSE_CRITEO && r->o.criteo_dense;
    if (b->ndense != (want_dense ? PS_CRITEO_INTS : 0)) {
        /* The dense array is sized by ndense: start over with new arrays. */
        ps_sparse_batch_free(b);
        b->ndense = want_dense ? PS_CRITEO_INTS : 0;
    }
    ps_sparse_batch_clear(b);
    float dense[PS_CRITEO_INTS];
    while (b->n < max_rows) {
        if (r->o.end != 0 && r->pos >= r->o.end) break;
        char *line;
        size_t len;
        uint64_t at;
        int got = next_line(r, &line, &len, &at, err, errlen);
        if (got < 0) goto fail;
        if (got == 0) break;
        r->line++;
        if (len > 0 && line[len - 1] == '\r') line[--len] = '\0';
        float label = 0;
        int k = r->o.format == PS_SPARSE_LIBSVM
                    ? parse_libsvm(r, line, &label, err, errlen)
                    : parse_criteo(r, line, &label, want_dense ? dense : NULL, err, errlen);
        if (k == -2) continue;
        if (k < 0) goto fail;
        if (ps_sparse_batch_add(b, label, r->rf, r->rid, r->rv, (size_t)k, dense) != 0) {
            seterr(err, errlen, "%s: out of memory", r->path);
            goto fail;
        }
    }
    return b->n;
fail:
    r->failed = 1;
    return -1;
}

/* =========================== lines from memory =========================== */

ps_sparse_reader *ps_sparse_lines(const ps_sparse_opts *o, const char *name)
{
    ps_sparse_reader *r = calloc(1, sizeof(*r));
    if (r == NULL) return NULL;
    if (o) r->o = *o;
    r->path = strdup(name ? name : "line");
    if (r->path == NULL) {
        free(r);
        return NULL;
    }
    return r;
}

int ps_sparse_add_line(ps_sparse_reader *r, ps_sparse_batch *b, const char *line, size_t len,
                       char *err, size_t errlen)
{
    int want_dense = r->o.format == PS_SPARSE_CRITEO && r->o.criteo_dense;
    float dense[PS_CRITEO_INTS];
    if (b->n == 0 && b->ndense != (want_dense ? PS_CRITEO_INTS : 0)) {
        ps_sparse_batch_free(b);
        b->ndense = want_dense ? PS_CRITEO_INTS : 0;
    }
    if (len > PS_SPARSE_MAX_LINE || memchr(line, '\n', len) || memchr(line, '\0', len)) {
        seterr(err, errlen, "%s: one line of at most %d bytes without NUL expected", r->path,
               PS_SPARSE_MAX_LINE);
        return -1;
    }
    char *s = malloc(len + 1);
    if (s == NULL) {
        seterr(err, errlen, "%s: out of memory", r->path);
        return -1;
    }
    memcpy(s, line, len);
    s[len] = '\0';
    if (len > 0 && s[len - 1] == '\r') s[--len] = '\0';
    r->line++;
    float label = 0;
    int k = r->o.format == PS_SPARSE_LIBSVM
                ? parse_libsvm(r, s, &label, err, errlen)
                : parse_criteo(r, s, &label, want_dense ? dense : NULL, err, errlen);
    free(s);
    if (k == -2) {
        seterr(err, errlen, "%s: blank line (no label)", r->path);
        return -1;
    }
    if (k < 0) return -1;
    if (ps_sparse_batch_add(b, label, r->rf, r->rid, r->rv, (size_t)k, dense) != 0) {
        seterr(err, errlen, "%s: out of memory", r->path);
        return -1;
    }
    return 0;
}
