/* test_runlog.c -- cmocka tests of train/runlog.c: JSON string escaping,
 * field formatting (non-finite numbers, fields that do not fit) and whole
 * lines appended to a file in a private temp directory. */

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "runlog.h"
#include "tmpdir_fixture.h"

/* Escapes 's' into a static buffer of RUNLOG_LINE_MAX bytes. */
static const char *esc(const char *s)
{
    static char buf[RUNLOG_LINE_MAX];
    size_t n = runlog_escape(buf, sizeof(buf), s);
    assert_true(n < sizeof(buf));
    assert_int_equal(n, strlen(buf));
    return buf;
}

static void test_escape_quotes_backslash_and_control_characters(void **state)
{
    (void)state;
    assert_string_equal(esc("plain w-1_x.y"), "plain w-1_x.y");
    assert_string_equal(esc("a\"b\\c"), "a\\\"b\\\\c");
    assert_string_equal(esc("l1\nl2\r\t\b\f"), "l1\\nl2\\r\\t\\b\\f");
    assert_string_equal(esc("\x01\x1f\x7f"), "\\u0001\\u001f\x7f");
    assert_string_equal(esc(""), "");
}

static void test_escape_copies_valid_utf8_and_replaces_invalid_bytes(void **state)
{
    (void)state;
    /* 2-, 3- and 4-byte sequences stay as they are. */
    assert_string_equal(esc("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"),
                        "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80");
    /* A lone continuation byte, a Latin-1 byte, an overlong '/', a UTF-16
     * surrogate, a code point above U+10FFFF and a cut sequence: each bad
     * byte becomes U+FFFD, the rest of the string survives. */
    assert_string_equal(esc("a\x80z"), "a\\ufffdz");
    assert_string_equal(esc("\xe9t\xe9"), "\\ufffdt\\ufffd");
    assert_string_equal(esc("\xc0\xaf"), "\\ufffd\\ufffd");
    assert_string_equal(esc("\xed\xa0\x80"), "\\ufffd\\ufffd\\ufffd");
    assert_string_equal(esc("\xf4\x90\x80\x80"), "\\ufffd\\ufffd\\ufffd\\ufffd");
    assert_string_equal(esc("x\xe2\x82"), "x\\ufffd\\ufffd");
}

static void test_escape_truncates_at_whole_pieces_and_reports_needed_length(void **state)
{
    (void)state;
    char buf[6];
    /* "ab\"cd" escapes to 6 bytes: a b \ " c d; 5 fit with the NUL but
     * the cut must not split the escape. */
    size_t n = runlog_escape(buf, sizeof(buf), "ab\"cd");
    assert_int_equal(n, 6);
    assert_string_equal(buf, "ab\\\"c");
    n = runlog_escape(buf, 4, "ab\"cd");
    assert_int_equal(n, 6);
    assert_string_equal(buf, "ab");
    /* A multi-byte character is not cut either. */
    n = runlog_escape(buf, 3, "a\xe2\x82\xac");
    assert_int_equal(n, 4);
    assert_string_equal(buf, "a");
    assert_int_equal(runlog_escape(NULL, 0, "\n"), 2);
}

static void test_format_writes_typed_fields_and_null_for_non_finite(void **state)
{
    (void)state;
    char buf[256] = "{";
    int dropped = 0;
    rlField f[] = {RL_STR("w", "a\"b"), RL_INT("n", -12345678901LL), RL_NUM("x", 0.25),
                   RL_NONE,           RL_NUM("nan", NAN),             RL_NUM("inf", -INFINITY),
                   RL_BOOL("b", 7)};
    size_t n = runlog_format(buf, sizeof(buf), 1, 7, f, &dropped);
    assert_int_equal(dropped, 0);
    assert_int_equal(n, strlen(buf));
    assert_string_equal(buf, "{,\"w\":\"a\\\"b\",\"n\":-12345678901,\"x\":0.25,\"nan\":null,"
                             "\"inf\":null,\"b\":true");
}

static void test_format_drops_a_field_that_does_not_fit_and_keeps_the_rest(void **state)
{
    (void)state;
    char big[200], buf[64] = "{";
    int dropped = 0;
    memset(big, 'x', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    rlField f[] = {RL_INT("a", 1), RL_STR("long", big), RL_INT("b", 2)};
    size_t n = runlog_format(buf, sizeof(buf), 1, 3, f, &dropped);
    assert_int_equal(dropped, 1);
    assert_string_equal(buf, "{,\"a\":1,\"b\":2");
    assert_int_equal(n, strlen(buf));
}

/* Reads the whole file 'path' into a malloc'd string. */
static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    assert_int_equal(fseek(f, 0, SEEK_END), 0);
    long len = ftell(f);
    rewind(f);
    char *s = calloc(1, (size_t)len + 1);
    assert_non_null(s);
    assert_int_equal(fread(s, 1, (size_t)len, f), (size_t)len);
    fclose(f);
    return s;
}

