/* wire.c -- RESP encoding of the commands libps sends (see wire.h). */

#include "wire.h"

#include "idlist.h"
#include "protocol.h"

#include <stdio.h>
#include <string.h>

/* A bounded appender: writes what fits, always counts what was asked. */
typedef struct out {
    char *buf;
    size_t cap, len;
} out;

static void put(out *o, const void *p, size_t n) {
    if (o->len < o->cap) {
        size_t k = o->cap - o->len < n ? o->cap - o->len : n;
        memcpy(o->buf + o->len, p, k);
    }
    o->len += n;
}

/* "<c><n>\r\n", the header of an array (c '*') or a bulk string (c '$'). */
static void put_header(out *o, char c, unsigned long long n) {
    char h[32];
    int k = snprintf(h, sizeof(h), "%c%llu\r\n", c, n);
    put(o, h, (size_t)k);
}

static void put_arg(out *o, const char *s, size_t n) {
    put_header(o, '$', n);
    put(o, s, n);
    put(o, "\r\n", 2);
}

static void put_str(out *o, const char *s) { put_arg(o, s, strlen(s)); }

/* The keyword of a PS.PUSHGRAD option (common/protocol.h). */
static void put_opt(out *o, ps_proto_push_option k) { put_str(o, ps_proto_push_option_name(k)); }

static void put_u64(out *o, uint64_t v) {
    char b[24];
    int k = snprintf(b, sizeof(b), "%llu", (unsigned long long)v);
    put_arg(o, b, (size_t)k);
}

/* The exactly-once options of a push: [VERSION v] [ID client seq]. */
static void put_version_id(out *t, int version, uint64_t v, int id, const char *client,
                           uint64_t seq) {
    if (version) {
        put_opt(t, PS_PROTO_PUSH_VERSION);
        put_u64(t, v);
    }
    if (id) {
        put_opt(t, PS_PROTO_PUSH_ID);
        put_str(t, client);
        put_u64(t, seq);
    }
}

size_t ps_wire_pushgrad_head_size(size_t keylen) { return keylen + 96; }

static void put_ids(out *o, const uint64_t *ids, size_t n, int idfmt);

int ps_wire_pushgrad(const psWirePush *a, char *head, size_t headcap, size_t *headlen,
                     char *tail, size_t tailcap, size_t *taillen) {
    int version = a->has_version && !(a->flags & PS_WIRE_NO_VERSION);
    int id = !(a->flags & PS_WIRE_NO_ID);
    /* F32 is the server's default format: leaving FORMAT out saves the
     * server two arguments' parsing per push (a third of a small push). */
    int fmtarg = a->fmt != PS_FMT_F32;
    int ids = a->ids != NULL, ef = ids && a->idfmt == PS_PROTO_IDFMT_EF;
    int argc = 3 + (fmtarg ? 2 : 0) + (ids ? 2 : 0) + (ef ? 2 : 0) + (version ? 2 : 0) +
               (id ? 3 : 0) + (a->scale != 1.0f ? 2 : 0);
    out h = {head, headcap, 0}, t = {tail, tailcap, 0};

    put_header(&h, '*', (unsigned long long)argc);
    put_str(&h, "PS.PUSHGRAD");
    put_arg(&h, a->key, a->keylen);
    put_header(&h, '$', a->bloblen);
    put(&t, "\r\n", 2);
    if (fmtarg) {
        put_opt(&t, PS_PROTO_PUSH_FORMAT);
        put_str(&t, ps_format_name(a->fmt));
    }
    if (ids) {
        put_opt(&t, PS_PROTO_PUSH_IDS);
        put_ids(&t, a->ids, a->nids, a->idfmt);
    }
    put_version_id(&t, version, a->version, id, a->client_id, a->seq);
    if (a->scale != 1.0f) {
        char b[32];
        int k = snprintf(b, sizeof(b), "%.9g", (double)a->scale);
        put_opt(&t, PS_PROTO_PUSH_SCALE);
        put_arg(&t, b, (size_t)k);
    }
    *headlen = h.len;
    *taillen = t.len;
    return h.len <= headcap && t.len <= tailcap ? 0 : -1;
}

