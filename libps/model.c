/* model.c -- libps models: definition (tensors, formats), the partition
 * layout and key names, layout queries, PS.CREATE and DEL of every
 * partition. Pulls and pushes are in model_io.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "model.h"
#include "raw.h"
#include "wire.h"

/* ========================================================================
 * Definition and layout
 * ======================================================================== */

psModel *psModelNew(const char *job) {
    psModel *m = calloc(1, sizeof(*m));
    if (m == NULL) return NULL;
    if ((m->job = strdup(job ? job : "ps")) == NULL) {
        free(m);
        return NULL;
    }
    m->push_fmt = PS_FMT_F32;
    m->topk_ratio = 0.01;
    psi_user_init(&m->user, "model", m->job,
                  " (never seen by this client: not created yet, or created with another "
                  "partition size?)", 0);
    snprintf(m->user.shape_hint, sizeof(m->user.shape_hint), "shape differs from the model's?");
    return m;
}

int psModelSetPartitionBytes(psModel *m, size_t bytes) {
    if (m->laid_out || bytes == 0) return PS_ERR;
    m->partition_bytes = bytes;
    return PS_OK;
}

int psModelAddTensor(psModel *m, const char *name, int ndim, const uint64_t *dims) {
    psTensor *t;
    uint64_t nelem;
    int i;
    if (m->laid_out || name == NULL || *name == '\0' || ndim < 1 || ndim > PS_MAX_DIMS ||
        ps_shape_check((uint32_t)ndim, dims, 0, &nelem, NULL) != 0 || nelem > SIZE_MAX / 8)
        return PS_ERR;
    if (psModelTensorIndex(m, name) >= 0) return PS_ERR;
    if (m->ntensors == m->tcap) {
        int cap = m->tcap ? m->tcap * 2 : 8;
        psTensor *nt = realloc(m->tensors, sizeof(*nt) * (size_t)cap);
        if (nt == NULL) return PS_ERR;
        m->tensors = nt;
        m->tcap = cap;
    }
    t = &m->tensors[m->ntensors];
    memset(t, 0, sizeof(*t));
    if ((t->name = strdup(name)) == NULL) return PS_ERR;
    t->ndim = ndim;
    for (i = 0; i < ndim; i++) t->dims[i] = dims[i];
    t->elements = (size_t)nelem;
    t->row_elems = (size_t)(nelem / dims[0]);
    return m->ntensors++;
}

int psModelSetPushFormat(psModel *m, psWireFormat fmt, double topk_ratio) {
    ps_format f; /* a tensor push takes every format (common/protocol.h) */
    if (psi_format(fmt, &f) != 0) return PS_ERR;
    if (f == PS_FMT_TOPK && !(topk_ratio > 0 && topk_ratio <= 1)) return PS_ERR;
    m->push_fmt = f;
    if (f == PS_FMT_TOPK) m->topk_ratio = topk_ratio;
    return PS_OK;
}

int psModelSetPullFormat(psModel *m, psWireFormat fmt) {
    ps_format f; /* a pull answers a dense format */
    if (psi_format(fmt, &f) != 0 || !ps_proto_format_dense(f)) return PS_ERR;
    m->pull_fmt = f;
    return PS_OK;
}

int psModelLayout(psClient *c, psModel *m) {
    size_t pb = m->partition_bytes ? m->partition_bytes : c->priv->partition_bytes;
    int ti, global = 0;
    if (m->laid_out) return PS_OK;
    if (m->ntensors == 0) {
        psi_set_error(c, PS_ERR_ARG, "model '%s' has no tensors", m->job);
        return PS_ERR;
    }
    for (ti = 0; ti < m->ntensors; ti++) {
        psTensor *t = &m->tensors[ti];
        uint64_t rows = t->dims[0], rpp, base, extra, row = 0;
        size_t row_bytes = t->row_elems * sizeof(float);
        int p, nparts;
        rpp = row_bytes >= pb ? 1 : pb / row_bytes;
        nparts = (int)((rows + rpp - 1) / rpp);
        base = rows / (uint64_t)nparts;
        extra = rows % (uint64_t)nparts;
        t->parts = calloc((size_t)nparts, sizeof(psPart));
        if (t->parts == NULL) goto oom;
        t->nparts = nparts;
        t->first_part = global;
        global += nparts;
        for (p = 0; p < nparts; p++) {
            psPart *pp = &t->parts[p];
            size_t klen = strlen(m->job) + strlen(t->name) + 24;
            pp->nrows = base + ((uint64_t)p < extra ? 1 : 0);
            pp->first_row = row;
            row += pp->nrows;
            pp->offset = (size_t)pp->first_row * t->row_elems;
            pp->elements = (size_t)pp->nrows * t->row_elems;
            if (pp->elements > m->max_part_elems) m->max_part_elems = pp->elements;
            if ((pp->k.key = malloc(klen)) == NULL) goto oom;
            snprintf(pp->k.key, klen, "%s:%s:%d", m->job, t->name, p);
            pp->k.keylen = strlen(pp->k.key);
        }
    }
    m->laid_out = 1;
    return PS_OK;
oom:
    psi_set_error(c, PS_ERR_OOM, "out of memory");
    return PS_ERR;
}

