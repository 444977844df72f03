/* batch.c -- the batch layer (batch.h): keys, the users (models, tables)
 * attached to a client, and the layer's part of a client (its options, the
 * shared push window, whether any push is in flight). Key pulls are in
 * batch_pull.c, push groups and their WAITs in batch_push.c; what they
 * share in batch_int.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "batch_int.h"
#include "clock.h"

void psi_key_take_pulled(psKey *k) {
    if (!k->seen_now) return;
    k->version = k->seen;
    k->has_version = 1;
}

/* ========================================================================
 * Users on a client
 * ======================================================================== */

static void window_free(psPushWindow *w) {
    for (int i = 0; i < w->n; i++) {
        psPushGroup *g = &w->g[i];
        for (int k = 0; k < g->cap; k++) {
            free(g->items[k].blob);
            free(g->items[k].ids);
            free(g->items[k].head);
            free(g->items[k].tail);
        }
        free(g->items);
    }
    free(w->g);
    w->g = NULL;
    w->n = 0;
}

static int user_busy(const psUser *u) {
    const psPushWindow *w;
    if (u->pull.pending) return 1;
    if (u->client == NULL) return 0;
    w = u->own_window ? &u->own : &u->client->priv->batch->shared;
    for (int i = 0; i < w->n; i++)
        if (w->g[i].in_use && w->g[i].user == u) return 1;
    return 0;
}

static int user_idle(psClient *c, void *arg) {
    (void)c;
    return !user_busy(arg);
}

void psi_user_init(psUser *u, const char *kind, const char *name, const char *nokey_hint,
                   int own_window) {
    memset(u, 0, sizeof(*u));
    u->kind = kind;
    u->name = name;
    u->nokey_hint = nokey_hint ? nokey_hint : "";
    u->own_window = own_window;
}

void psi_user_detach(psUser *u) {
    psClient *c = u->client;
    struct psBatches *bp;
    if (c == NULL) return;
    bp = c->priv->batch;
    /* A pull in flight is abandoned (its destinations may be gone already);
     * pushes are waited for, so they count and are not lost. */
    u->pull.live = 0;
    if (user_busy(u) && psi_run(c, user_idle, u) != 0 && user_busy(u)) {
        fprintf(stderr, "libps: %s '%s' freed with requests the client cannot finish\n", u->kind,
                u->name);
        abort();
    }
    u->pull.open = 0;
    for (int i = 0; i < bp->nusers; i++)
        if (bp->users[i] == u) {
            bp->users[i] = bp->users[--bp->nusers];
            break;
        }
    u->client = NULL;
}

int psi_user_attach(psClient *c, psUser *u) {
    struct psBatches *bp = c->priv->batch;
    if (u->client == c) return 0;
    if (u->client) psi_user_detach(u);
    if (bp->nusers == bp->usercap) {
        int cap = bp->usercap ? bp->usercap * 2 : 4;
        psUser **nu = realloc(bp->users, sizeof(*nu) * (size_t)cap);
        if (nu == NULL) {
            psi_set_error(c, PS_ERR_OOM, "out of memory");
            return -1;
        }
        bp->users = nu;
        bp->usercap = cap;
    }
    bp->users[bp->nusers++] = u;
    u->client = c;
    return 0;
}

void psi_user_free(psUser *u) {
    psi_user_detach(u);
    window_free(&u->own);
}

int psi_batches_init(psClient *c, const psOptions *o) {
    struct psBatches *bp = calloc(1, sizeof(*bp));
    if (bp == NULL) return -1;
    c->priv->batch = bp;
    bp->push_window = o->push_window > 0 ? o->push_window : PS_DEFAULT_PUSH_WINDOW;
    bp->flags = o->flags;
    const char *raw = getenv("PS_RAW_IDS");
    bp->ids_ef = !(o->flags & PS_FLAG_RAW_IDS) && !(raw && strcmp(raw, "1") == 0);
    bp->seq_base = ps_wall_us();
    bp->shared.n = bp->push_window;
    bp->shared.g = calloc((size_t)bp->shared.n, sizeof(psPushGroup));
    if (bp->shared.g == NULL) {
        bp->shared.n = 0;
        return -1;
    }
    return 0;
}

int psSetPushSeq(psClient *c, uint64_t seq) {
    if (c == NULL || c->priv->batch == NULL) return PS_ERR;
    c->priv->batch->fixed_seq = seq;
    return PS_OK;
}

void psi_batches_free(psClient *c) {
    struct psBatches *bp = c->priv->batch;
    if (bp == NULL) return;
    /* The engine and its requests go: every user forgets them. */
    for (int i = 0; i < bp->nusers; i++) {
        psUser *u = bp->users[i];
        u->client = NULL;
        u->pull.pending = 0;
        u->pull.open = 0;
        u->pull.live = 0;
        for (int k = 0; k < u->own.n; k++) u->own.g[k].in_use = 0;
    }
    free(bp->users);
    free(bp->pairs);
    free(bp->rowtmp);
    window_free(&bp->shared);
    free(bp);
    c->priv->batch = NULL;
}

static int window_busy(const psPushWindow *w) {
    for (int i = 0; i < w->n; i++)
        if (w->g[i].in_use) return 1;
    return 0;
}

int psi_batches_idle(psClient *c, void *arg) {
    struct psBatches *bp = c->priv->batch;
    (void)arg;
    if (window_busy(&bp->shared)) return 0;
    for (int i = 0; i < bp->nusers; i++)
        if (window_busy(&bp->users[i]->own)) return 0;
    return 1;
}
