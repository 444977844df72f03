/* agent.c -- stop flag, sleeps and crash points of ps-relay (agent.h). */
#include "agent.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "clock.h"

volatile sig_atomic_t AgentStop = 0;

static int second_status;      /* agent_exit_on_second_signal(); 0: off */
static char second_msg[512];
static size_t second_len;

static void on_signal(int sig) {
    (void)sig;
    if (AgentStop && second_status) {
        if (write(STDERR_FILENO, second_msg, second_len) < 0) {
        }
        _exit(second_status);
    }
    AgentStop = 1;
}

void agent_exit_on_second_signal(int status, const char *msg) {
    int n = snprintf(second_msg, sizeof(second_msg), "%s\n", msg);
    second_len = n < 0 ? 0 : (size_t)n < sizeof(second_msg) ? (size_t)n : sizeof(second_msg) - 1;
    second_status = status;
}

void agent_catch_signals(void) {
    signal(SIGPIPE, SIG_IGN);
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

long long agent_mono_ms(void) { return (long long)ps_mono_ms(); }

void agent_sleep_ms(long ms) {
    while ((ms = ps_sleep_ms(ms)) > 0 && !AgentStop) {
    }
}

void agent_fault_point(const char *spec, const char *phase) {
    static const char *names[8];
    static long count[8];
    if (!spec) return;
    size_t l = strlen(phase);
    if (strncmp(spec, phase, l) || spec[l] != ':') return;
    for (int i = 0; i < 8; i++) {
        if (names[i] && strcmp(names[i], phase)) continue;
        names[i] = phase;
        if (++count[i] == atol(spec + l + 1)) {
            fflush(NULL);
            raise(SIGKILL);
        }
        return;
    }
}
