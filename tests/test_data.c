/* test_data.c -- cmocka tests of ml/data.c: IDX (plain and gzip) and CSV
 * files written into a private temp directory, read back, and corrupted. */

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "data.h"
#include "tmpdir_fixture.h"

/* ============================== fixtures ================================== */

/* Returns a static path of 'name' inside the temp directory (two slots, so
 * an images path and a labels path can be live at once). */
static const char *tpath(const char *name)
{
    static char buf[2][512];
    static int which;
    which ^= 1;
    snprintf(buf[which], sizeof(buf[which]), "%s/%s", tmpdir, name);
    return buf[which];
}

/* Writes 'len' bytes to 'path', gzip-compressed when 'gz'. */
static void write_bytes(const char *path, const void *data, size_t len, int gz)
{
    if (gz) {
        gzFile f = gzopen(path, "wb");
        assert_non_null(f);
        if (len > 0) assert_int_equal(gzwrite(f, data, (unsigned)len), (int)len);
        assert_int_equal(gzclose(f), Z_OK);
    } else {
        FILE *f = fopen(path, "wb");
        assert_non_null(f);
        if (len > 0) assert_int_equal(fwrite(data, 1, len, f), len);
        assert_int_equal(fclose(f), 0);
    }
}

static void write_text(const char *path, const char *text)
{
    write_bytes(path, text, strlen(text), 0);
}

static size_t put_be32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
    return 4;
}

/* Writes an IDX image file of 'n' images of rows x cols with the given
 * magic; 'pixels' holds n*rows*cols bytes minus 'cut' (a truncated file). */
static void write_images(const char *path, uint32_t magic, uint32_t n, uint32_t rows,
                         uint32_t cols, const unsigned char *pixels, size_t cut, int gz)
{
    size_t payload = (size_t)n * rows * cols - cut;
    unsigned char *buf = malloc(16 + payload);
    assert_non_null(buf);
    size_t off = put_be32(buf, magic);
    off += put_be32(buf + off, n);
    off += put_be32(buf + off, rows);
    off += put_be32(buf + off, cols);
    memcpy(buf + off, pixels, payload);
    write_bytes(path, buf, off + payload, gz);
    free(buf);
}

static void write_labels(const char *path, uint32_t magic, uint32_t n, const unsigned char *labels,
                         int gz)
{
    unsigned char buf[64];
    size_t off = put_be32(buf, magic);
    off += put_be32(buf + off, n);
    memcpy(buf + off, labels, n);
    write_bytes(path, buf, off + n, gz);
}

/* Three 2x2 images and their labels 0, 2, 1. */
static const unsigned char PIX[12] = {0, 255, 51, 102, 1, 2, 3, 4, 255, 255, 0, 0};
static const unsigned char LAB[3] = {0, 2, 1};

static void check_small_idx(const ps_dataset *ds)
{
    assert_int_equal(ds->n, 3);
    assert_int_equal(ds->dim, 4);
    assert_int_equal(ds->nclasses, 3);
    for (int i = 0; i < 12; i++) assert_true(ds->x[i] == (float)PIX[i] / 255.0f);
    assert_true(ds->x[1] == 1.0f);
    assert_true(ds->x[2] == 0.2f);
    for (int i = 0; i < 3; i++) assert_int_equal(ds->y[i], LAB[i]);
}

/* Expects 'rc' to be a failure with an empty dataset and a message
 * containing 'needle'. */
static void expect_error(int rc, const ps_dataset *ds, const char *err, const char *needle)
{
    assert_int_equal(rc, -1);
    assert_null(ds->x);
    assert_null(ds->y);
    assert_int_equal(ds->n, 0);
    if (strstr(err, needle) == NULL) fail_msg("error '%s' does not mention '%s'", err, needle);
}

/* ================================= IDX ==================================== */

