/* embed_bench.c -- micro-benchmark of the embedding table core
 * (module/embed*.c), in process, no Redis: pulls of 4,096 ids drawn from
 * Zipf(1.1) (and uniformly, the cache-hostile case) from a table of --rows
 * rows (default 10M) of dim 16, and pushes of the same batches with
 * row-wise Adagrad. Prints ids/s, ns per id and bytes per row, by the
 * process's CPU time (EMBED_BENCH_WALL=1: by the wall clock).
 *
 * Then the memory limit of a pull, measured in the same run: the same
 * uniform batches copied out of a plain array of --rows records of the
 * table's size with the id as the index (no hashing, no probe: one record
 * per id, its lines prefetched 16 ids ahead). A pull cannot beat it (it
 * reads the same record lines plus an index line per id); the last line is
 * the pull's ratio to it.
 *
 *   build/bench/embed_bench [--rows N] [--dim D] [--batches B]
 *
 * The default run takes about 20 s and 1 GB, most of it to fill the
 * table. */

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "embed.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(getenv("EMBED_BENCH_WALL") ? CLOCK_MONOTONIC : CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint64_t Rs = 88172645463325252ULL;
static uint64_t rnd(void) {
    Rs ^= Rs << 13;
    Rs ^= Rs >> 7;
    Rs ^= Rs << 17;
    return Rs;
}
static double urand(void) { return (double)(rnd() >> 11) / 9007199254740992.0; }

/* Ranks are spread over the id space by an odd multiplier (a bijection),
 * as hashed feature ids would be. */
static uint64_t id_of_rank(uint64_t r) { return r * 0x9e3779b97f4a7c15ULL + 12345; }

/* Zipf(s) over ranks 0 .. n-1 by inverting a precomputed CDF. */
typedef struct Zipf {
    double *cdf;
    uint64_t n;
} Zipf;

static int zipf_init(Zipf *z, uint64_t n, double s) {
    z->cdf = malloc(n * sizeof(double));
    if (!z->cdf) return -1;
    z->n = n;
    double acc = 0;
    for (uint64_t i = 0; i < n; i++) {
        acc += pow((double)(i + 1), -s);
        z->cdf[i] = acc;
    }
    for (uint64_t i = 0; i < n; i++) z->cdf[i] /= acc;
    return 0;
}

