/* batch_int.h -- what the files of the batch layer share (batch.c: keys,
 * users and the layer on a client; batch_pull.c: key pulls; batch_push.c:
 * push groups and their WAITs): the layer's part of a client, the one place
 * a reply is classified, and the sorting of ids for IDFORMAT EF. The
 * helpers are static inline so that nothing here becomes a symbol of
 * libps.a. Private to those files; the layer's interface is batch.h. */
#ifndef PS_BATCH_INT_H
#define PS_BATCH_INT_H

#include <stdlib.h>
#include <string.h>

#include "batch.h"
#include "idlist.h"
#include "protocol.h"
#include "wire.h"

/* The batch layer's part of a client. */
struct psBatches {
    int push_window;
    int flags;                  /* PS_FLAG_* */
    uint64_t seq_base;          /* first seq of every key */
    uint64_t fixed_seq;         /* psSetPushSeq: the seq of every push added, 0 none */
    psPushWindow shared;        /* pushes of users without a window of their own (models) */
    psUser **users;             /* users with requests on this client */
    int nusers, usercap;
    int ids_ef;                 /* 1: key pulls and pushes by ids may send IDFORMAT EF; 0
                                   after PS_FLAG_RAW_IDS / PS_RAW_IDS=1 or a server without
                                   it (batch_int.h "Compressed ids") */
    struct idpair *pairs;       /* sort scratch */
    size_t paircap;
    unsigned char *rowtmp;      /* push scratch: blob rows in sorted order */
    size_t rowcap;
};

/* A growable buffer of 'n' items of 'size' bytes at '*p' with room '*cap'.
 * 0 or -1 (out of memory, '*p' unchanged). */
static inline int grow(void *pp, size_t *cap, size_t n, size_t size) {
    void **p = pp;
    void *np;
    if (*cap >= n) return 0;
    if ((np = realloc(*p, (n < 16 ? 16 : n) * size)) == NULL) return -1;
    *p = np;
    *cap = n < 16 ? 16 : n;
    return 0;
}

/* ========================================================================
 * Replies: the one place a reply is classified
 * ======================================================================== */

/* Whether 'reply' is the module's "no such key" error. */
static inline int is_nokey(const redisReply *reply) {
    return psi_reply_error(reply) == PS_PROTO_ERR_NOKEY;
}

/* Whether 'reply' is "ERR VERSION v is newer than the tensor's version now". */
static inline int is_version_ahead(const redisReply *reply) {
    return psi_reply_error(reply) == PS_PROTO_ERR_FUTURE;
}

static inline int is_stale(const redisReply *reply) {
    return psi_reply_error(reply) == PS_PROTO_ERR_STALE;
}

/* Whether 'reply' refuses an option an older server lacks (VERSION, ID). */
/* "ERR unknown option 'IDFORMAT'": a server before IDFORMAT (common/protocol.h
 * PS_PROTO_ID_FORMATS), which changed nothing. */
static inline int is_unknown_idformat(const redisReply *reply) {
    return psi_reply_error(reply) == PS_PROTO_ERR_UNKNOWN_OPT && strstr(reply->str, "'IDFORMAT'");
}

static inline int is_unknown_option(const redisReply *reply) {
    int cls = psi_reply_error(reply);
    return cls == PS_PROTO_ERR_SYNTAX || cls == PS_PROTO_ERR_UNKNOWN_OPT ||
           cls == PS_PROTO_ERR_DUP_OPT || cls == PS_PROTO_ERR_MISSING_ARG;
}

static inline void key_acked(psKey *k, uint64_t v) {
    if (!k->has_acked || v > k->acked) k->acked = v;
    k->has_acked = 1;
}

/* ========================================================================
 * Compressed ids (IDFORMAT EF, common/protocol.h PS_PROTO_ID_FORMATS)
 *
 * A key pull or push by ids of PS_IDS_EF_MIN ids or more is sorted by id
 * (stably: repeated ids keep their order, so a push sums them in the order
 * given) and sent as IDFORMAT EF when that is smaller than the raw list
 * plus the two arguments. A pull's rows then come in ascending id order:
 * the sorted positions send each to its caller's slot. A server without
 * IDFORMAT answers "ERR unknown option 'IDFORMAT'" and changes nothing: the
 * request is re-encoded raw (same sorted order, same seq) and resent, and
 * the client sends raw ids from then on (ids_ef 0).
 * ======================================================================== */

struct idpair {
    uint64_t id;
    size_t at;                  /* original index */
};

/* Sorts 'ids' (n) with their indices into bp->pairs[0 .. n), stably (equal
 * ids keep their order): an LSD radix sort, 8 bits a pass, a pass skipped
 * when every id has the same byte there (a few microseconds for a step's
 * few hundred ids, where qsort took tens). 0 or -1 (out of memory). */
static inline int sort_ids(struct psBatches *bp, const uint64_t *ids, size_t n) {
    if (grow(&bp->pairs, &bp->paircap, 2 * n, sizeof(struct idpair))) return -1;
    struct idpair *a = bp->pairs, *b = bp->pairs + n, *t;
    for (size_t i = 0; i < n; i++) {
        a[i].id = ids[i];
        a[i].at = i;
    }
    if (n == 0 || ps_idlist_sorted(ids, n)) return 0;
    for (unsigned shift = 0; shift < 64; shift += 8) {
        size_t cnt[256] = {0}, sum = 0;
        for (size_t i = 0; i < n; i++) cnt[(a[i].id >> shift) & 255]++;
        if (cnt[(a[0].id >> shift) & 255] == n) continue;
        for (int d = 0; d < 256; d++) {
            size_t c = cnt[d];
            cnt[d] = sum;
            sum += c;
        }
        for (size_t i = 0; i < n; i++) b[cnt[(a[i].id >> shift) & 255]++] = a[i];
        t = a, a = b, b = t;
    }
    if (a != bp->pairs) memcpy(bp->pairs, a, n * sizeof(struct idpair));
    return 0;
}

/* Whether sorted 'ids' (n) go as EF: the client may and it is smaller. */
static inline int ef_pays(const struct psBatches *bp, const uint64_t *ids, size_t n) {
    /* "$8\r\nIDFORMAT\r\n$2\r\nEF\r\n" */
    return bp->ids_ef && n >= PS_IDS_EF_MIN && ps_wire_ids_size(ids, n, PS_PROTO_IDFMT_EF) + 24 < 8 * n;
}

#endif /* PS_BATCH_INT_H */
