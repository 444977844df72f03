/* baseline.c -- single-process training baseline for the benchmarks.
 *
 * Trains the same MLP the workers train (ml/nn.c) on Fashion-MNIST in
 * one process with no parameter server: shuffled mini-batches, plain SGD on
 * the local copy.  Its samples/s and time-to-accuracy are the yardstick the
 * distributed runs are compared with.
 *
 *   baseline [--layers 784,128,10] [--batch 64] [--epochs 1] [--lr 0.1]
 *            [--seed 1] [--data DIR] [--threads N]
 *
 * Prints one line per epoch and finally one machine-readable line:
 *   RESULT samples_per_s=... test_acc=... test_loss=... seconds=... epochs=... */

#include <cblas.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "data.h"
#include "nn.h"

#define MAX_LAYERS 16

typedef struct options {
    const char *layers;
    int batch;
    int epochs;
    double lr;
    uint64_t seed;
    const char *data;
    int threads; /* 0 = OpenBLAS default */
} options;

static void usage(FILE *out)
{
    fprintf(out,
            "usage: baseline [--layers 784,128,10] [--batch 64] [--epochs 1] [--lr 0.1]\n"
            "                [--seed 1] [--data DIR] [--threads N]\n"
            "Trains an MLP on Fashion-MNIST in one process (no server) with plain SGD and\n"
            "prints per-epoch progress and a final RESULT line.\n"
            "  --data DIR    IDX files (default " PS_FASHION_MNIST_DIR ")\n"
            "  --threads N   OpenBLAS threads (default: OpenBLAS's own choice)\n");
}

