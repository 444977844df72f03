/* sparse_table.c -- local embedding table with Adagrad / FTRL / SGD (see
 * sparse_table.h). */

#include "sparse_table.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "protocol.h"
#include "rng.h"
#include "sparse_data.h"

struct ps_sparse_table {
    ps_table_config c;
    int nstate;       /* state vectors per row: 0 SGD, 1 ADAGRAD, 2 FTRL */
    size_t stride;    /* floats per row record: dim * (1 + nstate) */
    uint64_t *ids;    /* rows' ids, in creation order */
    float *data;      /* rows' records */
    size_t n, cap;
    uint32_t *tab;    /* open addressing: row + 1, 0 = empty */
    size_t tab_size;
};

#define seterr ps_sparse_seterr

/* The server's names (common/protocol.h) of the optimizers this table has. */
int ps_table_parse_optim(const char *s)
{
    switch (ps_proto_optim_for(s, PS_PROTO_KIND_TABLE, 1)) {
    case PS_PROTO_OPT_SGD: return PS_TAB_SGD;
    case PS_PROTO_OPT_ADAGRAD: return PS_TAB_ADAGRAD;
    case PS_PROTO_OPT_FTRL: return PS_TAB_FTRL;
    default: return -1;
    }
}

static size_t slot_of(uint64_t id, size_t mask)
{
    id = (id ^ (id >> 31)) * 0x7fb5d329728ea185ULL;
    id = (id ^ (id >> 27)) * 0x81dadef4bc2dd44dULL;
    return (size_t)(id ^ (id >> 33)) & mask;
}

ps_sparse_table *ps_table_new(const ps_table_config *c, char *err, size_t errlen)
{
    if (c->dim < 1 || c->dim > 65536) {
        seterr(err, errlen, "table dim %d must be 1..65536", c->dim);
        return NULL;
    }
    if (c->optim < PS_TAB_SGD || c->optim > PS_TAB_FTRL) {
        seterr(err, errlen, "unknown optimizer %d", c->optim);
        return NULL;
    }
    if (c->optim == PS_TAB_FTRL &&
        (!(c->alpha > 0) || !(c->beta >= 0) || !(c->l1 >= 0) || !(c->l2 >= 0) || c->init_std != 0)) {
        seterr(err, errlen, "FTRL needs alpha > 0, beta, l1, l2 >= 0 and zero initial rows");
        return NULL;
    }
    if (c->optim != PS_TAB_FTRL && (!(c->lr > 0) || !(c->eps > 0 || c->optim == PS_TAB_SGD))) {
        seterr(err, errlen, "the learning rate (and Adagrad's eps) must be > 0");
        return NULL;
    }
    if (!(c->init_std >= 0 && c->init_std <= 1e6)) {
        seterr(err, errlen, "init std %g must be 0..1e6", (double)c->init_std);
        return NULL;
    }
    ps_sparse_table *t = calloc(1, sizeof(*t));
    if (t == NULL) {
        seterr(err, errlen, "out of memory");
        return NULL;
    }
    t->c = *c;
    t->nstate = c->optim == PS_TAB_FTRL ? 2 : c->optim == PS_TAB_ADAGRAD ? 1 : 0;
    t->stride = (size_t)c->dim * (size_t)(1 + t->nstate);
    return t;
}

void ps_table_free(ps_sparse_table *t)
{
    if (t == NULL) return;
    free(t->ids);
    free(t->data);
    free(t->tab);
    free(t);
}

uint64_t ps_table_rows(const ps_sparse_table *t)
{
    return t->n;
}

uint64_t ps_table_zeros(const ps_sparse_table *t)
{
    uint64_t z = 0;
    for (size_t r = 0; r < t->n; r++) {
        const float *w = t->data + r * t->stride;
        for (int i = 0; i < t->c.dim; i++) z += w[i] == 0.0f;
    }
    return z;
}

void ps_table_init_row(const ps_table_config *c, uint64_t id, float *out)
{
    if (c->init_std == 0) {
        memset(out, 0, (size_t)c->dim * sizeof(float));
        return;
    }
    PSRng r;
    ps_rng_seed(&r, (c->seed * 0xd1342543de82ef95ULL) ^ id);
    for (int i = 0; i < c->dim; i++) out[i] = (float)((double)c->init_std * ps_rng_normal(&r));
}

/* Row index of 'id', or -1. */
static long find_row(const ps_sparse_table *t, uint64_t id)
{
    if (t->tab_size == 0) return -1;
    size_t mask = t->tab_size - 1;
    for (size_t h = slot_of(id, mask);; h = (h + 1) & mask) {
        uint32_t e = t->tab[h];
        if (e == 0) return -1;
        if (t->ids[e - 1] == id) return (long)(e - 1);
    }
}

