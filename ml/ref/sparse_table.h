/* sparse_table.h -- a local id -> row table with a per-row optimizer: the
 * embedding table of a single-process trainer (bench/sparse_baseline.c)
 * and of tests, with the update rules of the module's embedding tables
 * (docs/embed-design.md "Optimizers": Adagrad per element, FTRL-Proximal,
 * SGD), in float32 with the same parenthesization.
 *
 * Trainers use it through ps_row_store, the two calls a parameter server
 * answers (pull rows by id, push gradient rows by id), so the same trainer
 * runs against this table, the module's pure embed core or a server.
 *
 * Pure core: no Redis, no sockets. */
#ifndef PS_SPARSE_TABLE_H
#define PS_SPARSE_TABLE_H

#include <stddef.h>
#include <stdint.h>

/* Pull and push by ids. */
typedef struct ps_row_store {
    void *self;
    int dim;
    /* Copies the rows of 'k' ids (repeats allowed) into out (k x dim); ids
     * never pushed answer their initial values and create nothing.
     * Returns 0 or -1. */
    int (*pull)(void *self, const uint64_t *ids, size_t k, float *out);
    /* One optimizer step per id with its gradient row (k x dim); the ids are
     * distinct (a batch sums repeats first). Creates rows on first push.
     * Returns 0, or -1 when out of memory (the table is then unchanged
     * from the failing id on). */
    int (*push)(void *self, const uint64_t *ids, size_t k, const float *grad);
} ps_row_store;

enum { PS_TAB_SGD = 0, PS_TAB_ADAGRAD, PS_TAB_FTRL };

typedef struct ps_table_config {
    int dim;          /* floats per row, 1..65536 */
    int optim;        /* PS_TAB_* */
    float lr, eps;    /* SGD, ADAGRAD */
    float alpha, beta, l1, l2; /* FTRL */
    float init_std;   /* rows start N(0, init_std^2) from (seed, id); FTRL needs 0 */
    uint64_t seed;
} ps_table_config;

typedef struct ps_sparse_table ps_sparse_table;

/* Parses "sgd", "adagrad" or "ftrl": PS_TAB_* or -1. */
int ps_table_parse_optim(const char *s);

/* A new empty table, or NULL with a message in 'err' (bad config, OOM). */
ps_sparse_table *ps_table_new(const ps_table_config *c, char *err, size_t errlen);
void ps_table_free(ps_sparse_table *t);

/* The table as a ps_row_store (valid while 't' lives). */
ps_row_store ps_table_store(ps_sparse_table *t);

/* Rows stored, and how many of their dim * rows values are exactly 0. */
uint64_t ps_table_rows(const ps_sparse_table *t);
uint64_t ps_table_zeros(const ps_sparse_table *t);

/* Writes the initial values of row 'id' (dim floats). */
void ps_table_init_row(const ps_table_config *c, uint64_t id, float *out);

#endif