size_t ps_wire_pull(const psWirePull *a, char *buf, size_t cap) {
    out o = {buf, cap, 0};
    if (!a->key) { /* the module probe */
        put_header(&o, '*', 1);
        put_str(&o, "PS.PULL");
        return o.len;
    }
    int wait = a->minversion > 0, ids = a->ids != NULL;
    int ef = ids && a->idfmt == PS_PROTO_IDFMT_EF;
    put_header(&o, '*', 2 + (ids ? 2 : 0) + (ef ? 2 : 0) + (a->fmt != PS_FMT_F32 ? 2 : 0) +
                            (wait ? 4 : 0) + (a->at ? 2 : 0));
    put_str(&o, "PS.PULL");
    put_arg(&o, a->key, a->keylen);
    if (ids) {
        put_str(&o, "IDS");
        put_ids(&o, a->ids, a->nids, a->idfmt);
    }
    if (a->fmt != PS_FMT_F32) {
        put_str(&o, "FORMAT");
        put_str(&o, ps_format_name(a->fmt));
    }
    if (wait) {
        put_str(&o, "MINVERSION");
        put_u64(&o, a->minversion);
        put_str(&o, "TIMEOUT");
        put_u64(&o, (uint64_t)(a->timeout_ms > 0 ? a->timeout_ms : 0));
    }
    if (a->at) {
        put_str(&o, "AT");
        put_str(&o, a->at);
    }
    return o.len;
}

size_t ps_wire_snapshot(const char *key, size_t keylen, const char *name, char *buf, size_t cap) {
    out o = {buf, cap, 0};
    put_header(&o, '*', 3);
    put_str(&o, "PS.SNAPSHOT");
    put_arg(&o, key, keylen);
    put_str(&o, name);
    return o.len;
}

size_t ps_wire_ids_size(const uint64_t *ids, size_t nids, int idfmt) {
    uint64_t base;
    unsigned b;
    if (idfmt != PS_PROTO_IDFMT_EF) return 8 * nids;
    return ps_idlist_plan(ids, nids, &base, &b);
}

/* The ids as one bulk string: little-endian uint64s (RAW; the host is
 * little-endian: codec.h refuses to build otherwise), or an Elias-Fano list
 * (EF), followed by "IDFORMAT EF". */
static void put_ids(out *o, const uint64_t *ids, size_t n, int idfmt) {
    if (idfmt != PS_PROTO_IDFMT_EF) {
        put_header(o, '$', (unsigned long long)(8 * n));
        put(o, ids, 8 * n);
        put(o, "\r\n", 2);
        return;
    }
    uint64_t base;
    unsigned b;
    size_t size = ps_idlist_plan(ids, n, &base, &b);
    put_header(o, '$', (unsigned long long)size);
    if (o->len <= o->cap && size <= o->cap - o->len)
        ps_idlist_encode_with(ids, n, base, b, (unsigned char *)o->buf + o->len, size);
    o->len += size;
    put(o, "\r\n", 2);
    put_opt(o, PS_PROTO_PUSH_IDFORMAT);
    put_str(o, ps_proto_idformat_name(PS_PROTO_IDFMT_EF));
}

/* ---- a relay's ACCUM tensors ------------------------------------------- */

int ps_wire_create_argv(const psWireCreate *a, char nb[][24], const char **argv, size_t *argl,
                        int maxargs) {
    int argc = 0, nbi = 0;
    if (a->ndim < 0 || a->ndim > 8 || a->nopts < 0 ||
        (a->ndim ? 3 + a->ndim : 5) + a->nopts + (a->nx ? 1 : 0) > maxargs)
        return -1;
    argv[argc++] = "PS.CREATE";
    argv[argc++] = a->key;
    if (a->ndim > 0) {
        argv[argc++] = "SHAPE";
        for (int i = 0; i < a->ndim; i++) {
            snprintf(nb[nbi], 24, "%llu", (unsigned long long)a->dims[i]);
            argv[argc++] = nb[nbi++];
        }
    } else {
        argv[argc++] = "EMBEDDING";
        argv[argc++] = "DIM";
        snprintf(nb[nbi], 24, "%d", a->dim);
        argv[argc++] = nb[nbi++];
    }
    for (int i = 0; i < a->nopts; i++) {
        if (i == a->seed_at) {
            snprintf(nb[nbi], 24, "%llu", (unsigned long long)a->seed);
            argv[argc++] = nb[nbi++];
        } else {
            argv[argc++] = a->opts[i];
        }
    }
    if (a->nx) argv[argc++] = "NX";
    for (int i = 0; i < argc; i++) argl[i] = i == 1 ? a->keylen : strlen(argv[i]);
    return argc;
}

