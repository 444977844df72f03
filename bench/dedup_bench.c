/* dedup_bench.c -- PS.PUSHGRAD with ID against a running server, at an
 * exactly-once table bound of 16 and at a full table of --big clients
 * (2^20 by default, the largest DEDUPMAX), to show a push costs the same at
 * any table size (issue 11 item 4: the table used to be scanned twice per
 * push).
 *
 * Each push names a new client, so at a full table every push also evicts
 * the oldest entry. Pushes are pipelined in batches; the best of --reps
 * runs of --pushes pushes is reported per bound, with the ratio, twice:
 * by the client's wall clock, and by the server main thread's CPU time
 * (INFO cpu used_cpu_user_main_thread + used_cpu_sys_main_thread), which
 * the other processes of a shared machine disturb much less. The last line
 * is issue 24's figure: a new client's push against a known client's, both
 * at the full table.
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

/* Sends PS.PUSHGRAD 'key' <4 floats> ID <prefix><i % nclients> <seq> for i
 * in [from, to), pipelined, with seq = 1 + i / nclients (so a client's
 * pushes are in order); nclients 0 means a new client per push. Returns 0,
 * or -1 on any error reply. */
static int push_ids(redisContext *c, const char *key, const char *prefix, long from, long to,
                    long nclients) {
    static const float g[4] = {0, 0, 0, 0};
    for (long b = from; b < to; b += BATCH) {
        const long e = b + BATCH < to ? b + BATCH : to;
        for (long i = b; i < e; i++) {
            const long id = nclients ? i % nclients : i, seq = nclients ? 1 + i / nclients : 1;
            redisAppendCommand(c, "PS.PUSHGRAD %s %b ID %s%ld %ld", key, (const char *)g,
                               sizeof(g), prefix, id, seq);
        }
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

/* The server main thread's CPU seconds so far (INFO cpu), or -1. */
static double server_cpu(redisContext *c) {
    redisReply *r = redisCommand(c, "INFO cpu");
    double u = -1, s = -1;
    if (r && r->type == REDIS_REPLY_STRING) {
        const char *p = strstr(r->str, "used_cpu_user_main_thread:");
        const char *q = strstr(r->str, "used_cpu_sys_main_thread:");
        if (p && q) {
            u = atof(p + strlen("used_cpu_user_main_thread:"));
            s = atof(q + strlen("used_cpu_sys_main_thread:"));
        }
    }
    freeReplyObject(r);
    return u < 0 || s < 0 ? -1 : u + s;
}

/* Creates 'key' with DEDUPMAX 'bound' and fills its table. */
static int setup(redisContext *c, const char *key, long bound) {
    redisReply *r = redisCommand(c, "DEL %s", key);
    freeReplyObject(r);
    r = redisCommand(c, "PS.CREATE %s SHAPE 4 DEDUPMAX %ld", key, bound);
    if (!r || r->type == REDIS_REPLY_ERROR) {
        fprintf(stderr, "dedup_bench: PS.CREATE: %s\n", r ? r->str : c->errstr);
        freeReplyObject(r);
        return -1;
    }
    freeReplyObject(r);
    return push_ids(c, key, "fill", 0, bound, 0);
}

/* One run of 'pushes' pushes (new clients, or 64 known ones): wall and
 * server main-thread seconds; -1 on error. */
static int run(redisContext *c, const char *key, long pushes, int known, long *next, double *wall,
               double *cpu) {
    const double c0 = server_cpu(c), t0 = now_s();
    const int rc = known ? push_ids(c, key, "w", *next, *next + pushes, 64)
                         : push_ids(c, key, "new", *next, *next + pushes, 0);
    *wall = now_s() - t0;
    *cpu = server_cpu(c) - c0;
    *next += pushes;
    return rc == 0 && c0 >= 0 ? 0 : -1;
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
    /* Both tables exist at once and the runs alternate, so load on the
     * machine drifts into both the same way; the best run of each counts. */
    if (setup(c, "bench:dedup16", 16) || setup(c, "bench:dedupbig", big)) return 1;
    printf("push with ID at DEDUPMAX 16 vs a full table of %ld, best of %d x %ld pushes\n"
           "(pushes/s by the client's wall clock | per server core by main-thread CPU):\n", big, reps, pushes);
    double full_cpu[2] = {0, 0};
    for (int known = 0; known < 2; known++) {
        double best[2] = {1e30, 1e30}, bcpu[2] = {1e30, 1e30};
        long next[2] = {0, 0};
        for (int k = 0; k < 2 * reps; k++) {
            double wall, cpu;
            if (run(c, k % 2 ? "bench:dedupbig" : "bench:dedup16", pushes, known, &next[k % 2], &wall, &cpu))
                return 1;
            if (wall < best[k % 2]) best[k % 2] = wall;
            if (cpu < bcpu[k % 2]) bcpu[k % 2] = cpu;
        }
        full_cpu[known] = bcpu[1];
        printf("  %-38s 16: %7.0f/s full: %7.0f/s = %.3f | 16: %7.0f/s full: %7.0f/s = %.3f\n",
               known ? "64 known clients (lookup, no eviction)" : "a new client each (evicts)",
               pushes / best[0], pushes / best[1], best[0] / best[1], pushes / bcpu[0],
               pushes / bcpu[1], bcpu[0] / bcpu[1]);
    }
    const double ratio = full_cpu[1] / full_cpu[0];
    printf("new client vs known client at the full table, per server core: %.3f (target >= 0.90)  %s\n",
           ratio, ratio >= 0.9 ? "ok" : "MISSED");
    redisReply *r = redisCommand(c, "DEL bench:dedup16 bench:dedupbig");
    freeReplyObject(r);
    redisFree(c);
    return 0;
}
