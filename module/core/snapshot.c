/* snapshot.c -- named snapshots of a tensor (see tensor.h): take, find,
 * drop, roll back, and the saved form the RDB value and the AOF rewrite
 * share (which arrays a snapshot shares, one validator for both loaders).
 * No Redis calls here. */

#include <string.h>

#include "header.h"
#include "tensor.h"

/* Snapshot array 'j' (0 values, 1 and 2 optimizer state) of 's'. */
static PSBuf **snap_array(PSSnapshot *s, int j) { return j == 0 ? &s->data : &s->opt.s[j - 1]; }

static PSBuf *snap_array_c(const PSSnapshot *s, int j) { return j == 0 ? s->data : s->opt.s[j - 1]; }

static PSBuf *live_array(const PSTensor *t, int j) { return j == 0 ? t->data : t->opt.s[j - 1]; }

/* Whether the tensor's optimizer keeps array 'j' at all. */
static int has_array(const PSTensor *t, int j) { return j == 0 || j - 1 < ps_optim_nstate(t->optim); }

PSSnapshot *PSTensor_SnapshotFind(const PSTensor *t, const char *name, size_t len) {
    for (uint32_t i = 0; i < t->nsnap; i++)
        if (t->snaps[i].namelen == len && memcmp(t->snaps[i].name, name, len) == 0)
            return &t->snaps[i];
    return NULL;
}

/* Appends a snapshot named 'name' sharing every array of the live tensor;
 * returns it, or NULL on OOM (nothing changed). */
static PSSnapshot *snap_append(PSTensor *t, const char *name, size_t len) {
    char *nm = PSTensor_DupBytes(name, len);
    if (!nm) return NULL;
    PSSnapshot *ns = PSTensor_Alloc((t->nsnap + 1) * sizeof(PSSnapshot));
    if (!ns) {
        PSTensor_Dealloc(nm);
        return NULL;
    }
    if (t->nsnap) memcpy(ns, t->snaps, t->nsnap * sizeof(PSSnapshot));
    PSTensor_Dealloc(t->snaps);
    t->snaps = ns;
    PSSnapshot *s = &t->snaps[t->nsnap++];
    s->name = nm;
    s->namelen = (uint32_t)len;
    s->version = t->version;
    s->unix_ms = 0;
    s->data = PSBuf_Retain(t->data);
    PSOptState_Share(&s->opt, &t->opt);
    return s;
}

int PSTensor_SnapshotTake(PSTensor *t, const char *name, size_t len, int64_t unix_ms) {
    PSSnapshot *s = snap_append(t, name, len);
    if (!s) return PST_ERR_OOM;
    s->unix_ms = unix_ms;
    return PST_OK;
}

int PSTensor_SnapshotDrop(PSTensor *t, const char *name, size_t len) {
    PSSnapshot *s = PSTensor_SnapshotFind(t, name, len);
    if (!s) return 0;
    PSTensor_Dealloc(s->name);
    PSBuf_Release(s->data);
    PSOptState_Release(&s->opt);
    size_t idx = (size_t)(s - t->snaps);
    memmove(&t->snaps[idx], &t->snaps[idx + 1], (t->nsnap - idx - 1) * sizeof(PSSnapshot));
    t->nsnap--;
    return 1;
}

int PSTensor_Rollback(PSTensor *t, const PSSnapshot *s) {
    PSBuf_Release(t->data);
    t->data = PSBuf_Retain(s->data);
    PSOptState_Release(&t->opt);
    PSOptState_Share(&t->opt, &s->opt);
    PSBuf_Release(t->round_acc);
    t->round_acc = NULL;
    t->round_count = 0;
    t->version++;
    return PST_OK;
}

/* ------------------------------------------------------------------------
 * Saved form
 * ---------------------------------------------------------------------- */

long PSTensor_SnapshotArrayOwner(const PSTensor *t, uint32_t i, int j) {
    if (!has_array(t, j)) return PS_SNAP_ABSENT;
    const PSBuf *b = snap_array_c(&t->snaps[i], j);
    if (b == live_array(t, j)) return PS_SNAP_LIVE;
    /* Only a buffer with other holders can be an earlier snapshot's. */
    if (b->refs > 1)
        for (uint32_t k = 0; k < i; k++)
            if (snap_array_c(&t->snaps[k], j) == b) return (long)k;
    return PS_SNAP_OWNS;
}

