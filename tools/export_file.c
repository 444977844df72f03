/* export_file.c -- ps-export (ps-export.c) into files: a pass is one .psx
 * file written, fsynced and renamed, then the manifest replaced the same
 * way. */

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <redis-ps/ps.h>

#include "clock.h"
#include "export.h"

/* ------------------------------------------------------------------------
 * The file target
 * ---------------------------------------------------------------------- */

/* A .psx file: a 33-byte header (the magic "PSX1", u32 dim, u32 format
 * (1 = F16), u32 shard, u64 from, u64 to, u8 base: 1 = the shard's rows are
 * these, drop what you hold of it), then records: 'G' u64 n, n ids (rows gone);
 * 'R' u64 n, n ids, n * dim F16 (rows); 'E' (the end). Little-endian. */
static int write_all(int fd, const void *p, size_t n) {
    const char *c = p;
    while (n) {
        ssize_t w = write(fd, c, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        c += w;
        n -= (size_t)w;
    }
    return 0;
}

static int write_record(int fd, char kind, const uint64_t *ids, size_t n, const void *vals, size_t vbytes) {
    uint64_t n64 = n;
    if (write_all(fd, &kind, 1) || write_all(fd, &n64, 8) || write_all(fd, ids, n * 8)) return -1;
    return vbytes ? write_all(fd, vals, vbytes) : 0;
}

/* Writes 'tmp' (already written) into 'path' durably: fsync, rename, fsync
 * of the directory. */
static int commit_file(int fd, const char *tmp, const char *path, const char *dir) {
    if (fsync(fd) != 0 || close(fd) != 0 || rename(tmp, path) != 0) return -1;
    int d = open(dir, O_RDONLY);
    if (d >= 0) {
        fsync(d);
        close(d);
    }
    return 0;
}

/* The manifest: "psx-manifest 1", "table T", "dim D", "shards N", one
 * "version s v" per shard, then one "file NAME" per file in order. */
static int save_manifest(const Opts *o, const Table *t) {
    char path[4096], tmp[4200];
    snprintf(path, sizeof(path), "%s/%s.manifest", o->out_dir, t->name);
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f) return fail(tmp, NULL);
    fprintf(f, "psx-manifest 1\ntable %s\ndim %d\nshards %d\n", t->name, t->dim, t->nshards);
    for (int s = 0; s < t->nshards; s++) fprintf(f, "version %d %" PRIu64 "\n", s, t->version[s]);
    for (size_t i = 0; i < t->nfiles; i++) fprintf(f, "file %s\n", t->files[i]);
    if (fflush(f) != 0) {
        fclose(f);
        return fail(tmp, NULL);
    }
    int fd = dup(fileno(f));
    fclose(f);
    if (fd < 0 || commit_file(fd, tmp, path, o->out_dir) != 0) return fail(path, NULL);
    return 0;
}

int load_manifest(const Opts *o, Table *t) {
    char path[4096], line[1024];
    snprintf(path, sizeof(path), "%s/%s.manifest", o->out_dir, t->name);
    FILE *f = fopen(path, "r");
    if (!f) return errno == ENOENT ? 0 : fail(path, NULL);
    int rc = 0;
    while (fgets(line, sizeof(line), f)) {
        line[strcspn(line, "\n")] = '\0';
        int s;
        unsigned long long v;
        if (sscanf(line, "version %d %llu", &s, &v) == 2 && s >= 0 && s < t->nshards) {
            t->version[s] = v;
        } else if (!strncmp(line, "file ", 5)) {
            char **nf = realloc(t->files, (t->nfiles + 1) * sizeof(char *));
            if (!nf || !(nf[t->nfiles] = strdup(line + 5))) {
                if (nf) t->files = nf;
                rc = fail("out of memory", NULL);
                break;
            }
            t->files = nf;
            t->nfiles++;
        }
    }
    fclose(f);
    return rc;
}