size_t ps_wire_create(const psWireCreate *a, char *buf, size_t cap) {
    const char *argv[PS_WIRE_CREATE_MAXARGS];
    size_t argl[PS_WIRE_CREATE_MAXARGS];
    char nb[PS_WIRE_CREATE_MAXARGS][24];
    int argc = ps_wire_create_argv(a, nb, argv, argl, PS_WIRE_CREATE_MAXARGS);
    out o = {buf, cap, 0};
    if (argc < 0) return 0;
    put_header(&o, '*', (unsigned long long)argc);
    for (int i = 0; i < argc; i++) put_arg(&o, argv[i], argl[i]);
    return o.len;
}

size_t ps_wire_accum_take(const char *key, size_t keylen, uint64_t mincount, uint64_t seqfloor,
                          uint64_t maxround, int64_t maxbacklog, char *buf, size_t cap) {
    out o = {buf, cap, 0};
    put_header(&o, '*', maxbacklog >= 0 ? 10 : 8);
    put_str(&o, "PS.TAKE");
    put_arg(&o, key, keylen);
    put_str(&o, "MINCOUNT");
    put_u64(&o, mincount);
    put_str(&o, "SEQFLOOR");
    put_u64(&o, seqfloor);
    put_str(&o, "MAXROUND");
    put_u64(&o, maxround);
    if (maxbacklog >= 0) {
        put_str(&o, "MAXBACKLOG");
        put_u64(&o, (uint64_t)maxbacklog);
    }
    return o.len;
}

size_t ps_wire_accum_wait(const char *key, size_t keylen, uint64_t mincount, uint64_t timeout_ms,
                          char *buf, size_t cap) {
    out o = {buf, cap, 0};
    put_header(&o, '*', 6);
    put_str(&o, "PS.TAKEWAIT");
    put_arg(&o, key, keylen);
    put_str(&o, "MINCOUNT");
    put_u64(&o, mincount);
    put_str(&o, "TIMEOUT");
    put_u64(&o, timeout_ms);
    return o.len;
}

/* "CMD key seq": the acknowledgement of a take (PS.TAKEACK, PS.DELTAACK). */
static size_t key_seq_cmd(const char *cmd, const char *key, size_t keylen, uint64_t seq,
                          char *buf, size_t cap) {
    out o = {buf, cap, 0};
    put_header(&o, '*', 3);
    put_str(&o, cmd);
    put_arg(&o, key, keylen);
    put_u64(&o, seq);
    return o.len;
}

size_t ps_wire_accum_ack(const char *key, size_t keylen, uint64_t seq, char *buf, size_t cap) {
    return key_seq_cmd("PS.TAKEACK", key, keylen, seq, buf, cap);
}

size_t ps_wire_accum_mirror_head(const char *key, size_t keylen, uint64_t version,
                                 size_t bloblen, char *buf, size_t cap) {
    out o = {buf, cap, 0};
    put_header(&o, '*', 4);
    put_str(&o, "PS.MIRROR");
    put_arg(&o, key, keylen);
    put_u64(&o, version);
    put_header(&o, '$', bloblen);
    return o.len;
}

int ps_wire_score_argv(const char *key, size_t keylen, int model, const uint32_t *counts,
                       size_t n, const uint64_t *ids, size_t nids, const float *vals, float bias,
                       const uint32_t *fields, uint32_t nfields, char *biasbuf, size_t biascap,
                       const char **argv, size_t *argl) {
    int argc = 0;
#define ARG_(p, l) (argv[argc] = (const char *)(p), argl[argc++] = (l))
#define STR_(s) ARG_(s, strlen(s))
    STR_("PS.SCORE");
    ARG_(key, keylen);
    STR_("MODEL");
    STR_(model == 0 ? "LR" : model == 1 ? "FM" : "MLP");
    STR_("COUNTS");
    ARG_(counts, 4 * n); /* little-endian host (codec.h) */
    STR_("IDS");
    ARG_(ids, 8 * nids);
    if (vals) {
        STR_("VALS");
        ARG_(vals, 4 * nids);
    }
    if (model == 2) {
        STR_("FIELDS");
        ARG_(fields, 4 * nids);
        STR_("FIELDCOUNT");
        int fl = snprintf(biasbuf, biascap, "%u", nfields);
        ARG_(biasbuf, fl > 0 && (size_t)fl < biascap ? (size_t)fl : 0);
        return argc;
    }
    STR_("BIAS");
    /* %.9g round-trips a float32 through the server's double -> float. */
    int bl = snprintf(biasbuf, biascap, "%.9g", (double)bias);
    ARG_(biasbuf, bl > 0 && (size_t)bl < biascap ? (size_t)bl : 0);
#undef STR_
#undef ARG_
    return argc;
}

