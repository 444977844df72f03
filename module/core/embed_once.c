/* embed_once.c -- a table push with its exactly-once and staleness rules
 * (PSEmbed_PushOnce, embed.h): the table's counterpart of PSTensor_Push's
 * steps 1, 2 and 6, around PSEmbed_Push.
 *
 * Pure core: no Redis calls. The exactly-once set (dedup.h) and the
 * staleness bound belong to the key's value (embed_glue.h), so they come in
 * as arguments; everything here is a function of them, the table and the
 * push, so a master, its replicas and an AOF replay decide alike. */

#include <string.h>

#include "dedup.h"
#include "embed.h"

int PSEmbed_PushOnce(PSEmbed *t, PSDedupSet *dd, int64_t maxstale, const PSEmbedPush *p,
                     PSEmbedPushResult *res) {
    memset(res, 0, sizeof(*res));
    /* 1. Exactly once: the one lookup of the push; 'e' stays valid until
     * the set changes in step 4. */
    PSDedupEntry *e = p->id ? PSDedupSet_Find(dd, p->id, p->idlen) : NULL;
    if (e && PSDedupEntry_Seen(e, p->seq)) {
        res->version = e->version;
        return PSE_DUPLICATE;
    }
    /* 2. Staleness. */
    const uint64_t cur = PSEmbed_Version(t);
    if (p->has_version) {
        if (p->version > cur) return PSE_ERR_FUTURE;
        res->staleness = cur - p->version;
        if (maxstale >= 0 && res->staleness > (uint64_t)maxstale) return PSE_ERR_STALE;
    }
    /* 3. A new client's entry gets its room before the push, so that
     * nothing can fail after it. */
    char *idcopy = NULL;
    if (p->id && !e && dd->max > 0 && !(idcopy = PSDedupSet_Prepare(dd, p->id, p->idlen)))
        return PSE_ERR_OOM;
    const uint64_t staleness = res->staleness;
    const int st = PSEmbed_Push(t, p->ids, p->k, p->grad, res);
    if (st != PSE_OK) {
        PSDedupSet_Discard(idcopy);
        return st;
    }
    res->staleness = staleness;
    /* 4. Record the applied push. */
    if (e) PSDedupSet_Applied(dd, e, p->seq, res->version);
    else if (idcopy) PSDedupSet_Commit(dd, idcopy, p->idlen, p->seq, 0, res->version);
    return PSE_OK;
}
