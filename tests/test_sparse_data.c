/* test_sparse_data.c -- cmocka tests of ml/sparse_data.c: libsvm and
 * Criteo files (plain and gzip) in a private temp directory, byte-range
 * splits that tile a file, and bad input named by file:line and token. */

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "sparse_data.h"
#include "tmpdir_fixture.h"


static const char *tpath(const char *name)
{
    static char buf[512];
    snprintf(buf, sizeof(buf), "%s/%s", tmpdir, name);
    return buf;
}

/* Writes 'text' to 'path', gzip-compressed when 'gz'. */
static void write_file(const char *path, const char *text, int gz)
{
    size_t len = strlen(text);
    if (gz) {
        gzFile f = gzopen(path, "wb");
        assert_non_null(f);
        if (len) assert_int_equal(gzwrite(f, text, (unsigned)len), (int)len);
        assert_int_equal(gzclose(f), Z_OK);
    } else {
        FILE *f = fopen(path, "wb");
        assert_non_null(f);
        if (len) assert_int_equal(fwrite(text, 1, len, f), len);
        assert_int_equal(fclose(f), 0);
    }
}

/* Reads all of 'path' with options 'o' in batches of 'per' rows into one
 * batch 'all'. Returns 0, or -1 with the reader's message in 'err'. */
static int read_all(const char *path, const ps_sparse_opts *o, int per, ps_sparse_batch *all,
                    char *err, size_t errlen)
{
    ps_sparse_reader *r = ps_sparse_open(path, o, err, errlen);
    if (r == NULL) return -1;
    ps_sparse_batch b = {0};
    int got, rc = 0;
    all->ndense = o && o->format == PS_SPARSE_CRITEO && o->criteo_dense ? PS_CRITEO_INTS : 0;
    while ((got = ps_sparse_read(r, &b, per, err, errlen)) > 0) {
        for (int i = 0; i < b.n; i++) {
            size_t a = b.off[i];
            assert_int_equal(ps_sparse_batch_add(all, b.label[i], b.field + a, b.id + a, b.val + a,
                                                 b.off[i + 1] - a,
                                                 b.ndense ? b.dense + (size_t)i * b.ndense : NULL),
                             0);
        }
    }
    if (got < 0) rc = -1;
    ps_sparse_batch_free(&b);
    ps_sparse_close(r);
    return rc;
}

/* ================================= libsvm ================================= */

static const char *LIBSVM =
    "1 3:0.5 18446744073709551615 7:2\n"
    "\n"
    "-1 3\r\n"
    "+1\n"
    "   0\t9:1e-3   \n"
    "0 72057594037927937:1";   /* no final newline; field 1 in the top 8 bits */

static void check_libsvm(const ps_sparse_batch *b)
{
    assert_int_equal(b->n, 5);
    assert_int_equal(b->nnz, 6);
    float labels[] = {1, 0, 1, 0, 0};
    size_t off[] = {0, 3, 4, 4, 5, 6};
    for (int i = 0; i < 5; i++) assert_true(b->label[i] == labels[i]);
    for (int i = 0; i <= 5; i++) assert_int_equal(b->off[i], off[i]);
    assert_true(b->id[0] == 3 && b->val[0] == 0.5f);
    assert_true(b->id[1] == UINT64_MAX && b->val[1] == 1.0f); /* value optional */
    assert_true(b->id[2] == 7 && b->val[2] == 2.0f);
    assert_true(b->id[3] == 3 && b->val[3] == 1.0f);
    assert_true(b->id[4] == 9 && b->val[4] == 1e-3f);
    assert_true(b->id[5] == 72057594037927937ULL);
}

static void test_libsvm_reads_labels_ids_values_plain_and_gzip(void **state)
{
    (void)state;
    char err[512];
    for (int gz = 0; gz < 2; gz++) {
        const char *p = tpath(gz ? "a.libsvm.gz" : "a.libsvm");
        write_file(p, LIBSVM, gz);
        for (int per = 1; per <= 7; per += 3) {
            ps_sparse_batch all = {0};
            assert_int_equal(read_all(p, NULL, per, &all, err, sizeof(err)), 0);
            check_libsvm(&all);
            for (size_t j = 0; j < all.nnz; j++) assert_int_equal(all.field[j], 0);
            ps_sparse_batch_free(&all);
        }
        /* field_bits 8: the field is the id's top byte. */
        ps_sparse_opts o = {.field_bits = 8};
        ps_sparse_batch all = {0};
        assert_int_equal(read_all(p, &o, 100, &all, err, sizeof(err)), 0);
        assert_int_equal(all.field[1], 255);
        assert_int_equal(all.field[5], 1);
        assert_int_equal(all.field[0], 0);
        ps_sparse_batch_free(&all);
    }
}

