/* ring_table_io.c -- the ring state of a table (ring_table.h) as part of
 * its value (type_embed.c calls these): RDB (PS_EMBED_ENCVER_RING), the
 * AOF rewrite's PS._RESTORE ERING pieces (their replay: cmd_ring.c), the
 * digest, MEMORY USAGE, COPY and free. The state travels as the one
 * canonical byte string of PSRingTable_Serialize. */

#include <string.h>

#include "embed_glue.h"
#include "ring_table.h"

/* The ring state's bytes (PSRingTable_Serialize), or NULL (*len 0) when
 * untracked or out of memory (*oom). Free with RedisModule_Free. */
static unsigned char *ring_bytes(const PSEmbedValue *v, size_t *len, int *oom) {
    *len = 0;
    *oom = 0;
    if (!v->ring) return NULL;
    const size_t n = PSRingTable_SerialSize(v->ring);
    unsigned char *b = RedisModule_TryAlloc(n);
    if (!b) {
        *oom = 1;
        return NULL;
    }
    PSRingTable_Serialize(v->ring, b);
    *len = n;
    return b;
}

/* RDB (PS_EMBED_ENCVER_RING): the length (0: untracked), then the bytes in
 * pieces of at most PS_EMBED_CHUNK_BYTES. */
void ps_ring_table_save(RedisModuleIO *io, const PSEmbedValue *v) {
    size_t len;
    int oom;
    unsigned char *b = ring_bytes(v, &len, &oom);
    if (oom) RedisModule_LogIOError(io, "warning", "ps-embeds: out of memory saving the ring state");
    RedisModule_SaveUnsigned(io, len);
    for (size_t off = 0; off < len; off += PS_EMBED_CHUNK_BYTES) {
        const size_t cnt = len - off < PS_EMBED_CHUNK_BYTES ? len - off : PS_EMBED_CHUNK_BYTES;
        RedisModule_SaveStringBuffer(io, (const char *)b + off, cnt);
    }
    RedisModule_Free(b);
}

const char *ps_ring_table_attach(PSEmbedValue *v, const unsigned char *b, size_t len) {
    const char *why = NULL;
    PSRingTable *r = PSRingTable_Deserialize(v->t, b, len, &why);
    if (!r) return why;
    PSRingTable_Free(v->ring);
    v->ring = r;
    return NULL;
}

const char *ps_ring_table_load(RedisModuleIO *io, PSEmbedValue *v) {
    const uint64_t len = RedisModule_LoadUnsigned(io);
    if (RedisModule_IsIOError(io)) return "truncated ring state";
    if (!len) return NULL;
    /* The buffer grows with the bytes actually read: a payload claiming a
     * huge state must bring it. */
    unsigned char *b = NULL;
    size_t have = 0;
    const char *why = NULL;
    while (have < len && !why) {
        size_t cl = 0;
        char *p = RedisModule_LoadStringBuffer(io, &cl);
        const uint64_t want = len - have < PS_EMBED_CHUNK_BYTES ? len - have : PS_EMBED_CHUNK_BYTES;
        unsigned char *nb = NULL;
        if (RedisModule_IsIOError(io) || !p || cl != want) why = "bad ring state chunk";
        else if (!(nb = RedisModule_TryAlloc(have + cl))) why = "out of memory";
        if (nb) {
            if (have) memcpy(nb, b, have);
            memcpy(nb + have, p, cl);
            RedisModule_Free(b);
            b = nb;
            have += cl;
        }
        if (p) RedisModule_Free(p);
    }
    if (!why) why = ps_ring_table_attach(v, b, have);
    RedisModule_Free(b);
    return why;
}

/* AOF rewrite: PS._RESTORE key ERING offset total piece, in order. */
void ps_ring_table_aof(RedisModuleIO *aof, RedisModuleString *key, const PSEmbedValue *v) {
    size_t len;
    int oom;
    unsigned char *b = ring_bytes(v, &len, &oom);
    if (oom) RedisModule_LogIOError(aof, "warning", "ps-embeds: out of memory rewriting the ring state");
    for (size_t off = 0; off < len; off += PS_EMBED_CHUNK_BYTES) {
        const size_t cnt = len - off < PS_EMBED_CHUNK_BYTES ? len - off : PS_EMBED_CHUNK_BYTES;
        RedisModule_EmitAOF(aof, "ps._restore", "scllb", key, "ERING", (long long)off,
                            (long long)len, (const char *)b + off, cnt);
    }
    RedisModule_Free(b);
}

void ps_ring_table_digest(RedisModuleDigest *md, const PSEmbedValue *v) {
    if (!v->ring) return;
    size_t len;
    int oom;
    unsigned char *b = ring_bytes(v, &len, &oom);
    RedisModule_DigestAddStringBuffer(md, "ring", 4);
    if (b) RedisModule_DigestAddStringBuffer(md, (const char *)b, len);
    else RedisModule_DigestAddLongLong(md, -2); /* out of memory: visibly not a state */
    RedisModule_Free(b);
}

size_t ps_ring_table_mem(const PSEmbedValue *v) {
    return PSRingTable_MemUsage(v->ring) + v->ringload_have; /* received, not claimed */
}

void ps_ring_table_free(PSEmbedValue *v) {
    PSRingTable_Free(v->ring);
    v->ring = NULL;
    RedisModule_Free(v->ringload);
    v->ringload = NULL;
}

int ps_ring_table_copy(PSEmbedValue *dst, const PSEmbedValue *src) {
    if (!src->ring) return 0;
    return (dst->ring = PSRingTable_Clone(src->ring, dst->t)) ? 0 : -1;
}
