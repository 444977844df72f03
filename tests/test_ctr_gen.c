/* test_ctr_gen.c -- cmocka tests of ml/ctr_gen.c: the planted-truth
 * generator is reproducible from its seed, draws Zipf ranks, writes libsvm
 * files the sparse reader parses back with their fields, and its truth
 * metrics agree with the files' labels. */

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctr_gen.h"
#include "ctr_model.h"
#include "metrics.h"
#include "sparse_data.h"
#include "tmpdir_fixture.h"


/* Reads a whole file into a malloc'd NUL-terminated string. */
static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    assert_non_null(s);
    assert_int_equal(fread(s, 1, (size_t)n, f), (size_t)n);
    s[n] = '\0';
    fclose(f);
    return s;
}

static const ps_ctr_gen_config FM = {.model = PS_CTR_FM, .fields = 5, .vocab = 50, .zipf = 1.1,
                                     .k = 3, .bias = -0.5, .seed = 42};

static void test_same_seed_writes_the_same_bytes_other_seed_differs(void **state)
{
    (void)state;
    char err[512], p1[300], p2[300], p3[300], f[3][320];
    ps_ctr_gen_result r1, r2, r3;
    snprintf(p1, sizeof(p1), "%s/a", tmpdir);
    snprintf(p2, sizeof(p2), "%s/b", tmpdir);
    snprintf(p3, sizeof(p3), "%s/c", tmpdir);
    assert_int_equal(ps_ctr_gen_write(&FM, 300, 100, p1, 0, &r1, err, sizeof(err)), 0);
    assert_int_equal(ps_ctr_gen_write(&FM, 300, 100, p2, 0, &r2, err, sizeof(err)), 0);
    ps_ctr_gen_config other = FM;
    other.seed = 43;
    assert_int_equal(ps_ctr_gen_write(&other, 300, 100, p3, 0, &r3, err, sizeof(err)), 0);
    const char *parts[] = {"train.libsvm", "test.libsvm"};
    for (int i = 0; i < 2; i++) {
        snprintf(f[0], sizeof(f[0]), "%s.%s", p1, parts[i]);
        snprintf(f[1], sizeof(f[1]), "%s.%s", p2, parts[i]);
        snprintf(f[2], sizeof(f[2]), "%s.%s", p3, parts[i]);
        char *a = slurp(f[0]), *b = slurp(f[1]), *c = slurp(f[2]);
        assert_string_equal(a, b);
        assert_true(strcmp(a, c) != 0);
        free(a);
        free(b);
        free(c);
    }
    assert_true(r1.test_auc == r2.test_auc && r1.test_logloss == r2.test_logloss);
    /* The truth file carries the metrics. */
    snprintf(f[0], sizeof(f[0]), "%s.truth", p1);
    char *t = slurp(f[0]);
    char want[64];
    snprintf(want, sizeof(want), "truth_test_auc=%.6f", r1.test_auc);
    assert_non_null(strstr(t, want));
    assert_non_null(strstr(t, "model=fm fields=5 vocab=50"));
    free(t);
}

/* The files parse back: one feature per field, tagged with its field, and
 * the truth's AUC recomputed from the test file's ids equals the reported
 * one (the labels in the file are the ones scored). gzip too. */