/* Expects reading 'text' to fail with a message containing every needle. */
static void expect_bad(const char *text, int format, const char *n1, const char *n2)
{
    char err[512] = "";
    const char *p = tpath("bad.txt");
    write_file(p, text, 0);
    ps_sparse_opts o = {.format = format};
    ps_sparse_batch all = {0};
    assert_int_equal(read_all(p, &o, 2, &all, err, sizeof(err)), -1);
    if (strstr(err, n1) == NULL || (n2 && strstr(err, n2) == NULL))
        fail_msg("error '%s' does not mention '%s' and '%s'", err, n1, n2 ? n2 : "");
    ps_sparse_batch_free(&all);
}

static void test_libsvm_bad_tokens_name_file_line_and_token(void **state)
{
    (void)state;
    expect_bad("1 3:1\n\n2 4:1\n", PS_SPARSE_LIBSVM, "bad.txt:3:", "'2'");
    expect_bad("1 3:1\nyes 4:1\n", PS_SPARSE_LIBSVM, "bad.txt:2:", "'yes'");
    expect_bad("1 3:1\n0 x7:1\n", PS_SPARSE_LIBSVM, ":2: bad feature id", "'x7:1'");
    expect_bad("0 -3:1\n", PS_SPARSE_LIBSVM, ":1: bad feature id", "'-3:1'");
    expect_bad("0 18446744073709551616:1\n", PS_SPARSE_LIBSVM, "bad feature id", "18446744073709551616");
    expect_bad("0 3:\n", PS_SPARSE_LIBSVM, "bad feature value", "'3:'");
    expect_bad("0 3:nan\n", PS_SPARSE_LIBSVM, "bad feature value", "'3:nan'");
    expect_bad("0 3:1e999\n", PS_SPARSE_LIBSVM, "bad feature value", NULL);
    expect_bad("0 3:1:2\n", PS_SPARSE_LIBSVM, "bad feature value", "'3:1:2'");
}

static void test_open_errors_name_the_file(void **state)
{
    (void)state;
    char err[512];
    assert_null(ps_sparse_open(tpath("missing.libsvm"), NULL, err, sizeof(err)));
    assert_non_null(strstr(err, "missing.libsvm"));
    ps_sparse_opts o = {.start = 10, .end = 5};
    write_file(tpath("e.libsvm"), "", 0);
    assert_null(ps_sparse_open(tpath("e.libsvm"), &o, err, sizeof(err)));
    /* An empty file reads no rows. */
    ps_sparse_batch all = {0};
    assert_int_equal(read_all(tpath("e.libsvm"), NULL, 4, &all, err, sizeof(err)), 0);
    assert_int_equal(all.n, 0);
    ps_sparse_batch_free(&all);
}

/* Every split point pair (a, b) of a file: the ranges [0,a), [a,b), [b,end)
 * together read every line exactly once, in order, plain and gzip. */
static void test_byte_ranges_tile_the_file_like_input_splits(void **state)
{
    (void)state;
    char text[4096] = "";
    for (int i = 0; i < 12; i++) {
        char line[64];
        /* Lines of different lengths; one blank line; id i marks the line. */
        snprintf(line, sizeof(line), i == 5 ? "\n" : "%d %d:1%.*s\n", i % 2, i, i % 4 * 2,
                 " 999:1 999:1");
        strcat(text, line);
    }
    size_t len = strlen(text);
    char err[512];
    for (int gz = 0; gz < 2; gz++) {
        const char *p = tpath(gz ? "s.libsvm.gz" : "s.libsvm");
        write_file(p, text, gz);
        for (size_t a = 0; a <= len; a += gz ? 7 : 1) {
            for (size_t b = a; b <= len + 3; b += gz ? 11 : 3) {
                uint64_t cut[4] = {0, a, b, len + 5};
                uint64_t seen = 0;
                int rows = 0;
                for (int s = 0; s < 3; s++) {
                    ps_sparse_opts o = {.start = cut[s], .end = cut[s + 1]};
                    if (cut[s + 1] == cut[s]) continue;
                    ps_sparse_batch all = {0};
                    assert_int_equal(read_all(p, &o, 3, &all, err, sizeof(err)), 0);
                    for (int i = 0; i < all.n; i++) {
                        uint64_t id = all.id[all.off[i]];
                        /* in order, each once */
                        assert_true(id < 12 && (seen >> id) == 0);
                        seen |= 1ULL << id;
                        rows++;
                    }
                    ps_sparse_batch_free(&all);
                }
                if (rows != 11) fail_msg("split at %zu,%zu (gz %d): %d rows, expected 11", a, b, gz, rows);
            }
        }
    }
}

