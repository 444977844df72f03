/* mem.c -- the pure cores' allocator (the module installs RedisModule_TryAlloc
 * through PSTensor_SetAllocator), the shared float buffers (PSBuf) and id
 * copies, declared in tensor.h. Below tensor.c, accum.c, snapshot.c,
 * header.c and dedup.c, so that they all call down to it and not into
 * tensor.c. No Redis calls here. */

#include <stdlib.h>
#include <string.h>

#include "tensor.h"

static void *(*TryAllocFn)(size_t) = malloc;
static void (*FreeFn)(void *) = free;

void PSTensor_SetAllocator(void *(*tryalloc)(size_t), void (*freefn)(void *)) {
    TryAllocFn = tryalloc;
    FreeFn = freefn;
}

void *PSTensor_Alloc(size_t bytes) { return TryAllocFn(bytes ? bytes : 1); }

void PSTensor_Dealloc(void *p) {
    if (p) FreeFn(p);
}

PSBuf *PSBuf_New(uint64_t n, int zero) {
    if (n > (SIZE_MAX - sizeof(PSBuf)) / sizeof(float)) return NULL;
    size_t bytes = sizeof(PSBuf) + (size_t)n * sizeof(float);
    PSBuf *b = PSTensor_Alloc(bytes);
    if (!b) return NULL;
    b->refs = 1;
    b->n = n;
    if (zero) memset(b->v, 0, (size_t)n * sizeof(float));
    return b;
}

void PSBuf_Release(PSBuf *b) {
    if (b && --b->refs == 0) PSTensor_Dealloc(b);
}

PSBuf *PSBuf_Retain(PSBuf *b) {
    if (b) b->refs++;
    return b;
}

char *PSTensor_DupBytes(const char *s, size_t len) {
    char *d = PSTensor_Alloc(len + 1);
    if (!d) return NULL;
    memcpy(d, s, len);
    d[len] = '\0';
    return d;
}
