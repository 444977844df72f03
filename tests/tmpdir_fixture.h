/* tmpdir_fixture.h -- a private temp directory for a cmocka test group:
 * created by tmpdir_setup(), emptied and removed by tmpdir_teardown(),
 * named in 'tmpdir'. Include once per test program (static definitions). */
#ifndef PS_TESTS_TMPDIR_FIXTURE_H
#define PS_TESTS_TMPDIR_FIXTURE_H

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char tmpdir[256];
static const char *tmpdir_prefix = "test"; /* set before the group runs */

static int tmpdir_setup(void **state)
{
    (void)state;
    const char *base = getenv("TMPDIR");
    snprintf(tmpdir, sizeof(tmpdir), "%s/%s.XXXXXX", base && *base ? base : "/tmp",
             tmpdir_prefix);
    return mkdtemp(tmpdir) ? 0 : -1;
}

/* Removes every file of the temp directory, then the directory. */
static int tmpdir_teardown(void **state)
{
    (void)state;
    DIR *d = opendir(tmpdir);
    if (d == NULL) return -1;
    struct dirent *e;
    char path[512];
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        snprintf(path, sizeof(path), "%s/%s", tmpdir, e->d_name);
        unlink(path);
    }
    closedir(d);
    return rmdir(tmpdir);
}

#endif
