/* agent.h -- what both of ps-relay's modes (the tree relay, relay.c, and the
 * ring agent, ring.c) need of a long-running process: a stop flag set by
 * SIGINT/SIGTERM, sleeps it cuts short, and the tests' crash points. */
#ifndef PS_RELAY_AGENT_H
#define PS_RELAY_AGENT_H

#include <signal.h>

/* Set by SIGINT or SIGTERM once agent_catch_signals() ran. */
extern volatile sig_atomic_t AgentStop;

/* Ignores SIGPIPE; SIGINT and SIGTERM set AgentStop. */
void agent_catch_signals(void);

/* From now on a second SIGINT/SIGTERM (one arriving while AgentStop is
 * already set) writes 'msg' and a newline to stderr and ends the process at
 * once with exit status 'status' (_exit: nothing else runs). */
void agent_exit_on_second_signal(int status, const char *msg);

/* Monotonic milliseconds. */
long long agent_mono_ms(void);

/* Sleeps 'ms', cut short only by a stop request. */
void agent_sleep_ms(long ms);

/* Tests only: 'spec' ("phase:n", from an environment variable, or NULL)
 * kills the process (SIGKILL, no cleanup) right after the n-th completion
 * of 'phase', so that the crash points of the exactly-once argument are hit
 * on purpose. Counts per phase name (at most 8 names). */
void agent_fault_point(const char *spec, const char *phase);

#endif