/* A range that starts past the first line counts lines from its start and
 * says so in errors. */
static void test_error_in_a_split_says_where_the_split_starts(void **state)
{
    (void)state;
    const char *p = tpath("split_bad.libsvm");
    write_file(p, "1 1:1\n0 2:1\n1 bad:1\n", 0);
    ps_sparse_opts o = {.start = 6};
    ps_sparse_batch all = {0};
    char err[512];
    assert_int_equal(read_all(p, &o, 8, &all, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "split_bad.libsvm:2 (lines counted from byte 6)"));
    ps_sparse_batch_free(&all);
}

/* A gzip file cut mid-stream (zlib reads it as a clean end) and a file
 * that no longer has the size a job recorded (o.expect_bytes) fail the
 * read with the file's name, instead of training fewer lines in silence. */
static void test_a_cut_gzip_or_a_changed_file_is_an_error_not_fewer_lines(void **state)
{
    (void)state;
    char text[1 << 16] = "", err[512];
    for (int i = 0; i < 2000; i++) {
        char line[64];
        snprintf(line, sizeof(line), "%d %d:1 %d:0.5\n", i % 2, i, (i * 7919) % 100003);
        strcat(text, line);
    }
    const size_t len = strlen(text);
    const char *gp = tpath("cut.libsvm.gz");
    write_file(gp, text, 1);
    /* Keep the first half of the compressed bytes. */
    FILE *f = fopen(gp, "rb");
    assert_non_null(f);
    static unsigned char gzb[1 << 16];
    size_t gzlen = fread(gzb, 1, sizeof(gzb), f);
    fclose(f);
    f = fopen(gp, "wb");
    assert_int_equal(fwrite(gzb, 1, gzlen / 2, f), gzlen / 2);
    fclose(f);
    ps_sparse_batch all = {0};
    assert_int_equal(read_all(gp, NULL, 64, &all, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "cut.libsvm.gz: gzip stream cut short"));
    ps_sparse_batch_free(&all);

    /* The same text, whole: with the right expected size every range reads;
     * after the file shrank, a range up to the old end fails (plain at open,
     * gzip at the read that reaches the new end). */
    for (int gz = 0; gz < 2; gz++) {
        const char *p = tpath(gz ? "shrunk.libsvm.gz" : "shrunk.libsvm");
        write_file(p, text, gz);
        ps_sparse_opts o = {.start = len / 2, .end = len, .expect_bytes = len};
        if (read_all(p, &o, 64, &all, err, sizeof(err)) != 0) fail_msg("%s", err);
        assert_true(all.n > 900 && all.n < 1100);
        ps_sparse_batch_free(&all);
        const char keep = text[len / 4 * 3];
        text[len / 4 * 3] = '\0'; /* three quarters: past the new end */
        write_file(p, text, gz);
        text[len / 4 * 3] = keep;
        assert_int_equal(read_all(p, &o, 64, &all, err, sizeof(err)), -1);
        assert_non_null(strstr(err, gz ? "shrunk.libsvm.gz: the file ends at byte"
                                       : "shrunk.libsvm: "));
        assert_non_null(strstr(err, "changed since init"));
        ps_sparse_batch_free(&all);
        /* A range wholly past the new end reads nothing silently no more. */
        o.start = len - 10;
        assert_int_equal(read_all(p, &o, 64, &all, err, sizeof(err)), -1);
        ps_sparse_batch_free(&all);
    }
}

/* ================================= Criteo ================================= */

/* A Criteo line: label, 13 integers, 26 categoricals; "" are missing. */
static void criteo_line(char *out, size_t len, const char *label, const char *ints[13],
                        const char *cats[26])
{
    size_t n = (size_t)snprintf(out, len, "%s", label);
    for (int i = 0; i < 13; i++) n += (size_t)snprintf(out + n, len - n, "\t%s", ints[i]);
    for (int i = 0; i < 26; i++) n += (size_t)snprintf(out + n, len - n, "\t%s", cats[i]);
    snprintf(out + n, len - n, "\n");
}