/* Prints 'v' at *p (NUL-terminated, advancing *p) and returns where it starts. */
static const char *print_arg_u64(char **p, uint64_t v, size_t *len) {
    char *start = *p;
    int n = sprintf(start, "%llu", (unsigned long long)v);
    *len = (size_t)n;
    *p += n + 1;
    return start;
}

int ps_wire_scanrows_argv(const char *key, size_t keylen, uint64_t cursor, uint64_t since,
                          uint64_t count, ps_format fmt, int gone, char *numbuf,
                          const char **argv, size_t *argl) {
    int argc = 0;
    char *p = numbuf;
#define ARG_(s, l) (argv[argc] = (s), argl[argc++] = (l))
#define STR_(s) ARG_(s, strlen(s))
#define NUM_(v) (argv[argc] = print_arg_u64(&p, (v), &argl[argc]), argc++)
    STR_("PS.SCANROWS");
    ARG_(key, keylen);
    NUM_(cursor);
    STR_("SINCE");
    NUM_(since);
    STR_("COUNT");
    NUM_(count);
    STR_("FORMAT");
    STR_(ps_format_name(fmt));
    if (gone) STR_("GONE");
    return argc;
}

int ps_wire_tombstones_argv(const char *key, size_t keylen, uint64_t cursor, uint64_t since,
                            uint64_t count, char *numbuf, const char **argv, size_t *argl) {
    int argc = 0;
    char *p = numbuf;
    STR_("PS.TOMBSTONES");
    ARG_(key, keylen);
    NUM_(cursor);
    STR_("SINCE");
    NUM_(since);
    STR_("COUNT");
    NUM_(count);
    return argc;
#undef NUM_
#undef STR_
#undef ARG_
}

/* ---- the ring (issue #22, ring.c) -------------------------------------- */

/* "%.17g" of a double: round-trips exactly through the server's strtod. */
static void put_double(out *o, double v) {
    char b[40];
    int k = snprintf(b, sizeof(b), "%.17g", v);
    put_arg(o, b, (size_t)k);
}

size_t ps_wire_ring(const psWireRing *a, char *buf, size_t cap) {
    out o = {buf, cap, 0};
    size_t argc = 3;
    if (a->op == PS_WIRE_RING_TRACK) argc += 1 + (a->maxqueue >= 0 ? 2 : 0) + (a->maxlag >= 0 ? 2 : 0);
    else if (a->op == PS_WIRE_RING_JOIN) argc += 2 + 3 * a->nfrom + (a->keepown ? 1 : 0);
    else if (a->op == PS_WIRE_RING_ROWS || a->op == PS_WIRE_RING_JOINROWS) argc += 3;
    else if (a->op == PS_WIRE_RING_JOINBEGIN) argc += 1 + 3 * a->nfrom;
    else if (a->op == PS_WIRE_RING_JOINEND) argc += 2;
    put_header(&o, '*', argc);
    put_str(&o, "PS.RING");
    put_arg(&o, a->key, a->keylen);
    switch (a->op) {
    case PS_WIRE_RING_TRACK:
        put_str(&o, "TRACK");
        put_str(&o, a->origin);
        if (a->maxqueue >= 0) {
            put_str(&o, "MAXQUEUE");
            put_u64(&o, (uint64_t)a->maxqueue);
        }
        if (a->maxlag >= 0) {
            put_str(&o, "MAXLAG");
            put_u64(&o, (uint64_t)a->maxlag);
        }
        break;
    case PS_WIRE_RING_STATE: put_str(&o, "STATE"); break;
    case PS_WIRE_RING_UNTRACK: put_str(&o, "UNTRACK"); break;
    case PS_WIRE_RING_ROWS:
        put_str(&o, "ROWS");
        put_u64(&o, a->u1);
        put_str(&o, "COUNT");
        put_u64(&o, a->u2);
        break;
    case PS_WIRE_RING_JOINBEGIN:
        put_str(&o, "JOINBEGIN");
        put_str(&o, a->origin);
        for (size_t i = 0; i < a->nfrom; i++) {
            put_str(&o, "FROM");
            put_str(&o, a->from_origin[i]);
            put_u64(&o, a->from_seq[i]);
        }
        break;
    case PS_WIRE_RING_JOINROWS: /* little-endian host (codec.h) */
        put_str(&o, "JOINROWS");
        put_u64(&o, a->u1);
        put_arg(&o, (const char *)(const void *)a->ids, a->nids * sizeof(uint64_t));
        put_arg(&o, (const char *)(const void *)a->values, a->nvalues * sizeof(float));
        break;
    case PS_WIRE_RING_JOINEND:
        put_str(&o, "JOINEND");
        put_u64(&o, a->u1);
        put_u64(&o, a->u2);
        break;
    default:
        put_str(&o, "JOIN");
        put_str(&o, a->origin);
        put_arg(&o, (const char *)(const void *)a->values, a->nvalues * sizeof(float));
        for (size_t i = 0; i < a->nfrom; i++) {
            put_str(&o, "FROM");
            put_str(&o, a->from_origin[i]);
            put_u64(&o, a->from_seq[i]);
        }
        if (a->keepown) put_str(&o, "KEEPOWN");
        break;
    }
    return o.len;
}

