/* test_dedup.c -- cmocka tests of module/core/dedup.[ch], the exactly-once table
 * (issue 11 item 4): the indexed table keeps exactly the array order, the
 * contents and the evictions of the former linear table (so RDB, AOF and
 * DEBUG DIGEST output is unchanged), and a push at a full table of 2^17
 * clients costs about what it costs at 16. */

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tensor.h"

static uint64_t Rng = 0x9e3779b97f4a7c15ULL;
static uint64_t next_rand(void) {
    Rng ^= Rng << 13;
    Rng ^= Rng >> 7;
    Rng ^= Rng << 17;
    return Rng;
}

static PSTensor *mk(uint32_t dedup_max) {
    PSTensorOpts o;
    PSTensor_DefaultOpts(&o, 0.1);
    o.dedup_max = dedup_max;
    uint64_t dims[1] = {4};
    PSTensor *t = PSTensor_New(1, dims, 4, &o);
    assert_non_null(t);
    return t;
}

/* ------------------------------------------------------------------------
 * The reference: the table as it was before the index (linear lookup,
 * eviction of the first entry with the smallest version, swap-remove).
 * ---------------------------------------------------------------------- */

typedef struct RefEntry {
    char id[16];
    uint64_t seq, window, version;
} RefEntry;

typedef struct Ref {
    RefEntry *e;
    uint32_t len, max;
} Ref;

static int ref_find(const Ref *r, const char *id) {
    for (uint32_t i = 0; i < r->len; i++)
        if (strcmp(r->e[i].id, id) == 0) return (int)i;
    return -1;
}

static void ref_evict_oldest(Ref *r) {
    uint32_t victim = 0;
    for (uint32_t i = 1; i < r->len; i++)
        if (r->e[i].version < r->e[victim].version) victim = i;
    r->e[victim] = r->e[--r->len];
}

static void ref_record(Ref *r, const char *id, uint64_t seq, uint64_t window, uint64_t version) {
    if (r->max == 0) return;
    int i = ref_find(r, id);
    if (i >= 0) {
        r->e[i].seq = seq, r->e[i].window = window, r->e[i].version = version;
        return;
    }
    while (r->len > 0 && r->len >= r->max) ref_evict_oldest(r);
    RefEntry *ne = &r->e[r->len++];
    snprintf(ne->id, sizeof(ne->id), "%s", id);
    ne->seq = seq, ne->window = window, ne->version = version;
}

/* The table's array equals the reference entry by entry, in order. */
static void assert_same_table(const PSTensor *t, const Ref *r) {
    assert_int_equal(t->dedup_len, r->len);
    for (uint32_t i = 0; i < r->len; i++) {
        const PSDedupEntry *e = &t->dedup[i];
        assert_int_equal(e->idlen, strlen(r->e[i].id));
        assert_memory_equal(e->id, r->e[i].id, e->idlen);
        assert_int_equal(e->seq, r->e[i].seq);
        assert_int_equal(e->window, r->e[i].window);
        assert_int_equal(e->version, r->e[i].version);
    }
}

/* Random records (new ids, updates, versions with many ties and some going
 * down, as PS._RESTORE may set), bound changes and lookups, compared with
 * the reference after every step. */