static void test_criteo_buckets_hashes_and_handles_missing_values(void **state)
{
    (void)state;
    const char *ints[13] = {"5", "", "-3", "0", "1", "2", "3", "1000", "", "7", "8", "9", "10"};
    const char *cats[26];
    for (int i = 0; i < 26; i++) cats[i] = i % 5 == 0 ? "" : "68fd1e64";
    cats[1] = "80E26C9B";
    char text[8192];
    criteo_line(text, sizeof(text), "1", ints, cats);
    criteo_line(text + strlen(text), sizeof(text) - strlen(text), "0", ints, cats);
    char err[512];
    for (int gz = 0; gz < 2; gz++) {
        const char *p = tpath(gz ? "c.tsv.gz" : "c.tsv");
        write_file(p, text, gz);
        ps_sparse_opts o = {.format = PS_SPARSE_CRITEO, .criteo_dense = 1};
        ps_sparse_batch all = {0};
        assert_int_equal(read_all(p, &o, 1, &all, err, sizeof(err)), 0);
        assert_int_equal(all.n, 2);
        assert_int_equal(all.nnz, 2 * PS_CRITEO_FIELDS);
        assert_true(all.label[0] == 1.0f && all.label[1] == 0.0f);
        for (int f = 0; f < PS_CRITEO_FIELDS; f++) {
            assert_int_equal(all.field[f], f);
            assert_int_equal(ps_sparse_field_of(all.id[f]), f);
            assert_true(all.val[f] == 1.0f);
            assert_true(all.id[f] == all.id[PS_CRITEO_FIELDS + f]); /* same line, same ids */
        }
        /* Integer buckets: 5 -> 3 + 2, missing -> 0, -3 -> 1, 0 -> 2, 1000 -> 3 + 9. */
        assert_true(all.id[0] == ps_sparse_id_u64(0, 5));
        assert_true(all.id[1] == ps_sparse_id_u64(1, 0));
        assert_true(all.id[2] == ps_sparse_id_u64(2, 1));
        assert_true(all.id[3] == ps_sparse_id_u64(3, 2));
        assert_true(all.id[7] == ps_sparse_id_u64(7, 12));
        /* Categoricals: hex is case-insensitive; missing has its own id. */
        assert_true(all.id[14] == ps_sparse_id_u64(14, 0x80e26c9bULL));
        assert_true(all.id[13] == ps_sparse_id(13, "", 0));
        assert_true(all.id[13] != ps_sparse_id_u64(13, 0));
        /* Same token, different fields: different ids. */
        assert_true(all.id[15] != all.id[16]);
        /* Dense: log(1 + max(v, 0)), missing 0. */
        assert_int_equal(all.ndense, 13);
        assert_true(fabsf(all.dense[0] - logf(6.0f)) < 1e-6f);
        assert_true(all.dense[1] == 0.0f && all.dense[2] == 0.0f);
        ps_sparse_batch_free(&all);
    }
    assert_int_equal(ps_criteo_bucket(0, 1), 0);
    assert_int_equal(ps_criteo_bucket(-1, 0), 1);
    assert_int_equal(ps_criteo_bucket(1, 0), 3);
    assert_int_equal(ps_criteo_bucket(3, 0), 4);
    assert_int_equal(ps_criteo_bucket(4, 0), 5);
}

static void test_criteo_bad_lines_name_file_line_and_token(void **state)
{
    (void)state;
    const char *ints[13] = {"1", "2", "3", "4", "5", "6", "7", "8", "9", "10", "11", "12", "13"};
    const char *cats[26];
    for (int i = 0; i < 26; i++) cats[i] = "abc";
    char good[4096], text[8192];
    criteo_line(good, sizeof(good), "0", ints, cats);
    snprintf(text, sizeof(text), "%s1\t2\t3\n", good);
    expect_bad(text, PS_SPARSE_CRITEO, "bad.txt:2:", "3 tab-separated columns, expected 40");
    ints[4] = "1.5";
    criteo_line(text, sizeof(text), "0", ints, cats);
    expect_bad(text, PS_SPARSE_CRITEO, "bad.txt:1:", "I5 '1.5'");
    ints[4] = "5";
    cats[2] = "zz";
    criteo_line(text, sizeof(text), "1", ints, cats);
    expect_bad(text, PS_SPARSE_CRITEO, "C3 'zz'", NULL);
    cats[2] = "abc";
    criteo_line(text, sizeof(text), "2", ints, cats);
    expect_bad(text, PS_SPARSE_CRITEO, "bad label '2'", NULL);
}