static void test_idx_plain_files_read_back(void **state)
{
    (void)state;
    char err[256];
    ps_dataset ds;
    write_images(tpath("p-img"), 0x803, 3, 2, 2, PIX, 0, 0);
    write_labels(tpath("p-lab"), 0x801, 3, LAB, 0);
    assert_int_equal(ps_dataset_load_idx(tpath("p-img"), tpath("p-lab"), &ds, err, sizeof(err)), 0);
    check_small_idx(&ds);
    ps_dataset_free(&ds);
    assert_null(ds.x);
    ps_dataset_free(&ds); /* twice is harmless */
}

static void test_idx_gzip_files_read_back(void **state)
{
    (void)state;
    char err[256];
    ps_dataset ds;
    write_images(tpath("g-img.gz"), 0x803, 3, 2, 2, PIX, 0, 1);
    write_labels(tpath("g-lab.gz"), 0x801, 3, LAB, 1);
    assert_int_equal(
        ps_dataset_load_idx(tpath("g-img.gz"), tpath("g-lab.gz"), &ds, err, sizeof(err)), 0);
    check_small_idx(&ds);
    ps_dataset_free(&ds);
}

static void test_idx_rejects_bad_image_magic(void **state)
{
    (void)state;
    char err[256];
    ps_dataset ds;
    write_images(tpath("bm-img"), 0x0803 | 0x0900, 3, 2, 2, PIX, 0, 0); /* int32 dtype */
    write_labels(tpath("bm-lab"), 0x801, 3, LAB, 0);
    int rc = ps_dataset_load_idx(tpath("bm-img"), tpath("bm-lab"), &ds, err, sizeof(err));
    expect_error(rc, &ds, err, "magic");
}

static void test_idx_rejects_labels_file_given_as_images(void **state)
{
    (void)state;
    char err[256];
    ps_dataset ds;
    write_labels(tpath("sw-lab"), 0x801, 3, LAB, 1);
    int rc = ps_dataset_load_idx(tpath("sw-lab"), tpath("sw-lab"), &ds, err, sizeof(err));
    expect_error(rc, &ds, err, "magic");
}

static void test_idx_rejects_bad_label_magic(void **state)
{
    (void)state;
    char err[256];
    ps_dataset ds;
    write_images(tpath("bl-img"), 0x803, 3, 2, 2, PIX, 0, 0);
    write_labels(tpath("bl-lab"), 0x802, 3, LAB, 0);
    int rc = ps_dataset_load_idx(tpath("bl-img"), tpath("bl-lab"), &ds, err, sizeof(err));
    expect_error(rc, &ds, err, "magic");
}

static void test_idx_rejects_truncated_plain_and_gzip_images(void **state)
{
    (void)state;
    char err[256];
    ps_dataset ds;
    for (int gz = 0; gz <= 1; gz++) {
        const char *img = gz ? "tr-img.gz" : "tr-img";
        write_images(tpath(img), 0x803, 3, 2, 2, PIX, 1, gz);
        write_labels(tpath("tr-lab"), 0x801, 3, LAB, gz);
        int rc = ps_dataset_load_idx(tpath(img), tpath("tr-lab"), &ds, err, sizeof(err));
        expect_error(rc, &ds, err, "truncated");
    }
}

static void test_idx_rejects_truncated_header(void **state)
{
    (void)state;
    char err[256];
    ps_dataset ds;
    unsigned char h[6] = {0, 0, 8, 3, 0, 0};
    write_bytes(tpath("th-img"), h, sizeof(h), 1);
    write_labels(tpath("th-lab"), 0x801, 3, LAB, 0);
    int rc = ps_dataset_load_idx(tpath("th-img"), tpath("th-lab"), &ds, err, sizeof(err));
    expect_error(rc, &ds, err, "truncated");
}

static void test_idx_rejects_count_mismatch(void **state)
{
    (void)state;
    char err[256];
    ps_dataset ds;
    write_images(tpath("cm-img"), 0x803, 3, 2, 2, PIX, 0, 0);
    write_labels(tpath("cm-lab"), 0x801, 2, LAB, 0);
    int rc = ps_dataset_load_idx(tpath("cm-img"), tpath("cm-lab"), &ds, err, sizeof(err));
    expect_error(rc, &ds, err, "mismatch");
}

