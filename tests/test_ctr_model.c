/* test_ctr_model.c -- cmocka tests of ml/ctr_model.c (unique ids, LR,
 * FM and embeddings + MLP gradients against finite differences of a
 * double-precision reference), ml/metrics.c (logloss, AUC by hand) and
 * ml/ref/sparse_table.c (the optimizer rules, pulls that create nothing). */

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctr_model.h"
#include "metrics.h"
#include "rng.h"
#include "sparse_data.h"
#include "sparse_table.h"

/* ============================== unique ids ================================ */

static void test_unique_lists_ids_in_first_appearance_order_with_slots(void **state)
{
    (void)state;
    ps_sparse_batch b = {0};
    uint64_t r0[] = {5, 7, 5};
    uint64_t r1[] = {9, 7};
    assert_int_equal(ps_sparse_batch_add(&b, 1, NULL, r0, NULL, 3, NULL), 0);
    assert_int_equal(ps_sparse_batch_add(&b, 0, NULL, NULL, NULL, 0, NULL), 0); /* empty row */
    assert_int_equal(ps_sparse_batch_add(&b, 0, NULL, r1, NULL, 2, NULL), 0);
    ps_ctr_unique u = {0};
    assert_int_equal(ps_ctr_unique_build(&u, &b), 0);
    assert_int_equal(u.n, 3);
    assert_true(u.ids[0] == 5 && u.ids[1] == 7 && u.ids[2] == 9);
    uint32_t want[] = {0, 1, 0, 2, 1};
    for (int j = 0; j < 5; j++) assert_int_equal(u.slot[j], want[j]);
    ps_ctr_unique_free(&u);
    ps_sparse_batch_free(&b);
}

/* Many ids that agree in their low bits (a weak hash would pile them up),
 * with repeats: the result matches a quadratic scan. */
static void test_unique_matches_brute_force_on_colliding_ids(void **state)
{
    (void)state;
    ps_sparse_batch b = {0};
    PSRng r;
    ps_rng_seed(&r, 3);
    enum { N = 3000 };
    uint64_t ids[N];
    for (int j = 0; j < N; j++) ids[j] = (ps_rng_below(&r, 700) << 40) | 0xABCDu;
    assert_int_equal(ps_sparse_batch_add(&b, 1, NULL, ids, NULL, N, NULL), 0);
    ps_ctr_unique u = {0};
    /* Twice: the second build reuses the memory and must not keep old ids. */
    for (int round = 0; round < 2; round++) {
        assert_int_equal(ps_ctr_unique_build(&u, &b), 0);
        size_t n = 0;
        uint64_t seen[N];
        for (int j = 0; j < N; j++) {
            size_t k = 0;
            while (k < n && seen[k] != ids[j]) k++;
            if (k == n) seen[n++] = ids[j];
            assert_int_equal(u.slot[j], k);
        }
        assert_int_equal(u.n, n);
        for (size_t k = 0; k < n; k++) assert_true(u.ids[k] == seen[k]);
    }
    ps_ctr_unique_free(&u);
    ps_sparse_batch_free(&b);
}

/* ======================= double-precision references ====================== */

/* Summed logloss of the batch under LR/FM with rows 'rows' (double copy,
 * n_unique x dim) and bias 'b0': the formula of ctr_model.h written out. */
static double ref_linear_loss(const ps_sparse_batch *b, const ps_ctr_unique *u, const double *rows,
                              int dim, double b0)
{
    int k = dim - 1;
    double loss = 0.0;
    for (int i = 0; i < b->n; i++) {
        double z = b0;
        for (size_t j = b->off[i]; j < b->off[i + 1]; j++)
            z += rows[u->slot[j] * dim] * b->val[j];
        /* Pairwise term by its definition: every unordered pair of features. */
        for (size_t j = b->off[i]; j < b->off[i + 1]; j++)
            for (size_t l = j + 1; l < b->off[i + 1]; l++)
                for (int f = 0; f < k; f++)
                    z += rows[u->slot[j] * dim + 1 + f] * rows[u->slot[l] * dim + 1 + f] *
                         b->val[j] * b->val[l];
        double p = 1.0 / (1.0 + exp(-z));
        loss += b->label[i] > 0.5f ? -log(p) : -log(1.0 - p);
    }
    return loss;
}

/* Summed logloss of the MLP model with rows 'rows' and layer parameters
 * W/B (double copies, same layout as the model's). */