int psModelNumTensors(const psModel *m) { return m->ntensors; }

int psModelTensorIndex(const psModel *m, const char *name) {
    int i;
    for (i = 0; i < m->ntensors; i++)
        if (strcmp(m->tensors[i].name, name) == 0) return i;
    return PS_ERR;
}

const char *psModelTensorName(const psModel *m, int t) {
    return t >= 0 && t < m->ntensors ? m->tensors[t].name : NULL;
}

size_t psModelTensorElements(const psModel *m, int t) {
    return t >= 0 && t < m->ntensors ? m->tensors[t].elements : 0;
}

int psModelNumPartitions(const psModel *m, int t) {
    return t >= 0 && t < m->ntensors ? m->tensors[t].nparts : 0;
}

static const psPart *get_part(const psModel *m, int t, int p) {
    if (t < 0 || t >= m->ntensors || p < 0 || p >= m->tensors[t].nparts) return NULL;
    return &m->tensors[t].parts[p];
}

const char *psModelPartitionKey(const psModel *m, int t, int p) {
    const psPart *pp = get_part(m, t, p);
    return pp ? pp->k.key : NULL;
}

void psModelPartitionRows(const psModel *m, int t, int p, uint64_t *first_row, uint64_t *nrows) {
    const psPart *pp = get_part(m, t, p);
    if (first_row) *first_row = pp ? pp->first_row : 0;
    if (nrows) *nrows = pp ? pp->nrows : 0;
}

uint64_t psModelPartitionVersion(const psModel *m, int t, int p) {
    const psPart *pp = get_part(m, t, p);
    return pp && pp->k.has_version ? pp->k.version : 0;
}

void psModelFree(psModel *m) {
    int t, p;
    if (m == NULL) return;
    /* The engine still points into the model while its pulls or pushes are
     * in flight: wait for them first. */
    psi_user_free(&m->user);
    for (t = 0; t < m->ntensors; t++) {
        for (p = 0; p < m->tensors[t].nparts; p++) {
            free(m->tensors[t].parts[p].k.key);
            psi_pull_free(&m->tensors[t].parts[p].pull);
        }
        free(m->tensors[t].parts);
        free(m->tensors[t].resid);
        free(m->tensors[t].name);
    }
    free(m->tensors);
    free(m->pull_dstv);
    free(m->topk_scratch);
    free(m->job);
    free(m);
}

/* ========================================================================
 * Create and delete
 * ======================================================================== */

/* Submit one RAW request per partition of tensors [t0, t1), built by
 * 'build' (returns argc, fills argv/argl; 'nb' is scratch for numbers),
 * wait, and hand each reply to 'count'. Returns the sum of 'count' or PS_ERR. */
#define MAX_CMD_ARGS 96
typedef int (*buildFn)(psModel *m, int t, int p, const char **argv, size_t *argl,
                       char nb[][24], void *arg);
typedef int (*countFn)(psClient *c, const char *key, redisReply *r);

static int per_partition(psClient *c, psModel *m, int t0, int t1, buildFn build, void *arg,
                         countFn count) {
    psRawReq *qs;
    size_t n = 0, i;
    int t, p, total = 0;
    if (psModelLayout(c, m) != PS_OK) return PS_ERR;
    for (t = t0; t < t1; t++) n += (size_t)m->tensors[t].nparts;
    if ((qs = calloc(n, sizeof(*qs))) == NULL) {
        psi_set_error(c, PS_ERR_OOM, "out of memory");
        return PS_ERR;
    }
    i = 0;
    for (t = t0; t < t1; t++) {
        for (p = 0; p < m->tensors[t].nparts; p++, i++) {
            const char *argv[MAX_CMD_ARGS];
            size_t argl[MAX_CMD_ARGS];
            char nb[MAX_CMD_ARGS][24];
            int argc = build(m, t, p, argv, argl, nb, arg), len;
            char *cmd = NULL;
            if (argc < 0) {
                psi_set_error(c, PS_ERR_ARG, "too many create options");
                continue;
            }
            len = redisFormatCommandArgv(&cmd, argc, argv, argl);
            if (len < 0) {
                psi_set_error(c, PS_ERR_OOM, "out of memory");
                continue;
            }
            psi_raw_init(&qs[i], m->tensors[t].parts[p].k.key, cmd, (size_t)len);
        }
    }
    if (!c->err) psi_raw_run(c, qs, n);
    for (i = 0; i < n; i++) {
        if (qs[i].reply) {
            int k = count(c, qs[i].req.key, qs[i].reply);
            if (k > 0) total += k;
            freeReplyObject(qs[i].reply);
        }
        psi_raw_free(&qs[i]);
    }
    free(qs);
    return c->err ? PS_ERR : total;
}

