/* ps-relay.c -- command line of the tree topology's relay (relay.h):
 *
 *   ps-relay --local HOST:PORT --upstream ADDRS --name ID (--keys K1,K2 | --match PATTERN)
 *            [--sync --workers N [--round-timeout-ms T]]
 *            [--every-ms T] [--every-pushes K] [--mean] [--optim NAME]
 *            [--pull-ms P] [--poll-ms P] [--progress-ms P]
 *            [--max-backlog B] [--max-round R] [--stop-timeout-ms T]
 *   ps-relay --status --local HOST:PORT (--keys K1,K2 | --match PATTERN)
 *   ps-relay --ring NAME=HOST:PORT,... --self NAME (--keys K1,K2 | --match PATTERN)
 *            [--threshold R] [--every-ms T] [--dead-after-ms D] [--barrier] [--join]
 *            [--adapt] [--reorder] [--log-json FILE] [--max-queue B] [--load-ms T]   (ring.h)
 *   ps-relay --ring NAME=HOST:PORT,... --pick [--load-ms T] [--log-json FILE]
 *
 * Exit codes: 0 stopped by SIGINT/SIGTERM after forwarding what was summed,
 * 1 runtime failure, 2 usage error or tensors that do not fit, 3 stopped
 * with gradients not forwarded (--stop-timeout-ms or a second signal; they
 * stay in the local server). */

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "relay.h"
#include "ring.h"

