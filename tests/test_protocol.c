/* test_protocol.c -- cmocka tests of common/protocol.[ch] (the protocol
 * facts in one table) and of libps's PS.INFO parser (psInfoParse). */

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "codec.h"
#include "embed.h"
#include "errors.h"
#include "optim.h"
#include "protocol.h"
#include "redis-ps/ps.h"

static ps_proto_error cls(const char *s) { return ps_proto_error_class(s, strlen(s)); }

/* The module's error texts fall in the classes clients tell them apart by. */
static void test_module_errors_classify_by_their_code(void **state) {
    (void)state;
    char b[256];
    assert_int_equal(cls(PSERR_NOKEY), PS_PROTO_ERR_NOKEY);
    snprintf(b, sizeof(b), PSERR_FUTURE_F, 12ULL, 7ULL);
    assert_int_equal(cls(b), PS_PROTO_ERR_FUTURE);
    snprintf(b, sizeof(b), PSERR_STALE_F, 1ULL, 9ULL, 10ULL, 3LL);
    assert_int_equal(cls(b), PS_PROTO_ERR_STALE);
    snprintf(b, sizeof(b), PSERR_ROUND_F, 1ULL, 2ULL);
    assert_int_equal(cls(b), PS_PROTO_ERR_STALE);
    snprintf(b, sizeof(b), PSERR_SYNTAX_F, "VERSION");
    assert_int_equal(cls(b), PS_PROTO_ERR_SYNTAX);
    snprintf(b, sizeof(b), PSERR_UNKNOWN_OPT_F, "ID");
    assert_int_equal(cls(b), PS_PROTO_ERR_UNKNOWN_OPT);
    assert_int_equal(cls(PSERR_ROUND_OPEN), PS_PROTO_ERR_BUSY);
    assert_int_equal(cls(PSERR_BUSYKEY), PS_PROTO_ERR_BUSYKEY);
    assert_int_equal(cls(PSERR_OOM), PS_PROTO_ERR_OOM);
    /* Other ERR texts are plain ERR, even when they start like a class. */
    assert_int_equal(cls(PSERR_NOSNAP), PS_PROTO_ERR_ERR);
    assert_int_equal(cls("ERR no such key (and more)"), PS_PROTO_ERR_ERR);
    assert_int_equal(cls("ERR VERSION x is newer than the tensor's version 3"), PS_PROTO_ERR_ERR);
    /* Redis's own codes; a code is a whole word. */
    assert_int_equal(cls("MOVED 3999 127.0.0.1:7001"), PS_PROTO_ERR_MOVED);
    assert_int_equal(cls("ASK 3999 127.0.0.1:7001"), PS_PROTO_ERR_ASK);
    assert_int_equal(cls("ASKING"), PS_PROTO_ERR_NONE);
    assert_int_equal(cls("WRONGTYPE Operation against a key holding the wrong kind of value"),
                     PS_PROTO_ERR_WRONGTYPE);
    assert_int_equal(cls("ERR This instance has cluster support disabled"),
                     PS_PROTO_ERR_NOCLUSTER);
    assert_int_equal(cls("TRYAGAIN"), PS_PROTO_ERR_TRYAGAIN);
    assert_int_equal(cls(""), PS_PROTO_ERR_NONE);
    assert_int_equal(ps_proto_error_class(NULL, 0), PS_PROTO_ERR_NONE);
    /* A reply cut short (len) is matched as cut. */
    assert_int_equal(ps_proto_error_class(PSERR_NOKEY, 10), PS_PROTO_ERR_ERR);
}

/* The messages built from the tables are the bytes the module always sent. */
static void test_messages_derived_from_the_tables_are_unchanged(void **state) {
    (void)state;
    assert_string_equal(PSERR_FORMAT_F, "ERR unknown FORMAT '%s' (F32, F16, BF16, I8, TOPK, VALUES)");
    assert_string_equal(PSERR_ROWS_FORMAT,
                        "ERR ROWS needs a dense gradient (F32, F16, BF16, I8 or VALUES)");
    assert_string_equal(PSERR_OPTIM_F, "ERR unknown OPTIM '%s' (SGD, MOMENTUM, NESTEROV, ADAGRAD, "
                                       "RMSPROP, ADAM, ADAMW, ACCUM)");
    assert_string_equal(PSERR_EMBED_OPTIM_F, "ERR unknown OPTIM '%s' for a table (SGD, MOMENTUM, "
                                             "ADAGRAD, ROWADAGRAD, ADAM, FTRL)");
    assert_string_equal(PSERR_NOKEY, "ERR no such key");
    assert_string_equal(PSERR_FUTURE_F, "ERR VERSION %llu is newer than the tensor's version %llu");
}