static void test_files_parse_back_with_fields_and_the_truth_metrics(void **state)
{
    (void)state;
    char err[512], prefix[300], path[320];
    snprintf(prefix, sizeof(prefix), "%s/g", tmpdir);
    ps_ctr_gen_result res;
    assert_int_equal(ps_ctr_gen_write(&FM, 200, 400, prefix, 1, &res, err, sizeof(err)), 0);
    snprintf(path, sizeof(path), "%s.test.libsvm.gz", prefix);
    ps_sparse_opts o = {.field_bits = PS_SPARSE_FIELD_BITS};
    ps_sparse_reader *r = ps_sparse_open(path, &o, err, sizeof(err));
    assert_non_null(r);
    ps_sparse_batch b = {0};
    assert_int_equal(ps_sparse_read(r, &b, 1000, err, sizeof(err)), 400);
    ps_sparse_close(r);
    ps_ctr_gen *g = ps_ctr_gen_new(&FM, err, sizeof(err));
    assert_non_null(g);
    ps_metrics met = {0};
    /* Ranks back from ids: every id of the small vocabulary. */
    uint64_t idof[5][51];
    for (uint32_t f = 0; f < 5; f++)
        for (uint32_t r = 1; r <= 50; r++) idof[f][r] = ps_sparse_id_u64(f, r);
    for (int i = 0; i < b.n; i++) {
        uint32_t ranks[5] = {0};
        assert_int_equal(b.off[i + 1] - b.off[i], 5);
        for (int f = 0; f < 5; f++) {
            assert_int_equal(b.field[b.off[i] + f], f);
            assert_true(b.val[b.off[i] + f] == 1.0f);
            for (uint32_t r = 1; r <= 50; r++)
                if (idof[f][r] == b.id[b.off[i] + f]) ranks[f] = r;
            assert_true(ranks[f] > 0);
        }
        double p = 1.0 / (1.0 + exp(-ps_ctr_gen_logit(g, ranks, 5)));
        assert_int_equal(ps_metrics_add(&met, p, b.label[i] > 0.5f), 0);
    }
    assert_true(ps_metrics_auc(&met) == res.test_auc);
    assert_true(fabs(ps_metrics_logloss(&met) - res.test_logloss) < 1e-12);
    /* A planted model with signal: its AUC is well above chance. */
    assert_true(res.test_auc > 0.65);
    ps_metrics_free(&met);
    ps_sparse_batch_free(&b);
    ps_ctr_gen_free(g);
}

/* Zipf: rank 1 is drawn about 2^s times as often as rank 2, and exponent 0
 * is uniform. */
static void test_ranks_follow_the_zipf_exponent(void **state)
{
    (void)state;
    char err[256];
    ps_ctr_gen_config c = {.model = PS_CTR_LR, .fields = 1, .vocab = 1000, .zipf = 1.0,
                           .seed = 5};
    for (int pass = 0; pass < 2; pass++) {
        ps_ctr_gen *g = ps_ctr_gen_new(&c, err, sizeof(err));
        assert_non_null(g);
        PSRng rng;
        ps_rng_seed(&rng, 1);
        int n1 = 0, n2 = 0, n = 200000;
        for (int i = 0; i < n; i++) {
            uint64_t id;
            uint32_t rank;
            int y;
            ps_ctr_gen_sample(g, &rng, &rank, &id, &y);
            assert_true(id == ps_sparse_id_u64(0, rank));
            n1 += rank == 1;
            n2 += rank == 2;
        }
        if (pass == 0) {
            /* P(1) = 1/H(1000) = 0.1336, P(2) = P(1)/2. */
            assert_true(fabs((double)n1 / n - 0.1336) < 0.005);
            assert_true(fabs((double)n1 / n2 - 2.0) < 0.1);
        } else {
            assert_true(fabs((double)n1 / n - 0.001) < 0.0005);
        }
        ps_ctr_gen_free(g);
        c.zipf = 0.0;
    }
}

/* With a head H, ranks above H carry parameters scaled by (H / rank)^decay,
 * and all scales are divided by one constant: logits at ranks up to H are a
 * fixed multiple (> 1) of the head-less ones, and past H that multiple times
 * (H / rank)^decay. */
