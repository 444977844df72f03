/* data.c -- IDX (plain or gzip) and CSV dataset readers.
 *
 * Input files are treated as untrusted: every header size is checked
 * against the PS_DATA_MAX_* limits (and, for plain files, against the file
 * size) before memory is allocated, and every read is checked for short
 * data.  Pure core: no Redis, no sockets, no exit(). */

#include "data.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#define IDX_MAGIC_IMAGES 0x00000803u /* unsigned byte, 3 dimensions */
#define IDX_MAGIC_LABELS 0x00000801u /* unsigned byte, 1 dimension */
#define IDX_CHUNK (64 * 1024)        /* bytes converted per read */

/* ============================== helpers =================================== */

/* Formats a message into 'err' (when it is non-NULL and 'errlen' > 0). */
static void data_seterr(char *err, size_t errlen, const char *fmt, ...)
{
    if (err == NULL || errlen == 0) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

void ps_dataset_free(ps_dataset *ds)
{
    if (ds == NULL) return;
    free(ds->x);
    free(ds->y);
    memset(ds, 0, sizeof(*ds));
}

/* ================================= IDX ==================================== */

/* One open IDX file: the gzip stream (which also reads plain files), the
 * on-disk size and whether the content turned out to be uncompressed. */
typedef struct idx_file {
    gzFile gz;
    const char *path;
    off_t disk_size;
    uint32_t dims[3];
    int ndims;
} idx_file;

/* Opens 'path' for reading through zlib.  Returns 0, or -1 with a message. */
static int idx_open(idx_file *f, const char *path, char *err, size_t errlen)
{
    memset(f, 0, sizeof(*f));
    f->path = path;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        data_seterr(err, errlen, "%s: %s", path, strerror(errno));
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        data_seterr(err, errlen, "%s: not a regular file", path);
        close(fd);
        return -1;
    }
    f->disk_size = st.st_size;
    f->gz = gzdopen(fd, "rb");
    if (f->gz == NULL) {
        data_seterr(err, errlen, "%s: cannot open gzip stream (out of memory)", path);
        close(fd);
        return -1;
    }
    gzbuffer(f->gz, 256 * 1024);
    return 0;
}

static void idx_close(idx_file *f)
{
    if (f->gz) gzclose(f->gz);
    f->gz = NULL;
}

/* Reads exactly 'len' bytes.  Returns 0, or -1 with a message naming 'what'
 * on an I/O or decompression error or when the file ends early. */
static int idx_read(idx_file *f, void *buf, size_t len, const char *what, char *err,
                    size_t errlen)
{
    unsigned char *p = buf;
    while (len > 0) {
        unsigned want = len > (1u << 30) ? (1u << 30) : (unsigned)len;
        int got = gzread(f->gz, p, want);
        if (got < 0) {
            int zerr;
            const char *msg = gzerror(f->gz, &zerr);
            data_seterr(err, errlen, "%s: error reading %s: %s", f->path, what,
                        zerr == Z_ERRNO ? strerror(errno) : msg);
            return -1;
        }
        if (got == 0) {
            data_seterr(err, errlen, "%s: truncated file (ends inside the %s)", f->path, what);
            return -1;
        }
        p += got;
        len -= (size_t)got;
    }
    return 0;
}

/* Reads and checks the header: the magic must be 'magic' (ubyte data, the
 * dimension count in its low byte), each dimension non-zero.  Returns 0, or
 * -1 with a message. */
static int idx_header(idx_file *f, uint32_t magic, char *err, size_t errlen)
{
    unsigned char h[4];
    if (idx_read(f, h, 4, "header", err, errlen) != 0) return -1;
    uint32_t got = ((uint32_t)h[0] << 24) | ((uint32_t)h[1] << 16) | ((uint32_t)h[2] << 8) | h[3];
    if (got != magic) {
        data_seterr(err, errlen, "%s: bad IDX magic 0x%08x, expected 0x%08x", f->path,
                    (unsigned)got, (unsigned)magic);
        return -1;
    }
    f->ndims = (int)(magic & 0xff);
    for (int i = 0; i < f->ndims; i++) {
        if (idx_read(f, h, 4, "header", err, errlen) != 0) return -1;
        f->dims[i] = ((uint32_t)h[0] << 24) | ((uint32_t)h[1] << 16) | ((uint32_t)h[2] << 8) | h[3];
        if (f->dims[i] == 0) {
            data_seterr(err, errlen, "%s: dimension %d is 0", f->path, i);
            return -1;
        }
    }
    return 0;
}

