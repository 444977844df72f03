/* ps_roundtrip -- integration-test driver for libps.
 *
 * Usage: ps_roundtrip ADDRS [--job J] [--rows R] [--cols C] [--partition-bytes N]
 *                          [--iters N] [--sleep-ms MS] [--window W] [--format F32|BF16|I8|TOPK]
 *                          [--wait NREPLICAS] [--retries N]
 *
 * Defines a model of job J with tensor "w" (R x C) and "b" (C), deletes and
 * recreates it with INIT CONST 0.5 OPTIM SGD LR 1, then runs N iterations of
 * push(g) + pull, checking after every pull that each value equals the
 * float32 result of applying exactly the pushes made so far (a push applied
 * twice or lost shows up as a mismatch). Prints one JSON object on stdout.
 * Exit codes: 0 ok, 1 verification failed, 2 library error, 3 usage. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "redis-ps/ps.h"

static void sleep_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static int fail(psClient *c, const char *what) {
    printf("{\"ok\": false, \"where\": \"%s\", \"err\": %d, \"error\": \"", what, c ? c->err : -1);
    for (const char *s = c ? c->errstr : "out of memory"; *s; s++)
        if (*s != '"' && *s != '\\') putchar(*s);
    printf("\"}\n");
    fprintf(stderr, "ps_roundtrip: %s: %s\n", what, c ? c->errstr : "out of memory");
    return 2;
}

int main(int argc, char **argv) {
    const char *addrs, *job = "rt", *fmt = "F32";
    uint64_t rows = 300, cols = 100;
    long iters = 3, sleep = 0;
    psOptions opt = {0};
    int i, ret = 0;

    if (argc < 2 || argv[1][0] == '-') {
        fprintf(stderr, "usage: ps_roundtrip ADDRS [--job J] [--rows R] [--cols C] "
                        "[--partition-bytes N] [--iters N] [--sleep-ms MS] [--window W] [--format F] "
                        "[--wait N] [--retries N]\n");
        return 3;
    }
    addrs = argv[1];
    opt.partition_bytes = 16384;
    opt.connect_timeout_ms = 1000;
    for (i = 2; i + 1 < argc; i += 2) {
        const char *k = argv[i], *v = argv[i + 1];
        if (!strcmp(k, "--job")) job = v;
        else if (!strcmp(k, "--rows")) rows = strtoull(v, NULL, 10);
        else if (!strcmp(k, "--cols")) cols = strtoull(v, NULL, 10);
        else if (!strcmp(k, "--partition-bytes")) opt.partition_bytes = strtoull(v, NULL, 10);
        else if (!strcmp(k, "--iters")) iters = atol(v);
        else if (!strcmp(k, "--sleep-ms")) sleep = atol(v);
        else if (!strcmp(k, "--window")) opt.push_window = atoi(v);
        else if (!strcmp(k, "--format")) fmt = v;
        else if (!strcmp(k, "--wait")) opt.wait_replicas = atoi(v);
        else if (!strcmp(k, "--retries")) opt.max_retries = atoi(v);
        else { fprintf(stderr, "ps_roundtrip: unknown flag %s\n", k); return 3; }
    }
    if (i != argc) { fprintf(stderr, "ps_roundtrip: flag %s needs a value\n", argv[i]); return 3; }

    psClient *c = psConnect(addrs, &opt);
    if (c == NULL || c->err) { ret = fail(c, "connect"); psClientFree(c); return ret; }

    psModel *m = psModelNew(job);
    uint64_t wd[2] = {rows, cols}, bd[1] = {cols};
    if (psModelAddTensor(m, "w", 2, wd) != 0 || psModelAddTensor(m, "b", 1, bd) != 1) {
        fprintf(stderr, "ps_roundtrip: bad shape\n");
        return 3;
    }
    if (!strcmp(fmt, "BF16")) psModelSetPushFormat(m, PS_WIRE_BF16, 0);
    else if (!strcmp(fmt, "I8")) psModelSetPushFormat(m, PS_WIRE_I8, 0);
    else if (!strcmp(fmt, "TOPK")) psModelSetPushFormat(m, PS_WIRE_TOPK, 0.1);
    if (psModelLayout(c, m) != PS_OK) return fail(c, "layout");
    if (psModelDelete(c, m) < 0) return fail(c, "delete");
    int created = psModelCreate(c, m, "INIT CONST 0.5 OPTIM SGD LR 1", 0);
    if (created < 0) return fail(c, "create");

    size_t n[2] = {psModelTensorElements(m, 0), psModelTensorElements(m, 1)};
    float *val[2], *exp[2], *grad[2];
    for (int t = 0; t < 2; t++) {
        val[t] = malloc(n[t] * sizeof(float));
        exp[t] = malloc(n[t] * sizeof(float));
        grad[t] = malloc(n[t] * sizeof(float));
        for (size_t e = 0; e < n[t]; e++) {
            exp[t][e] = 0.5f;
            grad[t][e] = 0.001f * (float)((e * 7 + (size_t)t) % 13) - 0.004f;
        }
    }
    uint64_t vers[2];
    long mismatch = 0, pull_errors = 0, push_errors = 0;
    int lossy = strcmp(fmt, "F32") != 0;
    if (psModelPull(c, m, val, vers) != PS_OK) return fail(c, "pull0");
    for (int t = 0; t < 2; t++)
        for (size_t e = 0; e < n[t]; e++)
            if (val[t][e] != 0.5f) mismatch++;
    uint64_t first_version = vers[0];

    for (long it = 0; it < iters; it++) {
        if (psModelPush(c, m, (const float *const *)grad, NULL, 1.0f) != PS_OK) {
            push_errors++;
            fprintf(stderr, "push %ld: %s\n", it, c->errstr);
        }
        for (int t = 0; t < 2; t++)
            for (size_t e = 0; e < n[t]; e++) exp[t][e] = exp[t][e] - 1.0f * grad[t][e];
        if (psModelPull(c, m, val, vers) != PS_OK) {
            pull_errors++;
            fprintf(stderr, "pull %ld: %s\n", it, c->errstr);
            break;
        }
        if (!lossy)
            for (int t = 0; t < 2; t++)
                for (size_t e = 0; e < n[t]; e++)
                    if (val[t][e] != exp[t][e]) mismatch++;
        if (sleep) sleep_ms(sleep);
    }
    if (psDrain(c) != PS_OK) { push_errors++; fprintf(stderr, "drain: %s\n", c->errstr); }
    if (psModelPull(c, m, val, vers) != PS_OK) return fail(c, "final pull");
    double maxdiff = 0;
    for (int t = 0; t < 2; t++)
        for (size_t e = 0; e < n[t]; e++) {
            double d = fabs((double)val[t][e] - (double)exp[t][e]);
            if (d > maxdiff) maxdiff = d;
            if (!lossy && val[t][e] != exp[t][e]) mismatch++;
        }

    printf("{\"ok\": %s, \"cluster\": %d, \"created\": %d, \"first_version\": %llu, "
           "\"versions\": [%llu, %llu], \"iters\": %ld, \"mismatch\": %ld, \"maxdiff\": %g, "
           "\"pull_errors\": %ld, \"push_errors\": %ld, \"keys\": [",
           (mismatch || pull_errors || push_errors) ? "false" : "true", c->cluster, created,
           (unsigned long long)first_version, (unsigned long long)vers[0],
           (unsigned long long)vers[1], iters, mismatch, maxdiff, pull_errors, push_errors);
    for (int t = 0, first = 1; t < 2; t++)
        for (int p = 0; p < psModelNumPartitions(m, t); p++) {
            uint64_t fr, nr;
            psModelPartitionRows(m, t, p, &fr, &nr);
            printf("%s[\"%s\", %llu, %llu, %llu]", first ? "" : ", ", psModelPartitionKey(m, t, p),
                   (unsigned long long)fr, (unsigned long long)nr,
                   (unsigned long long)psModelPartitionVersion(m, t, p));
            first = 0;
        }
    printf("], \"stats\": {\"pushes\": %llu, \"pulls\": %llu, \"retries\": %llu, \"moved\": %llu, "
           "\"ask\": %llu, \"stale_rejects\": %llu, \"push_errors\": %llu, \"reconnects\": %llu, "
           "\"refreshes\": %llu, \"wait_short\": %llu, \"bytes_sent\": %llu, \"bytes_received\": %llu}}\n",
           (unsigned long long)c->stats.pushes, (unsigned long long)c->stats.pulls,
           (unsigned long long)c->stats.retries, (unsigned long long)c->stats.moved,
           (unsigned long long)c->stats.ask, (unsigned long long)c->stats.stale_rejects,
           (unsigned long long)c->stats.push_errors, (unsigned long long)c->stats.reconnects,
           (unsigned long long)c->stats.refreshes, (unsigned long long)c->stats.wait_short,
           (unsigned long long)c->stats.bytes_sent,
           (unsigned long long)c->stats.bytes_received);
    for (int t = 0; t < 2; t++) { free(val[t]); free(exp[t]); free(grad[t]); }
    psModelFree(m);
    psClientFree(c);
    return (mismatch || pull_errors || push_errors) ? 1 : 0;
}
