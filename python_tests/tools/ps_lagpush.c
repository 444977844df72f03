/* ps_lagpush -- integration-test driver: a libps worker pushing into a
 * ring-tracked tensor whose MAXLAG refuses pushes (BACKLOG) until the ring
 * has acknowledged a take (docs/commands.md "Ring commands").
 *
 * Usage: ps_lagpush ADDR [--job J] [--elems N] [--pushes P] [--maxlag L]
 *                        [--origin O]
 *
 * Defines a model of job J with one tensor "w" of N floats, deletes and
 * recreates it (INIT CONST 0 OPTIM SGD LR 1), turns ring tracking on for
 * every partition with PS.RING key TRACK O MAXLAG L, then pushes the
 * gradient 1 P times (libps IDs: exactly once) and drains. Whoever plays the
 * ring agent (the test) takes and acknowledges meanwhile; libps resends every
 * push refused BACKLOG after a backoff. At the end every value must be
 * exactly -P (a push lost or applied twice shows). Prints one JSON object.
 * Exit codes: 0 ok, 1 wrong values or failed pushes, 2 library error, 3 usage. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "redis-ps/ps.h"

static int fail(psClient *c, const char *what) {
    printf("{\"ok\": false, \"where\": \"%s\", \"error\": \"", what);
    for (const char *s = c ? c->errstr : "out of memory"; *s; s++)
        if (*s != '"' && *s != '\\') putchar(*s);
    printf("\"}\n");
    fprintf(stderr, "ps_lagpush: %s: %s\n", what, c ? c->errstr : "out of memory");
    return 2;
}

int main(int argc, char **argv) {
    const char *job = "lag", *origin = "g0";
    uint64_t elems = 8;
    long pushes = 40, maxlag = 4;
    psOptions opt = {0};
    int i;
    if (argc < 2 || argv[1][0] == '-') {
        fprintf(stderr, "usage: ps_lagpush ADDR [--job J] [--elems N] [--pushes P] [--maxlag L] "
                        "[--origin O]\n");
        return 3;
    }
    for (i = 2; i + 1 < argc; i += 2) {
        const char *k = argv[i], *v = argv[i + 1];
        if (!strcmp(k, "--job")) job = v;
        else if (!strcmp(k, "--elems")) elems = strtoull(v, NULL, 10);
        else if (!strcmp(k, "--pushes")) pushes = atol(v);
        else if (!strcmp(k, "--maxlag")) maxlag = atol(v);
        else if (!strcmp(k, "--origin")) origin = v;
        else { fprintf(stderr, "ps_lagpush: unknown flag %s\n", k); return 3; }
    }
    if (i != argc || elems < 1 || pushes < 0) {
        fprintf(stderr, "ps_lagpush: bad arguments\n");
        return 3;
    }
    opt.connect_timeout_ms = 1000;
    psClient *c = psConnect(argv[1], &opt);
    if (c == NULL || c->err) {
        int ret = fail(c, "connect");
        psClientFree(c);
        return ret;
    }
    psModel *m = psModelNew(job);
    uint64_t d[1] = {elems};
    if (psModelAddTensor(m, "w", 1, d) != 0) return fail(c, "shape");
    if (psModelLayout(c, m) != PS_OK) return fail(c, "layout");
    if (psModelDelete(c, m) < 0) return fail(c, "delete");
    if (psModelCreate(c, m, "INIT CONST 0 OPTIM SGD LR 1", 0) < 0) return fail(c, "create");
    const int parts = psModelNumPartitions(m, 0);
    for (int p = 0; p < parts; p++) {
        const char *key = psModelPartitionKey(m, 0, p);
        redisReply *r = psCommand(c, key, "PS.RING %s TRACK %s MAXLAG %ld", key, origin, maxlag);
        if (!r) return fail(c, "track");
        const int ok = r->type == REDIS_REPLY_INTEGER;
        if (!ok) fprintf(stderr, "ps_lagpush: TRACK %s: %s\n", key, r->str ? r->str : "?");
        freeReplyObject(r);
        if (!ok) return 2;
    }
    float *g = malloc(elems * sizeof(float)), *val = malloc(elems * sizeof(float));
    if (!g || !val) return fail(NULL, "oom");
    for (uint64_t e = 0; e < elems; e++) g[e] = 1.0f;
    long push_errors = 0, wrong = 0;
    for (long k = 0; k < pushes; k++) {
        const float *const gs[1] = {g};
        if (psModelPush(c, m, gs, NULL, 1.0f) != PS_OK) {
            push_errors++;
            fprintf(stderr, "push %ld: %s\n", k, c->errstr);
        }
    }
    if (psDrain(c) != PS_OK) {
        push_errors++;
        fprintf(stderr, "drain: %s\n", c->errstr);
    }
    float *dst[1] = {val};
    uint64_t vers[1];
    if (psModelPull(c, m, dst, vers) != PS_OK) return fail(c, "pull");
    for (uint64_t e = 0; e < elems; e++)
        if (val[e] != -(float)pushes) wrong++;
    printf("{\"ok\": %s, \"partitions\": %d, \"pushes\": %ld, \"wrong\": %ld, \"value0\": %g, "
           "\"push_errors\": %ld, \"stats\": {\"pushes\": %llu, \"retries\": %llu, "
           "\"backlog_waits\": %llu, \"push_errors\": %llu}, \"keys\": [",
           (wrong || push_errors) ? "false" : "true", parts, pushes, wrong, (double)val[0],
           push_errors, (unsigned long long)c->stats.pushes, (unsigned long long)c->stats.retries,
           (unsigned long long)c->stats.backlog_waits, (unsigned long long)c->stats.push_errors);
    for (int p = 0; p < parts; p++) printf("%s\"%s\"", p ? ", " : "", psModelPartitionKey(m, 0, p));
    printf("]}\n");
    free(g);
    free(val);
    psModelFree(m);
    psClientFree(c);
    return (wrong || push_errors) ? 1 : 0;
}