static void usage(FILE *out) {
    fprintf(out,
            "usage: ps-relay --local HOST:PORT --upstream HOST:PORT[,...] --name ID\n"
            "                (--keys KEY[,KEY...] | --match PATTERN) [flags]\n\n"
            "Relays the local workers' pushes to an upstream server, cluster or relay: creates\n"
            "the local tensors as ACCUM tensors mirroring the upstream shapes, forwards their\n"
            "summed gradient as one push per round (exactly once across relay crashes) and\n"
            "mirrors the upstream values back after each push.\n\n"
            "flags:\n"
            "  --local HOST:PORT       the local server (ps module) the workers use (required)\n"
            "  --upstream ADDRS        upstream server, cluster seeds or another relay's local\n"
            "                          server (required)\n"
            "  --name ID               this relay's exactly-once id upstream; unique per relay\n"
            "                          and stable across its restarts (required)\n"
            "  --keys K1,K2,...        the tensor keys to relay\n"
            "  --match PATTERN         or: every ps-tensor key matching PATTERN upstream; a\n"
            "                          standalone upstream only (a SCAN reaches one node):\n"
            "                          with a cluster upstream list the keys with --keys\n"
            "  --sync                  sync mode: a round is --workers local pushes per key\n"
            "  --workers N             sync: local workers per round\n"
            "  --round-timeout-ms T    sync: close a short round (a dead worker) after T (2000)\n"
            "  --every-ms T            async: forward every T ms (100)\n"
            "  --every-pushes K        async: or as soon as K pushes are summed (0: time only)\n"
            "  --mean                  forward the mean of the round instead of its sum\n"
            "  --optim NAME            refuse upstream tensors with another optimizer\n"
            "  --pull-ms P             async: pull upstream at least every P ms (200); sync\n"
            "                          mirrors after each forwarded round only, so the local\n"
            "                          version moves once per round (ps-train --sync-rounds)\n"
            "  --poll-ms P             longest single wait (PS.TAKEWAIT) while idle (100); the\n"
            "                          relay sleeps on the local server until a round may be due\n"
            "  --max-backlog B         MAXBACKLOG of the local tensors: a worker's push waits\n"
            "                          (BACKLOG, libps backs off and resends) while B gradients\n"
            "                          wait for this relay (default 4 rounds: sync 4 x --workers,\n"
            "                          async 4 x --every-pushes, time only 64; 0: no bound)\n"
            "  --max-round R           most gradients one upstream push carries: a larger take\n"
            "                          (a backlog) goes up in ceil(count / R) parts of its sum\n"
            "                          (default sync --workers, async 2 x --every-pushes, time\n"
            "                          only 0: no bound)\n"
            "  --status                print the local tensors' persisted round counters (takes,\n"
            "                          upstream pushes, gradients, smallest and largest push,\n"
            "                          backlog) and exit; needs --local and --keys or --match\n"
            "  --progress-ms P         progress line every P ms (2000; 0: none)\n"
            "  --stop-timeout-ms T     on SIGINT/SIGTERM forward what is summed for at most T\n"
            "                          ms (3000), then exit: 0 when everything went upstream,\n"
            "                          3 when some did not (it stays in the local server,\n"
            "                          summed or in a pending take, for the next run with the\n"
            "                          same --name); a second signal exits 3 at once\n\n"
            "Ring mode (docs/design.md \"Ring topology\"): one agent per group exchanges the\n"
            "group's accumulated parameter change with the other groups around a ring:\n"
            "  --ring N=H:P,...        the groups in ring order, each name=its server (a Redis\n"
            "                          Cluster: name=seed1+seed2+...; then --keys)\n"
            "  --self NAME             this agent's group (one of --ring)\n"
            "  --keys / --match        the tensors (--match: SCAN on this group's server)\n"
            "  --threshold R           send an element when |change| > R * |value| (0.01;\n"
            "                          0: every change); the rest stays accumulated\n"
            "  --every-ms T            round period (100; T/10 after a round that acked or\n"
            "                          forwarded, T/4 while a sent take waits for its acks)\n"
            "  --dead-after-ms D       a group unreachable for D ms leaves the ring (3000)\n"
            "  --barrier               ship every remaining delta of every live group\n"
            "                          (threshold 0), check that the groups agree, exit 0\n"
            "  --barrier-timeout-ms T  give the barrier up after T ms (60000)\n"
            "  --join                  copy the model from a live neighbour, then enter\n"
            "  --leave                 leave for good: deliver every change of this group\n"
            "                          straight to every group (threshold 0), then UNTRACK\n"
            "                          (the others drop it after --dead-after-ms); exit 0\n"
            "  --adapt                 adapt the threshold to the link (raise it when a\n"
            "                          round's sends outlast half the round, lower when idle)\n"
            "  --reorder               ring order from measured RTTs (4..6 groups)\n"
            "  --max-queue B           MAXQUEUE of this group's forward queue (module default)\n"
            "  --max-lag N             MAXLAG: this group's workers wait (BACKLOG) once N of\n"
            "                          their pushes per key are in no acknowledged take (16;\n"
            "                          0: no bound): how far a group runs ahead of the others\n"
            "  --flush-ms T            a change waits at most T ms for the threshold: each\n"
            "                          key's next take after T takes every change (0: off)\n"
            "  --mesh                  send each take straight to every group and acknowledge\n"
            "                          it on their replies (no forwarding, no polling: one hop)\n"
            "  --log-json FILE         append one JSON line per event (start, group_dead,\n"
            "                          group_live, threshold, order, link, load,\n"
            "                          least_loaded, progress, ...)\n"
            "  --load-ms T             load window: each group's PS.PUSHGRAD/s, workers and\n"
            "                          CPU measured over T ms (1000); on the progress lines\n"
            "  --pick                  no agent: measure every group's load over --load-ms,\n"
            "                          print each on stderr and the least-loaded group's\n"
            "                          address on stdout (fewest pushes/s, then workers,\n"
            "                          then CPU), for ps-train work --addr \"$(...)\"\n\n"
            "ACL: the user in PS_USER/PS_PASSWORD is used on both sides (--ring: on every\n"
            "group); its role is in docs/operations.md (\"A relay\", \"A ring agent\").\n");
}

/* Strict integer in [lo, hi]; exits 2 with a message otherwise. */
static long num(const char *flag, const char *s, long lo, long hi) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) {
        fprintf(stderr, "ps-relay: %s: '%s' is not an integer in [%ld, %ld]\n", flag, s, lo, hi);
        exit(2);
    }
    return v;
}

/* Strict number in [lo, hi]; exits 2 otherwise. */
static double fnum(const char *flag, const char *s, double lo, double hi) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !(v >= lo && v <= hi)) {
        fprintf(stderr, "ps-relay: %s: '%s' is not a number in [%g, %g]\n", flag, s, lo, hi);
        exit(2);
    }
    return v;
}