static void test_idx_rejects_trailing_data(void **state)
{
    (void)state;
    char err[256];
    ps_dataset ds;
    /* Header says 2 images, 3 are present. */
    for (int gz = 0; gz <= 1; gz++) {
        write_images(tpath("td-img"), 0x803, 3, 2, 2, PIX, 0, gz);
        unsigned char buf[16 + 12];
        FILE *f;
        if (gz) {
            gzFile g = gzopen(tpath("td-img"), "rb");
            assert_non_null(g);
            assert_int_equal(gzread(g, buf, sizeof(buf)), (int)sizeof(buf));
            gzclose(g);
        } else {
            f = fopen(tpath("td-img"), "rb");
            assert_non_null(f);
            assert_int_equal(fread(buf, 1, sizeof(buf), f), sizeof(buf));
            fclose(f);
        }
        put_be32(buf + 4, 2);
        write_bytes(tpath("td-img"), buf, sizeof(buf), gz);
        write_labels(tpath("td-lab"), 0x801, 2, LAB, gz);
        int rc = ps_dataset_load_idx(tpath("td-img"), tpath("td-lab"), &ds, err, sizeof(err));
        expect_error(rc, &ds, err, "trailing");
    }
}

static void test_idx_rejects_implausible_sizes_before_allocating(void **state)
{
    (void)state;
    char err[256];
    ps_dataset ds;
    /* 2^30 images of 2^16 x 2^16 pixels in a 16-byte gzip file. */
    unsigned char h[16];
    put_be32(h, 0x803);
    put_be32(h + 4, 1u << 30);
    put_be32(h + 8, 1u << 16);
    put_be32(h + 12, 1u << 16);
    write_bytes(tpath("big-img"), h, sizeof(h), 1);
    unsigned char l[8];
    put_be32(l, 0x801);
    put_be32(l + 4, 1u << 30);
    write_bytes(tpath("big-lab"), l, sizeof(l), 1);
    int rc = ps_dataset_load_idx(tpath("big-img"), tpath("big-lab"), &ds, err, sizeof(err));
    expect_error(rc, &ds, err, "implausible");
    /* A zero dimension is rejected too. */
    put_be32(h + 4, 3);
    put_be32(h + 8, 0);
    write_bytes(tpath("zero-img"), h, sizeof(h), 0);
    rc = ps_dataset_load_idx(tpath("zero-img"), tpath("big-lab"), &ds, err, sizeof(err));
    expect_error(rc, &ds, err, "is 0");
}

static void test_idx_missing_file_names_the_path(void **state)
{
    (void)state;
    char err[256];
    ps_dataset ds;
    write_labels(tpath("ms-lab"), 0x801, 3, LAB, 0);
    int rc = ps_dataset_load_idx(tpath("does-not-exist"), tpath("ms-lab"), &ds, err, sizeof(err));
    expect_error(rc, &ds, err, "does-not-exist");
}

/* ================================= CSV ==================================== */

static void test_csv_with_header_reads_back(void **state)
{
    (void)state;
    char err[256];
    ps_dataset ds;
    write_text(tpath("h.csv"), "label,a,b\n1,0.5,-2\n0,3e2,4\r\n\n2, 1.25 ,0\n");
    assert_int_equal(ps_dataset_load_csv(tpath("h.csv"), 0, &ds, err, sizeof(err)), 0);
    assert_int_equal(ds.n, 3);
    assert_int_equal(ds.dim, 2);
    assert_int_equal(ds.nclasses, 3);
    const float ex[6] = {0.5f, -2.0f, 300.0f, 4.0f, 1.25f, 0.0f};
    const int32_t ey[3] = {1, 0, 2};
    for (int i = 0; i < 6; i++) assert_true(ds.x[i] == ex[i]);
    for (int i = 0; i < 3; i++) assert_int_equal(ds.y[i], ey[i]);
    ps_dataset_free(&ds);
}