static uint64_t zipf_draw(const Zipf *z) {
    const double u = urand();
    uint64_t lo = 0, hi = z->n - 1;
    while (lo < hi) {
        const uint64_t mid = lo + (hi - lo) / 2;
        if (z->cdf[mid] < u)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

int main(int argc, char **argv) {
    uint64_t rows = 10000000;
    uint32_t dim = 16;
    int batches = 500;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--rows")) rows = strtoull(argv[i + 1], NULL, 10);
        else if (!strcmp(argv[i], "--dim")) dim = (uint32_t)strtoul(argv[i + 1], NULL, 10);
        else if (!strcmp(argv[i], "--batches")) batches = atoi(argv[i + 1]);
        else {
            fprintf(stderr, "usage: %s [--rows N] [--dim D] [--batches B]\n", argv[0]);
            return 2;
        }
    }
    PSEmbedConfig c;
    PSEmbed_DefaultConfig(&c, dim);
    c.optim = PSE_OPT_ROWADAGRAD;
    c.lr = 0.05;
    c.init = PSE_INIT_UNIFORM;
    c.init_a = -0.01;
    c.init_b = 0.01;
    const char *err;
    PSEmbed *t = PSEmbed_New(&c, &err);
    if (!t) {
        fprintf(stderr, "create: %s\n", err);
        return 1;
    }

    /* Fill: every rank once, in batches of 65,536 ids. */
    const size_t fill_batch = 65536;
    uint64_t *ids = malloc(fill_batch * sizeof(uint64_t));
    float *g = malloc(fill_batch * dim * sizeof(float));
    float *out = malloc(fill_batch * dim * sizeof(float));
    Zipf z;
    if (!ids || !g || !out || zipf_init(&z, rows, 1.1) != 0) {
        fprintf(stderr, "out of memory\n");
        return 1;
    }
    for (size_t i = 0; i < fill_batch * dim; i++) g[i] = (float)(urand() - 0.5) * 0.01f;
    double t0 = now();
    for (uint64_t r = 0; r < rows; r += fill_batch) {
        const size_t k = rows - r < fill_batch ? rows - r : fill_batch;
        for (size_t i = 0; i < k; i++) ids[i] = id_of_rank(r + i);
        if (PSEmbed_Push(t, (const unsigned char *)ids, k, (const unsigned char *)g, NULL) != PSE_OK) {
            fprintf(stderr, "fill push failed\n");
            return 1;
        }
    }
    double fill_s = now() - t0;
    printf("embed_bench: %llu rows, dim %u, rowadagrad; fill %.2f s (%.0f rows/s)\n",
           (unsigned long long)PSEmbed_Rows(t), dim, fill_s, (double)rows / fill_s);
    printf("memory: %.1f bytes per row (budget %u = 4*dim + 32)\n",
           (double)PSEmbed_MemUsage(t) / (double)PSEmbed_Rows(t), 4 * dim + 32);

    /* Batches of 4,096 ids, drawn up front so drawing is not timed. */
    const size_t k = 4096;
    uint64_t *zb = malloc((size_t)batches * k * sizeof(uint64_t));
    uint64_t *ub = malloc((size_t)batches * k * sizeof(uint64_t));
    if (!zb || !ub) return 1;
    for (size_t i = 0; i < (size_t)batches * k; i++) {
        zb[i] = id_of_rank(zipf_draw(&z));
        ub[i] = id_of_rank(rnd() % rows);
    }
    const char *names[2] = {"zipf1.1", "uniform"};
    uint64_t *sets[2] = {zb, ub};
    for (int s = 0; s < 2; s++) {
        t0 = now();
        for (int b = 0; b < batches; b++)
            PSEmbed_Pull(t, (const unsigned char *)(sets[s] + (size_t)b * k), k, out);
        const double dt = now() - t0;
        const double n = (double)batches * (double)k;
        printf("pull %-8s %d x %zu ids: %.2f M ids/s, %.1f ns/id\n", names[s], batches, k,
               n / dt / 1e6, dt / n * 1e9);
    }
    for (int s = 0; s < 2; s++) {
        t0 = now();
        for (int b = 0; b < batches; b++) {
            if (PSEmbed_Push(t, (const unsigned char *)(sets[s] + (size_t)b * k), k,
                             (const unsigned char *)g, NULL) != PSE_OK) {
                fprintf(stderr, "push failed\n");
                return 1;
            }
        }
        const double dt = now() - t0;
        const double n = (double)batches * (double)k;
        printf("push %-8s %d x %zu ids (rowadagrad): %.2f M ids/s, %.1f ns/id\n", names[s],
               batches, k, n / dt / 1e6, dt / n * 1e9);
    }
    /* The memory limit: records of the table's size (id, header, values
     * and accumulator: 4 * dim + 20 bytes, 4-byte aligned as in the table)
     * in one array, the values of 'idx' copied out with the record lines
     * prefetched 16 ids ahead. */
    const size_t rec = 4 * (size_t)dim + 20;
    unsigned char *arr = malloc((size_t)rows * rec);
    uint32_t *rx = malloc((size_t)batches * k * sizeof(uint32_t));
    if (!arr || !rx) return 1;
    for (size_t i = 0; i < (size_t)rows * rec; i += 4096) arr[i] = 1;
    memset(arr, 0, (size_t)rows * rec);
    for (size_t i = 0; i < (size_t)batches * k; i++) rx[i] = (uint32_t)(rnd() % rows);
    double best_pull = 0;
    {
        t0 = now();
        for (int b = 0; b < batches; b++)
            PSEmbed_Pull(t, (const unsigned char *)(ub + (size_t)b * k), k, out);
        best_pull = (double)batches * (double)k / (now() - t0);
    }
    t0 = now();
    for (int b = 0; b < batches; b++) {
        const uint32_t *x = rx + (size_t)b * k;
        for (size_t i = 0; i < k; i++) {
            if (i + 16 < k) {
                const unsigned char *r = arr + (size_t)x[i + 16] * rec;
                __builtin_prefetch(r);
                __builtin_prefetch(r + rec - 1);
            }
            memcpy(out + i * dim, arr + (size_t)x[i] * rec + 20, (size_t)dim * sizeof(float));
        }
    }
    const double gather = (double)batches * (double)k / (now() - t0);
    printf("memory limit: copy %d x %zu uniform rows of %zu bytes from an array (no index): %.2f M rows/s, %.1f ns/row\n",
           batches, k, rec, gather / 1e6, 1e9 / gather);
    printf("pull uniform again, same run: %.2f M ids/s = %.2fx the memory limit\n", best_pull / 1e6,
           best_pull / gather);
    free(arr);
    free(rx);
    printf("digest %016llx\n", (unsigned long long)PSEmbed_Digest64(t));
    PSEmbed_Free(t);
    free(z.cdf);
    free(ids);
    free(g);
    free(out);
    free(zb);
    free(ub);
    return 0;
}