/* For an uncompressed file the size is known up front: checks it equals the
 * header plus 'payload' bytes, so a lying header allocates nothing.
 * Returns 0, or -1 with a message. */
static int idx_check_plain_size(idx_file *f, uint64_t payload, char *err, size_t errlen)
{
    if (!gzdirect(f->gz)) return 0;
    uint64_t expect = 4 + 4 * (uint64_t)f->ndims + payload;
    if ((uint64_t)f->disk_size < expect) {
        data_seterr(err, errlen, "%s: truncated file: header needs %llu bytes, file has %llu",
                    f->path, (unsigned long long)expect, (unsigned long long)f->disk_size);
        return -1;
    }
    if ((uint64_t)f->disk_size > expect) {
        data_seterr(err, errlen, "%s: %llu bytes of trailing data after the IDX payload",
                    f->path, (unsigned long long)((uint64_t)f->disk_size - expect));
        return -1;
    }
    return 0;
}

/* After the payload: the stream must be at its end.  Returns 0, or -1. */
static int idx_check_end(idx_file *f, char *err, size_t errlen)
{
    unsigned char extra;
    int got = gzread(f->gz, &extra, 1);
    if (got == 0) return 0;
    if (got > 0)
        data_seterr(err, errlen, "%s: trailing data after the IDX payload", f->path);
    else
        data_seterr(err, errlen, "%s: error reading past the payload: %s", f->path,
                    gzerror(f->gz, NULL));
    return -1;
}

int ps_dataset_load_idx(const char *images_path, const char *labels_path, ps_dataset *ds,
                        char *err, size_t errlen)
{
    idx_file fi, fl;
    unsigned char *buf = NULL;
    memset(ds, 0, sizeof(*ds));
    memset(&fl, 0, sizeof(fl));
    if (idx_open(&fi, images_path, err, errlen) != 0) return -1;
    if (idx_open(&fl, labels_path, err, errlen) != 0) goto fail;
    if (idx_header(&fi, IDX_MAGIC_IMAGES, err, errlen) != 0) goto fail;
    if (idx_header(&fl, IDX_MAGIC_LABELS, err, errlen) != 0) goto fail;

    uint64_t n = fi.dims[0], dim = (uint64_t)fi.dims[1] * fi.dims[2];
    if (fl.dims[0] != fi.dims[0]) {
        data_seterr(err, errlen, "count mismatch: %s has %llu images, %s has %llu labels",
                    images_path, (unsigned long long)n, labels_path,
                    (unsigned long long)fl.dims[0]);
        goto fail;
    }
    if (n > PS_DATA_MAX_SAMPLES || dim > PS_DATA_MAX_DIM || n * dim > PS_DATA_MAX_VALUES) {
        data_seterr(err, errlen, "%s: implausible size %llu x %u x %u (limits: %d samples, %d "
                    "features, %llu values)", images_path, (unsigned long long)n, fi.dims[1],
                    fi.dims[2], PS_DATA_MAX_SAMPLES, PS_DATA_MAX_DIM,
                    (unsigned long long)PS_DATA_MAX_VALUES);
        goto fail;
    }
    if (idx_check_plain_size(&fi, n * dim, err, errlen) != 0) goto fail;
    if (idx_check_plain_size(&fl, n, err, errlen) != 0) goto fail;

    size_t total = (size_t)(n * dim);
    ds->x = malloc(total * sizeof(float));
    ds->y = malloc((size_t)n * sizeof(int32_t));
    buf = malloc(IDX_CHUNK);
    if (ds->x == NULL || ds->y == NULL || buf == NULL) {
        data_seterr(err, errlen, "out of memory for %llu x %llu samples", (unsigned long long)n,
                    (unsigned long long)dim);
        goto fail;
    }

    for (size_t done = 0; done < total;) {
        size_t len = total - done < IDX_CHUNK ? total - done : IDX_CHUNK;
        if (idx_read(&fi, buf, len, "image data", err, errlen) != 0) goto fail;
        for (size_t i = 0; i < len; i++) ds->x[done + i] = (float)buf[i] / 255.0f;
        done += len;
    }
    if (idx_check_end(&fi, err, errlen) != 0) goto fail;

    int maxlabel = 0;
    for (size_t done = 0; done < n;) {
        size_t len = n - done < IDX_CHUNK ? n - done : IDX_CHUNK;
        if (idx_read(&fl, buf, len, "label data", err, errlen) != 0) goto fail;
        for (size_t i = 0; i < len; i++) {
            ds->y[done + i] = buf[i];
            if (buf[i] > maxlabel) maxlabel = buf[i];
        }
        done += len;
    }
    if (idx_check_end(&fl, err, errlen) != 0) goto fail;

    free(buf);
    idx_close(&fi);
    idx_close(&fl);
    ds->n = (int)n;
    ds->dim = (int)dim;
    ds->nclasses = maxlabel + 1;
    return 0;

fail:
    free(buf);
    idx_close(&fi);
    idx_close(&fl);
    ps_dataset_free(ds);
    return -1;
}