static void test_csv_without_header_and_label_in_middle_or_last(void **state)
{
    (void)state;
    char err[256];
    ps_dataset ds;
    write_text(tpath("n.csv"), "0.1,4,0.2\n0.3,1.0,0.4");
    assert_int_equal(ps_dataset_load_csv(tpath("n.csv"), 1, &ds, err, sizeof(err)), 0);
    assert_int_equal(ds.n, 2);
    assert_int_equal(ds.dim, 2);
    assert_int_equal(ds.nclasses, 5);
    assert_int_equal(ds.y[0], 4);
    assert_int_equal(ds.y[1], 1);
    assert_true(ds.x[0] == 0.1f && ds.x[1] == 0.2f && ds.x[2] == 0.3f && ds.x[3] == 0.4f);
    ps_dataset_free(&ds);
    /* -1 = last column */
    write_text(tpath("l.csv"), "0.5,0.25,1\n1,2,0\n");
    assert_int_equal(ps_dataset_load_csv(tpath("l.csv"), -1, &ds, err, sizeof(err)), 0);
    assert_int_equal(ds.y[0], 1);
    assert_int_equal(ds.y[1], 0);
    assert_true(ds.x[0] == 0.5f && ds.x[1] == 0.25f && ds.x[2] == 1.0f && ds.x[3] == 2.0f);
    ps_dataset_free(&ds);
}

static void test_csv_many_rows_grow_storage(void **state)
{
    (void)state;
    char err[256];
    ps_dataset ds;
    FILE *f = fopen(tpath("big.csv"), "w");
    assert_non_null(f);
    fprintf(f, "y,x1,x2\n");
    for (int i = 0; i < 5000; i++) fprintf(f, "%d,%d,%d.5\n", i % 7, i, -i);
    fclose(f);
    assert_int_equal(ps_dataset_load_csv(tpath("big.csv"), 0, &ds, err, sizeof(err)), 0);
    assert_int_equal(ds.n, 5000);
    assert_int_equal(ds.nclasses, 7);
    assert_true(ds.x[2 * 4999] == 4999.0f);
    assert_true(ds.x[2 * 4999 + 1] == -4999.5f);
    assert_int_equal(ds.y[4999], 4999 % 7);
    ps_dataset_free(&ds);
}

static void test_csv_rejects_ragged_row_naming_the_line(void **state)
{
    (void)state;
    char err[256];
    ps_dataset ds;
    write_text(tpath("r.csv"), "y,a,b\n1,2,3\n0,1\n");
    int rc = ps_dataset_load_csv(tpath("r.csv"), 0, &ds, err, sizeof(err));
    expect_error(rc, &ds, err, ":3:");
    write_text(tpath("r2.csv"), "1,2,3\n0,1,2,3\n");
    rc = ps_dataset_load_csv(tpath("r2.csv"), 0, &ds, err, sizeof(err));
    expect_error(rc, &ds, err, ":2:");
}

static void test_csv_rejects_non_numeric_cell_naming_the_line(void **state)
{
    (void)state;
    char err[256];
    ps_dataset ds;
    write_text(tpath("nn.csv"), "y,a\n1,2\n0,3\n1,abc\n");
    int rc = ps_dataset_load_csv(tpath("nn.csv"), 0, &ds, err, sizeof(err));
    expect_error(rc, &ds, err, ":4:");
    assert_non_null(strstr(err, "abc"));
    write_text(tpath("nn2.csv"), "1,2\n0,\n");
    rc = ps_dataset_load_csv(tpath("nn2.csv"), 0, &ds, err, sizeof(err));
    expect_error(rc, &ds, err, ":2:");
    write_text(tpath("nn3.csv"), "1,2\n0,nan\n");
    rc = ps_dataset_load_csv(tpath("nn3.csv"), 0, &ds, err, sizeof(err));
    expect_error(rc, &ds, err, ":2:");
}

static void test_csv_rejects_bad_labels(void **state)
{
    (void)state;
    char err[256];
    ps_dataset ds;
    write_text(tpath("neg.csv"), "1,2\n-1,3\n");
    int rc = ps_dataset_load_csv(tpath("neg.csv"), 0, &ds, err, sizeof(err));
    expect_error(rc, &ds, err, ":2:");
    write_text(tpath("frac.csv"), "1.5,2\n");
    rc = ps_dataset_load_csv(tpath("frac.csv"), 0, &ds, err, sizeof(err));
    expect_error(rc, &ds, err, ":1:");
    write_text(tpath("oob.csv"), "1,2\n");
    rc = ps_dataset_load_csv(tpath("oob.csv"), 2, &ds, err, sizeof(err));
    expect_error(rc, &ds, err, "label column");
}

