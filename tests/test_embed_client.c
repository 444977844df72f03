/* test_embed_client.c -- cmocka tests of libps's sharded embedding tables
 * (libps/embed.c) against fake nodes (fake_node.h) that play embedding
 * tables through a hook: PS.PULL key IDS answers row values that are a
 * function of the id (so a row scattered to the wrong place shows), and
 * PS.PUSHGRAD key grad IDS ... records every (key, id, row) it applies,
 * deduplicating by (key, seq) as the server's exactly-once table does. */

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ps_internal.h"
#include "codec.h"
#include "fake_node.h"
#include "idlist.h"
#include "client_helpers.h"

#define DIM 3
#define MAXAPPLIED 4096

/* What the fake tables saw, shared by every fake of a test. */
static struct {
    pthread_mutex_t mu;
    int pulls, pushes, dups;            /* commands answered / pushes deduplicated */
    int drop_push;                      /* this many pushes are applied, then the
                                           connection is closed without a reply */
    int moved_port;                     /* > 0: the first command of each key on a node
                                           not 'moved_port' answers MOVED there */
    size_t napplied;
    char key[MAXAPPLIED][32];
    uint64_t id[MAXAPPLIED];
    float row[MAXAPPLIED][DIM];
    char seqs[64][48];                  /* "key seq" applied */
    int nseqs;
    char fmt[8];                        /* FORMAT of the last push ("" none) */
    int nokey;                          /* answer "no such key" (a lost table) */
    int old_server;                     /* answer IDFORMAT as a module before it did */
    int ef_seen, raw_seen, refused;     /* requests by ids: IDFORMAT EF decoded, raw,
                                           refused (old_server) */
    uint64_t first_ids[2];              /* the first two ids of the last request by ids */
} T;

static float row_value(uint64_t id, int j) { return (float)(id % 1000) + 0.25f * (float)j; }

static const char *after(int argc, char **argv, const char *name, size_t *len, size_t *argl) {
    for (int i = 2; i + 1 < argc; i++)
        if (strcmp(argv[i], name) == 0) {
            if (len) *len = argl[i + 1];
            return argv[i + 1];
        }
    return NULL;
}

static int embed_hook(fake *f, int fd, int argc, char **argv, size_t *argl, int *close_it) {
    size_t idlen = 0;
    const char *ids = argc > 2 ? after(argc, argv, "IDS", &idlen, argl) : NULL;
    const char *fmt = argc > 2 ? after(argc, argv, "FORMAT", NULL, argl) : NULL;
    const char *idf = argc > 2 ? after(argc, argv, "IDFORMAT", NULL, argl) : NULL;
    size_t n = idlen / 8;
    uint64_t *dec = NULL;
    if (ids == NULL || (strcmp(argv[0], "PS.PULL") && strcmp(argv[0], "PS.PUSHGRAD"))) return 0;
    if (idf && T.old_server) {
        pthread_mutex_lock(&T.mu);
        T.refused++;
        pthread_mutex_unlock(&T.mu);
        out(f, fd, "-ERR unknown option 'IDFORMAT'\r\n");
        return 1;
    }
    if (idf) {
        /* IDFORMAT EF: decoded as the module does (common/idlist.h). */
        ps_idlist_hdr h;
        assert_string_equal(idf, "EF");
        assert_int_equal(ps_idlist_header((const unsigned char *)ids, idlen, 1u << 20, &h), PS_IDL_OK);
        dec = malloc(sizeof(uint64_t) * h.n);
        assert_int_equal(ps_idlist_decode((const unsigned char *)ids, idlen, &h, dec), PS_IDL_OK);
        assert_true(ps_idlist_sorted(dec, h.n));
        ids = (const char *)dec;
        n = h.n;
    }
    pthread_mutex_lock(&T.mu);
    if (idf) T.ef_seen++;
    else T.raw_seen++;
    memcpy(T.first_ids, ids, sizeof(uint64_t) * (n < 2 ? n : 2));
    pthread_mutex_unlock(&T.mu);
    if (T.moved_port && f->port != T.moved_port) {
        out(f, fd, "-MOVED %u 127.0.0.1:%d\r\n", ps_key_hash_slot(argv[1], argl[1]),
            T.moved_port);
        return 1;
    }
    pthread_mutex_lock(&T.mu);
    if (T.nokey) {
        out(f, fd, "-ERR no such key\r\n");
    } else if (!strcmp(argv[0], "PS.PULL")) {
        float *x = malloc(sizeof(float) * DIM * (n ? n : 1));
        for (size_t i = 0; i < n; i++) {
            uint64_t id;
            memcpy(&id, ids + 8 * i, 8);
            for (int j = 0; j < DIM; j++) x[i * DIM + j] = row_value(id, j);
        }
        T.pulls++;
        out(f, fd, "*2\r\n:%d\r\n$%zu\r\n", 40 + T.pulls, sizeof(float) * DIM * n);
        out_bytes(f, fd, x, sizeof(float) * DIM * n);
        out(f, fd, "\r\n");
        free(x);
    } else {
        const char *client = NULL, *seq = NULL;
        char ks[48];
        int seen = 0;
        ps_format pf = PS_FMT_F32;
        float *g = malloc(sizeof(float) * DIM * (n ? n : 1));
        for (int i = 0; i + 2 < argc; i++)
            if (!strcmp(argv[i], "ID")) client = argv[i + 1], seq = argv[i + 2];
        snprintf(T.fmt, sizeof(T.fmt), "%s", fmt ? fmt : "");
        if (fmt) ps_format_parse(fmt, strlen(fmt), &pf);
        snprintf(ks, sizeof(ks), "%s %s", argv[1], seq ? seq : "-");
        for (int i = 0; i < T.nseqs && client; i++) seen |= !strcmp(T.seqs[i], ks);
        T.pushes++;
        if (seen) {
            T.dups++;
        } else if (ps_decode(pf, (unsigned char *)argv[2], argl[2], n * DIM, g) == 0) {
            if (client && T.nseqs < 64) snprintf(T.seqs[T.nseqs++], 48, "%s", ks);
            for (size_t i = 0; i < n && T.napplied < MAXAPPLIED; i++) {
                snprintf(T.key[T.napplied], 32, "%s", argv[1]);
                memcpy(&T.id[T.napplied], ids + 8 * i, 8);
                memcpy(T.row[T.napplied], g + i * DIM, sizeof(float) * DIM);
                T.napplied++;
            }
        }
        free(g);
        if (T.drop_push > 0 && !seen) {
            T.drop_push--;
            *close_it = 1;
        } else {
            out(f, fd, ":%d\r\n", T.pushes);
        }
    }
    pthread_mutex_unlock(&T.mu);
    free(dec);
    return 1;
}