int ps_dataset_fashion_mnist(const char *dir, int train, ps_dataset *ds, char *err, size_t errlen)
{
    char images[4096], labels[4096];
    const char *split = train ? "train" : "t10k";
    if (dir == NULL) dir = PS_FASHION_MNIST_DIR;
    int a = snprintf(images, sizeof(images), "%s/%s-images-idx3-ubyte.gz", dir, split);
    int b = snprintf(labels, sizeof(labels), "%s/%s-labels-idx1-ubyte.gz", dir, split);
    if (a < 0 || b < 0 || (size_t)a >= sizeof(images) || (size_t)b >= sizeof(labels)) {
        memset(ds, 0, sizeof(*ds));
        data_seterr(err, errlen, "dataset directory path too long");
        return -1;
    }
    return ps_dataset_load_idx(images, labels, ds, err, errlen);
}

/* ================================= CSV ==================================== */

/* Trims blanks at both ends of [*s, *e) in place. */
static void csv_trim(const char **s, const char **e)
{
    while (*s < *e && (**s == ' ' || **s == '\t')) (*s)++;
    while (*e > *s && ((*e)[-1] == ' ' || (*e)[-1] == '\t')) (*e)--;
}

/* Parses the cell [s, e) as a finite number.  Returns 0 and sets *out, or -1
 * when the cell is empty, not entirely a number, or not finite. */
static int csv_number(const char *s, const char *e, double *out)
{
    char tmp[128];
    csv_trim(&s, &e);
    size_t len = (size_t)(e - s);
    if (len == 0 || len >= sizeof(tmp)) return -1;
    memcpy(tmp, s, len);
    tmp[len] = '\0';
    char *end;
    errno = 0;
    double v = strtod(tmp, &end);
    if (end != tmp + len || !isfinite(v)) return -1;
    *out = v;
    return 0;
}

/* Returns 1 when every comma-separated cell of 'line' is a number. */
static int csv_all_numeric(const char *line)
{
    const char *s = line;
    for (;;) {
        const char *e = strchr(s, ',');
        const char *end = e ? e : s + strlen(s);
        double v;
        if (csv_number(s, end, &v) != 0) return 0;
        if (e == NULL) return 1;
        s = e + 1;
    }
}

/* Returns the number of comma-separated cells of 'line'. */
static int csv_columns(const char *line)
{
    long n = 1;
    for (const char *p = line; *p; p++)
        if (*p == ',' && n < PS_DATA_MAX_DIM + 2) n++;
    return (int)n;
}

/* Growable storage of the rows read so far. */
typedef struct csv_rows {
    size_t cap;  /* rows allocated */
    float *x;
    int32_t *y;
} csv_rows;

/* Makes room for row index 'n' of 'dim' floats.  Returns 0, or -1. */
static int csv_reserve(csv_rows *r, size_t n, size_t dim)
{
    if (n < r->cap) return 0;
    size_t cap = r->cap ? r->cap * 2 : 1024;
    if (cap > PS_DATA_MAX_SAMPLES) cap = PS_DATA_MAX_SAMPLES;
    if (cap <= n || (uint64_t)cap * dim > PS_DATA_MAX_VALUES) {
        cap = n + 1;
        if ((uint64_t)cap * dim > PS_DATA_MAX_VALUES) return -1;
    }
    float *x = realloc(r->x, cap * dim * sizeof(float));
    if (x == NULL) return -1;
    r->x = x;
    int32_t *y = realloc(r->y, cap * sizeof(int32_t));
    if (y == NULL) return -1;
    r->y = y;
    r->cap = cap;
    return 0;
}

