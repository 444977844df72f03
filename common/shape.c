/* shape.c -- the one shape validator, shared by commands and RDB loading.
 *
 * RDB and RESTORE payloads are attacker-controlled, so every check here runs
 * before anything is allocated, and every product is overflow-checked. */

#include "shape.h"

#include <stdarg.h>
#include <stdio.h>
#include <stddef.h>

/* Room for the longest phrase: two 20-digit numbers plus the words. */
static _Thread_local char shape_errbuf[128];

/* Format a failure phrase into the thread-local buffer, point '*err' at it
 * (when 'err' is not NULL) and return -1, so callers can 'return fail(...)'. */
static int fail(const char **err, const char *fmt, ...) {
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(shape_errbuf, sizeof shape_errbuf, fmt, ap);
        va_end(ap);
        *err = shape_errbuf;
    }
    return -1;
}

int ps_shape_check(uint32_t ndim, const uint64_t *dims, uint64_t max_bytes,
                   uint64_t *nelem, const char **err) {
    if (ndim < 1 || ndim > PS_MAX_DIMS || dims == NULL)
        return fail(err, "ndim must be 1..%d", PS_MAX_DIMS);

    /* Every dimension first, so the message names the first zero even when
     * an earlier product would also overflow. */
    for (uint32_t i = 0; i < ndim; i++)
        if (dims[i] == 0) return fail(err, "dimension %u is 0", (unsigned)(i + 1));

    uint64_t count = 1;
    for (uint32_t i = 0; i < ndim; i++) {
        if (count > UINT64_MAX / dims[i]) return fail(err, "element count overflows");
        count *= dims[i];
    }
    if (count > UINT64_MAX / PS_ELEM_BYTES) return fail(err, "byte size overflows");
    uint64_t bytes = count * PS_ELEM_BYTES;

#if SIZE_MAX < UINT64_MAX
    /* A 32-bit host cannot address more than SIZE_MAX bytes. */
    if (bytes > SIZE_MAX) return fail(err, "tensor too large for this platform");
#endif

    if (max_bytes != 0 && bytes > max_bytes)
        return fail(err, "tensor of %llu bytes exceeds the limit of %llu bytes",
                    (unsigned long long)bytes, (unsigned long long)max_bytes);

    if (nelem) *nelem = count;
    return 0;
}