static double ref_mlp_loss(const ps_ctr_model *m, const ps_sparse_batch *b, const ps_ctr_unique *u,
                           const double *rows, double **W, double **B)
{
    const ps_mlp *nn = &m->mlp;
    int d = m->dim;
    double loss = 0.0;
    double *a = calloc(4096, sizeof(double)), *z = calloc(4096, sizeof(double));
    assert_non_null(a);
    assert_non_null(z);
    for (int i = 0; i < b->n; i++) {
        memset(a, 0, 4096 * sizeof(double));
        for (size_t j = b->off[i]; j < b->off[i + 1]; j++)
            for (int t = 0; t < d; t++)
                a[b->field[j] * d + t] += b->val[j] * rows[u->slot[j] * d + t];
        for (int t = 0; t < m->c.ndense; t++)
            a[m->c.fields * d + t] = b->dense[i * m->c.ndense + t];
        for (int l = 0; l < nn->nlayers; l++) {
            int nin = nn->sizes[l], nout = nn->sizes[l + 1];
            for (int o = 0; o < nout; o++) {
                double s = B[l][o];
                for (int q = 0; q < nin; q++) s += W[l][o * nin + q] * a[q];
                z[o] = (l + 1 < nn->nlayers && s < 0) ? 0.0 : s;
            }
            memcpy(a, z, (size_t)nout * sizeof(double));
        }
        double mx = a[0] > a[1] ? a[0] : a[1];
        double lse = mx + log(exp(a[0] - mx) + exp(a[1] - mx));
        loss += lse - a[b->label[i] > 0.5f ? 1 : 0];
    }
    free(a);
    free(z);
    return loss;
}

/* What the reference loss reads; check_fd perturbs one array of it. */
typedef struct fdCtx {
    const ps_ctr_model *m;
    const ps_sparse_batch *b;
    const ps_ctr_unique *u;
    double *rows;
    double **W, **B;
    int dim;
    double *bias; /* LR, FM */
} fdCtx;

static double ref_loss(const fdCtx *c)
{
    if (c->m->c.model == PS_CTR_MLP) return ref_mlp_loss(c->m, c->b, c->u, c->rows, c->W, c->B);
    return ref_linear_loss(c->b, c->u, c->rows, c->dim, *c->bias);
}

/* Central differences (step 1e-5) of the reference loss over every entry
 * of 'x' (n doubles the loss reads) against the float gradient 'g'. */
static void check_fd(const fdCtx *c, double *x, const float *g, size_t n, const char *what)
{
    const double h = 1e-5;
    for (size_t t = 0; t < n; t++) {
        double keep = x[t];
        x[t] = keep + h;
        double lp = ref_loss(c);
        x[t] = keep - h;
        double lm = ref_loss(c);
        x[t] = keep;
        double fd = (lp - lm) / (2 * h);
        if (fabs(fd - g[t]) > 1e-4 + 1e-3 * fabs(fd))
            fail_msg("%s %s[%zu]: gradient %g, finite difference %g",
                     ps_ctr_model_name(c->m->c.model), what, t, (double)g[t], fd);
    }
}

/* A batch of 'n' rows over a small id pool (so ids repeat across and within
 * rows), one empty row, values not all 1, fields < 'fields'. */
static void make_batch(ps_sparse_batch *b, int n, int fields, int ndense, uint64_t seed)
{
    PSRng r;
    ps_rng_seed(&r, seed);
    b->ndense = ndense;
    for (int i = 0; i < n; i++) {
        uint32_t f[8];
        uint64_t id[8];
        float v[8], dense[4];
        int k = i == 1 ? 0 : 1 + (int)ps_rng_below(&r, 6);
        for (int j = 0; j < k; j++) {
            f[j] = (uint32_t)ps_rng_below(&r, (uint64_t)fields);
            id[j] = 1000 + ps_rng_below(&r, 9);
            v[j] = j % 3 == 2 ? 0.5f + (float)ps_rng_uniform(&r) : 1.0f;
        }
        if (k >= 3) id[2] = id[1]; /* the same id twice in one row */
        for (int t = 0; t < ndense; t++) dense[t] = (float)ps_rng_normal(&r);
        assert_int_equal(ps_sparse_batch_add(b, (float)(ps_rng_below(&r, 2)), f, id, v,
                                             (size_t)k, dense), 0);
    }
}