static void test_ids_are_stable_and_tagged_with_their_field(void **state)
{
    (void)state;
    /* Pinned values: data files and trained tables depend on them. */
    uint64_t a = ps_sparse_id_u64(3, 12345), b = ps_sparse_id(3, "abc", 3);
    assert_int_equal(ps_sparse_field_of(a), 3);
    assert_int_equal(ps_sparse_field_of(b), 3);
    assert_true(a != ps_sparse_id_u64(4, 12345));
    assert_true(b != ps_sparse_id(3, "abd", 3));
    assert_true(a == 228374981746956213ULL);
    assert_true(b == 217862532663046305ULL);
}

/* Lines from memory (a stream's entries) parse as the file reader parses
 * them; a bad line is an error that leaves the batch as it was. */
static void test_lines_from_memory_match_the_file_reader(void **state)
{
    (void)state;
    char err[512];
    const char *p = tpath("m.libsvm");
    write_file(p, LIBSVM, 0);
    ps_sparse_opts o = {.field_bits = 8};
    ps_sparse_batch f = {0}, m = {0};
    assert_int_equal(read_all(p, &o, 100, &f, err, sizeof(err)), 0);
    ps_sparse_reader *r = ps_sparse_lines(&o, "events");
    assert_non_null(r);
    const char *s = LIBSVM;
    while (*s) {
        const char *e = strchr(s, '\n');
        size_t len = e ? (size_t)(e - s) : strlen(s);
        int blank = strspn(s, " \t\r") >= len;
        int rc = ps_sparse_add_line(r, &m, s, len, err, sizeof(err));
        assert_int_equal(rc, blank ? -1 : 0);
        s += len + (e != NULL);
    }
    assert_int_equal(m.n, f.n);
    assert_int_equal(m.nnz, f.nnz);
    for (int i = 0; i < f.n; i++) assert_true(m.label[i] == f.label[i]);
    for (size_t j = 0; j < f.nnz; j++) {
        assert_true(m.id[j] == f.id[j]);
        assert_true(m.val[j] == f.val[j]);
        assert_int_equal(m.field[j], f.field[j]);
    }
    static const char *bad[] = {"2 5:1", "1 12x:1", "garbage", "", "1 3:1\n1 4:1"};
    for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++) {
        err[0] = '\0';
        assert_int_equal(ps_sparse_add_line(r, &m, bad[k], strlen(bad[k]), err, sizeof(err)), -1);
        assert_true(strstr(err, "events") != NULL);
        assert_int_equal(m.n, f.n);
        assert_int_equal(m.nnz, f.nnz);
    }
    assert_int_equal(ps_sparse_add_line(r, &m, "1 7:2", 5, err, sizeof(err)), 0);
    assert_int_equal(m.n, f.n + 1);
    assert_true(m.id[m.nnz - 1] == 7 && m.val[m.nnz - 1] == 2.0f);
    ps_sparse_close(r);
    ps_sparse_batch_free(&f);
    ps_sparse_batch_free(&m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_libsvm_reads_labels_ids_values_plain_and_gzip),
        cmocka_unit_test(test_libsvm_bad_tokens_name_file_line_and_token),
        cmocka_unit_test(test_open_errors_name_the_file),
        cmocka_unit_test(test_byte_ranges_tile_the_file_like_input_splits),
        cmocka_unit_test(test_error_in_a_split_says_where_the_split_starts),
        cmocka_unit_test(test_a_cut_gzip_or_a_changed_file_is_an_error_not_fewer_lines),
        cmocka_unit_test(test_criteo_buckets_hashes_and_handles_missing_values),
        cmocka_unit_test(test_criteo_bad_lines_name_file_line_and_token),
        cmocka_unit_test(test_ids_are_stable_and_tagged_with_their_field),
        cmocka_unit_test(test_lines_from_memory_match_the_file_reader),
    };
    tmpdir_prefix = "test_sparse";
    return cmocka_run_group_tests(tests, tmpdir_setup, tmpdir_teardown);
}
