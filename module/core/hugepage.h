/* hugepage.h -- asks the kernel for transparent huge pages under a large
 * allocation of the pure core (the index of an embedding table, the index
 * of an exactly-once table). Their lookups touch random lines of tens of
 * megabytes, so each one is a TLB miss and a page walk with 4 KB pages (in
 * a VM a two-level walk); 2 MB pages remove most of those walks.
 *
 * Only the 2 MB-aligned interior of [p, p + n) is advised, so no other
 * allocation's memory is touched; call it before the memory is first
 * written so that the faults map huge pages directly. A hint: with THP off
 * (or disabled for the process, as redis-server does when THP is "always")
 * or on another OS it does nothing, and nothing observable depends on it
 * (allocation sizes and MEMORY USAGE are unchanged; only RSS may round up
 * to 2 MB within the range). The price is a coarser copy-on-write while a
 * fork (BGSAVE, AOF rewrite) runs: a write copies 2 MB instead of 4 KB. */

#ifndef PS_HUGEPAGE_H
#define PS_HUGEPAGE_H

#include <stddef.h>
#include <stdint.h>
#if defined(__linux__)
#include <sys/mman.h>
#endif

#define PS_HUGEPAGE_BYTES ((size_t)2 << 20)

static inline void ps_advise_hugepages(void *p, size_t n) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    const uintptr_t a = ((uintptr_t)p + PS_HUGEPAGE_BYTES - 1) & ~(uintptr_t)(PS_HUGEPAGE_BYTES - 1);
    const uintptr_t e = ((uintptr_t)p + n) & ~(uintptr_t)(PS_HUGEPAGE_BYTES - 1);
    if (e > a) (void)madvise((void *)a, (size_t)(e - a), MADV_HUGEPAGE);
#else
    (void)p;
    (void)n;
#endif
}

#endif /* PS_HUGEPAGE_H */
