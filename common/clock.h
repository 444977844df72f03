/* clock.h -- the clock and sleep helpers of the client side (libps, the
 * trainer, the relay), written once.
 *
 * NOT for the module: nothing replicated may depend on a clock (a master,
 * its replicas and an AOF replay must compute the same bytes); the design
 * check (scripts/check_design.py) refuses a module file that includes this. */
#ifndef PS_CLOCK_H
#define PS_CLOCK_H

#include <errno.h>
#include <stdint.h>
#include <time.h>

/* Milliseconds / seconds of CLOCK_MONOTONIC (for intervals and deadlines). */
static inline int64_t ps_mono_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static inline double ps_mono_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Seconds of the wall clock (CLOCK_REALTIME; for logs and records). */
static inline double ps_wall_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Microseconds of the wall clock (starting points of sequence numbers that
 * must move forward across restarts). */
static inline uint64_t ps_wall_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

/* Sleeps 'ms' milliseconds, or less when a signal arrives. Returns the
 * milliseconds left (0 when it slept them all), so a caller that must not
 * be cut short loops: while ((ms = ps_sleep_ms(ms)) > 0) {} */
static inline long ps_sleep_ms(long ms) {
    if (ms <= 0) return 0;
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    if (nanosleep(&ts, &ts) == 0 || errno != EINTR) return 0;
    long left = (long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
    return left > 0 ? left : (ts.tv_nsec > 0 ? 1 : 0);
}

#endif /* PS_CLOCK_H */
