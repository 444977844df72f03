/* ps-gen-ctr -- writes synthetic CTR data (libsvm) from a planted LR or FM
 * model, and the planted model's own test metrics (the ceiling a trainer can
 * reach). The generator is ml/ctr_gen.c; this file is its command line.
 * `ps-train gen-ctr` still runs this program (with a deprecation note).
 *
 *   ps-gen-ctr --out PREFIX [--samples N] [--fields F] [--vocab V] ...
 *
 * Exit codes: 0 ok, 1 failure (files), 2 usage. */

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctr_gen.h"
#include "ctr_model.h"
#include "sparse_data.h"

static void gen_usage(FILE *out)
{
    fprintf(out,
            "usage: ps-gen-ctr --out PREFIX [--samples N] [--test-samples N] [--fields F]\n"
            "                  [--vocab V] [--zipf S] [--model lr|fm] [--k K] [--bias B]\n"
            "                  [--head H] [--decay P] [--seed S] [--gzip]\n"
            "                  [--drift-every N --drift-frac F]\n"
            "Writes PREFIX.train.libsvm and PREFIX.test.libsvm (libsvm, one id per field, the\n"
            "field in the id's top 8 bits) drawn from a planted logistic or FM model, and\n"
            "PREFIX.truth with the planted model's own test logloss and AUC (the ceiling).\n"
            "  --samples N       training samples (100000)\n"
            "  --test-samples N  test samples (samples / 5, at least 1)\n"
            "  --fields F        fields, one feature each (26, at most %d)\n"
            "  --vocab V         ids per field (10000, at most %u)\n"
            "  --zipf S          Zipf exponent of the id ranks (1.1; 0 = uniform)\n"
            "  --model M         planted model: lr or fm (fm)\n"
            "  --k K             FM factors (4)\n"
            "  --bias B          planted bias (-1)\n"
            "  --head H          ids of rank r > H get parameters scaled by (H / r)^P (0: off);\n"
            "                    all scales are then divided by sqrt(E[scale^2]) so the logit\n"
            "                    keeps its variance: the signal moves into the frequent ids\n"
            "  --decay P         exponent of the head's decay (1)\n"
            "  --seed S          everything follows from it (1)\n"
            "  --gzip            write .libsvm.gz files\n"
            "  --drift-every N   drift: every N training samples a new period starts, in which\n"
            "                    --drift-frac of the ids get new parameters; both files are then\n"
            "                    in time order and PREFIX.truth has a PERIOD line per period\n"
            "  --drift-frac F    share of ids redrawn per period (0.3 when --drift-every is given)\n",
            PS_SPARSE_MAX_FIELDS - 1, PS_GEN_MAX_VOCAB);
}

/* Parses a number within [lo, hi]. Returns 0 or -1. */
static int gen_num(const char *v, double lo, double hi, double *out)
{
    char *end;
    errno = 0;
    double d = strtod(v, &end);
    if (errno || end == v || *end != '\0' || !(d >= lo && d <= hi)) return -1;
    *out = d;
    return 0;
}

int main(int argc, char **argv)
{
    ps_ctr_gen_config c = {.model = PS_CTR_FM, .fields = 26, .vocab = 10000, .zipf = 1.1,
                           .k = 4, .bias = -1.0, .decay = 1.0, .seed = 1};
    long long train = 100000, test = -1;
    const char *prefix = NULL;
    int gz = 0, drift_frac_given = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            gen_usage(stdout);
            return 0;
        }
        if (!strcmp(a, "--gzip")) {
            gz = 1;
            continue;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "ps-gen-ctr: %s needs a value (or is unknown)\n", a);
            return 2;
        }
        const char *v = argv[++i];
        double d = 0;
        int bad = 0;
        if (!strcmp(a, "--out")) {
            prefix = v;
            bad = *v == '\0';
        } else if (!strcmp(a, "--model")) {
            c.model = ps_ctr_parse_model(v);
            bad = c.model != PS_CTR_LR && c.model != PS_CTR_FM;
        } else if (!strcmp(a, "--seed")) {
            char *end;
            errno = 0;
            unsigned long long s = strtoull(v, &end, 10);
            bad = errno || end == v || *end || v[0] == '-';
            c.seed = s;
        } else if (!strcmp(a, "--samples")) {
            bad = gen_num(v, 1, 1e12, &d) || d != floor(d);
            train = (long long)d;
        } else if (!strcmp(a, "--test-samples")) {
            bad = gen_num(v, 1, 4e9, &d) || d != floor(d);
            test = (long long)d;
        } else if (!strcmp(a, "--fields")) {
            bad = gen_num(v, 1, PS_SPARSE_MAX_FIELDS - 1, &d) || d != floor(d);
            c.fields = (int)d;
        } else if (!strcmp(a, "--vocab")) {
            bad = gen_num(v, 1, PS_GEN_MAX_VOCAB, &d) || d != floor(d);
            c.vocab = (uint32_t)d;
        } else if (!strcmp(a, "--zipf")) {
            bad = gen_num(v, 0, 10, &c.zipf);
        } else if (!strcmp(a, "--k")) {
            bad = gen_num(v, 1, PS_GEN_MAX_K, &d) || d != floor(d);
            c.k = (int)d;
        } else if (!strcmp(a, "--head")) {
            bad = gen_num(v, 0, PS_GEN_MAX_VOCAB, &d) || d != floor(d);
            c.head = (uint32_t)d;
        } else if (!strcmp(a, "--decay")) {
            bad = gen_num(v, 0.001, 16, &c.decay);
        } else if (!strcmp(a, "--drift-every")) {
            bad = gen_num(v, 1, 1e12, &d) || d != floor(d);
            c.drift_every = (long long)d;
        } else if (!strcmp(a, "--drift-frac")) {
            bad = gen_num(v, 0, 1, &c.drift_frac);
            drift_frac_given = 1;
        } else if (!strcmp(a, "--bias")) {
            bad = gen_num(v, -100, 100, &c.bias);
        } else {
            fprintf(stderr, "ps-gen-ctr: unknown option %s (see --help)\n", a);
            return 2;
        }
        if (bad) {
            fprintf(stderr, "ps-gen-ctr: bad value '%s' for %s (see --help)\n", v, a);
            return 2;
        }
    }
    if (prefix == NULL) {
        fprintf(stderr, "ps-gen-ctr: --out PREFIX is required\n");
        gen_usage(stderr);
        return 2;
    }
    if (test < 0) test = train / 5 > 0 ? train / 5 : 1;
    if (c.drift_every > 0 && !drift_frac_given) c.drift_frac = 0.3;
    if (drift_frac_given && c.drift_every == 0) {
        fprintf(stderr, "ps-gen-ctr: --drift-frac needs --drift-every\n");
        return 2;
    }
    char err[512];
    ps_ctr_gen_result r;
    if (ps_ctr_gen_write(&c, train, test, prefix, gz, &r, err, sizeof(err)) != 0) {
        fprintf(stderr, "ps-gen-ctr: %s\n", err);
        return 1;
    }
    char path[4096];
    snprintf(path, sizeof(path), "%s.truth", prefix);
    FILE *f = fopen(path, "r");
    char line[1024];
    if (f != NULL && fgets(line, sizeof(line), f) != NULL) fputs(line, stdout);
    if (f != NULL) fclose(f);
    return 0;
}
