/* ps-export -- base + delta export of embedding tables into a serving store
 * (another Redis, or files), with tombstones and resumable after its own
 * crash (docs/operations.md "Exporting to a serving store", docs/design.md
 * "Tombstones and incremental export").
 *
 *   ps-export --source ADDRS (--table NAME --shards N | --key KEY ...)
 *             (--target ADDRS [--prefix P] | --out-dir DIR)
 *             [--every-ms MS] [--passes N] [--count N] [--log-json] [--quiet]
 *
 * Credentials: PS_USER / PS_PASSWORD (the source's, as for every libps
 * program), PS_TARGET_USER / PS_TARGET_PASSWORD (the target's; none when
 * unset).
 *
 * Per source shard, a pass reads PS.TOMBSTONES since the version the target
 * is complete at (the rows removed since), then PS.SCANROWS SINCE ... GONE
 * (the rows changed since, as F16, and the rows dead by TTL), and leaves the
 * target complete as of the version the pass's first page answered. When the
 * source answers REBASE (the tombstone log's horizon passed that version, or
 * the target holds nothing yet) the pass is a base: every row, then the rows
 * of the shard the target holds but the base did not answer are deleted.
 *
 * Redis target (one table = two keys in one hash slot):
 *   P{T}:rows  hash: field = decimal row id, value = dim little-endian F16
 *   P{T}:meta  hash: dim, format (f16), shards, and per shard s:
 *              version:s  the table version the target is complete at (0: none)
 *              state:s    "phase cursor since start" of a pass in progress
 * Every page's deletes, rows and the shard's state:s go in one MULTI/EXEC, so
 * a crash leaves the target at a page boundary with the state to go on from;
 * a crashed base is restarted (its list of answered ids was in memory).
 *
 * File target (--out-dir): a pass of shard s writes T.s<s>.<base|delta>.
 * <from>-<to>.psx (records, see write_record), fsynced and renamed into
 * place, then T.manifest (the files in order and each shard's version) is
 * rewritten the same way: a crash before the manifest's rename loses that
 * pass only, which the next run does again.
 *
 * Exit codes: 0 ok, 1 failure, 2 usage. */

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

static void die_usage(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "ps-export: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, " (ps-export --help)\n");
    va_end(ap);
    exit(2);
}

static void usage(FILE *out) {
    fprintf(out,
            "usage: ps-export --source ADDRS (--table NAME --shards N | --key KEY ...)\n"
            "                 (--target ADDRS [--prefix P] | --out-dir DIR)\n"
            "                 [--every-ms MS] [--passes N] [--count N] [--log-json] [--quiet]\n"
            "Exports the rows of embedding tables changed since the last export (as F16) and\n"
            "deletes the rows removed meanwhile (tombstones), into another Redis or files.\n"
            "  --source ADDRS   the training servers (host:port[,host:port...]; a replica will do)\n"
            "  --table NAME     a sharded table (ps-train's is JOB:emb) of --shards N shards\n"
            "  --key KEY        a table key (repeatable; each exported as its own table)\n"
            "  --target ADDRS   the serving Redis: P{T}:rows (id -> F16 row) and P{T}:meta\n"
            "  --prefix P       key prefix on the target (ps:export:)\n"
            "  --out-dir DIR    files instead: T.s<s>.<base|delta>.<from>-<to>.psx and T.manifest\n"
            "  --every-ms MS    export continuously, a pass every MS ms (until SIGTERM)\n"
            "  --passes N       stop after N passes (1 without --every-ms; 0: no limit); a pass\n"
            "                   resumed from a crashed run is finished first and does not count\n"
            "  --count N        index buckets / log entries per page (1024, at most %u)\n"
            "  --log-json       one JSON object per pass and a summary on stdout\n"
            "  --quiet          no progress lines\n"
            "Credentials: PS_USER / PS_PASSWORD for the source, PS_TARGET_USER /\n"
            "PS_TARGET_PASSWORD for the target (none when unset).\n",
            PS_SCAN_MAX_COUNT);
}

static long parse_long(const char *flag, const char *v, long lo, long hi) {
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || *end || end == v || x < lo || x > hi)
        die_usage("%s: '%s' is not an integer in [%ld, %ld]", flag, v, lo, hi);
    return x;
}