static void test_head_scales_down_the_parameters_of_rare_ids(void **state)
{
    (void)state;
    char err[256];
    ps_ctr_gen_config c = {.model = PS_CTR_LR, .fields = 1, .vocab = 1000, .zipf = 1.0,
                           .bias = 0.0, .seed = 5};
    ps_ctr_gen *full = ps_ctr_gen_new(&c, err, sizeof(err));
    c.head = 10;
    ps_ctr_gen *head = ps_ctr_gen_new(&c, err, sizeof(err));
    assert_non_null(full);
    assert_non_null(head);
    uint32_t r = 1;
    double norm = ps_ctr_gen_logit(head, &r, 1) / ps_ctr_gen_logit(full, &r, 1);
    assert_true(norm > 1.0);
    r = 10;
    assert_true(fabs(ps_ctr_gen_logit(head, &r, 1) - norm * ps_ctr_gen_logit(full, &r, 1)) < 1e-12);
    r = 500;
    double zf = ps_ctr_gen_logit(full, &r, 1), zh = ps_ctr_gen_logit(head, &r, 1);
    assert_true(zf != 0.0);
    assert_true(fabs(zh - norm * zf * 10.0 / 500.0) < 1e-12);
    /* decay 2: (10 / 500)^2 past the head, with its own normalization. */
    c.decay = 2.0;
    ps_ctr_gen *d2 = ps_ctr_gen_new(&c, err, sizeof(err));
    assert_non_null(d2);
    r = 1;
    double norm2 = ps_ctr_gen_logit(d2, &r, 1) / ps_ctr_gen_logit(full, &r, 1);
    assert_true(norm2 > 1.0 && norm2 != norm);
    r = 500;
    assert_true(fabs(ps_ctr_gen_logit(d2, &r, 1) - norm2 * zf * 0.02 * 0.02) < 1e-12);
    ps_ctr_gen_free(d2);
    ps_ctr_gen_free(full);
    ps_ctr_gen_free(head);
}

/* Variance of the logit over 'n' drawn samples. */
static double logit_variance(ps_ctr_gen *g, int fields, int n)
{
    PSRng rng;
    ps_rng_seed(&rng, 99);
    uint32_t ranks[PS_SPARSE_MAX_FIELDS];
    uint64_t ids[PS_SPARSE_MAX_FIELDS];
    double sum = 0.0, sq = 0.0;
    for (int i = 0; i < n; i++) {
        int y;
        ps_ctr_gen_sample(g, &rng, ranks, ids, &y);
        double z = ps_ctr_gen_logit(g, ranks, fields);
        sum += z;
        sq += z * z;
    }
    return sq / n - (sum / n) * (sum / n);
}

/* The head moves signal to the frequent ids without shrinking it: the
 * logit's variance over drawn samples stays about what it is without a
 * head (unnormalized, a head of 10 in 1000 Zipf(1) ids keeps about half). */
static void test_head_keeps_the_logit_variance(void **state)
{
    (void)state;
    char err[256];
    for (int model = PS_CTR_LR; model <= PS_CTR_FM; model++) {
        ps_ctr_gen_config c = {.model = model, .fields = 26, .vocab = 1000, .zipf = 1.0,
                               .k = 4, .bias = 0.0, .seed = 5};
        ps_ctr_gen *full = ps_ctr_gen_new(&c, err, sizeof(err));
        c.head = 10;
        ps_ctr_gen *head = ps_ctr_gen_new(&c, err, sizeof(err));
        assert_non_null(full);
        assert_non_null(head);
        double ratio = logit_variance(head, 26, 20000) / logit_variance(full, 26, 20000);
        assert_true(ratio > 0.75 && ratio < 1.33);
        ps_ctr_gen_free(full);
        ps_ctr_gen_free(head);
    }
}

static void test_bad_configurations_are_refused(void **state)
{
    (void)state;
    char err[256];
    ps_ctr_gen_config c = FM;
    c.fields = 0;
    assert_null(ps_ctr_gen_new(&c, err, sizeof(err)));
    c = FM;
    c.vocab = 0;
    assert_null(ps_ctr_gen_new(&c, err, sizeof(err)));
    c = FM;
    c.model = PS_CTR_MLP;
    assert_null(ps_ctr_gen_new(&c, err, sizeof(err)));
    c = FM;
    c.zipf = NAN;
    assert_null(ps_ctr_gen_new(&c, err, sizeof(err)));
    c = FM;
    c.decay = -1.0;
    assert_null(ps_ctr_gen_new(&c, err, sizeof(err)));
    ps_ctr_gen_result r;
    char prefix[300];
    snprintf(prefix, sizeof(prefix), "%s/no/such/dir/x", tmpdir);
    assert_int_equal(ps_ctr_gen_write(&FM, 10, 10, prefix, 0, &r, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "cannot create"));
}

/* Drift: at each period a share drift_frac of the ids get new parameters
 * (the others keep theirs exactly); without drift the period changes
 * nothing; the writer's PERIOD lines tile both files. */
