/* ps_embed_tool -- integration-test driver for libps embedding tables.
 *
 * Usage: ps_embed_tool ADDRS NAME DIM SHARDS CMD ...
 *   create "OPTS"                       psEmbedCreate (existing shards deleted first)
 *   pull IDSFILE OUTFILE [FMT]          psEmbedPull of the ids, rows written as float32
 *   push IDSFILE GRADFILE ITERS SLEEPMS [FMT] [sum]
 *                                       psEmbedPush of the rows ITERS times, then psDrain
 * IDSFILE holds little-endian uint64 ids, GRADFILE/OUTFILE float32 rows. Prints one JSON
 * object (ok, shard keys, stats). Exit codes: 0 ok, 2 library error, 3 usage.
 * Environment: PS_WAIT_REPLICAS n, PS_WAIT_TIMEOUT_MS ms and PS_DURABILITY
 * degrade|block|fail set the client's durability options. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "redis-ps/ps.h"

static void *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    char *buf;
    long n;
    if (f == NULL) return NULL;
    fseek(f, 0, SEEK_END);
    n = ftell(f);
    fseek(f, 0, SEEK_SET);
    buf = malloc(n > 0 ? (size_t)n : 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) n = -1;
    fclose(f);
    *len = n > 0 ? (size_t)n : 0;
    return buf;
}

static psWireFormat fmt_of(const char *s) {
    return !strcmp(s, "F16") ? PS_WIRE_F16 : !strcmp(s, "BF16") ? PS_WIRE_BF16 : PS_WIRE_F32;
}

static void report(psClient *c, psEmbed *e, int nshards, int ok) {
    printf("{\"ok\": %s, \"err\": %d, \"error\": \"", ok ? "true" : "false", c->err);
    for (const char *s = c->errstr; *s; s++)
        if (*s != '"' && *s != '\\') putchar(*s);
    printf("\", \"keys\": [");
    for (int s = 0; s < nshards; s++) printf("%s\"%s\"", s ? ", " : "", psEmbedShardKey(e, s));
    printf("], \"stats\": {\"rows_pulled\": %llu, \"rows_pushed\": %llu, \"retries\": %llu, "
           "\"reconnects\": %llu, \"push_errors\": %llu, \"pulls\": %llu, "
           "\"wait_short\": %llu, \"unreplicated_pushes\": %llu}}\n",
           (unsigned long long)c->stats.rows_pulled, (unsigned long long)c->stats.rows_pushed,
           (unsigned long long)c->stats.retries, (unsigned long long)c->stats.reconnects,
           (unsigned long long)c->stats.push_errors, (unsigned long long)c->stats.pulls,
           (unsigned long long)c->stats.wait_short,
           (unsigned long long)c->stats.unreplicated_pushes);
}

int main(int argc, char **argv) {
    psOptions opt = {0};
    psClient *c;
    psEmbed *e;
    int dim, nshards, ok = 1;
    const char *cmd;
    if (argc < 6) {
        fprintf(stderr, "usage: ps_embed_tool ADDRS NAME DIM SHARDS create|pull|push ...\n");
        return 3;
    }
    signal(SIGPIPE, SIG_IGN);
    dim = atoi(argv[3]);
    nshards = atoi(argv[4]);
    cmd = argv[5];
    opt.backoff_ms = 5;
    opt.push_window = 2;
    if (getenv("PS_WAIT_REPLICAS")) opt.wait_replicas = atoi(getenv("PS_WAIT_REPLICAS"));
    if (getenv("PS_WAIT_TIMEOUT_MS")) opt.wait_timeout_ms = atoi(getenv("PS_WAIT_TIMEOUT_MS"));
    if (getenv("PS_DURABILITY")) {
        const char *p = getenv("PS_DURABILITY");
        opt.durability_policy = !strcmp(p, "block") ? PS_DURABILITY_BLOCK
                                : !strcmp(p, "fail") ? PS_DURABILITY_FAIL
                                                     : PS_DURABILITY_DEGRADE;
    }
    c = psConnect(argv[1], &opt);
    e = psEmbedNew(argv[2], dim, nshards);
    if (c == NULL || e == NULL) return 2;
    if (c->err) ok = 0;
    else if (!strcmp(cmd, "create") && argc >= 7) {
        ok = psEmbedDelete(c, e) != PS_ERR && psEmbedCreate(c, e, argv[6], 0) == nshards;
    } else if (!strcmp(cmd, "pull") && argc >= 8) {
        size_t il;
        uint64_t *ids = slurp(argv[6], &il);
        size_t n = il / 8;
        float *dst = malloc(n * (size_t)dim * sizeof(float) + 1);
        if (argc >= 9) psEmbedSetPullFormat(e, fmt_of(argv[8]));
        ok = ids && dst && psEmbedPull(c, e, ids, n, dst) == PS_OK;
        if (ok) {
            FILE *f = fopen(argv[7], "wb");
            ok = f && fwrite(dst, sizeof(float), n * (size_t)dim, f) == n * (size_t)dim;
            if (f) fclose(f);
        }
        free(ids);
        free(dst);
    } else if (!strcmp(cmd, "push") && argc >= 10) {
        size_t il, gl;
        uint64_t *ids = slurp(argv[6], &il);
        float *g = slurp(argv[7], &gl);
        long iters = atol(argv[8]), ms = atol(argv[9]);
        int flags = argc >= 12 && !strcmp(argv[11], "sum") ? PS_EMBED_SUM_DUPLICATES : 0;
        if (argc >= 11) psEmbedSetPushFormat(e, fmt_of(argv[10]));
        ok = ids && g && gl == il / 8 * (size_t)dim * sizeof(float);
        for (long i = 0; ok && i < iters; i++) {
            struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
            ok = psEmbedPush(c, e, ids, il / 8, g, flags) == PS_OK;
            if (ms) nanosleep(&ts, NULL);
        }
        if (ok) ok = psDrain(c) == PS_OK;
        free(ids);
        free(g);
    } else {
        fprintf(stderr, "ps_embed_tool: bad command\n");
        return 3;
    }
    report(c, e, nshards, ok);
    psEmbedFree(e);
    psClientFree(c);
    return ok ? 0 : 2;
}
