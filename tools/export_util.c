/* export_util.c -- ps-export (ps-export.c): the stop flag its loops poll,
 * the clock and the error line. */

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <redis-ps/ps.h>

#include "clock.h"
#include "export.h"

volatile sig_atomic_t Stop;
void on_signal(int sig) {
    (void)sig;
    Stop = 1;
}

double now_ms(void) { return ps_mono_s() * 1e3; }

int fail(const char *what, const psClient *c) {
    fprintf(stderr, "ps-export: %s: %s\n", what, c ? c->errstr : strerror(errno));
    return -1;
}
