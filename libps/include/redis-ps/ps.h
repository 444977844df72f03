/* ps.h -- libps, the C client of the redis-ps parameter server.
 *
 * The API is split by responsibility into ps.h (connections, models, tables,
 * key information, shutdown, snapshots), ps_topology.h (the tree relay and
 * the ring agent) and ps_serve.h (scoring, incremental export); ps.h
 * includes the other two, so a program includes <redis-ps/ps.h> alone.
 *
 * libps talks to Redis servers that load the ps module (build/ps.so), either
 * one standalone server or a Redis Cluster, through hiredis (0.14, RESP2).
 * It is written in the style of hiredis: one prefix, a context that records
 * the last error as an integer code 'err' and a message 'errstr', functions
 * that answer PS_OK / PS_ERR (or NULL).
 *
 * A walk through:
 *
 *   psOptions opt = {0};                    (every 0 field takes its default)
 *   opt.push_window = 4;
 *   psClient *c = psConnect("127.0.0.1:7000,127.0.0.1:7001", &opt);
 *   if (c == NULL || c->err) { ... c ? c->errstr : "out of memory" ... }
 *
 *   psModel *m = psModelNew("mnist");
 *   uint64_t w1[2] = {128, 784}, b1[1] = {128};
 *   int tw = psModelAddTensor(m, "w1", 2, w1);   (tensor index 0)
 *   int tb = psModelAddTensor(m, "b1", 1, b1);   (tensor index 1)
 *   psModelCreateTensor(c, m, tw, "INIT HE SEED 7 OPTIM SGD LR 0.1", 1);
 *   psModelCreateTensor(c, m, tb, "INIT ZEROS OPTIM SGD LR 0.1", 1);
 *
 *   float *params[2], *grads[2];            (one contiguous array per tensor)
 *   for (;;) {
 *       psModelPull(c, m, params, NULL);    (fan out to every node, gather)
 *       ... compute grads from params ...
 *       psModelPush(c, m, (const float *const *)grads, NULL, 1.0f);
 *   }
 *   psDrain(c);                             (wait for outstanding pushes)
 *   psModelFree(m);
 *   psClientFree(c);
 *
 * Keys. Tensor 'name' of job 'job' is stored in one or more keys, one per
 * partition: "<job>:<name>:<p>" for p = 0 .. partitions-1 (always with the
 * ":<p>" suffix, also when there is one partition). A tensor whose float32
 * size exceeds the partition size is split along its first dimension into
 * partitions of whole rows, each at most partition_bytes (but at least one
 * row). The key names carry no hash tag, so Redis Cluster spreads the
 * partitions over its masters. Every process of a job must use the same
 * partition size or they will not find each other's keys.
 *
 * Pushes are asynchronous: psModelPush() encodes and sends one PS.PUSHGRAD
 * per partition and returns; up to 'push_window' model pushes may be
 * outstanding; the next push first waits for the oldest. Each PS.PUSHGRAD
 * carries "VERSION v" (the version of the partition the gradient was
 * computed from) and "ID <client id> <seq>", where seq grows by one per
 * (client, key). A push that has to be resent (timeout, reconnect, MOVED,
 * ASK, failover) is resent with the SAME seq, so the server applies it at
 * most once. Seqs start at the wall clock in microseconds at psConnect(),
 * so a restarted worker reusing a fixed client id still moves forward.
 *
 * Errors. Every call resets 'err' on entry. Replies of earlier asynchronous
 * pushes are read by later calls (psModelPush, psModelPull, psDrain, ...):
 * a push that finally fails (a server error other than STALE, or retries
 * exhausted) makes the call that reads its reply answer PS_ERR with 'err'
 * and 'errstr' describing that push, after doing its own work. STALE
 * rejects are not errors: they are counted in stats.stale_rejects.
 *
 * Lost state. libps remembers, per partition, the highest version it saw
 * acknowledged (push replies, pull replies). A key that answers "no such
 * key" after that, or a pull that answers a lower version, or a push whose
 * VERSION the server says it never reached, means the server lost
 * acknowledged writes: typically a master that restarted without
 * persistence (empty) or from an AOF that lagged (appendfsync everysec)
 * before a failover could happen, and whose replicas then resynced from it.
 * Such an event is announced (PS_EVENT_LOST_STATE, with the key, the node,
 * the version acknowledged and the version now), counted in
 * stats.lost_state and handled per lost_state_policy. README "Operations"
 * lists the server configurations that cannot lose acknowledged pushes.
 *
 * A psClient and the models used with it are not thread safe: use one
 * client per thread (or process).
 *
 * Signals. hiredis writes with write(2): a connection the server closed
 * raises SIGPIPE, which kills a process that does not ignore it. Ignore
 * SIGPIPE (signal(SIGPIPE, SIG_IGN), as ps-train does) so that a killed
 * connection is an error that libps retries.
 */
#ifndef PS_H
#define PS_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <hiredis/hiredis.h>