static fake *embed_fake(const char *name) {
    fake *f = fake_start(name);
    f->hook = embed_hook;
    return f;
}

static int setup(void **state) {
    (void)state;
    memset(&T, 0, sizeof(T));
    pthread_mutex_init(&T.mu, NULL);
    return 0;
}

/* Index of the applied row of 'id' in 'key' (NULL: any), -1 none. */
static int applied(uint64_t id, const char *key) {
    for (size_t i = 0; i < T.napplied; i++)
        if (T.id[i] == id && (key == NULL || !strcmp(T.key[i], key))) return (int)i;
    return -1;
}

static void test_embed_shard_of_is_splitmix64_mod_n(void **state) {
    (void)state;
    /* SplitMix64 finalizer values computed independently (Python) */
    assert_int_equal(psEmbedShardOf(0, 3), 0);
    assert_int_equal(psEmbedShardOf(1, 7), 6);
    assert_int_equal(psEmbedShardOf(2, 3), 1);
    assert_int_equal(psEmbedShardOf(3, 7), 4);
    assert_int_equal(psEmbedShardOf(42, 3), 2);
    assert_int_equal(psEmbedShardOf(42, 7), 3);
    assert_int_equal(psEmbedShardOf(UINT64_MAX, 7), 0);
    assert_int_equal(psEmbedShardOf(12345, 1), 0);
}

static void test_embed_shard_keys_sit_on_spread_slots(void **state) {
    psEmbed *e = psEmbedNew("emb", DIM, 5);
    (void)state;
    assert_non_null(e);
    for (int s = 0; s < 5; s++) {
        const char *k = psEmbedShardKey(e, s);
        unsigned slot = ps_key_hash_slot(k, strlen(k));
        char prefix[16];
        snprintf(prefix, sizeof(prefix), "emb:%d{", s);
        assert_memory_equal(k, prefix, strlen(prefix));
        assert_true(slot >= (unsigned)(s * 16384 / 5) && slot < (unsigned)((s + 1) * 16384 / 5));
    }
    /* slots of "0", "1", "2", "3": 13907, 9842, 5649, 1584 (redis-py's key_slot) */
    assert_string_equal(psEmbedShardKey(e, 0), "emb:0{3}");
    assert_string_equal(psEmbedShardKey(e, 1), "emb:1{2}");
    psEmbedFree(e);
    assert_null(psEmbedNew("bad{name}", DIM, 2));
    assert_null(psEmbedNew("emb", 0, 2));
    assert_null(psEmbedNew("emb", DIM, 0));
}

