/* dedup_bench.c -- PS.PUSHGRAD with ID against a running server, at an
 * exactly-once table bound of 16 and at a full table of --big clients
 * (2^20 by default, the largest DEDUPMAX), to show a push costs the same at
 * any table size (issue 11 item 4: the table used to be scanned twice per
 * push).
 *
 * Each push names a new client, so at a full table every push also evicts
 * the oldest entry. Pushes are pipelined in batches; the best of --reps
 * runs of --pushes pushes is reported per bound, with the ratio.
 * usage: dedup_bench --port P [--host 127.0.0.1] [--pushes 20000] [--reps 5]
 *                    [--big 1048576]
 * Exit status: 0, or 1 on a connection or command error. */

#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define BATCH 1000

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Sends PS.PUSHGRAD key <4 floats> ID <prefix><i> 1 for i in [from, to),
 * pipelined; returns 0, or -1 on any error reply. */
static int push_ids(redisContext *c, const char *prefix, long from, long to) {
    static const float g[4] = {0, 0, 0, 0};
    for (long b = from; b < to; b += BATCH) {
        const long e = b + BATCH < to ? b + BATCH : to;
        for (long i = b; i < e; i++)
            redisAppendCommand(c, "PS.PUSHGRAD bench:dedup %b ID %s%ld 1", (const char *)g,
                               sizeof(g), prefix, i);
        for (long i = b; i < e; i++) {
            redisReply *r = NULL;
            if (redisGetReply(c, (void **)&r) != REDIS_OK || !r) return -1;
            const int bad = r->type == REDIS_REPLY_ERROR;
            if (bad) fprintf(stderr, "dedup_bench: %s\n", r->str);
            freeReplyObject(r);
            if (bad) return -1;
        }
    }
    return 0;
}

/* Pushes/s of new-client pushes with the table filled to 'bound'. */
static double measure(redisContext *c, long bound, long pushes, int reps, long *next) {
    redisReply *r = redisCommand(c, "DEL bench:dedup");
    freeReplyObject(r);
    r = redisCommand(c, "PS.CREATE bench:dedup SHAPE 4 DEDUPMAX %ld", bound);
    if (!r || r->type == REDIS_REPLY_ERROR) {
        fprintf(stderr, "dedup_bench: PS.CREATE: %s\n", r ? r->str : c->errstr);
        freeReplyObject(r);
        return -1;
    }
    freeReplyObject(r);
    if (push_ids(c, "fill", 0, bound) != 0) return -1;
    double best = 1e30;
    for (int k = 0; k < reps; k++) {
        const double t0 = now_s();
        if (push_ids(c, "new", *next, *next + pushes) != 0) return -1;
        *next += pushes;
        const double dt = now_s() - t0;
        if (dt < best) best = dt;
    }
    r = redisCommand(c, "DEL bench:dedup");
    freeReplyObject(r);
    return (double)pushes / best;
}

int main(int argc, char **argv) {
    const char *host = "127.0.0.1";
    int port = 0, reps = 5;
    long pushes = 20000, big = 1L << 20;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--port")) port = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--host")) host = argv[i + 1];
        else if (!strcmp(argv[i], "--pushes")) pushes = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "--reps")) reps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--big")) big = atol(argv[i + 1]);
    }
    if (port <= 0 || pushes <= 0 || reps <= 0 || big <= 16) {
        fprintf(stderr, "usage: dedup_bench --port P [--host H] [--pushes N] [--reps R] [--big B]\n");
        return 1;
    }
    redisContext *c = redisConnect(host, port);
    if (!c || c->err) {
        fprintf(stderr, "dedup_bench: cannot connect: %s\n", c ? c->errstr : "?");
        return 1;
    }
    long next = 0;
    const double small = measure(c, 16, pushes, reps, &next);
    const double full = measure(c, big, pushes, reps, &next);
    redisFree(c);
    if (small < 0 || full < 0) return 1;
    printf("push with ID, new client each (evicts at a full table), best of %d x %ld:\n", reps,
           pushes);
    printf("  DEDUPMAX %-8d %10.0f pushes/s\n", 16, small);
    printf("  DEDUPMAX %-8ld %10.0f pushes/s (table full)\n", big, full);
    printf("  full/16 = %.3f (target >= 0.90)\n", full / small);
    return 0;
}