int ps_dataset_load_csv(const char *path, int label_col, ps_dataset *ds, char *err, size_t errlen)
{
    memset(ds, 0, sizeof(*ds));
    FILE *fp = fopen(path, "r");
    if (fp == NULL) {
        data_seterr(err, errlen, "%s: %s", path, strerror(errno));
        return -1;
    }
    char *line = NULL;
    size_t linecap = 0;
    ssize_t len;
    long lineno = 0, firstline = 0;
    int ncols = 0, lc = 0, maxlabel = 0;
    size_t n = 0, dim = 0;
    csv_rows rows = {0, NULL, NULL};

    while ((len = getline(&line, &linecap, fp)) >= 0) {
        lineno++;
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = '\0';
        if ((size_t)len != strlen(line)) {
            data_seterr(err, errlen, "%s:%ld: NUL byte in line", path, lineno);
            goto fail;
        }
        const char *p = line;
        while (*p == ' ' || *p == '\t') p++;
        if (*p == '\0') continue; /* blank line */

        int cols = csv_columns(line);
        if (ncols == 0) {
            /* First non-blank line: fixes the column count; a header if not numeric. */
            ncols = cols;
            firstline = lineno;
            if (ncols < 2) {
                data_seterr(err, errlen, "%s:%ld: need at least 2 columns (label and a feature)",
                            path, lineno);
                goto fail;
            }
            if (ncols - 1 > PS_DATA_MAX_DIM) {
                data_seterr(err, errlen, "%s:%ld: too many columns (limit %d)", path, lineno,
                            PS_DATA_MAX_DIM + 1);
                goto fail;
            }
            lc = label_col < 0 ? ncols + label_col : label_col;
            if (lc < 0 || lc >= ncols) {
                data_seterr(err, errlen, "%s:%ld: label column %d out of range (%d columns)",
                            path, lineno, label_col, ncols);
                goto fail;
            }
            dim = (size_t)ncols - 1;
            if (!csv_all_numeric(line)) continue; /* header */
        } else if (cols != ncols) {
            data_seterr(err, errlen, "%s:%ld: row has %d columns, expected %d (as line %ld)", path,
                        lineno, cols, ncols, firstline);
            goto fail;
        }

        if (n >= PS_DATA_MAX_SAMPLES || csv_reserve(&rows, n, dim) != 0) {
            data_seterr(err, errlen, "%s:%ld: too many rows or out of memory", path, lineno);
            goto fail;
        }
        float *xr = rows.x + n * dim;
        const char *s = line;
        for (int c = 0; c < ncols; c++) {
            const char *e = strchr(s, ',');
            const char *end = e ? e : s + strlen(s);
            double v;
            if (csv_number(s, end, &v) != 0) {
                const char *ts = s, *te = end;
                csv_trim(&ts, &te);
                int show = te - ts > 40 ? 40 : (int)(te - ts);
                data_seterr(err, errlen, "%s:%ld: column %d: '%.*s%s' is not a number", path,
                            lineno, c + 1, show, ts, te - ts > 40 ? "..." : "");
                goto fail;
            }
            if (c == lc) {
                if (v < 0 || v >= PS_DATA_MAX_CLASSES || v != floor(v)) {
                    data_seterr(err, errlen, "%s:%ld: label %g in column %d is not an integer "
                                "class 0..%d", path, lineno, v, c + 1, PS_DATA_MAX_CLASSES - 1);
                    goto fail;
                }
                rows.y[n] = (int32_t)v;
                if ((int)v > maxlabel) maxlabel = (int)v;
            } else {
                *xr++ = (float)v;
            }
            s = e ? e + 1 : end;
        }
        n++;
    }
    if (ferror(fp)) {
        data_seterr(err, errlen, "%s:%ld: read error: %s", path, lineno + 1, strerror(errno));
        goto fail;
    }
    if (n == 0) {
        data_seterr(err, errlen, "%s: no data rows", path);
        goto fail;
    }
    free(line);
    fclose(fp);
    ds->n = (int)n;
    ds->dim = (int)dim;
    ds->nclasses = maxlabel + 1;
    ds->x = rows.x;
    ds->y = rows.y;
    /* Give back the unused tail of the doubling buffers (best effort). */
    float *x = realloc(ds->x, n * dim * sizeof(float));
    if (x) ds->x = x;
    int32_t *y = realloc(ds->y, n * sizeof(int32_t));
    if (y) ds->y = y;
    return 0;

fail:
    free(line);
    fclose(fp);
    free(rows.x);
    free(rows.y);
    return -1;
}
