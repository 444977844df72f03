/* resp.h -- the RESP2 reply framer of the request engine (engine.c): where
 * a reply ends in a node's read buffer, and which bulk strings of a
 * top-level array a request's sink may take before hiredis parses the
 * rest. Pure: no hiredis, no allocation, no I/O (fuzz/fuzz_resp.c feeds
 * it arbitrary bytes). Private to libps. */
#ifndef PS_RESP_H
#define PS_RESP_H

#include <stddef.h>

/* Where the framer stands in a buffer: one reply is scanned across calls
 * as its bytes arrive. All zero: at the start of a reply. */
typedef struct psScan {
    size_t pos;                 /* bytes of the current reply scanned */
    long long pending;          /* elements of it still to come */
    size_t need;                /* bytes the reply needs at least (buffer growth) */
} psScan;

/* Advance scan 's' over the RESP2 reply at the start of 'buf' ('len'
 * bytes, of which s->pos were scanned by earlier calls with the same
 * leading bytes). Returns 1 when the reply is complete (s->pos is its
 * length), 0 when more bytes are needed (s->need > len: at least that
 * many), -1 on a protocol error (what the reply holds is not RESP2, or an
 * integer or length is out of range). */
int psi_scan_reply(psScan *s, const char *buf, size_t len);

/* The bulk strings a sink may take from a complete reply (psi_scan_reply
 * answered 1 for its 'len' bytes at 'buf'): when the reply is an array of
 * 1 to 'max' elements, calls 'fn' for each top-level bulk string before
 * the first nested array, with its index, the array's element count and
 * the string's bytes inside 'buf'. 'fn' returns 1 when it took the bytes:
 * then [from[k], to[k]) is the element's span in 'buf' (header to CRLF),
 * for k < the count returned (at most 'max'). Returns the spans taken. */
typedef int psRespBulkFn(void *arg, int idx, int n, const char *data, size_t len);
int psi_resp_array_bulks(const char *buf, size_t len, int max, psRespBulkFn *fn, void *arg,
                         size_t *from, size_t *to);

#endif /* PS_RESP_H */