/* Rebuilds the index at twice the size. Returns 0 or -1. */
static int grow_index(ps_sparse_table *t)
{
    size_t size = t->tab_size ? t->tab_size * 2 : 1024;
    uint32_t *tab = calloc(size, sizeof(*tab));
    if (tab == NULL) return -1;
    for (size_t r = 0; r < t->n; r++) {
        size_t h = slot_of(t->ids[r], size - 1);
        while (tab[h] != 0) h = (h + 1) & (size - 1);
        tab[h] = (uint32_t)(r + 1);
    }
    free(t->tab);
    t->tab = tab;
    t->tab_size = size;
    return 0;
}

/* Creates the row of 'id' with its initial values and zero state. Returns
 * its index or -1 (OOM, or more rows than the 32-bit index holds). */
static long add_row(ps_sparse_table *t, uint64_t id)
{
    if (t->n >= UINT32_MAX - 1) return -1;
    if (2 * (t->n + 1) > t->tab_size && grow_index(t) != 0) return -1;
    if (t->n == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 1024;
        uint64_t *ids = realloc(t->ids, cap * sizeof(*ids));
        if (ids == NULL) return -1;
        t->ids = ids;
        float *d = realloc(t->data, cap * t->stride * sizeof(float));
        if (d == NULL) return -1;
        t->data = d;
        t->cap = cap;
    }
    float *rec = t->data + t->n * t->stride;
    ps_table_init_row(&t->c, id, rec);
    memset(rec + t->c.dim, 0, (t->stride - (size_t)t->c.dim) * sizeof(float));
    t->ids[t->n] = id;
    size_t mask = t->tab_size - 1;
    size_t h = slot_of(id, mask);
    while (t->tab[h] != 0) h = (h + 1) & mask;
    t->tab[h] = (uint32_t)(t->n + 1);
    return (long)t->n++;
}

/* FTRL's weight from its state: 0 inside the L1 ball, else the closed form. */
static float ftrl_w(const ps_table_config *c, float z, float n)
{
    if (fabsf(z) <= c->l1) return 0.0f;
    float s = z > 0 ? 1.0f : -1.0f;
    return -(z - s * c->l1) / ((c->beta + sqrtf(n)) / c->alpha + c->l2);
}

/* One optimizer step of row record 'rec' with gradient 'g'. */
static void step_row(const ps_sparse_table *t, float *rec, const float *g)
{
    int dim = t->c.dim;
    float *w = rec;
    switch (t->c.optim) {
    case PS_TAB_SGD:
        for (int i = 0; i < dim; i++) w[i] = w[i] - t->c.lr * g[i];
        break;
    case PS_TAB_ADAGRAD: {
        float *a = rec + dim;
        for (int i = 0; i < dim; i++) {
            a[i] = a[i] + g[i] * g[i];
            w[i] = w[i] - t->c.lr * (g[i] / (sqrtf(a[i]) + t->c.eps));
        }
        break;
    }
    case PS_TAB_FTRL: {
        float *z = rec + dim, *n = rec + 2 * dim;
        for (int i = 0; i < dim; i++) {
            float gg = g[i] * g[i];
            float nn = n[i] + gg;
            float sigma = (sqrtf(nn) - sqrtf(n[i])) / t->c.alpha;
            z[i] = z[i] + (g[i] - sigma * w[i]);
            n[i] = nn;
            w[i] = ftrl_w(&t->c, z[i], n[i]);
        }
        break;
    }
    }
}

static int table_pull(void *self, const uint64_t *ids, size_t k, float *out)
{
    ps_sparse_table *t = self;
    size_t dim = (size_t)t->c.dim;
    for (size_t j = 0; j < k; j++) {
        long r = find_row(t, ids[j]);
        if (r >= 0)
            memcpy(out + j * dim, t->data + (size_t)r * t->stride, dim * sizeof(float));
        else
            ps_table_init_row(&t->c, ids[j], out + j * dim);
    }
    return 0;
}

static int table_push(void *self, const uint64_t *ids, size_t k, const float *grad)
{
    ps_sparse_table *t = self;
    size_t dim = (size_t)t->c.dim;
    for (size_t j = 0; j < k; j++) {
        long r = find_row(t, ids[j]);
        if (r < 0 && (r = add_row(t, ids[j])) < 0) return -1;
        step_row(t, t->data + (size_t)r * t->stride, grad + j * dim);
    }
    return 0;
}

ps_row_store ps_table_store(ps_sparse_table *t)
{
    ps_row_store s = {t, t->c.dim, table_pull, table_push};
    return s;
}