/* One pass of shard 's' into a file; the manifest names it once complete. */
int pass_file(const Opts *o, psClient *src, Table *t, int s, PassStats *ps) {
    memset(ps, 0, sizeof(*ps));
    const double t0 = now_ms();
    const char *key = t->keys[s];
    uint64_t since = t->version[s], start = 0, cursor = 0;
    const uint64_t asked = since; /* reported: what the pass started from */
    int base = since == 0, rc = 0;
    char tmp[4200], name[512], path[4800];
    snprintf(tmp, sizeof(tmp), "%s/.%s.s%d.partial", o->out_dir, t->name, s);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) return fail(tmp, NULL);
    unsigned char head[4 + 12 + 16 + 1] = {0};
    int tomb = !base;
    if (write_all(fd, head, sizeof(head)) != 0) rc = fail(tmp, NULL); /* filled in at the end */
    while (!Stop && rc == 0) {
        psScanPage pg;
        if (tomb) {
            if (psTableTombstones(src, key, cursor, since, o->count, &pg) != PS_OK) {
                psScanPageFree(&pg);
                if (src->err != PS_ERR_REBASE) {
                    rc = fail(key, src);
                    break;
                }
                /* Re-base: start the file again. */
                base = 1, tomb = 0, cursor = 0, start = 0, since = 0;
                ps->gone = 0;
                if (ftruncate(fd, (off_t)sizeof(head)) != 0 || lseek(fd, (off_t)sizeof(head), SEEK_SET) < 0) {
                    rc = fail(tmp, NULL);
                    break;
                }
                continue;
            }
            if (!start) start = pg.version;
            if (pg.ngone && write_record(fd, 'G', pg.gone, pg.ngone, NULL, 0) != 0) rc = fail(tmp, NULL);
            ps->gone += pg.ngone;
        } else {
            if (psTableScan(src, key, cursor, base ? 0 : since, o->count, PS_WIRE_F16, !base, &pg) != PS_OK) {
                psScanPageFree(&pg);
                rc = fail(key, src);
                break;
            }
            if (!start) start = pg.version;
            if (pg.ngone && write_record(fd, 'G', pg.gone, pg.ngone, NULL, 0) != 0) rc = fail(tmp, NULL);
            if (pg.nrows && write_record(fd, 'R', pg.ids, pg.nrows, pg.values, pg.value_bytes) != 0)
                rc = fail(tmp, NULL);
            ps->rows += pg.nrows;
            ps->gone += pg.ngone;
        }
        ps->pages++;
        cursor = pg.cursor;
        psScanPageFree(&pg);
        if (rc) break;
        if (!cursor) {
            if (!tomb) break;
            tomb = 0;
        }
    }
    if (rc == 0 && Stop) rc = -1;
    if (rc == 0) {
        /* The end record, then the header (its room was left at the start). */
        uint32_t dim = (uint32_t)t->dim, fmt = 1, shard = (uint32_t)s;
        memcpy(head, "PSX1", 4);
        memcpy(head + 4, &dim, 4);
        memcpy(head + 8, &fmt, 4);
        memcpy(head + 12, &shard, 4);
        memcpy(head + 16, &since, 8);
        memcpy(head + 24, &start, 8);
        head[32] = (unsigned char)base;
        if (write_all(fd, "E", 1) != 0 || pwrite(fd, head, sizeof(head), 0) != (ssize_t)sizeof(head))
            rc = fail(tmp, NULL);
    }
    snprintf(name, sizeof(name), "%s.s%d.%s.%" PRIu64 "-%" PRIu64 ".psx", t->name, s,
             base ? "base" : "delta", base ? 0 : since, start);
    snprintf(path, sizeof(path), "%s/%s", o->out_dir, name);
    if (rc == 0 && commit_file(fd, tmp, path, o->out_dir) != 0) rc = fail(path, NULL);
    else if (rc != 0) close(fd);
    if (rc == 0) {
        char **nf = realloc(t->files, (t->nfiles + 1) * sizeof(char *));
        if (!nf || !(nf[t->nfiles] = strdup(name))) return fail("out of memory", NULL);
        t->files = nf;
        t->nfiles++;
        const uint64_t old = t->version[s];
        t->version[s] = start;
        if ((rc = save_manifest(o, t)) != 0) t->version[s] = old;
    }
    ps->since = asked;
    ps->base = base;
    ps->version = start;
    ps->ms = now_ms() - t0;
    return rc;
}