/* Each optimizer's name, and its codes in tensor and table headers, agree
 * with the module's enums (which are derived from the same lists). */
static void test_optimizer_names_and_codes(void **state) {
    (void)state;
    for (int k = 0; k < PS_OPT_COUNT; k++) {
        int o = ps_proto_optim_of_tensor_code(k);
        assert_true(o >= 0);
        assert_int_equal(ps_proto_optim_tensor_code(o), k);
        assert_string_equal(ps_optim_name(k), ps_proto_optim_name(o));
        const char *n = ps_proto_optim_name(o);
        assert_int_equal(ps_optim_parse(n, strlen(n)), k);
    }
    for (int k = 0; k < PSE_OPT_COUNT; k++) {
        int o = ps_proto_optim_of_table_code(k);
        assert_true(o >= 0);
        assert_int_equal(ps_proto_optim_table_code(o), k);
        assert_string_equal(PSEmbed_OptimName(k), ps_proto_optim_name(o));
    }
    assert_int_equal(PS_OPT_ADAMW, ps_proto_optim_tensor_code(PS_PROTO_OPT_ADAMW));
    assert_int_equal(PSE_OPT_FTRL, ps_proto_optim_table_code(PS_PROTO_OPT_FTRL));
    assert_int_equal(ps_proto_optim_tensor_code(PS_PROTO_OPT_FTRL), -1);
    assert_int_equal(ps_proto_optim_table_code(PS_PROTO_OPT_NESTEROV), -1);
    assert_int_equal(ps_proto_optim_parse("AdaGrad", 7), PS_PROTO_OPT_ADAGRAD);
    assert_int_equal(ps_proto_optim_parse("adagradx", 8), -1);
    assert_int_equal(ps_proto_optim_parse("adagrad", 6), -1);
    assert_false(ps_proto_optim_updates(PS_PROTO_OPT_ACCUM));
    assert_true(ps_proto_optim_updates(PS_PROTO_OPT_SGD));
    assert_string_equal(ps_proto_optim_name(-1), "unknown");
    assert_int_equal(ps_proto_optim_of_tensor_code(PS_OPT_COUNT), -1);
}

static void test_format_table(void **state) {
    (void)state;
    assert_true(ps_proto_format_dense(PS_FMT_I8));
    assert_false(ps_proto_format_dense(PS_FMT_TOPK));
    assert_true(ps_proto_format_table(PS_FMT_BF16));
    assert_false(ps_proto_format_table(PS_FMT_I8));
    assert_false(ps_proto_format_table(PS_FMT_COUNT));
    for (int f = 0; f < PS_FMT_COUNT; f++) {
        ps_format g;
        const char *n = ps_format_name((ps_format)f);
        assert_int_equal(ps_format_parse(n, strlen(n), &g), 0);
        assert_int_equal(g, f);
    }
    /* ps.h's public codes are the table's (also a _Static_assert in libps). */
    assert_int_equal(PS_WIRE_TOPK, PS_FMT_TOPK);
    assert_string_equal(ps_proto_push_option_name(PS_PROTO_PUSH_ID), "ID");
    assert_int_equal(ps_proto_push_option_nvals(PS_PROTO_PUSH_ID), 2);
}

/* The id formats of IDS lists: RAW first (the default), names both ways. */
static void test_id_format_table(void **state) {
    (void)state;
    assert_int_equal(PS_PROTO_IDFMT_RAW, 0);
    assert_string_equal(ps_proto_idformat_name(PS_PROTO_IDFMT_EF), "EF");
    assert_string_equal(ps_proto_idformat_name(PS_PROTO_IDFMT_COUNT), "");
    assert_string_equal(PS_PROTO_ID_FORMAT_NAMES, "RAW, EF");
    for (int f = 0; f < PS_PROTO_IDFMT_COUNT; f++) {
        const char *n = ps_proto_idformat_name(f);
        assert_int_equal(ps_proto_idformat_parse(n, strlen(n)), f);
    }
    assert_int_equal(ps_proto_idformat_parse("ef", 2), PS_PROTO_IDFMT_EF);
    assert_int_equal(ps_proto_idformat_parse("EFX", 3), -1);
    assert_int_equal(ps_proto_idformat_parse("E", 1), -1);
    assert_string_equal(ps_proto_push_option_name(PS_PROTO_PUSH_IDFORMAT), "IDFORMAT");
    assert_int_equal(ps_proto_push_option_nvals(PS_PROTO_PUSH_IDFORMAT), 1);
}