static void test_embed_pull_scatters_rows_to_the_callers_order_with_repeats(void **state) {
    fake *a = embed_fake("A");
    psClient *c = connect_to(a, NULL);
    psEmbed *e = psEmbedNew("emb", DIM, 3);
    uint64_t ids[9] = {5, 1, 5, 900, 2, 3, 42, 1, 77};
    float dst[9 * DIM];
    int per_shard[3] = {0};
    (void)state;
    for (int i = 0; i < 9; i++) per_shard[psEmbedShardOf(ids[i], 3)]++;
    assert_int_equal(psEmbedPull(c, e, ids, 9, dst), PS_OK);
    for (int i = 0; i < 9; i++)
        for (int j = 0; j < DIM; j++) assert_true(dst[i * DIM + j] == row_value(ids[i], j));
    /* one PS.PULL per shard that has ids, none for the others */
    assert_int_equal(T.pulls, (per_shard[0] > 0) + (per_shard[1] > 0) + (per_shard[2] > 0));
    assert_int_equal(fake_count(a, "PS.PULL"), T.pulls);
    for (int s = 0; s < 3; s++) {
        char entry[64];
        snprintf(entry, sizeof(entry), "PS.PULL %s", psEmbedShardKey(e, s));
        assert_int_equal(fake_find(a, entry) >= 0, per_shard[s] > 0);
    }
    assert_int_equal(c->stats.rows_pulled, 9);
    for (int s = 0; s < 3; s++)
        if (per_shard[s]) assert_true(psEmbedShardVersion(e, s) > 40);
    assert_int_equal(psEmbedSetPullFormat(e, PS_WIRE_I8), PS_ERR);
    psEmbedFree(e);
    close_all(a, c, NULL);
}

/* psEmbedPullAsync: the rows arrive while other requests run; a push sent
 * meanwhile carries the version of the rows waited for before (the data
 * its gradient came from), the async pull's version only after its Wait;
 * one pull per table in flight; freeing the table abandons a pull. */
static void test_embed_async_pull_keeps_push_versions_until_its_wait(void **state) {
    fake *a = embed_fake("A");
    psClient *c = connect_to(a, NULL);
    psEmbed *e = psEmbedNew("emb", DIM, 1);
    uint64_t ids[3] = {5, 900, 5}, ids2[2] = {7, 8};
    float dst[3 * DIM], dst2[2 * DIM], g[3 * DIM] = {0};
    char entry[96];
    (void)state;
    assert_int_equal(psEmbedPull(c, e, ids, 3, dst), PS_OK);          /* version 41 */
    assert_int_equal(psEmbedShardVersion(e, 0), 41);
    assert_int_equal(psEmbedPullAsync(c, e, ids2, 2, dst2), PS_OK);    /* version 42 */
    ids2[0] = ids2[1] = 0;      /* the ids were copied: the caller may reuse them */
    assert_int_equal(psEmbedPullAsync(c, e, ids, 3, dst), PS_ERR);    /* one in flight */
    assert_int_equal(c->err, PS_ERR_ARG);
    assert_int_equal(psEmbedPush(c, e, ids, 3, g, 0), PS_OK);
    assert_int_equal(psDrain(c), PS_OK);        /* the push; the pull is its Wait's */
    snprintf(entry, sizeof(entry), "PS.PUSHGRAD %s V41 ", psEmbedShardKey(e, 0));
    assert_true(fake_find(a, entry) > fake_find(a, "PS.PULL"));
    assert_int_equal(psEmbedShardVersion(e, 0), 41);
    assert_int_equal(psEmbedPullWait(c, e), PS_OK);
    assert_int_equal(psEmbedShardVersion(e, 0), 42);
    for (int j = 0; j < DIM; j++) {
        assert_true(dst2[j] == row_value(7, j));
        assert_true(dst2[DIM + j] == row_value(8, j));
    }
    assert_int_equal(psEmbedPullWait(c, e), PS_ERR);                  /* none in flight */
    assert_int_equal(psEmbedPush(c, e, ids, 3, g, 0), PS_OK);
    assert_int_equal(psDrain(c), PS_OK);
    snprintf(entry, sizeof(entry), "PS.PUSHGRAD %s V42 ", psEmbedShardKey(e, 0));
    assert_true(fake_find(a, entry) >= 0);
    /* no ids: nothing sent, the Wait succeeds */
    assert_int_equal(psEmbedPullAsync(c, e, ids, 0, NULL), PS_OK);
    assert_int_equal(psEmbedPullWait(c, e), PS_OK);
    assert_int_equal(T.pulls, 2);
    /* freed with a pull in flight: abandoned, the client stays usable */
    memset(dst2, 0, sizeof(dst2));
    assert_int_equal(psEmbedPullAsync(c, e, ids, 2, dst2), PS_OK);
    psEmbedFree(e);
    assert_int_equal(c->err, 0);
    for (size_t i = 0; i < 2 * DIM; i++) assert_true(dst2[i] == 0.0f);
    e = psEmbedNew("emb", DIM, 1);
    assert_int_equal(psEmbedPull(c, e, ids, 3, dst), PS_OK);
    assert_true(dst[DIM] == row_value(900, 0));
    psEmbedFree(e);
    close_all(a, c, NULL);
}