/* Compares the model's gradient rows (and the bias gradient for LR/FM)
 * with central differences of the reference loss, and its loss with the
 * reference's. */
static void check_gradients(int model, int k)
{
    char err[256];
    ps_ctr_config c = {.model = model, .k = k, .emb_dim = 3, .fields = 3, .ndense = 2,
                       .nhidden = 1, .hidden = {5}, .max_batch = 16};
    ps_ctr_model m;
    assert_int_equal(ps_ctr_init(&m, &c, 11, err, sizeof(err)), 0);
    ps_sparse_batch b = {0};
    make_batch(&b, 12, 3, model == PS_CTR_MLP ? 2 : 0, 5 + (uint64_t)model);
    ps_ctr_unique u = {0};
    assert_int_equal(ps_ctr_unique_build(&u, &b), 0);
    int dim = ps_ctr_row_dim(&m);
    size_t nr = u.n * (size_t)dim;
    float *rows = malloc(nr * sizeof(float)), *g = malloc(nr * sizeof(float));
    double *dr = malloc(nr * sizeof(double));
    assert_true(rows && g && dr);
    PSRng r;
    ps_rng_seed(&r, 9);
    for (size_t t = 0; t < nr; t++) rows[t] = (float)(0.4 * ps_rng_normal(&r));
    m.bias = 0.3f;
    double loss;
    assert_int_equal(ps_ctr_grad(&m, &b, &u, rows, g, &loss, err, sizeof(err)), 0);

    /* Double copies of the dense layers (MLP). */
    double *W[PS_CTR_MAX_HIDDEN + 1] = {0}, *B[PS_CTR_MAX_HIDDEN + 1] = {0};
    if (model == PS_CTR_MLP) {
        for (int l = 0; l < m.mlp.nlayers; l++) {
            size_t nw = ps_mlp_layer_params(&m.mlp, l);
            W[l] = malloc(nw * sizeof(double));
            B[l] = malloc((size_t)m.mlp.sizes[l + 1] * sizeof(double));
            for (size_t t = 0; t < nw; t++) W[l][t] = m.mlp.W[l][t];
            for (int t = 0; t < m.mlp.sizes[l + 1]; t++) B[l][t] = m.mlp.b[l][t];
        }
    }
    for (size_t t = 0; t < nr; t++) dr[t] = rows[t];
    double bias = m.bias;
    fdCtx ctx = {&m, &b, &u, dr, W, B, dim, &bias};
    assert_true(fabs(ref_loss(&ctx) - loss) < 1e-4 * (1 + fabs(loss)));
    check_fd(&ctx, dr, g, nr, "rows");
    if (model != PS_CTR_MLP) {
        check_fd(&ctx, &bias, &m.gbias, 1, "bias");
    } else {
        /* Every dense parameter. */
        for (int l = 0; l < m.mlp.nlayers; l++) {
            check_fd(&ctx, W[l], m.mlp.gW[l], ps_mlp_layer_params(&m.mlp, l), "W");
            check_fd(&ctx, B[l], m.mlp.gb[l], (size_t)m.mlp.sizes[l + 1], "b");
        }
        for (int l = 0; l < m.mlp.nlayers; l++) {
            free(W[l]);
            free(B[l]);
        }
    }
    /* The probabilities of the step equal a forward-only pass. */
    float p0 = m.p[0], plast = m.p[b.n - 1];
    assert_int_equal(ps_ctr_predict(&m, &b, &u, rows, err, sizeof(err)), 0);
    assert_true(fabsf(m.p[0] - p0) < 1e-6f && fabsf(m.p[b.n - 1] - plast) < 1e-6f);
    free(rows);
    free(g);
    free(dr);
    ps_ctr_unique_free(&u);
    ps_sparse_batch_free(&b);
    ps_ctr_free(&m);
}

static void test_lr_gradients_match_finite_differences(void **state)
{
    (void)state;
    check_gradients(PS_CTR_LR, 0);
}

static void test_fm_gradients_match_finite_differences_with_repeated_ids(void **state)
{
    (void)state;
    check_gradients(PS_CTR_FM, 4);
}

static void test_mlp_gradients_match_finite_differences(void **state)
{
    (void)state;
    check_gradients(PS_CTR_MLP, 0);
}