size_t ps_wire_delta_take(const char *key, size_t keylen, uint64_t seqfloor, double threshold,
                          uint64_t maxelems, char *buf, size_t cap) {
    out o = {buf, cap, 0};
    put_header(&o, '*', 2 + (seqfloor ? 2 : 0) + (threshold > 0 ? 2 : 0) + (maxelems ? 2 : 0));
    put_str(&o, "PS.DELTATAKE");
    put_arg(&o, key, keylen);
    if (seqfloor) {
        put_str(&o, "SEQFLOOR");
        put_u64(&o, seqfloor);
    }
    if (threshold > 0) {
        put_str(&o, "THRESHOLD");
        put_double(&o, threshold);
    }
    if (maxelems) {
        put_str(&o, "MAXELEMS");
        put_u64(&o, maxelems);
    }
    return o.len;
}

size_t ps_wire_delta_ack(const char *key, size_t keylen, uint64_t seq, char *buf, size_t cap) {
    return key_seq_cmd("PS.DELTAACK", key, keylen, seq, buf, cap);
}

size_t ps_wire_apply_delta_prev(const char *key, size_t keylen, const char *origin, uint64_t seq,
                                const uint32_t *idx, const float *vals, size_t count,
                                int64_t hops, uint64_t prev, char *buf, size_t cap) {
    return ps_wire_apply_delta_blobs(key, keylen, origin, seq, idx, count * sizeof(uint32_t), vals,
                                     count * sizeof(float), hops, prev, buf, cap);
}

size_t ps_wire_apply_delta_blobs(const char *key, size_t keylen, const char *origin, uint64_t seq,
                                 const void *idx, size_t idxlen, const void *vals, size_t vlen,
                                 int64_t hops, uint64_t prev, char *buf, size_t cap) {
    out o = {buf, cap, 0};
    put_header(&o, '*', 7 + (hops >= 0 ? 2 : 0) + (prev ? 2 : 0));
    put_str(&o, "PS.APPLYDELTA");
    put_arg(&o, key, keylen);
    put_str(&o, "ID");
    put_str(&o, origin);
    put_u64(&o, seq);
    /* little-endian host (codec.h) */
    put_arg(&o, (const char *)idx, idxlen);
    put_arg(&o, (const char *)vals, vlen);
    if (hops >= 0) {
        put_str(&o, "HOPS");
        put_u64(&o, (uint64_t)hops);
    }
    if (prev) {
        put_str(&o, "PREV");
        put_u64(&o, prev);
    }
    return o.len;
}

size_t ps_wire_delta_fwd(const char *key, size_t keylen, char *buf, size_t cap) {
    out o = {buf, cap, 0};
    put_header(&o, '*', 2);
    put_str(&o, "PS.DELTAFWD");
    put_arg(&o, key, keylen);
    return o.len;
}

size_t ps_wire_info(const char *key, size_t keylen, char *buf, size_t cap) {
    out o = {buf, cap, 0};
    put_header(&o, '*', 2);
    put_str(&o, "PS.INFO");
    put_arg(&o, key, keylen);
    return o.len;
}

size_t ps_wire_delta_fwdack(const char *key, size_t keylen, const char *origin, uint64_t seq,
                            char *buf, size_t cap) {
    out o = {buf, cap, 0};
    put_header(&o, '*', 4);
    put_str(&o, "PS.DELTAFWDACK");
    put_arg(&o, key, keylen);
    put_str(&o, origin);
    put_u64(&o, seq);
    return o.len;
}