static void test_embed_push_splits_rows_per_shard_and_sums_repeats_on_request(void **state) {
    fake *a = embed_fake("A");
    psClient *c = connect_to(a, NULL);
    psEmbed *e = psEmbedNew("emb", DIM, 3);
    uint64_t ids[5] = {7, 8, 7, 100, 3};
    float g[5 * DIM];
    (void)state;
    for (int i = 0; i < 5 * DIM; i++) g[i] = (float)(i + 1) * 0.5f;
    assert_int_equal(psEmbedPush(c, e, ids, 5, g, 0), PS_OK);
    assert_int_equal(psDrain(c), PS_OK);
    assert_int_equal(T.napplied, 5);
    for (int i = 0; i < 5; i++) {
        /* each row went to its id's shard, with its own values */
        int at = applied(ids[i], psEmbedShardKey(e, psEmbedShardOf(ids[i], 3)));
        assert_true(at >= 0);
        if (ids[i] != 7) assert_memory_equal(T.row[at], g + i * DIM, sizeof(float) * DIM);
    }
    {
        /* both 7s sent as they are, in the order given */
        int first = applied(7, NULL);
        assert_memory_equal(T.row[first], g, sizeof(float) * DIM);
        int second = first + 1;
        while (second < (int)T.napplied && T.id[second] != 7) second++;
        assert_true(second < (int)T.napplied);
        assert_memory_equal(T.row[second], g + 2 * DIM, sizeof(float) * DIM);
    }
    assert_int_equal(c->stats.rows_pushed, 5);
    /* summed: id 7 once, its row the sum of rows 0 and 2 in that order */
    T.napplied = 0;
    assert_int_equal(psEmbedPush(c, e, ids, 5, g, PS_EMBED_SUM_DUPLICATES), PS_OK);
    assert_int_equal(psDrain(c), PS_OK);
    assert_int_equal(T.napplied, 4);
    {
        int at = applied(7, NULL);
        assert_true(at >= 0);
        for (int j = 0; j < DIM; j++) assert_true(T.row[at][j] == g[j] + g[2 * DIM + j]);
        assert_memory_equal(T.row[applied(100, NULL)], g + 3 * DIM, sizeof(float) * DIM);
    }
    assert_int_equal(c->stats.rows_pushed, 9);
    psEmbedFree(e);
    close_all(a, c, NULL);
}

/* n ids like a sparse step's: hashed 64-bit ids, a few small ones, and
 * every 7th a repeat of an earlier one. */
#define NEF 300
static void step_ids(uint64_t *ids, size_t n) {
    uint64_t z = 12345;
    for (size_t i = 0; i < n; i++) {
        z += 0x9e3779b97f4a7c15ULL;
        uint64_t x = z;
        x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
        x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
        ids[i] = i % 7 == 6 ? ids[i / 2] : i % 11 == 3 ? i : x ^ (x >> 31);
    }
}

/* The row pushed for occurrence 'occ' of id 'id' was g + at * DIM: the
 * applied rows of an id keep the caller's order (a stable sort). */
static void check_pushed(const uint64_t *ids, size_t n, const float *g, psEmbed *e, int nshards) {
    for (size_t i = 0; i < n; i++) {
        const char *key = psEmbedShardKey(e, psEmbedShardOf(ids[i], nshards));
        int occ = 0, seen = 0;
        for (size_t j = 0; j < i; j++) occ += ids[j] == ids[i];
        for (size_t k = 0; k < T.napplied; k++) {
            if (T.id[k] != ids[i] || strcmp(T.key[k], key)) continue;
            if (seen++ == occ) {
                assert_memory_equal(T.row[k], g + i * DIM, sizeof(float) * DIM);
                break;
            }
        }
        assert_true(seen > occ);
    }
}