/* Parses 's' as an integer in [lo, hi] into *out.  Returns 0, or -1. */
static int parse_int(const char *s, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end != '\0' || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

/* Parses the command line into 'o'.  Returns 0, 1 for --help, -1 on error
 * (message printed). */
static int parse_options(int argc, char **argv, options *o)
{
    o->layers = "784,128,10";
    o->batch = 64;
    o->epochs = 1;
    o->lr = 0.1;
    o->seed = 1;
    o->data = NULL;
    o->threads = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) return 1;
        if (i + 1 >= argc) {
            fprintf(stderr, "baseline: %s needs a value (or unknown option)\n", a);
            return -1;
        }
        const char *v = argv[++i];
        long n;
        if (strcmp(a, "--layers") == 0) {
            o->layers = v;
        } else if (strcmp(a, "--batch") == 0) {
            if (parse_int(v, 1, PS_MLP_MAX_BATCH, &n) != 0) goto bad;
            o->batch = (int)n;
        } else if (strcmp(a, "--epochs") == 0) {
            if (parse_int(v, 1, 100000, &n) != 0) goto bad;
            o->epochs = (int)n;
        } else if (strcmp(a, "--lr") == 0) {
            char *end;
            errno = 0;
            o->lr = strtod(v, &end);
            if (errno || end == v || *end != '\0' || !(o->lr > 0) || o->lr > 1e6) goto bad;
        } else if (strcmp(a, "--seed") == 0) {
            char *end;
            errno = 0;
            unsigned long long s = strtoull(v, &end, 10);
            if (errno || end == v || *end != '\0' || v[0] == '-') goto bad;
            o->seed = s;
        } else if (strcmp(a, "--data") == 0) {
            o->data = v;
        } else if (strcmp(a, "--threads") == 0) {
            if (parse_int(v, 1, 1024, &n) != 0) goto bad;
            o->threads = (int)n;
        } else {
            fprintf(stderr, "baseline: unknown option %s\n", a);
            return -1;
        }
        continue;
    bad:
        fprintf(stderr, "baseline: bad value '%s' for %s\n", v, a);
        return -1;
    }
    return 0;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    options o;
    int rc = parse_options(argc, argv, &o);
    if (rc != 0) {
        usage(rc > 0 ? stdout : stderr);
        return rc > 0 ? 0 : 2;
    }
    if (o.threads > 0) openblas_set_num_threads(o.threads);

    char err[512];
    int sizes[MAX_LAYERS];
    int nsizes = ps_parse_layers(o.layers, sizes, MAX_LAYERS, err, sizeof(err));
    if (nsizes < 0) {
        fprintf(stderr, "baseline: %s\n", err);
        return 2;
    }

    ps_dataset train = {0}, test = {0};
    ps_mlp m = {0};
    float *xb = NULL;
    int32_t *yb = NULL;
    int *perm = NULL;
    int status = 1;

    double t0 = now_s();
    if (ps_dataset_fashion_mnist(o.data, 1, &train, err, sizeof(err)) != 0 ||
        ps_dataset_fashion_mnist(o.data, 0, &test, err, sizeof(err)) != 0) {
        fprintf(stderr, "baseline: %s\n", err);
        goto out;
    }
    double tload = now_s() - t0;
    if (sizes[0] != train.dim || test.dim != train.dim) {
        fprintf(stderr, "baseline: input layer is %d but the data has %d features\n", sizes[0],
                train.dim);
        goto out;
    }
    if (sizes[nsizes - 1] < train.nclasses || sizes[nsizes - 1] < test.nclasses) {
        fprintf(stderr, "baseline: output layer is %d but the data has %d classes\n",
                sizes[nsizes - 1], train.nclasses > test.nclasses ? train.nclasses : test.nclasses);
        goto out;
    }
    if (ps_mlp_init(&m, sizes, nsizes, o.batch, err, sizeof(err)) != 0) {
        fprintf(stderr, "baseline: %s\n", err);
        goto out;
    }
    ps_mlp_init_he(&m, o.seed);
    xb = malloc((size_t)o.batch * (size_t)train.dim * sizeof(float));
    yb = malloc((size_t)o.batch * sizeof(int32_t));
    perm = malloc((size_t)train.n * sizeof(int));
    if (xb == NULL || yb == NULL || perm == NULL) {
        fprintf(stderr, "baseline: out of memory\n");
        goto out;
    }
    for (int i = 0; i < train.n; i++) perm[i] = i;

    printf("baseline: layers %s (%zu params), batch %d, lr %g, seed %llu, %d train / %d test "
           "samples (loaded in %.2fs), %d OpenBLAS threads\n",
           o.layers, ps_mlp_num_params(&m), o.batch, o.lr, (unsigned long long)o.seed, train.n,
           test.n, tload, openblas_get_num_threads());
    fflush(stdout);

    PSRng rng;
    ps_rng_seed(&rng, o.seed ^ 0x5DEECE66DULL);
    size_t dim = (size_t)train.dim;
    double train_seconds = 0.0;
    long long samples = 0;
    double test_loss = 0.0, test_acc = 0.0;
    for (int epoch = 1; epoch <= o.epochs; epoch++) {
        double te = now_s();
        /* Fisher-Yates shuffle of the sample order. */
        for (int i = train.n - 1; i > 0; i--) {
            int j = (int)ps_rng_below(&rng, (uint64_t)i + 1);
            int t = perm[i];
            perm[i] = perm[j];
            perm[j] = t;
        }
        double loss_sum = 0.0;
        int batches = 0;
        for (int s = 0; s < train.n; s += o.batch) {
            int nb = train.n - s < o.batch ? train.n - s : o.batch;
            for (int i = 0; i < nb; i++) {
                int k = perm[s + i];
                memcpy(xb + (size_t)i * dim, train.x + (size_t)k * dim, dim * sizeof(float));
                yb[i] = train.y[k];
            }
            loss_sum += ps_mlp_grad(&m, xb, yb, nb);
            ps_mlp_sgd(&m, (float)o.lr);
            batches++;
        }
        double secs = now_s() - te;
        train_seconds += secs;
        samples += train.n;
        ps_mlp_evaluate(&m, test.x, test.y, test.n, &test_loss, &test_acc);
        printf("epoch %d/%d train_loss=%.4f test_loss=%.4f test_acc=%.4f samples_per_s=%.0f "
               "epoch_seconds=%.2f\n",
               epoch, o.epochs, loss_sum / batches, test_loss, test_acc, train.n / secs, secs);
        fflush(stdout);
    }
    printf("RESULT samples_per_s=%.0f test_acc=%.4f test_loss=%.4f seconds=%.3f epochs=%d "
           "batch=%d layers=%s\n",
           (double)samples / train_seconds, test_acc, test_loss, train_seconds, o.epochs, o.batch,
           o.layers);
    status = 0;

out:
    free(xb);
    free(yb);
    free(perm);
    ps_mlp_free(&m);
    ps_dataset_free(&train);
    ps_dataset_free(&test);
    return status;
}