static void test_emit_appends_whole_lines_with_time_origin_from_env(void **state)
{
    (void)state;
    char path[512], err[256];
    snprintf(path, sizeof(path), "%s/a.jsonl", tmpdir);
    setenv(RUNLOG_T0_ENV, "1000.5", 1);
    runLog *lg = runlog_open(path, err, sizeof(err));
    assert_non_null(lg);
    assert_true(runlog_elapsed(lg) > 1e9); /* counted from 1000.5, not from now */
    assert_int_equal(RUNLOG(lg, "progress", RL_STR("worker", "w\n1"), RL_INT("samples", 64)), 0);
    runlog_close(lg);
    unsetenv(RUNLOG_T0_ENV);
    /* Reopening appends. */
    lg = runlog_open(path, err, sizeof(err));
    char big[RUNLOG_LINE_MAX];
    memset(big, 'y', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    assert_int_equal(RUNLOG(lg, "result", RL_STR("huge", big), RL_NUM("test_acc", 0.5)), 0);
    assert_true(runlog_elapsed(lg) < 60);
    assert_int_equal(runlog_export_origin(lg), 0);
    assert_non_null(getenv(RUNLOG_T0_ENV));
    unsetenv(RUNLOG_T0_ENV);
    runlog_close(lg);
    assert_int_equal(RUNLOG(NULL, "x", RL_INT("a", 1)), 0);

    char *s = slurp(path);
    char *l2 = strchr(s, '\n');
    assert_non_null(l2);
    *l2++ = '\0';
    assert_true(strncmp(s, "{\"t\":", 5) == 0);
    assert_non_null(strstr(s, ",\"event\":\"progress\",\"worker\":\"w\\n1\",\"samples\":64}"));
    /* The line that did not fit keeps its other fields and says so. */
    assert_non_null(strstr(l2, ",\"event\":\"result\",\"test_acc\":0.5,\"truncated\":true}\n"));
    assert_int_equal(strlen(l2), strcspn(l2, "\n") + 1);
    free(s);
}

static void test_open_fails_with_a_message_for_an_unwritable_path(void **state)
{
    (void)state;
    char path[512], err[256] = "";
    snprintf(path, sizeof(path), "%s/no/such/dir.jsonl", tmpdir);
    assert_null(runlog_open(path, err, sizeof(err)));
    assert_non_null(strstr(err, "No such file"));
}

/* Processes appending to one log at once: every line stays whole. */
static void test_concurrent_writers_never_interleave_lines(void **state)
{
    (void)state;
    enum { PROCS = 4, LINES = 300 };
    char path[512], err[256], pad[1500];
    snprintf(path, sizeof(path), "%s/c.jsonl", tmpdir);
    memset(pad, 'p', sizeof(pad) - 1);
    pad[sizeof(pad) - 1] = '\0';
    pid_t pids[PROCS];
    for (int p = 0; p < PROCS; p++) {
        pids[p] = fork();
        assert_true(pids[p] >= 0);
        if (pids[p] == 0) {
            runLog *lg = runlog_open(path, err, sizeof(err));
            for (int i = 0; lg && i < LINES; i++)
                RUNLOG(lg, "progress", RL_INT("proc", p), RL_INT("i", i), RL_STR("pad", pad));
            runlog_close(lg);
            _exit(lg ? 0 : 1);
        }
    }
    for (int p = 0; p < PROCS; p++) {
        int st;
        assert_int_equal(waitpid(pids[p], &st, 0), pids[p]);
        assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    }
    char *s = slurp(path);
    int count = 0, next[PROCS] = {0};
    for (char *line = strtok(s, "\n"); line; line = strtok(NULL, "\n"), count++) {
        int p, i;
        char *at = strstr(line, "\"proc\":");
        assert_non_null(at);
        assert_int_equal(sscanf(at, "\"proc\":%d,\"i\":%d,", &p, &i), 2);
        assert_true(p >= 0 && p < PROCS);
        assert_int_equal(i, next[p]++); /* each writer's lines whole and in order */
        assert_true(strncmp(line, "{\"t\":", 5) == 0);
        assert_string_equal(line + strlen(line) - 3, "p\"}");
    }
    assert_int_equal(count, PROCS * LINES);
    free(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_escape_quotes_backslash_and_control_characters),
        cmocka_unit_test(test_escape_copies_valid_utf8_and_replaces_invalid_bytes),
        cmocka_unit_test(test_escape_truncates_at_whole_pieces_and_reports_needed_length),
        cmocka_unit_test(test_format_writes_typed_fields_and_null_for_non_finite),
        cmocka_unit_test(test_format_drops_a_field_that_does_not_fit_and_keeps_the_rest),
        cmocka_unit_test(test_emit_appends_whole_lines_with_time_origin_from_env),
        cmocka_unit_test(test_open_fails_with_a_message_for_an_unwritable_path),
        cmocka_unit_test(test_concurrent_writers_never_interleave_lines),
    };
    tmpdir_prefix = "test_runlog";
    return cmocka_run_group_tests(tests, tmpdir_setup, tmpdir_teardown);
}