static void test_embed_ef_ids_to_a_new_server_rows_in_the_callers_order(void **state) {
    fake *a = embed_fake("A");
    psClient *c = connect_to(a, NULL);
    psEmbed *e = psEmbedNew("emb", DIM, 2);
    static uint64_t ids[NEF];
    static float dst[NEF * DIM], g[NEF * DIM];
    (void)state;
    step_ids(ids, NEF);
    for (size_t i = 0; i < NEF * DIM; i++) g[i] = (float)i * 0.25f;
    assert_int_equal(psEmbedPull(c, e, ids, NEF, dst), PS_OK);
    for (size_t i = 0; i < NEF; i++)
        for (int j = 0; j < DIM; j++) assert_true(dst[i * DIM + j] == row_value(ids[i], j));
    /* both shards' pulls went as EF, their ids sorted */
    assert_int_equal(T.ef_seen, 2);
    assert_int_equal(T.raw_seen, 0);
    assert_true(T.first_ids[0] <= T.first_ids[1]);
    assert_int_equal(c->stats.rows_pulled, NEF);
    assert_int_equal(psEmbedPush(c, e, ids, NEF, g, 0), PS_OK);
    assert_int_equal(psDrain(c), PS_OK);
    assert_int_equal(T.ef_seen, 4);
    assert_int_equal(T.napplied, NEF);
    check_pushed(ids, NEF, g, e, 2);
    /* a few ids go raw: EF starts at PS_IDS_EF_MIN */
    assert_int_equal(psEmbedPull(c, e, ids, 8, dst), PS_OK);
    assert_int_equal(T.ef_seen, 4);
    assert_true(T.raw_seen > 0);
    psEmbedFree(e);
    close_all(a, c, NULL);
    /* PS_FLAG_RAW_IDS: raw lists only, rows as before */
    memset(&T, 0, sizeof(T));
    {
        psOptions o = {0};
        o.flags = PS_FLAG_RAW_IDS;
        a = embed_fake("A");
        c = connect_to(a, &o);
        e = psEmbedNew("emb", DIM, 2);
        assert_int_equal(psEmbedPull(c, e, ids, NEF, dst), PS_OK);
        for (size_t i = 0; i < NEF; i++) assert_true(dst[i * DIM] == row_value(ids[i], 0));
        assert_int_equal(psEmbedPush(c, e, ids, NEF, g, 0), PS_OK);
        assert_int_equal(psDrain(c), PS_OK);
        assert_int_equal(T.ef_seen, 0);
        assert_int_equal(T.raw_seen, 4);
        check_pushed(ids, NEF, g, e, 2);
        psEmbedFree(e);
        close_all(a, c, NULL);
    }
}

static void test_embed_ef_ids_fall_back_to_raw_on_an_old_server(void **state) {
    fake *a = embed_fake("A");
    psClient *c = connect_to(a, NULL);
    psEmbed *e = psEmbedNew("emb", DIM, 2);
    static uint64_t ids[NEF];
    static float dst[NEF * DIM], g[NEF * DIM];
    (void)state;
    T.old_server = 1;
    step_ids(ids, NEF);
    for (size_t i = 0; i < NEF * DIM; i++) g[i] = 1.0f + (float)i;
    /* the pull: refused per shard, resent raw, rows in the caller's order */
    assert_int_equal(psEmbedPull(c, e, ids, NEF, dst), PS_OK);
    for (size_t i = 0; i < NEF; i++)
        for (int j = 0; j < DIM; j++) assert_true(dst[i * DIM + j] == row_value(ids[i], j));
    assert_true(T.refused >= 1 && T.refused <= 2);
    assert_int_equal(T.raw_seen, 2);
    assert_int_equal(T.ef_seen, 0);
    assert_int_equal(c->err, 0);
    /* from then on raw at once */
    int refused = T.refused;
    assert_int_equal(psEmbedPush(c, e, ids, NEF, g, 0), PS_OK);
    assert_int_equal(psDrain(c), PS_OK);
    assert_int_equal(T.refused, refused);
    assert_int_equal(T.napplied, NEF);
    check_pushed(ids, NEF, g, e, 2);
    psEmbedFree(e);
    psClientFree(c);
    /* a new client whose first request is a push: refused, resent raw with
     * its seq, applied once */
    T.napplied = 0;
    c = connect_to(a, NULL);
    e = psEmbedNew("emb", DIM, 2);
    assert_int_equal(psEmbedPush(c, e, ids, NEF, g, 0), PS_OK);
    assert_int_equal(psDrain(c), PS_OK);
    assert_true(T.refused > refused);
    assert_int_equal(T.napplied, NEF);
    assert_int_equal(T.dups, 0);
    assert_int_equal(c->stats.push_errors, 0);
    assert_int_equal(c->stats.rows_pushed, NEF);
    check_pushed(ids, NEF, g, e, 2);
    psEmbedFree(e);
    close_all(a, c, NULL);
}