static void test_csv_rejects_empty_and_header_only_files(void **state)
{
    (void)state;
    char err[256];
    ps_dataset ds;
    write_text(tpath("empty.csv"), "");
    int rc = ps_dataset_load_csv(tpath("empty.csv"), 0, &ds, err, sizeof(err));
    expect_error(rc, &ds, err, "no data");
    write_text(tpath("hdr.csv"), "label,x\n\n");
    rc = ps_dataset_load_csv(tpath("hdr.csv"), 0, &ds, err, sizeof(err));
    expect_error(rc, &ds, err, "no data");
    rc = ps_dataset_load_csv(tpath("missing.csv"), 0, &ds, err, sizeof(err));
    expect_error(rc, &ds, err, "missing.csv");
}

/* ============================ Fashion-MNIST =============================== */

static void test_fashion_mnist_test_split_has_expected_shape(void **state)
{
    (void)state;
    struct stat st;
    if (stat(PS_FASHION_MNIST_DIR "/t10k-images-idx3-ubyte.gz", &st) != 0) {
        skip();
        return;
    }
    char err[256];
    ps_dataset ds;
    assert_int_equal(ps_dataset_fashion_mnist(NULL, 0, &ds, err, sizeof(err)), 0);
    assert_int_equal(ds.n, 10000);
    assert_int_equal(ds.dim, 784);
    assert_int_equal(ds.nclasses, 10);
    float lo = 1, hi = 0;
    for (size_t i = 0; i < (size_t)ds.n * ds.dim; i++) {
        if (ds.x[i] < lo) lo = ds.x[i];
        if (ds.x[i] > hi) hi = ds.x[i];
    }
    assert_true(lo == 0.0f && hi == 1.0f);
    ps_dataset_free(&ds);
}

static void test_fashion_mnist_missing_dir_fails_with_message(void **state)
{
    (void)state;
    char err[256];
    ps_dataset ds;
    int rc = ps_dataset_fashion_mnist(tmpdir, 1, &ds, err, sizeof(err));
    expect_error(rc, &ds, err, "train-images-idx3-ubyte.gz");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_idx_plain_files_read_back),
        cmocka_unit_test(test_idx_gzip_files_read_back),
        cmocka_unit_test(test_idx_rejects_bad_image_magic),
        cmocka_unit_test(test_idx_rejects_labels_file_given_as_images),
        cmocka_unit_test(test_idx_rejects_bad_label_magic),
        cmocka_unit_test(test_idx_rejects_truncated_plain_and_gzip_images),
        cmocka_unit_test(test_idx_rejects_truncated_header),
        cmocka_unit_test(test_idx_rejects_count_mismatch),
        cmocka_unit_test(test_idx_rejects_trailing_data),
        cmocka_unit_test(test_idx_rejects_implausible_sizes_before_allocating),
        cmocka_unit_test(test_idx_missing_file_names_the_path),
        cmocka_unit_test(test_csv_with_header_reads_back),
        cmocka_unit_test(test_csv_without_header_and_label_in_middle_or_last),
        cmocka_unit_test(test_csv_many_rows_grow_storage),
        cmocka_unit_test(test_csv_rejects_ragged_row_naming_the_line),
        cmocka_unit_test(test_csv_rejects_non_numeric_cell_naming_the_line),
        cmocka_unit_test(test_csv_rejects_bad_labels),
        cmocka_unit_test(test_csv_rejects_empty_and_header_only_files),
        cmocka_unit_test(test_fashion_mnist_test_split_has_expected_shape),
        cmocka_unit_test(test_fashion_mnist_missing_dir_fails_with_message),
    };
    tmpdir_prefix = "test_data";
    return cmocka_run_group_tests(tests, tmpdir_setup, tmpdir_teardown);
}