static void test_indexed_table_keeps_the_order_and_evictions_of_the_linear_one(void **st) {
    (void)st;
    for (int round = 0; round < 20; round++) {
        const uint32_t max = 1 + (uint32_t)(next_rand() % 40);
        PSTensor *t = mk(max);
        Ref r = {.e = calloc(64, sizeof(RefEntry)), .max = max};
        for (int step = 0; step < 3000; step++) {
            char id[16];
            snprintf(id, sizeof(id), "c%u", (unsigned)(next_rand() % 60));
            const uint64_t version = next_rand() % 8 == 0 ? next_rand() % 50 : (uint64_t)step / 4;
            const uint64_t seq = 1 + next_rand() % 100, window = next_rand();
            const uint64_t op = next_rand() % 50;
            if (op == 0) { /* PS.CONFIG DEDUPMAX: shrink or grow the bound */
                const uint32_t nmax = 1 + (uint32_t)(next_rand() % 40);
                t->dedup_max = nmax;
                PSTensor_DedupShrink(t);
                r.max = nmax;
                while (r.len > r.max) ref_evict_oldest(&r);
            } else {
                assert_int_equal(PSTensor_DedupRecord(t, id, strlen(id), seq, window, version), PST_OK);
                ref_record(&r, id, seq, window, version);
            }
            assert_same_table(t, &r);
            snprintf(id, sizeof(id), "c%u", (unsigned)(next_rand() % 70));
            const int ri = ref_find(&r, id);
            PSDedupEntry *e = PSTensor_DedupFind(t, id, strlen(id));
            if (ri < 0) assert_null(e);
            else assert_ptr_equal(e, &t->dedup[ri]);
        }
        free(r.e);
        PSTensor_Free(t);
    }
}

/* Pushes through PSTensor_Push (the Applied/Commit path) at a full table:
 * the same clients are evicted as the reference evicts, and a copy of the
 * tensor answers lookups the same (its index is built on demand). */
static void test_pushes_at_a_full_table_evict_like_the_linear_table(void **st) {
    (void)st;
    PSTensor *t = mk(8);
    Ref r = {.e = calloc(16, sizeof(RefEntry)), .max = 8};
    float g[4] = {1, 1, 1, 1};
    uint64_t seqs[32] = {0};
    for (int step = 0; step < 2000; step++) {
        const unsigned c = (unsigned)(next_rand() % 32);
        char id[16];
        snprintf(id, sizeof(id), "w%u", c);
        PSPush p = {.g = (const unsigned char *)g, .scale = 1.0, .id = id, .idlen = strlen(id),
                    .seq = ++seqs[c]};
        PSPushResult res;
        assert_int_equal(PSTensor_Push(t, &p, &res), PST_OK);
        const int ri = ref_find(&r, id);
        if (ri >= 0) {
            RefEntry *e = &r.e[ri];
            /* seq is the newest: the window shifts (see PSDedupEntry_Mark). */
            PSDedupEntry tmp = {.seq = e->seq, .window = e->window, .version = e->version};
            PSDedupEntry_Mark(&tmp, p.seq, res.version);
            e->seq = tmp.seq, e->window = tmp.window, e->version = tmp.version;
        } else {
            ref_record(&r, id, p.seq, 0, res.version);
        }
        assert_same_table(t, &r);
    }
    PSTensor *c = PSTensor_Copy(t);
    assert_non_null(c);
    for (uint32_t i = 0; i < t->dedup_len; i++)
        assert_non_null(PSTensor_DedupFind(c, t->dedup[i].id, t->dedup[i].idlen));
    PSTensor_Free(c);
    free(r.e);
    PSTensor_Free(t);
}

/* A table filled directly, as the RDB loader fills it (entries in any
 * version order, many ties), gets its index built from scratch on the next
 * operation (every entry heapified); then records in
 * the push pattern (the newest version, appended to the list), records
 * below the list's tail (sync rounds: one version for several clients, and
 * versions going down, kept in the heap), growth of the array (the index
 * grown with its order) and a shrinking bound all evict exactly what the
 * linear table evicts. */
