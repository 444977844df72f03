/* export.h -- ps-export's pieces (tools/):
 *   ps-export.c    the command line, the pass loop, progress (the design notes)
 *   export_redis.c the Redis target: pages in MULTI/EXEC, progress in P{T}:meta
 *   export_file.c  the file target: .psx files and the manifest
 *   export_util.c  the stop flag (SIGTERM), the clock, errors */
#ifndef PS_EXPORT_H
#define PS_EXPORT_H

#include <signal.h>
#include <stdint.h>
#include <stdio.h>

#include <redis-ps/ps.h>

#define EX_MAX_KEYS 256
#define EX_MAX_SHARDS 1024
#define EX_DEFAULT_COUNT 1024
#define EX_SWEEP_COUNT 1000

typedef struct Opts {
    const char *source, *target, *out_dir, *prefix, *table;
    const char *keys[EX_MAX_KEYS];
    int nkeys, shards;
    long every_ms, passes;
    uint64_t count;
    int log_json, quiet;
} Opts;

/* One exported table: its source shard keys and where it goes. */
typedef struct Table {
    char name[256];
    int nshards, dim;
    char **keys;             /* source shard keys */
    char rows[300], meta[300]; /* target keys (Redis target) */
    uint64_t *version;       /* per shard: complete as of (files: from the manifest) */
    char **files;            /* file target: the manifest's files, in order */
    size_t nfiles;
} Table;

/* What one pass of one shard did. */
typedef struct PassStats {
    uint64_t since, version, rows, gone, pages;
    int base, resumed;
    double ms;
} PassStats;

/* export_util.c */
extern volatile sig_atomic_t Stop;     /* set by SIGTERM / SIGINT */
void on_signal(int sig);
double now_ms(void);
/* Prints "ps-export: what: <c's error, or errno's>"; returns -1. */
int fail(const char *what, const psClient *c);

/* export_redis.c: one pass of shard 's' of 't' into the Redis target; the
 * target's meta fields (dim, format, shards). 0 or -1 (printed). */
int pass_redis(const Opts *o, psClient *src, psClient *tgt, Table *t, int s, PassStats *ps);
int init_meta(psClient *tgt, const Table *t);

/* export_file.c: one pass of shard 's' of 't' into --out-dir; the
 * manifest's files and versions read into 't'. 0 or -1 (printed). */
int pass_file(const Opts *o, psClient *src, Table *t, int s, PassStats *ps);
int load_manifest(const Opts *o, Table *t);

#endif
