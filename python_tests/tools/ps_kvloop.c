/* ps_kvloop -- drives psCommand()/psCommandArgv() routing (no module needed).
 *
 * Usage: ps_kvloop ADDRS [--keys N] [--iters M] [--sleep-ms MS] [--prefix P]
 *
 * Every iteration: SET P:<i> <iter> for each key (psCommand), then GET each
 * (psCommandArgv) and check the value. Prints one JSON object; exit 0 when
 * every reply was right, 1 on a wrong value or error reply, 2 on a library
 * error (e.g. unreachable servers), 3 on usage errors. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "redis-ps/ps.h"

int main(int argc, char **argv) {
    const char *prefix = "kv";
    long keys = 20, iters = 10, sleep = 0, bad = 0, lib_errors = 0;
    psOptions opt = {0};
    int i;
    if (argc < 2 || argv[1][0] == '-') {
        fprintf(stderr, "usage: ps_kvloop ADDRS [--keys N] [--iters M] [--sleep-ms MS] [--prefix P]\n");
        return 3;
    }
    for (i = 2; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--keys")) keys = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "--iters")) iters = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "--sleep-ms")) sleep = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "--prefix")) prefix = argv[i + 1];
        else { fprintf(stderr, "ps_kvloop: unknown flag %s\n", argv[i]); return 3; }
    }
    opt.connect_timeout_ms = 1000;
    psClient *c = psConnect(argv[1], &opt);
    if (c == NULL || c->err) {
        printf("{\"ok\": false, \"error\": \"%s\"}\n", c ? c->errstr : "oom");
        fprintf(stderr, "ps_kvloop: %s\n", c ? c->errstr : "out of memory");
        psClientFree(c);
        return 2;
    }
    for (long it = 0; it < iters; it++) {
        for (long k = 0; k < keys; k++) {
            char key[64];
            snprintf(key, sizeof(key), "%s:%ld", prefix, k);
            redisReply *r = psCommand(c, key, "SET %s %ld", key, it);
            if (r == NULL) { lib_errors++; fprintf(stderr, "SET %s: %s\n", key, c->errstr); continue; }
            if (r->type != REDIS_REPLY_STATUS) { bad++; fprintf(stderr, "SET %s: %s\n", key, r->str); }
            freeReplyObject(r);
        }
        for (long k = 0; k < keys; k++) {
            char key[64], want[32];
            const char *av[2] = {"GET", key};
            size_t al[2];
            snprintf(key, sizeof(key), "%s:%ld", prefix, k);
            snprintf(want, sizeof(want), "%ld", it);
            al[0] = 3;
            al[1] = strlen(key);
            redisReply *r = psCommandArgv(c, key, 2, av, al);
            if (r == NULL) { lib_errors++; fprintf(stderr, "GET %s: %s\n", key, c->errstr); continue; }
            if (r->type != REDIS_REPLY_STRING || strcmp(r->str, want) != 0) {
                bad++;
                fprintf(stderr, "GET %s: unexpected reply type %d %s\n", key, r->type,
                        r->str ? r->str : "");
            }
            freeReplyObject(r);
        }
        if (sleep) {
            struct timespec ts = {sleep / 1000, (sleep % 1000) * 1000000L};
            nanosleep(&ts, NULL);
        }
    }
    printf("{\"ok\": %s, \"cluster\": %d, \"bad\": %ld, \"lib_errors\": %ld, \"stats\": "
           "{\"retries\": %llu, \"moved\": %llu, \"ask\": %llu, \"reconnects\": %llu, \"refreshes\": %llu}}\n",
           (bad || lib_errors) ? "false" : "true", c->cluster, bad, lib_errors,
           (unsigned long long)c->stats.retries, (unsigned long long)c->stats.moved,
           (unsigned long long)c->stats.ask, (unsigned long long)c->stats.reconnects,
           (unsigned long long)c->stats.refreshes);
    psClientFree(c);
    return lib_errors ? 2 : (bad ? 1 : 0);
}