static void test_embed_push_resent_after_a_lost_reply_keeps_its_seq(void **state) {
    psOptions o = {0};
    fake *a = embed_fake("A");
    psClient *c;
    psEmbed *e = psEmbedNew("emb", DIM, 2);
    uint64_t ids[4] = {1, 2, 3, 4};
    float g[4 * DIM] = {0};
    (void)state;
    o.backoff_ms = 1;
    c = connect_to(a, &o);
    T.drop_push = 1;            /* the first shard push is applied, its reply lost */
    assert_int_equal(psEmbedPush(c, e, ids, 4, g, 0), PS_OK);
    assert_int_equal(psDrain(c), PS_OK);
    assert_int_equal(T.dups, 1);                /* the resend carried the same seq */
    assert_int_equal(T.napplied, 4);            /* every row applied exactly once */
    assert_int_equal(c->stats.rows_pushed, 4);
    assert_true(c->stats.retries >= 1);
    /* the next push of a shard takes the next seq: applied, not a duplicate */
    assert_int_equal(psEmbedPush(c, e, ids, 4, g, 0), PS_OK);
    assert_int_equal(psDrain(c), PS_OK);
    assert_int_equal(T.dups, 1);
    assert_int_equal(T.napplied, 8);
    psEmbedFree(e);
    close_all(a, c, NULL);
}

static void test_embed_requests_follow_moved_to_the_shards_new_node(void **state) {
    fake *a = embed_fake("A"), *b = embed_fake("B");
    psClient *c;
    psEmbed *e = psEmbedNew("emb", DIM, 3);
    uint64_t ids[6] = {11, 12, 13, 14, 15, 16};
    float dst[6 * DIM], g[6 * DIM];
    (void)state;
    a->cluster = b->cluster = 1;
    c = connect_to(a, NULL);
    assert_int_equal(c->cluster, 1);
    T.moved_port = b->port;     /* every shard moved to B */
    a->slots_port = b->port;
    b->slots_port = b->port;
    assert_int_equal(psEmbedPull(c, e, ids, 6, dst), PS_OK);
    for (int i = 0; i < 6; i++) assert_true(dst[i * DIM + 1] == row_value(ids[i], 1));
    assert_true(c->stats.moved >= 1);
    for (int i = 0; i < 6 * DIM; i++) g[i] = (float)i;
    assert_int_equal(psEmbedPush(c, e, ids, 6, g, 0), PS_OK);
    assert_int_equal(psDrain(c), PS_OK);
    assert_int_equal(T.napplied, 6);
    assert_int_equal(T.dups, 0);
    psEmbedFree(e);
    psClientFree(c);
    fake_stop(a);
    fake_stop(b);
}

static void test_embed_bf16_push_sends_rounded_rows_with_format(void **state) {
    fake *a = embed_fake("A");
    psClient *c = connect_to(a, NULL);
    psEmbed *e = psEmbedNew("emb", DIM, 1);
    uint64_t ids[2] = {9, 10};
    float g[2 * DIM] = {1.0f, 1.00390625f, -3.14159f, 0.1f, 2.0f, 65504.0f}, want[2 * DIM];
    unsigned char enc[4 * DIM];
    (void)state;
    assert_int_equal(psEmbedSetPushFormat(e, PS_WIRE_BF16), PS_OK);
    assert_int_equal(psEmbedPush(c, e, ids, 2, g, 0), PS_OK);
    assert_int_equal(psDrain(c), PS_OK);
    assert_string_equal(T.fmt, "BF16");
    ps_encode(PS_FMT_BF16, g, 2 * DIM, enc);
    ps_decode(PS_FMT_BF16, enc, 2 * 2 * DIM, 2 * DIM, want);
    assert_memory_equal(T.row[applied(9, NULL)], want, sizeof(float) * DIM);
    assert_memory_equal(T.row[applied(10, NULL)], want + DIM, sizeof(float) * DIM);
    assert_false(T.row[applied(9, NULL)][2] == g[2]);   /* rounded indeed */
    psEmbedFree(e);
    close_all(a, c, NULL);
}

