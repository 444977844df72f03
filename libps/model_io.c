/* model_io.c -- libps model pulls and pushes: the partition mapping. A
 * tensor's partitions are keys of the batch layer (batch.h), which sends,
 * resends and WAITs for them and interprets their replies: a pull is one
 * key pull per partition decoding into the caller's tensor at the
 * partition's offset, a push one key push per partition of the gradient
 * encoded in the model's push format (with error feedback for lossy
 * formats). */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"

/* Lay 'm' out and attach it to 'c' (batch.h). PS_OK or PS_ERR (recorded). */
static int model_ready(psClient *c, psModel *m) {
    if (psModelLayout(c, m) != PS_OK || psi_user_attach(c, &m->user) != 0) return PS_ERR;
    return PS_OK;
}

/* ========================================================================
 * Pushes
 * ======================================================================== */

/* Encoded bytes of partition 'p' in the model's push format. */
static size_t part_encoded_size(const psModel *m, const psPart *p) {
    if (m->push_fmt == PS_FMT_TOPK) {
        double k = m->topk_ratio * (double)p->elements;
        size_t kk = (size_t)k;
        if ((double)kk < k) kk++;
        if (kk < 1) kk = 1;
        if (kk > p->elements) kk = p->elements;
        return ps_topk_encoded_size((uint32_t)kk);
    }
    return ps_dense_encoded_size(m->push_fmt, p->elements);
}

/* Encode partition 'p' of tensor 't' from 'src' (the tensor's flat array)
 * into 'dst'. With error feedback 'src' is the residual and what was sent is
 * subtracted from it. Returns the bytes written. */
static size_t encode_part(psModel *m, psPart *p, float *src, int feedback, unsigned char *dst) {
    float *x = src + p->offset;
    size_t len, i;
    if (m->push_fmt == PS_FMT_TOPK) {
        uint32_t k;
        len = ps_topk_encode(x, p->elements,
                             (uint32_t)((part_encoded_size(m, p) - 4) / 8), dst, m->topk_scratch);
        memcpy(&k, dst, 4);
        for (i = 0; i < k; i++) {
            uint32_t idx;
            float v;
            memcpy(&idx, dst + 4 + 4 * i, 4);
            memcpy(&v, dst + 4 + 4 * (size_t)k + 4 * i, 4);
            x[idx] -= v;
        }
        return len;
    }
    len = ps_dense_encoded_size(m->push_fmt, p->elements);
    if (feedback) ps_encode_feedback(m->push_fmt, x, p->elements, dst); /* one pass */
    else ps_encode(m->push_fmt, x, p->elements, dst);
    return len;
}

/* 1 if every element is finite. x - x is 0 for a finite x and NaN for NaN
 * and +-Inf; the sum stays 0 exactly when all are finite (one branch-free
 * pass the compiler vectorizes). */
static int all_finite(const float *x, size_t n) {
    float acc = 0.0f;
    for (size_t i = 0; i < n; i++) acc += x[i] - x[i];
    return acc == 0.0f;
}

int psModelPush(psClient *c, psModel *m, const float *const *grads, const uint64_t *versions,
                float scale) {
    psPushGroup *g;
    int t, i, nreq = 0, lossy;

    psi_clear_error(c);
    if (model_ready(c, m) != PS_OK) return PS_ERR;
    lossy = m->push_fmt != PS_FMT_F32;
    for (t = 0; t < m->ntensors; t++)
        if (grads[t] != NULL) nreq += m->tensors[t].nparts;
    if (nreq == 0) return c->err ? PS_ERR : PS_OK;
    /* All or nothing: everything that can refuse the push (a non-finite
     * gradient, which the server would refuse for its partitions only; an
     * allocation) is done before the first residual or seq changes. */
    for (t = 0; t < m->ntensors; t++) {
        psTensor *tt = &m->tensors[t];
        if (grads[t] == NULL) continue;
        if (!all_finite(grads[t], tt->elements)) {
            psi_set_error(c, PS_ERR_ARG,
                          "gradient of tensor '%s' contains NaN or Inf; nothing of this push was sent",
                          tt->name);
            return PS_ERR;
        }
        if (lossy && tt->resid == NULL &&
            (tt->resid = calloc(tt->elements, sizeof(float))) == NULL) {
            psi_set_error(c, PS_ERR_OOM, "out of memory");
            return PS_ERR;
        }
    }
    if (m->push_fmt == PS_FMT_TOPK && m->topk_scratch == NULL) {
        m->topk_scratch = malloc(m->max_part_elems * sizeof(uint32_t));
        if (m->topk_scratch == NULL) {
            psi_set_error(c, PS_ERR_OOM, "out of memory");
            return PS_ERR;
        }
    }
    if ((g = psi_push_begin(c, &m->user, nreq)) == NULL) return PS_ERR;
    for (t = 0; t < m->ntensors; t++) {
        psTensor *tt = &m->tensors[t];
        if (grads[t] == NULL) continue;
        for (i = 0; i < tt->nparts; i++) {
            psPart *p = &tt->parts[i];
            psPush *q = psi_push_add(c, g, &p->k);
            if (psi_push_blob(q, part_encoded_size(m, p)) == NULL) {
                psi_set_error(c, PS_ERR_OOM, "out of memory for the push buffer");
                return PS_ERR;
            }
        }
    }
    for (t = 0, nreq = 0; t < m->ntensors; t++) {
        psTensor *tt = &m->tensors[t];
        float *src = (float *)grads[t];
        size_t e;
        if (grads[t] == NULL) continue;
        if (lossy) {
            for (e = 0; e < tt->elements; e++) tt->resid[e] += grads[t][e];
            src = tt->resid;
        }
        for (i = 0; i < tt->nparts; i++) {
            psPart *p = &tt->parts[i];
            psPush *q = &g->items[nreq++];
            q->bloblen = encode_part(m, p, src, lossy, q->blob);
            q->fmt = m->push_fmt;
            /* Explicit versions are per tensor; else each partition's own
             * version from the last completed pull. */
            q->has_version = versions != NULL || p->k.has_version;
            q->version = versions ? versions[t] : p->k.version;
            q->scale = scale;
        }
    }
    return psi_push_send(c, g);
}

