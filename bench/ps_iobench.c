/* ps_iobench -- libps pull and push throughput (a measuring tool, not a test).
 *
 * Usage: ps_iobench ADDRS [--rows R] [--cols C] [--partition-bytes N]
 *                         [--iters N] [--rounds N] [--pull-format F32|BF16]
 *
 * Creates job "iobench" with one R x C tensor (INIT ZEROS OPTIM SGD LR 0),
 * then runs 'rounds' rounds of: 'iters' psModelPull into one array, and
 * 'iters' psModelPush (F32, window default) followed by psDrain. Prints the
 * best round of each as "pull MB/s" and "push MB/s" (float32 payload bytes,
 * 1 MB = 10^6 bytes) and deletes the keys. Built against any libps with the
 * public API of ps.h, so the same source measures an old and a new build.
 * Exit status 0, or 2 on a library error. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "redis-ps/ps.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
    uint64_t dims[2] = {1024, 1024};
    long iters = 20, rounds = 5;
    psOptions opt = {0};
    psWireFormat pf = PS_WIRE_F32;
    double best_pull = 0, best_push = 0;
    if (argc < 2) {
        fprintf(stderr, "usage: ps_iobench ADDRS [--rows R] [--cols C] [--partition-bytes N] "
                        "[--iters N] [--rounds N] [--pull-format F32|BF16]\n");
        return 3;
    }
    for (int i = 2; i + 1 < argc; i += 2) {
        const char *k = argv[i], *v = argv[i + 1];
        if (!strcmp(k, "--rows")) dims[0] = strtoull(v, NULL, 10);
        else if (!strcmp(k, "--cols")) dims[1] = strtoull(v, NULL, 10);
        else if (!strcmp(k, "--partition-bytes")) opt.partition_bytes = strtoull(v, NULL, 10);
        else if (!strcmp(k, "--iters")) iters = atol(v);
        else if (!strcmp(k, "--rounds")) rounds = atol(v);
        else if (!strcmp(k, "--pull-format")) pf = strcmp(v, "BF16") ? PS_WIRE_F32 : PS_WIRE_BF16;
    }
    psClient *c = psConnect(argv[1], &opt);
    psModel *m = psModelNew("iobench");
    if (c == NULL || m == NULL || c->err) {
        fprintf(stderr, "ps_iobench: connect: %s\n", c ? c->errstr : "out of memory");
        return 2;
    }
    psModelAddTensor(m, "w", 2, dims);
    psModelSetPullFormat(m, pf);
    size_t n = psModelTensorElements(m, 0);
    float *vals = calloc(n, sizeof(float)), *grad = calloc(n, sizeof(float));
    if (vals == NULL || grad == NULL) return 2;
    if (psModelDelete(c, m) == PS_ERR ||
        psModelCreate(c, m, "INIT ZEROS OPTIM SGD LR 0", 0) == PS_ERR) {
        fprintf(stderr, "ps_iobench: create: %s\n", c->errstr);
        return 2;
    }
    double mb = (double)n * 4 * (double)iters / 1e6;
    for (long r = 0; r < rounds; r++) {
        double t0 = now_s();
        for (long i = 0; i < iters; i++)
            if (psModelPull(c, m, &vals, NULL) != PS_OK) {
                fprintf(stderr, "ps_iobench: pull: %s\n", c->errstr);
                return 2;
            }
        double t1 = now_s();
        for (long i = 0; i < iters; i++)
            if (psModelPush(c, m, (const float *const *)&grad, NULL, 1.0f) != PS_OK) {
                fprintf(stderr, "ps_iobench: push: %s\n", c->errstr);
                return 2;
            }
        if (psDrain(c) != PS_OK) {
            fprintf(stderr, "ps_iobench: drain: %s\n", c->errstr);
            return 2;
        }
        double t2 = now_s();
        if (mb / (t1 - t0) > best_pull) best_pull = mb / (t1 - t0);
        if (mb / (t2 - t1) > best_push) best_push = mb / (t2 - t1);
    }
    printf("elements %zu partitions %d pull %.0f MB/s push %.0f MB/s\n", n,
           psModelNumPartitions(m, 0), best_pull, best_push);
    psModelDelete(c, m);
    psModelFree(m);
    psClientFree(c);
    free(vals);
    free(grad);
    return 0;
}