static void test_embed_shard_gone_after_an_ack_is_lost_state(void **state) {
    psOptions o = {0};
    fake *a = embed_fake("A");
    psClient *c;
    psEmbed *e = psEmbedNew("emb", DIM, 1);
    uint64_t ids[2] = {1, 2};
    float g[2 * DIM] = {0}, dst[2 * DIM];
    (void)state;
    o.on_event = NULL;
    c = connect_to(a, &o);
    /* never seen: a plain server error, not lost state */
    T.nokey = 1;
    assert_int_equal(psEmbedPull(c, e, ids, 2, dst), PS_ERR);
    assert_int_equal(c->err, PS_ERR_SERVER);
    T.nokey = 0;
    assert_int_equal(psEmbedPush(c, e, ids, 2, g, 0), PS_OK);
    assert_int_equal(psDrain(c), PS_OK);
    T.nokey = 1;                /* the shard vanished after acknowledging a push */
    assert_int_equal(psEmbedPull(c, e, ids, 2, dst), PS_ERR);
    assert_int_equal(c->err, PS_ERR_LOST_STATE);
    assert_int_equal(c->stats.lost_state, 1);
    psEmbedFree(e);
    close_all(a, c, NULL);
}

static void close_table(fake *a, psClient *c, psEmbed *e) {
    psEmbedFree(e);
    close_all(a, c, NULL);
}

/* A client of 'f' with WAIT 1 under 'policy'. */
static psClient *wait_client(fake *f, int policy) {
    psOptions o = {0};
    o.wait_replicas = 1;
    o.durability_policy = policy;
    o.backoff_ms = 1;
    o.probe_ms = 60000;
    return connect_to(f, &o);
}

/* wait_replicas applies to table pushes as to model pushes: one WAIT per
 * node after each push's shard pushes there, and psDrain() returns once
 * it answered. */
static void test_embed_push_waits_for_replicas_once_per_node(void **state) {
    fake *a = embed_fake("A");
    psClient *c = wait_client(a, PS_DURABILITY_DEGRADE);
    psEmbed *e = psEmbedNew("emb", DIM, 3);
    uint64_t ids[6] = {1, 2, 3, 4, 5, 6};
    float g[6 * DIM] = {0};
    (void)state;
    assert_int_equal(psEmbedPush(c, e, ids, 6, g, 0), PS_OK);
    assert_int_equal(psDrain(c), PS_OK);
    assert_int_equal(fake_count(a, "WAIT"), 1);
    assert_true(fake_find(a, "WAIT") > fake_find(a, "PS.PUSHGRAD"));
    assert_int_equal(psEmbedPush(c, e, ids, 6, g, 0), PS_OK);
    assert_int_equal(psDrain(c), PS_OK);
    assert_int_equal(fake_count(a, "WAIT"), 2);
    assert_int_equal(c->stats.unreplicated_pushes, 0);
    assert_int_equal(c->stats.rows_pushed, 12);
    close_table(a, c, e);
}

/* Short WAITs follow the durability policy: degrade counts the shard
 * pushes as unreplicated (and stops WAITing on the node), fail reports
 * PS_ERR_DURABILITY. */
static void test_embed_short_wait_follows_the_durability_policy(void **state) {
    fake *a = embed_fake("A");
    psClient *c = wait_client(a, PS_DURABILITY_DEGRADE);
    psEmbed *e = psEmbedNew("emb", DIM, 2);
    uint64_t ids[4] = {1, 2, 3, 4};
    float g[4 * DIM] = {0};
    int shards = 0;
    (void)state;
    for (int s = 0; s < 2; s++)
        for (int i = 0; i < 4; i++)
            if (psEmbedShardOf(ids[i], 2) == s) { shards++; break; }
    a->wait_zero = -1;
    for (int k = 0; k < 3; k++) assert_int_equal(psEmbedPush(c, e, ids, 4, g, 0), PS_OK);
    assert_int_equal(psDrain(c), PS_OK);
    assert_int_equal(c->stats.unreplicated_pushes, 3 * shards);
    assert_int_equal(c->stats.degraded_nodes, 1);
    close_table(a, c, e);

    a = embed_fake("A");
    c = wait_client(a, PS_DURABILITY_FAIL);
    e = psEmbedNew("emb", DIM, 2);
    a->wait_zero = -1;
    (void)psEmbedPush(c, e, ids, 4, g, 0);
    assert_int_equal(psDrain(c), PS_ERR);
    assert_int_equal(c->err, PS_ERR_DURABILITY);
    close_table(a, c, e);
}

/* A WAIT lost with its connection: the shard pushes it covered were
 * applied but maybe not replicated, so they are resent with their seqs
 * (answered as duplicates, every row applied once, counted once) and
 * WAITed for again. */
