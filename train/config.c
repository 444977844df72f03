/* config.c -- a job's stored configuration: read, checked (config.h). */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "nn.h"
#include "sparse.h"
#include "util.h"
#include "wirefmt.h"

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
        else if (!strcmp(f, "train_off")) cfg->train_off = atoi(num);
        else if (!strcmp(f, "slice")) copy_str(cfg->slice, sizeof(cfg->slice), v);
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

