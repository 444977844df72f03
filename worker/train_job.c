/* train_job.c -- ps-train: job keys and config, init (status and snapshot:
 * train_status.c).
 *
 * A job is created by init in this order, so a re-run is safe and an
 * interrupted init is detected rather than half-repeated:
 *   1. HSETNX config state init     (0: the job exists; leave it alone)
 *   2. load the data to learn its size, check the layers fit it
 *   3. HSET the config fields, create the tensors with NX
 *   4. XGROUP CREATE ... MKSTREAM, XADD one task per shard per epoch
 *   5. HSET config state ready      (workers refuse a job not ready)
 * An init that fails after step 1 deletes what it wrote (config, tensors,
 * stream); a server without the module is refused at connect, before 1.
 * On an existing job, settings given that differ from its config are an
 * error, and a job with every task done is reported finished. */

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "clock.h"
#include "codec.h"
#include "protocol.h"
#include "train_job.h"

/* ========================================================================
 * Helpers
 * ====================================================================== */

const char *tr_key(char *buf, size_t len, const char *job, const char *what) {
    snprintf(buf, len, "psjob:{%s}:%s", job, what);
    return buf;
}

void tr_err(const trainOpts *o, const char *fmt, ...) {
    va_list ap;
    fprintf(stderr, "ps-train %s: ", o->cmd);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

/* The formats are those of PS_PROTO_FORMATS (common/protocol.h): 'push'
 * takes the dense ones (a model's pushes and pulls), otherwise the ones
 * tables take (a sparse job's pulls). */
int tr_parse_wire(const char *name, int push, psWireFormat *out) {
    if (name == NULL) {
        *out = PS_WIRE_F32;
        return 0;
    }
#define TR_WIRE_(ID, dense, table)                                                                 \
    if (!strcasecmp(name, #ID) && (push ? dense : table)) {                                        \
        *out = PS_WIRE_##ID;                                                                       \
        return 0;                                                                                  \
    }
    PS_PROTO_FORMATS(TR_WIRE_, TR_WIRE_)
#undef TR_WIRE_
    return -1;
}

int tr_parse_push(const char *name, pushFormat *out) {
    const char *topk = ps_format_name(PS_FMT_TOPK); /* "TOPK", then ":k" or ":ratio" */
    memset(out, 0, sizeof(*out));
    if (name == NULL || strncasecmp(name, topk, 4) != 0)
        return tr_parse_wire(name, 1, &out->fmt);
    out->fmt = PS_WIRE_TOPK;
    if (name[4] == '\0') {
        out->topk_ratio = 0.01;
        return 0;
    }
    const char *k = name + 5;
    if (name[4] != ':' || *k == '\0' || *k == '-' || *k == '+' || *k == ' ') return -1;
    char *end;
    errno = 0;
    if (strpbrk(k, ".%eE") == NULL) {
        long long n = strtoll(k, &end, 10);
        if (errno || *end != '\0' || n < 1) return -1;
        out->topk_count = n;
        return 0;
    }
    double r = strtod(k, &end);
    if (errno || end == k || r != r) return -1;
    if (*end == '%' && end[1] == '\0') r /= 100;
    else if (*end != '\0') return -1;
    if (!(r > 0 && r <= 1)) return -1;
    out->topk_ratio = r;
    return 0;
}

const char *tr_push_name(const pushFormat *pf, char *buf, size_t len) {
    static const char *const names[] = {
#define TR_NAME_(ID, dense, table) [PS_WIRE_##ID] = #ID,
        PS_PROTO_FORMATS(TR_NAME_, TR_NAME_)
#undef TR_NAME_
    };
    if (pf->fmt != PS_WIRE_TOPK) {
        snprintf(buf, len, "%s", names[pf->fmt]); /* lower case, as recorded in configs */
        for (char *p = buf; *p; p++) *p = (char)tolower((unsigned char)*p);
    }
    else if (pf->topk_count > 0)
        snprintf(buf, len, "topk:%lld", pf->topk_count);
    else {
        /* A fraction must keep its '.' (or exponent): "topk:1" is a count. */
        snprintf(buf, len, "topk:%.17g", pf->topk_ratio);
        if (strpbrk(buf + 5, ".eE") == NULL) snprintf(buf, len, "topk:%.1f", pf->topk_ratio);
    }
    return buf;
}

int tr_push_same(const pushFormat *a, const pushFormat *b) {
    return a->fmt == b->fmt && (a->fmt != PS_WIRE_TOPK || (a->topk_ratio == b->topk_ratio &&
                                                           a->topk_count == b->topk_count));
}

int tr_push_apply(psModel *m, const pushFormat *pf) {
    double r = pf->topk_ratio;
    if (pf->fmt == PS_WIRE_TOPK && pf->topk_count > 0) {
        size_t total = 0;
        for (int t = 0; t < psModelNumTensors(m); t++) total += psModelTensorElements(m, t);
        r = total > 0 ? (double)pf->topk_count / (double)total : 1;
        if (r > 1) r = 1;
    }
    return psModelSetPushFormat(m, pf->fmt, r);
}

double tr_wall(void) { return ps_wall_s(); }

double tr_now(void) { return ps_mono_s(); }

/* A signal cuts the sleep short (a stop request is seen at once). */
void tr_sleep_ms(long ms) { ps_sleep_ms(ms); }

/* 1 when the server knows PS.PULL, 0 after printing how to load the
 * module. It sends PS.PULL without arguments: Redis answers "unknown
 * command" before anything else when the module is missing, and an arity
 * error otherwise, before any ACL check (so the worker role needs no
 * +command and the ACL log stays clean) and without running it. Checked at
 * connect, before anything is written, so a server without the module is
 * left untouched. */
static int module_loaded(const trainOpts *o, psClient *c) {
    redisReply *r = psCommand(c, NULL, "PS.PULL");
    if (r == NULL) {
        tr_err(o, "--addr %s: %s", o->addr, c->errstr);
        return 0;
    }
    int missing = r->type == REDIS_REPLY_ERROR && strstr(r->str, "unknown command") != NULL;
    freeReplyObject(r);
    if (missing)
        tr_err(o, "--addr %s: the server does not have the ps module loaded: load build/ps.so "
                  "(redis-server --loadmodule /path/to/build/ps.so, or MODULE LOAD "
                  "/path/to/build/ps.so)", o->addr);
    return !missing;
}

int tr_parse_policies(const trainOpts *o, int *durability, int *lost_state) {
    const char *d = o->on_degraded ? o->on_degraded : "degrade";
    const char *l = o->on_lost_state ? o->on_lost_state : "stop";
    if (!strcmp(d, "degrade")) *durability = PS_DURABILITY_DEGRADE;
    else if (!strcmp(d, "block")) *durability = PS_DURABILITY_BLOCK;
    else if (!strcmp(d, "fail")) *durability = PS_DURABILITY_FAIL;
    else return -1;
    if (!strcmp(l, "stop")) *lost_state = PS_LOST_STATE_STOP;
    else if (!strcmp(l, "continue")) *lost_state = PS_LOST_STATE_CONTINUE;
    else return -1;
    return 0;
}

/* Copies INFO field 'name' ("run_id") of 'info' into buf ("?" when absent). */
static void info_value(const char *info, const char *name, char *buf, size_t len) {
    size_t n = strlen(name);
    snprintf(buf, len, "?");
    for (const char *l = info; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
        if (strncmp(l, name, n) == 0 && l[n] == ':') {
            size_t k = strcspn(l + n + 1, "\r\n");
            snprintf(buf, len, "%.*s", (int)(k < len ? k : len - 1), l + n + 1);
            return;
        }
    }
}

/* Says once per process which server(s) this command works on: the --addr
 * given, standalone or a cluster with its node and master counts (from
 * CLUSTER SLOTS), and the answering node's port, Redis version and run_id
 * (INFO server: a role needs +info|server, else "?"), so a job that reached
 * an unexpected server shows it in its first line. */
void tr_announce_server(const trainOpts *o, psClient *c) {
    static int done;
    char runid[48], version[32], port[16], role[16], where[160] = "standalone";
    if (done) return;
    done = 1;
    redisReply *r = psCommand(c, NULL, "INFO server");
    const char *info = r && r->type == REDIS_REPLY_STRING ? r->str : "";
    info_value(info, "run_id", runid, sizeof(runid));
    info_value(info, "redis_version", version, sizeof(version));
    info_value(info, "tcp_port", port, sizeof(port));
    if (r) freeReplyObject(r);
    if (c->cluster) {
        int nodes = 0, masters = 0;
        char seen[128][64];
        redisReply *s = psCommand(c, NULL, "CLUSTER SLOTS");
        for (size_t i = 0; s && s->type == REDIS_REPLY_ARRAY && i < s->elements; i++) {
            const redisReply *e = s->element[i];
            for (size_t k = 2; e->type == REDIS_REPLY_ARRAY && k < e->elements; k++) {
                const redisReply *n = e->element[k];
                if (n->type != REDIS_REPLY_ARRAY || n->elements < 2) continue;
                char id[64];
                snprintf(id, sizeof(id), "%s:%lld", n->element[0]->str, n->element[1]->integer);
                int j = 0;
                while (j < nodes && strcmp(seen[j], id) != 0) j++;
                if (j < nodes || nodes == 128) continue;
                snprintf(seen[nodes++], sizeof(seen[0]), "%s", id);
                if (k == 2) masters++;
            }
        }
        if (s) freeReplyObject(s);
        snprintf(where, sizeof(where), "cluster of %d nodes (%d masters)", nodes, masters);
        snprintf(role, sizeof(role), "node");
    } else {
        snprintf(role, sizeof(role), "server");
    }
    printf("ps-train %s: server %s: %s; answering %s on port %s: redis %s, run_id %s\n", o->cmd,
           o->addr, where, role, port, version, runid);
    fflush(stdout);
}

psClient *tr_connect(const trainOpts *o, int push_window, int wait_replicas) {
    psOptions opt = {0};
    opt.user = o->user;
    opt.password = o->password;
    opt.push_window = push_window;
    opt.wait_replicas = wait_replicas;
    tr_parse_policies(o, &opt.durability_policy, &opt.lost_state_policy);
    opt.on_event = o->on_event;
    opt.event_udata = o->event_udata;
    psClient *c = psConnect(o->addr, &opt);
    if (c == NULL) {
        tr_err(o, "out of memory");
        return NULL;
    }
    if (c->err) {
        tr_err(o, "--addr %s: %s", o->addr, c->errstr);
        psClientFree(c);
        return NULL;
    }
    if (!module_loaded(o, c)) {
        psClientFree(c);
        return NULL;
    }
    tr_announce_server(o, c);
    return c;
}

/* Runs a command routed by 'key'; returns the reply, or NULL after printing
 * the client error or the server error reply (which is freed). */
redisReply *tr_cmd_ok(const trainOpts *o, psClient *c, const char *key, const char *fmt, ...) {
    va_list ap;
    const char *argv[16];
    size_t argl[16];
    int argc = 0;
    /* A tiny space-free formatter: every %s is one argument, literals split
     * on spaces. Enough for the fixed commands used here. */
    char lit[512];
    snprintf(lit, sizeof(lit), "%s", fmt);
    va_start(ap, fmt);
    for (char *tok = strtok(lit, " "); tok && argc < 16; tok = strtok(NULL, " ")) {
        argv[argc] = strcmp(tok, "%s") == 0 ? va_arg(ap, const char *) : tok;
        argl[argc] = strlen(argv[argc]);
        argc++;
    }
    va_end(ap);
    redisReply *r = psCommandArgv(c, key, argc, argv, argl);
    if (r == NULL) {
        tr_err(o, "%s: %s", argv[0], c->errstr);
        return NULL;
    }
    if (r->type == REDIS_REPLY_ERROR) {
        tr_err(o, "%s %s: %s", argv[0], argc > 1 ? argv[1] : "", r->str);
        freeReplyObject(r);
        return NULL;
    }
    return r;
}

static void copy_str(char *dst, size_t cap, const redisReply *v) {
    size_t n = v->len < cap - 1 ? v->len : cap - 1;
    memcpy(dst, v->str, n);
    dst[n] = '\0';
}

int tr_load_config(psClient *c, const char *job, jobConfig *cfg) {
    char key[128];
    tr_key(key, sizeof(key), job, "config");
    memset(cfg, 0, sizeof(*cfg));
    cfg->label_col = -1;
    cfg->momentum = -1;
    redisReply *r = psCommand(c, key, "HGETALL %s", key);
    if (r == NULL || r->type != REDIS_REPLY_ARRAY) {
        fprintf(stderr, "ps-train: HGETALL %s: %s\n", key,
                r ? (r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply") : c->errstr);
        if (r) freeReplyObject(r);
        return -1;
    }
    if (r->elements == 0) {
        freeReplyObject(r);
        return 1;
    }
    for (size_t i = 0; i + 1 < r->elements; i += 2) {
        const char *f = r->element[i]->str;
        redisReply *v = r->element[i + 1];
        char num[64];
        copy_str(num, sizeof(num), v);
        if (!strcmp(f, "layers")) copy_str(cfg->layers, sizeof(cfg->layers), v);
        else if (!strcmp(f, "optim")) copy_str(cfg->optim, sizeof(cfg->optim), v);
        else if (!strcmp(f, "lr")) cfg->lr = strtod(num, NULL);
        else if (!strcmp(f, "batch")) cfg->batch = atoi(num);
        else if (!strcmp(f, "epochs")) cfg->epochs = atoi(num);
        else if (!strcmp(f, "shard_size")) cfg->shard_size = atoi(num);
        else if (!strcmp(f, "partition_bytes")) cfg->partition_bytes = atoll(num);
        else if (!strcmp(f, "data")) copy_str(cfg->data, sizeof(cfg->data), v);
        else if (!strcmp(f, "csv")) copy_str(cfg->csv, sizeof(cfg->csv), v);
        else if (!strcmp(f, "test_csv")) copy_str(cfg->test_csv, sizeof(cfg->test_csv), v);
        else if (!strcmp(f, "label_col")) cfg->label_col = atoi(num);
        else if (!strcmp(f, "train_n")) cfg->train_n = atoi(num);
        else if (!strcmp(f, "tasks")) cfg->tasks = atoll(num);
        else if (!strcmp(f, "seed")) cfg->seed = strtoull(num, NULL, 10);
        else if (!strcmp(f, "push_format"))
            copy_str(cfg->push_format, sizeof(cfg->push_format), v);
        else if (!strcmp(f, "pull_format"))
            copy_str(cfg->pull_format, sizeof(cfg->pull_format), v);
        else if (!strcmp(f, "state")) copy_str(cfg->state, sizeof(cfg->state), v);
        else if (!strcmp(f, "momentum")) {
            cfg->momentum = strtod(num, NULL);
            cfg->has_momentum = 1;
        } else if (!strcmp(f, "limit")) {
            cfg->limit = atoi(num);
            cfg->has_limit = 1;
        } else {
            tr_sparse_field(cfg, f, v);
        }
    }
    freeReplyObject(r);
    if (strcmp(cfg->state, "ready") == 0 && cfg->sp.model[0]) {
        char err[256];
        if (tr_sparse_check_config(cfg, err, sizeof(err)) != 0) {
            fprintf(stderr, "ps-train: job %s has a corrupt config (%s)\n", job, err);
            return -1;
        }
    }
    if (strcmp(cfg->state, "ready") == 0 && !cfg->sp.model[0]) {
        char err[256];
        cfg->nsizes = ps_parse_layers(cfg->layers, cfg->sizes, TR_MAX_LAYERS, err, sizeof(err));
        pushFormat pf;
        psWireFormat wf;
        int bad_pull = cfg->pull_format[0] && tr_parse_wire(cfg->pull_format, 1, &wf) != 0;
        if (cfg->nsizes < 0 || cfg->batch < 1 || bad_pull ||
            (cfg->push_format[0] && tr_parse_push(cfg->push_format, &pf) != 0)) {
            fprintf(stderr, "ps-train: job %s has a corrupt config (%s)\n", job,
                    cfg->nsizes < 0 ? err : cfg->batch < 1 ? "batch"
                                            : bad_pull     ? "pull_format" : "push_format");
            return -1;
        }
    }
    return 0;
}

psModel *tr_model(psClient *c, const char *job, const jobConfig *cfg) {
    psModel *m = psModelNew(job);
    if (m == NULL) return NULL;
    if (cfg->partition_bytes > 0) psModelSetPartitionBytes(m, (size_t)cfg->partition_bytes);
    for (int l = 0; l + 1 < cfg->nsizes; l++) {
        char name[16];
        uint64_t wd[2] = {(uint64_t)cfg->sizes[l + 1], (uint64_t)cfg->sizes[l]};
        uint64_t bd[1] = {(uint64_t)cfg->sizes[l + 1]};
        snprintf(name, sizeof(name), "W%d", l);
        if (psModelAddTensor(m, name, 2, wd) < 0) goto fail;
        snprintf(name, sizeof(name), "b%d", l);
        if (psModelAddTensor(m, name, 1, bd) < 0) goto fail;
    }
    if (psModelLayout(c, m) != PS_OK) goto fail;
    return m;
fail:
    fprintf(stderr, "ps-train: model layout failed: %s\n", c->err ? c->errstr : "bad shape");
    psModelFree(m);
    return NULL;
}

int tr_load_data(const jobConfig *cfg, const char *test_csv_override, int train, ps_dataset *ds) {
    char err[512];
    int rc;
    if (cfg->csv[0]) {
        const char *path = train ? cfg->csv : (test_csv_override ? test_csv_override
                                                : cfg->test_csv[0] ? cfg->test_csv : NULL);
        if (path == NULL) {
            fprintf(stderr, "ps-train: the job trains on CSV %s but has no test CSV "
                            "(--test-csv FILE)\n", cfg->csv);
            return -1;
        }
        rc = ps_dataset_load_csv(path, cfg->label_col, ds, err, sizeof(err));
    } else {
        rc = ps_dataset_fashion_mnist(cfg->data[0] ? cfg->data : NULL, train, ds, err, sizeof(err));
    }
    if (rc != 0) {
        fprintf(stderr, "ps-train: %s\n", err);
        return -1;
    }
    if (train && cfg->train_n > 0 && cfg->train_n < ds->n) ds->n = cfg->train_n;
    return 0;
}

/* Loads the test split that eval will use (the config's, or --test-csv)
 * and checks it fits the model: as many features as the input width,
 * labels below the output width. Returns 0, or -1 (printed). Run calls it
 * before the first step, so a bad test file fails before training. */
int tr_check_test(const trainOpts *o, const jobConfig *cfg) {
    ps_dataset ds = {0};
    int rc = -1;
    if (tr_load_data(cfg, o->test_csv, 0, &ds) != 0) return -1;
    if (ds.dim != cfg->sizes[0])
        tr_err(o, "the test data%s%s has %d features but the model's input width is %d",
               cfg->csv[0] ? " " : "", cfg->csv[0] ? (o->test_csv ? o->test_csv : cfg->test_csv)
                                                    : "", ds.dim, cfg->sizes[0]);
    else if (ds.nclasses > cfg->sizes[cfg->nsizes - 1])
        tr_err(o, "the test data has labels up to %d but the model's output width is %d",
               ds.nclasses - 1, cfg->sizes[cfg->nsizes - 1]);
    else
        rc = 0;
    ps_dataset_free(&ds);
    return rc;
}

/* ========================================================================
 * init
 * ====================================================================== */

int tr_check_push_format(const trainOpts *o, const jobConfig *cfg) {
    pushFormat mine, job;
    if (o->push_format == NULL || cfg->push_format[0] == '\0') return 0;
    if (tr_parse_push(o->push_format, &mine) != 0 || tr_parse_push(cfg->push_format, &job) != 0 ||
        !tr_push_same(&mine, &job)) {
        tr_err(o, "--push-format %s does not match job %s's %s (set by init; every worker of a "
               "job pushes the same format)", o->push_format, o->job, cfg->push_format);
        return -1;
    }
    return 0;
}

/* DEL the job's non-tensor keys and, when its config is known, its tensors. */
static int delete_job(const trainOpts *o, psClient *c) {
    jobConfig cfg;
    char k[4][128];
    int rc = tr_load_config(c, o->job, &cfg);
    if (rc < 0) return -1;
    if (rc == 0 && cfg.nsizes > 0) {
        psModel *m = tr_model(c, o->job, &cfg);
        if (m == NULL) return -1;
        int n = psModelDelete(c, m);
        psModelFree(m);
        if (n < 0) {
            tr_err(o, "deleting the tensors: %s", c->errstr);
            return -1;
        }
        printf("ps-train %s: --reset: deleted %d tensor keys of job %s\n", o->cmd, n, o->job);
    }
    if (rc == 0 && cfg.sp.model[0] && tr_sparse_delete(o, c, &cfg) != 0) return -1;
    tr_key(k[0], 128, o->job, "config");
    tr_key(k[1], 128, o->job, "tasks");
    tr_key(k[2], 128, o->job, "progress");
    tr_key(k[3], 128, o->job, "done");
    redisReply *r = tr_cmd_ok(o, c, k[0], "DEL %s %s %s %s", k[0], k[1], k[2], k[3]);
    if (r == NULL) return -1;
    freeReplyObject(r);
    return 0;
}

/* Creates the model tensors of 'cfg' with NX. Returns 0 or -1. */
static int create_tensors(const trainOpts *o, psClient *c, psModel *m, const jobConfig *cfg) {
    char wopts[256], bopts[256], extra[64] = "";
    if (o->momentum >= 0) snprintf(extra, sizeof(extra), " MOMENTUM %.17g", o->momentum);
    snprintf(wopts, sizeof(wopts), "INIT HE SEED %llu OPTIM %s LR %.17g%s",
             (unsigned long long)cfg->seed, cfg->optim, cfg->lr, extra);
    snprintf(bopts, sizeof(bopts), "INIT ZEROS OPTIM %s LR %.17g%s", cfg->optim, cfg->lr, extra);
    int created = 0, parts = 0;
    for (int t = 0; t < psModelNumTensors(m); t++) {
        int n = psModelCreateTensor(c, m, t, t % 2 == 0 ? wopts : bopts, 1);
        if (n < 0) {
            tr_err(o, "creating tensor %s: %s", psModelTensorName(m, t), c->errstr);
            return -1;
        }
        created += n;
        parts += psModelNumPartitions(m, t);
    }
    if (created == parts) {
        printf("ps-train %s: model %s: %d tensors in %d keys (%d created), optimizer %s lr %g\n",
               o->cmd, o->job, psModelNumTensors(m), parts, created, cfg->optim, cfg->lr);
        return 0;
    }
    /* Keys that existed keep their own optimizer (e.g. a relay's ACCUM tensors, whose
     * upstream holds the real one): say what the server has, not what NX skipped. */
    char have[32] = "?", lr[32] = "?";
    const char *key0 = psModelPartitionKey(m, 0, 0);
    psKeyInfo ki;
    if (psInfo(c, key0, &ki) == PS_OK) {
        snprintf(have, sizeof(have), "%s", ki.optimizer);
        snprintf(lr, sizeof(lr), "%g", ki.lr);
    }
    printf("ps-train %s: model %s: %d tensors in %d keys (%d created, %d existed and keep their "
           "settings: %s holds optimizer %s lr %s)\n", o->cmd, o->job, psModelNumTensors(m),
           parts, created, parts - created, key0, have, lr);
    return 0;
}

long long tr_fill_tasks(const trainOpts *o, psClient *c, const jobConfig *cfg, long long total,
                        long long per) {
    char key[128];
    tr_key(key, sizeof(key), o->job, "tasks");
    redisReply *r = psCommand(c, key, "XGROUP CREATE %s %s 0 MKSTREAM", key, TR_GROUP);
    if (r == NULL || (r->type == REDIS_REPLY_ERROR && strncmp(r->str, "BUSYGROUP", 9) != 0)) {
        tr_err(o, "XGROUP CREATE %s: %s", key, r ? r->str : c->errstr);
        if (r) freeReplyObject(r);
        return -1;
    }
    freeReplyObject(r);
    long long nshards = (total + per - 1) / per;
    long long *order = malloc((size_t)nshards * sizeof(long long));
    if (order == NULL) return -1;
    PSRng rng;
    ps_rng_seed(&rng, cfg->seed * 0x9E3779B97F4A7C15ULL + 17);
    long long n = 0;
    for (int e = 1; e <= cfg->epochs; e++) {
        for (long long i = 0; i < nshards; i++) order[i] = i;
        for (long long i = nshards - 1; i > 0; i--) {
            long long j = (long long)ps_rng_below(&rng, (uint64_t)i + 1), t = order[i];
            order[i] = order[j];
            order[j] = t;
        }
        for (long long i = 0; i < nshards; i++) {
            long long start = order[i] * per;
            long long cnt = total - start < per ? total - start : per;
            r = psCommand(c, key, "XADD %s * epoch %d start %lld count %lld", key, e, start, cnt);
            if (r == NULL || r->type == REDIS_REPLY_ERROR) {
                tr_err(o, "XADD %s: %s", key, r ? r->str : c->errstr);
                if (r) freeReplyObject(r);
                free(order);
                return -1;
            }
            freeReplyObject(r);
            n++;
        }
    }
    free(order);
    return n;
}

void tr_add_diff(char *out, size_t len, const char *fmt, ...) {
    size_t n = strlen(out);
    va_list ap;
    if (n + 3 >= len) return;
    if (n) {
        strcpy(out + n, ", ");
        n += 2;
    }
    va_start(ap, fmt);
    vsnprintf(out + n, len - n, fmt, ap);
    va_end(ap);
}

/* Lists in 'out' every job setting given on the command line that differs
 * from the existing job's config, as "--flag given (job: stored)". Returns
 * how many differ. Flags not given are not compared: a rerun may leave them
 * out. */
static int config_diff(const trainOpts *o, const jobConfig *cfg, char *out, size_t len) {
    int n = 0;
    out[0] = '\0';
#define DIFF(cond, ...) do { if (cond) { tr_add_diff(out, len, __VA_ARGS__); n++; } } while (0)
    if (tr_given(o, "--layers")) {
        int sizes[TR_MAX_LAYERS], k = ps_parse_layers(o->layers, sizes, TR_MAX_LAYERS, NULL, 0);
        int same = k == cfg->nsizes && !memcmp(sizes, cfg->sizes, (size_t)k * sizeof(int));
        DIFF(!same, "--layers %s (job: %s)", o->layers, cfg->layers);
    }
    DIFF(tr_given(o, "--optim") && strcasecmp(o->optim, cfg->optim), "--optim %s (job: %s)",
         o->optim, cfg->optim);
    DIFF(tr_given(o, "--lr") && o->lr != cfg->lr, "--lr %g (job: %g)", o->lr, cfg->lr);
    char mom[32] = "server default";
    if (cfg->momentum >= 0) snprintf(mom, sizeof(mom), "%g", cfg->momentum);
    DIFF(tr_given(o, "--momentum") && cfg->has_momentum && o->momentum != cfg->momentum,
         "--momentum %g (job: %s)", o->momentum, mom);
    DIFF(tr_given(o, "--seed") && o->seed != cfg->seed, "--seed %llu (job: %llu)",
         (unsigned long long)o->seed, (unsigned long long)cfg->seed);
    DIFF(tr_given(o, "--epochs") && o->epochs != cfg->epochs, "--epochs %d (job: %d)", o->epochs,
         cfg->epochs);
    DIFF(tr_given(o, "--batch") && o->batch != cfg->batch, "--batch %d (job: %d)", o->batch,
         cfg->batch);
    DIFF(tr_given(o, "--shard-size") && o->shard_size != cfg->shard_size,
         "--shard-size %d (job: %d)", o->shard_size, cfg->shard_size);
    DIFF(tr_given(o, "--partition-bytes") && o->partition_bytes != cfg->partition_bytes,
         "--partition-bytes %lld (job: %lld)", o->partition_bytes, cfg->partition_bytes);
    DIFF(tr_given(o, "--data") && strcmp(o->data, cfg->data), "--data %s (job: %s)", o->data,
         cfg->data[0] ? cfg->data : "default");
    DIFF(tr_given(o, "--csv") && strcmp(o->csv, cfg->csv), "--csv %s (job: %s)", o->csv,
         cfg->csv[0] ? cfg->csv : "none, Fashion-MNIST");
    DIFF(tr_given(o, "--test-csv") && strcmp(o->test_csv, cfg->test_csv),
         "--test-csv %s (job: %s)", o->test_csv, cfg->test_csv[0] ? cfg->test_csv : "none");
    DIFF(tr_given(o, "--label-col") && o->label_col != cfg->label_col,
         "--label-col %d (job: %d)", o->label_col, cfg->label_col);
    DIFF(tr_given(o, "--limit") && cfg->has_limit && o->limit != cfg->limit,
         "--limit %d (job: %d)", o->limit, cfg->limit);
#undef DIFF
    return n + tr_sparse_diff(o, cfg, out, len);
}

int tr_progress(const trainOpts *o, psClient *c, long long *tasks, long long *samples) {
    char dkey[128], pkey[128];
    tr_key(dkey, sizeof(dkey), o->job, "done");
    tr_key(pkey, sizeof(pkey), o->job, "progress");
    redisReply *r = tr_cmd_ok(o, c, dkey, "HLEN %s", dkey);
    if (r == NULL) return -1;
    *tasks = r->type == REDIS_REPLY_INTEGER ? r->integer : 0;
    freeReplyObject(r);
    *samples = 0;
    if ((r = tr_cmd_ok(o, c, pkey, "HGETALL %s", pkey)) == NULL) return -1;
    for (size_t i = 0; r->type == REDIS_REPLY_ARRAY && i + 1 < r->elements; i += 2) {
        const char *f = r->element[i]->str;
        size_t n = strlen(f);
        if (!strncmp(f, "w:", 2) && n > 10 && !strcmp(f + n - 8, ":samples"))
            *samples += atoll(r->element[i + 1]->str);
    }
    freeReplyObject(r);
    return 0;
}

/* init/run on a job that exists: an error when a setting given differs
 * (TR_EXIT_USAGE), TR_EXIT_FINISHED when every task is trained, else
 * TR_EXIT_OK to continue it. */
static int existing_job(const trainOpts *o, psClient *c, const jobConfig *cfg) {
    char diff[1024];
    if (config_diff(o, cfg, diff, sizeof(diff)) > 0) {
        tr_err(o, "job %s exists with other settings: %s. Use --reset to delete it and start "
                  "over, or another --job name", o->job, diff);
        return TR_EXIT_USAGE;
    }
    long long done, samples;
    if (tr_progress(o, c, &done, &samples) != 0) return TR_EXIT_FAIL;
    if (cfg->tasks > 0 && done >= cfg->tasks) {
        tr_err(o, "job %s is finished: all %lld tasks were trained. See its accuracy with "
                  "'ps-train eval --addr %s --job %s'; train again with --reset or another "
                  "--job name", o->job, cfg->tasks, o->addr, o->job);
        return TR_EXIT_FINISHED;
    }
    printf("ps-train %s: job %s exists (layers %s, %lld of %lld tasks trained); continuing it\n",
           o->cmd, o->job, cfg->layers, done, cfg->tasks);
    return TR_EXIT_OK;
}

int tr_cmd_init(const trainOpts *o) {
    char ckey[128];
    int status = TR_EXIT_FAIL;
    psModel *m = NULL;
    ps_dataset ds = {0};
    jobConfig cfg;
    psClient *c = tr_connect(o, 0, 0);
    if (c == NULL) return TR_EXIT_FAIL;
    tr_key(ckey, sizeof(ckey), o->job, "config");
    if (o->reset && delete_job(o, c) != 0) goto out;

    redisReply *r = tr_cmd_ok(o, c, ckey, "HSETNX %s state init", ckey);
    if (r == NULL) goto out;
    int fresh = r->type == REDIS_REPLY_INTEGER && r->integer == 1;
    freeReplyObject(r);
    if (!fresh) {
        if (tr_load_config(c, o->job, &cfg) != 0) goto out;
        if (strcmp(cfg.state, "ready") != 0) {
            tr_err(o, "job %s: an earlier init did not finish (state %s); rerun with --reset",
                   o->job, cfg.state);
            goto out;
        }
        if (tr_check_push_format(o, &cfg) != 0) {
            status = TR_EXIT_USAGE;
            goto out;
        }
        status = existing_job(o, c, &cfg);
        goto out;
    }

    if (o->model) {
        /* A sparse job (train_sparse_job.c) makes its own config and keys. */
        if ((status = tr_sparse_init(o, c)) == TR_EXIT_OK) goto out;
        goto undo;
    }
    /* Fresh job: build the config from the flags and the data. */
    memset(&cfg, 0, sizeof(cfg));
    snprintf(cfg.layers, sizeof(cfg.layers), "%s", o->layers);
    char err[256];
    cfg.nsizes = ps_parse_layers(cfg.layers, cfg.sizes, TR_MAX_LAYERS, err, sizeof(err));
    for (size_t i = 0; o->optim[i] && i + 1 < sizeof(cfg.optim); i++)
        cfg.optim[i] = (char)(o->optim[i] >= 'a' && o->optim[i] <= 'z' ? o->optim[i] - 32
                                                                       : o->optim[i]);
    cfg.lr = o->lr;
    cfg.batch = o->batch > 0 ? o->batch : 64;
    cfg.epochs = o->epochs;
    cfg.shard_size = o->shard_size;
    cfg.partition_bytes = o->partition_bytes;
    cfg.seed = o->seed;
    cfg.label_col = o->label_col;
    pushFormat pf;
    tr_parse_push(o->push_format, &pf); /* validated with the flags */
    tr_push_name(&pf, cfg.push_format, sizeof(cfg.push_format));
    /* TOPK shrinks a push ~50x, so the dense model pull is then nearly all
     * of a step's bytes: a TOPK job pulls I8 (a quarter of F32) unless a
     * worker asks otherwise. Measured on a 100 Mbit/s link (make
     * bench-shaped): TOPK 1% with F32 pulls 1.9x F32's samples/s, with I8
     * pulls about 7x, at F32's accuracy (docs/benchmarks.md). */
    snprintf(cfg.pull_format, sizeof(cfg.pull_format), "%s",
             pf.fmt == PS_WIRE_TOPK ? "i8" : "f32");
    if (o->data) snprintf(cfg.data, sizeof(cfg.data), "%s", o->data);
    if (o->csv) snprintf(cfg.csv, sizeof(cfg.csv), "%s", o->csv);
    if (o->test_csv) snprintf(cfg.test_csv, sizeof(cfg.test_csv), "%s", o->test_csv);
    if (tr_load_data(&cfg, NULL, 1, &ds) != 0) goto undo;
    if (cfg.sizes[0] != ds.dim) {
        tr_err(o, "--layers: input width %d does not match the data's %d features", cfg.sizes[0],
               ds.dim);
        status = TR_EXIT_USAGE;
        goto undo;
    }
    if (cfg.sizes[cfg.nsizes - 1] < ds.nclasses) {
        tr_err(o, "--layers: output width %d is below the data's %d classes",
               cfg.sizes[cfg.nsizes - 1], ds.nclasses);
        status = TR_EXIT_USAGE;
        goto undo;
    }
    cfg.train_n = o->limit > 0 && o->limit < ds.n ? o->limit : ds.n;
    if (cfg.test_csv[0] && tr_check_test(o, &cfg) != 0) {
        status = TR_EXIT_USAGE;
        goto undo;
    }

    char nums[10][32];
    snprintf(nums[0], 32, "%.17g", cfg.lr);
    snprintf(nums[1], 32, "%d", cfg.batch);
    snprintf(nums[2], 32, "%d", cfg.epochs);
    snprintf(nums[3], 32, "%d", cfg.shard_size);
    snprintf(nums[4], 32, "%lld", cfg.partition_bytes);
    snprintf(nums[5], 32, "%d", cfg.label_col);
    snprintf(nums[6], 32, "%d", cfg.train_n);
    snprintf(nums[7], 32, "%llu", (unsigned long long)cfg.seed);
    snprintf(nums[8], 32, "%.17g", o->momentum < 0 ? -1.0 : o->momentum);
    snprintf(nums[9], 32, "%d", o->limit);
    {
        const char *argv[] = {"HSET", ckey, "layers", cfg.layers, "optim", cfg.optim,
                              "lr", nums[0], "batch", nums[1], "epochs", nums[2],
                              "shard_size", nums[3], "partition_bytes", nums[4],
                              "data", cfg.data, "csv", cfg.csv, "test_csv", cfg.test_csv,
                              "label_col", nums[5], "train_n", nums[6], "seed", nums[7],
                              "momentum", nums[8], "limit", nums[9],
                              "push_format", cfg.push_format,
                              "pull_format", cfg.pull_format};
        int argc = (int)(sizeof(argv) / sizeof(argv[0]));
        size_t argl[sizeof(argv) / sizeof(argv[0])];
        for (int i = 0; i < argc; i++) argl[i] = strlen(argv[i]);
        r = psCommandArgv(c, ckey, argc, argv, argl);
        if (r == NULL || r->type == REDIS_REPLY_ERROR) {
            tr_err(o, "HSET %s: %s", ckey, r ? r->str : c->errstr);
            if (r) freeReplyObject(r);
            goto undo;
        }
        freeReplyObject(r);
    }
    if ((m = tr_model(c, o->job, &cfg)) == NULL) goto undo;
    if (create_tensors(o, c, m, &cfg) != 0) goto undo;
    cfg.tasks = tr_fill_tasks(o, c, &cfg, cfg.train_n, cfg.shard_size);
    if (cfg.tasks < 0) goto undo;
    char ntasks[32];
    snprintf(ntasks, sizeof(ntasks), "%lld", cfg.tasks);
    r = tr_cmd_ok(o, c, ckey, "HSET %s tasks %s state ready", ckey, ntasks);
    if (r == NULL) goto out;
    freeReplyObject(r);
    printf("ps-train %s: job %s: %d samples, %d epochs, shards of %d -> %lld tasks; batch %d\n",
           o->cmd, o->job, cfg.train_n, cfg.epochs, cfg.shard_size, cfg.tasks, cfg.batch);
    status = TR_EXIT_OK;
    goto out;

undo:
    /* This init made the job (HSETNX answered 1): remove what it wrote, so
     * no half-made job stays behind and init can be rerun. */
    if (m) psModelDelete(c, m);
    {
        char tkey[128];
        tr_key(tkey, sizeof(tkey), o->job, "tasks");
        r = psCommand(c, ckey, "DEL %s %s", ckey, tkey);
        if (r) freeReplyObject(r);
    }
out:
    ps_dataset_free(&ds);
    psModelFree(m);
    psClientFree(c);
    return status;
}