/* ========================================================================
 * Pulls
 * ======================================================================== */

/* psModelPullAsync() whose partition pulls wait (MINVERSION, TIMEOUT
 * 'wait_ms') when 'wait_ms' > 0: for minversions[t], or with 'minversions'
 * NULL for a version above the partition's last completed pull (a
 * partition never pulled does not wait). */
static int pull_begin(psClient *c, psModel *m, float **dst, int wait_ms,
                      const uint64_t *minversions) {
    int t, p;
    psi_clear_error(c);
    if (model_ready(c, m) != PS_OK) return PS_ERR;
    if (m->user.pull.open || m->user.pull.pending) {
        psi_set_error(c, PS_ERR_ARG, "a pull of model '%s' is already in flight", m->job);
        return PS_ERR;
    }
    if (m->pull_dstv == NULL &&
        (m->pull_dstv = calloc((size_t)m->ntensors, sizeof(float *))) == NULL) {
        psi_set_error(c, PS_ERR_OOM, "out of memory");
        return PS_ERR;
    }
    for (t = 0; t < m->ntensors; t++)
        for (p = 0; dst[t] && p < m->tensors[t].nparts; p++) {
            psPart *pp = &m->tensors[t].parts[p];
            uint64_t min = wait_ms <= 0 ? 0
                           : minversions ? minversions[t]
                           : pp->k.has_version ? pp->k.version + 1 : 0;
            if (psi_pull_dense(&pp->pull, &m->user, &pp->k, m->pull_fmt, min, wait_ms,
                               dst[t] + pp->offset, pp->elements) != 0) {
                psi_set_error(c, PS_ERR_OOM, "out of memory");
                return PS_ERR;
            }
        }
    memcpy(m->pull_dstv, dst, sizeof(float *) * (size_t)m->ntensors);
    psi_pulls_begin(&m->user);
    for (t = 0; t < m->ntensors; t++)
        for (p = 0; dst[t] && p < m->tensors[t].nparts; p++)
            psi_pull_submit(c, &m->tensors[t].parts[p].pull);
    return psi_pulls_sent(c, &m->user);
}

int psModelPullAsync(psClient *c, psModel *m, float **dst) {
    return pull_begin(c, m, dst, 0, NULL);
}

int psModelPullWait(psClient *c, psModel *m, uint64_t *versions_out) {
    int t, p;
    psi_clear_error(c);
    if (!m->user.pull.open) {
        psi_set_error(c, PS_ERR_ARG, "no pull of model '%s' in flight", m->job);
        return PS_ERR;
    }
    psi_pulls_wait(c, &m->user);
    for (t = 0; t < m->ntensors; t++) {
        uint64_t v = UINT64_MAX;
        for (p = 0; p < m->tensors[t].nparts; p++) {
            psPart *pp = &m->tensors[t].parts[p];
            if (pp->k.seen < v) v = pp->k.seen;
            /* What pushes send from now on: the versions of this pull's
             * data, partition by partition. */
            if (m->pull_dstv[t]) psi_key_take_pulled(&pp->k);
        }
        if (versions_out) versions_out[t] = (m->pull_dstv[t] && m->tensors[t].nparts) ? v : 0;
    }
    return c->err ? PS_ERR : PS_OK;
}

int psModelPull(psClient *c, psModel *m, float **dst, uint64_t *versions_out) {
    if (psModelPullAsync(c, m, dst) != PS_OK) return PS_ERR;
    return psModelPullWait(c, m, versions_out);
}

int psModelPullMinVersion(psClient *c, psModel *m, float **dst, const uint64_t *minversions,
                          int timeout_ms, uint64_t *versions_out) {
    psi_clear_error(c);
    int limit = c->priv ? c->priv->topo.command_timeout_ms : -1;
    if (timeout_ms <= 0 || (limit > 0 && timeout_ms >= limit)) {
        psi_set_error(c, PS_ERR_ARG, "psModelPullMinVersion: timeout_ms %d must be > 0 and below "
                      "the command timeout (%d ms)", timeout_ms, limit);
        return PS_ERR;
    }
    if (pull_begin(c, m, dst, timeout_ms, minversions) != PS_OK ||
        psModelPullWait(c, m, versions_out) != PS_OK)
        return PS_ERR;
    int late = 0;
    for (int t = 0; t < m->ntensors; t++)
        for (int p = 0; dst[t] && p < m->tensors[t].nparts; p++)
            late += m->tensors[t].parts[p].pull.timed_out;
    /* Some waits timed out: their data was not sent; one plain pull of the
     * whole model gives the caller a consistent current copy. */
    if (late && psModelPull(c, m, dst, versions_out) != PS_OK) return PS_ERR;
    return late;
}