#ifdef __cplusplus
extern "C" {
#endif

#define PS_OK 0
#define PS_ERR -1

/* Values of psClient.err. */
#define PS_ERR_IO 1         /* socket error or timeout talking to a server */
#define PS_ERR_OTHER 2      /* anything else (see errstr) */
#define PS_ERR_PROTOCOL 3   /* unexpected reply shape from a server */
#define PS_ERR_SERVER 4     /* the server answered an error (errstr has it) */
#define PS_ERR_CLUSTER 5    /* no reachable node / slot map / too many redirects */
#define PS_ERR_OOM 6        /* out of memory */
#define PS_ERR_ARG 7        /* bad argument from the caller */
#define PS_ERR_AUTH 8       /* AUTH failed */
#define PS_ERR_DURABILITY 9 /* a node cannot keep wait_replicas replicas and the
                               policy is PS_DURABILITY_FAIL */
#define PS_ERR_LOST_STATE 10 /* a tensor this client saw vanished or went back
                                below a version it saw acknowledged (see
                                "Lost state" above) */
#define PS_ERR_NOKEY 11     /* psInfo(): the key does not exist */
#define PS_ERR_REBASE 12    /* psTableTombstones(): SINCE is past the log's horizon */

/* Default option values (used when the psOptions field is 0). */
#define PS_DEFAULT_CONNECT_TIMEOUT_MS 2000
#define PS_DEFAULT_COMMAND_TIMEOUT_MS 30000
#define PS_DEFAULT_MAX_RETRIES 10
#define PS_DEFAULT_RETRY_TIMEOUT_MS 30000 /* outlasts a Redis Cluster failover with
                                             the default cluster-node-timeout (15 s) */
#define PS_DEFAULT_BACKOFF_MS 20        /* sleeps are base * 2^attempt, capped at 2 s */
#define PS_DEFAULT_PUSH_WINDOW 2
#define PS_DEFAULT_WAIT_TIMEOUT_MS 1000
#define PS_DEFAULT_PARTITION_BYTES (1024 * 1024)
#define PS_DEFAULT_PROBE_MS 1000        /* re-probe of a degraded node's replicas */

/* psOptions.durability_policy: what to do when a node cannot satisfy
 * wait_replicas (a WAIT answers fewer replicas than asked: the node has no
 * replica, e.g. a promoted replica whose master is dead, or they lag). Each
 * node that turns degraded is announced once (PS_EVENT_DEGRADED), and again
 * when it is back to full durability (PS_EVENT_RESTORED), which happens by
 * itself when a replica (re)joins. */
#define PS_DURABILITY_DEGRADE 0 /* default: keep going with reduced durability.
                                   After the first short WAIT the node's pushes
                                   are not WAITed for (no wait_timeout_ms per
                                   push); they are counted in
                                   stats.unreplicated_pushes, and the node's
                                   replicas are re-probed (INFO replication)
                                   every probe_ms */
#define PS_DURABILITY_BLOCK 1   /* a push whose WAIT is short is not done: its
                                   WAIT is repeated until the replicas answer, so
                                   the push window fills and pushes block until
                                   redundancy returns */
#define PS_DURABILITY_FAIL 2    /* a short WAIT fails the call that reads it with
                                   PS_ERR_DURABILITY (the pushes were applied on
                                   the master, not known to be replicated) */

/* psOptions.lost_state_policy */
#define PS_LOST_STATE_STOP 0     /* default: the pull or push that finds the loss
                                    fails with PS_ERR_LOST_STATE */
#define PS_LOST_STATE_CONTINUE 1 /* announce and count it, then go on from what
                                    the server has (a pull answers its data, a push
                                    based on a version the server lost is resent as
                                    based on the server's); a vanished key still
                                    fails (there is nothing to go on from) */

/* Events (psOptions.on_event). */
#define PS_EVENT_DEGRADED 1     /* 'node' cannot satisfy wait_replicas */
#define PS_EVENT_RESTORED 2     /* 'node' satisfies wait_replicas again */
#define PS_EVENT_LOST_STATE 3   /* a lost-state event (also with policy STOP) */
#define PS_EVENT_PROBE_FAILED 4 /* a degraded node's replica probe (INFO replication)
                                   was refused or failed: the node stays degraded
                                   until one succeeds (once until restored) */

/* Called from inside libps calls (never from another thread) with a
 * one-line message naming the node ("host:port") and what happened. 'node'
 * and 'message' are valid during the call only. */
typedef void psEventFn(void *udata, int event, const char *node, const char *message);

/* psOptions.flags */
#define PS_FLAG_NO_PUSH_ID (1 << 0)      /* do not send "ID client seq" (servers without it) */
#define PS_FLAG_NO_PUSH_VERSION (1 << 1) /* do not send "VERSION v" */
#define PS_FLAG_RAW_IDS (1 << 2)         /* send table ids as raw uint64 lists, never as
                                            IDFORMAT EF (also: environment PS_RAW_IDS=1);
                                            docs/commands.md "Compressed id lists" */
/* Earlier names of the flags above, kept for source compatibility ("OPT"
 * names optimizers and optional arguments elsewhere). */
#define PS_OPT_NO_PUSH_ID PS_FLAG_NO_PUSH_ID
#define PS_OPT_NO_PUSH_VERSION PS_FLAG_NO_PUSH_VERSION

/* Connection options. Zero-initialize and set what you need: every field
 * left 0 / NULL takes the default named next to it. */
typedef struct psOptions {
    int connect_timeout_ms;   /* per TCP connect; PS_DEFAULT_CONNECT_TIMEOUT_MS */
    int command_timeout_ms;   /* waiting for a reply before the connection is
                                 declared dead and the command resent;
                                 PS_DEFAULT_COMMAND_TIMEOUT_MS, < 0 = none */
    const char *user;         /* AUTH user pass; NULL: env PS_USER, else none */
    const char *password;     /* NULL: env PS_PASSWORD, else no AUTH */
    int max_retries;          /* resends of one command after I/O errors,
                                 CLUSTERDOWN, TRYAGAIN, ...: a command is given up
                                 once it was resent at least max_retries times AND
                                 retry_timeout_ms passed since its first error;
                                 PS_DEFAULT_MAX_RETRIES, < 0 = none (fail at the
                                 first error). MOVED/ASK do not count (max 16 each) */
    int retry_timeout_ms;     /* the time budget above; PS_DEFAULT_RETRY_TIMEOUT_MS,
                                 < 0 = count only (give up after max_retries) */
    int backoff_ms;           /* base of the exponential backoff between retries;
                                 PS_DEFAULT_BACKOFF_MS */
    int push_window;          /* max outstanding model pushes; PS_DEFAULT_PUSH_WINDOW */
    int wait_replicas;        /* > 0: "WAIT n wait_timeout_ms" after the pushes of
                                 each model (or embedding table) push on every node
                                 before it counts as done; a short count is counted
                                 in stats.wait_short.
                                 When the connection dies before the WAIT answers
                                 (a master killed), the pushes it covered are resent
                                 with their seqs to whoever serves the slot next: the
                                 new master applies those its replica never got and
                                 answers the others from its exactly-once table */
    int wait_timeout_ms;      /* PS_DEFAULT_WAIT_TIMEOUT_MS */
    const char *client_id;    /* the ID used for exactly-once pushes;
                                 NULL: "<hostname>:<pid>:<random hex>" */
    size_t partition_bytes;   /* partition size for models that do not set
                                 their own; PS_DEFAULT_PARTITION_BYTES */
    int flags;                /* PS_FLAG_* */
    int durability_policy;    /* PS_DURABILITY_*; used when wait_replicas > 0 */
    int probe_ms;             /* PS_DEFAULT_PROBE_MS */
    int lost_state_policy;    /* PS_LOST_STATE_* */
    psEventFn *on_event;      /* NULL: libps writes each event to stderr */
    void *event_udata;
} psOptions;

/* Counters, cumulative since psConnect(). */
typedef struct psStats {
    uint64_t pushes;          /* partition pushes acknowledged (applied or duplicate) */
    uint64_t pulls;           /* partition pulls completed */
    uint64_t retries;         /* commands resent after an error */
    uint64_t moved;           /* MOVED redirects followed */
    uint64_t ask;             /* ASK redirects followed */
    uint64_t stale_rejects;   /* pushes answered STALE (not applied) */
    uint64_t push_errors;     /* pushes that finally failed */
    uint64_t reconnects;      /* connections re-established */
    uint64_t refreshes;       /* cluster slot map reloads */
    uint64_t wait_short;      /* WAITs that returned fewer replicas than asked */
    uint64_t bytes_sent;      /* tensor payload bytes sent (push blobs) */
    uint64_t bytes_received;  /* tensor payload bytes received (pull blobs) */
    uint64_t unreplicated_pushes; /* partition pushes acknowledged by a master that
                                     could not confirm wait_replicas replicas
                                     (PS_DURABILITY_DEGRADE) */
    uint64_t degraded_nodes;  /* nodes degraded now (announced, not restored) */
    uint64_t degraded_events; /* PS_EVENT_DEGRADED announced */
    uint64_t restored_events; /* PS_EVENT_RESTORED announced */
    uint64_t lost_state;      /* lost-state events (keys vanished or rolled back) */
    uint64_t rows_pulled;     /* embedding rows (ids) answered by shard pulls */
    uint64_t rows_pushed;     /* embedding rows (ids) in acknowledged shard pushes */
    uint64_t backlog_waits;   /* pushes answered BACKLOG (a relay's local ACCUM tensor
                                 full while the relay is down or behind) and resent after
                                 a backoff: backpressure, within the retry budget */
} psStats;

struct psClientPriv;

/* The connection context. 'err', 'errstr', 'cluster' and 'stats' are public
 * and read-only for the caller; the rest is private. */
typedef struct psClient {
    int err;                  /* 0 or PS_ERR_* of the last call */
    char errstr[256];         /* human readable message when err != 0 */
    int cluster;              /* 1 when talking to a Redis Cluster */
    char client_id[96];       /* the ID sent with pushes */
    psStats stats;
    struct psClientPriv *priv;
} psClient;

/* Wire formats of pushes and pulls (docs/commands.md "Wire formats"). */
typedef enum psWireFormat {
    PS_WIRE_F32 = 0,          /* raw float32 (default, lossless) */
    PS_WIRE_F16,
    PS_WIRE_BF16,
    PS_WIRE_I8,               /* f32 scale + int8 per element */
    PS_WIRE_TOPK              /* k largest magnitudes per partition */
} psWireFormat;

typedef struct psModel psModel;   /* opaque */
typedef struct psEmbed psEmbed;   /* opaque */

/* ------------------------------------------------------------------------
 * Connection
 * ------------------------------------------------------------------------ */

/* Connect to 'addrs': "host:port" or a comma separated list of seeds
 * "h1:p1,h2:p2". 'opt' may be NULL (all defaults). Cluster mode is detected
 * with CLUSTER SLOTS (a server answering "cluster support disabled" is a
 * standalone server). Standalone with several addresses (a master and its
 * replicas): commands go to the first address that answers; after an I/O
 * error or a READONLY reply the first address whose ROLE is master takes
 * over, so a replica promoted with REPLICAOF NO ONE (by hand or by Sentinel)
 * is found within the retry budget. A failed master must come back as a
 * replica, never as a second master. Returns NULL only when out of memory; otherwise check
 * c->err (e.g. PS_ERR_CLUSTER "cannot connect to any of ...") and free the
 * client with psClientFree() either way. */
psClient *psConnect(const char *addrs, const psOptions *opt);

/* Wait for every outstanding push reply. Returns PS_OK or PS_ERR if any of
 * them finally failed (err/errstr describe the first failure). */
int psDrain(psClient *c);

/* psCommandArgv() in two halves, to overlap a command with computing: Async
 * routes and sends the command and returns a handle (NULL with err set when
 * out of memory); the reply is read by this or any later call on the client
 * (retries and redirects as usual); Wait returns it like psCommandArgv()
 * and frees the handle. Every handle must be waited for, before
 * psClientFree(). Commands on one node keep their order. */
typedef struct psAsync psAsync;
psAsync *psCommandArgvAsync(psClient *c, const char *key, int argc, const char **argv,
                            const size_t *argvlen);
redisReply *psCommandWait(psClient *c, psAsync *a);

/* MULTI, the 'ncmd' commands (command i: argc[i], argv[i], argvlen[i] or
 * NULL for C strings; argvlen NULL: all C strings), EXEC, sent as one
 * request on the node of 'key': resent whole after a lost connection (the
 * server discards a transaction whose EXEC it never read), so the commands
 * run together or not at all. psCommandWait answers EXEC's reply (an array
 * of the commands' replies), or the first error a command was queued with
 * (a redirect or retry resends the whole transaction). A lost EXEC reply
 * may run the transaction twice: make it detectable. At most
 * PS_TX_MAX_COMMANDS commands. */
#define PS_TX_MAX_COMMANDS 16
psAsync *psTransactionAsync(psClient *c, const char *key, int ncmd, const int *argc,
                            const char *const *const *argv, const size_t *const *argvlen);

/* psTransactionAsync with "WAIT replicas timeout_ms" (replicas >= 1) in the
 * same request, right after EXEC: it goes wherever the transaction goes
 * (an ASK redirect included, where a WAIT of its own would go to the
 * slot's owner per the map) and counts the replicas that acknowledged the
 * transaction. psTransactionWait answers as psCommandWait and sets
 * *waited to WAIT's reply (the caller's to free), or NULL when the
 * transaction failed or was answered an error. psCommandWait drops it. */
psAsync *psTransactionWaitAsync(psClient *c, const char *key, int ncmd, const int *argc,
                                const char *const *const *argv, const size_t *const *argvlen,
                                int replicas, int timeout_ms);
redisReply *psTransactionWait(psClient *c, psAsync *a, redisReply **waited);

/* Exactly-once pushes under a caller's own ids (ps-train stream's journaled
 * batches): while 'seq' != 0, every push added (model partitions, table
 * shards) carries "ID <client_id> <seq>" with this one seq instead of its
 * key's next one, and later counted seqs of a key continue above it. The
 * caller keeps the seqs it sets increasing per (client_id, key), as the
 * server's exactly-once table requires (docs/commands.md), or re-sends a
 * past seq on purpose to have the server answer a duplicate. 0 returns to
 * per-key counting. PS_OK, or PS_ERR for a NULL client. */
int psSetPushSeq(psClient *c, uint64_t seq);

/* Close every connection (outstanding pushes are NOT waited for: call
 * psDrain() first) and free the client. NULL is allowed. */
void psClientFree(psClient *c);

/* Run one command routed by 'key' (NUL-terminated; NULL = any node) with
 * the same redirect / retry handling as the model calls. Returns the reply
 * (free it with freeReplyObject(); a server error is a REDIS_REPLY_ERROR
 * reply, as in hiredis) or NULL with err/errstr set. Outstanding push replies
 * read meanwhile are processed as usual. */
redisReply *psCommandArgv(psClient *c, const char *key, int argc,
                          const char **argv, const size_t *argvlen);

/* printf-style variant (hiredis format: %s, %b with a size_t length, ...). */
redisReply *psCommand(psClient *c, const char *key, const char *format, ...);

/* Run 'n' commands at once: command i is argvs[i] (argcs[i] arguments of
 * lengths argvlens[i]) routed by keys[i] (NULL = any node), all sent before
 * any reply is awaited (pipelined per node, one round trip), with the same
 * redirect / retry handling as psCommandArgv(). replies[i] receives reply i
 * (free each with freeReplyObject(); NULL when that command failed, see
 * err/errstr). Returns the number of replies received (n when all), or
 * PS_ERR when out of memory. */
int psCommandBatchArgv(psClient *c, int n, const char *const *keys, const int *argcs,
                       const char **const *argvs, const size_t *const *argvlens,
                       redisReply **replies);

/* ------------------------------------------------------------------------
 * Key information (PS.INFO)
 * ------------------------------------------------------------------------ */

/* An origin's row of a ring tensor's table (PS.RING STATE, PS.INFO
 * ring_origins): the highest seq of that origin's deltas applied here and
 * how many were applied. */
#define PS_RING_MAX_ORIGINS 64  /* origins one ring tensor may hear from */
#define PS_RING_ORIGIN_MAX 64   /* bytes of an origin (group) name */
typedef struct psRingOrigin {
    char name[PS_RING_ORIGIN_MAX + 1];
    uint64_t hwm;
    uint64_t applied;
} psRingOrigin;

/* What PS.INFO answers about one key (docs/commands.md "PS.INFO"): a tensor
 * (one partition of a model) or an embedding table (one shard). Fields the
 * reply does not carry stay 0 (e.g. the table fields of a tensor). */
typedef struct psKeyInfo {
    int is_table;             /* 1: an embedding table ("type" "embedding") */
    int ndim;                 /* tensor: its dimensions (1..8); table: 0 */
    uint64_t dims[8];         /* tensor: its shape */
    uint64_t elements;        /* tensor: float32 elements */
    int dim;                  /* table: floats per row */
    char optimizer[16];       /* lower case, as PS.CREATE's OPTIM ("adam", "accum") */
    char mode[8];             /* tensor: "async" or "sync" */
    uint64_t version;
    uint64_t step;            /* tensor: optimizer steps */
    long long maxstaleness;   /* -1: none */
    uint64_t sync_n;          /* tensor: pushes per sync round (0: async) */
    double lr;
    /* counters */
    uint64_t pushes, pulls, sets, stale_rejects, dedup_hits, nonfinite_rejects;
    /* table */
    uint64_t rows, memory, capacity, created, dropped, ids_pulled;
    uint64_t seed, ttl;       /* the rows' initializer: PS.CREATE SEED, INIT kind and its */
    char init[16];            /* two parameters (a row's initial values are a function of */
    double init_a, init_b;    /* these and the id); TTL */
    uint64_t evicted_ttl, evicted_capacity, evicted_explicit;
    /* ACCUM tensor (a relay's; module/core/accum.h) */
    uint64_t accum_pushes, pending_pushes, relay_seq, takes, take_acks;
    uint64_t max_backlog, backlog, backlog_refusals, pending_parts; /* backpressure */
    /* persisted round counters: takes, upstream pushes (parts) acknowledged, the
     * gradients they carried, the fewest and most per upstream push */
    uint64_t relay_takes, relay_rounds, relay_forwarded, relay_round_min, relay_round_max;
    /* ring-tracked tensor (PS.RING TRACK; docs/commands.md "PS.RING") */
    char ring_origin[PS_RING_ORIGIN_MAX + 1]; /* "" when not tracked */
    uint64_t ring_take_seq, ring_pending_seq, ring_pending_elems, ring_accumulated;
    uint64_t ring_fwd_entries, ring_fwd_bytes, ring_maxqueue, ring_applied;
    uint64_t ring_maxlag, ring_lag, ring_lag_refusals; /* MAXLAG: own pushes not yet in an
                                 acknowledged take, and the pushes refused at the bound */
    uint64_t ring_joining;     /* a table: 1 while a JOIN is in progress (JOINBEGIN .. JOINEND) */
    size_t ring_norigins;
    psRingOrigin ring_origins[PS_RING_MAX_ORIGINS];
} psKeyInfo;

/* PS.INFO 'key' into '*out' (routed by the key, with the usual retries).
 * Returns PS_OK, or PS_ERR with err PS_ERR_NOKEY (the key does not exist),
 * PS_ERR_SERVER (another error reply: errstr is its text, e.g. WRONGTYPE),
 * PS_ERR_PROTOCOL (a reply that is not a PS.INFO answer: errstr
 * "unexpected PS.INFO reply") or a connection error (as psCommand()). */
int psInfo(psClient *c, const char *key, psKeyInfo *out);

/* Parse a PS.INFO reply (a flat array of field / value pairs) into '*out'.
 * Returns PS_OK, or PS_ERR when 'reply' is not one (not an array, no
 * version or optimizer, a tensor without a shape, a table without a dim). */
int psInfoParse(const redisReply *reply, psKeyInfo *out);

/* ------------------------------------------------------------------------
 * Models
 * ------------------------------------------------------------------------ */

/* A new empty model of job 'job' (the key prefix). NULL when out of memory. */
psModel *psModelNew(const char *job);

/* Set the partition size of this model (bytes of float32 data per
 * partition, rounded down to whole rows, at least one row). Must be called
 * before the model is laid out. Returns PS_OK or PS_ERR. */
int psModelSetPartitionBytes(psModel *m, size_t bytes);

/* Add tensor 'name' (no ':' needed, any bytes but NUL) of 'ndim' (1..8)
 * dimensions 'dims' (each >= 1), row-major. Returns the tensor index
 * (0, 1, ... in order of addition) or PS_ERR (bad shape, duplicate name,
 * model already laid out). */
int psModelAddTensor(psModel *m, const char *name, int ndim, const uint64_t *dims);

/* Set the wire format of this model's pushes. For lossy formats the client
 * keeps an error-feedback residual per tensor: residual += grad; send
 * encode(residual); residual -= decode(sent). 'topk_ratio' (0 < r <= 1) is
 * the fraction of each partition's elements sent with PS_WIRE_TOPK (ignored
 * otherwise). Call before the first push. Returns PS_OK or PS_ERR. */
int psModelSetPushFormat(psModel *m, psWireFormat fmt, double topk_ratio);

/* Set the format pulls ask the server for: PS_WIRE_F32 (default, exact),
 * PS_WIRE_BF16 or PS_WIRE_F16 (half the bytes on the wire; the values are
 * rounded, the server's copy stays float32) or PS_WIRE_I8 (a quarter: one
 * scale per partition, max|x|/127, values rounded to a multiple of it).
 * Decoded into the caller's arrays as they arrive. Returns PS_OK or PS_ERR
 * (PS_WIRE_TOPK). */
int psModelSetPullFormat(psModel *m, psWireFormat fmt);

/* Fix the partition layout and key names (done implicitly by the first
 * psModelCreate*, psModelPull or psModelPush). Uses the model's partition
 * size, else the client's partition_bytes. Idempotent. PS_OK or PS_ERR. */
int psModelLayout(psClient *c, psModel *m);

/* Layout queries (partition queries need a laid-out model). */
int psModelNumTensors(const psModel *m);
int psModelTensorIndex(const psModel *m, const char *name);  /* or PS_ERR */
const char *psModelTensorName(const psModel *m, int t);
size_t psModelTensorElements(const psModel *m, int t);
int psModelNumPartitions(const psModel *m, int t);           /* 0 before layout */
const char *psModelPartitionKey(const psModel *m, int t, int p);
/* Rows [*first_row, *first_row + *nrows) of dimension 0, i.e. elements
 * [first_row * row_elems, (first_row + nrows) * row_elems) of the tensor. */
void psModelPartitionRows(const psModel *m, int t, int p, uint64_t *first_row, uint64_t *nrows);
/* Version of the partition's data in the last pull that completed
 * (psModelPull() or psModelPullWait() returned; 0 if none); pushes send it
 * as VERSION when psModelPush() gets no versions. */
uint64_t psModelPartitionVersion(const psModel *m, int t, int p);

/* Create every partition of tensor 't' with PS.CREATE key SHAPE <rows>
 * <dims[1..]> <create_opts> [NX]. 'create_opts' are extra PS.CREATE tokens
 * separated by spaces (e.g. "INIT HE SEED 7 OPTIM ADAM LR 0.001"), NULL for
 * none. A "SEED s" in create_opts is replaced per partition by
 * s + g, where g is the partition's index counted over the whole model
 * (tensor 0's partitions first, then tensor 1's, ...), so no two partitions
 * of a model draw the same random numbers and the init is reproducible.
 * With 'nx' existing keys are left alone. Returns the number of partitions
 * created (0 .. partitions) or PS_ERR. */
int psModelCreateTensor(psClient *c, psModel *m, int t, const char *create_opts, int nx);

/* psModelCreateTensor() for every tensor with the same options. Returns the
 * number of partitions created or PS_ERR. */
int psModelCreate(psClient *c, psModel *m, const char *create_opts, int nx);

/* DEL every partition key of the model. Returns the number deleted or PS_ERR. */
int psModelDelete(psClient *c, psModel *m);

/* Pull every partition (PS.PULL key [FORMAT f], pipelined to all nodes at
 * once, then gathered) into 'dst': dst[t] is an array of
 * psModelTensorElements(m, t) floats for tensor t (NULL: skip that tensor).
 * Each partition's data is decoded from libps's read buffer straight into
 * dst (no reply copy). 'versions_out' (NULL or one per tensor) receives the
 * minimum version over the tensor's partitions; each partition's own version
 * is kept in the model for the next push (psModelPartitionVersion()): pass
 * versions NULL to psModelPush() to send each partition the version its
 * part of the gradient was computed from. Returns PS_OK or PS_ERR. */
int psModelPull(psClient *c, psModel *m, float **dst, uint64_t *versions_out);

/* psModelPull() in two halves, to overlap a pull with computing: Async
 * sends the PS.PULLs and returns; the replies are decoded into dst[t] as
 * they are read, by this or any later call on the client (e.g. a
 * psModelPush() waiting for its window), so do not read or write the dst
 * arrays until psModelPullWait() has returned. Wait reads the rest and
 * returns like psModelPull() (with the first error of the pull, also when
 * an earlier call read it). One pull per model may be in flight; the dst
 * pointer array itself is copied. The partition versions pushes send
 * (versions NULL) move to those of this pull only when psModelPullWait()
 * returns: pushes sent meanwhile carry the versions of the previous pull,
 * the data a gradient computed before the wait came from. */
int psModelPullAsync(psClient *c, psModel *m, float **dst);
int psModelPullWait(psClient *c, psModel *m, uint64_t *versions_out);

/* psModelPull() that first waits for a newer model: each partition's
 * PS.PULL carries "MINVERSION v TIMEOUT timeout_ms" (docs/commands.md
 * "Blocking pulls"), so the server answers once the partition's version is
 * >= v. v is minversions[t] for every partition of tensor t, or, with
 * 'minversions' NULL, one above the partition's version in the last
 * completed pull (a partition never pulled does not wait): "the next
 * model". A synchronous worker behind a relay in sync mode (ps-relay
 * --sync) uses it to wait until its round's summed gradient went upstream
 * and the result was mirrored back. 'timeout_ms' must be > 0 and below the
 * client's command timeout. When some partition's wait timed out, the
 * whole model is pulled again without waiting, so 'dst' always holds one
 * consistent current copy. Returns the number of partitions whose wait
 * timed out (0: every one reached its version), or PS_ERR. */
int psModelPullMinVersion(psClient *c, psModel *m, float **dst, const uint64_t *minversions,
                          int timeout_ms, uint64_t *versions_out);

/* Push gradients: grads[t] is an array of psModelTensorElements(m, t)
 * floats (NULL: skip the tensor). One PS.PUSHGRAD per partition:
 *   PS.PUSHGRAD key blob FORMAT f [VERSION v] [ID client seq] [SCALE s]
 * where v is versions[t] when 'versions' is not NULL (the same for every
 * partition of tensor t), else the partition's own version from the last
 * completed pull (none if never pulled; preferred: partitions of one tensor
 * move apart, and a tensor's minimum overstates the staleness of the
 * others), and SCALE is sent when 'scale' != 1. The gradient is encoded into a buffer the client keeps
 * until the push is acknowledged (for resends): the caller may reuse
 * 'grads' as soon as this returns. Returns once the commands are written
 * and no more than push_window pushes are outstanding (a partition of 16 KB
 * or more is written with one sendmsg straight from that buffer, not copied
 * into hiredis's output buffer). A gradient holding NaN or Inf refuses
 * the whole call (PS_ERR_ARG naming the tensor) before anything is sent or
 * any error-feedback residual changes; so does an allocation failure
 * (PS_ERR_OOM). PS_OK or PS_ERR. */
int psModelPush(psClient *c, psModel *m, const float *const *grads,
                const uint64_t *versions, float scale);

/* Free a model (its keys on the server stay). Pushes of this model still
 * in flight are waited for first (as psDrain() would; a failure is recorded
 * on the client they were sent on) and a pull in flight is abandoned (no
 * more data is written into its dst arrays). Safe after psClientFree() of
 * that client too. NULL is allowed. */
void psModelFree(psModel *m);

/* ------------------------------------------------------------------------
 * Embedding tables (sharded)
 *
 * An embedding table 'name' of rows of 'dim' floats keyed by uint64 ids is
 * stored in 'nshards' server tables (PS.CREATE key EMBEDDING, see
 * docs/commands.md "Embedding tables"), one per shard, keys
 *   "<name>:<s>{<t>}"   for s = 0 .. nshards-1
 * where the hash tag t is the smallest non-negative integer (in decimal)
 * whose hash slot lies in [s*16384/nshards, (s+1)*16384/nshards) (integer
 * division): the shards sit on nshards different slots spread evenly over
 * the slot space, so a cluster whose masters own equal slot ranges serves
 * them from different masters. Id 'id' lives in shard
 *   psEmbedShardOf(id, nshards) = mix64(id) % nshards, where
 *   mix64(z): z ^= z >> 30; z *= 0xbf58476d1ce4e5b9; z ^= z >> 27;
 *             z *= 0x94d049bb133111eb; z ^= z >> 31     (uint64 arithmetic)
 * (the SplitMix64 finalizer). The Python package (redis_ps.Embedding) uses
 * the same keys and hash, so C and Python workers share a table. Every
 * process of a job must use the same nshards.
 *
 * Pulls send one "PS.PULL key IDS idblob [FORMAT f]" per shard that has
 * ids, all in flight together, and scatter the rows back in the caller's
 * order (repeated ids allowed). Pushes send one "PS.PUSHGRAD key grad
 * [FORMAT f] IDS idblob [VERSION v] [ID client seq]" per shard, where v is
 * the shard's version from the last pull and seq grows by one per (client,
 * shard): a resend after a lost reply carries the same seq and is applied
 * at most once. Pushes are asynchronous with up to push_window pushes of
 * the table outstanding; psDrain() waits for them too. Lost state (a
 * shard's key gone, or back below a version seen acknowledged) is handled
 * per lost_state_policy as for models. wait_replicas and durability_policy
 * apply as for model pushes: one WAIT per node after each table push's
 * shard pushes there; a WAIT lost with its connection resends the shard
 * pushes it covered (same seqs); stats.unreplicated_pushes counts shard
 * pushes.
 * ------------------------------------------------------------------------ */

/* psEmbedPush() flags */
#define PS_EMBED_SUM_DUPLICATES (1 << 0) /* sum the rows of repeated ids client-side
                                            (in the order given, as the server does)
                                            and send each id once */

/* The shard of 'id' in a table of 'nshards' shards (the hash above). */
int psEmbedShardOf(uint64_t id, int nshards);

/* A table handle 'name' (no '{' or '}') of 'dim' (1..65536) floats per
 * row over 'nshards' (1..16384) shards. Nothing is sent. NULL when out of
 * memory or on a bad argument. */
psEmbed *psEmbedNew(const char *name, int dim, int nshards);

/* The handle's row dim and shard count. */
int psEmbedDim(const psEmbed *e);
int psEmbedShards(const psEmbed *e);

/* Key of shard 's' (owned by the handle). */
const char *psEmbedShardKey(const psEmbed *e, int s);

/* Version of shard 's' seen by the last pull that reached it and was waited
 * for (0 if none). */
uint64_t psEmbedShardVersion(const psEmbed *e, int s);

/* Wire formats: pushes F32 (default), F16 or BF16 (rounded; without error
 * feedback the rounding error of every push is lost); pulls F32 (default),
 * F16 or BF16. PS_OK or PS_ERR (other formats: the server's tables take no
 * I8). */
int psEmbedSetPushFormat(psEmbed *e, psWireFormat fmt);
int psEmbedSetPullFormat(psEmbed *e, psWireFormat fmt);

/* Error feedback for F16/BF16 pushes: each id's rounding error is kept
 * client-side and added to its next pushed row, so the rows applied over
 * many pushes sum to the gradients sent to within one rounding. At most
 * 'max_ids' ids keep a residual (0 turns feedback off; any call drops the
 * residuals kept so far); an id pushed when the table is full goes without
 * feedback. Memory: at most (9 + 4 * dim) * 8/3 * max_ids bytes (+ 16
 * slots). With feedback, repeated ids of a push are summed client-side
 * (as PS_EMBED_SUM_DUPLICATES). Residuals are taken when a push is encoded,
 * as for models. PS_OK. */
int psEmbedSetErrorFeedback(psEmbed *e, size_t max_ids);

/* PS.CREATE <shard key> EMBEDDING DIM dim <create_opts> [NX] on every
 * shard, pipelined. 'create_opts' as for psModelCreateTensor(); a "SEED s"
 * is sent unchanged to every shard, so a row's initial values depend on
 * (s, id) only, not on the shard count (without SEED each shard draws its
 * own). Returns the number of shards created or PS_ERR. */
int psEmbedCreate(psClient *c, psEmbed *e, const char *create_opts, int nx);

/* DEL every shard key. Returns the number deleted or PS_ERR. */
int psEmbedDelete(psClient *c, psEmbed *e);

/* Pull the rows of the 'n' ids into 'dst' (n * dim floats, row i for
 * ids[i]). Ids not in the table answer their initial values (the server's
 * UNKNOWN rule). Each shard's pull is bounded by the server's
 * ps.max-tensor-bytes. Returns PS_OK or PS_ERR (dst partly written). */
int psEmbedPull(psClient *c, psEmbed *e, const uint64_t *ids, size_t n, float *dst);

/* psEmbedPull() in two halves, to overlap a pull with computing (as
 * psModelPullAsync()): Async splits the ids (the caller may reuse 'ids' as
 * soon as it returns), sends the shard pulls and returns; the rows are
 * written into 'dst' as the replies are read, by this or any later call on
 * the client (e.g. a psEmbedPush() waiting for its window), so do not read
 * or write 'dst' until psEmbedPullWait() has returned. Wait reads the rest
 * and returns like psEmbedPull(), with the pull's first error. One pull per
 * table may be in flight (n = 0 is one too: Wait returns PS_OK). The shard
 * versions pushes send (psEmbedShardVersion()) move to those of this pull
 * only when Wait returns: pushes sent meanwhile carry the versions of the
 * rows of the previous pull, which a gradient computed before the wait
 * came from. PS_ERR from Async leaves no pull in flight. Freeing the table
 * with a pull in flight abandons it (nothing more is written to 'dst'). */
int psEmbedPullAsync(psClient *c, psEmbed *e, const uint64_t *ids, size_t n, float *dst);
int psEmbedPullWait(psClient *c, psEmbed *e);

/* Push gradient rows: row i of 'grads' (n * dim floats) is the gradient
 * of ids[i]. 'flags' PS_EMBED_*. The rows are encoded into buffers the
 * handle keeps until acknowledged: 'ids' and 'grads' may be reused as soon
 * as this returns. Returns once sent and no more than push_window pushes of
 * this table are outstanding. PS_OK or PS_ERR. */
int psEmbedPush(psClient *c, psEmbed *e, const uint64_t *ids, size_t n, const float *grads,
                int flags);

/* Free the handle (pushes in flight are waited for first). NULL allowed. */
void psEmbedFree(psEmbed *e);

/* ------------------------------------------------------------------------
 * Bounded shutdown
 *
 * A call waits for a server that does not answer as long as psOptions allow
 * (retries up to retry_timeout_ms, a reply up to command_timeout_ms): half
 * a minute by default. A process that must stop sooner (a relay on SIGTERM)
 * gives its clients one psStop: once the application sets *flag (in its
 * signal handler), the calls of every client given that psStop end within
 * grace_ms of the first moment any of them saw it: a command still without
 * a reply then is given up (PS_ERR_IO, or PS_ERR_CLUSTER in cluster mode,
 * "stop requested"), backoff sleeps and reply waits are cut to the time
 * left, and the signal that sets the flag cuts short a wait in progress.
 * Commands answered in time are unaffected, so a stopping process can still
 * do its last work within the grace. Not cut short: a connection attempt
 * in progress (psOptions.connect_timeout_ms) and the blocking commands that
 * set a connection up (AUTH; ROLE or CLUSTER SLOTS of a map refresh, each
 * bounded by command_timeout_ms): a server that accepts connections but does
 * not answer them (stopped, not dead) can delay the end by that much.
 * ------------------------------------------------------------------------ */

typedef struct psStop {
    const volatile sig_atomic_t *flag; /* nonzero: stop requested (the application's) */
    int grace_ms;                      /* how long calls may go on after it is seen */
    int64_t seen_ms_;                  /* libps's: when it was first seen (0: not yet) */
} psStop;

/* Makes the calls of 'c' honour 'stop' (NULL: none); 'stop' may be shared
 * by several clients and must outlive them. */
void psSetStop(psClient *c, psStop *stop);

/* ------------------------------------------------------------------------
 * Snapshots and single tensor pulls
 *
 * One tensor key (a model partition, psModelPartitionKey) at a time, one
 * command each, with the engine's redirects and retries.
 * ------------------------------------------------------------------------ */

/* PS.SNAPSHOT key name: keeps the key's current values as snapshot 'name'
 * (a later one of the same name replaces it). PS_OK or PS_ERR. */
int psSnapshot(psClient *c, const char *key, const char *name);

/* PS.PULL key [AT name]: the key's 'n' float32 values (of snapshot 'at';
 * NULL: the current ones) into 'dst', and its version into *version (may be
 * NULL). PS_ERR, with c->err PS_ERR_NOKEY for a missing key, when the key
 * answers an error or does not hold exactly 'n' values. */
int psTensorPull(psClient *c, const char *key, const char *at, float *dst, size_t n,
                 uint64_t *version);

/* Whether the server has the ps module loaded: 1 yes, 0 no (Redis does not
 * know PS.PULL), PS_ERR on a connection error. It sends PS.PULL without
 * arguments, which the module refuses (arity) before any ACL check and
 * without running it, so a server without the module is left untouched. */
int psModuleLoaded(psClient *c);

#ifdef __cplusplus
}
#endif

/* The rest of the API, by responsibility. */
#include "ps_topology.h"
#include "ps_serve.h"

#endif /* PS_H */