static void parse_opts(int argc, char **argv, Opts *o) {
    memset(o, 0, sizeof(*o));
    o->prefix = "ps:export:";
    o->count = EX_DEFAULT_COUNT;
    o->passes = -1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            exit(0);
        }
        if (!strcmp(a, "--log-json")) {
            o->log_json = 1;
            continue;
        }
        if (!strcmp(a, "--quiet")) {
            o->quiet = 1;
            continue;
        }
        if (i + 1 >= argc) die_usage("%s needs a value", a);
        const char *v = argv[++i];
        if (!strcmp(a, "--source")) o->source = v;
        else if (!strcmp(a, "--target")) o->target = v;
        else if (!strcmp(a, "--out-dir")) o->out_dir = v;
        else if (!strcmp(a, "--prefix")) o->prefix = v;
        else if (!strcmp(a, "--table")) o->table = v;
        else if (!strcmp(a, "--shards")) o->shards = (int)parse_long(a, v, 1, EX_MAX_SHARDS);
        else if (!strcmp(a, "--every-ms")) o->every_ms = parse_long(a, v, 1, 86400000L);
        else if (!strcmp(a, "--passes")) o->passes = parse_long(a, v, 0, 1L << 40);
        else if (!strcmp(a, "--count")) o->count = (uint64_t)parse_long(a, v, 1, PS_SCAN_MAX_COUNT);
        else if (!strcmp(a, "--key")) {
            if (o->nkeys == EX_MAX_KEYS) die_usage("at most %d --key", EX_MAX_KEYS);
            o->keys[o->nkeys++] = v;
        } else die_usage("unknown option '%s'", a);
    }
    if (!o->source) die_usage("--source is required");
    if (!o->table == !o->nkeys) die_usage("give --table NAME --shards N, or --key KEY");
    if (o->table && !o->shards) die_usage("--table needs --shards (ps-train's --table-shards)");
    if (!o->target == !o->out_dir) die_usage("give --target ADDRS or --out-dir DIR");
    if (strlen(o->prefix) > 64) die_usage("--prefix: at most 64 bytes");
    if (o->passes < 0) o->passes = o->every_ms ? 0 : 1;
}

/* ------------------------------------------------------------------------
 * Progress
 * ---------------------------------------------------------------------- */

static void report_pass(const Opts *o, const Table *t, int s, const PassStats *p) {
    if (o->log_json) {
        printf("{\"event\":\"pass\",\"table\":\"%s\",\"shard\":%d,\"since\":%" PRIu64
               ",\"version\":%" PRIu64 ",\"base\":%d,\"resumed\":%d,\"rows\":%" PRIu64
               ",\"gone\":%" PRIu64 ",\"pages\":%" PRIu64 ",\"ms\":%.1f}\n",
               t->name, s, p->since, p->version, p->base, p->resumed, p->rows, p->gone, p->pages,
               p->ms);
        fflush(stdout);
    } else if (!o->quiet) {
        fprintf(stderr, "ps-export: %s shard %d: %s %" PRIu64 " -> %" PRIu64 ": %" PRIu64
                " rows written, %" PRIu64 " deleted, %" PRIu64 " pages, %.1f ms%s\n",
                t->name, s, p->base ? "base" : "delta since", p->since, p->version, p->rows, p->gone,
                p->pages, p->ms, p->resumed ? " (resumed)" : "");
    }
}


/* ------------------------------------------------------------------------
 * Main
 * ---------------------------------------------------------------------- */

static int setup_table(const Opts *o, psClient *src, Table *t, const char *name, char **keys,
                       int nshards) {
    memset(t, 0, sizeof(*t));
    snprintf(t->name, sizeof(t->name), "%s", name);
    t->nshards = nshards;
    t->keys = keys;
    snprintf(t->rows, sizeof(t->rows), "%s{%s}:rows", o->prefix, name);
    snprintf(t->meta, sizeof(t->meta), "%s{%s}:meta", o->prefix, name);
    t->version = calloc((size_t)nshards, sizeof(uint64_t));
    if (!t->version) return fail("out of memory", NULL);
    psKeyInfo ki;
    if (psInfo(src, keys[0], &ki) != PS_OK) return fail(keys[0], src);
    if (!ki.is_table) {
        fprintf(stderr, "ps-export: %s is not an embedding table\n", keys[0]);
        return -1;
    }
    t->dim = ki.dim;
    if (o->out_dir && strchr(name, '/')) {
        fprintf(stderr, "ps-export: table name '%s' has a '/': not a file name\n", name);
        return -1;
    }
    return 0;
}