int main(int argc, char **argv) {
    ringOpts ro = {.threshold = 0.01, .dead_ms = 3000, .barrier_timeout_ms = 60000,
                   .maxqueue = -1, .maxlag = 16, .load_ms = 1000};
    int ring = 0;
    relayOpts o = {.round_timeout_ms = 2000, .every_ms = 100, .pull_ms = 200, .poll_ms = 100,
                   .progress_ms = 2000, .max_backlog = -1, .max_round = -1,
                   .stop_timeout_ms = 3000};
    enum { O_LOCAL = 256, O_UP, O_NAME, O_KEYS, O_MATCH, O_SYNC, O_WORKERS, O_RTO, O_EVERY,
           O_EVERYP, O_MEAN, O_OPTIM, O_PULL, O_POLL, O_PROGRESS, O_MAXBL, O_MAXROUND, O_STATUS,
           O_HELP, O_RING, O_SELF, O_THR, O_DEAD, O_BARRIER, O_BTO, O_JOIN, O_ADAPT,
           O_REORDER, O_LOGJSON, O_MAXQ, O_MAXLAG, O_MESH, O_LEAVE, O_STOPTO,
           O_LOADMS, O_PICK, O_FLUSH };
    static const struct option lo[] = {
        {"local", 1, 0, O_LOCAL},        {"upstream", 1, 0, O_UP},
        {"name", 1, 0, O_NAME},          {"keys", 1, 0, O_KEYS},
        {"match", 1, 0, O_MATCH},        {"sync", 0, 0, O_SYNC},
        {"workers", 1, 0, O_WORKERS},    {"round-timeout-ms", 1, 0, O_RTO},
        {"every-ms", 1, 0, O_EVERY},     {"every-pushes", 1, 0, O_EVERYP},
        {"mean", 0, 0, O_MEAN},          {"optim", 1, 0, O_OPTIM},
        {"pull-ms", 1, 0, O_PULL},       {"poll-ms", 1, 0, O_POLL},
        {"progress-ms", 1, 0, O_PROGRESS}, {"help", 0, 0, O_HELP},
        {"max-backlog", 1, 0, O_MAXBL},  {"max-round", 1, 0, O_MAXROUND},
        {"status", 0, 0, O_STATUS},      {"ring", 1, 0, O_RING},
        {"self", 1, 0, O_SELF},          {"threshold", 1, 0, O_THR},
        {"dead-after-ms", 1, 0, O_DEAD}, {"barrier", 0, 0, O_BARRIER},
        {"barrier-timeout-ms", 1, 0, O_BTO}, {"join", 0, 0, O_JOIN},
        {"adapt", 0, 0, O_ADAPT},        {"reorder", 0, 0, O_REORDER},
        {"log-json", 1, 0, O_LOGJSON},   {"max-queue", 1, 0, O_MAXQ},
        {"max-lag", 1, 0, O_MAXLAG},     {"mesh", 0, 0, O_MESH},
        {"leave", 0, 0, O_LEAVE},        {"stop-timeout-ms", 1, 0, O_STOPTO},
        {"load-ms", 1, 0, O_LOADMS},     {"pick", 0, 0, O_PICK},
        {"flush-ms", 1, 0, O_FLUSH},
        {0, 0, 0, 0}};
    int c;
    while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
        switch (c) {
        case O_LOCAL: o.local = optarg; break;
        case O_UP: o.upstream = optarg; break;
        case O_NAME: o.name = optarg; break;
        case O_KEYS: o.keys = optarg; break;
        case O_MATCH: o.match = optarg; break;
        case O_SYNC: o.sync = 1; break;
        case O_WORKERS: o.workers = num("--workers", optarg, 1, 1 << 20); break;
        case O_RTO: o.round_timeout_ms = num("--round-timeout-ms", optarg, 1, 1L << 30); break;
        case O_EVERY: o.every_ms = num("--every-ms", optarg, 1, 1L << 30); break;
        case O_EVERYP: o.every_pushes = num("--every-pushes", optarg, 0, 1L << 30); break;
        case O_MEAN: o.mean = 1; break;
        case O_OPTIM: o.optim = optarg; break;
        case O_PULL: o.pull_ms = num("--pull-ms", optarg, 1, 1L << 30); break;
        case O_POLL: o.poll_ms = num("--poll-ms", optarg, 1, 10000); break;
        case O_PROGRESS: o.progress_ms = num("--progress-ms", optarg, 0, 1L << 30); break;
        case O_MAXBL: o.max_backlog = num("--max-backlog", optarg, 0, 1L << 40); break;
        case O_MAXROUND: o.max_round = num("--max-round", optarg, 0, 1L << 40); break;
        case O_STATUS: o.status = 1; break;
        case O_STOPTO: o.stop_timeout_ms = num("--stop-timeout-ms", optarg, 1, 1L << 30); break;
        case O_RING: ring = 1, ro.ring = optarg; break;
        case O_SELF: ro.self = optarg; break;
        case O_THR: ro.threshold = fnum("--threshold", optarg, 0, 1e6); break;
        case O_DEAD: ro.dead_ms = num("--dead-after-ms", optarg, 1, 1L << 30); break;
        case O_BARRIER: ro.barrier = 1; break;
        case O_BTO: ro.barrier_timeout_ms = num("--barrier-timeout-ms", optarg, 1, 1L << 30); break;
        case O_JOIN: ro.join = 1; break;
        case O_ADAPT: ro.adapt = 1; break;
        case O_REORDER: ro.reorder = 1; break;
        case O_LOGJSON: ro.log_json = optarg; break;
        case O_MAXQ: ro.maxqueue = num("--max-queue", optarg, 0, 1L << 40); break;
        case O_MAXLAG: ro.maxlag = num("--max-lag", optarg, 0, 1L << 40); break;
        case O_FLUSH: ro.flush_ms = num("--flush-ms", optarg, 0, 1L << 40); break;
        case O_MESH: ro.mesh = 1; break;
        case O_LEAVE: ro.leave = 1; break;
        case O_LOADMS: ro.load_ms = num("--load-ms", optarg, 10, 600000); break;
        case O_PICK: ro.pick = 1; break;
        case 'h':
        case O_HELP: usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    const char *why = NULL;
    if (ring) {
        ro.keys = o.keys, ro.match = o.match;
        ro.every_ms = o.every_ms, ro.progress_ms = o.progress_ms;
        if (ro.pick && !ro.self) ro.self = "pick";
        if (optind < argc) why = "unexpected argument";
        else if (ro.pick && (ro.keys || ro.match || ro.barrier || ro.join || ro.leave ||
                             ro.mesh || ro.adapt || ro.reorder))
            why = "--pick takes only --ring, --load-ms and --log-json";
        else if (!ro.self || !*ro.self) why = "--ring needs --self NAME";
        else if (!ro.pick && !ro.keys == !ro.match)
            why = "give exactly one of --keys and --match";
        else if (o.local || o.upstream || o.name || o.sync || o.status)
            why = "--ring takes no --local/--upstream/--name/--sync/--status (see --help)";
        else if (ro.barrier + ro.join + ro.leave > 1)
            why = "give at most one of --barrier, --join and --leave";
        if (why) {
            fprintf(stderr, "ps-relay: %s%s%s (see ps-relay --help)\n", why,
                    optind < argc ? ": " : "", optind < argc ? argv[optind] : "");
            return 2;
        }
        return ro.pick ? ring_pick(&ro) : ring_run(&ro);
    }
    if (optind < argc) why = "unexpected argument";
    else if (!o.local) why = "--local is required";
    else if (!o.upstream && !o.status) why = "--upstream is required";
    else if (!o.status && (!o.name || !*o.name || strlen(o.name) > 256))
        why = "--name is required (1..256 bytes)";
    else if (!o.keys == !o.match) why = "give exactly one of --keys and --match";
    else if (o.sync && !o.workers) why = "--sync needs --workers N";
    else if (!o.sync && o.workers) why = "--workers is for --sync (async: --every-pushes)";
    else if (o.max_backlog > 0 && o.max_backlog < (o.sync ? o.workers : o.every_pushes))
        why = "--max-backlog must hold at least one round (--workers or --every-pushes)";
    if (why) {
        fprintf(stderr, "ps-relay: %s%s%s (see ps-relay --help)\n", why, optind < argc ? ": " : "",
                optind < argc ? argv[optind] : "");
        return 2;
    }
    if (o.status && !o.name) o.name = "status";
    return relay_run(&o);
}
