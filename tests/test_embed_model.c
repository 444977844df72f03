/* test_embed_model.c -- cmocka tests of the embedding table
 * (module/core/embed*.c) against a naive model of its rules
 * (docs/embed-design.md): pulls under TTL and CAPACITY, and batched pulls
 * and pushes against one id at a time. */

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "embed.h"
#include "embed_helpers.h"

/* ------------------------------------------------------------------------
 * Against a naive model
 * ---------------------------------------------------------------------- */

/* The rules of docs/embed-design.md over a plain array of ids 0..NM-1
 * (SGD, dim 2): TTL (dead rows read as absent, reset by a push) or
 * CAPACITY (least recently pushed first, ties by id, down to c - c/16). */
#define NM 120
typedef struct Model {
    int present[NM];
    float w[NM][2];
    uint64_t last[NM], version;
} Model;

static void model_push(Model *m, const PSEmbedConfig *c, const uint64_t *ids, size_t k,
                       const float *g) {
    float sum[NM][2];
    int seen[NM] = {0};
    uint64_t order[64];
    size_t nu = 0;
    for (size_t i = 0; i < k; i++) {
        const uint64_t id = ids[i];
        if (!seen[id]) {
            seen[id] = 1;
            order[nu++] = id;
            sum[id][0] = g[2 * i];
            sum[id][1] = g[2 * i + 1];
        } else {
            sum[id][0] = sum[id][0] + g[2 * i];
            sum[id][1] = sum[id][1] + g[2 * i + 1];
        }
    }
    for (size_t u = 0; u < nu; u++) {
        const uint64_t id = order[u];
        if (m->present[id] && c->ttl && m->version - m->last[id] >= c->ttl) m->present[id] = 0;
        if (!m->present[id]) {
            PSEmbed_InitRow(c, id, m->w[id]);
            m->present[id] = 1;
        }
    }
    m->version++;
    for (size_t u = 0; u < nu; u++) {
        const uint64_t id = order[u];
        for (int j = 0; j < 2; j++) m->w[id][j] = m->w[id][j] - (float)c->lr * sum[id][j];
        m->last[id] = m->version;
    }
    uint64_t rows = 0;
    for (int id = 0; id < NM; id++) rows += (uint64_t)m->present[id];
    if (c->capacity && rows > c->capacity) {
        for (uint64_t n = rows - (c->capacity - c->capacity / 16); n > 0; n--) {
            int old = -1;
            for (int id = 0; id < NM; id++)
                if (m->present[id] && (old < 0 || m->last[id] < m->last[old])) old = id;
            m->present[old] = 0;
        }
    }
}

static void test_pulls_match_a_naive_model_of_ttl_and_capacity(void **state) {
    (void)state;
    for (int mode = 0; mode < 2; mode++) {
        PSEmbedConfig c = config(PSE_OPT_SGD, 2);
        c.lr = 0.5;
        if (mode == 0) c.ttl = 7;
        else c.capacity = 40;
        PSEmbed *t = PSEmbed_New(&c, NULL);
        Model m;
        memset(&m, 0, sizeof(m));
        uint64_t all[NM];
        for (uint64_t i = 0; i < NM; i++) all[i] = i;
        for (int p = 0; p < 600; p++) {
            uint64_t ids[64];
            float g[128];
            const size_t k = 1 + rnd() % 24;
            for (size_t i = 0; i < k; i++) {
                ids[i] = rnd() % (p % 50 < 25 ? NM : 30); /* phases of few / many ids */
                g[2 * i] = (float)(int)(rnd() % 9) - 4.0f;
                g[2 * i + 1] = 0.125f * (float)(int)(rnd() % 17);
            }
            assert_int_equal(PSEmbed_Push(t, (const unsigned char *)ids, k, (const unsigned char *)g, NULL),
                             PSE_OK);
            model_push(&m, &c, ids, k, g);
            float got[NM * 2];
            PSEmbed_Pull(t, (const unsigned char *)all, NM, got);
            for (int id = 0; id < NM; id++) {
                float want[2];
                const int live = m.present[id] && !(c.ttl && m.version - m.last[id] >= c.ttl);
                if (live) memcpy(want, m.w[id], sizeof(want));
                else PSEmbed_InitRow(&c, (uint64_t)id, want);
                if (memcmp(want, got + 2 * id, sizeof(want)))
                    fail_msg("mode %d push %d id %d: %g %g vs model %g %g", mode, p, id,
                             (double)got[2 * id], (double)got[2 * id + 1], (double)want[0],
                             (double)want[1]);
                assert_int_equal(PSEmbed_Lookup(t, (uint64_t)id, NULL), live);
            }
        }
        PSEmbed_Free(t);
    }
}