int main(int argc, char **argv) {
    Opts o;
    parse_opts(argc, argv, &o);
    signal(SIGPIPE, SIG_IGN);
    struct sigaction sa = {0};
    sa.sa_handler = on_signal;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);

    psClient *src = psConnect(o.source, NULL);
    if (!src || src->err) return fail("source", src), psClientFree(src), 1;
    psClient *tgt = NULL;
    if (o.target) {
        /* The target's own credentials (PS_USER / PS_PASSWORD are the source's). */
        psOptions to = {0};
        to.user = getenv("PS_TARGET_USER") ? getenv("PS_TARGET_USER") : "";
        to.password = getenv("PS_TARGET_PASSWORD") ? getenv("PS_TARGET_PASSWORD") : "";
        tgt = psConnect(o.target, &to);
        if (!tgt || tgt->err) return fail("target", tgt), psClientFree(tgt), psClientFree(src), 1;
    } else if (mkdir(o.out_dir, 0755) != 0 && errno != EEXIST) {
        return fail(o.out_dir, NULL), psClientFree(src), 1;
    }

    int ntables = o.table ? 1 : o.nkeys, rc = 0;
    Table *tables = calloc((size_t)ntables, sizeof(Table));
    psEmbed *e = NULL;
    if (!tables) return fail("out of memory", NULL), 1;
    if (o.table) {
        e = psEmbedNew(o.table, 1, o.shards);
        char **keys = e ? calloc((size_t)o.shards, sizeof(char *)) : NULL;
        if (!keys) return fail("out of memory", NULL), 1;
        for (int s = 0; s < o.shards; s++) keys[s] = (char *)psEmbedShardKey(e, s);
        rc = setup_table(&o, src, &tables[0], o.table, keys, o.shards);
    } else {
        for (int i = 0; i < o.nkeys && rc == 0; i++)
            rc = setup_table(&o, src, &tables[i], o.keys[i], (char **)&o.keys[i], 1);
    }
    for (int i = 0; i < ntables && rc == 0; i++)
        rc = tgt ? init_meta(tgt, &tables[i]) : load_manifest(&o, &tables[i]);

    uint64_t passes = 0, rows = 0, gone = 0, bases = 0;
    while (rc == 0 && !Stop) {
        const double t0 = now_ms();
        for (int i = 0; i < ntables && rc == 0 && !Stop; i++)
            for (int s = 0; s < tables[i].nshards && rc == 0 && !Stop; s++) {
                /* A pass resumed from a crashed run completes the target as of
                 * that run's start: it is finished, then a pass of this run
                 * follows (it does not count as one of --passes). */
                PassStats p = {0};
                do {
                    rc = tgt ? pass_redis(&o, src, tgt, &tables[i], s, &p)
                             : pass_file(&o, src, &tables[i], s, &p);
                    if (rc == 0) {
                        report_pass(&o, &tables[i], s, &p);
                        rows += p.rows;
                        gone += p.gone;
                        bases += (uint64_t)p.base;
                    }
                } while (rc == 0 && p.resumed && !Stop);
            }
        if (rc != 0) break;
        passes++;
        if (o.passes && passes >= (uint64_t)o.passes) break;
        if (!o.every_ms) continue;
        /* Sleeps of at most 100 ms, so a SIGTERM is seen soon. */
        for (double left = o.every_ms - (now_ms() - t0); left > 0 && !Stop; left = o.every_ms - (now_ms() - t0))
            ps_sleep_ms(left > 100 ? 100 : (long)left + 1);
    }
    if (Stop && rc != 0) rc = 0; /* stopped mid-pass: the target holds its progress */
    if (o.log_json) {
        printf("{\"event\":\"done\",\"ok\":%s,\"passes\":%" PRIu64 ",\"rows\":%" PRIu64
               ",\"gone\":%" PRIu64 ",\"bases\":%" PRIu64 ",\"versions\":[",
               rc == 0 ? "true" : "false", passes, rows, gone, bases);
        const char *sep = "";
        for (int i = 0; i < ntables; i++)
            for (int s = 0; s < tables[i].nshards; s++) {
                printf("%s%" PRIu64, sep, tables[i].version ? tables[i].version[s] : 0);
                sep = ",";
            }
        printf("]}\n");
    } else if (!o.quiet) {
        fprintf(stderr, "ps-export: %s: %" PRIu64 " passes, %" PRIu64 " rows written, %" PRIu64
                " deleted\n", rc == 0 ? "done" : "FAILED", passes, rows, gone);
    }
    for (int i = 0; i < ntables; i++) {
        free(tables[i].version);
        for (size_t k = 0; k < tables[i].nfiles; k++) free(tables[i].files[k]);
        free(tables[i].files);
        if (o.table) free(tables[i].keys);
    }
    free(tables);
    psEmbedFree(e);
    psClientFree(tgt);
    psClientFree(src);
    return rc == 0 ? 0 : 1;
}