static void test_loaded_table_then_mixed_versions_evict_like_the_linear_table(void **st) {
    (void)st;
    for (int round = 0; round < 12; round++) {
        const uint32_t n = 1 + (uint32_t)(next_rand() % 48), max = n + (uint32_t)(next_rand() % 80);
        PSTensor *t = mk(max);
        Ref r = {.e = calloc(256, sizeof(RefEntry)), .max = max};
        t->dedup = PSTensor_Alloc(n * sizeof(PSDedupEntry));
        assert_non_null(t->dedup);
        t->dedup_cap = n;
        for (uint32_t i = 0; i < n; i++) {
            char id[16];
            snprintf(id, sizeof(id), "L%u", i);
            PSDedupEntry *e = &t->dedup[i];
            e->idlen = (uint32_t)strlen(id);
            e->id = PSTensor_DupBytes(id, e->idlen);
            e->seq = 1, e->window = 0, e->version = next_rand() % 6;
            t->dedup_len = i + 1;
            ref_record(&r, id, e->seq, e->window, e->version);
        }
        uint64_t ver = 6;
        for (int step = 0; step < 1500; step++) {
            char id[16];
            snprintf(id, sizeof(id), next_rand() % 3 ? "c%u" : "L%u", (unsigned)(next_rand() % 200));
            const uint64_t mode = next_rand() % 10;
            uint64_t v;
            if (mode < 6) v = ++ver;                      /* the push path: the newest version */
            else if (mode < 9) v = ver;                   /* a sync round: the same version */
            else v = next_rand() % (ver + 1);             /* restored: any version */
            if (next_rand() % 200 == 0) {
                const uint32_t nmax = 1 + (uint32_t)(next_rand() % 250);
                t->dedup_max = nmax;
                PSTensor_DedupShrink(t);
                r.max = nmax;
                while (r.len > r.max) ref_evict_oldest(&r);
            } else {
                assert_int_equal(PSTensor_DedupRecord(t, id, strlen(id), 1, 0, v), PST_OK);
                ref_record(&r, id, 1, 0, v);
            }
            assert_same_table(t, &r);
        }
        free(r.e);
        PSTensor_Free(t);
    }
}

static double now_sec(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Best of 3 of 'n' pushes with new client ids (each evicts the oldest). */
static double push_new_ids(PSTensor *t, int n, unsigned *next_id) {
    float g[4] = {0, 0, 0, 0};
    double best = 1e9;
    for (int rep = 0; rep < 3; rep++) {
        const double t0 = now_sec();
        for (int i = 0; i < n; i++) {
            char id[24];
            snprintf(id, sizeof(id), "n%u", (*next_id)++);
            PSPush p = {.g = (const unsigned char *)g, .scale = 1.0, .id = id,
                        .idlen = strlen(id), .seq = 1};
            PSPushResult res;
            assert_int_equal(PSTensor_Push(t, &p, &res), PST_OK);
        }
        const double dt = now_sec() - t0;
        if (dt < best) best = dt;
    }
    return best;
}

/* The linear table scanned every entry twice per push: at 2^17 clients a
 * push was thousands of times slower than at 16. */
static void test_push_at_a_full_table_of_2e17_costs_about_what_it_costs_at_16(void **st) {
    (void)st;
    const uint32_t big = 1u << 17;
    PSTensor *small = mk(16), *full = mk(big);
    for (uint32_t i = 0; i < big; i++) {
        char id[24];
        snprintf(id, sizeof(id), "f%u", i);
        assert_int_equal(PSTensor_DedupRecord(full, id, strlen(id), 1, 0, i), PST_OK);
    }
    assert_int_equal(full->dedup_len, big);
    unsigned id1 = 0, id2 = 0;
    push_new_ids(small, 16, &id1);
    const double ts = push_new_ids(small, 20000, &id1);
    const double tf = push_new_ids(full, 20000, &id2);
    printf("20000 pushes with new ids: table of 16 %.2f ms, full table of %u %.2f ms\n",
           ts * 1e3, big, tf * 1e3);
    assert_int_equal(full->dedup_len, big);
    assert_true(tf < 8 * ts + 0.02);
    PSTensor_Free(small);
    PSTensor_Free(full);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_indexed_table_keeps_the_order_and_evictions_of_the_linear_one),
        cmocka_unit_test(test_pushes_at_a_full_table_evict_like_the_linear_table),
        cmocka_unit_test(test_loaded_table_then_mixed_versions_evict_like_the_linear_table),
        cmocka_unit_test(test_push_at_a_full_table_of_2e17_costs_about_what_it_costs_at_16),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