void PSTensor_SnapshotDescribe(const PSTensor *t, uint32_t i, PSSnapshotSaved *ss) {
    const PSSnapshot *s = &t->snaps[i];
    memset(ss, 0, sizeof(*ss));
    ss->version = s->version;
    ss->unix_ms = s->unix_ms;
    ss->step = s->opt.step;
    ss->b1pow = s->opt.b1pow;
    ss->b2pow = s->opt.b2pow;
    for (int j = 0; j < 3; j++) {
        long owner = PSTensor_SnapshotArrayOwner(t, i, j);
        if (owner == PS_SNAP_LIVE) {
            ss->flags |= PS_SNAP_SHARES_LIVE << j;
        } else if (owner >= 0) {
            ss->flags |= PS_SNAP_SHARES_EARLIER << j;
            ss->earlier[j] = (uint64_t)owner;
        }
    }
}

int PSTensor_SnapshotSavesArray(const PSTensor *t, const PSSnapshotSaved *ss, int j) {
    return has_array(t, j) &&
           !(ss->flags & ((PS_SNAP_SHARES_LIVE | PS_SNAP_SHARES_EARLIER) << j));
}

const char *PSTensor_SnapshotCheck(const PSTensor *t, const char *name, size_t namelen,
                                   const PSSnapshotSaved *ss, uint64_t max_flags) {
    if (namelen == 0 || namelen > PS_SNAP_NAME_MAX) return "bad snapshot name length";
    if (t->nsnap >= PS_LOAD_MAX_SNAPSHOTS) return "too many snapshots";
    if (PSTensor_SnapshotFind(t, name, namelen)) return "duplicate snapshot name";
    if (ss->version > t->version) return "snapshot version newer than the tensor";
    if (!PSHeader_ValidPow(ss->b1pow) || !PSHeader_ValidPow(ss->b2pow) || ss->flags > max_flags)
        return "bad snapshot header";
    for (int j = 0; j < 3; j++) {
        if (!(ss->flags & (PS_SNAP_SHARES_EARLIER << j))) continue;
        if ((ss->flags & (PS_SNAP_SHARES_LIVE << j)) || ss->earlier[j] >= t->nsnap)
            return "bad snapshot sharing";
    }
    return NULL;
}

int PSTensor_SnapshotAdd(PSTensor *t, const char *name, size_t namelen, const PSSnapshotSaved *ss,
                         PSBuf *own[3]) {
    PSBuf *arr[3] = {NULL, NULL, NULL};
    int st = PST_ERR_OOM;
    for (int j = 0; j < 3; j++) {
        if (!has_array(t, j)) continue;
        if (ss->flags & (PS_SNAP_SHARES_LIVE << j)) {
            arr[j] = PSBuf_Retain(live_array(t, j));
        } else if (ss->flags & (PS_SNAP_SHARES_EARLIER << j)) {
            arr[j] = PSBuf_Retain(snap_array_c(&t->snaps[ss->earlier[j]], j));
        } else if (own && own[j]) {
            arr[j] = own[j];
            own[j] = NULL;
        } else if (!(arr[j] = PSBuf_New(t->n, 1))) {
            goto done;
        }
    }
    PSSnapshot *s = snap_append(t, name, namelen);
    if (!s) goto done;
    for (int j = 0; j < 3; j++) {
        PSBuf **slot = snap_array(s, j);
        PSBuf_Release(*slot);
        *slot = arr[j];
        arr[j] = NULL;
    }
    s->version = ss->version;
    s->unix_ms = ss->unix_ms;
    s->opt.step = ss->step;
    s->opt.b1pow = ss->b1pow;
    s->opt.b2pow = ss->b2pow;
    st = PST_OK;
done:
    for (int j = 0; j < 3; j++) {
        PSBuf_Release(arr[j]);
        if (own) {
            PSBuf_Release(own[j]);
            own[j] = NULL;
        }
    }
    return st;
}