typedef struct createArgs {
    char *opts;                 /* private copy, tokens NUL-separated */
    const char *tok[64];
    int ntok, seed_at;          /* index of the SEED value token, -1 none */
    unsigned long long seed;
    int nx;
} createArgs;

static int build_create(psModel *m, int t, int p, const char **argv, size_t *argl, char nb[][24],
                        void *arg) {
    createArgs *ca = arg;
    psTensor *tt = &m->tensors[t];
    uint64_t dims[8];
    if (tt->ndim < 1 || tt->ndim > 8) return -1;
    /* the partition's rows, the rest of the tensor's shape */
    dims[0] = tt->parts[p].nrows;
    for (int i = 1; i < tt->ndim; i++) dims[i] = tt->dims[i];
    psWireCreate a = {tt->parts[p].k.key, strlen(tt->parts[p].k.key), tt->ndim, dims, 0,
                      ca->tok, ca->ntok, ca->seed_at,
                      ca->seed + (unsigned long long)(tt->first_part + p), ca->nx};
    return ps_wire_create_argv(&a, nb, argv, argl, MAX_CMD_ARGS - 1);
}

static int count_create(psClient *c, const char *key, redisReply *r) {
    if (r->type == REDIS_REPLY_STATUS) return 1;
    if (r->type == REDIS_REPLY_NIL) return 0;
    psi_set_error(c, PS_ERR_SERVER, "PS.CREATE %s: %.80s", key,
                  r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
    return 0;
}

static int create_range(psClient *c, psModel *m, int t0, int t1, const char *opts, int nx) {
    createArgs ca;
    char *s, *save = NULL, *tok;
    int rc;
    memset(&ca, 0, sizeof(ca));
    ca.seed_at = -1;
    ca.nx = nx;
    if ((ca.opts = strdup(opts ? opts : "")) == NULL) {
        psi_set_error(c, PS_ERR_OOM, "out of memory");
        return PS_ERR;
    }
    for (s = ca.opts; (tok = strtok_r(s, " \t\n", &save)) != NULL; s = NULL) {
        if (ca.ntok == 64) {
            free(ca.opts);
            psi_set_error(c, PS_ERR_ARG, "too many create options");
            return PS_ERR;
        }
        if (ca.ntok > 0 && strcasecmp(ca.tok[ca.ntok - 1], "SEED") == 0) {
            char *end;
            ca.seed = strtoull(tok, &end, 10);
            if (*end == '\0' && *tok != '-') ca.seed_at = ca.ntok;
        }
        ca.tok[ca.ntok++] = tok;
    }
    rc = per_partition(c, m, t0, t1, build_create, &ca, count_create);
    free(ca.opts);
    return rc;
}

int psModelCreateTensor(psClient *c, psModel *m, int t, const char *create_opts, int nx) {
    psi_clear_error(c);
    if (t < 0 || t >= m->ntensors) {
        psi_set_error(c, PS_ERR_ARG, "no tensor %d in model '%s'", t, m->job);
        return PS_ERR;
    }
    return create_range(c, m, t, t + 1, create_opts, nx);
}

int psModelCreate(psClient *c, psModel *m, const char *create_opts, int nx) {
    psi_clear_error(c);
    return create_range(c, m, 0, m->ntensors, create_opts, nx);
}

static int build_del(psModel *m, int t, int p, const char **argv, size_t *argl, char nb[][24],
                     void *arg) {
    (void)nb;
    (void)arg;
    argv[0] = "DEL";
    argv[1] = m->tensors[t].parts[p].k.key;
    argl[0] = 3;
    argl[1] = strlen(argv[1]);
    return 2;
}

static int count_del(psClient *c, const char *key, redisReply *r) {
    if (r->type == REDIS_REPLY_INTEGER) return (int)r->integer;
    psi_set_error(c, PS_ERR_SERVER, "DEL %s: %.80s", key,
                  r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
    return 0;
}

int psModelDelete(psClient *c, psModel *m) {
    psi_clear_error(c);
    return per_partition(c, m, 0, m->ntensors, build_del, NULL, count_del);
}