static void test_embed_lost_wait_resends_the_pushes_and_waits_again(void **state) {
    fake *a = embed_fake("A");
    psClient *c = wait_client(a, PS_DURABILITY_BLOCK);
    psEmbed *e = psEmbedNew("emb", DIM, 1);
    uint64_t ids[3] = {7, 8, 9};
    float g[3 * DIM] = {0};
    (void)state;
    a->drop_wait = 1;
    assert_int_equal(psEmbedPush(c, e, ids, 3, g, 0), PS_OK);
    assert_int_equal(psDrain(c), PS_OK);
    assert_int_equal(T.napplied, 3);
    assert_int_equal(T.dups, 1);
    assert_int_equal(c->stats.rows_pushed, 3);
    assert_int_equal(fake_count(a, "WAIT"), 2);
    assert_int_equal(c->stats.wait_short, 1);
    close_table(a, c, e);
}

/* Error feedback (psEmbedSetErrorFeedback): over many BF16 pushes the rows
 * applied for an id with a residual sum to the gradients sent to within one
 * rounding; an id beyond the residual bound (2 here) loses every push's
 * rounding error, as without feedback. */
static void test_embed_error_feedback_keeps_bf16_rounding_within_its_bound(void **state) {
    fake *a = embed_fake("A");
    psClient *c = connect_to(a, NULL);
    psEmbed *e = psEmbedNew("emb", DIM, 1);
    uint64_t ids[3] = {1, 2, 3};
    float g[3 * DIM];
    const int pushes = 50;
    (void)state;
    for (int i = 0; i < 3 * DIM; i++) g[i] = 0.1f + 0.013f * (float)i; /* not BF16 values */
    assert_int_equal(psEmbedSetPushFormat(e, PS_WIRE_BF16), PS_OK);
    assert_int_equal(psEmbedSetErrorFeedback(e, 2), PS_OK);
    for (int k = 0; k < pushes; k++) assert_int_equal(psEmbedPush(c, e, ids, 3, g, 0), PS_OK);
    assert_int_equal(psDrain(c), PS_OK);
    assert_int_equal(T.napplied, 3 * pushes);
    for (int r = 0; r < 3; r++) {
        double worst = 0;
        for (int j = 0; j < DIM; j++) {
            double sum = 0;
            for (size_t i = 0; i < T.napplied; i++)
                if (T.id[i] == ids[r]) sum += T.row[i][j];
            const double err = fabs(sum - (double)pushes * g[r * DIM + j]);
            if (err > worst) worst = err;
        }
        if (r < 2)
            assert_true(worst < 1e-3);  /* one BF16 rounding of ~0.1..0.2: < 2^-9 */
        else
            assert_true(worst > 2e-3);  /* 50 lost roundings */
    }
    close_table(a, c, e);
}

int main(void) {
    (void)model4;               /* client_helpers.h's model helpers: not used here */
    (void)push_zeros;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_embed_shard_of_is_splitmix64_mod_n),
        cmocka_unit_test(test_embed_shard_keys_sit_on_spread_slots),
        cmocka_unit_test_setup(test_embed_pull_scatters_rows_to_the_callers_order_with_repeats, setup),
        cmocka_unit_test_setup(test_embed_async_pull_keeps_push_versions_until_its_wait, setup),
        cmocka_unit_test_setup(test_embed_push_splits_rows_per_shard_and_sums_repeats_on_request, setup),
        cmocka_unit_test_setup(test_embed_push_resent_after_a_lost_reply_keeps_its_seq, setup),
        cmocka_unit_test_setup(test_embed_requests_follow_moved_to_the_shards_new_node, setup),
        cmocka_unit_test_setup(test_embed_bf16_push_sends_rounded_rows_with_format, setup),
        cmocka_unit_test_setup(test_embed_shard_gone_after_an_ack_is_lost_state, setup),
        cmocka_unit_test_setup(test_embed_push_waits_for_replicas_once_per_node, setup),
        cmocka_unit_test_setup(test_embed_short_wait_follows_the_durability_policy, setup),
        cmocka_unit_test_setup(test_embed_ef_ids_to_a_new_server_rows_in_the_callers_order, setup),
        cmocka_unit_test_setup(test_embed_ef_ids_fall_back_to_raw_on_an_old_server, setup),
        cmocka_unit_test_setup(test_embed_lost_wait_resends_the_pushes_and_waits_again, setup),
        cmocka_unit_test_setup(test_embed_error_feedback_keeps_bf16_rounding_within_its_bound,
                               setup),
    };
    signal(SIGPIPE, SIG_IGN);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
