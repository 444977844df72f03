/* report.c -- ps_bench's output: medians and paired ratios over the
 * repetition rounds of each cell, the table, and the targets block.
 * bench/run.sh shows this output as it is: keep its format. */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ps_bench.h"

/* ------------------------------------------------------------------------- */
/* Small helpers                                                             */
/* ------------------------------------------------------------------------- */

double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Median of 'n' values (copied, 'v' is left as it is). */
static double median(const double *v, int n)
{
    double t[MAX_REPS];
    if (n <= 0) return 0;
    memcpy(t, v, (size_t)n * sizeof(double));
    qsort(t, (size_t)n, sizeof(double), cmp_double);
    return n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
}

/* 'n' in the largest of the units 1, 1024, 2^20 that divides it, with the
 * unit's suffix 'u[0..2]'. Returns 'buf'. */
static const char *size_str(size_t n, const char *const u[3], char *buf, size_t cap)
{
    int k = n >= (1u << 20) && n % (1u << 20) == 0 ? 2 : n >= 1024 && n % 1024 == 0 ? 1 : 0;
    snprintf(buf, cap, "%zu%s", n >> (10 * k), u[k]);
    return buf;
}

const char *floats_str(size_t floats, char *buf, size_t cap)
{
    static const char *const u[3] = {"", "K", "M"};
    return size_str(floats, u, buf, cap);
}

const char *bytes_str(size_t bytes, char *buf, size_t cap)
{
    static const char *const u[3] = {" B", " KB", " MB"};
    return size_str(bytes, u, buf, cap);
}

/* ------------------------------------------------------------------------- */
/* Report                                                                     */
/* ------------------------------------------------------------------------- */

static double cell_median_ops(const cell *c, int op)
{
    double v[MAX_REPS];
    for (int r = 0; r < c->reps; r++) v[r] = c->s[op][r].ops_s;
    return median(v, c->reps);
}

static double cell_median_cpu(const cell *c, int op)
{
    double v[MAX_REPS];
    for (int r = 0; r < c->reps; r++) v[r] = c->s[op][r].cpu_us;
    return median(v, c->reps);
}

/* Median over the repetitions of ops(op) / ops(base), each pair measured in
 * the same round. */
static double cell_ratio(const cell *c, int op, int base)
{
    double v[MAX_REPS];
    int n = 0;
    for (int r = 0; r < c->reps; r++)
        if (c->s[base][r].ops_s > 0) v[n++] = c->s[op][r].ops_s / c->s[base][r].ops_s;
    return median(v, n);
}

/* Smallest and largest per-round ratio of 'op' to 'base'. */
static void cell_ratio_range(const cell *c, int op, int base, double *lo, double *hi)
{
    *lo = 1e300;
    *hi = 0;
    for (int r = 0; r < c->reps; r++) {
        if (c->s[base][r].ops_s <= 0) continue;
        double x = c->s[op][r].ops_s / c->s[base][r].ops_s;
        if (x < *lo) *lo = x;
        if (x > *hi) *hi = x;
    }
    if (*hi == 0) *lo = 0;
}

static const cell *find_cell(const cell *cells, int ncells, size_t floats, int clients,
                             int pipelined)
{
    for (int i = 0; i < ncells; i++)
        if (cells[i].floats == floats && cells[i].clients == clients &&
            (cells[i].depth > 1) == pipelined)
            return &cells[i];
    return NULL;
}