static void test_drift_redraws_a_share_of_the_ids_at_known_periods(void **state)
{
    (void)state;
    char err[512];
    ps_ctr_gen_config c = {.model = PS_CTR_LR, .fields = 1, .vocab = 4000, .zipf = 0,
                           .bias = 0, .seed = 5, .drift_every = 100, .drift_frac = 0.25};
    ps_ctr_gen *g = ps_ctr_gen_new(&c, err, sizeof(err));
    ps_ctr_gen_config still = c;
    still.drift_every = 0;
    ps_ctr_gen *s = ps_ctr_gen_new(&still, err, sizeof(err));
    assert_non_null(g);
    assert_non_null(s);
    int changed1 = 0, changed2 = 0, back = 0;
    for (uint32_t r = 1; r <= c.vocab; r++) {
        ps_ctr_gen_set_period(g, 0);
        ps_ctr_gen_set_period(s, 3);
        double z0 = ps_ctr_gen_logit(g, &r, 1);
        assert_true(z0 == ps_ctr_gen_logit(s, &r, 1)); /* no drift: the period is ignored */
        ps_ctr_gen_set_period(g, 1);
        double z1 = ps_ctr_gen_logit(g, &r, 1);
        ps_ctr_gen_set_period(g, 2);
        double z2 = ps_ctr_gen_logit(g, &r, 1);
        changed1 += z1 != z0;
        changed2 += z2 != z1;
        back += z2 == z0 && z1 != z0;          /* a redrawn id never returns to its old row */
    }
    /* 25% +- 5 sigma of a binomial(4000, 0.25) */
    assert_in_range(changed1, 1000 - 137, 1000 + 137);
    assert_in_range(changed2, 1000 - 137, 1000 + 137);
    assert_int_equal(back, 0);
    ps_ctr_gen_free(g);
    ps_ctr_gen_free(s);

    char pre[300], path[320];
    ps_ctr_gen_result res;
    snprintf(pre, sizeof(pre), "%s/drift", tmpdir);
    c.vocab = 50;
    assert_int_equal(ps_ctr_gen_write(&c, 250, 30, pre, 0, &res, err, sizeof(err)), 0);
    snprintf(path, sizeof(path), "%s.truth", pre);
    char *t = slurp(path);
    assert_non_null(strstr(t, "drift_every=100 drift_frac=0.25 periods=3"));
    long long tr = 0, te = 0;
    const char *q = t;
    for (int p = 0; p < 3; p++) {
        long long pp, tf, tc, sf, sc;
        q = strstr(q, "PERIOD ");
        assert_non_null(q);
        assert_int_equal(sscanf(q, "PERIOD p=%lld train_first=%lld train_count=%lld test_first=%lld "
                                   "test_count=%lld", &pp, &tf, &tc, &sf, &sc), 5);
        assert_true(pp == p && tf == tr && sf == te);
        tr += tc;
        te += sc;
        q++;
    }
    assert_true(tr == 250 && te == 30);
    free(t);
    ps_ctr_gen_config bad = c;
    bad.drift_frac = 1.5;
    assert_null(ps_ctr_gen_new(&bad, err, sizeof(err)));
    c.drift_every = 1;                          /* 250 periods ok; 2000 refused */
    assert_int_equal(ps_ctr_gen_write(&c, 2000, 30, pre, 0, &res, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "periods"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_same_seed_writes_the_same_bytes_other_seed_differs),
        cmocka_unit_test(test_files_parse_back_with_fields_and_the_truth_metrics),
        cmocka_unit_test(test_ranks_follow_the_zipf_exponent),
        cmocka_unit_test(test_head_scales_down_the_parameters_of_rare_ids),
        cmocka_unit_test(test_head_keeps_the_logit_variance),
        cmocka_unit_test(test_bad_configurations_are_refused),
        cmocka_unit_test(test_drift_redraws_a_share_of_the_ids_at_known_periods),
    };
    tmpdir_prefix = "test_ctr_gen";
    return cmocka_run_group_tests(tests, tmpdir_setup, tmpdir_teardown);
}