/* The batched, prefetching pull (a pipeline 2 * 16 ids deep over rings of
 * 64) answers every id of a long batch exactly as a lookup of that id
 * alone: batches shorter and longer than the pipeline, repeats, absent and
 * dead (TTL) ids, unknown_zeros, and dims with and without a fixed-size
 * copy. Pushes in long batches (the push's lookup and its prefetch while
 * applying) leave the same table as one push per id in the same order. */
static void test_batched_pull_and_push_match_one_id_at_a_time(void **state) {
    (void)state;
    static const uint32_t dims[] = {1, 5, 16, 64};
    static const size_t batch[] = {1, 31, 33, 200, 3000};
    for (int di = 0; di < 4; di++) {
        for (int uz = 0; uz < 2; uz++) {
            const uint32_t dim = dims[di];
            PSEmbedConfig c = config(di % 2 ? PSE_OPT_ADAM : PSE_OPT_ROWADAGRAD, dim);
            c.unknown_zeros = uz;
            PSEmbedConfig c0 = c; /* no TTL: values depend on the gradients only */
            c.ttl = 3;
            PSEmbed *t = PSEmbed_New(&c, NULL), *p = PSEmbed_New(&c0, NULL), *u = PSEmbed_New(&c0, NULL);
            assert_non_null(t);
            assert_non_null(p);
            assert_non_null(u);
            uint64_t *ids = malloc(4000 * sizeof(uint64_t));
            float *g = malloc(4000 * (size_t)dim * sizeof(float));
            float *got = malloc(4000 * (size_t)dim * sizeof(float));
            float *want = malloc((size_t)dim * sizeof(float));
            for (int round = 0; round < 5; round++) {
                const size_t k = batch[round];
                for (size_t i = 0; i < k; i++) ids[i] = rnd() % 2500 * 0x9e3779b97f4a7c15ULL;
                for (size_t i = 0; i < k * dim; i++) g[i] = (float)(int)(rnd() % 7) - 3.0f;
                assert_int_equal(PSEmbed_Push(t, (const unsigned char *)ids, k, (const unsigned char *)g, NULL),
                                 PSE_OK);
                assert_int_equal(PSEmbed_Push(p, (const unsigned char *)ids, k, (const unsigned char *)g, NULL),
                                 PSE_OK);
                /* u: one push per distinct id in first-occurrence order, its
                 * gradients summed in the order given (what a batch does). */
                for (size_t i = 0; i < k; i++) {
                    int first = 1;
                    for (size_t j = 0; j < i; j++) first &= ids[j] != ids[i];
                    if (!first) continue;
                    for (size_t x = 0; x < dim; x++) want[x] = g[i * dim + x];
                    for (size_t j = i + 1; j < k; j++)
                        if (ids[j] == ids[i])
                            for (size_t x = 0; x < dim; x++) want[x] = want[x] + g[j * dim + x];
                    assert_int_equal(PSEmbed_Push(u, (const unsigned char *)&ids[i], 1,
                                                  (const unsigned char *)want, NULL), PSE_OK);
                }
                for (size_t i = 0; i < 4000; i++) ids[i] = rnd() % 3000 * 0x9e3779b97f4a7c15ULL;
                const size_t n = batch[(round + 2) % 5];
                PSEmbed_Pull(t, (const unsigned char *)ids, n, got);
                for (size_t i = 0; i < n; i++) {
                    PSEmbedRow row;
                    if (PSEmbed_Lookup(t, ids[i], &row)) memcpy(want, row.data, dim * sizeof(float));
                    else if (uz) memset(want, 0, dim * sizeof(float));
                    else PSEmbed_InitRow(&c, ids[i], want);
                    assert_memory_equal(got + i * dim, want, dim * sizeof(float));
                }
            }
            /* p and u: the same rows in the same storage order, with the
             * same push counts and bit-identical values and state. */
            assert_int_equal(PSEmbed_Rows(p), PSEmbed_Rows(u));
            const size_t nf = PSEmbed_NumFloats(&c0);
            for (uint64_t i = 0; i < PSEmbed_Rows(p); i++) {
                PSEmbedRow a, b;
                PSEmbed_RowAt(p, i, &a);
                PSEmbed_RowAt(u, i, &b);
                assert_int_equal(a.id, b.id);
                assert_int_equal(a.pushes, b.pushes);
                assert_memory_equal(&a.rowacc, &b.rowacc, sizeof(float));
                assert_memory_equal(a.data, b.data, nf * sizeof(float));
            }
            free(ids);
            free(g);
            free(got);
            free(want);
            PSEmbed_Free(t);
            PSEmbed_Free(p);
            PSEmbed_Free(u);
        }
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pulls_match_a_naive_model_of_ttl_and_capacity),
        cmocka_unit_test(test_batched_pull_and_push_match_one_id_at_a_time),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
