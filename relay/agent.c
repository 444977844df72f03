/* agent.c -- stop flag, sleeps and crash points of ps-relay (agent.h). */
#include "agent.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"

volatile sig_atomic_t AgentStop = 0;

static void on_signal(int sig) {
    (void)sig;
    AgentStop = 1;
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