static void test_grad_of_empty_batch_is_zero_and_bad_batches_are_refused(void **state)
{
    (void)state;
    char err[256];
    ps_ctr_config c = {.model = PS_CTR_MLP, .emb_dim = 2, .fields = 2, .max_batch = 4};
    ps_ctr_model m;
    assert_int_equal(ps_ctr_init(&m, &c, 1, err, sizeof(err)), 0);
    ps_sparse_batch b = {0};
    ps_ctr_unique u = {0};
    double loss = 1;
    assert_int_equal(ps_ctr_unique_build(&u, &b), 0);
    assert_int_equal(ps_ctr_grad(&m, &b, &u, NULL, NULL, &loss, err, sizeof(err)), 0);
    assert_true(loss == 0.0);
    assert_true(m.mlp.gW[0][0] == 0.0f);
    /* A field the model has no slot for. */
    uint32_t f = 2;
    uint64_t id = 1;
    assert_int_equal(ps_sparse_batch_add(&b, 1, &f, &id, NULL, 1, NULL), 0);
    assert_int_equal(ps_ctr_unique_build(&u, &b), 0);
    float row[2] = {0}, grow[2];
    assert_int_equal(ps_ctr_grad(&m, &b, &u, row, grow, &loss, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "field 2"));
    /* More rows than max_batch. */
    f = 0;
    for (int i = 0; i < 4; i++) assert_int_equal(ps_sparse_batch_add(&b, 1, &f, &id, NULL, 1, NULL), 0);
    assert_int_equal(ps_ctr_unique_build(&u, &b), 0);
    assert_int_equal(ps_ctr_grad(&m, &b, &u, row, grow, &loss, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "max batch"));
    ps_ctr_unique_free(&u);
    ps_sparse_batch_free(&b);
    ps_ctr_free(&m);
    /* Configurations out of range. */
    ps_ctr_config bad = {.model = PS_CTR_FM, .k = 0, .max_batch = 4};
    assert_int_equal(ps_ctr_init(&m, &bad, 1, err, sizeof(err)), -1);
    bad.model = 7;
    assert_int_equal(ps_ctr_init(&m, &bad, 1, err, sizeof(err)), -1);
}

/* ================================ metrics ================================= */

static void test_logloss_matches_hand_values_and_clips(void **state)
{
    (void)state;
    assert_true(fabs(ps_logloss1(0.8, 1) - 0.22314355131420976) < 1e-15);
    assert_true(fabs(ps_logloss1(0.8, 0) - 1.6094379124341003) < 1e-12);
    assert_true(fabs(ps_logloss1(0.0, 1) - 34.538776394910684) < 1e-9); /* -log(1e-15) */
    assert_true(isfinite(ps_logloss1(1.0, 0)));
    ps_metrics m = {0};
    assert_int_equal(ps_metrics_add(&m, 0.8, 1), 0);
    assert_int_equal(ps_metrics_add(&m, 0.8, 0), 0);
    assert_true(fabs(ps_metrics_logloss(&m) - (0.22314355131420976 + 1.6094379124341003) / 2) <
                1e-12);
    ps_metrics_free(&m);
}

static void test_auc_matches_hand_computed_values_with_ties(void **state)
{
    (void)state;
    /* Perfect and reversed order. */
    double s1[] = {0.1, 0.2, 0.8, 0.9};
    unsigned char y1[] = {0, 0, 1, 1}, y1r[] = {1, 1, 0, 0};
    assert_true(ps_auc(s1, y1, 4) == 1.0);
    assert_true(ps_auc(s1, y1r, 4) == 0.0);
    /* Pairs (pos, neg): scores pos {0.8, 0.4}, neg {0.6, 0.2}: 3 of 4 won. */
    double s2[] = {0.8, 0.6, 0.4, 0.2};
    unsigned char y2[] = {1, 0, 1, 0};
    assert_true(ps_auc(s2, y2, 4) == 0.75);
    /* Ties count one half: pos {0.5, 0.7}, neg {0.5, 0.3}: pairs 0.5 vs
     * 0.5 tie (1/2), 0.5 > 0.3, 0.7 > 0.5, 0.7 > 0.3: 3.5 / 4. */
    double s3[] = {0.5, 0.5, 0.7, 0.3};
    unsigned char y3[] = {1, 0, 1, 0};
    assert_true(ps_auc(s3, y3, 4) == 0.875);
    /* All scores equal: 0.5. */
    double s4[] = {0.3, 0.3, 0.3, 0.3, 0.3};
    unsigned char y4[] = {1, 0, 0, 1, 0};
    assert_true(ps_auc(s4, y4, 5) == 0.5);
    /* One class only: undefined. */
    assert_true(isnan(ps_auc(s1, y1, 2)));
}