void print_table(const options *o, const cell *cells, int ncells)
{
    char fb[32], bb[32];
    printf("\n%-14s %6s %7s %4s %5s %11s %9s %10s %-5s %9s %7s  %s\n", "op", "floats", "bytes",
           "cli", "pipe", "ops/s", "MB/s", "srv_us/op", "base", "base_MB/s", "ratio",
           "(min-max)");
    for (int i = 0; i < ncells; i++) {
        const cell *c = &cells[i];
        size_t bytes = c->floats * 4;
        for (int op = 0; op < NOPS; op++) {
            if (!o->ops[op]) continue;
            double ops = cell_median_ops(c, op);
            double mbs = ops * (double)bytes / 1e6;
            printf("%-14s %6s %7s %4d %5d %11.0f %9.1f %10.1f", op_name[op],
                   floats_str(c->floats, fb, sizeof(fb)), bytes_str(bytes, bb, sizeof(bb)),
                   c->clients, c->depth, ops, mbs, cell_median_cpu(c, op));
            int b = op_base[op];
            if (b >= 0 && o->ops[b]) {
                double bops = cell_median_ops(c, b), lo, hi;
                cell_ratio_range(c, op, b, &lo, &hi);
                printf(" %-5s %9.1f %6.2fx  (%.2f-%.2f)\n", op_name[b], bops * (double)bytes / 1e6,
                       cell_ratio(c, op, b), lo, hi);
            } else {
                printf(" %-5s %9s %7s\n", "-", "-", "-");
            }
        }
    }
}

/* Prints one target line: the ratio of 'op' to 'base' in the cell (floats,
 * clients, pipelined) against 'goal', and the same ratio in the other cells
 * of that size for context. */
static void print_target(const options *opt, const cell *cells, int ncells, const char *what,
                         size_t floats, int clients, int pipelined, int op, int base, double goal)
{
    const cell *c = find_cell(cells, ncells, floats, clients, pipelined);
    if (c == NULL || !opt->ops[op] || !opt->ops[base]) {
        printf("  %-62s   n/a (not measured)\n", what);
        return;
    }
    double r = cell_ratio(c, op, base), lo, hi;
    cell_ratio_range(c, op, base, &lo, &hi);
    printf("  %-62s %5.2fx  %s  (%d client%s, pipeline %d; rounds %.2f-%.2f)\n", what, r,
           r >= goal ? "PASS" : "MISS", clients, clients > 1 ? "s" : "", c->depth, lo, hi);
    printf("  %-62s", "    same size, other cells:");
    for (int i = 0; i < ncells; i++) {
        const cell *o = &cells[i];
        if (o == c || o->floats != floats) continue;
        printf(" %dc/p%d %.2fx", o->clients, o->depth, cell_ratio(o, op, base));
    }
    printf("\n");
}

void print_targets(const options *o, const cell *cells, int ncells)
{
    printf("\ntargets (ratio = median of the per-round ratios; goal in brackets)\n");
    print_target(o, cells, ncells, "PUSHGRAD SGD 1M floats vs SET 4 MB, MB/s [>= 0.90]", 1u << 20, 1, 0, OP_SGD,
                 OP_SET, 0.90);
    print_target(o, cells, ncells, "PULL F32 1M floats vs GET 4 MB, MB/s [>= 0.95]", 1u << 20, 1, 0, OP_PULL,
                 OP_GET, 0.95);
    print_target(o, cells, ncells, "PULL F32 64K floats vs GET 256 KB, MB/s [>= 0.95]", 65536, 1, 0, OP_PULL,
                 OP_GET, 0.95);
    print_target(o, cells, ncells, "PUSHGRAD SGD 16 floats vs SET 64 B, ops/s, pipelined [>= 0.90]", 16, 1, 1,
                 OP_SGD, OP_SET, 0.90);
    print_target(o, cells, ncells, "PULL F32 16 floats vs GET 64 B, ops/s, pipelined [>= 0.90]", 16, 1, 1,
                 OP_PULL, OP_GET, 0.90);
    print_target(o, cells, ncells, "PUSHGRAD ADAM vs SGD, 1M floats [>= 0.80]", 1u << 20, 1, 0, OP_ADAM, OP_SGD,
                 0.80);
    print_target(o, cells, ncells, "PUSHGRAD ADAM vs SGD, 16M floats [>= 0.80]", 16u << 20, 1, 0, OP_ADAM, OP_SGD,
                 0.80);
}