/* A reply from RESP bytes, as hiredis reads it. */
static redisReply *resp(const char *bytes) {
    redisReader *rd = redisReaderCreate();
    void *r = NULL;
    assert_int_equal(redisReaderFeed(rd, bytes, strlen(bytes)), REDIS_OK);
    assert_int_equal(redisReaderGetReply(rd, &r), REDIS_OK);
    redisReaderFree(rd);
    assert_non_null(r);
    return r;
}

static void test_info_parse_tensor_and_table(void **state) {
    (void)state;
    psKeyInfo ki;
    redisReply *r = resp("*14\r\n$5\r\nshape\r\n*2\r\n:3\r\n:4\r\n$8\r\nelements\r\n:12\r\n"
                         "$7\r\nversion\r\n:41\r\n$9\r\noptimizer\r\n$5\r\naccum\r\n"
                         "$2\r\nlr\r\n$4\r\n0.25\r\n$6\r\npushes\r\n:9\r\n"
                         "$12\r\naccum_pushes\r\n:5\r\n");
    assert_int_equal(psInfoParse(r, &ki), PS_OK);
    assert_false(ki.is_table);
    assert_int_equal(ki.ndim, 2);
    assert_int_equal(ki.dims[0], 3);
    assert_int_equal(ki.dims[1], 4);
    assert_int_equal(ki.elements, 12);
    assert_int_equal(ki.version, 41);
    assert_string_equal(ki.optimizer, "accum");
    assert_true(ki.lr == 0.25);
    assert_int_equal(ki.pushes, 9);
    assert_int_equal(ki.accum_pushes, 5);
    freeReplyObject(r);

    r = resp("*12\r\n$4\r\ntype\r\n$9\r\nembedding\r\n$3\r\ndim\r\n:8\r\n$7\r\nversion\r\n:3\r\n"
             "$9\r\noptimizer\r\n$4\r\nftrl\r\n$4\r\nrows\r\n:100\r\n$11\r\nevicted_ttl\r\n:2\r\n");
    assert_int_equal(psInfoParse(r, &ki), PS_OK);
    assert_true(ki.is_table);
    assert_int_equal(ki.dim, 8);
    assert_int_equal(ki.ndim, 0);
    assert_int_equal(ki.rows, 100);
    assert_int_equal(ki.evicted_ttl, 2);
    assert_string_equal(ki.optimizer, "ftrl");
    freeReplyObject(r);

    /* Not a PS.INFO answer: an error, a tensor without a shape, no version. */
    r = resp("-ERR no such key\r\n");
    assert_int_equal(psInfoParse(r, &ki), PS_ERR);
    freeReplyObject(r);
    r = resp("*4\r\n$7\r\nversion\r\n:1\r\n$9\r\noptimizer\r\n$3\r\nsgd\r\n");
    assert_int_equal(psInfoParse(r, &ki), PS_ERR);
    freeReplyObject(r);
    r = resp("*4\r\n$5\r\nshape\r\n*1\r\n:3\r\n$9\r\noptimizer\r\n$3\r\nsgd\r\n");
    assert_int_equal(psInfoParse(r, &ki), PS_ERR);
    freeReplyObject(r);
    r = resp("*6\r\n$5\r\nshape\r\n*1\r\n$1\r\nx\r\n$7\r\nversion\r\n:1\r\n$9\r\noptimizer\r\n$3\r\nsgd\r\n");
    assert_int_equal(psInfoParse(r, &ki), PS_ERR);
    freeReplyObject(r);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_module_errors_classify_by_their_code),
        cmocka_unit_test(test_messages_derived_from_the_tables_are_unchanged),
        cmocka_unit_test(test_optimizer_names_and_codes),
        cmocka_unit_test(test_format_table),
        cmocka_unit_test(test_id_format_table),
        cmocka_unit_test(test_info_parse_tensor_and_table),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