/* ============================== local table =============================== */

static void test_table_pull_answers_initial_values_and_creates_nothing(void **state)
{
    (void)state;
    char err[128];
    ps_table_config c = {.dim = 4, .optim = PS_TAB_ADAGRAD, .lr = 0.1f, .eps = 1e-8f,
                         .init_std = 0.5f, .seed = 3};
    ps_sparse_table *t = ps_table_new(&c, err, sizeof(err));
    assert_non_null(t);
    ps_row_store st = ps_table_store(t);
    uint64_t ids[2] = {42, 42};
    float out[8], init[4];
    assert_int_equal(st.pull(st.self, ids, 2, out), 0);
    ps_table_init_row(&c, 42, init);
    assert_memory_equal(out, init, sizeof(init));
    assert_memory_equal(out + 4, init, sizeof(init));
    assert_true(init[0] != 0.0f);
    assert_int_equal(ps_table_rows(t), 0);
    ps_table_free(t);
}

/* Adagrad and FTRL, pushed three times, against the rules of
 * docs/embed-design.md evaluated here in float32. */
static void test_table_adagrad_and_ftrl_follow_the_documented_rules(void **state)
{
    (void)state;
    char err[128];
    const float gs[3] = {0.5f, -2.0f, 0.25f};
    ps_table_config c = {.dim = 1, .optim = PS_TAB_ADAGRAD, .lr = 0.1f, .eps = 1e-6f,
                         .init_std = 0.0f};
    ps_sparse_table *t = ps_table_new(&c, err, sizeof(err));
    ps_row_store st = ps_table_store(t);
    uint64_t id = 7;
    float w = 0, a = 0, got;
    for (int i = 0; i < 3; i++) {
        assert_int_equal(st.push(st.self, &id, 1, &gs[i]), 0);
        a = a + gs[i] * gs[i];
        w = w - c.lr * (gs[i] / (sqrtf(a) + c.eps));
    }
    st.pull(st.self, &id, 1, &got);
    assert_true(got == w);
    assert_int_equal(ps_table_rows(t), 1);
    ps_table_free(t);

    ps_table_config f = {.dim = 1, .optim = PS_TAB_FTRL, .alpha = 0.5f, .beta = 1.0f,
                         .l1 = 0.6f, .l2 = 0.1f};
    t = ps_table_new(&f, err, sizeof(err));
    st = ps_table_store(t);
    float z = 0, n = 0;
    w = 0;
    for (int i = 0; i < 3; i++) {
        assert_int_equal(st.push(st.self, &id, 1, &gs[i]), 0);
        float nn = n + gs[i] * gs[i];
        float sigma = (sqrtf(nn) - sqrtf(n)) / f.alpha;
        z = z + (gs[i] - sigma * w);
        n = nn;
        w = fabsf(z) <= f.l1 ? 0.0f
                             : -(z - (z > 0 ? 1.0f : -1.0f) * f.l1) / ((f.beta + sqrtf(n)) / f.alpha + f.l2);
        st.pull(st.self, &id, 1, &got);
        assert_true(got == w);
    }
    /* The first push (|z| = 0.5 <= l1) left w at exactly 0; the second did not. */
    assert_true(w != 0.0f);
    assert_int_equal(ps_table_zeros(t), 0);
    ps_table_free(t);
    /* FTRL with random initial rows is refused. */
    f.init_std = 0.1f;
    assert_null(ps_table_new(&f, err, sizeof(err)));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_unique_lists_ids_in_first_appearance_order_with_slots),
        cmocka_unit_test(test_unique_matches_brute_force_on_colliding_ids),
        cmocka_unit_test(test_lr_gradients_match_finite_differences),
        cmocka_unit_test(test_fm_gradients_match_finite_differences_with_repeated_ids),
        cmocka_unit_test(test_mlp_gradients_match_finite_differences),
        cmocka_unit_test(test_grad_of_empty_batch_is_zero_and_bad_batches_are_refused),
        cmocka_unit_test(test_logloss_matches_hand_values_and_clips),
        cmocka_unit_test(test_auc_matches_hand_computed_values_with_ties),
        cmocka_unit_test(test_table_pull_answers_initial_values_and_creates_nothing),
        cmocka_unit_test(test_table_adagrad_and_ftrl_follow_the_documented_rules),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
